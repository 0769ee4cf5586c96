//! Pool properties end to end through the `tarn` binary and its daemon: `pool get` (all, named,
//! comma lists, -H, -p, -o, -j, the daemon's altroot and cachefile, unknown names), `pool set`
//! (feature@NAME=enabled; properties fixed for an import refused), `pool list -o freeing`, and
//! `pool wait -t free` after destroying a filled file system (freeing > 0 right after the
//! destroy, 0 once the wait returns).

use std::fs;

use tarn_test_support::cli::CliFixture;

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

/// `pool get -H -p -o value PROP POOL`.
fn value(t: &CliFixture, property: &str, pool: &str) -> String {
    t.run(&["pool", "get", "-H", "-p", "-o", "value", property, pool])
        .success()
        .stdout
        .trim_end()
        .to_string()
}

#[test]
fn pool_get_lists_all_or_named_properties_in_zpool_columns() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    t.create_in_altroot("tank", &[]).success();

    let all = t.run(&["pool", "get", "all", "tank"]).success();
    let header: Vec<&str> = all
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "PROPERTY", "VALUE", "SOURCE"], "{all}");
    for property in [
        "size",
        "capacity",
        "health",
        "guid",
        "allocated",
        "free",
        "freeing",
        "fragmentation",
        "readonly",
        "altroot",
        "cachefile",
        "feature@",
    ] {
        assert!(
            all.stdout.lines().skip(1).any(|line| line
                .split_whitespace()
                .nth(1)
                .unwrap()
                .starts_with(property)),
            "pool get all should list {property}:\n{all}"
        );
    }

    // -H -p: tab-separated exact values, in the order asked.
    let exact = t
        .run(&[
            "pool",
            "get",
            "-H",
            "-p",
            "size,free,health,readonly",
            "tank",
        ])
        .success();
    let lines: Vec<Vec<&str>> = exact
        .stdout
        .lines()
        .map(|line| line.split('\t').collect())
        .collect();
    assert_eq!(lines.len(), 4, "{exact}");
    assert_eq!(lines[0][..2], ["tank", "size"], "{exact}");
    let size: u64 = lines[0][2].parse().expect("exact size in bytes");
    assert!(
        size > 200 << 20 && size <= 256 << 20,
        "size of a 256M vdev: {exact}"
    );
    assert_eq!(lines[0][3], "-", "size is a read-only figure: {exact}");
    let free: u64 = lines[1][2].parse().expect("exact free bytes");
    assert!(free > 0 && free < size, "{exact}");
    assert_eq!(lines[2], ["tank", "health", "ONLINE", "-"], "{exact}");
    assert_eq!(lines[3], ["tank", "readonly", "off", "-"], "{exact}");

    // Human form: sizes with suffixes.
    let human = t
        .run(&["pool", "get", "-H", "-o", "value", "size", "tank"])
        .success();
    assert!(human.stdout.trim_end().ends_with('M'), "{human}");

    // The daemon's own properties.
    let altroot = t
        .run(&[
            "pool",
            "get",
            "-H",
            "-o",
            "property,value,source",
            "altroot,cachefile",
            "tank",
        ])
        .success();
    assert_eq!(
        altroot.stdout,
        format!("altroot\t{}\tlocal\ncachefile\t-\tdefault\n", t.altroot()),
        "{altroot}"
    );

    // Unknown properties, pools and fields.
    t.run(&["pool", "get", "bogus", "tank"])
        .failure(&["bogus", "pool properties:", "freeing"]);
    t.run(&["pool", "get", "size", "nosuchpool"])
        .failure(&["nosuchpool", "no such pool"]);
    t.run(&["pool", "get", "-o", "name,bogus", "size", "tank"])
        .failure(&["bogus"]);

    // JSON: exact numbers.
    let json = t
        .run(&["pool", "get", "-j", "-p", "freeing", "tank"])
        .success();
    let document: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    let freeing = &document["pools"]["tank"]["properties"]["freeing"];
    assert_eq!(freeing["value"], 0, "{json}");
    assert_eq!(freeing["source"]["type"], "NONE", "{json}");

    // pool list: freeing with -o, not by default.
    let list = t
        .run(&["pool", "list", "-H", "-p", "-o", "name,freeing", "tank"])
        .success();
    assert_eq!(list.stdout, "tank\t0\n", "{list}");
    let default = t.run(&["pool", "list", "-H", "tank"]).success();
    assert_eq!(
        default.stdout.trim_end().split('\t').count(),
        7,
        "{default}"
    );
}

