//! Device changes of a mirror (offline and online, replace) and the resilvers they start, on
//! real pools on sparse files: after the resilver, the side that came back or was replaced
//! must hold every block, so a scrub right after finds nothing to repair and the side alone
//! reads every file right. Each test is one deterministic sequence found by tarn-stress.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use tarn::pool::scan::{ScanFunction, ScanPhys, ScanState};
use tarn::pool::{Pool, VdevSpec};

const POOL: &str = "devres";

fn side(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

fn new_mirror(dir: &Path) -> Pool {
    create_pool(
        dir,
        POOL,
        vec![VdevSpec::Mirror(vec![
            side(dir, "a.img"),
            side(dir, "b.img"),
        ])],
        tiny(),
    )
}

/// Wait for the scan of kind `function` to end and return its persisted state.
fn finished_scan(pool: &Pool, function: ScanFunction) -> ScanPhys {
    pool.core.wait_scan(function).unwrap();
    pool.sync().unwrap();
    let phys = pool.core.scan_status().expect("a scan ran").phys;
    assert_eq!(phys.function, function, "{phys:?}");
    assert_eq!(phys.state, ScanState::Finished, "{phys:?}");
    phys
}

/// A scrub must find nothing: every copy on every side is good.
fn assert_scrub_finds_nothing(pool: &Pool, what: &str) {
    pool.core.request_scrub().unwrap();
    let scrub = finished_scan(pool, ScanFunction::Scrub);
    assert_eq!(
        (
            scrub.copies_bad,
            scrub.repaired,
            scrub.unrepaired,
            scrub.errors
        ),
        (0, 0, 0, 0),
        "{what}: the scrub after it found stale copies: {scrub:?}"
    );
}

/// Bug: a resilver after `offline` and `online` of a mirror side reported success with empty
/// DTLs, yet a scrub right after repaired copies on the side that came back. Blocks written
/// outside syncing context (a large fsynced write's blocks, written in place for the intent
/// log and adopted by the sync of their txg) were logged as missed against the txg the sync
/// thread was writing, which is older than the txg they are born in. When the side came back
/// before that txg synced, no DTL held the txg the blocks were born in, the resilver (which
/// copies blocks by birth) skipped them, and the side kept stale copies.
#[test]
fn blocks_written_in_place_while_a_side_is_offline_are_resilvered() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Arc::new(new_mirror(dir.path()));
    let fs = open_fs(&pool);
    let ino = fs.create(fs.root(), b"big", 0o644, 0, 0).unwrap().ino;
    pool.sync().unwrap();
    pool.offline("b.img").unwrap();

    // Written in place by the fsync while no txg syncs, so the sync thread's txg is the last
    // synced one, older than the txg the blocks are born in.
    let pause = pool.core.txgs.pause_syncs();
    let data = pattern(3, 4 << 20);
    fs.write(ino, 0, &data).unwrap();
    fs.fsync(ino).unwrap();
    assert!(
        fs.intent_log()
            .unwrap()
            .stats
            .indirect_records
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0,
        "the fsync wrote no block in place"
    );
    // Side b comes back before the blocks' txg syncs: `online` marks it usable, then waits
    // for a txg, which the pause holds back until b is online.
    let onliner = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.online("b.img").unwrap())
    };
    let side_b = pool.core.io.vdevs.tops()[0].children[1].clone();
    while side_b.is_offline() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    drop(pause);
    onliner.join().unwrap();

    let resilver = finished_scan(&pool, ScanFunction::Resilver);
    assert_eq!(
        (resilver.errors, resilver.unrepaired),
        (0, 0),
        "{resilver:?}"
    );
    assert!(side_b.dtl.is_empty(), "DTL left: {:?}", side_b.dtl.ranges());
    assert_scrub_finds_nothing(&pool, "offline, a write in place, online, resilver");
    assert!(read_all(&fs, ino) == data);
    drop(fs);
    check_clean(&pool, "after the scrub");
    Arc::into_inner(pool).unwrap().export().unwrap();
}

