//! `tarn-bench`: tarn's benchmarks, the library behind `tarn bench` (the `tarn` binary parses
//! [`BenchCommand`] and calls [`run`]). They are their own crate so that the measuring code,
//! its baselines (fio, btrfs, sqlite, the host's file system) and its chart drawing stay out of
//! the admin tool's modules: the CLI depends on this crate only through that one subcommand,
//! behind the `bench` cargo feature (on by default).
//!
//! This crate depends on the engine, the FUSE layer and `tarn-protocol` (the client side of the
//! daemon's socket, the kstat tables, the table printer); it must not depend on the CLI or the
//! daemon: a benchmark that needs a daemon's counters asks for them over the socket, as any
//! client does.
//!
//! `tarn bench`: benchmarks that print tarn's figure beside a baseline from the same run.
//!
//! - `run` and `steady`: the harness with array-level steady-state detection (see `steady`).
//! - `frag`: the allocator on a pool filled to 50, 75 and 90% under random 8 KiB overwrites,
//!   beside the same overwrites on a plain file (see `frag`).
//! - `timeseries`: many files taking 32-byte appends every interval (recordsize 8K,
//!   compression on), beside the same appends to plain files (see `timeseries`).
//! - `seqwrite`: the engine alone (no FUSE) against fio on the raw disk.
//! - `scrub`: scrub throughput of a sequentially filled mirror (cold) beside fio's sequential
//!   read of its vdev files, and a resilver's time and I/O beside what it missed (see `scan`).
//! - `xattr`: small xattrs set and read back through a FUSE mount, beside the host's file
//!   system (see `xattr`).
//! - `snapshot`: a snapshot of a file system with many files beside a plain txg, and the
//!   destroy of a snapshot with a large deadlist beside freeing the same blocks unsnapshotted.
//! - `snapshot-scale`: a one-block txg, a snapshot's create and destroy, `pool import`, `list -t
//!   snapshot` and the daemon's memory as snapshots accumulate to 100,000, beside 0 snapshots.
//! - `clone-destroy`: destroy of a sparse clone of a 1, 4 and 16 GiB origin with livelists,
//!   without (tree walk), and beside btrfs's subvolume delete; and the write-time cost of
//!   livelists (see `clone_destroy`).
//! - `receive`: a full stream sent to a file and received with and without write batching,
//!   beside `btrfs send | btrfs receive` of the same files (see `receive`).
//! - `arc`: the compressed ARC beside the ARC keeping contents: a working set larger than the
//!   ARC as contents but not as stored on a slow disk, and the cost of a hit on small-file and
//!   hot-read workloads (see `arc`).
//! - `l2arc`: random reads of a working set 2-3 times the ARC on a slow data disk, with the
//!   cache device and after removing it (L2 on/off), and the feed's write rate (see `l2arc`).
//! - `iosched`: p99 latency of 4 KiB sync-class writes alone, beside a sequential write, and
//!   (the baseline without priority) in the async class beside it (see `iosched`).
//! - `fsync`: 4 KiB write + fsync through a mount with the intent log (rate, p99), beside the
//!   host's file system, a txg sync per write (the path before the log) and sync=disabled;
//!   sqlite3 in WAL mode and a sync=always sequential write (see `fsync`).
//! - `sync`: what a txg's sync costs on three workloads through a mount, from the pool's txg
//!   history, and one 4 KiB write + fsync beside btrfs on a loop device (see `sync`).
//! - `mount`: sequential write and read through a FUSE mount of a tarn pool, beside a null FUSE
//!   file system (`tarn_fuse::null`: writes discarded, reads of zeros, the same mount options
//!   and kernel settings) and beside fio with O_DIRECT on a file of the same disk. The null
//!   figure is the ceiling FUSE itself puts on any file system here; the raw figure is the
//!   disk's. Every job is fio, sequential, 1 MiB I/O, psync; writes end with an fsync that is
//!   part of the timed run; reads follow a drop of the page cache (and, for tarn, an export and
//!   import, so that nothing is served from memory the write left behind). fio's buffers are
//!   random bytes (lightly scrambled per I/O), which lz4 cannot compress.
//! - `raidz`: sequential write and read of raidz1 on 4 files and raidz2 on 6, through the
//!   engine and through a FUSE mount, beside a single-file pool, zfs-fuse raidz and btrfs
//!   raid5/raid6 on loop devices; physical write rates (data plus parity, from the leaves'
//!   counters), reads with one and two children offline, scrub and resilver rates (see
//!   `raidz`).
//! - `raidz-expand`: a raidz1 of 4 files holding `--size` grows to 5 (`pool attach POOL
//!   raidz1-0 FILE`), alone and beside a writer: the copy's rate beside the pool's fill rate,
//!   and the writer's rate during the copy beside its rate before.

use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

#[macro_use]
extern crate tarn_protocol;

mod arc;
mod clone_destroy;
mod files;
mod frag;
mod fsync;
mod iosched;
mod l2arc;
mod quota;
mod raidz;
mod raidz_expand;
mod receive;
mod scan;
mod snapshot;
mod snapshot_scale;
pub mod steady;
mod sync;
mod timeseries;
mod workloads;
mod xattr;

use clap::Subcommand;
use tarn::block::blkptr::{ChecksumType, Compression, ObjectType};
use tarn::object::ObjectProps;
use tarn::pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;
use tarn_fuse::{MountHandle, MountOptions};

