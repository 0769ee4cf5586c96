//! One bad region never loses a pool. A single-vdev pool holding only metadata (many
//! directories of empty files, in the root file system and in a child file system, with a
//! snapshot of the child, its deadlist, and a clone of the snapshot) is
//! exported, one region of 64 KiB to 1 MiB of its data area is overwritten with random bytes,
//! and the pool is imported, every file system (and the snapshot) opened and every entry
//! listed. Before metadata
//! got one more copy than the dataset's `copies` (directories, master nodes and unlinked sets
//! had one copy), and before extra copies on one vdev were placed well apart, such damage made
//! import fail with "no copy of block ... [L0 KeyValue]" and lost the whole pool.
//!
//! The sweep walks the written part of the data area (the label areas at both ends have their
//! own redundancy and are left alone). `TARN_DAMAGE_SWEEP=full` tries every 64 KiB step with
//! every region size, for the figure in the report; the default is a stride through it.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;
use std::path::Path;

use rand::{Rng, SeedableRng};
use tarn::check::check_pool;
use tarn::fs::FileSystem;
use tarn::pool::{CreateOptions, ImportOptions, Pool};
use tarn::vdev::label::{VDEV_LABEL_END_SIZE, VDEV_LABEL_START_SIZE};

use common::*;

const POOL: &str = "damage";
const VDEV_BYTES: u64 = 64 << 20;
const DIRECTORIES: usize = 12;
const FILES_PER_DIRECTORY: usize = 40;
const REGION_SIZES: [u64; 5] = [64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20];
const STEP: u64 = 64 << 10;

/// Every path under `ino`, depth first (names joined with '/').
fn list_all(
    fs: &FileSystem,
    ino: u64,
    prefix: &str,
    out: &mut BTreeSet<String>,
) -> Result<(), String> {
    let mut cookie = 0;
    loop {
        let entries = fs
            .readdir(ino, cookie, 128)
            .map_err(|error| format!("readdir {prefix:?}: {error}"))?;
        let Some(last) = entries.last() else { break };
        cookie = last.next_cookie;
        for entry in entries {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            let path = format!("{prefix}/{}", String::from_utf8_lossy(&entry.name));
            fs.getattr(entry.ino)
                .map_err(|error| format!("getattr {path:?}: {error}"))?;
            if entry.kind == tarn::fs::FileKind::Directory {
                list_all(fs, entry.ino, &path, out)?;
            }
            out.insert(path);
        }
    }
    Ok(())
}

fn populate(fs: &FileSystem, tag: &str) {
    for d in 0..DIRECTORIES {
        let dir = fs
            .mkdir(
                fs.root(),
                format!("{tag}-dir-{d:02}").as_bytes(),
                0o755,
                0,
                0,
            )
            .unwrap()
            .ino;
        for f in 0..FILES_PER_DIRECTORY {
            fs.create(dir, format!("file-{f:03}").as_bytes(), 0o644, 0, 0)
                .unwrap();
        }
        let sub = fs.mkdir(dir, b"sub", 0o755, 0, 0).unwrap().ino;
        for f in 0..4 {
            fs.create(sub, format!("inner-{f}").as_bytes(), 0o644, 0, 0)
                .unwrap();
        }
    }
}

/// Every file system's full listing (the root, the child, its snapshot and its clone), keyed by
/// dataset name.
fn listing(pool: &Pool) -> Result<Vec<(String, BTreeSet<String>)>, String> {
    let mut all = Vec::new();
    for name in [
        POOL.to_string(),
        format!("{POOL}/child"),
        format!("{POOL}/child@s1"),
        format!("{POOL}/clone"),
    ] {
        let fs = if name.contains('@') {
            pool.snapshot_file_system(&name)
        } else {
            pool.open_file_system(&name)
        }
        .map_err(|error| format!("open {name}: {error}"))?;
        let mut paths = BTreeSet::new();
        list_all(&fs, fs.root(), "", &mut paths)?;
        all.push((name, paths));
    }
    Ok(all)
}

fn build(dir: &Path) -> Vec<(String, BTreeSet<String>)> {
    let pool = Pool::create(CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: single(dir, "vdev.img"),
        create_size: Some(VDEV_BYTES),
        force: false,
        tunables: tiny(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })
    .unwrap();
    pool.create_dataset(&format!("{POOL}/child"), &[], false)
        .unwrap();
    populate(&pool.file_system().unwrap(), "root");
    let child = pool.open_file_system(&format!("{POOL}/child")).unwrap();
    populate(&child, "child");
    pool.sync().unwrap();
    // Snapshot metadata too (records, names, deadlists and their lists) and a clone: the
    // child's snapshot, then every file of one directory removed and made again, so that the
    // blocks the snapshot holds go on the child's deadlist.
    pool.create_snapshots(&[format!("{POOL}/child@s1")], false)
        .unwrap();
    let dir = child.lookup(child.root(), b"child-dir-00").unwrap().ino;
    for f in 0..FILES_PER_DIRECTORY {
        let name = format!("file-{f:03}");
        child.unlink(dir, name.as_bytes()).unwrap();
        child.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap();
    }
    pool.sync().unwrap();
    pool.create_clone(&format!("{POOL}/child@s1"), &format!("{POOL}/clone"), &[])
        .unwrap();
    drop(child);
    pool.sync().unwrap();
    let expected = listing(&pool).unwrap();
    assert_eq!(
        expected.iter().map(|(_, paths)| paths.len()).sum::<usize>(),
        4 * DIRECTORIES * (FILES_PER_DIRECTORY + 1 + 4 + 1),
    );
    pool.export().unwrap();
    expected
}

