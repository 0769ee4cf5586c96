//! `tarn bench l2arc`: what a cache device buys random reads of a working set larger than the
//! ARC, on a data disk made slow (the fault layer delays each of its I/Os; the cache device is
//! not delayed, as an SSD in front of a disk).
//!
//! One in-process pool: a data vdev and a cache device, `arc_max` = `--arc-max`, a file of
//! `--working-set` bytes (text-like, lz4, recordsize 128K) written and synced.
//!
//! 1. *warm*: random reads (8K to 128K at random 8K-aligned offsets) for `--warm-seconds`
//!    while the feed thread runs as configured (`l2arc_write_max` 8 MiB a second, plus
//!    `l2arc_write_boost` while the ARC has not evicted): the feed's write rate is
//!    `l2_write_bytes` over that time;
//! 2. *L2 on*: the same reads for `--seconds`, with the cache device;
//! 3. *L2 off* (the baseline): the cache device is removed (`pool remove`) and the same reads
//!    run for `--seconds` again, from the same warm ARC.
//!
//! It prints reads/s and MiB/s of each, the L2 hit ratio, and the ratio of L2 on to L2 off.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use tarn::vdev::{BlockDevice, FaultPlan, FaultyDevice};
use tarn_protocol::error::Failure;
use tarn_protocol::format::{parse_size, print_table, Cell, ListFormat};

use super::{ratio_cell, BenchDirLock};

#[derive(Args)]
pub struct L2arcBench {
    /// Directory for the data vdev and the cache device (sparse files).
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// The ARC's size (arc_max).
    #[arg(long, default_value = "64M")]
    arc_max: String,
    /// The file read at random: about 2-3 times --arc-max.
    #[arg(long, default_value = "160M")]
    working_set: String,
    /// Microseconds every I/O of the data vdev is delayed by (a slow disk).
    #[arg(long, default_value_t = 2000)]
    device_delay_us: u64,
    /// Seconds of reads while the feed warms the L2ARC.
    #[arg(long, default_value_t = 20.0)]
    warm_seconds: f64,
    /// Seconds of each measured phase.
    #[arg(long, default_value_t = 8.0)]
    seconds: f64,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
}

const COLUMNS: &[&str] = &[
    "phase",
    "reads_s",
    "mib_s",
    "l2_hit_pct",
    "l2_write_mib_s",
    "vs_l2_off",
];

/// What one phase of reads did.
struct Phase {
    reads: u64,
    bytes: u64,
    seconds: f64,
    l2_hits: u64,
    l2_misses: u64,
    l2_written: u64,
}

/// A small xorshift generator: the same sequence of reads in every run.
pub(super) struct Random(pub(super) u64);

