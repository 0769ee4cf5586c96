//! Crash tests for snapshots: a pool killed (SIGKILL) or losing power while it takes, destroys
//! and rolls back snapshots imports without force, `check` comes back clean (deadlists, unique
//! bytes and space maps agree), every snapshot that exists holds exactly the generation it was
//! taken at, and the snapshots the journal says are durable exist.
//!
//! The workload: one file system whose file `gen` holds generation N's data when snapshot `sN`
//! is taken; older snapshots are destroyed (single and ranges) as it goes, so that deadlists
//! merge and the free list drains while the crashes land.

use crate::common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use tarn::check::check_pool;
use tarn::fs::FileSystem;
use tarn::pool::{DeviceWrapper, ImportOptions, Pool};
use tarn::vdev::{BlockDevice, FaultPlan, FaultyDevice};

use common::*;

const POOL: &str = "snapcrash";
const CHILD_ENV: &str = "TARN_CRASH_SNAPSHOTS_DIR";
const KILL_ROUNDS: u64 = 10;
const POWER_ROUNDS: u64 = 40;

fn generation_data(generation: u64) -> Vec<u8> {
    pattern(generation, ((generation * 7919) % 90_000 + 1) as usize)
}

fn write_generation(fs: &FileSystem, generation: u64) {
    let ino = match fs.lookup(fs.root(), b"gen") {
        Ok(attr) => attr.ino,
        Err(_) => fs.create(fs.root(), b"gen", 0o644, 0, 0).unwrap().ino,
    };
    fs.setattr(
        ino,
        tarn::fs::SetAttr {
            size: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    fs.write(ino, 0, &generation_data(generation)).unwrap();
    // Some churn beside it, so that deadlists hold more than one file's blocks.
    let name = format!("side{}", generation % 3);
    let side = root_file(fs, &name);
    fs.write(
        side,
        (generation % 5) * 8192,
        &pattern(generation + 1000, 20_000),
    )
    .unwrap();
}

/// Every snapshot holds its generation; returns the generations present.
fn verify(pool: &Pool, what: &str) -> BTreeSet<u64> {
    pool.sync().unwrap();
    let report = check_pool(pool, false).unwrap();
    assert!(report.is_clean(), "{what}: {report:#?}");
    let mut present = BTreeSet::new();
    for snapshot in pool.snapshots() {
        let generation: u64 = snapshot.name.rsplit("@s").next().unwrap().parse().unwrap();
        let fs = pool.snapshot_file_system(&snapshot.name).unwrap();
        let attr = fs.lookup(fs.root(), b"gen").unwrap();
        let data = fs.read(attr.ino, 0, attr.size as usize).unwrap();
        assert!(
            data == generation_data(generation),
            "{what}: snapshot {} does not hold its generation",
            snapshot.name
        );
        present.insert(generation);
    }
    present
}

/// One step of the workload after generation `generation` was written: snapshot it, and
/// sometimes destroy older snapshots or roll back to the newest.
fn step(pool: &Pool, fs: &FileSystem, generation: u64, rng: &mut impl Rng) -> Vec<u64> {
    pool.create_snapshots(&[format!("{POOL}/fs@s{generation}")], false)
        .unwrap();
    let present: Vec<u64> = pool
        .snapshots()
        .iter()
        .map(|snapshot| snapshot.name.rsplit("@s").next().unwrap().parse().unwrap())
        .collect();
    let mut destroyed = Vec::new();
    // Never the two newest: a crash test then knows the newest acknowledged one survives.
    if present.len() > 4 {
        let first = rng.gen_range(0..present.len() - 3);
        let last = (first + rng.gen_range(0..2)).min(present.len() - 3);
        pool.destroy_snapshots(
            &format!("{POOL}/fs@s{}%s{}", present[first], present[last]),
            false,
        )
        .unwrap();
        destroyed.extend(&present[first..=last]);
    }
    if rng.gen_bool(0.15) {
        write_generation(fs, generation + 1_000_000);
        pool.rollback(&format!("{POOL}/fs@s{generation}"), false)
            .unwrap();
    }
    destroyed
}

fn journal(file: &mut std::fs::File, line: String) {
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
    file.sync_all().unwrap();
}

fn child_main(dir: PathBuf) {
    let start: u64 = std::env::var("TARN_CRASH_START").unwrap().parse().unwrap();
    let pool = import(&dir, POOL, tiny());
    let fs = pool.open_file_system(&format!("{POOL}/fs")).unwrap();
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("journal"))
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(start);
    for generation in start.. {
        write_generation(&fs, generation);
        journal(&mut log, format!("begin {generation}"));
        let destroyed = step(&pool, &fs, generation, &mut rng);
        journal(&mut log, format!("+ {generation}"));
        for gone in destroyed {
            journal(&mut log, format!("- {gone}"));
        }
    }
}

#[test]
fn crash_snapshots_child_entry() {
    // Runs only when the parent test re-executes this binary as the child.
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child_main(PathBuf::from(dir));
    }
}

