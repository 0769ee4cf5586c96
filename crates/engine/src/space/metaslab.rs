//! Metaslabs: one fixed region of a top-level vdev, its space map and its in-memory trees.
//!
//! Every byte of a metaslab is in exactly one of these states (while loaded):
//!
//! | state                         | where                     |
//! |-------------------------------|---------------------------|
//! | free and allocatable          | `allocatable`             |
//! | allocated (synced or pending) | counted in `allocated_bytes`; unsynced ones also in `allocating[txg & 3]` |
//! | freed in the syncing txg, not yet written | `freeing`     |
//! | freed and written this txg    | `freed`                   |
//! | freed in one of the last two synced txgs | `defer[txg % 2]` |
//!
//! so `allocated + allocatable + freeing + freed + defer[0] + defer[1] = size` always (checked by
//! [`Metaslab::check_accounting`]). While unloaded, `allocatable` is absent and free space is
//! `size − allocated − deferred`.
//!
//! Flow of an allocation: `allocatable` → `allocating[t]` → ALLOC entries at sync. Flow of a
//! free: `freeing` → FREE entries at sync → `freed` → `defer[t % 2]` at `sync_done(t)` →
//! `allocatable` at `sync_done(t + 2)`, so space freed in txg T is never reallocated before
//! T + 2 (DESIGN §3 invariant 3); sync-context allocations see it from txg T + 3.

use super::range_tree::{RangeTree, SIZE_INDEX_MIN_SHIFT};
use super::space_map::{
    apply_entry, estimate_optimal_size, histogram_add_into, SpaceMap, SpaceMapAction,
    SpaceMapEntry, SPACE_MAP_HISTOGRAM_SIZE,
};
use super::storage::SpaceStorage;
use super::unflushed::Unflushed;
use super::SpaceError;
use crate::tunables::Tunables;
use crate::types::{ObjectId, Txg, TXG_DEFER_SIZE, TXG_SIZE};
use std::collections::BTreeMap;

/// Fragmentation percent per free-segment size bucket (512 B, 1 K, … , ≥ 512 M), the 2025
/// OpenZFS table (reference §3.6).
pub const FRAGMENTATION_TABLE: [u64; 21] = [
    100, 99, 97, 93, 88, 83, 77, 71, 64, 57, 50, 43, 36, 29, 23, 17, 12, 7, 3, 1, 0,
];

/// Segments first fit examines at least, whatever `metaslab_df_max_search` says.
pub const METASLAB_MIN_SEARCH_COUNT: u64 = 100;
/// Condense only maps longer than this many blocks (`zfs_metaslab_condense_block_threshold`).
pub const CONDENSE_BLOCK_THRESHOLD: u64 = 4;

/// Bit position of the segment-class index in a weight; the count sits below it.
const WEIGHT_INDEX_SHIFT: u32 = 54;
const WEIGHT_COUNT_MAX: u64 = (1 << WEIGHT_INDEX_SHIFT) - 1;

fn empty_trees<const N: usize>(start: u64, size: u64, ashift: u32) -> [RangeTree; N] {
    std::array::from_fn(|_| RangeTree::for_region(start, size, ashift))
}

/// One metaslab. Not synchronised: the space manager holds it under its group's lock.
#[derive(Debug)]
pub struct Metaslab {
    pub id: u64,
    pub start: u64,
    pub size: u64,
    pub ashift: u32,
    block_size: u32,
    space_map: Option<SpaceMap>,
    allocatable: Option<RangeTree>,
    allocating: [RangeTree; TXG_SIZE],
    freeing: RangeTree,
    freed: RangeTree,
    pub(super) defer: [RangeTree; TXG_DEFER_SIZE],
    /// Bytes allocated and not freed, including unsynced allocations.
    allocated_bytes: u64,
    /// First-fit cursor per power-of-two alignment class.
    cursors: [u64; 64],
    /// The map object was created by the last sync and its id is not yet in the metaslab array.
    pub(crate) map_created: bool,
    /// Last txg in which the allocator chose this metaslab (for idle and LRU unloading).
    pub(crate) selected_txg: u64,
    /// Times the map was condensed since the metaslab was opened.
    pub(crate) condense_count: u64,
    /// Largest free segment when the metaslab was last unloaded (OpenZFS `ms_max_size`). While
    /// unloaded nothing is allocated and frees only add space, so the real largest segment is
    /// at least this. The map header's histogram alone would understate it: it counts freed
    /// ranges as they were freed, not merged with their free neighbours.
    max_size_unloaded: u64,
    /// Changes logged in the log space map and not yet in `space_map` (space/log.rs).
    pub(crate) unflushed: Unflushed,
    /// The class of the vdev this metaslab belongs to: which pool-wide counters it feeds.
    pub(crate) class: super::AllocClass,
}

impl Metaslab {
    /// A metaslab with no space map yet (all free).
    pub fn new(id: u64, start: u64, size: u64, ashift: u32, block_size: u32) -> Metaslab {
        Metaslab {
            id,
            start,
            size,
            ashift,
            block_size,
            space_map: None,
            allocatable: None,
            allocating: empty_trees(start, size, ashift),
            freeing: RangeTree::for_region(start, size, ashift),
            freed: RangeTree::for_region(start, size, ashift),
            defer: empty_trees(start, size, ashift),
            allocated_bytes: 0,
            cursors: [start; 64],
            map_created: false,
            selected_txg: 0,
            condense_count: 0,
            max_size_unloaded: 0,
            unflushed: Unflushed::new(start, size, ashift),
            class: super::AllocClass::Normal,
        }
    }

    /// A metaslab whose map is `object`: reads the header only; trees load on demand.
    pub fn open(
        storage: &dyn SpaceStorage,
        id: u64,
        start: u64,
        size: u64,
        ashift: u32,
        block_size: u32,
        object: ObjectId,
    ) -> Result<Metaslab, SpaceError> {
        let mut metaslab = Metaslab::new(id, start, size, ashift, block_size);
        let map = SpaceMap::open(storage, object, start, size, ashift, block_size)?;
        metaslab.allocated_bytes = map.allocated_bytes() as u64;
        metaslab.space_map = Some(map);
        Ok(metaslab)
    }

