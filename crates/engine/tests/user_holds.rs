//! User holds and deferred destroy (`pool/user_holds.rs`): a held snapshot survives every
//! destroy that would free it, and across export and import; `destroy -d` marks a held or
//! cloned snapshot, which goes with its last hold or clone; feature `user_holds` counts the
//! records that need it, and `check` agrees. Every test ends with `check` clean.

use crate::common;

use tarn::pool::features::FeatureState;
use tarn::pool::{Pool, PoolError};

use common::*;

fn names(pool: &Pool, file_system: &str) -> Vec<String> {
    pool.core
        .snapshots_of(file_system)
        .unwrap()
        .into_iter()
        .map(|info| info.name)
        .collect()
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

fn tags(pool: &Pool, snapshot: &str) -> Vec<String> {
    pool.holds(&strings(&[snapshot]), false)
        .unwrap()
        .into_iter()
        .map(|hold| hold.tag)
        .collect()
}

/// `result` is a refusal because `snapshot` is held.
fn assert_held<T: std::fmt::Debug>(result: Result<T, PoolError>, snapshot: &str) {
    match result {
        Err(PoolError::DatasetBusy(_, why)) => assert!(
            why.starts_with(&format!("snapshot {snapshot} is held")),
            "the refusal names the held snapshot: {why}"
        ),
        other => panic!("expected DatasetBusy for held {snapshot}, got {other:?}"),
    }
}

fn user_holds_state(pool: &Pool) -> FeatureState {
    pool.feature_state("user_holds").unwrap()
}

/// A recursive hold puts the tag on the snapshot of that name in every descendant; every
/// destroy that would free one is refused (the snapshot, a range of them, the file system with
/// `-r`, a rollback past it) with nothing destroyed; the holds survive export and import; a
/// tag put twice is refused for the whole request; and once released, the destroys go
/// through and the feature is back to enabled.
#[test]
fn held_snapshots_refuse_every_destroy_and_outlive_import() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "uh", single(dir.path(), "uh0"), tiny());
    pool.create_dataset("uh/a", &[], false).unwrap();
    pool.create_dataset("uh/a/b", &[], false).unwrap();
    pool.create_dataset("uh/c", &[], false).unwrap();
    for snapshot in ["s1", "s2"] {
        pool.create_snapshots(&[format!("uh/a@{snapshot}")], true)
            .unwrap();
    }
    assert_eq!(user_holds_state(&pool), FeatureState::Enabled);
    let held = pool.hold("keep", &strings(&["uh/a@s1"]), true).unwrap();
    assert_eq!(held, ["uh/a@s1", "uh/a/b@s1"]);
    assert_eq!(user_holds_state(&pool), FeatureState::Active);
    assert_eq!(tags(&pool, "uh/a/b@s1"), ["keep"]);
    assert!(tags(&pool, "uh/a@s2").is_empty());

    assert_held(pool.destroy_snapshots("uh/a@s1", false), "uh/a@s1");
    assert_held(pool.destroy_snapshots("uh/a@s1%s2", true), "uh/a@s1");
    assert_held(pool.destroy_snapshots("uh/a/b@s1,s2", false), "uh/a/b@s1");
    assert_held(pool.destroy_dataset("uh/a", true), "uh/a/b@s1");
    // A rollback past a held snapshot (it would destroy it).
    pool.hold("later", &strings(&["uh/a/b@s2"]), false).unwrap();
    assert_held(pool.rollback("uh/a/b@s1", true).map(drop), "uh/a/b@s2");
    pool.release("later", &strings(&["uh/a/b@s2"]), false)
        .unwrap();
    // The refusals destroyed nothing, not even the unheld snapshots named beside the held.
    assert_eq!(names(&pool, "uh/a"), ["uh/a@s1", "uh/a@s2"]);
    assert_eq!(names(&pool, "uh/a/b"), ["uh/a/b@s1", "uh/a/b@s2"]);

    // All or nothing: uh/a@s2 does not get the tag uh/a/b@s1 already has.
    let twice = pool.hold("keep", &strings(&["uh/a@s2", "uh/a/b@s1"]), false);
    assert!(
        matches!(&twice, Err(PoolError::Refused(why)) if why.contains("already exists")),
        "{twice:?}"
    );
    assert!(tags(&pool, "uh/a@s2").is_empty());
    // A second tag on the same snapshot, and bad tags.
    pool.hold("replica", &strings(&["uh/a@s1"]), false).unwrap();
    for bad in ["", "a\nb", &"x".repeat(256)] {
        assert!(pool.hold(bad, &strings(&["uh/a@s2"]), false).is_err());
    }
    assert!(pool.hold("keep", &strings(&["uh/a@nope"]), false).is_err());
    assert_clean(&pool);

    pool.export().unwrap();
    let pool = import(dir.path(), "uh", tiny());
    assert_eq!(tags(&pool, "uh/a@s1"), ["keep", "replica"]);
    assert_eq!(tags(&pool, "uh/a/b@s1"), ["keep"]);
    assert_eq!(user_holds_state(&pool), FeatureState::Active);
    assert_held(pool.destroy_snapshots("uh/a@s1", false), "uh/a@s1");

    // A release of a tag not there is refused whole; then each tag goes.
    assert!(pool
        .release("replica", &strings(&["uh/a@s1"]), true)
        .is_err());
    assert_eq!(tags(&pool, "uh/a@s1"), ["keep", "replica"]);
    let released = pool.release("keep", &strings(&["uh/a@s1"]), true).unwrap();
    assert_eq!(released.released, ["uh/a@s1", "uh/a/b@s1"]);
    assert!(released.destroyed.is_empty());
    assert_held(pool.destroy_snapshots("uh/a@s1", false), "uh/a@s1");
    pool.release("replica", &strings(&["uh/a@s1"]), false)
        .unwrap();
    assert_eq!(user_holds_state(&pool), FeatureState::Enabled);
    pool.destroy_dataset("uh/a", true).unwrap();
    assert_clean(&pool);
    pool.export().unwrap();
}

