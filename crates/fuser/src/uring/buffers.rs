//! The memory of one ring entry: a header buffer (one page, of which the kernel uses 288 bytes)
//! and a payload buffer at least as large as the kernel's `max_payload_sz`, both mapped
//! anonymously, page-aligned and left out of any child a fork makes (the daemon forks helpers;
//! a child's copy-on-write pages under buffers the kernel fills would cost faults and memory).
//! The kernel reads and writes them through their user addresses (6.18 does not use io_uring's
//! registered buffers), while the entry is registered and between a completion and the next
//! commit the worker owning the entry alone touches them.

use std::io;
use std::ptr::NonNull;

use super::abi::ENT_IN_OUT_OFFSET;
use super::abi::EntInOut;

/// One anonymous mapping, unmapped on drop.
struct Mapping {
    at: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> io::Result<Self> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choice aliases
        // nothing.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mapping = Mapping {
            at: NonNull::new(at.cast()).expect("mmap returned a null mapping"),
            len,
        };
        // SAFETY: the range is the mapping just made.
        if unsafe { libc::madvise(at, len, libc::MADV_DONTFORK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(mapping)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `new` and nothing refers to it any more.
        unsafe { libc::munmap(self.at.as_ptr().cast(), self.len) };
    }
}

/// The two buffers of an entry, and the `iovec`s that name them to the kernel in REGISTER.
pub(crate) struct EntryBuffers {
    header: Mapping,
    payload: Mapping,
    iovecs: Box<[libc::iovec; 2]>,
}

// SAFETY: the buffers are plain memory owned by this value; the raw pointers in it are to that
// memory only. The worker that owns the entry moves it to its thread once, at start.
unsafe impl Send for EntryBuffers {}

impl EntryBuffers {
    pub(crate) fn new(payload_bytes: usize) -> io::Result<Self> {
        let page = page_size::get();
        let header = Mapping::new(page)?;
        let payload = Mapping::new(payload_bytes.div_ceil(page) * page)?;
        let iovecs = Box::new([
            libc::iovec {
                iov_base: header.at.as_ptr().cast(),
                iov_len: header.len,
            },
            libc::iovec {
                iov_base: payload.at.as_ptr().cast(),
                iov_len: payload.len,
            },
        ]);
        Ok(EntryBuffers {
            header,
            payload,
            iovecs,
        })
    }

    /// The `iovec[2]` for REGISTER; valid as long as `self`.
    pub(crate) fn iovecs(&self) -> *const libc::iovec {
        self.iovecs.as_ptr()
    }

    pub(crate) fn header(&self) -> *mut u8 {
        self.header.at.as_ptr()
    }

    pub(crate) fn payload(&self) -> *mut u8 {
        self.payload.at.as_ptr()
    }

    pub(crate) fn payload_capacity(&self) -> usize {
        self.payload.len
    }

    /// What the kernel says of the request it put in the entry.
    pub(crate) fn ent_in_out(&self) -> EntInOut {
        // SAFETY: the header page holds at least ENT_IN_OUT_OFFSET + 32 bytes; the read is of
        // plain integers.
        unsafe {
            self.header()
                .add(ENT_IN_OUT_OFFSET)
                .cast::<EntInOut>()
                .read_unaligned()
        }
    }

    /// Writes the answer's payload length where the kernel reads it at commit.
    pub(crate) fn set_answer_payload_len(&self, len: u32) {
        let mut ent = self.ent_in_out();
        ent.payload_sz = len;
        // SAFETY: as in `ent_in_out`; no reference into the header page is alive when the
        // worker writes the answer.
        unsafe {
            self.header()
                .add(ENT_IN_OUT_OFFSET)
                .cast::<EntInOut>()
                .write_unaligned(ent)
        }
    }
}
