//! Mounting: the options a mount is made with, the kernel settings negotiated at init, the
//! background session and its handle (unmount, lazily on drop), and the control a daemon keeps
//! to invalidate the kernel's caches of a mount after a rollback or a snapshot change.

use super::*;

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// The name `mount` and `df` show (`tarn:POOL`).
    pub fsname: String,
    /// Worker threads serving requests.
    pub threads: usize,
    /// Let other users in, when this process may (root, or `user_allow_other` in
    /// /etc/fuse.conf); otherwise only the mounting user.
    pub allow_other: bool,
    /// Mount read-only (the dataset's readonly property): the kernel refuses every change
    /// with EROFS.
    pub read_only: bool,
    /// List `.zfs` in the root directory (the dataset's snapdir property); changed while
    /// mounted with [`MountControl::set_snapdir_visible`].
    pub snapdir_visible: bool,
    /// The most dirty bytes the kernel may cache for this mount (its backing device's
    /// `max_bytes`, with `strict_limit`): see `write_space`. A tarn mount sets it from the
    /// pool's size.
    pub dirty_max: u64,
}

impl MountOptions {
    /// Options with [`MountOptions::threads_default`] threads and `allow_other`.
    pub fn new(fsname: impl Into<String>) -> MountOptions {
        MountOptions {
            fsname: fsname.into(),
            threads: MountOptions::threads_default(),
            allow_other: true,
            read_only: false,
            snapdir_visible: false,
            dirty_max: crate::DIRTY_MAX_LIMIT,
        }
    }

    /// Four worker threads per CPU, at least 16 and at most 64. Workers block: a write
    /// waiting out the write throttle holds its thread, and a bulk writer's writeback keeps
    /// many such writes in flight, so with few workers an fsync, a stat or a read waits in the
    /// kernel's queue behind sleeping writes. With 4 workers (2 CPUs) a 4 KiB write + fsync
    /// beside a sequential writer had a p99 of 126-132 ms; with 16, 32-40 ms. A sleeping
    /// worker costs its stack and request buffer only.
    pub fn threads_default() -> usize {
        std::thread::available_parallelism()
            .map(|n| n.get() * 4)
            .unwrap_or(16)
            .clamp(16, 64)
    }
}

/// Whether this process may mount with `allow_other`.
pub fn allow_other_possible() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    std::fs::read_to_string("/etc/fuse.conf")
        .map(|text| text.lines().any(|line| line.trim() == "user_allow_other"))
        .unwrap_or(false)
}

/// A mounted file system served by background threads; unmounted lazily when dropped.
pub struct MountHandle {
    session: Option<BackgroundSession>,
    mountpoint: PathBuf,
    control: Option<MountControl>,
}

/// The kernel settings every tarn mount negotiates at FUSE init (and the null file system of
/// `tarn bench mount`, so that its figures compare like with like).
pub fn configure_kernel(config: &mut KernelConfig) {
    // Ask for 1 MiB writes; older kernels cap lower, which is fine. fuser asks for
    // FUSE_MAX_PAGES itself and sizes max_pages from max_write.
    let _ = config.set_max_write(WRITE_BYTES_MAX);
    // Lookups and readdirs in one directory may run in parallel: the engine locks.
    let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
    // The kernel's page cache holds writes and sends them in large batches, and owns the size
    // and times of a file it caches (crate documentation, "The kernel's caches").
    if config
        .add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE)
        .is_err()
    {
        log::warn!("tarn fuse: the kernel offers no writeback cache; every write is a request");
    }
    // Readahead as large as the kernel offers here (often 128 KiB); the mount raises it
    // afterwards (see `tune_backing_device`).
    if let Err(offered) = config.set_max_readahead(READAHEAD_BYTES) {
        let _ = config.set_max_readahead(offered);
    }
}

