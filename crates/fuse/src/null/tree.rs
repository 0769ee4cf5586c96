//! The null file system's namespace: inodes by number, directories as name maps with stable
//! listing cookies, link counts and the kernel's lookup counts (module documentation of
//! [`super`]). Every operation is one or two hash lookups and, for listings, a B-tree range.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{Errno, FileAttr, FileType, INodeNo, RenameFlags, TimeOrNow};

use super::contents::File;
use super::BLOCK_SIZE;

/// The root directory's inode number (FUSE's).
pub(super) const ROOT: u64 = 1;
/// Listing offsets: `.` is followed by offset 1, `..` by 2, and a directory's entries carry
/// cookies from 3 up, in the order they were made.
const DOT_OFFSET: u64 = 1;
const DOTDOT_OFFSET: u64 = 2;
const FIRST_COOKIE: u64 = 3;
/// The longest name, as statfs reports it.
pub(super) const NAME_MAX: usize = 255;

/// One inode.
pub(super) struct Node {
    pub(super) kind: Kind,
    /// Permission bits with setuid, setgid and sticky (`mode & 0o7777`).
    pub(super) perm: u16,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) nlink: u32,
    pub(super) rdev: u32,
    /// Entry replies the kernel has not forgotten yet. A node with no links lives on while
    /// this is not zero (an open file, a working directory), like an unlinked inode on disk.
    /// A `Cell` so that a listing can count the entries it hands out while it walks the
    /// directory (always under the state's mutex).
    lookups: Cell<u64>,
    pub(super) atime: SystemTime,
    pub(super) mtime: SystemTime,
    pub(super) ctime: SystemTime,
    pub(super) crtime: SystemTime,
}

pub(super) enum Kind {
    Dir(Dir),
    File(File),
    Symlink(Box<OsStr>),
    /// A fifo, socket or device node (mknod): attributes only, the kernel serves the rest.
    Special(FileType),
}

/// A directory: names to inode numbers (hashed), and the same entries by cookie (ordered), so
/// that a listing resumes after the last cookie it returned whatever was removed meanwhile.
pub(super) struct Dir {
    pub(super) parent: u64,
    names: HashMap<Arc<OsStr>, Slot>,
    order: BTreeMap<u64, Entry>,
    next_cookie: u64,
}

#[derive(Clone, Copy)]
struct Slot {
    ino: u64,
    cookie: u64,
}

struct Entry {
    ino: u64,
    name: Arc<OsStr>,
}

impl Dir {
    fn new(parent: u64) -> Dir {
        Dir {
            parent,
            names: HashMap::new(),
            order: BTreeMap::new(),
            next_cookie: FIRST_COOKIE,
        }
    }

    pub(super) fn get(&self, name: &OsStr) -> Option<u64> {
        self.names.get(name).map(|slot| slot.ino)
    }

    pub(super) fn len(&self) -> usize {
        self.names.len()
    }

    fn insert(&mut self, name: &OsStr, ino: u64) {
        let name: Arc<OsStr> = Arc::from(name);
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.order.insert(
            cookie,
            Entry {
                ino,
                name: name.clone(),
            },
        );
        self.names.insert(name, Slot { ino, cookie });
    }

    fn remove(&mut self, name: &OsStr) -> Option<u64> {
        let slot = self.names.remove(name)?;
        self.order.remove(&slot.cookie);
        Some(slot.ino)
    }

    /// Point the existing entry `name` at `ino` (its cookie stays).
    fn repoint(&mut self, name: &OsStr, ino: u64) {
        if let Some(slot) = self.names.get_mut(name) {
            slot.ino = ino;
            if let Some(entry) = self.order.get_mut(&slot.cookie) {
                entry.ino = ino;
            }
        }
    }
}

/// An entry of a listing, as handed to the reply being filled.
pub(super) struct Listed<'a> {
    pub(super) ino: u64,
    /// The offset a listing continues from after this entry.
    pub(super) next: u64,
    pub(super) name: &'a OsStr,
    pub(super) node: &'a Node,
    /// `.` or `..`, which the kernel does not count as lookups in readdirplus.
    pub(super) dot: bool,
}

/// What a new node is made of (mkdir, mknod, create, symlink).
pub(super) struct NewNode {
    pub(super) kind: Kind,
    pub(super) perm: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) rdev: u32,
}

/// The changes of a setattr.
pub(super) struct Changes {
    pub(super) mode: Option<u32>,
    pub(super) uid: Option<u32>,
    pub(super) gid: Option<u32>,
    pub(super) size: Option<u64>,
    pub(super) atime: Option<TimeOrNow>,
    pub(super) mtime: Option<TimeOrNow>,
    pub(super) ctime: Option<SystemTime>,
    /// The caller's uid: a truncate by anyone but root clears setuid and setgid.
    pub(super) caller: u32,
}

