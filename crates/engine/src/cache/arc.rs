//! One shard of the adaptive replacement cache (OpenZFS arc.c, after Megiddo and Modha's ARC).
//!
//! # Theory
//! Blocks live in one of two lists: MRU, for blocks used once lately, and MFU, for blocks used
//! at least twice (more than [`ARC_MINTIME_NS`] apart, so that the several reads of one
//! operation do not count as reuse). Each list has a *ghost* list: the keys and sizes of blocks
//! evicted from it, without their contents. A miss on a ghost key is a sign that the list it
//! names was too small: a hit in the MRU ghost raises `p`, the share of the cache the MRU may
//! keep; a hit in the MFU ghost lowers it. A long sequential read fills the MRU and pushes
//! out only MRU blocks (the MFU keeps its hot set unless `p` grows, which takes ghost hits):
//! that is the scan resistance an LRU lacks.
//!
//! Data and metadata (indirect blocks, dnodes, directories, MOS objects) are kept in separate
//! lists within each state, as the current OpenZFS ARC does, with a second adaptive target:
//! the metadata share `meta`, raised by ghost hits on metadata (weighted by
//! [`META_BALANCE`], OpenZFS's `zfs_arc_meta_balance` of 500%: metadata is favoured, since a
//! missing indirect block costs a read before every data read under it) and lowered by ghost
//! hits on data. Eviction takes from the state that is over its target, and within it from
//! the kind that is over its target.
//!
//! A block read by prefetch enters the MRU marked as prefetched: its first demand read is
//! counted as its first use (it stays in the MRU), and for [`PREFETCH_MIN_NS`] after it was
//! read eviction passes it over, so that the reader it was fetched for finds it.
//!
//! # Compressed entries
//! An entry keeps a [`CachedBlock`]: the block's bytes as stored (compressed) or its logical
//! bytes, and its size in the lists is the bytes kept (OpenZFS's compressed ARC, which counts
//! `psize`). A hit on a compressed entry hands out the stored bytes for the caller to
//! decompress ([`Hit::Compressed`]), outside the lock. A compressed entry may also hold a
//! decompressed copy (`decoded`, OpenZFS's `overhead_size`: the arc_bufs its dbuf caches keep
//! of hot blocks), so that a hot indirect, key/value or data block is not decompressed on
//! every hit. Decoded copies are kept in a least-recently-used order per kind, within
//! `decoded_percent[kind]` of the target (metadata's share larger: it is read on nearly every
//! operation), and count towards the live bytes.
//!
//! # Cost
//! Every operation is O(log n) in the shard (a hash map for entries, one ordered map per list
//! keyed by a generation number); ghost lists are bounded so that live and ghost bytes together
//! stay under twice the target.
//!
//! Time comes from the cache's clock (nanoseconds), a logical clock in tests.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::l2arc::{L2Info, L2Origin};
use super::{BlockKey, BlockKind, CacheCounters, CachedBlock};

/// A block in the MRU is promoted to the MFU only when used again at least this long after its
/// first use (OpenZFS ARC_MINTIME, about 62 ms).
pub const ARC_MINTIME_NS: u64 = 62_500_000;
/// Prefetched blocks are not evicted for this long after they were read (zfs_arc_min_prefetch_ms).
pub const PREFETCH_MIN_NS: u64 = 1_000_000_000;
/// Ghost hits on metadata count this many percent of ghost hits on data when adapting the
/// metadata share (zfs_arc_meta_balance).
pub const META_BALANCE: u64 = 500;
/// How many protected (recently prefetched) entries eviction passes over before it evicts one
/// anyway.
const EVICT_SKIP_MAX: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Mru = 0,
    Mfu = 1,
    MruGhost = 2,
    MfuGhost = 3,
}

impl State {
    fn is_ghost(self) -> bool {
        matches!(self, State::MruGhost | State::MfuGhost)
    }

    fn ghost(self) -> State {
        match self {
            State::Mru | State::MruGhost => State::MruGhost,
            State::Mfu | State::MfuGhost => State::MfuGhost,
        }
    }
}

