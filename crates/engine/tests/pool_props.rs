//! Pool properties (zpool get/set) on a real pool: the space figures add up, `freeing` follows
//! a background destroy down to zero, features report their state and can be enabled (and the
//! change survives export and import), and misuse is refused with a clear error.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tarn::pool::props::PoolValue;
use tarn::pool::{CreateOptions, Pool, PoolError};
use tarn::tunables::Tunables;

fn value(pool: &Pool, name: &str) -> PoolValue {
    pool.pool_properties_named(&[name.to_string()]).unwrap()[0]
        .value
        .clone()
}

fn bytes(pool: &Pool, name: &str) -> u64 {
    match value(pool, name) {
        PoolValue::Bytes(bytes) => bytes,
        other => panic!("{name} is {other:?}"),
    }
}

#[test]
fn figures_add_up_and_freeing_drains_to_zero() {
    let dir = tempfile::tempdir().unwrap();
    let tunables = Tunables {
        async_block_max_blocks: 20,
        ..tiny()
    };
    let pool = create_pool(dir.path(), "tank", single(dir.path(), "v0"), tunables);
    let size = bytes(&pool, "size");
    assert_eq!(bytes(&pool, "allocated") + bytes(&pool, "free"), size);
    assert_eq!(value(&pool, "health"), PoolValue::Text("ONLINE".into()));
    assert_eq!(value(&pool, "readonly"), PoolValue::Text("off".into()));
    assert_eq!(value(&pool, "guid"), PoolValue::Number(pool.core.guid.0));
    assert_eq!(bytes(&pool, "freeing"), 0);

    pool.create_dataset("tank/d", &[("compression".into(), "off".into())], false)
        .unwrap();
    {
        let fs = pool.open_file_system("tank/d").unwrap();
        for file in 0..10u64 {
            let attr = fs
                .create(fs.root(), format!("f{file}").as_bytes(), 0o644, 0, 0)
                .unwrap();
            fs.write(attr.ino, 0, &pattern(file + 1, 128 << 10))
                .unwrap();
        }
    }
    pool.sync().unwrap();
    let all = pool.pool_properties().unwrap();
    let names: Vec<&str> = all.iter().map(|property| property.name.as_str()).collect();
    assert_eq!(&names[..4], ["size", "capacity", "health", "guid"]);
    match value(&pool, "capacity") {
        PoolValue::Percent(Some(percent)) => {
            assert_eq!(percent, bytes(&pool, "allocated") * 100 / size)
        }
        other => panic!("capacity {other:?}"),
    }

    pool.destroy_dataset("tank/d", false).unwrap();
    let freeing = bytes(&pool, "freeing");
    assert!(freeing >= 10 * (128 << 10), "freeing {freeing}");
    let started = Instant::now();
    let mut last = freeing;
    while bytes(&pool, "freeing") > 0 {
        let now = bytes(&pool, "freeing");
        assert!(now <= last, "freeing grew: {last} -> {now}");
        last = now;
        assert!(started.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn features_report_their_state_and_can_be_enabled() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::create(CreateOptions {
        name: "tank".into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: single(dir.path(), "v0"),
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: tiny(),
        wrap_device: None,
        disabled_features: vec!["embedded_data".into()],
    })
    .unwrap();
    assert_eq!(
        value(&pool, "feature@embedded_data"),
        PoolValue::Text("disabled".into())
    );
    for (name, value, expect) in [
        (
            "feature@embedded_data",
            "disabled",
            "only be set to 'enabled'",
        ),
        ("feature@nonesuch", "enabled", "unknown feature"),
        ("size", "1G", "read-only"),
        ("bogus", "1", "no pool property"),
    ] {
        match pool.set_pool_property(name, value) {
            Err(PoolError::BadProperty(why)) => assert!(why.contains(expect), "{name}: {why}"),
            other => panic!("{name}={value}: {other:?}"),
        }
    }
    assert!(pool.pool_properties_named(&["nonesuch".into()]).is_err());
    pool.set_pool_property("feature@embedded_data", "enabled")
        .unwrap();
    assert_eq!(
        value(&pool, "feature@embedded_data"),
        PoolValue::Text("active".into())
    );
    pool.export().unwrap();
    let pool = import(dir.path(), "tank", tiny());
    assert_eq!(
        value(&pool, "feature@embedded_data"),
        PoolValue::Text("active".into())
    );
    assert_clean(&pool);
    pool.export().unwrap();
}
