//! RAID-Z expansion on sparse files (`pool attach POOL raidz1-0 NEW`): the copy moves every
//! block to the wider stripe while files stay readable and writable, the vdev's space grows
//! when it ends, blocks of every width read back after export and import (also with a child
//! failing), several expansions run in a row, and `check` is clean after each.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use tarn::check::check_pool;
use tarn::pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;
use tarn::vdev::{FaultPlan, ReadFaultKind, VDEV_LABEL_START_SIZE};

const POOL: &str = "wider";
const FILE_BYTES: usize = 160 << 10;

struct Disks {
    dir: tempfile::TempDir,
    plans: std::sync::Arc<parking_lot::Mutex<Plans>>,
}

impl Disks {
    fn new() -> Disks {
        Disks {
            dir: tempfile::tempdir().unwrap(),
            plans: std::sync::Arc::new(parking_lot::Mutex::new(Plans::new())),
        }
    }

    fn path(&self, child: usize) -> PathBuf {
        self.dir.path().join(format!("d{child}.img"))
    }

    fn new_disk(&self, child: usize) -> PathBuf {
        let path = self.path(child);
        std::fs::File::create(&path)
            .unwrap()
            .set_len(VDEV_SIZE)
            .unwrap();
        path
    }

    fn create(&self, parity: u8, width: usize, tunables: Tunables) -> Pool {
        Pool::create(CreateOptions {
            name: POOL.into(),
            log: Vec::new(),
            cache: Vec::new(),
            vdevs: vec![VdevSpec::Raidz {
                parity,
                paths: (0..width).map(|child| self.path(child)).collect(),
            }],
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

    fn plan(&self, child: usize) -> std::sync::Arc<FaultPlan> {
        self.plans.lock()[&self.path(child)].clone()
    }
}

fn assert_clean_pool(pool: &Pool) {
    let report = check_pool(pool, false).unwrap();
    assert!(report.is_clean(), "{report:#?}");
}

/// Every file reads back with each child failing in turn (parity as well as data moved).
fn assert_read_right_with_any_child_failing(
    disks: &Disks,
    pool: &Pool,
    files: &[&[(tarn::types::ObjectId, u64)]],
    what: &str,
) {
    let children = pool.core.io.vdevs.tops()[0].children.len();
    for failing in 0..children {
        pool.core.io.cache().clear();
        disks
            .plan(failing)
            .add_read_fault(VDEV_LABEL_START_SIZE..u64::MAX, ReadFaultKind::Fail);
        for (index, files) in files.iter().enumerate() {
            assert_files_read_right(
                pool,
                files,
                FILE_BYTES,
                &format!("{what}: files {index}, child {failing} failing"),
            );
        }
        disks.plan(failing).clear_read_faults();
    }
}

fn expand(pool: &Pool, vdev: &str, path: &Path) {
    pool.attach(vdev, path, false).unwrap();
    pool.wait_raidz_expansion().unwrap();
    let status = pool.raidz_expansion().expect("an expansion record");
    assert!(status.finished, "{status:?}");
    assert_eq!(status.reflowed, status.total, "{status:?}");
}

#[test]
fn raidz1_grows_from_4_to_5_to_6_children_and_every_block_reads_back() {
    let disks = Disks::new();
    let pool = disks.create(1, 4, tiny());
    let before = pool.core.io.space.totals().size;
    let first = write_files(&pool, 1, 24, FILE_BYTES);
    let new = disks.new_disk(4);
    expand(&pool, "raidz1-0", &new);
    let top = pool.core.io.vdevs.tops()[0].clone();
    assert_eq!(top.children.len(), 5);
    assert!(!top.raidz_expanding());
    let grown = pool.core.io.space.totals().size;
    assert!(grown > before, "the vdev grew: {before} -> {grown}");
    assert_files_read_right(&pool, &first, FILE_BYTES, "after 4 -> 5");
    assert_read_right_with_any_child_failing(&disks, &pool, &[&first], "after 4 -> 5");
    let second = write_files(&pool, 100, 16, FILE_BYTES);
    assert_eq!(
        pool.feature_state("raidz_expansion"),
        Some(tarn::pool::FeatureState::Active)
    );
    let new = disks.new_disk(5);
    expand(&pool, "raidz1-0", &new);
    assert_eq!(pool.core.io.vdevs.tops()[0].children.len(), 6);
    assert_read_right_with_any_child_failing(&disks, &pool, &[&first, &second], "after 5 -> 6");
    assert!(pool.core.io.space.totals().size > grown);
    let third = write_files(&pool, 200, 8, FILE_BYTES);
    for (files, what) in [(&first, "first"), (&second, "second"), (&third, "third")] {
        assert_files_read_right(&pool, files, FILE_BYTES, what);
    }
    assert_clean_pool(&pool);
    pool.export().unwrap();
    let pool = disks.import(tiny());
    assert_read_right_with_any_child_failing(
        &disks,
        &pool,
        &[&first, &second, &third],
        "after import",
    );
    // Blocks of widths 4, 5 and 6 read back with one child (the newest, then the first)
    // failing.
    for failing in [5, 0] {
        disks
            .plan(failing)
            .add_read_fault(VDEV_LABEL_START_SIZE..u64::MAX, ReadFaultKind::Fail);
        for (files, what) in [(&first, "first"), (&second, "second"), (&third, "third")] {
            assert_files_read_right(
                &pool,
                files,
                FILE_BYTES,
                &format!("{what}, {failing} failing"),
            );
        }
        disks.plan(failing).clear_read_faults();
    }
    assert_clean_pool(&pool);
    pool.export().unwrap();
}

/// Waits until the copy stands still at `raidz_expand_max_reflow_bytes`.
fn wait_stopped(pool: &Pool) -> tarn::status::RaidzExpansionStatus {
    loop {
        let status = pool.raidz_expansion().expect("an expansion record");
        assert!(!status.finished, "the copy was to stop midway: {status:?}");
        if status
            .paused
            .as_deref()
            .is_some_and(|why| why.contains("raidz_expand_max_reflow_bytes"))
        {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_crash_midway_resumes_at_import_and_a_writer_during_the_copy_loses_nothing() {
    let disks = Disks::new();
    let pool = disks.create(2, 4, tiny());
    let first = write_files(&pool, 1, 40, FILE_BYTES);
    let asize = pool.core.io.vdevs.tops()[0].asize;
    let mut stopping = tiny();
    stopping.raidz_expand_max_reflow_bytes = asize / 3;
    pool.export().unwrap();
    let pool = disks.import(stopping.clone());
    let new = disks.new_disk(4);
    pool.attach("raidz2-0", &new, false).unwrap();
    // A writer and a rewriter while the copy runs up to a third of the vdev.
    let second = write_files(&pool, 100, 12, FILE_BYTES);
    let status = wait_stopped(&pool);
    assert!(
        status.reflowed > 0 && status.reflowed < status.total,
        "{status:?}"
    );
    assert_files_read_right(&pool, &first, FILE_BYTES, "midway");
    assert_files_read_right(&pool, &second, FILE_BYTES, "midway");
    // The crash: nothing more is written.
    pool.abandon();
    // Read-only, the copy stands where the uberblock says, and every file reads.
    let mut options = ImportOptions::new(vec![disks.dir.path().to_path_buf()], tiny());
    options.readonly = true;
    options.wrap_device = Some(per_path_fault_wrapper(disks.plans.clone()));
    let readonly = Pool::import(POOL, options).unwrap().0;
    assert!(readonly.core.io.vdevs.tops()[0].raidz_expanding());
    assert_files_read_right(&readonly, &first, FILE_BYTES, "read-only midway");
    assert_files_read_right(&readonly, &second, FILE_BYTES, "read-only midway");
    drop(readonly);
    // Writable, it resumes and finishes; writes meanwhile land too.
    let pool = disks.import(tiny());
    let third = write_files(&pool, 200, 12, FILE_BYTES);
    pool.wait_raidz_expansion().unwrap();
    let status = pool.raidz_expansion().unwrap();
    assert!(status.finished, "{status:?}");
    for (files, what) in [(&first, "first"), (&second, "second"), (&third, "third")] {
        assert_files_read_right(&pool, files, FILE_BYTES, what);
    }
    assert_read_right_with_any_child_failing(&disks, &pool, &[&first, &second, &third], "after");
    assert_clean_pool(&pool);
    pool.export().unwrap();
}

#[test]
fn attach_to_a_raidz_vdev_is_refused_when_it_cannot_be_expanded() {
    let disks = Disks::new();
    let pool = disks.create(1, 3, tiny());
    let small = disks.dir.path().join("small.img");
    std::fs::File::create(&small)
        .unwrap()
        .set_len(VDEV_SIZE / 4)
        .unwrap();
    let error = pool
        .attach("raidz1-0", &small, false)
        .unwrap_err()
        .to_string();
    assert!(error.contains("too small"), "{error}");
    let error = pool
        .attach("raidz1-7", &disks.new_disk(3), false)
        .unwrap_err()
        .to_string();
    assert!(error.contains("raidz1-7"), "{error}");
    // A child offline: degraded, refused.
    pool.offline(&disks.path(1).display().to_string()).unwrap();
    let error = pool
        .attach("raidz1-0", &disks.path(3), false)
        .unwrap_err()
        .to_string();
    assert!(error.contains("healthy"), "{error}");
    assert_eq!(pool.core.io.vdevs.tops()[0].children.len(), 3);
    assert!(pool.raidz_expansion().is_none());
    pool.export().unwrap();
}

/// Waits until the copy waits for a reason that contains `why`.
fn wait_paused_for(pool: &Pool, why: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let status = pool.raidz_expansion().expect("an expansion record");
        let paused = status.paused.as_deref().map(str::to_lowercase);
        if paused.is_some_and(|reason| reason.contains(why)) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the copy never paused for {why:?}: {status:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_child_away_pauses_the_copy_and_its_resilver_lets_it_finish() {
    let disks = Disks::new();
    let pool = disks.create(1, 4, tiny());
    let first = write_files(&pool, 1, 40, FILE_BYTES);
    let mut stopping = tiny();
    stopping.raidz_expand_max_reflow_bytes = pool.core.io.vdevs.tops()[0].asize / 4;
    pool.export().unwrap();
    let pool = disks.import(stopping);
    pool.attach("raidz1-0", &disks.new_disk(4), false).unwrap();
    wait_stopped(&pool);
    // A child goes away mid-copy: the copy waits for it, whatever else would stop it.
    let away = disks.path(2).display().to_string();
    pool.offline(&away).unwrap();
    wait_paused_for(&pool, "offline");
    pool.export().unwrap();
    // Imported without the stop, the copy still waits while the child is away; writes go on
    // (the child misses them), and every file reads through parity.
    let pool = disks.import(tiny());
    wait_paused_for(&pool, "offline");
    let reflowed = pool.raidz_expansion().unwrap().reflowed;
    let second = write_files(&pool, 100, 16, FILE_BYTES);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let status = pool.raidz_expansion().unwrap();
    assert_eq!(
        status.reflowed, reflowed,
        "the copy moved with a child away: {status:?}"
    );
    assert_files_read_right(&pool, &first, FILE_BYTES, "paused, a child away");
    // Back online: the resilver makes it whole, and the copy goes on to the end.
    pool.online(&away).unwrap();
    pool.wait_raidz_expansion().unwrap();
    let status = pool.raidz_expansion().unwrap();
    assert!(status.finished && status.paused.is_none(), "{status:?}");
    for (files, what) in [(&first, "first"), (&second, "second")] {
        assert_files_read_right(&pool, files, FILE_BYTES, what);
    }
    assert_read_right_with_any_child_failing(&disks, &pool, &[&first, &second], "after");
    assert_clean_pool(&pool);
    pool.export().unwrap();
}
