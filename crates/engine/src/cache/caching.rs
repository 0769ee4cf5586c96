//! The ARC and the L2ARC as the block pipeline below consults them
//! ([`BlockCaching`](crate::block::caching::BlockCaching)), and the making of the pool's
//! [`BlockIo`] with them: the pipeline (`block/`) names only the trait, so the cache layer
//! builds the caches, hands them to the pipeline, and gives them back to the layers above
//! ([`BlockIo::cache`], [`BlockIo::l2arc`]). These methods of [`BlockIo`] are here rather
//! than in `block/pipeline.rs` because only this layer knows the caches' types.

use std::any::Any;
use std::sync::Arc;

use crate::block::blkptr::{BlockError, BlockPtr, Compression};
use crate::block::caching::{BlockCaching, BlockKind, CachePolicy, ReadFor};
use crate::block::compress;
use crate::block::pipeline::BlockIo;
use crate::space::SpaceManager;
use crate::tunables::Tunables;
use crate::vdev::VdevTree;

use super::l2arc::{secondary_policy, L2Arc, L2Info};
use super::{monotonic_clock, BlockCache, BlockKey, CachedBlock};

/// The pool's caches: the ARC, and the L2ARC on its cache devices, asked on an ARC miss.
struct Caches {
    arc: Arc<BlockCache>,
    l2arc: Arc<L2Arc>,
}

impl BlockIo {
    pub fn new(
        vdevs: Arc<VdevTree>,
        space: Arc<SpaceManager>,
        tunables: Tunables,
        writable: bool,
    ) -> BlockIo {
        BlockIo::with_caching(vdevs, space, tunables, writable, |tunables| {
            let arc = Arc::new(BlockCache::with_limits(
                tunables.arc_min,
                tunables.arc_max,
                monotonic_clock(),
            ));
            arc.set_decoded_percent(BlockKind::Data, tunables.arc_data_decoded_percent);
            arc.set_decoded_percent(BlockKind::Metadata, tunables.arc_meta_decoded_percent);
            arc.start_reaper(tunables.arc_sys_free);
            let l2arc = Arc::new(L2Arc::new(arc.clone(), tunables));
            Arc::new(Caches { arc, l2arc })
        })
    }

    /// The pool's ARC.
    pub fn cache(&self) -> &Arc<BlockCache> {
        &self.caches().arc
    }

    /// The L2ARC on the pool's cache devices (`cache::l2arc`), asked on an ARC miss.
    pub fn l2arc(&self) -> &Arc<L2Arc> {
        &self.caches().l2arc
    }

    fn caches(&self) -> &Caches {
        let caching: &dyn Any = self.caching();
        caching
            .downcast_ref::<Caches>()
            .expect("BlockIo::new installs the cache layer's caches")
    }
}

impl BlockCaching for Caches {
    fn get(&self, bp: &BlockPtr, purpose: ReadFor) -> Option<Arc<Vec<u8>>> {
        BlockKey::of(bp).and_then(|key| self.arc.get_for(&key, BlockKind::of(bp), purpose))
    }

    fn read_secondary(&self, bp: &BlockPtr) -> Option<Vec<u8>> {
        BlockKey::of(bp)
            .filter(|_| !bp.is_gang())
            .and_then(|key| self.l2arc.read(&key, bp))
    }

    fn keep_read(
        &self,
        bp: &BlockPtr,
        physical: Vec<u8>,
        policy: CachePolicy,
        purpose: ReadFor,
        compressed_arc: bool,
    ) -> Result<Arc<Vec<u8>>, BlockError> {
        if purpose == ReadFor::Rewrite {
            // Not kept: the caller dirties a new version, which the sync keeps, and the old
            // one would then be stale in the cache (OpenZFS's `arc_release` in `dbuf_dirty`
            // takes it out of the ARC). Under 4 KiB random writes over a working set larger
            // than the ARC, keeping it cost a sixth of the write path.
            return Ok(cached_form(bp, physical, compressed_arc)?.1);
        }
        let key = BlockKey::of(bp);
        let kind = BlockKind::of(bp);
        let l2 = secondary_policy()
            .admits(kind)
            .then(|| L2Info::of(bp, Some(&physical)))
            .flatten();
        let (block, data) = cached_form(bp, physical, compressed_arc)?;
        if let Some(key) = key.filter(|_| policy.admits(kind)) {
            self.arc
                .insert_block(key, block, Some(data.clone()), kind, l2);
        }
        Ok(data)
    }

    fn keep_written(
        &self,
        bp: &BlockPtr,
        data: &[u8],
        shared: Option<&Arc<Vec<u8>>>,
        stored: Option<&Arc<Vec<u8>>>,
        policy: CachePolicy,
        compressed_arc: bool,
    ) {
        let Some(key) = BlockKey::of(bp) else {
            return;
        };
        let kind = BlockKind::of(bp);
        if !policy.admits(kind) {
            // An earlier pass may have cached this block's older contents (rewritten in
            // place now): not kept means not kept stale either.
            self.arc.remove(&key);
            return;
        }
        // What the L2ARC feed needs of the pointer, when `secondarycache` admits it.
        let l2 = secondary_policy()
            .admits(kind)
            .then(|| L2Info::of(bp, None))
            .flatten();
        let contents = || shared.cloned().unwrap_or_else(|| Arc::new(data.to_vec()));
        let size_physical = bp.size_physical as usize;
        let block = match stored.filter(|stored| {
            compressed_arc && bp.compression != Compression::Off && stored.len() >= size_physical
        }) {
            Some(stored) => CachedBlock {
                bytes: if stored.len() == size_physical {
                    stored.clone()
                } else {
                    Arc::new(stored[..size_physical].to_vec())
                },
                compression: bp.compression,
                size_logical: bp.size_logical,
            },
            None => CachedBlock::logical(contents()),
        };
        // Its contents as a decoded copy (kept while its kind's share allows): copied for
        // metadata only, data's only when shared.
        let decoded = (block.is_compressed() && (kind == BlockKind::Metadata || shared.is_some()))
            .then(contents);
        self.arc.insert_block(key, block, decoded, kind, l2);
    }

    fn forget(&self, bp: &BlockPtr) {
        if let Some(key) = BlockKey::of(bp) {
            self.arc.remove(&key);
        }
    }

    fn forget_freed(&self, bp: &BlockPtr) {
        if let Some(key) = BlockKey::of(bp) {
            self.arc.remove(&key);
            self.l2arc.remove(&key);
        }
    }

    fn holds(&self, bp: &BlockPtr) -> bool {
        BlockKey::of(bp).is_some_and(|key| self.arc.contains(&key))
    }
}

/// What the cache keeps of a block whose verified physical bytes are `physical` (the stored
/// bytes themselves, with the compressed ARC), and the block's contents.
fn cached_form(
    bp: &BlockPtr,
    physical: Vec<u8>,
    compressed_arc: bool,
) -> Result<(CachedBlock, Arc<Vec<u8>>), BlockError> {
    let size_logical = bp.size_logical as usize;
    if bp.compression == Compression::Off && physical.len() == size_logical {
        // An uncompressed block's verified bytes are its contents: kept, not copied.
        let data = Arc::new(physical);
        return Ok((CachedBlock::logical(data.clone()), data));
    }
    let data = Arc::new(compress::decompress(
        bp.compression,
        &physical,
        size_logical,
    )?);
    let block = if compressed_arc && bp.compression != Compression::Off {
        CachedBlock {
            bytes: Arc::new(physical),
            compression: bp.compression,
            size_logical: bp.size_logical,
        }
    } else {
        CachedBlock::logical(data.clone())
    };
    Ok((block, data))
}
