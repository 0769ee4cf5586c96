//! The L2ARC: a second-level cache of blocks on cache devices, fed from the ARC and persistent
//! across export and import (OpenZFS arc.c `l2arc_*`).
//!
//! # Overview
//!
//! Cache devices are not part of the pool's storage: no block pointer ever names them, they
//! are not top-level vdevs (never allocated from, not in the uberblock's guid sum, not scanned
//! by scrub or resilver) and losing one loses nothing. The pool keeps them in their own list
//! (this [`L2Arc`], OpenZFS's `spa_l2cache`), names them in its config (the labels' `l2cache`
//! list, `pool/l2cache.rs`) and each carries its own label marked as a cache device.
//!
//! A *feed* thread per pool ([`feed`]) wakes every `l2arc_feed_secs`, looks at the tails of the
//! ARC's lists (the blocks eviction will take next: MFU and MRU, metadata then data) and writes
//! up to `l2arc_write_max` bytes (plus `l2arc_write_boost` while the ARC has never evicted) of
//! eligible blocks not yet in the L2ARC to one cache device, in the async-write class, at the
//! device's write hand; then a *log block* recording them, then the *device header* naming the
//! newest log block. A read that misses the ARC asks [`L2Arc::read`]: the block's header (by
//! [`BlockKey`]) says where its physical bytes are; they are read in the sync-read class,
//! verified against the block pointer's checksum and returned for decompression. A mismatch or
//! an I/O error drops the header, is counted (`l2_cksum_bad`, `l2_io_error`) and the caller
//! reads the pool as usual: bad data is never returned.
//!
//! # Stored as on disk
//!
//! The L2ARC holds the block's *physical* bytes (compressed as the pool stores them), so it
//! holds as many blocks as the pool's compression allows and a read is verified by the block
//! pointer's own checksum. The compressed ARC keeps exactly those bytes, so the feed writes
//! them as they are and an L2 hit goes into the ARC as stored. Only when the ARC keeps
//! contents (`compressed_arc_enabled` = 0, as OpenZFS's `l2arc_apply_transforms` then does)
//! does the feed recompress them with the block pointer's compression (and zstd level, from
//! the payload header), pad them to the physical size and keep the result only if its
//! checksum equals the block pointer's (a block whose bytes do not come back, e.g. one
//! received precompressed by another build, is skipped and counted in `l2_feed_mismatch`).
//! What the feed needs of the block pointer (compression, checksum type and value, physical
//! size: [`L2Info`], 40 bytes) is kept in the ARC entry when the block is cached under a
//! `secondarycache` policy that admits it.
//!
//! # Eligibility
//!
//! A block may go to the L2ARC when the `secondarycache` of the dataset it was read or written
//! for admits its kind (`all`, `metadata`, `none`; [`SecondaryScope`] carries the policy on the
//! calling thread, since the block layer does not know datasets; the MOS is `all`); when it was
//! not read by prefetch only (`l2arc_noprefetch`); and when it was born in a txg already synced
//! (a block born in the syncing txg may still be rewritten in place by a later pass).
//!
//! # On-disk structures
//!
//! See [`format`]: labels, a device header at the start of the data area, and the ring of
//! buffers and log blocks. The ring wraps: before the hand writes over older buffers their
//! headers are dropped ([`device`]), and a log block in an overwritten area is no longer
//! followed at import.
//!
//! # Memory
//!
//! One header per cached buffer: the map entry (key and [`L2Header`]) and the ring's slot,
//! [`L2_HDR_BYTES`] bytes in all (105 on x86-64; OpenZFS's L2-only headers take about 70-100), counted in
//! `l2_hdr_size`. The rebuild stops (`l2_rebuild_lowmem`) when headers would exceed
//! `l2arc_meta_percent` of `arc_max`.
//!
//! # Locking
//!
//! `headers` (one mutex) maps keys to headers; each device's ring has its own mutex, taken
//! before `headers` when both are needed (feed, eviction, removal). No lock is held across a
//! device read; the feed holds its device's ring lock across its writes (only the feed and
//! device removal take it). The ARC's shard locks are never held while these are taken.
//!
//! # Crash behaviour
//!
//! Nothing the pool needs lives here. A crash loses at most what was written after the last
//! device header: see [`rebuild`] for why a rebuild never trusts a buffer the interrupted feed
//! may have overwritten (and why, if it did, the block pointer's checksum would catch it).
//!
//! # Cost
//!
//! Per ARC miss with cache devices: one hash lookup under `headers`. Per feed (1 s): one scan of
//! at most `l2arc_headroom` × the write budget of list tails, a copy of what is written into
//! the write buffer (recompression only with the compressed ARC off),
//! one device write of the buffers and their log block, one flush, one header write. Per freed
//! block: one hash removal.

