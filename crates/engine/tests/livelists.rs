//! Livelists: a clone records what it allocates and frees; `check`
//! proves the livelist equals the clone's own blocks; sub-lists roll over at the tunable bound
//! and condense when their frees cancel; the livelist is dropped when the clone shares too
//! little with its origin, on promote and on rollback; destroy frees exactly the live entries
//! in the background (resuming after export and import), or walks the tree without a livelist
//! (a pool without the feature); the space comes back either way and `check` stays clean.
//! The livelist reader: sub-lists read outside the sync and applied within
//! `livelist_sync_time_ms`, condense candidates found again after import, reads made stale by
//! a change to the livelist discarded and redone, export and a crash never waiting for it.

use crate::common;

use common::*;
use tarn::fs::FileSystem;
use tarn::pool::livelists::DestroyPath;
use tarn::pool::{CreateOptions, Pool};
use tarn::tunables::Tunables;

fn pool_with(dir: &std::path::Path, tunables: Tunables, disabled: &[&str]) -> Pool {
    Pool::create(CreateOptions {
        name: "tank".into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: single(dir, "v0"),
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables,
        wrap_device: None,
        disabled_features: disabled.iter().map(|name| name.to_string()).collect(),
    })
    .unwrap()
}

/// Overwrite `count` scattered 4 KiB records of `name` (seeded), syncing every `per_sync`.
fn scatter(pool: &Pool, fs: &FileSystem, name: &str, records: u64, count: u64, seed: u64) {
    let ino = root_file(fs, name);
    for index in 0..count {
        let record = (index * 7919 + seed * 31) % records;
        fs.write(ino, record * 4096, &pattern(seed * 1000 + index, 4096))
            .unwrap();
        if index % 16 == 15 {
            pool.sync().unwrap();
        }
    }
    pool.sync().unwrap();
}

/// Sync until the livelist reader has no condense work left (twice in a row: a sync can make
/// a candidate).
fn wait_condensed(pool: &Pool) {
    let started = std::time::Instant::now();
    let mut idle_rounds = 0;
    while idle_rounds < 2 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "condensing never finished: {:?}",
            pool.core.livelist_work_stats()
        );
        pool.sync().unwrap();
        if pool.core.livelist_condense_idle() {
            idle_rounds += 1;
        } else {
            idle_rounds = 0;
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

fn sublists(pool: &Pool, name: &str) -> Vec<tarn::dataset::livelist::Sublist> {
    pool.dataset_records(name).unwrap().livelist
}

/// Origin: one file of `records` 4 KiB records, snapshotted, cloned.
fn origin_and_clone(pool: &Pool, records: u64) -> (FileSystem, FileSystem) {
    pool.create_dataset("tank/fs", &[("compression".into(), "off".into())], false)
        .unwrap();
    let fs = pool.open_file_system("tank/fs").unwrap();
    let ino = root_file(&fs, "big");
    fs.write(ino, 0, &pattern(1, (records * 4096) as usize))
        .unwrap();
    pool.create_snapshots(&["tank/fs@origin".to_string()], false)
        .unwrap();
    pool.create_clone(
        "tank/fs@origin",
        "tank/clone",
        &[("atime".into(), "off".into())],
    )
    .unwrap();
    let clone = pool.open_file_system("tank/clone").unwrap();
    (fs, clone)
}

#[test]
fn livelist_destroy_frees_exactly_what_the_clone_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with(dir.path(), tiny(), &[]);
    let (fs, clone) = origin_and_clone(&pool, 2000);
    let allocated_before_writes = pool.core.io.space.totals().allocated;
    // Writes in many txgs, overwriting some records again: ALLOCs, FREEs, several sub-lists
    // (tiny: 256 entries each), some condensed. The clone keeps sharing over 75%.
    scatter(&pool, &clone, "big", 2000, 150, 2);
    scatter(&pool, &clone, "big", 2000, 150, 3);
    scatter(&pool, &clone, "big", 50, 120, 4);
    wait_condensed(&pool);
    assert_clean(&pool);
    let subs = sublists(&pool, "tank/clone");
    assert!(subs.len() >= 2, "sub-lists: {subs:?}");
    assert!(
        subs.iter()
            .all(|sub| sub.key.0 >= pool.snapshot_info("tank/fs@origin").unwrap().creation_txg),
        "{subs:?}"
    );
    assert_eq!(
        pool.destroy_path("tank/clone").unwrap(),
        DestroyPath::Livelist
    );
    let live: u64 = subs.iter().map(|sub| sub.space.used_bytes).sum();
    let info = pool
        .datasets()
        .into_iter()
        .find(|info| info.name == "tank/clone")
        .unwrap();
    assert_eq!(live, info.used_by_dataset);

    // Survives export and import.
    drop((fs, clone));
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tiny());
    assert_clean(&pool);
    assert_eq!(sublists(&pool, "tank/clone").len(), subs.len());

    // The reader held back: nothing is freed before the export.
    pool.core.hold_livelist_reads(true);
    pool.destroy_dataset("tank/clone", false).unwrap();
    assert!(pool.core.freeing_bytes().unwrap() > 0);
    assert_clean(&pool);
    // Export part-way: the rest resumes after import.
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tiny());
    assert_clean(&pool);
    wait_freed(&pool);
    assert_clean(&pool);
    let after = pool.core.io.space.totals().allocated;
    assert!(
        after <= allocated_before_writes + (64 << 10),
        "clone destroy left {} bytes of {} allocated",
        after,
        allocated_before_writes
    );
    let fs = pool.open_file_system("tank/fs").unwrap();
    let ino = root_file(&fs, "big");
    assert!(fs.read(ino, 0, 2000 * 4096).unwrap() == pattern(1, 2000 * 4096));
}

