//! Ranges of regular files (OpenZFS zfs_vnops.c `zfs_space`, `zfs_holey`, and
//! `zfs_clone_range`'s copying fallback): fallocate, SEEK_DATA / SEEK_HOLE and
//! copy_file_range.
//!
//! # fallocate
//! - `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`: whole blocks inside the range become holes
//!   (their space is freed when the txg syncs, or moves to the deadlist under a snapshot);
//!   the partly covered blocks at either end are rewritten with zeros in the range. Only the
//!   part before end of file is touched; the size never changes.
//! - `FALLOC_FL_ZERO_RANGE` (with or without `KEEP_SIZE`): the same, and without `KEEP_SIZE`
//!   the file grows to the end of the range.
//! - mode 0 and `FALLOC_FL_KEEP_SIZE`: as OpenZFS does for a copy-on-write file system, no
//!   space is reserved (a later overwrite needs new blocks anyway, so a reservation could not
//!   promise the write will succeed); mode 0 only grows the size to the end of the range,
//!   `KEEP_SIZE` alone succeeds and changes nothing. So a program that fallocates to avoid
//!   ENOSPC later can still get it.
//! - Anything else (collapse, insert, unshare, no-hide-stale) is [`FsError::NotSupported`].
//!
//! Each call is one transaction. Punching a range is cheap in open context (one free record);
//! the blocks are freed when the txg syncs, all in that txg, however many there are (no
//! chunking as for deleting a large file; noted in the README).
//!
//! # SEEK_DATA, SEEK_HOLE
//! Answered from the block tree block by block ([`ObjectSet::block_is_data`]): a block
//! written in a txg not yet synced counts as data (never a false hole, the failure of OpenZFS
//! issue 15526). Granularity is the file's block size; the end of file is a hole. Cost: one
//! block-pointer lookup per block skipped (indirect blocks from the cache after the first).
//!
//! # copy_file_range
//! Within one mount the data is read and written again (never shared: blocks have one owner,
//! DESIGN.md §3 invariant 8), in pieces of at most [`COPY_CHUNK_BYTES`], each piece its own
//! transaction; a hole in the source stays a hole (skipped with SEEK_DATA).

use crate::types::ObjectId;

use super::phys::{FileKind, Timestamp, Znode};
use super::{FileSystem, FsError, Result, FILE_SIZE_MAX};

/// `fallocate` mode bits (Linux's values).
pub const FALLOC_FL_KEEP_SIZE: u32 = 0x01;
pub const FALLOC_FL_PUNCH_HOLE: u32 = 0x02;
pub const FALLOC_FL_ZERO_RANGE: u32 = 0x10;
/// Bytes copied per transaction by [`FileSystem::copy_range`].
pub const COPY_CHUNK_BYTES: u64 = 1 << 20;

/// What [`FileSystem::seek`] looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeekTarget {
    Data,
    Hole,
}

impl FileSystem {
    /// fallocate(2) on the regular file `ino`; see the module documentation for the modes.
    pub fn fallocate(&self, ino: u64, offset: u64, length: u64, mode: u32) -> Result<()> {
        let _gate = self.change()?;
        let known = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 {
            return Err(FsError::NotSupported);
        }
        let punch = mode & FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & FALLOC_FL_ZERO_RANGE != 0;
        let keep_size = mode & FALLOC_FL_KEEP_SIZE != 0;
        if punch && (zero || !keep_size) {
            return Err(FsError::Invalid(format!("fallocate mode {mode:#x}")));
        }
        let end = offset
            .checked_add(length)
            .filter(|&end| length > 0 && end <= FILE_SIZE_MAX)
            .ok_or_else(|| FsError::Invalid(format!("fallocate of {length} at {offset}")))?;
        let _guards = self.lock_inodes(&[ino]);
        let mut znode = self.regular_file(ino)?;
        if !punch && !zero && (keep_size || end <= znode.size) {
            // Nothing to reserve on a copy-on-write file system (module documentation).
            return Ok(());
        }
        let hold = self.txgs.assign()?;
        let tx = hold.tx();
        if punch || zero {
            // Past the end of file there is nothing but holes already.
            let stop = end.min(znode.size);
            if offset < stop {
                self.objset
                    .free_range(&tx, ObjectId(ino), offset, stop - offset)?;
            }
        }
        let now = Timestamp::now();
        if !keep_size {
            znode.size = znode.size.max(end);
        }
        znode.mtime = now;
        znode.ctime = now;
        self.put_znode(&tx, ino, &znode)?;
        drop(hold);
        Ok(())
    }

