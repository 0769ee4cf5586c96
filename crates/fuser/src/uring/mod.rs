//! FUSE over io_uring: the second transport (tarn's addition to fuser).
//!
//! Over `/dev/fuse` every request costs a blocking `read` and a `writev`, and the thread that
//! reads it is whichever the scheduler wakes. Since Linux 6.14 a server may instead register
//! *entries* with the kernel through io_uring: per-CPU queues, each entry a header buffer and a
//! payload buffer. The kernel puts a request into an available entry of the queue of the CPU
//! the calling process runs on and completes the entry's command; the server answers in the
//! same buffers, and one `io_uring_enter` commits the answer and waits for the next request.
//!
//! How tarn's fork runs it (the 6.18 ABI, FUSE 7.45; see `abi`):
//!
//! * **Negotiation.** The kernel offers `FUSE_OVER_IO_URING` in FUSE_INIT only while the host's
//!   `enable_uring` module parameter is on; this module never changes that parameter. The
//!   session asks for the ring only if the configuration wants it ([`TransportChoice`]), the
//!   kernel offers it at a protocol minor this code knows, and every queue's workers have built
//!   their ring and buffers: that is done *before* the INIT answer, because once the kernel has
//!   it, every new request waits until each CPU's queue has an entry, and a server that then
//!   failed to register would hang the mount. If a REGISTER fails later anyway, the kernel goes
//!   back to `/dev/fuse` by itself, and [`TransportState`] says why.
//! * **Workers.** One queue per possible CPU. Each online CPU's queue gets several workers
//!   pinned to that CPU, each owning one io_uring (single issuer, cooperative task work) with
//!   one entry; an offline CPU's queue gets one unpinned worker. With one entry per worker, an
//!   available entry always means an idle thread, so a handler that blocks (tarn's write
//!   throttle) holds only its own worker, as over `/dev/fuse`.
//! * **No deferred task work.** The kernel hands a request to an entry as task work of the
//!   worker that submitted it. With `IORING_SETUP_DEFER_TASKRUN` that work runs only inside
//!   that worker's own `io_uring_enter`: a request handed to the entry of a worker that had
//!   just died (the daemon SIGKILLed) then waited for a task that would never run it, and an
//!   abort of the connection does not end a request in that state (6.18 leaves entries in
//!   `ent_w_req_queue` to its teardown, which waits for them). If a thread of the dead daemon
//!   was itself waiting in the kernel on that request (an invalidation waiting for the page's
//!   write-back), it held the rings' descriptors open for good, and the process never ended
//!   (seen in tarn-cli's `writeback_kill` test: a zombie daemon, a write-back that never
//!   ends). Ordinary task work of a dead task falls back to a kernel worker, which cancels the
//!   request, and the abort's teardown then ends it.
//! * **Background requests never fill a queue.** The kernel puts a request in the queue of the
//!   caller's CPU and never moves it to another, and it lets background requests (write-backs,
//!   read-ahead) take a queue's entries up to `max_background`. Were that at least a queue's
//!   workers, write-backs held in the handlers (the write throttle) could take every entry of
//!   a CPU's queue, and a foreground request made on that CPU (a `stat`) would wait for them
//!   while the other queues' workers sat idle. So a ring session answers INIT with
//!   `max_background` below the workers of each queue ([`Prepared::background_max`]), and each
//!   online queue has at least two workers.
//! * **Decoding in one place.** A ring request is parsed by the same `AnyRequest` and
//!   `Operation::parse` as one read from `/dev/fuse`, from its two slices (the operation's
//!   header, then the payload), and dispatched by the same `RequestWithSender::dispatch`; only
//!   the reply sender differs (`reply::RingReply`).
//! * **What stays on `/dev/fuse`.** FORGET and BATCH_FORGET, INTERRUPT (ignored once the ring is
//!   negotiated: an answer for a ring request cannot be written there), requests made before
//!   the ring was ready, and everything after a fallback. The `/dev/fuse` threads keep running
//!   beside the workers, and notifications to the kernel still go through the device.
//! * **Stop.** Unmounting aborts the connection: the kernel completes every waiting entry with
//!   ENOTCONN, and a commit after that fails with ENOTCONN; either ends the worker.

mod abi;
mod buffers;
pub(crate) mod reply;
mod worker;

use std::io;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use crate::Filesystem;
use crate::KernelConfig;
use crate::dev_fuse::DevFuse;
use crate::ll::Version;
use crate::ll::flags::init_flags::InitFlags;
use crate::ll::fuse_abi::fuse_opcode;
use crate::session::SessionEventLoop;

