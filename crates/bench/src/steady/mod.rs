//! `tarn bench run` and `tarn bench steady`: a benchmark harness that measures only once the
//! system under load has stopped changing, by array-level steady-state detection over ten
//! metrics of the ARC, the L2ARC and the pool (the SDC 2020 talk on steady state for ZFS
//! servers, with the SNIA PTS rule per metric).
//!
//! A run has up to three phases:
//! 1. preconditioning (`--precondition`): the active data set written sequentially once;
//! 2. settling: the workload runs, and every `--interval` seconds the sampler reads the
//!    source's counters and the detector judges the interval; the phase ends when the system
//!    is steady, or after `--max-time` seconds, when the run gives up and says so;
//! 3. measurement: once steady, the harness says so (on a terminal) and keeps the workload
//!    and the sampling going for `--measure` seconds (default: one window); the report's
//!    figures are that phase's.
//!
//! With `--runtime S` the run is instead a fixed-duration run of S seconds (the comparison
//! a steady-state run is set beside): the detector still judges every interval and the record
//! says when it would have been steady, but nothing stops early.
//!
//! Modules: `detector` (the pure steady-state rule), `metrics` (the ten metrics from counter
//! readings; the arcstats and `zpool iostat` parsers), `sources` (tarn daemon, tarn in-process,
//! OpenZFS host; the interval sampler), `workload` (the fio-like load), `record` (the JSON
//! record and replay files), `chart` (SVG/PNG charts).
//!
//! The record of a run replays with `tarn bench steady --replay FILE`, through the same
//! detector and thresholds, so a decision can be checked offline and on data from any host.

pub mod chart;
pub mod detector;
pub mod fio;
pub mod metrics;
pub mod record;
pub mod sources;
pub mod workload;

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use tarn_protocol::error::Failure;
use tarn_protocol::format::{parse_size, print_table, Cell, ListFormat};

use self::detector::{Detector, IntervalVerdict, Thresholds, METRICS};
use self::metrics::CacheConfig;
use self::sources::{ArcstatsFrom, Sampler, Source};
use self::workload::{Job, Pattern, Target, Workload};

/// The detector's thresholds, shared by a live run and a replay.
#[derive(Args, Debug, Clone)]
pub struct DetectorArgs {
    /// Intervals in the steady-state window [default: 20; a replay: the recording's].
    #[arg(long)]
    pub window: Option<usize>,
    /// A metric's range in the window may be at most this % of its mean.
    #[arg(long, default_value_t = 20.0)]
    pub range_pct: f64,
    /// Its least-squares line may move at most this % of its mean across the window.
    #[arg(long, default_value_t = 10.0)]
    pub slope_pct: f64,
    /// Steady metrics the system needs when L2ARC metrics are present.
    #[arg(long, default_value_t = 7)]
    pub min_steady: usize,
    /// Steady metrics the system needs without an L2ARC.
    #[arg(long, default_value_t = 4)]
    pub min_steady_without_l2arc: usize,
    /// ads_cached_pct the gate needs, unless the caches are full.
    #[arg(long, default_value_t = 85.0)]
    pub ads_cached_min_pct: f64,
    /// ARC (and L2ARC) size in % of their maximum that counts as full for the gate.
    #[arg(long, default_value_t = 80.0)]
    pub cache_full_pct: f64,
    /// Intervals in a row a failed collection still counts as steady.
    #[arg(long, default_value_t = 2)]
    pub failed_steady_intervals: usize,
}

impl DetectorArgs {
    fn thresholds(&self, recorded_window: Option<usize>) -> Result<Thresholds, Failure> {
        let window = self.window.or(recorded_window).unwrap_or(20);
        if window < 2 {
            return Err(Failure("--window must be at least 2 intervals".into()));
        }
        for (name, value) in [
            ("--range-pct", self.range_pct),
            ("--slope-pct", self.slope_pct),
            ("--ads-cached-min-pct", self.ads_cached_min_pct),
            ("--cache-full-pct", self.cache_full_pct),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(Failure(format!("{name} must be a percentage, not {value}")));
            }
        }
        Ok(Thresholds {
            window,
            range_pct: self.range_pct,
            slope_pct: self.slope_pct,
            min_steady: self.min_steady,
            min_steady_without_l2arc: self.min_steady_without_l2arc,
            ads_cached_min_pct: self.ads_cached_min_pct,
            cache_full_pct: self.cache_full_pct,
            failed_steady_intervals: self.failed_steady_intervals,
        })
    }
}

