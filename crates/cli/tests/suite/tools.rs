//! Real tools on a tarn mount: `cp -a`, `rsync`, `tar`, `git`, `sqlite3`, `fio`, a
//! `MAP_SHARED` writer, and a directory of 100 000 entries created, listed and removed through
//! FUSE. Each test makes its own pool on a sparse file, served by its own daemon
//! (`TARN_SOCKET` and altroot in temporary directories), runs the tool, verifies the result
//! with something other than tarn, exports and re-imports the pool, verifies again, and ends
//! with `tarn check` clean.
//!
//! A missing tool fails its test with a message (scripts/install-deps.sh installs them all);
//! only a missing /dev/fuse skips. Run with
//! `cargo test -p tarn-cli --test suite tools:: -- --test-threads=2 --nocapture` to see the timings.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use tarn_test_support::cli::CliFixture;

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

#[path = "support/tools_support.rs"]
mod tools_support;
use tools_support::*;

// ---------------------------------------------------------------------------------------------
// Copying trees.

#[test]
fn cp_a_copies_a_tree_in_and_out_exactly() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let mnt = create_mounted(&t, "cp", "1G");
    let source = t.file("source");
    make_source_tree(&source);
    let started = Instant::now();
    Tool::new("cp", t.dir.path())
        .arg("-a")
        .arg(&source)
        .arg(mnt.join("copy"))
        .success();
    eprintln!("cp -a into the mount: {:?}", started.elapsed());
    assert_same_tree(&source, &mnt.join("copy"), Times::Nanoseconds);
    // And back out again: what the mount serves is what was put in.
    Tool::new("cp", t.dir.path())
        .arg("-a")
        .arg(mnt.join("copy"))
        .arg(t.file("back"))
        .success();
    assert_same_tree(&source, &t.file("back"), Times::Nanoseconds);
    export_import(&t, "cp");
    assert_same_tree(&source, &mnt.join("copy"), Times::Nanoseconds);
    t.check_imported_clean("cp");
}

/// `rsync -a --checksum --dry-run --itemize-changes` from `source` to `dest`: what rsync
/// would still change (nothing, when the copy is faithful).
fn rsync_pending(source: &Path, dest: &Path) -> String {
    Tool::new("rsync", source)
        .args([
            "-aH",
            "--delete",
            "--checksum",
            "--dry-run",
            "--itemize-changes",
        ])
        .arg(with_slash(source))
        .arg(with_slash(dest))
        .success()
}

fn with_slash(path: &Path) -> OsString {
    let mut text = path.as_os_str().to_owned();
    text.push("/");
    text
}

/// Wait until the clock is in a later second than the source tree's last change. rsync sets
/// a copied file's or directory's mtime only if the mtime it reads back differs in whole
/// seconds from the source's (so on ext4 as well), which leaves an entry made or changed in
/// the same second as its source with the time of the copy.
fn next_second() {
    std::thread::sleep(Duration::from_millis(1100));
}

