//! Unit tests of the vdev tree: mirror writes and reads, flushes, health and the slots of
//! a replace, on file-backed leaves with injected faults.

use super::*;
use crate::vdev::{FaultPlan, FaultyDevice, FileDevice};

struct Setup {
    _dir: tempfile::TempDir,
    plans: Vec<Arc<FaultPlan>>,
    top: TopVdev,
}

fn mirror(children: usize) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut plans = Vec::new();
    let mut leaves = Vec::new();
    let mut devices: Vec<Arc<dyn BlockDevice>> = Vec::new();
    for index in 0..children {
        let path = dir.path().join(format!("leaf{index}"));
        let file: Arc<dyn BlockDevice> =
            Arc::new(FileDevice::create_sparse(&path, 64 << 20).unwrap());
        let plan = FaultPlan::new();
        let device: Arc<dyn BlockDevice> = Arc::new(FaultyDevice::new(file, plan.clone()));
        devices.push(device.clone());
        leaves.push(Leaf::new(Guid(100 + index as u64), path, device));
        plans.push(plan);
    }
    let asize = TopVdev::allocatable_bytes_for(&devices, 12);
    let kind = if children == 1 {
        TopVdevKind::Leaf
    } else {
        TopVdevKind::Mirror
    };
    let top = TopVdev::new(VdevId(0), Guid(7), kind, 12, asize, 20, ObjectId(0), leaves).unwrap();
    Setup {
        _dir: dir,
        plans,
        top,
    }
}

/// The devices of `top`'s children, to build other vdevs on.
fn devices_of(top: &TopVdev) -> Vec<Arc<dyn BlockDevice>> {
    top.children
        .iter()
        .map(|leaf| leaf.device.clone())
        .collect()
}

#[test]
fn raidz_slots_pair_a_replacement_with_its_child_and_refuse_chains() {
    let dir = tempfile::tempdir().unwrap();
    let made = std::sync::atomic::AtomicU64::new(0);
    let leaf = |index: u64| {
        let file = made.fetch_add(1, Ordering::Relaxed);
        let path = dir.path().join(format!("s{file}"));
        let device: Arc<dyn BlockDevice> =
            Arc::new(FileDevice::create_sparse(&path, 64 << 20).unwrap());
        Leaf::new(Guid(100 + index), path, device)
    };
    let leaves: Vec<Leaf> = (0..5).map(leaf).collect();
    // Child 4 replaces child 1: four slots, the second served by 1 and 4.
    leaves[4].set_replaces(Some(Guid(101)));
    let build = |leaves: Vec<Leaf>| {
        TopVdev::new(
            VdevId(0),
            Guid(7),
            TopVdevKind::Raidz { parity: 1 },
            12,
            4 << 20,
            20,
            ObjectId(0),
            leaves,
        )
    };
    let top = build(leaves).unwrap();
    assert_eq!(top.raidz_geometry().unwrap().children, 4);
    assert_eq!(top.slot_children(1), &[1, 4]);
    assert_eq!(top.slot_of(4), Some(1));
    assert_eq!(top.slot_of(3), Some(3));
    assert_eq!(top.child_asize(), 1 << 20);
    // Child 4 replaces 1, which replaces 2: refused, not served by no slot.
    let leaves: Vec<Leaf> = (0..5).map(leaf).collect();
    leaves[4].set_replaces(Some(Guid(101)));
    leaves[1].set_replaces(Some(Guid(102)));
    let error = build(leaves).unwrap_err().to_string();
    assert!(error.contains("itself being replaced"), "{error}");
    // Two children replacing each other leave no slot at all.
    let leaves: Vec<Leaf> = (0..2).map(leaf).collect();
    leaves[0].set_replaces(Some(Guid(101)));
    leaves[1].set_replaces(Some(Guid(100)));
    assert!(build(leaves).is_err());
}

