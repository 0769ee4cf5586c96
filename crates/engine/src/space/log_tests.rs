//! Space-manager tests with the log space map ([`super::log`]) over an in-memory storage:
//! replay at reopen, cancelling, deferral across reopen, the flushing limits under the tiny
//! configuration, and the block writes the log saves.

use super::space_map::tests::MemoryStorage;
use super::tests::{check_stats_add_up, sync_txg, MEBIBYTE};
use super::*;
use proptest::prelude::*;

fn manager_with_log(
    storage: &MemoryStorage,
    vdevs: &[(u32, u64)],
    tunables: &Tunables,
    log: bool,
) -> SpaceManager {
    let manager = SpaceManager::new(tunables.clone());
    if log {
        manager.enable_log();
    }
    for &(vdev, asize) in vdevs {
        let (ms_shift, _) = metaslab_geometry(asize, tunables);
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

/// What an import does: open the arrays, then replay the logs.
fn reopen_with_log(
    manager: &SpaceManager,
    storage: &MemoryStorage,
    vdevs: &[(u32, u64)],
    tunables: &Tunables,
    last_synced: Txg,
) -> Result<SpaceManager, SpaceError> {
    let reopened = SpaceManager::new(tunables.clone());
    reopened.enable_log();
    for &(vdev, asize) in vdevs {
        let (ms_shift, _) = metaslab_geometry(asize, tunables);
        reopened.add_vdev(
            VdevId(vdev),
            AllocClass::Normal,
            asize,
            ms_shift,
            9,
            manager.ms_array(VdevId(vdev)),
            storage,
        )?;
    }
    reopened.open_log(manager.log_directory(), storage, last_synced)?;
    reopened.set_last_synced_txg(last_synced);
    assert_eq!(
        reopened.counters(),
        reopened.totals(),
        "counters after replay"
    );
    Ok(reopened)
}

fn allocated_per_metaslab(manager: &SpaceManager) -> Vec<u64> {
    manager
        .stats()
        .iter()
        .flat_map(|vdev| vdev.metaslabs.iter().map(|row| row.allocated_bytes))
        .collect()
}

#[test]
fn reopen_replays_the_log_and_keeps_recent_frees_deferred() {
    let storage = MemoryStorage::default();
    let tunables = Tunables::tiny();
    let vdevs = [(0, 2 * MEBIBYTE)];
    let manager = manager_with_log(&storage, &vdevs, &tunables, true);
    let mut blocks = Vec::new();
    while let Ok(block) = manager.allocate_at(32 << 10, Txg(4), &[], &storage) {
        blocks.push(block);
    }
    sync_txg(&manager, &storage, Txg(4));
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
    let log = manager.log_stats().unwrap();
    assert!(!log.logs.is_empty(), "nothing logged");
    assert!(log.metaslabs_unflushed > 0, "everything flushed already");
    let before = manager.allocated_from_space_maps(&storage).unwrap();
    let reopened = reopen_with_log(&manager, &storage, &vdevs, &tunables, Txg(8)).unwrap();
    assert_eq!(
        reopened.allocated_from_space_maps(&storage).unwrap(),
        before
    );
    assert_eq!(
        allocated_per_metaslab(&reopened),
        allocated_per_metaslab(&manager)
    );
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
    assert_eq!(reopened.stats()[0].deferred_bytes, 3 * (32 << 10));
    check_stats_add_up(&reopened);
    sync_txg(&reopened, &storage, Txg(9));
    assert_eq!(
        reopened
            .allocate_at(32 << 10, Txg(10), &[], &storage)
            .unwrap(),
        blocks[10]
    );
}

/// Every metaslab loaded (as an allocation would load it after import), and the ranges its
/// defer trees hold, as (vdev, start, end, the txg's defer slot).
fn deferred_ranges(manager: &SpaceManager, storage: &MemoryStorage) -> Vec<(u32, u64, u64, usize)> {
    let last_synced = *manager.last_synced.lock();
    let groups = manager.groups.read();
    let mut ranges = Vec::new();
    for group in groups.iter() {
        let mut group = group.lock();
        let vdev = group.vdev.0;
        for metaslab in group.metaslabs.iter_mut() {
            if let Some(last_synced) = last_synced {
                manager
                    .track(metaslab, |metaslab| metaslab.load(storage, last_synced))
                    .unwrap();
            }
            for (slot, tree) in metaslab.defer.iter().enumerate() {
                ranges.extend(
                    tree.iter()
                        .map(|segment| (vdev, segment.start, segment.end, slot)),
                );
            }
        }
    }
    ranges.sort_unstable();
    ranges
}

/// Regression: a block allocated and freed between two flushes of its
/// metaslab cancels out in the unflushed trees, and the flush that followed, or the walk
/// passing the then clean metaslab, recorded the free nowhere: the log that held it was freed,
/// the map never had the block, and after export and import the block was allocatable at once
/// although a tree of the last two txgs still pointed at it (invariant 3). The running manager
/// showed 4 KiB deferred, the reopened one 0. Both ways are tried: the metaslab clean after the
/// cancel (the walk only moves its unflushed txg) and dirty with another change (flushed).
#[test]
fn a_free_that_cancels_an_unflushed_allocation_stays_deferred_across_reopen() {
    for other_change in [false, true] {
        let storage = MemoryStorage::default();
        let tunables = Tunables::tiny();
        let vdevs = [(0, 2 * MEBIBYTE)];
        let manager = manager_with_log(&storage, &vdevs, &tunables, true);
        let mut blocks = Vec::new();
        while let Ok(block) = manager.allocate_at(4096, Txg(4), &[], &storage) {
            blocks.push(block);
        }
        sync_txg(&manager, &storage, Txg(4));
        // Flush everything so that the next allocation is an unflushed change of its own.
        let (vdev, offset) = blocks.pop().unwrap();
        manager.free(vdev, offset, 4096, Txg(5)).unwrap();
        manager.request_flush_all();
        sync_txg(&manager, &storage, Txg(5));
        for txg in 6..=8 {
            sync_txg(&manager, &storage, Txg(txg));
        }
        manager.request_flush_all();
        sync_txg(&manager, &storage, Txg(9));
        // Born in txg 10, freed in txg 11: the free cancels the unflushed allocation. A free in
        // the first metaslab makes it the older dirty one, so that the one flush that txg 11's
        // walk makes goes there and not to the block's metaslab.
        let short_lived = manager.allocate_at(4096, Txg(10), &[], &storage).unwrap();
        assert_eq!(short_lived, (vdev, offset));
        let (first_vdev, first_offset) = blocks[0];
        assert!(first_offset + (1 << 20) <= offset, "same metaslab");
        manager
            .free(first_vdev, first_offset, 4096, Txg(10))
            .unwrap();
        sync_txg(&manager, &storage, Txg(10));
        manager.free(vdev, offset, 4096, Txg(11)).unwrap();
        if other_change {
            let (vdev, offset) = blocks.pop().unwrap();
            manager.free(vdev, offset, 4096, Txg(11)).unwrap();
        }
        sync_txg(&manager, &storage, Txg(11));
        assert!(
            manager.stats()[0].metaslabs[1].unflushed_txg < 11,
            "the block's metaslab was flushed in txg 11"
        );
        // The export's flush of every metaslab, in a txg with a change elsewhere (as the
        // export's txg has: its labels and uberblock need a txg that syncs).
        let (second_vdev, second_offset) = blocks[1];
        manager
            .free(second_vdev, second_offset, 4096, Txg(12))
            .unwrap();
        manager.request_flush_all();
        sync_txg(&manager, &storage, Txg(12));
        let running = deferred_ranges(&manager, &storage);
        assert!(
            running
                .iter()
                .any(|&(deferred_vdev, start, end, slot)| deferred_vdev == vdev.0
                    && start <= offset
                    && offset + 4096 <= end
                    && slot == 1),
            "{running:?}"
        );
        let reopened = reopen_with_log(&manager, &storage, &vdevs, &tunables, Txg(12)).unwrap();
        assert!(
            !reopened
                .is_allocatable(vdev, offset, 4096, &storage)
                .unwrap(),
            "the block freed in txg 11 is allocatable after the reopen at txg 12"
        );
        assert!(
            reopened
                .is_allocatable(first_vdev, first_offset, 4096, &storage)
                .unwrap(),
            "the block freed in txg 10 is still held after the reopen at txg 12"
        );
        assert!(
            reopened
                .is_allocatable(vdev, 0, 2 * MEBIBYTE, &storage)
                .unwrap(),
            "a range over both metaslabs"
        );
        assert_eq!(
            deferred_ranges(&reopened, &storage),
            running,
            "other change: {other_change}"
        );
        // Txg 13 may reuse frees of txg 10 and before only: the block is not handed out.
        if let Ok(block) = reopened.allocate_at(4096, Txg(13), &[], &storage) {
            assert_ne!(block, short_lived, "reused in txg 13, freed in txg 11");
        }
        check_stats_add_up(&reopened);
    }
}

#[test]
fn flush_all_leaves_only_the_last_log() {
    let storage = MemoryStorage::default();
    let tunables = Tunables::tiny();
    let vdevs = [(0, 8 * MEBIBYTE)];
    let manager = manager_with_log(&storage, &vdevs, &tunables, true);
    let mut live = Vec::new();
    while let Ok(block) = manager.allocate_at(4096, Txg(4), &[], &storage) {
        live.push(block);
    }
    sync_txg(&manager, &storage, Txg(4));
    for txg in 5..20u64 {
        // One free in each metaslab per txg: more dirty metaslabs than the estimate flushes.
        for metaslab in 0..8 {
            let (vdev, offset) = live.remove(metaslab * 200 + 7);
            manager.free(vdev, offset, 4096, Txg(txg)).unwrap();
        }
        sync_txg(&manager, &storage, Txg(txg));
    }
    assert!(manager.log_stats().unwrap().logs.len() > 1);
    manager.request_flush_all();
    assert!(manager.flush_all_pending());
    let (vdev, offset) = live.pop().unwrap();
    manager.free(vdev, offset, 4096, Txg(20)).unwrap();
    sync_txg(&manager, &storage, Txg(20));
    let log = manager.log_stats().unwrap();
    assert_eq!(
        log.logs.iter().map(|log| log.txg).collect::<Vec<_>>(),
        vec![20]
    );
    assert_eq!(
        log.metaslabs_unflushed, 1,
        "only txg 20's free is unflushed"
    );
    let reopened = reopen_with_log(&manager, &storage, &vdevs, &tunables, Txg(20)).unwrap();
    assert_eq!(
        reopened.allocated_from_space_maps(&storage).unwrap(),
        manager.allocated_from_space_maps(&storage).unwrap()
    );
}

/// Which flushing limit a run of [`run_flushing_workload`] makes the one that binds.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Binding {
    Txgs,
    Blocks,
    Memory,
}

/// A workload touching every metaslab every txg for 200 txgs (64 allocations and 48 frees of
/// 4 KiB a txg over 64 metaslabs), under tunables where `binding` is the limit reached first.
/// Returns the largest log (blocks) and unflushed memory seen after a sync, and the limits.
fn run_flushing_workload(binding: Binding) -> (u64, u64, u64, Tunables) {
    let tiny = Tunables::tiny();
    let tunables = match binding {
        Binding::Txgs => tiny,
        Binding::Blocks => Tunables {
            unflushed_log_txg_max: 1000,
            unflushed_log_block_min: 8,
            unflushed_log_block_max: 8,
            unflushed_max_mem_amt: 64 << 20,
            ..tiny
        },
        Binding::Memory => Tunables {
            unflushed_log_txg_max: 1000,
            unflushed_log_block_min: 4000,
            unflushed_log_block_max: 8000,
            unflushed_max_mem_amt: 4 << 10,
            ..tiny
        },
    };
    let storage = MemoryStorage::default();
    let vdevs = [(0, 32 * MEBIBYTE), (1, 32 * MEBIBYTE)];
    let manager = manager_with_log(&storage, &vdevs, &tunables, true);
    let mut live: Vec<(VdevId, u64)> = Vec::new();
    let mut flushed = 0;
    let mut seed = 7u64;
    let (mut most_blocks, mut block_limit, mut most_memory) = (0, 0, 0);
    for txg in 4..204u64 {
        for _ in 0..64 {
            live.push(manager.allocate_at(4096, Txg(txg), &[], &storage).unwrap());
        }
        for _ in 0..48 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let index = (seed >> 33) as usize % live.len();
            let (vdev, offset) = live.swap_remove(index);
            manager.free(vdev, offset, 4096, Txg(txg)).unwrap();
        }
        sync_txg(&manager, &storage, Txg(txg));
        flushed += manager.take_txg_stats().ms_flushed;
        let log = manager.log_stats().unwrap();
        assert!(
            log.oldest_unflushed_txg + tunables.unflushed_log_txg_max >= txg,
            "txg {txg}: a metaslab unflushed since {}",
            log.oldest_unflushed_txg
        );
        assert!(log.logs.len() as u64 <= tunables.unflushed_log_txg_max + 1);
        assert!(log.summary.len() as u64 <= tunables.max_logsm_summary_length);
        most_blocks = most_blocks.max(log.blocks);
        block_limit = block_limit.max(log.block_limit);
        most_memory = most_memory.max(log.memory_bytes);
        check_stats_add_up(&manager);
    }
    assert!(flushed > 100, "{binding:?}: {flushed} flushes");
    let reopened = reopen_with_log(&manager, &storage, &vdevs, &tunables, Txg(203)).unwrap();
    assert_eq!(
        reopened.allocated_from_space_maps(&storage).unwrap(),
        manager.allocated_from_space_maps(&storage).unwrap()
    );
    assert_eq!(
        allocated_per_metaslab(&reopened),
        allocated_per_metaslab(&manager)
    );
    (most_blocks, block_limit, most_memory, tunables)
}

