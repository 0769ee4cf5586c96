//! The daemon's scrub, resilver and device requests: `pool scrub [-s|-p]`, `pool resilver`, the
//! scan and RAID-Z expansion state that `pool wait -t scrub|resilver|raidz_expand` polls, and
//! `pool online|offline`.

use std::sync::Arc;

use tarn::status::ResilverRequest;
use tarn_protocol::error::Failure;
use tarn_protocol::request::scan::{DeviceStateArgs, ScanRequest, ScrubAction};
use tarn_protocol::request::PoolName;

use super::held::{Answer, Daemon, Reply};
use tarn_ops::scan_report;

pub(super) fn handle(daemon: &Arc<Daemon>, request: ScanRequest) -> Result<Answer, Reply> {
    match request {
        ScanRequest::Scrub(args) => {
            let action = args.action().map_err(Reply::Failed)?;
            let pool = args.pool;
            let held = daemon.held(&pool)?;
            let result = match action {
                ScrubAction::Start => held.scrub(),
                ScrubAction::Stop => held.cancel_scrub(),
                ScrubAction::Pause => held.pause_scrub(),
            };
            result
                .map_err(|error| Reply::Failed(Failure(format!("cannot scrub {pool}: {error}"))))?;
            // The request takes effect in the next txg: wait for it, so that `pool status`
            // right after shows the scan.
            held.sync()?;
            Answer::done()
        }
        ScanRequest::Resilver(PoolName { pool }) => {
            let held = daemon.held(&pool)?;
            let outcome = held.resilver().map_err(|error| {
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
        ScanRequest::Status(PoolName { pool }) => {
            let held = daemon.held(&pool)?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({
                    "scan": scan_report::scan_json(&held),
                    "expand": scan_report::expand_json(&held),
                }),
            })
        }
        ScanRequest::Online(args) => set_device_state(daemon, args, true),
        ScanRequest::Offline(args) => set_device_state(daemon, args, false),
    }
}

/// `pool online` (`online` true) or `pool offline`, of each device in turn.
fn set_device_state(
    daemon: &Arc<Daemon>,
    DeviceStateArgs { pool, devices }: DeviceStateArgs,
    online: bool,
) -> Result<Answer, Reply> {
    let held = daemon.held(&pool)?;
    let action = if online { "online" } else { "offline" };
    for device in &devices {
        let result = if online {
            held.online(device)
        } else {
            held.offline(device)
        };
        result.map_err(|error| {
            Reply::Failed(Failure(format!("cannot {action} {device}: {error}")))
        })?;
        log::info!("pool {pool}: {device} is {action}");
    }
    Answer::done()
}
