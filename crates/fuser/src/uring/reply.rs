//! How an answer reaches a ring entry.
//!
//! A file system answers through a `Reply*` object, possibly from another thread and after its
//! handler has returned (tarn answers `lseek` so). Over `/dev/fuse` the answer is a `writev`.
//! Over the ring it must land in the entry's buffers, and only the worker that owns the entry
//! may commit it (the kernel copies the next request as task work of the task that submitted
//! the entry's command). So a [`RingReply`] puts the answer in the entry's [`ReplySlot`] and
//! wakes the worker, which writes the out header and commits once its handler has returned.
//!
//! The payload goes straight into the entry's payload buffer when the request brought none (a
//! READ's data is copied once): nothing borrows that buffer then. A request that brought a
//! payload (a WRITE's data, a name) may still be borrowed by the handler while it answers, so
//! that answer is staged in the slot and copied in by the worker after the handler returns.
//! The out header always overlaps the request's `fuse_in_header`, and the worker always writes
//! it.

use std::io;
use std::io::IoSlice;
use std::sync::Arc;

use parking_lot::Condvar;
use parking_lot::Mutex;

use crate::channel::ChannelSender;

use super::abi::OUT_HEADER_BYTES;
use super::buffers::EntryBuffers;

/// An answer as the worker commits it.
#[derive(Debug, Clone, Copy)]
struct Answer {
    /// The raw `fuse_out_header` (length, error, unique).
    out_header: [u8; OUT_HEADER_BYTES],
    payload_len: usize,
    /// The payload is in `SlotState::staging`, not yet in the entry.
    staged: bool,
}

/// The payload buffer of the entry, when a sender may write it directly.
#[derive(Debug, Clone, Copy)]
struct DirectPayload(*mut u8);

// SAFETY: the pointer is to the entry's payload buffer, written only under the slot's lock and
// only while the worker has armed the slot for a request that brought no payload.
unsafe impl Send for DirectPayload {}

#[derive(Debug)]
struct SlotState {
    answer: Option<Answer>,
    staging: Vec<u8>,
    direct: Option<DirectPayload>,
    capacity: usize,
}

/// Where the answer to the request in one entry is left for its worker.
#[derive(Debug)]
pub(crate) struct ReplySlot {
    state: Mutex<SlotState>,
    answered: Condvar,
}

impl ReplySlot {
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(ReplySlot {
            state: Mutex::new(SlotState {
                answer: None,
                staging: Vec::new(),
                direct: None,
                capacity,
            }),
            answered: Condvar::new(),
        })
    }

    /// Readies the slot for the entry's next request. `payload_borrowed`: the request brought
    /// a payload, which the handler may be reading while it answers.
    pub(crate) fn arm(&self, entry: &EntryBuffers, payload_borrowed: bool) {
        let mut state = self.state.lock();
        state.answer = None;
        state.capacity = entry.payload_capacity();
        state.direct = (!payload_borrowed).then_some(DirectPayload(entry.payload()));
    }

    /// Waits for the answer (it may come from another thread), then writes it into the entry:
    /// the out header over the request's header, the staged payload if any, and the payload's
    /// length. The caller holds no reference into the entry's buffers.
    pub(crate) fn wait_and_write(&self, entry: &EntryBuffers) {
        let mut state = self.state.lock();
        while state.answer.is_none() {
            self.answered.wait(&mut state);
        }
        let answer = state.answer.take().expect("checked above");
        state.direct = None;
        // SAFETY: the entry is the worker's and the kernel does not touch it until the commit;
        // the header page is larger than the out header; a staged payload is at most the
        // capacity (checked by `answer`).
        unsafe {
            std::ptr::copy_nonoverlapping(
                answer.out_header.as_ptr(),
                entry.header(),
                OUT_HEADER_BYTES,
            );
            if answer.staged {
                std::ptr::copy_nonoverlapping(
                    state.staging.as_ptr(),
                    entry.payload(),
                    answer.payload_len,
                );
            }
        }
        entry.set_answer_payload_len(answer.payload_len as u32);
    }

    /// An answer is waiting for the worker.
    pub(crate) fn is_answered(&self) -> bool {
        self.state.lock().answer.is_some()
    }

    /// Takes an answer: `iov[0]` is the `fuse_out_header`, the rest its payload.
    fn answer(&self, iov: &[IoSlice<'_>]) -> io::Result<()> {
        let Some((header, payload)) = iov.split_first() else {
            return Err(io::Error::other("an answer without its header"));
        };
        let mut out_header: [u8; OUT_HEADER_BYTES] = header
            .get(..OUT_HEADER_BYTES)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| io::Error::other("an answer's header is short"))?;
        let payload_len: usize = payload.iter().map(|slice| slice.len()).sum();
        let mut state = self.state.lock();
        if state.answer.is_some() {
            return Err(io::Error::other("a ring request answered twice"));
        }
        let answer = if payload_len > state.capacity {
            // As libfuse: an answer larger than the entry's buffer fails the request.
            log::error!(
                "a FUSE answer of {payload_len} bytes does not fit the ring entry's {} bytes",
                state.capacity
            );
            out_header[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
            Answer {
                out_header,
                payload_len: 0,
                staged: false,
            }
        } else if let Some(DirectPayload(at)) = state.direct {
            let mut offset = 0;
            for slice in payload {
                // SAFETY: `direct` is set only while the entry waits for this answer and no
                // reference covers its payload buffer; the total fits its capacity.
                unsafe {
                    std::ptr::copy_nonoverlapping(slice.as_ptr(), at.add(offset), slice.len())
                };
                offset += slice.len();
            }
            Answer {
                out_header,
                payload_len,
                staged: false,
            }
        } else {
            state.staging.clear();
            for slice in payload {
                state.staging.extend_from_slice(slice);
            }
            Answer {
                out_header,
                payload_len,
                staged: true,
            }
        };
        state.answer = Some(answer);
        drop(state);
        self.answered.notify_one();
        Ok(())
    }
}

