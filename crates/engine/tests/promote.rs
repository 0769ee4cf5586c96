//! Promote: the origin's snapshots up to the origin move to the clone, the
//! old origin file system becomes a clone of the promoted one, and data, space figures and
//! `check` stay right through promote, export and import, destroy of the old origin, and a
//! promote back; misuse (a file system that is not a clone, a snapshot, a missing name, a
//! snapshot name conflict) is refused and changes nothing.

use crate::common;

use common::*;
use tarn::fs::FileSystem;
use tarn::pool::datasets::DatasetInfo;
use tarn::pool::Pool;

fn write_file(fs: &FileSystem, name: &str, seed: u64, bytes: usize) {
    let ino = root_file(fs, name);
    // Whole-file rewrites: the file is exactly the pattern afterwards.
    fs.setattr(
        ino,
        tarn::fs::SetAttr {
            size: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    fs.write(ino, 0, &pattern(seed, bytes)).unwrap();
}

fn read_file(fs: &FileSystem, name: &str) -> Vec<u8> {
    let attr = fs.lookup(fs.root(), name.as_bytes()).unwrap();
    fs.read(attr.ino, 0, attr.size as usize).unwrap()
}

fn snapshot(pool: &Pool, name: &str) {
    pool.create_snapshots(&[name.to_string()], false).unwrap();
}

fn info(pool: &Pool, dataset: &str) -> DatasetInfo {
    pool.datasets()
        .into_iter()
        .find(|info| info.name == dataset)
        .unwrap()
}

fn snapshot_names(pool: &Pool, dataset: &str) -> Vec<String> {
    pool.core
        .snapshots_of(dataset)
        .unwrap()
        .into_iter()
        .map(|info| info.name)
        .collect()
}

/// The contents every snapshot and head must keep, by name.
fn verify(pool: &Pool, expected: &[(&str, &str, u64, usize)]) {
    for (dataset, file, seed, bytes) in expected {
        let fs = if dataset.contains('@') {
            pool.snapshot_file_system(dataset).unwrap()
        } else {
            pool.open_file_system(dataset).unwrap()
        };
        assert!(
            read_file(&fs, file) == pattern(*seed, *bytes),
            "{dataset}/{file} is not pattern {seed}"
        );
    }
}

#[test]
fn promote_moves_snapshots_and_space_and_survives_import_and_destroy() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tiny());
    pool.create_dataset("tank/fs", &[("compression".into(), "off".into())], false)
        .unwrap();
    let fs = pool.open_file_system("tank/fs").unwrap();
    write_file(&fs, "a", 1, 300_000);
    write_file(&fs, "b", 2, 100_000);
    snapshot(&pool, "tank/fs@s1");
    write_file(&fs, "a", 3, 300_000);
    snapshot(&pool, "tank/fs@s2");
    write_file(&fs, "b", 4, 100_000);
    snapshot(&pool, "tank/fs@s3");
    write_file(&fs, "a", 5, 200_000);
    pool.create_clone("tank/fs@s2", "tank/clone", &[]).unwrap();
    let clone = pool.open_file_system("tank/clone").unwrap();
    // The clone kills origin blocks born in both of the origin's intervals.
    write_file(&clone, "a", 6, 150_000);
    write_file(&clone, "b", 7, 50_000);
    snapshot(&pool, "tank/clone@c1");
    write_file(&clone, "c", 8, 80_000);
    pool.sync().unwrap();
    assert_clean(&pool);
    let expected = [
        ("tank/fs", "a", 5, 200_000),
        ("tank/fs", "b", 4, 100_000),
        ("tank/clone", "a", 6, 150_000),
        ("tank/clone", "c", 8, 80_000),
        ("tank/clone@c1", "b", 7, 50_000),
    ];
    verify(&pool, &expected);
    // Reading updates access times (relatime), and the dnode blocks they
    // rewrite may compress to another size: settle them before measuring.
    pool.sync().unwrap();
    let total_before = info(&pool, "tank/fs").used + info(&pool, "tank/clone").used;
    let root_before = info(&pool, "tank").used;

    // Misuse: nothing changes.
    assert!(pool.promote("tank/fs").is_err(), "not a clone");
    assert!(pool.promote("tank/clone@c1").is_err(), "a snapshot");
    assert!(pool.promote("tank/missing").is_err(), "missing");
    assert!(pool.promote("other/clone").is_err(), "another pool");
    snapshot(&pool, "tank/clone@s1");
    let error = pool.promote("tank/clone").unwrap_err().to_string();
    assert!(error.contains("tank/clone@s1"), "{error}");
    pool.destroy_snapshots("tank/clone@s1", false).unwrap();
    wait_freed(&pool);
    assert_eq!(snapshot_names(&pool, "tank/fs").len(), 3);
    assert_clean(&pool);

    let moved = pool.promote("tank/clone").unwrap();
    assert_eq!(moved, vec!["tank/clone@s1", "tank/clone@s2"]);
    assert_eq!(
        snapshot_names(&pool, "tank/clone"),
        vec!["tank/clone@s1", "tank/clone@s2", "tank/clone@c1"]
    );
    assert_eq!(snapshot_names(&pool, "tank/fs"), vec!["tank/fs@s3"]);
    assert_eq!(
        info(&pool, "tank/fs").origin.as_deref(),
        Some("tank/clone@s2")
    );
    assert_eq!(info(&pool, "tank/clone").origin, None);
    assert_eq!(
        pool.snapshot_info("tank/clone@s2").unwrap().clones,
        vec!["tank/fs".to_string()]
    );
    let after = info(&pool, "tank/fs").used + info(&pool, "tank/clone").used;
    assert_eq!(
        after, total_before,
        "promote moves space, it does not make any"
    );
    assert_eq!(info(&pool, "tank").used, root_before);
    // The snapshots' space is the promoted one's now.
    assert!(info(&pool, "tank/clone").used_by_snapshots > 300_000);
    let expected_after = [
        ("tank/fs", "a", 5, 200_000),
        ("tank/fs@s3", "b", 4, 100_000),
        ("tank/clone@s1", "a", 1, 300_000),
        ("tank/clone@s2", "a", 3, 300_000),
        ("tank/clone@s2", "b", 2, 100_000),
        ("tank/clone", "a", 6, 150_000),
        ("tank/clone@c1", "b", 7, 50_000),
    ];
    verify(&pool, &expected_after);
    assert_clean(&pool);
    // Both keep working after the swap.
    write_file(&fs, "d", 9, 60_000);
    write_file(&clone, "a", 10, 150_000);
    snapshot(&pool, "tank/fs@s4");
    write_file(&fs, "d", 11, 60_000);
    pool.sync().unwrap();
    assert_clean(&pool);

    drop((fs, clone));
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tiny());
    assert_clean(&pool);
    assert_eq!(
        info(&pool, "tank/fs").origin.as_deref(),
        Some("tank/clone@s2")
    );
    verify(&pool, &expected_after[1..5]);
    assert!(pool.destroy_snapshots("tank/clone@s2", false).is_err());

    // Destroy the old origin (now a clone): the promoted side keeps everything.
    pool.destroy_dataset("tank/fs", true).unwrap();
    wait_freed(&pool);
    assert_clean(&pool);
    verify(&pool, &expected_after[2..5]);
    assert_eq!(pool.snapshot_info("tank/clone@s2").unwrap().clones.len(), 0);
    // The moved snapshots destroy like the clone's own, in any order.
    pool.destroy_snapshots("tank/clone@s2", false).unwrap();
    wait_freed(&pool);
    assert_clean(&pool);
    verify(&pool, &[("tank/clone@s1", "a", 1, 300_000)]);
    pool.destroy_snapshots("tank/clone@s1%c1", false).unwrap();
    wait_freed(&pool);
    assert_clean(&pool);
    verify(&pool, &[("tank/clone", "a", 10, 150_000)]);
}

