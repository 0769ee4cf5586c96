//! The space layer: range trees, space maps, metaslabs and the allocator (OpenZFS metaslab.c,
//! space_map.c, range_tree.c).
//!
//! # Overview
//!
//! Each top-level vdev is cut into metaslabs of `2^ms_shift` bytes ([`metaslab_geometry`]).
//! A metaslab's allocation state lives on disk as a *space map*: an append-only log of ALLOC and
//! FREE runs in a MOS object, whose header (in the object's bonus buffer) keeps the log length,
//! the net allocated bytes and a 32-bucket free-segment histogram. In memory, a loaded metaslab
//! replays its log into a [`RangeTree`] of free segments (`allocatable`); unloaded metaslabs are
//! ranked from their header histogram alone. The [`SpaceManager`] holds the metaslab classes
//! ([`class`]: normal, and log for separate log vdevs): one group per top-level vdev, a rotor
//! across the normal groups, and per group an active metaslab for first copies and one for each
//! extra copy on that vdev (OpenZFS `mg_primaries`/`mg_secondaries`).
//!
//! # On-disk structures
//!
//! - Space-map header and entries: see [`space_map`] (byte diagram there).
//! - Metaslab array: one MOS object per top-level vdev holding a little-endian u64 space-map
//!   object id per metaslab at offset `metaslab_id * 8`; 0 means "no map yet: all free". Maps are
//!   created lazily at a metaslab's first sync; the array itself at the vdev's first sync that
//!   creates a map.
//! - With the log space map (pool feature `com.tarn:log_spacemap`, [`log`]): one pool-wide log
//!   per txg, a per-vdev array of each metaslab's unflushed txg, and a log directory; metaslab
//!   maps then have blocks of `metaslab_sm_blksz_with_log` and are appended only when flushed.
//!
//! # Invariants
//!
//! - Space accounting adds up: for each metaslab, `allocated + allocatable + freeing + freed +
//!   defer[0] + defer[1] = size` (asserted after every operation; see [`metaslab`]).
//! - Space freed in txg T becomes allocatable only at `sync_done(T + 2)`, so it is never
//!   reallocated before T + 2 (DESIGN §3 invariant 3). This survives import: at load, FREE runs whose debug entry carries
//!   one of the last two synced txgs go to the defer trees, not to `allocatable`.
//! - Space maps are appended only in syncing context; after a txg's sync, the map's allocated
//!   bytes plus unsynced allocations equal the metaslab's allocated bytes.
//! - Everything read from disk (headers, entries, block-pointer ranges handed to `free`) is
//!   validated: a bad value is [`SpaceError::Corrupt`] saying what and where, never a panic.
//!   Asserts are for programmer errors (allocating from an unloaded metaslab, sync_done before
//!   sync, unaligned allocation sizes).
//!
//! # Context and locking
//!
//! All [`SpaceManager`] methods take `&self`. The list of groups is behind a read-write lock
//! (written only by `add_vdev`); each group has its own mutex, held for an allocation, a free,
//! a sync or a stats snapshot of that group; the rotor has its own small mutex and is never held
//! while a group lock is taken. Allocation, free, sync and sync_done run in the sync thread;
//! `stats` may come from any thread and sees a consistent snapshot per group.
//!
//! Pool-wide totals for write admission come from [`SpaceManager::counters`]: atomics (size,
//! allocated, deferred) that every operation changing a metaslab's space updates by that
//! metaslab's difference before and after (allocate, metaslab load, free, unalloc, sync,
//! sync_done, add_vdev). Reading them takes no lock at all, so a writer deciding whether its
//! write fits never waits for the sync thread, which holds a group's lock for the whole of that
//! group's sync and during metaslab loads (reads of space maps). Each counter is exact once
//! the operation that changes it returns; a reader racing an operation may see one counter
//! updated and the other not yet, a skew of one operation's bytes, which admission (an estimate
//! with slop) tolerates. [`SpaceManager::totals`] still sums every metaslab under the group
//! locks: the exact figure, for listings and for the tests that hold the counters to it.
//!
//! # Operations
//!
//! - `allocate(size, txg, avoid)`: pick a group (the rotor moves every `metaslab_aliquot` bytes,
//!   scaled by the group's share of free space as of the last txg, see `Rotor::aliquot`;
//!   extra copies go to the next vdev not yet holding a copy, otherwise to a metaslab of the
//!   same vdev at least 1/8 of the vdev away from the other copies, else to any other metaslab),
//!   then the group's active metaslab for that copy (the first, second or third on this vdev)
//!   while it fits and keeps its distance, else a metaslab by weight (largest free-segment
//!   class first, loaded ones first within a class; metaslabs active for other copies last),
//!   which becomes the active one, loading it on demand (first unloading this group's least
//!   recently chosen metaslabs when loaded trees exceed `metaslab_mem_limit`), then a range by
//!   dynamic fit (first fit from a per-alignment cursor, best fit when the metaslab is nearly
//!   full or fragmented). If no candidate fits, every unloaded metaslab with enough free bytes
//!   is loaded and tried (an unloaded metaslab's weight comes from its map header, whose
//!   histogram counts frees unmerged). Extra copies thus land in a small, stable set of
//!   metaslabs. Each allocation records the segments it examined, whether it waited for a
//!   load, and its time ([`stats`]).
//! - `free` / `unalloc`: into `freeing`, or straight back for an unsynced allocation.
//! - `sync(txg, pass)` with the log space map ([`log`]): in pass 1, flush the metaslabs the
//!   log summary's estimate asks for (their unflushed changes to their own maps) and free the
//!   logs no metaslab needs; in every pass, append each dirty metaslab's batches to the txg's
//!   log (two-word entries with the vdev id) and to its unflushed trees, then write the changed
//!   unflushed-txg array entries, the log's header and the log directory. Cost: the log's
//!   blocks, the flushed maps' tails, an array block, instead of a block per dirty metaslab.
//! - `sync(txg, pass)` without the log: in pass 1, copy the last block of every active metaslab's map even if
//!   nothing touched it yet (the MOS blocks pass 1 writes after the maps land there: this keeps
//!   their recording in pass 2 an in-place rewrite, docs/design/05-txg.md §4); per dirty metaslab,
//!   condense (pass 1, when the map is twice its optimal size), append ALLOC then FREE batches,
//!   rewrite the header; record new map ids; in pass 1, preload the next candidates of every
//!   vdev whose first-copy metaslab was chosen in this txg (`metaslab_preload_limit`).
//! - `sync_done(txg)`: rotate the defer trees; unload metaslabs not chosen for
//!   `metaslab_unload_delay` txgs, then the least recently chosen while the loaded trees exceed
//!   `metaslab_mem_limit` (never an active metaslab, never one with unsynced allocations);
//!   record each vdev's free space for the rotor. One pass over the metaslabs, no I/O.
//! - `take_txg_stats()`: the per-txg figures of `tarn stat txgs` ([`stats`]).
//!
//! # Crash behaviour
//!
//! Nothing here writes in place: entries and headers go through [`SpaceStorage`] in the syncing
//! txg, and become visible only with that txg's uberblock. A crash before it leaves the previous
//! maps, consistent with the previous block tree; frees of the last two synced txgs are deferred
//! again at load, so the txgs that import may rewind to still find their blocks intact.

