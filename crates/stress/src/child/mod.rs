//! The child: one process that imports the pool, runs worker threads of random operations
//! until its end or its self-inflicted SIGKILL, and journals what it promised.
//!
//! # Theory
//! ztest runs its operations in a child process so that the parent outlives every crash. So
//! does this: the parent re-executes its own binary with the hidden `--child-round` flag, and
//! the child
//! 1. imports the pool and opens every file system the tool made (re-stamping one whose stamp
//!    a crash prevented: it holds nothing else), creating some if fewer than
//!    [`FILE_SYSTEMS_MIN`] exist, and makes the mirror and the RAID-Z vdev whole again if the
//!    last child died in the middle of a device operation (first repairing by a scrub what it left of injected
//!    write corruption, [`faults`]), destroys the filler file system if it died in a
//!    near-full phase ([`space`]), and imports the second pool, which sends go into
//!    (`replication.rs`);
//! 2. runs `threads` workers; each draws operations from the table of [`crate::ops`] with its
//!    own RNG, seeded from the round's seed and its index, so that a seed fixes each worker's
//!    sequence of choices (with one worker, the whole run's);
//! 3. dies by SIGKILL at the moment its plan says (a time, or with one worker a number of
//!    operations, so that a replay dies at the same point), in the rounds the plan says
//!    after cutting the power of every device of the pool at once (see [`power`]: unflushed
//!    writes are lost, torn or kept), or at its end exports both pools and exits 0.
//!
//! # Who touches what
//! Worker `k` works only on the files of directory `tK` of each file system (files `f0` to
//! `f7`), so the operations on one file come from one thread in order, and a file read back
//! after its own fsync shows exactly what that fsync covered. Locks order the rest:
//! - the pool lock: every operation holds it shared; export and import hold it exclusively,
//!   so every thread is paused around them;
//! - each file system's lock: file operations hold it shared; a rollback, a destroy or a
//!   rename holds it exclusively, so that no fsync is promised about a file while its file
//!   system is being rolled back or renamed, and a destroy or a rename finds nothing open (a
//!   renamed file system gets a new registry entry; the old one is left empty, and an
//!   operation that picked it is refused);
//! - the devices lock: every device operation, fault injection ([`faults`]: faults go on one
//!   side only), damage ([`damage`]) and scan request holds it, so device operations run one
//!   at a time and each sees its resilver through (a scan cancel also ends a resilver); each
//!   starts from a whole mirror and RAID-Z vdev and leaves them so ([`heal_devices`]), so
//!   none takes away the last redundancy, and the pool never loses data the oracle then
//!   blames on the engine. It
//!   is taken through [`Child::lock_devices`], which first settles damage left pending;
//! - the registry of file systems (a plain mutex, held only to copy or change the list);
//! - the second pool's lock, its set of copies being received into, and its list of sends
//!   under way: sends hold the first pool's lock and the second's shared, and no lock of a
//!   file system (a send reads snapshots, and only the engine's holds keep them while it
//!   does); one receive into a copy at a time; a snapshot destroy looks at the sends under
//!   way to check their holds (`replication.rs`).
//!
//! Where more than one is held, the pool lock comes first, then the second pool's lock or a
//! file system's or the devices lock (never two of these three); the registry, the set of
//! copies and the list of sends come last and are held only briefly.
//!
//! The near-full phase ([`space`]) writes only into its own file system, which is not in the
//! registry; one phase runs at a time.
//!
//! # Outcomes
//! An operation the engine refuses (a name taken, a snapshot with clones, no space) is part
//! of the game and is counted (refusals for space apart, [`space`]: near full they are the
//! expected answer). An engine error that means damage (corruption, a failed sync,
//! a suspended pool), a tag that does not verify, or a panic, ends the child with
//! [`EXIT_INCONSISTENT`](crate::exit_status::EXIT_INCONSISTENT) or [`EXIT_PANIC`](crate::exit_status::EXIT_PANIC), its pool left as it was for the parent to keep.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tarn::fs::{
    FileSystem, FsError, SetAttr, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, RENAME_NOREPLACE,
};
use tarn::pool::holds::Holder;
use tarn::pool::scan::ScanFunction;
use tarn::pool::{ImportOptions, Pool, PoolError};
use tarn::tunables::Tunables;
use tarn::types::Txg;

mod damage;
mod devices;
mod faults;
mod hostile;
mod outcomes;
mod power;
mod raidz;
mod replication;
mod resilver;
mod space;
mod user_holds;

use devices::{
    create_device_file, drive_scan, flush_before_wipe, heal_devices, replacement_path, two_sides,
    uberblock_txgs, wipe_device,
};
pub use devices::{raidz_child_file, MIRROR_PREFIX, RAIDZ_CHILD_SIZE, SECOND_VDEV};
pub use faults::{fault_counts_path, read_fault_counts};
pub use outcomes::{outcome_counts_path, read_outcome_counts};
pub use replication::{replica_dir, REPLICA_POOL_NAME, REPLICA_VDEV};
pub use space::FILLER;
pub use space::{read_space_counts, space_counts_path};

use crate::exit_status::{EXIT_INCONSISTENT, EXIT_INTERNAL, EXIT_PANIC};
use crate::journal::{JournalWriter, Promise};
use crate::ops::{Op, OpChooser};
use crate::oracle::{read_stamp, verify_file, verify_tree, write_stamp, XATTR_PREFIX};
use crate::tag::{birth_of, mix, Tag, TAG_BLOCK_SIZE, XATTR_OFFSET};

/// Files per worker directory.
const FILES_PER_DIRECTORY: u64 = 8;
/// The largest file the tool makes, in tagged blocks (256 KiB).
const FILE_BLOCKS_MAX: u64 = 64;
/// The most blocks one write covers (a power of two: see [`FileAt::write_blocks`]).
const WRITE_BLOCKS_MAX_SHIFT: u32 = 4;
/// File systems (heads) the child keeps at least, and at most.
pub const FILE_SYSTEMS_MIN: usize = 2;
const FILE_SYSTEMS_MAX: usize = 6;
/// Snapshots the pool keeps at most: snapshots are taken a little more often than they are
/// destroyed, and without a bound a long run would fill the pool with them.
const SNAPSHOTS_MAX: usize = 24;

