//! Cache layer: a bounded cache of decompressed block contents, keyed by block identity.
//!
//! # Overview
//!
//! This is the bounded block cache of DESIGN.md §4 "Buffers and cache". It sits under the
//! buffer layer: a read first asks the cache for a block's logical (decompressed, verified)
//! contents and only goes to the read pipeline on a miss, after which the pipeline inserts what
//! it read. The ARC will later replace this implementation (MRU/MFU lists with ghosts, a
//! data/metadata split, an L2ARC behind it) but not its callers: [`BlockKey`], `get`, `insert`,
//! `remove` and the counters stay.
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
//! - `size_bytes` is the sum of the lengths of the cached buffers and never exceeds
//!   `max_bytes` after any operation returns. A buffer larger than `max_bytes` is not cached.
//! - Every entry has exactly one position in the recency order, and the order holds nothing
//!   else; eviction takes the least recently used (inserted or hit) entry first.
//!
//! # Locking
//!
//! All methods take `&self`; one `parking_lot::Mutex` guards the map, the recency order and
//! the counters. It is never held across I/O or a call out of this module, and contents are
//! shared as `Arc<Vec<u8>>`, so a reader keeps its buffer after eviction without copying.
//!
//! # Operations
//!
//! `get` (a hit refreshes recency), `insert` (replacing any entry with the same key, then
//! evicting least recently used entries until the bound holds), `remove`, `clear`, and `stats`
//! for a snapshot of the counters (hits, misses, insertions, evictions, size).
//!
//! # Crash behaviour
//!
//! Nothing to recover: the cache holds only copies of verified, durable-or-syncing blocks.
//!
//! Recency is kept as a generation number per entry plus an ordered map from generation to key,
//! so every operation is O(log n).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::blkptr::BlockPtr;
use crate::types::{Txg, VdevId};

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

/// A snapshot of the cache's counters (arcstats-like).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockCacheStats {
    /// `get` calls that found the block.
    pub hits: u64,
    /// `get` calls that did not.
    pub misses: u64,
    /// Buffers stored by `insert` (replacements included; refused oversized buffers not).
    pub inserted: u64,
    /// Entries dropped to respect the size bound.
    pub evicted: u64,
    /// Entries dropped by `remove` or `clear`.
    pub removed: u64,
    /// `insert` calls refused because the buffer alone exceeds the bound.
    pub refused: u64,
    /// Bytes currently cached.
    pub size_bytes: u64,
    /// The bound on `size_bytes`.
    pub max_bytes: u64,
    /// Entries currently cached.
    pub entries: u64,
}

struct Entry {
    contents: Arc<Vec<u8>>,
    generation: u64,
}

struct Inner {
    entries: HashMap<BlockKey, Entry>,
    /// Recency order: smallest generation is the least recently used.
    recency: BTreeMap<u64, BlockKey>,
    generation_next: u64,
    stats: BlockCacheStats,
}

impl Inner {
    fn touch(&mut self, key: BlockKey) -> Option<Arc<Vec<u8>>> {
        let generation = self.generation_next;
        let entry = self.entries.get_mut(&key)?;
        self.recency.remove(&entry.generation);
        entry.generation = generation;
        self.recency.insert(generation, key);
        self.generation_next += 1;
        Some(Arc::clone(&entry.contents))
    }

    fn drop_entry(&mut self, key: &BlockKey) -> Option<Arc<Vec<u8>>> {
        let entry = self.entries.remove(key)?;
        let removed = self.recency.remove(&entry.generation);
        assert_eq!(removed.as_ref(), Some(key), "recency order out of step");
        self.stats.size_bytes -= entry.contents.len() as u64;
        self.stats.entries -= 1;
        Some(entry.contents)
    }

    fn check(&self) {
        debug_assert_eq!(self.entries.len(), self.recency.len());
        debug_assert_eq!(self.entries.len() as u64, self.stats.entries);
        assert!(self.stats.size_bytes <= self.stats.max_bytes);
    }
}

/// A bounded, thread-safe, least-recently-used cache of block contents.
pub struct BlockCache {
    inner: Mutex<Inner>,
}

