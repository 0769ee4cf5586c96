//! End-to-end tests of the `tarn` binary, run as a user would run it: real pools on sparse files
//! in temporary directories, one process per command. Each fixture ([`CliFixture`], shared
//! with the other tests of the binary) has its own daemon socket (`TARN_SOCKET` in a temporary
//! directory apart from the pool's files) and stops its daemon when dropped.
//! `CliFixture::create_exported` exports the new pool again, so most tests here exercise the
//! in-process paths on exported pools; the daemon's own behaviour is tested in `daemon.rs`.
//!
//! Every command goes through [`CliFixture::run`], which fails the test if the binary panicked
//! (exit status 101) or was killed by a signal.
//!
//! Tests marked `#[ignore = "..."]` expose bugs that are not fixed yet; run them with
//! `cargo test -p tarn-cli --test suite cli:: -- --ignored`.

use std::collections::BTreeMap;
use std::fs::File;
use std::process::Stdio;

use tarn_test_support::cli::{copies_bad_repaired, CliFixture};
use tarn_test_support::Run;

const TARN: &str = env!("CARGO_BIN_EXE_tarn");
const MIB: u64 = 1 << 20;

/// `-H -p -o name,size,alloc` rows.
#[track_caller]
fn exact_sizes(run: &Run) -> BTreeMap<String, (u64, u64)> {
    run.stdout
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(
                fields.len(),
                3,
                "three tab-separated fields in {line:?}:\n{run}"
            );
            let number = |text: &str| -> u64 {
                text.parse()
                    .unwrap_or_else(|_| panic!("{text:?} is not an exact number:\n{run}"))
            };
            (
                fields[0].to_string(),
                (number(fields[1]), number(fields[2])),
            )
        })
        .collect()
}

