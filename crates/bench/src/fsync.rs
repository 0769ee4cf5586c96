//! `tarn bench fsync`: what an fsync costs through a FUSE mount with the intent log,
//! beside baselines measured in the same run.
//!
//! - **4 KiB write + fsync loop**: appends of 4 KiB to one file, each followed by fsync;
//!   fsyncs per second and p99 latency. Beside: the same loop on a file of the host's file
//!   system in `--dir`; the same loop on the mount with each fsync replaced by a wait for a txg
//!   sync (what tarn's fsync did before the intent log); and with `sync=disabled` (no
//!   durability: the cost of FUSE and the write path alone).
//! - **create + fsync, rename + fsync loop**: in a fresh directory, a new file with 4 KiB
//!   written, then fsync of the file; then a rename of it, then fsync of the directory (the
//!   namespace records of the log). Per second and p99 for each half, beside the host's file
//!   system and the same loop with each fsync replaced by a wait for a txg sync (what such an
//!   fsync cost before namespace records).
//! - **sqlite3 in WAL mode** (if the `sqlite3` binary is on PATH): `--transactions`
//!   single-row inserts, each its own transaction, at `synchronous=FULL` and `NORMAL`, on the
//!   mount beside the host's file system.
//! - **`sync=always` sequential write**: 64 MiB in 128 KiB writes on the mount beside
//!   `sync=standard` (no fsync).
//!
//! - **btrfs on a loop device** (root, `mkfs.btrfs` on PATH, not `--no-btrfs`): the 4 KiB
//!   write + fsync loop, sqlite3 and a 128 KiB O_DSYNC sequential write there, each beside
//!   tarn's figure of the same run.
//!
//! `--log-device PATH` puts the intent log on a separate log vdev (`pool add POOL log PATH`; a
//! file there is made sparse, 1 GiB, if missing), e.g. a file on tmpfs standing in for a fast
//! device: run it with and without to compare.
//!
//! Needs root and /dev/fuse. It asserts nothing; every figure is printed beside its baseline
//! with the ratio.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use tarn::tunables::Tunables;
use tarn::zil::{Logbias, SyncMode};
use tarn_fuse::MountOptions;
use tarn_protocol::error::Failure;
use tarn_protocol::format::parse_size;

use super::{btrfs_available, io_failure, on_btrfs};
use super::{create_bench_pool, print_comparisons, unmount, BenchDirLock, Comparison};

#[derive(Args)]
pub struct FsyncBench {
    /// Directory for the pool's vdev (a sparse file), the mountpoint and the host baseline.
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// Size of the pool's single vdev.
    #[arg(long, default_value = "2G")]
    vdev_size: String,
    /// 4 KiB write + fsync iterations per loop.
    #[arg(long, default_value_t = 2000)]
    fsyncs: u64,
    /// sqlite3 transactions per run.
    #[arg(long, default_value_t = 2000)]
    transactions: u64,
    /// A separate log device for the pool (a file is created sparse, 1 GiB, if missing).
    #[arg(long)]
    log_device: Option<PathBuf>,
    /// Skip the btrfs baseline even if mkfs.btrfs is available.
    #[arg(long)]
    no_btrfs: bool,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
}

const POOL_NAME: &str = "benchfsync";
const BLOCK: usize = 4096;

fn progress(message: &str) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        eprintln!("bench fsync: {message}");
    }
}

/// Rate (per second) and p99 latency (milliseconds) of a loop.
struct LoopFigures {
    per_second: f64,
    p99_ms: f64,
}

/// `count` appends of 4 KiB to a new file at `path`, each followed by `durable`.
fn write_loop(
    path: &Path,
    count: u64,
    mut durable: impl FnMut(&File) -> Result<(), Failure>,
) -> Result<LoopFigures, Failure> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| io_failure(path.display(), e))?;
    let block = tarn_protocol::format::pseudo_random(BLOCK, 0x5eed);
    let mut latencies = Vec::with_capacity(count as usize);
    let started = Instant::now();
    for index in 0..count {
        let one = Instant::now();
        file.write_all_at(&block, index * BLOCK as u64)
            .map_err(|e| io_failure("write", e))?;
        durable(&file)?;
        latencies.push(one.elapsed().as_secs_f64());
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(path);
    Ok(figures(latencies, seconds))
}

