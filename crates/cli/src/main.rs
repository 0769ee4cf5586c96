//! `tarn`: the command line. Verbs follow zpool/zfs/zdb habits (see shared CLI.md).
//!
//! # Where a verb runs
//! Imported pools live in the tarn daemon (`daemon`), which the CLI starts on first need: `pool
//! create` and `pool import POOL` go to the daemon, starting it if no daemon serves the socket
//! (`--socket`, `$TARN_SOCKET`, or `/run/tarn/tarn.sock`). `pool export`, `pool destroy`, `pool
//! sync`, `check` and `debug ...` go to the daemon when it holds the pool; otherwise they run in
//! this process on the exported pool, found by scanning the directories given with `-d`
//! (default: `tarn_ops::cachefile::default_search_path`, /dev/disk/by-id and the directories
//! the cache file names, as for `pool import`), which is opened for the one command and closed
//! again. `pool list` and `pool status` show the daemon's pools only, as zpool's show imported
//! pools only; `pool import` without a pool name lists the exported ones. Read-only verbs never
//! start a daemon.
//!
//! The verb bodies that act on an open pool (`tarn-ops`) print through `out!`/`err!`, which the
//! daemon captures, so a verb prints the same text wherever it ran.
//!
//! # Crates
//! The command side is five crates beside the engine (`tarn`) and the FUSE layer
//! (`tarn-fuse`); the compiler keeps them apart, each depending only on those above it:
//! ```text
//! tarn-protocol  what both sides of the socket share: the wire protocol (Request, Response,
//!                frames, rows), every verb's arguments (one struct each, which clap parses
//!                and the wire carries), the client, the kstat tables, the Prometheus
//!                renderer, Failure, the table printer, out!/err!
//! tarn-ops       verb bodies on an open pool, wherever it is open (daemon or this process);
//!                the cache file, a pool's records, the scan lines of pool status
//! tarn-daemon    the server (`tarn daemon`): the pools it holds, their mounts, the requests
//! tarn-bench     tarn bench: the benchmarks (the client side only, never the CLI or daemon)
//! tarn-cli       this crate, the `tarn` binary: clap, the verbs, quickstart
//! ```
//! The verbs (here) and the daemon never import each other: they meet in `tarn-protocol` and
//! share `tarn-ops`. Only `main` names the daemon (`tarn daemon` runs the server). `tarn
//! bench` is compiled in with the `bench` cargo feature (on by default).
//!
//! # Layout of this crate
//! ```text
//! verbs        the CLI side, one module per family:
//!   pool, pool_cache, pool_records, devices, scrub   tarn pool ... (zpool)
//!   dataset      tarn create|destroy|list|get|set|inherit|mount|unmount (zfs)
//!   owners       tarn userspace|groupspace|projectspace (zfs)
//!   owner_names  user and group names (userquota@alice) turned into IDs and back
//!   allow        tarn allow|unallow (zfs allow): delegated permissions
//!   replication  tarn send|receive
//!   inspect      tarn check, tarn debug ... (zdb)
//!   inject       tarn inject (zinject)
//!   report       reports at intervals (stat, arcstat, iostat)
//!   stat, arcstat, iostat   tarn stat (kstat tables), tarn pool iostat
//! quickstart   tarn quickstart
//! main         the clap tree (whose leaves are tarn_protocol::request's structs) and dispatch
//! ```
//! No module imports one that imports it back, in any crate (`scripts/check-cycles.py`).

#[macro_use]
extern crate tarn_protocol;

#[cfg(test)]
mod cli_forms;
mod quickstart;
mod verbs;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use tarn_protocol::client;
use tarn_protocol::error::{Failure, Status};
use tarn_protocol::request::dataset::{
    AllowArgs, CreateArgs, DestroyArgs, GetArgs, InheritArgs, ListArgs, MountArgs, SetArgs,
    SpaceArgs, UnmountArgs,
};
use tarn_protocol::request::devices::{AddArgs, AttachArgs, DetachArgs, RemoveArgs, ReplaceArgs};
use tarn_protocol::request::inject::InjectArgs;
use tarn_protocol::request::inspect::{
    CheckArgs, LogsArgs, MapArgs, MetaslabsArgs, ObjectArgs, SpacemapArgs,
};
use tarn_protocol::request::pool::{
    self as pool_request, ClearArgs, HistoryArgs, ImportArgs, ReleaseArgs, StatusArgs,
};
use tarn_protocol::request::replication::{ReceiveArgs, SendArgs};
use tarn_protocol::request::scan::{DeviceStateArgs, ScanRequest, ScrubArgs};
use tarn_protocol::request::snapshot::{
    BookmarkArgs, CloneArgs, HoldArgs, HoldsArgs, NameArgs, RenameArgs, RollbackArgs, SnapshotArgs,
};
use tarn_protocol::request::{PoolName, PoolOption};
use verbs::{dataset, holds, inspect, iostat, owners, pool, replication, stat};

