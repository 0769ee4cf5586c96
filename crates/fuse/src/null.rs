//! A null FUSE file system: the baseline of `tarn bench mount`.
//!
//! It measures what FUSE itself costs on this machine, so that a tarn mount's throughput can be
//! judged against the best any FUSE file system could do with the same settings. It is mounted
//! through [`crate::mount_filesystem`] and negotiates [`crate::configure_kernel`] at init, so
//! its mount options, kernel settings (max_write, max_pages, readahead, capabilities) and
//! worker threads are exactly those of a tarn mount.
//!
//! What it serves: a root directory holding regular files, which can be created, opened,
//! truncated, listed and unlinked. Writes are discarded, but each file's size is kept, so a
//! read returns zeros up to the size, as if the file held zeros. Everything lives in memory and
//! is gone at unmount. Other operations (mkdir, symlink, rename, ...) answer ENOSYS.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::Path;
use std::time::SystemTime;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

use crate::{configure_kernel, mount_filesystem, MountHandle, MountOptions, TTL};

/// Size the null file system reports in statfs, so that tools checking free space go ahead.
const STATFS_BYTES: u64 = 1 << 50;
const BLOCK_SIZE: u32 = 4096;
/// The largest read served: replies come from one buffer of zeros this long.
const READ_BYTES_MAX: usize = 16 << 20;

/// One file of the null file system.
struct NullFile {
    name: OsString,
    size: u64,
    mode: u16,
    uid: u32,
    gid: u32,
    created: SystemTime,
}

/// The state: files by inode number (the root is inode 1, files count up from 2), and their
/// inode numbers by name, so that a lookup, create or unlink costs the same with 14,000 files
/// as with one (the file system is the floor of per-file work, not a part of it).
struct NullState {
    files: BTreeMap<u64, NullFile>,
    by_name: HashMap<OsString, u64>,
    next_ino: u64,
}

/// The `fuser::Filesystem` that discards writes and reads zeros (see the module documentation).
pub struct NullFuse {
    state: Mutex<NullState>,
    zeros: Vec<u8>,
    mounted: SystemTime,
}

impl Default for NullFuse {
    fn default() -> Self {
        NullFuse::new()
    }
}

impl NullFuse {
    pub fn new() -> NullFuse {
        NullFuse {
            state: Mutex::new(NullState {
                files: BTreeMap::new(),
                by_name: HashMap::new(),
                next_ino: 2,
            }),
            zeros: vec![0u8; READ_BYTES_MAX],
            mounted: SystemTime::now(),
        }
    }

    fn root_attr(&self) -> FileAttr {
        FileAttr {
            ino: INodeNo::ROOT,
            size: 0,
            blocks: 0,
            atime: self.mounted,
            mtime: self.mounted,
            ctime: self.mounted,
            crtime: self.mounted,
            kind: FileType::Directory,
            perm: 0o777,
            nlink: 2,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: BLOCK_SIZE,
            flags: 0,
        }
    }

    fn file_attr(ino: u64, file: &NullFile) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size: file.size,
            blocks: file.size.div_ceil(512),
            atime: file.created,
            mtime: file.created,
            ctime: file.created,
            crtime: file.created,
            kind: FileType::RegularFile,
            perm: file.mode,
            nlink: 1,
            uid: file.uid,
            gid: file.gid,
            rdev: 0,
            blksize: BLOCK_SIZE,
            flags: 0,
        }
    }

    fn attr(&self, ino: INodeNo) -> Option<FileAttr> {
        if ino == INodeNo::ROOT {
            return Some(self.root_attr());
        }
        let state = self.state.lock();
        state
            .files
            .get(&ino.0)
            .map(|file| NullFuse::file_attr(ino.0, file))
    }
}

/// Mount a fresh null file system at `mountpoint`, with the options a tarn mount would have.
pub fn mount(mountpoint: &Path, options: &MountOptions) -> io::Result<MountHandle> {
    mount_filesystem(NullFuse::new(), mountpoint, options)
}

