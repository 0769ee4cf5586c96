//! Request routing: which file system a FUSE inode number belongs to (the head, the control
//! directories `.zfs` and `.zfs/snapshot`, or an opened snapshot), the attributes of the control
//! directories, and the rules for what may change where. The numbering is in
//! [`crate::snapdir`], listings in `readdir.rs`; the request handlers in `lib.rs` call these.

use std::ffi::OsStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{Errno, FileAttr, INodeNo};
use tarn::{Attr, FileKind, Timestamp};

use crate::snapdir::{
    self, InodeKind, OpenSnapshot, SNAPSHOT_DIR_INO, SNAPSHOT_DIR_NAME, ZFS_DIR_INO, ZFS_DIR_NAME,
};
use crate::{bytes, file_attr, TarnFuse};

/// The generation the kernel is given for a regular file of the head whose engine generation is
/// `generation`, after `rollbacks` rollbacks (or receives) of the mount. The kernel owns the
/// size of a regular file it caches under the writeback cache and never takes it from an
/// attribute reply, so after a rollback it would keep the size it had; a new generation makes
/// its next lookup mark the cached inode bad and start a fresh one from the engine's attributes
/// (Linux `fuse_stale_inode`). The kernel compares only the low 32 bits, so the rollback count
/// moves those (by an odd step: 2^32 rollbacks before it repeats).
pub(crate) fn rollback_generation(generation: u64, rollbacks: u64) -> u64 {
    let low = (generation as u32).wrapping_add((rollbacks as u32).wrapping_mul(0x9e37_79b9));
    (generation & !0xffff_ffff) | low as u64
}

/// What a FUSE inode number names, resolved.
pub(crate) enum Node {
    /// An object of the head (the mounted file system).
    Head(u64),
    ZfsDir,
    SnapshotDir,
    /// An object of an opened snapshot.
    Snapshot(Arc<OpenSnapshot>, u64),
}

impl TarnFuse {
    /// What FUSE inode `ino` names. ESTALE for a snapshot that is gone and for numbers this
    /// adapter never hands out.
    pub(crate) fn resolve(&self, ino: INodeNo) -> Result<Node, Errno> {
        if ino == INodeNo::ROOT {
            return Ok(Node::Head(self.root));
        }
        match snapdir::decode(ino.0) {
            InodeKind::Head(object) => Ok(Node::Head(object)),
            InodeKind::ZfsDir => Ok(Node::ZfsDir),
            InodeKind::SnapshotDir => Ok(Node::SnapshotDir),
            InodeKind::Snapshot { record, object } => {
                match self.shared.snapshots.by_record(record) {
                    Ok(Some(snapshot)) => {
                        let object = snapdir::snapshot_object(object, snapshot.fs.root());
                        Ok(Node::Snapshot(snapshot, object))
                    }
                    Ok(None) => Err(Errno::ESTALE),
                    Err(error) => Err(self.fail("snapshot", error)),
                }
            }
            InodeKind::Invalid => Err(Errno::ESTALE),
        }
    }

    /// The head's inode `ino` (for requests only the head serves): EROFS below `.zfs`.
    pub(crate) fn head(&self, ino: INodeNo) -> Result<u64, Errno> {
        match self.resolve(ino)? {
            Node::Head(object) => Ok(object),
            Node::Snapshot(..) | Node::ZfsDir | Node::SnapshotDir => Err(Errno::EROFS),
        }
    }

    /// A head directory that is getting an entry called `name`: the root's `.zfs` exists.
    pub(crate) fn head_parent_for_new(&self, parent: INodeNo, name: &OsStr) -> Result<u64, Errno> {
        let parent = self.head(parent)?;
        if parent == self.root && bytes(name) == ZFS_DIR_NAME {
            return Err(Errno::EEXIST);
        }
        Ok(parent)
    }

    /// A head directory losing or replacing its entry `name`: the root's `.zfs` stays.
    pub(crate) fn head_parent_for_removal(
        &self,
        parent: INodeNo,
        name: &OsStr,
    ) -> Result<u64, Errno> {
        let parent = self.head(parent)?;
        if parent == self.root && bytes(name) == ZFS_DIR_NAME {
            return Err(Errno::EROFS);
        }
        Ok(parent)
    }

    /// tarn inode of the head to FUSE inode.
    pub(crate) fn fuse_ino(&self, ino: u64) -> Result<u64, Errno> {
        if ino == self.root {
            Ok(INodeNo::ROOT.0)
        } else {
            snapdir::head_ino(ino)
        }
    }

    /// The FUSE inode number of `object` of `node`'s file system.
    pub(crate) fn fuse_ino_in(&self, node: &Node, object: u64) -> Result<u64, Errno> {
        match node {
            Node::Snapshot(snapshot, _) => snapshot.ino(object),
            _ => self.fuse_ino(object),
        }
    }

    /// Attributes and generation as FUSE sees them, for an inode of `node`'s file system.
    pub(crate) fn fuse_attr(&self, node: &Node, attr: &Attr) -> Result<(FileAttr, u64), Errno> {
        let ino = self.fuse_ino_in(node, attr.ino)?;
        let generation = match node {
            Node::Snapshot(snapshot, _) => snapshot.generation(attr.generation),
            _ if attr.kind == FileKind::Regular => rollback_generation(
                attr.generation,
                self.shared.rollbacks.load(Ordering::Relaxed),
            ),
            _ => attr.generation,
        };
        Ok((file_attr(attr, ino), generation))
    }

