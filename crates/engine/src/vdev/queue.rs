//! The per-leaf I/O scheduler (OpenZFS `vdev_queue.c`).
//!
//! # Overview
//!
//! Every data-area read and write of a leaf goes through its [`VdevQueue`]. A request carries
//! a priority *class* ([`IoClass`]): sync read (a reader waits for it in open context), sync
//! write (the intent log: durable when it completes, `BlockDevice::write_durable_at`, so the
//! log needs no flush of the whole device), async read (prefetch), async write (the txg's sync), scrub
//! (check and scrub reads), trim and rebuild. The queue keeps one pending set per class and
//! issues requests from a small pool of worker threads per leaf (one exception, sync writes
//! that may go at once, below): a synchronous caller submits and sleeps until its request
//! completes, an asynchronous one (the write issue queue) submits and is called back.
//!
//! # Choosing what to issue (`vdev_queue_class_to_issue`)
//!
//! Each class has a minimum and a maximum number of active (issued, not yet completed) device
//! I/Os, with OpenZFS's defaults (`vdev_*_min_active` / `vdev_*_max_active`), and the leaf has
//! a total cap (`vdev_max_active`). The leaf's issue threads (`vdev_issue_threads`) are the
//! last bound: the classes nobody waits for may occupy all but two of them, which are kept for
//! sync reads and writes. A free worker takes, in priority order, the first class
//! that has pending requests and fewer active I/Os than its minimum; failing that, the first
//! that has fewer than its maximum. So a sync request overtakes any number of pending async
//! writes: it waits at most for a worker to come free, never behind the backlog. The async
//! write maximum grows with the pool's dirty data (`vdev_queue_max_async_writes`): the
//! minimum below `vdev_async_write_active_min_dirty_percent` of `dirty_data_max`, the maximum
//! above `vdev_async_write_active_max_dirty_percent`, linear between, so that a txg with
//! little to write leaves the device to readers and a full one drains at full speed.
//!
//! While the leaf's sync writes are pending, active or recent (`vdev_sync_write_window_us`),
//! async writes are capped at `vdev_async_write_sync_max_active` (1) active I/Os, written in
//! pieces of at most `vdev_aggregation_limit_sync` (128 KiB): a file or virtual disk serves
//! writes in order, so a sync write waits for every byte issued before it (see
//! [`super::limits`] for the rule and why it is sound). A sync write that may be issued at
//! once (nothing of its class queued, under its limits) is executed by the thread that waits
//! for it (`vdev_sync_write_inline`): that thread would only sleep meanwhile, and the two
//! wake-ups of a hand-off to a worker cost up to a scheduler tick each on a busy host. When
//! it finishes, it hands whatever its slot held back to a worker. Reads, which always have a
//! caller waiting, are run the same way (`vdev_read_inline`): a cold sequential read through
//! a mount spent a quarter of its CPU time in the hand-offs' context switches.
//!
//! Within a class, sync reads and sync writes are issued first come, first served (a sync
//! caller waits for exactly its request). The other classes are issued in offset order,
//! starting from the request nearest after the last offset issued (an elevator), and a
//! request is *aggregated* with the pending requests of its class that continue it on the
//! device, in the same direction, up to `vdev_aggregation_limit` bytes (1 MiB): one device
//! I/O through an aligned buffer (so O_DIRECT needs no staging copy). The txg's writes are
//! allocated mostly in address order, so a sequential write reaches the disk in large I/Os.
//!
//! # Statistics
//!
//! Per request: the time from submission to issue (queue time) and from issue to the end of
//! the device I/O that carried it (device time), recorded in the leaf's [`LeafStats`]
//! (atomic counters and power-of-two histograms); per device I/O: operations, bytes and the
//! request-size histograms; per class: the pending and active gauges. `tarn pool iostat` and
//! `tarn stat vdev_queue` print them.
//!
//! # Context and locking
//!
//! One mutex per leaf protects the pending sets and active counts; it is held to insert a
//! request and to choose the next I/O, never across device I/O or a completion callback.
//! Workers are started on demand, up to `vdev_issue_threads` per leaf, and wait on a condition
//! variable when there is nothing they may issue. Completion callbacks run on the worker
//! thread after the device I/O, without the queue's lock: they must be short and must not
//! wait for other I/O of the same leaf.
//!
//! Cost per request: one lock round trip to queue it, one to issue it (shared by the requests
//! of an aggregate), one to retire it, plus a handful of relaxed atomic additions.
//!
//! The sync thread plugs its asynchronous writes so that a burst costs a wake-up per batch
//! and adjacent writes aggregate: see [`super::plug`].
//!
//! # Failure and shutdown
//!
//! An aggregated read that fails is retried request by request, so that one bad range fails
//! only the requests that overlap it. An aggregated write that fails fails every request in
//! it (as the device saw one write; the fault layer numbers writes as issued). Dropping the
//! queue lets the workers drain every pending request, then joins them.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::plug::{hold_plugged, kick_plugged, thread_is_plugged, PluggedQueue};

