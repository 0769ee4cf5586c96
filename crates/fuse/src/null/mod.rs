//! A null FUSE file system: the floor that `tarn bench mount` and `tarn bench workloads`
//! compare tarn against.
//!
//! # Why it exists
//! It measures what FUSE itself costs on this machine, so that a tarn mount's figures can be
//! judged against the best any FUSE file system could do with the same settings. It is mounted
//! through [`crate::mount_filesystem`] and negotiates at init exactly what a tarn mount does
//! ([`crate::configure_kernel`], which also asks for FUSE_DONT_MASK, FUSE_HANDLE_KILLPRIV_V2,
//! FUSE_DIRECT_IO_ALLOW_MMAP and readdirplus; not FUSE_POSIX_ACL, which a tarn mount adds only
//! with acltype=posix).
//! Its open flags follow tarn's too: directories are opened with FOPEN_CACHE_DIR and
//! FOPEN_KEEP_CACHE; entries and attributes carry [`TTL`]. So its mount options, kernel
//! settings (max_write, max_pages, readahead, writeback cache, capabilities) and worker
//! threads are those of a tarn mount, and what it adds per request is a hash lookup under one
//! mutex.
//!
//! # What it serves
//! A real directory tree in memory (`tree.rs`): directories, regular files, symlinks, hard
//! links, fifos, sockets and device nodes (attributes only), with modes, owners, link counts
//! and the four times. lookup, getattr, setattr (mode, owner, size, atime/mtime including
//! "now", ctime), mknod, create, mkdir, rmdir (ENOTEMPTY, ENOTDIR), unlink (EISDIR), rename
//! (replacing a file, or an empty directory, with rename(2)'s checks; RENAME_NOREPLACE and
//! RENAME_EXCHANGE), link, symlink, readlink, listings (readdir and readdirplus), statfs,
//! fallocate, and no-op fsync, fsyncdir, flush and release. That is what `tar -xf` of a source
//! tree, git (init, add, commit, status), fio and `rm -rf` need. Setuid and setgid are cleared
//! on a marked write, an unprivileged truncate and a chown (FUSE_HANDLE_KILLPRIV_V2 leaves that
//! to the file system); a setgid directory hands on its group.
//!
//! A directory maps names to inode numbers in a hash map, and keeps the same entries ordered
//! by a cookie given when the entry is made (never reused), which is the entry's listing
//! offset: a listing resumes after the last cookie it returned, so `rm -rf` removing entries
//! while it lists skips nothing. An inode lives while it has a link or the kernel holds a
//! lookup of it (entry replies, counted, and `forget`), so an unlinked file stays readable
//! through an open descriptor.
//!
//! Contents (`contents.rs`): a regular file keeps its bytes while its size is at most
//! [`KEEP_BYTES_MAX`] (4 MiB), so git's own files (HEAD, config, index, objects, refs) and a
//! source tree's files read back what was written. Once a file grows past that its bytes are
//! dropped and it reads as zeros up to its size from then on (a truncate to 0 makes it keep
//! bytes again), so multi-GiB fio files cost no memory. A file that keeps its bytes is opened
//! with FOPEN_KEEP_CACHE (every change goes through this mount, so the kernel's pages are
//! right); one that does not is opened without it, so its pages are read again (as zeros).
//!
//! # Limits
//! Everything lives in memory and is gone at unmount (a source tree costs its size in RAM).
//! No extended attributes (none is set, setting one is refused) or ACLs, no ioctls (ENOTTY), no
//! file locks beyond the kernel's own, no atime updates on reads, no SEEK_DATA/SEEK_HOLE or
//! copy_file_range (the kernel falls back). The mode the kernel caches is not invalidated when a write clears
//! setuid (tarn invalidates it). Permissions are checked by the kernel (`default_permissions`).

mod contents;
mod tree;

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::time::SystemTime;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, IoctlFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

pub use contents::KEEP_BYTES_MAX;
use contents::{Bytes, File};
use tree::{Changes, Kind, NewNode, Tree};

use crate::{configure_kernel, mount_filesystem, MountHandle, MountOptions, TTL};

/// Size the null file system reports in statfs, so that tools checking free space go ahead.
const STATFS_BYTES: u64 = 1 << 50;
const BLOCK_SIZE: u32 = 4096;
/// The largest read served: replies of zeros come from one buffer this long.
const READ_BYTES_MAX: usize = 16 << 20;

