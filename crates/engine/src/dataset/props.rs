//! Dataset properties: the table of settable properties, their parsing, defaults and
//! inheritance (OpenZFS zfs_prop.c, dsl_prop.c).
//!
//! # Storage
//! Each dataset directory has a properties object (a key/value object in the MOS, named by the
//! directory record). It holds only *local* settings: key = the property name, value = the
//! normalized value as UTF-8 text (`131072`, `lz4`, `/srv/data`, `on`). A property that is not
//! set locally is inherited from the nearest ancestor that sets it, or takes its default.
//! Text keeps the format self-describing; values are validated again when read, so a damaged
//! value is reported and never used.
//!
//! # User properties
//! A name with a colon (`com.example:backup`, zfs's user properties) is the administrator's
//! own: any text value up to [`USER_PROPERTY_VALUE_MAX`] bytes, stored in the same object under
//! its name, always inherited, never interpreted by tarn ([`validate_user_property`]).
//!
//! # Received values
//! A receive of a stream that carries properties (`send -p`, `-R`) stores each as a *received*
//! value, under the key `NAME$recvd` (OpenZFS's suffix), beside any local setting: the value
//! in effect on a dataset is its local setting, else its received value, else what it
//! inherits. `inherit` removes the local setting and, where a received value exists, adds the
//! key `NAME$inherit` (empty), which makes the dataset inherit in spite of it; `inherit -S`
//! removes both, so the received value is in effect again. A later receive with properties
//! replaces the received values. A space limit is received so too, and admission enforces
//! the value in effect (a received limit the dataset does not fit in is not set, as zfs
//! receive leaves it); owner quotas are received as local settings. A stream whose source had
//! no property left carries none, and its receive keeps the received values it finds (it
//! cannot tell such a stream from one sent without `-p`). Behind
//! `feature@received_properties`; without it a receive sets local values.
//!
//! # Inheritance
//! Every settable property except `canmount` inherits. `mountpoint` inherits with a twist: a
//! child of a dataset whose mountpoint is `/a` mounts at `/a/child` (the path grows by the
//! names between the ancestor that sets it and the child), as in ZFS.
//!
//! # When a change takes effect
//! recordsize, compression, checksum and copies apply to files created after the change (they
//! are fixed per object when it is created); xattr to xattrs set after the change; atime and
//! snapdir at once; mountpoint, canmount, readonly and acltype when the daemon remounts, which
//! `set` does.

use crate::block::blkptr::{ChecksumType, Compression};

/// Where a property's value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PropertySource {
    Default,
    Local,
    /// Set by a receive (`send -p`/`-R`): in effect while no local setting overrides it.
    Received,
    /// Inherited from the named dataset (a full name).
    Inherited(String),
    /// A read-only statistic.
    None,
}

impl std::fmt::Display for PropertySource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PropertySource::Default => write!(formatter, "default"),
            PropertySource::Local => write!(formatter, "local"),
            PropertySource::Received => write!(formatter, "received"),
            PropertySource::Inherited(from) => write!(formatter, "inherited from {from}"),
            PropertySource::None => write!(formatter, "-"),
        }
    }
}

