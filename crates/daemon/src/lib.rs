//! `tarn-daemon`: the server behind `tarn daemon`, as a library that the `tarn` binary runs
//! ([`init_logging`], [`run_foreground`]). It holds the imported pools and answers the
//! requests of `tarn-protocol` with the verb bodies of `tarn-ops`. It depends on the engine,
//! the FUSE layer, `tarn-protocol` and `tarn-ops`; it must not depend on the CLI (clap, the
//! verbs): the two sides meet only in the protocol.
//!
//! The tarn daemon: the one process that holds imported pools (DESIGN.md §5).
//!
//! # Overview
//! `tarn daemon --foreground --socket PATH` runs the server in the calling process; without
//! `--foreground` the CLI starts that command detached (see `tarn_protocol::client::start_daemon`). The CLI
//! also starts it on first need (`pool create`, `pool import POOL`). The daemon embeds the
//! engine: every imported pool is a [`Pool`](tarn::Pool) in this process, and each request is answered by
//! the same verb code the CLI runs in-process, with its output captured (`output::capture`).
//! The wire protocol is in `tarn-protocol`.
//!
//! # Files beside the socket
//! `PATH.lock` is flocked for the daemon's whole life: a second daemon on the same socket finds
//! it taken and refuses to start (after a short wait, in case the holder is just exiting). A
//! socket file with no daemon behind it (the lock is free: its owner died) is stale and is
//! removed before binding. `PATH.pid` holds the pid while the daemon serves; `PATH.log` is its
//! stdout and stderr when detached.
//!
//! # Log
//! Through the `log` facade and env_logger ([`init_logging`]): one line a record, UTC time to
//! the millisecond, level, pid, message; the engine's records (`log::debug!` of background
//! frees, ...) and fuser's land in the same log with their module named. Every request is
//! logged with its exit status; a failed one (status not 0) at warn with the error text the
//! client was sent; a panic, a failed unmount or export at error. Level: `tarn daemon
//! --log-level LEVEL`, else `RUST_LOG`, else info.
//!
//! # Threads and locking
//! The main thread polls the listening socket and watches for a stop (SIGTERM, SIGINT, a `stop`
//! request, or no pools left). Each connection gets a thread. `State` (pools by name, requests
//! in flight) is behind one mutex that is never held across engine calls. Creating, importing,
//! exporting and destroying pools also take the `lifecycle` mutex, so two requests cannot
//! import the same name at once. A pool in use by a request is an `Arc<Pool>` clone; export
//! takes the pool out of the map first (no new users) and waits for the clones to go.
//!
//! # Lifetime
//! The daemon exits when it holds no pools and no request is in flight, once a request that
//! creates, imports, exports or destroys a pool has completed (a failed `pool create` does not
//! leave a daemon behind), or after [`IDLE_EXIT`] without any request; a daemon run as a
//! systemd service stays until it is stopped (module `service`: socket activation, readiness). On SIGTERM, SIGINT or
//! `stop` it refuses new requests, waits for the ones in flight, exports every pool cleanly,
//! removes the socket and pid file, and exits 0.
//!
//! # Mounts
//! Every file system of an imported pool mounts where its properties say (module `mounts`),
//! parents first; export and destroy unmount them all first, deepest first. Dataset verbs
//! (`create`, `destroy`, `set`, `mount`, `unmount`) also take the `lifecycle` mutex, so no
//! pool is exported under them.
//!
//! # Crash behaviour
//! If the daemon dies (kill -9), the kernel drops its vdev flocks and its lock file's flock:
//! the next `pool import` starts a new daemon, which removes the stale socket and imports the
//! pools without -f at their last synced txg (invariant 7).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tarn::tunables::Tunables;

#[macro_use]
extern crate tarn_protocol;

mod authority;
mod cache;
mod datasets;
mod devices;
mod failmode;
mod handlers;
mod held;
mod history;
mod inject;
mod inspect;
mod metrics_http;
mod mounts;
mod pool;
mod scan;
mod service;
mod snapdir;
mod snapshots;
mod stale_mounts;
mod streams;