pub mod btree;
mod class;
mod counters;
mod expand;
mod inspect;
pub mod log;
pub mod metaslab;
pub mod range_tree;
pub mod space_map;
pub mod stats;
pub mod storage;
pub mod unflushed;

pub use class::AllocClass;
use counters::SpaceCounters;
pub use counters::SpaceTotals;
pub use inspect::{MetaslabStats, VdevSpaceStats};
pub use metaslab::Metaslab;
pub use range_tree::{RangeTree, Segment};
pub use space_map::{SpaceMap, SpaceMapAction, SpaceMapEntry, SpaceMapHeader};

use crate::tunables::Tunables;
use crate::types::{
    ObjectId, Txg, VdevId, METASLAB_COUNT_MAX, METASLAB_SHIFT_MIN, SPA_MINBLOCKSHIFT,
};
use parking_lot::{Mutex, RwLock};
use stats::{SpaceStatsCollector, SpaceTxgStats};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use storage::{SpaceStorage, StorageError};

/// Extra copies of a block on the same top-level vdev are placed at least `vdev size >> 3`
/// apart when the vdev has room (OpenZFS `ditto_same_vdev_distance_shift`), so that one
/// damaged region of a single-vdev pool takes at most one copy of any block.
pub const DITTO_SAME_VDEV_DISTANCE_SHIFT: u32 = 3;

/// The space layer's errors.
#[derive(Debug, thiserror::Error)]
pub enum SpaceError {
    /// No top-level vdev has a free segment large enough.
    #[error("no space for an allocation of {size_allocated} bytes")]
    NoSpace { size_allocated: u64 },
    /// On-disk state (space map, metaslab array, block-pointer range) is inconsistent.
    #[error("corrupt space metadata: {what} (at {location})")]
    Corrupt { what: String, location: String },
    /// A vdev was described with impossible parameters.
    #[error("invalid vdev {vdev}: {reason}")]
    InvalidVdev { vdev: VdevId, reason: String },
    #[error("space-map storage: {0}")]
    Storage(#[from] StorageError),
}

impl SpaceError {
    pub fn corrupt(what: String, location: String) -> SpaceError {
        SpaceError::Corrupt { what, location }
    }
}

/// Metaslab shift and count for a top-level vdev of `asize` bytes (reference §3.1): about 200
/// metaslabs, at least 16, sizes a power of two clamped to `[vdev_min_ms_shift,
/// vdev_max_ms_shift]`, and at most `vdev_ms_count_limit` of them unless that would need a larger
/// shift than the maximum allows.
pub fn metaslab_geometry(asize: u64, tunables: &Tunables) -> (u32, u64) {
    // 1-based index of the highest set bit, 0 for 0 (OpenZFS highbit64).
    let highbit = |value: u64| 64 - value.leading_zeros();
    let count_at_default = asize >> tunables.vdev_default_ms_shift;
    let mut shift = if count_at_default < tunables.vdev_min_ms_count {
        highbit(asize / tunables.vdev_min_ms_count.max(1))
    } else if count_at_default > tunables.vdev_default_ms_count {
        highbit(asize / tunables.vdev_default_ms_count.max(1))
    } else {
        tunables.vdev_default_ms_shift
    };
    if shift < tunables.vdev_min_ms_shift {
        shift = tunables.vdev_min_ms_shift;
    } else if shift > tunables.vdev_max_ms_shift {
        shift = tunables.vdev_max_ms_shift;
        if asize >> shift > tunables.vdev_ms_count_limit {
            shift = highbit(asize / tunables.vdev_ms_count_limit.max(1));
        }
    }
    (shift, asize >> shift)
}

/// The largest data area of a top-level vdev, 4 EiB: far beyond any device, and small enough
/// that a device's size computed from it (labels and reserves added) cannot overflow.
pub const ASIZE_MAX: u64 = 1 << 62;

/// Check a top-level vdev's metaslab geometry as a config or caller describes it, before any
/// metaslab is built or any device is sized from it: `asize` at most [`ASIZE_MAX`], `ms_shift`
/// within [`METASLAB_SHIFT_MIN`] and 62 and not below the sector shift, and `asize >> ms_shift`
/// metaslabs, at least one and at most [`METASLAB_COUNT_MAX`]. Returns the metaslab count, or
/// what is wrong, naming the field. (That the metaslabs fit on the devices is checked where the
/// devices are known, `TopVdev::new`.)
pub fn check_metaslab_geometry(asize: u64, ms_shift: u32, ashift: u32) -> Result<u64, String> {
    if asize > ASIZE_MAX {
        return Err(format!(
            "asize {asize} is over the limit of {ASIZE_MAX} bytes"
        ));
    }
    if ms_shift < ashift.max(METASLAB_SHIFT_MIN) || ms_shift >= 63 {
        return Err(format!(
            "metaslab shift {ms_shift} outside [{}, 62] for ashift {ashift}",
            ashift.max(METASLAB_SHIFT_MIN)
        ));
    }
    let ms_count = asize >> ms_shift;
    if ms_count == 0 || ms_count > METASLAB_COUNT_MAX {
        return Err(format!(
            "asize {asize} makes {ms_count} metaslabs of 2^{ms_shift} bytes; \
             between 1 and {METASLAB_COUNT_MAX} are allowed"
        ));
    }
    Ok(ms_count)
}

/// Metaslabs of one top-level vdev.
/// How a top-level vdev sizes its allocations: `1 << ashift` sectors, and for a vdev that
/// stores more than the block (RAID-Z parity and padding) the bytes a block of a given padded
/// size takes there. The space layer knows no vdev kinds: the vdev layer supplies the function.
#[derive(Clone)]
pub struct AllocUnit {
    pub ashift: u32,
    asize_of: Option<Arc<AsizeOf>>,
}

/// The bytes a block of a given padded size allocated in a given txg takes on a vdev.
pub type AsizeOf = dyn Fn(u64, Txg) -> u64 + Send + Sync;

impl AllocUnit {
    /// Plain sectors: a block takes its size rounded up to the sector.
    pub fn sectors(ashift: u32) -> AllocUnit {
        AllocUnit {
            ashift,
            asize_of: None,
        }
    }

