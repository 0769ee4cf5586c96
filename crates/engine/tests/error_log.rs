//! Damage to the only copy of a data block is reported and named. Before
//! the error log existed, reads of a damaged file on a single-vdev pool failed with EIO but
//! `pool status` said "No known data errors" and named no file. Here the only copy of one data
//! block of each of two files is overwritten on disk; reading them fails (and nothing panics),
//! the pool's error log names both by path, the log survives export and import, and an entry
//! drops out once its file is rewritten or deleted; `check` puts the unreadable blocks it finds
//! in the log, and a later `check` that finds nothing clears it.

use crate::common;

use tarn::check::check_pool;
use tarn::fs::FileSystem;
use tarn::pool::errlog::BLKID_UNKNOWN;
use tarn::pool::scan::ScanFunction;
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

/// Guards the scrub's damage reaching the error log at once. A scrub that found blocks with no
/// good copy counted them ("with N errors") but did not log them: `pool status -v` said "No
/// known data errors" until something read the files or a re-import followed a `check`, because
/// the scan's walk handed the verifier block pointers without their object and block id. Here
/// the only copy of one block of a file is damaged (a block its snapshot shares, so the walk
/// meets it in the snapshot's interval) and of one block of another file; nothing reads them;
/// the moment the scrub ends, without a reopen, the log names both files under the head (which
/// still holds the blocks), and the entries are on disk after export and import.
#[test]
fn a_scrub_logs_the_damage_it_finds_before_any_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let vdev = dir.path().join("vdev.img");
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "vdev.img"), tiny());
    let write = |parent_path: &[&str], name: &str, seed: u64| {
        let fs = pool.file_system().unwrap();
        let parent = lookup(&fs, parent_path);
        let ino = fs.create(parent, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &pattern(seed, FILE_BYTES)).unwrap();
        drop(fs);
        pool.sync().unwrap();
        ino
    };
    let shared = write(&[], "shared", 1);
    pool.create_snapshots(&[format!("{POOL}@s1")], false)
        .unwrap();
    let fs = pool.file_system().unwrap();
    fs.mkdir(fs.root(), b"dir", 0o755, 0, 0).unwrap();
    drop(fs);
    let late = write(&["dir"], "late", 2);
    write(&["dir"], "fine", 3);
    let shared_extent = data_block_extent(&pool, shared, 2);
    let late_extent = data_block_extent(&pool, late, 5);
    pool.export().unwrap();
    damage(&vdev, shared_extent);
    damage(&vdev, late_extent);

    let pool = import(dir.path(), POOL, tiny());
    assert!(
        pool.core.error_entries().is_empty(),
        "nothing has read them"
    );
    pool.core.request_scrub().unwrap();
    pool.core.wait_scan(ScanFunction::Scrub).unwrap();
    let phys = pool.core.scan_status().expect("a scrub ran").phys;
    assert_eq!(phys.errors, 2, "{phys:?}");
    let expected = vec![format!("{POOL}:/dir/late"), format!("{POOL}:/shared")];
    assert_eq!(names(&pool), expected);
    // Each entry names its block by id.
    let mut blocks: Vec<(u64, u64)> = pool
        .core
        .error_entries()
        .iter()
        .map(|entry| (entry.bookmark.object.0, entry.bookmark.blkid))
        .collect();
    blocks.sort();
    let mut damaged = vec![(shared, 2), (late, 5)];
    damaged.sort();
    assert_eq!(blocks, damaged);
    pool.export().unwrap();
    let pool = import(dir.path(), POOL, tiny());
    assert_eq!(names(&pool), expected);
    pool.export().unwrap();
}