#[test]
fn rsync_copies_a_tree_and_then_has_nothing_to_do() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let mnt = create_mounted(&t, "rsync", "1G");
    let source = t.file("source");
    make_source_tree(&source);
    next_second();
    let dest = mnt.join("mirror");
    let started = Instant::now();
    Tool::new("rsync", t.dir.path())
        .arg("-aH")
        .arg(with_slash(&source))
        .arg(with_slash(&dest))
        .success();
    eprintln!("rsync -aH into the mount: {:?}", started.elapsed());
    assert_same_tree(&source, &dest, Times::Nanoseconds);
    let pending = rsync_pending(&source, &dest);
    assert!(
        pending.trim().is_empty(),
        "rsync still sees changes:\n{pending}"
    );

    // An incremental run after changes of every kind; --no-whole-file makes rsync read the
    // old copy on the mount and patch it with its delta algorithm.
    let extra = source.join("extra");
    let mut big = fs::read(extra.join("big.bin")).unwrap();
    big[3 << 20..(3 << 20) + 5000].copy_from_slice(&pattern(90, 5000));
    big.extend_from_slice(&pattern(91, 77_777));
    fs::write(extra.join("big.bin"), &big).unwrap();
    fs::write(extra.join("odd-size.bin"), pattern(92, 1000)).unwrap();
    fs::remove_file(extra.join("many/small-0007")).unwrap();
    fs::rename(extra.join("deep/level0"), extra.join("deep/renamed")).unwrap();
    fs::set_permissions(
        extra.join("tool.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    for index in 0..50 {
        fs::write(
            extra.join(format!("new-{index}")),
            pattern(index + 100, 9000),
        )
        .unwrap();
    }
    next_second();
    let started = Instant::now();
    Tool::new("rsync", t.dir.path())
        .args(["-aH", "--delete", "--no-whole-file"])
        .arg(with_slash(&source))
        .arg(with_slash(&dest))
        .success();
    eprintln!("incremental rsync: {:?}", started.elapsed());
    assert_same_tree(&source, &dest, Times::Nanoseconds);
    let pending = rsync_pending(&source, &dest);
    assert!(
        pending.trim().is_empty(),
        "rsync still sees changes:\n{pending}"
    );

    export_import(&t, "rsync");
    assert_same_tree(&source, &dest, Times::Nanoseconds);
    let pending = rsync_pending(&source, &dest);
    assert!(pending.trim().is_empty(), "after import:\n{pending}");
    t.check_imported_clean("rsync");
}

#[test]
fn tar_archives_from_and_extracts_into_the_mount() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let mnt = create_mounted(&t, "tar", "1G");
    let source = t.file("source");
    make_source_tree(&source);
    Tool::new("cp", t.dir.path())
        .arg("-a")
        .arg(&source)
        .arg(mnt.join("tree"))
        .success();
    // tar c of a tree on the mount, tar x into the mount.
    let archive_outside = t.file("from-mount.tar");
    Tool::new("tar", t.dir.path())
        .arg("-cf")
        .arg(&archive_outside)
        .arg("-C")
        .arg(mnt.join("tree"))
        .arg(".")
        .success();
    fs::create_dir(mnt.join("untarred")).unwrap();
    Tool::new("tar", t.dir.path())
        .arg("-xf")
        .arg(&archive_outside)
        .arg("-C")
        .arg(mnt.join("untarred"))
        .success();
    assert_same_tree(&source, &mnt.join("untarred"), Times::Seconds);
    // An archive written onto the mount, extracted elsewhere.
    let archive_inside = mnt.join("archive.tar");
    Tool::new("tar", t.dir.path())
        .arg("-cf")
        .arg(&archive_inside)
        .arg("-C")
        .arg(&source)
        .arg(".")
        .success();
    fs::create_dir(t.file("outside")).unwrap();
    Tool::new("tar", t.dir.path())
        .arg("-xf")
        .arg(&archive_inside)
        .arg("-C")
        .arg(t.file("outside"))
        .success();
    assert_same_tree(&source, &t.file("outside"), Times::Seconds);

    export_import(&t, "tar");
    assert_same_tree(&source, &mnt.join("untarred"), Times::Seconds);
    // tar's own comparison: every member of the archive on the mount against the tree on
    // the mount (contents, sizes, modes, owners, times, link targets).
    Tool::new("tar", t.dir.path())
        .arg("--compare")
        .arg("-f")
        .arg(&archive_inside)
        .arg("-C")
        .arg(mnt.join("untarred"))
        .success();
    t.check_imported_clean("tar");
}

// ---------------------------------------------------------------------------------------------
// git.

/// git with a private HOME and no system configuration, so the caller's settings do not leak
/// in.
fn git<'a>(home: &Path, cwd: &Path) -> Tool<'a> {
    Tool::new("git", cwd)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "tarn test")
        .env("GIT_AUTHOR_EMAIL", "test@tarn.invalid")
        .env("GIT_COMMITTER_NAME", "tarn test")
        .env("GIT_COMMITTER_EMAIL", "test@tarn.invalid")
}

/// `files` files of varied sizes spread over 40 directories under `dir`.
fn write_project(dir: &Path, files: u64, seed: u64) {
    for index in 0..files {
        let sub = dir.join(format!("module-{:02}", index % 40));
        fs::create_dir_all(&sub).unwrap();
        let text: String = pattern(seed * 1_000_003 + index, (index as usize * 37) % 6000 + 10)
            .iter()
            .map(|byte| (b'a' + byte % 26) as char)
            .collect();
        fs::write(sub.join(format!("file-{index:05}.txt")), text).unwrap();
    }
}

