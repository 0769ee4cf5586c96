//! File system layer against a real pool on sparse files: a tree of directories, files,
//! symlinks and hard links that survives export and import; rename edge cases; unlink of an
//! open file and the unlinked set drained after a crash; truncate with zero fill; readdir
//! cookies stable while entries come and go; bad names and inode numbers give errors. Every
//! test ends with `check` clean.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tarn::fs::{
    FileKind, FileSystem, FsError, SetAttr, SpaceFigures, Timestamp, RENAME_EXCHANGE,
    RENAME_NOREPLACE,
};
use tarn::pool::Pool;
use tarn::types::ObjectId;

use common::*;

/// The file system every new pool's root dataset carries (formatted by `Pool::create`).
fn format(pool: &Pool) -> FileSystem {
    pool.file_system().expect("open the root file system")
}

fn reopen(pool: &Pool) -> FileSystem {
    FileSystem::open(pool.root_objset(), pool.core.txgs.clone()).expect("open fs")
}

fn names(fs: &FileSystem, dir: u64) -> BTreeMap<Vec<u8>, (u64, FileKind)> {
    let mut out = BTreeMap::new();
    let mut cookie = 0;
    loop {
        let entries = fs.readdir(dir, cookie, 7).expect("readdir");
        let Some(last) = entries.last() else {
            return out;
        };
        cookie = last.next_cookie;
        for entry in entries {
            assert!(
                out.insert(entry.name.clone(), (entry.ino, entry.kind))
                    .is_none(),
                "readdir returned {:?} twice",
                String::from_utf8_lossy(&entry.name)
            );
        }
    }
}

fn build_tree(fs: &FileSystem) -> BTreeMap<&'static str, Vec<u8>> {
    let root = fs.root();
    let a = fs.mkdir(root, b"a", 0o755, 1, 2).unwrap().ino;
    let b = fs.mkdir(a, b"b", 0o700, 1, 2).unwrap().ino;
    let mut contents = BTreeMap::new();
    for (dir, name, length, seed) in [
        (root, "top.txt", 10usize, 1u64),
        (a, "big.bin", 50_000, 2),
        (b, "empty", 0, 3),
        (b, "odd.bin", 4097, 4),
    ] {
        let ino = fs.create(dir, name.as_bytes(), 0o644, 1, 2).unwrap().ino;
        let data = pattern(seed, length);
        // Two writes, the second overlapping and unaligned.
        let half = length / 2;
        fs.write(ino, 0, &data[..half]).unwrap();
        fs.write(ino, half as u64, &data[half..]).unwrap();
        contents.insert(name, data);
    }
    fs.symlink(root, b"short-link", b"a/b/odd.bin", 1, 2)
        .unwrap();
    let long_target = vec![b'x'; 1000];
    fs.symlink(a, b"long-link", &long_target, 1, 2).unwrap();
    let big = fs.lookup(a, b"big.bin").unwrap().ino;
    fs.link(big, b, b"big-hardlink").unwrap();
    fs.mknod(root, b"fifo", 0o010_644, 0, 1, 2).unwrap();
    fs.mknod(root, b"chardev", 0o020_600, 0x0501, 1, 2).unwrap();
    contents
}

