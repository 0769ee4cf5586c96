//! Removing and truncating large files frees in chunks over several bounded txgs (OpenZFS's
//! dmu_free_long_range and zfs_delete_blocks), parked in the unlinked set meanwhile, so that a
//! crash part-way resumes at the next mount; the pool checks clean and the space comes back.
//!
//! Guards a bug: removing an object freed its whole tree in one sync pass, so a
//! delete of a huge file was one giant txg.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tarn::fs::{FileSystem, SetAttr};
use tarn::pool::Pool;
use tarn::tunables::Tunables;

const FILE_BLOCKS: u64 = 4096;

/// Chunks of 8 blocks (one indirect block of 1 KiB each), at most 1% of 16 MiB of them a txg:
/// a 4096-block file needs about four txgs.
fn tunables() -> Tunables {
    Tunables {
        delete_blocks: 8,
        per_txg_dirty_frees_percent: 1,
        ..tiny()
    }
}

fn write_big(fs: &FileSystem, name: &str) -> u64 {
    let attr = fs.create(fs.root(), name.as_bytes(), 0o644, 0, 0).unwrap();
    let chunk = 256 << 10;
    for offset in (0..FILE_BLOCKS * 4096).step_by(chunk) {
        fs.write(attr.ino, offset, &pattern(offset, chunk)).unwrap();
    }
    attr.ino
}

fn allocated(pool: &Pool) -> u64 {
    pool.core.io.space.totals().allocated
}

/// Bytes allocated to the MOS's blocks (every copy): pool metadata, space maps included.
fn mos_allocated(pool: &Pool) -> u64 {
    let mut bytes = 0;
    pool.core
        .mos
        .visit_synced_blocks(&mut |bp| {
            bytes += bp.copies().map(|dva| dva.size_allocated).sum::<u64>();
            Ok(())
        })
        .unwrap();
    bytes
}

/// Space maps that exist on the pool's vdevs.
fn space_maps(pool: &Pool) -> u64 {
    pool.core
        .io
        .space
        .stats()
        .iter()
        .flat_map(|vdev| vdev.metaslabs.iter())
        .filter(|metaslab| metaslab.space_map_object.0 != 0)
        .count() as u64
}

fn settle(pool: &Pool) {
    for _ in 0..3 {
        pool.sync().unwrap();
    }
}

#[test]
fn unlink_of_a_large_file_spans_several_txgs_and_returns_the_space() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables());
    let fs = pool.file_system().unwrap();
    settle(&pool);
    let baseline = allocated(&pool);
    write_big(&fs, "big");
    settle(&pool);
    assert!(allocated(&pool) > baseline + FILE_BLOCKS * 4096 / 2);

    let before = pool.last_synced_txg();
    let started = Instant::now();
    fs.unlink(fs.root(), b"big").unwrap();
    eprintln!("unlink took {:?}", started.elapsed());
    let during = pool.last_synced_txg();
    assert!(
        during.0 >= before.0 + 3,
        "the delete waited for only {} txgs",
        during.0 - before.0
    );
    assert!(fs.unlinked_objects().unwrap().is_empty());
    settle(&pool);
    assert!(
        allocated(&pool) <= baseline + (128 << 10),
        "space back: baseline {baseline}, now {}",
        allocated(&pool)
    );
    assert_clean(&pool);
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn truncating_a_large_file_keeps_its_head_and_frees_its_tail_in_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables());
    let fs = pool.file_system().unwrap();
    let ino = write_big(&fs, "big");
    settle(&pool);
    let before = pool.last_synced_txg();
    let keep = 10_000u64;
    fs.setattr(
        ino,
        SetAttr {
            size: Some(keep),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert!(pool.last_synced_txg().0 >= before.0 + 3);
    let attr = fs.getattr(ino).unwrap();
    assert_eq!(attr.size, keep);
    assert_eq!(
        fs.read(ino, 0, keep as usize + 100).unwrap(),
        pattern(0, 256 << 10)[..keep as usize]
    );
    settle(&pool);
    assert_clean(&pool);
    drop(fs);
    pool.export().unwrap();
}

/// The child of the crash test (does nothing unless that test runs it).
#[test]
fn child_unlinks_until_killed() {
    let Ok(dir) = std::env::var("TARN_TEST_DIR") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let pool = import(&dir, "tank", tunables());
    let fs = pool.file_system().unwrap();
    std::fs::write(dir.join("unlink-started"), b"1").unwrap();
    fs.unlink(fs.root(), b"big").unwrap();
    std::fs::write(dir.join("unlink-returned"), b"1").unwrap();
    loop {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One crash attempt: kill the child `delay` after its unlink started. Returns whether the kill
/// landed in the middle of the chunked delete (the name gone, the object still parked).
fn crash_attempt(delay: Duration) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables());
    let baseline;
    let baseline_mos;
    let baseline_maps;
    let ino;
    {
        let fs = pool.file_system().unwrap();
        settle(&pool);
        baseline = allocated(&pool);
        baseline_mos = mos_allocated(&pool);
        baseline_maps = space_maps(&pool);
        ino = write_big(&fs, "big");
        settle(&pool);
    }
    pool.export().unwrap();
    let started_marker = dir.path().join("unlink-started");
    let child = spawn_child(
        module_path!(),
        "child_unlinks_until_killed",
        &[("TARN_TEST_DIR", dir.path().display().to_string())],
    );
    wait_for_file(&started_marker, Duration::from_secs(60));
    std::thread::sleep(delay);
    kill_child(child);
    let returned = dir.path().join("unlink-returned").exists();

    let pool = import(dir.path(), "tank", tunables());
    assert_clean(&pool);
    let parked = pool.root_objset().exists(tarn::types::ObjectId(ino));
    let fs = pool.file_system().unwrap();
    let name_left = fs.lookup(fs.root(), b"big").is_ok();
    assert!(
        !(returned && name_left),
        "unlink returned but the name survived"
    );
    let interrupted = parked && !name_left;
    // Mounting drained the unlinked set: whatever the kill interrupted is finished.
    assert!(fs.unlinked_objects().unwrap().is_empty());
    if !name_left {
        settle(&pool);
        assert!(!pool.root_objset().exists(tarn::types::ObjectId(ino)));
        // The file's space is back. The space maps of the metaslabs its blocks touched stay
        // (MOS objects, never freed, as in OpenZFS): each costs its block and dnode, three
        // copies, so MOS growth is bounded per new map.
        let (now, mos) = (allocated(&pool), mos_allocated(&pool));
        assert!(
            now - mos <= baseline - baseline_mos + (128 << 10),
            "space back after the interrupted delete: baseline {baseline} (MOS {baseline_mos}), now {now} (MOS {mos})"
        );
        let new_maps = space_maps(&pool) - baseline_maps;
        assert!(
            mos <= baseline_mos + (128 << 10) + new_maps * (6 << 10),
            "MOS grew from {baseline_mos} to {mos} with {new_maps} new space maps"
        );
    }
    assert_clean(&pool);
    drop(fs);
    pool.export().unwrap();
    interrupted
}

#[test]
fn a_delete_killed_part_way_finishes_at_the_next_mount() {
    let delays = [20, 40, 10, 80, 5, 160, 2, 320];
    let interrupted = delays
        .iter()
        .filter(|&&ms| crash_attempt(Duration::from_millis(ms)))
        .count();
    assert!(interrupted > 0, "no kill landed in the middle of a delete");
}
