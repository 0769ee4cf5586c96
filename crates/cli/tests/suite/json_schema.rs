//! `-j` output in OpenZFS 2.3's JSON schema, verb by verb, through the `tarn` binary and its
//! daemon on a real pool: every document opens with `output_version` (`command`, `vers_major`
//! 0, `vers_minor` 1); pools and datasets are objects keyed by name, not arrays of rows; each
//! property is a value/source pair whose source type is `LOCAL`, `DEFAULT`, `INHERITED` (with
//! `data` naming the dataset inherited from) or `NONE` for a read-only statistic; `-p` gives
//! exact integers where `-j` alone gives strings as people read them (zpool and zfs `-j
//! --json-int`).
//!
//! tarn's `-j` printed its own shapes before (`{"pools": [{"name": ..., "alloc": 123}]}`,
//! `{"properties": [{"property": ..., "source": "inherited from tank"}]}`), which a script
//! written for zpool or zfs could not read; these tests guard the schema.

use serde_json::Value;

use tarn_test_support::cli::CliFixture;
use tarn_test_support::Run;

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

/// The document's header is `output_version` of `command`, version 0.1, and comes first.
fn assert_header(run: &Run, command: &str) -> Value {
    assert!(
        run.stdout
            .trim_start()
            .starts_with("{\n  \"output_version\": {"),
        "output_version first:\n{run}"
    );
    let document = run.json();
    assert_eq!(
        document["output_version"],
        serde_json::json!({"command": command, "vers_major": 0, "vers_minor": 1}),
        "{run}"
    );
    document
}

/// A property's source as (type, data).
fn source(property: &Value) -> (String, String) {
    let source = &property["source"];
    (
        source["type"].as_str().unwrap_or_default().to_string(),
        source["data"].as_str().unwrap_or_default().to_string(),
    )
}

fn pair(kind: &str, data: &str) -> (String, String) {
    (kind.to_string(), data.to_string())
}

#[test]
fn pool_list_get_and_status_follow_zpools_schema() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    t.create_in_altroot("tank", &[]).success();

    // pool list -j: pools keyed by name, identity beside value/source pairs under zpool's names.
    let run = t.run(&["pool", "list", "-j"]).success();
    let document = assert_header(&run, "tarn pool list");
    let tank = &document["pools"]["tank"];
    assert_eq!(tank["name"], "tank", "{run}");
    assert_eq!(tank["type"], "POOL", "{run}");
    assert_eq!(tank["state"], "ONLINE", "{run}");
    assert!(tank["guid"].is_string() && tank["txg"].is_string(), "{run}");
    let properties = tank["properties"].as_object().expect("properties");
    let names: Vec<&str> = properties.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "allocated",
            "capacity",
            "fragmentation",
            "free",
            "health",
            "size"
        ],
        "{run}"
    );
    for property in properties.values() {
        assert!(property["value"].is_string(), "{run}");
        assert_eq!(source(property), pair("NONE", "-"), "{run}");
    }
    assert!(
        properties["capacity"]["value"]
            .as_str()
            .unwrap()
            .ends_with('%'),
        "{run}"
    );
    // -p: exact integers, equal to -H -p.
    let exact = t
        .run(&["pool", "list", "-H", "-p", "-o", "size,alloc"])
        .success();
    let run = t.run(&["pool", "list", "-j", "-p"]).success();
    let document = assert_header(&run, "tarn pool list");
    let tank = &document["pools"]["tank"];
    assert!(tank["guid"].is_u64() && tank["txg"].is_u64(), "{run}");
    let properties = &tank["properties"];
    assert_eq!(
        format!(
            "{}\t{}\n",
            properties["size"]["value"], properties["allocated"]["value"]
        ),
        exact.stdout,
        "{run}"
    );

    // pool get -j: the same identity, every property with its source.
    let run = t
        .run(&[
            "pool",
            "get",
            "-j",
            "-p",
            "size,guid,altroot,cachefile",
            "tank",
        ])
        .success();
    let document = assert_header(&run, "tarn pool get");
    let tank = &document["pools"]["tank"];
    assert_eq!(tank["type"], "POOL", "{run}");
    let properties = &tank["properties"];
    assert!(properties["size"]["value"].is_u64(), "{run}");
    assert_eq!(source(&properties["size"]), pair("NONE", "-"), "{run}");
    assert_eq!(properties["guid"]["value"], tank["guid"], "{run}");
    assert_eq!(source(&properties["altroot"]), pair("LOCAL", "-"), "{run}");
    assert_eq!(
        source(&properties["cachefile"]),
        pair("DEFAULT", "-"),
        "{run}"
    );

    // pool status -j: the vdev tree keyed by name under the root named after the pool.
    let run = t.run(&["pool", "status", "-j", "tank"]).success();
    let document = assert_header(&run, "tarn pool status");
    let tank = &document["pools"]["tank"];
    assert_eq!(tank["state"], "ONLINE", "{run}");
    assert_eq!(tank["error_count"], "0", "{run}");
    let root = &tank["vdevs"]["tank"];
    assert_eq!(root["vdev_type"], "root", "{run}");
    assert_eq!(root["state"], "HEALTHY", "{run}");
    let leaves = root["vdevs"].as_object().expect("vdevs keyed by name");
    assert_eq!(leaves.len(), 1, "{run}");
    let (name, leaf) = leaves.iter().next().unwrap();
    assert_eq!(leaf["name"], name.as_str(), "{run}");
    assert_eq!(leaf["path"], name.as_str(), "{run}");
    assert_eq!(leaf["vdev_type"], "file", "{run}");
    assert_eq!(leaf["class"], "normal", "{run}");
    assert_eq!(leaf["read_errors"], "0", "{run}");
    // After a scrub, scan_stats in zpool's words; -p: integers.
    t.run(&["pool", "scrub", "-w", "tank"]).success();
    let run = t.run(&["pool", "status", "-j", "-p", "tank"]).success();
    let document = assert_header(&run, "tarn pool status");
    let tank = &document["pools"]["tank"];
    assert!(tank["error_count"].is_u64(), "{run}");
    let scan = &tank["scan_stats"];
    assert_eq!(scan["function"], "SCRUB", "{run}");
    assert_eq!(scan["state"], "FINISHED", "{run}");
    assert!(scan["examined"].as_u64().unwrap() > 0, "{run}");
    assert_eq!(scan["errors"], 0, "{run}");
    // -p is for -j only (the text has no numbers to make exact): refused without it.
    t.run(&["pool", "status", "-p", "tank"]).failure(&["-j"]);
}

