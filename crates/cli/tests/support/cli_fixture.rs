//! The fixture of `cli.rs`: one run of the `tarn` binary (`Run`, which fails the test if the
//! binary panicked or was killed), a pool on sparse files in a temporary directory with its own
//! daemon socket (`Fixture`), and readers of `check`'s and `list`'s output. Included with
//! `#[path]`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use tarn_test_support::clean_command;
pub use tarn_test_support::Run;
use tempfile::TempDir;

pub const TARN: &str = env!("CARGO_BIN_EXE_tarn");
pub const MIB: u64 = 1 << 20;

/// A temporary directory holding the vdev files of the pools of one test, and another holding
/// its daemon's socket and log.
pub struct Fixture {
    pub dir: TempDir,
    pub run_dir: TempDir,
}

impl Drop for Fixture {
    /// Stop the fixture's daemon, if one is running (it exports its pools).
    fn drop(&mut self) {
        let _ = self.command(&["daemon", "--stop"]).output();
        unmount_under(self.dir());
    }
}

/// Lazily unmount whatever is still mounted under `dir` (a killed daemon's dead mounts).
pub fn unmount_under(dir: &Path) {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    for line in text.lines() {
        if let Some(point) = line.split(' ').nth(4) {
            if Path::new(point).starts_with(dir) {
                let _ = Command::new("umount").arg("-l").arg(point).output();
            }
        }
    }
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().expect("temp dir"),
            run_dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.run_dir.path().join("tarn.sock")
    }

    /// `tarn pool export NAME`, which the daemon answers.
    #[track_caller]
    pub fn export(&self, name: &str) -> Run {
        self.run(&["pool", "export", name])
            .success()
            .stdout_has(&[&format!("exported pool {name}")])
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The directory as a string, for `-d`.
    pub fn d(&self) -> String {
        self.dir().to_str().expect("utf-8 temp dir").to_string()
    }

    /// The absolute path of a file in the directory, as a string.
    pub fn path(&self, name: &str) -> String {
        self.dir()
            .join(name)
            .to_str()
            .expect("utf-8 temp dir")
            .to_string()
    }

    /// `tarn ARGS` in the fixture's directory, with no `TARN_*` variables from the caller.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = clean_command(TARN);
        // Pools mount under the fixture's directory (-R), never at /POOL.
        let altroot = Path::new(self.dir()).join("altroot").display().to_string();
        let mut args: Vec<&str> = args.to_vec();
        if args.len() >= 2 && args[0] == "pool" && (args[1] == "create" || args[1] == "import") {
            args.insert(2, "-R");
            args.insert(3, &altroot);
        }
        command
            .args(&args)
            .current_dir(self.dir())
            .env("RUST_BACKTRACE", "1")
            .env("TARN_SOCKET", self.socket());
        command
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.run_env(&[], args)
    }

    /// Run `tarn ARGS` in the fixture's directory with a clean `TARN_*` environment plus `env`.
    pub fn run_env(&self, env: &[(&str, &str)], args: &[&str]) -> Run {
        let mut command = self.command(args);
        for (key, value) in env {
            command.env(key, value);
        }
        let env_text: String = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
        Run::of(format!("{env_text}tarn {}", args.join(" ")), &mut command)
    }

    /// `tarn pool create -s 128M NAME VDEVSPEC...`, where every word but `mirror` is a file name
    /// in the fixture directory, then `tarn pool export NAME`: the pool is left exported.
    #[track_caller]
    pub fn create(&self, name: &str, spec: &[&str]) -> Run {
        let mut args: Vec<String> = ["pool", "create", "-s", "128M", name]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for word in spec {
            args.push(if *word == "mirror" {
                word.to_string()
            } else {
                self.path(word)
            });
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let created = self
            .run(&args)
            .success()
            .stdout_has(&[&format!("created pool {name}")]);
        self.export(name);
        created
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

    /// `tarn check -d DIR POOL` succeeds and reports a clean pool; returns (bad, repaired).
    #[track_caller]
    pub fn check_clean(&self, pool: &str) -> (u64, u64) {
        let run = self
            .run(&["check", "-d", &self.d(), pool])
            .success()
            .stdout_has(&[&format!("checked pool {pool}"), "no errors found"]);
        copies_bad_repaired(&run)
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
            .open(self.dir().join(file))
            .expect("open vdev file");
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut buffer = vec![0u8; MIB as usize];
        let mut done = 0;
        while done < length {
            for chunk in buffer.chunks_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
            }
            let n = (length - done).min(MIB) as usize;
            handle
                .write_all_at(&buffer[..n], offset + done)
                .expect("scribble");
            done += n as u64;
        }
        handle.sync_all().expect("sync");
    }
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

/// `-H -p -o name,size,alloc` rows.
#[track_caller]
pub fn exact_sizes(run: &Run) -> BTreeMap<String, (u64, u64)> {
    run.stdout
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(
                fields.len(),
                3,
                "three tab-separated fields in {line:?}:\n{run}"
            );
            let number = |text: &str| -> u64 {
                text.parse()
                    .unwrap_or_else(|_| panic!("{text:?} is not an exact number:\n{run}"))
            };
            (
                fields[0].to_string(),
                (number(fields[1]), number(fields[2])),
            )
        })
        .collect()
}

// ------------------------------------------------------------------------------------------------
// 1. Lifecycle
// ------------------------------------------------------------------------------------------------
