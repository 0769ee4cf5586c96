//! Extended attributes on a real pool: small values packed in the znode (`xattr=sa`), values
//! that overflow it and large ones in the hidden xattr directory, the `xattr=dir` layout,
//! XATTR_CREATE / XATTR_REPLACE and the size limits, persistence across export/import and a
//! crash, snapshots read-only, and no space leaked when a file with xattrs goes. Every test
//! ends with `check` clean.

use crate::common;

use std::collections::BTreeMap;

use tarn::fs::{FileSystem, FsError, XattrLayout, XATTR_CREATE, XATTR_REPLACE};
use tarn::pool::Pool;
use tarn::types::ObjectId;

use common::*;

fn reopen(pool: &Pool) -> FileSystem {
    FileSystem::open(pool.root_objset(), pool.core.txgs.clone()).expect("open fs")
}

/// Every xattr of `ino`, by listing and getting each.
fn all_xattrs(fs: &FileSystem, ino: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let names = fs.listxattr(ino).unwrap();
    let map: BTreeMap<Vec<u8>, Vec<u8>> = names
        .iter()
        .map(|name| (name.clone(), fs.getxattr(ino, name).unwrap()))
        .collect();
    assert_eq!(map.len(), names.len(), "a name listed twice: {names:?}");
    map
}

/// The objects of the root object set, as the synced tree has them.
fn object_count(pool: &Pool) -> usize {
    pool.sync().unwrap();
    pool.root_objset().synced_objects().unwrap().len()
}

