//! Background frees: dataset destroys queued in the MOS and carried out a bounded amount per
//! txg (OpenZFS's async destroy, `dsl_process_async_destroys`).
//!
//! Three queues feed it; the third, destroyed clones' livelists, is `livelists.rs`'s. The destroy queue (`bptree`) holds whole trees: destroyed datasets, and
//! what a rollback discards (the head's tree above the snapshot's txg). The free list
//! (`free_bpobj`, OpenZFS's `dp_free_bpobj`) is a block-pointer list whose sub-lists are the
//! deadlist entries a snapshot destroy released, merged whole in constant time and drained
//! entry by entry here.
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
//! someone is waiting for this txg or a later one or dirty data is building up; or when the pool shuts down.
//!
//! # Cost
//! Memory: one chunk of block pointers and one path of indirect blocks, whatever the dataset's
//! size. Per txg: the blocks freed in one round, one entry and the header rewritten in the MOS.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::block::blkptr::{BlockPtr, Compression, ObjectType};
use crate::dataset::bptree::BpTree;
use crate::dataset::Dataset;
use crate::object::bpobj::{BpObj, BpSpace, ObjectSetBpStore};
use crate::object::{ObjectError, Tx};
use crate::types::{ObjectId, Txg};

use super::{kv_set_u64, lookup_mos_directory, mos_props, PoolCore, PoolError};
use crate::pool::MOS_OBJECT_DIRECTORY;

/// The MOS directory key of the destroy queue.
pub const BPTREE_KEY: &str = "bptree";
/// The MOS directory key of the free list.
pub const FREE_LIST_KEY: &str = "free_bpobj";
/// Free-list entries freed between two consultations of the pause rule.
const FREE_LIST_CHUNK: u64 = 2048;

impl PoolCore {
    /// The destroy queue's object, if the pool has one.
    fn bptree_object(&self) -> Option<ObjectId> {
        match self.bptree_object.load(Ordering::Acquire) {
            0 => None,
            object => Some(ObjectId(object)),
        }
    }

    /// The free list's object, if the pool has one.
    fn free_list_object(&self) -> Option<ObjectId> {
        match self.free_list_object.load(Ordering::Acquire) {
            0 => None,
            object => Some(ObjectId(object)),
        }
    }

