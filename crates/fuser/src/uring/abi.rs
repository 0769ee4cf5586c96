//! The kernel's FUSE-over-io_uring ABI as of Linux 6.18 (FUSE 7.45), from `linux/fuse.h`: the
//! per-entry header buffer, the command area of the 128-byte SQE, and the two commands. Layouts
//! are checked against the kernel's (sizes 288, 32 and 24 bytes) by the tests below.

use io_uring::opcode;
use io_uring::squeue::Entry128;
use io_uring::types;

use crate::ll::fuse_abi::fuse_in_header;

/// `FUSE_IO_URING_CMD_REGISTER`: hand the kernel an entry's two buffers. Its completion carries
/// the entry's first request.
pub(crate) const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: answer the request in the entry and wait for the next.
pub(crate) const CMD_COMMIT_AND_FETCH: u32 = 2;

/// Size of the `in_out` area at the start of the header buffer: the request's
/// `fuse_in_header`, or the answer's `fuse_out_header`.
pub(crate) const IN_OUT_BYTES: usize = 128;
/// Size of the `op_in` area that follows: the operation's own header (the kernel's first
/// argument), when it has one.
pub(crate) const OP_IN_BYTES: usize = 128;
/// Offset of `struct fuse_uring_ent_in_out` in the header buffer.
pub(crate) const ENT_IN_OUT_OFFSET: usize = IN_OUT_BYTES + OP_IN_BYTES;
/// Size of `struct fuse_uring_req_header`, the smallest header buffer the kernel accepts.
pub(crate) const REQ_HEADER_BYTES: usize = ENT_IN_OUT_OFFSET + size_of::<EntInOut>();
/// The kernel's `FUSE_MIN_READ_BUFFER`: no payload buffer is smaller.
pub(crate) const MIN_PAYLOAD_BYTES: usize = 8192;
/// Size of `struct fuse_out_header`, which an answer writes at the start of the header buffer.
pub(crate) const OUT_HEADER_BYTES: usize = 16;

/// `struct fuse_uring_ent_in_out`: what the kernel says of a request it put in an entry, and
/// the length of the answer's payload the daemon puts back.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EntInOut {
    pub(crate) flags: u64,
    /// The request's `unique`, echoed in the commit.
    pub(crate) commit_id: u64,
    /// Request: bytes in the payload buffer. Answer: bytes of payload written there.
    pub(crate) payload_sz: u32,
    pub(crate) padding: u32,
    pub(crate) reserved: u64,
}

/// `struct fuse_uring_cmd_req`, in the first 24 of the SQE's 80 command bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CmdReq {
    pub(crate) flags: u64,
    pub(crate) commit_id: u64,
    pub(crate) qid: u16,
    pub(crate) padding: [u8; 6],
}

const _: () = assert!(size_of::<EntInOut>() == 32);
const _: () = assert!(size_of::<CmdReq>() == 24);
const _: () = assert!(REQ_HEADER_BYTES == 288);
const _: () = assert!(size_of::<fuse_in_header>() <= IN_OUT_BYTES);

