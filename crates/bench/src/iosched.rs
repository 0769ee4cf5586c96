//! `tarn bench iosched`: what the vdev I/O scheduler buys a latency-sensitive writer.
//!
//! A stream of 4 KiB writes is issued one after the other through the pool's vdev tree in the
//! sync write class (the class the intent log will use: `TopVdev::write`, through the leaf's
//! queue, as an O_DSYNC writer's log records will go), and the latency of each (submit to
//! completion) is recorded:
//!
//! 1. *alone*: nothing else runs on the pool;
//! 2. *sync class beside a sequential write*: a thread writes a file through the engine in
//!    1 MiB records as fast as it can, so that the txg sync keeps the leaf's async write class
//!    busy; the scheduler lets the sync writes overtake the backlog;
//! 3. *async class beside the same write*: the same 4 KiB writes submitted in the async write
//!    class, i.e. queued with the txg's writes and issued in offset order among them, which is
//!    what happens without a priority scheduler (the baseline). Steps 2 and 3 alternate write
//!    by write, so that both see the same background.
//!
//! The region the small writes go to is written once first (the vdev is a sparse file, and a
//! first write into a hole costs the host file system an allocation), and the measurement
//! runs in three rounds of (alone, beside), so that a drift in the host's own load (other
//! processes, the host's flush latency) weighs on both alike.
//!
//! It prints p50 and p99 of each, and the ratios of the p99s to the p99 alone. The aim is a
//! sync-class p99 beside the sequential write within 2x of alone.
//!
//! On a fast disk the txg's writes rarely queue up, and the figures mostly measure CPU
//! contention; `--device-delay-us N` delays every device I/O by N microseconds through the
//! fault layer (a slow disk), so that the async write class is backlogged and the scheduler's
//! effect is what is measured.
//!
//! The 4 KiB writes go to a region at the end of the vdev's data area that the benchmark's own
//! pool never reads back (it is destroyed afterwards); `--flush` adds a device flush after each
//! write (O_DSYNC's full cost, which on a file-backed vdev is the host file system's journal
//! commit rather than anything the scheduler orders).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn::block::blkptr::{ChecksumType, Compression, ObjectType};
use tarn::object::ObjectProps;
use tarn::vdev::{BlockDevice, FaultPlan, FaultyDevice, IoClass, TopVdev};
use tarn_protocol::error::Failure;
use tarn_protocol::format::{parse_size, print_table, Cell, ListFormat};

use super::{create_bench_pool, ratio_cell, BenchDirLock};

/// `tarn bench iosched` options.
pub struct IoschedBench {
    pub dir: PathBuf,
    pub vdev_size: String,
    pub writes: usize,
    pub background_file: String,
    pub flush: bool,
    /// Microseconds every device I/O is delayed by (the fault layer): a slow disk, so that the
    /// txg's writes queue up even where the real disk keeps pace.
    pub device_delay_us: u64,
    pub json: bool,
}

/// Bytes of one latency-sensitive write.
const SMALL_WRITE: usize = 4096;
/// The region the small writes cycle through, at the end of the data area.
const REGION_BYTES: u64 = 16 << 20;

/// Latencies (ns) of `count` sequential small writes in each of `classes`, issued in turn
/// (one of each class, then the next round), so that every class sees the same background.
fn small_writes(
    top: &TopVdev,
    classes: &[IoClass],
    count: usize,
    flush: bool,
) -> Result<Vec<Vec<u64>>, Failure> {
    let region = top.asize - REGION_BYTES;
    let slots = REGION_BYTES / SMALL_WRITE as u64;
    let data = tarn_protocol::format::pseudo_random(SMALL_WRITE, 0x5eed);
    let mut latencies = vec![Vec::with_capacity(count); classes.len()];
    let mut slot = 0u64;
    for _ in 0..count {
        for (class, latencies) in classes.iter().zip(latencies.iter_mut()) {
            let offset = region + (slot % slots) * SMALL_WRITE as u64;
            slot += 1;
            let started = Instant::now();
            top.write(*class, offset, &data)
                .map_err(|e| Failure(e.to_string()))?;
            if flush {
                top.flush().map_err(|e| Failure(e.to_string()))?;
            }
            latencies.push(started.elapsed().as_nanos() as u64);
        }
    }
    Ok(latencies)
}

/// The `percent`th percentile of `latencies` (sorted in place).
fn percentile(latencies: &mut [u64], percent: f64) -> u64 {
    latencies.sort_unstable();
    if latencies.is_empty() {
        return 0;
    }
    let rank = ((percent / 100.0) * latencies.len() as f64).ceil() as usize;
    latencies[rank.clamp(1, latencies.len()) - 1]
}

/// The upper bound of the power-of-two bucket that holds the 99th percentile of a latency
/// histogram, in nanoseconds (0 for an empty histogram).
fn histogram_p99_bound_ns(histogram: &[u64]) -> u64 {
    let total: u64 = histogram.iter().sum();
    let rank = total - total / 100;
    let mut seen = 0;
    for (bucket, count) in histogram.iter().enumerate() {
        seen += count;
        if total > 0 && seen >= rank {
            return (1u64 << (bucket + 1)) - 1;
        }
    }
    0
}

