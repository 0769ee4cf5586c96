//! Syncing one object's block tree: apply a txg's frees and writes to the tree under a dnode,
//! writing every changed block copy-on-write, bottom-up, and handing every block that enters or
//! leaves the tree to the object set's [`BlockLifecycle`].
//!
//! The tree: a dnode's block pointer is the root. With `levels == 1` it addresses data block 0
//! directly; otherwise it addresses an indirect block of level `levels - 1`, each indirect
//! block holds `fanout` block pointers to blocks one level down, and level 0 holds data. Levels
//! grow (a new root whose first pointer is the old root) when a write lands beyond the tree's
//! capacity; they never shrink.
//!
//! A [`TreeSync`] keeps the indirect blocks it touches in memory, with the pointer each was read
//! through, so that a block is written once per pass however many of its children change, and so
//! that in later sync passes a block born in this txg can be rewritten in place.
//!
//! An indirect block is kept as the bytes it was read as, and only the pointers the sync reads
//! or changes are decoded ([`Indirect`]); it is written as those bytes with the changed
//! pointers encoded over theirs. A txg that changes one pointer of a 128 KiB indirect block
//! (1,024 pointers) decoded and encoded all of them before, a sixth of a one-block txg's time.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::phys::{DnodePhys, LEVELS_MAX};
use super::{BlockLifecycle, ObjectError};
use crate::block::blkptr::{BlockPtr, Compression, ObjectType, BLKPTR_SIZE};
use crate::block::pipeline::{BlockIo, SyncPoint, WriteProps};
use crate::space::storage::SpaceStorage;

/// An indirect block a sync has in hand: the bytes it was read as, and its pointers that were
/// decoded or changed since. A pointer not in `touched` is the one in `stored`.
struct Indirect {
    /// The pointer this block was read through (a hole for a new block).
    original: BlockPtr,
    /// The block's `fanout` encoded pointers as read, checksum verified; for a block that was a
    /// hole (or is new), `fanout` copies of `hole`, encoded.
    stored: Arc<Vec<u8>>,
    /// Pointers decoded from `stored` or set since, by slot.
    touched: BTreeMap<usize, BlockPtr>,
    dirty: bool,
}

impl Indirect {
    /// An indirect block read through `original` (level >= 1), or made of holes for one that
    /// is a hole.
    fn read(io: &BlockIo, original: BlockPtr, fanout: u64) -> Result<Indirect, ObjectError> {
        let stored = if original.is_hole() {
            let hole = BlockPtr::hole(
                original.birth_logical,
                original.object_type,
                original.level - 1,
            );
            Arc::new(hole.encode().repeat(fanout as usize))
        } else {
            read_indirect_bytes(io, &original, fanout)?
        };
        Ok(Indirect {
            original,
            stored,
            touched: BTreeMap::new(),
            dirty: false,
        })
    }

    /// A new indirect block at `level` whose every pointer is `hole` (a new root).
    fn new_of_holes(original: BlockPtr, hole: &BlockPtr, fanout: u64) -> Indirect {
        Indirect {
            original,
            stored: Arc::new(hole.encode().repeat(fanout as usize)),
            touched: BTreeMap::new(),
            dirty: false,
        }
    }

    fn slots(&self) -> usize {
        self.stored.len() / BLKPTR_SIZE
    }

    fn stored_slot(&self, slot: usize) -> &[u8] {
        &self.stored[slot * BLKPTR_SIZE..(slot + 1) * BLKPTR_SIZE]
    }

    /// Pointer `slot`, decoded (and checked to be one level down) the first time it is asked
    /// for.
    fn entry(&mut self, slot: usize) -> Result<BlockPtr, ObjectError> {
        if let Some(entry) = self.touched.get(&slot) {
            return Ok(entry.clone());
        }
        let child = decode_child(self.stored_slot(slot), self.original.level)?;
        self.touched.insert(slot, child.clone());
        Ok(child)
    }

    fn set(&mut self, slot: usize, bp: BlockPtr) {
        self.touched.insert(slot, bp);
        self.dirty = true;
    }

