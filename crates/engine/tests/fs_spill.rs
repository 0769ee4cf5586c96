//! The dnode's spill block on a real pool: SA xattrs that overflow the
//! 320-byte bonus buffer continue in one spill block of up to 128 KiB before anything goes to
//! the hidden xattr directory; the spill block goes away when the entries fit the bonus buffer
//! again, is freed with its file, is kept for snapshots, survives export and import, and a bad
//! copy is healed from the other while a spill block with no good copy fails that file's
//! xattr calls with an error, never a panic. Every test ends with `check` clean (it adds each
//! spill block to its object's allocated bytes and to the space cross-check).

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;

use tarn::block::blkptr::BlockPtr;
use tarn::fs::{FileSystem, XattrLayout};
use tarn::pool::Pool;
use tarn::types::ObjectId;
use tarn::vdev::label::VDEV_LABEL_START_SIZE;

use common::*;

fn has_spill(pool: &Pool, ino: u64) -> bool {
    pool.root_objset().has_spill(ObjectId(ino)).unwrap()
}

/// The objects of the root object set, as the synced tree has them.
fn object_count(pool: &Pool) -> usize {
    pool.sync().unwrap();
    pool.root_objset().synced_objects().unwrap().len()
}

/// The synced spill block pointer of `ino`.
fn synced_spill(pool: &Pool, ino: u64) -> Option<BlockPtr> {
    pool.sync().unwrap();
    pool.root_objset()
        .synced_objects()
        .unwrap()
        .into_iter()
        .find(|(object, _)| object.0 == ino)
        .and_then(|(_, dnode)| dnode.spill)
}

fn all_xattrs(fs: &FileSystem, ino: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    fs.listxattr(ino)
        .unwrap()
        .into_iter()
        .map(|name| {
            let value = fs.getxattr(ino, &name).unwrap();
            (name, value)
        })
        .collect()
}

