//! Reading an object's data blocks (OpenZFS dmu_read and dbuf_read). A block is looked for
//! where its newest contents are (`read_block_source`): the dirty copy of the newest txg not
//! yet synced that changed it, zeros (freed, or the object created or removed, in such a txg),
//! or else the object's block tree, whose block pointer is read through `BlockIo` and the ARC
//! with the object set's `primarycache` policy. A read for a read-modify-write says so
//! (`ReadFor::Rewrite`), so that the cache keeps no decompressed copy that would be stale at
//! once. Damage is noted in the read-error log before it is returned.

use super::*;

/// What [`ObjectSet::read_block_source`] found for one data block.
enum BlockSource {
    Data(Arc<Vec<u8>>),
    Zeros,
    Tree(Box<DnodePhys>),
}

impl ObjectSet {
    /// Where the current contents of data block `blkid` are, without reading the disk.
    fn read_block_source(&self, object: ObjectId, blkid: u64) -> Result<BlockSource, ObjectError> {
        let dirty_block = {
            let state = self.state.lock();
            state
                .dirty
                .values()
                .rev()
                .filter_map(|dirty| dirty.objects.get(&object))
                .find_map(|record| {
                    let zeros = record.removed
                        || record.create.is_some()
                        || record
                            .frees
                            .iter()
                            .any(|&(start, end)| start <= blkid && blkid < end);
                    match record.blocks.get(&blkid) {
                        Some(block) => Some(Some(block.clone())),
                        None if zeros => Some(None),
                        None => None,
                    }
                })
        };
        match dirty_block {
            // Decompressed (a stored payload) outside the object set's lock.
            Some(Some(block)) => return Ok(BlockSource::Data(block.contents()?)),
            Some(None) => return Ok(BlockSource::Zeros),
            None => {}
        }
        Ok(BlockSource::Tree(Box::new(self.tree_dnode(object)?)))
    }

    /// The contents of data block `blkid` (exactly the object's block size; holes are zeros).
    pub fn read_block(&self, object: ObjectId, blkid: u64) -> Result<Arc<Vec<u8>>, ObjectError> {
        let dnode = self.existing_dnode(object)?;
        self.read_block_sized(object, blkid, dnode.data_block_size as usize, ReadFor::Use)
    }

    /// [`ObjectSet::read_block`] of an object the caller knows exists, with blocks of
    /// `block_size` bytes, read for `purpose` (a read-modify-write reads for
    /// [`ReadFor::Rewrite`], and usually holds the only reference to what it gets).
    pub(super) fn read_block_sized(
        &self,
        object: ObjectId,
        blkid: u64,
        block_size: usize,
        purpose: ReadFor,
    ) -> Result<Arc<Vec<u8>>, ObjectError> {
        let _l2 = self.l2_scope();
        match self.read_block_source(object, blkid)? {
            BlockSource::Data(data) => Ok(data),
            BlockSource::Zeros => Ok(Arc::new(vec![0; block_size])),
            BlockSource::Tree(tree_dnode) => {
                if tree_dnode.is_free() {
                    return Ok(Arc::new(vec![0; block_size]));
                }
                let bp = tree::lookup_block(&self.io, &tree_dnode, blkid)
                    .inspect_err(|error| self.read_errors.note(object, blkid, 0, error))?;
                if bp.is_hole() {
                    return Ok(Arc::new(vec![0; block_size]));
                }
                let data = self
                    .io
                    .read_cached_for(&bp, self.primarycache(), purpose)
                    .map_err(|error| {
                        let error = ObjectError::from(error);
                        let birth = bp.birth_physical.0;
                        self.read_errors.note(object, blkid, birth, &error);
                        error
                    })?;
                // A reader that took the block size before a writer grew the object's single
                // block and a sync wrote it (write.rs) finds the grown block: not damage.
                if data.len() != block_size
                    && data.len() != self.existing_dnode(object)?.data_block_size as usize
                {
                    return Err(ObjectError::Corrupt(format!(
                        "object {object} block {blkid}: {} bytes, block size {block_size}",
                        data.len()
                    )));
                }
                Ok(data)
            }
        }
    }