pub use super::io_class::{IoClass, IoKind, IO_CLASSES};
pub use super::limits::QueueLimits;
use super::stats::LeafStats;
use super::{AlignedBuffer, BlockDevice};

thread_local! {
    /// The class of the reads this thread issues through the block layer (see
    /// [`ReadClassScope`]): sync read unless the thread says otherwise.
    static READ_CLASS: std::cell::Cell<IoClass> = const { std::cell::Cell::new(IoClass::SyncRead) };
}

/// The class reads issued by this thread belong to: sync read (open context) unless a
/// [`ReadClassScope`] says otherwise. The block layer reads in this class, so that callers far
/// above it (prefetch workers, check) choose their class without passing it through every
/// layer in between.
pub fn read_class() -> IoClass {
    READ_CLASS.with(|class| class.get())
}

/// While alive, reads of this thread are issued in another class (prefetch: async read;
/// check and scrub: scrub); dropping it restores the previous class.
pub struct ReadClassScope {
    previous: IoClass,
}

impl ReadClassScope {
    pub fn new(class: IoClass) -> ReadClassScope {
        ReadClassScope {
            previous: READ_CLASS.with(|current| current.replace(class)),
        }
    }
}

impl Drop for ReadClassScope {
    fn drop(&mut self) {
        READ_CLASS.with(|current| current.set(self.previous));
    }
}

/// Where the pool's dirty data stands: (dirty bytes, dirty_data_max). The pool installs one
/// so that the async write maximum follows the txg's dirty data; without one the async write
/// minimum applies.
pub type DirtyProbe = Arc<dyn Fn() -> (u64, u64) + Send + Sync>;

/// A caller's buffer that the caller keeps alive, unmoved and unused until the request
/// completes (it sleeps until then, see [`VdevQueue::read`]).
struct RawBuffer {
    pointer: *mut u8,
    length: usize,
}

// SAFETY: the pointer is only dereferenced by the one worker that executes the request, while
// the submitting thread waits for that request's completion (so there is no concurrent access).
unsafe impl Send for RawBuffer {}

impl RawBuffer {
    /// A write's source: the bytes are only read through the pointer.
    fn of(data: &[u8]) -> RawBuffer {
        RawBuffer {
            pointer: data.as_ptr() as *mut u8,
            length: data.len(),
        }
    }
}

enum Buffer {
    /// The caller's memory: a read's destination, or a write's source.
    Borrowed(RawBuffer),
    /// Bytes `range` of a buffer shared with the caller (an asynchronous write).
    Shared(Arc<Vec<u8>>, std::ops::Range<usize>),
}

impl Buffer {
    /// The bytes to write.
    ///
    /// SAFETY (for `Borrowed`): see [`RawBuffer`]; the caller's slice outlives the request.
    fn as_slice(&self) -> &[u8] {
        match self {
            // SAFETY: see RawBuffer.
            Buffer::Borrowed(raw) => unsafe { std::slice::from_raw_parts(raw.pointer, raw.length) },
            Buffer::Shared(data, range) => &data[range.clone()],
        }
    }

    /// The destination of a read. Only borrowed buffers are read into.
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            // SAFETY: see RawBuffer; the submitting thread does not touch the slice meanwhile.
            Buffer::Borrowed(raw) => unsafe {
                std::slice::from_raw_parts_mut(raw.pointer, raw.length)
            },
            Buffer::Shared(..) => unreachable!("reads always target a borrowed buffer"),
        }
    }
}

