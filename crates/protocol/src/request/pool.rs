//! The pool family (zpool): `tarn pool create|import|export|destroy|sync|list|get|set|status|
//! history|clear`. Paths are made absolute by the CLI before it sends them (vdevs, `-R`, `-d`,
//! `-o cachefile=PATH`); options travel as typed and are parsed by the functions here on both
//! sides: the CLI to refuse a mistake before it starts a daemon, the daemon to use them.

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{property_list, PoolOption, TableFormatArgs};
use crate::error::Failure;
use crate::format::parse_size;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verb", content = "args", rename_all = "snake_case")]
pub enum PoolRequest {
    Create(CreateArgs),
    /// Import a pool (by name or guid) from the directories of `-d` (absolute).
    Import(ImportArgs),
    /// Export a pool; with `-f`, unmount lazily even if busy.
    Export(ReleaseArgs),
    /// Destroy a pool (`-f` as for export).
    Destroy(ReleaseArgs),
    /// Sync one pool, or every one.
    Sync(PoolOption),
    /// `data = {"pools": [{name, guid, size, alloc, frag, health, freeing}]}`.
    List(ListArgs),
    /// `data = {"properties": [{name, property, value: {"bytes"|"percent"|"number"|"text":
    /// V}, source}]}`.
    Get(GetArgs),
    Set(SetArgs),
    /// Enable every supported feature on one pool or (`-a`) every imported pool, or, with
    /// neither, list the pools with supported features not enabled; the daemon prints.
    Upgrade(UpgradeArgs),
    /// `data = {"pools": [{name, guid, text, json}]}`.
    Status(StatusArgs),
    /// `data = {"history": [{time_seconds, uid, txg, user, host, command}]}`, oldest first.
    History(HistoryArgs),
    /// Reset error counts (of one leaf, by path), forget the error log (the whole pool only),
    /// resume a pool suspended by failed writes.
    Clear(ClearArgs),
}

impl PoolRequest {
    /// The verb as the daemon's log and the pool history name it.
    pub fn verb(&self) -> &'static str {
        match self {
            PoolRequest::Create(_) => "pool create",
            PoolRequest::Import(_) => "pool import",
            PoolRequest::Export(_) => "pool export",
            PoolRequest::Destroy(_) => "pool destroy",
            PoolRequest::Sync(_) => "pool sync",
            PoolRequest::List(_) => "pool list",
            PoolRequest::Get(_) => "pool get",
            PoolRequest::Set(_) => "pool set",
            PoolRequest::Upgrade(_) => "pool upgrade",
            PoolRequest::Status(_) => "pool status",
            PoolRequest::History(_) => "pool history",
            PoolRequest::Clear(_) => "pool clear",
        }
    }
}

/// `tarn pool create [-f] [-s SIZE] [-o PROP=VAL]... [-R ALTROOT] [-m MOUNTPOINT] [-O
/// PROP=VAL]... POOL VDEVSPEC...`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    #[arg(short = 'f')]
    pub force: bool,
    /// Create missing device files as sparse files of this size (e.g. 2G).
    #[arg(short = 's')]
    pub size: Option<String>,
    /// Pool properties (prop=value); only feature@NAME=disabled is understood yet.
    #[arg(short = 'o')]
    pub properties: Vec<String>,
    /// Mount under this directory (the root file system at ALTROOT/POOL).
    #[arg(short = 'R')]
    pub altroot: Option<PathBuf>,
    /// Where the root file system mounts: an absolute path, or none (default /POOL).
    #[arg(short = 'm')]
    pub mountpoint: Option<String>,
    /// Properties of the root file system (prop=value, repeatable).
    #[arg(short = 'O')]
    pub fs_properties: Vec<String>,
    pub pool: String,
    #[arg(required = true, num_args = 1..)]
    pub vdevs: Vec<String>,
}

/// The pool properties of `pool create -o`: the features to leave disabled, and the cache
/// file (`cachefile=PATH|none`; None: the default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateProperties {
    pub disabled_features: Vec<String>,
    pub cachefile: Option<String>,
    /// `-o ashift=N`: the sector shift of the pool's vdevs (9 to 16; 0 or absent: the
    /// daemon's default, 12).
    pub ashift: Option<u32>,
}

impl CreateArgs {
    /// `-s` in bytes.
    pub fn size_bytes(&self) -> Result<Option<u64>, Failure> {
        self.size
            .as_deref()
            .map(parse_size)
            .transpose()
            .map_err(Failure::from)
    }

