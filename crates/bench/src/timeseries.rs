//! `tarn bench timeseries`: the "Fragging Rights" workload. Many files each
//! take a 32-byte append every interval, so each append rewrites the file's last 8 KiB record
//! (recordsize 8K, compression on): every txg frees and reallocates one small block per file,
//! the pattern that fragments a pool and, in the field report, made allocations take seconds.
//!
//! The engine runs in this process; txgs follow the pool's txg timer (`txg_timeout`, 1 second
//! unless `TARN_TUNABLE_txg_timeout` is set). Reported: the append rate and each append's
//! latency, the allocation and sync figures of the txgs that synced (as `bench frag`), and the
//! pool's fragmentation after every interval. The baseline is the same appends to plain files
//! in the same directory (without the sleeps), then one `fsync` per file; tarn's rate counts
//! busy time too (the appends and the final sync); the ratio is tarn's rate over the baseline's.
//!
//! The run is made on a pool with the log space map and on one without, each vdev cut into at
//! least 200 metaslabs, and a second table compares the two (as `bench frag` does).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tarn::tunables::Tunables;
use tarn_protocol::error::Failure;
use tarn_protocol::format::{print_table, Cell, ListFormat};

use super::frag::{
    latency_cells, log_comparisons, number, PhaseFigures, PhaseSummary, PHASE_COLUMNS,
};
use super::{
    comparisons_json, create_bench_pool_with_log, print_comparisons, ratio_cell,
    with_bench_metaslabs, BenchDirLock, LOG_SPACEMAP_MODES,
};

/// What `tarn bench timeseries` was asked to do.
pub struct TimeseriesBench {
    pub dir: PathBuf,
    pub vdev_size: u64,
    pub files: u64,
    pub intervals: u64,
    pub interval: Duration,
    pub json: bool,
}

const APPEND: usize = 32;

