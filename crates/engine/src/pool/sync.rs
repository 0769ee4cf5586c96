//! The sync driver: one txg written out and committed (the commit protocol of the pool
//! module's documentation, OpenZFS spa_sync): passes until convergence, deferred frees,
//! background frees, labels and the uberblock. Runs only in the sync thread, which the txg
//! layer drives; see the parent module for the protocol, its crash analysis and its cost.
//! The thread is started here at import and create, and a caller asks it for a sync here
//! ([`Pool::sync`]); export stops it (`export.rs`). The frees a sync makes go through
//! [`PoolFreer`]: at once in early passes, staged for the next txg's deferred-free list in late
//! ones.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::blkptr::{BlockPtr, ObjectType};
use crate::block::pipeline::{BlockIo, PipelineError, SyncPoint};
use crate::dataset::{BlockFreer, Dataset};
use crate::object::adapters::MosSpaceStorage;
use crate::object::bpobj::{BpObj, BpObjEntry};
use crate::object::{BlockLifecycle, ObjectError, Tx};
use crate::tunables::Tunables;
use crate::types::{Guid, Txg};
use crate::vdev::label;
use crate::vdev::label::{LabelConfig, LabelSet};

use super::uberblock::Uberblock;
use super::{
    deferred_free_count, deferred_list_store, hostname, kv_set_u64, metaslab_array_key,
    now_seconds, uberblock, Pool, PoolCore, PoolError, LOG_SPACEMAP_KEY, MOS_OBJECT_DIRECTORY,
    POOL_VERSION,
};

/// Frees for the pool: now, or (in late sync passes) staged for the next txg.
pub struct PoolFreer {
    pub(super) io: Arc<BlockIo>,
    pub(super) staged: Mutex<Vec<BlockPtr>>,
    pub(super) deferred_from_pass: u32,
}

impl PoolFreer {
    /// The pass from which frees are staged for the next txg: `sync_pass_deferred_free`, or
    /// never with the log space map, where a late free costs an entry in the txg's log (whose
    /// block later passes rewrite in place) instead of a metaslab map block (OpenZFS stops
    /// deferring then too, reference §5.2).
    pub(super) fn deferred_from_pass(tunables: &Tunables, log_spacemap: bool) -> u32 {
        if log_spacemap {
            u32::MAX
        } else {
            tunables.sync_pass_deferred_free
        }
    }
}

impl BlockFreer for PoolFreer {
    fn free(&self, bp: &BlockPtr, at: SyncPoint) -> Result<(), ObjectError> {
        if bp.is_hole() || bp.embedded {
            return Ok(());
        }
        if at.pass >= self.deferred_from_pass {
            self.staged.lock().push(bp.clone());
            return Ok(());
        }
        match self.io.free(bp, at.txg) {
            // A gang whose header cannot be read goes to the deferred-free list, whose turn in
            // the next txg's pass 1 sets it aside in the MOS (background_free.rs): a free in
            // the middle of a sync pass can neither fail the txg nor write the MOS itself.
            Err(PipelineError::GangUnreadable { .. }) => {
                self.staged.lock().push(bp.clone());
                Ok(())
            }
            other => other.map_err(ObjectError::from),
        }
    }

    fn dsize(&self, bp: &BlockPtr) -> u64 {
        self.io.dsize(bp)
    }
}

/// The MOS's block lifecycle: MOS blocks are never shared, so a kill is a free.
pub(super) struct MosLifecycle {
    pub(super) freer: Arc<PoolFreer>,
}

impl BlockLifecycle for MosLifecycle {
    fn block_born(&self, _bp: &BlockPtr, _at: SyncPoint) {}

    fn block_kill(&self, bp: &BlockPtr, at: SyncPoint) -> Result<(), ObjectError> {
        self.freer.free(bp, at)
    }
}

