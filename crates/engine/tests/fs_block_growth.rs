//! A file's single block grows with it (OpenZFS's `zfs_grow_blocksize`): a new file starts with
//! one block of 512 bytes, a write past that block grows it to the write's end rounded up to
//! 512 bytes, at most the recordsize, and a file past one record has blocks of the recordsize.
//! Checked: the block size after each write, the contents (model compared) before and after a
//! sync and a re-import, a snapshot keeping the block it had, a recordsize raised later, writers
//! and syncs running together, and `check` clean at the end of each test.

use crate::common;

use std::sync::Arc;

use tarn::pool::Pool;
use tarn::tunables::Tunables;
use tarn::types::ObjectId;

use common::*;

const RECORD: u32 = 16 << 10;

fn tunables() -> Tunables {
    Tunables {
        recordsize: RECORD,
        ..tiny()
    }
}

/// (data block size, highest block id) of file `ino`'s object in the pool's root file system.
fn blocks(pool: &Pool, ino: u64) -> (u32, u64) {
    let info = pool.root_objset().info(ObjectId(ino)).unwrap();
    (info.data_block_size, info.max_blkid)
}

#[test]
fn a_small_file_has_one_block_of_its_size_that_grows_to_the_recordsize() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "bg", single(dir.path(), "d0"), tunables());
    let fs = pool.file_system().unwrap();
    let root = fs.root();
    let ino = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    assert_eq!(blocks(&pool, ino), (512, 0), "a new file");
    let mut model = Vec::new();
    // (offset, length, block size after the write, highest block id after it)
    let steps: [(u64, usize, u32, u64); 6] = [
        (0, 100, 512, 0),
        (100, 4900, 5120, 0),
        (5000, 1, 5120, 0),
        (9000, 300, 9728, 0),
        (RECORD as u64 - 10, 20, RECORD, 1),
        (3 * RECORD as u64, 5, RECORD, 3),
    ];
    for (step, &(offset, length, size, max_blkid)) in steps.iter().enumerate() {
        let data = pattern(step as u64 + 1, length);
        fs.write(ino, offset, &data).unwrap();
        let end = offset as usize + length;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[offset as usize..end].copy_from_slice(&data);
        assert_eq!(blocks(&pool, ino), (size, max_blkid), "step {step}");
        assert_eq!(read_all(&fs, ino), model, "step {step}, before its sync");
        if step % 2 == 1 {
            pool.sync().unwrap();
            assert_eq!(read_all(&fs, ino), model, "step {step}, after its sync");
        }
    }
    // Preferred I/O is the recordsize, whatever the block.
    let small = fs.create(root, b"small", 0o644, 0, 0).unwrap().ino;
    fs.write(small, 0, b"tiny").unwrap();
    assert_eq!(fs.getattr(small).unwrap().blksize, RECORD);
    assert_eq!(blocks(&pool, small), (512, 0));
    // A write far into a new file: records from the start.
    let sparse = fs.create(root, b"sparse", 0o644, 0, 0).unwrap().ino;
    fs.write(sparse, 10 * RECORD as u64 + 7, b"far").unwrap();
    assert_eq!(blocks(&pool, sparse), (RECORD, 10));
    drop(fs);
    pool.export().unwrap();

    let pool = import(dir.path(), "bg", tunables());
    let fs = pool.file_system().unwrap();
    assert_eq!(read_all(&fs, ino), model, "after re-import");
    assert_eq!(blocks(&pool, ino), (RECORD, 3));
    assert_eq!(fs.read(small, 0, 4).unwrap(), b"tiny");
    assert_eq!(blocks(&pool, small), (512, 0));
    let far = fs.read(sparse, 10 * RECORD as u64, 10).unwrap();
    assert_eq!(&far[7..], b"far");
    assert!(far[..7].iter().all(|&b| b == 0));
    drop(fs);
    check_clean(&pool, "after growing files");
}

#[test]
fn a_snapshot_keeps_the_block_its_file_had_and_a_raised_recordsize_lets_it_grow_further() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "bs", single(dir.path(), "d0"), tunables());
    let fs = pool.file_system().unwrap();
    let root = fs.root();
    let ino = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    let first = pattern(7, 1000);
    fs.write(ino, 0, &first).unwrap();
    pool.sync().unwrap();
    pool.create_snapshots(&["bs@one".to_string()], false)
        .unwrap();
    let more = pattern(8, 3 * RECORD as usize);
    fs.write(ino, 1000, &more).unwrap();
    pool.sync().unwrap();
    let snapshot = pool.snapshot_file_system("bs@one").unwrap();
    assert_eq!(read_all(&snapshot, ino), first);
    let snapshot_info = pool
        .snapshot_objset("bs@one")
        .unwrap()
        .info(ObjectId(ino))
        .unwrap();
    assert_eq!(
        (snapshot_info.data_block_size, snapshot_info.max_blkid),
        (1024, 0)
    );
    let mut head = first.clone();
    head.extend_from_slice(&more);
    assert_eq!(read_all(&fs, ino), head);
    assert_eq!(blocks(&pool, ino), (RECORD, 3));
    drop(snapshot);

    // A file still in one block grows up to a recordsize raised after it was made; one with
    // several blocks keeps its block size.
    let single = fs.create(root, b"single", 0o644, 0, 0).unwrap().ino;
    fs.write(single, 0, &pattern(9, 3000)).unwrap();
    drop(fs);
    pool.set_property("bs", "recordsize", Some("64K")).unwrap();
    let fs = pool.file_system().unwrap();
    fs.write(single, 3000, &pattern(10, 40_000)).unwrap();
    assert_eq!(blocks(&pool, single), (43_008, 0));
    fs.write(single, 43_000, &pattern(11, 40_000)).unwrap();
    assert_eq!(blocks(&pool, single), (64 << 10, 1));
    fs.write(ino, 10 * RECORD as u64, b"x").unwrap();
    assert_eq!(blocks(&pool, ino), (RECORD, 10));
    drop(fs);
    pool.sync().unwrap();
    check_clean(&pool, "after snapshots and a recordsize change");
}

