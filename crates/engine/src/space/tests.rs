//! Space-manager tests over an in-memory [`SpaceStorage`].

use super::space_map::tests::MemoryStorage;
use super::*;
use proptest::prelude::*;

pub(super) const MEBIBYTE: u64 = 1 << 20;

fn manager_with(storage: &MemoryStorage, vdevs: &[(u32, u64)]) -> SpaceManager {
    let tunables = Tunables::tiny();
    let manager = SpaceManager::new(tunables.clone());
    for &(vdev, asize) in vdevs {
        let (ms_shift, _) = metaslab_geometry(asize, &tunables);
        manager
            .add_vdev(
                VdevId(vdev),
                AllocClass::Normal,
                asize,
                ms_shift,
                9,
                None,
                storage,
            )
            .unwrap();
    }
    manager
}

/// Sync `txg` to convergence (pass 2 must write nothing new) and finish it.
pub(super) fn sync_txg(manager: &SpaceManager, storage: &MemoryStorage, txg: Txg) {
    manager.sync(txg, 1, storage).unwrap();
    assert!(!manager.is_dirty(txg));
    assert!(
        !manager.sync(txg, 2, storage).unwrap(),
        "pass 2 wrote without new changes"
    );
    manager.sync_done(txg);
}

fn reopen(
    manager: &SpaceManager,
    storage: &MemoryStorage,
    vdevs: &[(u32, u64)],
    last_synced: Txg,
) -> SpaceManager {
    let tunables = Tunables::tiny();
    let reopened = SpaceManager::new(tunables.clone());
    for &(vdev, asize) in vdevs {
        let (ms_shift, _) = metaslab_geometry(asize, &tunables);
        reopened
            .add_vdev(
                VdevId(vdev),
                AllocClass::Normal,
                asize,
                ms_shift,
                9,
                manager.ms_array(VdevId(vdev)),
                storage,
            )
            .unwrap();
    }
    reopened.set_last_synced_txg(last_synced);
    reopened
}

pub(super) fn check_stats_add_up(manager: &SpaceManager) {
    for vdev in manager.stats() {
        assert_eq!(
            vdev.allocated_bytes + vdev.free_bytes + vdev.deferred_bytes,
            vdev.size
        );
        for row in &vdev.metaslabs {
            assert_eq!(
                row.allocated_bytes + row.free_bytes + row.deferred_bytes,
                row.size,
                "metaslab {}",
                row.id
            );
        }
    }
}

#[test]
fn geometry_matches_reference_algorithm() {
    let defaults = Tunables::default();
    const GIB: u64 = 1 << 30;
    // 4 GiB: 8 at 512 MiB is below 16, so highbit(4 GiB / 16 = 2^28) = 29 → 8 × 512 MiB.
    assert_eq!(metaslab_geometry(4 * GIB, &defaults), (29, 8));
    // Just under 4 GiB (labels taken off): highbit(< 2^28) = 28 → 15 × 256 MiB.
    assert_eq!(
        metaslab_geometry(4 * GIB - 4 * MEBIBYTE, &defaults),
        (28, 15)
    );
    // 1 GiB: highbit(64 MiB) = 27 → 8 × 128 MiB. 100 MiB: clamped up to 16 MiB → 6.
    assert_eq!(metaslab_geometry(GIB, &defaults), (27, 8));
    assert_eq!(metaslab_geometry(100 * MEBIBYTE, &defaults), (24, 6));
    // 8 GiB to 100 GiB: one per 512 MiB.
    assert_eq!(metaslab_geometry(100 * GIB, &defaults), (29, 200));
    assert_eq!(metaslab_geometry(8 * GIB, &defaults), (29, 16));
    // 1 TiB: highbit(1 TiB / 200) = 33 → 128 × 8 GiB.
    assert_eq!(metaslab_geometry(1024 * GIB, &defaults), (33, 128));
    // 10 TiB: clamped to 16 GiB → 640.
    assert_eq!(metaslab_geometry(10 * 1024 * GIB, &defaults), (34, 640));
    // 4 PiB: 2^18 at 16 GiB exceeds the 2^17 cap → highbit(2^52 / 2^17) = 36 → 2^16.
    assert_eq!(metaslab_geometry(1 << 52, &defaults), (36, 1 << 16));
    // The tiny configuration gives 1 MiB metaslabs.
    let tiny = Tunables::tiny();
    assert_eq!(metaslab_geometry(64 * MEBIBYTE, &tiny), (20, 64));
    assert_eq!(metaslab_geometry(8 * MEBIBYTE, &tiny), (20, 8));
}

#[test]
fn accounting_is_exact_across_alloc_free_sync_cycles() {
    let storage = MemoryStorage::default();
    let manager = manager_with(&storage, &[(0, 8 * MEBIBYTE)]);
    let mut live: Vec<(VdevId, u64, u64)> = Vec::new();
    for txg in 4..20u64 {
        let txg = Txg(txg);
        for index in 0..20u64 {
            let size = 512 * (1 + (index * 7 + txg.0) % 16);
            let (vdev, offset) = manager.allocate_at(size, txg, &[], &storage).unwrap();
            live.push((vdev, offset, size));
        }
        for _ in 0..8 {
            let (vdev, offset, size) = live.remove((txg.0 as usize * 13) % live.len());
            manager.free(vdev, offset, size, txg).unwrap();
        }
        check_stats_add_up(&manager);
        sync_txg(&manager, &storage, txg);
        check_stats_add_up(&manager);
        let stats = &manager.stats()[0];
        assert_eq!(
            stats.allocated_bytes,
            live.iter().map(|(_, _, size)| size).sum::<u64>()
        );
    }
    // What the maps say is allocated is exactly the live blocks.
    let mut expected = RangeTree::new();
    for (_, offset, size) in &live {
        expected.add(*offset, *size);
    }
    assert_eq!(
        manager.allocated_from_space_maps(&storage).unwrap()[&VdevId(0)],
        expected
    );
}