    /// An empty tree over this metaslab (narrow segments).
    fn empty_tree(&self) -> RangeTree {
        RangeTree::for_region(self.start, self.size, self.ashift)
    }

    /// The map object, or `ObjectId(0)` if none exists yet.
    pub fn space_map_object(&self) -> ObjectId {
        self.space_map
            .as_ref()
            .map_or(ObjectId(0), |map| map.object)
    }

    pub fn space_map(&self) -> Option<&SpaceMap> {
        self.space_map.as_ref()
    }

    pub fn is_loaded(&self) -> bool {
        self.allocatable.is_some()
    }

    /// Whether a loaded metaslab could allocate any of `[offset, offset + size)` now (free,
    /// not freeing and not deferred); false when not loaded.
    pub fn allocatable_intersects(&self, offset: u64, size: u64) -> bool {
        self.allocatable
            .as_ref()
            .is_some_and(|tree| tree.intersects(offset, size))
    }

    pub fn allocated_bytes(&self) -> u64 {
        self.allocated_bytes
    }

    /// Freed bytes not yet allocatable: freeing, freed and both defer trees.
    pub fn deferred_bytes(&self) -> u64 {
        self.freeing.space()
            + self.freed.space()
            + self.defer.iter().map(RangeTree::space).sum::<u64>()
    }

    pub fn free_bytes(&self) -> u64 {
        self.size - self.allocated_bytes - self.deferred_bytes()
    }

    /// The free-space tree (only while loaded).
    pub fn allocatable(&self) -> Option<&RangeTree> {
        self.allocatable.as_ref()
    }

    /// The on-disk histogram (empty when there is no map yet).
    pub fn histogram(&self) -> [u64; SPACE_MAP_HISTOGRAM_SIZE] {
        self.space_map
            .as_ref()
            .map_or([0; SPACE_MAP_HISTOGRAM_SIZE], |map| map.header.histogram)
    }

    /// Assert that every byte is accounted for exactly once.
    pub fn check_accounting(&self) {
        let deferred = self.deferred_bytes();
        assert!(
            self.allocated_bytes + deferred <= self.size,
            "metaslab {}: allocated {} + deferred {deferred} > size {}",
            self.id,
            self.allocated_bytes,
            self.size
        );
        if let Some(allocatable) = &self.allocatable {
            assert_eq!(
                self.allocated_bytes + allocatable.space() + deferred,
                self.size,
                "metaslab {}: allocated + free + deferred != size",
                self.id
            );
        }
    }

    fn corrupt(&self, what: String) -> SpaceError {
        SpaceError::corrupt(what, format!("metaslab {} at {:#x}", self.id, self.start))
    }

    /// Load `allocatable` by replaying the map. FREE runs recorded in the last two synced txgs
    /// (`last_synced` and the one before), or in the syncing txg after it, go to the defer trees
    /// (or `freed`) instead, so that after an import space freed in txg T is still not reused
    /// before T + 2. Frees already in those trees (a load while running) are not added twice.
    pub fn load(&mut self, storage: &dyn SpaceStorage, last_synced: Txg) -> Result<(), SpaceError> {
        if self.is_loaded() {
            return Ok(());
        }
        let mut free = RangeTree::for_region(self.start, self.size, self.ashift)
            .with_size_index(1 << SIZE_INDEX_MIN_SHIFT);
        free.add(self.start, self.size);
        let recent_threshold = last_synced
            .0
            .saturating_sub(TXG_DEFER_SIZE as u64 - 1)
            .max(1);
        let mut recent: BTreeMap<u64, RangeTree> = BTreeMap::new();
        if let Some(map) = &self.space_map {
            let object = map.object;
            map.replay(storage, map.length_bytes(), |entry| {
                apply_entry(&mut free, &entry, object)?;
                match entry.action {
                    SpaceMapAction::Free if entry.txg.0 >= recent_threshold => {
                        // Already checked against `free`, so it cannot overlap another recent tree.
                        recent
                            .entry(entry.txg.0)
                            .or_default()
                            .add(entry.start, entry.size);
                    }
                    SpaceMapAction::Free => {}
                    SpaceMapAction::Alloc => {
                        for tree in recent.values_mut() {
                            tree.remove_overlap(entry.start, entry.size);
                        }
                    }
                }
                Ok(())
            })?;
        }
        // Then the changes of the log space map not yet flushed to the map; space they
        // allocate is no longer a recent free.
        self.apply_unflushed(&mut free)?;
        for segment in self.unflushed.allocs.iter() {
            for tree in recent.values_mut() {
                tree.remove_overlap(segment.start, segment.size());
            }
        }
        for (txg, tree) in recent {
            let target = if txg > last_synced.0 {
                &mut self.freed
            } else {
                &mut self.defer[(txg % TXG_DEFER_SIZE as u64) as usize]
            };
            for segment in tree.iter() {
                target.add_missing(segment.start, segment.size());
            }
        }
        let pending = self
            .allocating
            .iter()
            .chain([&self.freed])
            .chain(self.defer.iter());
        for tree in pending {
            for segment in tree.iter() {
                if free.try_remove(segment.start, segment.size()).is_err() {
                    return Err(self.corrupt(format!(
                        "space map does not show [{:#x}, {:#x}) free, but it is pending",
                        segment.start, segment.end
                    )));
                }
            }
        }
        let deferred = self.deferred_bytes();
        if self
            .allocated_bytes
            .checked_add(free.space())
            .and_then(|sum| sum.checked_add(deferred))
            != Some(self.size)
        {
            return Err(self.corrupt(format!(
                "space map header says {} bytes allocated but its entries leave {} free and {deferred} deferred of {}",
                self.allocated_bytes,
                free.space(),
                self.size
            )));
        }
        self.allocatable = Some(free);
        self.check_accounting();
        Ok(())
    }

