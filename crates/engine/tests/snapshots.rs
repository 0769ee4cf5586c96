//! Snapshots on a real pool on sparse files: contents frozen while the head
//! changes, deadlists and space figures that `check` proves, destroy (single, ranges, in any
//! order) with the space coming back in the background, rollback, rename, and everything
//! surviving export and import.

use crate::common;

use common::*;
use tarn::check::check_pool;
use tarn::fs::FileSystem;
use tarn::pool::Pool;
use tarn::tunables::Tunables;

fn tunables() -> Tunables {
    tiny()
}

fn write_file(fs: &FileSystem, name: &str, seed: u64, bytes: usize) -> u64 {
    let ino = root_file(fs, name);
    fs.write(ino, 0, &pattern(seed, bytes)).unwrap();
    ino
}

fn read_file(fs: &FileSystem, name: &str) -> Vec<u8> {
    let attr = fs.lookup(fs.root(), name.as_bytes()).unwrap();
    fs.read(attr.ino, 0, attr.size as usize).unwrap()
}

fn snapshot(pool: &Pool, name: &str) {
    pool.create_snapshots(&[name.to_string()], false).unwrap();
}

fn used(pool: &Pool, dataset: &str) -> tarn::pool::datasets::DatasetInfo {
    pool.datasets()
        .into_iter()
        .find(|info| info.name == dataset)
        .unwrap()
}

#[test]
fn snapshot_contents_survive_overwrites_truncates_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables());
    pool.create_dataset("tank/fs", &[("compression".into(), "off".into())], false)
        .unwrap();
    let fs = pool.open_file_system("tank/fs").unwrap();
    write_file(&fs, "a", 1, 300_000);
    write_file(&fs, "b", 2, 200_000);
    write_file(&fs, "c", 3, 50_000);
    snapshot(&pool, "tank/fs@one");
    assert_clean(&pool);

    // Overwrite, truncate, delete in the head.
    write_file(&fs, "a", 11, 300_000);
    let b = fs.lookup(fs.root(), b"b").unwrap().ino;
    fs.setattr(
        b,
        tarn::fs::SetAttr {
            size: Some(1000),
            ..Default::default()
        },
    )
    .unwrap();
    fs.unlink(fs.root(), b"c").unwrap();
    pool.sync().unwrap();
    assert_clean(&pool);

    let snap = pool.snapshot_file_system("tank/fs@one").unwrap();
    assert_eq!(read_file(&snap, "a"), pattern(1, 300_000));
    assert_eq!(read_file(&snap, "b"), pattern(2, 200_000));
    assert_eq!(read_file(&snap, "c"), pattern(3, 50_000));
    assert!(matches!(
        snap.create(snap.root(), b"x", 0o644, 0, 0),
        Err(tarn::fs::FsError::ReadOnly)
    ));
    assert_eq!(read_file(&fs, "a"), pattern(11, 300_000));

    let info = pool.snapshot_info("tank/fs@one").unwrap();
    let head = used(&pool, "tank/fs");
    // The snapshot alone holds the old a, most of b, and c.
    assert!(info.used > 500_000, "snapshot unique {}", info.used);
    assert_eq!(head.used_by_snapshots, info.used);
    assert_eq!(head.used, head.used_by_dataset + head.used_by_snapshots);
    assert!(head.written > 300_000);

    // Destroy: the space comes back in the background, check clean throughout.
    let before = pool.core.io.space.totals().allocated;
    pool.destroy_snapshots("tank/fs@one", false).unwrap();
    assert_clean(&pool);
    wait_freed(&pool);
    assert_clean(&pool);
    let after = pool.core.io.space.totals().allocated;
    // Within the metadata the destroy itself wrote.
    assert!(
        before - after + (64 << 10) >= info.used,
        "freed {} of {}",
        before - after,
        info.used
    );
    assert_eq!(used(&pool, "tank/fs").used_by_snapshots, 0);
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tunables());
    assert_clean(&pool);
}