/// A settable property.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Property {
    Recordsize,
    Compression,
    Checksum,
    Copies,
    Mountpoint,
    Canmount,
    Atime,
    Readonly,
    /// Whether `.zfs` shows in the root directory's listing (`hidden`, `visible`); a lookup of
    /// `.zfs` works either way.
    Snapdir,
    /// Where new extended attributes go: `sa` (packed with the znode while they fit, else the
    /// file's hidden xattr directory) or `dir` (always the directory). See `fs::xattr`.
    Xattr,
    /// POSIX ACLs: `off` (the ACL xattrs are refused) or `posix` (kept, inherited, and
    /// enforced by the kernel). Takes effect at the next mount, which `set` does. See
    /// `fs::acl`.
    Acltype,
    /// When changes reach stable storage (OpenZFS's): `standard` (fsync and O_SYNC commit the
    /// intent log), `always` (every change is committed before it returns), `disabled` (fsync
    /// returns at once; changes wait for their txg). See `zil`.
    Sync,
    /// How the intent log commits writes (OpenZFS's): `latency` (small writes copied into log
    /// blocks, large ones written in place and their pointer logged) or `throughput` (every
    /// write written in place). See `zil`.
    Logbias,
    /// What reads of the dataset's blocks leave in the ARC (OpenZFS's): `all`, `metadata`
    /// (data blocks are read past it, as a send reads), or `none` (tarn: as `metadata`; its
    /// dnode and indirect blocks are cached all the same). See `cache::CachePolicy`.
    Primarycache,
    /// What the L2ARC may hold of the dataset: `all`, `metadata`, `none`. Kept and inherited;
    /// tarn has no L2ARC yet, so it has no effect.
    Secondarycache,
    /// The most the dataset, its snapshots and its descendants may use (`none` or bytes; not
    /// inherited). See `dataset::limits` for all four limits.
    Quota,
    /// The most the dataset's referenced bytes may reach.
    Refquota,
    /// Space counted as used by the dataset and its descendants in the parent, whatever they
    /// hold: nobody else can take it.
    Reservation,
    /// The same for the dataset's own live bytes (`usedbydataset`).
    Refreservation,
}

/// Read-only properties, computed from the dataset's records and the pool.
pub const READ_ONLY_PROPERTIES: &[&str] = &[
    "type",
    "creation",
    "used",
    "available",
    "referenced",
    "compressratio",
    "refcompressratio",
    "origin",
    "clones",
    "written",
    "logicalused",
    "logicalreferenced",
    "usedbydataset",
    "usedbysnapshots",
    "usedbychildren",
    "usedbyrefreservation",
    "guid",
    "createtxg",
    "receive_resume_token",
];