/// Offsets (in the data area) whose region of `size` bytes overlaps something written.
fn written_extent(image: &[u8]) -> (u64, u64) {
    let start = VDEV_LABEL_START_SIZE;
    let end = image.len() as u64 - VDEV_LABEL_END_SIZE;
    let chunk = STEP as usize;
    let used_end = (start..end)
        .step_by(chunk)
        .filter(|&offset| {
            image[offset as usize..offset as usize + chunk]
                .iter()
                .any(|&byte| byte != 0)
        })
        .max()
        .map_or(start, |offset| offset + STEP);
    (start, used_end)
}

/// Outcome of one case: Ok when the pool imported, check found no block without a good copy,
/// and every entry of every file system was listed.
fn one_case(
    dir: &Path,
    path: &Path,
    offset: u64,
    size: u64,
    seed: u64,
    expected: &[(String, BTreeSet<String>)],
) -> Result<(), String> {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let noise: Vec<u8> = (0..size).map(|_| rng.gen()).collect();
    file.write_all_at(&noise, offset).unwrap();
    file.sync_all().unwrap();
    drop(file);
    let (pool, _) = Pool::import(POOL, ImportOptions::new(dirs(dir), tiny()))
        .map_err(|error| format!("import: {error}"))?;
    let result = (|| {
        let found = listing(&pool)?;
        for ((name, want), (_, got)) in expected.iter().zip(&found) {
            if want != got {
                return Err(format!(
                    "{name}: {} of {} entries listed",
                    got.intersection(want).count(),
                    want.len()
                ));
            }
        }
        let report = check_pool(&pool, true).map_err(|error| format!("check: {error}"))?;
        if !report.is_clean() {
            return Err(format!(
                "check: unreadable {:?} errors {:?}",
                report.blocks_unreadable, report.errors
            ));
        }
        Ok(())
    })();
    pool.export().map_err(|error| format!("export: {error}"))?;
    result
}

/// Put back what one case may have changed: its region, and the labels (import and export
/// write them). Blocks the imported pool wrote went to space the original pool holds free.
fn restore(path: &Path, image: &[u8], offset: u64, size: u64) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let back = image.len() as u64 - VDEV_LABEL_END_SIZE;
    for (start, length) in [
        (0, VDEV_LABEL_START_SIZE),
        (back, VDEV_LABEL_END_SIZE),
        (offset, size),
    ] {
        file.write_all_at(&image[start as usize..(start + length) as usize], start)
            .unwrap();
    }
    file.sync_all().unwrap();
}