/// Run `work` while another thread writes `path` sequentially in 1 MiB writes (wrapping at
/// 1 GiB, never synced: the txg's bulk writes the intent log's writes must overtake).
fn beside_sequential_writer<T>(
    path: &Path,
    work: impl FnOnce() -> Result<T, Failure>,
) -> Result<T, Failure> {
    let stop = std::sync::atomic::AtomicBool::new(false);
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)
        .map_err(|e| io_failure(path.display(), e))?;
    let chunk = tarn_protocol::format::pseudo_random(1 << 20, 0xb05e);
    let result = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut offset = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                file.write_all_at(&chunk, offset)
                    .map_err(|e| io_failure(path.display(), e))?;
                offset = (offset + chunk.len() as u64) % (1 << 30);
            }
            Ok::<(), Failure>(())
        });
        let result = work();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(Failure("the sequential writer panicked".into())));
        result.and_then(|value| written.map(|()| value))
    });
    drop(file);
    let _ = std::fs::remove_file(path);
    result
}

fn figures(mut latencies: Vec<f64>, seconds: f64) -> LoopFigures {
    latencies.sort_by(f64::total_cmp);
    let p99 = latencies[((latencies.len() * 99) / 100).min(latencies.len() - 1)];
    LoopFigures {
        per_second: latencies.len() as f64 / seconds,
        p99_ms: p99 * 1000.0,
    }
}

/// `count` rounds in a new directory `path`: create a file, write 4 KiB, `durable` on it;
/// then rename it and `durable` on the directory. Figures of the creates and of the renames.
fn namespace_loop(
    path: &Path,
    count: u64,
    mut durable: impl FnMut(&File) -> Result<(), Failure>,
) -> Result<(LoopFigures, LoopFigures), Failure> {
    std::fs::create_dir_all(path).map_err(|e| io_failure(path.display(), e))?;
    let directory = File::open(path).map_err(|e| io_failure(path.display(), e))?;
    durable(&directory)?;
    let block = tarn_protocol::format::pseudo_random(BLOCK, 0x5eed);
    let (mut creates, mut renames) = (Vec::new(), Vec::new());
    let (mut create_seconds, mut rename_seconds) = (0.0, 0.0);
    for index in 0..count {
        let created = path.join(format!("f{index}"));
        let one = Instant::now();
        let file = File::create(&created).map_err(|e| io_failure(created.display(), e))?;
        file.write_all_at(&block, 0)
            .map_err(|e| io_failure("write", e))?;
        durable(&file)?;
        let elapsed = one.elapsed().as_secs_f64();
        creates.push(elapsed);
        create_seconds += elapsed;
        drop(file);
        let one = Instant::now();
        std::fs::rename(&created, path.join(format!("g{index}")))
            .map_err(|e| io_failure("rename", e))?;
        durable(&directory)?;
        let elapsed = one.elapsed().as_secs_f64();
        renames.push(elapsed);
        rename_seconds += elapsed;
    }
    drop(directory);
    let _ = std::fs::remove_dir_all(path);
    Ok((
        figures(creates, create_seconds),
        figures(renames, rename_seconds),
    ))
}

fn fsync(file: &File) -> Result<(), Failure> {
    file.sync_all().map_err(|e| io_failure("fsync", e))
}

/// Seconds for `transactions` single-row inserts in WAL mode at `synchronous`, in `dir`.
fn sqlite(dir: &Path, transactions: u64, synchronous: &str) -> Result<f64, Failure> {
    let database = dir.join("bench-fsync.sqlite");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", database.display()));
    }
    let mut script = format!(
        "PRAGMA journal_mode=WAL;\nPRAGMA synchronous={synchronous};\nCREATE TABLE t(x);\n"
    );
    for _ in 0..transactions {
        script.push_str("INSERT INTO t VALUES(randomblob(100));\n");
    }
    let started = Instant::now();
    let mut child = Command::new("sqlite3")
        .arg(&database)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| io_failure("sqlite3", e))?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped");
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| io_failure("sqlite3 stdin", e))?;
    }
    let status = child.wait().map_err(|e| io_failure("sqlite3", e))?;
    let seconds = started.elapsed().as_secs_f64();
    if !status.success() {
        return Err(Failure(format!("sqlite3 failed: {status}")));
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", database.display()));
    }
    Ok(seconds)
}

/// MiB/s of a sequential write of `total` bytes in writes of `write_size` (no fsync) at
/// `path`.
/// MiB/s of `total` bytes written to a new file in `write_size` writes (each durable when
/// it returns with `dsync`: O_DSYNC).
fn sequential(path: &Path, write_size: usize, total: u64, dsync: bool) -> Result<f64, Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(if dsync { libc::O_DSYNC } else { 0 })
        .open(path)
        .map_err(|e| io_failure(path.display(), e))?;
    let block = tarn_protocol::format::pseudo_random(write_size, 0xabc);
    let started = Instant::now();
    let mut at = 0u64;
    while at < total {
        file.write_all_at(&block, at)
            .map_err(|e| io_failure("write", e))?;
        at += block.len() as u64;
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(path);
    Ok(total as f64 / (1 << 20) as f64 / seconds)
}

