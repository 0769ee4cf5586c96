//! Txg sync triggers and the write throttle, on a real pool: dirty data past
//! `dirty_data_sync_percent` starts a sync without waiting for the timer, and writers are
//! delayed as dirty data approaches `dirty_data_max`.

use crate::common;

use std::time::{Duration, Instant};

use tarn::block::blkptr::Compression;

use common::*;

#[test]
fn dirty_data_starts_a_sync_before_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut tunables = tiny();
    tunables.txg_timeout = 600;
    tunables.dirty_data_max = 16 << 20;
    let pool = create_pool(dir.path(), "dirty", single(dir.path(), "a.img"), tunables);
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Off);
    let before = pool.last_synced_txg();
    // 20% of 16 MiB is 3.2 MiB: write 6 MiB in small transactions.
    for chunk in 0..(6 << 20) / 65536u64 {
        let hold = pool.assign().unwrap();
        objset
            .write(&hold.tx(), object, chunk * 65536, &pattern(chunk, 65536))
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while pool.last_synced_txg() == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        pool.last_synced_txg() > before,
        "no sync started although dirty data passed its threshold"
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn writers_are_delayed_near_the_dirty_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut tunables = tiny();
    tunables.dirty_data_max = 4 << 20;
    tunables.dirty_data_sync_percent = 100;
    tunables.txg_timeout = 600;
    let pool = create_pool(
        dir.path(),
        "throttle",
        single(dir.path(), "a.img"),
        tunables,
    );
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Off);
    for chunk in 0..(12 << 20) / 65536u64 {
        let hold = pool.assign().unwrap();
        objset
            .write(&hold.tx(), object, chunk * 65536, &pattern(chunk, 65536))
            .unwrap();
    }
    let stats = pool.core.txgs.stats();
    assert!(stats.delays > 0, "no writer was delayed: {stats:?}");
    let mut data = vec![0u8; 65536];
    objset.read(object, 65536 * 100, &mut data).unwrap();
    assert_eq!(data, pattern(100, 65536));
    assert_clean(&pool);
    pool.export().unwrap();
}

/// Regression: changes that dirty no data block (here, removing an object) used to add no
/// dirty bytes, so the txg timer never synced them.
#[test]
fn a_lone_delete_is_synced_by_the_timer() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "timer", single(dir.path(), "a.img"), tiny());
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Off);
    pool.sync().unwrap();
    let before = pool.last_synced_txg();
    {
        let hold = pool.assign().unwrap();
        objset.remove_object(&hold.tx(), object).unwrap();
    }
    // txg_timeout is 1 s in the tiny configuration.
    let deadline = Instant::now() + Duration::from_secs(5);
    while pool.last_synced_txg() == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        pool.last_synced_txg() > before,
        "the timer did not sync a txg holding only a delete"
    );
    assert_clean(&pool);
    pool.export().unwrap();
}
