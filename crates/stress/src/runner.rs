//! The parent: rounds of child, crash, import, check and verify; and the loop of fresh seeds.
//!
//! # Theory
//! One run works in one directory: the pool's vdevs (`pool/`), the journal, the children's
//! log (`child.log`) and the number of the last round (`rounds`), so that a run can stop and
//! a later one re-import and go on. A round is one child (see [`crate::child`]): it is started
//! with a seed derived from the run's seed and the round's number, and either SIGKILLs
//! itself at the moment its plan says (in a third of the rounds, as the round's seed
//! chooses, after a power cut of the pool's devices: [`crate::child`]'s `power` module) or,
//! at the run's end, exports and exits. Then the parent
//! 1. reads the journal's new records (the promises now in force, and any inconsistency the
//!    child found itself);
//! 2. copies the vdevs as the crash left them (`crashed/`), since the import changes them;
//! 3. imports the pool from what survived, runs `check` (which must be clean), verifies every
//!    file, snapshot and promise ([`crate::oracle::verify_pool`]; after a power cut as after a
//!    kill: what an fsync promised survives, whatever the cut dropped), runs `check` again
//!    (the file systems' intent logs have been replayed by then), and exports.
//!
//! Any inconsistency, a child that dies any other way than planned, or a child that outlives
//! its deadline by [`HANG_GRACE`] (a hang is a finding too), stops the run: the vdevs as the
//! crash left them and as the parent left them, the journal, the log and a note with the seed
//! and the message go to `failures/SEED-rROUND/` under the run's directory (or the loop's).
//!
//! The seed also chooses the pool's ashift (12, or 9 one time in four) and its RAID-Z vdev
//! ([`RaidzLayout`]) when the run creates the pool (a two-way mirror and a second top-level
//! vdev, each 96 MiB sparse files, and the RAID-Z vdev of [`RAIDZ_CHILD_SIZE`] files), and how
//! its scans are paced ([`SCAN_PACING`]); the run prints them.

use std::path::{Path, PathBuf};
use std::process::{Child as Process, Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tarn::check::{check_pool, check_pool_and_references};
use tarn::pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;

use crate::child::{
    counts_path, pool_dir, raidz_child_file, read_fault_counts, read_outcome_counts,
    read_space_counts, replica_dir, Death, MIRROR_PREFIX, RAIDZ_CHILD_SIZE, REPLICA_POOL_NAME,
    REPLICA_VDEV, SECOND_VDEV,
};
use crate::exit_status::{EXIT_INCONSISTENT, EXIT_PANIC};
use crate::journal::{journal_path, Promises};
use crate::ops::Op;
use crate::oracle::{verify_pool, verify_replica};
use crate::tag::mix;

/// The pool's name.
pub const POOL_NAME: &str = "stress";
/// Bytes in each vdev file (sparse).
const VDEV_SIZE: u64 = 96 << 20;
/// Bytes in the second pool's vdev file (sparse): room for the copies the child keeps.
const REPLICA_VDEV_SIZE: u64 = 128 << 20;
/// How long past its deadline a child may run before the parent calls it hung.
const HANG_GRACE: Duration = Duration::from_secs(120);
/// The range of a threaded child's life before its SIGKILL.
const LIFE_MS: std::ops::Range<u64> = 300..5000;
/// The range of a short life, which one round in [`SHORT_LIFE_ONE_IN`] gets: a child killed
/// within the first txgs after its import, so that the rewind targets checked next
/// ([`check_rewind_targets`]) are txgs before that import, where what the import mistook for
/// free space (a deferred free it forgot) would have been overwritten.
const SHORT_LIFE_MS: std::ops::Range<u64> = 20..300;
const SHORT_LIFE_ONE_IN: u32 = 4;
/// The range of a replayed (one-worker) child's operations before its SIGKILL.
const LIFE_OPERATIONS: std::ops::Range<u64> = 30..3000;
/// The time a child of a run counted in operations (`--operations`) is given: its planned
/// death comes first (at most [`LIFE_MS`]'s end, or [`LIFE_OPERATIONS`]).
const OPERATIONS_ROUND_LIFE: Duration = Duration::from_secs(120);
/// The share of rounds whose child dies by a power cut of the pool's devices rather than by
/// a SIGKILL alone (in thirds): the stricter crash, and the one that tests the intent log's
/// durability, but the plain kill reaches states it cannot (every write landed, none torn).
const POWER_CUT_THIRDS: u32 = 1;

/// What a run is asked to do.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub dir: PathBuf,
    pub seed: u64,
    pub threads: usize,
    pub duration: Duration,
    /// Run until the rounds' children have done this many operations together, instead of
    /// for `duration` (`--operations`).
    pub operations: Option<u64>,
    /// One worker, deaths counted in operations: the seed fixes the whole sequence.
    pub replay: bool,
    /// Where failures are kept (the run's directory, or the loop's).
    pub failures_dir: PathBuf,
    /// Operations left out (`--exclude`, a diagnostic).
    pub excluded: Vec<Op>,
}

/// What runs did, added up.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub operations: u64,
    pub refusals: u64,
    pub kills: u64,
    pub power_cuts: u64,
    /// Faults injected on one side of the mirror, the I/Os they hit, and the bad copies the
    /// scrubs after them repaired.
    pub faults_injected: u64,
    pub fault_hits: u64,
    pub fault_copies_repaired: u64,
    /// Copies of snapshots' blocks damaged on one side of the mirror (every one repaired by
    /// the scrub after, or the run fails).
    pub copies_damaged: u64,
    /// Near-full phases, the bytes they filled, and the operations refused for space.
    pub near_full_phases: u64,
    pub bytes_filled: u64,
    pub refused_for_space: u64,
    pub clean_ends: u64,
    pub imports: u64,
    /// What the parent's verifications read: files, tagged blocks, promises.
    pub files_verified: u64,
    pub blocks_verified: u64,
    pub promises_checked: u64,
    /// Receives into the second pool that ended and verified in the children: full,
    /// incremental, resumed after a cut.
    pub receives: [u64; 3],
    /// Received snapshots the parent's verifications read.
    pub received_verified: u64,
    /// What some operations met, by outcome (`child::outcomes`).
    pub outcomes: std::collections::BTreeMap<String, u64>,
    /// One line per failure, each naming where it was kept.
    pub failures: Vec<String>,
}

