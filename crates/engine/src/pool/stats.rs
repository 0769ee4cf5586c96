//! Per-txg statistics of a pool (`tarn stat txgs`): the sync driver samples the device
//! counters around each txg's sync and hands the difference to the txg layer's history.
//!
//! What is counted, and where:
//! - `reads`, `writes`, `nread`, `nwritten`: every leaf's I/O counters (the ones `pool iostat`
//!   prints), differenced over the sync, as OpenZFS differences the root vdev's stats in
//!   spa_sync. Reads in open context during the sync count too; uberblock and label writes go
//!   straight to the devices and do not.
//! - `blocks_written`: block copies submitted to the write queue (every DVA of every block,
//!   in-place rewrites of later passes included). This is the pool's only count of block
//!   writes: `BlockIo::block_writes` reads the same counter.
//! - `write_ios`: device writes the pool issued: the queue's writes after aggregation (one per
//!   mirror child), plus every uberblock and label copy the commit writes. Nothing else writes
//!   to the devices while a txg syncs except repairs of damaged copies, which are rare.
//!
//! - the space layer's columns (`spacemap_writes`, `ms_condensed`, `ms_loaded`, `ms_unloaded`,
//!   `alloc_segments_p999`, `alloc_load_waits`, `alloc_p999_ns`): taken from
//!   `SpaceManager::take_txg_stats` after the sync (see `space/stats.rs`); space-map blocks are
//!   multiplied by the MOS copies there.
//!
//! The cost is two snapshots of a handful of atomics per leaf per txg.
//!
//! `tarn pool iostat` and `tarn stat vdev_queue` read [`Pool::iostat`]: every leaf's counters
//! (`vdev::stats`), summed up the vdev tree, with each top-level vdev's space, and the time
//! since the pool was opened (the first report covers it). The vdev queues learn the pool's
//! dirty data through the probe [`PoolCore::install_dirty_probe`] installs, which scales how
//! many txg writes each leaf runs at once.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::block::issue::WriteCountersSnapshot;
use crate::txg::{TxgHistoryRow, TxgSyncIo};
use crate::vdev::{LeafStatsSnapshot, QueueLimits, TopVdevKind};

use super::{Pool, PoolCore};

/// The device counters at one instant.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct IoSample {
    read_ops: u64,
    read_bytes: u64,
    write_ops: u64,
    write_bytes: u64,
    pool_writes: WriteCountersSnapshot,
}

impl IoSample {
    /// What happened between `earlier` and this sample.
    pub(super) fn since(&self, earlier: &IoSample) -> TxgSyncIo {
        let written = self.pool_writes.since(&earlier.pool_writes);
        TxgSyncIo {
            read_bytes: self.read_bytes.wrapping_sub(earlier.read_bytes),
            written_bytes: self.write_bytes.wrapping_sub(earlier.write_bytes),
            reads: self.read_ops.wrapping_sub(earlier.read_ops),
            writes: self.write_ops.wrapping_sub(earlier.write_ops),
            blocks_written: written.blocks,
            write_ios: written.ios,
            space: Default::default(),
        }
    }
}

impl PoolCore {
    /// Sample every leaf's counters and the pool's write counters.
    pub(super) fn io_sample(&self) -> IoSample {
        let mut sample = IoSample {
            pool_writes: self.io.write_counters(),
            ..IoSample::default()
        };
        for top in self.io.vdevs.tops().iter() {
            for leaf in &top.children {
                let stats = leaf.stats.snapshot();
                sample.read_ops += stats.read_ops;
                sample.read_bytes += stats.read_bytes;
                sample.write_ops += stats.write_ops;
                sample.write_bytes += stats.write_bytes;
            }
        }
        sample
    }

    /// Sync `txg` (see [`PoolCore::sync_txg`]) and record what it did in the txg history.
    pub(super) fn sync_txg_counted(&self, txg: crate::types::Txg) -> Result<u32, super::PoolError> {
        let before = self.io_sample();
        let result = self.sync_txg(txg);
        let mut io = self.io_sample().since(&before);
        io.space = self.io.space.take_txg_stats();
        io.space.spacemap_writes *= super::MOS_COPIES as u64;
        io.space.log_writes *= super::MOS_COPIES as u64;
        self.txgs.record_sync_io(txg, io);
        result
    }
}

impl Pool {
    /// The ARC's counters and sizes (`tarn stat arc`).
    pub fn arc_stats(&self) -> crate::cache::BlockCacheStats {
        let mut stats = self.core.io.cache().stats();
        stats.l2 = self.core.io.l2arc().stats();
        stats
    }

    /// The recent txgs, oldest first: at most `txg_history` rows, the open txg last (what
    /// `tarn stat txgs` prints).
    pub fn txg_history(&self) -> Vec<TxgHistoryRow> {
        self.core.txgs.history()
    }