/// How the child's life ends.
#[derive(Clone, Copy, Debug)]
pub enum Death {
    /// SIGKILL itself this long after it starts working.
    AfterTime(Duration),
    /// SIGKILL itself after this many operations (one worker: deterministic).
    AfterOperations(u64),
}

/// Everything the parent tells a child.
#[derive(Clone, Debug)]
pub struct ChildPlan {
    pub dir: PathBuf,
    /// Die by a power cut of the pool's devices, seeded so (see [`power`]), rather than by
    /// a SIGKILL alone.
    pub power_cut: Option<u64>,
    pub pool_name: String,
    pub round: u64,
    pub seed: u64,
    pub threads: usize,
    /// Work this long, then export and exit 0 (unless death comes first).
    pub run_for: Duration,
    pub death: Death,
    pub tunables: Tunables,
    /// Operations left out (`--exclude`, a diagnostic).
    pub excluded: Vec<Op>,
}

/// Where the child leaves its counts for the parent (overwritten; see [`Child::report`]).
pub fn counts_path(dir: &std::path::Path) -> PathBuf {
    dir.join("child-counts")
}

/// Where the pool's vdevs live in a run directory.
pub fn pool_dir(dir: &std::path::Path) -> PathBuf {
    dir.join("pool")
}

/// Why an operation did not happen.
enum OpError {
    /// The engine (or the tool's own precondition) declined: counted, not a failure.
    Refused(String),
    /// Something is wrong: the child stops.
    Inconsistent(String),
}

type OpResult = Result<(), OpError>;

impl From<FsError> for OpError {
    fn from(error: FsError) -> OpError {
        match error {
            FsError::Corrupt(_) | FsError::Engine(_) => OpError::Inconsistent(error.to_string()),
            _ => OpError::Refused(error.to_string()),
        }
    }
}

impl From<PoolError> for OpError {
    fn from(error: PoolError) -> OpError {
        match error {
            PoolError::Fs(error) => error.into(),
            PoolError::BadDatasetName(..)
            | PoolError::DatasetNotFound(_)
            | PoolError::DatasetExists(_)
            | PoolError::DatasetBusy(..)
            | PoolError::BadProperty(_)
            | PoolError::Refused(_)
            | PoolError::OutOfSpace(_)
            | PoolError::BadVdevSpec(_)
            | PoolError::ReadOnly => OpError::Refused(error.to_string()),
            PoolError::QuotaExceeded(_)
            | PoolError::Object(
                tarn::object::ObjectError::NoSpace | tarn::object::ObjectError::QuotaExceeded,
            ) => OpError::Refused(error.to_string()),
            _ => OpError::Inconsistent(error.to_string()),
        }
    }
}

/// Every operation finds the pool open: export and import hold the pool lock throughout,
/// and put the pool back even when they fail. Were it missing, every operation would be
/// refused at once, forever: so it is the tool's failure.
fn pool_missing() -> OpError {
    OpError::Inconsistent("the tool's own error: the pool is not open".into())
}

/// The users files are made for and given to (root and two others), each with a group of
/// its own, so that usage by owner has several owners to keep apart.
const OWNER_IDS: [u32; 3] = [0, 1000, 1001];

/// An owner (uid, gid) at random.
fn owner_at(rng: &mut StdRng) -> (u32, u32) {
    let uid = OWNER_IDS[rng.gen_range(0..OWNER_IDS.len())];
    (uid, uid + 100)
}

fn refused<T>(why: &str) -> Result<T, OpError> {
    Err(OpError::Refused(why.to_string()))
}

/// The variants of an export and import.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reimport {
    Plain,
    /// Import at the txg one or two before the newest (an explicit rewind).
    Rewind,
    /// Wipe a mirror side while exported; it is found blank at import and replaced.
    WipeSide,
}

/// One file system the child works in.
struct FileSystemSlot {
    name: String,
    family: u64,
    /// None while (and after) it is destroyed, and while the pool is exported.
    fs: RwLock<Option<FileSystem>>,
}

/// The child's shared state.
struct Child {
    plan: ChildPlan,
    pool: RwLock<Option<Pool>>,
    slots: Mutex<Vec<Arc<FileSystemSlot>>>,
    journal: JournalWriter,
    chooser: OpChooser,
    /// What the injected faults did.
    faults: faults::FaultCounts,
    /// The device model, in a round that ends in a power cut.
    power: Option<power::PowerCut>,
    /// Low 32 bits of the next write generation (the round is the high 32).
    generation_counter: AtomicU64,
    /// Makes names of new snapshots and file systems unique within the round.
    name_counter: AtomicU64,
    /// Held through each device operation: one at a time, each leaving the mirror whole.
    /// Taken with [`Child::lock_devices`], which settles pending damage first.
    devices: Mutex<()>,
    /// Copies damaged on one side whose scrub has not been judged yet ([`damage`]).
    damage: Mutex<Option<damage::PendingDamage>>,
    /// The second pool, which sends go into (see [`replication`]).
    replica: replication::Replica,
    operations: AtomicU64,
    refusals: AtomicU64,
    imports: AtomicU64,
    stop: AtomicBool,
}