/// `tarn bench run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The workload: the fio-like job of the options below, or a named benchmark's workload
    /// (timeseries, frag, clone-churn, receive; these need --engine).
    #[arg(long, value_enum, default_value = "job")]
    pub workload: Workload,
    /// The frag workload fills the pool to this % before its overwrites.
    #[arg(long, default_value_t = 50)]
    pub fill: u64,
    /// Access pattern (fio's --rw).
    #[arg(long, value_enum, default_value = "randwrite")]
    pub rw: Pattern,
    /// Percent of reads in the rw and randrw patterns.
    #[arg(long, default_value_t = 50)]
    pub rwmixread: u8,
    /// Block size of each I/O.
    #[arg(long, default_value = "4K")]
    pub bs: String,
    /// I/Os in flight per job (one thread each).
    #[arg(long, default_value_t = 1)]
    pub iodepth: usize,
    /// Jobs, each with its own file.
    #[arg(long, default_value_t = 1)]
    pub numjobs: usize,
    /// Bytes per job; the active data set is --size times --numjobs.
    #[arg(long, default_value = "256M")]
    pub size: String,
    /// Open the job's files with O_DIRECT (fio's --direct=1), so that the I/O reaches the
    /// file system under test instead of the page cache; --bs a multiple of 4K. No effect
    /// with --engine, which has no page cache.
    #[arg(long)]
    pub direct: bool,
    /// Run the workload on files in this directory (a tarn mount, any file system).
    #[arg(long, conflicts_with = "engine")]
    pub directory: Option<PathBuf>,
    /// Run on a new pool opened in this process on a sparse vdev in this directory (no FUSE,
    /// no daemon); its counters are the source.
    #[arg(long)]
    pub engine: Option<PathBuf>,
    /// Size of the --engine pool's vdev.
    #[arg(long, default_value = "2G")]
    pub vdev_size: String,
    /// The tarn pool (held by the daemon) whose counters are measured.
    #[arg(long, conflicts_with_all = ["engine", "openzfs"])]
    pub pool: Option<String>,
    /// The OpenZFS pool of this host whose counters are measured (arcstats, zpool iostat).
    #[arg(long, conflicts_with = "engine")]
    pub openzfs: Option<String>,
    /// Where an OpenZFS host's arcstats are: a file, or `sysctl` (FreeBSD).
    #[arg(long)]
    pub arcstats: Option<String>,
    /// Capacity of the cache devices, for l2_size_pct.
    #[arg(long)]
    pub l2arc_size: Option<String>,
    /// Most bytes the L2ARC feed writes per second, for l2_write_pct.
    #[arg(long)]
    pub l2arc_write_max: Option<String>,
    /// Write the active data set sequentially before the workload.
    #[arg(long)]
    pub precondition: bool,
    /// Seconds per interval.
    #[arg(long, default_value_t = 15.0)]
    pub interval: f64,
    #[command(flatten)]
    pub detector: DetectorArgs,
    /// Give up after this many seconds without steady state.
    #[arg(long, default_value_t = 3600.0)]
    pub max_time: f64,
    /// Seconds of the measurement phase once steady [default: one window].
    #[arg(long)]
    pub measure: Option<f64>,
    /// Run exactly this many seconds instead (a fixed-duration run; nothing stops early).
    #[arg(long)]
    pub runtime: Option<f64>,
    /// Write the record of every interval here (JSON).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a chart here (.svg, or .png through rsvg-convert).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Print the record as JSON instead of the summary.
    #[arg(short = 'j')]
    pub print_json: bool,
    /// Run the job with fio instead, with fio's own steady-state detection (e.g. iops:20% or
    /// iops_slope:10%) over one window, and report what fio decided beside the harness.
    #[arg(long, value_name = "CRITERION", conflicts_with = "engine")]
    pub fio_steadystate: Option<String>,
    /// Keep the workload's files in --directory afterwards.
    #[arg(long)]
    pub keep_files: bool,
}

