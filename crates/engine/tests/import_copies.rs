//! Two copies of one vdev image. Before, an import scanning directories
//! that held a `cp` of a vdev next to the original took whichever path sorted last, could mix
//! the leaves of two copies, and opened and relabelled the wrong one. Now identical copies are
//! refused with a message naming both, and when one copy is newer (its label txg higher) it is
//! the one imported, the other named in a warning and never written.

use crate::common;

use std::path::Path;

use tarn::pool::{ImportOptions, Pool};

use common::*;

const POOL: &str = "copies";

fn digest(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn copies_of_one_vdev_are_never_combined() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let pool = create_pool(&a, POOL, single(&a, "vdev.img"), tiny());
    let fs = pool.file_system().unwrap();
    let ino = fs.create(fs.root(), b"old", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, &pattern(1, 10_000)).unwrap();
    drop(fs);
    pool.export().unwrap();
    std::fs::copy(a.join("vdev.img"), b.join("vdev.img")).unwrap();

    // The listing shows the pool once and names the copies.
    let both = vec![a.clone(), b.clone()];
    let found = Pool::scan(&both);
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0].copies_found,
        vec![vec![a.join("vdev.img"), b.join("vdev.img")]]
    );
    // Identical copies: refused, both named.
    let error = Pool::import(POOL, ImportOptions::new(both.clone(), tiny()))
        .err()
        .expect("identical copies must not import")
        .to_string();
    assert!(
        error.contains(&a.join("vdev.img").display().to_string())
            && error.contains(&b.join("vdev.img").display().to_string()),
        "{error}"
    );

    // The original moves on; the copy stays behind.
    let pool = import(&a, POOL, tiny());
    let fs = pool.file_system().unwrap();
    let ino = fs.create(fs.root(), b"new", 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, &pattern(2, 10_000)).unwrap();
    drop(fs);
    pool.export().unwrap();
    let stale = digest(&b.join("vdev.img"));

    let (pool, report) = Pool::import(POOL, ImportOptions::new(both, tiny())).unwrap();
    assert_eq!(pool.vdev_paths(), vec![a.join("vdev.img")]);
    assert!(
        report.damaged.iter().any(
            |line| line.contains(&b.join("vdev.img").display().to_string())
                && line.contains("older copy")
        ),
        "{:?}",
        report.damaged
    );
    let fs = pool.file_system().unwrap();
    assert!(fs.lookup(fs.root(), b"new").is_ok());
    drop(fs);
    assert_clean(&pool);
    pool.export().unwrap();
    assert!(
        digest(&b.join("vdev.img")) == stale,
        "the older copy was written"
    );
}
