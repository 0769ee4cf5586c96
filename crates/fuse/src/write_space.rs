//! Space for what write(2) has accepted: ENOSPC from write(2), not from a write-back.
//!
//! # The problem
//! Under the writeback cache (crate documentation) write(2) copies into the kernel's page
//! cache and returns; the engine sees the bytes only when the kernel writes the pages back.
//! A write-back the engine refuses for want of space is lost: the kernel drops the pages,
//! records the error for the next fsync or close, and keeps its own, larger file size.
//!
//! # What the adapter does
//! - **The kernel's dirty bytes are bounded** per mount: its backing device gets
//!   `strict_limit` and `max_bytes` = [`WriteSpace::dirty_max`] (mount.rs), so at most about
//!   that much of the mount's data is ever accepted by write(2) and not yet written back.
//! - **That space is held back** ([`FileSystem::hold_back_for_write_backs`]): while a file of
//!   the mount is open for cached writing, [`held_back_for`] bytes (twice `dirty_max`, as
//!   admission counts dirty data twice, and a quarter more for indirect blocks) are left free
//!   by every ordinary write of the pool, and only write-backs may use them. A write-back
//!   therefore finds its space.
//! - **Near full, opens for writing get direct I/O** (`FOPEN_DIRECT_IO`; shared mmap still
//!   works through `FUSE_DIRECT_IO_ALLOW_MMAP`): when less than the hold-back plus
//!   `dirty_max` is free for ordinary writes, [`WriteSpace::open_cached`] says no and each
//!   write(2) reaches the engine, which answers a short write when only part fits and ENOSPC
//!   when nothing does. Far from full the cache comes back for new opens.
//! - **A file opened for cached writing earlier** cannot change mode (the kernel fixes it at
//!   open). Its file handle is [`CACHED_WRITER`]. Once ordinary writes no longer fit
//!   ([`WriteSpace::refuses_cached_writes`]), each of its write-backs (stored, in the held-back space) has
//!   the kernel drop the inode's attributes; the kernel's next write(2) on it then asks for
//!   them (`fuse_cache_write_iter` updates size and mode first), and the adapter answers
//!   that `getattr` with ENOSPC (EDQUOT when a quota is what refuses), which write(2)
//!   returns. A `stat`, `lseek(SEEK_END)` or read
//!   past the end through such a handle gets ENOSPC too while the pool is that full.
//! - **A lost write-back never leaves a hole**: write-backs of one file are stored one at a
//!   time in offset order ([`crate::write_turns`]); should one fail anyway (several
//!   mounts' writers, more dirty data than the bound), the adapter remembers the inode
//!   ([`WriteSpace::write_back_lost`]) until the kernel forgets it or a truncate cuts below
//!   the loss; meanwhile a write-back that would start past the stored end and a truncate
//!   that would extend the file are refused, so the file ends at its last stored byte and no
//!   range the writer filled reads as zeros. The order has one escape: two workers that take
//!   two write-backs of one file from the device may reach their turn ([`crate::write_turns`])
//!   in the other order, and the later range may then be stored before the earlier one is
//!   lost. The kernel numbers its requests in the order it sends them (and sends one file's
//!   write-backs in offset order), so the adapter keeps, per inode, the last write-backs
//!   stored with their request numbers and the stored size before each: when a write-back
//!   is lost and ranges past it were stored by write-backs sent after it onto a file that
//!   ended at or before it, or when one sent after a loss is stored past the lost byte onto
//!   such a file, the file is cut back to the lost byte. Those later bytes are lost with the
//!   earlier ones (the writer's next fsync reports the loss), and no hole remains.
//!
//! # Quotas
//! The same holds under a dataset's quota: the engine counts the held-back space against the
//! quota of the dataset and of those above it (`pool/limits.rs`), so cached opens go direct
//! near the quota and write(2) gets EDQUOT; a write-back is never refused by a quota. A
//! user, group or project quota is looked at for the file itself
//! ([`FileSystem::file_write_refusal`]): an open for writing gets direct I/O when the file's
//! owners are within the held-back space and `dirty_max` of a quota, and a cached writer's
//! next write(2) gets EDQUOT once they pass it. What a cached writer had accepted before
//! that is written back, so an owner may pass its quota by up to `dirty_max`.
//!
//! # The bound
//! A file opened for cached writing while the pool had room may have up to `dirty_max` bytes
//! accepted by write(2) beyond what ordinary writes could store; they are written into the
//! held-back space. Only when several such mounts exhaust the held-back space together can
//! write-backs fail; then at most `dirty_max` per mount is accepted by write(2) and lost, and
//! the error reaches the writer's next fsync or close.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use fuser::FileHandle;
use parking_lot::Mutex;
use tarn::{FileSystem, FsError, HeldBack, WriteSource};

