//! Project IDs (OpenZFS's project quotas: the XAT_PROJID and ZFS_PROJINHERIT parts of
//! zfs_setattr, zfs_mknode, zfs_link and zfs_rename; ext4's and XFS's the same way), and the
//! owner quota admission of the changes that give an owner one more object.
//!
//! # Theory
//! Every node has a project ID in its znode ([`PROJECT_ID_DEFAULT`], 0, for none): the
//! third owner beside its uid and gid, to which its space and its object are charged
//! (`object/owners.rs`) and which project quotas limit. A directory may carry the project
//! inherit flag ([`ZNODE_FLAG_PROJECT_INHERIT`]); then
//! - a node created in it gets its project ID, and a directory created in it gets the flag as
//!   well, so that a tree made under a project stays in it; a node created anywhere else is
//!   in project 0;
//! - a link or rename of a node into it is refused with [`FsError::CrossProject`] (EXDEV)
//!   unless the node is in that project, so that usage never leaves a project by a rename:
//!   `mv` copies instead, and the copy is charged to the directory's project. An exchange
//!   checks both nodes, each against the directory it goes to. As in ext4, XFS and OpenZFS the
//!   check holds within one directory too: a node left in another project when its directory
//!   was moved into one cannot be renamed in place.
//!
//! [`FileSystem::set_project`] changes one node: its project ID and, for a directory, the
//! inherit flag. Nothing else changes with it (not the nodes below a directory, whose
//! projects a tool sets one by one, as `chattr -R -p`, `xfs_quota project -s` and
//! `zfs project -s` do), and the flag is refused on anything but a directory.
//!
//! # Quota admission
//! Creating a node, a chown or chgrp that changes the uid or gid, and a change of project each
//! give the new owners one more object. Before its transaction each asks the dataset's
//! admission ([`crate::object::WriteReservation::owner_admits`]) and fails with
//! [`FsError::QuotaExceeded`] (EDQUOT) when it is refused; a change that leaves the owners as
//! they are asks nothing. Replay never asks, nor refuses a link or rename across projects: the
//! log records changes that were admitted when they were made, and a record that failed would
//! end replay there.
//!
//! # Intent log
//! A project change is a setattr record with the project bit (zil/record.rs), which the log
//! commits in order with the namespace records: a create in a directory with the inherit flag
//! derives its project at replay from the directory as it did when first made, so the create
//! record needs no project of its own, and replay never applies it without the project
//! change before it.
//!
//! # Feature gate
//! A nonzero project is written only where [`FileSystem::project_ids_allowed`] says so: the
//! one place the pool's feature for owner accounting decides.

use crate::object::owners::Owners;
use crate::zil::record::setattr_mask;

use super::phys::{
    FileKind, Timestamp, Znode, PROJECT_ID_DEFAULT, PROJECT_ID_INVALID, ZNODE_FLAG_PROJECT_INHERIT,
};
use super::{FileSystem, FsError, Result};

/// The project ID and flags a node of `kind` starts with when it is created in the directory
/// whose znode is `parent`: the directory's project if it has the inherit flag (and then
/// the flag too, for a directory), else project 0 and no flag.
pub(super) fn inherited_project(parent: &Znode, kind: FileKind) -> (u32, u64) {
    if !parent.project_inherit() {
        return (PROJECT_ID_DEFAULT, 0);
    }
    let flags = if kind == FileKind::Directory {
        ZNODE_FLAG_PROJECT_INHERIT
    } else {
        0
    };
    (parent.project, flags)
}

impl FileSystem {
    /// Whether nodes may be given project IDs other than 0: only where the object set keeps
    /// usage by owner, which the pool turns on with its feature `com.tarn:user_accounting`
    /// (needed to read; a build without it refuses such a znode anyway), so that no pool
    /// records projects it cannot account for. [`FileSystem::set_project`] asks it.
    pub fn project_ids_allowed(&self) -> bool {
        self.objset.keeps_owner_usage()
    }

    /// The project ID of `ino`, and whether it is a directory whose new nodes inherit it.
    pub fn project(&self, ino: u64) -> Result<(u32, bool)> {
        let znode = self.znode(ino)?;
        Ok((znode.project, znode.project_inherit()))
    }