/// What runs when a request completes. Dropped without being called (a worker that
/// panicked), it reports an error, so a waiting caller never sleeps forever.
pub struct Completion(Option<Box<dyn FnOnce(io::Result<()>) + Send>>);

impl Completion {
    pub fn new(done: impl FnOnce(io::Result<()>) + Send + 'static) -> Completion {
        Completion(Some(Box::new(done)))
    }

    fn complete(mut self, result: io::Result<()>) {
        if let Some(done) = self.0.take() {
            done(result);
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(done) = self.0.take() {
            done(Err(io::Error::other("the I/O request was abandoned")));
        }
    }
}

struct Request {
    class: IoClass,
    kind: IoKind,
    /// Absolute device offset.
    offset: u64,
    length: usize,
    buffer: Buffer,
    queued_at: Instant,
    done: Completion,
}

pub(super) struct State {
    /// Pending requests per class, keyed by (offset, sequence) for offset-ordered classes and
    /// by (sequence, offset) for first-come-first-served ones.
    pending: [BTreeMap<(u64, u64), Request>; IO_CLASSES],
    active: [u32; IO_CLASSES],
    active_total: u32,
    /// End of the last I/O issued (where the elevator continues).
    last_offset: u64,
    /// When the last sync write completed (for the async write cap beside sync writes,
    /// [`QueueLimits::async_write_limits`]).
    sync_write_done_at: Option<Instant>,
    sequence: u64,
    limits: QueueLimits,
    workers: u32,
    pub(super) idle_workers: u32,
    /// Wake-ups sent to idle workers and not yet taken up.
    pub(super) wakeups: u32,
    shutdown: bool,
}

pub(super) struct Inner {
    device: Arc<dyn BlockDevice>,
    stats: Arc<LeafStats>,
    pub(super) state: Mutex<State>,
    pub(super) work: Condvar,
    dirty: Mutex<Option<DirtyProbe>>,
    /// Requests submitted and not yet completed (for tests and shutdown).
    outstanding: AtomicU64,
}

/// The I/O scheduler of one leaf. See the module documentation.
pub struct VdevQueue {
    inner: Arc<Inner>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for VdevQueue {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("VdevQueue")
            .field("device", &self.inner.device.describe())
            .finish()
    }
}

/// Where one synchronous request's result arrives.
struct Latch {
    result: Mutex<Option<io::Result<()>>>,
    done: Condvar,
}

impl Latch {
    fn new() -> Arc<Latch> {
        Arc::new(Latch {
            result: Mutex::new(None),
            done: Condvar::new(),
        })
    }

    fn completion(self: &Arc<Self>) -> Completion {
        let latch = self.clone();
        Completion::new(move |result| {
            *latch.result.lock() = Some(result);
            latch.done.notify_all();
        })
    }

