//! Destroy planning: `destroy -n -r -R` listed the hierarchy alone while the
//! real run also destroyed the clones of its snapshots, and `-R` without `-r` was refused. One
//! plan ([`Pool::destroy_plan`]) now drives both; these tests hold that the plan names every
//! file system and snapshot the destroy removes (clones outside the hierarchy, their
//! descendants and their own clones included), in an order that destroys each clone before the
//! snapshot it depends on, that `-R` implies `-r`, that an outside clone refuses a destroy
//! without `-R` and changes nothing, and that clones inside the hierarchy need no `-R`.

use crate::common;

use common::*;
use tarn::pool::Pool;

/// `tank/top` with children and snapshots, and clones of its snapshots outside it:
/// `tank/out/c1` (of `top@s`, with a child `kid`, both snapshotted at `t`), `tank/out/c3` (of
/// `c1/kid@t`) and `tank/out/c2` (of `top/a@s`).
fn build(pool: &Pool) {
    pool.create_dataset("tank/top/a/b", &[], true).unwrap();
    pool.create_dataset("tank/out", &[], false).unwrap();
    pool.create_snapshots(&["tank/top@s".into()], true).unwrap();
    pool.create_clone("tank/top@s", "tank/out/c1", &[]).unwrap();
    pool.create_dataset("tank/out/c1/kid", &[], false).unwrap();
    pool.create_snapshots(&["tank/out/c1@t".into()], true)
        .unwrap();
    pool.create_clone("tank/out/c1/kid@t", "tank/out/c3", &[])
        .unwrap();
    pool.create_clone("tank/top/a@s", "tank/out/c2", &[])
        .unwrap();
}

/// Every file system and snapshot name in the pool, sorted.
fn everything(pool: &Pool) -> Vec<String> {
    let mut names: Vec<String> = pool.datasets().into_iter().map(|info| info.name).collect();
    names.extend(pool.snapshots().into_iter().map(|info| info.name));
    names.sort();
    names
}

#[test]
fn the_plan_is_what_destroy_r_big_r_destroys_clones_included() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tiny());
    build(&pool);
    let before = everything(&pool);

    let plan = pool.destroy_plan("tank/top", true, true).unwrap();
    let mut planned = plan.clone();
    planned.sort();
    let expected: Vec<String> = before
        .iter()
        .filter(|name| {
            name.starts_with("tank/top") || name.starts_with("tank/out/") && *name != "tank/out"
        })
        .cloned()
        .collect();
    assert_eq!(
        planned, expected,
        "the plan names everything the destroy removes"
    );
    // Each clone goes before the snapshot it was cloned from, each child before its parent.
    let at = |name: &str| plan.iter().position(|item| item == name).unwrap();
    for (clone, origin) in [
        ("tank/out/c1", "tank/top@s"),
        ("tank/out/c2", "tank/top/a@s"),
        ("tank/out/c3", "tank/out/c1/kid@t"),
        ("tank/out/c1/kid", "tank/out/c1"),
        ("tank/top/a/b", "tank/top/a"),
    ] {
        assert!(
            at(clone) < at(origin),
            "{clone} is planned before {origin}: {plan:?}"
        );
    }
    // -R implies -r.
    assert_eq!(pool.destroy_plan("tank/top", false, true).unwrap(), plan);
    assert_eq!(everything(&pool), before, "planning changes nothing");

    let destroyed = pool.destroy_datasets("tank/top", false, true).unwrap();
    let file_systems: Vec<String> = plan
        .iter()
        .filter(|name| !name.contains('@'))
        .cloned()
        .collect();
    assert_eq!(destroyed, file_systems, "destroyed in the plan's order");
    assert_eq!(
        everything(&pool),
        vec!["tank".to_string(), "tank/out".to_string()]
    );
    assert_clean(&pool);
}

#[test]
fn an_outside_clone_refuses_destroy_r_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tiny());
    build(&pool);
    let before = everything(&pool);
    for error in [
        pool.destroy_plan("tank/top", true, false).unwrap_err(),
        pool.destroy_datasets("tank/top", true, false).unwrap_err(),
    ] {
        let message = error.to_string();
        assert!(
            message.contains(
                "filesystem has dependent clones; use -R to destroy the following datasets:"
            ),
            "{message}"
        );
        for clone in [
            "tank/out/c1",
            "tank/out/c1/kid",
            "tank/out/c2",
            "tank/out/c3",
        ] {
            assert!(message.contains(clone), "{message} names {clone}");
        }
    }
    assert_eq!(
        everything(&pool),
        before,
        "a refused destroy changes nothing"
    );
    assert_clean(&pool);
}

#[test]
fn clones_inside_the_hierarchy_need_no_big_r() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tiny());
    pool.create_dataset("tank/in/aa", &[], true).unwrap();
    pool.create_snapshots(&["tank/in/aa@s".into()], false)
        .unwrap();
    // A sibling clone sorts after its origin: the plan still destroys it first.
    pool.create_clone("tank/in/aa@s", "tank/in/zz", &[])
        .unwrap();
    let plan = pool.destroy_plan("tank/in", true, false).unwrap();
    assert_eq!(
        plan,
        ["tank/in/zz", "tank/in/aa@s", "tank/in/aa", "tank/in"]
    );
    pool.destroy_datasets("tank/in", true, false).unwrap();
    assert_eq!(everything(&pool), vec!["tank".to_string()]);
    assert_clean(&pool);
}
