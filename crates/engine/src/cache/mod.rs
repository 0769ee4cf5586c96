//! Cache layer: the ARC, a bounded adaptive cache of blocks kept as stored (compressed), keyed
//! by block identity (OpenZFS arc.c).
//!
//! # Overview
//!
//! This is the block cache of DESIGN.md §4 "Buffers and cache". It sits under the buffer
//! layer: a read first asks the cache for a block's logical (decompressed, verified) contents
//! and only goes to the read pipeline on a miss, after which the pipeline inserts what it read.
//! Replacement is ARC's (see [`arc`]): MRU and MFU lists with ghost lists, for data and for
//! metadata, adapting the MRU share and the metadata share from ghost hits; blocks read by
//! prefetch are protected briefly; an MRU block is promoted only when reused after
//! `ARC_MINTIME`.
//!
//! # Compressed ARC
//!
//! As OpenZFS with `zfs_compressed_arc_enabled` = 1 (tunable `compressed_arc_enabled`), a
//! compressed block is kept as its stored bytes, the ones its block pointer's checksum covers
//! ([`CachedBlock`]), so the cache holds as many blocks as the pool's compression allows and
//! the L2ARC feed writes them as they are. Its size in the cache is the stored bytes
//! (`compressed_size`; `uncompressed_size` is the logical bytes of the same entries). A hit
//! decompresses into a new buffer for the caller, outside the shard's lock. Hot metadata
//! (indirect blocks, key/value blocks, dnode blocks) is read on nearly every operation, and a
//! small read of a large record decompresses the whole record, so a compressed entry also
//! keeps its decompressed copy while it is among the most recently used of its kind within
//! `arc_meta_decoded_percent` (10) or `arc_data_decoded_percent` (3) of the target
//! (`overhead_size`, counted in the cache's size, as OpenZFS counts the arc_bufs its dbuf
//! caches hold: `dbuf_metadata_cache` and `dbuf_cache`, 1/64 and 1/32 of the target).
//! Uncompressed blocks are kept once, as their contents.
//!
//! # Identity
//!
//! A block is named by its first DVA's `(vdev, offset)` and its *physical* birth txg
//! ([`BlockKey::of`]). Under copy-on-write that triple names one immutable content: a live block
//! is never overwritten (invariant 1), and space freed in txg T is reallocated no earlier than
//! T + 2 (invariant 3), so a block later written at the same offset has a later birth. The
//! cache belongs to one pool, so the pool is not part of the key. Holes and embedded blocks
//! have no key: their contents come from the pointer itself.
//!
//! Two exceptions exist inside the syncing txg, and the write pipeline must handle them by
//! calling [`BlockCache::remove`] (or inserting the new contents): a block born in the syncing
//! txg may be rewritten in place by a later sync pass, and a block born and freed in the same
//! syncing txg may be reallocated at once. Both keep `(vdev, offset, birth)` while the bytes
//! change.
//!
//! # On-disk structures
//!
//! None: the cache is memory only and starts empty at import.
//!
//! # Invariants
//!
//! - Live bytes never exceed the target `c` (= `arc_max`) after any operation returns; a
//!   buffer larger than a shard's share is not cached. Ghost bytes stay within `c` too.
//! - Every entry is in exactly one list, and the per-list byte counts are the sums of their
//!   entries (checked in tests after every operation).
//!
//! # Locking
//!
//! The cache is split into shards by key hash (up to [`SHARDS_MAX`], each at least
//! [`SHARD_MIN_BYTES`] of the floor `c_min`), each an independent ARC behind its own mutex, so reads
//! of different blocks rarely meet on a lock (no global mutex on the read path). A shard lock
//! is never held across I/O or a call out of this module; contents are shared as
//! `Arc<Vec<u8>>`, so a reader keeps its buffer after eviction without copying.
//!
//! # Operations
//!
//! `get` (counts a demand or prefetch hit or miss of data or metadata, moves the block),
//! `insert`, `remove`, `clear`, `contains`, and `stats` for the arcstats-like counters.
//!
//! # Crash behaviour
//!
//! Nothing to recover: the cache holds only copies of verified, durable-or-syncing blocks.

