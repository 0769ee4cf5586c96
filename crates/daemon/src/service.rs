//! Running as a systemd service (contrib/systemd/tarnd.service and tarnd.socket).
//!
//! Three things change when a service manager starts the daemon, and nothing otherwise:
//! - **Socket activation.** systemd may hold the daemon's socket itself (`tarnd.socket`) and
//!   pass it as file descriptor 3 (`LISTEN_FDS=1`, `LISTEN_PID` the daemon's pid), so that
//!   clients can connect before the daemon runs and while it restarts. The daemon serves that
//!   socket instead of binding one, after checking that it is a listening Unix stream socket
//!   bound to the path the daemon was told (`--socket`): a unit whose `ListenStream=` names
//!   another path is refused with a message saying so. The socket file is systemd's: the daemon
//!   does not remove it when it stops.
//! - **Readiness** (`Type=notify`). The daemon says `READY=1` once it listens and has imported
//!   the pools of its cache file, so that units ordered after it find them; `STOPPING=1` when
//!   it starts exporting them. Without `NOTIFY_SOCKET` nothing is sent.
//! - **Lifetime.** A daemon the CLI started for itself exits when it holds no pools; a service
//!   stays until it is stopped (with socket activation it would come back at the next
//!   connection anyway, but the pools of a late disk must find it there).
//!
//! The CLI removes these variables from the environment of a daemon it starts itself, so a
//! `tarn` command run inside some other service does not make its daemon a service.

use std::os::fd::FromRawFd;
use std::os::unix::net::UnixListener;
use std::path::Path;

use log::{info, warn};
use sd_notify::NotifyState;
use tarn_protocol::error::Failure;

/// How the daemon was started.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServiceMode {
    /// The listening socket came from the service manager.
    pub activated: bool,
    /// A service manager waits for readiness and stop notifications.
    pub notify: bool,
}

impl ServiceMode {
    /// Whether the daemon runs as a service (and so stays when it holds no pools).
    pub fn is_service(self) -> bool {
        self.activated || self.notify
    }
}

/// The listening socket the service manager passed for `socket`, if it passed one. Call it
/// before the daemon starts threads: it clears `LISTEN_*` from the environment.
pub fn activated_listener(socket: &Path) -> Result<Option<UnixListener>, Failure> {
    let fds: Vec<_> = sd_notify::listen_fds()
        .map_err(|error| Failure(format!("the socket systemd passed is unusable: {error}")))?
        .collect();
    let fd = match fds.as_slice() {
        [] => return Ok(None),
        [fd] => *fd,
        more => {
            return Err(Failure(format!(
                "systemd passed {} sockets; the daemon serves one (tarnd.socket has one \
                 ListenStream=)",
                more.len()
            )))
        }
    };
    let mut kind: libc::c_int = 0;
    let mut length = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    let mut listening: libc::c_int = 0;
    let mut listening_length = length;
    // SAFETY: getsockopt writes at most `length` bytes into the integers given.
    let is_listening_stream = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut kind as *mut libc::c_int).cast(),
            &mut length,
        ) == 0
            && libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ACCEPTCONN,
                (&mut listening as *mut libc::c_int).cast(),
                &mut listening_length,
            ) == 0
    } && kind == libc::SOCK_STREAM
        && listening == 1;
    if !is_listening_stream {
        return Err(Failure(format!(
            "file descriptor {fd} that systemd passed is not a listening stream socket \
             (tarnd.socket needs ListenStream=)"
        )));
    }
    // SAFETY: the service manager handed this descriptor to this process (LISTEN_PID), and
    // nothing else in it owns the descriptor.
    let listener = unsafe { UnixListener::from_raw_fd(fd) };
    let bound = listener
        .local_addr()
        .map_err(|error| Failure(format!("the socket systemd passed: {error}")))?;
    match bound.as_pathname() {
        Some(path) if path == socket => {}
        other => {
            return Err(Failure(format!(
                "systemd passed a socket bound to {}, but this daemon's socket is {}: make \
                 tarnd.socket's ListenStream= and the daemon's --socket name the same path",
                other.map_or("no path".into(), |path| path.display().to_string()),
                socket.display()
            )))
        }
    }
    info!("serving the socket systemd passed ({})", socket.display());
    Ok(Some(listener))
}

/// Whether a service manager waits for this daemon's notifications.
pub fn notify_requested() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some()
}

/// Tell the service manager that the daemon serves, holding `pools` pools.
pub fn notify_ready(pools: usize) {
    notify(&[
        NotifyState::Ready,
        NotifyState::Status(&format!("serving, {pools} pools imported")),
    ]);
}

/// Tell the service manager that the daemon is exporting its pools and will exit.
pub fn notify_stopping() {
    notify(&[
        NotifyState::Stopping,
        NotifyState::Status("exporting every pool"),
    ]);
}

fn notify(states: &[NotifyState]) {
    if let Err(error) = sd_notify::notify(false, states) {
        warn!("cannot notify the service manager: {error}");
    }
}
