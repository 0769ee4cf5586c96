//! `tarn bench frag`: the allocator on a pool filled to 50, 75 and 90% with 8 KiB-record files,
//! then hit with random 8 KiB overwrites.
//!
//! The engine runs in this process (no FUSE). The pool's txgs are driven by its own txg timer
//! (`txg_timeout`, 1 second unless `TARN_TUNABLE_txg_timeout` says otherwise); the benchmark only
//! writes. Per fill level it reports the overwrites' rate and latency (each `write` call, which
//! includes any throttle delay), the allocation figures of the txgs that synced during the
//! phase (from the txg history: `alloc_segments_p999` and `alloc_p999_ns` as their maximum,
//! `alloc_load_waits` as a share of all allocations), sync time and passes, and the pool's
//! fragmentation at the end of the phase. The baseline is the same overwrites (same count,
//! offsets and bytes) as `pwrite`s on a plain file of the same size in the same directory,
//! followed by one `fsync`, as tarn's phase ends with a sync: the ratio is tarn's rate over it.
//!
//! The whole run is made twice, on a pool with the log space map and on one without
//! (`feature@log_spacemap=disabled`), each vdev cut into at least 200 metaslabs
//! (`with_bench_metaslabs`), and a second table sets the log's space-map block writes per txg,
//! write IOPS and median sync time beside the figures without it.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Instant;

use tarn::tunables::Tunables;
use tarn_protocol::error::Failure;
use tarn_protocol::format::{print_table, pseudo_random, Cell, ListFormat};

use super::{
    comparisons_json, create_bench_pool_with_log, median, print_comparisons, ratio_cell,
    with_bench_metaslabs, BenchDirLock, Comparison, LOG_SPACEMAP_MODES,
};

/// What `tarn bench frag` was asked to do.
pub struct FragBench {
    pub dir: PathBuf,
    pub vdev_size: u64,
    pub overwrites: u64,
    /// Fill levels in percent, ascending.
    pub fills: Vec<u64>,
    pub json: bool,
}

pub(super) const RECORD: u64 = 8 << 10;
pub(super) const FILE_SIZE: u64 = 1 << 20;

fn columns() -> Vec<&'static str> {
    let mut columns = vec![
        "log",
        "fill",
        "tarn_iops",
        "file_iops",
        "tarn/file",
        "write_p50_us",
        "write_p99_us",
        "write_p999_us",
        "write_max_us",
    ];
    columns.extend_from_slice(PHASE_COLUMNS);
    columns.push("frag");
    columns
}

pub(super) fn number(value: f64, decimals: usize) -> Cell {
    let text = format!("{value:.decimals$}");
    Cell {
        exact: text.clone(),
        human: text,
        json: serde_json::json!((value * 1000.0).round() / 1000.0),
    }
}

/// The space a pool of `size` bytes holds back (`SpaceTotals::slop`).
fn pool_slop(size: u64) -> u64 {
    tarn::space::SpaceTotals {
        size,
        ..Default::default()
    }
    .slop(Tunables::default().spa_min_slop)
}

/// The `fraction` quantile of sorted latencies, in microseconds.
fn quantile_us(sorted_ns: &[u64], fraction: f64) -> f64 {
    if sorted_ns.is_empty() {
        return 0.0;
    }
    let rank = ((sorted_ns.len() as f64 * fraction).ceil() as usize).clamp(1, sorted_ns.len());
    sorted_ns[rank - 1] as f64 / 1e3
}

/// A small deterministic generator (xorshift) for offsets.
pub(super) struct Offsets(pub(super) u64);

impl Offsets {
    pub(super) fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below.max(1)
    }
}

