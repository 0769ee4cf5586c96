//! The kernel's caches through a real mount, in this process: the writeback
//! cache (the kernel owns size and mtime of a file it caches, appends from several processes,
//! truncate, mmap, O_DIRECT, partial writes to write-only files, remounts seeing what was
//! cached), keep_cache (pages kept across opens of an unchanged file, dropped after a change)
//! and readdirplus (`ls -l` of 1000 files). Each test guards a way the writeback cache or the
//! cache flags break a file system that was written for write-through FUSE; every test ends
//! with `check` clean. Skipped (with a message) when /dev/fuse is missing.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tarn_test_support::mounted::*;
use tarn_test_support::pattern;

/// `stat` run by another process: size and mtime (seconds) as that process sees them.
fn stat_elsewhere(path: &Path) -> (u64, i64) {
    let out = sh(&format!("stat -c '%s %Y' '{}'", path.display()));
    let mut fields = out.split_whitespace();
    let size = fields.next().unwrap().parse().unwrap();
    let mtime = fields.next().unwrap().parse().unwrap();
    (size, mtime)
}

fn now_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Guards: with the writeback cache, writes sit in the kernel and the engine's size lags; a
/// getattr answered from the engine must not shrink the file for this or another process, an
/// explicit mtime set while pages are dirty must not be overwritten by their later write-back,
/// and a remount (everything from the engine) must show the same size, mtime and bytes.
#[test]
fn size_and_mtime_follow_cached_writes() {
    let Some(mut fixture) = MountedPool::new("wbsize") else {
        return;
    };
    let path = fixture.path("grown");
    let data = pattern(1, 300_000);
    let mut file = File::create(&path).unwrap();
    let before = now_seconds();
    for chunk in data.chunks(7_000) {
        file.write_all(chunk).unwrap();
    }
    // Not closed, not synced: the pages may all still be in the kernel.
    assert_eq!(fs::metadata(&path).unwrap().len(), 300_000);
    let (size, mtime) = stat_elsewhere(&path);
    assert_eq!(size, 300_000, "size seen by another process");
    assert!(mtime >= before - 1, "mtime {mtime} older than the write");
    // A listing's attributes (readdirplus) agree.
    let listing = sh(&format!("ls -l '{}'", fixture.mountpoint.display()));
    assert!(
        listing.contains(" 300000 "),
        "ls -l shows a stale size: {listing}"
    );
    // An explicit mtime while pages are dirty, then more writes.
    let status = Command::new("touch")
        .args(["-m", "-d", "@1000000000"])
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(stat_elsewhere(&path), (300_000, 1_000_000_000));
    drop(file);
    let appended = fixture.path("appended");
    fs::write(&appended, b"x").unwrap();
    let mut file = OpenOptions::new().append(true).open(&appended).unwrap();
    file.write_all(&[b'y'; 10_000]).unwrap();
    file.sync_all().unwrap();
    drop(file);
    fixture.remount();
    assert_eq!(stat_elsewhere(&path), (300_000, 1_000_000_000));
    assert_eq!(fs::read(&path).unwrap(), data);
    assert_eq!(fs::metadata(&appended).unwrap().len(), 10_001);
    fixture.finish();
}

/// Guards: truncation with dirty pages past the new end (they must not come back when written
/// back), extension with zeros, and a hole written past the end, as seen before and after a
/// remount.
#[test]
fn truncate_with_dirty_pages() {
    let Some(mut fixture) = MountedPool::new("wbtrunc") else {
        return;
    };
    let path = fixture.path("t");
    let data = pattern(2, 1 << 20);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    file.write_all(&data).unwrap();
    file.set_len(1000).unwrap();
    assert_eq!(stat_elsewhere(&path).0, 1000);
    file.set_len(5000).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), 5000);
    file.write_all_at(b"end", 10_000).unwrap();
    assert_eq!(stat_elsewhere(&path).0, 10_003);
    let mut expected = data[..1000].to_vec();
    expected.resize(10_000, 0);
    expected.extend_from_slice(b"end");
    let mut read = Vec::new();
    file.seek(SeekFrom::Start(0)).unwrap();
    file.read_to_end(&mut read).unwrap();
    assert!(read == expected, "contents after truncate and extend");
    drop(file);
    fixture.remount();
    assert_eq!(fs::metadata(&path).unwrap().len(), 10_003);
    assert!(fs::read(&path).unwrap() == expected, "after a remount");
    fixture.finish();
}

