//! Reading an object's data blocks (OpenZFS dmu_read and dbuf_read). A block is looked for
//! where its newest contents are (`read_block_source`): the dirty copy of the newest txg not
//! yet synced that changed it, zeros (freed, or the object created, in such a txg), or else
//! the object's block tree, whose block pointer is read through `BlockIo` and the ARC
//! with the object set's `primarycache` policy. A read for a read-modify-write says so
//! (`ReadFor::Rewrite`), so that the cache keeps no decompressed copy that would be stale at
//! once. Damage is noted in the read-error log before it is returned.
//!
//! The same look decides whether the object exists (see "Reading" in the documentation of
//! [`super`]): a removed object is [`ObjectError::NoSuchObject`], never a hole or zeros.

use std::cell::RefCell;
use std::sync::Arc;

use crate::cache::ReadFor;
use crate::types::ObjectId;

use super::dirty::DirtyBlock;

/// A piece of a read ([`ObjectSet::read_shared`]): a block's bytes, shared, and the range of
/// them that the read covers.
#[derive(Clone, Debug)]
pub struct ReadPiece {
    pub block: Arc<Vec<u8>>,
    pub range: std::ops::Range<usize>,
}

impl ReadPiece {
    /// The bytes read.
    pub fn bytes(&self) -> &[u8] {
        &self.block[self.range.clone()]
    }
}
use super::phys::DnodePhys;
use super::tree;
use super::{ObjectError, ObjectSet};

/// A callback of [`test_hook_before_block_lookup`].
type BlockLookupHook = Box<dyn FnMut(ObjectId, u64)>;

thread_local! {
    /// Test hook, off: [`test_hook_before_block_lookup`].
    static BEFORE_BLOCK_LOOKUP: RefCell<Option<BlockLookupHook>> = const { RefCell::new(None) };
}

/// The block id [`test_hook_before_block_lookup`] is called with for an object's spill block
/// (OpenZFS's DMU_SPILL_BLKID): no data block has it, since no tree addresses 2^64 blocks.
#[doc(hidden)]
pub const SPILL_BLKID: u64 = u64::MAX;

/// Test hook, off unless a test sets it: every data-block read made by this thread calls
/// `hook` with the object and block id just before it looks for the block, and every look for
/// a spill block (bonus.rs) with [`SPILL_BLKID`], so that a test can change the object set at
/// that moment, as another thread could (tests/fs_concurrent.rs removes the directory being
/// read there, tests/fs_spill.rs the object whose spill block is read). Reads made by the hook
/// itself do not call it. Per thread, so that tests running beside it are untouched; None
/// turns it off.
#[doc(hidden)]
pub fn test_hook_before_block_lookup(hook: Option<BlockLookupHook>) {
    BEFORE_BLOCK_LOOKUP.set(hook);
}

/// Run this thread's [`test_hook_before_block_lookup`], if set, taken out of its cell while it
/// runs so that the reads it makes do not call it again.
pub(super) fn run_block_lookup_hook(object: ObjectId, blkid: u64) {
    if let Some(mut hook) = BEFORE_BLOCK_LOOKUP.take() {
        hook(object, blkid);
        BEFORE_BLOCK_LOOKUP.with(|cell| {
            cell.borrow_mut().get_or_insert(hook);
        });
    }
}

/// What [`ObjectSet::read_block_source`] found for one data block of an existing object.
enum BlockSource {
    Data(Arc<Vec<u8>>),
    Zeros,
    /// The tree's dnode of the object (not free).
    Tree(Box<DnodePhys>),
}

/// What the dirty records say of one data block, newest txg first.
enum DirtySource {
    Block(DirtyBlock),
    Zeros,
    Removed,
}

