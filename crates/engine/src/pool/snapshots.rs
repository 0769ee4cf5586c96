//! Snapshots: create, destroy, rollback and rename as sync tasks, and their loading at import
//! (OpenZFS dsl_dataset_snapshot_sync, dsl_destroy_snapshot_sync_impl, dsl_dataset_rollback).
//!
//! # Tasks
//! Open context validates a request, takes the namespace lock, queues one task per snapshot in
//! the txg it holds, and waits for that txg to sync. The sync (pass 1), after every dataset's
//! object set is written and its killed blocks are on its deadlist, runs the tasks in order,
//! so a snapshot holds exactly the head's tree at the end of its txg, and several snapshots
//! requested together (`snapshot -r`, or several names) are all in one txg: atomic.
//!
//! # Create (head H, newest snapshot P if any)
//! The new snapshot S takes H's record as it is (root, space, previous link, deadlist) with a
//! new guid, the txg, and unique bytes 0 (the head still holds all of it); P's next link and H's previous link point to S; H starts an empty
//! deadlist whose keys are the old ones plus P's txg (0 without P), and unique bytes 0. Cost:
//! two records, one name, one key/value object; nothing per block.
//!
//! # Destroy (snapshot S, previous P, next N: a snapshot or H)
//! N's deadlist entries at or above P's txg hold the blocks born after P that died before N:
//! nothing holds them any more, and their lists go whole to the pool's free list, freed in the
//! background (`background_free.rs`). N's other entries (blocks P still holds) merge into S's
//! deadlist, a sub-list per entry, and that becomes N's. P's unique bytes grow by N's entries
//! born after P's own previous snapshot; links skip S. When N is a snapshot, S's key in H's
//! deadlist is removed, its entry merged into the one below (the two intervals are one now),
//! so H's keys are its live snapshots' and do not grow with every snapshot ever taken
//! (OpenZFS dsl_deadlist_remove_key). Cost: per deadlist entry.
//!
//! # Rollback (H to its newest snapshot S)
//! H's tree becomes S's: the blocks H holds born after S are queued for background freeing
//! (the destroy queue, walking H's old tree above S's txg); H's deadlist holds blocks that are
//! live again, so its lists are dropped without freeing anything (and S's unique bytes, which
//! counted those born after S's previous snapshot, drop back); H's object set is reset to
//! S's root, its dirty changes discarded. Open context holds the object set's gate meanwhile, so
//! no file-system change is half applied across the reset, and first syncs what the head
//! changed before the gate closed, so no block of the head is born in the rollback's txg (the
//! free of the head's tree, from its synced root, would miss it). S's unique bytes are
//! recomputed from H's emptied deadlist (the blocks they counted are H's again).
//!
//! # Import
//! A head's snapshots are found from its previous-snapshot link backwards, each record checked
//! (a snapshot of this directory, linked both ways, txgs decreasing); their names come from the
//! head's snapshot-names object. A chain that does not check out makes the dataset's load fail
//! with the reason (reported as damage, the rest of the pool loads).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::block::blkptr::{Compression, ObjectType};
use crate::dataset::deadlist::{Deadlist, DeadlistStore, DeadlistSummary};
use crate::dataset::phys::{DatasetPhys, DS_FLAG_SNAPSHOT};
use crate::dataset::props::validate_name_component;
use crate::dataset::{Dataset, Snapshot};
use crate::object::adapters::{create_kv_object, kv_entries, kv_object_error, KvObject};
use crate::object::bpobj::BpSpace;
use crate::object::{kv, Tx};
use crate::types::{Guid, ObjectId, Txg};

use super::{mos_props, now_seconds, Pool, PoolCore, PoolError};

/// A change of the namespace (snapshots, renames), carried out in syncing context.
pub(super) enum NamespaceTask {
    Promote {
        clone: Arc<Dataset>,
        origin_head: Arc<Dataset>,
        origin: Arc<Snapshot>,
    },
    Clone {
        snapshot: Arc<Snapshot>,
        relative: String,
        properties: Vec<(crate::dataset::props::Property, String)>,
        /// A receive's hidden clone: flagged inconsistent until the receive ends.
        for_receive: bool,
    },
    /// A resumable receive's position as of this txg (`pool/receiving.rs`).
    ReceivePosition {
        tracker: Arc<super::resume_tracker::ResumeTracker>,
    },
    /// A resumable receive ended: its position goes.
    ForgetReceive {
        dataset: ObjectId,
    },
    /// The end of an incremental receive: the head takes the hidden clone's contents and the
    /// clone the head's (see `pool/receiving.rs`).
    CloneSwap {
        head: Arc<Dataset>,
        clone: Arc<Dataset>,
    },
    RenameDataset {
        dataset: Arc<Dataset>,
        old: String,
        new: String,
    },
    Create {
        head: Arc<Dataset>,
        name: String,
        /// A received snapshot keeps its sender's guid and creation time.
        received: Option<(Guid, u64)>,
    },
    Destroy {
        head: Arc<Dataset>,
        snapshot: Arc<Snapshot>,
    },
    /// A bookmark of a head: guid, creation txg and time of its snapshot.
    Bookmark {
        head: Arc<Dataset>,
        name: String,
        values: [u64; 3],
    },
    DestroyBookmark {
        head: ObjectId,
        name: String,
    },
    Rollback {
        head: Arc<Dataset>,
    },
    Rename {
        head: Arc<Dataset>,
        snapshot: Arc<Snapshot>,
        name: String,
    },
    /// A user hold (`pool/user_holds.rs`).
    Hold {
        snapshot: Arc<Snapshot>,
        tag: String,
        time: u64,
    },
    Release {
        snapshot: Arc<Snapshot>,
        tag: String,
    },
    /// `destroy -d` of a snapshot with holds or clones: it is marked to go with them.
    DeferDestroy {
        snapshot: Arc<Snapshot>,
    },
}

/// A snapshot's figures, for `tarn list -t snapshot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// `POOL/fs@name`.
    pub name: String,
    /// Bytes only this snapshot holds (zfs's `used` of a snapshot).
    pub used: u64,
    pub referenced: u64,
    pub referenced_compressed: u64,
    pub referenced_uncompressed: u64,
    /// Bytes written between the previous snapshot and this one.
    pub written: u64,
    pub creation_time: u64,
    pub creation_txg: u64,
    pub guid: u64,
    /// The MOS object of the snapshot's record: unique in the pool while it exists, stable
    /// across imports (`.zfs/snapshot` inode numbers are built from it).
    pub object: u64,
    /// User holds on it (zfs's `userrefs`).
    pub user_refs: u64,
    /// Marked to go with its last hold and clone (`destroy -d`).
    pub defer_destroy: bool,
    /// File systems cloned from it (full names).
    pub clones: Vec<String>,
}

