//! `tarn bench clone-destroy`: what destroying a sparse clone costs, with and without
//! livelists, beside btrfs.
//!
//! For each origin size N (`-s`, default 1G, 4G and 16G): a pool on a sparse file, a file
//! system with recordsize 8K (compression off) holding one file of N bytes, a snapshot, and
//! clones of it, each given `--overwrites` scattered 8 KiB overwrites. Each clone's destroy is
//! timed end to end: from the destroy until the space is back (`freeing` 0 and no background
//! free pending, polled every [`POLL`]) and a sync has committed it. *Warm*: a clone destroyed
//! right after its overwrites were synced. *Cold*: a clone destroyed right after an export, a
//! drop of the page cache and an import (nothing of the pool cached). Three clones of each,
//! the median reported, with its phases (the destroy's own txgs, the wait for the background
//! free, the last sync). Once in a pool with `feature@livelist` (destroy frees the livelist's
//! live entries) and once in a pool without it (destroy walks the clone's tree above the
//! origin). With `mkfs.btrfs` available (and
//! root), the same on btrfs on a loop device in the same directory: a subvolume, a writable
//! snapshot per measurement with the overwrites, then `btrfs subvolume delete -C` (the delete
//! committed), polling `btrfs subvolume list -d` every [`POLL`] until the cleaner has dropped
//! the snapshot, and `btrfs filesystem sync` (its frees committed): warm right after the
//! overwrites were synced, cold after an unmount, a drop of the page cache and a mount. Both
//! sides are polled alike; `btrfs subvolume sync` is not used, because it sleeps a whole second
//! between its checks and so measured its own poll (1.0 s whatever the size).
//!
//! Also the write-time cost of livelists: `--write-ops` random 8 KiB overwrites in a clone of
//! the smallest origin, a sync every 256, feature on beside feature off (alternated twice, the
//! better of each).
//!
//! It is a benchmark, not a test: it asserts nothing; it prints each figure with its baseline
//! and the ratio. Progress goes to a terminal only.

use std::io::IsTerminal;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use tarn::fs::FileSystem;
use tarn::pool::livelists::DestroyPath;
use tarn::pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;
use tarn_protocol::error::Failure;
use tarn_protocol::format::parse_size;

use super::sync::run_command;
use super::{btrfs_available, io_failure, on_btrfs};
use super::{print_comparisons, BenchDirLock, Comparison};

#[derive(Args)]
pub struct CloneDestroyBench {
    /// Directory for the vdevs and the btrfs image (sparse files).
    #[arg(long, default_value = "/var/tmp/tarn-bench")]
    dir: PathBuf,
    /// Origin sizes, comma-separated (e.g. 64M,256M for a quick run).
    #[arg(short = 's', long, default_value = "1G,4G,16G", value_delimiter = ',')]
    sizes: Vec<String>,
    /// Scattered 8 KiB overwrites in each clone.
    #[arg(long, default_value_t = 2000)]
    overwrites: u64,
    /// Random 8 KiB overwrites of the write-cost measurement.
    #[arg(long, default_value_t = 20_000)]
    write_ops: u64,
    /// Skip btrfs even if mkfs.btrfs is available.
    #[arg(long)]
    no_btrfs: bool,
    /// JSON output.
    #[arg(short = 'j')]
    json: bool,
}

const POOL: &str = "benchclone";
pub(super) const RECORD: u64 = 8192;

fn progress(message: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("bench clone-destroy: {message}");
    }
}

fn fs_failure(error: tarn::fs::FsError) -> Failure {
    Failure(error.to_string())
}

/// The record indices of `count` scattered overwrites in a file of `records` records.
fn scattered(records: u64, count: u64, seed: u64) -> impl Iterator<Item = u64> {
    let mut state = seed | 1;
    (0..count).map(move |_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % records
    })
}

fn vdev_size(origin: u64) -> u64 {
    origin + origin / 4 + (1 << 30)
}