/// Which transport a session asks for.
#[derive(Debug, Clone, Copy, Default, Eq, PartialEq, Hash)]
pub enum TransportChoice {
    /// `/dev/fuse` only (fuser's behaviour).
    #[default]
    Dev,
    /// The ring when the kernel offers it at the ABI this code was built for, `/dev/fuse`
    /// otherwise.
    Auto,
    /// The ring, or no mount: the session fails when the ring cannot be used.
    Uring,
}

/// How the ring is shaped.
#[derive(Debug, Clone, Eq, PartialEq, Hash)]
pub struct UringOptions {
    /// Workers (each with one entry) per online CPU's queue; 0 means the session's `n_threads`
    /// divided among the online CPUs. At least two either way (module documentation,
    /// "Background requests never fill a queue").
    pub workers_per_queue: usize,
    /// Pin each worker to its queue's CPU.
    pub pin_workers: bool,
    /// The largest payload buffer per entry the session accepts; a mount whose `max_write` or
    /// `max_pages` would need more stays on `/dev/fuse` (or fails, with [`TransportChoice::Uring`]).
    pub max_entry_bytes: usize,
    /// Tests only: make each entry's payload buffer this many bytes smaller than the kernel
    /// requires, so that every REGISTER fails and the kernel goes back to `/dev/fuse`.
    #[doc(hidden)]
    pub test_payload_shortfall: usize,
}

impl Default for UringOptions {
    fn default() -> Self {
        UringOptions {
            workers_per_queue: 0,
            pin_workers: true,
            max_entry_bytes: 4 << 20,
            test_payload_shortfall: 0,
        }
    }
}

/// The transport a session's requests use.
#[derive(Debug, Clone, Eq, PartialEq)]
pub enum TransportState {
    /// Requests come through `/dev/fuse`, for the reason given.
    Dev {
        /// Why the ring is not used.
        reason: String,
    },
    /// The ring was negotiated, and no request has come through it yet.
    UringStarting {
        /// Queues (one per possible CPU).
        queues: usize,
        /// Workers in all queues.
        workers: usize,
    },
    /// Requests come through the ring.
    Uring {
        /// Queues (one per possible CPU).
        queues: usize,
        /// Workers in all queues.
        workers: usize,
        /// Bytes of each entry's payload buffer.
        entry_bytes: usize,
    },
}

impl TransportState {
    /// `uring` or `dev`: the transport that serves requests (a ring still starting counts as
    /// the ring: the kernel holds requests for it).
    pub fn name(&self) -> &'static str {
        match self {
            TransportState::Dev { .. } => "dev",
            TransportState::UringStarting { .. } | TransportState::Uring { .. } => "uring",
        }
    }
}

/// Requests of one opcode served by each transport.
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct OpcodeCount {
    /// The opcode's name in lower case without `FUSE_` (`lookup`, `write`, ...).
    pub name: String,
    /// Served through `/dev/fuse`.
    pub dev: u64,
    /// Served through the ring.
    pub ring: u64,
    /// Time spent serving them, on both transports: from the request's dispatch to its
    /// handler's return (decoding, the file system's work, and the answer: written to
    /// `/dev/fuse`, or staged in the ring's entry; an answer given later by another thread
    /// is not in it). Two clock reads per request.
    pub handler_nanos: u64,
}

impl OpcodeCount {
    /// Requests served, on both transports.
    pub fn requests(&self) -> u64 {
        self.dev + self.ring
    }

    /// Mean handler time per request, in microseconds (0 with no request).
    pub fn micros_per_request(&self) -> f64 {
        match self.requests() {
            0 => 0.0,
            requests => self.handler_nanos as f64 / requests as f64 / 1000.0,
        }
    }
}

/// Opcodes are counted in this many slots; a larger opcode (CUSE_INIT) shares the last.
const COUNTED_OPCODES: usize = 64;

/// What a session's threads share about its transport: its state and its request counts.
#[derive(Debug)]
pub(crate) struct TransportShared {
    state: Mutex<TransportState>,
    ring_negotiated: AtomicBool,
    /// A request has come through the ring (so `confirm_ring` need not lock again).
    ring_confirmed: AtomicBool,
    dev_requests: [AtomicU64; COUNTED_OPCODES],
    ring_requests: [AtomicU64; COUNTED_OPCODES],
    handler_nanos: [AtomicU64; COUNTED_OPCODES],
}