#[test]
fn list_get_and_mount_follow_zfs_schema() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    t.create_in_altroot("tank", &["-O", "compression=lz4"])
        .success();
    t.run(&["create", "-o", "recordsize=16K", "tank/a"])
        .success();
    t.run(&["create", "tank/a/b"]).success();
    t.run(&["snapshot", "tank/a@s1"]).success();

    // list -j: datasets keyed by name, identity, the columns under zfs's names.
    let run = t
        .run(&[
            "list",
            "-j",
            "-r",
            "-t",
            "all",
            "-o",
            "name,avail,refer,compression,recordsize",
            "tank",
        ])
        .success();
    let document = assert_header(&run, "tarn list");
    let datasets = document["datasets"]
        .as_object()
        .expect("datasets keyed by name");
    let names: Vec<&str> = datasets.keys().map(String::as_str).collect();
    assert_eq!(names, ["tank", "tank/a", "tank/a/b", "tank/a@s1"], "{run}");
    let b = &datasets["tank/a/b"];
    assert_eq!(b["type"], "FILESYSTEM", "{run}");
    assert_eq!(b["pool"], "tank", "{run}");
    assert!(b["createtxg"].is_string(), "{run}");
    let properties = &b["properties"];
    assert_eq!(source(&properties["available"]), pair("NONE", "-"), "{run}");
    assert_eq!(
        source(&properties["referenced"]),
        pair("NONE", "-"),
        "{run}"
    );
    assert_eq!(
        source(&properties["compression"]),
        pair("INHERITED", "tank"),
        "{run}"
    );
    assert_eq!(properties["recordsize"]["value"], "16K", "{run}");
    assert_eq!(
        source(&properties["recordsize"]),
        pair("INHERITED", "tank/a"),
        "{run}"
    );
    let a = &datasets["tank/a"]["properties"];
    assert_eq!(source(&a["recordsize"]), pair("LOCAL", "-"), "{run}");
    assert_eq!(
        source(&datasets["tank"]["properties"]["compression"]),
        pair("LOCAL", "-"),
        "{run}"
    );
    assert_eq!(
        source(&datasets["tank"]["properties"]["recordsize"]),
        pair("DEFAULT", "-"),
        "{run}"
    );
    let snapshot = &datasets["tank/a@s1"];
    assert_eq!(snapshot["type"], "SNAPSHOT", "{run}");
    assert_eq!(snapshot["dataset"], "tank/a", "{run}");
    assert_eq!(snapshot["snapshot_name"], "s1", "{run}");
    // -p: exact integers where whole numbers, names stay strings.
    let run = t
        .run(&[
            "list",
            "-j",
            "-p",
            "-o",
            "name,used,recordsize,compression",
            "tank/a",
        ])
        .success();
    let document = assert_header(&run, "tarn list");
    let a = &document["datasets"]["tank/a"];
    assert!(a["createtxg"].is_u64(), "{run}");
    assert!(a["properties"]["used"]["value"].is_u64(), "{run}");
    assert_eq!(a["properties"]["recordsize"]["value"], 16384, "{run}");
    assert_eq!(a["properties"]["compression"]["value"], "lz4", "{run}");

    // get -j: the same shape, for the properties asked, of every dataset named.
    let run = t
        .run(&[
            "get",
            "-j",
            "compression,recordsize,used",
            "tank/a/b",
            "tank/a@s1",
        ])
        .success();
    let document = assert_header(&run, "tarn get");
    let b = &document["datasets"]["tank/a/b"];
    assert_eq!(b["type"], "FILESYSTEM", "{run}");
    assert!(b["createtxg"].is_string(), "{run}");
    let properties = &b["properties"];
    assert_eq!(
        source(&properties["compression"]),
        pair("INHERITED", "tank"),
        "{run}"
    );
    assert_eq!(
        source(&properties["recordsize"]),
        pair("INHERITED", "tank/a"),
        "{run}"
    );
    assert_eq!(properties["recordsize"]["value"], "16K", "{run}");
    assert_eq!(source(&properties["used"]), pair("NONE", "-"), "{run}");
    assert!(properties["used"]["value"].is_string(), "{run}");
    let snapshot = &document["datasets"]["tank/a@s1"];
    assert_eq!(snapshot["type"], "SNAPSHOT", "{run}");
    assert_eq!(
        source(&snapshot["properties"]["recordsize"]),
        pair("INHERITED", "tank/a"),
        "{run}"
    );
    let run = t.run(&["get", "-j", "-p", "all", "tank/a"]).success();
    let document = assert_header(&run, "tarn get");
    let properties = &document["datasets"]["tank/a"]["properties"];
    assert_eq!(properties["recordsize"]["value"], 16384, "{run}");
    assert_eq!(
        source(&properties["recordsize"]),
        pair("LOCAL", "-"),
        "{run}"
    );
    assert!(properties["used"]["value"].is_u64(), "{run}");
    assert!(
        document["datasets"]["tank/a"]["createtxg"].is_u64(),
        "{run}"
    );

    // mount -j: zfs mount -j's datasets, each its filesystem and mountpoint.
    let run = t.run(&["mount", "-j"]).success();
    let document = assert_header(&run, "tarn mount");
    let b = &document["datasets"]["tank/a/b"];
    assert_eq!(b["filesystem"], "tank/a/b", "{run}");
    assert_eq!(
        b["mountpoint"],
        t.file("altroot").join("tank/a/b").display().to_string(),
        "{run}"
    );
}