use tarn_protocol::error::Failure;
use tarn_protocol::format::{parse_size, print_table, Cell, ListFormat};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// A workload (fio-like job options) on a directory or an in-process pool, sampled every
    /// --interval seconds until the ARC and pool metrics are steady (SNIA rule per metric,
    /// K of N over the array), then measured; JSON record and chart.
    Run(Box<steady::RunArgs>),
    /// The steady-state detector on a recorded series (the JSON of bench run, or CSV).
    Steady(steady::SteadyArgs),
    /// Snapshot cost: snapshot of a file system with --files files beside a txg with one small
    /// change; destroy of a snapshot whose deadlist holds --blocks 4 KiB blocks beside freeing
    /// the same blocks with no snapshot. In-process, on a sparse file in --dir.
    Snapshot(snapshot::SnapshotBench),
    /// Cost as snapshots accumulate: --filesystems file systems snapshotted with `snapshot -r`
    /// in batches up to each of --steps snapshots; at each, a one-block txg (median, p99), one
    /// snapshot created and destroyed, and through a daemon of its own `pool import`, `list -t
    /// snapshot` and the daemon's memory, each beside the same at 0 snapshots.
    SnapshotScale(snapshot_scale::SnapshotScaleBench),
    /// setxattr and getxattr of many small xattrs (default 1,000 files x 10 of 32 bytes)
    /// through a FUSE mount of a new pool, beside the same calls on the host's file system
    /// (ext4 on most hosts) in the same directory. Needs root and /dev/fuse.
    Xattr(xattr::XattrBench),
    /// 4 KiB write + fsync through a FUSE mount (the intent log): rate and p99 beside the
    /// host's file system, a txg sync per write and sync=disabled; sqlite3 WAL transactions
    /// at synchronous=FULL and NORMAL; a sync=always sequential write. Needs root and
    /// /dev/fuse.
    Fsync(fsync::FsyncBench),
    /// What enforcing quotas and reservations costs a writer: sequential and 4 KiB random
    /// writes into a file system with a quota and refquota under a parent with a quota and a
    /// reservation, beside the same with no limit in the pool (median of --rounds each).
    /// In-process, on a sparse file in --dir.
    Quota(quota::QuotaBench),
    /// Everyday per-file work through a FUSE mount: untar of a generated source tree, git add
    /// and commit, git status, 4 KiB random buffered writes (fio), rm -rf; beside btrfs on a
    /// loop device and the host's file system in the same run. Needs root and /dev/fuse.
    Workloads(workloads::WorkloadsBench),
    /// Per-file work in the engine, in-process: create, lookup + stat, 4 KiB random overwrites
    /// and unlink, with the dnode cache on and off, beside the host's file system in the same
    /// directory (operations per second).
    Files(files::FilesBench),
    /// Clone destroy with and without livelists, beside btrfs: an origin of each --sizes size
    /// (recordsize 8K), a clone with --overwrites scattered 8 KiB overwrites, export and
    /// import, destroy until freeing is 0; and random overwrites in a clone, livelists on/off.
    CloneDestroy(clone_destroy::CloneDestroyBench),
    /// Send and receive of a full stream (text-like data, lz4) at each record size: receive
    /// with 1 MiB write batches beside one record per transaction (blocks/s, MB/s, CPU per
    /// block), and beside btrfs send | receive of the same files on a loop device.
    Receive(receive::ReceiveBench),
    /// Random 8K-128K reads of a working set larger than the ARC on a slow data disk, with a
    /// cache device (L2ARC) and without it, and the L2ARC feed's write rate.
    L2arc(l2arc::L2arcBench),
    /// The compressed ARC beside the ARC keeping contents (compressed_arc_enabled=0): random
    /// reads of a compressible working set larger than the ARC but not once compressed, on a
    /// slow disk; and the cost of a hit (decompression) on small files and hot 4K reads.
    Arc(arc::ArcBench),
    /// p50/p99 of 4 KiB sync-class writes through the vdev queue alone and beside an engine
    /// sequential write, beside the same writes in the async class (no priority).
    Iosched {
        /// Directory on the disk to measure.
        #[arg(long, default_value = "/var/tmp/tarn-bench")]
        dir: PathBuf,
        /// Size of the pool's single vdev (a sparse file).
        #[arg(long, default_value = "8G")]
        vdev_size: String,
        /// 4 KiB writes per measurement.
        #[arg(long, default_value_t = 3000)]
        writes: usize,
        /// Size of the file the background writer overwrites in a loop.
        #[arg(long, default_value = "1G")]
        background_file: String,
        /// Flush the device after each 4 KiB write (O_DSYNC's full cost).
        #[arg(long)]
        flush: bool,
        /// Delay every device I/O by this many microseconds (a slow disk, via the fault layer).
        #[arg(long, default_value_t = 0)]
        device_delay_us: u64,
        /// JSON output.
        #[arg(short = 'j')]
        json: bool,
    },
    /// Many files each taking a 32-byte append every interval, rewriting their last 8 KiB
    /// record (compression on): append rate and latency, allocation figures from the txg
    /// history, sync time and passes, fragmentation after each interval; beside the same
    /// appends to plain files in the same directory.
    Timeseries {
        /// Directory on the disk to measure.
        #[arg(long, default_value = "/var/tmp/tarn-bench")]
        dir: PathBuf,
        /// Size of the pool's single vdev (a sparse file).
        #[arg(long, default_value = "1G")]
        vdev_size: String,
        /// Files, each taking one append per interval.
        #[arg(long, default_value_t = 1000)]
        files: u64,
        /// Intervals to run.
        #[arg(long, default_value_t = 30)]
        intervals: u64,
        /// Length of an interval in milliseconds.
        #[arg(long, default_value_t = 200)]
        interval_ms: u64,
        /// JSON output.
        #[arg(short = 'j')]
        json: bool,
    },
    /// Free-space allocation on a pool filled to 50, 75 and 90% with 8 KiB-record files under
    /// random 8 KiB overwrites (txgs on the txg timer): write rate and latency, allocation
    /// figures from the txg history, sync time and passes, fragmentation; beside the same
    /// overwrites on a plain file in the same directory.
    Frag {
        /// Directory on the disk to measure.
        #[arg(long, default_value = "/var/tmp/tarn-bench")]
        dir: PathBuf,
        /// Size of the pool's single vdev (a sparse file); at least 2G, so that 90% fits
        /// below the slop space (128 MiB) held back.
        #[arg(long, default_value = "4G")]
        vdev_size: String,
        /// Random 8 KiB overwrites per fill level.
        #[arg(long, default_value_t = 20_000)]
        overwrites: u64,
        /// Fill levels in percent (comma-separated, ascending).
        #[arg(long, value_delimiter = ',', default_value = "50,75,90")]
        fills: Vec<u64>,
        /// JSON output.
        #[arg(short = 'j')]
        json: bool,
    },
    /// Engine sequential write of incompressible data (recordsize 1M, compression off), timed
    /// to the end of the final txg sync, beside fio (--bs=1M --direct=1 --end_fsync=1) on a file
    /// in the same directory.
    Seqwrite {
        /// Directory on the disk to measure.
        #[arg(long, default_value = "/var/tmp/tarn-bench")]
        dir: PathBuf,
        /// Bytes to write.
        #[arg(long, default_value = "4G")]
        size: String,
        /// Size of the pool's single vdev (a sparse file).
        #[arg(long, default_value = "8G")]
        vdev_size: String,
        /// Skip the fio baseline.
        #[arg(long)]
        no_fio: bool,
    },
    /// Scrub of a sequentially filled two-way mirror with a cold cache beside fio's sequential
    /// read of the same vdev files; then the resilver of a side that was offline while
    /// --missed bytes were written (time, bytes read and written). Needs root (drop_caches).
    Scrub {
        /// Directory on the disk to measure.
        #[arg(long, default_value = "/var/tmp/tarn-bench")]
        dir: PathBuf,
        /// Bytes written before the scrub.
        #[arg(long, default_value = "2G")]
        size: String,
        /// Bytes written while one side is offline (what the resilver copies).
        #[arg(long, default_value = "512M")]
        missed: String,
        /// Size of each vdev (sparse files).
        #[arg(long, default_value = "4G")]
        vdev_size: String,
        /// Skip the fio baseline.
        #[arg(long)]
        no_fio: bool,
        /// JSON output.
        #[arg(short = 'j')]
        json: bool,
    },
    /// Sequential write and read (fio, bs=1M) through a FUSE mount of a new pool, beside a null
    /// FUSE file system with the same mount settings and beside fio --direct=1 on a file in the
    /// same directory. Reads follow export, import and a drop of the page cache. Needs root
    /// (mount, drop_caches) and fio.
    Mount {
        /// Directory on the disk to measure (the vdev, the mountpoints and the raw file go here).
        #[arg(long, default_value = "/var/tmp/tarn-bench")]
        dir: PathBuf,
        /// Bytes each job writes and reads.
        #[arg(long, default_value = "4G")]
        size: String,
        /// Size of the pool's single vdev (a sparse file).
        #[arg(long, default_value = "8G")]
        vdev_size: String,
        /// Runs of the whole sequence; each figure is the median over the runs.
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// JSON output.
        #[arg(short = 'j')]
        json: bool,
    },
    /// RAID-Z: sequential write and read of raidz1 on 4 files and raidz2 on 6 (engine and
    /// FUSE mount, recordsize 1M) beside a single-file pool, zfs-fuse raidz1/raidz2 and btrfs
    /// raid5/raid6 on loop devices; reads with one and two children offline; scrub and
    /// resilver rates. Needs root, /dev/fuse and fio; the peers need zfs-fuse and btrfs-progs.
    Raidz(raidz::RaidzBench),
    /// RAID-Z expansion: a raidz1 of 4 files holding `--size` grows to 5, alone and beside a
    /// writer; the copy's rate and the writer's, each beside its baseline.
    RaidzExpand(raidz_expand::RaidzExpandBench),
    /// Sync cost per txg (passes, block copies, device writes; from the txg history) on three
    /// workloads through a FUSE mount of a new pool (a tree copy, small-file creation, 4 KiB
    /// random overwrites each followed by fsync), then the fsync loop's write I/Os and bytes per
    /// fsync and fsyncs per second beside btrfs on a loop device in the same directory. Needs
    /// root, /dev/fuse and (unless --no-btrfs) btrfs-progs.
    Sync {
        /// Directory on the disk to measure (vdev, btrfs image and mountpoints go here).
        #[arg(long, default_value = "/var/tmp/tarn-bench")]
        dir: PathBuf,
        /// Size of the pool's single vdev and of the btrfs image (sparse files).
        #[arg(long, default_value = "4G")]
        vdev_size: String,
        /// The tree the copy workload copies with cp -a.
        #[arg(long, default_value = "/usr/share/doc")]
        copy_source: PathBuf,
        /// Files the small-file workload creates.
        #[arg(long, default_value_t = 2000)]
        small_files: u64,
        /// Size of the file the overwrite loop writes into.
        #[arg(long, default_value = "64M")]
        file_size: String,
        /// 4 KiB write + fsync rounds of the overwrite loop.
        #[arg(long, default_value_t = 300)]
        fsyncs: u64,
        /// Skip the btrfs baseline.
        #[arg(long)]
        no_btrfs: bool,
        /// JSON output.
        #[arg(short = 'j')]
        json: bool,
    },
}

