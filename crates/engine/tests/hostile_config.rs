//! A label whose config asks for absurd metaslab geometry. Import trusted a
//! top-level vdev's `ms_shift` down to the sector shift and up to 2^24 metaslabs: a crafted
//! label on an 8 GiB sparse file (`ms_shift` 10) made import allocate 2^23 metaslabs of
//! kilobytes each, tens of gigabytes, before reading anything that could refute it. Now the config's geometry is checked when the top-level vdev is built from it
//! (`space::check_metaslab_geometry`: a shift of at least `METASLAB_SHIFT_MIN`, at most
//! `METASLAB_COUNT_MAX` metaslabs, and all of them on the devices), and import refuses at once
//! naming the vdev and the field.

use crate::common;

use std::time::{Duration, Instant};

use tarn::pool::{CreateOptions, ImportOptions, Pool, PoolError, VdevSpec};
use tarn::vdev::label::{
    self, LabelConfig, LabelSet, TopVdevKind, VDEV_LABEL_END_SIZE, VDEV_LABEL_START_SIZE,
};
use tarn::vdev::{BlockDevice, FileDevice, VdevError};

use common::*;

/// Bytes of the crafted vdev's data area: just over 2^23 metaslabs of 1 KiB (under the old
/// limit of 2^24), and one more 64 KiB metaslab than `METASLAB_COUNT_MAX`.
const ASIZE: u64 = (1 << 33) + (1 << 16);

/// Rewrite every label of the device at `path` with `config`.
fn rewrite_labels(path: &std::path::Path, config: &LabelConfig) {
    let device = FileDevice::open(path).unwrap();
    label::write_labels(&device, config, LabelSet::Even).unwrap();
    label::write_labels(&device, config, LabelSet::Odd).unwrap();
    device.flush().unwrap();
    device.release();
}

/// Import, which must refuse quickly (not after allocating for every metaslab asked for).
fn import_refused(dir: &std::path::Path) -> PoolError {
    let started = Instant::now();
    let result = Pool::import("crafted", ImportOptions::new(dirs(dir), tiny()));
    let elapsed = started.elapsed();
    let error = match result {
        Ok(_) => panic!("a pool with a crafted metaslab geometry was imported"),
        Err(error) => error,
    };
    assert!(
        elapsed < Duration::from_secs(20),
        "import took {elapsed:?} to refuse"
    );
    error
}

#[test]
fn a_label_asking_for_millions_of_metaslabs_is_refused_at_import() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.img");
    let pool = Pool::create(CreateOptions {
        name: "crafted".into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Leaf(path.clone())],
        // The slack covers the label alignment of the end labels.
        create_size: Some(ASIZE + VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE + (1 << 20)),
        force: false,
        tunables: tiny(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })
    .expect("create pool");
    pool.export().unwrap();

    let device = FileDevice::open(&path).unwrap();
    let (_, original) = label::read_newest_label(&device).unwrap().unwrap();
    device.release();
    drop(device);
    assert!(original.vdev_tree[0].asize <= ASIZE);

    // 2^23 metaslabs of 1 KiB, all on the device.
    let mut crafted = original.clone();
    crafted.vdev_tree[0].asize = ASIZE;
    crafted.vdev_tree[0].ms_shift = 10;
    rewrite_labels(&path, &crafted);
    let error = import_refused(dir.path());
    let message = error.to_string();
    assert!(
        matches!(
            &error,
            PoolError::Vdev(VdevError::InvalidConfig { what, .. }) if what.contains("metaslab shift 10")
        ),
        "{error:?}"
    );
    assert!(message.contains("top-level vdev 0"), "{message}");

    // Metaslabs of a legal size, but more of them than any pool may have.
    crafted.vdev_tree[0].ms_shift = 16;
    rewrite_labels(&path, &crafted);
    let error = import_refused(dir.path());
    let message = error.to_string();
    assert!(
        message.contains(&format!("{} metaslabs", ASIZE >> 16)) && message.contains("131072"), // METASLAB_COUNT_MAX
        "{message}"
    );

    // Metaslabs past the end of the device.
    crafted.vdev_tree[0].asize = 1 << 50;
    crafted.vdev_tree[0].ms_shift = 34;
    rewrite_labels(&path, &crafted);
    let error = import_refused(dir.path());
    assert!(
        matches!(error, PoolError::Vdev(VdevError::DeviceTooSmall { .. })),
        "{error:?}"
    );

    // The original config imports: the refusals were the geometry alone.
    rewrite_labels(&path, &original);
    let pool = import(dir.path(), "crafted", tiny());
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A config naming a mirror child that is not found, with a data area near 2^64 bytes.
/// Import built the missing child's stand-in device from the config's `asize`
/// before checking it, and rounding that size up to whole labels overflowed: a panic (in a
/// build with overflow checks) or a wrapped device size. Now the geometry check, which bounds
/// `asize` by `space::ASIZE_MAX`, runs on each top-level vdev of the config before any of its
/// leaves is opened or stood in for.
#[test]
fn a_missing_leaf_of_an_absurd_size_is_refused_at_import() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "crafted", single(dir.path(), "a.img"), tiny());
    let path = pool.vdev_paths()[0].clone();
    pool.export().unwrap();

    let device = FileDevice::open(&path).unwrap();
    let (_, mut config) = label::read_newest_label(&device).unwrap().unwrap();
    device.release();
    drop(device);
    let top = &mut config.vdev_tree[0];
    top.kind = TopVdevKind::Mirror;
    top.asize = !0xffff;
    top.ms_shift = 62;
    let mut absent = top.children[0].clone();
    absent.guid ^= 0x5555;
    absent.path = dir.path().join("absent.img").display().to_string();
    top.children.push(absent);
    rewrite_labels(&path, &config);

    let error = import_refused(dir.path());
    let message = error.to_string();
    assert!(
        matches!(&error, PoolError::Vdev(VdevError::InvalidConfig { what, .. }) if what.contains("asize")),
        "{error:?}"
    );
    assert!(message.contains("top-level vdev 0"), "{message}");
}

/// A config naming two top-level vdevs by the same id. Import opened both
/// and handed them to `VdevTree::new`, whose assertion of unique ids panicked. Now import
/// refuses such a config with an error naming the id before it builds the vdev tree.
#[test]
fn top_level_vdevs_sharing_an_id_are_refused_at_import() {
    let dir = tempfile::tempdir().unwrap();
    let vdevs = vec![
        VdevSpec::Leaf(dir.path().join("a.img")),
        VdevSpec::Leaf(dir.path().join("b.img")),
    ];
    let pool = create_pool(dir.path(), "crafted", vdevs, tiny());
    let paths = pool.vdev_paths();
    pool.export().unwrap();

    // Each device's label names the device itself: rewrite each from its own.
    for path in &paths {
        let device = FileDevice::open(path).unwrap();
        let (_, mut config) = label::read_newest_label(&device).unwrap().unwrap();
        device.release();
        drop(device);
        assert_eq!(config.vdev_tree.len(), 2);
        config.vdev_tree[1].id = config.vdev_tree[0].id;
        rewrite_labels(path, &config);
    }

    let error = import_refused(dir.path());
    let message = error.to_string();
    assert!(
        message.contains("top-level vdev 0") && message.contains("twice"),
        "{error:?}"
    );
}