/// Bug (fixed by e35b162, tested here): a crash after the txg in which a replacement's
/// resilver finished (the new leaf's log empty, the scan state "finished") and before the
/// next txg, which detaches the old leaf, left the replace pending for good: the old leaf was
/// detached only at a scan's end, no scan was left to end, and `wait_replaced` waited
/// forever. Import must finish such a replace by itself.
#[test]
fn a_replace_left_pending_by_a_crash_after_its_resilver_finishes_at_import() {
    let dir = tempfile::tempdir().unwrap();
    let mut tunables = tiny();
    // A resilver of several txgs, so that its end can be caught before the next txg.
    tunables.scan_blocks_per_txg_max = 32;
    let pool = create_pool(
        dir.path(),
        POOL,
        vec![VdevSpec::Mirror(vec![
            side(dir.path(), "a.img"),
            side(dir.path(), "b.img"),
        ])],
        tunables.clone(),
    );
    let files = write_files(&pool, 7, 12, 64 << 10);
    pool.sync().unwrap();
    let size = std::fs::metadata(side(dir.path(), "b.img")).unwrap().len();
    std::fs::File::create(side(dir.path(), "c.img"))
        .unwrap()
        .set_len(size)
        .unwrap();
    let new = pool
        .replace("b.img", Some(&side(dir.path(), "c.img")), true)
        .unwrap();
    // Stop the syncs as soon as the resilver is published finished (in the sync of its last
    // txg, before that txg commits): the old leaf's detach, queued for the next txg, never
    // commits.
    let pause = loop {
        let finished = pool
            .core
            .scan_status()
            .is_some_and(|status| status.phys.state == ScanState::Finished);
        if finished {
            break pool.core.txgs.pause_syncs();
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    };
    let leaves = pool.core.io.vdevs.leaves().count();
    pool.core.txgs.suspend("test crash".into());
    drop(pause);
    pool.abandon();
    assert_eq!(
        leaves, 3,
        "the old leaf was detached before the crash: the state under test was not reached"
    );

    let pool = import(dir.path(), POOL, tunables);
    let (top, child) = pool.core.io.vdevs.leaf_by_guid(new).unwrap();
    assert_eq!(
        top.children[child].dtl.ranges(),
        Vec::<(u64, u64)>::new(),
        "the new leaf's log must be empty after the finished resilver"
    );
    assert!(
        pool.core
            .scan_status()
            .is_some_and(|status| status.phys.state == ScanState::Finished),
        "the resilver's end must be persisted"
    );
    // Import queues the detach: a few txgs finish the replace.
    for _ in 0..5 {
        if pool.core.io.vdevs.leaves().count() == 2 {
            break;
        }
        pool.sync().unwrap();
    }
    let paths: Vec<PathBuf> = pool
        .core
        .io
        .vdevs
        .leaves()
        .map(|leaf| leaf.path.clone())
        .collect();
    assert_eq!(
        paths,
        vec![side(dir.path(), "a.img"), side(dir.path(), "c.img")],
        "the replace of b.img by c.img did not finish after the import"
    );
    pool.wait_replaced(new).unwrap();
    assert_files_read_right(&pool, &files, 64 << 10, "after the replace");
    check_clean(&pool, "after the replace");
    pool.export().unwrap();
}

/// Bug: a block written ahead of its sync for the intent log (a large fsynced write) in a txg
/// opened before an attach or replace was installed, but synced after it, was written through
/// the mirror as it was before the change, without the new side. The new side's DTL covered
/// only the txgs up to the one that installed the change, so the resilver never copied the
/// block there: the resilver reported success, a scrub right after repaired 1024 copies on
/// the new side, and a replace would have detached the old side leaving one good copy.
/// OpenZFS logs `[TXG_INITIAL, txg + TXG_CONCURRENT_STATES)` as missing on an attached leaf.
#[test]
fn blocks_written_in_place_while_a_side_is_attached_are_resilvered() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Arc::new(new_mirror(dir.path()));
    let fs = open_fs(&pool);
    let ino = fs.create(fs.root(), b"big", 0o644, 0, 0).unwrap().ino;
    pool.sync().unwrap();
    let new_side = side(dir.path(), "c.img");
    let size = std::fs::metadata(side(dir.path(), "b.img")).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&new_side)
        .unwrap();
    file.set_len(size).unwrap();
    // A mark in the new device's first label, which the attach zeroes just before it queues
    // the change: seeing it gone tells that the change is queued.
    std::os::unix::fs::FileExt::write_all_at(&file, &[0xa5; 4096], 16 << 10).unwrap();

    // Txg `held` cannot sync while this hold lasts; a sync request makes it quiesce, and the
    // next txg opens.
    let hold = pool.assign().unwrap();
    let held = pool.core.txgs.open_txg();
    let syncer = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.sync().unwrap())
    };
    while pool.core.txgs.open_txg() == held {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // Written in place in txg `held + 1`, through the mirror of a and b.
    let data = pattern(5, 4 << 20);
    fs.write(ino, 0, &data).unwrap();
    fs.fsync(ino).unwrap();
    // The attach is queued now and installed by the sync of `held`, before the blocks' txg.
    let attacher = {
        let pool = pool.clone();
        let new_side = new_side.clone();
        std::thread::spawn(move || pool.attach("b.img", &new_side, true).unwrap())
    };
    let mut mark = [0u8; 4096];
    loop {
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut mark, 16 << 10).unwrap();
        if mark.iter().all(|&byte| byte == 0) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(hold);
    syncer.join().unwrap();
    attacher.join().unwrap();

    let resilver = finished_scan(&pool, ScanFunction::Resilver);
    assert_eq!(
        (resilver.errors, resilver.unrepaired),
        (0, 0),
        "{resilver:?}"
    );
    let new_leaf = pool.core.io.vdevs.tops()[0].children[2].clone();
    assert_eq!(new_leaf.path, new_side);
    assert!(
        new_leaf.dtl.is_empty(),
        "DTL left: {:?}",
        new_leaf.dtl.ranges()
    );
    assert_scrub_finds_nothing(&pool, "a write in place across an attach, resilver");
    assert!(read_all(&fs, ino) == data);
    drop(fs);
    check_clean(&pool, "after the scrub");
    Arc::into_inner(pool).unwrap().export().unwrap();
}

