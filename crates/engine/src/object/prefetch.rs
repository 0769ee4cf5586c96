//! Predictive prefetch of object data (OpenZFS dmu_zfetch.c).
//!
//! # Overview
//!
//! A sequential reader that waits for each block to come off the disk before asking for the
//! next one gets a fraction of what the device can deliver. The prefetcher watches the data
//! block ranges that readers ask for, recognises sequential *streams*, and reads the blocks a
//! stream will want next on worker threads, into the block cache ([`crate::cache`]), so that the
//! reader finds them there.
//!
//! # Streams
//!
//! [`StreamTable`] keeps, per object, up to `zfetch_max_streams` streams, each with the block
//! it expects next, how far ahead it has issued prefetches and its *distance*. An access that
//! starts at (or within one access of) a stream's expected block and reaches past it is a hit:
//! the stream advances, its distance starts at `zfetch_min_distance` and doubles on every
//! further hit up to `zfetch_max_distance` (as in OpenZFS), and the blocks from where the
//! previous prefetch stopped to `expected + distance` are issued. An access no stream expects
//! starts a new stream (expecting the block after it) and prefetches nothing: a stream must be
//! confirmed by a second access before it costs any I/O, so random readers pay nothing but the
//! bookkeeping. Streams idle for more than a second may be replaced; the table tracks a bounded
//! number of objects, forgetting the least recently used one.
//!
//! The distance is also capped at a quarter of the block cache (`arc_max`): blocks prefetched
//! further ahead than the cache can hold would be evicted before their reader comes for them.
//!
//! # Workers
//!
//! [`Prefetcher`] feeds the blocks to issue into a bounded queue served by
//! [`PREFETCH_THREADS`] worker threads, started on the first prefetch. A worker reads one block
//! through [`ObjectSet::read_block_if_present`] (dirty data, holes and cached blocks cost no
//! I/O) and drops the result: the read pipeline has put it in the cache. A full queue drops new
//! work instead of blocking the reader (prefetch is advisory). A reader about to read blocks
//! takes them off the queue and waits for those a worker is reading right now, so that no block
//! is read from the device twice at once ([`Prefetcher::claim`]).
//!
//! The same workers serve a reader of several blocks that are not in memory (a 1 MiB read
//! through a mount over 128 KiB records): [`Prefetcher::read_for_reader`] puts all but the
//! first at the front of the queue, marked as demand reads (the sync read class, counted as
//! demand by the cache), and the reader reads the first itself, then claims each next one in
//! turn. The blocks are read in parallel without the reader starting threads of its own (it
//! used to start up to four per read).
//!
//! # Locking
//!
//! The stream table and the queue each have a mutex held only for in-memory work; no lock is
//! held across a disk read. Workers hold the object set weakly and only for the duration of one
//! read, and dropping the prefetcher stops and joins them.
//!
//! # Errors and crashes
//!
//! A prefetch read that fails is forgotten: the reader's own read meets the same error and
//! reports it. The prefetcher keeps nothing on disk.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::object::ObjectSet;
use crate::tunables::Tunables;
use crate::types::ObjectId;

/// Worker threads reading prefetched blocks.
pub const PREFETCH_THREADS: usize = 4;
/// Blocks waiting for a worker; more are dropped.
const QUEUE_BLOCKS_MAX: usize = 4096;
/// Objects with streams tracked at once.
const OBJECTS_MAX: usize = 64;
/// A stream idle this long may be replaced by a new one (zfetch_min_sec_reap).
const STREAM_REAP_AFTER: Duration = Duration::from_secs(1);

/// What the prefetcher does, from the tunables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefetchConfig {
    pub enabled: bool,
    /// First distance of a confirmed stream, in bytes.
    pub distance_min_bytes: u64,
    /// Largest distance, in bytes (zfetch_max_distance, capped at a quarter of the cache).
    pub distance_max_bytes: u64,
    /// Streams per object.
    pub streams_max: usize,
}

impl PrefetchConfig {
    pub fn from_tunables(tunables: &Tunables) -> PrefetchConfig {
        let distance_max_bytes = tunables.zfetch_max_distance.min(tunables.arc_max / 4);
        PrefetchConfig {
            enabled: tunables.zfs_prefetch_disable == 0,
            distance_min_bytes: tunables.zfetch_min_distance.min(distance_max_bytes),
            distance_max_bytes,
            streams_max: tunables.zfetch_max_streams.max(1) as usize,
        }
    }
}

