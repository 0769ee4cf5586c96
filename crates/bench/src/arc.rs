//! `tarn bench arc`: what the compressed ARC buys and what it costs, beside the ARC keeping
//! contents (`compressed_arc_enabled` = 0) in the same run.
//!
//! One in-process pool (lz4, recordsize 128K, no prefetch, `arc_max` = `arc_min` =
//! `--arc-max`) holding a text-like file of `--working-set` bytes (larger than the ARC as
//! contents, smaller as stored), `--files` small text files of 4 KiB (each one 4 KiB block: a
//! file's single block grows with it up to the recordsize) and a 16 MiB hot file.
//! Written once, then imported once per configuration:
//!
//! - *compressed*: the default (compressed ARC, decoded copies of the most recently used
//!   compressed blocks within `arc_meta_decoded_percent` and `arc_data_decoded_percent`);
//! - *compressed, no decoded copies*: both 0, every hit of a compressed block decompresses
//!   (what the copies save);
//! - *contents*: `compressed_arc_enabled` = 0, the ARC before it kept blocks compressed (the
//!   baseline of every ratio).
//!
//! Each configuration runs four workloads, each for `--seconds` after one untimed pass that
//! warms the ARC:
//!
//! 1. *working set*: random 16 KiB reads of the big file, every data vdev I/O delayed by
//!    `--device-delay-us` (a disk): the hit ratio decides the rate;
//! 2. *metadata*: lookup + stat of every small file in turn (key/value and dnode blocks; the
//!    dnode cache is smaller than `--files`);
//! 3. *small files*: lookup + stat + 4 KiB read of each of the first `--hot-files` files;
//! 4. *hot file*: random 4 KiB reads of the hot file (indirect blocks and 128 KiB records).
//!
//! Workloads 2 to 4 fit in the ARC in every configuration: they measure the cost of a hit
//! (decompressing the stored bytes) on the read path. It prints operations/s, the demand hit ratio, the
//! decompressions per operation and the ARC's stored and logical bytes, with the ratio of each
//! rate to the same workload under *contents*.
//!
//! Last, what the arcstats counters cost on the read path: hits of `BlockCache::get` alone
//! (4 KiB blocks, all cached, one thread), with the counters updated and with them off
//! (`BlockCache::set_read_counters`), alternated over four rounds (each going first in two);
//! the ratio is to *off*.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use tarn::cache::BlockCacheStats;
use tarn::fs::FileSystem;
use tarn::pool::{ImportOptions, Pool};
use tarn::vdev::{BlockDevice, FaultPlan, FaultyDevice};
use tarn_protocol::error::Failure;
use tarn_protocol::format::{parse_size, print_table, Cell, ListFormat};

use super::l2arc::Random;
use super::{ratio_cell, BenchDirLock};

#[derive(Args)]
pub struct ArcBench {
    /// Directory for the pool's vdev (a sparse file).
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// The ARC's size (arc_max and arc_min).
    #[arg(long, default_value = "64M")]
    arc_max: String,
    /// The file read at random in the working-set workload: more than --arc-max, less than
    /// it once compressed (lz4 stores this text in about 45%).
    #[arg(long, default_value = "96M")]
    working_set: String,
    /// Small files created (all looked up in the metadata workload).
    #[arg(long, default_value_t = 20_000)]
    files: u64,
    /// Small files read in the small-file workload.
    #[arg(long, default_value_t = 150)]
    hot_files: u64,
    /// Microseconds every data vdev I/O is delayed by in the working-set workload.
    #[arg(long, default_value_t = 2000)]
    device_delay_us: u64,
    /// Seconds of each measured workload.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
}

const COLUMNS: &[&str] = &[
    "workload",
    "arc",
    "ops_s",
    "hit_pct",
    "decompress_per_op",
    "arc_stored",
    "arc_logical",
    "vs_baseline",
];

const POOL: &str = "bencharc";
const HOT_BYTES: u64 = 16 << 20;
const SMALL_BYTES: usize = 4096;