    /// Sectors of `1 << ashift`, a block of `size` padded bytes allocated in `txg` taking
    /// `asize_of(size, txg)` (a RAID-Z vdev's width depends on the txg once it was expanded).
    pub fn computed(ashift: u32, asize_of: Arc<AsizeOf>) -> AllocUnit {
        AllocUnit {
            ashift,
            asize_of: Some(asize_of),
        }
    }

    /// Bytes allocated for a block of `size` padded physical bytes in `txg`.
    pub fn asize(&self, size: u64, txg: Txg) -> u64 {
        match &self.asize_of {
            Some(asize_of) => asize_of(size, txg),
            None => size.next_multiple_of(1 << self.ashift),
        }
    }
}

impl From<u32> for AllocUnit {
    fn from(ashift: u32) -> AllocUnit {
        AllocUnit::sectors(ashift)
    }
}

impl std::fmt::Debug for AllocUnit {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AllocUnit")
            .field("ashift", &self.ashift)
            .field("computed", &self.asize_of.is_some())
            .finish()
    }
}

/// Where an allocation went: the top-level vdev, the offset, and the bytes it takes there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub vdev: VdevId,
    pub offset: u64,
    pub asize: u64,
}

struct Group {
    vdev: VdevId,
    /// How this vdev sizes an allocation.
    unit: AllocUnit,
    /// Which allocations may come here: [`SpaceManager::allocate`] takes only `Normal` groups,
    /// [`SpaceManager::allocate_log`] prefers `Log` ones.
    class: AllocClass,
    /// False while the vdev takes no new allocations (a log vdev being removed, or one whose
    /// devices are all missing); frees and claims still reach it.
    allocatable: bool,
    ms_shift: u32,
    ashift: u32,
    ms_array: Option<ObjectId>,
    metaslabs: Vec<Metaslab>,
    /// Active metaslabs, each with the weight class it had when chosen (it is dropped once its
    /// best class falls two below that). Slot 0 takes first copies on this vdev (OpenZFS
    /// `mg_primaries`); slot `n` the `n + 1`-th copy of a block on this vdev (`mg_secondaries`),
    /// so that extra copies land in a small, stable set of metaslabs, whose space maps
    /// [`SpaceManager::sync`] prepares in pass 1.
    active: [Option<(usize, u64)>; ACTIVE_SLOTS],
    /// A metaslab that takes no allocations while a RAID-Z expansion copies it
    /// ([`SpaceManager::disable_metaslab`]); frees still reach it.
    disabled: Option<usize>,
}

/// Active metaslabs per group: one for first copies, one for each extra copy (three copies at
/// most).
const ACTIVE_SLOTS: usize = 3;

/// Weight class at or below which an active metaslab is given up (`zfs_metaslab_switch_threshold`).
const METASLAB_SWITCH_THRESHOLD: u64 = 2;

impl Group {
    fn covered_size(&self) -> u64 {
        (self.metaslabs.len() as u64) << self.ms_shift
    }

    /// Find the metaslab holding `[offset, offset + size)`, validating the range (it comes from
    /// a block pointer on disk).
    fn metaslab_for(&mut self, offset: u64, size: u64) -> Result<&mut Metaslab, SpaceError> {
        let end = offset.checked_add(size);
        let sector = 1u64 << self.ashift;
        let valid = size > 0
            && offset.is_multiple_of(sector)
            && size.is_multiple_of(sector)
            && end.is_some_and(|end| {
                end <= self.covered_size()
                    && (offset >> self.ms_shift) == ((end - 1) >> self.ms_shift)
            });
        if !valid {
            return Err(SpaceError::corrupt(
                format!("range of {size} bytes at {offset:#x} is not a sector-aligned range inside one metaslab"),
                format!("vdev {} ({} bytes)", self.vdev, self.covered_size()),
            ));
        }
        Ok(&mut self.metaslabs[(offset >> self.ms_shift) as usize])
    }

    /// Try metaslab `index`: load it if needed (first unloading the least recently used
    /// metaslabs of this group when loaded trees exceed `metaslab_mem_limit`), then allocate.
    fn try_metaslab(
        &mut self,
        index: usize,
        size: u64,
        context: &mut AllocContext<'_>,
    ) -> Result<Option<u64>, SpaceError> {
        if !self.metaslabs[index].should_allocate(size) {
            return Ok(None);
        }
        self.load_and_allocate(index, size, context)
    }

    fn load_and_allocate(
        &mut self,
        index: usize,
        size: u64,
        context: &mut AllocContext<'_>,
    ) -> Result<Option<u64>, SpaceError> {
        self.metaslabs[index].selected_txg = context.txg.0;
        if !self.metaslabs[index].is_loaded() {
            self.evict_for_memory(index, context.manager);
        }
        let ms_shift = self.ms_shift;
        let manager = context.manager;
        let metaslab = &mut self.metaslabs[index];
        let was_loaded = metaslab.is_loaded();
        let (offset, examined) = manager.track(metaslab, |metaslab| {
            metaslab.load(context.storage, context.last_synced)?;
            Ok::<_, SpaceError>(metaslab.allocate_counted(size, context.txg, &manager.tunables))
        })?;
        if !was_loaded {
            context.load_wait = true;
            manager.stats.loaded();
            manager
                .loaded_memory
                .fetch_add(metaslab.memory_bytes(), Ordering::Relaxed);
        }
        context.segments_examined += examined;
        Ok(offset.inspect(|offset| debug_assert_eq!(offset >> ms_shift, index as u64)))
    }

    /// Is metaslab `index` active for some copy slot?
    fn is_active(&self, index: usize) -> bool {
        self.active
            .iter()
            .any(|active| active.is_some_and(|(at, _)| at == index))
    }

