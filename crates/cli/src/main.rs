//! `tarn`: the command line. Verbs follow zpool/zfs/zdb habits (see shared CLI.md).
//!
//! # Where a verb runs
//! Imported pools live in the tarn daemon (`daemon`), which the CLI starts on first need: `pool
//! create` and `pool import POOL` go to the daemon, starting it if no daemon serves the socket
//! (`--socket`, `$TARN_SOCKET`, or `/run/tarn/tarn.sock`). `pool export`, `pool destroy`, `pool
//! sync`, `check` and `debug ...` go to the daemon when it holds the pool; otherwise they run in
//! this process on the exported pool, found by scanning the directories given with `-d`
//! (default: the current directory), which is opened for the one command and closed again.
//! `pool list` and `pool status` show the daemon's pools and, when no daemon runs or `-d` is
//! given, the exported pools found on disk. Read-only verbs never start a daemon.
//!
//! The verbs themselves (`verbs`) print through `out!`/`err!`, which the daemon captures, so a
//! verb prints the same text wherever it ran.

/// `println!` that never panics: output into a closed pipe (`tarn ... | head`) is dropped, so a
/// command still finishes its work (and exports its pool) when nobody reads what it prints. In
/// the daemon the line goes into the request's captured output instead.
macro_rules! out {
    () => {
        $crate::output::write_stdout_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout_line(format_args!($($arg)*))
    };
}

/// `eprintln!` that the daemon captures like `out!`.
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::output::write_stderr_line(format_args!($($arg)*))
    };
}

mod bench;
mod bench_sync;
mod client;
mod daemon;
mod datasets;
mod format;
mod mounts;
mod output;
mod protocol;
mod quickstart;
mod stat;
mod verbs;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use format::{parse_size, print_table, ListFormat};
use protocol::{Request, Response};
use tarn::pool::{parse_vdev_specs, validate_pool_name, ImportOptions, Pool, PoolError};
use tarn::tunables::Tunables;
use tarn::vdev::label::PoolState;
use verbs::{absolute, PoolRow, StatusEntry, POOL_LIST_COLUMNS};

