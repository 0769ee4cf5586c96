//! The pool's side of livelists (`dataset/livelist.rs`; OpenZFS spa_livelist_delete_cb,
//! spa_livelist_condense_cb and the deleted-clones queue): destroyed clones' livelists queued in
//! the MOS and freed sub-list by sub-list, condensing, and the livelist reader that does the
//! reading for both outside syncing context.
//!
//! # Queue
//! MOS directory key `deleted_livelists` names a key/value object, created at the first
//! livelist destroy: key = a destroyed clone's livelist object (u64 big-endian), value empty.
//! A destroy's syncing half moves the clone's livelist there (constant time) instead of queueing
//! its tree on the destroy queue. The on-disk queue is the whole truth: what the reader holds in
//! memory is only a head start, lost at export or a crash and read again after import.
//! `freeing` counts the queued livelists' net space; `check` counts their live entries as
//! allocated.
//!
//! # Reader (OpenZFS's livelist zthrs)
//! A thread per writable pool ([`super::Pool::start_livelist_reader`], stopped at export,
//! close and `abandon` before the sync thread stops; a read in progress notices within 1024
//! entries). In open context it reads, one list at a time:
//! - *delete*: the sub-lists of the first queued livelist (not set aside), oldest first, each
//!   whole, with its live entries computed (ALLOCs less FREEs); it reads ahead while the reads
//!   waiting for the sync hold fewer than `livelist_max_entries` live blocks, and reloads the
//!   queue only once the sync has applied everything it handed over (the sync thread is the
//!   only writer of a queued livelist).
//! - *condense*: the next condense candidate of any clone (`dataset/livelist.rs`, "Condense"):
//!   its header checked against the rule, then its survivors, and its successor's when the two
//!   merge.
//!
//! Every read carries what makes it current: the livelist object, the sub-list's key and list
//! object, and the entry count it read (lists are only appended to). The reader wakes the sync
//! thread (a txg kick) when it hands a read over, and sleeps on a condition variable otherwise
//! (woken by a destroy, a flush that made a candidate, and each apply).
//!
//! # Apply (syncing context, pass 1)
//! [`PoolCore::sync_livelist_work`] takes what is ready without waiting for the reader (the
//! reader never holds the hand-over lock across a read): at most one condense, then delete
//! reads in order, until `livelist_sync_time_ms` has passed (the first always goes). Each is
//! checked against the livelist as it is now (the same livelist object, the sub-list still the
//! oldest for a delete, the same list object, no entry appended since); a stale read changes
//! nothing: a condense candidate goes back to the set, and a stale delete read drops every read
//! of that livelist and restarts the reader at the queue. Of a condense read whose merge
//! partner alone changed, the first sub-list is applied without the merge.
//! A delete apply frees the live blocks, removes the list and its key, and, once the livelist
//! holds no list, its object and queue entry: all in that txg, so a crash or an export resumes
//! at the next sub-list without freeing anything twice.
//!
//! # Cost
//! Syncing context, per txg with livelist work: one load of the queued livelist (a header read
//! per sub-list), and per delete read applied a header read to check it plus the frees of its
//! live blocks; per condense read, one or two header reads (the clone's livelist is in memory)
//! and the survivors written. No list is read whole there. Memory: about two sub-lists of block pointers in the reader (the
//! one it reads and those waiting), whatever the size of the clone's origin.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::block::blkptr::{BlockPtr, Compression, ObjectType};
use crate::dataset::livelist::{
    worth_condensing, CondenseOutcome, CondenseRead, Livelist, SublistRead,
};
use crate::dataset::{Dataset, LivelistFlush};
use crate::object::adapters::{create_kv_object, kv_entries, kv_object_error, KvObject};
use crate::object::bpobj::BpObj;
use crate::object::{kv, ObjectError, Tx};
use crate::types::{ObjectId, Txg};

use super::{kv_set_u64, lookup_mos_directory, mos_props, Pool, PoolCore, PoolError};
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

/// One delete read: a sub-list of a queued livelist, or None when the livelist held no list at
/// all when read (its apply only removes it from the queue).
#[derive(Debug)]
struct DeleteRead {
    livelist: ObjectId,
    sublist: Option<SublistRead>,
}