#[test]
fn freed_space_is_not_reallocated_before_two_txgs() {
    let storage = MemoryStorage::default();
    let manager = manager_with(&storage, &[(0, 2 * MEBIBYTE)]);
    let mut blocks = Vec::new();
    while let Ok(block) = manager.allocate_at(64 << 10, Txg(4), &[], &storage) {
        blocks.push(block);
    }
    assert_eq!(blocks.len(), 32);
    sync_txg(&manager, &storage, Txg(4));
    let (vdev, offset) = blocks[5];
    manager.free(vdev, offset, 64 << 10, Txg(5)).unwrap();
    sync_txg(&manager, &storage, Txg(5));
    assert!(
        matches!(
            manager.allocate_at(512, Txg(6), &[], &storage),
            Err(SpaceError::NoSpace { .. })
        ),
        "reused in T+1"
    );
    sync_txg(&manager, &storage, Txg(6));
    // As in OpenZFS, sync_done(T + 2) releases the frees of T, so sync-context allocations see
    // them from txg T + 3: never before T + 2.
    assert!(
        matches!(
            manager.allocate_at(512, Txg(7), &[], &storage),
            Err(SpaceError::NoSpace { .. })
        ),
        "reused in T+2"
    );
    sync_txg(&manager, &storage, Txg(7));
    assert_eq!(
        manager
            .allocate_at(64 << 10, Txg(8), &[], &storage)
            .unwrap(),
        (vdev, offset),
        "reusable after sync_done(T+2)"
    );
}

#[test]
fn reopen_reproduces_free_set_and_keeps_recent_frees_deferred() {
    let storage = MemoryStorage::default();
    let vdevs = [(0, 2 * MEBIBYTE)];
    let manager = manager_with(&storage, &vdevs);
    let mut blocks = Vec::new();
    while let Ok(block) = manager.allocate_at(32 << 10, Txg(4), &[], &storage) {
        blocks.push(block);
    }
    sync_txg(&manager, &storage, Txg(4));
    // Frees in txgs 5 (old by the end), 7 and 8 (the last two synced).
    let frees = [(Txg(5), 0usize), (Txg(7), 10), (Txg(8), 20), (Txg(8), 21)];
    for txg in 5..=8u64 {
        for (free_txg, index) in frees {
            if free_txg == Txg(txg) {
                let (vdev, offset) = blocks[index];
                manager.free(vdev, offset, 32 << 10, Txg(txg)).unwrap();
            }
        }
        sync_txg(&manager, &storage, Txg(txg));
    }
    let before = manager.allocated_from_space_maps(&storage).unwrap();
    let reopened = reopen(&manager, &storage, &vdevs, Txg(8));
    assert_eq!(
        reopened.allocated_from_space_maps(&storage).unwrap(),
        before
    );
    assert_eq!(
        reopened.stats()[0].allocated_bytes,
        manager.stats()[0].allocated_bytes
    );
    // Txg 9: only the txg-5 free is allocatable; 7's and 8's are deferred.
    assert_eq!(
        reopened
            .allocate_at(32 << 10, Txg(9), &[], &storage)
            .unwrap(),
        blocks[0]
    );
    assert!(matches!(
        reopened.allocate_at(512, Txg(9), &[], &storage),
        Err(SpaceError::NoSpace { .. })
    ));
    let stats = reopened.stats();
    assert_eq!(stats[0].deferred_bytes, 3 * (32 << 10));
    check_stats_add_up(&reopened);
    sync_txg(&reopened, &storage, Txg(9));
    // Txg 10: the txg-7 free was released at sync_done(9).
    assert_eq!(
        reopened
            .allocate_at(32 << 10, Txg(10), &[], &storage)
            .unwrap(),
        blocks[10]
    );
    assert!(matches!(
        reopened.allocate_at(512, Txg(10), &[], &storage),
        Err(SpaceError::NoSpace { .. })
    ));
    sync_txg(&reopened, &storage, Txg(10));
    assert!(
        reopened
            .allocate_at(64 << 10, Txg(11), &[], &storage)
            .is_ok(),
        "txg-8 frees released at sync_done(10)"
    );
}

