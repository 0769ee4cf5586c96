//! Scrub, resilver, dirty time logs and offline leaves on real mirrored pools on sparse files.
//!
//! Guards these promises: a damaged mirror side is found and repaired by a scrub
//! while every file still reads right; a side that missed writes (taken offline, or failing
//! its writes through the fault layer) logs the missed txgs persistently and is resilvered
//! when it returns, after which it alone holds every block; a scan killed with SIGKILL resumes
//! from its persisted bookmark after import. Every test counts the faults it injected and how
//! many were healed.

use crate::common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tarn::block::blkptr::Compression;
use tarn::check::check_pool;
use tarn::object::tree::visit_tree;
use tarn::pool::scan::{ScanFunction, ScanState};
use tarn::pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;
use tarn::types::ObjectId;
use tarn::vdev::{FaultPlan, ReadFaultKind, VDEV_LABEL_END_SIZE, VDEV_LABEL_START_SIZE};

const POOL: &str = "scanned";
const FILE_BYTES: usize = 256 << 10;

struct Mirror {
    dir: tempfile::TempDir,
    plans: Arc<parking_lot::Mutex<Plans>>,
}

impl Mirror {
    fn new() -> Mirror {
        Mirror {
            dir: tempfile::tempdir().unwrap(),
            plans: Arc::new(parking_lot::Mutex::new(Plans::new())),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn plan(&self, name: &str) -> Arc<FaultPlan> {
        self.plans.lock()[&self.path(name)].clone()
    }

    fn create(&self, tunables: Tunables) -> Pool {
        Pool::create(CreateOptions {
            name: POOL.into(),
            log: Vec::new(),
            cache: Vec::new(),
            vdevs: vec![VdevSpec::Mirror(vec![
                self.path("a.img"),
                self.path("b.img"),
            ])],
            create_size: Some(VDEV_SIZE),
            force: false,
            tunables,
            wrap_device: Some(per_path_fault_wrapper(self.plans.clone())),
            disabled_features: Vec::new(),
        })
        .unwrap()
    }

    fn import(&self, tunables: Tunables) -> Pool {
        let mut options = ImportOptions::new(vec![self.dir.path().to_path_buf()], tunables);
        options.wrap_device = Some(per_path_fault_wrapper(self.plans.clone()));
        Pool::import(POOL, options).unwrap().0
    }
}

/// Data-area (offset, size) of every level-0 block of the files.
fn data_extents(pool: &Pool, files: &[(ObjectId, u64)]) -> Vec<(u64, u64)> {
    let objset = pool.root_objset();
    let mut extents = Vec::new();
    for (object, _) in files {
        let dnode = objset.synced_dnode(*object).unwrap();
        visit_tree(&pool.core.io, &dnode, &mut |bp| {
            if bp.level == 0 && !bp.is_hole() && !bp.embedded {
                for dva in bp.copies() {
                    extents.push((dva.offset, dva.size_allocated));
                }
            }
            Ok(())
        })
        .unwrap();
    }
    extents
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn leaf_checksum_errors(pool: &Pool, child: usize) -> u64 {
    pool.core.io.vdevs.tops()[0].children[child]
        .stats
        .snapshot()
        .checksum_errors
}

/// Import the pool (side b must have no missed txgs left) with every read of side a failing:
/// the files must read right from side b alone.
fn assert_side_b_alone_reads(mirror: &Mirror, file_sets: &[&[(ObjectId, u64)]]) {
    let pool = mirror.import(tiny());
    // Nothing left to resilver, as persisted.
    assert!(pool.core.io.vdevs.tops()[0].children[1].dtl.is_empty());
    assert!(pool
        .core
        .scan_status()
        .is_none_or(|status| status.phys.state != ScanState::Scanning));
    mirror
        .plan("a.img")
        .add_read_fault(VDEV_LABEL_START_SIZE..u64::MAX, ReadFaultKind::Fail);
    for files in file_sets {
        assert_files_read_right(&pool, files, FILE_BYTES, "read back");
    }
    mirror.plan("a.img").clear_read_faults();
    pool.export().unwrap();
}

fn wait_scan(pool: &Pool, function: ScanFunction) -> tarn::pool::scan::ScanPhys {
    pool.core.wait_scan(function).unwrap();
    pool.sync().unwrap();
    pool.core.scan_status().expect("a scan ran").phys
}

#[test]
fn scrub_repairs_random_damage_on_one_side_of_a_mirror() {
    let mirror = Mirror::new();
    let pool = mirror.create(tiny());
    let files = write_files(&pool, 100, 24, FILE_BYTES);
    let extents = data_extents(&pool, &files);
    pool.export().unwrap();

    // Damage random ranges inside data blocks of side b (past the labels), on the exported
    // pool's file.
    let seed = std::env::var("TARN_TEST_SEED")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(0x5eed_u64);
    eprintln!("damage seed {seed} (TARN_TEST_SEED)");
    let mut state = seed | 1;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(mirror.path("b.img"))
        .unwrap();
    let mut damaged = std::collections::BTreeSet::new();
    while damaged.len() < 40 {
        let (offset, size) = extents[(xorshift(&mut state) % extents.len() as u64) as usize];
        if !damaged.insert(offset) {
            continue;
        }
        let within = xorshift(&mut state) % size;
        let length = (1 + xorshift(&mut state) % 512).min(size - within);
        let garbage: Vec<u8> = (0..length).map(|_| xorshift(&mut state) as u8).collect();
        file.write_all_at(&garbage, VDEV_LABEL_START_SIZE + offset + within)
            .unwrap();
    }
    drop(file);
    let injected = damaged.len() as u64;

    // Every file reads right (from side a, or repaired from it on the way).
    let pool = mirror.import(tiny());
    assert_files_read_right(&pool, &files, FILE_BYTES, "read back");
    // Reads take side a first: they may find some of the damage (and repair it), or none.
    let found_by_reads = leaf_checksum_errors(&pool, 1);
    assert_eq!(leaf_checksum_errors(&pool, 0), 0);
    pool.export().unwrap();

    // A fresh import (the reads' repairs are on disk already; the rest waits for the scrub).
    let pool = mirror.import(tiny());
    pool.core.request_scrub().unwrap();
    let scrub = wait_scan(&pool, ScanFunction::Scrub);
    assert_eq!(scrub.state, ScanState::Finished);
    assert_eq!(scrub.errors, 0);
    assert_eq!(scrub.unrepaired, 0);
    assert!(scrub.examined >= scrub.to_examine / 2, "{scrub:?}");
    let found_by_scrub = scrub.copies_bad;
    eprintln!(
        "injected {injected} damaged blocks; reads healed {found_by_reads}, scrub healed {found_by_scrub}"
    );
    // Every damaged block was healed by the reads or by the scrub, none left.
    assert_eq!(
        found_by_reads + found_by_scrub,
        injected,
        "every damaged block is found exactly once"
    );
    assert!(found_by_scrub > 0);
    assert_eq!(leaf_checksum_errors(&pool, 1), found_by_scrub);
    assert_eq!(leaf_checksum_errors(&pool, 0), 0);
    pool.core.request_scrub().unwrap();
    let again = wait_scan(&pool, ScanFunction::Scrub);
    assert_eq!(
        again.copies_bad, 0,
        "a second scrub finds nothing: {again:?}"
    );
    let report = check_pool(&pool, false).unwrap();
    assert!(report.is_clean(), "{report:#?}");
    assert_eq!(report.copies_bad, 0);
    pool.export().unwrap();

    // Side b alone now holds every block: a read of a is made to fail.
    assert_side_b_alone_reads(&mirror, &[&files]);
}

/// A scrub's counts agree with what it did. The bug: the scan's walk reads the indirect and
/// dnode blocks it descends through with ordinary self-healing reads, which take side a first;
/// with side a wiped and the cache cold, those reads repaired the bad copies before the scan
/// verified the blocks, so the leaf's CKSUM column counted copies that the scrub's bad copies
/// and "repaired" bytes did not; and "issued" added every mirror child's copy while
/// "examined" added the block once, so a scrub on a two-way mirror issued twice what it
/// scanned. Here side a's whole data area is zeroed: one scrub must find and repair every bad
/// copy (exactly the CKSUM growth), report their bytes, issue no more than it scanned, and
/// leave nothing for check or a second scrub; side a then holds every block alone.
#[test]
fn one_scrub_repairs_a_wiped_side_and_counts_every_copy() {
    let mirror = Mirror::new();
    let pool = mirror.create(tiny());
    let files = write_files(&pool, 300, 48, FILE_BYTES);
    pool.export().unwrap();
    let device_size = std::fs::metadata(mirror.path("a.img")).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(mirror.path("a.img"))
        .unwrap();
    // The data area only: the labels (and their uberblocks) stay.
    let zeros = vec![0u8; 1 << 20];
    let end = device_size - VDEV_LABEL_END_SIZE;
    let mut offset = VDEV_LABEL_START_SIZE;
    while offset < end {
        let length = (end - offset).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..length], offset).unwrap();
        offset += length as u64;
    }
    drop(file);

    // A fresh import (cold cache); what the import and one sync read and repair on their own
    // is not the scrub's: the CKSUM growth is measured from after them.
    let pool = mirror.import(tiny());
    pool.sync().unwrap();
    let before = leaf_checksum_errors(&pool, 0);
    pool.core.request_scrub().unwrap();
    let scrub = wait_scan(&pool, ScanFunction::Scrub);
    let found = leaf_checksum_errors(&pool, 0) - before;
    eprintln!("scrub: {scrub:?}; CKSUM of side a grew by {found}");
    assert_eq!(scrub.state, ScanState::Finished);
    assert_eq!(scrub.errors, 0, "{scrub:?}");
    assert_eq!(scrub.unrepaired, 0, "{scrub:?}");
    assert!(scrub.copies_bad > 0, "{scrub:?}");
    assert_eq!(
        scrub.copies_bad, found,
        "every copy the leaf counted bad is one the scrub reports"
    );
    assert_eq!(leaf_checksum_errors(&pool, 1), 0);
    // Every bad copy was rewritten: at least a sector each, at most its block's share.
    assert!(scrub.repaired >= scrub.copies_bad * 512, "{scrub:?}");
    assert!(scrub.repaired <= scrub.examined, "{scrub:?}");
    assert!(scrub.issued <= scrub.examined, "issued {scrub:?}");
    let report = check_pool(&pool, false).unwrap();
    assert!(report.is_clean(), "{report:#?}");
    assert_eq!(report.copies_bad, 0, "{report:#?}");

    let cksum = leaf_checksum_errors(&pool, 0);
    pool.core.request_scrub().unwrap();
    let again = wait_scan(&pool, ScanFunction::Scrub);
    assert_eq!(
        (again.copies_bad, again.repaired, again.errors),
        (0, 0, 0),
        "a second scrub finds nothing: {again:?}"
    );
    assert!(again.issued <= again.examined, "{again:?}");
    assert_eq!(leaf_checksum_errors(&pool, 0), cksum);
    pool.export().unwrap();

    // Side a alone holds every block: every read of side b fails.
    let pool = mirror.import(tiny());
    mirror
        .plan("b.img")
        .add_read_fault(VDEV_LABEL_START_SIZE..u64::MAX, ReadFaultKind::Fail);
    assert_files_read_right(&pool, &files, FILE_BYTES, "read from side a alone");
    let report = check_pool(&pool, false).unwrap();
    assert!(report.blocks_unreadable.is_empty(), "{report:#?}");
    mirror.plan("b.img").clear_read_faults();
    pool.export().unwrap();
}

/// A scrub with one mirror side offline, over gang blocks. The bug: the gang header reads
/// (every copy, for a scrub) read the offline child too, counted a checksum error against it
/// and a bad copy, and failed to rewrite it, so the scrub reported bad and unrepaired copies
/// on a pool with no damage, and a side that is merely offline showed CKSUM errors. An
/// offline child holds no copy to verify: the scrub must find nothing.
#[test]
fn scrub_with_a_side_offline_finds_no_bad_gang_header_copies() {
    let mirror = Mirror::new();
    let pool = mirror.create(common::gang::forcing(100));
    let files = write_files(&pool, 700, 8, FILE_BYTES);
    assert!(
        !common::gang::gangs_in(&pool.root_objset()).is_empty(),
        "no gang block was written"
    );
    pool.offline("b.img").unwrap();
    pool.core.request_scrub().unwrap();
    let scrub = wait_scan(&pool, ScanFunction::Scrub);
    assert_eq!(scrub.state, ScanState::Finished);
    assert_eq!(
        (scrub.copies_bad, scrub.unrepaired, scrub.errors),
        (0, 0, 0),
        "{scrub:?}"
    );
    assert_eq!(
        leaf_checksum_errors(&pool, 1),
        0,
        "CKSUM of the offline side"
    );
    assert_eq!(leaf_checksum_errors(&pool, 0), 0);
    assert_files_read_right(&pool, &files, FILE_BYTES, "read back with b offline");
    pool.export().unwrap();
}

/// A bad copy of a gang header that cannot be rewritten is counted against its leaf once. The
/// bug: verifying a gang (scrub, check) read every header and piece copy, repaired the bad
/// ones, and then read the whole gang again through the ordinary read path, which tries side
/// a first, to check its checksum: when the rewrite failed (or check -n rewrote nothing) the
/// same bad copy was counted twice in the leaf's CKSUM column, and a scrub's bad copies were
/// half of what the column said. The whole is now checked from the bytes already verified.
#[test]
fn a_bad_gang_header_copy_is_counted_once() {
    let mirror = Mirror::new();
    let pool = mirror.create(common::gang::forcing(100));
    let files = write_files(&pool, 900, 4, FILE_BYTES);
    let gangs = common::gang::gangs_in(&pool.root_objset());
    assert!(!gangs.is_empty(), "no gang block was written");
    pool.export().unwrap();
    let damaged: Vec<u64> = gangs
        .iter()
        .take(3)
        .map(|gang| gang.copies().next().unwrap().offset)
        .collect();
    for offset in &damaged {
        common::gang::overwrite(&mirror.path("a.img"), *offset + 64, &[0x5A; 64]);
    }
    let damaged = damaged.len() as u64;
    let pool = mirror.import(common::gang::forcing(100));
    pool.sync().unwrap();

    // Side a takes no write: the scrub finds every bad header copy and rewrites none.
    let plan = mirror.plan("a.img");
    plan.fail_writes_from(plan.write_count());
    let before = leaf_checksum_errors(&pool, 0);
    pool.core.request_scrub().unwrap();
    let scrub = wait_scan(&pool, ScanFunction::Scrub);
    assert_eq!(
        (scrub.copies_bad, scrub.unrepaired, scrub.errors),
        (damaged, damaged, 0),
        "{scrub:?}"
    );
    assert_eq!(
        leaf_checksum_errors(&pool, 0) - before,
        damaged,
        "each bad copy is counted once: {scrub:?}"
    );

    // Side a writes again: the next scrub rewrites them, and the copies side a missed while
    // its writes failed (stale, in its DTL: bad copies but no checksum errors).
    plan.fail_writes_from(u64::MAX);
    let before = leaf_checksum_errors(&pool, 0);
    pool.core.request_scrub().unwrap();
    let scrub = wait_scan(&pool, ScanFunction::Scrub);
    assert!(scrub.copies_bad >= damaged, "{scrub:?}");
    assert_eq!((scrub.unrepaired, scrub.errors), (0, 0), "{scrub:?}");
    assert_eq!(leaf_checksum_errors(&pool, 0) - before, damaged);
    let report = check_pool(&pool, false).unwrap();
    assert!(report.is_clean(), "{report:#?}");
    assert_eq!(report.copies_bad, 0, "{report:#?}");
    assert_files_read_right(&pool, &files, FILE_BYTES, "read back");
    pool.export().unwrap();
}

/// Resilver after `break_side` made side b miss the writes of `files_missed`.
fn resilver_after(break_side: impl Fn(&Mirror, &Pool), heal_side: impl Fn(&Mirror, &Pool)) {
    let mirror = Mirror::new();
    let pool = mirror.create(tiny());
    let before = write_files(&pool, 1, 20, FILE_BYTES);
    break_side(&mirror, &pool);
    let missed = write_files(&pool, 500, 8, FILE_BYTES);
    let dtl = pool.core.io.vdevs.tops()[0].children[1].dtl.ranges();
    assert!(!dtl.is_empty(), "side b logged no missed txg");
    assert!(pool.core.io.vdevs.tops()[0].children[0].dtl.is_empty());
    // The log survives export and import.
    pool.export().unwrap();
    let pool = mirror.import(tiny());
    let reloaded = pool.core.io.vdevs.tops()[0].children[1].dtl.ranges();
    assert!(
        reloaded.first().map(|range| range.0) <= dtl.first().map(|range| range.0)
            && !reloaded.is_empty(),
        "DTL before export {dtl:?}, after import {reloaded:?}"
    );
    heal_side(&mirror, &pool);
    let resilver = wait_scan(&pool, ScanFunction::Resilver);
    assert_eq!(resilver.state, ScanState::Finished);
    assert_eq!((resilver.errors, resilver.unrepaired), (0, 0));
    assert!(resilver.repaired > 0, "{resilver:?}");
    assert!(resilver.copies_bad > 0, "{resilver:?}");
    eprintln!(
        "side b missed txgs {dtl:?}: resilver found {} stale copies, rewrote all ({} bytes), {} unrepaired",
        resilver.copies_bad, resilver.repaired, resilver.unrepaired
    );
    // Stale copies on a side that missed their txgs are not checksum errors.
    assert_eq!(leaf_checksum_errors(&pool, 1), 0);
    // Only what was missed: the older files' blocks are skipped by birth.
    assert!(
        resilver.examined < resilver.to_examine / 2,
        "resilver examined {} of {} bytes",
        resilver.examined,
        resilver.to_examine
    );
    assert!(
        pool.core.io.vdevs.tops()[0].children[1].dtl.is_empty(),
        "DTL after resilver: {:?}",
        pool.core.io.vdevs.tops()[0].children[1].dtl.ranges()
    );
    assert_eq!(pool.core.io.vdevs.health().as_str(), "ONLINE");
    assert_clean(&pool);
    pool.export().unwrap();

    // Side b alone holds every block, old and new.
    assert_side_b_alone_reads(&mirror, &[&before, &missed]);
}

#[test]
fn offline_side_is_resilvered_when_back_online() {
    resilver_after(
        |_, pool| {
            pool.offline("b.img").unwrap();
            assert_eq!(pool.core.io.vdevs.health().as_str(), "DEGRADED");
            assert_eq!(
                pool.core.io.vdevs.tops()[0].children[1].health().as_str(),
                "OFFLINE"
            );
            // The last usable side cannot go.
            assert!(pool.offline("a.img").is_err());
        },
        |_, pool| {
            // Still offline after the import, and nothing resilvers it yet.
            assert!(pool.core.io.vdevs.tops()[0].children[1].is_offline());
            assert!(pool.core.scan_status().is_none());
            pool.online("b.img").unwrap();
            assert_eq!(pool.core.io.vdevs.health().as_str(), "ONLINE");
        },
    );
}

#[test]
fn side_failing_writes_is_resilvered_after_online() {
    resilver_after(
        |mirror, _| mirror.plan("b.img").fail_writes_from(0),
        |mirror, pool| {
            // The side failed its writes until now; `pool online` retries the resilver that
            // the import started (and that could not write to it).
            let side_b = &pool.core.io.vdevs.tops()[0].children[1];
            assert_eq!(side_b.health().as_str(), "FAULTED");
            assert_eq!(pool.core.io.vdevs.health().as_str(), "DEGRADED");
            mirror.plan("b.img").clear();
            pool.online("b.img").unwrap();
        },
    );
}

/// The child of the kill tests: import the pool with a slow scan (a few blocks per txg),
/// start a scrub (or bring side b online for a resilver), and once progress is persisted write
/// the examined bytes to the marker; then keep working until killed.
#[test]
fn scan_kill_child() {
    let Ok(dir) = std::env::var("TARN_SCAN_DIR") else {
        return;
    };
    let function = std::env::var("TARN_SCAN_FUNCTION").unwrap();
    let mut tunables = tiny();
    tunables.scan_blocks_per_txg_max = 4;
    tunables.txg_timeout = 1;
    let (pool, _) = Pool::import(
        POOL,
        ImportOptions::new(vec![PathBuf::from(&dir)], tunables),
    )
    .unwrap();
    if function == "scrub" {
        pool.core.request_scrub().unwrap();
    } else {
        pool.online("b.img").unwrap();
    }
    loop {
        pool.sync().unwrap();
        if let Some(status) = pool.core.scan_status() {
            if status.phys.examined > 0 && status.phys.state == ScanState::Scanning {
                // Committed with the txg just synced: the marker names persisted progress.
                pool.sync().unwrap();
                std::fs::write(
                    Path::new(&dir).join("marker"),
                    status.phys.examined.to_string(),
                )
                .unwrap();
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn scan_killed(function: ScanFunction) {
    let mirror = Mirror::new();
    let pool = mirror.create(tiny());
    let _before = write_files(&pool, 1, 12, FILE_BYTES);
    if function == ScanFunction::Resilver {
        pool.offline("b.img").unwrap();
        write_files(&pool, 300, 12, FILE_BYTES);
    }
    pool.export().unwrap();
    let child = spawn_child(
        module_path!(),
        "scan_kill_child",
        &[
            ("TARN_SCAN_DIR", mirror.dir.path().display().to_string()),
            ("TARN_SCAN_FUNCTION", function.as_str().to_string()),
        ],
    );
    let marker = mirror.dir.path().join("marker");
    wait_for_file(&marker, Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(50));
    kill_child(child);
    let examined_before_kill: u64 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(examined_before_kill > 0);

    // A read-only import shows the scan in progress and does not carry it on.
    let mut options = ImportOptions::new(vec![mirror.dir.path().to_path_buf()], tiny());
    options.readonly = true;
    options.wrap_device = Some(per_path_fault_wrapper(mirror.plans.clone()));
    let readonly = Pool::import(POOL, options).unwrap().0;
    let shown = readonly.core.scan_status().expect("persisted").phys;
    assert_eq!(shown.state, ScanState::Scanning);
    assert!(!readonly.core.scan_active());
    assert!(readonly.core.request_scrub().is_err());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(readonly.core.scan_status().unwrap().phys, shown);
    readonly.export().unwrap();

    // A slow scan again, so that the resumed state is seen before it finishes.
    let mut slow = tiny();
    slow.scan_blocks_per_txg_max = 1;
    slow.txg_timeout = 1;
    let pool = mirror.import(slow);
    let resumed = pool
        .core
        .scan_status()
        .expect("the scan state was persisted")
        .phys;
    assert_eq!(resumed.function, function);
    assert_eq!(resumed.state, ScanState::Scanning, "{resumed:?}");
    assert!(
        resumed.examined >= examined_before_kill,
        "resumed at {} bytes, {} were examined before the kill",
        resumed.examined,
        examined_before_kill
    );
    pool.export().unwrap();
    let pool = mirror.import(tiny());
    let finished = wait_scan(&pool, function);
    assert_eq!(finished.state, ScanState::Finished);
    assert_eq!((finished.errors, finished.unrepaired), (0, 0));
    assert!(finished.examined > resumed.examined);
    assert!(pool.core.io.vdevs.tops()[0].children[1].dtl.is_empty());
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn scrub_killed_during_scan_resumes_after_import() {
    scan_killed(ScanFunction::Scrub);
}

#[test]
fn resilver_killed_during_scan_resumes_after_import() {
    scan_killed(ScanFunction::Resilver);
}

#[test]
fn scrub_pause_resume_and_cancel() {
    let mirror = Mirror::new();
    let mut slow = tiny();
    slow.scan_blocks_per_txg_max = 1;
    slow.txg_timeout = 1;
    let pool = mirror.create(slow);
    write_files(&pool, 1, 4, FILE_BYTES);
    assert!(
        pool.core.request_scan_cancel().is_err(),
        "nothing to cancel"
    );
    pool.core.request_scrub().unwrap();
    pool.sync().unwrap();
    assert!(pool.core.request_scrub().is_err(), "already scrubbing");
    pool.core.request_scan_pause().unwrap();
    pool.sync().unwrap();
    let paused = pool.core.scan_status().unwrap().phys;
    assert!(paused.paused);
    pool.sync().unwrap();
    pool.sync().unwrap();
    assert_eq!(
        pool.core.scan_status().unwrap().phys.examined,
        paused.examined,
        "a paused scrub does not advance"
    );
    pool.core.request_scrub().unwrap();
    pool.sync().unwrap();
    assert!(!pool.core.scan_status().unwrap().phys.paused);
    pool.core.request_scan_cancel().unwrap();
    pool.sync().unwrap();
    assert_eq!(
        pool.core.scan_status().unwrap().phys.state,
        ScanState::Canceled
    );
    pool.export().unwrap();
}

/// Guards the wait for a scan against a paused scrub. `wait_scan` (`pool wait -t scrub`, and
/// how the stress tool and `pool replace` wait) waited while the scrub's state was scanning,
/// paused or not; a paused scrub never ends by itself, so the waiter hung until someone
/// resumed or cancelled it. tarn-stress with paced scans hung so: a child had paused a
/// scrub, and the next child waited for it before its own scrub, at its start, forever ("the
/// child hung: still running 120s after its deadline"). As in OpenZFS, where `zpool wait -t
/// scrub` is done once the scrub is paused, a paused scrub is not waited for, whether it was
/// paused before the wait began or during it.
#[test]
fn waiting_for_a_scrub_ends_when_the_scrub_is_paused() {
    let mirror = Mirror::new();
    let mut slow = tiny();
    // A block a txg: the scrub runs for minutes, far longer than the waits below.
    slow.scan_blocks_per_txg_max = 1;
    let pool = mirror.create(slow);
    write_files(&pool, 1, 4, FILE_BYTES);
    pool.core.request_scrub().unwrap();
    pool.sync().unwrap();
    pool.core.request_scan_pause().unwrap();
    pool.sync().unwrap();
    assert!(pool.core.scan_status().unwrap().phys.paused);
    ScrubWaiter::start(&pool).assert_ends(&pool, "a wait that began with the scrub paused");
    // Resumed, the scrub is waited for again; paused during the wait, it is not.
    pool.core.request_scrub().unwrap();
    pool.sync().unwrap();
    let running = pool.core.scan_status().unwrap().phys;
    assert!(running.state == ScanState::Scanning && !running.paused);
    let waiter = ScrubWaiter::start(&pool);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !waiter.thread.is_finished(),
        "the wait ended while the scrub ran"
    );
    pool.core.request_scan_pause().unwrap();
    pool.sync().unwrap();
    waiter.assert_ends(&pool, "a wait during which the scrub was paused");
    pool.core.request_scan_cancel().unwrap();
    pool.sync().unwrap();
    pool.export().unwrap();
}

/// `wait_scan(Scrub)` running on a thread of its own.
struct ScrubWaiter {
    done: std::sync::mpsc::Receiver<Result<(), tarn::pool::PoolError>>,
    thread: std::thread::JoinHandle<()>,
}

impl ScrubWaiter {
    fn start(pool: &Pool) -> ScrubWaiter {
        let (sender, done) = std::sync::mpsc::channel();
        let core = pool.core.clone();
        let thread = std::thread::spawn(move || {
            let _ = sender.send(core.wait_scan(ScanFunction::Scrub));
        });
        ScrubWaiter { done, thread }
    }

    /// The wait must end, without error, within 10 s. One still waiting then is let go by
    /// cancelling the scrub, so that the test fails rather than hangs.
    fn assert_ends(self, pool: &Pool, what: &str) {
        let waited = self.done.recv_timeout(Duration::from_secs(10));
        if waited.is_err() {
            pool.core.request_scan_cancel().unwrap();
            pool.sync().unwrap();
        }
        self.thread.join().unwrap();
        waited
            .unwrap_or_else(|_| panic!("{what}: still waiting for the paused scrub after 10 s"))
            .unwrap();
    }
}

/// A scrub while the pool keeps writing, overwriting and removing files (their blocks freed
/// and reallocated under the scan): it finishes with no error and no bad copy, never reads a
/// block that was freed and reused (that would be a false checksum error), and `check` is
/// clean. Syncs are never paused.
#[test]
fn scrub_runs_while_the_pool_writes_and_frees() {
    let mirror = Mirror::new();
    let mut tunables = tiny();
    tunables.scan_blocks_per_txg_max = 16;
    let pool = mirror.create(tunables);
    let mut files = write_files(&pool, 1, 16, FILE_BYTES);
    pool.core.request_scrub().unwrap();
    pool.sync().unwrap();
    let objset = pool.root_objset();
    let mut rounds = 0u64;
    loop {
        let status = pool.core.scan_status().unwrap().phys;
        if status.state != ScanState::Scanning {
            break;
        }
        rounds += 1;
        assert!(rounds < 10_000, "the scrub never finished: {status:?}");
        // Overwrite one file, remove another, create a new one, then sync: every txg frees
        // blocks the scan may not have reached yet.
        let hold = pool.assign().unwrap();
        let (object, _) = files[(rounds as usize) % files.len()];
        objset
            .write(&hold.tx(), object, 0, &pattern(9000 + rounds, FILE_BYTES))
            .unwrap();
        let victim = files.remove(((rounds * 7) as usize) % files.len());
        objset.remove_object(&hold.tx(), victim.0).unwrap();
        drop(hold);
        files.extend(write_files(&pool, 10_000 + rounds, 1, FILE_BYTES));
        // The overwritten file's seed changed.
        for file in files.iter_mut() {
            if file.0 == object {
                file.1 = 9000 + rounds;
            }
        }
        pool.sync().unwrap();
    }
    let scrub = pool.core.scan_status().unwrap().phys;
    eprintln!("scrub finished after {rounds} rounds of writes and frees: {scrub:?}");
    assert_eq!(scrub.state, ScanState::Finished);
    assert!(
        rounds >= 3,
        "the scrub ran beside only {rounds} rounds of writes"
    );
    assert_eq!(
        (scrub.errors, scrub.copies_bad, scrub.unrepaired),
        (0, 0, 0),
        "{scrub:?}"
    );
    assert_eq!(leaf_checksum_errors(&pool, 0), 0);
    assert_eq!(leaf_checksum_errors(&pool, 1), 0);
    for (object, seed) in &files {
        let mut data = vec![0u8; FILE_BYTES];
        objset.read(*object, 0, &mut data).unwrap();
        assert!(data == pattern(*seed, FILE_BYTES), "object {object}");
    }
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A mirror side missing at import while data is written comes back at the next import. Its
/// missed txgs were logged (the missing device fails every write), the import starts a
/// resilver by itself, and afterwards the side alone holds every block.
#[test]
fn side_missing_at_import_is_resilvered_when_it_returns() {
    let mirror = Mirror::new();
    let pool = mirror.create(tiny());
    let before = write_files(&pool, 1, 8, FILE_BYTES);
    pool.export().unwrap();
    let away = mirror.dir.path().join("away");
    std::fs::create_dir(&away).unwrap();
    std::fs::rename(mirror.path("b.img"), away.join("b.img")).unwrap();

    let pool = mirror.import(tiny());
    assert_eq!(
        pool.core.io.vdevs.tops()[0].children[1].health().as_str(),
        "UNAVAIL"
    );
    let missed = write_files(&pool, 700, 8, FILE_BYTES);
    assert!(!pool.core.io.vdevs.tops()[0].children[1].dtl.is_empty());
    pool.export().unwrap();

    std::fs::rename(away.join("b.img"), mirror.path("b.img")).unwrap();
    let pool = mirror.import(tiny());
    let resilver = wait_scan(&pool, ScanFunction::Resilver);
    assert_eq!(resilver.state, ScanState::Finished);
    assert!(resilver.repaired > 0, "{resilver:?}");
    assert!(pool.core.io.vdevs.tops()[0].children[1].dtl.is_empty());
    assert_eq!(pool.core.io.vdevs.health().as_str(), "ONLINE");
    assert_clean(&pool);
    pool.export().unwrap();

    assert_side_b_alone_reads(&mirror, &[&before, &missed]);
}

/// A block damaged on both sides has no good copy: the scrub finishes, counts it as an error
/// (never panics, never rewrites it), the pool goes on, and no scan starts again by itself.
#[test]
fn scrub_counts_a_block_with_no_good_copy_and_stops() {
    let mirror = Mirror::new();
    let pool = mirror.create(tiny());
    let files = write_files(&pool, 40, 4, FILE_BYTES);
    let extents = data_extents(&pool, &files[..1]);
    pool.export().unwrap();
    let (offset, _) = extents[0];
    for side in ["a.img", "b.img"] {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(mirror.path(side))
            .unwrap();
        file.write_all_at(&[0xA5; 64], VDEV_LABEL_START_SIZE + offset)
            .unwrap();
    }
    let pool = mirror.import(tiny());
    pool.core.request_scrub().unwrap();
    let scrub = wait_scan(&pool, ScanFunction::Scrub);
    assert_eq!(scrub.state, ScanState::Finished);
    assert_eq!(scrub.errors, 1, "{scrub:?}");
    assert_eq!(
        scrub.copies_bad, 0,
        "a block with no good copy is counted once, as an error"
    );
    // The other files still read right; the damaged one fails with an error.
    assert_files_read_right(&pool, &files[1..], FILE_BYTES, "read back");
    let mut data = vec![0u8; FILE_BYTES];
    assert!(pool.root_objset().read(files[0].0, 0, &mut data).is_err());
    pool.sync().unwrap();
    pool.sync().unwrap();
    assert!(!pool.core.scan_active(), "no scan restarts by itself");
    pool.export().unwrap();
}

/// Crash safety of the DTL: side b fails every write from some txg on; the next txg is cut by a
/// power failure at several points of its sync. Whatever txg the import lands on, b's log names
/// every committed txg it missed: after a resilver, b alone reads everything that was synced.
#[test]
fn dtl_survives_power_cuts_during_sync() {
    for (round, lost_from) in [0u64, 3, 8, 20, 60].into_iter().enumerate() {
        let mirror = Mirror::new();
        let pool = mirror.create(tiny());
        let first = write_files(&pool, 1, 4, FILE_BYTES);
        mirror
            .plan("b.img")
            .fail_writes_from(mirror.plan("b.img").write_count());
        // b fails slowly: its misses become known only as the txg's last writes complete.
        mirror.plan("b.img").set_io_delay(Duration::from_millis(5));
        let second = write_files(&pool, 100, 4, FILE_BYTES);
        for side in ["a.img", "b.img"] {
            mirror.plan(side).set_power_cut(round as u64 * 7 + 1);
        }
        let a = mirror.plan("a.img");
        a.stop_at_write(a.write_count() + lost_from);
        let objset = pool.root_objset();
        for index in 0..4 {
            let object = create_file(&pool, &objset, 16 << 10, Compression::Off);
            let hold = pool.assign().unwrap();
            objset
                .write(&hold.tx(), object, 0, &pattern(200 + index, FILE_BYTES))
                .unwrap();
        }
        let _ = pool.sync();
        for side in ["a.img", "b.img"] {
            mirror.plan(side).stop_now();
        }
        drop(objset);
        drop(pool);
        for side in ["a.img", "b.img"] {
            mirror.plan(side).clear();
        }

        // b is back (usable, with missed txgs): the import starts its resilver by itself.
        let pool = mirror.import(tiny());
        let resilver = wait_scan(&pool, ScanFunction::Resilver);
        assert_eq!(resilver.function, ScanFunction::Resilver);
        assert!(
            resilver.copies_bad > 0,
            "lost_from {lost_from}: no stale copy found, b's missed txgs were not persisted: {resilver:?}"
        );
        assert_eq!(
            (resilver.errors, resilver.unrepaired),
            (0, 0),
            "lost_from {lost_from}: {resilver:?}"
        );
        assert!(pool.core.io.vdevs.tops()[0].children[1].dtl.is_empty());
        assert_clean(&pool);
        pool.export().unwrap();
        assert_side_b_alone_reads(&mirror, &[&first, &second]);
    }
}

/// What the DTL and the scan cost a txg. On a healthy mirror: nothing (no DTL object is ever
/// created, no scan state). With a side offline: the DTL is rewritten in the txgs that write,
/// at the price of at most one extra sync pass each (the pass that persists it), it names every
/// txg that wrote, and it stays small (a few ranges for one outage).
#[test]
fn dtl_cost_per_txg() {
    let mirror = Mirror::new();
    let pool = mirror.create(tiny());
    write_files(&pool, 1, 4, FILE_BYTES);
    let passes_healthy: Vec<u32> = pool
        .core
        .txgs
        .history()
        .iter()
        .map(|row| row.passes)
        .collect();
    for leaf in pool.core.io.vdevs.leaves() {
        let key = tarn::pool::dtl::dtl_key(leaf.guid);
        let object = tarn::pool::lookup_mos_directory(
            &pool.core.mos,
            tarn::pool::MOS_OBJECT_DIRECTORY,
            &key,
        )
        .unwrap();
        assert_eq!(object, None, "a healthy leaf has no DTL object");
    }
    assert!(pool.core.scan_status().is_none());

    pool.offline("b.img").unwrap();
    let before = pool.core.txgs.history().len();
    for round in 0..6 {
        write_files(&pool, 100 + round, 1, FILE_BYTES);
    }
    let history = pool.core.txgs.history();
    let healthy_max = passes_healthy.iter().copied().max().unwrap_or(1);
    let offline_txgs: Vec<_> = history
        .iter()
        .skip(before)
        .filter(|row| row.passes > 0)
        .collect();
    assert!(
        offline_txgs.len() >= 3,
        "{} txgs recorded",
        offline_txgs.len()
    );
    assert!(!passes_healthy.is_empty());
    for row in offline_txgs {
        assert!(
            row.passes <= healthy_max + 1,
            "txg {} took {} passes with a side offline (healthy: at most {healthy_max})",
            row.txg,
            row.passes
        );
    }
    // Every txg that wrote while b was offline is in its log, as few ranges (txgs that wrote
    // nothing, an uberblock alone, leave gaps).
    let dtl = &pool.core.io.vdevs.tops()[0].children[1].dtl;
    for row in history.iter().skip(before).filter(|row| row.passes > 0) {
        assert!(
            dtl.contains(row.txg),
            "txg {} missing from {:?}",
            row.txg,
            dtl.ranges()
        );
    }
    assert!(dtl.ranges().len() <= 3, "{:?}", dtl.ranges());
    pool.export().unwrap();
}

/// A mirror side that comes back blank (same path, no labels) was once accepted by `online`,
/// which resilvered only the txgs it had missed and reported the mirror ONLINE while
/// the side held none of the older blocks (and, its labels never written, came back UNAVAIL at
/// the next import). `online` must read the device's label again and refuse one that is
/// missing or names another pool or another leaf, leaving the side OFFLINE; `replace` in place
/// then resilvers it whole, after which it alone reads every file.
#[test]
fn blank_or_foreign_side_is_refused_by_online_and_replaced_whole() {
    let mirror = Mirror::new();
    let pool = mirror.create(tiny());
    let before = write_files(&pool, 1, 20, FILE_BYTES);
    pool.offline("b.img").unwrap();
    let missed = write_files(&pool, 500, 8, FILE_BYTES);

    // Another pool's disk at b's path: refused, naming the other pool.
    let other_dir = tempfile::tempdir().unwrap();
    let other = Pool::create(CreateOptions {
        name: "other".into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Leaf(other_dir.path().join("c.img"))],
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: tiny(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })
    .unwrap();
    other.export().unwrap();
    std::fs::copy(other_dir.path().join("c.img"), mirror.path("b.img")).unwrap();
    let error = pool.online("b.img").unwrap_err().to_string();
    assert!(
        error.contains("another pool") && error.contains("invalid label"),
        "{error}"
    );

    // The disk comes back wiped: same path and size, every byte zero.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(mirror.path("b.img"))
        .unwrap();
    file.set_len(0).unwrap();
    file.set_len(VDEV_SIZE).unwrap();
    drop(file);
    let error = pool.online("b.img").unwrap_err().to_string();
    assert!(
        error.contains("no label of this pool")
            && error.contains("invalid label")
            && error.contains(&format!("tarn pool replace {POOL} b.img")),
        "{error}"
    );
    let side_b = &pool.core.io.vdevs.tops()[0].children[1];
    assert_eq!(side_b.health().as_str(), "OFFLINE");
    assert_eq!(pool.core.io.vdevs.health().as_str(), "DEGRADED");
    assert!(pool.core.scan_status().is_none(), "no resilver may start");

    // The pool keeps working on side a.
    let after = write_files(&pool, 900, 4, FILE_BYTES);
    assert_files_read_right(&pool, &before, FILE_BYTES, "read back");

    // Replacing b in place resilvers every block onto the blank disk.
    let new = pool.replace("b.img", None, false).unwrap();
    pool.wait_replaced(new).unwrap();
    assert_eq!(pool.core.io.vdevs.health().as_str(), "ONLINE");
    let resilver = wait_scan(&pool, ScanFunction::Resilver);
    assert_eq!((resilver.errors, resilver.unrepaired), (0, 0));
    assert_clean(&pool);
    pool.export().unwrap();
    assert_side_b_alone_reads(&mirror, &[&before, &missed, &after]);
}

/// The blank side at import: a mirror side wiped while the pool was exported must not be
/// taken as that leaf because a device sits at its path. Import matches devices to leaves by
/// the (pool guid, leaf guid) of their labels, so the side is missing (the pool DEGRADED),
/// `online` says to replace it, and `replace` in place resilvers it whole.
#[test]
fn blank_side_at_import_is_missing_not_taken_as_the_leaf() {
    let mirror = Mirror::new();
    let pool = mirror.create(tiny());
    let files = write_files(&pool, 1, 12, FILE_BYTES);
    pool.export().unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(mirror.path("b.img"))
        .unwrap();
    file.set_len(0).unwrap();
    file.set_len(VDEV_SIZE).unwrap();
    drop(file);
    let pool = mirror.import(tiny());
    assert!(pool.core.io.vdevs.tops()[0].children[1].device.is_missing());
    assert_eq!(pool.core.io.vdevs.health().as_str(), "DEGRADED");
    let error = pool.online("b.img").unwrap_err().to_string();
    assert!(
        error.contains(&format!("tarn pool replace {POOL} b.img")),
        "{error}"
    );
    let new = pool.replace("b.img", None, false).unwrap();
    pool.wait_replaced(new).unwrap();
    assert_eq!(pool.core.io.vdevs.health().as_str(), "ONLINE");
    assert_clean(&pool);
    pool.export().unwrap();
    assert_side_b_alone_reads(&mirror, &[&files]);
}

/// Make side b miss the writes of `count` new files while staying usable (its writes fail,
/// then work again), as a disk that dropped writes for a while; the files are returned.
fn side_b_misses_files(
    mirror: &Mirror,
    pool: &Pool,
    seed: u64,
    count: u64,
) -> Vec<(ObjectId, u64)> {
    let plan = mirror.plan("b.img");
    plan.fail_writes_from(plan.write_count());
    let files = write_files(pool, seed, count, FILE_BYTES);
    pool.sync().unwrap();
    plan.fail_writes_from(u64::MAX);
    pool.core.clear_errors(None).unwrap();
    let side_b = &pool.core.io.vdevs.tops()[0].children[1];
    assert!(!side_b.dtl.is_empty(), "side b logged no missed txg");
    assert!(side_b.is_usable(), "side b is {}", side_b.health().as_str());
    files
}

fn scanning(pool: &Pool) -> Option<tarn::pool::scan::ScanPhys> {
    let phys = pool.core.scan_status()?.phys;
    (phys.state == ScanState::Scanning).then_some(phys)
}

/// `pool resilver` (OpenZFS `zpool resilver`) restarts the resilver in progress from the
/// beginning, and a resilver restarted several times part-way, with the pool writing beside
/// it, still converges: its end clears every dirty time log, a scrub after it finds no bad
/// copy, `check` is clean, and side b alone then reads every file right.
#[test]
fn a_resilver_restarted_part_way_still_converges() {
    use tarn::pool::scan::ResilverRequest;
    let mirror = Mirror::new();
    let mut slow = tiny();
    slow.scan_blocks_per_txg_max = 4;
    let pool = mirror.create(slow);
    let before = write_files(&pool, 1, 8, FILE_BYTES);
    let missed = side_b_misses_files(&mirror, &pool, 100, 16);
    assert_eq!(pool.core.request_resilver(), Ok(ResilverRequest::Started));
    pool.sync().unwrap();
    let mut written = Vec::new();
    for restart in 0..3u64 {
        // Part-way: well past the first round, not finished.
        let mut phys = scanning(&pool).expect("a resilver in progress");
        let first = phys.examined;
        while phys.examined < 2 * first + (64 << 10) {
            written.extend(write_files(
                &pool,
                1000 + written.len() as u64,
                1,
                FILE_BYTES,
            ));
            pool.sync().unwrap();
            phys = scanning(&pool).expect("the resilver ended before it was restarted");
        }
        assert_eq!(phys.function, ScanFunction::Resilver);
        // More missed writes while it runs: the restart takes them too.
        let more = side_b_misses_files(&mirror, &pool, 200 + restart * 10, 2);
        written.extend(more);
        assert_eq!(pool.core.request_resilver(), Ok(ResilverRequest::Restarted));
        pool.sync().unwrap();
        let restarted = scanning(&pool).expect("a resilver in progress after the restart");
        assert_eq!(restarted.function, ScanFunction::Resilver);
        eprintln!(
            "restart {restart}: examined {} before, {} after",
            phys.examined, restarted.examined
        );
        assert!(
            restarted.examined < phys.examined,
            "restart {restart} went on: {phys:?} then {restarted:?}"
        );
        assert!(restarted.max_txg > phys.max_txg, "{restarted:?}");
    }
    // The restarted resilver is persisted like any: after an import (at full speed) it goes
    // on from its bookmark.
    pool.export().unwrap();
    let pool = mirror.import(tiny());
    let resilver = wait_scan(&pool, ScanFunction::Resilver);
    assert_eq!(resilver.function, ScanFunction::Resilver);
    assert_eq!(resilver.state, ScanState::Finished);
    assert_eq!(
        (resilver.errors, resilver.unrepaired),
        (0, 0),
        "{resilver:?}"
    );
    for leaf in pool.core.io.vdevs.leaves() {
        assert!(
            leaf.dtl.is_empty(),
            "{} still misses {:?}",
            leaf.path.display(),
            leaf.dtl.ranges()
        );
    }
    assert_eq!(pool.core.request_resilver(), Ok(ResilverRequest::NotNeeded));
    pool.core.request_scrub().unwrap();
    let scrub = wait_scan(&pool, ScanFunction::Scrub);
    assert_eq!(scrub.state, ScanState::Finished);
    assert_eq!(
        (
            scrub.copies_bad,
            scrub.repaired,
            scrub.unrepaired,
            scrub.errors
        ),
        (0, 0, 0, 0),
        "the scrub after the resilver: {scrub:?}"
    );
    assert_clean(&pool);
    pool.export().unwrap();
    assert_side_b_alone_reads(&mirror, &[&before, &missed, &written]);
}

/// `pool resilver` with nothing to resilver changes nothing (a scrub in progress goes on), as
/// OpenZFS's `spa_scan` returns at once when no writable leaf has a DTL; once a side misses
/// writes it cancels the scrub in progress, paused or not, and resilvers; a read-only pool
/// refuses it.
#[test]
fn a_resilver_request_takes_over_a_scrub_only_when_a_side_misses_writes() {
    use tarn::pool::scan::{ResilverRequest, ScanRequestError};
    let mirror = Mirror::new();
    let mut slow = tiny();
    slow.scan_blocks_per_txg_max = 1;
    let pool = mirror.create(slow);
    let before = write_files(&pool, 1, 8, FILE_BYTES);
    assert_eq!(pool.core.request_resilver(), Ok(ResilverRequest::NotNeeded));
    pool.sync().unwrap();
    assert!(pool.core.scan_status().is_none(), "a scan started");

    pool.core.request_scrub().unwrap();
    pool.sync().unwrap();
    assert_eq!(pool.core.request_resilver(), Ok(ResilverRequest::NotNeeded));
    pool.sync().unwrap();
    let scrub = scanning(&pool).expect("the scrub goes on");
    assert_eq!(scrub.function, ScanFunction::Scrub);

    // Paused, the scrub gives way all the same.
    pool.core.request_scan_pause().unwrap();
    pool.sync().unwrap();
    let missed = side_b_misses_files(&mirror, &pool, 100, 8);
    assert!(scanning(&pool).expect("the scrub is still there").paused);
    assert_eq!(
        pool.core.request_resilver(),
        Ok(ResilverRequest::ReplacesScrub)
    );
    pool.sync().unwrap();
    let resilver = scanning(&pool).expect("a resilver in progress");
    assert_eq!(resilver.function, ScanFunction::Resilver);
    assert!(!resilver.paused);
    // The rest at full speed.
    pool.export().unwrap();
    let pool = mirror.import(tiny());
    let resilver = wait_scan(&pool, ScanFunction::Resilver);
    assert_eq!(
        (resilver.errors, resilver.unrepaired),
        (0, 0),
        "{resilver:?}"
    );
    assert!(resilver.copies_bad > 0, "{resilver:?}");
    assert!(pool.core.io.vdevs.tops()[0].children[1].dtl.is_empty());
    pool.core.request_scrub().unwrap();
    let scrub = wait_scan(&pool, ScanFunction::Scrub);
    assert_eq!((scrub.copies_bad, scrub.errors), (0, 0), "{scrub:?}");
    assert_clean(&pool);
    pool.export().unwrap();

    let mut options = ImportOptions::new(vec![mirror.dir.path().to_path_buf()], tiny());
    options.readonly = true;
    let (readonly, _) = Pool::import(POOL, options).unwrap();
    assert_eq!(
        readonly.core.request_resilver(),
        Err(ScanRequestError::ReadOnlyResilver(POOL.into()))
    );
    readonly.export().unwrap();
    assert_side_b_alone_reads(&mirror, &[&before, &missed]);
}

/// A resilver's writes are issued without waiting (the next reads overlap them); one whose
/// writes fail still counts every copy it could not rewrite as unrepaired and leaves the side's
/// dirty time log as it was, so that a later resilver, with the side writing again, rewrites
/// them all and only then clears the log.
#[test]
fn a_resilver_whose_writes_fail_keeps_the_log_and_a_later_one_finishes() {
    use tarn::pool::scan::ResilverRequest;
    let mirror = Mirror::new();
    let pool = mirror.create(tiny());
    write_files(&pool, 1, 4, FILE_BYTES);
    // Side b misses these files' writes, and goes on failing its writes while usable again.
    let plan = mirror.plan("b.img");
    plan.fail_writes_from(plan.write_count());
    let missed = write_files(&pool, 500, 12, FILE_BYTES);
    pool.sync().unwrap();
    pool.core.clear_errors(None).unwrap();
    let _ = pool.core.request_resilver();
    let failed = wait_scan(&pool, ScanFunction::Resilver);
    assert_eq!(failed.state, ScanState::Finished, "{failed:?}");
    assert!(
        failed.copies_bad > 0 && failed.unrepaired > 0,
        "a resilver that could write nothing repaired everything: {failed:?}"
    );
    assert!(failed.unrepaired <= failed.copies_bad, "{failed:?}");
    let side_b = &pool.core.io.vdevs.tops()[0].children[1];
    assert!(
        !side_b.dtl.is_empty(),
        "the log was cleared by a resilver whose writes failed"
    );

    // Side b writes again: a new resilver rewrites every copy it missed.
    plan.fail_writes_from(u64::MAX);
    pool.core.clear_errors(None).unwrap();
    match pool.core.request_resilver() {
        Ok(ResilverRequest::Started | ResilverRequest::Restarted) => {}
        // clear_errors may have started one already.
        other => eprintln!("resilver request: {other:?}"),
    }
    let resilver = wait_scan(&pool, ScanFunction::Resilver);
    assert_eq!(
        (resilver.state, resilver.errors, resilver.unrepaired),
        (ScanState::Finished, 0, 0),
        "{resilver:?}"
    );
    assert!(resilver.repaired > 0, "{resilver:?}");
    let side_b = &pool.core.io.vdevs.tops()[0].children[1];
    assert!(
        side_b.dtl.is_empty(),
        "side b still misses {:?}",
        side_b.dtl.ranges()
    );
    assert_clean(&pool);
    pool.export().unwrap();
    // Side b alone holds every file it missed.
    assert_side_b_alone_reads(&mirror, &[&missed]);
}
