//! `tarn bench receive`: how fast a full stream is sent and received, in-process on
//! a pool on a sparse file, beside `btrfs send | btrfs receive` of the same files on a loop
//! device in the same directory.
//!
//! For each record size: files of text-like data (lz4 keeps about 45% of it) are written to a
//! file system with that recordsize and lz4, snapshotted, and sent to a file; the file is then
//! received into a new file system with write batching (1 MiB) and without (one record per
//! transaction, the same code path otherwise), then sent again with `-c` and received both
//! ways too. Each receive is timed to the end of its final
//! sync, with the process's CPU time (user + system) over the blocks received; each received
//! copy is destroyed, and its blocks freed, before the next receive starts, and an untimed
//! receive first warms the process's heap (the first receive pays a page fault for every
//! buffer it holds, and would lose to whichever came second). The btrfs half
//! writes the same files into a subvolume, snapshots it read-only, and times `btrfs send -f`
//! and `btrfs receive -f` (with a final `sync`).
//!
//! It is a benchmark, not a test: it asserts nothing, and prints each figure with its baseline
//! and the ratio.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use tarn::fs::FileSystem;
use tarn::pool::Pool;
use tarn::send::{ReceiveOptions, SendOptions};
use tarn::tunables::Tunables;
use tarn_protocol::error::Failure;
use tarn_protocol::format::parse_size;

use super::sync::run_command;
use super::{btrfs_available, io_failure, on_btrfs};
use super::{create_bench_pool, print_comparisons, BenchDirLock, Comparison};

#[derive(Args)]
pub struct ReceiveBench {
    /// Directory for the vdev, the streams and the btrfs image (sparse files).
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// Bytes of file data sent (per record size).
    #[arg(long, default_value = "1G")]
    size: String,
    /// Record sizes to measure.
    #[arg(long, value_delimiter = ',', default_value = "8K,128K")]
    recordsizes: Vec<String>,
    /// Skip btrfs even if mkfs.btrfs is available.
    #[arg(long)]
    no_btrfs: bool,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
}

const FILES: u64 = 16;

fn progress(message: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("bench receive: {message}");
    }
}

/// Text-like bytes: words of a fixed vocabulary in a pseudo-random order (lz4 keeps about
/// 45% of them), different for every `seed`.
pub(super) fn text(length: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 32] = [
        "the",
        "storage",
        "pool",
        "block",
        "pointer",
        "checksum",
        "snapshot",
        "clone",
        "dataset",
        "metaslab",
        "allocation",
        "transaction",
        "group",
        "commit",
        "of",
        "and",
        "copy",
        "on",
        "write",
        "file",
        "system",
        "record",
        "receive",
        "stream",
        "send",
        "incremental",
        "bookmark",
        "spill",
        "dnode",
        "indirect",
        "level",
        "birth",
    ];
    let noise = tarn_protocol::format::pseudo_random(length / 2 + 16, seed);
    let mut out = Vec::with_capacity(length + 16);
    let mut index = 0;
    while out.len() < length {
        let pick = noise[index % noise.len()];
        index += 1;
        out.extend_from_slice(WORDS[(pick % 32) as usize].as_bytes());
        // Now and then a number, so that records differ.
        if pick >= 224 {
            out.extend_from_slice(format!(" {}", noise[(index * 7) % noise.len()]).as_bytes());
        }
        out.push(if pick.is_multiple_of(13) { b'\n' } else { b' ' });
    }
    out.truncate(length);
    out
}

/// The files every run writes: (name, seed, length).
fn files(size: u64) -> Vec<(String, u64, u64)> {
    (0..FILES)
        .map(|index| (format!("file-{index:02}"), index + 1, size / FILES))
        .collect()
}