impl Summary {
    pub fn add(&mut self, other: &Summary) {
        self.operations += other.operations;
        self.refusals += other.refusals;
        self.kills += other.kills;
        self.power_cuts += other.power_cuts;
        self.faults_injected += other.faults_injected;
        self.fault_hits += other.fault_hits;
        self.fault_copies_repaired += other.fault_copies_repaired;
        self.copies_damaged += other.copies_damaged;
        self.near_full_phases += other.near_full_phases;
        self.bytes_filled += other.bytes_filled;
        self.refused_for_space += other.refused_for_space;
        self.clean_ends += other.clean_ends;
        self.imports += other.imports;
        self.files_verified += other.files_verified;
        self.blocks_verified += other.blocks_verified;
        self.promises_checked += other.promises_checked;
        for (mine, theirs) in self.receives.iter_mut().zip(other.receives) {
            *mine += theirs;
        }
        self.received_verified += other.received_verified;
        for (outcome, count) in &other.outcomes {
            *self.outcomes.entry(outcome.clone()).or_insert(0) += count;
        }
        self.failures.extend(other.failures.iter().cloned());
    }

    pub fn line(&self) -> String {
        let outcomes: String = (self.outcomes.iter())
            .map(|(outcome, count)| format!("; {outcome}: {count}"))
            .collect();
        format!(
            "{} operations ({} refused), {} kills, {} power cuts, {} clean ends, {} imports, {} failures; injected {} faults ({} I/Os hit, {} copies repaired); {} damaged copies (mirror sides, raidz columns); {} near-full phases ({} MiB filled, {} refused for space); verified {} files, {} tagged blocks, {} fsync promises; receives: {} full, {} incremental, {} resumed; verified {} received snapshots{outcomes}",
            self.operations,
            self.refusals,
            self.kills,
            self.power_cuts,
            self.clean_ends,
            self.imports,
            self.failures.len(),
            self.faults_injected,
            self.fault_hits,
            self.fault_copies_repaired,
            self.copies_damaged,
            self.near_full_phases,
            self.bytes_filled >> 20,
            self.refused_for_space,
            self.files_verified,
            self.blocks_verified,
            self.promises_checked,
            self.receives[0],
            self.receives[1],
            self.receives[2],
            self.received_verified
        )
    }
}

/// The tunables of every pool the tool makes: the tiny test configuration, with the ashift,
/// the scan pacing (`scan_blocks_per_txg_max`, [`SCAN_PACING`]) and the share below which a
/// clone's livelist is dropped (`livelist_min_percent_shared`) the seed chose.
pub fn tunables(
    ashift: u32,
    scan_blocks_per_txg_max: u64,
    livelist_min_percent_shared: u64,
) -> Tunables {
    Tunables {
        vdev_ashift: ashift,
        scan_blocks_per_txg_max,
        livelist_min_percent_shared,
        // The direct check of a scrub's coverage (`child::devices::check_scrub_coverage`).
        // Its first finding (fixed seed 3) was a scan bug: a snapshot destroyed
        // before the scan reached the dataset after it (pool/scan.rs).
        scan_record_visits: true,
        ..Tunables::tiny()
    }
}

/// The scan pacings a paced seed chooses from, equally: the blocks a scan visits per txg at
/// most. Unpaced (the engine's default, which one seed in [`UNPACED_ONE_IN`] keeps), a scrub
/// of the tool's pool ends within the txg it starts in, so no snapshot destroy, pause or
/// export ever meets a running scan, and a scan that skipped blocks is never caught. Paced,
/// a scrub spans tens of txgs. The child drives the txgs of a scan it waits for
/// (`child::devices::drive_scan`), so pacing costs syncs, not the time of the txg timer: the
/// smaller the pacing, the more syncs, and the fewer operations a minute. Measured against
/// the scan bug of a snapshot destroyed before the scan reached the dataset after it, with
/// its fix reverted, 256 found it in one or two minutes, 512 and 1024 not in ten, and 128
/// cost more than 256 and did not find it sooner.
pub const SCAN_PACING: [u64; 1] = [256];
/// One seed in this many leaves its scans unpaced.
pub const UNPACED_ONE_IN: u32 = 4;

/// The share a clone keeps its livelist at, for one seed in two (the others keep the tiny
/// configuration's 75%). The tool's clones are small and soon overwritten: at 75% every one
/// dropped its livelist within a few operations, and a destroy then walked the clone's tree,
/// so the livelist reader's deletes and condensing never ran beside the other operations.
/// At 0% a clone keeps its livelist whatever it shares.
pub const LIVELISTS_KEPT_PERCENT: u64 = 0;

/// The seed's `livelist_min_percent_shared`, drawn from a generator of its own so that the
/// draws of the seeds' other choices (and the fixed seeds' findings) stay as they were.
pub fn livelist_min_percent_shared(seed: u64) -> u64 {
    if StdRng::seed_from_u64(crate::tag::mix(seed ^ 0x0011_7e11_57ed)).gen_ratio(1, 2) {
        LIVELISTS_KEPT_PERCENT
    } else {
        Tunables::tiny().livelist_min_percent_shared
    }
}

/// The RAID-Z vdev of a seed's pool: its parity and its number of children (files
/// `raidz-0.img` ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaidzLayout {
    pub parity: u8,
    pub children: usize,
}

