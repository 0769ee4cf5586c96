//! Destroying file systems (OpenZFS dsl_destroy.c, dsl_destroy_head): the plan of what a
//! destroy takes (`-r`, `-R`), its open-context half and its syncing half. A snapshot's
//! destroy is a snapshot task (`snapshots.rs`); the blocks are freed in the background
//! (`background_free.rs`, `livelists.rs`).
//!
//! # Plan
//! One function decides what a destroy takes, in its order (children and dependent clones
//! before what they depend on), or why it is refused; the dry run (`destroy -n`) and the real
//! run both take their list from it, so they cannot disagree.
//!
//! # Destroy (syncing context)
//! Open context only takes the dataset out of the table and queues it, with its snapshots,
//! for the txg it holds; the sync of that txg (pass 1) queues its tree for background freeing
//! (the destroy queue, or a clone's livelist), destroys its intent log, and removes its MOS
//! objects and its name. Doing the MOS changes in syncing context keeps them strictly after
//! the previous txg's writes of the same records.

use crate::dataset::phys::DatasetDirPhys;
use crate::dataset::Dataset;
use crate::object::adapters::KvObject;
use crate::object::kv;
use crate::object::Tx;
use crate::types::{ObjectId, Txg};

use super::datasets::kv_error;
use super::{Pool, PoolCore, PoolError};

impl PoolCore {
    /// Syncing-context half of destroy: queue the dataset's tree for background freeing (see
    /// [`super::background_free`]) and remove its records.
    pub(super) fn sync_destroy(&self, dataset: &Dataset, txg: Txg) -> Result<(), PoolError> {
        let tx = Tx::syncing(txg);
        // A clone with a livelist frees its live entries; anything else walks its tree. Its
        // snapshots were destroyed first in this txg, so the head holds all that is left.
        match dataset.take_livelist() {
            Some(livelist) => self.queue_livelist_destroy(livelist, &tx)?,
            None => self.enqueue_destroy(dataset, txg)?,
        }
        if let Some(log) = dataset
            .try_objset()
            .and_then(|objset| objset.log::<crate::zil::Zil>())
        {
            log.destroy(txg)?;
        }
        dataset.detach_objset();
        self.sync_destroy_bookmarks(dataset.object, None, &tx)?;
        self.sync_forget_receive(dataset.object, &tx)?;
        let dir = dataset.dir();
        let parent_dir = DatasetDirPhys::decode(&self.mos.bonus(dir.parent_dir_object)?)
            .map_err(|error| PoolError::Corrupt(format!("parent directory record: {error}")))?;
        {
            let object = parent_dir.children_object;
            let mut handle = KvObject::new(&self.mos, object, Some(tx))?;
            let name = dataset.name();
            let leaf = name.rsplit('/').next().expect("a child has a name");
            if !kv::remove(&mut handle, leaf.as_bytes()).map_err(kv_error(object))? {
                return Err(PoolError::Corrupt(format!(
                    "dataset {} is missing from its parent's children",
                    dataset.name()
                )));
            }
        }
        let phys = dataset.phys();
        if phys.deadlist_object.0 != 0 {
            // Its snapshots are gone: what is left on it is a clone's dead origin blocks (born
            // at or before the origin's txg: the origin's, dropped) or, defensively, its own
            // (freed, not leaked).
            let store = self.deadlist_store();
            let mut deadlist =
                crate::dataset::deadlist::Deadlist::load(&store, phys.deadlist_object)?;
            let (origins, own): (Vec<_>, Vec<_>) = deadlist
                .take_all_lists()
                .into_iter()
                .partition(|(key, _)| *key < dataset.origin_txg());
            crate::dataset::deadlist::Deadlist::drop_lists(&store, &tx, &origins)?;
            let lists: Vec<ObjectId> = own.into_iter().map(|(_, entry)| entry.list).collect();
            self.queue_free_lists(&tx, &lists)?;
            deadlist.destroy(&store, &tx, false)?;
        }
        self.release_origin(dataset, &tx)?;
        for object in [
            dir.children_object,
            dir.properties_object,
            dataset.dir_object,
            dataset.object,
        ]
        .into_iter()
        .chain(
            [phys.snapshot_names_object]
                .into_iter()
                .filter(|object| object.0 != 0),
        ) {
            self.mos.remove_object(&tx, object)?;
        }
        Ok(())
    }

