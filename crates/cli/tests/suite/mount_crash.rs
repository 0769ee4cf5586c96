//! Crash rounds through the mount: writer threads create, append to and overwrite files under
//! the FUSE mount of one pool, fsyncing each file and its directory, while the daemon is killed
//! with SIGKILL at a random moment. Each of at least 20 rounds then re-imports the pool without
//! `-f`, which must mount it again; `tarn check` must be clean; and every file whose fsync (and
//! its directory's fsync) returned must read back exactly as recorded. Files whose writes were
//! not confirmed may be missing or partial, but must still be readable.
//!
//! The random schedule is seeded from the clock; the seed is printed, and `TARN_CRASH_SEED`
//! replays it. The fixture (own `TARN_SOCKET` and altroot in temporary directories, the real
//! `tarn` binary, a drop that stops the daemon and lazily unmounts) follows `tests/mount.rs`.
//! Skipped with a message when /dev/fuse is missing.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tarn_test_support::cli::{is_mounted, CliFixture};

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

const POOL: &str = "crash";
const ROUNDS: u32 = 20;
const WRITERS: u32 = 3;
/// Bytes one writer may write in one round, so that 20 rounds stay well inside the pool.
const WRITER_BUDGET: usize = 24 << 20;
const MAX_FILE: usize = 2 << 20;

/// xorshift64*: a small deterministic generator for the schedule.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Deterministic contents: byte `i` of a write tagged `tag` (which encodes round, thread, seq).
fn pattern(tag: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(tag.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

fn tag(round: u32, thread: u32, seq: u32) -> u64 {
    (u64::from(round) << 40) | (u64::from(thread) << 32) | u64::from(seq)
}

fn digest(data: &[u8]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut hasher);
    hasher.finish()
}

/// What a confirmed file must hold: its length and the hash of its contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Confirmed {
    len: usize,
    hash: u64,
}

/// Files whose last write was confirmed by fsync of the file and of its directory, by path
/// relative to the mountpoint. A file being modified is taken out first and put back only
/// once the modification is confirmed.
type Journal = Arc<Mutex<BTreeMap<String, Confirmed>>>;

fn file_size(rng: &mut Rng) -> usize {
    match rng.below(10) {
        0..=3 => 1 + rng.below(64) as usize,
        4..=6 => 1 + rng.below(64 << 10) as usize,
        7..=8 => 1 + rng.below(512 << 10) as usize,
        _ => 1 + rng.below(MAX_FILE as u64) as usize,
    }
}

