//! A daemon SIGKILLed while its own syncfs(2) of one of its mounts (the write-back before a
//! snapshot), or the page invalidation after it, waited on a write request one of its FUSE
//! workers had already taken could not exit: the kernel waits for that answer uninterruptibly,
//! the waiting thread kept the dying process's descriptor table and so `/dev/fuse` open, the
//! connection was never aborted, and the mount hung whoever touched it (and the daemon's lock
//! kept a new daemon from starting) until someone aborted the connection by hand. This test
//! drives the daemon as tarn-stress's mount mode does: a writer process keeps dirtying a file
//! under the mount while `tarn snapshot` asks for the write-back, and the daemon is killed with
//! SIGKILL while its syncfs waits. The test hook `TARN_TEST_STALL_WRITE_BACK` makes the worker
//! serving a write-back write sleep while the write-back runs, so that the kill lands in that
//! window every round, after a random delay. After each kill the daemon must be gone within a few
//! seconds, a stat of the mount point (in a child process) must not hang, and `tarn pool import`
//! must start a new daemon and mount the pool again.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tarn_test_support::cli::{is_mounted, CliFixture};

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

const POOL: &str = "wbkill";
const ROUNDS: u32 = 3;
/// The test hook's variable and how long a write-back write sleeps (longer than the test).
const STALL: (&str, &str) = ("TARN_TEST_STALL_WRITE_BACK", "600");
/// How long a killed daemon may take to be gone.
const EXIT_PATIENCE: Duration = Duration::from_secs(5);

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Wait for `child` at most `patience`; kill it if it is still running then. Whether it ended
/// by itself.
fn ended_within(child: &mut Child, patience: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < patience {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// A child process killed and reaped when dropped (a failed assertion must not leave the writer
/// dirtying the mount while the fixture stops the daemon).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Abort the FUSE connection of every mount under `dir` (as tarn-stress does after its kills),
/// so that a daemon stuck in its own syncfs can exit and the test can clean up.
fn abort_connections_under(dir: &Path) {
    for entry in tarn_fuse::mountpoint::mounts() {
        if entry.mount_point.starts_with(dir) && entry.fstype.starts_with("fuse") {
            tarn_fuse::mountpoint::abort_connection(entry.device_minor);
        }
    }
}

/// The threads of `pid` left, each with its name, state, kernel wait channel and stack (what
/// keeps a killed process from exiting).
fn threads_of(pid: i32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return String::new();
    };
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).unwrap_or_default();
    let mut out = String::new();
    for task in tasks.flatten() {
        let path = task.path();
        let state = read(path.join("status"))
            .lines()
            .find(|line| line.starts_with("State:"))
            .unwrap_or_default()
            .to_string();
        out += &format!(
            "  {} {} {state} wchan {}\n{}",
            task.file_name().to_string_lossy(),
            read(path.join("comm")).trim(),
            read(path.join("wchan")),
            read(path.join("stack"))
        );
    }
    out
}

/// How many times the daemon's log says a write-back write was stalled by the hook.
fn stalls_logged(t: &CliFixture) -> usize {
    let mut log = t.socket().into_os_string();
    log.push(".log");
    std::fs::read_to_string(log)
        .map(|text| text.matches(STALL.0).count())
        .unwrap_or(0)
}

#[test]
fn sigkill_during_the_write_back_before_a_snapshot_lets_the_daemon_exit() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    // Aborting a stuck connection (the cleanup of a failed round) takes root.
    if !tarn_test_support::requires(&[tarn_test_support::Requirement::Root]) {
        return;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let mnt = t.file(&format!("altroot/{POOL}"));
    let altroot = t.altroot();
    let disk = t.path(&format!("{POOL}.img"));
    let d = t.d();
    t.run_env(
        &[STALL],
        &["pool", "create", "-s", "512M", "-R", &altroot, POOL, &disk],
    )
    .success();
    for round in 0..ROUNDS {
        assert!(
            is_mounted(&mnt) && !tarn_fuse::mountpoint::is_dead_fuse_mount(&mnt),
            "round {round}: not mounted"
        );
        let pid = t.daemon_pid().expect("daemon pid");
        let file = mnt.join(format!("dirty-{round}"));
        // The writer rewrites the file's pages without syncing, so that the page cache always
        // holds dirty pages for the snapshot's write-back.
        let writer = Killed(Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while dd if=/dev/urandom of='{}' bs=64k count=32 conv=notrunc 2>/dev/null; do :; done",
                file.display()
            ))
            .stdin(Stdio::null())
            .spawn()
            .unwrap());
        std::thread::sleep(Duration::from_millis(300));
        // Snapshots one after another until one's write-back finds a write-back write to
        // stall on (a write-back with no dirty page sends none).
        let stalls = stalls_logged(&t);
        let started = Instant::now();
        let mut snapshot = None;
        for attempt in 0.. {
            let mut command = tarn_test_support::clean_command(TARN);
            command
                .args(["snapshot", &format!("{POOL}@r{round}-{attempt}")])
                .env("TARN_SOCKET", t.socket())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = Killed(command.spawn().unwrap());
            while stalls_logged(&t) == stalls && child.0.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            if stalls_logged(&t) != stalls {
                snapshot = Some(child);
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "round {round}: no snapshot's write-back reached a write in {attempt} attempts"
            );
        }
        std::thread::sleep(Duration::from_millis(u64::from(
            (seed >> (round * 8)) % 400,
        )));
        // SAFETY: kills the daemon this fixture started (named by its pid file).
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let killed = Instant::now();
        while alive(pid) && killed.elapsed() < EXIT_PATIENCE {
            std::thread::sleep(Duration::from_millis(10));
        }
        let exited = !alive(pid);
        if !exited {
            eprintln!(
                "round {round}: daemon {pid} after SIGKILL:\n{}",
                threads_of(pid)
            );
            // Let the stuck daemon go, so that the test leaves nothing behind.
            abort_connections_under(t.dir());
            t.wait_daemon_gone(pid);
        }
        drop(writer);
        if let Some(mut snapshot) = snapshot {
            let _ = ended_within(&mut snapshot.0, Duration::from_secs(10));
        }
        assert!(
            exited,
            "round {round}: the daemon (pid {pid}) was still there {EXIT_PATIENCE:?} after \
             SIGKILL during its syncfs"
        );
        // A stat of the mount point in a child process: an error (the dead mount's ENOTCONN)
        // is fine, hanging is not.
        let mut stat = Command::new("stat")
            .arg(&mnt)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(
            ended_within(&mut stat, Duration::from_secs(5)),
            "round {round}: stat {} hangs after the kill",
            mnt.display()
        );
        // A new daemon imports the pool and mounts it again.
        t.run_env(
            &[STALL],
            &["pool", "import", "-d", &d, "-R", &altroot, POOL],
        )
        .success();
        let new_pid = t.daemon_pid().expect("daemon pid after import");
        assert_ne!(new_pid, pid, "round {round}: no new daemon");
        eprintln!(
            "round {round}: daemon {pid} gone {:?} after SIGKILL; {new_pid} mounted {POOL} again",
            killed.elapsed()
        );
    }
    assert!(is_mounted(&mnt) && !tarn_fuse::mountpoint::is_dead_fuse_mount(&mnt));
    std::fs::write(mnt.join("after"), b"written after the rounds").unwrap();
    t.run(&["pool", "export", POOL]).success();
    assert!(!is_mounted(&mnt));
}