/// The layouts a seed chooses from, equally: raidz1 of 3 or 4, raidz2 of 4 or 5.
const RAIDZ_LAYOUTS: [RaidzLayout; 4] = [
    RaidzLayout {
        parity: 1,
        children: 3,
    },
    RaidzLayout {
        parity: 1,
        children: 4,
    },
    RaidzLayout {
        parity: 2,
        children: 4,
    },
    RaidzLayout {
        parity: 2,
        children: 5,
    },
];

impl RaidzLayout {
    /// The seed's layout, drawn from a generator of its own so that the draws of the seeds'
    /// other choices stay as they were.
    pub fn of_seed(seed: u64) -> RaidzLayout {
        let mut rng = StdRng::seed_from_u64(mix(seed ^ 0x4a1d_2a1d_2a1d));
        RAIDZ_LAYOUTS[rng.gen_range(0..RAIDZ_LAYOUTS.len())]
    }

    /// The children's files in the pool directory `pool`, in column order.
    pub fn paths(&self, pool: &Path) -> Vec<PathBuf> {
        (0..self.children)
            .map(|index| pool.join(raidz_child_file(index)))
            .collect()
    }

    /// How the layout reads in a seed's configuration line.
    pub fn describe(&self) -> String {
        format!("raidz{} of {} children", self.parity, self.children)
    }
}

/// How a seed's scan pacing reads in its configuration line.
pub fn describe_pacing(scan_blocks_per_txg_max: u64) -> String {
    if scan_blocks_per_txg_max == u64::MAX {
        "scans unpaced".into()
    } else {
        format!("scans paced at {scan_blocks_per_txg_max} blocks a txg")
    }
}

/// One run: rounds until `duration` is spent or a failure. Errors are for a run that cannot
/// start (a directory it cannot make, a pool it cannot create); failures are in the summary.
pub fn run(options: &RunOptions) -> Result<Summary, String> {
    let dir = &options.dir;
    std::fs::create_dir_all(pool_dir(dir))
        .map_err(|error| format!("{}: {error}", pool_dir(dir).display()))?;
    let mut seed_rng = StdRng::seed_from_u64(options.seed);
    let ashift = if seed_rng.gen_ratio(1, 4) { 9 } else { 12 };
    let pacing = if seed_rng.gen_ratio(1, UNPACED_ONE_IN) {
        u64::MAX
    } else {
        SCAN_PACING[seed_rng.gen_range(0..SCAN_PACING.len())]
    };
    // One run in three makes deadlists without totals headers first and enables the feature
    // from round LATE_FEATURE_ROUND on: deadlists of both kinds then meet in one pool.
    let late_totals = seed_rng.gen_ratio(1, 3);
    let livelist_share = livelist_min_percent_shared(options.seed);
    let tunables = tunables(ashift, pacing, livelist_share);
    let raidz = RaidzLayout::of_seed(options.seed);
    println!(
        "tarn-stress: seed {}: ashift {ashift}, {}, {}, clones keep livelists down to {livelist_share}% shared{}",
        options.seed,
        raidz.describe(),
        describe_pacing(pacing),
        if late_totals {
            format!(", deadlist_totals enabled from round {LATE_FEATURE_ROUND}")
        } else {
            String::new()
        }
    );
    let vdevs = [
        pool_dir(dir).join(format!("{MIRROR_PREFIX}a.img")),
        pool_dir(dir).join(format!("{MIRROR_PREFIX}b.img")),
        pool_dir(dir).join(SECOND_VDEV),
    ];
    let raidz_paths = raidz.paths(&pool_dir(dir));
    let reimport = vdevs.iter().chain(&raidz_paths).any(|path| path.exists());
    if reimport {
        log::info!("re-importing the pool in {}", dir.display());
    } else {
        log::info!(
            "creating pool {POOL_NAME} in {} (ashift {ashift}, {})",
            dir.display(),
            raidz.describe()
        );
        // Made here at their own size: `create_size` would make them as large as the others.
        for path in &raidz_paths {
            create_sparse_file(path, RAIDZ_CHILD_SIZE)?;
        }
        let pool = Pool::create(CreateOptions {
            name: POOL_NAME.into(),
            vdevs: vec![
                VdevSpec::Mirror(vec![vdevs[0].clone(), vdevs[1].clone()]),
                VdevSpec::Leaf(vdevs[2].clone()),
                VdevSpec::Raidz {
                    parity: raidz.parity,
                    paths: raidz_paths.clone(),
                },
            ],
            log: Vec::new(),
            cache: Vec::new(),
            create_size: Some(VDEV_SIZE),
            // A mirror and a RAID-Z vdev beside a single disk on purpose (every kind of
            // top-level vdev under one pool's faults): `zpool create -f`'s mismatched
            // replication level.
            force: true,
            tunables: tunables.clone(),
            wrap_device: None,
            disabled_features: if late_totals {
                vec!["deadlist_totals".into()]
            } else {
                Vec::new()
            },
        })
        .map_err(|error| format!("creating the pool: {error}"))?;
        pool.export()
            .map_err(|error| format!("exporting the new pool: {error}"))?;
    }
    create_replica_pool(dir, &tunables)?;

    let rounds_path = dir.join("rounds");
    let mut round = std::fs::read_to_string(&rounds_path)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let mut promises = Promises::default();
    promises.catch_up(&journal_path(dir))?;
    // Receives the journal already holds are an earlier run's.
    let receives_before = promises.receives;
    let mut summary = Summary::default();
    // A pool found in place is verified before any child touches it: whatever happened to
    // it since the last run (another program, a crash of this one) is judged first.
    if reimport {
        let problems = verify_both_pools(dir, &tunables, &promises, round, &mut summary);
        if !problems.is_empty() {
            record_failure(options, &tunables, round, &problems, &mut summary);
            return Ok(summary);
        }
    }
    let end = Instant::now() + options.duration;
    let more = |summary: &Summary| match options.operations {
        Some(count) => summary.operations < count,
        None => Instant::now() < end,
    };
    while more(&summary) {
        round += 1;
        let round_seed = mix(options.seed ^ mix(round));
        let mut round_rng = StdRng::seed_from_u64(round_seed);
        let death = if options.replay {
            Death::AfterOperations(round_rng.gen_range(LIFE_OPERATIONS))
        } else if round_rng.gen_ratio(1, SHORT_LIFE_ONE_IN) {
            Death::AfterTime(Duration::from_millis(round_rng.gen_range(SHORT_LIFE_MS)))
        } else {
            Death::AfterTime(Duration::from_millis(round_rng.gen_range(LIFE_MS)))
        };
        let power_cut = round_rng
            .gen_ratio(POWER_CUT_THIRDS, 3)
            .then(|| round_rng.gen::<u64>());
        // Counted in operations, a run has no end in time: a child that outlives its death
        // (drawn above) ends cleanly after OPERATIONS_ROUND_LIFE.
        let run_for = match options.operations {
            Some(_) => OPERATIONS_ROUND_LIFE,
            None => end.saturating_duration_since(Instant::now()),
        };
        let outcome = run_round(
            options,
            round,
            round_seed,
            (death, power_cut),
            run_for,
            &tunables,
        );
        let counts = read_counts(dir);
        summary.operations += counts.0;
        summary.refusals += counts.1;
        summary.imports += counts.2;
        let [injected, hits, repaired, damaged] = read_fault_counts(dir);
        summary.faults_injected += injected;
        summary.fault_hits += hits;
        summary.fault_copies_repaired += repaired;
        summary.copies_damaged += damaged;
        let [phases, filled, for_space] = read_space_counts(dir);
        summary.near_full_phases += phases;
        summary.bytes_filled += filled;
        summary.refused_for_space += for_space;
        for (outcome, count) in read_outcome_counts(dir) {
            *summary.outcomes.entry(outcome).or_insert(0) += count;
        }
        let mut problems = Vec::new();
        match outcome {
            Ok(Ended::Killed) if power_cut.is_some() => summary.power_cuts += 1,
            Ok(Ended::Killed) => summary.kills += 1,
            Ok(Ended::Clean) => summary.clean_ends += 1,
            Err(why) => problems.push(why),
        }
        if let Err(why) = promises.catch_up(&journal_path(dir)) {
            problems.push(why);
        }
        problems.append(&mut promises.failures);
        for (index, count) in summary.receives.iter_mut().enumerate() {
            *count = promises.receives[index] - receives_before[index];
        }
        keep_crashed_images(dir)?;
        if problems.is_empty() {
            problems = check_rewind_targets(&pool_dir(dir), POOL_NAME, &tunables, round).0;
        }
        if problems.is_empty() {
            problems = verify_both_pools(dir, &tunables, &promises, round, &mut summary);
        }
        if problems.is_empty() {
            problems = check_reuse_after_import(&pool_dir(dir), POOL_NAME, &tunables, round);
        }
        std::fs::write(&rounds_path, format!("{round}\n"))
            .map_err(|error| format!("{}: {error}", rounds_path.display()))?;
        if !problems.is_empty() {
            record_failure(options, &tunables, round, &problems, &mut summary);
            break;
        }
        log::info!("round {round}: verified");
    }
    Ok(summary)
}