pub(super) struct Received {
    pub(super) seconds: f64,
    pub(super) blocks: u64,
    cpu_seconds: f64,
    write_transactions: u64,
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

pub(super) fn receive_once(
    pool: &Pool,
    stream: &Path,
    target: &str,
    batch_bytes: u64,
) -> Result<Received, Failure> {
    let mut input = std::io::BufReader::with_capacity(
        4 << 20,
        std::fs::File::open(stream).map_err(|e| io_failure(stream.display(), e))?,
    );
    let cpu = cpu_seconds();
    let started = Instant::now();
    let report = tarn::send::receive(
        pool,
        target,
        &mut input,
        &ReceiveOptions {
            batch_bytes: Some(batch_bytes),
            ..ReceiveOptions::default()
        },
    )
    .map_err(|error| Failure(format!("receive into {target}: {error}")))?;
    pool.sync()?;
    Ok(Received {
        seconds: started.elapsed().as_secs_f64(),
        blocks: report.blocks,
        cpu_seconds: cpu_seconds() - cpu,
        write_transactions: report.write_transactions,
    })
}

/// What the tarn half measured for one record size.
struct TarnRun {
    send_seconds: f64,
    stream_bytes: u64,
    compressed_stream_bytes: u64,
    batched: Received,
    single: Received,
    compressed: Received,
    compressed_single: Received,
}

/// Send `snapshot` of `pool` to the file `stream`; returns (seconds, stream bytes).
pub(super) fn send_to_file(
    pool: &Pool,
    snapshot: &str,
    stream: &Path,
    compressed: bool,
) -> Result<(f64, u64), Failure> {
    let started = Instant::now();
    let mut out = std::io::BufWriter::with_capacity(
        4 << 20,
        std::fs::File::create(stream).map_err(|e| io_failure(stream.display(), e))?,
    );
    let report = tarn::send::send(
        pool,
        snapshot,
        &SendOptions {
            compressed,
            ..SendOptions::default()
        },
        &mut out,
        &mut |_| {},
    )
    .map_err(|error| Failure(format!("send: {error}")))?;
    let file = out
        .into_inner()
        .map_err(|e| Failure(format!("{}: {e}", stream.display())))?;
    file.sync_all()
        .map_err(|e| io_failure(stream.display(), e))?;
    Ok((started.elapsed().as_secs_f64(), report.bytes))
}

/// The source file system `POOL/src` of `size` bytes of text-like files (recordsize
/// `recordsize`, lz4) and its snapshot `POOL/src@s`, whose name is returned.
pub(super) fn write_source(pool: &Pool, size: u64, recordsize: u64) -> Result<String, Failure> {
    let source = format!("{}/src", pool.name());
    pool.create_dataset(
        &source,
        &[
            ("recordsize".into(), recordsize.to_string()),
            ("compression".into(), "lz4".into()),
        ],
        false,
    )?;
    let fs: FileSystem = pool.open_file_system(&source)?;
    for (name, seed, length) in files(size) {
        let ino = fs
            .create(fs.root(), name.as_bytes(), 0o644, 0, 0)
            .map_err(|e| Failure(e.to_string()))?
            .ino;
        let chunk = text(1 << 20, seed);
        let mut written = 0;
        while written < length {
            let take = (length - written).min(chunk.len() as u64) as usize;
            fs.write(ino, written, &chunk[..take])
                .map_err(|e| Failure(e.to_string()))?;
            written += take as u64;
        }
    }
    drop(fs);
    let snapshot = format!("{source}@s");
    pool.create_snapshots(std::slice::from_ref(&snapshot), false)?;
    Ok(snapshot)
}

/// Destroy a received file system and sync until its blocks are freed, so that the frees of
/// one receive's copy are not done (and timed) inside the next receive.
fn destroy_settled(pool: &Pool, name: &str) -> Result<(), Failure> {
    pool.destroy_dataset(name, true)?;
    loop {
        pool.sync()?;
        if pool.core.freeing_bytes()? == 0 && !pool.core.background_work_pending() {
            return Ok(());
        }
    }
}

/// The tarn half for one record size.
fn tarn_run(dir: &Path, size: u64, recordsize: u64) -> Result<TarnRun, Failure> {
    let vdev = dir.join("bench-receive-vdev0.img");
    let stream = dir.join("bench-receive.stream");
    let tunables = Tunables::from_env().map_err(Failure)?;
    let pool = create_bench_pool("benchrecv", &vdev, size * 4 + (2 << 30), &tunables)?;
    let result = (|| {
        write_source(&pool, size, recordsize)?;
        let label = human(recordsize);
        progress(&format!("{label}: send to a file"));
        let (send_seconds, stream_bytes) = send_to_file(&pool, "benchrecv/src@s", &stream, false)?;
        // The process's first receive grows its heap (every buffer of the dirty data is a
        // page fault the later ones reuse): untimed, so that the order of the timed receives
        // does not decide the comparison.
        progress(&format!("{label}: receive, warm-up"));
        receive_once(&pool, &stream, "benchrecv/warm-up", 1 << 20)?;
        destroy_settled(&pool, "benchrecv/warm-up")?;
        progress(&format!("{label}: receive, batched"));
        let batched = receive_once(&pool, &stream, "benchrecv/batched", 1 << 20)?;
        destroy_settled(&pool, "benchrecv/batched")?;
        progress(&format!("{label}: receive, one record per transaction"));
        let single = receive_once(&pool, &stream, "benchrecv/single", 0)?;
        destroy_settled(&pool, "benchrecv/single")?;
        progress(&format!("{label}: send -c to a file"));
        let (_, compressed_stream_bytes) = send_to_file(&pool, "benchrecv/src@s", &stream, true)?;
        progress(&format!("{label}: receive of the -c stream"));
        let compressed = receive_once(&pool, &stream, "benchrecv/compressed", 1 << 20)?;
        destroy_settled(&pool, "benchrecv/compressed")?;
        progress(&format!(
            "{label}: receive of the -c stream, one record per transaction"
        ));
        let compressed_single = receive_once(&pool, &stream, "benchrecv/compressed-single", 0)?;
        Ok::<_, Failure>(TarnRun {
            send_seconds,
            stream_bytes,
            compressed_stream_bytes,
            batched,
            single,
            compressed,
            compressed_single,
        })
    })();
    pool.destroy()?;
    let _ = std::fs::remove_file(&vdev);
    let _ = std::fs::remove_file(&stream);
    result
}

/// The btrfs half: (send seconds, receive seconds).
fn btrfs_run(dir: &Path, size: u64) -> Result<(f64, f64), Failure> {
    let stream = dir.join("bench-receive-btrfs.stream");
    let result = on_btrfs(dir, "receive", size * 3 + (2 << 30), |mountpoint, _| {
        let volume = mountpoint.join("vol");
        let snapshot = mountpoint.join("snap");
        let received = mountpoint.join("received");
        run_command(
            "btrfs",
            &["subvolume", "create", &volume.display().to_string()],
        )?;
        for (name, seed, length) in files(size) {
            let path = volume.join(name);
            let chunk = text(1 << 20, seed);
            let mut file =
                std::fs::File::create(&path).map_err(|e| io_failure(path.display(), e))?;
            let mut written = 0;
            while written < length {
                let take = (length - written).min(chunk.len() as u64) as usize;
                std::io::Write::write_all(&mut file, &chunk[..take])
                    .map_err(|e| io_failure(path.display(), e))?;
                written += take as u64;
            }
        }
        run_command("sync", &[])?;
        run_command(
            "btrfs",
            &[
                "subvolume",
                "snapshot",
                "-r",
                &volume.display().to_string(),
                &snapshot.display().to_string(),
            ],
        )?;
        std::fs::create_dir_all(&received).map_err(|e| io_failure(received.display(), e))?;
        let started = Instant::now();
        run_command(
            "btrfs",
            &[
                "send",
                "-q",
                "-f",
                &stream.display().to_string(),
                &snapshot.display().to_string(),
            ],
        )?;
        run_command("sync", &[])?;
        let send = started.elapsed().as_secs_f64();
        let started = Instant::now();
        run_command(
            "btrfs",
            &[
                "receive",
                "-q",
                "-f",
                &stream.display().to_string(),
                &received.display().to_string(),
            ],
        )?;
        run_command("sync", &[])?;
        Ok::<_, Failure>((send, started.elapsed().as_secs_f64()))
    });
    let _ = std::fs::remove_file(&stream);
    result
}

fn human(bytes: u64) -> String {
    tarn_protocol::format::human_bytes(bytes)
}

pub fn run(bench: ReceiveBench) -> Result<(), Failure> {
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&bench.dir)?;
    let size = parse_size(&bench.size)?;
    if size < 16 << 20 {
        return Err(Failure(format!(
            "size {} is too small (at least 16M)",
            bench.size
        )));
    }
    let btrfs = !bench.no_btrfs && btrfs_available();
    let mut rows = Vec::new();
    for text_size in &bench.recordsizes {
        let recordsize = parse_size(text_size)?;
        if !(4096..=(1 << 20)).contains(&recordsize) || !recordsize.is_power_of_two() {
            return Err(Failure(format!(
                "recordsize {text_size}: a power of two, 4K to 1M"
            )));
        }
        let label = human(recordsize);
        let run = tarn_run(&bench.dir, size, recordsize)?;
        let (batched, single) = (&run.batched, &run.single);
        let per_second = |received: &Received| received.blocks as f64 / received.seconds;
        rows.push(Comparison {
            what: format!(
                "receive {label} records, send -c stream of {} (blocks/s)",
                human(run.compressed_stream_bytes)
            ),
            tarn: per_second(&run.compressed),
            baseline_what: "plain stream, batched (blocks/s)".into(),
            baseline: per_second(batched),
        });
        rows.push(Comparison {
            what: format!("receive {label} records, send -c stream, CPU microseconds per block"),
            tarn: run.compressed.cpu_seconds * 1e6 / run.compressed.blocks.max(1) as f64,
            baseline_what: "plain stream, batched".into(),
            baseline: batched.cpu_seconds * 1e6 / batched.blocks.max(1) as f64,
        });
        rows.push(Comparison {
            what: format!("receive {label} records, 1 MiB batches (blocks/s)"),
            tarn: per_second(batched),
            baseline_what: "one record per transaction (blocks/s)".into(),
            baseline: per_second(single),
        });
        rows.push(Comparison {
            what: format!("receive {label} records, send -c stream, 1 MiB batches (blocks/s)"),
            tarn: per_second(&run.compressed),
            baseline_what: "one record per transaction (blocks/s)".into(),
            baseline: per_second(&run.compressed_single),
        });
        rows.push(Comparison {
            what: format!("receive {label} records, batched (MB/s of file data)"),
            tarn: size as f64 / 1e6 / batched.seconds,
            baseline_what: "one record per transaction (MB/s)".into(),
            baseline: size as f64 / 1e6 / single.seconds,
        });
        rows.push(Comparison {
            what: format!(
                "receive {label} records, CPU microseconds per block ({} write transactions)",
                batched.write_transactions
            ),
            tarn: batched.cpu_seconds * 1e6 / batched.blocks.max(1) as f64,
            baseline_what: format!(
                "one record per transaction ({} transactions)",
                single.write_transactions
            ),
            baseline: single.cpu_seconds * 1e6 / single.blocks.max(1) as f64,
        });
        let btrfs_times = if btrfs {
            progress(&format!("{label}: btrfs send and receive"));
            Some(btrfs_run(&bench.dir, size)?)
        } else {
            None
        };
        if let Some((btrfs_send, btrfs_receive)) = btrfs_times {
            let blocks = (size / recordsize) as f64;
            rows.push(Comparison {
                what: format!("receive {label} records, send -c stream (blocks/s)"),
                tarn: per_second(&run.compressed),
                baseline_what: "btrfs receive -f of the same files (blocks/s)".into(),
                baseline: blocks / btrfs_receive,
            });
            rows.push(Comparison {
                what: format!("receive {label} records, plain stream, batched (blocks/s)"),
                tarn: per_second(batched),
                baseline_what:
                    "btrfs receive -f of the same files (4K blocks counted as the record size)"
                        .into(),
                baseline: blocks / btrfs_receive,
            });
            rows.push(Comparison {
                what: format!(
                    "send {label} records to a file (MB/s of file data; stream {})",
                    human(run.stream_bytes)
                ),
                tarn: size as f64 / 1e6 / run.send_seconds,
                baseline_what: "btrfs send -f (MB/s)".into(),
                baseline: size as f64 / 1e6 / btrfs_send,
            });
        }
    }
    if !btrfs {
        progress("btrfs skipped (needs mkfs.btrfs and loop devices, or --no-btrfs was given)");
    }
    print_comparisons(&rows, ("tarn", "baseline_value"), bench.json, "receive")
}
