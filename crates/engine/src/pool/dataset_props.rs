//! Dataset properties as the pool stores them (OpenZFS dsl_prop.c): the settable properties'
//! local settings and received values, their inheritance, and `set`, `inherit` and
//! `inherit -S`.
//!
//! # On disk
//! Each dataset directory has a properties object in the MOS (key/value: property name ->
//! the setting as normalized text). Local settings are stored under the property's name,
//! received values and explicit inherits under suffixed keys (`dataset::props`, "Received
//! values"); a value read back is parsed again, since it comes from disk.
//!
//! # Effective value
//! A dataset's local setting, else its received value (unless an explicit inherit masks it),
//! else (for a property that inherits) the nearest ancestor's value found the same way, else
//! the default. An inherited `mountpoint` gains the dataset's names below the ancestor
//! that set it, so a child mounts below its parent.
//!
//! # Set and inherit
//! Under the namespace lock, in one txg, with the space check of an administrative change;
//! durable on return. A new `copies` reaches every object set at once (it is inherited);
//! the other properties reach an open file system through [`Pool::apply_properties`].
//! The read-only figures (`used`, `compressratio`, ...) are not stored here: they are computed
//! from the records (`crate::properties`).
//!
//! # User properties
//! `module:name=value` settings (`dataset::props`, "User properties") live in the same object
//! under their names and always inherit. The first one set activates feature
//! `user_properties` (compatible: a build without it ignores keys it does not ask for, though
//! its `check` would report them as invalid stored properties).

use crate::dataset::props::{
    checksum_of, compression_of, inherit_key, is_user_property_name, limit_bytes, received_key,
    validate_user_property, Property, PropertySource, StoredKey,
};
use crate::dataset::Dataset;
use crate::fs::{FileSystem, FsConfig, XattrLayout};
use crate::object::adapters::KvObject;
use crate::object::kv;
use crate::object::Tx;

use super::datasets::{kv_error, parent_of, PropertyValue};
use super::{Pool, PoolCore, PoolError};

/// A new dataset's settings: those set once it exists (owner quotas and user properties, as
/// given) and the native properties made with it (parsed).
pub(super) type SplitSettings = (Vec<(String, String)>, Vec<(Property, String)>);

impl PoolCore {
    /// Give a dataset's object set its effective `copies` property, so that its own metadata
    /// (dnode blocks, header) gets one copy more (`object::write_copies`). Best effort: a
    /// property object that cannot be read leaves the set at its current setting.
    pub(super) fn apply_copies(&self, relative: &str) {
        let Ok(dataset) = self.dataset_by_relative(relative) else {
            return;
        };
        if let Ok((value, _)) = self.property(relative, Property::Copies) {
            if let (Ok(copies), Some(objset)) = (value.parse::<u8>(), dataset.try_objset()) {
                objset.set_copies(copies);
            }
        }
    }

    /// After `copies` changed on a dataset: it is inherited, so every dataset may see a new
    /// value ([`PoolCore::apply_copies`] on each).
    fn apply_copies_everywhere(&self) {
        for (name, _) in self.dataset_list() {
            self.apply_copies(&name);
        }
    }

    /// A received value of a property, validated (it comes from disk), masked or not.
    pub(super) fn received_setting(
        &self,
        dataset: &Dataset,
        property: Property,
    ) -> Result<Option<String>, PoolError> {
        let handle = KvObject::new(&self.mos, dataset.dir().properties_object, None)?;
        self.stored_setting(dataset, &handle, property, &received_key(property.name()))
    }

    /// What dataset `dataset` itself holds for `property`: its local setting, else its
    /// received value unless an explicit inherit masks it (`dataset/props.rs`, "Received
    /// values"), validated; `true` with a received value.
    pub(super) fn level_property(
        &self,
        dataset: &Dataset,
        property: Property,
    ) -> Result<Option<(String, bool)>, PoolError> {
        let object = dataset.dir().properties_object;
        let handle = KvObject::new(&self.mos, object, None)?;
        if let Some(value) = self.stored_setting(dataset, &handle, property, property.name())? {
            return Ok(Some((value, false)));
        }
        let name = property.name();
        if kv::lookup(&handle, inherit_key(name).as_bytes())
            .map_err(kv_error(object))?
            .is_some()
        {
            return Ok(None);
        }
        Ok(self
            .stored_setting(dataset, &handle, property, &received_key(name))?
            .map(|value| (value, true)))
    }

