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
    /// The transport to ask for: FUSE over io_uring or `/dev/fuse` (see `transport`).
    pub transport: TransportChoice,
    /// The ring's shape, when the mount gets one (workers per CPU, pinning, entry size).
    pub uring: UringOptions,
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
            transport: MountOptions::transport_default(),
            uring: UringOptions::default(),
        }
    }

    /// The process's transport (the daemon's `--fuse-transport`), else the one named by
    /// `TARN_FUSE_TRANSPORT`, else `auto` (the ring when the kernel offers it). A name that is
    /// not a transport is logged and `auto` used: the daemon refuses it before any mount.
    pub fn transport_default() -> TransportChoice {
        crate::transport::default_transport().unwrap_or_else(|error| {
            log::error!("tarn fuse: {error}; using auto");
            TransportChoice::Auto
        })
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
    // The engine applies the umask itself: with a default ACL it must not (POSIX ACL
    // inheritance), and without one applying it twice changes nothing.
    let _ = config.add_capabilities(InitFlags::FUSE_DONT_MASK);
    // The adapter clears setuid and setgid itself (`kill_privileges`), so the kernel need not
    // look for security.capability before each write.
    if config
        .add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
        .is_err()
    {
        log::info!("tarn fuse: the kernel does not offer FUSE_HANDLE_KILLPRIV_V2");
    }
    // Files opened for direct I/O (sync=always) may still be mapped shared.
    let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
    // Attributes with the names of a listing (readdir.rs), when the kernel wants them.
    let _ =
        config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
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
    config.transport = options.transport;
    config.uring = options.uring.clone();
    let session = fuser::spawn_mount(filesystem, mountpoint, &config)?;
    // Its statfs also settles the transport: the first request after INIT goes through the
    // ring once every queue has registered, or through /dev/fuse after a fallback.
    tune_backing_device(mountpoint, options.dirty_max);
    match session.transport() {
        TransportState::Dev { reason } => log::debug!(
            "tarn fuse: {} is served through /dev/fuse ({reason})",
            mountpoint.display()
        ),
        state => log::debug!(
            "tarn fuse: {} is served through FUSE over io_uring ({state:?})",
            mountpoint.display()
        ),
    }
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
/// [`WRITE_BACK_PATIENCE`] (a mount whose requests cannot be served, such as a suspended
/// pool's): the write-back goes on in its child.
///
/// The open and the syncfs run in a child process that holds no descriptor but the
/// directory's. syncfs waits uninterruptibly for the pages it writes back, and so for the
/// answers of this process's own FUSE workers: a thread of this process stuck there when the
/// process is killed (SIGKILL) would keep its descriptor table, and with it `/dev/fuse`, open
/// for good; the kernel would never abort the connection, nothing would answer, and the process
/// could not exit. A stuck child holds no `/dev/fuse`: this process's death closes the device,
/// the kernel aborts the connection, the write-back fails and the child exits too.
pub(crate) fn write_back_mount(mountpoint: &Path) -> io::Result<()> {
    write_back_mounts(&[mountpoint])
}

/// [`write_back_mount`] for several mounts: one child syncs each in turn, and its exit status
/// is the first failure's errno (the others are synced regardless). A fork copies the page
/// tables of the whole daemon, a thousand worker stacks with a hundred mounts: one per mount
/// made a `snapshot -r` of 100 mounted file systems take 5 s, nearly all of it in fork.
pub(crate) fn write_back_mounts(mountpoints: &[&Path]) -> io::Result<()> {
    let paths = (mountpoints.iter())
        .map(|mountpoint| std::ffi::CString::new(mountpoint.as_os_str().as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in mount point"))?;
    let Some(first) = mountpoints.first() else {
        return Ok(());
    };
    let described = match mountpoints.len() {
        1 => first.display().to_string(),
        more => format!("{} and {} other mounts", first.display(), more - 1),
    };
    let _in_progress = WriteBackInProgress::begin();
    // Everything the child uses is made before the fork: after fork in a multi-threaded
    // process the child may make async-signal-safe calls only (no allocation, no locks).
    // SAFETY: sysconf has no memory preconditions.
    let open_max = match unsafe { libc::sysconf(libc::_SC_OPEN_MAX) } {
        limit if limit > 0 => limit as libc::c_int,
        _ => 1024,
    };
    // SAFETY: the child runs `syncfs_child` only, which makes system calls and never returns.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    if child == 0 {
        // SAFETY: in the child, with `paths` made before the fork.
        unsafe { syncfs_child(&paths, open_max) }
    }
    // A thread of its own waits for (and reaps) the child, whatever the patience decides; it
    // waits in waitpid, which a kill ends.
    with_patience(&described, move || {
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid out-parameter.
        while unsafe { libc::waitpid(child, &mut status, 0) } < 0 {
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
        if libc::WIFEXITED(status) {
            match libc::WEXITSTATUS(status) {
                0 => Ok(()),
                errno => Err(io::Error::from_raw_os_error(errno)),
            }
        } else {
            Err(io::Error::other(format!(
                "the write-back child ended with status {status:#x}"
            )))
        }
    })
}

/// The child of [`write_back_mounts`]: close every descriptor, open each of `paths` and
/// syncfs it, and exit with 0 or the errno of the first call that failed (every errno fits a
/// byte).
///
/// # Safety
/// Call only in a child just forked; it makes async-signal-safe system calls only.
unsafe fn syncfs_child(paths: &[std::ffi::CString], open_max: libc::c_int) -> ! {
    // SAFETY: system calls on descriptors and a NUL-terminated path made before the fork.
    unsafe {
        // No descriptor of the parent survives, /dev/fuse least of all (a daemon started
        // with stdio closed may hold it as 0, 1 or 2; the child writes nothing).
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..open_max {
                libc::close(fd);
            }
        }
        let mut status = 0;
        for path in paths {
            // Even the open waits for the mount's server.
            let directory = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
            if (directory < 0 || libc::syncfs(directory) != 0) && status == 0 {
                status = errno_byte();
            }
            if directory >= 0 {
                libc::close(directory);
            }
        }
        libc::_exit(status)
    }
}

/// A child process that aborts a FUSE connection if the thread that started it dies (the
/// daemon killed) before the watch is dropped: `PR_SET_PDEATHSIG` tells it. It holds no
/// descriptor but its end of a pipe, whose other end the drop closes to let it go. Only root
/// may write a connection's `abort`; otherwise the watch does nothing useful, and costs a fork.
struct DeathWatch {
    child: libc::pid_t,
    pipe: libc::c_int,
}

impl DeathWatch {
    fn start(connection: u32) -> Option<DeathWatch> {
        // Everything the child uses is made before the fork (see `write_back_mount`).
        let abort =
            std::ffi::CString::new(format!("/sys/fs/fuse/connections/{connection}/abort")).ok()?;
        let mut ends = [0; 2];
        // SAFETY: pipe2 fills the two-element array.
        if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the child runs `death_watch_child` only, which never returns.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: in the child, with everything made before the fork.
            unsafe { death_watch_child(ends[0], &abort, parent) }
        }
        // SAFETY: our own read end, which only the child uses.
        unsafe { libc::close(ends[0]) };
        if child < 0 {
            // SAFETY: our own write end.
            unsafe { libc::close(ends[1]) };
            return None;
        }
        Some(DeathWatch {
            child,
            pipe: ends[1],
        })
    }
}

impl Drop for DeathWatch {
    fn drop(&mut self) {
        // SAFETY: closing our write end lets the child go at once; then reap it.
        unsafe {
            libc::close(self.pipe);
            let mut status = 0;
            while libc::waitpid(self.child, &mut status, 0) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
        }
    }
}

/// The child of [`DeathWatch`]: wait until the pipe `pipe` is closed (exit) or the parent
/// thread dies (SIGUSR2 by `PR_SET_PDEATHSIG`: write 1 to `abort`, then exit).
///
/// # Safety
/// Call only in a child just forked; it makes async-signal-safe system calls only.
unsafe fn death_watch_child(pipe: libc::c_int, abort: &std::ffi::CStr, parent: libc::pid_t) -> ! {
    // SAFETY: system calls on this process's own descriptors, signal set and the path made
    // before the fork.
    unsafe {
        let mut signals: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut signals);
        libc::sigaddset(&mut signals, libc::SIGUSR2);
        libc::sigprocmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGUSR2 as libc::c_ulong);
        // Keep the pipe only: /dev/fuse must not be held here.
        if pipe > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (pipe - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (pipe + 1) as u32, u32::MAX, 0u32);
        let mut parent_died = libc::getppid() != parent;
        let no_wait = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        while !parent_died {
            // The pipe's closing ends the wait at once; a death is seen within 100 ms.
            let mut ready = libc::pollfd {
                fd: pipe,
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&mut ready, 1, 100) > 0 {
                libc::_exit(0);
            }
            parent_died =
                libc::sigtimedwait(&signals, std::ptr::null_mut(), &no_wait) == libc::SIGUSR2;
        }
        // The parent thread died: abort the connection, which ends its kernel waits.
        let file = libc::open(abort.as_ptr(), libc::O_WRONLY);
        if file >= 0 {
            libc::write(file, b"1".as_ptr().cast(), 1);
        }
        libc::_exit(0)
    }
}

