//! `tarn bench workloads`: what people run on a file system every day, bound by
//! per-file cost and round trips to the daemon rather than by bandwidth, on a tarn mount
//! beside btrfs on a loop device and the host's file system, in the same run.
//!
//! A source-like tree (`--files` files, `--tree-size` bytes of text-like content in nested
//! directories, deterministic) is generated once and packed into a tar file on the host file
//! system. On each target, in a fresh directory:
//! - **untar** the tree (`tar -xf`), then make it durable;
//! - **git add -A && git commit** of it, then durable;
//! - **git status** in it (the second of two runs: a warm cache);
//! - **4 KiB random buffered writes** to a `--fio-size` file for `--fio-seconds` (fio, psync),
//!   in IOPS;
//! - **rm -rf** of the tree, then durable.
//!
//! "Durable" is `sync -f` on btrfs and the host file system, and on tarn `sync -f` (which has
//! the kernel write back the pages its writeback cache holds) then a txg sync of the pool
//! (FUSE never sees sync(2) itself; a tarn figure includes both, as the others include `sync`).
//! The tarn vdev and the btrfs image are preallocated (`fallocate`), not sparse. Every figure
//! is printed beside each baseline with the ratio (seconds: lower is better; IOPS: higher).
//! Needs root, /dev/fuse, tar, git and fio (a missing tool leaves its rows out); asserts
//! nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use tarn::pool::{CreateOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;
use tarn_fuse::MountOptions;
use tarn_protocol::error::Failure;
use tarn_protocol::format::parse_size;

use super::sync::run_command;
use super::{btrfs_available, io_failure, on_btrfs, print_comparisons, unmount, BenchDirLock};
use super::{receive::text, Comparison};

const POOL_NAME: &str = "benchwork";

#[derive(Args, Debug)]
pub struct WorkloadsBench {
    /// Directory on the disk to measure: the tar file, the vdev, the btrfs image and the host
    /// file system's runs.
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// Files in the generated tree.
    #[arg(long, default_value_t = 14_000)]
    files: u64,
    /// Bytes of file content in the tree.
    #[arg(long, default_value = "250M")]
    tree_size: String,
    /// Size of the file the random-write run writes.
    #[arg(long, default_value = "1G")]
    fio_size: String,
    /// Seconds of the random-write run.
    #[arg(long, default_value_t = 20)]
    fio_seconds: u64,
    /// Size of the tarn vdev and of the btrfs image (both preallocated).
    #[arg(long, default_value = "4G")]
    vdev_size: String,
    /// Skip btrfs even if mkfs.btrfs is available.
    #[arg(long)]
    no_btrfs: bool,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
}

fn progress(message: &str) {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!("bench workloads: {message}");
    }
}

/// Which figure of a target a row shows.
type Figure = fn(&Figures) -> Option<f64>;

/// The figures of one target; `None` where a tool is missing.
#[derive(Clone, Copy, Debug, Default)]
struct Figures {
    untar: Option<f64>,
    git_commit: Option<f64>,
    git_status: Option<f64>,
    random_write_iops: Option<f64>,
    rm: Option<f64>,
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

/// Generate the tree under `dir/workloads-src` and pack it into `dir/workloads-src.tar`.
fn make_tarball(dir: &Path, files: u64, tree_size: u64) -> Result<PathBuf, Failure> {
    let tarball = dir.join("workloads-src.tar");
    let staging = dir.join("workloads-src");
    let _ = std::fs::remove_dir_all(&staging);
    // Sizes spread over two orders of magnitude, as in a source tree: file i gets a weight
    // from 1 to 64 (mostly small), scaled so that all add up to tree_size.
    let weight = |index: u64| 1u64 << ((index.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61) * 2 / 3);
    let total_weight: u64 = (0..files).map(weight).sum();
    for index in 0..files {
        let path = staging
            .join(format!("d{:03}", index / 400))
            .join(format!("s{:02}", (index / 40) % 10))
            .join(format!("file{index:06}.rs"));
        let length = (tree_size as u128 * weight(index) as u128 / total_weight.max(1) as u128)
            .max(1) as usize;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_failure(parent.display(), e))?;
        }
        std::fs::write(&path, text(length, index)).map_err(|e| io_failure(path.display(), e))?;
    }
    run_command(
        "tar",
        &[
            "-cf",
            &tarball.display().to_string(),
            "-C",
            &dir.display().to_string(),
            "workloads-src",
        ],
    )?;
    let _ = std::fs::remove_dir_all(&staging);
    Ok(tarball)
}

