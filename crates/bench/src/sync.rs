//! `tarn bench sync`: what a txg's sync costs, measured from the pool's own txg history
//! (`tarn stat txgs`), on three workloads through a FUSE mount, and what one 4 KiB write plus
//! fsync costs beside btrfs on a loop device on the same disk in the same run.
//!
//! The pool is created on a sparse file in `--dir`, exported and imported again, and its root
//! file system mounted in this process. Two forced syncs follow the import, so that the first
//! txg after import (which writes what import changed) belongs to no workload. Each workload
//! then runs between two settle points (syncfs of the mount, so the kernel's writeback cache
//! reaches tarn, then a forced txg sync); its txgs are the history rows committed between the
//! two, and only the non-empty ones count (a txg that wrote at least one block):
//!
//! - `copy-tree`: `cp -a` of a directory tree (default /usr/share/doc).
//! - `small-files`: N files of 1 to 4 KiB spread over 20 directories.
//! - `overwrite-fsync`: 4 KiB writes at random 4 KiB-aligned offsets of a 64 MiB file (written
//!   and synced beforehand, outside the window), each followed by fsync.
//!
//! Per workload it prints the number of non-empty txgs, sync passes per txg (median and max),
//! block copies written per txg (median) and device write I/Os per txg (median).
//!
//! The fsync table runs the overwrite loop's figures beside the same loop on btrfs (mkfs.btrfs
//! on a loop device over a sparse file in `--dir`, direct I/O to the backing file): device
//! write I/Os and bytes per fsync (tarn: its own write counters, which count every device
//! write including uberblocks and labels; btrfs: the loop device's write requests and sectors
//! from /sys/block/loopN/stat) and fsyncs per second, with the tarn/btrfs ratios. Needs root
//! (mount, losetup), /dev/fuse and btrfs-progs.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tarn::pool::{ImportOptions, Pool};
use tarn::tunables::Tunables;
use tarn::txg::{TxgHistoryRow, TxgState};
use tarn::types::Txg;
use tarn_protocol::error::Failure;
use tarn_protocol::format::{pseudo_random, Cell, ListFormat};

use super::io_failure;
use super::{create_bench_pool, median, mount_pool, ratio_cell, unmount, BenchDirLock};

/// What `tarn bench sync` runs; see the module documentation.
pub struct SyncBench {
    pub dir: PathBuf,
    pub vdev_size: u64,
    pub copy_source: PathBuf,
    pub small_files: u64,
    pub overwrite_file_size: u64,
    pub fsyncs: u64,
    pub btrfs: bool,
    pub json: bool,
}

const POOL_NAME: &str = "benchsync";
const BLOCK: u64 = 4096;