    /// The attributes of `.zfs` or `.zfs/snapshot`: read-only directories owned by root, with
    /// the root's creation time (`.zfs/snapshot`: changed when the newest snapshot was taken).
    pub(crate) fn control_attr(&self, node: &Node) -> Result<FileAttr, Errno> {
        let root = self
            .fs
            .getattr(self.root)
            .map_err(|error| self.fail("getattr", error))?;
        let (ino, entries, changed) = match node {
            Node::ZfsDir => (ZFS_DIR_INO, 1, root.crtime),
            _ => {
                let listed = self
                    .shared
                    .snapshots
                    .list()
                    .map_err(|error| self.fail("snapshots", error))?;
                let newest = listed.iter().map(|info| info.creation_time).max().map_or(
                    root.crtime,
                    |seconds| Timestamp {
                        seconds: seconds.min(i64::MAX as u64) as i64,
                        nanoseconds: 0,
                    },
                );
                (SNAPSHOT_DIR_INO, listed.len() as u64, newest)
            }
        };
        let attr = Attr {
            ino,
            generation: 0,
            size: entries,
            blocks: 0,
            atime: changed,
            mtime: changed,
            ctime: changed,
            crtime: root.crtime,
            kind: FileKind::Directory,
            perm: 0o555,
            nlink: 2 + if ino == ZFS_DIR_INO { 1 } else { entries },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 512,
        };
        Ok(file_attr(&attr, ino))
    }

    pub(crate) fn lookup_node(
        &self,
        parent: INodeNo,
        name: &OsStr,
    ) -> Result<(FileAttr, u64), Errno> {
        let name = bytes(name);
        let parent = self.resolve(parent)?;
        match &parent {
            Node::Head(dir) if *dir == self.root && name == ZFS_DIR_NAME => {
                Ok((self.control_attr(&Node::ZfsDir)?, 0))
            }
            Node::Head(dir) => {
                let result = self.fs.lookup(*dir, name);
                self.head_entry(result, "lookup")
            }
            Node::ZfsDir => match name {
                b"." => Ok((self.control_attr(&Node::ZfsDir)?, 0)),
                b".." => self.head_entry(self.fs.getattr(self.root), "lookup"),
                SNAPSHOT_DIR_NAME => Ok((self.control_attr(&Node::SnapshotDir)?, 0)),
                _ => Err(Errno::ENOENT),
            },
            Node::SnapshotDir => match name {
                b"." => Ok((self.control_attr(&Node::SnapshotDir)?, 0)),
                b".." => Ok((self.control_attr(&Node::ZfsDir)?, 0)),
                _ => {
                    let snapshot = self
                        .shared
                        .snapshots
                        .by_name(name)
                        .map_err(|error| self.fail("lookup", error))?;
                    let root = snapshot.fs.root();
                    let attr = snapshot
                        .fs
                        .getattr(root)
                        .map_err(|error| self.fail("lookup", error))?;
                    self.fuse_attr(&Node::Snapshot(snapshot, root), &attr)
                }
            },
            Node::Snapshot(snapshot, dir) => {
                if *dir == snapshot.fs.root() && name == b".." {
                    return Ok((self.control_attr(&Node::SnapshotDir)?, 0));
                }
                let attr = snapshot
                    .fs
                    .lookup(*dir, name)
                    .map_err(|error| self.fail("lookup", error))?;
                self.fuse_attr(&parent, &attr)
            }
        }
    }

    pub(crate) fn getattr_node(&self, ino: INodeNo) -> Result<FileAttr, Errno> {
        Ok(self.entry_of(ino)?.0)
    }

    /// The attributes and generation of inode `ino`, as an entry reply gives them.
    pub(crate) fn entry_of(&self, ino: INodeNo) -> Result<(FileAttr, u64), Errno> {
        let node = self.resolve(ino)?;
        let attr = match &node {
            Node::ZfsDir | Node::SnapshotDir => return Ok((self.control_attr(&node)?, 0)),
            Node::Head(object) => self.fs.getattr(*object),
            Node::Snapshot(snapshot, object) => snapshot.fs.getattr(*object),
        }
        .map_err(|error| self.fail("getattr", error))?;
        self.fuse_attr(&node, &attr)
    }

    /// Renames and links stay within one file system: between the head and a snapshot, or two
    /// snapshots, EXDEV; within a snapshot or the control directories, EROFS.
    pub(crate) fn cross_check(&self, one: INodeNo, other: INodeNo) -> Result<(), Errno> {
        let side = |ino: INodeNo| match snapdir::decode(ino.0) {
            InodeKind::Head(_) => Some(0),
            InodeKind::Snapshot { record, .. } => Some(record),
            _ => None,
        };
        match (side(one), side(other)) {
            (Some(0), Some(0)) => Ok(()),
            (Some(a), Some(b)) if a != b => Err(Errno::EXDEV),
            _ => Err(Errno::EROFS),
        }
    }
}
