//! What the block pipeline asks of the block cache (the ARC and the L2ARC), which sits above
//! it (`cache/`): the pipeline looks a block up before it reads the pool, offers what it read
//! or wrote, and drops what it freed or rewrote, through [`BlockCaching`], which the cache
//! layer implements and installs when it makes the pool's [`BlockIo`](super::pipeline::BlockIo)
//! (`cache/caching.rs`). The policy a caller gives the pipeline ([`CachePolicy`], the
//! `primarycache` property), the kind it applies to ([`BlockKind`]) and what a read is for
//! ([`ReadFor`]) are defined here for the same reason; the cache layer re-exports them.

use std::any::Any;
use std::sync::Arc;

use super::blkptr::{BlockError, BlockPtr};

/// What a block is read for, which decides whether the cache keeps the decompressed copy of a
/// compressed block that the read makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFor {
    /// To use the bytes as they are: the decompressed copy is kept (within its kind's share)
    /// so that a hot block is not decompressed on every hit.
    Use,
    /// To change them and dirty the result as a new block (a read-modify-write): a kept copy
    /// would be stale as soon as the new block is written, so none is kept, and the caller
    /// changes the bytes it was handed without copying them (OpenZFS's `arc_release` in
    /// `dbuf_dirty`).
    Rewrite,
}

/// Data (file contents) or metadata (everything else), as `BlockPtr::is_metadata` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockKind {
    Data = 0,
    Metadata = 1,
}

impl BlockKind {
    pub fn of(pointer: &BlockPtr) -> BlockKind {
        if pointer.is_metadata() {
            BlockKind::Metadata
        } else {
            BlockKind::Data
        }
    }
}

/// What a read may leave in the cache (the `primarycache` property, OpenZFS's): every block,
/// only metadata, or nothing it did not find there already.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CachePolicy {
    #[default]
    All,
    Metadata,
    None,
}

impl CachePolicy {
    pub fn parse(value: &str) -> Option<CachePolicy> {
        match value {
            "all" => Some(CachePolicy::All),
            "metadata" => Some(CachePolicy::Metadata),
            "none" => Some(CachePolicy::None),
            _ => None,
        }
    }

    /// Whether a block of `kind` read under this policy is kept.
    pub fn admits(self, kind: BlockKind) -> bool {
        match self {
            CachePolicy::All => true,
            CachePolicy::Metadata => kind == BlockKind::Metadata,
            CachePolicy::None => false,
        }
    }

    pub(crate) fn to_u8(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_u8(value: u8) -> CachePolicy {
        match value {
            1 => CachePolicy::Metadata,
            2 => CachePolicy::None,
            _ => CachePolicy::All,
        }
    }
}

/// The block cache as the pipeline consults it. Every method takes the block pointer; holes
/// and embedded blocks have no stored contents, and the cache ignores them.
pub trait BlockCaching: Any + Send + Sync {
    /// The contents of `bp` if the ARC holds them, read for `purpose`.
    fn get(&self, bp: &BlockPtr, purpose: ReadFor) -> Option<Arc<Vec<u8>>>;

    /// The physical bytes of `bp` (not a gang) if the L2ARC holds them, verified.
    fn read_secondary(&self, bp: &BlockPtr) -> Option<Vec<u8>>;

    /// A read of `bp` found its verified physical bytes `physical`: its contents, which the
    /// ARC keeps (as stored when `compressed_arc` and the block is compressed) if `policy`
    /// admits the block's kind.
    fn keep_read(
        &self,
        bp: &BlockPtr,
        physical: Vec<u8>,
        policy: CachePolicy,
        purpose: ReadFor,
        compressed_arc: bool,
    ) -> Result<Arc<Vec<u8>>, BlockError>;

    /// `bp` was written with contents `data` (`shared`, when the caller shares them) and
    /// stored bytes `stored` (at least its physical size; shared with the write queue): the ARC
    /// keeps it if `policy` admits its kind (as stored when `compressed_arc` and the block is
    /// compressed), and otherwise drops any copy it has.
    fn keep_written(
        &self,
        bp: &BlockPtr,
        data: &[u8],
        shared: Option<&Arc<Vec<u8>>>,
        stored: Option<&Arc<Vec<u8>>>,
        policy: CachePolicy,
        compressed_arc: bool,
    );

    /// Drop the ARC's copy of `bp`.
    fn forget(&self, bp: &BlockPtr);

    /// `bp` is freed: drop it from the ARC and the L2ARC.
    fn forget_freed(&self, bp: &BlockPtr);

    /// Whether the ARC holds `bp`.
    fn holds(&self, bp: &BlockPtr) -> bool;
}