fn columns() -> Vec<&'static str> {
    let mut columns = vec![
        "log",
        "appends",
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

/// One appended sample: a 32-byte line that compresses about as well as real time-series text.
fn sample(file: u64, interval: u64) -> [u8; APPEND] {
    let mut line = [b' '; APPEND];
    let text = format!(
        "{interval:010},{file:08},{:09}\n",
        (file * 7919 + interval * 104_729) % 1_000_000_000
    );
    let bytes = text.as_bytes();
    let length = bytes.len().min(APPEND);
    line[APPEND - length..].copy_from_slice(&bytes[..length]);
    line
}

/// The time-series file system (recordsize 8K, compression on) with `files` empty files
/// `series0`.. and their inode numbers.
pub(super) fn create_series(
    pool: &tarn::pool::Pool,
    files: u64,
) -> Result<(tarn::fs::FileSystem, Vec<u64>), Failure> {
    let failure = |error: &dyn std::fmt::Display| Failure(error.to_string());
    let name = format!("{}/d", pool.name());
    pool.create_dataset(
        &name,
        &[
            ("recordsize".into(), "8K".into()),
            ("compression".into(), "on".into()),
        ],
        false,
    )?;
    let fs = pool.open_file_system(&name).map_err(|e| failure(&e))?;
    let mut inodes = Vec::new();
    for file in 0..files {
        let attr = fs
            .create(fs.root(), format!("series{file}").as_bytes(), 0o644, 0, 0)
            .map_err(|e| failure(&e))?;
        inodes.push(attr.ino);
    }
    Ok((fs, inodes))
}

/// File `file`'s append of `interval` (its 32-byte sample at the end of the file).
pub(super) fn append(
    fs: &tarn::fs::FileSystem,
    ino: u64,
    file: u64,
    interval: u64,
) -> Result<(), Failure> {
    fs.write(ino, interval * APPEND as u64, &sample(file, interval))
        .map(|_| ())
        .map_err(|error| Failure(error.to_string()))
}

pub fn run(bench: TimeseriesBench) -> Result<(), Failure> {
    let io = |what: &str, error: std::io::Error| Failure(format!("{what}: {error}"));
    if bench.files == 0 || bench.intervals == 0 {
        return Err(Failure("--files and --intervals must be at least 1".into()));
    }
    std::fs::create_dir_all(&bench.dir).map_err(|e| io(&bench.dir.display().to_string(), e))?;
    let dir = std::fs::canonicalize(&bench.dir).map_err(|e| io("bench dir", e))?;
    let _lock = BenchDirLock::take(&dir)?;
    let mut tunables = Tunables::from_env().map_err(Failure)?;
    if std::env::var("TARN_TUNABLE_txg_timeout").is_err() {
        tunables.txg_timeout = 1;
    }
    let tunables = with_bench_metaslabs(tunables, bench.vdev_size);
    let vdev = dir.join("bench-timeseries-vdev0.img");
    let file_seconds = baseline(&dir, &bench)?;
    let mut rows = Vec::new();
    let mut phases = Vec::new();
    let mut fragmentation_by_mode = serde_json::Map::new();
    let mut over_time_lines = Vec::new();
    // The same run on a pool with the log space map and on one without (the comparison).
    for (mode, log_spacemap) in LOG_SPACEMAP_MODES {
        let pool =
            create_bench_pool_with_log("benchts", &vdev, bench.vdev_size, &tunables, log_spacemap)?;
        let result = run_on_pool(&pool, &bench);
        let _ = pool.destroy();
        let _ = std::fs::remove_file(&vdev);
        let (mut row, fragmentation, appends, figures) = result?;
        let tarn_iops = row.0;
        let file_iops = appends as f64 / file_seconds;
        phases.push(vec![PhaseSummary {
            what: "appends".into(),
            iops: tarn_iops,
            spacemap_writes_per_txg: figures.spacemap_writes_per_txg(),
            sync_ms_median: figures.sync_ms_median(),
        }]);
        let mut cells = vec![
            Cell::text(mode.to_string()),
            number(appends as f64, 0),
            number(tarn_iops, 0),
            number(file_iops, 0),
            ratio_cell(tarn_iops / file_iops),
        ];
        cells.append(&mut row.1);
        cells.push(Cell::percent(fragmentation.last().copied().flatten()));
        rows.push(cells);
        let over_time: Vec<String> = fragmentation
            .iter()
            .map(|percent| percent.map_or("-".to_string(), |percent| format!("{percent}%")))
            .collect();
        over_time_lines.push(format!(
            "fragmentation after each interval (log {mode}): {}",
            over_time.join(" ")
        ));
        fragmentation_by_mode.insert(mode.to_string(), serde_json::json!(fragmentation));
    }
    let comparisons = log_comparisons(&phases);
    let columns = columns();
    if bench.json {
        let summaries: Vec<serde_json::Value> = rows
            .iter()
            .map(|cells| {
                columns
                    .iter()
                    .zip(cells)
                    .map(|(column, cell)| (column.to_string(), cell.json.clone()))
                    .collect::<serde_json::Map<_, _>>()
                    .into()
            })
            .collect();
        let objects = serde_json::json!({
            "timeseries": summaries,
            "fragmentation_over_time": fragmentation_by_mode,
            "log_spacemap": comparisons_json(&comparisons),
        });
        tarn_protocol::json::Document::of("tarn bench timeseries", objects).print();
        return Ok(());
    }
    print_table(
        &columns,
        &rows,
        &ListFormat::default(),
        "tarn bench timeseries",
        "timeseries",
    )
    .map_err(Failure)?;
    for line in over_time_lines {
        out!("{line}");
    }
    out!("");
    out!("log space map on (tarn) against off (baseline), same workload, same run:");
    print_comparisons(&comparisons, ("log_on", "log_off"), false, "log_spacemap")
}

/// Run the appends; returns (tarn appends per second, latency and phase cells), the pool's
/// fragmentation after each interval, the number of appends, and the phase's figures.
#[allow(clippy::type_complexity)]
fn run_on_pool(
    pool: &tarn::pool::Pool,
    bench: &TimeseriesBench,
) -> Result<((f64, Vec<Cell>), Vec<Option<u64>>, u64, PhaseFigures), Failure> {
    let (fs, files) = create_series(pool, bench.files)?;
    pool.sync()?;
    let first_txg = pool.txg_history().last().map_or(0, |row| row.txg);
    let mut latencies = Vec::new();
    let mut fragmentation = Vec::new();
    for interval in 0..bench.intervals {
        let interval_started = Instant::now();
        for (file, &ino) in files.iter().enumerate() {
            let write_started = Instant::now();
            append(&fs, ino, file as u64, interval)?;
            latencies.push(write_started.elapsed().as_nanos() as u64);
        }
        fragmentation.push(pool.space()?.fragmentation);
        err!(
            "timeseries: interval {} of {}: {} appends, fragmentation {}",
            interval + 1,
            bench.intervals,
            latencies.len(),
            fragmentation
                .last()
                .copied()
                .flatten()
                .map_or("-".to_string(), |percent| format!("{percent}%"))
        );
        if let Some(rest) = bench.interval.checked_sub(interval_started.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    let sync_started = Instant::now();
    pool.sync()?;
    // Busy time: the appends themselves and the final sync, not the sleeps between intervals.
    let seconds =
        (latencies.iter().sum::<u64>() as f64 / 1e9) + sync_started.elapsed().as_secs_f64();
    let appends = latencies.len() as u64;
    latencies.sort_unstable();
    let mut cells = latency_cells(&latencies);
    let figures = PhaseFigures::since(pool, first_txg);
    cells.extend(figures.cells());
    Ok((
        (appends as f64 / seconds, cells),
        fragmentation,
        appends,
        figures,
    ))
}

/// Seconds for the same appends to plain files in `dir` (same intervals, no sleeping), then
/// one fsync per file.
fn baseline(dir: &std::path::Path, bench: &TimeseriesBench) -> Result<f64, Failure> {
    let base = dir.join("bench-timeseries-baseline");
    let _ = std::fs::remove_dir_all(&base);
    let result = (|| {
        std::fs::create_dir_all(&base)?;
        let mut files = Vec::new();
        for file in 0..bench.files {
            files.push(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(base.join(format!("series{file}")))?,
            );
        }
        let started = Instant::now();
        for interval in 0..bench.intervals {
            for (index, file) in files.iter_mut().enumerate() {
                file.write_all(&sample(index as u64, interval))?;
            }
        }
        for file in &files {
            file.sync_all()?;
        }
        Ok::<_, std::io::Error>(started.elapsed().as_secs_f64())
    })();
    let _ = std::fs::remove_dir_all(&base);
    result.map_err(|e| Failure(format!("baseline files in {}: {e}", base.display())))
}