/// Bug: a side attached while a resilver was running was treated by that resilver's end as
/// covered: the end cleared every usable leaf's DTL up to the scan's last txg, the new side's
/// included, although the scan had walked most blocks before the side existed and never
/// copied them there. The attach restarts the resilver, but a crash before the restart (or the
/// old scan ending before it) let the old scan finish: the new side kept a log only from the
/// old scan's last txg on, the next resilver skipped everything older, and a replace would
/// have detached the old side with the new one missing most blocks. A side that joins during
/// a scan is one the scan does not cover, as one that was offline during it.
#[test]
fn a_side_attached_during_a_resilver_is_not_cleared_by_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut tunables = tiny();
    // A resilver of several txgs (the cap makes each wait for the txg timer).
    tunables.scan_blocks_per_txg_max = 8;
    let pool = create_pool(
        dir.path(),
        POOL,
        vec![VdevSpec::Mirror(vec![
            side(dir.path(), "a.img"),
            side(dir.path(), "b.img"),
        ])],
        tunables.clone(),
    );
    let before = write_files(&pool, 11, 6, 64 << 10);
    pool.offline("b.img").unwrap();
    let missed = write_files(&pool, 31, 12, 64 << 10);
    pool.online("b.img").unwrap();
    assert!(pool
        .core
        .scan_status()
        .is_some_and(|status| status.phys.state == ScanState::Scanning));

    // Attach c while that resilver runs, and crash as soon as the change's txg has committed,
    // before the attach restarts the resilver.
    let new_side = side(dir.path(), "c.img");
    let size = std::fs::metadata(side(dir.path(), "b.img")).unwrap().len();
    std::fs::File::create(&new_side)
        .unwrap()
        .set_len(size)
        .unwrap();
    let pool = Arc::new(pool);
    let _attacher = {
        let pool = pool.clone();
        let new_side = new_side.clone();
        // It fails once the crash suspends the pool.
        std::thread::spawn(move || pool.attach("a.img", &new_side, true))
    };
    let pause = loop {
        if pool.core.io.vdevs.leaves().count() == 3 {
            break pool.core.txgs.pause_syncs();
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    };
    let resilver = pool.core.scan_status().unwrap().phys;
    assert_eq!(
        (resilver.function, resilver.state),
        (ScanFunction::Resilver, ScanState::Scanning),
        "the resilver of b ended before c was attached: the state under test was not reached"
    );
    pool.core.txgs.suspend("test crash".into());
    drop(pause);
    // The attacher holds a reference until it sees the suspension.
    while Arc::strong_count(&pool) > 1 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Arc::into_inner(pool).unwrap().abandon();

    // The import resumes the resilver that was running (at full speed now); c must still get
    // every block.
    let pool = import(dir.path(), POOL, tiny());
    for _ in 0..10 {
        pool.core.wait_scan(ScanFunction::Resilver).unwrap();
        pool.sync().unwrap();
        if pool.core.io.vdevs.leaves().all(|leaf| leaf.dtl.is_empty()) {
            break;
        }
    }
    let logs: Vec<_> = pool
        .core
        .io
        .vdevs
        .leaves()
        .map(|leaf| leaf.dtl.ranges())
        .collect();
    assert!(logs.iter().all(|log| log.is_empty()), "DTLs left: {logs:?}");
    assert_scrub_finds_nothing(&pool, "an attach during a resilver, a crash, the import");
    assert_files_read_right(&pool, &before, 64 << 10, "after the resilvers");
    assert_files_read_right(&pool, &missed, 64 << 10, "after the resilvers");
    check_clean(&pool, "after the scrub");
    pool.export().unwrap();
}