fn verify_tree(fs: &FileSystem, contents: &BTreeMap<&'static str, Vec<u8>>) {
    let root = fs.root();
    let root_names = names(fs, root);
    let expected: BTreeSet<&[u8]> = [
        &b"."[..],
        b"..",
        b"a",
        b"top.txt",
        b"short-link",
        b"fifo",
        b"chardev",
    ]
    .into_iter()
    .collect();
    assert_eq!(
        root_names
            .keys()
            .map(Vec::as_slice)
            .collect::<BTreeSet<_>>(),
        expected
    );
    assert_eq!(root_names[&b".."[..]].0, root, "root is its own parent");
    let a = fs.lookup(root, b"a").unwrap();
    assert_eq!(a.kind, FileKind::Directory);
    assert_eq!(a.perm, 0o755);
    assert_eq!(a.nlink, 3, "a has one subdirectory");
    assert_eq!(a.size, 3, "a: b, big.bin, long-link");
    let b = fs.lookup(a.ino, b"b").unwrap();
    assert_eq!(b.perm, 0o700);
    assert_eq!((b.uid, b.gid), (1, 2));
    assert_eq!(fs.lookup(b.ino, b"..").unwrap().ino, a.ino);
    assert_eq!(fs.getattr(root).unwrap().nlink, 3);
    for (dir, name) in [
        (root, "top.txt"),
        (a.ino, "big.bin"),
        (b.ino, "empty"),
        (b.ino, "odd.bin"),
    ] {
        let attr = fs.lookup(dir, name.as_bytes()).unwrap();
        let expected = &contents[name];
        assert_eq!(attr.size, expected.len() as u64, "{name}");
        let data = fs.read(attr.ino, 0, expected.len() + 100).unwrap();
        assert_eq!(&data, expected, "{name} contents");
    }
    let big = fs.lookup(a.ino, b"big.bin").unwrap();
    let hard = fs.lookup(b.ino, b"big-hardlink").unwrap();
    assert_eq!(big.ino, hard.ino);
    assert_eq!(big.nlink, 2);
    let short = fs.lookup(root, b"short-link").unwrap();
    assert_eq!(short.kind, FileKind::Symlink);
    assert_eq!(fs.readlink(short.ino).unwrap(), b"a/b/odd.bin");
    let long = fs.lookup(a.ino, b"long-link").unwrap();
    assert_eq!(fs.readlink(long.ino).unwrap(), vec![b'x'; 1000]);
    assert_eq!(long.size, 1000);
    assert_eq!(fs.lookup(root, b"fifo").unwrap().kind, FileKind::Fifo);
    let chardev = fs.lookup(root, b"chardev").unwrap();
    assert_eq!(chardev.kind, FileKind::CharDevice);
    assert_eq!(chardev.rdev, 0x0501);
}

