//! Rebuilding the L2ARC's headers at import (OpenZFS `l2arc_rebuild`).
//!
//! For each cache device added at import, the feed thread (before its first feed) reads the
//! device header and follows the chain of log blocks from the newest back, re-creating a header
//! for every buffer a log block records that is still intact:
//!
//! - The device header must decode (magic, version, checksum) and name this pool and device;
//!   an empty one means a fresh device; a bad one counts `l2_rebuild_dh_errors` (a version this
//!   build does not know, `l2_rebuild_unsupported`) and the device starts empty.
//! - A log block is read only if its pointer says it is intact ([`super::device::Ring::is_intact`]:
//!   written in the header's lap below the hand, or in the lap before at or past the hand plus
//!   `feed_max`, the most an interrupted feed can have written past the hand the header names).
//!   It must decode and carry the checksum its pointer names and the sequence one below the
//!   block that pointed to it. A read error ends the rebuild (`l2_rebuild_io_errors`), so does a
//!   bad block (`l2_rebuild_cksum_lb_errors`); what was found before it is kept.
//! - Each entry's buffer must be intact by the same rule (the entries share their log block's
//!   lap). The newest entry for a key wins. The rebuild stops when the headers would take more
//!   than `l2arc_meta_percent` of `arc_max` (`l2_rebuild_lowmem`).
//!
//! The device then continues from the header's hand and lap, with the rebuilt buffers in its
//! ring in write order. A rebuilt buffer is still verified against its block pointer's checksum
//! on every read, so a wrong rebuild costs a miss, never bad data.

use std::sync::atomic::Ordering;

use super::device::{L2Device, Ring, Slot};
use super::format::{DeviceHeader, FormatError, LogBlock, LogPointer};
use super::{L2Arc, L2Header, L2_HDR_BYTES};

/// Why a rebuild ended early.
#[derive(Debug)]
enum Stop {
    Io,
    BadBlock,
    LowMemory,
}

impl L2Arc {
    /// Rebuild every device that waits for it (the feed thread, before feeding).
    pub(super) fn rebuild_pending(&self) {
        for device in self.devices() {
            if device.needs_rebuild() {
                self.rebuild(&device);
                device.rebuilt();
            }
        }
    }

