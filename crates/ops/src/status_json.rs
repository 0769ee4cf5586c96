//! `pool status -j` in OpenZFS 2.3's schema (zpool's `status_callback_json`): one object per
//! pool, with `name`, `state`, `guid`, `txg`, `status`/`action`/`moreinfo` when something is
//! wrong, `scan_stats` once the pool was scanned, `raidz_expand_stats` once a RAID-Z vdev was
//! expanded, the vdev tree under `vdevs` (the root, named after the pool, holding the top-level
//! vdevs, each holding its children, all keyed by name), the log vdevs under `logs`, the cache
//! devices under `l2cache`, then `error_count` (and with `-v` the damaged files in `errlist`).
//!
//! A vdev carries `name`, `vdev_type` (`root`, `mirror`, `raidz`, `replacing`, `file`,
//! `disk`), `guid`, `path` (leaves), `class` (`normal`, `log`, `l2cache`, as zpool's), `state`
//! in zpool's JSON words (`HEALTHY`, `DEGRADED`, `FAULTED`, `OFFLINE`, `REMOVED`, `CANT_OPEN`),
//! the `read_errors`, `write_errors` and `checksum_errors` of leaves, and `aux` for why a leaf
//! cannot be used (`cannot open`, `invalid label`). What tarn knows beyond zpool is added in the
//! same shape: the pool's `reason` (a short name of the problem), `suspended` and `injections`,
//! a leaf's `missed_txgs` and `resilvering`, a scan's `paused`, `min_txg`, `max_txg`,
//! `copies_bad`, `unrepaired`, `rate_bytes_per_second` and `eta_seconds`, an expansion's
//! `width`, `copied`, `paused`, `rate_bytes_per_second` and `eta_seconds`.
//!
//! Numbers are strings as people read them, or exact integers with `-p` ([`tarn_protocol::json`]).

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use serde_json::{Map, Value};
use tarn::stats::LeafStatsSnapshot;
use tarn::status::{CacheDeviceHealth, Leaf, ScanState, VdevHealth};
use tarn::Pool;
use tarn_protocol::json;

/// A vdev's state as zpool's JSON names it (`vdev_state_str`), which is not the health word of
/// the text: `HEALTHY` for `ONLINE`, `CANT_OPEN` for `UNAVAIL`.
pub fn vdev_state(health: VdevHealth) -> &'static str {
    match health {
        VdevHealth::Online => "HEALTHY",
        VdevHealth::Degraded => "DEGRADED",
        VdevHealth::Offline => "OFFLINE",
        VdevHealth::Faulted => "FAULTED",
        VdevHealth::Removed => "REMOVED",
        VdevHealth::Unavail => "CANT_OPEN",
    }
}

/// A cache device's state in zpool's JSON words.
pub fn cache_state(health: CacheDeviceHealth) -> &'static str {
    match health {
        CacheDeviceHealth::Online => "HEALTHY",
        CacheDeviceHealth::Faulted => "FAULTED",
        CacheDeviceHealth::Unavail => "CANT_OPEN",
    }
}

/// `disk` for a block device, else `file`, as zpool's `vdev_type` of a leaf.
fn leaf_type(path: &Path) -> &'static str {
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.file_type().is_block_device() => "disk",
        _ => "file",
    }
}

/// What a leaf (a data, log or cache device) is in the JSON, beside its name.
pub struct LeafView<'a> {
    /// The name it is keyed by: its path, with `/old` for the old side of an in-place replace.
    pub name: String,
    pub path: &'a Path,
    pub guid: u64,
    pub class: &'a str,
    /// Its state in zpool's JSON words ([`vdev_state`], [`cache_state`]).
    pub state: &'static str,
    pub stats: LeafStatsSnapshot,
    /// Why it cannot be used (`cannot open`, `invalid label`), if it cannot.
    pub aux: Option<&'a str>,
}

/// A leaf's object; `leaf` adds tarn's `missed_txgs` and `resilvering` (cache devices have
/// neither).
pub fn leaf_object(view: LeafView, leaf: Option<(&Pool, &Leaf)>, exact: bool) -> Value {
    let mut object = Map::new();
    object.insert("name".into(), view.name.into());
    object.insert("vdev_type".into(), leaf_type(view.path).into());
    object.insert("guid".into(), json::number(view.guid, exact));
    object.insert("path".into(), view.path.display().to_string().into());
    object.insert("class".into(), view.class.into());
    object.insert("state".into(), view.state.into());
    let stats = view.stats;
    object.insert("read_errors".into(), json::number(stats.read_errors, exact));
    object.insert(
        "write_errors".into(),
        json::number(stats.write_errors, exact),
    );
    object.insert(
        "checksum_errors".into(),
        json::number(stats.checksum_errors, exact),
    );
    if let Some(aux) = view.aux {
        object.insert("aux".into(), aux.into());
    }
    if let Some((pool, leaf)) = leaf {
        let missed: Vec<Value> = leaf
            .dtl
            .ranges()
            .into_iter()
            .map(|(first, end)| {
                Value::Array(vec![json::number(first, exact), json::number(end, exact)])
            })
            .collect();
        let resilvering =
            !missed.is_empty() && leaf.is_usable() && crate::scan_report::resilvering(pool);
        object.insert("missed_txgs".into(), Value::Array(missed));
        object.insert("resilvering".into(), resilvering.into());
    }
    Value::Object(object)
}

