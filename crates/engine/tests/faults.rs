//! Torn and lost writes through the fault-injecting I/O layer, damaged copies, and bad input.
//! After each fault the pool must import at a consistent txg (check clean) with everything that
//! was synced before the fault intact. Crashes are power cuts: the fault layer models the
//! devices' volatile write cache, so at the stop point each write since the last flush is
//! kept, dropped or torn, in any order (`FaultPlan::set_power_cut`; the seed is printed).

use crate::common;

use std::path::Path;
use std::sync::Arc;

use tarn::block::blkptr::Compression;
use tarn::check::check_pool;
use tarn::pool::{CreateOptions, ImportOptions, Pool, PoolError, VdevSpec};
use tarn::types::ObjectId;
use tarn::vdev::{BlockDevice, FaultPlan, FaultyDevice};

use common::*;

fn faulty_pool(dir: &Path, plan: Arc<FaultPlan>) -> Pool {
    let wrap: tarn::pool::DeviceWrapper =
        Arc::new(move |_path: &Path, device: Arc<dyn BlockDevice>| {
            Arc::new(FaultyDevice::new(device, plan.clone())) as Arc<dyn BlockDevice>
        });
    Pool::create(CreateOptions {
        name: "faulty".into(),
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

fn write_generation(pool: &Pool, object: ObjectId, generation: u64) {
    let objset = pool.root_objset();
    let hold = pool.assign().unwrap();
    objset
        .write(&hold.tx(), object, 0, &pattern(generation, 50_000))
        .unwrap();
}

fn read_generation(pool: &Pool, object: ObjectId) -> Vec<u8> {
    let mut data = vec![0u8; 50_000];
    pool.root_objset().read(object, 0, &mut data).unwrap();
    data
}

/// Write and sync generation 1; arm the fault; write generation 2 and try to sync; cut the
/// power (if the fault did not already) and drop the pool as a crash would. The re-imported
/// pool must hold generation 1 or 2, whole.
fn survive(seed: u64, arm: impl Fn(&FaultPlan)) {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let pool = faulty_pool(dir.path(), plan.clone());
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Lz4);
    write_generation(&pool, object, 1);
    pool.sync().unwrap();
    plan.set_power_cut(seed);
    arm(&plan);
    write_generation(&pool, object, 2);
    let _ = pool.sync();
    plan.stop_now();
    drop(objset);
    drop(pool);

    let (pool, report) = Pool::import("faulty", ImportOptions::new(dirs(dir.path()), tiny()))
        .unwrap_or_else(|error| panic!("power-cut seed {seed}: import after fault: {error}"));
    let data = read_generation(&pool, object);
    assert!(
        data == pattern(1, 50_000) || data == pattern(2, 50_000),
        "power-cut seed {seed}: object holds neither generation (import at txg {})",
        report.txg
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn lost_writes_at_every_point_of_a_sync() {
    for lost_from in 0..40 {
        survive(lost_from, |plan| {
            plan.stop_at_write(plan.write_count() + lost_from)
        });
    }
}

#[test]
fn torn_writes_at_every_point_of_a_sync() {
    for torn in 0..40 {
        survive(100 + torn, |plan| {
            plan.tear_write(plan.write_count() + torn, 1)
        });
    }
}

#[test]
fn failing_writes_suspend_the_pool_and_it_imports_afterwards() {
    for failing_from in [0, 3, 10] {
        survive(200 + failing_from, |plan| {
            plan.fail_writes_from(plan.write_count() + failing_from)
        });
    }
}

#[test]
fn power_cut_at_every_flush_of_a_sync() {
    for flush in 0..6 {
        survive(300 + flush, |plan| {
            plan.stop_at_flush(plan.flush_count() + flush)
        });
    }
}

#[test]
fn damaged_copy_in_a_mirror_is_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.img");
    let b = dir.path().join("b.img");
    let pool = create_pool(
        dir.path(),
        "mirrored",
        vec![VdevSpec::Mirror(vec![a.clone(), b.clone()])],
        tiny(),
    );
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Off);
    write_generation(&pool, object, 7);
    pool.export().unwrap();
    drop(objset);

    // Scribble over the data area of one side of the mirror.
    let file = std::fs::OpenOptions::new().write(true).open(&a).unwrap();
    use std::os::unix::fs::FileExt;
    let junk = pattern(99, 4 << 20);
    file.write_all_at(&junk, 4 << 20).unwrap();
    file.sync_all().unwrap();

    let pool = import(dir.path(), "mirrored", tiny());
    assert_eq!(
        read_generation(&pool, object),
        pattern(7, 50_000),
        "read must return good data from the other side"
    );
    let report = check_pool(&pool, true).unwrap();
    assert!(report.is_clean(), "{report:#?}");
    assert!(report.copies_bad > 0, "the damage was not noticed");
    let again = check_pool(&pool, true).unwrap();
    assert_eq!(
        again.copies_bad, 0,
        "damaged copies were not repaired: {again:#?}"
    );
    pool.export().unwrap();
}

#[test]
fn damage_with_no_good_copy_is_reported_not_returned() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "single", single(dir.path(), "a.img"), tiny());
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Off);
    write_generation(&pool, object, 3);
    pool.export().unwrap();
    drop(objset);
    // Find the data block and damage it: read the pointer through debug info.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.path().join("a.img"))
        .unwrap();
    use std::os::unix::fs::FileExt;
    let needle = &pattern(3, 50_000)[..4096];
    let size = file.metadata().unwrap().len();
    let mut offset = 4 << 20;
    let mut found = None;
    let mut buffer = vec![0u8; 1 << 20];
    while offset < size && found.is_none() {
        file.read_exact_at(&mut buffer, offset).unwrap();
        if let Some(position) = buffer
            .windows(64)
            .step_by(512)
            .position(|w| w == &needle[..64])
        {
            found = Some(offset + position as u64 * 512);
        }
        offset += 1 << 20;
    }
    let at = found.expect("data block found on disk");
    file.write_all_at(&[0xFFu8; 512], at).unwrap();
    file.sync_all().unwrap();
    let pool = import(dir.path(), "single", tiny());
    let mut data = vec![0u8; 50_000];
    let result = pool.root_objset().read(object, 0, &mut data);
    assert!(result.is_err(), "damaged data must not be returned");
    let report = check_pool(&pool, true).unwrap();
    assert!(
        !report.blocks_unreadable.is_empty(),
        "check must report the unreadable block"
    );
    pool.export().unwrap();
}

