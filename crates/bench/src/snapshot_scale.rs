//! `tarn bench snapshot-scale`: what tarn costs as snapshots accumulate, as snapshot managers
//! (sanoid, zfs-auto-snapshot, zrepl) make them pile up: hourly ones for days and daily ones
//! for months, on every file system of a pool.
//!
//! A pool on a sparse file holds `--filesystems` file systems (the root and its children),
//! each with one small file. Snapshots are made as `snapshot -r POOL@NAME` makes them, one
//! batch of one snapshot per file system in one txg, until the pool holds each count of
//! `--steps`. At 0 snapshots and at each step it measures:
//! - **the txg of a one-block change**: a write of 8 bytes into one file, then the sync that
//!   carries it (median and p99 over `--txgs` syncs): a txg should cost what changed, not what
//!   the pool holds;
//! - **one snapshot created and destroyed** (each call returns when its txg is on disk);
//! - through the real `tarn` binary and a daemon of its own (a private socket): **`pool
//!   import`**, **`list -t snapshot -H -o name`** of every snapshot, and the **daemon's
//!   resident memory** (VmRSS) after the listing; then `pool export` and `daemon --stop`;
//! - the time the batches to reach the step took, per batch.
//!
//! Every figure is printed beside the same figure at 0 snapshots, measured in the same run,
//! with the ratio. It is a benchmark, not a test: it asserts nothing. A step whose batches
//! would run past `--budget` seconds stops the run there, and the figures reached so far are
//! printed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Args;
use tarn::pool::{ImportOptions, Pool};
use tarn::tunables::Tunables;
use tarn_protocol::error::Failure;
use tarn_protocol::format::parse_size;

use super::{create_bench_pool, print_comparisons, BenchDirLock, Comparison};

const POOL: &str = "snapscale";

#[derive(Args)]
pub struct SnapshotScaleBench {
    /// Directory for the pool's vdev (a sparse file) and the daemon's socket.
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// File systems in the pool, the root included: each batch makes one snapshot of each.
    #[arg(long, default_value_t = 100)]
    filesystems: u64,
    /// Snapshot counts at which to measure (comma-separated, increasing).
    #[arg(long, default_value = "1,1000,10000,100000", value_delimiter = ',')]
    steps: Vec<u64>,
    /// One-block txgs measured at each step.
    #[arg(long, default_value_t = 50)]
    txgs: usize,
    /// Stop before a step whose batches would take longer than this many seconds in all
    /// (estimated from the batches so far).
    #[arg(long, default_value_t = 3600)]
    budget: u64,
    /// Size of the vdev.
    #[arg(long, default_value = "16G")]
    vdev_size: String,
    /// Skip the daemon's figures (import, list, memory): engine figures only.
    #[arg(long)]
    no_daemon: bool,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
}

/// The figures at one snapshot count.
#[derive(Clone, Default)]
struct Figures {
    snapshots: u64,
    txg_median: f64,
    txg_p99: f64,
    /// Median block copies and bytes a one-block txg's sync wrote.
    txg_blocks: f64,
    txg_bytes: f64,
    create: f64,
    destroy: f64,
    /// Seconds per batch of the batches that reached this count (none at 0).
    batch: Option<f64>,
    /// Daemon figures: import and list seconds, resident memory in bytes, names listed.
    daemon: Option<DaemonFigures>,
}

#[derive(Clone, Default)]
struct DaemonFigures {
    import: f64,
    list: f64,
    names: u64,
    resident: f64,
}

/// Progress on a terminal, nothing in scripts.
fn progress(message: &str) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        eprintln!("bench snapshot-scale: {message}");
    }
}

fn failure(context: &str) -> impl Fn(tarn::fs::FsError) -> Failure + '_ {
    move |error| Failure(format!("{context}: {error}"))
}