#[test]
fn lifecycle_of_a_single_vdev_pool() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    let vdev = t.path("a.img");

    let created = t
        .run(&["pool", "create", "-s", "128M", "tank", &vdev])
        .success();
    assert!(created.stdout.contains("created pool tank"), "{created}");
    let meta = std::fs::metadata(&vdev).expect("pool create makes the vdev file");
    assert_eq!(meta.len(), 128 * MIB, "file has the size given with -s");

    // Human listing of the pools the daemon holds: header, then the pool with a human size.
    let list = t.run(&["pool", "list"]).success();
    let mut lines = list.stdout.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(header[..3], ["NAME", "SIZE", "ALLOC"], "{list}");
    let row: Vec<&str> = lines.next().expect("a row").split_whitespace().collect();
    assert_eq!(row[0], "tank", "{list}");
    assert!(
        row[1].ends_with('M') && row[1].trim_end_matches('M').parse::<f64>().unwrap() > 100.0,
        "human size of a 128M pool: {list}"
    );
    assert_eq!(lines.next(), None, "one pool only:\n{list}");

    // Scripted listing: no header, tabs, exact bytes.
    let exact = t
        .run(&["pool", "list", "-H", "-p", "-o", "name,size,alloc"])
        .success();
    let sizes = exact_sizes(&exact);
    let &(size, alloc) = sizes.get("tank").expect("tank listed");
    assert_eq!(sizes.len(), 1, "{exact}");
    assert!(
        size > 100 * MIB && size <= 128 * MIB,
        "size {size}:\n{exact}"
    );
    assert!(
        alloc > 0 && alloc < size,
        "alloc {alloc} of {size}:\n{exact}"
    );

    // JSON listing (zpool list -j -p --json-int) agrees with the exact numbers.
    let json = t.run(&["pool", "list", "-j", "-p"]).success().json();
    let pools = json["pools"].as_object().expect("pools keyed by name");
    assert_eq!(pools.len(), 1, "{json}");
    let tank = &json["pools"]["tank"];
    assert_eq!(tank["name"], "tank");
    let properties = &tank["properties"];
    assert_eq!(properties["size"]["value"].as_u64(), Some(size), "{json}");
    assert_eq!(
        properties["allocated"]["value"].as_u64(),
        Some(alloc),
        "{json}"
    );
    assert_eq!(
        properties["free"]["value"].as_u64(),
        Some(size - alloc),
        "{json}"
    );
    assert_eq!(properties["health"]["value"], "ONLINE");

    // Metaslabs: text and JSON, consistent with the pool's size and allocation.
    let metaslabs = t.run(&["debug", "metaslabs", "-d", &d, "tank"]).success();
    let first = metaslabs.stdout.lines().next().unwrap_or("");
    let count: usize = first
        .strip_prefix("vdev 0: ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("'vdev 0: N metaslabs' expected:\n{metaslabs}"));
    assert!(count > 0, "{metaslabs}");
    // Header line plus one line per metaslab.
    assert_eq!(metaslabs.stdout.lines().count(), 2 + count, "{metaslabs}");
    let json = t
        .run(&["debug", "metaslabs", "-j", "-d", &d, "tank"])
        .success()
        .json();
    assert_eq!(json["pool"], "tank");
    let vdevs = json["vdevs"].as_array().expect("vdevs array");
    assert_eq!(vdevs.len(), 1, "{json}");
    let ms = vdevs[0]["metaslabs"].as_array().expect("metaslabs array");
    assert_eq!(ms.len(), count, "text and JSON agree on the metaslab count");
    let ms_size: u64 = ms.iter().map(|m| m["size"].as_u64().unwrap()).sum();
    let ms_alloc: u64 = ms.iter().map(|m| m["allocated"].as_u64().unwrap()).sum();
    assert_eq!(vdevs[0]["size"].as_u64(), Some(ms_size), "{json}");
    assert_eq!(vdevs[0]["allocated"].as_u64(), Some(ms_alloc), "{json}");
    assert_eq!(ms_size, size, "pool list size is the sum of the metaslabs");
    assert_eq!(
        ms_alloc, alloc,
        "read-only imports must not change the allocation between commands"
    );
    let ms0_alloc = ms[0]["allocated"].as_u64().unwrap();
    assert!(ms0_alloc > 0, "metaslab 0 holds the new pool's metadata");
    // With the log space map (on by default) the map lacks the changes still unflushed: the
    // export flushed everything but its own txg's.
    let ms0_map_alloc = ms0_alloc + ms[0]["unflushed_freed"].as_u64().unwrap()
        - ms[0]["unflushed_allocated"].as_u64().unwrap();

    // The log space map: the export leaves the log of its own txg, listed with its txg and
    // blocks, and the summary.
    let logs = t.run(&["debug", "logs", "-d", &d, "tank"]).success();
    assert!(logs.stdout.starts_with("log space map of tank"), "{logs}");
    assert!(logs.stdout.contains("summary:"), "{logs}");
    let json = t
        .run(&["debug", "logs", "-j", "-d", &d, "tank"])
        .success()
        .json();
    let listed = json["log_spacemap"]["logs"].as_array().expect("logs array");
    assert!(!listed.is_empty() && listed.len() <= 2, "{json}");
    assert!(
        listed.iter().all(|log| log["blocks"].as_u64() >= Some(1)),
        "{json}"
    );

    // Space map of metaslab 0: records, and a header agreeing with the metaslab.
    let spacemap = t
        .run(&["debug", "spacemap", "-d", &d, "tank", "0", "0"])
        .success();
    let header = spacemap.stdout.lines().next().unwrap_or("");
    assert!(
        header.starts_with("space map object") && header.contains("vdev 0 metaslab 0"),
        "{spacemap}"
    );
    assert!(
        header.ends_with(&format!("allocated {ms0_map_alloc}")),
        "space map header agrees with debug metaslabs ({ms0_map_alloc}):\n{spacemap}"
    );
    assert!(spacemap.stdout.contains("ALLOC ["), "{spacemap}");
    t.run(&["debug", "spacemap", "-d", &d, "tank", "0", "9999"])
        .failure(&["no metaslab 9999"]);
    t.run(&["debug", "spacemap", "-d", &d, "tank", "7", "0"])
        .failure(&["no vdev 7"]);

    // Status: the vdev path and ONLINE, in text and JSON.
    let status = t.run(&["pool", "status", "tank"]).success();
    assert!(status.stdout.contains("pool: tank"), "{status}");
    let vdev_line = status
        .stdout
        .lines()
        .find(|line| line.contains(&vdev))
        .unwrap_or_else(|| panic!("status names {vdev}:\n{status}"));
    assert!(vdev_line.contains("ONLINE"), "{status}");
    assert!(!status.stdout.contains("mirror"), "{status}");
    let json = t.run(&["pool", "status", "-j", "-p"]).success().json();
    let pools = json["pools"].as_object().expect("pools keyed by name");
    assert_eq!(pools.len(), 1);
    let tank = &json["pools"]["tank"];
    assert_eq!(tank["name"], "tank");
    assert_eq!(tank["state"], "ONLINE");
    let leaf = &tank["vdevs"]["tank"]["vdevs"][vdev.as_str()];
    assert_eq!(leaf["path"], vdev.as_str(), "{json}");
    assert_eq!(leaf["state"], "HEALTHY", "{json}");
    assert_eq!(leaf["checksum_errors"], 0, "{json}");

    // Check.
    assert_eq!(t.check_clean("tank"), (0, 0));

    // The daemon holds the new pool: it is not offered for import until exported.
    assert_eq!(t.importable(), vec![]);
    t.export("tank");
    // Import: listing, then by name.
    assert_eq!(
        t.importable(),
        vec![("tank".to_string(), "ONLINE, exported".to_string())]
    );
    t.run(&["pool", "import", "-d", &d, "tank"])
        .success()
        .stdout_has(&["imported pool tank"]);
    t.export("tank");
    t.run(&["pool", "export", "-d", &d, "tank"])
        .success()
        .stdout_has(&["already exported"]);

    // Destroy: the pool no longer imports.
    t.run(&["pool", "destroy", "-d", &d, "tank"])
        .success()
        .stdout_has(&["destroyed pool tank"]);
    t.run(&["pool", "import", "-d", &d, "tank"])
        .failure(&["tank"]);
    t.run(&["check", "-d", &d, "tank"]).failure(&["tank"]);
    let list = t.run(&["pool", "list", "-H"]).success();
    assert!(!list.stdout.contains("tank"), "{list}");
    assert_eq!(t.importable(), vec![], "a destroyed pool is not importable");
    // A destroyed pool's device can be reused without -f.
    t.run(&["pool", "create", "tank2", &vdev]).success();
    t.check_clean("tank2");
}

