//! The daemon side of `tarn send`, `tarn receive` and `tarn receive -A`: the stream travels over
//! the request's connection as frames (`tarn_protocol::frames`), written before the response
//! (send) or read after the request (receive).
//!
//! A receive into a mounted file system leaves it mounted: the changes arrive as ordinary
//! transactions, and at the end the kernel is told to drop what it cached of the file system
//! (as after a rollback), and `.zfs/snapshot` learns the new snapshots. A full receive mounts
//! the new file system unless `-u`.

use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use tarn::{ReceiveOptions, SendOptions};
use tarn_protocol::error::Failure;
use tarn_protocol::format::human_bytes;
use tarn_protocol::frames::{FrameReader, FrameWriter};
use tarn_protocol::request::replication::{ReceiveArgs, ReplicationRequest, SendArgs};

use super::held::{lock, Answer, Daemon, Reply};
use super::snapshots::filesystem_of;

pub(super) fn handle(
    daemon: &Arc<Daemon>,
    request: ReplicationRequest,
    reader: &mut BufReader<UnixStream>,
    writer: &mut UnixStream,
) -> Result<Answer, Reply> {
    match request {
        ReplicationRequest::Send(args) => {
            let (from, intermediates) = args.source();
            let SendArgs {
                properties,
                verbose,
                parsable,
                dry_run,
                compressed,
                recursive,
                resume_token,
                ..
            } = args;
            let snapshot = args.snapshot.unwrap_or_default();
            let mut frames = FrameWriter::new(&mut *writer);
            let sent = stream_pool(daemon, &snapshot, resume_token.as_deref()).and_then(|pool| {
                let (snapshot, options) = match &resume_token {
                    // The token says what the stream is; -n still only estimates it.
                    Some(token) => tarn::resume_send_options(&pool, token)
                        .map(|(snapshot, options)| (snapshot, SendOptions { dry_run, ..options }))
                        .map_err(|error| Failure(format!("cannot resume the send: {error}")))?,
                    None => (
                        snapshot.clone(),
                        SendOptions {
                            from,
                            intermediates,
                            properties,
                            dry_run,
                            compressed,
                            recursive,
                            resume_at: None,
                            whole_payload_chain: false,
                        },
                    ),
                };
                tarn::send(&pool, &snapshot, &options, &mut frames, &mut |_| {})
                    .map_err(|error| Failure(format!("cannot send {snapshot}: {error}")).into())
            });
            // The end frame goes out whatever happened, so that the client reads the response.
            let finished = frames
                .finish()
                .map_err(|error| Failure(format!("cannot send {snapshot}: {error}")));
            let report = sent?;
            finished?;
            // What was sent, with -P (zfs send -P's lines) or -v (zfs send -v's): on stdout
            // for a dry run, else on stderr (stdout carries the stream). The sizes of a dry run
            // are estimates; of a real send, the stream's bytes (the lines follow the stream).
            let say = |line: String| {
                if dry_run {
                    out!("{line}");
                } else {
                    err!("{line}");
                }
            };
            if parsable {
                for sent in &report.substreams {
                    say(if sent.from.is_empty() {
                        format!("full\t{}\t{}", sent.to, sent.bytes)
                    } else {
                        format!("incremental\t{}\t{}\t{}", sent.from, sent.to, sent.bytes)
                    });
                }
                say(format!("size\t{}", report.bytes));
            } else if verbose {
                let estimated = if dry_run { "estimated " } else { "" };
                for sent in &report.substreams {
                    let size = human_bytes(sent.bytes);
                    say(if sent.from.is_empty() {
                        format!("full send of {} {estimated}size is {size}", sent.to)
                    } else {
                        format!(
                            "send from {} to {} {estimated}size is {size}",
                            sent.from, sent.to
                        )
                    });
                }
                say(format!(
                    "total {estimated}size is {}",
                    human_bytes(report.bytes)
                ));
            }
            Ok(Answer {
                status: 0,
                data: serde_json::json!({
                    "bytes": report.bytes,
                    "records": report.records,
                    "blocks": report.blocks,
                }),
            })
        }
        ReplicationRequest::Receive(args) => {
            let set = args.settings()?;
            let ReceiveArgs {
                target,
                force,
                no_mount,
                verbose,
                exclude,
                resumable,
                ..
            } = args;
            let mut frames = FrameReader::new(&mut *reader);
            let options = ReceiveOptions {
                force,
                set,
                exclude,
                resumable,
                ..ReceiveOptions::default()
            };
            let received = receive(daemon, &target, &options, no_mount, &mut frames);
            // The client sends the whole stream before it reads the response: take the rest.
            if !frames.ended() {
                let _ = frames.drain();
            }
            let report = received?;
            if verbose {
                for snapshot in &report.snapshots {
                    out!("received {snapshot}");
                }
                out!(
                    "received {} stream in {} records ({} blocks, {} write transactions)",
                    human_bytes(report.bytes),
                    report.records,
                    report.blocks,
                    report.write_transactions
                );
            }
            Ok(Answer {
                status: 0,
                data: serde_json::json!({
                    "snapshots": report.snapshots,
                    "bytes": report.bytes,
                    "records": report.records,
                    "blocks": report.blocks,
                    "write_transactions": report.write_transactions,
                }),
            })
        }
        ReplicationRequest::ReceiveAbort(ReceiveArgs { target, .. }) => {
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&target)?;
            let destroyed = tarn::abort_receive(&pool, &target).map_err(|error| {
                Failure(format!("cannot abort the receive into {target}: {error}"))
            })?;
            out!("destroyed {destroyed}, the partial receive into {target}");
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "destroyed": destroyed }),
            })
        }
    }
}