/// Tune the backing device of the FUSE mount at `mountpoint` (`/sys/class/bdi/MAJ:MIN`):
/// - readahead to [`READAHEAD_BYTES`] (`read_ahead_kb`): at FUSE init the kernel offers only its
///   default readahead (128 KiB), and sequential reads through FUSE go as fast as the requests
///   are large;
/// - the kernel's dirty bytes to `dirty_max` (`strict_limit`, which FUSE sets by default, and
///   `max_bytes`), the bound `write_space` holds space back for.
///
/// The statfs first waits for the FUSE init to finish, which would otherwise lower the
/// readahead again; it is statfs, not stat, because a stat would leave the root's attributes
/// cached, and a stat answered from that cache hides a dead mount from
/// [`mountpoint::is_dead_fuse_mount`]. Not being able to (no sysfs, not root) costs speed, and
/// leaves the kernel's own bound on dirty bytes (1% of its dirty limit), which is logged.
fn tune_backing_device(mountpoint: &Path, dirty_max: u64) {
    let Ok(path) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: a NUL-terminated path and a zeroed statfs buffer that the call fills.
    let mut figures: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(path.as_ptr(), &mut figures) } != 0 {
        return;
    }
    let Some(entry) = mountpoint::mount_at(mountpoint) else {
        return;
    };
    let device = format!(
        "/sys/class/bdi/{}:{}",
        entry.device_major, entry.device_minor
    );
    let _ = std::fs::write(
        format!("{device}/read_ahead_kb"),
        (READAHEAD_BYTES >> 10).to_string(),
    );
    let limited = std::fs::write(format!("{device}/strict_limit"), "1")
        .and_then(|()| std::fs::write(format!("{device}/max_bytes"), dirty_max.to_string()));
    if let Err(error) = limited {
        log::warn!(
            "tarn fuse: cannot bound the dirty bytes of {} to {dirty_max} ({device}: {error})",
            mountpoint.display()
        );
    }
}

/// Mount `filesystem` at `mountpoint` with tarn's mount options and serve it from background
/// threads. Every tarn mount goes through here, and so does the null file system of `tarn
/// bench mount`.
pub fn mount_filesystem<FS: Filesystem + Send + 'static>(
    filesystem: FS,
    mountpoint: &Path,
    options: &MountOptions,
) -> io::Result<MountHandle> {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(options.fsname.clone()),
        MountOption::Subtype("tarn".into()),
        MountOption::DefaultPermissions,
        if options.read_only {
            MountOption::RO
        } else {
            MountOption::RW
        },
        MountOption::Dev,
        MountOption::Suid,
        MountOption::Exec,
        MountOption::Async,
    ];
    if options.allow_other && allow_other_possible() {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(options.threads.max(1));
    config.clone_fd = true;
    let session = fuser::spawn_mount(filesystem, mountpoint, &config)?;
    tune_backing_device(mountpoint, options.dirty_max);
    Ok(MountHandle {
        session: Some(session),
        mountpoint: mountpoint.to_path_buf(),
        control: None,
    })
}

/// Mount `fs` at `mountpoint` and serve it from background threads (`.zfs/snapshot` empty).
pub fn mount(
    fs: Arc<FileSystem>,
    mountpoint: &Path,
    options: &MountOptions,
) -> io::Result<MountHandle> {
    mount_with_snapshots(fs, Arc::new(NoSnapshots), mountpoint, options)
}

/// Mount `fs` at `mountpoint` with `snapshots` under `.zfs/snapshot`, and serve it from
/// background threads. [`MountHandle::control`] keeps the mount in line with changes made
/// behind its back (rollback, snapshot destroy and rename, the snapdir property).
pub fn mount_with_snapshots(
    fs: Arc<FileSystem>,
    snapshots: Arc<dyn SnapshotSource>,
    mountpoint: &Path,
    options: &MountOptions,
) -> io::Result<MountHandle> {
    let adapter = TarnFuse::with_snapshots(
        fs,
        options.fsname.clone(),
        snapshots,
        options.snapdir_visible,
    );
    let shared = adapter.shared.clone();
    let options = MountOptions {
        dirty_max: shared.space.dirty_max(),
        ..options.clone()
    };
    let mut handle = mount_filesystem(adapter, mountpoint, &options)?;
    if let Some(session) = &handle.session {
        shared.kernel.set_notifier(session.notifier());
    }
    let _ = shared.mountpoint.set(mountpoint.to_path_buf());
    handle.control = Some(MountControl {
        shared,
        mountpoint: mountpoint.to_path_buf(),
    });
    Ok(handle)
}

