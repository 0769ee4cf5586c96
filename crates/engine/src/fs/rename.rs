//! rename(2) (OpenZFS zfs_vnops.c `zfs_rename`): plain, RENAME_NOREPLACE, RENAME_EXCHANGE and
//! RENAME_WHITEOUT, within and across directories, with the ancestor check that keeps the
//! directory tree a tree and the replaced target's removal. A whiteout (overlayfs's mark of a
//! deleted lower file) is a character device 0:0 with mode 0 left at the old name, created in
//! the rename's own transaction, so no one ever sees the old name missing; it takes the old
//! directory's project as any node created there would. A node moves into a directory whose
//! new nodes inherit a project only if it is in that project (EXDEV otherwise:
//! fs/project.rs).

use crate::block::blkptr::ObjectType;
use crate::object::owners::Owners;
use crate::object::Tx;
use crate::zil::record::RecordBody;

use super::dir::{check_name, check_old_name, is_dot_or_dotdot};
use super::phys::{DirEntryValue, FileKind, SpillXattrs, Timestamp, Znode};
use super::project::inherited_project;
use super::unlinked::Dropped;
use super::{FileSystem, FsError, Result};

/// `rename` flag: fail with [`FsError::Exists`] if the target exists (Linux's value).
pub const RENAME_NOREPLACE: u32 = 1;
/// `rename` flag: swap the two entries, both of which must exist (Linux's value).
pub const RENAME_EXCHANGE: u32 = 2;
/// `rename` flag: leave a whiteout (character device 0:0) at the old name (Linux's value).
pub const RENAME_WHITEOUT: u32 = 4;

impl FileSystem {
    /// Whether `ancestor` is `dir` or one of its ancestors (walking parent pointers).
    pub(super) fn is_ancestor(&self, ancestor: u64, dir: u64) -> Result<bool> {
        let mut current = dir;
        // Every step goes one level up; a cycle longer than this is corruption.
        for _ in 0..(1 << 20) {
            if current == ancestor {
                return Ok(true);
            }
            if current == self.root {
                return Ok(false);
            }
            let znode = self.directory(current)?;
            current = znode.parent;
        }
        Err(FsError::Corrupt(format!(
            "parent pointers from directory {dir} do not reach the root"
        )))
    }

    /// Rename `oldname` in `olddir` to `newname` in `newdir`; see the module documentation
    /// for the flags. An existing target is replaced atomically. A whiteout gets owner 0:0
    /// ([`FileSystem::rename_as`] names its owner).
    pub fn rename(
        &self,
        olddir: u64,
        oldname: &[u8],
        newdir: u64,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        self.rename_as(olddir, oldname, newdir, newname, flags, 0, 0)
    }

