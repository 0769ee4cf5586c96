//! Crash test for the dataset hierarchy: a child process creates file systems, writes a file
//! into each and destroys older ones, and is killed with SIGKILL at a random moment, 15 times
//! on one pool. After each kill the parent imports the pool without force, runs `check` (which
//! also verifies the hierarchy: records, names, totals, properties) and compares the datasets
//! with the child's journal:
//! - a dataset whose create returned (durable on return) exists, unless its destroy had begun;
//! - a dataset whose destroy returned does not exist;
//! - no dataset exists that the child never began to create;
//! - every file holds a prefix of its data, in whole write chunks (writes reach disk in
//!   order, so a crash keeps a prefix), and its local property is intact.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use tarn::dataset::props::{Property, PropertySource};
use tarn::pool::Pool;

use common::*;

const ROUNDS: usize = 15;
const CHILD_ENV: &str = "TARN_CRASH_DATASETS_DIR";
const CHUNK: usize = 16 << 10;
/// Datasets created before the round's first that the parent keeps (see the loop).
const KEPT_FROM_EARLIER_ROUNDS: u64 = 16;

fn file_length(index: u64) -> usize {
    ((index * 104_729) % (400 << 10)) as usize + 1
}

/// Journal lines: `c N` create begun, `+ N` create returned, `~ N` destroy begun, `- N`
/// destroy returned. One write(2) per line, so a kill never glues two lines together.
fn journal(file: &mut std::fs::File, line: String) {
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
    file.sync_all().unwrap();
}

fn child_main(dir: PathBuf) {
    let start: u64 = std::env::var("TARN_CRASH_START").unwrap().parse().unwrap();
    let pool = import(&dir, "crash", tiny());
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("journal"))
        .unwrap();
    for index in start.. {
        let name = format!("crash/d{index}");
        journal(&mut log, format!("c {index}"));
        pool.create_dataset(
            &name,
            &[("recordsize".into(), format!("{}", 4096 << (index % 3)))],
            false,
        )
        .unwrap();
        journal(&mut log, format!("+ {index}"));
        let fs = pool.open_file_system(&name).unwrap();
        let attr = fs.create(fs.root(), b"data", 0o644, 0, 0).unwrap();
        let data = pattern(index, file_length(index));
        for (chunk, bytes) in data.chunks(CHUNK).enumerate() {
            fs.write(attr.ino, (chunk * CHUNK) as u64, bytes).unwrap();
        }
        drop(fs);
        if index % 2 == 1 && index >= start + 3 {
            let victim = index - 3;
            journal(&mut log, format!("~ {victim}"));
            pool.destroy_dataset(&format!("crash/d{victim}"), false)
                .unwrap();
            journal(&mut log, format!("- {victim}"));
        }
    }
}

#[test]
fn crash_datasets_child_entry() {
    // Runs only when the parent test re-executes this binary as the child.
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child_main(PathBuf::from(dir));
    }
}

/// The last whole journal line about each dataset.
fn journal_state(dir: &Path) -> BTreeMap<u64, char> {
    let text = std::fs::read_to_string(dir.join("journal")).unwrap_or_default();
    let mut state = BTreeMap::new();
    for line in text.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            continue;
        };
        let (event, index) = line.split_once(' ').unwrap();
        state.insert(index.parse().unwrap(), event.chars().next().unwrap());
    }
    state
}

#[test]
fn kill9_during_dataset_create_write_destroy_keeps_the_hierarchy_whole() {
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_path_buf();
    create_pool(&dir_path, "crash", single(&dir_path, "vdev.img"), tiny())
        .export()
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let mut next_start = 0u64;
    let mut survivors_checked = 0;
    // Odd rounds: two more datasets created, then a kill anywhere after them.
    let kill_at = KillPoint {
        after_ms: 200..900,
        progress: &dir_path.join("journal"),
        prefix: "+ ",
        units: 2,
        then_ms: 0..600,
    };
    for round in 0..ROUNDS {
        crash_round(
            module_path!(),
            "crash_datasets_child_entry",
            &[
                (CHILD_ENV, dir_path.display().to_string()),
                ("TARN_CRASH_START", next_start.to_string()),
            ],
            round,
            &mut rng,
            &kill_at,
        );

        let (pool, _) = Pool::import(
            "crash",
            tarn::pool::ImportOptions::new(dirs(&dir_path), tiny()),
        )
        .unwrap_or_else(|e| panic!("round {round}: import after kill -9 failed: {e}"));
        assert_clean(&pool);
        let state = journal_state(&dir_path);
        let existing: BTreeMap<u64, ()> = pool
            .datasets()
            .into_iter()
            .filter_map(|info| info.name.strip_prefix("crash/d")?.parse().ok())
            .map(|index| (index, ()))
            .collect();
        for (&index, &event) in &state {
            let exists = existing.contains_key(&index);
            match event {
                '+' => assert!(exists, "round {round}: d{index} was created but is gone"),
                '-' => assert!(!exists, "round {round}: d{index} was destroyed but exists"),
                _ => {}
            }
        }
        for &index in existing.keys() {
            assert!(
                state.contains_key(&index),
                "round {round}: d{index} exists but was never created"
            );
            let name = format!("crash/d{index}");
            assert_eq!(
                pool.property(&name, Property::Recordsize).unwrap(),
                (format!("{}", 4096 << (index % 3)), PropertySource::Local),
                "round {round}: {name}'s property"
            );
            let fs = pool.open_file_system(&name).unwrap();
            let Ok(attr) = fs.lookup(fs.root(), b"data") else {
                continue;
            };
            let length = attr.size as usize;
            let full = pattern(index, file_length(index));
            assert!(
                length == full.len() || length.is_multiple_of(CHUNK),
                "round {round}: {name}/data has {length} bytes, not a whole number of writes"
            );
            assert_eq!(
                fs.read(attr.ino, 0, length).unwrap(),
                &full[..length],
                "round {round}: {name}/data is not a prefix of what was written"
            );
            survivors_checked += 1;
        }
        // The survivors of earlier rounds go (journaled as destroyed), so that the pool does
        // not fill over the rounds: on an idle machine a child creates dozens a round, and
        // half of them are never destroyed by it.
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(dir_path.join("journal"))
            .unwrap();
        for &index in existing.keys() {
            if index + KEPT_FROM_EARLIER_ROUNDS < next_start {
                journal(&mut log, format!("~ {index}"));
                pool.destroy_dataset(&format!("crash/d{index}"), false)
                    .unwrap();
                journal(&mut log, format!("- {index}"));
            }
        }
        pool.export().unwrap();
        next_start = state.keys().max().map_or(0, |max| max + 1);
    }
    eprintln!(
        "{ROUNDS} kills, {next_start} datasets created in all, {survivors_checked} surviving datasets verified"
    );
    assert!(
        survivors_checked >= ROUNDS,
        "the children did too little to test anything ({survivors_checked} datasets checked)"
    );
}
