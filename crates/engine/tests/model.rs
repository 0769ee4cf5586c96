//! Model-based test: random object writes, truncates, hole punches, object removals, syncs and
//! re-opens against an in-memory model, under the tiny test configuration (512-byte to 4 KiB
//! blocks, 1 KiB indirect blocks, 1 MiB metaslabs), compared after every step and after every
//! re-open, with `check` clean at the end of each run.

use crate::common;

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tarn::block::blkptr::Compression;
use tarn::pool::{Pool, VdevSpec};
use tarn::types::ObjectId;

use common::*;

struct Model {
    objects: BTreeMap<ObjectId, Vec<u8>>,
}

fn compare_object(pool: &Pool, model: &Model, object: ObjectId, step: usize) {
    let expected = &model.objects[&object];
    let objset = pool.root_objset();
    // Read the model's length plus a tail that must be zeros.
    let mut actual = vec![0xAAu8; expected.len() + 700];
    objset
        .read(object, 0, &mut actual)
        .unwrap_or_else(|e| panic!("step {step}: read object {object}: {e}"));
    assert_eq!(
        &actual[..expected.len()],
        &expected[..],
        "step {step}: object {object} contents differ"
    );
    assert!(
        actual[expected.len()..].iter().all(|&b| b == 0),
        "step {step}: object {object} has data past its end"
    );
}

fn compare_all(pool: &Pool, model: &Model, step: usize) {
    for &object in model.objects.keys() {
        compare_object(pool, model, object, step);
    }
}

fn run(seed: u64, steps: usize, vdevs: impl Fn(&std::path::Path) -> Vec<VdevSpec>) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pool = create_pool(dir.path(), "model", vdevs(dir.path()), tiny());
    let mut model = Model {
        objects: BTreeMap::new(),
    };
    for step in 0..steps {
        let objset = pool.root_objset();
        let choice = rng.gen_range(0..100);
        if model.objects.is_empty() || choice < 8 {
            let block_size = [512u32, 1024, 4096][rng.gen_range(0..3)];
            let compression = [
                Compression::Off,
                Compression::Lz4,
                Compression::Zstd { level: 1 },
            ][rng.gen_range(0..3)];
            let object = create_file(&pool, &objset, block_size, compression);
            model.objects.insert(object, Vec::new());
            compare_object(&pool, &model, object, step);
            continue;
        }
        let objects: Vec<ObjectId> = model.objects.keys().copied().collect();
        let object = objects[rng.gen_range(0..objects.len())];
        match choice {
            8..=59 => {
                let offset = rng.gen_range(0..120_000usize);
                let length = rng.gen_range(1..12_000usize);
                let data = pattern(rng.gen(), length);
                let hold = pool.assign().unwrap();
                objset
                    .write(&hold.tx(), object, offset as u64, &data)
                    .unwrap();
                drop(hold);
                let contents = model.objects.get_mut(&object).unwrap();
                if contents.len() < offset + length {
                    contents.resize(offset + length, 0);
                }
                contents[offset..offset + length].copy_from_slice(&data);
            }
            60..=69 => {
                // Truncate: free to the end.
                let contents = model.objects.get_mut(&object).unwrap();
                let new_length = rng.gen_range(0..=contents.len());
                let hold = pool.assign().unwrap();
                objset
                    .free_range(&hold.tx(), object, new_length as u64, u64::MAX)
                    .unwrap();
                drop(hold);
                contents.truncate(new_length);
            }
            70..=79 => {
                // Punch a hole.
                let contents = model.objects.get_mut(&object).unwrap();
                if contents.is_empty() {
                    continue;
                }
                let offset = rng.gen_range(0..contents.len());
                let length = rng.gen_range(1..=(contents.len() - offset));
                let hold = pool.assign().unwrap();
                objset
                    .free_range(&hold.tx(), object, offset as u64, length as u64)
                    .unwrap();
                drop(hold);
                contents[offset..offset + length].fill(0);
            }
            80..=84 => {
                let hold = pool.assign().unwrap();
                objset.remove_object(&hold.tx(), object).unwrap();
                drop(hold);
                model.objects.remove(&object);
                assert!(
                    !objset.exists(object),
                    "step {step}: removed object {object} still exists"
                );
                continue;
            }
            85..=93 => {
                pool.sync().unwrap();
            }
            _ => {
                pool.export().unwrap();
                pool = import(dir.path(), "model", tiny());
                compare_all(&pool, &model, step);
                continue;
            }
        }
        compare_object(&pool, &model, object, step);
    }
    compare_all(&pool, &model, steps);
    assert_clean(&pool);
    pool.export().unwrap();
    let pool = import(dir.path(), "model", tiny());
    compare_all(&pool, &model, steps + 1);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// `TARN_MODEL_SEEDS=N TARN_MODEL_STEPS=M` make a longer soak than the CI default.
fn soak_size(default_seeds: u64, default_steps: usize) -> (u64, usize) {
    let seeds = std::env::var("TARN_MODEL_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_seeds);
    let steps = std::env::var("TARN_MODEL_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_steps);
    (seeds, steps)
}

#[test]
fn model_single_vdev() {
    let (seeds, steps) = soak_size(3, 400);
    for seed in 0..seeds {
        run(seed, steps, |dir| single(dir, "a.img"));
    }
}

#[test]
fn model_two_vdevs() {
    run(100, 400, |dir| {
        vec![
            VdevSpec::Leaf(dir.join("a.img")),
            VdevSpec::Leaf(dir.join("b.img")),
        ]
    });
}

#[test]
fn model_mirror() {
    run(200, 400, |dir| {
        vec![VdevSpec::Mirror(vec![dir.join("a.img"), dir.join("b.img")])]
    });
}