pub mod device;
pub mod feed;
pub mod format;
pub mod rebuild;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};

use crate::block::blkptr::{BlockPtr, ChecksumType, Compression};
use crate::block::{checksum, compress};
use crate::cache::{BlockCache, BlockKey, BlockKind, CachePolicy, CachedBlock};
use crate::tunables::Tunables;
use crate::types::Guid;
use crate::vdev::IoClass;

pub use device::{CacheDeviceHealth, L2Device};

/// What the feed needs of a block's pointer to write its physical bytes from what the ARC
/// keeps, kept in the ARC entry of an eligible block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2Info {
    /// With the zstd level the block was written with.
    pub compression: Compression,
    pub checksum_type: ChecksumType,
    pub checksum: [u8; 32],
    pub size_physical: u32,
}

impl L2Info {
    /// The info of `bp` whose verified physical bytes are `physical` (read from disk), or of a
    /// block being written (`physical` None: its pointer carries the zstd level). None for a
    /// block the L2ARC cannot hold: embedded, hole or gang.
    pub fn of(bp: &BlockPtr, physical: Option<&[u8]>) -> Option<L2Info> {
        if bp.embedded || bp.is_hole() || bp.is_gang() {
            return None;
        }
        let compression = match (bp.compression, physical) {
            (Compression::Zstd { .. }, Some(bytes)) => Compression::Zstd {
                level: compress::payload_zstd_level(bytes).ok()?,
            },
            (compression, _) => compression,
        };
        Some(L2Info {
            compression,
            checksum_type: bp.checksum_type,
            checksum: bp.checksum,
            size_physical: bp.size_physical,
        })
    }

    /// The block's physical bytes (at least `size_physical` of them) from what the ARC keeps
    /// of it: its stored bytes, shared as they are (they are the ones the block pointer's
    /// checksum was verified or computed against), or a compressed block's contents (the ARC
    /// keeps contents when `compressed_arc_enabled` is 0) recompressed, padded and verified:
    /// None when they do not verify.
    pub fn physical(&self, block: &CachedBlock) -> Option<Arc<Vec<u8>>> {
        let size = self.size_physical as usize;
        if block.is_compressed() || self.compression == Compression::Off {
            return (block.bytes.len() >= size).then(|| block.bytes.clone());
        }
        let contents = &block.bytes;
        let mut payload = compress::compress(self.compression, contents)?;
        if payload.len() > self.size_physical as usize {
            return None;
        }
        payload.resize(size, 0);
        (checksum::compute(self.checksum_type, &payload) == self.checksum)
            .then(|| Arc::new(payload))
    }
}

thread_local! {
    static SECONDARY: Cell<CachePolicy> = const { Cell::new(CachePolicy::All) };
}

/// The `secondarycache` policy of the dataset the calling thread reads or writes for, while
/// the scope lives (the MOS and anything outside a scope: `all`).
pub struct SecondaryScope {
    previous: CachePolicy,
}

impl SecondaryScope {
    pub fn new(policy: CachePolicy) -> SecondaryScope {
        SecondaryScope {
            previous: SECONDARY.with(|cell| cell.replace(policy)),
        }
    }
}