/// One sequential stream through an object.
#[derive(Clone, Debug)]
struct Stream {
    /// The block the next access is expected to start at.
    expected: u64,
    /// Blocks before this one have been issued (or read by the stream's reader).
    issued_end: u64,
    /// How far ahead of `expected` to prefetch, in blocks (0 until the first hit).
    distance: u64,
    last_access: Instant,
}

/// Counters of the stream table and the workers (zfetchstats-like).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefetchStats {
    /// Accesses that continued a stream.
    pub hits: u64,
    /// Accesses no stream expected.
    pub misses: u64,
    /// New streams refused because the object had `zfetch_max_streams` busy streams.
    pub streams_refused: u64,
    /// Blocks queued for a worker.
    pub blocks_queued: u64,
    /// Blocks not queued because the queue was full.
    pub blocks_dropped: u64,
    /// Queued blocks a reader took back because it was about to read them itself.
    pub blocks_claimed: u64,
    /// Blocks a worker read.
    pub blocks_read: u64,
    /// Blocks a reader of several blocks handed to the workers ([`Prefetcher::read_for_reader`]).
    pub blocks_for_readers: u64,
}

/// Sequential stream detection: see the module documentation. Pure bookkeeping, no I/O.
pub struct StreamTable {
    config: PrefetchConfig,
    objects: HashMap<ObjectId, Vec<Stream>>,
    stats: PrefetchStats,
}

impl StreamTable {
    pub fn new(config: PrefetchConfig) -> StreamTable {
        StreamTable {
            config,
            objects: HashMap::new(),
            stats: PrefetchStats::default(),
        }
    }

    /// Record an access to blocks `blocks` of `object` (block size `block_size`, `block_count`
    /// blocks long) at `now`, and return the blocks to prefetch for it (possibly empty).
    pub fn access(
        &mut self,
        object: ObjectId,
        blocks: Range<u64>,
        block_size: u64,
        block_count: u64,
        now: Instant,
    ) -> Range<u64> {
        let nothing = 0..0;
        if !self.config.enabled || blocks.is_empty() || block_size == 0 {
            return nothing;
        }
        let length = blocks.end - blocks.start;
        let distance_max = (self.config.distance_max_bytes / block_size).max(1);
        let distance_min = (self.config.distance_min_bytes / block_size).clamp(1, distance_max);
        // An access within one access length of where a stream expects the next one belongs to
        // it: readahead requests served a little out of order stay one stream.
        let found = self.objects.get_mut(&object).and_then(|streams| {
            streams.iter_mut().find(|stream| {
                blocks.end >= stream.expected.saturating_sub(length)
                    && blocks.start <= stream.expected.saturating_add(length)
            })
        });
        let Some(stream) = found else {
            self.stats.misses += 1;
            // A first read of the first block alone is how small files are read: no stream.
            if blocks.start == 0 && blocks.end <= 1 {
                return nothing;
            }
            self.start_stream(object, blocks.end, now);
            return nothing;
        };
        stream.last_access = now;
        if blocks.end <= stream.expected {
            // A re-read or a late, reordered access: the stream has been there already.
            return nothing;
        }
        self.stats.hits += 1;
        stream.expected = blocks.end;
        stream.distance = if stream.distance == 0 {
            distance_min
        } else {
            (stream.distance * 2).min(distance_max)
        };
        let start = stream.issued_end.max(stream.expected);
        let end = stream
            .expected
            .saturating_add(stream.distance)
            .min(block_count);
        if end <= start {
            return nothing;
        }
        stream.issued_end = end;
        start..end
    }

    /// Start a stream of `object` expecting block `expected`, reaping idle streams, replacing
    /// the least recently used object when too many are tracked.
    fn start_stream(&mut self, object: ObjectId, expected: u64, now: Instant) {
        let idle =
            |stream: &Stream| now.saturating_duration_since(stream.last_access) > STREAM_REAP_AFTER;
        if !self.objects.contains_key(&object) || self.objects.len() > OBJECTS_MAX {
            self.objects.retain(|_, streams| {
                streams.retain(|stream| !idle(stream));
                !streams.is_empty()
            });
        }
        if !self.objects.contains_key(&object) && self.objects.len() >= OBJECTS_MAX {
            let oldest = self
                .objects
                .iter()
                .map(|(object, streams)| {
                    let latest = streams.iter().map(|stream| stream.last_access).max();
                    (latest, *object)
                })
                .min()
                .map(|(_, object)| object);
            if let Some(oldest) = oldest {
                self.objects.remove(&oldest);
            }
        }
        let streams_max = self.config.streams_max;
        let streams = self.objects.entry(object).or_default();
        streams.retain(|stream| !idle(stream));
        if streams.len() >= streams_max {
            self.stats.streams_refused += 1;
            return;
        }
        streams.push(Stream {
            expected,
            issued_end: expected,
            distance: 0,
            last_access: now,
        });
    }