/// Keep a failure's evidence and note it in the summary.
fn record_failure(
    options: &RunOptions,
    tunables: &Tunables,
    round: u64,
    problems: &[String],
    summary: &mut Summary,
) {
    let kept = keep_failure(options, tunables, round, problems);
    summary.failures.push(format!(
        "seed {} round {round}: {} (kept in {kept})",
        options.seed,
        problems.join("; ")
    ));
}

/// How a child ended, when it ended as planned.
enum Ended {
    Killed,
    Clean,
}

/// How the child is to die: when, and whether by a power cut (with its seed).
type Fate = (Death, Option<u64>);

fn run_round(
    options: &RunOptions,
    round: u64,
    round_seed: u64,
    fate: Fate,
    run_for: Duration,
    tunables: &Tunables,
) -> Result<Ended, String> {
    let dir = &options.dir;
    let _ = std::fs::remove_file(counts_path(dir));
    let _ = std::fs::remove_file(crate::child::fault_counts_path(dir));
    let _ = std::fs::remove_file(crate::child::space_counts_path(dir));
    let _ = std::fs::remove_file(crate::child::outcome_counts_path(dir));
    let mut process = spawn_child(options, round, round_seed, fate, run_for, tunables)?;
    let life = match fate.0 {
        Death::AfterTime(after) => after.min(run_for),
        Death::AfterOperations(_) => run_for,
    };
    let deadline = Instant::now() + life + HANG_GRACE;
    let status = loop {
        match process.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = process.kill();
                let _ = process.wait();
                return Err(format!(
                    "round {round}: the child hung: still running {HANG_GRACE:?} after its deadline"
                ));
            }
            Err(error) => return Err(format!("round {round}: waiting for the child: {error}")),
        }
    };
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok(Ended::Clean),
        (_, Some(libc::SIGKILL)) => Ok(Ended::Killed),
        (Some(EXIT_INCONSISTENT), _) => Err(format!(
            "round {round}: the child found an inconsistency (see the journal's failure record)"
        )),
        (Some(EXIT_PANIC), _) => Err(format!("round {round}: the child panicked (see child.log)")),
        _ => Err(format!("round {round}: the child ended with {status}")),
    }
}

