//! `tarn bench raidz`: RAID-Z throughput in one run on the same disk: sequential write and read
//! of raidz1 on 4 files and raidz2 on 6 files, through the engine and through a FUSE mount,
//! beside a single-file pool, zfs-fuse raidz1/raidz2 and btrfs raid5/raid6 on loop devices;
//! reads with one and two children missing; scrub and resilver rates.
//!
//! Every tarn pool runs in this process on sparse files in its own directory under `--dir`
//! (recordsize 1M, compression off). Per layout (single file, raidz1 on 4, raidz2 on 6):
//!
//! - engine write: `--size` bytes of incompressible data written in 1 MiB pieces through the
//!   file system layer (no FUSE), timed to the end of the final txg sync. Its physical rate is
//!   the bytes the leaves wrote (data, parity and metadata: the vdev files' own write counters)
//!   over the same time.
//! - engine read: the file read back in 1 MiB pieces after an export, a drop of the page cache
//!   and an import (the ARC is empty).
//! - mount write and read: fio (1 MiB, psync, random buffers refilled per I/O, which lz4
//!   cannot compress) through a FUSE mount; the write ends with an fsync inside the timed run;
//!   the read follows an unmount, export, import, remount and a drop of the page cache. The
//!   physical rate of the write is fio's rate times the bytes the leaves wrote while fio ran
//!   per byte of data.
//! - scrub: after an export, drop of the page cache and import; MiB/s of file data in the pool
//!   (twice `--size`: the engine's file and fio's).
//! - raidz only, degraded: child 1 taken offline (`pool offline`), then for raidz2 child 2
//!   too; after each, export, drop of caches, import, and both reads again. Child 2 is then
//!   brought back online (its resilver awaited), and the resilver: after an export, drop of the
//!   page cache and import, child 1, still offline, replaced with a blank file (`pool
//!   replace`), timed to the end of the replace, as MiB/s of file data in the pool.
//!
//! The peers take the same steps on the same disk, through their mounts with fio:
//!
//! - zfs-fuse: raidz1 on 4 files and raidz2 on 6 (recordsize 128K, its maximum: pool version 23
//!   has no large blocks; compression off). The daemon is started for the run with
//!   `--disable-block-cache` unless one is running already, and stopped afterwards. Its vdev
//!   files are opened without O_DIRECT all the same (their flags in /proc/PID/fdinfo), so it
//!   reads and writes them through the page cache: `zpool export`, a drop of the page cache and
//!   `import -d` before each read, the scrub and the resilver empty its ARC and the page cache;
//!   degraded with `zpool offline`; scrub and `zpool replace` polled with `zpool status` to
//!   their end.
//! - btrfs: raid5 (data and metadata) on 4 loop devices and raid6 on 6, the loop devices with
//!   direct I/O. Degraded reads on a read-only degraded mount with the loop devices detached;
//!   `btrfs scrub start -B`; the resilver is `btrfs replace start -B` of the missing device onto
//!   a blank one on a degraded read-write mount.
//!
//! Each row prints tarn's figure, its baseline and the ratio: tarn raidz over the single-file
//! pool, over zfs-fuse and over btrfs, degraded over healthy; then the targets (raidz
//! physical write rate at least 0.9 of the single-file pool's, degraded reads at least half of
//! healthy, tarn ahead of zfs-fuse in each row) with whether each is met. A peer whose tool is
//! missing is skipped with a message (`--no-peers`, `--no-zfs-fuse`, `--no-btrfs` skip them on
//! purpose); a peer that fails is reported and its rows left out. Everything is unmounted,
//! detached, destroyed and removed at the end, whatever happened.
//!
//! It is a benchmark, not a test: it asserts nothing. Needs root (mounts, loop devices,
//! drop_caches), /dev/fuse and fio.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Args;
use tarn::pool::scan::ScanFunction;
use tarn::pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;
use tarn_protocol::error::Failure;
use tarn_protocol::format::{parse_size, print_table, pseudo_random, Cell, ListFormat};

use super::scan::{finish, leaf_bytes};
use super::sync::run_command;
use super::{btrfs_available, drop_caches, fio, io_failure, mib_per_second, mount_pool, progress};
use super::{comparisons_json, print_comparisons, unmount, BenchDirLock, BtrfsArray, Comparison};

#[derive(Args)]
pub struct RaidzBench {
    /// Directory on the disk to measure: every pool's files, the btrfs images and the
    /// mountpoints go here (sparse files).
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// Bytes of file data each writer writes per layout (tarn's engine file and fio's file
    /// each); a multiple of 1M.
    #[arg(long, default_value = "1G")]
    size: String,
    /// Skip zfs-fuse and btrfs.
    #[arg(long)]
    no_peers: bool,
    /// Skip zfs-fuse.
    #[arg(long)]
    no_zfs_fuse: bool,
    /// Skip btrfs.
    #[arg(long)]
    no_btrfs: bool,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
}

const RECORD: u64 = 1 << 20;
const ENGINE_FILE: &[u8] = b"engine.dat";
const FIO_FILE: &str = "fio.dat";
const ZFS_FUSE_RECORDSIZE: &str = "128K";