/// `destroy -d`: a snapshot with neither holds nor clones goes at once; a held one, and a
/// cloned one, are marked, survive import marked, and go in the txg that releases the last
/// hold or destroys the last clone, whichever comes last.
#[test]
fn deferred_destroy_goes_with_the_last_hold_and_clone() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "dd", single(dir.path(), "dd0"), tiny());
    pool.create_dataset("dd/fs", &[], false).unwrap();
    let fs = pool.open_file_system("dd/fs").unwrap();
    let ino = root_file(&fs, "f");
    fs.write(ino, 0, &pattern(1, 256 << 10)).unwrap();
    drop(fs);
    for snapshot in ["free", "held", "cloned", "both"] {
        pool.create_snapshots(&[format!("dd/fs@{snapshot}")], false)
            .unwrap();
    }
    pool.hold("keep", &strings(&["dd/fs@held", "dd/fs@both"]), false)
        .unwrap();
    pool.create_clone("dd/fs@cloned", "dd/c1", &[]).unwrap();
    pool.create_clone("dd/fs@both", "dd/c2", &[]).unwrap();

    let dry = pool
        .destroy_snapshots_deferred("dd/fs@free%both", false, true)
        .unwrap();
    assert_eq!(dry.destroyed, ["dd/fs@free"]);
    assert_eq!(names(&pool, "dd/fs").len(), 4, "a dry run changes nothing");
    let outcome = pool
        .destroy_snapshots_deferred("dd/fs@free%both", false, false)
        .unwrap();
    assert_eq!(outcome.destroyed, ["dd/fs@free"]);
    assert_eq!(
        outcome.deferred,
        ["dd/fs@held", "dd/fs@cloned", "dd/fs@both"]
    );
    let info = pool.snapshot_info("dd/fs@both").unwrap();
    assert!(info.defer_destroy);
    assert_eq!(info.user_refs, 1);
    assert_clean(&pool);

    pool.export().unwrap();
    let pool = import(dir.path(), "dd", tiny());
    assert!(pool.snapshot_info("dd/fs@cloned").unwrap().defer_destroy);
    // The last hold of a snapshot without clones: it goes in the release's txg.
    let released = pool
        .release("keep", &strings(&["dd/fs@held"]), false)
        .unwrap();
    assert_eq!(released.destroyed, ["dd/fs@held"]);
    // The last clone of a snapshot without holds: it goes with the clone.
    let destroyed = pool.destroy_dataset("dd/c1", false).unwrap();
    assert_eq!(destroyed, ["dd/c1", "dd/fs@cloned"]);
    // Held and cloned: the clone goes first and the snapshot stays for its hold, then the
    // release takes it.
    assert_eq!(pool.destroy_dataset("dd/c2", false).unwrap(), ["dd/c2"]);
    assert_eq!(names(&pool, "dd/fs"), ["dd/fs@both"]);
    let released = pool
        .release("keep", &strings(&["dd/fs@both"]), false)
        .unwrap();
    assert_eq!(released.destroyed, ["dd/fs@both"]);
    assert!(names(&pool, "dd/fs").is_empty());
    assert_eq!(user_holds_state(&pool), FeatureState::Enabled);
    wait_freed(&pool);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A pool created without the feature refuses holds and a destroy that would have to wait,
/// and changes nothing; `destroy -d` of a snapshot free to go still destroys it; and once the
/// feature is enabled, holds work.
#[test]
fn without_the_feature_holds_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool_without(
        dir.path(),
        "nf",
        single(dir.path(), "nf0"),
        tiny(),
        &["user_holds"],
    );
    pool.create_dataset("nf/fs", &[], false).unwrap();
    for snapshot in ["a", "b"] {
        pool.create_snapshots(&[format!("nf/fs@{snapshot}")], false)
            .unwrap();
    }
    pool.create_clone("nf/fs@a", "nf/c", &[]).unwrap();
    let refused = pool.hold("keep", &strings(&["nf/fs@a"]), false);
    assert!(
        matches!(&refused, Err(PoolError::Refused(why)) if why.contains("feature@user_holds")),
        "{refused:?}"
    );
    let refused = pool.destroy_snapshots_deferred("nf/fs@a", false, false);
    assert!(
        matches!(&refused, Err(PoolError::Refused(why)) if why.contains("feature@user_holds")),
        "{refused:?}"
    );
    assert!(!pool.snapshot_info("nf/fs@a").unwrap().defer_destroy);
    let outcome = pool
        .destroy_snapshots_deferred("nf/fs@b", false, false)
        .unwrap();
    assert_eq!(outcome.destroyed, ["nf/fs@b"]);
    assert_eq!(user_holds_state(&pool), FeatureState::Disabled);
    pool.enable_feature("user_holds").unwrap();
    pool.hold("keep", &strings(&["nf/fs@a"]), false).unwrap();
    assert_eq!(user_holds_state(&pool), FeatureState::Active);
    assert_clean(&pool);
    pool.export().unwrap();
}