/// Write `bytes` (rounded up to whole MiB) of incompressible data, seeded by `seed`, into a
/// new file of the root object set in 1 MiB records, compression off; returns the bytes
/// written. The caller syncs.
pub(crate) fn write_sequential(
    pool: &Pool,
    tunables: &Tunables,
    bytes: u64,
    seed: u64,
) -> Result<u64, Failure> {
    let objset = pool.root_objset();
    let buffer = tarn_protocol::format::pseudo_random(64 << 20, seed);
    let record = 1usize << 20;
    let object = {
        let hold = pool.assign()?;
        let props = ObjectProps {
            object_type: ObjectType::PlainFile,
            data_block_size: record as u32,
            indirect_block_shift: tunables.indirect_block_shift as u8,
            checksum: ChecksumType::Fletcher4,
            compression: Compression::Off,
            copies: 1,
        };
        objset
            .create_object(&hold.tx(), props, ObjectType::None, &[])
            .map_err(|e| Failure(e.to_string()))?
    };
    let mut written = 0u64;
    while written < bytes {
        let hold = pool.assign()?;
        let at = (written as usize) % buffer.len();
        objset
            .write(&hold.tx(), object, written, &buffer[at..at + record])
            .map_err(|e| Failure(e.to_string()))?;
        written += record as u64;
    }
    Ok(written)
}

