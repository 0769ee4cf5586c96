//! `tarn bench files`: per-file work in the engine, in-process (no FUSE), on a pool on a sparse
//! file: what one create, lookup-and-stat, small random overwrite and unlink cost once the
//! kernel and the daemon's request handling are out of the picture.
//!
//! Each operation runs twice in the same invocation: on a pool with the dnode cache (the
//! default) and on one with `dnode_cache_entries=0` (every dnode decoded from its block on
//! each use, as before the cache), and once on the host's file system in the same directory
//! through ordinary system calls (its dentry and inode caches hot, as they are in real use).
//! Every phase ends with its changes durable (`pool.sync()`, `sync(2)` on the host).
//!
//! It is a benchmark, not a test: it asserts nothing, and prints each figure (operations per
//! second) with its baseline and the ratio.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use tarn::fs::FileSystem;
use tarn::pool::Pool;
use tarn::tunables::Tunables;
use tarn_protocol::error::Failure;
use tarn_protocol::format::parse_size;

use super::{create_bench_pool, print_comparisons, BenchDirLock, Comparison};

#[derive(Args)]
pub struct FilesBench {
    /// Directory for the pool's vdev (a sparse file) and the host file system's run.
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// Files created, looked up and removed.
    #[arg(long, default_value_t = 20_000)]
    files: u64,
    /// 4 KiB overwrites at random offsets of the big file.
    #[arg(long, default_value_t = 20_000)]
    writes: u64,
    /// Size of the file the random overwrites land in (128 KiB records).
    #[arg(long, default_value = "256M")]
    file_size: String,
    /// Size of the vdev.
    #[arg(long, default_value = "4G")]
    vdev_size: String,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
}

/// Operations per second of each phase.
#[derive(Clone, Copy, Default)]
struct Rates {
    create: f64,
    stat: f64,
    overwrite: f64,
    unlink: f64,
}

/// Progress on a terminal, nothing in scripts.
fn progress(message: &str) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        eprintln!("bench files: {message}");
    }
}

fn fs_failure(error: tarn::fs::FsError) -> Failure {
    Failure(error.to_string())
}

fn io_failure(path: &Path, error: std::io::Error) -> Failure {
    Failure(format!("{}: {error}", path.display()))
}

/// Operations per second of `count` operations done by `work`.
fn rate(count: u64, work: impl FnOnce() -> Result<(), Failure>) -> Result<f64, Failure> {
    let started = Instant::now();
    work()?;
    Ok(count as f64 / started.elapsed().as_secs_f64().max(1e-9))
}

/// The random 4 KiB-aligned offsets every run overwrites, the same for each (xorshift).
fn offsets(count: u64, file_size: u64) -> Vec<u64> {
    let blocks = (file_size / 4096).max(1);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % blocks) * 4096
        })
        .collect()
}

pub fn run(bench: FilesBench) -> Result<(), Failure> {
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&bench.dir)?;
    let file_size = parse_size(&bench.file_size)?;
    let tunables = Tunables::from_env().map_err(Failure)?;
    let uncached = Tunables {
        dnode_cache_entries: 0,
        ..tunables.clone()
    };
    progress("tarn, dnode cache on");
    let cached = tarn_rates(&bench, file_size, &tunables)?;
    progress("tarn, dnode cache off");
    let without_cache = tarn_rates(&bench, file_size, &uncached)?;
    progress("host file system");
    let host = host_rates(&bench, file_size)?;

    let mut rows = Vec::new();
    type Figure = fn(&Rates) -> f64;
    let named: [(&str, Figure); 4] = [
        ("create + 100-byte write, files/s", |r| r.create),
        ("lookup + stat, files/s", |r| r.stat),
        ("4 KiB random overwrite, IOPS", |r| r.overwrite),
        ("unlink, files/s", |r| r.unlink),
    ];
    for (what, figure) in named {
        rows.push(Comparison {
            what: what.into(),
            tarn: figure(&cached),
            baseline_what: "tarn, dnode cache off".into(),
            baseline: figure(&without_cache),
        });
        rows.push(Comparison {
            what: what.into(),
            tarn: figure(&cached),
            baseline_what: format!("host file system ({})", bench.dir.display()),
            baseline: figure(&host),
        });
    }
    print_comparisons(&rows, ("tarn", "baseline_value"), bench.json, "files")
}

fn tarn_rates(bench: &FilesBench, file_size: u64, tunables: &Tunables) -> Result<Rates, Failure> {
    let vdev = bench.dir.join("bench-files-vdev0.img");
    let pool = create_bench_pool("benchfiles", &vdev, parse_size(&bench.vdev_size)?, tunables)?;
    let result = (|| {
        pool.create_dataset("benchfiles/fs", &[], false)?;
        let fs = pool.open_file_system("benchfiles/fs")?;
        measure_tarn(&pool, &fs, bench, file_size)
    })();
    pool.destroy()?;
    let _ = std::fs::remove_file(&vdev);
    result
}

