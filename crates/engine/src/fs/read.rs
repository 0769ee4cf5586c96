//! Reading files: [`FileSystem::read`], the multi-block read behind it (prefetch first, then
//! blocks on a few threads) and the relatime update of the access time.

use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use super::*;

impl FileSystem {
    /// Read up to `length` bytes at `offset` from a regular file (fewer at its end).
    pub fn read(&self, ino: u64, offset: u64, length: usize) -> Result<Vec<u8>> {
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
        let mut data = vec![0u8; length];
        if length > 0 {
            self.read_blocks(ino, offset, &mut data)?;
        }
        // On a pool suspended by a failed sync (failmode continue or wait) reads go on: the
        // atime update it cannot write is dropped, not turned into a failed read.
        if let Err(error) = self.touch_atime(ino, &znode) {
            if self.txgs.failure().is_none() {
                return Err(error);
            }
        }
        Ok(data)
    }

    /// Fill `data` from `offset` of file `ino`. A read spanning several blocks of which some
    /// are not in memory reads them on up to [`READ_THREADS_MAX`] threads: each such block is
    /// a synchronous device read, and a device serves several at once much faster than one
    /// after the other. When all are in memory (the prefetcher read them ahead, or they were
    /// just written) the read is done on the calling thread, with no threads to start.
    ///
    /// The prefetcher sees every read first: a sequential reader finds the blocks it asks for
    /// already in the cache, read ahead by the prefetch workers.
    pub(super) fn read_blocks(&self, ino: u64, offset: u64, data: &mut [u8]) -> Result<()> {
        let object = ObjectId(ino);
        let info = self.objset.info(object)?;
        let block_size = info.data_block_size as usize;
        if block_size == 0 {
            return Err(FsError::Corrupt(format!("file {ino} has block size 0")));
        }
        let blocks =
            offset / block_size as u64..(offset + data.len() as u64).div_ceil(block_size as u64);
        // Read-ahead would only fill a cache that does not keep this set's data.
        if self.objset.primarycache() == crate::cache::CachePolicy::All {
            self.prefetch.access(
                object,
                blocks.clone(),
                block_size as u64,
                info.max_blkid.saturating_add(1),
            );
            self.prefetch.claim(object, blocks.clone());
        }
        let first_block_end = (offset / block_size as u64 + 1) * block_size as u64;
        let head = ((first_block_end - offset) as usize).min(data.len());
        if head == data.len() || self.objset.blocks_in_memory(object, blocks)? {
            return Ok(self.objset.read(object, offset, data)?);
        }
        // Pieces that each stay within one block.
        let (first, rest) = data.split_at_mut(head);
        let mut pieces: Vec<(u64, &mut [u8])> = vec![(offset, first)];
        let mut at = first_block_end;
        for chunk in rest.chunks_mut(block_size) {
            let length = chunk.len() as u64;
            pieces.push((at, chunk));
            at += length;
        }
        let threads = pieces.len().min(READ_THREADS_MAX);
        let queue = Mutex::new(pieces);
        let failure: Mutex<Option<ObjectError>> = Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    // Take pieces from the front, so that the device sees ascending offsets.
                    let piece = {
                        let mut queue = queue.lock();
                        if queue.is_empty() || failure.lock().is_some() {
                            return;
                        }
                        queue.remove(0)
                    };
                    if let Err(error) = self.objset.read(object, piece.0, piece.1) {
                        failure.lock().get_or_insert(error);
                        return;
                    }
                });
            }
        });
        match failure.into_inner() {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
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