#[test]
fn write_lands_on_every_child_at_the_data_area() {
    let setup = mirror(2);
    let data = vec![0x5Au8; 8192];
    setup.top.write(IoClass::AsyncWrite, 4096, &data).unwrap();
    for child in 0..2 {
        let mut buf = vec![0u8; 8192];
        setup
            .top
            .read_child(IoClass::SyncRead, child, 4096, &mut buf)
            .unwrap();
        assert_eq!(buf, data);
        // DVA offset 4096 is device byte 4 MiB + 4096.
        let mut raw = vec![0u8; 8192];
        setup.top.children[child]
            .device
            .read_at(VDEV_LABEL_START_SIZE + 4096, &mut raw)
            .unwrap();
        assert_eq!(raw, data);
        let stats = setup.top.children[child].stats.snapshot();
        assert_eq!(stats.write_ops, 1);
        assert_eq!(stats.write_bytes, 8192);
        assert_eq!(stats.read_ops, 1);
        assert_eq!(stats.read.disk_histogram.iter().sum::<u64>(), 1);
    }
}

#[test]
fn mirror_write_with_one_failing_child_succeeds_and_counts_the_error() {
    let setup = mirror(2);
    setup.plans[1].fail_writes_from(0);
    setup
        .top
        .write(IoClass::AsyncWrite, 8192, &[1u8; 4096])
        .unwrap();
    let failed = setup.top.children[1].stats.snapshot();
    assert_eq!(failed.write_errors, 1);
    assert_eq!(failed.write_ops, 0);
    // Nothing has set a syncing txg: the write is logged against txg 1.
    assert_eq!(setup.top.children[1].dtl.ranges(), vec![(1, 2)]);
    assert!(setup.top.children[0].dtl.is_empty());
    assert_eq!(setup.top.children[0].stats.snapshot().write_ops, 1);
}

#[test]
fn offline_child_takes_no_io_and_logs_the_syncing_txg() {
    let setup = mirror(2);
    let tree = VdevTree::new(vec![Arc::new(setup.top)]);
    let tops = tree.tops();
    let top = &tops[0];
    tree.set_syncing_txg(42);
    top.children[1].dtl.set_offline(true);
    assert_eq!(top.health(), VdevHealth::Degraded);
    top.write(IoClass::AsyncWrite, 0, &[3u8; 4096]).unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    top.write_async(
        IoClass::AsyncWrite,
        4096,
        Arc::new(vec![4u8; 4096]),
        move |result| sender.send(result.is_ok()).unwrap(),
    );
    assert!(receiver.recv().unwrap());
    let offline = top.children[1].stats.snapshot();
    assert_eq!((offline.write_ops, offline.write_errors), (0, 0));
    assert_eq!(top.children[1].dtl.ranges(), vec![(42, 43)]);
    let mut buffer = vec![0u8; 4096];
    assert!(top
        .read_child(IoClass::SyncRead, 1, 0, &mut buffer)
        .is_err());
    assert_eq!(top.children[1].stats.snapshot().read_ops, 0);
    assert!(top.write_child(1, 0, &buffer).is_err());
    top.flush().unwrap();
    assert_eq!(top.children[1].stats.snapshot().write_errors, 0);
    assert_eq!(top.children[0].stats.snapshot().write_ops, 2);
    assert!(tree
        .leaf_by_guid(Guid(101))
        .is_some_and(|(_, index)| index == 1));
    assert!(tree.leaf_by_guid(Guid(5)).is_none());
}

#[test]
fn removed_child_shows_removed_and_logs_what_it_misses() {
    let setup = mirror(2);
    let tree = VdevTree::new(vec![Arc::new(setup.top)]);
    tree.set_syncing_txg(9);
    let tops = tree.tops();
    assert_eq!(tops[0].children[1].health(), VdevHealth::Online);
    setup.plans[1].set_removed(true);
    assert_eq!(tops[0].children[1].health(), VdevHealth::Removed);
    assert_eq!(tops[0].health(), VdevHealth::Degraded);
    tops[0].write(IoClass::AsyncWrite, 0, &[1u8; 4096]).unwrap();
    assert_eq!(tops[0].children[1].dtl.ranges(), vec![(9, 10)]);
    setup.plans[1].set_removed(false);
    assert_ne!(tops[0].children[1].health(), VdevHealth::Removed);
}