/// Reads handed from the reader to the sync thread.
#[derive(Default)]
struct ReadyReads {
    /// Sub-lists of one queued livelist, oldest first.
    deletes: VecDeque<DeleteRead>,
    /// A condense read and the dataset (its MOS object) it is for.
    condense: Option<(ObjectId, CondenseRead)>,
    /// Set by the sync thread when it found a delete read stale: the reader forgets where it
    /// was and starts from the queue again.
    restart_deletes: bool,
}

/// What the livelist reader did, for tests and `debug`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LivelistWorkStats {
    /// Sub-lists of destroyed clones freed.
    pub sublists_freed: u64,
    /// Sub-lists condensed.
    pub condensed: u64,
    /// Reads (or a condense read's merge partner) found stale at apply and discarded.
    pub discarded: u64,
    /// The most reads one txg applied (`livelist_sync_time_ms` bounds it).
    pub most_applied_in_one_txg: u64,
}

/// The livelist reader's state, shared by its thread and the sync thread (see the module
/// documentation, "Reader").
#[derive(Default)]
pub(super) struct LivelistReader {
    /// Held by the reader only to hand a read over (never across I/O), and by the sync thread
    /// for its whole apply, so that the reader never loads a livelist the sync is changing.
    ready: Mutex<ReadyReads>,
    /// The reader sleeps here; set and notified when there may be new work.
    wake: Mutex<bool>,
    woken: Condvar,
    stopping: AtomicBool,
    /// The reader is between taking work and handing it over (for [`PoolCore::livelist_work_idle`]).
    busy: AtomicBool,
    /// Tests: reads are held back before they are handed over while set ([`PoolCore::hold_livelist_reads`]).
    hold: AtomicBool,
    /// Reads waiting under `hold`.
    held: AtomicU64,
    sublists_freed: AtomicU64,
    condensed: AtomicU64,
    discarded: AtomicU64,
    most_applied_in_one_txg: AtomicU64,
}

impl LivelistReader {
    fn wake(&self) {
        *self.wake.lock() = true;
        self.woken.notify_all();
    }

