//! Read errors an object set has seen: data blocks that could not be read because no copy of
//! them (or of an indirect block above them) verifies (OpenZFS's `spa_log_error`, called with
//! the zio's bookmark).
//!
//! # Overview
//! The block layer knows block pointers, not whose blocks they are; the object layer knows the
//! object and block number it was reading. When [`ObjectSet::read_block`] fails with
//! [`PipelineError::NoGoodCopy`], it notes `(object, blkid, birth)` here. The pool layer drains
//! these notes per dataset into its persistent error log (`pool/errlog.rs`), which adds the
//! dataset and writes the list into the MOS in the next sync.
//!
//! # Memory and cost
//! Nothing on the read path unless a read fails; a failed read takes one mutex and inserts one
//! entry. At most [`READ_ERRORS_MAX`] distinct blocks are kept between two drains: a file with
//! millions of bad blocks is named once anyway, and memory must not grow with the damage.
//!
//! # Crash behaviour
//! In memory only: notes not yet drained and synced are lost by a crash, as OpenZFS's
//! in-memory error lists are; the next read of the block notes it again.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use super::{tree, ObjectError, ObjectSet};
use crate::block::pipeline::PipelineError;
use crate::types::ObjectId;

/// The most distinct blocks noted between two drains.
pub const READ_ERRORS_MAX: usize = 4096;

/// One block with no good copy: the object, its data block number, and the physical birth txg
/// of the block pointer that failed (0 when an indirect block above it failed, so the data
/// block's own pointer is unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReadError {
    pub object: ObjectId,
    pub blkid: u64,
    pub birth: u64,
}

/// The notes of one object set (see the module documentation).
#[derive(Default)]
pub struct ReadErrors {
    noted: Mutex<BTreeMap<(ObjectId, u64), u64>>,
}

impl ReadErrors {
    /// Note `error` if it is a block with no good copy; other errors are not data damage.
    /// Returns whether it was noted.
    pub fn note(&self, object: ObjectId, blkid: u64, birth: u64, error: &ObjectError) -> bool {
        if !is_no_good_copy(error) {
            return false;
        }
        let mut noted = self.noted.lock();
        if noted.len() < READ_ERRORS_MAX || noted.contains_key(&(object, blkid)) {
            noted.insert((object, blkid), birth);
            return true;
        }
        false
    }

    /// Take every note (the pool's error log takes them over).
    pub fn take(&self) -> Vec<ReadError> {
        std::mem::take(&mut *self.noted.lock())
            .into_iter()
            .map(|((object, blkid), birth)| ReadError {
                object,
                blkid,
                birth,
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.noted.lock().is_empty()
    }
}

/// Whether an object-layer error is a block none of whose copies verifies.
pub fn is_no_good_copy(error: &ObjectError) -> bool {
    matches!(
        error,
        ObjectError::Pipeline(PipelineError::NoGoodCopy { .. })
    )
}

/// What the tree now holds at one data block of an object (the error log asks, to drop entries
/// whose block is no longer referenced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockNow {
    /// The object no longer exists.
    Gone,
    /// The block is a hole (truncated or never written).
    Hole,
    /// A block pointer with this physical birth txg.
    Born(u64),
    /// The tree above the block cannot be read.
    Unreadable,
}

impl ObjectSet {
    /// Note a failed read of `object`'s block `blkid` (see [`ReadErrors::note`]), and tell the
    /// pool's block I/O that a note is waiting.
    pub(super) fn note_read_error(
        &self,
        object: ObjectId,
        blkid: u64,
        birth: u64,
        error: &ObjectError,
    ) {
        if self.read_errors.note(object, blkid, birth, error) {
            self.io.read_error_noted();
        }
    }

    /// The read errors this object set has noted (drained by the pool's error log).
    pub fn read_errors(&self) -> &ReadErrors {
        &self.read_errors
    }

    /// What the tree (synced, or being synced) holds at data block `blkid` of `object`.
    pub fn block_now(&self, object: ObjectId, blkid: u64) -> Result<BlockNow, ObjectError> {
        let dnode = self.tree_dnode(object)?;
        if dnode.is_free() {
            return Ok(BlockNow::Gone);
        }
        match tree::lookup_block(&self.io, &dnode, blkid) {
            Ok(bp) if bp.is_hole() => Ok(BlockNow::Hole),
            Ok(bp) => Ok(BlockNow::Born(bp.birth_physical.0)),
            Err(error) if is_no_good_copy(&error) => Ok(BlockNow::Unreadable),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_good_copy() -> ObjectError {
        ObjectError::Pipeline(PipelineError::NoGoodCopy { bp: "x".into() })
    }

    #[test]
    fn only_blocks_with_no_good_copy_are_noted() {
        let errors = ReadErrors::default();
        errors.note(ObjectId(5), 1, 7, &ObjectError::NoSpace);
        assert!(errors.is_empty());
        errors.note(ObjectId(5), 1, 7, &no_good_copy());
        errors.note(ObjectId(5), 1, 7, &no_good_copy());
        let taken = errors.take();
        assert_eq!(
            taken,
            vec![ReadError {
                object: ObjectId(5),
                blkid: 1,
                birth: 7
            }]
        );
        assert!(errors.is_empty());
    }

    #[test]
    fn notes_are_bounded() {
        let errors = ReadErrors::default();
        for blkid in 0..(READ_ERRORS_MAX as u64 + 10) {
            errors.note(ObjectId(9), blkid, 1, &no_good_copy());
        }
        assert_eq!(errors.take().len(), READ_ERRORS_MAX);
    }
}