fn micros_cell(ns: u64) -> Cell {
    Cell {
        exact: ns.to_string(),
        human: format!("{:.1}us", ns as f64 / 1e3),
        json: serde_json::json!(ns),
    }
}

const COLUMNS: &[&str] = &["workload", "p50", "p99", "p99/alone", "background_mib_s"];

pub fn run(bench: IoschedBench) -> Result<(), Failure> {
    if bench.writes < 100 {
        return Err(Failure(
            "--writes must be at least 100 (a p99 needs them)".into(),
        ));
    }
    let vdev_size = parse_size(&bench.vdev_size)?;
    let file_size = parse_size(&bench.background_file)?;
    if file_size < 1 << 20 || file_size.saturating_mul(4) > vdev_size {
        return Err(Failure(
            "--background-file must be at least 1M and at most a quarter of --vdev-size".into(),
        ));
    }
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&bench.dir)?;
    let vdev = bench.dir.join("bench-iosched-vdev0.img");
    let mut tunables = tarn::tunables::Tunables::from_env().map_err(Failure)?;
    tunables.recordsize = 1 << 20;
    let pool = Arc::new(if bench.device_delay_us == 0 {
        create_bench_pool("benchiosched", &vdev, vdev_size, &tunables)?
    } else {
        let plan = FaultPlan::new();
        plan.set_io_delay(Duration::from_micros(bench.device_delay_us));
        let wrap: tarn::pool::DeviceWrapper = Arc::new(
            move |_path: &std::path::Path, device: Arc<dyn BlockDevice>| {
                Arc::new(FaultyDevice::new(device, plan.clone())) as Arc<dyn BlockDevice>
            },
        );
        let _ = std::fs::remove_file(&vdev);
        tarn::pool::Pool::create(tarn::pool::CreateOptions {
            name: "benchiosched".into(),
            log: Vec::new(),
            cache: Vec::new(),
            vdevs: vec![tarn::pool::VdevSpec::Leaf(vdev.clone())],
            create_size: Some(vdev_size),
            force: true,
            tunables: tunables.clone(),
            wrap_device: Some(wrap),
            disabled_features: Vec::new(),
        })?
    });
    let result = measure(&pool, &bench, file_size, &tunables);
    let pool = Arc::try_unwrap(pool).map_err(|_| Failure("pool still in use".into()))?;
    pool.destroy()?;
    let _ = std::fs::remove_file(&vdev);
    let rows = result?;
    let format = ListFormat {
        json: bench.json,
        ..ListFormat::default()
    };
    print_table(COLUMNS, &rows, &format, "tarn bench iosched", "workloads").map_err(Failure)
}

/// Rounds of (alone, beside) measurements: the host's own load drifts over the run, so each
/// figure is gathered in the same stretches of time as the other.
const ROUNDS: usize = 3;

/// Start the background sequential writer: 1 MiB records through the engine into a file of
/// `file_size` bytes, overwritten in a loop, until `stop`; `written` counts its bytes.
fn start_background(
    pool: &Arc<tarn::pool::Pool>,
    file_size: u64,
    indirect_block_shift: u8,
    stop: &Arc<AtomicBool>,
    written: &Arc<AtomicU64>,
) -> std::thread::JoinHandle<Result<(), String>> {
    let pool = pool.clone();
    let stop = stop.clone();
    let written = written.clone();
    std::thread::spawn(move || -> Result<(), String> {
        let objset = pool.root_objset();
        let record = 1usize << 20;
        let object = {
            let hold = pool.assign().map_err(|e| e.to_string())?;
            let props = ObjectProps {
                object_type: ObjectType::PlainFile,
                data_block_size: record as u32,
                indirect_block_shift,
                checksum: ChecksumType::Fletcher4,
                compression: Compression::Off,
                copies: 1,
            };
            objset
                .create_object(&hold.tx(), props, ObjectType::None, &[])
                .map_err(|e| e.to_string())?
        };
        let buffer = tarn_protocol::format::pseudo_random(16 << 20, 0x9e37_79b9);
        let mut offset = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let hold = pool.assign().map_err(|e| e.to_string())?;
            let at = (offset as usize) % buffer.len();
            objset
                .write(
                    &hold.tx(),
                    object,
                    offset % file_size,
                    &buffer[at..at + record],
                )
                .map_err(|e| e.to_string())?;
            offset += record as u64;
            written.fetch_add(record as u64, Ordering::Relaxed);
        }
        Ok(())
    })
}