/// The reply sender of a request served through the ring (see the module's comment).
#[derive(Debug, Clone)]
pub(crate) struct RingReply {
    slot: Arc<ReplySlot>,
    /// The connection's `/dev/fuse`, for passthrough's backing-file ioctls.
    channel: ChannelSender,
}

impl RingReply {
    pub(crate) fn new(slot: Arc<ReplySlot>, channel: ChannelSender) -> Self {
        RingReply { slot, channel }
    }

    pub(crate) fn send(&self, iov: &[IoSlice<'_>]) -> io::Result<()> {
        self.slot.answer(iov)
    }

    pub(crate) fn channel(&self) -> &ChannelSender {
        &self.channel
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out_header(error: i32, unique: u64, payload: usize) -> Vec<u8> {
        let mut header = Vec::new();
        header.extend_from_slice(&((OUT_HEADER_BYTES + payload) as u32).to_ne_bytes());
        header.extend_from_slice(&error.to_ne_bytes());
        header.extend_from_slice(&unique.to_ne_bytes());
        header
    }

    fn header_of(entry: &EntryBuffers) -> Vec<u8> {
        // SAFETY: the test owns the entry; the header page is larger than 16 bytes.
        unsafe { std::slice::from_raw_parts(entry.header(), OUT_HEADER_BYTES).to_vec() }
    }

    fn payload_of(entry: &EntryBuffers, len: usize) -> Vec<u8> {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(entry.payload(), len).to_vec() }
    }

    #[test]
    fn an_answer_lands_in_the_entry_directly_or_staged() {
        let entry = EntryBuffers::new(8192).unwrap();
        let slot = ReplySlot::new(entry.payload_capacity());
        for borrowed in [false, true] {
            slot.arm(&entry, borrowed);
            let header = out_header(0, 42, 5);
            slot.answer(&[
                IoSlice::new(&header),
                IoSlice::new(b"he"),
                IoSlice::new(b"llo"),
            ])
            .unwrap();
            // A direct answer is in the payload buffer before the worker writes anything.
            assert_eq!(payload_of(&entry, 5) == b"hello", !borrowed);
            slot.wait_and_write(&entry);
            assert_eq!(header_of(&entry), header);
            assert_eq!(payload_of(&entry, 5), b"hello");
            assert_eq!(entry.ent_in_out().payload_sz, 5);
            // Clear the payload for the next round.
            unsafe { std::ptr::write_bytes(entry.payload(), 0, 5) };
        }
    }

    #[test]
    fn an_answer_too_large_for_the_entry_becomes_eio() {
        let entry = EntryBuffers::new(4096).unwrap();
        let slot = ReplySlot::new(entry.payload_capacity());
        slot.arm(&entry, false);
        let big = vec![7u8; entry.payload_capacity() + 1];
        let header = out_header(0, 9, big.len());
        slot.answer(&[IoSlice::new(&header), IoSlice::new(&big)])
            .unwrap();
        slot.wait_and_write(&entry);
        let written = header_of(&entry);
        assert_eq!(
            i32::from_ne_bytes(written[4..8].try_into().unwrap()),
            -libc::EIO
        );
        assert_eq!(entry.ent_in_out().payload_sz, 0);
    }

    #[test]
    fn a_late_answer_wakes_the_worker_and_a_second_is_refused() {
        let entry = EntryBuffers::new(4096).unwrap();
        let slot = ReplySlot::new(entry.payload_capacity());
        slot.arm(&entry, true);
        let late = {
            let slot = slot.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                let header = out_header(-libc::ENOENT, 3, 0);
                slot.answer(&[IoSlice::new(&header)]).unwrap();
            })
        };
        slot.wait_and_write(&entry);
        late.join().unwrap();
        let written = header_of(&entry);
        assert_eq!(
            i32::from_ne_bytes(written[4..8].try_into().unwrap()),
            -libc::ENOENT
        );

        // Until the worker takes an answer, a second one for the same request is refused.
        slot.arm(&entry, true);
        let header = out_header(0, 4, 0);
        slot.answer(&[IoSlice::new(&header)]).unwrap();
        assert!(slot.answer(&[IoSlice::new(&header)]).is_err());
    }
}
