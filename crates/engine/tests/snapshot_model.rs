//! Random mixes of writes, truncates, deletes, snapshots, snapshot destroys (single and
//! ranges), rollbacks, and clones (made, written, destroyed, promoted and promoted back;
//! destroys and rollbacks that would take their origin are refused) on a real pool, against a model of what the head, every
//! snapshot and every clone must hold; `check` (which verifies deadlists, unique bytes and every directory's used
//! breakdown against the trees) after every few steps, and at the end after export and import.
//! `TARN_SNAPSHOT_MODEL_SEEDS` sets how many seeds run (default 6).

use crate::common;

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use tarn::check::check_pool;
use tarn::fs::{FileSystem, SetAttr};
use tarn::pool::Pool;

use common::*;

const FILES: u64 = 6;
const STEPS: usize = 70;

/// File name -> contents.
type Contents = BTreeMap<String, Vec<u8>>;

fn read_all(fs: &FileSystem) -> Contents {
    let mut contents = Contents::new();
    for entry in fs.readdir(fs.root(), 0, 1000).unwrap() {
        let name = String::from_utf8(entry.name.clone()).unwrap();
        if name == "." || name == ".." {
            continue;
        }
        let attr = fs.lookup(fs.root(), name.as_bytes()).unwrap();
        contents.insert(name, fs.read(attr.ino, 0, attr.size as usize).unwrap());
    }
    contents
}

/// With `TARN_SNAPSHOT_MODEL_TRACE` set, print the snapshot operations as they run.
fn trace(line: &str) {
    if std::env::var_os("TARN_SNAPSHOT_MODEL_TRACE").is_some() {
        eprintln!("{line}");
    }
}

/// A random write into a random file of `fs`, mirrored in `contents`.
fn write_random(fs: &FileSystem, contents: &mut Contents, rng: &mut impl Rng) {
    let name = format!("f{}", rng.gen_range(0..FILES));
    let ino = root_file(fs, &name);
    let file = contents.entry(name).or_default();
    let offset = rng.gen_range(0..=file.len().min(60_000));
    let data = pattern(rng.gen(), rng.gen_range(1..40_000));
    fs.write(ino, offset as u64, &data).unwrap();
    if file.len() < offset + data.len() {
        file.resize(offset + data.len(), 0);
    }
    file[offset..offset + data.len()].copy_from_slice(&data);
}

fn checked(pool: &Pool, what: &str) {
    pool.sync().unwrap();
    let report = check_pool(pool, false).unwrap();
    assert!(report.is_clean(), "{what}: {report:#?}");
}