    /// The contents of data block `blkid`, or None if it is a hole.
    pub fn read_block_if_present(
        &self,
        object: ObjectId,
        blkid: u64,
    ) -> Result<Option<Arc<Vec<u8>>>, ObjectError> {
        let _l2 = self.l2_scope();
        self.existing_dnode(object)?;
        match self.read_block_source(object, blkid)? {
            BlockSource::Data(data) => Ok(Some(data)),
            BlockSource::Zeros => Ok(None),
            BlockSource::Tree(tree_dnode) => {
                if tree_dnode.is_free() {
                    return Ok(None);
                }
                let bp = tree::lookup_block(&self.io, &tree_dnode, blkid)
                    .inspect_err(|error| self.read_errors.note(object, blkid, 0, error))?;
                if bp.is_hole() {
                    return Ok(None);
                }
                let read = self
                    .io
                    .read_cached(&bp, self.primarycache())
                    .map_err(ObjectError::from);
                let birth = bp.birth_physical.0;
                Ok(Some(read.inspect_err(|error| {
                    self.read_errors.note(object, blkid, birth, error)
                })?))
            }
        }
    }

    /// Whether data block `blkid` holds data rather than a hole, without reading it. A block
    /// written in a txg not yet synced counts as data even if its bytes are zeros (it may
    /// still become a hole when synced): SEEK_DATA / SEEK_HOLE must never call data a hole
    /// (OpenZFS issue 15526), and calling a hole data is harmless.
    pub fn block_is_data(&self, object: ObjectId, blkid: u64) -> Result<bool, ObjectError> {
        self.existing_dnode(object)?;
        match self.read_block_source(object, blkid)? {
            BlockSource::Data(_) => Ok(true),
            BlockSource::Zeros => Ok(false),
            BlockSource::Tree(tree_dnode) => Ok(!tree_dnode.is_free()
                && !tree::lookup_block(&self.io, &tree_dnode, blkid)?.is_hole()),
        }
    }

    /// Whether every data block in `blkids` can be read without device I/O for its data
    /// (written in a txg not yet synced, a hole, or cached); indirect blocks may be read to
    /// find out.
    pub fn blocks_in_memory(
        &self,
        object: ObjectId,
        blkids: std::ops::Range<u64>,
    ) -> Result<bool, ObjectError> {
        for blkid in blkids {
            if let BlockSource::Tree(tree_dnode) = self.read_block_source(object, blkid)? {
                if !tree_dnode.is_free()
                    && !self
                        .io
                        .is_in_memory(&tree::lookup_block(&self.io, &tree_dnode, blkid)?)
                {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Read bytes at `offset`; holes and bytes past the last block read as zeros.
    pub fn read(&self, object: ObjectId, offset: u64, buf: &mut [u8]) -> Result<(), ObjectError> {
        let mut done = 0usize;
        self.read_pieces(object, offset, buf.len(), |piece| {
            buf[done..done + piece.len()].copy_from_slice(piece);
            done += piece.len();
        })
    }

    /// [`ObjectSet::read`] of `length` bytes appended to `out`, which is not zeroed first (a
    /// read through a mount returns a buffer of up to 1 MiB that the blocks fill entirely).
    pub fn read_append(
        &self,
        object: ObjectId,
        offset: u64,
        length: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), ObjectError> {
        out.reserve(length);
        self.read_pieces(object, offset, length, |piece| out.extend_from_slice(piece))
    }

    /// Hand `sink` the bytes of `length` at `offset`, in order, a piece per block.
    fn read_pieces(
        &self,
        object: ObjectId,
        offset: u64,
        length: usize,
        mut sink: impl FnMut(&[u8]),
    ) -> Result<(), ObjectError> {
        let block_size = self.existing_dnode(object)?.data_block_size as u64;
        let mut done = 0usize;
        while done < length {
            let position = offset + done as u64;
            let blkid = position / block_size;
            let within = (position % block_size) as usize;
            let chunk = (block_size as usize - within).min(length - done);
            let block = self.read_block(object, blkid)?;
            sink(&block[within..within + chunk]);
            done += chunk;
        }
        Ok(())
    }
}
