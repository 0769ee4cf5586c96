//! kill -9 of a process in an fsync loop (zil/): a child appends fixed-size chunks to a few
//! files, fsyncing each append and reporting the file's length after every fsync that returned,
//! with a create and a rename now and then; between appends it also makes, renames, links and
//! unlinks small files in a directory, fsyncing each (the namespace records of the log) and
//! journaling each one before and after. It is killed with SIGKILL at a random moment, ten times
//! in a row on one pool. After each kill the parent imports the pool (claim), opens the file
//! system (replay) and checks that every file is at least as long as the child last reported,
//! holds the right bytes everywhere, and ends on a chunk boundary (no append half there); that
//! every name whose change was acknowledged names the object it did, with its contents, unless
//! the change in flight at the kill touched it; `check` must be clean.

use crate::common;

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
/// The directory of the namespace work.
const NAMES_DIR: &[u8] = b"d";

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

fn child_main(dir: PathBuf) {
    let pool = import(&dir, POOL, tiny());
    let fs = open_fs(&pool);
    let root = fs.root();
    let mut report = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("fsynced"))
        .unwrap();
    let mut journal = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("names"))
        .unwrap();
    let names_dir = fs.lookup(root, NAMES_DIR).unwrap().ino;
    let mut live: Vec<(String, u64)> = Vec::new();
    std::fs::write(dir.join("started"), b"").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(std::process::id() as u64);
    let tag = std::process::id();
    for step in 0u64.. {
        namespace_step(&fs, names_dir, &mut journal, &mut live, &mut rng, tag, step);
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

/// One namespace change in `dir` with its fsync, journaled as `? OP NAME` before and
/// `OP NAME INO` once the fsync returned: C create (with contents), R rename (`R OLD NEW INO`),
/// L link, U unlink.
fn namespace_step(
    fs: &FileSystem,
    dir: u64,
    journal: &mut std::fs::File,
    live: &mut Vec<(String, u64)>,
    rng: &mut rand::rngs::StdRng,
    tag: u32,
    step: u64,
) {
    let mut say = |line: String| journal.write_all(format!("{line}\n").as_bytes()).unwrap();
    let new_name = format!("n{tag}-{step}");
    match rng.gen_range(0..4) {
        1 if !live.is_empty() => {
            let (old, ino) = live.swap_remove(rng.gen_range(0..live.len()));
            say(format!("? R {old} {new_name}"));
            fs.rename(dir, old.as_bytes(), dir, new_name.as_bytes(), 0)
                .unwrap();
            fs.fsync(dir).unwrap();
            say(format!("R {old} {new_name} {ino}"));
            live.push((new_name, ino));
        }
        2 if !live.is_empty() => {
            let (_, ino) = live[rng.gen_range(0..live.len())].clone();
            say(format!("? L {new_name}"));
            fs.link(ino, dir, new_name.as_bytes()).unwrap();
            fs.fsync(ino).unwrap();
            say(format!("L {new_name} {ino}"));
            live.push((new_name, ino));
        }
        3 if live.len() > 4 => {
            let (old, ino) = live.swap_remove(rng.gen_range(0..live.len()));
            say(format!("? U {old}"));
            fs.unlink(dir, old.as_bytes()).unwrap();
            fs.fsync(dir).unwrap();
            say(format!("U {old} {ino}"));
        }
        _ => {
            say(format!("? C {new_name}"));
            let ino = fs
                .create(dir, new_name.as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            fs.write(ino, 0, contents(ino).as_bytes()).unwrap();
            fs.fsync(ino).unwrap();
            say(format!("C {new_name} {ino}"));
            live.push((new_name, ino));
        }
    }
}

fn contents(ino: u64) -> String {
    format!("contents of object {ino}")
}

/// The names the journal says were acknowledged (name to object), and the names a change in
/// flight at a kill (this round's or an earlier one's) may have touched.
fn journaled(dir: &Path) -> (BTreeMap<String, u64>, Vec<String>) {
    let mut names = BTreeMap::new();
    let mut in_flight: Vec<String> = Vec::new();
    let mut uncertain: Vec<String> = Vec::new();
    let text = std::fs::read_to_string(dir.join("names")).unwrap_or_default();
    for line in text.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            continue;
        };
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["?", _, touched @ ..] => {
                // A change announced and never acknowledged was cut by a kill.
                uncertain.append(&mut in_flight);
                in_flight = touched.iter().map(|word| word.to_string()).collect();
            }
            ["C" | "L", name, ino] => {
                names.insert(name.to_string(), ino.parse().unwrap());
                in_flight.clear();
            }
            ["R", old, new, ino] => {
                names.remove(*old);
                names.insert(new.to_string(), ino.parse().unwrap());
                in_flight.clear();
            }
            ["U", old, _] => {
                names.remove(*old);
                in_flight.clear();
            }
            _ => panic!("journal line {line:?}"),
        }
    }
    uncertain.append(&mut in_flight);
    (names, uncertain)
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
        fs.mkdir(fs.root(), NAMES_DIR, 0o755, 0, 0).unwrap();
        drop(fs);
        pool.export().unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(19);
    let mut total_reported = 0;
    let mut total_names = 0;
    let mut replayed = 0;
    for round in 0..ROUNDS {
        let _ = std::fs::remove_file(dir_path.join("started"));
        let child = spawn_child(
            module_path!(),
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
        let (names, in_flight) = journaled(&dir_path);
        let names_dir = fs.lookup(fs.root(), NAMES_DIR).unwrap().ino;
        for (name, ino) in &names {
            if in_flight.contains(name) {
                continue;
            }
            let found = fs.lookup(names_dir, name.as_bytes()).map(|attr| attr.ino);
            assert_eq!(
                found.ok(),
                Some(*ino),
                "round {round}: acknowledged name {name}"
            );
            assert_eq!(
                read_all(&fs, *ino),
                contents(*ino).as_bytes(),
                "round {round}: contents of {name}"
            );
        }
        total_names = names.len();
        pool.sync().unwrap();
        let report = tarn::check::check_pool(&pool, false).unwrap();
        assert!(report.is_clean(), "round {round}: {report:#?}");
        drop(fs);
        pool.export().unwrap();
    }
    assert!(total_reported > 0, "the child never reported an fsync");
    assert!(replayed > 0, "no round replayed a log record");
    assert!(total_names > 5, "only {total_names} names acknowledged");
    println!("{replayed} records replayed over {ROUNDS} rounds");
}