pub(crate) fn mib_per_second(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / (1 << 20) as f64 / seconds
}

/// One fio job: sequential, 1 MiB I/O, psync, on `file`; returns MiB/s as fio measured it.
/// A write ends with an fsync (`end_fsync`), inside the timed run.
pub(crate) fn fio(file: &Path, size: u64, write: bool, direct: bool) -> Result<f64, String> {
    let direction = if write { "write" } else { "read" };
    let output = Command::new("fio")
        .args([
            "--name=tarn-bench",
            "--bs=1M",
            "--ioengine=psync",
            "--fallocate=none",
            "--refill_buffers",
            "--output-format=json",
        ])
        .arg(format!("--rw={direction}"))
        .arg(format!("--direct={}", u8::from(direct)))
        .arg(format!("--end_fsync={}", u8::from(write)))
        .arg(format!("--filename={}", file.display()))
        .arg(format!("--size={size}"))
        .output()
        .map_err(|e| format!("cannot run fio: {e} (install it: apt-get install fio)"))?;
    if !output.status.success() {
        return Err(format!(
            "fio {direction} of {} failed: {}",
            file.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| format!("fio output: {e}"))?;
    let job = &json["jobs"][0][direction];
    let bytes = job["io_bytes"]
        .as_f64()
        .ok_or("fio output has no io_bytes")?;
    let runtime_ms = job["runtime"].as_f64().ok_or("fio output has no runtime")?;
    if bytes < size as f64 || runtime_ms <= 0.0 {
        return Err(format!(
            "fio {direction} of {} moved {bytes} of {size} bytes in {runtime_ms} ms",
            file.display()
        ));
    }
    Ok(bytes / (1 << 20) as f64 / (runtime_ms / 1000.0))
}

/// Write back dirty pages and drop the page cache, dentries and inodes (needs root).
pub(crate) fn drop_caches() -> Result<(), String> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| format!("cannot drop the page cache (/proc/sys/vm/drop_caches): {e}"))
}

/// MiB/s of one sequential write and the read after it.
#[derive(Clone, Copy, Debug)]
struct Pair {
    write: f64,
    read: f64,
}

/// A fresh single-vdev pool on a sparse file of `vdev_size` at `vdev` (any previous file there
/// is the benchmark's own, from an interrupted run: the directory lock is held).
pub(crate) fn create_bench_pool(
    name: &str,
    vdev: &Path,
    vdev_size: u64,
    tunables: &Tunables,
) -> Result<Pool, Failure> {
    create_bench_pool_with_log(name, vdev, vdev_size, tunables, true)
}

/// As [`create_bench_pool`], with the log space map (`feature@log_spacemap`) on or off.
pub(crate) fn create_bench_pool_with_log(
    name: &str,
    vdev: &Path,
    vdev_size: u64,
    tunables: &Tunables,
    log_spacemap: bool,
) -> Result<Pool, Failure> {
    let _ = std::fs::remove_file(vdev);
    Ok(Pool::create(CreateOptions {
        name: name.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Leaf(vdev.to_path_buf())],
        create_size: Some(vdev_size),
        force: true,
        tunables: tunables.clone(),
        wrap_device: None,
        disabled_features: if log_spacemap {
            Vec::new()
        } else {
            vec!["log_spacemap".into()]
        },
    })?)
}

/// The two pools the allocator benchmarks (`bench frag`, `bench timeseries`) run in the same
/// run: with the log space map and without it, the baseline of the comparison.
pub(crate) const LOG_SPACEMAP_MODES: [(&str, bool); 2] = [("on", true), ("off", false)];

/// Least metaslabs per vdev the allocator benchmarks want (at least 200, where
/// OpenZFS's space-map write problem shows).
pub(crate) const BENCH_METASLABS_MIN: u64 = 200;

