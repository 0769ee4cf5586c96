//! Scrubs and resilvers while the namespace changes under them.
//!
//! The scan walks the MOS, then every dataset in MOS object order, each from its previous
//! snapshot's txg. A snapshot destroyed after the scan has passed the dataset that follows it
//! (its next snapshot, or the head) but before the scan reached it took with it the only walk
//! of the blocks born between its previous snapshot and itself that the next one still holds:
//! an interrupted scrub examined about half of what a full one did, and for a resilver, whose
//! end clears every leaf's DTL, that is redundancy silently not restored. The tests run a slow
//! scan (a few blocks a txg, syncs driven by the test), change the namespace at the worst
//! moment, and count the bytes examined against a full scan of the same final state.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use tarn::pool::scan::{ScanFunction, ScanPhys, ScanState, ScrubVisits};
use tarn::pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;
use tarn::vdev::{ReadFaultKind, VDEV_LABEL_START_SIZE};

use common::*;

const POOL: &str = "scanns";
const FS: &str = "scanns/fs";

fn slow() -> Tunables {
    let mut tunables = tiny();
    tunables.scan_blocks_per_txg_max = 16;
    tunables.scan_record_visits = true;
    tunables
}

/// The scrub's promise checked block by block: every block of the pool now born before the
/// last scrub started was verified by it (`PoolCore::scrub_unvisited`).
fn assert_every_block_visited(pool: &Pool) {
    let visits = pool
        .core
        .take_scrub_visits()
        .expect("the finished scrub's record of what it verified");
    assert_visits_cover_the_pool(pool, &visits, "");
}

/// The check of [`assert_every_block_visited`] against `visits`; `what` (if any) starts the
/// message, which ends with the scrub's walks.
fn assert_visits_cover_the_pool(pool: &Pool, visits: &ScrubVisits, what: &str) {
    let (compared, missed) = pool.core.scrub_unvisited(visits).unwrap();
    assert!(compared > 0, "{what}no block to compare");
    assert!(
        missed.is_empty(),
        "{what}the scrub skipped {} of {compared} blocks, e.g. {:?}; its walks: {:?}",
        missed.len(),
        &missed[..missed.len().min(3)],
        visits.events
    );
}

const FILES: [(&str, u64, usize); 3] = [
    ("one", 1, 512 << 10),
    ("two", 2, 2 << 20),
    ("three", 3, 16 << 10),
];

fn write_file(pool: &Pool, name: &str, seed: u64, bytes: usize) {
    let fs = pool.open_file_system(FS).unwrap();
    let ino = fs
        .create(fs.root(), name.as_bytes(), 0o644, 0, 0)
        .unwrap()
        .ino;
    fs.write(ino, 0, &pattern(seed, bytes)).unwrap();
    drop(fs);
    pool.sync().unwrap();
}

fn snapshot(pool: &Pool, name: &str) {
    pool.create_snapshots(&[format!("{FS}@{name}")], false)
        .unwrap();
}

fn object_of(pool: &Pool, name: &str) -> u64 {
    pool.dataset_records(name).unwrap().object
}

/// A file system with `@s1` (512 KiB), `@s2` (2 MiB more) and a small file after it.
fn pool_with_two_snapshots(dir: &Path) -> Pool {
    let pool = create_pool(dir, POOL, single(dir, "a.img"), slow());
    fill_with_two_snapshots(&pool);
    pool
}

fn fill_with_two_snapshots(pool: &Pool) {
    pool.create_dataset(
        FS,
        &[
            ("compression".into(), "off".into()),
            ("recordsize".into(), "16K".into()),
        ],
        false,
    )
    .unwrap();
    let [one, two, three] = FILES;
    write_file(pool, one.0, one.1, one.2);
    snapshot(pool, "s1");
    write_file(pool, two.0, two.1, two.2);
    snapshot(pool, "s2");
    write_file(pool, three.0, three.1, three.2);
}

/// Sync until no scan of `function` runs (the resilver an `online` queued), calling `between`
/// after every sync with the scan's state.
fn scan_driving(
    pool: &Pool,
    function: ScanFunction,
    mut between: impl FnMut(&ScanPhys),
) -> ScanPhys {
    for _ in 0..100_000 {
        pool.sync().unwrap();
        let Some(status) = pool.core.scan_status() else {
            continue;
        };
        let phys = status.phys;
        if phys.function == function && phys.state != ScanState::Scanning {
            assert_eq!(phys.state, ScanState::Finished);
            return phys;
        }
        if phys.function == function {
            between(&phys);
        }
    }
    panic!("the {function:?} did not finish");
}

