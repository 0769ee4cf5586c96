//! The FUSE adapter through a real mount, in this process: std::fs and everyday tools (cp -a,
//! diff -r, tar, touch -d, df, truncate) against a pool on sparse files; errno mapping;
//! unlink while open; fsync waits for the sync; unmount is refused while busy and works
//! lazily. Every test ends with `check` clean. Skipped (with a message) when /dev/fuse is
//! missing.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use tarn_test_support::mounted::*;
use tarn_test_support::pattern;

/// READ answers are written from the engine's blocks as they lie, a slice per block; a file
/// of 512-byte records needs more slices for a large read than one `writev` takes (1024), and
/// such answers are gathered into one buffer instead. Both kinds read back exactly, after a
/// remount (nothing from the kernel's page cache) and after an export and import (every block
/// from the disk).
#[test]
fn reads_answered_from_many_small_blocks() {
    let Some(mut fixture) = MountedPool::new("pieces") else {
        return;
    };
    fixture
        .pool()
        .set_property("pieces", "recordsize", Some("512"))
        .unwrap();
    fixture.remount();
    let small = pattern(7, (3 << 20) + 777);
    fs::write(fixture.path("small-records"), &small).unwrap();
    fixture
        .pool()
        .set_property("pieces", "recordsize", Some("128K"))
        .unwrap();
    fixture.remount();
    let large = pattern(8, (5 << 20) + 99);
    fs::write(fixture.path("large-records"), &large).unwrap();
    for round in 0..2 {
        if round == 0 {
            fixture.remount();
        } else {
            fixture.reimport();
        }
        assert_eq!(fs::read(fixture.path("small-records")).unwrap(), small);
        assert_eq!(fs::read(fixture.path("large-records")).unwrap(), large);
        // A read at an offset inside a block, across many blocks.
        let mut file = File::open(fixture.path("small-records")).unwrap();
        file.seek(SeekFrom::Start(1_000_001)).unwrap();
        let mut buffer = vec![0u8; 1 << 20];
        file.read_exact(&mut buffer).unwrap();
        assert_eq!(buffer, small[1_000_001..1_000_001 + (1 << 20)]);
    }
    fixture.finish();
}

#[test]
fn files_of_many_sizes_and_sparse_files() {
    let Some(fixture) = MountedPool::new("sizes") else {
        return;
    };
    for (index, length) in [0usize, 1, 4095, 4096, 131_073, (1 << 20) + 13, 3 << 20]
        .into_iter()
        .enumerate()
    {
        let path = fixture.path(&format!("f{index}"));
        let data = pattern(index as u64, length);
        fs::write(&path, &data).unwrap();
        assert_eq!(fs::read(&path).unwrap(), data, "file of {length} bytes");
        assert_eq!(fs::metadata(&path).unwrap().len(), length as u64);
    }
    // Sparse: a seek past the end leaves a hole of zeros.
    let path = fixture.path("sparse");
    let mut file = File::create(&path).unwrap();
    file.write_all(b"head").unwrap();
    file.seek(SeekFrom::Start(10 << 20)).unwrap();
    file.write_all(b"tail").unwrap();
    drop(file);
    let data = fs::read(&path).unwrap();
    assert_eq!(data.len(), (10 << 20) + 4);
    assert_eq!(&data[..4], b"head");
    assert!(data[4..10 << 20].iter().all(|&b| b == 0));
    assert_eq!(&data[10 << 20..], b"tail");
    // Overwrite in the middle and read back with an offset.
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    file.seek(SeekFrom::Start(5 << 20)).unwrap();
    file.write_all(b"middle").unwrap();
    file.seek(SeekFrom::Start((5 << 20) - 2)).unwrap();
    let mut buffer = [0u8; 10];
    file.read_exact(&mut buffer).unwrap();
    assert_eq!(&buffer, b"\0\0middle\0\0");
    drop(file);
    // Truncate down and up: zeros beyond the old end.
    sh(&format!("truncate -s 3 {}", path.display()));
    assert_eq!(fs::read(&path).unwrap(), b"hea");
    sh(&format!("truncate -s 8 {}", path.display()));
    assert_eq!(fs::read(&path).unwrap(), b"hea\0\0\0\0\0");
    fixture.finish();
}