impl Property {
    pub const ALL: [Property; 19] = [
        Property::Recordsize,
        Property::Compression,
        Property::Checksum,
        Property::Copies,
        Property::Mountpoint,
        Property::Canmount,
        Property::Atime,
        Property::Readonly,
        Property::Snapdir,
        Property::Xattr,
        Property::Acltype,
        Property::Sync,
        Property::Logbias,
        Property::Primarycache,
        Property::Secondarycache,
        Property::Quota,
        Property::Refquota,
        Property::Reservation,
        Property::Refreservation,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Property::Recordsize => "recordsize",
            Property::Compression => "compression",
            Property::Checksum => "checksum",
            Property::Copies => "copies",
            Property::Mountpoint => "mountpoint",
            Property::Canmount => "canmount",
            Property::Atime => "atime",
            Property::Readonly => "readonly",
            Property::Snapdir => "snapdir",
            Property::Xattr => "xattr",
            Property::Acltype => "acltype",
            Property::Sync => "sync",
            Property::Logbias => "logbias",
            Property::Primarycache => "primarycache",
            Property::Secondarycache => "secondarycache",
            Property::Quota => "quota",
            Property::Refquota => "refquota",
            Property::Reservation => "reservation",
            Property::Refreservation => "refreservation",
        }
    }

    /// The property of this name (`compress` is accepted for compression, as in zfs).
    pub fn from_name(name: &str) -> Option<Property> {
        let name = match name {
            "compress" => "compression",
            "refreserv" => "refreservation",
            "reserv" => "reservation",
            _ => name,
        };
        Property::ALL
            .into_iter()
            .find(|property| property.name() == name)
    }

    /// Whether children take this property from their parent when they do not set it.
    pub fn inherits(self) -> bool {
        !(self == Property::Canmount || self.is_space_limit())
    }

    /// Whether this is one of the four space limits (`dataset::limits`).
    pub fn is_space_limit(self) -> bool {
        matches!(
            self,
            Property::Quota | Property::Refquota | Property::Reservation | Property::Refreservation
        )
    }

    /// The default value (normalized), given the pool's default recordsize.
    pub fn default_value(self, default_recordsize: u32) -> String {
        match self {
            Property::Recordsize => default_recordsize.to_string(),
            Property::Compression => "lz4".into(),
            Property::Checksum => "fletcher4".into(),
            Property::Copies => "1".into(),
            // The root's default; children derive theirs from it (see the module comment).
            Property::Mountpoint => String::new(),
            Property::Canmount | Property::Atime => "on".into(),
            Property::Readonly => "off".into(),
            Property::Snapdir => "hidden".into(),
            Property::Xattr => "sa".into(),
            Property::Acltype => "off".into(),
            Property::Sync => "standard".into(),
            Property::Logbias => "latency".into(),
            Property::Primarycache | Property::Secondarycache => "all".into(),
            Property::Quota
            | Property::Refquota
            | Property::Reservation
            | Property::Refreservation => "none".into(),
        }
    }

    /// Validate a value given by a user or read from disk; returns the normalized form.
    pub fn parse(self, value: &str) -> Result<String, String> {
        let name = self.name();
        let one_of = |choices: &[&str]| -> Result<String, String> {
            if choices.contains(&value) {
                Ok(value.to_string())
            } else {
                Err(format!(
                    "invalid value {value:?} for {name}: expected one of {}",
                    choices.join(", ")
                ))
            }
        };
        match self {
            Property::Recordsize => {
                let bytes = parse_size(value).ok_or_else(|| {
                    format!("invalid value {value:?} for recordsize: expected a size such as 128K")
                })?;
                if !(bytes.is_power_of_two() && (512..=(1 << 20)).contains(&bytes)) {
                    return Err(format!(
                        "invalid value {value:?} for recordsize: must be a power of two from 512 to 1M"
                    ));
                }
                Ok(bytes.to_string())
            }
            Property::Compression => {
                let normalized = match value {
                    "on" => "lz4".to_string(),
                    "off" | "lz4" | "zstd" => value.to_string(),
                    _ => match value.strip_prefix("zstd-").map(str::parse::<u8>) {
                        Some(Ok(level)) if (1..=19).contains(&level) => value.to_string(),
                        _ => {
                            return Err(format!(
                                "invalid value {value:?} for compression: expected on, off, lz4, zstd or zstd-1 to zstd-19"
                            ))
                        }
                    },
                };
                Ok(normalized)
            }
            Property::Checksum => {
                if value == "on" {
                    Ok("fletcher4".into())
                } else {
                    one_of(&["fletcher4", "blake3", "sha256"])
                }
            }
            Property::Copies => one_of(&["1", "2", "3"]),
            Property::Mountpoint => {
                if value == "none" || value == "legacy" {
                    return Ok(value.to_string());
                }
                if !value.starts_with('/') {
                    return Err(format!(
                        "invalid value {value:?} for mountpoint: expected an absolute path, none or legacy"
                    ));
                }
                if value.contains('\0') || value.split('/').any(|part| part == "..") {
                    return Err(format!(
                        "invalid value {value:?} for mountpoint: a path without '..' components"
                    ));
                }
                let trimmed = value.trim_end_matches('/');
                Ok(if trimmed.is_empty() { "/" } else { trimmed }.to_string())
            }
            Property::Canmount => one_of(&["on", "off", "noauto"]),
            Property::Atime | Property::Readonly => one_of(&["on", "off"]),
            Property::Snapdir => one_of(&["hidden", "visible"]),
            // `on` is zfs's old spelling of the directory layout.
            Property::Xattr => match value {
                "on" => Ok("dir".into()),
                _ => one_of(&["sa", "dir"]),
            },
            // zfs's other spellings.
            Property::Acltype => match value {
                "noacl" => Ok("off".into()),
                "posixacl" => Ok("posix".into()),
                _ => one_of(&["off", "posix"]),
            },
            Property::Sync => one_of(&["standard", "always", "disabled"]),
            Property::Logbias => one_of(&["latency", "throughput"]),
            Property::Primarycache | Property::Secondarycache => {
                one_of(&["all", "metadata", "none"])
            }
            Property::Quota
            | Property::Refquota
            | Property::Reservation
            | Property::Refreservation => match value {
                "none" => Ok("none".into()),
                _ => match parse_size(value) {
                    Some(0) => Ok("none".into()),
                    Some(bytes) => Ok(bytes.to_string()),
                    None => Err(format!(
                        "invalid value {value:?} for {name}: expected a size such as 10G, or none"
                    )),
                },
            },
        }
    }
}