/// A pool layout: one file, or RAID-Z with `parity` over `width` files.
#[derive(Clone, Copy)]
struct Layout {
    key: &'static str,
    parity: u8,
    width: usize,
}

const SINGLE: Layout = Layout {
    key: "single",
    parity: 0,
    width: 1,
};

const RAIDZ: [Layout; 2] = [
    Layout {
        key: "raidz1",
        parity: 1,
        width: 4,
    },
    Layout {
        key: "raidz2",
        parity: 2,
        width: 6,
    },
];

impl Layout {
    fn label(&self) -> String {
        if self.parity == 0 {
            "single file".into()
        } else {
            format!("{} on {} files", self.key, self.width)
        }
    }

    fn data_columns(&self) -> u64 {
        (self.width - self.parity as usize) as u64
    }

    /// Size of each file (sparse) for `data` bytes of file data: twice what the data columns
    /// take, and 1 GiB of slack.
    fn child_size(&self, data: u64) -> u64 {
        2 * data.div_ceil(self.data_columns()) + (1 << 30)
    }

    fn btrfs_profile(&self) -> &'static str {
        if self.parity == 1 {
            "raid5"
        } else {
            "raid6"
        }
    }
}

/// A sequential write: its data rate and the bytes the vdev files took per byte of data.
#[derive(Clone, Copy, Default)]
struct Write {
    data: f64,
    physical_per_data: f64,
}

impl Write {
    fn physical(&self) -> f64 {
        self.data * self.physical_per_data
    }
}

/// Reads with `missing` children gone (MiB/s); `engine` is None for the peers.
struct Degraded {
    missing: usize,
    engine: Option<f64>,
    mount: f64,
}

/// One file system's figures on one layout (MiB/s); the engine's are None for the peers.
struct Figures {
    engine_write: Option<Write>,
    engine_read: Option<f64>,
    mount_write: Write,
    mount_read: f64,
    degraded: Vec<Degraded>,
    scrub: f64,
    resilver: Option<f64>,
    /// tarn's resilver: bytes the leaves read and wrote per byte of file data.
    resilver_io: Option<(f64, f64)>,
}

impl Figures {
    /// A peer's figures: through its mount only, without the physical bytes or the resilver's
    /// I/O (tarn's own counters measure those).
    fn of_peer(
        write: f64,
        read: f64,
        degraded: Vec<Degraded>,
        scrub: f64,
        resilver: f64,
    ) -> Figures {
        Figures {
            engine_write: None,
            engine_read: None,
            mount_write: Write {
                data: write,
                physical_per_data: 0.0,
            },
            mount_read: read,
            degraded,
            scrub,
            resilver: Some(resilver),
            resilver_io: None,
        }
    }
}

/// "1 child", "2 children".
fn count(number: usize, one: &str, many: &str) -> String {
    format!("{number} {}", if number == 1 { one } else { many })
}

fn fs_failure(error: tarn::fs::FsError) -> Failure {
    Failure(error.to_string())
}

fn report(message: &str) {
    progress("raidz", message);
}

/// A sparse file of `size` bytes at `path`.
fn sparse_file(path: &Path, size: u64) -> Result<(), Failure> {
    let file = std::fs::File::create(path).map_err(|e| io_failure(path.display(), e))?;
    file.set_len(size)
        .map_err(|e| io_failure(path.display(), e))
}

/// fio's sequential read of `file`, which must hold `size` bytes (fio would otherwise lay out
/// a new file and read that).
fn read_back(file: &Path, size: u64) -> Result<f64, Failure> {
    let length = std::fs::metadata(file)
        .map_err(|e| io_failure(file.display(), e))?
        .len();
    if length < size {
        return Err(Failure(format!(
            "{} holds {length} bytes, not the {size} written",
            file.display()
        )));
    }
    fio(file, size, false, false).map_err(Failure)
}

// ---------------------------------------------------------------------------------------------
// tarn

/// A tarn pool of the benchmark, exported and imported again between phases; destroyed and its
/// directory removed on drop, whatever happened.
struct TarnPool {
    name: String,
    dir: PathBuf,
    tunables: Tunables,
    pool: Option<Pool>,
}

impl TarnPool {
    fn get(&self) -> Result<&Pool, Failure> {
        self.pool
            .as_ref()
            .ok_or_else(|| Failure(format!("pool {} is not imported", self.name)))
    }

    /// Export, drop the page cache, import: nothing is served from memory afterwards.
    fn cycle(&mut self) -> Result<&Pool, Failure> {
        if let Some(pool) = self.pool.take() {
            pool.export()?;
        }
        drop_caches().map_err(Failure)?;
        let (pool, _) = Pool::import(
            &self.name,
            ImportOptions::new(vec![self.dir.clone()], self.tunables.clone()),
        )?;
        Ok(self.pool.insert(pool))
    }
}