fn rev_count(home: &Path, repo: &Path) -> u64 {
    git(home, repo)
        .args(["rev-list", "--count", "HEAD"])
        .success()
        .trim()
        .parse()
        .unwrap()
}

fn head(home: &Path, repo: &Path) -> String {
    git(home, repo)
        .args(["rev-parse", "HEAD"])
        .success()
        .trim()
        .to_string()
}

fn assert_git_clean(home: &Path, repo: &Path) {
    git(home, repo)
        .args(["fsck", "--full", "--strict"])
        .success();
    let status = git(home, repo).args(["status", "--porcelain"]).success();
    assert!(
        status.trim().is_empty(),
        "{}: worktree differs from HEAD:\n{status}",
        repo.display()
    );
}

#[test]
fn git_commits_clones_and_gc_on_the_mount() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let mnt = create_mounted(&t, "git", "1G");
    let home = t.file("home");
    fs::create_dir(&home).unwrap();
    let started = Instant::now();

    // A repository outside the mount, cloned into it.
    let outside = t.file("outside-repo");
    fs::create_dir(&outside).unwrap();
    git(&home, &outside).args(["init", "-q"]).success();
    Tool::new("cp", &outside)
        .arg("-a")
        .arg(repo_root().join("crates"))
        .arg(&outside)
        .success();
    write_project(&outside, 500, 1);
    git(&home, &outside).args(["add", "-A"]).success();
    git(&home, &outside)
        .args(["commit", "-q", "-m", "outside"])
        .success();
    git(&home, t.dir.path())
        .args(["clone", "-q"])
        .arg(&outside)
        .arg(mnt.join("cloned-in"))
        .success();
    assert_eq!(head(&home, &mnt.join("cloned-in")), head(&home, &outside));
    assert_git_clean(&home, &mnt.join("cloned-in"));

    // A repository made on the mount: many files, then several rounds of changes.
    let repo = mnt.join("repo");
    fs::create_dir(&repo).unwrap();
    git(&home, &repo).args(["init", "-q"]).success();
    write_project(&repo, 2000, 2);
    git(&home, &repo).args(["add", "-A"]).success();
    git(&home, &repo)
        .args(["commit", "-q", "-m", "first"])
        .success();
    let mut commits = 1;
    for round in 0..5u64 {
        for index in ((round * 7) % 40..2000).step_by(40) {
            let path = repo.join(format!("module-{:02}/file-{index:05}.txt", index % 40));
            fs::write(&path, format!("round {round} rewrote {index}\n")).unwrap();
        }
        // (Rewrites touch module (7 * round) % 40, removals module 39 - round, moves
        // module 30 + round: never the same directory.)
        let removed_module = 39 - round;
        for index in (removed_module..2000).step_by(40).take(10) {
            fs::remove_file(repo.join(format!("module-{removed_module:02}/file-{index:05}.txt")))
                .unwrap();
        }
        write_project(&repo.join(format!("round-{round}")), 20, 10 + round);
        git(&home, &repo)
            .args([
                "mv",
                &format!("module-{:02}", 30 + round),
                &format!("moved-{round}"),
            ])
            .success();
        git(&home, &repo).args(["add", "-A"]).success();
        git(&home, &repo)
            .args(["commit", "-q", "-m", &format!("round {round}")])
            .success();
        commits += 1;
    }
    assert_eq!(rev_count(&home, &repo), commits);

    // Clones: within the mount (hard links into .git/objects) and out of it.
    git(&home, &mnt)
        .args(["clone", "-q", "repo", "cloned-local"])
        .success();
    let cloned_out = t.file("cloned-out");
    git(&home, t.dir.path())
        .args(["clone", "-q"])
        .arg(&repo)
        .arg(&cloned_out)
        .success();
    assert_eq!(head(&home, &cloned_out), head(&home, &repo));
    assert_git_clean(&home, &cloned_out);

    // gc --aggressive rewrites every object into one pack (mmap, rename, unlink).
    let gc_started = Instant::now();
    git(&home, &repo)
        .args(["gc", "--aggressive", "-q"])
        .success();
    eprintln!("git gc --aggressive: {:?}", gc_started.elapsed());
    let packs = fs::read_dir(repo.join(".git/objects/pack"))
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".pack")
        })
        .count();
    assert_eq!(packs, 1, "gc left {packs} packs");
    assert_git_clean(&home, &repo);

    // One more commit after gc, pulled into the local clone.
    fs::write(repo.join("after-gc"), b"after gc\n").unwrap();
    git(&home, &repo).args(["add", "after-gc"]).success();
    git(&home, &repo)
        .args(["commit", "-q", "-m", "after gc"])
        .success();
    commits += 1;
    git(&home, &mnt.join("cloned-local"))
        .args(["pull", "-q", "--ff-only"])
        .success();
    assert_eq!(head(&home, &mnt.join("cloned-local")), head(&home, &repo));
    eprintln!("git on the mount: {:?}", started.elapsed());

    export_import(&t, "git");
    for clone in ["repo", "cloned-local", "cloned-in"] {
        assert_git_clean(&home, &mnt.join(clone));
    }
    assert_eq!(rev_count(&home, &repo), commits);
    assert_eq!(rev_count(&home, &mnt.join("cloned-local")), commits);
    assert_eq!(head(&home, &mnt.join("cloned-in")), head(&home, &outside));
    t.check_imported_clean("git");
}