    /// Unload metaslab `index` if it is loaded, not active and has no unsynced allocations;
    /// returns the bytes given back.
    fn unload(&mut self, index: usize, manager: &SpaceManager) -> u64 {
        if self.is_active(index) || !self.metaslabs[index].is_loaded() {
            return 0;
        }
        let bytes = self.metaslabs[index].memory_bytes();
        if !self.metaslabs[index].unload() {
            return 0;
        }
        manager.stats.unloaded();
        let _ = manager
            .loaded_memory
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |value| {
                Some(value.saturating_sub(bytes))
            });
        bytes
    }

    /// Before loading metaslab `loading`: while the loaded trees of the pool exceed
    /// `metaslab_mem_limit`, unload this group's least recently selected metaslabs (never an
    /// active one or `loading`). Other groups are trimmed at the end of the txg
    /// ([`SpaceManager::sync_done`]), so a group never takes another group's lock.
    fn evict_for_memory(&mut self, loading: usize, manager: &SpaceManager) {
        let limit = manager.tunables.metaslab_mem_limit;
        if manager.loaded_memory.load(Ordering::Relaxed) <= limit {
            return;
        }
        let mut loaded: Vec<(u64, usize)> = (0..self.metaslabs.len())
            .filter(|&index| {
                index != loading && self.metaslabs[index].is_loaded() && !self.is_active(index)
            })
            .map(|index| (self.metaslabs[index].selected_txg, index))
            .collect();
        loaded.sort_unstable();
        for (_, index) in loaded {
            if manager.loaded_memory.load(Ordering::Relaxed) <= limit {
                break;
            }
            self.unload(index, manager);
        }
    }

    /// How many metaslabs apart two copies of one block on this vdev should be: the vdev's
    /// size shifted right by [`DITTO_SAME_VDEV_DISTANCE_SHIFT`], in whole metaslabs (at least
    /// one, so that copies never share a metaslab).
    fn ditto_distance_metaslabs(&self) -> usize {
        (self.metaslabs.len() >> DITTO_SAME_VDEV_DISTANCE_SHIFT).max(1)
    }

    /// Allocate in this group, never in the metaslabs listed in `avoid_metaslabs`, for copy
    /// `slot` of a block on this vdev (0: first copy). The slot's active metaslab is tried first
    /// while it keeps fitting and is not to be avoided; otherwise the heaviest candidate (those
    /// active for other slots last) is chosen and becomes the slot's active metaslab.
    fn allocate(
        &mut self,
        size: u64,
        slot: usize,
        avoid_metaslabs: &[usize],
        context: &mut AllocContext<'_>,
    ) -> Result<Option<u64>, SpaceError> {
        if size > 1 << self.ms_shift {
            return Ok(None);
        }
        let slot = slot.min(ACTIVE_SLOTS - 1);
        if let Some((index, activation_class)) = self.active[slot] {
            let class = self.metaslabs[index].weight() >> 54;
            // An active metaslab near this block's other copies (the first copies moved on) is
            // replaced below, like one that no longer fits.
            if !avoid_metaslabs.contains(&index)
                && self.disabled != Some(index)
                && class + METASLAB_SWITCH_THRESHOLD > activation_class
            {
                if let Some(offset) = self.try_metaslab(index, size, context)? {
                    return Ok(Some(offset));
                }
            }
            self.active[slot] = None;
        }
        // Metaslabs active for other slots come last, so that the slots stay apart; then by
        // largest free-segment class, loaded ones first within a class (no load wait), then by
        // the count of segments in that class.
        let taken = |index: usize| {
            self.active
                .iter()
                .enumerate()
                .any(|(other, active)| other != slot && active.is_some_and(|(at, _)| at == index))
        };
        let mut candidates: Vec<(bool, u64, bool, u64, usize)> = (0..self.metaslabs.len())
            .filter(|index| !avoid_metaslabs.contains(index) && self.disabled != Some(*index))
            .map(|index| {
                let metaslab = &self.metaslabs[index];
                let weight = metaslab.weight();
                (
                    taken(index),
                    weight >> 54,
                    metaslab.is_loaded(),
                    weight,
                    index,
                )
            })
            .filter(|&(_, _, _, weight, _)| weight > 0)
            .collect();
        candidates.sort_by(|left, right| {
            left.0
                .cmp(&right.0)
                .then(right.1.cmp(&left.1))
                .then(right.2.cmp(&left.2))
                .then(right.3.cmp(&left.3))
                .then(left.4.cmp(&right.4))
        });
        for &(_, _, _, _, index) in &candidates {
            if let Some(offset) = self.try_metaslab(index, size, context)? {
                self.active[slot] = Some((index, self.metaslabs[index].weight() >> 54));
                return Ok(Some(offset));
            }
        }
        // Nothing else is loaded to look: a metaslab whose weight says the block cannot fit is
        // not loaded even when its free bytes would allow it (OpenZFS metaslab_should_allocate
        // applies under try-hard too). A failing request, and each halving of gang planning
        // after it, would otherwise load every such metaslab, inside the sync thread. An
        // unloaded metaslab's weight can understate its largest free segment (its header counts
        // frees of an unloaded metaslab unmerged); the largest segment remembered at unload
        // covers the usual case, and a gang block the rest.
        Ok(None)
    }
}

/// What one allocation carries down to the metaslabs, and what it learns on the way (for the
/// statistics).
struct AllocContext<'a> {
    manager: &'a SpaceManager,
    storage: &'a dyn SpaceStorage,
    txg: Txg,
    last_synced: Txg,
    segments_examined: u64,
    load_wait: bool,
}

impl<'a> AllocContext<'a> {
    fn new(manager: &'a SpaceManager, storage: &'a dyn SpaceStorage, txg: Txg) -> Self {
        AllocContext {
            manager,
            storage,
            txg,
            last_synced: manager.last_synced_before(txg),
            segments_examined: 0,
            load_wait: false,
        }
    }

    /// Count one allocation that started at `started` in the space layer's figures.
    fn record(&self, started: Instant) {
        self.manager.stats.allocation(
            self.segments_examined,
            self.load_wait,
            started.elapsed().as_nanos() as u64,
        );
    }
}

/// The storage the space maps are written through during a sync, counting the data blocks
/// each pass writes (`spacemap_writes`). Every object the space layer writes (space maps and
/// metaslab arrays) has blocks of `metaslab_sm_blksz`.
struct CountingStorage<'a> {
    inner: &'a dyn SpaceStorage,
    stats: &'a SpaceStatsCollector,
    block_size: u64,
    /// Writes the log space map's objects (counted in `log_writes` too).
    log: bool,
}

impl SpaceStorage for CountingStorage<'_> {
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
        if self.log {
            self.stats
                .log_write(object.0, offset, data.len() as u64, self.block_size);
        } else {
            self.stats
                .spacemap_write(object.0, offset, data.len() as u64, self.block_size);
        }
        self.inner.write(object, offset, data, txg)
    }
    fn truncate(&self, object: ObjectId, length: u64, txg: Txg) -> Result<(), StorageError> {
        self.inner.truncate(object, length, txg)
    }
    fn read_bonus(&self, object: ObjectId) -> Result<Vec<u8>, StorageError> {
        self.inner.read_bonus(object)
    }
    fn write_bonus(&self, object: ObjectId, bonus: &[u8], txg: Txg) -> Result<(), StorageError> {
        self.stats.header_write(object.0);
        self.inner.write_bonus(object, bonus, txg)
    }
}

struct Rotor {
    /// Index into the group list.
    index: usize,
    /// Bytes placed on the current group since the rotor moved there.
    bytes: u64,
    /// Free and total bytes of each group as of the last `sync_done` (for the aliquot).
    space: Vec<(u64, u64)>,
}

