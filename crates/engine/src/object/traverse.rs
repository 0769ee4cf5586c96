//! Resumable post-order walks of an object set's block tree (OpenZFS traverse.c with a
//! bookmark): the machinery under background destroy (DESIGN.md §4 "Frees are background
//! work").
//!
//! # Order
//! An object set is one tree: the object-set header block, the meta-dnode's tree, its level-0
//! blocks of dnodes, and under each dnode that object's tree. [`walk_post_order`] visits every
//! block of it exactly once, *children before parents*: an object's data blocks in block order,
//! then each indirect block once its children are done, then its spill block if it has one;
//! the objects of a dnode block in object order, then the dnode block; then the trees of the
//! usage objects whose dnodes sit in the header (`accounting.rs`; their numbers are the
//! last three); and the header block last of all.
//!
//! # Bookmark and resumption
//! The walk spends a budget of level-0 data blocks and then stops at a [`Bookmark`]: the next
//! data block to visit, as (object, block id). Everything before it in the order has been
//! visited; nothing at or after it has, except that the indirect and dnode blocks above a pause
//! point are visited only when the walk passes them for good. So a caller that frees each block
//! as it is visited, and persists the bookmark in the same txg, can resume after any crash or
//! export: resuming reads only the path from the header down to the bookmark, and every block
//! on that path is an ancestor of an unvisited block, hence not yet freed. That is why the order
//! is post-order: a pre-order walk would free an indirect block before its children, and the
//! resumed walk would read a block that may have been reallocated.
//!
//! # Births
//! Blocks born at or before `min_birth` are skipped with their whole subtree (a child is never
//! born after its parent): those belong to an older snapshot. `min_birth` 0 visits everything.
//!
//! # Cost
//! Memory: one indirect block per level on the current path (at most two trees of
//! [`super::phys::LEVELS_MAX`] levels), however large the object set. Reads: each indirect and
//! dnode block once per call that passes through it, plus the path to the bookmark on resume.
//! The budget counts data blocks; indirect and dnode blocks finished on the way up are visited
//! without a budget check, so a call may overrun its budget by at most the tree heights.
//!
//! # Trust
//! Every pointer comes from disk: levels must descend one at a time, births must not increase
//! downwards, a dnode's level count must match its root, and arithmetic on block ids is checked.
//! A violation is [`ObjectError::Corrupt`], never a panic.

use crate::block::blkptr::BlockPtr;
use crate::block::pipeline::BlockIo;
use crate::object::accounting::{is_usage_object, usage_object, usage_slot};
use crate::object::owners::OwnerKind;
use crate::object::phys::{DnodePhys, ObjsetHeader, DNODE_SIZE};
use crate::object::{tree, ObjectError};
use crate::types::ObjectId;
use crate::types::Txg;

/// Bytes of an encoded [`Bookmark`].
pub const BOOKMARK_SIZE: usize = 16;

/// Where a walk resumes: the next level-0 block to visit, object `object`, block `blkid`.
/// The default (0, 0) is the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bookmark {
    pub object: u64,
    pub blkid: u64,
}

impl Bookmark {
    /// Little-endian object then block id.
    pub fn encode(&self) -> [u8; BOOKMARK_SIZE] {
        let mut bytes = [0u8; BOOKMARK_SIZE];
        bytes[..8].copy_from_slice(&self.object.to_le_bytes());
        bytes[8..].copy_from_slice(&self.blkid.to_le_bytes());
        bytes
    }

    /// Any 16 bytes are a bookmark; one past the end of the tree just finds nothing to do.
    pub fn decode(bytes: &[u8]) -> Result<Bookmark, ObjectError> {
        if bytes.len() != BOOKMARK_SIZE {
            return Err(ObjectError::Corrupt(format!(
                "bookmark of {} bytes",
                bytes.len()
            )));
        }
        Ok(Bookmark {
            object: u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")),
            blkid: u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes")),
        })
    }
}

/// How a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkEnd {
    /// Every block (the header block last) has been visited.
    Done,
    /// The budget ran out; resume from the bookmark.
    Paused(Bookmark),
}

/// Where a visited block sits in its object set (OpenZFS's `zbookmark_phys`, with the object
/// set left to the caller and a block's id counted in level-0 blocks): what a scan needs to
/// name a damaged block in the error log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockPosition {
    /// A block of object `object`'s tree: a data block (`level` 0, block `first_blkid`) or an
    /// indirect block whose first level-0 block below is `first_blkid`.
    Object {
        object: u64,
        level: u8,
        first_blkid: u64,
    },
    /// Object `object`'s spill block.
    Spill { object: u64 },
    /// A block of the meta-dnode's tree: a block of dnodes (`level` 0) or an indirect block
    /// above them, its first level-0 block `first_blkid`.
    Dnodes { level: u8, first_blkid: u64 },
    /// The object-set header block.
    Header,
}