/// `tunables` with the metaslab shift fixed so that a vdev of `vdev_size` bytes has at least
/// [`BENCH_METASLABS_MIN`] metaslabs (unless `TARN_TUNABLE_vdev_max_ms_shift` or
/// `TARN_TUNABLE_vdev_min_ms_shift` says otherwise). Small vdevs would otherwise get 16.
pub(crate) fn with_bench_metaslabs(mut tunables: Tunables, vdev_size: u64) -> Tunables {
    if std::env::var("TARN_TUNABLE_vdev_max_ms_shift").is_ok()
        || std::env::var("TARN_TUNABLE_vdev_min_ms_shift").is_ok()
    {
        return tunables;
    }
    // Labels and the boot area take a little: aim at 1% above the minimum.
    let per_metaslab = vdev_size / (BENCH_METASLABS_MIN + BENCH_METASLABS_MIN / 100 + 1);
    let shift = (63 - per_metaslab.max(1).leading_zeros()).max(16);
    if shift <= tunables.vdev_max_ms_shift {
        tunables.vdev_min_ms_shift = shift;
        tunables.vdev_max_ms_shift = shift;
    }
    tunables
}

/// Rows of [`print_comparisons`] as JSON values, for benchmarks that print one JSON document.
pub(crate) fn comparisons_json(rows: &[Comparison]) -> serde_json::Value {
    rows.iter()
        .map(|row| {
            serde_json::json!({
                "workload": row.what, "tarn": row.tarn, "baseline": row.baseline_what,
                "baseline_value": row.baseline, "ratio": row.tarn / row.baseline.max(1e-9),
            })
        })
        .collect()
}

/// The tarn half of `bench mount`: a pool on a sparse vdev in `dir`, its root file system
/// mounted at `dir/mnt-tarn`; write; unmount, export, import, remount, drop caches; read.
fn mount_tarn(dir: &Path, size: u64, vdev_size: u64) -> Result<Pair, Failure> {
    let vdev = dir.join("bench-mount-vdev0.img");
    let mountpoint = dir.join("mnt-tarn");
    let tunables = Tunables::from_env().map_err(Failure)?;
    let pool = create_bench_pool("benchmount", &vdev, vdev_size, &tunables)?;
    let result = (|| {
        let file = mountpoint.join("fio.dat");
        let mut handle = mount_pool(&pool, &mountpoint)?;
        let write = fio(&file, size, true, false)?;
        unmount(&mut handle)?;
        Ok::<_, Failure>(write)
    })();
    pool.export()?;
    let write = result?;
    let (pool, _) = Pool::import("benchmount", ImportOptions::new(vec![dir.into()], tunables))?;
    let result = (|| {
        let mut handle = mount_pool(&pool, &mountpoint)?;
        drop_caches()?;
        let read = fio(&mountpoint.join("fio.dat"), size, false, false)?;
        unmount(&mut handle)?;
        Ok::<_, Failure>(read)
    })();
    pool.destroy()?;
    let _ = std::fs::remove_file(&vdev);
    let _ = std::fs::remove_dir(&mountpoint);
    Ok(Pair {
        write,
        read: result?,
    })
}

pub(crate) fn mount_pool(pool: &Pool, mountpoint: &Path) -> Result<MountHandle, Failure> {
    tarn_fuse::mountpoint::prepare(mountpoint).map_err(Failure)?;
    let fs = Arc::new(pool.file_system()?);
    tarn_fuse::mount(fs, mountpoint, &MountOptions::new("tarn:benchmount"))
        .map_err(|e| Failure(format!("cannot mount at {}: {e}", mountpoint.display())))
}

pub(crate) fn unmount(handle: &mut MountHandle) -> Result<(), Failure> {
    handle
        .unmount(false)
        .map_err(|e| Failure(format!("unmount {}: {e}", handle.mountpoint().display())))
}

/// The null-FUSE half: the same jobs on a null file system at `dir/mnt-null` (which keeps the
/// file's size while mounted, so it is not remounted before the read).
fn mount_null(dir: &Path, size: u64) -> Result<Pair, Failure> {
    let mountpoint = dir.join("mnt-null");
    tarn_fuse::mountpoint::prepare(&mountpoint).map_err(Failure)?;
    let mut handle = tarn_fuse::null::mount(&mountpoint, &MountOptions::new("tarn-null"))
        .map_err(|e| Failure(format!("cannot mount at {}: {e}", mountpoint.display())))?;
    let file = mountpoint.join("fio.dat");
    let result = (|| {
        let write = fio(&file, size, true, false)?;
        drop_caches()?;
        let read = fio(&file, size, false, false)?;
        Ok::<_, String>(Pair { write, read })
    })();
    unmount(&mut handle)?;
    let _ = std::fs::remove_dir(&mountpoint);
    result.map_err(Failure)
}

/// The raw half: fio with O_DIRECT on a file in `dir`.
fn raw(dir: &Path, size: u64) -> Result<Pair, Failure> {
    let file = dir.join("bench-mount-raw.dat");
    let result = (|| {
        let write = fio(&file, size, true, true)?;
        drop_caches()?;
        let read = fio(&file, size, false, true)?;
        Ok::<_, String>(Pair { write, read })
    })();
    let _ = std::fs::remove_file(&file);
    result.map_err(Failure)
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

fn rate_cell(value: f64) -> Cell {
    Cell {
        exact: format!("{value:.1}"),
        human: format!("{value:.0}"),
        json: serde_json::json!((value * 10.0).round() / 10.0),
    }
}

pub(crate) fn ratio_cell(value: f64) -> Cell {
    Cell {
        exact: format!("{value:.3}"),
        human: format!("{value:.2}"),
        json: serde_json::json!((value * 1000.0).round() / 1000.0),
    }
}

const MOUNT_COLUMNS: &[&str] = &[
    "workload",
    "tarn_mib_s",
    "null_fuse_mib_s",
    "raw_mib_s",
    "tarn/null",
    "tarn/raw",
];

fn bench_mount(
    dir: &Path,
    size: u64,
    vdev_size: u64,
    runs: usize,
    json: bool,
) -> Result<(), Failure> {
    if runs == 0 {
        return Err(Failure("--runs must be at least 1".into()));
    }
    if size < 1 << 20 || !size.is_multiple_of(1 << 20) {
        return Err(Failure("--size must be a positive multiple of 1M".into()));
    }
    std::fs::create_dir_all(dir).map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
    let dir =
        &std::fs::canonicalize(dir).map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
    let _lock = BenchDirLock::take(dir)?;
    bench_mount_locked(dir, size, vdev_size, runs, json)
}

/// A benchmark's hold on its directory: two runs in one directory would share (and delete)
/// each other's vdev, pool name and mountpoints. Released, and its file removed, on drop.
pub(crate) struct BenchDirLock {
    _file: std::fs::File,
    path: PathBuf,
}

impl BenchDirLock {
    pub(crate) fn take(dir: &Path) -> Result<BenchDirLock, Failure> {
        let path = dir.join(".tarn-bench.lock");
        let file = std::fs::File::create(&path)
            .map_err(|e| Failure(format!("{}: {e}", path.display())))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(Failure(format!(
                "another tarn benchmark runs in {}",
                dir.display()
            )));
        }
        Ok(BenchDirLock { _file: file, path })
    }
}