fn spawn_child(
    options: &RunOptions,
    round: u64,
    round_seed: u64,
    (death, power_cut): Fate,
    run_for: Duration,
    tunables: &Tunables,
) -> Result<Process, String> {
    let dir = &options.dir;
    let log_path = dir.join("child.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|error| format!("{}: {error}", log_path.display()))?;
    let log_err = log
        .try_clone()
        .map_err(|error| format!("{}: {error}", log_path.display()))?;
    let exe = std::env::current_exe().map_err(|error| format!("finding my own binary: {error}"))?;
    let mut command = Command::new(exe);
    command
        .arg("--child-round")
        .arg(round.to_string())
        .arg("--dir")
        .arg(dir)
        .arg("--seed")
        .arg(round_seed.to_string())
        .arg("--threads")
        .arg(if options.replay { 1 } else { options.threads }.to_string())
        .arg("--child-run-ms")
        .arg(run_for.as_millis().to_string())
        .arg("--child-ashift")
        .arg(tunables.vdev_ashift.to_string())
        .arg("--child-scan-blocks")
        .arg(tunables.scan_blocks_per_txg_max.to_string())
        .arg("--child-livelist-share")
        .arg(tunables.livelist_min_percent_shared.to_string())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    if !options.excluded.is_empty() {
        let names: Vec<String> = options
            .excluded
            .iter()
            .map(|op| format!("{op:?}"))
            .collect();
        command.arg("--exclude").arg(names.join(","));
    }
    if let Some(seed) = power_cut {
        command.arg("--child-power-cut").arg(seed.to_string());
    }
    match death {
        Death::AfterTime(after) => command
            .arg("--child-kill-ms")
            .arg(after.as_millis().to_string()),
        Death::AfterOperations(count) => command.arg("--child-kill-ops").arg(count.to_string()),
    };
    command
        .spawn()
        .map_err(|error| format!("starting the child: {error}"))
}

/// The child's counts (operations, refusals, imports); zeros if it left none.
fn read_counts(dir: &Path) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(counts_path(dir)).unwrap_or_default();
    let numbers: Vec<u64> = text
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect();
    match numbers.as_slice() {
        [operations, refusals, imports] => (*operations, *refusals, *imports),
        _ => (0, 0, 0),
    }
}

/// Import, check, verify, check, export; adds what was done to `summary` and returns the
/// problems found.
/// Whether `pool`, open at last synced txg S, holds every extent that the tree of `txg`
/// references while S is at most two past `txg` (frees of txg F may be reused from txg F + 3
/// on): none may be allocatable ([`SpaceManager::is_allocatable`]), whether or not an
/// allocation happens to land there. A deferred free forgotten by the space maps or the log
/// shows here at once.
///
/// On an imported pool the sync thread keeps going (an import that finishes a replacement
/// syncs its detach a txg later), and a sync that releases the frees of `txg` + 1 while the
/// extents are asked about would pass for a forgotten deferral: syncs are held off for the
/// check, so that the space asked about is exactly that of the txg named.
///
/// [`SpaceManager::is_allocatable`]: tarn::space::SpaceManager::is_allocatable
fn check_held(pool: &Pool, txg: u64, extents: &[tarn::check::Extent], round: u64) -> Vec<String> {
    let _no_sync_meanwhile = pool.core.txgs.pause_syncs();
    let synced = pool.last_synced_txg().0;
    if synced > txg + tarn::types::TXG_DEFER_SIZE as u64 {
        return Vec::new();
    }
    let storage = tarn::object::adapters::MosSpaceStorage {
        mos: &pool.core.mos,
    };
    for &(vdev, offset, size) in extents {
        match pool
            .core
            .io
            .space
            .is_allocatable(vdev, offset, size, &storage)
        {
            Ok(false) => {}
            Ok(true) => {
                return vec![format!(
                    "round {round}: the rewind promise: the tree of txg {txg} references vdev \
                     {vdev} offset {offset:#x} size {size}, which is allocatable in the pool at \
                     txg {synced}: a free of the txgs after {txg} was not kept deferred"
                )]
            }
            Err(error) => return vec![format!("round {round}: the rewind promise: {error}")],
        }
    }
    log::info!(
        "round {round}: the {} extents of txg {txg}'s tree are held at txg {synced}",
        extents.len()
    );
    Vec::new()
}

/// The rewind promise (`tarn::pool::fallback_uberblocks`): while a txg after the newest, N,
/// is written, no block that the trees of N − 1 and N − 2 reference can be reused, so
/// `import -F` (or an explicit rewind) may open either. Checked on the pool as the crash left
/// it, before the import that replays its logs: each of N − 1 and N − 2 that has an
/// uberblock is imported read-only and must `check` clean, and the pool opened read-only at N
/// must hold everything their trees reference ([`check_held`]: what N freed, N − 1's tree
/// still references; what N − 1 freed, N − 2's). Returns the problems, and the targets'
/// references (for [`check_reuse_after_import`] to ask again after its import).
pub(crate) fn check_rewind_targets(
    vdevs: &Path,
    name: &str,
    tunables: &Tunables,
    round: u64,
) -> (Vec<String>, Vec<(u64, Vec<tarn::check::Extent>)>) {
    let options = |rewind_to: Option<tarn::types::Txg>| ImportOptions {
        readonly: true,
        rewind_to,
        ..ImportOptions::new(vec![vdevs.to_path_buf()], tunables.clone())
    };
    let newest = match Pool::import(name, options(None)) {
        Ok((pool, _)) => pool.last_synced_txg(),
        Err(error) => {
            return (
                vec![format!("round {round}: read-only import: {error}")],
                Vec::new(),
            )
        }
    };
    let mut problems = Vec::new();
    let mut kept = Vec::new();
    for back in 1..=tarn::types::TXG_DEFER_SIZE as u64 {
        let Some(target) = newest.0.checked_sub(back).map(tarn::types::Txg) else {
            break;
        };
        match Pool::import(name, options(Some(target))) {
            // An empty txg commits no uberblock: nothing to rewind to.
            Err(tarn::pool::PoolError::NoUsableUberblock(..)) => {}
            Err(error) => problems.push(format!(
                "round {round}: rewind to txg {target} (newest {newest}): import: {error}"
            )),
            Ok((pool, _)) => match check_pool_and_references(&pool) {
                Ok((report, references)) if report.is_clean() => {
                    log::info!(
                        "round {round}: rewind to txg {target} (newest {newest}) checks clean"
                    );
                    kept.push((target.0, references));
                }
                Ok((report, _)) => problems.push(format!(
                    "round {round}: rewind to txg {target} (newest {newest}): check: {report:?}"
                )),
                Err(error) => problems.push(format!(
                    "round {round}: rewind to txg {target} (newest {newest}): check: {error}"
                )),
            },
        }
    }
    if problems.is_empty() && !kept.is_empty() {
        match Pool::import(name, options(None)) {
            Ok((pool, _)) => {
                for (txg, extents) in &kept {
                    problems.extend(check_held(&pool, *txg, extents, round));
                }
            }
            Err(error) => problems.push(format!("round {round}: read-only import: {error}")),
        }
    }
    (problems, kept)
}