/// Large buffers aligned for the vdevs' direct I/O, so that block reads and writes need no
/// staging copy (`tarn::vdev::alloc`).
#[global_allocator]
static ALLOCATOR: tarn::DirectIoAllocator = tarn::DirectIoAllocator;

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

/// `tarn diff`'s arguments: `-h` is zfs diff's (do not escape paths), so help is `--help`
/// alone.
#[derive(clap::Args)]
struct DiffCliArgs {
    #[command(flatten)]
    args: tarn_protocol::request::snapshot::DiffArgs,
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    help: Option<bool>,
}

#[derive(Subcommand)]
enum Command {
    /// Pool commands (zpool).
    #[command(subcommand)]
    Pool(PoolCommand),
    /// Inject faults into an imported pool's devices (zinject; root only): tarn inject
    /// [-d DEV] [-e io|corrupt|delay|vanish] [-T read|write|all] [-f PERCENT] [-n COUNT]
    /// [-o DATASET:PATH|OBJECT [-l LEVEL]] POOL. Without a pool it lists the active
    /// injections; -c ID|all clears. Injections end when the pool is exported.
    Inject(InjectArgs),
    /// Verify a whole pool: every block and copy against its checksum and the space maps.
    Check(CheckArgs),
    /// Create a file system: tarn create [-p] [-o prop=val]... POOL/NAME
    Create(CreateArgs),
    /// Unmount and destroy a file system, or destroy snapshots (FS@SNAP, FS@A%B, FS@A,B).
    Destroy(DestroyArgs),
    /// List file systems with their space and mountpoint.
    List(ListArgs),
    /// Print properties: tarn get PROP[,PROP]|all DATASET... (also userquota@USER, userused@USER,
    /// userobjquota@, userobjused@, and their group and project forms, which all does not list)
    Get(GetArgs),
    /// Set a property: tarn set PROP=VALUE DATASET (also userquota@USER=SIZE,
    /// groupquota@GROUP=SIZE, projectquota@ID=SIZE, userobjquota@USER=COUNT, groupobjquota@,
    /// projectobjquota@; none removes one). USER and GROUP are names or numeric IDs.
    Set(SetArgs),
    /// Clear a local setting so the property inherits again: tarn inherit PROP DATASET (an
    /// owner quota such as userquota@USER is removed)
    Inherit(InheritArgs),
    /// Space used and quotas by user in a file system or snapshot (zfs userspace): tarn
    /// userspace [-H] [-p] [-j] [-n] [-o FIELD,...] [-s FIELD]... [-S FIELD]... [-t TYPE,...]
    /// DATASET. Fields: type, name, used, quota, objused, objquota (default all); usage as of
    /// the last synced txg.
    Userspace(SpaceArgs),
    /// Space used and quotas by group (zfs groupspace): as userspace, listing groups.
    Groupspace(SpaceArgs),
    /// Space used and quotas by project (zfs projectspace): as userspace, listing projects;
    /// no -t.
    Projectspace(SpaceArgs),
    /// Delegate permissions on a file system to users other than root (zfs allow): tarn allow
    /// [-u USER[,USER]...|-g GROUP[,GROUP]...|-e] [-l] [-d] PERM[,PERM]... FS; -l on FS only,
    /// -d on its descendants only, neither both. PERM: create, destroy, snapshot, rollback,
    /// clone, promote, rename, mount, send, receive, hold, release, bookmark, diff, userprop,
    /// userquota, groupquota, ..., or a property's name. tarn allow FS lists the grants.
    Allow(AllowArgs),
    /// Revoke delegated permissions (zfs unallow): tarn unallow [-u USER|-g GROUP|-e] [-l] [-d]
    /// [PERM[,PERM]...] FS; no PERM revokes all of the grantee's.
    Unallow(AllowArgs),
    /// Mount a file system (at MOUNTPOINT for this once), every one (-a), or list mounts.
    Mount(MountArgs),
    /// Unmount a file system (by name or mountpoint), or every one (-a).
    #[command(alias = "umount")]
    Unmount(UnmountArgs),
    /// Take snapshots, all in one txg: tarn snapshot [-r] FS@SNAP...
    #[command(alias = "snap")]
    Snapshot(SnapshotArgs),
    /// Clone a snapshot as a new, writable file system: tarn clone [-o prop=val]... FS@SNAP FS
    Clone(CloneArgs),
    /// Promote a clone: its origin's snapshots up to the origin move to it, and the origin's
    /// file system becomes its clone: tarn promote CLONE
    Promote(NameArgs),
    /// Bookmark a snapshot: FS#NAME keeps its guid and txg, a source for incremental sends
    /// after the snapshot is gone: tarn bookmark FS@SNAP FS#NAME (tarn destroy FS#NAME).
    Bookmark(BookmarkArgs),
    /// Put a user hold named TAG on snapshots (all in one txg): a held snapshot cannot be
    /// destroyed until every hold is released: tarn hold [-r] TAG FS@SNAP...
    Hold(HoldArgs),
    /// Take user hold TAG off snapshots; one marked for deferred destroy (destroy -d) goes
    /// with its last hold: tarn release [-r] TAG FS@SNAP...
    Release(HoldArgs),
    /// List the user holds of snapshots: tarn holds [-r] [-H] [-p] FS@SNAP...
    Holds(HoldsArgs),
    /// What changed between a snapshot and a later snapshot or the file system, found from
    /// the block trees: M modified, + added, - removed, R renamed (zfs diff):
    /// tarn diff [-F] [-H] [-t] [-h] FS@SNAP [FS@SNAP|FS]. Here -h keeps paths unescaped;
    /// help is --help.
    #[command(disable_help_flag = true)]
    Diff(DiffCliArgs),
    /// Write a snapshot to stdout as a replication stream: full, or incremental from an older
    /// snapshot of the same file system (-i), with every snapshot between (-I).
    Send(SendArgs),
    /// Read a replication stream from stdin into a file system: a full stream makes a new one,
    /// an incremental stream applies to the snapshot it came from.
    #[command(alias = "recv")]
    Receive(ReceiveArgs),
    /// Roll a file system back to its newest snapshot (-r: destroying newer ones).
    Rollback(RollbackArgs),
    /// Rename a file system (anywhere in its pool; remounted) or a snapshot (FS@SNAP FS@NEW or NEW).
    Rename(RenameArgs),
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
        /// Log level of the daemon's log (error, warn, info, debug, trace, or RUST_LOG's
        /// syntax); default: $RUST_LOG, else info.
        #[arg(long = "log-level", value_name = "LEVEL", conflicts_with = "stop")]
        log_level: Option<String>,
        /// Serve every stat table in the Prometheus/OpenMetrics text format at
        /// http://ADDR/metrics: a port alone (9134) listens on 127.0.0.1 only; name an address
        /// to listen elsewhere (0.0.0.0:9134, [::1]:9134).
        #[arg(long, value_name = "[ADDR:]PORT", conflicts_with = "stop", value_parser = metrics_address)]
        metrics: Option<std::net::SocketAddr>,
        /// How mounts talk to the kernel: uring (FUSE over io_uring; turns the host's
        /// enable_uring switch on, and says so in the log), dev (/dev/fuse), or auto (io_uring
        /// when the kernel offers it, /dev/fuse otherwise); default: $TARN_FUSE_TRANSPORT,
        /// else auto.
        #[arg(long = "fuse-transport", value_name = "TRANSPORT", conflicts_with = "stop",
              value_parser = ["auto", "uring", "dev"])]
        fuse_transport: Option<String>,
    },
    /// This build's version and protocol version, and the running daemon's (none is started):
    /// tarn version [-j]
    Version {
        /// JSON output (the schema of zfs version -j).
        #[arg(short = 'j')]
        json: bool,
    },
    /// A guided demo on sparse files in DIR (default: ./tarn-quickstart); never prompts.
    Quickstart { dir: Option<PathBuf> },
    /// Print the shell completion script for SHELL on stdout, generated from this command
    /// line's own definitions: e.g. tarn completion bash > /etc/bash_completion.d/tarn
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (tarn.1, and tarn-pool.1, tarn-pool-import.1, ... for every
    /// command), generated from this command line's own definitions, into DIR: e.g.
    /// tarn man /usr/local/share/man/man1
    Man { dir: PathBuf },
    /// Benchmarks.
    #[cfg(feature = "bench")]
    #[command(subcommand)]
    Bench(tarn_bench::BenchCommand),
}

