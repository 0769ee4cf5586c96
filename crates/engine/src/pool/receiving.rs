//! File systems made by a receive (`send/receive.rs`): created with an empty object set that
//! the stream fills, flagged inconsistent until the receive takes its snapshot, and destroyed
//! at import if a crash stopped the receive part-way (OpenZFS's DS_FLAG_INCONSISTENT and
//! dsl_destroy_inconsistent).
//!
//! # The hidden clone of an incremental receive (OpenZFS's `FS/%recv` and clone swap)
//! An incremental stream is applied to a clone `FS/%recv` of the stream's source snapshot S
//! (FS's newest), flagged inconsistent, never listed or mounted, while FS stays as it was and
//! usable. At the end, in one txg: the head and the clone swap contents (root, space figures,
//! deadlist; both have S as previous snapshot, so every deadlist entry keeps its meaning), and
//! the head takes the received snapshot. The clone, now holding the head's old tree, is then
//! destroyed as any clone is: the blocks it holds born after S are freed, its deadlist's
//! entries (S's blocks) are dropped. A failed receive destroys the clone and leaves FS
//! untouched; a crash at any point leaves either the old FS with a partial clone (destroyed at
//! import) or the new FS with its snapshot and the swapped-out clone (likewise destroyed).
//! Livelists of both are dropped at the swap: they describe trees the datasets no longer hold.
//!
//! # Resumable receives (`receive -s`)
//! A receive that may be resumed notes, under each transaction's hold, the stream position it
//! has applied up to (object, offset: every record before it is in); the first note of a txg
//! queues a namespace task that, in that txg's sync, writes the newest position noted for it
//! into the MOS key/value object named by the MOS directory entry `receive_resume`: key, the
//! receiving dataset's record object in decimal; value, object u64, offset u64 (little-endian),
//! then the stream's description (opaque here: `send/resume.rs`). Data and position thus
//! commit in the same txg, so after any crash the position names exactly what is on disk. A
//! dataset with a position is not destroyed at import as a partial receive; the entry goes
//! when the receive ends or is aborted, and with the dataset.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::dataset::phys::DatasetPhys;
use crate::dataset::props::RECEIVE_CLONE_NAME;
use crate::dataset::Dataset;
use crate::object::adapters::{kv_object_error, KvObject};
use crate::object::phys::ObjsetHeader;
use crate::object::{kv, Tx};
use crate::types::{Guid, ObjectId, Txg};

use super::datasets::parent_of;
pub use super::resume_tracker::ResumeTracker;
use super::snapshots::NamespaceTask;
use super::{
    kv_create, kv_set_u64, lookup_mos_directory, Pool, PoolCore, PoolError, MOS_OBJECT_DIRECTORY,
};

/// The MOS directory entry naming the resumable receives' positions.
pub const RECEIVE_RESUME_KEY: &str = "receive_resume";

/// A resumable receive's saved state: the position and the stream's description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumeState {
    pub object: u64,
    pub offset: u64,
    pub description: Vec<u8>,
}

impl Pool {
    /// Create the dataset `full_name` with an empty object set, not formatted as a file
    /// system, for a full receive to fill (its parent must exist). Durable on return.
    pub fn create_dataset_for_receive(&self, full_name: &str) -> Result<(), PoolError> {
        self.writable()?;
        let core = &self.core;
        let relative = core.new_relative_name(full_name)?.to_string();
        if relative.is_empty() {
            return Err(PoolError::DatasetExists(full_name.into()));
        }
        let _namespace = core.namespace.lock();
        if core.datasets.read().contains_key(&relative) {
            return Err(PoolError::DatasetExists(full_name.into()));
        }
        if !core.datasets.read().contains_key(parent_of(&relative)) {
            return Err(PoolError::DatasetNotFound(
                core.full_name(parent_of(&relative)),
            ));
        }
        core.create_dataset_in(&relative, &[], false)?;
        drop(_namespace);
        self.sync()?;
        Ok(())
    }

