//! The pool's dataset hierarchy: names, child datasets, create, opening and the space figures
//! (OpenZFS dsl_dir.c, dsl_dataset.c as used by the pool). A dataset's properties are
//! `dataset_props.rs` (dsl_prop.c), its destroy `destroy.rs` (dsl_destroy.c).
//!
//! # Names
//! A dataset is named `POOL/a/b`. Inside the pool it is known by its *relative* name (`a/b`;
//! the root dataset is `""`), so that importing a pool under a new name renames every dataset
//! at once. The on-disk hierarchy is the dataset directories' children objects (key/value:
//! child name -> directory object) starting at the MOS object directory's `root_dataset`;
//! import walks it and opens every dataset.
//!
//! # Create (open context)
//! Under one transaction hold, so that everything lands in one txg: the children and
//! properties objects, the directory and dataset records, the name in the parent's children
//! object, the local properties, and the new object set with an empty file system in it. The
//! dataset joins the pool's table before the hold is released, so the sync of that txg writes
//! its object set and records together: a crash leaves either no dataset or a whole one.
//!
//! # Space figures
//! A directory's used bytes are its dataset's own space plus its children's used bytes. The
//! own space is kept by each dataset between txgs (`dataset/mod.rs`, "What a txg costs"), so
//! after every sync that changed a dataset the sync driver adds the kept figures up, children
//! first (a sum per dataset, no deadlist read), and rewrites the directory records whose
//! totals moved. Debug builds compare every kept figure with one derived afresh each txg;
//! `check` does the same in any build. A clone's origin is recorded in the dataset, never
//! searched for.
//!
//! # Locking
//! `namespace` serializes create, destroy, set and inherit. The table (`datasets`) is a
//! read-mostly map; the sync thread clones the list of datasets at the start of each txg.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::block::blkptr::ObjectType;
use crate::dataset::phys::{DatasetDirPhys, DatasetPhys};
use crate::dataset::props::{validate_name_component, Property, PropertySource, DATASET_NAME_MAX};
use crate::dataset::{Dataset, OwnSpace};
use crate::fs::{FileSystem, SpaceFigures};
use crate::object::adapters::KvObject;
use crate::object::kv;
use crate::object::phys::ObjsetKind;
use crate::object::{ObjectSet, Tx};
use crate::types::{Guid, ObjectId, Txg};

use super::{kv_create, mos_props, now_seconds, Pool, PoolCore, PoolError};
use crate::block::blkptr::Compression;

/// A refused limit of a new dataset, in zfs's words.
pub(super) fn limit_error(full_name: &str, error: PoolError) -> PoolError {
    match error {
        PoolError::BadProperty(why) | PoolError::OutOfSpace(why) => {
            PoolError::BadProperty(format!("cannot create '{full_name}': {why}"))
        }
        other => other,
    }
}

/// A dataset's figures, for `tarn list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatasetInfo {
    /// Full name (`POOL/a/b`).
    pub name: String,
    /// Bytes referenced by this dataset and its descendants (allocated, all copies).
    pub used: u64,
    pub referenced: u64,
    pub available: u64,
    /// Physical and accounted-uncompressed bytes of `used` (this dataset and descendants).
    pub compressed: u64,
    pub uncompressed: u64,
    /// The same for `referenced` (this dataset alone).
    pub referenced_compressed: u64,
    pub referenced_uncompressed: u64,
    pub creation_time: u64,
    pub guid: u64,
    /// Where `used` is: this dataset's live blocks, blocks only its snapshots hold, and its
    /// descendants (zfs's `usedbydataset`, `usedbysnapshots`, `usedbychildren`).
    pub used_by_dataset: u64,
    pub used_by_snapshots: u64,
    pub used_by_children: u64,
    /// The unfilled part of the refreservation (zfs's `usedbyrefreservation`).
    pub used_by_refreservation: u64,
    /// Quota, refquota, reservation and refreservation (0 = none).
    pub limits: crate::dataset::limits::LimitSettings,
    /// Bytes written since the newest snapshot (all referenced bytes without one).
    pub written: u64,
    /// Number of snapshots.
    pub snapshot_count: u64,
    pub creation_txg: u64,
    /// A clone's origin snapshot (`POOL/fs@snap`).
    pub origin: Option<String>,
}

