//! Directory listings: `readdir` (names, inode numbers and types) and `readdirplus` (the same
//! with each entry's attributes, so `ls -l`, `find` and `git status` need no lookup per name).
//!
//! # Readdirplus
//! The mount negotiates `FUSE_DO_READDIRPLUS` with `FUSE_READDIRPLUS_AUTO`: the kernel asks for
//! attributes on a directory's first listing and whenever lookups followed the last one, and
//! plain names otherwise (a second `ls` without `-l`). Every entry of a readdirplus reply except
//! `.` and `..` is an entry reply to the kernel: it installs the name with [`crate::TTL`] and
//! counts one lookup of the inode, exactly as a `lookup` would. So the adapter records each such
//! entry as handed out (`kernel_cache.rs`: the name before the engine is asked, the inode once
//! the reply is complete) and rollbacks invalidate it like any other. The kernel ignores the
//! attributes of `.` and `..` and does not count them (fs/fuse/readdir.c,
//! `fuse_direntplus_link`); they are sent correct all the same.
//!
//! An entry removed between the engine's listing and its attribute read is left out (as if
//! removed before the listing); any other failure fails the whole reply, which then hands out
//! nothing. Cost: one `getattr` of the engine per entry, which is what the lookups it saves
//! would each have cost.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;

use fuser::{Errno, FileType, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};
use tarn::COOKIE_FIRST;

use crate::route::Node;
use crate::snapdir::{self, SNAPSHOT_DIR_INO, SNAPSHOT_DIR_NAME, ZFS_DIR_INO, ZFS_DIR_NAME};
use crate::{file_type, TarnFuse, READDIR_BATCH, TTL};

/// The readdir offset after the root's `..`, where `.zfs` is listed when visible; the entry
/// after it continues at the engine's first stored entry ([`COOKIE_FIRST`]), which the engine
/// also starts at from this offset.
const ZFS_ENTRY_OFFSET: u64 = 2;
const _: () = assert!(COOKIE_FIRST > ZFS_ENTRY_OFFSET);

/// A reply being filled with entries: plain (readdir) or with attributes (readdirplus).
pub(crate) trait Listing {
    /// Add the entry `name` of directory `dir` (FUSE inode numbers both), whose successor is at
    /// offset `next`. True when the reply is full (the entry was not added).
    fn push(
        &mut self,
        adapter: &TarnFuse,
        dir: u64,
        ino: u64,
        next: u64,
        kind: FileType,
        name: &[u8],
    ) -> Result<bool, Errno>;
}

impl Listing for ReplyDirectory {
    fn push(
        &mut self,
        _adapter: &TarnFuse,
        _dir: u64,
        ino: u64,
        next: u64,
        kind: FileType,
        name: &[u8],
    ) -> Result<bool, Errno> {
        Ok(self.add(INodeNo(ino), next, kind, OsStr::from_bytes(name)))
    }
}

/// A readdirplus reply and the inodes it hands out to the kernel (counted when it is sent).
pub(crate) struct PlusListing {
    reply: ReplyDirectoryPlus,
    handed_out: Vec<u64>,
}

impl PlusListing {
    pub(crate) fn new(reply: ReplyDirectoryPlus) -> PlusListing {
        PlusListing {
            reply,
            handed_out: Vec::new(),
        }
    }

    /// Send the entries, counting the kernel's new references.
    pub(crate) fn send(self, adapter: &TarnFuse) {
        for ino in self.handed_out {
            adapter.shared.kernel.inode_handed_out(ino);
        }
        self.reply.ok();
    }

    pub(crate) fn fail(self, errno: Errno) {
        self.reply.error(errno);
    }
}

impl Listing for PlusListing {
    fn push(
        &mut self,
        adapter: &TarnFuse,
        dir: u64,
        ino: u64,
        next: u64,
        _kind: FileType,
        name: &[u8],
    ) -> Result<bool, Errno> {
        let counted = name != b"." && name != b"..";
        if counted {
            adapter.shared.kernel.entry_asked(dir, name);
        }
        let (attr, generation) = match adapter.entry_of(INodeNo(ino)) {
            Ok(found) => found,
            Err(Errno::ENOENT) => return Ok(false),
            Err(errno) => return Err(errno),
        };
        let name = OsStr::from_bytes(name);
        if self.reply.add(
            INodeNo(ino),
            next,
            name,
            &TTL,
            &attr,
            Generation(generation),
        ) {
            return Ok(true);
        }
        if counted {
            self.handed_out.push(ino);
        }
        Ok(false)
    }
}