    /// The block's bytes with every touched pointer encoded over its slot, its fill count (the
    /// data blocks beneath it), and whether every pointer is a hole.
    fn encode(&self) -> (Vec<u8>, u64, bool) {
        let mut bytes = self.stored.as_ref().clone();
        for (slot, entry) in &self.touched {
            entry.encode_into(&mut bytes[slot * BLKPTR_SIZE..(slot + 1) * BLKPTR_SIZE]);
        }
        let mut fill = 0;
        let mut all_holes = true;
        for pointer in bytes.chunks_exact(BLKPTR_SIZE) {
            fill += BlockPtr::encoded_fill_count(pointer);
            all_holes &= BlockPtr::encoded_is_hole(pointer);
        }
        (bytes, fill, all_holes)
    }
}

pub(crate) struct TreeSync<'a> {
    pub dnode: DnodePhys,
    io: &'a BlockIo,
    lifecycle: &'a dyn BlockLifecycle,
    storage: &'a dyn SpaceStorage,
    at: SyncPoint,
    indirects: BTreeMap<(u8, u64), Indirect>,
    /// What the cache keeps of the blocks written (the object set's `primarycache`).
    pub cache: crate::cache::CachePolicy,
}

/// The bytes of the indirect block `bp` (not a hole), checked to hold `fanout` pointers.
fn read_indirect_bytes(
    io: &BlockIo,
    bp: &BlockPtr,
    fanout: u64,
) -> Result<Arc<Vec<u8>>, ObjectError> {
    let data = io.read(bp)?;
    if data.len() as u64 != fanout * BLKPTR_SIZE as u64 {
        return Err(ObjectError::Corrupt(format!(
            "indirect block of {} bytes, expected {}",
            data.len(),
            fanout * BLKPTR_SIZE as u64
        )));
    }
    Ok(data)
}

/// Decode one pointer of an indirect block at `parent_level`, checked to be one level down.
fn decode_child(bytes: &[u8], parent_level: u8) -> Result<BlockPtr, ObjectError> {
    let child = BlockPtr::decode(bytes)?;
    if child.level + 1 != parent_level {
        return Err(ObjectError::Corrupt(format!(
            "indirect block at level {parent_level} points to a level-{} block",
            child.level
        )));
    }
    Ok(child)
}

/// Read an indirect block's pointers, validating that each child is one level down.
pub(crate) fn read_indirect(
    io: &BlockIo,
    bp: &BlockPtr,
    fanout: u64,
) -> Result<Vec<BlockPtr>, ObjectError> {
    if bp.is_hole() {
        let birth = bp.birth_logical;
        return Ok((0..fanout)
            .map(|_| BlockPtr::hole(birth, bp.object_type, bp.level - 1))
            .collect());
    }
    let data = read_indirect_bytes(io, bp, fanout)?;
    (data.chunks_exact(BLKPTR_SIZE))
        .map(|chunk| decode_child(chunk, bp.level))
        .collect()
}

/// Whether the write pipeline rewrote `old`'s copies in place (a later sync pass rewriting a
/// block born in the same txg): then the block neither left nor entered the tree.
pub(crate) fn rewritten_in_place(old: &BlockPtr, new: &BlockPtr) -> bool {
    !old.is_hole() && !old.embedded && !new.is_hole() && !new.embedded && old.dvas == new.dvas
}

/// How the blocks of the object `dnode` describes are written at `level`.
pub(crate) fn block_props(dnode: &DnodePhys, level: u8) -> WriteProps {
    WriteProps {
        checksum: dnode.checksum,
        // Indirect blocks are always compressed (lz4), whatever the object's setting, as
        // OpenZFS compresses metadata: a partly filled one is mostly zeros, and each is
        // rewritten whenever a block beneath it changes.
        compression: if level > 0 {
            Compression::Lz4
        } else {
            dnode.compression
        },
        // One rule for every block: file data gets the dataset's copies, metadata (indirect
        // blocks, dnode blocks, key/value objects, ...) one more.
        copies: super::write_copies(dnode.object_type, level, dnode.copies),
        object_type: dnode.object_type,
        level,
        cache: crate::cache::CachePolicy::All,
    }
}