#[test]
fn sublists_condense_when_frees_cancel() {
    let dir = tempfile::tempdir().unwrap();
    // Small sub-lists: a new one every few txgs, so that condensing also merges neighbours.
    let tunables = Tunables {
        livelist_max_entries: 32,
        livelist_condense_min_frees: 4,
        ..tiny()
    };
    let pool = pool_with(dir.path(), tunables.clone(), &[]);
    let (_fs, clone) = origin_and_clone(&pool, 400);
    // The same 8 records over and over, one txg each time: FREEs pile up in one sub-list.
    let ino = root_file(&clone, "big");
    for round in 0..40u64 {
        for record in 0..8u64 {
            clone
                .write(ino, record * 4096, &pattern(round * 100 + record, 4096))
                .unwrap();
        }
        pool.sync().unwrap();
    }
    // Condensing is read in the background and applied by later txgs.
    wait_condensed(&pool);
    assert!(pool.core.livelist_work_stats().condensed > 0);
    assert_clean(&pool);
    // Condensed and merged lists survive export and import.
    drop((_fs, clone));
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tunables);
    wait_condensed(&pool);
    assert_clean(&pool);
    let subs = sublists(&pool, "tank/clone");
    assert!(!subs.is_empty(), "the livelist was dropped");
    // A new sub-list about every txg (each takes ~28 entries of the 32 allowed): without
    // merging there would be dozens, each freed in its own txg by a destroy.
    assert!(subs.len() <= 3, "sub-lists not merged: {subs:?}");
    let entries: u64 = subs.iter().map(|sub| sub.entries).sum();
    let frees: u64 = subs.iter().map(|sub| sub.frees).sum();
    // Without condensing: about 40 × (8 data + indirect + dnode + header) ALLOCs and as many
    // FREEs; condensed sub-lists hold their live entries alone.
    assert!(
        entries < 40 * 8,
        "entries {entries}, frees {frees}: {subs:?}"
    );
    assert!(frees * 2 < entries.max(1) || frees < 16, "{subs:?}");
    pool.destroy_dataset("tank/clone", false).unwrap();
    wait_freed(&pool);
    assert_clean(&pool);
}

