//! The mount mode: the same kinds of file operations, driven through a real FUSE mount of the
//! tarn daemon, with the kernel's caches in the way (fsx and fsstress's place in ztest's kit).
//!
//! # Theory
//! The engine-mode child ([`crate::child`]) calls the engine directly, so it never meets what
//! lives between an application and the engine: the kernel's page cache and writeback cache,
//! the attribute cache, FUSE's request queue, and the daemon's write admission, whose contract
//! is that a `write(2)` the kernel accepted is never lost to ENOSPC at write-back.
//! This mode runs its workers in the parent, against files under a mount of the daemon that
//! the `tarn` CLI starts, and makes the *daemon* the process that crashes:
//! 1. the parent creates (or imports) the pool through the CLI, with the mount under the run
//!    directory, and stamps the file system through the mount;
//! 2. `threads` workers run file operations on their own files (`tK/f0` to `tK/f7`), drawn
//!    with the weights of the operation table ([`crate::ops::OPERATIONS`]); one worker also
//!    takes snapshots through the CLI; in a near-full round another fills the pool's root
//!    file system until ENOSPC, so that the workers write into a full pool; in a quota round
//!    their file system has a quota a little above what it holds ([`set_round_quota`]);
//! 3. at the moment the round's seed chooses, the parent SIGKILLs the daemon (or, one round in
//!    four, exports the pool cleanly), waits for the workers to see their mount go away, and
//!    detaches the dead mount;
//! 4. it imports the pool in-process from the files, runs `check`, verifies every file and
//!    snapshot and every fsync's promise with the oracle ([`crate::oracle::verify_pool`]),
//!    and exports.
//!
//! # What is an inconsistency here
//! Besides the oracle's judgments: a read through the mount that does not verify; an `fsync`
//! or `close` that fails while the daemon runs (the kernel accepted the writes it flushes, so
//! a failure means an accepted write-back was lost, which the admission contract above
//! forbids); any error other than ENOSPC (or EDQUOT) from a write, a truncate or an xattr
//! while the daemon runs. ENOSPC from a `write(2)` or a short write is the admission working,
//! counted as a refusal.
//!
//! # File identity
//! Tags name a file by inode number and birth time ([`crate::tag`]); a mount cannot read the
//! birth time (Linux FUSE has no `statx` birth time without FUSE_STATX, which fuser does not
//! speak). So a file made through the mount carries its birth as the extended attribute
//! [`BIRTH_XATTR`], set right after the create and before any data, and the oracle takes a
//! file's birth from it when it is there ([`crate::oracle::file_birth`]).

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tarn::tunables::Tunables;

use crate::journal::{journal_path, JournalWriter, Promise, Promises};
use crate::ops::{Op, OPERATIONS};
use crate::oracle::{FileContents, BIRTH_XATTR, STAMP_NAME, XATTR_PREFIX};
use crate::runner::{check_rewind_targets, copy_sparse, import_check_verify, Summary};
use crate::tag::{mix, BlockState, Place, Tag, TAG_BLOCK_SIZE, XATTR_OFFSET};

/// The pool's name in mount mode.
pub const MOUNT_POOL_NAME: &str = "stressm";
/// The file system the workers use (the pool's root file system holds the near-full filler).
const FILE_SYSTEM: &str = "stressm/m";
/// Bytes in each of the mirror's two vdev files (sparse): small, so near-full rounds fill it.
const VDEV_SIZE: &str = "192M";
/// Files per worker directory, and the largest file in tagged blocks (as the engine mode).
const FILES_PER_DIRECTORY: u64 = 8;
const FILE_BLOCKS_MAX: u64 = 64;
/// The most blocks one write covers, as a power of two.
const WRITE_BLOCKS_MAX_SHIFT: u32 = 3;
/// The range of a round's life before its end (a kill or an export).
const LIFE_MS: std::ops::Range<u64> = 500..6000;
/// The file operations of the table this mode runs, with the table's weights; and the
/// dataset and pool operations it runs from the first worker.
const FILE_OPERATIONS: &[Op] = &[
    Op::Write,
    Op::Overwrite,
    Op::TruncateDown,
    Op::TruncateUp,
    Op::PunchHole,
    Op::Unlink,
    Op::RenameMove,
    Op::RenameReplace,
    Op::SetXattr,
    Op::RemoveXattr,
    Op::Fsync,
    Op::ReadVerify,
    Op::Snapshot,
];
/// How long a worker may stay in one operation after the daemon is gone before the run calls
/// it hung (a request the kernel never answers is a finding).
const HANG_GRACE: Duration = Duration::from_secs(60);

