//! The dataset family (zfs): `tarn create|destroy|list|get|set|inherit|mount|unmount`,
//! `tarn userspace|groupspace|projectspace` and `tarn allow|unallow`. Property settings travel as the user gave them
//! (`prop=value`) and are split by [`parse_settings`] on both sides: the CLI to refuse a
//! malformed one before asking, the daemon to use them. Owner properties travel with numeric
//! IDs (`userquota@1000`): the CLI turns user and group names into IDs before it asks, and
//! IDs into names when it prints, from its own passwd and group databases, as libzfs does.

use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};
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
    /// Space and quotas by owner of a file system or snapshot, of the kinds named (`tarn
    /// userspace|groupspace|projectspace`): `data = {"owners": [rows]}`, numeric IDs.
    Userspace(SpaceArgs),
    /// Grant permissions on a file system (`tarn allow -u|-g|-e [-l] [-d] PERM[,PERM]... FS`),
    /// or with no permissions and no grantee list them: `data = {"permissions": [{"dataset",
    /// "grants": [{"kind", "id", "scope", "permissions"}]}]}`, the file system first, then
    /// each ancestor with grants. Users and groups travel as numeric IDs.
    Allow(AllowArgs),
    /// Revoke permissions (`tarn unallow`); none named revokes all of each grantee's.
    Unallow(AllowArgs),
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
            DatasetRequest::Userspace(_) => "userspace",
            DatasetRequest::Allow(_) => "allow",
            DatasetRequest::Unallow(_) => "unallow",
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
    /// Deferred destroy (snapshots): destroy each one that has neither user holds nor clones,
    /// and mark the others to go with their last hold and clone.
    #[arg(short = 'd')]
    #[serde(default)]
    pub defer: bool,
    pub name: String,
}

/// `tarn list [-r] [-t TYPE[,TYPE]] [-H] [-p] [-j] [-o FIELD,...] [NAME]`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Include the descendants of the dataset named.
    #[arg(short = 'r')]
    pub recursive: bool,
    /// Descendants down to this depth (1: children, and the dataset's own snapshots);
    /// implies -r.
    #[arg(short = 'd', value_name = "DEPTH")]
    #[serde(default)]
    pub depth: Option<usize>,
    /// -s FIELD / -S FIELD: sort by a column, ascending / descending, in the order given.
    #[command(flatten)]
    #[serde(skip)]
    pub sort: SortArgs,
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

/// `tarn get [-r|-d N] [-s SOURCE,...] [-t TYPE,...] [-H] [-p] [-j] [-o FIELD,...]
/// PROP[,PROP]|all DATASET...`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetArgs {
    #[command(flatten)]
    #[serde(skip)]
    pub format: TableFormatArgs,
    /// The descendants of each dataset named too (with -t snapshot: their snapshots).
    #[arg(short = 'r')]
    #[serde(default)]
    pub recursive: bool,
    /// Descendants down to this depth (1: children); implies -r.
    #[arg(short = 'd', value_name = "DEPTH")]
    #[serde(default)]
    pub depth: Option<usize>,
    /// Only rows whose source is one of these: local, default, inherited, received,
    /// temporary, none.
    #[arg(short = 's', value_delimiter = ',', value_name = "SOURCE")]
    #[serde(skip)]
    pub sources: Option<Vec<String>>,
    /// Types of dataset to show: filesystem, snapshot, all (default: both).
    #[arg(short = 't', value_delimiter = ',', value_name = "TYPE")]
    #[serde(default)]
    pub types: Option<Vec<String>>,
    pub properties: String,
    #[arg(required = true, num_args = 1..)]
    pub names: Vec<String>,
}

/// The sources `get -s` takes (zfs's words).
pub const GET_SOURCES: [&str; 6] = [
    "local",
    "default",
    "inherited",
    "received",
    "temporary",
    "none",
];

impl GetArgs {
    /// The properties named (`all` among them: every one).
    pub fn properties(&self) -> Result<Vec<String>, Failure> {
        property_list(&self.properties)
    }

    /// The types asked for with `-t`, each checked (none: file systems and snapshots alike,
    /// as zfs get).
    pub fn types(&self) -> Result<&[String], Failure> {
        for kind in self.types.iter().flatten() {
            if !["filesystem", "snapshot", "all"].contains(&kind.as_str()) {
                return Err(Failure(format!(
                    "invalid type {kind:?}: expected filesystem, snapshot or all"
                )));
            }
        }
        Ok(self.types.as_deref().unwrap_or_default())
    }

