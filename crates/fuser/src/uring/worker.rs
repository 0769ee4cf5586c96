//! One ring worker: a thread that owns an io_uring with a single entry of one queue, and serves
//! the requests the kernel puts in that entry, one at a time (see the module above).

use std::io;
use std::os::fd::AsRawFd;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::squeue::Entry128;
use log::error;
use log::warn;

use super::TransportShared;
use super::WorkerPlan;
use super::abi;
use super::buffers::EntryBuffers;
use super::reply::ReplySlot;
use super::reply::RingReply;
use crate::Filesystem;
use crate::dev_fuse::DevFuse;
use crate::ll;
use crate::ll::fuse_abi::fuse_in_header;
use crate::ll::fuse_abi::fuse_opcode;
use crate::request::ReplyTarget;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

type Ring = IoUring<Entry128, cqueue::Entry>;

/// The registered file index of `/dev/fuse` in every worker's ring.
const DEV_FUSE_FIXED: u32 = 0;
/// The entry's tag in its commands (one entry per ring).
const ENTRY_TAG: u64 = 1;

/// The command last given for the entry, to give again on EAGAIN or EINTR.
#[derive(Debug, Clone, Copy)]
enum Command {
    Register,
    Commit(u64),
}

#[derive(Debug)]
pub(crate) struct Worker<FS: Filesystem> {
    thread: Option<JoinHandle<()>>,
    start: Option<mpsc::SyncSender<SessionEventLoop<FS>>>,
}

impl<FS: Filesystem> Worker<FS> {
    /// Starts the thread, which builds its ring and entry and reports on `ready`; it then
    /// waits for [`Worker::start`].
    pub(crate) fn spawn(
        index: usize,
        plan: WorkerPlan,
        device: Arc<DevFuse>,
        shared: Arc<TransportShared>,
        ready: mpsc::Sender<io::Result<()>>,
    ) -> io::Result<Self> {
        let (start_tx, start_rx) = mpsc::sync_channel::<SessionEventLoop<FS>>(1);
        let thread = std::thread::Builder::new()
            .name(format!("fuse-ring-{}-{index}", plan.qid))
            .spawn(move || {
                let built = build(&plan, &device);
                let (ring, entry) = match built {
                    Ok(built) => {
                        let _ = ready.send(Ok(()));
                        built
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                drop(ready);
                // No context: the session ended before it ran.
                let Ok(context) = start_rx.recv() else { return };
                drop(start_rx);
                Serving {
                    ring,
                    entry,
                    qid: plan.qid,
                    context,
                    shared,
                }
                .serve();
            })?;
        Ok(Worker {
            thread: Some(thread),
            start: Some(start_tx),
        })
    }

    pub(crate) fn start(&mut self, context: SessionEventLoop<FS>) {
        if let Some(start) = self.start.take() {
            // A worker that failed to build has already reported it; nothing to start.
            let _ = start.send(context);
        }
    }

    pub(crate) fn join(mut self) {
        self.start = None;
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                error!("a FUSE ring worker panicked");
            }
        }
    }
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and sched_setaffinity only read and
    // write that set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// On the worker's own thread (the ring's single issuer): pin, make the ring, register
/// `/dev/fuse` in it, and map the entry's buffers.
fn build(plan: &WorkerPlan, device: &DevFuse) -> io::Result<(Ring, EntryBuffers)> {
    if let Some(cpu) = plan.cpu {
        if let Err(e) = pin_to(cpu) {
            warn!("FUSE ring worker for CPU {cpu} runs unpinned: {e}");
        }
    }
    let ring = Ring::builder()
        .setup_single_issuer()
        // Not DEFER_TASKRUN (module documentation, "No deferred task work").
        .setup_coop_taskrun()
        .setup_submit_all()
        .setup_cqsize(4)
        .dontfork()
        .build(2)?;
    ring.submitter().register_files(&[device.as_raw_fd()])?;
    let entry = EntryBuffers::new(plan.payload_bytes)?;
    Ok((ring, entry))
}

struct Serving<FS: Filesystem> {
    ring: Ring,
    entry: EntryBuffers,
    qid: u16,
    context: SessionEventLoop<FS>,
    shared: Arc<TransportShared>,
}

impl<FS: Filesystem> Serving<FS> {
    fn push(&mut self, command: Command) {
        let sqe = match command {
            Command::Register => {
                abi::register_sqe(DEV_FUSE_FIXED, self.qid, self.entry.iovecs(), ENTRY_TAG)
            }
            Command::Commit(commit_id) => {
                abi::commit_sqe(DEV_FUSE_FIXED, self.qid, commit_id, ENTRY_TAG)
            }
        };
        // SAFETY: REGISTER names the entry's iovecs and buffers, which live as long as `self`,
        // and the worker does not drop the ring before its entry (field order, and the kernel
        // completes or cancels the command before the ring goes).
        unsafe { self.ring.submission().push(&sqe) }
            .expect("the submission queue holds the entry's one command");
    }