    fn wait(&self) -> io::Result<()> {
        let mut result = self.result.lock();
        loop {
            if let Some(result) = result.take() {
                return result;
            }
            self.done.wait(&mut result);
        }
    }
}

/// Issue threads of a leaf that only sync classes may use (see `class_to_issue`).
const SYNC_RESERVED_THREADS: u32 = 2;

/// Alignment of the aggregation buffer: what O_DIRECT needs, so a direct I/O needs no copy.
const AGGREGATE_ALIGNMENT: usize = 4096;

thread_local! {
    /// Each worker's reusable buffer for aggregated I/O (grown to the largest aggregate seen,
    /// at most `vdev_aggregation_limit`), so that an aggregate costs one copy and no page
    /// faults.
    static AGGREGATE: std::cell::RefCell<Option<AlignedBuffer>> = const { std::cell::RefCell::new(None) };
}

/// Write `data` at absolute offset `offset` of every queue in `queues` at once, in class
/// `class`, and wait for every write; one result per queue (a mirror's synchronous write).
pub fn write_each(
    queues: &[&VdevQueue],
    class: IoClass,
    offset: u64,
    data: &[u8],
) -> Vec<io::Result<()>> {
    let requests: Vec<(&VdevQueue, u64, RawBuffer)> = queues
        .iter()
        .map(|queue| (*queue, offset, RawBuffer::of(data)))
        .collect();
    issue_and_wait(IoKind::Write, class, requests)
}

/// Write each buffer at its absolute offset of its queue at once, in class `class`, and wait
/// for every write; one result per request (a RAID-Z block's columns).
pub fn write_each_at(class: IoClass, writes: &[(&VdevQueue, u64, &[u8])]) -> Vec<io::Result<()>> {
    let requests: Vec<(&VdevQueue, u64, RawBuffer)> = writes
        .iter()
        .map(|(queue, offset, data)| (*queue, *offset, RawBuffer::of(data)))
        .collect();
    issue_and_wait(IoKind::Write, class, requests)
}

/// Read into each buffer from its absolute offset of its queue at once, in class `class`, and
/// wait for every read; one result per request (a RAID-Z block's columns).
pub fn read_each_at(
    class: IoClass,
    reads: &mut [(&VdevQueue, u64, &mut [u8])],
) -> Vec<io::Result<()>> {
    let requests: Vec<(&VdevQueue, u64, RawBuffer)> = reads
        .iter_mut()
        .map(|(queue, offset, buffer)| {
            (
                *queue,
                *offset,
                RawBuffer {
                    pointer: buffer.as_mut_ptr(),
                    length: buffer.len(),
                },
            )
        })
        .collect();
    issue_and_wait(IoKind::Read, class, requests)
}

/// Submit every request, run the last on the calling thread (the others are under way on
/// their leaves' workers), and wait for all: the buffers are borrowed until every completion
/// has run.
fn issue_and_wait(
    kind: IoKind,
    class: IoClass,
    requests: Vec<(&VdevQueue, u64, RawBuffer)>,
) -> Vec<io::Result<()>> {
    kick_plugged();
    let latches: Vec<Arc<Latch>> = requests.iter().map(|_| Latch::new()).collect();
    let count = requests.len();
    for (index, ((queue, offset, buffer), latch)) in requests.into_iter().zip(&latches).enumerate()
    {
        let run_here = index + 1 == count;
        queue.submit_or_run(
            class,
            kind,
            offset,
            Buffer::Borrowed(buffer),
            latch.completion(),
            run_here,
        );
    }
    latches.iter().map(|latch| latch.wait()).collect()
}

/// A copy of an I/O error for each request of a failed aggregate.
fn copy_error(error: &io::Error) -> io::Error {
    match error.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(error.kind(), error.to_string()),
    }
}

impl VdevQueue {
    pub fn new(device: Arc<dyn BlockDevice>, stats: Arc<LeafStats>) -> VdevQueue {
        VdevQueue {
            inner: Arc::new(Inner {
                device,
                stats,
                state: Mutex::new(State {
                    pending: std::array::from_fn(|_| BTreeMap::new()),
                    active: [0; IO_CLASSES],
                    active_total: 0,
                    last_offset: 0,
                    sync_write_done_at: None,
                    sequence: 0,
                    limits: QueueLimits::default(),
                    workers: 0,
                    idle_workers: 0,
                    wakeups: 0,
                    shutdown: false,
                }),
                work: Condvar::new(),
                dirty: Mutex::new(None),
                outstanding: AtomicU64::new(0),
            }),
            workers: Mutex::new(Vec::new()),
        }
    }

    /// Apply new limits (from the pool's tunables) and, if given, the pool's dirty-data probe.
    pub fn configure(&self, limits: QueueLimits, dirty: Option<DirtyProbe>) {
        self.inner.state.lock().limits = limits;
        *self.inner.dirty.lock() = dirty;
        self.inner.work.notify_all();
    }

    /// Requests submitted and not yet completed.
    pub fn outstanding(&self) -> u64 {
        self.inner.outstanding.load(Ordering::Acquire)
    }

    /// Read `buf.len()` bytes at absolute device offset `offset` in class `class`, waiting for
    /// the read to complete.
    pub fn read(&self, class: IoClass, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        kick_plugged();
        let latch = Latch::new();
        let buffer = Buffer::Borrowed(RawBuffer {
            pointer: buf.as_mut_ptr(),
            length: buf.len(),
        });
        self.submit_or_run(
            class,
            IoKind::Read,
            offset,
            buffer,
            latch.completion(),
            true,
        );
        // The buffer is borrowed until the completion has run: wait for it unconditionally.
        latch.wait()
    }

