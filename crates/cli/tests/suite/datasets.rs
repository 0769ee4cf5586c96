//! The dataset verbs end to end through the `tarn` binary and its daemon: `create` (with -p
//! and -o) mounts children below their parents, `list`/`get` with -H, -p, -o and -j, `set`
//! and `inherit` (mountpoint changes remount, readonly gives EROFS, recordsize reaches new
//! files), properties and files survive export/import, `mount`/`unmount`, `destroy` (-r, -n),
//! and every misuse gives a clear error and changes nothing.

use std::fs;
use std::os::unix::fs::MetadataExt;

use tarn_test_support::cli::{is_mounted, CliFixture};

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

/// (name, mountpoint) of every dataset, from `tarn list -H -o name,mountpoint`.
fn listed(t: &CliFixture) -> Vec<(String, String)> {
    t.run(&["list", "-H", "-o", "name,mountpoint"])
        .success()
        .stdout
        .lines()
        .map(|line| {
            let (name, mountpoint) = line.split_once('\t').expect("two fields");
            (name.to_string(), mountpoint.to_string())
        })
        .collect()
}

#[test]
fn datasets_mount_under_parents_and_keep_properties_across_import() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let alt = t.file("altroot");
    t.create_in_altroot("tank", &["-O", "atime=off"]).success();
    t.run(&["create", "tank/home"]).success();
    t.run(&[
        "create",
        "-p",
        "-o",
        "recordsize=16K",
        "-o",
        "compression=zstd",
        "tank/home/alice/docs",
    ])
    .success();
    for path in [
        "tank",
        "tank/home",
        "tank/home/alice",
        "tank/home/alice/docs",
    ] {
        assert!(is_mounted(&alt.join(path)), "{path} is not mounted");
    }
    let docs = alt.join("tank/home/alice/docs");
    fs::write(docs.join("file"), vec![7u8; 100_000]).unwrap();
    assert_eq!(
        fs::metadata(docs.join("file")).unwrap().blksize(),
        16384,
        "recordsize reaches new files"
    );
    assert!(
        !alt.join("tank/home/file").exists(),
        "a child's files are its own"
    );

    // get: sources, -H, -p, -j.
    let run = t
        .run(&[
            "get",
            "-H",
            "-p",
            "recordsize,atime,compression",
            "tank/home/alice/docs",
        ])
        .success();
    assert_eq!(
        run.stdout,
        "tank/home/alice/docs\trecordsize\t16384\tlocal\n\
         tank/home/alice/docs\tatime\toff\tinherited from tank\n\
         tank/home/alice/docs\tcompression\tzstd\tlocal\n"
    );
    let value = t.run(&["get", "-j", "all", "tank/home"]).success().json();
    let properties = value["datasets"]["tank/home"]["properties"]
        .as_object()
        .unwrap();
    assert!(properties.len() >= 15, "{value}");
    assert_eq!(properties["mounted"]["value"], "yes");
    let value = t
        .run(&["list", "-j", "-p", "-r", "tank/home"])
        .success()
        .json();
    let rows = value["datasets"].as_object().unwrap();
    assert_eq!(rows.len(), 3);
    let used = |name: &str| rows[name]["properties"]["used"]["value"].as_u64().unwrap();
    assert!(used("tank/home") >= used("tank/home/alice/docs"), "{value}");

    // set mountpoint remounts the subtree; inherit puts it back.
    t.run(&["set", "mountpoint=/srv/h", "tank/home"]).success();
    assert!(is_mounted(&alt.join("srv/h/alice/docs")));
    assert!(!is_mounted(&alt.join("tank/home")));
    assert_eq!(
        fs::read(alt.join("srv/h/alice/docs/file")).unwrap().len(),
        100_000
    );
    t.run(&["inherit", "mountpoint", "tank/home"]).success();
    assert!(is_mounted(&docs));

    // readonly: EROFS through the mount; off again: writable.
    t.run(&["set", "readonly=on", "tank/home/alice"]).success();
    let error = fs::write(docs.join("nope"), b"x").unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EROFS), "{error}");
    t.run(&["set", "readonly=off", "tank/home/alice"]).success();
    fs::write(docs.join("yes"), b"x").unwrap();

    // statfs agrees with `tarn list`: df's avail is the dataset's avail.
    t.run(&["pool", "sync", "tank"]).success();
    let listed_avail: u64 = t
        .run(&["list", "-H", "-p", "-o", "avail", "tank/home/alice/docs"])
        .success()
        .stdout
        .trim()
        .parse()
        .unwrap();
    // SAFETY: statvfs fills the struct; the path is a valid C string.
    let statfs_avail = unsafe {
        let path = std::ffi::CString::new(docs.display().to_string()).unwrap();
        let mut stat: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(path.as_ptr(), &mut stat), 0);
        stat.f_bavail * stat.f_frsize
    };
    assert!(
        statfs_avail.abs_diff(listed_avail) <= 1 << 20,
        "statfs avail {statfs_avail} vs list avail {listed_avail}"
    );

    // canmount=off: not mounted, still listed.
    t.run(&["create", "-o", "canmount=off", "tank/hidden"])
        .success();
    assert!(!is_mounted(&alt.join("tank/hidden")));

    let before = listed(&t);
    t.run(&["pool", "export", "tank"]).success();
    assert!(!is_mounted(&docs));
    let dir = t.d();
    let alt_text = t.altroot();
    t.run(&["pool", "import", "-d", &dir, "-R", &alt_text, "tank"])
        .success();
    assert_eq!(listed(&t), before);
    assert!(is_mounted(&docs));
    assert!(!is_mounted(&alt.join("tank/hidden")));
    assert_eq!(fs::read(docs.join("file")).unwrap(), vec![7u8; 100_000]);
    let run = t
        .run(&[
            "get",
            "-H",
            "-o",
            "value,source",
            "compression",
            "tank/home/alice/docs",
        ])
        .success();
    assert_eq!(run.stdout, "zstd\tlocal\n");

    // unmount and mount by name and by path; mount lists.
    t.run(&["unmount", &docs.display().to_string()]).success();
    assert!(!is_mounted(&docs));
    t.run(&["mount", "tank/home/alice/docs"]).success();
    assert!(is_mounted(&docs));
    let mounts = t.run(&["mount"]).success().stdout;
    // The third column is the mount's transport: the ring whenever the host offers it, unless
    // the run asks for /dev/fuse.
    let ring = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|value| value.trim() == "Y")
        && std::env::var("TARN_FUSE_TRANSPORT").map_or(true, |name| name != "dev");
    let transport = if ring { "uring" } else { "dev" };
    assert!(
        mounts.contains(&format!(
            "tank/home/alice/docs\t{}\t{transport}",
            docs.display()
        )),
        "{mounts}"
    );
    t.run(&["unmount", "tank/home"]).success();
    assert!(!is_mounted(&docs) && !is_mounted(&alt.join("tank/home")));
    t.run(&["mount", "-a"]).success();
    assert!(is_mounted(&docs));

    // destroy: -n changes nothing; -r unmounts and destroys; space comes back.
    let used_before = t
        .run(&["list", "-H", "-p", "-o", "used", "tank"])
        .success()
        .stdout;
    let run = t.run(&["destroy", "-n", "-r", "tank/home"]).success();
    assert!(run.stdout.contains("would destroy tank/home/alice/docs"));
    assert!(is_mounted(&docs));
    t.run(&["destroy", "-r", "tank/home"]).success();
    assert!(!is_mounted(&docs));
    assert_eq!(
        listed(&t)
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        vec!["tank", "tank/hidden"]
    );
    let used_after = t
        .run(&["list", "-H", "-p", "-o", "used", "tank"])
        .success()
        .stdout;
    assert!(
        used_after.trim().parse::<u64>().unwrap() < used_before.trim().parse::<u64>().unwrap(),
        "{used_before} -> {used_after}"
    );
    t.run(&["check", "tank"]).success();
    t.run(&["pool", "export", "tank"]).success();
}