    /// Rebuild one device's headers from its log blocks; see the module documentation.
    pub fn rebuild(&self, device: &L2Device) {
        if !device.is_usable() {
            return;
        }
        let header = match device.read_header() {
            Err(error) => {
                log::warn!(
                    "l2arc: {}: cannot read the device header: {error}",
                    device.path.display()
                );
                self.counters
                    .l2_rebuild_io_errors
                    .fetch_add(1, Ordering::Relaxed);
                self.io_error(device, false);
                return;
            }
            Ok(bytes) => DeviceHeader::decode(&bytes),
        };
        let header = match header {
            Ok(header) => header,
            Err(FormatError::Empty) => return,
            Err(FormatError::Unsupported { .. }) => {
                self.counters
                    .l2_rebuild_unsupported
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(error) => {
                log::warn!(
                    "l2arc: {}: {error}; the device starts empty",
                    device.path.display()
                );
                self.counters
                    .l2_rebuild_dh_errors
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let mut ring = device.ring.lock();
        if header.pool_guid != self.pool_guid()
            || header.device_guid != device.guid.0
            || header.ring_start != ring.start
            || header.ring_end != ring.end
        {
            log::warn!(
                "l2arc: {}: the device header names another pool, device or geometry; the device starts empty",
                device.path.display()
            );
            self.counters
                .l2_rebuild_dh_errors
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        ring.hand = header.hand;
        ring.lap = header.lap;
        ring.log_blocks = header.log_blocks;
        ring.newest = header.newest;
        if !self.tunables.rebuild_enabled {
            return;
        }
        let started = std::time::Instant::now();
        let (found, stop) = self.walk(device, &ring, &header);
        let stop_text = format!("{stop:?}");
        match stop {
            None => {
                self.counters
                    .l2_rebuild_success
                    .fetch_add(1, Ordering::Relaxed);
            }
            Some(Stop::Io) => {
                self.counters
                    .l2_rebuild_io_errors
                    .fetch_add(1, Ordering::Relaxed);
                self.io_error(device, false);
            }
            Some(Stop::BadBlock) => {
                self.counters
                    .l2_rebuild_cksum_lb_errors
                    .fetch_add(1, Ordering::Relaxed);
            }
            Some(Stop::LowMemory) => {
                self.counters
                    .l2_rebuild_lowmem
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        let (buffers, log_blocks) = self.install(device, &mut ring, found, header.feed_max);
        log::info!(
            "l2arc: {}: rebuilt {buffers} buffers from {log_blocks} log blocks in {:?}{}",
            device.path.display(),
            started.elapsed(),
            if stop_text == "None" {
                String::new()
            } else {
                format!(" (stopped early: {stop_text})")
            }
        );
    }

    /// Follow the log blocks from the newest back; returns the blocks read, newest first.
    fn walk(
        &self,
        device: &L2Device,
        ring: &Ring,
        header: &DeviceHeader,
    ) -> (Vec<(LogPointer, LogBlock)>, Option<Stop>) {
        let mut found = Vec::new();
        let mut pointer = header.newest;
        let mut expected_sequence = header.log_blocks;
        let budget = self.tunables.arc_max / 100 * self.tunables.meta_percent;
        let mut buffers = self.len() as u64;
        while !pointer.is_none()
            && expected_sequence > 0
            && ring.is_intact(
                pointer.offset,
                pointer.size as u64,
                pointer.lap,
                header.feed_max,
            )
        {
            // The size is the pointer's word: bounded before it sizes the read.
            if u64::from(pointer.size) > super::format::LOG_BLOCK_SIZE_MAX {
                log::warn!(
                    "l2arc: {}: log pointer at {:#x} claims {} bytes, more than a log block; rebuild ends there",
                    device.path.display(),
                    pointer.offset,
                    pointer.size
                );
                return (found, Some(Stop::BadBlock));
            }
            let mut bytes = vec![0u8; pointer.size as usize];
            if device
                .leaf
                .queue
                .read(crate::vdev::IoClass::SyncRead, pointer.offset, &mut bytes)
                .is_err()
            {
                return (found, Some(Stop::Io));
            }
            let block = match LogBlock::decode(&bytes, &pointer.checksum) {
                Ok(block) if block.sequence == expected_sequence && block.lap == pointer.lap => {
                    block
                }
                Ok(_) | Err(_) => {
                    log::warn!(
                        "l2arc: {}: log block at {:#x} does not verify; rebuild ends there",
                        device.path.display(),
                        pointer.offset
                    );
                    return (found, Some(Stop::BadBlock));
                }
            };
            buffers += block.entries.len() as u64;
            if buffers * L2_HDR_BYTES > budget {
                return (found, Some(Stop::LowMemory));
            }
            expected_sequence -= 1;
            let previous = block.previous;
            found.push((pointer, block));
            pointer = previous;
        }
        (found, None)
    }

    /// Publish the headers of the intact buffers of `found` (newest block first, the newest
    /// entry of a key winning) and fill the ring's slots in write order.
    fn install(
        &self,
        device: &L2Device,
        ring: &mut Ring,
        found: Vec<(LogPointer, LogBlock)>,
        feed_max: u64,
    ) -> (u64, u64) {
        let mut slots: Vec<(u64, Slot)> = Vec::new();
        let mut buffers = 0;
        let log_blocks = found.len() as u64;
        let mut headers = self.headers.lock();
        for (pointer, block) in &found {
            slots.push((
                block.lap,
                Slot {
                    key: crate::cache::BlockKey {
                        vdev: crate::types::VdevId(0),
                        offset: 0,
                        birth: crate::types::Txg(0),
                    },
                    offset: pointer.offset,
                    size: pointer.size,
                    is_log: true,
                },
            ));
            self.counters
                .l2_rebuild_log_blks
                .fetch_add(1, Ordering::Relaxed);
            for entry in block.entries.iter().rev() {
                let header = L2Header::of(entry, device.guid);
                if entry.size_physical == 0
                    || headers.contains_key(&entry.key)
                    || !ring.is_intact(
                        entry.l2_offset,
                        header.size_allocated(),
                        block.lap,
                        feed_max,
                    )
                {
                    continue;
                }
                headers.insert(entry.key, header);
                self.count(&header);
                buffers += 1;
                self.counters
                    .l2_rebuild_bufs
                    .fetch_add(1, Ordering::Relaxed);
                self.counters
                    .l2_rebuild_size
                    .fetch_add(entry.size_logical as u64, Ordering::Relaxed);
                self.counters
                    .l2_rebuild_asize
                    .fetch_add(header.size_allocated(), Ordering::Relaxed);
                slots.push((
                    block.lap,
                    Slot {
                        key: entry.key,
                        offset: entry.l2_offset,
                        size: header.size_allocated() as u32,
                        is_log: false,
                    },
                ));
            }
        }
        drop(headers);
        slots.sort_by_key(|(lap, slot)| (*lap, slot.offset));
        for (_, slot) in slots {
            if slot.is_log {
                ring.push_log_block(slot.offset, slot.size as u64, self);
            } else {
                ring.slots.push_back(slot);
            }
        }
        (buffers, log_blocks)
    }
}
