//! Power cuts during a RAID-Z expansion (DESIGN.md §4 "Crash model": every write since the last
//! flush is kept, dropped or torn): the attach, the scratch phase and the copy's batches are
//! cut at random writes and flushes; each import after the cut reads every file written before
//! the expansion began, resumes the copy and finishes it, and `check` is clean. A copy batch
//! counted before it is durable, or one that overwrites an old place the last uberblock still
//! reads, loses data here. `TARN_POWER_CUT_SEED` sets the base seed.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use tarn::check::check_pool;
use tarn::pool::{CreateOptions, DeviceWrapper, ImportOptions, Pool, VdevSpec};
use tarn::vdev::{BlockDevice, FaultPlan, FaultyDevice};

use common::*;

const POOL: &str = "reflowcut";
const FILE_BYTES: usize = 1 << 20;
const ROUNDS: u64 = 8;

fn wrapper(plan: &Arc<FaultPlan>) -> DeviceWrapper {
    let plan = plan.clone();
    Arc::new(move |_path: &Path, device: Arc<dyn BlockDevice>| {
        Arc::new(FaultyDevice::new(device, plan.clone())) as Arc<dyn BlockDevice>
    })
}

fn import_with(dir: &Path, wrap: Option<DeviceWrapper>) -> Pool {
    let mut options = ImportOptions::new(dirs(dir), tiny());
    options.wrap_device = wrap;
    Pool::import(POOL, options)
        .unwrap_or_else(|error| panic!("import after a power cut failed: {error}"))
        .0
}

/// One round; whether a cut left the copy midway (started, not finished).
fn round(seed: u64) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::create(CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Raidz {
            parity: 1,
            paths: (0..4)
                .map(|child| dir.path().join(format!("d{child}.img")))
                .collect(),
        }],
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: tiny(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })
    .unwrap();
    let files = write_files(&pool, seed * 100, 24, FILE_BYTES);
    pool.export().unwrap();
    let new = dir.path().join("d4.img");
    std::fs::File::create(&new)
        .unwrap()
        .set_len(VDEV_SIZE)
        .unwrap();

    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // Cut the power once or twice in a row: a cut while an import resumes the copy too.
    let cuts = rng.gen_range(1..=2);
    for cut in 0..cuts {
        let plan = FaultPlan::new();
        plan.set_power_cut(seed * 10 + cut);
        let pool = import_with(dir.path(), Some(wrapper(&plan)));
        if rng.gen_bool(0.5) {
            plan.stop_at_write(plan.write_count() + rng.gen_range(0..1500));
        } else {
            plan.stop_at_flush(plan.flush_count() + rng.gen_range(0..60));
        }
        let expanding = pool.core.io.vdevs.tops()[0].children.len() == 5;
        let attached = if expanding {
            None
        } else {
            Some(pool.attach("raidz1-0", &new, false))
        };
        let waited = pool.wait_raidz_expansion();
        log::debug!("seed {seed} cut {cut}: attach {attached:?}, wait {waited:?}");
        plan.stop_now();
        drop(pool);
    }
    // Read-only first (no copy thread): where the cuts left the copy, and every file reads.
    let mut options = ImportOptions::new(dirs(dir.path()), tiny());
    options.readonly = true;
    let readonly = Pool::import(POOL, options)
        .unwrap_or_else(|error| panic!("seed {seed}: read-only import after the cuts: {error}"))
        .0;
    let midway = readonly
        .raidz_expansion()
        .is_some_and(|status| !status.finished && status.reflowed > 0);
    let what = format!("seed {seed}, read-only after the cuts");
    assert_files_read_right(&readonly, &files, FILE_BYTES, &what);
    drop(readonly);
    let pool = import_with(dir.path(), None);
    let what = format!("seed {seed}, after the cuts");
    assert_files_read_right(&pool, &files, FILE_BYTES, &what);
    if pool.core.io.vdevs.tops()[0].children.len() == 4 {
        // The attach never committed: do it now.
        pool.attach("raidz1-0", &new, true).unwrap();
    }
    pool.wait_raidz_expansion().unwrap();
    assert_eq!(pool.core.io.vdevs.tops()[0].children.len(), 5);
    assert!(!pool.core.io.vdevs.tops()[0].raidz_expanding());
    assert_files_read_right(&pool, &files, FILE_BYTES, &format!("seed {seed}, expanded"));
    let report = check_pool(&pool, false).unwrap();
    assert!(report.is_clean(), "seed {seed}: {report:#?}");
    pool.export().unwrap();
    midway
}

#[test]
fn power_cuts_during_an_expansion_lose_nothing() {
    let base: u64 = std::env::var("TARN_POWER_CUT_SEED")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(0x4e5);
    println!("power-cut base seed {base} (TARN_POWER_CUT_SEED)");
    let midway = (0..ROUNDS).filter(|index| round(base + index)).count();
    println!("{midway} of {ROUNDS} rounds cut the copy midway");
    assert!(midway >= 2, "only {midway} rounds cut the copy midway");
}