/// Promote and promote back, with the origin file system itself a clone (the promoted one
/// takes over its origin) and a sibling clone of an earlier snapshot that moves along.
#[test]
fn promote_of_a_clone_of_a_clone_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tiny());
    pool.create_dataset("tank/base", &[("compression".into(), "off".into())], false)
        .unwrap();
    let base = pool.open_file_system("tank/base").unwrap();
    write_file(&base, "a", 1, 200_000);
    snapshot(&pool, "tank/base@b1");
    pool.create_clone("tank/base@b1", "tank/mid", &[]).unwrap();
    let mid = pool.open_file_system("tank/mid").unwrap();
    write_file(&mid, "a", 2, 100_000);
    snapshot(&pool, "tank/mid@m1");
    write_file(&mid, "m", 3, 50_000);
    snapshot(&pool, "tank/mid@m2");
    pool.create_clone("tank/mid@m1", "tank/sibling", &[])
        .unwrap();
    pool.create_clone("tank/mid@m2", "tank/top", &[]).unwrap();
    let top = pool.open_file_system("tank/top").unwrap();
    write_file(&top, "m", 4, 20_000);
    pool.sync().unwrap();
    assert_clean(&pool);
    let total = info(&pool, "tank").used;

    pool.promote("tank/top").unwrap();
    assert_eq!(
        info(&pool, "tank/top").origin.as_deref(),
        Some("tank/base@b1")
    );
    assert_eq!(
        info(&pool, "tank/mid").origin.as_deref(),
        Some("tank/top@m2")
    );
    assert_eq!(
        info(&pool, "tank/sibling").origin.as_deref(),
        Some("tank/top@m1")
    );
    assert_eq!(
        pool.snapshot_info("tank/base@b1").unwrap().clones,
        vec!["tank/top".to_string()]
    );
    assert_eq!(info(&pool, "tank").used, total);
    assert_clean(&pool);
    verify(
        &pool,
        &[
            ("tank/top@m1", "a", 2, 100_000),
            ("tank/top@m2", "m", 3, 50_000),
            ("tank/top", "m", 4, 20_000),
            ("tank/mid", "m", 3, 50_000),
            ("tank/sibling", "a", 2, 100_000),
        ],
    );
    // And back: the first layout again (reads above updated access times: measure anew).
    pool.sync().unwrap();
    let total = info(&pool, "tank").used;
    pool.promote("tank/mid").unwrap();
    assert_eq!(
        info(&pool, "tank/mid").origin.as_deref(),
        Some("tank/base@b1")
    );
    assert_eq!(
        info(&pool, "tank/top").origin.as_deref(),
        Some("tank/mid@m2")
    );
    assert_eq!(
        snapshot_names(&pool, "tank/mid"),
        vec!["tank/mid@m1", "tank/mid@m2"]
    );
    assert_eq!(info(&pool, "tank").used, total);
    assert_clean(&pool);
    // The base promoted over nothing: refused (it is no clone).
    assert!(pool.promote("tank/base").is_err());
    drop((base, mid, top));
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tiny());
    assert_clean(&pool);
    pool.destroy_dataset("tank/top", false).unwrap();
    pool.destroy_dataset("tank/sibling", false).unwrap();
    wait_freed(&pool);
    assert_clean(&pool);
}
