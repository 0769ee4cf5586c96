//! [`CliFixture`]: pools on sparse files driven through the real `tarn` binary, each test with
//! its own directory and its own daemon socket, and what the tests that use it read back
//! (`check`'s counts, exact sizes, whether a path is a mount point).

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use tempfile::TempDir;

use crate::{clean_command, Requirement, Run};

/// One test's private tarn: a temporary directory for the vdev files of its pools (sparse
/// files, made by `pool create -s`), another for its daemon's socket, pid file and log, and
/// `tarn` runs with `TARN_SOCKET` pointing there and none of the caller's `TARN_*` variables.
/// The first command that needs a daemon starts one on that socket, so tests never share a
/// daemon and never meet a developer's own.
///
/// On drop the daemon is asked to stop (it exports its pools), killed if it is still there (a
/// failing test may have left it wedged), and whatever is still mounted under the directory is
/// lazily unmounted: a test leaves no daemon and no mount behind even when it fails.
pub struct CliFixture {
    pub dir: TempDir,
    pub run_dir: TempDir,
    program: String,
    socket_name: String,
    /// Set on every command (a tunable the daemon it starts should have).
    env: Vec<(String, String)>,
    /// Whether `pool create` and `pool import` get `-R DIR/altroot` added. Fixtures for mount
    /// tests leave `-R` to the test, which checks where pools mount.
    add_altroot: bool,
}