#[derive(Parser)]
#[command(
    name = "tarn",
    version,
    about = "pooled copy-on-write storage in the design family of OpenZFS"
)]
struct Cli {
    /// The daemon's socket (default: $TARN_SOCKET, else /run/tarn/tarn.sock).
    #[arg(long = "socket", global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Pool commands (zpool).
    #[command(subcommand)]
    Pool(PoolCommand),
    /// Verify a whole pool: every block and copy against its checksum and the space maps.
    Check {
        /// Directory holding the pool's vdevs (repeatable).
        #[arg(short = 'd', long = "dir")]
        dirs: Vec<PathBuf>,
        /// Do not repair damaged copies.
        #[arg(short = 'n', long)]
        no_repair: bool,
        pool: String,
    },
    /// Create a file system: tarn create [-p] [-o prop=val]... POOL/NAME
    Create {
        /// Create missing parent file systems too.
        #[arg(short = 'p')]
        parents: bool,
        /// Properties of the new file system (prop=value, repeatable).
        #[arg(short = 'o')]
        properties: Vec<String>,
        name: String,
    },
    /// Unmount and destroy a file system.
    Destroy {
        /// Destroy its descendants too.
        #[arg(short = 'r')]
        recursive: bool,
        /// Same as -r (there are no clones yet).
        #[arg(short = 'R')]
        recursive_dependents: bool,
        /// Dry run: print what would be destroyed.
        #[arg(short = 'n')]
        dry_run: bool,
        /// Print what is destroyed (always printed).
        #[arg(short = 'v')]
        verbose: bool,
        name: String,
    },
    /// List file systems with their space and mountpoint.
    List {
        /// Include the descendants of the dataset named.
        #[arg(short = 'r')]
        recursive: bool,
        /// Types to list: filesystem, snapshot, all.
        #[arg(short = 't', value_delimiter = ',')]
        types: Option<Vec<String>>,
        #[command(flatten)]
        list: ListArgs,
        name: Option<String>,
    },
    /// Print properties: tarn get PROP[,PROP]|all DATASET...
    Get {
        #[command(flatten)]
        list: ListArgs,
        properties: String,
        #[arg(required = true, num_args = 1..)]
        names: Vec<String>,
    },
    /// Set a property: tarn set PROP=VALUE DATASET
    Set { setting: String, name: String },
    /// Clear a local setting so the property inherits again: tarn inherit PROP DATASET
    Inherit { property: String, name: String },
    /// Mount a file system (at MOUNTPOINT for this once), every one (-a), or list mounts.
    Mount {
        #[arg(short = 'a')]
        all: bool,
        /// List mounts as JSON.
        #[arg(short = 'j')]
        json: bool,
        name: Option<String>,
        mountpoint: Option<PathBuf>,
    },
    /// Unmount a file system (by name or mountpoint), or every one (-a).
    #[command(alias = "umount")]
    Unmount {
        #[arg(short = 'a')]
        all: bool,
        /// Unmount even when busy (lazily).
        #[arg(short = 'f')]
        force: bool,
        target: Option<String>,
    },
    /// Inspection (zdb).
    #[command(subcommand)]
    Debug(DebugCommand),
    /// Kstat-style tables of an imported pool's counters: tarn stat [-H] [-p] [-j] txgs [POOL]
    /// [INTERVAL [COUNT]].
    Stat(stat::StatArgs),
    /// The daemon that holds imported pools; normally started by the CLI itself.
    Daemon {
        /// Run in this process instead of detaching.
        #[arg(long)]
        foreground: bool,
        /// Ask the running daemon to export every pool and exit; wait until it has.
        #[arg(long, conflicts_with = "foreground")]
        stop: bool,
    },
    /// A guided demo on sparse files in DIR (default: ./tarn-quickstart); never prompts.
    Quickstart { dir: Option<PathBuf> },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

#[derive(Args, Clone)]
struct ListArgs {
    /// No header; fields separated by tabs.
    #[arg(short = 'H')]
    no_header: bool,
    /// Exact numbers (bytes).
    #[arg(short = 'p')]
    exact: bool,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
    /// Fields to print, comma-separated.
    #[arg(short = 'o', value_delimiter = ',')]
    fields: Option<Vec<String>>,
}

impl ListArgs {
    fn format(&self) -> ListFormat {
        ListFormat {
            no_header: self.no_header,
            exact: self.exact,
            json: self.json,
            fields: self.fields.clone(),
        }
    }
}

#[derive(Subcommand)]
enum PoolCommand {
    /// Create a pool: tarn pool create [-f] [-s SIZE] POOL VDEVSPEC...
    Create {
        #[arg(short = 'f')]
        force: bool,
        /// Create missing device files as sparse files of this size (e.g. 2G).
        #[arg(short = 's')]
        size: Option<String>,
        /// Pool properties (prop=value); only feature@NAME=disabled is understood yet.
        #[arg(short = 'o')]
        properties: Vec<String>,
        /// Mount under this directory (the root file system at ALTROOT/POOL).
        #[arg(short = 'R')]
        altroot: Option<PathBuf>,
        /// Where the root file system mounts: an absolute path, or none (default /POOL).
        #[arg(short = 'm')]
        mountpoint: Option<String>,
        /// Properties of the root file system (prop=value, repeatable).
        #[arg(short = 'O')]
        fs_properties: Vec<String>,
        pool: String,
        #[arg(required = true, num_args = 1..)]
        vdevs: Vec<String>,
    },
    /// Import a pool into the daemon, or with no name list the pools found.
    Import {
        #[arg(short = 'd', long = "dir")]
        dirs: Vec<PathBuf>,
        #[arg(short = 'f')]
        force: bool,
        /// List destroyed pools instead of importable ones.
        #[arg(short = 'D')]
        destroyed: bool,
        /// readonly=on imports without writing anything.
        #[arg(short = 'o')]
        options: Vec<String>,
        /// Mount under this directory (the root file system at ALTROOT/POOL).
        #[arg(short = 'R')]
        altroot: Option<PathBuf>,
        /// Rewind: if no recent txg opens, go back to the newest txg whose whole tree reads
        /// and checks, discarding newer changes.
        #[arg(short = 'F')]
        rewind: bool,
        /// With -F: only say which txg a rewind would open and how much it would discard.
        #[arg(short = 'n', requires = "rewind")]
        dry_run: bool,
        pool: Option<String>,
        new_name: Option<String>,
    },
    /// Export a pool (mark it cleanly exported).
    Export {
        #[arg(short = 'd', long = "dir")]
        dirs: Vec<PathBuf>,
        #[arg(short = 'f')]
        force: bool,
        pool: String,
    },
    /// Destroy a pool: its vdevs no longer import.
    Destroy {
        #[arg(short = 'd', long = "dir")]
        dirs: Vec<PathBuf>,
        #[arg(short = 'f')]
        force: bool,
        pool: String,
    },
    /// Force a txg sync of one imported pool, or of all of them.
    Sync { pool: Option<String> },
    /// List pools with their size and use.
    List {
        #[arg(short = 'd', long = "dir")]
        dirs: Vec<PathBuf>,
        #[command(flatten)]
        list: ListArgs,
        pool: Option<String>,
    },
    /// Show the vdev tree, state and error counts of pools.
    Status {
        #[arg(short = 'd', long = "dir")]
        dirs: Vec<PathBuf>,
        #[arg(short = 'j')]
        json: bool,
        pool: Option<String>,
    },
}

#[derive(Subcommand)]
enum DebugCommand {
    /// Every record of one metaslab's space map.
    Spacemap {
        #[arg(short = 'd', long = "dir")]
        dirs: Vec<PathBuf>,
        pool: String,
        vdev: u32,
        metaslab: u64,
    },
    /// Per-metaslab offset, space map, free space and fragmentation.
    Metaslabs {
        #[arg(short = 'd', long = "dir")]
        dirs: Vec<PathBuf>,
        #[arg(short = 'j')]
        json: bool,
        pool: String,
    },
}

/// A failure the user should read: printed to stderr, exit status 1.
struct Failure(String);

impl From<PoolError> for Failure {
    fn from(error: PoolError) -> Self {
        Failure(error.to_string())
    }
}

impl From<String> for Failure {
    fn from(error: String) -> Self {
        Failure(error)
    }
}

/// Exit status of a command.
type Status = u8;

fn dirs_or_default(dirs: &[PathBuf]) -> Vec<PathBuf> {
    if dirs.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        dirs.to_vec()
    }
}

