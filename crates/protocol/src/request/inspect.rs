//! The inspect family (zdb): `tarn check` and `tarn debug ...` but `debug dataset` (a dataset's
//! record, served with the snapshots). Each runs in the daemon when it holds the pool, else in
//! the CLI on the exported pool found in the directories of `-d` (which the daemon does not
//! read, so they do not travel).

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verb", content = "args", rename_all = "snake_case")]
pub enum InspectRequest {
    Check(CheckArgs),
    /// `tarn::space::metaslab` per metaslab, as text or JSON.
    Metaslabs(MetaslabsArgs),
    /// The log space maps, summary and limits (`tarn::space::log::LogSpaceStats`).
    Logs(LogsArgs),
    /// Write the metaslab map (`output`, absolute).
    Map(MapArgs),
    Spacemap(SpacemapArgs),
    /// One object's dnode and block pointers as text.
    Object(ObjectArgs),
}

impl InspectRequest {
    /// The verb as the daemon's log and the pool history name it.
    pub fn verb(&self) -> &'static str {
        match self {
            InspectRequest::Check(_) => "check",
            InspectRequest::Metaslabs(_) => "debug metaslabs",
            InspectRequest::Logs(_) => "debug logs",
            InspectRequest::Map(_) => "debug map",
            InspectRequest::Spacemap(_) => "debug spacemap",
            InspectRequest::Object(_) => "debug object",
        }
    }
}

/// `tarn check [-n] [-d DIR]... POOL`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckArgs {
    /// Directory holding the pool's vdevs (repeatable); without it, /dev/disk/by-id and the
    /// directories of the vdevs the cache file names.
    #[arg(short = 'd', long = "dir")]
    #[serde(skip)]
    pub dirs: Vec<PathBuf>,
    /// Do not repair damaged copies.
    #[arg(short = 'n', long)]
    pub no_repair: bool,
    pub pool: String,
}

/// `tarn debug map [-d DIR]... [-o FILE.svg|FILE.png] POOL`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapArgs {
    #[arg(short = 'd', long = "dir")]
    #[serde(skip)]
    pub dirs: Vec<PathBuf>,
    /// The image to write: .svg, or .png (the same drawing rasterized); default POOL-map.svg
    /// in the current directory. The CLI sends it absolute, always named.
    #[arg(short = 'o', value_name = "FILE.svg|FILE.png")]
    pub output: Option<PathBuf>,
    pub pool: String,
}

impl MapArgs {
    /// The image to write, as `-o` names it or by default.
    pub fn output(&self) -> PathBuf {
        self.output
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}-map.svg", self.pool)))
    }
}

/// `tarn debug spacemap [-d DIR]... POOL VDEV METASLAB`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpacemapArgs {
    #[arg(short = 'd', long = "dir")]
    #[serde(skip)]
    pub dirs: Vec<PathBuf>,
    pub pool: String,
    pub vdev: u32,
    pub metaslab: u64,
}

/// `tarn debug metaslabs [-d DIR]... [-j] [-m[m[m]]] POOL`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetaslabsArgs {
    #[arg(short = 'd', long = "dir")]
    #[serde(skip)]
    pub dirs: Vec<PathBuf>,
    #[arg(short = 'j')]
    pub json: bool,
    /// Detail: -m, -mm or -mmm.
    #[arg(short = 'm', action = clap::ArgAction::Count)]
    pub level: u8,
    pub pool: String,
}

/// `tarn debug logs [-d DIR]... [-j] POOL`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsArgs {
    #[arg(short = 'd', long = "dir")]
    #[serde(skip)]
    pub dirs: Vec<PathBuf>,
    #[arg(short = 'j')]
    pub json: bool,
    pub pool: String,
}

/// `tarn debug object DATASET TARGET`: TARGET is a path in the file system or an object
/// number.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectArgs {
    pub dataset: String,
    pub target: String,
}