    /// Destroy every file system a receive created and did not finish (still flagged
    /// inconsistent: a crash stopped it); returns their names. Failures are logged.
    pub fn destroy_partial_receives(&self) -> Vec<String> {
        let partial: Vec<String> = self
            .core
            .dataset_list()
            .into_iter()
            .filter(|(_, dataset)| {
                dataset.phys().flags & crate::dataset::phys::DS_FLAG_INCONSISTENT != 0
            })
            .map(|(_, dataset)| dataset.name())
            // A resumable receive's is kept for `send -t` (or `receive -A`).
            .filter(|name| !matches!(self.receive_resume_state(name), Ok(Some(_))))
            .collect();
        let mut destroyed = Vec::new();
        for name in partial {
            match self.destroy_dataset(&name, true) {
                Ok(_) => {
                    log::warn!("destroyed {name}: a receive stopped by a crash left it part-way");
                    destroyed.push(name);
                }
                Err(error) => log::error!("cannot destroy the partial receive {name}: {error}"),
            }
        }
        destroyed
    }

    /// Whether `full_name` is flagged inconsistent: a receive into it has not finished.
    pub fn is_inconsistent(&self, full_name: &str) -> Result<bool, PoolError> {
        let core = &self.core;
        let dataset = core.dataset_by_relative(core.relative_name(full_name)?)?;
        Ok(dataset.phys().flags & crate::dataset::phys::DS_FLAG_INCONSISTENT != 0)
    }

    /// Start noting the position of a resumable receive into `full_name` (the file system the
    /// records are applied to); `description` is kept with each position.
    pub fn track_receive(
        &self,
        full_name: &str,
        description: Vec<u8>,
    ) -> Result<Arc<ResumeTracker>, PoolError> {
        let core = &self.core;
        Ok(Arc::new(ResumeTracker {
            dataset: core.available_dataset(core.relative_name(full_name)?)?,
            description,
            positions: Mutex::new(BTreeMap::new()),
        }))
    }

    /// Note, while holding `txg`, that a tracked receive has applied every record before
    /// (object, offset) in transactions of txgs up to `txg`.
    pub fn note_receive_position(
        &self,
        tracker: &Arc<ResumeTracker>,
        txg: Txg,
        (object, offset): (u64, u64),
    ) {
        let first_of_txg = tracker
            .positions
            .lock()
            .insert(txg, (object, offset))
            .is_none();
        if first_of_txg {
            self.core.queue_snapshot_task(
                txg,
                NamespaceTask::ReceivePosition {
                    tracker: tracker.clone(),
                },
            );
        }
    }

    /// The saved state of a resumable receive into `full_name`, if there is one.
    pub fn receive_resume_state(&self, full_name: &str) -> Result<Option<ResumeState>, PoolError> {
        let core = &self.core;
        let dataset = core.dataset_by_relative(core.relative_name(full_name)?)?;
        let Some(object) = core.receive_resume_object()? else {
            return Ok(None);
        };
        let handle = KvObject::new(&core.mos, object, None)?;
        let Some(value) = kv::lookup(&handle, dataset.object.0.to_string().as_bytes())
            .map_err(kv_object_error(object))?
        else {
            return Ok(None);
        };
        if value.len() < 16 {
            return Err(PoolError::Corrupt(format!(
                "receive position of {full_name}: {} bytes",
                value.len()
            )));
        }
        let word = |at: usize| u64::from_le_bytes(value[at..at + 8].try_into().expect("8"));
        Ok(Some(ResumeState {
            object: word(0),
            offset: word(8),
            description: value[16..].to_vec(),
        }))
    }

    /// A resumable receive into `full_name` ended (or was abandoned): forget its position.
    /// Durable on return.
    pub fn forget_receive(&self, full_name: &str) -> Result<(), PoolError> {
        let core = &self.core;
        let dataset = core.dataset_by_relative(core.relative_name(full_name)?)?;
        core.run_tasks(vec![NamespaceTask::ForgetReceive {
            dataset: dataset.object,
        }])
    }

    /// Whether the file system `full_name` changed since its newest snapshot (true without
    /// one): what decides that an incremental receive into it needs `-F`. Call after a sync.
    pub fn modified_since_newest_snapshot(&self, full_name: &str) -> Result<bool, PoolError> {
        let core = &self.core;
        let head = core.available_dataset(core.relative_name(full_name)?)?;
        core.modified_since_newest_snapshot(&head)
    }

    /// The hidden clone an incremental receive into `file_system` fills: `FS/%recv`.
    pub fn receive_clone_name(file_system: &str) -> String {
        format!("{file_system}/{RECEIVE_CLONE_NAME}")
    }