fn tunables() -> Result<Tunables, Failure> {
    Tunables::from_env().map_err(Failure)
}

pub(crate) fn import_options(dirs: &[PathBuf], readonly: bool) -> Result<ImportOptions, Failure> {
    Ok(ImportOptions {
        dirs: dirs_or_default(dirs),
        readonly,
        tunables: tunables()?,
        new_name: None,
        wrap_device: None,
        rewind: false,
        rewind_to: None,
    })
}

/// Open an exported pool in this process for one command.
fn open_named(dirs: &[PathBuf], name: &str, readonly: bool) -> Result<Pool, Failure> {
    verbs::open_quietly(name, import_options(dirs, readonly)?)
}

/// Print a daemon's answer as if the verb had run here; its exit status.
fn forward(response: Response) -> Status {
    output::print_raw(&response.stdout, &response.stderr);
    response.status
}

/// Ask the daemon if it runs and holds the pool the request names; `None` means run in-process.
fn ask_holder(socket: &Path, request: &Request) -> Result<Option<Status>, Failure> {
    match client::ask_if_running(socket, request)? {
        Some(response) if !response.not_imported => Ok(Some(forward(response))),
        _ => Ok(None),
    }
}

/// Check `-m`: an absolute path, `none` or `legacy`.
fn check_mountpoint(mountpoint: &Option<String>) -> Result<(), Failure> {
    match mountpoint.as_deref() {
        None | Some("none") | Some("legacy") => Ok(()),
        Some(path) if Path::new(path).is_absolute() => Ok(()),
        Some(other) => Err(Failure(format!(
            "invalid mountpoint {other:?}: expected an absolute path, none or legacy"
        ))),
    }
}