#[derive(Subcommand)]
enum PoolCommand {
    /// Create a pool: tarn pool create [-f] [-s SIZE] POOL VDEVSPEC...
    Create(pool_request::CreateArgs),
    /// Import a pool into the daemon, or with no name list the pools found.
    Import(ImportArgs),
    /// Export a pool (mark it cleanly exported).
    Export(ReleaseArgs),
    /// Destroy a pool: its vdevs no longer import.
    Destroy(ReleaseArgs),
    /// Force a txg sync of one imported pool, or of all of them.
    Sync(PoolOption),
    /// List pools with their size and use.
    ///
    /// FRAG weighs each metaslab's free space by the size of its free segments with OpenZFS's
    /// table (512 B: 100% ... 512 MiB and more: 0%). For metaslabs under 1 GiB, which cannot
    /// hold a 512 MiB segment, the table is stretched so that a segment of half the metaslab
    /// reads 0% (an untouched small pool reads 0, not 7-12%); such a pool's FRAG is therefore
    /// lower than zpool would print for the same free segments. Pools with 1 GiB metaslabs and
    /// larger read as zpool does.
    List(pool_request::ListArgs),
    /// Print pool properties: tarn pool get [-H] [-p] [-j] [-o FIELD,...] PROP[,PROP]|all POOL
    Get(pool_request::GetArgs),
    /// Set a pool property: tarn pool set PROP=VALUE POOL (feature@NAME=enabled).
    Set(pool_request::SetArgs),
    /// Enable every supported feature on a pool, or on every imported pool with -a; with
    /// neither, list the pools that have supported features not enabled:
    /// tarn pool upgrade [-a | POOL]
    Upgrade(pool_request::UpgradeArgs),
    /// Scrub a pool: read every copy of every block and repair bad ones, in the background:
    /// tarn pool scrub [-s|-p] POOL
    Scrub(ScrubArgs),
    /// Start a resilver of the devices that missed writes, or start the one in progress again
    /// from the beginning (a scrub in progress gives way): tarn pool resilver POOL
    Resilver(PoolName),
    /// Bring devices back online; a resilver copies what they missed: tarn pool online POOL DEVICE...
    Online(DeviceStateArgs),
    /// Take devices offline (they take no I/O until brought online): tarn pool offline POOL DEVICE...
    Offline(DeviceStateArgs),
    /// Attach NEW_DEVICE beside DEVICE as a mirror side; it is resilvered:
    /// tarn pool attach [-f] [-w] POOL DEVICE NEW_DEVICE. With DEVICE a RAID-Z vdev's name
    /// (raidz1-0, as pool status shows it), NEW_DEVICE becomes a new child of that vdev and the
    /// vdev is expanded in the background (RAID-Z expansion; -w waits for it, as
    /// tarn pool wait -t raidz_expand POOL)
    Attach(AttachArgs),
    /// Detach a device from a mirror: tarn pool detach POOL DEVICE
    Detach(DetachArgs),
    /// Remove devices from a pool (cache devices, for now): tarn pool remove POOL DEVICE...
    Remove(RemoveArgs),
    /// Replace DEVICE by NEW_DEVICE (or by a new device at DEVICE's path); DEVICE is detached
    /// once the new one is resilvered: tarn pool replace [-f] [-w] POOL DEVICE [NEW_DEVICE]
    Replace(ReplaceArgs),
    /// Add top-level vdevs to a pool: tarn pool add [-n] [-f] POOL VDEV...
    /// (VDEV: PATH... | mirror PATH PATH...)
    Add(AddArgs),
    /// Wait until background activity ends:
    /// tarn pool wait [-t free|scrub|resilver|raidz_expand] POOL
    Wait {
        /// Activities to wait for (comma-separated): free, scrub, resilver, raidz_expand.
        /// Default: every supported activity.
        #[arg(short = 't', value_delimiter = ',')]
        activities: Vec<String>,
        pool: String,
    },
    /// I/O statistics of imported pools: tarn pool iostat [-l] [-w] [-q] [-r] [-v] [-H] [-p] [-y]
    /// [POOL] [INTERVAL [COUNT]]
    Iostat(iostat::IostatArgs),
    /// Show the vdev tree, state and error counts of pools.
    Status(StatusArgs),
    /// Every command that changed the pool, oldest first: tarn pool history [-l] POOL
    History(HistoryArgs),
    /// Reset error counts (of one device) and forget the error log: tarn pool clear POOL [DEV]
    Clear(ClearArgs),
}