/// The configurations measured, the baseline last: name, compressed_arc_enabled, whether the
/// decoded copies are off (their shares 0).
const CONFIGS: &[(&str, u32, bool)] = &[
    ("compressed", 1, false),
    ("compressed, no decoded copies", 1, true),
    ("contents (compressed ARC off)", 0, false),
];

const WORKLOADS: &[&str] = &[
    "working set, 16K random reads (slow disk)",
    "metadata, lookup + stat",
    "small files, lookup + stat + 4K read",
    "hot file, 4K random reads",
];

/// What one workload did under one configuration.
struct Measured {
    ops: u64,
    seconds: f64,
    before: BlockCacheStats,
    after: BlockCacheStats,
}

impl Measured {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.seconds.max(1e-9)
    }

    fn hit_percent(&self) -> Option<u64> {
        let (a, b) = (&self.before.counters, &self.after.counters);
        let hits = (b.demand_data_hits + b.demand_metadata_hits)
            - (a.demand_data_hits + a.demand_metadata_hits);
        let misses = (b.demand_data_misses + b.demand_metadata_misses)
            - (a.demand_data_misses + a.demand_metadata_misses);
        (hits * 100).checked_div(hits + misses)
    }

    fn decompress_per_op(&self) -> f64 {
        let count = self.after.counters.decompressed - self.before.counters.decompressed;
        count as f64 / self.ops.max(1) as f64
    }
}

pub fn run(bench: ArcBench) -> Result<(), Failure> {
    let arc_max = parse_size(&bench.arc_max)?;
    let size = parse_size(&bench.working_set)?;
    if size < 4 << 20 || arc_max < 16 << 20 || bench.seconds <= 0.0 || bench.files == 0 {
        return Err(Failure(
            "--working-set must be at least 4M, --arc-max at least 16M, --seconds above 0, \
             --files at least 1"
                .into(),
        ));
    }
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&bench.dir)?;
    let vdev = bench.dir.join("bench-arc-data.img");
    let _ = std::fs::remove_file(&vdev);
    let mut tunables = tarn::tunables::Tunables::from_env().map_err(Failure)?;
    tunables.arc_max = arc_max;
    tunables.arc_min = arc_max;
    tunables.recordsize = 128 << 10;
    tunables.zfs_prefetch_disable = 1;
    let plan = FaultPlan::new();
    let wrap: tarn::pool::DeviceWrapper = {
        let plan = plan.clone();
        Arc::new(move |_: &std::path::Path, device: Arc<dyn BlockDevice>| {
            Arc::new(FaultyDevice::new(device, plan.clone())) as Arc<dyn BlockDevice>
        })
    };
    let pool = Pool::create(tarn::pool::CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![tarn::pool::VdevSpec::Leaf(vdev.clone())],
        create_size: Some((size * 2 + HOT_BYTES * 2 + bench.files * 16384).max(1 << 30)),
        force: true,
        tunables: tunables.clone(),
        wrap_device: Some(wrap.clone()),
        disabled_features: Vec::new(),
    })?;
    let result = fill(&pool, &bench, size).and_then(|()| {
        pool.export()?;
        let mut results = Vec::new();
        for &(_, compressed, no_copies) in CONFIGS {
            let mut tunables = tunables.clone();
            tunables.compressed_arc_enabled = compressed;
            if no_copies {
                tunables.arc_meta_decoded_percent = 0;
                tunables.arc_data_decoded_percent = 0;
            }
            let mut options = ImportOptions::new(vec![bench.dir.clone()], tunables);
            options.wrap_device = Some(wrap.clone());
            let (pool, _) = Pool::import(POOL, options)?;
            let measured = measure(&pool, &bench, size, &plan);
            pool.export()?;
            results.push(measured?);
        }
        Ok(results)
    });
    let _ = std::fs::remove_file(&vdev);
    let mut rows = table(&result?);
    rows.extend(counter_rows(bench.seconds));
    let format = ListFormat {
        json: bench.json,
        ..ListFormat::default()
    };
    print_table(COLUMNS, &rows, &format, "tarn bench arc", "arc").map_err(Failure)
}

fn small_name(index: u64) -> Vec<u8> {
    format!("small-{index:07}").into_bytes()
}

