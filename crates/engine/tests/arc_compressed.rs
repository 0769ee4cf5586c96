//! The compressed ARC (cache/mod.rs): compressed blocks are kept as stored,
//! so a compressible working set larger than `arc_max` as contents but smaller as stored is
//! served from the ARC, every read a hit, where the ARC keeping contents
//! (`compressed_arc_enabled` = 0) misses; the sizes say so (`compressed_size`,
//! `uncompressed_size`, `overhead_size`), and a block of a dataset without compression is
//! kept once, at its size.

use crate::common;

use tarn::cache::BlockCacheStats;
use tarn::pool::Pool;
use tarn::tunables::Tunables;

use common::*;

const POOL: &str = "arcpool";
const ARC_MAX: u64 = 8 << 20;
const RECORD: usize = 16 << 10;

/// An 8 MiB ARC that does not move (c_min = c_max), no prefetch (every read is a demand read),
/// 16 KiB records.
fn tunables(compressed_arc: bool) -> Tunables {
    Tunables {
        arc_max: ARC_MAX,
        arc_min: ARC_MAX,
        recordsize: RECORD as u32,
        zfs_prefetch_disable: 1,
        compressed_arc_enabled: u32::from(compressed_arc),
        ..tiny()
    }
}

/// `size` bytes that lz4 stores in about a third: 16 random bytes then 48 zeros, over and
/// over.
fn compressible(size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 64);
    for chunk in pattern(3, size / 4 + 16).chunks(16) {
        out.extend_from_slice(chunk);
        out.extend_from_slice(&[0u8; 48]);
    }
    out.truncate(size);
    out
}

/// Write `data` as one file of the pool's root file system (compression as the dataset's
/// property), sync, and return its inode.
fn write_file(pool: &Pool, fs: &tarn::fs::FileSystem, data: &[u8]) -> u64 {
    let ino = fs
        .create(fs.root(), b"working-set", 0o644, 0, 0)
        .unwrap()
        .ino;
    for (index, chunk) in data.chunks(1 << 20).enumerate() {
        fs.write(ino, (index << 20) as u64, chunk).unwrap();
    }
    pool.sync().unwrap();
    ino
}

/// Read the file record by record, checking every record; the ARC's counters after.
fn read_records(pool: &Pool, fs: &tarn::fs::FileSystem, ino: u64, data: &[u8]) -> BlockCacheStats {
    for (index, expected) in data.chunks(RECORD).enumerate() {
        let got = fs.read(ino, (index * RECORD) as u64, RECORD).unwrap();
        assert!(got == expected, "record {index} reads back wrong");
    }
    pool.arc_stats()
}

/// The demand data misses of `after` since `before`.
fn data_misses(before: &BlockCacheStats, after: &BlockCacheStats) -> u64 {
    after.counters.demand_data_misses - before.counters.demand_data_misses
}

fn assert_consistent(stats: &BlockCacheStats) {
    assert!(
        stats.compressed_size <= stats.uncompressed_size,
        "{stats:?}"
    );
    assert_eq!(
        stats.size_bytes,
        stats.compressed_size + stats.overhead_size
    );
    assert_eq!(stats.size_bytes, stats.data_size + stats.metadata_size);
    assert!(stats.size_bytes <= stats.c_max);
}

/// Write a 12 MiB file (one and a half times the ARC) that lz4 stores in about 4 MiB, then
/// read it once warm (as the write left the ARC), once cold and once more; the demand data misses of each pass and the last stats.
fn working_set(compressed_arc: bool) -> (u64, u64, u64, BlockCacheStats) {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(
        dir.path(),
        POOL,
        single(dir.path(), "data.img"),
        tunables(compressed_arc),
    );
    pool.set_property(POOL, "compression", Some("lz4")).unwrap();
    let fs = pool.open_file_system(POOL).unwrap();
    let data = compressible(12 << 20);
    let ino = write_file(&pool, &fs, &data);
    // The sync kept what it wrote: as stored with the compressed ARC.
    let start = pool.arc_stats();
    let written = read_records(&pool, &fs, ino, &data);
    pool.core.io.cache().clear();
    let cleared = pool.arc_stats();
    let first = read_records(&pool, &fs, ino, &data);
    let second = read_records(&pool, &fs, ino, &data);
    assert_consistent(&second);
    if !compressed_arc {
        assert_eq!(second.compressed_size, second.uncompressed_size);
        assert_eq!(second.overhead_size, 0);
        assert_eq!(second.counters.decompressed, 0);
    }
    (
        data_misses(&start, &written),
        data_misses(&cleared, &first),
        data_misses(&first, &second),
        second,
    )
}

#[test]
fn a_compressible_working_set_larger_than_the_arc_stays_all_hits_when_kept_compressed() {
    let records = (12 << 20) / RECORD as u64;
    let (written, first, second, stats) = working_set(true);
    assert_eq!(written, 0, "the write path kept every record (as stored)");
    assert_eq!(first, records, "a cold read misses every record");
    assert_eq!(second, 0, "the second read hits every record");
    assert!(
        stats.uncompressed_size > ARC_MAX && stats.compressed_size < ARC_MAX * 2 / 3,
        "{stats:?}"
    );
    assert_eq!(stats.counters.evicted, 0);
    assert!(stats.counters.decompressed >= 2 * records);

    let (written, first, second, stats) = working_set(false);
    assert!(written > records / 4, "only {written} of {records} missed");
    assert_eq!(first, records);
    // A loop over more than the cache: the ARC keeps what it can of it and no more.
    assert!(second > records / 4, "only {second} of {records} missed");
    assert!(stats.counters.evicted > 0);
}

#[test]
fn without_compression_a_block_is_kept_once_at_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(
        dir.path(),
        POOL,
        single(dir.path(), "data.img"),
        tunables(true),
    );
    pool.set_property(POOL, "compression", Some("off")).unwrap();
    let fs = pool.open_file_system(POOL).unwrap();
    let data = compressible(2 << 20);
    let ino = write_file(&pool, &fs, &data);
    pool.core.io.cache().clear();
    let before = pool.arc_stats();
    let after = read_records(&pool, &fs, ino, &data);
    let records = data_misses(&before, &after);
    assert_eq!(records, (2 << 20) / RECORD as u64);
    assert_consistent(&after);
    // Data blocks are kept as they are, at their logical size, never decompressed; only
    // metadata (always compressed) is kept smaller than its contents.
    assert_eq!(after.data_size, records * RECORD as u64);
    assert_eq!(after.counters.decompressed, 0);
    assert!(after.uncompressed_size - after.compressed_size <= after.metadata_size * 16);
    check_clean(&pool, "after the reads");
}