/// This thread's errno as an exit status (never 0).
fn errno_byte() -> libc::c_int {
    // SAFETY: __errno_location returns this thread's errno; reading it is async-signal-safe.
    match unsafe { *libc::__errno_location() } {
        errno @ 1..=255 => errno,
        _ => libc::EIO,
    }
}

/// Write-backs of this process's mounts in progress, for the test hook
/// [`stall_write_back_for_tests`].
static WRITE_BACKS_IN_PROGRESS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Counts a write-back in [`WRITE_BACKS_IN_PROGRESS`] while it lives.
struct WriteBackInProgress;

impl WriteBackInProgress {
    fn begin() -> WriteBackInProgress {
        WRITE_BACKS_IN_PROGRESS.fetch_add(1, Ordering::SeqCst);
        WriteBackInProgress
    }
}

impl Drop for WriteBackInProgress {
    fn drop(&mut self) {
        WRITE_BACKS_IN_PROGRESS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The environment variable of the test hook [`stall_write_back_for_tests`]: seconds.
const STALL_WRITE_BACK_VARIABLE: &str = "TARN_TEST_STALL_WRITE_BACK";

/// A test hook: with `TARN_TEST_STALL_WRITE_BACK=SECONDS` in the environment, a worker serving
/// a write of the kernel's page cache while [`write_back_mount`] runs in this process sleeps
/// that long first, so that a test can kill the daemon at the moment its syncfs waits for a
/// request a worker has taken (tests/suite/writeback_kill.rs of tarn-cli). Costs one atomic load
/// otherwise.
pub(crate) fn stall_write_back_for_tests() {
    static STALL: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    if WRITE_BACKS_IN_PROGRESS.load(Ordering::SeqCst) == 0 {
        return;
    }
    let stall = STALL.get_or_init(|| {
        std::env::var(STALL_WRITE_BACK_VARIABLE)
            .ok()
            .and_then(|seconds| seconds.parse().ok())
            .map(Duration::from_secs)
    });
    if let Some(stall) = stall {
        log::warn!("tarn fuse: {STALL_WRITE_BACK_VARIABLE}: a write-back write waits {stall:?}");
        std::thread::sleep(*stall);
    }
}

/// Run `work`, which waits for the kernel's write-back of the mount at `mountpoint` (or for
/// the child doing it), in a thread of its own, and wait for it at most
/// [`WRITE_BACK_PATIENCE`].
fn with_patience<T: Send + 'static>(
    described: &str,
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("tarn-fuse-syncfs".into())
        .spawn(move || {
            let _ = done.send(work());
        })?;
    wait.recv_timeout(WRITE_BACK_PATIENCE).unwrap_or_else(|_| {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the kernel's write-back to {described} is still running"),
        ))
    })
}

