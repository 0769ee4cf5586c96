//! Hostile dataset hierarchy in the MOS. Import loads the hierarchy by
//! following each directory's children map, recursively, and trusted that it was a tree: a
//! child entry naming its own parent's directory made `load_children` recurse until the
//! stack overflowed, killing the process. Now each directory is loaded at most once, and an
//! entry naming one already loaded is reported as damage while the rest of the pool imports.

use crate::common;

use tarn::object::adapters::KvObject;
use tarn::object::kv;

use common::*;

#[test]
fn a_dataset_named_as_its_own_child_is_damage_not_endless_recursion() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "cyclic", single(dir.path(), "a.img"), tiny());
    pool.create_dataset("cyclic/a", &[], false).unwrap();
    let a = pool
        .core
        .dataset_list()
        .into_iter()
        .map(|(_, dataset)| dataset)
        .find(|dataset| dataset.name() == "cyclic/a")
        .unwrap();
    {
        // "cyclic/a/loop" is "cyclic/a" again.
        let hold = pool.core.txgs.assign().unwrap();
        let object = a.dir().children_object;
        let mut handle = KvObject::new(&pool.core.mos, object, Some(hold.tx())).unwrap();
        kv::insert(&mut handle, b"loop", &a.dir_object.0.to_le_bytes()).unwrap();
    }
    pool.sync().unwrap();
    pool.export().unwrap();

    let (pool, report) = tarn::pool::Pool::import(
        "cyclic",
        tarn::pool::ImportOptions::new(dirs(dir.path()), tiny()),
    )
    .expect("the pool imports; the cycle is reported");
    let damaged = format!("{report:?}");
    assert!(damaged.contains("cyclic/a/loop"), "{damaged}");
    let names: Vec<String> = pool
        .core
        .dataset_list()
        .into_iter()
        .map(|(_, dataset)| dataset.name())
        .collect();
    assert!(names.contains(&"cyclic/a".to_string()), "{names:?}");
    assert!(!names.iter().any(|name| name.contains("loop")), "{names:?}");
    pool.export().unwrap();
}
