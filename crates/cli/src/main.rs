//! `tarn`: the command line. Verbs follow zpool/zfs/zdb habits (see shared CLI.md).
//!
//! Until the daemon exists, every verb runs the engine in this process: a pool is imported for
//! the duration of one command and exported again before the command returns, so the next
//! command finds it exported. Pools are found by scanning the directories given with `-d`
//! (default: the current directory) for files and block devices carrying tarn labels.

/// `println!` that never panics: output into a closed pipe (`tarn ... | head`) is dropped, so a
/// command still finishes its work (and exports its pool) when nobody reads what it prints.
macro_rules! out {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod bench;
mod format;
mod quickstart;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use format::{parse_size, print_table, Cell, ListFormat};
use tarn::check::check_pool;
use tarn::pool::{parse_vdev_specs, CreateOptions, ImportOptions, Pool, PoolError};
use tarn::tunables::Tunables;
use tarn::vdev::label::PoolState;

#[derive(Parser)]
#[command(
    name = "tarn",
    version,
    about = "pooled copy-on-write storage in the design family of OpenZFS"
)]
struct Cli {
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
    /// Inspection (zdb).
    #[command(subcommand)]
    Debug(DebugCommand),
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
        pool: String,
        #[arg(required = true, num_args = 1..)]
        vdevs: Vec<String>,
    },
    /// Import a pool, or with no name list the pools found.
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
    })
}

fn open_named(dirs: &[PathBuf], name: &str, readonly: bool) -> Result<Pool, Failure> {
    let (pool, report) = Pool::import(name, import_options(dirs, readonly)?)?;
    for (txg, why) in &report.skipped {
        eprintln!("warning: pool {name}: uberblock of txg {txg} could not be used ({why}); rewound to txg {}", report.txg);
    }
    Ok(pool)
}

fn pool_create(
    force: bool,
    size: Option<String>,
    properties: Vec<String>,
    name: String,
    vdevs: Vec<String>,
) -> Result<(), Failure> {
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
    let create_size = size.as_deref().map(parse_size).transpose()?;
    let options = CreateOptions {
        name: name.clone(),
        vdevs: parse_vdev_specs(&vdevs)?,
        create_size,
        force,
        tunables: tunables()?,
        wrap_device: None,
        disabled_features,
    };
    let pool = Pool::create(options)?;
    pool.export()?;
    out!("created pool {name} (exported: no daemon yet; import it with 'tarn pool import -d DIR {name}')");
    Ok(())
}

