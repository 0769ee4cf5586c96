//! File system layer: POSIX semantics on an object set (OpenZFS zfs_znode.c, zfs_dir.c,
//! zfs_vnops.c).
//!
//! # Overview
//! A file system lives in one object set (a dataset's). Every inode is one object, and its
//! inode number *is* its object number; the object's dnode generation (the txg it was created
//! in) is the inode generation that FUSE replies carry. The POSIX attributes of an inode (the
//! *znode*) sit in its object's bonus buffer. Regular files keep their bytes in the object's
//! data blocks (block size = the dataset's recordsize); directories are key/value objects
//! mapping names to entries; symlinks keep their target in the bonus buffer after the znode
//! when it fits, else in the object's data; fifos, sockets and device nodes are metadata only.
//! [`FileSystem`] offers the operations a FUSE adapter needs, taking and returning inode
//! numbers; it knows nothing of errno (the adapter maps [`FsError`]).
//!
//! # On-disk structures
//! [`phys`] has the byte diagrams. In short:
//! - the *master node*, a key/value object at the fixed object number 1 (created by
//!   [`FileSystem::format`]): `"VERSION"` → format version (1), `"ROOT"` → the root directory's
//!   object, `"UNLINKED_SET"` → the unlinked set's object (all values u64 little-endian);
//! - the *znode* (128 bytes, plus an inline symlink target of up to 192 bytes) in each inode's
//!   bonus buffer: mode, uid, gid, project ID, links, size, atime/mtime/ctime/crtime, parent
//!   directory, flags (among them a directory's project inherit flag), rdev;
//! - *directories*: key = name (1..=255 bytes, no `/`, no NUL), value = 9 bytes (object number,
//!   file kind). A directory's znode size is its number of entries (as in ZFS), and its link
//!   count is 2 plus its number of subdirectories;
//! - the *unlinked set*: a key/value object whose keys are the object numbers (u64 LE) of
//!   inodes with no links left that were still open when their last link went away;
//! - *extended attributes* ([`xattr`]): small ones packed in an SA region after the znode in
//!   the bonus buffer, the rest in a hidden per-file xattr directory (a key/value object the
//!   znode names, with large values in objects of their own); POSIX ACLs ([`acl`]) are two of
//!   them. The znode's flag bits say which of the two follow it, so znodes written before
//!   they existed read unchanged.
//!
//! # Invariants
//! 1. Every directory entry names an existing inode of the kind the entry records, and every
//!    inode with `links > 0` is named by exactly `links` entries (directories: by one entry, plus
//!    their own `.` and each subdirectory's `..`). The root is its own parent.
//! 2. An inode with `links == 0` exists only while it is open, and is then in the unlinked set
//!    with [`phys::ZNODE_FLAG_UNLINKED`] set.
//! 3. Bytes of a regular file past its size are zeros (holes): truncation frees them, so
//!    extending the size never exposes old data.
//! 4. A directory's parent field names the one directory holding its entry.
//! 5. Each operation's changes go into one transaction, so a crash shows all or none of them.
//!
//! # Locking
//! Three levels, always taken in this order:
//! 1. the *rename lock*, taken only by renames across directories, so that the "not into its
//!    own subtree" walk up the parent pointers sees a tree no other rename changes;
//! 2. *inode stripe locks*: a fixed table of mutexes indexed by a hash of the inode number. An
//!    operation locks every inode it will change (directories and the inodes their entries
//!    name), in stripe order, so there is no lock-order deadlock. Names are resolved first
//!    without locks, then re-checked under the locks (retrying if they changed);
//! 3. the *transaction hold* ([`TxgManager::assign`]), taken after every read that can be done
//!    beforehand (znodes, lookups, the subtree walk) and dropped at the end of the operation.
//!    Under it come the object layer's per-object writer locks (a [`KvObject`] handle holds one
//!    for its life: we hold at most one at a time). No fs lock is taken while a hold is held,
//!    so a writer delayed by the write throttle never blocks one that holds a transaction.
//!
//! Modifying a key/value object, writing part of a block and truncating may still read a block
//! from disk under the hold (usually from the cache, since the lookup just read it).
//!
//! # Operations
//! `lookup`, `getattr`, `setattr` (mode, owner, size, times), `create`, `mkdir`, `mknod`,
//! `symlink`, `readlink`, `link`, `unlink`, `rmdir`, `rename` (replace, `RENAME_NOREPLACE`,
//! `RENAME_EXCHANGE`, `RENAME_WHITEOUT`), `readdir` (offsets 0..=2 are `.` and `..`; later
//! offsets are key/value cookies, stable while entries come and go), `read`, `write`, `statfs`
//! (4 KiB units), `open` / `release` for unlink-while-open, `getxattr` / `setxattr` /
//! `listxattr` / `removexattr` ([`xattr`], [`acl`]), `fallocate`, SEEK_DATA / SEEK_HOLE
//! and `copy_range` ([`ranges`]), and `project` / `set_project` (`project.rs`). atime follows
//! relatime: a read updates it only if it is not newer than mtime or ctime, or is more than a
//! day old.
//!
//! # Crash behaviour
//! Every operation is one transaction, so after a crash each is wholly there or wholly absent.
//! The engine cannot abort a transaction, so every check that can refuse an operation (names,
//! kinds, emptiness, existence, the subtree walk) runs before the first change; what can still
//! fail midway is only the storage below (a corrupt block, a failed read), and the write that
//! can be refused for lack of space comes before any other change of its operation.
//! Files unlinked while open are in the unlinked set; so are files of more than `delete_blocks`
//! blocks while their data is freed in chunks, one transaction each, after the unlink's own
//! transaction (OpenZFS's zfs_delete_blocks and dmu_free_long_range): the only exception to
//! "one operation, one transaction", and a crash part-way leaves the file parked there.
//! [`FileSystem::open`] removes whatever a crash left there (OpenZFS's zfs_unlinked_drain),
//! large files again in chunks.
//!
//! # Modules
//! `impl FileSystem` is split by concept, one file each, every file opening with what it
//! holds: this file has the types, opening and formatting, the inode locks, znode access and
//! `statfs`; `dir.rs` directories, names, `lookup` and `readdir`; `nodes.rs` the making and
//! removing of names; `rename.rs` rename; `attr.rs` `getattr` and `setattr`; `read.rs` and
//! `write.rs` file data; [`ranges`] fallocate, SEEK_DATA / SEEK_HOLE and copy_range;
//! [`xattr`] and [`acl`] extended attributes and POSIX ACLs; `unlinked.rs` the unlinked set
//! and the end of an inode's life; `intent.rs` the intent log's records, fsync and replay;
//! `path.rs` the path of an inode; `project.rs` project IDs, their inheritance and the owner
//! quota admission of creates, chowns and project changes; [`phys`] the on-disk formats.

