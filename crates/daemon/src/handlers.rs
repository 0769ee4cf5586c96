//! The daemon's request dispatch: every request is first authorised (`authority`), then `ping`
//! and `stop` are answered here, every other request by its family (`pool`, `inspect`,
//! `datasets`, ...). Every line a handler prints is captured into the response.

use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tarn_protocol::Request;

use super::held::{lock, Answer, Daemon, Reply, STOP};
use super::history::Peer;
use super::{authority, datasets, devices, inject, inspect, pool, scan, snapshots, streams};

/// Answer `request` from `peer`; `reader` and `writer` are its connection, over which the
/// stream of a send or a receive travels (a refused one's stream is still ended or drained,
/// so that the connection stays in step).
pub(super) fn dispatch(
    daemon: &Arc<Daemon>,
    request: Request,
    peer: Option<Peer>,
    reader: &mut BufReader<UnixStream>,
    writer: &mut UnixStream,
) -> Result<Answer, Reply> {
    if let Err(refusal) = authority::authorise(daemon, &request, peer) {
        streams::skip_stream(&request, reader, writer);
        return Err(refusal.into());
    }
    match request {
        Request::Ping => Ok(Answer {
            status: 0,
            data: serde_json::json!({
                "pid": std::process::id(),
                "socket": daemon.socket.display().to_string(),
                "pools": lock(&daemon.state).pools.keys().cloned().collect::<Vec<_>>(),
                "version": tarn_protocol::BUILD_VERSION,
                "protocol": tarn_protocol::PROTOCOL_VERSION,
            }),
        }),
        Request::Stop => {
            STOP.store(true, Ordering::SeqCst);
            out!(
                "stopping tarn daemon {} on {}: exporting every pool",
                std::process::id(),
                daemon.socket.display()
            );
            Ok(Answer {
                status: 0,
                data: serde_json::json!({"pid": std::process::id()}),
            })
        }
        Request::Pool(request) => pool::handle(daemon, request),
        Request::Scan(request) => scan::handle(daemon, request),
        Request::Devices(request) => devices::handle(daemon, request),
        Request::Inspect(request) => inspect::handle(daemon, request),
        Request::Stat(request) => inspect::handle_stat(daemon, request),
        Request::Inject(args) => inject::handle(daemon, args),
        Request::Dataset(request) => datasets::handle(daemon, request),
        Request::Snapshot(request) => snapshots::handle(daemon, request),
        Request::Replication(request) => streams::handle(daemon, request, reader, writer),
    }
}