/// Destroy `@s2` the first time the scan stands after the head and before `@s2`.
fn destroy_s2_between(pool: &Pool, destroyed: &mut bool, phys: &ScanPhys) {
    let head = object_of(pool, FS);
    if *destroyed {
        return;
    }
    let s2 = object_of(pool, &format!("{FS}@s2"));
    assert!(head < s2, "the head {head} is scanned before @s2 {s2}");
    if phys.cursor_objset > head && phys.cursor_objset < s2 {
        pool.destroy_snapshots(&format!("{FS}@s2"), false).unwrap();
        *destroyed = true;
    }
}

/// Start a scrub and sync until it finishes, calling `between` after every sync with the
/// scan's state.
fn scrub_driving(pool: &Pool, between: impl FnMut(&ScanPhys)) -> ScanPhys {
    pool.core.request_scrub().unwrap();
    scan_driving(pool, ScanFunction::Scrub, between)
}

/// Guards the walk of the blocks a destroyed snapshot shared with the dataset after it: the
/// head has been walked (from `@s2`'s txg) and `@s2` not yet when `@s2` is destroyed; the
/// 2 MiB born between `@s1` and `@s2` are the head's now, and must still be examined.
#[test]
fn a_scrub_visits_every_block_when_a_snapshot_goes_mid_scan() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with_two_snapshots(dir.path());
    let mut destroyed = false;
    let interrupted = scrub_driving(&pool, |phys| {
        destroy_s2_between(&pool, &mut destroyed, phys)
    });
    assert!(destroyed, "the scan never stood between the head and @s2");
    assert_eq!(interrupted.errors, 0);
    assert_every_block_visited(&pool);
    let full = scrub_driving(&pool, |_| {});
    assert_every_block_visited(&pool);
    assert!(
        interrupted.examined + full.examined / 10 >= full.examined,
        "the interrupted scrub examined {} bytes, a full one {}",
        interrupted.examined,
        full.examined
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

/// Guards the destroy that comes while the scan stands *before* the head. The destroy runs in
/// its txg's sync before that txg's scan round, and the round reads the records of the last
/// synced txg, in which the head's walk still starts from `@s2`'s txg: a round that reached
/// the head in that txg walked it from there, and since the head had not been reached when
/// `@s2` went, no catch-up was owed. The 2 MiB born between `@s1` and `@s2` were then walked
/// by nobody (found by tarn-stress's coverage check, fixed seed 3, as 74 to 79 blocks of one
/// dataset unvisited). Each position of the scan before the head is tried on a fresh pool,
/// since only the last few let one round reach the head.
#[test]
fn a_scrub_visits_every_block_when_a_snapshot_goes_before_the_scan_reaches_the_head() {
    let mut position = 0;
    loop {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool_with_two_snapshots(dir.path());
        let head = object_of(&pool, FS);
        let mut before_head = 0;
        let mut destroyed = false;
        let scrub = scrub_driving(&pool, |phys| {
            if destroyed || phys.cursor_objset >= head {
                return;
            }
            if before_head == position {
                pool.destroy_snapshots(&format!("{FS}@s2"), false).unwrap();
                destroyed = true;
            }
            before_head += 1;
        });
        if !destroyed {
            // Every position before the head has been tried.
            assert!(position > 0, "the scan never stood before the head");
            pool.export().unwrap();
            return;
        }
        assert_eq!(scrub.errors, 0);
        assert_every_block_visited(&pool);
        if position == 0 {
            // Destroyed while the scan was in the MOS, far from the head: the head's own walk
            // (from `@s1`) came later and covered the catch-up, which was not walked again.
            let full = scrub_driving(&pool, |_| {});
            assert!(
                scrub.examined <= full.examined + full.examined / 10,
                "the scrub examined {} bytes, a full one {}",
                scrub.examined,
                full.examined
            );
        }
        assert_clean(&pool);
        pool.export().unwrap();
        position += 1;
    }
}

/// Guards a snapshot destroyed in the very sync that starts the scrub. The destroy runs first
/// in that sync and found no scan to tell; the scan then started on the last synced txg's
/// records, in which `@s2` still stood, so its first round walked the head from `@s2`'s txg,
/// and the rounds after it, reading records without `@s2`, went on from the head's bookmark
/// with nobody owing the 2 MiB born between `@s1` and `@s2` that the head now holds alone
/// (found by tarn-stress's coverage check, fixed seed 12 under load, as 20 blocks of one
/// dataset unvisited). The destroy is queued with syncs paused and the scrub asked for before
/// they resume; a few per-txg block caps are tried so that some first round stops inside the
/// head or between it and `@s2`.
#[test]
fn a_scrub_started_in_the_sync_that_destroys_a_snapshot_visits_every_block() {
    let mut stale_head_walks = 0;
    for cap in [16u64, 32, 64, 128, 256, 512] {
        let dir = tempfile::tempdir().unwrap();
        let mut tunables = slow();
        tunables.scan_blocks_per_txg_max = cap;
        let pool = create_pool(dir.path(), POOL, single(dir.path(), "a.img"), tunables);
        fill_with_two_snapshots(&pool);
        let head = pool.dataset_records(FS).unwrap();
        let s2_txg = head.phys.prev_snapshot_txg.0;
        let pause = pool.core.txgs.pause_syncs();
        let started_in = pool.core.txgs.open_txg();
        std::thread::scope(|scope| {
            let destroy = scope.spawn(|| pool.destroy_snapshots(&format!("{FS}@s2"), false));
            // The destroy's task is queued for the open txg well before the syncs resume.
            std::thread::sleep(std::time::Duration::from_millis(300));
            pool.core.request_scrub().unwrap();
            drop(pause);
            destroy.join().unwrap().unwrap();
        });
        let scrub = scan_driving(&pool, ScanFunction::Scrub, |_| {});
        assert_eq!(scrub.errors, 0);
        assert_eq!(
            scrub.max_txg.0 + 1,
            started_in.0,
            "cap {cap}: the scrub did not start in the destroy's txg"
        );
        let visits = pool.core.take_scrub_visits().unwrap();
        let stale = format!("walk of {} from birth {s2_txg} ", head.object);
        if visits.events.iter().any(|event| event.contains(&stale)) {
            stale_head_walks += 1;
        }
        assert_visits_cover_the_pool(&pool, &visits, &format!("cap {cap}: "));
        assert_clean(&pool);
        pool.export().unwrap();
    }
    assert!(
        stale_head_walks > 0,
        "no first round walked the head from @s2's txg"
    );
}

/// The walk owed after such a destroy is kept with the scan's state: an export right after
/// the destroy, and the scrub resumed by the import, still examine everything.
#[test]
fn a_walk_owed_to_a_destroyed_snapshot_survives_export() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with_two_snapshots(dir.path());
    let mut destroyed = false;
    pool.core.request_scrub().unwrap();
    for _ in 0..100_000 {
        pool.sync().unwrap();
        let phys = pool.core.scan_status().unwrap().phys;
        assert_eq!(
            phys.state,
            ScanState::Scanning,
            "finished before the destroy"
        );
        destroy_s2_between(&pool, &mut destroyed, &phys);
        if destroyed {
            break;
        }
    }
    pool.sync().unwrap();
    pool.export().unwrap();
    let pool = import(dir.path(), POOL, slow());
    let interrupted = scan_driving(&pool, ScanFunction::Scrub, |_| {});
    let full = scrub_driving(&pool, |_| {});
    assert!(
        interrupted.examined + full.examined / 10 >= full.examined,
        "the resumed scrub examined {} bytes, a full one {}",
        interrupted.examined,
        full.examined
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

/// The resilver's case, where a skipped block is redundancy silently not restored: side b is
/// offline while everything is written, comes back, and `@s2` goes while the resilver stands
/// between the head and it. The resilver's end clears b's DTL, so b alone must then hold
/// every file (side a's reads all fail).
#[test]
fn a_resilver_restores_every_block_when_a_snapshot_goes_mid_scan() {
    let dir = tempfile::tempdir().unwrap();
    let plans = Arc::new(parking_lot::Mutex::new(Plans::new()));
    let pool = Pool::create(CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Mirror(vec![
            dir.path().join("a.img"),
            dir.path().join("b.img"),
        ])],
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: slow(),
        wrap_device: Some(per_path_fault_wrapper(plans.clone())),
        disabled_features: Vec::new(),
    })
    .unwrap();
    pool.offline("b.img").unwrap();
    fill_with_two_snapshots(&pool);
    pool.online("b.img").unwrap();
    let mut destroyed = false;
    let resilver = scan_driving(&pool, ScanFunction::Resilver, |phys| {
        destroy_s2_between(&pool, &mut destroyed, phys)
    });
    assert!(
        destroyed,
        "the resilver never stood between the head and @s2"
    );
    assert_eq!((resilver.errors, resilver.unrepaired), (0, 0));
    assert!(pool.core.io.vdevs.tops()[0].children[1].dtl.is_empty());
    pool.export().unwrap();

    let mut options = ImportOptions::new(vec![dir.path().to_path_buf()], slow());
    options.wrap_device = Some(per_path_fault_wrapper(plans.clone()));
    let pool = Pool::import(POOL, options).unwrap().0;
    plans.lock()[&dir.path().join("a.img")]
        .add_read_fault(VDEV_LABEL_START_SIZE..u64::MAX, ReadFaultKind::Fail);
    pool.core.io.cache().clear();
    let fs = pool.open_file_system(FS).unwrap();
    for (name, seed, bytes) in FILES {
        let ino = fs.lookup(fs.root(), name.as_bytes()).unwrap().ino;
        let data = fs
            .read(ino, 0, bytes)
            .unwrap_or_else(|error| panic!("{name} does not read from side b alone: {error}"));
        assert!(
            data == pattern(seed, bytes),
            "{name} reads back wrong from side b"
        );
    }
    drop(fs);
    plans.lock()[&dir.path().join("a.img")].clear_read_faults();
    pool.export().unwrap();
}