impl Drop for SecondaryScope {
    fn drop(&mut self) {
        SECONDARY.with(|cell| cell.set(self.previous));
    }
}

/// The calling thread's `secondarycache` policy.
pub fn secondary_policy() -> CachePolicy {
    SECONDARY.with(Cell::get)
}

/// Where a cached buffer is: its device, offset and sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2Header {
    pub device: Guid,
    pub offset: u64,
    pub size_physical: u32,
    pub size_logical: u32,
    pub compression: u8,
    pub kind: BlockKind,
    /// Fed from the MFU (else the MRU), and read only by a prefetch then.
    pub mfu: bool,
    pub prefetch: bool,
}

impl L2Header {
    /// The header of the buffer `entry` describes on device `device`.
    pub fn of(entry: &format::LogEntry, device: Guid) -> L2Header {
        L2Header {
            device,
            offset: entry.l2_offset,
            size_physical: entry.size_physical,
            size_logical: entry.size_logical,
            compression: entry.compression,
            kind: entry.kind,
            mfu: entry.mfu,
            prefetch: entry.prefetch,
        }
    }

    /// Bytes the buffer takes on the device.
    pub fn size_allocated(&self) -> u64 {
        format::sector_round(self.size_physical as u64)
    }
}

/// Memory per cached buffer: its map entry (with the hash table's control byte and load
/// factor) and its slot in the device's ring.
pub const L2_HDR_BYTES: u64 = ((std::mem::size_of::<(BlockKey, L2Header)>() + 1) * 8 / 7
    + std::mem::size_of::<device::Slot>()) as u64;
const _: () = assert!(L2_HDR_BYTES <= 112);

/// The L2ARC's tunables (OpenZFS names and defaults, `tunables.rs`).
#[derive(Clone, Copy, Debug)]
pub struct L2Tunables {
    pub write_max: u64,
    pub write_boost: u64,
    pub headroom: u64,
    pub noprefetch: bool,
    pub feed_secs: u64,
    pub feed_min_ms: u64,
    pub feed_again: bool,
    pub rebuild_enabled: bool,
    pub meta_percent: u64,
    pub arc_max: u64,
}

impl L2Tunables {
    pub fn from(tunables: &Tunables) -> L2Tunables {
        L2Tunables {
            write_max: tunables.l2arc_write_max,
            write_boost: tunables.l2arc_write_boost,
            headroom: tunables.l2arc_headroom,
            noprefetch: tunables.l2arc_noprefetch != 0,
            feed_secs: tunables.l2arc_feed_secs,
            feed_min_ms: tunables.l2arc_feed_min_ms,
            feed_again: tunables.l2arc_feed_again != 0,
            rebuild_enabled: tunables.l2arc_rebuild_enabled != 0,
            meta_percent: tunables.l2arc_meta_percent,
            arc_max: tunables.arc_max,
        }
    }

    /// Most bytes one feed writes past the hand before the device header is rewritten: the
    /// rebuild ignores that much of the older lap beyond the hand.
    pub fn feed_max(&self) -> u64 {
        self.write_max + self.write_boost + 2 * format::LOG_BLOCK_MAX
    }
}

