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

use std::sync::Arc;

use crate::dataset::phys::DatasetPhys;
use crate::dataset::props::RECEIVE_CLONE_NAME;
use crate::dataset::Dataset;
use crate::object::phys::ObjsetHeader;
use crate::object::Tx;
use crate::types::Guid;

use super::datasets::parent_of;
use super::snapshots::NamespaceTask;
use super::{Pool, PoolCore, PoolError};

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
        let store = self.deadlist_store();
        let head_before = head.phys();
        let clone_before = clone.phys();
        if head_before.prev_snapshot_object != clone_before.prev_snapshot_object {
            return Err(PoolError::Corrupt(format!(
                "{} is not a clone of {}'s newest snapshot",
                clone.name(),
                head.name()
            )));
        }
        head.drop_livelist(&store, tx)?;
        clone.drop_livelist(&store, tx)?;
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
