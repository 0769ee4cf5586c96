//! `tarn send` and `tarn receive`: the CLI copies the stream between its stdout or stdin and
//! the daemon's socket (as frames, `tarn_protocol::frames`), showing progress on a terminal, and
//! prints the daemon's answer. A stream is never written to or read from a terminal.

use std::io::{BufReader, IsTerminal, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use tarn_protocol::client;
use tarn_protocol::error::{Failure, Status};
use tarn_protocol::format::human_bytes;
use tarn_protocol::frames::{FrameReader, FrameWriter};
use tarn_protocol::request::replication::{ReceiveArgs, ReplicationRequest, SendArgs};
use tarn_protocol::Request;

use super::dataset::check_name;
use super::forward;

/// `tarn send [-R] [-i|-I SNAP] [-c] [-p] [-n] [-v] [-P] FS@SNAP`, or `tarn send [-v] [-P] -t TOKEN`.
pub fn send(socket: &Path, args: SendArgs) -> Result<Status, Failure> {
    if args.resume_token.is_none() {
        check_name(args.snapshot())?;
    }
    if args.resume_token.is_none() && !args.snapshot().contains('@') {
        return Err(Failure(format!(
            "cannot send {:?}: name a snapshot, FS@SNAP",
            args.snapshot()
        )));
    }
    if !args.dry_run && std::io::stdout().is_terminal() {
        return Err(Failure(
            "refusing to write a stream to a terminal: redirect it to a file or a pipe".into(),
        ));
    }
    let stream = client::connect_for_stream(socket)?;
    let mut writer = stream
        .try_clone()
        .map_err(|error| Failure(format!("socket: {error}")))?;
    client::write_request(
        &mut writer,
        &Request::Replication(ReplicationRequest::Send(args.clone())),
    )
    .map_err(|error| Failure(format!("cannot ask the daemon: {error}")))?;
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut frames = FrameReader::new(&mut reader);
    let mut stdout = std::io::stdout().lock();
    let copied = copy_with_progress(&mut frames, &mut stdout, "sent", args.verbose);
    let copied = copied.and_then(|bytes| stdout.flush().map(|()| bytes));
    copied.map_err(|error| Failure(format!("cannot write the stream: {error}")))?;
    let response = client::read_response(&mut reader)
        .map_err(|why| Failure(format!("the daemon did not answer the send: {why}")))?;
    // The daemon says what it sent (-v, -P).
    Ok(forward(response))
}

/// `tarn receive -A FS`: abandon the partial receive into FS.
fn abort_receive(socket: &Path, args: ReceiveArgs) -> Result<Status, Failure> {
    let dataset = args.target.clone();
    Ok(forward(super::dataset::ask(
        socket,
        Some(&dataset),
        &Request::Replication(ReplicationRequest::ReceiveAbort(args)),
    )?))
}

/// `tarn receive [-F] [-u] [-v] [-o prop=val] [-x prop] FS[@SNAP]`, or with `-A`,
/// [`abort_receive`].
pub fn receive(socket: &Path, args: ReceiveArgs) -> Result<Status, Failure> {
    check_name(&args.target)?;
    if args.abort {
        return abort_receive(socket, args);
    }
    // Settings are checked before the daemon is asked (and parsed again there).
    args.settings()?;
    let verbose = args.verbose;
    if std::io::stdin().is_terminal() {
        return Err(Failure(
            "refusing to read a stream from a terminal: redirect one from a file or a pipe".into(),
        ));
    }
    let stream = client::connect_for_stream(socket)?;
    let mut writer = stream
        .try_clone()
        .map_err(|error| Failure(format!("socket: {error}")))?;
    client::write_request(
        &mut writer,
        &Request::Replication(ReplicationRequest::Receive(args)),
    )
    .map_err(|error| Failure(format!("cannot ask the daemon: {error}")))?;
    let mut frames = FrameWriter::new(std::io::BufWriter::with_capacity(1 << 20, writer));
    let mut stdin = std::io::stdin().lock();
    // A failure to read stdin still ends the frames: the daemon then finds the stream cut
    // short and undoes the receive.
    let copied = copy_with_progress(&mut stdin, &mut frames, "received", verbose);
    frames
        .finish()
        .map_err(|error| Failure(format!("cannot pass the stream to the daemon: {error}")))?;
    copied.map_err(|error| Failure(format!("cannot read the stream: {error}")))?;
    let response = client::read_response(&mut BufReader::new(stream))
        .map_err(|why| Failure(format!("the daemon did not answer the receive: {why}")))?;
    Ok(forward(response))
}

/// Copy `input` to `output`, showing bytes and rate on stderr every half second when it is a
/// terminal and `verbose`; returns the bytes copied.
fn copy_with_progress(
    input: &mut dyn Read,
    output: &mut dyn Write,
    verb: &str,
    verbose: bool,
) -> std::io::Result<u64> {
    let show = verbose && std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut shown_at = started;
    let mut buffer = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let read = match input.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        output.write_all(&buffer[..read])?;
        total += read as u64;
        if show && shown_at.elapsed() >= Duration::from_millis(500) {
            shown_at = Instant::now();
            let rate = total as f64 / started.elapsed().as_secs_f64().max(1e-3);
            eprint!(
                "\r{verb} {:>8}  {:>8}/s ",
                human_bytes(total),
                human_bytes(rate as u64)
            );
        }
    }
    if show && shown_at != started {
        eprintln!();
    }
    Ok(total)
}
