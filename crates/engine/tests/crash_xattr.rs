//! Crash test for extended attributes: a child process sets, replaces and removes xattrs of a
//! few files (small ones in the znode, medium ones inline in the xattr directory, large ones
//! in value objects, moving between the three), and replaces whole files that carry xattrs,
//! and is killed with SIGKILL at a random moment, 25 times in a row on one pool. After each
//! kill the parent re-imports the pool, runs `check` (clean: no block of a value object or
//! xattr directory leaked or lost) and verifies that every file holds the generation the child
//! last reported as synced for it, or a newer one, with every xattr of that generation whole.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use tarn::fs::FsError;

use common::*;

const FILES: u64 = 6;
const ROUNDS: usize = 25;
const CHILD_ENV: &str = "TARN_XATTR_CRASH_CHILD_DIR";

fn file_name(generation: u64) -> String {
    format!("f{}", generation % FILES)
}

/// The xattrs generation `generation` leaves on its file: a generation stamp (SA) and a value
/// whose size cycles through the SA region, an inline directory entry and a value object.
fn xattrs_of(generation: u64) -> Vec<(&'static str, Vec<u8>)> {
    let length = match generation % 3 {
        0 => 40,
        1 => 900,
        _ => 20_000 + (generation % 7) as usize * 1000,
    };
    vec![
        ("user.gen", generation.to_le_bytes().to_vec()),
        ("user.value", pattern(generation, length)),
    ]
}

/// The child: import, then write generations forever, reporting each one after its sync.
fn child_main(dir: PathBuf) {
    let start: u64 = std::env::var("TARN_CRASH_START").unwrap().parse().unwrap();
    let pool = import(&dir, "xcrash", tiny());
    let fs = open_fs(&pool);
    let root = fs.root();
    let mut report = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("synced"))
        .unwrap();
    for generation in start.. {
        let name = file_name(generation);
        // Every fourth generation replaces the file (its old xattr objects must be freed);
        // the others change the xattrs in place, removing the old value first on odd ones.
        if generation % 4 == 0 {
            let temporary = format!("{name}.new");
            // A kill between the create and the rename may have left one behind.
            match fs.unlink(root, temporary.as_bytes()) {
                Ok(()) | Err(FsError::NotFound) => {}
                Err(error) => panic!("unlink: {error}"),
            }
            let ino = fs
                .create(root, temporary.as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            for (key, value) in xattrs_of(generation) {
                fs.setxattr(ino, key.as_bytes(), &value, 0).unwrap();
            }
            fs.rename(root, temporary.as_bytes(), root, name.as_bytes(), 0)
                .unwrap();
        } else {
            let ino = fs.lookup(root, name.as_bytes()).unwrap().ino;
            if generation % 2 == 1 {
                match fs.removexattr(ino, b"user.value") {
                    Ok(()) | Err(FsError::NoData) => {}
                    Err(error) => panic!("removexattr: {error}"),
                }
            }
            for (key, value) in xattrs_of(generation) {
                fs.setxattr(ino, key.as_bytes(), &value, 0).unwrap();
            }
        }
        if generation % 3 == 0 {
            pool.sync().unwrap();
            report
                .write_all(format!("{generation}\n").as_bytes())
                .unwrap();
            report.sync_all().unwrap();
        }
    }
}

#[test]
fn crash_xattr_child_entry() {
    // Runs only when the parent test re-executes this binary as the child.
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child_main(PathBuf::from(dir));
    }
}

fn last_reported(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("synced"))
        .ok()?
        .split_inclusive('\n')
        .filter_map(|line| line.strip_suffix('\n')?.parse().ok())
        .max()
}

#[test]
fn kill9_while_changing_xattrs_then_import_check_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_path_buf();
    {
        // Generation 0 .. FILES-1 of every file, synced, before any child runs.
        let pool = create_pool(&dir_path, "xcrash", single(&dir_path, "v.img"), tiny());
        let fs = pool.file_system().unwrap();
        for generation in 0..FILES {
            let ino = fs
                .create(fs.root(), file_name(generation).as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            for (key, value) in xattrs_of(generation) {
                fs.setxattr(ino, key.as_bytes(), &value, 0).unwrap();
            }
        }
        drop(fs);
        pool.export().unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    // Per file: the newest generation known to be synced.
    let mut known: BTreeMap<String, u64> = (0..FILES).map(|g| (file_name(g), g)).collect();
    let mut next_start = FILES;
    // Odd rounds: four more syncs reported (every third generation: ten generations at
    // least), then a kill anywhere after them.
    let kill_at = KillPoint {
        after_ms: 150..600,
        progress: &dir_path.join("synced"),
        prefix: "",
        units: 4,
        then_ms: 0..400,
    };
    for round in 0..ROUNDS {
        crash_round(
            module_path!(),
            "crash_xattr_child_entry",
            &[
                (CHILD_ENV, dir_path.display().to_string()),
                ("TARN_CRASH_START", next_start.to_string()),
            ],
            round,
            &mut rng,
            &kill_at,
        );
        let reported = last_reported(&dir_path).unwrap_or(0);
        for generation in next_start..=reported {
            known.insert(file_name(generation), generation);
        }
        let pool = import(&dir_path, "xcrash", tiny());
        assert_clean(&pool);
        let fs = open_fs(&pool);
        let mut newest = reported.max(next_start - 1);
        for (name, &minimum) in &known {
            let ino = fs
                .lookup(fs.root(), name.as_bytes())
                .unwrap_or_else(|e| panic!("round {round}: {name}: {e}"))
                .ino;
            let stamp = fs.getxattr(ino, b"user.gen").unwrap();
            let generation = u64::from_le_bytes(stamp.try_into().expect("8-byte stamp"));
            assert!(
                generation >= minimum,
                "round {round}: {name} holds generation {generation}, {minimum} was synced"
            );
            assert_eq!(file_name(generation), *name, "round {round}");
            for (key, value) in xattrs_of(generation) {
                assert_eq!(
                    fs.getxattr(ino, key.as_bytes()).unwrap(),
                    value,
                    "round {round}: {name} {key} of generation {generation}"
                );
            }
            newest = newest.max(generation);
        }
        drop(fs);
        // The drain at open may have removed files the child parked; sync that before the
        // next child imports.
        pool.export().unwrap();
        next_start = newest + 1;
    }
    // The children did work: the test is not vacuous.
    // The rounds killed after work synced ten generations each, at least.
    assert!(
        next_start >= FILES + 10 * (ROUNDS / 2) as u64,
        "only {} generations in {ROUNDS} rounds",
        next_start - FILES
    );
    eprintln!("{} generations in {ROUNDS} rounds", next_start - FILES);
}