use log::{error, info, warn};

use handlers::dispatch;
use held::{export_when_unused, lock, Answer, Daemon, Reply, State, STOP};
use mounts::Mounts;

use tarn_protocol::error::Failure;
use tarn_protocol::format;
use tarn_protocol::output;
use tarn_protocol::request::pool::PoolRequest;
use tarn_protocol::{lock_path, pid_path, Request, Response, MAX_LINE_BYTES, STATUS_BAD_REQUEST};

/// With no pools and nothing asked for this long, a daemon exits.
pub const IDLE_EXIT: Duration = Duration::from_secs(30);
/// How long a starting daemon waits for the lock of a predecessor that is exiting.
const LOCK_WAIT: Duration = Duration::from_secs(5);
/// How often the main thread looks at its stop conditions while no connection arrives.
const POLL_INTERVAL_MS: i32 = 50;

extern "C" fn on_stop_signal(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

/// The log filter without `RUST_LOG` or `--log-level`: info, except fuser's own records below
/// error (a warning for every unimplemented request such as getxattr, and for retrying an
/// unmount the daemon has already done lazily).
const DEFAULT_LOG_FILTER: &str = "info,fuser=error";

/// Put what a verb run outside any request printed into the log: its stdout at info, its
/// stderr (failures, such as a file system that did not mount) at warn, where a filter on
/// warnings finds them.
fn log_captured(captured: &output::Captured) {
    for line in captured.stdout.lines() {
        info!("{line}");
    }
    for line in captured.stderr.lines() {
        warn!("{line}");
    }
}

/// Install the daemon's logger: `log` records (the daemon's own and the engine's) to stderr,
/// which is the daemon's log file (`SOCKET.log`) when the CLI started it. One line a record:
/// UTC time to the millisecond, level, pid, the module for records from outside the daemon,
/// then the message. The level comes from `level` (`tarn daemon --log-level`), else from
/// `RUST_LOG` (env_logger's syntax: `debug`, `tarn=debug,info`, ...), else `DEFAULT_LOG_FILTER`.
pub fn init_logging(level: Option<&str>) {
    let mut builder = env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or(DEFAULT_LOG_FILTER),
    );
    if let Some(level) = level {
        builder.parse_filters(level);
    }
    builder
        .format(|out, record| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let target = record.target();
            let origin = if target.starts_with("tarn::daemon") {
                String::new()
            } else {
                format!(" {target}")
            };
            writeln!(
                out,
                "{}:{:02}.{:03} UTC {:<5} tarn daemon {}{origin}: {}",
                format::utc_time(now.as_secs()),
                now.as_secs() % 60,
                now.subsec_millis(),
                record.level(),
                std::process::id(),
                record.args()
            )
        })
        .target(env_logger::Target::Stderr)
        // A second call (tests run several daemons in one process) keeps the first logger.
        .try_init()
        .ok();
}

/// What `tarn daemon --metrics` exports about `pool`.
fn pool_metrics(daemon: &Daemon, pool: &tarn::Pool) -> tarn_protocol::metrics::PoolMetrics {
    tarn_protocol::metrics::PoolMetrics {
        name: pool.name().to_string(),
        arc: pool.arc_stats(),
        iostat: pool.iostat(),
        txgs: pool.txg_history(),
        zil: inspect::zil_counters(daemon, pool.name())
            .into_iter()
            .map(|(name, bytes, value)| (name.to_string(), bytes, value))
            .collect(),
    }
}

/// Run the daemon in this process until it is told to stop or has no pools left.
/// The transport of the daemon's mounts: `--fuse-transport`, else `TARN_FUSE_TRANSPORT`, else
/// auto. An explicit `uring` turns the host's switch on (logged), or fails the start.
fn choose_fuse_transport(option: Option<&str>) -> Result<tarn_fuse::TransportChoice, Failure> {
    use tarn_fuse::transport;
    let choice = match option {
        Some(name) => transport::parse_transport(name),
        None => transport::transport_from_env(),
    }
    .map_err(Failure)?;
    if choice == tarn_fuse::TransportChoice::Uring {
        transport::enable_host_uring()
            .map_err(|error| Failure(format!("--fuse-transport uring: {error}")))?;
    }
    transport::set_process_transport(choice);
    Ok(choice)
}