// ---------------------------------------------------------------------------------------------
// sqlite.

/// A script of `transactions` single-row INSERTs (ids from `first_id`), with an UPDATE after every
/// tenth and a DELETE after every hundredth, each in a transaction of its own; and the rows
/// it leaves: (script, count, sum of v).
fn sqlite_workload(transactions: u64, first_id: u64) -> (String, u64, u64) {
    let mut script = String::new();
    let mut rows = std::collections::BTreeMap::new();
    for step in 0..transactions {
        let id = first_id + step;
        script.push_str(&format!(
            "BEGIN; INSERT INTO t(id, v, s) VALUES({id}, {id}, hex(randomblob(48))); COMMIT;\n"
        ));
        rows.insert(id, id);
        if step % 10 == 9 {
            let target = first_id + step / 2;
            script.push_str(&format!(
                "BEGIN; UPDATE t SET v = v + 1000, s = s || 'x' WHERE id = {target}; COMMIT;\n"
            ));
            // (A row deleted earlier is not there to update: a no-op in SQL too.)
            if let Some(v) = rows.get_mut(&target) {
                *v += 1000;
            }
        }
        if step % 100 == 99 {
            let target = first_id + step - 50;
            script.push_str(&format!(
                "BEGIN; DELETE FROM t WHERE id = {target}; COMMIT;\n"
            ));
            rows.remove(&target);
        }
    }
    let count = rows.len() as u64;
    let sum = rows.values().sum();
    (script, count, sum)
}

fn sqlite_verify(db: &Path, count: u64, sum: u64) {
    let out = Tool::new("sqlite3", db.parent().unwrap())
        .arg(db)
        .stdin("PRAGMA integrity_check;\nSELECT count(*) || ' ' || sum(v) FROM t;\n")
        .success();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["ok", &format!("{count} {sum}")], "{}", db.display());
}