#[test]
fn pool_set_enables_features_and_refuses_import_time_properties() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    t.create_in_altroot("tank", &["-o", "feature@embedded_data=disabled"])
        .success();
    assert_eq!(value(&t, "feature@embedded_data", "tank"), "disabled");
    t.run(&["pool", "set", "feature@embedded_data=enabled", "tank"])
        .success();
    let enabled = value(&t, "feature@embedded_data", "tank");
    assert!(
        enabled == "enabled" || enabled == "active",
        "feature@embedded_data after set: {enabled}"
    );
    let source = t
        .run(&[
            "pool",
            "get",
            "-H",
            "-o",
            "source",
            "feature@embedded_data",
            "tank",
        ])
        .success();
    assert_eq!(source.stdout, "local\n", "{source}");

    // Survives export and import.
    t.run(&["pool", "export", "tank"]).success();
    let dir = t.d();
    let altroot = t.altroot();
    t.run(&["pool", "import", "-d", &dir, "-R", &altroot, "tank"])
        .success();
    assert_eq!(value(&t, "feature@embedded_data", "tank"), enabled);

    t.run(&["pool", "set", "feature@embedded_data=disabled", "tank"])
        .failure(&["only be set to 'enabled'"]);
    t.run(&["pool", "set", "feature@bogus=enabled", "tank"])
        .failure(&["unknown feature"]);
    t.run(&["pool", "set", "readonly=on", "tank"])
        .failure(&["'readonly' can only be set at import time"]);
    t.run(&["pool", "set", "altroot=/mnt", "tank"])
        .failure(&["'altroot' can only be set during pool creation or import"]);
    // cachefile can be set (as zpool's): `none` stops recording the pool; a relative path is
    // refused.
    t.run(&["pool", "set", "cachefile=none", "tank"]).success();
    assert_eq!(value(&t, "cachefile", "tank"), "none");
    t.run(&["pool", "set", "cachefile=relative.cache", "tank"])
        .failure(&["invalid cachefile"]);
    t.run(&["pool", "set", "size=1G", "tank"])
        .failure(&["read-only"]);
    t.run(&["pool", "set", "bogus", "tank"])
        .failure(&["PROP=VALUE"]);
    t.run(&["pool", "set", "feature@embedded_data=enabled", "nosuchpool"])
        .failure(&["no such pool"]);
    assert_eq!(value(&t, "readonly", "tank"), "off");
}

#[test]
fn pool_wait_free_returns_once_a_destroyed_file_system_is_freed() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    // One block freed per txg, so the background free of the destroyed file system takes many
    // txgs and `freeing` is seen above zero.
    let slow = [("TARN_TUNABLE_async_block_max_blocks", "1")];
    let disk = t.path("tank.img");
    let altroot = t.altroot();
    t.run_env(
        &slow,
        &[
            "pool", "create", "-s", "256M", "-R", &altroot, "tank", &disk,
        ],
    )
    .success();
    t.run(&["create", "tank/fill"]).success();
    let fill = t.file("altroot").join("tank/fill");
    for index in 0..4 {
        let data: Vec<u8> = (0..(4u32 << 20))
            .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(index) >> 13) as u8)
            .collect();
        fs::write(fill.join(format!("file{index}")), data).unwrap();
    }
    t.run(&["pool", "sync", "tank"]).success();
    assert_eq!(value(&t, "freeing", "tank"), "0");

    t.run(&["destroy", "tank/fill"]).success();
    let freeing: u64 = value(&t, "freeing", "tank").parse().unwrap();
    assert!(freeing > 0, "freeing right after destroying 16M: {freeing}");

    let wait = t.run(&["pool", "wait", "-t", "free", "tank"]).success();
    assert_eq!(wait.stdout, "", "pool wait is quiet: {wait}");
    assert_eq!(wait.stderr, "", "no progress line off a terminal: {wait}");
    assert_eq!(value(&t, "freeing", "tank"), "0");
    // Waiting with nothing to free returns at once; without -t it waits for free too.
    t.run(&["pool", "wait", "tank"]).success();

    // No scan in progress: waiting for one returns at once, quietly.
    let scrub = t
        .run(&["pool", "wait", "-t", "scrub,resilver", "tank"])
        .success();
    assert_eq!(scrub.stdout, "", "pool wait is quiet: {scrub}");
    t.run(&["pool", "wait", "-t", "trim", "tank"])
        .failure(&["trim", "not supported yet"]);
    t.run(&["pool", "wait", "-t", "bogus", "tank"])
        .failure(&["bogus"]);
    t.run(&["pool", "wait", "-t", "free", "nosuchpool"])
        .failure(&["no such pool"]);
}