fn create(dir: &Path, origin: u64, livelist: bool) -> Result<Pool, Failure> {
    let vdev = dir.join("bench-clone-vdev0.img");
    let _ = std::fs::remove_file(&vdev);
    let tunables = Tunables::from_env().map_err(Failure)?;
    Ok(Pool::create(CreateOptions {
        name: POOL.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Leaf(vdev)],
        create_size: Some(vdev_size(origin)),
        force: true,
        tunables,
        wrap_device: None,
        disabled_features: if livelist {
            Vec::new()
        } else {
            vec!["livelist".into()]
        },
    })?)
}

fn remove_pool(pool: Pool, dir: &Path) -> Result<(), Failure> {
    pool.destroy()?;
    let _ = std::fs::remove_file(dir.join("bench-clone-vdev0.img"));
    Ok(())
}

/// Clones destroyed per size and mode; the median is reported (the machine is shared).
const CLONES: u64 = 3;

/// The origin file system with one file of `origin` bytes, its snapshot and clones
/// `clone0`..`clone{count - 1}`.
pub(super) fn origin_and_clones(pool: &Pool, origin: u64, count: u64) -> Result<(), Failure> {
    let pool_name = pool.name();
    pool.create_dataset(
        &format!("{pool_name}/fs"),
        &[
            ("recordsize".into(), RECORD.to_string()),
            ("compression".into(), "off".into()),
        ],
        false,
    )?;
    let fs = pool.open_file_system(&format!("{pool_name}/fs"))?;
    let ino = fs
        .create(fs.root(), b"big", 0o644, 0, 0)
        .map_err(fs_failure)?
        .ino;
    let chunk = tarn_protocol::format::pseudo_random(1 << 20, 0xc10e);
    let mut written = 0u64;
    while written < origin {
        let length = (origin - written).min(chunk.len() as u64) as usize;
        fs.write(ino, written, &chunk[..length])
            .map_err(fs_failure)?;
        written += length as u64;
    }
    drop(fs);
    pool.sync()?;
    pool.create_snapshots(&[format!("{pool_name}/fs@origin")], false)?;
    for index in 0..count {
        pool.create_clone(
            &format!("{pool_name}/fs@origin"),
            &format!("{pool_name}/clone{index}"),
            &[],
        )?;
    }
    Ok(())
}

pub(super) fn overwrite(
    pool: &Pool,
    fs: &FileSystem,
    records: u64,
    count: u64,
    seed: u64,
) -> Result<(), Failure> {
    let ino = fs.lookup(fs.root(), b"big").map_err(fs_failure)?.ino;
    let block = tarn_protocol::format::pseudo_random(RECORD as usize, seed);
    for (index, record) in scattered(records, count, seed).enumerate() {
        fs.write(ino, record * RECORD, &block).map_err(fs_failure)?;
        if index % 256 == 255 {
            pool.sync()?;
        }
    }
    pool.sync()?;
    Ok(())
}

/// How often both sides are asked whether a destroy's space is back.
const POLL: Duration = Duration::from_millis(2);

/// One timed destroy, end to end and by phase (seconds).
#[derive(Clone, Copy)]
struct Timed {
    total: f64,
    /// `destroy_dataset`: the sync of what the clone still had open, and the txg of the destroy.
    destroy: f64,
    /// Polling until the background free is done.
    wait: f64,
    /// The sync that commits the frees.
    sync: f64,
}

impl Timed {
    /// The phases between four instants: started, destroyed, freed, synced.
    fn from_marks(started: Instant, destroyed: Instant, freed: Instant, synced: Instant) -> Timed {
        Timed {
            total: (synced - started).as_secs_f64(),
            destroy: (destroyed - started).as_secs_f64(),
            wait: (freed - destroyed).as_secs_f64(),
            sync: (synced - freed).as_secs_f64(),
        }
    }
}

/// The run of median total time among `runs`.
fn median(mut runs: Vec<Timed>) -> Timed {
    runs.sort_by(|a, b| a.total.total_cmp(&b.total));
    runs[runs.len() / 2]
}

