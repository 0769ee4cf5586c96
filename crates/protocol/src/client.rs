//! The CLI's side of the daemon: finding its socket, asking it, and starting it on first need.
//!
//! Starting: the CLI runs `tarn daemon --foreground --socket PATH` in a new session (setsid),
//! stdin from /dev/null, stdout and stderr appended to `PATH.log`, working directory `/`, with
//! the CLI's environment (so its `TARN_TUNABLE_*` variables become the daemon's tunables). It
//! returns once the daemon answers a `ping` on the socket, so the daemon is ready before the
//! command that started it goes on. If two commands start a daemon at once, the second daemon
//! finds the socket's lock taken and exits, and both commands talk to the first.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tarn::stats::PoolIostat;

use crate::error::Failure;
use crate::request::stat::StatRequest;
use crate::request::PoolOption;
use crate::{absolute, log_path, Request, Response, MAX_LINE_BYTES};

/// The socket when neither `--socket` nor `TARN_SOCKET` names one.
pub const DEFAULT_SOCKET: &str = "/run/tarn/tarn.sock";
/// How long a starting command waits for its daemon to answer.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// `--socket`, else `$TARN_SOCKET`, else the default; always absolute.
pub fn socket_path(flag: Option<&Path>) -> PathBuf {
    let chosen = match flag {
        Some(path) => path.to_path_buf(),
        None => match std::env::var_os("TARN_SOCKET") {
            Some(value) if !value.is_empty() => PathBuf::from(value),
            _ => PathBuf::from(DEFAULT_SOCKET),
        },
    };
    absolute(&chosen)
}

/// Why a request got no response.
enum Unanswered {
    /// Nobody listens on the socket.
    NoDaemon,
    /// The daemon took the connection but closed it without answering (it was exiting, or died).
    NoAnswer(String),
    /// A daemon of another protocol version answered (the message says what to restart).
    OtherBuild(String),
    /// The daemon answered, but the answer could not be read (too long, not JSON, cut short).
    /// It may have acted on the request, so the request is not made again.
    Unreadable(String),
}

fn ask_once(socket: &Path, request: &Request) -> Result<Response, Unanswered> {
    let stream = UnixStream::connect(socket).map_err(|_| Unanswered::NoDaemon)?;
    let mut writer = stream
        .try_clone()
        .map_err(|error| Unanswered::NoAnswer(error.to_string()))?;
    write_request(&mut writer, request).map_err(|error| Unanswered::NoAnswer(error.to_string()))?;
    let response = read_response_of_any_build(&mut BufReader::new(stream)).map_err(|error| {
        if error == CONNECTION_CLOSED {
            Unanswered::NoAnswer(error)
        } else {
            Unanswered::Unreadable(error)
        }
    })?;
    if response.retry {
        return Err(Unanswered::NoAnswer("the daemon is stopping".into()));
    }
    // A ping or a stop is answered by any build: whether a daemon runs, its pid, its end.
    if !request.of_any_build() {
        if let Some(why) = crate::response_mismatch(&response) {
            return Err(Unanswered::OtherBuild(why));
        }
    }
    Ok(response)
}

/// Write `request` as one line.
pub fn write_request(writer: &mut impl Write, request: &Request) -> std::io::Result<()> {
    let mut line = crate::encode_request(request);
    line.push(b'\n');
    writer.write_all(&line)?;
    writer.flush()
}

/// Read one response line from a daemon of this build's protocol version.
pub fn read_response(reader: &mut impl BufRead) -> Result<Response, String> {
    let response = read_response_of_any_build(reader)?;
    match crate::response_mismatch(&response) {
        Some(why) => Err(why),
        None => Ok(response),
    }
}

/// Read one response, in one line or several ([`crate::response_lines`]), whatever the
/// protocol version of the daemon that wrote it.
fn read_response_of_any_build(reader: &mut impl BufRead) -> Result<Response, String> {
    let (mut response, _) = read_response_line(reader)?;
    let mut total = 0u64;
    while response.more {
        let (next, line_bytes) = read_response_line(reader).map_err(|error| {
            if error == CONNECTION_CLOSED {
                "the daemon closed the connection in the middle of its answer".to_string()
            } else {
                error
            }
        })?;
        total += line_bytes as u64;
        if total > crate::MAX_RESPONSE_BYTES {
            return Err(format!(
                "the response passes {} MiB",
                crate::MAX_RESPONSE_BYTES >> 20
            ));
        }
        response.continue_with(next)?;
    }
    Ok(response)
}