    /// Drop the in-memory free tree (it is rebuilt by the next load). Refused (false) while
    /// allocations of an unsynced txg are pending.
    pub fn unload(&mut self) -> bool {
        if self.allocating.iter().all(RangeTree::is_empty) {
            self.max_size_unloaded = self.largest_free_segment().unwrap_or(0);
            self.allocatable = None;
            true
        } else {
            false
        }
    }

    /// Bytes the loaded free tree takes (0 when unloaded): what loading costs and unloading
    /// gives back.
    pub fn memory_bytes(&self) -> u64 {
        self.allocatable
            .as_ref()
            .map_or(0, |tree| tree.memory_bytes() as u64)
    }

    /// The largest free segment, when loaded.
    pub fn largest_free_segment(&self) -> Option<u64> {
        self.allocatable
            .as_ref()
            .and_then(RangeTree::largest_segment)
            .map(|segment| segment.size())
    }

    /// The loaded free tree's exact histogram (64 absolute power-of-two buckets).
    pub fn tree_histogram(&self) -> Option<&[u64]> {
        self.allocatable.as_ref().map(RangeTree::histogram)
    }

    /// Largest power-of-two size class with free segments, from the tree if loaded, otherwise
    /// from the map header; `None` when nothing is known to be free.
    fn weight_class(&self) -> Option<(u32, u64)> {
        if let Some(allocatable) = &self.allocatable {
            let histogram = allocatable.histogram();
            return (0..histogram.len())
                .rev()
                .find(|&bucket| histogram[bucket] > 0)
                .map(|bucket| (bucket as u32, histogram[bucket]));
        }
        let from_map = match &self.space_map {
            None => Some((63 - self.size.leading_zeros(), 1)),
            Some(map) => {
                let histogram = &map.header.histogram;
                (0..histogram.len())
                    .rev()
                    .find(|&bucket| histogram[bucket] > 0)
                    .map(|bucket| (bucket as u32 + map.header.shift, histogram[bucket]))
            }
        };
        let cached =
            (self.max_size_unloaded > 0).then(|| (63 - self.max_size_unloaded.leading_zeros(), 1));
        match (from_map, cached) {
            (Some(map), Some(cached)) if cached.0 > map.0 => Some(cached),
            (None, cached) => cached,
            (from_map, _) => from_map,
        }
    }

    /// Segment-based weight: the largest free-segment class first, then how many segments are
    /// in it. Zero means nothing free.
    pub fn weight(&self) -> u64 {
        match self.weight_class() {
            None => 0,
            Some((index, count)) => {
                ((index as u64) << WEIGHT_INDEX_SHIFT) | count.min(WEIGHT_COUNT_MAX)
            }
        }
    }

    /// Might an allocation of `size` bytes succeed here?
    pub fn should_allocate(&self, size: u64) -> bool {
        if let Some(allocatable) = &self.allocatable {
            return allocatable
                .largest_segment()
                .is_some_and(|segment| segment.size() >= size);
        }
        if self.max_size_unloaded >= size {
            return true;
        }
        match self.weight_class() {
            None => false,
            Some((index, _)) => index >= 63 || size < 1u64 << (index + 1),
        }
    }

    /// Dynamic-fit allocation of `size` bytes in syncing txg `txg`; `None` if nothing fits.
    /// The metaslab must be loaded.
    pub fn allocate(&mut self, size: u64, txg: Txg, tunables: &Tunables) -> Option<u64> {
        self.allocate_counted(size, txg, tunables).0
    }

    /// As [`Metaslab::allocate`], also returning how many free segments were examined (the
    /// first-fit walk, plus one for a best-fit lookup).
    pub fn allocate_counted(
        &mut self,
        size: u64,
        txg: Txg,
        tunables: &Tunables,
    ) -> (Option<u64>, u64) {
        assert!(
            size > 0 && size.is_multiple_of(1 << self.ashift),
            "allocation of {size} bytes is not a multiple of the sector size"
        );
        let allocatable = self
            .allocatable
            .as_mut()
            .expect("allocate from an unloaded metaslab");
        let largest = allocatable
            .largest_segment()
            .map_or(0, |segment| segment.size());
        if largest < size {
            return (None, 1);
        }
        let mut examined = 0u64;
        let alignment = size & size.wrapping_neg();
        let cursor_index = 63 - alignment.leading_zeros() as usize;
        let free_percent = allocatable.space() * 100 / self.size;
        let mut found = None;
        if largest >= tunables.metaslab_df_alloc_threshold
            && free_percent >= tunables.metaslab_df_free_pct
        {
            // First fit from the cursor, bounded in bytes and segments.
            let cursor = self.cursors[cursor_index];
            let mut first_start = None;
            for (searched, segment) in allocatable.iter_from(cursor).enumerate() {
                examined += 1;
                let first = *first_start.get_or_insert(segment.start);
                if segment.start - first > tunables.metaslab_df_max_search
                    && searched as u64 >= METASLAB_MIN_SEARCH_COUNT
                {
                    break;
                }
                if segment.size() >= size {
                    found = Some(segment.start);
                    break;
                }
            }
        }
        let offset = match found {
            Some(offset) => offset,
            None => {
                examined += 1;
                match allocatable.best_fit(size) {
                    Some(segment) => segment.start,
                    None => return (None, examined),
                }
            }
        };
        self.cursors[cursor_index] = offset + size;
        allocatable.remove(offset, size);
        self.allocating[txg.slot()].add(offset, size);
        self.allocated_bytes += size;
        debug_assert!({
            self.check_accounting();
            true
        });
        (Some(offset), examined)
    }

