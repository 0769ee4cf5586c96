//! `tarn pool ...` (zpool): the CLI side of the pool verbs.

use std::collections::BTreeSet;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tarn::stats::AllocClass;
use tarn::status::{FoundPool, PoolState, TopImportState, VdevHealth, VdevProblem};
use tarn::{parse_vdev_layout, validate_pool_name, Pool, VDEV_KEYWORDS};
use tarn_protocol::absolute;
use tarn_protocol::client;
use tarn_protocol::error::{Failure, Status};
use tarn_protocol::format::{human_bytes, print_table, selected_fields, Cell};
use tarn_protocol::json::{self, Document};
use tarn_protocol::request::dataset::parse_settings;
use tarn_protocol::request::pool::{
    CreateArgs, GetArgs, ImportArgs, ListArgs, PoolRequest, ReleaseArgs, SetArgs, StatusArgs,
    UpgradeArgs,
};
use tarn_protocol::request::{PoolOption, TableFormatArgs};
use tarn_protocol::rows::{
    PoolPropertyRow, PoolPropertyValue, PoolRow, StatusEntry, GET_COLUMNS, POOL_LIST_COLUMNS,
    POOL_LIST_DEFAULT_COLUMNS,
};
use tarn_protocol::Request;

use super::{ask_holder, ask_imported, forward};
use tarn_ops::cachefile::search_dirs;
use tarn_ops::{import_options, open_named};

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

pub fn create(socket: &Path, mut args: CreateArgs) -> Result<Status, Failure> {
    check_mountpoint(&args.mountpoint)?;
    for (name, value) in parse_settings(&args.fs_properties)? {
        Pool::check_setting(&name, &value)?;
    }
    args.pool_properties()?;
    args.size_bytes()?;
    validate_pool_name(&args.pool)?;
    // Paths become absolute here (the daemon does not share our working directory); the
    // keywords stay as they are.
    for word in &mut args.vdevs {
        if !VDEV_KEYWORDS.contains(&word.as_str()) {
            *word = absolute(Path::new(word)).display().to_string();
        }
    }
    absolute_cachefile(&mut args.properties);
    args.altroot = args.altroot.as_deref().map(absolute);
    // Spelling mistakes are reported without starting a daemon.
    parse_vdev_layout(&args.vdevs)?;
    let request = Request::Pool(PoolRequest::Create(args));
    Ok(forward(client::ask_starting(socket, &request)?))
}

/// `-o cachefile=PATH` of `pool create` and `pool import`: PATH made absolute here (the daemon
/// does not share our working directory); `none` and empty (the default) stay.
fn absolute_cachefile(options: &mut [String]) {
    for option in options {
        if let Some(value) = option.strip_prefix("cachefile=") {
            if !matches!(value, "" | "none") {
                *option = format!("cachefile={}", absolute(Path::new(value)).display());
            }
        }
    }
}

