//! A mirror side whose flush fails is resilvered like a side that missed the writes.
//!
//! Guards a bug: a child whose flush failed only counted a write error, so its dirty
//! time log did not name the txg whose writes the flush should have made durable; a device
//! that dropped them from its cache was then never resilvered, and the pool's redundancy was
//! gone for those blocks without anything saying so. Here side b of a mirror fails its flushes
//! while a few files are written; the txgs they were born in must be in b's DTL, and persisted:
//! the resilver the import starts must cover them, find and rewrite b's lost copies (the test
//! overwrites them, as a cache that was dropped leaves them), and side b alone must then read
//! every file back.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use common::*;
use tarn::object::tree::visit_tree;
use tarn::pool::scan::{ScanFunction, ScanState};
use tarn::pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn::types::ObjectId;
use tarn::vdev::{BlockDevice, FaultPlan, FaultyDevice, ReadFaultKind, VDEV_LABEL_START_SIZE};

const POOL: &str = "flushfail";
const FILE_BYTES: usize = 128 << 10;

/// A mirror of `a.img` and `b.img`, each behind its own fault plan (kept across imports).
struct Mirror {
    dir: tempfile::TempDir,
    plan_a: Arc<FaultPlan>,
    plan_b: Arc<FaultPlan>,
}

impl Mirror {
    fn wrapper(&self) -> tarn::pool::DeviceWrapper {
        let (a, b) = (self.plan_a.clone(), self.plan_b.clone());
        Arc::new(move |path: &Path, device: Arc<dyn BlockDevice>| {
            let plan = if path.ends_with("a.img") {
                a.clone()
            } else {
                b.clone()
            };
            Arc::new(FaultyDevice::new(device, plan)) as Arc<dyn BlockDevice>
        })
    }

    fn create(&self) -> Pool {
        Pool::create(CreateOptions {
            name: POOL.into(),
            log: Vec::new(),
            cache: Vec::new(),
            vdevs: vec![VdevSpec::Mirror(vec![
                self.dir.path().join("a.img"),
                self.dir.path().join("b.img"),
            ])],
            create_size: Some(VDEV_SIZE),
            force: false,
            tunables: tiny(),
            wrap_device: Some(self.wrapper()),
            disabled_features: Vec::new(),
        })
        .unwrap()
    }

    fn import(&self) -> Pool {
        let mut options = ImportOptions::new(vec![self.dir.path().to_path_buf()], tiny());
        options.wrap_device = Some(self.wrapper());
        Pool::import(POOL, options).unwrap().0
    }
}

/// The physical birth txg and data-area extent of every level-0 block of the files.
fn data_blocks(pool: &Pool, files: &[(ObjectId, u64)]) -> Vec<(u64, u64, u64)> {
    let objset = pool.root_objset();
    let mut blocks = Vec::new();
    for (object, _) in files {
        let dnode = objset.synced_dnode(*object).unwrap();
        visit_tree(&pool.core.io, &dnode, &mut |bp| {
            if bp.level == 0 && !bp.is_hole() && !bp.embedded {
                for dva in bp.copies() {
                    blocks.push((bp.birth_physical.0, dva.offset, dva.size_allocated));
                }
            }
            Ok(())
        })
        .unwrap();
    }
    blocks
}

#[test]
fn side_whose_flush_failed_logs_the_txg_and_is_resilvered() {
    let mirror = Mirror {
        dir: tempfile::tempdir().unwrap(),
        plan_a: FaultPlan::new(),
        plan_b: FaultPlan::new(),
    };
    let pool = mirror.create();
    let before = write_files(&pool, 1, 12, FILE_BYTES);
    let side_b = pool.core.io.vdevs.tops()[0].children[1].clone();
    assert!(side_b.dtl.is_empty());

    // Side b takes every write of these txgs, but its flushes fail.
    mirror.plan_b.set_fail_flushes(true);
    let unflushed = write_files(&pool, 500, 6, FILE_BYTES);
    mirror.plan_b.set_fail_flushes(false);
    let blocks = data_blocks(&pool, &unflushed);
    let births: BTreeSet<u64> = blocks.iter().map(|&(birth, _, _)| birth).collect();
    eprintln!(
        "unflushed files born in txgs {births:?}; side b's DTL {:?}",
        side_b.dtl.ranges()
    );
    for birth in &births {
        assert!(
            side_b.dtl.contains(*birth),
            "txg {birth} was written to side b but never flushed there; its DTL is {:?}",
            side_b.dtl.ranges()
        );
    }
    assert!(pool.core.io.vdevs.tops()[0].children[0].dtl.is_empty());
    assert!(side_b.stats.snapshot().write_errors > 0);
    assert_eq!(side_b.health().as_str(), "FAULTED");
    // The txgs before the failures were flushed: the log does not reach back to them.
    let older = data_blocks(&pool, &before);
    assert!(older
        .iter()
        .all(|&(birth, _, _)| !side_b.dtl.contains(birth)));
    pool.export().unwrap();

    // What a dropped write cache leaves: side b lost those blocks.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(mirror.dir.path().join("b.img"))
        .unwrap();
    for &(_, offset, size) in &blocks {
        file.write_all_at(&vec![0u8; size as usize], VDEV_LABEL_START_SIZE + offset)
            .unwrap();
    }
    drop(file);

    // The log was persisted: the import starts a resilver of what it names (on this small
    // pool it may be done before the import returns).
    let pool = mirror.import();
    let side_b = pool.core.io.vdevs.tops()[0].children[1].clone();
    pool.core.wait_scan(ScanFunction::Resilver).unwrap();
    pool.sync().unwrap();
    let resilver = pool
        .core
        .scan_status()
        .expect("the import starts a resilver of side b's logged txgs")
        .phys;
    eprintln!(
        "resilver of txgs ({}, {}]: {} stale copies found, {} bytes rewritten, {} unrepaired",
        resilver.min_txg.0,
        resilver.max_txg.0,
        resilver.copies_bad,
        resilver.repaired,
        resilver.unrepaired
    );
    assert!(
        births
            .iter()
            .all(|&birth| resilver.min_txg.0 < birth && birth <= resilver.max_txg.0),
        "the resilver's txgs ({}, {}] miss some of {births:?}",
        resilver.min_txg.0,
        resilver.max_txg.0
    );
    assert_eq!(resilver.function, ScanFunction::Resilver);
    assert_eq!(resilver.state, ScanState::Finished);
    assert_eq!((resilver.errors, resilver.unrepaired), (0, 0));
    assert!(
        resilver.copies_bad >= blocks.len() as u64,
        "{} lost copies, resilver found {resilver:?}",
        blocks.len()
    );
    assert!(side_b.dtl.is_empty(), "{:?}", side_b.dtl.ranges());
    assert_clean(&pool);
    pool.export().unwrap();

    // Side b alone now reads every file, old and new.
    let pool = mirror.import();
    mirror
        .plan_a
        .add_read_fault(VDEV_LABEL_START_SIZE..u64::MAX, ReadFaultKind::Fail);
    assert_files_read_right(&pool, &before, FILE_BYTES, "read back");
    assert_files_read_right(&pool, &unflushed, FILE_BYTES, "read back");
    mirror.plan_a.clear_read_faults();
    pool.export().unwrap();
}