macro_rules! l2_counters {
    ($($(#[doc = $doc:expr])* $name:ident),* $(,)?) => {
        /// The L2ARC's event counters (arcstats names), as a snapshot.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub struct L2Stats {
            $( $(#[doc = $doc])* #[serde(default)] pub $name: u64, )*
        }

        #[derive(Default)]
        struct L2Counters {
            $( $name: AtomicU64, )*
        }

        impl L2Counters {
            fn snapshot(&self) -> L2Stats {
                L2Stats { $( $name: self.$name.load(Ordering::Relaxed), )* }
            }
        }

        impl L2Stats {
            /// Every field as (arcstats name, whether a size in bytes, value).
            pub fn fields(&self) -> Vec<(&'static str, bool, u64)> {
                vec![ $( (
                    stringify!($name),
                    stringify!($name).ends_with("size") || stringify!($name).ends_with("bytes"),
                    self.$name,
                ), )* ]
            }
        }
    };
}

l2_counters!(
    /// Cache devices in use (not missing).
    l2_ndev,
    l2_hits,
    l2_misses,
    l2_feeds,
    l2_read_bytes,
    l2_write_bytes,
    l2_writes_sent,
    l2_writes_done,
    l2_writes_error,
    /// Headers dropped by the write hand while a read of their buffer was in flight.
    l2_evict_reading,
    /// Headers dropped by the write hand whose block was still in the ARC.
    l2_evict_l1cached,
    l2_cksum_bad,
    l2_io_error,
    /// Logical bytes of the cached buffers.
    l2_size,
    /// Bytes they take on the cache devices.
    l2_asize,
    /// Device bytes of cached data blocks and of cached metadata blocks.
    l2_bufc_data_asize,
    l2_bufc_metadata_asize,
    /// Device bytes of buffers fed from the MRU, from the MFU, and read only by a prefetch.
    l2_mru_asize,
    l2_mfu_asize,
    l2_prefetch_asize,
    /// Memory of the headers.
    l2_hdr_size,
    l2_log_blk_writes,
    /// Log blocks in the valid part of the rings.
    l2_log_blk_count,
    l2_rebuild_success,
    l2_rebuild_unsupported,
    l2_rebuild_io_errors,
    l2_rebuild_dh_errors,
    l2_rebuild_cksum_lb_errors,
    l2_rebuild_lowmem,
    l2_rebuild_size,
    l2_rebuild_asize,
    l2_rebuild_bufs,
    l2_rebuild_log_blks,
    /// Candidates whose recompressed bytes did not match their block pointer (not written).
    l2_feed_mismatch,
    /// Total capacity of the rings of the devices in use.
    l2_dev_size,
);

/// Where a feed candidate sits in the ARC: its kind, its list (MFU or MRU) and whether only
/// a prefetch has read it (OpenZFS keeps the list in `b_l2hdr.b_arcs_state` and persists it
/// in log entries, for `l2_mru_asize`, `l2_mfu_asize` and `l2_prefetch_asize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2Origin {
    pub kind: BlockKind,
    pub mfu: bool,
    pub prefetch: bool,
}

/// The pool's L2ARC: see the module documentation.
pub struct L2Arc {
    devices: RwLock<Vec<Arc<L2Device>>>,
    headers: Mutex<HashMap<BlockKey, L2Header>>,
    counters: L2Counters,
    cache: Arc<BlockCache>,
    pub(crate) tunables: L2Tunables,
    pool_guid: AtomicU64,
    /// The newest synced txg: blocks born later are not fed.
    synced_txg: AtomicU64,
    writable: AtomicBool,
    /// The feed thread is running (started with the first device).
    feeding: AtomicBool,
    shutdown: AtomicBool,
    /// Wakes the feed thread early (shutdown, a new device).
    wake: (Mutex<bool>, Condvar),
    /// Which device the next feed writes to.
    rotor: AtomicU64,
    feed_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl L2Arc {
    pub fn new(cache: Arc<BlockCache>, tunables: &Tunables) -> L2Arc {
        L2Arc {
            devices: RwLock::new(Vec::new()),
            headers: Mutex::new(HashMap::new()),
            counters: L2Counters::default(),
            cache,
            tunables: L2Tunables::from(tunables),
            pool_guid: AtomicU64::new(0),
            synced_txg: AtomicU64::new(0),
            writable: AtomicBool::new(true),
            feeding: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
            rotor: AtomicU64::new(0),
            feed_thread: Mutex::new(None),
        }
    }

    pub fn set_pool_guid(&self, guid: Guid) {
        self.pool_guid.store(guid.0, Ordering::Relaxed);
    }

    pub fn pool_guid(&self) -> u64 {
        self.pool_guid.load(Ordering::Relaxed)
    }

    /// The newest synced txg (blocks born after it are not fed).
    pub fn set_synced_txg(&self, txg: u64) {
        self.synced_txg.store(txg, Ordering::Relaxed);
    }

    /// Whether the feed may write (a read-only import only reads its cache devices).
    pub fn set_writable(&self, writable: bool) {
        self.writable.store(writable, Ordering::Relaxed);
    }

    /// Every cache device, usable or not, in the order added.
    pub fn devices(&self) -> Vec<Arc<L2Device>> {
        self.devices.read().clone()
    }

    /// Whether any device can serve reads.
    pub fn has_devices(&self) -> bool {
        self.devices.read().iter().any(|device| device.is_usable())
    }

    /// Add a device (at import, with `rebuild`: its buffers are found again by the feed thread
    /// before it feeds; from `pool add`, empty). Starts the feed thread with the first device.
    pub fn add_device(self: &Arc<Self>, device: Arc<L2Device>) {
        self.devices.write().push(device);
        self.start_feed_thread();
        self.kick();
    }

    /// Remove the device with this guid: every header naming it is dropped. Returns it.
    pub fn remove_device(&self, guid: Guid) -> Option<Arc<L2Device>> {
        let device = {
            let mut devices = self.devices.write();
            let index = devices.iter().position(|device| device.guid == guid)?;
            devices.remove(index)
        };
        let mut ring = device.ring.lock();
        ring.removed = true;
        self.drop_ring_headers(&mut ring, guid);
        Some(device.clone())
    }

    /// Drop every header of the buffers in `ring` (device `guid`) and forget its slots.
    fn drop_ring_headers(&self, ring: &mut device::Ring, guid: Guid) {
        let mut headers = self.headers.lock();
        for slot in ring.slots.drain(..) {
            if !slot.is_log && headers.get(&slot.key).is_some_and(|h| h.device == guid) {
                let header = headers.remove(&slot.key).expect("present");
                self.uncount(&header);
            }
        }
        self.counters
            .l2_log_blk_count
            .fetch_sub(ring.log_blocks_valid, Ordering::Relaxed);
        ring.log_blocks_valid = 0;
    }

    /// Count an I/O error of `device` (no ring or header lock held by the caller when
    /// `purge`); the error that faults it is logged and, with `purge`, the device's headers
    /// are dropped at once (else by the feed thread's next round).
    pub(super) fn io_error(&self, device: &L2Device, purge: bool) {
        if device.note_io_error(std::time::Instant::now()) {
            log::warn!(
                "l2arc: cache device {} faulted after {} I/O errors within {} s; it is no longer \
                 read or written (pool clear brings it back)",
                device.path.display(),
                device::FAULT_IO_N,
                device::FAULT_IO_T.as_secs()
            );
        }
        if purge {
            self.purge_faulted();
        }
    }

    /// Drop the headers of devices faulted since the last call (no ring or header lock held).
    pub(super) fn purge_faulted(&self) {
        for device in self.devices() {
            if device.is_faulted() && !device.purged.swap(true, Ordering::AcqRel) {
                let mut ring = device.ring.lock();
                self.drop_ring_headers(&mut ring, device.guid);
            }
        }
    }

    fn device(&self, guid: Guid) -> Option<Arc<L2Device>> {
        self.devices
            .read()
            .iter()
            .find(|device| device.guid == guid)
            .cloned()
    }

    /// The per-kind and per-origin counters of allocated bytes `header` counts in.
    fn asize_counters(&self, header: &L2Header) -> impl Iterator<Item = &AtomicU64> {
        let kind = match header.kind {
            BlockKind::Data => &self.counters.l2_bufc_data_asize,
            BlockKind::Metadata => &self.counters.l2_bufc_metadata_asize,
        };
        let list = if header.mfu {
            &self.counters.l2_mfu_asize
        } else {
            &self.counters.l2_mru_asize
        };
        let prefetch = header.prefetch.then_some(&self.counters.l2_prefetch_asize);
        [&self.counters.l2_asize, kind, list]
            .into_iter()
            .chain(prefetch)
    }

    fn count(&self, header: &L2Header) {
        self.counters
            .l2_size
            .fetch_add(header.size_logical as u64, Ordering::Relaxed);
        for counter in self.asize_counters(header) {
            counter.fetch_add(header.size_allocated(), Ordering::Relaxed);
        }
    }

    fn uncount(&self, header: &L2Header) {
        self.counters
            .l2_size
            .fetch_sub(header.size_logical as u64, Ordering::Relaxed);
        for counter in self.asize_counters(header) {
            counter.fetch_sub(header.size_allocated(), Ordering::Relaxed);
        }
    }

    /// Whether `key` is cached on a device.
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.headers.lock().contains_key(key)
    }

    /// Buffers cached.
    pub fn len(&self) -> usize {
        self.headers.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drop `key`'s header (the block was freed): its space on the device is reused when the
    /// hand comes round.
    pub fn remove(&self, key: &BlockKey) {
        let mut headers = self.headers.lock();
        if headers.is_empty() {
            return;
        }
        if let Some(header) = headers.remove(key) {
            self.uncount(&header);
        }
    }

    /// On an ARC miss: the verified physical bytes of `bp` from a cache device, or None (not
    /// cached, or the read failed or did not verify: counted, header dropped; the caller reads
    /// the pool).
    pub fn read(&self, key: &BlockKey, bp: &BlockPtr) -> Option<Vec<u8>> {
        if !self.has_devices() {
            return None;
        }
        let found = self.headers.lock().get(key).copied();
        let Some(header) = found else {
            self.counters.l2_misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let device = self
            .device(header.device)
            .filter(|device| device.is_usable());
        let stale = header.size_physical != bp.size_physical
            || header.compression != u8::from(bp.compression);
        let Some(device) = device.filter(|_| !stale) else {
            self.drop_header(key, &header);
            self.counters.l2_misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let mut buffer = vec![0u8; header.size_allocated() as usize];
        let result = device
            .leaf
            .queue
            .read(IoClass::SyncRead, header.offset, &mut buffer);
        self.counters
            .l2_read_bytes
            .fetch_add(buffer.len() as u64, Ordering::Relaxed);
        if let Err(error) = result {
            log::warn!(
                "l2arc: read of {} bytes at {:#x} of {} failed: {error}",
                buffer.len(),
                header.offset,
                device.path.display()
            );
            self.counters.l2_io_error.fetch_add(1, Ordering::Relaxed);
            self.drop_header(key, &header);
            self.io_error(&device, true);
            self.counters.l2_misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        buffer.truncate(header.size_physical as usize);
        if checksum::compute(bp.checksum_type, &buffer) != bp.checksum {
            // The hand may have overwritten it while we read: not damage.
            if self.headers.lock().get(key) == Some(&header) {
                self.counters.l2_cksum_bad.fetch_add(1, Ordering::Relaxed);
                device.leaf.stats.record_checksum_error();
                log::warn!(
                    "l2arc: checksum mismatch for block {bp} at {:#x} of {}; reading the pool",
                    header.offset,
                    device.path.display()
                );
                self.drop_header(key, &header);
            } else {
                self.counters
                    .l2_evict_reading
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.counters.l2_misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.counters.l2_hits.fetch_add(1, Ordering::Relaxed);
        Some(buffer)
    }

    /// Drop `key`'s header if it is still `header`.
    fn drop_header(&self, key: &BlockKey, header: &L2Header) {
        let mut headers = self.headers.lock();
        if headers.get(key) == Some(header) {
            headers.remove(key);
            self.uncount(header);
        }
    }

    /// A snapshot of the counters and sizes.
    pub fn stats(&self) -> L2Stats {
        let mut stats = self.counters.snapshot();
        let entries = self.headers.lock().len() as u64;
        stats.l2_hdr_size = entries * L2_HDR_BYTES;
        let devices = self.devices.read();
        stats.l2_ndev = devices.iter().filter(|d| d.is_usable()).count() as u64;
        stats.l2_dev_size = devices
            .iter()
            .filter(|d| d.is_usable())
            .map(|d| d.ring_size())
            .sum();
        stats
    }

    /// Wake the feed thread now.
    pub fn kick(&self) {
        let (lock, condvar) = &self.wake;
        *lock.lock() = true;
        condvar.notify_all();
    }

    /// Stop the feed thread and flush the devices (export): after it returns nothing more is
    /// written, and the last device header is durable.
    pub fn stop(&self) {
        if self.shutdown.swap(true, Ordering::SeqCst) {
            return;
        }
        self.kick();
        let handle = self.feed_thread.lock().take();
        if let Some(handle) = handle {
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
        for device in self.devices.read().iter().filter(|d| d.is_usable()) {
            if let Err(error) = device.leaf.device.flush() {
                log::warn!("l2arc: flush of {} failed: {error}", device.path.display());
            }
        }
    }

    /// Release every cache device's lock (export).
    pub fn release_devices(&self) {
        for device in self.devices.read().iter() {
            device.leaf.device.release();
        }
    }

    /// Wait until every device added with a rebuild has been rebuilt (tests, bench).
    pub fn wait_rebuilt(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while self.devices.read().iter().any(|d| d.needs_rebuild()) {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        true
    }
}

impl Drop for L2Arc {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_budget_is_what_the_documentation_says() {
        // docs/design/04-cache.md §4g states about 100 bytes per buffer.
        assert!((80..=112).contains(&L2_HDR_BYTES), "{L2_HDR_BYTES}");
    }

    #[test]
    fn secondary_scope_nests_and_restores() {
        assert_eq!(secondary_policy(), CachePolicy::All);
        {
            let _outer = SecondaryScope::new(CachePolicy::Metadata);
            assert_eq!(secondary_policy(), CachePolicy::Metadata);
            {
                let _inner = SecondaryScope::new(CachePolicy::None);
                assert_eq!(secondary_policy(), CachePolicy::None);
            }
            assert_eq!(secondary_policy(), CachePolicy::Metadata);
        }
        assert_eq!(secondary_policy(), CachePolicy::All);
    }

    #[test]
    fn physical_bytes_are_shared_when_stored_and_rebuilt_only_when_they_verify() {
        let contents: Vec<u8> = (0..8192u32).map(|i| (i % 7) as u8).collect();
        for compression in [
            Compression::Off,
            Compression::Lz4,
            Compression::Zstd { level: 3 },
        ] {
            let mut payload = match compression {
                Compression::Off => contents.clone(),
                _ => compress::compress(compression, &contents).unwrap(),
            };
            let size_physical = format::sector_round(payload.len() as u64).min(8192) as u32;
            payload.resize(size_physical as usize, 0);
            let info = L2Info {
                compression,
                checksum_type: ChecksumType::Fletcher4,
                checksum: checksum::compute(ChecksumType::Fletcher4, &payload),
                size_physical,
            };
            // The ARC keeps contents (compressed ARC off, or an uncompressed block).
            let logical = CachedBlock::logical(Arc::new(contents.clone()));
            assert_eq!(info.physical(&logical).as_deref(), Some(&payload));
            let mut other = contents.clone();
            other[100] ^= 1;
            let other = CachedBlock::logical(Arc::new(other));
            assert_eq!(
                info.physical(&other).is_some(),
                compression == Compression::Off
            );
            // The ARC keeps the stored bytes: the very buffer is written, nothing recompressed.
            if compression != Compression::Off {
                let stored = CachedBlock {
                    bytes: Arc::new(payload.clone()),
                    compression,
                    size_logical: 8192,
                };
                let physical = info.physical(&stored).unwrap();
                assert!(Arc::ptr_eq(&physical, &stored.bytes));
            }
        }
    }
}