    /// The value stored under `key` for `property` in `dataset`'s properties object, validated.
    fn stored_setting(
        &self,
        dataset: &Dataset,
        handle: &KvObject,
        property: Property,
        key: &str,
    ) -> Result<Option<String>, PoolError> {
        let object = dataset.dir().properties_object;
        let Some(bytes) = kv::lookup(handle, key.as_bytes()).map_err(kv_error(object))? else {
            return Ok(None);
        };
        let text = String::from_utf8(bytes).map_err(|_| {
            PoolError::Corrupt(format!(
                "dataset {}: property {key} is not text",
                dataset.name()
            ))
        })?;
        let normalized = property.parse(&text).map_err(|why| {
            PoolError::Corrupt(format!("dataset {}: stored {why}", dataset.name()))
        })?;
        Ok(Some(normalized))
    }

    /// The `-o` settings of a dataset about to be made (`full_name`), checked: the owner
    /// quotas (`userquota@1000=1G`) and user properties (`com.example:tag=x`), set once it
    /// exists, and the native properties, made with it; each refused now if bad or if the
    /// pool lacks its feature, so that a refusal leaves nothing made.
    pub(super) fn split_new_settings(
        &self,
        settings: &[(String, String)],
        full_name: &str,
    ) -> Result<SplitSettings, PoolError> {
        let (later, native): (Vec<_>, Vec<_>) = settings.iter().cloned().partition(|(name, _)| {
            crate::dataset::owner_quotas::OwnerProperty::is_owner_property_name(name)
                || is_user_property_name(name)
        });
        for (name, value) in &later {
            Pool::check_setting(name, value)?;
            let feature = if is_user_property_name(name) {
                super::USER_PROPERTIES_FEATURE
            } else {
                super::features::USER_ACCOUNTING_FEATURE
            };
            self.require_feature(
                feature,
                &format!("cannot create {full_name} with {name}"),
                PoolError::BadProperty,
            )?;
        }
        Ok((later, Pool::parse_properties(&native)?))
    }

    /// Open context, namespace lock held: the space check of setting `name` on `full_name`
    /// (an administrative change), then a hold on the txg that writes it.
    pub(super) fn hold_for_setting(
        &self,
        name: &str,
        full_name: &str,
    ) -> Result<crate::txg::TxHold, PoolError> {
        self.check_space(
            super::admission::SpaceCheck::Reserved,
            1,
            &format!("set {name} on {full_name}"),
        )?;
        Ok(self.txgs.assign()?)
    }

    /// The source of a value that dataset `relative` finds on dataset `at` (itself or an
    /// ancestor), set there locally or `received`.
    fn source_at(&self, at: &str, relative: &str, received: bool) -> PropertySource {
        match (at == relative, received) {
            (true, false) => PropertySource::Local,
            (true, true) => PropertySource::Received,
            (false, _) => PropertySource::Inherited(self.full_name(at)),
        }
    }

    /// The effective value of a settable property and where it comes from.
    pub fn property(
        &self,
        relative: &str,
        property: Property,
    ) -> Result<(String, PropertySource), PoolError> {
        let mut at = relative.to_string();
        loop {
            let dataset = self.dataset_by_relative(&at)?;
            if let Some((value, received)) = self.level_property(&dataset, property)? {
                let source = self.source_at(&at, relative, received);
                let value = match property {
                    // A child mounts below the ancestor's mountpoint, by its names below it.
                    Property::Mountpoint if value.starts_with('/') && at != relative => {
                        let below = &relative[if at.is_empty() { 0 } else { at.len() + 1 }..];
                        format!("{}/{below}", value.trim_end_matches('/'))
                    }
                    _ => value,
                };
                return Ok((value, source));
            }
            if at.is_empty() || !property.inherits() {
                break;
            }
            at = parent_of(&at).to_string();
        }
        let value = match property {
            Property::Mountpoint => format!("/{}", self.full_name(relative)),
            _ => property.default_value(self.tunables.recordsize),
        };
        Ok((value, PropertySource::Default))
    }