fn run(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "model", single(dir.path(), "v0"), tiny());
    pool.create_dataset(
        "model/fs",
        &[
            (
                "compression".into(),
                if seed.is_multiple_of(2) { "lz4" } else { "off" }.into(),
            ),
            ("recordsize".into(), "8192".into()),
        ],
        false,
    )
    .unwrap();
    let fs = pool.open_file_system("model/fs").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut head = Contents::new();
    // Snapshot name -> contents, oldest first (by number).
    let mut snapshots: BTreeMap<u64, Contents> = BTreeMap::new();
    let mut next_snapshot = 0u64;
    // Clone name -> (origin snapshot, file system, contents).
    let mut clones: BTreeMap<String, (u64, FileSystem, Contents)> = BTreeMap::new();
    let mut next_clone = 0u64;
    for step in 0..STEPS {
        let what = format!("seed {seed} step {step}");
        let has_clones = |key: &u64, clones: &BTreeMap<String, (u64, FileSystem, Contents)>| {
            clones.values().any(|(origin, _, _)| origin == key)
        };
        match rng.gen_range(0..115) {
            112..=114 => {
                // Promote a clone, check the swapped layout, and promote the origin back.
                let names: Vec<String> = clones.keys().cloned().collect();
                if names.is_empty() {
                    continue;
                }
                let name = names[rng.gen_range(0..names.len())].clone();
                let origin = clones[&name].0;
                trace(&format!(
                    "{what}: promote {name} (origin s{origin}) and back"
                ));
                let moved_keys: Vec<u64> =
                    snapshots.range(..=origin).map(|(key, _)| *key).collect();
                let moved = pool.promote(&name).unwrap();
                let expected: Vec<String> = moved_keys
                    .iter()
                    .map(|key| format!("{name}@s{key}"))
                    .collect();
                assert_eq!(moved, expected, "{what}");
                checked(&pool, &format!("{what}: after promote"));
                for key in &moved_keys {
                    let snap = pool
                        .snapshot_file_system(&format!("{name}@s{key}"))
                        .unwrap();
                    assert_eq!(&read_all(&snap), &snapshots[key], "{what}: {name}@s{key}");
                }
                let origin_info = pool
                    .datasets()
                    .into_iter()
                    .find(|info| info.name == "model/fs")
                    .unwrap();
                assert_eq!(
                    origin_info.origin,
                    Some(format!("{name}@s{origin}")),
                    "{what}"
                );
                pool.promote("model/fs").unwrap();
                checked(&pool, &format!("{what}: after promoting back"));
            }
            100..=103 => {
                let keys: Vec<u64> = snapshots.keys().copied().collect();
                if keys.is_empty() {
                    continue;
                }
                let origin = keys[rng.gen_range(0..keys.len())];
                let name = format!("model/c{next_clone}");
                next_clone += 1;
                trace(&format!("{what}: clone s{origin} as {name}"));
                pool.create_clone(&format!("model/fs@s{origin}"), &name, &[])
                    .unwrap();
                let clone = pool.open_file_system(&name).unwrap();
                clones.insert(name, (origin, clone, snapshots[&origin].clone()));
            }
            104..=108 => {
                let names: Vec<String> = clones.keys().cloned().collect();
                if names.is_empty() {
                    continue;
                }
                let name = &names[rng.gen_range(0..names.len())];
                let (_, clone, contents) = clones.get_mut(name).unwrap();
                write_random(clone, contents, &mut rng);
            }
            109..=111 => {
                let names: Vec<String> = clones.keys().cloned().collect();
                if names.is_empty() {
                    continue;
                }
                let name = names[rng.gen_range(0..names.len())].clone();
                trace(&format!("{what}: destroy {name}"));
                clones.remove(&name);
                pool.destroy_dataset(&name, false).unwrap();
            }
            0..=44 => write_random(&fs, &mut head, &mut rng),
            45..=54 => {
                if let Some(name) = head
                    .keys()
                    .nth(rng.gen_range(0..head.len().max(1)))
                    .cloned()
                {
                    let file = head.get_mut(&name).unwrap();
                    let size = rng.gen_range(0..=file.len());
                    let ino = fs.lookup(fs.root(), name.as_bytes()).unwrap().ino;
                    fs.setattr(
                        ino,
                        SetAttr {
                            size: Some(size as u64),
                            ..Default::default()
                        },
                    )
                    .unwrap();
                    file.truncate(size);
                }
            }
            55..=61 => {
                if let Some(name) = head
                    .keys()
                    .nth(rng.gen_range(0..head.len().max(1)))
                    .cloned()
                {
                    fs.unlink(fs.root(), name.as_bytes()).unwrap();
                    head.remove(&name);
                }
            }
            62..=79 => {
                trace(&format!("{what}: snapshot s{next_snapshot}"));
                pool.create_snapshots(&[format!("model/fs@s{next_snapshot}")], false)
                    .unwrap();
                snapshots.insert(next_snapshot, head.clone());
                next_snapshot += 1;
            }
            80..=91 => {
                if snapshots.is_empty() {
                    continue;
                }
                let keys: Vec<u64> = snapshots.keys().copied().collect();
                let first = rng.gen_range(0..keys.len());
                let last = (first + rng.gen_range(0..3)).min(keys.len() - 1);
                let spec = if first == last {
                    format!("model/fs@s{}", keys[first])
                } else {
                    format!("model/fs@s{}%s{}", keys[first], keys[last])
                };
                trace(&format!("{what}: destroy {spec}"));
                if keys[first..=last]
                    .iter()
                    .any(|key| has_clones(key, &clones))
                {
                    assert!(
                        pool.destroy_snapshots(&spec, false).is_err(),
                        "{what}: {spec}"
                    );
                    continue;
                }
                let destroyed = pool.destroy_snapshots(&spec, false).unwrap();
                assert_eq!(destroyed.len(), last - first + 1, "{what}: {spec}");
                for key in &keys[first..=last] {
                    snapshots.remove(key);
                }
            }
            _ => {
                let Some((&newest, _)) = snapshots.last_key_value() else {
                    continue;
                };
                // The newest, or an older one with -r.
                let keys: Vec<u64> = snapshots.keys().copied().collect();
                let target = if rng.gen_bool(0.7) {
                    newest
                } else {
                    keys[rng.gen_range(0..keys.len())]
                };
                trace(&format!("{what}: rollback s{target} (newest s{newest})"));
                if keys
                    .iter()
                    .any(|key| *key > target && has_clones(key, &clones))
                {
                    assert!(pool.rollback(&format!("model/fs@s{target}"), true).is_err());
                    continue;
                }
                pool.rollback(&format!("model/fs@s{target}"), target != newest)
                    .unwrap();
                snapshots.retain(|key, _| *key <= target);
                head = snapshots[&target].clone();
            }
        }
        if step % 7 == 6 {
            checked(&pool, &what);
            assert_eq!(read_all(&fs), head, "{what}: head");
            for (key, contents) in &snapshots {
                let snap = pool
                    .snapshot_file_system(&format!("model/fs@s{key}"))
                    .unwrap();
                assert_eq!(&read_all(&snap), contents, "{what}: snapshot s{key}");
            }
            for (name, (_, clone, contents)) in &clones {
                assert_eq!(&read_all(clone), contents, "{what}: clone {name}");
            }
            // Space: used = dataset + snapshots, and the snapshots' own figures add up to no
            // more than what they hold together.
            let info = pool
                .datasets()
                .into_iter()
                .find(|info| info.name == "model/fs")
                .unwrap();
            assert_eq!(
                info.used,
                info.used_by_dataset + info.used_by_snapshots,
                "{what}"
            );
            let unique: u64 = pool.snapshots().iter().map(|snapshot| snapshot.used).sum();
            assert!(
                unique <= info.used_by_snapshots,
                "{what}: {unique} > {}",
                info.used_by_snapshots
            );
        }
    }
    drop(fs);
    let clone_contents: Vec<(String, Contents)> = std::mem::take(&mut clones)
        .into_iter()
        .map(|(name, (_, _, contents))| (name, contents))
        .collect();
    pool.export().unwrap();
    let pool = import(dir.path(), "model", tiny());
    checked(&pool, &format!("seed {seed} after import"));
    for (name, contents) in &clone_contents {
        let clone = pool.open_file_system(name).unwrap();
        assert_eq!(
            &read_all(&clone),
            contents,
            "seed {seed} after import: {name}"
        );
        drop(clone);
        pool.destroy_dataset(name, false).unwrap();
    }
    for (key, contents) in &snapshots {
        let snap = pool
            .snapshot_file_system(&format!("model/fs@s{key}"))
            .unwrap();
        assert_eq!(
            &read_all(&snap),
            contents,
            "seed {seed} after import: s{key}"
        );
    }
    // Everything destroyed: all the space comes back.
    pool.destroy_snapshots("model/fs@%", false).ok();
    while pool.core.freeing_bytes().unwrap() > 0 {
        pool.sync().unwrap();
    }
    checked(
        &pool,
        &format!("seed {seed} after destroying every snapshot"),
    );
    let info = pool
        .datasets()
        .into_iter()
        .find(|info| info.name == "model/fs")
        .unwrap();
    assert_eq!(info.used_by_snapshots, 0);
}

#[test]
fn random_mixes_keep_contents_and_space_exact() {
    let seeds: u64 = std::env::var("TARN_SNAPSHOT_MODEL_SEEDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(6);
    for seed in 0..seeds {
        run(0x5a17 + seed);
    }
}
