//! The load of `tarn bench run`: a fio-like job (read/write mix, random or sequential, block
//! size, I/Os in flight, jobs, active data set) on files in any directory (a tarn mount, an
//! OpenZFS or btrfs mount, a plain directory) or on objects of a pool opened in-process (the
//! engine directly, no FUSE).
//!
//! Each job owns one file (or object) of `size` bytes, its share of the active data set, and
//! runs `iodepth` threads on it, each with one synchronous I/O in flight (fio's psync engine
//! with `iodepth` threads, since synchronous I/O cannot queue more from one thread). Random
//! offsets are block-aligned and uniform over the job's file; sequential threads walk the file
//! from evenly spaced starting points and wrap. Written blocks are pseudo-random bytes, varied
//! per I/O, so that compression cannot shrink them. The load runs until told to stop; it counts
//! operations and bytes, which the harness reports beside the pool's own figures.
//!
//! The named workloads run on an in-process pool only and reuse the benchmarks that define
//! them: `timeseries` (bench timeseries: many files each taking a 32-byte append per round,
//! recordsize 8K, compression on), `frag` (bench frag: the pool filled to `--fill`% with 1 MiB
//! files of 8 KiB records, then random 8 KiB overwrites), `clone-churn` (bench clone-destroy:
//! an origin of `--size`, then clone, scattered 8 KiB overwrites in it, destroy, again and
//! again) and `receive` (bench receive: text-like files of `--size` sent once to a stream file,
//! received again and again, each copy destroyed). One thread runs each; its operations are
//! writes (appends, overwrites) or received blocks.
//!
//! Preconditioning (optional) writes every job's file sequentially once, in 1 MiB writes,
//! before the load starts: the SNIA PTS's first phase, so that reads find data and overwrites
//! find allocated blocks. Each file is then fsynced and the pool synced (`Source::sync_pool`),
//! so that the measured phase does not start with the preconditioning's writes still to reach
//! the pool a writeback interval later.
//!
//! `--direct` opens the files with O_DIRECT (fio's `--direct=1`), through 4 KiB-aligned
//! buffers: on a mount, the load then reaches the file system under test rather than stopping
//! in the kernel's page cache.
//!
//! Cost: one `pread`/`pwrite` (or one engine transaction) per I/O; no locks between threads
//! besides two atomic counters.

use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tarn::block::blkptr::{ChecksumType, Compression, ObjectType};
use tarn::object::ObjectProps;
use tarn::pool::Pool;
use tarn::types::ObjectId;

use tarn_protocol::error::Failure;

/// The access pattern, named as fio's `--rw`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    Read,
    Write,
    Randread,
    Randwrite,
    Rw,
    Randrw,
}

impl Pattern {
    fn random(self) -> bool {
        matches!(
            self,
            Pattern::Randread | Pattern::Randwrite | Pattern::Randrw
        )
    }

    /// Percent of I/Os that read, given fio's `--rwmixread` for the mixed patterns.
    fn read_percent(self, mix_read: u8) -> u8 {
        match self {
            Pattern::Read | Pattern::Randread => 100,
            Pattern::Write | Pattern::Randwrite => 0,
            Pattern::Rw | Pattern::Randrw => mix_read.min(100),
        }
    }
}

/// One job description (fio's options of the same names).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Job {
    pub rw: Pattern,
    pub rwmixread: u8,
    pub bs: u64,
    pub iodepth: usize,
    pub numjobs: usize,
    /// Bytes per job; the active data set is `size * numjobs`.
    pub size: u64,
    /// Files opened with O_DIRECT (fio's `--direct=1`): the I/O bypasses the page cache.
    pub direct: bool,
}

impl Job {
    pub fn active_data_set(&self) -> u64 {
        self.size * self.numjobs as u64
    }

