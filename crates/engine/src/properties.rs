//! Dataset properties as `tarn get` and `tarn list` show them (zfs get): the statistics
//! computed from a dataset's records and the pool (`used`, `available`, `referenced`,
//! `compressratio`, the `usedby*` breakdown, `written`, `origin`, `clones`, ...) and the
//! settable properties' effective values with their sources, of a file system or a snapshot.
//!
//! Values are exact and typed ([`DatasetValue`]); formatting (human sizes, ratios, times) is
//! the caller's. A snapshot has no settable properties of its own: it shows its file system's
//! values, whose source is the default or its file system ([`Pool::snapshot_property`]).
//! Properties that mean nothing for a snapshot (`available`, `mountpoint`, the `usedby*`
//! breakdown, ...) are `-`.
//!
//! One property is not the engine's to know: `mounted` (the engine does not mount file
//! systems); it comes back as [`DatasetValue::Mounted`] for the holder of the mounts to answer.
//! Likewise `mountpoint` is the property's value, which the holder shows under its altroot.
//! `receive_resume_token` is read from the partial receive's state (`send::resume`), as
//! OpenZFS's DSL reads it for `zfs get`: so this module sits above both the pool and the send
//! layers, which it reads.
//!
//! User properties (`module:name`) are answered with their value and source, `-` when unset;
//! `all` lists those in effect after the others, as `zfs get all` does. A snapshot shows its
//! file system's, inherited.
//!
//! The owner properties (`userquota@ID`, `userused@ID`, `groupobjquota@ID`, ...) are answered
//! when named, from `pool/owner_quotas.rs`, with numeric IDs only (the command line turns names
//! into IDs and back); `all` does not list them, as `zfs get all` does not.

use crate::dataset::owner_quotas::{OwnerField, OwnerMeasure, OwnerProperty};
use crate::dataset::props::{
    is_user_property_name, Property, PropertySource, READ_ONLY_PROPERTIES,
};
use crate::pool::datasets::{compress_ratio, DatasetInfo};
use crate::pool::snapshots::SnapshotInfo;
use crate::pool::{Pool, PoolError};

/// A dataset property's value, exact.
#[derive(Clone, Debug, PartialEq)]
pub enum DatasetValue {
    /// A size in bytes.
    Bytes(u64),
    /// Logical over physical bytes (1.0 when nothing is stored).
    Ratio(f64),
    /// Seconds since the Unix epoch.
    Time(u64),
    /// A number shown as it is (guid, txg).
    Number(u64),
    /// Text shown as it is; `-` where the property has no value for this dataset.
    Text(String),
    /// A settable property's effective value (see [`Pool::property`]).
    Setting(Property, String),
    /// An owner quota on bytes or objects, None when unset (shown `none`, exactly `0`, as zfs
    /// shows an unset quota).
    Limit(Option<u64>),
    /// A count of objects (an owner's `objused`), shown short as zfs shows it (`1.46K`).
    Count(u64),
    /// Whether the file system is mounted: answered by whoever mounts it.
    Mounted,
}

/// One property of one dataset.
#[derive(Clone, Debug, PartialEq)]
pub struct DatasetProperty {
    /// The name as asked (`avail` stays `avail`).
    pub name: String,
    pub value: DatasetValue,
    /// Where a settable value comes from; [`PropertySource::None`] for a statistic.
    pub source: PropertySource,
}

/// What `tarn get all` lists of a snapshot before the settable properties.
pub const SNAPSHOT_STATISTICS: &[&str] = &[
    "type",
    "creation",
    "used",
    "referenced",
    "compressratio",
    "refcompressratio",
    "written",
    "guid",
    "createtxg",
    "clones",
    "logicalreferenced",
    "userrefs",
    "defer_destroy",
];

impl SnapshotInfo {
    /// Logical over physical bytes of what the snapshot references (a snapshot's
    /// `compressratio` and `refcompressratio` alike).
    pub fn compress_ratio(&self) -> f64 {
        compress_ratio(self.referenced_uncompressed, self.referenced_compressed)
    }
}

/// The file system a snapshot belongs to (`tank/a@s` -> `tank/a`).
fn filesystem_of(snapshot: &str) -> &str {
    snapshot.split('@').next().unwrap_or(snapshot)
}

/// The source a snapshot of `file_system` shows for a value its file system has from
/// `source`: the file system's own setting is inherited from it, an inherited one from where
/// the file system inherits it.
fn snapshot_source(source: PropertySource, file_system: &str, of_snapshot: bool) -> PropertySource {
    match source {
        PropertySource::Local | PropertySource::Received if of_snapshot => {
            PropertySource::Inherited(file_system.to_string())
        }
        other => other,
    }
}

fn statistic(name: &str, value: DatasetValue) -> DatasetProperty {
    DatasetProperty {
        name: name.to_string(),
        value,
        source: PropertySource::None,
    }
}