#[test]
fn appends_to_many_small_files_beside_syncs_and_readers_match_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Arc::new(create_pool(
        dir.path(),
        "ba",
        single(dir.path(), "d0"),
        tunables(),
    ));
    let fs = Arc::new(pool.file_system().unwrap());
    let root = fs.root();
    const WRITERS: u64 = 4;
    const FILES: u64 = 6;
    let files: Vec<Vec<u64>> = (0..WRITERS)
        .map(|writer| {
            (0..FILES)
                .map(|file| {
                    let name = format!("w{writer}f{file}");
                    fs.create(root, name.as_bytes(), 0o644, 0, 0).unwrap().ino
                })
                .collect()
        })
        .collect();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let syncer = {
        let (pool, done) = (pool.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                pool.sync().unwrap();
            }
        })
    };
    // The writers start once the reader runs: on a loaded machine they could otherwise finish
    // before the reader's first look, which then saw nothing (a CI failure, now and then).
    let reader_runs = Arc::new(std::sync::Barrier::new(2));
    let reader = {
        let (fs, done, files) = (fs.clone(), done.clone(), files.clone());
        let reader_runs = reader_runs.clone();
        std::thread::spawn(move || {
            // What a read catches while files grow: checked against the final contents below
            // (appends never change bytes already written, so each read is a prefix of them).
            reader_runs.wait();
            let mut seen = Vec::new();
            loop {
                for &ino in files.iter().flatten() {
                    let size = fs.getattr(ino).unwrap().size;
                    seen.push((ino, fs.read(ino, 0, size as usize).unwrap()));
                }
                if done.load(std::sync::atomic::Ordering::Relaxed) || seen.len() >= 3000 {
                    break;
                }
            }
            seen
        })
    };
    reader_runs.wait();
    let writers: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(writer, inos)| {
            let (fs, inos) = (fs.clone(), inos.clone());
            std::thread::spawn(move || {
                let mut models = vec![Vec::new(); inos.len()];
                let mut seed = writer as u64 * 1000;
                // Appends of 1 to 3000 bytes until each file is past two records.
                while models
                    .iter()
                    .any(|m: &Vec<u8>| m.len() < 2 * RECORD as usize)
                {
                    for (index, &ino) in inos.iter().enumerate() {
                        seed += 1;
                        let length = 1 + (seed * 7919 % 3000) as usize;
                        let data = pattern(seed, length);
                        fs.write(ino, models[index].len() as u64, &data).unwrap();
                        models[index].extend_from_slice(&data);
                    }
                }
                models
            })
        })
        .collect();
    let models: Vec<Vec<Vec<u8>>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    syncer.join().unwrap();
    let seen = reader.join().unwrap();
    let final_of = |ino: u64| -> &Vec<u8> {
        let writer = files.iter().position(|inos| inos.contains(&ino)).unwrap();
        let file = files[writer].iter().position(|&i| i == ino).unwrap();
        &models[writer][file]
    };
    assert!(!seen.is_empty());
    for (ino, data) in &seen {
        assert!(
            final_of(*ino).starts_with(data),
            "a read of {} bytes of file {ino} is not what was written",
            data.len()
        );
    }
    for (inos, models) in files.iter().zip(&models) {
        for (&ino, model) in inos.iter().zip(models) {
            assert_eq!(&read_all(&fs, ino), model);
            assert_eq!(blocks(&pool, ino).0, RECORD);
        }
    }
    drop(fs);
    let pool = Arc::try_unwrap(pool).ok().expect("no other holder");
    pool.export().unwrap();
    let pool = import(dir.path(), "ba", tunables());
    let fs = pool.file_system().unwrap();
    for (inos, models) in files.iter().zip(&models) {
        for (&ino, model) in inos.iter().zip(models) {
            assert_eq!(&read_all(&fs, ino), model, "after re-import");
        }
    }
    drop(fs);
    check_clean(&pool, "after concurrent appends");
}