pub fn run_foreground(
    socket: &Path,
    metrics: Option<std::net::SocketAddr>,
    fuse_transport: Option<&str>,
) -> Result<(), Failure> {
    let tunables = Tunables::from_env().map_err(Failure)?;
    let transport = choose_fuse_transport(fuse_transport)?;
    let socket = tarn_protocol::absolute(socket);
    // Before any thread starts: this clears the service manager's LISTEN_* variables.
    let activated = service::activated_listener(&socket)?;
    let service_mode = service::ServiceMode {
        activated: activated.is_some(),
        notify: service::notify_requested(),
    };
    if let Some(parent) = socket.parent() {
        std::fs::create_dir_all(parent).map_err(|error| {
            Failure(format!(
                "cannot create {}: {error}; name another socket with --socket or TARN_SOCKET",
                parent.display()
            ))
        })?;
    }
    // A dying daemon stuck on its own mount holds the lock until its connection is aborted.
    stale_mounts::clear_stale_mounts();
    let _lock = take_lock(&socket)?;
    let listener = match activated {
        Some(listener) => listener,
        None => bind_socket(&socket)?,
    };
    listener
        .set_nonblocking(true)
        .map_err(|error| Failure(format!("socket {}: {error}", socket.display())))?;
    let pid_file = pid_path(&socket);
    std::fs::write(&pid_file, format!("{}\n", std::process::id()))
        .map_err(|error| Failure(format!("cannot write {}: {error}", pid_file.display())))?;
    install_signal_handlers();
    // Requests carry absolute paths; the daemon keeps no directory busy.
    let _ = std::env::set_current_dir("/");
    info!("listening on {}", socket.display());
    info!(
        "mounts use FUSE transport {} (host io_uring switch: {:?})",
        tarn_fuse::transport::transport_name(transport),
        tarn_fuse::transport::host_uring()
    );

    let daemon = Arc::new(Daemon {
        state: Mutex::new(State {
            pools: BTreeMap::new(),
            active: 0,
            lifecycle_done: false,
            stopping: false,
            last_request: Instant::now(),
        }),
        mounts: Mounts::default(),
        lifecycle: Mutex::new(()),
        tunables,
        socket: socket.clone(),
        caches: held::PoolCaches::new(&socket),
        service: service_mode,
    });
    if let Some(addr) = metrics {
        let bound = metrics_http::serve(addr, Arc::downgrade(&daemon), |daemon: &Daemon| {
            daemon
                .pools()
                .iter()
                .map(|pool| pool_metrics(daemon, pool))
                .collect()
        })
        .map_err(Failure)?;
        info!("serving metrics at http://{bound}/metrics");
    }
    // The pools this daemon's cache file remembers come back before the first request.
    cache::import_at_start(&daemon);
    failmode::watch(&daemon);
    if service_mode.notify {
        service::notify_ready(lock(&daemon.state).pools.len());
    }
    serve(&daemon, &listener);

    // Stop: no new connections, refuse new requests, let the ones in flight finish. The socket
    // file of a socket-activated daemon is the service manager's, which keeps listening on it.
    if service_mode.notify {
        service::notify_stopping();
    }
    if !service_mode.activated {
        let _ = std::fs::remove_file(&socket);
    }
    drop(listener);
    lock(&daemon.state).stopping = true;
    let mut waited = Instant::now();
    while lock(&daemon.state).active > 0 {
        if waited.elapsed() > Duration::from_secs(10) {
            info!("waiting for requests in flight before exporting");
            waited = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _guard = lock(&daemon.lifecycle);
    // Unmount lazily: a process still inside must not keep the pool from exporting.
    for pool in daemon.pools() {
        // What the unmounts print (outside any request) goes to the log, not to stdout.
        let (result, captured) =
            output::capture(|| daemon.mounts.unmount_within(&pool, pool.name(), true));
        log_captured(&captured);
        if let Err(Failure(message)) = result {
            error!("unmount failed: {message}");
        }
    }
    let pools = std::mem::take(&mut lock(&daemon.state).pools);
    let mut failed = false;
    for (name, pool) in pools {
        match export_when_unused(pool) {
            Ok(()) => info!("exported pool {name}"),
            Err(Failure(message)) => {
                failed = true;
                error!("export of pool {name} failed: {message}");
            }
        }
    }
    let _ = std::fs::remove_file(&pid_file);
    info!("exiting");
    if failed {
        return Err(Failure("some pools could not be exported cleanly".into()));
    }
    Ok(())
}

/// Take `SOCKET.lock`; wait a little if its holder is not serving (it may be exiting).
fn take_lock(socket: &Path) -> Result<File, Failure> {
    let path = lock_path(socket);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|error| Failure(format!("cannot open {}: {error}", path.display())))?;
    let started = Instant::now();
    loop {
        // SAFETY: flock on a descriptor we own; no memory is passed.
        let result = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if result == 0 {
            return Ok(file);
        }
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(Failure(format!("cannot lock {}: {error}", path.display())));
        }
        if UnixStream::connect(socket).is_ok() || started.elapsed() > LOCK_WAIT {
            return Err(Failure(format!(
                "a tarn daemon is already running on {} (it holds {})",
                socket.display(),
                path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn install_signal_handlers() {
    let handler = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
        // Detached, there is no terminal to hang up; in the foreground, SIGHUP is not a reason to
        // drop pools without exporting them.
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
}

/// Bind the daemon's socket, open to every local user (the daemon authorises each request:
/// module `authority`), removing a stale one a dead daemon left.
fn bind_socket(socket: &Path) -> Result<UnixListener, Failure> {
    if socket.exists() {
        if UnixStream::connect(socket).is_ok() {
            return Err(Failure(format!(
                "a tarn daemon is already running on {}",
                socket.display()
            )));
        }
        std::fs::remove_file(socket).map_err(|error| {
            Failure(format!(
                "cannot remove stale socket {}: {error}",
                socket.display()
            ))
        })?;
        info!("removed stale socket {}", socket.display());
    }
    // SAFETY: umask only changes this process's file creation mask; the socket is created
    // owner-only, then the mask is put back and the socket opened to all (mode 0666, as
    // /dev/zfs): no client connects before it is authorised request by request anyway.
    let previous_mask = unsafe { libc::umask(0o077) };
    let bound = UnixListener::bind(socket);
    // SAFETY: as above.
    unsafe { libc::umask(previous_mask) };
    let listener = bound
        .map_err(|error| Failure(format!("cannot listen on {}: {error}", socket.display())))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
        .map_err(|error| Failure(format!("cannot open {} to all: {error}", socket.display())))?;
    Ok(listener)
}

/// Accept connections until a stop condition holds.
fn serve(daemon: &Arc<Daemon>, listener: &UnixListener) {
    loop {
        if STOP.load(Ordering::SeqCst) {
            lock(&daemon.state).stopping = true;
            info!("stop requested: exporting every pool");
            return;
        }
        {
            // Decide and refuse new requests in one critical section: a request either started
            // before (and the daemon is not idle) or is answered with `retry`.
            let mut state = lock(&daemon.state);
            if !daemon.service.is_service()
                && state.pools.is_empty()
                && state.active == 0
                && (state.lifecycle_done || state.last_request.elapsed() > IDLE_EXIT)
            {
                state.stopping = true;
                info!("no pools left: exiting");
                return;
            }
        }
        let mut poll = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut poll, 1, POLL_INTERVAL_MS) };
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    let daemon = Arc::clone(daemon);
                    let spawned = std::thread::Builder::new()
                        .name("tarn-request".into())
                        .spawn(move || serve_connection(&daemon, stream));
                    if let Err(error) = spawned {
                        error!("cannot start a request thread: {error}");
                    }
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => {
                    error!("accept: {error}");
                    std::thread::sleep(Duration::from_millis(POLL_INTERVAL_MS as u64));
                    break;
                }
            }
        }
    }
}

/// Answer the requests of one connection, one line each, until it closes.
fn serve_connection(daemon: &Arc<Daemon>, stream: UnixStream) {
    let _ = stream.set_nonblocking(false);
    let peer = history::peer(&stream);
    let Ok(writer) = stream.try_clone() else {
        return;
    };
    let mut writer = writer;
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = Vec::new();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut line);
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.len() as u64 > MAX_LINE_BYTES {
            let response = Response::failure(STATUS_BAD_REQUEST, "bad request: line too long");
            let _ = send(&mut writer, response);
            return;
        }
        let response = match std::str::from_utf8(&line) {
            Err(_) => Response::failure(STATUS_BAD_REQUEST, "bad request: not UTF-8"),
            Ok(text) => match tarn_protocol::parse_request(text.trim_end()) {
                Err(message) => {
                    warn!("{message}");
                    Response::failure(STATUS_BAD_REQUEST, &message)
                }
                Ok(request) => {
                    // The pool history records every change that succeeds (history.rs).
                    let mut record = history::PendingRecord::of(&request, peer);
                    if record.as_ref().is_some_and(|record| record.before) {
                        record.take().expect("checked").record(daemon);
                    }
                    let response = answer(daemon, request, |daemon, request| {
                        dispatch(daemon, request, peer, &mut reader, &mut writer)
                    });
                    if let (0, Some(record)) = (response.status, record) {
                        record.record(daemon);
                    }
                    response
                }
            },
        };
        if send(&mut writer, response).is_err() {
            return;
        }
    }
}