/// Seconds `work` took.
fn timed(work: impl FnOnce() -> Result<(), Failure>) -> Result<f64, Failure> {
    let started = Instant::now();
    work()?;
    Ok(started.elapsed().as_secs_f64())
}

fn git(tree: &Path, args: &[&str]) -> Result<(), Failure> {
    let output = Command::new("git")
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@tarn",
            "-c",
            "gc.auto=0",
        ])
        .args(args)
        .current_dir(tree)
        .output()
        .map_err(|e| io_failure("cannot run git", e))?;
    if !output.status.success() {
        return Err(Failure(format!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

/// IOPS of 4 KiB random buffered writes to `file` (fio, psync).
fn random_writes(file: &Path, size: u64, seconds: u64) -> Result<f64, Failure> {
    let output = run_command(
        "fio",
        &[
            "--name=randwrite",
            &format!("--filename={}", file.display()),
            "--rw=randwrite",
            "--bs=4k",
            &format!("--size={size}"),
            &format!("--runtime={seconds}"),
            "--time_based",
            "--ioengine=psync",
            "--output-format=json",
        ],
    )?;
    let parsed: serde_json::Value = serde_json::from_str(&output)
        .map_err(|e| Failure(format!("unreadable fio output: {e}")))?;
    let _ = std::fs::remove_file(file);
    parsed["jobs"][0]["write"]["iops"]
        .as_f64()
        .ok_or_else(|| Failure("fio reported no write IOPS".into()))
}

/// Every workload in `root` (a fresh, empty directory of the target), `durable` making what
/// was written durable.
fn run_workloads(
    root: &Path,
    tarball: &Path,
    bench: &WorkloadsBench,
    durable: &dyn Fn() -> Result<(), Failure>,
) -> Result<Figures, Failure> {
    let mut figures = Figures::default();
    let tree = root.join("workloads-src");
    let root_text = root.display().to_string();
    let tarball_text = tarball.display().to_string();
    figures.untar = Some(timed(|| {
        run_command("tar", &["-xf", &tarball_text, "-C", &root_text])?;
        durable()
    })?);
    if have("git") {
        git(&tree, &["init", "-q"])?;
        figures.git_commit = Some(timed(|| {
            git(&tree, &["add", "-A"])?;
            git(&tree, &["commit", "-q", "-m", "tree"])?;
            durable()
        })?);
        git(&tree, &["status", "--porcelain"])?;
        figures.git_status = Some(timed(|| git(&tree, &["status", "--porcelain"]))?);
    }
    if have("fio") {
        figures.random_write_iops = Some(random_writes(
            &root.join("randwrite.dat"),
            parse_size(&bench.fio_size)?,
            bench.fio_seconds,
        )?);
    }
    figures.rm = Some(timed(|| {
        std::fs::remove_dir_all(&tree).map_err(|e| io_failure(tree.display(), e))?;
        durable()
    })?);
    Ok(figures)
}

fn sync_fs(path: &Path) -> Result<(), Failure> {
    run_command("sync", &["-f", &path.display().to_string()]).map(|_| ())
}

fn preallocate(path: &Path, size: u64) -> Result<(), Failure> {
    let _ = std::fs::remove_file(path);
    run_command(
        "fallocate",
        &["-l", &size.to_string(), &path.display().to_string()],
    )
    .map(|_| ())
}

/// The tarn half: a pool on a preallocated vdev, its root file system mounted in-process.
fn on_tarn(dir: &Path, bench: &WorkloadsBench, tarball: &Path) -> Result<Figures, Failure> {
    let vdev = dir.join("bench-workloads-vdev0.img");
    let mountpoint = dir.join("mnt-workloads-tarn");
    preallocate(&vdev, parse_size(&bench.vdev_size)?)?;
    let pool = Pool::create(CreateOptions {
        name: POOL_NAME.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Leaf(vdev.clone())],
        create_size: None,
        force: true,
        tunables: Tunables::from_env().map_err(Failure)?,
        wrap_device: None,
        disabled_features: Vec::new(),
    })?;
    let result = (|| {
        tarn_fuse::mountpoint::prepare(&mountpoint).map_err(Failure)?;
        let fs = Arc::new(pool.file_system()?);
        let mut handle = tarn_fuse::mount(fs, &mountpoint, &MountOptions::new("tarn:workloads"))
            .map_err(|e| Failure(format!("cannot mount at {}: {e}", mountpoint.display())))?;
        // The kernel's writeback cache first, then a txg sync.
        let durable = || {
            sync_fs(&mountpoint)?;
            pool.sync().map(|_| ()).map_err(Failure::from)
        };
        let figures = run_workloads(&mountpoint, tarball, bench, &durable);
        unmount(&mut handle)?;
        figures
    })();
    pool.destroy()?;
    let _ = std::fs::remove_file(&vdev);
    let _ = std::fs::remove_dir(&mountpoint);
    result
}

fn on_host(dir: &Path, bench: &WorkloadsBench, tarball: &Path) -> Result<Figures, Failure> {
    let root = dir.join("workloads-host");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).map_err(|e| io_failure(root.display(), e))?;
    let result = run_workloads(&root, tarball, bench, &|| sync_fs(&root));
    let _ = std::fs::remove_dir_all(&root);
    result
}

fn on_btrfs_loop(dir: &Path, bench: &WorkloadsBench, tarball: &Path) -> Result<Figures, Failure> {
    on_btrfs(
        dir,
        "workloads",
        parse_size(&bench.vdev_size)?,
        |mountpoint, _| run_workloads(mountpoint, tarball, bench, &|| sync_fs(mountpoint)),
    )
}

pub fn run(bench: WorkloadsBench) -> Result<(), Failure> {
    if bench.files == 0 {
        return Err(Failure("--files must be at least 1".into()));
    }
    if !have("tar") {
        return Err(Failure("bench workloads needs tar on PATH".into()));
    }
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let dir = std::fs::canonicalize(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&dir)?;
    progress(&format!("generating a tree of {} files", bench.files));
    let tarball = make_tarball(&dir, bench.files, parse_size(&bench.tree_size)?)?;
    progress("tarn");
    let tarn = on_tarn(&dir, &bench, &tarball)?;
    progress("host file system");
    let host = on_host(&dir, &bench, &tarball)?;
    let btrfs = if !bench.no_btrfs && btrfs_available() {
        progress("btrfs on a loop device");
        Some(on_btrfs_loop(&dir, &bench, &tarball)?)
    } else {
        progress("btrfs skipped (needs mkfs.btrfs and root, or --no-btrfs was given)");
        None
    };
    let _ = std::fs::remove_file(&tarball);

    let files = bench.files;
    let rows_of: [(String, Figure); 5] = [
        (format!("untar {files} files, s"), |f| f.untar),
        ("git add -A && git commit, s".into(), |f| f.git_commit),
        ("git status, s".into(), |f| f.git_status),
        ("4 KiB random buffered writes, IOPS".into(), |f| {
            f.random_write_iops
        }),
        (format!("rm -rf of the {files} files, s"), |f| f.rm),
    ];
    let host_name = format!("host file system ({})", dir.display());
    let mut rows = Vec::new();
    for (what, figure) in rows_of {
        let Some(value) = figure(&tarn) else {
            continue;
        };
        let baselines = btrfs
            .iter()
            .map(|btrfs| ("btrfs on a loop device".to_string(), figure(btrfs)))
            .chain([(host_name.clone(), figure(&host))]);
        for (baseline_what, baseline) in baselines {
            if let Some(baseline) = baseline {
                rows.push(Comparison {
                    what: what.clone(),
                    tarn: value,
                    baseline_what,
                    baseline,
                });
            }
        }
    }
    print_comparisons(&rows, ("tarn", "baseline_value"), bench.json, "workloads")
}