/// A dataset's records as stored, for `tarn debug dataset` (zdb -dddd).
#[derive(Clone, Debug)]
pub struct DatasetRecords {
    pub name: String,
    pub object: u64,
    pub phys: DatasetPhys,
    /// The directory record (heads only).
    pub dir: Option<crate::dataset::phys::DatasetDirPhys>,
    /// Deadlist entries: (key txg, list object, space).
    pub deadlist: Vec<(u64, u64, BpSpace)>,
    /// Snapshots (heads only): (name, object, txg).
    pub snapshots: Vec<(String, u64, u64)>,
    /// Livelist sub-lists (clone heads that keep one).
    pub livelist: Vec<crate::dataset::livelist::Sublist>,
}

/// `FS@SNAP` split and checked.
fn split_snapshot_name(full: &str) -> Result<(&str, &str), PoolError> {
    let Some((dataset, snapshot)) = full.split_once('@') else {
        return Err(PoolError::BadDatasetName(
            full.into(),
            "a snapshot name has the form FILESYSTEM@SNAPSHOT".into(),
        ));
    };
    validate_name_component(snapshot).map_err(|why| PoolError::BadDatasetName(full.into(), why))?;
    Ok((dataset, snapshot))
}

impl PoolCore {
    /// The checks of a file system's rename from `old` to `new` (full names), made under the
    /// namespace lock: the dataset, its relative name and the new relative name when the
    /// rename may go ahead.
    fn dataset_rename_plan(
        &self,
        old: &str,
        new: &str,
    ) -> Result<(Arc<Dataset>, String, String), PoolError> {
        self.check_space(
            super::admission::SpaceCheck::Reserved,
            1,
            &format!("rename {old} to {new}"),
        )?;
        let old_relative = self.relative_name(old)?.to_string();
        if old_relative.is_empty() {
            return Err(PoolError::Refused(format!(
                "cannot rename {old}: it is the pool's root file system (import the pool under another name instead)"
            )));
        }
        let new_relative = self.new_relative_name(new).map_err(|error| match error {
            PoolError::DatasetNotFound(_) => PoolError::Refused(format!(
                "cannot rename {old} to {new}: a file system stays in its pool"
            )),
            other => other,
        })?;
        if new_relative.is_empty() || self.datasets.read().contains_key(new_relative) {
            return Err(PoolError::DatasetExists(new.into()));
        }
        if new_relative.starts_with(&format!("{old_relative}/")) {
            return Err(PoolError::Refused(format!(
                "cannot rename {old} to {new}: a file system cannot move below itself"
            )));
        }
        let dataset = self.available_dataset(&old_relative)?;
        let new_parent = new_relative.rfind('/').map_or("", |at| &new_relative[..at]);
        self.available_dataset(new_parent)
            .map_err(|_| PoolError::DatasetNotFound(self.full_name(new_parent)))?;
        // What the dataset charges moves to the new parent's side (`limits.rs`).
        self.check_transfer(
            super::datasets::parent_of(&old_relative),
            new_parent,
            dataset
                .limits
                .charged()
                .max(dataset.limits.settings().reservation),
            &format!("rename {old} to {new}"),
        )?;
        Ok((dataset, old_relative, new_relative.to_string()))
    }

