//! The write issue queue: the syncing txg's block writes are handed to the vdev queues as
//! async-class writes (`vdev::queue`) and complete on their I/O threads, so that the sync
//! thread can compress and checksum the next block while earlier ones are on their way to the
//! disks (OpenZFS's z_wr_iss taskq feeding vdev_queue).
//!
//! A write is *in flight* from [`WriteQueue::submit`] until every mirror child has finished it.
//! Reads of a block whose write is in flight are served from the in-flight buffer (the bytes on
//! disk may still be old), so nothing ever reads a half-written copy. [`WriteQueue::wait`] is
//! the barrier the sync driver calls before it flushes the vdevs and writes the uberblock: it
//! returns the first write that reached no device, which fails the txg (the pool suspends).
//!
//! Aggregation of adjacent writes into device writes of up to `vdev_aggregation_limit` is the
//! vdev queue's (it sees every pending write of a leaf, in offset order); a failed aggregate
//! counts against every block in it.
//!
//! [`WriteCounters`] count what the pool writes, for the per-txg statistics (`tarn stat txgs`):
//! every block copy submitted, and every device write issued after aggregation (the leaves'
//! write counters, one per mirror child) with its bytes. The sync driver adds the uberblock and
//! label writes it issues itself, which bypass the queues.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::types::VdevId;
use crate::vdev::{IoClass, TopVdev, VdevTree};

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
    /// Device writes issued (after aggregation, one per leaf written; uberblock and label
    /// copies included).
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
    vdevs: Arc<VdevTree>,
    shared: Arc<Shared>,
    counters: WriteCounters,
}

impl WriteQueue {
    pub fn new(vdevs: Arc<VdevTree>) -> WriteQueue {
        WriteQueue {
            vdevs,
            shared: Arc::new(Shared {
                in_flight: Mutex::new(InFlight::default()),
                drained: Condvar::new(),
            }),
            counters: WriteCounters::default(),
        }
    }

    /// Queue a write of `data` at `offset` of `top` (every mirror child) in the async write
    /// class. A write to a place with a write still in flight (an in-place rewrite in a later
    /// sync pass) first waits for that one, so that the disk sees them in order.
    pub fn submit(&self, top: Arc<TopVdev>, offset: u64, data: Arc<Vec<u8>>) {
        let key = (top.id, offset);
        {
            let mut in_flight = self.shared.in_flight.lock();
            if in_flight.buffers.contains_key(&key) {
                // The write waited for may be held by this thread's plug.
                drop(in_flight);
                crate::vdev::plug::kick_plugged();
                in_flight = self.shared.in_flight.lock();
            }
            while in_flight.buffers.contains_key(&key) {
                self.shared.drained.wait(&mut in_flight);
            }
            in_flight.count += 1;
            self.counters.record_block();
            in_flight.buffers.insert(key, (data.clone(), 1));
        }
        let shared = self.shared.clone();
        top.write_async(IoClass::AsyncWrite, offset, data, move |result| {
            let mut in_flight = shared.in_flight.lock();
            if let Err(error) = result {
                in_flight.errors.push(error.to_string());
            }
            if let Some((_, pending)) = in_flight.buffers.get_mut(&key) {
                *pending -= 1;
                if *pending == 0 {
                    in_flight.buffers.remove(&key);
                }
            }
            in_flight.count -= 1;
            shared.drained.notify_all();
        });
    }

    /// What the pool wrote so far: block copies submitted, and device writes (every leaf's,
    /// after aggregation, plus those recorded by [`WriteQueue::record_device_writes`]).
    pub fn counters(&self) -> WriteCountersSnapshot {
        let mut snapshot = self.counters.snapshot();
        for leaf in self.vdevs.leaves() {
            let stats = leaf.stats.snapshot();
            snapshot.ios += stats.write_ops;
            snapshot.bytes += stats.write_bytes;
        }
        snapshot
    }

    /// Count `ios` device writes of `bytes` bytes in all issued outside the queues (uberblocks,
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
        crate::vdev::plug::kick_plugged();
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

impl Drop for WriteQueue {
    fn drop(&mut self) {
        let _ = self.wait();
    }
}