/// Add `path` to `pool` as a log vdev, creating it as a sparse file of 1 GiB if missing.
fn add_log_device(pool: &tarn::pool::Pool, path: &Path) -> Result<(), Failure> {
    if !path.exists() {
        tarn::vdev::FileDevice::create_sparse(path, 1 << 30)
            .map_err(|e| Failure(format!("{}: {e}", path.display())))?;
    }
    let layout = tarn::pool::VdevLayout {
        log: vec![tarn::pool::VdevSpec::Leaf(path.to_path_buf())],
        ..Default::default()
    };
    pool.add(&layout, true, false)?;
    Ok(())
}

pub fn run(bench: FsyncBench) -> Result<(), Failure> {
    if bench.fsyncs == 0 {
        return Err(Failure("--fsyncs must be at least 1".into()));
    }
    let vdev_size = parse_size(&bench.vdev_size)?;
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let dir = std::fs::canonicalize(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&dir)?;
    let tunables = Tunables::from_env().map_err(Failure)?;
    let vdev = dir.join("bench-fsync-vdev0.img");
    let mountpoint = dir.join("mnt-fsync");
    let pool = create_bench_pool(POOL_NAME, &vdev, vdev_size, &tunables)?;
    let result = (|| {
        if let Some(log_device) = &bench.log_device {
            add_log_device(&pool, log_device)?;
        }
        tarn_fuse::mountpoint::prepare(&mountpoint).map_err(Failure)?;
        let fs = Arc::new(pool.file_system()?);
        let mut handle = tarn_fuse::mount(
            fs.clone(),
            &mountpoint,
            &MountOptions::new("tarn:benchfsync"),
        )
        .map_err(|e| Failure(format!("cannot mount at {}: {e}", mountpoint.display())))?;
        let rows = measure(&bench, &dir, &mountpoint, &pool, &fs);
        unmount(&mut handle)?;
        let log = fs.intent_log().map_or_else(String::new, |zil| {
            let stats = &zil.stats;
            let load = |counter: &std::sync::atomic::AtomicU64| {
                counter.load(std::sync::atomic::Ordering::Relaxed)
            };
            format!(
                "intent log: {} commits, {} log blocks, {} bytes ({} blocks, {} bytes on log vdevs), {} records, {} fsyncs that waited for a txg",
                load(&stats.commits),
                load(&stats.blocks) + load(&stats.slog_blocks),
                load(&stats.bytes) + load(&stats.slog_bytes),
                load(&stats.slog_blocks),
                load(&stats.slog_bytes),
                load(&stats.records),
                load(&stats.txg_waits)
            )
        });
        Ok::<_, Failure>((rows?, log))
    })();
    pool.destroy()?;
    let _ = std::fs::remove_file(&vdev);
    let _ = std::fs::remove_dir(&mountpoint);
    let (rows, log) = result?;
    print_comparisons(&rows, ("tarn", "baseline_value"), bench.json, "fsync")?;
    if !bench.json {
        out!("{log}");
    }
    Ok(())
}