/// The pool a send reads: the snapshot's, or for `send -t` the one the token names.
fn stream_pool(
    daemon: &Arc<Daemon>,
    snapshot: &str,
    resume_token: Option<&str>,
) -> Result<Arc<tarn::Pool>, Reply> {
    match resume_token {
        None => Ok(daemon.pool_of_dataset(snapshot)?),
        Some(token) => {
            let token = tarn::ResumeToken::decode(token)
                .map_err(|error| Failure(format!("cannot resume the send: {error}")))?;
            Ok(daemon.pool_of_dataset(&token.stream.to_name)?)
        }
    }
}

fn receive(
    daemon: &Arc<Daemon>,
    target: &str,
    options: &ReceiveOptions,
    no_mount: bool,
    frames: &mut FrameReader<&mut BufReader<UnixStream>>,
) -> Result<tarn::ReceiveReport, Reply> {
    let _guard = lock(&daemon.lifecycle);
    let pool = daemon.pool_of_dataset(target)?;
    let file_system = filesystem_of(target);
    daemon.mounts.write_back(file_system);
    let result = tarn::receive(&pool, target, frames, options);
    // Whatever happened (a rollback undoes a failed incremental receive), a mount of the
    // target or below it (`send -R`) must not show what it cached before.
    for (mounted, _) in daemon.mounts.list() {
        if mounted == file_system || mounted.starts_with(&format!("{file_system}/")) {
            daemon.mounts.after_rollback(&mounted);
            daemon.mounts.snapshots_changed(&mounted);
        }
    }
    let report =
        result.map_err(|error| Failure(format!("cannot receive into {target}: {error}")))?;
    if !no_mount {
        // New file systems of the tree; those mounted already are left as they are.
        for (name, failure) in daemon.mounts.mount_all(&pool, Some(file_system)) {
            log::warn!("received {name} but cannot mount it: {}", failure.0);
        }
    }
    Ok(report)
}

/// Keep the connection in step for a request refused before it ran: a send's client waits for
/// the end of its stream, a receive's has sent its stream, which is read and dropped.
pub(super) fn skip_stream(
    request: &tarn_protocol::Request,
    reader: &mut BufReader<UnixStream>,
    writer: &mut UnixStream,
) {
    match request {
        tarn_protocol::Request::Replication(ReplicationRequest::Send(_)) => {
            let _ = FrameWriter::new(&mut *writer).finish();
        }
        tarn_protocol::Request::Replication(ReplicationRequest::Receive(_)) => {
            let _ = FrameReader::new(&mut *reader).drain();
        }
        _ => {}
    }
}
