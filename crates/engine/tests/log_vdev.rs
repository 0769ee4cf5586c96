//! Separate log devices: a log vdev takes the intent log's blocks and
//! nothing else, keeps its class across export and import, can be added to a pool and
//! mirrored, and a pool whose log device is gone imports only with `-m`.

use crate::common;

use std::path::Path;

use tarn::pool::{CreateOptions, ImportOptions, Pool, PoolError, VdevLayout, VdevSpec};
use tarn::space::AllocClass;
use tarn::types::VdevId;
use tarn::vdev::VdevHealth;

use common::*;

const POOL: &str = "slog";

fn create_with_log(dir: &Path, log: Vec<VdevSpec>) -> Pool {
    Pool::create(CreateOptions {
        name: POOL.into(),
        vdevs: single(dir, "data.img"),
        log,
        cache: Vec::new(),
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: tiny(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })
    .expect("create pool with a log vdev")
}

/// Bytes written to each leaf whose path ends with `name`.
fn written_to(pool: &Pool, name: &str) -> u64 {
    pool.core
        .io
        .vdevs
        .leaves()
        .filter(|leaf| leaf.path.ends_with(name))
        .map(|leaf| leaf.stats.snapshot().write_bytes)
        .sum()
}

/// fsync 40 small and 4 large writes with txg syncs paused; returns the expected contents.
fn fsync_workload(fs: &tarn::fs::FileSystem, ino: u64) -> Vec<u8> {
    let mut expected = Vec::new();
    for index in 0..40u64 {
        let data = pattern(index, 4096);
        fs.write(ino, expected.len() as u64, &data).unwrap();
        expected.extend_from_slice(&data);
        fs.fsync(ino).unwrap();
    }
    for index in 0..4u64 {
        // Large enough to be written in place without a log device (zil_immediate_write_sz).
        let data = pattern(100 + index, 200_000);
        fs.write(ino, expected.len() as u64, &data).unwrap();
        expected.extend_from_slice(&data);
        fs.fsync(ino).unwrap();
    }
    expected
}

#[test]
fn the_log_device_takes_every_log_block_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.img");
    let pool = create_with_log(dir.path(), vec![VdevSpec::Leaf(log.clone())]);
    let tops = pool.core.io.vdevs.tops();
    assert_eq!(tops.len(), 2);
    assert_eq!(tops[1].class, AllocClass::Log);
    let log_size = pool.core.io.space.class_totals(AllocClass::Log).size;
    assert!(log_size > 0);
    assert!(
        pool.core.io.space.totals().size < 2 * log_size,
        "the pool's size counts only its data vdev"
    );

    let fs = open_fs(&pool);
    let ino = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    pool.sync().unwrap();
    let synced = pool.core.txgs.last_synced();
    let data_before = written_to(&pool, "data.img");
    let log_before = written_to(&pool, "log.img");
    let pause = pool.core.txgs.pause_syncs();
    let expected = fsync_workload(&fs, ino);
    assert_eq!(
        pool.core.txgs.last_synced(),
        synced,
        "an fsync waited for a txg"
    );
    // With a log device, even the large writes are copied into log blocks there: the data
    // vdev is not written at all until the txg syncs.
    assert_eq!(
        written_to(&pool, "data.img"),
        data_before,
        "an fsync wrote to the data vdev"
    );
    assert!(
        written_to(&pool, "log.img") - log_before >= expected.len() as u64,
        "the log device did not take the records"
    );
    drop(pause);
    drop(fs);
    pool.core.txgs.suspend("test crash".into());
    drop(pool);

    let pool = import(dir.path(), POOL, tiny());
    assert_eq!(
        pool.core.io.vdevs.top(VdevId(1)).unwrap().class,
        AllocClass::Log,
        "the class survives import"
    );
    let fs = open_fs(&pool);
    assert_eq!(read_all(&fs, ino), expected);
    // Bulk data never lands on the log vdev.
    let big = fs.create(fs.root(), b"big", 0o644, 0, 0).unwrap().ino;
    for index in 0..64u64 {
        fs.write(big, index * 131_072, &pattern(7_000 + index, 131_072))
            .unwrap();
    }
    pool.sync().unwrap();
    pool.sync().unwrap();
    let log_allocated = pool.core.io.space.class_totals(AllocClass::Log).allocated;
    assert!(
        log_allocated < 256 << 10,
        "{log_allocated} bytes allocated on the log vdev after 8 MiB of data"
    );
    pool.sync().unwrap();
    check_clean(&pool, "after replay from the log device");
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn a_log_vdev_added_later_and_mirrored_takes_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "data.img"), tiny());
    let a = dir.path().join("log-a.img");
    let b = dir.path().join("log-b.img");
    for path in [&a, &b] {
        tarn::vdev::FileDevice::create_sparse(path, VDEV_SIZE).unwrap();
    }
    let layout = VdevLayout {
        log: vec![VdevSpec::Mirror(vec![a.clone(), b.clone()])],
        ..VdevLayout::default()
    };
    // The dry run changes nothing.
    let planned = pool.add(&layout, false, true).unwrap();
    assert_eq!(planned.len(), 1);
    assert_eq!(planned[0].class, AllocClass::Log);
    assert!(!pool.core.io.space.has_log_vdevs());
    pool.add(&layout, false, false).unwrap();
    assert!(pool.core.io.space.has_log_vdevs());
    // A single log device beside a mirrored one is a mismatch, as zpool says.
    let c = dir.path().join("log-c.img");
    tarn::vdev::FileDevice::create_sparse(&c, VDEV_SIZE).unwrap();
    let single_log = VdevLayout {
        log: vec![VdevSpec::Leaf(c.clone())],
        ..VdevLayout::default()
    };
    let refused = pool.add(&single_log, false, false).unwrap_err().to_string();
    assert!(refused.contains("mismatched replication"), "{refused}");

    let fs = open_fs(&pool);
    let ino = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    pool.sync().unwrap();
    let before = (
        written_to(&pool, "log-a.img"),
        written_to(&pool, "log-b.img"),
    );
    let pause = pool.core.txgs.pause_syncs();
    let expected = fsync_workload(&fs, ino);
    let after = (
        written_to(&pool, "log-a.img"),
        written_to(&pool, "log-b.img"),
    );
    assert!(
        after.0 - before.0 >= expected.len() as u64,
        "side a: {before:?} {after:?}"
    );
    assert!(
        after.1 - before.1 >= expected.len() as u64,
        "side b: {before:?} {after:?}"
    );
    drop(pause);
    drop(fs);
    pool.core.txgs.suspend("test crash".into());
    drop(pool);

    // One side of the log mirror is enough to replay.
    std::fs::remove_file(&a).unwrap();
    let pool = import(dir.path(), POOL, tiny());
    let fs = open_fs(&pool);
    assert_eq!(read_all(&fs, ino), expected);
    assert_eq!(pool.core.io.vdevs.health(), VdevHealth::Degraded);
    pool.sync().unwrap();
    check_clean(&pool, "after replay from one side of the log mirror");
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn a_missing_log_device_imports_only_with_m() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.img");
    let pool = create_with_log(dir.path(), vec![VdevSpec::Leaf(log.clone())]);
    let fs = open_fs(&pool);
    let kept = fs.create(fs.root(), b"kept", 0o644, 0, 0).unwrap().ino;
    fs.write(kept, 0, &pattern(1, 10_000)).unwrap();
    pool.sync().unwrap();
    let logged = fs.create(fs.root(), b"logged", 0o644, 0, 0).unwrap().ino;
    pool.sync().unwrap();
    let pause = pool.core.txgs.pause_syncs();
    fs.write(logged, 0, &pattern(2, 50_000)).unwrap();
    fs.fsync(logged).unwrap();
    drop(pause);
    drop(fs);
    pool.core.txgs.suspend("test crash".into());
    drop(pool);
    std::fs::remove_file(&log).unwrap();

    let refused = Pool::import(POOL, ImportOptions::new(dirs(dir.path()), tiny()))
        .err()
        .expect("an import without the log device is refused");
    assert!(
        matches!(refused, PoolError::MissingLogVdev { .. }),
        "{refused}"
    );
    assert!(refused.to_string().contains("-m"), "{refused}");

    let mut options = ImportOptions::new(dirs(dir.path()), tiny());
    options.missing_log = true;
    let (pool, _) = Pool::import(POOL, options).expect("import -m");
    assert_eq!(pool.core.io.vdevs.health(), VdevHealth::Degraded);
    assert!(!pool.core.io.space.has_log_vdevs());
    let fs = open_fs(&pool);
    // What synced is there; the fsynced write was on the lost device: gone, never half.
    assert_eq!(read_all(&fs, kept), pattern(1, 10_000));
    let logged_now = read_all(&fs, logged);
    assert!(logged_now.is_empty(), "{} bytes replayed", logged_now.len());
    // fsync goes on without the log device, in the data vdev.
    let again = fs.create(fs.root(), b"again", 0o644, 0, 0).unwrap().ino;
    pool.sync().unwrap();
    let pause = pool.core.txgs.pause_syncs();
    fs.write(again, 0, &pattern(3, 4096)).unwrap();
    fs.fsync(again).unwrap();
    drop(pause);
    drop(fs);
    pool.core.txgs.suspend("test crash".into());
    drop(pool);
    let mut options = ImportOptions::new(dirs(dir.path()), tiny());
    options.missing_log = true;
    let (pool, _) = Pool::import(POOL, options).expect("import -m again");
    let fs = open_fs(&pool);
    assert_eq!(read_all(&fs, again), pattern(3, 4096));
    pool.sync().unwrap();
    check_clean(&pool, "after import -m");
    drop(fs);
    pool.export().unwrap();
}