/// The child's entry point; never returns.
pub fn child_main(plan: ChildPlan) -> ! {
    std::panic::set_hook(Box::new(|info| {
        if power::power_is_cut() {
            eprintln!("tarn-stress child: after the power cut: panic: {info}");
            sigkill_self();
        }
        eprintln!("tarn-stress child: panic: {info}");
        std::process::exit(EXIT_PANIC);
    }));
    let journal =
        JournalWriter::open(&crate::journal::journal_path(&plan.dir)).unwrap_or_else(|error| {
            eprintln!("tarn-stress child: cannot open the journal: {error}");
            std::process::exit(EXIT_INTERNAL)
        });
    let child = Arc::new(Child {
        plan: plan.clone(),
        pool: RwLock::new(None),
        slots: Mutex::new(Vec::new()),
        journal,
        chooser: OpChooser::excluding(&plan.excluded),
        faults: faults::FaultCounts::default(),
        power: plan.power_cut.map(power::PowerCut::new),
        generation_counter: AtomicU64::new(0),
        name_counter: AtomicU64::new(0),
        devices: Mutex::new(()),
        damage: Mutex::new(None),
        replica: replication::Replica::default(),
        operations: AtomicU64::new(0),
        refusals: AtomicU64::new(0),
        imports: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    log::info!(
        "round {}: child {} starts, seed {}, {} threads, {:?}",
        plan.round,
        std::process::id(),
        plan.seed,
        plan.threads,
        plan.death
    );
    let mut setup_rng = StdRng::seed_from_u64(mix(plan.seed ^ 0x5e7u64));
    if let Err(why) = child.setup(&mut setup_rng) {
        child.fail(&why);
    }
    if let Death::AfterTime(after) = plan.death {
        let killer = child.clone();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            killer.die();
        });
    }
    let end = Instant::now() + plan.run_for;
    let workers: Vec<_> = (0..plan.threads)
        .map(|index| {
            let child = child.clone();
            let rng = StdRng::seed_from_u64(mix(plan.seed ^ mix(index as u64 + 1)));
            std::thread::spawn(move || child.work(index, rng, end))
        })
        .collect();
    for worker in workers {
        // A panic has already ended the process through the hook.
        let _ = worker.join();
    }
    let pool = child.pool.write().take();
    child.slots.lock().clear();
    if let Some(pool) = pool {
        outcomes::note_livelist_work(&pool);
        if let Err(error) = pool.export() {
            child.fail(&format!("export at the end of the round: {error}"));
        }
    }
    if let Err(why) = child.export_replica() {
        child.fail(&why);
    }
    child.report();
    std::process::exit(0)
}

impl Child {
    /// Import the pool and open (or make) the file systems.
    fn setup(&self, rng: &mut StdRng) -> Result<(), String> {
        let pool = self.import(None)?;
        faults::repair_leftover_corruption(&pool, &self.plan.dir)?;
        self.remove_leftover_filler(&pool)?;
        self.import_replica()?;
        if let Err(OpError::Refused(why) | OpError::Inconsistent(why)) =
            heal_devices(&pool, &self.plan.dir)
        {
            return Err(format!("bringing the vdevs back whole: {why}"));
        }
        *self.slots.lock() = open_file_systems(&pool, rng)?;
        *self.pool.write() = Some(pool);
        while self.slots.lock().len() < FILE_SYSTEMS_MIN {
            match self.create_file_system(rng) {
                Ok(()) => {}
                Err(OpError::Refused(why) | OpError::Inconsistent(why)) => {
                    return Err(format!("creating a file system at the start: {why}"))
                }
            }
        }
        Ok(())
    }

    /// Import the pool, at the newest txg or at `rewind_to`.
    fn import(&self, rewind_to: Option<Txg>) -> Result<Pool, String> {
        let mut options =
            ImportOptions::new(vec![pool_dir(&self.plan.dir)], self.plan.tunables.clone());
        options.rewind_to = rewind_to;
        options.wrap_device = self.power.as_ref().map(power::PowerCut::wrapper);
        let (pool, _) = Pool::import(&self.plan.pool_name, options).map_err(|error| {
            format!(
                "import{}: {error}",
                rewind_to.map_or(String::new(), |txg| format!(" rewound to txg {txg}"))
            )
        })?;
        self.imports.fetch_add(1, Ordering::Relaxed);
        Ok(pool)
    }

    /// Import rewound to the first of `candidates` (txgs, newest first) whose uberblock
    /// the pool layer takes. Ring entries written before a device change carry another
    /// vdev guid sum and are not this pool's any more; they are passed over, as `import`
    /// passes over them. Without any, a plain import (and the rewind is not counted).
    fn import_rewound(&self, candidates: &[u64]) -> Result<Pool, String> {
        for &txg in candidates {
            match self.import(Some(Txg(txg))) {
                Ok(pool) => return Ok(pool),
                Err(why) if why.contains("no valid uberblock of txg") => {
                    log::warn!("{why}; trying an older txg");
                }
                // A RAID-Z expansion's copy moved since that txg: its old places may be
                // overwritten, and the pool layer refuses to open it (as OpenZFS does).
                Err(why) if why.contains("cannot rewind across it") => {
                    log::info!("{why}");
                    outcomes::note("rewind refused across a raidz expansion's copy");
                }
                Err(why) => return Err(why),
            }
        }
        log::warn!("no uberblock among {candidates:?} opens: importing unrewound");
        self.import(None)
    }

    /// Leave the counts for the parent: operations, refusals, imports.
    fn report(&self) {
        let text = format!(
            "{} {} {}\n",
            self.operations.load(Ordering::SeqCst),
            self.refusals.load(Ordering::SeqCst),
            self.imports.load(Ordering::SeqCst)
        );
        let _ = std::fs::write(counts_path(&self.plan.dir), text);
        self.faults.report(&self.plan.dir);
        space::report(&self.plan.dir);
        outcomes::report(&self.plan.dir);
    }

    /// The planned crash: a SIGKILL, after a power cut if the plan says so.
    fn die(&self) -> ! {
        // The workers run on: the pool may be locked for a reimport, and then goes uncounted.
        if let Some(pool) = self.pool.try_read() {
            if let Some(pool) = pool.as_ref() {
                outcomes::note_livelist_work(pool);
            }
        }
        self.report();
        if let Some(power) = &self.power {
            let outcome = power.cut(&self.journal);
            log::info!("round {}: {outcome}", self.plan.round);
            eprintln!("tarn-stress child: round {}: {outcome}", self.plan.round);
        }
        sigkill_self()
    }