    /// The loop: give the entry's command, wait for its completion, serve the request in it.
    fn serve(mut self) {
        let slot = ReplySlot::new(self.entry.payload_capacity());
        let mut command = Command::Register;
        self.push(command);
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    error!("FUSE ring worker of queue {} stops: {e}", self.qid);
                    return;
                }
            }
            let Some(completion) = self.ring.completion().next() else {
                continue;
            };
            let result = completion.result();
            if result == 0 {
                let commit_id = self.serve_request(&slot);
                command = Command::Commit(commit_id);
                self.push(command);
                continue;
            }
            match -result {
                libc::EAGAIN | libc::EINTR => self.push(command),
                // The connection ended (unmount, abort) or the command was cancelled.
                libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED => return,
                errno => {
                    let error = io::Error::from_raw_os_error(errno);
                    match command {
                        Command::Register => {
                            self.shared.fell_back(format!("REGISTER failed: {error}"));
                            return;
                        }
                        Command::Commit(commit_id) => {
                            error!(
                                "FUSE ring: committing request {commit_id} failed: {error}; \
                                 registering the entry again"
                            );
                            command = Command::Register;
                            self.push(command);
                        }
                    }
                }
            }
        }
    }

    /// Serves the request the kernel put in the entry; returns the id to commit its answer
    /// with, once the answer is in the entry.
    fn serve_request(&mut self, slot: &Arc<ReplySlot>) -> u64 {
        let ent = self.entry.ent_in_out();
        // SAFETY: the kernel wrote a fuse_in_header at the start of the page-aligned header
        // buffer before completing the command, and does not touch the entry until the commit.
        let header: &fuse_in_header = unsafe { &*self.entry.header().cast::<fuse_in_header>() };
        let payload_len = ent.payload_sz as usize;
        let op_len = (header.len as usize)
            .checked_sub(size_of::<fuse_in_header>() + payload_len)
            .filter(|op_len| *op_len <= abi::OP_IN_BYTES);
        let (Some(op_len), true, true) = (
            op_len,
            payload_len <= self.entry.payload_capacity(),
            ent.commit_id == header.unique && header.unique != 0,
        ) else {
            error!(
                "FUSE ring: a malformed request (length {}, payload {payload_len}, unique {}, \
                 commit id {}); answering EIO",
                header.len, header.unique, ent.commit_id
            );
            slot.arm(&self.entry, true);
            answer_error(slot, &self.context, ent.commit_id, libc::EIO);
            slot.wait_and_write(&self.entry);
            return ent.commit_id;
        };
        self.shared.confirm_ring(self.entry.payload_capacity());
        self.shared.count_ring(header.opcode);
        let opcode = fuse_opcode::try_from(header.opcode).ok();
        slot.arm(&self.entry, payload_len > 0);
        {
            // SAFETY: as above; op_len <= 128 bytes from offset 128, inside the header page;
            // payload_len is within the payload buffer (checked). Nothing writes these bytes
            // until the references end with this block.
            let (op_in, payload) = unsafe {
                (
                    std::slice::from_raw_parts(
                        self.entry.header().add(abi::IN_OUT_BYTES).cast_const(),
                        op_len,
                    ),
                    std::slice::from_raw_parts(self.entry.payload().cast_const(), payload_len),
                )
            };
            let request = RequestWithSender::from_parts(
                ReplyTarget::Ring(RingReply::new(slot.clone(), self.context.ch.sender())),
                ll::AnyRequest::from_split(header, op_in, payload),
            );
            let started = std::time::Instant::now();
            let dispatched = std::panic::catch_unwind(AssertUnwindSafe(|| {
                if let Some(fuse_opcode::FUSE_DESTROY) = opcode {
                    request.reply::<crate::ReplyEmpty>().ok();
                } else {
                    request.dispatch(&self.context);
                }
            }));
            self.shared.time_handler(header.opcode, started);
            match (dispatched, opcode) {
                // The kernel sends these through /dev/fuse, but were one to come here, the
                // entry still needs an answer to be committed.
                (Ok(()), Some(fuse_opcode::FUSE_FORGET | fuse_opcode::FUSE_BATCH_FORGET)) => {
                    answer_error(slot, &self.context, header.unique, libc::ENOSYS)
                }
                (Ok(()), _) => {}
                (Err(_), _) => {
                    error!(
                        "FUSE ring: the handler of request {} panicked",
                        header.unique
                    );
                    answer_error(slot, &self.context, header.unique, libc::EIO);
                }
            }
        }
        let unique = ent.commit_id;
        slot.wait_and_write(&self.entry);
        unique
    }
}

/// Answers `errno` unless the slot already has an answer.
fn answer_error<FS: Filesystem>(
    slot: &Arc<ReplySlot>,
    context: &SessionEventLoop<FS>,
    unique: u64,
    errno: i32,
) {
    if !slot.is_answered() {
        let reply: crate::reply::ReplyRaw = crate::reply::Reply::new(
            ll::RequestId(unique),
            crate::reply::ReplySender::Ring(RingReply::new(slot.clone(), context.ch.sender())),
        );
        reply.error(ll::Errno::from_i32(errno));
    }
}