#[derive(Subcommand)]
enum DebugCommand {
    /// Draw every vdev's metaslabs as an SVG or PNG image, coloured by fullness (green empty,
    /// red full), each with its free percentage and fragmentation.
    Map(MapArgs),
    /// Every record of one metaslab's space map.
    Spacemap(SpacemapArgs),
    /// Per-metaslab offset, space map, free space and fragmentation (as zdb -m); -mm adds
    /// the on-disk free-segment histogram, -mmm the largest free segment and the in-memory
    /// histogram (replayed from the space map when the metaslab is not loaded).
    Metaslabs(MetaslabsArgs),
    /// The log space maps: each log's txg, length, blocks and metaslabs, the log summary
    /// and the flushing limits (zdb -m's log section).
    Logs(LogsArgs),
    /// A dataset's or snapshot's record, directory and deadlist entries (zdb -dddd).
    Dataset(NameArgs),
    /// One object's dnode, spill block and every block pointer under it (zdb -ddddd), as of
    /// the last synced txg: TARGET is a path inside the file system or an object number.
    Object(ObjectArgs),
}

/// `tarn version [-j]`: this build's version and protocol version, then the running daemon's,
/// asked with a `ping`, which every build answers.
///
/// `-j` follows `zfs version -j`, whose `zfs_version` object holds `userland` (the commands) and
/// `kernel` (the module they drive): tarn's `tarn_version` holds `userland` and
/// `userland_protocol` (this build) and, when a daemon runs, `daemon`, `daemon_protocol` (absent
/// for a build from before protocol versions) and `daemon_pid`, then `socket`.
fn version_verb(socket: &Path, json: bool) -> Result<Status, Failure> {
    let mut versions = serde_json::Map::new();
    let userland = format!("tarn-{}", tarn_protocol::BUILD_VERSION);
    versions.insert("userland".into(), userland.into());
    let protocol = tarn_protocol::PROTOCOL_VERSION.to_string();
    versions.insert("userland_protocol".into(), protocol.into());
    versions.insert("socket".into(), socket.display().to_string().into());
    let response = client::ask_if_running(socket, &tarn_protocol::Request::Ping)?;
    if let Some(response) = &response {
        let data = &response.data;
        if let Some(version) = data["version"].as_str() {
            versions.insert("daemon".into(), format!("tarn-{version}").into());
        }
        if let Some(protocol) = data["protocol"].as_u64() {
            versions.insert("daemon_protocol".into(), protocol.to_string().into());
        }
        let pid = data["pid"].as_u64().unwrap_or(0).to_string();
        versions.insert("daemon_pid".into(), pid.into());
    }
    if json {
        let mut document = tarn_protocol::json::Document::new("tarn version");
        document.insert("tarn_version", serde_json::Value::Object(versions));
        document.print();
        return Ok(0);
    }
    out!(
        "tarn {} (protocol {})",
        tarn_protocol::BUILD_VERSION,
        tarn_protocol::PROTOCOL_VERSION
    );
    let Some(response) = response else {
        out!("no tarn daemon running on {}", socket.display());
        return Ok(0);
    };
    let data = &response.data;
    let build = match (data["version"].as_str(), data["protocol"].as_u64()) {
        (Some(version), Some(protocol)) => format!("tarn {version} (protocol {protocol})"),
        _ => "a build from before protocol versions".to_string(),
    };
    out!(
        "daemon {} on {}: {build}",
        data["pid"].as_u64().unwrap_or(0),
        socket.display()
    );
    Ok(0)
}

