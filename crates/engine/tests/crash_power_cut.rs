//! Crash test under the power-cut model (DESIGN.md §4 "Crash model"): the fault layer holds
//! every write since the last flush in a volatile cache, and at the crash each of them is kept,
//! dropped or torn, in any order. Before this model existed, every crash test kept all writes
//! issued before the stop point, in order, so removing either flush around the uberblock write
//! in `PoolCore::commit` left every test green.
//!
//! Each round imports the pool through a fault plan seeded from the round, checks it, verifies
//! every object against what was acknowledged (a sync that returned before the power cut), then
//! writes generations and syncs until the power fails at a random write or flush, and drops the
//! pool. Without the flush before the uberblock, an uberblock can land while blocks it points
//! to do not (check finds unreadable blocks, or a file holds torn data); without the flush after
//! it, a sync returns while its uberblock is still in the cache, and a power cut in the next txg
//! loses a generation that was acknowledged. `TARN_POWER_CUT_SEED` sets the base seed.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use tarn::block::blkptr::{Compression, ObjectType};
use tarn::check::check_pool;
use tarn::pool::{CreateOptions, DeviceWrapper, ImportOptions, Pool};
use tarn::tunables::Tunables;
use tarn::types::ObjectId;
use tarn::vdev::{BlockDevice, FaultPlan, FaultyDevice};

use common::*;

const POOL: &str = "powercut";
const OBJECTS: usize = 6;
const ROUNDS: u64 = 200;

fn generation_length(generation: u64) -> usize {
    ((generation * 7919) % 24_000 + 1) as usize
}

/// The spill block a generation gives its object: none for every third, else 512 bytes to
/// 8 KiB, so that spill blocks are born, replaced and removed across the power cuts.
fn generation_spill(generation: u64) -> Option<Vec<u8>> {
    (!generation.is_multiple_of(3)).then(|| {
        let mut spill = pattern(generation ^ 0x5b111, 512 * (1 + (generation % 16) as usize));
        spill[0] = 1;
        spill
    })
}

fn wrapper(plan: &Arc<FaultPlan>) -> DeviceWrapper {
    let plan = plan.clone();
    Arc::new(move |_path: &Path, device: Arc<dyn BlockDevice>| {
        Arc::new(FaultyDevice::new(device, plan.clone())) as Arc<dyn BlockDevice>
    })
}

/// What the test knows: per object, the newest generation known durable, and which object
/// each generation ever issued went to.
#[derive(Default)]
struct Model {
    durable: BTreeMap<ObjectId, u64>,
    issued: BTreeMap<u64, ObjectId>,
    next: u64,
}

fn write_generation(pool: &Pool, object: ObjectId, generation: u64) {
    let objset = pool.root_objset();
    let data = pattern(generation, generation_length(generation));
    let hold = pool.assign().unwrap();
    let tx = hold.tx();
    objset.free_range(&tx, object, 0, u64::MAX).unwrap();
    objset.write(&tx, object, 0, &data).unwrap();
    let mut bonus = generation.to_le_bytes().to_vec();
    bonus.extend_from_slice(&(data.len() as u64).to_le_bytes());
    objset
        .set_bonus(&tx, object, ObjectType::None, &bonus)
        .unwrap();
    objset
        .set_spill(&tx, object, generation_spill(generation))
        .unwrap();
}

/// Every object holds one whole generation, at least the one known durable; check is clean.
fn verify(pool: &Pool, objects: &[ObjectId], model: &mut Model, what: &str) {
    let report = check_pool(pool, false).expect("check runs");
    assert!(
        report.is_clean(),
        "{what}: check found problems: {report:#?}"
    );
    let objset = pool.root_objset();
    for &object in objects {
        let bonus = objset.bonus(object).unwrap();
        let (generation, length) = match bonus.len() {
            16 => (
                u64::from_le_bytes(bonus[..8].try_into().unwrap()),
                u64::from_le_bytes(bonus[8..].try_into().unwrap()) as usize,
            ),
            _ => (0, 0),
        };
        let durable = model.durable.get(&object).copied().unwrap_or(0);
        assert!(
            generation >= durable,
            "{what}: object {object} holds generation {generation}, but {durable} was acknowledged"
        );
        if generation == 0 {
            continue;
        }
        assert_eq!(
            model.issued.get(&generation),
            Some(&object),
            "{what}: object {object} holds generation {generation}, never written there"
        );
        assert_eq!(length, generation_length(generation), "{what}: length");
        let spill = objset.spill(object).unwrap_or_else(|error| {
            panic!("{what}: object {object} generation {generation}: spill block: {error}")
        });
        assert_eq!(
            spill.as_deref().map(|spill| spill.as_slice()),
            generation_spill(generation).as_deref(),
            "{what}: object {object} generation {generation}: spill block"
        );
        let mut data = vec![0u8; length + 64];
        objset.read(object, 0, &mut data).unwrap_or_else(|error| {
            panic!("{what}: object {object} generation {generation} unreadable: {error}")
        });
        assert!(
            data[..length] == pattern(generation, length)[..]
                && data[length..].iter().all(|&b| b == 0),
            "{what}: object {object} generation {generation} damaged"
        );
        model.durable.insert(object, generation);
    }
}