/// Write the working set, the small files and the hot file, and sync.
fn fill(pool: &Pool, bench: &ArcBench, size: u64) -> Result<(), Failure> {
    pool.set_property(POOL, "compression", Some("lz4"))?;
    let fs = pool.open_file_system(POOL)?;
    let fail = |e: tarn::fs::FsError| Failure(e.to_string());
    for (name, bytes, seed) in [
        (&b"working-set"[..], size, 0u64),
        (&b"hot"[..], HOT_BYTES, 1 << 40),
    ] {
        let ino = fs.create(fs.root(), name, 0o644, 0, 0).map_err(fail)?.ino;
        let chunk = 8u64 << 20;
        for start in (0..bytes).step_by(chunk as usize) {
            let length = (bytes - start).min(chunk) as usize;
            fs.write(ino, start, &super::receive::text(length, seed + start))
                .map_err(fail)?;
        }
        pool.sync()?;
    }
    for index in 0..bench.files {
        let ino = fs
            .create(fs.root(), &small_name(index), 0o644, 0, 0)
            .map_err(fail)?
            .ino;
        fs.write(ino, 0, &super::receive::text(SMALL_BYTES, index << 20))
            .map_err(fail)?;
    }
    pool.sync()?;
    Ok(())
}

/// The three workloads under the configuration `pool` was imported with.
fn measure(
    pool: &Pool,
    bench: &ArcBench,
    size: u64,
    plan: &FaultPlan,
) -> Result<Vec<Measured>, Failure> {
    let fs = pool.open_file_system(POOL)?;
    let fail = |e: tarn::fs::FsError| Failure(e.to_string());
    let lookup = |name: &[u8]| fs.lookup(fs.root(), name).map(|attr| attr.ino);
    let big = lookup(b"working-set").map_err(fail)?;
    let hot = lookup(b"hot").map_err(fail)?;
    let seconds = bench.seconds;
    let mut random = Random(0x2545_f491_4f6c_dd1d);
    // 1. The working set on a slow disk, warmed by one sequential pass (not delayed).
    read_all(&fs, big, size)?;
    plan.set_io_delay(Duration::from_micros(bench.device_delay_us));
    let working = timed(pool, seconds, || {
        let offset = random.next() % (size / 16384) * 16384;
        fs.read(big, offset, 16384).map(drop).map_err(fail)
    });
    plan.set_io_delay(Duration::ZERO);
    // 2. and 3. Small files, each warmed by one pass.
    let small = |index: u64, read: bool| -> Result<(), Failure> {
        let ino = lookup(&small_name(index)).map_err(fail)?;
        fs.getattr(ino).map_err(fail)?;
        if read {
            fs.read(ino, 0, SMALL_BYTES).map_err(fail)?;
        }
        Ok(())
    };
    let cycle = |count: u64, read: bool| -> Result<Measured, Failure> {
        let count = count.clamp(1, bench.files.max(1));
        for index in 0..count {
            small(index, read)?;
        }
        let mut next = 0u64;
        timed(pool, seconds, || {
            next = (next + 1) % count;
            small(next, read)
        })
    };
    let metadata = cycle(bench.files, false);
    let files = cycle(bench.hot_files, true);
    // 4. Hot 4 KiB reads, warmed by one pass.
    read_all(&fs, hot, HOT_BYTES)?;
    let hot_reads = timed(pool, seconds, || {
        let offset = random.next() % (HOT_BYTES / 4096) * 4096;
        fs.read(hot, offset, 4096).map(drop).map_err(fail)
    });
    Ok(vec![working?, metadata?, files?, hot_reads?])
}

fn read_all(fs: &FileSystem, ino: u64, size: u64) -> Result<(), Failure> {
    for offset in (0..size).step_by(1 << 20) {
        fs.read(ino, offset, 1 << 20)
            .map_err(|e| Failure(e.to_string()))?;
    }
    Ok(())
}

