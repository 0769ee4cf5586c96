//! The daemon's scrub, resilver and device requests: `pool scrub [-s|-p]`, `pool resilver`, the
//! scan state that `pool wait -t scrub|resilver` polls, and `pool online|offline`.

use std::sync::Arc;

use tarn::pool::scan::ResilverRequest;
use tarn_protocol::error::Failure;
use tarn_protocol::Request;

use super::held::{Answer, Daemon, Reply};
use tarn_ops::scan_report;

pub(super) fn handle(daemon: &Arc<Daemon>, request: Request) -> Result<Answer, Reply> {
    match request {
        Request::PoolScrub { pool, action } => {
            let held = daemon.held(&pool)?;
            let result = match action.as_str() {
                "start" => held.core.request_scrub(),
                "stop" => held.core.request_scan_cancel(),
                "pause" => held.core.request_scan_pause(),
                other => {
                    return Err(Reply::Failed(Failure(format!(
                        "internal error: unknown scrub action {other:?}"
                    ))))
                }
            };
            result
                .map_err(|error| Reply::Failed(Failure(format!("cannot scrub {pool}: {error}"))))?;
            // The request takes effect in the next txg: wait for it, so that `pool status`
            // right after shows the scan.
            held.sync()?;
            Answer::done()
        }
        Request::PoolResilver { pool } => {
            let held = daemon.held(&pool)?;
            let outcome = held.core.request_resilver().map_err(|error| {
                Reply::Failed(Failure(format!("cannot resilver {pool}: {error}")))
            })?;
            let outcome = match outcome {
                ResilverRequest::NotNeeded => "not needed",
                ResilverRequest::Started => "started",
                ResilverRequest::Restarted => "restarted",
                ResilverRequest::ReplacesScrub => "replaces scrub",
            };
            // As for a scrub: `pool status` right after shows the resilver.
            held.sync()?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "outcome": outcome }),
            })
        }
        Request::PoolScanStatus { pool } => {
            let held = daemon.held(&pool)?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "scan": scan_report::scan_json(&held) }),
            })
        }
        Request::PoolDevice {
            pool,
            action,
            devices,
        } => {
            let held = daemon.held(&pool)?;
            for device in &devices {
                let result = match action.as_str() {
                    "online" => held.online(device),
                    "offline" => held.offline(device),
                    other => {
                        return Err(Reply::Failed(Failure(format!(
                            "internal error: unknown device action {other:?}"
                        ))))
                    }
                };
                result.map_err(|error| {
                    Reply::Failed(Failure(format!("cannot {action} {device}: {error}")))
                })?;
                log::info!("pool {pool}: {device} is {action}");
            }
            Answer::done()
        }
        other => Err(Reply::Failed(Failure(format!(
            "internal error: {} is not a scan request",
            other.verb()
        )))),
    }
}
