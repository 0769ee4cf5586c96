//! Pool features as zpool-features(7) has them, on real pools: the states (disabled, enabled,
//! active) and the refcount of a counted feature (livelist) following its use up and back down,
//! across export and import; `pool upgrade`; imports of pools whose config carries features
//! this build does not know (refused naming them, or read-only for a read-only compatible one);
//! and configs written before refcounts and the `features_for_write` list existed.

use crate::common;

use std::path::Path;

use common::*;
use tarn::pool::{CreateOptions, FeatureState, ImportOptions, Pool, PoolError};
use tarn::vdev::label::{self, LabelConfig, LabelSet};
use tarn::vdev::{BlockDevice, FileDevice};

const UNKNOWN_READ: &str = "org.example:future_read";
const UNKNOWN_WRITE: &str = "org.example:future_write";

fn pool_without(dir: &Path, disabled: &[&str]) -> Pool {
    Pool::create(CreateOptions {
        name: "tank".into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: single(dir, "v0"),
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: tiny(),
        wrap_device: None,
        disabled_features: disabled.iter().map(|name| name.to_string()).collect(),
    })
    .unwrap()
}

fn state(pool: &Pool, short_name: &str) -> FeatureState {
    pool.feature_state(short_name).unwrap()
}

/// The value `pool get` shows for `property`.
fn shown(pool: &Pool, property: &str) -> String {
    match &pool.pool_properties_named(&[property.to_string()]).unwrap()[0].value {
        tarn::pool::props::PoolValue::Text(text) => text.clone(),
        other => panic!("{property} is {other:?}"),
    }
}

/// A file system with a file, its snapshot, and `clones` clones of it.
fn origin_with_clones(pool: &Pool, clones: &[&str]) {
    pool.create_dataset("tank/fs", &[], false).unwrap();
    {
        let fs = pool.open_file_system("tank/fs").unwrap();
        let attr = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap();
        fs.write(attr.ino, 0, &pattern(1, 64 << 10)).unwrap();
    }
    pool.create_snapshots(&["tank/fs@origin".to_string()], false)
        .unwrap();
    for clone in clones {
        pool.create_clone("tank/fs@origin", clone, &[]).unwrap();
    }
}

fn read_config(path: &Path) -> LabelConfig {
    let device = FileDevice::open(path).unwrap();
    let (_, config) = label::read_newest_label(&device).unwrap().unwrap();
    device.release();
    config
}

fn rewrite_labels(path: &Path, config: &LabelConfig) {
    let device = FileDevice::open(path).unwrap();
    label::write_labels(&device, config, LabelSet::Even).unwrap();
    label::write_labels(&device, config, LabelSet::Odd).unwrap();
    device.flush().unwrap();
    device.release();
}

fn import_with(dir: &Path, readonly: bool) -> Result<Pool, PoolError> {
    let mut options = ImportOptions::new(dirs(dir), tiny());
    options.readonly = readonly;
    Pool::import("tank", options).map(|(pool, _)| pool)
}

/// livelist is counted: enabled with no clone, active while any clone has a livelist or a
/// destroyed clone's livelist is still being freed, enabled again after the last one is gone;
/// a promote drops the livelists it involves; the count survives export and import.
#[test]
fn livelist_is_active_while_a_livelist_exists() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_without(dir.path(), &[]);
    assert_eq!(state(&pool, "livelist"), FeatureState::Enabled);
    assert_eq!(shown(&pool, "feature@livelist"), "enabled");
    origin_with_clones(&pool, &["tank/a", "tank/b"]);
    assert_eq!(state(&pool, "livelist"), FeatureState::Active);
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tiny());
    assert_eq!(shown(&pool, "feature@livelist"), "active");

    pool.destroy_dataset("tank/a", false).unwrap();
    wait_freed(&pool);
    assert_eq!(
        state(&pool, "livelist"),
        FeatureState::Active,
        "tank/b remains"
    );
    // Promoting the last clone drops its livelist (promote.rs): the count reaches zero.
    pool.promote("tank/b").unwrap();
    assert_eq!(state(&pool, "livelist"), FeatureState::Enabled);
    assert_clean(&pool);
    pool.export().unwrap();
    assert_eq!(
        read_config(&dir.path().join("v0")).features["com.tarn:livelist"],
        0
    );
    let pool = import(dir.path(), "tank", tiny());
    assert_eq!(state(&pool, "livelist"), FeatureState::Enabled);

    // A clone made now, destroyed: active until its livelist is freed in the background.
    pool.create_snapshots(&["tank/b@again".to_string()], false)
        .unwrap();
    pool.create_clone("tank/b@again", "tank/c", &[]).unwrap();
    assert_eq!(state(&pool, "livelist"), FeatureState::Active);
    pool.destroy_dataset("tank/c", false).unwrap();
    wait_freed(&pool);
    assert_eq!(state(&pool, "livelist"), FeatureState::Enabled);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// Features active once enabled (embedded_data, log_spacemap, replay_sequence) are active at
