//! Clones (OpenZFS dsl_dataset_clone_swap and the clone half of dsl_dataset_create_sync): a
//! writable file system that starts as a snapshot's tree, in constant time.
//!
//! The clone's head record starts as its origin snapshot's (root, space) with the origin as its
//! previous snapshot, so that every block born at or before the origin's txg that the clone
//! stops referencing goes on the clone's deadlist and is never freed by the clone; its
//! directory names the origin and its txg. The origin counts its clones (clone count and
//! next-clones object) so that it is not destroyed under them. Creation is a namespace task
//! (`pool/snapshots.rs`), run in pass 1 of its txg like the snapshot tasks. Destroying a clone
//! (`pool/destroy.rs`, `sync_destroy`) frees its livelist's live entries (`livelists.rs`) or,
//! without one, its tree above the origin's txg, its own deadlist entries, drops the origin's,
//! and releases the origin here. A clone made while the pool has feature `livelist` starts an
//! empty livelist (`dataset/livelist.rs`).
//!
//! # Promote (OpenZFS dsl_dataset_promote_sync)
//! Clone C of snapshot S of file system O: the snapshots of O up to and including S move to
//! C (same records and names, their directory becomes C's), C's chain continues S's, and O
//! becomes a clone of S (and C takes over O's own origin, if O was a clone). No block moves and
//! no deadlist is swapped: every deadlist keeps holding the blocks its dataset killed that its
//! previous snapshot holds, which stays true, and the split of a deadlist at the origin's txg
//! (below: the origin's blocks, dropped when the clone is destroyed; above: `usedbysnapshots`)
//! follows the new origins. What changes: C's deadlists must partition the origin's blocks by
//! S's snapshot intervals (they inherit S's keys at clone creation; older clones are refined),
//! S's next link and unique bytes follow C's first dataset, S's clone list names O instead of
//! C (and O's old origin names C instead of O), the names move between the snapshot-names
//! objects, and both directories' origin fields swap. The directories' used totals are derived
//! from these records by the sync driver. Livelists of both are dropped (they describe blocks
//! relative to an origin txg that no longer holds). One txg: a crash leaves it all or nothing.
//! Cost: per snapshot moved and per snapshot of C, not per block.

use std::sync::Arc;

use crate::block::blkptr::{Compression, ObjectType};
use crate::dataset::deadlist::Deadlist;
use crate::dataset::{Dataset, Snapshot};
use crate::object::adapters::{create_kv_object, kv_object_error, KvObject};
use crate::object::{kv, Tx};
use crate::types::ObjectId;

use super::snapshots::NamespaceTask;
use super::{mos_props, Pool, PoolCore, PoolError};

