//! What reads leave in the ARC: the `primarycache` property (all, metadata, none) and the
//! send path, which reads data past the cache so that a whole dataset read once does not
//! evict the working set (cache::CachePolicy, BlockIo::read_cached).

use crate::common;

use tarn::cache::CachePolicy;
use tarn::fs::FileSystem;
use tarn::pool::Pool;
use tarn::send::{send, SendOptions};
use tarn::tunables::Tunables;

use common::*;

const POOL: &str = "pcache";
const FILE_BYTES: usize = 4 << 20;

/// A pool whose ARC can hold the file several times over.
fn roomy_cache() -> Tunables {
    Tunables {
        arc_max: 64 << 20,
        ..tiny()
    }
}

fn data_cached(pool: &Pool) -> u64 {
    pool.arc_stats().data_size
}

/// Read the whole file with the cache emptied first; the data bytes the ARC holds afterwards.
fn cold_read(pool: &Pool, fs: &FileSystem, ino: u64) -> u64 {
    pool.core.io.cache().clear();
    let data = fs.read(ino, 0, FILE_BYTES).unwrap();
    assert_eq!(data, pattern(3, FILE_BYTES), "the file reads back wrong");
    data_cached(pool)
}

#[test]
fn primarycache_decides_what_reads_keep_and_send_keeps_no_data() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(
        dir.path(),
        POOL,
        single(dir.path(), "vdev.img"),
        roomy_cache(),
    );
    let fs = open_fs(&pool);
    let ino = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, &pattern(3, FILE_BYTES)).unwrap();
    pool.sync().unwrap();

    let all = cold_read(&pool, &fs, ino);
    assert!(
        all >= FILE_BYTES as u64 / 2,
        "primarycache=all kept only {all} bytes of data"
    );
    for policy in [CachePolicy::Metadata, CachePolicy::None] {
        fs.set_primarycache(policy);
        let kept = cold_read(&pool, &fs, ino);
        assert!(
            kept < 64 << 10,
            "primarycache={policy:?} kept {kept} bytes of data"
        );
    }
    fs.set_primarycache(CachePolicy::All);
    assert!(cold_read(&pool, &fs, ino) >= FILE_BYTES as u64 / 2);

    // What a sync writes is kept only as the policy admits, too.
    let written = fs.create(fs.root(), b"g", 0o644, 0, 0).unwrap().ino;
    for (policy, at_least, below) in [
        (CachePolicy::Metadata, 0, 64 << 10),
        (CachePolicy::All, FILE_BYTES as u64 / 2, u64::MAX),
    ] {
        fs.set_primarycache(policy);
        pool.core.io.cache().clear();
        fs.write(written, 0, &pattern(4, FILE_BYTES)).unwrap();
        pool.sync().unwrap();
        let kept = data_cached(&pool);
        assert!(
            kept >= at_least && kept < below,
            "primarycache={policy:?}: a sync of {FILE_BYTES} bytes left {kept} bytes of data"
        );
    }
    fs.set_primarycache(CachePolicy::All);

    // A full send reads every block once, past the cache.
    pool.create_snapshots(&[format!("{POOL}@s")], false)
        .unwrap();
    pool.core.io.cache().clear();
    let mut stream = Vec::new();
    send(
        &pool,
        &format!("{POOL}@s"),
        &SendOptions::default(),
        &mut stream,
        &mut |_| {},
    )
    .unwrap();
    assert!(stream.len() >= FILE_BYTES, "the stream is too short");
    let after_send = data_cached(&pool);
    assert!(
        after_send < 64 << 10,
        "a send left {after_send} bytes of data in the ARC"
    );
    check_clean(&pool);
}

fn check_clean(pool: &Pool) {
    let report = tarn::check::check_pool(pool, false).expect("check runs");
    assert!(report.is_clean(), "check found problems: {report:#?}");
}
