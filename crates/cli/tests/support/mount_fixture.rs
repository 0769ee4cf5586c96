//! The fixture shared by the tests that mount pools through the daemon: each test gets its
//! own `TARN_SOCKET` and altroot in temporary directories, runs the real `tarn` binary (never
//! with the caller's `TARN_*` variables), and on drop stops the daemon and lazily unmounts
//! whatever is left under its directory. Included with `#[path]` by `mount.rs` and
//! `mount_crash.rs`.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tarn_test_support::clean_command;
pub use tarn_test_support::Run;
use tempfile::TempDir;

pub const TARN: &str = env!("CARGO_BIN_EXE_tarn");

pub struct Fixture {
    pub dir: TempDir,
    pub run_dir: TempDir,
}

impl Fixture {
    pub fn new() -> Option<Fixture> {
        if !tarn_test_support::requires(&[tarn_test_support::Requirement::Fuse]) {
            return None;
        }
        Some(Fixture {
            dir: tempfile::tempdir().unwrap(),
            run_dir: tempfile::tempdir().unwrap(),
        })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn altroot(&self) -> String {
        self.path("altroot").display().to_string()
    }

    pub fn socket(&self) -> PathBuf {
        self.run_dir.path().join("tarn.sock")
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with_env(args, &[])
    }

    /// `run` with extra environment variables (e.g. `TARN_TUNABLE_*` for a daemon this command
    /// starts).
    pub fn run_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut command = clean_command(TARN);
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("TARN_SOCKET", self.socket())
            .envs(env.iter().copied());
        Run::of(format!("tarn {}", args.join(" ")), &mut command)
    }

    pub fn create(&self, name: &str, extra: &[&str]) -> Run {
        let disk = self.path(&format!("{name}.img")).display().to_string();
        let altroot = self.altroot();
        let mut args = vec!["pool", "create", "-s", "256M", "-R", &altroot];
        args.extend_from_slice(extra);
        args.push(name);
        args.push(&disk);
        self.run(&args)
    }

    pub fn daemon_pid(&self) -> Option<i32> {
        let mut path = self.socket().into_os_string();
        path.push(".pid");
        fs::read_to_string(path).ok()?.trim().parse().ok()
    }

    pub fn wait_daemon_gone(&self, pid: i32) {
        let started = Instant::now();
        // SAFETY: kill with signal 0 only checks that the process exists.
        while unsafe { libc::kill(pid, 0) } == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "daemon {pid} did not exit"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.run(&["daemon", "--stop"]);
        if let Some(pid) = self.daemon_pid() {
            // SAFETY: signals a process this fixture's daemon pid file names.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        unmount_under(self.dir.path());
    }
}

/// Lazily unmount whatever is still mounted under `dir`.
pub fn unmount_under(dir: &Path) {
    for entry in tarn_fuse::mountpoint::mounts() {
        if entry.mount_point.starts_with(dir) {
            let _ = tarn_fuse::mountpoint::unmount_path(&entry.mount_point, true);
        }
    }
}

pub fn is_mounted(path: &Path) -> bool {
    tarn_fuse::mountpoint::mount_at(path).is_some()
}
