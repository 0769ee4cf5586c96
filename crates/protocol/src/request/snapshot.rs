//! The snapshot family: `tarn snapshot|clone|promote|bookmark|rollback|rename`, the destruction
//! of snapshots and bookmarks (`tarn destroy FS@SNAP`, `tarn destroy FS#NAME`, with
//! [`DestroyArgs`]), `tarn diff`, and `tarn debug dataset`.

use clap::Args;
use serde::{Deserialize, Serialize};

use super::dataset::{parse_settings, DestroyArgs};
use super::TableFormatArgs;
use crate::error::Failure;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verb", content = "args", rename_all = "snake_case")]
pub enum SnapshotRequest {
    /// Take snapshots in one txg: `data = {"created": [names]}`.
    Snapshot(SnapshotArgs),
    /// Clone a snapshot as a new file system, and mount it: `data = {"created": [name]}`.
    Clone(CloneArgs),
    /// Promote a clone: `data = {"moved": [snapshots' new names]}`.
    Promote(NameArgs),
    /// Destroy snapshots, `FS@A[,B][%C]` (with `-r`, of descendants too by name; with `-R`,
    /// their clones first): `data = {"destroyed": [names]}`.
    DestroySnapshots(DestroyArgs),
    /// Destroy a bookmark, `FS#NAME`.
    DestroyBookmark(DestroyArgs),
    /// Roll a file system back to a snapshot.
    Rollback(RollbackArgs),
    /// Rename a snapshot (within its file system) or a file system.
    Rename(RenameArgs),
    /// Bookmark a snapshot.
    Bookmark(BookmarkArgs),
    /// A dataset's record and deadlist as text, as `zdb -dddd`.
    DebugDataset(NameArgs),
    /// Put a user hold on snapshots: `data = {"held": [names]}`.
    Hold(HoldArgs),
    /// Take a user hold off snapshots, destroying those marked for deferred destroy that this
    /// leaves free: `data = {"released": [names], "destroyed": [names]}`.
    Release(HoldArgs),
    /// The user holds of snapshots: `data = {"holds": [HoldRow]}`.
    Holds(HoldsArgs),
    /// What changed between a snapshot and a later snapshot or the file system:
    /// `data = {"mountpoint": path, "changes": [DiffRow]}`.
    Diff(DiffArgs),
}

impl SnapshotRequest {
    /// The verb as the daemon's log and the pool history name it.
    pub fn verb(&self) -> &'static str {
        match self {
            SnapshotRequest::Snapshot(_) => "snapshot",
            SnapshotRequest::Clone(_) => "clone",
            SnapshotRequest::Promote(_) => "promote",
            SnapshotRequest::DestroySnapshots(_) => "destroy snapshots",
            SnapshotRequest::DestroyBookmark(_) => "destroy bookmark",
            SnapshotRequest::Rollback(_) => "rollback",
            SnapshotRequest::Rename(_) => "rename",
            SnapshotRequest::Bookmark(_) => "bookmark",
            SnapshotRequest::DebugDataset(_) => "debug dataset",
            SnapshotRequest::Hold(_) => "hold",
            SnapshotRequest::Release(_) => "release",
            SnapshotRequest::Holds(_) => "holds",
            SnapshotRequest::Diff(_) => "diff",
        }
    }
}

/// A verb that names one dataset and nothing else.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameArgs {
    pub name: String,
}

/// `tarn snapshot [-r] FS@SNAP...`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotArgs {
    /// Snapshot every descendant too, by the same name.
    #[arg(short = 'r')]
    pub recursive: bool,
    #[arg(required = true, num_args = 1..)]
    pub names: Vec<String>,
}

/// `tarn clone [-o prop=val]... FS@SNAP FS`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloneArgs {
    /// Properties of the clone (prop=value, repeatable).
    #[arg(short = 'o')]
    pub properties: Vec<String>,
    pub snapshot: String,
    pub name: String,
}

impl CloneArgs {
    /// The `-o` settings as (name, value).
    pub fn settings(&self) -> Result<Vec<(String, String)>, Failure> {
        parse_settings(&self.properties)
    }
}

/// `tarn bookmark FS@SNAP FS#NAME`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BookmarkArgs {
    pub snapshot: String,
    pub bookmark: String,
}

/// `tarn rollback [-r] FS@SNAP`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackArgs {
    /// Destroy snapshots newer than the one named.
    #[arg(short = 'r')]
    pub recursive: bool,
    pub name: String,
}

/// `tarn rename NAME NEW_NAME`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameArgs {
    pub name: String,
    pub new_name: String,
}

/// `tarn hold [-r] TAG FS@SNAP...` and `tarn release [-r] TAG FS@SNAP...`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldArgs {
    /// The snapshot of the same name in every descendant too.
    #[arg(short = 'r')]
    pub recursive: bool,
    /// The hold's name (any text up to 255 bytes; replication tools use their own names).
    pub tag: String,
    #[arg(required = true, num_args = 1..)]
    pub snapshots: Vec<String>,
}

/// `tarn holds [-r] [-H] [-p] [-j] [-o FIELD,...] FS@SNAP...`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldsArgs {
    /// The snapshot of the same name in every descendant too.
    #[arg(short = 'r')]
    pub recursive: bool,
    #[command(flatten)]
    #[serde(skip)]
    pub format: TableFormatArgs,
    #[arg(required = true, num_args = 1..)]
    pub snapshots: Vec<String>,
}

/// `tarn diff [-F] [-H] [-t] [-h] FS@SNAP [FS@SNAP|FS]`: the files changed since a snapshot.
/// Only the names travel; the flags shape the printing, which is the client's.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffArgs {
    /// A column with each file's type (F file, / directory, @ symlink, = socket, | fifo,
    /// B block device, C character device).
    #[arg(short = 'F')]
    #[serde(skip)]
    pub classify: bool,
    /// Machine-parsable: a rename's two paths separated by a tab, not " -> ".
    #[arg(short = 'H')]
    #[serde(skip)]
    pub scripted: bool,
    /// The change time (ctime) first, as seconds.nanoseconds.
    #[arg(short = 't')]
    #[serde(skip)]
    pub timestamps: bool,
    /// Print paths as they are: no octal escapes of spaces and non-printable characters.
    #[arg(short = 'h')]
    #[serde(skip)]
    pub no_escape: bool,
    /// The earlier snapshot, FS@SNAP.
    pub snapshot: String,
    /// The later side: a later snapshot (FS@SNAP or @SNAP) or the file system (its current
    /// state); the snapshot's file system when left out.
    pub to: Option<String>,
}
