//! Damage to the only copy of a data block is reported and named (issue 21, part 3). Before
//! the error log existed, reads of a damaged file on a single-vdev pool failed with EIO but
//! `pool status` said "No known data errors" and named no file. Here the only copy of one data
//! block of each of two files is overwritten on disk; reading them fails (and nothing panics),
//! the pool's error log names both by path, the log survives export and import, and an entry
//! drops out once its file is rewritten or deleted; `check` puts the unreadable blocks it finds
//! in the log, and a later `check` that finds nothing clears it.

mod common;

use tarn::check::check_pool;
use tarn::fs::FileSystem;
use tarn::pool::errlog::BLKID_UNKNOWN;
use tarn::pool::Pool;
use tarn::types::ObjectId;

use common::*;

const POOL: &str = "errlog";
const FILE_BYTES: usize = 64 << 10;

fn names(pool: &Pool) -> Vec<String> {
    let mut names: Vec<String> = pool
        .core
        .error_entries()
        .iter()
        .map(|entry| entry.display_name())
        .collect();
    names.sort();
    names
}

fn lookup(fs: &FileSystem, path: &[&str]) -> u64 {
    path.iter().fold(fs.root(), |dir, name| {
        fs.lookup(dir, name.as_bytes()).unwrap().ino
    })
}

#[test]
fn damaged_data_blocks_are_logged_named_and_dropped_when_rewritten_or_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let vdev = dir.path().join("vdev.img");
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "vdev.img"), tiny());
    let fs = pool.file_system().unwrap();
    let sub = fs.mkdir(fs.root(), b"dir", 0o755, 0, 0).unwrap().ino;
    let mut inos = Vec::new();
    for (parent, name, seed) in [
        (sub, "victim", 1),
        (fs.root(), "doomed", 2),
        (sub, "fine", 3),
    ] {
        let ino = fs.create(parent, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &pattern(seed, FILE_BYTES)).unwrap();
        inos.push(ino);
    }
    drop(fs);
    pool.sync().unwrap();
    let victim_extent = data_block_extent(&pool, inos[0], 3);
    let doomed_extent = data_block_extent(&pool, inos[1], 0);
    assert!(pool.core.error_entries().is_empty());
    pool.export().unwrap();
    damage(&vdev, victim_extent);
    damage(&vdev, doomed_extent);

    let pool = import(dir.path(), POOL, tiny());
    let fs = pool.file_system().unwrap();
    assert!(fs.read(inos[0], 0, FILE_BYTES).is_err(), "victim reads");
    assert!(fs.read(inos[1], 0, FILE_BYTES).is_err(), "doomed reads");
    assert_eq!(
        fs.read(inos[2], 0, FILE_BYTES).unwrap(),
        pattern(3, FILE_BYTES)
    );
    // The undamaged blocks of the victim still read.
    assert_eq!(
        fs.read(inos[0], 0, 8 << 10).unwrap(),
        pattern(1, FILE_BYTES)[..8 << 10]
    );
    assert_eq!(
        names(&pool),
        vec![format!("{POOL}:/dir/victim"), format!("{POOL}:/doomed")]
    );
    drop(fs);
    // Persisted: the log outlives the pool's memory.
    pool.export().unwrap();
    let pool = import(dir.path(), POOL, tiny());
    assert_eq!(pool.core.error_entries().len(), 2);

    // Deleting one file drops its entry once the deletion is synced.
    let fs = pool.file_system().unwrap();
    fs.unlink(fs.root(), b"doomed").unwrap();
    drop(fs);
    pool.sync().unwrap();
    assert_eq!(names(&pool), vec![format!("{POOL}:/dir/victim")]);

    // Rewriting the damaged block drops the other.
    let fs = pool.file_system().unwrap();
    let victim = lookup(&fs, &["dir", "victim"]);
    fs.write(victim, 0, &pattern(4, FILE_BYTES)).unwrap();
    drop(fs);
    pool.sync().unwrap();
    assert!(names(&pool).is_empty(), "{:?}", names(&pool));
    pool.export().unwrap();
    let pool = import(dir.path(), POOL, tiny());
    assert!(pool.core.error_entries().is_empty());
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn check_logs_unreadable_blocks_and_a_clean_check_clears_them() {
    let dir = tempfile::tempdir().unwrap();
    let vdev = dir.path().join("vdev.img");
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "vdev.img"), tiny());
    let fs = pool.file_system().unwrap();
    let ino = fs.create(fs.root(), b"bad", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, &pattern(9, FILE_BYTES)).unwrap();
    drop(fs);
    pool.sync().unwrap();
    let extent = data_block_extent(&pool, ino, 1);
    pool.export().unwrap();
    damage(&vdev, extent);

    let pool = import(dir.path(), POOL, tiny());
    // Nothing has read the file: only check can find it.
    assert!(pool.core.error_entries().is_empty());
    pool.sync().unwrap();
    let report = check_pool(&pool, true).unwrap();
    assert_eq!(report.blocks_unreadable.len(), 1, "{report:#?}");
    // The totals and the device agree with the unreadable block: its one copy is bad and
    // unrecoverable, on the pool's only device.
    assert!(report.copies_bad >= 1, "{report:#?}");
    assert_eq!(report.devices.len(), 1);
    assert_eq!(report.devices[0].unrecoverable, 1, "{report:#?}");
    assert!(report.devices[0].bad >= 1, "{report:#?}");
    assert_eq!(names(&pool), vec![format!("{POOL}:/bad")]);

    // Rewritten, the block is good again; a check confirms and the log empties.
    let fs = pool.file_system().unwrap();
    fs.write(ino, 0, &pattern(10, FILE_BYTES)).unwrap();
    drop(fs);
    pool.sync().unwrap();
    let report = check_pool(&pool, true).unwrap();
    assert!(report.is_clean(), "{report:#?}");
    assert!(pool.core.error_entries().is_empty());

    // An entry naming the object but no block stays while the object exists; pool clear
    // empties the log.
    pool.core
        .record_unreadable(pool.core.root.object, ObjectId(ino), BLKID_UNKNOWN, 0);
    assert_eq!(pool.core.error_entries().len(), 1);
    pool.core.clear_errlog();
    assert!(pool.core.error_entries().is_empty());
    pool.export().unwrap();
}

