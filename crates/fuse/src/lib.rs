//! The FUSE adapter: serves a [`tarn::fs::FileSystem`] through the kernel's FUSE, with the
//! `fuser` crate (pure Rust, no libfuse: mounted directly with mount(2) as root, else through
//! the setuid `fusermount3` helper).
//!
//! # What it maps
//! FUSE requests become calls of [`FileSystem`] with inode numbers. A tarn inode number is its
//! object number; FUSE insists that the root is inode 1, and object 1 is the file system's
//! master node (never an inode), so the two swap exactly there: FUSE inode 1 is
//! `fs.root()`, and the object `fs.root()` is reported to FUSE as 1. Every other number passes
//! unchanged. Entry replies carry the object's generation (its creation txg), so the kernel
//! never confuses a reused object number with the inode it cached. Attribute and entry TTLs
//! are [`TTL`] (30 s); what changes the file system behind the kernel's back (a rollback, a
//! receive, a snapshot destroyed or renamed) is invalidated explicitly (below). `open`/`create` call [`FileSystem::open_inode`] and
//! `release` calls [`FileSystem::release`], so a file unlinked while open keeps its data until
//! the last close (the unlinked set). Permissions are checked by the kernel
//! (`default_permissions`), so there is no `access`; with `acltype=posix` the mount also
//! negotiates `FUSE_POSIX_ACL` and the kernel enforces the POSIX ACLs the engine keeps as
//! xattrs. Every mount negotiates `FUSE_DONT_MASK`: the umask travels with each create and
//! the engine applies it unless a default ACL is inherited. Every mount negotiates
//! `FUSE_HANDLE_KILLPRIV_V2`: the adapter, not the kernel, clears setuid and setgid (setgid
//! only with group execute, as the VFS does) on a write the kernel marks
//! `FUSE_WRITE_KILL_SUIDGID`, on a truncate by a caller other than root (the kernel's
//! `FATTR_KILL_SUIDGID` there means "no CAP_FSETID", a bit fuser does not pass on; uid 0
//! stands for it) and on a chown of anything but a directory. In return the kernel stops
//! asking for `security.capability` before every write(2) (a GETXATTR round trip per write,
//! most of a small write's cost: `SB_NOSEC`); it still removes that xattr itself. A file
//! opened for writing while `sync=always` is opened for direct I/O, so that each write reaches
//! the engine (and its commit) before write(2) returns; so is one opened while the pool is
//! nearly full, so that write(2) answers ENOSPC (or a short write) itself ([`write_space`],
//! which also holds space back for what the cache has accepted). Xattr replies follow the FUSE size
//! probe (size 0 asks for the length; a smaller buffer is ERANGE); `fallocate`, `lseek`
//! (SEEK_DATA / SEEK_HOLE) and `copy_file_range` go to the engine's `fs::ranges`; the file
//! attribute ioctls (`chattr -p`, `chattr +P`, `lsattr -p`) carry a node's project ID and a
//! directory's project inherit flag ([`fileattr`]). Otherwise no `direct_io`: the page cache
//! serves reads and shared mmap works (git, sqlite).
//!
//! # The kernel's caches, and who owns size and mtime
//! Every mount negotiates `FUSE_WRITEBACK_CACHE`: write(2) fills the kernel's page cache and
//! returns; the kernel writes dirty pages back in large requests (up to [`WRITE_BYTES_MAX`])
//! when it wants, and always before a `flush` (every close), an `fsync`, a truncate, an open
//! that drops the cache, and an invalidation. While the kernel caches a regular file's inode it
//! owns the file's size, mtime and ctime: it extends the size on a write past the end, stamps
//! the times itself and sends them with a `setattr` (mtime, ctime) when it writes the inode
//! back, and it ignores the size and times of every attribute reply for that inode (Linux
//! `fuse_get_cache_mask`), so a `getattr` answered from the engine before the pages arrive
//! cannot shrink a file the kernel has grown. The engine catches up when the pages and the
//! `setattr` arrive; what the kernel has not written back is not in the engine yet (a
//! snapshot, a `tarn pool sync` or a kill of the daemon does not see it, which is why the
//! daemon has the kernel write a mount's pages back first: [`MountControl::write_back`]).
//! Truncation is a `setattr` with a size, which the kernel sends after writing back and
//! dropping the pages past it. `O_APPEND` is the kernel's: it appends at its own size under the
//! inode lock, so appenders in several processes of one mount never overlap. With the writeback
//! cache the kernel may read a page of a file opened write-only (to fill a partial page); the
//! adapter never checks an open's access mode for reads, so that works. A shared mmap's dirty
//! pages are written back like any others (msync, fsync, close of the mapping).
//!
//! An open tells the kernel to keep the file's cached pages (`FOPEN_KEEP_CACHE`) when the file
//! is unchanged since its last open (`kernel_cache.rs`, content versions); otherwise the
//! kernel drops them and reads again. Listings answer `readdirplus` (`readdir.rs`), so a
//! listing also caches each entry and its attributes for [`TTL`], and the kernel keeps each
//! directory's listing (`FOPEN_CACHE_DIR` with `FOPEN_KEEP_CACHE`) until the directory
//! changes through the mount or its pages are invalidated. A change made behind the
//! kernel's back (rollback, receive) is invalidated below.
//!
//! # Snapshots: `.zfs/snapshot`
//! Every mount has `.zfs/snapshot/NAME`, each snapshot's root, read-only, in the same mount
//! (FUSE cannot mount them separately). Inode numbers: the head's are its object numbers (top
//! bit clear); a snapshot's have the top bit set, the snapshot record's MOS object number in
//! the next 24 bits and the object number in the low 39, so they never collide with the head's
//! or another snapshot's and are the same after a remount or an import. Generations of
//! snapshot inodes mix in the snapshot's creation txg. `.zfs` is listed in the root only with
//! `snapdir=visible`. The adapter learns about snapshots through
//! [`snapdir::SnapshotSource`] (implemented by the daemon) and opens them lazily. Layout,
//! limits and refusals are in [`snapdir`]; which file system an inode belongs to, and the
//! control directories, in `route.rs`.
//!
//! # Changes behind the kernel's back
//! The adapter tracks which inodes the kernel holds (lookup counts, `forget`) and which entries
//! it handed out in the last two TTLs (`kernel_cache.rs`). [`MountControl::rolled_back`] (after a
//! rollback of the mounted file system, whose object set the engine resets in place) has the
//! kernel drop the attributes and every cached page of each held head inode, and each recent
//! entry, through fuser's `Notifier`; paths then show the snapshot's state at once. Under the
//! writeback cache the kernel keeps its own size of a cached regular file whatever the engine
//! says, so every rollback also changes the generation the kernel is given for each regular
//! file (`route::rollback_generation`): the next lookup of a name marks the kernel's old inode
//! bad and builds a fresh one from the engine. A regular file held open across a rollback
//! therefore fails with EIO from the next lookup of its name on (as an NFS handle goes stale),
//! never showing the old size or pages; until then its reads give the snapshot's contents (its
//! pages are dropped, mmaps included) and fail with ENOENT if it did not exist in the snapshot.
//! The daemon has the kernel write the mount's dirty pages back before it rolls back
//! ([`MountControl::write_back`]), so a write(2) that returned before the rollback started
//! does not land after it. An object number the rollback freed is handed out again
//! to a later file with a new generation; FUSE requests carry no generation, but the entry
//! reply of that creation makes the kernel mark the old inode bad, so a handle still open on
//! the old file gets EIO, never the new file's data (all creations in the head go through
//! this mount). [`MountControl::snapshots_changed`] (after a snapshot
//! destroy or rename) drops opened snapshots no longer listed and `.zfs/snapshot`'s entries;
//! requests for a destroyed snapshot's inodes fail with ESTALE even before that call (the
//! destroy marks the engine's snapshot before freeing anything; every request checks).
//!
//! # Errors
//! This is the only place where engine errors become errno:
//!
//! | [`FsError`] | errno |
//! | --- | --- |
//! | `NotFound` | ENOENT |
//! | `Exists` | EEXIST |
//! | `NotDir` | ENOTDIR |
//! | `IsDir` | EISDIR |
//! | `NotEmpty` | ENOTEMPTY |
//! | `NameTooLong` | ENAMETOOLONG |
//! | `InvalidName`, `Invalid` | EINVAL |
//! | `NoSpace` | ENOSPC |
//! | `QuotaExceeded` | EDQUOT |
//! | `Busy` | EBUSY |
//! | `ReadOnly` | EROFS |
//! | `Corrupt`, `Engine` | EIO (and a line in the daemon's log) |
//! | `NoData` | ENODATA |
//! | `NotSupported` | EOPNOTSUPP |
//! | `Range` | ERANGE |
//! | `TooBig` | E2BIG |
//! | `FileTooLarge` (a write past what the file's block tree addresses) | EFBIG |
//! | `PastEnd` | ENXIO |
//! | `CrossProject` (a link or rename into a directory that passes on another project) | EXDEV |
//!
//! And the adapter's own: any change below `.zfs`, or removing or replacing `.zfs`, is EROFS;
//! creating `.zfs` in the root EEXIST; a rename or link between the head and a snapshot (or two
//! snapshots) EXDEV; an inode of a snapshot that is gone ESTALE; an inode or snapshot record
//! beyond the numbering's limits EOVERFLOW.
//!
//! # Durability
//! The kernel writes a file's dirty pages back (and its times, as a `setattr`) before it sends
//! `fsync` or `fdatasync`; both then call [`FileSystem::fsync`], as does `fsyncdir`: the intent
//! log commits the
//! inode's logged changes (one log write and one flush, shared by concurrent fsyncs), and a
//! change the log does not record makes it wait for that change's txg. A write through a
//! descriptor opened with `O_SYNC` or `O_DSYNC` is committed the same way before it returns.
//! `flush` (close) does not sync, as on other file systems (the kernel has written the pages
//! back to the engine by then, so the next txg holds them).
//!
//! # Threads
//! The session runs [`MountOptions::threads`] worker threads, each reading requests from its
//! own clone of the `/dev/fuse` descriptor; every handler calls the engine directly and
//! replies. The adapter holds no lock of its own while it calls the engine. The pool's sync thread must never call
//! into FUSE, or wait for anything a FUSE request could hold: a request blocked on the write
//! throttle waits for that sync, so a sync that waited on FUSE would deadlock. In particular,
//! nothing that runs in syncing context may stat, open or unmount a path on a tarn mount.
//!
//! # Mounting and unmounting
//! [`mount`] returns a [`MountHandle`]. [`MountHandle::unmount`] unmounts: plainly (EBUSY while
//! a file is open or a process has its working directory inside), or lazily, which detaches
//! the mount at once and aborts the FUSE connection so that the session's threads end and the
//! pool can be exported. Dropping a handle unmounts lazily. [`mountpoint`] has the checks done
//! before a mount and the cleanup of a dead mount left by a crashed daemon.