#[test]
fn condense_shrinks_a_long_map_and_preserves_the_free_set() {
    let storage = MemoryStorage::default();
    let vdevs = [(0, MEBIBYTE)];
    let manager = manager_with(&storage, &vdevs);
    let mut live = Vec::new();
    let mut previous_length = 0u64;
    let mut appended_bytes = 0u64;
    let mut condensed = 0;
    for txg in 4..160u64 {
        let txg = Txg(txg);
        for _ in 0..16 {
            live.push(manager.allocate_at(512, txg, &[], &storage).unwrap());
        }
        // Keep about 256 live blocks; free every other one of the oldest 32: scattered holes,
        // so every txg appends dozens of runs.
        if live.len() > 256 {
            let batch: Vec<_> = live.drain(..32).collect();
            for (index, (vdev, offset)) in batch.into_iter().enumerate() {
                if index % 2 == 0 {
                    manager.free(vdev, offset, 512, txg).unwrap();
                } else {
                    live.push((vdev, offset));
                }
            }
        }
        sync_txg(&manager, &storage, txg);
        let figures = manager.take_txg_stats();
        assert!(
            figures.spacemap_writes >= 1,
            "txg {txg} wrote no space-map block"
        );
        let length = manager.stats()[0].metaslabs[0].space_map_length_bytes;
        assert_eq!(figures.ms_condensed, u64::from(length < previous_length));
        if length < previous_length {
            condensed += 1;
        } else {
            appended_bytes += length - previous_length;
        }
        previous_length = length;
        check_stats_add_up(&manager);
    }
    let stats = manager.stats();
    let map_length = stats[0].metaslabs[0].space_map_length_bytes;
    let object = stats[0].metaslabs[0].space_map_object;
    assert_eq!(storage.object_length(object) as u64, map_length);
    // Condensing starts once the map passes 4 blocks (16 KiB in tiny) at twice its optimal size.
    assert!(
        appended_bytes > 16384,
        "the workload appended only {appended_bytes} bytes"
    );
    assert!(condensed >= 1, "map never condensed");
    assert_eq!(stats[0].metaslabs[0].condensed, condensed);
    assert!(map_length < appended_bytes / 2, "map is {map_length} bytes");
    let mut expected = RangeTree::new();
    for (_, offset) in &live {
        expected.add(*offset, 512);
    }
    assert_eq!(
        manager.allocated_from_space_maps(&storage).unwrap()[&VdevId(0)],
        expected
    );
    let reopened = reopen(&manager, &storage, &vdevs, Txg(159));
    assert_eq!(
        reopened.allocated_from_space_maps(&storage).unwrap()[&VdevId(0)],
        expected
    );
    // Loading the condensed map works and accounts for the recent frees as deferred.
    reopened.allocate_at(512, Txg(160), &[], &storage).unwrap();
    check_stats_add_up(&reopened);
}

#[test]
fn copies_go_to_other_vdevs_then_other_metaslabs() {
    let storage = MemoryStorage::default();
    let two = manager_with(&storage, &[(0, 4 * MEBIBYTE), (1, 4 * MEBIBYTE)]);
    let mut first_copies = [0u32; 2];
    for _ in 0..50 {
        let first = two.allocate_at(4096, Txg(4), &[], &storage).unwrap();
        first_copies[first.0 .0 as usize] += 1;
        let second = two.allocate_at(4096, Txg(4), &[first], &storage).unwrap();
        assert_ne!(first.0, second.0, "copies on the same vdev");
        let third = two
            .allocate_at(4096, Txg(4), &[first, second], &storage)
            .unwrap();
        assert!(third.1 >> 20 != first.1 >> 20 || third.0 != first.0);
        assert!(third.1 >> 20 != second.1 >> 20 || third.0 != second.0);
    }
    // The rotor moves across vdevs every aliquot (64 KiB in tiny).
    assert!(
        first_copies.iter().all(|&count| count >= 15),
        "{first_copies:?}"
    );

    let storage = MemoryStorage::default();
    let one = manager_with(&storage, &[(0, 4 * MEBIBYTE)]);
    for _ in 0..50 {
        let first = one.allocate_at(4096, Txg(4), &[], &storage).unwrap();
        let second = one.allocate_at(4096, Txg(4), &[first], &storage).unwrap();
        assert_eq!(first.0, second.0);
        assert_ne!(first.1 >> 20, second.1 >> 20, "copies in the same metaslab");
    }
}

#[test]
fn no_space_when_full_and_unalloc_returns_space() {
    let storage = MemoryStorage::default();
    let manager = manager_with(&storage, &[(0, 2 * MEBIBYTE)]);
    let first = manager
        .allocate_at(MEBIBYTE, Txg(4), &[], &storage)
        .unwrap();
    manager
        .allocate_at(MEBIBYTE, Txg(4), &[], &storage)
        .unwrap();
    assert!(matches!(
        manager.allocate_at(512, Txg(4), &[], &storage),
        Err(SpaceError::NoSpace {
            size_allocated: 512
        })
    ));
    assert!(matches!(
        manager.allocate_at(2 * MEBIBYTE, Txg(4), &[], &storage),
        Err(SpaceError::NoSpace { .. })
    ));
    manager.unalloc(first.0, first.1, MEBIBYTE, Txg(4)).unwrap();
    assert!(manager.unalloc(first.0, first.1, MEBIBYTE, Txg(4)).is_err());
    assert_eq!(
        manager
            .allocate_at(MEBIBYTE, Txg(4), &[], &storage)
            .unwrap(),
        first
    );
    check_stats_add_up(&manager);
}

/// Regression: write admission summed every metaslab under the group locks, which the
/// sync thread holds through a group's sync and metaslab loads, so writers stalled behind the
/// sync. The counters must answer while a group lock is held; the scan must not (which shows
/// the lock really is held).
#[test]
fn counters_answer_while_a_group_lock_is_held() {
    let storage = MemoryStorage::default();
    let manager = std::sync::Arc::new(manager_with(&storage, &[(0, 2 * MEBIBYTE)]));
    let (offset_vdev, _) = manager.allocate_at(4096, Txg(4), &[], &storage).unwrap();
    let expected = manager.totals();
    manager.while_group_locked(offset_vdev, || {
        let (sender, receiver) = std::sync::mpsc::channel();
        let counting = manager.clone();
        std::thread::spawn(move || sender.send(counting.counters()).unwrap());
        let counters = receiver
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("counters() waited for the group lock");
        assert_eq!(counters, expected);
        let (sender, receiver) = std::sync::mpsc::channel();
        let scanning = manager.clone();
        std::thread::spawn(move || sender.send(scanning.totals()).unwrap());
        assert!(
            receiver
                .recv_timeout(std::time::Duration::from_millis(100))
                .is_err(),
            "totals() returned while the group lock was held"
        );
    });
}

