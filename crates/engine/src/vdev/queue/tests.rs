//! Tests of the leaf I/O scheduler.

use super::*;
use crate::vdev::plug::Plug;
use crate::vdev::{FaultPlan, FaultyDevice, FileDevice};
use std::time::Duration;

fn leaf(size: u64) -> (tempfile::TempDir, Arc<FaultPlan>, Arc<LeafStats>, VdevQueue) {
    let dir = tempfile::tempdir().unwrap();
    let file: Arc<dyn BlockDevice> =
        Arc::new(FileDevice::create_sparse(&dir.path().join("leaf"), size).unwrap());
    let plan = FaultPlan::new();
    let device: Arc<dyn BlockDevice> = Arc::new(FaultyDevice::new(file, plan.clone()));
    let stats = Arc::new(LeafStats::new());
    let queue = VdevQueue::new(device, stats.clone());
    (dir, plan, stats, queue)
}

#[test]
fn read_class_scopes_nest_and_restore() {
    assert_eq!(read_class(), IoClass::SyncRead);
    {
        let _scrub = ReadClassScope::new(IoClass::Scrub);
        assert_eq!(read_class(), IoClass::Scrub);
        {
            let _prefetch = ReadClassScope::new(IoClass::AsyncRead);
            assert_eq!(read_class(), IoClass::AsyncRead);
        }
        assert_eq!(read_class(), IoClass::Scrub);
    }
    assert_eq!(read_class(), IoClass::SyncRead);
}

#[test]
fn reads_and_writes_round_trip_and_are_counted() {
    let (_dir, _plan, stats, queue) = leaf(1 << 20);
    queue.write(IoClass::SyncWrite, 4096, &[7u8; 4096]).unwrap();
    let mut buf = vec![0u8; 4096];
    queue.read(IoClass::SyncRead, 4096, &mut buf).unwrap();
    assert_eq!(buf, vec![7u8; 4096]);
    assert!(queue.read(IoClass::SyncRead, 1 << 20, &mut buf).is_err());
    let snapshot = stats.snapshot();
    assert_eq!(snapshot.write_ops, 1);
    assert_eq!(snapshot.read_ops, 1);
    assert_eq!(snapshot.read_errors, 1);
    assert_eq!(snapshot.read.requests, 2);
    assert_eq!(snapshot.class(IoClass::SyncWrite).requests, 1);
    assert_eq!(snapshot.class(IoClass::SyncRead).pending, 0);
    assert_eq!(queue.outstanding(), 0);
}

#[test]
fn adjacent_async_writes_aggregate_up_to_the_limit() {
    let (_dir, plan, stats, queue) = leaf(8 << 20);
    // Hold the device so that the requests pile up behind the first.
    plan.set_io_delay(Duration::from_millis(30));
    let data: Vec<Arc<Vec<u8>>> = (0..24u8).map(|i| Arc::new(vec![i; 128 << 10])).collect();
    let latches: Vec<Arc<Latch>> = data.iter().map(|_| Latch::new()).collect();
    for (index, (bytes, latch)) in data.iter().zip(&latches).enumerate() {
        queue.write_shared(
            IoClass::AsyncWrite,
            (index as u64) << 17,
            bytes.clone(),
            latch.completion(),
        );
    }
    for latch in &latches {
        latch.wait().unwrap();
    }
    plan.set_io_delay(Duration::ZERO);
    let snapshot = stats.snapshot();
    assert_eq!(snapshot.write_bytes, 24 << 17);
    assert!(
        snapshot.write_ops <= 6,
        "24 writes of 128 KiB took {} device writes",
        snapshot.write_ops
    );
    let class = snapshot.class(IoClass::AsyncWrite);
    assert!(class.aggregated_histogram[20] >= 1, "{class:?}");
    assert_eq!(class.aggregated_histogram[21..].iter().sum::<u64>(), 0);
    let mut buf = vec![0u8; 24 << 17];
    queue.read(IoClass::SyncRead, 0, &mut buf).unwrap();
    for (index, chunk) in buf.chunks(128 << 10).enumerate() {
        assert!(chunk.iter().all(|&byte| byte == index as u8));
    }
}