    /// Put `ino` in project `project` and, for a directory, set or clear the project inherit
    /// flag (`inherit`; [`FsError::Invalid`] on anything but a directory). Only this node
    /// changes. A change of project asks the quota admission of the new owners
    /// ([`FsError::QuotaExceeded`]); a project other than 0 needs
    /// [`FileSystem::project_ids_allowed`] ([`FsError::NotSupported`]); `u32::MAX` is no
    /// project ([`FsError::Invalid`]). ctime changes unless nothing does.
    pub fn set_project(&self, ino: u64, project: u32, inherit: bool) -> Result<()> {
        if project == PROJECT_ID_INVALID {
            return Err(FsError::Invalid(format!(
                "project ID {project} (the largest is {})",
                PROJECT_ID_INVALID - 1
            )));
        }
        if project != PROJECT_ID_DEFAULT && !self.project_ids_allowed() {
            return Err(FsError::NotSupported);
        }
        self.change_project(ino, project, inherit)
    }

    /// [`FileSystem::set_project`] once its arguments are admitted; replay's entry point (what
    /// the log recorded was allowed when it was made).
    pub(super) fn change_project(&self, ino: u64, project: u32, inherit: bool) -> Result<()> {
        let _gate = self.change()?;
        let _guards = self.lock_inodes(&[ino]);
        let mut znode = self.znode(ino)?;
        let kind = znode.kind();
        if inherit && kind != FileKind::Directory {
            return Err(FsError::Invalid(format!(
                "inode {ino} is a {kind:?}: only directories take the project inherit flag"
            )));
        }
        if znode.project == project && znode.project_inherit() == inherit {
            return Ok(());
        }
        if znode.project != project {
            self.admit_owners(
                Owners {
                    project,
                    ..znode.owners()
                },
                Some(znode.owners()),
            )?;
        }
        let now = Timestamp::now();
        let hold = self.txgs.assign()?;
        let tx = hold.tx();
        znode.project = project;
        if inherit {
            znode.flags |= ZNODE_FLAG_PROJECT_INHERIT;
        } else {
            znode.flags &= !ZNODE_FLAG_PROJECT_INHERIT;
        }
        znode.ctime = now;
        self.put_znode_logged(&tx, ino, &znode)?;
        self.log_setattr(&tx, ino, &znode, setattr_mask::PROJECT)?;
        drop(hold);
        self.sync_always(ino)?;
        Ok(())
    }

    /// Whether intent-log replay is applying a record on this file system now.
    pub(super) fn replaying(&self) -> bool {
        self.zil.as_ref().is_some_and(|zil| zil.is_replaying())
    }

    /// Ask the dataset's admission whether `owners` may have one more object (module
    /// documentation): those of them that differ from `previous` (the node's owners before
    /// a chown or a change of project; None for a new node). Always yes during replay and
    /// without an admission (a snapshot's file system, a bare object set in a test). Never
    /// waits.
    pub(super) fn admit_owners(&self, owners: Owners, previous: Option<Owners>) -> Result<()> {
        if self.replaying() {
            return Ok(());
        }
        let Some(reservation) = self.objset.reservation() else {
            return Ok(());
        };
        reservation.owner_admits(owners, previous, 1)?;
        Ok(())
    }

    /// Refuse a new name in the directory whose znode is `directory` for the node whose znode
    /// is `node` when the directory's new nodes inherit a project other than the node's (the
    /// EXDEV of link and rename; not during replay).
    pub(super) fn check_project_entry(&self, directory: &Znode, node: &Znode) -> Result<()> {
        if self.replaying() || !directory.project_inherit() || directory.project == node.project {
            return Ok(());
        }
        Err(FsError::CrossProject {
            node: node.project,
            directory: directory.project,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::phys::{SpillXattrs, MODE_DIRECTORY};

    fn directory(project: u32, flags: u64) -> Znode {
        Znode {
            mode: MODE_DIRECTORY | 0o755,
            uid: 1,
            gid: 2,
            project,
            links: 2,
            size: 0,
            atime: Timestamp::default(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            crtime: Timestamp::default(),
            parent: 2,
            flags,
            rdev: 0,
            inline_target: Vec::new(),
            xattr_dir: 0,
            sa_xattrs: Vec::new(),
            spill: SpillXattrs::None,
        }
    }

    #[test]
    fn new_nodes_inherit_only_from_a_directory_with_the_flag() {
        let plain = directory(42, 0);
        assert_eq!(inherited_project(&plain, FileKind::Regular), (0, 0));
        assert_eq!(inherited_project(&plain, FileKind::Directory), (0, 0));
        let inheriting = directory(42, ZNODE_FLAG_PROJECT_INHERIT);
        assert_eq!(inherited_project(&inheriting, FileKind::Regular), (42, 0));
        assert_eq!(inherited_project(&inheriting, FileKind::Symlink), (42, 0));
        assert_eq!(
            inherited_project(&inheriting, FileKind::Directory),
            (42, ZNODE_FLAG_PROJECT_INHERIT)
        );
    }
}
