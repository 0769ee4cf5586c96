//! 100k entries in one directory: create, lookup, readdir (every entry exactly once) and
//! unlink, with the time per entry of the first and last 10k printed and loosely bounded so
//! that a directory whose operations grow with its size (a linear scan) fails the test.

use crate::common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tarn::fs::FileSystem;
use tarn::pool::{CreateOptions, Pool};

use common::*;

const ENTRIES: usize = 100_000;
const WINDOW: usize = 10_000;

fn name(i: usize) -> Vec<u8> {
    format!("file-{i:07}").into_bytes()
}

/// Run `op` for 0..ENTRIES, timing the first and last WINDOW calls; returns µs per entry.
fn timed(what: &str, mut op: impl FnMut(usize)) -> (f64, f64) {
    let mut first = Duration::ZERO;
    let mut last = Duration::ZERO;
    for i in 0..ENTRIES {
        let start = Instant::now();
        op(i);
        let spent = start.elapsed();
        if i < WINDOW {
            first += spent;
        } else if i >= ENTRIES - WINDOW {
            last += spent;
        }
    }
    let per_entry = |total: Duration| total.as_secs_f64() * 1e6 / WINDOW as f64;
    let (first, last) = (per_entry(first), per_entry(last));
    println!("{what}: first {WINDOW}: {first:.1} µs/entry, last {WINDOW}: {last:.1} µs/entry");
    (first, last)
}

fn assert_flat(what: &str, (first, last): (f64, f64)) {
    // Loose: the last 10k may cost more (deeper trees, colder cache, syncs in flight), but a
    // cost linear in the directory size would be ~10x here, on top of a loaded machine's noise
    // (the tiny configuration's 1 MiB cache also makes the last lookups read from disk).
    assert!(
        last < first * 6.0 + 100.0,
        "{what}: {last:.1} µs/entry at 100k entries vs {first:.1} at the start"
    );
}

#[test]
fn hundred_thousand_entries_in_one_directory() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::create(CreateOptions {
        name: "fsbig".into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: single(dir.path(), "d0"),
        create_size: Some(1 << 30),
        force: false,
        tunables: tiny(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })
    .expect("create pool");
    let fs = pool.file_system().unwrap();
    let big = fs.mkdir(fs.root(), b"big", 0o755, 0, 0).unwrap().ino;

    let mut inodes = vec![0u64; ENTRIES];
    let create = timed("create", |i| {
        inodes[i] = fs.create(big, &name(i), 0o644, 0, 0).unwrap().ino;
    });
    assert_eq!(fs.getattr(big).unwrap().size, ENTRIES as u64);
    assert_eq!(fs.size(big).unwrap(), ENTRIES as u64);
    let lookup = timed("lookup", |i| {
        assert_eq!(fs.lookup(big, &name(i)).unwrap().ino, inodes[i]);
    });

    let mut seen = HashSet::with_capacity(ENTRIES);
    let mut cookie = 0;
    let start = Instant::now();
    loop {
        let entries = fs.readdir(big, cookie, 500).unwrap();
        let Some(last) = entries.last() else { break };
        cookie = last.next_cookie;
        for entry in entries {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            assert!(seen.insert(entry.name.clone()), "{:?} twice", entry.name);
        }
    }
    println!(
        "readdir: {:.1} µs/entry",
        start.elapsed().as_secs_f64() * 1e6 / ENTRIES as f64
    );
    assert_eq!(seen.len(), ENTRIES);
    assert!((0..ENTRIES).all(|i| seen.contains(&name(i))));

    // Export and import between the phases: the directory is read back from disk.
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "fsbig", tiny());
    let fs = FileSystem::open(pool.root_objset(), pool.core.txgs.clone()).unwrap();
    assert_eq!(
        fs.lookup(big, &name(ENTRIES - 1)).unwrap().ino,
        inodes[ENTRIES - 1]
    );

    let unlink = timed("unlink", |i| {
        fs.unlink(big, &name(i)).unwrap();
    });
    assert_eq!(fs.getattr(big).unwrap().size, 0);
    assert_eq!(fs.size(big).unwrap(), 0);
    assert_eq!(fs.readdir(big, 2, 10).unwrap().len(), 0);
    fs.rmdir(fs.root(), b"big").unwrap();

    assert_flat("create", create);
    assert_flat("lookup", lookup);
    assert_flat("unlink", unlink);
    assert_clean(&pool);
    pool.export().unwrap();
}