    /// Write `data` at absolute device offset `offset` in class `class`, waiting for the write
    /// to complete.
    pub fn write(&self, class: IoClass, offset: u64, data: &[u8]) -> io::Result<()> {
        kick_plugged();
        let latch = Latch::new();
        let buffer = Buffer::Borrowed(RawBuffer {
            pointer: data.as_ptr() as *mut u8,
            length: data.len(),
        });
        self.submit_or_run(
            class,
            IoKind::Write,
            offset,
            buffer,
            latch.completion(),
            true,
        );
        latch.wait()
    }

    /// Queue a write of shared bytes; `done` runs on a worker thread when it completes.
    pub fn write_shared(&self, class: IoClass, offset: u64, data: Arc<Vec<u8>>, done: Completion) {
        let range = 0..data.len();
        self.write_shared_range(class, offset, data, range, done);
    }

    /// Queue a write of bytes `range` of a shared buffer (one column of a block, say, without
    /// copying it out); `done` runs on a worker thread when it completes.
    ///
    /// # Panics
    /// Panics if `range` is not inside `data`.
    pub fn write_shared_range(
        &self,
        class: IoClass,
        offset: u64,
        data: Arc<Vec<u8>>,
        range: std::ops::Range<usize>,
        done: Completion,
    ) {
        assert!(
            range.start <= range.end && range.end <= data.len(),
            "write range {range:?} outside a buffer of {} bytes",
            data.len()
        );
        self.submit(
            class,
            IoKind::Write,
            offset,
            Buffer::Shared(data, range),
            done,
        );
    }

    fn submit(&self, class: IoClass, kind: IoKind, offset: u64, buffer: Buffer, done: Completion) {
        self.submit_or_run(class, kind, offset, buffer, done, false);
    }

    /// Queue a request; with `run_here` (a caller that waits for it), a read or a sync write
    /// that may be issued at once (the first of its class, under its limits) is executed by
    /// the calling thread, which would otherwise sleep until a worker had done it (see the
    /// module documentation).
    fn submit_or_run(
        &self,
        class: IoClass,
        kind: IoKind,
        offset: u64,
        buffer: Buffer,
        done: Completion,
        run_here: bool,
    ) {
        let length = match &buffer {
            Buffer::Borrowed(raw) => raw.length,
            Buffer::Shared(_, range) => range.len(),
        };
        // Only asynchronous requests are held: a blocking one kicked the plug and is waited for.
        let pluggable = matches!(buffer, Buffer::Shared(..)) && thread_is_plugged();
        self.inner.outstanding.fetch_add(1, Ordering::AcqRel);
        let request = Request {
            class,
            kind,
            offset,
            length,
            buffer,
            queued_at: Instant::now(),
            done,
        };
        let dirty = async_write_max(&self.inner);
        let mut held = None;
        let spawn = {
            let mut state = self.inner.state.lock();
            state.sequence += 1;
            let key = if class.is_fifo() {
                (state.sequence, offset)
            } else {
                (offset, state.sequence)
            };
            state.pending[class.index()].insert(key, request);
            publish_depth(&self.inner, &state, class);
            let inline = match kind {
                IoKind::Read => state.limits.read_inline,
                IoKind::Write => class == IoClass::SyncWrite && state.limits.sync_write_inline,
            };
            if run_here
                && inline
                && state.pending[class.index()].len() == 1
                && class_to_issue(&state, dirty) == Some(class)
            {
                let batch = take_next(&self.inner, &mut state, dirty);
                drop(state);
                if let Some(batch) = batch {
                    execute(&self.inner, batch);
                }
                // Requests that this one's slot held back were left to a worker finishing an
                // I/O, and none did: hand them to one.
                let dirty = async_write_max(&self.inner);
                let spawn = {
                    let mut state = self.inner.state.lock();
                    class_to_issue(&state, dirty).is_some() && wake_worker(&self.inner, &mut state)
                };
                if spawn {
                    self.spawn_worker();
                }
                return;
            }
            // A request its class's limits hold back waits for a worker to finish one: waking
            // another would only put it back to sleep (and a burst of writes would cost a
            // wake-up each, never aggregating).
            if class_to_issue(&state, dirty).is_none() {
                false
            } else if pluggable && state.workers > 0 && state.limits.plug_batch > 0 {
                held = Some(state.limits.plug_batch);
                false
            } else {
                wake_worker(&self.inner, &mut state)
            }
        };
        if let Some(batch) = held {
            hold_plugged(&self.inner, batch);
        }
        if spawn {
            self.spawn_worker();
        }
    }