impl Drop for CliFixture {
    fn drop(&mut self) {
        let _ = self.command(&["daemon", "--stop"]).output();
        if let Some(pid) = self.daemon_pid() {
            if alive(pid) {
                // SAFETY: kill(2) of the pid this fixture's own daemon wrote to its pid file.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        unmount_under(self.dir());
    }
}

impl CliFixture {
    /// A fixture running `program` (the test's `env!("CARGO_BIN_EXE_tarn")`); its pools
    /// mount under its directory (`-R` is added to `pool create` and `pool import`), never at
    /// /POOL.
    pub fn new(program: &str) -> CliFixture {
        CliFixture {
            dir: tempfile::tempdir().expect("temp dir"),
            run_dir: tempfile::tempdir().expect("temp dir"),
            program: program.to_string(),
            socket_name: "tarn.sock".to_string(),
            env: Vec::new(),
            add_altroot: true,
        }
    }

    /// A fixture for tests that mount pools, which pass `-R` (or `-m`) themselves; `None`,
    /// with the skip recorded, when `/dev/fuse` is missing.
    pub fn mounting(program: &str) -> Option<CliFixture> {
        if !crate::requires(&[Requirement::Fuse]) {
            return None;
        }
        let mut fixture = CliFixture::new(program);
        fixture.add_altroot = false;
        Some(fixture)
    }

    /// The same fixture with its socket named `name` (two fixtures side by side).
    pub fn with_socket(mut self, name: &str) -> CliFixture {
        self.socket_name = name.to_string();
        self
    }

    /// The same fixture with `key=value` in the environment of every command it runs.
    pub fn with_env(mut self, key: &str, value: &str) -> CliFixture {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The directory as a string, for `-d`.
    pub fn d(&self) -> String {
        self.dir().to_str().expect("utf-8 temp dir").to_string()
    }

    /// The absolute path of a file in the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }

    /// The absolute path of a file in the directory, as a string (a command's argument).
    pub fn path(&self, name: &str) -> String {
        self.file(name)
            .to_str()
            .expect("utf-8 temp dir")
            .to_string()
    }

    /// `DIR/altroot`, where the pools of this fixture mount.
    pub fn altroot(&self) -> String {
        self.path("altroot")
    }

    pub fn socket(&self) -> PathBuf {
        self.run_dir.path().join(&self.socket_name)
    }

    /// A file the daemon keeps beside its socket: `SOCKET.pid`, `SOCKET.log`.
    pub fn side_file(&self, suffix: &str) -> PathBuf {
        self.run_dir
            .path()
            .join(format!("{}{suffix}", self.socket_name))
    }

    /// The daemon's pid from `SOCKET.pid`, if the file exists.
    pub fn daemon_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.side_file(".pid"))
            .ok()
            .and_then(|text| text.trim().parse().ok())
    }

    /// The daemon's pid; fails the test if it wrote none.
    #[track_caller]
    pub fn pid(&self) -> i32 {
        self.daemon_pid().expect("the daemon writes its pid file")
    }

    /// Wait (30 s at most) until process `pid` has exited.
    #[track_caller]
    pub fn wait_daemon_gone(&self, pid: i32) {
        let started = Instant::now();
        while alive(pid) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "daemon {pid} did not exit"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `tarn ARGS` in the fixture's directory, with the fixture's socket and environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = clean_command(&self.program);
        let altroot = self.altroot();
        let mut args: Vec<&str> = args.to_vec();
        if self.add_altroot
            && args.len() >= 2
            && args[0] == "pool"
            && (args[1] == "create" || args[1] == "import")
        {
            args.insert(2, "-R");
            args.insert(3, &altroot);
        }
        command
            .args(&args)
            .current_dir(self.dir())
            .env("RUST_BACKTRACE", "1")
            .env("TARN_SOCKET", self.socket());
        for (key, value) in &self.env {
            command.env(key, value);
        }
        command
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.run_env(&[], args)
    }

    /// `run` with extra environment variables (e.g. `TARN_TUNABLE_*` for a daemon this command
    /// starts).
    pub fn run_env(&self, env: &[(&str, &str)], args: &[&str]) -> Run {
        let mut command = self.command(args);
        command.envs(env.iter().copied());
        let env_text: String = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
        Run::of(format!("{env_text}tarn {}", args.join(" ")), &mut command)
    }

    /// `tarn pool create OPTIONS NAME VDEVS...`, where every vdev word but `mirror` is a file
    /// name in the directory; the run is returned unchecked.
    pub fn create_pool(&self, name: &str, options: &[&str], vdevs: &[&str]) -> Run {
        let vdevs: Vec<String> = vdevs
            .iter()
            .map(|word| {
                if *word == "mirror" {
                    word.to_string()
                } else {
                    self.path(word)
                }
            })
            .collect();
        let mut args = vec!["pool", "create"];
        args.extend_from_slice(options);
        args.push(name);
        args.extend(vdevs.iter().map(String::as_str));
        self.run(&args)
    }

    /// `tarn pool create -s 128M NAME VDEVS...` (see [`CliFixture::create_pool`]), which must
    /// succeed; the pool stays imported in the daemon.
    #[track_caller]
    pub fn create(&self, name: &str, vdevs: &[&str]) -> Run {
        self.create_pool(name, &["-s", "128M"], vdevs)
            .success()
            .stdout_has(&[&format!("created pool {name}")])
    }

    /// [`CliFixture::create`], then `tarn pool export NAME`: the pool is left exported, for the
    /// verbs that run in-process.
    #[track_caller]
    pub fn create_exported(&self, name: &str, vdevs: &[&str]) -> Run {
        let created = self.create(name, vdevs);
        self.export(name);
        created
    }

    /// `tarn pool create -s 256M -R ALTROOT EXTRA NAME NAME.img`, unchecked: a pool mounted at
    /// ALTROOT/NAME unless EXTRA says otherwise.
    pub fn create_in_altroot(&self, name: &str, extra: &[&str]) -> Run {
        let altroot = self.altroot();
        let mut options = vec!["-s", "256M", "-R", &altroot];
        options.extend_from_slice(extra);
        self.create_pool(name, &options, &[&format!("{name}.img")])
    }

    /// `tarn pool export NAME`, which the daemon answers.
    #[track_caller]
    pub fn export(&self, name: &str) -> Run {
        self.run(&["pool", "export", name])
            .success()
            .stdout_has(&[&format!("exported pool {name}")])
    }

    /// Names of the pools `tarn pool import -d DIR` lists, each with its state word and
    /// whether it was exported: "ONLINE, exported", or "ONLINE, not exported" when the listing
    /// says the pool was not exported (its holder is alive or died without exporting).
    #[track_caller]
    pub fn importable(&self) -> Vec<(String, String)> {
        let run = self.run(&["pool", "import", "-d", &self.d()]).success();
        let mut pools: Vec<(String, String)> = Vec::new();
        for line in run.stdout.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("pool:") {
                pools.push((rest.trim().to_string(), String::new()));
            } else if let Some(rest) = line.strip_prefix("state:") {
                let (_, state) = pools.last_mut().expect("state after pool");
                *state = format!("{}, exported", rest.trim());
            } else if line.starts_with("status: The pool was not exported") {
                let (_, state) = pools.last_mut().expect("status after pool");
                *state = state.replace(", exported", ", not exported");
            }
        }
        pools
    }

