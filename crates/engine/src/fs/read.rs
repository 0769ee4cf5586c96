//! Reading files: [`FileSystem::read`], the multi-block read behind it (prefetch first, then
//! blocks read by the prefetch workers beside the reader) and the relatime update of the
//! access time.

use std::sync::atomic::Ordering;

use crate::object::prefetch::PrefetchStats;
use crate::object::{ObjectSet, ReadPiece};
use crate::types::ObjectId;

use super::phys::{FileKind, Timestamp, Znode};
use super::{FileSystem, FsError, Result, IO_BYTES_MAX};

/// relatime: a read updates an atime older than this even if it is newer than mtime and ctime.
const RELATIME_SECONDS: i64 = 24 * 60 * 60;

/// Where [`FileSystem::read_blocks`] puts what it reads.
pub(super) enum ReadSink<'a> {
    /// The bytes, appended.
    Copy(&'a mut Vec<u8>),
    /// The blocks that hold them, shared, appended.
    Share(&'a mut Vec<ReadPiece>),
}

impl ReadSink<'_> {
    fn read(
        &mut self,
        objset: &ObjectSet,
        object: ObjectId,
        offset: u64,
        length: usize,
    ) -> Result<()> {
        match self {
            ReadSink::Copy(data) => objset.read_append(object, offset, length, data)?,
            ReadSink::Share(pieces) => objset.read_shared(object, offset, length, pieces)?,
        }
        Ok(())
    }
}

impl FileSystem {
    /// Read up to `length` bytes at `offset` from a regular file (fewer at its end).
    pub fn read(&self, ino: u64, offset: u64, length: usize) -> Result<Vec<u8>> {
        let mut data = Vec::new();
        self.read_to(ino, offset, length, ReadSink::Copy(&mut data))?;
        Ok(data)
    }

    /// As [`FileSystem::read`], the bytes left where they are: appended to `pieces` as the
    /// blocks that hold them, shared with the cache, and the range of each read
    /// ([`ObjectSet::read_shared`]). A mount answers a READ from these (one copy, into the
    /// kernel, instead of two) and drops them right after.
    ///
    /// [`ObjectSet::read_shared`]: crate::object::ObjectSet::read_shared
    pub fn read_shared(
        &self,
        ino: u64,
        offset: u64,
        length: usize,
        pieces: &mut Vec<ReadPiece>,
    ) -> Result<()> {
        self.read_to(ino, offset, length, ReadSink::Share(pieces))
    }

    fn read_to(&self, ino: u64, offset: u64, length: usize, sink: ReadSink<'_>) -> Result<()> {
        if length > IO_BYTES_MAX {
            return Err(FsError::Invalid(format!("read of {length} bytes")));
        }
        let znode = self.znode(ino)?;
        match znode.kind() {
            FileKind::Regular => {}
            FileKind::Directory => return Err(FsError::IsDir),
            kind => return Err(FsError::Invalid(format!("read of a {kind:?}"))),
        }
        let available = znode.size.saturating_sub(offset);
        let length = (length as u64).min(available) as usize;
        if length > 0 {
            self.read_blocks(ino, offset, length, sink)?;
        }
        // On a pool suspended by a failed sync (failmode continue or wait) reads go on: the
        // atime update it cannot write is dropped, not turned into a failed read.
        if let Err(error) = self.touch_atime(ino, &znode) {
            if self.txgs.failure().is_none() {
                return Err(error);
            }
        }
        Ok(())
    }

    /// Read `length` bytes at `offset` of file `ino` into `sink`. A read spanning several blocks of which some
    /// are not in memory has the prefetch workers read all but the first, as demand reads,
    /// while this thread reads the first, then takes each next block in turn: each such block
    /// is a synchronous device read, and a device serves several at once much faster than one
    /// after the other ([`Prefetcher::read_for_reader`]; no threads are started per read).
    /// When all are in memory (the prefetcher read them ahead, or they were just written) the
    /// read is a copy on the calling thread.
    ///
    /// The prefetcher sees every read first: a sequential reader finds the blocks it asks for
    /// already in the cache, read ahead by the prefetch workers. Where the cache does not keep
    /// this file system's data (`primarycache`), blocks are read one after the other here.
    pub(super) fn read_blocks(
        &self,
        ino: u64,
        offset: u64,
        length: usize,
        mut sink: ReadSink<'_>,
    ) -> Result<()> {
        let object = ObjectId(ino);
        let info = self.objset.info(object)?;
        let block_size = info.data_block_size as u64;
        if block_size == 0 {
            return Err(FsError::Corrupt(format!("file {ino} has block size 0")));
        }
        let blocks = offset / block_size..(offset + length as u64).div_ceil(block_size);
        if let ReadSink::Copy(data) = &mut sink {
            data.reserve(length);
        }
        // Read-ahead would only fill a cache that does not keep this set's data.
        let cached = self.objset.primarycache() == crate::cache::CachePolicy::All;
        if cached {
            self.prefetch.access(
                object,
                blocks.clone(),
                block_size,
                info.max_blkid.saturating_add(1),
            );
        }
        let helped = cached
            && blocks.end - blocks.start > 1
            && !self.objset.blocks_in_memory(object, blocks.clone())?
            && self
                .prefetch
                .read_for_reader(object, blocks.start + 1..blocks.end);
        if !helped {
            if cached {
                self.prefetch.claim(object, blocks);
            }
            return sink.read(&self.objset, object, offset, length);
        }
        // Block by block: claim each (take it back from the queue if no worker has started
        // it, or wait for the worker reading it), then copy it out, or read it here.
        let end = offset + length as u64;
        let mut at = offset;
        while at < end {
            let blkid = at / block_size;
            let piece = ((blkid + 1) * block_size).min(end) - at;
            self.prefetch.claim(object, blkid..blkid + 1);
            sink.read(&self.objset, object, at, piece as usize)?;
            at += piece;
        }
        Ok(())
    }

    /// The prefetcher's counters (zfetchstats).
    pub fn prefetch_stats(&self) -> PrefetchStats {
        self.prefetch.stats()
    }

    /// relatime: update atime if it is not newer than mtime or ctime, or a day old.
    fn touch_atime(&self, ino: u64, znode: &Znode) -> Result<()> {
        if !self.atime_updates.load(Ordering::Relaxed) || self.read_only {
            return Ok(());
        }
        let now = Timestamp::now();
        let stale = |znode: &Znode| {
            znode.atime <= znode.mtime
                || znode.atime <= znode.ctime
                || now.seconds.saturating_sub(znode.atime.seconds) >= RELATIME_SECONDS
        };
        if !stale(znode) {
            return Ok(());
        }
        let _guards = self.lock_inodes(&[ino]);
        let mut znode = self.znode(ino)?;
        if !stale(&znode) {
            return Ok(());
        }
        znode.atime = now;
        let _gate = self.change()?;
        let hold = self.txgs.assign()?;
        self.put_znode(&hold.tx(), ino, &znode)?;
        Ok(())
    }
}