/// `tarn bench steady`.
#[derive(Args, Debug)]
pub struct SteadyArgs {
    /// A recorded series: the JSON of tarn bench run, or CSV (t, then metric columns).
    #[arg(long)]
    pub replay: PathBuf,
    #[command(flatten)]
    pub detector: DetectorArgs,
    /// Write a chart of the replay here (.svg or .png).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// JSON output: the record of the replay.
    #[arg(short = 'j')]
    pub json: bool,
}

/// A status line on a terminal, rewritten in place; nothing when stderr is not a terminal.
struct Progress(bool);

impl Progress {
    fn new() -> Progress {
        Progress(std::io::stderr().is_terminal())
    }

    fn show(&self, line: &str) {
        if self.0 {
            eprint!("\r{line}\x1b[K");
        }
    }

    fn say(&self, line: &str) {
        if self.0 {
            eprintln!("\r{line}\x1b[K");
        }
    }
}

fn seconds(name: &str, value: f64) -> Result<Duration, Failure> {
    if !value.is_finite() || value <= 0.0 || value > 1e7 {
        return Err(Failure(format!(
            "{name} must be a positive number of seconds"
        )));
    }
    Ok(Duration::from_secs_f64(value))
}

fn optional_size(text: &Option<String>) -> Result<Option<u64>, Failure> {
    text.as_deref().map(parse_size).transpose().map_err(Failure)
}

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ending {
    Measured,
    GaveUp,
    FixedRuntime,
    /// fio (the load of --fio-steadystate) ended by itself, its steady state reached.
    FioStopped,
}

pub fn run(args: RunArgs, socket: &Path) -> Result<(), Failure> {
    let thresholds = args.detector.thresholds(None)?;
    let interval = seconds("--interval", args.interval)?;
    let max_time = seconds("--max-time", args.max_time)?;
    let runtime = args
        .runtime
        .map(|value| seconds("--runtime", value))
        .transpose()?;
    let measure = match args.measure {
        Some(0.0) => Duration::ZERO,
        Some(value) => seconds("--measure", value)?,
        None => interval * thresholds.window as u32,
    };
    let job = Job {
        rw: args.rw,
        rwmixread: args.rwmixread,
        bs: parse_size(&args.bs)?,
        iodepth: args.iodepth,
        numjobs: args.numjobs,
        size: parse_size(&args.size)?,
        direct: args.direct,
    };
    job.check()?;
    if args.workload != Workload::Job && args.engine.is_none() {
        return Err(Failure(format!(
            "the {} workload runs on an in-process pool: give --engine DIR",
            json!(args.workload).as_str().unwrap_or_default()
        )));
    }
    if args.fill == 0 || args.fill >= 100 {
        return Err(Failure(
            "--fill must be a percentage between 1 and 99".into(),
        ));
    }
    let config = CacheConfig {
        l2arc_capacity: optional_size(&args.l2arc_size)?,
        l2arc_write_max_per_second: optional_size(&args.l2arc_write_max)?.map(|rate| rate as f64),
        active_data_set: match args.workload {
            Workload::Job => Some(job.active_data_set()),
            // The frag workload's data set is whatever the fill took: not known here.
            Workload::Frag => None,
            _ => Some(job.size),
        },
    };
    if let Some(dir) = &args.engine {
        std::fs::create_dir_all(dir).map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
        let _lock = super::BenchDirLock::take(dir)?;
        let vdev = dir.join("bench-run-vdev0.img");
        let tunables = tarn::tunables::Tunables::from_env().map_err(Failure)?;
        let pool = Arc::new(super::create_bench_pool(
            "benchrun",
            &vdev,
            parse_size(&args.vdev_size)?,
            &tunables,
        )?);
        let target = Target::Engine(pool.clone(), tunables.indirect_block_shift as u8);
        let result = run_phases(
            &args,
            &job,
            &target,
            Source::TarnEngine(pool.clone()),
            config,
            thresholds,
            (interval, max_time, runtime, measure),
        );
        drop(target);
        let destroyed = match Arc::try_unwrap(pool) {
            Ok(pool) => pool.destroy().map_err(Failure::from),
            Err(_) => Ok(()),
        };
        let _ = std::fs::remove_file(&vdev);
        return result.and(destroyed);
    }
    let Some(dir) = &args.directory else {
        return Err(Failure(
            "say where the workload runs: --directory PATH (a mount or any directory) or \
             --engine DIR (a new in-process pool)"
                .into(),
        ));
    };
    let source = match (&args.pool, &args.openzfs) {
        (Some(pool), None) => Source::TarnDaemon {
            socket: socket.to_path_buf(),
            pool: pool.clone(),
        },
        (None, Some(pool)) => Source::OpenZfs {
            pool: pool.clone(),
            arcstats: match args.arcstats.as_deref() {
                None => sources::default_arcstats(),
                Some("sysctl") => ArcstatsFrom::Sysctl,
                Some(path) => ArcstatsFrom::File(PathBuf::from(path)),
            },
        },
        _ => {
            return Err(Failure(
                "name the pool to measure: --pool POOL (a tarn pool the daemon holds) or \
                 --openzfs POOL (an OpenZFS pool of this host)"
                    .into(),
            ))
        }
    };
    if !dir.is_dir() {
        return Err(Failure(format!("{}: not a directory", dir.display())));
    }
    let target = Target::Directory(dir.clone());
    let result = run_phases(
        &args,
        &job,
        &target,
        source,
        config,
        thresholds,
        (interval, max_time, runtime, measure),
    );
    if !args.keep_files {
        for file in workload::job_files(&job, dir) {
            let _ = std::fs::remove_file(file);
        }
    }
    result
}