impl BlockCache {
    /// An empty cache that holds at most `max_bytes` bytes of contents.
    pub fn new(max_bytes: u64) -> BlockCache {
        BlockCache {
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                recency: BTreeMap::new(),
                generation_next: 0,
                stats: BlockCacheStats {
                    max_bytes,
                    ..BlockCacheStats::default()
                },
            }),
        }
    }

    /// The cached contents of `key`, marking it most recently used.
    pub fn get(&self, key: &BlockKey) -> Option<Arc<Vec<u8>>> {
        let mut inner = self.inner.lock();
        let found = inner.touch(*key);
        if found.is_some() {
            inner.stats.hits += 1;
        } else {
            inner.stats.misses += 1;
        }
        found
    }

    /// Caches `contents` (a block's logical bytes) under `key`, replacing any previous entry,
    /// then evicts least recently used entries until the bound holds. Returns false, caching
    /// nothing, when `contents` alone is larger than the bound.
    pub fn insert(&self, key: BlockKey, contents: Arc<Vec<u8>>) -> bool {
        let mut inner = self.inner.lock();
        let size = contents.len() as u64;
        if size > inner.stats.max_bytes {
            inner.stats.refused += 1;
            // A stale entry under this key must not survive a refused replacement.
            if inner.drop_entry(&key).is_some() {
                inner.stats.removed += 1;
            }
            return false;
        }
        inner.drop_entry(&key);
        let generation = inner.generation_next;
        inner.generation_next += 1;
        inner.entries.insert(
            key,
            Entry {
                contents,
                generation,
            },
        );
        inner.recency.insert(generation, key);
        inner.stats.size_bytes += size;
        inner.stats.entries += 1;
        inner.stats.inserted += 1;
        while inner.stats.size_bytes > inner.stats.max_bytes {
            // The new entry is the most recent and fits on its own, so eviction stops before it.
            let (_, oldest) = inner
                .recency
                .first_key_value()
                .map(|(generation, key)| (*generation, *key))
                .expect("over the bound with nothing cached");
            inner.drop_entry(&oldest);
            inner.stats.evicted += 1;
        }
        inner.check();
        true
    }

    /// Drops `key`'s entry (the block was freed or rewritten), returning its contents.
    pub fn remove(&self, key: &BlockKey) -> Option<Arc<Vec<u8>>> {
        let mut inner = self.inner.lock();
        let removed = inner.drop_entry(key);
        if removed.is_some() {
            inner.stats.removed += 1;
        }
        removed
    }

    /// Drops every entry. Counters other than the size are kept.
    pub fn clear(&self) {
        let mut inner = self.inner.lock();
        let count = inner.entries.len() as u64;
        inner.entries.clear();
        inner.recency.clear();
        inner.stats.removed += count;
        inner.stats.entries = 0;
        inner.stats.size_bytes = 0;
    }

    /// Whether `key` is cached, without counting a hit or miss or changing recency.
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.inner.lock().entries.contains_key(key)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> BlockCacheStats {
        self.inner.lock().stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::blkptr::{ChecksumType, Compression, Dva, ObjectType, DVAS_MAX};

    fn key(offset: u64) -> BlockKey {
        BlockKey {
            vdev: VdevId(0),
            offset,
            birth: Txg(5),
        }
    }

    fn buffer(size: usize, fill: u8) -> Arc<Vec<u8>> {
        Arc::new(vec![fill; size])
    }

    #[test]
    fn evicts_least_recently_used_first() {
        let cache = BlockCache::new(300);
        assert!(cache.insert(key(0), buffer(100, 0)));
        assert!(cache.insert(key(1), buffer(100, 1)));
        assert!(cache.insert(key(2), buffer(100, 2)));
        // Touch 0 so that 1 becomes the oldest.
        assert_eq!(cache.get(&key(0)).unwrap()[0], 0);
        assert!(cache.insert(key(3), buffer(100, 3)));
        assert!(!cache.contains(&key(1)), "1 was least recently used");
        assert!(cache.contains(&key(0)));
        assert!(cache.contains(&key(2)));
        assert!(cache.contains(&key(3)));
        // Next victim is 2, then 0.
        assert!(cache.insert(key(4), buffer(150, 4)));
        assert!(!cache.contains(&key(2)));
        assert!(!cache.contains(&key(0)));
        assert!(cache.contains(&key(3)) && cache.contains(&key(4)));
        let stats = cache.stats();
        assert_eq!(stats.evicted, 3);
        assert_eq!(stats.size_bytes, 250);
        assert_eq!(stats.entries, 2);
    }

    #[test]
    fn size_bound_holds_under_random_operations() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let cache = BlockCache::new(10_000);
        for _ in 0..5_000 {
            let offset = rng.gen_range(0..64u64);
            match rng.gen_range(0..4) {
                0 | 1 => {
                    let size = rng.gen_range(0..3_000);
                    assert!(cache.insert(key(offset), buffer(size, offset as u8)));
                }
                2 => {
                    if let Some(contents) = cache.get(&key(offset)) {
                        assert!(contents.iter().all(|&byte| byte == offset as u8));
                    }
                }
                _ => {
                    cache.remove(&key(offset));
                }
            }
            assert!(cache.stats().size_bytes <= 10_000);
        }
        let stats = cache.stats();
        assert!(
            stats.evicted > 0,
            "the workload should have forced evictions"
        );
        assert!(stats.hits > 0 && stats.misses > 0);
    }

    #[test]
    fn counters_count() {
        let cache = BlockCache::new(1000);
        assert!(cache.get(&key(1)).is_none());
        cache.insert(key(1), buffer(10, 1));
        assert!(cache.get(&key(1)).is_some());
        assert!(cache.get(&key(1)).is_some());
        cache.insert(key(2), buffer(20, 2));
        // Replacing an entry counts as an insertion and updates the size.
        cache.insert(key(2), buffer(30, 2));
        assert_eq!(cache.remove(&key(1)).unwrap().len(), 10);
        assert!(cache.remove(&key(1)).is_none());
        assert!(
            !cache.insert(key(3), buffer(1001, 3)),
            "larger than the cache"
        );
        assert_eq!(
            cache.stats(),
            BlockCacheStats {
                hits: 2,
                misses: 1,
                inserted: 3,
                evicted: 0,
                removed: 1,
                refused: 1,
                size_bytes: 30,
                max_bytes: 1000,
                entries: 1,
            }
        );
        cache.clear();
        let stats = cache.stats();
        assert_eq!((stats.entries, stats.size_bytes, stats.removed), (0, 0, 2));
        assert!(cache.get(&key(2)).is_none());
    }

    #[test]
    fn refused_replacement_drops_the_stale_entry() {
        let cache = BlockCache::new(100);
        cache.insert(key(1), buffer(50, 1));
        assert!(!cache.insert(key(1), buffer(200, 2)));
        assert!(cache.get(&key(1)).is_none());
        assert_eq!(cache.stats().size_bytes, 0);
    }

    #[test]
    fn evicted_buffers_stay_valid_for_their_readers() {
        let cache = BlockCache::new(100);
        cache.insert(key(1), buffer(100, 9));
        let held = cache.get(&key(1)).unwrap();
        cache.insert(key(2), buffer(100, 8));
        assert!(!cache.contains(&key(1)));
        assert_eq!(held.len(), 100);
        assert!(held.iter().all(|&byte| byte == 9));
    }

    #[test]
    fn concurrent_use_keeps_the_bound() {
        let cache = Arc::new(BlockCache::new(4096));
        let threads: Vec<_> = (0..4u64)
            .map(|thread| {
                let cache = Arc::clone(&cache);
                std::thread::spawn(move || {
                    for index in 0..2_000u64 {
                        let key = key((thread * 7 + index) % 50);
                        if cache.get(&key).is_none() {
                            cache.insert(key, buffer(256, 0));
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let stats = cache.stats();
        assert!(stats.size_bytes <= 4096);
        assert_eq!(stats.hits + stats.misses, 8_000);
    }

    fn pointer_with_dva(dva: Dva) -> BlockPtr {
        let mut dvas = [Dva::default(); DVAS_MAX];
        dvas[0] = dva;
        BlockPtr {
            dvas,
            size_logical: 4096,
            size_physical: 4096,
            compression: Compression::Off,
            checksum_type: ChecksumType::Fletcher4,
            object_type: ObjectType::PlainFile,
            level: 0,
            embedded: false,
            birth_logical: Txg(8),
            birth_physical: Txg(9),
            fill_count: 1,
            checksum: [0; 32],
            embedded_payload: Vec::new(),
        }
    }

    #[test]
    fn key_of_uses_first_dva_and_physical_birth() {
        let pointer = pointer_with_dva(Dva {
            vdev: VdevId(2),
            offset: 0x8000,
            size_allocated: 4096,
            gang: false,
        });
        assert_eq!(
            BlockKey::of(&pointer),
            Some(BlockKey {
                vdev: VdevId(2),
                offset: 0x8000,
                birth: Txg(9),
            })
        );
        assert_eq!(
            BlockKey::of(&BlockPtr::hole(Txg(3), ObjectType::PlainFile, 0)),
            None
        );
        let mut embedded = pointer_with_dva(Dva::default());
        embedded.embedded = true;
        embedded.size_physical = 4;
        embedded.embedded_payload = vec![1, 2, 3, 4];
        embedded.compression = Compression::Lz4;
        assert_eq!(BlockKey::of(&embedded), None);
    }
}