/// Number of data blocks below one block pointer at `level`.
fn span(fanout: u64, level: u8) -> u64 {
    fanout.saturating_pow(level as u32)
}

impl<'a> TreeSync<'a> {
    pub fn new(
        dnode: DnodePhys,
        io: &'a BlockIo,
        lifecycle: &'a dyn BlockLifecycle,
        storage: &'a dyn SpaceStorage,
        at: SyncPoint,
    ) -> TreeSync<'a> {
        TreeSync {
            dnode,
            io,
            lifecycle,
            storage,
            at,
            indirects: BTreeMap::new(),
            cache: crate::cache::CachePolicy::All,
        }
    }

    fn props(&self, level: u8) -> WriteProps {
        WriteProps {
            cache: self.cache,
            ..block_props(&self.dnode, level)
        }
    }

    fn root_level(&self) -> u8 {
        self.dnode.levels - 1
    }

    /// The pointer currently addressing block (level, index).
    fn pointer_to(&mut self, level: u8, index: u64) -> Result<BlockPtr, ObjectError> {
        if level == self.root_level() {
            debug_assert_eq!(index, 0);
            return Ok(self.dnode.blkptr.clone());
        }
        let fanout = self.dnode.fanout();
        let parent = self.load(level + 1, index / fanout)?;
        parent.entry((index % fanout) as usize)
    }

    fn load(&mut self, level: u8, index: u64) -> Result<&mut Indirect, ObjectError> {
        debug_assert!(level >= 1 && level <= self.root_level());
        if !self.indirects.contains_key(&(level, index)) {
            let original = self.pointer_to(level, index)?;
            if original.level != level {
                return Err(ObjectError::Corrupt(format!(
                    "expected a level-{level} block, found level {}",
                    original.level
                )));
            }
            let indirect = Indirect::read(self.io, original, self.dnode.fanout())?;
            self.indirects.insert((level, index), indirect);
        }
        Ok(self
            .indirects
            .get_mut(&(level, index))
            .expect("just inserted"))
    }

    /// Store `bp` as the pointer addressing block (level, index).
    fn set_pointer(&mut self, level: u8, index: u64, bp: BlockPtr) -> Result<(), ObjectError> {
        if level == self.root_level() {
            self.dnode.blkptr = bp;
            return Ok(());
        }
        let fanout = self.dnode.fanout();
        let parent = self.load(level + 1, index / fanout)?;
        parent.set((index % fanout) as usize, bp);
        Ok(())
    }

    fn born(&mut self, bp: &BlockPtr) {
        if !bp.is_hole() {
            self.dnode.size_allocated += self.io.dsize(bp);
            self.lifecycle.block_born(bp, self.at);
        }
    }

    fn kill(&mut self, bp: &BlockPtr) -> Result<(), ObjectError> {
        if !bp.is_hole() {
            self.dnode.size_allocated = self.dnode.size_allocated.saturating_sub(self.io.dsize(bp));
            self.lifecycle.block_kill(bp, self.at)?;
        }
        Ok(())
    }

    /// Kill a block and everything beneath it.
    fn kill_subtree(&mut self, bp: &BlockPtr) -> Result<(), ObjectError> {
        if bp.is_hole() {
            return Ok(());
        }
        if bp.level > 0 {
            for child in read_indirect(self.io, bp, self.dnode.fanout())? {
                self.kill_subtree(&child)?;
            }
        }
        self.kill(bp)
    }

    /// Add levels until block `blkid` is addressable.
    pub fn grow_to(&mut self, blkid: u64) -> Result<(), ObjectError> {
        while self.dnode.capacity_blocks(self.dnode.levels) <= blkid {
            if self.dnode.levels >= LEVELS_MAX {
                return Err(ObjectError::TooLarge(format!(
                    "block {blkid} is past the {LEVELS_MAX} levels a tree may have"
                )));
            }
            let old_root = self.dnode.blkptr.clone();
            let new_level = self.dnode.levels;
            let fanout = self.dnode.fanout();
            let hole = BlockPtr::hole(self.at.txg, self.dnode.object_type, new_level - 1);
            let root_is_hole = old_root.is_hole();
            let original = BlockPtr::hole(self.at.txg, self.dnode.object_type, new_level);
            let mut root = Indirect::new_of_holes(original.clone(), &hole, fanout);
            root.touched.insert(0, old_root);
            root.dirty = !root_is_hole;
            self.indirects.insert((new_level, 0), root);
            self.dnode.blkptr = original;
            self.dnode.levels += 1;
        }
        Ok(())
    }

    /// Free data blocks [start, end) (end exclusive; `u64::MAX` means to the end).
    pub fn free_range(&mut self, start: u64, end: u64) -> Result<(), ObjectError> {
        if start >= end {
            return Ok(());
        }
        if self.dnode.levels == 1 {
            if start == 0 {
                let old = std::mem::replace(
                    &mut self.dnode.blkptr,
                    BlockPtr::hole(self.at.txg, self.dnode.object_type, 0),
                );
                self.kill(&old)?;
            }
            return Ok(());
        }
        let root_level = self.root_level();
        if self.dnode.blkptr.is_hole() && !self.indirects.contains_key(&(root_level, 0)) {
            return Ok(());
        }
        self.free_in(root_level, 0, start, end)
    }

    fn free_in(&mut self, level: u8, index: u64, start: u64, end: u64) -> Result<(), ObjectError> {
        let fanout = self.dnode.fanout();
        let child_span = span(fanout, level - 1);
        let base = index * span(fanout, level);
        let slots = self.load(level, index)?.slots() as u64;
        for slot in 0..slots {
            let child_start = base + slot * child_span;
            let child_end = child_start.saturating_add(child_span);
            if child_end <= start || child_start >= end {
                continue;
            }
            let child = self.load(level, index)?.entry(slot as usize)?;
            let child_index = index * fanout + slot;
            let child_loaded = level > 1 && self.indirects.contains_key(&(level - 1, child_index));
            if child.is_hole() && !child_loaded {
                continue;
            }
            if start <= child_start && child_end <= end && !child_loaded {
                self.kill_subtree(&child)?;
                let hole = BlockPtr::hole(self.at.txg, self.dnode.object_type, level - 1);
                self.load(level, index)?.set(slot as usize, hole);
            } else if level > 1 {
                self.free_in(level - 1, child_index, start, end)?;
                self.load(level - 1, child_index)?.dirty = true;
            } else {
                // A level-1 entry only partly inside the range cannot happen: data blocks are
                // the unit of freeing.
                unreachable!("partial free of a single data block");
            }
        }
        Ok(())
    }

    /// Write data block `blkid`; `stored`, if given, is its compressed payload to store as it
    /// is ([`BlockIo::write_precompressed`]); `cached`: whether the cache may keep it (as the
    /// object set's `primarycache` says), else it does not (a received block).
    pub fn write_block(
        &mut self,
        blkid: u64,
        data: &Arc<Vec<u8>>,
        stored: Option<&(Compression, Arc<Vec<u8>>)>,
        cached: bool,
    ) -> Result<(), ObjectError> {
        self.grow_to(blkid)?;
        let old = self.data_pointer(blkid)?;
        let props = WriteProps {
            cache: if cached {
                self.cache
            } else {
                crate::cache::CachePolicy::None
            },
            ..self.props(0)
        };
        // Shared, not copied: the dirty record's buffer is immutable, so the write queue and
        // the cache can keep it as it is.
        let bp = match stored {
            Some((compression, payload)) => self.io.write_precompressed(
                data,
                (*compression, payload),
                &props,
                1,
                self.at,
                Some(&old),
                self.storage,
            )?,
            None => self
                .io
                .write_shared(data, &props, 1, self.at, Some(&old), self.storage)?,
        };
        if !rewritten_in_place(&old, &bp) {
            self.kill(&old)?;
            self.born(&bp);
        }
        self.set_pointer(0, blkid, bp)
    }

    /// Write data block `blkid` from its payload alone (`DirtyBlock::Stored`, a compressed
    /// receive): stored as it is ([`BlockIo::write_stored`]).
    pub fn write_stored(
        &mut self,
        blkid: u64,
        compression: Compression,
        payload: &Arc<Vec<u8>>,
        size_logical: u32,
        fletcher4: Option<&[u8; 32]>,
    ) -> Result<(), ObjectError> {
        self.grow_to(blkid)?;
        let old = self.data_pointer(blkid)?;
        let bp = self.io.write_stored(
            (payload, fletcher4),
            compression,
            size_logical,
            &self.props(0),
            1,
            self.at,
            Some(&old),
            self.storage,
        )?;
        if !rewritten_in_place(&old, &bp) {
            self.kill(&old)?;
            self.born(&bp);
        }
        self.set_pointer(0, blkid, bp)
    }

    /// The pointer currently addressing data block `blkid` (the tree has grown to it).
    fn data_pointer(&mut self, blkid: u64) -> Result<BlockPtr, ObjectError> {
        if self.dnode.levels == 1 {
            Ok(self.dnode.blkptr.clone())
        } else {
            self.pointer_to(0, blkid)
        }
    }

    /// Make `bp`, written ahead of the sync for the intent log (block/prewrite.rs), data block
    /// `blkid`: it enters the tree as a block the sync wrote would.
    pub fn adopt_block(&mut self, blkid: u64, bp: &BlockPtr) -> Result<(), ObjectError> {
        self.grow_to(blkid)?;
        let old = self.data_pointer(blkid)?;
        self.kill(&old)?;
        self.born(bp);
        self.set_pointer(0, blkid, bp.clone())
    }

    /// Replace the dnode's spill block with `data` (None: remove it). The spill is metadata
    /// (one copy more than file data), compressed as the object's blocks are, and enters and
    /// leaves the object through the same lifecycle as its tree's blocks.
    pub fn set_spill(&mut self, data: Option<&Arc<Vec<u8>>>) -> Result<(), ObjectError> {
        let old = self.dnode.spill.take();
        let old_or_hole = old
            .clone()
            .unwrap_or_else(|| BlockPtr::hole(self.at.txg, ObjectType::Spill, 0));
        let new = match data {
            Some(data) => {
                let props = WriteProps {
                    object_type: ObjectType::Spill,
                    copies: super::write_copies(ObjectType::Spill, 0, self.dnode.copies),
                    ..self.props(0)
                };
                Some(self.io.write_shared(
                    data,
                    &props,
                    1,
                    self.at,
                    Some(&old_or_hole),
                    self.storage,
                )?)
            }
            None => None,
        };
        let in_place = new
            .as_ref()
            .is_some_and(|new| rewritten_in_place(&old_or_hole, new));
        if !in_place {
            if let Some(old) = &old {
                self.kill(old)?;
            }
            if let Some(new) = &new {
                self.born(new);
            }
        }
        self.dnode.spill = new;
        Ok(())
    }

    /// Write every dirty indirect block, bottom-up, and return the finished dnode.
    pub fn finish(mut self) -> Result<DnodePhys, ObjectError> {
        for level in 1..self.dnode.levels {
            let keys: Vec<(u8, u64)> = self
                .indirects
                .range((level, 0)..=(level, u64::MAX))
                .filter(|(_, ind)| ind.dirty)
                .map(|(key, _)| *key)
                .collect();
            for key in keys {
                let indirect = self.indirects.remove(&key).expect("listed");
                let (bytes, fill, all_holes) = indirect.encode();
                let bp = if all_holes {
                    BlockPtr::hole(self.at.txg, self.dnode.object_type, level)
                } else {
                    self.io.write(
                        &bytes,
                        &self.props(level),
                        fill,
                        self.at,
                        Some(&indirect.original),
                        self.storage,
                    )?
                };
                if !rewritten_in_place(&indirect.original, &bp) {
                    self.kill(&indirect.original)?;
                    self.born(&bp);
                }
                self.set_pointer(level, key.1, bp)?;
            }
        }
        Ok(self.dnode)
    }
}