    fn spawn_worker(&self) {
        let inner = self.inner.clone();
        let mut workers = self.workers.lock();
        let name = format!("tarn-vdev-iss-{}", workers.len());
        match std::thread::Builder::new()
            .name(name)
            .spawn(move || worker(inner))
        {
            Ok(handle) => workers.push(handle),
            Err(error) => {
                // No thread: the existing workers (if any) carry on; with none the request
                // would wait forever, so run the queue on this thread instead.
                log::error!("cannot start a vdev I/O thread: {error}");
                let mut state = self.inner.state.lock();
                state.workers -= 1;
                let alone = state.workers == 0;
                drop(state);
                if alone {
                    drain_here(&self.inner);
                }
            }
        }
    }
}

/// Wake an idle worker for a request that may be issued now; true if none is idle and a new
/// one must be started (the caller does, outside the lock).
fn wake_worker(inner: &Inner, state: &mut State) -> bool {
    if state.idle_workers > state.wakeups {
        state.wakeups += 1;
        inner.work.notify_one();
        false
    } else if state.workers < state.limits.threads.max(1) && !state.shutdown {
        state.workers += 1;
        true
    } else {
        false
    }
}

/// Run the queue on the calling thread until nothing is pending (the fallback when no worker
/// thread can be started).
fn drain_here(inner: &Arc<Inner>) {
    loop {
        let async_write_max = async_write_max(inner);
        let batch = {
            let mut state = inner.state.lock();
            match take_next(inner, &mut state, async_write_max) {
                Some(batch) => batch,
                None => return,
            }
        };
        execute(inner, batch);
    }
}

impl Drop for VdevQueue {
    fn drop(&mut self) {
        self.inner.state.lock().shutdown = true;
        self.inner.work.notify_all();
        let current = std::thread::current().id();
        for handle in self.workers.lock().drain(..) {
            // A completion callback may drop the last reference to the leaf on a worker of
            // this very queue: that worker finishes on its own, it cannot be joined.
            if handle.thread().id() != current {
                let _ = handle.join();
            }
        }
    }
}

/// Copy a class's pending and active counts into the stats gauges (under the lock).
fn publish_depth(inner: &Inner, state: &State, class: IoClass) {
    inner.stats.set_queue_depth(
        class,
        state.pending[class.index()].len() as u64,
        state.active[class.index()] as u64,
    );
}

impl PluggedQueue for Inner {
    fn kick(&self) {
        let dirty = async_write_max(self);
        let mut state = self.state.lock();
        if state.idle_workers > state.wakeups && class_to_issue(&state, dirty).is_some() {
            state.wakeups += 1;
            self.work.notify_one();
        }
    }
}

/// The async write maximum now (asks the pool's dirty probe outside the queue's lock).
fn async_write_max(inner: &Inner) -> Option<(u64, u64)> {
    let probe = inner.dirty.lock().clone();
    probe.map(|probe| probe())
}

/// The class to issue from next, if any may (`vdev_queue_class_to_issue`).
fn class_to_issue(state: &State, dirty: Option<(u64, u64)>) -> Option<IoClass> {
    let limits = &state.limits;
    if state.active_total >= limits.max_active_total.max(1) {
        return None;
    }
    let async_write = limits.async_write_limits(dirty, sync_writes_recent(state));
    let min_active = |class: IoClass| -> u32 {
        if class == IoClass::AsyncWrite {
            async_write.0
        } else {
            limits.min_active[class.index()]
        }
    };
    let max_active = |class: IoClass| -> u32 {
        if class == IoClass::AsyncWrite {
            async_write.1
        } else {
            limits.max_active[class.index()]
        }
        .max(1)
    };
    // Threads are the real bound on concurrency: the classes nobody waits for may occupy all
    // but SYNC_RESERVED_THREADS of them, so that a sync request never waits for a thread
    // behind a txg's writes.
    let sync_active =
        state.active[IoClass::SyncRead.index()] + state.active[IoClass::SyncWrite.index()];
    let others_may_issue = state.active_total - sync_active
        < limits.threads.saturating_sub(SYNC_RESERVED_THREADS).max(1);
    let has_pending = |class: IoClass| {
        !state.pending[class.index()].is_empty() && (class.is_fifo() || others_may_issue)
    };
    IoClass::ALL
        .into_iter()
        .find(|&class| has_pending(class) && state.active[class.index()] < min_active(class))
        .or_else(|| {
            IoClass::ALL.into_iter().find(|&class| {
                has_pending(class) && state.active[class.index()] < max_active(class)
            })
        })
}