#[test]

fn import_listing_omits_destroyed_pools() {
    let t = CliFixture::new(TARN);
    t.create_exported("tank", &["a.img"]);
    t.run(&["pool", "destroy", "-d", &t.d(), "tank"]).success();
    let listed = t.importable();
    assert!(
        listed.iter().all(|(name, _)| name != "tank"),
        "destroyed pool listed: {listed:?}"
    );
}

#[test]

fn import_with_a_new_name() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create_exported("tank", &["a.img"]);
    let run = t
        .run(&["pool", "import", "-d", &d, "tank", "newtank"])
        .success();
    assert!(run.stdout.contains("imported pool newtank"), "{run}");
    t.export("newtank");
    assert_eq!(
        t.importable(),
        vec![("newtank".to_string(), "ONLINE, exported".to_string())]
    );
    t.check_clean("newtank");
    assert!(
        !run.stdout.contains("exported pool tank "),
        "the pool is called newtank now:\n{run}"
    );
}

/// `pool import -F -n` says what a rewind would do without importing; `-F` on a healthy pool
/// imports at its newest txg; `-n` alone is a usage error.
#[test]
fn import_rewind_dry_run_then_rewind() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create_exported("tank", &["a.img"]);
    t.run(&["pool", "import", "-d", &d, "-F", "-n", "tank"])
        .success()
        .stdout_has(&["tank", "no rewind needed"]);
    assert_eq!(
        t.importable(),
        vec![("tank".to_string(), "ONLINE, exported".to_string())],
        "-n imported the pool"
    );
    t.run(&["pool", "import", "-d", &d, "-n", "tank"])
        .failure(&["-F"]);
    t.run(&["pool", "import", "-d", &d, "-F", "tank"])
        .success()
        .stdout_has(&["imported pool tank"]);
    t.export("tank");
    t.check_clean("tank");
}

// ------------------------------------------------------------------------------------------------
// 2. Mirrors and several top-level vdevs
// ------------------------------------------------------------------------------------------------

#[test]
fn mirror_and_two_top_level_vdevs() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create_exported("m", &["mirror", "m0.img", "m1.img"]);
    t.create_exported("s", &["s0.img", "s1.img"]);
    for file in ["m0.img", "m1.img", "s0.img", "s1.img"] {
        assert_eq!(
            std::fs::metadata(t.dir().join(file)).unwrap().len(),
            128 * MIB
        );
    }

    // pool list and pool status show imported pools only: both are imported to be shown, and
    // exported again below for the verbs that run in-process.
    for pool in ["m", "s"] {
        t.run(&["pool", "import", "-d", &d, pool]).success();
    }
    let sizes = exact_sizes(
        &t.run(&["pool", "list", "-H", "-p", "-o", "name,size,alloc"])
            .success(),
    );
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    let (m_size, _) = sizes["m"];
    let (s_size, _) = sizes["s"];
    assert!(
        m_size > 100 * MIB && m_size <= 128 * MIB,
        "a mirror holds one side's worth: {m_size}"
    );
    assert!(
        s_size > 200 * MIB && s_size <= 256 * MIB,
        "two top-level vdevs add up: {s_size}"
    );

    // The mirror: mirror-0 with both children under it.
    let status = t.run(&["pool", "status", "m"]).success();
    let lines: Vec<&str> = status.stdout.lines().collect();
    let mirror_at = lines
        .iter()
        .position(|line| line.trim().starts_with("mirror-0"))
        .unwrap_or_else(|| panic!("mirror-0 in status:\n{status}"));
    for (offset, file) in ["m0.img", "m1.img"].iter().enumerate() {
        let line = lines.get(mirror_at + 1 + offset).copied().unwrap_or("");
        assert!(
            line.contains(&t.path(file)) && line.contains("ONLINE"),
            "{file} under mirror-0:\n{status}"
        );
        let indent = |l: &str| l.len() - l.trim_start().len();
        assert!(
            indent(line) > indent(lines[mirror_at]),
            "children indented under the mirror:\n{status}"
        );
    }
    assert!(!status.stdout.contains("s0.img"), "only pool m:\n{status}");
    let json = t.run(&["pool", "status", "-j", "m"]).success().json();
    let vdevs = json["pools"]["m"]["vdevs"]["m"]["vdevs"]
        .as_object()
        .expect("vdevs");
    assert_eq!(vdevs.len(), 1, "{json}");
    let mirror = &vdevs["mirror-0"];
    assert_eq!(mirror["vdev_type"], "mirror", "{json}");
    assert_eq!(mirror["vdevs"].as_object().unwrap().len(), 2);

    // Two leaves: two top-level vdevs, no mirror.
    let status = t.run(&["pool", "status", "s"]).success();
    assert!(!status.stdout.contains("mirror"), "{status}");
    assert!(status.stdout.contains(&t.path("s0.img")), "{status}");
    assert!(status.stdout.contains(&t.path("s1.img")), "{status}");
    let json = t.run(&["pool", "status", "-j", "s"]).success().json();
    let vdevs = json["pools"]["s"]["vdevs"]["s"]["vdevs"]
        .as_object()
        .expect("vdevs");
    assert_eq!(vdevs.len(), 2, "{json}");
    assert!(vdevs.values().all(|v| v["vdev_type"] == "file"), "{json}");
    // The status of all pools names both.
    let all = t.run(&["pool", "status"]).success();
    assert!(
        all.stdout.contains("pool: m") && all.stdout.contains("pool: s"),
        "{all}"
    );
    t.export("m");
    t.export("s");
    let metaslabs = t
        .run(&["debug", "metaslabs", "-j", "-d", &d, "s"])
        .success()
        .json();
    assert_eq!(metaslabs["vdevs"].as_array().unwrap().len(), 2);
    t.run(&["debug", "spacemap", "-d", &d, "s", "1", "0"])
        .success();

    assert_eq!(t.check_clean("m"), (0, 0));
    assert_eq!(t.check_clean("s"), (0, 0));
}

