//! The rest of POSIX on a real pool: fallocate (punch hole, zero range, plain and keep-size),
//! SEEK_DATA / SEEK_HOLE before and after a sync (dirty data is never a hole), copy_file_range
//! (copies, never shares: the source's blocks stay its own), RENAME_WHITEOUT, and statfs in
//! 4 KiB units. Every test ends with `check` clean.

use crate::common;

use std::sync::Arc;

use tarn::fs::{
    FileKind, FileSystem, FsError, SeekTarget, SpaceFigures, FALLOC_FL_KEEP_SIZE,
    FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT,
};
use tarn::pool::Pool;
use tarn::types::ObjectId;

use common::*;

/// The tiny configuration's recordsize: every file here has blocks of this size.
fn block_size(fs: &FileSystem, ino: u64) -> u64 {
    fs.getattr(ino).unwrap().blksize as u64
}

fn allocated(pool: &Pool, ino: u64) -> u64 {
    pool.sync().unwrap();
    pool.root_objset()
        .info(ObjectId(ino))
        .unwrap()
        .size_allocated
}

#[test]
fn fallocate_modes_punch_and_zero_whole_and_partial_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "fa", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let root = fs.root();
    let ino = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    let bs = block_size(&fs, ino);
    let size = 8 * bs;
    let mut expected = pattern(1, size as usize);
    fs.write(ino, 0, &expected).unwrap();
    let full = allocated(&pool, ino);

    // Punch from the middle of block 1 to the middle of block 5: blocks 2..5 become holes.
    let (start, end) = (bs + bs / 2, 5 * bs + bs / 3);
    fs.fallocate(
        ino,
        start,
        end - start,
        FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
    )
    .unwrap();
    expected[start as usize..end as usize].fill(0);
    assert_eq!(fs.read(ino, 0, size as usize).unwrap(), expected);
    assert_eq!(fs.getattr(ino).unwrap().size, size, "KEEP_SIZE");
    let punched = allocated(&pool, ino);
    assert!(
        punched < full,
        "punching three whole blocks freed nothing: {full} -> {punched}"
    );
    // Holes where the whole blocks were.
    assert_eq!(fs.seek(ino, 0, SeekTarget::Hole).unwrap(), 2 * bs);
    assert_eq!(fs.seek(ino, 2 * bs, SeekTarget::Data).unwrap(), 5 * bs);

    // Zero range past the end grows the file; with KEEP_SIZE it does not.
    fs.fallocate(ino, 7 * bs, 2 * bs, FALLOC_FL_ZERO_RANGE)
        .unwrap();
    expected[7 * bs as usize..].fill(0);
    expected.resize(9 * bs as usize, 0);
    assert_eq!(fs.getattr(ino).unwrap().size, 9 * bs);
    fs.fallocate(ino, 10, 20, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)
        .unwrap();
    expected[10..30].fill(0);
    fs.fallocate(ino, 20 * bs, bs, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)
        .unwrap();
    assert_eq!(fs.getattr(ino).unwrap().size, 9 * bs);
    assert_eq!(fs.read(ino, 0, 20 * bs as usize).unwrap(), expected);

    // Mode 0 grows the size without writing; KEEP_SIZE alone changes nothing.
    let before = allocated(&pool, ino);
    fs.fallocate(ino, 0, 12 * bs, FALLOC_FL_KEEP_SIZE).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().size, 9 * bs);
    fs.fallocate(ino, 10 * bs, 2 * bs, 0).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().size, 12 * bs);
    assert_eq!(allocated(&pool, ino), before, "no reservation, no blocks");
    expected.resize(12 * bs as usize, 0);
    assert_eq!(fs.read(ino, 0, 12 * bs as usize).unwrap(), expected);

    // Misuse.
    assert!(matches!(
        fs.fallocate(ino, 0, bs, FALLOC_FL_PUNCH_HOLE),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(
        fs.fallocate(ino, 0, 0, 0),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(
        fs.fallocate(ino, u64::MAX - 5, 10, 0),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(
        fs.fallocate(ino, 0, bs, 0x08),
        Err(FsError::NotSupported)
    ));
    assert!(matches!(fs.fallocate(root, 0, bs, 0), Err(FsError::IsDir)));
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "fa", tiny());
    let fs = pool.file_system().unwrap();
    assert_eq!(fs.read(ino, 0, 12 * bs as usize).unwrap(), expected);
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn seek_data_and_hole_see_dirty_data_and_synced_holes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "sk", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let ino = fs.create(fs.root(), b"sparse", 0o644, 0, 0).unwrap().ino;
    let bs = block_size(&fs, ino);
    // Data in blocks 3 and 7, size 10 blocks: all still dirty.
    fs.write(ino, 3 * bs + 5, b"x").unwrap();
    fs.write(ino, 7 * bs, &pattern(2, bs as usize)).unwrap();
    fs.setattr(
        ino,
        tarn::fs::SetAttr {
            size: Some(10 * bs),
            ..Default::default()
        },
    )
    .unwrap();
    for synced in [false, true] {
        if synced {
            pool.sync().unwrap();
        }
        assert_eq!(
            fs.seek(ino, 0, SeekTarget::Data).unwrap(),
            3 * bs,
            "{synced}"
        );
        assert_eq!(fs.seek(ino, 0, SeekTarget::Hole).unwrap(), 0);
        assert_eq!(
            fs.seek(ino, 3 * bs + 7, SeekTarget::Data).unwrap(),
            3 * bs + 7
        );
        assert_eq!(fs.seek(ino, 3 * bs, SeekTarget::Hole).unwrap(), 4 * bs);
        assert_eq!(fs.seek(ino, 4 * bs, SeekTarget::Data).unwrap(), 7 * bs);
        assert_eq!(fs.seek(ino, 7 * bs, SeekTarget::Hole).unwrap(), 8 * bs);
        assert!(matches!(
            fs.seek(ino, 8 * bs, SeekTarget::Data),
            Err(FsError::PastEnd)
        ));
        assert_eq!(fs.seek(ino, 9 * bs, SeekTarget::Hole).unwrap(), 9 * bs);
        assert!(matches!(
            fs.seek(ino, 10 * bs, SeekTarget::Hole),
            Err(FsError::PastEnd)
        ));
    }
    // A file written all over has its only hole at the end.
    let dense = fs.create(fs.root(), b"dense", 0o644, 0, 0).unwrap().ino;
    fs.write(dense, 0, &pattern(3, (3 * bs + 10) as usize))
        .unwrap();
    assert_eq!(fs.seek(dense, 0, SeekTarget::Hole).unwrap(), 3 * bs + 10);
    assert_eq!(fs.seek(dense, 100, SeekTarget::Data).unwrap(), 100);
    assert!(matches!(
        fs.seek(fs.root(), 0, SeekTarget::Data),
        Err(FsError::IsDir)
    ));
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn copy_range_copies_data_and_keeps_holes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "cp", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let root = fs.root();
    let source = fs.create(root, b"src", 0o644, 0, 0).unwrap().ino;
    let target = fs.create(root, b"dst", 0o644, 0, 0).unwrap().ino;
    let bs = block_size(&fs, source);
    let data = pattern(4, (4 * bs) as usize);
    fs.write(source, 0, &data[..(2 * bs) as usize]).unwrap();
    fs.write(source, 3 * bs, &data[(3 * bs) as usize..])
        .unwrap();
    let mut expected = data.clone();
    expected[(2 * bs) as usize..(3 * bs) as usize].fill(0);
    let copied = fs.copy_range(&fs, source, 0, target, 0, 100 * bs).unwrap();
    assert_eq!(copied, 4 * bs, "stops at the source's end");
    assert_eq!(fs.read(target, 0, (5 * bs) as usize).unwrap(), expected);
    assert_eq!(
        fs.seek(target, 0, SeekTarget::Hole).unwrap(),
        2 * bs,
        "the hole stays"
    );
    // Unaligned, within one file, not overlapping.
    let copied = fs
        .copy_range(&fs, source, 10, source, 4 * bs + 3, 50)
        .unwrap();
    assert_eq!(copied, 50);
    assert_eq!(fs.read(source, 4 * bs + 3, 50).unwrap(), data[10..60]);
    assert!(matches!(
        fs.copy_range(&fs, source, 0, source, 10, 100),
        Err(FsError::Invalid(_))
    ));
    // Never shared: the copy has its own blocks, and the source's go when it does.
    let target_allocated = allocated(&pool, target);
    assert!(target_allocated > 0);
    fs.unlink(root, b"src").unwrap();
    assert_eq!(fs.read(target, 0, (4 * bs) as usize).unwrap(), expected);
    assert_eq!(allocated(&pool, target), target_allocated);
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn rename_whiteout_leaves_a_char_device_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "wo", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let root = fs.root();
    let sub = fs.mkdir(root, b"sub", 0o755, 0, 0).unwrap().ino;
    let file = fs.create(root, b"a", 0o644, 0, 0).unwrap().ino;
    fs.rename_as(root, b"a", sub, b"b", RENAME_WHITEOUT, 7, 8)
        .unwrap();
    assert_eq!(fs.lookup(sub, b"b").unwrap().ino, file);
    let whiteout = fs.lookup(root, b"a").unwrap();
    assert_eq!(whiteout.kind, FileKind::CharDevice);
    assert_eq!((whiteout.rdev, whiteout.perm), (0, 0));
    assert_eq!((whiteout.uid, whiteout.gid), (7, 8));
    assert_eq!(fs.getattr(root).unwrap().size, 2, "sub and the whiteout");
    // With NOREPLACE: refused over an existing name, nothing changed.
    fs.create(root, b"c", 0o644, 0, 0).unwrap();
    assert!(matches!(
        fs.rename(sub, b"b", root, b"c", RENAME_WHITEOUT | RENAME_NOREPLACE),
        Err(FsError::Exists)
    ));
    assert!(matches!(
        fs.rename(sub, b"b", root, b"c", RENAME_WHITEOUT | RENAME_EXCHANGE),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(
        fs.rename(sub, b"b", root, b"c", 8),
        Err(FsError::Invalid(_))
    ));
    // Replacing a target, across directories: the target goes, the whiteout comes.
    fs.rename(sub, b"b", root, b"c", RENAME_WHITEOUT).unwrap();
    assert_eq!(fs.lookup(root, b"c").unwrap().ino, file);
    assert_eq!(fs.lookup(sub, b"b").unwrap().kind, FileKind::CharDevice);
    assert_eq!(fs.getattr(sub).unwrap().size, 1);
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "wo", tiny());
    let fs = pool.file_system().unwrap();
    assert_eq!(fs.lookup(sub, b"b").unwrap().kind, FileKind::CharDevice);
    fs.unlink(sub, b"b").unwrap();
    fs.unlink(root, b"a").unwrap();
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn statfs_counts_in_4k_blocks_whatever_the_recordsize() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "sf", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let mut config = fs.config();
    config.file_block_size = 128 << 10;
    fs.set_config(config);
    fs.set_space_source(Arc::new(|| SpaceFigures {
        size_bytes: (1 << 30) + 5000,
        available_bytes: 1 << 20,
    }));
    let statfs = fs.statfs().unwrap();
    assert_eq!(statfs.block_size, 4096);
    assert_eq!(statfs.blocks, ((1 << 30) + 5000) / 4096);
    assert_eq!(statfs.blocks_available, (1 << 20) / 4096);
    assert_eq!(statfs.blocks_free, statfs.blocks_available);
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn copy_range_of_a_synced_punched_file() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "cps", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let root = fs.root();
    let source = fs.create(root, b"src", 0o644, 0, 0).unwrap().ino;
    let bs = block_size(&fs, source);
    let data = pattern(5, (8 * bs) as usize);
    fs.write(source, 0, &data).unwrap();
    pool.sync().unwrap();
    fs.fallocate(
        source,
        bs,
        3 * bs,
        FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
    )
    .unwrap();
    pool.sync().unwrap();
    fs.fallocate(source, 10, 20, FALLOC_FL_ZERO_RANGE).unwrap();
    fs.fallocate(source, 0, 16 * bs, 0).unwrap();
    assert_eq!(fs.seek(source, 0, SeekTarget::Data).unwrap(), 0);
    assert_eq!(fs.seek(source, 0, SeekTarget::Hole).unwrap(), bs);
    let target = fs.create(root, b"dst", 0o644, 0, 0).unwrap().ino;
    let copied = fs.copy_range(&fs, source, 0, target, 0, 16 * bs).unwrap();
    assert_eq!(copied, 16 * bs);
    assert_eq!(
        fs.read(target, 0, (16 * bs) as usize).unwrap(),
        fs.read(source, 0, (16 * bs) as usize).unwrap()
    );
    assert_clean(&pool);
    pool.export().unwrap();
}