/// Keeps a tarn mount in line with changes made behind the kernel's back. Cheap to clone; the
/// daemon keeps one per mount. Never call it from a FUSE request handler of the same mount
/// (the kernel may wait for requests in progress before it invalidates).
#[derive(Clone)]
pub struct MountControl {
    shared: Arc<Shared>,
    mountpoint: PathBuf,
}

/// Have the kernel write back every dirty page of the FUSE mount at `mountpoint` (and the
/// times of the files it caches, as setattrs) and wait until the file system has them
/// (syncfs(2); for FUSE it sends no request of its own). Gives up waiting after
/// [`WRITE_BACK_PATIENCE`]
/// (a mount whose requests cannot be served, such as a suspended pool's): the write-back
/// goes on in a thread of its own.
pub(crate) fn write_back_mount(mountpoint: &Path) -> io::Result<()> {
    let path = mountpoint.to_path_buf();
    // Even the open waits for the mount's daemon.
    with_patience(mountpoint, move || {
        std::fs::File::open(&path).and_then(|directory| {
            use std::os::fd::AsRawFd;
            // SAFETY: syncfs on a descriptor this thread owns until the call returns.
            match unsafe { libc::syncfs(directory.as_raw_fd()) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        })
    })
}

/// Run `work`, which waits for the kernel's write-back of the mount at `mountpoint`, in a
/// thread of its own, and wait for it at most [`WRITE_BACK_PATIENCE`].
fn with_patience(
    mountpoint: &Path,
    work: impl FnOnce() -> io::Result<()> + Send + 'static,
) -> io::Result<()> {
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("tarn-fuse-syncfs".into())
        .spawn(move || {
            let _ = done.send(work());
        })?;
    wait.recv_timeout(WRITE_BACK_PATIENCE).unwrap_or_else(|_| {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the kernel's write-back to {} is still running",
                mountpoint.display()
            ),
        ))
    })
}

/// How long a write-back of a mount may take before its caller goes on without it.
const WRITE_BACK_PATIENCE: Duration = Duration::from_secs(30);

/// What an invalidation did, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Invalidated {
    /// Inodes and entries whose cached attributes, pages or names the kernel dropped.
    pub notifications: usize,
    /// Opened snapshots dropped because they are no longer listed.
    pub snapshots_dropped: usize,
}

impl MountControl {
    /// Show `.zfs` in the root's listing or not (snapdir=visible|hidden); at once.
    pub fn set_snapdir_visible(&self, visible: bool) {
        let was = self.shared.snapdir_visible.swap(visible, Ordering::Relaxed);
        if was != visible {
            // The root's attributes (its size) and any readdir cache.
            self.shared.kernel.invalidate(&[INodeNo::ROOT.0], &[]);
        }
    }

    pub fn snapdir_visible(&self) -> bool {
        self.shared.snapdir_visible.load(Ordering::Relaxed)
    }

    /// After snapshots were destroyed or renamed (or created): drop the opened snapshots no
    /// longer listed, so their freed blocks are never read through them (their inodes give
    /// ESTALE), and have the kernel forget `.zfs/snapshot`'s entries and the dropped
    /// snapshots' inodes.
    pub fn snapshots_changed(&self) -> Result<Invalidated, FsError> {
        let listed = self.shared.snapshots.list()?;
        let dropped = self.shared.snapshots.retain_listed(&listed);
        let inodes = self.shared.kernel.known_inodes(|ino| {
            ino == SNAPSHOT_DIR_INO
                || matches!(snapdir::decode(ino), InodeKind::Snapshot { record, .. }
                    if dropped.contains(&record))
        });
        let entries = self
            .shared
            .kernel
            .recent_entries(|parent| parent == SNAPSHOT_DIR_INO);
        let mut inodes = inodes;
        if !inodes.contains(&SNAPSHOT_DIR_INO) {
            inodes.push(SNAPSHOT_DIR_INO);
        }
        Ok(Invalidated {
            notifications: self.shared.kernel.invalidate(&inodes, &entries),
            snapshots_dropped: dropped.len(),
        })
    }