#[test]

fn mirror_with_a_missing_side_is_reported_and_recovers() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create_exported("m", &["mirror", "m0.img", "m1.img"]);
    let away = t.dir().join("away");
    std::fs::create_dir(&away).unwrap();
    std::fs::rename(t.dir().join("m1.img"), away.join("m1.img")).unwrap();

    // An exported pool's state and vdev tree are what `pool import` lists.
    let m1 = t.path("m1.img");
    let listing = t.run(&["pool", "import", "-d", &d]).success();
    assert!(
        listing.stdout.contains("DEGRADED") && listing.stdout.contains(&m1),
        "the listing must say a mirror side is missing:\n{listing}"
    );
    t.run(&["check", "-d", &d, "m"]);

    std::fs::rename(away.join("m1.img"), t.dir().join("m1.img")).unwrap();
    t.check_clean("m");
    let listing = t.run(&["pool", "import", "-d", &d]).success();
    let side = listing.stdout.lines().find(|line| line.contains(&m1));
    assert!(
        listing.stdout.contains("mirror-0") && side.is_some_and(|line| line.contains("ONLINE")),
        "the returned side is part of the mirror again:\n{listing}"
    );
}

/// `pool list` and `pool status` merged the exported pools they found by scanning directories
/// (the current directory without a daemon, `-d DIR` with one) into the imported ones, opening
/// each for the command, where zpool list and zpool status show imported pools only and
/// `zpool import` lists the exported ones. Guards: an exported pool is neither listed nor shown
/// (by name it is "no such pool"), `pool import` without a pool name lists it with its vdev
/// tree and state, `-d` is refused naming `pool import -d DIR`, and with nothing imported both
/// say "no pools available" and exit 0, as zpool does.
#[test]
fn list_and_status_show_imported_pools_only() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create("imp", &["imp.img"]);
    t.create_exported("exp", &["exp0.img", "exp1.img"]);

    let list = t.run(&["pool", "list", "-H", "-o", "name"]).success();
    assert_eq!(list.stdout, "imp\n", "{list}");
    let json = t.run(&["pool", "list", "-j"]).success().json();
    let names: Vec<&String> = json["pools"].as_object().expect("pools").keys().collect();
    assert_eq!(names, ["imp"], "{json}");
    let status = t.run(&["pool", "status"]).success();
    assert!(status.stdout.contains("pool: imp"), "{status}");
    assert!(!status.stdout.contains("exp"), "{status}");
    let json = t.run(&["pool", "status", "-j"]).success().json();
    let names: Vec<&String> = json["pools"].as_object().expect("pools").keys().collect();
    assert_eq!(names, ["imp"], "{json}");
    for verb in ["list", "status"] {
        t.run(&["pool", verb, "exp"])
            .failure(&["cannot open 'exp': no such pool"]);
        t.run(&["pool", verb, "-d", &d])
            .failure(&["imported pools only", &format!("tarn pool import -d {d}")]);
    }

    // The exported pool is the import listing's, with its vdevs and state; the imported one
    // is named as such.
    let listing = t.run(&["pool", "import"]).success();
    let exp0 = t.path("exp0.img");
    let exp1 = t.path("exp1.img");
    let line_of = |path: &str| listing.stdout.lines().find(|line| line.contains(path));
    assert!(listing.stdout.contains("pool: exp"), "{listing}");
    assert!(listing.stdout.contains("state: ONLINE"), "{listing}");
    for path in [&exp0, &exp1] {
        assert!(
            line_of(path).is_some_and(|line| line.contains("ONLINE")),
            "{path} ONLINE in the listing:\n{listing}"
        );
    }
    assert!(!listing.stdout.contains("pool: imp"), "{listing}");
    assert!(listing.stdout.contains("already imported"), "{listing}");

    // Nothing imported (the daemon exits with its last pool): "no pools available", exit 0;
    // nothing with -H, no pools with -j; pool status says it on stderr.
    t.export("imp");
    let list = t.run(&["pool", "list"]).success();
    assert_eq!(list.stdout, "no pools available\n", "{list}");
    let list = t.run(&["pool", "list", "-H"]).success();
    assert_eq!(list.stdout, "", "{list}");
    let json = t.run(&["pool", "list", "-j"]).success().json();
    assert_eq!(json["pools"], serde_json::json!({}), "{json}");
    let status = t.run(&["pool", "status"]).success();
    assert_eq!(status.stdout, "", "{status}");
    assert_eq!(status.stderr, "no pools available\n", "{status}");
    let json = t.run(&["pool", "status", "-j"]).success().json();
    assert_eq!(json["pools"], serde_json::json!({}), "{json}");
    assert!(!t.socket().exists(), "listing started no daemon");
    let mut names: Vec<String> = t.importable().into_iter().map(|(name, _)| name).collect();
    names.sort();
    assert_eq!(names, ["exp", "imp"]);
}