    /// Free `[offset, offset + size)` in syncing txg `txg`. The range comes from a block pointer
    /// on disk, so anything inconsistent is reported as corruption.
    pub fn free(&mut self, offset: u64, size: u64, txg: Txg) -> Result<(), SpaceError> {
        assert!(offset >= self.start && offset + size <= self.start + self.size);
        if size > self.allocated_bytes {
            return Err(self.corrupt(format!(
                "free of {size} bytes at {offset:#x} but only {} allocated",
                self.allocated_bytes
            )));
        }
        let already_free = self
            .allocatable
            .as_ref()
            .is_some_and(|tree| tree.intersects(offset, size))
            || self.freed.intersects(offset, size)
            || self.defer.iter().any(|tree| tree.intersects(offset, size));
        let pending_elsewhere = self
            .allocating
            .iter()
            .enumerate()
            .any(|(slot, tree)| slot != txg.slot() && tree.intersects(offset, size));
        if already_free || pending_elsewhere || self.freeing.try_add(offset, size).is_err() {
            return Err(self.corrupt(format!(
                "double free of [{offset:#x}, {:#x}) in txg {txg}",
                offset + size
            )));
        }
        self.allocated_bytes -= size;
        self.check_accounting();
        Ok(())
    }

    /// Claim `[offset, offset + size)` in txg `txg`: an intent-log block written after the
    /// last synced txg, which the allocator must not hand out again (OpenZFS
    /// metaslab_claim). The metaslab must be loaded; `Ok(false)` if the range is not free
    /// (then it is not claimed: the block is not what the log says).
    pub fn claim(&mut self, offset: u64, size: u64, txg: Txg) -> Result<bool, SpaceError> {
        let allocatable = self
            .allocatable
            .as_mut()
            .expect("claim in an unloaded metaslab");
        if !allocatable.contains(offset, size) {
            return Ok(false);
        }
        allocatable.remove(offset, size);
        self.allocating[txg.slot()].add(offset, size);
        self.allocated_bytes += size;
        self.check_accounting();
        Ok(true)
    }

    /// Undo an allocation made in txg `txg` that has not been synced: straight back to
    /// `allocatable`, no deferral (nothing on disk ever pointed at it).
    pub fn unalloc(&mut self, offset: u64, size: u64, txg: Txg) -> Result<(), SpaceError> {
        if self.allocating[txg.slot()]
            .try_remove(offset, size)
            .is_err()
        {
            return Err(self.corrupt(format!(
                "unalloc of [{offset:#x}, {:#x}) not allocated in txg {txg}",
                offset + size
            )));
        }
        let allocatable = self
            .allocatable
            .as_mut()
            .expect("pending allocations keep a metaslab loaded");
        allocatable.add(offset, size);
        self.allocated_bytes -= size;
        self.check_accounting();
        Ok(())
    }

    /// Anything allocated or freed in `txg` not yet written?
    pub fn is_dirty(&self, txg: Txg) -> bool {
        !self.allocating[txg.slot()].is_empty() || !self.freeing.is_empty()
    }

    /// Should pass 1 rewrite the map from the in-memory trees (reference §1.5)?
    pub fn should_condense(&self, tunables: &Tunables) -> bool {
        let (Some(map), Some(allocatable)) = (&self.space_map, &self.allocatable) else {
            return false;
        };
        if map.length_bytes() == 0 {
            return false;
        }
        if allocatable.segment_count() == 0 {
            return true;
        }
        let optimal = estimate_optimal_size(allocatable.histogram(), self.ashift, self.block_size);
        let threshold = CONDENSE_BLOCK_THRESHOLD * (self.block_size as u64).max(1 << self.ashift);
        map.length_bytes() as u128 >= optimal as u128 * tunables.metaslab_condense_pct as u128 / 100
            && map.length_bytes() > threshold
    }

    /// Rewrite the map as: ALLOC everything, FREE the allocatable space and the space of
    /// unsynced allocations (stamped three txgs back: all of it was free before the deferral
    /// window), then FREE each defer tree stamped with the txg that freed it, so that a later
    /// load still defers it.
    fn condense(
        &mut self,
        storage: &dyn SpaceStorage,
        txg: Txg,
        sync_pass: u32,
    ) -> Result<(), SpaceError> {
        let map = self.space_map.as_mut().expect("condense needs a map");
        let allocatable = self
            .allocatable
            .as_ref()
            .expect("condense needs a loaded metaslab");
        let mut unsynced = RangeTree::for_region(self.start, self.size, self.ashift);
        for tree in &self.allocating {
            tree.walk(&mut unsynced);
        }
        map.truncate(storage, txg)?;
        map.append(
            storage,
            &RangeTree::with_range(self.start, self.size),
            SpaceMapAction::Alloc,
            txg,
            sync_pass,
        )?;
        let old = Txg(txg.0.saturating_sub(TXG_DEFER_SIZE as u64 + 1).max(1));
        map.append_stamped(
            storage,
            allocatable,
            SpaceMapAction::Free,
            old,
            txg,
            sync_pass,
        )?;
        map.append_stamped(
            storage,
            &unsynced,
            SpaceMapAction::Free,
            old,
            txg,
            sync_pass,
        )?;
        for age in 1..=TXG_DEFER_SIZE as u64 {
            let freed_txg = Txg(txg.0.saturating_sub(age).max(1));
            map.append_stamped(
                storage,
                &self.defer[(freed_txg.0 % TXG_DEFER_SIZE as u64) as usize],
                SpaceMapAction::Free,
                freed_txg,
                txg,
                sync_pass,
            )?;
        }
        self.condense_count += 1;
        Ok(())
    }