fn measure(
    bench: &FsyncBench,
    dir: &Path,
    mountpoint: &Path,
    pool: &tarn::pool::Pool,
    fs: &tarn::fs::FileSystem,
) -> Result<Vec<Comparison>, Failure> {
    let count = bench.fsyncs;
    let mut rows = Vec::new();
    progress("4 KiB write + fsync on the host file system");
    let host = write_loop(&dir.join("bench-fsync-host.dat"), count, fsync)?;
    progress("4 KiB write + fsync on tarn (intent log)");
    let tarn = write_loop(&mountpoint.join("loop.dat"), count, fsync)?;
    progress("4 KiB write + fsync on tarn beside a sequential writer");
    let busy = beside_sequential_writer(&mountpoint.join("background.dat"), || {
        write_loop(&mountpoint.join("loop-busy.dat"), count, fsync)
    })?;
    progress("4 KiB write + a txg sync on tarn (the path before the intent log)");
    let txg_count = count.min(300);
    // The kernel's page cache holds the write until an fsync: the fsync (log commits off)
    // brings it to the engine, then the loop waits for a txg to sync it.
    let wait_for_txg = |file: &File| {
        fsync(file)?;
        pool.core
            .txgs
            .wait_synced(None)
            .map(|_| ())
            .map_err(|e| Failure(e.to_string()))
    };
    fs.set_sync_mode(SyncMode::Disabled);
    let txg = write_loop(&mountpoint.join("loop-txg.dat"), txg_count, wait_for_txg);
    fs.set_sync_mode(SyncMode::Standard);
    let txg = txg?;
    progress("4 KiB write + fsync on tarn with sync=disabled");
    fs.set_sync_mode(SyncMode::Disabled);
    let disabled = write_loop(&mountpoint.join("loop-off.dat"), count, fsync)?;
    fs.set_sync_mode(SyncMode::Standard);
    let host_fs = format!("host file system ({})", dir.display());
    rows.push(Comparison {
        what: format!("4 KiB write+fsync, fsyncs/s ({count})"),
        tarn: tarn.per_second,
        baseline_what: host_fs.clone(),
        baseline: host.per_second,
    });
    rows.push(Comparison {
        what: "4 KiB write+fsync, p99 ms".into(),
        tarn: tarn.p99_ms,
        baseline_what: host_fs.clone(),
        baseline: host.p99_ms,
    });
    rows.push(Comparison {
        what: "4 KiB write+fsync beside a sequential writer, p99 ms".into(),
        tarn: busy.p99_ms,
        baseline_what: "tarn, the same loop alone".into(),
        baseline: tarn.p99_ms,
    });
    rows.push(Comparison {
        what: "4 KiB write+fsync beside a sequential writer, fsyncs/s".into(),
        tarn: busy.per_second,
        baseline_what: "tarn, the same loop alone".into(),
        baseline: tarn.per_second,
    });
    rows.push(Comparison {
        what: "4 KiB write+fsync, fsyncs/s".into(),
        tarn: tarn.per_second,
        baseline_what: format!("tarn, a txg sync per write (before the log; {txg_count})"),
        baseline: txg.per_second,
    });
    rows.push(Comparison {
        what: "4 KiB write+fsync, p99 ms".into(),
        tarn: tarn.p99_ms,
        baseline_what: "tarn, a txg sync per write (before the log)".into(),
        baseline: txg.p99_ms,
    });
    rows.push(Comparison {
        what: "4 KiB write+fsync, fsyncs/s".into(),
        tarn: tarn.per_second,
        baseline_what: "tarn sync=disabled (no durability)".into(),
        baseline: disabled.per_second,
    });
    let namespace_count = count.min(1000);
    progress("create + fsync, rename + fsync on the host file system");
    let host_namespace = namespace_loop(&dir.join("bench-fsync-names"), namespace_count, fsync)?;
    progress("create + fsync, rename + fsync on tarn (namespace records)");
    let tarn_namespace = namespace_loop(&mountpoint.join("names"), namespace_count, fsync)?;
    progress("create + a txg sync, rename + a txg sync on tarn (before namespace records)");
    let txg_namespace_count = namespace_count.min(150);
    let txg_namespace = namespace_loop(
        &mountpoint.join("names-txg"),
        txg_namespace_count,
        wait_for_txg,
    )?;
    for (what, tarn, host, txg) in [
        (
            "create+4 KiB write+fsync",
            &tarn_namespace.0,
            &host_namespace.0,
            &txg_namespace.0,
        ),
        (
            "rename+fsync of the directory",
            &tarn_namespace.1,
            &host_namespace.1,
            &txg_namespace.1,
        ),
    ] {
        rows.push(Comparison {
            what: format!("{what}, per s ({namespace_count})"),
            tarn: tarn.per_second,
            baseline_what: host_fs.clone(),
            baseline: host.per_second,
        });
        rows.push(Comparison {
            what: format!("{what}, p99 ms"),
            tarn: tarn.p99_ms,
            baseline_what: host_fs.clone(),
            baseline: host.p99_ms,
        });
        rows.push(Comparison {
            what: format!("{what}, per s"),
            tarn: tarn.per_second,
            baseline_what: format!(
                "tarn, a txg sync per fsync (before namespace records; {txg_namespace_count})"
            ),
            baseline: txg.per_second,
        });
    }
    let mut tarn_sqlite = Vec::new();
    if Command::new("sqlite3").arg("-version").output().is_ok() {
        for synchronous in ["FULL", "NORMAL"] {
            progress(&format!("sqlite3 WAL synchronous={synchronous}"));
            let host = sqlite(dir, bench.transactions, synchronous)?;
            let tarn = sqlite(mountpoint, bench.transactions, synchronous)?;
            tarn_sqlite.push((synchronous, tarn));
            rows.push(Comparison {
                what: format!(
                    "sqlite3 WAL synchronous={synchronous}, {} transactions, s",
                    bench.transactions
                ),
                tarn,
                baseline_what: host_fs.clone(),
                baseline: host,
            });
        }
    } else {
        progress("no sqlite3 on PATH: the sqlite rows are left out");
    }
    progress("sequential write, sync=always and sync=standard");
    let zil = fs.intent_log().cloned();
    let log_bytes = || {
        zil.as_ref().map_or(0, |zil| {
            zil.stats.bytes.load(std::sync::atomic::Ordering::Relaxed)
        })
    };
    fs.set_sync_mode(SyncMode::Always);
    let before = log_bytes();
    let always = sequential(
        &mountpoint.join("seq-always.dat"),
        128 << 10,
        64 << 20,
        false,
    )?;
    let logged_always = log_bytes() - before;
    fs.set_sync_mode(SyncMode::Standard);
    let standard = sequential(
        &mountpoint.join("seq-standard.dat"),
        128 << 10,
        64 << 20,
        false,
    )?;
    rows.push(Comparison {
        what: "sequential write 128 KiB, sync=always (written in place), MiB/s".into(),
        tarn: always,
        baseline_what: "tarn sync=standard".into(),
        baseline: standard,
    });
    progress(&format!(
        "sync=always 128 KiB: {:.2} MiB of log blocks for 64 MiB written in place",
        logged_always as f64 / (1 << 20) as f64
    ));
    // Writes below zil_immediate_write_sz: copied into log blocks (logbias=latency) or
    // written in place (logbias=throughput).
    fs.set_sync_mode(SyncMode::Always);
    let copied = sequential(
        &mountpoint.join("seq-copied.dat"),
        16 << 10,
        16 << 20,
        false,
    )?;
    fs.set_logbias(Logbias::Throughput);
    let in_place = sequential(
        &mountpoint.join("seq-in-place.dat"),
        16 << 10,
        16 << 20,
        false,
    )?;
    fs.set_logbias(Logbias::Latency);
    fs.set_sync_mode(SyncMode::Standard);
    rows.push(Comparison {
        what: "sequential write 16 KiB, sync=always, logbias=throughput (in place), MiB/s".into(),
        tarn: in_place,
        baseline_what: "tarn logbias=latency (copied into the log)".into(),
        baseline: copied,
    });
    if !bench.no_btrfs && btrfs_available() {
        progress("the same on btrfs on a loop device");
        rows.extend(btrfs_rows(bench, dir, &tarn, &tarn_sqlite, always)?);
    } else {
        progress("no btrfs baseline (--no-btrfs, or no mkfs.btrfs or not root)");
    }
    Ok(rows)
}