pub mod acl;
mod attr;
mod dir;
mod intent;
mod nodes;
mod path;
pub mod phys;
mod project;
pub mod ranges;
mod read;
mod rename;
mod unlinked;
mod write;
pub mod xattr;

pub use intent::{test_hook_fail_replay_of, test_hook_sync_each_replayed_record};

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard, RwLock};

use crate::block::blkptr::{ChecksumType, Compression, ObjectType};
use crate::object::adapters::KvObject;
use crate::object::kv::{self, KvError};
use crate::object::prefetch::Prefetcher;
use crate::object::{ObjectError, ObjectProps, ObjectSet, Tx};
use crate::txg::{TxgError, TxgManager};
use crate::types::ObjectId;
use crate::zil::Zil;
pub use phys::{FileKind, Timestamp};
use phys::{
    SpillXattrs, Znode, FS_VERSION, MASTER_KEY_ROOT, MASTER_KEY_UNLINKED_SET, MASTER_KEY_VERSION,
    MASTER_NODE_OBJECT,
};
pub use ranges::{SeekTarget, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE};
pub use rename::{RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT};
pub use write::{HeldBack, WriteSource, SHORT_WRITE_MIN};
pub use xattr::{XattrLayout, XATTR_CREATE, XATTR_REPLACE};

/// Longest name in a directory, in bytes.
pub const NAME_LEN_MAX: usize = 255;
/// Longest symlink target, in bytes (Linux's PATH_MAX).
pub const SYMLINK_TARGET_MAX: usize = 4096;
/// Largest read or write in one call.
pub const IO_BYTES_MAX: usize = 64 << 20;