/// One round: import through a power-cut plan, verify, write and sync until the power fails.
fn round(dir: &Path, objects: &[ObjectId], model: &mut Model, seed: u64, tunables: &Tunables) {
    let what = format!("seed {seed}");
    let plan = FaultPlan::new();
    plan.set_power_cut(seed);
    let mut options = ImportOptions::new(dirs(dir), tunables.clone());
    options.wrap_device = Some(wrapper(&plan));
    let (pool, report) = Pool::import(POOL, options)
        .unwrap_or_else(|error| panic!("{what}: import after a power cut failed: {error}"));
    verify(
        &pool,
        objects,
        model,
        &format!("{what} (imported txg {})", report.txg),
    );

    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // The power fails at a random write, or as a random flush is issued (most often right
    // around an uberblock write: each txg flushes before and after it).
    if rng.gen_bool(0.5) {
        plan.stop_at_write(plan.write_count() + rng.gen_range(0..120));
    } else {
        plan.stop_at_flush(plan.flush_count() + rng.gen_range(0..10));
    }
    for _ in 0..8 {
        let mut written = Vec::new();
        for _ in 0..rng.gen_range(1..=3) {
            model.next += 1;
            let generation = model.next;
            let object = objects[rng.gen_range(0..objects.len())];
            model.issued.insert(generation, object);
            write_generation(&pool, object, generation);
            written.push((object, generation));
        }
        let synced = pool.sync();
        if plan.is_stopped() {
            break;
        }
        synced.unwrap_or_else(|error| panic!("{what}: sync failed: {error}"));
        // Acknowledged: the sync returned before the power failed.
        for (object, generation) in written {
            model.durable.insert(object, generation);
        }
    }
    plan.stop_now();
    drop(pool);
}

#[test]
fn power_cuts_at_random_points_lose_nothing_acknowledged() {
    power_cuts(tiny(), 4096, ROUNDS);
}

/// The same with half of the 16 KiB file blocks written as gang blocks (a header and pieces,
/// each its own write that the power cut may drop or tear).
#[test]
fn power_cuts_lose_nothing_acknowledged_with_gang_blocks() {
    let mut tunables = tiny();
    tunables.metaslab_force_ganging = 8 << 10;
    tunables.metaslab_force_ganging_pct = 50;
    power_cuts(tunables, 16 << 10, ROUNDS / 4);
}

fn power_cuts(tunables: Tunables, block_size: u32, rounds: u64) {
    let base: u64 = std::env::var("TARN_POWER_CUT_SEED")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(0x7a7e);
    println!("power-cut base seed {base} (TARN_POWER_CUT_SEED)");
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::create(CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: single(dir.path(), "vdev.img"),
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: tunables.clone(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })
    .unwrap();
    let objset = pool.root_objset();
    let objects: Vec<ObjectId> = (0..OBJECTS)
        .map(|_| create_file(&pool, &objset, block_size, Compression::Lz4))
        .collect();
    drop(objset);
    pool.export().unwrap();

    let mut model = Model::default();
    for index in 0..rounds {
        round(dir.path(), &objects, &mut model, base + index, &tunables);
    }
    let pool = import(dir.path(), POOL, tunables.clone());
    verify(&pool, &objects, &mut model, "final import");
    assert!(
        model.durable.len() >= OBJECTS / 2,
        "the rounds acknowledged too little to test anything: {:?}",
        model.durable
    );
    if tunables.metaslab_force_ganging_pct > 0 && block_size > 8 << 10 {
        let mut gangs = 0;
        pool.root_objset()
            .visit_synced_blocks(&mut |bp| {
                gangs += u64::from(bp.is_gang());
                Ok(())
            })
            .unwrap();
        assert!(gangs > 0, "no gang block survived to the end");
    }
    pool.export().unwrap();
}