    pub fn deadlist_store(&self) -> DeadlistStore<'_> {
        DeadlistStore {
            mos: &self.mos,
            kv_props: mos_props(
                ObjectType::KeyValue,
                self.tunables.dnode_block_size.max(4096),
                &self.tunables,
                Compression::Lz4,
            ),
            list_props: mos_props(
                ObjectType::BlockPtrList,
                16 << 10,
                &self.tunables,
                Compression::Lz4,
            ),
            write_totals: self
                .config
                .lock()
                .features
                .contains_key(super::features::DEADLIST_TOTALS_FEATURE),
        }
    }

    pub(super) fn write_dataset_record(
        &self,
        tx: &Tx,
        object: ObjectId,
        phys: &DatasetPhys,
    ) -> Result<(), PoolError> {
        self.mos
            .set_bonus(tx, object, ObjectType::Dataset, &phys.encode())?;
        Ok(())
    }

    /// Import: load a head's deadlist and snapshots (see the module documentation).
    pub(super) fn load_snapshots(&self, head: &Dataset) -> Result<(), PoolError> {
        let phys = head.phys();
        let store = self.deadlist_store();
        let corrupt = |what: String| PoolError::Corrupt(format!("dataset {}: {what}", head.name()));
        let mut names: HashMap<u64, String> = HashMap::new();
        if phys.snapshot_names_object.0 != 0 {
            for entry in kv_entries(&self.mos, phys.snapshot_names_object)? {
                let name = String::from_utf8(entry.key.clone())
                    .ok()
                    .filter(|name| validate_name_component(name).is_ok())
                    .ok_or_else(|| {
                        corrupt(format!(
                            "snapshot name {:?}",
                            String::from_utf8_lossy(&entry.key)
                        ))
                    })?;
                let object = <[u8; 8]>::try_from(entry.value.as_slice())
                    .map_err(|_| corrupt(format!("snapshot {name}: not an object number")))?;
                names.insert(u64::from_le_bytes(object), name);
            }
        }
        let mut snapshots = Vec::new();
        // A clone's chain ends at its origin, a snapshot of another file system. Its
        // snapshots' space is split at the origin by key: their deadlists are read whole; any
        // other snapshot's only for its header (see `DeadlistSummary`).
        let origin = head.dir().origin_snapshot_object;
        let whole = head.origin_txg().0 != 0;
        let (mut object, mut next_object, mut below) = (
            phys.prev_snapshot_object,
            head.object,
            phys.prev_snapshot_txg,
        );
        while object.0 != 0 && object != origin {
            if snapshots.len() > names.len() {
                return Err(corrupt(
                    "the snapshot chain is longer than the names object".into(),
                ));
            }
            let snap = DatasetPhys::decode(&self.mos.bonus(object)?)
                .map_err(|error| corrupt(format!("snapshot record {object}: {error}")))?;
            let name = names
                .get(&object.0)
                .ok_or_else(|| corrupt(format!("snapshot record {object} has no name")))?;
            if !snap.is_snapshot()
                || snap.dir_object != head.dir_object
                || snap.next_snapshot_object != next_object
                || snap.creation_txg != below
                || (snap.prev_snapshot_object.0 != 0 && snap.prev_snapshot_txg >= snap.creation_txg)
            {
                return Err(corrupt(format!(
                    "snapshot record {object} ({name}) is not linked as the chain says"
                )));
            }
            let deadlist = DeadlistSummary::load(&store, snap.deadlist_object, whole)?;
            next_object = object;
            object = snap.prev_snapshot_object;
            below = snap.prev_snapshot_txg;
            snapshots.push(Snapshot::new(name.clone(), next_object, snap, deadlist));
        }
        if snapshots.len() != names.len() {
            return Err(corrupt(format!(
                "{} snapshot names but {} snapshots in the chain",
                names.len(),
                snapshots.len()
            )));
        }
        snapshots.reverse();
        let deadlist = Deadlist::load(&store, phys.deadlist_object)?;
        head.set_snapshot_state(deadlist, snapshots);
        Ok(())
    }

    /// Queue a snapshot task for the txg `txg`.
    pub(super) fn queue_snapshot_task(&self, txg: Txg, task: NamespaceTask) {
        self.snapshot_tasks.lock().push((txg, task));
    }

    /// Open context (namespace lock held, everything checked): queue `tasks` for the txg
    /// held now, in order, and return when that txg is on disk.
    pub(super) fn run_tasks(&self, tasks: Vec<NamespaceTask>) -> Result<(), PoolError> {
        let hold = self.txgs.assign()?;
        let txg = hold.txg();
        for task in tasks {
            self.queue_snapshot_task(txg, task);
        }
        drop(hold);
        self.txgs.wait_synced(Some(txg))?;
        Ok(())
    }

    /// Whether snapshot tasks wait for `txg` (the sync must not be skipped).
    pub(super) fn has_snapshot_tasks(&self, txg: Txg) -> bool {
        self.snapshot_tasks
            .lock()
            .iter()
            .any(|(when, _)| *when <= txg)
    }

    /// Syncing context, pass 1: run the snapshot tasks of `txg` in order.
    pub(super) fn sync_snapshot_tasks(&self, txg: Txg) -> Result<bool, PoolError> {
        let tasks: Vec<NamespaceTask> = {
            let mut pending = self.snapshot_tasks.lock();
            let (now, later): (Vec<_>, Vec<_>) =
                pending.drain(..).partition(|(when, _)| *when <= txg);
            *pending = later;
            now.into_iter().map(|(_, task)| task).collect()
        };
        let tx = Tx::syncing(txg);
        for task in &tasks {
            match task {
                NamespaceTask::Promote {
                    clone,
                    origin_head,
                    origin,
                } => self.sync_promote(clone, origin_head, origin, &tx)?,
                NamespaceTask::Clone {
                    snapshot,
                    relative,
                    properties,
                    for_receive,
                } => self.sync_create_clone(snapshot, relative, properties, *for_receive, &tx)?,
                NamespaceTask::CloneSwap { head, clone } => {
                    self.sync_clone_swap(head, clone, &tx)?
                }
                NamespaceTask::ReceivePosition { tracker } => {
                    self.sync_receive_position(tracker, &tx)?
                }
                NamespaceTask::ForgetReceive { dataset } => {
                    self.sync_forget_receive(*dataset, &tx)?
                }
                NamespaceTask::RenameDataset { dataset, old, new } => {
                    self.sync_rename_dataset(dataset, old, new, &tx)?
                }
                NamespaceTask::Create {
                    head,
                    name,
                    received,
                } => self.sync_create_snapshot(head, name, *received, &tx)?,
                NamespaceTask::Destroy { head, snapshot } => {
                    self.sync_destroy_snapshot(head, snapshot, &tx)?
                }
                NamespaceTask::Bookmark { head, name, values } => {
                    self.sync_create_bookmark(head, name, *values, &tx)?
                }
                NamespaceTask::DestroyBookmark { head, name } => {
                    self.sync_destroy_bookmarks(*head, Some(name), &tx)?
                }
                NamespaceTask::Rollback { head } => self.sync_rollback(head, &tx)?,
                NamespaceTask::Rename {
                    head,
                    snapshot,
                    name,
                } => self.sync_rename_snapshot(head, snapshot, name, &tx)?,
                NamespaceTask::Hold {
                    snapshot,
                    tag,
                    time,
                } => self.sync_hold(snapshot, tag, *time, &tx)?,
                NamespaceTask::Release { snapshot, tag } => {
                    self.sync_release(snapshot, tag, &tx)?
                }
                NamespaceTask::DeferDestroy { snapshot } => {
                    self.sync_defer_destroy(snapshot, &tx)?
                }
            }
        }
        Ok(!tasks.is_empty())
    }

    fn sync_create_snapshot(
        &self,
        head: &Arc<Dataset>,
        name: &str,
        received: Option<(Guid, u64)>,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let store = self.deadlist_store();
        let head_phys = head.phys();
        let mut snapshot_deadlist = head.deadlist();
        if head_phys.prev_snapshot_object.0 != 0 {
            // Saved so that the snapshot's record can name it.
            snapshot_deadlist.save(&store, tx)?;
        }
        let snapshot_phys = DatasetPhys {
            next_snapshot_object: head.object,
            snapshot_names_object: ObjectId(0),
            creation_time: received.map_or_else(now_seconds, |(_, time)| time),
            creation_txg: tx.txg,
            deadlist_object: snapshot_deadlist.object(),
            // Nothing is the snapshot's alone until the head frees what it shares.
            unique_bytes: 0,
            guid: received.map_or_else(Guid::random, |(guid, _)| guid),
            flags: DS_FLAG_SNAPSHOT,
            clone_count: 0,
            next_clones_object: ObjectId(0),
            user_holds_object: ObjectId(0),
            snapshot_props_object: ObjectId(0),
            livelist_object: ObjectId(0),
            log_floor: Txg(0),
            ..head_phys.clone()
        };
        let object = self.mos.create_object(
            tx,
            mos_props(ObjectType::Dataset, 512, &self.tunables, Compression::Lz4),
            ObjectType::Dataset,
            &snapshot_phys.encode(),
        )?;
        // A catch-up walk the scan owes the head is owed by the snapshot too (pool/scan.rs).
        self.scan_snapshot_created(head.object, object);
        if let Some(previous) = head.newest_snapshot() {
            let phys = previous.update_phys(|phys| phys.next_snapshot_object = object);
            self.write_dataset_record(tx, previous.object, &phys)?;
        }
        let mut keys: Vec<Txg> = snapshot_deadlist.keys().collect();
        keys.push(head_phys.prev_snapshot_txg);
        let mut head_deadlist = Deadlist::with_keys(keys);
        let head_deadlist_object = head_deadlist.save(&store, tx)?;
        let names_object = match head_phys.snapshot_names_object {
            ObjectId(0) => create_kv_object(
                &self.mos,
                tx,
                mos_props(ObjectType::KeyValue, 4096, &self.tunables, Compression::Lz4),
            )?,
            existing => existing,
        };
        {
            let mut handle = KvObject::new(&self.mos, names_object, Some(*tx))?;
            kv::insert(&mut handle, name.as_bytes(), &object.0.to_le_bytes())
                .map_err(kv_object_error(names_object))?;
        }
        let phys = head.update_phys(|phys| {
            if received.is_some() {
                // A received file system is whole once its snapshot is taken.
                phys.flags &= !crate::dataset::phys::DS_FLAG_INCONSISTENT;
            }
            phys.prev_snapshot_object = object;
            phys.prev_snapshot_txg = tx.txg;
            phys.unique_bytes = 0;
            phys.deadlist_object = head_deadlist_object;
            phys.snapshot_names_object = names_object;
        });
        self.write_dataset_record(tx, head.object, &phys)?;
        head.with_deadlist(|deadlist| *deadlist = head_deadlist);
        let mut snapshots = head.snapshots();
        snapshots.push(Snapshot::new(
            name.to_string(),
            object,
            snapshot_phys,
            DeadlistSummary::of(&snapshot_deadlist),
        ));
        head.set_snapshots(snapshots);
        Ok(())
    }

    fn sync_destroy_snapshot(
        &self,
        head: &Arc<Dataset>,
        snapshot: &Arc<Snapshot>,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let store = self.deadlist_store();
        let mut snapshots = head.snapshots();
        let index = snapshots
            .iter()
            .position(|candidate| Arc::ptr_eq(candidate, snapshot))
            .ok_or_else(|| {
                PoolError::Corrupt(format!(
                    "snapshot {} is not in its chain",
                    snapshot.short_name()
                ))
            })?;
        // Readers of its object set (`.zfs/snapshot`) stop before any block is freed.
        snapshot.mark_destroyed();
        let previous = index.checked_sub(1).map(|at| snapshots[at].clone());
        let next = snapshots.get(index + 1).cloned();
        // A clone's oldest snapshot has the origin before it: the blocks born at or before the
        // origin's txg are the origin's, never freed here.
        let origin = self.origin_of(head).map(|(_, origin)| origin);
        let before = previous.as_ref().or(origin.as_ref());
        let previous_txg = before.map_or(Txg(0), |previous| previous.txg());
        let (previous_object, next_object) = (
            before.map_or(ObjectId(0), |previous| previous.object),
            next.as_ref().map_or(head.object, |next| next.object),
        );
        // A scan that has passed the next dataset must still walk what it now holds of this
        // snapshot's interval (pool/scan.rs).
        self.scan_snapshot_destroyed(
            tx.txg,
            snapshot.object,
            previous_txg,
            snapshot.txg(),
            next_object,
        );

        let mut next_deadlist = match &next {
            Some(next) => next.deadlist(&store)?,
            None => head.deadlist(),
        };
        // Born after P and dead in N: nothing holds them any more.
        let freed = next_deadlist.take_from(previous_txg);
        let freed_lists: Vec<ObjectId> = freed
            .iter()
            .filter(|(_, entry)| entry.list.0 != 0)
            .map(|(_, entry)| entry.list)
            .collect();
        self.queue_free_lists(tx, &freed_lists)?;
        // Born in P's own interval and dead in N: now P's alone.
        if let Some(previous) = &previous {
            let previous_prev_txg = previous.phys().prev_snapshot_txg;
            let gained = next_deadlist
                .space_range(previous_prev_txg, previous_txg)
                .used_bytes;
            let phys = previous.update_phys(|phys| {
                phys.unique_bytes += gained;
                phys.next_snapshot_object = next_object;
            });
            self.write_dataset_record(tx, previous.object, &phys)?;
        }
        // N's other entries (blocks P still holds) join S's deadlist, which becomes N's.
        let mut merged = snapshot.deadlist(&store)?;
        for (key, entry) in next_deadlist.entries().collect::<Vec<_>>() {
            merged.merge(&store, tx, key, entry)?;
        }
        if before.is_some() {
            merged.add_key(Txg(0));
        }
        let merged_object = if merged.object().0 == 0 && merged.keys().next().is_none() {
            ObjectId(0)
        } else {
            merged.save(&store, tx)?
        };
        // N's old key/value object goes; its lists now belong to the merged deadlist or the
        // free list.
        next_deadlist.destroy(&store, tx, false)?;

        match &next {
            Some(next) => {
                next.set_deadlist(&merged);
                next.update_phys(|phys| {
                    phys.prev_snapshot_object = previous_object;
                    phys.prev_snapshot_txg = previous_txg;
                });
                // N's unique bytes: blocks born after its new previous snapshot that the
                // dataset after N no longer holds.
                let after_next = match snapshots.get(index + 2) {
                    Some(after) => after.deadlist(&store)?,
                    None => head.deadlist(),
                };
                next.refresh_unique(&after_next);
                self.write_dataset_record(tx, next.object, &next.phys())?;
                // S's key goes from the head's deadlist, the one that keeps taking blocks
                // (the later snapshots' deadlists are frozen; a stale key there is harmless),
                // and from the heads of the clones that inherited it.
                self.remove_deadlist_key(head, snapshot.txg(), &store, tx)?;
                self.remove_clones_deadlist_key(head, snapshot.txg(), &store, tx)?;
            }
            None => {
                let previous_referenced =
                    before.map_or(0, |previous| previous.phys().referenced_bytes);
                let dead = merged.total().used_bytes;
                head.with_deadlist(|deadlist| *deadlist = merged);
                let phys = head.update_phys(|phys| {
                    phys.prev_snapshot_object = previous_object;
                    phys.prev_snapshot_txg = previous_txg;
                    phys.deadlist_object = merged_object;
                    // Live blocks not held by P (dsl_dataset_recalc_head_uniq).
                    phys.unique_bytes = phys
                        .referenced_bytes
                        .saturating_sub(previous_referenced.saturating_sub(dead));
                });
                self.write_dataset_record(tx, head.object, &phys)?;
            }
        }
        // The record and the name go.
        let names_object = head.phys().snapshot_names_object;
        {
            let mut handle = KvObject::new(&self.mos, names_object, Some(*tx))?;
            if !kv::remove(&mut handle, snapshot.short_name().as_bytes())
                .map_err(kv_object_error(names_object))?
            {
                return Err(PoolError::Corrupt(format!(
                    "snapshot {} is missing from the names object",
                    snapshot.short_name()
                )));
            }
        }
        self.sync_forget_holds(snapshot, tx)?;
        self.mos.remove_object(tx, snapshot.object)?;
        snapshots.remove(index);
        head.set_snapshots(snapshots);
        Ok(())
    }

    /// Syncing context: remove key `key` (a destroyed snapshot's txg) from `head`'s deadlist
    /// and write its record.
    fn remove_deadlist_key(
        &self,
        head: &Dataset,
        key: Txg,
        store: &DeadlistStore,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let object = head.with_deadlist(|deadlist| {
            deadlist.remove_key(store, tx, key)?;
            deadlist.save(store, tx)
        })?;
        let phys = head.update_phys(|phys| phys.deadlist_object = object);
        self.write_dataset_record(tx, head.object, &phys)
    }

    /// Syncing context: remove key `key` (the txg of a snapshot of `head` being destroyed)
    /// from the deadlists of the clones made of `head`'s later snapshots, which inherited it,
    /// and of their clones in turn (OpenZFS dsl_dataset_remove_clones_key). A clone of an
    /// older snapshot never had it. One pass over the datasets per generation of clones.
    fn remove_clones_deadlist_key(
        &self,
        head: &Dataset,
        key: Txg,
        store: &DeadlistStore,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let datasets = self.dataset_list();
        let mut lineages = vec![head.dir_object];
        let mut next = 0;
        while let Some(&lineage) = lineages.get(next) {
            next += 1;
            for (_, clone) in &datasets {
                let Some(origin) = clone.origin() else {
                    continue;
                };
                if origin.phys().dir_object == lineage && origin.txg() > key {
                    self.remove_deadlist_key(clone, key, store, tx)?;
                    lineages.push(clone.dir_object);
                }
            }
        }
        Ok(())
    }

    fn sync_rollback(&self, head: &Arc<Dataset>, tx: &Tx) -> Result<(), PoolError> {
        let store = self.deadlist_store();
        let snapshot = head.newest_snapshot().ok_or_else(|| {
            PoolError::Corrupt(format!("rollback of {} without a snapshot", head.name()))
        })?;
        let target = snapshot.phys();
        let phys = head.phys();
        let objset = head.objset();
        // What the head holds born after the snapshot: its unique bytes, and the compressed
        // and logical figures by the same difference.
        let mut deadlist = head.deadlist();
        let dead = deadlist.total();
        let born_after = BpSpace {
            used_bytes: phys.unique_bytes,
            compressed_bytes: (phys.compressed_bytes + dead.compressed_bytes)
                .saturating_sub(target.compressed_bytes),
            uncompressed_bytes: (phys.uncompressed_bytes + dead.uncompressed_bytes)
                .saturating_sub(target.uncompressed_bytes),
        };
        // The head's root as this txg wrote it (the record's), not the object set's last
        // synced one: this txg's sync may already have replaced (and freed) parts of that.
        self.enqueue_tree_free(tx, &phys.root, target.creation_txg, born_after)?;
        let dropped = deadlist.take_all_lists();
        Deadlist::drop_lists(&store, tx, &dropped)?;
        let deadlist_object = deadlist.save(&store, tx)?;
        // Blocks the snapshot held alone are the head's again.
        snapshot.refresh_unique(&deadlist);
        self.write_dataset_record(tx, snapshot.object, &snapshot.phys())?;
        head.with_deadlist(|current| *current = deadlist);
        head.update_phys(|phys| {
            phys.root = target.root.clone();
            // The snapshot's header names the log chain of its time: stale from now on.
            phys.log_floor = tx.txg;
            phys.referenced_bytes = target.referenced_bytes;
            phys.compressed_bytes = target.compressed_bytes;
            phys.uncompressed_bytes = target.uncompressed_bytes;
            phys.unique_bytes = 0;
            phys.deadlist_object = deadlist_object;
        });
        // The head's tree is replaced wholesale, not block by block: its livelist no longer
        // describes it.
        self.drop_dataset_livelist(head, tx)?;
        self.write_dataset_record(tx, head.object, &head.phys())?;
        objset.reset_to(&target.root, tx.txg)?;
        Ok(())
    }

    fn sync_rename_snapshot(
        &self,
        head: &Arc<Dataset>,
        snapshot: &Arc<Snapshot>,
        name: &str,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let names_object = head.phys().snapshot_names_object;
        let mut handle = KvObject::new(&self.mos, names_object, Some(*tx))?;
        let old = snapshot.short_name();
        if !kv::remove(&mut handle, old.as_bytes()).map_err(kv_object_error(names_object))? {
            return Err(PoolError::Corrupt(format!(
                "snapshot {old} is missing from the names object"
            )));
        }
        kv::insert(
            &mut handle,
            name.as_bytes(),
            &snapshot.object.0.to_le_bytes(),
        )
        .map_err(kv_object_error(names_object))?;
        snapshot.set_short_name(name.to_string());
        Ok(())
    }

    /// Move a dataset's name from `old` to `new` (relative names): out of the old parent's
    /// children, into the new parent's, the directory's parent link, and the table (the
    /// dataset and its descendants).
    fn sync_rename_dataset(
        &self,
        dataset: &Arc<Dataset>,
        old: &str,
        new: &str,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let leaf = |name: &str| name.rsplit('/').next().unwrap_or(name).to_string();
        let parent = |name: &str| name.rfind('/').map_or("", |at| &name[..at]).to_string();
        let old_parent = self.dataset_by_relative(&parent(old))?;
        let new_parent = self.dataset_by_relative(&parent(new))?;
        {
            let object = old_parent.dir().children_object;
            let mut handle = KvObject::new(&self.mos, object, Some(*tx))?;
            if !kv::remove(&mut handle, leaf(old).as_bytes()).map_err(kv_object_error(object))? {
                return Err(PoolError::Corrupt(format!(
                    "dataset {} is missing from its parent's children",
                    dataset.name()
                )));
            }
        }
        {
            let object = new_parent.dir().children_object;
            let mut handle = KvObject::new(&self.mos, object, Some(*tx))?;
            kv::insert(
                &mut handle,
                leaf(new).as_bytes(),
                &dataset.dir_object.0.to_le_bytes(),
            )
            .map_err(kv_object_error(object))?;
        }
        if old_parent.dir_object != new_parent.dir_object {
            let dir = dataset.update_dir(|dir| dir.parent_dir_object = new_parent.dir_object);
            self.mos.set_bonus(
                tx,
                dataset.dir_object,
                ObjectType::DatasetDir,
                &dir.encode(),
            )?;
        }
        let mut table = self.datasets.write();
        let moved: Vec<String> = table
            .keys()
            .filter(|name| *name == old || name.starts_with(&format!("{old}/")))
            .cloned()
            .collect();
        for name in moved {
            let entry = table.remove(&name).expect("listed above");
            let renamed = format!("{new}{}", &name[old.len()..]);
            entry.set_name(self.full_name(&renamed));
            table.insert(renamed, entry);
        }
        drop(table);
        self.relink_limits();
        Ok(())
    }

    /// The head and snapshot of `FS@SNAP`.
    pub(super) fn snapshot_by_name(
        &self,
        full: &str,
    ) -> Result<(Arc<Dataset>, Arc<Snapshot>), PoolError> {
        let (dataset, name) = split_snapshot_name(full)?;
        let relative = self.relative_name(dataset)?;
        let head = self.dataset_by_relative(relative)?;
        let snapshot = head
            .snapshot(name)
            .ok_or_else(|| PoolError::DatasetNotFound(full.into()))?;
        Ok((head, snapshot))
    }

    fn snapshot_info(
        &self,
        head: &Dataset,
        snapshots: &[Arc<Snapshot>],
        index: usize,
    ) -> SnapshotInfo {
        let snapshot = &snapshots[index];
        let phys = snapshot.phys();
        // Since the previous snapshot, or for a clone's first since its origin.
        let previous = match index.checked_sub(1) {
            Some(previous) => Some(snapshots[previous].clone()),
            None => self.origin_of(head).map(|(_, origin)| origin),
        };
        let written = match previous {
            Some(previous) => (phys.referenced_bytes + snapshot.deadlist_total().used_bytes)
                .saturating_sub(previous.phys().referenced_bytes),
            None => phys.referenced_bytes,
        };
        SnapshotInfo {
            name: format!("{}@{}", head.name(), snapshot.short_name()),
            used: phys.unique_bytes,
            referenced: phys.referenced_bytes,
            referenced_compressed: phys.compressed_bytes,
            referenced_uncompressed: phys.uncompressed_bytes,
            written,
            creation_time: phys.creation_time,
            creation_txg: phys.creation_txg.0,
            guid: phys.guid.0,
            object: snapshot.object.0,
            user_refs: if phys.user_holds_object.0 == 0 {
                0
            } else {
                self.user_refs(snapshot)
            },
            defer_destroy: phys.is_defer_destroy(),
            clones: if phys.clone_count == 0 {
                Vec::new()
            } else {
                self.dataset_list()
                    .into_iter()
                    .filter(|(_, dataset)| dataset.dir().origin_snapshot_object == snapshot.object)
                    .map(|(_, dataset)| dataset.name())
                    .collect()
            },
        }
    }

    /// Bytes a head wrote since its newest snapshot (zfs's `written`).
    pub(super) fn head_written(&self, head: &Dataset) -> u64 {
        let phys = head.phys();
        // Since the newest snapshot, or for a clone without one since its origin (OpenZFS
        // counts a clone's `written` from its origin, not from nothing).
        let previous = head
            .newest_snapshot()
            .or_else(|| self.origin_of(head).map(|(_, origin)| origin));
        match previous {
            Some(previous) => (phys.referenced_bytes + head.deadlist_total().used_bytes)
                .saturating_sub(previous.phys().referenced_bytes),
            None => phys.referenced_bytes,
        }
    }
}