/// Many snapshots with changes between them, destroyed in an order that merges deadlists
/// repeatedly (middle ones, newest-but-one backwards), check clean after each step and
/// after export and import.
#[test]
fn destroys_in_any_order_keep_deadlists_exact() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables());
    pool.create_dataset("tank/fs", &[("compression".into(), "off".into())], false)
        .unwrap();
    let fs = pool.open_file_system("tank/fs").unwrap();
    let mut expected = Vec::new();
    for round in 0..12u64 {
        for file in 0..4u64 {
            if (round + file) % 3 != 0 {
                write_file(&fs, &format!("f{file}"), round * 10 + file, 40_000);
            }
        }
        if round % 4 == 3 {
            let _ = fs.unlink(fs.root(), b"f1");
        }
        snapshot(&pool, &format!("tank/fs@s{round}"));
        let mut contents = Vec::new();
        for file in 0..4u64 {
            let name = format!("f{file}");
            contents.push(
                fs.lookup(fs.root(), name.as_bytes())
                    .ok()
                    .map(|_| read_file(&fs, &name)),
            );
        }
        expected.push(contents);
    }
    assert_clean(&pool);
    for order in [vec![5, 6, 7], vec![10, 9, 8], vec![0], vec![11], vec![2, 1]] {
        for index in order {
            pool.destroy_snapshots(&format!("tank/fs@s{index}"), false)
                .unwrap();
            assert_clean(&pool);
        }
    }
    wait_freed(&pool);
    assert_clean(&pool);
    for (index, contents) in expected.iter().enumerate() {
        let Ok(snap) = pool.snapshot_file_system(&format!("tank/fs@s{index}")) else {
            continue;
        };
        for (file, content) in contents.iter().enumerate() {
            let name = format!("f{file}");
            match content {
                Some(bytes) => assert_eq!(&read_file(&snap, &name), bytes, "s{index} {name}"),
                None => assert!(snap.lookup(snap.root(), name.as_bytes()).is_err()),
            }
        }
    }
    let left: Vec<String> = pool.snapshots().into_iter().map(|s| s.name).collect();
    assert_eq!(left, vec!["tank/fs@s3", "tank/fs@s4"]);
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tunables());
    assert_clean(&pool);
    pool.destroy_snapshots("tank/fs@%", false).unwrap();
    wait_freed(&pool);
    assert_clean(&pool);
    assert!(pool.snapshots().is_empty());
}

#[test]
fn rollback_restores_the_snapshot_and_frees_what_came_after() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables());
    pool.create_dataset("tank/fs", &[], false).unwrap();
    let fs = pool.open_file_system("tank/fs").unwrap();
    write_file(&fs, "keep", 1, 100_000);
    snapshot(&pool, "tank/fs@a");
    write_file(&fs, "keep", 2, 100_000);
    write_file(&fs, "new", 3, 200_000);
    snapshot(&pool, "tank/fs@b");
    write_file(&fs, "newer", 4, 10_000);
    pool.sync().unwrap();

    // Not the newest without -r: refused, nothing changed.
    assert!(pool.rollback("tank/fs@a", false).is_err());
    assert_eq!(pool.snapshots().len(), 2);
    // A rollback in a txg that also writes the head (this change is not synced yet): the
    // tree freed is the one that txg wrote.
    pool.rollback("tank/fs@b", false).unwrap();
    assert!(fs.lookup(fs.root(), b"newer").is_err());
    write_file(&fs, "newer", 4, 10_000);

    let destroyed = pool.rollback("tank/fs@a", true).unwrap();
    assert_eq!(destroyed, vec!["tank/fs@b".to_string()]);
    // The mounted file system sees the snapshot's state at once.
    assert_eq!(read_file(&fs, "keep"), pattern(1, 100_000));
    assert!(fs.lookup(fs.root(), b"new").is_err());
    assert!(fs.lookup(fs.root(), b"newer").is_err());
    // And keeps working.
    write_file(&fs, "after", 5, 30_000);
    pool.sync().unwrap();
    assert_clean(&pool);
    wait_freed(&pool);
    assert_clean(&pool);
    // The snapshot holds only what the head changed after the rollback (the directory).
    let head = used(&pool, "tank/fs");
    assert_eq!(
        head.used_by_snapshots,
        pool.snapshot_info("tank/fs@a").unwrap().used
    );
    assert!(head.used_by_snapshots < 64 << 10);
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tunables());
    let fs = pool.open_file_system("tank/fs").unwrap();
    assert_eq!(read_file(&fs, "keep"), pattern(1, 100_000));
    assert_eq!(read_file(&fs, "after"), pattern(5, 30_000));
    assert_clean(&pool);
}