    /// What destroying `full_name` (relative name `relative`) destroys, in the order it is
    /// destroyed (relative names of file systems; each one's snapshots go with it), or why it
    /// is refused: children or snapshots without `recursive`, snapshots with clones without
    /// `dependents`, held snapshots, an unavailable dataset. With `dependents` (`-R`, which
    /// implies `recursive`) the plan holds every clone of a snapshot it destroys, with the
    /// clone's descendants and their clones in turn, each before the file system whose
    /// snapshot it depends on. Changes nothing. Call with the namespace lock held. The dry run
    /// and the real run both take their list from here, so they cannot disagree.
    fn destroy_plan(
        &self,
        full_name: &str,
        relative: &str,
        recursive: bool,
        dependents: bool,
    ) -> Result<Vec<String>, PoolError> {
        let core = self;
        let recursive = recursive || dependents;
        core.dataset_by_relative(relative)?;
        let descendants = core.descendants_of(relative);
        if !descendants.is_empty() && !recursive {
            let children: Vec<String> = core
                .children_of(relative)
                .iter()
                .map(|name| core.full_name(name))
                .collect();
            return Err(PoolError::DatasetBusy(
                full_name.into(),
                format!(
                    "it has children ({}); use -r to destroy them too",
                    children.join(", ")
                ),
            ));
        }
        if !recursive {
            let head = core.dataset_by_relative(relative)?;
            if let Some(first) = head.snapshots().first() {
                return Err(PoolError::DatasetBusy(
                    full_name.into(),
                    format!(
                        "it has snapshots ({}@{} and {} more); use -r to destroy them too",
                        head.name(),
                        first.short_name(),
                        head.snapshots().len() - 1
                    ),
                ));
            }
        }
        let mut doomed = Vec::new();
        let mut visiting = Vec::new();
        core.plan_tree(relative, &mut doomed, &mut visiting)?;
        if !dependents {
            let tree: Vec<String> = descendants
                .into_iter()
                .chain(std::iter::once(relative.to_string()))
                .collect();
            let outside: Vec<String> = doomed
                .iter()
                .filter(|name| !tree.contains(name))
                .map(|name| core.full_name(name))
                .collect();
            if !outside.is_empty() {
                return Err(PoolError::Refused(format!(
                    "cannot destroy {full_name}: filesystem has dependent clones; use -R to destroy the following datasets: {}",
                    outside.join(", ")
                )));
            }
        }
        for name in &doomed {
            let head = core.dataset_by_relative(name)?;
            for snapshot in head.snapshots() {
                let snapshot_name = format!("{}@{}", head.name(), snapshot.short_name());
                if let Some(why) = core.destroy_refusal(&snapshot_name, &snapshot) {
                    return Err(PoolError::DatasetBusy(full_name.into(), why));
                }
            }
        }
        // Destroy frees a dataset's blocks by walking its tree, which an unavailable dataset
        // cannot do: refuse rather than leak.
        for name in &doomed {
            core.available_dataset(name)?;
        }
        Ok(doomed)
    }

    /// The relative name of a file system to destroy; the root dataset goes only with its pool.
    fn destroy_target(&self, full_name: &str) -> Result<String, PoolError> {
        let relative = self.relative_name(full_name)?.to_string();
        if relative.is_empty() {
            return Err(PoolError::BadProperty(format!(
                "{full_name} is the pool's root dataset: destroy the pool instead (tarn pool destroy {full_name})"
            )));
        }
        Ok(relative)
    }

    /// Append to `doomed` the file system `relative` after everything that must go before it:
    /// its children (each with its own plan) and every clone of its snapshots (likewise), so a
    /// snapshot is never destroyed while a clone still depends on it. A file system already
    /// planned is not planned again; `visiting` holds the ones being planned, so a dependency
    /// cycle (which clones and children cannot form) could not recurse forever.
    fn plan_tree(
        &self,
        relative: &str,
        doomed: &mut Vec<String>,
        visiting: &mut Vec<String>,
    ) -> Result<(), PoolError> {
        if doomed
            .iter()
            .chain(visiting.iter())
            .any(|name| name == relative)
        {
            return Ok(());
        }
        visiting.push(relative.to_string());
        let head = self.dataset_by_relative(relative)?;
        let origins: Vec<ObjectId> = head
            .snapshots()
            .iter()
            .filter(|snapshot| snapshot.phys().clone_count > 0)
            .map(|snapshot| snapshot.object)
            .collect();
        let mut clones: Vec<String> = if origins.is_empty() {
            Vec::new()
        } else {
            self.dataset_list()
                .into_iter()
                .filter(|(_, dataset)| origins.contains(&dataset.dir().origin_snapshot_object))
                .map(|(name, _)| name)
                .collect()
        };
        clones.sort();
        let mut children = self.children_of(relative);
        children.sort();
        for name in children.iter().chain(&clones) {
            self.plan_tree(name, doomed, visiting)?;
        }
        visiting.pop();
        doomed.push(relative.to_string());
        Ok(())
    }
}

