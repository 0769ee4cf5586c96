//! Changing the vdev tree of an imported pool: `attach`, `detach`, `replace` and `add` on real
//! sparse-file pools.
//!
//! Guards: a new mirror side is resilvered and then holds every block alone; a detached side's
//! labels are cleared and it is not imported again; a replace detaches the old device by
//! itself once the new one is resilvered; added vdevs take allocations and survive export and
//! import; every refusal leaves the pool as it was; and a power cut at any point of an attach
//! leaves a pool that imports with the old tree or the new one, never a mix, with every
//! synced file intact and `check` clean.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use tarn::object::tree::visit_tree;
use tarn::pool::scan::ScanFunction;
use tarn::pool::{ImportOptions, Pool, PoolError, VdevLayout, VdevSpec};
use tarn::types::VdevId;
use tarn::vdev::label::read_newest_label;
use tarn::vdev::{FaultPlan, FileDevice};

const POOL: &str = "changing";
const FILE_BYTES: usize = 192 << 10;

/// The leaf paths of every top-level vdev, in order.
fn tree_shape(pool: &Pool) -> Vec<Vec<PathBuf>> {
    pool.core
        .io
        .vdevs
        .tops()
        .iter()
        .map(|top| top.children.iter().map(|leaf| leaf.path.clone()).collect())
        .collect()
}

fn sparse(path: &Path, size: u64) -> PathBuf {
    FileDevice::create_sparse(path, size).unwrap();
    std::fs::canonicalize(path).unwrap()
}

fn has_label(path: &Path) -> bool {
    let device = FileDevice::open_unlocked_readonly(path).unwrap();
    read_newest_label(&device).unwrap().is_some()
}

fn import_from(dir: &Path) -> Pool {
    let (pool, _) = Pool::import(POOL, ImportOptions::new(dirs(dir), tiny())).unwrap();
    pool
}

