//! Frees of gang blocks on a bad disk: a gang whose header cannot be read cannot have its
//! pieces listed, so nothing of it can be freed. The tests damage every header copy of a
//! ganged file record (ganging forced with `metaslab_force_ganging`) and check that no free
//! path suspends the pool: a destroy, an overwrite in the txg sync, the retry after import,
//! and the leak with `free_leak_on_eio`, which `check` accounts for.

use crate::common;

use std::os::unix::fs::FileExt;

use tarn::block::gang::GANG_HEADER_SIZE;
use tarn::pool::Pool;
use tarn::tunables::Tunables;
use tarn::vdev::label::VDEV_LABEL_START_SIZE;

use common::gang::*;
use common::*;

/// Sync until the background frees have nothing left to do, or `limit` passes.
fn settle_background_frees(pool: &Pool, limit: std::time::Duration) {
    let started = std::time::Instant::now();
    while pool.core.background_work_pending() {
        assert!(
            started.elapsed() < limit,
            "background frees still pending after {limit:?}"
        );
        pool.sync().unwrap();
    }
    pool.sync().unwrap();
}

/// Write and sync a new file in the pool's root file system: the pool still takes writes.
fn write_another_file(pool: &Pool, name: &str) {
    let fs = pool.open_file_system(&pool.core.name).unwrap();
    let attr = fs.create(fs.root(), name.as_bytes(), 0o644, 0, 0).unwrap();
    fs.write(attr.ino, 0, &pattern(17, 64 << 10)).unwrap();
    drop(fs);
    pool.sync().unwrap();
}

/// Guards against an unreadable gang header suspending the pool during a free: the free of a
/// gang block reads its header to list its pieces, a header with no good copy failed the free,
/// the failed free failed the txg and suspended the pool, and since the destroy was resumed
/// after every import, every import suspended the pool again. Now such a block is set aside on
/// the stalled-free list (its space stays allocated and counted in `freeing`) and the destroy
/// goes on; the pool stays writable, and exports and imports without suspending. Imported with
/// `free_leak_on_eio`, the retried free leaks the block instead and counts it in `leaked`,
/// which `check` accounts for.
#[test]
fn an_unreadable_gang_header_stalls_its_free_and_never_suspends_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, _, gang) = pool_with_a_gang_file(dir.path(), "stall");
    let extents = pool.core.io.allocated_extents(&gang).unwrap();
    pool.export().unwrap();
    // Both header copies (the block has two), not its pieces.
    let image = dir.path().join("a.img");
    for &(_, offset, _) in &extents[..2] {
        damage(
            &image,
            (VDEV_LABEL_START_SIZE + offset, GANG_HEADER_SIZE as u64),
        );
    }

    let pool = import(dir.path(), "stall", forcing(100));
    pool.destroy_dataset("stall/fs", false).unwrap();
    settle_background_frees(&pool, std::time::Duration::from_secs(60));
    assert_eq!(pool.core.txgs.failure(), None, "the pool is not suspended");
    write_another_file(&pool, "after-destroy");
    let size = gang.size_allocated();
    assert_eq!(pool.core.stalled_free_bytes().unwrap(), size);
    assert_eq!(
        pool.core.freeing_bytes().unwrap(),
        size,
        "only the gang block is still to be freed"
    );
    assert_eq!(pool.core.leaked_bytes().unwrap(), 0);
    // Check reports the stalled block's unreadable header (and, since its pieces cannot be
    // listed, their space as unreferenced).
    let report = tarn::check::check_pool(&pool, false).unwrap();
    assert!(
        report
            .errors
            .iter()
            .any(|error| error.starts_with("stalled free")),
        "{report:#?}"
    );
    pool.export().unwrap();

    // The free is retried at import, fails again, and the pool stays writable.
    let pool = import(dir.path(), "stall", forcing(100));
    settle_background_frees(&pool, std::time::Duration::from_secs(60));
    assert_eq!(pool.core.txgs.failure(), None, "not suspended after import");
    write_another_file(&pool, "after-import");
    assert_eq!(pool.core.freeing_bytes().unwrap(), size);
    pool.export().unwrap();

    // With free_leak_on_eio the retried free leaks the block and `leaked` counts it.
    let leaking = Tunables {
        free_leak_on_eio: true,
        ..forcing(100)
    };
    let pool = import(dir.path(), "stall", leaking.clone());
    settle_background_frees(&pool, std::time::Duration::from_secs(60));
    assert_eq!(pool.core.txgs.failure(), None);
    assert_eq!(pool.core.freeing_bytes().unwrap(), 0);
    assert_eq!(pool.core.leaked_bytes().unwrap(), size);
    let shown = pool.pool_properties_named(&["leaked".into()]).unwrap();
    assert_eq!(
        shown[0].value,
        tarn::pool::props::PoolValue::Bytes(size),
        "pool get leaked"
    );
    let report = tarn::check::check_pool(&pool, false).unwrap();
    assert!(report.is_clean(), "{report:#?}");
    assert_eq!(report.leaked_accounted, size);
    write_another_file(&pool, "after-leak");
    pool.export().unwrap();

    // `leaked` is persistent.
    let pool = import(dir.path(), "stall", forcing(100));
    assert_eq!(pool.core.leaked_bytes().unwrap(), size);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// The same bug for a free made inside the txg sync: overwriting a file record that is a gang
