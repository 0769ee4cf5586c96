//! Predictive prefetch through the file system on a real pool: a sequential reader, after an
//! export and import (so nothing is cached), gets the right bytes while prefetch workers read
//! ahead of it; random reads and `zfs_prefetch_disable=1` issue no prefetch; a cold read of
//! several blocks has the workers read all but its first, and a damaged block under such a read
//! is an error, not wrong bytes. `check` is clean afterwards.

use crate::common;

use tarn::fs::FileSystem;
use tarn::pool::Pool;
use tarn::tunables::Tunables;

use common::*;

const FILE_BYTES: usize = 2 << 20;

/// A pool with one file of `FILE_BYTES` patterned bytes, exported and imported again.
fn pool_with_file(dir: &std::path::Path, name: &str, tunables: Tunables) -> (Pool, u64) {
    let pool = create_pool(dir, name, single(dir, "v0"), tunables.clone());
    let fs = pool.file_system().expect("open fs");
    let ino = fs.create(fs.root(), b"seq.bin", 0o644, 0, 0).unwrap().ino;
    let data = pattern(11, FILE_BYTES);
    for (index, chunk) in data.chunks(64 << 10).enumerate() {
        fs.write(ino, (index * (64 << 10)) as u64, chunk).unwrap();
    }
    drop(fs);
    pool.export().unwrap();
    (import(dir, name, tunables), ino)
}

fn read_all_sequentially(fs: &FileSystem, ino: u64, chunk: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(FILE_BYTES);
    while out.len() < FILE_BYTES {
        let got = fs.read(ino, out.len() as u64, chunk).unwrap();
        assert!(!got.is_empty(), "short read at {}", out.len());
        out.extend_from_slice(&got);
    }
    out
}

#[test]
fn sequential_reads_are_prefetched_and_correct() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, ino) = pool_with_file(dir.path(), "pfseq", tiny());
    let fs = pool.file_system().expect("open fs");
    // 16 KiB reads over 4 KiB records: every read after the first two continues the stream.
    let read = read_all_sequentially(&fs, ino, 16 << 10);
    assert!(read == pattern(11, FILE_BYTES), "bytes read differ");
    let stats = fs.prefetch_stats();
    assert!(stats.hits > 100, "stream not followed: {stats:?}");
    assert!(stats.blocks_queued > 0, "nothing prefetched: {stats:?}");
    assert!(
        stats.blocks_read + stats.blocks_claimed > 0,
        "prefetches neither read nor claimed: {stats:?}"
    );
    // The distance is capped at a quarter of the 1 MiB cache: the queue never overflows.
    assert_eq!(stats.blocks_dropped, 0, "{stats:?}");
    drop(fs);
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn random_reads_are_not_prefetched() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, ino) = pool_with_file(dir.path(), "pfrandom", tiny());
    let fs = pool.file_system().expect("open fs");
    let data = pattern(11, FILE_BYTES);
    for block in [300u64, 17, 450, 90, 230, 5, 380, 150] {
        let offset = block * 4096;
        let got = fs.read(ino, offset, 4096).unwrap();
        assert!(got[..] == data[offset as usize..offset as usize + 4096]);
    }
    let stats = fs.prefetch_stats();
    assert_eq!((stats.hits, stats.blocks_queued), (0, 0), "{stats:?}");
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn prefetch_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut tunables = tiny();
    tunables.set("zfs_prefetch_disable", "1").unwrap();
    let (pool, ino) = pool_with_file(dir.path(), "pfoff", tunables);
    let fs = pool.file_system().expect("open fs");
    let read = read_all_sequentially(&fs, ino, 16 << 10);
    assert!(read == pattern(11, FILE_BYTES));
    assert_eq!(fs.prefetch_stats().blocks_queued, 0);
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn a_cold_read_of_several_blocks_is_shared_with_the_workers() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, ino) = pool_with_file(dir.path(), "pfwide", tiny());
    let fs = pool.file_system().expect("open fs");
    let data = pattern(11, FILE_BYTES);
    // Two 256 KiB reads over 4 KiB records, far apart: neither continues a stream, and each
    // hands its 63 blocks after the first to the workers.
    for offset in [1usize << 20, 64 << 10] {
        let got = fs.read(ino, offset as u64, 256 << 10).unwrap();
        assert!(got[..] == data[offset..offset + (256 << 10)], "at {offset}");
    }
    let stats = fs.prefetch_stats();
    assert_eq!(stats.blocks_for_readers, 2 * 63, "{stats:?}");
    assert_eq!(stats.blocks_queued, 0, "{stats:?}");
    // Read again, now from memory: nothing more is handed over.
    let got = fs.read(ino, 64 << 10, 256 << 10).unwrap();
    assert!(got[..] == data[64 << 10..320 << 10]);
    assert_eq!(fs.prefetch_stats().blocks_for_readers, 2 * 63);
    drop(fs);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// The only copy of one block inside a cold read of several blocks is damaged. The worker that
/// reads it for the reader fails and drops it; the reader, claiming it, reads it itself, meets
/// the same damage and reports it. The blocks around it read right, the error log names the
/// file, and the workers go on serving later reads.
#[test]
fn a_damaged_block_under_a_cold_read_of_several_blocks_is_an_error_not_wrong_bytes() {
    const BLOCK: usize = 4 << 10;
    let dir = tempfile::tempdir().unwrap();
    let (pool, ino) = pool_with_file(dir.path(), "pfdamage", tiny());
    // Block 40 lies inside a 256 KiB read of blocks 16 to 79, and is not its first.
    let victim = 40;
    let extent = data_block_extent(&pool, ino, victim);
    pool.export().unwrap();
    damage(&dir.path().join("v0"), extent);
    let pool = import(dir.path(), "pfdamage", tiny());
    let fs = pool.file_system().expect("open fs");
    let data = pattern(11, FILE_BYTES);

    let error = fs
        .read(ino, (16 * BLOCK) as u64, 256 << 10)
        .expect_err("a read over the damaged block fails");
    assert!(
        error.to_string().contains("checksum"),
        "the error says what is wrong: {error}"
    );
    assert_eq!(fs.prefetch_stats().blocks_for_readers, 63);
    // The blocks on either side read right.
    let before = fs.read(ino, (16 * BLOCK) as u64, 24 * BLOCK).unwrap();
    assert!(before[..] == data[16 * BLOCK..40 * BLOCK]);
    let after = fs.read(ino, (41 * BLOCK) as u64, 39 * BLOCK).unwrap();
    assert!(after[..] == data[41 * BLOCK..80 * BLOCK]);
    // A read that starts at the damaged block (the reader's own first block) fails too.
    assert!(fs.read(ino, (victim * BLOCK) as u64, 64 << 10).is_err());
    assert!(
        !pool.core.error_entries().is_empty(),
        "the error log names the file"
    );
    // Another cold read of several blocks still goes through the workers, and is right.
    let handed = fs.prefetch_stats().blocks_for_readers;
    let elsewhere = fs.read(ino, 1 << 20, 256 << 10).unwrap();
    assert!(elsewhere[..] == data[1 << 20..(1 << 20) + (256 << 10)]);
    assert_eq!(fs.prefetch_stats().blocks_for_readers, handed + 63);
    drop(fs);
    pool.export().unwrap();
}
