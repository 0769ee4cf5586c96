//! The log space map on real pools: logs spanning many txgs survive power cuts
//! (the import replays them and `check`, which applies the unflushed changes to the maps,
//! comes back clean), export flushes everything, and `feature@log_spacemap=disabled` makes a
//! pool that writes every metaslab's map as before.
//!
//! The power cut is the fault layer's model (DESIGN.md §4): writes since the last flush are
//! kept, dropped or torn in any order. Before each cut, the flushing limits are raised so that
//! the log holds dozens of txgs, the case a replay bug would show in.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use tarn::block::blkptr::Compression;
use tarn::check::check_pool;
use tarn::pool::{CreateOptions, DeviceWrapper, ImportOptions, Pool};
use tarn::tunables::Tunables;
use tarn::types::ObjectId;
use tarn::vdev::{BlockDevice, FaultPlan, FaultyDevice};

use common::*;

const POOL: &str = "logsm";
const CHILD_ENV: &str = "TARN_LOGSM_CHILD_DIR";

/// Tiny, but with flushing limits far enough away that the log spans many txgs.
fn long_log() -> Tunables {
    Tunables {
        unflushed_log_txg_max: 400,
        unflushed_log_block_min: 4000,
        unflushed_log_block_max: 8000,
        unflushed_max_mem_amt: 64 << 20,
        ..tiny()
    }
}

fn create(dir: &Path, tunables: &Tunables, disabled: Vec<String>) -> Pool {
    Pool::create(CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: single(dir, "vdev.img"),
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: tunables.clone(),
        wrap_device: None,
        disabled_features: disabled,
    })
    .expect("create pool")
}

fn wrapper(plan: &Arc<FaultPlan>) -> DeviceWrapper {
    let plan = plan.clone();
    Arc::new(move |_path: &Path, device: Arc<dyn BlockDevice>| {
        Arc::new(FaultyDevice::new(device, plan.clone())) as Arc<dyn BlockDevice>
    })
}

/// One txg's worth of churn: rewrite a few objects with new lengths, so blocks are allocated
/// and freed all over the metaslabs.
fn churn(pool: &Pool, objects: &[ObjectId], rng: &mut rand::rngs::StdRng) {
    let objset = pool.root_objset();
    let hold = pool.assign().unwrap();
    let tx = hold.tx();
    for _ in 0..3 {
        let object = objects[rng.gen_range(0..objects.len())];
        let length = rng.gen_range(1..48_000);
        objset.free_range(&tx, object, 0, u64::MAX).unwrap();
        objset
            .write(&tx, object, 0, &pattern(rng.gen(), length))
            .unwrap();
    }
}

fn log_count(pool: &Pool) -> usize {
    pool.core
        .io
        .space
        .log_stats()
        .map_or(0, |stats| stats.logs.len())
}

#[test]
fn power_cuts_with_a_log_of_many_txgs_replay_clean() {
    let dir = tempfile::tempdir().unwrap();
    let tunables = long_log();
    let pool = create(dir.path(), &tunables, Vec::new());
    let objset = pool.root_objset();
    let objects: Vec<ObjectId> = (0..24)
        .map(|_| create_file(&pool, &objset, 4096, Compression::Off))
        .collect();
    drop(objset);
    pool.export().unwrap();
    let mut most_logs = 0;
    for round in 0..12u64 {
        let what = format!("round {round}");
        let plan = FaultPlan::new();
        plan.set_power_cut(0x15 + round);
        let mut options = ImportOptions::new(dirs(dir.path()), tunables.clone());
        options.wrap_device = Some(wrapper(&plan));
        let (pool, report) = Pool::import(POOL, options)
            .unwrap_or_else(|error| panic!("{what}: import after a power cut: {error}"));
        let check = check_pool(&pool, false).expect("check runs");
        assert!(
            check.is_clean(),
            "{what} (txg {}): check found problems: {check:#?}",
            report.txg
        );
        let mut rng = rand::rngs::StdRng::seed_from_u64(round);
        // Build up a log of many txgs, then let the power fail somewhere in the next ones.
        for _ in 0..30 {
            churn(&pool, &objects, &mut rng);
            pool.sync().unwrap();
        }
        most_logs = most_logs.max(log_count(&pool));
        if rng.gen_bool(0.5) {
            plan.stop_at_write(plan.write_count() + rng.gen_range(0..200));
        } else {
            plan.stop_at_flush(plan.flush_count() + rng.gen_range(0..12));
        }
        for _ in 0..10 {
            churn(&pool, &objects, &mut rng);
            if pool.sync().is_err() || plan.is_stopped() {
                break;
            }
        }
        plan.stop_now();
        drop(pool);
    }
    assert!(
        most_logs >= 20,
        "the log never spanned many txgs: at most {most_logs} logs"
    );
    let pool = import(dir.path(), POOL, tunables.clone());
    assert!(log_count(&pool) > 1, "import found no logs to replay");
    assert_clean(&pool);
    pool.export().unwrap();
}