impl TransportShared {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(TransportShared {
            state: Mutex::new(TransportState::Dev {
                reason: "not negotiated yet".to_string(),
            }),
            ring_negotiated: AtomicBool::new(false),
            ring_confirmed: AtomicBool::new(false),
            dev_requests: std::array::from_fn(|_| AtomicU64::new(0)),
            ring_requests: std::array::from_fn(|_| AtomicU64::new(0)),
            handler_nanos: std::array::from_fn(|_| AtomicU64::new(0)),
        })
    }

    pub(crate) fn state(&self) -> TransportState {
        self.state.lock().clone()
    }

    pub(crate) fn set_state(&self, state: TransportState) {
        self.ring_negotiated.store(
            !matches!(state, TransportState::Dev { .. }),
            Ordering::Release,
        );
        *self.state.lock() = state;
    }

    /// The ring was negotiated with the kernel (even if it has since fallen back).
    pub(crate) fn ring_negotiated(&self) -> bool {
        self.ring_negotiated.load(Ordering::Acquire)
    }

    /// The first request through the ring proves it ready.
    fn confirm_ring(&self, entry_bytes: usize) {
        if self.ring_confirmed.load(Ordering::Relaxed) {
            return;
        }
        self.ring_confirmed.store(true, Ordering::Relaxed);
        let mut state = self.state.lock();
        if let TransportState::UringStarting { queues, workers } = *state {
            *state = TransportState::Uring {
                queues,
                workers,
                entry_bytes,
            };
        }
    }

    /// A REGISTER failed: the kernel serves the connection through `/dev/fuse` from now on.
    fn fell_back(&self, reason: String) {
        let mut state = self.state.lock();
        if !matches!(*state, TransportState::Dev { .. }) {
            log::warn!("FUSE over io_uring: the kernel went back to /dev/fuse: {reason}");
            *state = TransportState::Dev { reason };
        }
    }

    fn slot(opcode: u32) -> usize {
        (opcode as usize).min(COUNTED_OPCODES - 1)
    }

    pub(crate) fn count_dev(&self, opcode: u32) {
        self.dev_requests[Self::slot(opcode)].fetch_add(1, Ordering::Relaxed);
    }

    fn count_ring(&self, opcode: u32) {
        self.ring_requests[Self::slot(opcode)].fetch_add(1, Ordering::Relaxed);
    }

    /// Add a request's handler time (see [`OpcodeCount::handler_nanos`]).
    pub(crate) fn time_handler(&self, opcode: u32, started: std::time::Instant) {
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.handler_nanos[Self::slot(opcode)].fetch_add(nanos, Ordering::Relaxed);
    }

    /// The opcodes served so far, with their counts per transport.
    pub(crate) fn request_counts(&self) -> Vec<OpcodeCount> {
        (0..COUNTED_OPCODES)
            .filter_map(|slot| {
                let dev = self.dev_requests[slot].load(Ordering::Relaxed);
                let ring = self.ring_requests[slot].load(Ordering::Relaxed);
                (dev + ring > 0).then(|| OpcodeCount {
                    name: opcode_name(slot as u32),
                    dev,
                    ring,
                    handler_nanos: self.handler_nanos[slot].load(Ordering::Relaxed),
                })
            })
            .collect()
    }
}

fn opcode_name(opcode: u32) -> String {
    match fuse_opcode::try_from(opcode) {
        Ok(known) => {
            let name = format!("{known:?}");
            name.strip_prefix("FUSE_")
                .unwrap_or(&name)
                .to_ascii_lowercase()
        }
        Err(_) => format!("opcode{opcode}"),
    }
}

/// The kernel protocol minor whose ring ABI this code implements (Linux 6.18).
const ABI_MINOR: u32 = 45;
/// The oldest minor with the same ring ABI (7.42, Linux 6.14); accepted only when the ring is
/// asked for explicitly.
const ABI_MINOR_OLDEST: u32 = 42;