#[test]
fn livelist_dropped_when_sharing_falls_and_on_promote_and_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with(dir.path(), tiny(), &[]);
    let (_fs, clone) = origin_and_clone(&pool, 100);
    // Rewrite most of the origin's data: the clone shares less than 75%.
    scatter(&pool, &clone, "big", 100, 100, 5);
    let ino = root_file(&clone, "new");
    clone.write(ino, 0, &pattern(6, 400 * 4096)).unwrap();
    pool.sync().unwrap();
    assert!(sublists(&pool, "tank/clone").is_empty());
    assert_eq!(
        pool.dataset_records("tank/clone")
            .unwrap()
            .phys
            .livelist_object
            .0,
        0
    );
    assert_eq!(
        pool.destroy_path("tank/clone").unwrap(),
        DestroyPath::Traversal
    );
    assert_clean(&pool);

    // Promote: both sides lose theirs.
    pool.create_clone("tank/fs@origin", "tank/second", &[])
        .unwrap();
    let second = pool.open_file_system("tank/second").unwrap();
    scatter(&pool, &second, "big", 100, 5, 7);
    assert!(!sublists(&pool, "tank/second").is_empty());
    pool.promote("tank/second").unwrap();
    assert!(sublists(&pool, "tank/second").is_empty());
    assert_eq!(
        pool.destroy_path("tank/fs").unwrap(),
        DestroyPath::Traversal
    );
    assert_clean(&pool);
    pool.promote("tank/fs").unwrap();
    assert_clean(&pool);

    // Rollback of a clone drops it too.
    pool.create_clone("tank/fs@origin", "tank/third", &[])
        .unwrap();
    let third = pool.open_file_system("tank/third").unwrap();
    pool.create_snapshots(&["tank/third@t1".to_string()], false)
        .unwrap();
    scatter(&pool, &third, "big", 100, 5, 8);
    assert!(!sublists(&pool, "tank/third").is_empty());
    drop(third);
    pool.rollback("tank/third@t1", false).unwrap();
    assert!(sublists(&pool, "tank/third").is_empty());
    assert_clean(&pool);

    drop((clone, second));
    for name in ["tank/clone", "tank/second", "tank/third"] {
        pool.destroy_dataset(name, true).unwrap();
    }
    wait_freed(&pool);
    assert_clean(&pool);
}

/// A clone with snapshots of its own destroyed with -r (snapshots first, same txg), with a
/// livelist; and a pool without the feature, whose clones walk their trees.
#[test]
fn clone_with_snapshots_and_pool_without_the_feature() {
    for disabled in [&[][..], &["livelist"][..]] {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool_with(dir.path(), tiny(), disabled);
        let (_fs, clone) = origin_and_clone(&pool, 1500);
        let allocated = allocated_settled(&pool);
        scatter(&pool, &clone, "big", 1500, 60, 9);
        pool.create_snapshots(&["tank/clone@c1".to_string()], false)
            .unwrap();
        scatter(&pool, &clone, "big", 1500, 60, 10);
        pool.create_snapshots(&["tank/clone@c2".to_string()], false)
            .unwrap();
        scatter(&pool, &clone, "big", 1500, 30, 11);
        assert_clean(&pool);
        let expected = if disabled.is_empty() {
            DestroyPath::Livelist
        } else {
            DestroyPath::Traversal
        };
        assert_eq!(pool.destroy_path("tank/clone").unwrap(), expected);
        assert_eq!(
            sublists(&pool, "tank/clone").is_empty(),
            !disabled.is_empty()
        );
        drop(clone);
        pool.destroy_snapshots("tank/clone@c1", false).unwrap();
        assert_clean(&pool);
        pool.destroy_dataset("tank/clone", true).unwrap();
        wait_freed(&pool);
        assert_clean(&pool);
        let after = allocated_settled(&pool);
        assert!(after <= allocated + (64 << 10), "{after} > {allocated}");
    }
}

/// Rewrite the first `records` records of `big` in `clone` `rounds` times, one txg each: FREEs
/// pile up in the sub-list holding the previous round's blocks.
fn rewrite_rounds(pool: &Pool, clone: &FileSystem, records: u64, rounds: std::ops::Range<u64>) {
    let ino = root_file(clone, "big");
    for round in rounds {
        for record in 0..records {
            clone
                .write(ino, record * 4096, &pattern(round * 100 + record, 4096))
                .unwrap();
        }
        pool.sync().unwrap();
    }
}

/// Sub-lists that meet the condense rule now.
fn condensable(pool: &Pool, name: &str, min_frees: u64) -> Vec<tarn::dataset::livelist::Sublist> {
    sublists(pool, name)
        .into_iter()
        .filter(|sub| tarn::dataset::livelist::worth_condensing(sub.entries, sub.frees, min_frees))
        .collect()
}