/// Run `op` for `seconds`, with the ARC's counters before and after.
fn timed(
    pool: &Pool,
    seconds: f64,
    mut op: impl FnMut() -> Result<(), Failure>,
) -> Result<Measured, Failure> {
    let before = pool.arc_stats();
    let started = Instant::now();
    let mut ops = 0;
    while started.elapsed().as_secs_f64() < seconds {
        op()?;
        ops += 1;
    }
    Ok(Measured {
        ops,
        seconds: started.elapsed().as_secs_f64(),
        before,
        after: pool.arc_stats(),
    })
}

/// One row per workload and configuration, each rate beside the baseline's (the last
/// configuration) on the same workload.
/// Hits per second of `BlockCache::get` with the read counters on and off (see the module
/// documentation), as two rows, the second the baseline.
fn counter_rows(seconds: f64) -> Vec<Vec<Cell>> {
    use tarn::cache::{BlockCache, BlockKey, BlockKind};
    const BLOCKS: u64 = 4096;
    let cache = BlockCache::new(64 << 20);
    let keys: Vec<BlockKey> = (0..BLOCKS)
        .map(|index| BlockKey {
            vdev: tarn::types::VdevId(0),
            offset: index << 12,
            birth: tarn::types::Txg(4),
        })
        .collect();
    for key in &keys {
        cache.insert(*key, Arc::new(vec![7u8; 4096]), BlockKind::Data);
    }
    let mut random = Random(0x5eed);
    let mut rates = [0.0f64; 2];
    let round = Duration::from_secs_f64(seconds / 4.0);
    for round_index in 0..4 {
        // Which goes first alternates, so that neither gains from going first.
        let order = if round_index % 2 == 0 {
            [(0, true), (1, false)]
        } else {
            [(1, false), (0, true)]
        };
        for (slot, on) in order {
            cache.set_read_counters(on);
            let start = Instant::now();
            let mut hits = 0u64;
            while start.elapsed() < round {
                for _ in 0..1024 {
                    let key = &keys[(random.next() % BLOCKS) as usize];
                    hits += u64::from(cache.get(key, BlockKind::Data).is_some());
                }
            }
            rates[slot] += hits as f64 / start.elapsed().as_secs_f64() / 4.0;
        }
    }
    cache.set_read_counters(true);
    let stats = cache.stats();
    [("counters on", rates[0]), ("counters off", rates[1])]
        .into_iter()
        .map(|(name, rate)| {
            vec![
                Cell::text("ARC hits alone, 4K blocks (BlockCache::get)"),
                Cell::text(name),
                Cell {
                    exact: format!("{rate:.1}"),
                    human: format!("{rate:.0}"),
                    json: serde_json::json!(rate),
                },
                Cell::percent(Some(100)),
                Cell {
                    exact: "0.000".into(),
                    human: "0.00".into(),
                    json: serde_json::json!(0.0),
                },
                tarn_protocol::format::byte_cell(stats.compressed_size),
                tarn_protocol::format::byte_cell(stats.uncompressed_size),
                ratio_cell(rate / rates[1].max(1e-9)),
            ]
        })
        .collect()
}

fn table(results: &[Vec<Measured>]) -> Vec<Vec<Cell>> {
    let baseline = results.last().expect("configurations");
    let mut rows = Vec::new();
    for (workload, name) in WORKLOADS.iter().enumerate() {
        for ((config, _, _), measured) in CONFIGS.iter().zip(results) {
            let measured = &measured[workload];
            let rate = measured.rate();
            let per_op = measured.decompress_per_op();
            rows.push(vec![
                Cell::text(*name),
                Cell::text(*config),
                Cell {
                    exact: format!("{rate:.1}"),
                    human: format!("{rate:.0}"),
                    json: serde_json::json!(rate),
                },
                Cell::percent(measured.hit_percent()),
                Cell {
                    exact: format!("{per_op:.3}"),
                    human: format!("{per_op:.2}"),
                    json: serde_json::json!(per_op),
                },
                tarn_protocol::format::byte_cell(measured.after.compressed_size),
                tarn_protocol::format::byte_cell(measured.after.uncompressed_size),
                ratio_cell(rate / baseline[workload].rate().max(1e-9)),
            ]);
        }
    }
    rows
}