/// Without `-d`, `pool import` searched /dev/disk/by-id and the directories the cache file
/// names, but `check`, the `debug` verbs, `pool history`, `pool import -F -n` and `pool export`
/// and `pool destroy` of a pool no daemon holds searched the current directory. Guards: every
/// verb searches the one default search path, so a pool exported beside an imported one is
/// found by all of them, and a pool in the current directory that no cache file names by none.
#[test]
fn verbs_without_dirs_search_the_default_path() {
    let t = CliFixture::new(TARN);
    let known = t.file("known");
    std::fs::create_dir(&known).unwrap();
    let in_known = |file: &str| known.join(file).to_str().unwrap().to_string();
    // The fixture's commands run in its directory, which holds `here`'s vdev.
    t.create_exported("here", &["here.img"]);
    // anchor stays imported: the cache file names its directory, where neighbour is exported.
    t.run(&[
        "pool",
        "create",
        "-s",
        "128M",
        "anchor",
        &in_known("anchor.img"),
    ])
    .success();
    t.run(&[
        "pool",
        "create",
        "-s",
        "128M",
        "neighbour",
        &in_known("neighbour.img"),
    ])
    .success();
    t.export("neighbour");

    for args in [
        vec!["check", "here"],
        vec!["debug", "metaslabs", "here"],
        vec!["debug", "logs", "here"],
        vec!["pool", "history", "here"],
        vec!["pool", "import", "-F", "-n", "here"],
        vec!["pool", "import", "here"],
        vec!["pool", "export", "here"],
        vec!["pool", "destroy", "here"],
    ] {
        t.run(&args).failure(&["here"]);
    }
    assert_eq!(
        t.importable(),
        vec![("here".to_string(), "ONLINE, exported".to_string())],
        "no verb touched the pool in the current directory"
    );

    t.run(&["check", "neighbour"])
        .success()
        .stdout_has(&["checked pool neighbour", "no errors found"]);
    t.run(&["debug", "metaslabs", "neighbour"])
        .success()
        .stdout_has(&["vdev 0:"]);
    t.run(&["debug", "logs", "neighbour"]).success();
    t.run(&["pool", "history", "neighbour"])
        .success()
        .stdout_has(&["History for 'neighbour':", "pool create"]);
    t.run(&["pool", "import", "-F", "-n", "neighbour"])
        .success()
        .stdout_has(&["no rewind needed"]);
    t.run(&["pool", "export", "neighbour"])
        .success()
        .stdout_has(&["pool neighbour is already exported"]);
    let listing = t.run(&["pool", "import"]).success();
    assert!(listing.stdout.contains("pool: neighbour"), "{listing}");
    assert!(!listing.stdout.contains("pool: here"), "{listing}");
    t.run(&["pool", "destroy", "neighbour"])
        .success()
        .stdout_has(&["destroyed pool neighbour"]);
    let listing = t.run(&["pool", "import"]).success();
    assert!(!listing.stdout.contains("pool: neighbour"), "{listing}");
}

// ------------------------------------------------------------------------------------------------
// 3. Misuse: non-zero exit, a message naming the problem, nothing changed on disk
// ------------------------------------------------------------------------------------------------

/// Run each case against a directory holding one healthy pool `tank`; each must fail with its
/// message and leave every file untouched; `tank` must still check clean afterwards.
#[track_caller]
fn assert_misuse(t: &CliFixture, cases: &[(Vec<String>, Vec<&str>)]) {
    let before = t.snapshot();
    for (args, needles) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        t.run(&args).failure(needles);
        assert_eq!(
            t.snapshot(),
            before,
            "`tarn {}` changed files in the pool directory",
            args.join(" ")
        );
    }
    assert_eq!(
        t.importable(),
        vec![("tank".to_string(), "ONLINE, exported".to_string())]
    );
    t.check_clean("tank");
}

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(String::from).collect()
}