/// The file handle of a file opened for cached writing (any other open is handle 0).
pub(crate) const CACHED_WRITER: FileHandle = FileHandle(1);

/// The largest bound on a mount's dirty bytes in the kernel.
pub const DIRTY_MAX_LIMIT: u64 = 32 << 20;
/// The smallest: a write of [`crate::WRITE_BYTES_MAX`] must fit.
const DIRTY_MAX_FLOOR: u64 = 1 << 20;

/// The space held back for a mount whose kernel may hold `dirty_max` dirty bytes.
pub(crate) fn held_back_for(dirty_max: u64) -> u64 {
    dirty_max * 2 + dirty_max / 4
}

/// One mount's write admission (module documentation).
pub(crate) struct WriteSpace {
    fs: Arc<FileSystem>,
    dirty_max: u64,
    /// Files open for cached writing, and the space held back while there are any.
    writers: Mutex<(u64, Option<HeldBack>)>,
    /// Inodes with a lost write-back, and the write-backs of each inode lately stored.
    losses: Mutex<Losses>,
}

/// What the adapter knows of lost and stored write-backs (module documentation).
#[derive(Default)]
struct Losses {
    /// Per inode with a lost write-back: the first lost byte, and the number of the request
    /// that lost it.
    lost: HashMap<u64, (u64, u64)>,
    /// Per inode, the last [`STORED_KEPT`] write-backs stored: (request number, offset, the
    /// stored size before it).
    stored: HashMap<u64, VecDeque<(u64, u64, u64)>>,
}

/// Stored write-backs remembered per inode: more than the kernel has in flight for one file
/// under the mount's dirty bound (its background requests, each up to a megabyte).
const STORED_KEPT: usize = 64;

impl WriteSpace {
    /// The bound on the kernel's dirty bytes for a mount of `fs`: a sixty-fourth of the pool,
    /// between 1 and 32 MiB, so that a small pool does not hold back most of itself.
    pub(crate) fn dirty_max_for(fs: &FileSystem) -> u64 {
        let size = fs
            .statfs()
            .map(|figures| figures.blocks.saturating_mul(u64::from(figures.block_size)))
            .unwrap_or(0);
        (size / 64).clamp(DIRTY_MAX_FLOOR, DIRTY_MAX_LIMIT)
    }

    pub(crate) fn new(fs: Arc<FileSystem>) -> WriteSpace {
        let dirty_max = WriteSpace::dirty_max_for(&fs);
        WriteSpace {
            fs,
            dirty_max,
            writers: Mutex::new((0, None)),
            losses: Mutex::new(Losses::default()),
        }
    }

    pub(crate) fn dirty_max(&self) -> u64 {
        self.dirty_max
    }

    /// An open for writing: may it use the page cache? If so it counts as a cached writer
    /// until [`WriteSpace::released_cached`].
    pub(crate) fn open_cached(&self, ino: u64) -> bool {
        let mut writers = self.writers.lock();
        let to_hold = if writers.0 == 0 {
            held_back_for(self.dirty_max)
        } else {
            0
        };
        if self
            .fs
            .file_write_refusal(ino, to_hold + self.dirty_max, WriteSource::Caller)
            .is_some()
        {
            return false;
        }
        writers.0 += 1;
        if writers.1.is_none() {
            writers.1 = Some(self.fs.hold_back_for_write_backs(to_hold));
        }
        true
    }

