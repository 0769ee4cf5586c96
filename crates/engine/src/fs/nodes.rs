//! Making and removing names: create, mkdir, mknod, symlink (short targets inline in the
//! znode, long ones in the object's data), link, unlink and rmdir, with the default-ACL
//! inheritance and umask of a new node, its project inherited from the directory and the
//! owner quota admission it asks first (fs/project.rs), and the removal that parks a
//! still-open file in the unlinked set. Each of these makes an intent-log record
//! (fs/intent.rs).

use crate::block::blkptr::ObjectType;
use crate::object::adapters::KvObject;
use crate::object::kv;
use crate::types::ObjectId;
use crate::zil::record::RecordBody;

use super::dir::{check_name, check_new_name, check_old_name};
use super::phys::log_time;
use super::phys::{
    DirEntryValue, FileKind, SpillXattrs, Timestamp, Znode, INLINE_TARGET_MAX,
    MODE_PERMISSION_MASK, MODE_TYPE_MASK,
};
use super::project::inherited_project;
use super::unlinked::Dropped;
use super::{kv_error, Attr, FileSystem, FsError, Result, SYMLINK_TARGET_MAX};

/// Where a new node's object number and birth time come from.
#[derive(Clone, Copy, Debug)]
pub(super) enum NodeOrigin {
    /// A new node: the next object number, the time now.
    New,
    /// A node the intent log's replay makes again, as its record says.
    Replayed { object: u64, time: Timestamp },
}

impl FileSystem {
    /// Create a regular file. `mode` holds permission bits (type bits, if any, must say
    /// regular file).
    pub fn create(&self, dir: u64, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.make_node(
            dir,
            name,
            FileKind::Regular,
            mode,
            0,
            uid,
            gid,
            0,
            None,
            NodeOrigin::New,
        )
    }

    pub fn mkdir(&self, dir: u64, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.make_node(
            dir,
            name,
            FileKind::Directory,
            mode,
            0,
            uid,
            gid,
            0,
            None,
            NodeOrigin::New,
        )
    }

    /// Create a fifo, socket, character or block device (metadata only) or a regular file,
    /// as the type bits of `mode` say.
    pub fn mknod(
        &self,
        dir: u64,
        name: &[u8],
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        let kind = FileKind::from_mode(mode)
            .ok_or_else(|| FsError::Invalid(format!("mknod mode {mode:#o}")))?;
        match kind {
            FileKind::Directory | FileKind::Symlink => {
                Err(FsError::Invalid(format!("mknod cannot make a {kind:?}")))
            }
            _ => self.make_node(
                dir,
                name,
                kind,
                mode,
                0,
                uid,
                gid,
                rdev,
                None,
                NodeOrigin::New,
            ),
        }
    }

    pub fn symlink(
        &self,
        dir: u64,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        if target.is_empty() || target.len() > SYMLINK_TARGET_MAX || target.contains(&0) {
            return Err(FsError::Invalid(format!(
                "symlink target of {} bytes (1..={SYMLINK_TARGET_MAX}, no NUL)",
                target.len()
            )));
        }
        self.make_node(
            dir,
            name,
            FileKind::Symlink,
            0o777,
            0,
            uid,
            gid,
            0,
            Some(target),
            NodeOrigin::New,
        )
    }