impl Drop for BenchDirLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn bench_mount_locked(
    dir: &Path,
    size: u64,
    vdev_size: u64,
    runs: usize,
    json: bool,
) -> Result<(), Failure> {
    let mut figures: Vec<[Pair; 3]> = Vec::new();
    for run in 1..=runs {
        if !json {
            err!("run {run} of {runs}: tarn, null FUSE, raw");
        }
        let tarn = mount_tarn(dir, size, vdev_size)?;
        let null = mount_null(dir, size)?;
        let raw = raw(dir, size)?;
        figures.push([tarn, null, raw]);
    }
    let column = |which: usize, write: bool| {
        median(
            figures
                .iter()
                .map(|run| {
                    if write {
                        run[which].write
                    } else {
                        run[which].read
                    }
                })
                .collect(),
        )
    };
    let rows: Vec<Vec<Cell>> = [("write", true), ("read", false)]
        .into_iter()
        .map(|(workload, write)| {
            let (tarn, null, raw) = (column(0, write), column(1, write), column(2, write));
            vec![
                Cell::text(format!(
                    "seq{workload} {}",
                    tarn_protocol::format::human_bytes(size)
                )),
                rate_cell(tarn),
                rate_cell(null),
                rate_cell(raw),
                ratio_cell(tarn / null),
                ratio_cell(tarn / raw),
            ]
        })
        .collect();
    let format = ListFormat {
        json,
        ..ListFormat::default()
    };
    print_table(
        MOUNT_COLUMNS,
        &rows,
        &format,
        "tarn bench mount",
        "workloads",
    )
    .map_err(Failure)
}

pub fn run(command: BenchCommand, socket: &Path) -> Result<(), Failure> {
    match command {
        BenchCommand::Run(args) => steady::run(*args, socket),
        BenchCommand::Steady(args) => steady::replay(args),
        BenchCommand::Snapshot(bench) => snapshot::run(bench),
        BenchCommand::SnapshotScale(bench) => snapshot_scale::run(bench),
        BenchCommand::Files(bench) => files::run(bench),
        BenchCommand::Xattr(bench) => xattr::run(bench),
        BenchCommand::Fsync(bench) => fsync::run(bench),
        BenchCommand::Quota(bench) => quota::run(bench),
        BenchCommand::Workloads(bench) => workloads::run(bench),
        BenchCommand::CloneDestroy(bench) => clone_destroy::run(bench),
        BenchCommand::Receive(bench) => receive::run(bench),
        BenchCommand::Raidz(bench) => raidz::run(bench),
        BenchCommand::RaidzExpand(bench) => raidz_expand::run(bench),
        BenchCommand::L2arc(bench) => l2arc::run(bench),
        BenchCommand::Arc(bench) => arc::run(bench),
        BenchCommand::Iosched {
            dir,
            vdev_size,
            writes,
            background_file,
            flush,
            device_delay_us,
            json,
        } => iosched::run(iosched::IoschedBench {
            dir,
            vdev_size,
            writes,
            background_file,
            flush,
            device_delay_us,
            json,
        }),
        BenchCommand::Seqwrite {
            dir,
            size,
            vdev_size,
            no_fio,
        } => {
            let size = parse_size(&size)?;
            let vdev_size = parse_size(&vdev_size)?;
            std::fs::create_dir_all(&dir)
                .map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
            let _lock = BenchDirLock::take(&dir)?;
            let vdev = dir.join("bench-vdev0.img");
            let mut tunables = tarn::tunables::Tunables::from_env().map_err(Failure)?;
            tunables.recordsize = 1 << 20;
            let pool = create_bench_pool("bench", &vdev, vdev_size, &tunables)?;
            let started = Instant::now();
            let written = write_sequential(&pool, &tunables, size, 0x9e37_79b9_7f4a_7c15)?;
            pool.sync()?;
            let seconds = started.elapsed().as_secs_f64();
            let tarn_rate = mib_per_second(written, seconds);
            pool.destroy()?;
            let _ = std::fs::remove_file(&vdev);
            out!(
                "tarn engine sequential write: {} MiB in {seconds:.2} s = {tarn_rate:.0} MiB/s",
                written >> 20
            );
            if no_fio {
                return Ok(());
            }
            let file = dir.join("fio-baseline.dat");
            let fio_rate = fio(&file, size, true, true);
            let _ = std::fs::remove_file(&file);
            let fio_rate = fio_rate.map_err(Failure)?;
            out!(
                "fio on a file in {} (bs=1M direct end_fsync): {fio_rate:.0} MiB/s",
                dir.display()
            );
            out!("ratio tarn/fio: {:.2}", tarn_rate / fio_rate);
            Ok(())
        }
        BenchCommand::Scrub {
            dir,
            size,
            missed,
            vdev_size,
            no_fio,
            json,
        } => scan::run(scan::ScrubBench {
            dir,
            size: parse_size(&size)?,
            missed: parse_size(&missed)?,
            vdev_size: parse_size(&vdev_size)?,
            no_fio,
            json,
        }),
        BenchCommand::Sync {
            dir,
            vdev_size,
            copy_source,
            small_files,
            file_size,
            fsyncs,
            no_btrfs,
            json,
        } => sync::run(sync::SyncBench {
            dir,
            vdev_size: parse_size(&vdev_size)?,
            copy_source,
            small_files,
            overwrite_file_size: parse_size(&file_size)?,
            fsyncs,
            btrfs: !no_btrfs,
            json,
        }),
        BenchCommand::Timeseries {
            dir,
            vdev_size,
            files,
            intervals,
            interval_ms,
            json,
        } => timeseries::run(timeseries::TimeseriesBench {
            dir,
            vdev_size: parse_size(&vdev_size)?,
            files,
            intervals,
            interval: std::time::Duration::from_millis(interval_ms),
            json,
        }),
        BenchCommand::Frag {
            dir,
            vdev_size,
            overwrites,
            fills,
            json,
        } => {
            if fills.is_empty()
                || fills.windows(2).any(|pair| pair[0] >= pair[1])
                || fills.iter().any(|&fill| fill == 0 || fill >= 100)
            {
                return Err(Failure(
                    "--fills must be ascending percentages between 1 and 99".into(),
                ));
            }
            frag::run(frag::FragBench {
                dir,
                vdev_size: parse_size(&vdev_size)?,
                overwrites,
                fills,
                json,
            })
        }
        BenchCommand::Mount {
            dir,
            size,
            vdev_size,
            runs,
            json,
        } => bench_mount(
            &dir,
            parse_size(&size)?,
            parse_size(&vdev_size)?,
            runs,
            json,
        ),
    }
}