/// Writer `thread` of round `round`: creates files under `dir` (relative path `rel`), appends
/// to and overwrites its own files, fsyncs each file and the directory, and records what was
/// confirmed. Stops at the first error, which must come after the daemon was killed and be
/// ENOTCONN, EIO or ECONNABORTED, or, over FUSE over io_uring, ECANCELED (a request the kernel
/// had put in a ring entry of the dead server, ended when the server's ring is torn down).
fn writer(
    mnt: PathBuf,
    rel: String,
    round: u32,
    thread: u32,
    seed: u64,
    journal: Journal,
    killed: Arc<AtomicBool>,
) -> Result<u32, String> {
    let mut rng = Rng::new(seed);
    let dir = mnt.join(&rel);
    // This writer's files of this round and their full expected contents.
    let mut mine: Vec<(String, Vec<u8>)> = Vec::new();
    let mut written = 0usize;
    let mut seq = 0u32;
    let mut confirmed = 0u32;
    while written < WRITER_BUDGET {
        seq += 1;
        let op = if mine.is_empty() { 0 } else { rng.below(10) };
        let step: io::Result<(usize, String)> = (|| {
            if op < 6 {
                // A new file, written in a few chunks.
                let name = format!("r{round:02}-t{thread}-s{seq:05}");
                let len = file_size(&mut rng);
                let data = pattern(tag(round, thread, seq), len);
                let mut file = File::create(dir.join(&name))?;
                let mut off = 0;
                while off < len {
                    let end = (off + 1 + rng.below(1 << 20) as usize).min(len);
                    file.write_all(&data[off..end])?;
                    off = end;
                }
                file.sync_all()?;
                drop(file);
                File::open(&dir)?.sync_all()?;
                mine.push((name.clone(), data));
                Ok((len, name))
            } else {
                let index = rng.below(mine.len() as u64) as usize;
                let name = mine[index].0.clone();
                let key = format!("{rel}/{name}");
                journal.lock().unwrap().remove(&key);
                let path = dir.join(&name);
                let data = &mut mine[index].1;
                let chunk_len = 1 + rng.below(256 << 10) as usize;
                let chunk = pattern(tag(round, thread, seq), chunk_len);
                match op {
                    6 | 7 => {
                        // Append.
                        let mut file = OpenOptions::new().append(true).open(&path)?;
                        file.write_all(&chunk)?;
                        file.sync_all()?;
                        data.extend_from_slice(&chunk);
                    }
                    8 => {
                        // Overwrite in place, possibly past the end.
                        let at = rng.below(data.len() as u64 + 1) as usize;
                        let file = OpenOptions::new().write(true).open(&path)?;
                        file.write_all_at(&chunk, at as u64)?;
                        file.sync_all()?;
                        let end = at + chunk_len;
                        if data.len() < end {
                            data.resize(end, 0);
                        }
                        data[at..end].copy_from_slice(&chunk);
                    }
                    _ => {
                        // Truncate and rewrite.
                        let mut file = OpenOptions::new().write(true).open(&path)?;
                        file.set_len(0)?;
                        file.seek(SeekFrom::Start(0))?;
                        file.write_all(&chunk)?;
                        file.sync_all()?;
                        *data = chunk;
                    }
                }
                Ok((chunk_len, name))
            }
        })();
        match step {
            Ok((bytes, name)) => {
                let data = &mine.iter().find(|(n, _)| *n == name).unwrap().1;
                let entry = Confirmed {
                    len: data.len(),
                    hash: digest(data),
                };
                journal
                    .lock()
                    .unwrap()
                    .insert(format!("{rel}/{name}"), entry);
                written += bytes;
                confirmed += 1;
            }
            Err(error)
                if killed.load(Ordering::SeqCst)
                    && matches!(
                        error.raw_os_error(),
                        Some(libc::ENOTCONN | libc::EIO | libc::ECONNABORTED | libc::ECANCELED)
                    ) =>
            {
                // The daemon is gone: stop, and record nothing unconfirmed.
                return Ok(confirmed);
            }
            Err(error) => {
                return Err(format!(
                    "writer {thread} op {op} seq {seq}: unexpected {error} (killed: {})",
                    killed.load(Ordering::SeqCst)
                ))
            }
        }
    }
    // Budget spent before the kill.
    Ok(confirmed)
}

/// Every journalled file must read back exactly; every other file under the round
/// directories must at least be readable.
fn verify(mnt: &Path, journal: &BTreeMap<String, Confirmed>) -> (usize, usize) {
    for (rel, want) in journal {
        let data = fs::read(mnt.join(rel))
            .unwrap_or_else(|e| panic!("confirmed file {rel} unreadable: {e}"));
        let got = Confirmed {
            len: data.len(),
            hash: digest(&data),
        };
        assert_eq!(got, *want, "confirmed file {rel} changed");
    }
    let mut others = 0;
    for round in fs::read_dir(mnt).unwrap() {
        let round = round.unwrap().path();
        if !round.is_dir() {
            continue;
        }
        for file in fs::read_dir(&round).unwrap() {
            let path = file.unwrap().path();
            let rel = path.strip_prefix(mnt).unwrap().display().to_string();
            if !journal.contains_key(&rel) {
                fs::read(&path).unwrap_or_else(|e| panic!("unconfirmed file {rel}: {e}"));
                others += 1;
            }
        }
    }
    (journal.len(), others)
}