/// Why a read found no response at all: the daemon closed or reset the connection before
/// writing a byte (it was exiting and had not acted on the request, which may be made again).
const CONNECTION_CLOSED: &str = "connection closed";

/// Read one response line; the response and the line's length in bytes.
fn read_response_line(reader: &mut impl BufRead) -> Result<(Response, usize), String> {
    let mut answer = Vec::new();
    let read = reader
        .take(MAX_LINE_BYTES + 1)
        .read_until(b'\n', &mut answer);
    // A daemon that exits with our request unread resets the connection (ECONNRESET) rather
    // than closing it: with no byte of an answer, either is the same "closed without
    // answering".
    if answer.is_empty() {
        return Err(CONNECTION_CLOSED.into());
    }
    read.map_err(|error| error.to_string())?;
    if answer.len() as u64 > MAX_LINE_BYTES {
        return Err(format!(
            "a response line passes {} MiB",
            MAX_LINE_BYTES >> 20
        ));
    }
    let response =
        serde_json::from_slice(&answer).map_err(|error| format!("unreadable response: {error}"))?;
    Ok((response, answer.len()))
}

/// A connection to the running daemon for a request that carries a stream (`send`,
/// `receive`): no daemon is started, since one that was not running holds no pool.
pub fn connect_for_stream(socket: &Path) -> Result<UnixStream, Failure> {
    UnixStream::connect(socket).map_err(|_| {
        Failure(format!(
            "no tarn daemon runs on {}: import the pool first (tarn pool import)",
            socket.display()
        ))
    })
}

/// How long a command waits for a stopping daemon to go before it gives up.
const STOPPING_TIMEOUT: Duration = Duration::from_secs(60);

/// Ask the daemon if one is running; `None` when none is. A daemon that is stopping (it had
/// no pools left, or was told to stop) has not acted on the request: wait for it to go.
pub fn ask_if_running(socket: &Path, request: &Request) -> Result<Option<Response>, Failure> {
    ask_if_running_within(socket, request, STOPPING_TIMEOUT)
}