fn pool_import(
    dirs: Vec<PathBuf>,
    show_destroyed: bool,
    options: Vec<String>,
    pool: Option<String>,
    new_name: Option<String>,
) -> Result<(), Failure> {
    let mut readonly = false;
    for option in &options {
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
    let Some(name) = pool else {
        let found: Vec<_> = Pool::scan(&dirs_or_default(&dirs))
            .into_iter()
            .filter(|pool| show_destroyed == (pool.state == PoolState::Destroyed))
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
        return Ok(());
    };
    let mut import = import_options(&dirs, readonly)?;
    import.new_name = new_name;
    let (pool, report) = Pool::import(&name, import)?;
    for (txg, why) in &report.skipped {
        eprintln!("warning: uberblock of txg {txg} could not be used ({why})");
    }
    out!(
        "imported pool {} at txg {}{}",
        pool.name(),
        report.txg,
        if report.skipped.is_empty() {
            String::new()
        } else {
            format!(" (rewound past {} newer txgs)", report.skipped.len())
        }
    );
    let imported_name = pool.name().to_string();
    pool.export()?;
    out!("exported pool {imported_name} (no daemon yet: pools stay imported only while a command runs)");
    Ok(())
}

fn pool_list(dirs: Vec<PathBuf>, list: ListArgs, name: Option<String>) -> Result<(), Failure> {
    let columns = ["name", "size", "alloc", "free", "frag", "cap", "health"];
    let mut rows = Vec::new();
    let found = Pool::scan(&dirs_or_default(&dirs));
    if let Some(name) = &name {
        if !found.iter().any(|pool| &pool.name == name) {
            return Err(Failure(format!("cannot open '{name}': no such pool")));
        }
    }
    for candidate in found.iter().filter(|p| p.state != PoolState::Destroyed) {
        if name.as_ref().is_some_and(|n| n != &candidate.name) {
            continue;
        }
        let pool = open_named(&dirs, &candidate.guid.0.to_string(), true)?;
        let stats = pool.core.io.space.stats();
        let size: u64 = stats.iter().map(|v| v.size).sum();
        let allocated: u64 = stats.iter().map(|v| v.allocated_bytes).sum();
        let frag = stats.iter().filter_map(|v| v.fragmentation_percent).max();
        let cap = (allocated * 100).checked_div(size).unwrap_or(0);
        rows.push(vec![
            Cell::text(candidate.name.clone()),
            Cell::bytes(size),
            Cell::bytes(allocated),
            Cell::bytes(size - allocated.min(size)),
            Cell::percent(frag),
            Cell::percent(Some(cap)),
            Cell::text(pool.core.io.vdevs.health().as_str()),
        ]);
        pool.export()?;
    }
    print_table(&columns, &rows, &list.format(), "pools")?;
    Ok(())
}

fn pool_status(dirs: Vec<PathBuf>, json: bool, name: Option<String>) -> Result<(), Failure> {
    let found = Pool::scan(&dirs_or_default(&dirs));
    let mut any = false;
    let mut documents = Vec::new();
    for candidate in found.iter().filter(|p| p.state != PoolState::Destroyed) {
        if name.as_ref().is_some_and(|n| n != &candidate.name) {
            continue;
        }
        any = true;
        let pool = open_named(&dirs, &candidate.guid.0.to_string(), true)?;
        let mut vdevs = Vec::new();
        let health = pool.core.io.vdevs.health();
        let mut text = format!(
            "  pool: {}\n state: {}\n   txg: {}\nconfig:\n\n\tNAME{:<28}STATE     READ WRITE CKSUM\n\t{:<32}{}\n",
            candidate.name,
            health.as_str(),
            pool.last_synced_txg(),
            "",
            candidate.name,
            health.as_str()
        );
        for top in &pool.core.io.vdevs.tops {
            let kind = if top.children.len() > 1 {
                format!("mirror-{}", top.id)
            } else {
                String::new()
            };
            if !kind.is_empty() {
                text.push_str(&format!("\t  {kind:<30}{}\n", top.health().as_str()));
            }
            let mut children = Vec::new();
            for leaf in &top.children {
                let stats = leaf.stats.snapshot();
                let indent = if kind.is_empty() { "  " } else { "    " };
                text.push_str(&format!(
                    "\t{indent}{:<30}{:<8} {:>4} {:>5} {:>5}\n",
                    leaf.path.display(),
                    leaf.health().as_str(),
                    stats.read_errors,
                    stats.write_errors,
                    stats.checksum_errors
                ));
                children.push(serde_json::json!({
                    "path": leaf.path.display().to_string(), "state": leaf.health().as_str(),
                    "read_errors": stats.read_errors, "write_errors": stats.write_errors, "checksum_errors": stats.checksum_errors,
                }));
            }
            vdevs.push(serde_json::json!({"id": top.id.0, "type": if top.children.len() > 1 { "mirror" } else { "leaf" }, "state": top.health().as_str(), "children": children}));
        }
        if json {
            documents.push(serde_json::json!({"name": candidate.name, "state": health.as_str(), "txg": pool.last_synced_txg().0, "vdevs": vdevs}));
        } else {
            if health != tarn::vdev::VdevHealth::Online {
                text.push_str("\nstatus: one or more devices could not be opened; the pool continues without them.\naction: put the missing device back where the config names it and import again, then run 'tarn check'.\n");
            }
            out!("{text}\nerrors: No known data errors\n");
        }
        pool.export()?;
    }
    if json {
        out!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"pools": documents})).expect("json")
        );
    }
    if !any {
        return Err(Failure(match name {
            Some(name) => format!("cannot open '{name}': no such pool"),
            None => "no pools available".into(),
        }));
    }
    Ok(())
}