    /// An inconsistency: journal it, and end the child with the pool as it is. After a power
    /// cut it is the cut's doing, not the engine's: the child dies as planned.
    fn fail(&self, why: &str) -> ! {
        if power::power_is_cut() {
            log::info!("after the power cut: {why}");
            sigkill_self();
        }
        log::error!("inconsistency: {why}");
        eprintln!("tarn-stress child: inconsistency: {why}");
        self.journal.failure(why);
        self.report();
        std::process::exit(EXIT_INCONSISTENT)
    }

    /// Take the devices lock, and settle the damage a [`damage`] operation left pending:
    /// whoever takes it next may take a side away or damage copies, which the judgment of the
    /// scrub after the damage must not see.
    fn lock_devices(&self, pool: &Pool) -> Result<parking_lot::MutexGuard<'_, ()>, OpError> {
        let devices = self.devices.lock();
        self.settle_damage(pool)?;
        Ok(devices)
    }

    fn next_generation(&self) -> u64 {
        let counter = self.generation_counter.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(counter < 1 << 32, "a round ran out of write generations");
        (self.plan.round << 32) | counter
    }

    fn unique_name(&self) -> String {
        let counter = self.name_counter.fetch_add(1, Ordering::SeqCst);
        format!("r{}n{counter}", self.plan.round)
    }

    /// A worker: draw, run, count, until the end, the stop flag or the planned death.
    fn work(&self, index: usize, mut rng: StdRng, end: Instant) {
        while Instant::now() < end && !self.stop.load(Ordering::SeqCst) {
            let op = self.chooser.choose(&mut rng);
            log::trace!("worker {index}: {op:?}");
            match self.run(op, index, &mut rng) {
                Ok(()) => log::trace!("worker {index}: {op:?} done"),
                Err(OpError::Refused(why)) => {
                    self.refusals.fetch_add(1, Ordering::Relaxed);
                    space::note_refusal(&why);
                    log::debug!("worker {index}: {op:?} refused: {why}");
                    self.check_not_suspended();
                }
                Err(OpError::Inconsistent(why)) => self.fail(&format!("{op:?}: {why}")),
            }
            self.check_finished_scrub();
            let done = self.operations.fetch_add(1, Ordering::SeqCst) + 1;
            if let Death::AfterOperations(count) = self.plan.death {
                if done >= count {
                    self.die();
                }
            }
        }
    }

    /// A scrub that finished since the last look, whoever started it (`ScrubStart`'s run in
    /// the background, beside every other operation), has its coverage checked as the scrubs
    /// the tool drives itself do ([`devices::check_scrub_coverage`]); the engine hands each
    /// finished scrub's record out once, so this costs a look at the scan state per operation.
    fn check_finished_scrub(&self) {
        let pool_guard = self.pool.read();
        let Some(pool) = pool_guard.as_ref() else {
            return;
        };
        if let Err(OpError::Inconsistent(why)) = devices::check_scrub_coverage(pool) {
            self.fail(&format!("a finished scrub: {why}"));
        }
    }

    /// Faults are injected on one side of the mirror at most, so a suspended pool (a write
    /// that reached no copy) is a bug.
    fn check_not_suspended(&self) {
        let failure = self
            .pool
            .read()
            .as_ref()
            .and_then(|pool| pool.core.txgs.failure());
        if let Some(why) = failure {
            self.fail(&format!("the pool is suspended: {why}"));
        }
    }

    fn run(&self, op: Op, index: usize, rng: &mut StdRng) -> OpResult {
        match op {
            Op::Write
            | Op::Overwrite
            | Op::TruncateDown
            | Op::TruncateUp
            | Op::PunchHole
            | Op::Unlink
            | Op::RenameMove
            | Op::RenameReplace
            | Op::SetXattr
            | Op::RemoveXattr
            | Op::Chown
            | Op::SetProject
            | Op::Fsync
            | Op::ReadVerify => self.file_op(op, index, rng),
            Op::ExportImport => self.export_import(Reimport::Plain, rng),
            Op::RewindImport => self.export_import(Reimport::Rewind, rng),
            Op::MirrorWipeReappear => self.export_import(Reimport::WipeSide, rng),
            Op::SendFull | Op::SendIncremental | Op::SendResumed | Op::HostileReceive => {
                self.replicate(op, rng)
            }
            Op::RenameFileSystem => self.rename_file_system(rng),
            Op::SetUserProperty => self.set_user_property(index, rng),
            _ => self.pool_op(op, rng),
        }
    }

    /// A file system of the registry, at random.
    fn pick_slot(&self, rng: &mut StdRng) -> Result<Arc<FileSystemSlot>, OpError> {
        let slots = self.slots.lock();
        if slots.is_empty() {
            return refused("no file system");
        }
        Ok(slots[rng.gen_range(0..slots.len())].clone())
    }

    fn file_op(&self, op: Op, index: usize, rng: &mut StdRng) -> OpResult {
        let pool_guard = self.pool.read();
        if pool_guard.is_none() {
            return Err(pool_missing());
        }
        let slot = self.pick_slot(rng)?;
        let fs_guard = slot.fs.read();
        let Some(fs) = fs_guard.as_ref() else {
            return refused("the file system is being destroyed");
        };
        let directory_name = format!("t{index}");
        let directory = match fs.lookup(fs.root(), directory_name.as_bytes()) {
            Ok(attr) => attr.ino,
            Err(FsError::NotFound) => {
                fs.mkdir(fs.root(), directory_name.as_bytes(), 0o755, 0, 0)?
                    .ino
            }
            Err(error) => return Err(error.into()),
        };
        let name = format!("f{}", rng.gen_range(0..FILES_PER_DIRECTORY));
        let existing = match fs.lookup(directory, name.as_bytes()) {
            Ok(attr) => Some(attr),
            Err(FsError::NotFound) => None,
            Err(error) => return Err(error.into()),
        };
        let file = FileAt {
            child: self,
            slot: &slot,
            fs,
        };
        if let (Op::Write | Op::Overwrite, None) = (op, &existing) {
            let (uid, gid) = owner_at(rng);
            let attr = fs.create(directory, name.as_bytes(), 0o644, uid, gid)?;
            return file.write_blocks(op, attr, rng);
        }
        let Some(attr) = existing else {
            return refused("no such file");
        };
        let blocks = attr.size.div_ceil(TAG_BLOCK_SIZE as u64);
        let block_bytes = TAG_BLOCK_SIZE as u64;
        match op {
            Op::Write | Op::Overwrite => file.write_blocks(op, attr, rng),
            Op::TruncateDown => {
                if blocks == 0 {
                    return refused("empty file");
                }
                let size = rng.gen_range(0..blocks) * block_bytes;
                self.journal.forget(&slot.name, attr.ino);
                fs.setattr(
                    attr.ino,
                    SetAttr {
                        size: Some(size),
                        ..SetAttr::default()
                    },
                )?;
                Ok(())
            }
            Op::TruncateUp => {
                let size = (blocks + rng.gen_range(1..=4)).min(FILE_BLOCKS_MAX) * block_bytes;
                if size <= attr.size {
                    return refused("file at its largest");
                }
                fs.setattr(
                    attr.ino,
                    SetAttr {
                        size: Some(size),
                        ..SetAttr::default()
                    },
                )?;
                Ok(())
            }
            Op::PunchHole => {
                if blocks == 0 {
                    return refused("empty file");
                }
                let first = rng.gen_range(0..blocks);
                let count = rng.gen_range(1..=4).min(blocks - first);
                self.journal.forget(&slot.name, attr.ino);
                fs.fallocate(
                    attr.ino,
                    first * block_bytes,
                    count * block_bytes,
                    FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                )?;
                Ok(())
            }
            Op::Unlink => {
                self.journal.forget(&slot.name, attr.ino);
                fs.unlink(directory, name.as_bytes())?;
                Ok(())
            }
            Op::RenameMove | Op::RenameReplace => {
                let target = format!("f{}", rng.gen_range(0..FILES_PER_DIRECTORY));
                if target == name {
                    return refused("renaming a file to itself");
                }
                let target_attr = match fs.lookup(directory, target.as_bytes()) {
                    Ok(attr) => Some(attr),
                    Err(FsError::NotFound) => None,
                    Err(error) => return Err(error.into()),
                };
                match (op, target_attr) {
                    (Op::RenameMove, None) => {
                        fs.rename(
                            directory,
                            name.as_bytes(),
                            directory,
                            target.as_bytes(),
                            RENAME_NOREPLACE,
                        )?;
                    }
                    (Op::RenameReplace, Some(replaced)) => {
                        self.journal.forget(&slot.name, replaced.ino);
                        fs.rename(directory, name.as_bytes(), directory, target.as_bytes(), 0)?;
                    }
                    _ => return refused("the target name is not in the state the rename wants"),
                }
                Ok(())
            }
            Op::SetXattr => {
                let tag = Tag {
                    family: slot.family,
                    ino: attr.ino,
                    birth: birth_of(&attr),
                    offset: XATTR_OFFSET,
                    generation: self.next_generation(),
                    round: self.plan.round,
                };
                let value = tag.encode(64 + rng.gen_range(0..400));
                let xattr = format!("{XATTR_PREFIX}{}", rng.gen_range(0..4));
                fs.setxattr(attr.ino, xattr.as_bytes(), &value, 0)?;
                Ok(())
            }
            Op::RemoveXattr => {
                let xattr = format!("{XATTR_PREFIX}{}", rng.gen_range(0..4));
                fs.removexattr(attr.ino, xattr.as_bytes())?;
                Ok(())
            }
            Op::Fsync => {
                fs.fsync(attr.ino)?;
                let contents = file.verify(attr.ino)?;
                self.journal.fsynced(
                    &slot.name,
                    attr.ino,
                    &Promise {
                        birth: contents.birth,
                        size: contents.size,
                        generations: contents.generations,
                    },
                );
                Ok(())
            }
            Op::ReadVerify => file.verify(attr.ino).map(|_| ()),
            Op::Chown => {
                let (uid, gid) = owner_at(rng);
                fs.setattr(
                    attr.ino,
                    SetAttr {
                        uid: Some(uid),
                        gid: Some(gid),
                        ..SetAttr::default()
                    },
                )?;
                Ok(())
            }
            Op::SetProject => {
                fs.set_project(attr.ino, rng.gen_range(0..3), false)?;
                Ok(())
            }
            _ => unreachable!("{op:?} is not a file operation"),
        }
    }

    fn pool_op(&self, op: Op, rng: &mut StdRng) -> OpResult {
        let pool_guard = self.pool.read();
        let Some(pool) = pool_guard.as_ref() else {
            return Err(pool_missing());
        };
        match op {
            Op::Snapshot => {
                let slot = self.pick_slot(rng)?;
                if pool.snapshots().len() >= SNAPSHOTS_MAX {
                    return refused("enough snapshots");
                }
                let name = format!("{}@s{}", slot.name, self.unique_name());
                pool.create_snapshots(&[name], false)?;
                Ok(())
            }
            Op::Clone => {
                if self.slots.lock().len() >= FILE_SYSTEMS_MAX {
                    return refused("enough file systems");
                }
                let snapshot = self.pick_snapshot(pool, rng)?;
                let name = format!("{}/c{}", pool.name(), self.unique_name());
                pool.create_clone(&snapshot, &name, &[])?;
                let fs = pool.open_file_system(&name)?;
                let Some(family) = read_stamp(&fs)? else {
                    return Err(OpError::Inconsistent(format!(
                        "{name}, a clone of {snapshot}, has no stamp"
                    )));
                };
                self.register(name, family, fs);
                Ok(())
            }
            Op::Promote => {
                let registered: Vec<String> = self
                    .slots
                    .lock()
                    .iter()
                    .map(|slot| slot.name.clone())
                    .collect();
                let clones: Vec<String> = pool
                    .datasets()
                    .into_iter()
                    .filter(|info| info.origin.is_some() && registered.contains(&info.name))
                    .map(|info| info.name)
                    .collect();
                if clones.is_empty() {
                    return refused("no clone");
                }
                pool.promote(&clones[rng.gen_range(0..clones.len())])?;
                Ok(())
            }
            Op::Rollback => {
                let slot = self.pick_slot(rng)?;
                let snapshots = pool.core.snapshots_of(&slot.name)?;
                if snapshots.is_empty() {
                    return refused("no snapshot");
                }
                let snapshot = &snapshots[rng.gen_range(0..snapshots.len())].name;
                let fs_guard = slot.fs.write();
                if fs_guard.is_none() {
                    return refused("the file system is being destroyed");
                }
                // The file system stays open, as a mount does: the engine resets it in place.
                self.journal.drop_dataset(&slot.name);
                pool.rollback(snapshot, true)?;
                Ok(())
            }
            Op::Hold => {
                // A long hold (as a send takes) on a snapshot: while it is held, a destroy
                // must be refused, and the snapshot must read back whole.
                let snapshot = self.pick_snapshot(pool, rng)?;
                let hold = pool.long_hold(&snapshot, Holder::Send)?;
                if let Ok(names) = pool.destroy_snapshots(&snapshot, false) {
                    return Err(OpError::Inconsistent(format!(
                        "{snapshot} was destroyed while held: {names:?}"
                    )));
                }
                let fs = pool.snapshot_file_system(&snapshot)?;
                let mut problems = Vec::new();
                verify_tree(&fs, &snapshot, self.plan.round, &mut problems);
                drop(hold);
                if !problems.is_empty() {
                    return Err(OpError::Inconsistent(problems.join("; ")));
                }
                Ok(())
            }
            Op::DestroySnapshot => {
                let snapshot = self.pick_snapshot(pool, rng)?;
                let sending = self.replica.sends_reading(&snapshot);
                pool.destroy_snapshots(&snapshot, false)?;
                sending.check(&snapshot)
            }
            Op::DestroyFileSystem => {
                if self.slots.lock().len() <= FILE_SYSTEMS_MIN {
                    return refused("too few file systems");
                }
                let slot = self.pick_slot(rng)?;
                pool.destroy_plan(&slot.name, true, false)?;
                let mut fs_guard = slot.fs.write();
                if fs_guard.is_none() {
                    return refused("the file system is being destroyed");
                }
                self.journal.drop_dataset(&slot.name);
                drop(fs_guard.take());
                match pool.destroy_datasets(&slot.name, true, false) {
                    Ok(_) => {
                        self.slots.lock().retain(|other| !Arc::ptr_eq(other, &slot));
                        Ok(())
                    }
                    Err(error) => {
                        *fs_guard = Some(pool.open_file_system(&slot.name)?);
                        Err(error.into())
                    }
                }
            }
            Op::CreateFileSystem => {
                drop(pool_guard);
                if self.slots.lock().len() >= FILE_SYSTEMS_MAX {
                    return refused("enough file systems");
                }
                self.create_file_system(rng)
            }
            Op::SetCompression | Op::SetChecksum | Op::SetRecordsize | Op::SetCopies => {
                let (property, values): (&str, &[&str]) = match op {
                    Op::SetCompression => ("compression", &["off", "lz4", "zstd", "zstd-3"]),
                    Op::SetChecksum => ("checksum", &["fletcher4", "blake3", "sha256"]),
                    Op::SetRecordsize => ("recordsize", &["4096", "8192", "16384", "131072"]),
                    _ => ("copies", &["1", "2", "3"]),
                };
                let slot = self.pick_slot(rng)?;
                let value = values[rng.gen_range(0..values.len())];
                pool.set_property(&slot.name, property, Some(value))?;
                if let Some(fs) = slot.fs.read().as_ref() {
                    pool.apply_properties(&slot.name, fs)?;
                }
                Ok(())
            }
            Op::SetSpaceLimit => {
                let slot = self.pick_slot(rng)?;
                let property =
                    ["quota", "refquota", "reservation", "refreservation"][rng.gen_range(0..4)];
                let value = if rng.gen_range(0..4) == 0 {
                    "none".to_string()
                } else {
                    let info = pool
                        .datasets()
                        .into_iter()
                        .find(|info| info.name == slot.name)
                        .ok_or_else(|| OpError::Refused("the file system went".into()))?;
                    // Quotas a little above what is held, so that writes meet them soon;
                    // reservations of up to a tenth of the small pool.
                    let value = match property {
                        "quota" => info.used + rng.gen_range(1u64..(2 << 20)),
                        "refquota" => info.referenced + rng.gen_range(1u64..(2 << 20)),
                        _ => rng.gen_range(1u64..(32 << 20)),
                    };
                    value.to_string()
                };
                pool.set_property(&slot.name, property, Some(&value))?;
                outcomes::note(if value == "none" {
                    "space limits cleared"
                } else {
                    "space limits set"
                });
                Ok(())
            }
            Op::SetOwnerQuota => {
                let slot = self.pick_slot(rng)?;
                let uid = OWNER_IDS[rng.gen_range(1..OWNER_IDS.len())];
                let (property, value) = match rng.gen_range(0..4) {
                    0 => (
                        format!("groupobjquota@{}", uid + 100),
                        rng.gen_range(4u64..64).to_string(),
                    ),
                    1 => (
                        format!("projectquota@{}", rng.gen_range(1..3)),
                        rng.gen_range(1u64..(16 << 20)).to_string(),
                    ),
                    _ => (format!("userquota@{uid}"), String::new()),
                };
                let value = if rng.gen_range(0..4) == 0 {
                    "none".to_string()
                } else if value.is_empty() {
                    let used: u64 = pool
                        .owner_property(&slot.name, &format!("userused@{uid}"))?
                        .0
                        .parse()
                        .unwrap_or(0);
                    (used + rng.gen_range(1u64..(4 << 20))).to_string()
                } else {
                    value
                };
                pool.set_property(&slot.name, &property, Some(&value))?;
                outcomes::note(if value == "none" {
                    "owner quotas cleared"
                } else {
                    "owner quotas set"
                });
                Ok(())
            }
            Op::DeviceOfflineOnline
            | Op::MirrorWipeOnline
            | Op::DeviceDetachAttach
            | Op::DeviceReplace => self.device_op(op, pool, rng),
            Op::RaidzOfflineOnline => self.raidz_offline_online(pool, rng),
            Op::RaidzWipeReplace => self.raidz_wipe_replace(pool, rng),
            Op::RaidzExpand => self.raidz_expand(pool, rng),
            Op::InjectFault => self.inject_fault(pool, rng),
            Op::DamageMirrorSide | Op::DamageRaidzChildren => {
                {
                    let _devices = self.lock_devices(pool)?;
                    if op == Op::DamageMirrorSide {
                        self.damage_mirror_side(pool, rng)?;
                    } else {
                        self.damage_raidz_children(pool, rng)?;
                    }
                }
                // The scrub after the damage runs while the other workers go on, without the
                // devices lock (whoever takes it settles the damage first); then it is judged.
                drive_scan(pool, ScanFunction::Scrub)?;
                drop(self.lock_devices(pool)?);
                Ok(())
            }
            Op::NearFull => self.near_full(pool, rng),
            // Scan requests wait for a device operation to finish: a cancel or a pause
            // reaches a resilver too, and a device operation must see its resilver through.
            Op::ScrubStart => {
                let _devices = self.lock_devices(pool)?;
                scan_request(pool.core.request_scrub())
            }
            Op::ScrubPause => {
                let _devices = self.lock_devices(pool)?;
                scan_request(pool.core.request_scan_pause())
            }
            Op::ScrubStop => {
                let _devices = self.lock_devices(pool)?;
                scan_request(pool.core.request_scan_cancel())
            }
            Op::Resilver => self.resilver(pool, rng),
            Op::UserHold => self.user_hold(pool, rng),
            Op::UserRelease => self.user_release(pool, rng),
            Op::DeferDestroy => self.defer_destroy(pool, rng),
            Op::Diff => self.diff(pool, rng),
            _ => unreachable!("{op:?} is not implemented"),
        }
    }

    /// A snapshot of a registered file system, at random.
    fn pick_snapshot(&self, pool: &Pool, rng: &mut StdRng) -> Result<String, OpError> {
        let mut snapshots = Vec::new();
        let slots: Vec<Arc<FileSystemSlot>> = self.slots.lock().clone();
        for slot in slots {
            snapshots.extend(
                pool.core
                    .snapshots_of(&slot.name)?
                    .into_iter()
                    .map(|info| info.name),
            );
        }
        if snapshots.is_empty() {
            return refused("no snapshot");
        }
        Ok(snapshots.swap_remove(rng.gen_range(0..snapshots.len())))
    }

    fn register(&self, name: String, family: u64, fs: FileSystem) {
        self.slots.lock().push(Arc::new(FileSystemSlot {
            name,
            family,
            fs: RwLock::new(Some(fs)),
        }));
    }

    /// A new file system with its stamp (durable before it is used).
    fn create_file_system(&self, rng: &mut StdRng) -> OpResult {
        let pool_guard = self.pool.read();
        let Some(pool) = pool_guard.as_ref() else {
            return Err(pool_missing());
        };
        let name = format!("{}/ds{}", pool.name(), self.unique_name());
        pool.create_dataset(&name, &[], false)?;
        let fs = pool.open_file_system(&name)?;
        let family = rng.gen::<u64>() | 1;
        write_stamp(&fs, family)?;
        self.register(name, family, fs);
        Ok(())
    }

    /// Export and import again, every worker paused; see [`Reimport`] for the variants.
    fn export_import(&self, how: Reimport, rng: &mut StdRng) -> OpResult {
        let mut pool_guard = self.pool.write();
        if let (Reimport::WipeSide, Some(pool)) = (how, pool_guard.as_ref()) {
            // Damaged copies on the side kept would have no good copy once the other is wiped.
            drop(self.lock_devices(pool)?);
        }
        let Some(pool) = pool_guard.take() else {
            return Err(pool_missing());
        };
        let wiped = match how {
            Reimport::WipeSide => {
                let Some(sides) = two_sides(&pool) else {
                    *pool_guard = Some(pool);
                    return refused("the mirror is not two whole sides");
                };
                Some(sides[rng.gen_range(0..2)].path.clone())
            }
            _ => None,
        };
        let slots: Vec<Arc<FileSystemSlot>> = std::mem::take(&mut *self.slots.lock());
        for slot in &slots {
            drop(slot.fs.write().take());
        }
        outcomes::note_livelist_work(&pool);
        pool.export()
            .map_err(|error| OpError::Inconsistent(format!("export: {error}")))?;
        let mut rewind_candidates = None;
        if how == Reimport::Rewind {
            let found = Pool::scan(&[pool_dir(&self.plan.dir)]);
            let Some(newest) = found.iter().find(|found| found.name == self.plan.pool_name) else {
                return Err(OpError::Inconsistent(
                    "the exported pool is not found".into(),
                ));
            };
            let txgs = uberblock_txgs(newest);
            let back = rng.gen_range(1..=2).min(txgs.len());
            // Only txgs the rewind promise covers: the two before the newest. A candidate
            // further back (tried when the nearer ones carry another guid sum) may reference
            // blocks the txgs after it freed and reused, and a read-write import of it would
            // build on them: the pool layer opens exactly the txg asked for, so the caller
            // must stay inside the window (`import -F` checks a tree before going further).
            let oldest_promised = newest
                .txg
                .saturating_sub(tarn::types::TXG_DEFER_SIZE as u64);
            rewind_candidates = Some(
                (txgs[back..].iter().copied())
                    .filter(|txg| *txg >= oldest_promised)
                    .collect::<Vec<u64>>(),
            );
            // A rewind takes back what the txgs after it held, fsynced or not.
            self.journal.drop_everything();
        }
        if let Some(side) = &wiped {
            wipe_device(side)?;
        }
        let imported = match &rewind_candidates {
            Some(candidates) => self.import_rewound(candidates),
            None => self.import(None),
        };
        let pool = imported.map_err(|why| OpError::Inconsistent(format!("{how:?}: {why}")))?;
        self.remove_leftover_filler(&pool)
            .map_err(OpError::Inconsistent)?;
        let healed = match wiped {
            Some(_) => heal_devices(&pool, &self.plan.dir),
            None => Ok(()),
        };
        let slots = open_file_systems(&pool, rng).map_err(OpError::Inconsistent)?;
        *self.slots.lock() = slots;
        *pool_guard = Some(pool);
        healed.map_err(|error| match error {
            OpError::Refused(why) | OpError::Inconsistent(why) => {
                OpError::Inconsistent(format!("healing the vdevs after the import: {why}"))
            }
        })
    }

    /// Device operations on the mirror, one at a time; each ends by bringing the mirror
    /// back whole and resilvered ([`heal_devices`]), whether it succeeded or was refused part
    /// way, so the next one never takes away the only good copy.
    fn device_op(&self, op: Op, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let _devices = self.lock_devices(pool)?;
        let Some(sides) = two_sides(pool) else {
            return refused("the mirror is not two whole sides");
        };
        let chosen = rng.gen_range(0..2);
        let (side, other) = (&sides[chosen], &sides[1 - chosen]);
        // The other workers write while the side is away: what the resilver must copy.
        let away = Duration::from_millis(rng.gen_range(10..300));
        let outcome = (|| -> OpResult {
            match op {
                Op::DeviceOfflineOnline => {
                    pool.offline(&side.name)?;
                    std::thread::sleep(away);
                    pool.online(&side.name)?;
                }
                Op::MirrorWipeOnline => {
                    pool.offline(&side.name)?;
                    flush_before_wipe(pool, side)?;
                    wipe_device(&side.path)?;
                    std::thread::sleep(away);
                    // `online` must refuse a blank side (its label is gone), and the heal
                    // below replaces it in place. Were `online` to accept it, the side would
                    // be resilvered only for the txgs it missed, and the oracle would find
                    // the rest missing once reads come from that side alone.
                    if pool.online(&side.name).is_ok() {
                        log::warn!("{}: online accepted a wiped side", side.path);
                    }
                }
                Op::DeviceDetachAttach => {
                    pool.detach(&side.name)?;
                    std::thread::sleep(away);
                    pool.attach(&other.name, Path::new(&side.path), true)?;
                }
                Op::DeviceReplace => {
                    let new_path = replacement_path(&side.path);
                    create_device_file(&new_path, pool_dir(&self.plan.dir).join(SECOND_VDEV))?;
                    let guid = pool.replace(&side.name, Some(&new_path), true)?;
                    drive_scan(pool, ScanFunction::Resilver)?;
                    pool.wait_replaced(guid)?;
                }
                _ => unreachable!("{op:?} is not a device operation"),
            }
            Ok(())
        })();
        heal_devices(pool, &self.plan.dir)?;
        outcome
    }
}