impl Rotor {
    /// Bytes to place on group `index` before moving on: `metaslab_aliquot` scaled by the
    /// group's share of the pool's free space (its free bytes over the average group's; OpenZFS
    /// scales by vdev size and, with `metaslab_bias_enabled`, by free fraction, which comes to
    /// the same), between a quarter and four times the aliquot. Larger and emptier vdevs take
    /// more, so the vdevs fill evenly.
    fn aliquot(&self, index: usize, aliquot: u64) -> u64 {
        let Some(&(free, _)) = self.space.get(index) else {
            return aliquot;
        };
        let free_total: u128 = self.space.iter().map(|&(free, _)| free as u128).sum();
        if free_total == 0 {
            return aliquot;
        }
        let groups = self
            .space
            .iter()
            .filter(|&&(_, size)| size > 0)
            .count()
            .max(1);
        let scaled = aliquot as u128 * free as u128 * groups as u128 / free_total;
        (scaled.min(u64::MAX as u128) as u64).clamp(aliquot / 4, aliquot.saturating_mul(4))
    }
}

/// The metaslab class: every top-level vdev's metaslabs and the allocator over them.
pub struct SpaceManager {
    tunables: Tunables,
    groups: RwLock<Vec<Mutex<Group>>>,
    rotor: Mutex<Rotor>,
    last_synced: Mutex<Option<Txg>>,
    /// Space counters of each class, indexed by [`AllocClass::index`].
    counters: [SpaceCounters; 2],
    /// Where the next intent-log allocation starts among the log groups.
    log_rotor: std::sync::atomic::AtomicUsize,
    /// Log groups that take allocations (kept by `add_vdev` and `set_allocatable`), so that
    /// a commit asks [`SpaceManager::has_log_vdevs`] without a lock.
    allocatable_log_groups: std::sync::atomic::AtomicUsize,
    /// Per-txg figures for `tarn stat txgs`.
    stats: SpaceStatsCollector,
    /// Bytes of loaded free trees, pool-wide (exact after each `sync_done`, kept current by
    /// loads and unloads in between).
    loaded_memory: AtomicU64,
    /// The log space map, when the pool has the feature ([`log`]). Taken by the sync thread
    /// for a whole pass, before any group lock; never taken while holding a group lock.
    log: Mutex<Option<log::LogState>>,
}

impl SpaceManager {
    pub fn new(tunables: Tunables) -> SpaceManager {
        SpaceManager {
            tunables,
            groups: RwLock::new(Vec::new()),
            rotor: Mutex::new(Rotor {
                index: 0,
                bytes: 0,
                space: Vec::new(),
            }),
            last_synced: Mutex::new(None),
            counters: Default::default(),
            log_rotor: Default::default(),
            allocatable_log_groups: Default::default(),
            stats: SpaceStatsCollector::default(),
            loaded_memory: AtomicU64::new(0),
            log: Mutex::new(None),
        }
    }

    pub fn tunables(&self) -> &Tunables {
        &self.tunables
    }

    /// Run `operation` on `metaslab`, adding what it changed to its class's counters.
    fn track<T>(&self, metaslab: &mut Metaslab, operation: impl FnOnce(&mut Metaslab) -> T) -> T {
        self.counters[metaslab.class.index()].track(metaslab, operation)
    }

    /// The last synced txg as of an operation in `txg` (`txg − 1` until import has said).
    fn last_synced_before(&self, txg: Txg) -> Txg {
        self.last_synced
            .lock()
            .unwrap_or(Txg(txg.0.saturating_sub(1)))
    }

    /// Tell the manager the last synced txg (at import, before the first allocation). Without
    /// it, an allocation in txg T assumes T − 1.
    pub fn set_last_synced_txg(&self, txg: Txg) {
        *self.last_synced.lock() = Some(txg);
    }

    /// Add a top-level vdev: a new one (`ms_array` None, all free) or an existing one whose
    /// metaslab array is read now, with each space map's header (trees load on demand).
    #[allow(clippy::too_many_arguments)]
    pub fn add_vdev(
        &self,
        vdev: VdevId,
        class: AllocClass,
        asize: u64,
        ms_shift: u32,
        unit: impl Into<AllocUnit>,
        ms_array: Option<ObjectId>,
        storage: &dyn SpaceStorage,
    ) -> Result<(), SpaceError> {
        let unit = unit.into();
        let ashift = unit.ashift;
        let invalid = |reason: String| SpaceError::InvalidVdev { vdev, reason };
        if !(SPA_MINBLOCKSHIFT..=16).contains(&ashift) {
            return Err(invalid(format!(
                "ashift {ashift} outside [{SPA_MINBLOCKSHIFT}, 16]"
            )));
        }
        // Checked before the per-metaslab vectors below are sized by the count.
        let ms_count = check_metaslab_geometry(asize, ms_shift, ashift).map_err(invalid)?;
        let block_size = self.metaslab_map_block_size();
        let mut metaslabs = Vec::with_capacity(ms_count as usize);
        let mut ids = vec![0u8; ms_count as usize * 8];
        if let Some(array) = ms_array {
            storage.read(array, 0, &mut ids)?;
        }
        for id in 0..ms_count {
            let object = u64::from_le_bytes(
                ids[id as usize * 8..id as usize * 8 + 8]
                    .try_into()
                    .expect("8 bytes"),
            );
            let start = id << ms_shift;
            let mut metaslab = if object == 0 {
                Metaslab::new(id, start, 1 << ms_shift, ashift, block_size)
            } else {
                Metaslab::open(
                    storage,
                    id,
                    start,
                    1 << ms_shift,
                    ashift,
                    block_size,
                    ObjectId(object),
                )?
            };
            metaslab.class = class;
            metaslabs.push(metaslab);
        }
        let mut groups = self.groups.write();
        if groups.iter().any(|group| group.lock().vdev == vdev) {
            return Err(invalid("already added".into()));
        }
        let group_size = metaslabs.len() as u64 * (1u64 << ms_shift);
        let counters = &self.counters[class.index()];
        counters.size.fetch_add(group_size, Ordering::Relaxed);
        for metaslab in &metaslabs {
            counters
                .allocated
                .fetch_add(metaslab.allocated_bytes(), Ordering::Relaxed);
            counters
                .deferred
                .fetch_add(metaslab.deferred_bytes(), Ordering::Relaxed);
        }
        groups.push(Mutex::new(Group {
            vdev,
            unit,
            class,
            allocatable: true,
            ms_shift,
            ashift,
            ms_array,
            metaslabs,
            active: [None; ACTIVE_SLOTS],
            disabled: None,
        }));
        self.count_allocatable_log_groups(&groups);
        Ok(())
    }

