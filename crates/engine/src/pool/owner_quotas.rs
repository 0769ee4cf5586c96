//! User, group and project quotas for the pool (OpenZFS zfs_userquota_prop_prefixes,
//! zfs_id_overquota, zfs_userspace_many): setting and reading them, the usage listing of
//! `tarn userspace`, and their enforcement at write admission.
//!
//! # Enforcement
//! A file system keeps usage by owner on disk, updated by each sync (`object/accounting.rs`).
//! Admission adds to it what it has admitted for each owner in txgs not yet synced, so a
//! write is refused with "quota exceeded" when the owner's usage, what is in flight for it
//! and the write's own estimate together pass the quota ([`PoolCore::owner_admit_write`]):
//! like a dataset quota, no write is accepted that would take the owner's usage past it once
//! synced. What makes it a little late (OpenZFS's check looks at synced usage alone, so it is
//! late by the txgs in flight): write-backs of a kernel cache are counted but never refused
//! (their write(2) has returned), so an owner may pass a byte quota by the mount's dirty
//! bound (`tarn-fuse` write_space.rs), and a write's estimate is what it is checked with. A
//! create, a chown and a change of project are refused when an owner they give the node to
//! is at or over its byte quota, or at its object quota ([`PoolCore::owner_admits`]), as zfs
//! refuses them; admitted new nodes count in flight like bytes.
//!
//! Nothing is charged when the dataset sets no such quota: the write path looks at one flag.

use std::collections::{BTreeMap, HashMap};

use crate::dataset::owner_quotas::{OwnerField, OwnerMeasure, OwnerProperty};
use crate::dataset::props::PropertySource;
use crate::dataset::Dataset;
use crate::object::accounting::OwnerUsage;
use crate::object::adapters::KvObject;
use crate::object::kv;
use crate::object::owners::{OwnerKind, Owners};
use crate::object::{Admission, ObjectError, ObjectSet};
use crate::types::Txg;

use super::datasets::kv_error;
use super::features::USER_ACCOUNTING_FEATURE;
use super::{Pool, PoolCore, PoolError};

/// One owner's line of `tarn userspace` (`groupspace`, `projectspace`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerSpace {
    pub kind: OwnerKind,
    pub id: u32,
    /// Bytes charged (what `du` counts of the owner's nodes).
    pub used: u64,
    pub quota: Option<u64>,
    /// Nodes owned.
    pub objects: u64,
    pub object_quota: Option<u64>,
}

/// Entries read per listing call of a properties object.
const LIST_BATCH: usize = 1024;

impl PoolCore {
    /// Read a dataset's owner quotas from its properties object into memory (import, load,
    /// set).
    pub(super) fn load_owner_quotas(&self, dataset: &Dataset) -> Result<(), PoolError> {
        let object = dataset.dir().properties_object;
        let handle = KvObject::new(&self.mos, object, None)?;
        let mut limits = HashMap::new();
        let mut cookie = 0;
        loop {
            let entries = kv::list(&handle, cookie, LIST_BATCH).map_err(kv_error(object))?;
            let Some(last) = entries.last() else {
                break;
            };
            cookie = last.cookie + 1;
            for entry in entries {
                let Some(property) = std::str::from_utf8(&entry.key)
                    .ok()
                    .and_then(OwnerProperty::parse)
                    .filter(|property| property.field == OwnerField::Quota)
                else {
                    continue;
                };
                let limit = std::str::from_utf8(&entry.value)
                    .ok()
                    .and_then(|text| text.parse::<u64>().ok())
                    .filter(|limit| *limit > 0)
                    .ok_or_else(|| {
                        PoolError::Corrupt(format!(
                            "dataset {}: stored {} is not a positive number",
                            dataset.name(),
                            property.name()
                        ))
                    })?;
                limits.insert(((property.kind, property.id), property.measure), limit);
            }
        }
        dataset.owner_quotas.set_all(limits);
        Ok(())
    }

