//! Usage by owner (`object/accounting.rs`): each sync charges every file-system object to its
//! znode's user, group and project, in three objects of the object set; the figures equal
//! what the nodes' `st_blocks` sum to (what `du` counts), follow chown and removal, survive
//! export and import, stay with a snapshot, and are counted from scratch for a file system
//! that had none.

use crate::common;

use std::collections::BTreeMap;

use tarn::fs::{FileSystem, SetAttr};
use tarn::object::accounting::OwnerUsage;
use tarn::object::owners::OwnerKind;
use tarn::object::ObjectSet;

use common::*;

/// What the nodes of `fs` sum to per owner of kind `kind`: `st_blocks` × 512 and the count,
/// walking the tree from the root (each inode once).
fn du_by_owner(fs: &FileSystem, kind: OwnerKind) -> BTreeMap<u32, OwnerUsage> {
    let mut seen = std::collections::HashSet::new();
    let mut totals: BTreeMap<u32, OwnerUsage> = BTreeMap::new();
    let mut stack = vec![fs.root()];
    while let Some(dir) = stack.pop() {
        if !seen.insert(dir) {
            continue;
        }
        let attr = fs.getattr(dir).unwrap();
        let owner = match kind {
            OwnerKind::User => attr.uid,
            OwnerKind::Group => attr.gid,
            OwnerKind::Project => 0,
        };
        let entry = totals.entry(owner).or_default();
        entry.bytes += attr.blocks * 512;
        entry.objects += 1;
        for entry in fs.readdir(dir, 0, 100_000).unwrap() {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            let child = fs.getattr(entry.ino).unwrap();
            if child.kind == tarn::fs::FileKind::Directory {
                stack.push(entry.ino);
            } else if seen.insert(entry.ino) {
                let owner = match kind {
                    OwnerKind::User => child.uid,
                    OwnerKind::Group => child.gid,
                    OwnerKind::Project => 0,
                };
                let usage = totals.entry(owner).or_default();
                usage.bytes += child.blocks * 512;
                usage.objects += 1;
            }
        }
    }
    totals
}

fn usage(objset: &ObjectSet, kind: OwnerKind) -> BTreeMap<u32, OwnerUsage> {
    objset
        .owner_usage_all(kind)
        .unwrap()
        .expect("the file system keeps usage by owner")
}

fn assert_usage_is_du(pool: &tarn::Pool, fs: &FileSystem, what: &str) {
    pool.sync().unwrap();
    for kind in OwnerKind::ALL {
        assert_eq!(
            usage(&pool.root_objset(), kind),
            du_by_owner(fs, kind),
            "{what}: {kind:?} usage"
        );
    }
}

#[test]
fn usage_by_owner_is_what_du_counts_through_chown_removal_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "ou", single(dir.path(), "a.img"), tiny());
    let fs = open_fs(&pool);
    let mut files = Vec::new();
    for (index, uid) in [1000u32, 1000, 1001, 1002, 0].iter().enumerate() {
        let attr = fs
            .create(
                fs.root(),
                format!("f{index}").as_bytes(),
                0o644,
                *uid,
                uid + 5,
            )
            .unwrap();
        fs.write(attr.ino, 0, &pattern(index as u64, 100_000 * (index + 1)))
            .unwrap();
        files.push(attr.ino);
    }
    let sub = fs.mkdir(fs.root(), b"d", 0o755, 1001, 1006).unwrap();
    fs.create(sub.ino, b"inner", 0o644, 1001, 1006).unwrap();
    assert_usage_is_du(&pool, &fs, "after writing");
    let users = usage(&pool.root_objset(), OwnerKind::User);
    assert_eq!(users[&1000].objects, 2);
    assert!(users[&1000].bytes >= 200_000, "{users:?}");

    fs.setattr(
        files[0],
        SetAttr {
            uid: Some(1002),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.unlink(fs.root(), b"f2").unwrap();
    assert_usage_is_du(&pool, &fs, "after chown and unlink");
    let users = usage(&pool.root_objset(), OwnerKind::User);
    assert_eq!(
        users[&1001].objects, 2,
        "the directory and its file stay: {users:?}"
    );
    assert_eq!(users[&1000].objects, 1, "{users:?}");

    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "ou", tiny());
    let fs = open_fs(&pool);
    assert_usage_is_du(&pool, &fs, "after import");
    drop(fs);
    check_clean(&pool, "owner usage");
}
