//! Background frees: dataset destroys queued in the MOS and carried out a bounded amount per
//! txg (OpenZFS's async destroy, `dsl_process_async_destroys`).
//!
//! Two queues feed it (destroyed clones' livelists have their own, read by the livelist reader
//! and applied in the same pass: `livelists.rs`). The destroy queue (`bptree`) holds whole
//! trees: destroyed datasets, and what a rollback discards (the head's tree above the
//! snapshot's txg). The free list (`free_bpobj`, OpenZFS's `dp_free_bpobj`) is a block-pointer
//! list whose sub-lists are the deadlist entries a snapshot destroy released, merged whole in
//! constant time and drained entry by entry here.
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
//! # Unreadable gang headers
//! Freeing a gang block reads its header to list its pieces. When no copy of the header can be
//! read (or the gang tree is corrupt, `block/gang.rs`), nothing of the block can be freed, and
//! the free must not fail the txg: that would suspend the pool, and since the free is retried
//! after every import, suspend it again each time. Every free path of the pool (this module's
//! queues, the deferred-free list, destroyed clones' livelists, and frees in the txg sync
//! itself, which `PoolFreer` stages onto the deferred-free list) hands such a block to
//! [`PoolCore::set_aside_frees`] instead, in pass 1, and goes on with the rest:
//!
//! - by default (`free_leak_on_eio` false) the block pointer is appended to the *stalled-free
//!   list* (MOS directory key `stalled_frees`, a block-pointer list like the free list). Its
//!   space stays allocated and counted in `freeing`; the free is logged with the error and
//!   retried once after each import (where a changed `free_leak_on_eio` also takes effect),
//!   when a device that was missing may be back. The pool stays writable meanwhile.
//! - with `free_leak_on_eio` the space is leaked for good: the block's allocated size is added
//!   to the MOS directory entry `leaked` (the pool property `leaked`), which `check` subtracts
//!   from the space it finds allocated but referenced by nothing.
//!
//! A destroy whose tree walk meets an unreadable indirect block sets that entry aside instead
//! (`dataset/bptree.rs`, "Damage"); it is retried after import as well, and is not leaked by
//! `free_leak_on_eio` (the walk cannot skip the unreadable subtree).
//!
//! OpenZFS differs: `zfs_free_leak_on_eio` governs only the traversal of a destroyed tree
//! (`bptree_iterate` with `TRAVERSE_HARD`), while a free whose gang header cannot be read fails
//! its zio, which has no `ZIO_FLAG_CANFAIL`, and so suspends the pool; it lowers the odds by
//! writing two header copies even for `copies=1` blocks.
//!
//! # Cost
//! Memory: one chunk of block pointers and one path of indirect blocks, whatever the dataset's
//! size. Per txg: the blocks freed in one round, one entry and the header rewritten in the MOS.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::block::blkptr::{BlockPtr, Compression, ObjectType};
use crate::block::pipeline::PipelineError;
use crate::dataset::bptree::BpTree;
use crate::dataset::Dataset;
use crate::object::bpobj::{BpObj, BpObjEntry, BpSpace, ObjectSetBpStore};
use crate::object::{ObjectError, Tx};
use crate::types::{ObjectId, Txg};

use super::{kv_set_u64, lookup_mos_directory, mos_props, PoolCore, PoolError};
use crate::pool::MOS_OBJECT_DIRECTORY;

/// The MOS directory key of the destroy queue.
pub const BPTREE_KEY: &str = "bptree";
/// The MOS directory key of the free list.
pub const FREE_LIST_KEY: &str = "free_bpobj";
/// The MOS directory key of the stalled-free list (see "Unreadable gang headers").
pub const STALLED_FREES_KEY: &str = "stalled_frees";
/// The MOS directory key of the bytes leaked by frees (the pool property `leaked`).
pub const LEAKED_KEY: &str = "leaked";
/// Free-list entries freed between two consultations of the pause rule.
const FREE_LIST_CHUNK: u64 = 2048;

/// Gang blocks a free could not list the pieces of, with the error: set aside in one pass and
/// handed to [`PoolCore::set_aside_frees`] at its end.
pub(super) type SetAside = Vec<(BlockPtr, String)>;