impl PoolCore {
    /// A clone of `snapshot` named `relative`: a new directory and head whose record starts as
    /// the snapshot's (root, space; previous snapshot = the origin, unique 0), with an empty
    /// deadlist; the origin counts it (clone count, next-clones object, and its directory's
    /// clones object). Constant cost, whatever the origin holds.
    pub(super) fn sync_create_clone(
        &self,
        snapshot: &Arc<Snapshot>,
        relative: &str,
        properties: &[(crate::dataset::props::Property, String)],
        for_receive: bool,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        use super::datasets::{create_dataset_records, leaf_of, parent_of};
        let store = self.deadlist_store();
        let origin = snapshot.phys();
        let parent = self.dataset_by_relative(parent_of(relative))?;
        let (dir_object, mut dir, dataset_object, mut phys) =
            create_dataset_records(&self.mos, tx, &self.tunables, parent.dir_object)?;
        // The keys a dataset after the origin has (the origin's older snapshots' txgs), as
        // OpenZFS's dsl_deadlist_clone: the
        // clone's deadlists then group the origin's blocks it kills by the origin's snapshot
        // intervals, which promote needs once those snapshots are the clone's.
        let mut deadlist = Deadlist::with_keys(snapshot.next_deadlist_keys(&store)?);
        dir.origin_snapshot_object = snapshot.object;
        dir.origin_txg = origin.creation_txg;
        phys.prev_snapshot_object = snapshot.object;
        phys.prev_snapshot_txg = origin.creation_txg;
        phys.root = origin.root.clone();
        phys.referenced_bytes = origin.referenced_bytes;
        phys.compressed_bytes = origin.compressed_bytes;
        phys.uncompressed_bytes = origin.uncompressed_bytes;
        phys.unique_bytes = 0;
        if for_receive {
            phys.flags |= crate::dataset::phys::DS_FLAG_INCONSISTENT;
        }
        phys.deadlist_object = deadlist.save(&store, tx)?;
        let livelist = self.create_livelist(origin.creation_txg, tx)?;
        phys.livelist_object = livelist
            .as_ref()
            .map_or(ObjectId(0), |livelist| livelist.object());
        self.mos
            .set_bonus(tx, dir_object, ObjectType::DatasetDir, &dir.encode())?;
        self.write_dataset_record(tx, dataset_object, &phys)?;
        {
            let object = parent.dir().children_object;
            let mut handle = KvObject::new(&self.mos, object, Some(*tx))?;
            kv::insert(
                &mut handle,
                leaf_of(relative).as_bytes(),
                &dir_object.0.to_le_bytes(),
            )
            .map_err(kv_object_error(object))?;
        }
        let dataset = Dataset::new(
            self.full_name(relative),
            dataset_object,
            phys.clone(),
            dir,
            self.freer.clone(),
        );
        for (property, value) in properties {
            self.write_property(&dataset, *tx, *property, Some(value))?;
        }
        let objset =
            crate::object::ObjectSet::open(self.io.clone(), &origin.root, dataset.clone(), 1)?;
        dataset.attach_objset(Arc::new(objset));
        dataset.set_snapshot_state(deadlist, Vec::new());
        dataset.resolve_origin(snapshot.clone());
        dataset.set_livelist(livelist);
        self.attach_open_context(&dataset);
        self.datasets
            .write()
            .insert(relative.to_string(), dataset.clone());
        self.apply_copies(relative);
        // Syncing context: the clone's txg is the one syncing.
        self.new_dataset_limits(&dataset, properties, None)?;
        // The origin's side.
        let next_clones = match origin.next_clones_object {
            ObjectId(0) => create_kv_object(
                &self.mos,
                tx,
                mos_props(ObjectType::KeyValue, 4096, &self.tunables, Compression::Lz4),
            )?,
            existing => existing,
        };
        {
            let mut handle = KvObject::new(&self.mos, next_clones, Some(*tx))?;
            kv::insert(&mut handle, &dataset_object.0.to_le_bytes(), &[])
                .map_err(kv_object_error(next_clones))?;
        }
        let origin_phys = snapshot.update_phys(|phys| {
            phys.clone_count += 1;
            phys.next_clones_object = next_clones;
        });
        self.write_dataset_record(tx, snapshot.object, &origin_phys)?;
        Ok(())
    }

    /// Syncing context: a destroyed clone leaves its origin's clone count and next-clones
    /// object.
    pub(super) fn release_origin(&self, clone: &Dataset, tx: &Tx) -> Result<(), PoolError> {
        let Some((_, origin)) = self.origin_of(clone) else {
            return Ok(());
        };
        let next_clones = origin.phys().next_clones_object;
        if next_clones.0 != 0 {
            let mut handle = KvObject::new(&self.mos, next_clones, Some(*tx))?;
            kv::remove(&mut handle, &clone.object.0.to_le_bytes())
                .map_err(kv_object_error(next_clones))?;
        }
        let phys = origin.update_phys(|phys| phys.clone_count = phys.clone_count.saturating_sub(1));
        self.write_dataset_record(tx, origin.object, &phys)?;
        Ok(())
    }
}