    /// Admit a write's `charge` bytes for `owners` in `txg` (module documentation): refused
    /// with `QuotaExceeded` (ordinary writes only) when it would take an owner past a byte
    /// quota; counted in flight when admitted.
    pub(super) fn owner_admit_write(
        dataset: &Dataset,
        objset: &ObjectSet,
        txg: Txg,
        owners: Owners,
        charge: u64,
        admission: Admission,
    ) -> Result<(), ObjectError> {
        if !dataset.owner_quotas.any() || admission == Admission::Replay {
            return Ok(());
        }
        // Only the owners with a byte quota are charged in flight: nothing else reads it (an
        // owner given a quota later has its usage of the last sync counted, not the txgs in
        // flight then, so it may pass the new quota by those).
        let limits = dataset.owner_quotas.limits_of(owners, OwnerMeasure::Bytes);
        let mut kinds = [OwnerKind::User; 3];
        let mut quotas = [0u64; 3];
        let mut count = 0;
        for (kind, limit) in OwnerKind::ALL.into_iter().zip(limits) {
            if let Some(limit) = limit {
                kinds[count] = kind;
                quotas[count] = limit;
                count += 1;
            }
        }
        if count == 0 {
            return Ok(());
        }
        let enforce = admission == Admission::Ordinary;
        let mut next = 0;
        let admitted = objset.admit_owner_charge(
            txg,
            owners,
            &kinds[..count],
            OwnerUsage {
                bytes: charge,
                objects: 0,
            },
            &mut |_, usage| {
                let quota = quotas[next];
                next += 1;
                !enforce || usage.bytes.saturating_add(charge) <= quota
            },
        )?;
        if admitted {
            Ok(())
        } else {
            Err(ObjectError::QuotaExceeded)
        }
    }

    /// Whether `owners` (those that differ from `previous`) may be given `objects` more
    /// nodes and `bytes` more bytes: refused
    /// when an owner is at or over its byte quota (or `bytes` would take it over), or
    /// `objects` would take it past its object quota. New nodes are counted in flight in
    /// `txg` when admitted (the txg the caller's change will join); a look at `bytes` alone
    /// charges nothing.
    pub(super) fn owner_admits(
        dataset: &Dataset,
        txg: Txg,
        owners: Owners,
        previous: Option<Owners>,
        objects: u64,
        bytes: u64,
    ) -> Result<(), ObjectError> {
        if !dataset.owner_quotas.any() {
            return Ok(());
        }
        let Some(objset) = dataset.try_objset() else {
            return Ok(());
        };
        // A chown asks only for the owners it changes, as zfs_setattr does.
        let kinds: Vec<OwnerKind> = OwnerKind::ALL
            .into_iter()
            .filter(|kind| previous.is_none_or(|previous| previous.id(*kind) != owners.id(*kind)))
            .collect();
        let admitted = objset.admit_owner_charge(
            txg,
            owners,
            &kinds,
            OwnerUsage { bytes: 0, objects },
            &mut |key, usage| {
                let over_bytes = dataset
                    .owner_quotas
                    .limit(key, OwnerMeasure::Bytes)
                    .is_some_and(|quota| usage.bytes.saturating_add(bytes.max(1)) > quota);
                let over_objects = objects > 0
                    && dataset
                        .owner_quotas
                        .limit(key, OwnerMeasure::Objects)
                        .is_some_and(|quota| usage.objects.saturating_add(objects) > quota);
                !over_bytes && !over_objects
            },
        )?;
        if admitted {
            Ok(())
        } else {
            Err(ObjectError::QuotaExceeded)
        }
    }
}

impl Pool {
    /// Set (`value` Some) or remove (`None`, or `none`/`0`) an owner quota, `userquota@1000=10G`
    /// (the ID numeric: the command line resolves names). Durable on return.
    pub fn set_owner_quota(
        &self,
        full_name: &str,
        name: &str,
        value: Option<&str>,
    ) -> Result<(), PoolError> {
        self.writable()?;
        let (property, limit) =
            OwnerProperty::parse_quota_setting(name, value).map_err(PoolError::BadProperty)?;
        let core = &self.core;
        let relative = core.relative_name(full_name)?.to_string();
        if relative.contains('@') {
            return Err(PoolError::BadProperty(format!(
                "cannot set {name} on snapshot {full_name}"
            )));
        }
        {
            let _namespace = core.namespace.lock();
            let dataset = core.dataset_by_relative(&relative)?;
            if limit.is_some() {
                core.require_feature(
                    USER_ACCOUNTING_FEATURE,
                    &format!("cannot set property for '{full_name}'"),
                    PoolError::BadProperty,
                )?;
            }
            let hold = core.hold_for_setting(name, full_name)?;
            let object = dataset.dir().properties_object;
            let mut handle = KvObject::new(&core.mos, object, Some(hold.tx()))?;
            let key = property.name();
            match limit {
                Some(limit) => {
                    kv::upsert(&mut handle, key.as_bytes(), limit.to_string().as_bytes())
                        .map_err(kv_error(object))?;
                }
                None => {
                    kv::remove(&mut handle, key.as_bytes()).map_err(kv_error(object))?;
                }
            }
            drop(handle);
            drop(hold);
            core.load_owner_quotas(&dataset)?;
        }
        self.sync()?;
        Ok(())
    }