/// Rewrite rounds from `first` until the livelist reader holds a read back (under
/// `hold_livelist_reads`); returns the next round. The reader is woken by the flush that makes
/// a candidate, so it reads the livelist as that txg left it.
fn rounds_until_held(pool: &Pool, clone: &FileSystem, first: u64) -> u64 {
    for round in first..first + 40 {
        rewrite_rounds(pool, clone, 8, round..round + 1);
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_millis(500) {
            if pool.core.held_livelist_reads() > 0 {
                return round + 1;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    panic!("the reader never read anything");
}

/// A clone with many sub-lists (small `livelist_max_entries`) destroyed: the reader reads every
/// sub-list outside the sync and the sync frees each exactly once, with `check` clean before,
/// part-way and after, and all the clone's space back. Reading inside the sync used to cost up
/// to a whole sub-list per txg; here the sync only applies what was read.
#[test]
fn large_livelist_destroy_freed_by_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let tunables = Tunables {
        livelist_max_entries: 32,
        // One read applied per txg: the budget is spent by the first.
        livelist_sync_time_ms: 0,
        // No timer-driven txg within the test: only the reader's hand-overs start txgs.
        txg_timeout: 60,
        ..tiny()
    };
    let pool = pool_with(dir.path(), tunables.clone(), &[]);
    let (_fs, clone) = origin_and_clone(&pool, 3000);
    let allocated_before_writes = allocated_settled(&pool);
    scatter(&pool, &clone, "big", 3000, 400, 21);
    assert_clean(&pool);
    let subs: Vec<_> = sublists(&pool, "tank/clone")
        .into_iter()
        .filter(|sub| sub.list.0 != 0)
        .collect();
    assert!(subs.len() >= 10, "too few sub-lists to test: {subs:?}");
    assert_eq!(
        pool.destroy_path("tank/clone").unwrap(),
        DestroyPath::Livelist
    );
    let freed_before = pool.core.livelist_work_stats().sublists_freed;
    drop(clone);
    pool.destroy_dataset("tank/clone", false).unwrap();
    // No sync is asked for: the reader's hand-overs start the txgs that apply its reads (as
    // `pool wait -t free` and the clone-destroy benchmark rely on).
    let started = std::time::Instant::now();
    while pool.core.freeing_bytes().unwrap() > 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the destroy made no progress without syncs being asked for"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    wait_freed(&pool);
    assert_clean(&pool);
    let stats = pool.core.livelist_work_stats();
    // Every sub-list with a list freed once (a condense of the destroyed clone may have
    // merged two before the destroy, never more than were there).
    let freed = stats.sublists_freed - freed_before;
    assert!(
        freed >= 1 && freed <= subs.len() as u64,
        "{freed} sub-lists freed of {}: {stats:?}",
        subs.len()
    );
    let after = allocated_settled(&pool);
    assert!(
        after <= allocated_before_writes + (64 << 10),
        "clone destroy left {after} bytes of {allocated_before_writes} allocated"
    );
    // The queue entry went with the last sub-list: no livelist is left to keep the feature
    // active.
    assert_eq!(
        pool.feature_state("livelist"),
        Some(tarn::pool::features::FeatureState::Enabled)
    );
}

/// A condense candidate that was not condensed before export (the reader held back) is found
/// again from the sub-lists' headers at import and condensed then: candidates used to live in
/// memory only, so after an import a sub-list full of FREEs stayed as it was until it took
/// another FREE.
#[test]
fn condense_candidate_survives_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    // Small sub-lists: a new one about every other txg, and each older one dies whole (every
    // block is rewritten each round), which is what the condense rule waits for.
    let tunables = Tunables {
        livelist_max_entries: 32,
        livelist_condense_min_frees: 4,
        ..tiny()
    };
    let pool = pool_with(dir.path(), tunables.clone(), &[]);
    let (_fs, clone) = origin_and_clone(&pool, 400);
    pool.core.hold_livelist_reads(true);
    rewrite_rounds(&pool, &clone, 8, 0..10);
    assert!(
        !condensable(&pool, "tank/clone", 4).is_empty(),
        "no sub-list to condense: {:?}",
        sublists(&pool, "tank/clone")
    );
    assert_eq!(pool.core.livelist_work_stats().condensed, 0);
    drop((_fs, clone));
    // Export does not wait for the held read: the reader stops.
    pool.export().unwrap();

    let pool = import(dir.path(), "tank", tunables);
    // The reader starts with the import and may condense before this thread looks, so the
    // candidates are not counted here: the stats are the new pool's own, and a condense they
    // count was found after the import (nothing wrote to the clone since).
    wait_condensed(&pool);
    assert!(pool.core.livelist_work_stats().condensed >= 1);
    assert!(
        condensable(&pool, "tank/clone", 4).is_empty(),
        "{:?}",
        sublists(&pool, "tank/clone")
    );
    assert_clean(&pool);
    pool.destroy_dataset("tank/clone", false).unwrap();
    wait_freed(&pool);
    assert_clean(&pool);
}

/// `debug dataset` (the dataset's records with its livelist's sub-lists) read while the sync
/// condenses: each condense removes the lists it rewrites, and a header read of a list the
/// caller's copy of the livelist still named used to fail the whole request with "no such
/// object" (a race a CI run found). Every read succeeds, and names only lists that exist.
#[test]
fn sublists_read_while_condensing_never_fail() {
    let dir = tempfile::tempdir().unwrap();
    let tunables = Tunables {
        livelist_max_entries: 32,
        livelist_condense_min_frees: 4,
        ..tiny()
    };
    let pool = pool_with(dir.path(), tunables, &[]);
    let (_fs, clone) = origin_and_clone(&pool, 400);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let reads = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let subs = pool.dataset_records("tank/clone").unwrap().livelist;
                assert!(!subs.is_empty());
                reads += 1;
            }
            reads
        });
        rewrite_rounds(&pool, &clone, 8, 0..24);
        wait_condensed(&pool);
        stop.store(true, std::sync::atomic::Ordering::Release);
        reader.join().unwrap()
    });
    assert!(reads > 0);
    assert!(pool.core.livelist_work_stats().condensed >= 1);
    assert_clean(&pool);
}