    /// The sources asked for with `-s`, each checked.
    pub fn sources(&self) -> Result<&[String], Failure> {
        for source in self.sources.iter().flatten() {
            if !GET_SOURCES.contains(&source.as_str()) {
                return Err(Failure(format!(
                    "invalid source {source:?}: expected {}",
                    GET_SOURCES.join(", ")
                )));
            }
        }
        Ok(self.sources.as_deref().unwrap_or_default())
    }
}

/// `tarn set PROP=VALUE [PROP=VALUE]... DATASET`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetArgs {
    #[arg(required = true, num_args = 1.., value_name = "PROP=VALUE")]
    pub settings: Vec<String>,
    pub name: String,
}

impl SetArgs {
    /// The properties and their values, in the order given.
    pub fn settings(&self) -> Result<Vec<(String, String)>, Failure> {
        parse_settings(&self.settings)
    }
}

/// `tarn inherit [-rS] PROP DATASET`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InheritArgs {
    /// The descendants too: each loses its own setting.
    #[arg(short = 'r')]
    #[serde(default)]
    pub recursive: bool,
    /// Revert to the received value, if one exists (otherwise inherit as without -S).
    #[arg(short = 'S')]
    #[serde(default)]
    pub received: bool,
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

/// `tarn userspace|groupspace|projectspace [-H] [-p] [-j] [-n] [-o FIELD,...] [-s FIELD]...
/// [-S FIELD]... [-t TYPE,...] FILESYSTEM|SNAPSHOT` (zfs userspace). Only the dataset and the
/// kinds of owner travel: the verb and `-t` decide the kinds, and names, sorting and the table
/// are the CLI's.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpaceArgs {
    #[command(flatten)]
    #[serde(skip)]
    pub format: TableFormatArgs,
    /// Print numeric IDs instead of user and group names.
    #[arg(short = 'n')]
    #[serde(skip)]
    pub numeric: bool,
    #[command(flatten)]
    #[serde(skip)]
    pub sort: SortArgs,
    /// Types of owner to list (comma-separated): posixuser, posixgroup, smbuser, smbgroup,
    /// all (userspace and groupspace only; default posixuser for userspace, posixgroup for
    /// groupspace). tarn has no SMB identities: smbuser and smbgroup match no one.
    #[arg(short = 't', value_delimiter = ',', value_name = "TYPE")]
    #[serde(skip)]
    pub types: Option<Vec<String>>,
    /// The kinds of owner listed, as their words (`user`, `group`, `project`): set by the CLI
    /// from the verb and `-t`, never parsed.
    #[arg(skip)]
    pub kinds: Vec<String>,
    pub name: String,
}

/// `-s FIELD` and `-S FIELD` (sort by FIELD, ascending and descending), in the order given on
/// the command line: each key sorts within the ties of the keys before it, so `-s type -S used`
/// differs from `-S used -s type`, which two separate lists could not tell apart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SortArgs {
    /// (field, descending), the first key first.
    pub keys: Vec<(String, bool)>,
}

impl SortArgs {
    const ASCENDING: &'static str = "sort_ascending";
    const DESCENDING: &'static str = "sort_descending";
}

