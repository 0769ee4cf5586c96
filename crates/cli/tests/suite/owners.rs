//! Owners on the command line, end to end through the `tarn` binary and its daemon:
//! `userspace|groupspace|projectspace` print zfs's columns and type names, with -H, -p, -n,
//! -o, -s/-S, -t and -j; owner properties (`userquota@root`, `userused@root`) are set and read
//! by name and shown under the name asked; a name no database knows, an unknown field or type,
//! and -t on projectspace are refused with a message and change nothing.
//!
//! Files are given to owners with chown(2) through the mount, so these tests need /dev/fuse and
//! root; the owners are root (named everywhere) and IDs no passwd or group database names.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tarn_test_support::cli::CliFixture;
use tarn_test_support::{requires, Requirement};

const TARN: &str = env!("CARGO_BIN_EXE_tarn");
/// An owner no passwd or group database names (shown by number).
const STRANGER: u32 = 4_000_000;

/// (bytes, nodes) by uid under `dir`, as du counts them: st_blocks x 512 of every node,
/// `dir` itself included.
fn du_by_uid(dir: &Path, totals: &mut std::collections::BTreeMap<u32, (u64, u64)>) {
    let meta = fs::symlink_metadata(dir).unwrap();
    let entry = totals.entry(meta.uid()).or_default();
    entry.0 += meta.blocks() * 512;
    entry.1 += 1;
    if meta.is_dir() {
        for child in fs::read_dir(dir).unwrap() {
            du_by_uid(&child.unwrap().path(), totals);
        }
    }
}

/// A mounted file system `tank/fs` holding root's files and a stranger's, synced and mounted
/// afresh (so that the kernel holds no attributes from before the sync); None when the
/// machine cannot run it.
fn owned_files() -> Option<(CliFixture, std::path::PathBuf)> {
    if !requires(&[Requirement::Fuse, Requirement::Root]) {
        return None;
    }
    let t = CliFixture::mounting(TARN)?;
    t.create_in_altroot("tank", &[]).success();
    t.run(&["create", "-o", "compression=off", "tank/fs"])
        .success();
    let mnt = t.file("altroot/tank/fs");
    fs::write(mnt.join("root-file"), vec![1u8; 200_000]).unwrap();
    fs::create_dir(mnt.join("theirs")).unwrap();
    fs::write(mnt.join("theirs/file"), vec![2u8; 700_000]).unwrap();
    for path in ["theirs", "theirs/file"] {
        std::os::unix::fs::chown(mnt.join(path), Some(STRANGER), Some(STRANGER + 1)).unwrap();
    }
    t.run(&["pool", "sync", "tank"]).success();
    t.run(&["pool", "sync", "tank"]).success();
    t.run(&["unmount", "tank/fs"]).success();
    t.run(&["mount", "tank/fs"]).success();
    Some((t, mnt))
}

