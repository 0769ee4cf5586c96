//! `tarn bench raidz-expand`: how long a RAID-Z expansion takes and what it costs a writer.
//!
//! A raidz1 pool on 4 sparse files under `--dir` (recordsize 1M, compression off) is filled
//! with `--size` bytes of incompressible data, exported and imported (the ARC empty, the page
//! cache dropped), and a fifth file is attached (`pool attach POOL raidz1-0 FILE`); the
//! expansion is timed to its end (every sector copied, the vdev widened), its rate being the
//! bytes it copied over that time. The same is done again on a fresh pool with a writer
//! writing 1 MiB records to a new file for as long as the copy runs.
//!
//! Each row prints tarn's figure beside its baseline from the same run:
//! - the copy's rate, alone, against the pool's own sequential write rate (its fill);
//! - the copy's rate beside the writer, against the copy alone;
//! - the writer's rate during the copy (1 MiB records rewriting a 256 MiB file, a sync every
//!   64 MiB), against the same writer on the same pool before the
//!   attach.
//!
//! It is a benchmark, not a test: it asserts nothing. Needs root to drop the page cache.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use clap::Args;
use tarn::pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;
use tarn_protocol::error::Failure;
use tarn_protocol::format::{parse_size, pseudo_random};

use super::{
    drop_caches, io_failure, mib_per_second, print_comparisons, progress, write_sequential,
    BenchDirLock, Comparison,
};

#[derive(Args)]
pub struct RaidzExpandBench {
    /// Directory on the disk to measure: the pools' files go here (sparse files).
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// Bytes of file data the pool holds when the expansion starts; a multiple of 1M.
    #[arg(long, default_value = "2G")]
    size: String,
    /// Bytes of each vdev file (4 at first, then 5); at least half of `--size`.
    #[arg(long, default_value = "2G")]
    vdev_size: String,
    /// Print the figures as JSON.
    #[arg(short = 'j', long)]
    json: bool,
}

const POOL: &str = "tarn-bench-expand";
const RECORD: u64 = 1 << 20;
/// The bytes the writer rewrites over and over.
const WRITER_SPAN: u64 = 256 << 20;
/// The writer syncs after each this many bytes.
const SYNC_EVERY: u64 = 64 << 20;
/// How long the writer runs alone for its baseline.
const WRITER_ALONE_SECONDS: u64 = 10;
const WIDTH: usize = 4;

/// What one expansion measured.
struct Expansion {
    seconds: f64,
    copied: u64,
    /// MiB/s of the writer while the copy ran (with a writer).
    writer: Option<f64>,
}

struct Run {
    dir: PathBuf,
    pool: Option<Pool>,
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            let _ = pool.destroy();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sparse_file(path: &Path, size: u64) -> Result<(), Failure> {
    std::fs::File::create(path)
        .and_then(|file| file.set_len(size))
        .map_err(|e| io_failure(path.display(), e))
}

/// A raidz1 on 4 files holding `size` bytes; returns the run and the fill's MiB/s.
fn filled_pool(work: &Path, size: u64, vdev_size: u64) -> Result<(Run, f64), Failure> {
    let dir = work.join("expand");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| io_failure(dir.display(), e))?;
    let paths: Vec<PathBuf> = (0..WIDTH)
        .map(|child| dir.join(format!("d{child}.img")))
        .collect();
    for path in &paths {
        sparse_file(path, vdev_size)?;
    }
    let tunables = Tunables::default();
    let mut run = Run {
        dir: dir.clone(),
        pool: None,
    };
    let pool = run.pool.insert(Pool::create(CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Raidz { parity: 1, paths }],
        create_size: None,
        force: true,
        tunables: tunables.clone(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })?);
    progress(
        "raidz-expand",
        &format!("filling a raidz1 of {WIDTH} files with {size} bytes"),
    );
    let started = Instant::now();
    write_sequential(pool, &tunables, size, 0x5eed)?;
    pool.sync()?;
    let fill = mib_per_second(size, started.elapsed().as_secs_f64());
    if let Some(pool) = run.pool.take() {
        pool.export()?;
    }
    drop_caches().map_err(Failure)?;
    let (pool, _) = Pool::import(POOL, ImportOptions::new(vec![dir], tunables))?;
    run.pool = Some(pool);
    Ok((run, fill))
}

/// Attach a fifth file and time the expansion to its end, with a writer beside it if asked.
fn expand(run: &Run, vdev_size: u64, with_writer: bool) -> Result<Expansion, Failure> {
    let pool = run.pool.as_ref().expect("imported");
    let new = run.dir.join(format!("d{WIDTH}.img"));
    sparse_file(&new, vdev_size)?;
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    pool.attach("raidz1-0", &new, false)?;
    let (waited, seconds, writer) = std::thread::scope(|scope| {
        let writer = with_writer.then(|| {
            scope.spawn(|| -> Result<f64, Failure> {
                let started = Instant::now();
                let written = rewrite_until(pool, &stop, b"during")?;
                Ok(mib_per_second(written, started.elapsed().as_secs_f64()))
            })
        });
        let waited = pool.wait_raidz_expansion();
        let seconds = started.elapsed().as_secs_f64();
        stop.store(true, Ordering::Release);
        let writer = writer.map(|handle| {
            handle
                .join()
                .unwrap_or_else(|_| Err(Failure("the writer panicked".into())))
        });
        (waited, seconds, writer)
    });
    let writer = writer.transpose()?;
    waited?;
    let status = pool
        .raidz_expansion()
        .ok_or_else(|| Failure("no expansion record".into()))?;
    Ok(Expansion {
        seconds,
        copied: status.copied,
        writer,
    })
}