/// create; those active from their first use (stalled_frees, scan_catch_up) start enabled;
/// `pool get all` lists every known feature after the other properties.
#[test]
fn new_pools_start_each_feature_by_its_rule() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_without(dir.path(), &[]);
    for (short_name, expected) in [
        ("embedded_data", "active"),
        ("livelist", "enabled"),
        ("log_spacemap", "active"),
        ("stalled_frees", "enabled"),
        ("scan_catch_up", "enabled"),
        ("replay_sequence", "active"),
        ("deadlist_totals", "active"),
        ("space_limits", "enabled"),
    ] {
        assert_eq!(shown(&pool, &format!("feature@{short_name}")), expected);
    }
    let all = pool.pool_properties().unwrap();
    let features: Vec<&str> = all
        .iter()
        .map(|property| property.name.as_str())
        .skip_while(|name| !name.starts_with("feature@"))
        .collect();
    assert_eq!(features.len(), tarn::pool::FEATURES_KNOWN.len());
    pool.export().unwrap();
    let config = read_config(&dir.path().join("v0"));
    assert_eq!(
        config.features_for_write,
        Some(vec![
            "com.tarn:livelist".to_string(),
            "com.tarn:log_spacemap".to_string(),
            "com.tarn:deadlist_totals".to_string(),
            "com.tarn:space_limits".to_string()
        ])
    );
}

/// `pool upgrade` enables every known feature not enabled, except log_spacemap (create only),
/// which it reports; a second upgrade has nothing to do; the result survives import.
#[test]
fn upgrade_enables_every_feature_but_the_create_only_ones() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_without(
        dir.path(),
        &["embedded_data", "livelist", "log_spacemap", "stalled_frees"],
    );
    assert_eq!(
        pool.features_to_upgrade(),
        ["embedded_data", "livelist", "stalled_frees"]
    );
    let report = pool.upgrade().unwrap();
    assert_eq!(
        report.enabled,
        ["embedded_data", "livelist", "stalled_frees"]
    );
    assert_eq!(report.create_only, ["log_spacemap"]);
    assert_eq!(state(&pool, "embedded_data"), FeatureState::Active);
    assert_eq!(state(&pool, "livelist"), FeatureState::Enabled);
    assert_eq!(state(&pool, "stalled_frees"), FeatureState::Enabled);
    assert_eq!(state(&pool, "log_spacemap"), FeatureState::Disabled);
    assert!(pool.features_to_upgrade().is_empty());
    let again = pool.upgrade().unwrap();
    assert!(again.enabled.is_empty());
    assert_eq!(again.create_only, ["log_spacemap"]);
    // The newly enabled livelist is used by the next clone.
    origin_with_clones(&pool, &["tank/clone"]);
    assert_eq!(state(&pool, "livelist"), FeatureState::Active);
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tiny());
    assert_eq!(state(&pool, "embedded_data"), FeatureState::Active);
    assert_eq!(state(&pool, "livelist"), FeatureState::Active);
    assert_eq!(state(&pool, "log_spacemap"), FeatureState::Disabled);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// Bad input to `pool set feature@...`: an unknown name, a state other than enabled, and the