impl Filesystem for NullFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        configure_kernel(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent != INodeNo::ROOT {
            return reply.error(Errno::ENOENT);
        }
        let state = self.state.lock();
        let found = state
            .by_name
            .get(name)
            .and_then(|ino| Some((*ino, state.files.get(ino)?)));
        match found {
            Some((ino, file)) => reply.entry(&TTL, &NullFuse::file_attr(ino, file), Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if ino == INodeNo::ROOT {
            return reply.attr(&TTL, &self.root_attr());
        }
        let mut state = self.state.lock();
        let Some(file) = state.files.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(mode) = mode {
            file.mode = (mode & 0o7777) as u16;
        }
        if let Some(uid) = uid {
            file.uid = uid;
        }
        if let Some(gid) = gid {
            file.gid = gid;
        }
        if let Some(size) = size {
            file.size = size;
        }
        reply.attr(&TTL, &NullFuse::file_attr(ino.0, file));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if parent != INodeNo::ROOT {
            return reply.error(Errno::ENOENT);
        }
        let mut state = self.state.lock();
        match state.by_name.remove(name) {
            Some(ino) => {
                state.files.remove(&ino);
                reply.ok();
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.attr(ino) {
            Some(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            None => reply.error(Errno::ENOENT),
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
        let Some(attr) = self.attr(ino) else {
            return reply.error(Errno::ENOENT);
        };
        if attr.kind == FileType::Directory {
            return reply.error(Errno::EISDIR);
        }
        let length = attr
            .size
            .saturating_sub(offset)
            .min(size as u64)
            .min(READ_BYTES_MAX as u64) as usize;
        reply.data(&self.zeros[..length]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut state = self.state.lock();
        let Some(file) = state.files.get_mut(&ino.0) else {
            return reply.error(Errno::EBADF);
        };
        let Some(end) = offset.checked_add(data.len() as u64) else {
            return reply.error(Errno::EFBIG);
        };
        file.size = file.size.max(end);
        reply.written(data.len() as u32);
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
        if ino == INodeNo::ROOT {
            reply.opened(FileHandle(0), FopenFlags::empty());
        } else {
            reply.error(Errno::ENOTDIR);
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
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        // Offsets: 1 after ".", 2 after "..", then a file's inode number + 2 after that file.
        if offset < 1 && reply.add(INodeNo::ROOT, 1, FileType::Directory, ".") {
            return reply.ok();
        }
        if offset < 2 && reply.add(INodeNo::ROOT, 2, FileType::Directory, "..") {
            return reply.ok();
        }
        let state = self.state.lock();
        let first = offset.saturating_sub(2).max(1) + 1;
        for (&ino, file) in state.files.range(first..) {
            if reply.add(INodeNo(ino), ino + 2, FileType::RegularFile, &file.name) {
                break;
            }
        }
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
        let files = self.state.lock().files.len() as u64;
        reply.statfs(
            blocks,
            blocks,
            blocks,
            files,
            u32::MAX as u64,
            BLOCK_SIZE,
            255,
            BLOCK_SIZE,
        );
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if parent != INodeNo::ROOT {
            return reply.error(Errno::ENOENT);
        }
        let mut state = self.state.lock();
        if state.by_name.contains_key(name) {
            return reply.error(Errno::EEXIST);
        }
        let ino = state.next_ino;
        state.next_ino += 1;
        let file = NullFile {
            name: name.to_os_string(),
            size: 0,
            mode: (mode & 0o7777) as u16,
            uid: req.uid(),
            gid: req.gid(),
            created: SystemTime::now(),
        };
        let attr = NullFuse::file_attr(ino, &file);
        state.by_name.insert(file.name.clone(), ino);
        state.files.insert(ino, file);
        reply.created(
            &TTL,
            &attr,
            Generation(0),
            FileHandle(0),
            FopenFlags::empty(),
        );
    }
}