    /// The vdev's metaslab array object, once a sync has created it.
    pub fn ms_array(&self, vdev: VdevId) -> Option<ObjectId> {
        self.groups
            .read()
            .iter()
            .map(|group| group.lock())
            .find(|group| group.vdev == vdev)
            .and_then(|group| group.ms_array)
    }

    /// Allocate `size_allocated` bytes in syncing txg `txg`. `avoid` lists the copies of this
    /// block already placed: the new one goes to another top-level vdev if there is one,
    /// otherwise to a metaslab of the same vdev well away from the copies there
    /// ([`DITTO_SAME_VDEV_DISTANCE_SHIFT`]), else to another metaslab, and only as a last
    /// resort next to one.
    pub fn allocate(
        &self,
        size_allocated: u64,
        txg: Txg,
        avoid: &[(VdevId, u64)],
        storage: &dyn SpaceStorage,
    ) -> Result<Placed, SpaceError> {
        assert!(size_allocated > 0, "zero-size allocation");
        let started = Instant::now();
        let mut context = AllocContext::new(self, storage, txg);
        let result = self.allocate_in(size_allocated, avoid, &mut context);
        context.record(started);
        result
    }

    /// [`SpaceManager::allocate`] as (vdev, offset), for the space layer's own tests.
    #[cfg(test)]
    pub(crate) fn allocate_at(
        &self,
        size_allocated: u64,
        txg: Txg,
        avoid: &[(VdevId, u64)],
        storage: &dyn SpaceStorage,
    ) -> Result<(VdevId, u64), SpaceError> {
        self.allocate(size_allocated, txg, avoid, storage)
            .map(|placed| (placed.vdev, placed.offset))
    }

    fn allocate_in(
        &self,
        size_allocated: u64,
        avoid: &[(VdevId, u64)],
        context: &mut AllocContext<'_>,
    ) -> Result<Placed, SpaceError> {
        let groups = self.groups.read();
        let count = groups.len();
        if count == 0 {
            return Err(SpaceError::NoSpace { size_allocated });
        }
        let start = match avoid.last() {
            None => {
                let mut rotor = self.rotor.lock();
                let aliquot = rotor.aliquot(rotor.index % count, self.tunables.metaslab_aliquot);
                if rotor.bytes + size_allocated / 2 >= aliquot {
                    rotor.index = (rotor.index + 1) % count;
                    rotor.bytes = 0;
                }
                rotor.index % count
            }
            Some((vdev, _)) => groups
                .iter()
                .position(|group| group.lock().vdev == *vdev)
                .map_or(0, |position| position + 1),
        };
        // Pass 0: vdevs holding no copy. Pass 1: vdevs holding one, metaslabs at least
        // 1/2^DITTO_SAME_VDEV_DISTANCE_SHIFT of the vdev away from every copy there (one damaged
        // region does not take two copies). Pass 2: those vdevs, any other metaslab.
        // Pass 3: anywhere.
        for pass in 0..4 {
            for step in 0..count {
                let index = (start + step) % count;
                let mut group = groups[index].lock();
                if group.class != AllocClass::Normal || !group.allocatable {
                    continue;
                }
                let vdev = group.vdev;
                let holds_copy = avoid.iter().any(|(avoid_vdev, _)| *avoid_vdev == vdev);
                let avoid_metaslabs: Vec<usize> = match pass {
                    0 if holds_copy => continue,
                    1 | 2 if !holds_copy => continue,
                    1 | 2 => {
                        let reach = if pass == 1 {
                            group.ditto_distance_metaslabs()
                        } else {
                            0
                        };
                        let last = group.metaslabs.len().saturating_sub(1);
                        let mut near: Vec<usize> = avoid
                            .iter()
                            .filter(|(avoid_vdev, _)| *avoid_vdev == vdev)
                            .flat_map(|(_, offset)| {
                                let at = (offset >> group.ms_shift) as usize;
                                at.saturating_sub(reach)..=(at + reach).min(last)
                            })
                            .collect();
                        near.sort_unstable();
                        near.dedup();
                        if pass == 1 && near.len() >= group.metaslabs.len() {
                            // The vdev is too small for that distance: pass 2 decides.
                            continue;
                        }
                        near
                    }
                    3 if avoid.is_empty() => break,
                    _ => Vec::new(),
                };
                let sector = 1u64 << group.ashift;
                assert!(size_allocated.is_multiple_of(sector), "allocation of {size_allocated} bytes on vdev {vdev} with {sector}-byte sectors");
                let slot = avoid
                    .iter()
                    .filter(|(avoid_vdev, _)| *avoid_vdev == vdev)
                    .count();
                let asize = group.unit.asize(size_allocated, context.txg);
                if let Some(offset) = group.allocate(asize, slot, &avoid_metaslabs, context)? {
                    drop(group);
                    if avoid.is_empty() {
                        let mut rotor = self.rotor.lock();
                        if rotor.index % count != index {
                            rotor.index = index;
                            rotor.bytes = 0;
                        }
                        rotor.bytes += asize;
                    }
                    return Ok(Placed {
                        vdev,
                        offset,
                        asize,
                    });
                }
            }
        }
        Err(SpaceError::NoSpace { size_allocated })
    }

    fn with_group<T>(
        &self,
        vdev: VdevId,
        operation: impl FnOnce(&mut Group) -> Result<T, SpaceError>,
    ) -> Result<T, SpaceError> {
        let groups = self.groups.read();
        for group in groups.iter() {
            let mut group = group.lock();
            if group.vdev == vdev {
                return operation(&mut group);
            }
        }
        Err(SpaceError::corrupt(
            format!("no top-level vdev {vdev}"),
            "block pointer".into(),
        ))
    }

    /// Free a block's range in syncing txg `txg`. The range comes from disk and is validated.
    pub fn free(&self, vdev: VdevId, offset: u64, size: u64, txg: Txg) -> Result<(), SpaceError> {
        self.with_group(vdev, |group| {
            let metaslab = group.metaslab_for(offset, size)?;
            self.track(metaslab, |metaslab| metaslab.free(offset, size, txg))
        })
    }

    /// Claim a block's range in txg `txg` (an intent-log block born after the last synced
    /// txg, found at import): loads its metaslab, then takes the range out of the free space.
    /// `Ok(false)` if the range is not free.
    pub fn claim(
        &self,
        vdev: VdevId,
        offset: u64,
        size: u64,
        txg: Txg,
        storage: &dyn SpaceStorage,
    ) -> Result<bool, SpaceError> {
        let last_synced = self.last_synced_before(txg);
        self.with_group(vdev, |group| {
            let metaslab = group.metaslab_for(offset, size)?;
            let was_loaded = metaslab.is_loaded();
            let claimed = self.track(metaslab, |metaslab| {
                metaslab.load(storage, last_synced)?;
                metaslab.claim(offset, size, txg)
            })?;
            if !was_loaded {
                self.stats.loaded();
                self.loaded_memory
                    .fetch_add(metaslab.memory_bytes(), Ordering::Relaxed);
            }
            Ok(claimed)
        })
    }