#[test]
fn namespace_operations_and_errno() {
    let Some(fixture) = MountedPool::new("names") else {
        return;
    };
    let root = fixture.path("");
    fs::create_dir(fixture.path("d")).unwrap();
    fs::create_dir_all(fixture.path("d/e/f")).unwrap();
    fs::write(fixture.path("d/file"), b"contents").unwrap();
    let mut names: Vec<String> = fs::read_dir(fixture.path("d"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["e", "file"]);
    assert_eq!(fs::metadata(fixture.path("d")).unwrap().nlink(), 3);
    // rename within and across directories, replacing a target
    fs::rename(fixture.path("d/file"), fixture.path("d/e/moved")).unwrap();
    fs::write(fixture.path("other"), b"other").unwrap();
    fs::rename(fixture.path("other"), fixture.path("d/e/moved")).unwrap();
    assert_eq!(fs::read(fixture.path("d/e/moved")).unwrap(), b"other");
    assert!(!fixture.path("other").exists());
    // symlink and hard link
    std::os::unix::fs::symlink("d/e/moved", fixture.path("link")).unwrap();
    assert_eq!(
        fs::read_link(fixture.path("link")).unwrap(),
        Path::new("d/e/moved")
    );
    assert_eq!(fs::read(fixture.path("link")).unwrap(), b"other");
    fs::hard_link(fixture.path("d/e/moved"), fixture.path("hard")).unwrap();
    assert_eq!(fs::metadata(fixture.path("hard")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(fixture.path("hard")).unwrap().ino(),
        fs::metadata(fixture.path("d/e/moved")).unwrap().ino()
    );
    // chmod and the root's inode number
    fs::set_permissions(fixture.path("hard"), fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(
        fs::metadata(fixture.path("hard")).unwrap().mode() & 0o7777,
        0o640
    );
    assert_eq!(fs::metadata(&root).unwrap().ino(), 1);
    // errno
    assert_eq!(errno(fs::read(fixture.path("missing"))), libc::ENOENT);
    assert_eq!(errno(fs::create_dir(fixture.path("d"))), libc::EEXIST);
    assert_eq!(errno(fs::remove_dir(fixture.path("d"))), libc::ENOTEMPTY);
    assert_eq!(errno(fs::remove_file(fixture.path("d"))), libc::EISDIR);
    assert_eq!(errno(fs::create_dir(fixture.path("hard/x"))), libc::ENOTDIR);
    assert_eq!(
        errno(fs::rename(fixture.path("d"), fixture.path("d/e/inside"))),
        libc::EINVAL
    );
    assert_eq!(
        fs::read_dir(fixture.path("hard"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENOTDIR)
    );
    let long = "x".repeat(256);
    assert_eq!(
        errno(fs::write(fixture.path(&long), b"")),
        libc::ENAMETOOLONG
    );
    // remove everything again
    fs::remove_file(fixture.path("hard")).unwrap();
    fs::remove_file(fixture.path("link")).unwrap();
    fs::remove_file(fixture.path("d/e/moved")).unwrap();
    fs::remove_dir(fixture.path("d/e/f")).unwrap();
    fs::remove_dir(fixture.path("d/e")).unwrap();
    fs::remove_dir(fixture.path("d")).unwrap();
    assert_eq!(fs::read_dir(&root).unwrap().count(), 0);
    assert_eq!(errno(fs::remove_dir(fixture.path("d"))), libc::ENOENT);
    fixture.finish();
}

#[test]
fn unlink_while_open_keeps_the_data() {
    let Some(fixture) = MountedPool::new("unlinked") else {
        return;
    };
    let path = fixture.path("doomed");
    let data = pattern(9, 300_000);
    fs::write(&path, &data).unwrap();
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    fs::remove_file(&path).unwrap();
    assert!(!path.exists());
    let mut read_back = Vec::new();
    file.read_to_end(&mut read_back).unwrap();
    assert_eq!(read_back, data);
    file.write_all(b"more").unwrap();
    file.seek(SeekFrom::Start(data.len() as u64)).unwrap();
    let mut more = [0u8; 4];
    file.read_exact(&mut more).unwrap();
    assert_eq!(&more, b"more");
    drop(file);
    fixture.finish();
}

#[test]
fn everyday_tools() {
    let Some(fixture) = MountedPool::new("tools") else {
        return;
    };
    let source = tempfile::tempdir().unwrap();
    let tree = source.path().join("tree");
    fs::create_dir_all(tree.join("a/b/c")).unwrap();
    for (index, relative) in ["top", "a/one", "a/b/two", "a/b/c/three"]
        .iter()
        .enumerate()
    {
        fs::write(
            tree.join(relative),
            pattern(index as u64, 1000 * index * index + 7),
        )
        .unwrap();
    }
    fs::write(tree.join("a/big"), pattern(77, 2 << 20)).unwrap();
    std::os::unix::fs::symlink("b/two", tree.join("a/link")).unwrap();
    fs::hard_link(tree.join("top"), tree.join("a/top-again")).unwrap();
    fs::set_permissions(tree.join("a/one"), fs::Permissions::from_mode(0o600)).unwrap();
    let mnt = fixture.path("");
    sh(&format!("cp -a {} {}/copy", tree.display(), mnt.display()));
    sh(&format!(
        "diff -r {} {}/copy",
        tree.display(),
        mnt.display()
    ));
    assert_eq!(
        fs::metadata(fixture.path("copy/a/one")).unwrap().mode() & 0o777,
        0o600
    );
    assert_eq!(
        fs::metadata(tree.join("a/big")).unwrap().mtime(),
        fs::metadata(fixture.path("copy/a/big")).unwrap().mtime()
    );
    // tar c | tar x, both ways
    sh(&format!(
        "tar -C {} -cf - tree | tar -C {} -xf -",
        source.path().display(),
        mnt.display()
    ));
    sh(&format!(
        "diff -r {} {}/tree",
        tree.display(),
        mnt.display()
    ));
    let out = tempfile::tempdir().unwrap();
    sh(&format!(
        "tar -C {} -cf - tree | tar -C {} -xf -",
        mnt.display(),
        out.path().display()
    ));
    sh(&format!(
        "diff -r {} {}/tree",
        tree.display(),
        out.path().display()
    ));
    // touch -d sets mtime; touch alone sets it to now (UTIME_NOW)
    let file = fixture.path("tree/top");
    sh(&format!(
        "touch -d '2001-02-03 04:05:06 UTC' {}",
        file.display()
    ));
    assert_eq!(fs::metadata(&file).unwrap().mtime(), 981_173_106);
    sh(&format!("touch {}", file.display()));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((fs::metadata(&file).unwrap().mtime() - now).abs() < 10);
    // df sees the pool's size
    let df = sh(&format!(
        "df -B1 --output=source,size,avail {}",
        mnt.display()
    ));
    let line = df.lines().nth(1).expect("a df line");
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields[0], "tarn:tools", "{df}");
    let size: u64 = fields[1].parse().unwrap();
    let avail: u64 = fields[2].parse().unwrap();
    assert!(size > 256 << 20 && size <= 512 << 20, "{df}");
    assert!(avail > 0 && avail < size, "{df}");
    sh(&format!(
        "rm -rf {}/copy {}/tree",
        mnt.display(),
        mnt.display()
    ));
    assert_eq!(fs::read_dir(&mnt).unwrap().count(), 0);
    fixture.finish();
}

/// fsync of a new file commits the intent log (its create, a namespace record, and its write)
/// instead of waiting for a txg; an fsync with nothing new writes no log block.
#[test]
fn fsync_commits_the_intent_log() {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(fixture) = MountedPool::new("fsync") else {
        return;
    };
    let pool = fixture.pool.as_ref().unwrap();
    let zil = pool
        .root_objset()
        .log::<tarn::zil::Zil>()
        .expect("the mounted file system's intent log");
    let mut file = File::create(fixture.path("durable")).unwrap();
    file.write_all(&pattern(3, 100_000)).unwrap();
    let commits = zil.stats.commits.load(Relaxed);
    let namespace = zil.stats.namespace_records.load(Relaxed);
    // Copied into the log or written in place (writes of 32 KiB and more): every byte once.
    let logged = || zil.stats.write_bytes.load(Relaxed) + zil.stats.indirect_bytes.load(Relaxed);
    let write_bytes = logged();
    file.sync_all().unwrap();
    assert_eq!(zil.stats.commits.load(Relaxed), commits + 1);
    assert!(
        zil.stats.namespace_records.load(Relaxed) > namespace,
        "the create was not committed"
    );
    assert_eq!(logged(), write_bytes + 100_000);
    // Nothing new: no log block written.
    let blocks = zil.stats.blocks.load(Relaxed);
    file.sync_data().unwrap();
    assert_eq!(zil.stats.blocks.load(Relaxed), blocks);
    drop(file);
    File::open(fixture.path("")).unwrap().sync_all().unwrap();
    fixture.finish();
}

/// Guards sync=always under the writeback cache: a write(2) to a file opened while it is set
/// must be committed before it returns, not left in the kernel's page cache (the file is
/// opened for direct I/O), and a shared mapping of such a file still works.
#[test]
fn sync_always_commits_each_write_before_it_returns() {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(fixture) = MountedPool::new("syncalways") else {
        return;
    };
    let pool = fixture.pool.as_ref().unwrap();
    let zil = pool
        .root_objset()
        .log::<tarn::zil::Zil>()
        .expect("the mounted file system's intent log");
    zil.set_mode(tarn::SyncMode::Always);
    let mut file = File::create(fixture.path("always")).unwrap();
    let logged = || zil.stats.write_bytes.load(Relaxed) + zil.stats.indirect_bytes.load(Relaxed);
    let before = logged();
    for chunk in pattern(9, 64 << 10).chunks(16 << 10) {
        file.write_all(chunk).unwrap();
    }
    // No fsync, no close: each write was committed as it returned.
    assert_eq!(
        logged(),
        before + (64 << 10),
        "writes sat in the page cache"
    );
    drop(file);
    let output = sh(&format!(
        "python3 -c \"import mmap,os; f=os.open('{}', os.O_RDWR); m=mmap.mmap(f, 4096); m[0:5]=b'HELLO'; m.flush(); print(bytes(m[0:5]).decode())\"",
        fixture.path("always").display()
    ));
    assert_eq!(output.trim(), "HELLO");
    zil.set_mode(tarn::SyncMode::Standard);
    let mut expected = pattern(9, 64 << 10);
    expected[..5].copy_from_slice(b"HELLO");
    assert_eq!(fs::read(fixture.path("always")).unwrap(), expected);
    fixture.finish();
}

#[test]
fn busy_mount_refuses_plain_unmount() {
    let Some(mut fixture) = MountedPool::new("busy") else {
        return;
    };
    let file = File::create(fixture.path("open")).unwrap();
    let error = fixture
        .handle
        .as_mut()
        .unwrap()
        .unmount(false)
        .expect_err("unmount while a file is open");
    assert_eq!(error.raw_os_error(), Some(libc::EBUSY), "{error}");
    // Still served.
    assert!(fixture.path("open").exists());
    fixture
        .handle
        .as_mut()
        .unwrap()
        .unmount(true)
        .expect("lazy unmount");
    // The connection is aborted: a request (setattr) fails instead of hanging.
    assert_eq!(
        file.set_len(1).map_err(|e| e.kind()).err(),
        Some(ErrorKind::NotConnected)
    );
    drop(file);
    assert!(tarn_fuse::mountpoint::mount_at(&fixture.mountpoint).is_none());
    fixture.finish();
}

/// Guards FUSE_HANDLE_KILLPRIV_V2: the kernel leaves clearing setuid and setgid to the file
/// system, which must do it as the VFS would (a write or truncate by a caller without
/// CAP_FSETID, a chown of anything but a directory; setgid only with group execute), and the
/// kernel must not keep showing the old mode.
#[test]
fn writes_truncates_and_chowns_clear_setuid_and_setgid() {
    use std::os::unix::process::CommandExt;
    let Some(mut fixture) = MountedPool::new("killpriv") else {
        return;
    };
    // Let an unprivileged user reach the mount.
    let parent = fixture.mountpoint.parent().unwrap().to_path_buf();
    fs::set_permissions(&parent, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&fixture.mountpoint, fs::Permissions::from_mode(0o777)).unwrap();
    let as_nobody = |script: &str| {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .uid(65534)
            .gid(65534)
            .status()
            .unwrap();
        assert!(status.success(), "{script} failed as nobody");
    };
    let mode_of = |path: &Path| fs::metadata(path).unwrap().mode() & 0o7777;
    let make = |name: &str, mode: u32| {
        let path = fixture.path(name);
        fs::write(&path, b"start\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(mode_of(&path), mode);
        path
    };
    let written = make("written", 0o6777);
    as_nobody(&format!("echo more >> '{}'", written.display()));
    assert_eq!(mode_of(&written), 0o777, "a write by nobody keeps setuid");
    let sgid_only = make("sgid-no-exec", 0o2767);
    as_nobody(&format!("echo more >> '{}'", sgid_only.display()));
    assert_eq!(
        mode_of(&sgid_only),
        0o2767,
        "setgid without group execute stays"
    );
    let by_root = make("by-root", 0o6777);
    let mut file = OpenOptions::new().append(true).open(&by_root).unwrap();
    file.write_all(b"root\n").unwrap();
    file.sync_all().unwrap();
    drop(file);
    assert_eq!(mode_of(&by_root), 0o6777, "root (CAP_FSETID) keeps them");
    let truncated = make("truncated", 0o6777);
    as_nobody(&format!("truncate -s 1 '{}'", truncated.display()));
    assert_eq!(
        mode_of(&truncated),
        0o777,
        "a truncate by nobody keeps setuid"
    );
    let chowned = make("chowned", 0o6775);
    std::os::unix::fs::chown(&chowned, Some(65534), None).unwrap();
    assert_eq!(mode_of(&chowned), 0o775, "a chown keeps setuid");
    let directory = fixture.path("directory");
    fs::create_dir(&directory).unwrap();
    fs::set_permissions(&directory, fs::Permissions::from_mode(0o6777)).unwrap();
    std::os::unix::fs::chown(&directory, Some(65534), None).unwrap();
    assert_eq!(
        mode_of(&directory),
        0o6777,
        "a directory's chown keeps them"
    );
    // The engine agrees with what the kernel showed.
    fixture.remount();
    assert_eq!(mode_of(&written), 0o777);
    assert_eq!(mode_of(&sgid_only), 0o2767);
    assert_eq!(mode_of(&by_root), 0o6777);
    assert_eq!(mode_of(&truncated), 0o777);
    assert_eq!(mode_of(&chowned), 0o775);
    assert_eq!(fs::read(&written).unwrap(), b"start\nmore\n");
    fixture.finish();
}

/// A write-back that fails for want of space loses its bytes, and the file must not then grow
/// over them: the kernel still believes in its larger size, so the writer's next append (at
/// that size) would otherwise be stored past a hole that reads as zeros where the lost bytes
/// were, and a truncate up would cover them too. Here the held-back space is used up behind
/// the mount's back (write-backs into another dataset), so the mount's own write-back fails;
/// then space comes back, and the append's write-back and the truncate up are refused, and
/// the file the engine stores ends at its last stored byte.
#[test]
fn a_lost_write_back_never_leaves_a_hole() {
    use std::os::unix::fs::FileExt;
    use tarn::{FsError, WriteSource};

    let Some(fixture) = MountedPool::new("lostwb") else {
        return;
    };
    let pool = fixture.pool.as_ref().unwrap();
    let path = fixture.path("file");
    let chunk = 1usize << 20;
    let mut file = File::create(&path).unwrap();
    file.write_all(&pattern(1, 4 * chunk)).unwrap();
    file.sync_all().unwrap();
    let stored = 4 * chunk as u64;

    // Fill every byte a write-back may use, from another dataset.
    pool.create_dataset("lostwb/fill", &[], false).unwrap();
    let filler = pool.open_file_system("lostwb/fill").unwrap();
    let ino = filler
        .create(filler.root(), b"fill", 0o644, 0, 0)
        .unwrap()
        .ino;
    let write_back = WriteSource::WriteBack { after_loss: false };
    let mut filled = 0u64;
    loop {
        match filler.write_from(ino, filled, &pattern(filled, chunk), write_back) {
            Ok(length) => filled += length as u64,
            Err(FsError::NoSpace) => break,
            Err(error) => panic!("filling: {error}"),
        }
    }

    // The mount's write-backs fail. The bound: write(2) accepts at most about the kernel's
    // dirty bound for the mount (dirty_max, a 64th of this 512 MiB pool: 8 MiB) before it is
    // refused itself (the failed write-back has the kernel ask for the attributes, which are
    // refused while the pool is full); fsync reports the loss.
    let mut accepted = 0usize;
    let refused = loop {
        match file.write(&pattern(2, chunk)) {
            Ok(length) => accepted += length,
            Err(error) => break error,
        }
        assert!(
            accepted < 256 << 20,
            "write(2) accepted {accepted} bytes into a full pool"
        );
    };
    assert_eq!(refused.raw_os_error(), Some(libc::ENOSPC), "{refused}");
    assert!(
        accepted <= (8 << 20) + 2 * chunk,
        "write(2) accepted {accepted} bytes beyond the bound"
    );
    let lost = file.sync_all();
    assert!(lost.is_err(), "the write-back into a full pool was stored");

    // Space comes back; the writer appends where the kernel thinks the file ends.
    let empty = tarn::SetAttr {
        size: Some(0),
        ..Default::default()
    };
    filler.setattr(ino, empty).unwrap();
    for _ in 0..3 {
        pool.sync().unwrap();
    }
    let _ = file.write_all(&pattern(3, chunk));
    assert!(
        file.sync_all().is_err(),
        "an append past the lost bytes was stored"
    );
    let extend = file.set_len(stored + 8 * chunk as u64);
    assert!(
        extend.is_err(),
        "a truncate up over the lost bytes was allowed"
    );
    // Overwriting stored bytes is fine.
    file.write_all_at(&pattern(4, 4096), 4096).unwrap();
    file.sync_all().unwrap();
    drop(file);
    drop(filler);

    // What the engine stored, without the kernel's cache: a remount.
    let mut fixture = fixture;
    fixture.remount();
    // Some of the loop's write-backs may have found space before the rest were lost: the file
    // is the first 4 MiB and then whole chunks of the loop's data, ending where storing ended.
    let data = fs::read(&path).unwrap();
    assert!(
        data.len() >= 4 * chunk && data.len() % chunk == 0 && data.len() <= 4 * chunk + accepted,
        "stored {} bytes",
        data.len()
    );
    let mut want = pattern(1, 4 * chunk);
    want[4096..8192].copy_from_slice(&pattern(4, 4096));
    while want.len() < data.len() {
        want.extend_from_slice(&pattern(2, chunk));
    }
    if let Some(at) = (0..data.len())
        .step_by(4096)
        .find(|&at| data[at..at + 4096] != want[at..at + 4096])
    {
        let zeros = data[at..at + 4096].iter().all(|&byte| byte == 0);
        panic!(
            "stored {} bytes ({accepted} accepted); they differ from what was written at {at}{}",
            data.len(),
            if zeros { " (zeros)" } else { "" }
        );
    }
    fixture.finish();
}