/// The bytes a normalized space-limit value stands for (0 for `none`).
pub fn limit_bytes(value: &str) -> u64 {
    value.parse().unwrap_or(0)
}

/// Parse `512`, `4K`, `128k`, `1M`, `1.5G`, `2T` (binary multiples, as zfs reads them; a
/// fraction is rounded down to a whole byte).
pub fn parse_size(text: &str) -> Option<u64> {
    let upper = text.to_ascii_uppercase();
    let trimmed = upper.strip_suffix('B').unwrap_or(&upper);
    let (number, shift) = match trimmed.chars().last()? {
        'K' => (&trimmed[..trimmed.len() - 1], 10),
        'M' => (&trimmed[..trimmed.len() - 1], 20),
        'G' => (&trimmed[..trimmed.len() - 1], 30),
        'T' => (&trimmed[..trimmed.len() - 1], 40),
        'P' => (&trimmed[..trimmed.len() - 1], 50),
        _ => (trimmed, 0),
    };
    if let Ok(whole) = number.parse::<u64>() {
        return whole.checked_mul(1 << shift);
    }
    // A fraction: digits, one point, digits.
    let (whole, fraction) = number.split_once('.')?;
    if whole.is_empty() && fraction.is_empty()
        || !whole
            .chars()
            .chain(fraction.chars())
            .all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    let bytes = value * (1u64 << shift) as f64;
    (bytes.is_finite() && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// The compression a property value selects.
pub fn compression_of(value: &str) -> Compression {
    match value {
        "off" => Compression::Off,
        "zstd" => Compression::Zstd { level: 3 },
        _ => match value.strip_prefix("zstd-").map(str::parse::<u8>) {
            Some(Ok(level)) => Compression::Zstd { level },
            _ => Compression::Lz4,
        },
    }
}

/// The checksum a property value selects.
pub fn checksum_of(value: &str) -> ChecksumType {
    match value {
        "blake3" => ChecksumType::Blake3,
        "sha256" => ChecksumType::Sha256,
        _ => ChecksumType::Fletcher4,
    }
}

/// Validate one component of a dataset name: ZFS's alphabet (letters, digits, `_ - : .`),
/// not empty, not `.` or `..`.
/// The longest user property name, in bytes (zfs's ZAP_MAXNAMELEN, and a key/value object's
/// longest key).
pub const USER_PROPERTY_NAME_MAX: usize = crate::object::kv::KEY_LEN_MAX;
/// The longest user property value, in bytes: a key/value object's longest value (zfs takes
/// 8192, ZFS_MAXPROPLEN).
pub const USER_PROPERTY_VALUE_MAX: usize = crate::object::kv::VALUE_LEN_MAX;

/// Whether `name` names a user property (it has a colon, as in zfs).
/// The key suffix of a received value (see "Received values").
pub const RECEIVED_SUFFIX: &str = "$recvd";
/// The key suffix of an explicit inherit that masks a received value.
pub const INHERIT_SUFFIX: &str = "$inherit";

/// The key of `name`'s received value.
pub fn received_key(name: &str) -> String {
    format!("{name}{RECEIVED_SUFFIX}")
}

/// The key of an explicit inherit of `name`.
pub fn inherit_key(name: &str) -> String {
    format!("{name}{INHERIT_SUFFIX}")
}

/// What a key of a properties object holds, with the property's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredKey<'a> {
    /// A local setting (or a grant or an owner quota, which have names of their own).
    Local(&'a str),
    /// A received value.
    Received(&'a str),
    /// An explicit inherit masking a received value.
    Inherit(&'a str),
}

impl<'a> StoredKey<'a> {
    pub fn of(key: &'a str) -> StoredKey<'a> {
        if let Some(name) = key.strip_suffix(RECEIVED_SUFFIX) {
            StoredKey::Received(name)
        } else if let Some(name) = key.strip_suffix(INHERIT_SUFFIX) {
            StoredKey::Inherit(name)
        } else {
            StoredKey::Local(key)
        }
    }
}

pub fn is_user_property_name(name: &str) -> bool {
    name.contains(':')
}

/// Check a user property's name (zfs's rules: a colon, then lowercase letters, digits and
/// `: + - . _`, at most 256 bytes, not starting with a `-`) and, when set, its value (any
/// text without NUL up to [`USER_PROPERTY_VALUE_MAX`] bytes).
pub fn validate_user_property(name: &str, value: Option<&str>) -> Result<(), String> {
    let name_ok = is_user_property_name(name)
        && !name.starts_with('-')
        && name.len() <= USER_PROPERTY_NAME_MAX
        && name.chars().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, ':' | '+' | '-' | '.' | '_')
        });
    if !name_ok {
        return Err(format!(
            "invalid user property name {name:?}: a user property is module:name, in lowercase \
             letters, digits and : + - . _ (at most {USER_PROPERTY_NAME_MAX} bytes)"
        ));
    }
    if let Some(value) = value {
        if value.len() > USER_PROPERTY_VALUE_MAX || value.contains('\0') {
            return Err(format!(
                "invalid value for user property {name}: at most {USER_PROPERTY_VALUE_MAX} bytes \
                 of text without NUL"
            ));
        }
    }
    Ok(())
}

pub fn validate_name_component(component: &str) -> Result<(), String> {
    if component == RECEIVE_CLONE_NAME {
        return Ok(());
    }
    if component.is_empty() {
        return Err("a dataset name has an empty component".into());
    }
    if component == "." || component == ".." {
        return Err(format!("invalid dataset name component {component:?}"));
    }
    if let Some(bad) = component
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':' | '.')))
    {
        return Err(format!(
            "invalid character {bad:?} in dataset name component {component:?}: use letters, digits, '_', '-', ':' and '.'"
        ));
    }
    Ok(())
}

