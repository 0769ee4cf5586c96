//! End-to-end tests of the tarn daemon (DESIGN.md §5): started by the CLI on first need, one
//! per socket, detached and ready before the starting command returns, clean export on SIGTERM,
//! import without -f after kill -9, stale sockets removed, bad requests answered.
//!
//! Each test has its own socket (`TARN_SOCKET`) in a temporary directory apart from its pool
//! files, and the drop of its `CliFixture` (tarn-test-support) stops its daemon, so no test
//! leaves a daemon behind even when it fails.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use tarn_protocol::request::inspect::{CheckArgs, InspectRequest};
use tarn_protocol::request::pool::{CreateArgs, PoolRequest};
use tarn_protocol::Request;
use tarn_test_support::cli::{alive, CliFixture};

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

/// One raw line to the fixture's socket, one response line back.
fn raw(t: &CliFixture, line: &[u8]) -> Value {
    let mut stream = UnixStream::connect(t.socket()).expect("connect to the daemon");
    stream.write_all(line).expect("send");
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .expect("receive");
    serde_json::from_str(&answer)
        .unwrap_or_else(|error| panic!("response {answer:?} is not JSON: {error}"))
}

fn kill(pid: i32, signal: i32) {
    // SAFETY: kill(2) with a pid the test read from the daemon's pid file.
    let result = unsafe { libc::kill(pid, signal) };
    assert_eq!(result, 0, "kill({pid}, {signal})");
}

#[test]
fn create_starts_the_daemon_which_keeps_the_pool_until_export() {
    let t = CliFixture::new(TARN);
    assert!(!t.socket().exists());
    t.create("tank", &["a.img"]);
    // The starting command returned only once the daemon was serving.
    assert!(t.socket().exists(), "socket created");
    let pid = t.pid();
    assert!(alive(pid));
    let log = std::fs::read_to_string(t.side_file(".log")).expect("the daemon logs");
    assert!(log.contains("listening on"), "{log}");

    // The pool stays imported: listed by the daemon, not importable, its device in use.
    assert_eq!(t.listed(), vec!["tank".to_string()]);
    assert_eq!(t.importable(), vec![]);
    t.run(&["pool", "create", "-f", "other", &t.path("a.img")])
        .failure(&["a.img", "in use"]);
    t.run(&["pool", "create", "-s", "128M", "tank", &t.path("b.img")])
        .failure(&["tank", "already imported"]);
    assert!(
        !Path::new(&t.path("b.img")).exists(),
        "a refused create makes no file"
    );
    t.run(&["pool", "import", "-d", &t.d(), "tank"])
        .failure(&["already imported"]);
    // Verbs on the imported pool run in the daemon.
    t.run(&["pool", "status", "tank"])
        .success()
        .stdout_has(&["pool: tank", "ONLINE"]);
    t.run(&["debug", "metaslabs", "tank"])
        .success()
        .stdout_has(&["vdev 0:"]);
    t.run(&["pool", "sync", "tank"])
        .success()
        .stdout_has(&["synced pool tank at txg"]);
    t.run(&["pool", "sync"]).success();
    t.run(&["check", "tank"])
        .success()
        .stdout_has(&["no errors found"]);
    assert_eq!(t.pid(), pid, "one daemon served every command");

    // Export: the last pool goes, and so does the daemon, its socket and pid file.
    t.run(&["pool", "export", "tank"])
        .success()
        .stdout_has(&["exported pool tank"]);
    t.wait_daemon_gone(pid);
    assert!(!t.socket().exists(), "socket removed");
    assert!(t.daemon_pid().is_none(), "pid file removed");
    assert_eq!(
        t.importable(),
        vec![("tank".to_string(), "ONLINE, exported".to_string())]
    );
    // With no daemon, read-only verbs work in-process and do not start one. Nothing is
    // imported, so pool list and pool status show nothing (the exported pool is the import
    // listing's, above) and say so, as zpool: exit 0.
    let list = t.run(&["pool", "list", "-H", "-o", "name"]).success();
    assert_eq!(list.stdout, "", "{list}");
    t.run(&["pool", "list"])
        .success()
        .stdout_has(&["no pools available"]);
    let status = t.run(&["pool", "status"]).success();
    assert!(status.stderr.contains("no pools available"), "{status}");
    t.check_clean("tank");
    t.run(&["pool", "sync", "tank"])
        .failure(&["tank", "not imported"]);
    assert!(!t.socket().exists(), "no daemon started by read-only verbs");
    let empty = CliFixture::new(TARN);
    let run = empty.run(&["pool", "list"]).success();
    assert_eq!(run.stdout, "no pools available\n", "{run}");

    // Import starts a daemon again; destroy removes the last pool and it exits.
    t.run(&["pool", "import", "-d", &t.d(), "tank"])
        .success()
        .stdout_has(&["imported pool tank"]);
    let second = t.pid();
    assert_ne!(second, pid);
    t.run(&["pool", "destroy", "tank"])
        .success()
        .stdout_has(&["destroyed pool tank"]);
    t.wait_daemon_gone(second);
    assert_eq!(t.importable(), vec![]);
}

