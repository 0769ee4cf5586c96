//! Background frees: dataset destroys queued in the MOS and carried out a bounded amount per
//! txg (OpenZFS's async destroy, `dsl_process_async_destroys`).
//!
//! A destroy's syncing half queues the dataset's object-set root on the pool's destroy queue
//! ([`crate::dataset::bptree`], MOS directory entry `bptree`) and removes the dataset's records:
//! the name is gone at once, the space comes back over the following txgs. In pass 1 of every
//! txg the sync driver calls [`PoolCore::free_in_background`], which frees queued blocks until
//! the pause rule says stop; while the queue has work, the sync thread does not wait for the
//! txg timer (as OpenZFS's does not while `dsl_scan_active`), so a destroy runs at the speed of
//! back-to-back txgs of bounded length and then the pool goes idle.
//!
//! # Pause rule (`dsl_scan_async_block_should_pause`)
//! Stop after `async_block_max_blocks` blocks (unlimited by default); or once the round has run for half the txg timeout; or for `free_min_time_ms` while
//! someone is waiting for a later txg or dirty data is building up; or when the pool shuts down.
//!
//! # Cost
//! Memory: one chunk of block pointers and one path of indirect blocks, whatever the dataset's
//! size. Per txg: the blocks freed in one round, one entry and the header rewritten in the MOS.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::block::blkptr::{BlockPtr, Compression, ObjectType};
use crate::block::pipeline::SyncPoint;
use crate::dataset::bptree::BpTree;
use crate::dataset::Dataset;
use crate::object::bpobj::BpSpace;
use crate::object::{ObjectError, Tx};
use crate::types::{ObjectId, Txg};

use super::{kv_set_u64, lookup_mos_directory, mos_props, PoolCore, PoolError};
use crate::pool::MOS_OBJECT_DIRECTORY;

/// The MOS directory key of the destroy queue.
pub const BPTREE_KEY: &str = "bptree";

impl PoolCore {
    /// The destroy queue's object, if the pool has one.
    fn bptree_object(&self) -> Option<ObjectId> {
        match self.bptree_object.load(Ordering::Acquire) {
            0 => None,
            object => Some(ObjectId(object)),
        }
    }

    /// At open: find the queue and whether it has work (a destroy interrupted by export or a
    /// crash resumes by itself).
    pub(super) fn load_background_frees(&self) -> Result<(), PoolError> {
        let Some(object) = lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, BPTREE_KEY)?
        else {
            return Ok(());
        };
        self.bptree_object.store(object, Ordering::Release);
        let pending = BpTree::open(&self.mos, ObjectId(object))?.has_live_entries()?;
        self.set_background_work(pending);
        Ok(())
    }

    fn set_background_work(&self, pending: bool) {
        self.background_frees_pending
            .store(pending, Ordering::Release);
        self.txgs.set_background_work(pending);
    }

    /// Whether queued frees remain (they keep the sync thread running).
    pub fn background_work_pending(&self) -> bool {
        self.background_frees_pending.load(Ordering::Acquire)
    }

    /// Bytes still to be freed by background destroys (the pool property `freeing`).
    pub fn freeing_bytes(&self) -> Result<u64, PoolError> {
        let Some(object) = self.bptree_object() else {
            return Ok(0);
        };
        Ok(BpTree::open(&self.mos, object)?.space().used_bytes)
    }

    /// Syncing context, pass 1: queue a destroyed dataset's tree for background freeing.
    pub(super) fn enqueue_destroy(&self, dataset: &Dataset, txg: Txg) -> Result<(), PoolError> {
        let tx = Tx::syncing(txg);
        let object = match self.bptree_object() {
            Some(object) => object,
            None => {
                let object = BpTree::create(
                    &self.mos,
                    &tx,
                    mos_props(
                        ObjectType::BpTree,
                        16 << 10,
                        &self.tunables,
                        Compression::Lz4,
                    ),
                )?;
                kv_set_u64(&self.mos, &tx, MOS_OBJECT_DIRECTORY, BPTREE_KEY, object.0)?;
                self.bptree_object.store(object.0, Ordering::Release);
                object
            }
        };
        let phys = dataset.phys();
        let root = dataset.objset().synced_root();
        let mut queue = BpTree::open(&self.mos, object)?;
        queue.enqueue(
            &tx,
            &root,
            phys.prev_snapshot_txg,
            BpSpace {
                used_bytes: phys.referenced_bytes,
                compressed_bytes: phys.compressed_bytes,
                uncompressed_bytes: phys.uncompressed_bytes,
            },
        )?;
        if !root.is_hole() {
            self.set_background_work(true);
        }
        Ok(())
    }

    /// Syncing context, pass 1: one bounded round of background frees.
    pub(super) fn free_in_background(
        &self,
        txg: Txg,
        sync_started: Instant,
    ) -> Result<(), PoolError> {
        if !self.background_work_pending() {
            return Ok(());
        }
        let Some(object) = self.bptree_object() else {
            return Ok(());
        };
        let at = SyncPoint { txg, pass: 1 };
        let half_timeout = self.tunables.txg_timeout_duration() / 2;
        let min_time = Duration::from_millis(self.tunables.free_min_time_ms);
        let round_started = Instant::now();
        let mut queue = BpTree::open(&self.mos, object)?;
        let round = queue.free_some(
            &self.io,
            &Tx::syncing(txg),
            self.tunables.async_block_max_blocks.max(1),
            &mut |bp: &BlockPtr| self.io.free(bp, at.txg).map_err(ObjectError::from),
            &mut || {
                let elapsed = sync_started.elapsed();
                elapsed >= half_timeout
                    || (elapsed >= min_time && self.txgs.sync_wanted_after(txg))
                    || self.txgs.is_shutting_down()
            },
        )?;
        for failure in &round.failures {
            log::error!(
                "pool {}: background destroy set aside an entry it cannot read: {failure}",
                self.name
            );
        }
        log::debug!(
            "pool {}: txg {txg}: freed {} blocks ({} bytes) in {} ms in the background",
            self.name,
            round.blocks_freed,
            round.space_freed.used_bytes,
            round_started.elapsed().as_millis()
        );
        self.set_background_work(round.work_left);
        Ok(())
    }

    /// Every block the destroy queue has not freed yet (for `check`: still allocated).
    pub fn visit_background_pending(
        &self,
        visit: &mut dyn FnMut(&BlockPtr) -> Result<(), ObjectError>,
    ) -> Result<(), PoolError> {
        let Some(object) = self.bptree_object() else {
            return Ok(());
        };
        BpTree::open(&self.mos, object)?.visit_pending_blocks(&self.io, visit)?;
        Ok(())
    }
}