    /// Objects with at least one stream.
    pub fn objects_tracked(&self) -> usize {
        self.objects.len()
    }

    /// Streams of `object`.
    pub fn streams_of(&self, object: ObjectId) -> usize {
        self.objects.get(&object).map_or(0, Vec::len)
    }
}

type BlockId = (ObjectId, u64);

/// A block waiting for a worker: prefetched, or wanted now by a reader (`demand`).
#[derive(Clone, Copy)]
struct Queued {
    block: BlockId,
    demand: bool,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Queued>,
    /// Blocks a worker is reading now.
    reading: HashSet<BlockId>,
    stopping: bool,
    stats: PrefetchStats,
}

impl Queue {
    /// Remove the waiting entries of `blocks` of `object`; how many there were.
    fn take_back(&mut self, object: ObjectId, blocks: &Range<u64>) -> u64 {
        let before = self.waiting.len();
        self.waiting
            .retain(|queued| queued.block.0 != object || !blocks.contains(&queued.block.1));
        (before - self.waiting.len()) as u64
    }
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when work is queued or the prefetcher stops.
    work: Condvar,
    /// Signalled when a worker finishes a block.
    done: Condvar,
}

/// Stream detection plus worker threads for one object set: see the module documentation.
pub struct Prefetcher {
    objset: Weak<ObjectSet>,
    streams: Mutex<StreamTable>,
    shared: Arc<Shared>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Prefetcher {
    /// A prefetcher for `objset`, configured from its pool's tunables.
    pub fn new(objset: &Arc<ObjectSet>) -> Prefetcher {
        let config = PrefetchConfig::from_tunables(&objset.io().tunables);
        Prefetcher {
            objset: Arc::downgrade(objset),
            streams: Mutex::new(StreamTable::new(config)),
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                work: Condvar::new(),
                done: Condvar::new(),
            }),
            workers: Mutex::new(Vec::new()),
        }
    }

    /// Note that a reader is about to read `blocks` of `object` (`block_size`, `block_count`
    /// blocks long) and queue the prefetches that access calls for.
    pub fn access(&self, object: ObjectId, blocks: Range<u64>, block_size: u64, block_count: u64) {
        let issue =
            self.streams
                .lock()
                .access(object, blocks, block_size, block_count, Instant::now());
        if issue.is_empty() {
            return;
        }
        self.start_workers();
        let mut queue = self.shared.queue.lock();
        for blkid in issue {
            if queue.waiting.len() >= QUEUE_BLOCKS_MAX {
                queue.stats.blocks_dropped += 1;
                continue;
            }
            queue.waiting.push_back(Queued {
                block: (object, blkid),
                demand: false,
            });
            queue.stats.blocks_queued += 1;
        }
        drop(queue);
        self.shared.work.notify_all();
    }

    /// Take `blocks` of `object` off the queue (the caller reads them now) and wait until no
    /// worker is reading any of them, so that the caller finds them in the cache instead of
    /// reading them a second time.
    pub fn claim(&self, object: ObjectId, blocks: Range<u64>) {
        let mut queue = self.shared.queue.lock();
        if queue.waiting.is_empty() && queue.reading.is_empty() {
            return;
        }
        queue.stats.blocks_claimed += queue.take_back(object, &blocks);
        while queue
            .reading
            .iter()
            .any(|(reading, blkid)| *reading == object && blocks.contains(blkid))
        {
            self.shared.done.wait(&mut queue);
        }
    }

    /// Have the workers read `blocks` of `object` now, ahead of every prefetch, as demand
    /// reads: the caller reads the block before them itself, then [`Prefetcher::claim`]s each
    /// of these in turn (reading any a worker has not started). False when there are no
    /// workers (the caller reads them all itself).
    pub fn read_for_reader(&self, object: ObjectId, blocks: Range<u64>) -> bool {
        if blocks.is_empty() {
            return true;
        }
        self.start_workers();
        if self.workers.lock().is_empty() {
            return false;
        }
        let mut queue = self.shared.queue.lock();
        queue.take_back(object, &blocks);
        for blkid in blocks.rev() {
            if queue.reading.contains(&(object, blkid)) {
                continue;
            }
            queue.waiting.push_front(Queued {
                block: (object, blkid),
                demand: true,
            });
            queue.stats.blocks_for_readers += 1;
        }
        drop(queue);
        self.shared.work.notify_all();
        true
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> PrefetchStats {
        let table = self.streams.lock().stats;
        let queue = self.shared.queue.lock().stats;
        PrefetchStats {
            hits: table.hits,
            misses: table.misses,
            streams_refused: table.streams_refused,
            ..queue
        }
    }

    fn start_workers(&self) {
        let mut workers = self.workers.lock();
        if !workers.is_empty() {
            return;
        }
        for index in 0..PREFETCH_THREADS {
            let shared = Arc::clone(&self.shared);
            let objset = Weak::clone(&self.objset);
            let spawned = std::thread::Builder::new()
                .name(format!("tarn-prefetch-{index}"))
                .spawn(move || worker(&shared, &objset));
            // Without threads there is no prefetch, and readers read for themselves.
            if let Ok(handle) = spawned {
                workers.push(handle);
            }
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.shared.queue.lock().stopping = true;
        self.shared.work.notify_all();
        for handle in self.workers.get_mut().drain(..) {
            // A worker that panicked has nothing left to clean up.
            let _ = handle.join();
        }
    }
}

fn worker(shared: &Shared, objset: &Weak<ObjectSet>) {
    loop {
        let Queued { block, demand } = {
            let mut queue = shared.queue.lock();
            loop {
                if queue.stopping {
                    return;
                }
                if let Some(queued) = queue.waiting.pop_front() {
                    queue.reading.insert(queued.block);
                    break queued;
                }
                shared.work.wait(&mut queue);
            }
        };
        // Nobody waits for a prefetched block yet: its reads yield to readers' sync reads.
        let _class = crate::vdev::queue::ReadClassScope::new(if demand {
            crate::vdev::IoClass::SyncRead
        } else {
            crate::vdev::IoClass::AsyncRead
        });
        if let Some(objset) = objset.upgrade() {
            // The result is in the cache now; an error is the reader's to meet and report.
            let _ = objset.read_block_if_present(block.0, block.1);
        }
        let mut queue = shared.queue.lock();
        queue.reading.remove(&block);
        queue.stats.blocks_read += 1;
        drop(queue);
        shared.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: u64 = 128 << 10;

    fn config() -> PrefetchConfig {
        PrefetchConfig {
            enabled: true,
            distance_min_bytes: 4 * BLOCK,
            distance_max_bytes: 32 * BLOCK,
            streams_max: 2,
        }
    }

    fn object(number: u64) -> ObjectId {
        ObjectId(number)
    }

    #[test]
    fn sequential_reads_confirm_a_stream_and_distance_doubles_to_the_cap() {
        let mut table = StreamTable::new(config());
        let now = Instant::now();
        // First access: a stream is started, nothing prefetched.
        assert_eq!(table.access(object(5), 0..2, BLOCK, 1000, now), 0..0);
        assert_eq!(table.streams_of(object(5)), 1);
        // Second: confirmed, the minimum distance (4 blocks) ahead of the next expected block.
        assert_eq!(table.access(object(5), 2..4, BLOCK, 1000, now), 4..8);
        // Third: distance 8, issuing only what was not issued yet.
        assert_eq!(table.access(object(5), 4..6, BLOCK, 1000, now), 8..14);
        assert_eq!(table.access(object(5), 6..8, BLOCK, 1000, now), 14..24);
        assert_eq!(table.access(object(5), 8..10, BLOCK, 1000, now), 24..42);
        // Capped at 32 blocks ahead.
        assert_eq!(table.access(object(5), 10..12, BLOCK, 1000, now), 42..44);
        assert_eq!(table.access(object(5), 12..14, BLOCK, 1000, now), 44..46);
        let stats = table.stats;
        assert_eq!((stats.hits, stats.misses), (6, 1));
    }

    #[test]
    fn prefetch_stops_at_the_end_of_the_object() {
        let mut table = StreamTable::new(config());
        let now = Instant::now();
        table.access(object(5), 0..2, BLOCK, 6, now);
        assert_eq!(table.access(object(5), 2..4, BLOCK, 6, now), 4..6);
        assert_eq!(table.access(object(5), 4..6, BLOCK, 6, now), 0..0);
    }

    #[test]
    fn random_reads_prefetch_nothing() {
        let mut table = StreamTable::new(config());
        let now = Instant::now();
        for start in [100u64, 7, 500, 42, 300, 900, 13, 650] {
            assert!(table
                .access(object(1), start..start + 1, BLOCK, 1000, now)
                .is_empty());
        }
        assert_eq!(table.stats.hits, 0);
        assert!(table.streams_of(object(1)) <= config().streams_max);
        assert!(
            table.stats.streams_refused > 0,
            "busy streams are not replaced"
        );
    }

    #[test]
    fn rereading_a_block_neither_advances_nor_starts_a_stream() {
        let mut table = StreamTable::new(config());
        let now = Instant::now();
        table.access(object(2), 10..11, BLOCK, 1000, now);
        // Small reads within block 10, then block 11.
        assert!(table.access(object(2), 10..11, BLOCK, 1000, now).is_empty());
        assert!(table.access(object(2), 10..11, BLOCK, 1000, now).is_empty());
        assert_eq!(table.streams_of(object(2)), 1);
        assert_eq!(table.access(object(2), 11..12, BLOCK, 1000, now), 12..16);
    }

    #[test]
    fn a_slightly_reordered_access_continues_the_stream() {
        let mut table = StreamTable::new(config());
        let now = Instant::now();
        table.access(object(3), 0..8, BLOCK, 1000, now);
        // 16..24 arrives before 8..16 (two readahead requests served out of order).
        assert_eq!(table.access(object(3), 16..24, BLOCK, 1000, now), 24..28);
        assert!(table.access(object(3), 8..16, BLOCK, 1000, now).is_empty());
        assert_eq!(table.streams_of(object(3)), 1);
        assert_eq!(table.access(object(3), 24..32, BLOCK, 1000, now), 32..40);
    }

    #[test]
    fn the_first_block_alone_starts_no_stream() {
        let mut table = StreamTable::new(config());
        let now = Instant::now();
        assert!(table.access(object(4), 0..1, BLOCK, 1, now).is_empty());
        assert_eq!(table.objects_tracked(), 0);
    }

    #[test]
    fn disabled_prefetch_does_nothing() {
        let mut table = StreamTable::new(PrefetchConfig {
            enabled: false,
            ..config()
        });
        let now = Instant::now();
        for start in 0..10u64 {
            assert!(table
                .access(object(1), start..start + 1, BLOCK, 1000, now)
                .is_empty());
        }
        assert_eq!(table.objects_tracked(), 0);
    }

    #[test]
    fn idle_streams_are_replaced_and_tracked_objects_stay_bounded() {
        let mut table = StreamTable::new(config());
        let start = Instant::now();
        table.access(object(1), 10..11, BLOCK, 1000, start);
        table.access(object(1), 50..51, BLOCK, 1000, start);
        table.access(object(1), 90..91, BLOCK, 1000, start);
        assert_eq!(table.streams_of(object(1)), 2);
        let later = start + STREAM_REAP_AFTER * 2;
        table.access(object(1), 90..91, BLOCK, 1000, later);
        assert_eq!(table.streams_of(object(1)), 1, "idle streams were reaped");
        for number in 100..100 + 2 * OBJECTS_MAX as u64 {
            table.access(object(number), 5..6, BLOCK, 1000, later);
            assert!(table.objects_tracked() <= OBJECTS_MAX);
        }
    }

    #[test]
    fn config_caps_the_distance_at_a_quarter_of_the_cache() {
        let tunables = Tunables {
            arc_max: 64 << 20,
            ..Tunables::default()
        };
        let config = PrefetchConfig::from_tunables(&tunables);
        assert_eq!(config.distance_max_bytes, 16 << 20);
        assert!(config.distance_min_bytes <= config.distance_max_bytes);
        let disabled = Tunables {
            zfs_prefetch_disable: 1,
            ..Tunables::default()
        };
        assert!(!PrefetchConfig::from_tunables(&disabled).enabled);
    }
}