/// Largest file size (offsets travel as i64).
pub const FILE_SIZE_MAX: u64 = i64::MAX as u64;
/// Block size of a new file's object (OpenZFS's SPA_MINBLOCKSIZE), grown by its writes.
pub const FILE_BLOCK_SIZE_FIRST: u32 = 512;
/// Stripes of the inode lock table.
const INODE_LOCK_STRIPES: usize = 1024;
/// Block size of directory key/value objects.
const DIRECTORY_BLOCK_SIZE: u32 = 16 << 10;

/// Errors of the file system layer. The FUSE adapter maps them to errno (moving a directory
/// into its own subtree is `Invalid`, EINVAL, as on Linux).
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("name longer than {NAME_LEN_MAX} bytes")]
    NameTooLong,
    #[error("invalid name (empty, or contains '/' or NUL)")]
    InvalidName,
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("no space left in the pool")]
    NoSpace,
    /// The dataset's quota or refquota (EDQUOT).
    #[error("disk quota exceeded")]
    QuotaExceeded,
    #[error("busy: {0}")]
    Busy(String),
    #[error("corrupt file system: {0}")]
    Corrupt(String),
    #[error("engine: {0}")]
    Engine(String),
    #[error("read-only file system")]
    ReadOnly,
    /// No such extended attribute (ENODATA).
    #[error("no such extended attribute")]
    NoData,
    /// An operation or name this file system does not support (EOPNOTSUPP).
    #[error("operation not supported")]
    NotSupported,
    /// A name or result does not fit its limit (ERANGE).
    #[error("result or name out of range")]
    Range,
    /// A value larger than the largest allowed (E2BIG).
    #[error("value too large")]
    TooBig,
    /// A write or size past what the file's block tree can address (EFBIG).
    #[error("file too large: {0}")]
    FileTooLarge(String),
    /// An offset at or past the end of file, or no data after it (ENXIO, for SEEK_DATA and
    /// SEEK_HOLE).
    #[error("offset past the end of the file")]
    PastEnd,
    /// A link or rename into a directory whose new nodes inherit a project other than the
    /// node's (EXDEV, as ext4, XFS and OpenZFS answer, so that `mv` copies instead).
    #[error("the target directory inherits project {directory}, the node is in project {node}")]
    CrossProject { node: u32, directory: u32 },
}

impl From<ObjectError> for FsError {
    fn from(error: ObjectError) -> Self {
        match error {
            ObjectError::NoSuchObject(_) => FsError::NotFound,
            ObjectError::NoSpace => FsError::NoSpace,
            ObjectError::QuotaExceeded => FsError::QuotaExceeded,
            ObjectError::Corrupt(what) => FsError::Corrupt(what),
            ObjectError::TooLarge(why) => FsError::FileTooLarge(why),
            other => FsError::Engine(other.to_string()),
        }
    }
}

impl From<KvError> for FsError {
    fn from(error: KvError) -> Self {
        match error {
            KvError::Exists => FsError::Exists,
            KvError::NotFound => FsError::NotFound,
            KvError::KeyTooLong => FsError::NameTooLong,
            KvError::Corrupt { what, block } => {
                FsError::Corrupt(format!("key/value block {block}: {what}"))
            }
            other => FsError::Engine(other.to_string()),
        }
    }
}

impl From<TxgError> for FsError {
    fn from(error: TxgError) -> Self {
        FsError::Engine(error.to_string())
    }
}

pub type Result<T, E = FsError> = std::result::Result<T, E>;

/// The attributes of an inode, as `getattr` returns them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    /// Distinguishes reuses of one inode number (the object's creation txg).
    pub generation: u64,
    pub size: u64,
    /// Allocated space in 512-byte units (approximate until the data is synced).
    pub blocks: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub crtime: Timestamp,
    pub kind: FileKind,
    /// Permission bits, setuid, setgid, sticky (0o7777).
    pub perm: u16,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    /// Preferred I/O size.
    pub blksize: u32,
}

