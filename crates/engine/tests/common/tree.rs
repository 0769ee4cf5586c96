//! What a file system looks like to a user, path by path, for tests that compare two file
//! systems (send and receive round trips).

use std::collections::BTreeMap;

use tarn::fs::{FileKind, FileSystem};
use tarn::pool::Pool;

/// What a file looks like to a user: kind, mode, owner, links, size, contents (a hash),
/// symlink target and xattrs.
#[derive(Debug, PartialEq, Eq)]
pub struct Seen {
    kind: FileKind,
    perm: u16,
    uid: u32,
    gid: u32,
    nlink: u64,
    size: u64,
    data: blake3::Hash,
    target: Vec<u8>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// Every path of `fs` with what it looks like; hard links appear under each name.
pub fn tree(fs: &FileSystem) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    walk(fs, fs.root(), String::new(), &mut out);
    out
}

fn walk(fs: &FileSystem, dir: u64, prefix: String, out: &mut BTreeMap<String, Seen>) {
    let mut cookie = 0;
    loop {
        let entries = fs.readdir(dir, cookie, 256).unwrap();
        let Some(last) = entries.last() else { break };
        cookie = last.next_cookie;
        for entry in entries {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            let path = format!("{prefix}/{}", String::from_utf8_lossy(&entry.name));
            let attr = fs.getattr(entry.ino).unwrap();
            let data = if attr.kind == FileKind::Regular {
                let mut hasher = blake3::Hasher::new();
                let mut offset = 0;
                while offset < attr.size {
                    let chunk = fs.read(entry.ino, offset, 1 << 20).unwrap();
                    assert!(!chunk.is_empty());
                    hasher.update(&chunk);
                    offset += chunk.len() as u64;
                }
                hasher.finalize()
            } else {
                blake3::hash(b"")
            };
            let target = if attr.kind == FileKind::Symlink {
                fs.readlink(entry.ino).unwrap()
            } else {
                Vec::new()
            };
            let xattrs = fs
                .listxattr(entry.ino)
                .unwrap()
                .into_iter()
                .map(|name| {
                    let value = fs.getxattr(entry.ino, &name).unwrap();
                    (name, value)
                })
                .collect();
            out.insert(
                path.clone(),
                Seen {
                    kind: attr.kind,
                    perm: attr.perm,
                    uid: attr.uid,
                    gid: attr.gid,
                    nlink: attr.nlink,
                    size: attr.size,
                    data,
                    target,
                    xattrs,
                },
            );
            if attr.kind == FileKind::Directory {
                walk(fs, entry.ino, path, out);
            }
        }
    }
}

/// [`tree`] of snapshot `name` (`FS@SNAP`).
pub fn snapshot_tree(pool: &Pool, name: &str) -> BTreeMap<String, Seen> {
    tree(&pool.snapshot_file_system(name).unwrap())
}
