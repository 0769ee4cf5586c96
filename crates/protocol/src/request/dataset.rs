//! The dataset family (zfs): `tarn create|destroy|list|get|set|inherit|mount|unmount`. Property
//! settings travel as the user gave them (`prop=value`) and are split by [`parse_settings`] on
//! both sides: the CLI to refuse a malformed one before asking, the daemon to use them.

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{property_list, TableFormatArgs};
use crate::error::Failure;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verb", content = "args", rename_all = "snake_case")]
pub enum DatasetRequest {
    /// Create a file system with local properties, and mount it: `data = {"created": [names]}`.
    Create(CreateArgs),
    /// Unmount and destroy a file system (and, with `-r`, its descendants; with `-R`, clones
    /// of its snapshots first).
    Destroy(DestroyArgs),
    /// `data = {"datasets": [rows]}`.
    List(ListArgs),
    /// `data = {"properties": [rows]}`.
    Get(GetArgs),
    /// Set a property; remounts when it decides where or how a file system is mounted.
    Set(SetArgs),
    /// Make a property inherit again.
    Inherit(InheritArgs),
    /// Mount one file system, every one (`-a`), or with neither list what is mounted: `data
    /// = {"mounts": [{name, mountpoint}]}`.
    Mount(MountArgs),
    /// Unmount a file system (by name or mountpoint, absolute) or every one (`-a`).
    Unmount(UnmountArgs),
}

impl DatasetRequest {
    /// The verb as the daemon's log and the pool history name it.
    pub fn verb(&self) -> &'static str {
        match self {
            DatasetRequest::Create(_) => "create",
            DatasetRequest::Destroy(_) => "destroy",
            DatasetRequest::List(_) => "list",
            DatasetRequest::Get(_) => "get",
            DatasetRequest::Set(_) => "set",
            DatasetRequest::Inherit(_) => "inherit",
            DatasetRequest::Mount(_) => "mount",
            DatasetRequest::Unmount(_) => "unmount",
        }
    }
}

/// Split `prop=value` settings.
pub fn parse_settings(settings: &[String]) -> Result<Vec<(String, String)>, Failure> {
    settings
        .iter()
        .map(|setting| {
            setting
                .split_once('=')
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .filter(|(name, _)| !name.is_empty())
                .ok_or_else(|| {
                    Failure(format!(
                        "invalid property setting {setting:?}: expected prop=value"
                    ))
                })
        })
        .collect()
}

/// `tarn create [-p] [-o prop=val]... POOL/NAME`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// Create missing parent file systems too.
    #[arg(short = 'p')]
    pub parents: bool,
    /// Properties of the new file system (prop=value, repeatable).
    #[arg(short = 'o')]
    pub properties: Vec<String>,
    pub name: String,
}

/// `tarn destroy [-r|-R] [-n] [-v] NAME`: a file system, snapshots (`FS@A[,B][%C]`) or a
/// bookmark (`FS#NAME`), each its own request.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestroyArgs {
    /// Destroy its descendants too.
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Destroy dependents too: descendants and every clone of the snapshots destroyed.
    #[arg(short = 'R')]
    pub recursive_dependents: bool,
    /// Dry run: print what would be destroyed.
    #[arg(short = 'n')]
    pub dry_run: bool,
    /// Print what will be destroyed before destroying it ("will destroy NAME"; with -n,
    /// "would destroy NAME"). Each file system destroyed, and for a clone whether its
    /// livelist or a walk of its tree frees it, is printed always.
    #[arg(short = 'v')]
    pub verbose: bool,
    pub name: String,
}

/// `tarn list [-r] [-t TYPE[,TYPE]] [-H] [-p] [-j] [-o FIELD,...] [NAME]`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Include the descendants of the dataset named.
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Types to list: filesystem, snapshot, all.
    #[arg(short = 't', value_delimiter = ',')]
    pub types: Option<Vec<String>>,
    #[command(flatten)]
    #[serde(skip)]
    pub format: TableFormatArgs,
    pub name: Option<String>,
}

impl ListArgs {
    /// The types asked for, each checked (none: file systems).
    pub fn types(&self) -> Result<&[String], Failure> {
        for kind in self.types.iter().flatten() {
            if !["filesystem", "snapshot", "bookmark", "all"].contains(&kind.as_str()) {
                return Err(Failure(format!(
                    "invalid type {kind:?}: expected filesystem, snapshot, bookmark or all"
                )));
            }
        }
        Ok(self.types.as_deref().unwrap_or_default())
    }
}

/// `tarn get [-H] [-p] [-j] [-o FIELD,...] PROP[,PROP]|all DATASET...`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetArgs {
    #[command(flatten)]
    #[serde(skip)]
    pub format: TableFormatArgs,
    pub properties: String,
    #[arg(required = true, num_args = 1..)]
    pub names: Vec<String>,
}

impl GetArgs {
    /// The properties named (`all` among them: every one).
    pub fn properties(&self) -> Result<Vec<String>, Failure> {
        property_list(&self.properties)
    }
}

/// `tarn set PROP=VALUE DATASET`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetArgs {
    pub setting: String,
    pub name: String,
}

impl SetArgs {
    /// The property and its value.
    pub fn setting(&self) -> Result<(String, String), Failure> {
        let mut settings = parse_settings(std::slice::from_ref(&self.setting))?;
        Ok(settings.remove(0))
    }
}

/// `tarn inherit PROP DATASET`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InheritArgs {
    pub property: String,
    pub name: String,
}

/// `tarn mount [-a] [-j] [NAME [MOUNTPOINT]]`: MOUNTPOINT (absolute) overrides the property
/// for this mount.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountArgs {
    #[arg(short = 'a')]
    pub all: bool,
    /// List mounts as JSON (the schema of zfs mount -j).
    #[arg(short = 'j')]
    #[serde(skip)]
    pub json: bool,
    pub name: Option<String>,
    pub mountpoint: Option<PathBuf>,
}

/// `tarn unmount [-f] [-a] [NAME|MOUNTPOINT]`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnmountArgs {
    #[arg(short = 'a')]
    pub all: bool,
    /// Unmount even when busy (lazily).
    #[arg(short = 'f')]
    pub force: bool,
    pub target: Option<String>,
}