/// Whether the leaf's sync writes are pending, active, or completed within
/// `vdev_sync_write_window_us` (the async write cap beside them applies; see [`QueueLimits`]).
fn sync_writes_recent(state: &State) -> bool {
    let class = IoClass::SyncWrite.index();
    if state.limits.async_write_sync_max_active == 0 {
        return false;
    }
    state.active[class] > 0
        || !state.pending[class].is_empty()
        || state.sync_write_done_at.is_some_and(|at| {
            at.elapsed().as_nanos() < u128::from(state.limits.sync_write_window_ns)
        })
}

/// One device I/O to perform: a request or an aggregate.
struct Batch {
    requests: Vec<Request>,
    /// Largest piece written by one device call: a write longer than this is written piece
    /// by piece (async writes beside recent sync writes, see [`QueueLimits`]).
    piece: usize,
}

/// Take the next device I/O (one request, or an aggregate) and mark it active.
fn take_next(inner: &Inner, state: &mut State, dirty: Option<(u64, u64)>) -> Option<Batch> {
    let class = class_to_issue(state, dirty)?;
    let recent = sync_writes_recent(state);
    let limit = state.limits.aggregation_limit_for(class, recent);
    let piece = state.limits.write_piece_for(class, recent);
    let pending = &mut state.pending[class.index()];
    let first_key = if class.is_fifo() {
        *pending.keys().next()?
    } else {
        pending
            .range((state.last_offset, 0)..)
            .next()
            .or_else(|| pending.iter().next())
            .map(|(key, _)| *key)?
    };
    let first = pending.remove(&first_key).expect("key just found");
    let mut end = first.offset + first.length as u64;
    let mut length = first.length as u64;
    let kind = first.kind;
    let mut batch = vec![first];
    if !class.is_fifo() {
        loop {
            let next = pending
                .range((end, 0)..(end, u64::MAX))
                .find(|(_, request)| request.kind == kind)
                .map(|(key, request)| (*key, request.length as u64));
            match next {
                Some((key, next_length)) if length + next_length <= limit => {
                    let request = pending.remove(&key).expect("key just found");
                    end += next_length;
                    length += next_length;
                    batch.push(request);
                }
                _ => break,
            }
        }
    }
    state.last_offset = end;
    state.active[class.index()] += 1;
    state.active_total += 1;
    publish_depth(inner, state, class);
    Some(Batch {
        requests: batch,
        piece: usize::try_from(piece).unwrap_or(usize::MAX),
    })
}

fn worker(inner: Arc<Inner>) {
    loop {
        let dirty = async_write_max(&inner);
        let batch = {
            let mut state = inner.state.lock();
            loop {
                if let Some(batch) = take_next(&inner, &mut state, dirty) {
                    // More may be issuable (a burst arrived with one wake-up): pass it on.
                    if state.idle_workers > state.wakeups && class_to_issue(&state, dirty).is_some()
                    {
                        state.wakeups += 1;
                        inner.work.notify_one();
                    }
                    break Some(batch);
                }
                if state.shutdown && state.pending.iter().all(BTreeMap::is_empty) {
                    state.workers -= 1;
                    // Workers asleep behind a class limit must see the end too.
                    inner.work.notify_all();
                    return;
                }
                state.idle_workers += 1;
                inner.work.wait(&mut state);
                state.idle_workers -= 1;
                state.wakeups = state.wakeups.saturating_sub(1);
                // Limits and dirty data may have changed while asleep.
                if !state.shutdown {
                    break None;
                }
            }
        };
        if let Some(batch) = batch {
            execute(&inner, batch);
        }
    }
}