impl Pool {
    /// Take snapshots `FS@SNAP` (with `recursive`, of every descendant of each FS too, by the
    /// same name), all in one txg. Everything is checked first: one bad name changes nothing.
    /// Returns the snapshots' full names. Durable on return.
    pub fn create_snapshots(
        &self,
        names: &[String],
        recursive: bool,
    ) -> Result<Vec<String>, PoolError> {
        self.writable()?;
        let core = &self.core;
        let _namespace = core.namespace.lock();
        let mut planned: BTreeMap<String, (Arc<Dataset>, String)> = BTreeMap::new();
        for full in names {
            let (dataset, name) = split_snapshot_name(full)?;
            if full.len() > crate::dataset::props::DATASET_NAME_MAX {
                return Err(PoolError::BadDatasetName(
                    full.clone(),
                    "name too long".into(),
                ));
            }
            let relative = core.relative_name(dataset)?.to_string();
            let mut targets = vec![relative.clone()];
            if recursive {
                targets.extend(core.descendants_of(&relative));
            }
            for target in targets {
                let head = core.available_dataset(&target)?;
                let snapshot_name = format!("{}@{name}", head.name());
                if head.snapshot(name).is_some() || planned.contains_key(&snapshot_name) {
                    return Err(PoolError::DatasetExists(snapshot_name));
                }
                planned.insert(snapshot_name, (head, name.to_string()));
            }
        }
        let what = format!("create snapshot {}", names.join(", "));
        core.check_space(super::admission::SpaceCheck::Normal, planned.len(), &what)?;
        let heads: Vec<Arc<Dataset>> = planned.values().map(|(head, _)| head.clone()).collect();
        core.check_snapshot_reservations(&heads, &what)?;
        core.run_tasks(
            planned
                .values()
                .map(|(head, name)| NamespaceTask::Create {
                    head: head.clone(),
                    name: name.clone(),
                    received: None,
                })
                .collect(),
        )?;
        Ok(planned.into_keys().collect())
    }

