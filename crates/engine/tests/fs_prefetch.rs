//! Predictive prefetch through the file system on a real pool: a sequential reader, after an
//! export and import (so nothing is cached), gets the right bytes while prefetch workers read
//! ahead of it; random reads and `zfs_prefetch_disable=1` issue no prefetch; a cold read of
//! several blocks has the workers read all but its first. `check` is clean
//! afterwards.

mod common;

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