#[test]
fn one_damaged_region_never_loses_a_metadata_tree() {
    let dir = tempfile::tempdir().unwrap();
    let expected = build(dir.path());
    let path = dir.path().join("vdev.img");
    let image = std::fs::read(&path).unwrap();
    let (start, end) = written_extent(&image);
    let full = std::env::var("TARN_DAMAGE_SWEEP").is_ok_and(|value| value == "full");
    // First the case that once lost a whole pool: 1 MiB at the start of the data area (dd
    // seek=64 count=16).
    let mut cases = vec![(start, 1 << 20)];
    let mut offset = start;
    let mut index = 0u64;
    while offset < end {
        if full {
            for size in REGION_SIZES {
                cases.push((offset, size));
            }
        } else {
            cases.push((
                offset,
                REGION_SIZES[(index % REGION_SIZES.len() as u64) as usize],
            ));
        }
        index += 1;
        // The first metaslabs hold most of the file systems' metadata: every step there.
        offset += if full || offset < start + (4 << 20) {
            STEP
        } else {
            3 * STEP
        };
    }
    let mut failures = Vec::new();
    for (case, &(offset, size)) in cases.iter().enumerate() {
        let size = size.min(image.len() as u64 - VDEV_LABEL_END_SIZE - offset);
        if let Err(why) = one_case(dir.path(), &path, offset, size, case as u64, &expected) {
            failures.push(format!(
                "{size} bytes at {offset} (dd seek={} bs=64K): {why}",
                offset / STEP
            ));
        }
        restore(&path, &image, offset, size);
    }
    println!(
        "damage sweep: written data area {start}..{end}, {} cases, {} fully listed",
        cases.len(),
        cases.len() - failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} single-region damage cases lost entries:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// When no copy of a block survives, import still succeeds, says what
/// depends on the block, and the rest of the pool imports and lists. Here every copy of a
/// child file system's object-set header is destroyed: that file system is reported
/// unavailable (by name, with the error) while the root and a sibling list every entry and
/// the pool stays writable. Before, import failed for every uberblock.
#[test]
fn a_file_system_with_no_good_copy_of_its_root_is_unavailable_not_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let expected = build(dir.path());
    let path = dir.path().join("vdev.img");
    let child = format!("{POOL}/child");
    let header = {
        let pool = import(dir.path(), POOL, tiny());
        let header = pool.dataset_objset(&child).unwrap().synced_root();
        pool.export().unwrap();
        header
    };
    destroy_every_copy(&path, &[header]);

    let (pool, report) = Pool::import(POOL, ImportOptions::new(dirs(dir.path()), tiny()))
        .expect("import with one file system damaged beyond its copies");
    assert!(
        report
            .damaged
            .iter()
            .any(|line| line.contains(&child) && line.contains("unavailable")),
        "import must name the damaged file system: {:?}",
        report.damaged
    );
    assert_eq!(
        pool.unavailable_datasets()
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>(),
        vec![child.as_str()]
    );
    let error = pool.open_file_system(&child).err().expect("unavailable");
    assert!(error.to_string().contains("unavailable"), "{error}");
    // The root file system lists everything and takes new writes.
    let fs = pool.file_system().unwrap();
    let mut paths = BTreeSet::new();
    list_all(&fs, fs.root(), "", &mut paths).unwrap();
    assert_eq!(paths, expected[0].1);
    fs.create(fs.root(), b"after-damage", 0o644, 0, 0).unwrap();
    drop(fs);
    pool.sync().unwrap();
    assert!(
        pool.destroy_dataset(&child, false).is_err(),
        "destroy would leak"
    );
    let report = check_pool(&pool, false).unwrap();
    assert!(
        report
            .blocks_unreadable
            .iter()
            .any(|line| line.contains("header")),
        "check must name the unreadable header: {report:#?}"
    );
    pool.export().unwrap();
    let (pool, _) = Pool::import(POOL, ImportOptions::new(dirs(dir.path()), tiny())).unwrap();
    let fs = pool.file_system().unwrap();
    fs.lookup(fs.root(), b"after-damage").unwrap();
    drop(fs);
    pool.export().unwrap();
}

/// A directory with no good copy of its blocks costs that directory, not the
/// file system: import and mount succeed, listing it fails with an error naming the object,
/// and every other directory lists.
#[test]
fn a_directory_with_no_good_copy_costs_that_directory_only() {
    let dir = tempfile::tempdir().unwrap();
    let expected = build(dir.path());
    let path = dir.path().join("vdev.img");
    let (victim, blocks) = {
        let pool = import(dir.path(), POOL, tiny());
        let fs = pool.file_system().unwrap();
        let victim = fs.lookup(fs.root(), b"root-dir-05").unwrap().ino;
        let objset = pool.root_objset();
        let dnode = objset
            .synced_objects()
            .unwrap()
            .into_iter()
            .find(|(object, _)| object.0 == victim)
            .expect("the directory's dnode")
            .1;
        let mut blocks = Vec::new();
        tarn::object::tree::visit_tree(&pool.core.io, &dnode, &mut |bp| {
            blocks.push(bp.clone());
            Ok(())
        })
        .unwrap();
        drop(fs);
        pool.export().unwrap();
        (victim, blocks)
    };
    assert!(!blocks.is_empty());
    destroy_every_copy(&path, &blocks);

    let pool = import(dir.path(), POOL, tiny());
    let fs = pool.file_system().unwrap();
    let error = fs.readdir(victim, 0, 128).expect_err("damaged directory");
    assert!(
        error.to_string().contains(&victim.to_string()),
        "the error must name the object: {error}"
    );
    for d in (0..DIRECTORIES).filter(|&d| d != 5) {
        let name = format!("root-dir-{d:02}");
        let ino = fs.lookup(fs.root(), name.as_bytes()).unwrap().ino;
        let mut paths = BTreeSet::new();
        list_all(&fs, ino, &format!("/{name}"), &mut paths).unwrap();
        let want: BTreeSet<String> = expected[0]
            .1
            .iter()
            .filter(|path| path.starts_with(&format!("/{name}/")))
            .cloned()
            .collect();
        assert_eq!(paths, want, "{name}");
    }
    drop(fs);
    let mut paths = BTreeSet::new();
    let child = pool.open_file_system(&format!("{POOL}/child")).unwrap();
    list_all(&child, child.root(), "", &mut paths).unwrap();
    assert_eq!(paths, expected[1].1);
    drop(child);
    pool.export().unwrap();
}