#[test]
fn sqlite_thousands_of_transactions_in_wal_and_rollback_modes() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let mnt = create_mounted(&t, "sql", "1G");
    const TRANSACTIONS: u64 = 3000;
    // Thousands of transactions with the usual synchronous settings of each mode (WAL:
    // NORMAL, fsync at checkpoints; rollback journal: OFF, no fsync), then a hundred with
    // synchronous=FULL (an fsync, that is a whole txg sync, per commit and more).
    let mut expected = Vec::new();
    for (journal, synchronous) in [("wal", "NORMAL"), ("delete", "OFF")] {
        let db = mnt.join(format!("{journal}.db"));
        let (body, count, sum) = sqlite_workload(TRANSACTIONS, 1);
        let script = format!(
            "PRAGMA journal_mode={journal};\nPRAGMA synchronous={synchronous};\n\
             CREATE TABLE t(id INTEGER PRIMARY KEY, v INTEGER NOT NULL, s TEXT NOT NULL);\n\
             {body}"
        );
        let started = Instant::now();
        let out = Tool::new("sqlite3", &mnt).arg(&db).stdin(script).success();
        assert_eq!(out.lines().next(), Some(journal), "journal mode not set");
        eprintln!(
            "sqlite {journal} synchronous={synchronous}: {TRANSACTIONS}+ transactions in {:?}",
            started.elapsed()
        );
        sqlite_verify(&db, count, sum);

        const DURABLE: u64 = 100;
        let (body, more_count, more_sum) = sqlite_workload(DURABLE, 1_000_000);
        let script = format!("PRAGMA synchronous=FULL;\n{body}");
        let started = Instant::now();
        Tool::new("sqlite3", &mnt).arg(&db).stdin(script).success();
        eprintln!(
            "sqlite {journal} synchronous=FULL: {DURABLE}+ transactions in {:?}",
            started.elapsed()
        );
        sqlite_verify(&db, count + more_count, sum + more_sum);
        expected.push((db, count + more_count, sum + more_sum));
    }
    export_import(&t, "sql");
    for (db, count, sum) in &expected {
        sqlite_verify(db, *count, *sum);
    }
    t.check_imported_clean("sql");
}

// ---------------------------------------------------------------------------------------------
// fio.

/// Run one fio job in `dir`; fails the test on any error fio reports (a verify error among
/// them: `--verify_fatal`).
fn fio(dir: &Path, name: &str, extra: &[&str]) {
    let started = Instant::now();
    let out = Tool::new("fio", dir)
        .arg(format!("--name={name}"))
        .arg(format!("--directory={}", dir.display()))
        .args([
            "--ioengine=psync",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--output-format=json",
        ])
        .args(extra)
        .success();
    let json_start = out.find('{').expect("fio printed no JSON");
    let report: serde_json::Value = serde_json::from_str(&out[json_start..]).unwrap();
    let jobs = report["jobs"].as_array().expect("fio jobs");
    assert!(!jobs.is_empty());
    for job in jobs {
        assert_eq!(job["error"], 0, "fio job {name} failed:\n{out}");
    }
    let read_bytes: u64 = jobs
        .iter()
        .map(|job| job["read"]["io_bytes"].as_u64().unwrap())
        .sum();
    let written_bytes: u64 = jobs
        .iter()
        .map(|job| job["write"]["io_bytes"].as_u64().unwrap())
        .sum();
    eprintln!(
        "fio {name} {extra:?}: {:?}, {} MiB read, {} MiB written",
        started.elapsed(),
        read_bytes >> 20,
        written_bytes >> 20
    );
    assert!(read_bytes > 0, "fio {name} read nothing (no verify pass?)");
}

#[test]
fn fio_random_and_sequential_jobs_verify() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let mnt = create_mounted(&t, "fio", "1G");
    let dir = mnt.join("fio");
    fs::create_dir(&dir).unwrap();
    fio(&dir, "randrw", &["--rw=randrw", "--bs=4k", "--size=64M"]);
    let sequential = ["--rw=write", "--bs=1M", "--size=256M"];
    fio(&dir, "sequential", &sequential);
    export_import(&t, "fio");
    // The sequential job's file, verified again after import without rewriting it.
    let data_file = dir.join("sequential.0.0");
    let written = fs::metadata(&data_file).unwrap().modified().unwrap();
    let mut verify_only = sequential.to_vec();
    verify_only.push("--verify_only");
    fio(&dir, "sequential", &verify_only);
    assert_eq!(
        fs::metadata(&data_file).unwrap().modified().unwrap(),
        written,
        "--verify_only rewrote the file instead of verifying what the import found"
    );
    t.check_imported_clean("fio");
}

// ---------------------------------------------------------------------------------------------
// mmap.

const PAGE: usize = 4096;