impl Node {
    fn new(kind: Kind, perm: u32, uid: u32, gid: u32, rdev: u32, now: SystemTime) -> Node {
        let nlink = if matches!(kind, Kind::Dir(_)) { 2 } else { 1 };
        Node {
            kind,
            perm: (perm & 0o7777) as u16,
            uid,
            gid,
            nlink,
            rdev,
            lookups: Cell::new(0),
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
        }
    }

    pub(super) fn is_dir(&self) -> bool {
        matches!(self.kind, Kind::Dir(_))
    }

    pub(super) fn file_type(&self) -> FileType {
        match &self.kind {
            Kind::Dir(_) => FileType::Directory,
            Kind::File(_) => FileType::RegularFile,
            Kind::Symlink(_) => FileType::Symlink,
            Kind::Special(kind) => *kind,
        }
    }

    /// Count one entry reply handed to the kernel.
    pub(super) fn count_lookup(&self) {
        self.lookups.set(self.lookups.get() + 1);
    }

    pub(super) fn attr(&self, ino: u64) -> FileAttr {
        let size = match &self.kind {
            // As ZFS does: entries, with `.` and `..`.
            Kind::Dir(dir) => dir.len() as u64 + 2,
            Kind::File(file) => file.size,
            Kind::Symlink(target) => target.len() as u64,
            Kind::Special(_) => 0,
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            crtime: self.crtime,
            kind: self.file_type(),
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize: BLOCK_SIZE,
            flags: 0,
        }
    }

    /// Clear setuid, and setgid if group execute is set (what the VFS does on a write, a chown
    /// or an unprivileged truncate; FUSE_HANDLE_KILLPRIV_V2 leaves it to the file system).
    pub(super) fn kill_privileges(&mut self) {
        let mut perm = self.perm as u32 & !libc::S_ISUID;
        if perm & libc::S_IXGRP != 0 {
            perm &= !libc::S_ISGID;
        }
        self.perm = perm as u16;
    }

    fn touch_dir(&mut self, now: SystemTime) {
        self.mtime = now;
        self.ctime = now;
    }

    fn dir(&self) -> Result<&Dir, Errno> {
        match &self.kind {
            Kind::Dir(dir) => Ok(dir),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self) -> Result<&mut Dir, Errno> {
        match &mut self.kind {
            Kind::Dir(dir) => Ok(dir),
            _ => Err(Errno::ENOTDIR),
        }
    }
}

/// Every inode, by number; the root is 1, others count up from 2 and are never reused (so
/// generation 0 is right for all).
pub(super) struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
}

impl Tree {
    pub(super) fn new(now: SystemTime) -> Tree {
        let root = Node::new(Kind::Dir(Dir::new(ROOT)), 0o777, 0, 0, 0, now);
        // The kernel never forgets the root.
        root.lookups.set(1);
        Tree {
            nodes: HashMap::from([(ROOT, root)]),
            next_ino: ROOT + 1,
        }
    }

    /// Inodes in use (statfs).
    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    pub(super) fn node(&self, ino: u64) -> Result<&Node, Errno> {
        self.nodes.get(&ino).ok_or(Errno::ENOENT)
    }