pub fn run(bench: FragBench) -> Result<(), Failure> {
    let io = |what: &str, error: std::io::Error| Failure(format!("{what}: {error}"));
    std::fs::create_dir_all(&bench.dir).map_err(|e| io(&bench.dir.display().to_string(), e))?;
    let dir = std::fs::canonicalize(&bench.dir).map_err(|e| io("bench dir", e))?;
    let _lock = BenchDirLock::take(&dir)?;
    let mut tunables = Tunables::from_env().map_err(Failure)?;
    if std::env::var("TARN_TUNABLE_txg_timeout").is_err() {
        tunables.txg_timeout = 1;
    }
    let tunables = with_bench_metaslabs(tunables, bench.vdev_size);
    let vdev = dir.join("bench-frag-vdev0.img");
    let mut rows = Vec::new();
    // Per pool (log on, then off): per fill, the figures the comparison sets side by side.
    let mut phases: Vec<Vec<PhaseSummary>> = Vec::new();
    let mut result = Ok(());
    for (mode, log_spacemap) in LOG_SPACEMAP_MODES {
        let pool = create_bench_pool_with_log(
            "benchfrag",
            &vdev,
            bench.vdev_size,
            &tunables,
            log_spacemap,
        )?;
        let mut summaries = Vec::new();
        result = run_on_pool(&pool, &dir, &bench, mode, &mut rows, &mut summaries);
        let _ = pool.destroy();
        let _ = std::fs::remove_file(&vdev);
        phases.push(summaries);
        if result.is_err() {
            break;
        }
    }
    if let Err(error) = &result {
        err!("frag: stopped: {}", error.0);
        if rows.is_empty() {
            return result;
        }
    }
    let comparisons = log_comparisons(&phases);
    if bench.json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| {
                columns()
                    .iter()
                    .zip(row)
                    .map(|(column, cell)| (column.to_string(), cell.json.clone()))
                    .collect::<serde_json::Map<_, _>>()
                    .into()
            })
            .collect();
        let objects = serde_json::json!({
            "frag": rows,
            "log_spacemap": comparisons_json(&comparisons),
        });
        tarn_protocol::json::Document::of("tarn bench frag", objects).print();
        return result;
    }
    print_table(
        &columns(),
        &rows,
        &ListFormat::default(),
        "tarn bench frag",
        "frag",
    )
    .map_err(Failure)?;
    if !comparisons.is_empty() {
        out!("");
        out!("log space map on (tarn) against off (baseline), same workload, same run:");
        print_comparisons(&comparisons, ("log_on", "log_off"), false, "log_spacemap")?;
    }
    result
}

/// What the log space map comparison takes from one phase.
pub(super) struct PhaseSummary {
    pub(super) what: String,
    pub(super) iops: f64,
    pub(super) spacemap_writes_per_txg: f64,
    pub(super) sync_ms_median: f64,
}

/// The comparison rows: per phase, space-map writes per txg, write IOPS and median sync time
/// with the log (first pool) beside without it (second pool).
pub(super) fn log_comparisons(phases: &[Vec<PhaseSummary>]) -> Vec<Comparison> {
    let [on, off] = phases else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for (with_log, without) in on.iter().zip(off) {
        for (figure, pick) in [
            (
                "spacemap_writes/txg",
                (|phase: &PhaseSummary| phase.spacemap_writes_per_txg) as fn(&PhaseSummary) -> f64,
            ),
            ("write IOPS", |phase: &PhaseSummary| phase.iops),
            ("sync ms median", |phase: &PhaseSummary| {
                phase.sync_ms_median
            }),
        ] {
            rows.push(Comparison {
                what: format!("{} {figure}", with_log.what),
                tarn: pick(with_log),
                baseline_what: "log off".into(),
                baseline: pick(without),
            });
        }
    }
    rows
}

/// The benchmark's file system: recordsize 8K, compression off.
pub(super) fn create_file_system(pool: &tarn::pool::Pool) -> Result<tarn::fs::FileSystem, Failure> {
    let name = format!("{}/d", pool.name());
    pool.create_dataset(
        &name,
        &[
            ("recordsize".into(), "8K".into()),
            ("compression".into(), "off".into()),
        ],
        false,
    )?;
    pool.open_file_system(&name)
        .map_err(|error| Failure(error.to_string()))
}