/// Perform one device I/O (a request or an aggregate), record it, retire it, complete it.
fn execute(inner: &Inner, batch: Batch) {
    let Batch {
        requests: mut batch,
        piece,
    } = batch;
    let class = batch[0].class;
    let kind = batch[0].kind;
    let offset = batch[0].offset;
    let length: usize = batch.iter().map(|request| request.length).sum();
    let issued_at = Instant::now();
    let device = &*inner.device;
    // Sync-class writes (the intent log's) are durable when they complete; a write longer
    // than `piece` is written in pieces, one after the other.
    let write = |offset: u64, data: &[u8]| {
        if class == IoClass::SyncWrite {
            return device.write_durable_at(offset, data);
        }
        let mut at = 0;
        for part in data.chunks(piece) {
            device.write_at(offset + at, part)?;
            at += part.len() as u64;
        }
        Ok(())
    };
    let result = if batch.len() == 1 {
        let request = &mut batch[0];
        match kind {
            IoKind::Read => device.read_at(offset, request.buffer.as_mut_slice()),
            IoKind::Write => write(offset, request.buffer.as_slice()),
        }
    } else {
        AGGREGATE.with(|staging| {
            let mut staging = staging.borrow_mut();
            if staging.as_ref().is_none_or(|buffer| buffer.len() < length) {
                *staging = Some(AlignedBuffer::zeroed(length, AGGREGATE_ALIGNMENT));
            }
            let merged = &mut staging.as_mut().expect("just filled")[..length];
            match kind {
                IoKind::Read => device.read_at(offset, merged).map(|()| {
                    let mut at = 0;
                    for request in &mut batch {
                        let length = request.length;
                        request
                            .buffer
                            .as_mut_slice()
                            .copy_from_slice(&merged[at..at + length]);
                        at += length;
                    }
                }),
                IoKind::Write => {
                    let mut at = 0;
                    for request in &batch {
                        merged[at..at + request.length].copy_from_slice(request.buffer.as_slice());
                        at += request.length;
                    }
                    write(offset, merged)
                }
            }
        })
    };
    let completed_at = Instant::now();
    inner
        .stats
        .record_device_io(kind, class, length as u64, batch.len(), result.is_ok());
    // A failed aggregated read is retried request by request: one bad range must not fail
    // the blocks beside it.
    let results: Vec<io::Result<()>> = match (&result, kind, batch.len()) {
        (Err(_), IoKind::Read, count) if count > 1 => batch
            .iter_mut()
            .map(|request| {
                let retried = device.read_at(request.offset, request.buffer.as_mut_slice());
                inner.stats.record_device_io(
                    kind,
                    class,
                    request.length as u64,
                    1,
                    retried.is_ok(),
                );
                retried
            })
            .collect(),
        (Err(error), _, count) => (0..count).map(|_| Err(copy_error(error))).collect(),
        (Ok(()), _, count) => (0..count).map(|_| Ok(())).collect(),
    };
    let disk_ns = completed_at.duration_since(issued_at).as_nanos() as u64;
    {
        let mut state = inner.state.lock();
        state.active[class.index()] -= 1;
        state.active_total -= 1;
        if class == IoClass::SyncWrite {
            state.sync_write_done_at = Some(completed_at);
        }
        publish_depth(inner, &state, class);
        if state.shutdown {
            // Draining: a slot came free for workers asleep behind a class limit.
            inner.work.notify_all();
        }
    }
    for (request, result) in batch.into_iter().zip(results) {
        let queue_ns = issued_at.duration_since(request.queued_at).as_nanos() as u64;
        inner
            .stats
            .record_request(kind, class, request.length as u64, queue_ns, disk_ns);
        let Request { done, buffer, .. } = request;
        // The buffer is released, and the request retired, before the caller is told (it may
        // reuse the memory, or look at the queue, at once).
        drop(buffer);
        inner.outstanding.fetch_sub(1, Ordering::AcqRel);
        done.complete(result);
    }
}

#[cfg(test)]
mod tests;