/// The flushing limits, each made the binding one in turn: no metaslab goes unflushed longer
/// than the txg limit (the tiny configuration's 32 txgs), the log stays within its block
/// limit (8 blocks), and the unflushed changes within their memory limit (4 KiB) plus the one
/// txg they grow by after the flush that checks them (112 changes of 16 bytes). An earlier
/// version ran only the first configuration, where the log never came near its 200-block
/// limit nor 9 KiB near its 64 KiB, and asserted neither (it allowed twice the memory).
#[test]
fn flushing_keeps_the_log_within_its_limits() {
    let (_, _, _, _) = run_flushing_workload(Binding::Txgs);
    let (most_blocks, block_limit, _, _) = run_flushing_workload(Binding::Blocks);
    assert_eq!(block_limit, 8);
    assert!(
        most_blocks <= block_limit,
        "the log reached {most_blocks} blocks, limit {block_limit}"
    );
    let (_, _, most_memory, tunables) = run_flushing_workload(Binding::Memory);
    let one_txg = 112 * super::unflushed::UNFLUSHED_SEGMENT_BYTES;
    assert!(
        most_memory <= tunables.unflushed_max_mem_amt + one_txg,
        "{most_memory} bytes unflushed, limit {}",
        tunables.unflushed_max_mem_amt
    );
}