/// What a mount-mode run is asked to do.
#[derive(Clone, Debug)]
pub struct MountOptions {
    pub dir: PathBuf,
    pub seed: u64,
    pub threads: usize,
    pub duration: Duration,
    /// The `tarn` binary (its daemon serves the mount).
    pub tarn: PathBuf,
    /// Where `failures/` goes: the loop's directory, which outlives each seed's `dir`.
    pub failures_dir: PathBuf,
}

/// The `tarn` binary beside this one (`target/debug/tarn` beside `target/debug/tarn-stress`),
/// else `tarn` on the PATH.
pub fn default_tarn_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("tarn")))
        .filter(|path| path.exists())
        .unwrap_or_else(|| PathBuf::from("tarn"))
}

/// The run directory's parts.
struct Layout {
    dir: PathBuf,
    pool: PathBuf,
    altroot: PathBuf,
    socket: PathBuf,
}

impl Layout {
    fn new(dir: &Path) -> Layout {
        Layout {
            dir: dir.to_path_buf(),
            pool: dir.join("pool"),
            altroot: dir.join("mnt"),
            socket: dir.join("tarn.sock"),
        }
    }

    fn vdevs(&self) -> [PathBuf; 2] {
        [self.pool.join("m-a.img"), self.pool.join("m-b.img")]
    }

    /// Where the workers' file system is mounted.
    fn file_system(&self) -> PathBuf {
        self.altroot.join(FILE_SYSTEM)
    }

    /// Where the pool's root file system is mounted (the filler lives there).
    fn root_file_system(&self) -> PathBuf {
        self.altroot.join(MOUNT_POOL_NAME)
    }
}

/// Run `tarn ARGS` against this run's daemon; its output on failure.
fn tarn(options: &MountOptions, layout: &Layout, args: &[&str]) -> Result<String, String> {
    let output = Command::new(&options.tarn)
        .args(args)
        .env("TARN_SOCKET", &layout.socket)
        .output()
        .map_err(|error| format!("{}: {error}", options.tarn.display()))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "tarn {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim(),
            String::from_utf8_lossy(&output.stdout).trim()
        ))
    }
}

/// One round in three, the workers' file system gets a quota 2 to 24 MiB above what it holds
/// (so that writes through the page cache, direct writes and write-backs meet it: EDQUOT is a
/// refusal, a failed fsync or close is not); the others clear it. Drawn from a generator of
/// its own, so that the round's other draws are those of a seed before quotas existed.
/// Returns whether the round has a quota.
fn set_round_quota(
    options: &MountOptions,
    layout: &Layout,
    round_seed: u64,
) -> Result<bool, String> {
    let mut rng = StdRng::seed_from_u64(round_seed ^ 0x71_u64.rotate_left(56));
    let with_quota = rng.gen_ratio(1, 3);
    let value = if with_quota {
        let used: u64 = tarn(
            options,
            layout,
            &["get", "-H", "-p", "-o", "value", "used", FILE_SYSTEM],
        )?
        .trim()
        .parse()
        .map_err(|error| format!("the used bytes of {FILE_SYSTEM}: {error}"))?;
        (used + rng.gen_range((2u64 << 20)..(24 << 20))).to_string()
    } else {
        "none".to_string()
    };
    tarn(
        options,
        layout,
        &["set", &format!("quota={value}"), FILE_SYSTEM],
    )?;
    Ok(with_quota)
}