#[test]
fn bad_input_gives_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    // Zeroed labels: nothing to import.
    let path = dir.path().join("zero.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(VDEV_SIZE)
        .unwrap();
    let result = Pool::import("nothing", ImportOptions::new(dirs(dir.path()), tiny()));
    assert!(
        matches!(result, Err(PoolError::NotFound(..))),
        "{:?}",
        result.err()
    );

    // A truncated vdev: the back labels are gone and the data area is cut.
    let pool = create_pool(dir.path(), "trunc", single(dir.path(), "t.img"), tiny());
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Off);
    write_generation(&pool, object, 5);
    pool.export().unwrap();
    drop(objset);
    let t = dir.path().join("t.img");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&t)
        .unwrap()
        .set_len(VDEV_SIZE / 2)
        .unwrap();
    match Pool::import("trunc", ImportOptions::new(dirs(dir.path()), tiny())) {
        Ok((pool, _)) => {
            // If the front labels still import it, reads past the end must fail cleanly.
            let mut data = vec![0u8; 50_000];
            let _ = pool.root_objset().read(object, 0, &mut data);
            let _ = check_pool(&pool, false);
            drop(pool);
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }

    // A vdev of another pool named twice / used by a second create without -f.
    let other = dir.path().join("other.img");
    let pool = create_pool(
        dir.path(),
        "first",
        vec![VdevSpec::Leaf(other.clone())],
        tiny(),
    );
    pool.export().unwrap();
    let result = Pool::create(CreateOptions {
        name: "second".into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Leaf(other.clone())],
        create_size: None,
        force: false,
        tunables: tiny(),
        wrap_device: None,
        disabled_features: Vec::new(),
    });
    let error = result
        .err()
        .expect("reusing a vdev of another pool must fail");
    assert!(
        error.to_string().contains("first"),
        "error should name the other pool: {error}"
    );

    // An imported pool's vdev is locked against a second import.
    let pool = import(dir.path(), "first", tiny());
    let second = Pool::import("first", ImportOptions::new(dirs(dir.path()), tiny()));
    let error = second
        .err()
        .expect("second import of an imported pool must fail");
    assert!(error.to_string().contains("in use"), "{error}");
    pool.export().unwrap();
}