#[test]
fn bad_ranges_from_block_pointers_are_errors() {
    let storage = MemoryStorage::default();
    let manager = manager_with(&storage, &[(0, 2 * MEBIBYTE)]);
    let (vdev, offset) = manager.allocate_at(4096, Txg(4), &[], &storage).unwrap();
    sync_txg(&manager, &storage, Txg(4));
    let corrupt =
        |result: Result<(), SpaceError>| matches!(result, Err(SpaceError::Corrupt { .. }));
    assert!(
        corrupt(manager.free(VdevId(7), offset, 4096, Txg(5))),
        "unknown vdev"
    );
    assert!(
        corrupt(manager.free(vdev, 2 * MEBIBYTE, 4096, Txg(5))),
        "past the end"
    );
    assert!(
        corrupt(manager.free(vdev, u64::MAX - 511, 1024, Txg(5))),
        "wraps around"
    );
    assert!(
        corrupt(manager.free(vdev, MEBIBYTE - 512, 1024, Txg(5))),
        "straddles metaslabs"
    );
    assert!(
        corrupt(manager.free(vdev, offset + 1, 512, Txg(5))),
        "unaligned"
    );
    assert!(
        corrupt(manager.free(vdev, offset + 8192, 512, Txg(5))),
        "never allocated"
    );
    manager.free(vdev, offset, 4096, Txg(5)).unwrap();
    assert!(
        corrupt(manager.free(vdev, offset, 4096, Txg(5))),
        "double free"
    );
    check_stats_add_up(&manager);
}

#[test]
fn corrupted_space_map_entries_are_reported_at_load() {
    let storage = MemoryStorage::default();
    let vdevs = [(0, 2 * MEBIBYTE)];
    let manager = manager_with(&storage, &vdevs);
    let (_, offset) = manager.allocate_at(4096, Txg(4), &[], &storage).unwrap();
    sync_txg(&manager, &storage, Txg(4));
    let object = manager.stats()[0].metaslabs[(offset >> 20) as usize].space_map_object;
    // Word 1 is the ALLOC run; make it a run past the end of the 1 MiB metaslab.
    let bad_run: u64 = (4000 << 16) | 99;
    storage.poke(object, 8, &bad_run.to_le_bytes());
    let reopened = reopen(&manager, &storage, &vdevs, Txg(4));
    let error = reopened.allocated_from_space_maps(&storage).unwrap_err();
    assert!(matches!(error, SpaceError::Corrupt { .. }), "{error}");
    // Metaslab 1 (no map, all free) ranks first; once it is full the allocator must load the
    // corrupt metaslab 0 and fail cleanly.
    assert_eq!(
        reopened
            .allocate_at(MEBIBYTE, Txg(5), &[], &storage)
            .unwrap(),
        (VdevId(0), MEBIBYTE)
    );
    let error = reopened
        .allocate_at(512, Txg(5), &[], &storage)
        .unwrap_err();
    assert!(matches!(error, SpaceError::Corrupt { .. }), "{error}");
    // A bad header is refused at open.
    let mut header = storage.read_bonus(object).unwrap();
    header[20] = 1;
    storage.write_bonus(object, &header, Txg(5)).unwrap();
    let fresh = SpaceManager::new(Tunables::tiny());
    let result = fresh.add_vdev(
        VdevId(0),
        AllocClass::Normal,
        2 * MEBIBYTE,
        20,
        9,
        manager.ms_array(VdevId(0)),
        &storage,
    );
    assert!(matches!(result, Err(SpaceError::Corrupt { .. })));
}

/// Does a free gap of `size` bytes exist in some 1 MiB metaslab, given the used blocks?
fn fits_somewhere(vdevs: &[(u32, u64)], used: &[(VdevId, u64, u64)], size: u64) -> bool {
    vdevs.iter().any(|&(vdev, asize)| {
        let mut tree = RangeTree::new();
        for &(_, offset, block_size) in used.iter().filter(|block| block.0 == VdevId(vdev)) {
            tree.add(offset, block_size);
        }
        (0..asize / MEBIBYTE).any(|metaslab| {
            let (start, end) = (metaslab * MEBIBYTE, (metaslab + 1) * MEBIBYTE);
            let mut cursor = start;
            for segment in tree
                .iter()
                .filter(|segment| segment.start >= start && segment.end <= end)
            {
                if segment.start - cursor >= size {
                    return true;
                }
                cursor = segment.end;
            }
            end - cursor >= size
        })
    })
}

#[derive(Clone, Debug)]
enum Operation {
    Allocate { sectors: u64 },
    Free { pick: usize },
    Unalloc,
    EndTxg,
}