/// The livelist changes between the reader's read and the sync's apply: entries appended to
/// the sub-list read (more FREEs), then the clone destroyed while a read is held. Each stale
/// read is discarded (applying it would drop the appended entries, or condense a livelist
/// that is queued for freeing), the reader reads again, and the work converges with `check`
/// clean.
#[test]
fn stale_livelist_reads_are_discarded_and_redone() {
    let dir = tempfile::tempdir().unwrap();
    // Small sub-lists (see `condense_candidate_survives_export_and_import`). The first
    // candidate is a sub-list that died whole in the txg that started the newest one, so its
    // read merges the newest (one round of ALLOCs, under half the bound) into it: the next
    // round appends FREEs to that newest list.
    let tunables = Tunables {
        livelist_max_entries: 32,
        livelist_condense_min_frees: 4,
        ..tiny()
    };
    let pool = pool_with(dir.path(), tunables.clone(), &[]);
    let (_fs, clone) = origin_and_clone(&pool, 400);
    pool.core.hold_livelist_reads(true);
    let next = rounds_until_held(&pool, &clone, 0);
    // The read is held; the merge partner takes more entries.
    rewrite_rounds(&pool, &clone, 8, next..next + 1);
    let discarded = pool.core.livelist_work_stats().discarded;
    pool.core.hold_livelist_reads(false);
    wait_condensed(&pool);
    // Applying the stale read would have lost the appended entries: the livelist would no
    // longer match the clone's blocks.
    assert_clean(&pool);
    let stats = pool.core.livelist_work_stats();
    assert!(stats.discarded > discarded, "{stats:?}");
    assert!(stats.condensed >= 1, "{stats:?}");
    assert!(
        condensable(&pool, "tank/clone", 4).is_empty(),
        "{:?}",
        sublists(&pool, "tank/clone")
    );
    assert_clean(&pool);

    // A condense read held while its clone is destroyed.
    pool.core.hold_livelist_reads(true);
    rounds_until_held(&pool, &clone, next + 1);
    let discarded = pool.core.livelist_work_stats().discarded;
    drop(clone);
    pool.destroy_dataset("tank/clone", false).unwrap();
    pool.core.hold_livelist_reads(false);
    wait_freed(&pool);
    let stats = pool.core.livelist_work_stats();
    assert!(stats.discarded > discarded, "{stats:?}");
    assert_clean(&pool);
}