    /// Take the snapshot `FS@SNAP` that ends a receive, with the sender's guid and creation
    /// time (so that a later incremental stream from it finds it by guid). Durable on return.
    pub fn create_received_snapshot(
        &self,
        full: &str,
        guid: u64,
        creation_time: u64,
    ) -> Result<(), PoolError> {
        self.writable()?;
        let core = &self.core;
        let _namespace = core.namespace.lock();
        let (dataset, name) = split_snapshot_name(full)?;
        let head = core.available_dataset(core.relative_name(dataset)?)?;
        if head.snapshot(name).is_some() {
            return Err(PoolError::DatasetExists(full.to_string()));
        }
        if guid == 0 {
            return Err(PoolError::Refused(format!(
                "{full}: a received snapshot needs a guid"
            )));
        }
        core.run_tasks(vec![NamespaceTask::Create {
            head,
            name: name.to_string(),
            received: Some((Guid(guid), creation_time)),
        }])
    }

    /// The snapshots a destroy request names: `FS@A`, `FS@A,B`, ranges `FS@A%B` (A to B
    /// inclusive, either end empty for the first or last), and with `recursive` the
    /// snapshots of the same names in every descendant. Oldest first per file system.
    pub fn snapshots_to_destroy(
        &self,
        spec: &str,
        recursive: bool,
    ) -> Result<Vec<String>, PoolError> {
        let core = &self.core;
        let Some((dataset, list)) = spec.split_once('@') else {
            return Err(PoolError::BadDatasetName(
                spec.into(),
                "a snapshot name has the form FILESYSTEM@SNAPSHOT".into(),
            ));
        };
        let relative = core.relative_name(dataset)?.to_string();
        let mut targets = vec![relative.clone()];
        if recursive {
            targets.extend(core.descendants_of(&relative));
        }
        let mut chosen = Vec::new();
        let mut matched_any = false;
        for target in &targets {
            let head = core.dataset_by_relative(target)?;
            let snapshots = head.snapshots();
            let position = |name: &str| {
                snapshots
                    .iter()
                    .position(|snapshot| snapshot.short_name() == name)
            };
            let mut wanted = vec![false; snapshots.len()];
            for item in list.split(',') {
                if let Some((first, last)) = item.split_once('%') {
                    for name in [first, last].iter().filter(|name| !name.is_empty()) {
                        validate_name_component(name)
                            .map_err(|why| PoolError::BadDatasetName(spec.into(), why))?;
                    }
                    let start = if first.is_empty() {
                        Some(0)
                    } else {
                        position(first)
                    };
                    let end = if last.is_empty() {
                        snapshots.len().checked_sub(1)
                    } else {
                        position(last)
                    };
                    match (start, end) {
                        (Some(start), Some(end)) if start <= end => {
                            wanted[start..=end].iter_mut().for_each(|slot| *slot = true);
                            matched_any = true;
                        }
                        (Some(_), Some(_)) => {
                            return Err(PoolError::Refused(format!(
                                "cannot destroy {spec}: snapshot {first} is newer than {last}"
                            )))
                        }
                        _ if target == &relative => {
                            return Err(PoolError::DatasetNotFound(format!(
                                "{}@{}",
                                head.name(),
                                if start.is_none() { first } else { last }
                            )))
                        }
                        _ => {}
                    }
                } else {
                    validate_name_component(item)
                        .map_err(|why| PoolError::BadDatasetName(spec.into(), why))?;
                    match position(item) {
                        Some(index) => {
                            wanted[index] = true;
                            matched_any = true;
                        }
                        None if target == &relative && !recursive => {
                            return Err(PoolError::DatasetNotFound(format!(
                                "{}@{item}",
                                head.name()
                            )))
                        }
                        None => {}
                    }
                }
            }
            for (snapshot, _) in snapshots.iter().zip(&wanted).filter(|(_, wanted)| **wanted) {
                chosen.push(format!("{}@{}", head.name(), snapshot.short_name()));
            }
        }
        if !matched_any {
            return Err(PoolError::DatasetNotFound(spec.into()));
        }
        Ok(chosen)
    }

