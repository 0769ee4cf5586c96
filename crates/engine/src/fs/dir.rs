//! Directories and name lookup (OpenZFS zfs_dir.c): which names a directory may hold, its
//! entries as its key/value object stores them, the resolution of a name under the inode
//! locks, and the `lookup` and `readdir` operations.
//!
//! A directory is a key/value object whose keys are names and whose values are
//! [`DirEntryValue`]s (object number and file kind). `.` and `..` are never stored: `lookup`
//! answers them from the directory's own inode number and its znode's parent, and `readdir`
//! gives them the offsets 0 and 1, after which the offsets are the key/value object's cookies,
//! which stay valid while other entries come and go. Every name is checked here for all
//! operations: 1 to 255 bytes, no `/`, no NUL; a new name may not be `.` or `..`, and neither
//! may a name that is removed or moved.

use parking_lot::MutexGuard;

use crate::object::adapters::KvObject;
use crate::object::kv::{self, COOKIE_END, COOKIE_FIRST};
use crate::object::Tx;
use crate::types::ObjectId;

use super::phys::{DirEntryValue, FileKind, Znode};
use super::{kv_error, Attr, DirEntry, FileSystem, FsError, Result, NAME_LEN_MAX};

/// Readdir offset of `.`'s successor and `..`'s successor.
const COOKIE_AFTER_DOT: u64 = 1;
const COOKIE_AFTER_DOTDOT: u64 = 2;
const _: () = assert!(COOKIE_AFTER_DOTDOT < COOKIE_FIRST);

pub(super) fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_LEN_MAX {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(FsError::InvalidName);
    }
    Ok(())
}

pub(super) fn is_dot_or_dotdot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// A name for a new entry: valid, and not `.` or `..` (which always exist).
pub(super) fn check_new_name(name: &[u8]) -> Result<()> {
    check_name(name)?;
    if is_dot_or_dotdot(name) {
        return Err(FsError::Exists);
    }
    Ok(())
}

/// A name of an existing entry to remove or move: valid, and not `.` or `..`.
pub(super) fn check_old_name(name: &[u8]) -> Result<()> {
    check_name(name)?;
    if is_dot_or_dotdot(name) {
        return Err(FsError::Invalid("cannot remove or move '.' or '..'".into()));
    }
    Ok(())
}

impl FileSystem {
    /// The znode of a directory that can still get entries.
    pub(super) fn directory(&self, ino: u64) -> Result<Znode> {
        let znode = self.znode(ino)?;
        if znode.kind() != FileKind::Directory {
            return Err(FsError::NotDir);
        }
        Ok(znode)
    }

    pub(super) fn live_directory(&self, ino: u64) -> Result<Znode> {
        let znode = self.directory(ino)?;
        if znode.links == 0 {
            return Err(FsError::NotFound);
        }
        Ok(znode)
    }

    pub(super) fn dir_lookup(&self, dir: u64, name: &[u8]) -> Result<Option<DirEntryValue>> {
        let value = {
            let handle = KvObject::new(&self.objset, ObjectId(dir), None)?;
            kv::lookup(&handle, name).map_err(kv_error(dir))?
        };
        value
            .map(|raw| DirEntryValue::decode(&raw, dir))
            .transpose()
    }

    pub(super) fn dir_insert(
        &self,
        tx: Tx,
        dir: u64,
        name: &[u8],
        value: DirEntryValue,
    ) -> Result<()> {
        let mut handle = KvObject::new(&self.objset, ObjectId(dir), Some(tx))?;
        kv::insert(&mut handle, name, &value.encode()).map_err(kv_error(dir))
    }

    pub(super) fn dir_upsert(
        &self,
        tx: Tx,
        dir: u64,
        name: &[u8],
        value: DirEntryValue,
    ) -> Result<()> {
        let mut handle = KvObject::new(&self.objset, ObjectId(dir), Some(tx))?;
        kv::upsert(&mut handle, name, &value.encode()).map_err(kv_error(dir))?;
        Ok(())
    }

    pub(super) fn dir_remove(&self, tx: Tx, dir: u64, name: &[u8]) -> Result<()> {
        let mut handle = KvObject::new(&self.objset, ObjectId(dir), Some(tx))?;
        if !kv::remove(&mut handle, name).map_err(kv_error(dir))? {
            return Err(FsError::Corrupt(format!(
                "directory {dir}: entry vanished under its lock"
            )));
        }
        Ok(())
    }

    /// Resolve `name` in `dir` without locks, lock `dir` and the inode it names,
    /// and return the entry once it is confirmed under the locks.
    pub(super) fn lock_entry(
        &self,
        dir: u64,
        name: &[u8],
    ) -> Result<(DirEntryValue, Vec<MutexGuard<'_, ()>>)> {
        loop {
            self.directory(dir)?;
            let entry = self.dir_lookup(dir, name)?.ok_or(FsError::NotFound)?;
            let guards = self.lock_inodes(&[dir, entry.object]);
            if self.dir_lookup(dir, name)? == Some(entry) {
                return Ok((entry, guards));
            }
        }
    }

    /// The inode named `name` in directory `dir` (`.` and `..` included).
    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<Attr> {
        check_name(name)?;
        let znode = self.directory(dir)?;
        let ino = match name {
            b"." => dir,
            b".." => znode.parent,
            _ => self.dir_lookup(dir, name)?.ok_or(FsError::NotFound)?.object,
        };
        self.getattr(ino)
    }

    /// Up to `max` entries of directory `dir` from offset `cookie`: 0 starts with `.`, 1 with
    /// `..`, 2 with the first stored entry; each entry says where the next call continues.
    pub fn readdir(&self, dir: u64, cookie: u64, max: usize) -> Result<Vec<DirEntry>> {
        let znode = self.directory(dir)?;
        let mut entries = Vec::new();
        if max == 0 || cookie >= COOKIE_END {
            return Ok(entries);
        }
        if cookie == 0 {
            entries.push(DirEntry {
                name: b".".to_vec(),
                ino: dir,
                kind: FileKind::Directory,
                next_cookie: COOKIE_AFTER_DOT,
            });
        }
        if cookie <= COOKIE_AFTER_DOT && entries.len() < max {
            entries.push(DirEntry {
                name: b"..".to_vec(),
                ino: znode.parent,
                kind: FileKind::Directory,
                next_cookie: COOKIE_AFTER_DOTDOT,
            });
        }
        if entries.len() == max {
            return Ok(entries);
        }
        let from = cookie.max(COOKIE_FIRST);
        let stored = {
            let handle = KvObject::new(&self.objset, ObjectId(dir), None)?;
            kv::list(&handle, from, max - entries.len()).map_err(kv_error(dir))?
        };
        for entry in stored {
            let value = DirEntryValue::decode(&entry.value, dir)?;
            entries.push(DirEntry {
                name: entry.key,
                ino: value.object,
                kind: value.kind,
                next_cookie: entry.cookie + 1,
            });
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name(b"a").is_ok());
        assert!(check_name(&[b'x'; 255]).is_ok());
        assert!(matches!(
            check_name(&[b'x'; 256]),
            Err(FsError::NameTooLong)
        ));
        assert!(matches!(check_name(b""), Err(FsError::InvalidName)));
        assert!(matches!(check_name(b"a/b"), Err(FsError::InvalidName)));
        assert!(matches!(check_name(b"a\0b"), Err(FsError::InvalidName)));
        assert!(matches!(check_new_name(b".."), Err(FsError::Exists)));
        assert!(matches!(check_old_name(b"."), Err(FsError::Invalid(_))));
    }
}