/// The 4 KiB write + fsync loop, sqlite3 and the O_DSYNC sequential write on btrfs on a loop
/// device (the peer it is compared with), beside tarn's figures of the same run.
fn btrfs_rows(
    bench: &FsyncBench,
    dir: &Path,
    tarn: &LoopFigures,
    tarn_sqlite: &[(&str, f64)],
    tarn_always: f64,
) -> Result<Vec<Comparison>, Failure> {
    let btrfs = "btrfs on a loop device";
    on_btrfs(dir, "fsync", 4 << 30, |mountpoint, _| {
        let mut rows = Vec::new();
        let figures = write_loop(&mountpoint.join("loop.dat"), bench.fsyncs, fsync)?;
        rows.push(Comparison {
            what: format!("4 KiB write+fsync, fsyncs/s ({})", bench.fsyncs),
            tarn: tarn.per_second,
            baseline_what: btrfs.into(),
            baseline: figures.per_second,
        });
        rows.push(Comparison {
            what: "4 KiB write+fsync, p99 ms".into(),
            tarn: tarn.p99_ms,
            baseline_what: btrfs.into(),
            baseline: figures.p99_ms,
        });
        for &(synchronous, tarn) in tarn_sqlite {
            let baseline = sqlite(mountpoint, bench.transactions, synchronous)?;
            rows.push(Comparison {
                what: format!(
                    "sqlite3 WAL synchronous={synchronous}, {} transactions, s",
                    bench.transactions
                ),
                tarn,
                baseline_what: btrfs.into(),
                baseline,
            });
        }
        let dsync = sequential(&mountpoint.join("seq.dat"), 128 << 10, 64 << 20, true)?;
        rows.push(Comparison {
            what: "sequential write 128 KiB, sync=always (btrfs: O_DSYNC), MiB/s".into(),
            tarn: tarn_always,
            baseline_what: btrfs.into(),
            baseline: dsync,
        });
        Ok(rows)
    })
}