fn measure_tarn(
    pool: &Pool,
    fs: &FileSystem,
    bench: &FilesBench,
    file_size: u64,
) -> Result<Rates, Failure> {
    let root = fs.root();
    let dir = fs
        .mkdir(root, b"files", 0o755, 0, 0)
        .map_err(fs_failure)?
        .ino;
    let content = [b'x'; 100];
    let create = rate(bench.files, || {
        for index in 0..bench.files {
            let ino = fs
                .create(dir, format!("f{index}").as_bytes(), 0o644, 0, 0)
                .map_err(fs_failure)?
                .ino;
            fs.write(ino, 0, &content).map_err(fs_failure)?;
        }
        pool.sync()?;
        Ok(())
    })?;
    let stat = rate(bench.files, || {
        for index in 0..bench.files {
            let attr = fs
                .lookup(dir, format!("f{index}").as_bytes())
                .map_err(fs_failure)?;
            fs.getattr(attr.ino).map_err(fs_failure)?;
        }
        Ok(())
    })?;

    let big = fs
        .create(root, b"big", 0o644, 0, 0)
        .map_err(fs_failure)?
        .ino;
    let chunk = tarn_protocol::format::pseudo_random(1 << 20, 0xf11e5);
    let mut written = 0;
    while written < file_size {
        let length = (file_size - written).min(chunk.len() as u64) as usize;
        fs.write(big, written, &chunk[..length])
            .map_err(fs_failure)?;
        written += length as u64;
    }
    pool.sync()?;
    let overwrite = rate(bench.writes, || {
        for (index, offset) in offsets(bench.writes, file_size).into_iter().enumerate() {
            let start = (index * 4096) % (chunk.len() - 4096);
            fs.write(big, offset, &chunk[start..start + 4096])
                .map_err(fs_failure)?;
        }
        pool.sync()?;
        Ok(())
    })?;

    let unlink = rate(bench.files, || {
        for index in 0..bench.files {
            fs.unlink(dir, format!("f{index}").as_bytes())
                .map_err(fs_failure)?;
        }
        pool.sync()?;
        Ok(())
    })?;
    Ok(Rates {
        create,
        stat,
        overwrite,
        unlink,
    })
}

fn host_rates(bench: &FilesBench, file_size: u64) -> Result<Rates, Failure> {
    let dir = bench.dir.join("bench-files-host");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| io_failure(&dir, e))?;
    let result = measure_host(&dir, bench, file_size);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn host_sync() -> Result<(), Failure> {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    Ok(())
}

fn measure_host(dir: &Path, bench: &FilesBench, file_size: u64) -> Result<Rates, Failure> {
    let content = [b'x'; 100];
    let name = |index: u64| dir.join(format!("f{index}"));
    let create = rate(bench.files, || {
        for index in 0..bench.files {
            let path = name(index);
            let mut file = std::fs::File::create(&path).map_err(|e| io_failure(&path, e))?;
            file.write_all(&content).map_err(|e| io_failure(&path, e))?;
        }
        host_sync()
    })?;
    let stat = rate(bench.files, || {
        for index in 0..bench.files {
            let path = name(index);
            std::fs::metadata(&path).map_err(|e| io_failure(&path, e))?;
        }
        Ok(())
    })?;

    let big_path = dir.join("big");
    let big = std::fs::File::create(&big_path).map_err(|e| io_failure(&big_path, e))?;
    let chunk = tarn_protocol::format::pseudo_random(1 << 20, 0xf11e5);
    let mut written = 0;
    while written < file_size {
        let length = (file_size - written).min(chunk.len() as u64) as usize;
        big.write_all_at(&chunk[..length], written)
            .map_err(|e| io_failure(&big_path, e))?;
        written += length as u64;
    }
    big.sync_all().map_err(|e| io_failure(&big_path, e))?;
    let overwrite = rate(bench.writes, || {
        for (index, offset) in offsets(bench.writes, file_size).into_iter().enumerate() {
            let start = (index * 4096) % (chunk.len() - 4096);
            big.write_all_at(&chunk[start..start + 4096], offset)
                .map_err(|e| io_failure(&big_path, e))?;
        }
        big.sync_all().map_err(|e| io_failure(&big_path, e))
    })?;

    let unlink = rate(bench.files, || {
        for index in 0..bench.files {
            let path = name(index);
            std::fs::remove_file(&path).map_err(|e| io_failure(&path, e))?;
        }
        host_sync()
    })?;
    Ok(Rates {
        create,
        stat,
        overwrite,
        unlink,
    })
}
