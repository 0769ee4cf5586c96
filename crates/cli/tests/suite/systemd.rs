//! The daemon as a systemd service (contrib/systemd, the daemon's `service` module): socket
//! activation (the socket passed as file descriptor 3 with LISTEN_FDS and LISTEN_PID, served
//! instead of a socket of its own), readiness and stop notifications on NOTIFY_SOCKET, a
//! service that stays without pools, and the unit files as systemd-analyze reads them.
//!
//! The service manager is played by the test: it binds the socket, hands it over across exec
//! as systemd does (`LISTEN_PID` set by a shell that then execs the daemon, so the pid is the
//! daemon's), and listens for the notifications on a datagram socket of its own.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tarn_test_support::{requires, Requirement};

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

/// Notifications received within `limit`, until one contains `wanted`.
fn wait_for_notification(notify: &UnixDatagram, wanted: &str, limit: Duration) -> String {
    let started = Instant::now();
    let mut received = String::new();
    let mut buffer = [0u8; 4096];
    while started.elapsed() < limit {
        if let Ok(length) = notify.recv(&mut buffer) {
            received.push_str(&String::from_utf8_lossy(&buffer[..length]));
            if received.contains(wanted) {
                return received;
            }
        }
    }
    panic!("no {wanted} within {limit:?}; received {received:?}");
}

/// The daemon, started as systemd starts tarnd.service with tarnd.socket: `listener` as file
/// descriptor 3, LISTEN_FDS=1, LISTEN_PID its own pid, NOTIFY_SOCKET `notify_path`.
fn start_activated(socket: &Path, listener: &UnixListener, notify_path: &Path) -> Child {
    let fd = listener.as_raw_fd();
    let mut command = Command::new("sh");
    command
        .args([
            "-c",
            r#"LISTEN_PID=$$ exec "$0" daemon --foreground --socket "$1""#,
            TARN,
        ])
        .arg(socket)
        .env("LISTEN_FDS", "1")
        .env("NOTIFY_SOCKET", notify_path)
        .env("TARN_SOCKET", socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: dup2 and fcntl are async-signal-safe; they only move the listening socket to
    // descriptor 3 (without close-on-exec), as the service manager passes it.
    unsafe {
        command.pre_exec(move || {
            if libc::dup2(fd, 3) == -1 || libc::fcntl(3, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn().expect("start the daemon")
}

/// One request line to the daemon on `socket`, its answer line.
fn ask(socket: &Path, request: &str) -> String {
    let mut stream = UnixStream::connect(socket).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    writeln!(stream, "{request}").unwrap();
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).unwrap();
    answer
}

#[test]
fn a_socket_activated_daemon_serves_the_passed_socket_notifies_and_stays_without_pools() {
    if !requires(&[Requirement::Root]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("tarn.sock");
    let notify_path = dir.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let listener = UnixListener::bind(&socket).unwrap();
    let inode = std::fs::metadata(&socket).unwrap().ino();
    let mut daemon = start_activated(&socket, &listener, &notify_path);
    // The test's copy is not needed: the daemon holds the socket now, as systemd keeps its own.
    drop(listener);

    let ready = wait_for_notification(&notify, "READY=1", Duration::from_secs(30));
    assert!(
        ready.contains("STATUS=serving, 0 pools imported"),
        "{ready:?}"
    );
    // The daemon answers on the passed socket and did not bind one of its own.
    let version = Command::new(TARN)
        .arg("version")
        .env("TARN_SOCKET", &socket)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&version.stdout);
    assert!(version.status.success(), "{text}");
    assert!(text.contains("daemon"), "the daemon did not answer: {text}");
    assert_eq!(std::fs::metadata(&socket).unwrap().ino(), inode);
    // A service holds no pools and stays (a daemon the CLI started would exit).
    std::thread::sleep(Duration::from_secs(2));
    assert!(daemon.try_wait().unwrap().is_none(), "the service exited");
    let _ = ask(&socket, "not json");
    std::thread::sleep(Duration::from_secs(1));
    assert!(daemon.try_wait().unwrap().is_none(), "the service exited");

    // SIGTERM: STOPPING=1, exit 0, and the socket file left to the service manager.
    // SAFETY: signals the child this test started.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let stopping = wait_for_notification(&notify, "STOPPING=1", Duration::from_secs(30));
    assert!(stopping.contains("STOPPING=1"));
    let status = daemon.wait().unwrap();
    assert!(status.success(), "the daemon exited with {status}");
    assert!(socket.exists(), "the daemon removed systemd's socket file");
}

#[test]
fn a_passed_socket_for_another_path_is_refused_with_a_message() {
    if !requires(&[Requirement::Root]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("elsewhere.sock");
    let socket = dir.path().join("tarn.sock");
    let listener = UnixListener::bind(&elsewhere).unwrap();
    let daemon = start_activated(&socket, &listener, &dir.path().join("no-notify"));
    let output = daemon.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("ListenStream=") && stderr.contains("elsewhere.sock"),
        "{stderr}"
    );
}

#[test]
fn the_unit_files_pass_systemd_analyze_verify() {
    if !requires(&[Requirement::Tool("systemd-analyze")]) {
        return;
    }
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd");
    let dir = tempfile::tempdir().unwrap();
    for unit in ["tarnd.service", "tarnd.socket"] {
        // The units name the installed binary; verify checks that it exists.
        let text = std::fs::read_to_string(units.join(unit))
            .unwrap()
            .replace("/usr/local/bin/tarn", TARN);
        std::fs::write(dir.path().join(unit), text).unwrap();
    }
    let service = std::fs::read_to_string(dir.path().join("tarnd.service")).unwrap();
    assert!(service.contains("Type=notify"), "{service}");
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.path().join("tarnd.service"))
        .arg(dir.path().join("tarnd.socket"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stderr.trim().is_empty(),
        "{stderr}"
    );
}
