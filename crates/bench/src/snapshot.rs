//! `tarn bench snapshot`: what snapshots cost, in-process on a pool on a sparse file.
//!
//! - **Snapshot of a file system with many files**: the time `create_snapshots` takes (it
//!   returns when its txg is on disk) beside a txg that carries one small change and no
//!   snapshot: a snapshot should cost a txg, whatever the number of files (O(1) records).
//! - **Destroy of a snapshot whose deadlist holds many blocks**: a file of N 4 KiB records is
//!   snapshotted and then truncated to nothing in the head, so the N blocks go on the head's
//!   deadlist; the destroy command's time (its txg moves whole lists) and the time until the
//!   space is back (`freeing` 0, the free list drained in bounded rounds), beside the same N
//!   blocks freed by truncating an identical file that no snapshot holds.
//!
//! It is a benchmark, not a test: it asserts nothing, and prints each figure with its baseline
//! and the ratio.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use tarn::fs::{FileSystem, SetAttr};
use tarn::pool::Pool;
use tarn::tunables::Tunables;
use tarn_protocol::error::Failure;
use tarn_protocol::format::parse_size;

use super::{create_bench_pool, print_comparisons, BenchDirLock, Comparison};

#[derive(Args)]
pub struct SnapshotBench {
    /// Directory for the pool's vdev (a sparse file).
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// Files in the file system that is snapshotted.
    #[arg(long, default_value_t = 100_000)]
    files: u64,
    /// 4 KiB blocks on the deadlist of the snapshot that is destroyed.
    #[arg(long, default_value_t = 1_000_000)]
    blocks: u64,
    /// Size of the vdev.
    #[arg(long, default_value = "24G")]
    vdev_size: String,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
}

fn seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Progress on a terminal, nothing in scripts.
fn progress(message: &str) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        eprintln!("bench snapshot: {message}");
    }
}

fn fs_failure(error: tarn::fs::FsError) -> Failure {
    Failure(error.to_string())
}

/// One small change and its txg (the baseline of a snapshot's txg).
fn small_txg(pool: &Pool, fs: &FileSystem, ino: u64, round: u64) -> Result<f64, Failure> {
    fs.write(ino, 0, &round.to_le_bytes()).map_err(fs_failure)?;
    let started = Instant::now();
    pool.sync()?;
    Ok(seconds(started.elapsed()))
}

/// Write `blocks` 4 KiB records into a new file `name`; returns its inode.
fn big_file(fs: &FileSystem, name: &str, blocks: u64) -> Result<u64, Failure> {
    let ino = fs
        .create(fs.root(), name.as_bytes(), 0o644, 0, 0)
        .map_err(fs_failure)?
        .ino;
    let chunk = tarn_protocol::format::pseudo_random(1 << 20, 0x5eed ^ blocks);
    let total = blocks * 4096;
    let mut written = 0u64;
    while written < total {
        let length = (total - written).min(chunk.len() as u64) as usize;
        fs.write(ino, written, &chunk[..length])
            .map_err(fs_failure)?;
        written += length as u64;
    }
    Ok(ino)
}

fn truncate(fs: &FileSystem, ino: u64) -> Result<(), Failure> {
    fs.setattr(
        ino,
        SetAttr {
            size: Some(0),
            ..Default::default()
        },
    )
    .map_err(fs_failure)?;
    Ok(())
}

/// Sync until nothing is left to free in the background; returns when.
fn until_freed(pool: &Pool) -> Result<Instant, Failure> {
    loop {
        pool.sync()?;
        if pool.core.freeing_bytes()? == 0 && !pool.core.background_work_pending() {
            return Ok(Instant::now());
        }
    }
}

