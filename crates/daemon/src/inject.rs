//! The daemon side of `tarn inject`: faults injected into an imported pool's devices
//! (`tarn::vdev::inject`), by device, by the copies of one object's blocks, by percentage and
//! count. Injections live in the pool's injector and end at export.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tarn::inject::{DeviceRange, InjectedFault, InjectedIo, Injection, InjectionStatus};
use tarn::status::VDEV_LABEL_START_SIZE;
use tarn::Pool;
use tarn_protocol::error::Failure;
use tarn_protocol::request::inject::{InjectAction, InjectArgs, InjectSpec};

use super::held::{Answer, Daemon, Reply};

pub(super) fn handle(daemon: &Arc<Daemon>, args: InjectArgs) -> Result<Answer, Reply> {
    match args.action()? {
        InjectAction::Start { pool, spec } => {
            let held = daemon.held(&pool)?;
            let injection = injection_of(&held, &spec)?;
            let id = held.inject(injection.clone());
            out!(
                "added injection {id} in {}: {}",
                held.name(),
                describe(&injection)
            );
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "id": id }),
            })
        }
        InjectAction::Clear { pool, which } => {
            let id = match which.as_str() {
                "all" => None,
                number => Some(number.parse::<u64>().map_err(|_| {
                    Failure(format!("bad injection id {number:?}: a number or all"))
                })?),
            };
            let pools: Vec<Arc<Pool>> = match &pool {
                Some(pool) => vec![daemon.held(pool)?],
                None => daemon.pools(),
            };
            let having: Vec<&Arc<Pool>> = pools
                .iter()
                .filter(|pool| {
                    let list = pool.injections();
                    id.map_or(!list.is_empty(), |id| {
                        list.iter().any(|status| status.id == id)
                    })
                })
                .collect();
            if let (Some(id), true) = (id, having.len() > 1) {
                return Err(Failure(format!(
                    "injection {id} exists in several pools; name one: tarn inject -c {id} POOL"
                ))
                .into());
            }
            if let (Some(id), true) = (id, having.is_empty()) {
                return Err(Failure(format!("no injection {id}")).into());
            }
            for pool in having {
                let cleared = pool.clear_injections(id);
                out!("cleared {cleared} injection(s) in {}", pool.name());
            }
            Answer::done()
        }
        InjectAction::List { pool } => {
            let pools: Vec<Arc<Pool>> = match &pool {
                Some(pool) => vec![daemon.held(pool)?],
                None => daemon.pools(),
            };
            let mut rows = Vec::new();
            for pool in pools {
                for status in pool.injections() {
                    rows.push((pool.name().to_string(), status));
                }
            }
            if rows.is_empty() {
                out!("no injections");
            } else {
                out!(
                    "{:>3}  {:<12} {:<8} {:<6} {:>4} {:>8} {:>8}  TARGET",
                    "ID",
                    "POOL",
                    "FAULT",
                    "IO",
                    "FREQ",
                    "COUNT",
                    "HITS"
                );
                for (pool, status) in &rows {
                    out!("{}", row(pool, status));
                }
            }
            let data: Vec<serde_json::Value> = rows
                .iter()
                .map(|(pool, status)| {
                    serde_json::json!({
                        "id": status.id,
                        "pool": pool,
                        "fault": fault_name(status.injection.fault),
                        "io": io_name(status.injection.io),
                        "percent": status.injection.percent,
                        "count": status.injection.count,
                        "hits": status.hits,
                        "target": status.injection.target,
                    })
                })
                .collect();
            Ok(Answer {
                status: 0,
                data: serde_json::Value::Array(data),
            })
        }
    }
}

fn fault_name(fault: InjectedFault) -> &'static str {
    match fault {
        InjectedFault::Io => "io",
        InjectedFault::Corrupt => "corrupt",
        InjectedFault::Delay(_) => "delay",
        InjectedFault::Vanish => "vanish",
    }
}

fn io_name(io: InjectedIo) -> &'static str {
    match io {
        InjectedIo::Read => "read",
        InjectedIo::Write => "write",
        InjectedIo::Both => "all",
    }
}

fn describe(injection: &Injection) -> String {
    let count = injection.count.map_or_else(
        || "until cleared".to_string(),
        |count| format!("{count} I/Os"),
    );
    let io = match injection.io {
        InjectedIo::Read => "reads",
        InjectedIo::Write => "writes",
        InjectedIo::Both => "all I/O",
    };
    format!(
        "{} on {io} of {}, {}% of them, {count}",
        fault_name(injection.fault),
        injection.target,
        injection.percent
    )
}

fn row(pool: &str, status: &InjectionStatus) -> String {
    let injection = &status.injection;
    format!(
        "{:>3}  {:<12} {:<8} {:<6} {:>3}% {:>8} {:>8}  {}",
        status.id,
        pool,
        fault_name(injection.fault),
        io_name(injection.io),
        injection.percent,
        injection
            .count
            .map_or_else(|| "-".to_string(), |count| count.to_string()),
        status.hits,
        injection.target
    )
}