#[test]
fn unlinked_file_leaf_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone");
    let device = FileDevice::create_sparse(&path, 64 << 20).unwrap();
    assert!(!device.is_removed());
    std::fs::remove_file(&path).unwrap();
    assert!(device.is_removed());
}

#[test]
fn install_swaps_generations_and_old_snapshots_keep_their_children() {
    let setup = mirror(2);
    let top = Arc::new(setup.top);
    let tree = VdevTree::new(vec![top.clone()]);
    tree.set_syncing_txg(5);
    let before = tree.tops();
    let first = top.children[0].clone();
    // Detach the second child: the next generation is a single leaf.
    let next = top
        .with_children(TopVdevKind::Leaf, vec![first.clone()])
        .unwrap();
    assert!(top
        .with_children(TopVdevKind::Leaf, top.children.clone())
        .is_err());
    tree.install(vec![Arc::new(next)]);
    assert_eq!(
        before[0].children.len(),
        2,
        "a snapshot changed under its reader"
    );
    let after = tree.tops();
    assert_eq!(after[0].children.len(), 1);
    assert!(Arc::ptr_eq(&after[0].children[0], &first));
    assert_eq!(tree.guid_sum(), 7 + 100);
    assert_eq!(tree.to_config()[0].kind, TopVdevKind::Leaf);
    // The generations share the metaslab array id and the syncing txg.
    after[0].set_metaslab_array(ObjectId(77));
    assert_eq!(before[0].metaslab_array(), ObjectId(77));
    tree.set_syncing_txg(6);
    assert_eq!(before[0].write_txg(), 6);
    assert!(tree
        .top(VdevId(0))
        .is_some_and(|top| top.child_count() == 1));
}

