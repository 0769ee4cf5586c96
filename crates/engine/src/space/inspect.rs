//! Snapshots of the space layer for listings, inspection and `tarn check`: every metaslab's
//! figures ([`VdevSpaceStats`], `tarn pool list` and `tarn debug metaslabs`) and what the
//! on-disk maps and the log space map say is allocated. Each takes the group locks one group
//! at a time and writes nothing.

use super::range_tree::RangeTree;
use super::space_map::{self, SpaceMap};
use super::storage::SpaceStorage;
use super::{SpaceError, SpaceManager};
use crate::types::{ObjectId, VdevId};
use std::collections::BTreeMap;

/// Per-metaslab row of [`VdevSpaceStats`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaslabStats {
    pub id: u64,
    pub start: u64,
    pub size: u64,
    pub space_map_object: ObjectId,
    pub space_map_length_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    pub deferred_bytes: u64,
    pub fragmentation_percent: Option<u64>,
    pub loaded: bool,
    pub histogram: [u64; space_map::SPACE_MAP_HISTOGRAM_SIZE],
    /// Largest free segment, when loaded.
    pub largest_free_segment: Option<u64>,
    /// The loaded free tree's exact histogram (64 absolute power-of-two buckets), when loaded.
    pub tree_histogram: Option<Vec<u64>>,
    /// Times the map was condensed since import.
    pub condensed: u64,
    /// Last txg the allocator chose this metaslab (0: not since import).
    pub selected_txg: u64,
    /// Txg since which the log space map may hold changes not in the map (0: none ever).
    pub unflushed_txg: u64,
    /// Bytes allocated and freed since the last flush (log space map only).
    pub unflushed_allocated_bytes: u64,
    pub unflushed_freed_bytes: u64,
}

/// Space of one top-level vdev, for `tarn pool list` and `tarn debug metaslabs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VdevSpaceStats {
    pub vdev: VdevId,
    /// `Log` for a separate log vdev (not part of the pool's size).
    pub class: super::AllocClass,
    /// Bytes covered by metaslabs (`ms_count << ms_shift`).
    pub size: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    pub deferred_bytes: u64,
    /// Metaslab fragmentation averaged by free space; `None` when nothing is free.
    pub fragmentation_percent: Option<u64>,
    pub ms_shift: u32,
    pub ashift: u32,
    pub metaslabs: Vec<MetaslabStats>,
}

impl SpaceManager {
    /// A snapshot of every vdev's space.
    pub fn stats(&self) -> Vec<VdevSpaceStats> {
        let groups = self.groups.read();
        groups
            .iter()
            .map(|group| {
                let group = group.lock();
                let metaslabs: Vec<MetaslabStats> = group
                    .metaslabs
                    .iter()
                    .map(|metaslab| MetaslabStats {
                        id: metaslab.id,
                        start: metaslab.start,
                        size: metaslab.size,
                        space_map_object: metaslab.space_map_object(),
                        space_map_length_bytes: metaslab
                            .space_map()
                            .map_or(0, SpaceMap::length_bytes),
                        allocated_bytes: metaslab.allocated_bytes(),
                        free_bytes: metaslab.free_bytes(),
                        deferred_bytes: metaslab.deferred_bytes(),
                        fragmentation_percent: Some(metaslab.fragmentation()),
                        loaded: metaslab.is_loaded(),
                        histogram: metaslab.histogram(),
                        largest_free_segment: metaslab.largest_free_segment(),
                        tree_histogram: metaslab.tree_histogram().map(<[u64]>::to_vec),
                        condensed: metaslab.condense_count,
                        selected_txg: metaslab.selected_txg,
                        unflushed_txg: metaslab.unflushed.txg,
                        unflushed_allocated_bytes: metaslab.unflushed.allocs.space(),
                        unflushed_freed_bytes: metaslab.unflushed.frees.space(),
                    })
                    .collect();
                let free_bytes: u64 = metaslabs.iter().map(|row| row.free_bytes).sum();
                let weighted: u128 = metaslabs
                    .iter()
                    .map(|row| {
                        row.free_bytes as u128 * row.fragmentation_percent.unwrap_or(0) as u128
                    })
                    .sum();
                VdevSpaceStats {
                    vdev: group.vdev,
                    class: group.class,
                    size: group.covered_size(),
                    allocated_bytes: metaslabs.iter().map(|row| row.allocated_bytes).sum(),
                    free_bytes,
                    deferred_bytes: metaslabs.iter().map(|row| row.deferred_bytes).sum(),
                    fragmentation_percent: (free_bytes > 0)
                        .then(|| (weighted / free_bytes as u128) as u64),
                    ms_shift: group.ms_shift,
                    ashift: group.ashift,
                    metaslabs,
                }
            })
            .collect()
    }

    /// What the on-disk space maps, with the log space map's unflushed changes applied, say is
    /// allocated, per vdev (for `tarn check`). The unflushed changes in memory are first held
    /// to a fresh replay of the logs on disk ([`SpaceManager::verify_log_on_disk`]), so between
    /// syncs this is what an import would see.
    pub fn allocated_from_space_maps(
        &self,
        storage: &dyn SpaceStorage,
    ) -> Result<BTreeMap<VdevId, RangeTree>, SpaceError> {
        // The unflushed changes applied below are memory's: first hold them to the logs on disk.
        self.verify_log_on_disk(storage)?;
        let groups = self.groups.read();
        let mut result = BTreeMap::new();
        for group in groups.iter() {
            let group = group.lock();
            let mut allocated = RangeTree::new();
            for metaslab in &group.metaslabs {
                let mut free = match metaslab.space_map() {
                    Some(map) => map.load_free_tree(storage, map.length_bytes())?,
                    None if metaslab.unflushed.is_empty() => continue,
                    // Never flushed: all free in the map, the log has the rest.
                    None => RangeTree::with_range(metaslab.start, metaslab.size),
                };
                metaslab.apply_unflushed(&mut free)?;
                let mut cursor = metaslab.start;
                for segment in free.iter() {
                    if segment.start > cursor {
                        allocated.add(cursor, segment.start - cursor);
                    }
                    cursor = segment.end;
                }
                if cursor < metaslab.start + metaslab.size {
                    allocated.add(cursor, metaslab.start + metaslab.size - cursor);
                }
            }
            result.insert(group.vdev, allocated);
        }
        Ok(result)
    }
}