impl ObjectSet {
    /// Where the current contents of data block `blkid` are, without reading the disk;
    /// [`ObjectError::NoSuchObject`] if the object does not exist (see the module
    /// documentation). The dirty records are looked at first, under the object set's lock;
    /// the tree read after it is at least as new (a sync drops a record only once the tree
    /// being synced holds it), so a free dnode there means the object was removed by then.
    fn read_block_source(&self, object: ObjectId, blkid: u64) -> Result<BlockSource, ObjectError> {
        run_block_lookup_hook(object, blkid);
        // Object 0 is the meta-dnode, whose blocks hold the dnodes: not an object of the set.
        if object.0 == 0 {
            return Err(ObjectError::NoSuchObject(object));
        }
        let dirty_block = {
            let state = self.state.lock();
            state
                .dirty
                .values()
                .rev()
                .filter_map(|dirty| dirty.objects.get(&object))
                .find_map(|record| {
                    if record.removed {
                        return Some(DirtySource::Removed);
                    }
                    let zeros = record.create.is_some()
                        || record
                            .frees
                            .iter()
                            .any(|&(start, end)| start <= blkid && blkid < end);
                    match record.blocks.get(&blkid) {
                        Some(block) => Some(DirtySource::Block(block.clone())),
                        None if zeros => Some(DirtySource::Zeros),
                        None => None,
                    }
                })
        };
        match dirty_block {
            // Decompressed (a stored payload) outside the object set's lock.
            Some(DirtySource::Block(block)) => return Ok(BlockSource::Data(block.contents()?)),
            Some(DirtySource::Zeros) => return Ok(BlockSource::Zeros),
            Some(DirtySource::Removed) => return Err(ObjectError::NoSuchObject(object)),
            None => {}
        }
        let dnode = self.tree_dnode(object)?;
        if dnode.is_free() {
            return Err(ObjectError::NoSuchObject(object));
        }
        Ok(BlockSource::Tree(Box::new(dnode)))
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
                let bp = tree::lookup_block(&self.io, &tree_dnode, blkid)
                    .inspect_err(|error| self.note_read_error(object, blkid, 0, error))?;
                if bp.is_hole() {
                    return Ok(Arc::new(vec![0; block_size]));
                }
                let data = self
                    .io
                    .read_cached_for(&bp, self.primarycache(), purpose)
                    .map_err(|error| {
                        let error = ObjectError::from(error);
                        let birth = bp.birth_physical.0;
                        self.note_read_error(object, blkid, birth, &error);
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

    /// The contents of data block `blkid`, or None if it is a hole;
    /// [`ObjectError::NoSuchObject`] if the object does not exist.
    pub fn read_block_if_present(
        &self,
        object: ObjectId,
        blkid: u64,
    ) -> Result<Option<Arc<Vec<u8>>>, ObjectError> {
        let _l2 = self.l2_scope();
        match self.read_block_source(object, blkid)? {
            BlockSource::Data(data) => Ok(Some(data)),
            BlockSource::Zeros => Ok(None),
            BlockSource::Tree(tree_dnode) => {
                let bp = tree::lookup_block(&self.io, &tree_dnode, blkid)
                    .inspect_err(|error| self.note_read_error(object, blkid, 0, error))?;
                if bp.is_hole() {
                    return Ok(None);
                }
                let read = self
                    .io
                    .read_cached(&bp, self.primarycache())
                    .map_err(ObjectError::from);
                let birth = bp.birth_physical.0;
                Ok(Some(read.inspect_err(|error| {
                    self.note_read_error(object, blkid, birth, error)
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
            BlockSource::Tree(tree_dnode) => {
                Ok(!tree::lookup_block(&self.io, &tree_dnode, blkid)?.is_hole())
            }
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
                if !self
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
        self.read_pieces(object, offset, buf.len(), |block, range| {
            let piece = &block[range];
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
        self.read_pieces(object, offset, length, |block, range| {
            out.extend_from_slice(&block[range])
        })
    }

    /// [`ObjectSet::read`] of `length` bytes as the blocks that hold them, appended to `out`
    /// without copying a byte: each block shared with the cache (or the dirty record) and the
    /// range of it read. For a caller that hands the bytes on at once (a mount's READ answer
    /// is written to the kernel from them), and should drop the pieces then: a block held
    /// here is not given back to the I/O buffers when the cache evicts it.
    pub fn read_shared(
        &self,
        object: ObjectId,
        offset: u64,
        length: usize,
        out: &mut Vec<ReadPiece>,
    ) -> Result<(), ObjectError> {
        self.read_pieces(object, offset, length, |block, range| {
            out.push(ReadPiece {
                block: Arc::clone(block),
                range,
            })
        })
    }

    /// Hand `sink` the bytes of `length` at `offset`, in order, a piece per block: the block
    /// and the range of it.
    fn read_pieces(
        &self,
        object: ObjectId,
        offset: u64,
        length: usize,
        mut sink: impl FnMut(&Arc<Vec<u8>>, std::ops::Range<usize>),
    ) -> Result<(), ObjectError> {
        let block_size = self.existing_dnode(object)?.data_block_size as u64;
        let mut done = 0usize;
        while done < length {
            let position = offset + done as u64;
            let blkid = position / block_size;
            let within = (position % block_size) as usize;
            let chunk = (block_size as usize - within).min(length - done);
            let block = self.read_block(object, blkid)?;
            sink(&block, within..within + chunk);
            done += chunk;
        }
        Ok(())
    }
}