#[test]
fn small_large_and_overflowing_xattrs_round_trip_and_persist() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "xa", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let root = fs.root();
    let file = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    let mut expected = BTreeMap::new();
    // Small ones: packed in the bonus buffer until it is full, then the directory.
    for index in 0..12u8 {
        let name = format!("user.small{index}").into_bytes();
        let value = vec![index; 20];
        fs.setxattr(file, &name, &value, 0).unwrap();
        expected.insert(name, value);
    }
    // Medium (an object: over 1 KiB) and the largest value.
    let medium = pattern(1, 3000);
    let large = pattern(2, 65536);
    fs.setxattr(file, b"trusted.medium", &medium, 0).unwrap();
    fs.setxattr(file, b"security.large", &large, 0).unwrap();
    fs.setxattr(file, b"user.empty", b"", 0).unwrap();
    expected.insert(b"trusted.medium".to_vec(), medium.clone());
    expected.insert(b"security.large".to_vec(), large.clone());
    expected.insert(b"user.empty".to_vec(), Vec::new());
    assert_eq!(all_xattrs(&fs, file), expected);
    // The znode is intact.
    assert_eq!(fs.getattr(file).unwrap().perm, 0o644);

    // Replacing moves values between the SA region and the directory both ways.
    fs.setxattr(file, b"user.small0", &pattern(3, 5000), XATTR_REPLACE)
        .unwrap();
    expected.insert(b"user.small0".to_vec(), pattern(3, 5000));
    fs.setxattr(file, b"trusted.medium", b"tiny", 0).unwrap();
    expected.insert(b"trusted.medium".to_vec(), b"tiny".to_vec());
    fs.removexattr(file, b"user.small5").unwrap();
    expected.remove(b"user.small5".as_slice());
    assert_eq!(all_xattrs(&fs, file), expected);

    // Flags and missing names.
    assert!(matches!(
        fs.setxattr(file, b"user.small1", b"x", XATTR_CREATE),
        Err(FsError::Exists)
    ));
    assert!(matches!(
        fs.setxattr(file, b"user.nope", b"x", XATTR_REPLACE),
        Err(FsError::NoData)
    ));
    assert!(matches!(
        fs.getxattr(file, b"user.nope"),
        Err(FsError::NoData)
    ));
    assert!(matches!(
        fs.removexattr(file, b"user.nope"),
        Err(FsError::NoData)
    ));
    assert_eq!(
        all_xattrs(&fs, file),
        expected,
        "refused calls change nothing"
    );

    pool.sync().unwrap();
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "xa", tiny());
    let fs = reopen(&pool);
    assert_eq!(all_xattrs(&fs, file), expected, "after export and import");
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn limits_and_bad_names_are_refused_as_linux_does() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "xl", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let file = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    let mut long = b"user.".to_vec();
    long.resize(255, b'n');
    fs.setxattr(file, &long, b"v", 0).unwrap();
    assert_eq!(fs.getxattr(file, &long).unwrap(), b"v");
    long.push(b'n');
    assert!(matches!(
        fs.setxattr(file, &long, b"v", 0),
        Err(FsError::Range)
    ));
    assert!(matches!(fs.getxattr(file, &long), Err(FsError::Range)));
    assert!(matches!(
        fs.setxattr(file, b"user.big", &vec![0; 65537], 0),
        Err(FsError::TooBig)
    ));
    assert!(matches!(
        fs.setxattr(file, b"foo.bar", b"v", 0),
        Err(FsError::NotSupported)
    ));
    assert!(matches!(
        fs.setxattr(file, b"user.", b"v", 0),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(
        fs.setxattr(file, b"user.x", b"v", XATTR_CREATE | XATTR_REPLACE),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(fs.listxattr(9999), Err(FsError::NotFound)));
    assert!(matches!(
        fs.setxattr(9999, b"user.x", b"v", 0),
        Err(FsError::NotFound)
    ));
    // The name list stays within 64 KiB: 255 names of 255 bytes (with NULs) fill it.
    for index in 0..255u32 {
        let mut name = format!("user.{index:05}.").into_bytes();
        name.resize(255, b'p');
        match fs.setxattr(file, &name, b"", 0) {
            Ok(()) => {}
            Err(FsError::NoSpace) => {
                let listed: usize = fs
                    .listxattr(file)
                    .unwrap()
                    .iter()
                    .map(|n| n.len() + 1)
                    .sum();
                assert!(
                    listed + 256 > 65536,
                    "refused with only {listed} bytes listed"
                );
                break;
            }
            Err(other) => panic!("set {index}: {other}"),
        }
    }
    let listed: usize = fs
        .listxattr(file)
        .unwrap()
        .iter()
        .map(|n| n.len() + 1)
        .sum();
    assert!(listed <= 65536 && listed > 65536 - 256, "{listed}");
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn dir_layout_and_removal_free_every_object() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "xd", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let root = fs.root();
    let before = object_count(&pool);
    let mut config = fs.config();
    config.xattr = XattrLayout::Dir;
    fs.set_config(config);
    let file = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    fs.setxattr(file, b"user.a", b"in the directory", 0)
        .unwrap();
    for index in 0..5 {
        fs.setxattr(
            file,
            format!("user.big{index}").as_bytes(),
            &pattern(index, 10_000),
            0,
        )
        .unwrap();
    }
    // The dir layout put nothing in the SA region: the directory plus five value objects.
    assert_eq!(object_count(&pool), before + 1 + 1 + 5);
    config.xattr = XattrLayout::Sa;
    fs.set_config(config);
    // Changing the layout moves a name only when it is set again.
    fs.setxattr(file, b"user.a", b"now in the znode", 0)
        .unwrap();
    assert_eq!(fs.getxattr(file, b"user.a").unwrap(), b"now in the znode");
    // A replaced object value frees its old object.
    fs.setxattr(file, b"user.big0", b"small now", 0).unwrap();
    assert_eq!(object_count(&pool), before + 1 + 1 + 4);
    // A hard link keeps everything; the last unlink frees the lot in one transaction.
    fs.link(file, root, b"g").unwrap();
    fs.unlink(root, b"f").unwrap();
    assert_eq!(fs.getxattr(file, b"user.big1").unwrap(), pattern(1, 10_000));
    fs.unlink(root, b"g").unwrap();
    assert_eq!(object_count(&pool), before);
    // Open-unlinked files free theirs at the last release, large files through the chunked
    // path.
    let open = fs.create(root, b"open", 0o644, 0, 0).unwrap().ino;
    fs.setxattr(open, b"user.v", &pattern(7, 4000), 0).unwrap();
    fs.open_inode(open).unwrap();
    fs.unlink(root, b"open").unwrap();
    assert_eq!(fs.getxattr(open, b"user.v").unwrap(), pattern(7, 4000));
    fs.release(open).unwrap();
    let large = fs.create(root, b"large", 0o644, 0, 0).unwrap().ino;
    fs.write(large, 0, &pattern(8, 600_000)).unwrap();
    fs.setxattr(large, b"user.v", &pattern(9, 4000), 0).unwrap();
    fs.unlink(root, b"large").unwrap();
    assert_eq!(object_count(&pool), before);
    for object in [file, open, large] {
        assert!(!pool.root_objset().exists(ObjectId(object)));
    }
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn crash_keeps_synced_xattrs_and_whole_unsynced_ones() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "xc", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let file = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    fs.setxattr(file, b"user.synced", b"one", 0).unwrap();
    fs.setxattr(file, b"user.big", &pattern(1, 20_000), 0)
        .unwrap();
    pool.sync().unwrap();
    fs.setxattr(file, b"user.unsynced", b"two", 0).unwrap();
    fs.setxattr(file, b"user.big", &pattern(2, 30_000), 0)
        .unwrap();
    fs.removexattr(file, b"user.synced").unwrap();
    // Crash: drop everything without export or sync.
    drop(fs);
    drop(pool);
    let pool = import(dir.path(), "xc", tiny());
    let fs = reopen(&pool);
    let xattrs = all_xattrs(&fs, file);
    assert_eq!(xattrs.get(b"user.synced".as_slice()).unwrap(), b"one");
    let big = xattrs.get(b"user.big".as_slice()).unwrap();
    assert!(
        *big == pattern(1, 20_000) || *big == pattern(2, 30_000),
        "a value is wholly old or wholly new"
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn snapshots_show_xattrs_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "xs", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let file = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    fs.setxattr(file, b"user.a", b"before", 0).unwrap();
    fs.setxattr(file, b"user.big", &pattern(4, 9000), 0)
        .unwrap();
    pool.create_snapshots(&["xs@one".to_string()], false)
        .unwrap();
    fs.setxattr(file, b"user.a", b"after", 0).unwrap();
    fs.removexattr(file, b"user.big").unwrap();
    let snapshot = pool.snapshot_file_system("xs@one").unwrap();
    assert_eq!(snapshot.getxattr(file, b"user.a").unwrap(), b"before");
    assert_eq!(
        snapshot.getxattr(file, b"user.big").unwrap(),
        pattern(4, 9000)
    );
    assert!(matches!(
        snapshot.setxattr(file, b"user.a", b"x", 0),
        Err(FsError::ReadOnly)
    ));
    assert!(matches!(
        snapshot.removexattr(file, b"user.a"),
        Err(FsError::ReadOnly)
    ));
    assert_eq!(fs.getxattr(file, b"user.a").unwrap(), b"after");
    drop(snapshot);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// Readers racing a writer that keeps replacing one xattr, moving it between the SA region,
/// an inline directory entry and a value object: every read returns one whole value. (A read
/// that found a value object just removed by the writer used to fail as corruption.)
#[test]
fn readers_racing_a_writer_see_whole_values() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "xr", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let file = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    let values: Vec<Vec<u8>> = [20usize, 900, 20_000, 3000]
        .iter()
        .enumerate()
        .map(|(seed, &length)| pattern(seed as u64, length))
        .collect();
    fs.setxattr(file, b"user.v", &values[0], 0).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let value = fs.getxattr(file, b"user.v").unwrap();
                    assert!(values.contains(&value), "a torn value of {}", value.len());
                    assert_eq!(fs.listxattr(file).unwrap(), vec![b"user.v".to_vec()]);
                    reads += 1;
                }
                assert!(reads > 0);
            });
        }
        for round in 0..400 {
            fs.setxattr(file, b"user.v", &values[round % values.len()], 0)
                .unwrap();
            if round % 50 == 0 {
                pool.sync().unwrap();
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A symlink whose inline target leaves no room for the xattr directory's pointer: the first
/// xattr that must go to the directory moves the target into the object's data (it used to
/// empty the SA region looking for room and then index an empty list).
#[test]
fn long_inline_symlink_targets_make_room_for_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "xl", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let root = fs.root();
    for length in [150usize, 185, 190, 192] {
        let name = format!("link{length}");
        let target = vec![b't'; length];
        let link = fs
            .symlink(root, name.as_bytes(), &target, 0, 0)
            .unwrap()
            .ino;
        fs.setxattr(link, b"security.small", b"s", 0).unwrap();
        fs.setxattr(link, b"security.big", &pattern(1, 3000), 0)
            .unwrap();
        assert_eq!(
            fs.readlink(link).unwrap(),
            target,
            "target of {length} bytes"
        );
        assert_eq!(
            fs.getxattr(link, b"security.big").unwrap(),
            pattern(1, 3000)
        );
        assert_eq!(fs.getxattr(link, b"security.small").unwrap(), b"s");
        assert_eq!(fs.getattr(link).unwrap().size, length as u64);
    }
    pool.sync().unwrap();
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "xl", tiny());
    let fs = pool.file_system().unwrap();
    for length in [150usize, 185, 190, 192] {
        let link = fs
            .lookup(fs.root(), format!("link{length}").as_bytes())
            .unwrap()
            .ino;
        assert_eq!(fs.readlink(link).unwrap(), vec![b't'; length]);
        fs.unlink(fs.root(), format!("link{length}").as_bytes())
            .unwrap();
    }
    assert_clean(&pool);
    pool.export().unwrap();
}