impl PoolCore {
    /// Syncing context: promote `clone` (see the module documentation). `origin_head` holds
    /// `origin`, the clone's origin snapshot.
    pub(super) fn sync_promote(
        &self,
        clone: &Arc<Dataset>,
        origin_head: &Arc<Dataset>,
        origin: &Arc<Snapshot>,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let store = self.deadlist_store();
        let origin_snapshots = origin_head.snapshots();
        let index = origin_snapshots
            .iter()
            .position(|candidate| Arc::ptr_eq(candidate, origin))
            .ok_or_else(|| {
                PoolError::Corrupt(format!(
                    "promote of {}: origin {} is not in {}'s chain",
                    clone.name(),
                    origin.short_name(),
                    origin_head.name()
                ))
            })?;
        let moved = origin_snapshots[..=index].to_vec();
        let kept = origin_snapshots[index + 1..].to_vec();
        let clone_snapshots = clone.snapshots();
        // The origin head's own origin (if it is a clone) becomes the promoted clone's.
        let grand_origin = origin_head.origin();

        // C's deadlists partition the origin's blocks by the moved snapshots' intervals.
        let keys = origin.next_deadlist_keys(&store)?;
        for snapshot in &clone_snapshots {
            let mut deadlist = snapshot.deadlist(&store)?;
            deadlist.refine(&store, tx, keys.iter().copied())?;
            deadlist.save(&store, tx)?;
            snapshot.set_deadlist(&deadlist);
            self.write_dataset_record(tx, snapshot.object, &snapshot.phys())?;
        }
        let head_deadlist_object = clone.with_deadlist(|deadlist| {
            deadlist.refine(&store, tx, keys.iter().copied())?;
            deadlist.save(&store, tx)
        })?;
        let first_deadlist = match clone_snapshots.first() {
            Some(first) => first.deadlist(&store)?,
            None => clone.deadlist(),
        };
        let first_object = clone_snapshots
            .first()
            .map_or(clone.object, |first| first.object);

        // S: its next dataset is C's first, its unique bytes follow, its clone is O.
        origin.update_phys(|phys| phys.next_snapshot_object = first_object);
        origin.refresh_unique(&first_deadlist);
        self.swap_clone_entry(origin, clone.object, origin_head.object, tx)?;
        if let Some(grand_origin) = &grand_origin {
            self.swap_clone_entry(grand_origin, origin_head.object, clone.object, tx)?;
        }

        // The names move; the records name C's directory.
        let origin_names = origin_head.phys().snapshot_names_object;
        let clone_names = match clone.phys().snapshot_names_object {
            ObjectId(0) => create_kv_object(
                &self.mos,
                tx,
                mos_props(ObjectType::KeyValue, 4096, &self.tunables, Compression::Lz4),
            )?,
            existing => existing,
        };
        {
            let mut from = KvObject::new(&self.mos, origin_names, Some(*tx))?;
            for snapshot in &moved {
                if !kv::remove(&mut from, snapshot.short_name().as_bytes())
                    .map_err(kv_object_error(origin_names))?
                {
                    return Err(PoolError::Corrupt(format!(
                        "snapshot {}@{} is missing from the names object",
                        origin_head.name(),
                        snapshot.short_name()
                    )));
                }
            }
        }
        {
            let mut to = KvObject::new(&self.mos, clone_names, Some(*tx))?;
            for snapshot in &moved {
                kv::insert(
                    &mut to,
                    snapshot.short_name().as_bytes(),
                    &snapshot.object.0.to_le_bytes(),
                )
                .map_err(kv_object_error(clone_names))?;
            }
        }
        for snapshot in &moved {
            let phys = snapshot.update_phys(|phys| phys.dir_object = clone.dir_object);
            self.write_dataset_record(tx, snapshot.object, &phys)?;
        }

        // The directories swap origins; livelists describe blocks relative to the old ones.
        let clone_dir = clone.set_origin(grand_origin.clone());
        self.mos.set_bonus(
            tx,
            clone.dir_object,
            ObjectType::DatasetDir,
            &clone_dir.encode(),
        )?;
        let origin_dir = origin_head.set_origin(Some(origin.clone()));
        self.mos.set_bonus(
            tx,
            origin_head.dir_object,
            ObjectType::DatasetDir,
            &origin_dir.encode(),
        )?;
        self.drop_dataset_livelist(clone, tx)?;
        self.drop_dataset_livelist(origin_head, tx)?;
        let clone_phys = clone.update_phys(|phys| {
            phys.snapshot_names_object = clone_names;
            phys.deadlist_object = head_deadlist_object;
        });
        self.write_dataset_record(tx, clone.object, &clone_phys)?;
        self.write_dataset_record(tx, origin_head.object, &origin_head.phys())?;

        // The origin head is a clone now, and the promoted one still is if the origin head
        // was: their snapshots' space is split at the origin by key, so the entries of their
        // deadlists that import read only the header of are read now.
        for snapshot in kept
            .iter()
            .chain(moved.iter().filter(|_| grand_origin.is_some()))
        {
            snapshot.load_deadlist_entries(&store)?;
        }
        let mut snapshots = moved;
        snapshots.extend(clone_snapshots);
        clone.set_snapshots(snapshots);
        origin_head.set_snapshots(kept);
        Ok(())
    }

    /// Syncing context: `snapshot`'s next-clones object names `new` instead of `old` (its
    /// clone count is unchanged), and its record is written.
    fn swap_clone_entry(
        &self,
        snapshot: &Snapshot,
        old: ObjectId,
        new: ObjectId,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let next_clones = snapshot.phys().next_clones_object;
        if next_clones.0 == 0 {
            return Err(PoolError::Corrupt(format!(
                "snapshot {} has clones but no next-clones object",
                snapshot.object
            )));
        }
        let mut handle = KvObject::new(&self.mos, next_clones, Some(*tx))?;
        kv::remove(&mut handle, &old.0.to_le_bytes()).map_err(kv_object_error(next_clones))?;
        kv::insert(&mut handle, &new.0.to_le_bytes(), &[]).map_err(kv_object_error(next_clones))?;
        self.write_dataset_record(tx, snapshot.object, &snapshot.phys())?;
        Ok(())
    }
}