impl Random {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn read_for(
    pool: &tarn::pool::Pool,
    fs: &tarn::fs::FileSystem,
    ino: u64,
    size: u64,
    seconds: f64,
    random: &mut Random,
) -> Result<Phase, Failure> {
    let before = pool.arc_stats().l2;
    let started = Instant::now();
    let (mut reads, mut bytes) = (0u64, 0u64);
    while started.elapsed().as_secs_f64() < seconds {
        let length = (random.next() % 16 + 1) * 8192;
        let offset = random.next() % ((size - length) / 8192) * 8192;
        let data = fs
            .read(ino, offset, length as usize)
            .map_err(|error| Failure(format!("read: {error}")))?;
        bytes += data.len() as u64;
        reads += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = pool.arc_stats().l2;
    Ok(Phase {
        reads,
        bytes,
        seconds,
        l2_hits: after.l2_hits - before.l2_hits,
        l2_misses: after.l2_misses - before.l2_misses,
        l2_written: after.l2_write_bytes - before.l2_write_bytes,
    })
}

pub fn run(bench: L2arcBench) -> Result<(), Failure> {
    let arc_max = parse_size(&bench.arc_max)?;
    let size = parse_size(&bench.working_set)?;
    if size < 4 << 20 || arc_max < 8 << 20 {
        return Err(Failure(
            "--working-set must be at least 4M and --arc-max at least 8M".into(),
        ));
    }
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&bench.dir)?;
    let data = bench.dir.join("bench-l2arc-data.img");
    let cache = bench.dir.join("bench-l2arc-cache.img");
    let _ = std::fs::remove_file(&data);
    let _ = std::fs::remove_file(&cache);
    let vdev_size = (size * 3).max(1 << 30);
    let mut tunables = tarn::tunables::Tunables::from_env().map_err(Failure)?;
    tunables.arc_max = arc_max;
    tunables.arc_min = arc_max;
    tunables.recordsize = 128 << 10;
    let plan = FaultPlan::new();
    plan.set_io_delay(Duration::from_micros(bench.device_delay_us));
    let slow = data.clone();
    let wrap: tarn::pool::DeviceWrapper = Arc::new(
        move |path: &std::path::Path, device: Arc<dyn BlockDevice>| {
            if path.file_name() == slow.file_name() {
                Arc::new(FaultyDevice::new(device, plan.clone())) as Arc<dyn BlockDevice>
            } else {
                device
            }
        },
    );
    let pool = tarn::pool::Pool::create(tarn::pool::CreateOptions {
        name: "benchl2arc".into(),
        log: Vec::new(),
        cache: vec![cache.clone()],
        vdevs: vec![tarn::pool::VdevSpec::Leaf(data.clone())],
        create_size: Some(vdev_size),
        force: true,
        tunables,
        wrap_device: Some(wrap),
        disabled_features: Vec::new(),
    })?;
    let result = measure(&pool, &bench, size, &cache);
    pool.destroy()?;
    let _ = std::fs::remove_file(&data);
    let _ = std::fs::remove_file(&cache);
    let rows = result?;
    let format = ListFormat {
        json: bench.json,
        ..ListFormat::default()
    };
    print_table(COLUMNS, &rows, &format, "tarn bench l2arc", "phases").map_err(Failure)
}

fn measure(
    pool: &tarn::pool::Pool,
    bench: &L2arcBench,
    size: u64,
    cache: &std::path::Path,
) -> Result<Vec<Vec<Cell>>, Failure> {
    pool.set_property("benchl2arc", "compression", Some("lz4"))?;
    let fs = pool.open_file_system("benchl2arc")?;
    let ino = fs
        .create(fs.root(), b"working-set", 0o644, 0, 0)
        .map_err(|e| Failure(e.to_string()))?
        .ino;
    let chunk = 8 << 20;
    for start in (0..size).step_by(chunk) {
        let length = (size - start).min(chunk as u64) as usize;
        let bytes = super::receive::text(length, start);
        fs.write(ino, start, &bytes)
            .map_err(|e| Failure(e.to_string()))?;
    }
    pool.sync()?;
    pool.core.io.cache().clear();
    let mut random = Random(0x2545_f491_4f6c_dd1d);
    let warm = read_for(pool, &fs, ino, size, bench.warm_seconds, &mut random)?;
    let on = read_for(pool, &fs, ino, size, bench.seconds, &mut random)?;
    pool.remove(&cache.display().to_string())?;
    let off = read_for(pool, &fs, ino, size, bench.seconds, &mut random)?;
    let rate = |phase: &Phase| phase.reads as f64 / phase.seconds;
    let row = |name: &str, phase: &Phase| {
        let mib_s = phase.bytes as f64 / (1 << 20) as f64 / phase.seconds;
        let lookups = phase.l2_hits + phase.l2_misses;
        let written = phase.l2_written as f64 / (1 << 20) as f64 / phase.seconds;
        vec![
            Cell::text(name),
            Cell {
                exact: format!("{:.1}", rate(phase)),
                human: format!("{:.0}", rate(phase)),
                json: serde_json::json!(rate(phase)),
            },
            Cell {
                exact: format!("{mib_s:.2}"),
                human: format!("{mib_s:.1}"),
                json: serde_json::json!(mib_s),
            },
            Cell::percent((phase.l2_hits * 100).checked_div(lookups)),
            Cell {
                exact: format!("{written:.2}"),
                human: format!("{written:.1}"),
                json: serde_json::json!(written),
            },
            ratio_cell(rate(phase) / rate(&off).max(1e-9)),
        ]
    };
    Ok(vec![
        row("warm (feeding)", &warm),
        row("L2 on", &on),
        row("L2 off (baseline)", &off),
    ])
}