/// Frees scattered over every metaslab, as on a fragmented pool: with the log a txg writes a
/// handful of blocks, without it one or more per metaslab. Both ways rewrite the header of
/// every changed metaslab's map each txg (its histogram; OpenZFS does the same), which an
/// earlier version of this test left out: counted with the headers, the log saves less than
/// the data blocks alone suggest.
#[test]
fn the_log_writes_far_fewer_space_map_blocks() {
    let mut writes = Vec::new();
    let mut headers = Vec::new();
    for log in [false, true] {
        let storage = MemoryStorage::default();
        let tunables = Tunables::tiny();
        let vdevs = [(0, 64 * MEBIBYTE)];
        let manager = manager_with_log(&storage, &vdevs, &tunables, log);
        let mut live = Vec::new();
        while let Ok(block) = manager.allocate_at(64 << 10, Txg(4), &[], &storage) {
            live.push(block);
        }
        sync_txg(&manager, &storage, Txg(4));
        let _ = manager.take_txg_stats();
        let mut total = 0;
        let mut header_total = 0;
        assert_eq!(live.len(), 1024);
        for txg in 5..45u64 {
            // One 4 KiB free in each of the 64 metaslabs, never the same piece twice.
            let step = txg as usize - 5;
            for metaslab in 0..64 {
                let (vdev, offset) = live[metaslab * 16 + step / 16];
                let piece = (step % 16) as u64;
                manager
                    .free(vdev, offset + (piece << 12), 4096, Txg(txg))
                    .unwrap();
            }
            sync_txg(&manager, &storage, Txg(txg));
            let stats = manager.take_txg_stats();
            total += stats.spacemap_writes;
            header_total += stats.spacemap_headers;
        }
        writes.push(total);
        headers.push(header_total);
    }
    assert!(
        writes[1] * 4 < writes[0],
        "without the log {} blocks, with it {}",
        writes[0],
        writes[1]
    );
    // Each txg's changed metaslabs rewrite their headers either way (2,208 and 2,258 here,
    // against 2,208 and 215 data blocks).
    assert!(
        headers[0] > 30 * 64 && headers[1] >= headers[0],
        "headers: without the log {}, with it {}",
        headers[0],
        headers[1]
    );
    // Blocks and headers together: the log still saves, but about 1.8 times, not tenfold.
    assert!(
        (writes[1] + headers[1]) * 3 < (writes[0] + headers[0]) * 2,
        "without the log {} blocks and {} headers, with it {} and {}",
        writes[0],
        headers[0],
        writes[1],
        headers[1]
    );
}