pub(crate) fn io_failure(what: impl std::fmt::Display, error: std::io::Error) -> Failure {
    Failure(format!("{what}: {error}"))
}

/// Whether btrfs can be measured here: mkfs.btrfs runs, and this process is root (loop
/// devices and mounts).
pub(crate) fn btrfs_available() -> bool {
    Command::new("mkfs.btrfs")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
        && std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find(|line| line.starts_with("Uid:"))
                    .and_then(|line| line.split_whitespace().nth(2).map(|uid| uid == "0"))
            })
            .unwrap_or(false)
}

/// Run `work` on a fresh btrfs on a loop device over a sparse image `dir/bench-NAME-btrfs.img`
/// of `size` bytes, mounted at `dir/mnt-NAME-btrfs`; `work` gets the mountpoint and the
/// device. Everything is unmounted, detached and removed afterwards, whatever happened.
pub(crate) fn on_btrfs<T>(
    dir: &Path,
    name: &str,
    size: u64,
    work: impl FnOnce(&Path, &str) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let mut array = BtrfsArray::create(dir, name, 1, size, &[], false)?;
    let device = array.device(0)?.to_string();
    let result = work(&array.mountpoint, &device);
    let _ = array.unmount();
    result
}

/// btrfs over loop devices on sparse images in a benchmark's directory:
/// `dir/bench-NAME-btrfs.img` (one device) or `dir/bench-NAME-btrfsN.img` (several, made with
/// the mkfs options given, e.g. `-d raid5 -m raid5`), mounted at `dir/mnt-NAME-btrfs`. A
/// benchmark can unmount it, detach and attach devices again (degraded mounts) and add blank
/// images (`btrfs replace`). On drop, whatever happened, it is unmounted, every loop device
/// over its images is detached, and the images and the mountpoint are removed.
pub(crate) struct BtrfsArray {
    pub mountpoint: PathBuf,
    /// The images: the file system's devices in mkfs order (devid = index + 1), then any added.
    images: Vec<PathBuf>,
    /// Each image's loop device while attached.
    devices: Vec<Option<String>>,
    /// How many of the images mkfs made the file system on.
    members: usize,
    direct_io: bool,
    mounted: bool,
}

impl BtrfsArray {
    /// `count` sparse images of `size` bytes on loop devices (with `--direct-io=on` if
    /// `direct_io`: the loop device then reads and writes its image with O_DIRECT),
    /// `mkfs.btrfs -q -f MKFS_ARGS DEVICES...`, mounted.
    pub(crate) fn create(
        dir: &Path,
        name: &str,
        count: usize,
        size: u64,
        mkfs_args: &[&str],
        direct_io: bool,
    ) -> Result<BtrfsArray, Failure> {
        let mut array = BtrfsArray {
            mountpoint: dir.join(format!("mnt-{name}-btrfs")),
            images: Vec::new(),
            devices: Vec::new(),
            members: count,
            direct_io,
            mounted: false,
        };
        for index in 0..count {
            let image = if count == 1 {
                dir.join(format!("bench-{name}-btrfs.img"))
            } else {
                dir.join(format!("bench-{name}-btrfs{index}.img"))
            };
            array.add_image(image, size)?;
        }
        let devices: Vec<String> = (0..count)
            .map(|index| array.device(index).map(str::to_string))
            .collect::<Result<_, _>>()?;
        let mut args = vec!["-q", "-f"];
        args.extend_from_slice(mkfs_args);
        args.extend(devices.iter().map(String::as_str));
        sync::run_command("mkfs.btrfs", &args)?;
        std::fs::create_dir_all(&array.mountpoint)
            .map_err(|e| io_failure(array.mountpoint.display(), e))?;
        array.mount("")?;
        Ok(array)
    }