fn text(text: &str) -> DatasetValue {
    DatasetValue::Text(text.to_string())
}

impl Pool {
    /// The properties `which` of the file system or snapshot `name` (a full name), in the
    /// order asked; `all` stands for every one. An unknown name is an error naming the known
    /// ones.
    pub fn dataset_properties(
        &self,
        name: &str,
        which: &[String],
    ) -> Result<Vec<DatasetProperty>, PoolError> {
        let all = which.iter().any(|property| property == "all");
        if name.contains('@') {
            let info = self.snapshot_info(name)?;
            let wanted: Vec<String> = if all {
                (SNAPSHOT_STATISTICS.iter().map(|p| p.to_string()))
                    .chain(Property::ALL.iter().map(|p| p.name().to_string()))
                    .collect()
            } else {
                which.to_vec()
            };
            let mut properties = wanted
                .iter()
                .map(|property| self.snapshot_property_named(&info, property))
                .collect::<Result<Vec<_>, _>>()?;
            if all {
                properties.extend(self.all_user_properties(filesystem_of(name), true)?);
            }
            return Ok(properties);
        }
        let info = self
            .datasets()
            .into_iter()
            .find(|info| info.name == name)
            .ok_or_else(|| PoolError::DatasetNotFound(name.to_string()))?;
        let wanted: Vec<String> = if all {
            (READ_ONLY_PROPERTIES.iter().map(|p| p.to_string()))
                .chain(["mounted".to_string()])
                .chain(Property::ALL.iter().map(|p| p.name().to_string()))
                .collect()
        } else {
            which.to_vec()
        };
        let mut properties = wanted
            .iter()
            .map(|property| self.file_system_property_named(&info, property))
            .collect::<Result<Vec<_>, _>>()?;
        if all {
            properties.extend(self.all_user_properties(name, false)?);
        }
        Ok(properties)
    }

    /// Every user property in effect on file system `file_system`; for a snapshot of it
    /// (`of_snapshot`), each inherited from it.
    fn all_user_properties(
        &self,
        file_system: &str,
        of_snapshot: bool,
    ) -> Result<Vec<DatasetProperty>, PoolError> {
        Ok(self
            .user_properties(file_system)?
            .into_iter()
            .map(|(name, value, source)| DatasetProperty {
                name,
                value: DatasetValue::Text(value),
                source: snapshot_source(source, file_system, of_snapshot),
            })
            .collect())
    }

    /// User property `name` of file system `file_system` (for a snapshot of it with
    /// `of_snapshot`): its value and source, `-` when unset.
    fn user_property_named(
        &self,
        file_system: &str,
        name: &str,
        of_snapshot: bool,
    ) -> Result<DatasetProperty, PoolError> {
        crate::dataset::props::validate_user_property(name, None)
            .map_err(PoolError::BadProperty)?;
        Ok(match self.user_property(file_system, name)? {
            Some((value, source)) => DatasetProperty {
                name: name.to_string(),
                value: DatasetValue::Text(value),
                source: snapshot_source(source, file_system, of_snapshot),
            },
            None => statistic(name, text("-")),
        })
    }

    /// A settable property of snapshot `snapshot` (`FS@SNAP`): its file system's value, from
    /// the default or else inherited from the file system.
    pub fn snapshot_property(
        &self,
        snapshot: &str,
        property: Property,
    ) -> Result<(String, PropertySource), PoolError> {
        let filesystem = filesystem_of(snapshot);
        let (value, source) = self.property(filesystem, property)?;
        let source = match source {
            PropertySource::Default => PropertySource::Default,
            _ => PropertySource::Inherited(filesystem.to_string()),
        };
        Ok((value, source))
    }