/// The engine's injection for `spec` on `pool`: names checked, the device and object resolved.
fn injection_of(pool: &Pool, spec: &InjectSpec) -> Result<Injection, Failure> {
    let fault = match spec.error.as_str() {
        "io" => InjectedFault::Io,
        "corrupt" => InjectedFault::Corrupt,
        "delay" => InjectedFault::Delay(Duration::from_millis(spec.delay_ms)),
        "vanish" => InjectedFault::Vanish,
        other => {
            return Err(Failure(format!(
                "bad fault {other:?}: io, corrupt, delay or vanish"
            )))
        }
    };
    let io = match spec.io.as_str() {
        "read" => InjectedIo::Read,
        "write" => InjectedIo::Write,
        "all" => InjectedIo::Both,
        other => {
            return Err(Failure(format!(
                "bad I/O type {other:?}: read, write or all"
            )))
        }
    };
    if !(1..=100).contains(&spec.percent) {
        return Err(Failure(format!(
            "bad frequency {}: a percentage from 1 to 100",
            spec.percent
        )));
    }
    if spec.count == Some(0) {
        return Err(Failure("bad count 0: at least one I/O".into()));
    }
    if fault == InjectedFault::Vanish && spec.object.is_some() {
        return Err(Failure(
            "a device vanishes whole: -e vanish takes a device, not an object".into(),
        ));
    }
    if spec.level.is_some() && spec.object.is_none() {
        return Err(Failure("-l LEVEL needs -o DATASET:OBJECT".into()));
    }
    let device = spec
        .device
        .as_deref()
        .map(|name| device_path(pool, name))
        .transpose()?;
    let (ranges, object_target) = match &spec.object {
        Some(object) => {
            let (ranges, target) = object_ranges(pool, object, spec.level)?;
            // With a device as well: only that device's copies.
            let ranges: Vec<DeviceRange> = ranges
                .into_iter()
                .filter(|(path, _)| device.as_ref().is_none_or(|device| device == path))
                .collect();
            if ranges.is_empty() {
                return Err(Failure(format!(
                    "{object} has no block copies{} to inject into (write it and tarn pool sync first)",
                    device.as_ref().map_or_else(String::new, |device| format!(" on {}", device.display()))
                )));
            }
            (ranges, Some(target))
        }
        None => (Vec::new(), None),
    };
    let target = match (&device, object_target) {
        (_, Some(target)) => target,
        (Some(device), None) => device.display().to_string(),
        (None, None) => "every device".to_string(),
    };
    Ok(Injection {
        device,
        ranges,
        fault,
        io,
        percent: spec.percent,
        count: spec.count,
        target,
    })
}

/// The path of `pool`'s leaf named `name` (its path, or the path's last component).
fn device_path(pool: &Pool, name: &str) -> Result<PathBuf, Failure> {
    let leaves: Vec<PathBuf> = pool
        .leaves()
        .map(|leaf| leaf.path.clone())
        .chain(
            pool.cache_devices()
                .iter()
                .map(|device| device.path.clone()),
        )
        .collect();
    let matching: Vec<&PathBuf> = leaves
        .iter()
        .filter(|path| {
            path.as_os_str() == name || path.file_name().is_some_and(|file| file == name)
        })
        .collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(Failure(format!(
            "pool {} has no device {name:?} (tarn pool status {} lists them)",
            pool.name(),
            pool.name()
        ))),
        _ => Err(Failure(format!(
            "{name:?} names several devices of pool {}: give the whole path",
            pool.name()
        ))),
    }
}

/// The device byte ranges of every copy of the blocks of `DATASET:PATH|OBJECT` (of `level`
/// only, if given), as of the last synced txg, and the target in words.
fn object_ranges(
    pool: &Pool,
    object: &str,
    level: Option<u8>,
) -> Result<(Vec<DeviceRange>, String), Failure> {
    let Some((dataset, target)) = object.split_once(':') else {
        return Err(Failure(format!(
            "bad object {object:?}: DATASET:PATH or DATASET:OBJECT (e.g. tank/fs:/dir/file)"
        )));
    };
    let objset = pool.dataset_objset(dataset)?;
    let (number, dnode) = super::inspect::synced_object(pool, &objset, dataset, target)?;
    let failed = |error: tarn::ObjectError| Failure(format!("{dataset}: object {number}: {error}"));
    let mut ranges = Vec::new();
    pool.visit_object_blocks(&dnode, &mut |_, bp| {
        if level.is_some_and(|level| bp.level != level) || bp.embedded {
            return Ok(());
        }
        for dva in bp.dvas.iter().filter(|dva| !dva.is_empty()) {
            let Some(paths) = pool.top_vdev_leaf_paths(dva.vdev) else {
                continue;
            };
            let start = VDEV_LABEL_START_SIZE + dva.offset;
            for path in paths {
                ranges.push((path, start..start + dva.size_allocated));
            }
        }
        Ok(())
    })
    .map_err(failed)?;
    let level_text = level.map_or_else(String::new, |level| format!(" level {level}"));
    Ok((ranges, format!("{dataset} object {number}{level_text}")))
}