/// An incremental receive's clone swap while a scan runs. The hidden clone holds the received
/// data before the scan starts (its blocks are the scan's to read); the stream's last bytes,
/// whose end swaps the clone in and takes the received snapshot, arrive once the scan has
/// passed the target's head. The stream ends with a file of 100 small records, so that what
/// the receive's reader holds back until the end (a chunk of at most 64 records) is only that
/// file's, a few KiB born after the scan started. Returns the scan's final state and the pool.
fn scan_across_a_receive_clone_swap(
    dir: &Path,
    function: ScanFunction,
) -> (ScanPhys, Pool, Arc<parking_lot::Mutex<Plans>>) {
    use tarn::send::{receive, ReceiveOptions};
    let plans = Arc::new(parking_lot::Mutex::new(Plans::new()));
    let vdevs = match function {
        ScanFunction::Scrub => single(dir, "a.img"),
        ScanFunction::Resilver => {
            vec![VdevSpec::Mirror(vec![dir.join("a.img"), dir.join("b.img")])]
        }
    };
    let pool = Pool::create(CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs,
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: slow(),
        wrap_device: Some(per_path_fault_wrapper(plans.clone())),
        disabled_features: Vec::new(),
    })
    .unwrap();
    if function == ScanFunction::Resilver {
        // Side b misses everything from here on; it comes back when the clone is filled.
        pool.offline("b.img").unwrap();
    }
    pool.create_dataset(
        "scanns/src",
        &[
            ("compression".into(), "off".into()),
            ("recordsize".into(), "16K".into()),
        ],
        false,
    )
    .unwrap();
    let create = |name: &str, seed: u64, bytes: usize| {
        let src = pool.open_file_system("scanns/src").unwrap();
        let ino = src
            .create(src.root(), name.as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        src.write(ino, 0, &pattern(seed, bytes)).unwrap();
    };
    create("kept", 1, 512 << 10);
    pool.create_snapshots(&["scanns/src@a".into()], false)
        .unwrap();
    create("new", 2, 2 << 20);
    pool.set_property("scanns/src", "recordsize", Some("512"))
        .unwrap();
    create("tail", 3, 100 * 512);
    pool.create_snapshots(&["scanns/src@b".into()], false)
        .unwrap();
    let full_stream = send_to_vec(&pool, "scanns/src@a", None);
    receive(
        &pool,
        "scanns/dst",
        &mut &full_stream[..],
        &ReceiveOptions::default(),
    )
    .unwrap();
    let incremental = send_to_vec(&pool, "scanns/src@b", Some("scanns/src@a"));
    // Only the received copy matters: the source goes before the scan.
    pool.destroy_dataset("scanns/src", true).unwrap();
    let head = object_of(&pool, "scanns/dst");
    let (feed, pieces) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
    let cut = incremental.len() - 8;
    let (phys, swapped) = std::thread::scope(|scope| {
        let receiving = scope.spawn(|| {
            let mut input = Arriving {
                pieces,
                current: Vec::new(),
                at: 0,
            };
            receive(&pool, "scanns/dst", &mut input, &ReceiveOptions::default())
        });
        feed.send(incremental[..cut].to_vec()).unwrap();
        // Everything but the held-back end is in the hidden clone, and on disk.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let filled = pool
                .dataset_records("scanns/dst/%recv")
                .is_ok_and(|records| records.phys.referenced_bytes >= (2 << 20) + (512 << 10));
            if filled {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the clone never filled"
            );
            pool.sync().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        pool.sync().unwrap();
        let mut rest = Some(incremental[cut..].to_vec());
        let mut receiving = Some(receiving);
        let mut feed = Some(feed);
        match function {
            ScanFunction::Scrub => pool.core.request_scrub().unwrap(),
            ScanFunction::Resilver => {
                pool.online("b.img").unwrap();
            }
        }
        let phys = scan_driving(&pool, function, |phys| {
            if phys.cursor_objset > head {
                if let Some(rest) = rest.take() {
                    let feed = feed.take().expect("fed once");
                    feed.send(rest).unwrap();
                    drop(feed);
                    let receiving = receiving.take().expect("joined once");
                    receiving.join().unwrap().unwrap();
                }
            }
        });
        (phys, rest.is_none())
    });
    assert!(swapped, "the scan never passed the target's head");
    (phys, pool, plans)
}