fn operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        6 => (1u64..64).prop_map(|sectors| Operation::Allocate { sectors }),
        4 => any::<usize>().prop_map(|pick| Operation::Free { pick }),
        1 => Just(Operation::Unalloc),
        2 => Just(Operation::EndTxg),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random allocations, frees and txg ends against a model of live blocks and pending frees.
    #[test]
    fn random_operations_match_model(operations in proptest::collection::vec(operation(), 1..300)) {
        let storage = MemoryStorage::default();
        let vdevs = [(0, 2 * MEBIBYTE), (1, MEBIBYTE)];
        let manager = manager_with(&storage, &vdevs);
        let mut txg = Txg(4);
        // Live blocks, with the txg they were allocated in.
        let mut live: Vec<(VdevId, u64, u64, Txg)> = Vec::new();
        // Frees not yet reusable: (vdev, offset, size, txg freed).
        let mut deferred: Vec<(VdevId, u64, u64, Txg)> = Vec::new();
        for operation in operations {
            match operation {
                Operation::Allocate { sectors } => {
                    let size = sectors * 512;
                    match manager.allocate_at(size, txg, &[], &storage) {
                        Ok((vdev, offset)) => {
                            for (other_vdev, other_offset, other_size, _) in live.iter().chain(deferred.iter()) {
                                prop_assert!(*other_vdev != vdev || offset + size <= *other_offset || other_offset + other_size <= offset,
                                    "allocation overlaps a live or deferred block");
                            }
                            live.push((vdev, offset, size, txg));
                        }
                        Err(SpaceError::NoSpace { .. }) => {
                            let used: Vec<_> = live.iter().chain(deferred.iter()).map(|block| (block.0, block.1, block.2)).collect();
                            prop_assert!(!fits_somewhere(&vdevs, &used, size), "NoSpace although {size} bytes fit");
                        }
                        Err(other) => return Err(TestCaseError::fail(format!("{other}"))),
                    }
                }
                Operation::Free { pick } if !live.is_empty() => {
                    let (vdev, offset, size, _) = live.swap_remove(pick % live.len());
                    manager.free(vdev, offset, size, txg).unwrap();
                    deferred.push((vdev, offset, size, txg));
                }
                Operation::Free { .. } => {}
                Operation::Unalloc => {
                    if let Some(position) = live.iter().rposition(|block| block.3 == txg) {
                        let (vdev, offset, size, _) = live.remove(position);
                        manager.unalloc(vdev, offset, size, txg).unwrap();
                    }
                }
                Operation::EndTxg => {
                    sync_txg(&manager, &storage, txg);
                    deferred.retain(|block| block.3 .0 + 2 > txg.0);
                    txg = txg.next();
                }
            }
            prop_assert_eq!(manager.counters(), manager.totals());
            let stats = manager.stats();
            check_stats_add_up(&manager);
            let allocated: u64 = stats.iter().map(|vdev| vdev.allocated_bytes).sum();
            prop_assert_eq!(allocated, live.iter().map(|block| block.2).sum::<u64>());
            let pending: u64 = stats.iter().map(|vdev| vdev.deferred_bytes).sum();
            prop_assert_eq!(pending, deferred.iter().map(|block| block.2).sum::<u64>());
        }
        sync_txg(&manager, &storage, txg);
        let on_disk = manager.allocated_from_space_maps(&storage).unwrap();
        let reopened = reopen(&manager, &storage, &vdevs, txg);
        prop_assert_eq!(reopened.counters(), reopened.totals());
        // Loads (which defer the recent frees again) keep the counters equal to the scan.
        let _ = reopened.allocate_at(512, txg.next(), &[], &storage);
        let _ = reopened.allocate_at(512, txg.next(), &[(VdevId(0), 0)], &storage);
        prop_assert_eq!(reopened.counters(), reopened.totals());
        prop_assert_eq!(&reopened.allocated_from_space_maps(&storage).unwrap(), &on_disk);
        for (vdev, tree) in &on_disk {
            let mut expected = RangeTree::new();
            for block in live.iter().filter(|block| block.0 == *vdev) {
                expected.add(block.1, block.2);
            }
            prop_assert_eq!(tree, &expected);
        }
    }
}

/// Regression: extra copies of one block on a single vdev landed in a neighbouring metaslab, so
/// one damaged region of the device could take every copy. They now keep 1/8 of the vdev
/// apart when the vdev has room, and fall back to another metaslab when it does not.
#[test]
fn copies_on_one_vdev_are_placed_well_apart() {
    let storage = MemoryStorage::default();
    let asize = 64 * MEBIBYTE;
    let manager = manager_with(&storage, &[(0, asize)]);
    for _ in 0..20 {
        let first = manager.allocate_at(4096, Txg(4), &[], &storage).unwrap();
        let second = manager
            .allocate_at(4096, Txg(4), &[first], &storage)
            .unwrap();
        let third = manager
            .allocate_at(4096, Txg(4), &[first, second], &storage)
            .unwrap();
        let placed = [first.1, second.1, third.1];
        for a in 0..3 {
            for b in a + 1..3 {
                assert!(
                    placed[a].abs_diff(placed[b]) >= asize >> DITTO_SAME_VDEV_DISTANCE_SHIFT,
                    "copies at {placed:?} are closer than 1/8 of the vdev"
                );
            }
        }
    }
    let small = MemoryStorage::default();
    let manager = manager_with(&small, &[(0, 2 * MEBIBYTE)]);
    let first = manager.allocate_at(4096, Txg(4), &[], &small).unwrap();
    let second = manager.allocate_at(4096, Txg(4), &[first], &small).unwrap();
    assert_ne!(
        first.1 >> 20,
        second.1 >> 20,
        "a second copy shares the metaslab"
    );
}

/// Storage that records which objects were written, over a [`MemoryStorage`].
#[derive(Default)]
struct RecordingStorage {
    inner: MemoryStorage,
    written: parking_lot::Mutex<Vec<ObjectId>>,
}

