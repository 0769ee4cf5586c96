//! Background destroy on a real pool on sparse files: destroy returns at once, the space comes
//! back over bounded txgs with no user action, `check` stays clean at every point (blocks still
//! queued count as allocated, not leaked), and a destroy interrupted by export or by kill -9
//! resumes after import and finishes.
//!
//! Guards a bug: a destroy collected every block pointer of the dataset into
//! memory and freed them all in one sync, one very long txg with memory growing with the
//! dataset.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tarn::fs::FileSystem;
use tarn::pool::Pool;
use tarn::tunables::Tunables;

/// Blocks freed per txg in these tests, so that a destroy takes many txgs.
const BLOCKS_PER_TXG: u64 = 40;

fn tunables() -> Tunables {
    Tunables {
        async_block_max_blocks: BLOCKS_PER_TXG,
        ..tiny()
    }
}

fn fill(fs: &FileSystem, files: usize, bytes_each: usize) {
    for file in 0..files {
        let attr = fs
            .create(fs.root(), format!("f{file}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        fs.write(attr.ino, 0, &pattern(file as u64 + 1, bytes_each))
            .unwrap();
    }
}

fn allocated(pool: &Pool) -> u64 {
    pool.core.io.space.totals().allocated
}

/// Make a pool with a child dataset holding `files` files; returns the pool and the space the
/// pool had allocated before the child was filled.
fn pool_with_full_child(dir: &std::path::Path, files: usize) -> (Pool, u64) {
    let pool = create_pool(dir, "tank", single(dir, "v0"), tunables());
    pool.create_dataset("tank/big", &[("compression".into(), "off".into())], false)
        .unwrap();
    pool.sync().unwrap();
    pool.sync().unwrap();
    let baseline = allocated(&pool);
    {
        let fs = pool.open_file_system("tank/big").unwrap();
        fill(&fs, files, 64 << 10);
    }
    pool.sync().unwrap();
    (pool, baseline)
}

fn wait_until_freed(pool: &Pool, limit: Duration) -> u32 {
    let started = Instant::now();
    let mut checks = 0;
    while pool.core.freeing_bytes().unwrap() > 0 || pool.core.background_work_pending() {
        assert!(
            started.elapsed() < limit,
            "background destroy did not finish in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
        checks += 1;
    }
    checks
}

/// Check the pool mid-destroy, let the destroy finish, and check that the space came back.
fn finish_and_verify(pool: Pool, baseline: u64) {
    assert_clean(&pool);
    wait_until_freed(&pool, Duration::from_secs(60));
    pool.sync().unwrap();
    pool.sync().unwrap();
    assert!(allocated(&pool) <= baseline + (256 << 10));
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn destroy_returns_at_once_and_the_space_comes_back_over_bounded_txgs() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, baseline) = pool_with_full_child(dir.path(), 24);
    let full = allocated(&pool);
    assert!(full > baseline + (1 << 20));
    let txg_before = pool.last_synced_txg();

    pool.destroy_dataset("tank/big", false).unwrap();
    assert_eq!(pool.datasets().len(), 1, "the name is gone at once");
    let freeing = pool.core.freeing_bytes().unwrap();
    // Most of the data (a background txg may already have freed its first blocks; indirect
    // blocks are compressed, so metadata adds little).
    assert!(freeing >= 20 * (64 << 10), "freeing {freeing}");

    // Part-way: check counts the queued blocks as allocated (not leaked).
    assert_clean(&pool);
    wait_until_freed(&pool, Duration::from_secs(60));
    let txgs = pool.last_synced_txg().0 - txg_before.0;
    // 24 files of 16 blocks (4 KiB records) at 40 blocks a txg: about ten txgs at least.
    assert!(txgs >= 8, "the destroy took only {txgs} txgs");
    for _ in 0..3 {
        pool.sync().unwrap();
    }
    assert!(
        allocated(&pool) <= baseline + (256 << 10),
        "space came back: baseline {baseline}, full {full}, now {}",
        allocated(&pool)
    );
    assert_clean(&pool);

    // Idle again: once the queue is empty (and the deferred frees it left are carried out by
    // a few timer syncs), no more uberblocks are written.
    let started = Instant::now();
    let mut settled = pool.core.last_committed_txg();
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_secs(3) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the pool never went idle after the destroy"
        );
        std::thread::sleep(Duration::from_millis(100));
        let now = pool.core.last_committed_txg();
        if now != settled {
            settled = now;
            since = Instant::now();
        }
    }
    pool.export().unwrap();
}

#[test]
fn a_destroy_interrupted_by_export_resumes_after_import() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, baseline) = pool_with_full_child(dir.path(), 30);
    pool.destroy_dataset("tank/big", false).unwrap();
    pool.export().unwrap();

    let pool = import(dir.path(), "tank", tunables());
    let freeing = pool.core.freeing_bytes().unwrap();
    assert!(freeing > 0, "export came before the destroy finished");
    finish_and_verify(pool, baseline);
}

/// The child of the kill -9 test (does nothing unless that test runs it): destroy, then keep
/// the pool open until killed.
#[test]
fn child_destroys_then_waits_to_be_killed() {
    let Ok(dir) = std::env::var("TARN_TEST_DIR") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let pool = import(&dir, "tank", tunables());
    pool.destroy_dataset("tank/big", false).unwrap();
    std::fs::write(dir.join("destroy-returned"), b"1").unwrap();
    loop {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_destroy_killed_mid_way_resumes_after_import() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, baseline) = pool_with_full_child(dir.path(), 40);
    pool.export().unwrap();
    let marker = dir.path().join("destroy-returned");
    let child = spawn_child(
        module_path!(),
        "child_destroys_then_waits_to_be_killed",
        &[("TARN_TEST_DIR", dir.path().display().to_string())],
    );
    wait_for_file(&marker, Duration::from_secs(60));
    kill_child(child);

    let pool = import(dir.path(), "tank", tunables());
    assert!(pool.datasets().iter().all(|info| info.name != "tank/big"));
    let freeing = pool.core.freeing_bytes().unwrap();
    assert!(freeing > 0, "the kill came after the destroy had finished");
    finish_and_verify(pool, baseline);
}