/// Export and a crash (`abandon`) while the reader holds a delete read it has not handed over,
/// and after part of the livelist was freed: neither waits for the reader, nothing read but not
/// applied is lost (the queue on disk is the truth), and after each import the destroy resumes
/// and finishes with `check` clean and the space back.
#[test]
fn reader_stopped_mid_destroy_by_export_and_crash() {
    let dir = tempfile::tempdir().unwrap();
    let tunables = Tunables {
        livelist_max_entries: 32,
        livelist_sync_time_ms: 0,
        ..tiny()
    };
    let pool = pool_with(dir.path(), tunables.clone(), &[]);
    let (_fs, clone) = origin_and_clone(&pool, 3000);
    let allocated_before_writes = allocated_settled(&pool);
    scatter(&pool, &clone, "big", 3000, 300, 31);
    drop((_fs, clone));
    pool.core.hold_livelist_reads(true);
    pool.destroy_dataset("tank/clone", false).unwrap();
    let started = std::time::Instant::now();
    while pool.core.held_livelist_reads() == 0 {
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let freeing = pool.core.freeing_bytes().unwrap();
    assert!(freeing > 0);
    assert_eq!(pool.core.livelist_work_stats().sublists_freed, 0);
    pool.export().unwrap();

    // The new pool's reader starts at once: `freeing` may already be lower, never higher.
    let pool = import(dir.path(), "tank", tunables.clone());
    assert_clean(&pool);
    assert!(pool.core.freeing_bytes().unwrap() <= freeing);
    // Part of it freed, then a read held again and the process "dies".
    let started = std::time::Instant::now();
    while pool.core.livelist_work_stats().sublists_freed < 3 {
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        pool.sync().unwrap();
    }
    pool.core.hold_livelist_reads(true);
    let started = std::time::Instant::now();
    while pool.core.held_livelist_reads() == 0 {
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    pool.sync().unwrap();
    let freeing = pool.core.freeing_bytes().unwrap();
    assert!(freeing > 0, "the livelist was freed before the crash");
    pool.abandon();

    let pool = import(dir.path(), "tank", tunables);
    assert_clean(&pool);
    assert!(pool.core.freeing_bytes().unwrap() <= freeing);
    wait_freed(&pool);
    assert_clean(&pool);
    let after = allocated_settled(&pool);
    assert!(
        after <= allocated_before_writes + (64 << 10),
        "clone destroy left {after} bytes of {allocated_before_writes} allocated"
    );
}

/// `livelist_sync_time_ms` bounds what one txg applies: the reader reads ahead while the syncs
/// are paused (the sub-lists of a clone that rewrote the same records hold no live block, so
/// the read-ahead bound lets it read them all), then with a budget of 0 each txg applies one
/// read, and with a large budget one txg applies many.
#[test]
fn livelist_sync_time_bounds_the_reads_applied_per_txg() {
    for (budget_ms, expect_one) in [(0u64, true), (60_000, false)] {
        let dir = tempfile::tempdir().unwrap();
        let tunables = Tunables {
            livelist_max_entries: 32,
            // Never condensed: the dead sub-lists stay for the destroy.
            livelist_condense_min_frees: u64::MAX,
            livelist_sync_time_ms: budget_ms,
            ..tiny()
        };
        let pool = pool_with(dir.path(), tunables, &[]);
        let (_fs, clone) = origin_and_clone(&pool, 400);
        rewrite_rounds(&pool, &clone, 8, 0..30);
        let lists = sublists(&pool, "tank/clone")
            .iter()
            .filter(|sub| sub.list.0 != 0)
            .count();
        assert!(lists >= 6, "{lists} sub-lists");
        drop((_fs, clone));
        pool.core.hold_livelist_reads(true);
        pool.destroy_dataset("tank/clone", false).unwrap();
        let started = std::time::Instant::now();
        while pool.core.held_livelist_reads() == 0 {
            assert!(started.elapsed() < std::time::Duration::from_secs(30));
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        {
            let _paused = pool.core.txgs.pause_syncs();
            pool.core.hold_livelist_reads(false);
            let started = std::time::Instant::now();
            while pool.core.livelist_reads_ready_count() < 4 {
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(30),
                    "the reader did not read ahead: {} ready",
                    pool.core.livelist_reads_ready_count()
                );
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        wait_freed(&pool);
        assert_clean(&pool);
        let stats = pool.core.livelist_work_stats();
        if expect_one {
            assert_eq!(stats.most_applied_in_one_txg, 1, "{stats:?}");
        } else {
            assert!(stats.most_applied_in_one_txg >= 4, "{stats:?}");
        }
    }
}
