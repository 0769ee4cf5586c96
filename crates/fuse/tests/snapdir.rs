//! `.zfs/snapshot` and rollback through a real mount, in this process: snapshot
//! contents after the head's files are overwritten and deleted, EROFS and EXDEV
//! below `.zfs`, snapdir hidden and visible, inode numbers distinct between head and snapshot
//! and unchanged across a remount and an export and import, a rollback seen at once by paths
//! (a regular file held open across it goes stale: EIO), a snapshot holding writes still in
//! the kernel's writeback cache once the mount was written back, destroyed and renamed snapshots leaving `.zfs/snapshot`. The
//! snapshots are taken with the engine's calls; the snapshot source is the one the daemon uses
//! in shape (a weak reference to the pool's core). Every test ends with `check` clean. Skipped
//! (with a message) when /dev/fuse is missing.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use tarn::pool::PoolCore;
use tarn::{FileSystem, FsError, Pool, Snapshot, SnapshotInfo};
use tarn_fuse::snapdir::{SnapshotSource, SNAPSHOT_BIT};
use tarn_fuse::{mount_with_snapshots, MountHandle, MountOptions};
use tarn_test_support::mounted::{errno, sh, MountedPool};

const POOL: &str = "snaptank";

/// The daemon's source in shape: a weak reference to the pool's core.
struct Source {
    core: Weak<PoolCore>,
}

impl SnapshotSource for Source {
    fn list(&self) -> Result<Vec<SnapshotInfo>, FsError> {
        let core = self.core.upgrade().ok_or(FsError::NotFound)?;
        core.snapshots_of(POOL)
            .map_err(|error| FsError::Engine(error.to_string()))
    }

    fn open(&self, name: &str) -> Result<(SnapshotInfo, FileSystem, Arc<Snapshot>), FsError> {
        let core = self.core.upgrade().ok_or(FsError::NotFound)?;
        core.open_snapshot(&format!("{POOL}@{name}"))
            .map_err(|_| FsError::NotFound)
    }
}

/// Mount the root file system of `pool` with `.zfs/snapshot` served by a [`Source`].
fn mount_snapdir(pool: &Pool, mountpoint: &Path, name: &str) -> MountHandle {
    let fs = Arc::new(pool.file_system().expect("file system"));
    let source = Arc::new(Source {
        core: Arc::downgrade(&pool.core),
    });
    mount_with_snapshots(
        fs,
        source,
        mountpoint,
        &MountOptions::new(format!("tarn:{name}")),
    )
    .expect("mount")
}

/// The test pool, mounted with its `.zfs` directory; `None` when /dev/fuse is missing.
fn fixture() -> Option<MountedPool> {
    MountedPool::mounted_by(POOL, 256 << 20, mount_snapdir)
}