/// CPU numbers in a sysfs list such as `0-3,6`.
fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|part| !part.is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => cpus.extend(first.parse::<usize>().ok()?..=last.parse().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

fn cpu_list(name: &str) -> io::Result<Vec<usize>> {
    let path = format!("/sys/devices/system/cpu/{name}");
    let text = std::fs::read_to_string(&path)?;
    parse_cpu_list(&text)
        .ok_or_else(|| io::Error::other(format!("cannot parse {path}: {:?}", text.trim())))
}

/// One worker to start: its queue, and the CPU it is pinned to.
#[derive(Debug, Clone)]
pub(crate) struct WorkerPlan {
    pub(crate) qid: u16,
    pub(crate) cpu: Option<usize>,
    pub(crate) payload_bytes: usize,
}

/// The ring a session will run, if the checks pass.
#[derive(Debug)]
pub(crate) struct RingPlan {
    queues: usize,
    workers: Vec<WorkerPlan>,
    /// The `max_background` that leaves each online queue an entry for foreground requests
    /// (module documentation): one less than its workers.
    background_max: u16,
}

/// The payload buffer each entry needs: the kernel's `max_payload_sz`, from what the session
/// answers in INIT (an upper bound: the kernel may lower `max_pages`, never raise it).
fn payload_bytes(config: &KernelConfig) -> usize {
    let page = page_size::get();
    let max_write = (config.max_write as usize).max(4096);
    let mut max_pages = config.max_pages() as usize;
    if let Some(limit) = std::fs::read_to_string("/proc/sys/fs/fuse/max_pages_limit")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok())
    {
        max_pages = max_pages.min(limit.max(1));
    }
    abi::MIN_PAYLOAD_BYTES.max(max_write).max(max_pages * page)
}

/// Whether this session runs the ring, and how; `Err` says why not.
pub(crate) fn plan(
    choice: TransportChoice,
    options: &UringOptions,
    n_threads: usize,
    offered: InitFlags,
    kernel: Version,
    config: &KernelConfig,
) -> Result<RingPlan, String> {
    if choice == TransportChoice::Dev {
        return Err("the mount asked for /dev/fuse".to_string());
    }
    if !offered.contains(InitFlags::FUSE_OVER_IO_URING) {
        return Err(
            "the kernel did not offer FUSE over io_uring (needs Linux 6.14 or later, \
                    with /sys/module/fuse/parameters/enable_uring set to Y)"
                .to_string(),
        );
    }
    let lowest = if choice == TransportChoice::Uring {
        ABI_MINOR_OLDEST
    } else {
        ABI_MINOR
    };
    if kernel.0 != 7 || !(lowest..=ABI_MINOR).contains(&kernel.1) {
        return Err(format!(
            "the kernel's FUSE protocol is {kernel}, and this ring code knows 7.{lowest} to 7.{ABI_MINOR}"
        ));
    }
    let possible = cpu_list("possible").map_err(|e| format!("cannot list the CPUs: {e}"))?;
    let online = cpu_list("online").map_err(|e| format!("cannot list the CPUs: {e}"))?;
    let queues = possible.len();
    if online.is_empty() || queues > 4 * online.len() {
        return Err(format!(
            "{queues} possible CPUs for {} online would need a queue each",
            online.len()
        ));
    }
    let payload_bytes = payload_bytes(config);
    if payload_bytes > options.max_entry_bytes {
        return Err(format!(
            "each entry would need {payload_bytes} bytes of payload, over the limit of {}",
            options.max_entry_bytes
        ));
    }
    let per_queue = match options.workers_per_queue {
        0 => (n_threads / online.len()).max(2),
        n => n.max(2),
    };
    let background_max = u16::try_from(per_queue - 1).unwrap_or(u16::MAX);
    let mut workers = Vec::new();
    for qid in 0..queues {
        let is_online = online.contains(&qid);
        let count = if is_online { per_queue } else { 1 };
        for _ in 0..count {
            workers.push(WorkerPlan {
                qid: qid as u16,
                cpu: (is_online && options.pin_workers).then_some(qid),
                payload_bytes: payload_bytes - options.test_payload_shortfall.min(payload_bytes),
            });
        }
    }
    Ok(RingPlan {
        queues,
        workers,
        background_max,
    })
}

/// The ring's workers, built before the INIT answer and started once the session runs.
#[derive(Debug)]
pub(crate) struct Prepared<FS: Filesystem> {
    workers: Vec<worker::Worker<FS>>,
    queues: usize,
    background_max: u16,
}