/// `check`'s view of the log comes from the disk: a log entry changed on disk (here: a FREE
/// run turned into an ALLOC) no longer replays to what memory holds, and is reported.
#[test]
fn check_replays_the_logs_from_disk() {
    let storage = MemoryStorage::default();
    let tunables = Tunables::tiny();
    let vdevs = [(0, 2 * MEBIBYTE)];
    let manager = manager_with_log(&storage, &vdevs, &tunables, true);
    let mut blocks = Vec::new();
    for _ in 0..16 {
        blocks.push(manager.allocate_at(4096, Txg(4), &[], &storage).unwrap());
    }
    sync_txg(&manager, &storage, Txg(4));
    for &(vdev, offset) in &blocks[..4] {
        manager.free(vdev, offset, 4096, Txg(5)).unwrap();
    }
    sync_txg(&manager, &storage, Txg(5));
    manager.verify_log_on_disk(&storage).unwrap();
    let log = manager.log_stats().unwrap();
    let newest = log.logs.last().unwrap();
    assert_eq!(newest.txg, 5);
    // Flip the action bit (63 of the second word) of the log's last two-word entry.
    let object = ObjectId(newest.object);
    let offset = newest.length_bytes - 8;
    let mut word = [0u8; 8];
    storage.read(object, offset, &mut word).unwrap();
    let flipped = u64::from_le_bytes(word) ^ (1 << 63);
    storage.poke(object, offset as usize, &flipped.to_le_bytes());
    assert!(matches!(
        manager.verify_log_on_disk(&storage),
        Err(SpaceError::Corrupt { .. })
    ));
}