pub mod fileattr;
mod kernel_cache;
mod mount;
pub mod mountpoint;
pub mod null;
mod privileges;
mod readdir;
mod route;
pub mod snapdir;
pub mod transport;
mod write_back;
mod write_space;
mod write_turns;

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    BackgroundSession, Config, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType,
    Filesystem, FopenFlags, Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner,
    MountOption, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionACL, TimeOrNow, WriteFlags,
};
use tarn::{Attr, FileKind, FileSystem, FsError, SeekTarget, SetAttr, SyncMode, Timestamp};

use kernel_cache::{ContentVersion, KernelCache};

thread_local! {
    /// Each request thread's list of the blocks a READ answer is written from, kept from one
    /// READ to the next (empty between them: a block held here would pin cache memory).
    static READ_PIECES: std::cell::RefCell<Vec<tarn::ReadPiece>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The most pieces a READ answer is written from as they lie (a `writev` takes at most 1024
/// slices, the answer's header among them).
const READ_PIECES_MAX: usize = 512;
pub use mount::{
    allow_other_possible, configure_kernel, mount, mount_filesystem, mount_with_snapshots,
    Invalidated, MountControl, MountHandle, MountOptions,
};
use readdir::PlusListing;
use route::Node;
use snapdir::{InodeKind, NoSnapshots, SnapshotSource, SnapshotTable, SNAPSHOT_DIR_INO};
pub use transport::{OpcodeCount, TransportChoice, TransportState, UringOptions};
pub use write_space::DIRTY_MAX_LIMIT;
use write_space::{WriteSpace, CACHED_WRITER};

/// How long the kernel may cache attributes and entries. Long, so that a `stat` of a file
/// seen in the last half minute (git status, make) is no round trip to the daemon: every
/// change of the file system goes through this mount (whose replies update the kernel's
/// cache) except those invalidated explicitly (rollback, receive, snapshots; module
/// documentation).
pub const TTL: Duration = Duration::from_secs(30);
/// Largest write the kernel sends in one request.
pub const WRITE_BYTES_MAX: u32 = 1 << 20;
/// Readahead of a mount: a sequential reader is sent read requests this large (with max_pages
/// from FUSE_MAX_PAGES, which fuser sizes from the larger of max_write and readahead).
pub const READAHEAD_BYTES: u32 = 1 << 20;
/// Entries asked of the engine per readdir request (the reply buffer usually fills first).
const READDIR_BATCH: usize = 256;

/// Map an engine error to errno (see the table in the crate documentation).
pub fn errno_of(error: &FsError) -> Errno {
    match error {
        FsError::NotFound => Errno::ENOENT,
        FsError::Exists => Errno::EEXIST,
        FsError::NotDir => Errno::ENOTDIR,
        FsError::IsDir => Errno::EISDIR,
        FsError::NotEmpty => Errno::ENOTEMPTY,
        FsError::NameTooLong => Errno::ENAMETOOLONG,
        FsError::InvalidName | FsError::Invalid(_) => Errno::EINVAL,
        FsError::NoSpace => Errno::ENOSPC,
        FsError::QuotaExceeded => Errno::EDQUOT,
        FsError::Busy(_) => Errno::EBUSY,
        FsError::ReadOnly => Errno::EROFS,
        FsError::Corrupt(_) | FsError::Engine(_) => Errno::EIO,
        FsError::NoData => Errno::ENODATA,
        FsError::NotSupported => Errno::EOPNOTSUPP,
        FsError::Range => Errno::ERANGE,
        FsError::TooBig => Errno::E2BIG,
        FsError::FileTooLarge(_) => Errno::EFBIG,
        FsError::PastEnd => Errno::ENXIO,
        FsError::CrossProject { .. } => Errno::EXDEV,
    }
}

/// The `fuser::Filesystem` over a tarn file system.
pub struct TarnFuse {
    fs: Arc<FileSystem>,
    root: u64,
    name: String,
    shared: Arc<Shared>,
}

/// What a mount shares with its [`MountHandle`]: the snapshots it shows, the `snapdir`
/// setting, and what the kernel may have cached.
struct Shared {
    snapshots: SnapshotTable,
    snapdir_visible: AtomicBool,
    kernel: KernelCache,
    /// Rollbacks (and receives) of the mounted file system so far: part of the generations of
    /// its regular files (`route::rollback_generation`).
    rollbacks: AtomicU64,
    /// Where the mount is (set once mounted): lseek writes it back.
    mountpoint: std::sync::OnceLock<PathBuf>,
    /// Space for what write(2) has accepted ([`write_space`]).
    space: WriteSpace,
    /// Each file's write-backs, stored one at a time ([`write_turns`]).
    turns: write_turns::WriteTurns,
}

impl TarnFuse {
    /// An adapter over `fs` without snapshots (`.zfs/snapshot` is empty).
    pub fn new(fs: Arc<FileSystem>, name: String) -> TarnFuse {
        TarnFuse::with_snapshots(fs, name, Arc::new(NoSnapshots), false)
    }

    /// An adapter over `fs` showing the snapshots of `snapshots` under `.zfs/snapshot`.
    pub fn with_snapshots(
        fs: Arc<FileSystem>,
        name: String,
        snapshots: Arc<dyn SnapshotSource>,
        snapdir_visible: bool,
    ) -> TarnFuse {
        let root = fs.root();
        let space = WriteSpace::new(fs.clone());
        TarnFuse {
            fs,
            root,
            shared: Arc::new(Shared {
                snapshots: SnapshotTable::new(snapshots),
                snapdir_visible: AtomicBool::new(snapdir_visible),
                kernel: KernelCache::new(name.clone()),
                rollbacks: AtomicU64::new(0),
                mountpoint: std::sync::OnceLock::new(),
                space,
                turns: Default::default(),
            }),
            name,
        }
    }

    /// Log what the caller cannot see in an errno, and map it.
    fn fail(&self, operation: &str, error: FsError) -> Errno {
        if matches!(error, FsError::Corrupt(_) | FsError::Engine(_)) {
            log::error!("tarn fuse {}: {operation}: {error}", self.name);
        }
        errno_of(&error)
    }

    /// fsync of a head inode (the engine's, see the module documentation).
    fn fsync_inode(&self, object: u64) -> Result<(), Errno> {
        self.fs
            .fsync(object)
            .map_err(|error| self.fail("fsync", error))
    }

    /// Reply with an entry, counting the kernel's new reference to it.
    fn reply_entry(&self, reply: ReplyEntry, result: Result<(FileAttr, u64), Errno>) {
        match result {
            Ok((attr, generation)) => {
                self.shared.kernel.inode_handed_out(attr.ino.0);
                reply.entry(&TTL, &attr, Generation(generation));
            }
            Err(errno) => reply.error(errno),
        }
    }

    /// An entry of the head from an engine result.
    fn head_entry(
        &self,
        result: Result<Attr, FsError>,
        operation: &str,
    ) -> Result<(FileAttr, u64), Errno> {
        let attr = result.map_err(|error| self.fail(operation, error))?;
        self.fuse_attr(&Node::Head(attr.ino), &attr)
    }

    /// The file handle and open flags of FUSE inode `ino` opened (for writing if
    /// `writable`) at the engine's `attr`: keep the kernel's cached pages if the file is
    /// unchanged since its last open (`kernel_cache.rs`); direct I/O for writing when the
    /// pool is nearly full ([`write_space`]) or sync=always.
    fn open_flags(&self, ino: INodeNo, attr: &Attr, writable: bool) -> (FileHandle, FopenFlags) {
        let keep_cache = self
            .shared
            .kernel
            .opened(ino.0, ContentVersion::of(attr), writable);
        // sync=always: every write(2) must be durable when it returns, so it must reach the
        // engine, not the page cache: the file is opened for direct I/O (shared mmap still
        // works: FUSE_DIRECT_IO_ALLOW_MMAP).
        if writable
            && (self.fs.sync_mode() == SyncMode::Always || !self.shared.space.open_cached(attr.ino))
        {
            return (FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
        }
        let handle = if writable {
            CACHED_WRITER
        } else {
            FileHandle(0)
        };
        if keep_cache {
            (handle, FopenFlags::FOPEN_KEEP_CACHE)
        } else {
            (handle, FopenFlags::empty())
        }
    }

    fn reply_empty(&self, reply: ReplyEmpty, result: Result<(), FsError>, operation: &str) {
        match result {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(self.fail(operation, error)),
        }
    }
}

fn file_attr(attr: &Attr, ino: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: attr.size,
        blocks: attr.blocks,
        atime: system_time(attr.atime),
        mtime: system_time(attr.mtime),
        ctime: system_time(attr.ctime),
        crtime: system_time(attr.crtime),
        kind: file_type(attr.kind),
        perm: attr.perm,
        nlink: attr.nlink.min(u32::MAX as u64) as u32,
        uid: attr.uid,
        gid: attr.gid,
        rdev: attr.rdev as u32,
        blksize: attr.blksize,
        flags: 0,
    }
}

/// The attributes answered for a regular file the engine has freed (unlinked, closed) when the
/// kernel writes its times back: no links, no data, the times it sent.
fn gone_file_attr(ino: INodeNo, mtime: Option<TimeOrNow>, ctime: Option<SystemTime>) -> FileAttr {
    let mtime = mtime.map_or(UNIX_EPOCH, |time| system_time(time_or_now(time)));
    let ctime = ctime.unwrap_or(mtime);
    FileAttr {
        ino,
        size: 0,
        blocks: 0,
        atime: mtime,
        mtime,
        ctime,
        crtime: ctime,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn system_time(time: Timestamp) -> SystemTime {
    if time.seconds >= 0 {
        UNIX_EPOCH + Duration::new(time.seconds as u64, time.nanoseconds)
    } else {
        UNIX_EPOCH - Duration::from_secs(time.seconds.unsigned_abs())
            + Duration::from_nanos(time.nanoseconds as u64)
    }
}

fn timestamp(time: SystemTime) -> Timestamp {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => Timestamp {
            seconds: after.as_secs() as i64,
            nanoseconds: after.subsec_nanos(),
        },
        Err(before) => {
            let before = before.duration();
            let mut seconds = -(before.as_secs() as i64);
            let mut nanoseconds = 0;
            if before.subsec_nanos() > 0 {
                seconds -= 1;
                nanoseconds = 1_000_000_000 - before.subsec_nanos();
            }
            Timestamp {
                seconds,
                nanoseconds,
            }
        }
    }
}

fn time_or_now(time: TimeOrNow) -> Timestamp {
    match time {
        TimeOrNow::SpecificTime(time) => timestamp(time),
        TimeOrNow::Now => Timestamp::now(),
    }
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Regular => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

fn bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

/// Answer a getxattr or listxattr with `value`, following the FUSE size probe: size 0 asks
/// for the length, a buffer too small is ERANGE.
fn reply_xattr(reply: ReplyXattr, size: u32, value: &[u8]) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if (size as usize) < value.len() {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

impl TarnFuse {
    /// The file system and object an xattr request reads: the head's or a snapshot's; None
    /// for the control directories, which have no xattrs.
    fn xattr_target(&self, ino: INodeNo) -> Result<Option<(Arc<FileSystem>, u64)>, Errno> {
        Ok(match self.resolve(ino)? {
            Node::Head(object) => Some((self.fs.clone(), object)),
            Node::Snapshot(snapshot, object) => Some((snapshot.fs.clone(), object)),
            Node::ZfsDir | Node::SnapshotDir => None,
        })
    }
}

impl Filesystem for TarnFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        configure_kernel(config);
        // acltype=posix: the kernel enforces the ACLs the engine keeps (this implies
        // default_permissions, which every mount has anyway).
        if self.fs.config().acl_posix && config.add_capabilities(InitFlags::FUSE_POSIX_ACL).is_err()
        {
            log::warn!(
                "tarn fuse {}: the kernel does not offer POSIX ACLs; they are stored but not enforced",
                self.name
            );
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.shared.kernel.entry_asked(parent.0, bytes(name));
        self.reply_entry(reply, self.lookup_node(parent, name));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if self.shared.kernel.forget(ino.0, nlookup) {
            if let Ok(object) = self.head(ino) {
                self.shared.space.forgotten(object);
            }
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        // Through a file opened for cached writing, while ordinary writes no longer fit: the
        // kernel asks this before a write(2) into its cache, which is refused here
        // (`write_space`).
        if fh == Some(CACHED_WRITER) {
            if let Ok(head) = self.head(ino) {
                if let Some(refusal) = self.shared.space.refuses_cached_writes(head) {
                    return reply.error(errno_of(&refusal));
                }
            }
        }
        match self.getattr_node(ino) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(errno) => reply.error(errno),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let fuse_ino = ino;
        let ino = match self.head(ino) {
            Ok(ino) => ino,
            Err(errno) => return reply.error(errno),
        };
        // Only the writeback cache sends a ctime, and only for a regular file: its own times,
        // written back with the inode, possibly after the file was unlinked and closed (GNU
        // tar's placeholders), when the engine has freed it. Those times have nowhere to go;
        // failing would record a write-back error that a later syncfs(2) of the whole mount
        // reports (ENOENT).
        let times_only = ctime.is_some() && mode.is_none() && uid.is_none() && gid.is_none();
        let times_only = times_only && size.is_none();
        // A file with a lost write-back is not extended over the lost bytes (`write_space`).
        if let Some(size) = size {
            let stored = self.fs.getattr(ino).map(|attr| attr.size).unwrap_or(0);
            if !self.shared.space.resize_allowed(ino, size, stored) {
                return reply.error(Errno::ENOSPC);
            }
        }
        let mode = match self.mode_after_setattr(ino, mode, req.uid(), size, uid.or(gid)) {
            Ok(mode) => mode,
            Err(errno) => return reply.error(errno),
        };
        let changes = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
        };
        let result = match self.fs.setattr(ino, changes) {
            Err(FsError::NotFound) if times_only => {
                return reply.attr(&TTL, &gone_file_attr(fuse_ino, mtime, ctime));
            }
            result => result
                .map_err(|error| self.fail("setattr", error))
                .and_then(|attr| self.fuse_attr(&Node::Head(ino), &attr)),
        };
        match result {
            Ok((attr, _)) => reply.attr(&TTL, &attr),
            Err(errno) => reply.error(errno),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let result = match self.resolve(ino) {
            Ok(Node::Head(object)) => self.fs.readlink(object),
            Ok(Node::Snapshot(snapshot, object)) => snapshot.fs.readlink(object),
            Ok(Node::ZfsDir | Node::SnapshotDir) => return reply.error(Errno::EINVAL),
            Err(errno) => return reply.error(errno),
        };
        match result {
            Ok(target) => reply.data(&target),
            Err(error) => reply.error(self.fail("readlink", error)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.shared.kernel.entry_asked(parent.0, bytes(name));
        let result = self.head_parent_for_new(parent, name).and_then(|parent| {
            let result = self.fs.create_node(
                parent,
                bytes(name),
                mode,
                umask,
                rdev as u64,
                req.uid(),
                req.gid(),
            );
            self.head_entry(result, "mknod")
        });
        self.reply_entry(reply, result);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.shared.kernel.entry_asked(parent.0, bytes(name));
        let result = self.head_parent_for_new(parent, name).and_then(|parent| {
            let result = self.fs.create_node(
                parent,
                bytes(name),
                FileKind::Directory.mode_bits() | (mode & 0o7777),
                umask,
                0,
                req.uid(),
                req.gid(),
            );
            self.head_entry(result, "mkdir")
        });
        self.reply_entry(reply, result);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = match self.head_parent_for_removal(parent, name) {
            Ok(parent) => parent,
            Err(errno) => return reply.error(errno),
        };
        let result = self.fs.unlink(parent, bytes(name));
        self.reply_empty(reply, result, "unlink");
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = match self.head_parent_for_removal(parent, name) {
            Ok(parent) => parent,
            Err(errno) => return reply.error(errno),
        };
        let result = self.fs.rmdir(parent, bytes(name));
        self.reply_empty(reply, result, "rmdir");
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.shared.kernel.entry_asked(parent.0, bytes(link_name));
        let result = self
            .head_parent_for_new(parent, link_name)
            .and_then(|parent| {
                let result = self.fs.symlink(
                    parent,
                    bytes(link_name),
                    target.as_os_str().as_bytes(),
                    req.uid(),
                    req.gid(),
                );
                self.head_entry(result, "symlink")
            });
        self.reply_entry(reply, result);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let parents = self.cross_check(parent, newparent).and_then(|()| {
            Ok((
                self.head_parent_for_removal(parent, name)?,
                self.head_parent_for_removal(newparent, newname)?,
            ))
        });
        let (parent, newparent) = match parents {
            Ok(parents) => parents,
            Err(errno) => return reply.error(errno),
        };
        let result = self.fs.rename_as(
            parent,
            bytes(name),
            newparent,
            bytes(newname),
            flags.bits(),
            req.uid(),
            req.gid(),
        );
        self.reply_empty(reply, result, "rename");
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.shared.kernel.entry_asked(newparent.0, bytes(newname));
        let result = self.cross_check(ino, newparent).and_then(|()| {
            let ino = self.head(ino)?;
            let newparent = self.head_parent_for_new(newparent, newname)?;
            let result = self.fs.link(ino, newparent, bytes(newname));
            self.head_entry(result, "link")
        });
        self.reply_entry(reply, result);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let result = match self.resolve(ino) {
            Ok(Node::Head(object)) => self
                .fs
                .open_inode(object)
                .map_err(|error| self.fail("open", error)),
            // A snapshot is read-only; its files are not counted open (nothing is unlinked in
            // it), so `release` has nothing to undo.
            Ok(Node::Snapshot(snapshot, object)) => {
                if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
                    Err(Errno::EROFS)
                } else {
                    snapshot
                        .fs
                        .getattr(object)
                        .map_err(|error| self.fail("open", error))
                }
            }
            Ok(Node::ZfsDir | Node::SnapshotDir) => Err(Errno::EISDIR),
            Err(errno) => Err(errno),
        };
        match result {
            Ok(attr) => {
                let writable = flags.acc_mode() != OpenAccMode::O_RDONLY;
                let (handle, flags) = self.open_flags(ino, &attr, writable);
                reply.opened(handle, flags)
            }
            Err(errno) => reply.error(errno),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let snapshot;
        let (fs, object) = match self.resolve(ino) {
            Ok(Node::Head(object)) => (&*self.fs, object),
            Ok(Node::Snapshot(found, object)) => {
                snapshot = found;
                (&*snapshot.fs, object)
            }
            Ok(Node::ZfsDir | Node::SnapshotDir) => return reply.error(Errno::EISDIR),
            Err(errno) => return reply.error(errno),
        };
        // The answer is written from the blocks where they lie (shared with the engine's
        // cache): one copy, into the kernel. Gathering them into one buffer first cost a
        // copy of every byte, and a fresh 1 MiB buffer per READ a page fault and a page
        // clear per 4 KiB (together about a third of the daemon's CPU time in a cold
        // sequential read).
        READ_PIECES.with_borrow_mut(|pieces| {
            match fs.read_shared(object, offset, size as usize, pieces) {
                // A writev takes at most 1024 slices (a 1 MiB read of a file of 512-byte
                // blocks is 2048): beyond a bound the pieces are gathered after all.
                Ok(()) if pieces.len() > READ_PIECES_MAX => {
                    let gathered: Vec<u8> = pieces
                        .iter()
                        .flat_map(|piece| piece.bytes())
                        .copied()
                        .collect();
                    reply.data(&gathered);
                }
                Ok(()) => {
                    let slices: Vec<std::io::IoSlice<'_>> = pieces
                        .iter()
                        .map(|piece| std::io::IoSlice::new(piece.bytes()))
                        .collect();
                    reply.data_pieces(&slices);
                }
                Err(error) => reply.error(self.fail("read", error)),
            }
            pieces.clear();
        });
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let fuse_ino = ino;
        let ino = match self.head(ino) {
            Ok(ino) => ino,
            Err(errno) => return reply.error(errno),
        };
        if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            if let Err(errno) = self.kill_privileges(fuse_ino, ino) {
                return reply.error(errno);
            }
        }
        // A write-back of the page cache (write(2) returned long ago) may use the space held
        // back for it, and is stored in its file's turn (`write_turns`); a direct write is
        // the caller's own (`write_space`).
        if !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
            return self.write_direct(ino, offset, data, flags, reply);
        }
        mount::stall_write_back_for_tests();
        let request = req.unique().0;
        self.shared.turns.serve(ino, offset, || {
            self.store_write_back(request, fuse_ino, ino, offset, data, reply)
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // The kernel wrote the file's pages back before it sent the release.
        if fh == CACHED_WRITER {
            self.shared.space.released_cached();
        }
        // Only the head counts open files (see `open`); a snapshot's are not, and a release
        // for a snapshot that is gone has nothing to undo.
        match snapdir::decode(ino.0) {
            InodeKind::Head(_) => match self.resolve(ino) {
                Ok(Node::Head(object)) => {
                    if flags.acc_mode() != OpenAccMode::O_RDONLY {
                        self.shared.kernel.released_writer(ino.0);
                    }
                    let result = self.fs.release(object);
                    self.reply_empty(reply, result, "release");
                }
                _ => reply.ok(),
            },
            _ => reply.ok(),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Nothing below `.zfs` is ever dirty.
        let result = match self.resolve(ino) {
            Ok(Node::Head(object)) => self.fsync_inode(object),
            Ok(_) => Ok(()),
            Err(errno) => Err(errno),
        };
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.getattr_node(ino) {
            // The kernel keeps the listing in the directory's page cache (FOPEN_CACHE_DIR) and
            // across opens (KEEP_CACHE): every change through this mount moves the kernel's
            // version of the directory, which drops it, and every change behind its back
            // invalidates the directory's pages (module documentation).
            Ok(attr) if attr.kind == FileType::Directory => reply.opened(
                FileHandle(0),
                FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(errno) => reply.error(errno),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.readdir_node(ino, offset, &mut reply) {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let mut listing = PlusListing::new(reply);
        match self.readdir_node(ino, offset, &mut listing) {
            Ok(()) => listing.send(self),
            Err(errno) => listing.fail(errno),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = match self.resolve(ino) {
            Ok(Node::Head(object)) => self.fsync_inode(object),
            Ok(_) => Ok(()),
            Err(errno) => Err(errno),
        };
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        // Only macOS sends a position (resource forks).
        if position != 0 {
            return reply.error(Errno::EINVAL);
        }
        let ino = match self.head(ino) {
            Ok(ino) => ino,
            Err(errno) => return reply.error(errno),
        };
        let result = self.fs.setxattr(ino, bytes(name), value, flags as u32);
        self.reply_empty(reply, result, "setxattr");
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let result = match self.xattr_target(ino) {
            Ok(Some((fs, object))) => fs.getxattr(object, bytes(name)),
            Ok(None) => Err(FsError::NoData),
            Err(errno) => return reply.error(errno),
        };
        match result {
            Ok(value) => reply_xattr(reply, size, &value),
            Err(error) => reply.error(self.fail("getxattr", error)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let result = match self.xattr_target(ino) {
            Ok(Some((fs, object))) => fs.listxattr(object),
            Ok(None) => Ok(Vec::new()),
            Err(errno) => return reply.error(errno),
        };
        match result {
            Ok(names) => {
                let mut list = Vec::new();
                for name in names {
                    list.extend_from_slice(&name);
                    list.push(0);
                }
                reply_xattr(reply, size, &list)
            }
            Err(error) => reply.error(self.fail("listxattr", error)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let ino = match self.head(ino) {
            Ok(ino) => ino,
            Err(errno) => return reply.error(errno),
        };
        let result = self.fs.removexattr(ino, bytes(name));
        self.reply_empty(reply, result, "removexattr");
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let ino = match self.head(ino) {
            Ok(ino) => ino,
            Err(errno) => return reply.error(errno),
        };
        let result = self.fs.fallocate(ino, offset, length, mode as u32);
        self.reply_empty(reply, result, "fallocate");
    }

    /// Only SEEK_DATA and SEEK_HOLE reach the file system; the kernel does the rest, and it
    /// sends FUSE_LSEEK without writing back the file's dirty pages first. The engine's answer
    /// is exact when the file has no writer (every close wrote its pages back); otherwise a
    /// thread of its own has the kernel write the mount back first and then answers, so that
    /// no page the kernel holds is reported as a hole (a request handler must never wait for
    /// the kernel, which needs the handlers to take the pages).
    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let target = match whence {
            libc::SEEK_DATA => SeekTarget::Data,
            libc::SEEK_HOLE => SeekTarget::Hole,
            _ => return reply.error(Errno::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(Errno::ENXIO);
        };
        let result = match self.resolve(ino) {
            Ok(Node::Head(object)) if self.shared.kernel.has_writers(ino.0) => {
                let fs = self.fs.clone();
                let shared = self.shared.clone();
                let name = self.name.clone();
                let answer = move || {
                    // Dropping the inode's pages makes the kernel write its dirty ones back
                    // and wait for them, which syncfs may not do on recent kernels; syncfs
                    // stays the fallback if the notification fails.
                    if let Some(mountpoint) = shared.mountpoint.get() {
                        let dropped =
                            mount::write_back_pages(mountpoint, shared.clone(), vec![ino.0]);
                        if !matches!(dropped, Ok(1..)) {
                            if let Err(error) = mount::write_back_mount(mountpoint) {
                                log::warn!("tarn fuse {name}: lseek: {error}");
                            }
                        }
                    } else {
                        // Not mounted yet as far as this process knows: no connection to
                        // watch, and no page can be dirty before the mount.
                        shared.kernel.invalidate(&[ino.0], &[]);
                    }
                    match fs.seek(object, offset, target) {
                        Ok(found) => reply.offset(found as i64),
                        Err(error) => reply.error(errno_of(&error)),
                    }
                };
                if let Err(error) = std::thread::Builder::new()
                    .name("tarn-fuse-lseek".into())
                    .spawn(answer)
                {
                    // The reply went with the closure; dropped unanswered, fuser sends EIO.
                    log::error!("tarn fuse {}: lseek: no thread: {error}", self.name);
                }
                return;
            }
            Ok(Node::Head(object)) => self.fs.seek(object, offset, target),
            Ok(Node::Snapshot(snapshot, object)) => snapshot.fs.seek(object, offset, target),
            Ok(Node::ZfsDir | Node::SnapshotDir) => return reply.error(Errno::EISDIR),
            Err(errno) => return reply.error(errno),
        };
        match result {
            Ok(found) => reply.offset(found as i64),
            Err(error) => reply.error(self.fail("lseek", error)),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        if flags.bits() != 0 {
            return reply.error(Errno::EINVAL);
        }
        let target = match self.head(ino_out) {
            Ok(target) => target,
            Err(errno) => return reply.error(errno),
        };
        // One reply says at most u32::MAX bytes; the caller loops for the rest.
        let len = len.min(u32::MAX as u64 & !0xfff);
        let result = match self.resolve(ino_in) {
            Ok(Node::Head(source)) => self
                .fs
                .copy_range(&self.fs, source, offset_in, target, offset_out, len),
            Ok(Node::Snapshot(snapshot, source)) => {
                self.fs
                    .copy_range(&snapshot.fs, source, offset_in, target, offset_out, len)
            }
            Ok(Node::ZfsDir | Node::SnapshotDir) => return reply.error(Errno::EISDIR),
            Err(errno) => return reply.error(errno),
        };
        match result {
            Ok(copied) => {
                reply.written(copied as u32);
            }
            Err(error) => reply.error(self.fail("copy_file_range", error)),
        }
    }

    /// File attributes (project ID, project inherit flag) for chattr, lsattr, xfs_io and
    /// xfs_quota: [`fileattr`]. Every other ioctl is ENOTTY.
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        match self.file_attr_ioctl(ino, req.uid(), cmd, in_data, out_size) {
            Ok(out) => reply.ioctl(0, &out),
            Err(errno) => reply.error(errno),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.fs.statfs() {
            Ok(figures) => reply.statfs(
                figures.blocks,
                figures.blocks_free,
                figures.blocks_available,
                figures.files,
                figures.files_free,
                figures.block_size,
                figures.name_len_max,
                figures.block_size,
            ),
            Err(error) => reply.error(self.fail("statfs", error)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.shared.kernel.entry_asked(parent.0, bytes(name));
        let created = self.head_parent_for_new(parent, name).and_then(|parent| {
            self.fs
                .create_node(
                    parent,
                    bytes(name),
                    FileKind::Regular.mode_bits() | (mode & 0o7777),
                    umask,
                    0,
                    req.uid(),
                    req.gid(),
                )
                .and_then(|attr| self.fs.open_inode(attr.ino))
                .map_err(|error| self.fail("create", error))
                .and_then(|attr| Ok((self.fuse_attr(&Node::Head(attr.ino), &attr)?, attr)))
        });
        match created {
            Ok(((attr, generation), engine_attr)) => {
                self.shared.kernel.inode_handed_out(attr.ino.0);
                let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
                let (handle, flags) = self.open_flags(attr.ino, &engine_attr, writable);
                reply.created(&TTL, &attr, Generation(generation), handle, flags)
            }
            Err(errno) => reply.error(errno),
        }
    }
}