fn check(dirs: Vec<PathBuf>, no_repair: bool, name: String) -> Result<bool, Failure> {
    let pool = open_named(&dirs, &name, no_repair)?;
    pool.sync()?;
    let report = check_pool(&pool, !no_repair)?;
    out!("checked pool {name} at txg {}", report.txg);
    out!("  blocks:          {}", report.blocks);
    out!("  logical bytes:   {}", report.bytes_logical);
    out!("  allocated bytes: {}", report.bytes_allocated);
    out!(
        "  copies verified: {} ({} bad, {} repaired)",
        report.copies_verified,
        report.copies_bad,
        report.copies_repaired
    );
    for block in &report.blocks_unreadable {
        out!("  UNREADABLE: {block}");
    }
    for (vdev, offset, size) in &report.leaks {
        out!("  LEAK: vdev {vdev} offset {offset:#x} size {size:#x}");
    }
    for (vdev, offset, size) in &report.missing {
        out!("  MISSING ALLOCATION: vdev {vdev} offset {offset:#x} size {size:#x}");
    }
    for double in &report.double_allocations {
        out!("  DOUBLE ALLOCATION: {double}");
    }
    for error in &report.errors {
        out!("  ERROR: {error}");
    }
    let clean = report.is_clean();
    out!(
        "{}",
        if clean {
            "no errors found"
        } else {
            "ERRORS FOUND"
        }
    );
    pool.export()?;
    Ok(clean)
}