/// An evicted block's bytes go back to the I/O buffers (`vdev/buffers.rs`) when the cache held
/// the last reference: in a steady stream of misses each read then takes the buffer an
/// eviction gave back, instead of memory the allocator must fault in and zero (a fifth of a
/// cold sequential read's CPU time went to page faults and clearing before this).
fn recycle(bytes: Arc<Vec<u8>>) {
    if let Ok(buffer) = Arc::try_unwrap(bytes) {
        crate::vdev::buffers::give(buffer);
    }
}

fn list_index(state: State, kind: BlockKind) -> usize {
    state as usize * 2 + kind as usize
}

struct Entry {
    /// `None` in a ghost list.
    block: Option<CachedBlock>,
    /// A decompressed copy of a compressed block, listed in `Shard::decoded[kind]` under
    /// `decoded_generation`.
    decoded: Option<Arc<Vec<u8>>>,
    decoded_generation: u64,
    /// Bytes kept (`block`'s; in a ghost list, what they were).
    size: u64,
    state: State,
    kind: BlockKind,
    generation: u64,
    /// When the block was last used in a way that counts (clock ns).
    accessed: u64,
    /// Read by prefetch and not yet by a demand read.
    prefetched: bool,
    /// What the L2ARC feed needs, when the block may go there (`secondarycache`).
    l2: Option<L2Info>,
}

/// One shard: its entries, its eight lists and its targets.
pub struct Shard {
    entries: HashMap<BlockKey, Entry>,
    /// Per (state, kind): generation → key, oldest first.
    lists: [BTreeMap<u64, BlockKey>; 8],
    /// Bytes per (state, kind).
    sizes: [u64; 8],
    generation: u64,
    /// Per kind, entries holding a decoded copy: generation of its last use → key, oldest
    /// first.
    decoded: [BTreeMap<u64, BlockKey>; 2],
    /// Bytes of the decoded copies per kind (summed: `overhead_size`).
    pub overhead: [u64; 2],
    /// Logical bytes of the live entries (`uncompressed_size`).
    pub uncompressed: u64,
    /// Most bytes of decoded copies per kind, in percent of `c`.
    pub decoded_percent: [u64; 2],
    /// Target live bytes.
    pub c: u64,
    /// Target bytes of the MRU.
    pub p: u64,
    /// Target bytes of metadata.
    pub meta: u64,
    pub counters: CacheCounters,
    /// Whether reads update `counters` (hits, misses, MRU/MFU and ghost hits, decompressions);
    /// off only to measure what counting costs on the read path (`tarn bench arc`).
    pub count_reads: bool,
}

/// What a hit hands out: the block's contents, or its stored bytes to decompress.
#[derive(Clone, Debug)]
pub enum Hit {
    Contents(Arc<Vec<u8>>),
    Compressed(CachedBlock),
}

/// Whether a read is on demand or by prefetch, and of what kind of block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub kind: BlockKind,
    pub prefetch: bool,
}

impl Shard {
    pub fn new(c: u64) -> Shard {
        Shard {
            entries: HashMap::new(),
            lists: Default::default(),
            sizes: [0; 8],
            generation: 0,
            decoded: Default::default(),
            overhead: [0; 2],
            uncompressed: 0,
            decoded_percent: super::DECODED_PERCENT_DEFAULT,
            c,
            p: c / 2,
            meta: c / 2,
            counters: CacheCounters::default(),
            count_reads: true,
        }
    }

    fn size_of(&self, state: State) -> u64 {
        self.sizes[list_index(state, BlockKind::Data)]
            + self.sizes[list_index(state, BlockKind::Metadata)]
    }

    fn kind_size(&self, kind: BlockKind) -> u64 {
        self.sizes[list_index(State::Mru, kind)] + self.sizes[list_index(State::Mfu, kind)]
    }

    /// Live bytes: the bytes kept by MRU and MFU entries and their decoded copies.
    pub fn live(&self) -> u64 {
        self.stored() + self.overhead()
    }

    /// Bytes of the decoded copies.
    pub fn overhead(&self) -> u64 {
        self.overhead[0] + self.overhead[1]
    }