#[test]
fn mirror_write_with_all_children_failing_is_an_error() {
    let setup = mirror(2);
    setup.plans[0].fail_writes_from(0);
    setup.plans[1].fail_writes_from(0);
    let error = setup
        .top
        .write(IoClass::AsyncWrite, 0, &[1u8; 4096])
        .unwrap_err();
    assert!(
        matches!(error, VdevError::NoChildWritten { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("reached no child"));
    for child in &setup.top.children {
        assert_eq!(child.stats.snapshot().write_errors, 1);
    }
}

#[test]
fn flush_fails_only_when_no_child_flushed() {
    let setup = mirror(2);
    setup.plans[0].set_fail_flushes(true);
    setup.top.flush().unwrap();
    assert_eq!(setup.top.children[0].stats.snapshot().write_errors, 1);
    // Nothing was written: the failed flush lost nothing.
    assert!(setup.top.children[0].dtl.is_empty());
    setup.top.write_txg.store(7, Ordering::Release);
    setup
        .top
        .write(IoClass::AsyncWrite, 0, &[1u8; 4096])
        .unwrap();
    setup.top.flush().unwrap();
    assert_eq!(setup.top.children[0].dtl.ranges(), vec![(7, 8)]);
    assert!(setup.top.children[1].dtl.is_empty());
    setup.plans[1].set_fail_flushes(true);
    assert!(matches!(
        setup.top.flush(),
        Err(VdevError::NoChildFlushed { .. })
    ));
}

#[test]
fn read_error_is_counted_and_names_the_device() {
    let setup = mirror(1);
    setup.plans[0].add_read_fault(
        VDEV_LABEL_START_SIZE..VDEV_LABEL_START_SIZE + 1,
        crate::vdev::ReadFaultKind::Fail,
    );
    let mut buf = vec![0u8; 4096];
    let error = setup
        .top
        .read_child(IoClass::SyncRead, 0, 0, &mut buf)
        .unwrap_err();
    assert!(error.to_string().contains("leaf0"), "{error}");
    assert_eq!(setup.top.children[0].stats.snapshot().read_errors, 1);
    setup.top.record_checksum_error(0);
    assert_eq!(setup.top.children[0].stats.snapshot().checksum_errors, 1);
}

#[test]
fn contains_checks_alignment_and_bounds() {
    let setup = mirror(1);
    let top = &setup.top;
    assert!(top.contains(0, 4096));
    assert!(top.contains(top.asize - 4096, 4096));
    assert!(!top.contains(top.asize - 4096, 8192));
    assert!(!top.contains(512, 4096));
    assert!(!top.contains(0, 100));
    assert!(!top.contains(0, 0));
    assert!(!top.contains(u64::MAX - 4095, 4096));
}

#[test]
#[should_panic(expected = "unaligned")]
fn unaligned_write_is_a_programmer_error() {
    let setup = mirror(1);
    let _ = setup.top.write(IoClass::AsyncWrite, 100, &[0u8; 4096]);
}

#[test]
fn shape_and_size_violations_are_errors() {
    let setup = mirror(6);
    let devices = devices_of(&setup.top);
    let leaves = |count: usize| -> Vec<Leaf> {
        devices[..count]
            .iter()
            .enumerate()
            .map(|(index, device)| {
                Leaf::new(Guid(index as u64 + 1), PathBuf::new(), device.clone())
            })
            .collect()
    };
    let asize = setup.top.asize;
    let build = |kind, ashift, asize, children| {
        TopVdev::new(
            VdevId(1),
            Guid(1),
            kind,
            ashift,
            asize,
            20,
            ObjectId(0),
            children,
        )
    };
    assert!(build(TopVdevKind::Leaf, 12, asize, leaves(2)).is_err());
    assert!(build(TopVdevKind::Mirror, 12, asize, leaves(0)).is_err());
    assert!(build(TopVdevKind::Mirror, 8, asize, leaves(2)).is_err());
    assert!(build(TopVdevKind::Mirror, 12, asize + 512, leaves(2)).is_err());
    assert!(matches!(
        build(TopVdevKind::Mirror, 12, asize + 4096, leaves(2)),
        Err(VdevError::DeviceTooSmall { .. })
    ));
    assert!(build(TopVdevKind::Mirror, 12, asize, leaves(2)).is_ok());
    // RAID-Z from a config: parity 1 to 3 with at least parity + 1 children, each holding
    // its share of the address space.
    let raidz = |parity| TopVdevKind::Raidz { parity };
    assert!(build(raidz(0), 12, asize, leaves(3)).is_err());
    assert!(build(raidz(4), 12, asize, leaves(6)).is_err());
    assert!(build(raidz(2), 12, asize, leaves(2)).is_err());
    assert!(build(raidz(3), 12, asize, leaves(4)).is_ok());
    assert!(matches!(
        build(raidz(1), 12, asize * 2 + 4096 * 2, leaves(2)),
        Err(VdevError::DeviceTooSmall { .. })
    ));
    assert!(build(raidz(1), 12, asize * 2, leaves(2)).is_ok());
}

#[test]
fn tree_guid_sum_config_and_lookup() {
    let setup = mirror(2);
    setup.top.set_metaslab_array(ObjectId(99));
    let top = Arc::new(setup.top);
    let tree = VdevTree::new(vec![top.clone()]);
    assert_eq!(tree.guid_sum(), 7 + 100 + 101);
    assert_eq!(tree.leaves().count(), 2);
    assert!(tree.top(VdevId(0)).is_some());
    assert!(tree.top(VdevId(1)).is_none());
    let config = tree.to_config();
    assert_eq!(config.len(), 1);
    assert_eq!(config[0].ms_array, 99);
    assert_eq!(config[0].children.len(), 2);
    assert_eq!(config[0].children[1].guid, 101);
    tree.flush_all().unwrap();

    // Round trip through the config, reopening the same devices.
    let devices = devices_of(&top);
    let mut next = devices.into_iter();
    let rebuilt = TopVdev::from_config(&config[0], |_| Ok(next.next().unwrap())).unwrap();
    assert_eq!(rebuilt.to_config(), config[0]);
}

#[test]
fn raidz_expansion_records_in_a_config_are_checked_and_kept() {
    let setup = mirror(4);
    let devices = devices_of(&setup.top);
    let raidz = TopVdev::new(
        VdevId(0),
        Guid(7),
        TopVdevKind::Raidz { parity: 1 },
        12,
        setup.top.asize,
        20,
        ObjectId(0),
        devices
            .iter()
            .enumerate()
            .map(|(index, device)| {
                Leaf::new(Guid(100 + index as u64), PathBuf::new(), device.clone())
            })
            .collect(),
    )
    .unwrap();
    let config = raidz.to_config();
    assert!(config.raidz_expansions.is_empty() && !config.raidz_expanding);
    assert_eq!(raidz.raidz_widths(), Some(&RaidzWidths::fixed(4)));
    let reopen = |config: &TopVdevConfig| {
        let mut next = devices.clone().into_iter();
        TopVdev::from_config(config, |_| Ok(next.next().unwrap()))
    };
    assert!(reopen(&config).is_ok());
    let refusal = |config: &TopVdevConfig| match reopen(config) {
        Err(VdevError::InvalidConfig { what, .. }) => what,
        other => panic!("{config:?} gave {other:?}"),
    };
    // A sound record (4 slots: 3 wide, then 4 from txg 10; or 3 wide, expanding) is read.
    let expanded = TopVdevConfig {
        raidz_expansions: vec![RaidzExpansion { txg: 10, width: 4 }],
        ..config.clone()
    };
    let top = reopen(&expanded).unwrap();
    assert_eq!(top.raidz_widths().unwrap().width_at(9), 3);
    assert_eq!(top.raidz_widths().unwrap().width_at(10), 4);
    assert_eq!(top.to_config(), expanded);
    let expanding = TopVdevConfig {
        raidz_expanding: true,
        ..config.clone()
    };
    let top = reopen(&expanding).unwrap();
    assert!(top.raidz_expanding() && top.raidz_reflow().is_some());
    assert_eq!(top.to_config(), expanding);
    // Unsound ones say what is wrong.
    let wrong_width = TopVdevConfig {
        raidz_expansions: vec![RaidzExpansion { txg: 10, width: 5 }],
        ..config.clone()
    };
    assert!(refusal(&wrong_width).contains("width 5"));
    let mirror_config = TopVdevConfig {
        kind: TopVdevKind::Mirror,
        raidz_expanding: true,
        ..config.clone()
    };
    assert!(refusal(&mirror_config).contains("not raidz"));
}

/// A RAID-Z vdev of `children` fresh sparse files in `dir` (16 MiB each) with its expansion
/// history, for the expansion tests of `raidz_layout.rs` and `raidz_reflow.rs`.
pub(super) fn raidz_with_history(
    dir: &std::path::Path,
    children: u64,
    parity: u8,
    ashift: u32,
    asize: u64,
    expansions: Vec<RaidzExpansion>,
    expanding: bool,
) -> TopVdev {
    let children = (0..children)
        .map(|index| {
            let path = dir.join(format!("c{index}"));
            let device: Arc<dyn BlockDevice> =
                Arc::new(FileDevice::create_sparse(&path, (asize / children) + (8 << 20)).unwrap());
            Arc::new(Leaf::new(Guid(100 + index), path, device))
        })
        .collect();
    TopVdev::build(
        VdevId(0),
        Guid(7),
        TopVdevKind::Raidz { parity },
        ashift,
        asize,
        20,
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        children,
        RaidzHistory {
            expansions,
            expanding,
            reflow: None,
        },
    )
    .unwrap()
}