    /// [`FileSystem::rename`] by the user `uid`:`gid`, who owns the whiteout that
    /// RENAME_WHITEOUT leaves.
    #[allow(clippy::too_many_arguments)]
    pub fn rename_as(
        &self,
        olddir: u64,
        oldname: &[u8],
        newdir: u64,
        newname: &[u8],
        flags: u32,
        uid: u32,
        gid: u32,
    ) -> Result<()> {
        let _gate = self.change()?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0
            || flags & RENAME_EXCHANGE != 0 && flags & (RENAME_NOREPLACE | RENAME_WHITEOUT) != 0
        {
            return Err(FsError::Invalid(format!("rename flags {flags:#x}")));
        }
        let exchange = flags & RENAME_EXCHANGE != 0;
        let whiteout = flags & RENAME_WHITEOUT != 0;
        check_old_name(oldname)?;
        if exchange {
            check_old_name(newname)?;
        } else {
            check_name(newname)?;
            if is_dot_or_dotdot(newname) {
                return Err(FsError::Busy("cannot rename over '.' or '..'".into()));
            }
        }
        let rename_guard = (olddir != newdir).then(|| self.rename_lock.lock());
        let (source, target, guards) = loop {
            self.directory(olddir)?;
            self.directory(newdir)?;
            let source = self.dir_lookup(olddir, oldname)?.ok_or(FsError::NotFound)?;
            let target = self.dir_lookup(newdir, newname)?;
            let mut inodes = vec![olddir, newdir, source.object];
            inodes.extend(target.map(|target| target.object));
            let guards = self.lock_inodes(&inodes);
            if self.dir_lookup(olddir, oldname)? == Some(source)
                && self.dir_lookup(newdir, newname)? == target
            {
                break (source, target, guards);
            }
        };
        if flags & RENAME_NOREPLACE != 0 && target.is_some() {
            return Err(FsError::Exists);
        }
        if exchange && target.is_none() {
            return Err(FsError::NotFound);
        }
        if let Some(target) = target {
            if target.object == source.object {
                // Both names already refer to the same inode: POSIX says do nothing.
                return Ok(());
            }
        }
        let mut inodes = vec![olddir, newdir, source.object];
        inodes.extend(target.map(|target| target.object));
        let mut staged = self.stage(&inodes)?;
        if staged.get(newdir).kind() != FileKind::Directory {
            return Err(FsError::NotDir);
        }
        if staged.get(newdir).links == 0 {
            return Err(FsError::NotFound);
        }
        let source_is_dir = source.kind == FileKind::Directory;
        let target_is_dir = target.is_some_and(|target| target.kind == FileKind::Directory);
        if source.object == self.root || target.is_some_and(|t| t.object == self.root) {
            return Err(FsError::Busy("the root directory".into()));
        }
        if olddir != newdir {
            // Moving a directory under itself would cut it off from the tree.
            if source_is_dir && self.is_ancestor(source.object, newdir)? {
                return Err(FsError::Invalid(
                    "cannot move a directory into its own subtree".into(),
                ));
            }
            if exchange
                && target_is_dir
                && self.is_ancestor(target.expect("exists").object, olddir)?
            {
                return Err(FsError::Invalid(
                    "cannot move a directory into its own subtree".into(),
                ));
            }
        }
        if let (Some(target), false) = (target, exchange) {
            match (source_is_dir, target_is_dir) {
                (true, false) => return Err(FsError::NotDir),
                (false, true) => return Err(FsError::IsDir),
                _ => {}
            }
            if target_is_dir && staged.get(target.object).size != 0 {
                return Err(FsError::NotEmpty);
            }
        }
        self.check_project_entry(staged.peek(newdir), staged.peek(source.object))?;
        if let (Some(target), true) = (target, exchange) {
            self.check_project_entry(staged.peek(olddir), staged.peek(target.object))?;
        }
        // A whiteout is a node made in the old directory: its project and its admission are
        // those of any node made there.
        let whiteout_owners = Owners {
            user: uid,
            group: gid,
            project: inherited_project(staged.peek(olddir), FileKind::CharDevice).0,
        };
        if whiteout {
            self.admit_owners(whiteout_owners, None)?;
        }
        let now = Timestamp::now();
        let generation = self.generation_of(source.object)?;
        let hold = self.txgs.assign()?;
        let tx = hold.tx();
        let mut removed = Vec::new();
        let mut large = None;
        if exchange {
            let target = target.expect("exchange has a target");
            self.dir_upsert(tx, olddir, oldname, target)?;
            self.dir_upsert(tx, newdir, newname, source)?;
            if olddir != newdir {
                // Every node moved records its new directory (zfs sets SA_ZPL_PARENT for
                // files too): `path_of` and `tarn diff` name nodes through it.
                staged.get(source.object).parent = newdir;
                staged.get(target.object).parent = olddir;
                if source_is_dir {
                    staged.get(olddir).links -= 1;
                    staged.get(newdir).links += 1;
                }
                if target_is_dir {
                    staged.get(newdir).links -= 1;
                    staged.get(olddir).links += 1;
                }
            }
            staged.get(target.object).ctime = now;
        } else {
            self.dir_upsert(tx, newdir, newname, source)?;
            self.dir_remove(tx, olddir, oldname)?;
            staged.get(olddir).size -= 1;
            staged.get(newdir).size += 1;
            if whiteout {
                self.make_whiteout(tx, olddir, oldname, whiteout_owners, now)?;
                staged.get(olddir).size += 1;
            }
            staged.get(source.object).parent = newdir;
            if source_is_dir {
                staged.get(olddir).links -= 1;
                staged.get(newdir).links += 1;
            }
            if let Some(target) = target {
                // The replaced entry goes away.
                staged.get(newdir).size -= 1;
                let inode = staged.get(target.object);
                inode.ctime = now;
                if target_is_dir {
                    inode.links = 0;
                    staged.get(newdir).links -= 1;
                } else {
                    inode.links -= 1;
                }
                let mut znode = staged.get(target.object).clone();
                if znode.links == 0 {
                    match self.drop_inode(tx, target.object, &mut znode)? {
                        Dropped::Removed => removed.push(target.object),
                        Dropped::Large => large = Some(target.object),
                        Dropped::Open => {}
                    }
                    *staged.get(target.object) = znode;
                }
            }
        }
        staged.get(source.object).ctime = now;
        for dir in [olddir, newdir] {
            let znode = staged.get(dir);
            znode.mtime = now;
            znode.ctime = now;
        }
        if Self::rename_is_logged(flags) {
            self.write_staged_logged(&tx, &staged, &removed)?;
            self.log_record(
                &tx,
                source.object,
                generation,
                &inodes,
                RecordBody::Rename {
                    olddir,
                    oldname: oldname.to_vec(),
                    newdir,
                    newname: newname.to_vec(),
                    flags,
                },
            );
        } else {
            self.write_staged(&tx, &staged, &removed)?;
        }
        drop(hold);
        drop(guards);
        drop(rename_guard);
        if let Some(ino) = large {
            self.remove_parked(ino)?;
        }
        self.sync_always(source.object)?;
        Ok(())
    }

    /// Create the whiteout at `name` in `dir` (whose entry the rename just removed) in `tx`,
    /// owned by `owners`.
    fn make_whiteout(
        &self,
        tx: Tx,
        dir: u64,
        name: &[u8],
        owners: Owners,
        now: Timestamp,
    ) -> Result<()> {
        let kind = FileKind::CharDevice;
        let object = self
            .objset
            .create_object(&tx, self.props_for(kind), ObjectType::None, &[])?;
        let znode = Znode {
            mode: kind.mode_bits(),
            uid: owners.user,
            gid: owners.group,
            project: owners.project,
            links: 1,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            parent: dir,
            flags: 0,
            rdev: 0,
            inline_target: Vec::new(),
            xattr_dir: 0,
            sa_xattrs: Vec::new(),
            spill: SpillXattrs::None,
        };
        self.put_znode(&tx, object.0, &znode)?;
        self.dir_insert(
            tx,
            dir,
            name,
            DirEntryValue {
                object: object.0,
                kind,
            },
        )
    }
}