/// The in-memory `fuser::Filesystem` (see the module documentation).
pub struct NullFuse {
    tree: Mutex<Tree>,
    zeros: Vec<u8>,
}

impl Default for NullFuse {
    fn default() -> Self {
        NullFuse::new()
    }
}

impl NullFuse {
    pub fn new() -> NullFuse {
        NullFuse {
            tree: Mutex::new(Tree::new(SystemTime::now())),
            zeros: vec![0u8; READ_BYTES_MAX],
        }
    }

    /// Make `name` in `parent` and reply with its entry.
    fn make(&self, parent: INodeNo, name: &OsStr, new: NewNode, reply: ReplyEntry) {
        let made = self
            .tree
            .lock()
            .make(parent.0, name, new, SystemTime::now());
        match made {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(errno) => reply.error(errno),
        }
    }

    fn reply_empty(reply: ReplyEmpty, result: Result<(), Errno>) {
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }
}

/// The open flags of a regular file: keep the kernel's pages while the file keeps its bytes.
fn file_open_flags(file: &File) -> FopenFlags {
    if file.keeps_bytes() {
        FopenFlags::FOPEN_KEEP_CACHE
    } else {
        FopenFlags::empty()
    }
}

/// Mount a fresh null file system at `mountpoint`, with the options a tarn mount would have.
pub fn mount(mountpoint: &Path, options: &MountOptions) -> io::Result<MountHandle> {
    mount_filesystem(NullFuse::new(), mountpoint, options)
}