/// create-only log_spacemap; each refused with a message saying why.
#[test]
fn setting_a_feature_refuses_what_cannot_be_set() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_without(dir.path(), &["log_spacemap", "livelist"]);
    for (name, value, expect) in [
        (
            "feature@nonsense",
            "enabled",
            "unknown feature \"nonsense\"",
        ),
        ("feature@livelist", "active", "can only be set to 'enabled'"),
        (
            "feature@livelist",
            "disabled",
            "can only be set to 'enabled'",
        ),
        (
            "feature@log_spacemap",
            "enabled",
            "can only be chosen when the pool is created",
        ),
    ] {
        match pool.set_pool_property(name, value) {
            Err(PoolError::BadProperty(why)) => assert!(why.contains(expect), "{name}: {why}"),
            other => panic!("{name}={value}: {other:?}"),
        }
    }
    assert_eq!(state(&pool, "livelist"), FeatureState::Disabled);
    pool.set_pool_property("feature@livelist", "enabled")
        .unwrap();
    assert_eq!(state(&pool, "livelist"), FeatureState::Enabled);
    pool.export().unwrap();
}

/// A pool whose config carries an active feature this build does not know, needed to read:
/// refused read-write and read-only, the feature named; only enabled, it imports, shows as
/// `unsupported@NAME` = inactive, and keeps its entry through the import's config write.
#[test]
fn unknown_active_feature_needed_to_read_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v0");
    pool_without(dir.path(), &[]).export().unwrap();
    let original = read_config(&path);
    let mut crafted = original.clone();
    crafted.features.insert(UNKNOWN_READ.into(), 1);
    crafted.features_for_read.push(UNKNOWN_READ.into());
    rewrite_labels(&path, &crafted);
    for readonly in [false, true] {
        let error = import_with(dir.path(), readonly).err().expect("refused");
        assert!(
            matches!(error, PoolError::UnsupportedFeatures { .. }),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!("pool \"tank\" needs features this build does not support: {UNKNOWN_READ}")
        );
    }

    crafted.features.insert(UNKNOWN_READ.into(), 0);
    rewrite_labels(&path, &crafted);
    let pool = import_with(dir.path(), false).unwrap();
    assert_eq!(
        shown(&pool, &format!("unsupported@{UNKNOWN_READ}")),
        "inactive"
    );
    pool.export().unwrap();
    let config = read_config(&path);
    assert_eq!(config.features.get(UNKNOWN_READ), Some(&0));
    assert!(config
        .features_for_read
        .iter()
        .any(|name| name == UNKNOWN_READ));
}

