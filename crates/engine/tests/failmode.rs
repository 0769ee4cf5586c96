//! The `failmode` pool property and `pool clear` on a suspended pool. The
//! property is kept in the pool (it survives export and import) and is refused with a clear
//! error for a bad value; when every write fails the pool suspends, the failure is visible to
//! the holder (which acts on failmode), reads go on, and clearing the errors says plainly that
//! the pool stays suspended instead of pretending to resume it.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use tarn::block::blkptr::Compression;
use tarn::pool::failmode::FailMode;
use tarn::pool::{CreateOptions, Pool};
use tarn::vdev::FaultPlan;

use common::*;

const POOL: &str = "failing";

fn faulty_pool(dir: &Path, plan: Arc<FaultPlan>) -> Pool {
    let wrap = fault_wrapper(plan);
    Pool::create(CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: single(dir, "vdev.img"),
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: tiny(),
        wrap_device: Some(wrap),
        disabled_features: Vec::new(),
    })
    .unwrap()
}

fn failmode_property(pool: &Pool) -> (String, &'static str) {
    let property = pool
        .pool_properties_named(&["failmode".to_string()])
        .unwrap()
        .remove(0);
    match property.value {
        tarn::pool::props::PoolValue::Text(text) => (text, property.source),
        other => panic!("failmode is {other:?}"),
    }
}

#[test]
fn failmode_is_kept_in_the_pool_and_a_suspended_pool_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let pool = faulty_pool(dir.path(), plan.clone());
    assert_eq!(failmode_property(&pool), ("wait".to_string(), "default"));
    assert!(pool.set_pool_property("failmode", "halt").is_err());
    pool.set_pool_property("failmode", "panic").unwrap();
    assert_eq!(pool.core.failmode(), FailMode::Panic);
    pool.export().unwrap();

    let pool = import(dir.path(), POOL, tiny());
    assert_eq!(failmode_property(&pool), ("panic".to_string(), "local"));
    // Set back to the default value, it is still a local setting.
    pool.set_pool_property("failmode", "wait").unwrap();
    assert_eq!(failmode_property(&pool), ("wait".to_string(), "local"));
    pool.set_pool_property("failmode", "continue").unwrap();
    pool.export().unwrap();
    let pool = import(dir.path(), POOL, tiny());
    assert_eq!(pool.core.failmode(), FailMode::Continue);
    assert!(pool.core.txgs.failure().is_none());
    pool.export().unwrap();

    // Every write fails: the sync fails and the pool suspends; reads go on.
    let pool = faulty_pool_reopened(dir.path(), plan.clone());
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Lz4);
    pool.sync().unwrap();
    plan.fail_writes_from(plan.write_count());
    let hold = pool.assign().unwrap();
    objset
        .write(&hold.tx(), object, 0, &pattern(7, 20_000))
        .unwrap();
    drop(hold);
    assert!(pool.sync().is_err(), "a sync with every write failing");
    assert!(pool.core.txgs.failure().is_some());
    assert!(
        pool.assign().is_err(),
        "a suspended pool takes no new changes"
    );
    let mut buffer = vec![0u8; 16];
    objset.read(object, 0, &mut buffer).unwrap();
    let error = pool.core.clear_errors(None).unwrap_err().to_string();
    assert!(error.contains("stays suspended"), "{error}");
    drop(objset);
    pool.abandon();
}

/// The pool of the test imported again through the fault layer.
fn faulty_pool_reopened(dir: &Path, plan: Arc<FaultPlan>) -> Pool {
    let mut options = tarn::pool::ImportOptions::new(dirs(dir), tiny());
    options.wrap_device = Some(fault_wrapper(plan));
    Pool::import(POOL, options).unwrap().0
}
