//! A pool filled to the brim refuses new data with "no space" instead of suspending: syncs keep
//! working, the pool imports and checks clean, and after a delete (and the two-txg deferral of
//! frees) writes are accepted again.

use crate::common;

use tarn::block::blkptr::Compression;
use tarn::object::ObjectError;

use common::*;

#[test]
fn full_pool_refuses_writes_then_recovers_after_delete() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "full", single(dir.path(), "a.img"), tiny());
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Off);
    let chunk = 256 << 10;
    let mut written = 0u64;
    let refused = loop {
        let hold = pool.assign().unwrap();
        match objset.write(&hold.tx(), object, written, &pattern(written, chunk)) {
            Ok(()) => written += chunk as u64,
            Err(error) => break error,
        }
        assert!(
            written < 200 << 20,
            "a 96 MiB pool accepted {written} bytes"
        );
    };
    assert!(
        matches!(refused, ObjectError::NoSpace),
        "unexpected error: {refused}"
    );
    // A 96 MiB pool keeps half of itself as slop (min(128 MiB, size / 2)), as OpenZFS does.
    assert!(
        written > 16 << 20,
        "refused too early, after {written} bytes"
    );
    pool.sync().expect("a full pool still syncs");
    assert!(pool.core.txgs.failure().is_none(), "the pool suspended");
    let mut tail = vec![0u8; chunk];
    objset
        .read(object, written - chunk as u64, &mut tail)
        .unwrap();
    assert_eq!(tail, pattern(written - chunk as u64, chunk));
    assert_clean(&pool);

    // Delete, let the deferred frees come back, and write again.
    {
        let hold = pool.assign().unwrap();
        objset.remove_object(&hold.tx(), object).unwrap();
    }
    for _ in 0..4 {
        let hold = pool.assign().unwrap();
        drop(hold);
        pool.sync().unwrap();
    }
    let again = create_file(&pool, &objset, 4096, Compression::Off);
    for offset in (0..(16u64 << 20)).step_by(chunk) {
        let hold = pool.assign().unwrap();
        objset
            .write(&hold.tx(), again, offset, &pattern(offset, chunk))
            .expect("space came back after the delete");
    }
    assert_clean(&pool);
    drop(objset);
    pool.export().unwrap();
    let pool = import(dir.path(), "full", tiny());
    assert_clean(&pool);
    pool.export().unwrap();
}

/// Dirty data not yet synced counts against free space only as an estimate: a file system
/// writer on a small pool whose own txg holds most of the dirty data is made to wait for that
/// txg to sync, not told the pool is full. Regression: with no sync in sight (a long timeout,
/// a large dirty limit), 30 MiB into a pool with about 45 MiB outside the slop was refused
/// after about 20 MiB.
#[test]
fn dirty_data_in_the_writers_own_txg_waits_for_a_sync_instead_of_failing() {
    let dir = tempfile::tempdir().unwrap();
    let mut tunables = tiny();
    tunables.txg_timeout = 600;
    tunables.dirty_data_max = 1 << 30;
    let pool = create_pool(dir.path(), "busy", single(dir.path(), "a.img"), tunables);
    let fs = pool.file_system().unwrap();
    let chunk = 64 << 10;
    for file in 0..30u64 {
        let attr = fs
            .create(fs.root(), format!("f{file}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        for piece in 0..16u64 {
            fs.write(
                attr.ino,
                piece * chunk as u64,
                &pattern(file * 16 + piece, chunk),
            )
            .unwrap_or_else(|error| {
                panic!(
                    "file {file} piece {piece}: {error} with {} MiB written",
                    file
                )
            });
        }
    }
    assert_clean(&pool);
    pool.export().unwrap();
}

/// Random small overwrites on a nearly full pool: each dirties a 128 KiB indirect block (two
/// copies) whose old version stays allocated until its free is two txgs old, many times the
/// data written. Admission reserves that (`ObjectSet::indirect_estimate`), so the writes are
/// refused or made to wait, and the sync never runs out of space (the pool never suspends).
#[test]
fn random_overwrites_on_a_full_pool_never_suspend_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut tunables = tiny();
    tunables.indirect_block_shift = 17;
    tunables.txg_timeout = 600;
    tunables.dirty_data_max = 1 << 30;
    let pool = create_pool(dir.path(), "churn", single(dir.path(), "a.img"), tunables);
    let objset = pool.root_objset();
    let record = 8usize << 10;
    let file_size = 256usize << 10;
    let mut props = file_props(record as u32, Compression::Off);
    props.indirect_block_shift = 17;
    let mut files = Vec::new();
    'fill: loop {
        let hold = pool.assign().unwrap();
        let object = objset
            .create_object(
                &hold.tx(),
                props,
                tarn::block::blkptr::ObjectType::None,
                &[],
            )
            .unwrap();
        match objset.write(
            &hold.tx(),
            object,
            0,
            &pattern(files.len() as u64, file_size),
        ) {
            Ok(()) => files.push(object),
            Err(ObjectError::NoSpace) => break 'fill,
            Err(error) => panic!("fill: {error}"),
        }
        drop(hold);
        if files.len() % 16 == 0 {
            pool.sync().unwrap();
        }
    }
    pool.sync().unwrap();
    assert!(files.len() > 100, "only {} files fit", files.len());

    // One file's first write in a txg reserves its indirect block; the next write under the
    // same indirect block reserves nothing more.
    {
        let hold = pool.assign().unwrap();
        let tx = hold.tx();
        let first = objset
            .indirect_estimate(tx.txg, files[0], 0, record as u64)
            .unwrap();
        // 32 children (256 KiB of 8 KiB blocks) of 128 bytes: 4 KiB, in two copies.
        assert_eq!(first, 4096 * 2, "one new indirect block, two copies");
        objset.write(&tx, files[0], 0, &pattern(1, record)).unwrap();
        let again = objset
            .indirect_estimate(tx.txg, files[0], record as u64, record as u64)
            .unwrap();
        assert_eq!(again, 0, "its indirect block is already dirty in this txg");
    }

    let mut state = 0x5eed_u64;
    let mut refused = 0;
    for round in 0..6 {
        for _ in 0..400 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let object = files[(state % files.len() as u64) as usize];
            let offset = (state >> 20) % (file_size / record) as u64 * record as u64;
            let hold = pool.assign().unwrap();
            match objset.write(&hold.tx(), object, offset, &pattern(state, record)) {
                Ok(()) => {}
                Err(ObjectError::NoSpace) => refused += 1,
                Err(error) => panic!("round {round}: {error}"),
            }
        }
        pool.sync()
            .unwrap_or_else(|error| panic!("round {round}: the sync failed: {error}"));
    }
    assert!(pool.core.txgs.failure().is_none(), "the pool suspended");
    println!("{} files, {refused} overwrites refused", files.len());
    assert_clean(&pool);
    drop(objset);
    pool.export().unwrap();
}