/// The stalled-free list's state in memory.
#[derive(Default)]
pub(super) struct StalledFrees {
    /// Its MOS object, 0 until first used.
    object: AtomicU64,
    /// Whether the next round retries what was set aside (the stalled-free list and destroy
    /// entries that hit an unreadable block): set at import.
    retry: AtomicBool,
}

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
        // What earlier imports set aside is tried once more: a device may be back, and
        // `free_leak_on_eio` may have changed.
        let mut retry = false;
        if let Some(object) = lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, BPTREE_KEY)? {
            self.bptree_object.store(object, Ordering::Release);
            let queue = BpTree::open(&self.mos, ObjectId(object))?;
            pending |= queue.has_live_entries()?;
            retry |= queue.has_failed_entries()?;
        }
        if let Some(object) =
            lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, STALLED_FREES_KEY)?
        {
            self.stalled_frees.object.store(object, Ordering::Release);
            retry |= !BpObj::open(&self.free_list_store(), ObjectId(object))?.is_empty();
        }
        self.stalled_frees.retry.store(retry, Ordering::Release);
        pending |= retry;
        if let Some(object) = lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, FREE_LIST_KEY)?
        {
            self.free_list_object.store(object, Ordering::Release);
            let store = self.free_list_store();
            pending |= !BpObj::open(&store, ObjectId(object))?.is_empty();
        }
        self.load_livelist_queue()?;
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
        if let Some(object) = self.stalled_list_object() {
            total += BpObj::open(&self.free_list_store(), object)?
                .space()
                .used_bytes;
        }
        total += self.livelist_freeing_bytes();
        Ok(total)
    }

    /// The stalled-free list's object, if the pool has one.
    fn stalled_list_object(&self) -> Option<ObjectId> {
        match self.stalled_frees.object.load(Ordering::Acquire) {
            0 => None,
            object => Some(ObjectId(object)),
        }
    }

    /// Bytes leaked by frees of gang blocks whose header could not be read, with
    /// `free_leak_on_eio` (the pool property `leaked`).
    pub fn leaked_bytes(&self) -> Result<u64, PoolError> {
        Ok(lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, LEAKED_KEY)?.unwrap_or(0))
    }

    /// Bytes of gang blocks whose frees are stalled (part of `freeing`).
    pub fn stalled_free_bytes(&self) -> Result<u64, PoolError> {
        match self.stalled_list_object() {
            Some(object) => Ok(BpObj::open(&self.free_list_store(), object)?
                .space()
                .used_bytes),
            None => Ok(0),
        }
    }

    /// Syncing context: free `bp` in `txg`; a gang whose pieces cannot be listed is added to
    /// `aside` (nothing of it freed) instead of failing the sync.
    pub(super) fn free_or_set_aside(
        &self,
        bp: &BlockPtr,
        txg: Txg,
        aside: &mut SetAside,
    ) -> Result<(), PipelineError> {
        match self.io.free(bp, txg) {
            Err(error @ PipelineError::GangUnreadable { .. }) => {
                aside.push((bp.clone(), error.to_string()));
                Ok(())
            }
            other => other,
        }
    }

    /// Syncing context, pass 1: what becomes of gang blocks whose frees could not list their
    /// pieces (see "Unreadable gang headers"): with `free_leak_on_eio` their allocated space is
    /// added to `leaked`, else they are appended to the stalled-free list.
    pub(super) fn set_aside_frees(&self, tx: &Tx, aside: SetAside) -> Result<(), PoolError> {
        if aside.is_empty() {
            return Ok(());
        }
        if !self
            .config
            .lock()
            .features
            .contains_key(super::STALLED_FREES_FEATURE)
        {
            // A pool made with `feature@stalled_frees=disabled` has nowhere to record them:
            // the space is lost (check reports it), as `free_leak_on_eio` would lose it, but
            // uncounted. The pool still does not suspend.
            for (bp, why) in &aside {
                log::error!(
                    "pool {}: {why}; its {} bytes are leaked and not counted (the pool lacks feature@stalled_frees)",
                    self.name,
                    bp.size_allocated()
                );
            }
            return Ok(());
        }
        // The `leaked` count or the stalled-free list is created below, and stays.
        self.feature_activate(super::STALLED_FREES_FEATURE);
        if self.tunables.free_leak_on_eio {
            let mut bytes = 0;
            for (bp, why) in &aside {
                log::error!(
                    "pool {}: {why}; its {} bytes are leaked (free_leak_on_eio)",
                    self.name,
                    bp.size_allocated()
                );
                bytes += bp.size_allocated();
            }
            let leaked = self.leaked_bytes()?.saturating_add(bytes);
            kv_set_u64(&self.mos, tx, MOS_OBJECT_DIRECTORY, LEAKED_KEY, leaked)?;
            return Ok(());
        }
        for (bp, why) in &aside {
            log::error!(
                "pool {}: {why}; the free is stalled, its {} bytes stay in freeing until a retry at the next import frees them (or leaks them, with free_leak_on_eio)",
                self.name,
                bp.size_allocated()
            );
        }
        let store = self.free_list_store();
        let object = match self.stalled_list_object() {
            Some(object) => object,
            None => {
                let object = BpObj::create(&store, tx)?;
                kv_set_u64(
                    &self.mos,
                    tx,
                    MOS_OBJECT_DIRECTORY,
                    STALLED_FREES_KEY,
                    object.0,
                )?;
                self.stalled_frees.object.store(object.0, Ordering::Release);
                object
            }
        };
        let entries: Vec<BpObjEntry> = aside
            .into_iter()
            .map(|(bp, _)| BpObjEntry::alloc(bp))
            .collect();
        BpObj::open(&store, object)?.append(tx, &entries)?;
        Ok(())
    }

    /// Syncing context, pass 1, once after import: free what the stalled-free list holds, or
    /// set it aside again.
    fn retry_stalled_frees(&self, tx: &Tx, aside: &mut SetAside) -> Result<(), PoolError> {
        let Some(object) = self.stalled_list_object() else {
            return Ok(());
        };
        let store = self.free_list_store();
        let mut list = BpObj::open(&store, object)?;
        let mut stalled = Vec::new();
        list.iterate(&mut |entry| {
            stalled.push(entry.bp.clone());
            Ok(())
        })?;
        list.clear(tx)?;
        let before = aside.len();
        for bp in &stalled {
            self.free_or_set_aside(bp, tx.txg, aside)?;
        }
        log::info!(
            "pool {}: retried {} stalled frees: {} freed",
            self.name,
            stalled.len(),
            stalled.len() - (aside.len() - before)
        );
        Ok(())
    }

    /// Every block on the stalled-free list (for `check`: still allocated).
    pub fn visit_stalled_frees(
        &self,
        visit: &mut dyn FnMut(&BlockPtr) -> Result<(), ObjectError>,
    ) -> Result<(), PoolError> {
        let Some(object) = self.stalled_list_object() else {
            return Ok(());
        };
        BpObj::open(&self.free_list_store(), object)?.iterate(&mut |entry| visit(&entry.bp))?;
        Ok(())
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
        let mut aside = SetAside::new();
        let retry = self.stalled_frees.retry.swap(false, Ordering::AcqRel);
        if retry {
            self.retry_stalled_frees(&tx, &mut aside)?;
        }

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
                    self.free_or_set_aside(&entry.bp, txg, &mut aside)
                        .map_err(ObjectError::from)?;
                    freed.add(BpSpace::of(&entry.bp, self.io.dsize(&entry.bp)));
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
                    retry,
                    &mut |bp: &BlockPtr| {
                        self.free_or_set_aside(bp, txg, &mut aside)
                            .map_err(ObjectError::from)
                    },
                    &mut || should_pause(),
                )?;
                if round.paused && retry {
                    // Entries past the pause are retried in the next round.
                    self.stalled_frees.retry.store(true, Ordering::Release);
                    work_left = true;
                }
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
                if retry {
                    self.stalled_frees.retry.store(true, Ordering::Release);
                    work_left = true;
                }
            }
        }
        self.set_aside_frees(&tx, aside)?;
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
