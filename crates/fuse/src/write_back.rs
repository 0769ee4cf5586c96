//! Storing what the kernel writes: a direct write (the caller waits), and a write-back of the
//! page cache (write(2) returned long ago), which may use the space held back for it
//! ([`crate::write_space`]) and is stored in its file's turn ([`crate::write_turns`]); the
//! bookkeeping that keeps a lost write-back from leaving a hole.

use fuser::{INodeNo, OpenFlags, ReplyWrite};
use tarn::{SetAttr, WriteSource};

use crate::TarnFuse;

impl TarnFuse {
    /// A write that did not come through the page cache: the caller's own, committed here
    /// when its open file asked for O_DSYNC.
    pub(crate) fn write_direct(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        flags: OpenFlags,
        reply: ReplyWrite,
    ) {
        match self.fs.write_from(ino, offset, data, WriteSource::Direct) {
            Ok(written) => {
                // O_SYNC includes O_DSYNC's bit. A write-back carries the flags of whichever
                // open file it was written back through: a synchronous write(2) through the
                // cache is followed by the kernel's own FSYNC, so only direct writes commit
                // here.
                if flags.0 & libc::O_DSYNC != 0 {
                    if let Err(errno) = self.fsync_inode(ino) {
                        return reply.error(errno);
                    }
                }
                reply.written(written as u32);
            }
            Err(error) => reply.error(self.fail("write", error)),
        }
    }

    /// Stores write-back `request` of `ino` at `offset`, in the file's turn, and answers it.
    pub(crate) fn store_write_back(
        &self,
        request: u64,
        fuse_ino: INodeNo,
        ino: u64,
        offset: u64,
        data: &[u8],
        reply: ReplyWrite,
    ) {
        let source = self.shared.space.write_back_source(ino);
        // The stored size before it, to tell whether a later range was stored past a lost
        // one (`write_space`, "A lost write-back never leaves a hole").
        let size_before = match self.fs.size(ino) {
            Ok(size) => size,
            Err(error) => return reply.error(self.fail("write", error)),
        };
        let result = self.fs.write_from(ino, offset, data, source);
        // Lost, or stored only thanks to the held-back space: the kernel drops the inode's
        // attributes, so that the next write(2) asks for them (getattr) and is refused there.
        let cut = if let Err(error) = &result {
            log::warn!(
                "tarn fuse {}: write-back of inode {ino} at {offset} ({} bytes) lost: {error}",
                self.name,
                data.len()
            );
            self.shared.kernel.invalidate_attributes(fuse_ino.0);
            self.shared.space.write_back_lost(ino, request, offset)
        } else {
            if self.shared.space.may_be_short(ino) {
                self.shared.kernel.invalidate_attributes(fuse_ino.0);
            }
            self.shared
                .space
                .write_back_stored(ino, request, offset, size_before)
        };
        if let Some(cut) = cut {
            self.cut_back_to_loss(fuse_ino, ino, cut);
        }
        match result {
            Ok(written) => reply.written(written as u32),
            Err(error) => reply.error(self.fail("write", error)),
        }
    }

    /// Cut `ino` back to `size`, the first byte of a lost write-back that later write-backs
    /// were stored past (`write_space`, "A lost write-back never leaves a hole"): their bytes
    /// are lost with it rather than leaving zeros where it was.
    fn cut_back_to_loss(&self, fuse_ino: INodeNo, ino: u64, size: u64) {
        let stored = match self.fs.size(ino) {
            Ok(size) => size,
            Err(error) => {
                log::error!("tarn fuse {}: inode {ino}: {error}", self.name);
                return;
            }
        };
        if stored <= size {
            return;
        }
        let cut = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        match self.fs.setattr(ino, cut) {
            Ok(_) => log::warn!(
                "tarn fuse {}: inode {ino} cut from {stored} to {size} bytes: write-backs of \
                 later ranges were stored before the one at {size} was lost",
                self.name
            ),
            Err(error) => log::error!(
                "tarn fuse {}: inode {ino}: cutting it back to its lost write-back at {size}: \
                 {error}",
                self.name
            ),
        }
        self.shared.kernel.invalidate_attributes(fuse_ino.0);
    }
}