fn run_phases(
    args: &RunArgs,
    job: &Job,
    target: &Target,
    source: Source,
    config: CacheConfig,
    thresholds: Thresholds,
    timing: Timing,
) -> Result<(), Failure> {
    let progress = Progress::new();
    match (args.workload, target) {
        (Workload::Job, _) => {}
        (named, Target::Engine(pool, _)) => {
            progress.show("setting up the workload");
            let scratch = args.engine.as_deref().unwrap_or(Path::new("."));
            let load =
                Running::Threads(workload::start_named(named, pool, job, args.fill, scratch)?);
            let result = sample(args, job, source, config, thresholds, timing, load);
            let _ = std::fs::remove_file(scratch.join("bench-run.stream"));
            return result;
        }
        (_, Target::Directory(_)) => {
            return Err(Failure("the named workloads need --engine DIR".into()))
        }
    }
    let stores = workload::open(job, target)?;
    if args.precondition {
        progress.show(&format!(
            "preconditioning: writing {} sequentially",
            tarn_protocol::format::human_bytes(job.active_data_set())
        ));
        let started = Instant::now();
        workload::precondition(job, &stores)?;
        source.sync_pool()?;
        progress.say(&format!(
            "preconditioned in {:.1} s",
            started.elapsed().as_secs_f64()
        ));
    }
    let load = match &args.fio_steadystate {
        None => Running::Threads(workload::start(job, &stores)),
        Some(criterion) => {
            let Target::Directory(dir) = target else {
                return Err(Failure("--fio-steadystate needs --directory".into()));
            };
            let report =
                std::env::temp_dir().join(format!("tarn-bench-fio-{}.json", std::process::id()));
            let window = timing.0 * thresholds.window as u32;
            Running::Fio(fio::start(job, dir, criterion, window, timing.1, &report)?)
        }
    };
    sample(args, job, source, config, thresholds, timing, load)
}

/// The load of a run: the harness's own threads, or fio.
enum Running {
    Threads(workload::Load),
    Fio(fio::FioLoad),
}