/// Logical over physical bytes (zfs's compressratio); 1.0 when nothing is stored.
pub(crate) fn compress_ratio(uncompressed: u64, compressed: u64) -> f64 {
    if compressed == 0 {
        1.0
    } else {
        uncompressed as f64 / compressed as f64
    }
}

impl DatasetInfo {
    /// Logical over physical bytes of `used`, as zfs's compressratio. Metadata counts its
    /// physical size on both sides, so an empty file system reads 1.00.
    pub fn compress_ratio(&self) -> f64 {
        compress_ratio(self.uncompressed, self.compressed)
    }

    /// The same for `referenced` (zfs's refcompressratio).
    pub fn ref_compress_ratio(&self) -> f64 {
        compress_ratio(self.referenced_uncompressed, self.referenced_compressed)
    }
}

/// One property of one dataset, for `tarn get`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PropertyValue {
    pub dataset: String,
    pub property: String,
    /// The normalized value (exact numbers).
    pub value: String,
    pub source: PropertySource,
}

pub(super) use super::names::{depth, leaf_of, parent_of};

pub(super) fn kv_error(object: ObjectId) -> impl Fn(kv::KvError) -> PoolError {
    move |error| PoolError::Corrupt(format!("key/value object {object}: {error}"))
}

impl PoolCore {
    /// The full name of a relative one.
    pub fn full_name(&self, relative: &str) -> String {
        if relative.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.name, relative)
        }
    }

    /// The relative name of a full dataset name of this pool, validated.
    pub fn relative_name<'a>(&self, full: &'a str) -> Result<&'a str, PoolError> {
        if full.len() > DATASET_NAME_MAX {
            return Err(PoolError::BadDatasetName(
                full.into(),
                format!("longer than {DATASET_NAME_MAX} bytes"),
            ));
        }
        let relative = if full == self.name {
            ""
        } else if let Some(rest) = full
            .strip_prefix(self.name.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
        {
            rest
        } else {
            return Err(PoolError::DatasetNotFound(full.into()));
        };
        if !relative.is_empty() {
            for component in relative.split('/') {
                validate_name_component(component)
                    .map_err(|why| PoolError::BadDatasetName(full.into(), why))?;
            }
        }
        Ok(relative)
    }

    /// The relative name of a dataset a user is creating or renaming to: validated, and
    /// never a hidden receive clone's.
    pub(super) fn new_relative_name<'a>(&self, full: &'a str) -> Result<&'a str, PoolError> {
        let relative = self.relative_name(full)?;
        if crate::dataset::props::is_hidden_dataset(relative) {
            return Err(PoolError::BadDatasetName(
                full.into(),
                format!(
                    "{:?} is reserved for the hidden clone of a receive",
                    crate::dataset::props::RECEIVE_CLONE_NAME
                ),
            ));
        }
        Ok(relative)
    }

    /// Every dataset of the pool, the root first, parents before children.
    pub fn dataset_list(&self) -> Vec<(String, Arc<Dataset>)> {
        self.datasets
            .read()
            .iter()
            .map(|(name, dataset)| (name.clone(), dataset.clone()))
            .collect()
    }

    /// A dataset that is available (its object set open), or why not.
    pub(super) fn available_dataset(&self, relative: &str) -> Result<Arc<Dataset>, PoolError> {
        let dataset = self.dataset_by_relative(relative)?;
        match dataset.unavailable() {
            Some(why) => Err(PoolError::DatasetUnavailable(dataset.name().clone(), why)),
            None => Ok(dataset),
        }
    }

    pub(super) fn dataset_by_relative(&self, relative: &str) -> Result<Arc<Dataset>, PoolError> {
        self.datasets
            .read()
            .get(relative)
            .cloned()
            .ok_or_else(|| PoolError::DatasetNotFound(self.full_name(relative)))
    }

    /// Every descendant of a dataset (relative names), parents before children.
    pub(super) fn descendants_of(&self, relative: &str) -> Vec<String> {
        let prefix = format!("{relative}/");
        let mut names: Vec<String> = self
            .datasets
            .read()
            .keys()
            .filter(|name| !name.is_empty() && (relative.is_empty() || name.starts_with(&prefix)))
            .cloned()
            .collect();
        names.sort_by_key(|name| depth(name));
        names
    }

    pub(super) fn children_of(&self, relative: &str) -> Vec<String> {
        self.datasets
            .read()
            .keys()
            .filter(|name| !name.is_empty() && parent_of(name) == relative)
            .cloned()
            .collect()
    }

    /// Load every dataset below the root from the MOS (import). Nothing here fails the
    /// import: a child whose records or object set cannot be read is left unavailable or
    /// unlisted, and `damaged` says which and why, while the rest of the hierarchy loads.
    /// `loaded` holds the directory objects loaded so far (the root's first): the hierarchy
    /// is a tree, so a child naming one of them is damage, not a reason to recurse for ever.
    pub(super) fn load_children(
        &self,
        relative: &str,
        dir: &DatasetDirPhys,
        damaged: &mut Vec<String>,
        loaded: &mut HashSet<ObjectId>,
    ) {
        let entries = match self.list_children(dir) {
            Ok(entries) => entries,
            Err(error) => {
                damaged.push(format!(
                    "the children of dataset {} cannot be listed: {error}",
                    self.full_name(relative)
                ));
                return;
            }
        };
        for entry in entries {
            let Some(name) = String::from_utf8(entry.key.clone())
                .ok()
                .filter(|name| validate_name_component(name).is_ok())
            else {
                damaged.push(format!(
                    "dataset {} has a child with an invalid name {:?}",
                    self.full_name(relative),
                    String::from_utf8_lossy(&entry.key)
                ));
                continue;
            };
            let Ok(value) = <[u8; 8]>::try_from(entry.value.as_slice()) else {
                damaged.push(format!(
                    "dataset {}: child entry {name:?} is not an object number",
                    self.full_name(relative)
                ));
                continue;
            };
            let child = if relative.is_empty() {
                name
            } else {
                format!("{relative}/{name}")
            };
            let child_object = ObjectId(u64::from_le_bytes(value));
            if !loaded.insert(child_object) {
                damaged.push(format!(
                    "dataset {} names directory {child_object}, which is loaded already",
                    self.full_name(&child)
                ));
                continue;
            }
            match self.open_dataset(&child, child_object) {
                Ok(child_dir) => self.load_children(&child, &child_dir, damaged, loaded),
                Err(error) => damaged.push(format!(
                    "dataset {} and its children cannot be loaded: {error}",
                    self.full_name(&child)
                )),
            }
        }
    }

    fn list_children(&self, dir: &DatasetDirPhys) -> Result<Vec<kv::KvEntry>, PoolError> {
        Ok(crate::object::adapters::kv_entries(
            &self.mos,
            dir.children_object,
        )?)
    }

    /// Open one dataset (its records and object set) and add it to the table. Fails only when
    /// the records cannot be read; an object set that cannot be opened leaves the dataset in
    /// the table, unavailable, with the reason.
    pub(super) fn open_dataset(
        &self,
        relative: &str,
        dir_object: ObjectId,
    ) -> Result<DatasetDirPhys, PoolError> {
        let corrupt = |what: &str, error: String| {
            PoolError::Corrupt(format!(
                "dataset {:?}: {what}: {error}",
                self.full_name(relative)
            ))
        };
        let dir = DatasetDirPhys::decode(&self.mos.bonus(dir_object)?)
            .map_err(|error| corrupt("directory record", error.to_string()))?;
        let phys = DatasetPhys::decode(&self.mos.bonus(dir.head_dataset_object)?)
            .map_err(|error| corrupt("dataset record", error.to_string()))?;
        if phys.dir_object != dir_object {
            return Err(corrupt(
                "dataset record",
                format!(
                    "names directory {} instead of {dir_object}",
                    phys.dir_object
                ),
            ));
        }
        let dataset = Dataset::new(
            self.full_name(relative),
            dir.head_dataset_object,
            phys.clone(),
            dir.clone(),
            self.freer.clone(),
        );
        match ObjectSet::open(self.io.clone(), &phys.root, dataset.clone(), 1) {
            Ok(objset) => {
                dataset.attach_objset(Arc::new(objset));
                self.attach_open_context(&dataset);
            }
            Err(error) => dataset.set_unavailable(format!("object set: {error}")),
        }
        if let Err(error) = self.load_snapshots(&dataset) {
            // A head whose snapshots cannot be loaded must not sync: its kills would miss
            // the deadlist.
            dataset.detach_objset();
            dataset.set_unavailable(format!("snapshots: {error}"));
        }
        if let Err(error) = self.load_livelist(&dataset) {
            // Likewise: its writes would miss the livelist a destroy relies on.
            dataset.detach_objset();
            dataset.set_unavailable(format!("livelist: {error}"));
        }
        self.datasets
            .write()
            .insert(relative.to_string(), dataset.clone());
        self.apply_copies(relative);
        self.load_limits(&dataset, None)?;
        Ok(dir)
    }

    /// Open-context half of create: see the module documentation.
    pub(super) fn create_dataset_in(
        &self,
        relative: &str,
        properties: &[(Property, String)],
        format: bool,
    ) -> Result<(), PoolError> {
        let parent = self.dataset_by_relative(parent_of(relative))?;
        let hold = self.txgs.assign()?;
        let tx = hold.tx();
        let (dir_object, dir, dataset_object, mut phys) =
            create_dataset_records(&self.mos, &tx, &self.tunables, parent.dir_object)?;
        if !format {
            // Filled by a receive: inconsistent until its snapshot is taken; a crash before
            // that leaves it for import to destroy.
            phys.flags |= crate::dataset::phys::DS_FLAG_INCONSISTENT;
            self.mos
                .set_bonus(&tx, dataset_object, ObjectType::Dataset, &phys.encode())?;
        }
        {
            let object = parent.dir().children_object;
            let mut handle = KvObject::new(&self.mos, object, Some(tx))?;
            kv::insert(
                &mut handle,
                leaf_of(relative).as_bytes(),
                &dir_object.0.to_le_bytes(),
            )
            .map_err(kv_error(object))?;
        }
        let dataset = Dataset::new(
            self.full_name(relative),
            dataset_object,
            phys,
            dir,
            self.freer.clone(),
        );
        for (property, value) in properties {
            self.write_property(&dataset, tx, *property, Some(value))?;
        }
        let objset = Arc::new(ObjectSet::create(
            self.io.clone(),
            ObjsetKind::FileSystem,
            dataset.clone(),
            1,
            tx.txg,
        ));
        dataset.attach_objset(objset.clone());
        self.attach_open_context(&dataset);
        // Owned by the parent's root directory's owner, as zfs create does for root.
        if format {
            FileSystem::format_in(&objset, tx, 0, 0)?;
        }
        self.datasets
            .write()
            .insert(relative.to_string(), dataset.clone());
        self.apply_copies(relative);
        // Created for the held txg: the totals of a txg syncing meanwhile, whose MOS lacks
        // the dataset, count no reservation of it.
        self.new_dataset_limits(&dataset, properties, Some(tx.txg))?;
        drop(hold);
        Ok(())
    }

    /// A clone's origin: the head holding it and the snapshot (None for a dataset that is not a
    /// clone, or whose origin could not be found at import). The origin is recorded in the
    /// dataset (`Dataset::origin`); its head is the dataset whose directory the snapshot's
    /// record names.
    pub(super) fn origin_of(
        &self,
        dataset: &Dataset,
    ) -> Option<(Arc<Dataset>, Arc<crate::dataset::Snapshot>)> {
        let origin = dataset.origin()?;
        let head_dir = origin.phys().dir_object;
        let head = self
            .dataset_list()
            .into_iter()
            .map(|(_, head)| head)
            .chain(
                self.pending_destroys
                    .lock()
                    .iter()
                    .map(|(_, _, head)| head.clone()),
            )
            .find(|head| head.dir_object == head_dir)?;
        Some((head, origin))
    }

    /// At import, once every dataset is loaded: link each clone to the origin snapshot its
    /// directory names (one pass over the snapshots). An origin that is not there is damage:
    /// reported, and the clone's space is then counted as if it had none.
    pub(super) fn resolve_origins(&self, damaged: &mut Vec<String>) {
        let datasets = self.dataset_list();
        let wanted: HashSet<ObjectId> = datasets
            .iter()
            .map(|(_, dataset)| dataset.dir().origin_snapshot_object)
            .filter(|object| object.0 != 0)
            .collect();
        if wanted.is_empty() {
            return;
        }
        let mut snapshots = std::collections::HashMap::new();
        for (_, head) in &datasets {
            for snapshot in head.snapshots() {
                if wanted.contains(&snapshot.object) {
                    snapshots.insert(snapshot.object, snapshot);
                }
            }
        }
        for (_, dataset) in &datasets {
            let object = dataset.dir().origin_snapshot_object;
            if object.0 == 0 {
                continue;
            }
            match snapshots.get(&object) {
                Some(origin) => dataset.resolve_origin(origin.clone()),
                None => damaged.push(format!(
                    "clone {}: its origin snapshot (record {object}) is not in the pool",
                    dataset.name()
                )),
            }
        }
    }

    /// The datasets whose records the MOS of `txg` holds, by relative name: the table, and
    /// those a destroy took out of it for a later txg. A destroy leaves the table in open
    /// context, while the txg before its own may still be syncing; that txg's MOS keeps the
    /// dataset's records and its name among its parent's children, so its space belongs in
    /// that txg's totals. (A dataset created for a later txg is in the table already, with
    /// no space until its own txg syncs: it adds nothing.)
    fn datasets_in_txg(&self, txg: Txg) -> Vec<(String, Arc<Dataset>)> {
        let pending = self.pending_destroys.lock();
        let mut datasets = self.dataset_list();
        datasets.extend(
            pending
                .iter()
                .filter(|(when, ..)| *when > txg)
                .map(|(_, name, dataset)| (name.clone(), dataset.clone())),
        );
        datasets
    }

    /// Recompute every directory's totals (its dataset, its snapshots and its descendants)
    /// and used breakdown, and rewrite the records that changed, in syncing context.
    pub(super) fn sync_directory_totals(&self, txg: Txg) -> Result<(), PoolError> {
        let datasets = self.datasets_in_txg(txg);
        let mut totals: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
        let mut by_depth: Vec<&(String, Arc<Dataset>)> = datasets.iter().collect();
        by_depth.sort_by_key(|(name, _)| std::cmp::Reverse(depth(name)));
        let mut own_spaces = Vec::with_capacity(by_depth.len());
        for (name, dataset) in &by_depth {
            let space = dataset.own_space();
            #[cfg(debug_assertions)]
            if dataset.kept_space_matches() == Some(false) {
                panic!(
                    "dataset {}: kept space {:?} differs from a fresh one {:?}",
                    dataset.name(),
                    dataset.own_space(),
                    dataset.compute_own_space()
                );
            }
            own_spaces.push(super::limits::ChargeInput::of(
                name,
                dataset,
                space,
                Some(txg),
            ));
        }
        let charged = super::limits::charged_space(own_spaces.iter().copied());
        for ((name, dataset), input) in by_depth.into_iter().zip(&own_spaces) {
            let space = &input.own;
            let own = space.total();
            let entry = totals.entry(name.as_str()).or_default();
            entry.0 += own.used_bytes;
            entry.1 += own.compressed_bytes;
            entry.2 += own.uncompressed_bytes;
            let all = *entry;
            let figures = charged[name.as_str()];
            let breakdown = crate::dataset::phys::UsedBreakdown {
                dataset: space.dataset.used_bytes,
                snapshots: space.snapshots.used_bytes,
                children: figures.children,
                refreservation: figures.refreservation,
                child_reservation: figures.child_reservation,
            };
            if let Some(dir) = dataset.set_dir_totals(figures.used, all.1, all.2, breakdown) {
                self.mos.set_bonus(
                    &Tx::syncing(txg),
                    dataset.dir_object,
                    ObjectType::DatasetDir,
                    &dir.encode(),
                )?;
            }
            if !name.is_empty() {
                let parent = totals.entry(parent_of(name)).or_default();
                parent.0 += all.0;
                parent.1 += all.1;
                parent.2 += all.2;
            }
        }
        self.keep_charged(&charged, totals.get("").map_or(0, |root| root.0));
        Ok(())
    }

    /// What a file system can still write: free space outside the slop, as the data bytes it
    /// holds (deflated on RAID-Z, [`crate::vdev::VdevTree::deflated_space`]), less what is
    /// dirty and not yet allocated (zfs's `avail`; `statfs` reports the same). Reads the
    /// space counters, so statfs never waits for the sync thread's metaslab group locks.
    pub fn available_bytes(&self) -> u64 {
        let totals = self.io.space.counters();
        let raw = totals
            .free
            .saturating_sub(totals.slop(self.tunables.spa_min_slop));
        self.io
            .vdevs
            .deflated_space(raw)
            .saturating_sub(self.txgs.dirty_total())
    }

    /// Connect a dataset's open-context writers to the txg layer (dirty accounting, throttle)
    /// and to space admission (ENOSPC).
    pub(super) fn attach_open_context(&self, dataset: &Arc<Dataset>) {
        let Some(objset) = dataset.try_objset() else {
            return;
        };
        objset.set_dirty_accounting(self.txgs.clone());
        if self
            .feature_refcount(super::features::USER_ACCOUNTING_FEATURE)
            .is_some()
        {
            objset.set_owner_accounting(Some(crate::fs::phys::znode_owners));
        }
        objset.set_reservation(Arc::new(super::PoolReservation {
            io: self.io.clone(),
            txgs: self.txgs.clone(),
            held_back: self.held_back.clone(),
            dataset: Arc::downgrade(dataset),
            limits: self.limits.clone(),
        }));
        if objset.log::<crate::zil::Zil>().is_none() && !self.readonly {
            objset.attach_log(Arc::new(crate::zil::Zil::new(
                self.io.clone(),
                self.mos.clone(),
                self.txgs.clone(),
                dataset.phys().guid.0,
            )));
        }
    }
}