impl Filesystem for NullFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Exactly what `TarnFuse::init` negotiates (without acltype=posix).
        configure_kernel(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = self.tree.lock().lookup(parent.0, name);
        match found {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(errno) => reply.error(errno),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.tree.lock().forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let attr = self.tree.lock().node(ino.0).map(|node| node.attr(ino.0));
        match attr {
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
        let changes = Changes {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            ctime,
            caller: req.uid(),
        };
        let result = self.tree.lock().setattr(ino.0, changes, SystemTime::now());
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(errno) => reply.error(errno),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let tree = self.tree.lock();
        match tree.node(ino.0).map(|node| &node.kind) {
            Ok(Kind::Symlink(target)) => reply.data(target.as_encoded_bytes()),
            Ok(_) => reply.error(Errno::EINVAL),
            Err(errno) => reply.error(errno),
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
        let kind = match mode & libc::S_IFMT {
            0 | libc::S_IFREG => Kind::File(File::new()),
            libc::S_IFIFO => Kind::Special(FileType::NamedPipe),
            libc::S_IFSOCK => Kind::Special(FileType::Socket),
            libc::S_IFCHR => Kind::Special(FileType::CharDevice),
            libc::S_IFBLK => Kind::Special(FileType::BlockDevice),
            libc::S_IFDIR => return reply.error(Errno::EPERM),
            _ => return reply.error(Errno::EINVAL),
        };
        let new = NewNode {
            kind,
            perm: mode & !umask,
            uid: req.uid(),
            gid: req.gid(),
            rdev,
        };
        self.make(parent, name, new, reply);
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
        let new = NewNode {
            kind: Tree::new_dir(parent.0),
            perm: mode & !umask,
            uid: req.uid(),
            gid: req.gid(),
            rdev: 0,
        };
        self.make(parent, name, new, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self
            .tree
            .lock()
            .remove(parent.0, name, false, SystemTime::now());
        NullFuse::reply_empty(reply, result);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self
            .tree
            .lock()
            .remove(parent.0, name, true, SystemTime::now());
        NullFuse::reply_empty(reply, result);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let new = NewNode {
            kind: Kind::Symlink(target.as_os_str().into()),
            perm: 0o777,
            uid: req.uid(),
            gid: req.gid(),
            rdev: 0,
        };
        self.make(parent, link_name, new, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let result = self.tree.lock().rename(
            parent.0,
            name,
            newparent.0,
            newname,
            flags,
            SystemTime::now(),
        );
        NullFuse::reply_empty(reply, result);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let linked = self
            .tree
            .lock()
            .link(ino.0, newparent.0, newname, SystemTime::now());
        match linked {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(errno) => reply.error(errno),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let flags = match self.tree.lock().node(ino.0).map(|node| &node.kind) {
            Ok(Kind::File(file)) => Ok(file_open_flags(file)),
            Ok(Kind::Dir(_)) => Err(Errno::EISDIR),
            Ok(_) => Ok(FopenFlags::empty()),
            Err(errno) => Err(errno),
        };
        match flags {
            Ok(flags) => reply.opened(FileHandle(0), flags),
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
        let tree = self.tree.lock();
        let zeros = match tree.node(ino.0).map(|node| &node.kind) {
            Ok(Kind::File(file)) => match file.read(offset, size) {
                // Sent under the lock: no copy of the bytes.
                Bytes::Kept(bytes) => return reply.data(bytes),
                Bytes::Zeros(length) => length.min(READ_BYTES_MAX),
            },
            Ok(Kind::Dir(_)) => return reply.error(Errno::EISDIR),
            Ok(_) => return reply.error(Errno::EINVAL),
            Err(errno) => return reply.error(errno),
        };
        drop(tree);
        reply.data(&self.zeros[..zeros]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let now = SystemTime::now();
        let mut tree = self.tree.lock();
        let result = tree.file_mut(ino.0).and_then(|node| {
            let Kind::File(file) = &mut node.kind else {
                return Err(Errno::EINVAL);
            };
            file.write(offset, data)?;
            node.mtime = now;
            node.ctime = now;
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                node.kill_privileges();
            }
            Ok(())
        });
        drop(tree);
        match result {
            Ok(()) => reply.written(data.len() as u32),
            Err(errno) => reply.error(errno),
        }
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
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let is_dir = self.tree.lock().node(ino.0).map(|node| node.is_dir());
        match is_dir {
            // As tarn: the kernel keeps listings in the directory's page cache, across opens;
            // every change through the mount drops them.
            Ok(true) => reply.opened(
                FileHandle(0),
                FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Ok(false) => reply.error(Errno::ENOTDIR),
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
        let listed = self.tree.lock().list(ino.0, offset, |entry| {
            reply.add(
                INodeNo(entry.ino),
                entry.next,
                entry.node.file_type(),
                entry.name,
            )
        });
        match listed {
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
        mut reply: ReplyDirectoryPlus,
    ) {
        let listed = self.tree.lock().list(ino.0, offset, |entry| {
            let attr: FileAttr = entry.node.attr(entry.ino);
            let full = reply.add(
                INodeNo(entry.ino),
                entry.next,
                entry.name,
                &TTL,
                &attr,
                Generation(0),
            );
            // Every entry but `.` and `..` is an entry reply the kernel counts.
            if !full && !entry.dot {
                entry.node.count_lookup();
            }
            full
        });
        match listed {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let blocks = STATFS_BYTES / BLOCK_SIZE as u64;
        let files = self.tree.lock().len() as u64;
        reply.statfs(
            blocks,
            blocks,
            blocks,
            files,
            u32::MAX as u64,
            BLOCK_SIZE,
            tree::NAME_MAX as u32,
            BLOCK_SIZE,
        );
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let new = NewNode {
            kind: Kind::File(File::new()),
            perm: mode & !umask,
            uid: req.uid(),
            gid: req.gid(),
            rdev: 0,
        };
        let made = self
            .tree
            .lock()
            .make(parent.0, name, new, SystemTime::now());
        match made {
            // A new file keeps its bytes.
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(errno) => reply.error(errno),
        }
    }

    // Extended attributes are supported, and none is set: a file has none (ENODATA, an empty
    // list) and setting one is refused (ENOTSUP). Not ENOSYS, which the kernel remembers and
    // stops asking: tarn supports them, so the kernel asks it (for security.capability before
    // every write, for one), and the floor must answer the same requests to be tarn's floor.
    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOTSUP);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENODATA);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(0);
        } else {
            reply.data(&[]);
        }
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENODATA);
    }

    /// No ioctls (file attributes, clones): what a file system without them says.
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
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
        let now = SystemTime::now();
        let mut tree = self.tree.lock();
        let result = tree.file_mut(ino.0).and_then(|node| {
            let Kind::File(file) = &mut node.kind else {
                return Err(Errno::EINVAL);
            };
            let size = file.size;
            file.allocate(offset, length, mode)?;
            if file.size != size || mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
                node.mtime = now;
                node.ctime = now;
            }
            Ok(())
        });
        drop(tree);
        NullFuse::reply_empty(reply, result);
    }
}
