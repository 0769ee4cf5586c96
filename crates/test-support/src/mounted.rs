//! [`MountedPool`]: a pool made by the engine in this process, its root file system mounted
//! through tarn-fuse, for the FUSE crate's tests, which test the mount itself without a
//! daemon; and the small readers those tests share.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn::debug::check_pool;
use tarn::tunables::Tunables;
use tarn::{CreateOptions, ImportOptions, Pool, SpaceFigures, VdevSpec};
use tarn_fuse::{mount, MountControl, MountHandle, MountOptions};

use crate::Requirement;

/// How a [`MountedPool`] mounts its pool's root file system at a mount point under a name
/// (`tarn:NAME` is the mount's source).
pub type MountFn = fn(&Pool, &Path, &str) -> MountHandle;

/// A pool on one sparse file (`disk0`) in a temporary directory, created by the engine, with
/// its root file system mounted at `DIR/mnt` in this process. [`MountedPool::finish`] ends a
/// passing test: unmount, let background frees finish, `check` clean, export. On drop (a
/// failing test) the mount is detached lazily before the pool goes.
pub struct MountedPool {
    dir: tempfile::TempDir,
    name: String,
    mount_fn: MountFn,
    pub mountpoint: PathBuf,
    pub handle: Option<MountHandle>,
    pub pool: Option<Pool>,
}

impl MountedPool {
    /// Pool `name` of 512 MiB mounted by [`mount_root`]; `None`, with the skip recorded, when
    /// `/dev/fuse` is missing.
    pub fn new(name: &str) -> Option<MountedPool> {
        MountedPool::mounted_by(name, 512 << 20, mount_root)
    }

    /// Pool `name` of `size` bytes mounted by `mount_fn` (e.g. with a `.zfs` directory).
    pub fn mounted_by(name: &str, size: u64, mount_fn: MountFn) -> Option<MountedPool> {
        if !crate::requires(&[Requirement::Fuse]) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::create(CreateOptions {
            name: name.into(),
            log: Vec::new(),
            cache: Vec::new(),
            vdevs: vec![VdevSpec::Leaf(dir.path().join("disk0"))],
            create_size: Some(size),
            force: false,
            tunables: Tunables::default(),
            wrap_device: None,
            disabled_features: Vec::new(),
        })
        .expect("create pool");
        let mountpoint = dir.path().join("mnt");
        fs::create_dir(&mountpoint).unwrap();
        let mut fixture = MountedPool {
            dir,
            name: name.to_string(),
            mount_fn,
            mountpoint,
            handle: None,
            pool: Some(pool),
        };
        fixture.mount();
        Some(fixture)
    }

    /// Mount the pool's root file system (again) at the mount point.
    pub fn mount(&mut self) {
        let handle = (self.mount_fn)(self.pool(), &self.mountpoint, &self.name);
        self.handle = Some(handle);
    }

    pub fn pool(&self) -> &Pool {
        self.pool.as_ref().unwrap()
    }

    /// The mount's control (its open snapshots, its inode table).
    pub fn control(&self) -> MountControl {
        self.handle.as_ref().unwrap().control().unwrap()
    }

    /// A path below the mount point.
    pub fn path(&self, relative: &str) -> PathBuf {
        self.mountpoint.join(relative)
    }

    /// Unmount (see [`unmount_patiently`]).
    pub fn unmount(&mut self) {
        unmount_patiently(self.handle.take().unwrap());
    }

    /// Unmount (plainly: the kernel writes its cached pages back first) and mount the root
    /// file system again from the engine, so that nothing the kernel cached survives.
    pub fn remount(&mut self) {
        self.unmount();
        self.mount();
    }

    /// Export and import the pool again (unmounted meanwhile), and mount it.
    pub fn reimport(&mut self) {
        self.unmount();
        self.pool.take().unwrap().export().expect("export");
        let (pool, _) = Pool::import(
            &self.name,
            ImportOptions::new(vec![self.dir.path().to_path_buf()], Tunables::default()),
        )
        .expect("import");
        self.pool = Some(pool);
        self.mount();
    }

    /// Unmount, let the background frees (deletes, rollback, snapshot destroy) finish, check
    /// the pool and export it.
    pub fn finish(mut self) {
        self.unmount();
        let pool = self.pool.take().unwrap();
        let started = Instant::now();
        while pool.core.freeing_bytes().unwrap() > 0
            || pool.core.queued_livelist_count().unwrap() > 0
        {
            assert!(started.elapsed().as_secs() < 60, "frees never finished");
            pool.sync().unwrap();
        }
        pool.sync().unwrap();
        pool.sync().unwrap();
        let report = check_pool(&pool, false).expect("check runs");
        assert!(report.is_clean(), "check found problems: {report:#?}");
        pool.export().expect("export");
    }
}

impl Drop for MountedPool {
    fn drop(&mut self) {
        // A failed test still unmounts (lazily) before the pool goes.
        if let Some(mut handle) = self.handle.take() {
            let _ = handle.unmount(true);
        }
    }
}

/// Mount the root file system of `pool` at `mountpoint`, with `statfs` answered from the
/// pool's space figures as the daemon answers it.
pub fn mount_root(pool: &Pool, mountpoint: &Path, name: &str) -> MountHandle {
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
pub fn unmount_patiently(mut handle: MountHandle) {
    let mut attempts = 0;
    while let Err(error) = handle.unmount(false) {
        attempts += 1;
        assert!(
            error.raw_os_error() == Some(libc::EBUSY) && attempts < 50,
            "unmount: {error}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The errno of a call that must fail with an OS error.
#[track_caller]
pub fn errno(result: std::io::Result<impl Sized>) -> i32 {
    match result {
        Ok(_) => panic!("succeeded, an error was expected"),
        Err(error) => error.raw_os_error().expect("an OS error"),
    }
}

/// Run `command` with `sh -c`; it must succeed. Returns its stdout.
#[track_caller]
pub fn sh(command: &str) -> String {
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{command} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
