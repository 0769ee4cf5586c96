//! The daemon side of `tarn check`, `tarn debug ...` and `tarn stat`: inspection of a pool this
//! daemon holds.

use std::fmt::Write as _;
use std::sync::Arc;

use tarn::types::ObjectId;
use tarn::{Holder, Pool};
use tarn_protocol::error::Failure;
use tarn_protocol::format::human_bytes;
use tarn_protocol::request::inspect::{
    CheckArgs, InspectRequest, LogsArgs, MetaslabsArgs, ObjectArgs, SpacemapArgs,
};
use tarn_protocol::request::stat::StatRequest;
use tarn_protocol::request::{PoolName, PoolOption};

use super::held::{Answer, Daemon, Reply};

/// An inspection request.
pub(super) fn handle(daemon: &Arc<Daemon>, request: InspectRequest) -> Result<Answer, Reply> {
    match request {
        InspectRequest::Check(CheckArgs {
            pool, no_repair, ..
        }) => {
            let held = daemon.held(&pool)?;
            let clean = tarn_ops::check(&held, &pool, !no_repair)?;
            Ok(Answer {
                status: if clean { 0 } else { 1 },
                data: serde_json::Value::Null,
            })
        }
        InspectRequest::Metaslabs(MetaslabsArgs {
            pool, json, level, ..
        }) => {
            let held = daemon.held(&pool)?;
            tarn_ops::debug_metaslabs(&held, &pool, json, level)?;
            Answer::done()
        }
        InspectRequest::Logs(LogsArgs { pool, json, .. }) => {
            let held = daemon.held(&pool)?;
            tarn_ops::debug_logs(&held, &pool, json)?;
            Answer::done()
        }
        InspectRequest::Map(args) => {
            let held = daemon.held(&args.pool)?;
            tarn_ops::debug_map(&held, &args.pool, &args.output())?;
            Answer::done()
        }
        InspectRequest::Spacemap(SpacemapArgs {
            pool,
            vdev,
            metaslab,
            ..
        }) => {
            let held = daemon.held(&pool)?;
            tarn_ops::debug_spacemap(&held, &pool, vdev, metaslab)?;
            Answer::done()
        }
        InspectRequest::Object(ObjectArgs { dataset, target }) => {
            let pool = daemon.pool_of_dataset(&dataset)?;
            out!("{}", debug_object(&pool, &dataset, &target)?.trim_end());
            Answer::done()
        }
    }
}

/// A request for the counters of `stat` or `pool iostat`.
pub(super) fn handle_stat(daemon: &Arc<Daemon>, request: StatRequest) -> Result<Answer, Reply> {
    match request {
        StatRequest::Txgs(PoolName { pool }) => {
            let held = daemon.held(&pool)?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "txgs": held.txg_history() }),
            })
        }
        StatRequest::Arc(PoolName { pool }) => {
            let held = daemon.held(&pool)?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "arc": held.arc_stats() }),
            })
        }
        StatRequest::Zil(PoolName { pool }) => {
            daemon.held(&pool)?;
            let fields: Vec<serde_json::Value> = zil_counters(daemon, &pool)
                .into_iter()
                .map(|(name, bytes, value)| serde_json::json!([name, bytes, value]))
                .collect();
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "zil": fields }),
            })
        }
        StatRequest::Iostat(PoolOption { pool }) => {
            let held: Vec<(String, Arc<tarn::Pool>)> = match pool {
                Some(name) => vec![(name.clone(), daemon.held(&name)?)],
                None => daemon
                    .pools()
                    .into_iter()
                    .map(|pool| (pool.name().to_string(), pool))
                    .collect(),
            };
            let pools: Vec<serde_json::Value> = held
                .iter()
                .map(|(name, pool)| serde_json::json!({"name": name, "iostat": pool.iostat()}))
                .collect();
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "pools": pools }),
            })
        }
    }
}