#[test]
fn attach_resilvers_the_new_side_and_detach_leaves_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "a.img"), tiny());
    let a = std::fs::canonicalize(dir.path().join("a.img")).unwrap();
    let files = write_files(&pool, 1, 12, FILE_BYTES);
    let b = sparse(&dir.path().join("b.img"), VDEV_SIZE);
    let guid_sum_before = pool.core.io.vdevs.guid_sum();

    pool.attach("a.img", &b, false).unwrap();
    assert_eq!(tree_shape(&pool), vec![vec![a.clone(), b.clone()]]);
    assert_ne!(pool.core.io.vdevs.guid_sum(), guid_sum_before);
    let tops = pool.core.io.vdevs.tops();
    let side_b = tops[0].children[1].clone();
    pool.core.wait_scan(ScanFunction::Resilver).unwrap();
    let scan = pool.core.scan_status().expect("a resilver ran");
    assert_eq!(scan.phys.function, ScanFunction::Resilver);
    assert_eq!((scan.phys.errors, scan.phys.unrepaired), (0, 0));
    assert!(scan.phys.repaired > 0, "the resilver copied nothing");
    assert!(side_b.dtl.is_empty(), "{:?}", side_b.dtl.ranges());
    // Both labels name the mirror.
    for path in [&a, &b] {
        let device = FileDevice::open_unlocked_readonly(path).unwrap();
        let (_, config) = read_newest_label(&device).unwrap().unwrap();
        assert_eq!(config.vdev_tree[0].children.len(), 2, "{}", path.display());
    }
    check_clean(&pool, "after the resilver");

    pool.detach(a.to_str().unwrap()).unwrap();
    assert_eq!(tree_shape(&pool), vec![vec![b.clone()]]);
    assert!(!has_label(&a), "the detached side keeps its label");
    assert_eq!(pool.core.io.vdevs.guid_sum(), {
        let tops = pool.core.io.vdevs.tops();
        tops[0].guid.0.wrapping_add(tops[0].children[0].guid.0)
    });
    pool.export().unwrap();

    // b alone is the pool now: a stays in the scanned directory and is not taken.
    let pool = import_from(dir.path());
    assert_eq!(tree_shape(&pool), vec![vec![b.clone()]]);
    assert_files_read_right(&pool, &files, FILE_BYTES, "b alone after import");
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn replace_detaches_the_old_device_once_the_new_one_is_resilvered() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.img");
    let b = dir.path().join("b.img");
    let pool = create_pool(
        dir.path(),
        POOL,
        vec![VdevSpec::Mirror(vec![a.clone(), b.clone()])],
        tiny(),
    );
    let files = write_files(&pool, 100, 10, FILE_BYTES);
    let c = sparse(&dir.path().join("c.img"), VDEV_SIZE + (16 << 20));
    let new = pool.replace("b.img", Some(&c), false).unwrap();
    {
        let tops = pool.core.io.vdevs.tops();
        let replacing = tops[0].children.iter().find(|leaf| leaf.guid == new);
        let old_still_there = tops[0].children.len() == 3;
        assert!(
            replacing.is_some_and(|leaf| leaf.replaces().is_some() || !old_still_there),
            "the new leaf is marked as a replacement while it resilvers (or the replace is done)"
        );
    }
    pool.wait_replaced(new).unwrap();
    let a = std::fs::canonicalize(&a).unwrap();
    assert_eq!(tree_shape(&pool), vec![vec![a.clone(), c.clone()]]);
    assert!(!has_label(&b), "the replaced device keeps its label");
    let more = write_files(&pool, 200, 2, FILE_BYTES);
    pool.export().unwrap();

    // c alone holds everything: import without a.
    let away = tempfile::tempdir().unwrap();
    std::fs::rename(&a, away.path().join("a.img")).unwrap();
    let pool = import_from(dir.path());
    assert_eq!(pool.core.io.vdevs.health().as_str(), "DEGRADED");
    assert_files_read_right(&pool, &files, FILE_BYTES, "c alone");
    assert_files_read_right(
        &pool,
        &more,
        FILE_BYTES,
        "c alone, written after the replace",
    );
    drop(pool);
    std::fs::rename(away.path().join("a.img"), &a).unwrap();
    let pool = import_from(dir.path());
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn replace_in_place_after_the_disk_was_swapped() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.img");
    let b = dir.path().join("b.img");
    let pool = create_pool(
        dir.path(),
        POOL,
        vec![VdevSpec::Mirror(vec![a.clone(), b.clone()])],
        tiny(),
    );
    let files = write_files(&pool, 300, 6, FILE_BYTES);
    // The same device is still there: nothing to replace it with.
    let error = pool.replace("b.img", None, false).unwrap_err();
    assert!(error.to_string().contains("in place"), "{error}");
    // The disk is swapped: a blank one at the same path.
    std::fs::remove_file(&b).unwrap();
    sparse(&b, VDEV_SIZE);
    let new = pool.replace("b.img", None, false).unwrap();
    pool.wait_replaced(new).unwrap();
    let shape = tree_shape(&pool);
    assert_eq!(shape[0].len(), 2);
    assert_eq!(pool.core.io.vdevs.tops()[0].children[1].guid, new);
    pool.export().unwrap();
    let away = tempfile::tempdir().unwrap();
    std::fs::rename(&a, away.path().join("a.img")).unwrap();
    let pool = import_from(dir.path());
    assert_eq!(pool.core.io.vdevs.health().as_str(), "DEGRADED");
    assert_files_read_right(&pool, &files, FILE_BYTES, "the new b alone");
    pool.export().unwrap();
}