/// Create a dataset's MOS objects in `tx`: its children and properties objects, its directory
/// record (naming `parent_dir`, 0 for a pool's root) and its head dataset record with an empty
/// object set. Returns (directory object, directory record, dataset object, dataset record).
pub(super) fn create_dataset_records(
    mos: &ObjectSet,
    tx: &Tx,
    tunables: &crate::tunables::Tunables,
    parent_dir: ObjectId,
) -> Result<(ObjectId, DatasetDirPhys, ObjectId, DatasetPhys), PoolError> {
    let now = now_seconds();
    let mut dir = DatasetDirPhys {
        flags: crate::dataset::phys::DD_FLAG_USED_BREAKDOWN,
        parent_dir_object: parent_dir,
        children_object: kv_create(mos, tx, tunables)?,
        properties_object: kv_create(mos, tx, tunables)?,
        creation_time: now,
        ..Default::default()
    };
    let dir_object = mos.create_object(
        tx,
        mos_props(ObjectType::DatasetDir, 512, tunables, Compression::Lz4),
        ObjectType::DatasetDir,
        &dir.encode(),
    )?;
    let phys = DatasetPhys::new_head(dir_object, now, tx.txg, Guid::random());
    let dataset_object = mos.create_object(
        tx,
        mos_props(ObjectType::Dataset, 512, tunables, Compression::Lz4),
        ObjectType::Dataset,
        &phys.encode(),
    )?;
    dir.head_dataset_object = dataset_object;
    mos.set_bonus(tx, dir_object, ObjectType::DatasetDir, &dir.encode())?;
    Ok((dir_object, dir, dataset_object, phys))
}