/// Space held back for a kernel cache's write-backs (`FileSystem::hold_back_for_write_backs`)
/// is left alone by callers' writes and used by write-backs; a caller's write that fits only
/// in part is cut (a short write) before it is refused; and after a lost write-back, a
/// write-back that would start past the stored end is refused, so no hole covers lost bytes.
/// These are what a FUSE mount's write(2) relies on to answer ENOSPC instead of losing
/// write-backs (crates/fuse/src/write_space.rs).
#[test]
fn held_back_space_serves_write_backs_and_callers_get_short_writes() {
    use tarn::fs::{FsError, WriteSource};

    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "held", single(dir.path(), "a.img"), tiny());
    let fs = pool.file_system().unwrap();
    let held_bytes = 8u64 << 20;
    let held = fs.hold_back_for_write_backs(held_bytes);
    let chunk = 1usize << 20;
    let caller = fs.create(fs.root(), b"caller", 0o644, 0, 0).unwrap().ino;
    let mut written = 0u64;
    // Callers fill the pool up to the held-back space; the last write may be short.
    let mut short_writes = 0;
    let refused = loop {
        match fs.write_from(
            caller,
            written,
            &pattern(written, chunk),
            WriteSource::Direct,
        ) {
            Ok(length) => {
                if length < chunk {
                    short_writes += 1;
                }
                written += length as u64;
            }
            Err(error) => break error,
        }
        assert!(
            written < 200 << 20,
            "a 96 MiB pool accepted {written} bytes"
        );
    };
    assert!(matches!(refused, FsError::NoSpace), "{refused}");
    assert!(short_writes >= 1, "no short write before the refusal");
    assert_eq!(fs.getattr(caller).unwrap().size, written);
    assert!(!fs.write_fits(chunk as u64, WriteSource::Caller));
    assert!(fs.write_fits(chunk as u64, WriteSource::WriteBack { after_loss: false }));

    // Write-backs still find about the held-back space (counted twice, as dirty data is).
    let cached = fs.create(fs.root(), b"cached", 0o644, 0, 0).unwrap().ino;
    let mut stored = 0u64;
    while stored < held_bytes / 2 - chunk as u64 {
        let source = WriteSource::WriteBack { after_loss: false };
        let length = fs
            .write_from(cached, stored, &pattern(stored, chunk), source)
            .unwrap_or_else(|error| panic!("write-back at {stored}: {error}"));
        assert_eq!(length, chunk, "a write-back is never short");
        stored += chunk as u64;
    }

    // After a loss, a write-back past the stored end is refused; one at the end is not.
    let after_loss = WriteSource::WriteBack { after_loss: true };
    let gap = fs.write_from(cached, stored + 4096, &pattern(0, 4096), after_loss);
    assert!(matches!(gap, Err(FsError::NoSpace)), "{gap:?}");
    assert_eq!(fs.getattr(cached).unwrap().size, stored);
    fs.write_from(cached, stored, &pattern(stored, 4096), after_loss)
        .unwrap();

    // Released, the held-back space is the callers' again.
    drop(held);
    pool.sync().unwrap();
    assert!(fs.write_fits(chunk as u64, WriteSource::Caller));
    let mut data = vec![0u8; chunk];
    fs.read(caller, 0, chunk).map(|read| data = read).unwrap();
    assert_eq!(data, pattern(0, chunk));
    drop(fs);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A pool whose free space is down to the slop refuses new snapshots, clones, file systems