#[test]
fn added_vdev_takes_allocations_and_survives_import() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "a.img"), tiny());
    let early = write_files(&pool, 1, 4, FILE_BYTES);
    let b = sparse(&dir.path().join("b.img"), VDEV_SIZE);
    let size_before = pool.core.io.space.totals().size;

    let planned = pool
        .add(&data_layout(vec![VdevSpec::Leaf(b.clone())]), false, true)
        .unwrap();
    assert_eq!(planned.len(), 1);
    assert_eq!(planned[0].id, VdevId(1));
    assert_eq!(pool.core.io.vdevs.tops().len(), 1, "-n changed the pool");
    assert!(!has_label(&b), "-n wrote a label");

    let added = pool
        .add(&data_layout(vec![VdevSpec::Leaf(b.clone())]), false, false)
        .unwrap();
    assert_eq!(added[0].paths, vec![b.clone()]);
    assert_eq!(pool.core.io.vdevs.tops().len(), 2);
    assert!(pool.core.io.space.totals().size > size_before);
    assert!(has_label(&b));
    let late = write_files(&pool, 50, 24, FILE_BYTES);
    let objset = pool.root_objset();
    let mut on_new = 0;
    for (object, _) in &late {
        let dnode = objset.synced_dnode(*object).unwrap();
        visit_tree(&pool.core.io, &dnode, &mut |bp| {
            if bp.level == 0 && !bp.is_hole() && !bp.embedded {
                on_new += bp.copies().filter(|dva| dva.vdev == VdevId(1)).count();
            }
            Ok(())
        })
        .unwrap();
    }
    assert!(on_new > 0, "no data block landed on the added vdev");
    pool.export().unwrap();

    let pool = import_from(dir.path());
    assert_eq!(pool.core.io.vdevs.tops().len(), 2);
    assert_files_read_right(&pool, &early, FILE_BYTES, "early files");
    assert_files_read_right(&pool, &late, FILE_BYTES, "files written after the add");
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn refusals_leave_the_pool_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.img");
    let b = dir.path().join("b.img");
    let pool = create_pool(
        dir.path(),
        POOL,
        vec![VdevSpec::Mirror(vec![a.clone(), b.clone()])],
        tiny(),
    );
    let files = write_files(&pool, 7, 4, FILE_BYTES);
    let shape = tree_shape(&pool);
    fn refused<T: std::fmt::Debug>(result: Result<T, PoolError>, expected: &str) {
        let error = result.expect_err("refused");
        assert!(
            error.to_string().contains(expected),
            "expected {expected:?} in {error}"
        );
    }
    let small = sparse(&dir.path().join("small.img"), 64 << 20);
    refused(pool.attach("a.img", &small, false), "too small");
    refused(
        pool.attach("a.img", &dir.path().join("absent.img"), false),
        "does not exist",
    );
    refused(pool.attach("a.img", &b, false), "already a device");
    refused(pool.attach("nothing.img", &small, false), "no device named");
    // A device of another pool.
    let other_dir = tempfile::tempdir().unwrap();
    let other = create_pool(
        other_dir.path(),
        "other",
        single(other_dir.path(), "o.img"),
        tiny(),
    );
    other.export().unwrap();
    let foreign = other_dir.path().join("o.img");
    refused(pool.attach("a.img", &foreign, false), "part of pool");
    // Mismatched replication, and a member added again.
    let c = sparse(&dir.path().join("c.img"), VDEV_SIZE);
    refused(
        pool.add(&data_layout(vec![VdevSpec::Leaf(c.clone())]), false, false),
        "mismatched replication",
    );
    refused(
        pool.add(
            &data_layout(vec![VdevSpec::Mirror(vec![a.clone(), c.clone()])]),
            false,
            false,
        ),
        "already a device",
    );
    // The last whole copy: b offline missed txgs, so a is the only complete side.
    pool.offline("b.img").unwrap();
    write_files(&pool, 70, 1, FILE_BYTES);
    refused(pool.detach("a.img"), "no valid replicas");
    pool.online("b.img").unwrap();
    pool.core.wait_scan(ScanFunction::Resilver).unwrap();
    pool.detach("b.img").unwrap();
    refused(pool.detach("a.img"), "only a side of a mirror");

    assert_eq!(
        tree_shape(&pool)[0],
        vec![std::fs::canonicalize(&a).unwrap()]
    );
    assert_ne!(tree_shape(&pool), shape);
    assert!(
        has_label(&foreign),
        "a refused attach wrote to the foreign device"
    );
    assert_files_read_right(&pool, &files, FILE_BYTES, "after the refusals");
    assert_clean(&pool);
    pool.export().unwrap();
}