#[test]
fn a_log_entry_for_a_missing_vdev_is_corruption() {
    let storage = MemoryStorage::default();
    let tunables = Tunables::tiny();
    let vdevs = [(0, 2 * MEBIBYTE), (1, 2 * MEBIBYTE)];
    let manager = manager_with_log(&storage, &vdevs, &tunables, true);
    for _ in 0..64 {
        manager.allocate_at(4096, Txg(4), &[], &storage).unwrap();
    }
    sync_txg(&manager, &storage, Txg(4));
    let result = reopen_with_log(&manager, &storage, &vdevs[..1], &tunables, Txg(4));
    assert!(
        matches!(result, Err(SpaceError::Corrupt { .. })),
        "{:?}",
        result.err()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Random allocations and frees over many txgs, reopened (log replay) at random points:
    /// the reopened manager sees the same allocated space per metaslab, the same on-disk
    /// allocation set and the same deferred frees as the running one, and neither reallocates
    /// a recent free.
    #[test]
    fn random_operations_survive_replay(
        operations in proptest::collection::vec((0u8..3, 1u64..16, any::<u16>()), 1..400),
        reopen_every in 3u64..20,
    ) {
        let storage = MemoryStorage::default();
        let tunables = Tunables::tiny();
        let vdevs = [(0, 4 * MEBIBYTE), (1, 4 * MEBIBYTE)];
        let mut manager = manager_with_log(&storage, &vdevs, &tunables, true);
        let mut live: Vec<(VdevId, u64, u64)> = Vec::new();
        let mut txg = 4u64;
        for (step, (kind, sectors, pick)) in operations.into_iter().enumerate() {
            match kind {
                0 | 1 => {
                    let size = sectors << 9;
                    if let Ok((vdev, offset)) = manager.allocate_at(size, Txg(txg), &[], &storage) {
                        live.push((vdev, offset, size));
                    }
                }
                _ if !live.is_empty() => {
                    let (vdev, offset, size) = live.swap_remove(pick as usize % live.len());
                    manager.free(vdev, offset, size, Txg(txg)).unwrap();
                }
                _ => {}
            }
            if step % 7 == 6 {
                sync_txg(&manager, &storage, Txg(txg));
                if txg.is_multiple_of(reopen_every) {
                    let reopened = reopen_with_log(&manager, &storage, &vdevs, &tunables, Txg(txg)).unwrap();
                    prop_assert_eq!(
                        reopened.allocated_from_space_maps(&storage).unwrap(),
                        manager.allocated_from_space_maps(&storage).unwrap()
                    );
                    prop_assert_eq!(allocated_per_metaslab(&reopened), allocated_per_metaslab(&manager));
                    manager.set_last_synced_txg(Txg(txg));
                    prop_assert_eq!(deferred_ranges(&reopened, &storage), deferred_ranges(&manager, &storage));
                    manager = reopened;
                }
                txg += 1;
            }
        }
        let live_bytes: u64 = live.iter().map(|&(_, _, size)| size).sum();
        prop_assert_eq!(manager.totals().allocated, live_bytes);
    }
}