#[test]
fn a_failed_create_leaves_no_daemon_behind() {
    let t = CliFixture::new(TARN);
    let small = t.path("small.img");
    std::fs::File::create(&small)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    t.run(&["pool", "create", "tank", &small])
        .failure(&["too small"]);
    // Its socket goes first, its last log line ("exiting") last: the log is complete only then.
    let exited = || {
        std::fs::read_to_string(t.side_file(".log"))
            .is_ok_and(|log| log.lines().any(|line| line.ends_with(": exiting")))
    };
    let started = Instant::now();
    while t.socket().exists() || !exited() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the daemon started for a failed create did not exit"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Misuse caught by the CLI does not start a daemon at all: its log does not grow.
    let log_before = std::fs::read_to_string(t.side_file(".log")).unwrap();
    assert!(log_before.contains("no pools left"), "{log_before}");
    t.run(&["pool", "create", "-s", "128M", "1tank", &t.path("x.img")])
        .failure(&["invalid pool name"]);
    t.run(&["pool", "create", "-s", "lots", "tank", &t.path("x.img")])
        .failure(&["invalid size"]);
    assert_eq!(
        std::fs::read_to_string(t.side_file(".log")).unwrap(),
        log_before
    );
    assert!(!t.socket().exists());
}

#[test]
fn concurrent_first_commands_share_one_daemon() {
    let t = CliFixture::new(TARN);
    let names = ["p0", "p1", "p2", "p3"];
    std::thread::scope(|scope| {
        for name in names {
            let t = &t;
            scope.spawn(move || {
                t.create(name, &[&format!("{name}.img")]);
            });
        }
    });
    let mut listed = t.listed();
    listed.sort();
    assert_eq!(listed, names.map(String::from).to_vec());
    let log = std::fs::read_to_string(t.side_file(".log")).unwrap();
    let serving: std::collections::BTreeSet<&str> = log
        .lines()
        .filter(|line| line.contains("listening on"))
        .filter_map(|line| line.split_whitespace().nth(3))
        .collect();
    assert_eq!(serving.len(), 1, "exactly one daemon served:\n{log}");
}

#[test]
fn sigterm_exports_every_pool_cleanly() {
    let t = CliFixture::new(TARN);
    t.create("tank", &["a.img"]);
    t.create("pond", &["b.img"]);
    let pid = t.pid();
    kill(pid, libc::SIGTERM);
    t.wait_daemon_gone(pid);
    assert!(!t.socket().exists(), "socket removed on SIGTERM");
    let mut pools = t.importable();
    pools.sort();
    assert_eq!(
        pools,
        vec![
            ("pond".to_string(), "ONLINE, exported".to_string()),
            ("tank".to_string(), "ONLINE, exported".to_string())
        ]
    );
    let log = std::fs::read_to_string(t.side_file(".log")).unwrap();
    assert!(
        log.contains("exported pool tank") && log.contains("exported pool pond"),
        "{log}"
    );
    t.check_clean("tank");
    t.check_clean("pond");
}