fn debug_metaslabs(dirs: Vec<PathBuf>, json: bool, name: String) -> Result<(), Failure> {
    let pool = open_named(&dirs, &name, true)?;
    let stats = pool.core.io.space.stats();
    if json {
        let vdevs: Vec<serde_json::Value> = stats
            .iter()
            .map(|vdev| {
                serde_json::json!({
                    "vdev": vdev.vdev.0, "size": vdev.size, "allocated": vdev.allocated_bytes, "fragmentation": vdev.fragmentation_percent,
                    "metaslabs": vdev.metaslabs.iter().map(|ms| serde_json::json!({
                        "id": ms.id, "offset": ms.start, "size": ms.size, "spacemap": ms.space_map_object.0,
                        "spacemap_length": ms.space_map_length_bytes, "allocated": ms.allocated_bytes, "free": ms.free_bytes,
                        "fragmentation": ms.fragmentation_percent, "loaded": ms.loaded,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        out!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"pool": name, "vdevs": vdevs}))
                .expect("json")
        );
    } else {
        for vdev in &stats {
            out!(
                "vdev {}: {} metaslabs, {} allocated of {}",
                vdev.vdev,
                vdev.metaslabs.len(),
                format::human_bytes(vdev.allocated_bytes),
                format::human_bytes(vdev.size)
            );
            out!(
                "  {:>6} {:>14} {:>8} {:>10} {:>10} {:>10} {:>5}",
                "ms",
                "offset",
                "spacemap",
                "sm length",
                "allocated",
                "free",
                "frag"
            );
            for ms in &vdev.metaslabs {
                out!(
                    "  {:>6} {:>#14x} {:>8} {:>10} {:>10} {:>10} {:>5}",
                    ms.id,
                    ms.start,
                    ms.space_map_object.0,
                    ms.space_map_length_bytes,
                    format::human_bytes(ms.allocated_bytes),
                    format::human_bytes(ms.free_bytes),
                    ms.fragmentation_percent
                        .map_or("-".to_string(), |f| format!("{f}%"))
                );
            }
        }
    }
    pool.export()?;
    Ok(())
}

fn debug_spacemap(
    dirs: Vec<PathBuf>,
    name: String,
    vdev: u32,
    metaslab: u64,
) -> Result<(), Failure> {
    use tarn::space::space_map::{SpaceMap, SpaceMapAction};
    let pool = open_named(&dirs, &name, true)?;
    let stats = pool.core.io.space.stats();
    let vdev_stats = stats
        .iter()
        .find(|v| v.vdev.0 == vdev)
        .ok_or_else(|| Failure(format!("pool {name} has no vdev {vdev}")))?;
    let ms = vdev_stats
        .metaslabs
        .iter()
        .find(|m| m.id == metaslab)
        .ok_or_else(|| Failure(format!("vdev {vdev} has no metaslab {metaslab}")))?;
    if ms.space_map_object.0 == 0 {
        out!("metaslab {metaslab} has no space map yet (all free)");
        return Ok(());
    }
    let storage = tarn::object::adapters::MosSpaceStorage {
        mos: &pool.core.mos,
    };
    let map = SpaceMap::open(
        &storage,
        ms.space_map_object,
        ms.start,
        ms.size,
        vdev_stats.ashift,
        pool.core.io.tunables.metaslab_sm_blksz,
    )
    .map_err(|e| Failure(e.to_string()))?;
    out!(
        "space map object {} of vdev {vdev} metaslab {metaslab}: length {} allocated {}",
        ms.space_map_object,
        map.header.length_bytes,
        map.header.allocated_bytes
    );
    let mut last = (0u64, 0u32, None);
    map.replay(&storage, map.header.length_bytes, |entry| {
        if (entry.txg.0, entry.sync_pass, Some(entry.action)) != last {
            out!(
                "  txg {} pass {} {:?}",
                entry.txg,
                entry.sync_pass,
                entry.action
            );
            last = (entry.txg.0, entry.sync_pass, Some(entry.action));
        }
        let word = if entry.action == SpaceMapAction::Alloc {
            "ALLOC"
        } else {
            "FREE "
        };
        out!(
            "    {word} [{:#x}, {:#x}) size {:#x}",
            entry.start,
            entry.start + entry.size,
            entry.size
        );
        Ok(())
    })
    .map_err(|e| Failure(e.to_string()))?;
    Ok(())
}

fn run(cli: Cli) -> Result<bool, Failure> {
    // Every verb validates the environment's tunables first, pool or no pool.
    tunables()?;
    match cli.command {
        Command::Pool(command) => match command {
            PoolCommand::Create {
                force,
                size,
                properties,
                pool,
                vdevs,
            } => pool_create(force, size, properties, pool, vdevs)?,
            PoolCommand::Import {
                dirs,
                force: _,
                destroyed,
                options,
                pool,
                new_name,
            } => pool_import(dirs, destroyed, options, pool, new_name)?,
            PoolCommand::Export {
                dirs,
                force: _,
                pool,
            } => {
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
            }
            PoolCommand::Destroy {
                dirs,
                force: _,
                pool,
            } => {
                open_named(&dirs, &pool, false)?.destroy()?;
                out!("destroyed pool {pool}");
            }
            PoolCommand::List { dirs, list, pool } => pool_list(dirs, list, pool)?,
            PoolCommand::Status { dirs, json, pool } => pool_status(dirs, json, pool)?,
        },
        Command::Check {
            dirs,
            no_repair,
            pool,
        } => return check(dirs, no_repair, pool),
        Command::Debug(DebugCommand::Metaslabs { dirs, json, pool }) => {
            debug_metaslabs(dirs, json, pool)?
        }
        Command::Debug(DebugCommand::Spacemap {
            dirs,
            pool,
            vdev,
            metaslab,
        }) => debug_spacemap(dirs, pool, vdev, metaslab)?,
        Command::Quickstart { dir } => {
            quickstart::run(dir.unwrap_or_else(|| PathBuf::from("tarn-quickstart")))?
        }
        Command::Bench(command) => bench::run(command)?,
    }
    Ok(true)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(Failure(message)) => {
            eprintln!("tarn: {message}");
            ExitCode::from(1)
        }
    }
}

pub(crate) use Failure as CliFailure;