/// Files the reuse probe ([`check_reuse_after_import`]) rewrites in the pool's root file
/// system (which the oracle does not read), and their size.
const REUSE_PROBE_FILES: u64 = 32;
const REUSE_PROBE_FILE_BYTES: usize = 4096;

/// The rewind promise across an import: space freed in the last txgs before an export stays
/// deferred after the import, so the import's first txg cannot overwrite a block that the
/// trees of the txgs before it still reference. Only the first txg can show it by reuse: once
/// two txgs have synced after the export's txg E, the one tree that references what E freed,
/// E − 1's, is no longer a rewind target. It is checked twice:
/// - directly: nothing E − 1's or E − 2's tree references may be allocatable in the pool at E
///   (read-only) nor once it is imported, while that is allowed ([`check_held`]);
/// - by reuse: unless the import synced a txg of its own, its first txg allocates (small files
///   rewritten in the root file system); the pool is dropped as a crash would leave it after
///   that one txg, and every rewind target must `check` clean ([`check_rewind_targets`]).
///
/// The next child imports that crashed pool as usual.
fn check_reuse_after_import(
    vdevs: &Path,
    name: &str,
    tunables: &Tunables,
    round: u64,
) -> Vec<String> {
    let Some(exported) = Pool::scan(&[vdevs.to_path_buf()])
        .into_iter()
        .find(|found| found.name == name)
        .map(|found| found.txg)
    else {
        return vec![format!(
            "round {round}: reuse probe: the exported pool is not found"
        )];
    };
    let (problems, kept) = check_rewind_targets(vdevs, name, tunables, round);
    if !problems.is_empty() {
        return problems;
    }
    let options = ImportOptions::new(vec![vdevs.to_path_buf()], tunables.clone());
    let pool = match Pool::import(name, options) {
        Ok((pool, _)) => pool,
        Err(error) => return vec![format!("round {round}: reuse probe: import: {error}")],
    };
    log::info!(
        "round {round}: reuse probe: exported at txg {exported}, imported at {}",
        pool.last_synced_txg()
    );
    for (txg, extents) in &kept {
        let problems = check_held(&pool, *txg, extents, round);
        if !problems.is_empty() {
            pool.abandon();
            return problems;
        }
    }
    if pool.last_synced_txg().0 > exported {
        // The import's own first txg is the probe.
        pool.abandon();
        return check_rewind_targets(vdevs, name, tunables, round).0;
    }
    let written = (|| -> Result<(), String> {
        let fs = pool.file_system().map_err(|error| error.to_string())?;
        // A pool left near full (a child killed in a near-full phase leaves its filler for
        // the next child to destroy) takes what it can: the probe allocates until refused.
        let written = (0..REUSE_PROBE_FILES).try_for_each(|index| {
            let file_name = format!("reuse-probe-{index}");
            let attr = match fs.lookup(fs.root(), file_name.as_bytes()) {
                Ok(attr) => attr,
                Err(tarn::fs::FsError::NotFound) => {
                    fs.create(fs.root(), file_name.as_bytes(), 0o644, 0, 0)?
                }
                Err(error) => return Err(error),
            };
            let bytes: Vec<u8> = (0..REUSE_PROBE_FILE_BYTES)
                .map(|at| mix(round ^ mix(index ^ at as u64)) as u8)
                .collect();
            fs.write(attr.ino, 0, &bytes).map(|_| ())
        });
        match written {
            Ok(()) | Err(tarn::fs::FsError::NoSpace) => {}
            Err(error) => return Err(error.to_string()),
        }
        pool.sync().map(|_| ()).map_err(|error| error.to_string())
    })();
    pool.abandon();
    if let Err(why) = written {
        return vec![format!("round {round}: reuse probe: writing: {why}")];
    }
    check_rewind_targets(vdevs, name, tunables, round).0
}

/// The engine mode's verification after a round: the pool (settling the renames a crash left
/// open by the names the pool holds), then the second pool, whose import destroys a receive
/// a crash stopped unless it can be resumed, and whose every received snapshot is verified
/// against what was sent.
fn verify_both_pools(
    dir: &Path,
    tunables: &Tunables,
    promises: &Promises,
    round: u64,
    summary: &mut Summary,
) -> Vec<String> {
    let problems = import_check_verify(
        &pool_dir(dir),
        POOL_NAME,
        tunables,
        promises,
        round,
        summary,
        |pool| {
            promises.settle_renames(&journal_path(dir), |name| pool.has_dataset(name))?;
            enable_late_features(pool, round)
        },
    );
    if !problems.is_empty() {
        return problems;
    }
    import_check_export(
        &replica_dir(dir),
        REPLICA_POOL_NAME,
        "the second pool ",
        tunables,
        round,
        summary,
        |pool, summary| {
            let verification = verify_replica(pool, promises, round);
            summary.files_verified += verification.files;
            summary.blocks_verified += verification.blocks;
            summary.received_verified += verification.trees;
            log::info!(
                "round {round}: verified {} received snapshots, {} files, {} tagged blocks",
                verification.trees,
                verification.files,
                verification.blocks
            );
            verification.problems
        },
        |_| Ok(()),
    )
}