    pub(super) fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    fn dir(&self, ino: u64) -> Result<&Dir, Errno> {
        self.node(ino)?.dir()
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut Dir, Errno> {
        self.node_mut(ino)?.dir_mut()
    }

    pub(super) fn file_mut(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        let node = self.node_mut(ino)?;
        match node.kind {
            Kind::File(_) => Ok(node),
            Kind::Dir(_) => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    /// The attributes of `name` in `parent`, counting a lookup.
    pub(super) fn lookup(&self, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        let ino = self.dir(parent)?.get(name).ok_or(Errno::ENOENT)?;
        let node = self.node(ino)?;
        node.count_lookup();
        Ok(node.attr(ino))
    }

    /// The kernel dropped `count` lookups of `ino`; a node with neither links nor lookups goes.
    pub(super) fn forget(&mut self, ino: u64, count: u64) {
        if ino == ROOT {
            return;
        }
        if let Some(node) = self.nodes.get(&ino) {
            let left = node.lookups.get().saturating_sub(count);
            node.lookups.set(left);
            if left == 0 && node.nlink == 0 {
                self.nodes.remove(&ino);
            }
        }
    }

    /// Make `name` in `parent` (counting a lookup: the reply is an entry).
    pub(super) fn make(
        &mut self,
        parent: u64,
        name: &OsStr,
        new: NewNode,
        now: SystemTime,
    ) -> Result<FileAttr, Errno> {
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let parent_node = self.node(parent)?;
        if parent_node.nlink == 0 {
            // A removed directory someone still has as its working directory.
            return Err(Errno::ENOENT);
        }
        if parent_node.dir()?.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        let NewNode {
            kind,
            mut perm,
            uid,
            mut gid,
            rdev,
        } = new;
        // A setgid directory hands its group on, and its setgid bit to subdirectories.
        if parent_node.perm as u32 & libc::S_ISGID != 0 {
            gid = parent_node.gid;
            if matches!(kind, Kind::Dir(_)) {
                perm |= libc::S_ISGID;
            }
        }
        let is_dir = matches!(kind, Kind::Dir(_));
        let ino = self.next_ino;
        self.next_ino += 1;
        let node = Node::new(kind, perm, uid, gid, rdev, now);
        node.count_lookup();
        let attr = node.attr(ino);
        self.nodes.insert(ino, node);
        let parent_node = self.node_mut(parent)?;
        parent_node.dir_mut()?.insert(name, ino);
        parent_node.touch_dir(now);
        if is_dir {
            parent_node.nlink += 1;
        }
        Ok(attr)
    }

    /// A new directory's contents.
    pub(super) fn new_dir(parent: u64) -> Kind {
        Kind::Dir(Dir::new(parent))
    }

    /// A hard link `newname` in `newparent` to `ino` (counting a lookup).
    pub(super) fn link(
        &mut self,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        now: SystemTime,
    ) -> Result<FileAttr, Errno> {
        if newname.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let node = self.node(ino)?;
        if node.is_dir() {
            return Err(Errno::EPERM);
        }
        if node.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        let parent = self.node_mut(newparent)?;
        let dir = parent.dir_mut()?;
        if dir.get(newname).is_some() {
            return Err(Errno::EEXIST);
        }
        dir.insert(newname, ino);
        parent.touch_dir(now);
        let node = self.node_mut(ino)?;
        node.nlink += 1;
        node.ctime = now;
        node.count_lookup();
        Ok(node.attr(ino))
    }

    /// Remove the entry `name` of `parent`, a directory if `dir` (rmdir) and anything else if
    /// not (unlink).
    pub(super) fn remove(
        &mut self,
        parent: u64,
        name: &OsStr,
        dir: bool,
        now: SystemTime,
    ) -> Result<(), Errno> {
        let ino = self.dir(parent)?.get(name).ok_or(Errno::ENOENT)?;
        let node = self.node(ino)?;
        match (&node.kind, dir) {
            (Kind::Dir(_), false) => return Err(Errno::EISDIR),
            (Kind::Dir(entries), true) if entries.len() > 0 => return Err(Errno::ENOTEMPTY),
            (Kind::Dir(_), true) => {}
            (_, true) => return Err(Errno::ENOTDIR),
            (_, false) => {}
        }
        let parent_node = self.node_mut(parent)?;
        parent_node.dir_mut()?.remove(name);
        parent_node.touch_dir(now);
        if dir {
            parent_node.nlink -= 1;
        }
        self.drop_link(ino, now);
        Ok(())
    }

    /// `ino` lost a name (a directory loses all of its links); gone if the kernel holds none.
    fn drop_link(&mut self, ino: u64, now: SystemTime) {
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.nlink = if node.is_dir() {
            0
        } else {
            node.nlink.saturating_sub(1)
        };
        node.ctime = now;
        if node.nlink == 0 && node.lookups.get() == 0 {
            self.nodes.remove(&ino);
        }
    }

    /// Whether directory `dir` is `ino` or lies below it.
    fn is_below(&self, mut dir: u64, ino: u64) -> bool {
        loop {
            if dir == ino {
                return true;
            }
            match self.nodes.get(&dir).map(|node| &node.kind) {
                Some(Kind::Dir(entries)) if dir != ROOT => dir = entries.parent,
                _ => return false,
            }
        }
    }

    /// rename(2) and renameat2(2) with RENAME_NOREPLACE or RENAME_EXCHANGE.
    pub(super) fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: RenameFlags,
        now: SystemTime,
    ) -> Result<(), Errno> {
        let known = RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_EXCHANGE;
        if !known.contains(flags) || flags == known {
            return Err(Errno::EINVAL);
        }
        if newname.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let ino = self.dir(parent)?.get(name).ok_or(Errno::ENOENT)?;
        let target = self.dir(newparent)?.get(newname);
        let moving_dir = self.node(ino)?.is_dir();
        if moving_dir && parent != newparent && self.is_below(newparent, ino) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            let target = target.ok_or(Errno::ENOENT)?;
            return self.exchange(parent, name, ino, newparent, newname, target, now);
        }
        if let Some(target) = target {
            if target == ino {
                // Two names of one file: nothing to do (POSIX).
                return Ok(());
            }
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            match (moving_dir, &self.node(target)?.kind) {
                (true, Kind::Dir(entries)) if entries.len() > 0 => return Err(Errno::ENOTEMPTY),
                (true, Kind::Dir(_)) => {}
                (true, _) => return Err(Errno::ENOTDIR),
                (false, Kind::Dir(_)) => return Err(Errno::EISDIR),
                (false, _) => {}
            }
            let newparent_node = self.node_mut(newparent)?;
            newparent_node.dir_mut()?.remove(newname);
            if moving_dir {
                newparent_node.nlink -= 1;
            }
            self.drop_link(target, now);
        }
        let parent_node = self.node_mut(parent)?;
        parent_node.dir_mut()?.remove(name);
        parent_node.touch_dir(now);
        if moving_dir && parent != newparent {
            parent_node.nlink -= 1;
        }
        let newparent_node = self.node_mut(newparent)?;
        newparent_node.dir_mut()?.insert(newname, ino);
        newparent_node.touch_dir(now);
        if moving_dir && parent != newparent {
            newparent_node.nlink += 1;
        }
        let node = self.node_mut(ino)?;
        node.ctime = now;
        if let Kind::Dir(dir) = &mut node.kind {
            dir.parent = newparent;
        }
        Ok(())
    }

    /// RENAME_EXCHANGE: `name` in `parent` (inode `ino`) and `newname` in `newparent` (inode
    /// `target`) swap inodes; a directory that changes parent moves a link of each parent.
    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &mut self,
        parent: u64,
        name: &OsStr,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        target: u64,
        now: SystemTime,
    ) -> Result<(), Errno> {
        if target == ino {
            return Ok(());
        }
        let target_dir = self.node(target)?.is_dir();
        if target_dir && parent != newparent && self.is_below(parent, target) {
            return Err(Errno::EINVAL);
        }
        self.dir_mut(parent)?.repoint(name, target);
        self.dir_mut(newparent)?.repoint(newname, ino);
        for (moved, from, to) in [(ino, parent, newparent), (target, newparent, parent)] {
            let node = self.node_mut(moved)?;
            node.ctime = now;
            let Kind::Dir(dir) = &mut node.kind else {
                continue;
            };
            dir.parent = to;
            if from != to {
                self.node_mut(from)?.nlink -= 1;
                self.node_mut(to)?.nlink += 1;
            }
        }
        self.node_mut(parent)?.touch_dir(now);
        self.node_mut(newparent)?.touch_dir(now);
        Ok(())
    }