#[test]
fn userspace_prints_what_du_counts_in_zfs_columns() {
    let Some((t, mnt)) = owned_files() else {
        return;
    };
    let mut du = std::collections::BTreeMap::new();
    du_by_uid(&mnt, &mut du);
    assert_eq!(du.keys().copied().collect::<Vec<_>>(), [0, STRANGER]);
    let (root_used, root_nodes) = du[&0];
    let (stranger_used, stranger_nodes) = du[&STRANGER];

    // -H -p -n: tabs, exact numbers, IDs; sorted by type, then name; an unset quota is none.
    let run = t.run(&["userspace", "-Hpn", "tank/fs"]).success();
    assert_eq!(
        run.stdout,
        format!(
            "POSIX User\t0\t{root_used}\tnone\t{root_nodes}\tnone\n\
             POSIX User\t{STRANGER}\t{stranger_used}\tnone\t{stranger_nodes}\tnone\n"
        ),
        "{run}"
    );
    // Names where the database has one, the number where not (numbers sort first); -o picks
    // and orders the columns.
    let run = t
        .run(&["userspace", "-Hp", "-o", "used,name", "tank/fs"])
        .success();
    assert_eq!(
        run.stdout,
        format!("{stranger_used}\t{STRANGER}\n{root_used}\troot\n"),
        "{run}"
    );
    // The human table: zfs's header, sizes short.
    let run = t.run(&["userspace", "tank/fs"]).success();
    let lines: Vec<Vec<&str>> = run
        .stdout
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["TYPE", "NAME", "USED", "QUOTA", "OBJUSED", "OBJQUOTA"],
        "{run}"
    );
    assert_eq!(
        lines[1][..3],
        ["POSIX", "User", &STRANGER.to_string()],
        "{run}"
    );
    assert_eq!(lines[2][..3], ["POSIX", "User", "root"], "{run}");
    assert!(lines[1][3].ends_with('K'), "{run}");
    // -S used puts the stranger's 700 KB first; -s used last.
    let first = |args: &[&str]| {
        let run = t.run(args).success();
        run.stdout.lines().next().unwrap_or_default().to_string()
    };
    assert_eq!(
        first(&["userspace", "-Hn", "-o", "name", "-S", "used", "tank/fs"]),
        STRANGER.to_string()
    );
    assert_eq!(
        first(&["userspace", "-Hn", "-o", "name", "-s", "used", "tank/fs"]),
        "0"
    );
    // Groups: the stranger's group by number; -t all lists groups before users.
    let run = t
        .run(&["groupspace", "-Hp", "-o", "type,name,used", "tank/fs"])
        .success();
    assert!(
        run.stdout
            .contains(&format!("POSIX Group\t{}\t{stranger_used}\n", STRANGER + 1)),
        "{run}"
    );
    let run = t
        .run(&["userspace", "-H", "-t", "all", "-o", "type", "tank/fs"])
        .success();
    let types: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        types,
        ["POSIX Group", "POSIX Group", "POSIX User", "POSIX User"],
        "{run}"
    );
    // Projects: everything is project 0's.
    let run = t
        .run(&["projectspace", "-Hp", "-o", "type,name,used", "tank/fs"])
        .success();
    assert_eq!(
        run.stdout,
        format!("Project\t0\t{}\n", root_used + stranger_used),
        "{run}"
    );
    // -j: the rows under `owners`, a nameless owner as a number.
    let json = t
        .run(&["userspace", "-j", "-p", "tank/fs"])
        .success()
        .json();
    assert_eq!(
        json["output_version"]["command"], "tarn userspace",
        "{json}"
    );
    let owners = json["owners"].as_array().unwrap();
    assert_eq!(owners.len(), 2, "{json}");
    assert_eq!(owners[0]["name"], STRANGER, "{json}");
    assert_eq!(owners[0]["used"], stranger_used, "{json}");
    assert!(owners[0]["quota"].is_null(), "{json}");
    assert_eq!(owners[1]["name"], "root", "{json}");
    assert_eq!(owners[1]["type"], "POSIX User", "{json}");
    // A snapshot's owners.
    t.run(&["snapshot", "tank/fs@s"]).success();
    let run = t
        .run(&["userspace", "-Hpn", "-o", "name,used", "tank/fs@s"])
        .success();
    assert_eq!(
        run.stdout,
        format!("0\t{root_used}\n{STRANGER}\t{stranger_used}\n"),
        "{run}"
    );
}