    /// Write this txg's allocations and frees to the map (creating it on first use), condensing
    /// first in pass 1 when worthwhile, and update the header. Returns whether anything was
    /// written.
    pub fn sync(
        &mut self,
        storage: &dyn SpaceStorage,
        txg: Txg,
        sync_pass: u32,
        tunables: &Tunables,
    ) -> Result<bool, SpaceError> {
        assert!(sync_pass >= 1);
        if !self.is_dirty(txg) {
            return Ok(false);
        }
        if self.space_map.is_none() {
            self.space_map = Some(SpaceMap::create(
                storage,
                self.start,
                self.size,
                self.ashift,
                self.block_size,
                txg,
            )?);
            self.map_created = true;
        }
        if sync_pass == 1 && self.should_condense(tunables) {
            self.condense(storage, txg, sync_pass)?;
        }
        let slot = txg.slot();
        let map = self.space_map.as_mut().expect("created above");
        map.append(
            storage,
            &self.allocating[slot],
            SpaceMapAction::Alloc,
            txg,
            sync_pass,
        )?;
        map.append(storage, &self.freeing, SpaceMapAction::Free, txg, sync_pass)?;
        if let Some(histogram) = self.fresh_histogram(&self.freeing) {
            self.space_map
                .as_mut()
                .expect("created above")
                .header
                .histogram = histogram;
        }
        self.space_map
            .as_ref()
            .expect("created above")
            .write_header(storage, txg)?;
        self.finish_sync(txg, sync_pass);
        Ok(true)
    }

    /// The map header's histogram after this sync: recomputed from the loaded trees
    /// (allocatable, freed, defer), or the header's own when unloaded, plus `freed_now` (frees
    /// the map records in this sync, which become free space). None without a map.
    fn fresh_histogram(&self, freed_now: &RangeTree) -> Option<[u64; SPACE_MAP_HISTOGRAM_SIZE]> {
        let map = self.space_map.as_ref()?;
        let mut histogram = map.header.histogram;
        if let Some(allocatable) = &self.allocatable {
            histogram = [0; SPACE_MAP_HISTOGRAM_SIZE];
            for tree in [allocatable, &self.freed]
                .into_iter()
                .chain(self.defer.iter())
            {
                histogram_add_into(&mut histogram, tree.histogram(), self.ashift);
            }
        }
        histogram_add_into(&mut histogram, freed_now.histogram(), self.ashift);
        Some(histogram)
    }

    /// The end of a sync of `txg`, however its changes were written: this txg's allocations
    /// are synced and its frees move on to `freed`.
    fn finish_sync(&mut self, txg: Txg, sync_pass: u32) {
        let slot = txg.slot();
        self.allocating[slot].clear();
        if sync_pass == 1 {
            assert!(self.freed.is_empty(), "freed must be empty at pass 1");
            std::mem::swap(&mut self.freed, &mut self.freeing);
        } else {
            let empty = RangeTree::for_region(self.start, self.size, self.ashift);
            let freeing = std::mem::replace(&mut self.freeing, empty);
            freeing.walk(&mut self.freed);
        }
        // The map and the unflushed changes now hold everything except unsynced allocations of
        // other txgs.
        let unsynced: u64 = self.allocating.iter().map(RangeTree::space).sum();
        debug_assert_eq!(
            self.space_map
                .as_ref()
                .map_or(0, |map| map.allocated_bytes() as i128)
                + self.unflushed.allocated_delta()
                + unsynced as i128,
            self.allocated_bytes as i128,
            "metaslab {}: map and memory disagree",
            self.id
        );
        self.check_accounting();
    }

    /// With the log space map: append this txg's allocations and frees to `log` (the pool-wide
    /// log of `txg`, two-word entries carrying `vdev`, through `log_storage`) instead of this
    /// metaslab's map, and record them as unflushed; the map (created through `storage` at the
    /// first sync) only has its header's histogram rewritten. Returns whether anything was
    /// written.
    pub fn sync_to_log(
        &mut self,
        storage: &dyn SpaceStorage,
        log_storage: &dyn SpaceStorage,
        log: &mut SpaceMap,
        vdev: u32,
        txg: Txg,
        sync_pass: u32,
    ) -> Result<bool, SpaceError> {
        if !self.is_dirty(txg) {
            return Ok(false);
        }
        // The map exists from the first sync, as without the log: its header's histogram is
        // what an unloaded metaslab is weighed and its fragmentation measured by.
        if self.space_map.is_none() {
            self.space_map = Some(SpaceMap::create(
                storage,
                self.start,
                self.size,
                self.ashift,
                self.block_size,
                txg,
            )?);
            self.map_created = true;
        }
        let slot = txg.slot();
        log.append_with_vdev(
            log_storage,
            &self.allocating[slot],
            SpaceMapAction::Alloc,
            txg,
            sync_pass,
            Some(vdev),
        )?;
        log.append_with_vdev(
            log_storage,
            &self.freeing,
            SpaceMapAction::Free,
            txg,
            sync_pass,
            Some(vdev),
        )?;
        for (tree, action) in [
            (&self.allocating[slot], SpaceMapAction::Alloc),
            (&self.freeing, SpaceMapAction::Free),
        ] {
            for segment in tree.iter() {
                if let Err(error) = self.unflushed.record(action, segment.start, segment.size()) {
                    return Err(SpaceError::corrupt(
                        format!(
                            "{action:?} of [{:#x}, {:#x}) against the unflushed changes: {error}",
                            segment.start, segment.end
                        ),
                        format!("metaslab {} at {:#x}", self.id, self.start),
                    ));
                }
            }
        }
        if self.unflushed.txg == 0 {
            self.unflushed.txg = txg.0;
            self.unflushed.txg_dirty = true;
        }
        // The header keeps the map's length and allocated bytes; its histogram includes the
        // unflushed changes (as OpenZFS's does), so weights and fragmentation stay current.
        if let Some(histogram) = self.fresh_histogram(&self.freeing) {
            let map = self.space_map.as_mut().expect("created above");
            map.header.histogram = histogram;
            map.write_header(storage, txg)?;
        }
        self.finish_sync(txg, sync_pass);
        Ok(true)
    }