    /// setattr: mode, owner, size, times.
    pub(super) fn setattr(
        &mut self,
        ino: u64,
        changes: Changes,
        now: SystemTime,
    ) -> Result<FileAttr, Errno> {
        let node = self.node_mut(ino)?;
        if let Some(size) = changes.size {
            match &mut node.kind {
                Kind::File(file) => file.set_size(size)?,
                Kind::Dir(_) => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
            node.mtime = now;
        }
        if let Some(mode) = changes.mode {
            node.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = changes.uid {
            node.uid = uid;
        }
        if let Some(gid) = changes.gid {
            node.gid = gid;
        }
        let chown = changes.uid.is_some() || changes.gid.is_some();
        let truncate = changes.size.is_some() && changes.caller != 0;
        if !node.is_dir() && (chown || truncate) {
            node.kill_privileges();
        }
        let resolve = |time: TimeOrNow| match time {
            TimeOrNow::SpecificTime(time) => time,
            TimeOrNow::Now => now,
        };
        if let Some(atime) = changes.atime {
            node.atime = resolve(atime);
        }
        if let Some(mtime) = changes.mtime {
            node.mtime = resolve(mtime);
        }
        node.ctime = changes.ctime.unwrap_or(now);
        Ok(node.attr(ino))
    }

    /// Hand the entries of directory `ino` after `offset` to `add` until it says the reply is
    /// full (returns true).
    pub(super) fn list(
        &self,
        ino: u64,
        offset: u64,
        mut add: impl FnMut(Listed<'_>) -> bool,
    ) -> Result<(), Errno> {
        let node = self.node(ino)?;
        let dir = node.dir()?;
        if offset < DOT_OFFSET {
            let dot = Listed {
                ino,
                next: DOT_OFFSET,
                name: OsStr::new("."),
                node,
                dot: true,
            };
            if add(dot) {
                return Ok(());
            }
        }
        if offset < DOTDOT_OFFSET {
            let dotdot = Listed {
                ino: dir.parent,
                next: DOTDOT_OFFSET,
                name: OsStr::new(".."),
                node: self.node(dir.parent)?,
                dot: true,
            };
            if add(dotdot) {
                return Ok(());
            }
        }
        for (&cookie, entry) in dir.order.range(offset.max(DOTDOT_OFFSET) + 1..) {
            let Some(child) = self.nodes.get(&entry.ino) else {
                continue;
            };
            let listed = Listed {
                ino: entry.ino,
                next: cookie,
                name: &entry.name,
                node: child,
                dot: false,
            };
            if add(listed) {
                break;
            }
        }
        Ok(())
    }
}