impl PoolCore {
    pub(super) fn storage(&self) -> MosSpaceStorage<'_> {
        MosSpaceStorage { mos: &self.mos }
    }

    /// Write one txg out and commit it (see the module documentation). Returns the number of
    /// sync passes, 0 for a txg with no block to write (skipped, or committed with an
    /// uberblock alone).
    pub fn sync_txg(&self, txg: Txg) -> Result<u32, PoolError> {
        let sync_started = std::time::Instant::now();
        // A child that misses a write from now on logs this txg in its DTL (vdev/dtl.rs).
        self.io.vdevs.set_syncing_txg(txg.0);
        // Device changes take effect here, before anything of this txg is written
        // (vdev_change.rs); they dirty the config, so this txg commits them.
        self.apply_vdev_changes(txg)?;
        // A RAID-Z expansion's first rows, copied through the scratch area with uberblocks of
        // their own, before anything of this txg is written (`raidz_expand.rs`).
        self.run_reflow_scratch_phase(txg)?;
        let datasets = self.dataset_list();
        let destroys: Vec<Arc<Dataset>> = {
            let mut pending = self.pending_destroys.lock();
            let (now, later): (Vec<_>, Vec<_>) =
                pending.drain(..).partition(|(when, ..)| *when <= txg);
            *pending = later;
            now.into_iter().map(|(_, _, dataset)| dataset).collect()
        };
        let nothing_to_do = !self.mos.is_dirty(txg)
            && !datasets
                .iter()
                .any(|(_, dataset)| dataset.try_objset().is_some_and(|o| o.is_dirty(txg)))
            && destroys.is_empty()
            && !self.has_snapshot_tasks(txg)
            && !self.config.lock().dirty
            && !self.background_work_pending()
            && !self.livelist_reads_ready()
            && !self.scan_active()
            && !self.dtls_dirty()
            && !self.records_pending()
            && !self.io.space.flush_all_pending();
        // The deferred-free list alone is no reason to sync: as in OpenZFS, freeing it dirties
        // space maps and the MOS, whose late passes defer frees again, so carrying it on an
        // otherwise idle pool would never end. The next txg with changes carries it out.
        if nothing_to_do {
            if self.io.space.deferred_bytes() == 0 && !self.reflow_moved() {
                self.txgs.set_pending_work(false);
                return Ok(0);
            }
            // Frees of the last two txgs still wait in the metaslabs' defer trees, and they
            // become allocatable only as txgs are committed (invariant 3 and rewind count
            // committed txgs): commit this txg with an uberblock alone, naming the same MOS.
            self.commit(txg, &self.mos.synced_root())?;
            self.finish_txg(txg, &datasets);
            return Ok(0);
        }
        let storage = self.storage();
        let tx = Tx::syncing(txg);
        let first = SyncPoint { txg, pass: 1 };
        // The txg's writes go to the queues in batches (vdev/queue.rs, plugging).
        let _plug = crate::vdev::plug::Plug::new();

        self.free_deferred(txg)?;
        // The history and failmode (history.rs, failmode.rs); the error log after the scan.
        self.sync_history(txg)?;
        self.sync_failmode(txg)?;
        let mut changed = !destroys.is_empty();
        let deadlists = self.deadlist_store();
        for (_, dataset) in &datasets {
            // An unavailable dataset (no object set) is never synced: its records stay.
            let Some(objset) = dataset.try_objset() else {
                continue;
            };
            if let Some(root) = objset.sync(first, &storage)? {
                dataset.set_root(root);
                // Blocks the newest snapshot still holds go on the deadlist now, one append
                // per entry, and that snapshot's unique bytes follow.
                if let Some(newest) = dataset.flush_killed(&deadlists, &tx)? {
                    self.mos.set_bonus(
                        &tx,
                        newest.object,
                        ObjectType::Dataset,
                        &newest.phys().encode(),
                    )?;
                }
                // A clone's livelist entries of this txg (`livelists.rs`).
                self.flush_dataset_livelist(dataset, &tx)?;
                self.mos.set_bonus(
                    &tx,
                    dataset.object,
                    ObjectType::Dataset,
                    &dataset.phys().encode(),
                )?;
                changed = true;
            }
        }
        changed |= self.sync_snapshot_tasks(txg)?;
        // What the livelist reader has ready: condensed sub-lists and destroyed clones'
        // sub-lists to free (`livelists.rs`).
        changed |= self.sync_livelist_work(&datasets, txg)?;
        for dataset in &destroys {
            self.sync_destroy(dataset, txg)?;
        }
        self.free_in_background(txg, sync_started)?;
        self.scan_sync(txg, sync_started)?;
        // The error log (errlog.rs) after the scan, so that the txg that records a scan's end
        // also holds the damage it found: a crash cannot leave a finished scrub that counted
        // errors with a log that lacks them.
        self.sync_errlog(txg)?;
        if changed || self.limits_state().take_totals_stale() {
            self.sync_directory_totals(txg)?;
        }

        let mut pass = 1;
        loop {
            let at = SyncPoint { txg, pass };
            self.io.space.sync(txg, pass, &storage)?;
            self.record_metaslab_arrays(txg)?;
            if let Some(directory) = self.io.space.take_created_log_directory() {
                kv_set_u64(
                    &self.mos,
                    &Tx::syncing(txg),
                    MOS_OBJECT_DIRECTORY,
                    LOG_SPACEMAP_KEY,
                    directory.0,
                )?;
            }
            self.sync_dtls(txg, pass)?;
            self.mos.sync(at, &storage)?;
            self.persist_staged_frees(txg)?;
            if !self.mos.is_dirty(txg) && !self.io.space.is_dirty(txg) {
                // A child's misses are known only once its writes have completed: wait for
                // them (the commit would anyway). A DTL that changed (a child missed one of
                // this txg's writes) is persisted by one more pass, so that the txg commits
                // knowing what the child missed (vdev/dtl.rs).
                self.io.wait_writes()?;
                if !self.dtls_dirty() {
                    break;
                }
            }
            pass += 1;
            if pass > self.tunables.sync_pass_max {
                return Err(PoolError::SyncFailed {
                    txg,
                    why: format!("did not converge in {} passes", self.tunables.sync_pass_max),
                });
            }
        }
        assert!(
            !self.io.space.is_dirty(txg),
            "space maps dirty after the last sync pass"
        );

        let mos_root = self
            .mos
            .syncing_root()
            .unwrap_or_else(|| self.mos.synced_root());
        let commit_started = std::time::Instant::now();
        self.commit(txg, &mos_root)?;
        log::debug!(
            "pool {}: txg {} synced in {} ms ({pass} passes, commit {} ms)",
            self.name,
            txg.0,
            sync_started.elapsed().as_millis(),
            commit_started.elapsed().as_millis()
        );
        self.vdev_changes_committed();

        self.finish_txg(txg, &datasets);
        Ok(pass)
    }

    /// After the commit of `txg`: rotate deferred frees, install the new trees, and tell the
    /// txg layer whether work without dirty data remains (freed space that the next committed
    /// txgs will release), which the txg timer carries.
    pub(super) fn finish_txg(&self, txg: Txg, datasets: &[(String, Arc<Dataset>)]) {
        self.io.l2arc().set_synced_txg(txg.0);
        self.io.space.sync_done(txg);
        self.mos.sync_done(txg);
        for (_, dataset) in datasets {
            if let Some(objset) = dataset.try_objset() {
                objset.sync_done(txg);
            }
            // Its writes are in the charged figures now (`limits.rs`).
            dataset.limits.txg_synced(txg);
        }
        self.txgs.set_pending_work(self.has_pending_work());
    }

    /// Work that no dirty data announces: space freed in the last two committed txgs (it is
    /// released by the next two commits), a scan, and a DTL changed after the last pass (a
    /// child's flush failed in the commit: the next txg persists it even on an idle pool).
    /// The deferred-free list is not: see `sync_txg`.
    pub(super) fn has_pending_work(&self) -> bool {
        self.io.space.deferred_bytes() > 0
            || self.scan_active()
            || self.dtls_dirty()
            || self.reflow_moved()
    }

    /// A RAID-Z expansion's counted progress moved since the last uberblock: the next txg
    /// commits, even with nothing else to write, so that the copy's progress is durable.
    fn reflow_moved(&self) -> bool {
        self.io.vdevs.reflow_progress() != *self.last_committed_reflow.lock()
    }

    /// Record each new metaslab array in the MOS object directory (`ms_array/<vdev>`), so that
    /// every uberblock's tree names the arrays that exist in it: the labels' copy of the config
    /// may be a txg ahead after a crash between the even labels and the uberblock. A new array
    /// also makes the labels stale.
    pub(super) fn record_metaslab_arrays(&self, txg: Txg) -> Result<(), PoolError> {
        for top in self.io.vdevs.tops().iter() {
            if let Some(array) = self.io.space.ms_array(top.id) {
                if top.metaslab_array() != array {
                    let key = metaslab_array_key(top.id);
                    kv_set_u64(
                        &self.mos,
                        &Tx::syncing(txg),
                        MOS_OBJECT_DIRECTORY,
                        &key,
                        array.0,
                    )?;
                    top.set_metaslab_array(array);
                    self.config.lock().dirty = true;
                }
            }
        }
        Ok(())
    }

    pub(super) fn deferred_count(&self) -> Result<u64, PoolError> {
        deferred_free_count(&self.mos, self.deferred_frees_object)
    }

    /// Blocks on the deferred-free list: frees that a later txg still has to carry out.
    pub fn deferred_free_count(&self) -> Result<u64, PoolError> {
        self.deferred_count()
    }

    /// The txg of the newest uberblock written (txgs with nothing to do write none).
    pub fn last_committed_txg(&self) -> Txg {
        Txg(self.last_committed_txg.load(Ordering::SeqCst))
    }

    /// Pass 1: free for real the blocks whose frees the previous txg deferred, one block of
    /// the list in memory at a time, then empty the list. Its first block is kept and
    /// rewritten now, in pass 1: frees staged by this txg's later passes are appended to it,
    /// and a block born in this txg is rewritten in place there, where a hole would need an
    /// allocation in a late pass (and one more pass to record it in the space maps).
    pub(super) fn free_deferred(&self, txg: Txg) -> Result<(), PoolError> {
        let store = deferred_list_store(&self.mos, &self.tunables);
        let mut list = BpObj::open(&store, self.deferred_frees_object)?;
        if list.is_empty() {
            return Ok(());
        }
        // A gang whose header cannot be read (staged here by `PoolFreer`) is set aside, not
        // left to fail this and every later txg (background_free.rs).
        let mut aside = Vec::new();
        list.iterate(&mut |entry| {
            self.free_or_set_aside(&entry.bp, txg, &mut aside)?;
            Ok(())
        })?;
        list.clear(&Tx::syncing(txg))?;
        self.set_aside_frees(&Tx::syncing(txg), aside)
    }

    /// Append frees staged by late sync passes to the on-disk deferred-free list, so that a
    /// crash cannot leak them.
    pub(super) fn persist_staged_frees(&self, txg: Txg) -> Result<(), PoolError> {
        let staged: Vec<BpObjEntry> = std::mem::take(&mut *self.freer.staged.lock())
            .into_iter()
            .map(BpObjEntry::alloc)
            .collect();
        if staged.is_empty() {
            return Ok(());
        }
        let store = deferred_list_store(&self.mos, &self.tunables);
        BpObj::open(&store, self.deferred_frees_object)?.append(&Tx::syncing(txg), &staged)?;
        Ok(())
    }

    /// The label config for one leaf.
    pub(super) fn label_config(&self, txg: Txg, top_guid: Guid, leaf_guid: Guid) -> LabelConfig {
        let config = self.config.lock();
        LabelConfig {
            version: POOL_VERSION,
            name: self.name.clone(),
            pool_guid: self.guid.0,
            state: config.state,
            txg: txg.0,
            hostname: hostname(),
            top_guid: top_guid.0,
            leaf_guid: leaf_guid.0,
            vdev_tree: self.io.vdevs.to_config(),
            features_for_read: config.features_for_read.clone(),
            features_for_write: Some(config.features_for_write.clone()),
            features: config.features.clone(),
            l2cache: crate::vdev::label::L2cacheConfig {
                devices: self.cache_device_configs(),
                is_cache_device: false,
            },
        }
    }

    /// Write labels of the chosen set on every leaf; Ok if at least one leaf took them.
    pub(super) fn write_labels(&self, txg: Txg, which: LabelSet) -> Result<(), PoolError> {
        let mut written = 0;
        let mut last_error = None;
        for top in self.io.vdevs.tops().iter() {
            // An offline leaf takes no I/O (vdev/dtl.rs); its labels stay as they were.
            for leaf in top.children.iter().filter(|leaf| !leaf.is_offline()) {
                let config = self.label_config(txg, top.guid, leaf.guid);
                let labels = which.labels().len() as u64;
                self.io
                    .record_device_writes(labels, labels * label::LABEL_CONFIG_SIZE);
                match label::write_labels(leaf.device.as_ref(), &config, which) {
                    Ok(()) => written += 1,
                    Err(error) => last_error = Some(error),
                }
            }
        }
        match (written, last_error) {
            (0, Some(error)) => Err(error.into()),
            _ => Ok(()),
        }
    }

    pub(super) fn flush(&self) -> Result<(), PoolError> {
        self.io.vdevs.flush_all()?;
        Ok(())
    }

    /// Zero the ring slots of every uberblock in `found` newer than `txg` on every leaf, and
    /// flush: after a rewind to `txg` they describe trees whose blocks the next txgs may reuse.
    pub(super) fn invalidate_uberblocks_after(
        &self,
        txg: Txg,
        found: &[Uberblock],
    ) -> Result<(), PoolError> {
        let abandoned: Vec<Txg> = found
            .iter()
            .filter(|uberblock| uberblock.txg > txg)
            .map(|uberblock| uberblock.txg)
            .collect();
        if abandoned.is_empty() {
            return Ok(());
        }
        for top in self.io.vdevs.tops().iter() {
            let slots = label::uberblock_slot_count(top.ashift);
            let empty = vec![0u8; label::uberblock_slot_size(top.ashift) as usize];
            for leaf in &top.children {
                if leaf.device.is_missing() {
                    continue;
                }
                for abandoned in &abandoned {
                    // A leaf that cannot take the write keeps the old slot; the flush below
                    // fails the import if no leaf of a vdev took anything.
                    let _ = label::write_uberblock(
                        leaf.device.as_ref(),
                        top.ashift,
                        abandoned.0 % slots,
                        &empty,
                    );
                }
            }
        }
        self.flush()
    }

    /// Write `uberblock` into ring slot `slot_txg` (modulo the ring) of every label of every
    /// leaf that takes I/O; Ok if at least one took it. Not flushed.
    pub(super) fn write_uberblock(
        &self,
        uberblock: &Uberblock,
        slot_txg: u64,
    ) -> Result<(), PoolError> {
        let bytes = uberblock.encode();
        let mut written = 0;
        let mut last_error = None;
        for top in self.io.vdevs.tops().iter() {
            let slot = slot_txg % label::uberblock_slot_count(top.ashift);
            for leaf in top.children.iter().filter(|leaf| !leaf.is_offline()) {
                let copies = label::VDEV_LABELS as u64;
                self.io
                    .record_device_writes(copies, copies * label::uberblock_slot_size(top.ashift));
                match label::write_uberblock(leaf.device.as_ref(), top.ashift, slot, &bytes) {
                    Ok(()) => written += 1,
                    Err(error) => last_error = Some(error),
                }
            }
        }
        if written == 0 {
            return Err(PoolError::SyncFailed {
                txg: uberblock.txg,
                why: format!("no leaf took the uberblock: {last_error:?}"),
            });
        }
        Ok(())
    }

    /// Steps 3–6 of the commit protocol.
    pub(super) fn commit(&self, txg: Txg, mos_root: &BlockPtr) -> Result<(), PoolError> {
        self.io.wait_writes()?;
        self.flush()?;
        let config_dirty = self.config.lock().dirty;
        if config_dirty {
            self.write_labels(txg, LabelSet::Even)?;
            self.flush()?;
        }
        let reflow = self.io.vdevs.reflow_progress();
        let uberblock = Uberblock {
            txg,
            guid_sum: self.io.vdevs.guid_sum(),
            timestamp: now_seconds(),
            software_version: uberblock::software_version(),
            mos_root: mos_root.clone(),
            reflow,
        };
        self.write_uberblock(&uberblock, txg.0)?;
        self.flush()?;
        self.last_committed_txg.store(txg.0, Ordering::SeqCst);
        *self.last_committed_reflow.lock() = reflow;
        self.raidz_expand.committed(uberblock);
        if config_dirty {
            self.write_labels(txg, LabelSet::Odd)?;
            self.flush()?;
            self.config.lock().dirty = false;
        }
        Ok(())
    }
}

