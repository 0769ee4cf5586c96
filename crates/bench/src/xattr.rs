//! `tarn bench xattr`: small extended attributes through a FUSE mount of a new pool, beside
//! the same system calls on the host's file system (ext4 on most hosts) in the same directory
//! and the same run.
//!
//! `--files` files each get `--per-file` xattrs of `--value-size` bytes (`user.bench.N`), one
//! setxattr(2) each, then every one is read back with one getxattr(2) (the size probe is not
//! counted: one call with a large enough buffer, as a program that knows its sizes does). The
//! files are made before the timing starts. With the defaults (1,000 files x 10 xattrs of 32
//! bytes: 10,000 sets and 10,000 gets) every tarn xattr stays in the znode's bonus buffer
//! (`xattr=sa`) and every ext4 one in the inode (ext4 takes at most one block of xattrs per
//! inode, so many more per file would fail there with ENOSPC).
//!
//! Each figure is the median of `--runs` runs. Tarn's cost is FUSE's: every call is a request
//! to the daemon (the kernel caches no xattrs without POSIX ACLs), while ext4 answers in the
//! kernel. It is a benchmark, not a test: it asserts nothing beyond the values read back.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use tarn::tunables::Tunables;
use tarn_protocol::error::Failure;
use tarn_protocol::format::{parse_size, print_table, Cell, ListFormat};

use super::{create_bench_pool, median, mount_pool, ratio_cell, unmount, BenchDirLock};

#[derive(Args)]
pub struct XattrBench {
    /// Directory on the disk to measure (the vdev, the mountpoint and the host files go here).
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// Files that get xattrs.
    #[arg(long, default_value_t = 1000)]
    files: u64,
    /// Xattrs per file.
    #[arg(long, default_value_t = 10)]
    per_file: u64,
    /// Bytes of each value.
    #[arg(long, default_value_t = 32)]
    value_size: usize,
    /// Runs; each figure is the median.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Size of the pool's single vdev (a sparse file).
    #[arg(long, default_value = "1G")]
    vdev_size: String,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
}

/// Operations per second of one side.
struct Rates {
    set: f64,
    get: f64,
}

fn c_string(bytes: &[u8]) -> Result<CString, Failure> {
    CString::new(bytes).map_err(|_| Failure("a path holds a NUL byte".into()))
}

fn name_of(index: u64) -> CString {
    CString::new(format!("user.bench.{index}")).expect("no NUL")
}

/// Make the files in `dir`, then time the sets and the gets.
fn measure(dir: &Path, bench: &XattrBench) -> Result<Rates, Failure> {
    let io = |what: &str, path: &Path, error: std::io::Error| {
        Failure(format!("{what} {}: {error}", path.display()))
    };
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| io("mkdir", dir, e))?;
    let mut paths = Vec::new();
    for file in 0..bench.files {
        let path = dir.join(format!("f{file}"));
        std::fs::write(&path, b"x").map_err(|e| io("create", &path, e))?;
        paths.push(c_string(path.as_os_str().as_bytes())?);
    }
    let names: Vec<CString> = (0..bench.per_file).map(name_of).collect();
    let value: Vec<u8> = (0..bench.value_size).map(|byte| byte as u8).collect();
    let operations = (bench.files * bench.per_file) as f64;

    let started = Instant::now();
    for path in &paths {
        for name in &names {
            // SAFETY: NUL-terminated strings and a buffer of the length given.
            let result = unsafe {
                libc::setxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    0,
                )
            };
            if result != 0 {
                return Err(Failure(format!(
                    "setxattr {path:?} {name:?}: {}",
                    std::io::Error::last_os_error()
                )));
            }
        }
    }
    let set = operations / started.elapsed().as_secs_f64();

    let mut buffer = vec![0u8; bench.value_size + 1];
    let started = Instant::now();
    for path in &paths {
        for name in &names {
            // SAFETY: NUL-terminated strings and a buffer of the length given.
            let got = unsafe {
                libc::getxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    buffer.as_mut_ptr().cast(),
                    buffer.len(),
                )
            };
            if got < 0 || buffer[..got as usize] != value[..] {
                return Err(Failure(format!(
                    "getxattr {path:?} {name:?}: {}",
                    if got < 0 {
                        std::io::Error::last_os_error().to_string()
                    } else {
                        "a different value".into()
                    }
                )));
            }
        }
    }
    let get = operations / started.elapsed().as_secs_f64();
    std::fs::remove_dir_all(dir).map_err(|e| io("remove", dir, e))?;
    Ok(Rates { set, get })
}