/// Add 1 MiB files of 8 KiB records (bytes from `data`) to `files` until the pool is `fill`%
/// allocated.
pub(super) fn fill_to(
    pool: &tarn::pool::Pool,
    fs: &tarn::fs::FileSystem,
    fill: u64,
    files: &mut Vec<u64>,
    data: &[u8],
) -> Result<(), Failure> {
    let failure = |error: &dyn std::fmt::Display| Failure(error.to_string());
    // Fill with 1 MiB files of 8 KiB records up to `fill`% allocated.
    loop {
        let space = pool.space()?;
        if space.allocated * 100 >= space.size * fill {
            break;
        }
        if space.allocated + pool_slop(space.size) + 2 * FILE_SIZE >= space.size {
            return Err(Failure(format!(
                "a pool of {} bytes cannot be filled to {fill}% (slop space is held back): \
                 use a larger --vdev-size",
                space.size
            )));
        }
        let attr = fs
            .create(
                fs.root(),
                format!("f{}", files.len()).as_bytes(),
                0o644,
                0,
                0,
            )
            .map_err(|e| failure(&e))?;
        for record in 0..FILE_SIZE / RECORD {
            let at = (record * 977 % 64) as usize * 8;
            fs.write(attr.ino, record * RECORD, &data[at..at + RECORD as usize])
                .map_err(|e| failure(&e))?;
        }
        files.push(attr.ino);
        if files.len().is_multiple_of(16) {
            // Sync now and then, so that one txg of the fill holds little dirty data.
            pool.sync()?;
        }
        if files.len().is_multiple_of(256) {
            err!("frag: filling to {fill}%: {} files", files.len());
        }
    }
    Ok(())
}

fn run_on_pool(
    pool: &tarn::pool::Pool,
    dir: &std::path::Path,
    bench: &FragBench,
    mode: &str,
    rows: &mut Vec<Vec<Cell>>,
    summaries: &mut Vec<PhaseSummary>,
) -> Result<(), Failure> {
    let failure = |error: &dyn std::fmt::Display| Failure(error.to_string());
    let fs = create_file_system(pool)?;
    let data = pseudo_random((FILE_SIZE + RECORD) as usize, 14);
    let mut files: Vec<u64> = Vec::new();
    let mut offsets = Offsets(0x9e37_79b9_7f4a_7c15);
    for &fill in &bench.fills {
        fill_to(pool, &fs, fill, &mut files, &data)?;
        pool.sync()?;
        // The open txg when the phase starts is the first one the overwrites land in.
        let first_txg = pool.txg_history().last().map_or(0, |row| row.txg);
        // Random 8 KiB overwrites, timed one by one.
        let plan: Vec<(usize, u64, usize)> = (0..bench.overwrites)
            .map(|_| {
                (
                    offsets.next(files.len() as u64) as usize,
                    offsets.next(FILE_SIZE / RECORD) * RECORD,
                    offsets.next(64) as usize * 8,
                )
            })
            .collect();
        let mut latencies = Vec::with_capacity(plan.len());
        let started = Instant::now();
        for (index, &(file, offset, at)) in plan.iter().enumerate() {
            let write_started = Instant::now();
            fs.write(files[file], offset, &data[at..at + RECORD as usize])
                .map_err(|e| failure(&e))?;
            latencies.push(write_started.elapsed().as_nanos() as u64);
            if (index + 1).is_multiple_of(5000) {
                err!("frag: {fill}%: {} of {} overwrites", index + 1, plan.len());
            }
        }
        pool.sync()?;
        let tarn_seconds = started.elapsed().as_secs_f64();
        latencies.sort_unstable();
        let figures = PhaseFigures::since(pool, first_txg);
        let frag = pool.space()?.fragmentation;
        // Baseline: the same overwrites on a plain file, then one fsync.
        let file_seconds = baseline(dir, files.len() as u64 * FILE_SIZE, &plan, &data)?;
        let tarn_iops = plan.len() as f64 / tarn_seconds;
        let file_iops = plan.len() as f64 / file_seconds;
        summaries.push(PhaseSummary {
            what: format!("{fill}%"),
            iops: tarn_iops,
            spacemap_writes_per_txg: figures.spacemap_writes_per_txg(),
            sync_ms_median: figures.sync_ms_median(),
        });
        rows.push(vec![
            Cell::text(mode.to_string()),
            Cell::text(format!("{fill}%")),
            number(tarn_iops, 0),
            number(file_iops, 0),
            ratio_cell(tarn_iops / file_iops),
        ]);
        let row = rows.last_mut().expect("pushed");
        row.extend(latency_cells(&latencies));
        row.extend(figures.cells());
        rows.last_mut().expect("pushed").push(Cell::percent(frag));
    }
    Ok(())
}

/// The allocation and sync figures of the txgs that synced during a phase, from the txg
/// history (shared by `bench frag` and `bench timeseries`).
pub(super) struct PhaseFigures {
    allocations: u64,
    load_waits: u64,
    segments_p999: u64,
    alloc_p999_ns: u64,
    sync_ms_median: f64,
    passes_max: u32,
    txgs: u64,
    spacemap_writes: u64,
    log_writes: u64,
    ms_flushed: u64,
}