/// The sync thread, and a caller's request for a sync.
impl Pool {
    pub(super) fn start_sync_thread(&self) {
        if self.core.readonly {
            return;
        }
        // Deferred frees left by the txg imported at are carried by timer-driven syncs.
        self.core
            .txgs
            .set_pending_work(self.core.has_pending_work());
        let core = self.core.clone();
        let handle = std::thread::Builder::new()
            .name(format!("tarn-sync-{}", self.core.name))
            .spawn(move || {
                let sync_core = core.clone();
                let check_core = core.clone();
                core.txgs.run_sync_thread(
                    move |txg| {
                        sync_core
                            .sync_txg_counted(txg)
                            .map_err(|error| error.to_string())
                    },
                    move |txg| {
                        check_core.mos.is_dirty(txg)
                            || check_core.records_pending()
                            || check_core.dataset_list().iter().any(|(_, dataset)| {
                                dataset.try_objset().is_some_and(|o| o.is_dirty(txg))
                            })
                    },
                );
            })
            .expect("spawn the sync thread");
        *self.sync_thread.lock() = Some(handle);
    }

    /// Force a txg sync and wait for it; returns the last synced txg.
    pub fn sync(&self) -> Result<Txg, PoolError> {
        if self.core.readonly {
            return Ok(self.core.txgs.last_synced());
        }
        Ok(self.core.txgs.wait_synced(None)?)
    }

    /// Flush every metaslab's unflushed changes from the log space map to its own map in the
    /// next txg, as export does, and wait for it: afterwards only that txg's own log remains.
    /// For measurements of allocated space that should not count how many logs happen to be
    /// kept. Without the feature, a plain sync.
    pub fn flush_log_space_map(&self) -> Result<Txg, PoolError> {
        if !self.core.readonly {
            self.core.io.space.request_flush_all();
        }
        self.sync()
    }
}