/// Flush the kernel's writeback cache of the mount into tarn.
fn syncfs(mountpoint: &Path) -> Result<(), Failure> {
    let directory = File::open(mountpoint).map_err(|e| io_failure(mountpoint.display(), e))?;
    // SAFETY: syncfs on a descriptor this function owns.
    if unsafe { libc::syncfs(directory.as_raw_fd()) } != 0 {
        return Err(io_failure(
            format!("syncfs {}", mountpoint.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Everything written so far reaches disk; returns the last synced txg.
fn settle(pool: &Pool, mountpoint: &Path) -> Result<Txg, Failure> {
    syncfs(mountpoint)?;
    Ok(pool.sync()?)
}

/// Figures of one workload's non-empty txgs.
struct TxgFigures {
    workload: &'static str,
    txgs: usize,
    passes_median: f64,
    passes_max: u64,
    blocks_written_median: f64,
    write_ios_median: f64,
}

fn figures(workload: &'static str, rows: &[TxgHistoryRow]) -> TxgFigures {
    let column = |value: fn(&TxgHistoryRow) -> u64| -> Vec<f64> {
        rows.iter().map(|row| value(row) as f64).collect()
    };
    let median_or_zero = |values: Vec<f64>| {
        if values.is_empty() {
            0.0
        } else {
            median(values)
        }
    };
    TxgFigures {
        workload,
        txgs: rows.len(),
        passes_median: median_or_zero(column(|row| row.passes as u64)),
        passes_max: rows.iter().map(|row| row.passes as u64).max().unwrap_or(0),
        blocks_written_median: median_or_zero(column(|row| row.blocks_written)),
        write_ios_median: median_or_zero(column(|row| row.write_ios)),
    }
}

/// The committed, non-empty txgs in `(after, through]`.
fn window(pool: &Pool, after: Txg, through: Txg) -> Result<Vec<TxgHistoryRow>, Failure> {
    let history = pool.txg_history();
    if history.first().is_some_and(|row| row.txg > after.0 + 1) {
        return Err(Failure(format!(
            "the txg history no longer holds txg {} (raise TARN_TUNABLE_txg_history)",
            after.0 + 1
        )));
    }
    Ok(history
        .into_iter()
        .filter(|row| row.txg > after.0 && row.txg <= through.0)
        .filter(|row| row.state == TxgState::Committed && row.blocks_written > 0)
        .collect())
}

fn copy_tree(source: &Path, mountpoint: &Path) -> Result<(), Failure> {
    let status = Command::new("cp")
        .arg("-a")
        .arg(source)
        .arg(mountpoint.join("tree"))
        .status()
        .map_err(|e| io_failure("cannot run cp", e))?;
    if !status.success() {
        return Err(Failure(format!(
            "cp -a {} {} failed ({status})",
            source.display(),
            mountpoint.display()
        )));
    }
    Ok(())
}

fn small_files(root: &Path, count: u64) -> Result<(), Failure> {
    let data = pseudo_random(4096, 0x5eed);
    for index in 0..count {
        let directory = root.join(format!("d{:02}", index % 20));
        if index < 20 {
            std::fs::create_dir_all(&directory).map_err(|e| io_failure(directory.display(), e))?;
        }
        let size = 1024 + (index.wrapping_mul(2_654_435_761) % 3073) as usize;
        let path = directory.join(format!("f{index:06}"));
        std::fs::write(&path, &data[..size]).map_err(|e| io_failure(path.display(), e))?;
    }
    Ok(())
}

/// Write `size` bytes of incompressible data to `path` (setup of the overwrite loop).
fn fill_file(path: &Path, size: u64) -> Result<File, Failure> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| io_failure(path.display(), e))?;
    let chunk = pseudo_random(1 << 20, 0xf111);
    let mut offset = 0;
    while offset < size {
        let length = (size - offset).min(chunk.len() as u64) as usize;
        file.write_all_at(&chunk[..length], offset)
            .map_err(|e| io_failure(path.display(), e))?;
        offset += length as u64;
    }
    file.sync_all().map_err(|e| io_failure(path.display(), e))?;
    Ok(file)
}

/// `count` 4 KiB writes at random aligned offsets, each followed by fsync; seconds taken.
fn overwrite_fsync_loop(file: &File, file_size: u64, count: u64) -> Result<f64, Failure> {
    let blocks = (file_size / BLOCK).max(1);
    let data = pseudo_random(BLOCK as usize * 64, 0x0ff5);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let started = Instant::now();
    for index in 0..count {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let offset = (state % blocks) * BLOCK;
        let at = (index as usize % 64) * BLOCK as usize;
        file.write_all_at(&data[at..at + BLOCK as usize], offset)
            .map_err(|e| io_failure("overwrite", e))?;
        file.sync_all().map_err(|e| io_failure("fsync", e))?;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// One file system's fsync figures.
struct FsyncFigures {
    file_system: &'static str,
    fsyncs: u64,
    seconds: f64,
    write_ios: u64,
    write_bytes: u64,
}

impl FsyncFigures {
    fn per_second(&self) -> f64 {
        self.fsyncs as f64 / self.seconds
    }
    fn ios_per_fsync(&self) -> f64 {
        self.write_ios as f64 / self.fsyncs as f64
    }
    fn bytes_per_fsync(&self) -> f64 {
        self.write_bytes as f64 / self.fsyncs as f64
    }
}

/// The tarn half: every workload, then the fsync figures of the overwrite loop.
fn run_tarn(bench: &SyncBench) -> Result<(Vec<TxgFigures>, FsyncFigures), Failure> {
    let vdev = bench.dir.join("bench-sync-vdev0.img");
    let mountpoint = bench.dir.join("mnt-tarn");
    let mut tunables = Tunables::from_env().map_err(Failure)?;
    tunables.txg_history = tunables.txg_history.max(1_000_000);
    create_bench_pool(POOL_NAME, &vdev, bench.vdev_size, &tunables)?.export()?;
    let (pool, _) = Pool::import(
        POOL_NAME,
        ImportOptions::new(vec![bench.dir.clone()], tunables),
    )?;
    let result = (|| {
        let mut handle = mount_pool(&pool, &mountpoint)?;
        let result = (|| {
            // The first txg after import belongs to no workload.
            pool.sync()?;
            let mut start = settle(&pool, &mountpoint)?;
            let mut txg_figures = Vec::new();

            err!("copy-tree: cp -a {}", bench.copy_source.display());
            copy_tree(&bench.copy_source, &mountpoint)?;
            let end = settle(&pool, &mountpoint)?;
            txg_figures.push(figures("copy-tree", &window(&pool, start, end)?));

            err!("small-files: {} files of 1-4 KiB", bench.small_files);
            start = end;
            small_files(&mountpoint.join("small"), bench.small_files)?;
            let end = settle(&pool, &mountpoint)?;
            txg_figures.push(figures("small-files", &window(&pool, start, end)?));

            err!(
                "overwrite-fsync: {} x (4 KiB write + fsync) in a {} file",
                bench.fsyncs,
                tarn_protocol::format::human_bytes(bench.overwrite_file_size)
            );
            let file = fill_file(&mountpoint.join("overwrite.dat"), bench.overwrite_file_size)?;
            start = settle(&pool, &mountpoint)?;
            let before = pool.write_counters();
            let seconds = overwrite_fsync_loop(&file, bench.overwrite_file_size, bench.fsyncs)?;
            let written = pool.write_counters().since(&before);
            drop(file);
            let end = settle(&pool, &mountpoint)?;
            txg_figures.push(figures("overwrite-fsync", &window(&pool, start, end)?));
            Ok::<_, Failure>((
                txg_figures,
                FsyncFigures {
                    file_system: "tarn",
                    fsyncs: bench.fsyncs,
                    seconds,
                    write_ios: written.ios,
                    write_bytes: written.bytes,
                },
            ))
        })();
        unmount(&mut handle)?;
        result
    })();
    pool.destroy()?;
    let _ = std::fs::remove_file(&vdev);
    let _ = std::fs::remove_dir(&mountpoint);
    result
}

pub(super) fn run_command(program: &str, args: &[&str]) -> Result<String, Failure> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| io_failure(format!("cannot run {program}"), e))?;
    if !output.status.success() {
        return Err(Failure(format!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Write requests completed and sectors written by a block device (/sys/block/NAME/stat).
fn device_writes(device: &str) -> Result<(u64, u64), Failure> {
    let name = Path::new(device)
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or(device);
    let path = format!("/sys/block/{name}/stat");
    let text = std::fs::read_to_string(&path).map_err(|e| io_failure(&path, e))?;
    let fields: Vec<u64> = text
        .split_whitespace()
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    if fields.len() < 7 {
        return Err(Failure(format!("{path}: unexpected contents {text:?}")));
    }
    Ok((fields[4], fields[6]))
}

/// The btrfs half: the same overwrite loop on btrfs on a loop device over a sparse file.
fn run_btrfs(bench: &SyncBench) -> Result<FsyncFigures, Failure> {
    let image = bench.dir.join("bench-sync-btrfs.img");
    let mountpoint = bench.dir.join("mnt-btrfs");
    let _ = std::fs::remove_file(&image);
    let file = File::create(&image).map_err(|e| io_failure(image.display(), e))?;
    file.set_len(bench.vdev_size)
        .map_err(|e| io_failure(image.display(), e))?;
    drop(file);
    let image_text = image.display().to_string();
    let device = run_command(
        "losetup",
        &["--find", "--show", "--direct-io=on", &image_text],
    )?;
    let result = (|| {
        run_command("mkfs.btrfs", &["-q", "-f", &device])?;
        std::fs::create_dir_all(&mountpoint).map_err(|e| io_failure(mountpoint.display(), e))?;
        let mount_text = mountpoint.display().to_string();
        run_command("mount", &["-t", "btrfs", &device, &mount_text])?;
        let result = (|| {
            let file = fill_file(&mountpoint.join("overwrite.dat"), bench.overwrite_file_size)?;
            syncfs(&mountpoint)?;
            let (ios_before, sectors_before) = device_writes(&device)?;
            let seconds = overwrite_fsync_loop(&file, bench.overwrite_file_size, bench.fsyncs)?;
            let (ios_after, sectors_after) = device_writes(&device)?;
            Ok::<_, Failure>(FsyncFigures {
                file_system: "btrfs",
                fsyncs: bench.fsyncs,
                seconds,
                write_ios: ios_after - ios_before,
                write_bytes: (sectors_after - sectors_before) * 512,
            })
        })();
        run_command("umount", &[&mount_text])?;
        result
    })();
    let _ = run_command("losetup", &["-d", &device]);
    let _ = std::fs::remove_file(&image);
    let _ = std::fs::remove_dir(&mountpoint);
    result
}

fn number_cell(value: f64, decimals: usize) -> Cell {
    let text = format!("{value:.decimals$}");
    Cell {
        exact: text.clone(),
        human: text,
        json: serde_json::json!((value * 1000.0).round() / 1000.0),
    }
}

const TXG_COLUMNS: &[&str] = &[
    "workload",
    "txgs",
    "passes_median",
    "passes_max",
    "blocks_written_median",
    "write_ios_median",
];

const FSYNC_COLUMNS: &[&str] = &[
    "fs",
    "fsyncs",
    "fsyncs_s",
    "write_ios_per_fsync",
    "write_bytes_per_fsync",
];

fn txg_rows(figures: &[TxgFigures]) -> Vec<Vec<Cell>> {
    figures
        .iter()
        .map(|figure| {
            vec![
                Cell::text(figure.workload),
                number_cell(figure.txgs as f64, 0),
                number_cell(figure.passes_median, 1),
                number_cell(figure.passes_max as f64, 0),
                number_cell(figure.blocks_written_median, 1),
                number_cell(figure.write_ios_median, 1),
            ]
        })
        .collect()
}

fn fsync_rows(tarn: &FsyncFigures, btrfs: Option<&FsyncFigures>) -> Vec<Vec<Cell>> {
    let row = |figures: &FsyncFigures| {
        vec![
            Cell::text(figures.file_system),
            number_cell(figures.fsyncs as f64, 0),
            number_cell(figures.per_second(), 1),
            number_cell(figures.ios_per_fsync(), 1),
            number_cell(figures.bytes_per_fsync(), 0),
        ]
    };
    let mut rows = vec![row(tarn)];
    if let Some(btrfs) = btrfs {
        rows.push(row(btrfs));
        rows.push(vec![
            Cell::text("tarn/btrfs"),
            Cell::text("-"),
            ratio_cell(tarn.per_second() / btrfs.per_second()),
            ratio_cell(tarn.ios_per_fsync() / btrfs.ios_per_fsync()),
            ratio_cell(tarn.bytes_per_fsync() / btrfs.bytes_per_fsync()),
        ]);
    }
    rows
}

/// Rows as JSON objects keyed by column.
fn json_rows(columns: &[&str], rows: &[Vec<Cell>]) -> serde_json::Value {
    serde_json::Value::Array(
        rows.iter()
            .map(|row| {
                serde_json::Value::Object(
                    columns
                        .iter()
                        .zip(row)
                        .map(|(column, cell)| (column.to_string(), cell.json.clone()))
                        .collect(),
                )
            })
            .collect(),
    )
}

pub fn run(bench: SyncBench) -> Result<(), Failure> {
    if bench.fsyncs == 0 {
        return Err(Failure("--fsyncs must be at least 1".into()));
    }
    if bench.overwrite_file_size < BLOCK {
        return Err(Failure("--file-size must be at least 4K".into()));
    }
    if !bench.copy_source.is_dir() {
        return Err(Failure(format!(
            "--copy-source {} is not a directory",
            bench.copy_source.display()
        )));
    }
    std::fs::create_dir_all(&bench.dir).map_err(|e| io_failure(bench.dir.display(), e))?;
    let dir = std::fs::canonicalize(&bench.dir).map_err(|e| io_failure(bench.dir.display(), e))?;
    let bench = SyncBench { dir, ..bench };
    let _lock = BenchDirLock::take(&bench.dir)?;
    let (txg_figures, tarn) = run_tarn(&bench)?;
    let btrfs = if bench.btrfs {
        err!(
            "btrfs: the same fsync loop on a loop device in {}",
            bench.dir.display()
        );
        Some(run_btrfs(&bench)?)
    } else {
        None
    };
    let txgs = txg_rows(&txg_figures);
    let fsync = fsync_rows(&tarn, btrfs.as_ref());
    if bench.json {
        let document = serde_json::json!({
            "txgs": json_rows(TXG_COLUMNS, &txgs),
            "fsync": json_rows(FSYNC_COLUMNS, &fsync),
        });
        tarn_protocol::json::Document::of("tarn bench sync", document).print();
        return Ok(());
    }
    let format = ListFormat::default();
    out!("non-empty txgs per workload (first txg after import excluded):");
    tarn_protocol::format::print_table(TXG_COLUMNS, &txgs, &format, "tarn bench sync", "txgs")
        .map_err(Failure)?;
    out!();
    out!("one 4 KiB write + fsync through the mount:");
    tarn_protocol::format::print_table(FSYNC_COLUMNS, &fsync, &format, "tarn bench sync", "fsync")
        .map_err(Failure)
}