pub mod arc;
mod caching;
pub mod l2arc;
pub mod pressure;

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::blkptr::{BlockError, BlockPtr, Compression};
pub use crate::block::caching::{BlockKind, CachePolicy, ReadFor};
use crate::types::{Txg, VdevId};

use arc::{Access, Hit, Shard, State};

/// Decoded copies of compressed blocks a cache keeps by default, per kind (data, metadata), in
/// percent of its target (tunables `arc_data_decoded_percent`, `arc_meta_decoded_percent`).
pub const DECODED_PERCENT_DEFAULT: [u64; 2] = [3, 10];

/// A block as the cache keeps it: its stored bytes, compressed with `compression` (the bytes
/// the block pointer's checksum covers, zero padding included), or with `compression` Off its
/// contents.
#[derive(Clone, Debug)]
pub struct CachedBlock {
    pub bytes: Arc<Vec<u8>>,
    pub compression: Compression,
    pub size_logical: u32,
}

impl CachedBlock {
    /// A block kept as its contents.
    pub fn logical(contents: Arc<Vec<u8>>) -> CachedBlock {
        CachedBlock {
            size_logical: contents.len() as u32,
            bytes: contents,
            compression: Compression::Off,
        }
    }

    pub fn is_compressed(&self) -> bool {
        self.compression != Compression::Off
    }

    /// The block's contents (decompressed into a new buffer when kept compressed).
    pub fn contents(&self) -> Result<Arc<Vec<u8>>, BlockError> {
        if !self.is_compressed() {
            return Ok(self.bytes.clone());
        }
        crate::block::compress::decompress(
            self.compression,
            &self.bytes,
            self.size_logical as usize,
        )
        .map(Arc::new)
    }
}

/// Most shards a cache is split into.
pub const SHARDS_MAX: u64 = 16;
/// Least target bytes per shard at the floor `c_min` (so that a shard shrunk as far as it goes
/// still holds a few of the largest blocks).
pub const SHARD_MIN_BYTES: u64 = 4 << 20;

/// The identity of a block's contents: first DVA's vdev and offset, and physical birth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    pub vdev: VdevId,
    pub offset: u64,
    pub birth: Txg,
}

impl BlockKey {
    /// The key of the block `pointer` points to, or `None` for holes and embedded blocks,
    /// which have no stored contents to cache.
    pub fn of(pointer: &BlockPtr) -> Option<BlockKey> {
        if pointer.embedded {
            return None;
        }
        let first = pointer.copies().next()?;
        Some(BlockKey {
            vdev: first.vdev,
            offset: first.offset,
            birth: pointer.birth_physical,
        })
    }
}

/// A [`CachePolicy`] that can change while readers use it (a property set).
#[derive(Debug, Default)]
pub struct SharedCachePolicy(std::sync::atomic::AtomicU8);

impl SharedCachePolicy {
    pub fn get(&self) -> CachePolicy {
        CachePolicy::from_u8(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }

    pub fn set(&self, policy: CachePolicy) {
        self.0
            .store(policy.to_u8(), std::sync::atomic::Ordering::Relaxed);
    }
}

/// Event counters of a shard (summed over shards in [`BlockCacheStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheCounters {
    pub hits: u64,
    pub misses: u64,
    pub demand_data_hits: u64,
    pub demand_data_misses: u64,
    pub demand_metadata_hits: u64,
    pub demand_metadata_misses: u64,
    pub prefetch_data_hits: u64,
    pub prefetch_data_misses: u64,
    pub prefetch_metadata_hits: u64,
    pub prefetch_metadata_misses: u64,
    pub mru_hits: u64,
    pub mfu_hits: u64,
    pub mru_ghost_hits: u64,
    pub mfu_ghost_hits: u64,
    /// Buffers stored by `insert` (replacements included; refused buffers not).
    pub inserted: u64,
    /// Entries moved to a ghost list to respect the target.
    pub evicted: u64,
    /// Recently prefetched entries eviction passed over.
    pub evict_skip: u64,
    /// Live entries dropped by `remove` or `clear`.
    pub removed: u64,
    /// `insert` calls refused because the buffer alone exceeds a shard's target.
    pub refused: u64,
    /// Hits that decompressed the stored bytes (no decoded copy was kept).
    #[serde(default)]
    pub decompressed: u64,
}