impl Drop for TarnPool {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            let _ = pool.destroy();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Write `size` bytes of incompressible data to a new file in 1 MiB pieces through the file
/// system layer, timed to the end of the txg sync that makes them durable.
fn engine_write(pool: &Pool, size: u64) -> Result<Write, Failure> {
    let fs = pool.file_system()?;
    let ino = fs
        .create(fs.root(), ENGINE_FILE, 0o644, 0, 0)
        .map_err(fs_failure)?
        .ino;
    let buffer = pseudo_random(64 << 20, 0x9e37_79b9_7f4a_7c15);
    pool.sync()?;
    let (_, written_before) = leaf_bytes(pool);
    let started = Instant::now();
    for offset in (0..size).step_by(RECORD as usize) {
        let at = (offset % buffer.len() as u64) as usize;
        let done = fs
            .write(ino, offset, &buffer[at..at + RECORD as usize])
            .map_err(fs_failure)?;
        if done as u64 != RECORD {
            return Err(Failure(format!("short write at {offset}: {done} bytes")));
        }
    }
    pool.sync()?;
    let seconds = started.elapsed().as_secs_f64();
    let (_, written_after) = leaf_bytes(pool);
    Ok(Write {
        data: mib_per_second(size, seconds),
        physical_per_data: (written_after - written_before) as f64 / size as f64,
    })
}

/// Read the engine's file back in 1 MiB pieces through the file system layer.
fn engine_read(pool: &Pool, size: u64) -> Result<f64, Failure> {
    let fs = pool.file_system()?;
    let ino = fs.lookup(fs.root(), ENGINE_FILE).map_err(fs_failure)?.ino;
    let started = Instant::now();
    for offset in (0..size).step_by(RECORD as usize) {
        let data = fs.read(ino, offset, RECORD as usize).map_err(fs_failure)?;
        if data.len() as u64 != RECORD {
            return Err(Failure(format!(
                "short read at {offset}: {} bytes",
                data.len()
            )));
        }
    }
    Ok(mib_per_second(size, started.elapsed().as_secs_f64()))
}

/// fio's write through a mount of the pool; the bytes the leaves wrote meanwhile.
fn mount_write(pool: &Pool, mountpoint: &Path, size: u64) -> Result<Write, Failure> {
    let mut handle = mount_pool(pool, mountpoint)?;
    let result = (|| {
        let (_, written_before) = leaf_bytes(pool);
        let data = fio(&mountpoint.join(FIO_FILE), size, true, false).map_err(Failure)?;
        let (_, written_after) = leaf_bytes(pool);
        Ok::<_, Failure>(Write {
            data,
            physical_per_data: (written_after - written_before) as f64 / size as f64,
        })
    })();
    unmount(&mut handle)?;
    result
}

/// fio's read of its file through a mount of the pool, after a drop of the page cache.
fn mount_read(pool: &Pool, mountpoint: &Path, size: u64) -> Result<f64, Failure> {
    let mut handle = mount_pool(pool, mountpoint)?;
    let result = drop_caches()
        .map_err(Failure)
        .and_then(|()| read_back(&mountpoint.join(FIO_FILE), size));
    unmount(&mut handle)?;
    result
}

/// Both reads, each on a freshly imported pool.
fn tarn_reads(tarn: &mut TarnPool, mountpoint: &Path, size: u64) -> Result<(f64, f64), Failure> {
    let engine = engine_read(tarn.cycle()?, size)?;
    let mount = mount_read(tarn.cycle()?, mountpoint, size)?;
    Ok((engine, mount))
}

fn tarn_layout(work: &Path, layout: Layout, size: u64) -> Result<Figures, Failure> {
    let label = layout.label();
    let dir = work.join(format!("tarn-{}", layout.key));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| io_failure(dir.display(), e))?;
    let mountpoint = work.join(format!("mnt-tarn-{}", layout.key));
    let mut tunables = Tunables::from_env().map_err(Failure)?;
    tunables.recordsize = RECORD as u32;
    let paths: Vec<PathBuf> = (0..layout.width)
        .map(|index| dir.join(format!("d{index}.img")))
        .collect();
    let child_size = layout.child_size(2 * size);
    let name = format!("benchraidz{}", layout.key);
    let mut tarn = TarnPool {
        name: name.clone(),
        dir: dir.clone(),
        tunables: tunables.clone(),
        pool: None,
    };
    tarn.pool = Some(Pool::create(CreateOptions {
        name: name.clone(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![if layout.parity == 0 {
            VdevSpec::Leaf(paths[0].clone())
        } else {
            VdevSpec::Raidz {
                parity: layout.parity,
                paths: paths.clone(),
            }
        }],
        create_size: Some(child_size),
        force: true,
        tunables,
        wrap_device: None,
        disabled_features: Vec::new(),
    })?);
    let pool = tarn.get()?;
    pool.set_property(&name, "recordsize", Some("1M"))?;
    pool.set_property(&name, "compression", Some("off"))?;

    report(&format!("tarn {label}: engine write and read"));
    let engine_write = engine_write(pool, size)?;
    let engine_read = engine_read(tarn.cycle()?, size)?;

    report(&format!("tarn {label}: fio write and read through a mount"));
    let mount_write = mount_write(tarn.get()?, &mountpoint, size)?;
    let mount_read = mount_read(tarn.cycle()?, &mountpoint, size)?;

    report(&format!("tarn {label}: scrub"));
    let pool = tarn.cycle()?;
    let started = Instant::now();
    pool.core
        .request_scrub()
        .map_err(|e| Failure(e.to_string()))?;
    finish(pool, ScanFunction::Scrub)?;
    let scrub = mib_per_second(2 * size, started.elapsed().as_secs_f64());

    let mut degraded = Vec::new();
    let mut resilver = None;
    let mut resilver_io = None;
    if layout.parity > 0 {
        let path = |index: usize| paths[index].display().to_string();
        for missing in 1..=layout.parity as usize {
            report(&format!(
                "tarn {label}: reads with {} offline",
                count(missing, "child", "children")
            ));
            tarn.get()?.offline(&path(missing))?;
            let (engine, mount) = tarn_reads(&mut tarn, &mountpoint, size)?;
            degraded.push(Degraded {
                missing,
                engine: Some(engine),
                mount,
            });
        }
        let pool = tarn.get()?;
        for index in 2..=layout.parity as usize {
            pool.online(&path(index))?;
        }
        pool.core.wait_scan(ScanFunction::Resilver)?;

        report(&format!(
            "tarn {label}: resilver of offline child 1 onto a blank file"
        ));
        // Cold, as every other phase: nothing the degraded reads brought in is served from
        // memory.
        let pool = tarn.cycle()?;
        let blank = dir.join("new1.img");
        sparse_file(&blank, child_size)?;
        // The offline child takes no I/O: the leaves' sum moves by the other children's
        // reads and the new child's writes.
        let (read_before, written_before) = leaf_bytes(pool);
        let started = Instant::now();
        let guid = pool.replace(&path(1), Some(&blank), true)?;
        pool.core.wait_scan(ScanFunction::Resilver)?;
        let scanned = started.elapsed().as_secs_f64();
        let (read_after, written_after) = leaf_bytes(pool);
        pool.wait_replaced(guid)?;
        let seconds = started.elapsed().as_secs_f64();
        report(&format!(
            "tarn {label}: resilver scan done after {scanned:.2} s, replace after {seconds:.2} s"
        ));
        resilver = Some(mib_per_second(2 * size, seconds));
        resilver_io = Some((
            read_after.saturating_sub(read_before) as f64 / (2 * size) as f64,
            written_after.saturating_sub(written_before) as f64 / (2 * size) as f64,
        ));
    }
    drop(tarn);
    let _ = std::fs::remove_dir(&mountpoint);
    Ok(Figures {
        engine_write: Some(engine_write),
        engine_read: Some(engine_read),
        mount_write,
        mount_read,
        degraded,
        scrub,
        resilver,
        resilver_io,
    })
}

// ---------------------------------------------------------------------------------------------
// zfs-fuse

/// The zfs-fuse daemon for the run: the one already running, or one started here (and stopped
/// on drop).
struct ZfsFuse {
    started: Option<i32>,
    pidfile: PathBuf,
}

/// The pid of a running zfs-fuse daemon, if any.
fn zfs_fuse_running() -> Option<i32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            (comm.trim() == "zfs-fuse").then_some(pid)
        })
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