impl Pool {
    pub(super) fn writable(&self) -> Result<(), PoolError> {
        if self.core.readonly {
            return Err(PoolError::ReadOnly);
        }
        Ok(())
    }

    /// Create a file system `full_name` (`POOL/a/b`) with local properties. With
    /// `create_parents`, missing ancestors are created too (with no local properties) and an
    /// existing target is not an error. Returns the full names created, parents first. The change is durable on return.
    pub fn create_dataset(
        &self,
        full_name: &str,
        settings: &[(String, String)],
        create_parents: bool,
    ) -> Result<Vec<String>, PoolError> {
        self.writable()?;
        let core = &self.core;
        let relative = core.new_relative_name(full_name)?.to_string();
        if relative.is_empty() {
            return Err(PoolError::DatasetExists(full_name.into()));
        }
        let (later, properties) = core.split_new_settings(settings, full_name)?;
        let _namespace = core.namespace.lock();
        if core.datasets.read().contains_key(&relative) {
            // As zfs create -p: an existing target is success, with nothing created.
            if create_parents {
                return Ok(Vec::new());
            }
            return Err(PoolError::DatasetExists(full_name.into()));
        }
        let mut missing = Vec::new();
        let mut at = parent_of(&relative);
        while !at.is_empty() && !core.datasets.read().contains_key(at) {
            missing.push(at.to_string());
            at = parent_of(at);
        }
        if !missing.is_empty() && !create_parents {
            return Err(PoolError::DatasetNotFound(core.full_name(&missing[0])));
        }
        core.check_space(
            super::admission::SpaceCheck::Normal,
            missing.len() + 1,
            &format!("create {full_name}"),
        )?;
        core.check_new_limits(at, 0, &properties)
            .map_err(|error| limit_error(full_name, error))?;
        let mut created = Vec::new();
        for parent in missing.iter().rev() {
            core.create_dataset_in(parent, &[], true)?;
            created.push(core.full_name(parent));
        }
        core.create_dataset_in(&relative, &properties, true)?;
        created.push(full_name.to_string());
        drop(_namespace);
        for (name, value) in &later {
            self.set_property(full_name, name, Some(value))?;
        }
        self.sync()?;
        Ok(created)
    }