/// What the clone destroys of one size and mode measured.
struct Destroyed {
    /// The median of [`CLONES`] clones destroyed right after their overwrites.
    warm: Timed,
    /// The median of [`CLONES`] clones, each destroyed right after an export, a drop of the
    /// page cache and an import.
    cold: Timed,
    path: DestroyPath,
    /// A clone's own bytes (`usedbydataset`: its data and the indirect blocks it rewrote).
    own_bytes: u64,
}

/// The phases of `timed` in milliseconds, the first two named `first` and `second`.
fn phases(timed: &Timed, first: &str, second: &str) -> String {
    format!(
        "{first} {:.0} + {second} {:.0} + sync {:.0} ms",
        timed.destroy * 1e3,
        timed.wait * 1e3,
        timed.sync * 1e3
    )
}

/// Destroy clone `name` and time it until its space is back, polled every [`POLL`], and a
/// sync has committed that: what `tarn destroy`, `pool wait -t free` and `pool sync` do.
fn timed_destroy(pool: &Pool, name: &str) -> Result<Timed, Failure> {
    let started = Instant::now();
    pool.destroy_dataset(name, false)?;
    let destroyed = Instant::now();
    while pool.core.freeing_bytes()? != 0 || pool.core.background_work_pending() {
        std::thread::sleep(POLL);
    }
    let freed = Instant::now();
    pool.sync()?;
    let synced = Instant::now();
    Ok(Timed::from_marks(started, destroyed, freed, synced))
}

/// Clone destroys in a fresh pool: [`CLONES`] warm, then [`CLONES`] cold.
fn tarn_destroy(
    dir: &Path,
    origin: u64,
    overwrites: u64,
    livelist: bool,
) -> Result<Destroyed, Failure> {
    let pool = create(dir, origin, livelist)?;
    let clone_name = |index: u64| format!("{POOL}/clone{index}");
    let result = (|| {
        origin_and_clones(&pool, origin, 2 * CLONES)?;
        let mut warm = Vec::new();
        for index in 0..2 * CLONES {
            let clone = pool.open_file_system(&clone_name(index))?;
            overwrite(&pool, &clone, origin / RECORD, overwrites, 0x5ca7 + index)?;
            drop(clone);
            if index < CLONES {
                warm.push(timed_destroy(&pool, &clone_name(index))?);
            }
        }
        Ok::<_, Failure>(median(warm))
    })();
    let warm = match result {
        Ok(warm) => warm,
        Err(error) => {
            let _ = remove_pool(pool, dir);
            return Err(error);
        }
    };
    // Cold: each clone destroyed right after an export and import.
    let mut pool = pool;
    let mut cold = Vec::new();
    let mut path = DestroyPath::Traversal;
    let mut own_bytes = 0;
    for index in CLONES..2 * CLONES {
        pool.export()?;
        // As on the btrfs side: the vdev file's pages leave the page cache too.
        let _ = std::fs::write("/proc/sys/vm/drop_caches", b"3");
        let tunables = Tunables::from_env().map_err(Failure)?;
        pool = Pool::import(POOL, ImportOptions::new(vec![dir.to_path_buf()], tunables))?.0;
        let name = clone_name(index);
        let result = (|| {
            path = pool.destroy_path(&name)?;
            own_bytes = pool
                .datasets()
                .into_iter()
                .find(|info| info.name == name)
                .map_or(0, |info| info.used_by_dataset);
            timed_destroy(&pool, &name)
        })();
        match result {
            Ok(seconds) => cold.push(seconds),
            Err(error) => {
                let _ = remove_pool(pool, dir);
                return Err(error);
            }
        }
    }
    remove_pool(pool, dir)?;
    Ok(Destroyed {
        warm,
        cold: median(cold),
        path,
        own_bytes,
    })
}

/// Random 8 KiB overwrites in a clone: operations per second.
fn write_cost(dir: &Path, origin: u64, ops: u64, livelist: bool) -> Result<f64, Failure> {
    let pool = create(dir, origin, livelist)?;
    let result = (|| {
        origin_and_clones(&pool, origin, 1)?;
        let clone = pool.open_file_system(&format!("{POOL}/clone0"))?;
        let started = Instant::now();
        overwrite(&pool, &clone, origin / RECORD, ops, 0x77)?;
        Ok::<_, Failure>(ops as f64 / started.elapsed().as_secs_f64())
    })();
    remove_pool(pool, dir)?;
    result
}