#[test]
fn recursive_snapshots_are_atomic_and_names_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables());
    pool.create_dataset("tank/a/b", &[], true).unwrap();
    let created = pool
        .create_snapshots(&["tank/a@x".to_string()], true)
        .unwrap();
    assert_eq!(
        created,
        vec!["tank/a/b@x".to_string(), "tank/a@x".to_string()]
    );
    let txgs: Vec<u64> = pool.snapshots().iter().map(|s| s.creation_txg).collect();
    assert_eq!(txgs[0], txgs[1], "one txg for all");
    // Misuse: nothing changes.
    for bad in [
        "tank/a",
        "tank/a@",
        "tank/a@bad name",
        "tank/nope@x",
        "tank/a@x",
    ] {
        assert!(
            pool.create_snapshots(&[bad.to_string()], false).is_err(),
            "{bad}"
        );
    }
    assert!(pool
        .create_snapshots(&["tank/a@y".to_string(), "tank/a@x".to_string()], false)
        .is_err());
    assert_eq!(pool.snapshots().len(), 2);
    // A dataset with snapshots is destroyed only with -r.
    assert!(pool.destroy_dataset("tank/a/b", false).is_err());
    pool.rename_snapshot("tank/a@x", "tank/a@z").unwrap();
    assert!(pool.rename_snapshot("tank/a@z", "tank/a/b@q").is_err());
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tunables());
    let names: Vec<String> = pool.snapshots().into_iter().map(|s| s.name).collect();
    assert_eq!(names, vec!["tank/a@z", "tank/a/b@x"]);
    pool.destroy_dataset("tank/a", true).unwrap();
    wait_freed(&pool);
    assert!(pool.snapshots().is_empty());
    let report = check_pool(&pool, false).unwrap();
    assert!(report.is_clean(), "{report:#?}");
}

#[test]
fn renamed_file_systems_move_with_their_children_and_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables());
    pool.create_dataset("tank/a/b/c", &[], true).unwrap();
    pool.create_dataset("tank/x", &[], false).unwrap();
    {
        let fs = pool.open_file_system("tank/a/b").unwrap();
        write_file(&fs, "f", 9, 50_000);
    }
    pool.create_snapshots(&["tank/a/b@s".to_string()], true)
        .unwrap();
    // Misuse: nothing changes.
    for (old, new) in [
        ("tank", "tank/z"),
        ("tank/a", "tank/a/b/z"),
        ("tank/a/b", "tank/x"),
        ("tank/a/b", "tank/nope/b"),
        ("tank/a/b", "other/b"),
        ("tank/nope", "tank/z"),
    ] {
        assert!(pool.rename_dataset(old, new).is_err(), "{old} -> {new}");
    }
    pool.rename_dataset("tank/a/b", "tank/x/moved").unwrap();
    let names: Vec<String> = pool.datasets().into_iter().map(|info| info.name).collect();
    assert_eq!(
        names,
        vec!["tank", "tank/a", "tank/x", "tank/x/moved", "tank/x/moved/c"]
    );
    let snapshots: Vec<String> = pool.snapshots().into_iter().map(|info| info.name).collect();
    assert_eq!(snapshots, vec!["tank/x/moved@s", "tank/x/moved/c@s"]);
    let x = used(&pool, "tank/x");
    assert!(x.used_by_children >= 50_000, "{x:?}");
    assert_clean(&pool);
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tunables());
    let fs = pool.open_file_system("tank/x/moved").unwrap();
    assert_eq!(read_file(&fs, "f"), pattern(9, 50_000));
    assert!(pool.snapshot_info("tank/x/moved/c@s").is_ok());
    assert_clean(&pool);
}