/// A path below the mount's `.zfs/snapshot`.
fn snap(t: &MountedPool, relative: &str) -> PathBuf {
    t.mountpoint.join(".zfs/snapshot").join(relative)
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn ino(path: &Path) -> u64 {
    fs::symlink_metadata(path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        .ino()
}

fn snapshot(pool: &Pool, name: &str) {
    pool.create_snapshots(&[format!("{POOL}@{name}")], false)
        .unwrap();
}

#[test]
fn snapshot_directory_shows_old_contents_read_only() {
    let Some(t) = fixture() else { return };
    fs::write(t.path("a"), b"first").unwrap();
    fs::create_dir(t.path("d")).unwrap();
    fs::write(t.path("d/b"), vec![7u8; 300_000]).unwrap();
    std::os::unix::fs::symlink("a", t.path("link")).unwrap();
    snapshot(t.pool(), "s1");

    // The head changes: overwrite, truncate, delete, create.
    fs::write(t.path("a"), b"second, longer").unwrap();
    fs::remove_file(t.path("d/b")).unwrap();
    fs::remove_dir(t.path("d")).unwrap();
    fs::write(t.path("c"), b"new").unwrap();

    // `.zfs` is there for a lookup, not in the listing (snapdir=hidden).
    assert!(fs::metadata(t.path(".zfs")).unwrap().is_dir());
    assert!(!names(&t.mountpoint).contains(&".zfs".to_string()));
    assert_eq!(names(&t.path(".zfs")), vec!["snapshot"]);
    assert_eq!(names(&t.path(".zfs/snapshot")), vec!["s1"]);
    assert_eq!(names(&snap(&t, "s1")), vec!["a", "d", "link"]);
    assert_eq!(fs::read(snap(&t, "s1/a")).unwrap(), b"first");
    assert_eq!(fs::read(snap(&t, "s1/d/b")).unwrap(), vec![7u8; 300_000]);
    assert_eq!(
        fs::read_link(snap(&t, "s1/link")).unwrap(),
        PathBuf::from("a")
    );
    assert_eq!(fs::read(t.path("a")).unwrap(), b"second, longer");
    assert_eq!(errno(fs::metadata(snap(&t, "s1/c"))), libc::ENOENT);
    assert_eq!(errno(fs::metadata(snap(&t, "nonesuch"))), libc::ENOENT);
    assert_eq!(errno(fs::metadata(t.path(".zfs/other"))), libc::ENOENT);
    // `..` climbs back out.
    assert_eq!(ino(&snap(&t, "s1/..")), ino(&t.path(".zfs/snapshot")));
    assert_eq!(ino(&t.path(".zfs/snapshot/..")), ino(&t.path(".zfs")));
    assert_eq!(ino(&t.path(".zfs/..")), ino(&t.mountpoint));
    let listing = sh(&format!("cd {} && ls -a .. ", snap(&t, "s1").display()));
    assert!(listing.contains("s1"), "{listing}");

    // Every change below `.zfs` is refused.
    assert_eq!(errno(File::create(snap(&t, "s1/new"))), libc::EROFS);
    assert_eq!(
        errno(OpenOptions::new().write(true).open(snap(&t, "s1/a"))),
        libc::EROFS
    );
    assert_eq!(
        errno(
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(snap(&t, "s1/a"))
        ),
        libc::EROFS
    );
    assert_eq!(errno(fs::remove_file(snap(&t, "s1/a"))), libc::EROFS);
    assert_eq!(errno(fs::create_dir(snap(&t, "s1/x"))), libc::EROFS);
    assert_eq!(
        errno(fs::create_dir(t.path(".zfs/snapshot/x"))),
        libc::EROFS
    );
    assert_eq!(errno(fs::remove_dir(snap(&t, "s1/d"))), libc::EROFS);
    assert_eq!(
        errno(fs::set_permissions(
            snap(&t, "s1/a"),
            fs::Permissions::from_mode(0o600)
        )),
        libc::EROFS
    );
    assert_eq!(
        errno(fs::rename(snap(&t, "s1/a"), snap(&t, "s1/a2"))),
        libc::EROFS
    );
    assert_eq!(
        errno(fs::rename(t.path("c"), snap(&t, "s1/c"))),
        libc::EXDEV
    );
    assert_eq!(
        errno(fs::rename(snap(&t, "s1/a"), t.path("a3"))),
        libc::EXDEV
    );
    assert_eq!(
        errno(fs::hard_link(snap(&t, "s1/a"), t.path("a4"))),
        libc::EXDEV
    );
    // `.zfs` itself cannot be made, replaced or removed.
    assert_eq!(errno(fs::create_dir(t.path(".zfs"))), libc::EEXIST);
    assert_eq!(errno(File::create_new(t.path(".zfs"))), libc::EEXIST);
    assert_eq!(errno(fs::remove_dir(t.path(".zfs"))), libc::EROFS);
    // (A file over it is refused by the kernel itself: EISDIR.)
    assert_eq!(errno(fs::rename(t.path("c"), t.path(".zfs"))), libc::EISDIR);
    fs::create_dir(t.path("e")).unwrap();
    assert_eq!(errno(fs::rename(t.path("e"), t.path(".zfs"))), libc::EROFS);
    assert_eq!(errno(fs::rename(t.path(".zfs"), t.path("e"))), libc::EROFS);
    fs::remove_dir(t.path("e")).unwrap();
    // Reading a snapshot's file through a held handle, with seeks.
    let mut file = File::open(snap(&t, "s1/d/b")).unwrap();
    file.seek(SeekFrom::Start(299_990)).unwrap();
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).unwrap();
    assert_eq!(tail, vec![7u8; 10]);
    drop(file);

    // snapdir=visible lists `.zfs` after the root's `..`, at once; hidden again hides it.
    let control = t.control();
    control.set_snapdir_visible(true);
    assert_eq!(names(&t.mountpoint), vec![".zfs", "a", "c", "link"]);
    let listing = sh(&format!("ls -a {}", t.mountpoint.display()));
    assert!(listing.lines().any(|line| line == ".zfs"), "{listing}");
    control.set_snapdir_visible(false);
    let listing = sh(&format!("ls -a {}", t.mountpoint.display()));
    assert!(!listing.lines().any(|line| line == ".zfs"), "{listing}");
    t.finish();
}

#[test]
fn inode_numbers_are_distinct_and_stable() {
    let Some(mut t) = fixture() else { return };
    fs::write(t.path("a"), b"x").unwrap();
    fs::create_dir(t.path("d")).unwrap();
    fs::write(t.path("d/b"), b"y").unwrap();
    snapshot(t.pool(), "s1");
    fs::write(t.path("a"), b"changed").unwrap();
    snapshot(t.pool(), "s2");
    let paths = [
        "a",
        "d",
        "d/b",
        ".zfs",
        ".zfs/snapshot",
        ".zfs/snapshot/s1",
        ".zfs/snapshot/s1/a",
        ".zfs/snapshot/s1/d",
        ".zfs/snapshot/s1/d/b",
        ".zfs/snapshot/s2",
        ".zfs/snapshot/s2/a",
        ".zfs/snapshot/s2/d/b",
    ];
    let before: Vec<u64> = paths.iter().map(|path| ino(&t.path(path))).collect();
    let mut distinct = before.clone();
    distinct.push(ino(&t.mountpoint));
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), paths.len() + 1, "{paths:?}: {before:?}");
    for (path, number) in paths.iter().zip(&before) {
        assert_eq!(
            path.starts_with(".zfs"),
            number & SNAPSHOT_BIT != 0,
            "{path}: {number:#x}"
        );
    }
    // What `stat -c %i` says is what the test saw.
    let stat = sh(&format!("stat -c %i {}", snap(&t, "s1/a").display()));
    assert_eq!(stat.trim(), before[6].to_string());
    // The same after a remount, and after an export and import.
    t.unmount();
    t.mount();
    let remounted: Vec<u64> = paths.iter().map(|path| ino(&t.path(path))).collect();
    assert_eq!(remounted, before);
    t.reimport();
    let reimported: Vec<u64> = paths.iter().map(|path| ino(&t.path(path))).collect();
    assert_eq!(reimported, before);
    assert_eq!(fs::read(snap(&t, "s1/a")).unwrap(), b"x");
    assert_eq!(fs::read(snap(&t, "s2/a")).unwrap(), b"changed");
    t.finish();
}