impl SpaceStorage for RecordingStorage {
    fn create_object(&self, block_size: u32, txg: Txg) -> Result<ObjectId, StorageError> {
        self.inner.create_object(block_size, txg)
    }
    fn free_object(&self, object: ObjectId, txg: Txg) -> Result<(), StorageError> {
        self.inner.free_object(object, txg)
    }
    fn read(&self, object: ObjectId, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.inner.read(object, offset, buf)
    }
    fn write(
        &self,
        object: ObjectId,
        offset: u64,
        data: &[u8],
        txg: Txg,
    ) -> Result<(), StorageError> {
        self.written.lock().push(object);
        self.inner.write(object, offset, data, txg)
    }
    fn truncate(&self, object: ObjectId, length: u64, txg: Txg) -> Result<(), StorageError> {
        self.inner.truncate(object, length, txg)
    }
    fn read_bonus(&self, object: ObjectId) -> Result<Vec<u8>, StorageError> {
        self.inner.read_bonus(object)
    }
    fn write_bonus(&self, object: ObjectId, bonus: &[u8], txg: Txg) -> Result<(), StorageError> {
        self.inner.write_bonus(object, bonus, txg)
    }
}

/// Sync convergence with metadata copies: second and third
/// copies land in one active metaslab per copy (OpenZFS `mg_secondaries`), and pass 1 copies
/// the last block of every active metaslab's map even when nothing touched it yet, so that the
/// MOS blocks pass 1 writes there are recorded in pass 2 in place. Before, ditto copies went
/// to whichever metaslab weighed most, and a map first appended in pass 2 had its old tail
/// block copied then (free deferred to the list, list copied in pass 3, pass 4 to record it).
#[test]
fn extra_copies_use_stable_metaslabs_whose_maps_pass_one_prepares() {
    let storage = RecordingStorage::default();
    let asize = 64 * MEBIBYTE;
    let manager = manager_with(&storage.inner, &[(0, asize)]);
    let metaslab_of = |offset: u64| offset >> manager.stats()[0].ms_shift;
    let mut used: [Vec<u64>; 3] = Default::default();
    for txg in 4..8 {
        for _ in 0..20 {
            let first = manager.allocate_at(4096, Txg(txg), &[], &storage).unwrap();
            let second = manager
                .allocate_at(4096, Txg(txg), &[first], &storage)
                .unwrap();
            let third = manager
                .allocate_at(4096, Txg(txg), &[first, second], &storage)
                .unwrap();
            for (copy, (_, offset)) in [first, second, third].into_iter().enumerate() {
                used[copy].push(metaslab_of(offset));
            }
        }
        sync_txg(&manager, &storage.inner, Txg(txg));
    }
    for (copy, metaslabs) in used.iter_mut().enumerate() {
        metaslabs.dedup();
        assert_eq!(metaslabs.len(), 1, "copy {copy} spread over {metaslabs:?}");
    }
    // Txg 8 allocates first copies only: pass 1 still copies the tails of the maps of the
    // metaslabs active for second and third copies.
    manager.allocate_at(4096, Txg(8), &[], &storage).unwrap();
    storage.written.lock().clear();
    manager.sync(Txg(8), 1, &storage).unwrap();
    let written = storage.written.lock().clone();
    let stats = &manager.stats()[0];
    for (copy, metaslabs) in used.iter().enumerate().skip(1) {
        let map = stats.metaslabs[metaslabs[0] as usize].space_map_object;
        assert!(
            written.contains(&map),
            "pass 1 left the map of copy {copy}'s metaslab alone: {written:?}"
        );
    }
    assert!(!manager.sync(Txg(8), 2, &storage).unwrap());
    manager.sync_done(Txg(8));
}

fn manager_with_tunables(storage: &MemoryStorage, asize: u64, tunables: Tunables) -> SpaceManager {
    let manager = SpaceManager::new(tunables.clone());
    let (ms_shift, _) = metaslab_geometry(asize, &tunables);
    manager
        .add_vdev(
            VdevId(0),
            AllocClass::Normal,
            asize,
            ms_shift,
            9,
            None,
            storage,
        )
        .unwrap();
    manager
}

/// Allocate `count` blocks of `size` in `txg`, returning them.
fn allocate_many(
    manager: &SpaceManager,
    storage: &MemoryStorage,
    txg: Txg,
    count: usize,
    size: u64,
) -> Vec<(VdevId, u64)> {
    (0..count)
        .map(|_| manager.allocate_at(size, txg, &[], storage).unwrap())
        .collect()
}

fn loaded_metaslabs(manager: &SpaceManager) -> Vec<u64> {
    manager.stats()[0]
        .metaslabs
        .iter()
        .filter(|ms| ms.loaded)
        .map(|ms| ms.id)
        .collect()
}

/// Metaslabs the allocator moved on from are unloaded after `metaslab_unload_delay` idle txgs
/// (OpenZFS metaslab_class_evict_old): before, loaded metaslabs were never unloaded, so a pool
/// that had touched every metaslab kept every free tree in memory.
#[test]
fn idle_metaslabs_unload_after_the_delay() {
    let storage = MemoryStorage::default();
    let tunables = Tunables {
        metaslab_preload_limit: 0,
        ..Tunables::tiny()
    };
    let delay = tunables.metaslab_unload_delay;
    let manager = manager_with_tunables(&storage, 8 * MEBIBYTE, tunables);
    // Fill three metaslabs' worth in 64 KiB blocks: the allocator loads and leaves several.
    let mut blocks = Vec::new();
    for txg in 4..7u64 {
        blocks.extend(allocate_many(&manager, &storage, Txg(txg), 16, 64 << 10));
        sync_txg(&manager, &storage, Txg(txg));
    }
    let figures = manager.take_txg_stats();
    assert!(figures.ms_loaded >= 3, "{figures:?}");
    assert!(
        figures.allocations == 48 && figures.alloc_load_waits >= 3,
        "{figures:?}"
    );
    assert!(figures.alloc_segments_p999 >= 1);
    let loaded = loaded_metaslabs(&manager);
    assert!(loaded.len() >= 3, "loaded {loaded:?}");
    // Idle txgs: nothing chosen, so everything but the active metaslab goes.
    for txg in 7..7 + delay + 2 {
        sync_txg(&manager, &storage, Txg(txg));
    }
    let figures = manager.take_txg_stats();
    let still = loaded_metaslabs(&manager);
    assert_eq!(figures.ms_unloaded as usize, loaded.len() - still.len());
    assert!(still.len() <= 1, "still loaded: {still:?}");
    assert!(manager.loaded_memory() > 0 || still.is_empty());
    // Freeing into unloaded metaslabs and allocating again reloads them consistently.
    let last = 7 + delay + 2;
    for (vdev, offset) in blocks.drain(..24) {
        manager.free(vdev, offset, 64 << 10, Txg(last)).unwrap();
    }
    sync_txg(&manager, &storage, Txg(last));
    check_stats_add_up(&manager);
    for txg in last + 1..last + 4 {
        allocate_many(&manager, &storage, Txg(txg), 20, 64 << 10);
        sync_txg(&manager, &storage, Txg(txg));
        check_stats_add_up(&manager);
    }
}

