//! The write issue queue: device writes of the syncing txg run on a few I/O threads, so that the
//! sync thread can compress and checksum the next block while earlier ones are on their way to
//! the disks (OpenZFS's z_wr_iss taskq).
//!
//! A write is *in flight* from [`WriteQueue::submit`] until a worker has finished it. Reads of a
//! block whose write is in flight are served from the in-flight buffer (the bytes on disk may
//! still be old), so nothing ever reads a half-written copy. [`WriteQueue::wait`] is the barrier
//! the sync driver calls before it flushes the vdevs and writes the uberblock: it returns the
//! first write that reached no device, which fails the txg (the pool suspends).
//!
//! A worker merges the queued writes that continue the one it took, on the same vdev, into one
//! device write of up to [`AGGREGATE_BYTES_MAX`]; a merged write that fails counts against
//! every block in it.
//!
//! [`WriteCounters`] count what the queue does, for the per-txg statistics (`tarn stat txgs`):
//! every block copy submitted, and every device write issued after aggregation (one per mirror
//! child) with its bytes. The sync driver adds the uberblock and label writes it issues itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::types::VdevId;
use crate::vdev::TopVdev;

struct Job {
    top: Arc<TopVdev>,
    offset: u64,
    data: Arc<Vec<u8>>,
}

/// Pool-wide write counters (relaxed atomics: no lock in the I/O path). Each counter is exact;
/// a snapshot is not a consistent cut across them, like a kstat.
#[derive(Debug, Default)]
pub struct WriteCounters {
    blocks: AtomicU64,
    ios: AtomicU64,
    bytes: AtomicU64,
}

/// A copy of [`WriteCounters`], for differencing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteCountersSnapshot {
    /// Block copies submitted (every DVA of every block written, in-place rewrites included).
    pub blocks: u64,
    /// Device writes issued (after aggregation, one per leaf written).
    pub ios: u64,
    /// Bytes of those device writes.
    pub bytes: u64,
}

impl WriteCountersSnapshot {
    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &WriteCountersSnapshot) -> WriteCountersSnapshot {
        WriteCountersSnapshot {
            blocks: self.blocks.wrapping_sub(earlier.blocks),
            ios: self.ios.wrapping_sub(earlier.ios),
            bytes: self.bytes.wrapping_sub(earlier.bytes),
        }
    }
}