/// One run on tarn: a new pool, its root mounted at `dir/mnt-xattr`, measured, destroyed.
fn tarn_run(dir: &Path, bench: &XattrBench) -> Result<Rates, Failure> {
    let vdev = dir.join("bench-xattr-vdev0.img");
    let mountpoint = dir.join("mnt-xattr");
    let tunables = Tunables::from_env().map_err(Failure)?;
    let pool = create_bench_pool(
        "benchxattr",
        &vdev,
        parse_size(&bench.vdev_size)?,
        &tunables,
    )?;
    let result = (|| {
        let mut handle = mount_pool(&pool, &mountpoint)?;
        let rates = measure(&mountpoint.join("files"), bench);
        unmount(&mut handle)?;
        rates
    })();
    pool.destroy()?;
    let _ = std::fs::remove_file(&vdev);
    let _ = std::fs::remove_dir(&mountpoint);
    result
}

fn rate_cell(value: f64) -> Cell {
    Cell {
        exact: format!("{value:.0}"),
        human: format!("{value:.0}"),
        json: serde_json::json!(value.round()),
    }
}

/// The file system type of `dir` as statfs names it (ext4 reports the ext2/3/4 magic).
fn host_fs_type(dir: &Path) -> String {
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
        return "?".into();
    };
    // SAFETY: a NUL-terminated path and a zeroed statfs the call fills.
    let mut figures: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(path.as_ptr(), &mut figures) } != 0 {
        return "?".into();
    }
    match figures.f_type as u32 {
        0xef53 => "ext4".into(),
        0x9123683e => "btrfs".into(),
        0x58465342 => "xfs".into(),
        0x01021994 => "tmpfs".into(),
        0x794c7630 => "overlayfs".into(),
        other => format!("{other:#x}"),
    }
}

pub fn run(bench: XattrBench) -> Result<(), Failure> {
    if bench.runs == 0 || bench.files == 0 || bench.per_file == 0 {
        return Err(Failure(
            "--runs, --files and --per-file must be at least 1".into(),
        ));
    }
    let dir = &bench.dir;
    std::fs::create_dir_all(dir).map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
    let dir =
        &std::fs::canonicalize(dir).map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
    let _lock = BenchDirLock::take(dir)?;
    let host = host_fs_type(dir);
    let mut tarn = Vec::new();
    let mut baseline = Vec::new();
    for run in 1..=bench.runs {
        if !bench.json {
            err!(
                "run {run} of {}: tarn, then {host} in {}",
                bench.runs,
                dir.display()
            );
        }
        tarn.push(tarn_run(dir, &bench)?);
        baseline.push(measure(&dir.join("bench-xattr-host"), &bench)?);
    }
    let operations = bench.files * bench.per_file;
    let rows: Vec<Vec<Cell>> = [("setxattr", true), ("getxattr", false)]
        .into_iter()
        .map(|(call, set)| {
            let pick = |rates: &Vec<Rates>| {
                median(
                    rates
                        .iter()
                        .map(|rate| if set { rate.set } else { rate.get })
                        .collect(),
                )
            };
            let (ours, theirs) = (pick(&tarn), pick(&baseline));
            vec![
                Cell::text(format!(
                    "{call} x{operations} ({} B values)",
                    bench.value_size
                )),
                rate_cell(ours),
                rate_cell(theirs),
                Cell::text(host.clone()),
                ratio_cell(ours / theirs),
            ]
        })
        .collect();
    let format = ListFormat {
        json: bench.json,
        ..ListFormat::default()
    };
    print_table(
        &[
            "workload",
            "tarn_ops_s",
            "host_ops_s",
            "host_fs",
            "tarn/host",
        ],
        &rows,
        &format,
        "tarn bench xattr",
        "workloads",
    )
    .map_err(Failure)
}
