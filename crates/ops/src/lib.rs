//! `tarn-ops`: the verb bodies that act on an open pool, which the CLI runs in its own process
//! on an exported pool and the daemon runs on the pools it holds, so that a verb prints the same
//! text wherever it ran; and what both sides read about pools: the cache file ([`cachefile`]),
//! a pool's own records ([`records`]), the `scan:` and `expand:` lines of `pool status`
//! ([`scan_report`]) and its `-j` document in zpool's schema ([`status_json`]).
//!
//! It depends on the engine and `tarn-protocol` (for Failure, the rows and out!/err!); it must
//! not depend on the CLI, its clap definitions or the daemon: both of those depend on it.
//!
//! What each verb does to an open pool, independent of where the pool is open: in this process
//! (an exported pool opened for one command) or in the daemon (an imported pool). Everything is
//! printed through `out!`/`err!`, so the daemon can capture it and the CLI print it unchanged.

#[macro_use]
extern crate tarn_protocol;

pub mod cachefile;
pub mod records;
pub mod scan_report;
pub mod status_json;

use std::path::PathBuf;

use tarn::debug::check_pool;
use tarn::tunables::Tunables;
use tarn::{CreateOptions, ImportOptions, Pool, PoolValue, VdevLayout};

use tarn_protocol::error::Failure;
use tarn_protocol::format;
use tarn_protocol::json::Document;
use tarn_protocol::rows::{PoolPropertyRow, PoolPropertyValue, PoolRow, StatusEntry};

/// Create a pool and say so; the caller decides whether it stays open.
pub fn create(
    name: String,
    layout: VdevLayout,
    create_size: Option<u64>,
    force: bool,
    disabled_features: Vec<String>,
    tunables: Tunables,
) -> Result<Pool, Failure> {
    let pool = Pool::create(CreateOptions {
        name: name.clone(),
        vdevs: layout.data,
        log: layout.log,
        cache: layout.cache,
        create_size,
        force,
        tunables,
        wrap_device: None,
        disabled_features,
    })?;
    out!("created pool {name}");
    Ok(pool)
}

/// Import a pool by name or guid, warning about uberblocks that had to be skipped.
pub fn import(target: &str, options: ImportOptions) -> Result<Pool, Failure> {
    let (pool, report) = Pool::import(target, options)?;
    for (txg, why) in &report.skipped {
        err!("warning: pool {target}: uberblock of txg {txg} could not be used ({why}); rewound to txg {}", report.txg);
    }
    for damage in &report.damaged {
        err!("warning: pool {target}: {damage}");
    }
    out!(
        "imported pool {} at txg {}{}",
        pool.name(),
        report.txg,
        if report.skipped.is_empty() {
            String::new()
        } else {
            format!(
                " (rewound past {} newer txgs, discarding {} seconds of changes)",
                report.skipped.len(),
                report.seconds_discarded
            )
        }
    );
    Ok(pool)
}

/// Import quietly (read-only listings and inspection of exported pools): only rewind warnings.
pub fn open_quietly(target: &str, options: ImportOptions) -> Result<Pool, Failure> {
    let (pool, report) = Pool::import(target, options)?;
    for (txg, why) in &report.skipped {
        err!("warning: pool {target}: uberblock of txg {txg} could not be used ({why}); rewound to txg {}", report.txg);
    }
    for damage in &report.damaged {
        err!("warning: pool {target}: {damage}");
    }
    Ok(pool)
}

pub fn pool_row(pool: &Pool) -> PoolRow {
    let (size, alloc, frag, freeing) = match pool.space() {
        Ok(space) => (
            space.size,
            space.allocated,
            space.fragmentation,
            space.freeing,
        ),
        Err(_) => (0, 0, None, 0),
    };
    PoolRow {
        name: pool.name().to_string(),
        guid: pool.guid().0,
        size,
        alloc,
        frag,
        health: pool.health().as_str().to_string(),
        freeing,
        txg: pool.last_synced_txg().0,
    }
}

