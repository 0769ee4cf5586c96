//! The daemon side of `tarn check`, `tarn debug ...` and `tarn stat`: inspection of a pool this
//! daemon holds.

use std::sync::Arc;

use super::held::{Answer, Daemon, Reply};
use crate::error::Failure;
use crate::ops;
use crate::protocol::Request;

/// An inspection request.
pub(super) fn handle(daemon: &Arc<Daemon>, request: Request) -> Result<Answer, Reply> {
    match request {
        Request::Check { pool, repair } => {
            let held = daemon.held(&pool)?;
            let clean = ops::check(&held, &pool, repair)?;
            Ok(Answer {
                status: if clean { 0 } else { 1 },
                data: serde_json::Value::Null,
            })
        }
        Request::DebugMetaslabs { pool, json, level } => {
            let held = daemon.held(&pool)?;
            ops::debug_metaslabs(&held, &pool, json, level)?;
            Answer::done()
        }
        Request::DebugLogs { pool, json } => {
            let held = daemon.held(&pool)?;
            ops::debug_logs(&held, &pool, json)?;
            Answer::done()
        }
        Request::StatTxgs { pool } => {
            let held = daemon.held(&pool)?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "txgs": held.txg_history() }),
            })
        }
        Request::StatArc { pool } => {
            let held = daemon.held(&pool)?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "arc": held.arc_stats() }),
            })
        }
        Request::PoolIostat { pool } => {
            let held: Vec<(String, Arc<tarn::pool::Pool>)> = match pool {
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
        Request::DebugMap { pool, output } => {
            let held = daemon.held(&pool)?;
            ops::debug_map(&held, &pool, &output)?;
            Answer::done()
        }
        Request::DebugSpacemap {
            pool,
            vdev,
            metaslab,
        } => {
            let held = daemon.held(&pool)?;
            ops::debug_spacemap(&held, &pool, vdev, metaslab)?;
            Answer::done()
        }
        other => Err(Reply::Failed(Failure(format!(
            "internal error: {} is not a inspection request",
            other.verb()
        )))),
    }
}