impl Running {
    /// Why the load cannot go on: an I/O error of the threads.
    fn failed(&self) -> Option<String> {
        match self {
            Running::Threads(load) => load.failed(),
            Running::Fio(_) => None,
        }
    }

    /// Whether fio ended by itself.
    fn ended(&mut self) -> bool {
        match self {
            Running::Threads(_) => false,
            Running::Fio(fio) => fio.ended(),
        }
    }

    /// Stop; the threads' operation count, or fio's verdict.
    fn stop(self) -> Result<(u64, Option<fio::FioVerdict>), Failure> {
        match self {
            Running::Threads(load) => {
                let ops = load.counters.ops.load(std::sync::atomic::Ordering::Relaxed);
                load.stop().map(|()| (ops, None))
            }
            Running::Fio(fio) => fio.stop().map(|verdict| (0, Some(verdict))),
        }
    }
}

/// Interval, give-up time, fixed runtime (if any) and measurement phase of a run.
type Timing = (Duration, Duration, Option<Duration>, Duration);

/// Sample the running `load` interval by interval until the run ends, then report.
fn sample(
    args: &RunArgs,
    job: &Job,
    source: Source,
    config: CacheConfig,
    thresholds: Thresholds,
    (interval, max_time, runtime, measure): Timing,
    mut load: Running,
) -> Result<(), Failure> {
    let progress = Progress::new();
    let mut sampler = match Sampler::start(source, config) {
        Ok(sampler) => sampler,
        Err(error) => {
            let _ = load.stop();
            return Err(error);
        }
    };
    let source_name = sampler.source().describe();
    let started = Instant::now();
    let mut detector = Detector::new(thresholds.clone());
    let mut verdicts: Vec<IntervalVerdict> = Vec::new();
    let mut phases: Vec<&str> = Vec::new();
    let mut measuring_from: Option<(usize, Instant)> = None;
    let mut interval_start = 0.0;
    let ending = loop {
        let deadline = started + interval * (verdicts.len() as u32 + 1);
        let measurement = sampler.next(deadline);
        let verdict = detector.push(
            interval_start,
            measurement.samples,
            measurement.ads_cached_pct,
        );
        interval_start = (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
        let index = verdicts.len();
        phases.push(if measuring_from.is_some() {
            "measuring"
        } else {
            "settling"
        });
        progress.show(&format!(
            "interval {index} t={:.0}s: {} of {} steady (need {}){}",
            verdict.t,
            verdict.steady_count,
            verdict.present_count,
            verdict.required,
            if verdict.steady {
                ", system steady"
            } else {
                ""
            }
        ));
        let steady = verdict.steady;
        verdicts.push(verdict);
        if let Some(error) = load.failed() {
            let _ = load.stop();
            return Err(Failure(format!("the workload failed: {error}")));
        }
        if load.ended() {
            break Ending::FioStopped;
        }
        let elapsed = started.elapsed();
        if let Some(runtime) = runtime {
            if elapsed + Duration::from_millis(1) >= runtime {
                break Ending::FixedRuntime;
            }
            continue;
        }
        if measuring_from.is_none() && steady {
            progress.say(&format!(
                "steady at interval {index} (t = {:.0} s): measuring for {:.0} s",
                verdicts[index].t,
                measure.as_secs_f64()
            ));
            measuring_from = Some((index + 1, Instant::now()));
        }
        match measuring_from {
            Some((_, since)) if since.elapsed() + Duration::from_millis(1) >= measure => {
                break Ending::Measured
            }
            None if elapsed >= max_time => break Ending::GaveUp,
            _ => {}
        }
    };
    let load_seconds = started.elapsed().as_secs_f64();
    let (mut load_ops, fio_verdict) = load.stop()?;
    if let Some(verdict) = &fio_verdict {
        load_ops = (verdict.iops * verdict.runtime_s) as u64;
    }
    progress.say("");
    let steady_at = detector.steady_at();
    let summary_from = match (ending, measuring_from) {
        (Ending::Measured, Some((from, _))) => from.min(verdicts.len().saturating_sub(1)),
        _ => 0,
    };
    let rows = chart::summary(&verdicts, summary_from);
    let record = json!({
        "interval_s": interval.as_secs_f64(),
        "window": thresholds.window,
        "thresholds": thresholds,
        "source": source_name,
        "workload": json!({"name": args.workload, "job": job, "fill_pct": args.fill}),
        "precondition": args.precondition,
        "ending": match ending {
            Ending::Measured => "measured",
            Ending::GaveUp => "gave up: not steady within --max-time",
            Ending::FixedRuntime => "fixed runtime",
            Ending::FioStopped => "fio stopped at its own steady state",
        },
        "fio": fio_verdict,
        "steady_at": steady_at,
        "steady_at_s": steady_at.map(|index| verdicts[index].t + interval.as_secs_f64()),
        "measurement_from": (ending == Ending::Measured).then_some(summary_from),
        "elapsed_s": load_seconds,
        "workload_iops": load_ops as f64 / load_seconds.max(1e-9),
        "summary": summary_json(&rows),
        "intervals": verdicts.iter().zip(&phases)
            .map(|(verdict, phase)| record::interval_json(verdict, phase))
            .collect::<Vec<_>>(),
    });
    if let Some(path) = &args.json {
        std::fs::write(
            path,
            serde_json::to_string_pretty(&record).expect("json") + "\n",
        )
        .map_err(|e| Failure(format!("{}: {e}", path.display())))?;
    }
    if let Some(path) = &args.chart {
        let title = format!(
            "tarn bench run: {} bs={} iodepth={} numjobs={} size={} on {}",
            match args.workload {
                Workload::Job => json!(job.rw),
                named => json!(named),
            }
            .as_str()
            .unwrap_or_default(),
            tarn_protocol::format::human_bytes(job.bs),
            job.iodepth,
            job.numjobs,
            tarn_protocol::format::human_bytes(job.size),
            source_name
        );
        chart::write(path, &chart::svg(&title, &verdicts, steady_at, &rows)?)?;
    }
    if args.print_json {
        tarn_protocol::json::Document::of("tarn bench run", record).print();
    } else {
        let outcome = match (steady_at, ending) {
            (Some(index), _) => format!(
                "steady at interval {index} (t = {:.0} s, after {:.0} s of load)",
                verdicts[index].t,
                verdicts[index].t + interval.as_secs_f64()
            ),
            (None, Ending::GaveUp) => format!(
                "not steady after {:.0} s: gave up (--max-time)",
                max_time.as_secs_f64()
            ),
            (None, _) => "never steady".into(),
        };
        out!("{source_name}: {outcome}");
        if let Some(verdict) = &fio_verdict {
            out!(
                "fio --steadystate={}: {} after {:.0} s of its job ({:.0} IOPS)",
                verdict.criterion,
                if verdict.attained {
                    "steady (fio stopped its job)"
                } else {
                    "not steady"
                },
                verdict.runtime_s,
                verdict.iops
            );
        }
        out!(
            "workload: {:.0} IOPS over {load_seconds:.0} s; figures below over {}",
            load_ops as f64 / load_seconds.max(1e-9),
            if summary_from > 0 {
                "the measurement phase"
            } else {
                "the whole run"
            }
        );
        print_summary(&rows)?;
    }
    if ending == Ending::GaveUp {
        return Err(Failure(format!(
            "not steady within --max-time ({:.0} s)",
            max_time.as_secs_f64()
        )));
    }
    Ok(())
}

fn summary_json(rows: &[chart::SummaryRow]) -> serde_json::Value {
    rows.iter()
        .map(|row| {
            (
                row.name.clone(),
                json!({"mean": row.mean, "min": row.min, "max": row.max,
                       "steady_last": row.steady_last, "steady_share_pct": row.steady_share_pct,
                       "failed": row.failed}),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn number_cell(value: Option<f64>) -> Cell {
    match value {
        Some(value) => Cell {
            exact: format!("{value:.4}"),
            human: format!("{value:.2}"),
            json: json!(value),
        },
        None => Cell::text("-"),
    }
}

fn print_summary(rows: &[chart::SummaryRow]) -> Result<(), Failure> {
    let cells: Vec<Vec<Cell>> = rows
        .iter()
        .map(|row| {
            vec![
                Cell::text(row.name.clone()),
                number_cell(row.mean),
                number_cell(row.min),
                number_cell(row.max),
                Cell::text(if row.steady_last { "yes" } else { "no" }),
                Cell::text(format!("{:.0}", row.steady_share_pct)),
                Cell::text(row.failed.to_string()),
            ]
        })
        .collect();
    print_table(
        &[
            "metric", "mean", "min", "max", "steady", "steady%", "failed",
        ],
        &cells,
        &ListFormat::default(),
        "tarn bench run",
        "summary",
    )
    .map_err(Failure)
}

/// `tarn bench steady --replay FILE`.
pub fn replay(args: SteadyArgs) -> Result<(), Failure> {
    let path = &args.replay;
    let text =
        std::fs::read_to_string(path).map_err(|e| Failure(format!("{}: {e}", path.display())))?;
    let series = record::parse_series(&text)
        .map_err(|error| Failure(format!("{}: {error}", path.display())))?;
    let thresholds = args.detector.thresholds(series.window)?;
    let mut detector = Detector::new(thresholds.clone());
    let verdicts: Vec<IntervalVerdict> = series
        .intervals
        .into_iter()
        .map(|interval| detector.push(interval.t, interval.samples, interval.ads_cached_pct))
        .collect();
    let steady_at = detector.steady_at();
    if let Some(chart_path) = &args.chart {
        let rows = chart::summary(&verdicts, 0);
        let title = format!("tarn bench steady --replay {}", path.display());
        chart::write(
            chart_path,
            &chart::svg(&title, &verdicts, steady_at, &rows)?,
        )?;
    }
    if args.json {
        let record = json!({
            "interval_s": series.interval_s,
            "window": thresholds.window,
            "thresholds": thresholds,
            "steady_at": steady_at,
            "intervals": verdicts.iter()
                .map(|verdict| record::interval_json(verdict, "replay"))
                .collect::<Vec<_>>(),
        });
        tarn_protocol::json::Document::of("tarn bench steady", record).print();
        return Ok(());
    }
    let present: Vec<usize> = (0..METRICS.len())
        .filter(|metric| {
            verdicts
                .iter()
                .any(|verdict| verdict.metrics[*metric].present)
        })
        .collect();
    let mut columns = vec!["t", "system", "steady", "gate"];
    columns.extend(present.iter().map(|metric| METRICS[*metric]));
    let rows: Vec<Vec<Cell>> = verdicts
        .iter()
        .map(|verdict| {
            let mut row = vec![
                Cell::text(format!("{}", verdict.t)),
                Cell::text(if verdict.steady { "STEADY" } else { "-" }),
                Cell::text(format!("{}/{}", verdict.steady_count, verdict.required)),
                Cell::text(match (&verdict.gate.passed, &verdict.gate.flag) {
                    (true, None) => "pass",
                    (true, Some(_)) => "pass!",
                    (false, _) => "hold",
                }),
            ];
            row.extend(present.iter().map(|metric| {
                let metric = &verdict.metrics[*metric];
                let value = metric
                    .value
                    .map_or("-".to_string(), |value| format!("{value:.3}"));
                let mark = match (metric.steady, metric.flag.is_some()) {
                    (true, false) => "*",
                    (true, true) => "*!",
                    (false, true) => "!",
                    (false, false) => "",
                };
                Cell::text(format!("{value}{mark}"))
            }));
            row
        })
        .collect();
    print_table(
        &columns,
        &rows,
        &ListFormat::default(),
        "tarn bench steady",
        "intervals",
    )
    .map_err(Failure)?;
    out!("* steady; ! flagged (collection failed; pass! = gate passed, data set size unknown)");
    match steady_at {
        Some(index) => out!(
            "steady at interval {index} (t = {}), window {}",
            verdicts[index].t,
            thresholds.window
        ),
        None => out!(
            "never steady in {} intervals, window {}",
            verdicts.len(),
            thresholds.window
        ),
    }
    Ok(())
}