#[test]
fn owner_properties_by_name_and_their_misuse() {
    let Some((t, mnt)) = owned_files() else {
        return;
    };
    let stranger_used = {
        let mut du = std::collections::BTreeMap::new();
        du_by_uid(&mnt.join("theirs"), &mut du);
        du[&STRANGER].0
    };
    t.run(&["set", "userquota@root=10M", "tank/fs"]).success();
    t.run(&["set", &format!("userobjquota@{STRANGER}=100"), "tank/fs"])
        .success();
    t.run(&["set", "groupquota@root=1G", "tank/fs"]).success();
    t.run(&["set", "projectquota@7=5M", "tank/fs"]).success();

    // get: rows under the names asked, for each dataset in the order asked; -p exact; an
    // unset quota is none (0 with -p) from the default; usage is a statistic.
    let asked = format!("userquota@root,userused@{STRANGER},userobjquota@{STRANGER},used");
    let run = t
        .run(&[
            "get",
            "-H",
            "-o",
            "name,property,value,source",
            &asked,
            "tank/fs",
            "tank",
        ])
        .success();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 8, "{run}");
    assert_eq!(lines[0], "tank/fs\tuserquota@root\t10M\tlocal", "{run}");
    assert!(
        lines[1].starts_with(&format!("tank/fs\tuserused@{STRANGER}\t"))
            && lines[1].ends_with("\t-"),
        "{run}"
    );
    assert_eq!(
        lines[2],
        format!("tank/fs\tuserobjquota@{STRANGER}\t100\tlocal")
    );
    assert!(lines[3].starts_with("tank/fs\tused\t"), "{run}");
    assert_eq!(lines[4], "tank\tuserquota@root\tnone\tdefault", "{run}");
    let run = t
        .run(&["get", "-Hp", "-o", "value", &asked, "tank/fs", "tank"])
        .success();
    let values: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        values[..3],
        ["10485760", &stranger_used.to_string(), "100"],
        "{run}"
    );
    assert_eq!(values[4], "0", "{run}");
    // -j keys the properties by the names asked.
    let json = t
        .run(&["get", "-j", "userquota@root", "tank/fs"])
        .success()
        .json();
    let property = &json["datasets"]["tank/fs"]["properties"]["userquota@root"];
    assert_eq!(property["value"], "10M", "{json}");
    // all lists no owner property, as zfs get all does not.
    let run = t
        .run(&["get", "-H", "-o", "property", "all", "tank/fs"])
        .success();
    assert!(!run.stdout.contains('@'), "{run}");

    // The listings show the quotas; by number with -n.
    let run = t
        .run(&["userspace", "-Hn", "-o", "name,quota,objquota", "tank/fs"])
        .success();
    assert_eq!(
        run.stdout,
        format!("0\t10M\tnone\n{STRANGER}\tnone\t100\n"),
        "{run}"
    );
    let run = t
        .run(&["groupspace", "-Hp", "-o", "name,quota", "tank/fs"])
        .success();
    assert!(run.stdout.contains("root\t1073741824\n"), "{run}");
    let run = t
        .run(&["projectspace", "-H", "-o", "name,used,quota", "tank/fs"])
        .success();
    assert!(run.stdout.contains("7\t0\t5M\n"), "{run}");

    // Misuse is refused with a message and changes nothing.
    let before = t
        .run(&["userspace", "-Hp", "-t", "all", "tank/fs"])
        .success()
        .stdout;
    t.run(&["set", "userquota@tarn_no_such_user=1G", "tank/fs"])
        .failure(&["no such user 'tarn_no_such_user'"]);
    t.run(&["set", "groupobjquota@tarn_no_such_group=1", "tank/fs"])
        .failure(&["no such group 'tarn_no_such_group'"]);
    t.run(&["get", "userused@tarn_no_such_user", "tank/fs"])
        .failure(&["no such user"]);
    t.run(&["set", "projectquota@web=1G", "tank/fs"])
        .failure(&["invalid project id"]);
    t.run(&["set", "userused@root=1", "tank/fs"])
        .failure(&["read-only"]);
    t.run(&["projectspace", "-t", "all", "tank/fs"])
        .failure(&["takes no -t"]);
    t.run(&["userspace", "-t", "posix", "tank/fs"])
        .failure(&["invalid type 'posix'"]);
    t.run(&["userspace", "-s", "size", "tank/fs"])
        .failure(&["invalid sort field 'size'"]);
    t.run(&["userspace", "-o", "name,size", "tank/fs"])
        .failure(&["invalid field"]);
    t.run(&["userspace", "tank/fs#mark"]).failure(&["bookmark"]);
    let after = t
        .run(&["userspace", "-Hp", "-t", "all", "tank/fs"])
        .success()
        .stdout;
    assert_eq!(after, before);

    // none and inherit remove quotas; an owner left with nothing is no longer listed.
    t.run(&["set", "userquota@root=none", "tank/fs"]).success();
    t.run(&["inherit", "projectquota@7", "tank/fs"]).success();
    let run = t
        .run(&["userspace", "-Hn", "-o", "name,quota", "tank/fs"])
        .success();
    assert!(run.stdout.starts_with("0\tnone\n"), "{run}");
    let run = t
        .run(&["projectspace", "-H", "-o", "name", "tank/fs"])
        .success();
    assert_eq!(run.stdout, "0\n", "{run}");
    // -t smbuser matches no one: an empty listing, still of a dataset that exists.
    let run = t
        .run(&["userspace", "-H", "-t", "smbuser", "tank/fs"])
        .success();
    assert_eq!(run.stdout, "", "{run}");
    t.run(&["userspace", "-t", "smbuser", "tank/nonesuch"])
        .failure(&["nonesuch"]);
}