    /// The user properties in effect on dataset `relative`: its own settings and those it
    /// inherits (the nearest ancestor's wins), by name.
    pub(super) fn user_properties(
        &self,
        relative: &str,
    ) -> Result<Vec<(String, String, PropertySource)>, PoolError> {
        let mut found: std::collections::BTreeMap<String, (String, PropertySource)> =
            std::collections::BTreeMap::new();
        let mut at = relative.to_string();
        loop {
            let dataset = self.dataset_by_relative(&at)?;
            let object = dataset.dir().properties_object;
            // This level's settings: local ones, received ones, and explicit inherits.
            let mut local = std::collections::BTreeMap::new();
            let mut received = std::collections::BTreeMap::new();
            let mut inherits = std::collections::BTreeSet::new();
            for entry in crate::object::adapters::kv_entries(&self.mos, object)? {
                let Ok(key) = std::str::from_utf8(&entry.key) else {
                    continue;
                };
                let stored = StoredKey::of(key);
                let (StoredKey::Local(name) | StoredKey::Received(name) | StoredKey::Inherit(name)) =
                    stored;
                if !is_user_property_name(name) || found.contains_key(name) {
                    continue;
                }
                let value = String::from_utf8(entry.value).map_err(|_| {
                    PoolError::Corrupt(format!(
                        "dataset {}: user property {key} is not text",
                        dataset.name()
                    ))
                })?;
                match stored {
                    StoredKey::Local(_) => local.insert(name.to_string(), value),
                    StoredKey::Received(_) => received.insert(name.to_string(), value),
                    StoredKey::Inherit(_) => {
                        inherits.insert(name.to_string());
                        None
                    }
                };
            }
            for (name, value) in local {
                found.insert(name, (value, self.source_at(&at, relative, false)));
            }
            for (name, value) in received {
                if !found.contains_key(&name) && !inherits.contains(&name) {
                    found.insert(name, (value, self.source_at(&at, relative, true)));
                }
            }
            if at.is_empty() {
                break;
            }
            at = parent_of(&at).to_string();
        }
        Ok(found
            .into_iter()
            .map(|(name, (value, source))| (name, value, source))
            .collect())
    }

    /// One user property in effect on dataset `relative`, if set there or above (a dataset
    /// has few: found among all of them).
    pub(super) fn user_property(
        &self,
        relative: &str,
        name: &str,
    ) -> Result<Option<(String, PropertySource)>, PoolError> {
        Ok(self
            .user_properties(relative)?
            .into_iter()
            .find(|(found, ..)| found == name)
            .map(|(_, value, source)| (value, source)))
    }

    /// Object properties for new files of a dataset, from its effective properties.
    pub fn fs_config(&self, relative: &str, base: FsConfig) -> Result<FsConfig, PoolError> {
        let value = |property| self.property(relative, property).map(|(value, _)| value);
        Ok(FsConfig {
            file_block_size: value(Property::Recordsize)?
                .parse()
                .expect("validated recordsize"),
            checksum: checksum_of(&value(Property::Checksum)?),
            compression: compression_of(&value(Property::Compression)?),
            copies: value(Property::Copies)?.parse().expect("validated copies"),
            xattr: if value(Property::Xattr)? == "dir" {
                XattrLayout::Dir
            } else {
                XattrLayout::Sa
            },
            acl_posix: value(Property::Acltype)? == "posix",
            ..base
        })
    }