fn percentile(values: &[f64], fraction: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn filesystem_name(index: u64) -> String {
    if index == 0 {
        POOL.to_string()
    } else {
        format!("{POOL}/fs{index:05}")
    }
}

pub fn run(bench: SnapshotScaleBench) -> Result<(), Failure> {
    if bench.filesystems == 0 || bench.txgs == 0 {
        return Err(Failure(
            "--filesystems and --txgs must be at least 1".into(),
        ));
    }
    if bench.steps.windows(2).any(|pair| pair[0] >= pair[1]) {
        return Err(Failure("--steps must increase".into()));
    }
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&bench.dir)?;
    let vdev = bench.dir.join("bench-snapshot-scale-vdev0.img");
    let tunables = Tunables::from_env().map_err(Failure)?;
    let pool = create_bench_pool(POOL, &vdev, parse_size(&bench.vdev_size)?, &tunables)?;
    let result = measure(pool, &bench, &vdev, &tunables);
    let _ = std::fs::remove_file(&vdev);
    let figures = result?;
    print_comparisons(
        &comparisons(&figures),
        ("tarn", "at_0"),
        bench.json,
        "snapshot-scale",
    )
}

/// Lay out the pool, then measure at 0 snapshots and at each step. The pool is destroyed at
/// the end, whatever happened.
fn measure(
    pool: Pool,
    bench: &SnapshotScaleBench,
    vdev: &Path,
    tunables: &Tunables,
) -> Result<Vec<Figures>, Failure> {
    // No mounts when the daemon imports the pool: its figures are the pool's, not FUSE's.
    pool.set_property(POOL, "mountpoint", Some("none"))?;
    for index in 1..bench.filesystems {
        pool.create_dataset(&filesystem_name(index), &[], false)?;
    }
    let mut changed = 0;
    for index in 0..bench.filesystems {
        let fs = pool.open_file_system(&filesystem_name(index))?;
        let ino = fs
            .create(fs.root(), b"file", 0o644, 0, 0)
            .map_err(failure("create"))?
            .ino;
        fs.write(ino, 0, &[7u8; 4096]).map_err(failure("write"))?;
        if index == 0 {
            changed = ino;
        }
    }
    pool.sync()?;
    let mut state = State {
        pool: Some(pool),
        vdev_dir: vdev.parent().expect("a directory").to_path_buf(),
        tunables: tunables.clone(),
        changed,
        snapshots: 0,
        batches: 0,
        probes: 0,
    };
    let result = state.steps(bench);
    if let Some(pool) = state.pool.take() {
        pool.destroy()?;
    }
    result
}

struct State {
    pool: Option<Pool>,
    vdev_dir: PathBuf,
    tunables: Tunables,
    /// The inode of the file the one-block txgs change (in the root file system).
    changed: u64,
    snapshots: u64,
    batches: u64,
    probes: u64,
}

impl State {
    fn pool(&self) -> &Pool {
        self.pool.as_ref().expect("the pool is imported")
    }

    fn steps(&mut self, bench: &SnapshotScaleBench) -> Result<Vec<Figures>, Failure> {
        let mut all = vec![self.figures(bench, None)?];
        let mut spent = 0.0;
        // Seconds per batch at the last step that made batches: the estimate for the next.
        let mut per_batch = 0.0;
        for &target in &bench.steps {
            // A first step below one batch is reached by single snapshots of the root.
            let batches_needed = target.saturating_sub(self.snapshots) / bench.filesystems;
            if spent + per_batch * batches_needed as f64 > bench.budget as f64 {
                progress(&format!(
                    "stopping before {target} snapshots: about {:.0} s more would pass the budget",
                    per_batch * batches_needed as f64
                ));
                break;
            }
            let started = Instant::now();
            let made_before = self.batches;
            while self.snapshots + bench.filesystems <= target {
                self.batches += 1;
                let name = format!("{POOL}@b{:06}", self.batches);
                let made = self.pool().create_snapshots(&[name], true)?;
                self.snapshots += made.len() as u64;
                if self.batches.is_multiple_of(50) {
                    progress(&format!(
                        "{} snapshots, {:.3} s per batch",
                        self.snapshots,
                        started.elapsed().as_secs_f64() / (self.batches - made_before) as f64
                    ));
                }
            }
            while self.snapshots < target {
                self.probes += 1;
                let name = format!("{POOL}@single{:06}", self.probes);
                self.pool().create_snapshots(&[name], false)?;
                self.snapshots += 1;
            }
            let elapsed = started.elapsed().as_secs_f64();
            spent += elapsed;
            let made = self.batches - made_before;
            let batch = (made > 0).then(|| elapsed / made as f64);
            per_batch = batch.unwrap_or(per_batch);
            all.push(self.figures(bench, batch)?);
        }
        Ok(all)
    }