pub fn run(bench: SnapshotBench) -> Result<(), Failure> {
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&bench.dir)?;
    let vdev = bench.dir.join("bench-snapshot-vdev0.img");
    let tunables = Tunables::from_env().map_err(Failure)?;
    let pool = create_bench_pool("benchsnap", &vdev, parse_size(&bench.vdev_size)?, &tunables)?;
    let result = measure(&pool, &bench);
    pool.destroy()?;
    let _ = std::fs::remove_file(&vdev);
    let rows = result?;
    print_comparisons(&rows, ("tarn_s", "baseline_s"), bench.json, "snapshot")
}

fn measure(pool: &Pool, bench: &SnapshotBench) -> Result<Vec<Comparison>, Failure> {
    let mut rows = Vec::new();
    pool.create_dataset("benchsnap/files", &[], false)?;
    pool.create_dataset(
        "benchsnap/blocks",
        &[
            ("recordsize".into(), "4096".into()),
            ("compression".into(), "off".into()),
        ],
        false,
    )?;

    // A file system with many files.
    let fs = pool.open_file_system("benchsnap/files")?;
    progress(&format!("creating {} files", bench.files));
    for index in 0..bench.files {
        let ino = fs
            .create(fs.root(), format!("f{index}").as_bytes(), 0o644, 0, 0)
            .map_err(fs_failure)?
            .ino;
        fs.write(ino, 0, format!("file {index}\n").as_bytes())
            .map_err(fs_failure)?;
    }
    pool.sync()?;
    let marker = fs
        .create(fs.root(), b"marker", 0o644, 0, 0)
        .map_err(fs_failure)?
        .ino;
    pool.sync()?;
    let (mut snapshot_times, mut txg_times) = (Vec::new(), Vec::new());
    for round in 0..5u64 {
        txg_times.push(small_txg(pool, &fs, marker, round)?);
        fs.write(marker, 0, &round.to_le_bytes())
            .map_err(fs_failure)?;
        let started = Instant::now();
        pool.create_snapshots(&[format!("benchsnap/files@s{round}")], false)?;
        snapshot_times.push(seconds(started.elapsed()));
    }
    rows.push(Comparison {
        what: format!("snapshot of {} files (median of 5)", bench.files),
        tarn: median(snapshot_times),
        baseline_what: "txg with one small change".into(),
        baseline: median(txg_times),
    });
    drop(fs);

    // Many blocks freed: without a snapshot (the baseline), then through a deadlist.
    let fs = pool.open_file_system("benchsnap/blocks")?;
    progress(&format!("writing {} 4 KiB blocks (baseline)", bench.blocks));
    let plain = big_file(&fs, "plain", bench.blocks)?;
    pool.sync()?;
    let started = Instant::now();
    truncate(&fs, plain)?;
    let baseline = seconds(until_freed(pool)?.duration_since(started));

    progress(&format!(
        "writing {} 4 KiB blocks under a snapshot",
        bench.blocks
    ));
    let held = big_file(&fs, "held", bench.blocks)?;
    pool.sync()?;
    pool.create_snapshots(&["benchsnap/blocks@held".to_string()], false)?;
    truncate(&fs, held)?;
    until_freed(pool)?;
    let deadlist_blocks = pool.snapshot_info("benchsnap/blocks@held")?.used / 4096;
    progress(&format!(
        "destroying the snapshot ({deadlist_blocks} blocks on the deadlist)"
    ));
    let started = Instant::now();
    pool.destroy_snapshots("benchsnap/blocks@held", false)?;
    let command = seconds(started.elapsed());
    let freed = seconds(until_freed(pool)?.duration_since(started));
    rows.push(Comparison {
        what: format!("destroy snapshot, {deadlist_blocks} blocks on its deadlist: command"),
        tarn: command,
        baseline_what: "truncate of the same blocks, no snapshot, until freed".into(),
        baseline,
    });
    rows.push(Comparison {
        what: format!("destroy snapshot, {deadlist_blocks} blocks: until the space is back"),
        tarn: freed,
        baseline_what: "truncate of the same blocks, no snapshot, until freed".into(),
        baseline,
    });
    Ok(rows)
}