#[allow(clippy::too_many_arguments)]
fn pool_create(
    socket: &Path,
    force: bool,
    size: Option<String>,
    properties: Vec<String>,
    altroot: Option<PathBuf>,
    mountpoint: Option<String>,
    fs_properties: Vec<String>,
    name: String,
    vdevs: Vec<String>,
) -> Result<Status, Failure> {
    check_mountpoint(&mountpoint)?;
    let fs_properties = datasets::cli::parse_settings(&fs_properties)?;
    Pool::parse_properties(&fs_properties)?;
    let mut disabled_features = Vec::new();
    for property in &properties {
        let (key, value) = property.split_once('=').ok_or_else(|| {
            Failure(format!(
                "invalid property {property:?}: expected prop=value"
            ))
        })?;
        let Some(feature) = key.strip_prefix("feature@") else {
            return Err(Failure(format!(
                "unknown pool property {key:?} (pool properties: feature@NAME=enabled|disabled)"
            )));
        };
        match value {
            "disabled" => disabled_features.push(feature.to_string()),
            "enabled" => {}
            other => {
                return Err(Failure(format!(
                    "invalid value {other:?} for {key}: expected enabled or disabled"
                )))
            }
        }
    }
    let size_bytes = size.as_deref().map(parse_size).transpose()?;
    validate_pool_name(&name)?;
    // Paths become absolute here (the daemon does not share our working directory); the
    // keywords stay as they are.
    let keywords = [
        "mirror", "raidz", "raidz1", "raidz2", "raidz3", "spare", "log", "cache", "special",
        "dedup",
    ];
    let vdevs: Vec<String> = vdevs
        .iter()
        .map(|word| {
            if keywords.contains(&word.as_str()) {
                word.clone()
            } else {
                absolute(Path::new(word)).display().to_string()
            }
        })
        .collect();
    // Spelling mistakes are reported without starting a daemon.
    parse_vdev_specs(&vdevs)?;
    let request = Request::PoolCreate {
        name,
        vdevs,
        size_bytes,
        force,
        disabled_features,
        altroot: altroot.as_deref().map(absolute),
        mountpoint,
        properties: fs_properties,
    };
    Ok(forward(client::ask_starting(socket, &request)?))
}

fn parse_import_options(options: &[String]) -> Result<bool, Failure> {
    let mut readonly = false;
    for option in options {
        match option.as_str() {
            "readonly=on" => readonly = true,
            "readonly=off" => readonly = false,
            other => {
                return Err(Failure(format!(
                    "unknown import option {other:?} (known: readonly=on|off)"
                )))
            }
        }
    }
    Ok(readonly)
}

/// Guids of the pools the daemon holds (empty when no daemon runs).
fn daemon_rows(socket: &Path, pool: Option<&str>) -> Result<Option<Vec<PoolRow>>, Failure> {
    let request = Request::PoolList {
        pool: pool.map(str::to_string),
    };
    let Some(response) = client::ask_if_running(socket, &request)? else {
        return Ok(None);
    };
    if response.status != 0 {
        return Err(Failure(format!(
            "the daemon could not list its pools: {}",
            response.stderr.trim()
        )));
    }
    let rows = serde_json::from_value(response.data["pools"].clone())
        .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?;
    Ok(Some(rows))
}

/// `pool import -F -n POOL`: say what a rewind import would open and discard, in this
/// process, writing nothing.
fn pool_import_dry_run(dirs: Vec<PathBuf>, pool: &str) -> Result<Status, Failure> {
    let plan = Pool::rewind_plan(pool, import_options(&dirs, true)?)?;
    if plan.txg == plan.newest_txg {
        out!(
            "pool {pool} would import at its newest txg {}: no rewind needed",
            plan.txg
        );
    } else {
        for (txg, why) in &plan.skipped {
            out!("txg {txg} cannot be used: {why}");
        }
        out!(
            "would rewind pool {pool} from txg {} to txg {}, discarding {} seconds of changes",
            plan.newest_txg,
            plan.txg,
            plan.seconds_discarded
        );
    }
    Ok(0)
}

/// `pool import` flags passed to the daemon.
struct ImportFlags {
    options: Vec<String>,
    altroot: Option<PathBuf>,
    rewind: bool,
}