    /// Sleep until woken, stopped, or `timeout`.
    fn sleep(&self, timeout: Duration) {
        let mut woken = self.wake.lock();
        if !*woken && !self.stopping.load(Ordering::Acquire) {
            self.woken.wait_for(&mut woken, timeout);
        }
        *woken = false;
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Tests: wait while reads are held back; false if the reader was stopped meanwhile.
    fn wait_while_held(&self) -> bool {
        if !self.hold.load(Ordering::Acquire) {
            return !self.stopping();
        }
        self.held.fetch_add(1, Ordering::AcqRel);
        while self.hold.load(Ordering::Acquire) && !self.stopping() {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.held.fetch_sub(1, Ordering::AcqRel);
        !self.stopping()
    }
}

/// Where the reader is in the first queued livelist: the sub-lists it has not read yet.
struct DeleteCursor {
    livelist: ObjectId,
    remaining: VecDeque<(Txg, ObjectId)>,
}

/// The reader sleeps at most this long between looks for work (new work wakes it at once).
const READER_IDLE_WAIT: Duration = Duration::from_secs(1);

impl Pool {
    /// Start the livelist reader of a writable pool (see [`super::livelists`]).
    pub(super) fn start_livelist_reader(&self) {
        if self.core.readonly {
            return;
        }
        let core = self.core.clone();
        match std::thread::Builder::new()
            .name(format!("tarn-livelist-{}", self.core.name))
            .spawn(move || core.run_livelist_reader())
        {
            Ok(handle) => *self.livelist_reader_thread.lock() = Some(handle),
            // Without a reader nothing is lost: the queue and the candidates wait on disk for
            // the next import.
            Err(error) => log::warn!(
                "pool {}: no livelist reader, destroyed clones are not freed and nothing is condensed until the next import: {error}",
                self.core.name
            ),
        }
    }

    /// Stop the livelist reader and forget what it read and did not hand over or the sync did
    /// not apply (the on-disk queue and the sub-lists' headers hold all of it).
    pub(super) fn stop_livelist_reader(&self) {
        let Some(handle) = self.livelist_reader_thread.lock().take() else {
            return;
        };
        let reader = &self.core.livelist_reader;
        reader.stopping.store(true, Ordering::Release);
        reader.wake();
        let _ = handle.join();
        let mut ready = reader.ready.lock();
        ready.deletes.clear();
        ready.condense = None;
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

    /// At open: find the queue and count what it will free (the reader finds its work).
    pub(super) fn load_livelist_queue(&self) -> Result<(), PoolError> {
        if let Some(object) =
            lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, LIVELIST_QUEUE_KEY)?
        {
            self.livelist_queue_object.store(object, Ordering::Release);
        }
        let store = self.deadlist_store();
        let mut total = 0u64;
        for object in self.queued_livelists()? {
            total += Livelist::load(&store, object)?.space().used_bytes;
        }
        self.livelist_freeing.store(total, Ordering::Release);
        Ok(())
    }

    /// Load a dataset's livelist at open (none if its record names none).
    pub(super) fn load_livelist(&self, dataset: &Dataset) -> Result<(), PoolError> {
        let object = dataset.phys().livelist_object;
        if object.0 != 0 {
            let store = self.deadlist_store();
            let mut livelist = Livelist::load(&store, object)?;
            // The condense candidates were kept in memory only: find them again from the
            // headers (condensing is an optimisation, so a header that cannot be read here
            // only leaves its sub-list uncondensed).
            if let Err(error) =
                livelist.find_condense_candidates(&store, self.tunables.livelist_condense_min_frees)
            {
                log::warn!(
                    "pool {}: clone {}: livelist condense candidates not found: {error}",
                    self.name,
                    dataset.name()
                );
            }
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
        if outcome == LivelistFlush::Appended {
            // FREE entries may have made a condense candidate.
            self.livelist_reader.wake();
        }
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
        self.livelist_reader.wake();
        Ok(())
    }

    /// Syncing context, pass 1: apply what the livelist reader has ready (see the module
    /// documentation, "Apply"), never waiting for it. Returns whether a condensed dataset's
    /// record was written.
    pub(super) fn sync_livelist_work(
        &self,
        datasets: &[(String, Arc<Dataset>)],
        txg: Txg,
    ) -> Result<bool, PoolError> {
        let reader = &self.livelist_reader;
        let mut ready = reader.ready.lock();
        if ready.condense.is_none() && ready.deletes.is_empty() {
            return Ok(false);
        }
        let started = Instant::now();
        let budget = Duration::from_millis(self.tunables.livelist_sync_time_ms);
        let tx = Tx::syncing(txg);
        let mut condensed = false;
        let mut applied = 0u64;
        if let Some((dataset_object, read)) = ready.condense.take() {
            applied += 1;
            let dataset = datasets
                .iter()
                .map(|(_, dataset)| dataset)
                .find(|dataset| dataset.object == dataset_object && dataset.try_objset().is_some());
            let outcome = match dataset {
                Some(dataset) => dataset
                    .condense_livelist(&self.deadlist_store(), &tx, read)
                    .map(|done| (dataset, done)),
                // Destroyed (its livelist queued) or unavailable since the read.
                None => Err(ObjectError::NoSuchObject(dataset_object)),
            };
            match outcome {
                Ok((dataset, outcome @ (CondenseOutcome::Applied | CondenseOutcome::AppliedWithoutMerge))) => {
                    self.write_dataset_record(&tx, dataset.object, &dataset.phys())?;
                    reader.condensed.fetch_add(1, Ordering::Relaxed);
                    if outcome == CondenseOutcome::AppliedWithoutMerge {
                        // The merge partner's part of the read was stale.
                        reader.discarded.fetch_add(1, Ordering::Relaxed);
                    }
                    condensed = true;
                }
                Ok((_, CondenseOutcome::Stale)) | Err(ObjectError::NoSuchObject(_)) => {
                    reader.discarded.fetch_add(1, Ordering::Relaxed);
                }
                // A header that cannot be read leaves the sub-list as it is (condensing is an
                // optimisation; destroy reports the damage).
                Err(error @ (ObjectError::Pipeline(_) | ObjectError::Corrupt(_))) => log::warn!(
                    "pool {}: dataset {dataset_object}: a livelist sub-list cannot be checked for condensing: {error}",
                    self.name
                ),
                Err(error) => return Err(error.into()),
            }
        }
        let mut loaded = None;
        while !ready.deletes.is_empty() {
            if applied > 0 && started.elapsed() >= budget {
                break;
            }
            let read = ready.deletes.pop_front().expect("not empty");
            applied += 1;
            if !self.apply_delete_read(read, txg, &mut loaded)? {
                reader.discarded.fetch_add(1, Ordering::Relaxed);
                ready.deletes.clear();
                ready.restart_deletes = true;
                break;
            }
        }
        let more = ready.condense.is_some() || !ready.deletes.is_empty();
        drop(ready);
        reader
            .most_applied_in_one_txg
            .fetch_max(applied, Ordering::Relaxed);
        reader.wake();
        if more {
            // What the budget left waits for the next txg, right away.
            self.txgs.kick();
        }
        log::debug!(
            "pool {}: txg {txg}: {applied} livelist reads applied in {} ms",
            self.name,
            started.elapsed().as_millis()
        );
        Ok(condensed)
    }

    /// Whether the livelist reader has handed over reads the sync has not applied yet.
    pub(super) fn livelist_reads_ready(&self) -> bool {
        let ready = self.livelist_reader.ready.lock();
        ready.condense.is_some() || !ready.deletes.is_empty()
    }

    /// Syncing context: apply one delete read (see the module documentation). Returns false,
    /// changing nothing, when the read is stale.
    /// `cache`: the livelist as the previous apply of this txg left it (loaded once per txg,
    /// not once per read).
    fn apply_delete_read(
        &self,
        read: DeleteRead,
        txg: Txg,
        cache: &mut Option<Livelist>,
    ) -> Result<bool, PoolError> {
        let object = read.livelist;
        let cached = cache.take().filter(|livelist| livelist.object() == object);
        // A livelist left in the cache is still queued (only an apply removes one).
        if cached.is_none() && !self.queued_livelists()?.contains(&object) {
            // Already finished: nothing of it is left to apply.
            return Ok(true);
        }
        let tx = Tx::syncing(txg);
        let store = self.deadlist_store();
        // A livelist that cannot be read is set aside (its space stays allocated and counted
        // in `freeing`) until the next import, rather than failing every sync.
        let livelist = match cached {
            Some(livelist) => Ok(livelist),
            None => Livelist::load(&store, object),
        };
        let loaded = livelist.and_then(|mut livelist| {
            let taken = match &read.sublist {
                Some(sub) => livelist.take_oldest_if_current(&store, sub)?,
                None => None,
            };
            Ok((livelist, taken))
        });
        let (mut livelist, taken) = match loaded {
            Ok(loaded) => loaded,
            Err(error @ (ObjectError::Pipeline(_) | ObjectError::Corrupt(_))) => {
                self.set_livelist_aside(object, &error);
                return Ok(true);
            }
            Err(error) => return Err(error.into()),
        };
        match (read.sublist, taken) {
            (Some(_), None) => return Ok(false),
            (Some(sub), Some(entry)) => {
                let mut aside = Vec::new();
                for bp in &sub.live {
                    self.free_or_set_aside(bp, txg, &mut aside)?;
                }
                self.set_aside_frees(&tx, aside)?;
                let _ = self.livelist_freeing.fetch_update(
                    Ordering::AcqRel,
                    Ordering::Acquire,
                    |total| Some(total.saturating_sub(entry.space.used_bytes)),
                );
                BpObj::open(&store.lists(), entry.list)?.destroy(&tx)?;
                livelist.save(&store, &tx)?;
                self.livelist_reader
                    .sublists_freed
                    .fetch_add(1, Ordering::Relaxed);
                log::debug!(
                    "pool {}: txg {txg}: livelist {object} sub-list {}: freed {} blocks",
                    self.name,
                    sub.key,
                    sub.live.len()
                );
            }
            (None, _) => {}
        }
        if livelist.is_empty() {
            livelist.destroy(&store, &tx)?;
            // The destroyed clone's livelist was the last structure of its clone that needed
            // the feature.
            self.feature_decrement(super::LIVELIST_FEATURE)?;
            let queue = self
                .livelist_queue()
                .ok_or_else(|| PoolError::Corrupt("a queued livelist without a queue".into()))?;
            let mut handle = KvObject::new(&self.mos, queue, Some(tx))?;
            kv::remove(&mut handle, &object.0.to_be_bytes()).map_err(kv_object_error(queue))?;
        } else {
            *cache = Some(livelist);
        }
        Ok(true)
    }

    fn set_livelist_aside(&self, object: ObjectId, error: &dyn std::fmt::Display) {
        log::error!(
            "pool {}: the livelist {object} of a destroyed clone cannot be read; set aside until the next import: {error}",
            self.name
        );
        let mut aside = self.livelists_set_aside.lock();
        if !aside.contains(&object) {
            aside.push(object);
        }
    }

    /// The livelist reader's body (see the module documentation, "Reader").
    fn run_livelist_reader(self: Arc<Self>) {
        let reader = &self.livelist_reader;
        let mut cursor: Option<DeleteCursor> = None;
        while !reader.stopping() {
            let mut progressed = self.read_next_delete(&mut cursor);
            if reader.stopping() {
                break;
            }
            progressed |= self.read_next_condense();
            if !progressed {
                reader.sleep(READER_IDLE_WAIT);
            }
        }
    }

    /// The reader's delete step: read the next sub-list of the first queued livelist and hand
    /// it over. Returns whether it handed something over or changed its position.
    fn read_next_delete(&self, cursor: &mut Option<DeleteCursor>) -> bool {
        let reader = &self.livelist_reader;
        let (pending, pending_blocks) = {
            let mut ready = reader.ready.lock();
            if std::mem::take(&mut ready.restart_deletes) {
                *cursor = None;
            }
            let blocks: usize = ready
                .deletes
                .iter()
                .map(|read| read.sublist.as_ref().map_or(0, |sub| sub.live.len()))
                .sum();
            (ready.deletes.len(), blocks as u64)
        };
        if cursor
            .as_ref()
            .is_none_or(|cursor| cursor.remaining.is_empty())
        {
            // The queue and the livelist are read again only once the sync has applied all
            // that was handed over: it is their only writer.
            if pending > 0 {
                return false;
            }
            *cursor = None;
            reader.busy.store(true, Ordering::Release);
            let found = self.start_delete_cursor();
            reader.busy.store(false, Ordering::Release);
            match found {
                None => return false,
                Some(Ok(started)) => *cursor = Some(started),
                Some(Err(read)) => return self.hand_over_delete(read),
            }
        }
        if pending > 0 && pending_blocks >= self.tunables.livelist_max_entries {
            return false;
        }
        let Some(current) = cursor.as_mut() else {
            return false;
        };
        let Some((key, list)) = current.remaining.pop_front() else {
            return false;
        };
        let livelist = current.livelist;
        reader.busy.store(true, Ordering::Release);
        let read = Livelist::read_sublist(&self.deadlist_store(), key, list, &|| reader.stopping());
        reader.busy.store(false, Ordering::Release);
        match read {
            Ok(sub) => self.hand_over_delete(DeleteRead {
                livelist,
                sublist: Some(sub),
            }),
            Err(_) if reader.stopping() => false,
            Err(error) => {
                self.set_livelist_aside(livelist, &error);
                *cursor = None;
                true
            }
        }
    }

    /// Find the first queued livelist not set aside and list its sub-lists. None: no work;
    /// Some(Err(read)): a livelist holding no list, whose read is only its removal.
    fn start_delete_cursor(&self) -> Option<Result<DeleteCursor, DeleteRead>> {
        let set_aside = self.livelists_set_aside.lock().clone();
        let queued = match self.queued_livelists() {
            Ok(queued) => queued,
            Err(error) => {
                log::warn!(
                    "pool {}: the livelist queue cannot be read: {error}",
                    self.name
                );
                return None;
            }
        };
        let object = queued
            .into_iter()
            .find(|object| !set_aside.contains(object))?;
        match Livelist::load(&self.deadlist_store(), object) {
            Ok(livelist) => {
                let remaining: VecDeque<(Txg, ObjectId)> = livelist.lists().into();
                if remaining.is_empty() {
                    Some(Err(DeleteRead {
                        livelist: object,
                        sublist: None,
                    }))
                } else {
                    Some(Ok(DeleteCursor {
                        livelist: object,
                        remaining,
                    }))
                }
            }
            Err(error) => {
                self.set_livelist_aside(object, &error);
                None
            }
        }
    }

    fn hand_over_delete(&self, read: DeleteRead) -> bool {
        let reader = &self.livelist_reader;
        if !reader.wait_while_held() {
            return false;
        }
        reader.ready.lock().deletes.push_back(read);
        self.txgs.kick();
        true
    }

    /// The reader's condense step: take condense candidates until one meets the rule, read it
    /// (and its merge partner) and hand it over. Returns whether it handed one over.
    fn read_next_condense(&self) -> bool {
        let reader = &self.livelist_reader;
        if reader.ready.lock().condense.is_some() {
            return false;
        }
        let store = self.deadlist_store();
        let stop = || reader.stopping();
        for (_, dataset) in self.dataset_list() {
            if dataset.try_objset().is_none() {
                continue;
            }
            reader.busy.store(true, Ordering::Release);
            let read = loop {
                if reader.stopping() {
                    break None;
                }
                let Some(target) = dataset.take_livelist_condense_candidate() else {
                    break None;
                };
                match self.read_condense_target(&store, target, &stop) {
                    Ok(Some(read)) => break Some(read),
                    Ok(None) => {}
                    Err(_) if reader.stopping() => break None,
                    // Read while the sync dropped or condensed it, or damaged: condensing is
                    // an optimisation, the sub-list stays as it is.
                    Err(error) => log::info!(
                        "pool {}: clone {}: a livelist sub-list was not read for condensing: {error}",
                        self.name,
                        dataset.name()
                    ),
                }
            };
            let Some(read) = read else {
                reader.busy.store(false, Ordering::Release);
                continue;
            };
            let handed = reader.wait_while_held();
            if handed {
                reader.ready.lock().condense = Some((dataset.object, read));
                self.txgs.kick();
            }
            reader.busy.store(false, Ordering::Release);
            return handed;
        }
        false
    }

    /// Read one condense candidate if its header meets the condense rule: its survivors, and
    /// its successor's when both then hold at most `livelist_max_entries / 2` entries.
    fn read_condense_target(
        &self,
        store: &crate::dataset::deadlist::DeadlistStore,
        target: crate::dataset::livelist::CondenseTarget,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<CondenseRead>, ObjectError> {
        let header = BpObj::open(&store.lists(), target.list)?.header();
        if !worth_condensing(
            header.entry_count,
            header.freed_count,
            self.tunables.livelist_condense_min_frees,
        ) {
            return Ok(None);
        }
        let first = Livelist::read_sublist(store, target.key, target.list, stop)?;
        let mut merged = None;
        if let Some((next_key, next_list)) = target.next {
            let next_entries = BpObj::open(&store.lists(), next_list)?.header().entry_count;
            if first.live.len() as u64 + next_entries <= self.tunables.livelist_max_entries / 2 {
                merged = Some(Livelist::read_sublist(store, next_key, next_list, stop)?);
            }
        }
        Ok(Some(CondenseRead {
            livelist: target.livelist,
            first,
            merged,
        }))
    }

    /// What the livelist reader and the sync did so far (tests).
    pub fn livelist_work_stats(&self) -> LivelistWorkStats {
        let reader = &self.livelist_reader;
        LivelistWorkStats {
            sublists_freed: reader.sublists_freed.load(Ordering::Relaxed),
            condensed: reader.condensed.load(Ordering::Relaxed),
            discarded: reader.discarded.load(Ordering::Relaxed),
            most_applied_in_one_txg: reader.most_applied_in_one_txg.load(Ordering::Relaxed),
        }
    }

    /// Tests: hold the reader's reads back before they are handed over (the window in which
    /// a livelist can change under a read), or let them go.
    pub fn hold_livelist_reads(&self, hold: bool) {
        self.livelist_reader.hold.store(hold, Ordering::Release);
        self.livelist_reader.wake();
    }

    /// Tests: reads handed over and not yet applied.
    pub fn livelist_reads_ready_count(&self) -> usize {
        let ready = self.livelist_reader.ready.lock();
        ready.deletes.len() + usize::from(ready.condense.is_some())
    }

    /// Tests: reads waiting under [`PoolCore::hold_livelist_reads`].
    pub fn held_livelist_reads(&self) -> u64 {
        self.livelist_reader.held.load(Ordering::Acquire)
    }

    /// Whether no condense work is waiting: no candidate in any clone's livelist, nothing
    /// being read or handed over (tests wait for it; it can turn false again with the next
    /// write).
    pub fn livelist_condense_idle(&self) -> bool {
        let reader = &self.livelist_reader;
        !reader.busy.load(Ordering::Acquire)
            && reader.held.load(Ordering::Acquire) == 0
            && reader.ready.lock().condense.is_none()
            && !self.dataset_list().iter().any(|(_, dataset)| {
                dataset
                    .livelist()
                    .is_some_and(|livelist| livelist.has_condense_candidates())
            })
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