    /// After the mounted file system was rolled back (its object set reset in place): have
    /// the kernel drop every cached attribute, page and name of the head, then do what
    /// [`MountControl::snapshots_changed`] does (a rollback may destroy later snapshots).
    pub fn rolled_back(&self) -> Result<Invalidated, FsError> {
        // First, so that a lookup the kernel makes after an invalidation below sees a new
        // generation for every regular file.
        self.shared.rollbacks.fetch_add(1, Ordering::Relaxed);
        let mut inodes = self
            .shared
            .kernel
            .known_inodes(|ino| matches!(snapdir::decode(ino), InodeKind::Head(_)));
        if !inodes.contains(&INodeNo::ROOT.0) {
            inodes.push(INodeNo::ROOT.0);
        }
        let entries = self
            .shared
            .kernel
            .recent_entries(|parent| matches!(snapdir::decode(parent), InodeKind::Head(_)));
        let head = self.shared.kernel.invalidate(&inodes, &entries);
        let mut snapshots = self.snapshots_changed()?;
        snapshots.notifications += head;
        Ok(snapshots)
    }

    /// Have the kernel write the mount's dirty pages back to the file system and wait for it,
    /// so that the engine holds every write(2) that has returned (the writeback cache keeps
    /// them in the kernel otherwise, module documentation of the crate). Call before a
    /// snapshot, a rollback, a receive into the mounted file system or a pool sync that must
    /// include them; never from a FUSE request handler of the same mount.
    ///
    /// syncfs starts the write-back of every file; on kernels that do not wait for a FUSE
    /// mount's write-back in syncfs, dropping the pages of each file open for writing (the only
    /// files that can have dirty pages: a close writes them back) makes the kernel write them
    /// and wait, page by page. Both give up after [`WRITE_BACK_PATIENCE`].
    pub fn write_back(&self) -> io::Result<()> {
        write_back_mount(&self.mountpoint)?;
        let writers = self.shared.kernel.known_inodes_with_writers();
        if writers.is_empty() {
            return Ok(());
        }
        let shared = self.shared.clone();
        with_patience(&self.mountpoint, move || {
            shared.kernel.invalidate(&writers, &[]);
            Ok(())
        })
    }

    /// Records of the snapshots this mount has open (for tests).
    pub fn open_snapshots(&self) -> Vec<u64> {
        self.shared.snapshots.open_records()
    }
}

impl MountHandle {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The mount's control (None for a mount of another `Filesystem`, such as the null one).
    pub fn control(&self) -> Option<MountControl> {
        self.control.clone()
    }

    /// Unmount and wait for the serving threads. Without `lazy`, a busy mount (open files, a
    /// working directory inside) fails with EBUSY and stays mounted and served. With `lazy`,
    /// the mount is detached at once and its FUSE connection aborted: processes still inside
    /// get ENOTCONN, and the threads end.
    pub fn unmount(&mut self, lazy: bool) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let connection = mountpoint::fuse_connection(&self.mountpoint);
        if lazy && connection.is_some() {
            // Aborting the connection drops the kernel's dirty pages: write them back first
            // (a plain unmount does that itself).
            if let Err(error) = write_back_mount(&self.mountpoint) {
                log::warn!(
                    "tarn fuse: writing back {} before a lazy unmount: {error}",
                    self.mountpoint.display()
                );
            }
        }
        if let Err(error) = mountpoint::unmount_path(&self.mountpoint, lazy) {
            if connection.is_some() {
                self.session = Some(session);
                return Err(error);
            }
            // Not mounted any more (someone ran umount): just stop serving.
        }
        if lazy {
            let aborted = connection.is_some_and(mountpoint::abort_connection);
            if !aborted && connection.is_some() {
                // Without the abort the connection lives until its last open file is closed,
                // and the threads serve until then: leave them, do not wait.
                log::warn!(
                    "tarn fuse: cannot abort the FUSE connection of {}; it is served until its \
                     last file is closed",
                    self.mountpoint.display()
                );
                drop(session);
                return Ok(());
            }
        }
        // The threads see ENODEV (or ECONNABORTED after an abort) and end.
        let _ = session.join();
        Ok(())
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if let Err(error) = self.unmount(true) {
            log::error!(
                "tarn fuse: unmount of {} failed: {error}",
                self.mountpoint.display()
            );
        }
    }
}