/// Walk the tree under the object-set header `root` in post-order from `from`, visiting at most
/// `*budget` data blocks (see the module documentation); `*budget` is decreased by the blocks
/// visited.
pub fn walk_post_order(
    io: &BlockIo,
    root: &BlockPtr,
    min_birth: Txg,
    from: Bookmark,
    budget: &mut u64,
    visit: &mut dyn FnMut(&BlockPtr) -> Result<(), ObjectError>,
) -> Result<WalkEnd, ObjectError> {
    walk_post_order_with_positions(io, root, min_birth, from, budget, &mut |bp, _| visit(bp))
}

/// As [`walk_post_order`], telling `visit` where each block sits.
pub fn walk_post_order_with_positions(
    io: &BlockIo,
    root: &BlockPtr,
    min_birth: Txg,
    from: Bookmark,
    budget: &mut u64,
    visit: &mut dyn FnMut(&BlockPtr, BlockPosition) -> Result<(), ObjectError>,
) -> Result<WalkEnd, ObjectError> {
    if root.is_hole() || root.birth_logical <= min_birth {
        return Ok(WalkEnd::Done);
    }
    let header = ObjsetHeader::decode(&io.read(root)?)?;
    let meta = header.meta_dnode;
    check_dnode_root(&meta)?;
    let mut walker = Walker {
        io,
        min_birth,
        from,
        budget: *budget,
        visit,
        object: 0,
        dnodes_per_block: (meta.data_block_size as u64 / DNODE_SIZE as u64).max(1),
    };
    // A bookmark in a usage object is past the whole meta-dnode tree, which was visited
    // (its level-0 blocks would otherwise be visited again, their objects all skipped).
    let mut paused = if is_usage_object(ObjectId(from.object)) {
        None
    } else {
        let meta_from = from.object / walker.dnodes_per_block;
        walker.walk(&meta.blkptr, meta.fanout(), 0, meta_from, Leaf::Dnodes)?
    };
    // The usage objects (`accounting.rs`), whose dnodes sit in the header: their numbers are
    // the last three, so they come after every other object, in number order.
    if let (None, Some(dnodes)) = (paused, &header.accounting) {
        for kind in [OwnerKind::Project, OwnerKind::Group, OwnerKind::User] {
            let object = usage_object(kind).0;
            if object < from.object {
                continue;
            }
            let dnode = &dnodes[usage_slot(ObjectId(object)).expect("a usage object")];
            check_dnode_root(dnode)?;
            let from_blkid = if object == from.object { from.blkid } else { 0 };
            walker.object = object;
            paused = walker.walk(&dnode.blkptr, dnode.fanout(), 0, from_blkid, Leaf::Data)?;
            if paused.is_some() {
                break;
            }
        }
    }
    if paused.is_none() {
        walker.visit_block(root, BlockPosition::Header)?;
    }
    *budget = walker.budget;
    Ok(paused.map_or(WalkEnd::Done, WalkEnd::Paused))
}

fn check_dnode_root(dnode: &DnodePhys) -> Result<(), ObjectError> {
    if !dnode.is_free() && dnode.blkptr.level + 1 != dnode.levels {
        return Err(ObjectError::Corrupt(format!(
            "dnode root at level {} in a tree of {} levels",
            dnode.blkptr.level, dnode.levels
        )));
    }
    Ok(())
}

/// What a level-0 block of the tree being walked holds.
#[derive(Clone, Copy)]
enum Leaf {
    /// Object data: visit it.
    Data,
    /// Dnodes (the meta-dnode's tree): walk each object, then visit the block.
    Dnodes,
}

struct Walker<'a> {
    io: &'a BlockIo,
    min_birth: Txg,
    from: Bookmark,
    budget: u64,
    visit: &'a mut dyn FnMut(&BlockPtr, BlockPosition) -> Result<(), ObjectError>,
    /// The object whose tree is being walked (for bookmarks).
    object: u64,
    dnodes_per_block: u64,
}

