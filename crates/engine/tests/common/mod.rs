//! Helpers shared by the integration tests: pools on sparse files under the tiny test
//! configuration, deterministic data, and a `check` that must come back clean.

#![allow(dead_code)]

pub mod gang;
pub mod tree;

use std::path::{Path, PathBuf};

use tarn::block::blkptr::{ChecksumType, Compression, ObjectType};
use tarn::check::check_pool;
use tarn::object::{ObjectProps, ObjectSet};
use tarn::pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;
use tarn::types::ObjectId;

pub const VDEV_SIZE: u64 = 96 << 20;

pub fn tiny() -> Tunables {
    Tunables::tiny()
}

pub fn create_pool(dir: &Path, name: &str, vdevs: Vec<VdevSpec>, tunables: Tunables) -> Pool {
    create_pool_without(dir, name, vdevs, tunables, &[])
}

/// [`create_pool`] with the features `disabled` left off (`zpool create -o feature@X=disabled`).
pub fn create_pool_without(
    _dir: &Path,
    name: &str,
    vdevs: Vec<VdevSpec>,
    tunables: Tunables,
    disabled: &[&str],
) -> Pool {
    Pool::create(CreateOptions {
        name: name.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs,
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables,
        wrap_device: None,
        disabled_features: disabled.iter().map(|name| name.to_string()).collect(),
    })
    .expect("create pool")
}

pub fn single(dir: &Path, file: &str) -> Vec<VdevSpec> {
    vec![VdevSpec::Leaf(dir.join(file))]
}

pub fn import(dir: &Path, name: &str, tunables: Tunables) -> Pool {
    let (pool, _) = Pool::import(name, ImportOptions::new(vec![dir.to_path_buf()], tunables))
        .expect("import pool");
    pool
}

pub fn dirs(dir: &Path) -> Vec<PathBuf> {
    vec![dir.to_path_buf()]
}

/// Run `check` on an open pool after a sync, and fail the test with the report if it is not clean.
pub fn assert_clean(pool: &Pool) {
    pool.sync().expect("sync before check");
    let report = check_pool(pool, false).expect("check runs");
    assert!(report.is_clean(), "check found problems: {report:#?}");
    assert!(report.blocks > 0, "check visited no blocks");
}

pub fn file_props(block_size: u32, compression: Compression) -> ObjectProps {
    ObjectProps {
        object_type: ObjectType::PlainFile,
        data_block_size: block_size,
        indirect_block_shift: 10,
        checksum: ChecksumType::Fletcher4,
        compression,
        copies: 1,
    }
}

pub fn create_file(
    pool: &Pool,
    objset: &ObjectSet,
    block_size: u32,
    compression: Compression,
) -> ObjectId {
    let hold = pool.assign().expect("assign");
    objset
        .create_object(
            &hold.tx(),
            file_props(block_size, compression),
            ObjectType::None,
            &[],
        )
        .expect("create object")
}

/// Deterministic bytes: a mix of compressible and incompressible content by `seed`.
pub fn pattern(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let compressible = seed.is_multiple_of(3);
    let mut out = Vec::with_capacity(length + 8);
    while out.len() < length {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        if compressible {
            out.extend_from_slice(&[(state & 0xff) as u8; 8]);
        } else {
            out.extend_from_slice(&state.to_le_bytes());
        }
    }
    out.truncate(length);
    out
}

/// The test harness's name of test `function` in the module whose `module_path!()` is
/// `module`: the module's path without the crate's name, then the function (the engine's
/// integration tests are modules of a few binaries, see `suite_pool.rs`).
pub fn test_name(module: &str, function: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{function}"),
        None => function.to_string(),
    }
}