/// A daemon SIGKILLed while a FUSE `lseek` (SEEK_DATA or SEEK_HOLE) of a file open for writing
/// had the kernel write the file's dirty pages back could not exit either, for the same
/// reason: the thread answering the lseek dropped the file's pages (a write to the daemon's own
/// `/dev/fuse`) and waited in the kernel for write requests that the daemon's dead workers
/// would never answer, with no death watch to abort the connection. A writer keeps a file open
/// and dirty; `lseek(SEEK_DATA)` from another process sends the lseek; the test hook stalls the
/// write-back write it causes; the daemon is killed meanwhile and must be gone within a few
/// seconds, and a new daemon must import and mount the pool.
#[test]
fn sigkill_during_the_write_back_of_an_lseek_lets_the_daemon_exit() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    if !tarn_test_support::requires(&[tarn_test_support::Requirement::Root]) {
        return;
    }
    let mnt = t.file(&format!("altroot/{POOL}"));
    let altroot = t.altroot();
    let disk = t.path(&format!("{POOL}.img"));
    let d = t.d();
    t.run_env(
        &[STALL],
        &["pool", "create", "-s", "512M", "-R", &altroot, POOL, &disk],
    )
    .success();
    let pid = t.daemon_pid().expect("daemon pid");
    let file = mnt.join("open-for-writing");
    // The writer holds the file open and keeps dirtying its pages without syncing, so that an
    // lseek always finds a writer and dirty pages.
    let writer = Killed(
        Command::new("python3")
            .arg("-c")
            .arg(format!(
                "import os\n\
                 fd = os.open('{}', os.O_RDWR | os.O_CREAT, 0o644)\n\
                 while True:\n    os.pwrite(fd, os.urandom(65536), 0)\n",
                file.display()
            ))
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(300));
    let stalls = stalls_logged(&t);
    let started = Instant::now();
    let mut seeker = None;
    while stalls_logged(&t) == stalls {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no lseek's write-back reached a write in 60 s"
        );
        let mut child = Killed(
            Command::new("python3")
                .arg("-c")
                .arg(format!(
                    "import os\nfd = os.open('{}', os.O_RDONLY)\nos.lseek(fd, 0, os.SEEK_DATA)\n",
                    file.display()
                ))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        while stalls_logged(&t) == stalls && child.0.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
        seeker = Some(child);
    }
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: kills the daemon this fixture started (named by its pid file).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let killed = Instant::now();
    while alive(pid) && killed.elapsed() < EXIT_PATIENCE {
        std::thread::sleep(Duration::from_millis(10));
    }
    let exited = !alive(pid);
    if !exited {
        eprintln!("daemon {pid} after SIGKILL:\n{}", threads_of(pid));
        abort_connections_under(t.dir());
        t.wait_daemon_gone(pid);
    }
    drop(writer);
    drop(seeker);
    assert!(
        exited,
        "the daemon (pid {pid}) was still there {EXIT_PATIENCE:?} after SIGKILL during the \
         write-back of an lseek"
    );
    t.run_env(
        &[STALL],
        &["pool", "import", "-d", &d, "-R", &altroot, POOL],
    )
    .success();
    assert!(is_mounted(&mnt) && !tarn_fuse::mountpoint::is_dead_fuse_mount(&mnt));
    t.run(&["pool", "export", POOL]).success();
}