/// One attach cut by a power failure at the `stop`-th flush (or write) after it starts: the
/// pool imports with one tree or the other, files intact, check clean. Returns the number of
/// leaves of the imported tree.
fn attach_cut_by_power_failure(
    stop_at_flush: Option<u64>,
    stop_at_write: Option<u64>,
    seed: u64,
) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let mut options = tarn::pool::CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: single(dir.path(), "a.img"),
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: tiny(),
        wrap_device: Some(fault_wrapper(plan.clone())),
        disabled_features: Vec::new(),
    };
    options.tunables.txg_timeout = 60;
    let pool = Pool::create(options).unwrap();
    let files = write_files(&pool, seed, 3, FILE_BYTES);
    let c = sparse(&dir.path().join("c.img"), VDEV_SIZE);
    plan.set_power_cut(seed);
    if let Some(flush) = stop_at_flush {
        plan.stop_at_flush(plan.flush_count() + flush);
    }
    if let Some(write) = stop_at_write {
        plan.stop_at_write(plan.write_count() + write);
    }
    let attached = pool.attach("a.img", &c, false);
    let what = format!("stop at flush {stop_at_flush:?} / write {stop_at_write:?}");
    if !plan.is_stopped() {
        attached.unwrap_or_else(|error| panic!("{what}: attach failed: {error}"));
    }
    plan.stop_now();
    drop(pool);

    let (pool, _) = Pool::import(POOL, ImportOptions::new(dirs(dir.path()), tiny()))
        .unwrap_or_else(|error| panic!("{what}: import after the power cut: {error}"));
    let shape = tree_shape(&pool);
    assert_eq!(shape.len(), 1, "{what}: {shape:?}");
    let leaves = shape[0].len();
    let a = std::fs::canonicalize(dir.path().join("a.img")).unwrap();
    match leaves {
        1 => assert_eq!(shape[0], vec![a], "{what}"),
        2 => assert_eq!(shape[0], vec![a, c], "{what}"),
        _ => panic!("{what}: {shape:?}"),
    }
    assert_files_read_right(&pool, &files, FILE_BYTES, &what);
    pool.core.wait_scan(ScanFunction::Resilver).unwrap();
    assert_clean(&pool);
    if leaves == 2 {
        assert!(
            pool.core.io.vdevs.leaves().all(|leaf| leaf.dtl.is_empty()),
            "{what}: the new side was not resilvered after import"
        );
    }
    pool.export().unwrap();
    leaves
}

#[test]
fn power_cut_during_attach_imports_the_old_tree_or_the_new_one() {
    let mut outcomes = std::collections::BTreeMap::new();
    for flush in 0..8 {
        let leaves = attach_cut_by_power_failure(Some(flush), None, 1000 + flush);
        *outcomes.entry(leaves).or_insert(0) += 1;
    }
    for write in [1, 3, 6, 10, 20, 40] {
        let leaves = attach_cut_by_power_failure(None, Some(write), 2000 + write);
        *outcomes.entry(leaves).or_insert(0) += 1;
    }
    // Both outcomes happened: the cut points span the commit of the change.
    assert!(
        outcomes.contains_key(&1) && outcomes.contains_key(&2),
        "{outcomes:?}"
    );
}

#[test]
fn readers_during_attach_and_detach_always_read_right() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Arc::new(create_pool(
        dir.path(),
        POOL,
        single(dir.path(), "a.img"),
        tiny(),
    ));
    let files = write_files(&pool, 500, 6, FILE_BYTES);
    let b = sparse(&dir.path().join("b.img"), VDEV_SIZE);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (pool, files, stop) = (pool.clone(), files.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                pool.core.io.cache().clear();
                assert_files_read_right(&pool, &files, FILE_BYTES, "reader during the changes");
                rounds += 1;
            }
            rounds
        })
    };
    for _ in 0..2 {
        pool.attach("a.img", &b, true).unwrap();
        pool.core.wait_scan(ScanFunction::Resilver).unwrap();
        pool.detach("a.img").unwrap();
        pool.attach("b.img", &dir.path().join("a.img"), true)
            .unwrap();
        pool.core.wait_scan(ScanFunction::Resilver).unwrap();
        pool.detach("b.img").unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = reader.join().unwrap();
    assert!(rounds > 0);
    assert_files_read_right(&pool, &files, FILE_BYTES, "after the changes");
    assert_clean(&pool);
}