fn daemon_verb(
    socket: &Path,
    foreground: bool,
    stop: bool,
    log_level: Option<&str>,
    metrics: Option<std::net::SocketAddr>,
    fuse_transport: Option<&str>,
) -> Result<Status, Failure> {
    if stop {
        match client::stop_daemon(socket)? {
            Some(pid) => out!("tarn daemon {pid} on {} stopped", socket.display()),
            None => out!("no tarn daemon running on {}", socket.display()),
        }
        return Ok(0);
    }
    if foreground {
        tarn_daemon::init_logging(log_level);
        tarn_daemon::run_foreground(socket, metrics, fuse_transport)?;
        return Ok(0);
    }
    if let Some(pid) = client::ping(socket) {
        return Err(Failure(format!(
            "a tarn daemon (pid {pid}) is already running on {}",
            socket.display()
        )));
    }
    let pid = client::start_daemon_logging(socket, log_level, metrics, fuse_transport)?;
    out!(
        "tarn daemon {pid} listening on {} (log: {})",
        socket.display(),
        tarn_protocol::log_path(socket).display()
    );
    Ok(0)
}

fn run(cli: Cli) -> Result<Status, Failure> {
    // Every verb validates the environment's tunables first, pool or no pool.
    tarn_ops::tunables()?;
    let socket = client::socket_path(cli.socket.as_deref());
    let socket = socket.as_path();
    match cli.command {
        Command::Pool(command) => match command {
            PoolCommand::Create(args) => pool::create(socket, args),
            PoolCommand::Import(args) if args.all => verbs::pool_cache::import_all(socket, args),
            PoolCommand::Import(args) => match (args.dry_run, &args.pool) {
                (true, Some(pool)) => pool::import_dry_run(socket, &args.dirs, pool),
                (true, None) => Err(Failure("-n needs a pool name".into())),
                (false, _) => pool::import(socket, args),
            },
            PoolCommand::Export(args) => pool::export(socket, args),
            PoolCommand::Destroy(args) => pool::destroy(socket, args),
            PoolCommand::Sync(args) => pool::sync(socket, args),
            PoolCommand::List(args) => pool::list(socket, args),
            PoolCommand::Status(args) => pool::status(socket, args),
            PoolCommand::History(args) => verbs::pool_records::history(socket, args),
            PoolCommand::Clear(args) => verbs::pool_records::clear(socket, args),
            PoolCommand::Get(args) => pool::get(socket, args),
            PoolCommand::Set(args) => pool::set(socket, args),
            PoolCommand::Upgrade(args) => pool::upgrade(socket, args),
            PoolCommand::Wait { activities, pool } => pool::wait(socket, activities, pool),
            PoolCommand::Scrub(args) => verbs::scrub::scrub(socket, args),
            PoolCommand::Resilver(args) => verbs::scrub::resilver(socket, args),
            PoolCommand::Online(args) => verbs::scrub::device(socket, args, ScanRequest::Online),
            PoolCommand::Offline(args) => verbs::scrub::device(socket, args, ScanRequest::Offline),
            PoolCommand::Attach(args) => verbs::devices::attach(socket, args),
            PoolCommand::Detach(args) => verbs::devices::detach(socket, args),
            PoolCommand::Remove(args) => verbs::devices::remove(socket, args),
            PoolCommand::Replace(args) => verbs::devices::replace(socket, args),
            PoolCommand::Add(args) => verbs::devices::add(socket, args),
            PoolCommand::Iostat(args) => iostat::run(socket, args).map(|()| 0),
        },
        Command::Inject(args) => verbs::inject::inject(socket, args),
        Command::Check(args) => inspect::check(socket, args),
        Command::Create(args) => dataset::create(socket, args),
        Command::Destroy(args) => dataset::destroy(socket, args),
        Command::List(args) => dataset::list(socket, args),
        Command::Get(args) => dataset::get(socket, args),
        Command::Set(args) => dataset::set(socket, args),
        Command::Inherit(args) => dataset::inherit(socket, args),
        Command::Userspace(args) => owners::space(socket, tarn::OwnerKind::User, args),
        Command::Groupspace(args) => owners::space(socket, tarn::OwnerKind::Group, args),
        Command::Projectspace(args) => owners::space(socket, tarn::OwnerKind::Project, args),
        Command::Allow(args) => verbs::allow::allow(socket, args, true),
        Command::Unallow(args) => verbs::allow::allow(socket, args, false),
        Command::Mount(args) => dataset::mount(socket, args),
        Command::Unmount(args) => dataset::unmount(socket, args),
        Command::Snapshot(args) => dataset::snapshot(socket, args),
        Command::Rollback(args) => dataset::rollback(socket, args),
        Command::Clone(args) => dataset::clone(socket, args),
        Command::Promote(args) => dataset::promote(socket, args),
        Command::Bookmark(args) => dataset::bookmark(socket, args),
        Command::Hold(args) => holds::hold(socket, args),
        Command::Release(args) => holds::release(socket, args),
        Command::Holds(args) => holds::holds(socket, args),
        Command::Diff(args) => verbs::diff::diff(socket, args.args),
        Command::Send(args) => replication::send(socket, args),
        Command::Receive(args) => replication::receive(socket, args),
        Command::Rename(args) => dataset::rename(socket, args),
        Command::Debug(DebugCommand::Dataset(args)) => dataset::debug_dataset(socket, args),
        Command::Debug(DebugCommand::Object(args)) => dataset::debug_object(socket, args),
        Command::Debug(DebugCommand::Metaslabs(args)) => inspect::debug_metaslabs(socket, args),
        Command::Debug(DebugCommand::Logs(args)) => inspect::debug_logs(socket, args),
        Command::Debug(DebugCommand::Map(args)) => inspect::debug_map(socket, args),
        Command::Debug(DebugCommand::Spacemap(args)) => inspect::debug_spacemap(socket, args),
        Command::Stat(command) => {
            stat::run(socket, command)?;
            Ok(0)
        }
        Command::Daemon {
            foreground,
            stop,
            log_level,
            metrics,
            fuse_transport,
        } => daemon_verb(
            socket,
            foreground,
            stop,
            log_level.as_deref(),
            metrics,
            fuse_transport.as_deref(),
        ),
        Command::Version { json } => version_verb(socket, json),
        Command::Quickstart { dir } => {
            quickstart::run(dir.unwrap_or_else(|| PathBuf::from("tarn-quickstart")))?;
            Ok(0)
        }
        Command::Completion { shell } => {
            // Into a buffer first: written straight to stdout, a closed pipe panics.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tarn", &mut script);
            out!("{}", String::from_utf8_lossy(&script).trim_end());
            Ok(0)
        }
        Command::Man { dir } => {
            let written = write_manual_pages(&Cli::command(), "tarn", &dir)?;
            out!("wrote {written} manual pages in {}", dir.display());
            Ok(0)
        }
        #[cfg(feature = "bench")]
        Command::Bench(command) => {
            // The engine runs in this process for most benchmarks: its log (the daemon's
            // format) goes to stderr when RUST_LOG asks for it.
            if std::env::var_os("RUST_LOG").is_some() {
                tarn_daemon::init_logging(None);
            }
            tarn_bench::run(command, socket)?;
            Ok(0)
        }
    }
}