    /// A new sparse image of `size` bytes at `image`, on a loop device; its index. Images
    /// added after `create` are not devices of the file system (a `btrfs replace` target).
    pub(crate) fn add_image(&mut self, image: PathBuf, size: u64) -> Result<usize, Failure> {
        let _ = std::fs::remove_file(&image);
        let file = std::fs::File::create(&image).map_err(|e| io_failure(image.display(), e))?;
        self.images.push(image.clone());
        self.devices.push(None);
        file.set_len(size)
            .map_err(|e| io_failure(image.display(), e))?;
        let index = self.images.len() - 1;
        self.attach(index)?;
        Ok(index)
    }

    /// Attach image `index` (again) to a loop device; btrfs finds it by its superblock.
    pub(crate) fn attach(&mut self, index: usize) -> Result<(), Failure> {
        let image = self.images[index].display().to_string();
        let mut args = vec!["--find", "--show"];
        if self.direct_io {
            args.push("--direct-io=on");
        }
        args.push(&image);
        let device = sync::run_command("losetup", &args)?;
        self.devices[index] = Some(device);
        Ok(())
    }

    /// Detach image `index`'s loop device (the file system must be unmounted); the kernel's
    /// btrfs forgets the device first, so that a degraded mount does not look for it.
    pub(crate) fn detach(&mut self, index: usize) -> Result<(), Failure> {
        if let Some(device) = self.devices[index].take() {
            let _ = sync::run_command("btrfs", &["device", "scan", "--forget", &device]);
            sync::run_command("losetup", &["-d", &device])?;
        }
        Ok(())
    }

    /// The loop device of image `index`.
    pub(crate) fn device(&self, index: usize) -> Result<&str, Failure> {
        self.devices[index].as_deref().ok_or_else(|| {
            Failure(format!(
                "{} is not on a loop device",
                self.images[index].display()
            ))
        })
    }

    /// Mount with `options` (none if empty; e.g. `degraded,ro`), naming every attached device
    /// of the file system.
    pub(crate) fn mount(&mut self, options: &str) -> Result<(), Failure> {
        let attached: Vec<&str> = self.devices[..self.members]
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        let Some((first, others)) = attached.split_first() else {
            return Err(Failure("no device of the btrfs is attached".into()));
        };
        let options: Vec<String> = (!options.is_empty())
            .then(|| options.to_string())
            .into_iter()
            .chain(others.iter().map(|device| format!("device={device}")))
            .collect();
        let options = options.join(",");
        let mountpoint = self.mountpoint.display().to_string();
        let mut args = vec!["-t", "btrfs"];
        if !options.is_empty() {
            args.extend(["-o", &options]);
        }
        args.extend([*first, &mountpoint]);
        sync::run_command("mount", &args)?;
        self.mounted = true;
        Ok(())
    }

    pub(crate) fn unmount(&mut self) -> Result<(), Failure> {
        if self.mounted {
            sync::run_command("umount", &[&self.mountpoint.display().to_string()])?;
            self.mounted = false;
        }
        Ok(())
    }
}

impl Drop for BtrfsArray {
    fn drop(&mut self) {
        if self.mounted {
            let _ = sync::run_command("umount", &[&self.mountpoint.display().to_string()]);
        }
        for image in &self.images {
            let image_text = image.display().to_string();
            // Every loop device over the image, whatever this struct recorded.
            let listed = sync::run_command("losetup", &["-j", &image_text]).unwrap_or_default();
            for device in listed.lines().filter_map(|line| line.split(':').next()) {
                let _ = sync::run_command("btrfs", &["device", "scan", "--forget", device]);
                let _ = sync::run_command("losetup", &["-d", device]);
            }
            let _ = std::fs::remove_file(image);
        }
        let _ = std::fs::remove_dir(&self.mountpoint);
    }
}

/// Report a benchmark's progress on stderr when it is a terminal (quiet in scripts).
pub(crate) fn progress(bench: &str, message: &str) {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!("bench {bench}: {message}");
    }
}

/// One line of a benchmark that compares tarn with a baseline measured in the same run.
pub(crate) struct Comparison {
    pub what: String,
    pub tarn: f64,
    pub baseline_what: String,
    pub baseline: f64,
}

/// Print comparisons as a table: workload, tarn's figure, the baseline and its figure (the two
/// figure columns named by `value_columns`), and tarn's figure over the baseline's.
pub(crate) fn print_comparisons(
    rows: &[Comparison],
    value_columns: (&'static str, &'static str),
    json: bool,
    key: &str,
) -> Result<(), Failure> {
    let number = |value: f64| Cell {
        exact: format!("{value:.4}"),
        human: format!("{value:.3}"),
        json: value.into(),
    };
    let cells: Vec<Vec<Cell>> = rows
        .iter()
        .map(|row| {
            vec![
                Cell::text(row.what.clone()),
                number(row.tarn),
                Cell::text(row.baseline_what.clone()),
                number(row.baseline),
                number(row.tarn / row.baseline.max(1e-9)),
            ]
        })
        .collect();
    let format = ListFormat {
        json,
        ..ListFormat::default()
    };
    print_table(
        &[
            "workload",
            value_columns.0,
            "baseline",
            value_columns.1,
            "ratio",
        ],
        &cells,
        &format,
        // The benchmarks name their table after themselves.
        &format!("tarn bench {key}"),
        key,
    )
    .map_err(Failure)
}