    pub(super) fn write_property(
        &self,
        dataset: &Dataset,
        tx: Tx,
        property: Property,
        value: Option<&str>,
    ) -> Result<(), PoolError> {
        // A limit of none is no setting at all (its default).
        let value = value.filter(|value| !(property.is_space_limit() && *value == "none"));
        self.write_setting(dataset, tx, property.name(), value, false)
    }

    /// Write a local setting of `name` (`Some`) or clear it (`None`): as `inherit`, which
    /// masks a received value with an explicit inherit, or with `to_received` as `inherit -S`,
    /// which puts the received value back in effect (`dataset/props.rs`, "Received values").
    pub(super) fn write_setting(
        &self,
        dataset: &Dataset,
        tx: Tx,
        name: &str,
        value: Option<&str>,
        to_received: bool,
    ) -> Result<(), PoolError> {
        let object = dataset.dir().properties_object;
        let mut handle = KvObject::new(&self.mos, object, Some(tx))?;
        let inherit = inherit_key(name);
        let mask = match value {
            Some(value) => {
                kv::upsert(&mut handle, name.as_bytes(), value.as_bytes())
                    .map_err(kv_error(object))?;
                false
            }
            None => {
                kv::remove(&mut handle, name.as_bytes()).map_err(kv_error(object))?;
                !to_received
                    && kv::lookup(&handle, received_key(name).as_bytes())
                        .map_err(kv_error(object))?
                        .is_some()
            }
        };
        if mask {
            kv::upsert(&mut handle, inherit.as_bytes(), b"").map_err(kv_error(object))?;
        } else {
            kv::remove(&mut handle, inherit.as_bytes()).map_err(kv_error(object))?;
        }
        Ok(())
    }
}

impl Pool {
    /// Validate `name=value` settings for a dataset.
    pub fn parse_properties(
        settings: &[(String, String)],
    ) -> Result<Vec<(Property, String)>, PoolError> {
        let mut parsed: Vec<(Property, String)> = Vec::new();
        for (name, value) in settings {
            let property = Property::from_name(name).ok_or_else(|| {
                if crate::dataset::props::READ_ONLY_PROPERTIES.contains(&name.as_str()) {
                    PoolError::BadProperty(format!("{name} is a read-only property"))
                } else {
                    PoolError::BadProperty(format!("unknown property {name:?}"))
                }
            })?;
            let normalized = property.parse(value).map_err(PoolError::BadProperty)?;
            parsed.retain(|(seen, _)| *seen != property);
            parsed.push((property, normalized));
        }
        Ok(parsed)
    }

    /// Check one `name=value` setting as [`Pool::set_property`] takes it, changing nothing:
    /// `set` checks every setting it is given before it makes any.
    pub fn check_setting(name: &str, value: &str) -> Result<(), PoolError> {
        if crate::dataset::owner_quotas::OwnerProperty::is_owner_property_name(name) {
            crate::dataset::owner_quotas::OwnerProperty::parse_quota_setting(name, Some(value))
                .map_err(PoolError::BadProperty)?;
        } else if is_user_property_name(name) {
            validate_user_property(name, Some(value)).map_err(PoolError::BadProperty)?;
        } else {
            Pool::parse_properties(&[(name.to_string(), value.to_string())])?;
        }
        Ok(())
    }

    /// The effective settable properties of a dataset (in [`Property::ALL`] order).
    pub fn properties(&self, full_name: &str) -> Result<Vec<PropertyValue>, PoolError> {
        let relative = self.core.relative_name(full_name)?;
        self.core.dataset_by_relative(relative)?;
        Property::ALL
            .iter()
            .map(|property| {
                let (value, source) = self.core.property(relative, *property)?;
                Ok(PropertyValue {
                    dataset: full_name.to_string(),
                    property: property.name().to_string(),
                    value,
                    source,
                })
            })
            .collect()
    }

    /// One settable property's effective value and source.
    pub fn property(
        &self,
        full_name: &str,
        property: Property,
    ) -> Result<(String, PropertySource), PoolError> {
        let relative = self.core.relative_name(full_name)?;
        self.core.property(relative, property)
    }

