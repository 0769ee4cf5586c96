//! The path of an inode, found through parent pointers (OpenZFS `zfs_obj_to_path`, which
//! `zpool status -v` uses to name damaged files).
//!
//! Each znode records its parent directory (the one it was created or last renamed in; for a
//! file with several hard links, one of them). Walking up from an inode to the root and
//! looking up, in each parent, the entry that names the child gives a path relative to the
//! file system's root. The walk costs one znode read per level and one directory listing per
//! level (a scan, since directories are keyed by name); it is for error reports, not a hot path.
//! A file that is unlinked (deleted while open), whose parent no longer names it, or whose
//! parent chain does not reach the root has no path: `None`, and the caller falls back to the
//! object number as zpool does.

use crate::object::kv::COOKIE_FIRST;

use super::{FileSystem, FsError, Result};

/// Directory entries read per listing call while searching a parent for a child.
const PATH_LISTING_BATCH: usize = 256;
/// Levels walked at most: a parent chain longer than this is taken as corruption.
const PATH_DEPTH_MAX: usize = 4096;

impl FileSystem {
    /// The path of `ino` relative to the root, beginning with `/`; None when it has none (see
    /// the module documentation). Errors only when reading metadata fails.
    pub fn path_of(&self, ino: u64) -> Result<Option<String>> {
        if ino == self.root {
            return Ok(Some("/".into()));
        }
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut current = ino;
        for _ in 0..PATH_DEPTH_MAX {
            if current == self.root {
                names.reverse();
                let path: Vec<String> = names
                    .iter()
                    .map(|name| String::from_utf8_lossy(name).into_owned())
                    .collect();
                return Ok(Some(format!("/{}", path.join("/"))));
            }
            let znode = match self.znode(current) {
                Ok(znode) => znode,
                Err(FsError::NotFound) => return Ok(None),
                Err(error) => return Err(error),
            };
            if znode.links == 0 || znode.parent == current {
                return Ok(None);
            }
            let Some(name) = self.name_in(znode.parent, current)? else {
                return Ok(None);
            };
            names.push(name);
            current = znode.parent;
        }
        Ok(None)
    }

    /// The name under which directory `dir` lists `child`, if it does.
    fn name_in(&self, dir: u64, child: u64) -> Result<Option<Vec<u8>>> {
        let mut cookie = COOKIE_FIRST;
        loop {
            let entries = match self.readdir(dir, cookie, PATH_LISTING_BATCH) {
                Ok(entries) => entries,
                Err(FsError::NotFound) | Err(FsError::NotDir) => return Ok(None),
                Err(error) => return Err(error),
            };
            let Some(last) = entries.last() else {
                return Ok(None);
            };
            cookie = last.next_cookie;
            if let Some(entry) = entries.into_iter().find(|entry| entry.ino == child) {
                return Ok(Some(entry.name));
            }
        }
    }
}