fn sigkill_self() -> ! {
    // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    unreachable!("SIGKILL returned");
}

/// Open every file system the tool made (all but the pool's root), re-stamping one whose
/// stamp a crash prevented.
fn open_file_systems(pool: &Pool, rng: &mut StdRng) -> Result<Vec<Arc<FileSystemSlot>>, String> {
    let mut slots = Vec::new();
    for info in pool.datasets() {
        if info.name == pool.name() {
            continue;
        }
        let fs = pool
            .open_file_system(&info.name)
            .map_err(|error| format!("{}: cannot open: {error}", info.name))?;
        let family = match read_stamp(&fs).map_err(|error| format!("{}: {error}", info.name))? {
            Some(family) => family,
            None => {
                let family = rng.gen::<u64>() | 1;
                write_stamp(&fs, family)
                    .map_err(|error| format!("{}: stamping: {error}", info.name))?;
                family
            }
        };
        slots.push(Arc::new(FileSystemSlot {
            name: info.name,
            family,
            fs: RwLock::new(Some(fs)),
        }));
    }
    Ok(slots)
}

fn scan_request(result: Result<(), tarn::pool::scan::ScanRequestError>) -> OpResult {
    result.map_err(|error| OpError::Refused(error.to_string()))
}

/// A worker's view of one of its files' surroundings.
struct FileAt<'a> {
    child: &'a Child,
    slot: &'a FileSystemSlot,
    fs: &'a FileSystem,
}