    fn file_system_property_named(
        &self,
        info: &DatasetInfo,
        property: &str,
    ) -> Result<DatasetProperty, PoolError> {
        let name = &info.name;
        let value = match property {
            "type" => text("filesystem"),
            "creation" => DatasetValue::Time(info.creation_time),
            "used" => DatasetValue::Bytes(info.used),
            "available" | "avail" => DatasetValue::Bytes(info.available),
            "referenced" | "refer" => DatasetValue::Bytes(info.referenced),
            "compressratio" => DatasetValue::Ratio(info.compress_ratio()),
            "refcompressratio" => DatasetValue::Ratio(info.ref_compress_ratio()),
            "origin" => text(info.origin.as_deref().unwrap_or("-")),
            "clones" | "userrefs" | "defer_destroy" => text("-"),
            "written" => DatasetValue::Bytes(info.written),
            "logicalused" => DatasetValue::Bytes(info.uncompressed),
            "logicalreferenced" => DatasetValue::Bytes(info.referenced_uncompressed),
            other if other.starts_with("written@") => {
                DatasetValue::Bytes(self.written_since(name, &other["written@".len()..])?)
            }
            "usedbydataset" => DatasetValue::Bytes(info.used_by_dataset),
            "usedbysnapshots" => DatasetValue::Bytes(info.used_by_snapshots),
            "usedbychildren" => DatasetValue::Bytes(info.used_by_children),
            "usedbyrefreservation" => DatasetValue::Bytes(info.used_by_refreservation),
            "guid" => DatasetValue::Number(info.guid),
            "createtxg" => DatasetValue::Number(info.creation_txg),
            "receive_resume_token" => {
                let token = crate::send::resume_token(self, name).map_err(|error| {
                    PoolError::PropertyUnreadable {
                        dataset: name.clone(),
                        property: property.to_string(),
                        why: error.to_string(),
                    }
                })?;
                DatasetValue::Text(token.unwrap_or_else(|| "-".into()))
            }
            "mounted" => DatasetValue::Mounted,
            "name" => text(name),
            other if is_user_property_name(other) => {
                return self.user_property_named(name, other, false)
            }
            other if OwnerProperty::is_owner_property_name(other) => {
                return self.owner_property_named(name, other)
            }
            other => {
                let property = Property::from_name(other).ok_or_else(|| {
                    PoolError::BadProperty(format!(
                        "unknown property {other:?}; known properties: {}, {}",
                        READ_ONLY_PROPERTIES.join(", "),
                        Property::ALL.map(Property::name).join(", ")
                    ))
                })?;
                let (value, source) = self.property(name, property)?;
                return Ok(DatasetProperty {
                    name: other.to_string(),
                    value: DatasetValue::Setting(property, value),
                    source,
                });
            }
        };
        Ok(statistic(property, value))
    }

    fn snapshot_property_named(
        &self,
        info: &SnapshotInfo,
        property: &str,
    ) -> Result<DatasetProperty, PoolError> {
        let name = &info.name;
        let value = match property {
            "name" => text(name),
            "type" => text("snapshot"),
            "creation" => DatasetValue::Time(info.creation_time),
            "used" => DatasetValue::Bytes(info.used),
            "referenced" | "refer" => DatasetValue::Bytes(info.referenced),
            "written" => DatasetValue::Bytes(info.written),
            "logicalreferenced" => DatasetValue::Bytes(info.referenced_uncompressed),
            "compressratio" | "refcompressratio" => DatasetValue::Ratio(info.compress_ratio()),
            "guid" => DatasetValue::Number(info.guid),
            "createtxg" => DatasetValue::Number(info.creation_txg),
            "clones" if info.clones.is_empty() => text("-"),
            "clones" => DatasetValue::Text(info.clones.join(",")),
            "userrefs" => DatasetValue::Number(info.user_refs),
            "defer_destroy" => text(if info.defer_destroy { "on" } else { "off" }),
            "available"
            | "avail"
            | "mountpoint"
            | "mounted"
            | "canmount"
            | "usedbydataset"
            | "usedbysnapshots"
            | "usedbychildren"
            | "usedbyrefreservation"
            | "origin"
            | "logicalused"
            | "receive_resume_token" => text("-"),
            // Space written between two snapshots (zfs allows it) is not computed yet.
            other if other.starts_with("written@") => text("-"),
            other if is_user_property_name(other) => {
                return self.user_property_named(filesystem_of(name), other, true)
            }
            other if OwnerProperty::is_owner_property_name(other) => {
                return self.owner_property_named(name, other)
            }
            other => {
                let property = Property::from_name(other).ok_or_else(|| {
                    PoolError::BadProperty(format!("unknown property {other:?} of snapshot {name}"))
                })?;
                let (value, source) = self.snapshot_property(name, property)?;
                return Ok(DatasetProperty {
                    name: other.to_string(),
                    value: DatasetValue::Setting(property, value),
                    source,
                });
            }
        };
        Ok(statistic(property, value))
    }

    /// An owner property of a file system or snapshot (`userquota@1000`, `groupobjused@5`):
    /// a quota with its source (local, or default when unset), or a usage figure as of the
    /// last sync (a statistic).
    fn owner_property_named(
        &self,
        name: &str,
        property: &str,
    ) -> Result<DatasetProperty, PoolError> {
        let (value, source) = self.owner_property(name, property)?;
        let parsed = OwnerProperty::parse(property).expect("owner_property parsed the name");
        let number = value.parse::<u64>().ok();
        let value = match (parsed.field, parsed.measure) {
            (OwnerField::Quota, _) => DatasetValue::Limit(number),
            (OwnerField::Used, OwnerMeasure::Bytes) => DatasetValue::Bytes(number.unwrap_or(0)),
            (OwnerField::Used, OwnerMeasure::Objects) => DatasetValue::Count(number.unwrap_or(0)),
        };
        Ok(DatasetProperty {
            name: property.to_string(),
            value,
            source,
        })
    }
}