    /// Every dataset's figures, parents before children (the pool's available space applies
    /// to each).
    pub fn datasets(&self) -> Vec<DatasetInfo> {
        let core = &self.core;
        let mut list = core.dataset_list();
        list.retain(|(relative, _)| !crate::dataset::props::is_hidden_dataset(relative));
        // Children right after their parent (`a`, `a/b`, `a-x`), as zfs list orders them.
        list.sort_by(|(a, _), (b, _)| a.split('/').cmp(b.split('/')));
        let own: Vec<OwnSpace> = list
            .iter()
            .map(|(_, dataset)| dataset.own_space())
            .collect();
        let charged =
            super::limits::charged_space(list.iter().zip(&own).map(|((name, dataset), own)| {
                super::limits::ChargeInput::of(name, dataset, *own, None)
            }));
        list.iter()
            .map(|(relative, dataset)| {
                let phys = dataset.phys();
                let prefix = format!("{relative}/");
                let mut all = crate::object::bpobj::BpSpace::default();
                let mut mine = OwnSpace::default();
                for ((name, _), space) in list.iter().zip(&own).filter(|((name, _), _)| {
                    name == relative || relative.is_empty() || name.starts_with(&prefix)
                }) {
                    all.add(space.total());
                    if name == relative {
                        mine = *space;
                    }
                }
                let figures = charged.get(relative.as_str()).copied().unwrap_or_default();
                DatasetInfo {
                    name: dataset.name().clone(),
                    used: figures.used,
                    referenced: phys.referenced_bytes,
                    available: core.dataset_available(dataset),
                    compressed: all.compressed_bytes,
                    uncompressed: all.uncompressed_bytes,
                    referenced_compressed: phys.compressed_bytes,
                    referenced_uncompressed: phys.uncompressed_bytes,
                    creation_time: phys.creation_time,
                    guid: phys.guid.0,
                    used_by_dataset: mine.dataset.used_bytes,
                    used_by_snapshots: mine.snapshots.used_bytes,
                    used_by_children: figures.children + figures.child_reservation,
                    used_by_refreservation: figures.refreservation,
                    limits: dataset.limits.settings(),
                    origin: core
                        .origin_of(dataset)
                        .map(|(head, origin)| format!("{}@{}", head.name(), origin.short_name())),
                    written: core.head_written(dataset),
                    snapshot_count: dataset.snapshots().len() as u64,
                    creation_txg: phys.creation_txg.0,
                }
            })
            .collect()
    }

