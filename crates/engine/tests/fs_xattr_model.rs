//! Model-based test of extended attributes: random sets (with and without XATTR_CREATE and
//! XATTR_REPLACE, values from empty to 64 KiB, so that they land in the SA region, inline in
//! the xattr directory or in value objects, and move between them), removes, gets, layout
//! switches (`xattr=sa` / `dir`), files replaced by rename and recreated, against an
//! in-memory map that predicts every outcome; compared in full every few steps and after
//! every export and import. At the end every file is removed and the object set must hold
//! exactly the objects it held before the test (no xattr object leaked), with `check` clean.

use crate::common;

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tarn::fs::{FileSystem, FsError, XattrLayout, XATTR_CREATE, XATTR_REPLACE};
use tarn::pool::Pool;

use common::*;

const FILES: usize = 4;
const NAMES: usize = 12;

type Xattrs = BTreeMap<Vec<u8>, Vec<u8>>;

fn outcome<T>(result: Result<T, FsError>) -> Result<(), &'static str> {
    match result {
        Ok(_) => Ok(()),
        Err(FsError::Exists) => Err("Exists"),
        Err(FsError::NoData) => Err("NoData"),
        Err(error) => panic!("unexpected error {error:?}"),
    }
}

fn name(index: usize) -> Vec<u8> {
    let namespace = ["user.", "trusted.", "security."][index % 3];
    format!("{namespace}n{index}").into_bytes()
}

fn value(rng: &mut StdRng) -> Vec<u8> {
    let length = match rng.gen_range(0..10) {
        0..=4 => rng.gen_range(0..60),
        5..=6 => rng.gen_range(60..1023),
        7..=8 => rng.gen_range(1024..20_000),
        _ => rng.gen_range(20_000..=65_536),
    };
    pattern(rng.gen(), length)
}

fn file_name(index: usize) -> Vec<u8> {
    format!("file{index}").into_bytes()
}

fn compare(fs: &FileSystem, model: &[Xattrs], step: usize) {
    for (index, expected) in model.iter().enumerate() {
        let ino = fs.lookup(fs.root(), &file_name(index)).unwrap().ino;
        let mut names = fs.listxattr(ino).unwrap();
        names.sort();
        let expected_names: Vec<Vec<u8>> = expected.keys().cloned().collect();
        assert_eq!(names, expected_names, "step {step}: names of file {index}");
        for (name, value) in expected {
            assert_eq!(
                &fs.getxattr(ino, name).unwrap(),
                value,
                "step {step}: file {index} {}",
                String::from_utf8_lossy(name)
            );
        }
    }
}

fn reopen(pool: &Pool) -> FileSystem {
    FileSystem::open(pool.root_objset(), pool.core.txgs.clone()).unwrap()
}

fn run(seed: u64, steps: usize) {
    let dir = tempfile::tempdir().unwrap();
    let pool_name = format!("xm{seed}");
    let mut pool = create_pool(dir.path(), &pool_name, single(dir.path(), "d0"), tiny());
    let mut fs = pool.file_system().unwrap();
    pool.sync().unwrap();
    let objects_before = pool.root_objset().synced_objects().unwrap().len();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model: Vec<Xattrs> = vec![Xattrs::new(); FILES];
    for index in 0..FILES {
        fs.create(fs.root(), &file_name(index), 0o644, 0, 0)
            .unwrap();
    }
    let ino_of =
        |fs: &FileSystem, index: usize| fs.lookup(fs.root(), &file_name(index)).unwrap().ino;
    for step in 0..steps {
        let file = rng.gen_range(0..FILES);
        let key = name(rng.gen_range(0..NAMES));
        match rng.gen_range(0..100) {
            0..=49 => {
                let flags = [0, 0, XATTR_CREATE, XATTR_REPLACE][rng.gen_range(0..4)];
                let new = value(&mut rng);
                let exists = model[file].contains_key(&key);
                let expected = match flags {
                    XATTR_CREATE if exists => Err("Exists"),
                    XATTR_REPLACE if !exists => Err("NoData"),
                    _ => Ok(()),
                };
                let got = outcome(fs.setxattr(ino_of(&fs, file), &key, &new, flags));
                assert_eq!(got, expected, "step {step}: set flags {flags}");
                if got.is_ok() {
                    model[file].insert(key, new);
                }
            }
            50..=69 => {
                let expected = if model[file].remove(&key).is_some() {
                    Ok(())
                } else {
                    Err("NoData")
                };
                let got = outcome(fs.removexattr(ino_of(&fs, file), &key));
                assert_eq!(got, expected, "step {step}: remove");
            }
            70..=79 => {
                let got = fs.getxattr(ino_of(&fs, file), &key);
                match model[file].get(&key) {
                    Some(value) => assert_eq!(&got.unwrap(), value, "step {step}: get"),
                    None => assert!(matches!(got, Err(FsError::NoData)), "step {step}"),
                }
            }
            80..=84 => {
                let mut config = fs.config();
                config.xattr = if rng.gen() {
                    XattrLayout::Sa
                } else {
                    XattrLayout::Dir
                };
                fs.set_config(config);
            }
            85..=89 => {
                // Replace the file by a fresh one with a copy of some of its xattrs.
                let fresh = fs.create(fs.root(), b"fresh", 0o644, 0, 0).unwrap().ino;
                let kept: Xattrs = model[file]
                    .iter()
                    .filter(|_| rng.gen())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                for (k, v) in &kept {
                    fs.setxattr(fresh, k, v, XATTR_CREATE).unwrap();
                }
                fs.rename(fs.root(), b"fresh", fs.root(), &file_name(file), 0)
                    .unwrap();
                model[file] = kept;
            }
            90..=94 => {
                pool.sync().unwrap();
            }
            _ => {
                compare(&fs, &model, step);
                let layout = fs.config().xattr;
                drop(fs);
                pool.export().unwrap();
                pool = import(dir.path(), &pool_name, tiny());
                fs = reopen(&pool);
                let mut config = fs.config();
                config.xattr = layout;
                fs.set_config(config);
            }
        }
        if step % 25 == 0 {
            compare(&fs, &model, step);
        }
    }
    compare(&fs, &model, steps);
    for index in 0..FILES {
        fs.unlink(fs.root(), &file_name(index)).unwrap();
    }
    pool.sync().unwrap();
    assert_eq!(
        pool.root_objset().synced_objects().unwrap().len(),
        objects_before,
        "every file and xattr object removed"
    );
    assert_clean(&pool);
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn xattr_model_seed_1() {
    run(1, 1500);
}

#[test]
fn xattr_model_seed_2() {
    run(2, 1500);
}

#[test]
fn xattr_model_seed_3() {
    run(3, 1500);
}