/// The last component of the hidden clone an incremental receive fills (`FS/%recv`, as
/// OpenZFS's): found by name, never listed, mounted or made by a user.
pub const RECEIVE_CLONE_NAME: &str = "%recv";

/// Whether a relative dataset name is, or lies below, a hidden receive clone.
pub fn is_hidden_dataset(relative: &str) -> bool {
    relative
        .split('/')
        .any(|component| component == RECEIVE_CLONE_NAME)
}

/// The longest dataset name, in bytes (ZFS_MAX_DATASET_NAME_LEN - 1).
pub const DATASET_NAME_MAX: usize = 255;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_keys_name_their_property_and_kind() {
        assert_eq!(
            StoredKey::of("compression"),
            StoredKey::Local("compression")
        );
        assert_eq!(
            StoredKey::of(&received_key("compression")),
            StoredKey::Received("compression")
        );
        assert_eq!(
            StoredKey::of(&inherit_key("com.example:tag")),
            StoredKey::Inherit("com.example:tag")
        );
        // A user property cannot be named like a suffixed key: `$` is not allowed in names.
        assert!(validate_user_property(&received_key("com.example:tag"), Some("x")).is_err());
        assert_eq!(PropertySource::Received.to_string(), "received");
    }

    #[test]
    fn user_property_names_and_values_follow_zfs_rules() {
        for good in ["com.example:note", "a:b", "org.x-y_z+1:v.2", ":", "x:"] {
            assert!(
                validate_user_property(good, Some("any text, even spaces")).is_ok(),
                "{good}"
            );
        }
        for bad in [
            "nocolon",
            "Com.example:x",
            "a:b c",
            "-a:b",
            "a:b\u{e9}",
            &format!("a:{}", "x".repeat(255)),
        ] {
            assert!(validate_user_property(bad, None).is_err(), "{bad}");
        }
        assert!(validate_user_property("a:b", Some(&"v".repeat(USER_PROPERTY_VALUE_MAX))).is_ok());
        assert!(
            validate_user_property("a:b", Some(&"v".repeat(USER_PROPERTY_VALUE_MAX + 1))).is_err()
        );
        assert!(validate_user_property("a:b", Some("nul\0inside")).is_err());
        assert!(is_user_property_name("a:b") && !is_user_property_name("compression"));
    }

    #[test]
    fn values_normalize_and_refuse_nonsense() {
        assert_eq!(Property::Recordsize.parse("128K").unwrap(), "131072");
        assert_eq!(Property::Recordsize.parse("1M").unwrap(), "1048576");
        assert_eq!(Property::Recordsize.parse("512").unwrap(), "512");
        assert!(Property::Recordsize.parse("3K").is_err());
        assert!(Property::Recordsize.parse("2M").is_err());
        assert!(Property::Recordsize.parse("abc").is_err());
        assert_eq!(Property::Compression.parse("on").unwrap(), "lz4");
        assert_eq!(Property::Compression.parse("zstd-7").unwrap(), "zstd-7");
        assert!(Property::Compression.parse("zstd-20").is_err());
        assert!(Property::Compression.parse("gzip").is_err());
        assert_eq!(Property::Checksum.parse("on").unwrap(), "fletcher4");
        assert!(Property::Copies.parse("4").is_err());
        assert_eq!(Property::Mountpoint.parse("/srv/x/").unwrap(), "/srv/x");
        assert_eq!(Property::Mountpoint.parse("/").unwrap(), "/");
        assert!(Property::Mountpoint.parse("relative").is_err());
        assert!(Property::Mountpoint.parse("/a/../b").is_err());
        assert!(Property::Canmount.parse("noauto").is_ok());
        assert!(Property::Atime.parse("yes").is_err());
        assert_eq!(Property::Snapdir.parse("visible").unwrap(), "visible");
        assert!(Property::Snapdir.parse("on").is_err());
        assert_eq!(Property::Snapdir.default_value(0), "hidden");
        assert!(Property::Snapdir.inherits());
        assert_eq!(Property::from_name("compress"), Some(Property::Compression));
        assert_eq!(Property::from_name("used"), None);
        assert_eq!(
            Property::Quota.parse("10G").unwrap(),
            (10u64 << 30).to_string()
        );
        assert_eq!(
            Property::Quota.parse("1.5M").unwrap(),
            (3u64 << 19).to_string()
        );
        assert_eq!(Property::Refquota.parse("none").unwrap(), "none");
        assert_eq!(Property::Reservation.parse("0").unwrap(), "none");
        assert!(Property::Refreservation.parse("-1").is_err());
        assert!(Property::Quota.parse("1.G.5").is_err());
        assert!(Property::Quota.parse(".").is_err());
        assert!(!Property::Quota.inherits());
        assert_eq!(
            Property::from_name("refreserv"),
            Some(Property::Refreservation)
        );
        assert_eq!(limit_bytes("none"), 0);
        assert_eq!(limit_bytes("4096"), 4096);
    }

    #[test]
    fn values_select_engine_settings() {
        assert_eq!(compression_of("off"), Compression::Off);
        assert_eq!(compression_of("lz4"), Compression::Lz4);
        assert_eq!(compression_of("zstd-9"), Compression::Zstd { level: 9 });
        assert_eq!(checksum_of("sha256"), ChecksumType::Sha256);
    }

    #[test]
    fn name_components() {
        assert!(validate_name_component("home_1.a-b:c").is_ok());
        assert!(validate_name_component("").is_err());
        assert!(validate_name_component("..").is_err());
        assert!(validate_name_component("a b").is_err());
        assert!(validate_name_component("a@b").is_err());
    }
}

#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        /// Values come back from disk: any text parses or is refused, never panics, and a
        /// normalized value is a fixed point.
        #[test]
        fn parse_is_total_and_idempotent(text in ".{0,24}", index in 0usize..Property::ALL.len()) {
            let property = Property::ALL[index];
            if let Ok(normalized) = property.parse(&text) {
                prop_assert_eq!(property.parse(&normalized).unwrap(), normalized);
            }
        }
    }
}