    /// Whether any of `[offset, offset + size)` on `vdev` could be allocated now: free, and
    /// neither being freed nor deferred. The range may span metaslabs (a run of referenced
    /// blocks); each is loaded, as an allocation there would load it. Right after an import,
    /// no block that a rewind target's tree references may be (the rewind promise,
    /// `tarn::pool::fallback_uberblocks`): `tarn-stress` asks this.
    pub fn is_allocatable(
        &self,
        vdev: VdevId,
        offset: u64,
        size: u64,
        storage: &dyn SpaceStorage,
    ) -> Result<bool, SpaceError> {
        let last_synced = self.last_synced.lock().unwrap_or_default();
        self.with_group(vdev, |group| {
            let end = offset.saturating_add(size);
            let mut start = offset;
            while start < end {
                let metaslab_end = ((start >> group.ms_shift) + 1) << group.ms_shift;
                let piece = end.min(metaslab_end) - start;
                let metaslab = group.metaslab_for(start, piece)?;
                let was_loaded = metaslab.is_loaded();
                self.track(metaslab, |metaslab| metaslab.load(storage, last_synced))?;
                if !was_loaded {
                    self.stats.loaded();
                    self.loaded_memory
                        .fetch_add(metaslab.memory_bytes(), Ordering::Relaxed);
                }
                if metaslab.allocatable_intersects(start, piece) {
                    return Ok(true);
                }
                start += piece;
            }
            Ok(false)
        })
    }

    /// Undo an allocation made in syncing txg `txg` that has not been synced yet.
    pub fn unalloc(
        &self,
        vdev: VdevId,
        offset: u64,
        size: u64,
        txg: Txg,
    ) -> Result<(), SpaceError> {
        self.with_group(vdev, |group| {
            let metaslab = group.metaslab_for(offset, size)?;
            self.track(metaslab, |metaslab| metaslab.unalloc(offset, size, txg))
        })
    }

    /// Write every dirty metaslab's changes for `txg` in this pass, and the ids of newly created
    /// maps into the metaslab arrays. Returns whether anything was written.
    pub fn sync(
        &self,
        txg: Txg,
        sync_pass: u32,
        storage: &dyn SpaceStorage,
    ) -> Result<bool, SpaceError> {
        let counting = CountingStorage {
            inner: storage,
            stats: &self.stats,
            block_size: self.metaslab_map_block_size() as u64,
            log: false,
        };
        let log_counting = CountingStorage {
            inner: storage,
            stats: &self.stats,
            block_size: self.tunables.log_sm_blksz as u64,
            log: true,
        };
        let log_appends = log::AppendBuffer::new(&log_counting);
        let result = self
            .sync_counted(txg, sync_pass, &counting, &log_appends)
            .and_then(|wrote| Ok(wrote | log_appends.flush()?));
        self.stats.end_pass();
        result
    }

    fn sync_counted(
        &self,
        txg: Txg,
        sync_pass: u32,
        storage: &dyn SpaceStorage,
        log_storage: &dyn SpaceStorage,
    ) -> Result<bool, SpaceError> {
        let mut log = self.log.lock();
        let groups = self.groups.read();
        let mut wrote = false;
        if let (Some(log), 1) = (log.as_mut(), sync_pass) {
            let mut locked: Vec<_> = groups.iter().map(|group| group.lock()).collect();
            self.flush_metaslabs(log, &mut locked, txg, storage, log_storage)?;
        }
        for group in groups.iter() {
            let mut group = group.lock();
            if let Some(log) = log.as_mut() {
                wrote |=
                    self.sync_group_to_log(log, &mut group, txg, sync_pass, storage, log_storage)?;
                wrote |= self.write_unflushed_txgs(log, &mut group, txg, storage)?;
            } else if sync_pass == 1 {
                let mut active: Vec<usize> = group
                    .active
                    .iter()
                    .flatten()
                    .map(|&(index, _)| index)
                    .collect();
                active.sort_unstable();
                active.dedup();
                for index in active {
                    wrote |= group.metaslabs[index].prepare_sync(storage, txg)?;
                }
            }
            for metaslab in group.metaslabs.iter_mut().filter(|_| log.is_none()) {
                let condensed = metaslab.condense_count;
                wrote |= self.track(metaslab, |metaslab| {
                    metaslab.sync(storage, txg, sync_pass, &self.tunables)
                })?;
                if metaslab.condense_count != condensed {
                    self.stats.condensed();
                }
            }
            if sync_pass == 1 {
                self.preload(&mut group, txg, storage)?;
            }
            let created: Vec<(u64, ObjectId)> = group
                .metaslabs
                .iter()
                .filter(|metaslab| metaslab.map_created)
                .map(|metaslab| (metaslab.id, metaslab.space_map_object()))
                .collect();
            if created.is_empty() {
                continue;
            }
            let array = match group.ms_array {
                Some(array) => array,
                None => {
                    let array = storage.create_object(self.tunables.metaslab_sm_blksz, txg)?;
                    storage.write(array, 0, &vec![0u8; group.metaslabs.len() * 8], txg)?;
                    group.ms_array = Some(array);
                    array
                }
            };
            for (id, object) in created {
                storage.write(array, id * 8, &object.0.to_le_bytes(), txg)?;
                group.metaslabs[id as usize].map_created = false;
            }
            wrote = true;
        }
        if let Some(log) = log.as_mut() {
            wrote |= self.finish_log_pass(log, txg, storage, log_storage)?;
        }
        Ok(wrote)
    }

    /// Is anything allocated or freed in `txg` not yet written?
    pub fn is_dirty(&self, txg: Txg) -> bool {
        self.groups.read().iter().any(|group| {
            group
                .lock()
                .metaslabs
                .iter()
                .any(|metaslab| metaslab.is_dirty(txg))
        })
    }