#[test]
fn create_usage_errors_change_nothing() {
    let t = CliFixture::new(TARN);
    t.create_exported("tank", &["a.img"]);
    let new = t.path("new.img");
    let new2 = t.path("new2.img");
    let cases = vec![
        (words("pool create"), vec!["required", "<POOL>"]),
        (words("pool create tank"), vec!["required", "<VDEVS>"]),
        (
            words(&format!("pool create -s 128M 1tank {new}")),
            vec!["invalid pool name", "1tank", "start with a letter"],
        ),
        (
            words(&format!("pool create -s 128M mirror {new}")),
            vec!["invalid pool name", "\"mirror\""],
        ),
        (
            words(&format!("pool create -s 128M a/b {new}")),
            vec!["invalid pool name", "a/b"],
        ),
        (
            words(&format!("pool create tank2 {new}")),
            vec!["new.img", "does not exist", "-s"],
        ),
        (
            words(&format!("pool create -s lots tank2 {new}")),
            vec!["invalid size", "lots"],
        ),
        (
            words(&format!("pool create -s 3X tank2 {new}")),
            vec!["invalid size", "3X"],
        ),
        (
            words(&format!("pool create -s 128M tank2 {new} {new}")),
            vec!["new.img", "named twice"],
        ),
        (
            words(&format!(
                "pool create -s 128M tank2 {new} mirror {new2} {new}"
            )),
            vec!["new.img", "named twice"],
        ),
        (
            words(&format!("pool create -s 128M tank2 mirror {new}")),
            vec!["mirror", "two devices"],
        ),
        (
            words(&format!("pool create -s 128M tank2 {new} mirror")),
            vec!["mirror", "two devices"],
        ),
        (
            words(&format!("pool create -s 128M tank2 raidz2 {new} {new2}")),
            vec!["raidz2", "at least 3 devices"],
        ),
        (
            words(&format!("pool create -s 128M -o ashift=7 tank2 {new}")),
            vec!["ashift", "9 to 16"],
        ),
        (words("frobnicate"), vec!["frobnicate"]),
        (words("pool frobnicate"), vec!["frobnicate"]),
    ];
    assert_misuse(&t, &cases);
}

#[test]
fn create_over_another_pools_device_needs_force() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create_exported("tank", &["a.img"]);
    let a = t.path("a.img");
    // Without -f: refused, naming the pool the device belongs to and what to do.
    assert_misuse(
        &t,
        &[
            (
                words(&format!("pool create other {a}")),
                vec!["a.img", "\"tank\"", "-f"],
            ),
            (
                words(&format!("pool create -s 128M other {a}")),
                vec!["a.img", "\"tank\"", "-f"],
            ),
        ],
    );
    // With -f: the device now belongs to the new pool; the old one is gone.
    t.run(&["pool", "create", "-f", "other", &a]).success();
    t.export("other");
    assert_eq!(
        t.importable(),
        vec![("other".to_string(), "ONLINE, exported".to_string())]
    );
    t.check_clean("other");
    t.run(&["check", "-d", &d, "tank"]).failure(&["tank"]);
}

#[test]

fn failed_create_removes_the_files_it_created() {
    let t = CliFixture::new(TARN);
    t.create_exported("tank", &["a.img"]);
    let cases = vec![(
        words(&format!(
            "pool create -s 128M other {} {}",
            t.path("new.img"),
            t.path("a.img")
        )),
        vec!["\"tank\"", "-f"],
    )];
    assert_misuse(&t, &cases);
}

#[test]
fn create_on_a_device_below_the_minimum() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create_exported("tank", &["a.img"]);
    let small = t.path("small.img");
    File::create(&small)
        .unwrap()
        .set_len(32 * MIB)
        .expect("32 MiB file");
    t.run(&["pool", "create", "tank2", &small])
        .failure(&["small.img", "too small", "67108864"]);
    assert_eq!(std::fs::metadata(&small).unwrap().len(), 32 * MIB);
    assert_eq!(
        t.importable(),
        vec![("tank".to_string(), "ONLINE, exported".to_string())]
    );
    t.run(&["check", "-d", &d, "tank2"]).failure(&["tank2"]);
    t.check_clean("tank");
    // Exactly the minimum works.
    let min = t.path("min.img");
    File::create(&min).unwrap().set_len(64 * MIB).unwrap();
    t.run(&["pool", "create", "tank3", &min]).success();
    t.check_clean("tank3");
}

#[test]

fn create_on_a_device_below_the_minimum_does_not_write_to_it() {
    let t = CliFixture::new(TARN);
    t.create_exported("tank", &["a.img"]);
    let small = t.path("small.img");
    let pattern: Vec<u8> = (0..32 * MIB).map(|i| (i % 251) as u8).collect();
    std::fs::write(&small, &pattern).unwrap();
    let cases = vec![(
        words(&format!("pool create tank2 {small}")),
        vec!["small.img", "too small"],
    )];
    assert_misuse(&t, &cases);
    let after = std::fs::read(&small).unwrap();
    let first_change = after.iter().zip(&pattern).position(|(a, b)| a != b);
    assert_eq!(first_change, None, "small.img was written to");
}

#[test]

fn create_with_a_size_below_the_minimum_creates_nothing() {
    let t = CliFixture::new(TARN);
    t.create_exported("tank", &["a.img"]);
    let cases = vec![(
        words(&format!("pool create -s 32M tank2 {}", t.path("new.img"))),
        vec!["too small"],
    )];
    assert_misuse(&t, &cases);
}

#[test]

fn create_with_one_device_spelled_two_ways() {
    let t = CliFixture::new(TARN);
    t.create_exported("tank", &["a.img"]);
    let cases = vec![(
        // The commands run in the fixture directory: both name DIR/new.img.
        words(&format!(
            "pool create -s 128M tank2 {} new.img",
            t.path("new.img")
        )),
        vec!["named twice"],
    )];
    assert_misuse(&t, &cases);
}