    /// The pool's device write counters since import: block copies written, device write I/Os
    /// and their bytes (benchmarks difference them around a workload).
    pub fn write_counters(&self) -> WriteCountersSnapshot {
        self.core.io.write_counters()
    }
}

/// One vdev's line of `iostat`: its counters (a leaf's own, or the sum of its children's),
/// its space (top-level vdevs and the pool; none for a leaf of a mirror) and its children.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VdevIostat {
    /// The pool's name, `mirror-ID`, or a leaf's path.
    pub name: String,
    pub size_bytes: Option<u64>,
    pub allocated_bytes: Option<u64>,
    pub stats: LeafStatsSnapshot,
    pub children: Vec<VdevIostat>,
}

/// Every counter `tarn pool iostat` prints, at one instant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolIostat {
    /// Nanoseconds since the pool was opened (created or imported): the counters' span.
    pub elapsed_ns: u64,
    /// The pool itself: its children are the top-level vdevs.
    pub root: VdevIostat,
}

impl PoolCore {
    /// Let every leaf's queue scale its async write maximum by the pool's dirty data.
    pub(super) fn install_dirty_probe(&self) {
        let txgs = Arc::downgrade(&self.txgs);
        let dirty_max = self.tunables.dirty_data_max;
        let probe: crate::vdev::queue::DirtyProbe = Arc::new(move || match txgs.upgrade() {
            Some(txgs) => (txgs.dirty_total(), dirty_max),
            None => (0, dirty_max),
        });
        self.io
            .vdevs
            .configure_queues(QueueLimits::from_tunables(&self.tunables), Some(probe));
    }
}

impl Pool {
    /// The I/O counters of every vdev, for `iostat` (see [`PoolIostat`]).
    pub fn iostat(&self) -> PoolIostat {
        let vdevs = &self.core.io.vdevs;
        let space = self.core.io.space.stats();
        let mut root = VdevIostat {
            name: self.core.name.clone(),
            size_bytes: Some(0),
            allocated_bytes: Some(0),
            stats: LeafStatsSnapshot::default(),
            children: Vec::new(),
        };
        let mut logs = Vec::new();
        for top in vdevs.tops().iter() {
            let (size, allocated) = space
                .iter()
                .find(|vdev| vdev.vdev == top.id)
                .map_or((0, 0), |vdev| (vdev.size, vdev.allocated_bytes));
            let leaves: Vec<VdevIostat> = top
                .children
                .iter()
                .map(|leaf| VdevIostat {
                    name: leaf.path.display().to_string(),
                    size_bytes: None,
                    allocated_bytes: None,
                    stats: leaf.stats.snapshot(),
                    children: Vec::new(),
                })
                .collect();
            let mut stats = LeafStatsSnapshot::default();
            for leaf in &leaves {
                stats.add(&leaf.stats);
            }
            let line = match (top.kind, leaves.len()) {
                (TopVdevKind::Leaf, 1) => VdevIostat {
                    size_bytes: Some(size),
                    allocated_bytes: Some(allocated),
                    ..leaves.into_iter().next().expect("one leaf")
                },
                _ => VdevIostat {
                    name: top
                        .kind
                        .group_name(top.id.0)
                        .unwrap_or_else(|| format!("mirror-{}", top.id.0)),
                    size_bytes: Some(size),
                    allocated_bytes: Some(allocated),
                    stats,
                    children: leaves,
                },
            };
            root.stats.add(&line.stats);
            if top.is_log() {
                // Log vdevs are not in the pool's capacity (as `pool list`), only its I/O.
                logs.push(line);
                continue;
            }
            root.size_bytes = root.size_bytes.map(|sum| sum + size);
            root.allocated_bytes = root.allocated_bytes.map(|sum| sum + allocated);
            root.children.push(line);
        }
        // Log vdevs under a `logs` line, as zpool shows them.
        if !logs.is_empty() {
            root.children.push(VdevIostat {
                name: "logs".into(),
                size_bytes: None,
                allocated_bytes: None,
                stats: LeafStatsSnapshot::default(),
                children: logs,
            });
        }
        // Cache devices (not in the pool's totals), under a `cache` line as zpool shows them.
        let cache: Vec<VdevIostat> = self
            .core
            .io
            .l2arc()
            .devices()
            .iter()
            .map(|device| VdevIostat {
                name: device.path.display().to_string(),
                size_bytes: Some(device.ring_size()),
                allocated_bytes: Some(
                    device
                        .ring
                        .lock()
                        .slots
                        .iter()
                        .map(|slot| slot.size as u64)
                        .sum(),
                ),
                stats: device.leaf.stats.snapshot(),
                children: Vec::new(),
            })
            .collect();
        if !cache.is_empty() {
            root.children.push(VdevIostat {
                name: "cache".into(),
                size_bytes: None,
                allocated_bytes: None,
                stats: LeafStatsSnapshot::default(),
                children: cache,
            });
        }
        PoolIostat {
            elapsed_ns: vdevs.opened_at.elapsed().as_nanos() as u64,
            root,
        }
    }
}