    /// `-o`, parsed.
    pub fn pool_properties(&self) -> Result<CreateProperties, Failure> {
        let mut parsed = CreateProperties::default();
        for property in &self.properties {
            let (key, value) = property.split_once('=').ok_or_else(|| {
                Failure(format!(
                    "invalid property {property:?}: expected prop=value"
                ))
            })?;
            if key == "cachefile" {
                parsed.cachefile = Some(value.to_string());
                continue;
            }
            if key == "ashift" {
                parsed.ashift = match value.parse::<u32>() {
                    Ok(0) => None,
                    Ok(shift @ 9..=16) => Some(shift),
                    _ => {
                        return Err(Failure(format!(
                            "invalid value {value:?} for ashift: expected 9 to 16 (512 B to 64 KiB sectors), or 0 for the default"
                        )))
                    }
                };
                continue;
            }
            let Some(feature) = key.strip_prefix("feature@") else {
                return Err(Failure(format!(
                    "unknown pool property {key:?} (pool properties: ashift=9..16, cachefile=PATH|none, feature@NAME=enabled|disabled)"
                )));
            };
            match value {
                "disabled" => parsed.disabled_features.push(feature.to_string()),
                "enabled" => {}
                other => {
                    return Err(Failure(format!(
                        "invalid value {other:?} for {key}: expected enabled or disabled"
                    )))
                }
            }
        }
        Ok(parsed)
    }
}

/// `tarn pool import [-d DIR]... [-D] [-f] [-o OPTION]... [-R ALTROOT] [-F [-n]] [-m] [-a]
/// [POOL [NEW_NAME]]`: without POOL, the CLI lists what it finds; `-a` and `-F -n` run in the
/// CLI too.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportArgs {
    #[arg(short = 'd', long = "dir")]
    pub dirs: Vec<PathBuf>,
    /// Import a pool that was not exported and was last in use on another host; with -D, a
    /// destroyed pool.
    #[arg(short = 'f')]
    pub force: bool,
    /// Destroyed pools only: list them, or (with -f) import one.
    #[arg(short = 'D')]
    pub destroyed: bool,
    /// readonly=on imports without writing anything.
    #[arg(short = 'o')]
    pub options: Vec<String>,
    /// Mount under this directory (the root file system at ALTROOT/POOL).
    #[arg(short = 'R')]
    pub altroot: Option<PathBuf>,
    /// Rewind: if no recent txg opens, go back to the newest txg whose whole tree reads
    /// and checks, discarding newer changes.
    #[arg(short = 'F')]
    pub rewind: bool,
    /// With -F: only say which txg a rewind would open and how much it would discard.
    #[arg(short = 'n', requires = "rewind")]
    #[serde(skip)]
    pub dry_run: bool,
    /// Import even if a log device is missing: the intent-log records on it are lost.
    #[arg(short = 'm')]
    pub missing_log: bool,
    /// Import every pool the cache file remembers (what the systemd unit runs at boot), or
    /// with -d (or -D) every pool found in the directories; the other options apply to each.
    #[arg(short = 'a', conflicts_with_all = ["pool", "new_name", "dry_run"])]
    #[serde(skip)]
    pub all: bool,
    pub pool: Option<String>,
    pub new_name: Option<String>,
}

/// The options of `pool import -o`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportOptions {
    pub readonly: bool,
    /// `cachefile=PATH|none` (None: the default).
    pub cachefile: Option<String>,
}

impl ImportArgs {
    /// `-o`: readonly=on|off and cachefile=PATH|none.
    pub fn import_options(&self) -> Result<ImportOptions, Failure> {
        let mut parsed = ImportOptions::default();
        for option in &self.options {
            match option.as_str() {
                "readonly=on" => parsed.readonly = true,
                "readonly=off" => parsed.readonly = false,
                other if other.starts_with("cachefile=") => {
                    parsed.cachefile = Some(other["cachefile=".len()..].to_string());
                }
                other => {
                    return Err(Failure(format!(
                    "unknown import option {other:?} (known: readonly=on|off, cachefile=PATH|none)"
                )))
                }
            }
        }
        Ok(parsed)
    }
}

/// `tarn pool export|destroy [-d DIR]... [-f] POOL`: `-d` says where to find the pool when no
/// daemon holds it (the CLI then acts on it itself; without `-d` it searches the default
/// search path, `tarn_ops::cachefile::default_search_path`).
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseArgs {
    #[arg(short = 'd', long = "dir")]
    #[serde(skip)]
    pub dirs: Vec<PathBuf>,
    #[arg(short = 'f')]
    pub force: bool,
    pub pool: String,
}

/// `tarn pool list [-H] [-p] [-j] [-o FIELD,...] [POOL]`: imported pools only.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Not an option of `pool list`: parsed, hidden, so that the CLI can say that `pool import
    /// -d DIR` lists the pools in DIR.
    #[arg(short = 'd', long = "dir", hide = true)]
    #[serde(skip)]
    pub dirs: Vec<PathBuf>,
    #[command(flatten)]
    #[serde(skip)]
    pub format: TableFormatArgs,
    pub pool: Option<String>,
}