    pub fn check(&self) -> Result<(), Failure> {
        if self.bs == 0 || self.bs > 16 << 20 {
            return Err(Failure("--bs must be between 1 byte and 16M".into()));
        }
        if self.direct && !self.bs.is_multiple_of(DIRECT_ALIGNMENT as u64) {
            return Err(Failure(format!(
                "--direct needs --bs a multiple of {}",
                tarn_protocol::format::human_bytes(DIRECT_ALIGNMENT as u64)
            )));
        }
        if self.size < self.bs {
            return Err(Failure("--size must hold at least one block (--bs)".into()));
        }
        if self.iodepth == 0 || self.numjobs == 0 || self.iodepth * self.numjobs > 256 {
            return Err(Failure(
                "--iodepth and --numjobs must be at least 1, and their product at most 256".into(),
            ));
        }
        Ok(())
    }

    fn blocks(&self) -> u64 {
        self.size / self.bs
    }
}

/// Alignment of buffers, offsets and sizes that O_DIRECT needs on every Linux file system.
const DIRECT_ALIGNMENT: usize = 4096;

/// A buffer whose start is aligned for O_DIRECT (plain `Vec`s are not).
struct AlignedBuffer {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuffer {
    fn zeroed(len: usize) -> AlignedBuffer {
        let storage = vec![0u8; len + DIRECT_ALIGNMENT];
        let start = storage.as_ptr().align_offset(DIRECT_ALIGNMENT);
        AlignedBuffer {
            storage,
            start,
            len,
        }
    }

    fn copied_from(data: &[u8]) -> AlignedBuffer {
        let mut buffer = AlignedBuffer::zeroed(data.len());
        buffer.as_mut_slice().copy_from_slice(data);
        buffer
    }

    fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// Where the job's I/O goes.
#[derive(Clone)]
pub enum Target {
    /// Files `tarn-bench-job.N` in a directory.
    Directory(PathBuf),
    /// Objects of a pool's root object set (and the pool's indirect block shift).
    Engine(Arc<Pool>, u8),
}

/// One job's file or object.
#[derive(Clone)]
enum Store {
    File(Arc<File>),
    Object(Arc<Pool>, ObjectId),
}

impl Store {
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), String> {
        match self {
            Store::File(file) => file.write_all_at(data, offset).map_err(|e| e.to_string()),
            Store::Object(pool, object) => {
                let hold = pool.assign().map_err(|e| e.to_string())?;
                pool.root_objset()
                    .write(&hold.tx(), *object, offset, data)
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// Make the store's writes durable (fsync; the engine's objects are synced with their
    /// pool, by the caller).
    fn flush(&self) -> Result<(), String> {
        match self {
            Store::File(file) => file.sync_all().map_err(|e| e.to_string()),
            Store::Object(..) => Ok(()),
        }
    }

    fn read(&self, offset: u64, buffer: &mut [u8]) -> Result<(), String> {
        match self {
            Store::File(file) => file
                .read_at(buffer, offset)
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Store::Object(pool, object) => pool
                .root_objset()
                .read(*object, offset, buffer)
                .map_err(|e| e.to_string()),
        }
    }
}

/// Operations and bytes the load has done, and its first error.
#[derive(Default)]
pub struct LoadCounters {
    pub ops: AtomicU64,
    pub bytes: AtomicU64,
    pub error: Mutex<Option<String>>,
}

/// A running load: stop it with [`Load::stop`].
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub counters: Arc<LoadCounters>,
}

fn open_stores(job: &Job, target: &Target) -> Result<Vec<Store>, Failure> {
    (0..job.numjobs)
        .map(|index| match target {
            Target::Directory(dir) => {
                let path = dir.join(format!("tarn-bench-job.{index}"));
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .custom_flags(if job.direct { libc::O_DIRECT } else { 0 })
                    .open(&path)
                    .map_err(|e| Failure(format!("{}: {e}", path.display())))?;
                Ok(Store::File(Arc::new(file)))
            }
            Target::Engine(pool, indirect_block_shift) => {
                let hold = pool.assign()?;
                let props = ObjectProps {
                    object_type: ObjectType::PlainFile,
                    data_block_size: job.bs.clamp(512, 1 << 20) as u32,
                    indirect_block_shift: *indirect_block_shift,
                    checksum: ChecksumType::Fletcher4,
                    compression: Compression::Off,
                    copies: 1,
                };
                let object = pool
                    .root_objset()
                    .create_object(&hold.tx(), props, ObjectType::None, &[])
                    .map_err(|e| Failure(e.to_string()))?;
                Ok(Store::Object(pool.clone(), object))
            }
        })
        .collect()
}

/// The files a directory target leaves behind, for removal after the run.
pub fn job_files(job: &Job, dir: &Path) -> Vec<PathBuf> {
    (0..job.numjobs)
        .map(|index| dir.join(format!("tarn-bench-job.{index}")))
        .collect()
}

/// Bytes per write of the preconditioning phase (at least one block): large sequential
/// writes, as the SNIA PTS preconditions with, and few enough that a FUSE mount keeps up.
const PRECONDITION_CHUNK: u64 = 1 << 20;

/// Write every job's file once, sequentially, and fsync it (the preconditioning phase).
pub fn precondition(job: &Job, stores: &Stores) -> Result<(), Failure> {
    let chunk = PRECONDITION_CHUNK.max(job.bs) / job.bs * job.bs;
    let data = AlignedBuffer::copied_from(&tarn_protocol::format::pseudo_random(
        chunk as usize,
        0x5eed,
    ));
    let length = job.blocks() * job.bs;
    for store in &stores.0 {
        let mut offset = 0;
        while offset < length {
            let size = chunk.min(length - offset) as usize;
            store
                .write(offset, &data.as_slice()[..size])
                .map_err(|e| Failure(format!("preconditioning: {e}")))?;
            offset += size as u64;
        }
        store
            .flush()
            .map_err(|e| Failure(format!("preconditioning: {e}")))?;
    }
    Ok(())
}

/// The jobs' files or objects, opened once for preconditioning and the load.
pub struct Stores(Vec<Store>);

pub fn open(job: &Job, target: &Target) -> Result<Stores, Failure> {
    Ok(Stores(open_stores(job, target)?))
}

/// A small fast generator for offsets and the read/write choice (xorshift64).
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Start the load on `stores`.
pub fn start(job: &Job, stores: &Stores) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(LoadCounters::default());
    let mut threads = Vec::new();
    for (job_index, store) in stores.0.iter().enumerate() {
        for thread_index in 0..job.iodepth {
            let (store, stop, counters, job) =
                (store.clone(), stop.clone(), counters.clone(), job.clone());
            let seed = 0x9e37_79b9_7f4a_7c15 ^ ((job_index as u64) << 32 | thread_index as u64);
            threads.push(std::thread::spawn(move || {
                run_thread(&job, &store, thread_index, seed, &stop, &counters)
            }));
        }
    }
    Load {
        stop,
        threads,
        counters,
    }
}

fn run_thread(
    job: &Job,
    store: &Store,
    thread_index: usize,
    seed: u64,
    stop: &AtomicBool,
    counters: &LoadCounters,
) {
    let mut random = Xorshift(seed | 1);
    let blocks = job.blocks();
    let read_percent = job.rw.read_percent(job.rwmixread) as u64;
    // Enough pseudo-random bytes that each write can start somewhere else in them.
    let source = tarn_protocol::format::pseudo_random((job.bs as usize) * 2, seed);
    // Aligned for O_DIRECT; each write copies its bytes from `source` into `written`.
    let mut buffer = AlignedBuffer::zeroed(job.bs as usize);
    let mut written = AlignedBuffer::zeroed(job.bs as usize);
    let mut next_block = blocks * thread_index as u64 / job.iodepth as u64;
    while !stop.load(Ordering::Relaxed) {
        let block = if job.rw.random() {
            random.next() % blocks
        } else {
            let block = next_block % blocks;
            next_block += 1;
            block
        };
        let offset = block * job.bs;
        let result = if random.next() % 100 < read_percent {
            store.read(offset, buffer.as_mut_slice())
        } else {
            let start = (random.next() % job.bs) as usize;
            let bytes = written.as_mut_slice();
            bytes.copy_from_slice(&source[start..start + job.bs as usize]);
            store.write(offset, bytes)
        };
        if let Err(error) = result {
            let mut first = counters.error.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert(error);
            stop.store(true, Ordering::Relaxed);
            return;
        }
        counters.ops.fetch_add(1, Ordering::Relaxed);
        counters.bytes.fetch_add(job.bs, Ordering::Relaxed);
    }
}

/// A workload: the fio-like job, or one of the named benchmarks' workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    Job,
    Timeseries,
    Frag,
    CloneChurn,
    Receive,
}

/// Set up named workload `workload` on `pool` (files, fill, origin or stream: before the
/// sampling starts) and start it. `scratch` holds the receive workload's stream file.
pub fn start_named(
    workload: Workload,
    pool: &Arc<Pool>,
    job: &Job,
    fill_pct: u64,
    scratch: &Path,
) -> Result<Load, Failure> {
    use crate::{clone_destroy, frag, receive, timeseries};
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(LoadCounters::default());
    let pool = pool.clone();
    let name = pool.name().to_string();
    type Step = Box<dyn FnMut(u64) -> Result<(u64, u64), Failure> + Send>;
    // Each step does one round of the workload and returns (operations, bytes).
    let step: Step = match workload {
        Workload::Job => return Err(Failure("the job workload is not a named one".into())),
        Workload::Timeseries => {
            let files = (job.size / frag::RECORD).clamp(1, 100_000);
            let (fs, inodes) = timeseries::create_series(&pool, files)?;
            Box::new(move |round| {
                for (file, ino) in inodes.iter().enumerate() {
                    timeseries::append(&fs, *ino, file as u64, round)?;
                }
                Ok((inodes.len() as u64, inodes.len() as u64 * 32))
            })
        }
        Workload::Frag => {
            let fs = frag::create_file_system(&pool)?;
            let data =
                tarn_protocol::format::pseudo_random((frag::FILE_SIZE + frag::RECORD) as usize, 14);
            let mut files = Vec::new();
            frag::fill_to(&pool, &fs, fill_pct, &mut files, &data)?;
            let mut offsets = frag::Offsets(0x9e37_79b9_7f4a_7c15);
            const PER_ROUND: u64 = 256;
            Box::new(move |_| {
                for _ in 0..PER_ROUND {
                    let file = files[offsets.next(files.len() as u64) as usize];
                    let offset = offsets.next(frag::FILE_SIZE / frag::RECORD) * frag::RECORD;
                    let at = offsets.next(64) as usize * 8;
                    fs.write(file, offset, &data[at..at + frag::RECORD as usize])
                        .map_err(|error| Failure(error.to_string()))?;
                }
                Ok((PER_ROUND, PER_ROUND * frag::RECORD))
            })
        }
        Workload::CloneChurn => {
            let origin = (job.size / clone_destroy::RECORD).max(1) * clone_destroy::RECORD;
            clone_destroy::origin_and_clones(&pool, origin, 0)?;
            let pool = pool.clone();
            const OVERWRITES: u64 = 256;
            Box::new(move |round| {
                let clone = format!("{name}/churn{round}");
                pool.create_clone(&format!("{name}/fs@origin"), &clone, &[])?;
                let fs = pool.open_file_system(&clone)?;
                clone_destroy::overwrite(
                    &pool,
                    &fs,
                    origin / clone_destroy::RECORD,
                    OVERWRITES,
                    0x5ca7 + round,
                )?;
                drop(fs);
                pool.destroy_dataset(&clone, false)?;
                Ok((OVERWRITES, OVERWRITES * clone_destroy::RECORD))
            })
        }
        Workload::Receive => {
            let snapshot = receive::write_source(&pool, job.size, 128 << 10)?;
            let stream = scratch.join("bench-run.stream");
            receive::send_to_file(&pool, &snapshot, &stream, false)?;
            let pool = pool.clone();
            Box::new(move |round| {
                let target = format!("{name}/recv{round}");
                let received = receive::receive_once(&pool, &stream, &target, 1 << 20);
                let destroyed = pool.destroy_dataset(&target, true);
                let received = received?;
                destroyed?;
                Ok((received.blocks, 0))
            })
        }
    };
    let thread = {
        let (stop, counters) = (stop.clone(), counters.clone());
        let mut step = step;
        std::thread::spawn(move || {
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                match step(round) {
                    Ok((ops, bytes)) => {
                        counters.ops.fetch_add(ops, Ordering::Relaxed);
                        counters.bytes.fetch_add(bytes, Ordering::Relaxed);
                    }
                    Err(error) => {
                        let mut first = counters.error.lock().unwrap_or_else(|e| e.into_inner());
                        first.get_or_insert(error.0);
                        return;
                    }
                }
                round += 1;
            }
        })
    };
    Ok(Load {
        stop,
        threads: vec![thread],
        counters,
    })
}