    /// With the log space map, pass 1 of `txg` before its changes are logged: append the
    /// unflushed changes to this metaslab's own map (creating it on first use; condensing
    /// instead when loaded and worthwhile, which writes the whole state), update the header,
    /// and start over with `unflushed_txg = txg`.
    pub fn flush(
        &mut self,
        storage: &dyn SpaceStorage,
        txg: Txg,
        tunables: &Tunables,
    ) -> Result<(), SpaceError> {
        if self.space_map.is_none() {
            self.space_map = Some(SpaceMap::create(
                storage,
                self.start,
                self.size,
                self.ashift,
                self.block_size,
                txg,
            )?);
            self.map_created = true;
        }
        if self.should_condense(tunables) {
            self.condense(storage, txg, 1)?;
        } else {
            let cancelled = self.cancelled_frees(txg);
            // Frees still in a defer tree are stamped with the txg that freed them, the rest
            // as old, so that a later load defers exactly what is still deferred (as
            // condensing stamps them).
            let mut older = self.unflushed.frees.clone();
            let mut by_age = Vec::with_capacity(TXG_DEFER_SIZE);
            for age in 1..=TXG_DEFER_SIZE as u64 {
                let freed_txg = Txg(txg.0.saturating_sub(age).max(1));
                let mut recent = self.empty_tree();
                for deferred in self.defer[(freed_txg.0 % TXG_DEFER_SIZE as u64) as usize].iter() {
                    for segment in older.overlapping(deferred.start, deferred.end) {
                        let start = segment.start.max(deferred.start);
                        recent.add(start, segment.end.min(deferred.end) - start);
                    }
                }
                for segment in recent.iter() {
                    older.remove(segment.start, segment.size());
                }
                by_age.push((freed_txg, recent));
            }
            let old = Txg(txg.0.saturating_sub(TXG_DEFER_SIZE as u64 + 1).max(1));
            let map = self.space_map.as_mut().expect("created above");
            map.append(
                storage,
                &self.unflushed.allocs,
                SpaceMapAction::Alloc,
                txg,
                1,
            )?;
            // A cancelled free is free in the map: ALLOC it, then FREE it with its txg below.
            for (_, tree) in &cancelled {
                map.append(storage, tree, SpaceMapAction::Alloc, txg, 1)?;
            }
            map.append_stamped(storage, &older, SpaceMapAction::Free, old, txg, 1)?;
            for (freed_txg, recent) in by_age.iter().chain(&cancelled) {
                map.append_stamped(storage, recent, SpaceMapAction::Free, *freed_txg, txg, 1)?;
            }
        }
        // The histogram already counts the unflushed frees (each logging sync adds its frees);
        // a loaded metaslab's is recomputed.
        if let Some(histogram) = self.fresh_histogram(&self.empty_tree()) {
            self.space_map
                .as_mut()
                .expect("created above")
                .header
                .histogram = histogram;
        }
        self.space_map
            .as_ref()
            .expect("created above")
            .write_header(storage, txg)?;
        self.unflushed.clear();
        self.unflushed.txg = txg.0;
        self.unflushed.txg_dirty = true;
        Ok(())
    }

    /// The deferred frees that a flush in pass 1 of `txg` must write although no unflushed tree
    /// holds them: space allocated and freed again since the last flush, whose free cancelled
    /// the unflushed allocation ([`Unflushed::record`]). The map shows such space free, and
    /// only the logs of the allocation and the free say that a tree of the last two txgs still
    /// points at it; once the flush moves `unflushed_txg` past those logs, an import would hand
    /// the space out at once (invariant 3). Returned per txg that freed it: the defer trees of
    /// the last two synced txgs, less the unflushed frees, for the txgs at or after
    /// `unflushed_txg` (older frees were written by the flush that set it).
    fn cancelled_frees(&self, txg: Txg) -> Vec<(Txg, RangeTree)> {
        let mut cancelled = Vec::new();
        for freed_txg in self.recent_free_txgs(txg) {
            let mut tree = self.empty_tree();
            for deferred in self.defer[(freed_txg.0 % TXG_DEFER_SIZE as u64) as usize].iter() {
                tree.add(deferred.start, deferred.size());
                for segment in self
                    .unflushed
                    .frees
                    .overlapping(deferred.start, deferred.end)
                {
                    let start = segment.start.max(deferred.start);
                    tree.remove(start, segment.end.min(deferred.end) - start);
                }
            }
            if !tree.is_empty() {
                cancelled.push((freed_txg, tree));
            }
        }
        cancelled
    }