/// What the btrfs snapshot deletes of one size measured: medians of [`CLONES`] each.
struct BtrfsDestroyed {
    warm: Timed,
    cold: Timed,
}

/// Delete subvolume `snapshot` of the btrfs at `mountpoint` and time it until the cleaner has
/// dropped it (`subvolume list -d` empty, polled every [`POLL`]) and a `filesystem sync` has
/// committed that.
fn btrfs_timed_delete(mountpoint: &str, snapshot: &Path) -> Result<Timed, Failure> {
    let started = Instant::now();
    run_command(
        "btrfs",
        &["subvolume", "delete", "-C", &snapshot.display().to_string()],
    )?;
    let destroyed = Instant::now();
    while !run_command("btrfs", &["subvolume", "list", "-d", mountpoint])?.is_empty() {
        std::thread::sleep(POLL);
    }
    let freed = Instant::now();
    run_command("btrfs", &["filesystem", "sync", mountpoint])?;
    let synced = Instant::now();
    Ok(Timed::from_marks(started, destroyed, freed, synced))
}

/// The btrfs half for one size: snapshots of a subvolume holding the origin, each with the
/// overwrites, deleted warm and cold.
fn btrfs_destroy(dir: &Path, origin: u64, overwrites: u64) -> Result<BtrfsDestroyed, Failure> {
    on_btrfs(dir, "clone", vdev_size(origin), |mountpoint, device| {
        let mount_text = mountpoint.display().to_string();
        let volume = mountpoint.join("vol");
        run_command(
            "btrfs",
            &["subvolume", "create", &volume.display().to_string()],
        )?;
        let path = volume.join("big");
        let file = std::fs::File::create(&path).map_err(|e| io_failure(path.display(), e))?;
        let chunk = tarn_protocol::format::pseudo_random(1 << 20, 0xc10e);
        let mut written = 0u64;
        while written < origin {
            let length = (origin - written).min(chunk.len() as u64) as usize;
            file.write_all_at(&chunk[..length], written)
                .map_err(|e| io_failure(path.display(), e))?;
            written += length as u64;
        }
        file.sync_all().map_err(|e| io_failure(path.display(), e))?;
        drop(file);
        // A writable snapshot of the subvolume with the overwrites, synced.
        let snapshot_with_overwrites = |index: u64| -> Result<PathBuf, Failure> {
            let snapshot = mountpoint.join(format!("snap{index}"));
            run_command(
                "btrfs",
                &[
                    "subvolume",
                    "snapshot",
                    &volume.display().to_string(),
                    &snapshot.display().to_string(),
                ],
            )?;
            let path = snapshot.join("big");
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| io_failure(path.display(), e))?;
            let block = tarn_protocol::format::pseudo_random(RECORD as usize, 0x5ca7 + index);
            for record in scattered(origin / RECORD, overwrites, 0x5ca7 + index) {
                file.write_all_at(&block, record * RECORD)
                    .map_err(|e| io_failure(path.display(), e))?;
            }
            file.sync_all().map_err(|e| io_failure(path.display(), e))?;
            run_command("btrfs", &["filesystem", "sync", &mount_text])?;
            Ok(snapshot)
        };
        let mut warm = Vec::new();
        let mut cold_snapshots = Vec::new();
        for index in 0..2 * CLONES {
            let snapshot = snapshot_with_overwrites(index)?;
            if index < CLONES {
                warm.push(btrfs_timed_delete(&mount_text, &snapshot)?);
            } else {
                cold_snapshots.push(snapshot);
            }
        }
        let mut cold = Vec::new();
        for snapshot in cold_snapshots {
            // Cold: unmount, drop the page cache, mount again.
            run_command("umount", &[&mount_text])?;
            let _ = std::fs::write("/proc/sys/vm/drop_caches", b"3");
            run_command("mount", &["-t", "btrfs", device, &mount_text])?;
            cold.push(btrfs_timed_delete(&mount_text, &snapshot)?);
        }
        Ok(BtrfsDestroyed {
            warm: median(warm),
            cold: median(cold),
        })
    })
}