#[test]
fn dataset_misuse_gives_clear_errors_and_changes_nothing() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    // No daemon, no pools.
    t.run(&["create", "tank/a"])
        .failure(&["pool \"tank\" is not imported"]);
    assert_eq!(
        t.run(&["list"]).success().stdout,
        "NAME  USED  AVAIL  REFER  MOUNTPOINT\n"
    );
    t.create_in_altroot("tank", &[]).success();
    t.run(&["create", "tank/a"]).success();
    let before = listed(&t);
    let cases: &[(&[&str], &[&str])] = &[
        (&["create", "tank/a"], &["already exists"]),
        (&["create", "tank/x/y"], &["tank/x", "does not exist"]),
        (&["create", "other/a"], &["pool \"other\" is not imported"]),
        (&["create", "tank"], &["tarn pool create"]),
        (&["create", "tank/a b"], &["invalid"]),
        (&["create", "tank/b@snap"], &["snapshots"]),
        (
            &["create", "-o", "recordsize=3K", "tank/b"],
            &["power of two"],
        ),
        (&["create", "-o", "compression", "tank/b"], &["prop=value"]),
        (&["create", "-o", "used=5", "tank/b"], &["read-only"]),
        (
            &["create", "-o", "colour=red", "tank/b"],
            &["unknown property"],
        ),
        (&["create"], &["Usage"]),
        (&["destroy", "tank"], &["root file system", "pool destroy"]),
        (&["destroy", "tank/none"], &["does not exist"]),
        (&["destroy"], &["Usage"]),
        (&["set", "copies=9", "tank/a"], &["copies"]),
        (&["set", "copies", "tank/a"], &["prop=value"]),
        (&["set", "used=1", "tank/a"], &["read-only"]),
        (&["set", "mountpoint=relative", "tank/a"], &["absolute"]),
        (&["set", "atime=off", "tank/none"], &["does not exist"]),
        (&["inherit", "used", "tank/a"], &["read-only"]),
        (&["get", "bogus", "tank/a"], &["unknown property"]),
        (&["get", "all", "tank/none"], &["does not exist"]),
        (&["get", "all"], &["Usage"]),
        (&["list", "tank/none"], &["does not exist"]),
        (&["list", "-o", "bogus"], &["invalid field"]),
        (&["list", "-t", "volume"], &["invalid type"]),
        (&["mount", "tank/none"], &["does not exist"]),
        (&["mount", "tank/a"], &["already mounted"]),
        (&["unmount"], &["-a"]),
        (
            &["unmount", "/nowhere"],
            &["not a mounted tarn file system"],
        ),
    ];
    for (args, needles) in cases {
        let run = t.run(args);
        run.failure(needles);
    }
    assert_eq!(listed(&t), before, "nothing changed");
    // A taken mountpoint: the dataset is created but reported unmounted, as zfs does.
    let taken = t.file("altroot/tank/b");
    fs::create_dir_all(&taken).unwrap();
    fs::write(taken.join("occupied"), b"x").unwrap();
    t.run(&["create", "tank/b"]).failure(&["cannot mount"]);
    assert!(!is_mounted(&taken));
    t.run(&["check", "tank"]).success();
    t.run(&["pool", "export", "tank"]).success();
}