impl Load {
    /// Stop every thread and wait for it; the first I/O error, if any, is the result.
    pub fn stop(self) -> Result<(), Failure> {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            let _ = thread.join();
        }
        match self
            .counters
            .error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            Some(error) => Err(Failure(format!("the workload failed: {error}"))),
            None => Ok(()),
        }
    }

    /// The first error the load met, if any (it stops itself then).
    pub fn failed(&self) -> Option<String> {
        self.counters
            .error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_on_a_directory_reads_and_writes_within_its_files() {
        // Buffered and O_DIRECT (whose unaligned buffers or sizes would fail with EINVAL).
        for direct in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let job = Job {
                rw: Pattern::Randrw,
                rwmixread: 50,
                bs: 4096,
                iodepth: 2,
                numjobs: 2,
                size: 1 << 20,
                direct,
            };
            job.check().map_err(|e| e.0).unwrap();
            let stores = open(&job, &Target::Directory(dir.path().into()))
                .map_err(|e| e.0)
                .unwrap();
            for store in &stores.0 {
                let Store::File(file) = store else {
                    panic!("a directory's job has files")
                };
                // SAFETY: fcntl(F_GETFL) on a descriptor this test owns.
                let flags =
                    unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&**file), libc::F_GETFL) };
                assert_eq!(flags & libc::O_DIRECT != 0, direct);
            }
            precondition(&job, &stores).map_err(|e| e.0).unwrap();
            let load = start(&job, &stores);
            std::thread::sleep(std::time::Duration::from_millis(200));
            let ops = load.counters.ops.load(Ordering::Relaxed);
            load.stop().map_err(|e| e.0).unwrap();
            assert!(ops > 0, "direct {direct}");
            for file in job_files(&job, dir.path()) {
                assert_eq!(std::fs::metadata(&file).unwrap().len(), 1 << 20);
            }
        }
    }

    #[test]
    fn bad_jobs_are_refused() {
        let job = Job {
            rw: Pattern::Read,
            rwmixread: 50,
            bs: 0,
            iodepth: 1,
            numjobs: 1,
            size: 1 << 20,
            direct: false,
        };
        assert!(job.check().is_err());
        assert!(Job {
            bs: 2 << 20,
            ..job.clone()
        }
        .check()
        .is_err());
        assert!(Job {
            bs: 6144,
            direct: true,
            ..job.clone()
        }
        .check()
        .is_err());
        assert!(Job {
            bs: 4096,
            iodepth: 0,
            ..job
        }
        .check()
        .is_err());
    }
}