/// The object `target` names in `dataset`'s object set `objset` (a path from the root, or an
/// object number) and its dnode as of the last synced txg; an error if it does not exist
/// there. Shared by `tarn debug object` and `tarn inject -o`.
pub(super) fn synced_object(
    pool: &Pool,
    objset: &Arc<tarn::debug::ObjectSet>,
    dataset: &str,
    target: &str,
) -> Result<(u64, tarn::debug::DnodePhys), Failure> {
    let object = match target.parse::<u64>() {
        Ok(object) => object,
        Err(_) => {
            let fs = pool
                .read_only_file_system(objset.clone())
                .map_err(|error| Failure(format!("cannot open {dataset}: {error}")))?;
            let mut ino = fs.root();
            for name in target.split('/').filter(|name| !name.is_empty()) {
                ino = fs
                    .lookup(ino, name.as_bytes())
                    .map_err(|error| Failure(format!("{dataset}: {target}: {error}")))?
                    .ino;
            }
            ino
        }
    };
    let dnode = objset
        .synced_dnode(ObjectId(object))
        .map_err(|error| Failure(format!("{dataset}: object {object}: {error}")))?;
    if dnode.is_free() || object == 0 {
        return Err(Failure(format!(
            "{dataset}: object {object} does not exist in the last synced txg (try tarn pool sync)"
        )));
    }
    Ok((object, dnode))
}

/// `tarn debug object DATASET PATH|OBJECT`: the object's dnode, its spill block and every
/// block pointer of its tree with the first data block each covers, as `zdb -ddddd` prints
/// them, read from the last synced txg (the file system is opened read-only: nothing of the
/// mounted one is touched).
fn debug_object(pool: &Pool, dataset: &str, target: &str) -> Result<String, Failure> {
    // A snapshot is held while it is read, so that no destroy frees its blocks meanwhile.
    let hold = if dataset.contains('@') {
        Some(pool.long_hold(dataset, Holder::Debug)?)
    } else {
        None
    };
    let objset = match &hold {
        Some(hold) => pool.held_objset(hold)?,
        None => pool.dataset_objset(dataset)?,
    };
    let (object, dnode) = synced_object(pool, &objset, dataset, target)?;
    let failed = |error: tarn::ObjectError| Failure(format!("{dataset}: object {object}: {error}"));
    let mut text = String::new();
    let _ = writeln!(
        text,
        "Dataset {dataset}, object {object} ({target}), as of txg {}",
        pool.last_synced_txg()
    );
    let _ = writeln!(
        text,
        "{:>10} {:>4} {:>6} {:>6} {:>8} {:>8}  type",
        "Object", "lvl", "iblk", "dblk", "dsize", "lsize"
    );
    let _ = writeln!(
        text,
        "{:>10} {:>4} {:>6} {:>6} {:>8} {:>8}  {}",
        object,
        dnode.levels,
        human_bytes(1u64 << dnode.indirect_block_shift),
        human_bytes(dnode.data_block_size as u64),
        human_bytes(dnode.size_allocated),
        human_bytes((dnode.max_blkid + 1) * dnode.data_block_size as u64),
        dnode.object_type
    );
    for (label, value) in [
        (
            "bonus",
            format!("{} bytes ({})", dnode.bonus.len(), dnode.bonus_type),
        ),
        ("generation", dnode.generation.to_string()),
        ("max blkid", dnode.max_blkid.to_string()),
        ("checksum", dnode.checksum.to_string()),
        ("compression", dnode.compression.to_string()),
        ("copies", dnode.copies.to_string()),
        (
            "spill",
            dnode
                .spill
                .as_ref()
                .map_or_else(|| "none".to_string(), ToString::to_string),
        ),
    ] {
        let _ = writeln!(text, "\t{label:<12} {value}");
    }
    let _ = writeln!(text, "\tIndirect blocks:");
    pool.visit_object_blocks(&dnode, &mut |blkid, bp| {
        let offset = blkid.saturating_mul(dnode.data_block_size as u64);
        let _ = writeln!(text, "\t{offset:>14x}  L{} {bp}", bp.level);
        Ok(())
    })
    .map_err(failed)?;
    Ok(text)
}

/// The intent-log counters of `pool` as OpenZFS's zil kstat names them, summed over its
/// mounted file systems (each has its own log; an unmounted one has no counters).
pub(super) fn zil_counters(daemon: &Daemon, pool: &str) -> Vec<(&'static str, bool, u64)> {
    let mut counters = tarn::stats::ZilStats::default().kstat();
    for fs in daemon.mounts.file_systems_within(pool) {
        if let Some(zil) = fs.intent_log() {
            for (sum, (_, _, value)) in counters.iter_mut().zip(zil.stats.kstat()) {
                sum.2 += value;
            }
        }
    }
    counters
}
