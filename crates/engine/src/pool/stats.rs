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

use crate::block::issue::WriteCountersSnapshot;
use crate::txg::{TxgHistoryRow, TxgSyncIo};

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
        for top in &self.io.vdevs.tops {
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
        self.txgs.record_sync_io(txg, io);
        result
    }
}

impl Pool {
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