/// and bookmarks ("out of space") while property changes, renames and destroys still work,
/// as OpenZFS's sync-task space checks decide (ZFS_SPACE_CHECK_NORMAL keeps the whole slop,
/// _RESERVED half of it, destroys are not checked). Regression: only data writes were
/// admitted, so a pool refusing writes still took snapshots until their metadata ate the
/// slop that syncing relies on (tarn-stress found a 176 MiB pool 89% allocated with half of
/// it kept as slop, its free space in holes too small for an intent-log block).
///
/// The pool is filled with a slop of 3 MiB (1/32 of it) and imported again with one of
/// 4/3 of what was left free, so that its free space lies between half the slop and the
/// slop by a margin no background sync can cross.
#[test]
fn a_pool_down_to_its_slop_refuses_new_snapshots_and_clones_but_not_recovery() {
    use tarn::pool::PoolError;
    use tarn::tunables::Tunables;

    let dir = tempfile::tempdir().unwrap();
    let filling = Tunables {
        spa_min_slop: 1 << 20,
        ..tiny()
    };
    let pool = create_pool(dir.path(), "slop", single(dir.path(), "a.img"), filling);
    pool.create_dataset("slop/fs", &[], false).unwrap();
    pool.create_snapshots(&["slop/fs@before".to_string()], false)
        .unwrap();
    let objset = pool.dataset_objset("slop/fs").unwrap();
    let object = create_file(&pool, &objset, 4096, Compression::Off);
    let chunk = 256 << 10;
    let mut written = 0u64;
    loop {
        let hold = pool.assign().unwrap();
        match objset.write(&hold.tx(), object, written, &pattern(written, chunk)) {
            Ok(()) => written += chunk as u64,
            Err(ObjectError::NoSpace) => break,
            Err(error) => panic!("write: {error}"),
        }
    }
    drop(objset);
    pool.sync().unwrap();
    let free = pool.core.io.space.counters().free;
    pool.export().unwrap();

    let tunables = Tunables {
        spa_min_slop: free / 3 * 4,
        ..tiny()
    };
    let pool = import(dir.path(), "slop", tunables);
    let totals = pool.core.io.space.counters();
    let slop = totals.slop(pool.core.io.tunables.spa_min_slop);
    assert!(
        totals.free < slop - (512 << 10) && totals.free > slop / 2 + (512 << 10),
        "free {} not between half the slop and the slop ({slop})",
        totals.free
    );
    fn out_of_space<T>(result: Result<T, PoolError>, what: &str) {
        match result {
            Err(PoolError::OutOfSpace(message)) => assert!(message.contains(what), "{message}"),
            Err(error) => panic!("{what}: refused for another reason: {error}"),
            Ok(_) => panic!("{what} was accepted on a full pool"),
        }
    }
    out_of_space(
        pool.create_snapshots(&["slop/fs@full".to_string()], false),
        "create snapshot slop/fs@full",
    );
    out_of_space(
        pool.create_clone("slop/fs@before", "slop/clone", &[]),
        "clone slop/fs@before",
    );
    out_of_space(
        pool.create_dataset("slop/new", &[], false),
        "create slop/new",
    );
    out_of_space(
        pool.create_bookmark("slop/fs@before", "slop/fs#mark"),
        "create bookmark",
    );
    // What an administrator does to recover space still works.
    pool.set_property("slop/fs", "compression", Some("lz4"))
        .expect("a property set may use half the slop");
    pool.rename_snapshot("slop/fs@before", "slop/fs@old")
        .expect("a rename may use half the slop");
    pool.destroy_datasets("slop/fs", true, false)
        .expect("a destroy is never refused for space");
    for _ in 0..4 {
        pool.sync().unwrap();
    }
    pool.create_dataset("slop/new", &[], false)
        .expect("after the destroy, a file system is created again");
    pool.create_snapshots(&["slop/new@a".to_string()], false)
        .expect("and a snapshot taken");
    assert_clean(&pool);
    pool.export().unwrap();
}