impl Pool {
    /// Promote the clone `name` (`POOL/fs`): its origin's snapshots up to and including the
    /// origin move to it, and the origin's file system becomes a clone of the promoted one's
    /// snapshot (see the module documentation). Refused for a snapshot, a file system that is
    /// not a clone, or when a snapshot to move has the name of one the clone already has.
    /// Returns the snapshots moved (their new full names). Durable on return.
    pub fn promote(&self, name: &str) -> Result<Vec<String>, PoolError> {
        self.writable()?;
        let core = &self.core;
        if name.contains('@') {
            return Err(PoolError::Refused(format!(
                "cannot promote {name}: a snapshot cannot be promoted; name a clone (a file system)"
            )));
        }
        let _namespace = core.namespace.lock();
        let relative = core.relative_name(name)?;
        let clone = core.available_dataset(relative)?;
        core.check_space(
            super::admission::SpaceCheck::Reserved,
            1,
            &format!("promote {name}"),
        )?;
        let Some((origin_head, origin)) = core.origin_of(&clone) else {
            return Err(PoolError::Refused(format!(
                "cannot promote {name}: not a cloned file system (it has no origin)"
            )));
        };
        core.available_dataset(core.relative_name(&origin_head.name())?)?;
        let moved: Vec<Arc<Snapshot>> = origin_head
            .snapshots()
            .into_iter()
            .take_while(|snapshot| !Arc::ptr_eq(snapshot, &origin))
            .chain([origin.clone()])
            .collect();
        let conflicts: Vec<String> = moved
            .iter()
            .map(|snapshot| snapshot.short_name())
            .filter(|short| clone.snapshot(short).is_some())
            .map(|short| format!("{name}@{short}"))
            .collect();
        if !conflicts.is_empty() {
            return Err(PoolError::Refused(format!(
                "cannot promote {name}: snapshot name conflict: {} already exist(s) and {}'s snapshot(s) of the same name would move there; rename one first",
                conflicts.join(", "),
                origin_head.name()
            )));
        }
        // What moves to the clone's side: at most the origin's referenced bytes and what
        // the snapshots before it hold alone.
        let moving = origin.phys().referenced_bytes.saturating_add(
            moved
                .iter()
                .map(|snapshot| snapshot.phys().unique_bytes)
                .sum::<u64>(),
        );
        core.check_transfer(
            core.relative_name(&origin_head.name())?,
            relative,
            moving,
            &format!("promote {name}"),
        )?;
        let names = moved
            .iter()
            .map(|snapshot| format!("{name}@{}", snapshot.short_name()))
            .collect();
        core.run_tasks(vec![NamespaceTask::Promote {
            clone,
            origin_head,
            origin,
        }])?;
        Ok(names)
    }

    /// Clone `FS@SNAP` as a new file system `new` (`POOL/a/b`, its parent existing) with local
    /// properties, in constant time. Durable on return.
    pub fn create_clone(
        &self,
        snapshot: &str,
        new: &str,
        settings: &[(String, String)],
    ) -> Result<String, PoolError> {
        self.writable()?;
        let core = &self.core;
        let (later, properties) = core.split_new_settings(settings, new)?;
        let _namespace = core.namespace.lock();
        let (_, origin) = core.snapshot_by_name(snapshot)?;
        let relative = core.new_relative_name(new).map_err(|error| match error {
            PoolError::DatasetNotFound(_) => PoolError::Refused(format!(
                "cannot clone {snapshot} as {new}: a clone is in the same pool as its origin"
            )),
            other => other,
        })?;
        if relative.is_empty() || core.datasets.read().contains_key(relative) {
            return Err(PoolError::DatasetExists(new.into()));
        }
        let parent = super::datasets::parent_of(relative);
        core.available_dataset(parent)
            .map_err(|_| PoolError::DatasetNotFound(core.full_name(parent)))?;
        core.check_space(
            super::admission::SpaceCheck::Normal,
            1,
            &format!("clone {snapshot} as {new}"),
        )?;
        core.check_new_limits(parent, origin.phys().referenced_bytes, &properties)
            .map_err(|error| super::datasets::limit_error(new, error))?;
        core.run_tasks(vec![NamespaceTask::Clone {
            snapshot: origin,
            relative: relative.to_string(),
            properties,
            for_receive: false,
        }])?;
        drop(_namespace);
        for (name, value) in &later {
            self.set_property(new, name, Some(value))?;
        }
        Ok(new.to_string())
    }
}
