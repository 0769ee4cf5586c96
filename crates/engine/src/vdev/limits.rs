//! The scheduling limits of a leaf's queue ([`super::queue`]), from the tunables, and the
//! rules that derive the active-count limits of a moment from them.
//!
//! # Overview
//!
//! Each class has a minimum and a maximum number of active device I/Os (OpenZFS's
//! `vdev_*_min_active` / `vdev_*_max_active`); the async write maximum grows with the pool's
//! dirty data (`vdev_queue_max_async_writes`, [`QueueLimits::async_write_max_active`]).
//!
//! # Async writes beside sync writes
//!
//! OpenZFS's counts bound how many I/Os each class has at the device, and a disk with its
//! own command queue serves a small write beside large ones in about the time of the small
//! write. A leaf that is a file on a host file system (or a virtual disk) behaves more like
//! one first-in-first-out pipe of *bytes*: a sync write issued behind ten aggregated 1 MiB
//! async writes waits for the ten megabytes, and its durability (a cache flush of the host's
//! device) costs more the more was written since the last flush. So while a leaf's sync
//! writes are pending, active, or completed within `vdev_sync_write_window_us`, the async
//! write class may have at most `vdev_async_write_sync_max_active` active I/Os (in place of
//! both its minimum and its dirty-data maximum), each aggregated to at most
//! `vdev_aggregation_limit_sync` bytes ([`QueueLimits::async_write_limits`],
//! [`QueueLimits::aggregation_limit_for`]). The window covers the gap between one sync write
//! and the next of the same writer (an `O_DSYNC` stream, a log writer), so the cap does not
//! lift and fall with each request.
//!
//! Why this is sound: the cap is never zero, so the txg's writes keep at least one I/O at the
//! device and the sync makes progress; the cap lasts only while sync writes keep coming (the
//! window after the last one is a few milliseconds); the dirty-data throttle in the txg layer
//! still bounds what writers may dirty meanwhile, so a txg that drains more slowly slows the
//! writers, not the sync writes. OpenZFS has no such rule (a real disk's queue gives the
//! small write its turn), but for the same reason it aggregates at most 128 KiB on
//! non-rotating leaves, which include file vdevs (`zfs_vdev_aggregation_limit_non_rotating`).
//! `vdev_async_write_sync_max_active` = 0 turns the rule off.

use super::io_class::{IoClass, IO_CLASSES};

/// Smallest piece a write is split into (what O_DIRECT needs for alignment).
const MIN_WRITE_PIECE: u64 = 4096;
use crate::tunables::Tunables;

/// The scheduling limits of a leaf's queue, from the tunables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    pub min_active: [u32; IO_CLASSES],
    pub max_active: [u32; IO_CLASSES],
    /// Most active I/Os of all classes together (`vdev_max_active`).
    pub max_active_total: u32,
    /// Largest aggregated I/O in bytes (`vdev_aggregation_limit`).
    pub aggregation_limit: u64,
    /// Dirty-data percentages between which the async write maximum grows.
    pub async_write_min_dirty_percent: u64,
    pub async_write_max_dirty_percent: u64,
    /// Worker threads per leaf (`vdev_issue_threads`).
    pub threads: u32,
    /// Asynchronous requests a plugged thread holds before it wakes workers
    /// (`vdev_plug_batch`; 0: none are held).
    pub plug_batch: u32,
    /// Most active async writes while sync writes are recent (`vdev_async_write_sync_max_active`;
    /// 0: no such cap).
    pub async_write_sync_max_active: u32,
    /// How long after a sync write completes it still counts as recent, in nanoseconds
    /// (`vdev_sync_write_window_us`).
    pub sync_write_window_ns: u64,
    /// Largest aggregated async write while sync writes are recent (`vdev_aggregation_limit_sync`).
    pub aggregation_limit_sync: u64,
    /// Whether a sync write that may be issued at once runs on its caller's thread
    /// (`vdev_sync_write_inline`).
    pub sync_write_inline: bool,
    /// Whether a read that may be issued at once runs on its caller's thread
    /// (`vdev_read_inline`).
    pub read_inline: bool,
}

impl QueueLimits {
    pub fn from_tunables(tunables: &Tunables) -> QueueLimits {
        let t = tunables;
        QueueLimits {
            min_active: [
                t.vdev_sync_read_min_active,
                t.vdev_sync_write_min_active,
                t.vdev_async_read_min_active,
                t.vdev_async_write_min_active,
                t.vdev_scrub_min_active,
                t.vdev_trim_min_active,
                t.vdev_rebuild_min_active,
            ],
            max_active: [
                t.vdev_sync_read_max_active,
                t.vdev_sync_write_max_active,
                t.vdev_async_read_max_active,
                t.vdev_async_write_max_active,
                t.vdev_scrub_max_active,
                t.vdev_trim_max_active,
                t.vdev_rebuild_max_active,
            ],
            max_active_total: t.vdev_max_active,
            aggregation_limit: t.vdev_aggregation_limit,
            async_write_min_dirty_percent: t.vdev_async_write_active_min_dirty_percent,
            async_write_max_dirty_percent: t.vdev_async_write_active_max_dirty_percent,
            threads: t.vdev_issue_threads,
            plug_batch: t.vdev_plug_batch,
            async_write_sync_max_active: t.vdev_async_write_sync_max_active,
            sync_write_window_ns: t.vdev_sync_write_window_us.saturating_mul(1000),
            aggregation_limit_sync: t.vdev_aggregation_limit_sync,
            sync_write_inline: t.vdev_sync_write_inline,
            read_inline: t.vdev_read_inline,
        }
    }