/// Write `response`, stamped with this build's protocol version, as one line or, when it is
/// large, several ([`tarn_protocol::response_lines`]).
fn send(writer: &mut UnixStream, mut response: Response) -> std::io::Result<()> {
    response.protocol = tarn_protocol::PROTOCOL_VERSION;
    for line in tarn_protocol::response_lines(response) {
        writer.write_all(&line)?;
    }
    writer.flush()
}

/// Run one request through `run` with its output captured; never panics.
fn answer(
    daemon: &Arc<Daemon>,
    request: Request,
    run: impl FnOnce(&Arc<Daemon>, Request) -> Result<Answer, Reply>,
) -> Response {
    {
        let mut state = lock(&daemon.state);
        if state.stopping {
            let mut response = Response::failure(1, "the tarn daemon is stopping; try again");
            response.retry = true;
            return response;
        }
        state.active += 1;
        state.last_request = Instant::now();
    }
    let verb = request.verb();
    let lifecycle = matches!(
        request,
        Request::Pool(
            PoolRequest::Create(_)
                | PoolRequest::Import(_)
                | PoolRequest::Export(_)
                | PoolRequest::Destroy(_)
        )
    );
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        output::capture(|| run(daemon, request))
    }));
    let response = match outcome {
        Ok((Ok(Answer { status, data }), captured)) => Response {
            status,
            stdout: captured.stdout,
            stderr: captured.stderr,
            data,
            ..Response::default()
        },
        Ok((Err(Reply::NotImported(pool)), _)) => Response::not_imported(&pool),
        Ok((Err(Reply::Failed(Failure(message))), captured)) => Response {
            status: 1,
            stdout: captured.stdout,
            stderr: format!("{}tarn: {message}\n", captured.stderr),
            ..Response::default()
        },
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            error!("request {verb} panicked: {why}");
            Response::failure(1, &format!("internal error in the daemon ({verb}): {why}"))
        }
    };
    if response.status == 0 {
        info!("{verb}: status 0");
    } else if response.not_imported {
        // Not a failure: the client runs the verb itself, on the exported pool.
        info!("{verb}: {}", response.stderr.trim_end());
    } else {
        // The error text the client was sent: its last line (earlier lines are warnings).
        let why = response.stderr.trim_end().lines().last().unwrap_or("");
        warn!("{verb}: status {}: {why}", response.status);
    }
    let mut state = lock(&daemon.state);
    state.active -= 1;
    state.lifecycle_done |= lifecycle;
    state.last_request = Instant::now();
    response
}