    /// Destroy snapshots (see [`Pool::snapshots_to_destroy`]) in one txg; their space comes
    /// back in the background (the pool property `freeing`). Returns the names destroyed.
    pub fn destroy_snapshots(&self, spec: &str, recursive: bool) -> Result<Vec<String>, PoolError> {
        self.writable()?;
        let core = &self.core;
        let _namespace = core.namespace.lock();
        let names = self.snapshots_to_destroy(spec, recursive)?;
        let mut doomed = Vec::new();
        for name in &names {
            let (head, snapshot) = core.snapshot_by_name(name)?;
            if head.unavailable().is_some() {
                return Err(PoolError::DatasetUnavailable(
                    head.name().clone(),
                    "its object set cannot be read".into(),
                ));
            }
            if snapshot.phys().clone_count > 0 {
                return Err(PoolError::DatasetBusy(
                    name.clone(),
                    "it has dependent clones".into(),
                ));
            }
            // Every named snapshot is checked before any is destroyed: all or nothing.
            if let Some(why) = core.destroy_refusal(name, &snapshot) {
                return Err(PoolError::DatasetBusy(name.clone(), why));
            }
            doomed.push((head, snapshot));
        }
        core.run_tasks(
            doomed
                .into_iter()
                .map(|(head, snapshot)| NamespaceTask::Destroy { head, snapshot })
                .collect(),
        )?;
        Ok(names)
    }