/// A block only a snapshot still holds (the head rewrote the file) is damaged: reading the
/// file through the snapshot fails and the log names it under the snapshot; the head's copy of
/// the file reads right and is not named.
#[test]
fn damage_only_a_snapshot_holds_is_named_under_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let vdev = dir.path().join("vdev.img");
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "vdev.img"), tiny());
    let fs = pool.file_system().unwrap();
    let ino = fs.create(fs.root(), b"kept", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, &pattern(1, FILE_BYTES)).unwrap();
    drop(fs);
    pool.sync().unwrap();
    let extent = data_block_extent(&pool, ino, 2);
    pool.create_snapshots(&[format!("{POOL}@s1")], false)
        .unwrap();
    let fs = pool.file_system().unwrap();
    fs.write(ino, 0, &pattern(2, FILE_BYTES)).unwrap();
    drop(fs);
    pool.sync().unwrap();
    pool.export().unwrap();
    damage(&vdev, extent);

    let pool = import(dir.path(), POOL, tiny());
    let snapshot = pool.snapshot_file_system(&format!("{POOL}@s1")).unwrap();
    assert!(snapshot.read(ino, 0, FILE_BYTES).is_err());
    drop(snapshot);
    let fs = pool.file_system().unwrap();
    assert_eq!(fs.read(ino, 0, FILE_BYTES).unwrap(), pattern(2, FILE_BYTES));
    drop(fs);
    assert_eq!(names(&pool), vec![format!("{POOL}@s1:/kept")]);
    // Kept in the pool: after an import, before anything opens the snapshot, it is still
    // named; once the snapshot is destroyed the entry goes.
    pool.export().unwrap();
    let pool = import(dir.path(), POOL, tiny());
    assert_eq!(names(&pool), vec![format!("{POOL}@s1:/kept")]);
    // check finds the block while walking the snapshot and, since the head no longer holds
    // it, keeps it under the snapshot.
    let report = check_pool(&pool, true).unwrap();
    assert_eq!(report.blocks_unreadable.len(), 1, "{report:#?}");
    assert_eq!(names(&pool), vec![format!("{POOL}@s1:/kept")]);
    pool.destroy_snapshots(&format!("{POOL}@s1"), false)
        .unwrap();
    pool.sync().unwrap();
    assert!(names(&pool).is_empty(), "{:?}", names(&pool));
    pool.export().unwrap();
}
