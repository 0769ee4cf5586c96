//! The dnode cache (object/dnode_cache.rs) must never answer with a dnode older than the tree:
//! a sync that installs a new tree forgets the dnodes it rewrote, even while readers that
//! missed are decoding the old ones, and a rollback forgets them all.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;

/// Appends and syncs in one thread while others stat the file: a cached dnode that outlived
/// the sync that rewrote it would show the size of an older tree (the dirty records that held
/// the newer size are dropped by that sync), so the size would go back.
#[test]
fn a_file_never_shrinks_for_readers_while_appends_sync() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Arc::new(create_pool(
        dir.path(),
        "tank",
        single(dir.path(), "v0"),
        tiny(),
    ));
    pool.create_dataset("tank/fs", &[], false).unwrap();
    let fs = Arc::new(pool.open_file_system("tank/fs").unwrap());
    let ino = fs.create(fs.root(), b"log", 0o644, 0, 0).unwrap().ino;
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (fs, done) = (fs.clone(), done.clone());
            std::thread::spawn(move || {
                let (mut last, mut looks) = (0u64, 0u64);
                while !done.load(Ordering::Relaxed) {
                    let size = fs.getattr(ino).unwrap().size;
                    assert!(size >= last, "size went back from {last} to {size}");
                    last = size;
                    looks += 1;
                }
                looks
            })
        })
        .collect();
    let record = [7u8; 100];
    for append in 0..1500u64 {
        fs.write(ino, append * 100, &record).unwrap();
        if append % 25 == 24 {
            pool.sync().unwrap();
        }
    }
    done.store(true, Ordering::Relaxed);
    for reader in readers {
        assert!(reader.join().unwrap() > 0);
    }
    assert_eq!(fs.getattr(ino).unwrap().size, 150_000);
    check_clean(&pool, "after appends under readers");
}

/// A rollback replaces the tree: dnodes cached from the newer tree must not survive it.
#[test]
fn a_rollback_forgets_the_cached_dnodes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tiny());
    pool.create_dataset("tank/fs", &[], false).unwrap();
    let fs = pool.open_file_system("tank/fs").unwrap();
    let ino = fs.create(fs.root(), b"file", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, &[1u8; 1000]).unwrap();
    pool.sync().unwrap();
    pool.create_snapshots(&["tank/fs@before".to_string()], false)
        .unwrap();
    fs.write(ino, 1000, &[2u8; 4000]).unwrap();
    pool.sync().unwrap();
    // Cached now, from the synced tree.
    assert_eq!(fs.getattr(ino).unwrap().size, 5000);
    assert_eq!(fs.getattr(ino).unwrap().size, 5000);
    pool.rollback("tank/fs@before", false).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().size, 1000);
    pool.sync().unwrap();
    assert_eq!(fs.getattr(ino).unwrap().size, 1000);
    check_clean(&pool, "after rollback");
}

/// With the cache off every answer comes from the tree, and the answers are the same.
#[test]
fn the_cache_off_gives_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let tunables = tarn::tunables::Tunables {
        dnode_cache_entries: 0,
        ..tiny()
    };
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables);
    pool.create_dataset("tank/fs", &[], false).unwrap();
    let fs = pool.open_file_system("tank/fs").unwrap();
    for index in 0..50u64 {
        let ino = fs
            .create(fs.root(), format!("f{index}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(ino, 0, &vec![3u8; index as usize * 10]).unwrap();
    }
    pool.sync().unwrap();
    for index in 0..50u64 {
        let attr = fs
            .lookup(fs.root(), format!("f{index}").as_bytes())
            .unwrap();
        assert_eq!(attr.size, index * 10);
    }
    check_clean(&pool, "cache off");
}
