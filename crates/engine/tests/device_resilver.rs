//! Device changes of a mirror (offline and online, replace) and the resilvers they start, on
//! real pools on sparse files: after the resilver, the side that came back or was replaced
//! must hold every block, so a scrub right after finds nothing to repair and the side alone
//! reads every file right. Each test is one deterministic sequence found by tarn-stress.

mod common;

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