fn pool_import(
    socket: &Path,
    dirs: Vec<PathBuf>,
    show_destroyed: bool,
    flags: ImportFlags,
    pool: Option<String>,
    new_name: Option<String>,
) -> Result<Status, Failure> {
    let ImportFlags {
        options,
        altroot,
        rewind,
    } = flags;
    let readonly = parse_import_options(&options)?;
    let Some(name) = pool else {
        let held: BTreeSet<u64> = daemon_rows(socket, None)?
            .unwrap_or_default()
            .iter()
            .map(|row| row.guid)
            .collect();
        let found: Vec<_> = Pool::scan(&dirs_or_default(&dirs))
            .into_iter()
            .filter(|pool| show_destroyed == (pool.state == PoolState::Destroyed))
            .filter(|pool| !held.contains(&pool.guid.0))
            .collect();
        if found.is_empty() {
            out!("no pools available to import");
        }
        for pool in found {
            out!(
                "   pool: {}\n     id: {}\n  state: {:?} (txg {})\n vdevs: {}\n",
                pool.name,
                pool.guid,
                pool.state,
                pool.txg,
                pool.leaves_found
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        return Ok(0);
    };
    let request = Request::PoolImport {
        pool: name,
        new_name,
        dirs: dirs_or_default(&dirs).iter().map(|d| absolute(d)).collect(),
        readonly,
        altroot: altroot.as_deref().map(absolute),
        rewind,
    };
    Ok(forward(client::ask_starting(socket, &request)?))
}

fn pool_export(
    socket: &Path,
    dirs: Vec<PathBuf>,
    force: bool,
    pool: String,
) -> Result<Status, Failure> {
    let request = Request::PoolExport {
        pool: pool.clone(),
        force,
    };
    if let Some(status) = ask_holder(socket, &request)? {
        return Ok(status);
    }
    // Not imported in the daemon: mark an exported-by-crash pool exported, in this process.
    let found = Pool::scan(&dirs_or_default(&dirs));
    let Some(candidate) = found
        .iter()
        .find(|p| p.name == pool && p.state != PoolState::Destroyed)
    else {
        return Err(Failure(format!("cannot export '{pool}': no such pool")));
    };
    if candidate.state == PoolState::Exported {
        out!("pool {pool} is already exported");
    } else {
        open_named(&dirs, &pool, false)?.export()?;
        out!("exported pool {pool}");
    }
    Ok(0)
}

fn pool_destroy(
    socket: &Path,
    dirs: Vec<PathBuf>,
    force: bool,
    pool: String,
) -> Result<Status, Failure> {
    let request = Request::PoolDestroy {
        pool: pool.clone(),
        force,
    };
    if let Some(status) = ask_holder(socket, &request)? {
        return Ok(status);
    }
    open_named(&dirs, &pool, false)?.destroy()?;
    out!("destroyed pool {pool}");
    Ok(0)
}

fn pool_sync(socket: &Path, pool: Option<String>) -> Result<Status, Failure> {
    let request = Request::PoolSync { pool: pool.clone() };
    match client::ask_if_running(socket, &request)? {
        Some(response) => Ok(forward(response)),
        None => match pool {
            Some(name) => Err(Failure(format!(
                "cannot sync '{name}': pool is not imported (no tarn daemon on {})",
                socket.display()
            ))),
            None => Ok(0),
        },
    }
}

/// Whether to scan directories for exported pools: always without a daemon, and with one only
/// when `-d` names where to look.
fn scan_dirs(dirs: &[PathBuf], daemon_running: bool) -> Option<Vec<PathBuf>> {
    if !daemon_running || !dirs.is_empty() {
        Some(dirs_or_default(dirs))
    } else {
        None
    }
}

fn pool_list(
    socket: &Path,
    dirs: Vec<PathBuf>,
    list: ListArgs,
    name: Option<String>,
) -> Result<Status, Failure> {
    let daemon = daemon_rows(socket, name.as_deref())?;
    let daemon_running = daemon.is_some();
    let mut rows = daemon.unwrap_or_default();
    let held: BTreeSet<u64> = rows.iter().map(|row| row.guid).collect();
    let mut any_found = !rows.is_empty();
    if let Some(scan) = scan_dirs(&dirs, daemon_running) {
        let found = Pool::scan(&scan);
        any_found |= !found.is_empty();
        for candidate in found
            .iter()
            .filter(|p| p.state != PoolState::Destroyed && !held.contains(&p.guid.0))
        {
            if name.as_ref().is_some_and(|n| n != &candidate.name) {
                continue;
            }
            let pool = open_named(&dirs, &candidate.guid.0.to_string(), true)?;
            let mut row = verbs::pool_row(&pool);
            row.name = candidate.name.clone();
            rows.push(row);
            pool.export()?;
        }
    }
    if let Some(name) = &name {
        if rows.is_empty() {
            return Err(Failure(format!("cannot open '{name}': no such pool")));
        }
    }
    rows.sort_by(|a, b| a.name.cmp(&b.name).then(a.guid.cmp(&b.guid)));
    let cells: Vec<_> = rows.iter().map(PoolRow::cells).collect();
    print_table(&POOL_LIST_COLUMNS, &cells, &list.format(), "pools")?;
    if !any_found {
        err!(
            "no pools imported (no tarn daemon on {}) and none found in {}",
            socket.display(),
            dirs_or_default(&dirs)
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(0)
}

fn pool_status(
    socket: &Path,
    dirs: Vec<PathBuf>,
    json: bool,
    name: Option<String>,
) -> Result<Status, Failure> {
    let request = Request::PoolStatus { pool: name.clone() };
    let daemon = client::ask_if_running(socket, &request)?;
    let daemon_running = daemon.is_some();
    let mut entries: Vec<StatusEntry> = match daemon {
        Some(response) => serde_json::from_value(response.data["pools"].clone())
            .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?,
        None => Vec::new(),
    };
    let held: BTreeSet<u64> = entries.iter().map(|entry| entry.guid).collect();
    if let Some(scan) = scan_dirs(&dirs, daemon_running) {
        for candidate in Pool::scan(&scan)
            .iter()
            .filter(|p| p.state != PoolState::Destroyed && !held.contains(&p.guid.0))
        {
            if name.as_ref().is_some_and(|n| n != &candidate.name) {
                continue;
            }
            let pool = open_named(&dirs, &candidate.guid.0.to_string(), true)?;
            entries.push(verbs::status_entry(&pool));
            pool.export()?;
        }
    }
    if entries.is_empty() {
        return Err(Failure(match name {
            Some(name) => format!("cannot open '{name}': no such pool"),
            None => "no pools available".into(),
        }));
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name).then(a.guid.cmp(&b.guid)));
    verbs::print_status(&entries, json);
    Ok(0)
}

fn check(
    socket: &Path,
    dirs: Vec<PathBuf>,
    no_repair: bool,
    name: String,
) -> Result<Status, Failure> {
    let request = Request::Check {
        pool: name.clone(),
        repair: !no_repair,
    };
    if let Some(status) = ask_holder(socket, &request)? {
        return Ok(status);
    }
    let pool = open_named(&dirs, &name, no_repair)?;
    let clean = verbs::check(&pool, &name, !no_repair)?;
    pool.export()?;
    Ok(if clean { 0 } else { 1 })
}

fn debug_metaslabs(
    socket: &Path,
    dirs: Vec<PathBuf>,
    json: bool,
    name: String,
) -> Result<Status, Failure> {
    let request = Request::DebugMetaslabs {
        pool: name.clone(),
        json,
    };
    if let Some(status) = ask_holder(socket, &request)? {
        return Ok(status);
    }
    let pool = open_named(&dirs, &name, true)?;
    verbs::debug_metaslabs(&pool, &name, json);
    pool.export()?;
    Ok(0)
}

fn debug_spacemap(
    socket: &Path,
    dirs: Vec<PathBuf>,
    name: String,
    vdev: u32,
    metaslab: u64,
) -> Result<Status, Failure> {
    let request = Request::DebugSpacemap {
        pool: name.clone(),
        vdev,
        metaslab,
    };
    if let Some(status) = ask_holder(socket, &request)? {
        return Ok(status);
    }
    let pool = open_named(&dirs, &name, true)?;
    let result = verbs::debug_spacemap(&pool, &name, vdev, metaslab);
    pool.export()?;
    result.map(|()| 0)
}

fn daemon_verb(socket: &Path, foreground: bool, stop: bool) -> Result<Status, Failure> {
    if stop {
        match client::stop_daemon(socket)? {
            Some(pid) => out!("tarn daemon {pid} on {} stopped", socket.display()),
            None => out!("no tarn daemon running on {}", socket.display()),
        }
        return Ok(0);
    }
    if foreground {
        daemon::run_foreground(socket)?;
        return Ok(0);
    }
    if let Some(pid) = client::ping(socket) {
        return Err(Failure(format!(
            "a tarn daemon (pid {pid}) is already running on {}",
            socket.display()
        )));
    }
    let pid = client::start_daemon(socket)?;
    out!(
        "tarn daemon {pid} listening on {} (log: {})",
        socket.display(),
        daemon::log_path(socket).display()
    );
    Ok(0)
}

fn run(cli: Cli) -> Result<Status, Failure> {
    // Every verb validates the environment's tunables first, pool or no pool.
    tunables()?;
    let socket = client::socket_path(cli.socket.as_deref());
    let socket = socket.as_path();
    match cli.command {
        Command::Pool(command) => match command {
            PoolCommand::Create {
                force,
                size,
                properties,
                altroot,
                mountpoint,
                fs_properties,
                pool,
                vdevs,
            } => pool_create(
                socket,
                force,
                size,
                properties,
                altroot,
                mountpoint,
                fs_properties,
                pool,
                vdevs,
            ),
            PoolCommand::Import {
                dirs,
                force: _,
                destroyed,
                options,
                altroot,
                rewind,
                dry_run,
                pool,
                new_name,
            } => match (dry_run, pool) {
                (true, Some(pool)) => pool_import_dry_run(dirs, &pool),
                (true, None) => Err(Failure("-n needs a pool name".into())),
                (false, pool) => pool_import(
                    socket,
                    dirs,
                    destroyed,
                    ImportFlags {
                        options,
                        altroot,
                        rewind,
                    },
                    pool,
                    new_name,
                ),
            },
            PoolCommand::Export { dirs, force, pool } => pool_export(socket, dirs, force, pool),
            PoolCommand::Destroy { dirs, force, pool } => pool_destroy(socket, dirs, force, pool),
            PoolCommand::Sync { pool } => pool_sync(socket, pool),
            PoolCommand::List { dirs, list, pool } => pool_list(socket, dirs, list, pool),
            PoolCommand::Status { dirs, json, pool } => pool_status(socket, dirs, json, pool),
        },
        Command::Check {
            dirs,
            no_repair,
            pool,
        } => check(socket, dirs, no_repair, pool),
        Command::Create {
            parents,
            properties,
            name,
        } => datasets::cli::create(socket, parents, &properties, name),
        Command::Destroy {
            recursive,
            recursive_dependents,
            dry_run,
            verbose: _,
            name,
        } => datasets::cli::destroy(socket, recursive || recursive_dependents, dry_run, name),
        Command::List {
            recursive,
            types,
            list,
            name,
        } => datasets::cli::list(socket, recursive, types, list.format(), name),
        Command::Get {
            list,
            properties,
            names,
        } => datasets::cli::get(socket, list.format(), properties, names),
        Command::Set { setting, name } => datasets::cli::set(socket, setting, name),
        Command::Inherit { property, name } => datasets::cli::inherit(socket, property, name),
        Command::Mount {
            all,
            json,
            name,
            mountpoint,
        } => datasets::cli::mount(socket, all, json, name, mountpoint),
        Command::Unmount { all, force, target } => {
            datasets::cli::unmount(socket, all, force, target)
        }
        Command::Debug(DebugCommand::Metaslabs { dirs, json, pool }) => {
            debug_metaslabs(socket, dirs, json, pool)
        }
        Command::Debug(DebugCommand::Spacemap {
            dirs,
            pool,
            vdev,
            metaslab,
        }) => debug_spacemap(socket, dirs, pool, vdev, metaslab),
        Command::Stat(command) => {
            stat::run(socket, command)?;
            Ok(0)
        }
        Command::Daemon { foreground, stop } => daemon_verb(socket, foreground, stop),
        Command::Quickstart { dir } => {
            quickstart::run(dir.unwrap_or_else(|| PathBuf::from("tarn-quickstart")))?;
            Ok(0)
        }
        Command::Bench(command) => {
            bench::run(command)?;
            Ok(0)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(status) => ExitCode::from(status),
        Err(Failure(message)) => {
            err!("tarn: {message}");
            ExitCode::from(1)
        }
    }
}

pub(crate) use Failure as CliFailure;