#[test]
fn unknown_pools_fields_and_options() {
    let t = CliFixture::new(TARN);
    t.create_exported("tank", &["a.img"]);
    let d = t.d();
    let no_pool = ["nosuch"];
    let cases = vec![
        (
            words(&format!("pool import -d {d} nosuch")),
            no_pool.to_vec(),
        ),
        (words(&format!("check -d {d} nosuch")), no_pool.to_vec()),
        (
            words(&format!("pool destroy -d {d} nosuch")),
            no_pool.to_vec(),
        ),
        (
            words(&format!("pool export -d {d} nosuch")),
            no_pool.to_vec(),
        ),
        (words("pool status nosuch"), no_pool.to_vec()),
        (words("pool list nosuch"), no_pool.to_vec()),
        // pool list and pool status show imported pools only: -d is refused, naming the verb
        // that lists the pools in DIR.
        (
            words(&format!("pool list -d {d}")),
            vec!["imported pools only", "tarn pool import -d"],
        ),
        (
            words(&format!("pool status -d {d} tank")),
            vec!["imported pools only", "tarn pool import -d"],
        ),
        (
            words(&format!("debug metaslabs -d {d} nosuch")),
            no_pool.to_vec(),
        ),
        (
            words(&format!("debug spacemap -d {d} nosuch 0 0")),
            no_pool.to_vec(),
        ),
        (
            words("pool list -o nosuchfield"),
            vec!["nosuchfield", "valid fields", "name", "alloc"],
        ),
        (
            words("pool list -H -o name,nosuchfield"),
            vec!["nosuchfield"],
        ),
        (words("pool list -j -o nosuchfield"), vec!["nosuchfield"]),
        (
            words(&format!("pool import -d {d} -o foo=bar tank")),
            vec!["foo=bar", "readonly"],
        ),
        (
            words(&format!("pool import -d {d} -o foo=bar")),
            vec!["foo=bar", "readonly"],
        ),
        (
            words(&format!("debug spacemap -d {d} tank 0 x")),
            vec!["invalid value", "x"],
        ),
    ];
    assert_misuse(&t, &cases);
    // The message for an unknown pool says where tarn looked, or at least that there is none.
    let run = t.run(&["check", "-d", &d, "nosuch"]);
    let stderr = run.stderr.to_lowercase();
    assert!(
        stderr.contains("no such pool") || stderr.contains("no pool named"),
        "{run}"
    );
}

#[test]
fn check_of_a_pool_whose_only_vdev_was_truncated() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create_exported("tank", &["a.img"]);
    File::options()
        .write(true)
        .open(t.path("a.img"))
        .unwrap()
        .set_len(0)
        .unwrap();
    let run = t.run(&["check", "-d", &d, "tank"]).failure(&["tank"]);
    assert!(!run.stdout.contains("no errors found"), "{run}");
    t.run(&["pool", "import", "-d", &d, "tank"])
        .failure(&["tank"]);
    t.run(&["pool", "status", "tank"]).failure(&["tank"]);
    t.run(&["debug", "metaslabs", "-d", &d, "tank"])
        .failure(&["tank"]);
    // Listing commands still work and simply do not show the pool.
    let list = t.run(&["pool", "list", "-H"]).success();
    assert!(!list.stdout.contains("tank"), "{list}");
    assert_eq!(t.importable(), vec![]);
    assert_eq!(std::fs::metadata(t.path("a.img")).unwrap().len(), 0);
}

#[test]
fn check_of_a_pool_whose_vdev_lost_its_data_area() {
    // The labels survive, every block is gone: a clear error, no panic.
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create_exported("tank", &["a.img"]);
    let file = File::options().write(true).open(t.path("a.img")).unwrap();
    file.set_len(4 * MIB).unwrap();
    file.set_len(128 * MIB).unwrap();
    let run = t.run(&["check", "-d", &d, "tank"]).failure(&["tank"]);
    assert!(!run.stdout.contains("no errors found"), "{run}");
}

// ------------------------------------------------------------------------------------------------
// 4. Damage
// ------------------------------------------------------------------------------------------------

#[test]
fn check_repairs_a_damaged_mirror_side() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create_exported("m", &["mirror", "m0.img", "m1.img"]);
    // Bytes 4 MiB .. 12 MiB of one side: the start of the data area, where metaslab 0 holds
    // the pool's metadata.
    t.scribble("m0.img", 4 * MIB, 8 * MIB);

    let run = t
        .run(&["check", "-d", &d, "m"])
        .success()
        .stdout_has(&["no errors found"]);
    let (bad, repaired) = copies_bad_repaired(&run);
    assert!(bad > 0, "the damage must be detected:\n{run}");
    assert_eq!(
        repaired, bad,
        "every bad copy is repaired from the other side:\n{run}"
    );
    assert!(!run.stdout.contains("UNREADABLE"), "{run}");

    // The repair was written: a second check finds nothing.
    assert_eq!(t.check_clean("m"), (0, 0));
    t.run(&["pool", "import", "-d", &d, "m"]).success();
    let status = t.run(&["pool", "status", "m"]).success();
    assert!(status.stdout.contains("mirror-0"), "{status}");
}

