//! Crash test: a child process writes through the engine and is killed with SIGKILL at a random
//! moment, 50 times in a row on one pool. After each kill the parent re-imports the pool (no
//! force needed: the dead child's flocks are gone), runs `check` (must be clean), and verifies
//! that every generation the child reported as synced is intact: each object holds either the
//! last generation reported for it or a newer one the child synced but did not live to report,
//! never a mix and never an older one.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use tarn::block::blkptr::{Compression, ObjectType};
use tarn::pool::Pool;
use tarn::types::ObjectId;

use common::*;

const OBJECTS: u64 = 8;
const ROUNDS: usize = 50;
const CHILD_ENV: &str = "TARN_CRASH_CHILD_DIR";

fn generation_length(generation: u64) -> usize {
    ((generation * 7919) % 60_000 + 1) as usize
}

/// The object a generation is written to.
fn object_of(objects: &[ObjectId], generation: u64) -> ObjectId {
    objects[(generation % OBJECTS) as usize]
}

fn read_objects(dir: &Path) -> Vec<ObjectId> {
    std::fs::read_to_string(dir.join("objects"))
        .unwrap()
        .split_whitespace()
        .map(|word| ObjectId(word.parse().unwrap()))
        .collect()
}

/// The child: import, then write generations forever, reporting each one after its sync.
fn child_main(dir: PathBuf) {
    let start: u64 = std::env::var("TARN_CRASH_START").unwrap().parse().unwrap();
    let pool = import(&dir, "crash", tiny());
    let objects = read_objects(&dir);
    let objset = pool.root_objset();
    let mut report = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("synced"))
        .unwrap();
    for generation in start.. {
        let object = object_of(&objects, generation);
        let data = pattern(generation, generation_length(generation));
        {
            let hold = pool.assign().unwrap();
            let tx = hold.tx();
            objset.free_range(&tx, object, 0, u64::MAX).unwrap();
            objset.write(&tx, object, 0, &data).unwrap();
            let mut bonus = generation.to_le_bytes().to_vec();
            bonus.extend_from_slice(&(data.len() as u64).to_le_bytes());
            objset
                .set_bonus(&tx, object, ObjectType::None, &bonus)
                .unwrap();
        }
        if generation % 3 == 0 {
            pool.sync().unwrap();
            // One write(2) per line: a kill between the digits and the newline of a
            // formatted write would glue this number to the next child's first one.
            report
                .write_all(format!("{generation}\n").as_bytes())
                .unwrap();
            report.sync_all().unwrap();
        }
    }
}

#[test]
fn crash_child_entry() {
    // Runs only when the parent test re-executes this binary as the child.
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child_main(PathBuf::from(dir));
    }
}

fn last_reported(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("synced"))
        .ok()?
        // Only whole lines: a line without its newline was cut short by the kill.
        .split_inclusive('\n')
        .filter_map(|line| line.strip_suffix('\n')?.parse().ok())
        .max()
}

#[test]
fn kill9_fifty_times_then_import_check_and_verify() {
    // TARN_TEST_KEEP_DIR=path keeps the pool for inspection after a failure.
    let dir = tempfile::tempdir().unwrap();
    let dir_path = match std::env::var("TARN_TEST_KEEP_DIR") {
        Ok(keep) => {
            let _ = std::fs::remove_dir_all(&keep);
            std::fs::create_dir_all(&keep).unwrap();
            PathBuf::from(keep)
        }
        Err(_) => dir.path().to_path_buf(),
    };
    let objects: Vec<ObjectId> = {
        let pool = create_pool(&dir_path, "crash", single(&dir_path, "vdev.img"), tiny());
        let objset = pool.root_objset();
        let objects: Vec<ObjectId> = (0..OBJECTS)
            .map(|_| create_file(&pool, &objset, 4096, Compression::Lz4))
            .collect();
        pool.export().unwrap();
        objects
    };
    std::fs::write(
        dir_path.join("objects"),
        objects
            .iter()
            .map(|o| o.0.to_string())
            .collect::<Vec<_>>()
            .join(" "),
    )
    .unwrap();

    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    // Per object: the newest generation known to be synced.
    let mut known: BTreeMap<ObjectId, u64> = BTreeMap::new();
    let mut next_start = 1u64;
    // Odd rounds: two more syncs reported, then a kill anywhere after them.
    let kill_at = KillPoint {
        after_ms: 150..700,
        progress: &dir_path.join("synced"),
        prefix: "",
        units: 2,
        then_ms: 0..500,
    };
    for round in 0..ROUNDS {
        crash_round(
            module_path!(),
            "crash_child_entry",
            &[
                (CHILD_ENV, dir_path.display().to_string()),
                ("TARN_CRASH_START", next_start.to_string()),
            ],
            round,
            &mut rng,
            &kill_at,
        );

        let reported = last_reported(&dir_path).unwrap_or(0);
        if reported >= next_start {
            for generation in next_start..=reported {
                known.insert(object_of(&objects, generation), generation);
            }
        }
        let (pool, _) = Pool::import(
            "crash",
            tarn::pool::ImportOptions::new(dirs(&dir_path), tiny()),
        )
        .unwrap_or_else(|e| panic!("round {round}: import after kill -9 failed: {e}"));
        assert_clean(&pool);
        let objset = pool.root_objset();
        let mut newest_seen = reported;
        for &object in &objects {
            let bonus = objset.bonus(object).unwrap();
            let (generation, length) = if bonus.len() == 16 {
                (
                    u64::from_le_bytes(bonus[..8].try_into().unwrap()),
                    u64::from_le_bytes(bonus[8..].try_into().unwrap()) as usize,
                )
            } else {
                (0, 0)
            };
            let expected_minimum = known.get(&object).copied().unwrap_or(0);
            assert!(
                generation >= expected_minimum,
                "round {round}: object {object} holds generation {generation}, but {expected_minimum} was reported synced"
            );
            if generation > 0 {
                assert_eq!(
                    object_of(&objects, generation),
                    object,
                    "round {round}: generation in the wrong object"
                );
                assert_eq!(length, generation_length(generation));
                let mut data = vec![0u8; length + 100];
                objset.read(object, 0, &mut data).unwrap();
                assert_eq!(
                    &data[..length],
                    &pattern(generation, length)[..],
                    "round {round}: object {object} generation {generation} damaged"
                );
                assert!(
                    data[length..].iter().all(|&b| b == 0),
                    "round {round}: stale data past the end of object {object}"
                );
                known.insert(object, generation);
                newest_seen = newest_seen.max(generation);
            }
        }
        pool.export().unwrap();
        next_start = newest_seen + 1 + OBJECTS;
    }
    assert!(
        known.len() as u64 >= OBJECTS / 2,
        "the children synced too little to test anything: {known:?}"
    );
}