const RECEIVED: [(&str, u64, usize); 3] = [
    ("kept", 1, 512 << 10),
    ("new", 2, 2 << 20),
    ("tail", 3, 100 * 512),
];

fn assert_received_reads_right(pool: &Pool) {
    pool.core.io.cache().clear();
    let fs = pool.open_file_system("scanns/dst").unwrap();
    for (name, seed, bytes) in RECEIVED {
        let ino = fs.lookup(fs.root(), name.as_bytes()).unwrap().ino;
        let data = fs
            .read(ino, 0, bytes)
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        assert!(data == pattern(seed, bytes), "{name} reads back wrong");
    }
}

/// The scrub across a clone swap examines at least what a full scrub of the final state does
/// (3.20 MB against 2.83 MB here: the clone's blocks are read once in the clone and again in
/// the received snapshot).
#[test]
fn a_scrub_visits_every_block_across_a_receive_clone_swap() {
    let dir = tempfile::tempdir().unwrap();
    let (interrupted, pool, _) = scan_across_a_receive_clone_swap(dir.path(), ScanFunction::Scrub);
    let full = scrub_driving(&pool, |_| {});
    assert!(
        interrupted.examined + full.examined / 10 >= full.examined,
        "the interrupted scrub examined {} bytes, a full one {}",
        interrupted.examined,
        full.examined
    );
    assert_received_reads_right(&pool);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// The resilver across a clone swap leaves side b holding every received block: its DTL is
/// cleared, and b alone reads the received file system back.
#[test]
fn a_resilver_restores_every_block_across_a_receive_clone_swap() {
    let dir = tempfile::tempdir().unwrap();
    let (resilver, pool, plans) =
        scan_across_a_receive_clone_swap(dir.path(), ScanFunction::Resilver);
    assert_eq!((resilver.errors, resilver.unrepaired), (0, 0));
    assert!(pool.core.io.vdevs.tops()[0].children[1].dtl.is_empty());
    pool.export().unwrap();
    let mut options = ImportOptions::new(vec![dir.path().to_path_buf()], slow());
    options.wrap_device = Some(per_path_fault_wrapper(plans.clone()));
    let pool = Pool::import(POOL, options).unwrap().0;
    plans.lock()[&dir.path().join("a.img")]
        .add_read_fault(VDEV_LABEL_START_SIZE..u64::MAX, ReadFaultKind::Fail);
    assert_received_reads_right(&pool);
    plans.lock()[&dir.path().join("a.img")].clear_read_faults();
    pool.export().unwrap();
}

/// A small deterministic generator for the namespace storm below (seeded per case, so that
/// a failure names its seed).
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: usize) -> usize {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }
}