fn make_pool(dir: &Path) {
    let pool = create_pool(dir, POOL, single(dir, "v0"), tiny());
    pool.create_dataset(
        &format!("{POOL}/fs"),
        &[("recordsize".into(), "8192".into())],
        false,
    )
    .unwrap();
    pool.export().unwrap();
}

#[test]
fn kill_9_during_snapshot_create_destroy_and_rollback() {
    let dir = tempfile::tempdir().unwrap();
    make_pool(dir.path());
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x51a9);
    let mut next = 1u64;
    // Odd rounds: three more snapshots created, then a kill anywhere after them.
    let kill_at = KillPoint {
        after_ms: 20..600,
        progress: &dir.path().join("journal"),
        prefix: "+ ",
        units: 3,
        then_ms: 0..300,
    };
    for round in 0..KILL_ROUNDS as usize {
        crash_round(
            module_path!(),
            "crash_snapshots_child_entry",
            &[
                (CHILD_ENV, dir.path().display().to_string()),
                ("TARN_CRASH_START", next.to_string()),
            ],
            round,
            &mut rng,
            &kill_at,
        );

        let pool = import(dir.path(), POOL, tiny());
        let present = verify(&pool, &format!("round {round}"));
        // Durable: created (returned) and not destroyed (begun or returned).
        let journal = std::fs::read_to_string(dir.path().join("journal")).unwrap_or_default();
        let mut created = BTreeSet::new();
        let mut begun = BTreeSet::new();
        for line in journal.lines() {
            let (kind, number) = line.split_once(' ').unwrap();
            let number: u64 = number.parse().unwrap();
            match kind {
                "+" => {
                    created.insert(number);
                }
                "begin" => {
                    begun.insert(number);
                }
                "-" => {
                    created.remove(&number);
                }
                _ => panic!("journal line {line:?}"),
            }
            next = next.max(number + 1);
        }
        for generation in &present {
            assert!(
                begun.contains(generation),
                "round {round}: snapshot s{generation} was never begun"
            );
        }
        // A snapshot whose create returned exists unless a later destroy may have taken it
        // (destroys are journalled after they return, so a destroy in flight may have landed).
        let newest_created = created.iter().next_back().copied();
        if let Some(newest) = newest_created {
            assert!(
                present.contains(&newest),
                "round {round}: the newest durable snapshot s{newest} is missing"
            );
        }
        pool.export().unwrap();
        next += 1;
    }
    // The odd rounds created three snapshots each, at least.
    assert!(
        next > KILL_ROUNDS / 2 * 3,
        "the child made too few snapshots ({next}) to test anything"
    );
    let pool = import(dir.path(), POOL, tiny());
    pool.destroy_snapshots(&format!("{POOL}/fs@%"), false)
        .unwrap();
    while pool.core.freeing_bytes().unwrap() > 0 {
        pool.sync().unwrap();
    }
    verify(&pool, "after destroying every snapshot");
}

fn wrapper(plan: &Arc<FaultPlan>) -> DeviceWrapper {
    let plan = plan.clone();
    Arc::new(move |_path: &Path, device: Arc<dyn BlockDevice>| {
        Arc::new(FaultyDevice::new(device, plan.clone())) as Arc<dyn BlockDevice>
    })
}

