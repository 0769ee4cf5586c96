//! One cache device: its leaf (device, I/O queue, statistics), its ring (write hand, lap, the
//! buffers and log blocks written, oldest first) and the eviction the hand does as it goes
//! round (OpenZFS `l2arc_dev_t`, `l2arc_evict`).
//!
//! # The ring in memory
//!
//! `slots` lists what was written in write order. Physically the older lap's survivors lie at
//! offsets at or past the hand and the current lap's below it, so the front of `slots` is
//! always what the hand reaches next: before writing `[hand, hand + n)` the feed pops the
//! front slots inside that range and drops their headers ([`Ring::evict`]); when the hand
//! wraps, whatever is left of the older lap goes too ([`Ring::wrap`]). A slot whose header
//! was dropped earlier (freed block, bad checksum) is skipped: the header map, not the slot,
//! says what is cached.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::format::{self, DeviceHeader, LogEntry, LogPointer, DEVICE_HEADER_SIZE};
use super::{L2Arc, L2Header};
use crate::cache::BlockKey;
use crate::types::Guid;
use crate::vdev::label::{VDEV_LABEL_END_SIZE, VDEV_LABEL_SIZE, VDEV_LABEL_START_SIZE};
use crate::vdev::{BlockDevice, Leaf};

/// A buffer or log block written to the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub key: BlockKey,
    pub offset: u64,
    pub size: u32,
    pub is_log: bool,
}

/// I/O errors within [`FAULT_IO_T`] that fault a cache device (ZED's `io_n`, 10 in 600 s: the
/// rule OpenZFS's fault agent applies to every leaf, cache devices included).
pub const FAULT_IO_N: usize = 10;
pub const FAULT_IO_T: Duration = Duration::from_secs(600);

/// A cache device's health as `pool status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheDeviceHealth {
    Online,
    /// [`FAULT_IO_N`] I/O errors within [`FAULT_IO_T`]: no longer read or written until
    /// `pool clear`.
    Faulted,
    /// Missing or unreadable at import: not used.
    Unavail,
}

impl CacheDeviceHealth {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheDeviceHealth::Online => "ONLINE",
            CacheDeviceHealth::Faulted => "FAULTED",
            CacheDeviceHealth::Unavail => "UNAVAIL",
        }
    }
}

/// The write side of a device: see the module documentation.
pub struct Ring {
    pub start: u64,
    pub end: u64,
    pub hand: u64,
    pub lap: u64,
    /// Log blocks written over the device's life (the newest one's sequence).
    pub log_blocks: u64,
    pub newest: LogPointer,
    pub slots: VecDeque<Slot>,
    /// Log blocks among `slots`.
    pub log_blocks_valid: u64,
    /// Set when the device leaves the pool: nothing more is written.
    pub removed: bool,
}

/// The ring of a device of `size_bytes`: after the header block, up to the back labels.
pub fn ring_bounds(size_bytes: u64) -> (u64, u64) {
    let aligned = size_bytes & !(VDEV_LABEL_SIZE - 1);
    (
        VDEV_LABEL_START_SIZE + DEVICE_HEADER_SIZE,
        aligned.saturating_sub(VDEV_LABEL_END_SIZE),
    )
}

impl Ring {
    pub fn empty(size_bytes: u64) -> Ring {
        let (start, end) = ring_bounds(size_bytes);
        Ring {
            start,
            end,
            hand: start,
            lap: 0,
            log_blocks: 0,
            newest: LogPointer::default(),
            slots: VecDeque::new(),
            log_blocks_valid: 0,
            removed: false,
        }
    }

    /// The device header describing this ring now.
    pub fn header(&self, pool_guid: u64, device_guid: Guid, feed_max: u64) -> DeviceHeader {
        DeviceHeader {
            pool_guid,
            device_guid: device_guid.0,
            ring_start: self.start,
            ring_end: self.end,
            hand: self.hand,
            lap: self.lap,
            feed_max,
            log_blocks: self.log_blocks,
            newest: self.newest,
        }
    }

    /// Drop what lies in `[hand, hand + size)`, about to be overwritten.
    pub fn evict(&mut self, size: u64, l2arc: &L2Arc, device: Guid) {
        let (low, high) = (self.hand, self.hand + size);
        self.pop_while(l2arc, device, |slot| {
            slot.offset >= low && slot.offset < high
        });
    }

    /// Move the hand back to the start for a new lap: the rest of the older lap (at or past
    /// the hand) is dropped, since the rebuild would no longer accept it.
    pub fn wrap(&mut self, l2arc: &L2Arc, device: Guid) {
        let hand = self.hand;
        self.pop_while(l2arc, device, |slot| slot.offset >= hand);
        self.hand = self.start;
        self.lap += 1;
    }

