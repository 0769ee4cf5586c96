//! The hidden clone of an incremental receive (`FS/%recv`): the target stays as it was, usable
//! and unchanged, while the stream arrives; it takes the received state only at the end; a
//! change made to it meanwhile refuses the receive unless forced; a failure or a crash leaves
//! it as it was; the clone is never listed and its name cannot be taken.

use crate::common;

use std::sync::mpsc::sync_channel;

use tarn::fs::FileSystem;
use tarn::pool::Pool;
use tarn::send::{receive, ReceiveOptions};

use common::tree::{snapshot_tree, tree};
use common::*;

fn write_file(fs: &FileSystem, name: &str, seed: u64, length: usize) {
    let root = fs.root();
    let ino = match fs.lookup(root, name.as_bytes()) {
        Ok(attr) => attr.ino,
        Err(_) => fs.create(root, name.as_bytes(), 0o644, 0, 0).unwrap().ino,
    };
    fs.write(ino, 0, &pattern(seed, length)).unwrap();
}

/// A pool with `src@a`, `src@b` (b changes a), and `dst` received from `src@a`; returns the
/// incremental stream a→b.
fn setup(dir: &std::path::Path, name: &str) -> (Pool, Vec<u8>) {
    let pool = create_pool(dir, name, single(dir, &format!("{name}0")), tiny());
    pool.create_dataset(&format!("{name}/src"), &[], false)
        .unwrap();
    let src = pool.open_file_system(&format!("{name}/src")).unwrap();
    write_file(&src, "kept", 1, 300_000);
    write_file(&src, "changed", 2, 200_000);
    pool.create_snapshots(&[format!("{name}/src@a")], false)
        .unwrap();
    write_file(&src, "changed", 3, 250_000);
    write_file(&src, "new", 4, 400_000);
    pool.create_snapshots(&[format!("{name}/src@b")], false)
        .unwrap();
    drop(src);
    let full = send_to_vec(&pool, &format!("{name}/src@a"), None);
    let mut input: &[u8] = &full;
    receive(
        &pool,
        &format!("{name}/dst"),
        &mut input,
        &ReceiveOptions::default(),
    )
    .unwrap();
    pool.set_property(&format!("{name}/dst"), "atime", Some("off"))
        .unwrap();
    let incremental = send_to_vec(
        &pool,
        &format!("{name}/src@b"),
        Some(&format!("{name}/src@a")),
    );
    (pool, incremental)
}

#[test]
fn the_target_is_unchanged_and_usable_until_the_receive_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, incremental) = setup(dir.path(), "rc");
    // Open for writing (which starts its intent log) and read throughout, as a mounted target.
    let dst = pool.open_file_system("rc/dst").unwrap();
    let before = tree(&dst);
    assert_eq!(before, snapshot_tree(&pool, "rc/src@a"));

    let (feed, pieces) = sync_channel::<Vec<u8>>(4);
    let half = incremental.len() / 2;
    std::thread::scope(|scope| {
        let receiving = scope.spawn(|| {
            let mut input = Arriving {
                pieces,
                current: Vec::new(),
                at: 0,
            };
            receive(&pool, "rc/dst", &mut input, &ReceiveOptions::default())
        });
        feed.send(incremental[..half].to_vec()).unwrap();
        // Half the stream is in (and synced): the target has not changed, and the clone
        // holding it is not listed.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !pool.has_dataset("rc/dst/%recv") {
            assert!(std::time::Instant::now() < deadline, "no hidden clone");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        pool.sync().unwrap();
        assert_eq!(tree(&dst), before);
        assert!(pool.datasets().iter().all(|info| !info.name.contains('%')));
        feed.send(incremental[half..].to_vec()).unwrap();
        drop(feed);
        let report = receiving.join().unwrap().unwrap();
        assert_eq!(report.snapshots, ["rc/dst@b"]);
    });
    // The same handle now reads the received state; the snapshot and the head agree.
    assert_eq!(tree(&dst), snapshot_tree(&pool, "rc/src@b"));
    assert_eq!(
        snapshot_tree(&pool, "rc/dst@b"),
        snapshot_tree(&pool, "rc/src@b")
    );
    drop(dst);
    assert!(!pool.has_dataset("rc/dst/%recv"));
    let info = pool
        .datasets()
        .into_iter()
        .find(|info| info.name == "rc/dst")
        .unwrap();
    assert_eq!(info.written, 0, "the head is its new snapshot");
    assert_eq!(info.snapshot_count, 2);
    // A further change and incremental receive still work on top.
    assert_clean(&pool);
    pool.export().unwrap();
    let pool = import(dir.path(), "rc", tiny());
    assert_eq!(
        tree(&pool.open_file_system("rc/dst").unwrap()),
        snapshot_tree(&pool, "rc/src@b")
    );
    assert_clean(&pool);
}

#[test]
fn a_change_to_the_target_during_the_receive_refuses_it_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, incremental) = setup(dir.path(), "ch");
    for force in [false, true] {
        let (feed, pieces) = sync_channel::<Vec<u8>>(4);
        let half = incremental.len() / 2;
        let result = std::thread::scope(|scope| {
            let receiving = scope.spawn(|| {
                let mut input = Arriving {
                    pieces,
                    current: Vec::new(),
                    at: 0,
                };
                let options = ReceiveOptions {
                    force,
                    ..ReceiveOptions::default()
                };
                receive(&pool, "ch/dst", &mut input, &options)
            });
            feed.send(incremental[..half].to_vec()).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !pool.has_dataset("ch/dst/%recv") {
                assert!(std::time::Instant::now() < deadline, "no hidden clone");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            // The user writes to the target while the stream arrives.
            let dst = pool.open_file_system("ch/dst").unwrap();
            write_file(&dst, "mine", 9, 10_000);
            drop(dst);
            feed.send(incremental[half..].to_vec()).unwrap();
            drop(feed);
            receiving.join().unwrap()
        });
        let dst = pool.open_file_system("ch/dst").unwrap();
        if force {
            assert_eq!(result.unwrap().snapshots, ["ch/dst@b"]);
            assert_eq!(tree(&dst), snapshot_tree(&pool, "ch/src@b"));
        } else {
            let error = result.unwrap_err().to_string();
            assert!(error.contains("changed during the receive"), "{error}");
            // The user's change is kept, and nothing of the stream is in the target.
            assert!(dst.lookup(dst.root(), b"mine").is_ok());
            assert!(dst.lookup(dst.root(), b"new").is_err());
            assert!(pool.snapshot_info("ch/dst@b").is_err());
        }
        assert!(!pool.has_dataset("ch/dst/%recv"));
    }
    assert_clean(&pool);
}

#[test]
fn the_hidden_name_is_reserved() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "hn", single(dir.path(), "hn0"), tiny());
    pool.create_dataset("hn/fs", &[], false).unwrap();
    pool.create_snapshots(&["hn/fs@a".to_string()], false)
        .unwrap();
    for attempt in [
        pool.create_dataset("hn/fs/%recv", &[], false).map(|_| ()),
        pool.create_clone("hn/fs@a", "hn/%recv", &[]).map(|_| ()),
        pool.rename_dataset("hn/fs", "hn/%recv").map(|_| ()),
        pool.create_dataset("hn/a%b", &[], false).map(|_| ()),
    ] {
        let error = attempt.unwrap_err().to_string();
        assert!(
            error.contains("reserved") || error.contains("invalid character"),
            "{error}"
        );
    }
    assert_clean(&pool);
}
