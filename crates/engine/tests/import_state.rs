//! What an import would find, on real pools. The import listing once called
//! every exported pool "exported cleanly; imports as it is" whatever was missing, named only
//! the devices found, and told a wiped disk from a missing one in no way. Now
//! `FoundPool::import_state` gives every vdev of the config its state and why it is UNAVAIL,
//! a degraded mirror imports, and a pool without a top-level vdev is refused naming it.

use crate::common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use tarn::pool::{ImportOptions, Pool, PoolError, VdevProblem, VdevSpec};
use tarn::vdev::label::VDEV_LABEL_SIZE;
use tarn::vdev::VdevHealth;

use common::*;

/// Zero the four labels of the file at `path`: two at its start, two at its end.
fn wipe_labels(path: &std::path::Path) {
    let file = OpenOptions::new().write(true).open(path).unwrap();
    let size = file.metadata().unwrap().len() & !(VDEV_LABEL_SIZE - 1);
    let zeros = vec![0u8; 2 * VDEV_LABEL_SIZE as usize];
    file.write_all_at(&zeros, 0).unwrap();
    file.write_all_at(&zeros, size - 2 * VDEV_LABEL_SIZE)
        .unwrap();
}

fn labels_are_zero(path: &std::path::Path) -> bool {
    let file = std::fs::File::open(path).unwrap();
    let size = file.metadata().unwrap().len() & !(VDEV_LABEL_SIZE - 1);
    let mut bytes = vec![0u8; 2 * VDEV_LABEL_SIZE as usize];
    [0, size - 2 * VDEV_LABEL_SIZE].iter().all(|&offset| {
        file.read_exact_at(&mut bytes, offset).unwrap();
        bytes.iter().all(|&byte| byte == 0)
    })
}

fn found(dir: &std::path::Path, name: &str) -> tarn::pool::FoundPool {
    Pool::scan(&dirs(dir))
        .into_iter()
        .find(|pool| pool.name == name)
        .unwrap_or_else(|| panic!("pool {name} not found"))
}

#[test]
fn listing_states_follow_the_devices_and_import_follows_the_states() {
    let root = tempfile::tempdir().unwrap();
    let dir = &root.path().join("vdevs");
    std::fs::create_dir(dir).unwrap();
    let (a, b) = (dir.join("m-a.img"), dir.join("m-b.img"));
    let (c, d) = (dir.join("t-c.img"), dir.join("t-d.img"));
    create_pool(
        dir,
        "mir",
        vec![VdevSpec::Mirror(vec![a.clone(), b.clone()])],
        tiny(),
    )
    .export()
    .unwrap();
    create_pool(
        dir,
        "two",
        vec![VdevSpec::Leaf(c.clone()), VdevSpec::Leaf(d.clone())],
        tiny(),
    )
    .export()
    .unwrap();
    // Outside the searched directory: a device moved there would be found and used.
    let kept = root.path().join("m-b.kept");

    let state = found(dir, "mir").import_state();
    assert_eq!((state.health, state.problem), (VdevHealth::Online, None));
    assert!(state.leaves().all(|leaf| leaf.health == VdevHealth::Online));

    // A mirror side gone: DEGRADED, the side UNAVAIL "cannot open", named by its path.
    std::fs::rename(&b, &kept).unwrap();
    let state = found(dir, "mir").import_state();
    assert_eq!(state.health, VdevHealth::Degraded);
    assert_eq!(state.tops[0].health, VdevHealth::Degraded);
    let side = state.leaves().find(|leaf| leaf.path == b).unwrap();
    assert_eq!(
        (side.health, side.problem),
        (VdevHealth::Unavail, Some(VdevProblem::CannotOpen))
    );
    let pool = import(dir, "mir", tiny());
    assert_clean(&pool);
    pool.export().unwrap();

    // The side back with its labels wiped: "invalid label", and the import leaves it alone.
    std::fs::rename(&kept, &b).unwrap();
    wipe_labels(&b);
    let state = found(dir, "mir").import_state();
    assert_eq!(state.health, VdevHealth::Degraded);
    let side = state.leaves().find(|leaf| leaf.path == b).unwrap();
    assert_eq!(side.problem, Some(VdevProblem::InvalidLabel));
    let pool = import(dir, "mir", tiny());
    assert_clean(&pool);
    pool.export().unwrap();
    assert!(labels_are_zero(&b), "the import labelled the wiped side");

    // A top-level vdev gone: UNAVAIL, and the import is refused naming it and why.
    std::fs::remove_file(&d).unwrap();
    let state = found(dir, "two").import_state();
    assert_eq!(
        (state.health, state.problem),
        (VdevHealth::Unavail, Some(VdevProblem::InsufficientReplicas))
    );
    assert_eq!(
        (state.tops[1].health, state.tops[1].problem),
        (VdevHealth::Unavail, Some(VdevProblem::CannotOpen))
    );
    assert_eq!(state.tops[0].health, VdevHealth::Online);
    let error = Pool::import("two", ImportOptions::new(dirs(dir), tiny()))
        .err()
        .expect("a pool without a top-level vdev must not import");
    assert!(matches!(error, PoolError::MissingVdev { .. }), "{error}");
    let text = error.to_string();
    assert!(
        text.contains(&format!("{}: cannot open", d.display()))
            && text.contains("top-level vdev 1"),
        "{text}"
    );
}