impl FromArgMatches for SortArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut keys: Vec<(usize, String, bool)> = Vec::new();
        for (id, descending) in [(Self::ASCENDING, false), (Self::DESCENDING, true)] {
            if let (Some(fields), Some(indices)) =
                (matches.get_many::<String>(id), matches.indices_of(id))
            {
                keys.extend(
                    indices
                        .zip(fields)
                        .map(|(index, field)| (index, field.clone(), descending)),
                );
            }
        }
        keys.sort_by_key(|(index, _, _)| *index);
        Ok(SortArgs {
            keys: keys
                .into_iter()
                .map(|(_, field, descending)| (field, descending))
                .collect(),
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = SortArgs::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for SortArgs {
    fn augment_args(command: clap::Command) -> clap::Command {
        command
            .arg(
                Arg::new(Self::ASCENDING)
                    .short('s')
                    .value_name("FIELD")
                    .action(ArgAction::Append)
                    .help("Sort by FIELD, ascending (repeatable; default: -s type -s name)"),
            )
            .arg(
                Arg::new(Self::DESCENDING)
                    .short('S')
                    .value_name("FIELD")
                    .action(ArgAction::Append)
                    .help("Sort by FIELD, descending (repeatable, in turn with -s)"),
            )
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        SortArgs::augment_args(command)
    }
}

/// `tarn allow [-u USER[,USER]...] [-g GROUP[,GROUP]...] [-e] [-l] [-d] PERM[,PERM]... FS`,
/// `tarn allow FS` (list), and `tarn unallow` with the same options (permissions optional).
/// The CLI turns user and group names into numeric IDs in place before it asks.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowArgs {
    /// Users (names or numeric IDs, comma-separated).
    #[arg(short = 'u', value_delimiter = ',', value_name = "USER")]
    pub users: Vec<String>,
    /// Groups (names or numeric IDs, comma-separated).
    #[arg(short = 'g', value_delimiter = ',', value_name = "GROUP")]
    pub groups: Vec<String>,
    /// Everyone.
    #[arg(short = 'e')]
    pub everyone: bool,
    /// On the file system itself only (local).
    #[arg(short = 'l')]
    pub local: bool,
    /// On its descendants only.
    #[arg(short = 'd')]
    pub descendent: bool,
    /// PERM[,PERM]... then the file system; the file system alone lists (allow) or names every
    /// permission (unallow).
    #[arg(required = true, num_args = 1..=2, value_name = "PERM[,PERM]... FS")]
    pub operands: Vec<String>,
}

impl AllowArgs {
    /// The file system named (the last operand).
    pub fn name(&self) -> &str {
        self.operands.last().map(String::as_str).unwrap_or_default()
    }

    /// The permissions named, split and trimmed (none when only the file system is named).
    pub fn permissions(&self) -> Vec<String> {
        match self.operands.as_slice() {
            [permissions, _] => permissions
                .split(',')
                .map(str::trim)
                .filter(|permission| !permission.is_empty())
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether any grantee is named.
    pub fn names_grantee(&self) -> bool {
        !self.users.is_empty() || !self.groups.is_empty() || self.everyone
    }

    /// `tarn allow FS`: list, change nothing.
    pub fn lists(&self) -> bool {
        self.operands.len() == 1 && !self.names_grantee() && !self.local && !self.descendent
    }

    /// The scopes chosen: `-l` local, `-d` descendent, neither (or both) both.
    pub fn scopes(&self) -> (bool, bool) {
        if self.local || self.descendent {
            (self.local, self.descendent)
        } else {
            (true, true)
        }
    }

    /// Check the shape of a grant or revocation (not of a listing): a grantee named, and for
    /// allow a permission; the error says what to give.
    pub fn check(&self, verb: &str) -> Result<(), Failure> {
        if !self.names_grantee() {
            return Err(Failure(format!(
                "cannot {verb} on {}: name who: -u USER, -g GROUP or -e (everyone)",
                self.name()
            )));
        }
        if self.operands.len() == 2 && self.permissions().is_empty() {
            return Err(Failure(format!(
                "cannot {verb} on {}: the permission list is empty",
                self.name()
            )));
        }
        if verb == "allow" && self.permissions().is_empty() {
            return Err(Failure(format!(
                "cannot allow on {}: no permission named: tarn allow -u USER PERM[,PERM]... {0}",
                self.name()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(arguments: &[&str]) -> AllowArgs {
        #[derive(clap::Parser)]
        struct Command {
            #[command(flatten)]
            args: AllowArgs,
        }
        let mut words = vec!["allow"];
        words.extend(arguments);
        <Command as clap::Parser>::try_parse_from(words)
            .unwrap()
            .args
    }

    /// The file system is the last operand; permissions come before it; -l and -d choose the
    /// scopes, neither both; only a file system alone lists.
    #[test]
    fn allow_arguments_split_as_zfs_allow() {
        let listing = allow(&["tank/a"]);
        assert!(listing.lists());
        assert_eq!(listing.name(), "tank/a");
        assert!(listing.permissions().is_empty());
        let grant = allow(&["-u", "alice,bob", "-l", "create, snapshot", "tank/a"]);
        assert!(!grant.lists());
        assert_eq!(grant.users, ["alice", "bob"]);
        assert_eq!(grant.permissions(), ["create", "snapshot"]);
        assert_eq!(grant.scopes(), (true, false));
        assert_eq!(allow(&["-e", "-d", "send", "tank"]).scopes(), (false, true));
        assert_eq!(
            allow(&["-g", "staff", "send", "tank"]).scopes(),
            (true, true)
        );
        grant.check("allow").unwrap();
        assert!(allow(&["snapshot", "tank/a"])
            .check("allow")
            .unwrap_err()
            .0
            .contains("name who"));
        assert!(allow(&["-u", "alice", "tank/a"]).check("allow").is_err());
        allow(&["-u", "alice", "tank/a"]).check("unallow").unwrap();
        assert!(allow(&["-e", ",", "tank/a"])
            .check("unallow")
            .unwrap_err()
            .0
            .contains("empty"));
    }
}