impl Walker<'_> {
    fn visit_block(&mut self, bp: &BlockPtr, position: BlockPosition) -> Result<(), ObjectError> {
        (self.visit)(bp, position)?;
        self.budget = self.budget.saturating_sub(1);
        Ok(())
    }

    /// Walk the subtree of `bp`, whose first level-0 block is `start`, skipping level-0 blocks
    /// before `from`. Returns where it paused, if it did.
    fn walk(
        &mut self,
        bp: &BlockPtr,
        fanout: u64,
        start: u64,
        from: u64,
        leaf: Leaf,
    ) -> Result<Option<Bookmark>, ObjectError> {
        if bp.is_hole() || bp.birth_logical <= self.min_birth {
            return Ok(None);
        }
        if bp.level == 0 {
            return match leaf {
                Leaf::Data => self.data_block(bp, start),
                Leaf::Dnodes => self.dnode_block(bp, start),
            };
        }
        let span = fanout
            .checked_pow(bp.level as u32 - 1)
            .ok_or_else(|| ObjectError::Corrupt(format!("tree of level {} too tall", bp.level)))?;
        let children = tree::read_indirect(self.io, bp, fanout)?;
        for (index, child) in children.iter().enumerate() {
            let child_start = (index as u64)
                .checked_mul(span)
                .and_then(|offset| offset.checked_add(start))
                .ok_or_else(|| ObjectError::Corrupt("block id out of range".into()))?;
            if child_start.saturating_add(span) <= from {
                continue;
            }
            if child.level + 1 != bp.level {
                return Err(ObjectError::Corrupt(format!(
                    "indirect block at level {} points to a level-{} block",
                    bp.level, child.level
                )));
            }
            if child.birth_logical > bp.birth_logical {
                return Err(ObjectError::Corrupt(format!(
                    "child born in txg {} under a parent born in txg {}",
                    child.birth_logical, bp.birth_logical
                )));
            }
            let paused = self.walk(child, fanout, child_start, from.max(child_start), leaf)?;
            if paused.is_some() {
                return Ok(paused);
            }
        }
        let position = self.position(leaf, bp.level, start);
        self.visit_block(bp, position)?;
        Ok(None)
    }

    /// The position of a block at `level` of the tree being walked, its first level-0 block
    /// `first_blkid`.
    fn position(&self, leaf: Leaf, level: u8, first_blkid: u64) -> BlockPosition {
        match leaf {
            Leaf::Data => BlockPosition::Object {
                object: self.object,
                level,
                first_blkid,
            },
            Leaf::Dnodes => BlockPosition::Dnodes { level, first_blkid },
        }
    }

    /// A level-0 data block of `self.object`.
    fn data_block(&mut self, bp: &BlockPtr, blkid: u64) -> Result<Option<Bookmark>, ObjectError> {
        if self.budget == 0 {
            return Ok(Some(Bookmark {
                object: self.object,
                blkid,
            }));
        }
        self.visit_block(bp, self.position(Leaf::Data, 0, blkid))?;
        Ok(None)
    }

    /// A level-0 block of the meta-dnode: every object in it, then the block itself.
    fn dnode_block(&mut self, bp: &BlockPtr, blkid: u64) -> Result<Option<Bookmark>, ObjectError> {
        let data = self.io.read(bp)?;
        let first = blkid
            .checked_mul(self.dnodes_per_block)
            .ok_or_else(|| ObjectError::Corrupt("object number out of range".into()))?;
        for slot in 0..self.dnodes_per_block {
            let object = first + slot;
            if object == 0 || object < self.from.object {
                continue;
            }
            let start = slot as usize * DNODE_SIZE;
            let bytes = data
                .get(start..start + DNODE_SIZE)
                .ok_or_else(|| ObjectError::Corrupt("short dnode block".into()))?;
            let dnode = DnodePhys::decode(bytes)?;
            if dnode.is_free() {
                continue;
            }
            check_dnode_root(&dnode)?;
            let from_blkid = if object == self.from.object {
                self.from.blkid
            } else {
                0
            };
            self.object = object;
            let paused = self.walk(&dnode.blkptr, dnode.fanout(), 0, from_blkid, Leaf::Data)?;
            if paused.is_some() {
                return Ok(paused);
            }
            // The spill block after the object's tree: a walk that paused inside the tree
            // reaches it on resume, exactly once.
            if let Some(spill) = dnode.spill.as_ref() {
                if spill.birth_logical > self.min_birth {
                    self.visit_block(spill, BlockPosition::Spill { object })?;
                }
            }
        }
        self.visit_block(bp, self.position(Leaf::Dnodes, 0, blkid))?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        /// A walk's bookmark is read back from a scan's persisted state: any bytes decode to
        /// a bookmark (16 bytes; a bookmark past the end of a tree only finds nothing to do)
        /// or to an error naming the length, never a panic.
        #[test]
        fn bookmarks_decode_or_refuse_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            match Bookmark::decode(&bytes) {
                Ok(bookmark) => prop_assert_eq!(&bookmark.encode()[..], &bytes[..]),
                Err(error) => {
                    prop_assert_ne!(bytes.len(), BOOKMARK_SIZE);
                    prop_assert!(error.to_string().contains("bookmark of"), "{}", error);
                }
            }
        }
    }
}