impl ZfsFuse {
    /// Why zfs-fuse cannot be measured, or the daemon to use and whether this run started it.
    fn start(work: &Path) -> Result<ZfsFuse, String> {
        if !on_path("zfs-fuse") || !on_path("zpool") {
            return Err("zfs-fuse is not installed (apt-get install zfs-fuse)".into());
        }
        let pidfile = work.join("zfs-fuse.pid");
        if zfs_fuse_running().is_some() {
            return Ok(ZfsFuse {
                started: None,
                pidfile,
            });
        }
        let status = Command::new("zfs-fuse")
            .arg("--pidfile")
            .arg(&pidfile)
            .args(["--no-kstat-mount", "--disable-block-cache"])
            .status()
            .map_err(|e| format!("cannot run zfs-fuse: {e}"))?;
        if !status.success() {
            return Err(format!("zfs-fuse did not start ({status})"));
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let pid = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|text| text.trim().parse::<i32>().ok());
            let answers = Command::new("zpool")
                .args(["list", "-H"])
                .output()
                .is_ok_and(|output| output.status.success());
            if let (Some(pid), true) = (pid, answers) {
                return Ok(ZfsFuse {
                    started: Some(pid),
                    pidfile,
                });
            }
            if Instant::now() > deadline {
                // Whatever started is stopped by the drop of a value that knows its pid.
                drop(ZfsFuse {
                    started: pid.or_else(zfs_fuse_running),
                    pidfile,
                });
                return Err("the zfs-fuse daemon did not answer within 15 s".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for ZfsFuse {
    fn drop(&mut self) {
        if let Some(pid) = self.started {
            // SAFETY: kill has no memory preconditions; the pid is the daemon this run started.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let proc_dir = PathBuf::from(format!("/proc/{pid}"));
            let deadline = Instant::now() + Duration::from_secs(30);
            while proc_dir.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

/// A zfs-fuse pool of the benchmark: destroyed, and its files removed, on drop.
struct ZfsPool {
    name: String,
    dir: PathBuf,
    mountpoint: PathBuf,
}

impl ZfsPool {
    /// Export, drop the page cache, import from the pool's directory (its ARC is empty
    /// afterwards); the file systems are mounted again by the import.
    fn cycle(&self) -> Result<(), Failure> {
        run_command("zpool", &["export", &self.name])?;
        drop_caches().map_err(Failure)?;
        run_command(
            "zpool",
            &["import", "-d", &self.dir.display().to_string(), &self.name],
        )?;
        Ok(())
    }

    /// Wait until no scrub, resilver or replace is in progress.
    fn wait_scan(&self) -> Result<(), Failure> {
        let deadline = Instant::now() + Duration::from_secs(6 * 3600);
        loop {
            let status = run_command("zpool", &["status", &self.name])?;
            if !status.contains("in progress") && !status.contains("replacing") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Failure(format!(
                    "zfs-fuse pool {}: the scan did not end: {status}",
                    self.name
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn read(&self, size: u64) -> Result<f64, Failure> {
        read_back(&self.mountpoint.join(FIO_FILE), size)
    }
}

impl Drop for ZfsPool {
    fn drop(&mut self) {
        let _ = run_command("zpool", &["destroy", "-f", &self.name]);
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir(&self.mountpoint);
    }
}

fn zfs_fuse_layout(work: &Path, layout: Layout, size: u64) -> Result<Figures, Failure> {
    let label = layout.label();
    let name = format!("tarnbench{}", layout.key);
    // A pool of an interrupted run.
    let _ = run_command("zpool", &["destroy", "-f", &name]);
    let pool = ZfsPool {
        name: name.clone(),
        dir: work.join(format!("zfs-{}", layout.key)),
        mountpoint: work.join(format!("mnt-zfs-{}", layout.key)),
    };
    let _ = std::fs::remove_dir_all(&pool.dir);
    std::fs::create_dir_all(&pool.dir).map_err(|e| io_failure(pool.dir.display(), e))?;
    let child_size = layout.child_size(size);
    let paths: Vec<String> = (0..layout.width)
        .map(|index| pool.dir.join(format!("d{index}.img")))
        .map(|path| sparse_file(&path, child_size).map(|()| path.display().to_string()))
        .collect::<Result<_, _>>()?;
    let recordsize = format!("recordsize={ZFS_FUSE_RECORDSIZE}");
    let mountpoint = pool.mountpoint.display().to_string();
    let mut args = vec![
        "create",
        "-f",
        "-O",
        &recordsize,
        "-O",
        "compression=off",
        "-m",
        &mountpoint,
        &name,
        layout.key,
    ];
    args.extend(paths.iter().map(String::as_str));
    run_command("zpool", &args)?;

    report(&format!("zfs-fuse {label}: fio write and read"));
    let write = fio(&pool.mountpoint.join(FIO_FILE), size, true, false).map_err(Failure)?;
    pool.cycle()?;
    let read = pool.read(size)?;

    report(&format!("zfs-fuse {label}: scrub"));
    pool.cycle()?;
    let started = Instant::now();
    run_command("zpool", &["scrub", &name])?;
    pool.wait_scan()?;
    let scrub = mib_per_second(size, started.elapsed().as_secs_f64());

    let mut degraded = Vec::new();
    // Children 1, then 2 (raidz2) go offline.
    for (missing, path) in paths
        .iter()
        .enumerate()
        .skip(1)
        .take(layout.parity as usize)
    {
        report(&format!(
            "zfs-fuse {label}: read with {} offline",
            count(missing, "child", "children")
        ));
        run_command("zpool", &["offline", &name, path])?;
        pool.cycle()?;
        degraded.push(Degraded {
            missing,
            engine: None,
            mount: pool.read(size)?,
        });
    }
    for path in &paths[2..=layout.parity as usize] {
        run_command("zpool", &["online", &name, path])?;
    }
    pool.wait_scan()?;

    report(&format!(
        "zfs-fuse {label}: resilver of offline child 1 onto a blank file"
    ));
    // Cold: zfs-fuse reads its files through the page cache (no O_DIRECT), which the degraded
    // reads just filled with the surviving children; without the cycle its resilver would read
    // them from memory.
    pool.cycle()?;
    let blank = pool.dir.join("new1.img");
    sparse_file(&blank, child_size)?;
    let started = Instant::now();
    run_command(
        "zpool",
        &["replace", &name, &paths[1], &blank.display().to_string()],
    )?;
    pool.wait_scan()?;
    let resilver = mib_per_second(size, started.elapsed().as_secs_f64());
    Ok(Figures::of_peer(write, read, degraded, scrub, resilver))
}

// ---------------------------------------------------------------------------------------------
// btrfs

fn btrfs_layout(work: &Path, layout: Layout, size: u64) -> Result<Figures, Failure> {
    let profile = layout.btrfs_profile();
    let label = format!("{profile} on {} loop devices", layout.width);
    let child_size = layout.child_size(size);
    let mut array = BtrfsArray::create(
        work,
        profile,
        layout.width,
        child_size,
        &["-d", profile, "-m", profile],
        true,
    )?;
    let file = array.mountpoint.join(FIO_FILE);
    // Unmount, drop the page cache, mount with `options`, drop the page cache again (what
    // the mount read).
    let remount = |array: &mut BtrfsArray, options: &str| -> Result<(), Failure> {
        array.unmount()?;
        drop_caches().map_err(Failure)?;
        array.mount(options)?;
        drop_caches().map_err(Failure)
    };

    report(&format!("btrfs {label}: fio write and read"));
    let write = fio(&file, size, true, false).map_err(Failure)?;
    remount(&mut array, "")?;
    let read = read_back(&file, size)?;

    report(&format!("btrfs {label}: scrub"));
    remount(&mut array, "")?;
    let started = Instant::now();
    run_command(
        "btrfs",
        &[
            "scrub",
            "start",
            "-B",
            &array.mountpoint.display().to_string(),
        ],
    )?;
    let scrub = mib_per_second(size, started.elapsed().as_secs_f64());

    let mut degraded = Vec::new();
    for missing in 1..=layout.parity as usize {
        report(&format!(
            "btrfs {label}: read with {} missing",
            count(missing, "device", "devices")
        ));
        array.unmount()?;
        array.detach(missing)?;
        remount(&mut array, "degraded,ro")?;
        degraded.push(Degraded {
            missing,
            engine: None,
            mount: read_back(&file, size)?,
        });
    }
    array.unmount()?;
    for index in 2..=layout.parity as usize {
        array.attach(index)?;
    }

    report(&format!(
        "btrfs {label}: replace of missing device 1 onto a blank one"
    ));
    array.mount("degraded")?;
    let blank = array.add_image(
        work.join(format!("bench-{profile}-btrfs-new.img")),
        child_size,
    )?;
    let target = array.device(blank)?.to_string();
    let started = Instant::now();
    // Device 1 (the second) has devid 2.
    run_command(
        "btrfs",
        &[
            "replace",
            "start",
            "-B",
            "-f",
            "2",
            &target,
            &array.mountpoint.display().to_string(),
        ],
    )?;
    let resilver = mib_per_second(size, started.elapsed().as_secs_f64());
    array.unmount()?;
    Ok(Figures::of_peer(write, read, degraded, scrub, resilver))
}

// ---------------------------------------------------------------------------------------------
// Rows and targets

/// What a row's ratio is held to.
#[derive(Clone, Copy)]
enum Target {
    /// Physical write rate of raidz at least 0.9 of the single-file pool's.
    PhysicalWrite,
    /// Degraded reads at least half of healthy ones.
    DegradedRead,
    /// tarn ahead of zfs-fuse.
    AheadOfZfsFuse,
}

impl Target {
    fn goal(self) -> (&'static str, f64) {
        match self {
            Target::PhysicalWrite => ("raidz physical write >= 0.9 x single file", 0.9),
            Target::DegradedRead => ("degraded read >= 0.5 x healthy", 0.5),
            Target::AheadOfZfsFuse => ("tarn ahead of zfs-fuse", 1.0),
        }
    }

    fn met(self, ratio: f64) -> bool {
        let (_, goal) = self.goal();
        match self {
            Target::AheadOfZfsFuse => ratio > goal,
            _ => ratio >= goal,
        }
    }
}

struct Row {
    comparison: Comparison,
    target: Option<Target>,
}

fn row(
    what: String,
    tarn: f64,
    baseline_what: String,
    baseline: f64,
    target: Option<Target>,
) -> Row {
    Row {
        comparison: Comparison {
            what,
            tarn,
            baseline_what,
            baseline,
        },
        target,
    }
}

/// The rows of one raidz layout: beside the single-file pool, degraded beside healthy, the
/// resilver beside the scrub, and beside each peer measured.
fn layout_rows(
    layout: Layout,
    tarn: &Figures,
    single: &Figures,
    peers: &[(String, Option<Target>, &Figures)],
) -> Vec<Row> {
    let label = layout.label();
    let single_label = SINGLE.label();
    let mut rows = Vec::new();
    if let (Some(write), Some(single_write)) = (tarn.engine_write, single.engine_write) {
        rows.push(row(
            format!("{label}: engine write, data"),
            write.data,
            format!("{single_label}: engine write, data"),
            single_write.data,
            None,
        ));
        rows.push(row(
            format!(
                "{label}: engine write, physical ({:.2} B written per data byte)",
                write.physical_per_data
            ),
            write.physical(),
            format!(
                "{single_label}: engine write, physical ({:.2} B per data byte)",
                single_write.physical_per_data
            ),
            single_write.physical(),
            Some(Target::PhysicalWrite),
        ));
    }
    if let (Some(read), Some(single_read)) = (tarn.engine_read, single.engine_read) {
        rows.push(row(
            format!("{label}: engine read"),
            read,
            format!("{single_label}: engine read"),
            single_read,
            None,
        ));
    }
    rows.push(row(
        format!("{label}: mount write, data"),
        tarn.mount_write.data,
        format!("{single_label}: mount write, data"),
        single.mount_write.data,
        None,
    ));
    rows.push(row(
        format!(
            "{label}: mount write, physical ({:.2} B written per data byte)",
            tarn.mount_write.physical_per_data
        ),
        tarn.mount_write.physical(),
        format!(
            "{single_label}: mount write, physical ({:.2} B per data byte)",
            single.mount_write.physical_per_data
        ),
        single.mount_write.physical(),
        Some(Target::PhysicalWrite),
    ));
    rows.push(row(
        format!("{label}: mount read"),
        tarn.mount_read,
        format!("{single_label}: mount read"),
        single.mount_read,
        None,
    ));
    for degraded in &tarn.degraded {
        let missing = degraded.missing;
        if let (Some(engine), Some(healthy)) = (degraded.engine, tarn.engine_read) {
            rows.push(row(
                format!(
                    "{label}: engine read, {} offline",
                    count(missing, "child", "children")
                ),
                engine,
                format!("{label}: engine read, healthy"),
                healthy,
                Some(Target::DegradedRead),
            ));
        }
        rows.push(row(
            format!(
                "{label}: mount read, {} offline",
                count(missing, "child", "children")
            ),
            degraded.mount,
            format!("{label}: mount read, healthy"),
            tarn.mount_read,
            Some(Target::DegradedRead),
        ));
    }
    rows.push(row(
        format!("{label}: scrub, MiB/s of file data"),
        tarn.scrub,
        format!("{single_label}: scrub"),
        single.scrub,
        None,
    ));
    if let Some(resilver) = tarn.resilver {
        rows.push(row(
            match tarn.resilver_io {
                Some((read, written)) => format!(
                    "{label}: resilver of a whole child (replace; {read:.2} B read, \
                     {written:.2} B written per data byte), MiB/s of file data"
                ),
                None => format!("{label}: resilver of a whole child (replace), MiB/s of file data"),
            },
            resilver,
            format!("{label}: scrub"),
            tarn.scrub,
            None,
        ));
    }
    for (peer, target, figures) in peers {
        rows.push(row(
            format!("{label}: mount write, data"),
            tarn.mount_write.data,
            format!("{peer}: write"),
            figures.mount_write.data,
            *target,
        ));
        rows.push(row(
            format!("{label}: mount read"),
            tarn.mount_read,
            format!("{peer}: read"),
            figures.mount_read,
            *target,
        ));
        for (degraded, peer_degraded) in tarn.degraded.iter().zip(&figures.degraded) {
            let missing = degraded.missing;
            rows.push(row(
                format!(
                    "{label}: mount read, {} offline",
                    count(missing, "child", "children")
                ),
                degraded.mount,
                format!(
                    "{peer}: read, {} missing",
                    count(missing, "device", "devices")
                ),
                peer_degraded.mount,
                *target,
            ));
        }
        rows.push(row(
            format!("{label}: scrub, MiB/s of file data"),
            tarn.scrub,
            format!("{peer}: scrub"),
            figures.scrub,
            *target,
        ));
        if let (Some(resilver), Some(peer_resilver)) = (tarn.resilver, figures.resilver) {
            rows.push(row(
                format!("{label}: resilver of a whole child, MiB/s of file data"),
                resilver,
                format!("{peer}: resilver (replace) of a whole device"),
                peer_resilver,
                *target,
            ));
        }
    }
    rows
}

const TARGET_COLUMNS: &[&str] = &["target", "workload", "baseline", "ratio", "met"];

fn target_rows(rows: &[Row]) -> Vec<Vec<Cell>> {
    rows.iter()
        .filter_map(|row| {
            let target = row.target?;
            let comparison = &row.comparison;
            let ratio = comparison.tarn / comparison.baseline.max(1e-9);
            let met = target.met(ratio);
            Some(vec![
                Cell::text(target.goal().0),
                Cell::text(comparison.what.clone()),
                Cell::text(comparison.baseline_what.clone()),
                super::ratio_cell(ratio),
                Cell {
                    exact: if met { "yes" } else { "no" }.into(),
                    human: if met { "yes" } else { "NO" }.into(),
                    json: met.into(),
                },
            ])
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------

pub fn run(bench: RaidzBench) -> Result<(), Failure> {
    let size = parse_size(&bench.size)?;
    if size < RECORD || !size.is_multiple_of(RECORD) {
        return Err(Failure("--size must be a positive multiple of 1M".into()));
    }
    std::fs::create_dir_all(&bench.dir).map_err(|e| io_failure(bench.dir.display(), e))?;
    let dir = std::fs::canonicalize(&bench.dir).map_err(|e| io_failure(bench.dir.display(), e))?;
    let _lock = BenchDirLock::take(&dir)?;
    let work = dir.join("raidz-bench");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| io_failure(work.display(), e))?;
    let result = run_in(&bench, &work, size);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn run_in(bench: &RaidzBench, work: &Path, size: u64) -> Result<(), Failure> {
    let mut notes = vec![
        format!(
            "tarn: recordsize 1M, compression off, {} of file data per writer and layout \
             (the engine's file and fio's); fio: bs=1M psync, incompressible buffers, \
             end_fsync in the timed write; reads after export, import and a drop of the page cache",
            tarn_protocol::format::human_bytes(size)
        ),
        "physical = bytes written to the vdev files (data, parity, metadata; the leaves' \
         counters) per second"
            .to_string(),
        "scrub and resilver: MiB/s of file data in the pool; resilver = an offline child \
         replaced with a blank file, timed to the end of the replace"
            .to_string(),
    ];
    let single = tarn_layout(work, SINGLE, size)?;
    let mut tarn = Vec::new();
    for layout in RAIDZ {
        tarn.push(tarn_layout(work, layout, size)?);
    }

    let mut zfs_fuse: Vec<Option<Figures>> = RAIDZ.iter().map(|_| None).collect();
    if !bench.no_peers && !bench.no_zfs_fuse {
        match ZfsFuse::start(work) {
            Err(why) => err!("bench raidz: zfs-fuse skipped: {why}"),
            Ok(daemon) => {
                notes.push(format!(
                    "zfs-fuse: recordsize {ZFS_FUSE_RECORDSIZE} (its maximum: pool version 23 \
                     has no large blocks), compression off, {}",
                    if daemon.started.is_some() {
                        "daemon started with --disable-block-cache (its vdev files are opened \
                         without O_DIRECT all the same: the page cache is dropped before every \
                         read, scrub and resilver)"
                    } else {
                        "the daemon already running (its own cache options)"
                    }
                ));
                for (index, layout) in RAIDZ.into_iter().enumerate() {
                    match zfs_fuse_layout(work, layout, size) {
                        Ok(figures) => zfs_fuse[index] = Some(figures),
                        Err(error) => err!(
                            "bench raidz: zfs-fuse {} failed, its rows are left out: {}",
                            layout.label(),
                            error.0
                        ),
                    }
                }
                drop(daemon);
            }
        }
    }
    let mut btrfs: Vec<Option<Figures>> = RAIDZ.iter().map(|_| None).collect();
    if !bench.no_peers && !bench.no_btrfs {
        if btrfs_available() {
            notes.push(
                "btrfs: data and metadata raid5/raid6, loop devices with direct I/O; degraded \
                 reads on a read-only degraded mount with devices detached; resilver = btrfs \
                 replace of a missing device"
                    .into(),
            );
            for (index, layout) in RAIDZ.into_iter().enumerate() {
                match btrfs_layout(work, layout, size) {
                    Ok(figures) => btrfs[index] = Some(figures),
                    Err(error) => err!(
                        "bench raidz: btrfs {} failed, its rows are left out: {}",
                        layout.btrfs_profile(),
                        error.0
                    ),
                }
            }
        } else {
            err!("bench raidz: btrfs skipped (needs mkfs.btrfs and root)");
        }
    }

    let mut rows = Vec::new();
    for (index, layout) in RAIDZ.into_iter().enumerate() {
        let mut peers = Vec::new();
        if let Some(figures) = &zfs_fuse[index] {
            peers.push((
                format!(
                    "zfs-fuse {} (recordsize {ZFS_FUSE_RECORDSIZE})",
                    layout.label()
                ),
                Some(Target::AheadOfZfsFuse),
                figures,
            ));
        }
        if let Some(figures) = &btrfs[index] {
            peers.push((
                format!(
                    "btrfs {} on {} loop devices",
                    layout.btrfs_profile(),
                    layout.width
                ),
                None,
                figures,
            ));
        }
        rows.extend(layout_rows(layout, &tarn[index], &single, &peers));
    }

    let targets = target_rows(&rows);
    let comparisons: Vec<Comparison> = rows.into_iter().map(|row| row.comparison).collect();
    if bench.json {
        let targets: Vec<serde_json::Value> = targets
            .iter()
            .map(|cells| {
                serde_json::Value::Object(
                    TARGET_COLUMNS
                        .iter()
                        .zip(cells)
                        .map(|(column, cell)| (column.to_string(), cell.json.clone()))
                        .collect(),
                )
            })
            .collect();
        let document = serde_json::json!({
            "raidz": comparisons_json(&comparisons),
            "targets": targets,
            "notes": notes,
        });
        tarn_protocol::json::Document::of("tarn bench raidz", document).print();
        return Ok(());
    }
    print_comparisons(
        &comparisons,
        ("tarn_mib_s", "baseline_mib_s"),
        false,
        "raidz",
    )?;
    out!();
    out!("targets:");
    print_table(
        TARGET_COLUMNS,
        &targets,
        &ListFormat::default(),
        "tarn bench raidz",
        "targets",
    )
    .map_err(Failure)?;
    out!();
    for note in &notes {
        out!("note: {note}");
    }
    Ok(())
}