/// Look up the pointer to data block `blkid` under `dnode` without modifying anything (the
/// read path). Holes come back as holes.
pub(crate) fn lookup_block(
    io: &BlockIo,
    dnode: &DnodePhys,
    blkid: u64,
) -> Result<BlockPtr, ObjectError> {
    if blkid >= dnode.capacity_blocks(dnode.levels) {
        return Ok(BlockPtr::hole(crate::types::Txg(0), dnode.object_type, 0));
    }
    let fanout = dnode.fanout();
    let mut bp = dnode.blkptr.clone();
    let mut level = dnode.levels - 1;
    if bp.level != level {
        return Err(ObjectError::Corrupt(format!(
            "dnode root at level {} for a {}-level tree",
            bp.level, dnode.levels
        )));
    }
    while level > 0 {
        if bp.is_hole() {
            return Ok(BlockPtr::hole(bp.birth_logical, dnode.object_type, 0));
        }
        let slot = (blkid / span(fanout, level - 1)) % fanout;
        bp = read_indirect_entry(io, &bp, fanout, slot)?;
        level -= 1;
    }
    Ok(bp)
}

/// Entry `slot` of the indirect block `bp` (not a hole), decoded and checked alone: a lookup
/// needs one pointer, and decoding all `fanout` of them on every lookup costs more than the
/// rest of a small read or write.
fn read_indirect_entry(
    io: &BlockIo,
    bp: &BlockPtr,
    fanout: u64,
    slot: u64,
) -> Result<BlockPtr, ObjectError> {
    let data = read_indirect_bytes(io, bp, fanout)?;
    let start = slot as usize * BLKPTR_SIZE;
    decode_child(&data[start..start + BLKPTR_SIZE], bp.level)
}

