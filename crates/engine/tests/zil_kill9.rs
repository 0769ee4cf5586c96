//! kill -9 of a process in an fsync loop (zil/): a child appends fixed-size chunks to a few
//! files, fsyncing each append and reporting the file's length after every fsync that returned,
//! with a rename now and then (a change the log does not record, so that fsync waits for its
//! txg); it is killed with SIGKILL at a random moment, ten times in a row on one pool. After
//! each kill the parent imports the pool (claim), opens the file system (replay) and checks
//! that every file is at least as long as the child last reported, holds the right bytes
//! everywhere, and ends on a chunk boundary (no append half there); `check` must be clean.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use tarn::fs::{FileSystem, FsError};

use common::*;

const FILES: u64 = 3;
const ROUNDS: usize = 10;
const CHILD_ENV: &str = "TARN_ZIL_KILL9_CHILD_DIR";
const POOL: &str = "zilkill";

fn chunk(file: u64) -> u64 {
    3000 + file * 1111
}

fn byte_at(file: u64, offset: u64) -> u8 {
    ((offset.wrapping_mul(31) + file * 7) ^ (offset >> 9)) as u8
}

fn bytes(file: u64, offset: u64, length: u64) -> Vec<u8> {
    (offset..offset + length)
        .map(|at| byte_at(file, at))
        .collect()
}

fn name(file: u64) -> String {
    format!("f{file}")
}

fn open_fs(pool: &tarn::pool::Pool) -> FileSystem {
    FileSystem::open(pool.root_objset(), pool.core.txgs.clone()).unwrap()
}

fn child_main(dir: PathBuf) {
    let pool = import(&dir, POOL, tiny());
    let fs = open_fs(&pool);
    let root = fs.root();
    let mut report = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("fsynced"))
        .unwrap();
    std::fs::write(dir.join("started"), b"").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(std::process::id() as u64);
    for step in 0u64.. {
        let file = rng.gen_range(0..FILES);
        let ino = fs.lookup(root, name(file).as_bytes()).unwrap().ino;
        let length = fs.getattr(ino).unwrap().size;
        fs.write(ino, length, &bytes(file, length, chunk(file)))
            .unwrap();
        fs.fsync(ino).unwrap();
        report
            .write_all(format!("{file} {}\n", length + chunk(file)).as_bytes())
            .unwrap();
        if step % 16 == 15 {
            let (from, to) = if step % 32 == 15 {
                (&b"x"[..], &b"y"[..])
            } else {
                (&b"y"[..], &b"x"[..])
            };
            match fs.create(root, from, 0o644, 0, 0) {
                Ok(_) | Err(FsError::Exists) => {}
                Err(error) => panic!("create: {error}"),
            }
            fs.rename(root, from, root, to, 0).unwrap();
        }
    }
}

#[test]
fn zil_kill9_child_entry() {
    // Runs only when the parent test re-executes this binary as the child.
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child_main(PathBuf::from(dir));
    }
}

fn reported(dir: &Path) -> BTreeMap<u64, u64> {
    let mut lengths = BTreeMap::new();
    for line in std::fs::read_to_string(dir.join("fsynced"))
        .unwrap_or_default()
        .split_inclusive('\n')
    {
        let Some(line) = line.strip_suffix('\n') else {
            continue;
        };
        let mut parts = line.split(' ');
        if let (Some(Ok(file)), Some(Ok(length))) = (
            parts.next().map(str::parse::<u64>),
            parts.next().map(str::parse::<u64>),
        ) {
            let known = lengths.entry(file).or_insert(0);
            *known = length.max(*known);
        }
    }
    lengths
}

#[test]
fn kill9_during_fsync_loops_loses_no_fsynced_append() {
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_path_buf();
    {
        let pool = create_pool(&dir_path, POOL, single(&dir_path, "v.img"), tiny());
        let fs = pool.file_system().unwrap();
        for file in 0..FILES {
            fs.create(fs.root(), name(file).as_bytes(), 0o644, 0, 0)
                .unwrap();
        }
        drop(fs);
        pool.export().unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(19);
    let mut total_reported = 0;
    let mut replayed = 0;
    for round in 0..ROUNDS {
        let _ = std::fs::remove_file(dir_path.join("started"));
        let child = spawn_child(
            "zil_kill9_child_entry",
            &[(CHILD_ENV, dir_path.display().to_string())],
        );
        wait_for_file(&dir_path.join("started"), Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(rng.gen_range(50..400)));
        kill_child(child);
        let lengths = reported(&dir_path);
        total_reported = lengths.values().sum();

        let pool = import(&dir_path, POOL, tiny());
        let fs = open_fs(&pool);
        replayed += fs
            .intent_log()
            .unwrap()
            .stats
            .replayed
            .load(std::sync::atomic::Ordering::Relaxed);
        for file in 0..FILES {
            let ino = fs.lookup(fs.root(), name(file).as_bytes()).unwrap().ino;
            let size = fs.getattr(ino).unwrap().size;
            let acknowledged = lengths.get(&file).copied().unwrap_or(0);
            assert!(
                size >= acknowledged,
                "round {round}: file {file} is {size} bytes, {acknowledged} were fsynced"
            );
            assert_eq!(
                size % chunk(file),
                0,
                "round {round}: file {file} ends inside an append ({size} bytes)"
            );
            let data = fs.read(ino, 0, size as usize).unwrap();
            assert!(
                data == bytes(file, 0, size),
                "round {round}: file {file} holds wrong bytes"
            );
        }
        pool.sync().unwrap();
        let report = tarn::check::check_pool(&pool, false).unwrap();
        assert!(report.is_clean(), "round {round}: {report:#?}");
        drop(fs);
        pool.export().unwrap();
    }
    assert!(total_reported > 0, "the child never reported an fsync");
    assert!(replayed > 0, "no round replayed a log record");
    println!("{replayed} records replayed over {ROUNDS} rounds");
}