/// Changes for `setattr`; None leaves a field alone. ctime is always set to now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits; type bits, if given, must match the inode's kind.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Truncate or extend a regular file (mtime becomes now unless given).
    pub size: Option<u64>,
    pub atime: Option<Timestamp>,
    pub mtime: Option<Timestamp>,
}

/// One `readdir` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: FileKind,
    /// Offset to pass to the next `readdir` to continue after this entry.
    pub next_cookie: u64,
}

/// Space figures of the pool the file system lives in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpaceFigures {
    pub size_bytes: u64,
    /// What the file system can still write (the pool's `avail`).
    pub available_bytes: u64,
}

/// Where `statfs` gets its space figures (the pool, in practice).
pub type SpaceSource = Arc<dyn Fn() -> SpaceFigures + Send + Sync>;

/// The unit of `statfs` block counts, and the block size it reports (`f_bsize` and
/// `f_frsize`). Not the recordsize: programs size buffers and estimate space from `f_bsize`
/// (du, df, cp's sparse detection, databases' page checks), and ext4's 4 KiB is what they
/// expect; the recordsize stays visible per file as `st_blksize`. Counts are exact in these
/// units (rounded down), so `f_blocks * f_frsize` is the dataset's size.
pub const STATFS_BLOCK_SIZE: u32 = 4096;

/// What `statfs` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    /// [`STATFS_BLOCK_SIZE`]: both the preferred block size and the unit of the counts.
    pub block_size: u32,
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_available: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_len_max: u32,
}

/// Object properties used for new inodes.
#[derive(Clone, Copy, Debug)]
pub struct FsConfig {
    /// Largest data block size of regular files and long symlinks (the recordsize): a file
    /// starts with one block of 512 bytes that grows with it up to this size, after which it
    /// has blocks of this size (`FileSystem::write_file_data`).
    pub file_block_size: u32,
    pub directory_block_size: u32,
    pub indirect_block_shift: u8,
    pub checksum: ChecksumType,
    pub compression: Compression,
    pub copies: u8,
    /// Where new xattrs go (the `xattr` property).
    pub xattr: XattrLayout,
    /// POSIX ACLs kept and inherited (`acltype=posix`); off, their names are refused.
    pub acl_posix: bool,
}

impl FsConfig {
    /// Defaults from the pool's tunables.
    pub fn for_objset(objset: &ObjectSet) -> FsConfig {
        let tunables = &objset.io().tunables;
        FsConfig {
            file_block_size: tunables.recordsize,
            directory_block_size: DIRECTORY_BLOCK_SIZE,
            indirect_block_shift: tunables.indirect_block_shift as u8,
            checksum: ChecksumType::Fletcher4,
            compression: Compression::Lz4,
            copies: 1,
            xattr: XattrLayout::Sa,
            acl_posix: false,
        }
    }
}

/// A file system on an object set: see the module documentation.
pub struct FileSystem {
    objset: Arc<ObjectSet>,
    txgs: Arc<TxgManager>,
    /// Properties for new objects; the dataset's properties may change it while mounted.
    config: RwLock<FsConfig>,
    root: u64,
    unlinked_set: u64,
    inode_locks: Vec<Mutex<()>>,
    rename_lock: Mutex<()>,
    /// Open counts of inodes that are open at least once.
    open_counts: Mutex<HashMap<u64, u64>>,
    space: RwLock<Option<SpaceSource>>,
    atime_updates: AtomicBool,
    /// Sequential read detection and read-ahead into the block cache.
    prefetch: Prefetcher,
    /// A snapshot's file system: every change is refused (EROFS).
    read_only: bool,
    /// The intent log ([`intent`]): None for a snapshot's or a set without one.
    zil: Option<Arc<Zil>>,
}

/// Znodes loaded before a transaction, changed in memory and written back together.
struct Staged {
    znodes: BTreeMap<u64, Znode>,
}

impl Staged {
    fn get(&mut self, ino: u64) -> &mut Znode {
        self.znodes
            .get_mut(&ino)
            .unwrap_or_else(|| panic!("znode {ino} was not staged"))
    }

    /// [`Staged::get`] to read, so that two znodes can be read at once.
    fn peek(&self, ino: u64) -> &Znode {
        self.znodes
            .get(&ino)
            .unwrap_or_else(|| panic!("znode {ino} was not staged"))
    }
}