    /// Make the hidden clone `FS/%recv` of `FS@SNAP` (`from`, FS's newest snapshot) for an
    /// incremental receive, flagged inconsistent. One left by an earlier failed receive is
    /// destroyed first. Returns its full name. Durable on return.
    pub fn create_receive_clone(&self, from: &str) -> Result<String, PoolError> {
        self.writable()?;
        let core = &self.core;
        let (file_system, _) = from
            .split_once('@')
            .ok_or_else(|| PoolError::BadDatasetName(from.into(), "not a snapshot name".into()))?;
        let clone = Self::receive_clone_name(file_system);
        if self.has_dataset(&clone) {
            log::warn!("destroying {clone}, left by an earlier receive");
            self.destroy_dataset(&clone, true)?;
        }
        let _namespace = core.namespace.lock();
        let (_, origin) = core.snapshot_by_name(from)?;
        let relative = core.relative_name(&clone)?.to_string();
        core.run_tasks(vec![NamespaceTask::Clone {
            snapshot: origin,
            relative,
            properties: Vec::new(),
            for_receive: true,
        }])?;
        Ok(clone)
    }

    /// End an incremental receive into `file_system` from its snapshot `from` (short name):
    /// the head takes the hidden clone's contents and the snapshot `name` with the sender's
    /// guid and creation time, and the clone (then holding the head's old contents) is
    /// destroyed. The head must still be at `from`, unchanged, unless `force` (then it is
    /// rolled back to it first, newer snapshots destroyed). Durable on return; the caller
    /// invalidates what the kernel cached of a mounted head.
    pub fn finish_receive_clone(
        &self,
        file_system: &str,
        from: &str,
        name: &str,
        (guid, creation_time): (u64, u64),
        force: bool,
    ) -> Result<(), PoolError> {
        self.writable()?;
        let core = &self.core;
        let clone_name = Self::receive_clone_name(file_system);
        let head = core.available_dataset(core.relative_name(file_system)?)?;
        let clone = core.available_dataset(core.relative_name(&clone_name)?)?;
        let changed_since_source = |head: &Dataset| -> Result<bool, PoolError> {
            Ok(head
                .newest_snapshot()
                .is_none_or(|newest| newest.short_name() != from)
                || core.modified_since_newest_snapshot(head)?)
        };
        core.txgs.wait_synced(None)?;
        if changed_since_source(&head)? {
            if !force {
                return Err(PoolError::Refused(format!(
                    "{file_system} changed during the receive (-F rolls it back to @{from})"
                )));
            }
            self.rollback(&format!("{file_system}@{from}"), true)?;
        }
        let _namespace = core.namespace.lock();
        if head.snapshot(name).is_some() {
            return Err(PoolError::DatasetExists(format!("{file_system}@{name}")));
        }
        let head_objset = head.objset();
        let clone_objset = clone.objset();
        // No change may be in flight across the swap (as for a rollback); what either had in
        // open txgs reaches disk first.
        let _head_gate = head_objset.close_gate();
        let _clone_gate = clone_objset.close_gate();
        core.txgs.wait_synced(None)?;
        if changed_since_source(&head)? {
            return Err(PoolError::Refused(format!(
                "{file_system} changed during the receive"
            )));
        }
        core.run_tasks(vec![
            NamespaceTask::CloneSwap {
                head: head.clone(),
                clone: clone.clone(),
            },
            NamespaceTask::Create {
                head,
                name: name.to_string(),
                received: Some((Guid(guid), creation_time)),
            },
        ])?;
        drop((_head_gate, _clone_gate, _namespace));
        self.destroy_dataset(&clone_name, true)?;
        Ok(())
    }
}