/// The round from which a run that made its pool without feature deadlist_totals has it.
const LATE_FEATURE_ROUND: u64 = 3;

/// Enable the features a run made its pool without, once their round has come (the pool then
/// holds structures written both without and with them).
fn enable_late_features(pool: &Pool, round: u64) -> Result<(), String> {
    if round + 1 < LATE_FEATURE_ROUND
        || pool.feature_state("deadlist_totals") != Some(tarn::pool::FeatureState::Disabled)
    {
        return Ok(());
    }
    log::info!("round {round}: enabling feature deadlist_totals");
    pool.set_pool_property("feature@deadlist_totals", "enabled")
        .map_err(|error| format!("round {round}: enabling feature deadlist_totals: {error}"))
}

/// Import pool `name` from `vdevs`, `check` it, verify every file, snapshot and promise,
/// `check` again, run `settle` on the verified pool, and export; the inconsistencies found
/// (the pool is left unexported then).
pub(crate) fn import_check_verify(
    vdevs: &Path,
    name: &str,
    tunables: &Tunables,
    promises: &Promises,
    round: u64,
    summary: &mut Summary,
    settle: impl FnOnce(&Pool) -> Result<(), String>,
) -> Vec<String> {
    import_check_export(
        vdevs,
        name,
        "",
        tunables,
        round,
        summary,
        |pool, summary| {
            let verification = verify_pool(pool, promises, round);
            summary.files_verified += verification.files;
            summary.blocks_verified += verification.blocks;
            summary.promises_checked += verification.promises;
            log::info!(
                "round {round}: verified {} file systems and snapshots, {} files, {} tagged blocks, {} promises",
                verification.trees,
                verification.files,
                verification.blocks,
                verification.promises
            );
            verification.problems
        },
        settle,
    )
}

/// The frame of every verification: import pool `name` from `vdevs`, `check` it, `verify` it
/// (its problems are prefixed with the round and `which`, a name such as "the second pool "
/// or ""), `check` again, `settle`, and export; a pool with any problem is left unexported.
#[allow(clippy::too_many_arguments)]
fn import_check_export(
    vdevs: &Path,
    name: &str,
    which: &str,
    tunables: &Tunables,
    round: u64,
    summary: &mut Summary,
    verify: impl FnOnce(&Pool, &mut Summary) -> Vec<String>,
    settle: impl FnOnce(&Pool) -> Result<(), String>,
) -> Vec<String> {
    let options = ImportOptions::new(vec![vdevs.to_path_buf()], tunables.clone());
    let pool = match Pool::import(name, options) {
        Ok((pool, _)) => pool,
        Err(error) => return vec![format!("round {round}: import of {which}{name}: {error}")],
    };
    summary.imports += 1;
    let mut problems = Vec::new();
    check(
        &pool,
        &format!("of {which}{name} after import"),
        &mut problems,
    );
    if problems.is_empty() {
        problems.extend(
            (verify(&pool, summary).into_iter())
                .map(|problem| format!("round {round}: {which}{problem}")),
        );
        check(
            &pool,
            &format!("of {which}{name} after verifying"),
            &mut problems,
        );
    }
    if problems.is_empty() {
        if let Err(why) = settle(&pool) {
            problems.push(why);
        }
    }
    if problems.is_empty() {
        if let Err(error) = pool.export() {
            problems.push(format!(
                "round {round}: export of {which}{name} after verifying: {error}"
            ));
        }
    } else {
        // Leave the pool as the failure found it: no export, no further sync.
        pool.abandon();
    }
    problems
}

/// Make `path` a sparse file of `size` bytes (new, or cut to that size).
fn create_sparse_file(path: &Path, size: u64) -> Result<(), String> {
    let made = std::fs::File::create(path).and_then(|file| file.set_len(size));
    made.map_err(|error| format!("{}: {error}", path.display()))
}