    /// lseek(2) with SEEK_DATA or SEEK_HOLE from `offset` in the regular file `ino`:
    /// [`FsError::PastEnd`] (ENXIO) at or past the end of file, or when no data follows.
    pub fn seek(&self, ino: u64, offset: u64, target: SeekTarget) -> Result<u64> {
        let znode = self.regular_file(ino)?;
        if offset >= znode.size {
            return Err(FsError::PastEnd);
        }
        let info = self.objset.info(ObjectId(ino))?;
        let block_size = info.data_block_size as u64;
        // Blocks past the highest ever written are holes.
        let blocks_end = (info.max_blkid + 1).min(znode.size.div_ceil(block_size));
        let mut blkid = offset / block_size;
        while blkid < blocks_end {
            if self.objset.block_is_data(ObjectId(ino), blkid)? == (target == SeekTarget::Data) {
                return Ok((blkid * block_size).max(offset));
            }
            blkid += 1;
        }
        match target {
            SeekTarget::Data => Err(FsError::PastEnd),
            // The end of file is a hole; so is everything after the last block.
            SeekTarget::Hole => Ok((blkid * block_size).clamp(offset, znode.size)),
        }
    }

    /// copy_file_range(2) from `source` (a file of `source_fs`, this file system or one of
    /// its snapshots) at `source_offset` to this file system's `target` at `target_offset`:
    /// up to `length` bytes, fewer at the source's end; returns the bytes copied.
    pub fn copy_range(
        &self,
        source_fs: &FileSystem,
        source: u64,
        source_offset: u64,
        target: u64,
        target_offset: u64,
        length: u64,
    ) -> Result<u64> {
        let size = source_fs.regular_file(source)?.size;
        self.regular_file(target)?;
        let length = length.min(size.saturating_sub(source_offset));
        if target_offset
            .checked_add(length)
            .is_none_or(|end| end > FILE_SIZE_MAX)
        {
            return Err(FsError::Invalid("copy past the largest file size".into()));
        }
        let same_file = std::ptr::eq(source_fs, self) && source == target;
        if same_file
            && source_offset < target_offset + length
            && target_offset < source_offset + length
        {
            return Err(FsError::Invalid("overlapping copy within one file".into()));
        }
        let mut done = 0;
        while done < length {
            let at = source_offset + done;
            // Skip holes: they stay holes in the target (its bytes there read as zeros only if
            // they were holes or zeros already, so a hole is written as zeros when needed).
            let data_at = match source_fs.seek(source, at, SeekTarget::Data) {
                Ok(data_at) => data_at.min(source_offset + length),
                Err(FsError::PastEnd) => source_offset + length,
                Err(error) => return Err(error),
            };
            if data_at > at {
                let hole = data_at - at;
                self.zero_target(target, target_offset + done, hole)?;
                done += hole;
                continue;
            }
            // Data up to the next hole (the end of file is one).
            let hole_at = source_fs.seek(source, at, SeekTarget::Hole)?;
            let piece = (length - done)
                .min(COPY_CHUNK_BYTES - at % COPY_CHUNK_BYTES)
                .min(hole_at.saturating_sub(at).max(1));
            let data = source_fs.read(source, at, piece as usize)?;
            if data.is_empty() {
                break;
            }
            self.write(target, target_offset + done, &data)?;
            done += data.len() as u64;
        }
        Ok(done)
    }

    /// Make `length` bytes at `offset` of `target` read as zeros, freeing what is there, and
    /// grow the file to cover them (the target of a copied hole).
    fn zero_target(&self, target: u64, offset: u64, length: u64) -> Result<()> {
        self.fallocate(target, offset, length, FALLOC_FL_ZERO_RANGE)
    }

    /// The znode of a regular file: [`FsError::IsDir`] for a directory, [`FsError::Invalid`]
    /// for other kinds.
    fn regular_file(&self, ino: u64) -> Result<Znode> {
        let znode = self.znode(ino)?;
        match znode.kind() {
            FileKind::Regular => Ok(znode),
            FileKind::Directory => Err(FsError::IsDir),
            kind => Err(FsError::Invalid(format!(
                "a {kind:?} is not a regular file"
            ))),
        }
    }
}