impl<FS: Filesystem> Prepared<FS> {
    /// Starts every worker of `plan` and waits until each has its ring and buffers (or one
    /// failed). The workers register their entries only when [`Prepared::start`] hands them
    /// the session.
    pub(crate) fn build(
        plan: RingPlan,
        device: &Arc<DevFuse>,
        shared: &Arc<TransportShared>,
    ) -> io::Result<Self> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let mut workers = Vec::with_capacity(plan.workers.len());
        for (index, worker_plan) in plan.workers.into_iter().enumerate() {
            workers.push(worker::Worker::spawn(
                index,
                worker_plan,
                device.clone(),
                shared.clone(),
                ready_tx.clone(),
            )?);
        }
        drop(ready_tx);
        for _ in 0..workers.len() {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(io::Error::other("a ring worker died while starting")),
            }
        }
        Ok(Prepared {
            workers,
            queues: plan.queues,
            background_max: plan.background_max,
        })
    }

    /// The most background requests the session may allow (module documentation,
    /// "Background requests never fill a queue").
    pub(crate) fn background_max(&self) -> u16 {
        self.background_max
    }

    pub(crate) fn queues(&self) -> usize {
        self.queues
    }

    pub(crate) fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Hands each worker its dispatch context; the workers then register their entries.
    pub(crate) fn start(&mut self, mut context: impl FnMut(usize) -> SessionEventLoop<FS>) {
        for (index, worker) in self.workers.iter_mut().enumerate() {
            worker.start(context(index));
        }
    }

    /// Waits for every worker to end (each ends when the connection does).
    pub(crate) fn join(self) {
        for worker in self.workers {
            worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_sysfs_writes_them() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("x-1"), None);
    }

    #[test]
    fn opcode_names_are_short() {
        assert_eq!(opcode_name(1), "lookup");
        assert_eq!(opcode_name(16), "write");
        assert_eq!(opcode_name(999), "opcode999");
    }

    fn kernel_config() -> KernelConfig {
        let mut config = KernelConfig::new(InitFlags::all(), 128 << 10, Version(7, 45));
        config.set_max_write(1 << 20).unwrap();
        config
    }

    #[test]
    fn the_plan_needs_the_kernel_offer_and_a_known_abi() {
        let options = UringOptions::default();
        let config = kernel_config();
        let offered = InitFlags::FUSE_OVER_IO_URING | InitFlags::FUSE_INIT_EXT;
        let refused = |choice, offered, kernel| {
            plan(choice, &options, 16, offered, kernel, &config).unwrap_err()
        };
        assert!(refused(TransportChoice::Dev, offered, Version(7, 45)).contains("asked for"));
        assert!(
            refused(
                TransportChoice::Auto,
                InitFlags::FUSE_INIT_EXT,
                Version(7, 45)
            )
            .contains("did not offer")
        );
        assert!(refused(TransportChoice::Auto, offered, Version(7, 46)).contains("7.46"));
        assert!(refused(TransportChoice::Auto, offered, Version(7, 44)).contains("7.44"));
        // An explicit ring accepts the older minors with the same ABI.
        let planned = plan(
            TransportChoice::Uring,
            &options,
            16,
            offered,
            Version(7, 44),
            &config,
        )
        .expect("7.44 is accepted when asked for");
        let online = cpu_list("online").unwrap().len();
        assert_eq!(planned.queues, cpu_list("possible").unwrap().len());
        assert!(planned.workers.len() >= online * (16 / online).max(1));
        assert_eq!(planned.workers[0].payload_bytes, 1 << 20);
        // Background requests leave every online queue an entry.
        let online_queue_workers = |planned: &RingPlan| {
            let mut counts = vec![0usize; planned.queues];
            for worker in &planned.workers {
                counts[worker.qid as usize] += 1;
            }
            cpu_list("online")
                .unwrap()
                .into_iter()
                .map(|cpu| counts[cpu])
                .min()
                .unwrap()
        };
        assert!(usize::from(planned.background_max) < online_queue_workers(&planned));
        for workers_per_queue in [1, 2, 5] {
            let shaped = UringOptions {
                workers_per_queue,
                ..UringOptions::default()
            };
            let planned = plan(
                TransportChoice::Uring,
                &shaped,
                16,
                offered,
                Version(7, 45),
                &config,
            )
            .unwrap();
            assert!(planned.background_max >= 1);
            assert!(usize::from(planned.background_max) < online_queue_workers(&planned));
        }
        // A payload over the limit is refused.
        let small = UringOptions {
            max_entry_bytes: 64 << 10,
            ..UringOptions::default()
        };
        assert!(
            plan(
                TransportChoice::Auto,
                &small,
                16,
                offered,
                Version(7, 45),
                &config
            )
            .unwrap_err()
            .contains("over the limit")
        );
    }
}
