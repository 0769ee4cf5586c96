//! Space accounting that tells the truth: `st_blocks` counts
//! only what a file holds or is about to hold, zero blocks under compression are holes,
//! compressratio speaks of the user's data (an empty file system reads 1.00x), and a dataset's
//! figures, statfs and the files' `st_blocks` agree after a sync.
//!
//! Guards the bugs seen before: `st_blocks` was size/512 for a file extended only by
//! ftruncate (`truncate -s 100M f` showed 100M in du), 100 MiB of zeros under lz4 showed 100M
//! in du, and compressratio read 164x on an empty file system.

use crate::common;

use common::*;
use tarn::fs::{FileSystem, SetAttr};
use tarn::pool::Pool;

fn info(pool: &Pool, name: &str) -> tarn::pool::datasets::DatasetInfo {
    pool.datasets()
        .into_iter()
        .find(|info| info.name == name)
        .unwrap()
}

fn blocks_of(fs: &FileSystem, name: &str) -> u64 {
    fs.lookup(fs.root(), name.as_bytes()).unwrap().blocks
}

#[test]
fn an_empty_file_system_reads_1x_and_sparse_files_hold_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tiny());
    let fs = pool.file_system().unwrap();
    pool.sync().unwrap();
    let empty = info(&pool, "tank");
    assert!(
        (empty.compress_ratio() - 1.0).abs() < 1e-9,
        "empty file system compressratio {}",
        empty.compress_ratio()
    );
    assert!((empty.ref_compress_ratio() - 1.0).abs() < 1e-9);

    // truncate -s 8M: a size and nothing else.
    let sparse = fs.create(fs.root(), b"sparse", 0o644, 0, 0).unwrap();
    fs.setattr(
        sparse.ino,
        SetAttr {
            size: Some(8 << 20),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert_eq!(blocks_of(&fs, "sparse"), 0, "before a sync");
    pool.sync().unwrap();
    assert_eq!(blocks_of(&fs, "sparse"), 0, "after a sync");

    // 4 MiB of zeros under lz4 (the default): holes, nothing allocated.
    let zeros = fs.create(fs.root(), b"zeros", 0o644, 0, 0).unwrap();
    for offset in (0..4u64 << 20).step_by(64 << 10) {
        fs.write(zeros.ino, offset, &vec![0u8; 64 << 10]).unwrap();
    }
    let dirty_estimate = blocks_of(&fs, "zeros");
    assert!(
        dirty_estimate <= (4 << 20) / 512,
        "never more than the dirty data: {dirty_estimate}"
    );
    pool.sync().unwrap();
    assert_eq!(blocks_of(&fs, "zeros"), 0, "zero blocks are holes");
    let after = info(&pool, "tank");
    assert!(
        after.referenced < empty.referenced + (256 << 10),
        "8 MiB sparse + 4 MiB zeros took {} bytes",
        after.referenced - empty.referenced
    );
    assert_clean(&pool);
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn st_blocks_statfs_and_dataset_figures_agree_after_a_sync() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tiny());
    pool.create_dataset("tank/data", &[("compression".into(), "lz4".into())], false)
        .unwrap();
    let fs = pool.open_file_system("tank/data").unwrap();
    pool.sync().unwrap();
    let empty = info(&pool, "tank/data");
    let mut written = 0u64;
    for file in 0..12u64 {
        let attr = fs
            .create(fs.root(), format!("f{file}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        let bytes = pattern(file, 200 << 10);
        fs.write(attr.ino, 0, &bytes).unwrap();
        written += bytes.len() as u64;
        // Before the sync the estimate is the dirty data, never more.
        let blocks = fs.getattr(attr.ino).unwrap().blocks;
        assert!(blocks * 512 <= bytes.len() as u64 + 4096, "{blocks}");
        assert!(blocks > 0);
    }
    pool.sync().unwrap();
    let data = info(&pool, "tank/data");
    let file_blocks: u64 = (0..12)
        .map(|file| blocks_of(&fs, &format!("f{file}")) * 512)
        .sum();
    let grown = data.referenced - empty.referenced;
    // The files' st_blocks are their allocated space: the dataset grew by that plus metadata.
    assert!(
        file_blocks <= grown,
        "files {file_blocks}, dataset grew {grown}"
    );
    assert!(
        grown - file_blocks < grown / 4 + (64 << 10),
        "metadata cannot be most of it: files {file_blocks}, dataset grew {grown}"
    );
    // A third of the pattern files are compressible: the ratio says so, and metadata (counted
    // at its physical size on both sides) does not inflate it.
    assert!(data.compress_ratio() > 1.1, "{}", data.compress_ratio());
    assert!(data.compress_ratio() < written as f64 / file_blocks as f64 + 0.5);
    // statfs speaks as zfs's df: size = referenced + avail.
    let statfs = fs.statfs().unwrap();
    let size = statfs.blocks * statfs.block_size as u64;
    let expected = data.referenced + data.available;
    assert!(
        size.abs_diff(expected) <= (1 << 20),
        "statfs size {size}, referenced + avail {expected}"
    );
    // The parent's used counts the child's.
    let root = info(&pool, "tank");
    assert!(root.used >= root.referenced + data.referenced);
    assert!(root.compressed >= data.compressed);
    assert_clean(&pool);
    drop(fs);
    pool.export().unwrap();
}
