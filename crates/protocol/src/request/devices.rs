//! The devices family, verbs that change a pool's vdev tree: `pool attach [-f] [-w] POOL
//! DEVICE|raidzN-M NEW_DEVICE` (a mirror side, or a RAID-Z expansion), `pool detach POOL
//! DEVICE`, `pool remove POOL DEVICE...`, `pool replace [-f] [-w] POOL DEVICE [NEW_DEVICE]` and
//! `pool add [-n] [-f] POOL VDEV_SPEC...`. Device paths are made absolute by the CLI before it
//! sends them (the daemon does not share its working directory); a device of the pool may also
//! be named by its file name or guid.

use clap::Args;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verb", content = "args", rename_all = "snake_case")]
pub enum DevicesRequest {
    /// `data = {"txg": N}`.
    Attach(AttachArgs),
    /// `data = {"txg": N}`.
    Detach(DetachArgs),
    /// Remove cache devices (the only kind removable for now): `data = {"txg": N}`.
    Remove(RemoveArgs),
    /// `data = {"guid": N}`; with `wait`, answered once the old device is detached.
    Replace(ReplaceArgs),
    /// `data = {"vdevs": [{id, type, class, size, paths}], "dry_run": bool}`.
    Add(AddArgs),
}

impl DevicesRequest {
    /// The verb as the daemon's log and the pool history name it.
    pub fn verb(&self) -> &'static str {
        match self {
            DevicesRequest::Attach(_) => "pool attach",
            DevicesRequest::Detach(_) => "pool detach",
            DevicesRequest::Remove(_) => "pool remove",
            DevicesRequest::Replace(_) => "pool replace",
            DevicesRequest::Add(_) => "pool add",
        }
    }

    /// The pool the request names.
    pub fn pool(&self) -> &str {
        match self {
            DevicesRequest::Attach(AttachArgs { pool, .. })
            | DevicesRequest::Detach(DetachArgs { pool, .. })
            | DevicesRequest::Remove(RemoveArgs { pool, .. })
            | DevicesRequest::Replace(ReplaceArgs { pool, .. })
            | DevicesRequest::Add(AddArgs { pool, .. }) => pool,
        }
    }
}

#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachArgs {
    /// Use the new device even if it seems in use.
    #[arg(short = 'f')]
    pub force: bool,
    /// Wait until the new side is resilvered (for a RAID-Z vdev: until it is expanded).
    #[arg(short = 'w')]
    #[serde(skip)]
    pub wait: bool,
    pub pool: String,
    /// A device of the pool (a mirror side is attached beside it), or a RAID-Z vdev's name
    /// (`raidz1-0`: the vdev is expanded with the new device).
    pub device: String,
    pub new_device: String,
}

#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetachArgs {
    pub pool: String,
    pub device: String,
}

#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoveArgs {
    pub pool: String,
    #[arg(required = true)]
    pub devices: Vec<String>,
}

#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplaceArgs {
    /// Use the new device even if it seems in use.
    #[arg(short = 'f')]
    pub force: bool,
    /// Wait until the replace has finished (resilvered, old device detached).
    #[arg(short = 'w')]
    pub wait: bool,
    pub pool: String,
    pub device: String,
    pub new_device: Option<String>,
}

#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddArgs {
    /// Add even when the new vdev's replication differs from the pool's.
    #[arg(short = 'f')]
    pub force: bool,
    /// Show what would be added, change nothing.
    #[arg(short = 'n')]
    pub dry_run: bool,
    pub pool: String,
    #[arg(required = true, num_args = 1..)]
    pub vdevs: Vec<String>,
}