    /// Datasets whose object set could not be opened at import (full name, why): listed,
    /// never mounted, synced or destroyed (the rest of the pool imports).
    pub fn unavailable_datasets(&self) -> Vec<(String, String)> {
        self.core
            .dataset_list()
            .into_iter()
            .filter_map(|(_, dataset)| Some((dataset.name().clone(), dataset.unavailable()?)))
            .collect()
    }

    /// Whether a dataset exists.
    pub fn has_dataset(&self, full_name: &str) -> bool {
        self.core
            .relative_name(full_name)
            .is_ok_and(|relative| self.core.datasets.read().contains_key(relative))
    }

    /// The object set of a dataset.
    pub fn dataset_objset(&self, full_name: &str) -> Result<Arc<ObjectSet>, PoolError> {
        let relative = self.core.relative_name(full_name)?;
        Ok(self.core.available_dataset(relative)?.objset())
    }

    /// Open a dataset's file system (its unlinked set drained, as after a crash), with object
    /// properties for new files taken from the dataset's properties.
    pub fn open_file_system(&self, full_name: &str) -> Result<FileSystem, PoolError> {
        self.writable()?;
        let relative = self.core.relative_name(full_name)?.to_string();
        let dataset = self.core.available_dataset(&relative)?;
        let fs = FileSystem::open(dataset.objset(), self.core.txgs.clone())?;
        self.apply_properties(full_name, &fs)?;
        // statfs as zfs's df: available = the dataset's avail, size = referenced + avail. The
        // pool is held weakly: a mounted file system must not keep it from closing.
        let core = Arc::downgrade(&self.core);
        let dataset = Arc::downgrade(&dataset);
        fs.set_space_source(Arc::new(move || {
            match (core.upgrade(), dataset.upgrade()) {
                (Some(core), Some(dataset)) => {
                    let available_bytes = core.dataset_available(&dataset);
                    SpaceFigures {
                        size_bytes: dataset.referenced_bytes() + available_bytes,
                        available_bytes,
                    }
                }
                _ => SpaceFigures::default(),
            }
        }));
        Ok(fs)
    }
}