/// Power cuts (unflushed writes lost, torn or reordered) at random points of the workload.
#[test]
fn power_cuts_during_snapshot_work() {
    let base: u64 = std::env::var("TARN_POWER_CUT_SEED")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(0x5a9c);
    let dir = tempfile::tempdir().unwrap();
    make_pool(dir.path());
    let mut acknowledged: BTreeSet<u64> = BTreeSet::new();
    let mut most_present = 0;
    let mut next = 1u64;
    for round in 0..POWER_ROUNDS {
        let seed = base + round;
        let plan = FaultPlan::new();
        plan.set_power_cut(seed);
        let mut options = ImportOptions::new(dirs(dir.path()), tiny());
        options.wrap_device = Some(wrapper(&plan));
        let (pool, _) = Pool::import(POOL, options)
            .unwrap_or_else(|error| panic!("seed {seed}: import after a power cut: {error}"));
        let present = verify(&pool, &format!("seed {seed}"));
        most_present = most_present.max(present.len());
        // Acknowledged creates survive unless a destroy of them was issued afterwards.
        for generation in &acknowledged {
            assert!(
                present.contains(generation),
                "seed {seed}: acknowledged snapshot s{generation} lost"
            );
        }
        acknowledged = present.clone();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        if rng.gen_bool(0.5) {
            plan.stop_at_write(plan.write_count() + rng.gen_range(0..400));
        } else {
            plan.stop_at_flush(plan.flush_count() + rng.gen_range(0..30));
        }
        let fs = pool.open_file_system(&format!("{POOL}/fs")).unwrap();
        for _ in 0..6 {
            let generation = next;
            next += 1;
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                write_generation(&fs, generation);
                step(&pool, &fs, generation, &mut rng)
            }));
            if plan.is_stopped() {
                // What was in flight may or may not have landed, a destroy included; it never
                // touches the two newest snapshots, so the newest acknowledged one stays.
                let newest = acknowledged.iter().next_back().copied();
                acknowledged = newest.into_iter().collect();
                break;
            }
            let destroyed = result.unwrap_or_else(|_| panic!("seed {seed}: step failed"));
            acknowledged.insert(generation);
            for gone in destroyed {
                acknowledged.remove(&gone);
            }
        }
        plan.stop_now();
        drop(fs);
        drop(pool);
    }
    assert!(
        most_present >= 4,
        "never more than {most_present} snapshots at once: the rounds tested too little"
    );
}

// Livelists: a child keeps making clones of one origin, overwrites a few records of
// each over and over (its livelist sub-lists fill with FREEs and are condensed), scatters more
// writes (several sub-lists), and destroys it through its livelist (sub-lists read by the
// livelist reader and freed by the sync), while it is killed at random points, the reader's
// reads in flight included; every import must check clean, with the origin's data intact, and
// finish the queued frees.

const LIVELIST_POOL: &str = "livecrash";
const LIVELIST_CHILD_ENV: &str = "TARN_CRASH_LIVELIST_DIR";
const ORIGIN_RECORDS: u64 = 1500;

fn livelist_tunables() -> tarn::tunables::Tunables {
    tarn::tunables::Tunables {
        livelist_max_entries: 16,
        livelist_condense_min_frees: 4,
        ..tiny()
    }
}

fn livelist_child(dir: PathBuf) {
    let start: u64 = std::env::var("TARN_CRASH_START").unwrap().parse().unwrap();
    let pool = import(&dir, LIVELIST_POOL, livelist_tunables());
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("journal"))
        .unwrap();
    for number in start.. {
        let name = format!("{LIVELIST_POOL}/c{number}");
        pool.create_clone(&format!("{LIVELIST_POOL}/fs@origin"), &name, &[])
            .unwrap();
        journal(&mut log, format!("clone {number}"));
        let clone = pool.open_file_system(&name).unwrap();
        let ino = clone.lookup(clone.root(), b"big").unwrap().ino;
        for round in 0..12u64 {
            for record in 0..6u64 {
                clone
                    .write(ino, record * 8192, &pattern(number * 1000 + round, 8192))
                    .unwrap();
            }
            for index in 0..10u64 {
                let record = (number * 131 + round * 977 + index * 7919) % ORIGIN_RECORDS;
                clone
                    .write(ino, record * 8192, &pattern(index, 8192))
                    .unwrap();
            }
            pool.sync().unwrap();
        }
        drop(clone);
        pool.destroy_dataset(&name, false).unwrap();
        journal(&mut log, format!("destroyed {number}"));
    }
}