    /// Create a regular file, directory, fifo, socket or device node, as the type bits of
    /// `mode` say, for a caller whose umask is `umask` (the FUSE adapter's entry point). With
    /// `acltype=posix` and a default ACL on `dir`, the new inode inherits it and the umask is
    /// not applied ([`acl`]); otherwise the umask masks `mode`.
    #[allow(clippy::too_many_arguments)]
    pub fn create_node(
        &self,
        dir: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        let kind = FileKind::from_mode(mode)
            .filter(|&kind| kind != FileKind::Symlink)
            .ok_or_else(|| FsError::Invalid(format!("create mode {mode:#o}")))?;
        self.make_node(
            dir,
            name,
            kind,
            mode,
            umask,
            uid,
            gid,
            rdev,
            None,
            NodeOrigin::New,
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn make_node(
        &self,
        dir: u64,
        name: &[u8],
        kind: FileKind,
        mode: u32,
        umask: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        target: Option<&[u8]>,
        origin: NodeOrigin,
    ) -> Result<Attr> {
        let _gate = self.change()?;
        check_new_name(name)?;
        if mode & MODE_TYPE_MASK != 0 && mode & MODE_TYPE_MASK != kind.mode_bits() {
            return Err(FsError::Invalid(format!("mode {mode:#o} for a {kind:?}")));
        }
        if mode & !(MODE_TYPE_MASK | MODE_PERMISSION_MASK) != 0 {
            return Err(FsError::Invalid(format!("mode {mode:#o}")));
        }
        let _guards = self.lock_inodes(&[dir]);
        let mut parent = self.live_directory(dir)?;
        if self.dir_lookup(dir, name)?.is_some() {
            return Err(FsError::Exists);
        }
        let requested_mode = kind.mode_bits() | (mode & MODE_PERMISSION_MASK);
        let (mode, inherited) = self.inherit_acls(dir, &parent, kind, mode, umask)?;
        let now = match origin {
            NodeOrigin::New => Timestamp::now(),
            NodeOrigin::Replayed { time, .. } => time,
        };
        // The directory's project, if it passes it on; replay derives the same from the
        // directory as replay left it (fs/project.rs).
        let (project, flags) = inherited_project(&parent, kind);
        let (inline_target, long_target) = match target {
            Some(target) if target.len() <= INLINE_TARGET_MAX => (target.to_vec(), None),
            Some(target) => (Vec::new(), Some(target)),
            None => (Vec::new(), None),
        };
        let znode = Znode {
            mode: kind.mode_bits() | (mode & MODE_PERMISSION_MASK),
            uid,
            gid,
            project,
            links: if kind == FileKind::Directory { 2 } else { 1 },
            size: target.map_or(0, |target| target.len() as u64),
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            parent: dir,
            flags,
            rdev: if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
                rdev
            } else {
                0
            },
            inline_target,
            xattr_dir: 0,
            sa_xattrs: Vec::new(),
            spill: SpillXattrs::None,
        };
        if let NodeOrigin::New = origin {
            // Its owners' quotas first: nothing is made for a create they refuse.
            self.admit_owners(znode.owners(), None)?;
        }
        let hold = self.txgs.assign()?;
        let tx = hold.tx();
        if let NodeOrigin::New = origin {
            self.charge_namespace(&tx, &[dir, super::write::NEW_NODE], 0)?;
        }
        // Data first: a write refused for lack of space leaves nothing half made.
        let props = self.props_for(kind);
        let object = match origin {
            NodeOrigin::New => self
                .objset
                .create_object(&tx, props, ObjectType::None, &[])?,
            NodeOrigin::Replayed { object, .. } => {
                self.objset.create_object_at(
                    &tx,
                    ObjectId(object),
                    props,
                    ObjectType::None,
                    &[],
                )?;
                ObjectId(object)
            }
        };
        let ino = object.0;
        if let Some(target) = long_target {
            if let Err(error) = self.write_file_data(&tx, object.0, 0, target) {
                // Refused before anything was written (no space): take the object back.
                self.objset.remove_object(&tx, object)?;
                return Err(error.into());
            }
        }
        if kind == FileKind::Directory {
            kv::create(&mut KvObject::new(&self.objset, object, Some(tx))?)
                .map_err(kv_error(ino))?;
        }
        let mut znode = znode;
        for (name, value) in inherited {
            self.store_xattr(tx, ino, &mut znode, name, &value, None)?;
        }
        self.put_znode_logged(&tx, ino, &znode)?;
        self.dir_insert(tx, dir, name, DirEntryValue { object: ino, kind })?;
        parent.size += 1;
        if kind == FileKind::Directory {
            parent.links += 1;
        }
        parent.mtime = now;
        parent.ctime = now;
        self.put_znode_logged(&tx, dir, &parent)?;
        // The object was born in this txg: that is its generation.
        self.log_record(
            &tx,
            ino,
            tx.txg.0,
            &[dir],
            RecordBody::Create {
                dir,
                name: name.to_vec(),
                mode: requested_mode,
                umask,
                uid,
                gid,
                rdev,
                time: log_time(now),
                target: target.unwrap_or_default().to_vec(),
            },
        );
        drop(hold);
        self.sync_always(ino)?;
        self.attr_of(ino, &znode)
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let znode = self.znode(ino)?;
        if znode.kind() != FileKind::Symlink {
            return Err(FsError::Invalid("not a symbolic link".into()));
        }
        if !znode.inline_target.is_empty() {
            return Ok(znode.inline_target);
        }
        let length = znode.size as usize;
        if length == 0 || length > SYMLINK_TARGET_MAX {
            return Err(FsError::Corrupt(format!(
                "symlink {ino}: target of {length} bytes"
            )));
        }
        let mut target = vec![0u8; length];
        self.objset.read(ObjectId(ino), 0, &mut target)?;
        Ok(target)
    }

    /// A new name `newname` in `newdir` for the non-directory `ino`.
    pub fn link(&self, ino: u64, newdir: u64, newname: &[u8]) -> Result<Attr> {
        let _gate = self.change()?;
        check_new_name(newname)?;
        let _guards = self.lock_inodes(&[ino, newdir]);
        let mut staged = self.stage(&[ino, newdir])?;
        if staged.get(newdir).kind() != FileKind::Directory {
            return Err(FsError::NotDir);
        }
        if staged.get(newdir).links == 0 || staged.get(ino).links == 0 {
            return Err(FsError::NotFound);
        }
        let kind = staged.get(ino).kind();
        if kind == FileKind::Directory {
            return Err(FsError::IsDir);
        }
        if self.dir_lookup(newdir, newname)?.is_some() {
            return Err(FsError::Exists);
        }
        self.check_project_entry(staged.peek(newdir), staged.peek(ino))?;
        let now = Timestamp::now();
        let generation = self.generation_of(ino)?;
        let hold = self.txgs.assign()?;
        let tx = hold.tx();
        self.charge_namespace(&tx, &[ino, newdir], 0)?;
        self.dir_insert(tx, newdir, newname, DirEntryValue { object: ino, kind })?;
        let inode = staged.get(ino);
        inode.links += 1;
        inode.ctime = now;
        let directory = staged.get(newdir);
        directory.size += 1;
        directory.mtime = now;
        directory.ctime = now;
        self.write_staged_logged(&tx, &staged, &[])?;
        self.log_record(
            &tx,
            ino,
            generation,
            &[newdir],
            RecordBody::Link {
                dir: newdir,
                name: newname.to_vec(),
            },
        );
        drop(hold);
        self.sync_always(ino)?;
        let znode = staged.get(ino).clone();
        self.attr_of(ino, &znode)
    }

    /// Remove the non-directory entry `name` from `dir`.
    pub fn unlink(&self, dir: u64, name: &[u8]) -> Result<()> {
        check_old_name(name)?;
        self.remove_entry(dir, name, false)
    }

    /// Remove the empty directory `name` from `dir`.
    pub fn rmdir(&self, dir: u64, name: &[u8]) -> Result<()> {
        check_name(name)?;
        if name == b"." {
            return Err(FsError::Invalid("cannot remove '.'".into()));
        }
        if name == b".." {
            return Err(FsError::NotEmpty);
        }
        self.remove_entry(dir, name, true)
    }

    pub(super) fn remove_entry(&self, dir: u64, name: &[u8], directory: bool) -> Result<()> {
        let _gate = self.change()?;
        let (entry, guards) = self.lock_entry(dir, name)?;
        let child = entry.object;
        let mut staged = self.stage(&[dir, child])?;
        let child_kind = staged.get(child).kind();
        if child_kind != entry.kind {
            return Err(FsError::Corrupt(format!(
                "directory {dir}: entry kind {:?}, inode {child} is a {child_kind:?}",
                entry.kind
            )));
        }
        match (directory, child_kind == FileKind::Directory) {
            (false, true) => return Err(FsError::IsDir),
            (true, false) => return Err(FsError::NotDir),
            _ => {}
        }
        if directory && staged.get(child).size != 0 {
            return Err(FsError::NotEmpty);
        }
        if directory && child == self.root {
            return Err(FsError::Busy("the root directory".into()));
        }
        let now = Timestamp::now();
        let generation = self.generation_of(child)?;
        let hold = self.txgs.assign()?;
        let tx = hold.tx();
        self.dir_remove(tx, dir, name)?;
        let parent = staged.get(dir);
        parent.size -= 1;
        if directory {
            parent.links -= 1;
        }
        parent.mtime = now;
        parent.ctime = now;
        let mut removed = Vec::new();
        let mut large = None;
        let inode = staged.get(child);
        inode.ctime = now;
        inode.links = if directory { 0 } else { inode.links - 1 };
        if inode.links == 0 {
            let mut znode = inode.clone();
            match self.drop_inode(tx, child, &mut znode)? {
                Dropped::Removed => removed.push(child),
                Dropped::Large => large = Some(child),
                Dropped::Open => {}
            }
            *staged.get(child) = znode;
        }
        self.write_staged_logged(&tx, &staged, &removed)?;
        self.log_record(
            &tx,
            child,
            generation,
            &[dir],
            RecordBody::Remove {
                dir,
                name: name.to_vec(),
                directory,
            },
        );
        drop(hold);
        drop(guards);
        if let Some(ino) = large {
            self.remove_parked(ino)?;
        }
        self.sync_always(dir)?;
        Ok(())
    }
}