#[test]
fn version_and_tarns_own_tables_open_with_the_same_header() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    t.create_in_altroot("tank", &[]).success();

    // version -j: zfs version -j's object, with both sides' protocol versions.
    let run = t.run(&["version", "-j"]).success();
    let document = assert_header(&run, "tarn version");
    let versions = &document["tarn_version"];
    let build = format!("tarn-{}", tarn_protocol::BUILD_VERSION);
    let protocol = tarn_protocol::PROTOCOL_VERSION.to_string();
    assert_eq!(versions["userland"], build.as_str(), "{run}");
    assert_eq!(versions["userland_protocol"], protocol.as_str(), "{run}");
    assert_eq!(versions["daemon"], build.as_str(), "{run}");
    assert_eq!(versions["daemon_protocol"], protocol.as_str(), "{run}");

    // Verbs OpenZFS has no -j for keep their objects, under the same header.
    let run = t.run(&["debug", "metaslabs", "-j", "tank"]).success();
    let document = assert_header(&run, "tarn debug metaslabs");
    assert_eq!(document["pool"], "tank", "{run}");
    let run = t.run(&["stat", "txgs", "-j", "tank"]).success();
    let document = assert_header(&run, "tarn stat txgs");
    assert!(document["txgs"].is_array(), "{run}");
    let run = t.run(&["stat", "arc", "-j", "tank"]).success();
    let document = assert_header(&run, "tarn stat arc");
    assert!(document["arc"].is_object(), "{run}");
}