    /// Names listed by `pool list -H -o name` (no -d: only what the daemon holds, if it runs).
    #[track_caller]
    pub fn listed(&self) -> Vec<String> {
        let run = self.run(&["pool", "list", "-H", "-o", "name"]).success();
        run.stdout.lines().map(str::to_string).collect()
    }

    /// `tarn check -d DIR POOL` succeeds and reports a clean pool; returns (bad, repaired).
    #[track_caller]
    pub fn check_clean(&self, pool: &str) -> (u64, u64) {
        let run = self
            .run(&["check", "-d", &self.d(), pool])
            .success()
            .stdout_has(&[&format!("checked pool {pool}"), "no errors found"]);
        copies_bad_repaired(&run)
    }

    /// `tarn check POOL` of a pool the daemon holds finds nothing wrong.
    #[track_caller]
    pub fn check_imported_clean(&self, pool: &str) {
        let run = self.run(&["check", pool]).success();
        assert!(run.stdout.contains("no errors found"), "{run}");
    }

    /// Size and modification time of every file in the directory: a failed command must leave
    /// this unchanged (no file created, none written).
    pub fn snapshot(&self) -> BTreeMap<PathBuf, (u64, SystemTime)> {
        std::fs::read_dir(self.dir())
            .expect("read dir")
            .map(|entry| {
                let entry = entry.expect("dir entry");
                let meta = entry.metadata().expect("metadata");
                (entry.path(), (meta.len(), meta.modified().expect("mtime")))
            })
            .collect()
    }

    /// Overwrite `length` bytes of `file` at `offset` with pseudo-random bytes.
    pub fn scribble(&self, file: &str, offset: u64, length: u64) {
        let handle = std::fs::OpenOptions::new()
            .write(true)
            .open(self.file(file))
            .expect("open vdev file");
        const CHUNK: u64 = 1 << 20;
        let mut done = 0;
        while done < length {
            let n = (length - done).min(CHUNK);
            handle
                .write_all_at(&crate::pattern(offset + done, n as usize), offset + done)
                .expect("scribble");
            done += n;
        }
        handle.sync_all().expect("sync");
    }
}

/// Whether process `pid` is still there. A zombie whose threads have all exited counts as gone
/// (a daemon's parent is gone; whoever adopted it may not reap it at once), but not one whose
/// main thread exited first while others still run: until the last of them exits, its files,
/// and so its FUSE connections, are still open.
pub fn alive(pid: i32) -> bool {
    let Ok(pid) = u32::try_from(pid) else {
        return false;
    };
    tarn_protocol::client::process_alive(pid)
        || std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|tasks| tasks.count() > 1)
}

/// Lazily unmount whatever is still mounted under `dir` (a killed daemon's dead mounts).
pub fn unmount_under(dir: &Path) {
    for entry in tarn_fuse::mountpoint::mounts() {
        if entry.mount_point.starts_with(dir) {
            let _ = tarn_fuse::mountpoint::unmount_path(&entry.mount_point, true);
        }
    }
}

/// Whether something is mounted at `path`.
pub fn is_mounted(path: &Path) -> bool {
    tarn_fuse::mountpoint::mount_at(path).is_some()
}

/// Parse "copies verified: N (B bad, R repaired)" from `check` output.
#[track_caller]
pub fn copies_bad_repaired(run: &Run) -> (u64, u64) {
    let line = run
        .stdout
        .lines()
        .find(|line| line.contains("copies verified:"))
        .unwrap_or_else(|| panic!("no 'copies verified' line:\n{run}"));
    let inside = line
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(inside, _)| inside)
        .unwrap_or_else(|| panic!("unexpected copies line {line:?}"));
    let mut bad = None;
    let mut repaired = None;
    for part in inside.split(',') {
        let mut words = part.split_whitespace();
        let number: u64 = words.next().and_then(|w| w.parse().ok()).unwrap();
        match words.next() {
            Some("bad") => bad = Some(number),
            Some("repaired") => repaired = Some(number),
            other => panic!("unexpected word {other:?} in {line:?}"),
        }
    }
    (bad.expect("bad count"), repaired.expect("repaired count"))
}