fn kv_error(object: u64) -> impl Fn(KvError) -> FsError {
    move |error| match error {
        KvError::Corrupt { what, block } => {
            FsError::Corrupt(format!("key/value object {object} block {block}: {what}"))
        }
        // A block with no good copy (or an I/O error): say which object it cost.
        other => match FsError::from(other) {
            FsError::Engine(why) => FsError::Engine(format!("key/value object {object}: {why}")),
            mapped => mapped,
        },
    }
}

fn stripe(ino: u64) -> usize {
    (ino.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % INODE_LOCK_STRIPES
}

impl FileSystem {
    /// Create an empty file system in `objset`, which must not hold one yet: the master node,
    /// the unlinked set and a root directory (mode 0755) owned by `uid`:`gid`. The caller
    /// syncs the txg to make it durable.
    pub fn format(
        objset: Arc<ObjectSet>,
        txgs: Arc<TxgManager>,
        uid: u32,
        gid: u32,
    ) -> Result<FileSystem> {
        let hold = txgs.assign()?;
        FileSystem::format_in(&objset, hold.tx(), uid, gid)?;
        drop(hold);
        FileSystem::open(objset, txgs)
    }

    /// Write an empty file system into `objset` in the caller's transaction (a new dataset is
    /// formatted in the same txg that creates it).
    pub fn format_in(objset: &ObjectSet, tx: Tx, uid: u32, gid: u32) -> Result<()> {
        if objset.exists(ObjectId(MASTER_NODE_OBJECT)) {
            return Err(FsError::Exists);
        }
        let config = FsConfig::for_objset(objset);
        let kv_props = ObjectProps {
            object_type: ObjectType::KeyValue,
            data_block_size: config.directory_block_size,
            indirect_block_shift: config.indirect_block_shift,
            checksum: config.checksum,
            compression: config.compression,
            copies: config.copies,
        };
        let master = ObjectId(MASTER_NODE_OBJECT);
        objset.create_object_at(&tx, master, kv_props, ObjectType::None, &[])?;
        kv::create(&mut KvObject::new(objset, master, Some(tx))?).map_err(kv_error(1))?;
        let unlinked = objset.create_object(&tx, kv_props, ObjectType::None, &[])?;
        kv::create(&mut KvObject::new(objset, unlinked, Some(tx))?)
            .map_err(kv_error(unlinked.0))?;
        let now = Timestamp::now();
        let root = objset.create_object(&tx, kv_props, ObjectType::None, &[])?;
        let znode = Znode {
            mode: phys::MODE_DIRECTORY | 0o755,
            uid,
            gid,
            project: phys::PROJECT_ID_DEFAULT,
            links: 2,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            parent: root.0,
            flags: 0,
            rdev: 0,
            inline_target: Vec::new(),
            xattr_dir: 0,
            sa_xattrs: Vec::new(),
            spill: SpillXattrs::None,
        };
        objset.set_bonus(&tx, root, ObjectType::None, &znode.encode())?;
        kv::create(&mut KvObject::new(objset, root, Some(tx))?).map_err(kv_error(root.0))?;
        {
            let mut handle = KvObject::new(objset, master, Some(tx))?;
            kv::insert_u64(&mut handle, MASTER_KEY_VERSION, FS_VERSION).map_err(kv_error(1))?;
            kv::insert_u64(&mut handle, MASTER_KEY_ROOT, root.0).map_err(kv_error(1))?;
            kv::insert_u64(&mut handle, MASTER_KEY_UNLINKED_SET, unlinked.0)
                .map_err(kv_error(1))?;
        }
        Ok(())
    }

    /// Open the file system in `objset` and remove whatever a crash left in its unlinked set.
    pub fn open(objset: Arc<ObjectSet>, txgs: Arc<TxgManager>) -> Result<FileSystem> {
        FileSystem::open_with(objset, txgs, false)
    }

    /// Open a snapshot's file system: reads only, every change refused with
    /// [`FsError::ReadOnly`], no atime updates, the unlinked set left as it is.
    pub fn open_read_only(objset: Arc<ObjectSet>, txgs: Arc<TxgManager>) -> Result<FileSystem> {
        FileSystem::open_with(objset, txgs, true)
    }

    fn open_with(
        objset: Arc<ObjectSet>,
        txgs: Arc<TxgManager>,
        read_only: bool,
    ) -> Result<FileSystem> {
        let master = ObjectId(MASTER_NODE_OBJECT);
        let info = objset.info(master).map_err(|error| match error {
            ObjectError::NoSuchObject(_) => {
                FsError::Invalid("the object set holds no file system (no master node)".into())
            }
            other => FsError::from(other),
        })?;
        if info.object_type != ObjectType::KeyValue {
            return Err(FsError::Corrupt(format!(
                "master node has object type {:?}",
                info.object_type
            )));
        }
        let (version, root, unlinked_set) = {
            let handle = KvObject::new(&objset, master, None)?;
            let get = |key: &str| -> Result<u64> {
                kv::lookup_u64(&handle, key)
                    .map_err(kv_error(1))?
                    .ok_or_else(|| FsError::Corrupt(format!("master node has no {key}")))
            };
            (
                get(MASTER_KEY_VERSION)?,
                get(MASTER_KEY_ROOT)?,
                get(MASTER_KEY_UNLINKED_SET)?,
            )
        };
        if version != FS_VERSION {
            return Err(FsError::Corrupt(format!(
                "file system version {version}, this build reads {FS_VERSION}"
            )));
        }
        for (what, object) in [("root", root), ("unlinked set", unlinked_set)] {
            if object <= MASTER_NODE_OBJECT || !objset.exists(ObjectId(object)) {
                return Err(FsError::Corrupt(format!(
                    "master node names {what} object {object}, which does not exist"
                )));
            }
        }
        let config = FsConfig::for_objset(&objset);
        let prefetch = Prefetcher::new(&objset);
        let zil = objset.log::<Zil>();
        let fs = FileSystem {
            objset,
            txgs,
            config: RwLock::new(config),
            root,
            unlinked_set,
            inode_locks: (0..INODE_LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            rename_lock: Mutex::new(()),
            open_counts: Mutex::new(HashMap::new()),
            space: RwLock::new(None),
            atime_updates: AtomicBool::new(!read_only),
            prefetch,
            read_only,
            zil: if read_only { None } else { zil },
        };
        let root_znode = fs.znode(root)?;
        if root_znode.kind() != FileKind::Directory {
            return Err(FsError::Corrupt(format!("root {root} is not a directory")));
        }
        if !read_only {
            fs.replay_log()?;
            fs.drain_unlinked()?;
            fs.start_log();
        }
        Ok(fs)
    }

    /// Whether this is a snapshot's (read-only) file system.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Admission of one change: refused on a read-only file system; otherwise the object
    /// set's gate, held (shared) until the change is done, so that a rollback never resets the
    /// object set under a change in flight. Recursive: a change may call another.
    fn change(&self) -> Result<parking_lot::RwLockReadGuard<'_, ()>> {
        if self.read_only {
            return Err(FsError::ReadOnly);
        }
        Ok(self.objset.enter())
    }

    /// Properties used for objects created from now on.
    pub fn config(&self) -> FsConfig {
        *self.config.read()
    }

    /// Change the properties of objects created from now on (the dataset's properties
    /// changed).
    pub fn set_config(&self, config: FsConfig) {
        *self.config.write() = config;
    }

    /// The root directory's inode number.
    pub fn root(&self) -> u64 {
        self.root
    }

    pub fn objset(&self) -> &Arc<ObjectSet> {
        &self.objset
    }

    /// Where `statfs` reads the pool's space from.
    pub fn set_space_source(&self, source: SpaceSource) {
        *self.space.write() = Some(source);
    }

    /// Turn atime updates on reads on or off (the `atime` property).
    pub fn set_atime_updates(&self, enabled: bool) {
        self.atime_updates.store(enabled, Ordering::Relaxed);
    }

    /// Change what reads of this file system's data leave in the cache (the dataset's
    /// `primarycache` property).
    pub fn set_primarycache(&self, policy: crate::cache::CachePolicy) {
        self.objset.set_primarycache(policy);
    }

    /// Change which of this file system's blocks may go to the L2ARC (the `secondarycache`
    /// property).
    pub fn set_secondarycache(&self, policy: crate::cache::CachePolicy) {
        self.objset.set_secondarycache(policy);
    }

    // ---------------------------------------------------------------------------------------
    // Helpers.

    /// Lock the stripes of `inodes` in stripe order.
    fn lock_inodes(&self, inodes: &[u64]) -> Vec<MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = inodes.iter().map(|&ino| stripe(ino)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes
            .into_iter()
            .map(|index| self.inode_locks[index].lock())
            .collect()
    }

    fn check_ino(&self, ino: u64) -> Result<()> {
        if ino <= MASTER_NODE_OBJECT || ino == self.unlinked_set {
            return Err(FsError::NotFound);
        }
        Ok(())
    }

    /// The znode of `ino`; NotFound if `ino` is not an inode of this file system.
    fn znode(&self, ino: u64) -> Result<Znode> {
        self.check_ino(ino)?;
        let bonus = self.objset.bonus(ObjectId(ino))?;
        if bonus.is_empty() {
            return Err(FsError::NotFound);
        }
        Znode::decode(&bonus, ino)
    }

    /// Store a znode changed by an operation the intent log does not record: an fsync of
    /// the inode then waits for this txg.
    fn put_znode(&self, tx: &Tx, ino: u64, znode: &Znode) -> Result<()> {
        self.note_unlogged(tx.txg, ino);
        self.put_znode_logged(tx, ino, znode)
    }

    /// Store a znode changed by an operation whose log record the caller makes, with its
    /// spill block if the xattr code changed it ([`FileSystem::put_znode_and_spill`]).
    fn put_znode_logged(&self, tx: &Tx, ino: u64, znode: &Znode) -> Result<()> {
        if let SpillXattrs::Read(spilled) = &znode.spill {
            return self.put_znode_and_spill(tx, ino, znode, spilled);
        }
        self.objset
            .set_bonus(tx, ObjectId(ino), ObjectType::None, &znode.encode())?;
        Ok(())
    }

    fn stage(&self, inodes: &[u64]) -> Result<Staged> {
        let mut znodes = BTreeMap::new();
        for &ino in inodes {
            if let std::collections::btree_map::Entry::Vacant(slot) = znodes.entry(ino) {
                slot.insert(self.znode(ino)?);
            }
        }
        Ok(Staged { znodes })
    }

    fn props_for(&self, kind: FileKind) -> ObjectProps {
        let config = *self.config.read();
        let (object_type, data_block_size) = if kind == FileKind::Directory {
            (ObjectType::KeyValue, config.directory_block_size)
        } else {
            // Grown by the writes, up to the recordsize (`write_file_data`).
            (ObjectType::PlainFile, FILE_BLOCK_SIZE_FIRST)
        };
        ObjectProps {
            object_type,
            data_block_size,
            indirect_block_shift: config.indirect_block_shift,
            checksum: config.checksum,
            compression: config.compression,
            copies: config.copies,
        }
    }

    // ---------------------------------------------------------------------------------------
    // Operations.

    /// Space figures in units of [`STATFS_BLOCK_SIZE`], from the space source (zeros if
    /// none).
    pub fn statfs(&self) -> Result<StatFs> {
        let figures = self
            .space
            .read()
            .as_ref()
            .map(|source| source())
            .unwrap_or_default();
        let block_size = STATFS_BLOCK_SIZE;
        let available = figures.available_bytes.min(figures.size_bytes);
        // Every inode needs at least one dnode: that bounds the files that still fit.
        let files_free = available / crate::object::phys::DNODE_SIZE as u64;
        Ok(StatFs {
            block_size,
            blocks: figures.size_bytes / block_size as u64,
            blocks_free: available / block_size as u64,
            blocks_available: available / block_size as u64,
            files: files_free,
            files_free,
            name_len_max: NAME_LEN_MAX as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_spread_and_stay_in_range() {
        let mut seen = std::collections::HashSet::new();
        for ino in 0..4096u64 {
            let index = stripe(ino);
            assert!(index < INODE_LOCK_STRIPES);
            seen.insert(index);
        }
        assert!(
            seen.len() > INODE_LOCK_STRIPES / 2,
            "only {} stripes used",
            seen.len()
        );
    }
}