    fn figures(
        &mut self,
        bench: &SnapshotScaleBench,
        batch: Option<f64>,
    ) -> Result<Figures, Failure> {
        progress(&format!("measuring at {} snapshots", self.snapshots));
        let mut txgs = Vec::with_capacity(bench.txgs);
        {
            let pool = self.pool();
            let fs = pool.open_file_system(POOL)?;
            for round in 0..bench.txgs as u64 {
                fs.write(self.changed, 0, &round.to_le_bytes())
                    .map_err(failure("write"))?;
                let started = Instant::now();
                pool.sync()?;
                txgs.push(started.elapsed().as_secs_f64());
            }
        }
        let (txg_blocks, txg_bytes) = self.txg_writes(bench.txgs);
        self.probes += 1;
        let probe = format!("{POOL}@probe{:06}", self.probes);
        let started = Instant::now();
        self.pool()
            .create_snapshots(std::slice::from_ref(&probe), false)?;
        let create = started.elapsed().as_secs_f64();
        let started = Instant::now();
        self.pool().destroy_snapshots(&probe, false)?;
        let destroy = started.elapsed().as_secs_f64();
        let daemon = if bench.no_daemon {
            None
        } else {
            Some(self.daemon_figures(bench)?)
        };
        Ok(Figures {
            snapshots: self.snapshots,
            txg_median: percentile(&txgs, 0.5),
            txg_p99: percentile(&txgs, 0.99),
            txg_blocks,
            txg_bytes,
            create,
            destroy,
            batch,
            daemon,
        })
    }

    /// The median block copies and bytes written by the last `txgs` synced txgs (the one-block
    /// txgs just measured): what a txg costs on disk beside what it costs in time.
    fn txg_writes(&self, txgs: usize) -> (f64, f64) {
        let history = self.pool().txg_history();
        let synced: Vec<_> = history
            .iter()
            .filter(|row| row.state == tarn::txg::TxgState::Committed && row.passes > 0)
            .rev()
            .take(txgs)
            .collect();
        if synced.is_empty() {
            return (0.0, 0.0);
        }
        let blocks: Vec<f64> = synced.iter().map(|row| row.blocks_written as f64).collect();
        let bytes: Vec<f64> = synced.iter().map(|row| row.written_bytes as f64).collect();
        (percentile(&blocks, 0.5), percentile(&bytes, 0.5))
    }

    /// Export the pool, let a daemon of its own import and list it through the `tarn` binary,
    /// then import it here again.
    fn daemon_figures(&mut self, bench: &SnapshotScaleBench) -> Result<DaemonFigures, Failure> {
        if let Some(pool) = self.pool.take() {
            pool.export()?;
        }
        let daemon = Daemon::new(&bench.dir)?;
        let result = (|| {
            let dir = self.vdev_dir.display().to_string();
            let started = Instant::now();
            daemon.run(&["pool", "import", "-d", &dir, POOL])?;
            let import = started.elapsed().as_secs_f64();
            let started = Instant::now();
            let listed = daemon.run(&["list", "-t", "snapshot", "-H", "-o", "name"])?;
            let list = started.elapsed().as_secs_f64();
            let resident = daemon.resident_bytes()?;
            daemon.run(&["pool", "export", POOL])?;
            Ok(DaemonFigures {
                import,
                list,
                names: listed.lines().count() as u64,
                resident,
            })
        })();
        daemon.stop();
        let (pool, _) = Pool::import(
            POOL,
            ImportOptions::new(vec![self.vdev_dir.clone()], self.tunables.clone()),
        )?;
        self.pool = Some(pool);
        result
    }
}