#[test]
fn check_of_a_damaged_single_vdev_pool_is_informative() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create_exported("s", &["s.img"]);
    t.scribble("s.img", 4 * MIB, 8 * MIB);

    let run = t.run(&["check", "-d", &d, "s"]);
    assert!(run.code == 0 || run.code == 1, "exit 0 or 1:\n{run}");
    if run.code == 0 {
        // Metadata has extra copies on one vdev: damage to one copy is repaired from another.
        assert!(run.stdout.contains("no errors found"), "{run}");
        let (bad, repaired) = copies_bad_repaired(&run);
        assert!(bad > 0, "the damage must be detected:\n{run}");
        assert_eq!(
            repaired, bad,
            "exit 0 means every bad copy was repaired:\n{run}"
        );
        assert_eq!(t.check_clean("s"), (0, 0));
    } else {
        // Either the check ran and lists what is wrong, or the pool did not open and stderr
        // says why.
        let said_why = run.stdout.contains("ERRORS FOUND")
            || run.stdout.contains("UNREADABLE")
            || run.stderr.contains("tarn: ");
        assert!(said_why, "an exit 1 must say what is wrong:\n{run}");
    }
}

// ------------------------------------------------------------------------------------------------
// 5. Quickstart
// ------------------------------------------------------------------------------------------------

#[test]
fn quickstart_runs_and_runs_again() {
    let t = CliFixture::new(TARN);
    let q = t.path("q");
    for round in 0..2 {
        let run = t.run(&["quickstart", &q]).success();
        for step in 1..=6 {
            assert!(
                run.stdout.contains(&format!("== Step {step}:")),
                "round {round}: step {step} heading:\n{run}"
            );
        }
        assert!(run.stdout.contains("read back intact"), "{run}");
        // Through the mount (`tarn check` run as a command), or the engine-level fallback
        // without /dev/fuse.
        assert!(
            run.stdout.contains("no errors found") || run.stdout.contains(": clean"),
            "{run}"
        );
        let demo = t.run(&["pool", "import", "-d", &q]).success();
        assert_eq!(
            demo.stdout.matches("pool: demo").count(),
            1,
            "round {round}: exactly one demo pool:\n{demo}"
        );
    }
    let run = t.run(&["check", "-d", &q, "demo"]).success();
    assert!(run.stdout.contains("no errors found"), "{run}");
    t.run(&["pool", "import", "-d", &q, "demo"]).success();
    let list = t.run(&["pool", "list", "-H", "-p", "-o", "name,size,alloc"]);
    let sizes = exact_sizes(&list.success());
    let (size, alloc) = sizes["demo"];
    assert!(
        alloc >= 32 * MIB && alloc < size,
        "the demo wrote at least 32 MiB: {alloc} of {size}"
    );
}

// ------------------------------------------------------------------------------------------------
// 6. Tunables
// ------------------------------------------------------------------------------------------------

#[test]
fn tunables_from_the_environment() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create_exported("tank", &["a.img"]);
    let before = t.snapshot();
    t.run_env(&[("TARN_TUNABLE_no_such", "1")], &["pool", "list"])
        .failure(&["unknown tunable", "no_such"]);
    t.run_env(&[("TARN_TUNABLE_txg_timeout", "abc")], &["pool", "list"])
        .failure(&["txg_timeout", "abc"]);
    t.run_env(
        &[("TARN_TUNABLE_indirect_block_shift", "3")],
        &["pool", "list"],
    )
    .failure(&["indirect_block_shift"]);
    t.run_env(
        &[("TARN_TUNABLE_no_such", "1")],
        &["pool", "create", "-s", "128M", "tank2", &t.path("new.img")],
    )
    .failure(&["unknown tunable", "no_such"]);
    t.run_env(
        &[("TARN_TUNABLE_no_such", "1")],
        &["check", "-d", &d, "tank"],
    )
    .failure(&["unknown tunable", "no_such"]);
    assert_eq!(t.snapshot(), before, "a rejected tunable changes nothing");

    t.run_env(
        &[("TARN_TUNABLE_txg_timeout", "1")],
        &["pool", "import", "-d", &d],
    )
    .success()
    .stdout_has(&["pool: tank"]);
    t.run_env(
        &[("TARN_TUNABLE_txg_timeout", "1")],
        &["check", "-d", &d, "tank"],
    )
    .success()
    .stdout_has(&["no errors found"]);
}

#[test]

fn unknown_tunable_is_rejected_even_without_a_pool() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    let env = [("TARN_TUNABLE_no_such", "1")];
    t.run_env(&env, &["pool", "list"])
        .failure(&["unknown tunable", "no_such"]);
    t.run_env(&env, &["pool", "import", "-d", &d])
        .failure(&["unknown tunable", "no_such"]);
    t.create_exported("tank", &["a.img"]);
    t.run_env(&env, &["pool", "export", "-d", &d, "tank"])
        .failure(&["unknown tunable", "no_such"]);
}

// ------------------------------------------------------------------------------------------------
// Output to a closed pipe (`tarn ... | head`)
// ------------------------------------------------------------------------------------------------

#[test]

fn output_into_a_closed_pipe_does_not_panic() {
    let t = CliFixture::new(TARN);
    let d = t.d();
    t.create_exported("tank", &["a.img"]);
    for args in [
        vec!["debug", "metaslabs", "-d", d.as_str(), "tank"],
        vec!["check", "-d", d.as_str(), "tank"],
    ] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let output = t
            .command(&args)
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .expect("spawn tarn");
        assert_ne!(
            output.status.code(),
            Some(101),
            "`tarn {}` panicked on a closed stdout:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert_eq!(
        t.importable(),
        vec![("tank".to_string(), "ONLINE, exported".to_string())]
    );
}
