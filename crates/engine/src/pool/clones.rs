//! Clones (OpenZFS dsl_dataset_clone_swap and the clone half of dsl_dataset_create_sync): a
//! writable file system that starts as a snapshot's tree, in constant time.
//!
//! The clone's head record starts as its origin snapshot's (root, space) with the origin as its
//! previous snapshot, so that every block born at or before the origin's txg that the clone
//! stops referencing goes on the clone's deadlist and is never freed by the clone; its
//! directory names the origin and its txg. The origin counts its clones (clone count and
//! next-clones object) so that it is not destroyed under them. Creation is a namespace task
//! (`pool/snapshots.rs`), run in pass 1 of its txg like the snapshot tasks. Destroying a clone
//! (`pool/datasets.rs`, `sync_destroy`) frees its tree above the origin's txg, its own deadlist
//! entries, drops the origin's, and releases the origin here. Promote and livelists are not
//! built yet (issue 11).

use std::sync::Arc;

use crate::block::blkptr::{Compression, ObjectType};
use crate::dataset::deadlist::Deadlist;
use crate::dataset::{Dataset, Snapshot};
use crate::object::adapters::{create_kv_object, kv_object_error, KvObject};
use crate::object::{kv, Tx};
use crate::types::{ObjectId, Txg};

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
        tx: &Tx,
    ) -> Result<(), PoolError> {
        use super::datasets::{create_dataset_records, leaf_of, parent_of};
        let store = self.deadlist_store();
        let origin = snapshot.phys();
        let parent = self.dataset_by_relative(parent_of(relative))?;
        let (dir_object, mut dir, dataset_object, mut phys) =
            create_dataset_records(&self.mos, tx, &self.tunables, parent.dir_object)?;
        let mut deadlist = Deadlist::with_keys([Txg(0)]);
        dir.origin_snapshot_object = snapshot.object;
        dir.origin_txg = origin.creation_txg;
        phys.prev_snapshot_object = snapshot.object;
        phys.prev_snapshot_txg = origin.creation_txg;
        phys.root = origin.root.clone();
        phys.referenced_bytes = origin.referenced_bytes;
        phys.compressed_bytes = origin.compressed_bytes;
        phys.uncompressed_bytes = origin.uncompressed_bytes;
        phys.unique_bytes = 0;
        phys.deadlist_object = deadlist.save(&store, tx)?;
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
        self.attach_open_context(&dataset);
        self.datasets.write().insert(relative.to_string(), dataset);
        self.apply_copies(relative);
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

impl Pool {
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
        let properties = Pool::parse_properties(settings)?;
        let _namespace = core.namespace.lock();
        let (_, origin) = core.snapshot_by_name(snapshot)?;
        let relative = core.relative_name(new).map_err(|error| match error {
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
        core.run_tasks(vec![NamespaceTask::Clone {
            snapshot: origin,
            relative: relative.to_string(),
            properties,
        }])?;
        Ok(new.to_string())
    }
}