/// `pool get`: the engine's properties and the two the holder of the pool knows (`altroot`,
/// `cachefile`), all of them or those named, in the order named. An unknown name is an error
/// naming the known ones.
pub fn pool_properties(
    pool: &Pool,
    names: &[String],
    altroot: Option<&std::path::Path>,
) -> Result<Vec<PoolPropertyRow>, Failure> {
    let mut all: Vec<PoolPropertyRow> = Vec::new();
    let mut features = Vec::new();
    for property in pool.pool_properties()? {
        let row = PoolPropertyRow {
            name: pool.name().to_string(),
            value: match property.value {
                PoolValue::Bytes(bytes) => PoolPropertyValue::Bytes(bytes),
                PoolValue::Percent(percent) => PoolPropertyValue::Percent(percent),
                PoolValue::Number(number) => PoolPropertyValue::Number(number),
                PoolValue::Text(text) => PoolPropertyValue::Text(text),
            },
            property: property.name,
            source: property.source.to_string(),
        };
        if row.property.starts_with("feature@") || row.property.starts_with("unsupported@") {
            features.push(row);
        } else {
            all.push(row);
        }
    }
    all.push(PoolPropertyRow {
        name: pool.name().to_string(),
        property: "altroot".into(),
        value: PoolPropertyValue::Text(
            altroot.map_or_else(|| "-".to_string(), |path| path.display().to_string()),
        ),
        source: if altroot.is_some() {
            "local"
        } else {
            "default"
        }
        .into(),
    });
    all.push(PoolPropertyRow {
        name: pool.name().to_string(),
        property: "cachefile".into(),
        value: PoolPropertyValue::Text("-".into()),
        source: "default".into(),
    });
    all.extend(features);
    if names.iter().any(|name| name == "all") {
        return Ok(all);
    }
    let mut rows = Vec::new();
    for name in names {
        // `feature@*`: every feature's row, the known ones and those this build does not know.
        if name == "feature@*" {
            rows.extend(
                all.iter()
                    .filter(|row| {
                        row.property.starts_with("feature@")
                            || row.property.starts_with("unsupported@")
                    })
                    .cloned(),
            );
            continue;
        }
        rows.push(
            all.iter()
                .find(|row| &row.property == name)
                .cloned()
                .ok_or_else(|| {
                    Failure(format!(
                        "bad property list: no pool property {name:?}; pool properties: {}",
                        all.iter()
                            .map(|row| row.property.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?,
        );
    }
    Ok(rows)
}

/// `pool upgrade POOL`: enable every supported feature not enabled yet; the lines to print
/// (as zpool upgrade prints them), with one for each feature only `pool create` can enable.
pub fn upgrade_pool(pool: &Pool) -> Result<Vec<String>, Failure> {
    let name = pool.name();
    let report = pool.upgrade()?;
    let mut lines = Vec::new();
    if report.enabled.is_empty() {
        lines.push(format!(
            "Pool '{name}' already has all supported features enabled."
        ));
    } else {
        lines.push(format!("Enabled the following features on '{name}':"));
        lines.extend(report.enabled.iter().map(|feature| format!("  {feature}")));
    }
    lines.extend(report.create_only.iter().map(|feature| {
        format!("feature@{feature} not enabled on '{name}': it can only be chosen when a pool is created")
    }));
    Ok(lines)
}

/// `pool upgrade` with no pool: the pools with supported features not enabled, and those
/// features (the ones only `pool create` can enable left out).
pub fn upgrade_listing(pools: &[&Pool]) -> Vec<String> {
    let pending: Vec<(&str, Vec<&'static str>)> = pools
        .iter()
        .map(|pool| (pool.name(), pool.features_to_upgrade()))
        .filter(|(_, features)| !features.is_empty())
        .collect();
    if pending.is_empty() {
        return vec!["All imported pools have every supported feature enabled.".into()];
    }
    let mut lines = vec![
        "Some supported features are not enabled on the following pools. Once a feature is enabled the pool may become incompatible with software that does not support the feature (see `tarn pool get feature@* POOL`).".into(),
        String::new(),
        "POOL  FEATURE".into(),
        "---------------".into(),
    ];
    for (name, features) in pending {
        lines.push(name.to_string());
        lines.extend(features.iter().map(|feature| format!("      {feature}")));
    }
    lines
}

/// `pool set PROP=VAL`: what the engine can set (`feature@NAME=enabled`); the properties fixed
/// for an import are refused as zpool refuses them.
pub fn set_pool_property(pool: &Pool, property: &str, value: &str) -> Result<(), Failure> {
    match property {
        "altroot" => Err(Failure(
            "property 'altroot' can only be set during pool creation or import (tarn pool create|import -R ALTROOT)".into(),
        )),
        "readonly" => Err(Failure(
            "property 'readonly' can only be set at import time (tarn pool import -o readonly=on)".into(),
        )),
        "cachefile" => Err(Failure(
            "property 'cachefile' belongs to the daemon holding the pool: import the pool, then set it (or give -o cachefile= to pool create or import)".into(),
        )),
        _ => Ok(pool.set_pool_property(property, value)?),
    }
}

/// `pool status` of one pool: its text, and its `-j` object (numbers exact with `exact`, as
/// `-p` asks; see [`status_json`]).
pub fn status_entry(pool: &Pool, verbose: bool, exact: bool) -> StatusEntry {
    let name = pool.name();
    // The top-level vdevs by class, keyed by name: `normal` under the root, `log` under `logs`.
    let mut normal_vdevs = serde_json::Map::new();
    let mut log_vdevs = serde_json::Map::new();
    let health = pool.health();
    // The NAME column is as wide as its longest entry (vdev paths can be long) plus two spaces,
    // and at least 32 characters, so that STATE never runs into a name.
    let width = pool
        .leaves()
        .map(|leaf| leaf.path.display().to_string().len() + 10)
        .chain([name.len()])
        .max()
        .unwrap_or(0)
        .saturating_add(2)
        .max(32);
    let mut text = format!(
        "  pool: {}\n state: {}\n   txg: {}\n{}config:\n\n\t{:<width$}STATE     READ WRITE CKSUM\n\t{:<width$}{}\n",
        name,
        health.as_str(),
        pool.last_synced_txg(),
        crate::scan_report::scan_text(pool) + &crate::scan_report::expand_text(pool),
        "NAME",
        name,
        health.as_str()
    );
    // Data vdevs, then log vdevs under a `logs` line, as zpool shows them.
    let tops = pool.top_vdevs();
    let ordered =
        (tops.iter().filter(|top| !top.is_log())).chain(tops.iter().filter(|top| top.is_log()));
    let mut logs_line_printed = false;
    for top in ordered {
        if top.is_log() && !logs_line_printed {
            text.push_str("\tlogs\n");
            logs_line_printed = true;
        }
        // A replacement and the leaf it replaces show as `replacing-N` (N: the old leaf's
        // child index), as zpool shows them; a top-level vdev that is only that pair shows
        // the pair at the top.
        let pairs: Vec<(usize, usize)> = top
            .children
            .iter()
            .enumerate()
            .filter_map(|(new, leaf)| {
                let old = leaf.replaces()?;
                let old = top.children.iter().position(|other| other.guid == old)?;
                Some((old, new))
            })
            .collect();
        let only_a_pair = top.children.len() == 2 && pairs.len() == 1;
        let kind = match top.kind.group_name(top.id.0) {
            Some(name) if top.kind.parity() > 0 || !only_a_pair => name,
            _ if top.children.len() > 1 && !only_a_pair => format!("mirror-{}", top.id),
            _ => String::new(),
        };
        if !kind.is_empty() {
            let label = format!("  {kind}");
            text.push_str(&format!("\t{label:<width$}{}\n", top.health().as_str()));
        }
        let class = top.class.as_str();
        // The children of the top-level vdev (a mirror) or, without one, the vdevs at its
        // place: keyed by name.
        let mut children = serde_json::Map::new();
        for (index, leaf) in top.children.iter().enumerate() {
            if pairs.iter().any(|&(_, new)| new == index) {
                continue;
            }
            let pair = pairs.iter().find(|&&(old, _)| old == index);
            let mut depth = if kind.is_empty() { 1 } else { 2 };
            let mut replacing: Option<(String, tarn::status::VdevHealth)> = None;
            let mut replaced = serde_json::Map::new();
            if let Some(&(old, new)) = pair {
                let replacement = &top.children[new];
                let state = if leaf.health() == tarn::status::VdevHealth::Online
                    && replacement.health() == tarn::status::VdevHealth::Online
                    && replacement.dtl.is_empty()
                {
                    "ONLINE"
                } else {
                    "DEGRADED"
                };
                let label = format!("{}replacing-{old}", "  ".repeat(depth));
                text.push_str(&format!("\t{label:<width$}{state}\n"));
                depth += 1;
                let health = if state == "ONLINE" {
                    tarn::status::VdevHealth::Online
                } else {
                    tarn::status::VdevHealth::Degraded
                };
                replacing = Some((format!("replacing-{old}"), health));
            }
            let shown: Vec<&tarn::status::Leaf> = match pair {
                Some(&(_, new)) => vec![leaf, &top.children[new]],
                None => vec![leaf],
            };
            for (position, leaf) in shown.into_iter().enumerate() {
                let stats = leaf.stats.snapshot();
                // The old side of an in-place replace has the new one's path: zpool adds /old.
                let old_suffix = match pair {
                    Some(&(_, new)) if position == 0 && top.children[new].path == leaf.path => {
                        "/old"
                    }
                    _ => "",
                };
                let leaf_name = format!("{}{old_suffix}", leaf.path.display());
                let label = format!("{}{leaf_name}", "  ".repeat(depth));
                let absent = absent_leaf_problem(pool, leaf);
                let note = match absent {
                    Some(problem) => format!("  {}", problem.as_str()),
                    None => crate::scan_report::leaf_note(pool, leaf),
                };
                text.push_str(&format!(
                    "\t{label:<width$}{:<8} {:>4} {:>5} {:>5}{note}\n",
                    leaf.health().as_str(),
                    stats.read_errors,
                    stats.write_errors,
                    stats.checksum_errors,
                ));
                let view = status_json::LeafView {
                    name: leaf_name.clone(),
                    path: &leaf.path,
                    guid: leaf.guid.0,
                    class,
                    state: status_json::vdev_state(leaf.health()),
                    stats,
                    aux: absent.map(|problem| problem.as_str()),
                };
                let object = status_json::leaf_object(view, Some((pool, leaf)), exact);
                if replacing.is_some() {
                    replaced.insert(leaf_name, object);
                } else {
                    children.insert(leaf_name, object);
                }
            }
            if let Some((replacing, health)) = replacing {
                let object = status_json::interior_object(
                    &replacing,
                    "replacing",
                    None,
                    class,
                    health,
                    replaced,
                    exact,
                );
                children.insert(replacing, object);
            }
        }
        let at_top = if kind.is_empty() {
            children
        } else {
            let object = status_json::interior_object(
                &kind,
                if top.kind.parity() > 0 {
                    "raidz"
                } else {
                    "mirror"
                },
                Some(top.guid.0),
                class,
                top.health(),
                children,
                exact,
            );
            serde_json::Map::from_iter([(kind.clone(), object)])
        };
        if top.is_log() {
            log_vdevs.extend(at_top);
        } else {
            normal_vdevs.extend(at_top);
        }
    }
    // The L2ARC's devices after the data vdevs (and after a `logs` section), as zpool shows them.
    let (cache_text, cache_json) = cache_section(pool, width, exact);
    text.push_str(&cache_text);
    let (errors, errors_json, data_errors) = crate::records::errors_section(pool, verbose);
    let problem = pool_problem(pool, data_errors);
    if let Some(problem) = &problem {
        text.push_str(&format!(
            "\nstatus: {}\naction: {}\n",
            problem.status, problem.action
        ));
        if let Some(see) = &problem.see {
            text.push_str(&format!("   see: {see}\n"));
        }
    }
    // Faults injected on purpose (`tarn inject`) explain errors that are not the disks'.
    let injections = pool.injections().len();
    if injections > 0 {
        text.push_str(&format!(
            "inject: {injections} fault injection(s) active: tarn inject lists them, tarn inject -c all clears them\n"
        ));
    }
    text.push('\n');
    text.push_str(&errors);
    let mut json = serde_json::Map::new();
    let mut put = |key: &str, value: serde_json::Value| {
        json.insert(key.to_string(), value);
    };
    put("name", name.into());
    put("state", health.as_str().into());
    put("guid", tarn_protocol::json::number(pool.guid().0, exact));
    put(
        "txg",
        tarn_protocol::json::number(pool.last_synced_txg().0, exact),
    );
    if let Some(problem) = problem {
        put("status", problem.status.into());
        put("action", problem.action.into());
        if let Some(see) = problem.see {
            put("moreinfo", see.into());
        }
        put("reason", problem.reason.into());
    }
    if let Some(scan) = status_json::scan_stats(pool, exact) {
        put("scan_stats", scan);
    }
    if let Some(expand) = status_json::raidz_expand_stats(pool, exact) {
        put("raidz_expand_stats", expand);
    }
    let root = status_json::interior_object(
        name,
        "root",
        Some(pool.guid().0),
        "normal",
        health,
        normal_vdevs,
        exact,
    );
    put(
        "vdevs",
        serde_json::Map::from_iter([(name.to_string(), root)]).into(),
    );
    if !log_vdevs.is_empty() {
        put("logs", log_vdevs.into());
    }
    if !cache_json.is_empty() {
        put("l2cache", cache_json.into());
    }
    let error_count = errors_json["count"].as_u64().unwrap_or(0);
    put(
        "error_count",
        tarn_protocol::json::number(error_count, exact),
    );
    if verbose && error_count > 0 {
        put("errlist", errors_json["files"].clone());
    }
    put("suspended", errors_json["suspended"].clone());
    put(
        "injections",
        tarn_protocol::json::number(injections as u64, exact),
    );
    StatusEntry {
        name: name.to_string(),
        guid: pool.guid().0,
        text,
        json: serde_json::Value::Object(json),
    }
}

/// The one problem `pool status` explains with its `status:` and `action:` lines (zpool's
/// `zpool_get_status` reason): a short name for scripts, the two texts and a pointer.
struct PoolProblem {
    reason: &'static str,
    status: String,
    action: String,
    see: Option<String>,
}

/// The most pressing problem of `pool` (`data_errors`: the error log names damaged data), in
/// zpool's order: data errors, then devices gone, faulted or missing, then devices that
/// counted errors, then devices taken offline. A suspended pool says so in its errors section.
fn pool_problem(pool: &Pool, data_errors: usize) -> Option<PoolProblem> {
    let name = pool.name();
    let leaves = || pool.leaves();
    let health = pool.health();
    let offline = leaves().any(|leaf| leaf.is_offline());
    let faulted = leaves().any(|leaf| leaf.health() == tarn::status::VdevHealth::Faulted);
    let removed = leaves().any(|leaf| leaf.health() == tarn::status::VdevHealth::Removed);
    // zpool's vdev_errors: any read, write or checksum error counted on a device, cache
    // devices included, since the counts were last cleared.
    let has_errors = |stats: tarn::stats::LeafStatsSnapshot| {
        stats.read_errors + stats.write_errors + stats.checksum_errors > 0
    };
    let failing = leaves().any(|leaf| has_errors(leaf.stats.snapshot()))
        || (pool.cache_devices().iter()).any(|cache| has_errors(cache.leaf.stats.snapshot()));
    let problem = |reason, status: &str, action: &str| PoolProblem {
        reason,
        status: status.to_string(),
        action: action.to_string(),
        see: None,
    };
    Some(if data_errors > 0 {
        PoolProblem {
            see: Some(format!(
                "'tarn pool status -v {name}' names the damaged files; an entry goes once its file is rewritten or removed, or with 'tarn pool clear {name}'."
            )),
            ..problem(
                "corrupt_data",
                "one or more devices has experienced an error resulting in data corruption; applications may be affected.",
                "restore the file in question if possible, otherwise restore the entire pool from backup.",
            )
        }
    } else if removed {
        problem("removed_device", "one or more devices went away while the pool was imported; the pool continues without them.", "put the device back and run 'tarn pool online POOL DEVICE', or replace it with 'tarn pool replace POOL DEVICE NEW_DEVICE'.")
    } else if faulted {
        problem("faulted_device", "one or more devices failed writes and missed data; the pool continues without them.", "repair or replace the device, then 'tarn pool online POOL DEVICE' resilvers what it missed.")
    } else if leaves().any(|leaf| {
        absent_leaf_problem(pool, &leaf) == Some(tarn::status::VdevProblem::InvalidLabel)
    }) {
        // zpool's ZPOOL_STATUS_CORRUPT_LABEL_R: a disk is at the path but not as this pool's
        // member (blank, wiped, or another pool's); importing again will not take it back.
        problem("corrupt_label", "one or more devices could not be used because the label is missing or invalid; the pool continues without them.", &format!("replace the device in place with 'tarn pool replace {name} DEVICE' (a full resilver onto it), or put the pool's own device back at its path and import again."))
    } else if health != tarn::status::VdevHealth::Online && !offline {
        problem("missing_device", "one or more devices could not be opened; the pool continues without them.", "put the missing device back where the config names it and import again, then run 'tarn check'.")
    } else if failing {
        problem(
            "failing_device",
            "one or more devices has experienced an unrecoverable error; an attempt was made to correct the error; applications are unaffected.",
            &format!("determine if the device needs to be replaced, and clear the errors using 'tarn pool clear {name}' or replace the device with 'tarn pool replace {name} DEVICE NEW_DEVICE'."),
        )
    } else if offline {
        problem("offline_device", "one or more devices were taken offline by the administrator; the pool continues without them.", "bring them back with 'tarn pool online POOL DEVICE' (a resilver copies what they missed).")
    } else {
        return None;
    })
}

/// Why a leaf that import did not find is still unusable (`None` for a leaf it opened), asked
/// of the device at the leaf's path now, as zpool's `cannot open` and `corrupted data` notes.
fn absent_leaf_problem(
    pool: &Pool,
    leaf: &tarn::status::Leaf,
) -> Option<tarn::status::VdevProblem> {
    leaf.device
        .is_missing()
        .then(|| tarn::status::VdevProblem::of_absent_leaf(&leaf.path, pool.guid().0, leaf.guid.0))
}

/// The `cache` section of `pool status`: one line per cache device (ONLINE, or UNAVAIL when it
/// was missing at import), with its error counts; empty without cache devices.
fn cache_section(
    pool: &Pool,
    width: usize,
    exact: bool,
) -> (String, serde_json::Map<String, serde_json::Value>) {
    let devices = pool.cache_devices();
    let mut json = serde_json::Map::new();
    if devices.is_empty() {
        return (String::new(), json);
    }
    let mut text = format!("\t{:<width$}\n", "cache");
    for device in devices {
        let stats = device.leaf.stats.snapshot();
        let label = format!("  {}", device.path.display());
        text.push_str(&format!(
            "\t{label:<width$}{:<8} {:>4} {:>5} {:>5}\n",
            device.health().as_str(),
            stats.read_errors,
            stats.write_errors,
            stats.checksum_errors
        ));
        let name = device.path.display().to_string();
        let view = status_json::LeafView {
            name: name.clone(),
            path: &device.path,
            guid: device.guid.0,
            class: "l2cache",
            state: status_json::cache_state(device.health()),
            stats,
            aux: None,
        };
        json.insert(name, status_json::leaf_object(view, None, exact));
    }
    (text, json)
}

/// Sync, then verify the whole pool; Ok(false) when the check found errors.
pub fn check(pool: &Pool, name: &str, repair: bool) -> Result<bool, Failure> {
    pool.sync()?;
    let report = check_pool(pool, repair)?;
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
    if !report.blocks_unreadable.is_empty() {
        out!(
            "  unrecoverable blocks: {} (no copy verifies; listed below and in the error log, see 'tarn pool status -v')",
            report.blocks_unreadable.len()
        );
    }
    for device in report.devices.iter().filter(|device| device.bad > 0) {
        let repaired = device.repaired.map_or_else(
            || "repairs not counted".to_string(),
            |n| format!("{n} repaired"),
        );
        out!(
            "  device {}: {} bad copies ({repaired}, {} unrecoverable)",
            device.path,
            device.bad,
            device.unrecoverable
        );
    }
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
    let unrepaired = report.copies_bad.saturating_sub(report.copies_repaired);
    out!(
        "{}",
        if !clean {
            "ERRORS FOUND".to_string()
        } else if report.copies_bad == 0 {
            "no errors found".to_string()
        } else if unrepaired == 0 {
            format!(
                "no errors found ({} bad copies repaired)",
                report.copies_repaired
            )
        } else {
            format!(
                "no unrecoverable errors, but {unrepaired} bad copies were not repaired (check -n or a read-only pool): run 'tarn check' to repair them"
            )
        }
    );
    Ok(clean)
}

/// A free-segment histogram as (size class in log2 bytes, count), non-empty buckets only.
fn histogram_classes(buckets: &[u64], shift: u32) -> Vec<(u32, u64)> {
    buckets
        .iter()
        .enumerate()
        .filter(|(_, &count)| count > 0)
        .map(|(bucket, &count)| (bucket as u32 + shift, count))
        .collect()
}

/// Print a histogram as zdb does: one line per non-empty class, with a bar.
fn print_histogram(title: &str, classes: &[(u32, u64)]) {
    out!("      {title}");
    let most = classes.iter().map(|&(_, count)| count).max().unwrap_or(1);
    for &(class, count) in classes {
        let stars = ((count * 40).div_ceil(most)) as usize;
        let size = 1u128 << class;
        out!(
            "        {:>6} {:>10} {}",
            format::human_bytes(size.min(u64::MAX as u128) as u64),
            count,
            "*".repeat(stars)
        );
    }
}

/// Largest free segment and in-memory histogram of one metaslab: the loaded tree's, or else
/// the space map replayed into a scratch tree with the log's unflushed changes applied (the
/// metaslab is not loaded by looking).
fn metaslab_tree_figures(
    pool: &Pool,
    ms: &tarn::stats::MetaslabStats,
    vdev: tarn::types::VdevId,
) -> Result<(Option<u64>, Vec<u64>, &'static str), Failure> {
    if let Some(histogram) = &ms.tree_histogram {
        return Ok((ms.largest_free_segment, histogram.clone(), "loaded"));
    }
    let tree = pool
        .metaslab_free_tree(vdev, ms.id)
        .map_err(|e| Failure(e.to_string()))?;
    Ok((
        tree.largest_segment().map(|segment| segment.size()),
        tree.histogram().to_vec(),
        "from the space map",
    ))
}

/// `tarn debug logs`, as `zdb -m`'s log section: every log space map with its txg, length,
/// blocks and the metaslabs whose unflushed txg it is, then the summary and the limits.
pub fn debug_logs(pool: &Pool, name: &str, json: bool) -> Result<(), Failure> {
    let Some(log) = pool.log_space_map_stats() else {
        if json {
            let objects = serde_json::json!({"pool": name, "log_spacemap": null});
            Document::of("tarn debug logs", objects).print();
        } else {
            out!("pool {name} does not use the log space map (feature@log_spacemap disabled)");
        }
        return Ok(());
    };
    if json {
        let objects = serde_json::json!({"pool": name, "log_spacemap": log});
        Document::of("tarn debug logs", objects).print();
        return Ok(());
    }
    out!(
        "log space map of {name}: directory object {}, {} logs, {} blocks of a limit of {}, {} metaslabs with unflushed changes taking {} (limit {}), oldest unflushed txg {}",
        log.directory_object,
        log.logs.len(),
        log.blocks,
        log.block_limit,
        log.metaslabs_unflushed,
        format::human_bytes(log.memory_bytes),
        format::human_bytes(log.memory_limit),
        log.oldest_unflushed_txg
    );
    out!(
        "  {:>10} {:>8} {:>10} {:>7} {:>10}",
        "txg",
        "object",
        "length",
        "blocks",
        "metaslabs"
    );
    for entry in &log.logs {
        out!(
            "  {:>10} {:>8} {:>10} {:>7} {:>10}",
            entry.txg,
            entry.object,
            entry.length_bytes,
            entry.blocks,
            entry.metaslabs
        );
    }
    out!("summary:");
    out!(
        "  {:>10} {:>10} {:>5} {:>7} {:>10} {:>6}",
        "first txg",
        "last txg",
        "txgs",
        "blocks",
        "metaslabs",
        "dirty"
    );
    for row in &log.summary {
        out!(
            "  {:>10} {:>10} {:>5} {:>7} {:>10} {:>6}",
            row.start_txg,
            row.end_txg,
            row.txg_count,
            row.blocks,
            row.metaslabs,
            row.metaslabs_dirty
        );
    }
    Ok(())
}

/// `tarn debug metaslabs [-m|-mm|-mmm]`, as `zdb -m`: level 1 the per-metaslab table; 2 adds
/// each metaslab's on-disk histogram; 3 its largest free segment and in-memory histogram.
pub fn debug_metaslabs(pool: &Pool, name: &str, json: bool, level: u8) -> Result<(), Failure> {
    let level = level.clamp(1, 3);
    let stats = pool.metaslab_stats();
    if json {
        let mut vdevs = Vec::new();
        for vdev in &stats {
            let mut metaslabs = Vec::new();
            for ms in &vdev.metaslabs {
                let mut row = serde_json::json!({
                    "id": ms.id, "offset": ms.start, "size": ms.size, "spacemap": ms.space_map_object.0,
                    "spacemap_length": ms.space_map_length_bytes, "allocated": ms.allocated_bytes, "free": ms.free_bytes,
                    "fragmentation": ms.fragmentation_percent, "loaded": ms.loaded, "condensed": ms.condensed,
                    "unflushed_txg": ms.unflushed_txg, "unflushed_allocated": ms.unflushed_allocated_bytes,
                    "unflushed_freed": ms.unflushed_freed_bytes,
                });
                if level >= 2 {
                    row["histogram"] =
                        serde_json::json!(histogram_classes(&ms.histogram, vdev.ashift));
                }
                if level >= 3 {
                    let (largest, histogram, source) = metaslab_tree_figures(pool, ms, vdev.vdev)?;
                    row["largest_free_segment"] = serde_json::json!(largest);
                    row["tree_histogram"] = serde_json::json!(histogram_classes(&histogram, 0));
                    row["tree_source"] = serde_json::json!(source);
                }
                metaslabs.push(row);
            }
            vdevs.push(serde_json::json!({
                "vdev": vdev.vdev.0, "size": vdev.size, "allocated": vdev.allocated_bytes,
                "fragmentation": vdev.fragmentation_percent, "metaslabs": metaslabs,
            }));
        }
        let objects = serde_json::json!({"pool": name, "vdevs": vdevs});
        Document::of("tarn debug metaslabs", objects).print();
        return Ok(());
    }
    for vdev in &stats {
        out!(
            "vdev {}: {} metaslabs of {}, {} allocated of {}, fragmentation {}",
            vdev.vdev,
            vdev.metaslabs.len(),
            format::human_bytes(1 << vdev.ms_shift),
            format::human_bytes(vdev.allocated_bytes),
            format::human_bytes(vdev.size),
            vdev.fragmentation_percent
                .map_or("-".to_string(), |f| format!("{f}%"))
        );
        out!(
            "  {:>6} {:>14} {:>8} {:>10} {:>10} {:>10} {:>5} {:>6} {:>9}",
            "ms",
            "offset",
            "spacemap",
            "sm length",
            "allocated",
            "free",
            "frag",
            "loaded",
            "unflushed"
        );
        for ms in &vdev.metaslabs {
            out!(
                "  {:>6} {:>#14x} {:>8} {:>10} {:>10} {:>10} {:>5} {:>6} {:>9}",
                ms.id,
                ms.start,
                ms.space_map_object.0,
                ms.space_map_length_bytes,
                format::human_bytes(ms.allocated_bytes),
                format::human_bytes(ms.free_bytes),
                ms.fragmentation_percent
                    .map_or("-".to_string(), |f| format!("{f}%")),
                if ms.loaded { "yes" } else { "no" },
                // The txg since which the log may hold changes not in the map; "-" without.
                match ms.unflushed_txg {
                    0 => "-".to_string(),
                    txg => txg.to_string(),
                }
            );
            if level >= 2 {
                print_histogram(
                    &format!(
                        "on-disk histogram (fragmentation {}):",
                        ms.fragmentation_percent
                            .map_or("-".to_string(), |f| format!("{f}%"))
                    ),
                    &histogram_classes(&ms.histogram, vdev.ashift),
                );
            }
            if level >= 3 {
                let (largest, histogram, source) = metaslab_tree_figures(pool, ms, vdev.vdev)?;
                print_histogram(
                    &format!(
                        "in-memory histogram ({source}), largest free segment {}:",
                        largest.map_or("-".to_string(), format::human_bytes)
                    ),
                    &histogram_classes(&histogram, 0),
                );
            }
        }
    }
    Ok(())
}

/// Cells per row of the metaslab map, and a cell's side in pixels.
const MAP_COLUMNS: usize = 32;
const MAP_CELL: usize = 40;

/// Fill colour of a metaslab `full_percent` full: hue 120 (green) when empty to 0 (red) when
/// full.
fn map_colour(full_percent: u64) -> String {
    format!("hsl({}, 70%, 55%)", 120 - 120 * full_percent.min(100) / 100)
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The metaslab map as an SVG document: per vdev a title line, then a grid of cells, one per
/// metaslab in offset order, coloured by fullness, with the free percentage and fragmentation
/// written inside and the details as a tooltip.
fn metaslab_map_svg(name: &str, stats: &[tarn::stats::VdevSpaceStats]) -> String {
    let width = MAP_COLUMNS * MAP_CELL + 20;
    let mut body = String::new();
    let mut y = 50;
    for vdev in stats {
        body.push_str(&format!(
            "<text x=\"10\" y=\"{}\" font-size=\"14\">vdev {}: {} metaslabs of {}, {} free, fragmentation {}</text>\n",
            y + 14,
            vdev.vdev,
            vdev.metaslabs.len(),
            format::human_bytes(1 << vdev.ms_shift),
            format::human_bytes(vdev.free_bytes),
            vdev.fragmentation_percent.map_or("-".to_string(), |f| format!("{f}%"))
        ));
        y += 24;
        for (index, ms) in vdev.metaslabs.iter().enumerate() {
            let x = 10 + (index % MAP_COLUMNS) * MAP_CELL;
            let top = y + (index / MAP_COLUMNS) * MAP_CELL;
            let free_percent = ms.free_bytes * 100 / ms.size.max(1);
            let frag = ms
                .fragmentation_percent
                .map_or("-".to_string(), |f| f.to_string());
            body.push_str(&format!(
                "<g><title>metaslab {} at {:#x}: {} allocated, {} free, fragmentation {}%, space map {} ({} bytes){}</title>\
                 <rect x=\"{x}\" y=\"{top}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"#333\"/>\
                 <text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{free_percent}%</text>\
                 <text x=\"{}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\">f{frag}</text></g>\n",
                ms.id,
                ms.start,
                format::human_bytes(ms.allocated_bytes),
                format::human_bytes(ms.free_bytes),
                frag,
                ms.space_map_object.0,
                ms.space_map_length_bytes,
                if ms.loaded { ", loaded" } else { "" },
                MAP_CELL - 2,
                MAP_CELL - 2,
                map_colour(100 - free_percent),
                x + MAP_CELL / 2 - 1,
                top + 17,
                x + MAP_CELL / 2 - 1,
                top + 31,
            ));
        }
        y += vdev.metaslabs.len().div_ceil(MAP_COLUMNS) * MAP_CELL + 16;
    }
    let mut legend = String::new();
    for (step, full) in [0u64, 25, 50, 75, 100].into_iter().enumerate() {
        let x = width - 5 * 56 + step * 56;
        legend.push_str(&format!(
            "<rect x=\"{x}\" y=\"8\" width=\"14\" height=\"14\" fill=\"{}\" stroke=\"#333\"/><text x=\"{}\" y=\"20\" font-size=\"11\">{full}%</text>\n",
            map_colour(full),
            x + 17
        ));
    }
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{y}\" font-family=\"sans-serif\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"20\" font-size=\"16\" font-weight=\"bold\">pool {}: metaslabs by fullness (cell: free %, f = fragmentation %)</text>\n\
         <text x=\"{}\" y=\"20\" font-size=\"11\">full:</text>\n{legend}{body}</svg>\n",
        xml_escape(name),
        width - 5 * 56 - 30,
    )
}

/// `tarn debug map -o FILE.svg|FILE.png POOL`: write the metaslab map. The PNG is the SVG
/// rasterized, so that there is one drawing.
pub fn debug_map(pool: &Pool, name: &str, output: &std::path::Path) -> Result<(), Failure> {
    let png = match output.extension().and_then(|extension| extension.to_str()) {
        Some("svg") => false,
        Some("png") => true,
        _ => {
            return Err(Failure(format!(
                "{}: the image must end in .svg or .png",
                output.display()
            )))
        }
    };
    let svg = metaslab_map_svg(name, &pool.metaslab_stats());
    let bytes = if png {
        svg_to_png(&svg)?
    } else {
        svg.into_bytes()
    };
    std::fs::write(output, bytes).map_err(|e| Failure(format!("{}: {e}", output.display())))?;
    out!("wrote {}", output.display());
    Ok(())
}

/// The font families tried, in order, for the map's `sans-serif` text: fontdb names Arial
/// for it, which a Linux system rarely has.
const SANS_SERIF_FAMILIES: [&str; 5] = [
    "DejaVu Sans",
    "Liberation Sans",
    "Noto Sans",
    "FreeSans",
    "Arial",
];

/// Rasterize an SVG document as PNG at its own size, its text in a system font. With no font
/// on the system the PNG has the cells and colours but no text, and a warning says so.
fn svg_to_png(svg: &str) -> Result<Vec<u8>, Failure> {
    use resvg::{tiny_skia, usvg};
    let mut options = usvg::Options::default();
    let fonts = options.fontdb_mut();
    fonts.load_system_fonts();
    let family = SANS_SERIF_FAMILIES
        .iter()
        .map(|family| family.to_string())
        .chain(
            fonts
                .faces()
                .flat_map(|face| face.families.iter().map(|(family, _)| family.clone())),
        )
        .find(|family| {
            fonts
                .faces()
                .any(|face| face.families.iter().any(|(name, _)| name == family))
        });
    match family {
        Some(family) => fonts.set_sans_serif_family(family),
        None => err!("warning: no font found on this system: the PNG has no text (the SVG has it)"),
    }
    let tree = usvg::Tree::from_str(svg, &options)
        .map_err(|error| Failure(format!("cannot draw the map: {error}")))?;
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| Failure("cannot draw the map: empty image".into()))?;
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap
        .encode_png()
        .map_err(|error| Failure(format!("cannot encode the map as PNG: {error}")))
}

pub fn debug_spacemap(pool: &Pool, name: &str, vdev: u32, metaslab: u64) -> Result<(), Failure> {
    use tarn::debug::SpaceMapAction;
    let stats = pool.metaslab_stats();
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
    let map = pool
        .open_metaslab_space_map(vdev_stats, ms)
        .map_err(|e| Failure(e.to_string()))?;
    out!(
        "space map object {} of vdev {vdev} metaslab {metaslab}: length {} allocated {}",
        ms.space_map_object,
        map.header.length_bytes,
        map.header.allocated_bytes
    );
    let mut last = (0u64, 0u32, None);
    pool.replay_space_map(&map, |entry| {
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

pub fn tunables() -> Result<Tunables, Failure> {
    Tunables::from_env().map_err(Failure)
}

/// The options of an in-process open of a pool whose devices are in `dirs` (the CLI names
/// them with [`cachefile::search_dirs`]).
pub fn import_options(dirs: &[PathBuf], readonly: bool) -> Result<ImportOptions, Failure> {
    Ok(ImportOptions {
        dirs: dirs.to_vec(),
        readonly,
        tunables: tunables()?,
        new_name: None,
        wrap_device: None,
        rewind: false,
        rewind_to: None,
        missing_log: false,
        // A read-only open writes nothing that another host could be hurt by; a writable
        // one of a pool in use elsewhere is refused, saying to import it with -f.
        any_host: readonly,
        destroyed: false,
    })
}

/// Open an exported pool in this process for one command, its devices searched in `dirs`.
pub fn open_named(dirs: &[PathBuf], name: &str, readonly: bool) -> Result<Pool, Failure> {
    open_quietly(name, import_options(dirs, readonly)?)
}

/// The pool a dataset name belongs to (`tank/a/b` -> `tank`).
pub fn pool_of(dataset: &str) -> &str {
    dataset.split(['/', '@', '#']).next().unwrap_or(dataset)
}

/// Destroy `name` (unmounted, checked) and print each file system destroyed; for a clone, also
/// which way its blocks are freed (`destroy -v`): its livelist's live entries, or a walk of its
/// tree. Returns what was destroyed: the file systems, then the origins marked for deferred
/// destroy that went with their last clone.
pub fn destroy_reporting(
    pool: &Pool,
    name: &str,
    recursive: bool,
    dependents: bool,
) -> Result<Vec<String>, Failure> {
    let paths: Vec<(String, &'static str)> = pool
        .datasets()
        .into_iter()
        .filter(|info| info.origin.is_some())
        .filter_map(|info| {
            let path = pool.destroy_path(&info.name).ok()?;
            Some((info.name, path.name()))
        })
        .collect();
    let destroyed = pool.destroy_datasets(name, recursive, dependents)?;
    for name in &destroyed {
        match paths.iter().find(|(clone, _)| clone == name) {
            Some((_, path)) => out!("destroyed {name} (clone; destroy path: {path})"),
            None if name.contains('@') => {
                out!("destroyed {name} (deferred destroy: its last clone is destroyed)")
            }
            None => out!("destroyed {name}"),
        }
    }
    Ok(destroyed)
}