    /// Set a property locally (`value` Some) or clear the local setting so that it inherits
    /// again (`None`, `tarn inherit`; a received value stays masked). Durable on return.
    pub fn set_property(
        &self,
        full_name: &str,
        name: &str,
        value: Option<&str>,
    ) -> Result<(), PoolError> {
        self.change_property(full_name, name, value, false)
    }

    /// `tarn inherit -S`: clear the local setting and any explicit inherit, so that the
    /// received value is in effect again (or, without one, what the dataset inherits).
    /// Durable on return.
    pub fn revert_to_received(&self, full_name: &str, name: &str) -> Result<(), PoolError> {
        self.change_property(full_name, name, None, true)
    }

    fn change_property(
        &self,
        full_name: &str,
        name: &str,
        value: Option<&str>,
        to_received: bool,
    ) -> Result<(), PoolError> {
        if crate::dataset::owner_quotas::OwnerProperty::is_owner_property_name(name) {
            return self.set_owner_quota(full_name, name, value);
        }
        if is_user_property_name(name) {
            return self.set_user_property(full_name, name, value, to_received);
        }
        self.writable()?;
        let core = &self.core;
        let relative = core.relative_name(full_name)?.to_string();
        let (property, normalized) = match value {
            Some(value) => {
                let parsed = Pool::parse_properties(&[(name.to_string(), value.to_string())])?;
                let (property, normalized) = parsed.into_iter().next().expect("one setting");
                (property, Some(normalized))
            }
            None => (
                Property::from_name(name).ok_or_else(|| {
                    PoolError::BadProperty(format!("unknown or read-only property {name:?}"))
                })?,
                None,
            ),
        };
        let limit = property.is_space_limit();
        // A limit is judged against what the dataset holds: the figures of a synced txg.
        let normalized = if limit {
            self.sync()?;
            normalized.filter(|value| value != "none")
        } else {
            normalized
        };
        {
            let _namespace = core.namespace.lock();
            let dataset = core.dataset_by_relative(&relative)?;
            if limit {
                if normalized.is_some() {
                    core.require_feature(
                        super::SPACE_LIMITS_FEATURE,
                        &format!("cannot set property for '{full_name}'"),
                        PoolError::BadProperty,
                    )?;
                }
                // What the dataset will hold once changed: the new setting, or with `inherit -S`
                // its received value, or (`inherit`) nothing.
                let bytes = match (normalized.as_deref(), to_received) {
                    (Some(value), _) => limit_bytes(value),
                    (None, true) => core
                        .received_setting(&dataset, property)?
                        .map_or(0, |value| limit_bytes(&value)),
                    (None, false) => 0,
                };
                core.check_limit_change(&dataset, property, bytes).map_err(
                    |error| match error {
                        PoolError::BadProperty(why) | PoolError::OutOfSpace(why) => {
                            PoolError::BadProperty(format!(
                                "cannot set property for '{full_name}': {why}"
                            ))
                        }
                        other => other,
                    },
                )?;
            }
            let hold = core.hold_for_setting(name, full_name)?;
            // A limit of none is no setting at all (its default).
            core.write_setting(
                &dataset,
                hold.tx(),
                property.name(),
                normalized.as_deref(),
                to_received,
            )?;
            if limit {
                if normalized.is_some() {
                    core.feature_activate(super::SPACE_LIMITS_FEATURE);
                }
                core.load_limits(&dataset, Some(hold.tx().txg))?;
                core.relink_limits();
            }
        }
        if property == Property::Copies {
            core.apply_copies_everywhere();
        }
        self.sync()?;
        Ok(())
    }