#[test]
fn import_after_kill_9_needs_no_force_and_checks_clean() {
    let t = CliFixture::new(TARN);
    t.create("tank", &["a.img"]);
    for round in 0..3 {
        let pid = t.pid();
        t.run(&["pool", "sync", "tank"]).success();
        kill(pid, libc::SIGKILL);
        t.wait_daemon_gone(pid);
        // The dead daemon left its socket file behind: stale, removed by the next daemon.
        assert!(
            t.socket().exists(),
            "round {round}: a killed daemon leaves its socket"
        );
        // With no daemon, check runs in-process against the crashed pool (read-only: -n).
        t.run(&["check", "-n", "-d", &t.d(), "tank"])
            .success()
            .stdout_has(&["no errors found"]);
        t.run(&["pool", "import", "-d", &t.d(), "tank"])
            .success()
            .stdout_has(&["imported pool tank"]);
        assert_ne!(t.pid(), pid, "round {round}: a new daemon");
        let log = std::fs::read_to_string(t.side_file(".log")).unwrap();
        assert!(log.contains("removed stale socket"), "{log}");
        t.run(&["check", "tank"])
            .success()
            .stdout_has(&["no errors found"]);
    }
}

#[test]
fn a_stale_socket_file_is_removed() {
    let t = CliFixture::new(TARN);
    // A socket with nobody listening, as a crashed daemon leaves it.
    let listener = std::os::unix::net::UnixListener::bind(t.socket()).unwrap();
    drop(listener);
    assert!(t.socket().exists());
    // Read-only verbs see no daemon behind it.
    t.run(&["pool", "list"])
        .success()
        .stdout_has(&["no pools available"]);
    t.create("tank", &["a.img"]);
    assert_eq!(t.listed(), vec!["tank".to_string()]);
    let log = std::fs::read_to_string(t.side_file(".log")).unwrap();
    assert!(log.contains("removed stale socket"), "{log}");
}

#[test]
fn one_daemon_per_socket_and_two_sockets_side_by_side() {
    let one = CliFixture::new(TARN).with_socket("one.sock");
    let two = CliFixture::new(TARN).with_socket("two.sock");
    one.create("tank", &["a.img"]);
    two.create("tank", &["a.img"]);
    assert_ne!(one.pid(), two.pid());
    assert_eq!(one.listed(), vec!["tank".to_string()]);
    assert_eq!(two.listed(), vec!["tank".to_string()]);
    // A second daemon on a socket that has one refuses to start, foreground or not.
    one.run(&["daemon"]).failure(&["already running"]);
    one.run(&["daemon", "--foreground"])
        .failure(&["already running"]);
    assert!(alive(one.pid()));
    // Each exports its own pool; the other daemon is untouched.
    let pid_one = one.pid();
    one.run(&["pool", "export", "tank"]).success();
    one.wait_daemon_gone(pid_one);
    assert!(alive(two.pid()));
    assert_eq!(two.listed(), vec!["tank".to_string()]);
    let stopped = two.run(&["daemon", "--stop"]).success();
    assert!(stopped.stdout.contains("stopped"), "{stopped}");
    assert!(!two.socket().exists());
    assert_eq!(
        two.importable(),
        vec![("tank".to_string(), "ONLINE, exported".to_string())]
    );
    two.run(&["daemon", "--stop"])
        .success()
        .stdout_has(&["no tarn daemon running"]);
}