#[test]
fn clones_share_their_origin_and_free_only_what_they_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables());
    pool.create_dataset("tank/fs", &[("compression".into(), "off".into())], false)
        .unwrap();
    let fs = pool.open_file_system("tank/fs").unwrap();
    write_file(&fs, "base", 1, 400_000);
    write_file(&fs, "other", 2, 100_000);
    snapshot(&pool, "tank/fs@origin");
    let before = allocated_settled(&pool);
    pool.create_clone("tank/fs@origin", "tank/clone", &[])
        .unwrap();
    let grew = allocated_settled(&pool) - before;
    assert!(grew < 64 << 10, "a clone copied {grew} bytes");
    let info = used(&pool, "tank/clone");
    assert_eq!(info.origin.as_deref(), Some("tank/fs@origin"));
    assert!(info.used < 64 << 10, "a fresh clone uses {}", info.used);
    assert_eq!(
        info.referenced,
        pool.snapshot_info("tank/fs@origin").unwrap().referenced
    );
    assert_eq!(
        pool.snapshot_info("tank/fs@origin").unwrap().clones,
        vec!["tank/clone".to_string()]
    );
    // Misuse: nothing changes.
    assert!(pool
        .create_clone("tank/fs@origin", "tank/clone", &[])
        .is_err());
    assert!(pool.create_clone("tank/fs@nope", "tank/c2", &[]).is_err());
    assert!(pool
        .create_clone("tank/fs@origin", "tank/nope/c2", &[])
        .is_err());
    assert!(pool.destroy_snapshots("tank/fs@origin", false).is_err());
    assert!(pool.destroy_dataset("tank/fs", true).is_err());
    assert_clean(&pool);

    // The clone diverges; the origin and its snapshot do not move.
    let clone = pool.open_file_system("tank/clone").unwrap();
    assert_eq!(read_file(&clone, "base"), pattern(1, 400_000));
    write_file(&clone, "base", 3, 100_000);
    clone.unlink(clone.root(), b"other").unwrap();
    write_file(&clone, "new", 4, 50_000);
    snapshot(&pool, "tank/clone@c1");
    write_file(&clone, "new", 5, 50_000);
    write_file(&fs, "other", 6, 100_000);
    pool.sync().unwrap();
    assert_clean(&pool);
    assert_eq!(read_file(&fs, "base"), pattern(1, 400_000));
    let origin_fs = pool.snapshot_file_system("tank/fs@origin").unwrap();
    assert_eq!(read_file(&origin_fs, "other"), pattern(2, 100_000));
    // Destroying the clone's own snapshot frees only blocks the clone wrote.
    pool.destroy_snapshots("tank/clone@c1", false).unwrap();
    wait_freed(&pool);
    assert_clean(&pool);
    assert_eq!(read_file(&origin_fs, "base"), pattern(1, 400_000));
    // A clone of a clone, then both destroyed: the origin's data stays.
    snapshot(&pool, "tank/clone@c2");
    pool.create_clone("tank/clone@c2", "tank/grandchild", &[])
        .unwrap();
    assert_clean(&pool);
    drop(clone);
    drop(origin_fs);
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tunables());
    assert_eq!(
        used(&pool, "tank/grandchild").origin.as_deref(),
        Some("tank/clone@c2")
    );
    assert_clean(&pool);
    pool.destroy_dataset("tank/grandchild", false).unwrap();
    pool.destroy_dataset("tank/clone", true).unwrap();
    wait_freed(&pool);
    assert_clean(&pool);
    assert_eq!(
        pool.snapshot_info("tank/fs@origin").unwrap().clones.len(),
        0
    );
    pool.destroy_snapshots("tank/fs@origin", false).unwrap();
    wait_freed(&pool);
    assert_clean(&pool);
    let fs = pool.open_file_system("tank/fs").unwrap();
    assert_eq!(read_file(&fs, "base"), pattern(1, 400_000));
    assert_eq!(read_file(&fs, "other"), pattern(6, 100_000));
}