    /// A receive's property (`send -p`, `-R`) on `full_name`: a settable or user property, a
    /// space limit included, as its received value (`dataset/props.rs`, "Received values"); an
    /// owner quota, or any property on a pool without feature@received_properties, as a local
    /// setting. A received limit that would be in effect (no local setting or explicit inherit
    /// masks it) is judged as `set` judges one: one the dataset does not fit in is refused.
    /// Durable on return.
    pub fn set_received_property(
        &self,
        full_name: &str,
        name: &str,
        value: &str,
    ) -> Result<(), PoolError> {
        let native = Property::from_name(name);
        let user = is_user_property_name(name);
        let core = &self.core;
        if core
            .feature_refcount(super::RECEIVED_PROPERTIES_FEATURE)
            .is_none()
            || !(user || native.is_some())
        {
            return self.set_property(full_name, name, Some(value));
        }
        self.writable()?;
        let normalized = match native {
            Some(property) => property.parse(value).map_err(PoolError::BadProperty)?,
            None => {
                validate_user_property(name, Some(value)).map_err(PoolError::BadProperty)?;
                core.require_feature(
                    super::USER_PROPERTIES_FEATURE,
                    &format!("cannot receive property {name} on '{full_name}'"),
                    PoolError::BadProperty,
                )?;
                value.to_string()
            }
        };
        let limit = native.filter(|property| property.is_space_limit());
        // A limit of none is no value at all; any other is judged against what the dataset
        // holds, the figures of a synced txg.
        let normalized = Some(normalized).filter(|value| limit.is_none() || value != "none");
        if limit.is_some() {
            self.sync()?;
        }
        let relative = core.relative_name(full_name)?.to_string();
        {
            let _namespace = core.namespace.lock();
            let dataset = core.dataset_by_relative(&relative)?;
            if let Some(property) = limit {
                if let Some(value) = &normalized {
                    core.require_feature(
                        super::SPACE_LIMITS_FEATURE,
                        &format!("cannot receive property {name} on '{full_name}'"),
                        PoolError::BadProperty,
                    )?;
                    let in_effect = core
                        .level_property(&dataset, property)?
                        .is_none_or(|(_, received)| received);
                    if in_effect {
                        core.check_limit_change(&dataset, property, limit_bytes(value))?;
                    }
                }
            }
            let hold = core.hold_for_setting(name, full_name)?;
            let object = dataset.dir().properties_object;
            let mut handle = KvObject::new(&core.mos, object, Some(hold.tx()))?;
            let key = received_key(name);
            match &normalized {
                Some(value) => kv::upsert(&mut handle, key.as_bytes(), value.as_bytes())
                    .map(|_| ())
                    .map_err(kv_error(object))?,
                None => kv::remove(&mut handle, key.as_bytes())
                    .map(|_| ())
                    .map_err(kv_error(object))?,
            }
            // (The handle holds the object's writer lock, which reading the limits takes.)
            drop(handle);
            core.feature_activate(super::RECEIVED_PROPERTIES_FEATURE);
            if user {
                core.feature_activate(super::USER_PROPERTIES_FEATURE);
            }
            if limit.is_some() {
                if normalized.is_some() {
                    core.feature_activate(super::SPACE_LIMITS_FEATURE);
                }
                core.load_limits(&dataset, Some(hold.tx().txg))?;
                core.relink_limits();
            }
        }
        if native == Some(Property::Copies) {
            core.apply_copies_everywhere();
        }
        self.sync()?;
        Ok(())
    }