/// Guards: O_APPEND from two processes at once, each with its own descriptor. With the
/// writeback cache the kernel appends at its own size; no record may be lost or overwrite
/// another, and each process's records stay in its order.
#[test]
fn appends_from_two_processes_lose_nothing() {
    let Some(mut fixture) = MountedPool::new("wbappend") else {
        return;
    };
    let path = fixture.path("log");
    fs::write(&path, b"").unwrap();
    const RECORDS: usize = 3000;
    let script = format!(
        "import os,sys\n\
         fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n\
         for i in range({RECORDS}):\n\
         \x20   os.write(fd, ('%s %06d ' % (sys.argv[2], i) + 'x' * 20 + '\\n').encode())\n\
         os.close(fd)\n"
    );
    let children: Vec<_> = ["A", "B"]
        .iter()
        .map(|tag| {
            Command::new("python3")
                .arg("-c")
                .arg(&script)
                .arg(&path)
                .arg(tag)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let check = |text: &str| {
        let record_length = "A 000000 ".len() + 20 + 1;
        assert_eq!(text.len(), 2 * RECORDS * record_length, "bytes lost");
        for tag in ["A", "B"] {
            let numbers: Vec<usize> = text
                .lines()
                .filter(|line| line.starts_with(tag))
                .map(|line| {
                    assert_eq!(line.len(), record_length - 1, "torn record {line:?}");
                    line[2..8].parse().unwrap()
                })
                .collect();
            assert_eq!(
                numbers,
                (0..RECORDS).collect::<Vec<_>>(),
                "records of {tag}"
            );
        }
    };
    check(&fs::read_to_string(&path).unwrap());
    fixture.remount();
    check(&fs::read_to_string(&path).unwrap());
    fixture.finish();
}

/// Guards: writes through a shared mmap reach read(2) on another descriptor at once, and the
/// engine after the mapping is gone (a remount reads them from disk).
#[test]
fn mmap_writes_reach_read_and_the_engine() {
    let Some(mut fixture) = MountedPool::new("wbmmap") else {
        return;
    };
    let path = fixture.path("mapped");
    const LENGTH: usize = 256 << 10;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    file.set_len(LENGTH as u64).unwrap();
    let data = pattern(3, LENGTH);
    // SAFETY: a shared mapping of LENGTH bytes of a file of that size, unmapped below.
    unsafe {
        use std::os::fd::AsRawFd;
        let map = libc::mmap(
            std::ptr::null_mut(),
            LENGTH,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(map, libc::MAP_FAILED);
        std::ptr::copy_nonoverlapping(data.as_ptr(), map as *mut u8, LENGTH);
        let mut seen = vec![0u8; LENGTH];
        File::open(&path).unwrap().read_exact(&mut seen).unwrap();
        assert!(seen == data, "read(2) does not see the mmap writes");
        assert_eq!(libc::munmap(map, LENGTH), 0);
    }
    drop(file);
    fixture.remount();
    assert!(fs::read(&path).unwrap() == data, "mmap writes lost");
    fixture.finish();
}

/// Guards: an O_DIRECT descriptor beside the page cache (writes through it are read by a
/// buffered reader, and the other way round), and a partial-page write through a write-only
/// descriptor to a file its owner may not read (the kernel reads the page to fill it).
#[test]
fn direct_io_and_write_only_files() {
    let Some(mut fixture) = MountedPool::new("wbdirect") else {
        return;
    };
    let path = fixture.path("direct");
    fs::write(&path, pattern(4, 16384)).unwrap();
    let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
    // SAFETY: an aligned buffer of 4096 bytes, freed below.
    let buffer = unsafe { std::alloc::alloc_zeroed(layout) };
    let block = unsafe { std::slice::from_raw_parts_mut(buffer, 4096) };
    block.copy_from_slice(&pattern(5, 4096));
    let direct = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    direct.write_all_at(block, 4096).unwrap();
    let buffered = fs::read(&path).unwrap();
    assert!(buffered[4096..8192] == *block, "O_DIRECT write not seen");
    let mut through_cache = OpenOptions::new().write(true).open(&path).unwrap();
    through_cache.seek(SeekFrom::Start(8192)).unwrap();
    through_cache.write_all(&[7u8; 4096]).unwrap();
    drop(through_cache);
    direct.read_exact_at(block, 8192).unwrap();
    assert!(
        block.iter().all(|&b| b == 7),
        "O_DIRECT read missed a write"
    );
    drop(direct);
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(buffer, layout) };

    let secret = fixture.path("write-only");
    fs::write(&secret, b"0123456789").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o200)).unwrap();
    let mut file = OpenOptions::new().write(true).open(&secret).unwrap();
    file.seek(SeekFrom::Start(3)).unwrap();
    file.write_all(b"abc").unwrap();
    drop(file);
    fixture.remount();
    assert_eq!(fs::read(&secret).unwrap(), b"012abc6789");
    assert_eq!(fs::metadata(&secret).unwrap().mode() & 0o777, 0o200);
    fixture.finish();
}

/// Pages of `path` the kernel has cached, by `fincore` (another process, which opens the file
/// through the mount: an open that may drop the pages is the thing measured).
fn cached_pages(path: &Path) -> u64 {
    sh(&format!("fincore -n -b -o RES '{}'", path.display()))
        .trim()
        .parse()
        .unwrap()
}