#[test]
fn crash_livelist_child_entry() {
    if let Ok(dir) = std::env::var(LIVELIST_CHILD_ENV) {
        livelist_child(PathBuf::from(dir));
    }
}

#[test]
fn kill_9_during_livelist_condensing_and_destroy() {
    let dir = tempfile::tempdir().unwrap();
    {
        let pool = create_pool(
            dir.path(),
            LIVELIST_POOL,
            single(dir.path(), "v0"),
            livelist_tunables(),
        );
        let fs_name = format!("{LIVELIST_POOL}/fs");
        pool.create_dataset(
            &fs_name,
            &[
                ("recordsize".into(), "8192".into()),
                ("compression".into(), "off".into()),
            ],
            false,
        )
        .unwrap();
        let fs = pool.open_file_system(&fs_name).unwrap();
        let ino = fs.create(fs.root(), b"big", 0o644, 0, 0).unwrap().ino;
        let data = pattern(7, (ORIGIN_RECORDS * 8192) as usize);
        for (index, chunk) in data.chunks(1 << 20).enumerate() {
            fs.write(ino, (index << 20) as u64, chunk).unwrap();
            pool.sync().unwrap();
        }
        drop(fs);
        pool.create_snapshots(&[format!("{fs_name}@origin")], false)
            .unwrap();
        pool.export().unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x11fe);
    let mut next = 1u64;
    let (mut livelists_seen, mut destroys_caught) = (0, 0);
    // Odd rounds: two more clones made, then a kill anywhere after them.
    let kill_at = KillPoint {
        after_ms: 50..800,
        progress: &dir.path().join("journal"),
        prefix: "clone ",
        units: 2,
        then_ms: 0..400,
    };
    for round in 0..8 {
        crash_round(
            module_path!(),
            "crash_livelist_child_entry",
            &[
                (LIVELIST_CHILD_ENV, dir.path().display().to_string()),
                ("TARN_CRASH_START", next.to_string()),
            ],
            round,
            &mut rng,
            &kill_at,
        );

        let pool = import(dir.path(), LIVELIST_POOL, livelist_tunables());
        let report = check_pool(&pool, false).unwrap();
        assert!(report.is_clean(), "round {round}: {report:#?}");
        if pool.core.freeing_bytes().unwrap() > 0 {
            destroys_caught += 1;
        }
        let journal = std::fs::read_to_string(dir.path().join("journal")).unwrap_or_default();
        for line in journal.lines() {
            let number: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            next = next.max(number + 1);
        }
        // A clone caught alive keeps its livelist; destroy it through it.
        for info in pool.datasets() {
            if info.origin.is_some() {
                if pool.destroy_path(&info.name).unwrap()
                    == tarn::pool::livelists::DestroyPath::Livelist
                {
                    livelists_seen += 1;
                }
                pool.destroy_dataset(&info.name, false).unwrap();
            }
        }
        while pool.core.freeing_bytes().unwrap() > 0 {
            pool.sync().unwrap();
        }
        pool.sync().unwrap();
        let report = check_pool(&pool, false).unwrap();
        assert!(report.is_clean(), "round {round}, frees done: {report:#?}");
        let fs = pool
            .open_file_system(&format!("{LIVELIST_POOL}/fs"))
            .unwrap();
        let attr = fs.lookup(fs.root(), b"big").unwrap();
        assert!(
            fs.read(attr.ino, 0, attr.size as usize).unwrap()
                == pattern(7, (ORIGIN_RECORDS * 8192) as usize),
            "round {round}: the origin's data changed"
        );
        drop(fs);
        pool.export().unwrap();
        next += 1;
    }
    assert!(next > 8, "the child made too few clones ({next})");
    assert!(livelists_seen > 0, "no clone was caught with its livelist");
    eprintln!("{next} clones; {livelists_seen} caught with a livelist, {destroys_caught} kills during a livelist destroy");
}