/// Map the first `length` bytes of `file` shared and writable, let `change` write into the
/// mapping, msync it if `sync` (else leave writeback to the kernel), and unmap it.
fn with_shared_map(file: &File, length: usize, sync: bool, change: impl FnOnce(&mut [u8])) {
    // SAFETY: maps `length` bytes of an open file; the slice lives only inside this function
    // and nothing else maps or truncates the file meanwhile.
    unsafe {
        let address = libc::mmap(
            std::ptr::null_mut(),
            length,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(
            address,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        change(std::slice::from_raw_parts_mut(address as *mut u8, length));
        if sync {
            assert_eq!(
                libc::msync(address, length, libc::MS_SYNC),
                0,
                "msync: {}",
                std::io::Error::last_os_error()
            );
        }
        assert_eq!(libc::munmap(address, length), 0);
    }
}

#[test]
fn mmap_shared_writes_reach_the_file() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let mnt = create_mounted(&t, "mmap", "256M");
    let path = mnt.join("mapped");
    let length = 16 << 20;
    let mut expected = pattern(7, length);

    // Round 1: a new file, written wholly through the mapping, msync.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    file.set_len(length as u64).unwrap();
    with_shared_map(&file, length, true, |map| map.copy_from_slice(&expected));
    drop(file);
    assert!(fs::read(&path).unwrap() == expected, "round 1 differs");

    // Round 2: every third page rewritten, no msync; fsync must write the dirty pages back.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    with_shared_map(&file, length, false, |map| {
        for page in (0..length / PAGE).step_by(3) {
            let range = page * PAGE..(page + 1) * PAGE;
            let fresh = pattern(1000 + page as u64, PAGE);
            map[range.clone()].copy_from_slice(&fresh);
            expected[range].copy_from_slice(&fresh);
        }
    });
    file.sync_all().unwrap();
    drop(file);
    assert!(fs::read(&path).unwrap() == expected, "round 2 differs");

    // Round 3: grown by ftruncate, the new tail (not page aligned) written through the map.
    let grown = length + (1 << 20) + 123;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    file.set_len(grown as u64).unwrap();
    let tail = pattern(9, grown - length);
    with_shared_map(&file, grown, true, |map| {
        map[length..].copy_from_slice(&tail)
    });
    expected.extend_from_slice(&tail);
    drop(file);
    assert_eq!(fs::metadata(&path).unwrap().len(), grown as u64);
    assert!(fs::read(&path).unwrap() == expected, "round 3 differs");

    export_import(&t, "mmap");
    assert!(fs::read(&path).unwrap() == expected, "differs after import");
    t.check_imported_clean("mmap");
}

// ---------------------------------------------------------------------------------------------
// A big directory through FUSE.

const BIG_DIRECTORY_ENTRIES: usize = 100_000;
/// Entries timed at the start and at the end of each phase.
const SAMPLE: usize = 10_000;
/// Per-entry time under which a phase counts as fast whatever its first sample took: the
/// floor that keeps scheduling noise on a busy machine from failing the test.
const PER_ENTRY_FLOOR: Duration = Duration::from_micros(100);
/// How much slower the last sample's entries may be than the first's. A per-entry cost that
/// grows linearly with the directory (a list scan per step) would make the last sample's
/// entries, at mean index 95,000, about 19 times slower than the first's, at mean index 5,000;
/// a limit of 6 catches that with room for a busy machine (a limit of 3 failed at 4.2 in a run
/// of the whole suite with two builds beside it).
const GROWTH_LIMIT: u32 = 6;

/// Steps per chunk: each sample is timed in chunks, and a sample's per-entry time is that of
/// its fastest chunk, so that a burst of other work on the machine during one chunk (a build
/// beside the suite) does not count as growth, while a cost that grows with the directory
/// slows every chunk of the last sample alike.
const CHUNK: usize = 1_000;

/// Times the first and the last `SAMPLE` steps of a phase of `count` steps over the big
/// directory, chunk by chunk.
struct PhaseTimer {
    name: &'static str,
    started: Instant,
    chunk_started: Instant,
    /// The fastest chunk of the first and of the last sample.
    first: Option<Duration>,
    last: Option<Duration>,
}

impl PhaseTimer {
    fn new(name: &'static str) -> PhaseTimer {
        PhaseTimer {
            name,
            started: Instant::now(),
            chunk_started: Instant::now(),
            first: None,
            last: None,
        }
    }

