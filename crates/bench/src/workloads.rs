//! `tarn bench workloads`: what people run on a file system every day, bound by
//! per-file cost and round trips to the daemon rather than by bandwidth, on a tarn mount
//! beside its floor (the null FUSE file system, mounted with the same options and cache
//! lifetimes: what any FUSE file system would take), btrfs on a loop device and the host's file
//! system, in the same run. tarn and the floor run over each FUSE transport (`--fuse-transport`:
//! `/dev/fuse`, and FUSE over io_uring when the host offers it), and each transport's figures
//! are also compared with `/dev/fuse`'s; per-opcode request counts, and the process's CPU
//! seconds and voluntary context switches (the mounts are served in this process), follow.
//!
//! A source-like tree (`--files` files, `--tree-size` bytes of text-like content in nested
//! directories, deterministic) is generated once and packed into a tar file on the host file
//! system. On each target, in a fresh directory:
//! - **untar** the tree (`tar -xf`), then make it durable;
//! - **git add -A && git commit** of it, then durable;
//! - **git status** in it (the second of two runs: a warm cache);
//! - **4 KiB random buffered writes** to a `--fio-size` file for `--fio-seconds` (fio, psync),
//!   in IOPS; on tarn twice, into a file of 128 KiB records (the default) and into one of
//!   16 KiB records (`recordsize=16K`, as a database user sets it), each beside the other
//!   targets' one run;
//! - **rm -rf** of the tree, then durable.
//!
//! "Durable" is `sync -f` on btrfs, the host file system and the floor, and on tarn `sync -f` (which has
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
use tarn_fuse::{MountHandle, MountOptions, OpcodeCount, TransportChoice};
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
    /// The FUSE transports to run tarn and the floor over, comma-separated (dev, uring);
    /// default: dev, and uring when the host's switch is on. Naming uring turns the switch on
    /// (and logs it), as `tarn daemon --fuse-transport uring` does.
    #[arg(long = "fuse-transport", value_name = "LIST")]
    fuse_transport: Option<String>,
    /// Runs of every target; each figure is their median.
    #[arg(long, default_value_t = 1)]
    runs: usize,
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
    /// On tarn with recordsize 16K; elsewhere the same run as `random_write_iops`.
    random_write_iops_16k: Option<f64>,
    rm: Option<f64>,
}

/// Sets the recordsize of files created from now on.
type SetRecordsize<'a> = &'a dyn Fn(&str) -> Result<(), Failure>;

/// How the workloads reach a target beyond its directory.
struct Target<'a> {
    /// Makes what was written durable.
    durable: &'a dyn Fn() -> Result<(), Failure>,
    /// tarn only.
    set_recordsize: Option<SetRecordsize<'a>>,
}