#[test]
fn a_plugged_burst_of_small_writes_aggregates_on_a_fast_device() {
    let (_dir, _plan, stats, queue) = leaf(8 << 20);
    // A first write starts a worker (requests are held only while the queue has one).
    queue.write(IoClass::AsyncWrite, 0, &[1; 4096]).unwrap();
    let before = stats.snapshot();
    let data: Vec<Arc<Vec<u8>>> = (0..200u8).map(|i| Arc::new(vec![i; 8 << 10])).collect();
    let latches: Vec<Arc<Latch>> = data.iter().map(|_| Latch::new()).collect();
    {
        let _plug = Plug::new();
        for (index, (bytes, latch)) in data.iter().zip(&latches).enumerate() {
            queue.write_shared(
                IoClass::AsyncWrite,
                (1 << 20) + ((index as u64) << 13),
                bytes.clone(),
                latch.completion(),
            );
        }
        // A blocking request of the plugged thread kicks what is held first: no wait on
        // a held request, whatever it depends on.
        let mut first = vec![0u8; 8 << 10];
        queue.read(IoClass::SyncRead, 1 << 20, &mut first).unwrap();
    }
    for latch in &latches {
        latch.wait().unwrap();
    }
    let after = stats.snapshot();
    let ops = after.write_ops - before.write_ops;
    assert_eq!(after.write_bytes - before.write_bytes, 200 << 13);
    // Without the plug a device faster than the submitter sees about one write per block.
    assert!(
        ops <= 200 / 8,
        "200 plugged writes of 8 KiB took {ops} device writes"
    );
    let mut buf = vec![0u8; 200 << 13];
    queue.read(IoClass::SyncRead, 1 << 20, &mut buf).unwrap();
    for (index, chunk) in buf.chunks(8 << 10).enumerate() {
        assert!(chunk.iter().all(|&byte| byte == index as u8));
    }
}