/// One mount-mode run: rounds until `duration` is spent or a failure.
pub fn run_mount(options: &MountOptions) -> Result<Summary, String> {
    let layout = Layout::new(&options.dir);
    std::fs::create_dir_all(&layout.pool)
        .map_err(|error| format!("{}: {error}", layout.pool.display()))?;
    std::fs::create_dir_all(&layout.altroot)
        .map_err(|error| format!("{}: {error}", layout.altroot.display()))?;
    // A run cut short may have left its daemon and mounts behind.
    kill_daemon(&layout);
    detach_mounts(&layout);
    let created = layout.vdevs().iter().any(|path| path.exists());
    if !created {
        let [a, b] = layout.vdevs();
        let altroot = layout.altroot.display().to_string();
        tarn(
            options,
            &layout,
            &[
                "pool",
                "create",
                "-s",
                VDEV_SIZE,
                "-R",
                &altroot,
                MOUNT_POOL_NAME,
                "mirror",
                &a.display().to_string(),
                &b.display().to_string(),
            ],
        )?;
        tarn(options, &layout, &["create", FILE_SYSTEM])?;
        let family = mix(options.seed ^ 0x006d_6f75_6e74);
        write_stamp(&layout.file_system(), family)?;
        tarn(options, &layout, &["pool", "export", MOUNT_POOL_NAME])?;
        stop_daemon(options, &layout);
    }
    let rounds_path = layout.dir.join("rounds");
    let mut round = std::fs::read_to_string(&rounds_path)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let mut promises = Promises::default();
    promises.catch_up(&journal_path(&layout.dir))?;
    let mut summary = Summary::default();
    let mut admission = Admission::default();
    let end = Instant::now() + options.duration;
    while Instant::now() < end {
        round += 1;
        let round_seed = mix(options.seed ^ mix(round));
        let outcome = run_round(
            options,
            &layout,
            round,
            round_seed,
            &mut summary,
            &mut admission,
        );
        let mut problems = match outcome {
            Ok(()) => Vec::new(),
            Err(problems) => problems,
        };
        if let Err(why) = promises.catch_up(&journal_path(&layout.dir)) {
            problems.push(why);
        }
        problems.append(&mut promises.failures);
        copy_sparse(&layout.pool, &layout.dir.join("crashed"))?;
        if problems.is_empty() {
            problems =
                check_rewind_targets(&layout.pool, MOUNT_POOL_NAME, &Tunables::default(), round).0;
        }
        if problems.is_empty() {
            problems = import_check_verify(
                &layout.pool,
                MOUNT_POOL_NAME,
                &Tunables::default(),
                &promises,
                round,
                &mut summary,
                |_| Ok(()),
            );
        }
        std::fs::write(&rounds_path, format!("{round}\n"))
            .map_err(|error| format!("{}: {error}", rounds_path.display()))?;
        if !problems.is_empty() {
            let kept = keep_failure(options, &layout, round, &problems);
            summary.failures.push(format!(
                "mount seed {} round {round}: {} (kept in {kept})",
                options.seed,
                problems.join("; ")
            ));
            break;
        }
        log::info!("mount round {round}: verified");
    }
    println!(
        "tarn-stress: mount seed {}: {} near-full rounds, {} quota rounds, {} writes refused with ENOSPC or EDQUOT, {} short writes",
        options.seed,
        admission.near_full_rounds,
        admission.quota_rounds,
        admission.no_space,
        admission.short_writes
    );
    Ok(summary)
}

/// What the workers of one round share.
struct Round<'a> {
    options: &'a MountOptions,
    layout: &'a Layout,
    round: u64,
    family: u64,
    journal: JournalWriter,
    /// Set just before the daemon is killed or the pool exported: errors after it are expected.
    stopping: AtomicBool,
    generation_counter: AtomicU64,
    snapshot_counter: AtomicU64,
    operations: AtomicU64,
    refusals: AtomicU64,
    /// Writes refused with ENOSPC (or EDQUOT), and writes cut short: the admission at work.
    no_space: AtomicU64,
    short_writes: AtomicU64,
    problems: parking_lot::Mutex<Vec<String>>,
}

/// What the mount mode saw of write admission, over a run.
#[derive(Default)]
struct Admission {
    near_full_rounds: u64,
    /// Rounds whose file system had a quota a little above what it held.
    quota_rounds: u64,
    no_space: u64,
    short_writes: u64,
}

/// Why an operation did not happen.
enum MountError {
    /// Declined (ENOSPC, a precondition of the tool's own): counted.
    Refused,
    /// Something is wrong: the round stops and fails.
    Inconsistent(String),
}

impl Round<'_> {
    fn next_generation(&self) -> u64 {
        let counter = self.generation_counter.fetch_add(1, Ordering::SeqCst) + 1;
        (self.round << 32) | counter
    }

    fn inconsistent(&self, why: String) {
        if !self.stopping.load(Ordering::SeqCst) {
            self.problems.lock().push(why);
        }
    }

    /// An I/O error while the daemon runs: ENOSPC and EDQUOT are refusals, the rest wrong.
    fn judge(&self, what: &str, error: std::io::Error) -> MountError {
        match error.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT) => {
                self.no_space.fetch_add(1, Ordering::Relaxed);
                MountError::Refused
            }
            _ => MountError::Inconsistent(format!("{what}: {error}")),
        }
    }
}