impl<'a> Target<'a> {
    fn plain(durable: &'a dyn Fn() -> Result<(), Failure>) -> Target<'a> {
        Target {
            durable,
            set_recordsize: None,
        }
    }
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

/// What one run on a target measured.
#[derive(Clone, Debug, Default)]
struct Measured {
    figures: Figures,
    /// Requests served, by opcode and transport (a FUSE target only).
    counts: Vec<OpcodeCount>,
    /// CPU seconds of this process (which serves the FUSE mounts) during the workloads.
    cpu_seconds: f64,
    /// Voluntary context switches of this process during the workloads.
    switches: u64,
}

/// This process's CPU seconds and voluntary context switches so far.
fn usage() -> (f64, u64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    (
        seconds(usage.ru_utime) + seconds(usage.ru_stime),
        usage.ru_nvcsw as u64,
    )
}

/// The median of each figure over runs (the middle one, or the mean of the middle two).
fn median(runs: &[Measured]) -> Measured {
    let middle = |values: Vec<f64>| -> Option<f64> {
        let mut values = values;
        values.sort_by(f64::total_cmp);
        match values.len() {
            0 => None,
            n if n % 2 == 1 => Some(values[n / 2]),
            n => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
        }
    };
    let of = |figure: Figure| middle(runs.iter().filter_map(|run| figure(&run.figures)).collect());
    Measured {
        figures: Figures {
            untar: of(|f| f.untar),
            git_commit: of(|f| f.git_commit),
            git_status: of(|f| f.git_status),
            random_write_iops: of(|f| f.random_write_iops),
            random_write_iops_16k: of(|f| f.random_write_iops_16k),
            rm: of(|f| f.rm),
        },
        counts: runs
            .last()
            .map(|run| run.counts.clone())
            .unwrap_or_default(),
        cpu_seconds: middle(runs.iter().map(|run| run.cpu_seconds).collect()).unwrap_or(0.0),
        switches: middle(runs.iter().map(|run| run.switches as f64).collect()).unwrap_or(0.0)
            as u64,
    }
}

/// Runs `target` `runs` times; the figures are the medians.
fn measure(
    runs: usize,
    mut target: impl FnMut() -> Result<Measured, Failure>,
) -> Result<Measured, Failure> {
    let measured = (0..runs.max(1))
        .map(|_| target())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(median(&measured))
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

/// Every workload in `root` (a fresh, empty directory of `target`); with the process's CPU
/// time and context switches they took.
fn run_workloads(
    root: &Path,
    tarball: &Path,
    bench: &WorkloadsBench,
    target: &Target,
) -> Result<Measured, Failure> {
    let (cpu_before, switches_before) = usage();
    let figures = workloads(root, tarball, bench, target)?;
    let (cpu_after, switches_after) = usage();
    Ok(Measured {
        figures,
        counts: Vec::new(),
        cpu_seconds: cpu_after - cpu_before,
        switches: switches_after.saturating_sub(switches_before),
    })
}

fn workloads(
    root: &Path,
    tarball: &Path,
    bench: &WorkloadsBench,
    target: &Target,
) -> Result<Figures, Failure> {
    let durable = target.durable;
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
        let run = || {
            random_writes(
                &root.join("randwrite.dat"),
                parse_size(&bench.fio_size)?,
                bench.fio_seconds,
            )
        };
        figures.random_write_iops = Some(run()?);
        figures.random_write_iops_16k = match target.set_recordsize {
            Some(set_recordsize) => {
                // The first run's file was removed: its frees settle first (they are applied
                // over the next txgs), so that they do not slow the second run.
                for _ in 0..3 {
                    durable()?;
                }
                set_recordsize("16K")?;
                let iops = run();
                set_recordsize("128K")?;
                Some(iops?)
            }
            None => figures.random_write_iops,
        };
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

/// The options of both FUSE targets: identical but for the name.
fn mount_options(fsname: &str, transport: TransportChoice) -> MountOptions {
    let mut options = MountOptions::new(fsname);
    options.transport = transport;
    options
}

/// Runs the workloads on a mount, then takes its request counts and unmounts it.
fn on_mount(
    mut handle: MountHandle,
    tarball: &Path,
    bench: &WorkloadsBench,
    target: &Target,
) -> Result<Measured, Failure> {
    let mountpoint = handle.mountpoint().to_path_buf();
    let measured = run_workloads(&mountpoint, tarball, bench, target);
    let counts = handle.request_counts();
    unmount(&mut handle)?;
    measured.map(|measured| Measured { counts, ..measured })
}

/// The floor: the null FUSE file system, mounted as tarn is.
fn on_null(
    dir: &Path,
    bench: &WorkloadsBench,
    tarball: &Path,
    transport: TransportChoice,
) -> Result<Measured, Failure> {
    let mountpoint = dir.join("mnt-workloads-null");
    tarn_fuse::mountpoint::prepare(&mountpoint).map_err(Failure)?;
    let handle = tarn_fuse::null::mount(
        &mountpoint,
        &mount_options("tarn-null:workloads", transport),
    )
    .map_err(|e| Failure(format!("cannot mount at {}: {e}", mountpoint.display())))?;
    let result = on_mount(
        handle,
        tarball,
        bench,
        &Target::plain(&|| sync_fs(&mountpoint)),
    );
    let _ = std::fs::remove_dir(&mountpoint);
    result
}

/// The tarn half: a pool on a preallocated vdev, its root file system mounted in-process.
fn on_tarn(
    dir: &Path,
    bench: &WorkloadsBench,
    tarball: &Path,
    transport: TransportChoice,
) -> Result<Measured, Failure> {
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
        let handle = tarn_fuse::mount(fs, &mountpoint, &mount_options("tarn:workloads", transport))
            .map_err(|e| Failure(format!("cannot mount at {}: {e}", mountpoint.display())))?;
        // The kernel's writeback cache first, then a txg sync.
        let durable = || {
            sync_fs(&mountpoint)?;
            pool.sync().map(|_| ()).map_err(Failure::from)
        };
        let set_recordsize = |size: &str| {
            pool.set_property(POOL_NAME, "recordsize", Some(size))
                .map_err(Failure::from)
        };
        let target = Target {
            durable: &durable,
            set_recordsize: Some(&set_recordsize),
        };
        on_mount(handle, tarball, bench, &target)
    })();
    pool.destroy()?;
    let _ = std::fs::remove_file(&vdev);
    let _ = std::fs::remove_dir(&mountpoint);
    result
}

fn on_host(dir: &Path, bench: &WorkloadsBench, tarball: &Path) -> Result<Measured, Failure> {
    let root = dir.join("workloads-host");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).map_err(|e| io_failure(root.display(), e))?;
    let result = run_workloads(&root, tarball, bench, &Target::plain(&|| sync_fs(&root)));
    let _ = std::fs::remove_dir_all(&root);
    result
}

fn on_btrfs_loop(dir: &Path, bench: &WorkloadsBench, tarball: &Path) -> Result<Measured, Failure> {
    on_btrfs(
        dir,
        "workloads",
        parse_size(&bench.vdev_size)?,
        |mountpoint, _| {
            run_workloads(
                mountpoint,
                tarball,
                bench,
                &Target::plain(&|| sync_fs(mountpoint)),
            )
        },
    )
}

/// The transports `--fuse-transport` names (default: dev, and uring when the host has it on);
/// naming uring turns the host's switch on.
fn transports(bench: &WorkloadsBench) -> Result<Vec<TransportChoice>, Failure> {
    use tarn_fuse::transport;
    let Some(list) = &bench.fuse_transport else {
        let mut all = vec![TransportChoice::Dev];
        if transport::host_uring() == transport::HostUring::On {
            all.push(TransportChoice::Uring);
        }
        return Ok(all);
    };
    let mut chosen = Vec::new();
    for name in list.split(',').map(str::trim) {
        let choice = transport::parse_transport(name).map_err(Failure)?;
        if choice == TransportChoice::Auto {
            return Err(Failure(
                "--fuse-transport lists dev and uring, not auto".to_string(),
            ));
        }
        if choice == TransportChoice::Uring {
            transport::enable_host_uring()
                .map_err(|e| Failure(format!("--fuse-transport uring: {e}")))?;
        }
        if !chosen.contains(&choice) {
            chosen.push(choice);
        }
    }
    Ok(chosen)
}

/// A FUSE target's name in the rows.
fn over(target: &str, transport: TransportChoice) -> String {
    match transport {
        TransportChoice::Uring => format!("{target} over io_uring"),
        _ => format!("{target} over /dev/fuse"),
    }
}

/// The rows: each workload on tarn over each transport beside the floor over the same
/// transport, btrfs and the host; each transport other than /dev/fuse beside /dev/fuse, for
/// tarn and for the floor.
fn comparisons(
    files: u64,
    fuse: &[(TransportChoice, Measured, Measured)],
    btrfs: Option<&Measured>,
    host_name: &str,
    host: &Measured,
) -> Vec<Comparison> {
    let rows_of: [(String, Figure); 6] = [
        (format!("untar {files} files, s"), |f| f.untar),
        ("git add -A && git commit, s".into(), |f| f.git_commit),
        ("git status, s".into(), |f| f.git_status),
        ("4 KiB random buffered writes, IOPS".into(), |f| {
            f.random_write_iops
        }),
        (
            "4 KiB random buffered writes, IOPS, tarn recordsize 16K".into(),
            |f| f.random_write_iops_16k,
        ),
        (format!("rm -rf of the {files} files, s"), |f| f.rm),
    ];
    let dev = fuse
        .iter()
        .find(|(transport, ..)| *transport == TransportChoice::Dev);
    let mut rows = Vec::new();
    for (workload, figure) in rows_of {
        for (transport, tarn, null) in fuse {
            let Some(value) = figure(&tarn.figures) else {
                continue;
            };
            let what = format!("{workload}: {}", over("tarn", *transport));
            let mut baselines = vec![(over("null FUSE floor", *transport), figure(&null.figures))];
            if let Some((_, dev_tarn, _)) = dev.filter(|_| *transport != TransportChoice::Dev) {
                baselines.push((
                    over("tarn", TransportChoice::Dev),
                    figure(&dev_tarn.figures),
                ));
            }
            baselines.extend(
                btrfs.map(|btrfs| ("btrfs on a loop device".to_string(), figure(&btrfs.figures))),
            );
            baselines.push((host_name.to_string(), figure(&host.figures)));
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
            // The floor's own gain from the transport.
            if let (Some((_, _, dev_null)), true) = (dev, *transport != TransportChoice::Dev) {
                if let (Some(floor), Some(dev_floor)) =
                    (figure(&null.figures), figure(&dev_null.figures))
                {
                    rows.push(Comparison {
                        what: format!("{workload}: {}", over("null FUSE floor", *transport)),
                        tarn: floor,
                        baseline_what: over("null FUSE floor", TransportChoice::Dev),
                        baseline: dev_floor,
                    });
                }
            }
        }
    }
    rows
}

/// Per-opcode request counts of each FUSE target, the server's time per request of each
/// opcode, and the process's CPU seconds and voluntary context switches during its workloads
/// (text output only: `-j` prints the comparisons).
fn print_requests(fuse: &[(TransportChoice, Measured, Measured)]) {
    let targets: Vec<(String, &Measured)> = fuse
        .iter()
        .flat_map(|(transport, tarn, null)| {
            [
                (over("tarn", *transport), tarn),
                (over("null FUSE floor", *transport), null),
            ]
        })
        .collect();
    println!();
    println!("requests served (through /dev/fuse + through the ring), all workloads of one run:");
    let mut opcodes: Vec<&str> = targets
        .iter()
        .flat_map(|(_, measured)| measured.counts.iter().map(|count| count.name.as_str()))
        .collect();
    opcodes.sort_unstable();
    opcodes.dedup();
    print!("{:<14}", "opcode");
    for (name, _) in &targets {
        print!(" {name:>30}");
    }
    println!();
    let table = |cell: &dyn Fn(&OpcodeCount) -> String| {
        for opcode in &opcodes {
            print!("{opcode:<14}");
            for (_, measured) in &targets {
                let text = measured
                    .counts
                    .iter()
                    .find(|count| count.name == *opcode)
                    .map_or("-".to_string(), cell);
                print!(" {text:>30}");
            }
            println!();
        }
    };
    table(&|count| format!("{}+{}", count.dev, count.ring));
    println!();
    println!(
        "server time per request in microseconds (decoding, the file system's work and the \
         answer), and requests per second of one thread at that cost:"
    );
    table(&|count| {
        let micros = count.micros_per_request();
        let per_second = if micros > 0.0 { 1e6 / micros } else { 0.0 };
        format!("{micros:.1} us {per_second:.0}/s")
    });
    print!("{:<14}", "total seconds");
    for (_, measured) in &targets {
        let nanos: u64 = measured
            .counts
            .iter()
            .map(|count| count.handler_nanos)
            .sum();
        print!(" {:>30}", format!("{:.2}", nanos as f64 / 1e9));
    }
    println!();
    for (label, value) in [
        ("cpu seconds", &|m: &Measured| {
            format!("{:.2}", m.cpu_seconds) as String
        }),
        ("vol. switches", &|m: &Measured| m.switches.to_string()),
    ] as [(&str, &dyn Fn(&Measured) -> String); 2]
    {
        print!("{label:<14}");
        for (_, measured) in &targets {
            print!(" {:>30}", value(measured));
        }
        println!();
    }
}

pub fn run(bench: WorkloadsBench) -> Result<(), Failure> {
    if bench.files == 0 {
        return Err(Failure("--files must be at least 1".into()));
    }
    if !have("tar") {
        return Err(Failure("bench workloads needs tar on PATH".into()));
    }
    let transports = transports(&bench)?;
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let dir = std::fs::canonicalize(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&dir)?;
    progress(&format!("generating a tree of {} files", bench.files));
    let tarball = make_tarball(&dir, bench.files, parse_size(&bench.tree_size)?)?;
    let mut fuse = Vec::new();
    for transport in transports {
        progress(&over("tarn", transport));
        let tarn = measure(bench.runs, || on_tarn(&dir, &bench, &tarball, transport))?;
        progress(&over("the null FUSE floor", transport));
        let null = measure(bench.runs, || on_null(&dir, &bench, &tarball, transport))?;
        fuse.push((transport, tarn, null));
    }
    progress("host file system");
    let host = measure(bench.runs, || on_host(&dir, &bench, &tarball))?;
    let btrfs = if !bench.no_btrfs && btrfs_available() {
        progress("btrfs on a loop device");
        Some(measure(bench.runs, || {
            on_btrfs_loop(&dir, &bench, &tarball)
        })?)
    } else {
        progress("btrfs skipped (needs mkfs.btrfs and root, or --no-btrfs was given)");
        None
    };
    let _ = std::fs::remove_file(&tarball);

    let host_name = format!("host file system ({})", dir.display());
    let rows = comparisons(bench.files, &fuse, btrfs.as_ref(), &host_name, &host);
    print_comparisons(&rows, ("tarn", "baseline_value"), bench.json, "workloads")?;
    if !bench.json {
        print_requests(&fuse);
    }
    Ok(())
}