#[test]
fn rollback_shows_the_snapshot_at_once() {
    let Some(t) = fixture() else { return };
    fs::write(t.path("a"), b"before").unwrap();
    fs::create_dir(t.path("d")).unwrap();
    fs::write(t.path("d/b"), b"kept").unwrap();
    snapshot(t.pool(), "s1");
    fs::write(t.path("a"), b"after the snapshot").unwrap();
    fs::remove_file(t.path("d/b")).unwrap();
    // Enough files that `c` lands past the snapshot's last dnode block, whose object numbers
    // the head hands out again after the rollback.
    for index in 0..80 {
        fs::write(t.path(&format!("f{index}")), b"filler").unwrap();
    }
    fs::write(t.path("c"), b"new").unwrap();
    let c_ino = ino(&t.path("c"));
    // The kernel caches all of this (attributes and entries for 1 s, pages until told).
    let mut held = File::open(t.path("a")).unwrap();
    let mut text = String::new();
    held.read_to_string(&mut text).unwrap();
    assert_eq!(text, "after the snapshot");
    let mut held_new = File::open(t.path("c")).unwrap();
    assert!(t.path("c").exists());
    assert_eq!(errno(fs::metadata(t.path("d/b"))), libc::ENOENT);
    let map = sh(&format!(
        "stat -c %s {} && cat {}",
        t.path("a").display(),
        t.path("a").display()
    ));
    assert!(map.contains("18"), "{map}");

    let destroyed = t.pool().rollback(&format!("{POOL}@s1"), false).unwrap();
    assert!(destroyed.is_empty());
    let done = t.control().rolled_back().unwrap();
    assert!(done.notifications > 0, "{done:?}");

    // Paths show the snapshot's state at once (well within the 1 s TTL).
    assert_eq!(fs::read(t.path("a")).unwrap(), b"before");
    assert_eq!(fs::metadata(t.path("a")).unwrap().len(), 6);
    assert_eq!(fs::read(t.path("d/b")).unwrap(), b"kept");
    assert_eq!(errno(fs::metadata(t.path("c"))), libc::ENOENT);
    assert_eq!(names(&t.mountpoint), vec!["a", "d"]);
    assert_eq!(errno(fs::metadata(t.path("f0"))), libc::ENOENT);
    // A regular file held open across the rollback went stale once its name was looked up
    // again (a new generation: the kernel's inode kept the old size, 18, which it would never
    // take from the engine under the writeback cache); one that did not exist in the
    // snapshot is gone.
    held.seek(SeekFrom::Start(0)).unwrap();
    text.clear();
    let stale = held.read_to_string(&mut text);
    assert_eq!(
        stale.map_err(|error| error.raw_os_error()),
        Err(Some(libc::EIO)),
        "{text:?}"
    );
    let mut buffer = [0u8; 4];
    assert_eq!(
        held_new.read(&mut buffer).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // Files created now get the gone files' object numbers again, with new generations: the
    // kernel then marks the old inode bad, and the held handle never reads the new file.
    let mut created = 0;
    while created < 200 {
        let path = t.path(&format!("n{created}"));
        fs::write(&path, b"NEW!").unwrap();
        created += 1;
        if ino(&path) == c_ino {
            break;
        }
    }
    assert!(created < 200, "object {c_ino} was not handed out again");
    held_new.seek(SeekFrom::Start(0)).unwrap();
    let reread = held_new.read(&mut buffer);
    assert!(
        reread.is_err(),
        "read the reused inode: {reread:?} {buffer:?}"
    );
    drop(held_new);
    for index in 0..created {
        fs::remove_file(t.path(&format!("n{index}"))).unwrap();
    }
    // The head works on: writes after the rollback land, and a new open sees them.
    drop(held);
    fs::write(t.path("a"), b"third").unwrap();
    assert_eq!(fs::read(t.path("a")).unwrap(), b"third");
    let mut file = OpenOptions::new().append(true).open(t.path("d/b")).unwrap();
    file.write_all(b" and more").unwrap();
    drop(file);
    assert_eq!(fs::read(t.path("d/b")).unwrap(), b"kept and more");
    assert_eq!(fs::read(snap(&t, "s1/d/b")).unwrap(), b"kept");
    t.finish();
}

/// Guards the daemon's write-back before a snapshot: with the writeback cache, a write(2) that
/// returned may still be a dirty page in the kernel; `MountControl::write_back` must get it to
/// the engine, so the snapshot taken next holds it (the file is still open, never closed or
/// synced).
#[test]
fn snapshot_after_write_back_holds_unclosed_writes() {
    let Some(t) = fixture() else { return };
    let mut file = File::create(t.path("open")).unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    file.write_all(&data).unwrap();
    t.control().write_back().unwrap();
    snapshot(t.pool(), "s1");
    file.write_all(b"later").unwrap();
    assert!(
        fs::read(snap(&t, "s1/open")).unwrap() == data,
        "snapshot lacks the writes"
    );
    drop(file);
    t.finish();
}

#[test]
fn destroyed_and_renamed_snapshots_leave_the_directory() {
    let Some(t) = fixture() else { return };
    fs::write(t.path("a"), b"one").unwrap();
    snapshot(t.pool(), "s1");
    fs::write(t.path("a"), b"two").unwrap();
    snapshot(t.pool(), "s2");
    assert_eq!(names(&t.path(".zfs/snapshot")), vec!["s1", "s2"]);
    let s2_ino = ino(&snap(&t, "s2/a"));
    let s1_root = ino(&snap(&t, "s1"));
    let mut held = File::open(snap(&t, "s1/a")).unwrap();
    assert_eq!(t.control().open_snapshots().len(), 2);

    // Rename: the old name goes, the new one has the same inodes and contents.
    t.pool()
        .rename_snapshot(&format!("{POOL}@s2"), "renamed")
        .unwrap();
    let done = t.control().snapshots_changed().unwrap();
    assert_eq!(done.snapshots_dropped, 0);
    assert_eq!(errno(fs::metadata(snap(&t, "s2"))), libc::ENOENT);
    assert_eq!(names(&t.path(".zfs/snapshot")), vec!["renamed", "s1"]);
    assert_eq!(ino(&snap(&t, "renamed/a")), s2_ino);
    assert_eq!(fs::read(snap(&t, "renamed/a")).unwrap(), b"two");

    // Destroy: the held file's inode is stale at once, before the daemon's hook runs (the
    // destroy marks the snapshot before freeing anything), never read; the name goes too.
    t.pool()
        .destroy_snapshots(&format!("{POOL}@s1"), false)
        .unwrap();
    let mut buffer = [0u8; 3];
    assert_eq!(
        held.read(&mut buffer).unwrap_err().raw_os_error(),
        Some(libc::ESTALE)
    );
    assert_eq!(errno(fs::metadata(snap(&t, "s1/a"))), libc::ENOENT);
    let done = t.control().snapshots_changed().unwrap();
    // (Already dropped when the request above found it destroyed.)
    assert_eq!(done.snapshots_dropped, 0);
    assert_eq!(errno(fs::metadata(snap(&t, "s1"))), libc::ENOENT);
    assert_eq!(errno(fs::metadata(snap(&t, "s1/a"))), libc::ENOENT);
    assert_eq!(names(&t.path(".zfs/snapshot")), vec!["renamed"]);
    held.seek(SeekFrom::Start(0)).unwrap();
    assert_eq!(
        held.read(&mut buffer).unwrap_err().raw_os_error(),
        Some(libc::ESTALE)
    );
    drop(held);
    assert_ne!(ino(&snap(&t, "renamed")), s1_root);
    assert_eq!(t.control().open_snapshots().len(), 1);
    t.finish();
}
