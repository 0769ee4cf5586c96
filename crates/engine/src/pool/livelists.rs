//! The pool's side of livelists (`dataset/livelist.rs`; OpenZFS spa_livelist_delete_cb and
//! the deleted-clones queue): destroyed clones' livelists queued in the MOS and freed one
//! sub-list per txg in the background, and the sync driver's per-txg livelist work.
//!
//! # Queue
//! MOS directory key `deleted_livelists` names a key/value object, created at the first
//! livelist destroy: key = a destroyed clone's livelist object (u64 big-endian), value empty.
//! A destroy's syncing half moves the clone's livelist there (constant time) instead of queueing
//! its tree on the destroy queue. In pass 1 of each txg with queued work,
//! [`PoolCore::free_livelists_in_background`] takes the oldest sub-list of the first queued
//! livelist, frees its live entries (ALLOCs less FREEs), removes the list and its key, and, once
//! the livelist is empty, its object and queue entry: all in that txg, so a crash or an export
//! resumes at the next sub-list without freeing anything twice. `freeing` counts the queued
//! livelists' net space; `check` counts their live entries as allocated.
//!
//! # Cost
//! Per txg: one sub-list read whole (at most about `livelist_max_entries` entries plus the
//! frees of its blocks) and its live blocks freed; whatever the size of the clone's origin.

use std::sync::atomic::Ordering;

use crate::block::blkptr::{BlockPtr, Compression, ObjectType};
use crate::dataset::livelist::Livelist;
use crate::dataset::{Dataset, LivelistFlush};
use crate::object::adapters::{create_kv_object, kv_entries, kv_object_error, KvObject};
use crate::object::{kv, ObjectError, Tx};
use crate::types::{ObjectId, Txg};

use super::{kv_set_u64, lookup_mos_directory, mos_props, PoolCore, PoolError};
use crate::pool::MOS_OBJECT_DIRECTORY;

/// The MOS directory key of the queue of destroyed clones' livelists.
pub const LIVELIST_QUEUE_KEY: &str = "deleted_livelists";

/// Which way a clone destroy frees its blocks (`destroy -v`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestroyPath {
    /// The live entries of the clone's livelist.
    Livelist,
    /// A walk of the tree (blocks born after the previous snapshot or the origin).
    Traversal,
}

impl DestroyPath {
    pub fn name(self) -> &'static str {
        match self {
            DestroyPath::Livelist => "livelist",
            DestroyPath::Traversal => "traversal",
        }
    }
}

impl super::Pool {
    /// Which way destroying the file system `full` now would free its blocks (`destroy -v`).
    pub fn destroy_path(&self, full: &str) -> Result<DestroyPath, PoolError> {
        let core = &self.core;
        let dataset = core.dataset_by_relative(core.relative_name(full)?)?;
        Ok(core.destroy_path(&dataset))
    }
}

impl PoolCore {
    /// Whether new clones get a livelist.
    pub(super) fn livelists_enabled(&self) -> bool {
        self.config
            .lock()
            .features
            .contains_key(super::LIVELIST_FEATURE)
    }

    fn livelist_queue(&self) -> Option<ObjectId> {
        match self.livelist_queue_object.load(Ordering::Acquire) {
            0 => None,
            object => Some(ObjectId(object)),
        }
    }

    /// The queued livelists' objects, in key order.
    pub(super) fn queued_livelists(&self) -> Result<Vec<ObjectId>, PoolError> {
        let Some(queue) = self.livelist_queue() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for entry in kv_entries(&self.mos, queue)? {
            let key = <[u8; 8]>::try_from(entry.key.as_slice()).map_err(|_| {
                PoolError::Corrupt(format!(
                    "livelist queue {queue}: a key of {} bytes",
                    entry.key.len()
                ))
            })?;
            out.push(ObjectId(u64::from_be_bytes(key)));
        }
        Ok(out)
    }