    /// End of txg `txg`: rotate the defer trees of every metaslab, then unload the metaslabs
    /// not chosen for `metaslab_unload_delay` txgs (OpenZFS `metaslab_class_evict_old`) and,
    /// while the loaded trees exceed `metaslab_mem_limit`, the least recently chosen ones
    /// (never an active metaslab). Costs one pass over the metaslabs, no I/O.
    pub fn sync_done(&self, txg: Txg) {
        let groups = self.groups.read();
        let delay = self.tunables.metaslab_unload_delay;
        let mut memory = 0u64;
        let mut loaded: Vec<(u64, usize, usize)> = Vec::new();
        let mut space = Vec::with_capacity(groups.len());
        for (group_index, group) in groups.iter().enumerate() {
            let mut group = group.lock();
            // Log groups take no share of the normal class's rotor.
            let normal = group.class == AllocClass::Normal;
            space.push((
                group
                    .metaslabs
                    .iter()
                    .filter(|_| normal)
                    .map(Metaslab::free_bytes)
                    .sum::<u64>(),
                if normal { group.covered_size() } else { 0 },
            ));
            for index in 0..group.metaslabs.len() {
                let metaslab = &mut group.metaslabs[index];
                self.track(metaslab, |metaslab| metaslab.sync_done(txg));
                if !metaslab.is_loaded() {
                    continue;
                }
                if txg.0 > metaslab.selected_txg.saturating_add(delay)
                    && group.unload(index, self) > 0
                {
                    continue;
                }
                let metaslab = &group.metaslabs[index];
                if metaslab.is_loaded() {
                    memory += metaslab.memory_bytes();
                    if !group.is_active(index) {
                        loaded.push((metaslab.selected_txg, group_index, index));
                    }
                }
            }
        }
        self.rotor.lock().space = space;
        self.loaded_memory.store(memory, Ordering::Relaxed);
        if memory > self.tunables.metaslab_mem_limit {
            loaded.sort_unstable();
            for (_, group_index, index) in loaded {
                if self.loaded_memory.load(Ordering::Relaxed) <= self.tunables.metaslab_mem_limit {
                    break;
                }
                groups[group_index].lock().unload(index, self);
            }
        }
        *self.last_synced.lock() = Some(txg);
    }

    /// Pass 1 of `txg`, after the group's maps are written: if the group's first-copy
    /// metaslab was chosen in this txg (the group is taking data), keep the
    /// `metaslab_preload_limit` heaviest metaslabs loaded, the active ones counted among them:
    /// the ones the allocator moves to next, so that switching to them does not wait for a
    /// space-map read in the middle of an allocation (OpenZFS `metaslab_group_preload`, which
    /// walks the weight-sorted tree and counts every metaslab it passes, loaded or not).
    /// Within `metaslab_mem_limit` only. Each one counts as chosen in `txg`, so it stays while
    /// the group is busy and is unloaded by the idle rule once the group goes quiet.
    ///
    /// Counting only the unloaded ones, as this once did, loaded three more every busy txg
    /// until every metaslab was loaded, and then, as the idle rule unloaded the ones loaded
    /// `metaslab_unload_delay` txgs before, three again every txg: a steady stream of
    /// space-map reads, 40% of a one-block txg's time on a pool whose maps had grown long.
    fn preload(
        &self,
        group: &mut Group,
        txg: Txg,
        storage: &dyn SpaceStorage,
    ) -> Result<(), SpaceError> {
        let busy =
            group.active[0].is_some_and(|(index, _)| group.metaslabs[index].selected_txg == txg.0);
        if !busy || self.tunables.metaslab_preload_limit == 0 {
            return Ok(());
        }
        let mut heaviest: Vec<(bool, u64, usize)> = (0..group.metaslabs.len())
            .map(|index| {
                (
                    group.is_active(index),
                    group.metaslabs[index].weight(),
                    index,
                )
            })
            .filter(|&(active, weight, _)| active || weight > 0)
            .collect();
        // Active first, then by weight, heaviest first.
        heaviest.sort_by(|left, right| {
            right
                .0
                .cmp(&left.0)
                .then(right.1.cmp(&left.1))
                .then(left.2.cmp(&right.2))
        });
        let last_synced = self.last_synced_before(txg);
        for (active, _, index) in heaviest
            .into_iter()
            .take(self.tunables.metaslab_preload_limit as usize)
        {
            if active {
                continue;
            }
            let metaslab = &mut group.metaslabs[index];
            if !metaslab.is_loaded() {
                if self.loaded_memory.load(Ordering::Relaxed) > self.tunables.metaslab_mem_limit {
                    break;
                }
                self.track(metaslab, |metaslab| metaslab.load(storage, last_synced))?;
                self.stats.loaded();
                self.loaded_memory
                    .fetch_add(metaslab.memory_bytes(), Ordering::Relaxed);
            }
            metaslab.selected_txg = txg.0;
        }
        Ok(())
    }

    /// The space layer's figures since the last call (one txg's, when the sync driver calls it
    /// after each txg), and reset them. `spacemap_writes` is in blocks, one copy each.
    /// Count a block written as a gang in the current txg (`gang_blocks` of `tarn stat txgs`).
    pub fn record_gang_block(&self) {
        self.stats.gang_block();
    }

    pub fn take_txg_stats(&self) -> SpaceTxgStats {
        self.stats.take()
    }

    /// Bytes of loaded metaslab free trees, pool-wide.
    pub fn loaded_memory(&self) -> u64 {
        self.loaded_memory.load(Ordering::Relaxed)
    }

    /// Pool-wide space totals from the counters: no lock, no scan; never waits for the sync
    /// thread (write admission reads this). Equal to [`SpaceManager::totals`] whenever no
    /// operation is in progress.
    pub fn counters(&self) -> SpaceTotals {
        self.counters[AllocClass::Normal.index()].totals()
    }

    /// Run `work` while holding the lock of `vdev`'s metaslab group, as the sync thread does
    /// during a group's sync or a metaslab load (for tests that check what does not wait for it).
    #[doc(hidden)]
    pub fn while_group_locked<T>(&self, vdev: VdevId, work: impl FnOnce() -> T) -> T {
        let groups = self.groups.read();
        let _locked = groups
            .iter()
            .map(|group| group.lock())
            .find(|group| group.vdev == vdev)
            .expect("no such vdev");
        work()
    }

    /// Space totals of the normal class (the pool's size and free space: log vdevs are not
    /// counted, as zpool does not), summed over every metaslab under the group locks (exact;
    /// waits for a group's sync to finish). Admission uses [`SpaceManager::counters`] instead.
    pub fn totals(&self) -> SpaceTotals {
        self.class_totals(AllocClass::Normal)
    }

    /// Space totals of the vdevs of `class`, as [`SpaceManager::totals`].
    pub fn class_totals(&self, class: AllocClass) -> SpaceTotals {
        let groups = self.groups.read();
        let mut totals = SpaceTotals::default();
        for group in groups.iter() {
            let group = group.lock();
            if group.class != class {
                continue;
            }
            totals.size += group.covered_size();
            for metaslab in &group.metaslabs {
                totals.allocated += metaslab.allocated_bytes();
                totals.free += metaslab.free_bytes();
                totals.deferred += metaslab.deferred_bytes();
            }
        }
        totals
    }
}

#[cfg(test)]
mod log_tests;
#[cfg(test)]
mod tests;
