//! Mounts served by the daemon, end to end through the `tarn` binary: `pool create -R` mounts
//! the root file system at ALTROOT/POOL, `-m` elsewhere and `-m none` not at all; a taken
//! mountpoint is refused before anything is created; export unmounts (EBUSY while in use,
//! unless -f); SIGTERM unmounts and exports; an fsynced file survives kill -9 of the daemon,
//! whose dead mount the re-import (without -f) detaches, and `tarn check` is clean.
//!
//! Each test has its own `TARN_SOCKET` and altroot in temporary directories; the fixture's drop
//! stops its daemon (killing it if need be) and lazily unmounts anything left under its
//! directory. Skipped with a message when /dev/fuse is missing.

use std::fs::{self, File};
use std::io::Write;

use tarn_test_support::cli::{is_mounted, CliFixture};

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

#[test]
fn create_mounts_and_export_unmounts() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let mnt = t.file("altroot/tank");
    t.create_in_altroot("tank", &[]).success();
    assert!(is_mounted(&mnt), "{} is not mounted", mnt.display());
    let entry = tarn_fuse::mountpoint::mount_at(&mnt).unwrap();
    assert_eq!(entry.source, "tarn:tank");
    fs::write(mnt.join("hello"), b"world").unwrap();
    // A taken mountpoint and a non-empty directory are refused; nothing is created.
    let other = t.file("taken");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("x"), b"x").unwrap();
    let other_text = other.display().to_string();
    // (-m is under the altroot when -R is given, as in ZFS.)
    t.run(&[
        "pool",
        "create",
        "-s",
        "256M",
        "-m",
        &other_text,
        "other",
        &t.path("other.img"),
    ])
    .failure(&["not empty"]);
    assert!(
        !t.file("other.img").exists(),
        "refused create made its vdev"
    );
    let mnt_text = mnt.display().to_string();
    t.run(&[
        "pool",
        "create",
        "-s",
        "256M",
        "-m",
        &mnt_text,
        "other",
        &t.path("other.img"),
    ])
    .failure(&["already a mountpoint"]);
    t.run(&["pool", "create", "-m", "relative", "other", "x.img"])
        .failure(&["absolute"]);
    // -m none: imported, not mounted.
    t.create_in_altroot("quiet", &["-m", "none"]).success();
    assert!(!t.file("altroot/quiet").exists());
    // Export while a file is open: EBUSY without -f, and still mounted and served.
    let open = File::open(mnt.join("hello")).unwrap();
    t.run(&["pool", "export", "tank"]).failure(&["busy", "-f"]);
    assert!(is_mounted(&mnt));
    assert_eq!(fs::read(mnt.join("hello")).unwrap(), b"world");
    drop(open);
    t.run(&["pool", "export", "tank"]).success();
    assert!(!is_mounted(&mnt));
    // Import mounts again, under the altroot given then.
    let altroot = t.altroot();
    let d = t.d();
    t.run(&["pool", "import", "-d", &d, "-R", &altroot, "tank"])
        .success();
    assert_eq!(fs::read(mnt.join("hello")).unwrap(), b"world");
    // -f unmounts lazily even while busy.
    let open = File::open(mnt.join("hello")).unwrap();
    t.run(&["pool", "export", "-f", "tank"]).success();
    assert!(!is_mounted(&mnt));
    drop(open);
    t.run(&["pool", "export", "quiet"]).success();
}

#[test]
fn fsynced_data_survives_kill_9_and_reimport_detaches_the_dead_mount() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let mnt = t.file("altroot/crash");
    t.create_in_altroot("crash", &[]).success();
    let pid = t.daemon_pid().expect("daemon pid");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut file = File::create(mnt.join("durable")).unwrap();
    file.write_all(&data).unwrap();
    file.sync_all().unwrap();
    drop(file);
    fs::create_dir(mnt.join("dir")).unwrap();
    fs::write(mnt.join("dir/small"), b"small").unwrap();
    File::open(mnt.join("dir")).unwrap().sync_all().unwrap();
    File::open(mnt.join("dir/small"))
        .unwrap()
        .sync_all()
        .unwrap();
    // SAFETY: kills the daemon this fixture started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    t.wait_daemon_gone(pid);
    assert!(is_mounted(&mnt), "the dead mount stays until cleaned up");
    assert!(tarn_fuse::mountpoint::is_dead_fuse_mount(&mnt));
    let altroot = t.altroot();
    let d = t.d();
    t.run(&["pool", "import", "-d", &d, "-R", &altroot, "crash"])
        .success();
    assert!(!tarn_fuse::mountpoint::is_dead_fuse_mount(&mnt));
    assert_eq!(fs::read(mnt.join("durable")).unwrap(), data);
    assert_eq!(fs::read(mnt.join("dir/small")).unwrap(), b"small");
    t.run(&["check", "crash"]).success();
    t.run(&["pool", "export", "crash"]).success();
    assert!(!is_mounted(&mnt));
}

#[test]
fn sigterm_unmounts_and_exports() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let mnt = t.file("altroot/term");
    t.create_in_altroot("term", &[]).success();
    fs::write(mnt.join("f"), b"data").unwrap();
    let pid = t.daemon_pid().expect("daemon pid");
    // SAFETY: signals the daemon this fixture started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    t.wait_daemon_gone(pid);
    assert!(!is_mounted(&mnt));
    let d = t.d();
    let listing = t.run(&["pool", "import", "-d", &d]).success();
    assert!(
        listing.stdout.contains("pool: term")
            && listing.stdout.contains("state: ONLINE")
            && !listing.stdout.contains("not exported"),
        "{listing}"
    );
}

/// The daemon's resident memory, in bytes.
fn resident_bytes(pid: i32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

#[test]
fn a_mount_costs_the_daemon_little_memory() {
    // Each mount's worker threads allocate a zeroed 16 MiB request buffer (fuser). Zeroed
    // through the direct-I/O allocator's aligned path, every page of them became resident:
    // 264 MiB per mount, and the kernel killed the daemon at 92 mounts on a 24 GiB machine.
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    t.create_in_altroot("tank", &[]).success();
    let pid = t.daemon_pid().expect("the daemon runs");
    let before = resident_bytes(pid);
    const MOUNTS: u64 = 6;
    for index in 0..MOUNTS {
        t.run(&["create", &format!("tank/fs{index}")]).success();
        assert!(is_mounted(&t.file(&format!("altroot/tank/fs{index}"))));
    }
    let per_mount = resident_bytes(pid).saturating_sub(before) / MOUNTS;
    assert!(
        per_mount < 16 << 20,
        "each mount made {} MiB of the daemon resident",
        per_mount >> 20
    );
    t.run(&["pool", "export", "tank"]).success();
}