/// Visit every block pointer under a dnode: its spill block, then its tree (depth first,
/// parents before children), for `check` and destroy.
pub fn visit_tree(
    io: &BlockIo,
    dnode: &DnodePhys,
    visit: &mut dyn FnMut(&BlockPtr) -> Result<(), ObjectError>,
) -> Result<(), ObjectError> {
    if dnode.is_free() {
        return Ok(());
    }
    if let Some(spill) = &dnode.spill {
        visit(spill)?;
    }
    visit_tree_blocks(io, dnode, &mut |_, bp| visit(bp))
}

/// Visit every block pointer of a dnode's tree (not its spill block), depth first, parents
/// before children, with the id of the first data block each one covers (for `debug object`).
pub fn visit_tree_blocks(
    io: &BlockIo,
    dnode: &DnodePhys,
    visit: &mut dyn FnMut(u64, &BlockPtr) -> Result<(), ObjectError>,
) -> Result<(), ObjectError> {
    fn walk(
        io: &BlockIo,
        bp: &BlockPtr,
        first_blkid: u64,
        fanout: u64,
        visit: &mut dyn FnMut(u64, &BlockPtr) -> Result<(), ObjectError>,
    ) -> Result<(), ObjectError> {
        if bp.is_hole() {
            return Ok(());
        }
        visit(first_blkid, bp)?;
        if bp.level > 0 {
            let child_span = span(fanout, bp.level - 1);
            for (index, child) in read_indirect(io, bp, fanout)?.iter().enumerate() {
                if child.birth_logical > bp.birth_logical {
                    return Err(ObjectError::Corrupt(format!(
                        "child born in txg {} under a parent born in txg {}",
                        child.birth_logical, bp.birth_logical
                    )));
                }
                let child_first = (index as u64)
                    .saturating_mul(child_span)
                    .saturating_add(first_blkid);
                walk(io, child, child_first, fanout, visit)?;
            }
        }
        Ok(())
    }
    if dnode.is_free() {
        return Ok(());
    }
    if dnode.blkptr.level + 1 != dnode.levels {
        return Err(ObjectError::Corrupt(
            "dnode root level does not match its level count".into(),
        ));
    }
    walk(io, &dnode.blkptr, 0, dnode.fanout(), visit)
}

/// The object type stored in pointers of an object's tree.
pub fn tree_type(dnode: &DnodePhys) -> ObjectType {
    dnode.object_type
}