impl CacheCounters {
    fn slot(&mut self, access: Access, hit: bool) -> &mut u64 {
        match (access.prefetch, access.kind, hit) {
            (false, BlockKind::Data, true) => &mut self.demand_data_hits,
            (false, BlockKind::Data, false) => &mut self.demand_data_misses,
            (false, BlockKind::Metadata, true) => &mut self.demand_metadata_hits,
            (false, BlockKind::Metadata, false) => &mut self.demand_metadata_misses,
            (true, BlockKind::Data, true) => &mut self.prefetch_data_hits,
            (true, BlockKind::Data, false) => &mut self.prefetch_data_misses,
            (true, BlockKind::Metadata, true) => &mut self.prefetch_metadata_hits,
            (true, BlockKind::Metadata, false) => &mut self.prefetch_metadata_misses,
        }
    }

    fn hit(&mut self, access: Access) {
        self.hits += 1;
        *self.slot(access, true) += 1;
    }

    fn miss(&mut self, access: Access) {
        self.misses += 1;
        *self.slot(access, false) += 1;
    }

    fn add(&mut self, other: &CacheCounters) {
        macro_rules! sum {
            ($($field:ident),*) => { $( self.$field += other.$field; )* };
        }
        sum!(
            hits,
            misses,
            demand_data_hits,
            demand_data_misses,
            demand_metadata_hits,
            demand_metadata_misses,
            prefetch_data_hits,
            prefetch_data_misses,
            prefetch_metadata_hits,
            prefetch_metadata_misses,
            mru_hits,
            mfu_hits,
            mru_ghost_hits,
            mfu_ghost_hits,
            inserted,
            evicted,
            evict_skip,
            removed,
            refused,
            decompressed
        );
    }
}

/// A snapshot of the cache's counters and sizes (the arcstats fields, `tarn stat arc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlockCacheStats {
    pub counters: CacheCounters,
    /// Live bytes (`size`): `compressed_size` + `overhead_size`.
    pub size_bytes: u64,
    /// Bytes the live entries keep, compressed when stored so (`compressed_size`).
    #[serde(default)]
    pub compressed_size: u64,
    /// Logical bytes of the live entries (`uncompressed_size`).
    #[serde(default)]
    pub uncompressed_size: u64,
    /// Bytes of the decompressed copies kept beside compressed blocks (`overhead_size`).
    #[serde(default)]
    pub overhead_size: u64,
    /// Live entries.
    pub entries: u64,
    /// Target size (`c`), its floor and ceiling (`c_min`, `c_max`).
    pub c: u64,
    pub c_min: u64,
    pub c_max: u64,
    /// Target MRU bytes (`p`) and target metadata bytes (`meta`).
    pub p: u64,
    pub meta: u64,
    pub data_size: u64,
    pub metadata_size: u64,
    pub mru_size: u64,
    pub mfu_size: u64,
    pub mru_ghost_size: u64,
    pub mfu_ghost_size: u64,
    pub shards: u64,
    /// Times memory pressure shrank the target.
    #[serde(default)]
    pub shrinks: u64,
    /// The L2ARC's counters (filled by the pool, `Pool::arc_stats`).
    #[serde(default)]
    pub l2: l2arc::L2Stats,
}