/// Start this test binary's test `entry` of `module` (the caller's `module_path!()`) as a
/// child process with `env` (the crash tests' child), its output discarded.
pub fn spawn_child(module: &str, entry: &str, env: &[(&str, String)]) -> std::process::Child {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .arg(test_name(module, entry))
        .args(["--exact", "--nocapture", "--test-threads=1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    command.spawn().unwrap()
}

/// Kill a child with SIGKILL and reap it.
pub fn kill_child(mut child: std::process::Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Run this test binary's test `entry` of `module` as a child process with `env`, let it work for
/// `run_for`, then kill it with SIGKILL and reap it.
pub fn run_child_then_kill(
    module: &str,
    entry: &str,
    env: &[(&str, String)],
    run_for: std::time::Duration,
) {
    let child = spawn_child(module, entry, env);
    std::thread::sleep(run_for);
    kill_child(child);
}

/// Whole lines starting with `prefix` in the file at `path`, 0 if there is none: the crash
/// tests' children append one per unit of work done (a receive finished, a generation synced,
/// `+ N` for a snapshot or dataset created).
pub fn count_lines(path: &Path, prefix: &str) -> u64 {
    std::fs::read_to_string(path).map_or(0, |text| {
        text.split_inclusive('\n')
            .filter(|line| line.ends_with('\n') && line.starts_with(prefix))
            .count() as u64
    })
}

/// How long a crash test's child may go without doing any work before the test fails.
const CHILD_STALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// When a crash loop's round kills its child (see [`crash_round`]).
pub struct KillPoint<'a> {
    /// Even rounds: milliseconds after the start, drawn from this range.
    pub after_ms: std::ops::Range<u64>,
    /// Odd rounds: the file the child appends a line to per unit of work done...
    pub progress: &'a Path,
    /// ...the lines that count (those starting with this)...
    pub prefix: &'a str,
    /// ...how many more of them to wait for...
    pub units: u64,
    /// ...and milliseconds more after them, drawn from this range.
    pub then_ms: std::ops::Range<u64>,
}

/// Round `round` of a crash loop: run this test binary's test `entry` of `module` as a child
/// process with `env`, kill it with SIGKILL and reap it. Even rounds kill it after a random
/// time (any point: its import, its first operation); odd rounds once it has reported
/// `at.units` more units of work, and a random time after that. The loops' floors of work done
/// count the odd rounds, which hold whatever the machine's load: a child killed after a fixed
/// time does nothing on a loaded machine (CI runs two test binaries and the functional suite
/// at once). Fails if the child exits, or does no work for [`CHILD_STALL_LIMIT`].
pub fn crash_round(
    module: &str,
    entry: &str,
    env: &[(&str, String)],
    round: usize,
    rng: &mut impl rand::Rng,
    at: &KillPoint<'_>,
) {
    if round.is_multiple_of(2) {
        let after = std::time::Duration::from_millis(rng.gen_range(at.after_ms.clone()));
        return run_child_then_kill(module, entry, env, after);
    }
    // Counted before the child starts: it may report work at once.
    let target = count_lines(at.progress, at.prefix) + at.units;
    let mut child = spawn_child(module, entry, env);
    let mut last = 0;
    let mut last_progress = std::time::Instant::now();
    loop {
        let done = count_lines(at.progress, at.prefix);
        if done >= target {
            break;
        }
        if done > last {
            last = done;
            last_progress = std::time::Instant::now();
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("round {round}: the child of {entry} exited ({status}) at {done} of {target}");
        }
        if last_progress.elapsed() > CHILD_STALL_LIMIT {
            kill_child(child);
            panic!("round {round}: the child of {entry} did no work for {CHILD_STALL_LIMIT:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(
        rng.gen_range(at.then_ms.clone()),
    ));
    kill_child(child);
}

/// Wait until `path` exists (a marker a child writes), failing the test after `limit`.
pub fn wait_for_file(path: &Path, limit: std::time::Duration) {
    let started = std::time::Instant::now();
    while !path.exists() {
        assert!(
            started.elapsed() < limit,
            "{} did not appear within {limit:?}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Allocated bytes after the log space map is flushed (`Pool::flush_log_space_map`): without
/// it, the logs kept at that moment (a few blocks per txg of the last ones) would count.
pub fn allocated_settled(pool: &Pool) -> u64 {
    pool.flush_log_space_map().expect("flush the log space map");
    pool.core.io.space.totals().allocated
}

/// The pool's root file system, opened in-process (replaying its intent log if it has one).
pub fn open_fs(pool: &Pool) -> tarn::fs::FileSystem {
    tarn::fs::FileSystem::open(pool.root_objset(), pool.core.txgs.clone()).expect("open fs")
}

/// The file `name` in the root directory of `fs`, created (mode 0644) if it is not there.
pub fn root_file(fs: &tarn::fs::FileSystem, name: &str) -> u64 {
    match fs.lookup(fs.root(), name.as_bytes()) {
        Ok(attr) => attr.ino,
        Err(_) => {
            fs.create(fs.root(), name.as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino
        }
    }
}

/// `check` of the pool must find nothing wrong (`what` names the moment in the message).
pub fn check_clean(pool: &Pool, what: &str) {
    let report = check_pool(pool, false).expect("check runs");
    assert!(
        report.is_clean(),
        "{what}: check found problems: {report:#?}"
    );
}

/// The whole contents of file `ino`.
pub fn read_all(fs: &tarn::fs::FileSystem, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    fs.read(ino, 0, size as usize).unwrap()
}

/// A device wrapper putting every device of a pool behind the fault layer, under `plan`.
pub fn fault_wrapper(plan: std::sync::Arc<tarn::vdev::FaultPlan>) -> tarn::pool::DeviceWrapper {
    std::sync::Arc::new(
        move |_path: &Path, device: std::sync::Arc<dyn tarn::vdev::BlockDevice>| {
            std::sync::Arc::new(tarn::vdev::FaultyDevice::new(device, plan.clone()))
                as std::sync::Arc<dyn tarn::vdev::BlockDevice>
        },
    )
}

/// The on-disk extent (file offset, bytes) of the only copy of data block `blkid` of `ino`.
pub fn data_block_extent(pool: &Pool, ino: u64, blkid: usize) -> (u64, u64) {
    let objset = pool.root_objset();
    let (_, dnode) = objset
        .synced_objects()
        .unwrap()
        .into_iter()
        .find(|(object, _)| *object == ObjectId(ino))
        .expect("the file's dnode is synced");
    let mut data_blocks = Vec::new();
    tarn::object::tree::visit_tree(&pool.core.io, &dnode, &mut |bp| {
        if bp.level == 0 && !bp.is_hole() && !bp.embedded {
            data_blocks.push(bp.clone());
        }
        Ok(())
    })
    .unwrap();
    let bp = &data_blocks[blkid];
    let dvas: Vec<_> = bp.copies().collect();
    assert_eq!(dvas.len(), 1, "file data has one copy");
    (
        tarn::vdev::label::VDEV_LABEL_START_SIZE + dvas[0].offset,
        dvas[0].size_allocated,
    )
}

/// Overwrite the on-disk extent `(offset, size)` of the vdev file `path` with a constant byte.
pub fn damage(path: &Path, (offset, size): (u64, u64)) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(&vec![0x5a; size as usize], offset)
        .unwrap();
    file.sync_all().unwrap();
}

/// Leaf path to its own fault plan, for [`per_path_fault_wrapper`].
pub type Plans = std::collections::BTreeMap<PathBuf, std::sync::Arc<tarn::vdev::FaultPlan>>;

/// A wrapper giving each leaf path its own fault plan (made on first open, kept across imports).
pub fn per_path_fault_wrapper(
    plans: std::sync::Arc<parking_lot::Mutex<Plans>>,
) -> tarn::pool::DeviceWrapper {
    std::sync::Arc::new(
        move |path: &Path, device: std::sync::Arc<dyn tarn::vdev::BlockDevice>| {
            let plan = plans.lock().entry(path.to_path_buf()).or_default().clone();
            std::sync::Arc::new(tarn::vdev::FaultyDevice::new(device, plan))
                as std::sync::Arc<dyn tarn::vdev::BlockDevice>
        },
    )
}

/// A reader fed in pieces from another thread: a stream that arrives over time (a receive
/// whose input stalls until the test sends the next piece; closing the sender is the end).
pub struct Arriving {
    pub pieces: std::sync::mpsc::Receiver<Vec<u8>>,
    pub current: Vec<u8>,
    pub at: usize,
}

impl Arriving {
    pub fn new(pieces: std::sync::mpsc::Receiver<Vec<u8>>) -> Arriving {
        Arriving {
            pieces,
            current: Vec::new(),
            at: 0,
        }
    }
}

impl std::io::Read for Arriving {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.current.len() {
            match self.pieces.recv() {
                Ok(piece) => {
                    self.current = piece;
                    self.at = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let length = buf.len().min(self.current.len() - self.at);
        buf[..length].copy_from_slice(&self.current[self.at..self.at + length]);
        self.at += length;
        Ok(length)
    }
}

/// Write `count` files of `bytes` deterministic bytes each (16 KiB blocks, no compression),
/// seeds from `seed` on, in one txg each, then sync; returns (object, seed) per file.
pub fn write_files(pool: &Pool, seed: u64, count: u64, bytes: usize) -> Vec<(ObjectId, u64)> {
    let objset = pool.root_objset();
    let mut files = Vec::new();
    for index in 0..count {
        let object = create_file(pool, &objset, 16 << 10, Compression::Off);
        let hold = pool.assign().unwrap();
        objset
            .write(&hold.tx(), object, 0, &pattern(seed + index, bytes))
            .unwrap();
        drop(hold);
        files.push((object, seed + index));
    }
    pool.sync().unwrap();
    files
}

/// Every file [`write_files`] wrote reads back its bytes (`what` names the moment).
pub fn assert_files_read_right(pool: &Pool, files: &[(ObjectId, u64)], bytes: usize, what: &str) {
    let objset = pool.root_objset();
    for (object, seed) in files {
        let mut data = vec![0u8; bytes];
        objset
            .read(*object, 0, &mut data)
            .unwrap_or_else(|error| panic!("{what}: object {object}: {error}"));
        assert!(
            data == pattern(*seed, bytes),
            "{what}: object {object} reads wrong"
        );
    }
}

/// The replication stream of `to` (incremental from `from`), whole, in memory.
pub fn send_to_vec(pool: &Pool, to: &str, from: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    let options = tarn::send::SendOptions {
        from: from.map(str::to_string),
        ..tarn::send::SendOptions::default()
    };
    tarn::send::send(pool, to, &options, &mut out, &mut |_| {}).unwrap();
    out
}

/// Sync until the pool's background frees are done (`freeing` 0), then twice more so that the
/// freed space leaves the deferred trees; fails the test after a minute.
pub fn wait_freed(pool: &Pool) {
    let started = std::time::Instant::now();
    // A destroyed clone's livelist may still be queued, its last sub-lists holding no
    // bytes, after `freeing` reached zero: its feature stays active until it is gone.
    while pool.core.freeing_bytes().unwrap() > 0 || pool.core.queued_livelist_count().unwrap() > 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "frees never finished"
        );
        pool.sync().unwrap();
    }
    pool.sync().unwrap();
    pool.sync().unwrap();
}

/// Overwrite every copy of every block in `blocks` (single-vdev pool at `path`).
pub fn destroy_every_copy(path: &Path, blocks: &[tarn::block::blkptr::BlockPtr]) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    for bp in blocks {
        for dva in bp.copies() {
            let junk = vec![0xA5u8; dva.size_allocated as usize];
            std::os::unix::fs::FileExt::write_all_at(
                &file,
                &junk,
                tarn::vdev::label::VDEV_LABEL_START_SIZE + dva.offset,
            )
            .unwrap();
        }
    }
    file.sync_all().unwrap();
}