/// with an unreadable header freed the old block in the sync pass, and the failed free failed
/// the txg. `PoolFreer` now stages it onto the deferred-free list, whose turn in the next txg
/// sets it aside like any other.
#[test]
fn overwriting_a_gang_with_an_unreadable_header_does_not_suspend_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, ino, gang) = pool_with_a_gang_file(dir.path(), "over");
    let extents = pool.core.io.allocated_extents(&gang).unwrap();
    pool.export().unwrap();
    let image = dir.path().join("a.img");
    for &(_, offset, _) in &extents[..2] {
        damage(
            &image,
            (VDEV_LABEL_START_SIZE + offset, GANG_HEADER_SIZE as u64),
        );
    }

    let pool = import(dir.path(), "over", forcing(100));
    {
        let fs = pool.open_file_system("over/fs").unwrap();
        fs.write(ino, 0, &pattern(19, RECORD as usize)).unwrap();
    }
    for _ in 0..3 {
        pool.sync().unwrap();
    }
    assert_eq!(pool.core.txgs.failure(), None, "the pool is not suspended");
    // The deferred-free list is carried out by the next txg that has work to do.
    write_another_file(&pool, "next-txg");
    assert_eq!(pool.core.txgs.failure(), None);
    assert_eq!(pool.core.deferred_free_count().unwrap(), 0);
    assert_eq!(
        pool.core.stalled_free_bytes().unwrap(),
        gang.size_allocated()
    );
    let fs = pool.open_file_system("over/fs").unwrap();
    assert_eq!(read_all(&fs, ino), pattern(19, RECORD as usize));
    drop(fs);
    pool.export().unwrap();
}

/// What a free set aside on a bad disk is retried after import, and finishes once the blocks
/// read again (a device that was missing is back): the stalled gang free, and a destroy entry
/// whose walk stopped at an unreadable indirect block, which used to be set aside for good.
#[test]
fn set_aside_frees_are_retried_after_import_and_finish_once_the_blocks_read() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, _, gang) = pool_with_a_gang_file(dir.path(), "retry");
    pool.create_dataset("retry/big", &[], false).unwrap();
    {
        let fs = pool.open_file_system("retry/big").unwrap();
        let attr = fs.create(fs.root(), b"large", 0o644, 0, 0).unwrap();
        fs.write(attr.ino, 0, &pattern(23, 64 << 10)).unwrap();
    }
    pool.sync().unwrap();
    let mut indirect = None;
    pool.dataset_objset("retry/big")
        .unwrap()
        .visit_synced_blocks(&mut |bp| {
            if bp.level == 1 && bp.object_type == gang.object_type && indirect.is_none() {
                indirect = Some(bp.clone());
            }
            Ok(())
        })
        .unwrap();
    let indirect = indirect.expect("the large file has an indirect block");
    let mut regions: Vec<(u64, u64)> = pool.core.io.allocated_extents(&gang).unwrap()[..2]
        .iter()
        .map(|&(_, offset, _)| (offset, GANG_HEADER_SIZE as u64))
        .collect();
    regions.extend(
        indirect
            .copies()
            .map(|dva| (dva.offset, dva.size_allocated)),
    );
    pool.export().unwrap();
    let image = dir.path().join("a.img");
    let saved: Vec<(u64, Vec<u8>)> = {
        let file = std::fs::File::open(&image).unwrap();
        regions
            .iter()
            .map(|&(offset, size)| {
                let mut bytes = vec![0u8; size as usize];
                file.read_exact_at(&mut bytes, VDEV_LABEL_START_SIZE + offset)
                    .unwrap();
                (offset, bytes)
            })
            .collect()
    };
    for &(offset, size) in &regions {
        damage(&image, (VDEV_LABEL_START_SIZE + offset, size));
    }

    let pool = import(dir.path(), "retry", forcing(100));
    pool.destroy_dataset("retry/fs", false).unwrap();
    pool.destroy_dataset("retry/big", false).unwrap();
    settle_background_frees(&pool, std::time::Duration::from_secs(60));
    assert_eq!(pool.core.txgs.failure(), None);
    let stalled = pool.core.stalled_free_bytes().unwrap();
    assert_eq!(stalled, gang.size_allocated());
    assert!(
        pool.core.freeing_bytes().unwrap() > stalled,
        "the big file system's entry is set aside with its space"
    );
    pool.export().unwrap();

    for (offset, bytes) in &saved {
        overwrite(&image, *offset, bytes);
    }
    let pool = import(dir.path(), "retry", forcing(100));
    settle_background_frees(&pool, std::time::Duration::from_secs(60));
    assert_eq!(pool.core.txgs.failure(), None);
    assert_eq!(pool.core.freeing_bytes().unwrap(), 0);
    assert_eq!(pool.core.stalled_free_bytes().unwrap(), 0);
    assert_eq!(pool.core.leaked_bytes().unwrap(), 0);
    assert_clean(&pool);
    pool.export().unwrap();
}