/// Guards keep_cache: an unchanged file's pages survive a new open (a re-read is no round
/// trip), and once the engine's version of the file moved, the next open drops them (the rule
/// that keeps a change made behind the kernel's back from being read from old pages).
#[test]
fn pages_kept_only_for_unchanged_files() {
    let Some(fixture) = MountedPool::new("keepcache") else {
        return;
    };
    if !tarn_test_support::requires(&[tarn_test_support::Requirement::Tool("fincore")]) {
        return;
    }
    let path = fixture.path("kept");
    fs::write(&path, pattern(6, 1 << 20)).unwrap();
    // The first opens after the write see a new version: the kernel drops and re-reads.
    assert_eq!(fs::read(&path).unwrap().len(), 1 << 20);
    assert_eq!(fs::read(&path).unwrap().len(), 1 << 20);
    let kept = cached_pages(&path);
    assert!(kept >= 1 << 20, "an unchanged file lost its pages: {kept}");
    // A change (through the mount, so the engine's version moves) drops them at the next open.
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(b"changed", 100).unwrap();
    file.sync_all().unwrap();
    drop(file);
    let after_change = cached_pages(&path);
    assert!(
        after_change < kept,
        "pages kept after a change: {after_change} of {kept}"
    );
    let data = fs::read(&path).unwrap();
    assert_eq!(&data[100..107], b"changed");
    fixture.finish();
}

/// Guards readdirplus: `ls -l` of 1000 files gives each its own size (entries carry
/// attributes; a mix-up of entries and attributes, or a stale size, shows), again after the
/// sizes change, and after a remount; and the kernel's cached listing follows a rename.
#[test]
fn listing_a_thousand_files_with_attributes() {
    let Some(mut fixture) = MountedPool::new("readdirplus") else {
        return;
    };
    let dir = fixture.path("many");
    fs::create_dir(&dir).unwrap();
    for index in 0..1000u64 {
        fs::write(dir.join(format!("f{index:04}")), vec![b'a'; index as usize]).unwrap();
    }
    let expect = |grow: u64| {
        let listing = sh(&format!("ls -ln '{}'", dir.display()));
        let mut seen = 0;
        for line in listing.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let name = fields[fields.len() - 1];
            let size: u64 = fields[4].parse().unwrap();
            let index: u64 = name[1..].parse().unwrap();
            assert_eq!(size, index + grow, "{line}");
            seen += 1;
        }
        assert_eq!(seen, 1000);
    };
    expect(0);
    for index in 0..1000u64 {
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.join(format!("f{index:04}")))
            .unwrap();
        file.write_all(b"0123456789").unwrap();
    }
    expect(10);
    // The kernel keeps the listing (FOPEN_CACHE_DIR); a change through the mount drops it.
    let names = |dir: &Path| {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    fs::rename(dir.join("f0000"), dir.join("g0000")).unwrap();
    let listed = names(&dir);
    assert!(listed.contains(&"g0000".to_string()) && !listed.contains(&"f0000".to_string()));
    fs::rename(dir.join("g0000"), dir.join("f0000")).unwrap();
    assert_eq!(names(&dir).len(), 1000);
    assert!(names(&dir).contains(&"f0000".to_string()));
    // Entries and attributes served again after they expire from the kernel (a second listing
    // within the TTL is served from the kernel's cache).
    std::thread::sleep(Duration::from_millis(10));
    fixture.remount();
    expect(10);
    let size = fs::metadata(dir.join("f0999")).unwrap().size();
    assert_eq!(size, 1009);
    fixture.finish();
}

/// Guards the write-back of a freed file's times: GNU tar extracts a symlink as an empty
/// placeholder file first and replaces it at the end; the kernel later writes the unlinked
/// placeholder's times back (a setattr with ctime). The engine has freed it; an error there
/// used to surface as ENOENT from the next syncfs(2) of the mount (`sync -f`, the bench's
/// "durable").
#[test]
fn syncfs_after_tar_with_symlinks() {
    let Some(fixture) = MountedPool::new("tarlinks") else {
        return;
    };
    let source = tempfile::tempdir().unwrap();
    // Targets with `..`: tar extracts those through a placeholder (relative ones directly).
    fs::create_dir(source.path().join("d")).unwrap();
    fs::create_dir(source.path().join("l")).unwrap();
    for index in 0..20 {
        fs::write(
            source.path().join(format!("d/file{index}")),
            pattern(index, 5000),
        )
        .unwrap();
        let target = format!("../d/file{index}");
        std::os::unix::fs::symlink(target, source.path().join(format!("l/link{index}"))).unwrap();
    }
    let archive = source.path().join("../tarlinks.tar");
    sh(&format!(
        "tar -cf '{}' -C '{}' . && tar -xf '{}' -C '{}' && sync -f '{}'",
        archive.display(),
        source.path().display(),
        archive.display(),
        fixture.mountpoint.display(),
        fixture.mountpoint.display()
    ));
    let _ = fs::remove_file(&archive);
    for index in 0..20 {
        let link = fixture.path(&format!("l/link{index}"));
        let target = fs::read_link(&link).unwrap();
        assert_eq!(target.to_str(), Some(&*format!("../d/file{index}")));
        assert_eq!(fs::read(&link).unwrap(), pattern(index, 5000));
    }
    fixture.finish();
}