    fn pop_while(&mut self, l2arc: &L2Arc, device: Guid, mut condition: impl FnMut(&Slot) -> bool) {
        let mut headers = None;
        while let Some(slot) = self.slots.front().copied() {
            if !condition(&slot) {
                break;
            }
            self.slots.pop_front();
            if slot.is_log {
                self.log_blocks_valid -= 1;
                l2arc
                    .counters
                    .l2_log_blk_count
                    .fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            let headers = headers.get_or_insert_with(|| l2arc.headers.lock());
            let here = headers.get(&slot.key).is_some_and(|header: &L2Header| {
                header.device == device && header.offset == slot.offset
            });
            if here {
                let header = headers.remove(&slot.key).expect("present");
                l2arc.uncount(&header);
                if l2arc.cache.contains(&slot.key) {
                    l2arc
                        .counters
                        .l2_evict_l1cached
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Record a buffer written at `offset` (the caller inserts its header).
    pub fn push_buffer(&mut self, entry: &LogEntry, size: u64) {
        self.slots.push_back(Slot {
            key: entry.key,
            offset: entry.l2_offset,
            size: size as u32,
            is_log: false,
        });
    }

    pub fn push_log_block(&mut self, offset: u64, size: u64, l2arc: &L2Arc) {
        self.slots.push_back(Slot {
            key: BlockKey {
                vdev: crate::types::VdevId(0),
                offset: 0,
                birth: crate::types::Txg(0),
            },
            offset,
            size: size as u32,
            is_log: true,
        });
        self.log_blocks_valid += 1;
        l2arc
            .counters
            .l2_log_blk_count
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a buffer or log block written at `offset` (`size` bytes) in `lap` is still
    /// intact according to this ring's hand, allowing `feed_max` bytes past the hand that an
    /// interrupted feed may have overwritten.
    pub fn is_intact(&self, offset: u64, size: u64, lap: u64, feed_max: u64) -> bool {
        let inside =
            offset >= self.start && offset.checked_add(size).is_some_and(|end| end <= self.end);
        inside
            && ((lap == self.lap && offset + size <= self.hand)
                || (lap + 1 == self.lap && offset >= self.hand.saturating_add(feed_max)))
    }
}

/// A cache device of the pool.
pub struct L2Device {
    pub guid: Guid,
    pub path: PathBuf,
    pub leaf: Arc<Leaf>,
    pub ring: Mutex<Ring>,
    /// Added at import: the feed thread rebuilds its headers before feeding it.
    rebuild_pending: AtomicBool,
    /// Faulted by repeated I/O errors (see [`FAULT_IO_N`]).
    faulted: AtomicBool,
    /// Set once the headers of a faulted device have been dropped.
    pub(super) purged: AtomicBool,
    /// When its recent I/O errors happened (at most [`FAULT_IO_N`]).
    io_errors: Mutex<VecDeque<Instant>>,
}

impl L2Device {
    pub fn new(guid: Guid, path: PathBuf, device: Arc<dyn BlockDevice>, rebuild: bool) -> L2Device {
        let size = device.size_bytes();
        let leaf = Arc::new(Leaf::new(guid, path.clone(), device));
        L2Device {
            guid,
            path,
            leaf,
            ring: Mutex::new(Ring::empty(size)),
            rebuild_pending: AtomicBool::new(rebuild),
            faulted: AtomicBool::new(false),
            purged: AtomicBool::new(false),
            io_errors: Mutex::new(VecDeque::new()),
        }
    }

    /// Usable: present at import (a missing device is listed but never read or written) and
    /// not faulted.
    pub fn is_usable(&self) -> bool {
        !self.leaf.device.is_missing() && !self.is_faulted()
    }

    pub fn is_faulted(&self) -> bool {
        self.faulted.load(Ordering::Acquire)
    }

    pub fn health(&self) -> CacheDeviceHealth {
        if self.leaf.device.is_missing() {
            CacheDeviceHealth::Unavail
        } else if self.is_faulted() {
            CacheDeviceHealth::Faulted
        } else {
            CacheDeviceHealth::Online
        }
    }

    /// Count an I/O error of this device at `now`; true when it faults the device (the
    /// [`FAULT_IO_N`]th within [`FAULT_IO_T`]).
    pub fn note_io_error(&self, now: Instant) -> bool {
        let mut errors = self.io_errors.lock();
        while errors
            .front()
            .is_some_and(|&then| now.saturating_duration_since(then) > FAULT_IO_T)
        {
            errors.pop_front();
        }
        errors.push_back(now);
        if errors.len() > FAULT_IO_N {
            errors.pop_front();
        }
        errors.len() >= FAULT_IO_N && !self.faulted.swap(true, Ordering::AcqRel)
    }

    /// `pool clear`: forget the errors and use the device again (it is fed from its hand on).
    pub fn clear_fault(&self) {
        self.io_errors.lock().clear();
        self.faulted.store(false, Ordering::Release);
        self.purged.store(false, Ordering::Release);
    }

    pub fn needs_rebuild(&self) -> bool {
        self.rebuild_pending.load(Ordering::Acquire)
    }

    pub(super) fn rebuilt(&self) {
        self.rebuild_pending.store(false, Ordering::Release);
    }

    /// Bytes of the ring.
    pub fn ring_size(&self) -> u64 {
        let ring = self.ring.lock();
        ring.end.saturating_sub(ring.start)
    }

    /// Write the device header (not durable until flushed).
    pub fn write_header(&self, header: &DeviceHeader) -> std::io::Result<()> {
        self.leaf.queue.write(
            crate::vdev::IoClass::AsyncWrite,
            VDEV_LABEL_START_SIZE,
            &header.encode(),
        )
    }

    /// Read the device header.
    pub fn read_header(&self) -> std::io::Result<Vec<u8>> {
        let mut bytes = vec![0u8; format::DEVICE_HEADER_SIZE as usize];
        self.leaf.queue.read(
            crate::vdev::IoClass::SyncRead,
            VDEV_LABEL_START_SIZE,
            &mut bytes,
        )?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::BlockKind;
    use crate::types::{Txg, VdevId};

    fn key(n: u64) -> BlockKey {
        BlockKey {
            vdev: VdevId(0),
            offset: n,
            birth: Txg(1),
        }
    }

    fn l2arc() -> L2Arc {
        L2Arc::new(
            Arc::new(crate::cache::BlockCache::new(1 << 20)),
            &crate::tunables::Tunables::default(),
        )
    }

    /// Put a buffer at the hand as the feed does.
    fn write(ring: &mut Ring, l2arc: &L2Arc, n: u64, size: u64) {
        ring.evict(size, l2arc, Guid(1));
        let entry = LogEntry {
            key: key(n),
            size_physical: size as u32,
            size_logical: size as u32,
            l2_offset: ring.hand,
            compression: 0,
            kind: BlockKind::Data,
            mfu: n % 2 == 1,
            prefetch: n.is_multiple_of(3),
        };
        let header = L2Header::of(&entry, Guid(1));
        l2arc.headers.lock().insert(key(n), header);
        l2arc.count(&header);
        ring.push_buffer(&entry, size);
        ring.hand += size;
    }

    #[test]
    fn the_hand_evicts_exactly_what_it_overwrites() {
        let l2arc = l2arc();
        let mut ring = Ring::empty(64 << 20);
        ring.end = ring.start + 10 * 4096;
        for n in 0..10 {
            write(&mut ring, &l2arc, n, 4096);
        }
        assert_eq!(l2arc.len(), 10);
        ring.wrap(&l2arc, Guid(1));
        assert_eq!(
            l2arc.len(),
            10,
            "a full lap leaves nothing of the older lap past the hand"
        );
        write(&mut ring, &l2arc, 100, 8192);
        assert_eq!(l2arc.len(), 9);
        assert!(!l2arc.contains(&key(0)) && !l2arc.contains(&key(1)));
        assert!(l2arc.contains(&key(2)) && l2arc.contains(&key(100)));
        // A freed block's slot is passed over without touching another header.
        l2arc.remove(&key(2));
        write(&mut ring, &l2arc, 101, 4096);
        assert_eq!(l2arc.len(), 9);
        assert_eq!(l2arc.stats().l2_asize, 9 * 4096 + 4096);
        // Wrapping early drops the rest of the older lap.
        ring.wrap(&l2arc, Guid(1));
        assert_eq!(l2arc.len(), 2);
        assert!(l2arc.contains(&key(100)) && l2arc.contains(&key(101)));
        assert_eq!(l2arc.stats().l2_size, 8192 + 4096);
    }

    #[test]
    fn intact_follows_the_hand_and_the_lap() {
        let mut ring = Ring::empty(64 << 20);
        ring.hand = ring.start + 100 * 4096;
        ring.lap = 3;
        let at = |n: u64| ring.start + n * 4096;
        assert!(ring.is_intact(at(10), 4096, 3, 0));
        assert!(
            !ring.is_intact(at(100), 4096, 3, 0),
            "past the hand in this lap"
        );
        assert!(ring.is_intact(at(100), 4096, 2, 0));
        assert!(
            !ring.is_intact(at(100), 4096, 2, 8192),
            "within the feed's reach"
        );
        assert!(ring.is_intact(at(102), 4096, 2, 8192));
        assert!(
            !ring.is_intact(at(10), 4096, 2, 0),
            "overwritten by this lap"
        );
        assert!(!ring.is_intact(at(200), 4096, 1, 0), "two laps ago");
        assert!(!ring.is_intact(0, 4096, 3, 0), "outside the ring");
        assert!(!ring.is_intact(u64::MAX - 10, 4096, 2, 0));
    }
}