    fn free_list_store(&self) -> ObjectSetBpStore<'_> {
        ObjectSetBpStore {
            objset: &self.mos,
            props: mos_props(
                ObjectType::BlockPtrList,
                16 << 10,
                &self.tunables,
                Compression::Lz4,
            ),
        }
    }

    /// At open: find the queues and whether they have work (a destroy interrupted by export or
    /// a crash resumes by itself).
    pub(super) fn load_background_frees(&self) -> Result<(), PoolError> {
        let mut pending = false;
        if let Some(object) = lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, BPTREE_KEY)? {
            self.bptree_object.store(object, Ordering::Release);
            pending |= BpTree::open(&self.mos, ObjectId(object))?.has_live_entries()?;
        }
        if let Some(object) = lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, FREE_LIST_KEY)?
        {
            self.free_list_object.store(object, Ordering::Release);
            let store = self.free_list_store();
            pending |= !BpObj::open(&store, ObjectId(object))?.is_empty();
        }
        pending |= self.load_livelist_queue()?;
        self.set_background_work(pending);
        Ok(())
    }

    /// Syncing context: hand whole block-pointer lists (released deadlist entries) to the
    /// free list, in constant time each.
    pub(super) fn queue_free_lists(&self, tx: &Tx, lists: &[ObjectId]) -> Result<(), PoolError> {
        if lists.is_empty() {
            return Ok(());
        }
        let store = self.free_list_store();
        let object = match self.free_list_object() {
            Some(object) => object,
            None => {
                let object = BpObj::create(&store, tx)?;
                kv_set_u64(&self.mos, tx, MOS_OBJECT_DIRECTORY, FREE_LIST_KEY, object.0)?;
                self.free_list_object.store(object.0, Ordering::Release);
                object
            }
        };
        let mut list = BpObj::open(&store, object)?;
        for sublist in lists {
            list.enqueue_sublist(tx, *sublist)?;
        }
        self.set_background_work(true);
        Ok(())
    }

    pub(super) fn set_background_work(&self, pending: bool) {
        self.background_frees_pending
            .store(pending, Ordering::Release);
        // A scan in progress keeps the sync thread busy too (`scan.rs`).
        self.update_scan_work();
    }

    /// Whether queued frees remain (they keep the sync thread running).
    pub fn background_work_pending(&self) -> bool {
        self.background_frees_pending.load(Ordering::Acquire)
    }

    /// Bytes still to be freed in the background (the pool property `freeing`).
    pub fn freeing_bytes(&self) -> Result<u64, PoolError> {
        let mut total = 0;
        if let Some(object) = self.bptree_object() {
            total += BpTree::open(&self.mos, object)?.space().used_bytes;
        }
        if let Some(object) = self.free_list_object() {
            total += BpObj::open(&self.free_list_store(), object)?
                .space()
                .used_bytes;
        }
        total += self.livelist_freeing_bytes();
        Ok(total)
    }

    /// Syncing context, pass 1: queue a destroyed dataset's tree for background freeing.
    pub(super) fn enqueue_destroy(&self, dataset: &Dataset, txg: Txg) -> Result<(), PoolError> {
        let phys = dataset.phys();
        let root = dataset.objset().synced_root();
        self.enqueue_tree_free(
            &Tx::syncing(txg),
            &root,
            phys.prev_snapshot_txg,
            BpSpace {
                used_bytes: phys.referenced_bytes,
                compressed_bytes: phys.compressed_bytes,
                uncompressed_bytes: phys.uncompressed_bytes,
            },
        )
    }

    /// Syncing context, pass 1: queue the blocks of the tree under `root` born after
    /// `min_birth` (holding `space`) for background freeing.
    pub(super) fn enqueue_tree_free(
        &self,
        tx: &Tx,
        root: &BlockPtr,
        min_birth: Txg,
        space: BpSpace,
    ) -> Result<(), PoolError> {
        let tx = *tx;
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
        let mut queue = BpTree::open(&self.mos, object)?;
        queue.enqueue(&tx, root, min_birth, space)?;
        if !root.is_hole() {
            self.set_background_work(true);
        }
        Ok(())
    }

    /// Syncing context, pass 1: one bounded round of background frees: the free list first
    /// (its entries are ready to free, no tree to read), then the destroy queue, both under the
    /// same pause rule and block budget.
    pub(super) fn free_in_background(
        &self,
        txg: Txg,
        sync_started: Instant,
    ) -> Result<(), PoolError> {
        if !self.background_work_pending() {
            return Ok(());
        }
        let tx = Tx::syncing(txg);
        let half_timeout = self.tunables.txg_timeout_duration() / 2;
        let min_time = Duration::from_millis(self.tunables.free_min_time_ms);
        let should_pause = || {
            let elapsed = sync_started.elapsed();
            elapsed >= half_timeout
                || (elapsed >= min_time && self.txgs.sync_waited_on(txg))
                || self.txgs.is_shutting_down()
        };
        let round_started = Instant::now();
        let mut budget = self.tunables.async_block_max_blocks.max(1);
        let mut freed_blocks = 0u64;
        let mut freed = BpSpace::default();
        let mut work_left = false;

        if let Some(object) = self.free_list_object() {
            let store = self.free_list_store();
            let mut list = BpObj::open(&store, object)?;
            while !list.is_empty() {
                if should_pause() || budget == 0 {
                    break;
                }
                let mut chunk = budget.min(FREE_LIST_CHUNK);
                let before = chunk;
                list.drain(&tx, &mut chunk, &mut |entry| {
                    self.io.free(&entry.bp, txg).map_err(ObjectError::from)?;
                    freed.add(BpSpace::of(&entry.bp));
                    Ok(())
                })?;
                freed_blocks += before - chunk;
                budget -= before - chunk;
            }
            work_left |= !list.is_empty();
        }

        if let Some(object) = self.bptree_object() {
            let mut queue = BpTree::open(&self.mos, object)?;
            if budget > 0 && !should_pause() {
                let round = queue.free_some(
                    &self.io,
                    &tx,
                    budget,
                    &mut |bp: &BlockPtr| self.io.free(bp, txg).map_err(ObjectError::from),
                    &mut || should_pause(),
                )?;
                for failure in &round.failures {
                    log::error!(
                        "pool {}: background destroy set aside an entry it cannot read: {failure}",
                        self.name
                    );
                }
                freed_blocks += round.blocks_freed;
                freed.add(round.space_freed);
                work_left |= round.work_left;
            } else {
                work_left |= queue.has_live_entries()?;
            }
        }
        // Destroyed clones' livelists: one sub-list per txg (`livelists.rs`).
        work_left |= self.free_livelists_in_background(txg)?;
        log::debug!(
            "pool {}: txg {txg}: freed {freed_blocks} blocks ({} bytes) in {} ms in the background",
            self.name,
            freed.used_bytes,
            round_started.elapsed().as_millis()
        );
        self.set_background_work(work_left);
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

    /// Every block on the free list (for `check`: still allocated).
    pub fn visit_free_list(
        &self,
        visit: &mut dyn FnMut(&BlockPtr) -> Result<(), ObjectError>,
    ) -> Result<(), PoolError> {
        let Some(object) = self.free_list_object() else {
            return Ok(());
        };
        BpObj::open(&self.free_list_store(), object)?.iterate(&mut |entry| visit(&entry.bp))?;
        Ok(())
    }
}