impl WriteCounters {
    /// Count `ios` device writes of `bytes` bytes in all, issued outside the queue (uberblocks,
    /// labels).
    pub fn record_device_writes(&self, ios: u64, bytes: u64) {
        self.ios.fetch_add(ios, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn record_block(&self) {
        self.blocks.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> WriteCountersSnapshot {
        WriteCountersSnapshot {
            blocks: self.blocks.load(Ordering::Relaxed),
            ios: self.ios.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// Bytes being written to one place, and how many writes there are still running.
type Pending = (Arc<Vec<u8>>, usize);

#[derive(Default)]
struct InFlight {
    /// (vdev, offset) -> bytes being written there (every copy of a block has its own key).
    buffers: HashMap<(VdevId, u64), Pending>,
    count: usize,
    errors: Vec<String>,
}

struct Shared {
    in_flight: Mutex<InFlight>,
    drained: Condvar,
}

/// Asynchronous device writes with a completion barrier. See the module documentation.
pub struct WriteQueue {
    sender: Mutex<Option<SyncSender<Job>>>,
    shared: Arc<Shared>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    counters: Arc<WriteCounters>,
}

/// Jobs queued ahead of the workers before `submit` blocks (back-pressure on the sync thread).
const QUEUE_DEPTH: usize = 32;
/// Largest device write that contiguous queued writes are merged into (OpenZFS's
/// zfs_vdev_aggregation_limit).
const AGGREGATE_BYTES_MAX: usize = 1 << 20;

impl WriteQueue {
    pub fn new(threads: usize) -> WriteQueue {
        let counters = Arc::new(WriteCounters::default());
        let (sender, receiver) = sync_channel::<Job>(QUEUE_DEPTH);
        let receiver = Arc::new(Mutex::new(receiver));
        let shared = Arc::new(Shared {
            in_flight: Mutex::new(InFlight::default()),
            drained: Condvar::new(),
        });
        let workers = (0..threads.max(1))
            .map(|index| {
                let receiver: Arc<Mutex<Receiver<Job>>> = receiver.clone();
                let shared = shared.clone();
                let counters = counters.clone();
                std::thread::Builder::new()
                    .name(format!("tarn-wr-iss-{index}"))
                    .spawn(move || {
                        let mut next: Option<Job> = None;
                        loop {
                            let batch = match take_batch(&receiver, &mut next) {
                                Some(batch) => batch,
                                None => return,
                            };
                            let result = write_batch(&batch);
                            let first = &batch[0];
                            let children = first.top.children.len() as u64;
                            let bytes: usize = batch.iter().map(|job| job.data.len()).sum();
                            counters.record_device_writes(children, bytes as u64 * children);
                            let mut in_flight = shared.in_flight.lock();
                            if let Err(error) = result {
                                in_flight.errors.push(error.to_string());
                            }
                            for job in &batch {
                                let key = (job.top.id, job.offset);
                                if let Some((_, pending)) = in_flight.buffers.get_mut(&key) {
                                    *pending -= 1;
                                    if *pending == 0 {
                                        in_flight.buffers.remove(&key);
                                    }
                                }
                                in_flight.count -= 1;
                            }
                            shared.drained.notify_all();
                        }
                    })
                    .expect("spawn an I/O thread")
            })
            .collect();
        WriteQueue {
            sender: Mutex::new(Some(sender)),
            shared,
            workers: Mutex::new(workers),
            counters,
        }
    }

    /// Queue a write of `data` at `offset` of `top` (every mirror child). A write to a place
    /// with a write still in flight (an in-place rewrite in a later sync pass) first waits for
    /// that one, so that the disk sees them in order.
    pub fn submit(&self, top: Arc<TopVdev>, offset: u64, data: Arc<Vec<u8>>) {
        {
            let mut in_flight = self.shared.in_flight.lock();
            while in_flight.buffers.contains_key(&(top.id, offset)) {
                self.shared.drained.wait(&mut in_flight);
            }
            in_flight.count += 1;
            self.counters.record_block();
            in_flight
                .buffers
                .insert((top.id, offset), (data.clone(), 1));
        }
        let sender = self
            .sender
            .lock()
            .clone()
            .expect("write queue used after shutdown");
        sender
            .send(Job { top, offset, data })
            .expect("I/O threads alive while the queue is open");
    }

    /// What the queue (and [`WriteQueue::record_device_writes`]) counted so far.
    pub fn counters(&self) -> WriteCountersSnapshot {
        self.counters.snapshot()
    }

    /// Count `ios` device writes of `bytes` bytes in all issued outside the queue (uberblocks,
    /// labels), so that the pool's write counters cover every device write.
    pub fn record_device_writes(&self, ios: u64, bytes: u64) {
        self.counters.record_device_writes(ios, bytes);
    }

    /// The bytes being written at (vdev, offset), if a write there is in flight.
    pub fn in_flight(&self, vdev: VdevId, offset: u64) -> Option<Arc<Vec<u8>>> {
        self.shared
            .in_flight
            .lock()
            .buffers
            .get(&(vdev, offset))
            .map(|(data, _)| data.clone())
    }

    /// Wait until every submitted write has finished; the errors of writes that reached no
    /// device since the last call, if any.
    pub fn wait(&self) -> Result<(), Vec<String>> {
        let mut in_flight = self.shared.in_flight.lock();
        while in_flight.count > 0 {
            self.shared.drained.wait(&mut in_flight);
        }
        if in_flight.errors.is_empty() {
            Ok(())
        } else {
            Err(std::mem::take(&mut in_flight.errors))
        }
    }
}

/// The next jobs for a worker: `next` (a job taken earlier that did not join its batch) or the
/// next job queued, followed by the queued jobs that continue it on the same vdev, up to
/// [`AGGREGATE_BYTES_MAX`] (OpenZFS's vdev queue aggregation). The sync thread allocates and
/// submits a txg's blocks mostly in address order, so a sequential write reaches the disk in
/// large I/Os, which many devices need for their throughput. None when the queue has closed.
///
/// A worker holding a `next` job must not wait for the receiver: another worker may hold it
/// while it blocks for a job that the sync thread will only submit after `next` is written.
fn take_batch(receiver: &Mutex<Receiver<Job>>, next: &mut Option<Job>) -> Option<Vec<Job>> {
    let (first, receiver) = match next.take() {
        Some(job) => match receiver.try_lock() {
            Some(receiver) => (job, receiver),
            None => return Some(vec![job]),
        },
        None => {
            let receiver = receiver.lock();
            (receiver.recv().ok()?, receiver)
        }
    };
    let mut length = first.data.len();
    let mut batch = vec![first];
    while length < AGGREGATE_BYTES_MAX {
        let Ok(job) = receiver.try_recv() else {
            break;
        };
        let last = batch.last().expect("a batch has a first job");
        let continues = job.top.id == last.top.id
            && job.offset == last.offset + last.data.len() as u64
            && length + job.data.len() <= AGGREGATE_BYTES_MAX;
        if !continues {
            *next = Some(job);
            break;
        }
        length += job.data.len();
        batch.push(job);
    }
    Some(batch)
}

/// Write a batch of contiguous jobs as one device write (a lone job without a copy).
fn write_batch(batch: &[Job]) -> Result<(), crate::vdev::VdevError> {
    let first = &batch[0];
    if batch.len() == 1 {
        return first.top.write(first.offset, &first.data);
    }
    let length = batch.iter().map(|job| job.data.len()).sum();
    let mut merged = Vec::with_capacity(length);
    for job in batch {
        merged.extend_from_slice(&job.data);
    }
    first.top.write(first.offset, &merged)
}

impl Drop for WriteQueue {
    fn drop(&mut self) {
        let _ = self.wait();
        self.sender.lock().take();
        for worker in self.workers.lock().drain(..) {
            let _ = worker.join();
        }
    }
}