    /// Roll a file system back to `FS@SNAP`, which must be its newest snapshot unless
    /// `destroy_later` (then the later ones are destroyed in the same txg). The file system's
    /// object set is reset in place: a mounted file system sees the snapshot's state (the
    /// caller invalidates what the kernel cached). Returns the snapshots destroyed.
    pub fn rollback(&self, full: &str, destroy_later: bool) -> Result<Vec<String>, PoolError> {
        self.writable()?;
        let core = &self.core;
        let _namespace = core.namespace.lock();
        let (head, snapshot) = core.snapshot_by_name(full)?;
        let objset = core
            .available_dataset(core.relative_name(&head.name())?)?
            .objset();
        let snapshots = head.snapshots();
        let index = snapshots
            .iter()
            .position(|candidate| Arc::ptr_eq(candidate, &snapshot))
            .expect("found by name");
        let later: Vec<Arc<Snapshot>> = snapshots[index + 1..].to_vec();
        let later_names: Vec<String> = later
            .iter()
            .map(|later| format!("{}@{}", head.name(), later.short_name()))
            .collect();
        if !later.is_empty() && !destroy_later {
            return Err(PoolError::Refused(format!(
                "cannot roll back to {full}: more recent snapshots exist; use -r to destroy them: {}",
                later_names.join(", ")
            )));
        }
        if let Some(busy) = later.iter().find(|later| later.phys().clone_count > 0) {
            return Err(PoolError::DatasetBusy(
                format!("{}@{}", head.name(), busy.short_name()),
                "it has dependent clones".into(),
            ));
        }
        for (later, name) in later.iter().zip(&later_names) {
            if let Some(why) = core.destroy_refusal(name, later) {
                return Err(PoolError::DatasetBusy(name.clone(), why));
            }
        }
        // No file-system change may be in flight across the reset (module documentation).
        let _gate = objset.close_gate();
        // What the head changed in open context goes to disk first: the rollback's txg then
        // holds no block of the head born in it, which the free of the head's tree (from its
        // synced root) would miss.
        core.txgs.wait_synced(None)?;
        let mut tasks: Vec<NamespaceTask> = later
            .into_iter()
            .rev()
            .map(|snapshot| NamespaceTask::Destroy {
                head: head.clone(),
                snapshot,
            })
            .collect();
        tasks.push(NamespaceTask::Rollback { head: head.clone() });
        core.run_tasks(tasks)?;
        Ok(later_names)
    }

    /// Rename a file system (and with it its descendants and snapshots) to `new`, anywhere in
    /// the same pool under an existing parent. The caller checks the rename with
    /// [`Pool::check_rename_dataset`] first, then unmounts what moves (the file system and its
    /// descendants) and mounts it again after. Durable on return.
    pub fn rename_dataset(&self, old: &str, new: &str) -> Result<String, PoolError> {
        self.writable()?;
        let core = &self.core;
        let _namespace = core.namespace.lock();
        let (dataset, old_relative, new_relative) = core.dataset_rename_plan(old, new)?;
        core.run_tasks(vec![NamespaceTask::RenameDataset {
            dataset,
            old: old_relative,
            new: new_relative,
        }])?;
        Ok(new.to_string())
    }

    /// Whether [`Pool::rename_dataset`] would accept renaming `old` to `new` now: the same
    /// checks, nothing changed. A caller that must unmount before a rename asks this first,
    /// so that a rename refused leaves every mount alone.
    pub fn check_rename_dataset(&self, old: &str, new: &str) -> Result<(), PoolError> {
        self.writable()?;
        let core = &self.core;
        let _namespace = core.namespace.lock();
        core.dataset_rename_plan(old, new).map(|_| ())
    }