    /// An owner property's value: a quota (`none` when unset, source local or default) or a
    /// usage figure (bytes or objects as of the last sync; source none).
    pub fn owner_property(
        &self,
        full_name: &str,
        name: &str,
    ) -> Result<(String, PropertySource), PoolError> {
        let property = parse_owner_property(name)?;
        let dataset = self.head_of(full_name)?;
        let key = (property.kind, property.id);
        match property.field {
            OwnerField::Quota => Ok(match dataset.owner_quotas.limit(key, property.measure) {
                Some(limit) => (limit.to_string(), PropertySource::Local),
                None => ("none".to_string(), PropertySource::Default),
            }),
            OwnerField::Used => {
                let usage = self
                    .owner_usage(full_name, property.kind)?
                    .get(&property.id)
                    .copied()
                    .unwrap_or_default();
                let value = match property.measure {
                    OwnerMeasure::Bytes => usage.bytes,
                    OwnerMeasure::Objects => usage.objects,
                };
                Ok((value.to_string(), PropertySource::None))
            }
        }
    }

    /// The file system `full_name` names, or whose snapshot it names (its quotas are the
    /// snapshot's too).
    fn head_of(&self, full_name: &str) -> Result<std::sync::Arc<Dataset>, PoolError> {
        let head = full_name.split('@').next().unwrap_or(full_name);
        self.core
            .dataset_by_relative(self.core.relative_name(head)?)
    }

    /// The owner quotas set on a file system, as (property name, bytes or nodes), for
    /// `send -p`.
    pub fn local_owner_quotas(&self, full_name: &str) -> Result<Vec<(String, String)>, PoolError> {
        let mut quotas: Vec<(String, String)> = self
            .head_of(full_name)?
            .owner_quotas
            .all()
            .into_iter()
            .map(|(((kind, id), measure), limit)| {
                let property = OwnerProperty {
                    kind,
                    measure,
                    field: OwnerField::Quota,
                    id,
                };
                (property.name(), limit.to_string())
            })
            .collect();
        quotas.sort();
        Ok(quotas)
    }

    /// The synced usage of every owner of kind `kind` in a file system or snapshot.
    fn owner_usage(
        &self,
        full_name: &str,
        kind: OwnerKind,
    ) -> Result<BTreeMap<u32, OwnerUsage>, PoolError> {
        let objset = if full_name.contains('@') {
            self.snapshot_objset(full_name)?
        } else {
            self.dataset_objset(full_name)?
        };
        objset.owner_usage_all(kind)?.ok_or_else(|| {
            PoolError::BadProperty(format!(
                "{full_name} keeps no usage by owner (it was last written without \
                 feature@user_accounting)"
            ))
        })
    }

    /// `tarn userspace` (`groupspace`, `projectspace`): every owner of kind `kind` that owns
    /// something or has a quota, by ID.
    pub fn owner_space(
        &self,
        full_name: &str,
        kind: OwnerKind,
    ) -> Result<Vec<OwnerSpace>, PoolError> {
        let usage = self.owner_usage(full_name, kind)?;
        let quotas = self.head_of(full_name)?.owner_quotas.all();
        let mut rows: BTreeMap<u32, OwnerSpace> = BTreeMap::new();
        for (id, usage) in usage {
            let entry = rows.entry(id).or_insert_with(|| empty_row(kind, id));
            entry.used = usage.bytes;
            entry.objects = usage.objects;
        }
        for (((of_kind, id), measure), limit) in quotas {
            if of_kind != kind {
                continue;
            }
            let entry = rows.entry(id).or_insert_with(|| empty_row(kind, id));
            match measure {
                OwnerMeasure::Bytes => entry.quota = Some(limit),
                OwnerMeasure::Objects => entry.object_quota = Some(limit),
            }
        }
        Ok(rows.into_values().collect())
    }
}

fn empty_row(kind: OwnerKind, id: u32) -> OwnerSpace {
    OwnerSpace {
        kind,
        id,
        used: 0,
        quota: None,
        objects: 0,
        object_quota: None,
    }
}

fn parse_owner_property(name: &str) -> Result<OwnerProperty, PoolError> {
    OwnerProperty::parse_named(name).map_err(PoolError::BadProperty)
}