/// Regression: a reader holding the vdev tree from before a detach (an I/O in flight) kept the
/// detached device open, and with it the device's lock, so attaching the same device again
/// right after the detach failed with "in use" (seen now and then under load in
/// `readers_during_attach_and_detach_always_read_right`). A detached device is released when
/// its detach commits, whoever still holds it.
#[test]
fn a_device_detached_while_a_reader_holds_it_can_be_attached_again() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "a.img"), tiny());
    let files = write_files(&pool, 520, 3, FILE_BYTES);
    let b = sparse(&dir.path().join("b.img"), VDEV_SIZE);
    pool.attach("a.img", &b, true).unwrap();
    pool.core.wait_scan(ScanFunction::Resilver).unwrap();
    // What an I/O in flight holds: the tree, and through it side a's device.
    let held = pool.core.io.vdevs.tops();
    pool.detach("a.img").unwrap();
    pool.attach("b.img", &dir.path().join("a.img"), true)
        .unwrap();
    pool.core.wait_scan(ScanFunction::Resilver).unwrap();
    drop(held);
    assert_files_read_right(&pool, &files, FILE_BYTES, "after the attach");
    assert_clean(&pool);
}

/// A mirror side whose device goes away while the pool is open shows REMOVED (the pool
/// DEGRADED), its missed txgs are logged, and once it is back `pool online` resilvers it.
#[test]
fn removed_side_is_shown_and_resilvered_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.img");
    let b = dir.path().join("b.img");
    let plan_b = FaultPlan::new();
    let wrapper: tarn::pool::DeviceWrapper = {
        let plan_b = plan_b.clone();
        Arc::new(
            move |path: &Path, device: Arc<dyn tarn::vdev::BlockDevice>| {
                let plan = if path.ends_with("b.img") {
                    plan_b.clone()
                } else {
                    FaultPlan::new()
                };
                Arc::new(tarn::vdev::FaultyDevice::new(device, plan))
                    as Arc<dyn tarn::vdev::BlockDevice>
            },
        )
    };
    let pool = Pool::create(tarn::pool::CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Mirror(vec![a.clone(), b.clone()])],
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: tiny(),
        wrap_device: Some(wrapper),
        disabled_features: Vec::new(),
    })
    .unwrap();
    let before = write_files(&pool, 900, 3, FILE_BYTES);
    plan_b.set_removed(true);
    let missed = write_files(&pool, 950, 3, FILE_BYTES);
    let side_b = pool.core.io.vdevs.tops()[0].children[1].clone();
    assert_eq!(side_b.health().as_str(), "REMOVED");
    assert_eq!(pool.core.io.vdevs.health().as_str(), "DEGRADED");
    assert!(
        !side_b.dtl.is_empty(),
        "the removed side's misses were not logged"
    );
    plan_b.set_removed(false);
    pool.online("b.img").unwrap();
    pool.core.wait_scan(ScanFunction::Resilver).unwrap();
    assert!(side_b.dtl.is_empty(), "{:?}", side_b.dtl.ranges());
    assert_eq!(side_b.health().as_str(), "ONLINE");
    assert_clean(&pool);
    pool.export().unwrap();
    let away = tempfile::tempdir().unwrap();
    std::fs::rename(&a, away.path().join("a.img")).unwrap();
    let pool = import_from(dir.path());
    assert_files_read_right(
        &pool,
        &before,
        FILE_BYTES,
        "b alone, written before the removal",
    );
    assert_files_read_right(
        &pool,
        &missed,
        FILE_BYTES,
        "b alone, written while it was removed",
    );
}

/// A `pool add` of data vdevs only.
fn data_layout(data: Vec<VdevSpec>) -> VdevLayout {
    VdevLayout {
        data,
        ..VdevLayout::default()
    }
}