/// One round: import, workers, the end the seed chose.
fn run_round(
    options: &MountOptions,
    layout: &Layout,
    round: u64,
    round_seed: u64,
    summary: &mut Summary,
    admission: &mut Admission,
) -> Result<(), Vec<String>> {
    let mut rng = StdRng::seed_from_u64(round_seed);
    let altroot = layout.altroot.display().to_string();
    let pool_dir = layout.pool.display().to_string();
    tarn(
        options,
        layout,
        &[
            "pool",
            "import",
            "-d",
            &pool_dir,
            "-R",
            &altroot,
            MOUNT_POOL_NAME,
        ],
    )
    .map_err(|why| vec![format!("round {round}: {why}")])?;
    summary.imports += 1;
    let family =
        read_stamp(&layout.file_system()).map_err(|why| vec![format!("round {round}: {why}")])?;
    let quota = set_round_quota(options, layout, round_seed)
        .map_err(|why| vec![format!("round {round}: {why}")])?;
    let journal = JournalWriter::open(&journal_path(&layout.dir))
        .map_err(|error| vec![format!("round {round}: the journal: {error}")])?;
    let state = Round {
        options,
        layout,
        round,
        family,
        journal,
        stopping: AtomicBool::new(false),
        generation_counter: AtomicU64::new(0),
        snapshot_counter: AtomicU64::new(0),
        operations: AtomicU64::new(0),
        refusals: AtomicU64::new(0),
        no_space: AtomicU64::new(0),
        short_writes: AtomicU64::new(0),
        problems: parking_lot::Mutex::new(Vec::new()),
    };
    let life = Duration::from_millis(rng.gen_range(LIFE_MS));
    let near_full = rng.gen_ratio(1, 3);
    let crash = !rng.gen_ratio(1, 4);
    let worker_seeds: Vec<u64> = (0..options.threads).map(|_| rng.gen()).collect();
    let filler_seed: u64 = rng.gen();
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let state = &state;
        let done = &done;
        let workers: Vec<_> = worker_seeds
            .iter()
            .enumerate()
            .map(|(index, &seed)| scope.spawn(move || worker(state, index, seed, done)))
            .collect();
        let filler = near_full.then(|| scope.spawn(move || fill(state, filler_seed, done)));
        let started = Instant::now();
        while started.elapsed() < life && state.problems.lock().is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
        state.stopping.store(true, Ordering::SeqCst);
        if crash {
            kill_daemon(layout);
            summary.kills += 1;
        }
        done.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + HANG_GRACE;
        for handle in workers.into_iter().chain(filler) {
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if !handle.is_finished() {
                state.problems.lock().push(format!(
                    "round {round}: a worker is still in an operation {HANG_GRACE:?} after the round's end"
                ));
                // The hung thread keeps the scope open: detach the mount to release it.
                kill_daemon(layout);
                detach_mounts(layout);
            }
            let _ = handle.join();
        }
    });
    summary.operations += state.operations.load(Ordering::SeqCst);
    summary.refusals += state.refusals.load(Ordering::SeqCst);
    admission.near_full_rounds += u64::from(near_full);
    admission.quota_rounds += u64::from(quota);
    admission.no_space += state.no_space.load(Ordering::SeqCst);
    admission.short_writes += state.short_writes.load(Ordering::SeqCst);
    let mut problems = std::mem::take(&mut *state.problems.lock());
    if crash {
        detach_mounts(layout);
    } else {
        if let Err(why) = tarn(options, layout, &["pool", "export", MOUNT_POOL_NAME]) {
            problems.push(format!("round {round}: {why}"));
        }
        summary.clean_ends += 1;
        stop_daemon(options, layout);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// One worker: operations on its own files until the round is done.
fn worker(state: &Round, index: usize, seed: u64, done: &AtomicBool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let weights: Vec<(Op, u32)> = FILE_OPERATIONS
        .iter()
        .filter(|&&op| op != Op::Snapshot || index == 0)
        .map(|&op| {
            let spec = OPERATIONS.iter().find(|spec| spec.op == op);
            (op, spec.map_or(1, |spec| spec.weight))
        })
        .collect();
    let total: u32 = weights.iter().map(|(_, weight)| weight).sum();
    let directory = state.layout.file_system().join(format!("t{index}"));
    while !done.load(Ordering::SeqCst) && !state.stopping.load(Ordering::SeqCst) {
        let mut point = rng.gen_range(0..total);
        let op = weights
            .iter()
            .find(|(_, weight)| {
                if point < *weight {
                    true
                } else {
                    point -= weight;
                    false
                }
            })
            .map(|(op, _)| *op)
            .expect("a point below the total falls in some weight");
        state.operations.fetch_add(1, Ordering::Relaxed);
        let result = if op == Op::Snapshot {
            snapshot(state)
        } else {
            file_op(state, &directory, op, &mut rng)
        };
        match result {
            Ok(()) => {}
            Err(MountError::Refused) => {
                state.refusals.fetch_add(1, Ordering::Relaxed);
            }
            Err(MountError::Inconsistent(why)) => {
                state.inconsistent(format!(
                    "round {} worker {index} {op:?}: {why}",
                    state.round
                ));
                return;
            }
        }
    }
}

/// A snapshot through the CLI (the daemon takes it under the mount's feet).
fn snapshot(state: &Round) -> Result<(), MountError> {
    let number = state.snapshot_counter.fetch_add(1, Ordering::SeqCst);
    let name = format!("{FILE_SYSTEM}@m{}n{number}", state.round);
    match tarn(state.options, state.layout, &["snapshot", &name]) {
        Ok(_) => Ok(()),
        Err(why) if why.contains("space") => Err(MountError::Refused),
        Err(why) => Err(MountError::Inconsistent(why)),
    }
}

/// The birth a file made through the mount carries ([`BIRTH_XATTR`]); None without one.
fn read_birth(file: &File) -> std::io::Result<Option<u64>> {
    let mut value = [0u8; 8];
    let name = std::ffi::CString::new(BIRTH_XATTR).expect("no NUL");
    // SAFETY: a valid descriptor, a NUL-terminated name and a buffer of the length given.
    let length = unsafe {
        libc::fgetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    match length {
        8 => Ok(Some(u64::from_le_bytes(value))),
        -1 if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENODATA) => Ok(None),
        -1 => Err(std::io::Error::last_os_error()),
        _ => Err(std::io::Error::other(format!(
            "the birth xattr is {length} bytes, not 8"
        ))),
    }
}

/// The tag of a file: (inode, birth) through the mount.
fn identity(file: &File, what: &str) -> Result<(u64, u64), MountError> {
    let ino = file
        .metadata()
        .map_err(|error| MountError::Inconsistent(format!("{what}: fstat: {error}")))?
        .ino();
    match read_birth(file) {
        Ok(Some(birth)) => Ok((ino, birth)),
        Ok(None) => Err(MountError::Inconsistent(format!("{what}: no birth xattr"))),
        Err(error) => Err(MountError::Inconsistent(format!(
            "{what}: its birth xattr: {error}"
        ))),
    }
}

fn set_xattr(file: &File, name: &str, value: &[u8]) -> std::io::Result<()> {
    let name = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: a valid descriptor, a NUL-terminated name and a buffer of the length given.
    let result = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// One file operation, on `tK/fN` of the worker's directory.
fn file_op(state: &Round, directory: &Path, op: Op, rng: &mut StdRng) -> Result<(), MountError> {
    let io = |what: &str, error: std::io::Error| state.judge(what, error);
    match std::fs::create_dir(directory) {
        Ok(()) => {}
        Err(error) if error.kind() == ErrorKind::AlreadyExists => {}
        Err(error) => return Err(io("mkdir", error)),
    }
    let name = format!("f{}", rng.gen_range(0..FILES_PER_DIRECTORY));
    let path = directory.join(&name);
    let what = path.display().to_string();
    let exists = match std::fs::symlink_metadata(&path) {
        Ok(_) => true,
        Err(error) if error.kind() == ErrorKind::NotFound => false,
        Err(error) => return Err(io(&format!("{what}: stat"), error)),
    };
    if !exists {
        if !matches!(op, Op::Write | Op::Overwrite) {
            return Err(MountError::Refused);
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .map_err(|error| io(&format!("{what}: create"), error))?;
        let birth = mix(state.next_generation() ^ rng.gen::<u64>()) | 1;
        set_xattr(&file, BIRTH_XATTR, &birth.to_le_bytes())
            .map_err(|error| io(&format!("{what}: set its birth"), error))?;
        return write_blocks(state, &file, &what, Op::Write, rng);
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|error| io(&format!("{what}: open"), error))?;
    if read_birth(&file)
        .map_err(|error| io(&format!("{what}: its birth"), error))?
        .is_none()
    {
        // A crash between the create and the birth xattr leaves a file without it. Nothing
        // was written to it before the xattr, so it holds no data (the oracle, which then
        // takes its creation time for its birth, would find any tagged block misplaced):
        // it goes, and the name is free again.
        drop(file);
        std::fs::remove_file(&path).map_err(|error| io(&format!("{what}: unlink"), error))?;
        return Err(MountError::Refused);
    }
    let size = file
        .metadata()
        .map_err(|error| io(&format!("{what}: fstat"), error))?
        .len();
    let blocks = size.div_ceil(TAG_BLOCK_SIZE as u64);
    let block_bytes = TAG_BLOCK_SIZE as u64;
    let dataset = FILE_SYSTEM;
    match op {
        Op::Write | Op::Overwrite => write_blocks(state, &file, &what, op, rng),
        Op::TruncateDown => {
            if blocks == 0 {
                return Err(MountError::Refused);
            }
            let (ino, _) = identity(&file, &what)?;
            state.journal.forget(dataset, ino);
            file.set_len(rng.gen_range(0..blocks) * block_bytes)
                .map_err(|error| io(&format!("{what}: truncate"), error))
        }
        Op::TruncateUp => {
            let new_size = (blocks + rng.gen_range(1..=4)).min(FILE_BLOCKS_MAX) * block_bytes;
            if new_size <= size {
                return Err(MountError::Refused);
            }
            file.set_len(new_size)
                .map_err(|error| io(&format!("{what}: truncate up"), error))
        }
        Op::PunchHole => {
            if blocks == 0 {
                return Err(MountError::Refused);
            }
            let (ino, _) = identity(&file, &what)?;
            let first = rng.gen_range(0..blocks);
            let count = rng.gen_range(1..=4).min(blocks - first);
            state.journal.forget(dataset, ino);
            // SAFETY: a valid descriptor; the range is in bytes of the file.
            let result = unsafe {
                libc::fallocate(
                    file.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    (first * block_bytes) as libc::off_t,
                    (count * block_bytes) as libc::off_t,
                )
            };
            if result == 0 {
                Ok(())
            } else {
                Err(io(
                    &format!("{what}: punch"),
                    std::io::Error::last_os_error(),
                ))
            }
        }
        Op::Unlink => {
            let (ino, _) = identity(&file, &what)?;
            drop(file);
            state.journal.forget(dataset, ino);
            std::fs::remove_file(&path).map_err(|error| io(&format!("{what}: unlink"), error))
        }
        Op::RenameMove | Op::RenameReplace => {
            drop(file);
            let target = directory.join(format!("f{}", rng.gen_range(0..FILES_PER_DIRECTORY)));
            if target == path {
                return Err(MountError::Refused);
            }
            let target_file = match File::open(&target) {
                Ok(file) => Some(file),
                Err(error) if error.kind() == ErrorKind::NotFound => None,
                Err(error) => return Err(io(&format!("{}: open", target.display()), error)),
            };
            match (op, target_file) {
                (Op::RenameMove, None) => rename_noreplace(&path, &target)
                    .map_err(|error| io(&format!("{what}: rename"), error)),
                (Op::RenameReplace, Some(replaced)) => {
                    let (ino, _) = identity(&replaced, &target.display().to_string())?;
                    drop(replaced);
                    state.journal.forget(dataset, ino);
                    std::fs::rename(&path, &target)
                        .map_err(|error| io(&format!("{what}: rename over"), error))
                }
                _ => Err(MountError::Refused),
            }
        }
        Op::SetXattr => {
            let (ino, birth) = identity(&file, &what)?;
            let tag = Tag {
                family: state.family,
                ino,
                birth,
                offset: XATTR_OFFSET,
                generation: state.next_generation(),
                round: state.round,
            };
            let value = tag.encode(64 + rng.gen_range(0..400));
            let name = format!("{XATTR_PREFIX}{}", rng.gen_range(0..4));
            set_xattr(&file, &name, &value).map_err(|error| io(&format!("{what}: setxattr"), error))
        }
        Op::RemoveXattr => {
            let name = std::ffi::CString::new(format!("{XATTR_PREFIX}{}", rng.gen_range(0..4)))
                .expect("no NUL");
            // SAFETY: a valid descriptor and a NUL-terminated name.
            let result = unsafe { libc::fremovexattr(file.as_raw_fd(), name.as_ptr()) };
            match std::io::Error::last_os_error().raw_os_error() {
                _ if result == 0 => Ok(()),
                Some(libc::ENODATA) => Err(MountError::Refused),
                _ => Err(io(
                    &format!("{what}: removexattr"),
                    std::io::Error::last_os_error(),
                )),
            }
        }
        Op::Fsync => {
            // The kernel accepted every write(2) it now flushes: a failure here is a
            // write-back lost, not a refusal.
            if let Err(error) = file.sync_all() {
                return Err(MountError::Inconsistent(format!(
                    "{what}: fsync failed, so a write the kernel accepted was lost: {error}"
                )));
            }
            let (ino, _) = identity(&file, &what)?;
            let contents = read_verify(state, &file, &what)?;
            state.journal.fsynced(
                dataset,
                ino,
                &Promise {
                    birth: contents.birth,
                    size: contents.size,
                    generations: contents.generations,
                },
            );
            Ok(())
        }
        Op::ReadVerify => read_verify(state, &file, &what).map(|_| ()),
        _ => unreachable!("{op:?} is not a file operation"),
    }
}

fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    let from = std::ffi::CString::new(from.as_os_str().as_bytes()).expect("no NUL in paths");
    let to = std::ffi::CString::new(to.as_os_str().as_bytes()).expect("no NUL in paths");
    // SAFETY: NUL-terminated paths; AT_FDCWD with absolute paths.
    let result = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Write tagged blocks: new ones past the end (`Write`) or over existing ones (`Overwrite`).
/// A short write (direct I/O near full) or ENOSPC is the admission's answer: a refusal.
fn write_blocks(
    state: &Round,
    file: &File,
    what: &str,
    op: Op,
    rng: &mut StdRng,
) -> Result<(), MountError> {
    let size = file
        .metadata()
        .map_err(|error| state.judge(&format!("{what}: fstat"), error))?
        .len();
    let blocks = size.div_ceil(TAG_BLOCK_SIZE as u64);
    let first = if op == Op::Write || blocks == 0 {
        blocks + rng.gen_range(0..2)
    } else {
        rng.gen_range(0..blocks)
    };
    let room = FILE_BLOCKS_MAX.saturating_sub(first);
    if room == 0 {
        return Err(MountError::Refused);
    }
    let wanted = 1u64 << rng.gen_range(0..=WRITE_BLOCKS_MAX_SHIFT);
    let count = 1u64 << (63 - wanted.min(room).leading_zeros());
    let (ino, birth) = identity(file, what)?;
    let generation = state.next_generation();
    let mut data = Vec::with_capacity(count as usize * TAG_BLOCK_SIZE);
    for block in first..first + count {
        let tag = Tag {
            family: state.family,
            ino,
            birth,
            offset: block * TAG_BLOCK_SIZE as u64,
            generation,
            round: state.round,
        };
        data.extend_from_slice(&tag.encode(TAG_BLOCK_SIZE));
    }
    match file.write_at(&data, first * TAG_BLOCK_SIZE as u64) {
        Ok(written) if written == data.len() => Ok(()),
        Ok(_) => {
            state.short_writes.fetch_add(1, Ordering::Relaxed);
            Err(MountError::Refused)
        }
        Err(error) => Err(state.judge(&format!("{what}: write"), error)),
    }
}

/// Read the file whole through the mount and verify every block and tool xattr.
fn read_verify(state: &Round, file: &File, what: &str) -> Result<FileContents, MountError> {
    let (ino, birth) = identity(file, what)?;
    let size = file
        .metadata()
        .map_err(|error| state.judge(&format!("{what}: fstat"), error))?
        .len();
    let mut data = vec![0u8; size as usize];
    file.read_exact_at(&mut data, 0)
        .map_err(|error| MountError::Inconsistent(format!("{what}: read: {error}")))?;
    let mut contents = FileContents {
        birth,
        size,
        generations: Vec::new(),
        // Promises do not cover xattrs; the parent's oracle verifies them.
        xattrs: Vec::new(),
    };
    for (index, block) in data.chunks(TAG_BLOCK_SIZE).enumerate() {
        let place = Place {
            family: state.family,
            ino,
            birth,
            offset: (index * TAG_BLOCK_SIZE) as u64,
        };
        match Tag::verify(block, place) {
            Ok(BlockState::Hole) => contents.generations.push(0),
            Ok(BlockState::Tagged(tag)) => contents.generations.push(tag.generation),
            Err(why) => {
                return Err(MountError::Inconsistent(format!(
                    "{what} block {index} read through the mount: {why}"
                )))
            }
        }
    }
    Ok(contents)
}

/// The near-full phase: fill the pool's root file system with incompressible data until
/// ENOSPC, hold it while the workers write into a full pool, then give half of it back.
fn fill(state: &Round, seed: u64, done: &AtomicBool) {
    let path = state
        .layout
        .root_file_system()
        .join(format!("fill-{}", state.round));
    let Ok(file) = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
    else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut chunk = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    while !done.load(Ordering::SeqCst) {
        rng.fill(&mut chunk[..]);
        match file.write_at(&chunk, offset) {
            Ok(written) if written > 0 => offset += written as u64,
            _ => break,
        }
    }
    // Full: the workers meet ENOSPC for a while.
    let held = Instant::now();
    while !done.load(Ordering::SeqCst) && held.elapsed() < Duration::from_millis(1500) {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(file);
    if !done.load(Ordering::SeqCst) {
        let _ = std::fs::remove_file(&path);
    }
    // Older rounds' fillers go too, so the pool does not stay full forever.
    if let Ok(entries) = std::fs::read_dir(state.layout.root_file_system()) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.as_bytes().starts_with(b"fill-") && entry.path() != path {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

fn write_stamp(file_system: &Path, family: u64) -> Result<(), String> {
    let path = file_system.join(std::ffi::OsStr::from_bytes(STAMP_NAME));
    let file = File::create(&path).map_err(|error| format!("{}: {error}", path.display()))?;
    file.write_all_at(&family.to_le_bytes(), 0)
        .and_then(|()| file.sync_all())
        .map_err(|error| format!("{}: {error}", path.display()))
}

fn read_stamp(file_system: &Path) -> Result<u64, String> {
    let path = file_system.join(std::ffi::OsStr::from_bytes(STAMP_NAME));
    let bytes = std::fs::read(&path).map_err(|error| format!("{}: {error}", path.display()))?;
    let bytes: [u8; 8] = bytes
        .try_into()
        .map_err(|_| format!("{}: not 8 bytes", path.display()))?;
    Ok(u64::from_le_bytes(bytes))
}

/// SIGKILL the run's daemon, if one runs, and wait until it is gone.
fn kill_daemon(layout: &Layout) {
    let pid_path = PathBuf::from(format!("{}.pid", layout.socket.display()));
    let Some(pid) = std::fs::read_to_string(&pid_path)
        .ok()
        .and_then(|text| text.trim().parse::<i32>().ok())
    else {
        return;
    };
    // SAFETY: kill has no memory preconditions; a stale pid is checked below first.
    let alive = |pid| unsafe { libc::kill(pid, 0) } == 0;
    if !alive(pid) || !is_tarn_daemon(pid) {
        return;
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    abort_fuse_connections(layout);
    let started = Instant::now();
    while alive(pid) && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Abort the FUSE connection of every mount below the run's altroot, as `umount -f` does for
/// FUSE, without touching the mounts themselves. A daemon killed while one of its own threads
/// waits in the kernel for a request to its own mount (the syncfs before a snapshot, whose
/// request a worker had already taken) cannot exit: the kernel waits for that request's answer
/// uninterruptibly, the dying process keeps `/dev/fuse` open, and no answer ever comes. Its
/// mounts then hang every process that touches them (reading the daemon's
/// `/proc/PID/cmdline` included), and the functional suite once timed out so. Aborting the
/// connection fails the request and lets the process go. The connection is named by the
/// mount's device minor, read from `/proc/self/mountinfo` (a `stat` of the mount point would
/// hang).
fn abort_fuse_connections(layout: &Layout) {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(separator) = fields.iter().position(|field| *field == "-") else {
            continue;
        };
        let (Some(device), Some(point), Some(kind)) =
            (fields.get(2), fields.get(4), fields.get(separator + 1))
        else {
            continue;
        };
        if !kind.starts_with("fuse") || !Path::new(point).starts_with(&layout.altroot) {
            continue;
        }
        if let Some((_, minor)) = device.split_once(':') {
            let abort = format!("/sys/fs/fuse/connections/{minor}/abort");
            if let Err(why) = std::fs::write(&abort, b"1") {
                log::warn!("{abort}: {why}");
            }
        }
    }
}

/// Whether `pid` is a tarn daemon (a pid file may outlive its process and its number be reused).
fn is_tarn_daemon(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|cmdline| {
            cmdline
                .split(|&byte| byte == 0)
                .any(|argument| argument == b"daemon")
        })
        .unwrap_or(false)
}

/// Ask the daemon to stop (after a clean export it holds no pool).
fn stop_daemon(options: &MountOptions, layout: &Layout) {
    let _ = tarn(options, layout, &["daemon", "--stop"]);
    kill_daemon(layout);
}

/// Detach every mount below the run's altroot, deepest first (a killed daemon leaves them
/// answering ENOTCONN).
fn detach_mounts(layout: &Layout) {
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return;
    };
    let mut below: Vec<String> = mounts
        .lines()
        .filter_map(|line| line.split(' ').nth(1))
        .filter(|point| Path::new(point).starts_with(&layout.altroot))
        .map(str::to_string)
        .collect();
    below.sort_by_key(|point| std::cmp::Reverse(point.len()));
    for point in below {
        let _ = Command::new("umount").arg("-l").arg(&point).status();
    }
}

/// Keep a failure's evidence under `DIR/failures/mount-SEED-rROUND/`; returns where.
fn keep_failure(
    options: &MountOptions,
    layout: &Layout,
    round: u64,
    problems: &[String],
) -> String {
    let target = options
        .failures_dir
        .join("failures")
        .join(format!("mount-{}-r{round}", options.seed));
    if let Err(why) = std::fs::create_dir_all(&target) {
        return format!("nowhere: {}: {why}", target.display());
    }
    let mut notes = Vec::new();
    for (from, to) in [
        (layout.dir.join("crashed"), target.join("crashed")),
        (layout.pool.clone(), target.join("pool")),
    ] {
        if let Err(why) = copy_sparse(&from, &to) {
            notes.push(why);
        }
    }
    let daemon_log = PathBuf::from(format!("{}.log", layout.socket.display()));
    for (from, name) in [
        (journal_path(&layout.dir), "journal"),
        (daemon_log, "daemon.log"),
    ] {
        if let Err(why) = std::fs::copy(&from, target.join(name)) {
            notes.push(format!("{name}: {why}"));
        }
    }
    let text = format!(
        "mount mode, seed {seed}, round {round}, {threads} threads\n\
         again: tarn-stress --mount --seed {seed} --duration SECONDS --dir NEW_DIR\n\
         (the kernel and the threads make timing vary: a seed fixes the choices, not the interleaving)\n\n\
         {problems}\n{notes}",
        seed = options.seed,
        threads = options.threads,
        problems = problems.join("\n"),
        notes = notes.join("\n"),
    );
    let _ = std::fs::write(target.join("failure.txt"), text);
    target.display().to_string()
}