/// Where the cache's time comes from: the monotonic clock, or a logical one (tests).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

pub fn monotonic_clock() -> Clock {
    let origin = std::time::Instant::now();
    Arc::new(move || origin.elapsed().as_nanos() as u64)
}

/// The pool's ARC: see the module documentation.
pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    hasher: std::collections::hash_map::RandomState,
    clock: Clock,
    c_min: u64,
    c_max: u64,
    shrinks: std::sync::atomic::AtomicU64,
}

impl BlockCache {
    /// An empty cache whose target is `max_bytes` (`arc_max`).
    pub fn new(max_bytes: u64) -> BlockCache {
        BlockCache::with_clock(max_bytes, monotonic_clock())
    }

    /// An empty cache reading time from `clock` (nanoseconds).
    pub fn with_clock(max_bytes: u64, clock: Clock) -> BlockCache {
        BlockCache::with_limits(0, max_bytes, clock)
    }

    /// An empty cache with target and ceiling `max_bytes` and floor `min_bytes` (0: a quarter
    /// of the ceiling, at least 1 MiB), reading time from `clock`.
    pub fn with_limits(min_bytes: u64, max_bytes: u64, clock: Clock) -> BlockCache {
        let c_min = match min_bytes {
            0 => (max_bytes / 4).max(1 << 20),
            bytes => bytes,
        }
        .min(max_bytes);
        let shards = (c_min / SHARD_MIN_BYTES).clamp(1, SHARDS_MAX);
        BlockCache {
            shards: (0..shards)
                .map(|_| Mutex::new(Shard::new(max_bytes / shards)))
                .collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            clock,
            c_min,
            c_max: max_bytes,
            shrinks: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The current target `c`.
    pub fn target(&self) -> u64 {
        self.shards.iter().map(|shard| shard.lock().c).sum()
    }

    /// Set how much of the target decoded copies of compressed blocks of `kind` may take, in
    /// percent (`arc_data_decoded_percent`, `arc_meta_decoded_percent`; 0 keeps none).
    pub fn set_decoded_percent(&self, kind: BlockKind, percent: u64) {
        let now = (self.clock)();
        for shard in &self.shards {
            let mut shard = shard.lock();
            shard.decoded_percent[kind as usize] = percent.min(100);
            let c = shard.c;
            shard.set_target(c, now);
        }
    }

    /// Whether reads update the counters (on by default); off only to measure what counting
    /// costs on the read path (`tarn bench arc`), since every tool reading arcstats needs them.
    pub fn set_read_counters(&self, on: bool) {
        for shard in &self.shards {
            shard.lock().count_reads = on;
        }
    }

    /// Set the target `c` (clamped to [`c_min`, `c_max`]) and evict down to it at once.
    pub fn set_target(&self, c: u64) {
        let c = c.clamp(self.c_min, self.c_max);
        let per_shard = c / self.shards.len() as u64;
        let now = (self.clock)();
        for shard in &self.shards {
            shard.lock().set_target(per_shard, now);
        }
    }

    /// Watch memory (see [`pressure`]) from a thread of its own, shrinking and growing the
    /// target, until the cache is dropped. `arc_sys_free`: free memory to leave the host
    /// (0: 1/32 of memory).
    pub fn start_reaper(self: &Arc<Self>, arc_sys_free: u64) {
        let cache = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("arc_reap".into())
            .spawn(move || {
                let mut calm_since = std::time::Instant::now();
                let mut trimmed = std::time::Instant::now();
                loop {
                    std::thread::sleep(pressure::REAP_INTERVAL);
                    let Some(cache) = cache.upgrade() else {
                        return;
                    };
                    let c = cache.target();
                    let short = pressure::shortfall(&pressure::read_memory(), c, arc_sys_free);
                    if short > 0 {
                        calm_since = std::time::Instant::now();
                    }
                    let may_grow = calm_since.elapsed() >= pressure::GROW_RETRY;
                    let next = pressure::next_target(c, cache.c_min, cache.c_max, short, may_grow);
                    if next < c {
                        cache.set_target(next);
                        cache
                            .shrinks
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        // What the shards evicted went back to the I/O buffers for reuse
                        // (`arc.rs`, `recycle`): under pressure it leaves the process.
                        let held = crate::vdev::buffers::release_held();
                        log::info!(
                            "arc: memory pressure ({short} bytes short): target {c} -> {next} bytes, {held} bytes of I/O buffers freed"
                        );
                        pressure::release_freed_memory();
                    } else if next > c {
                        cache.set_target(next);
                    }
                    // Dirty buffers freed by each txg's sync stay in the allocator's arenas
                    // (written by FUSE threads, freed by the sync thread) unless handed back.
                    if trimmed.elapsed() >= pressure::TRIM_INTERVAL {
                        pressure::release_freed_memory();
                        trimmed = std::time::Instant::now();
                    }
                }
            });
        if let Err(error) = spawned {
            log::warn!(
                "arc: no reaper thread, the ARC will not shrink under memory pressure: {error}"
            );
        }
    }

    fn shard(&self, key: &BlockKey) -> &Mutex<Shard> {
        let mut hasher = self.hasher.build_hasher();
        hasher.write_u32(key.vdev.0);
        hasher.write_u64(key.offset);
        hasher.write_u64(key.birth.0);
        &self.shards[(hasher.finish() % self.shards.len() as u64) as usize]
    }

    /// The cached contents of `key` for a demand read of a block of `kind` (a prefetch when
    /// the calling thread is a prefetch worker: its read class is async read); a compressed
    /// entry is decompressed here, outside the shard's lock.
    pub fn get(&self, key: &BlockKey, kind: BlockKind) -> Option<Arc<Vec<u8>>> {
        self.get_for(key, kind, ReadFor::Use)
    }

    /// [`BlockCache::get`] for `purpose`: a read for [`ReadFor::Rewrite`] keeps no
    /// decompressed copy, so that the caller holds the only reference to what it decompressed.
    pub fn get_for(
        &self,
        key: &BlockKey,
        kind: BlockKind,
        purpose: ReadFor,
    ) -> Option<Arc<Vec<u8>>> {
        let now = (self.clock)();
        let hit = self.shard(key).lock().get(key, access(kind), now)?;
        let block = match hit {
            Hit::Contents(contents) => return Some(contents),
            Hit::Compressed(block) => block,
        };
        match block.contents() {
            Ok(contents) if purpose == ReadFor::Rewrite => Some(contents),
            Ok(contents) => {
                let now = (self.clock)();
                self.shard(key)
                    .lock()
                    .keep_decoded(key, &block.bytes, contents.clone(), now);
                Some(contents)
            }
            Err(error) => {
                // Verified bytes that do not decompress: drop them, the caller reads the pool
                // (and reports the error if the block is damaged on disk too).
                log::warn!("arc: cached block at {key:?} does not decompress: {error}");
                self.remove(key);
                None
            }
        }
    }

    /// Caches `contents` (a block's logical bytes) under `key`, replacing any previous entry.
    /// Returns false, caching nothing, when `contents` alone is larger than a shard's target.
    pub fn insert(&self, key: BlockKey, contents: Arc<Vec<u8>>, kind: BlockKind) -> bool {
        self.insert_block(key, CachedBlock::logical(contents), None, kind, None)
    }

    /// Caches `block` under `key`, replacing any previous entry; `decoded` is its contents
    /// when the caller has them (a compressed block keeps them while its kind's share of
    /// decoded copies allows), `l2` marks the block as one the L2ARC may hold (what its feed
    /// needs of the block pointer). Returns false, caching nothing, when the block's bytes
    /// alone are more than a shard's target.
    pub fn insert_block(
        &self,
        key: BlockKey,
        block: CachedBlock,
        decoded: Option<Arc<Vec<u8>>>,
        kind: BlockKind,
        l2: Option<l2arc::L2Info>,
    ) -> bool {
        let now = (self.clock)();
        let decoded = decoded.filter(|_| block.is_compressed());
        self.shard(&key)
            .lock()
            .insert(key, block, decoded, access(kind), now, l2)
    }

    /// The L2ARC feed's candidates from every shard (see [`arc::Shard::l2_candidates`]);
    /// `headroom` bytes scanned per list, shared among the shards.
    pub fn l2_candidates(
        &self,
        headroom: u64,
        noprefetch: bool,
    ) -> Vec<(BlockKey, CachedBlock, l2arc::L2Info, l2arc::L2Origin)> {
        let per_shard = headroom.div_ceil(self.shards.len() as u64);
        let mut out = Vec::new();
        for shard in &self.shards {
            shard.lock().l2_candidates(per_shard, noprefetch, &mut out);
        }
        out
    }

    /// Whether the cache has evicted since it was made (OpenZFS `arc_warm`): until then the
    /// L2ARC feed may write `l2arc_write_boost` more.
    pub fn is_warm(&self) -> bool {
        self.shards
            .iter()
            .any(|shard| shard.lock().counters.evicted > 0)
    }

    /// Drops `key`'s entry (the block was freed or rewritten), returning what it kept.
    pub fn remove(&self, key: &BlockKey) -> Option<CachedBlock> {
        self.shard(key).lock().remove(key)
    }

    /// Drops every entry, ghosts included. Counters other than the sizes are kept.
    pub fn clear(&self) {
        for shard in &self.shards {
            shard.lock().clear();
        }
    }

    /// Whether `key` is cached, without counting a hit or miss or moving it.
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.shard(key).lock().contains(key)
    }

    /// A snapshot of the counters and sizes, summed over the shards.
    pub fn stats(&self) -> BlockCacheStats {
        let mut stats = BlockCacheStats {
            c_min: self.c_min,
            c_max: self.c_max,
            shards: self.shards.len() as u64,
            shrinks: self.shrinks.load(std::sync::atomic::Ordering::Relaxed),
            ..BlockCacheStats::default()
        };
        for shard in &self.shards {
            let shard = shard.lock();
            stats.counters.add(&shard.counters);
            stats.size_bytes += shard.live();
            stats.compressed_size += shard.stored();
            stats.uncompressed_size += shard.uncompressed;
            stats.overhead_size += shard.overhead();
            stats.data_size += shard.overhead[BlockKind::Data as usize];
            stats.metadata_size += shard.overhead[BlockKind::Metadata as usize];
            stats.entries += shard.live_entries();
            stats.c += shard.c;
            stats.p += shard.p;
            stats.meta += shard.meta;
            for kind in [BlockKind::Data, BlockKind::Metadata] {
                let live = shard.bytes(State::Mru, kind) + shard.bytes(State::Mfu, kind);
                match kind {
                    BlockKind::Data => stats.data_size += live,
                    BlockKind::Metadata => stats.metadata_size += live,
                }
                stats.mru_size += shard.bytes(State::Mru, kind);
                stats.mfu_size += shard.bytes(State::Mfu, kind);
                stats.mru_ghost_size += shard.bytes(State::MruGhost, kind);
                stats.mfu_ghost_size += shard.bytes(State::MfuGhost, kind);
            }
        }
        stats
    }
}

/// The access a read of `kind` from the calling thread is: prefetch workers read in the async
/// read class.
fn access(kind: BlockKind) -> Access {
    Access {
        kind,
        prefetch: crate::vdev::queue::read_class() == crate::vdev::IoClass::AsyncRead,
    }
}

#[cfg(test)]
mod tests;