/// `--metrics`'s value: ADDR:PORT, or a port alone on the loopback address (the endpoint shows
/// pool names and counters to whoever can connect, so it is local unless an address is named).
fn metrics_address(text: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|_| {
        format!("{text:?} is neither a port nor ADDR:PORT (e.g. 9134, 127.0.0.1:9134, [::1]:9134)")
    })
}

/// Write the manual page of `command`, named `name` (`tarn-pool-import`), and of each of its
/// subcommands into `dir`; returns how many were written.
fn write_manual_pages(command: &clap::Command, name: &str, dir: &Path) -> Result<usize, Failure> {
    std::fs::create_dir_all(dir)
        .map_err(|error| Failure(format!("cannot create {}: {error}", dir.display())))?;
    // A subcommand's page is titled with its whole name, as git's and zfs's are (zfs-send.8).
    let page = command.clone().name(name.to_string());
    let path = dir.join(format!("{name}.1"));
    let mut text = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut text)
        .and_then(|()| std::fs::write(&path, &text))
        .map_err(|error| Failure(format!("cannot write {}: {error}", path.display())))?;
    let mut written = 1;
    for subcommand in command.get_subcommands() {
        if subcommand.get_name() == "help" {
            continue;
        }
        let sub_name = format!("{name}-{}", subcommand.get_name());
        written += write_manual_pages(subcommand, &sub_name, dir)?;
    }
    Ok(written)
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