#[test]
fn random_bytes_in_metadata_blocks_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "noise", single(dir.path(), "n.img"), tiny());
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Lz4);
    write_generation(&pool, object, 11);
    pool.export().unwrap();
    drop(objset);
    let path = dir.path().join("n.img");
    use std::os::unix::fs::FileExt;
    let original = std::fs::read(&path).unwrap();
    for seed in 0..12u64 {
        std::fs::write(&path, &original).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        // Overwrite 64 KiB of the used data area (where the MOS and metadata live) with noise.
        let offset = (4 << 20) + (seed % 6) * (64 << 10);
        file.write_all_at(&pattern(seed + 1000, 64 << 10), offset)
            .unwrap();
        drop(file);
        let result = std::panic::catch_unwind(|| {
            match Pool::import("noise", ImportOptions::new(dirs(dir.path()), tiny())) {
                Ok((pool, _)) => {
                    let mut data = vec![0u8; 50_000];
                    let _ = pool.root_objset().read(object, 0, &mut data);
                    let _ = check_pool(&pool, false);
                }
                Err(error) => assert!(!error.to_string().is_empty()),
            }
        });
        assert!(result.is_ok(), "seed {seed}: a panic on damaged metadata");
    }
}

/// Regression: a crash after the even labels of txg T but before T's uberblock leaves labels
/// whose config is newer than the newest uberblock. If T created a vdev's metaslab array, the
/// config named an object that T-1's MOS does not have, and import failed for every uberblock.
/// The MOS now records metaslab arrays itself, and import takes them from the MOS.
#[test]
fn labels_newer_than_the_uberblock_still_import() {
    let dir = tempfile::tempdir().unwrap();
    let vdevs: Vec<VdevSpec> = (0..12)
        .map(|i| VdevSpec::Leaf(dir.path().join(format!("v{i}.img"))))
        .collect();
    let pool = create_pool(dir.path(), "four", vdevs, tiny());
    let before: Vec<u64> = pool
        .core
        .io
        .vdevs
        .tops()
        .iter()
        .map(|top| top.metaslab_array().0)
        .collect();
    assert!(
        before.contains(&0),
        "expected a vdev without a metaslab array after creation: {before:?}"
    );
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Off);
    pool.sync().unwrap();
    // Write one txg big enough to reach the vdevs that have no metaslab array yet.
    for generation in 1..40 {
        let hold = pool.assign().unwrap();
        objset
            .write(
                &hold.tx(),
                object,
                generation * 50_000,
                &pattern(generation, 50_000),
            )
            .unwrap();
    }
    let synced = pool.sync().unwrap();
    let after: Vec<u64> = pool
        .core
        .io
        .vdevs
        .tops()
        .iter()
        .map(|top| top.metaslab_array().0)
        .collect();
    assert!(
        before.iter().zip(&after).any(|(b, a)| *b == 0 && *a != 0),
        "no vdev got its metaslab array in the last txg: {before:?} -> {after:?}"
    );
    // Erase every uberblock from the txg that created the arrays on: as if the crash came
    // right after the even labels were written.
    let leaves: Vec<(std::path::PathBuf, u32)> = pool
        .core
        .io
        .vdevs
        .tops()
        .iter()
        .flat_map(|top| {
            top.children
                .iter()
                .map(move |leaf| (leaf.path.clone(), top.ashift))
        })
        .collect();
    drop(objset);
    drop(pool);
    for (path, ashift) in &leaves {
        let device = tarn::vdev::FileDevice::open(path).unwrap();
        let slots = tarn::vdev::label::uberblock_slot_count(*ashift);
        let slot_size = tarn::vdev::label::uberblock_slot_size(*ashift) as usize;
        for txg in (synced.0 - 3)..=synced.0 + 2 {
            let slot = txg % slots;
            let bytes = tarn::vdev::label::read_uberblock_slots(&device, *ashift);
            let current = tarn::pool::uberblock::Uberblock::decode(&bytes[slot as usize])
                .ok()
                .flatten();
            if current.is_some_and(|ub| ub.txg.0 >= synced.0) {
                tarn::vdev::label::write_uberblock(&device, *ashift, slot, &vec![0u8; slot_size])
                    .unwrap();
            }
        }
    }
    drop(leaves);
    let (pool, report) = Pool::import("four", ImportOptions::new(dirs(dir.path()), tiny()))
        .expect("import with newer labels");
    assert!(report.txg < synced, "import must rewind past txg {synced}");
    assert_clean(&pool);
    pool.export().unwrap();
}