    /// Call before the step with index `index` (of `count`).
    fn at(&mut self, index: usize, count: usize) {
        if !index.is_multiple_of(CHUNK) {
            return;
        }
        let elapsed = self.chunk_started.elapsed();
        // The chunk that ended at `index` began at `index - CHUNK`.
        if let Some(begun) = index.checked_sub(CHUNK) {
            let slot = if begun < SAMPLE {
                Some(&mut self.first)
            } else if begun >= count - SAMPLE {
                Some(&mut self.last)
            } else {
                None
            };
            if let Some(slot) = slot {
                *slot = Some(slot.map_or(elapsed, |fastest| fastest.min(elapsed)));
            }
        }
        self.chunk_started = Instant::now();
    }

    /// The phase is over: print its figures and assert that the last sample's per-entry time
    /// (its fastest chunk's) did not grow past [`GROWTH_LIMIT`] times the first's (or the
    /// floor).
    fn finish(mut self, count: usize) {
        // The last chunk ends with the phase.
        self.at(count, count);
        let total = self.started.elapsed();
        let first = self.first.expect("phase shorter than two samples") / CHUNK as u32;
        let last = self.last.expect("phase shorter than two samples") / CHUNK as u32;
        eprintln!(
            "{:>8}: {count} entries in {total:.2?}; per entry, fastest chunk of {CHUNK}: first \
             {SAMPLE} {first:.2?}, last {SAMPLE} {last:.2?}",
            self.name
        );
        let limit = (first * GROWTH_LIMIT).max(PER_ENTRY_FLOOR);
        assert!(
            last <= limit,
            "{}: per-entry time grew with the directory: first {SAMPLE} {first:?}, last \
             {SAMPLE} {last:?} (limit {limit:?})",
            self.name
        );
    }
}

fn entry_name(index: usize) -> String {
    format!("entry-{index:06}")
}

/// Every name in `dir` (timed as a phase when `timer` is given), checked against the
/// expected set.
fn list_big_directory(dir: &Path, mut timer: Option<PhaseTimer>) {
    let mut seen = HashSet::with_capacity(BIG_DIRECTORY_ENTRIES);
    for (index, entry) in fs::read_dir(dir).unwrap().enumerate() {
        if let Some(timer) = &mut timer {
            if index < BIG_DIRECTORY_ENTRIES {
                timer.at(index, BIG_DIRECTORY_ENTRIES);
            }
        }
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(seen.insert(name.clone()), "readdir returned {name} twice");
    }
    if let Some(timer) = timer {
        timer.finish(BIG_DIRECTORY_ENTRIES);
    }
    assert_eq!(seen.len(), BIG_DIRECTORY_ENTRIES);
    for index in 0..BIG_DIRECTORY_ENTRIES {
        assert!(
            seen.contains(&entry_name(index)),
            "readdir missed {}",
            entry_name(index)
        );
    }
}

#[test]
fn directory_of_100k_entries_through_fuse_stays_fast() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let mnt = create_mounted(&t, "big", "1G");
    let dir = mnt.join("big");
    fs::create_dir(&dir).unwrap();
    let count = BIG_DIRECTORY_ENTRIES;

    let mut timer = PhaseTimer::new("create");
    for index in 0..count {
        timer.at(index, count);
        File::create(dir.join(entry_name(index))).unwrap();
    }
    timer.finish(count);

    let mut timer = PhaseTimer::new("stat");
    for index in 0..count {
        timer.at(index, count);
        let metadata = fs::symlink_metadata(dir.join(entry_name(index))).unwrap();
        assert!(metadata.is_file() && metadata.len() == 0);
    }
    timer.finish(count);

    list_big_directory(&dir, Some(PhaseTimer::new("readdir")));
    export_import(&t, "big");
    list_big_directory(&dir, None);

    let mut timer = PhaseTimer::new("unlink");
    for index in 0..count {
        timer.at(index, count);
        fs::remove_file(dir.join(entry_name(index))).unwrap();
    }
    timer.finish(count);
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    fs::remove_dir(&dir).unwrap();
    t.check_imported_clean("big");
}