    /// The synced txgs whose frees a flush in pass 1 of `txg` may find in the defer trees
    /// without an older flush having written them: the last two, from `unflushed_txg` on.
    fn recent_free_txgs(&self, txg: Txg) -> impl Iterator<Item = Txg> + '_ {
        (1..=TXG_DEFER_SIZE as u64)
            .map(move |age| txg.0.saturating_sub(age))
            .filter(|&freed_txg| freed_txg != 0 && freed_txg >= self.unflushed.txg)
            .map(Txg)
    }

    /// Must a flush in pass 1 of `txg` write anything? Unflushed changes, or frees that
    /// cancelled an unflushed allocation and are still deferred ([`Metaslab::cancelled_frees`]):
    /// a metaslab with only those is not clean, or the walk would move its `unflushed_txg`
    /// past the logs that record them.
    pub fn needs_flush(&self, txg: Txg) -> bool {
        !self.unflushed.is_empty()
            || self.recent_free_txgs(txg).any(|freed_txg| {
                self.defer[(freed_txg.0 % TXG_DEFER_SIZE as u64) as usize]
                    .iter()
                    .any(|deferred| {
                        !self
                            .unflushed
                            .frees
                            .contains(deferred.start, deferred.size())
                    })
            })
    }

    /// Import: apply one entry of the log of `log_txg` if this metaslab was not flushed after
    /// it. Frees of the last two synced txgs go to the defer trees as well, as a map's do at
    /// load (invariant 3 across import).
    pub fn replay_log_entry(
        &mut self,
        entry: &SpaceMapEntry,
        log_txg: Txg,
        last_synced: Txg,
    ) -> Result<(), SpaceError> {
        if log_txg.0 < self.unflushed.txg {
            return Ok(());
        }
        if let Err(error) = self.unflushed.record(entry.action, entry.start, entry.size) {
            return Err(self.corrupt(format!(
                "log of txg {log_txg}: {:?} of [{:#x}, {:#x}): {error}",
                entry.action,
                entry.start,
                entry.start + entry.size
            )));
        }
        match entry.action {
            SpaceMapAction::Free if log_txg.0 + TXG_DEFER_SIZE as u64 > last_synced.0 => {
                self.defer[(log_txg.0 % TXG_DEFER_SIZE as u64) as usize]
                    .add_missing(entry.start, entry.size);
            }
            SpaceMapAction::Free => {}
            SpaceMapAction::Alloc => {
                for tree in &mut self.defer {
                    tree.remove_overlap(entry.start, entry.size);
                }
            }
        }
        Ok(())
    }

    /// Apply the unflushed changes to `free`, a free tree replayed from this metaslab's map
    /// (`tarn check`). A change that does not fit the map is corruption.
    pub fn apply_unflushed(&self, free: &mut RangeTree) -> Result<(), SpaceError> {
        for (tree, action) in [
            (&self.unflushed.frees, SpaceMapAction::Free),
            (&self.unflushed.allocs, SpaceMapAction::Alloc),
        ] {
            for segment in tree.iter() {
                let result = match action {
                    SpaceMapAction::Free => free.try_add(segment.start, segment.size()),
                    SpaceMapAction::Alloc => free.try_remove(segment.start, segment.size()),
                };
                if let Err(error) = result {
                    return Err(self.corrupt(format!(
                        "unflushed {action:?} of [{:#x}, {:#x}) does not fit the space map: {error}",
                        segment.start, segment.end
                    )));
                }
            }
        }
        Ok(())
    }

    /// Import, after every log is replayed: allocated bytes = map + unflushed changes.
    pub fn finish_log_replay(&mut self) -> Result<(), SpaceError> {
        let map_allocated = self
            .space_map
            .as_ref()
            .map_or(0, |map| map.allocated_bytes() as i128);
        let allocated = map_allocated + self.unflushed.allocated_delta();
        let deferred = self.deferred_bytes() as i128;
        if allocated < 0 || allocated + deferred > self.size as i128 {
            return Err(self.corrupt(format!(
                "space map ({map_allocated} bytes allocated) and log ({} net) leave {allocated} allocated and {deferred} deferred of {}",
                self.unflushed.allocated_delta(),
                self.size
            )));
        }
        self.allocated_bytes = allocated as u64;
        self.check_accounting();
        Ok(())
    }

    /// Pass 1 of txg `txg`, for a metaslab the allocator keeps active but that nothing has
    /// allocated in or freed from yet this txg: copy its map's last block now
    /// ([`SpaceMap::rewrite_tail`]), while frees are still immediate. The MOS blocks that pass 1
    /// writes after the space maps land in active metaslabs; without this, the first append
    /// to such a map (pass 2) copies a block born in an earlier txg, whose free is deferred
    /// onto the deferred-free list, whose block is copied in pass 3, recorded in pass 4.
    /// Returns whether anything was written.
    pub fn prepare_sync(&self, storage: &dyn SpaceStorage, txg: Txg) -> Result<bool, SpaceError> {
        match &self.space_map {
            Some(map) if !self.is_dirty(txg) => map.rewrite_tail(storage, txg),
            _ => Ok(false),
        }
    }

    /// End of txg `txg`: release the frees of `txg − 2` into `allocatable` and defer this txg's.
    pub fn sync_done(&mut self, txg: Txg) {
        assert!(
            self.allocating[txg.slot()].is_empty() && self.freeing.is_empty(),
            "metaslab {}: sync_done before sync",
            self.id
        );
        let slot = (txg.0 % TXG_DEFER_SIZE as u64) as usize;
        let empty = self.empty_tree();
        let released = std::mem::replace(&mut self.defer[slot], empty);
        if let Some(allocatable) = &mut self.allocatable {
            released.walk(allocatable);
        }
        let empty = self.empty_tree();
        self.defer[slot] = std::mem::replace(&mut self.freed, empty);
        self.check_accounting();
    }

    /// Fragmentation percent from the map histogram (reference §3.6); 0 when there is no map or
    /// no free space. See [`fragmentation_from_histogram`].
    pub fn fragmentation(&self) -> u64 {
        let Some(map) = &self.space_map else {
            return 0;
        };
        fragmentation_from_histogram(&map.header.histogram, map.header.shift, self.size)
    }
}

/// Index into [`FRAGMENTATION_TABLE`] of a free segment of `2^class` bytes in a metaslab of
/// `metaslab_size` bytes.
///
/// The table runs from 512 B (100%) to 512 MiB and more (0%). A metaslab of 1 GiB or more can
/// hold such segments and uses the table as it is. A smaller metaslab cannot: an untouched
/// 64 MiB metaslab would read 7% and one with a single small allocation 12%, so a fresh pool of
/// small metaslabs would look fragmented. For those the table is stretched over the classes the
/// metaslab can hold: 512 B still reads 100%, a free segment of at least half the metaslab
/// reads 0%, and the classes between are spread evenly over the table (rounded to the nearest
/// entry). A 16 MiB metaslab thus scores 8 KiB segments 77% (the table says 88%) and 1 MiB
/// segments 12% (43%): small metaslabs are judged against what they can offer.
pub fn fragmentation_index(class: u32, metaslab_size: u64) -> usize {
    let last = FRAGMENTATION_TABLE.len() - 1;
    let relative = class.saturating_sub(9) as usize;
    // Class of a segment of half the metaslab, relative to 512 B.
    let half = (63 - metaslab_size.max(1).leading_zeros()).saturating_sub(10) as usize;
    if half >= last {
        relative.min(last)
    } else {
        (relative * last + half / 2)
            .checked_div(half)
            .map_or(last, |index| index.min(last))
    }
}