fn measure(
    pool: &Arc<tarn::pool::Pool>,
    bench: &IoschedBench,
    file_size: u64,
    tunables: &tarn::tunables::Tunables,
) -> Result<Vec<Vec<Cell>>, Failure> {
    let top = pool.core.io.vdevs.tops()[0].clone();
    if top.asize < REGION_BYTES * 8 {
        return Err(Failure(
            "--vdev-size is too small for this benchmark".into(),
        ));
    }
    // The vdev is a sparse file: write the whole region once, so that every measured write
    // overwrites allocated space (a first write into a hole costs the host file system an
    // allocation and a journal commit, which is not what is measured).
    let fill = tarn_protocol::format::pseudo_random(REGION_BYTES as usize, 0xf111);
    top.write(IoClass::SyncWrite, top.asize - REGION_BYTES, &fill)
        .and_then(|()| top.flush())
        .map_err(|e| Failure(e.to_string()))?;
    // Warm up (thread start, page cache of the region).
    small_writes(&top, &[IoClass::SyncWrite], 100, bench.flush)?;
    let per_round = bench.writes.div_ceil(ROUNDS);
    let mut alone = Vec::new();
    let (mut with_scheduler, mut without_scheduler) = (Vec::new(), Vec::new());
    // The leaf's counters over the beside windows.
    let mut during = tarn::vdev::LeafStatsSnapshot::default();
    let (mut background_bytes, mut background_seconds) = (0u64, 0f64);
    for _ in 0..ROUNDS {
        alone.append(&mut small_writes(&top, &[IoClass::SyncWrite], per_round, bench.flush)?[0]);
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let background = start_background(
            pool,
            file_size,
            tunables.indirect_block_shift as u8,
            &stop,
            &written,
        );
        // Let the first txgs fill the async write queue before measuring.
        std::thread::sleep(Duration::from_millis(1500));
        let started = Instant::now();
        let written_before = written.load(Ordering::Relaxed);
        let stats_before = top.children[0].stats.snapshot();
        let beside = small_writes(
            &top,
            &[IoClass::SyncWrite, IoClass::AsyncWrite],
            per_round,
            bench.flush,
        );
        background_seconds += started.elapsed().as_secs_f64();
        background_bytes += written.load(Ordering::Relaxed) - written_before;
        during.add(&top.children[0].stats.snapshot().since(&stats_before));
        stop.store(true, Ordering::Relaxed);
        background
            .join()
            .map_err(|_| Failure("the background writer panicked".into()))?
            .map_err(|e| Failure(format!("background writer: {e}")))?;
        // The next alone round starts with the txgs written out.
        pool.sync()?;
        let mut beside = beside?;
        without_scheduler.append(&mut beside[1]);
        with_scheduler.append(&mut beside[0]);
    }
    let background_mib_s = background_bytes as f64 / (1 << 20) as f64 / background_seconds;
    let sync_class = during.class(IoClass::SyncWrite);
    let write_disk_histogram = &during.write.disk_histogram;

    let alone_p99 = percentile(&mut alone, 99.0).max(1);
    let row = |name: &str, latencies: &mut Vec<u64>, background: Option<f64>| {
        let p99 = percentile(latencies, 99.0);
        vec![
            Cell::text(name),
            micros_cell(percentile(latencies, 50.0)),
            micros_cell(p99),
            ratio_cell(p99 as f64 / alone_p99 as f64),
            match background {
                Some(rate) => Cell {
                    exact: format!("{rate:.1}"),
                    human: format!("{rate:.0}"),
                    json: serde_json::json!(rate),
                },
                None => Cell::text("-"),
            },
        ]
    };
    // Where a sync write's time went beside the sequential write: the queue or the device
    // (the leaf's own counters; averages, so the tail is in the table above).
    err!(
        "sync_write class beside seqwrite: {} requests, average queue wait {:.1}us (p99 below {}us), \
         average device time {:.1}us (p99 of all writes' device time below {}us)",
        sync_class.requests,
        sync_class.queue_wait_ns() as f64 / 1e3,
        histogram_p99_bound_ns(&sync_class.queue_histogram) / 1000,
        sync_class.disk_ns.checked_div(sync_class.requests).unwrap_or(0) as f64 / 1e3,
        histogram_p99_bound_ns(write_disk_histogram) / 1000
    );
    Ok(vec![
        row("sync_write 4K alone", &mut alone, None),
        row(
            "sync_write 4K beside seqwrite",
            &mut with_scheduler,
            Some(background_mib_s),
        ),
        row(
            "async_write 4K beside seqwrite (no priority)",
            &mut without_scheduler,
            Some(background_mib_s),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_by_rank() {
        let mut values: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(percentile(&mut values, 99.0), 99);
        assert_eq!(percentile(&mut values, 50.0), 50);
        assert_eq!(percentile(&mut values, 100.0), 100);
        assert_eq!(percentile(&mut [], 99.0), 0);
        assert_eq!(percentile(&mut [7], 1.0), 7);
        let mut histogram = vec![0u64; 37];
        histogram[10] = 990;
        histogram[20] = 10;
        assert_eq!(histogram_p99_bound_ns(&histogram), (1 << 11) - 1);
        histogram[20] = 11;
        assert_eq!(histogram_p99_bound_ns(&histogram), (1 << 21) - 1);
        assert_eq!(histogram_p99_bound_ns(&[0; 37]), 0);
    }
}