/// The columns [`PhaseFigures::cells`] fills, in order.
pub(super) const PHASE_COLUMNS: &[&str] = &[
    "alloc_segments_p999",
    "alloc_load_waits_pct",
    "alloc_p999_us",
    "sync_ms_median",
    "passes_max",
    "sm_writes_per_txg",
    "log_writes_per_txg",
    "ms_flushed_per_txg",
];

impl PhaseFigures {
    /// Every txg from `first_txg` (the one open when the phase started) that synced something.
    pub(super) fn since(pool: &tarn::pool::Pool, first_txg: u64) -> PhaseFigures {
        let history: Vec<_> = pool
            .txg_history()
            .into_iter()
            .filter(|row| row.txg >= first_txg && row.passes > 0)
            .collect();
        PhaseFigures {
            allocations: history.iter().map(|row| row.space.allocations).sum(),
            load_waits: history.iter().map(|row| row.space.alloc_load_waits).sum(),
            segments_p999: history
                .iter()
                .map(|row| row.space.alloc_segments_p999)
                .max()
                .unwrap_or(0),
            alloc_p999_ns: history
                .iter()
                .map(|row| row.space.alloc_p999_ns)
                .max()
                .unwrap_or(0),
            sync_ms_median: if history.is_empty() {
                0.0
            } else {
                median(history.iter().map(|row| row.sync_ns as f64 / 1e6).collect())
            },
            passes_max: history.iter().map(|row| row.passes).max().unwrap_or(0),
            txgs: history.len() as u64,
            spacemap_writes: history.iter().map(|row| row.space.spacemap_writes).sum(),
            log_writes: history.iter().map(|row| row.space.log_writes).sum(),
            ms_flushed: history.iter().map(|row| row.space.ms_flushed).sum(),
        }
    }

    /// `total` per synced txg of the phase.
    fn per_txg(&self, total: u64) -> f64 {
        total as f64 / self.txgs.max(1) as f64
    }

    /// Space-map block writes per synced txg (every copy), the figure the log space map cuts.
    pub(super) fn spacemap_writes_per_txg(&self) -> f64 {
        self.per_txg(self.spacemap_writes)
    }

    pub(super) fn sync_ms_median(&self) -> f64 {
        self.sync_ms_median
    }

    pub(super) fn cells(&self) -> Vec<Cell> {
        vec![
            number(self.segments_p999 as f64, 0),
            number(
                if self.allocations == 0 {
                    0.0
                } else {
                    self.load_waits as f64 * 100.0 / self.allocations as f64
                },
                3,
            ),
            number(self.alloc_p999_ns as f64 / 1e3, 1),
            number(self.sync_ms_median, 2),
            number(self.passes_max as f64, 0),
            number(self.spacemap_writes_per_txg(), 1),
            number(self.per_txg(self.log_writes), 1),
            number(self.per_txg(self.ms_flushed), 1),
        ]
    }
}

/// Latency columns from sorted nanoseconds: p50, p99, p99.9, max in microseconds.
pub(super) fn latency_cells(sorted_ns: &[u64]) -> Vec<Cell> {
    [0.5, 0.99, 0.999, 1.0]
        .into_iter()
        .map(|fraction| number(quantile_us(sorted_ns, fraction), 1))
        .collect()
}

/// Seconds for the overwrites of `plan` as `pwrite`s on a plain file of `size` bytes in `dir`,
/// then one `fsync`.
fn baseline(
    dir: &std::path::Path,
    size: u64,
    plan: &[(usize, u64, usize)],
    data: &[u8],
) -> Result<f64, Failure> {
    let path = dir.join("bench-frag-baseline.dat");
    let result = (|| {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        file.set_len(size)?;
        let started = Instant::now();
        for &(index, offset, at) in plan {
            file.write_all_at(
                &data[at..at + RECORD as usize],
                index as u64 * FILE_SIZE + offset,
            )?;
        }
        file.sync_all()?;
        Ok::<_, std::io::Error>(started.elapsed().as_secs_f64())
    })();
    let _ = std::fs::remove_file(&path);
    result.map_err(|e| Failure(format!("baseline file {}: {e}", path.display())))
}