/// Fragmentation percent of a metaslab of `metaslab_size` bytes from a space-map histogram
/// (bucket `i` counts free segments of `[2^(i+shift), 2^(i+shift+1))` bytes): each bucket's free
/// space weighted by its table entry ([`fragmentation_index`]). 0 when nothing is free.
pub fn fragmentation_from_histogram(
    histogram: &[u64; SPACE_MAP_HISTOGRAM_SIZE],
    shift: u32,
    metaslab_size: u64,
) -> u64 {
    let mut total: u128 = 0;
    let mut weighted: u128 = 0;
    for (bucket, &count) in histogram.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let class = bucket as u32 + shift;
        let space = (count as u128) << class.min(100);
        total += space;
        weighted += space * FRAGMENTATION_TABLE[fragmentation_index(class, metaslab_size)] as u128;
    }
    weighted
        .checked_div(total)
        .map_or(0, |percent| percent as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::space_map::tests::MemoryStorage;

    fn tiny() -> Tunables {
        Tunables::tiny()
    }

    #[test]
    fn freed_space_is_not_reused_before_two_txgs() {
        let storage = MemoryStorage::default();
        let tunables = tiny();
        let mut metaslab = Metaslab::new(0, 0, 64 << 10, 9, 4096);
        metaslab.load(&storage, Txg(4)).unwrap();
        let size = 32 << 10;
        let first = metaslab.allocate(size, Txg(5), &tunables).unwrap();
        let second = metaslab.allocate(size, Txg(5), &tunables).unwrap();
        assert!(metaslab.allocate(512, Txg(5), &tunables).is_none());
        metaslab.sync(&storage, Txg(5), 1, &tunables).unwrap();
        metaslab.sync_done(Txg(5));
        metaslab.free(first, size, Txg(6)).unwrap();
        metaslab.sync(&storage, Txg(6), 1, &tunables).unwrap();
        metaslab.sync_done(Txg(6));
        assert!(
            metaslab.allocate(512, Txg(7), &tunables).is_none(),
            "reused in T+1"
        );
        assert_eq!(metaslab.deferred_bytes(), size);
        metaslab.sync_done(Txg(7));
        assert!(
            metaslab.allocate(512, Txg(8), &tunables).is_none(),
            "reused in T+2"
        );
        metaslab.sync_done(Txg(8));
        assert_eq!(
            metaslab.allocate(size, Txg(9), &tunables),
            Some(first),
            "released by sync_done(T+2)"
        );
        let _ = second;
    }

    #[test]
    fn double_free_is_corruption() {
        let storage = MemoryStorage::default();
        let tunables = tiny();
        let mut metaslab = Metaslab::new(0, 0, 64 << 10, 9, 4096);
        metaslab.load(&storage, Txg(4)).unwrap();
        let offset = metaslab.allocate(4096, Txg(5), &tunables).unwrap();
        metaslab.sync(&storage, Txg(5), 1, &tunables).unwrap();
        metaslab.sync_done(Txg(5));
        metaslab.free(offset, 4096, Txg(6)).unwrap();
        assert!(matches!(
            metaslab.free(offset, 512, Txg(6)),
            Err(SpaceError::Corrupt { .. })
        ));
        assert!(matches!(
            metaslab.free(8192, 512, Txg(6)),
            Err(SpaceError::Corrupt { .. })
        ));
        metaslab.check_accounting();
    }

    #[test]
    fn fragmentation_follows_table() {
        let storage = MemoryStorage::default();
        let tunables = tiny();
        let mut metaslab = Metaslab::new(0, 0, 1 << 20, 9, 4096);
        metaslab.load(&storage, Txg(4)).unwrap();
        // Allocate everything, then free every other 512-byte sector: all free segments are 512 B.
        let mut offsets = Vec::new();
        while let Some(offset) = metaslab.allocate(512, Txg(5), &tunables) {
            offsets.push(offset);
        }
        metaslab.sync(&storage, Txg(5), 1, &tunables).unwrap();
        metaslab.sync_done(Txg(5));
        for offset in offsets.iter().step_by(2) {
            metaslab.free(*offset, 512, Txg(6)).unwrap();
        }
        metaslab.sync(&storage, Txg(6), 1, &tunables).unwrap();
        assert_eq!(metaslab.fragmentation(), 100);
        assert_eq!(metaslab.histogram()[0], offsets.len() as u64 / 2);
    }

    #[test]
    fn fragmentation_of_untouched_and_small_metaslabs() {
        let mut histogram = [0u64; SPACE_MAP_HISTOGRAM_SIZE];
        // One free segment as large as the metaslab: 0% whatever the metaslab size.
        for ms_shift in [20u32, 24, 26, 29, 30, 34] {
            histogram.fill(0);
            histogram[(ms_shift - 9) as usize] = 1;
            assert_eq!(
                fragmentation_from_histogram(&histogram, 9, 1 << ms_shift),
                0
            );
            // Nearly untouched: the largest segment is in the class below the metaslab's.
            histogram.fill(0);
            histogram[(ms_shift - 10) as usize] = 1;
            assert_eq!(
                fragmentation_from_histogram(&histogram, 9, 1 << ms_shift),
                0
            );
        }
        // Large metaslabs use the table as it is: 128 KiB segments read 64% and 16 MiB 17%.
        histogram.fill(0);
        histogram[17 - 9] = 4;
        assert_eq!(fragmentation_from_histogram(&histogram, 9, 1 << 34), 64);
        histogram.fill(0);
        histogram[24 - 9] = 1;
        assert_eq!(fragmentation_from_histogram(&histogram, 9, 1 << 30), 17);
        // Stretched for a 16 MiB metaslab: 512 B still 100%, 8 KiB 77%, 1 MiB 12%.
        assert_eq!(FRAGMENTATION_TABLE[fragmentation_index(9, 16 << 20)], 100);
        assert_eq!(FRAGMENTATION_TABLE[fragmentation_index(13, 16 << 20)], 77);
        assert_eq!(FRAGMENTATION_TABLE[fragmentation_index(20, 16 << 20)], 12);
        // Monotone in the segment class for every metaslab size.
        for ms_shift in 16u32..40 {
            for class in 9..ms_shift {
                assert!(
                    fragmentation_index(class, 1 << ms_shift)
                        <= fragmentation_index(class + 1, 1 << ms_shift)
                );
            }
        }
    }
}
