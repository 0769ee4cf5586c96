//! `tarn bench quota`: what enforcing quotas and reservations costs a writer, beside the same
//! writes with no limit set anywhere in the pool (the limits' admission is skipped then).
//!
//! Through the engine's file system (no FUSE, whose own cost would hide the admission's):
//! - **sequential**: `--sequential` bytes in 128 KiB writes to a new file, then a sync;
//! - **4 KiB random**: `--random-writes` writes of 4 KiB at random offsets of a 64 MiB file
//!   written beforehand, then a sync.
//!
//! With limits, the file system written has a quota and a refquota and its parent a quota and
//! a reservation, so each write is admitted at two levels, and quotas on the files' user,
//! group and project (root's, 0), so it is admitted for its owners too. Each round runs both, without and
//! with limits, which goes first alternating (`--rounds`, five by default); each figure is the
//! median, in MiB/s, with the ratio of the medians. The runs end with a sync to the vdev,
//! whose speed drifts from round to round more than admission costs; so below the table
//! the median of each round's own ratio (with over without, the two run back to back) is
//! printed too, which a drift between rounds does not move.
//! Asserts nothing.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use tarn::fs::FileSystem;
use tarn::tunables::Tunables;
use tarn::Pool;
use tarn_protocol::error::Failure;
use tarn_protocol::format::parse_size;

use super::{create_bench_pool, median, print_comparisons, BenchDirLock, Comparison};

#[derive(Args)]
pub struct QuotaBench {
    /// Directory for the pool's vdev (a sparse file).
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// Size of the pool's single vdev.
    #[arg(long, default_value = "4G")]
    vdev_size: String,
    /// Bytes of each sequential run.
    #[arg(long, default_value = "512M")]
    sequential: String,
    /// 4 KiB writes of each random run.
    #[arg(long, default_value_t = 20000)]
    random_writes: u64,
    /// Runs of each kind, with and without limits (the median is printed).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
}

const POOL_NAME: &str = "benchquota";
const RANDOM_FILE: u64 = 64 << 20;
const MIB: f64 = (1 << 20) as f64;

fn progress(message: &str) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        eprintln!("bench quota: {message}");
    }
}

fn engine(error: impl std::fmt::Display) -> Failure {
    Failure(error.to_string())
}

/// Set (`on`) or clear every limit of the bench's datasets.
fn set_limits(pool: &Pool, on: bool) -> Result<(), Failure> {
    let parent = format!("{POOL_NAME}/limits");
    let child = format!("{POOL_NAME}/limits/fs");
    let settings: [(&str, &str, &str); 7] = [
        (&parent, "quota", "3G"),
        (&parent, "reservation", "1G"),
        (&child, "quota", "2G"),
        (&child, "refquota", "2G"),
        // The files are root's: each write is admitted for its user, group and project too.
        (&child, "userquota@0", "2G"),
        (&child, "groupquota@0", "2G"),
        (&child, "projectquota@0", "2G"),
    ];
    for (dataset, property, size) in settings {
        pool.set_property(dataset, property, Some(if on { size } else { "none" }))
            .map_err(engine)?;
    }
    Ok(())
}

fn sequential_run(pool: &Pool, fs: &FileSystem, bytes: u64, round: usize) -> Result<f64, Failure> {
    let name = format!("seq{round}");
    let ino = fs
        .create(fs.root(), name.as_bytes(), 0o644, 0, 0)
        .map_err(engine)?
        .ino;
    let chunk = tarn_protocol::format::pseudo_random(128 << 10, round as u64);
    let started = Instant::now();
    for offset in (0..bytes).step_by(chunk.len()) {
        fs.write(ino, offset, &chunk).map_err(engine)?;
    }
    pool.sync().map_err(engine)?;
    let seconds = started.elapsed().as_secs_f64();
    fs.unlink(fs.root(), name.as_bytes()).map_err(engine)?;
    pool.sync().map_err(engine)?;
    Ok(bytes as f64 / MIB / seconds)
}

fn random_run(pool: &Pool, fs: &FileSystem, writes: u64, round: usize) -> Result<f64, Failure> {
    let name = format!("rand{round}");
    let ino = fs
        .create(fs.root(), name.as_bytes(), 0o644, 0, 0)
        .map_err(engine)?
        .ino;
    let fill = tarn_protocol::format::pseudo_random(1 << 20, 7);
    for offset in (0..RANDOM_FILE).step_by(fill.len()) {
        fs.write(ino, offset, &fill).map_err(engine)?;
    }
    pool.sync().map_err(engine)?;
    let block = tarn_protocol::format::pseudo_random(4096, round as u64);
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ round as u64;
    let started = Instant::now();
    for _ in 0..writes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let offset = (state % (RANDOM_FILE / 4096)) * 4096;
        fs.write(ino, offset, &block).map_err(engine)?;
    }
    pool.sync().map_err(engine)?;
    let seconds = started.elapsed().as_secs_f64();
    fs.unlink(fs.root(), name.as_bytes()).map_err(engine)?;
    pool.sync().map_err(engine)?;
    Ok(writes as f64 * 4096.0 / MIB / seconds)
}

pub fn run(bench: QuotaBench) -> Result<(), Failure> {
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&bench.dir)?;
    let vdev_size = parse_size(&bench.vdev_size).map_err(Failure)?;
    let sequential = parse_size(&bench.sequential).map_err(Failure)?;
    let vdev = bench.dir.join("quota.img");
    let pool = create_bench_pool(POOL_NAME, &vdev, vdev_size, &Tunables::default())?;
    for dataset in ["limits", "limits/fs"] {
        pool.create_dataset(
            &format!("{POOL_NAME}/{dataset}"),
            &[("compression".into(), "off".into())],
            false,
        )
        .map_err(engine)?;
    }
    let fs = pool
        .open_file_system(&format!("{POOL_NAME}/limits/fs"))
        .map_err(engine)?;
    let mut figures: [[Vec<f64>; 2]; 2] = Default::default();
    for round in 0..bench.rounds {
        // Each goes first in every other round: whatever the first run of a round leaves
        // (loaded metaslabs, warm caches, space to free) falls on both alike.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for limited in order {
            progress(&format!(
                "round {} of {}, {}",
                round + 1,
                bench.rounds,
                if limited { "with limits" } else { "without" }
            ));
            set_limits(&pool, limited)?;
            let index = usize::from(limited);
            figures[0][index].push(sequential_run(&pool, &fs, sequential, round)?);
            figures[1][index].push(random_run(&pool, &fs, bench.random_writes, round)?);
        }
    }
    drop(fs);
    pool.export().map_err(engine)?;
    let _ = std::fs::remove_file(&vdev);
    let workloads = ["sequential 128 KiB writes", "4 KiB random writes"];
    let paired: Vec<f64> = figures
        .iter()
        .map(|[without, with]| {
            median(
                with.iter()
                    .zip(without)
                    .map(|(with, without)| with / without.max(1e-9))
                    .collect(),
            )
        })
        .collect();
    let rows: Vec<Comparison> = workloads
        .iter()
        .zip(figures)
        .map(|(what, [without, with])| Comparison {
            what: format!("{what}, quota+refquota+parent quota+reservation+owner quotas"),
            tarn: median(with),
            baseline_what: "no limit in the pool".into(),
            baseline: median(without),
        })
        .collect();
    print_comparisons(&rows, ("MiB/s", "MiB/s"), bench.json, "quota")?;
    if !bench.json {
        println!(
            "median of the rounds' own ratios: {} {:.3}, {} {:.3}",
            workloads[0], paired[0], workloads[1], paired[1]
        );
    }
    Ok(())
}
