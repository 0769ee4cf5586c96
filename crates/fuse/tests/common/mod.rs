//! The mount fixture shared by the FUSE integration tests: a pool on a sparse file, its root
//! file system mounted in this process, unmounted, checked and exported by `finish`.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use tarn::check::check_pool;
use tarn::fs::SpaceFigures;
use tarn::pool::{CreateOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;
use tarn_fuse::{mount, MountHandle, MountOptions};

pub struct Fixture {
    _dir: tempfile::TempDir,
    pub mountpoint: PathBuf,
    pub handle: Option<MountHandle>,
    pub pool: Option<Pool>,
}

impl Fixture {
    pub fn new(name: &str) -> Option<Fixture> {
        if !tarn_test_support::requires(&[tarn_test_support::Requirement::Fuse]) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::create(CreateOptions {
            name: name.into(),
            log: Vec::new(),
            cache: Vec::new(),
            vdevs: vec![VdevSpec::Leaf(dir.path().join("disk0"))],
            create_size: Some(512 << 20),
            force: false,
            tunables: Tunables::default(),
            wrap_device: None,
            disabled_features: Vec::new(),
        })
        .expect("create pool");
        let mountpoint = dir.path().join("mnt");
        fs::create_dir(&mountpoint).unwrap();
        let handle = mount_root(&pool, &mountpoint, name);
        Some(Fixture {
            _dir: dir,
            mountpoint,
            handle: Some(handle),
            pool: Some(pool),
        })
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.mountpoint.join(relative)
    }

    /// Unmount (plainly: the kernel writes its cached pages back first) and mount the root
    /// file system again from the engine, so that nothing the kernel cached survives.
    pub fn remount(&mut self) {
        unmount_patiently(self.handle.take().unwrap());
        let pool = self.pool.as_ref().unwrap();
        self.handle = Some(mount_root(pool, &self.mountpoint, "remounted"));
    }

    /// Unmount (see `unmount_patiently`), check the pool and export it.
    pub fn finish(mut self) {
        unmount_patiently(self.handle.take().unwrap());
        let pool = self.pool.take().unwrap();
        pool.sync().unwrap();
        let report = check_pool(&pool, false).expect("check runs");
        assert!(report.is_clean(), "check found problems: {report:#?}");
        pool.export().expect("export");
    }
}

/// Mount the root file system of `pool` at `mountpoint`.
fn mount_root(pool: &Pool, mountpoint: &Path, name: &str) -> MountHandle {
    let fs = Arc::new(pool.file_system().expect("file system"));
    let io = pool.core.io.clone();
    fs.set_space_source(Arc::new(move || {
        let stats = io.space.stats();
        let size_bytes: u64 = stats.iter().map(|v| v.size).sum();
        let allocated: u64 = stats.iter().map(|v| v.allocated_bytes).sum();
        SpaceFigures {
            size_bytes,
            available_bytes: size_bytes.saturating_sub(allocated),
        }
    }));
    mount(fs, mountpoint, &MountOptions::new(format!("tarn:{name}"))).expect("mount")
}

/// A plain unmount may see EBUSY for a moment after the test's last close on a loaded machine
/// (the kernel drops the file's last reference asynchronously); it is retried for up to 5 s,
/// never made lazy.
fn unmount_patiently(mut handle: MountHandle) {
    let mut attempts = 0;
    while let Err(error) = handle.unmount(false) {
        attempts += 1;
        assert!(
            error.raw_os_error() == Some(libc::EBUSY) && attempts < 50,
            "unmount: {error}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // A failed test still unmounts (lazily) before the pool goes.
        if let Some(mut handle) = self.handle.take() {
            let _ = handle.unmount(true);
        }
    }
}

pub fn pattern(length: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..length)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

pub fn run(command: &str) -> String {
    let output = Command::new("sh").arg("-c").arg(command).output().unwrap();
    assert!(
        output.status.success(),
        "{command} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn errno(result: std::io::Result<impl Sized>) -> i32 {
    match result {
        Ok(_) => panic!("expected an error"),
        Err(error) => error.raw_os_error().expect("an OS error"),
    }
}