impl FileAt<'_> {
    /// Write a run of tagged blocks: past the end (maybe leaving a one-block hole) for
    /// `Write`, over existing blocks for `Overwrite`. The run is a power of two blocks, so a
    /// short write near full (which halves the length down to one block) still ends on a
    /// block boundary.
    fn write_blocks(&self, op: Op, attr: tarn::fs::Attr, rng: &mut StdRng) -> OpResult {
        let blocks = attr.size.div_ceil(TAG_BLOCK_SIZE as u64);
        let first = if op == Op::Write || blocks == 0 {
            blocks + rng.gen_range(0..2)
        } else {
            rng.gen_range(0..blocks)
        };
        let room = FILE_BLOCKS_MAX.saturating_sub(first);
        if room == 0 {
            return refused("file at its largest");
        }
        let wanted = 1u64 << rng.gen_range(0..=WRITE_BLOCKS_MAX_SHIFT);
        let count = 1u64 << (63 - wanted.min(room).leading_zeros());
        let generation = self.child.next_generation();
        let mut data = Vec::with_capacity(count as usize * TAG_BLOCK_SIZE);
        for block in first..first + count {
            let tag = Tag {
                family: self.slot.family,
                ino: attr.ino,
                birth: birth_of(&attr),
                offset: block * TAG_BLOCK_SIZE as u64,
                generation,
                round: self.child.plan.round,
            };
            data.extend_from_slice(&tag.encode(TAG_BLOCK_SIZE));
        }
        self.fs
            .write(attr.ino, first * TAG_BLOCK_SIZE as u64, &data)?;
        Ok(())
    }

    fn verify(&self, ino: u64) -> Result<crate::oracle::FileContents, OpError> {
        verify_file(self.fs, self.slot.family, ino, self.child.plan.round)
            .map_err(|why| OpError::Inconsistent(format!("{}: {why}", self.slot.name)))
    }
}