#[test]
fn a_destroyed_snapshots_key_leaves_the_heads_deadlist_and_its_blocks_still_free() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables());
    pool.create_dataset("tank/fs", &[("compression".into(), "off".into())], false)
        .unwrap();
    let fs = pool.open_file_system("tank/fs").unwrap();
    // Snapshots taken and rotated as a snapshot manager does: each round writes, snapshots,
    // overwrites (so the head's deadlist takes blocks of every interval) and destroys the
    // oldest once five are kept.
    let head_keys = |pool: &Pool| {
        let head = head_of(pool, "fs");
        head.deadlist().keys().count()
    };
    let mut kept = std::collections::VecDeque::new();
    for round in 0..20u64 {
        write_file(&fs, &format!("f{}", round % 3), round, 30_000);
        let name = format!("tank/fs@s{round}");
        snapshot(&pool, &name);
        kept.push_back(name);
        write_file(&fs, &format!("f{}", (round + 1) % 3), round + 100, 30_000);
        if kept.len() > 5 {
            pool.destroy_snapshots(&kept.pop_front().unwrap(), false)
                .unwrap();
        }
    }
    pool.sync().unwrap();
    // Key 0 and one per live snapshot but the newest (blocks born after it are never on the
    // head's deadlist): not one per snapshot ever taken.
    assert_eq!(head_keys(&pool), kept.len());
    assert_clean(&pool);
    // The collapsed entries' blocks are still freed when the rest goes.
    pool.destroy_snapshots("tank/fs@%", false).unwrap();
    wait_freed(&pool);
    assert_clean(&pool);
    let info = used(&pool, "tank/fs");
    assert_eq!(info.used_by_snapshots, 0);
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tunables());
    assert_clean(&pool);
}

/// The head dataset of file system `relative` (its name below the pool).
fn head_of(pool: &Pool, relative: &str) -> std::sync::Arc<tarn::dataset::Dataset> {
    pool.core
        .dataset_list()
        .into_iter()
        .find(|(name, _)| name == relative)
        .map(|(_, head)| head)
        .unwrap_or_else(|| panic!("no file system {relative}"))
}

/// Each snapshot's deadlist summary of file system `fs`: whether its entries are known.
fn snapshot_summaries_whole(pool: &Pool, fs: &str) -> Vec<bool> {
    let head = head_of(pool, fs);
    head.snapshots()
        .iter()
        .map(|snapshot| snapshot.deadlist_summary().is_whole())
        .collect()
}

/// A dataset's name, used, usedbysnapshots, usedbydataset and logical bytes.
type DatasetFigures = (String, u64, u64, u64, u64);

/// The figures `list` shows of a file system and of every snapshot.
fn figures(pool: &Pool) -> (Vec<DatasetFigures>, Vec<tarn::SnapshotInfo>) {
    let datasets = pool
        .datasets()
        .into_iter()
        .map(|info| {
            (
                info.name,
                info.used,
                info.used_by_snapshots,
                info.used_by_dataset,
                info.uncompressed,
            )
        })
        .collect();
    (datasets, pool.snapshots())
}