/// Create the second pool (a single sparse vdev in `replica/`), unless it is there.
fn create_replica_pool(dir: &Path, tunables: &Tunables) -> Result<(), String> {
    let vdev = replica_dir(dir).join(REPLICA_VDEV);
    if vdev.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(replica_dir(dir))
        .map_err(|error| format!("{}: {error}", replica_dir(dir).display()))?;
    let pool = Pool::create(CreateOptions {
        name: REPLICA_POOL_NAME.into(),
        vdevs: vec![VdevSpec::Leaf(vdev)],
        log: Vec::new(),
        cache: Vec::new(),
        create_size: Some(REPLICA_VDEV_SIZE),
        force: false,
        tunables: tunables.clone(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })
    .map_err(|error| format!("creating the second pool: {error}"))?;
    pool.export()
        .map_err(|error| format!("exporting the new second pool: {error}"))
}

/// Sync `pool` and run `check` on it; what is wrong goes to `problems`, prefixed with `when`.
fn check(pool: &Pool, when: &str, problems: &mut Vec<String>) {
    if let Err(error) = pool.sync() {
        problems.push(format!("sync {when}: {error}"));
        return;
    }
    match check_pool(pool, false) {
        Ok(report) if report.is_clean() => {}
        Ok(report) => problems.push(format!("check {when}: {report:?}")),
        Err(error) => problems.push(format!("check {when}: {error}")),
    }
    check_space_limits(pool, when, problems);
}

/// What a synced pool may hold beyond a quota or refquota: what frees rewrote. Unlinks,
/// truncates and hole punches are never refused (as in zfs), and in a file a snapshot holds
/// they free nothing while rewriting indirect and dnode blocks in up to three copies: seed
/// 4723408254514196545 ended 1.4 MiB over a quota so. A fault in growth admission shows as
/// far more (the workers write tens of MiB a round).
const QUOTA_SLACK: u64 = 4 << 20;

/// Every dataset's `used` within its quota and `referenced` within its refquota (`pool/
/// limits.rs`: admission is exact), but for [`QUOTA_SLACK`].
fn check_space_limits(pool: &Pool, when: &str, problems: &mut Vec<String>) {
    for info in pool.datasets() {
        let limits = info.limits;
        if limits.quota != 0 && info.used > limits.quota + QUOTA_SLACK {
            problems.push(format!(
                "{when}: {} uses {} bytes under a quota of {}",
                info.name, info.used, limits.quota
            ));
        }
        if limits.refquota != 0 && info.referenced > limits.refquota + QUOTA_SLACK {
            problems.push(format!(
                "{when}: {} references {} bytes under a refquota of {}",
                info.name, info.referenced, limits.refquota
            ));
        }
    }
}

/// Copy the vdevs as the crash left them to `crashed/` (and the second pool's to
/// `crashed-replica/`), sparse (the import changes them).
fn keep_crashed_images(dir: &Path) -> Result<(), String> {
    copy_sparse(&pool_dir(dir), &dir.join("crashed"))?;
    copy_sparse(&replica_dir(dir), &dir.join("crashed-replica"))
}

pub(crate) fn copy_sparse(from: &Path, to: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(to);
    let status = Command::new("cp")
        .arg("-r")
        .arg("--sparse=always")
        .arg(from)
        .arg(to)
        .status()
        .map_err(|error| format!("cp: {error}"))?;
    if !status.success() {
        return Err(format!("cp {} {}: {status}", from.display(), to.display()));
    }
    Ok(())
}

/// Keep everything about a failure; returns where.
fn keep_failure(
    options: &RunOptions,
    tunables: &Tunables,
    round: u64,
    problems: &[String],
) -> String {
    let target = options
        .failures_dir
        .join("failures")
        .join(format!("{}-r{round}", options.seed));
    let dir = &options.dir;
    let mut notes = Vec::new();
    if let Err(why) = std::fs::create_dir_all(&target) {
        return format!("nowhere: {}: {why}", target.display());
    }
    for (from, to) in [
        (dir.join("crashed"), target.join("crashed")),
        (pool_dir(dir), target.join("pool")),
        (dir.join("crashed-replica"), target.join("crashed-replica")),
        (replica_dir(dir), target.join("replica")),
    ] {
        if from.exists() {
            if let Err(why) = copy_sparse(&from, &to) {
                notes.push(why);
            }
        }
    }
    for name in ["journal", "child.log", "rounds"] {
        if let Err(why) = std::fs::copy(dir.join(name), target.join(name)) {
            notes.push(format!("{name}: {why}"));
        }
    }
    let text = format!(
        "seed {seed}, round {round}, {threads} threads{replay}{excluded}; ashift {ashift}, {raidz}, {pacing}\n\
         replay: tarn-stress --replay {seed} --duration SECONDS --dir NEW_DIR\n\
         (a replay runs one worker; a failure that needs two threads' timing may not recur)\n\n\
         {problems}\n{notes}",
        seed = options.seed,
        ashift = tunables.vdev_ashift,
        raidz = RaidzLayout::of_seed(options.seed).describe(),
        pacing = describe_pacing(tunables.scan_blocks_per_txg_max),
        threads = if options.replay { 1 } else { options.threads },
        replay = if options.replay { " (replay)" } else { "" },
        excluded = if options.excluded.is_empty() {
            String::new()
        } else {
            format!(", excluding {:?}", options.excluded)
        },
        problems = problems.join("\n"),
        notes = notes.join("\n"),
    );
    let _ = std::fs::write(target.join("failure.txt"), text);
    target.display().to_string()
}

/// The loop: fresh seeds, each in its own directory under `dir`, each given `per_seed` (or
/// what is left), until `duration` is spent. A seed's directory is removed when it passed;
/// failures are kept under `dir/failures`.
pub fn run_loop(
    dir: &Path,
    duration: Duration,
    per_seed: Duration,
    threads: usize,
    excluded: &[Op],
) -> Result<Summary, String> {
    loop_seeds(dir, duration, per_seed, |seed, seed_dir, duration| {
        run(&RunOptions {
            dir: seed_dir.to_path_buf(),
            seed,
            threads,
            duration,
            operations: None,
            replay: false,
            failures_dir: dir.to_path_buf(),
            excluded: excluded.to_vec(),
        })
    })
}

/// Fresh seeds, each run by `run_seed(seed, its directory, its time)`, until `duration` is
/// spent; a passed seed's directory is removed. The loop of [`run_loop`] and of the mount
/// mode ([`crate::mount`]).
pub fn loop_seeds(
    dir: &Path,
    duration: Duration,
    per_seed: Duration,
    run_seed: impl Fn(u64, &Path, Duration) -> Result<Summary, String>,
) -> Result<Summary, String> {
    std::fs::create_dir_all(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
    let end = Instant::now() + duration;
    let mut total = Summary::default();
    while Instant::now() + Duration::from_secs(1) < end {
        let seed: u64 = rand::random::<u64>() >> 1;
        let seed_dir = dir.join(format!("seed-{seed}"));
        let summary = run_seed(
            seed,
            &seed_dir,
            per_seed.min(end.saturating_duration_since(Instant::now())),
        )?;
        println!("seed {seed}: {}", summary.line());
        for failure in &summary.failures {
            println!("  FAILURE {failure}");
        }
        total.add(&summary);
        let _ = std::fs::remove_dir_all(&seed_dir);
    }
    Ok(total)
}