/// A pool whose config carries an active unknown read-only compatible feature: refused
/// read-write with a message naming it and `-o readonly=on`; imported read-only, it shows as
/// `unsupported@NAME` = readonly and its files read.
#[test]
fn unknown_active_read_only_compatible_feature_imports_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v0");
    let pool = pool_without(dir.path(), &[]);
    pool.create_dataset("tank/fs", &[], false).unwrap();
    {
        let fs = pool.open_file_system("tank/fs").unwrap();
        let attr = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap();
        fs.write(attr.ino, 0, &pattern(7, 20_000)).unwrap();
    }
    pool.export().unwrap();
    let mut crafted = read_config(&path);
    crafted.features.insert(UNKNOWN_WRITE.into(), 2);
    crafted
        .features_for_write
        .get_or_insert_with(Vec::new)
        .push(UNKNOWN_WRITE.into());
    rewrite_labels(&path, &crafted);

    let error = import_with(dir.path(), false).err().expect("refused");
    assert!(
        matches!(error, PoolError::UnsupportedFeaturesForWrite { .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!("pool \"tank\" uses features this build does not support: {UNKNOWN_WRITE}; they are read-only compatible: the pool can be imported read-only (pool import -o readonly=on)")
    );

    let pool = import_with(dir.path(), true).unwrap();
    assert_eq!(
        shown(&pool, &format!("unsupported@{UNKNOWN_WRITE}")),
        "readonly"
    );
    assert_eq!(shown(&pool, "readonly"), "on");
    {
        let fs = pool
            .read_only_file_system(pool.dataset_objset("tank/fs").unwrap())
            .unwrap();
        let attr = fs.lookup(fs.root(), b"f").unwrap();
        assert_eq!(read_all(&fs, attr.ino), pattern(7, 20_000));
    }
    assert!(matches!(pool.upgrade(), Err(PoolError::ReadOnly)));
    pool.export().unwrap();
    // The read-only import wrote nothing: the labels still carry the feature.
    assert_eq!(read_config(&path).features.get(UNKNOWN_WRITE), Some(&2));
}

/// A config as builds before refcounts wrote it (no `features_for_write`, every enabled
/// feature at 1, livelist and log_spacemap listed as needed to read) imports; the counts are
/// set by each feature's rule from the pool (the livelist of the one clone counted) and the
/// lists rebuilt, then written; the livelist count then follows the clone's destroy.
#[test]
fn a_config_without_refcounts_imports_and_is_converted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v0");
    let pool = pool_without(dir.path(), &["stalled_frees"]);
    origin_with_clones(&pool, &["tank/clone"]);
    pool.export().unwrap();
    let mut old = read_config(&path);
    old.features_for_write = None;
    for count in old.features.values_mut() {
        *count = 1;
    }
    old.features_for_read = [
        "com.tarn:embedded_data",
        "com.tarn:livelist",
        "com.tarn:log_spacemap",
        "com.tarn:replay_sequence",
    ]
    .map(String::from)
    .to_vec();
    rewrite_labels(&path, &old);
    // The bytes an old build wrote carry no `features_for_write` key at all: the encoded
    // config must not name it, and must decode to None.
    let area = label::encode_config_area(&old).unwrap();
    assert!(!area
        .windows(18)
        .any(|window| window == b"features_for_write"));
    assert_eq!(read_config(&path).features_for_write, None);

    let pool = import(dir.path(), "tank", tiny());
    assert_eq!(state(&pool, "livelist"), FeatureState::Active);
    assert_eq!(state(&pool, "log_spacemap"), FeatureState::Active);
    assert_eq!(state(&pool, "stalled_frees"), FeatureState::Disabled);
    pool.export().unwrap();
    let converted = read_config(&path);
    assert_eq!(
        converted.features_for_write,
        Some(vec![
            "com.tarn:livelist".to_string(),
            "com.tarn:log_spacemap".to_string(),
            "com.tarn:deadlist_totals".to_string(),
            "com.tarn:space_limits".to_string()
        ])
    );
    assert_eq!(
        converted.features_for_read,
        [
            "com.tarn:embedded_data",
            "com.tarn:replay_sequence",
            "com.tarn:user_accounting",
            "com.tarn:user_holds",
            "com.tarn:raidz",
            "com.tarn:raidz_expansion"
        ]
    );
    assert_eq!(converted.features["com.tarn:livelist"], 1);
    let pool = import(dir.path(), "tank", tiny());
    pool.destroy_dataset("tank/clone", false).unwrap();
    wait_freed(&pool);
    assert_eq!(state(&pool, "livelist"), FeatureState::Enabled);
    assert_clean(&pool);
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tiny());
    assert_eq!(state(&pool, "livelist"), FeatureState::Enabled);
    pool.export().unwrap();
}

/// The livelist count in the labels can disagree with the MOS of the txg an import opens (a
/// rewind opens an older txg than the newest labels describe): import recounts it from the MOS,
/// and `check` compares the count with the livelists on disk.
#[test]
fn a_wrong_livelist_count_in_the_config_is_recounted_at_import() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v0");
    let pool = pool_without(dir.path(), &[]);
    origin_with_clones(&pool, &["tank/clone"]);
    pool.export().unwrap();
    let mut crafted = read_config(&path);
    assert_eq!(crafted.features["com.tarn:livelist"], 1);
    crafted.features.insert("com.tarn:livelist".into(), 5);
    rewrite_labels(&path, &crafted);
    let pool = import(dir.path(), "tank", tiny());
    assert_clean(&pool);
    pool.destroy_dataset("tank/clone", false).unwrap();
    wait_freed(&pool);
    assert_eq!(state(&pool, "livelist"), FeatureState::Enabled);
    assert_clean(&pool);
    pool.export().unwrap();
    assert_eq!(read_config(&path).features["com.tarn:livelist"], 0);
}