#[test]
fn overflow_goes_to_the_spill_block_then_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "sp", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let file = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    let before = object_count(&pool);
    let mut expected = BTreeMap::new();
    // Six small ones fit the bonus buffer; the seventh needs the spill block.
    for index in 0..6u8 {
        let name = format!("user.s{index}").into_bytes();
        fs.setxattr(file, &name, &[index; 20], 0).unwrap();
        expected.insert(name, vec![index; 20]);
    }
    assert!(
        !has_spill(&pool, file),
        "six small xattrs fit the bonus buffer"
    );
    fs.setxattr(file, b"user.s6", &[6; 20], 0).unwrap();
    expected.insert(b"user.s6".to_vec(), vec![6; 20]);
    assert!(
        has_spill(&pool, file),
        "the seventh overflows to the spill block"
    );
    // Values of a few KiB go to the spill block too, with no new object.
    for index in 0..20u64 {
        let name = format!("user.kib{index}").into_bytes();
        let value = pattern(index, 5000);
        fs.setxattr(file, &name, &value, 0).unwrap();
        expected.insert(name, value);
    }
    assert_eq!(
        object_count(&pool),
        before,
        "no xattr directory or value object while the spill block has room"
    );
    let spill = synced_spill(&pool, file).expect("a synced spill block");
    assert!(spill.size_logical as usize > 100_000, "{spill}");
    // The spill block is full (128 KiB): the next ones go to the directory, a large value to
    // an object of its own.
    for index in 20..30u64 {
        let name = format!("user.kib{index}").into_bytes();
        let value = pattern(index, 5000);
        fs.setxattr(file, &name, &value, 0).unwrap();
        expected.insert(name, value);
    }
    assert!(
        object_count(&pool) >= before + 2,
        "the directory and value objects"
    );
    assert_eq!(all_xattrs(&fs, file), expected);
    assert_eq!(fs.getattr(file).unwrap().perm, 0o644, "the znode is intact");

    pool.sync().unwrap();
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "sp", tiny());
    let fs = FileSystem::open(pool.root_objset(), pool.core.txgs.clone()).unwrap();
    assert_eq!(all_xattrs(&fs, file), expected, "after export and import");
    assert!(has_spill(&pool, file));
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn the_spill_block_goes_when_entries_fit_again_and_with_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "sg", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let root = fs.root();
    let before = object_count(&pool);
    let file = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    for index in 0..10u64 {
        fs.setxattr(
            file,
            format!("user.v{index}").as_bytes(),
            &pattern(index, 3000),
            0,
        )
        .unwrap();
    }
    assert!(synced_spill(&pool, file).is_some());
    assert_clean(&pool);
    for index in 0..10u64 {
        fs.removexattr(file, format!("user.v{index}").as_bytes())
            .unwrap();
    }
    assert!(!has_spill(&pool, file), "nothing left to spill");
    assert!(synced_spill(&pool, file).is_none());
    assert!(fs.listxattr(file).unwrap().is_empty());
    assert_clean(&pool);
    // Spill again, then replace a spilled value by a small one: the entries fit the bonus
    // buffer again and the spill block goes in the same change.
    fs.setxattr(file, b"user.a", &pattern(1, 400), 0).unwrap();
    assert!(has_spill(&pool, file));
    fs.setxattr(file, b"user.a", b"small", 0).unwrap();
    assert!(!has_spill(&pool, file));
    assert_eq!(fs.getxattr(file, b"user.a").unwrap(), b"small");
    // xattr=dir moves nothing already stored; a spilled file keeps its spill block.
    fs.setxattr(file, b"user.b", &pattern(2, 4000), 0).unwrap();
    let mut config = fs.config();
    config.xattr = XattrLayout::Dir;
    fs.set_config(config);
    fs.setxattr(file, b"user.c", b"in the directory", 0)
        .unwrap();
    assert!(has_spill(&pool, file));
    assert_eq!(fs.getxattr(file, b"user.b").unwrap(), pattern(2, 4000));
    assert_eq!(fs.getxattr(file, b"user.c").unwrap(), b"in the directory");
    // Unlinking frees the spill block with the object (check finds no leak).
    fs.unlink(root, b"f").unwrap();
    assert_eq!(object_count(&pool), before);
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn snapshots_keep_the_spill_block_they_saw() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "ss", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let file = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    fs.setxattr(file, b"user.old", &pattern(1, 2000), 0)
        .unwrap();
    pool.create_snapshots(&["ss@one".to_string()], false)
        .unwrap();
    fs.setxattr(file, b"user.old", &pattern(2, 2500), 0)
        .unwrap();
    fs.setxattr(file, b"user.new", &pattern(3, 2500), 0)
        .unwrap();
    pool.sync().unwrap();
    let snapshot = pool.snapshot_file_system("ss@one").unwrap();
    assert_eq!(
        all_xattrs(&snapshot, file),
        BTreeMap::from([(b"user.old".to_vec(), pattern(1, 2000))])
    );
    drop(snapshot);
    assert_clean(&pool);
    // Destroying the snapshot frees the old spill block (its deadlist holds it).
    pool.destroy_snapshots("ss@one", false).unwrap();
    fs.unlink(fs.root(), b"f").unwrap();
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A file system whose files have spill blocks is destroyed in the background (the
/// resumable traversal visits each spill block after its object's tree): every block comes
/// back and check stays clean while it runs and after.
#[test]
fn destroying_a_file_system_frees_its_spill_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "sb", single(dir.path(), "d0"), tiny());
    pool.sync().unwrap();
    let baseline = pool.core.io.space.totals().allocated;
    pool.create_dataset("sb/child", &[], false).unwrap();
    let fs = pool.open_file_system("sb/child").unwrap();
    for index in 0..40u64 {
        let ino = fs
            .create(fs.root(), format!("f{index}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.setxattr(ino, b"user.v", &pattern(index, 6000), 0)
            .unwrap();
    }
    drop(fs);
    pool.sync().unwrap();
    let full = pool.core.io.space.totals().allocated;
    assert!(full > baseline + 40 * 6000, "{baseline} -> {full}");
    pool.destroy_dataset("sb/child", false).unwrap();
    assert_clean(&pool);
    let started = std::time::Instant::now();
    while pool.core.freeing_bytes().unwrap() > 0 || pool.core.background_work_pending() {
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for _ in 0..3 {
        pool.sync().unwrap();
    }
    let now = pool.core.io.space.totals().allocated;
    assert!(
        now <= baseline + (256 << 10),
        "space came back: {baseline} -> {full} -> {now}"
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

/// Overwrite copy `which` (or every copy) of `bp` in the single-vdev pool at `path`.
fn damage(path: &std::path::Path, bp: &BlockPtr, which: Option<usize>) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    for (index, dva) in bp.copies().enumerate() {
        if which.is_none_or(|which| which == index) {
            let junk = vec![0x5Au8; dva.size_allocated as usize];
            file.write_all_at(&junk, VDEV_LABEL_START_SIZE + dva.offset)
                .unwrap();
        }
    }
    file.sync_all().unwrap();
}

#[test]
fn a_bad_spill_copy_heals_and_a_lost_spill_block_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d0");
    let (file, other, spill) = {
        let pool = create_pool(dir.path(), "sd", single(dir.path(), "d0"), tiny());
        let fs = pool.file_system().unwrap();
        let file = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
        let other = fs.create(fs.root(), b"g", 0o644, 0, 0).unwrap().ino;
        fs.setxattr(file, b"user.v", &pattern(5, 3000), 0).unwrap();
        fs.setxattr(other, b"user.w", b"fine", 0).unwrap();
        let spill = synced_spill(&pool, file).expect("spill");
        drop(fs);
        pool.export().unwrap();
        (file, other, spill)
    };
    assert!(
        spill.copies().count() >= 2,
        "a spill block is metadata: {spill}"
    );
    damage(&path, &spill, Some(0));
    {
        let pool = import(dir.path(), "sd", tiny());
        let fs = pool.file_system().unwrap();
        assert_eq!(fs.getxattr(file, b"user.v").unwrap(), pattern(5, 3000));
        drop(fs);
        assert_clean(&pool);
        pool.export().unwrap();
    }
    damage(&path, &spill, None);
    let pool = import(dir.path(), "sd", tiny());
    let fs = pool.file_system().unwrap();
    let error = fs
        .getxattr(file, b"user.v")
        .expect_err("no good copy of the spill block");
    assert!(!error.to_string().is_empty());
    assert!(fs.listxattr(file).is_err());
    // The file's other attributes and every other file are unaffected.
    assert_eq!(fs.getattr(file).unwrap().perm, 0o644);
    assert_eq!(fs.getxattr(other, b"user.w").unwrap(), b"fine");
    drop(fs);
    let report = tarn::check::check_pool(&pool, false).unwrap();
    assert!(
        !report.blocks_unreadable.is_empty(),
        "check names the lost spill block: {report:#?}"
    );
    pool.export().unwrap();
}

/// An object removed while its spill block is read is gone (`NoSuchObject`), never an object
/// without a spill block. `ObjectSet::spill` checked that the object existed and then looked
/// for the spill block in a second step: a removal in between, still in the dirty records or
/// already synced, made it answer "no spill block", which the xattr code reports as
/// `Corrupt("inode N: the znode names a spill block the object does not have")`. A getxattr
/// can meet that: it reads the spill block under the inode's lock, but a large file's last
/// unlink frees and removes the object after dropping that lock (`remove_parked`). The test
/// hook removes the object at the moment of the look, with the removal synced or not;
/// `has_spill` after it must say the same.
#[test]
fn a_spill_block_read_while_its_object_is_removed_is_not_found() {
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::Arc;

    use tarn::block::blkptr::{Compression, ObjectType};
    use tarn::object::{test_hook_before_block_lookup, ObjectError, SPILL_BLKID};

    let dir = tempfile::tempdir().unwrap();
    let pool = Arc::new(create_pool(
        dir.path(),
        "spgone",
        single(dir.path(), "d0"),
        tiny(),
    ));
    let objset = pool.root_objset();
    let mut wrong = Vec::new();
    for synced in [false, true] {
        let object = create_file(&pool, &objset, 4096, Compression::Lz4);
        {
            let hold = pool.assign().unwrap();
            objset
                .set_bonus(&hold.tx(), object, ObjectType::None, b"znode")
                .unwrap();
            objset
                .set_spill(&hold.tx(), object, Some(pattern(7, 1024)))
                .unwrap();
        }
        pool.sync().unwrap();
        assert_eq!(
            objset.spill(object).unwrap().as_deref(),
            Some(&pattern(7, 1024))
        );
        let removed = Rc::new(Cell::new(false));
        let hook = {
            let (pool, removed) = (pool.clone(), removed.clone());
            move |looked: ObjectId, blkid: u64| {
                if looked == object && blkid == SPILL_BLKID && !removed.replace(true) {
                    let objset = pool.root_objset();
                    let hold = pool.assign().unwrap();
                    objset.remove_object(&hold.tx(), object).unwrap();
                    drop(hold);
                    if synced {
                        pool.sync().unwrap();
                    }
                }
            }
        };
        test_hook_before_block_lookup(Some(Box::new(hook)));
        let spill = objset.spill(object);
        test_hook_before_block_lookup(None);
        assert!(
            removed.get(),
            "removal synced: {synced}: the object was not removed"
        );
        if !matches!(spill, Err(ObjectError::NoSuchObject(gone)) if gone == object) {
            wrong.push(format!("removal synced: {synced}: {spill:?}"));
        }
        let has_spill = objset.has_spill(object);
        if !matches!(has_spill, Err(ObjectError::NoSuchObject(_))) {
            wrong.push(format!("removal synced: {synced}: has_spill {has_spill:?}"));
        }
    }
    assert!(wrong.is_empty(), "spill looks not NoSuchObject: {wrong:#?}");
    drop(objset);
    let pool = Arc::into_inner(pool).expect("no other reference to the pool");
    assert_clean(&pool);
    pool.export().unwrap();
}