/// `tarn pool get [-H] [-p] [-j] [-o FIELD,...] PROP[,PROP]|all POOL`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetArgs {
    #[command(flatten)]
    #[serde(skip)]
    pub format: TableFormatArgs,
    pub properties: String,
    pub pool: String,
}

impl GetArgs {
    /// The properties named (`all` among them: every one).
    pub fn properties(&self) -> Result<Vec<String>, Failure> {
        property_list(&self.properties)
    }
}

/// `tarn pool set PROP=VALUE POOL`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetArgs {
    pub setting: String,
    pub pool: String,
}

impl SetArgs {
    /// The property and its value.
    pub fn setting(&self) -> Result<(&str, &str), Failure> {
        self.setting
            .split_once('=')
            .filter(|(property, _)| !property.is_empty())
            .ok_or_else(|| {
                Failure(format!(
                    "invalid property setting {:?}: expected PROP=VALUE (e.g. feature@embedded_data=enabled)",
                    self.setting
                ))
            })
    }
}

/// `tarn pool status [-j [-p]] [-v] [POOL]`: imported pools only.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// Not an option of `pool status`: parsed, hidden, so that the CLI can say that `pool
    /// import -d DIR` shows the pools in DIR.
    #[arg(short = 'd', long = "dir", hide = true)]
    #[serde(skip)]
    pub dirs: Vec<PathBuf>,
    /// JSON output (the schema of zpool status -j).
    #[arg(short = 'j')]
    #[serde(skip)]
    pub json: bool,
    /// Exact numbers in the JSON: integers instead of human-readable strings (zpool status
    /// -jp --json-int).
    #[arg(short = 'p', requires = "json")]
    #[serde(default)]
    pub exact: bool,
    /// Name the files with permanent errors (damaged blocks with no good copy).
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Only pools with a problem (not ONLINE, a device or data error, suspended); "all pools
    /// are healthy" when none has one.
    #[arg(short = 'x')]
    #[serde(skip)]
    pub unhealthy: bool,
    pub pool: Option<String>,
}

/// `tarn pool history [-d DIR]... [-l] POOL`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryArgs {
    #[arg(short = 'd', long = "dir")]
    #[serde(skip)]
    pub dirs: Vec<PathBuf>,
    /// Also say who ran each command, on which host, in which txg.
    #[arg(short = 'l')]
    #[serde(skip)]
    pub long: bool,
    pub pool: String,
}

/// `tarn pool upgrade [-a | POOL]` (zpool upgrade): without either, list the pools that have
/// supported features not enabled.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpgradeArgs {
    /// Upgrade every imported pool.
    #[arg(short = 'a', conflicts_with = "pool")]
    pub all: bool,
    pub pool: Option<String>,
}

/// `tarn pool clear POOL [DEVICE]`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClearArgs {
    pub pool: String,
    pub device: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pool create -o` and `pool import -o` are parsed the same on both sides: features to
    /// disable, the cache file, readonly; anything else is an error that names what is known.
    #[test]
    fn pool_options_parse_or_say_what_is_known() {
        let mut create = CreateArgs {
            force: false,
            size: Some("2G".into()),
            properties: vec![
                "feature@log_spacemap=disabled".into(),
                "feature@embedded_data=enabled".into(),
                "cachefile=none".into(),
            ],
            altroot: None,
            mountpoint: None,
            fs_properties: Vec::new(),
            pool: "tank".into(),
            vdevs: vec!["/a".into()],
        };
        assert_eq!(create.size_bytes().unwrap(), Some(2 << 30));
        assert_eq!(
            create.pool_properties().unwrap(),
            CreateProperties {
                disabled_features: vec!["log_spacemap".into()],
                cachefile: Some("none".into()),
                ashift: None,
            }
        );
        create.properties = vec!["ashift=9".into()];
        assert_eq!(create.pool_properties().unwrap().ashift, Some(9));
        create.properties = vec!["ashift=0".into()];
        assert_eq!(create.pool_properties().unwrap().ashift, None);
        create.properties = vec!["ashift=17".into()];
        assert!(create.pool_properties().unwrap_err().0.contains("9 to 16"));
        create.properties = vec!["copies=2".into()];
        assert!(create
            .pool_properties()
            .unwrap_err()
            .0
            .contains("cachefile=PATH"));
        create.size = Some("lots".into());
        assert!(create.size_bytes().is_err());
        let mut import = ImportArgs {
            options: vec!["readonly=on".into(), "cachefile=/etc/x".into()],
            ..ImportArgs::default()
        };
        assert_eq!(
            import.import_options().unwrap(),
            ImportOptions {
                readonly: true,
                cachefile: Some("/etc/x".into()),
            }
        );
        import.options = vec!["atime=off".into()];
        assert!(import
            .import_options()
            .unwrap_err()
            .0
            .contains("readonly=on|off"));
    }
}