pub fn run(bench: CloneDestroyBench) -> Result<(), Failure> {
    std::fs::create_dir_all(&bench.dir)
        .map_err(|e| Failure(format!("{}: {e}", bench.dir.display())))?;
    let _lock = BenchDirLock::take(&bench.dir)?;
    let mut sizes = Vec::new();
    for text in &bench.sizes {
        let size = parse_size(text)?;
        if size < 1 << 20 {
            return Err(Failure(format!(
                "origin size {text} is too small (at least 1M)"
            )));
        }
        sizes.push((text.clone(), size / RECORD * RECORD));
    }
    let btrfs = !bench.no_btrfs && btrfs_available();
    let mut rows = Vec::new();
    let mut livelist_times = Vec::new();
    for (label, size) in &sizes {
        progress(&format!("{label}: clone destroy with livelists"));
        let with = tarn_destroy(&bench.dir, *size, bench.overwrites, true)?;
        progress(&format!("{label}: clone destroy without livelists"));
        let without = tarn_destroy(&bench.dir, *size, bench.overwrites, false)?;
        livelist_times.push((label.clone(), with.cold.total));
        let btrfs_times = if btrfs {
            progress(&format!("{label}: btrfs subvolume delete"));
            Some(btrfs_destroy(&bench.dir, *size, bench.overwrites)?)
        } else {
            None
        };
        rows.push(Comparison {
            what: format!(
                "clone destroy, {label} origin (clone owns {} MiB), feature@livelist (path: {}), cold",
                with.own_bytes >> 20,
                with.path.name()
            ),
            tarn: with.cold.total,
            baseline_what: format!("no livelist (path: {}), cold", without.path.name()),
            baseline: without.cold.total,
        });
        rows.push(Comparison {
            what: format!("clone destroy, {label} origin, feature@livelist, warm"),
            tarn: with.warm.total,
            baseline_what: "no livelist, warm".into(),
            baseline: without.warm.total,
        });
        if let Some(btrfs) = btrfs_times {
            for (state, tarn, btrfs) in [
                ("cold", with.cold, btrfs.cold),
                ("warm", with.warm, btrfs.warm),
            ] {
                rows.push(Comparison {
                    what: format!(
                        "clone destroy, {label} origin, feature@livelist, {state} ({})",
                        phases(&tarn, "destroy", "free")
                    ),
                    tarn: tarn.total,
                    baseline_what: format!(
                        "btrfs subvolume delete -C, {label}, {state} ({})",
                        phases(&btrfs, "delete", "cleaner")
                    ),
                    baseline: btrfs.total,
                });
            }
        }
    }
    if let Some((first_label, first)) = livelist_times.first().cloned() {
        for (label, seconds) in livelist_times.iter().skip(1) {
            rows.push(Comparison {
                what: format!("livelist clone destroy, {label} origin, cold"),
                tarn: *seconds,
                baseline_what: format!("the same, {first_label} origin"),
                baseline: first,
            });
        }
    }
    let (_, smallest) = sizes[0];
    progress(&format!(
        "{} random 8K overwrites in a clone, livelists on and off",
        bench.write_ops
    ));
    // Alternated twice, the better of each kept (the machine is shared).
    let (mut on, mut off) = (0f64, 0f64);
    for _ in 0..2 {
        on = on.max(write_cost(&bench.dir, smallest, bench.write_ops, true)?);
        off = off.max(write_cost(&bench.dir, smallest, bench.write_ops, false)?);
    }
    rows.push(Comparison {
        what: "random 8K overwrites in a clone, feature@livelist (ops/s)".into(),
        tarn: on,
        baseline_what: "the same without the feature (ops/s)".into(),
        baseline: off,
    });
    if !btrfs {
        progress("btrfs skipped (needs mkfs.btrfs and root, or --no-btrfs was given)");
    }

    print_comparisons(
        &rows,
        ("tarn", "baseline_value"),
        bench.json,
        "clone-destroy",
    )
}