impl TarnFuse {
    /// Add entries of `ino` from `offset` to `reply` until it is full or the directory ends.
    pub(crate) fn readdir_node(
        &self,
        ino: INodeNo,
        offset: u64,
        reply: &mut impl Listing,
    ) -> Result<(), Errno> {
        let node = self.resolve(ino)?;
        let (fs, dir) = match &node {
            Node::ZfsDir => {
                let entries = [
                    (ZFS_DIR_INO, &b"."[..]),
                    (INodeNo::ROOT.0, &b".."[..]),
                    (SNAPSHOT_DIR_INO, SNAPSHOT_DIR_NAME),
                ];
                self.add_fixed_entries(reply, ino.0, offset, &entries)?;
                return Ok(());
            }
            Node::SnapshotDir => return self.readdir_snapshots(offset, reply),
            Node::Head(dir) => (&self.fs, *dir),
            Node::Snapshot(snapshot, dir) => (&snapshot.fs, *dir),
        };
        let at_root = matches!(node, Node::Head(dir) if dir == self.root);
        let show_zfs = at_root && self.shared.snapdir_visible.load(Ordering::Relaxed);
        let snapshot_root =
            matches!(&node, Node::Snapshot(snapshot, dir) if *dir == snapshot.fs.root());
        let mut cookie = offset;
        loop {
            if show_zfs && cookie == ZFS_ENTRY_OFFSET {
                if reply.push(
                    self,
                    ino.0,
                    ZFS_DIR_INO,
                    COOKIE_FIRST,
                    FileType::Directory,
                    ZFS_DIR_NAME,
                )? {
                    return Ok(());
                }
                cookie = COOKIE_FIRST;
            }
            // Stop after `..` when `.zfs` comes next.
            let batch = if show_zfs && cookie < ZFS_ENTRY_OFFSET {
                (ZFS_ENTRY_OFFSET - cookie) as usize
            } else {
                READDIR_BATCH
            };
            let entries = fs
                .readdir(dir, cookie, batch)
                .map_err(|error| self.fail("readdir", error))?;
            if entries.is_empty() {
                return Ok(());
            }
            for entry in entries {
                let next = entry.next_cookie;
                if at_root && entry.name == ZFS_DIR_NAME {
                    // Shadowed by the control directory.
                    cookie = next;
                    continue;
                }
                let entry_ino = if snapshot_root && entry.name == b".." {
                    SNAPSHOT_DIR_INO
                } else {
                    self.fuse_ino_in(&node, entry.ino)?
                };
                if reply.push(
                    self,
                    ino.0,
                    entry_ino,
                    next,
                    file_type(entry.kind),
                    &entry.name,
                )? {
                    return Ok(());
                }
                cookie = next;
            }
        }
    }

    /// `.zfs/snapshot`: `.`, `..`, then the snapshots by record number (stable offsets while
    /// snapshots come and go: an entry's offset is its record plus 2).
    fn readdir_snapshots(&self, offset: u64, reply: &mut impl Listing) -> Result<(), Errno> {
        let fixed = [(SNAPSHOT_DIR_INO, &b"."[..]), (ZFS_DIR_INO, &b".."[..])];
        if self.add_fixed_entries(reply, SNAPSHOT_DIR_INO, offset, &fixed)? {
            return Ok(());
        }
        let mut listed = self
            .shared
            .snapshots
            .list()
            .map_err(|error| self.fail("readdir", error))?;
        listed.sort_by_key(|info| info.object);
        for info in listed {
            let next = info.object.saturating_add(2);
            if next <= offset {
                continue;
            }
            let Ok(ino) = snapdir::snapshot_root_ino(info.object) else {
                continue;
            };
            let name = snapdir::short_name(&info.name);
            if reply.push(
                self,
                SNAPSHOT_DIR_INO,
                ino,
                next,
                FileType::Directory,
                name.as_bytes(),
            )? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Add `entries` of `dir` (inode, name; offsets 1, 2, ...) from `offset`; true if the reply
    /// is full.
    fn add_fixed_entries(
        &self,
        reply: &mut impl Listing,
        dir: u64,
        offset: u64,
        entries: &[(u64, &[u8])],
    ) -> Result<bool, Errno> {
        for (index, (ino, name)) in entries.iter().enumerate() {
            let next = index as u64 + 1;
            if next > offset && reply.push(self, dir, *ino, next, FileType::Directory, name)? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