/// A daemon of the benchmark's own, on a socket in the bench directory, started by the first
/// command that needs one (as `tarn` starts one for any user).
struct Daemon {
    program: PathBuf,
    socket: PathBuf,
}

impl Daemon {
    fn new(dir: &Path) -> Result<Daemon, Failure> {
        let program = std::env::current_exe()
            .map_err(|e| Failure(format!("the tarn binary: {e}; use --no-daemon")))?;
        if program.file_name().and_then(|name| name.to_str()) != Some("tarn") {
            return Err(Failure(format!(
                "{} is not the tarn binary: run through `tarn bench`, or use --no-daemon",
                program.display()
            )));
        }
        Ok(Daemon {
            program,
            socket: dir.join("snapshot-scale.sock"),
        })
    }

    /// `tarn ARGS` against this daemon; its standard output, or a failure with its stderr.
    fn run(&self, args: &[&str]) -> Result<String, Failure> {
        let output = Command::new(&self.program)
            .args(args)
            .env("TARN_SOCKET", &self.socket)
            .output()
            .map_err(|e| Failure(format!("tarn {}: {e}", args.join(" "))))?;
        if !output.status.success() {
            return Err(Failure(format!(
                "tarn {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        String::from_utf8(output.stdout).map_err(|e| Failure(format!("tarn output: {e}")))
    }

    /// The daemon's resident memory (VmRSS), from the pid file beside its socket.
    fn resident_bytes(&self) -> Result<f64, Failure> {
        let mut pid_file = self.socket.clone().into_os_string();
        pid_file.push(".pid");
        let pid = std::fs::read_to_string(&pid_file)
            .map_err(|e| Failure(format!("the daemon's pid file: {e}")))?;
        let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim()))
            .map_err(|e| Failure(format!("the daemon's status: {e}")))?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .and_then(|kib| kib.trim().parse::<f64>().ok())
            .map(|kib| kib * 1024.0)
            .ok_or_else(|| Failure("no VmRSS in the daemon's status".into()))
    }

    /// Stop the daemon and wait until its socket is gone (a later import must not race it).
    fn stop(&self) {
        let _ = self.run(&["daemon", "--stop"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.socket.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Each figure at each step beside the same figure at 0 snapshots.
fn comparisons(all: &[Figures]) -> Vec<Comparison> {
    let Some((zero, steps)) = all.split_first() else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for at in steps {
        let mut row = |what: &str, tarn: f64, baseline: f64, baseline_what: Option<&str>| {
            rows.push(Comparison {
                what: format!("{what} at {} snapshots", at.snapshots),
                tarn,
                baseline_what: baseline_what.map_or_else(|| format!("{what} at 0"), str::to_string),
                baseline,
            })
        };
        row(
            "one-block txg median s",
            at.txg_median,
            zero.txg_median,
            None,
        );
        row("one-block txg p99 s", at.txg_p99, zero.txg_p99, None);
        let blocks = "one-block txg block copies written (median)";
        row(blocks, at.txg_blocks, zero.txg_blocks, None);
        let kib = |bytes: f64| bytes / 1024.0;
        let written = "one-block txg KiB written (median)";
        row(written, kib(at.txg_bytes), kib(zero.txg_bytes), None);
        row("create one snapshot s", at.create, zero.create, None);
        row("destroy one snapshot s", at.destroy, zero.destroy, None);
        if let Some(batch) = at.batch {
            // Batches are made only between steps: the first step's stand for the empty pool's.
            let first = steps
                .iter()
                .find_map(|figures| figures.batch)
                .unwrap_or(batch);
            let label = Some("the first step's batches");
            row("snapshot -r batch s", batch, first, label);
        }
        if let (Some(daemon), Some(base)) = (&at.daemon, &zero.daemon) {
            row("pool import s", daemon.import, base.import, None);
            let list = format!("list -t snapshot ({} names) s", daemon.names);
            row(&list, daemon.list, base.list, None);
            let mib = |bytes: f64| bytes / (1u64 << 20) as f64;
            row(
                "daemon resident MiB",
                mib(daemon.resident),
                mib(base.resident),
                None,
            );
        }
    }
    rows
}