/// Under `metaslab_mem_limit`, loading a metaslab first unloads the least recently chosen
/// ones, and the end of each txg trims back under the cap; active metaslabs stay.
#[test]
fn memory_cap_unloads_least_recently_used() {
    let storage = MemoryStorage::default();
    let tunables = Tunables {
        metaslab_mem_limit: 1,
        metaslab_unload_delay: 1000,
        ..Tunables::tiny()
    };
    let manager = manager_with_tunables(&storage, 8 * MEBIBYTE, tunables);
    let mut live = Vec::new();
    for txg in 4..20u64 {
        live.extend(allocate_many(&manager, &storage, Txg(txg), 12, 32 << 10));
        if live.len() > 100 {
            for (vdev, offset) in live.drain(..40).step_by(2) {
                manager.free(vdev, offset, 32 << 10, Txg(txg)).unwrap();
            }
        }
        sync_txg(&manager, &storage, Txg(txg));
        check_stats_add_up(&manager);
        // Only active metaslabs (one per copy slot at most) may stay loaded over the cap.
        let loaded = loaded_metaslabs(&manager);
        assert!(loaded.len() <= ACTIVE_SLOTS, "txg {txg}: loaded {loaded:?}");
    }
    let figures = manager.take_txg_stats();
    assert!(figures.ms_unloaded >= 1, "{figures:?}");
    assert!(figures.ms_loaded > figures.ms_unloaded.saturating_sub(ACTIVE_SLOTS as u64));
}

/// The rotor gives each top-level vdev a share of new data in proportion to its free space
/// (metaslab_aliquot scaled, OpenZFS metaslab_bias_enabled), so that unequal vdevs fill evenly.
#[test]
fn rotation_is_weighted_by_free_space() {
    let storage = MemoryStorage::default();
    let vdevs = [(0, 4 * MEBIBYTE), (1, 16 * MEBIBYTE)];
    let manager = manager_with(&storage, &vdevs);
    sync_txg(&manager, &storage, Txg(4)); // records each vdev's free space
    let mut bytes = [0u64; 2];
    for txg in 5..9u64 {
        for _ in 0..16 {
            let (vdev, _) = manager
                .allocate_at(16 << 10, Txg(txg), &[], &storage)
                .unwrap();
            bytes[vdev.0 as usize] += 16 << 10;
        }
        sync_txg(&manager, &storage, Txg(txg));
    }
    assert!(
        bytes[1] >= 3 * bytes[0] && bytes[0] > 0,
        "vdev 0 took {} bytes, vdev 1 {}",
        bytes[0],
        bytes[1]
    );
}

/// An unloaded metaslab's header histogram counts freed ranges as they were freed, not merged
/// with their neighbours: frees of alternate blocks in two txgs leave a 128 KiB free run that
/// the header shows as 4 KiB pieces. Once idle unloading arrived, a metaslab unloaded in that
/// state looked unable to take a 64 KiB block, and a pool at 70% failed a sync with "no space
/// for a 131072-byte block" (bench frag). The largest segment is now remembered at unload
/// (OpenZFS `ms_max_size`), and the weight test takes it into account.
#[test]
fn unloaded_metaslab_with_merged_frees_still_takes_large_blocks() {
    let storage = MemoryStorage::default();
    let manager = manager_with(&storage, &[(0, 2 * MEBIBYTE)]);
    let blocks = allocate_many(&manager, &storage, Txg(4), 512, 4096);
    assert!(manager.allocate_at(4096, Txg(4), &[], &storage).is_err());
    sync_txg(&manager, &storage, Txg(4));
    let run: Vec<_> = blocks
        .iter()
        .filter(|(_, offset)| (64 << 10..192 << 10).contains(offset))
        .copied()
        .collect();
    assert_eq!(run.len(), 32);
    for (txg, parity) in [(5u64, 0), (6, 1)] {
        for (vdev, offset) in &run {
            if (offset >> 12) % 2 == parity {
                manager.free(*vdev, *offset, 4096, Txg(txg)).unwrap();
            }
        }
        sync_txg(&manager, &storage, Txg(txg));
    }
    let delay = manager.tunables().metaslab_unload_delay;
    for txg in 7..7 + delay + 4 {
        sync_txg(&manager, &storage, Txg(txg));
    }
    assert!(loaded_metaslabs(&manager).is_empty(), "not unloaded");
    let txg = Txg(7 + delay + 4);
    let (_, offset) = manager.allocate_at(128 << 10, txg, &[], &storage).unwrap();
    assert_eq!(offset, 64 << 10);
    sync_txg(&manager, &storage, txg);
    check_stats_add_up(&manager);
}