#[test]
fn bad_requests_get_error_responses_and_the_daemon_survives() {
    let t = CliFixture::new(TARN);
    t.create("tank", &["a.img"]);
    let pid = t.pid();
    let version = tarn_protocol::PROTOCOL_VERSION;
    let request_line = |request: &Request| {
        let mut line = tarn_protocol::encode_request(request);
        line.push(b'\n');
        line
    };
    let check = |pool: &str| {
        Request::Inspect(InspectRequest::Check(CheckArgs {
            dirs: Vec::new(),
            no_repair: true,
            pool: pool.into(),
        }))
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"this is not json\n".to_vec(), "bad request"),
        (
            format!("{{\"protocol\":{version},\"verb\":\"frobnicate\"}}\n").into_bytes(),
            "frobnicate",
        ),
        (b"{\"verb\":\"check\"}\n".to_vec(), "bad request"),
        (
            format!("{{\"protocol\":{version},\"verb\":\"inspect\",\"args\":{{\"verb\":\"check\",\"args\":{{\"pool\":1}}}}}}\n").into_bytes(),
            "bad request",
        ),
        (b"\xff\xfe\n".to_vec(), "bad request"),
        // Well formed, but from a build before protocol versions.
        (
            b"{\"verb\":\"check\",\"args\":{\"pool\":\"tank\",\"repair\":false}}\n".to_vec(),
            "different build",
        ),
        (
            request_line(&Request::Pool(PoolRequest::Create(CreateArgs {
                force: false,
                size: None,
                properties: Vec::new(),
                altroot: None,
                mountpoint: None,
                fs_properties: Vec::new(),
                pool: "x".into(),
                vdevs: vec!["relative.img".into()],
            }))),
            "not absolute",
        ),
    ];
    for (line, needle) in cases {
        let response = raw(&t, &line);
        assert_ne!(response["status"], 0, "{response}");
        let stderr = response["stderr"].as_str().unwrap_or("");
        assert!(stderr.contains(needle), "{needle:?} in {response}");
    }
    // A verb on a pool the daemon does not hold says so.
    let response = raw(&t, &request_line(&check("nosuch")));
    assert_eq!(response["not_imported"], true, "{response}");
    // Several requests on one connection, and a half-sent request, do not hurt.
    let mut stream = UnixStream::connect(t.socket()).unwrap();
    stream
        .write_all(b"{\"verb\":\"ping\"}\n{\"verb\":\"ping\"}\n{\"verb\":")
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    for _ in 0..2 {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["data"]["pid"], pid, "{value}");
    }
    drop(reader);
    drop(stream);
    // Still serving, still holding the pool.
    assert!(alive(pid));
    assert_eq!(t.listed(), vec!["tank".to_string()]);
    t.run(&["check", "tank"])
        .success()
        .stdout_has(&["no errors found"]);
    assert_eq!(t.pid(), pid);
}

#[test]
fn tunables_reach_the_daemon_it_starts() {
    let t = CliFixture::new(TARN);
    let run = t
        .command(&["pool", "create", "-s", "128M", "tank", &t.path("a.img")])
        .env("TARN_TUNABLE_vdev_default_ms_shift", "22")
        .env("TARN_TUNABLE_vdev_min_ms_shift", "22")
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let json = t.run(&["debug", "metaslabs", "-j", "tank"]).success();
    let value: Value = serde_json::from_str(&json.stdout).unwrap();
    let sizes: Vec<u64> = value["vdevs"][0]["metaslabs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ms| ms["size"].as_u64().unwrap())
        .collect();
    assert!(!sizes.is_empty());
    assert!(
        sizes.iter().all(|&size| size <= 4 << 20),
        "4 MiB metaslabs from the tunable: {sizes:?}"
    );
}

#[test]
fn the_log_has_levels_timestamps_and_the_error_text_of_failed_requests() {
    let t = CliFixture::new(TARN);
    t.create("tank", &["a.img"]);
    t.run(&["pool", "get", "bogus", "tank"])
        .failure(&["no pool property"]);
    t.run(&["pool", "export", "tank"]).success();
    let log = std::fs::read_to_string(t.side_file(".log")).expect("the daemon logs");
    // Every record: "YYYY-MM-DD HH:MM:SS.mmm UTC LEVEL tarn daemon PID...: message".
    let records: Vec<&str> = log.lines().filter(|line| line.contains(" UTC ")).collect();
    assert!(!records.is_empty(), "{log}");
    for record in &records {
        let bytes = record.as_bytes();
        assert!(
            record.len() > 28
                && bytes[4] == b'-'
                && bytes[10] == b' '
                && bytes[13] == b':'
                && bytes[19] == b'.'
                && record[23..].starts_with(" UTC "),
            "record without a readable timestamp: {record}\n{log}"
        );
    }
    assert!(
        records
            .iter()
            .any(|r| r.contains(" INFO ") && r.contains("listening on")),
        "{log}"
    );
    assert!(
        records.iter().any(|r| r.contains(" WARN ")
            && r.contains("pool get: status 1")
            && r.contains("no pool property \"bogus\"")),
        "a failed request is logged with its error text:\n{log}"
    );
    assert!(
        records
            .iter()
            .any(|r| r.contains(" INFO ") && r.contains("pool export: status 0")),
        "{log}"
    );
}