/// An interior vdev (the root, `mirror-N`, `raidzP-N`, `replacing-N`): its name, type, guid if it has one,
/// class, state, and its children keyed by name.
pub fn interior_object(
    name: &str,
    vdev_type: &str,
    guid: Option<u64>,
    class: &str,
    health: VdevHealth,
    children: Map<String, Value>,
    exact: bool,
) -> Value {
    let mut object = Map::new();
    object.insert("name".into(), name.into());
    object.insert("vdev_type".into(), vdev_type.into());
    if let Some(guid) = guid {
        object.insert("guid".into(), json::number(guid, exact));
    }
    object.insert("class".into(), class.into());
    object.insert("state".into(), vdev_state(health).into());
    object.insert("vdevs".into(), Value::Object(children));
    Value::Object(object)
}

/// The pool's `scan_stats` (none for a pool never scanned): zpool's `function` (`SCRUB`,
/// `RESILVER`), `state` (`SCANNING`, `FINISHED`, `CANCELED`), `start_time`, `end_time`,
/// `to_examine`, `examined`, `issued`, `processed` (bytes repaired) and `errors`, then tarn's
/// own figures.
pub fn scan_stats(pool: &Pool, exact: bool) -> Option<Value> {
    let status = pool.scan_status()?;
    let phys = &status.phys;
    let state = match phys.state {
        ScanState::Scanning => "SCANNING",
        ScanState::Finished => "FINISHED",
        ScanState::Canceled => "CANCELED",
    };
    let mut object = Map::new();
    let mut put = |key: &str, value: Value| {
        object.insert(key.to_string(), value);
    };
    put("function", phys.function.as_str().to_uppercase().into());
    put("state", state.into());
    put("start_time", json::time(phys.start_time, exact));
    put("end_time", json::time(phys.end_time, exact));
    put("to_examine", json::bytes(phys.to_examine, exact));
    put("examined", json::bytes(phys.examined, exact));
    put("issued", json::bytes(phys.issued, exact));
    put("processed", json::bytes(phys.repaired, exact));
    put("errors", json::number(phys.errors, exact));
    put("paused", phys.paused.into());
    put("min_txg", json::number(phys.min_txg.0, exact));
    put("max_txg", json::number(phys.max_txg.0, exact));
    put("copies_bad", json::number(phys.copies_bad, exact));
    put("unrepaired", json::number(phys.unrepaired, exact));
    put(
        "rate_bytes_per_second",
        json::bytes(status.rate_bytes_per_second, exact),
    );
    if let Some(eta) = status.eta_seconds {
        put("eta_seconds", json::number(eta, exact));
    }
    Some(Value::Object(object))
}

/// The pool's `raidz_expand_stats` (none for a pool never expanded), as zpool's
/// `raidz_expand_status_nvlist`: the vdev's `name`, `vdev_type`, `guid` and `class`, `state`
/// (`SCANNING`, `FINISHED`), `expanding_vdev` (its id), `start_time`, `end_time` (0 while it
/// runs), `to_reflow` and `reflowed` (bytes of its address space), `waiting_for_resilver` (1
/// while the copy waits); then tarn's own: the new `width`, the bytes `copied`, why it is
/// `paused` (or null), and while it runs `rate_bytes_per_second` and `eta_seconds` (as the
/// `expand:` line computes them).
pub fn raidz_expand_stats(pool: &Pool, exact: bool) -> Option<Value> {
    let status = pool.raidz_expansion()?;
    let top = pool
        .top_vdevs()
        .iter()
        .find(|top| top.id == status.vdev_id)
        .cloned();
    let mut object = Map::new();
    let mut put = |key: &str, value: Value| {
        object.insert(key.to_string(), value);
    };
    put("name", status.vdev.clone().into());
    put("vdev_type", "raidz".into());
    if let Some(top) = &top {
        put("guid", json::number(top.guid.0, exact));
        put("class", top.class.as_str().into());
    }
    put(
        "state",
        if status.finished {
            "FINISHED"
        } else {
            "SCANNING"
        }
        .into(),
    );
    put(
        "expanding_vdev",
        json::number(u64::from(status.vdev_id.0), exact),
    );
    put("start_time", json::time(status.start_time, exact));
    put("end_time", json::time(status.end_time.unwrap_or(0), exact));
    put("to_reflow", json::bytes(status.total, exact));
    put("reflowed", json::bytes(status.reflowed, exact));
    put(
        "waiting_for_resilver",
        json::number(u64::from(status.paused.is_some()), exact),
    );
    put("width", json::number(status.width, exact));
    put("copied", json::bytes(status.copied, exact));
    put("paused", status.paused.clone().into());
    if !status.finished {
        let progress =
            crate::scan_report::expand_progress(&status, crate::scan_report::now_seconds());
        put(
            "rate_bytes_per_second",
            json::bytes(progress.rate_bytes_per_second, exact),
        );
        if let Some(eta) = progress.eta_seconds {
            put("eta_seconds", json::number(eta, exact));
        }
    }
    Some(Value::Object(object))
}