/// One random change to the namespace or the data, between two scan rounds: files written,
/// overwritten and removed in a head, snapshots taken and destroyed, rollbacks, clones made,
/// promoted and destroyed. Changes the pool refuses (a snapshot with clones, a rollback
/// with later snapshots) are skipped: what counts is what the scan meets.
fn storm_step(pool: &Pool, heads: &mut Vec<String>, dice: &mut Dice, step: usize) {
    let head = heads[dice.below(heads.len())].clone();
    let mut snapshots = pool.core.snapshots_of(&head).unwrap();
    snapshots.sort_by_key(|snapshot| snapshot.creation_txg);
    match dice.below(10) {
        0..=2 => {
            let fs = pool.open_file_system(&head).unwrap();
            let name = format!("f{}", dice.below(6));
            let ino = root_file(&fs, &name);
            let offset = (dice.below(16) as u64) << 14;
            let bytes = (1 + dice.below(8)) << 14;
            fs.write(ino, offset, &pattern(step as u64, bytes)).unwrap();
        }
        3 => {
            let fs = pool.open_file_system(&head).unwrap();
            let _ = fs.unlink(fs.root(), format!("f{}", dice.below(6)).as_bytes());
        }
        4 | 5 => snapshot_named(pool, &format!("{head}@n{step}")),
        6 if !snapshots.is_empty() => {
            let victim = &snapshots[dice.below(snapshots.len())].name;
            let _ = pool.destroy_snapshots(victim, false);
        }
        7 if !snapshots.is_empty() => {
            let _ = pool.rollback(&snapshots.last().unwrap().name, false);
        }
        8 if !snapshots.is_empty() && heads.len() < 4 => {
            let origin = &snapshots[dice.below(snapshots.len())].name;
            let clone = format!("{POOL}/c{step}");
            pool.create_clone(origin, &clone, &[]).unwrap();
            heads.push(clone);
        }
        9 if heads.len() > 1 => {
            let clone = heads[1 + dice.below(heads.len() - 1)].clone();
            if dice.below(2) == 0 {
                let _ = pool.promote(&clone);
            } else if pool.destroy_dataset(&clone, true).is_ok() {
                heads.retain(|name| *name != clone);
            }
        }
        _ => {}
    }
}