/// The child of the kill -9 test: import, churn a txg at a time until killed.
#[test]
fn kill9_child_entry() {
    // Runs only when the parent test re-executes this binary as the child.
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let pool = import(&dir, POOL, long_log());
    let objects: Vec<ObjectId> = std::fs::read_to_string(dir.join("objects"))
        .unwrap()
        .split_whitespace()
        .map(|id| ObjectId(id.parse().unwrap()))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(std::process::id() as u64);
    loop {
        churn(&pool, &objects, &mut rng);
        pool.sync().unwrap();
    }
}

/// kill -9 of a process writing to a pool whose log spans many txgs (limits raised): each
/// import replays the logs, `check` (which replays them again from disk) is clean, and the
/// logs kept across the kills grow well past a handful.
#[test]
fn kill9_with_a_log_of_many_txgs_replays_clean() {
    let dir = tempfile::tempdir().unwrap();
    let tunables = long_log();
    let pool = create(dir.path(), &tunables, Vec::new());
    let objset = pool.root_objset();
    let objects: Vec<ObjectId> = (0..24)
        .map(|_| create_file(&pool, &objset, 4096, Compression::Off))
        .collect();
    drop(objset);
    pool.export().unwrap();
    let ids: Vec<String> = objects.iter().map(|object| object.0.to_string()).collect();
    std::fs::write(dir.path().join("objects"), ids.join(" ")).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);
    let mut most_logs = 0;
    for round in 0..10 {
        run_child_then_kill(
            module_path!(),
            "kill9_child_entry",
            &[(CHILD_ENV, dir.path().display().to_string())],
            std::time::Duration::from_millis(rng.gen_range(200..900)),
        );
        // Read-only first: what the crash left, before an import's own txg changes it.
        let mut options = ImportOptions::new(dirs(dir.path()), tunables.clone());
        options.readonly = true;
        let (pool, report) = Pool::import(POOL, options)
            .unwrap_or_else(|error| panic!("round {round}: import after kill -9: {error}"));
        most_logs = most_logs.max(log_count(&pool));
        let check = check_pool(&pool, false).expect("check runs");
        assert!(
            check.is_clean(),
            "round {round} (txg {}): check found problems: {check:#?}",
            report.txg
        );
        drop(pool);
    }
    assert!(most_logs >= 10, "at most {most_logs} logs were replayed");
    let pool = import(dir.path(), POOL, tunables);
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn export_flushes_every_metaslab_and_import_finds_one_log() {
    let dir = tempfile::tempdir().unwrap();
    let tunables = long_log();
    let pool = create(dir.path(), &tunables, Vec::new());
    let objset = pool.root_objset();
    let objects: Vec<ObjectId> = (0..16)
        .map(|_| create_file(&pool, &objset, 4096, Compression::Off))
        .collect();
    drop(objset);
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);
    for _ in 0..20 {
        churn(&pool, &objects, &mut rng);
        pool.sync().unwrap();
    }
    assert!(log_count(&pool) >= 3, "{} logs", log_count(&pool));
    pool.export().unwrap();
    let pool = import(dir.path(), POOL, tunables.clone());
    // The export txg's own log, and the one of the txg the import syncs to mark the pool active.
    assert!(
        log_count(&pool) <= 2,
        "{} logs after export",
        log_count(&pool)
    );
    let stats = pool.core.io.space.stats();
    // Only the export txg's own changes can be unflushed, and the import's first sync.
    let unflushed: u64 = stats
        .iter()
        .flat_map(|vdev| vdev.metaslabs.iter())
        .map(|row| row.unflushed_allocated_bytes + row.unflushed_freed_bytes)
        .sum();
    assert!(
        unflushed < 1 << 20,
        "{unflushed} bytes unflushed after export"
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn a_pool_without_the_feature_writes_each_metaslab_map() {
    let dir = tempfile::tempdir().unwrap();
    let tunables = tiny();
    let pool = create(dir.path(), &tunables, vec!["log_spacemap".into()]);
    assert!(!pool.core.io.space.log_enabled());
    // Turning it on later would need every map rewritten: refused, the pool unchanged.
    match pool.set_pool_property("feature@log_spacemap", "enabled") {
        Err(tarn::pool::PoolError::BadProperty(why)) => {
            assert!(why.contains("when the pool is created"), "{why}")
        }
        other => panic!("enabling the log later: {other:?}"),
    }
    let objset = pool.root_objset();
    let objects: Vec<ObjectId> = (0..8)
        .map(|_| create_file(&pool, &objset, 4096, Compression::Off))
        .collect();
    drop(objset);
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for _ in 0..5 {
        churn(&pool, &objects, &mut rng);
        pool.sync().unwrap();
    }
    assert!(pool.core.io.space.log_stats().is_none());
    let history = pool.txg_history();
    assert!(history.iter().all(|row| row.space.log_writes == 0));
    assert!(history.iter().any(|row| row.space.spacemap_writes > 0));
    pool.export().unwrap();
    let pool = import(dir.path(), POOL, tunables);
    assert!(!pool.core.io.space.log_enabled(), "the feature came back");
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn new_pools_have_the_feature_and_count_log_writes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create(dir.path(), &tiny(), Vec::new());
    assert!(pool.core.io.space.log_enabled());
    let feature = pool
        .pool_properties()
        .unwrap()
        .into_iter()
        .find(|property| property.name == "feature@log_spacemap")
        .expect("feature@log_spacemap listed");
    assert_ne!(
        format!("{:?}", feature.value),
        format!(
            "{:?}",
            tarn::pool::props::PoolValue::Text("disabled".into())
        )
    );
    let objset = pool.root_objset();
    let objects: Vec<ObjectId> = (0..8)
        .map(|_| create_file(&pool, &objset, 4096, Compression::Off))
        .collect();
    drop(objset);
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    for _ in 0..5 {
        churn(&pool, &objects, &mut rng);
        pool.sync().unwrap();
    }
    // `log_writes` is the log's share of `spacemap_writes` (every log block is counted in
    // both), so `log_writes <= spacemap_writes`, which this test once asserted, cannot fail.
    // What can: a txg that flushed metaslabs wrote their maps' tails and the unflushed-txg
    // array besides its log, and those are not log blocks.
    let history = pool.txg_history();
    assert!(history.iter().any(|row| row.space.log_writes > 0));
    let flushing: Vec<_> = history
        .iter()
        .filter(|row| row.space.ms_flushed > 0 && row.space.log_writes > 0)
        .collect();
    assert!(!flushing.is_empty(), "no txg flushed a metaslab");
    for row in flushing {
        assert!(
            row.space.spacemap_writes > row.space.log_writes,
            "txg {}: {} space-map blocks, {} of them the log's, {} metaslabs flushed",
            row.txg,
            row.space.spacemap_writes,
            row.space.log_writes,
            row.space.ms_flushed
        );
    }
    assert_clean(&pool);
    pool.export().unwrap();
}