/// Import reads only the header of a snapshot's deadlist (feature deadlist_totals), not its
/// keys, one per older snapshot; a clone's snapshots, whose space is split at the origin by
/// key, are read whole. The figures are those before export, and stay right (check walks every
/// block) through destroys and a promote after import, which read the deadlists they change
/// whole. With the feature disabled every deadlist is read whole; enabled later, the deadlists
/// written from then on carry a header.
#[test]
fn import_reads_snapshot_deadlist_headers_and_the_figures_hold() {
    for with_feature in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::create(tarn::pool::CreateOptions {
            name: "tank".into(),
            log: Vec::new(),
            cache: Vec::new(),
            vdevs: single(dir.path(), "v0"),
            create_size: Some(VDEV_SIZE),
            force: false,
            tunables: tunables(),
            wrap_device: None,
            disabled_features: if with_feature {
                Vec::new()
            } else {
                vec!["deadlist_totals".into()]
            },
        })
        .unwrap();
        pool.create_dataset("tank/fs", &[("compression".into(), "off".into())], false)
            .unwrap();
        let fs = pool.open_file_system("tank/fs").unwrap();
        for round in 0..12u64 {
            write_file(
                &fs,
                &format!("f{}", round % 3),
                round,
                20_000 + round as usize,
            );
            snapshot(&pool, &format!("tank/fs@s{round}"));
        }
        pool.create_clone("tank/fs@s5", "tank/clone", &[]).unwrap();
        let clone = pool.open_file_system("tank/clone").unwrap();
        for round in 0..4u64 {
            write_file(&clone, &format!("f{}", round % 3), 50 + round, 15_000);
            snapshot(&pool, &format!("tank/clone@c{round}"));
        }
        write_file(&clone, "f0", 99, 10_000);
        assert_clean(&pool);
        drop((fs, clone));
        pool.export().unwrap();
        // A writable import's first txg rewrites each file system's header (its log header),
        // which a snapshot then holds alone: the figures are compared from the second import
        // on, as a read-only import (which writes nothing) sees them.
        import(dir.path(), "tank", tunables()).export().unwrap();
        let before = {
            let mut options = tarn::pool::ImportOptions::new(dirs(dir.path()), tunables());
            options.readonly = true;
            let (pool, _) = Pool::import("tank", options).unwrap();
            let before = figures(&pool);
            pool.export().unwrap();
            before
        };

        let pool = import(dir.path(), "tank", tunables());
        assert_eq!(figures(&pool), before, "feature {with_feature}");
        // The oldest snapshot's deadlist is empty and has no object: nothing to read.
        let whole = snapshot_summaries_whole(&pool, "fs");
        assert!(
            whole[1..].iter().all(|whole| *whole != with_feature),
            "feature {with_feature}: {whole:?}"
        );
        assert!(snapshot_summaries_whole(&pool, "clone")
            .iter()
            .all(|whole| *whole));
        assert_clean(&pool);

        // Destroys after import read the deadlists they merge whole.
        pool.destroy_snapshots("tank/fs@s7", false).unwrap();
        pool.destroy_snapshots("tank/fs@s1%s2", false).unwrap();
        // The promoted clone takes s0..s5; the old head, a clone now, keeps s6..s11 and has
        // their entries read.
        pool.promote("tank/clone").unwrap();
        assert!(snapshot_summaries_whole(&pool, "fs")
            .iter()
            .all(|whole| *whole));
        wait_freed(&pool);
        assert_clean(&pool);
        if !with_feature {
            pool.set_pool_property("feature@deadlist_totals", "enabled")
                .unwrap();
            let fs = pool.open_file_system("tank/clone").unwrap();
            for round in 0..3u64 {
                write_file(&fs, &format!("f{round}"), 200 + round, 12_000);
                snapshot(&pool, &format!("tank/clone@n{round}"));
            }
        }
        pool.sync().unwrap();
        pool.export().unwrap();
        let pool = import(dir.path(), "tank", tunables());
        if !with_feature {
            // Written after the feature was enabled: the newest snapshots' deadlists.
            let whole = snapshot_summaries_whole(&pool, "clone");
            assert!(!whole[whole.len() - 1], "{whole:?}");
        }
        assert_clean(&pool);
        // The old head, now a clone, loses its snapshots (their entries read at import).
        pool.destroy_snapshots("tank/fs@%", false).unwrap();
        wait_freed(&pool);
        assert_clean(&pool);
    }
}