/// The writer: 1 MiB records of incompressible data over and over into one file of
/// [`WRITER_SPAN`] bytes (its old blocks freed as it goes, so it never fills the pool), a sync
/// after every [`SYNC_EVERY`] bytes, until `stop`; the bytes written, synced.
fn rewrite_until(pool: &Pool, stop: &AtomicBool, name: &[u8]) -> Result<u64, Failure> {
    let fs = pool.file_system()?;
    let failure = |error: tarn::fs::FsError| Failure(error.to_string());
    let ino = fs
        .create(fs.root(), name, 0o644, 0, 0)
        .map_err(failure)?
        .ino;
    let buffer = pseudo_random(WRITER_SPAN as usize, 0xbeef);
    let mut written = 0u64;
    while !stop.load(Ordering::Acquire) {
        let at = written % WRITER_SPAN;
        fs.write(ino, at, &buffer[at as usize..(at + RECORD) as usize])
            .map_err(failure)?;
        written += RECORD;
        // Each span's worth synced: the writer's figure is what reaches the disks, not what
        // the open txg absorbs by rewriting the same records in memory.
        if written.is_multiple_of(SYNC_EVERY) {
            pool.sync()?;
        }
    }
    pool.sync()?;
    Ok(written)
}

pub fn run(bench: RaidzExpandBench) -> Result<(), Failure> {
    let size = parse_size(&bench.size).map_err(Failure)?;
    let vdev_size = parse_size(&bench.vdev_size).map_err(Failure)?;
    if size < 1 << 20 || !size.is_multiple_of(1 << 20) {
        return Err(Failure("--size must be a positive multiple of 1M".into()));
    }
    if vdev_size * 2 < size {
        return Err(Failure(
            "--vdev-size must be at least half of --size".into(),
        ));
    }
    std::fs::create_dir_all(&bench.dir).map_err(|e| io_failure(bench.dir.display(), e))?;
    let work = std::fs::canonicalize(&bench.dir).map_err(|e| io_failure(bench.dir.display(), e))?;
    let _lock = BenchDirLock::take(&work)?;

    let (run, fill) = filled_pool(&work, size, vdev_size)?;
    progress("raidz-expand", "expanding 4 -> 5 children, alone");
    let alone = expand(&run, vdev_size, false)?;
    drop(run);

    let (run, _) = filled_pool(&work, size, vdev_size)?;
    progress("raidz-expand", "a writer alone on the pool");
    let pool = run.pool.as_ref().expect("imported");
    let started = Instant::now();
    let done = AtomicBool::new(false);
    let written = std::thread::scope(|scope| {
        let writer = scope.spawn(|| rewrite_until(pool, &done, b"before"));
        std::thread::sleep(std::time::Duration::from_secs(WRITER_ALONE_SECONDS));
        done.store(true, Ordering::Release);
        writer
            .join()
            .unwrap_or_else(|_| Err(Failure("the writer panicked".into())))
    })?;
    let writer_alone = mib_per_second(written, started.elapsed().as_secs_f64());
    progress(
        "raidz-expand",
        "expanding 4 -> 5 children beside the writer",
    );
    let beside = expand(&run, vdev_size, true)?;
    drop(run);

    let rate = |expansion: &Expansion| mib_per_second(expansion.copied, expansion.seconds);
    println!(
        "raidz1 4 -> 5 holding {} MiB: alone {:.1} s ({} MiB copied); beside a writer {:.1} s ({} MiB copied)",
        size >> 20,
        alone.seconds,
        alone.copied >> 20,
        beside.seconds,
        beside.copied >> 20
    );
    let rows = vec![
        Comparison {
            what: "expansion copy MiB/s, alone".into(),
            tarn: rate(&alone),
            baseline_what: "the pool's sequential fill MiB/s".into(),
            baseline: fill,
        },
        Comparison {
            what: "expansion copy MiB/s, beside a writer".into(),
            tarn: rate(&beside),
            baseline_what: "the copy alone".into(),
            baseline: rate(&alone),
        },
        Comparison {
            what: "writer MiB/s during the expansion".into(),
            tarn: beside.writer.unwrap_or(0.0),
            baseline_what: "the writer before it".into(),
            baseline: writer_alone,
        },
    ];
    print_comparisons(
        &rows,
        ("tarn", "baseline_value"),
        bench.json,
        "raidz-expand",
    )
}