impl PoolCore {
    fn receive_resume_object(&self) -> Result<Option<ObjectId>, PoolError> {
        Ok(
            lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, RECEIVE_RESUME_KEY)?
                .map(ObjectId),
        )
    }

    /// Syncing context: write the newest position `tracker` noted for this txg or earlier.
    pub(super) fn sync_receive_position(
        &self,
        tracker: &ResumeTracker,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let newest = {
            let mut positions = tracker.positions.lock();
            let later = positions.split_off(&Txg(tx.txg.0 + 1));
            let newest = positions.values().next_back().copied();
            *positions = later;
            newest
        };
        let Some((object, offset)) = newest else {
            return Ok(());
        };
        let kv_object = match self.receive_resume_object()? {
            Some(existing) => existing,
            None => {
                let created = kv_create(&self.mos, tx, &self.tunables)?;
                kv_set_u64(
                    &self.mos,
                    tx,
                    MOS_OBJECT_DIRECTORY,
                    RECEIVE_RESUME_KEY,
                    created.0,
                )?;
                created
            }
        };
        let mut value = Vec::with_capacity(16 + tracker.description.len());
        value.extend_from_slice(&object.to_le_bytes());
        value.extend_from_slice(&offset.to_le_bytes());
        value.extend_from_slice(&tracker.description);
        let mut handle = KvObject::new(&self.mos, kv_object, Some(*tx))?;
        kv::upsert(
            &mut handle,
            tracker.dataset.object.0.to_string().as_bytes(),
            &value,
        )
        .map_err(kv_object_error(kv_object))?;
        Ok(())
    }

    /// Syncing context: drop the position of a receive into `dataset` (its record object).
    pub(super) fn sync_forget_receive(&self, dataset: ObjectId, tx: &Tx) -> Result<(), PoolError> {
        let Some(kv_object) = self.receive_resume_object()? else {
            return Ok(());
        };
        let mut handle = KvObject::new(&self.mos, kv_object, Some(*tx))?;
        kv::remove(&mut handle, dataset.0.to_string().as_bytes())
            .map_err(kv_object_error(kv_object))?;
        Ok(())
    }

    /// Whether `head` changed since its newest snapshot, as OpenZFS's
    /// dsl_dataset_modified_since_snap decides: its tree is younger than the snapshot and
    /// differs from it in more than the intent-log header (which opening a file system for
    /// writing rewrites, and which is not a change of its contents).
    pub(super) fn modified_since_newest_snapshot(&self, head: &Dataset) -> Result<bool, PoolError> {
        let Some(newest) = head.newest_snapshot() else {
            return Ok(true);
        };
        let root = head.phys().root;
        let snapshot = newest.phys();
        if root.birth_logical <= snapshot.creation_txg {
            return Ok(false);
        }
        let meta_dnode = |root: &crate::block::blkptr::BlockPtr| -> Result<_, PoolError> {
            let header = ObjsetHeader::decode(&self.io.read(root)?)
                .map_err(crate::object::ObjectError::from)?;
            Ok(header.meta_dnode)
        };
        Ok(meta_dnode(&root)? != meta_dnode(&snapshot.root)?)
    }

    /// Syncing context, pass 1: `head` and `clone` (a clone of head's newest snapshot) swap
    /// contents; see the module documentation.
    pub(super) fn sync_clone_swap(
        &self,
        head: &Arc<Dataset>,
        clone: &Arc<Dataset>,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let head_before = head.phys();
        let clone_before = clone.phys();
        if head_before.prev_snapshot_object != clone_before.prev_snapshot_object {
            return Err(PoolError::Corrupt(format!(
                "{} is not a clone of {}'s newest snapshot",
                clone.name(),
                head.name()
            )));
        }
        self.drop_dataset_livelist(head, tx)?;
        self.drop_dataset_livelist(clone, tx)?;
        let take = |phys: &mut DatasetPhys, from: &DatasetPhys| {
            phys.root = from.root.clone();
            phys.referenced_bytes = from.referenced_bytes;
            phys.compressed_bytes = from.compressed_bytes;
            phys.uncompressed_bytes = from.uncompressed_bytes;
            phys.unique_bytes = from.unique_bytes;
            phys.deadlist_object = from.deadlist_object;
            // Each header names a log chain of the other dataset's: stale from now on.
            phys.log_floor = tx.txg;
        };
        let head_phys = head.update_phys(|phys| take(phys, &clone_before));
        let clone_phys = clone.update_phys(|phys| take(phys, &head_before));
        let head_deadlist = head.deadlist();
        let clone_deadlist = clone.deadlist();
        head.with_deadlist(|deadlist| *deadlist = clone_deadlist);
        clone.with_deadlist(|deadlist| *deadlist = head_deadlist);
        if let Some(source) = head.newest_snapshot() {
            // What the source holds alone follows the head's new deadlist.
            source.refresh_unique(&head.deadlist());
            self.write_dataset_record(tx, source.object, &source.phys())?;
        }
        self.write_dataset_record(tx, head.object, &head_phys)?;
        self.write_dataset_record(tx, clone.object, &clone_phys)?;
        head.objset().reset_to(&head_phys.root, tx.txg)?;
        clone.objset().reset_to(&clone_phys.root, tx.txg)?;
        Ok(())
    }
}