    /// At open: find the queue; returns whether it has work.
    pub(super) fn load_livelist_queue(&self) -> Result<bool, PoolError> {
        if let Some(object) =
            lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, LIVELIST_QUEUE_KEY)?
        {
            self.livelist_queue_object.store(object, Ordering::Release);
        }
        let store = self.deadlist_store();
        let mut total = 0u64;
        let queued = self.queued_livelists()?;
        for object in &queued {
            total += Livelist::load(&store, *object)?.space().used_bytes;
        }
        self.livelist_freeing.store(total, Ordering::Release);
        Ok(!queued.is_empty())
    }

    /// Load a dataset's livelist at open (none if its record names none).
    pub(super) fn load_livelist(&self, dataset: &Dataset) -> Result<(), PoolError> {
        let object = dataset.phys().livelist_object;
        if object.0 != 0 {
            let livelist = Livelist::load(&self.deadlist_store(), object)?;
            dataset.set_livelist(Some(livelist));
        }
        Ok(())
    }

    /// Syncing context: a new clone's empty livelist, saved (when the feature is enabled).
    pub(super) fn create_livelist(
        &self,
        origin_txg: Txg,
        tx: &Tx,
    ) -> Result<Option<Livelist>, PoolError> {
        if !self.livelists_enabled() {
            return Ok(None);
        }
        let mut livelist = Livelist::new(origin_txg);
        livelist.save(&self.deadlist_store(), tx)?;
        self.feature_increment(super::LIVELIST_FEATURE)?;
        Ok(Some(livelist))
    }

    /// Syncing context, after a dataset's object set synced: its livelist entries of this txg.
    pub(super) fn flush_dataset_livelist(
        &self,
        dataset: &Dataset,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let outcome = dataset.flush_livelist(
            &self.deadlist_store(),
            tx,
            self.tunables.livelist_max_entries,
            self.tunables.livelist_min_percent_shared,
        )?;
        if outcome == LivelistFlush::Dropped {
            self.feature_decrement(super::LIVELIST_FEATURE)?;
            log::info!(
                "pool {}: clone {} shares less than {}% with its origin: livelist dropped (destroy will walk its tree)",
                self.name,
                dataset.name(),
                self.tunables.livelist_min_percent_shared
            );
        }
        Ok(())
    }

    /// Syncing context, pass 1: condense at most one livelist sub-list in the pool; the
    /// condensed dataset's record is written. Returns whether one was.
    pub(super) fn condense_livelists(
        &self,
        datasets: &[(String, std::sync::Arc<Dataset>)],
        tx: &Tx,
    ) -> Result<bool, PoolError> {
        let store = self.deadlist_store();
        for (_, dataset) in datasets {
            if dataset.try_objset().is_none() {
                continue;
            }
            // Condensing reads a sub-list before it changes anything; one that cannot be read
            // is left as it is (condensing is an optimisation; destroy reports the damage).
            match dataset.condense_livelist(
                &store,
                tx,
                self.tunables.livelist_condense_min_frees,
                self.tunables.livelist_max_entries,
            ) {
                Ok(true) => {
                    self.write_dataset_record(tx, dataset.object, &dataset.phys())?;
                    return Ok(true);
                }
                Ok(false) => {}
                Err(error @ (ObjectError::Pipeline(_) | ObjectError::Corrupt(_))) => log::warn!(
                    "pool {}: clone {}: a livelist sub-list cannot be read for condensing: {error}",
                    self.name,
                    dataset.name()
                ),
                Err(error) => return Err(error.into()),
            }
        }
        Ok(false)
    }

    /// Syncing context: destroy `dataset`'s livelist, if it has one, without freeing anything
    /// (promote, rollback, receive into a clone); the caller writes the record.
    pub(super) fn drop_dataset_livelist(
        &self,
        dataset: &Dataset,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        if dataset.drop_livelist(&self.deadlist_store(), tx)? {
            self.feature_decrement(super::LIVELIST_FEATURE)?;
        }
        Ok(())
    }

    /// Which path destroying `dataset` now would take.
    pub(super) fn destroy_path(&self, dataset: &Dataset) -> DestroyPath {
        if dataset.livelist().is_some() {
            DestroyPath::Livelist
        } else {
            DestroyPath::Traversal
        }
    }

    /// Syncing context: queue a destroyed clone's livelist for background freeing (its
    /// snapshots were destroyed first, in this txg: the live entries are all it holds above
    /// its origin).
    pub(super) fn queue_livelist_destroy(
        &self,
        mut livelist: Livelist,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let object = livelist.save(&self.deadlist_store(), tx)?;
        self.livelist_freeing
            .fetch_add(livelist.space().used_bytes, Ordering::AcqRel);
        let queue = match self.livelist_queue() {
            Some(queue) => queue,
            None => {
                let queue = create_kv_object(
                    &self.mos,
                    tx,
                    mos_props(ObjectType::KeyValue, 4096, &self.tunables, Compression::Lz4),
                )?;
                kv_set_u64(
                    &self.mos,
                    tx,
                    MOS_OBJECT_DIRECTORY,
                    LIVELIST_QUEUE_KEY,
                    queue.0,
                )?;
                self.livelist_queue_object.store(queue.0, Ordering::Release);
                queue
            }
        };
        let mut handle = KvObject::new(&self.mos, queue, Some(*tx))?;
        kv::insert(&mut handle, &object.0.to_be_bytes(), &[]).map_err(kv_object_error(queue))?;
        self.set_background_work(true);
        Ok(())
    }

    /// Syncing context, pass 1: free the live entries of one sub-list of the first queued
    /// livelist (see the module documentation). Returns whether queued work remains.
    pub(super) fn free_livelists_in_background(&self, txg: Txg) -> Result<bool, PoolError> {
        let set_aside = self.livelists_set_aside.lock().clone();
        let queued: Vec<ObjectId> = self
            .queued_livelists()?
            .into_iter()
            .filter(|object| !set_aside.contains(object))
            .collect();
        let Some(&object) = queued.first() else {
            return Ok(false);
        };
        let tx = Tx::syncing(txg);
        let store = self.deadlist_store();
        // Reading comes first and changes nothing: a livelist that cannot be read is set aside
        // (its space stays allocated and counted in `freeing`) until the next import, rather
        // than failing every sync.
        let read = Livelist::load(&store, object).and_then(|mut livelist| {
            let sub = livelist.take_oldest();
            let live = match &sub {
                Some((_, entry)) => Livelist::live_blocks(&store, entry.list)?,
                None => Vec::new(),
            };
            Ok((livelist, sub, live))
        });
        let (mut livelist, sub, live) = match read {
            Ok(read) => read,
            Err(error) => {
                log::error!(
                    "pool {}: the livelist {object} of a destroyed clone cannot be read; set aside until the next import: {error}",
                    self.name
                );
                self.livelists_set_aside.lock().push(object);
                return Ok(queued.len() > 1);
            }
        };
        if let Some((key, entry)) = sub {
            let mut aside = Vec::new();
            for bp in &live {
                self.free_or_set_aside(bp, txg, &mut aside)?;
            }
            self.set_aside_frees(&tx, aside)?;
            let _ =
                self.livelist_freeing
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |total| {
                        Some(total.saturating_sub(entry.space.used_bytes))
                    });
            crate::object::bpobj::BpObj::open(&store.lists(), entry.list)?.destroy(&tx)?;
            livelist.save(&store, &tx)?;
            log::debug!(
                "pool {}: txg {txg}: livelist {object} sub-list {key}: freed {} blocks",
                self.name,
                live.len()
            );
        }
        if livelist.is_empty() {
            livelist.destroy(&store, &tx)?;
            // The destroyed clone's livelist was the last structure of its clone that needed
            // the feature.
            self.feature_decrement(super::LIVELIST_FEATURE)?;
            let queue = self
                .livelist_queue()
                .expect("a queued livelist has a queue");
            let mut handle = KvObject::new(&self.mos, queue, Some(tx))?;
            kv::remove(&mut handle, &object.0.to_be_bytes()).map_err(kv_object_error(queue))?;
            return Ok(queued.len() > 1);
        }
        Ok(true)
    }

    /// Net bytes the queued livelists will still free (part of `freeing`).
    pub(super) fn livelist_freeing_bytes(&self) -> u64 {
        self.livelist_freeing.load(Ordering::Acquire)
    }

    /// Every live block of the queued livelists (for `check`: still allocated).
    pub fn visit_queued_livelists(
        &self,
        visit: &mut dyn FnMut(&BlockPtr) -> Result<(), ObjectError>,
    ) -> Result<(), PoolError> {
        let store = self.deadlist_store();
        for object in self.queued_livelists()? {
            let livelist = Livelist::load(&store, object)?;
            for sub in livelist.sublists(&store)? {
                if sub.list.0 == 0 {
                    continue;
                }
                for bp in Livelist::live_blocks(&store, sub.list)? {
                    visit(&bp)?;
                }
            }
        }
        Ok(())
    }
}