    /// The async write maximum for `dirty` bytes of dirty data out of `dirty_max`
    /// (`vdev_queue_max_async_writes`).
    pub fn async_write_max_active(&self, dirty: u64, dirty_max: u64) -> u32 {
        let class = IoClass::AsyncWrite.index();
        let (low, high) = (self.min_active[class], self.max_active[class]);
        let min_bytes =
            (dirty_max as u128 * self.async_write_min_dirty_percent as u128 / 100) as u64;
        let max_bytes =
            (dirty_max as u128 * self.async_write_max_dirty_percent as u128 / 100) as u64;
        if dirty <= min_bytes || high <= low {
            return low;
        }
        if dirty >= max_bytes {
            return high;
        }
        let scaled = (dirty - min_bytes) as u128 * (high - low) as u128
            / (max_bytes - min_bytes).max(1) as u128;
        low + scaled as u32
    }

    /// Whether the async write cap applies to a leaf whose sync writes are `recent` (pending,
    /// active or completed within the window).
    fn sync_cap_applies(&self, recent: bool) -> bool {
        recent && self.async_write_sync_max_active > 0
    }

    /// The async write class's (minimum, maximum) active counts now: the configured minimum
    /// and the dirty-data maximum (the minimum without a `dirty` probe), both capped at
    /// `vdev_async_write_sync_max_active` while sync writes are `recent`.
    pub fn async_write_limits(&self, dirty: Option<(u64, u64)>, sync_recent: bool) -> (u32, u32) {
        let class = IoClass::AsyncWrite.index();
        let min = self.min_active[class];
        let max = match dirty {
            Some((dirty, dirty_max)) => self.async_write_max_active(dirty, dirty_max),
            None => min,
        };
        if self.sync_cap_applies(sync_recent) {
            let cap = self.async_write_sync_max_active;
            (min.min(cap), max.min(cap))
        } else {
            (min, max)
        }
    }

    /// The largest piece of one device write of `class` now: async writes beside recent sync
    /// writes are written in pieces of `vdev_aggregation_limit_sync` bytes (a block larger than
    /// that, as a 1 MiB record, too); otherwise no limit.
    pub fn write_piece_for(&self, class: IoClass, sync_recent: bool) -> u64 {
        if class == IoClass::AsyncWrite && self.sync_cap_applies(sync_recent) {
            self.aggregation_limit_sync.max(MIN_WRITE_PIECE)
        } else {
            u64::MAX
        }
    }

    /// The largest aggregate of `class` now.
    pub fn aggregation_limit_for(&self, class: IoClass, sync_recent: bool) -> u64 {
        if class == IoClass::AsyncWrite && self.sync_cap_applies(sync_recent) {
            self.aggregation_limit.min(self.aggregation_limit_sync)
        } else {
            self.aggregation_limit
        }
    }
}

impl Default for QueueLimits {
    fn default() -> Self {
        QueueLimits::from_tunables(&Tunables::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_write_maximum_follows_dirty_data() {
        let limits = QueueLimits::default();
        assert_eq!(limits.async_write_max_active(0, 1000), 2);
        assert_eq!(limits.async_write_max_active(300, 1000), 2);
        assert_eq!(limits.async_write_max_active(450, 1000), 6);
        assert_eq!(limits.async_write_max_active(600, 1000), 10);
        assert_eq!(limits.async_write_max_active(u64::MAX, u64::MAX), 10);
        assert_eq!(limits.async_write_max_active(5, 0), 10);
    }

    #[test]
    fn recent_sync_writes_cap_async_writes_and_their_aggregates() {
        let mut limits = QueueLimits {
            async_write_sync_max_active: 1,
            aggregation_limit_sync: 128 << 10,
            ..QueueLimits::default()
        };
        let full = Some((1000, 1000));
        assert_eq!(limits.async_write_limits(full, false), (2, 10));
        assert_eq!(limits.async_write_limits(None, false), (2, 2));
        assert_eq!(limits.async_write_limits(full, true), (1, 1));
        assert_eq!(
            limits.aggregation_limit_for(IoClass::AsyncWrite, true),
            128 << 10
        );
        assert_eq!(
            limits.aggregation_limit_for(IoClass::AsyncWrite, false),
            1 << 20
        );
        assert_eq!(limits.aggregation_limit_for(IoClass::Scrub, true), 1 << 20);
        assert_eq!(limits.write_piece_for(IoClass::AsyncWrite, true), 128 << 10);
        assert_eq!(limits.write_piece_for(IoClass::AsyncWrite, false), u64::MAX);
        assert_eq!(limits.write_piece_for(IoClass::SyncWrite, true), u64::MAX);
        // A cap above the minimum leaves the minimum alone.
        limits.async_write_sync_max_active = 4;
        assert_eq!(limits.async_write_limits(full, true), (2, 4));
        // 0 turns the rule off.
        limits.async_write_sync_max_active = 0;
        assert_eq!(limits.async_write_limits(full, true), (2, 10));
        assert_eq!(
            limits.aggregation_limit_for(IoClass::AsyncWrite, true),
            1 << 20
        );
        assert_eq!(limits.write_piece_for(IoClass::AsyncWrite, true), u64::MAX);
    }
}