/// Drop the kernel's pages of `inodes` in the mount at `mountpoint`, which makes the kernel
/// write their dirty pages back and wait for them (it launders each page); how many of the
/// invalidations it took. The invalidation is a write to this process's own `/dev/fuse` that
/// waits in the kernel for write requests this process's workers serve: killed meanwhile, the
/// process could never exit. So it runs in a thread of its own, waited for at most
/// [`WRITE_BACK_PATIENCE`], while the calling thread holds a [`DeathWatch`] (the watch must
/// belong to a thread that a kill ends, not to the one the kernel holds), which aborts the
/// mount's connection if the process dies first and so ends the wait.
pub(crate) fn write_back_pages(
    mountpoint: &Path,
    shared: Arc<Shared>,
    inodes: Vec<u64>,
) -> io::Result<usize> {
    let _in_progress = WriteBackInProgress::begin();
    let _watch = mountpoint::fuse_connection(mountpoint).and_then(DeathWatch::start);
    with_patience(&mountpoint.display().to_string(), move || {
        Ok(shared.kernel.invalidate(&inodes, &[]))
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
    ///
    /// The invalidation waits in the kernel, in a write to this process's own `/dev/fuse`, for
    /// pages whose write-back requests this process's workers serve: killed meanwhile, the
    /// process could never exit (see [`write_back_mount`]). A [`DeathWatch`] child aborts the
    /// mount's connection if this thread dies first, which ends that wait.
    pub fn write_back(&self) -> io::Result<()> {
        let _in_progress = WriteBackInProgress::begin();
        write_back_mount(&self.mountpoint)?;
        self.write_back_open_files()
    }

    /// [`MountControl::write_back`] of several mounts, the syncfs of all in one child
    /// ([`write_back_mounts`]); each mount's result, in order. If that child fails, each mount
    /// is written back on its own, so that a failure is told of the mount it belongs to.
    pub fn write_back_together(controls: &[&MountControl]) -> Vec<io::Result<()>> {
        let _in_progress = WriteBackInProgress::begin();
        let mountpoints: Vec<&Path> = (controls.iter())
            .map(|control| control.mountpoint.as_path())
            .collect();
        match write_back_mounts(&mountpoints) {
            Ok(()) => (controls.iter())
                .map(|control| control.write_back_open_files())
                .collect(),
            Err(_) => controls
                .iter()
                .map(|control| control.write_back())
                .collect(),
        }
    }

    /// The second half of [`MountControl::write_back`]: the pages of files open for writing.
    fn write_back_open_files(&self) -> io::Result<()> {
        let writers = self.shared.kernel.known_inodes_with_writers();
        if writers.is_empty() {
            return Ok(());
        }
        write_back_pages(&self.mountpoint, self.shared.clone(), writers).map(|_| ())
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

    /// The transport serving the mount's requests (`Dev` once unmounted).
    pub fn transport(&self) -> TransportState {
        match &self.session {
            Some(session) => session.transport(),
            None => TransportState::Dev {
                reason: "not mounted".to_string(),
            },
        }
    }

    /// The requests served so far, by opcode and transport.
    pub fn request_counts(&self) -> Vec<OpcodeCount> {
        self.session
            .as_ref()
            .map(BackgroundSession::request_counts)
            .unwrap_or_default()
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
        let mut aborted = false;
        if lazy {
            if let Some(connection) = connection {
                // Aborting the connection drops the kernel's dirty pages: write them back first
                // (a plain unmount does that itself).
                if let Err(error) = write_back_mount(&self.mountpoint) {
                    log::warn!(
                        "tarn fuse: writing back {} before a lazy unmount: {error}",
                        self.mountpoint.display()
                    );
                }
                // Abort while the mount still holds the connection: once detached, its number
                // (the superblock's device minor) is free, and another mount made meanwhile,
                // by any process, could get it and be aborted instead (a mount created just
                // then failed with ENOTCONN under CI).
                aborted = mountpoint::abort_connection(connection);
            }
        }
        if let Err(error) = mountpoint::unmount_path(&self.mountpoint, lazy) {
            if connection.is_some() && !aborted {
                self.session = Some(session);
                return Err(error);
            }
            // Not mounted any more (someone ran umount), or aborted: just stop serving.
        }
        if lazy && connection.is_some() && !aborted {
            // Without the abort the connection lives until its last open file is closed, and
            // the threads serve until then: leave them, do not wait.
            log::warn!(
                "tarn fuse: cannot abort the FUSE connection of {}; it is served until its \
                 last file is closed",
                self.mountpoint.display()
            );
            drop(session);
            return Ok(());
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