impl CmdReq {
    fn to_area(self) -> [u8; 80] {
        let mut area = [0u8; 80];
        area[0..8].copy_from_slice(&self.flags.to_ne_bytes());
        area[8..16].copy_from_slice(&self.commit_id.to_ne_bytes());
        area[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        area
    }
}

/// Byte offset of `len` in `struct io_uring_sqe`.
const SQE_LEN_OFFSET: usize = 24;

/// The SQE that registers an entry: `iovecs` points at the entry's two `iovec`s (header buffer,
/// payload buffer), `fixed_fd` is the registered `/dev/fuse` file.
pub(crate) fn register_sqe(
    fixed_fd: u32,
    qid: u16,
    iovecs: *const libc::iovec,
    tag: u64,
) -> Entry128 {
    let mut sqe = opcode::UringCmd80::new(types::Fixed(fixed_fd), CMD_REGISTER)
        .cmd(
            CmdReq {
                qid,
                ..CmdReq::default()
            }
            .to_area(),
        )
        .addr(Some(iovecs as u64))
        .build()
        .user_data(tag);
    set_sqe_len(&mut sqe, 2);
    sqe
}

/// The SQE that commits the answer to request `commit_id` and fetches the entry's next request.
pub(crate) fn commit_sqe(fixed_fd: u32, qid: u16, commit_id: u64, tag: u64) -> Entry128 {
    opcode::UringCmd80::new(types::Fixed(fixed_fd), CMD_COMMIT_AND_FETCH)
        .cmd(
            CmdReq {
                qid,
                commit_id,
                ..CmdReq::default()
            }
            .to_area(),
        )
        .build()
        .user_data(tag)
}

/// The io-uring crate's `UringCmd80` has no setter for `len`, which REGISTER needs (the number
/// of iovecs, 2): it is written in place.
fn set_sqe_len(sqe: &mut Entry128, len: u32) {
    // SAFETY: `Entry128` is `#[repr(C)]`, a `struct io_uring_sqe` followed by 64 bytes, and
    // `len` is the u32 at byte 24 of the sqe (the layout test below checks it); the write stays
    // inside the 128 bytes of `sqe`, which is exclusively borrowed.
    unsafe {
        (sqe as *mut Entry128)
            .cast::<u8>()
            .add(SQE_LEN_OFFSET)
            .cast::<u32>()
            .write_unaligned(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(sqe: &Entry128) -> [u8; 128] {
        // SAFETY: Entry128 is 128 bytes of plain data (checked by the io-uring crate's tests).
        unsafe { std::mem::transmute_copy(sqe) }
    }

    fn u32_at(bytes: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap())
    }

    fn u64_at(bytes: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn register_sqe_has_the_kernel_layout() {
        let iovecs = 0x1234_5678_9abc_def0_u64 as *const libc::iovec;
        let bytes = bytes_of(&register_sqe(0, 3, iovecs, 77));
        assert_eq!(bytes[0], io_uring::opcode::UringCmd80::CODE, "opcode");
        assert_eq!(bytes[1] & 1 /* IOSQE_FIXED_FILE */, 1, "fixed file");
        assert_eq!(u32_at(&bytes, 4), 0, "fd: the fixed file's index");
        assert_eq!(u32_at(&bytes, 8), CMD_REGISTER, "cmd_op");
        assert_eq!(
            u64_at(&bytes, 16),
            0x1234_5678_9abc_def0,
            "addr: the iovecs"
        );
        assert_eq!(u32_at(&bytes, 24), 2, "len: two iovecs");
        assert_eq!(u64_at(&bytes, 32), 77, "user_data");
        assert_eq!(u64_at(&bytes, 48), 0, "cmd: flags");
        assert_eq!(u64_at(&bytes, 56), 0, "cmd: commit_id");
        assert_eq!(u16::from_ne_bytes([bytes[64], bytes[65]]), 3, "cmd: qid");
    }

    #[test]
    fn commit_sqe_carries_the_commit_id_in_the_command_area() {
        let bytes = bytes_of(&commit_sqe(0, 1, 0xfeed_0000_0042, 9));
        assert_eq!(u32_at(&bytes, 8), CMD_COMMIT_AND_FETCH);
        assert_eq!(u32_at(&bytes, 24), 0, "len unused");
        assert_eq!(u64_at(&bytes, 32), 9);
        assert_eq!(u64_at(&bytes, 56), 0xfeed_0000_0042, "cmd: commit_id");
        assert_eq!(u16::from_ne_bytes([bytes[64], bytes[65]]), 1, "cmd: qid");
    }

    #[test]
    fn header_buffer_offsets_match_the_kernel() {
        assert_eq!(std::mem::offset_of!(EntInOut, commit_id), 8);
        assert_eq!(std::mem::offset_of!(EntInOut, payload_sz), 16);
        assert_eq!(ENT_IN_OUT_OFFSET, 256);
        assert_eq!(size_of::<fuse_in_header>(), 40);
    }
}