fn snapshot_named(pool: &Pool, name: &str) {
    pool.create_snapshots(&[name.to_string()], false).unwrap();
}

/// Every namespace change the pool allows, at random between the rounds of slow scrubs:
/// each scrub must still verify every block born before it started that the pool holds at
/// its end. (Written when `tarn-stress` found a scrub that missed a file's blocks in a
/// snapshot taken under it; `TARN_SCAN_STORM_SEEDS=N` runs seeds 0..N instead; 300 take
/// about 7 minutes.)
#[test]
fn a_scrub_visits_every_block_through_a_storm_of_namespace_changes() {
    // Seed 11: a snapshot taken while a catch-up of its head was walked; seed 140: one taken
    // in the sync in which the regular walks ended. Both were missed once.
    let seeds: Vec<u64> = match std::env::var("TARN_SCAN_STORM_SEEDS") {
        Ok(count) => (0..count.parse().expect("a number of seeds")).collect(),
        Err(_) => vec![0, 1, 2, 11, 140],
    };
    for seed in seeds {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool_with_two_snapshots(dir.path());
        let mut heads = vec![FS.to_string()];
        let mut dice = Dice(0x9e37_79b9_7f4a_7c15 ^ (seed + 1));
        let mut step = 0;
        for _scrub in 0..3 {
            pool.core.request_scrub().unwrap();
            let mut finished = false;
            for _ in 0..2_000 {
                pool.sync().unwrap();
                let phys = pool.core.scan_status().unwrap().phys;
                if phys.state != ScanState::Scanning {
                    assert_eq!(phys.state, ScanState::Finished, "seed {seed}");
                    finished = true;
                    break;
                }
                step += 1;
                storm_step(&pool, &mut heads, &mut dice, step);
            }
            assert!(finished, "seed {seed}: the scrub did not finish");
            let visits = pool.core.take_scrub_visits().expect("the scrub's record");
            assert_visits_cover_the_pool(&pool, &visits, &format!("seed {seed}: "));
        }
        assert_clean(&pool);
        pool.export().unwrap();
    }
}