#[test]
fn kill_9_during_fsynced_writes_loses_nothing_confirmed() {
    let Some(t) = CliFixture::mounting(TARN) else {
        return;
    };
    let started = Instant::now();
    let seed = std::env::var("TARN_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("crash rounds: TARN_CRASH_SEED={seed}");
    let mut rng = Rng::new(seed);
    let mnt = t.file(&format!("altroot/{POOL}"));
    let altroot = t.altroot();
    let d = t.d();
    t.create_pool(
        POOL,
        &["-s", "2G", "-R", &altroot],
        &[&format!("{POOL}.img")],
    )
    .success();
    assert!(is_mounted(&mnt));
    let journal: Journal = Arc::default();
    let mut totals = HashMap::new();
    for round in 0..ROUNDS {
        let round_started = Instant::now();
        // Drop the files of two rounds ago, so that unlinks are in flight too; those entries
        // leave the journal before the unlink (it may or may not survive the crash).
        if round >= 2 {
            let old = format!("r{:02}", round - 2);
            journal
                .lock()
                .unwrap()
                .retain(|k, _| !k.starts_with(&format!("{old}/")));
            fs::remove_dir_all(mnt.join(&old)).unwrap();
        }
        let rel = format!("r{round:02}");
        fs::create_dir(mnt.join(&rel)).unwrap();
        File::open(&mnt).unwrap().sync_all().unwrap();
        let pid = t.daemon_pid().expect("daemon pid");
        let killed = Arc::new(AtomicBool::new(false));
        let writers = 2 + rng.below(u64::from(WRITERS) - 1) as u32;
        let handles: Vec<JoinHandle<Result<u32, String>>> = (0..writers)
            .map(|thread| {
                let (mnt, rel, journal, killed) =
                    (mnt.clone(), rel.clone(), journal.clone(), killed.clone());
                let seed = rng.next();
                std::thread::spawn(move || writer(mnt, rel, round, thread, seed, journal, killed))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100 + rng.below(501)));
        killed.store(true, Ordering::SeqCst);
        // SAFETY: kills the daemon this fixture started (named by its pid file).
        unsafe { libc::kill(pid, libc::SIGKILL) };
        t.wait_daemon_gone(pid);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut confirmed = 0;
        for handle in handles {
            while !handle.is_finished() {
                assert!(
                    Instant::now() < deadline,
                    "round {round}: a writer is stuck after the kill"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            match handle.join().expect("writer panicked") {
                Ok(n) => confirmed += n,
                Err(message) => panic!("round {round}: {message}"),
            }
        }
        // Re-import without -f: detaches the dead mount and mounts again.
        t.run(&["pool", "import", "-d", &d, "-R", &altroot, POOL])
            .success();
        assert!(
            is_mounted(&mnt) && !tarn_fuse::mountpoint::is_dead_fuse_mount(&mnt),
            "round {round}: not mounted after import"
        );
        t.check_imported_clean(POOL);
        let journal = journal.lock().unwrap();
        let (checked, others) = verify(&mnt, &journal);
        totals.insert(round, confirmed);
        eprintln!(
            "round {round:2}: {writers} writers, {confirmed} confirmed ops, \
             {checked} journalled files verified, {others} unconfirmed, {:?}",
            round_started.elapsed()
        );
    }
    assert!(
        totals.values().sum::<u32>() > 0,
        "no write was ever confirmed: the rounds tested nothing"
    );
    t.run(&["pool", "export", POOL]).success();
    assert!(!is_mounted(&mnt));
    let _ = t.run(&["daemon", "--stop"]);
    if let Some(pid) = t.daemon_pid() {
        t.wait_daemon_gone(pid);
    }
    assert!(
        !tarn_fuse::mountpoint::mounts()
            .iter()
            .any(|m| m.mount_point.starts_with(t.dir.path())),
        "a mount is left under the test directory"
    );
    eprintln!("crash rounds done in {:?}", started.elapsed());
}