    /// A file opened for cached writing was released (the kernel wrote its pages back first).
    pub(crate) fn released_cached(&self) {
        let mut writers = self.writers.lock();
        writers.0 = writers.0.saturating_sub(1);
        if writers.0 == 0 {
            writers.1 = None;
        }
    }

    /// Whether ordinary writes of a full request may no longer fit, at a glance (data in
    /// flight counts twice): after a write-back that says so, the kernel is made to ask
    /// [`WriteSpace::refuses_cached_writes`] before the next write(2).
    pub(crate) fn may_be_short(&self, ino: u64) -> bool {
        self.fs
            .file_write_refusal(ino, u64::from(crate::WRITE_BYTES_MAX), WriteSource::Caller)
            .is_some()
    }

    /// Why an ordinary write of a full request is refused, as the engine would decide it
    /// (letting the data in flight sync first), if it is: a cached writer's next write(2) is
    /// then refused with that error (ENOSPC, or EDQUOT for a quota).
    pub(crate) fn refuses_cached_writes(&self, ino: u64) -> Option<FsError> {
        if !self.may_be_short(ino) {
            return None;
        }
        match self
            .fs
            .caller_file_write_refusal(ino, u64::from(crate::WRITE_BYTES_MAX))
        {
            Ok(refusal) => refusal,
            Err(_) => Some(FsError::NoSpace),
        }
    }

    /// How a write-back of `ino` is to be admitted.
    pub(crate) fn write_back_source(&self, ino: u64) -> WriteSource {
        WriteSource::WriteBack {
            after_loss: self.losses.lock().lost.contains_key(&ino),
        }
    }

    /// A write-back of `ino` at `offset` (request `request`) failed: its bytes are lost.
    /// Returns the size to cut the file back to if write-backs sent after it were stored past
    /// it onto a file that ended at or before it (module documentation).
    pub(crate) fn write_back_lost(&self, ino: u64, request: u64, offset: u64) -> Option<u64> {
        let mut losses = self.losses.lock();
        let lost = losses.lost.entry(ino).or_insert((offset, request));
        if offset < lost.0 {
            *lost = (offset, request);
        }
        let size_before_later = losses
            .stored
            .get(&ino)?
            .iter()
            .filter(|&&(stored_request, stored_offset, _)| {
                stored_request > request && stored_offset > offset
            })
            .map(|&(_, _, size_before)| size_before)
            .min()?;
        (size_before_later <= offset).then_some(offset)
    }

    /// A write-back of `ino` at `offset` (request `request`) was stored onto a file of
    /// `size_before` bytes. Returns the size to cut the file back to if it was sent after a
    /// write-back that was lost, and stored past the lost byte onto a file that ended at or
    /// before it (module documentation).
    pub(crate) fn write_back_stored(
        &self,
        ino: u64,
        request: u64,
        offset: u64,
        size_before: u64,
    ) -> Option<u64> {
        let mut losses = self.losses.lock();
        let stored = losses.stored.entry(ino).or_default();
        if stored.len() == STORED_KEPT {
            stored.pop_front();
        }
        stored.push_back((request, offset, size_before));
        let &(first, lost_request) = losses.lost.get(&ino)?;
        (lost_request < request && offset > first && size_before <= first).then_some(first)
    }

    /// May `ino` be truncated or extended to `size`, stored size `stored`? A file with a lost
    /// write-back is not extended (that would cover the lost bytes with a hole); a truncate
    /// below the loss ends it.
    pub(crate) fn resize_allowed(&self, ino: u64, size: u64, stored: u64) -> bool {
        let lost = &mut self.losses.lock().lost;
        match lost.get(&ino) {
            None => true,
            Some(&(first, _)) if size <= first => {
                lost.remove(&ino);
                true
            }
            Some(_) => size <= stored,
        }
    }

    /// The kernel no longer holds `ino`: its size comes from the engine again.
    pub(crate) fn forgotten(&self, ino: u64) {
        let mut losses = self.losses.lock();
        losses.lost.remove(&ino);
        losses.stored.remove(&ino);
    }
}