/// Guids of the pools the daemon holds (empty when no daemon runs).
fn daemon_rows(socket: &Path, pool: Option<&str>) -> Result<Option<Vec<PoolRow>>, Failure> {
    let request = Request::Pool(PoolRequest::List(ListArgs {
        dirs: Vec::new(),
        format: TableFormatArgs::default(),
        pool: pool.map(str::to_string),
    }));
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
pub fn import_dry_run(socket: &Path, dirs: &[PathBuf], pool: &str) -> Result<Status, Failure> {
    let plan = Pool::rewind_plan(pool, import_options(&search_dirs(socket, dirs), true)?)?;
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

/// One found pool as `pool import` lists it, in the shape of zpool's: name, id, state, the
/// status and action that say whether and how it imports, then the config, every vdev with
/// its state (and why it is UNAVAIL) as importing it from the searched directories would
/// find it (tarn::status::ImportState).
fn import_listing(pool: &FoundPool) -> String {
    let state = pool.import_state();
    let destroyed = pool.state == PoolState::Destroyed;
    let mut text = format!(
        "   pool: {}\n     id: {}\n  state: {}{}\n",
        pool.name,
        pool.guid,
        state.health.as_str(),
        if destroyed { " (DESTROYED)" } else { "" }
    );
    let missing = state
        .leaves()
        .any(|leaf| leaf.problem.is_some_and(VdevProblem::is_missing));
    let bad_label = state
        .leaves()
        .any(|leaf| leaf.problem == Some(VdevProblem::InvalidLabel));
    // Device problems first, as zpool: they decide whether the pool imports at all. Then
    // features this build does not know (pool/features.rs), which decide how.
    let unsupported = tarn::status::unsupported_features(&pool.config);
    let elsewhere;
    let features_status;
    let status = if missing {
        Some("One or more devices are missing from the system.")
    } else if bad_label {
        Some("One or more devices contain corrupted data.")
    } else if !unsupported.needed_to_read.is_empty() {
        features_status = format!(
            "The pool uses the following feature(s) not supported on this system: {}",
            unsupported.needed_to_read.join(", ")
        );
        Some(features_status.as_str())
    } else if !unsupported.needed_to_write.is_empty() {
        features_status = format!(
            "The pool can only be accessed in read-only mode on this system. It cannot be accessed in read-write mode because it uses the following feature(s) not supported on this system: {}",
            unsupported.needed_to_write.join(", ")
        );
        Some(features_status.as_str())
    } else if let Some(host) = pool.active_elsewhere() {
        elsewhere = format!("The pool was last accessed by another system (host {host}) and was not exported there.");
        Some(elsewhere.as_str())
    } else if pool.state == PoolState::Active {
        Some("The pool was not exported: another process holds it, or the process that held it died.")
    } else {
        None
    };
    if let Some(status) = status {
        text.push_str(&format!(" status: {status}\n"));
    }
    let features_only = !missing && !bad_label;
    let action = match state.health {
        _ if features_only && !unsupported.needed_to_read.is_empty() => {
            "The pool cannot be imported. Access the pool on a system that supports the required feature(s)."
        }
        VdevHealth::Online | VdevHealth::Degraded
            if features_only && !unsupported.needed_to_write.is_empty() =>
        {
            "The pool can be imported in read-only mode using '-o readonly=on'."
        }
        VdevHealth::Online | VdevHealth::Degraded if destroyed => {
            "The pool was destroyed, but can be imported using the '-Df' flags."
        }
        _ if destroyed => "The pool was destroyed and cannot be imported; its devices can be reused.",
        VdevHealth::Online if pool.active_elsewhere().is_some() => {
            "The pool can be imported using its name or numeric identifier and the '-f' flag, once the other system no longer uses it."
        }
        VdevHealth::Online if pool.state == PoolState::Active => {
            "The pool can be imported using its name or numeric identifier once no other process holds it."
        }
        VdevHealth::Online => "The pool can be imported using its name or numeric identifier.",
        VdevHealth::Degraded => {
            "The pool can be imported despite missing or damaged devices. The fault tolerance of the pool may be compromised if imported."
        }
        _ if state.only_logs_unavailable() => {
            "The pool cannot be imported without its log devices. Attach the missing devices and try again, or import with -m to discard the intent-log records on them."
        }
        _ if missing => "The pool cannot be imported. Attach the missing devices and try again.",
        _ => "The pool cannot be imported due to damaged devices or data.",
    };
    text.push_str(&format!(" action: {action}\n config:\n\n"));
    // (depth, name, state, why): the pool, its data vdevs, then its log vdevs under `logs`.
    let mut rows: Vec<(usize, String, &str, Option<VdevProblem>)> =
        vec![(0, pool.name.clone(), state.health.as_str(), state.problem)];
    let data = state.tops.iter().filter(|top| top.class != AllocClass::Log);
    let logs: Vec<&TopImportState> = state
        .tops
        .iter()
        .filter(|top| top.class == AllocClass::Log)
        .collect();
    for top in data {
        top_rows(top, &mut rows);
    }
    let mut headings = Vec::new();
    if !logs.is_empty() {
        headings.push(rows.len());
        rows.push((0, "logs".into(), "", None));
        for top in logs {
            top_rows(top, &mut rows);
        }
    }
    // zpool's NAME column: as wide as the widest name with its indent, at least 10.
    let width = rows
        .iter()
        .map(|(depth, name, _, _)| depth + name.len())
        .max()
        .unwrap_or(0)
        .max(10);
    for (index, (depth, name, health, problem)) in rows.iter().enumerate() {
        if headings.contains(&index) {
            text.push_str(&format!("\t{name}\n"));
            continue;
        }
        let why = problem.map_or(String::new(), |problem| format!("  {}", problem.as_str()));
        text.push_str(&format!(
            "\t{:depth$}{name:<pad$}  {health}{why}\n",
            "",
            pad = width - depth
        ));
    }
    // Cache devices are never needed to import: named only, as zpool names them.
    if !state.cache.is_empty() {
        text.push_str("\tcache\n");
        for path in &state.cache {
            text.push_str(&format!("\t  {}\n", path.display()));
        }
    }
    text
}

/// The rows of one top-level vdev in the import listing: `mirror-N` over its children, or its
/// one leaf in its place; a leaf being replaced and its replacement under `replacing-N` (N:
/// the old leaf's child index), as `pool status` shows them.
fn top_rows<'a>(
    top: &'a TopImportState,
    rows: &mut Vec<(usize, String, &'a str, Option<VdevProblem>)>,
) {
    let pairs: Vec<(usize, usize)> = top
        .children
        .iter()
        .enumerate()
        .filter_map(|(new, leaf)| {
            let old = leaf.replaces?;
            let old = top.children.iter().position(|other| other.guid == old)?;
            Some((old, new))
        })
        .collect();
    let only_a_pair = top.children.len() == 2 && pairs.len() == 1;
    let mut depth = 2;
    let raidz = top.kind.parity() > 0;
    if raidz || (top.children.len() > 1 && !only_a_pair) {
        rows.push((
            depth,
            top.kind
                .group_name(top.id)
                .unwrap_or_else(|| format!("mirror-{}", top.id)),
            top.health.as_str(),
            top.problem,
        ));
        depth += 2;
    }
    for (index, leaf) in top.children.iter().enumerate() {
        if pairs.iter().any(|&(_, new)| new == index) {
            continue;
        }
        let shown = match pairs.iter().find(|&&(old, _)| old == index) {
            Some(&(_, new)) => {
                let pair = [leaf, &top.children[new]];
                let online = pair
                    .iter()
                    .filter(|leaf| leaf.health == VdevHealth::Online)
                    .count();
                let health = match online {
                    2 => VdevHealth::Online,
                    1 => VdevHealth::Degraded,
                    _ => VdevHealth::Unavail,
                };
                rows.push((
                    depth,
                    format!("replacing-{index}"),
                    health.as_str(),
                    (online == 0).then_some(VdevProblem::InsufficientReplicas),
                ));
                pair.to_vec()
            }
            None => vec![leaf],
        };
        let leaf_depth = if shown.len() > 1 { depth + 2 } else { depth };
        for leaf in shown {
            rows.push((
                leaf_depth,
                leaf.path.display().to_string(),
                leaf.health.as_str(),
                leaf.problem,
            ));
        }
    }
}

pub fn import(socket: &Path, mut args: ImportArgs) -> Result<Status, Failure> {
    args.import_options()?;
    let dirs = search_dirs(socket, &args.dirs);
    let show_destroyed = args.destroyed;
    if args.pool.is_none() {
        let held: BTreeSet<u64> = daemon_rows(socket, None)?
            .unwrap_or_default()
            .iter()
            .map(|row| row.guid)
            .collect();
        let (imported, found): (Vec<_>, Vec<_>) = Pool::scan(&dirs)
            .into_iter()
            .filter(|pool| show_destroyed == (pool.state == PoolState::Destroyed))
            .partition(|pool| held.contains(&pool.guid.0));
        if found.is_empty() {
            out!("no pools available to import");
        }
        // Imported pools are not importable, but say why they are not listed.
        for pool in &imported {
            out!(
                "already imported by the tarn daemon on {}: {} (id {})",
                socket.display(),
                pool.name,
                pool.guid
            );
        }
        for pool in found {
            out!("{}", import_listing(&pool));
            for copies in &pool.copies_found {
                out!(
                    "warning: {} carry the same vdev: copies of one device; import opens the one with the newest label, or refuses if they cannot be told apart\n",
                    copies
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" and ")
                );
            }
        }
        return Ok(0);
    }
    args.dirs = dirs;
    args.altroot = args.altroot.as_deref().map(absolute);
    absolute_cachefile(&mut args.options);
    let request = Request::Pool(PoolRequest::Import(args));
    Ok(forward(client::ask_starting(socket, &request)?))
}

pub fn export(socket: &Path, args: ReleaseArgs) -> Result<Status, Failure> {
    let (dirs, pool) = (search_dirs(socket, &args.dirs), args.pool.clone());
    if let Some(status) = ask_holder(socket, &Request::Pool(PoolRequest::Export(args)))? {
        return Ok(status);
    }
    // Not imported in the daemon: mark an exported-by-crash pool exported, in this process.
    let found = Pool::scan(&dirs);
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

pub fn destroy(socket: &Path, args: ReleaseArgs) -> Result<Status, Failure> {
    let (dirs, pool) = (search_dirs(socket, &args.dirs), args.pool.clone());
    if let Some(status) = ask_holder(socket, &Request::Pool(PoolRequest::Destroy(args)))? {
        return Ok(status);
    }
    open_named(&dirs, &pool, false)?.destroy()?;
    out!("destroyed pool {pool}");
    Ok(0)
}

pub fn sync(socket: &Path, args: PoolOption) -> Result<Status, Failure> {
    let pool = args.pool.clone();
    let request = Request::Pool(PoolRequest::Sync(args));
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

/// `-d` of `pool list` and `pool status`: not an option of theirs (they show imported pools
/// only, as zpool's do), but parsed, hidden from the help, so that `-d DIR` gets an error
/// naming the verb that lists the pools in DIR, `pool import -d DIR`, instead of clap's
/// "unexpected argument".
fn refuse_dirs(verb: &str, dirs: &[PathBuf]) -> Result<(), Failure> {
    if dirs.is_empty() {
        return Ok(());
    }
    let named: String = dirs
        .iter()
        .map(|dir| format!(" -d {}", dir.display()))
        .collect();
    Err(Failure(format!(
        "pool {verb} shows imported pools only and takes no -d; list the pools that could be imported from those directories with: tarn pool import{named}"
    )))
}

/// `pool list [-H] [-p] [-j] [-o FIELD,...] [POOL]`: the pools the daemon holds (none when no
/// daemon runs), as zpool list shows imported pools only; exported pools are listed by `pool
/// import` without a pool name. With none and no POOL: "no pools available" and exit 0, as
/// zpool (nothing with -H, an empty document with -j).
pub fn list(socket: &Path, args: ListArgs) -> Result<Status, Failure> {
    let ListArgs {
        dirs,
        format,
        pool: name,
    } = args;
    refuse_dirs("list", &dirs)?;
    let mut format = format.format();
    if format.fields.is_none() {
        format.fields = Some(POOL_LIST_DEFAULT_COLUMNS.map(str::to_string).to_vec());
    }
    // A misspelt field is an error whether or not there are pools to show.
    let selected = selected_fields(&POOL_LIST_COLUMNS, &format)?;
    let mut rows = daemon_rows(socket, name.as_deref())?.unwrap_or_default();
    if rows.is_empty() {
        if let Some(name) = &name {
            return Err(Failure(format!("cannot open '{name}': no such pool")));
        }
        if !format.json && !format.no_header {
            out!("no pools available");
            return Ok(0);
        }
    }
    rows.sort_by(|a, b| a.name.cmp(&b.name).then(a.guid.cmp(&b.guid)));
    if format.json {
        let pools = rows
            .iter()
            .map(|row| (row.name.clone(), row.json_object(&selected, format.exact)));
        let mut document = Document::new("tarn pool list");
        document.insert("pools", json::keyed(pools));
        document.print();
    } else {
        let cells: Vec<_> = rows.iter().map(PoolRow::cells).collect();
        print_table(
            &POOL_LIST_COLUMNS,
            &cells,
            &format,
            "tarn pool list",
            "pools",
        )?;
    }
    Ok(0)
}

/// `pool status [-v] [-j [-p]] [POOL]`: the pools the daemon holds (none when no daemon runs),
/// as zpool status shows imported pools only; `pool import` without a pool name shows an
/// exported pool's vdev tree and state. With none and no POOL: "no pools available" on stderr
/// and exit 0, as zpool (an empty document with -j).
pub fn status(socket: &Path, args: StatusArgs) -> Result<Status, Failure> {
    refuse_dirs("status", &args.dirs)?;
    let (json, name, unhealthy) = (args.json, args.pool.clone(), args.unhealthy);
    let request = Request::Pool(PoolRequest::Status(args));
    let mut entries: Vec<StatusEntry> = match client::ask_if_running(socket, &request)? {
        Some(response) => serde_json::from_value(response.data["pools"].clone())
            .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?,
        None => Vec::new(),
    };
    if entries.is_empty() {
        if let Some(name) = name {
            return Err(Failure(format!("cannot open '{name}': no such pool")));
        }
        if !json {
            err!("no pools available");
            return Ok(0);
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name).then(a.guid.cmp(&b.guid)));
    if unhealthy {
        // zpool status -x: only pools with a problem to explain (a `status:` reason), not
        // ONLINE, or suspended.
        entries.retain(|entry| {
            entry.json.get("reason").is_some()
                || entry.json["state"].as_str() != Some("ONLINE")
                || entry.json["suspended"].as_bool() == Some(true)
        });
        if entries.is_empty() && !json {
            match name {
                Some(name) => out!("pool '{name}' is healthy"),
                None => out!("all pools are healthy"),
            }
            return Ok(0);
        }
    }
    print_status(&entries, json);
    Ok(0)
}

/// Print `pool status` entries (already filtered and ordered); `-j`: keyed by pool name.
pub fn print_status(entries: &[StatusEntry], json: bool) {
    if json {
        let pools = entries
            .iter()
            .map(|entry| (entry.name.clone(), entry.json.clone()));
        let mut document = Document::new("tarn pool status");
        document.insert("pools", json::keyed(pools));
        document.print();
    } else {
        for entry in entries {
            out!("{}", entry.text);
        }
    }
}

/// The daemon's `pool get` rows, or its failure as the exit status to return.
fn fetch_properties(
    socket: &Path,
    args: GetArgs,
) -> Result<Result<Vec<PoolPropertyRow>, Status>, Failure> {
    let pool = args.pool.clone();
    let request = Request::Pool(PoolRequest::Get(args));
    let response = ask_imported(socket, &pool, &request)?;
    if response.status != 0 {
        return Ok(Err(forward(response)));
    }
    let rows = serde_json::from_value(response.data["properties"].clone())
        .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?;
    Ok(Ok(rows))
}

/// `pool get [-H] [-p] [-j] [-o FIELD,...] PROP[,PROP]|all POOL`.
pub fn get(socket: &Path, args: GetArgs) -> Result<Status, Failure> {
    args.properties()?;
    let format = args.format.format();
    selected_fields(&GET_COLUMNS, &format)?;
    let pool = args.pool.clone();
    let rows = match fetch_properties(socket, args)? {
        Ok(rows) => rows,
        Err(status) => return Ok(status),
    };
    if format.json {
        // zpool get -j: the pool's identity (from its `pool list` row) beside its properties.
        let identity = daemon_rows(socket, Some(&pool))?
            .and_then(|rows| rows.into_iter().next())
            .ok_or_else(|| Failure(format!("cannot open '{pool}': no such pool")))?;
        let mut object = identity.json_identity(true, format.exact);
        let properties = rows
            .iter()
            .map(|row| (row.property.clone(), row.json_property(format.exact)));
        object.insert("properties".into(), json::keyed(properties));
        let mut document = Document::new("tarn pool get");
        document.insert(
            "pools",
            json::keyed([(identity.name.clone(), serde_json::Value::Object(object))]),
        );
        document.print();
        return Ok(0);
    }
    let cells: Vec<Vec<Cell>> = rows.iter().map(PoolPropertyRow::cells).collect();
    print_table(&GET_COLUMNS, &cells, &format, "tarn pool get", "properties")?;
    Ok(0)
}

/// `pool set PROP=VAL POOL`.
pub fn set(socket: &Path, args: SetArgs) -> Result<Status, Failure> {
    args.setting()?;
    let pool = args.pool.clone();
    let request = Request::Pool(PoolRequest::Set(args));
    Ok(forward(ask_imported(socket, &pool, &request)?))
}

/// `pool upgrade [-a | POOL]`: the daemon enables the features and prints what it did. Without
/// a daemon no pool is imported: nothing to upgrade or list (an exported pool is upgraded
/// once imported, as zpool upgrade only sees imported pools).
pub fn upgrade(socket: &Path, args: UpgradeArgs) -> Result<Status, Failure> {
    let request = Request::Pool(PoolRequest::Upgrade(args.clone()));
    match &args.pool {
        Some(pool) => Ok(forward(ask_imported(socket, pool, &request)?)),
        None => match client::ask_if_running(socket, &request)? {
            Some(response) => Ok(forward(response)),
            None => {
                if !args.all {
                    println!("All imported pools have every supported feature enabled.");
                }
                Ok(0)
            }
        },
    }
}

/// How often `pool wait -t free` asks the daemon: first after `WAIT_POLL_FIRST`, then twice as
/// long each time, up to `WAIT_POLL_MAX`. The frees of most destroys end within a txg or two, a
/// few milliseconds each, and a fixed 100 ms poll made every wait that did not find `freeing`
/// at 0 at once last at least 100 ms, and overshoot a longer free by up to 100 ms. A free that
/// lasts is asked about 50 times a second, one small request each.
const WAIT_POLL_FIRST: Duration = Duration::from_millis(2);
const WAIT_POLL_MAX: Duration = Duration::from_millis(20);

/// `pool wait [-t ACTIVITY[,...]] POOL`: block until the activities have finished. `free`
/// (background frees of destroyed datasets: the `freeing` property reaches 0, then the frees'
/// deferral passes, so that `avail` shows the space at once), `scrub`, `resilver`,
/// `raidz_expand` (a RAID-Z expansion's copy, paused or not); with no -t every supported
/// activity is waited for. Quiet, except for a progress line on stderr when stderr is a
/// terminal.
pub fn wait(socket: &Path, activities: Vec<String>, pool: String) -> Result<Status, Failure> {
    for activity in &activities {
        match activity.as_str() {
            "free" | "scrub" | "resilver" | "raidz_expand" => {}
            "initialize" | "replace" | "remove" | "trim" | "discard" | "condense" => {
                return Err(Failure(format!(
                    "cannot wait for {activity} on '{pool}': not supported yet (tarn pool wait knows free, scrub, resilver and raidz_expand)"
                )))
            }
            other => {
                return Err(Failure(format!(
                    "invalid activity {other:?}: expected free, scrub, resilver or raidz_expand"
                )))
            }
        }
    }
    let wanted =
        |activity: &str| activities.is_empty() || activities.iter().any(|one| one == activity);
    // An expansion first: its end starts a scrub, which a wait for every activity waits for too.
    if wanted("raidz_expand") {
        let status = super::scrub::wait_raidz_expand(socket, &pool)?;
        if status != 0 {
            return Ok(status);
        }
    }
    // Scans (`verbs/scrub.rs`), then frees; no -t: every activity.
    for function in ["resilver", "scrub"] {
        if wanted(function) {
            let status = super::scrub::wait_scan(socket, function, &pool)?;
            if status != 0 {
                return Ok(status);
            }
        }
    }
    if !wanted("free") {
        return Ok(0);
    }
    let progress = std::io::stderr().is_terminal();
    let mut shown = false;
    let mut poll = WAIT_POLL_FIRST;
    loop {
        let freeing = GetArgs {
            format: TableFormatArgs::default(),
            properties: "freeing".into(),
            pool: pool.clone(),
        };
        let rows = match fetch_properties(socket, freeing)? {
            Ok(rows) => rows,
            Err(status) => return Ok(status),
        };
        let freeing = match rows.first().map(|row| &row.value) {
            Some(PoolPropertyValue::Bytes(bytes)) => *bytes,
            _ => {
                return Err(Failure(
                    "unreadable answer from the daemon: no freeing".into(),
                ))
            }
        };
        if freeing == 0 {
            break;
        }
        if progress {
            let mut stderr = std::io::stderr();
            let _ = write!(
                stderr,
                "\r{pool}: {:>8} left to free ",
                human_bytes(freeing)
            );
            let _ = stderr.flush();
            shown = true;
        }
        std::thread::sleep(poll);
        poll = (poll * 2).min(WAIT_POLL_MAX);
    }
    // A freed block is allocatable again only once its deferred free has passed the next
    // TXG_DEFER_SIZE syncs; an idle pool would take up to a txg timeout each to get there,
    // with `avail` stale meanwhile. Those syncs are forced here (their output unused).
    for _ in 0..=tarn::types::TXG_DEFER_SIZE {
        let request = Request::Pool(PoolRequest::Sync(PoolOption {
            pool: Some(pool.clone()),
        }));
        match client::ask_if_running(socket, &request)? {
            Some(response) if response.status != 0 => return Ok(forward(response)),
            Some(_) => {}
            None => break,
        }
    }
    if shown {
        let _ = writeln!(std::io::stderr(), "\r{pool}: freed{:24}", "");
    }
    Ok(0)
}