/// A deadlist header that disagrees with its lists is reported by check; one that is not a
/// header at all leaves its file system unavailable at import, saying why, not a panic.
#[test]
fn a_wrong_deadlist_header_is_found_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables());
    pool.create_dataset("tank/fs", &[("compression".into(), "off".into())], false)
        .unwrap();
    let fs = pool.open_file_system("tank/fs").unwrap();
    for round in 0..3u64 {
        write_file(&fs, "f", round, 30_000);
        snapshot(&pool, &format!("tank/fs@s{round}"));
    }
    pool.sync().unwrap();
    let head = head_of(&pool, "fs");
    let object = head.snapshots()[2].phys().deadlist_object;
    assert_ne!(object.0, 0);
    let good = pool.core.mos.bonus(object).unwrap();
    let mut wrong = good.clone();
    wrong[8] ^= 0x40;
    for (bonus, expect) in [
        (wrong, "deadlist header says"),
        (vec![7u8; 12], "is not a deadlist header"),
    ] {
        {
            let hold = pool.assign().unwrap();
            pool.core
                .mos
                .set_bonus(
                    &hold.tx(),
                    object,
                    tarn::block::blkptr::ObjectType::BlockPtrList,
                    &bonus,
                )
                .unwrap();
        }
        pool.sync().unwrap();
        let report = check_pool(&pool, false).unwrap();
        assert!(
            report.errors.iter().any(|error| error.contains(expect)),
            "{expect}: {:?}",
            report.errors
        );
    }
    drop(fs);
    pool.export().unwrap();
    // The pool imports; the file system is left unavailable, saying why.
    let pool = import(dir.path(), "tank", tunables());
    let unavailable = pool.unavailable_datasets();
    assert!(
        unavailable
            .iter()
            .any(|(name, why)| name == "tank/fs" && why.contains("is not a deadlist header")),
        "{unavailable:?}"
    );
    pool.export().unwrap();
}

/// A destroyed snapshot's key leaves the heads of the clones made of later snapshots (they
/// inherited it) and of their clones, as OpenZFS's dsl_dataset_remove_clones_key; a clone of
/// an earlier snapshot keeps its keys. The clones' data and space stay right (check), through
/// a promote that refines the keys again.
#[test]
fn a_destroyed_snapshots_key_leaves_the_heads_of_later_clones() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables());
    pool.create_dataset("tank/fs", &[("compression".into(), "off".into())], false)
        .unwrap();
    let fs = pool.open_file_system("tank/fs").unwrap();
    for round in 0..5u64 {
        write_file(&fs, &format!("f{}", round % 2), round, 20_000);
        snapshot(&pool, &format!("tank/fs@s{round}"));
    }
    pool.create_clone("tank/fs@s0", "tank/early", &[]).unwrap();
    pool.create_clone("tank/fs@s3", "tank/late", &[]).unwrap();
    let late = pool.open_file_system("tank/late").unwrap();
    write_file(&late, "f0", 40, 20_000);
    snapshot(&pool, "tank/late@l0");
    pool.create_clone("tank/late@l0", "tank/later", &[])
        .unwrap();
    let later = pool.open_file_system("tank/later").unwrap();
    // The clones kill blocks of every older interval of the origin.
    write_file(&late, "f1", 41, 20_000);
    write_file(&later, "f1", 42, 20_000);
    pool.sync().unwrap();
    let head_keys = |pool: &Pool, name: &str| {
        let head = head_of(pool, name);
        head.deadlist().keys().collect::<Vec<_>>()
    };
    let s1 = tarn::types::Txg(pool.snapshot_info("tank/fs@s1").unwrap().creation_txg);
    let before: Vec<_> = ["late", "later", "early"]
        .iter()
        .map(|name| head_keys(&pool, name))
        .collect();
    assert!(
        before[0].contains(&s1) && before[1].contains(&s1),
        "{before:?}"
    );
    pool.destroy_snapshots("tank/fs@s1", false).unwrap();
    pool.sync().unwrap();
    for (index, name) in ["late", "later"].into_iter().enumerate() {
        let keys = head_keys(&pool, name);
        assert!(!keys.contains(&s1), "{name}: {keys:?}");
        assert_eq!(keys.len(), before[index].len() - 1, "{name}");
    }
    assert_eq!(head_keys(&pool, "early"), before[2]);
    assert_clean(&pool);
    assert_eq!(read_file(&late, "f1"), pattern(41, 20_000));
    assert_eq!(read_file(&later, "f0"), pattern(40, 20_000));
    drop((fs, late, later));
    pool.promote("tank/late").unwrap();
    wait_freed(&pool);
    assert_clean(&pool);
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tunables());
    assert_clean(&pool);
}