#[test]
fn tree_survives_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "fstree", single(dir.path(), "d0"), tiny());
    let fs = format(&pool);
    let contents = build_tree(&fs);
    verify_tree(&fs, &contents);
    let generation = fs.getattr(fs.root()).unwrap().generation;
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "fstree", tiny());
    let fs = reopen(&pool);
    verify_tree(&fs, &contents);
    assert_eq!(fs.getattr(fs.root()).unwrap().generation, generation);
    // Formatting again is refused.
    assert!(matches!(
        FileSystem::format(pool.root_objset(), pool.core.txgs.clone(), 0, 0),
        Err(FsError::Exists)
    ));
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn rename_edge_cases() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "fsrename", single(dir.path(), "d0"), tiny());
    let fs = format(&pool);
    let root = fs.root();
    let d1 = fs.mkdir(root, b"d1", 0o755, 0, 0).unwrap().ino;
    let d2 = fs.mkdir(root, b"d2", 0o755, 0, 0).unwrap().ino;
    let sub = fs.mkdir(d1, b"sub", 0o755, 0, 0).unwrap().ino;
    let f1 = fs.create(d1, b"f1", 0o644, 0, 0).unwrap().ino;
    let f2 = fs.create(d2, b"f2", 0o644, 0, 0).unwrap().ino;
    fs.write(f2, 0, b"victim").unwrap();

    // Over an existing file, across directories: the victim is gone.
    fs.rename(d1, b"f1", d2, b"f2", 0).unwrap();
    assert_eq!(fs.lookup(d2, b"f2").unwrap().ino, f1);
    assert!(matches!(fs.lookup(d1, b"f1"), Err(FsError::NotFound)));
    assert!(matches!(fs.getattr(f2), Err(FsError::NotFound)));
    assert_eq!(fs.getattr(d1).unwrap().size, 1);
    assert_eq!(fs.getattr(d2).unwrap().size, 1);

    // A directory over an empty directory; over a non-empty one is refused.
    let empty = fs.mkdir(d2, b"empty", 0o755, 0, 0).unwrap().ino;
    fs.rename(d1, b"sub", d2, b"empty", 0).unwrap();
    assert!(matches!(fs.getattr(empty), Err(FsError::NotFound)));
    assert_eq!(fs.lookup(d2, b"empty").unwrap().ino, sub);
    assert_eq!(fs.lookup(sub, b"..").unwrap().ino, d2);
    assert_eq!(fs.getattr(d1).unwrap().nlink, 2);
    assert_eq!(fs.getattr(d2).unwrap().nlink, 3);
    fs.create(sub, b"inside", 0o644, 0, 0).unwrap();
    let full_target = fs.mkdir(d1, b"target", 0o755, 0, 0).unwrap().ino;
    fs.create(full_target, b"x", 0o644, 0, 0).unwrap();
    assert!(matches!(
        fs.rename(d2, b"empty", d1, b"target", 0),
        Err(FsError::NotEmpty)
    ));
    // Type mismatches.
    assert!(matches!(
        fs.rename(d2, b"f2", d1, b"target", 0),
        Err(FsError::IsDir)
    ));
    assert!(matches!(
        fs.rename(d1, b"target", d2, b"f2", 0),
        Err(FsError::NotDir)
    ));

    // A directory into its own subtree (and onto itself as a parent) is refused.
    let deep = fs.mkdir(sub, b"deep", 0o755, 0, 0).unwrap().ino;
    assert!(matches!(
        fs.rename(d2, b"empty", deep, b"loop", 0),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(
        fs.rename(d2, b"empty", sub, b"loop", 0),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(
        fs.rename(root, b"d2", deep, b"loop", 0),
        Err(FsError::Invalid(_))
    ));
    // Moving the subtree up is fine.
    fs.rename(sub, b"deep", root, b"deep", 0).unwrap();
    assert_eq!(fs.lookup(deep, b"..").unwrap().ino, root);

    // NOREPLACE and EXCHANGE.
    assert!(matches!(
        fs.rename(d2, b"f2", root, b"deep", RENAME_NOREPLACE),
        Err(FsError::Exists)
    ));
    fs.rename(d2, b"f2", root, b"moved", RENAME_NOREPLACE)
        .unwrap();
    fs.rename(root, b"moved", d1, b"target", RENAME_EXCHANGE)
        .unwrap();
    assert_eq!(fs.lookup(d1, b"target").unwrap().ino, f1);
    assert_eq!(fs.lookup(root, b"moved").unwrap().ino, full_target);
    assert_eq!(fs.lookup(full_target, b"..").unwrap().ino, root);
    assert_eq!(fs.getattr(d1).unwrap().nlink, 2, "d1 lost its subdirectory");
    assert!(matches!(
        fs.rename(root, b"moved", d1, b"nothing", RENAME_EXCHANGE),
        Err(FsError::NotFound)
    ));
    assert!(matches!(
        fs.rename(root, b"moved", d1, b"x", RENAME_EXCHANGE | RENAME_NOREPLACE),
        Err(FsError::Invalid(_))
    ));
    // Exchanging a directory with an ancestor of its parent is refused.
    assert!(matches!(
        fs.rename(sub, b"inside", root, b"d2", RENAME_EXCHANGE),
        Err(FsError::Invalid(_))
    ));
    // Renaming a name onto a hard link of the same file does nothing.
    fs.link(f1, root, b"alias").unwrap();
    fs.rename(d1, b"target", root, b"alias", 0).unwrap();
    assert_eq!(fs.getattr(f1).unwrap().nlink, 2);
    // Within one directory.
    fs.rename(root, b"alias", root, b"alias2", 0).unwrap();
    assert!(matches!(fs.lookup(root, b"alias"), Err(FsError::NotFound)));
    assert_eq!(fs.lookup(root, b"alias2").unwrap().ino, f1);
    assert!(matches!(
        fs.rename(root, b"..", root, b"x", 0),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(
        fs.rename(root, b"missing", root, b"x", 0),
        Err(FsError::NotFound)
    ));

    // Every count still adds up after a round trip through disk.
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "fsrename", tiny());
    let fs = reopen(&pool);
    for ino in [root, d1, d2, sub, deep, full_target] {
        let attr = fs.getattr(ino).unwrap();
        let entries = names(&fs, ino);
        let subdirs = entries
            .iter()
            .filter(|(name, (_, kind))| {
                *kind == FileKind::Directory && name.as_slice() != b"." && name.as_slice() != b".."
            })
            .count() as u64;
        assert_eq!(attr.size, entries.len() as u64 - 2, "size of {ino}");
        assert_eq!(attr.nlink, 2 + subdirs, "links of {ino}");
    }
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn unlink_while_open_and_crash_drain() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "fsunlinked", single(dir.path(), "d0"), tiny());
    let fs = format(&pool);
    let root = fs.root();

    // Open, unlink, still readable, gone at release.
    let ino = fs.create(root, b"tmp", 0o600, 0, 0).unwrap().ino;
    fs.write(ino, 0, &pattern(9, 20_000)).unwrap();
    fs.open_inode(ino).unwrap();
    fs.open_inode(ino).unwrap();
    fs.unlink(root, b"tmp").unwrap();
    assert!(matches!(fs.lookup(root, b"tmp"), Err(FsError::NotFound)));
    assert_eq!(fs.getattr(ino).unwrap().nlink, 0);
    assert_eq!(fs.read(ino, 0, 20_000).unwrap(), pattern(9, 20_000));
    fs.write(ino, 20_000, b"more").unwrap();
    assert_eq!(fs.unlinked_objects().unwrap(), vec![ino]);
    pool.sync().unwrap();
    fs.release(ino).unwrap();
    assert!(fs.getattr(ino).is_ok(), "one open remains");
    fs.release(ino).unwrap();
    assert!(matches!(fs.getattr(ino), Err(FsError::NotFound)));
    assert!(!pool.root_objset().exists(ObjectId(ino)));
    assert!(fs.unlinked_objects().unwrap().is_empty());
    assert!(matches!(fs.release(ino), Err(FsError::Invalid(_))));

    // An open directory removed, and an open file replaced by rename, then a crash.
    let victim = fs.create(root, b"victim", 0o600, 0, 0).unwrap().ino;
    fs.write(victim, 0, &pattern(10, 30_000)).unwrap();
    let other = fs.create(root, b"other", 0o600, 0, 0).unwrap().ino;
    let open_dir = fs.mkdir(root, b"dir", 0o700, 0, 0).unwrap().ino;
    fs.open_inode(victim).unwrap();
    fs.open_inode(open_dir).unwrap();
    fs.rename(root, b"other", root, b"victim", 0).unwrap();
    fs.rmdir(root, b"dir").unwrap();
    assert_eq!(fs.readdir(open_dir, 0, 10).unwrap().len(), 2, ". and ..");
    assert!(matches!(
        fs.create(open_dir, b"new", 0o600, 0, 0),
        Err(FsError::NotFound)
    ));
    let unlinked: BTreeSet<u64> = fs.unlinked_objects().unwrap().into_iter().collect();
    assert_eq!(unlinked, [victim, open_dir].into_iter().collect());
    assert_eq!(fs.lookup(root, b"victim").unwrap().ino, other);
    pool.sync().unwrap();
    let size_allocated_before = pool.root_objset().info(ObjectId(victim)).unwrap();
    assert!(size_allocated_before.size_allocated > 0);
    // Crash: drop everything without export.
    drop(fs);
    drop(pool);
    let pool = import(dir.path(), "fsunlinked", tiny());
    assert!(
        pool.root_objset().exists(ObjectId(victim)),
        "synced before the crash"
    );
    let fs = reopen(&pool);
    assert!(fs.unlinked_objects().unwrap().is_empty(), "drained at open");
    assert!(!pool.root_objset().exists(ObjectId(victim)));
    assert!(!pool.root_objset().exists(ObjectId(open_dir)));
    assert_eq!(fs.lookup(root, b"victim").unwrap().ino, other);
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn truncate_down_and_up_zero_fills() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "fstrunc", single(dir.path(), "d0"), tiny());
    let fs = format(&pool);
    let root = fs.root();
    let ino = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    let data = pattern(5, 40_000);
    fs.write(ino, 0, &data).unwrap();
    pool.sync().unwrap();
    let before = fs.getattr(ino).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    // Down to an unaligned size, then up again: the cut-off bytes read as zeros.
    let attr = fs
        .setattr(
            ino,
            SetAttr {
                size: Some(5_000),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!(attr.size, 5_000);
    assert!(attr.mtime > before.mtime && attr.ctime > before.ctime);
    fs.setattr(
        ino,
        SetAttr {
            size: Some(30_000),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let read = fs.read(ino, 0, 50_000).unwrap();
    assert_eq!(read.len(), 30_000);
    assert_eq!(&read[..5_000], &data[..5_000]);
    assert!(
        read[5_000..].iter().all(|&b| b == 0),
        "zero fill after extend"
    );
    // Sync in between, then a write past the end leaves a hole of zeros.
    pool.sync().unwrap();
    fs.setattr(
        ino,
        SetAttr {
            size: Some(100),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.write(ino, 20_000, b"tail").unwrap();
    let read = fs.read(ino, 0, 50_000).unwrap();
    assert_eq!(read.len(), 20_004);
    assert_eq!(&read[..100], &data[..100]);
    assert!(read[100..20_000].iter().all(|&b| b == 0));
    assert_eq!(&read[20_000..], b"tail");
    // Mode, owner and times.
    let times = Timestamp {
        seconds: 1_000_000,
        nanoseconds: 5,
    };
    let attr = fs
        .setattr(
            ino,
            SetAttr {
                mode: Some(0o100_600),
                uid: Some(7),
                gid: Some(8),
                atime: Some(times),
                mtime: Some(times),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!(
        (attr.perm, attr.uid, attr.gid, attr.atime, attr.mtime),
        (0o600, 7, 8, times, times)
    );
    assert!(matches!(
        fs.setattr(
            ino,
            SetAttr {
                mode: Some(0o040_600),
                ..SetAttr::default()
            }
        ),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(
        fs.setattr(
            root,
            SetAttr {
                size: Some(0),
                ..SetAttr::default()
            }
        ),
        Err(FsError::IsDir)
    ));
    // relatime: atime (set in the past) moves on a read; a second read leaves it alone.
    fs.read(ino, 0, 10).unwrap();
    let atime = fs.getattr(ino).unwrap().atime;
    assert!(atime > times);
    fs.read(ino, 0, 10).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().atime, atime);
    // statfs follows the space source.
    fs.set_space_source(Arc::new(|| SpaceFigures {
        size_bytes: 1 << 30,
        available_bytes: 1 << 20,
    }));
    let statfs = fs.statfs().unwrap();
    assert_eq!(statfs.block_size, 4096);
    assert_eq!(statfs.blocks, (1 << 30) / 4096);
    assert_eq!(statfs.blocks_available, (1 << 20) / 4096);
    assert_eq!(statfs.name_len_max, 255);
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "fstrunc", tiny());
    let fs = reopen(&pool);
    let read = fs.read(ino, 0, 50_000).unwrap();
    assert_eq!(read.len(), 20_004);
    assert!(read[100..20_000].iter().all(|&b| b == 0));
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn readdir_cookies_stable_under_churn() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "fscookies", single(dir.path(), "d0"), tiny());
    let fs = format(&pool);
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    let stable: BTreeSet<Vec<u8>> = (0..600)
        .map(|i| format!("stable-{i}").into_bytes())
        .collect();
    for name in &stable {
        fs.create(d, name, 0o644, 0, 0).unwrap();
    }
    let mut seen = BTreeSet::new();
    let mut cookie = 0;
    let mut round = 0;
    loop {
        let entries = fs.readdir(d, cookie, 16).unwrap();
        let Some(last) = entries.last() else { break };
        cookie = last.next_cookie;
        for entry in entries {
            assert!(seen.insert(entry.name.clone()), "{:?} twice", entry.name);
        }
        // Churn between pages: add many (forcing leaf splits) and remove some transient ones.
        for i in 0..40 {
            fs.create(d, format!("churn-{round}-{i}").as_bytes(), 0o644, 0, 0)
                .unwrap();
        }
        if round > 0 {
            for i in 0..40 {
                fs.unlink(d, format!("churn-{}-{i}", round - 1).as_bytes())
                    .unwrap();
            }
        }
        round += 1;
    }
    assert!(round > 30, "listing took {round} pages");
    assert!(seen.contains(&b"."[..]) && seen.contains(&b".."[..]));
    for name in &stable {
        assert!(seen.contains(name), "{name:?} missed");
    }
    // Cookies 1 and 2 start after '.' and '..'.
    assert_eq!(fs.readdir(d, 1, 1).unwrap()[0].name, b"..");
    assert_ne!(fs.readdir(d, 2, 1).unwrap()[0].name, b"..");
    assert!(fs.readdir(d, u64::MAX, 10).unwrap().is_empty());
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn bad_input_gives_errors() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "fsbad", single(dir.path(), "d0"), tiny());
    let fs = format(&pool);
    let root = fs.root();
    let file = fs.create(root, b"file", 0o644, 0, 0).unwrap().ino;
    let long = vec![b'n'; 256];
    for name in [&b""[..], b"a/b", b"a\0", &long] {
        assert!(fs.create(root, name, 0o644, 0, 0).is_err(), "{name:?}");
        assert!(fs.lookup(root, name).is_err());
        assert!(fs.mkdir(root, name, 0o755, 0, 0).is_err());
        assert!(fs.unlink(root, name).is_err());
        assert!(fs.rename(root, b"file", root, name, 0).is_err());
    }
    assert!(matches!(
        fs.create(root, &long, 0o644, 0, 0),
        Err(FsError::NameTooLong)
    ));
    assert!(matches!(
        fs.create(root, b"a/b", 0o644, 0, 0),
        Err(FsError::InvalidName)
    ));
    assert!(fs.create(root, &long[..255], 0o644, 0, 0).is_ok());
    assert!(matches!(
        fs.create(root, b"file", 0o644, 0, 0),
        Err(FsError::Exists)
    ));
    assert!(matches!(
        fs.mkdir(root, b"..", 0o755, 0, 0),
        Err(FsError::Exists)
    ));
    assert!(matches!(fs.unlink(root, b"."), Err(FsError::Invalid(_))));
    assert!(matches!(fs.rmdir(root, b".."), Err(FsError::NotEmpty)));
    assert!(matches!(fs.rmdir(root, b"file"), Err(FsError::NotDir)));
    fs.mkdir(root, b"dir", 0o755, 0, 0).unwrap();
    assert!(matches!(fs.unlink(root, b"dir"), Err(FsError::IsDir)));
    fs.create(fs.lookup(root, b"dir").unwrap().ino, b"x", 0o644, 0, 0)
        .unwrap();
    assert!(matches!(fs.rmdir(root, b"dir"), Err(FsError::NotEmpty)));
    // Operations on a file as if it were a directory, and vice versa.
    assert!(matches!(fs.lookup(file, b"x"), Err(FsError::NotDir)));
    assert!(matches!(fs.readdir(file, 0, 10), Err(FsError::NotDir)));
    assert!(matches!(
        fs.create(file, b"x", 0o644, 0, 0),
        Err(FsError::NotDir)
    ));
    assert!(matches!(fs.read(root, 0, 10), Err(FsError::IsDir)));
    assert!(matches!(fs.write(root, 0, b"x"), Err(FsError::IsDir)));
    assert!(matches!(
        fs.link(root, root, b"rootlink"),
        Err(FsError::IsDir)
    ));
    assert!(matches!(fs.readlink(file), Err(FsError::Invalid(_))));
    assert!(fs.write(file, u64::MAX - 1, b"xx").is_err());
    assert!(fs.symlink(root, b"s", b"", 0, 0).is_err());
    assert!(fs.symlink(root, b"s", &vec![b'x'; 5000], 0, 0).is_err());
    assert!(fs.mknod(root, b"n", 0o040_755, 0, 0, 0).is_err());
    assert!(
        fs.mknod(root, b"n", 0o644, 0, 0, 0).is_err(),
        "no type bits"
    );
    assert!(fs.create(root, b"n", 0o020_644, 0, 0).is_err());
    assert!(
        fs.rename(root, b"file", root, b"x", 8).is_err(),
        "unknown flag"
    );
    // Inode numbers that are not inodes: 0, the master node, the unlinked set, the meta-dnode,
    // objects never allocated, and the largest numbers.
    for ino in [0u64, 1, 2, 3, 1 << 40, u64::MAX - 1, u64::MAX] {
        if ino == root || ino == file {
            continue;
        }
        let is_inode = fs.getattr(ino).is_ok();
        if is_inode {
            continue; // an object number that happens to be an inode of the tree above
        }
        assert!(matches!(fs.getattr(ino), Err(FsError::NotFound)), "{ino}");
        assert!(fs.lookup(ino, b"x").is_err());
        assert!(fs.readdir(ino, 0, 10).is_err());
        assert!(fs.read(ino, 0, 10).is_err());
        assert!(fs.write(ino, 0, b"x").is_err());
        assert!(fs.setattr(ino, SetAttr::default()).is_err());
        assert!(fs.open_inode(ino).is_err());
        assert!(fs.release(ino).is_err());
        assert!(fs.readlink(ino).is_err());
        assert!(fs.link(ino, root, b"l").is_err());
        assert!(fs.link(file, ino, b"l").is_err());
        assert!(fs.create(ino, b"x", 0o644, 0, 0).is_err());
        assert!(fs.rename(root, b"file", ino, b"x", 0).is_err());
        assert!(fs.rename(ino, b"file", root, b"x", 0).is_err());
    }
    assert!(fs.read(file, 0, 1 << 30).is_err(), "huge read refused");
    assert_eq!(fs.getattr(file).unwrap().nlink, 1, "nothing changed");
    assert_clean(&pool);
    pool.export().unwrap();
}
