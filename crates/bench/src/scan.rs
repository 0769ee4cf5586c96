//! `tarn bench scrub`: scrub throughput on a sequentially filled two-way mirror with a cold
//! cache, beside fio's sequential read of the same vdev files in the same run; then a resilver
//! of a side that was offline while `--missed` bytes were written: its time and the bytes it
//! read and wrote, beside the bytes missed.
//!
//! The pool runs in this process (no daemon, no FUSE): recordsize 1 MiB, compression off,
//! incompressible data. The scrub's figure is the bytes it read from the devices (both copies of
//! every block) per second, from the scan start to its end, after an export, a drop of the page
//! cache and an import; the leaves read with O_DIRECT where the file system allows it. The
//! baseline is fio (bs=1M, direct) reading the first `--size` bytes of each vdev file one after
//! the other, after another drop of the page cache, as MiB/s over both.

use std::path::{Path, PathBuf};
use std::time::Instant;

use tarn::pool::scan::{ScanFunction, ScanState};
use tarn::pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;
use tarn_protocol::error::Failure;

use super::{drop_caches, fio, mib_per_second, write_sequential, BenchDirLock};

pub struct ScrubBench {
    pub dir: PathBuf,
    pub size: u64,
    pub missed: u64,
    pub vdev_size: u64,
    pub no_fio: bool,
    pub json: bool,
}

const POOL: &str = "benchscrub";

fn import(dir: &Path, tunables: &Tunables) -> Result<Pool, Failure> {
    Ok(Pool::import(
        POOL,
        ImportOptions::new(vec![dir.to_path_buf()], tunables.clone()),
    )?
    .0)
}

/// Write `bytes` of incompressible data into a new file (1 MiB records) and sync.
fn fill(pool: &Pool, tunables: &Tunables, bytes: u64, seed: u64) -> Result<(), Failure> {
    write_sequential(pool, tunables, bytes, seed)?;
    pool.sync()?;
    Ok(())
}

/// Bytes read and written by every leaf so far.
pub(crate) fn leaf_bytes(pool: &Pool) -> (u64, u64) {
    pool.core
        .io
        .vdevs
        .leaves()
        .fold((0, 0), |(read, written), leaf| {
            let stats = leaf.stats.snapshot();
            (read + stats.read_bytes, written + stats.write_bytes)
        })
}

/// Wait for the scan of `function` to finish; its state.
pub(crate) fn finish(
    pool: &Pool,
    function: ScanFunction,
) -> Result<tarn::pool::scan::ScanPhys, Failure> {
    pool.core.wait_scan(function)?;
    let phys = pool
        .core
        .scan_status()
        .ok_or_else(|| Failure(format!("no {} ran", function.as_str())))?
        .phys;
    if phys.state != ScanState::Finished || phys.errors != 0 {
        return Err(Failure(format!(
            "the {} did not finish clean: {phys:?}",
            function.as_str()
        )));
    }
    Ok(phys)
}

pub fn run(bench: ScrubBench) -> Result<(), Failure> {
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&bench.dir)?;
    let work = bench.dir.join("scrub-bench");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| Failure(format!("{}: {e}", work.display())))?;
    let result = run_in(&bench, &work);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn run_in(bench: &ScrubBench, work: &Path) -> Result<(), Failure> {
    let mut tunables = Tunables::from_env().map_err(Failure)?;
    tunables.recordsize = 1 << 20;
    let vdevs = [work.join("a.img"), work.join("b.img")];
    let pool = Pool::create(CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Mirror(vdevs.to_vec())],
        create_size: Some(bench.vdev_size),
        force: true,
        tunables: tunables.clone(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })?;
    fill(&pool, &tunables, bench.size, 0x9e37_79b9_7f4a_7c15)?;
    pool.export()?;

    // Scrub, cold.
    drop_caches().map_err(Failure)?;
    let pool = import(work, &tunables)?;
    let (read_before, _) = leaf_bytes(&pool);
    let started = Instant::now();
    pool.core
        .request_scrub()
        .map_err(|e| Failure(e.to_string()))?;
    let scrub = finish(&pool, ScanFunction::Scrub)?;
    let scrub_seconds = started.elapsed().as_secs_f64();
    let (read_after, _) = leaf_bytes(&pool);
    let scrub_read = read_after - read_before;
    let scrub_rate = mib_per_second(scrub_read, scrub_seconds);

    // Resilver: side b offline while `missed` bytes are written.
    pool.offline(&vdevs[1].display().to_string())?;
    let allocated_before = pool.core.io.space.totals().allocated;
    fill(&pool, &tunables, bench.missed, 0x51ed_2701_f00d)?;
    let missed_allocated = pool.core.io.space.totals().allocated - allocated_before;
    pool.export()?;
    drop_caches().map_err(Failure)?;
    let pool = import(work, &tunables)?;
    let (read_before, written_before) = leaf_bytes(&pool);
    let started = Instant::now();
    pool.online(&vdevs[1].display().to_string())?;
    let resilver = finish(&pool, ScanFunction::Resilver)?;
    let resilver_seconds = started.elapsed().as_secs_f64();
    let (read_after, written_after) = leaf_bytes(&pool);
    let (resilver_read, resilver_written) =
        (read_after - read_before, written_after - written_before);
    pool.export()?;

    let fio_rate = if bench.no_fio {
        None
    } else {
        drop_caches().map_err(Failure)?;
        // fio's own rate per file; over both, the bytes over the summed times.
        let megabytes = bench.size as f64 / (1 << 20) as f64;
        let mut seconds = 0.0;
        for vdev in &vdevs {
            seconds += megabytes / fio(vdev, bench.size, false, true).map_err(Failure)?;
        }
        Some(2.0 * megabytes / seconds)
    };

    let ratio = fio_rate.map(|fio| scrub_rate / fio);
    if bench.json {
        let objects = serde_json::json!({
            "scrub": {
                "data_bytes": bench.size,
                "examined_bytes": scrub.examined,
                "read_bytes": scrub_read,
                "seconds": scrub_seconds,
                "mib_per_second": scrub_rate,
                "fio_read_mib_per_second": fio_rate,
                "ratio": ratio,
            },
            "resilver": {
                "missed_bytes": missed_allocated,
                "examined_bytes": resilver.examined,
                "read_bytes": resilver_read,
                "written_bytes": resilver_written,
                "repaired_bytes": resilver.repaired,
                "seconds": resilver_seconds,
                "written_per_missed": resilver_written as f64 / missed_allocated.max(1) as f64,
                "read_per_missed": resilver_read as f64 / missed_allocated.max(1) as f64,
            },
        });
        tarn_protocol::json::Document::of("tarn bench scrub", objects).print();
        return Ok(());
    }
    out!(
        "scrub of {} MiB on a 2-way mirror (cold): read {} MiB in {scrub_seconds:.2} s = {scrub_rate:.0} MiB/s",
        bench.size >> 20,
        scrub_read >> 20
    );
    if let (Some(fio_rate), Some(ratio)) = (fio_rate, ratio) {
        out!("fio sequential read of both vdev files (bs=1M direct): {fio_rate:.0} MiB/s");
        out!("ratio scrub/fio: {ratio:.2}");
    }
    out!(
        "resilver of a side that missed {} MiB: {resilver_seconds:.2} s, read {} MiB ({:.2}x), wrote {} MiB ({:.2}x)",
        missed_allocated >> 20,
        resilver_read >> 20,
        resilver_read as f64 / missed_allocated.max(1) as f64,
        resilver_written >> 20,
        resilver_written as f64 / missed_allocated.max(1) as f64
    );
    Ok(())
}