#[test]
fn a_sync_request_held_back_by_a_callers_slot_still_completes() {
    // One sync write at a time. While a caller runs its own (slowly), a second one queues
    // behind it; when the first finishes, no worker is there to notice the free slot and
    // nobody submits again: the second must still be handed to a worker.
    let (_dir, plan, _stats, queue) = leaf(8 << 20);
    let mut limits = QueueLimits::default();
    limits.min_active[IoClass::SyncWrite.index()] = 1;
    limits.max_active[IoClass::SyncWrite.index()] = 1;
    queue.configure(limits, None);
    plan.set_io_delay(Duration::from_millis(300));
    let queue = Arc::new(queue);
    let (sender, receiver) = std::sync::mpsc::channel();
    for index in 0..2u64 {
        let queue = queue.clone();
        let sender = sender.clone();
        std::thread::spawn(move || {
            let result = queue.write(IoClass::SyncWrite, index * 4096, &[1u8; 4096]);
            let _ = sender.send(result.is_ok());
        });
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..2 {
        let done = receiver.recv_timeout(Duration::from_secs(10));
        assert_eq!(done, Ok(true), "a queued sync write never completed");
    }
    assert_eq!(queue.outstanding(), 0);
}

#[test]
fn a_sync_write_overtakes_queued_async_writes() {
    // The regression this guards: before the scheduler, a sync write queued behind a
    // txg's bulk writes waited for all of them.
    let (_dir, plan, stats, queue) = leaf(64 << 20);
    plan.set_io_delay(Duration::from_millis(20));
    // Scattered writes that cannot aggregate: 40 of them, 2 active at a time, 20 ms each
    // take about 400 ms.
    let latches: Vec<Arc<Latch>> = (0..40).map(|_| Latch::new()).collect();
    for (index, latch) in latches.iter().enumerate() {
        queue.write_shared(
            IoClass::AsyncWrite,
            (index as u64) << 20,
            Arc::new(vec![1u8; 4096]),
            latch.completion(),
        );
    }
    let started = Instant::now();
    queue
        .write(IoClass::SyncWrite, 63 << 20, &[2u8; 4096])
        .unwrap();
    let sync_latency = started.elapsed();
    assert!(
        sync_latency < Duration::from_millis(150),
        "the sync write took {sync_latency:?} behind 40 async writes"
    );
    for latch in &latches {
        latch.wait().unwrap();
    }
    let snapshot = stats.snapshot();
    assert!(snapshot.class(IoClass::AsyncWrite).queue_wait_ns() > 50_000_000);
    assert!(snapshot.class(IoClass::SyncWrite).queue_wait_ns() < 50_000_000);
}

#[test]
fn a_failed_aggregated_read_fails_only_the_bad_request() {
    let (_dir, plan, _stats, queue) = leaf(8 << 20);
    // One async read at a time, so that the four adjacent reads queue and aggregate.
    let mut limits = QueueLimits::default();
    limits.max_active[IoClass::AsyncRead.index()] = 1;
    queue.configure(limits, None);
    plan.add_read_fault(
        (1 << 20) + 4096..(1 << 20) + 4097,
        crate::vdev::ReadFaultKind::Fail,
    );
    plan.set_io_delay(Duration::from_millis(20));
    let results = Arc::new(Mutex::new(Vec::new()));
    let mut buffers: Vec<Vec<u8>> = (0..4).map(|_| vec![0u8; 4096]).collect();
    let latches: Vec<Arc<Latch>> = (0..4).map(|_| Latch::new()).collect();
    // A first read holds the device while the four adjacent ones queue up.
    let mut first = vec![0u8; 4096];
    let raw_first = Buffer::Borrowed(RawBuffer {
        pointer: first.as_mut_ptr(),
        length: 4096,
    });
    let first_latch = Latch::new();
    queue.submit(
        IoClass::AsyncRead,
        IoKind::Read,
        0,
        raw_first,
        first_latch.completion(),
    );
    for (index, (buffer, latch)) in buffers.iter_mut().zip(&latches).enumerate() {
        let raw = Buffer::Borrowed(RawBuffer {
            pointer: buffer.as_mut_ptr(),
            length: 4096,
        });
        queue.submit(
            IoClass::AsyncRead,
            IoKind::Read,
            (1 << 20) + (index as u64) * 4096,
            raw,
            latch.completion(),
        );
    }
    first_latch.wait().unwrap();
    for latch in &latches {
        results.lock().push(latch.wait().is_ok());
    }
    assert_eq!(*results.lock(), vec![true, false, true, true]);
}

#[test]
fn dropping_the_queue_drains_pending_requests() {
    let (_dir, plan, stats, queue) = leaf(8 << 20);
    plan.set_io_delay(Duration::from_millis(5));
    let completed = Arc::new(AtomicU64::new(0));
    for index in 0..16u64 {
        let completed = completed.clone();
        queue.write_shared(
            IoClass::AsyncWrite,
            index << 16,
            Arc::new(vec![3u8; 4096]),
            Completion::new(move |result| {
                assert!(result.is_ok());
                completed.fetch_add(1, Ordering::SeqCst);
            }),
        );
    }
    drop(queue);
    assert_eq!(completed.load(Ordering::SeqCst), 16);
    assert_eq!(stats.snapshot().write.requests, 16);
}

/// A device in memory whose plain writes wait at a gate until it opens (so that the queue's
/// issue decisions pile up where a test can see them), recording the length of every plain
/// write call, the most plain writes in flight at once, and which thread did each durable
/// (sync-class) write. Durable writes pass the gate.
struct GateDevice {
    data: Mutex<Vec<u8>>,
    open: Mutex<bool>,
    opened: Condvar,
    in_flight: AtomicU64,
    most_in_flight: AtomicU64,
    pieces: Mutex<Vec<usize>>,
    durable_threads: Mutex<Vec<String>>,
    read_threads: Mutex<Vec<String>>,
}

impl GateDevice {
    fn new(size: usize) -> Arc<GateDevice> {
        Arc::new(GateDevice {
            data: Mutex::new(vec![0; size]),
            open: Mutex::new(false),
            opened: Condvar::new(),
            in_flight: AtomicU64::new(0),
            most_in_flight: AtomicU64::new(0),
            pieces: Mutex::new(Vec::new()),
            durable_threads: Mutex::new(Vec::new()),
            read_threads: Mutex::new(Vec::new()),
        })
    }

    fn open_gate(&self) {
        *self.open.lock() = true;
        self.opened.notify_all();
    }

    /// Wait (up to 10 s) until `count` plain writes are held at the gate.
    fn wait_in_flight(&self, count: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.in_flight.load(Ordering::SeqCst) < count {
            assert!(
                Instant::now() < deadline,
                "{} writes in flight, expected {count}",
                self.in_flight.load(Ordering::SeqCst)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn copy_in(&self, offset: u64, data: &[u8]) {
        let start = offset as usize;
        self.data.lock()[start..start + data.len()].copy_from_slice(data);
    }
}

impl BlockDevice for GateDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.read_threads.lock().push(name);
        let start = offset as usize;
        buf.copy_from_slice(&self.data.lock()[start..start + buf.len()]);
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        {
            let mut open = self.open.lock();
            while !*open {
                self.opened.wait(&mut open);
            }
        }
        self.copy_in(offset, data);
        self.pieces.lock().push(data.len());
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    fn write_durable_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.durable_threads.lock().push(name);
        self.copy_in(offset, data);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn size_bytes(&self) -> u64 {
        self.data.lock().len() as u64
    }

    fn describe(&self) -> String {
        "gate".into()
    }
}

/// Opens a [`GateDevice`]'s gate when dropped, so that a failing test does not leave the
/// queue's workers waiting at it forever (declare it after the queue: it is dropped first).
struct OpenOnDrop(Arc<GateDevice>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open_gate();
    }
}

/// A queue on a [`GateDevice`] with `limits`, its dirty probe saying the txg is full (so that
/// the async write maximum is `vdev_async_write_max_active`).
fn gated_leaf(limits: QueueLimits) -> (Arc<GateDevice>, Arc<LeafStats>, VdevQueue) {
    let device = GateDevice::new(64 << 20);
    let stats = Arc::new(LeafStats::new());
    let queue = VdevQueue::new(device.clone(), stats.clone());
    let full: DirtyProbe = Arc::new(|| (1 << 30, 1 << 30));
    queue.configure(limits, Some(full));
    (device, stats, queue)
}

/// One sync write, then eight scattered 1 MiB async writes with the device's gate shut:
/// returns the latches of the async writes.
fn sync_then_async_writes(queue: &VdevQueue) -> Vec<Arc<Latch>> {
    queue
        .write(IoClass::SyncWrite, 60 << 20, &[9u8; 4096])
        .unwrap();
    (0..8u64)
        .map(|index| {
            let latch = Latch::new();
            queue.write_shared(
                IoClass::AsyncWrite,
                index * (3 << 20),
                Arc::new(vec![index as u8; 1 << 20]),
                latch.completion(),
            );
            latch
        })
        .collect()
}

#[test]
fn async_writes_beside_recent_sync_writes_go_one_at_a_time_in_pieces() {
    // The rule this guards: a sync write on a file or virtual disk waits for every byte
    // issued before it, so while sync writes are recent the txg's writes go one at a time,
    // in pieces of vdev_aggregation_limit_sync. Without the rule the full txg lets ten run.
    let limits = QueueLimits {
        async_write_sync_max_active: 1,
        sync_write_window_ns: 3_600 * 1_000_000_000,
        aggregation_limit_sync: 128 << 10,
        ..QueueLimits::default()
    };
    let (device, stats, queue) = gated_leaf(limits);
    let _open = OpenOnDrop(device.clone());
    let latches = sync_then_async_writes(&queue);
    device.wait_in_flight(1);
    // The decision was taken when the requests were queued and the first issued: the other
    // seven are held in the queue, not at the device.
    let class = stats.snapshot().class(IoClass::AsyncWrite).clone();
    assert_eq!((class.active, class.pending), (1, 7), "{class:?}");
    device.open_gate();
    for latch in &latches {
        latch.wait().unwrap();
    }
    assert_eq!(device.most_in_flight.load(Ordering::SeqCst), 1);
    let pieces = device.pieces.lock().clone();
    assert_eq!(pieces.len(), 8 * 8, "{pieces:?}");
    assert!(pieces.iter().all(|&length| length == 128 << 10));
    let mut buf = vec![0u8; 1 << 20];
    queue
        .read(IoClass::SyncRead, 3 * (3 << 20), &mut buf)
        .unwrap();
    assert!(buf.iter().all(|&byte| byte == 3));
}

#[test]
fn the_cap_lifts_when_the_sync_write_window_has_passed() {
    // Window 0: the sync write completed before the async writes came, so they are not
    // capped (and their blocks are written whole); the cap off (0) likewise.
    for (cap, window) in [(1, 0), (0, 3_600 * 1_000_000_000)] {
        let limits = QueueLimits {
            async_write_sync_max_active: cap,
            sync_write_window_ns: window,
            ..QueueLimits::default()
        };
        let (device, _stats, queue) = gated_leaf(limits);
        let _open = OpenOnDrop(device.clone());
        let latches = sync_then_async_writes(&queue);
        device.wait_in_flight(8);
        device.open_gate();
        for latch in &latches {
            latch.wait().unwrap();
        }
        assert_eq!(device.pieces.lock().len(), 8);
    }
}

#[test]
fn a_sync_write_runs_on_its_callers_thread_unless_told_otherwise() {
    for inline in [true, false] {
        let limits = QueueLimits {
            sync_write_inline: inline,
            ..QueueLimits::default()
        };
        let (device, stats, queue) = gated_leaf(limits);
        queue.write(IoClass::SyncWrite, 0, &[1u8; 4096]).unwrap();
        let threads = device.durable_threads.lock().clone();
        assert_eq!(threads.len(), 1);
        assert_eq!(
            threads[0].starts_with("tarn-vdev-iss"),
            !inline,
            "{threads:?}"
        );
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.class(IoClass::SyncWrite).requests, 1);
        assert_eq!(snapshot.write_ops, 1);
        assert_eq!(queue.outstanding(), 0);
    }
}

#[test]
fn a_read_runs_on_its_callers_thread_unless_told_otherwise() {
    for inline in [true, false] {
        let limits = QueueLimits {
            read_inline: inline,
            ..QueueLimits::default()
        };
        let (device, stats, queue) = gated_leaf(limits);
        device.open_gate();
        for class in [IoClass::SyncRead, IoClass::AsyncRead, IoClass::Scrub] {
            let mut buf = [7u8; 4096];
            queue.read(class, 8192, &mut buf).unwrap();
            assert_eq!(buf, [0u8; 4096]);
        }
        let threads = device.read_threads.lock().clone();
        assert_eq!(threads.len(), 3);
        for thread in &threads {
            assert_eq!(thread.starts_with("tarn-vdev-iss"), !inline, "{threads:?}");
        }
        let snapshot = stats.snapshot();
        for class in [IoClass::SyncRead, IoClass::AsyncRead, IoClass::Scrub] {
            assert_eq!(snapshot.class(class).requests, 1, "{class:?}");
        }
        assert_eq!(queue.outstanding(), 0);
    }
}
