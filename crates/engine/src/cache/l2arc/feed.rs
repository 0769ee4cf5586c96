//! The L2ARC feed (OpenZFS `l2arc_feed_thread`, `l2arc_write_buffers`, `l2arc_log_blk_commit`).
//!
//! Every `l2arc_feed_secs` (sooner, but no sooner than `l2arc_feed_min_ms`, after a feed that
//! wrote its whole budget, with `l2arc_feed_again`) the thread first rebuilds any device added
//! at import ([`super::rebuild`]), then writes to one device (in turn) as [`L2Arc::feed`] says:
//!
//! 1. Budget: `l2arc_write_max`, plus `l2arc_write_boost` while the ARC has never evicted.
//! 2. Candidates from the ARC's list tails (`l2arc_headroom` × budget bytes scanned per list):
//!    not yet cached here, born in a synced txg. Their physical bytes are the ARC's stored
//!    bytes as they are (the compressed ARC), or, for a compressed block the ARC keeps
//!    decompressed (`compressed_arc_enabled` = 0), its contents recompressed and verified.
//! 3. Under the device's ring lock: for each buffer, drop what the hand will overwrite, place it
//!    at the hand. When the ring's end is near, the pending buffers and their log block are
//!    written, the hand wraps to a new lap and the device header is written and flushed before
//!    anything of the new lap (so the rebuild never takes new-lap bytes for old-lap buffers).
//! 4. One write (async-write class) of the buffers and the log block that records them, a
//!    flush, then the headers are published and the device header rewritten (made durable by
//!    the next feed's flush, or export's).
//!
//! A write error counts `l2_writes_error`; its buffers are not published (the hand still moves
//! past them, so nothing is written twice to one place in a lap).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::device::L2Device;
use super::format::{self, LogBlock, LogEntry, LogPointer};
use super::{L2Arc, L2Header};
use crate::vdev::IoClass;

/// Buffers placed in the ring but not yet written.
struct Batch {
    start: u64,
    bytes: Vec<u8>,
    entries: Vec<LogEntry>,
}

impl L2Arc {
    /// Start the feed thread (once).
    pub(super) fn start_feed_thread(self: &Arc<Self>) {
        if self.feeding.swap(true, Ordering::SeqCst) {
            return;
        }
        let l2arc = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("l2arc_feed".into())
            .spawn(move || {
                let mut wrote_all = false;
                loop {
                    let Some(this) = l2arc.upgrade() else {
                        return;
                    };
                    let interval = if wrote_all && this.tunables.feed_again {
                        Duration::from_millis(this.tunables.feed_min_ms)
                    } else {
                        Duration::from_secs(this.tunables.feed_secs.max(1))
                    };
                    {
                        let (lock, condvar) = &this.wake;
                        let mut woken = lock.lock();
                        if !*woken {
                            condvar.wait_for(&mut woken, interval);
                        }
                        *woken = false;
                    }
                    if this.shutdown.load(Ordering::SeqCst) {
                        return;
                    }
                    this.rebuild_pending();
                    wrote_all = this.feed() >= this.tunables.write_max;
                    this.purge_faulted();
                }
            });
        match spawned {
            Ok(handle) => *self.feed_thread.lock() = Some(handle),
            Err(error) => log::warn!("l2arc: no feed thread, nothing will be cached: {error}"),
        }
    }

    /// One feed: write eligible buffers to the next device. Returns the bytes of buffers
    /// written. Called by the feed thread; tests and benchmarks call it directly.
    pub fn feed(&self) -> u64 {
        if !self.writable.load(Ordering::Relaxed) || self.shutdown.load(Ordering::SeqCst) {
            return 0;
        }
        let devices: Vec<Arc<L2Device>> = self
            .devices
            .read()
            .iter()
            .filter(|device| device.is_usable() && !device.needs_rebuild())
            .cloned()
            .collect();
        if devices.is_empty() {
            return 0;
        }
        let device =
            &devices[(self.rotor.fetch_add(1, Ordering::Relaxed) % devices.len() as u64) as usize];
        self.counters.l2_feeds.fetch_add(1, Ordering::Relaxed);
        let budget = self.tunables.write_max
            + if self.cache.is_warm() {
                0
            } else {
                self.tunables.write_boost
            };
        let headroom = match self.tunables.headroom {
            0 => u64::MAX,
            headroom => budget.saturating_mul(headroom),
        };
        let synced = self.synced_txg.load(Ordering::Relaxed);
        let ring_size = device.ring_size();
        let mut chosen = Vec::new();
        let mut total = 0u64;
        for (key, block, info, origin) in
            self.cache.l2_candidates(headroom, self.tunables.noprefetch)
        {
            let size = format::sector_round(info.size_physical as u64);
            if key.birth.0 > synced
                || size + format::LOG_BLOCK_MAX > ring_size / 4
                || total + size > budget
                || self.contains(&key)
            {
                continue;
            }
            let Some(physical) = info.physical(&block) else {
                self.counters
                    .l2_feed_mismatch
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            };
            total += size;
            chosen.push((
                LogEntry {
                    key,
                    size_physical: info.size_physical,
                    size_logical: block.size_logical,
                    l2_offset: 0,
                    compression: u8::from(info.compression),
                    kind: origin.kind,
                    mfu: origin.mfu,
                    prefetch: origin.prefetch,
                },
                physical,
            ));
        }
        if chosen.is_empty() {
            return 0;
        }
        self.write_buffers(device, chosen)
    }