    /// Rename a snapshot within its file system (`FS@OLD` to `FS@NEW` or `NEW`).
    pub fn rename_snapshot(&self, old: &str, new: &str) -> Result<String, PoolError> {
        self.writable()?;
        let core = &self.core;
        let _namespace = core.namespace.lock();
        let (head, snapshot) = core.snapshot_by_name(old)?;
        let new_short = match new.split_once('@') {
            Some((dataset, name)) if dataset == head.name() || dataset.is_empty() => name,
            Some(_) => {
                return Err(PoolError::Refused(format!(
                    "cannot rename {old} to {new}: a snapshot stays in its file system"
                )))
            }
            None => new,
        };
        validate_name_component(new_short)
            .map_err(|why| PoolError::BadDatasetName(new.into(), why))?;
        let new_full = format!("{}@{new_short}", head.name());
        if head.snapshot(new_short).is_some() {
            return Err(PoolError::DatasetExists(new_full));
        }
        core.check_space(
            super::admission::SpaceCheck::Reserved,
            1,
            &format!("rename {old} to {new_full}"),
        )?;
        core.run_tasks(vec![NamespaceTask::Rename {
            head,
            snapshot,
            name: new_short.to_string(),
        }])?;
        Ok(new_full)
    }

    /// Every snapshot of the pool (each file system's oldest first, file systems in `list`
    /// order).
    /// Bytes file system `file_system` references that snapshot `snapshot` (a short name, or
    /// `FS@SNAP` of the same file system) did not: zfs's `written@SNAP` (OpenZFS
    /// `dsl_dataset_space_written`). What the file system references now, less what the
    /// snapshot referenced, plus what the snapshot referenced that is gone since: the blocks
    /// born at or before it on the deadlists of every later snapshot and of the head.
    pub fn written_since(&self, file_system: &str, snapshot: &str) -> Result<u64, PoolError> {
        let core = &self.core;
        let short = snapshot
            .rsplit_once('@')
            .map_or(snapshot, |(owner, short)| {
                if owner.is_empty() || owner == file_system {
                    short
                } else {
                    ""
                }
            });
        let head = core.dataset_by_relative(core.relative_name(file_system)?)?;
        let snapshots = head.snapshots();
        let Some(index) = snapshots
            .iter()
            .position(|candidate| candidate.short_name() == short)
        else {
            return Err(PoolError::BadProperty(format!(
                "cannot get written@{short} of {file_system}: no such snapshot of it"
            )));
        };
        let since = snapshots[index].phys();
        let below = Txg(since.creation_txg.0 + 1);
        let store = core.deadlist_store();
        let mut gone = 0u64;
        for later in &snapshots[index + 1..] {
            gone += later
                .deadlist(&store)?
                .space_range(Txg(0), below)
                .used_bytes;
        }
        gone += head.with_deadlist(|deadlist| deadlist.space_range(Txg(0), below).used_bytes);
        Ok((head.phys().referenced_bytes + gone).saturating_sub(since.referenced_bytes))
    }

    pub fn snapshots(&self) -> Vec<SnapshotInfo> {
        let core = &self.core;
        let mut list = core.dataset_list();
        list.sort_by(|(a, _), (b, _)| a.split('/').cmp(b.split('/')));
        let mut infos = Vec::new();
        for (_, head) in list {
            let snapshots = head.snapshots();
            for index in 0..snapshots.len() {
                infos.push(core.snapshot_info(&head, &snapshots, index));
            }
        }
        infos
    }

    /// One snapshot's figures.
    pub fn snapshot_info(&self, full: &str) -> Result<SnapshotInfo, PoolError> {
        let (head, snapshot) = self.core.snapshot_by_name(full)?;
        let snapshots = head.snapshots();
        let index = snapshots
            .iter()
            .position(|candidate| Arc::ptr_eq(candidate, &snapshot))
            .expect("found by name");
        Ok(self.core.snapshot_info(&head, &snapshots, index))
    }

    /// A dataset's (or snapshot's) records and deadlist entries.
    pub fn dataset_records(&self, full: &str) -> Result<DatasetRecords, PoolError> {
        let deadlist_entries = |deadlist: &Deadlist| {
            deadlist
                .entries()
                .map(|(key, entry)| (key.0, entry.list.0, entry.space))
                .collect()
        };
        if full.contains('@') {
            let (_, snapshot) = self.core.snapshot_by_name(full)?;
            return Ok(DatasetRecords {
                name: full.to_string(),
                object: snapshot.object.0,
                phys: snapshot.phys(),
                dir: None,
                deadlist: deadlist_entries(&snapshot.deadlist(&self.core.deadlist_store())?),
                snapshots: Vec::new(),
                livelist: Vec::new(),
            });
        }
        let relative = self.core.relative_name(full)?;
        let head = self.core.dataset_by_relative(relative)?;
        Ok(DatasetRecords {
            name: full.to_string(),
            object: head.object.0,
            phys: head.phys(),
            dir: Some(head.dir()),
            deadlist: deadlist_entries(&head.deadlist()),
            snapshots: head
                .snapshots()
                .iter()
                .map(|snapshot| (snapshot.short_name(), snapshot.object.0, snapshot.txg().0))
                .collect(),
            livelist: head
                .livelist_sublists(&self.core.deadlist_store())?
                .unwrap_or_default(),
        })
    }

    /// A snapshot's object set, read-only (for `.zfs/snapshot`, send and tests).
    pub fn snapshot_objset(&self, full: &str) -> Result<Arc<crate::object::ObjectSet>, PoolError> {
        let (_, snapshot) = self.core.snapshot_by_name(full)?;
        Ok(snapshot.objset(&self.core.io)?)
    }

    /// A snapshot's file system, read-only.
    pub fn snapshot_file_system(&self, full: &str) -> Result<crate::fs::FileSystem, PoolError> {
        Ok(self.core.open_snapshot(full)?.1)
    }
}

/// Read-only snapshot access on the pool's core, for holders of a weak reference to it (the
/// daemon's `.zfs/snapshot` source must not keep a pool from being exported).
impl PoolCore {
    /// The snapshots of one file system (a full name), oldest first.
    pub fn snapshots_of(&self, dataset: &str) -> Result<Vec<SnapshotInfo>, PoolError> {
        let head = self.dataset_by_relative(self.relative_name(dataset)?)?;
        let snapshots = head.snapshots();
        Ok((0..snapshots.len())
            .map(|index| self.snapshot_info(&head, &snapshots, index))
            .collect())
    }

    /// Open `FS@SNAP`'s file system read-only, with the snapshot's figures and the snapshot
    /// itself (whose [`Snapshot::is_destroyed`] a reader checks before each read): all from one
    /// lookup, so they describe the same snapshot even if it is renamed meanwhile.
    pub fn open_snapshot(
        &self,
        full: &str,
    ) -> Result<(SnapshotInfo, crate::fs::FileSystem, Arc<Snapshot>), PoolError> {
        let (head, snapshot) = self.snapshot_by_name(full)?;
        let snapshots = head.snapshots();
        let index = snapshots
            .iter()
            .position(|candidate| Arc::ptr_eq(candidate, &snapshot))
            .ok_or_else(|| PoolError::DatasetNotFound(full.into()))?;
        let info = self.snapshot_info(&head, &snapshots, index);
        let fs =
            crate::fs::FileSystem::open_read_only(snapshot.objset(&self.io)?, self.txgs.clone())?;
        Ok((info, fs, snapshot))
    }
}