/// [`ask_if_running`], waiting at most `patience` for a stopping daemon.
fn ask_if_running_within(
    socket: &Path,
    request: &Request,
    patience: Duration,
) -> Result<Option<Response>, Failure> {
    let started = Instant::now();
    loop {
        match ask_once(socket, request) {
            Ok(response) => return Ok(Some(response)),
            Err(Unanswered::NoDaemon) => return Ok(None),
            Err(Unanswered::OtherBuild(why)) => return Err(Failure(why)),
            Err(Unanswered::Unreadable(why)) => return Err(no_answer(socket, &why)),
            Err(Unanswered::NoAnswer(why)) => {
                if started.elapsed() > patience {
                    return Err(no_answer(socket, &why));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn no_answer(socket: &Path, why: &str) -> Failure {
    Failure(format!(
        "the tarn daemon on {} did not answer ({why}); see {}",
        socket.display(),
        log_path(socket).display()
    ))
}

/// Ask the daemon, starting it first if none is running (or the one running is stopping).
pub fn ask_starting(socket: &Path, request: &Request) -> Result<Response, Failure> {
    let started = Instant::now();
    let mut starts = 0;
    loop {
        match ask_once(socket, request) {
            Ok(response) => return Ok(response),
            Err(Unanswered::NoDaemon) => {
                starts += 1;
                if starts > 3 {
                    return Err(no_answer(socket, "it went away after starting"));
                }
                start_daemon(socket)?;
            }
            Err(Unanswered::OtherBuild(why)) => return Err(Failure(why)),
            Err(Unanswered::Unreadable(why)) => return Err(no_answer(socket, &why)),
            Err(Unanswered::NoAnswer(why)) => {
                if started.elapsed() > STOPPING_TIMEOUT {
                    return Err(no_answer(socket, &why));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The pid of the daemon on `socket`, if one answers.
pub fn ping(socket: &Path) -> Option<u32> {
    let response = ask_once(socket, &Request::Ping).ok()?;
    response.data["pid"].as_u64().map(|pid| pid as u32)
}

/// Start a detached daemon on `socket` and wait until it answers; returns its pid. Fails if it
/// does not come up, quoting the end of its log.
pub fn start_daemon(socket: &Path) -> Result<u32, Failure> {
    start_daemon_logging(socket, None, None, None)
}

/// `start_daemon`, the daemon logging at `log_level` (`tarn daemon --log-level`) instead of
/// `$RUST_LOG`'s level.
pub fn start_daemon_logging(
    socket: &Path,
    log_level: Option<&str>,
    metrics: Option<std::net::SocketAddr>,
    fuse_transport: Option<&str>,
) -> Result<u32, Failure> {
    if let Some(parent) = socket.parent() {
        std::fs::create_dir_all(parent).map_err(|error| {
            Failure(format!(
                "cannot create {} for the daemon's socket: {error}; name another socket with --socket or TARN_SOCKET",
                parent.display()
            ))
        })?;
    }
    let log = log_path(socket);
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|error| Failure(format!("cannot open {}: {error}", log.display())))?;
    let log_size_before = log_file.metadata().map(|m| m.len()).unwrap_or(0);
    let log_copy = log_file
        .try_clone()
        .map_err(|error| Failure(format!("{}: {error}", log.display())))?;
    let executable = std::env::current_exe()
        .map_err(|error| Failure(format!("cannot find the tarn executable: {error}")))?;
    let mut command = Command::new(executable);
    command
        .arg("daemon")
        .arg("--foreground")
        .arg("--socket")
        .arg(socket)
        .args(
            fuse_transport
                .map(|transport| ["--fuse-transport", transport])
                .into_iter()
                .flatten(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::from(log_copy))
        .stderr(Stdio::from(log_file))
        .current_dir("/");
    // A daemon the CLI starts for itself is not a service, even when this command runs inside
    // one: the service manager's variables are not passed on (the daemon's `service` module).
    for variable in [
        "NOTIFY_SOCKET",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
    ] {
        command.env_remove(variable);
    }
    if let Some(level) = log_level {
        command.arg("--log-level").arg(level);
    }
    if let Some(addr) = metrics {
        command.arg("--metrics").arg(addr.to_string());
    }
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|error| Failure(format!("cannot start the tarn daemon: {error}")))?;
    let started = Instant::now();
    let mut exited_at = None;
    loop {
        // Ours or a concurrent starter's: either way it serves this socket. If ours lost the
        // race it exits by itself.
        if let Some(pid) = ping(socket) {
            return Ok(pid);
        }
        if exited_at.is_none() {
            if let Ok(Some(_status)) = child.try_wait() {
                exited_at = Some(Instant::now());
            }
        }
        let gave_up = match exited_at {
            // The child exited: maybe it lost a race to a daemon that is coming up; wait a bit.
            Some(at) => at.elapsed() > Duration::from_secs(2),
            None => started.elapsed() > START_TIMEOUT,
        };
        if gave_up {
            return Err(Failure(format!(
                "the tarn daemon did not start on {}{}",
                socket.display(),
                log_tail(&log, log_size_before)
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the daemon wrote to its log since `offset`, for an error message.
fn log_tail(log: &Path, offset: u64) -> String {
    let text = std::fs::read(log)
        .map(|bytes| {
            String::from_utf8_lossy(&bytes[(offset as usize).min(bytes.len())..]).into_owned()
        })
        .unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join("\n");
    if tail.is_empty() {
        format!(" (see {})", log.display())
    } else {
        format!(":\n{tail}\n(from {})", log.display())
    }
}

/// Whether process `pid` still exists (a zombie counts as gone: it holds no locks or files).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // "pid (comm) S ...": the state follows the last ')'.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("");
            !matches!(state, "Z" | "X" | "x")
        }
        Err(_) => false,
    }
}

/// Ask the daemon to stop and wait until it has exported everything and exited.
pub fn stop_daemon(socket: &Path) -> Result<Option<u32>, Failure> {
    let Some(response) = ask_if_running(socket, &Request::Stop)? else {
        return Ok(None);
    };
    let Some(pid) = response.data["pid"].as_u64().map(|pid| pid as u32) else {
        return Err(Failure(format!(
            "the daemon on {} refused to stop: {}",
            socket.display(),
            response.stderr.trim()
        )));
    };
    let started = Instant::now();
    while process_alive(pid) {
        if started.elapsed() > Duration::from_secs(300) {
            return Err(Failure(format!(
                "tarn daemon {pid} did not exit within 5 minutes; see {}",
                log_path(socket).display()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(Some(pid))
}

/// Ask the daemon that holds `pool` for one of its tables: `request` answers with the table
/// under `key` in its data.
pub fn fetch_table<T: serde::de::DeserializeOwned>(
    socket: &Path,
    pool: &str,
    request: &Request,
    key: &str,
) -> Result<T, Failure> {
    let not_held = || {
        Failure(format!(
            "pool {pool:?} is not imported: tarn stat reads the counters of a pool the daemon \
             holds (tarn pool import {pool})"
        ))
    };
    let Some(response) = ask_if_running(socket, request)? else {
        return Err(not_held());
    };
    if response.not_imported {
        return Err(not_held());
    }
    if response.status != 0 {
        return Err(Failure(format!(
            "cannot read the {key} counters of {pool}: {}",
            response.stderr.trim().trim_start_matches("tarn: ")
        )));
    }
    serde_json::from_value(response.data[key].clone())
        .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))
}

/// Ask the daemon for the counters of `pool` (or of every pool it holds), in name order.
pub fn fetch_iostat(
    socket: &Path,
    pool: Option<&str>,
) -> Result<Vec<(String, PoolIostat)>, Failure> {
    let request = Request::Stat(StatRequest::Iostat(PoolOption {
        pool: pool.map(str::to_string),
    }));
    let not_held = |pool: &str| {
        Failure(format!(
            "pool {pool:?} is not imported: iostat reads the counters of a pool the daemon holds \
             (tarn pool import {pool})"
        ))
    };
    let Some(response) = ask_if_running(socket, &request)? else {
        return match pool {
            Some(pool) => Err(not_held(pool)),
            None => Err(Failure("no pools available (none is imported)".into())),
        };
    };
    if response.not_imported {
        return Err(not_held(pool.unwrap_or_default()));
    }
    if response.status != 0 {
        return Err(Failure(format!(
            "cannot read the I/O counters: {}",
            response.stderr.trim().trim_start_matches("tarn: ")
        )));
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        name: String,
        iostat: PoolIostat,
    }
    let entries: Vec<Entry> = serde_json::from_value(response.data["pools"].clone())
        .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?;
    if entries.is_empty() {
        return Err(Failure("no pools available (none is imported)".into()));
    }
    Ok(entries
        .into_iter()
        .map(|entry| (entry.name, entry.iostat))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixListener;

    /// A daemon that reads each request and answers it with `answer`, or with `None` drops
    /// each connection at once, the request unread (as a daemon exiting does: the client's
    /// read then fails with ECONNRESET); how many connections it took.
    fn daemon_answering(
        socket: &Path,
        answer: Option<&'static [u8]>,
    ) -> std::thread::JoinHandle<usize> {
        let listener = UnixListener::bind(socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let mut connections = 0;
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        connections += 1;
                        let Some(answer) = answer else {
                            continue;
                        };
                        stream.set_nonblocking(false).unwrap();
                        let mut byte = [0u8; 1];
                        while stream.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {}
                        let _ = stream.write_all(answer);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            connections
        })
    }

    /// An answer the client could not read (cut short, or too long for a line) was taken for
    /// no answer at all, and the request was made again and again for a minute: a snapshot,
    /// a destroy or a send that the daemon had carried out was asked for once more each time.
    /// Only a connection closed before any byte of an answer is asked again now.
    #[test]
    fn an_unreadable_answer_is_not_asked_again() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s.sock");
        let server = daemon_answering(
            &socket,
            Some(b"{\"protocol\":4,\"status\":0,\"stdout\":\"cut\n"),
        );
        let started = Instant::now();
        let error = ask_if_running(&socket, &Request::Stop).unwrap_err();
        assert!(error.0.contains("unreadable response"), "{}", error.0);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(
            server.join().unwrap(),
            1,
            "the request was made more than once"
        );
    }

    /// A daemon that closes the connection without a byte of answer has not acted: the client
    /// asks again, until its patience ends. A daemon exiting with the request unread resets
    /// the connection (ECONNRESET); the first version of the rule above took that for an
    /// unreadable answer, and commands failed whenever their daemon was exiting (CI: 88 tests).
    #[test]
    fn a_connection_closed_or_reset_without_an_answer_is_asked_again() {
        for answer in [Some(&b""[..]), None] {
            let dir = tempfile::tempdir().unwrap();
            let socket = dir.path().join("s.sock");
            let server = daemon_answering(&socket, answer);
            let error = ask_if_running_within(&socket, &Request::Stop, Duration::from_millis(500))
                .unwrap_err();
            assert!(error.0.contains("did not answer"), "{}", error.0);
            assert!(
                server.join().unwrap() > 1,
                "{answer:?}: the request was not made again ({})",
                error.0
            );
        }
    }
}
