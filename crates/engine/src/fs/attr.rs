//! The attributes of an inode (OpenZFS zfs_vnops.c `zfs_getattr`, `zfs_setattr`): the
//! [`Attr`] that `getattr` and every operation answering with attributes return, made from
//! the znode and its object's dnode, and `setattr`, which changes the mode, the owner, the
//! size (truncating or extending a regular file) and the times. A chown or chgrp that changes
//! the uid or gid first asks the quota admission of the new owners (fs/project.rs).
//!
//! `st_blocks` counts the space the object's synced tree holds plus the logical size of its
//! data not yet synced, so it settles to the allocated space once a sync has written the
//! data. A chmod also rewrites a stored POSIX access ACL to match ([`super::acl`]); such a
//! setattr makes no intent-log record (an fsync of the inode waits for its txg instead), and
//! any other setattr logs the attribute values it leaves. A truncation of a large file frees
//! its blocks in chunks of bounded txgs before the setattr's own transaction, which then only
//! trims the last partial block and sets the size.

use crate::object::owners::Owners;
use crate::types::ObjectId;

use super::acl;
use super::intent::setattr_mask_of;
use super::phys::{FileKind, Timestamp, Znode, MODE_PERMISSION_MASK, MODE_TYPE_MASK};
use super::{Attr, FileSystem, FsError, Result, SetAttr, FILE_SIZE_MAX};

impl FileSystem {
    pub(super) fn attr_of(&self, ino: u64, znode: &Znode) -> Result<Attr> {
        let info = self.objset.info(ObjectId(ino))?;
        let kind = znode.kind();
        // st_blocks: the space the object's synced tree holds (every copy, after compression),
        // plus the logical size of its data written since and not yet synced, an upper bound
        // on what that data will take (zeros become holes, compression shrinks the rest). So
        // never-written ranges count nothing, and the figure settles to the allocated space
        // once the data is synced.
        let blocks =
            (info.size_allocated + self.objset.dirty_bytes_of(ObjectId(ino))).div_ceil(512);
        Ok(Attr {
            ino,
            generation: info.generation.0,
            size: znode.size,
            blocks,
            atime: znode.atime,
            mtime: znode.mtime,
            ctime: znode.ctime,
            crtime: znode.crtime,
            kind,
            perm: (znode.mode & MODE_PERMISSION_MASK) as u16,
            nlink: znode.links,
            uid: znode.uid,
            gid: znode.gid,
            rdev: znode.rdev,
            // A file whose single block still grows prefers I/O of the recordsize, not of
            // its current block (OpenZFS reports the block, 512 bytes for a tiny file).
            blksize: if kind == FileKind::Regular {
                info.data_block_size.max(self.config().file_block_size)
            } else {
                info.data_block_size
            },
        })
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let znode = self.znode(ino)?;
        self.attr_of(ino, &znode)
    }

    /// The size of `ino` alone: [`FileSystem::getattr`] without the rest of the attributes
    /// (the FUSE adapter asks before every write-back).
    pub fn size(&self, ino: u64) -> Result<u64> {
        Ok(self.znode(ino)?.size)
    }

    pub fn setattr(&self, ino: u64, changes: SetAttr) -> Result<Attr> {
        let _gate = self.change()?;
        let _guards = self.lock_inodes(&[ino]);
        let mut znode = self.znode(ino)?;
        let kind = znode.kind();
        if let Some(mode) = changes.mode {
            if mode & MODE_TYPE_MASK != 0 && mode & MODE_TYPE_MASK != kind.mode_bits() {
                return Err(FsError::Invalid(format!(
                    "mode {mode:#o} changes the file type"
                )));
            }
            if mode & !(MODE_TYPE_MASK | MODE_PERMISSION_MASK) != 0 {
                return Err(FsError::Invalid(format!("mode {mode:#o}")));
            }
        }
        if let Some(size) = changes.size {
            match kind {
                FileKind::Regular => {}
                FileKind::Directory => return Err(FsError::IsDir),
                _ => return Err(FsError::Invalid("size of a non-regular file".into())),
            }
            if size > FILE_SIZE_MAX {
                return Err(FsError::Invalid(format!("size {size} too large")));
            }
        }
        // New owners take one more object: their quotas may refuse it (not on replay).
        let owners = Owners {
            user: changes.uid.unwrap_or(znode.uid),
            group: changes.gid.unwrap_or(znode.gid),
            project: znode.project,
        };
        if owners != znode.owners() {
            self.admit_owners(owners, Some(znode.owners()))?;
        }
        // A chmod rewrites a stored access ACL to match (read and checked before the
        // transaction).
        let acl = match changes.mode {
            Some(_) => self
                .xattr_of(ino, &znode, acl::ACL_ACCESS)?
                .map(|(raw, found)| {
                    acl::Acl::decode(&raw)
                        .map(|acl| (acl, found))
                        .map_err(|error| FsError::Corrupt(format!("inode {ino}: {error}")))
                })
                .transpose()?,
            None => None,
        };
        if let Some(size) = changes.size {
            // A large truncation frees in chunks of bounded txgs first; the transaction
            // below then only trims the last partial block and sets the size.
            if size < znode.size && self.is_large(ino)? {
                self.objset
                    .free_long_range(&self.txgs, ObjectId(ino), size)?;
            }
        }
        let now = Timestamp::now();
        let acl_rewritten = acl.is_some();
        let hold = self.txgs.assign()?;
        let tx = hold.tx();
        if let Some(size) = changes.size {
            if size < znode.size {
                self.objset.free_range(&tx, ObjectId(ino), size, u64::MAX)?;
            }
            if size != znode.size || changes.mtime.is_none() {
                znode.mtime = now;
            }
            znode.size = size;
        }
        if let Some(mode) = changes.mode {
            znode.mode = kind.mode_bits() | (mode & MODE_PERMISSION_MASK);
            if let Some((mut acl, found)) = acl {
                acl.chmod(mode);
                self.store_xattr(
                    tx,
                    ino,
                    &mut znode,
                    acl::ACL_ACCESS,
                    &acl.encode(),
                    Some(found),
                )?;
            }
        }
        if let Some(uid) = changes.uid {
            znode.uid = uid;
        }
        if let Some(gid) = changes.gid {
            znode.gid = gid;
        }
        if let Some(atime) = changes.atime {
            znode.atime = atime;
        }
        if let Some(mtime) = changes.mtime {
            znode.mtime = mtime;
        }
        znode.ctime = now;
        if acl_rewritten {
            self.put_znode(&tx, ino, &znode)?;
        } else {
            self.put_znode_logged(&tx, ino, &znode)?;
            self.log_setattr(&tx, ino, &znode, setattr_mask_of(&changes))?;
        }
        drop(hold);
        self.sync_always(ino)?;
        self.attr_of(ino, &znode)
    }
}