    /// Place `buffers` at the device's hand and write them with their log blocks.
    fn write_buffers(&self, device: &L2Device, buffers: Vec<(LogEntry, Arc<Vec<u8>>)>) -> u64 {
        let mut ring = device.ring.lock();
        if ring.removed {
            return 0;
        }
        let mut written = 0;
        let mut batch = Batch {
            start: ring.hand,
            bytes: Vec::new(),
            entries: Vec::new(),
        };
        for (mut entry, physical) in buffers {
            let physical = &physical[..entry.size_physical as usize];
            let size = format::sector_round(physical.len() as u64);
            let full = batch.entries.len() == format::LOG_ENTRIES_MAX;
            if ring.hand + size + format::LOG_BLOCK_MAX > ring.end || full {
                written += self.commit(device, &mut ring, &mut batch);
                if !full {
                    ring.wrap(self, device.guid);
                    let header =
                        ring.header(self.pool_guid(), device.guid, self.tunables.feed_max());
                    if device
                        .write_header(&header)
                        .and_then(|()| device.leaf.device.flush())
                        .is_err()
                    {
                        self.counters
                            .l2_writes_error
                            .fetch_add(1, Ordering::Relaxed);
                        self.io_error(device, false);
                        return written;
                    }
                }
                batch.start = ring.hand;
            }
            ring.evict(size, self, device.guid);
            entry.l2_offset = ring.hand;
            ring.push_buffer(&entry, size);
            ring.hand += size;
            let at = batch.bytes.len();
            batch.bytes.resize(at + size as usize, 0);
            batch.bytes[at..at + physical.len()].copy_from_slice(physical);
            batch.entries.push(entry);
        }
        written += self.commit(device, &mut ring, &mut batch);
        let header = ring.header(self.pool_guid(), device.guid, self.tunables.feed_max());
        if device.write_header(&header).is_err() {
            self.counters
                .l2_writes_error
                .fetch_add(1, Ordering::Relaxed);
            self.io_error(device, false);
        }
        written
    }

    /// Write the batch and the log block recording it at the hand (the ring has room for the
    /// log block: the caller keeps `LOG_BLOCK_MAX` free before the end), flush, and publish the
    /// headers. Returns the buffer bytes written.
    fn commit(&self, device: &L2Device, ring: &mut super::device::Ring, batch: &mut Batch) -> u64 {
        if batch.entries.is_empty() {
            return 0;
        }
        let entries = std::mem::take(&mut batch.entries);
        let mut bytes = std::mem::take(&mut batch.bytes);
        let buffer_bytes = bytes.len() as u64;
        let block = LogBlock {
            sequence: ring.log_blocks + 1,
            lap: ring.lap,
            previous: ring.newest,
            entries,
        };
        let (encoded, checksum) = block.encode();
        let log_size = encoded.len() as u64;
        ring.evict(log_size, self, device.guid);
        let log_offset = ring.hand;
        ring.push_log_block(log_offset, log_size, self);
        ring.hand += log_size;
        bytes.extend_from_slice(&encoded);
        self.counters.l2_writes_sent.fetch_add(1, Ordering::Relaxed);
        let result = device
            .leaf
            .queue
            .write(IoClass::AsyncWrite, batch.start, &bytes)
            .and_then(|()| device.leaf.device.flush());
        if let Err(error) = result {
            log::warn!(
                "l2arc: write of {} bytes at {:#x} of {} failed: {error}",
                bytes.len(),
                batch.start,
                device.path.display()
            );
            self.counters
                .l2_writes_error
                .fetch_add(1, Ordering::Relaxed);
            self.io_error(device, false);
            return 0;
        }
        self.counters.l2_writes_done.fetch_add(1, Ordering::Relaxed);
        self.counters
            .l2_write_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.counters
            .l2_log_blk_writes
            .fetch_add(1, Ordering::Relaxed);
        ring.log_blocks += 1;
        ring.newest = LogPointer {
            offset: log_offset,
            size: log_size as u32,
            lap: ring.lap,
            checksum,
        };
        let mut headers = self.headers.lock();
        for entry in &block.entries {
            let header = L2Header::of(entry, device.guid);
            if let Some(previous) = headers.insert(entry.key, header) {
                self.uncount(&previous);
            }
            self.count(&header);
        }
        buffer_bytes
    }
}