/// Bug (found by a stress exploration of wipe and replace in place): the detach that finishes
/// a replace cleared the new leaf's `replaces` before it installed the tree without the old
/// leaf, so `wait_replaced`, which returns when `replaces` is gone, could return while the old
/// leaf was still in the tree, and the caller's next device operation found two leaves of
/// that name. A thread watches the new leaf from the replace on: the moment it stops naming
/// the old leaf, the old leaf must be gone from the tree.
#[test]
fn a_replacement_stops_naming_the_old_side_only_once_the_old_side_is_gone() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let pool = Arc::new(new_mirror(dir.path()));
    let fs = pool.file_system().unwrap();
    let file = fs.create(fs.root(), b"data", 0o644, 0, 0).unwrap();
    fs.write(file.ino, 0, &vec![7u8; 1 << 20]).unwrap();
    pool.sync().unwrap();
    let size = std::fs::metadata(side(dir.path(), "a.img")).unwrap().len();
    for round in 0..6 {
        let old_leaf = pool.core.io.vdevs.tops()[0].children[1].clone();
        let (old, old_name) = (old_leaf.guid, old_leaf.path.display().to_string());
        let new_path = side(dir.path(), &format!("r{round}.img"));
        std::fs::File::create(&new_path)
            .unwrap()
            .set_len(size)
            .unwrap();
        let new = pool.replace(&old_name, Some(&new_path), true).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (pool, done) = (pool.clone(), done.clone());
            std::thread::spawn(move || -> Option<String> {
                while !done.load(Ordering::SeqCst) {
                    let Some((top, child)) = pool.core.io.vdevs.leaf_by_guid(new) else {
                        return Some("the new leaf went away".into());
                    };
                    if top.children[child].replaces().is_none() {
                        let leaves = pool.core.io.vdevs.leaves().map(|leaf| leaf.guid);
                        return leaves.into_iter().any(|guid| guid == old).then(|| {
                            format!("round {round}: the replacement names no old leaf, but {old:?} is still in the tree")
                        });
                    }
                }
                None
            })
        };
        pool.wait_replaced(new).unwrap();
        done.store(true, Ordering::SeqCst);
        if let Some(problem) = watcher.join().unwrap() {
            panic!("{problem}");
        }
        let paths: Vec<PathBuf> = pool
            .core
            .io
            .vdevs
            .leaves()
            .map(|leaf| leaf.path.clone())
            .collect();
        assert_eq!(
            paths.len(),
            2,
            "round {round}: after wait_replaced: {paths:?}"
        );
    }
    assert_scrub_finds_nothing(&pool, "after the replaces");
    assert_clean(&pool);
}