impl Pool {
    /// What [`Pool::destroy_datasets`] would destroy, in its order: full names, each file
    /// system preceded by its snapshots (oldest first). Or why it is refused. Changes nothing:
    /// `destroy -n` prints this list, and callers that unmount first check with it.
    pub fn destroy_plan(
        &self,
        full_name: &str,
        recursive: bool,
        dependents: bool,
    ) -> Result<Vec<String>, PoolError> {
        self.writable()?;
        let core = &self.core;
        let relative = core.destroy_target(full_name)?;
        let _namespace = core.namespace.lock();
        let mut names = Vec::new();
        for name in core.destroy_plan(full_name, &relative, recursive, dependents)? {
            let head = core.dataset_by_relative(&name)?;
            for snapshot in head.snapshots() {
                names.push(format!("{}@{}", head.name(), snapshot.short_name()));
            }
            names.push(head.name().clone());
        }
        Ok(names)
    }

    /// Destroy a file system. `recursive` destroys its descendants first; without it, a
    /// dataset with children is refused. The root dataset is destroyed only with its pool.
    /// The caller must have unmounted it (and its descendants). Returns the full names
    /// destroyed, children first. Durable on return.
    pub fn destroy_dataset(
        &self,
        full_name: &str,
        recursive: bool,
    ) -> Result<Vec<String>, PoolError> {
        self.destroy_datasets(full_name, recursive, false)
    }

    /// Destroy what [`Pool::destroy_plan`] lists, in its order; `dependents` (`-R`, implying
    /// `recursive`) includes the clones of every snapshot destroyed, wherever they are. The
    /// caller must have unmounted them all. Returns the file systems destroyed, then the
    /// origin snapshots marked for deferred destroy that went with their last clone. Durable on
    /// return.
    pub fn destroy_datasets(
        &self,
        full_name: &str,
        recursive: bool,
        dependents: bool,
    ) -> Result<Vec<String>, PoolError> {
        self.writable()?;
        let core = &self.core;
        let relative = core.destroy_target(full_name)?;
        let namespace = core.namespace.lock();
        let doomed = core.destroy_plan(full_name, &relative, recursive, dependents)?;
        // Whatever the datasets still had in open txgs reaches disk first, so the sync that
        // destroys them sees their whole trees. The namespace stays locked throughout, so no
        // child can appear under a dataset being destroyed.
        self.sync()?;
        let mut destroyed = Vec::new();
        // The origins of the clones destroyed: one marked for deferred destroy goes after its
        // last clone (pool/user_holds.rs).
        let mut origins = Vec::new();
        for name in &doomed {
            let hold = core.txgs.assign()?;
            // The dataset leaves the table and joins the pending destroys at one moment, so
            // that a sync in between (of a txg before `hold`'s) sees it in one or the other.
            let mut pending = core.pending_destroys.lock();
            let Some(dataset) = core.datasets.write().remove(name) else {
                continue;
            };
            pending.push((hold.txg(), name.clone(), dataset.clone()));
            drop(pending);
            // Its snapshots first, in the same txg: the tree is then the head's alone.
            for snapshot in dataset.snapshots() {
                core.queue_snapshot_task(
                    hold.txg(),
                    super::snapshots::NamespaceTask::Destroy {
                        head: dataset.clone(),
                        snapshot,
                    },
                );
            }
            let clone = dataset.dir().origin_snapshot_object.0 != 0;
            origins.extend(core.origin_of(&dataset));
            drop(hold);
            destroyed.push(core.full_name(name));
            // A clone's destroy releases its origin snapshot (the clone count drops) when its
            // txg syncs; the origin's file system may be next in the plan, and its snapshots
            // can go only once nothing depends on them.
            if clone {
                self.sync()?;
            }
        }
        core.relink_limits();
        self.sync()?;
        let (deferred, names) = core.deferred_origin_destroys(origins);
        if !deferred.is_empty() {
            core.run_tasks(deferred)?;
            destroyed.extend(names);
        }
        drop(namespace);
        Ok(destroyed)
    }
}