    /// Bytes kept by MRU and MFU entries (`compressed_size`).
    pub fn stored(&self) -> u64 {
        self.size_of(State::Mru) + self.size_of(State::Mfu)
    }

    /// Most bytes decoded copies of `kind` may take.
    fn decoded_max(&self, kind: BlockKind) -> u64 {
        let percent = self.decoded_percent[kind as usize];
        self.c / 100 * percent + self.c % 100 * percent / 100
    }

    pub fn live_entries(&self) -> u64 {
        (self.lists[0].len() + self.lists[1].len() + self.lists[2].len() + self.lists[3].len())
            as u64
    }

    /// Bytes by (state, kind), for the counters.
    pub fn bytes(&self, state: State, kind: BlockKind) -> u64 {
        self.sizes[list_index(state, kind)]
    }

    /// Take `key`'s entry out of its list (its decoded copy, if any, stays listed: see
    /// [`Shard::forget_decoded`]).
    fn unlink(&mut self, key: &BlockKey) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        let index = list_index(entry.state, entry.kind);
        self.lists[index].remove(&entry.generation);
        self.sizes[index] -= entry.size;
        if let Some(block) = &entry.block {
            self.uncompressed -= u64::from(block.size_logical);
        }
        Some(entry)
    }

    /// Drop `entry`'s decoded copy (the entry is being dropped, evicted or replaced).
    fn forget_decoded(&mut self, entry: &mut Entry) {
        if let Some(decoded) = entry.decoded.take() {
            self.decoded[entry.kind as usize].remove(&entry.decoded_generation);
            self.overhead[entry.kind as usize] -= decoded.len() as u64;
            recycle(decoded);
        }
    }

    /// Give `key`'s live, compressed entry (whose stored bytes are `bytes`, so that a replaced
    /// entry is not given another block's copy) the decompressed copy `decoded`, if it fits
    /// within its kind's share of the target; the oldest copies of that kind make room.
    fn attach_decoded(&mut self, key: &BlockKey, bytes: &Arc<Vec<u8>>, decoded: Arc<Vec<u8>>) {
        let size = decoded.len() as u64;
        let Some(entry) = self.entries.get(key) else {
            return;
        };
        let kind = entry.kind;
        let max = self.decoded_max(kind);
        let fits = entry.decoded.is_none()
            && size <= max
            && entry.block.as_ref().is_some_and(|block| {
                block.is_compressed()
                    && Arc::ptr_eq(&block.bytes, bytes)
                    && u64::from(block.size_logical) == size
            });
        if !fits {
            return;
        }
        self.generation += 1;
        let generation = self.generation;
        let entry = self.entries.get_mut(key).expect("present");
        entry.decoded = Some(decoded);
        entry.decoded_generation = generation;
        self.decoded[kind as usize].insert(generation, *key);
        self.overhead[kind as usize] += size;
        self.trim_decoded(kind);
    }

    /// Drop the least recently used decoded copies of `kind` until they are within its share.
    fn trim_decoded(&mut self, kind: BlockKind) {
        let max = self.decoded_max(kind);
        let index = kind as usize;
        while self.overhead[index] > max {
            let Some((_, key)) = self.decoded[index].pop_first() else {
                break;
            };
            if let Some(decoded) = self.entries.get_mut(&key).and_then(|e| e.decoded.take()) {
                self.overhead[index] -= decoded.len() as u64;
                recycle(decoded);
            }
        }
    }

    /// Put `entry` at the head (newest end) of its state's list.
    fn link(&mut self, key: BlockKey, mut entry: Entry) {
        self.generation += 1;
        entry.generation = self.generation;
        let index = list_index(entry.state, entry.kind);
        self.lists[index].insert(entry.generation, key);
        self.sizes[index] += entry.size;
        if let Some(block) = &entry.block {
            self.uncompressed += u64::from(block.size_logical);
        }
        self.entries.insert(key, entry);
    }

    /// A read of `key`: on a hit, the contents or the stored bytes to decompress, moving the
    /// block as ARC does.
    pub fn get(&mut self, key: &BlockKey, access: Access, now: u64) -> Option<Hit> {
        let count = self.count_reads;
        let Some(entry) = self.entries.get(key) else {
            if count {
                self.counters.miss(access);
            }
            return None;
        };
        match entry.state {
            State::MruGhost | State::MfuGhost => {
                if count {
                    if entry.state == State::MruGhost {
                        self.counters.mru_ghost_hits += 1;
                    } else {
                        self.counters.mfu_ghost_hits += 1;
                    }
                    self.counters.miss(access);
                }
                None
            }
            state => {
                if count {
                    self.counters.hit(access);
                    if state == State::Mru {
                        self.counters.mru_hits += 1;
                    } else {
                        self.counters.mfu_hits += 1;
                    }
                }
                let mut entry = self.unlink(key).expect("present");
                let hit = match (&entry.decoded, &entry.block) {
                    (Some(decoded), _) => {
                        // The decoded copy is used: it becomes the newest.
                        let list = &mut self.decoded[entry.kind as usize];
                        list.remove(&entry.decoded_generation);
                        self.generation += 1;
                        entry.decoded_generation = self.generation;
                        list.insert(self.generation, *key);
                        Hit::Contents(decoded.clone())
                    }
                    (None, Some(block)) if block.is_compressed() => {
                        if count {
                            self.counters.decompressed += 1;
                        }
                        Hit::Compressed(block.clone())
                    }
                    (None, Some(block)) => Hit::Contents(block.bytes.clone()),
                    (None, None) => unreachable!("a live entry has its block"),
                };
                if entry.prefetched && !access.prefetch {
                    // The first demand read of a prefetched block is its first use.
                    entry.prefetched = false;
                    entry.accessed = now;
                } else if state == State::Mru {
                    if now.saturating_sub(entry.accessed) > ARC_MINTIME_NS {
                        entry.state = State::Mfu;
                        entry.accessed = now;
                    }
                } else {
                    entry.accessed = now;
                }
                self.link(*key, entry);
                Some(hit)
            }
        }
    }

    /// After a hit handed out `bytes` to decompress: keep the decompressed copy `decoded` with
    /// the entry if its kind's share allows (see the module documentation).
    pub fn keep_decoded(
        &mut self,
        key: &BlockKey,
        bytes: &Arc<Vec<u8>>,
        decoded: Arc<Vec<u8>>,
        now: u64,
    ) {
        self.attach_decoded(key, bytes, decoded);
        self.evict(now);
    }

    /// Cache `block` under `key` after a read (or a write), with `decoded`, its contents, when
    /// the caller has them (kept for a compressed block within its kind's share); returns
    /// false, caching nothing, when the block is larger than the shard's target.
    pub fn insert(
        &mut self,
        key: BlockKey,
        block: CachedBlock,
        decoded: Option<Arc<Vec<u8>>>,
        access: Access,
        now: u64,
        l2: Option<L2Info>,
    ) -> bool {
        let size = block.bytes.len() as u64;
        let mut previous = self.unlink(&key);
        if let Some(previous) = previous.as_mut() {
            self.forget_decoded(previous);
        }
        if size > self.c {
            self.counters.refused += 1;
            if previous
                .as_ref()
                .is_some_and(|entry| !entry.state.is_ghost())
            {
                self.counters.removed += 1;
            }
            return false;
        }
        let state = match &previous {
            Some(previous) if previous.state.is_ghost() => {
                self.adapt(previous.state, previous.kind, previous.size);
                State::Mfu
            }
            // A replacement (a block rewritten in place in its own txg) keeps its place.
            Some(previous) => previous.state,
            None => State::Mru,
        };
        let bytes = block.bytes.clone();
        self.link(
            key,
            Entry {
                block: Some(block),
                decoded: None,
                decoded_generation: 0,
                size,
                state,
                kind: access.kind,
                generation: 0,
                accessed: now,
                prefetched: access.prefetch && state == State::Mru,
                l2,
            },
        );
        self.counters.inserted += 1;
        if let Some(decoded) = decoded {
            self.attach_decoded(&key, &bytes, decoded);
        }
        self.evict(now);
        true
    }

    /// Set the target to `c` (memory pressure shrinks it, calm grows it back), evicting at once
    /// down to it.
    pub fn set_target(&mut self, c: u64, now: u64) {
        self.c = c.max(1);
        self.p = self.p.min(self.c);
        self.meta = self.meta.min(self.c - self.c / 8).max(self.c / 8);
        self.evict(now);
    }

    /// A ghost hit on a block of `size` bytes that had been evicted from `ghost`'s list.
    fn adapt(&mut self, ghost: State, kind: BlockKind, size: u64) {
        let (mru_ghost, mfu_ghost) = (self.size_of(State::MruGhost), self.size_of(State::MfuGhost));
        if ghost == State::MruGhost {
            let delta = (size * mfu_ghost / mru_ghost.max(1)).max(size);
            self.p = (self.p + delta).min(self.c);
        } else {
            let delta = (size * mru_ghost / mfu_ghost.max(1)).max(size);
            self.p = self.p.saturating_sub(delta);
        }
        // The metadata share moves with ghost hits of each kind, metadata weighted up.
        let (floor, ceiling) = (self.c / 8, self.c - self.c / 8);
        self.meta = match kind {
            BlockKind::Metadata => (self.meta + size * META_BALANCE / 100).min(ceiling),
            BlockKind::Data => self.meta.saturating_sub(size).max(floor),
        };
    }

    /// Trim the decoded copies to their budget, evict until the live bytes are within `c`,
    /// then trim the ghost lists.
    fn evict(&mut self, now: u64) {
        self.trim_decoded(BlockKind::Data);
        self.trim_decoded(BlockKind::Metadata);
        while self.live() > self.c {
            let mru = self.size_of(State::Mru);
            let listed = |shard: &Shard, state| {
                [BlockKind::Data, BlockKind::Metadata]
                    .iter()
                    .any(|&kind| !shard.lists[list_index(state, kind)].is_empty())
            };
            if !listed(self, State::Mru) && !listed(self, State::Mfu) {
                break;
            }
            let state = if (mru > self.p && listed(self, State::Mru)) || !listed(self, State::Mfu) {
                State::Mru
            } else {
                State::Mfu
            };
            let metadata =
                self.kind_size(BlockKind::Metadata) + self.overhead[BlockKind::Metadata as usize];
            let has = |kind| !self.lists[list_index(state, kind)].is_empty();
            let kind =
                if (metadata > self.meta && has(BlockKind::Metadata)) || !has(BlockKind::Data) {
                    BlockKind::Metadata
                } else {
                    BlockKind::Data
                };
            let victim = self.victim(state, kind, now);
            let mut entry = self.unlink(&victim).expect("listed");
            self.forget_decoded(&mut entry);
            if let Some(block) = entry.block.take() {
                recycle(block.bytes);
            }
            entry.l2 = None;
            entry.state = state.ghost();
            entry.prefetched = false;
            self.link(victim, entry);
            self.counters.evicted += 1;
        }
        while self.size_of(State::MruGhost) + self.size_of(State::MfuGhost) > self.c {
            let state = if self.size_of(State::MruGhost) >= self.size_of(State::MfuGhost) {
                State::MruGhost
            } else {
                State::MfuGhost
            };
            let oldest = [BlockKind::Data, BlockKind::Metadata]
                .into_iter()
                .filter_map(|kind| self.lists[list_index(state, kind)].first_key_value())
                .min_by_key(|(generation, _)| **generation)
                .map(|(_, key)| *key)
                .expect("a non-empty ghost list");
            self.unlink(&oldest);
        }
    }

    /// The oldest entry of (state, kind), passing over recently prefetched blocks (a bounded
    /// number of them).
    fn victim(&mut self, state: State, kind: BlockKind, now: u64) -> BlockKey {
        let list = &self.lists[list_index(state, kind)];
        let mut first = None;
        let mut skipped = 0;
        let mut chosen = None;
        for (_, key) in list.iter().take(EVICT_SKIP_MAX) {
            first.get_or_insert(*key);
            let entry = &self.entries[key];
            if entry.prefetched && now.saturating_sub(entry.accessed) < PREFETCH_MIN_NS {
                skipped += 1;
                continue;
            }
            chosen = Some(*key);
            break;
        }
        self.counters.evict_skip += skipped;
        chosen.or(first).expect("the chosen list is not empty")
    }

    /// The L2ARC feed's candidates: from the oldest end of MFU metadata, MRU metadata, MFU data
    /// and MRU data (OpenZFS `l2arc_get_list` order), entries carrying [`L2Info`] and, with
    /// `noprefetch`, not read by prefetch only; each list scanned up to `headroom` bytes.
    pub fn l2_candidates(
        &self,
        headroom: u64,
        noprefetch: bool,
        out: &mut Vec<(BlockKey, CachedBlock, L2Info, L2Origin)>,
    ) {
        for (state, kind) in [
            (State::Mfu, BlockKind::Metadata),
            (State::Mru, BlockKind::Metadata),
            (State::Mfu, BlockKind::Data),
            (State::Mru, BlockKind::Data),
        ] {
            let mut scanned = 0;
            for key in self.lists[list_index(state, kind)].values() {
                if scanned >= headroom {
                    break;
                }
                let entry = &self.entries[key];
                scanned += entry.size;
                if noprefetch && entry.prefetched {
                    continue;
                }
                if let (Some(info), Some(block)) = (entry.l2, &entry.block) {
                    let origin = L2Origin {
                        kind,
                        mfu: state == State::Mfu,
                        prefetch: entry.prefetched,
                    };
                    out.push((*key, block.clone(), info, origin));
                }
            }
        }
    }

    /// Drop `key` (freed or rewritten): live or ghost.
    pub fn remove(&mut self, key: &BlockKey) -> Option<CachedBlock> {
        let mut entry = self.unlink(key)?;
        self.forget_decoded(&mut entry);
        if entry.block.is_some() {
            self.counters.removed += 1;
        }
        entry.block
    }

    pub fn contains(&self, key: &BlockKey) -> bool {
        self.entries
            .get(key)
            .is_some_and(|entry| !entry.state.is_ghost())
    }

    /// Drop everything, ghosts included.
    pub fn clear(&mut self) {
        self.counters.removed += self.live_entries();
        self.entries.clear();
        self.lists = Default::default();
        self.sizes = [0; 8];
        self.decoded = Default::default();
        self.overhead = [0; 2];
        self.uncompressed = 0;
    }

    /// Check the bookkeeping (tests).
    #[cfg(test)]
    pub fn check(&self) {
        let mut sizes = [0u64; 8];
        let (mut overhead, mut uncompressed, mut decoded) = ([0u64; 2], 0, [0usize; 2]);
        for (key, entry) in &self.entries {
            let index = list_index(entry.state, entry.kind);
            sizes[index] += entry.size;
            assert_eq!(self.lists[index].get(&entry.generation), Some(key));
            assert_eq!(entry.block.is_none(), entry.state.is_ghost());
            if let Some(block) = &entry.block {
                assert_eq!(block.bytes.len() as u64, entry.size);
                uncompressed += u64::from(block.size_logical);
            }
            if let Some(copy) = &entry.decoded {
                let index = entry.kind as usize;
                assert_eq!(
                    self.decoded[index].get(&entry.decoded_generation),
                    Some(key)
                );
                assert!(entry.block.as_ref().is_some_and(CachedBlock::is_compressed));
                overhead[index] += copy.len() as u64;
                decoded[index] += 1;
            }
        }
        assert_eq!(sizes, self.sizes);
        assert_eq!((overhead, uncompressed), (self.overhead, self.uncompressed));
        assert_eq!(decoded, [self.decoded[0].len(), self.decoded[1].len()]);
        for kind in [BlockKind::Data, BlockKind::Metadata] {
            assert!(self.overhead[kind as usize] <= self.decoded_max(kind));
        }
        assert_eq!(
            self.entries.len(),
            self.lists.iter().map(BTreeMap::len).sum::<usize>()
        );
        assert!(self.live() <= self.c);
        assert!(self.size_of(State::MruGhost) + self.size_of(State::MfuGhost) <= self.c);
    }
}