    /// Before a receive's properties are set on `full_name`: remove the received values of
    /// every property not among `keeping` (a later receive with properties replaces the
    /// received set, as zfs receive does). Durable on return.
    pub fn clear_received_properties(
        &self,
        full_name: &str,
        keeping: &[&str],
    ) -> Result<(), PoolError> {
        let core = &self.core;
        if core
            .feature_refcount(super::RECEIVED_PROPERTIES_FEATURE)
            .is_none()
        {
            return Ok(());
        }
        self.writable()?;
        let relative = core.relative_name(full_name)?.to_string();
        let copies_changed;
        {
            let _namespace = core.namespace.lock();
            let dataset = core.dataset_by_relative(&relative)?;
            let object = dataset.dir().properties_object;
            let stale: Vec<Vec<u8>> = crate::object::adapters::kv_entries(&core.mos, object)?
                .into_iter()
                .filter(|entry| {
                    std::str::from_utf8(&entry.key).is_ok_and(|key| {
                        matches!(StoredKey::of(key), StoredKey::Received(name) if !keeping.contains(&name))
                    })
                })
                .map(|entry| entry.key)
                .collect();
            if stale.is_empty() {
                return Ok(());
            }
            let hold = core.hold_for_setting("received properties", full_name)?;
            let mut handle = KvObject::new(&core.mos, object, Some(hold.tx()))?;
            for key in &stale {
                kv::remove(&mut handle, key).map_err(kv_error(object))?;
            }
            // (The handle holds the object's writer lock, which reading the limits takes.)
            drop(handle);
            // What the removed values were in effect for follows at once.
            core.load_limits(&dataset, Some(hold.tx().txg))?;
            core.relink_limits();
            copies_changed = stale
                .iter()
                .any(|key| key == received_key("copies").as_bytes());
        }
        if copies_changed {
            core.apply_copies_everywhere();
        }
        self.sync()?;
        Ok(())
    }

    /// The user properties in effect on file system `full_name` (local and inherited), by
    /// name, as (name, value, source).
    pub fn user_properties(
        &self,
        full_name: &str,
    ) -> Result<Vec<(String, String, PropertySource)>, PoolError> {
        let relative = self.core.relative_name(full_name)?;
        self.core.user_properties(relative)
    }

    /// One user property in effect on file system `full_name`, if set there or above.
    pub fn user_property(
        &self,
        full_name: &str,
        name: &str,
    ) -> Result<Option<(String, PropertySource)>, PoolError> {
        let relative = self.core.relative_name(full_name)?;
        self.core.user_property(relative, name)
    }

    /// Set user property `name` locally (`value` Some) or remove the local setting (`None`,
    /// `inherit`). Durable on return.
    fn set_user_property(
        &self,
        full_name: &str,
        name: &str,
        value: Option<&str>,
        to_received: bool,
    ) -> Result<(), PoolError> {
        self.writable()?;
        validate_user_property(name, value).map_err(PoolError::BadProperty)?;
        let core = &self.core;
        let relative = core.relative_name(full_name)?.to_string();
        {
            let _namespace = core.namespace.lock();
            let dataset = core.dataset_by_relative(&relative)?;
            if value.is_some() {
                core.require_feature(
                    super::USER_PROPERTIES_FEATURE,
                    &format!("cannot set property for '{full_name}'"),
                    PoolError::BadProperty,
                )?;
            }
            let hold = core.hold_for_setting(name, full_name)?;
            core.write_setting(&dataset, hold.tx(), name, value, to_received)?;
            if value.is_some() {
                core.feature_activate(super::USER_PROPERTIES_FEATURE);
            }
        }
        self.sync()?;
        Ok(())
    }

    /// Bring an open file system in line with its dataset's properties (after `set`).
    pub fn apply_properties(&self, full_name: &str, fs: &FileSystem) -> Result<(), PoolError> {
        let relative = self.core.relative_name(full_name)?;
        fs.set_config(self.core.fs_config(relative, fs.config())?);
        let (atime, _) = self.core.property(relative, Property::Atime)?;
        fs.set_atime_updates(atime == "on");
        let (sync, _) = self.core.property(relative, Property::Sync)?;
        fs.set_sync_mode(crate::zil::SyncMode::parse(&sync).unwrap_or_default());
        let (logbias, _) = self.core.property(relative, Property::Logbias)?;
        fs.set_logbias(crate::zil::Logbias::parse(&logbias).unwrap_or_default());
        let (primarycache, _) = self.core.property(relative, Property::Primarycache)?;
        fs.set_primarycache(crate::cache::CachePolicy::parse(&primarycache).unwrap_or_default());
        let (secondarycache, _) = self.core.property(relative, Property::Secondarycache)?;
        fs.set_secondarycache(
            crate::cache::CachePolicy::parse(&secondarycache).unwrap_or_default(),
        );
        Ok(())
    }
}