/// Regression: when no candidate fit, the allocator "tried hard" by loading
/// every unloaded metaslab with enough free bytes, whatever its weight said: one failing 8 KiB
/// request loaded all 16 metaslabs of a pool whose free space was all in 4 KiB pieces, and
/// gang planning repeated that at every halving, inside the sync thread. The weight test now
/// applies to every metaslab, so such a request fails without a load.
#[test]
fn a_failing_request_loads_no_metaslab_its_weight_rules_out() {
    let storage = MemoryStorage::default();
    let manager = manager_with(&storage, &[(0, 16 * MEBIBYTE)]);
    let mut blocks = Vec::new();
    while let Ok(block) = manager.allocate_at(4096, Txg(4), &[], &storage) {
        blocks.push(block);
    }
    sync_txg(&manager, &storage, Txg(4));
    // Every other 4 KiB block goes: free space everywhere, but no two pieces adjacent.
    for (vdev, offset) in &blocks {
        if (offset >> 12) % 2 == 0 {
            manager.free(*vdev, *offset, 4096, Txg(5)).unwrap();
        }
    }
    sync_txg(&manager, &storage, Txg(5));
    let delay = manager.tunables().metaslab_unload_delay;
    for txg in 6..6 + delay + 4 {
        sync_txg(&manager, &storage, Txg(txg));
    }
    assert!(loaded_metaslabs(&manager).is_empty(), "not unloaded");
    let metaslabs = manager.stats()[0].metaslabs.len();
    assert!(metaslabs >= 16, "{metaslabs} metaslabs");
    let txg = Txg(6 + delay + 4);
    let _ = manager.take_txg_stats();
    for _ in 0..3 {
        assert!(matches!(
            manager.allocate_at(8192, txg, &[], &storage),
            Err(SpaceError::NoSpace { .. })
        ));
    }
    let loads = manager.take_txg_stats().ms_loaded;
    assert_eq!(loads, 0, "failing requests loaded {loads} metaslabs");
    // A request that fits still succeeds.
    manager.allocate_at(4096, txg, &[], &storage).unwrap();
    sync_txg(&manager, &storage, txg);
    check_stats_add_up(&manager);
}

/// Fill `txgs` txgs with 16 blocks of 64 KiB each (one 1 MiB metaslab per txg) and return the
/// allocations that waited for a metaslab load, and the metaslabs loaded in all.
fn load_waits_filling_metaslabs(preload_limit: u64, txgs: u64) -> (u64, u64) {
    let storage = MemoryStorage::default();
    let tunables = Tunables {
        metaslab_preload_limit: preload_limit,
        ..Tunables::tiny()
    };
    let manager = manager_with_tunables(&storage, 8 * MEBIBYTE, tunables);
    let (mut waits, mut loads) = (0, 0);
    for txg in 4..4 + txgs {
        allocate_many(&manager, &storage, Txg(txg), 16, 64 << 10);
        sync_txg(&manager, &storage, Txg(txg));
        check_stats_add_up(&manager);
        let stats = manager.take_txg_stats();
        waits += stats.alloc_load_waits;
        loads += stats.ms_loaded;
    }
    (waits, loads)
}

/// A steady trickle (one small block per txg, as a one-block change writes) keeps the top
/// metaslabs loaded and loads nothing more once they are: preload counts the loaded ones
/// among its look-ahead (OpenZFS metaslab_group_preload). Counting only unloaded ones loaded
/// three metaslabs every txg, for ever, as the idle rule unloaded what it had loaded
/// `metaslab_unload_delay` txgs before.
#[test]
fn a_steady_trickle_stops_loading_metaslabs() {
    let storage = MemoryStorage::default();
    let tunables = Tunables {
        metaslab_preload_limit: 3,
        ..Tunables::tiny()
    };
    let delay = tunables.metaslab_unload_delay;
    let manager = manager_with_tunables(&storage, 8 * MEBIBYTE, tunables);
    let mut loads_after_warm_up = 0;
    let warm_up = 4 + 4 * delay;
    for txg in 4..warm_up + 8 * delay {
        allocate_many(&manager, &storage, Txg(txg), 1, 4096);
        sync_txg(&manager, &storage, Txg(txg));
        let stats = manager.take_txg_stats();
        if txg >= warm_up {
            loads_after_warm_up += stats.ms_loaded;
        }
    }
    check_stats_add_up(&manager);
    assert_eq!(
        loads_after_warm_up,
        0,
        "metaslabs loaded in {} steady txgs",
        8 * delay
    );
}

/// Preloading the next candidates in pass 1 of a busy txg (OpenZFS metaslab_group_preload)
/// takes the space-map reads off the allocation path: moving on to the next metaslab, once the
/// active one is full, no longer waits for a load. Fewer waits alone would also come from
/// loading everything, so the loads are counted too: preload reads at most its look-ahead
/// more maps than the allocations needed. (The load still runs on the sync thread, in pass 1:
/// OpenZFS preloads in a task queue; tarn moves the read, it does not overlap it.)
#[test]
fn preload_takes_loads_off_the_allocation_path() {
    let (without, loads_without) = load_waits_filling_metaslabs(0, 6);
    let (with, loads_with) = load_waits_filling_metaslabs(3, 6);
    assert!(without >= 6, "without preload: {without} waits");
    assert!(with <= 2, "with preload: {with} waits");
    assert!(
        loads_with <= loads_without + 3,
        "preload loaded {loads_with} metaslabs, the allocations alone {loads_without}"
    );
}
