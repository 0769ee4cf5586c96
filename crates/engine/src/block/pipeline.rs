//! The read and write pipelines (OpenZFS zio).
//!
//! Write: zero detection (an all-zero data block becomes a hole when compression is on), compress,
//! embed if tiny, checksum, allocate one DVA per copy, issue each copy to its top-level vdev (a
//! mirror writes every child).
//!
//! Physical sizes and convergence: a compressed block is a self-delimiting payload (its header
//! gives the stream length, compress.rs), so its physical size is rounded up to the pool's
//! allocation unit (the smallest ashift of its top-level vdevs) with zero padding, as OpenZFS
//! rounds `psize`. A block whose contents change by a few bytes thus usually keeps its physical
//! size, and in sync pass >= `sync_pass_rewrite` a block already born in this txg that keeps its
//! physical size is rewritten in place: no allocation, no free, so no space-map change and no
//! further pass. A payload that shrinks keeps the old block's size (padding is free to choose);
//! one that grows past its size is reallocated. This is what lets a txg's sync converge in two
//! or three passes (docs/design/05-txg.md §4); with exact compressed sizes MOS and space-map blocks
//! moved every pass until compression was switched off at `sync_pass_dont_compress`.
//!
//! Cost: one block write per copy (counted once, by the write queue: `BlockIo::block_writes`,
//! and per txg `blocks_written` in `tarn stat txgs`); an in-place rewrite costs the same writes
//! but no allocation.
//!
//! Read: for each DVA, for each mirror child: read, verify the checksum against the block
//! pointer, decompress. The first good copy wins; every copy that failed verification is counted
//! against its leaf and, when the pool is writable, repaired in place with the good bytes (a
//! byte-identical rewrite of a damaged copy, the one exception to invariant 1). A read that finds
//! no good copy fails with a checksum error; bad data is never returned (invariant 2). Reads of
//! a thread inside a [`VerifyOnlyScope`] (a send's) repair nothing.
//!
//! Reads are issued in the calling thread's read class (`vdev::queue::read_class`: sync read
//! in open context, async read on prefetch workers, scrub under check); copies verified by
//! [`BlockIo::verify_all_copies`] are always scrub-class reads.
//!
//! Every block pointer read from disk is untrusted: DVAs are checked against the vdev tree
//! before any I/O is issued.
//!
//! [`BlockIo`] is the pool's one block I/O object, and its methods sit with their concept: the
//! pipelines, frees and the device write counters here; gang blocks, with their own on-disk
//! header and tree walks, in `gang.rs` (OpenZFS's zio gang functions); writing a block ahead of
//! its txg for the intent log in `prewrite.rs` (OpenZFS dmu_sync: another caller, open
//! context, its own crash behaviour); and the making of a `BlockIo` with the ARC and the L2ARC
//! in `cache/caching.rs`, the one place that knows both the pipeline and the caches' types
//! (the cache layer sits above this one, which names only the [`BlockCaching`] trait).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::block::blkptr::{
    BlockError, BlockPtr, ChecksumType, Compression, Dva, ObjectType, DVAS_MAX,
    EMBEDDED_PAYLOAD_MAX,
};
use crate::block::caching::{BlockCaching, CachePolicy, ReadFor};
use crate::block::issue::{WriteCountersSnapshot, WriteQueue};
use crate::block::{checksum, compress};
use crate::space::storage::SpaceStorage;
use crate::space::SpaceManager;
use crate::tunables::Tunables;
use crate::types::{Txg, VdevId};
use crate::vdev::{TopVdev, VdevTree};

/// A copy that failed to read or verify: its DVA, the generation of its top-level vdev that
/// was read (child indices are of that generation; see `vdev::tree`), and the child.
/// A copy found bad: its DVA, its vdev, the child to rewrite, and the block's physical birth
/// (which says how a RAID-Z block lies).
pub(crate) type BadCopy = (Dva, Arc<TopVdev>, usize, u64);

/// A block [`BlockIo::encode`]d for writing.
pub(super) enum Encoded {
    /// It needs no space: a hole (all zeros) or a block embedded in its pointer.
    Done(BlockPtr),
    /// Its pointer (every field but the DVAs) and the bytes each copy gets, padded to whole
    /// sectors.
    Physical {
        bp: BlockPtr,
        padded: Arc<Vec<u8>>,
        size_physical: usize,
        size_allocated: u64,
    },
}

impl Encoded {
    /// The bytes the block's copies get (shared), if it needs space.
    fn stored(&self) -> Option<Arc<Vec<u8>>> {
        match self {
            Encoded::Done(_) => None,
            Encoded::Physical { padded, .. } => Some(padded.clone()),
        }
    }
}

/// How a block is to be written.
#[derive(Clone, Copy, Debug)]
pub struct WriteProps {
    pub checksum: ChecksumType,
    pub compression: Compression,
    pub copies: u8,
    pub object_type: ObjectType,
    pub level: u8,
    /// Whether the cache keeps the written block (the object set's `primarycache`).
    pub cache: CachePolicy,
}

/// Where the write pipeline is in the sync of a txg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncPoint {
    pub txg: Txg,
    pub pass: u32,
}

/// Errors of the block layer's pipelines.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Block(#[from] BlockError),
    #[error("no space left in the pool for a {size_allocated}-byte block")]
    NoSpace { size_allocated: u64 },
    #[error("space allocator: {0}")]
    Space(#[from] crate::space::SpaceError),
    #[error("write of a block reached no device: {0}")]
    WriteFailed(String),
    #[error("checksum error: no copy of block {bp} verifies")]
    NoGoodCopy { bp: String },
    #[error("block pointer points outside vdev {vdev}: offset {offset:#x} size {size}")]
    BadDva {
        vdev: VdevId,
        offset: u64,
        size: u64,
    },
    /// A free of a gang block none of whose header copies can be read (or whose gang tree is
    /// corrupt): its pieces cannot be listed, so nothing of the block was freed. What becomes of
    /// it is the pool's choice (`pool/background_free.rs`, "Unreadable gang headers").
    #[error("gang block {bp} cannot be freed: its pieces cannot be listed: {why}")]
    GangUnreadable { bp: String, why: String },
}

/// The pool's block I/O: vdevs, allocator and cache, shared by every object set of the pool.
pub struct BlockIo {
    pub vdevs: Arc<VdevTree>,
    pub space: Arc<SpaceManager>,
    /// The ARC and the L2ARC, as the cache layer above installs them (`cache/caching.rs`,
    /// which also makes them reachable as [`BlockIo::cache`] and [`BlockIo::l2arc`]).
    caching: Arc<dyn BlockCaching>,
    pub tunables: Tunables,
    /// Sector shift used to round allocations (the largest ashift of the pool's vdevs), so
    /// that one allocated size fits every top-level vdev a copy may land on.
    pub ashift: u32,
    /// The pool's allocation unit (the smallest ashift of its top-level vdevs): compressed
    /// physical sizes are rounded up to it.
    pub alloc_unit_shift: u32,
    writable: AtomicBool,
    /// Feature embedded_data: tiny file blocks are stored inside their block pointer.
    embedded_data: AtomicBool,
    /// The write issue queue; its counters (`WriteQueue::counters`) are the pool's one count
    /// of block copies written.
    pub(super) writes: WriteQueue,
    /// Blocks written as gangs since the pool was opened (gang.rs).
    pub(super) gang_blocks: AtomicU64,
    /// Sequence choosing which eligible blocks `metaslab_force_ganging_pct` gangs.
    pub(super) gang_sequence: AtomicU64,
    /// What self-healing reads found and rewrote since the pool was opened ([`HealCounts`]).
    /// One lock, not three counters: a scan differences them between rounds, and a copy seen
    /// bad before its repair was counted would be taken for one left unrepaired for good.
    /// Taken only when a read found a bad copy and once per scan round.
    heals: parking_lot::Mutex<HealCounts>,
    /// Read errors the object sets of the pool have noted since it was opened: the error log
    /// looks through the object sets only when this moved (`pool/errlog.rs`), not every txg
    /// through every snapshot.
    read_errors_noted: AtomicU64,
}

fn round_up(value: u64, alignment: u64) -> u64 {
    value.div_ceil(alignment) * alignment
}

impl BlockIo {
    /// The pool's block I/O, with the caches `caching` makes from the tunables: the cache
    /// layer's `BlockIo::new` (`cache/caching.rs`) passes the ARC and the L2ARC.
    pub(crate) fn with_caching(
        vdevs: Arc<VdevTree>,
        space: Arc<SpaceManager>,
        tunables: Tunables,
        writable: bool,
        caching: impl FnOnce(&Tunables) -> Arc<dyn BlockCaching>,
    ) -> BlockIo {
        let ashift = vdevs.tops().iter().map(|top| top.ashift).max().unwrap_or(9);
        let alloc_unit_shift = vdevs.tops().iter().map(|top| top.ashift).min().unwrap_or(9);
        vdevs.configure_queues(crate::vdev::QueueLimits::from_tunables(&tunables), None);
        let writes = WriteQueue::new(vdevs.clone());
        let caching = caching(&tunables);
        BlockIo {
            caching,
            vdevs,
            space,
            tunables,
            ashift,
            alloc_unit_shift,
            writable: AtomicBool::new(writable),
            writes,
            embedded_data: AtomicBool::new(true),
            gang_blocks: AtomicU64::new(0),
            gang_sequence: AtomicU64::new(0),
            heals: Default::default(),
            read_errors_noted: AtomicU64::new(0),
        }
    }

    /// The caches the pipeline consults (the cache layer gives the concrete ones back).
    pub(crate) fn caching(&self) -> &dyn BlockCaching {
        self.caching.as_ref()
    }

    /// What self-healing reads ([`BlockIo::read`] and the other reads asked to repair) found
    /// and rewrote since the pool was opened. [`BlockIo::verify_all_copies`] is not counted
    /// here: its caller gets its own [`CopyReport`]. A scan adds the growth of these counts
    /// to its own, since the repairs that its walk's reads make (of the indirect and dnode
    /// blocks it descends through, before it verifies them) are repairs it made.
    /// An object set noted a read error (`object/read_errors.rs`).
    pub fn read_error_noted(&self) {
        self.read_errors_noted.fetch_add(1, Ordering::AcqRel);
    }

    /// Read errors noted since the pool was opened.
    pub fn read_errors_noted(&self) -> u64 {
        self.read_errors_noted.load(Ordering::Acquire)
    }

    pub fn heal_counts(&self) -> HealCounts {
        *self.heals.lock()
    }

    /// Count what a self-healing read found bad and what it rewrote.
    pub(super) fn note_heal(&self, bad: u64, repaired: Repaired) {
        let mut heals = self.heals.lock();
        heals.copies_bad += bad;
        heals.copies_repaired += repaired.copies;
        heals.bytes_repaired += repaired.bytes;
    }

    /// Block copies written since the pool was opened (every copy counted, in-place rewrites
    /// of later passes included, mirror children and repairs not): the write queue's
    /// `blocks` counter, the same one `tarn stat txgs` differences per txg.
    pub fn block_writes(&self) -> u64 {
        self.writes.counters().blocks
    }

    pub fn is_writable(&self) -> bool {
        self.writable.load(Ordering::Relaxed)
    }

    /// Whether the pool's embedded_data feature is enabled.
    pub fn set_embedded_data(&self, enabled: bool) {
        self.embedded_data.store(enabled, Ordering::Relaxed);
    }

    pub fn set_writable(&self, writable: bool) {
        self.writable.store(writable, Ordering::Relaxed);
    }

    /// Write one block in syncing context. `old` is the pointer this block replaces (if any),
    /// used for in-place rewrite; the caller still owns killing `old` when a new location is
    /// chosen (the returned pointer's DVAs differ from `old`'s).
    pub fn write(
        &self,
        data: &[u8],
        props: &WriteProps,
        fill_count: u64,
        at: SyncPoint,
        old: Option<&BlockPtr>,
        storage: &dyn SpaceStorage,
    ) -> Result<BlockPtr, PipelineError> {
        self.write_inner(data, None, None, props, fill_count, at, old, storage)
    }

    /// As [`BlockIo::write`] for a buffer the caller shares: the cache keeps the same buffer
    /// instead of a copy.
    pub fn write_shared(
        &self,
        data: &Arc<Vec<u8>>,
        props: &WriteProps,
        fill_count: u64,
        at: SyncPoint,
        old: Option<&BlockPtr>,
        storage: &dyn SpaceStorage,
    ) -> Result<BlockPtr, PipelineError> {
        self.write_inner(data, Some(data), None, props, fill_count, at, old, storage)
    }

    /// As [`BlockIo::write_shared`] for a block already compressed (by the sync's
    /// compression threads): `stored` is its payload compressed with its kind (as
    /// [`BlockIo::read_physical`] returns it, zero padding allowed), stored as it is instead of
    /// compressing `data` again, and shared with the write queue, not copied, when it already
    /// fills its sectors. The caller has checked that the payload decompresses to `data`. A
    /// payload that saves no allocation unit is stored uncompressed, as a compressed write
    /// would be; zeros are a hole.
    #[allow(clippy::too_many_arguments)]
    pub fn write_precompressed(
        &self,
        data: &Arc<Vec<u8>>,
        stored: (Compression, &Arc<Vec<u8>>),
        props: &WriteProps,
        fill_count: u64,
        at: SyncPoint,
        old: Option<&BlockPtr>,
        storage: &dyn SpaceStorage,
    ) -> Result<BlockPtr, PipelineError> {
        let (compression, payload) = stored;
        let unit = 1u64 << self.alloc_unit_shift;
        let zeros = props.level == 0
            && props.compression != Compression::Off
            && data.iter().all(|&byte| byte == 0);
        let as_stored = compression != Compression::Off
            && at.pass < self.tunables.sync_pass_dont_compress
            && !payload.is_empty()
            && round_up(payload.len() as u64, unit) < data.len() as u64
            && !zeros;
        if !as_stored {
            return self.write_inner(
                data,
                Some(data),
                Some((compression, payload.as_slice())),
                props,
                fill_count,
                at,
                old,
                storage,
            );
        }
        let encoded = self.encode_stored(
            (payload, None),
            compression,
            data.len() as u32,
            props,
            fill_count,
            at,
            old,
        );
        let stored = encoded.stored();
        let bp = self.place(encoded, props, at, old, storage)?;
        self.cache_written(&bp, data, Some(data), stored.as_ref(), props);
        Ok(bp)
    }

    /// Keep a written block in the cache if its policy admits it: its contents are `data`
    /// (`shared`, when the caller shares them), `stored` the bytes written (at least its
    /// physical size; shared with the write queue). A compressed block is kept as stored when
    /// `compressed_arc_enabled` (with its contents as a decoded copy: see
    /// `cache::BlockCache::insert_block`; [`BlockCaching::keep_written`]).
    fn cache_written(
        &self,
        bp: &BlockPtr,
        data: &[u8],
        shared: Option<&Arc<Vec<u8>>>,
        stored: Option<&Arc<Vec<u8>>>,
        props: &WriteProps,
    ) {
        self.caching
            .keep_written(bp, data, shared, stored, props.cache, self.compressed_arc());
    }

    /// Write a data block that arrived compressed and was kept only as its payload (a
    /// compressed receive, `object::DirtyBlock::Stored`): `payload` is compressed with
    /// `compression` (zero padding allowed) and decompresses to `size_logical` bytes, which
    /// the caller has checked. The payload is stored as it is, shared with the write queue
    /// when it already fills its sectors; the block's bytes are never made unless the payload
    /// cannot be stored as it is (a pass that no longer compresses, or a payload that saves no
    /// allocation unit), and the cache does not keep it (as OpenZFS's lightweight receive
    /// writes bypass the ARC). No zero detection: a sender with compression on sends holes,
    /// not compressed zeros. With the payload comes its fletcher4 checksum if the caller
    /// has it (a stream's payload digest): a fletcher4 block's checksum is then derived from
    /// it ([`checksum::fletcher4_zero_extended`]) rather than computed over the bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn write_stored(
        &self,
        (payload, fletcher4): (&Arc<Vec<u8>>, Option<&[u8; 32]>),
        compression: Compression,
        size_logical: u32,
        props: &WriteProps,
        fill_count: u64,
        at: SyncPoint,
        old: Option<&BlockPtr>,
        storage: &dyn SpaceStorage,
    ) -> Result<BlockPtr, PipelineError> {
        let unit = 1u64 << self.alloc_unit_shift;
        let as_stored = compression != Compression::Off
            && at.pass < self.tunables.sync_pass_dont_compress
            && !payload.is_empty()
            && round_up(payload.len() as u64, unit) < u64::from(size_logical);
        if !as_stored {
            let data = Arc::new(compress::decompress(
                compression,
                payload,
                size_logical as usize,
            )?);
            return self.write_precompressed(
                &data,
                (compression, payload),
                props,
                fill_count,
                at,
                old,
                storage,
            );
        }
        let encoded = self.encode_stored(
            (payload, fletcher4),
            compression,
            size_logical,
            props,
            fill_count,
            at,
            old,
        );
        let bp = self.place(encoded, props, at, old, storage)?;
        self.caching.forget(&bp);
        Ok(bp)
    }

    /// [`BlockIo::encode`] of a payload stored as it is ([`BlockIo::write_stored`], which has
    /// checked that it saves an allocation unit): embedding, physical size, checksum, padding.
    #[allow(clippy::too_many_arguments)]
    fn encode_stored(
        &self,
        (payload, fletcher4): (&Arc<Vec<u8>>, Option<&[u8; 32]>),
        compression: Compression,
        size_logical: u32,
        props: &WriteProps,
        fill_count: u64,
        at: SyncPoint,
        old: Option<&BlockPtr>,
    ) -> Encoded {
        let mut bp = BlockPtr::hole(at.txg, props.object_type, props.level);
        bp.size_logical = size_logical;
        bp.compression = compression;
        bp.checksum_type = props.checksum;
        bp.fill_count = fill_count;
        bp.birth_physical = at.txg;
        let embeddable = props.level == 0
            && props.object_type == ObjectType::PlainFile
            && self.embedded_data.load(Ordering::Relaxed);
        if embeddable && payload.len() <= EMBEDDED_PAYLOAD_MAX {
            bp.size_physical = payload.len() as u32;
            bp.embedded = true;
            bp.embedded_payload = payload.as_ref().clone();
            return Encoded::Done(bp);
        }
        // As `encode`: a block born in this txg rewritten by a later pass keeps its size.
        let unit = 1u64 << self.alloc_unit_shift;
        let keep = old
            .filter(|old| {
                old.compression != Compression::Off && self.may_rewrite(old, at, size_logical)
            })
            .map(|old| old.size_physical as usize)
            .filter(|&keep| keep >= payload.len() && keep < size_logical as usize);
        let size_physical = keep.unwrap_or(round_up(payload.len() as u64, unit) as usize);
        let size_allocated = round_up(size_physical as u64, 1u64 << self.ashift);
        bp.size_physical = size_physical as u32;
        // The checksum covers the payload and its zero padding to the physical size.
        let known = match (props.checksum, fletcher4) {
            (ChecksumType::Fletcher4, Some(sum)) => {
                checksum::fletcher4_zero_extended(sum, payload.len(), size_physical)
            }
            _ => None,
        };
        let sum = |bytes: &[u8]| known.unwrap_or_else(|| checksum::compute(props.checksum, bytes));
        let padded = if payload.len() as u64 == size_allocated && size_physical == payload.len() {
            // Already what goes to disk: shared, not copied.
            bp.checksum = sum(payload);
            payload.clone()
        } else {
            let mut bytes = Vec::with_capacity(size_allocated as usize);
            bytes.extend_from_slice(&payload[..payload.len().min(size_physical)]);
            bytes.resize(size_physical, 0);
            bp.checksum = sum(&bytes);
            bytes.resize(size_allocated as usize, 0);
            Arc::new(bytes)
        };
        Encoded::Physical {
            bp,
            padded,
            size_physical,
            size_allocated,
        }
    }

    /// Everything a write does before it places the block: zero detection, compression,
    /// embedding, checksum, padding to whole sectors. `at` gives the birth txg and pass.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn encode(
        &self,
        data: &[u8],
        shared: Option<&Arc<Vec<u8>>>,
        precompressed: Option<(Compression, &[u8])>,
        props: &WriteProps,
        fill_count: u64,
        at: SyncPoint,
        old: Option<&BlockPtr>,
    ) -> Encoded {
        assert!(!data.is_empty() && data.len() as u64 <= crate::types::SPA_MAXBLOCKSIZE);
        let size_logical = data.len() as u32;
        let mut bp = BlockPtr::hole(at.txg, props.object_type, props.level);
        if props.level == 0
            && props.compression != Compression::Off
            && data.iter().all(|&byte| byte == 0)
        {
            return Encoded::Done(bp);
        }
        let compression = match precompressed {
            _ if at.pass >= self.tunables.sync_pass_dont_compress => Compression::Off,
            Some((kind, _)) => kind,
            None => props.compression,
        };
        // A compressed payload is self-delimiting (compress.rs), so its physical size can be
        // rounded up to the pool's allocation unit with zero padding: the size then changes
        // only when the payload crosses a unit, and a block rewritten in a later pass with
        // slightly different contents keeps its size (and its place). As in OpenZFS, a payload
        // that does not fit in fewer units than the logical size is not worth storing
        // compressed; embedding (below) looks at the unpadded payload.
        let unit = 1u64 << self.alloc_unit_shift;
        let payload = match precompressed {
            Some((_, stored)) if compression != Compression::Off => Some(stored.to_vec()),
            _ => compress::compress_for_unit(compression, data, unit as usize),
        };
        let embeddable = props.level == 0
            && props.object_type == ObjectType::PlainFile
            && self.embedded_data.load(Ordering::Relaxed);
        let padded_payload: Option<Vec<u8>> = match payload {
            Some(payload) if embeddable && payload.len() <= EMBEDDED_PAYLOAD_MAX => {
                bp.size_logical = size_logical;
                bp.size_physical = payload.len() as u32;
                bp.compression = compression;
                bp.checksum_type = props.checksum;
                bp.fill_count = fill_count;
                bp.birth_physical = at.txg;
                bp.embedded = true;
                bp.embedded_payload = payload;
                return Encoded::Done(bp);
            }
            Some(mut payload) if round_up(payload.len() as u64, unit) < size_logical as u64 => {
                // A block born in this txg that a later pass rewrites keeps its physical size
                // when the new payload fits in it (padding is free to choose), so that a block
                // whose payload shrinks a little is rewritten in place, not reallocated.
                let keep = old
                    .filter(|old| {
                        old.compression != Compression::Off
                            && self.may_rewrite(old, at, size_logical)
                    })
                    .map(|old| old.size_physical as usize)
                    .filter(|&keep| keep >= payload.len() && keep < size_logical as usize);
                let size_physical = keep.unwrap_or(round_up(payload.len() as u64, unit) as usize);
                payload.resize(size_physical, 0);
                Some(payload)
            }
            _ => None,
        };
        let (physical, compression) = match &padded_payload {
            Some(bytes) => (bytes.as_slice(), compression),
            None => (data, Compression::Off),
        };
        bp.size_logical = size_logical;
        bp.size_physical = physical.len() as u32;
        bp.compression = compression;
        bp.checksum_type = props.checksum;
        bp.fill_count = fill_count;
        bp.birth_physical = at.txg;
        bp.checksum = checksum::compute(props.checksum, physical);
        let size_physical = physical.len();
        let sector = 1u64 << self.ashift;
        let size_allocated = round_up(size_physical as u64, sector);
        // Pad to whole sectors only when the stored bytes do not fill them already; share the
        // caller's buffer when it is already exactly what goes to disk.
        let padded: Arc<Vec<u8>> = match (shared, padded_payload) {
            (Some(shared), None) if shared.len() as u64 == size_allocated => shared.clone(),
            (_, Some(mut payload)) => {
                payload.resize(size_allocated as usize, 0);
                Arc::new(payload)
            }
            _ => {
                let mut copy = data.to_vec();
                copy.resize(size_allocated as usize, 0);
                Arc::new(copy)
            }
        };

        Encoded::Physical {
            bp,
            padded,
            size_physical,
            size_allocated,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write_inner(
        &self,
        data: &[u8],
        shared: Option<&Arc<Vec<u8>>>,
        precompressed: Option<(Compression, &[u8])>,
        props: &WriteProps,
        fill_count: u64,
        at: SyncPoint,
        old: Option<&BlockPtr>,
        storage: &dyn SpaceStorage,
    ) -> Result<BlockPtr, PipelineError> {
        let encoded = self.encode(data, shared, precompressed, props, fill_count, at, old);
        let stored = encoded.stored();
        let bp = self.place(encoded, props, at, old, storage)?;
        self.cache_written(&bp, data, shared, stored.as_ref(), props);
        Ok(bp)
    }

    /// Allocate (or rewrite in place) and issue an encoded block; its pointer.
    fn place(
        &self,
        encoded: Encoded,
        props: &WriteProps,
        at: SyncPoint,
        old: Option<&BlockPtr>,
        storage: &dyn SpaceStorage,
    ) -> Result<BlockPtr, PipelineError> {
        let (mut bp, padded, size_physical, size_allocated) = match encoded {
            Encoded::Done(bp) => return Ok(bp),
            Encoded::Physical {
                bp,
                padded,
                size_physical,
                size_allocated,
            } => (bp, padded, size_physical, size_allocated),
        };
        let copies = (props.copies as usize).clamp(1, DVAS_MAX);
        let rewrite = old.filter(|old| {
            self.may_rewrite(old, at, bp.size_logical)
                && old.size_physical as usize == size_physical
                && old.copies().count() == copies
                && (old.is_gang()
                    || old.copies().all(|dva| {
                        dva.size_allocated == self.asize_on_at(dva.vdev, size_allocated, at.txg)
                    }))
        });
        if let Some(old) = rewrite {
            if old.is_gang() {
                bp.dvas = self.rewrite_gang(old, &padded, &bp)?;
            } else {
                bp.dvas = old.dvas;
                self.submit_copies(&bp, &padded);
            }
        } else {
            // A block larger than a gang header that cannot be placed whole, with every copy,
            // is written in pieces (gang.rs); if even that fails, with fewer copies.
            let gangable = size_allocated > self.gang_header_allocated();
            let whole = if self.force_gang(size_allocated) {
                Err(PipelineError::NoSpace { size_allocated })
            } else {
                self.allocate_copies(size_allocated, copies, at.txg, !gangable, storage)
            };
            match whole {
                Ok(dvas) => {
                    bp.dvas[..dvas.len()].copy_from_slice(&dvas);
                    self.submit_copies(&bp, &padded);
                }
                Err(PipelineError::NoSpace { .. }) if gangable => {
                    match self.write_gang(&padded, &bp, copies, at, storage) {
                        Ok(dvas) => bp.dvas = dvas,
                        Err(PipelineError::NoSpace { .. }) => {
                            let dvas = self.allocate_copies(
                                size_allocated,
                                copies,
                                at.txg,
                                true,
                                storage,
                            )?;
                            bp.dvas[..dvas.len()].copy_from_slice(&dvas);
                            self.submit_copies(&bp, &padded);
                        }
                        Err(error) => return Err(error),
                    }
                }
                Err(error) => return Err(error),
            }
        }
        Ok(bp)
    }

    /// Hand every copy of a (non-gang) block to the write issue queue.
    fn submit_copies(&self, bp: &BlockPtr, padded: &Arc<Vec<u8>>) {
        for dva in bp.copies() {
            self.submit_block(dva, padded, bp.size_physical as u64);
        }
    }

    /// Hand one copy of a block of `size_physical` bytes, `padded` to the pool's allocation
    /// size, to the write issue queue (a RAID-Z vdev takes the bytes its map is built from:
    /// [`crate::vdev::TopVdev::block_bytes`]).
    pub(super) fn submit_block(&self, dva: &Dva, padded: &Arc<Vec<u8>>, size_physical: u64) {
        let top = self
            .vdevs
            .top(dva.vdev)
            .expect("allocator returned an unknown vdev");
        let bytes = top.block_bytes(padded, size_physical);
        self.writes.submit(top, dva.offset, bytes);
    }

    /// Bytes a block of `size` padded bytes born (physically) in `birth` takes on top-level
    /// vdev `vdev` (its parity and padding on RAID-Z, at the width of its txg); `size` itself
    /// for a vdev the pool does not have.
    pub(super) fn asize_on_at(&self, vdev: VdevId, size: u64, birth: Txg) -> u64 {
        self.vdevs
            .top(vdev)
            .map_or(size, |top| top.asize_at(size, birth.0))
    }

    /// Read one copy of a block on a RAID-Z vdev (see [`crate::vdev::TopVdev::read_raidz`]):
    /// from the in-flight write if there is one, else its columns, reconstructed until
    /// `verify` accepts the data. `psize` is the block pointer's physical size.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn read_raidz_copy(
        &self,
        top: &crate::vdev::TopVdev,
        dva: &Dva,
        psize: u64,
        birth: u64,
        scrub: bool,
        verify: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<crate::vdev::tree::raidz_io::RaidzRead, PipelineError> {
        if let Some(data) = self.writes.in_flight(dva.vdev, dva.offset) {
            let length = (psize as usize).min(data.len());
            if verify(&data[..length]) {
                return Ok(crate::vdev::tree::raidz_io::RaidzRead {
                    data: data[..length].to_vec(),
                    repair: Vec::new(),
                    columns: 1,
                });
            }
        }
        let not_raidz = || PipelineError::NoGoodCopy {
            bp: format!("<{}:{:#x}>: not a RAID-Z vdev", dva.vdev, dva.offset),
        };
        top.read_raidz(
            crate::vdev::queue::read_class(),
            dva.offset,
            psize,
            birth,
            scrub,
            verify,
        )
        .ok_or_else(not_raidz)?
        .map_err(|error| PipelineError::NoGoodCopy {
            bp: format!("<{}:{:#x}>: {error}", dva.vdev, dva.offset),
        })
    }

    /// Read one copy of `bp` (its DVA `dva`, on RAID-Z vdev `top`): its physical bytes,
    /// verified against the block's checksum, with the children whose columns were found bad.
    fn read_raidz_physical(
        &self,
        top: &crate::vdev::TopVdev,
        dva: &Dva,
        bp: &BlockPtr,
        scrub: bool,
    ) -> Result<crate::vdev::tree::raidz_io::RaidzRead, PipelineError> {
        let size_physical = bp.size_physical as usize;
        let mut verify = |data: &[u8]| {
            data.len() >= size_physical
                && checksum::compute(bp.checksum_type, &data[..size_physical]) == bp.checksum
        };
        let mut read = self.read_raidz_copy(
            top,
            dva,
            size_physical as u64,
            bp.birth_physical.0,
            scrub,
            &mut verify,
        )?;
        read.data.truncate(size_physical);
        Ok(read)
    }

    /// Whether `old` may be overwritten in place by a block of `size_logical` bytes written at
    /// `at`: from pass `sync_pass_rewrite`, a block born in the syncing txg (which no synced
    /// uberblock can reach, invariant 1) that owns space. Its sizes must match as well.
    fn may_rewrite(&self, old: &BlockPtr, at: SyncPoint, size_logical: u32) -> bool {
        at.pass >= self.tunables.sync_pass_rewrite
            && old.birth_physical == at.txg
            && !old.is_hole()
            && !old.embedded
            && old.size_logical == size_logical
    }

    /// Wait for every write issued so far to finish (the barrier before the vdevs are flushed
    /// and the uberblock written). Fails if any write reached no device.
    pub fn wait_writes(&self) -> Result<(), PipelineError> {
        self.writes.wait().map_err(|errors| {
            // The first few say what failed; thousands of them would only bury it.
            const SHOWN: usize = 3;
            let mut text = errors[..errors.len().min(SHOWN)].join("; ");
            if errors.len() > SHOWN {
                text.push_str(&format!("; and {} more", errors.len() - SHOWN));
            }
            PipelineError::WriteFailed(text)
        })
    }

    /// Read one copy from one mirror child into `buffer`: from the in-flight write if there is
    /// one (the disk may still hold older bytes), else from the device.
    pub(super) fn read_copy(
        &self,
        top: &crate::vdev::TopVdev,
        child: usize,
        dva: &Dva,
        buffer: &mut [u8],
    ) -> Result<(), crate::vdev::VdevError> {
        if let Some(data) = self.writes.in_flight(dva.vdev, dva.offset) {
            if data.len() >= buffer.len() {
                buffer.copy_from_slice(&data[..buffer.len()]);
                return Ok(());
            }
        }
        top.read_child(crate::vdev::queue::read_class(), child, dva.offset, buffer)
    }

    /// The bytes `bp` counts for in space accounting (OpenZFS's `bp_get_dsize_sync`): what
    /// its copies allocated, deflated to data bytes on a RAID-Z vdev
    /// ([`VdevTree::deflated`]). Datasets, dead lists, livelists and dnodes count this;
    /// metaslabs and `zpool list` count [`BlockPtr::size_allocated`].
    pub fn dsize(&self, bp: &BlockPtr) -> u64 {
        if !self.vdevs.deflates() {
            return bp.size_allocated();
        }
        bp.copies()
            .map(|dva| self.vdevs.deflated(dva.vdev, dva.size_allocated))
            .sum()
    }

    /// Free every DVA of a block in syncing txg `txg` (for a gang, its headers and pieces,
    /// read from the header). Holes and embedded blocks own no space. A gang whose pieces
    /// cannot be listed is [`PipelineError::GangUnreadable`], with nothing freed: every extent
    /// is listed before the first is freed.
    pub fn free(&self, bp: &BlockPtr, txg: Txg) -> Result<(), PipelineError> {
        self.caching.forget_freed(bp);
        let extents =
            self.allocated_extents(bp)
                .map_err(|error| PipelineError::GangUnreadable {
                    bp: format!("{bp}"),
                    why: error.to_string(),
                })?;
        for (vdev, offset, size) in extents {
            self.space.free(vdev, offset, size, txg)?;
        }
        Ok(())
    }

    /// Blocks written as gangs since the pool was opened.
    pub fn gang_blocks(&self) -> u64 {
        self.gang_blocks.load(Ordering::Relaxed)
    }

    pub(super) fn validate_dva(&self, dva: &Dva) -> Result<(), PipelineError> {
        let bad = || PipelineError::BadDva {
            vdev: dva.vdev,
            offset: dva.offset,
            size: dva.size_allocated,
        };
        let top = self.vdevs.top(dva.vdev).ok_or_else(bad)?;
        let sector = 1u64 << top.ashift;
        if !dva.offset.is_multiple_of(sector)
            || !dva.size_allocated.is_multiple_of(sector)
            || !top.contains(dva.offset, dva.size_allocated)
        {
            return Err(bad());
        }
        Ok(())
    }

    /// Read a block's logical contents (cached), verifying and self-healing as described above.
    /// Whether reading `bp` needs no device I/O: a hole, an embedded block, or cached.
    pub fn is_in_memory(&self, bp: &BlockPtr) -> bool {
        bp.is_hole() || bp.embedded || self.caching.holds(bp)
    }

    pub fn read(&self, bp: &BlockPtr) -> Result<Arc<Vec<u8>>, PipelineError> {
        self.read_cached(bp, CachePolicy::All)
    }

    /// [`BlockIo::read`], keeping what it read from disk in the cache only if `policy` admits
    /// the block's kind (a block found in the cache is used whatever the policy). Scrub-like
    /// readers (send) pass [`CachePolicy::Metadata`], so that a whole dataset read once does
    /// not evict the working set.
    pub fn read_cached(
        &self,
        bp: &BlockPtr,
        policy: CachePolicy,
    ) -> Result<Arc<Vec<u8>>, PipelineError> {
        self.read_cached_for(bp, policy, ReadFor::Use)
    }

    /// [`BlockIo::read_cached`] for `purpose` (see [`ReadFor`]): a read for a rewrite keeps no
    /// decompressed copy in the cache, so the caller holds the only reference to the contents
    /// of a compressed block.
    pub fn read_cached_for(
        &self,
        bp: &BlockPtr,
        policy: CachePolicy,
        purpose: ReadFor,
    ) -> Result<Arc<Vec<u8>>, PipelineError> {
        if bp.is_hole() {
            return Ok(Arc::new(vec![0u8; bp.size_logical as usize]));
        }
        if bp.embedded {
            if bp.object_type != ObjectType::PlainFile || bp.level != 0 {
                return Err(PipelineError::Block(BlockError::corrupt(
                    "block pointer",
                    format!(
                        "embedded {:?} block at level {}: only file data is embedded",
                        bp.object_type, bp.level
                    ),
                )));
            }
            let data = compress::decompress(
                bp.compression,
                &bp.embedded_payload,
                bp.size_logical as usize,
            )?;
            return Ok(Arc::new(data));
        }
        if let Some(data) = self.caching.get(bp, purpose) {
            return Ok(data);
        }
        let physical = match self.caching.read_secondary(bp) {
            Some(physical) => physical,
            None => self.read_physical(bp, true)?,
        };
        Ok(self
            .caching
            .keep_read(bp, physical, policy, purpose, self.compressed_arc())?)
    }

    /// Whether the cache keeps compressed blocks as stored (`compressed_arc_enabled`).
    fn compressed_arc(&self) -> bool {
        self.tunables.compressed_arc_enabled != 0
    }

    /// Read and verify a block's physical (stored, possibly compressed) bytes: the raw read used
    /// by compressed send and the L2ARC, and by `check`. With `repair`, bad copies found on the
    /// way are rewritten from the good one when the pool is writable.
    pub fn read_physical(&self, bp: &BlockPtr, repair: bool) -> Result<Vec<u8>, PipelineError> {
        let repair = repair && !verify_only();
        if bp.is_gang() {
            return self.read_gang_physical(bp, repair);
        }
        let mut bad: Vec<BadCopy> = Vec::new();
        let mut good: Option<Vec<u8>> = None;
        for dva in bp.copies() {
            self.validate_dva(dva)?;
            let top = self.vdevs.top(dva.vdev).expect("validated");
            if top.raidz_geometry().is_some() {
                match self.read_raidz_physical(&top, dva, bp, false) {
                    Ok(read) => {
                        bad.extend(
                            read.repair
                                .iter()
                                .map(|&child| (*dva, top.clone(), child, bp.birth_physical.0)),
                        );
                        good = Some(read.data);
                        break;
                    }
                    Err(error) => {
                        log::debug!("{bp}: {error}");
                        continue;
                    }
                }
            }
            // Children that may hold a stale copy (the block's birth is in their dirty time
            // log) or take no I/O are tried last.
            for child in crate::vdev::dtl::read_order(&top, bp.birth_physical.0) {
                // Read whole or found bad (the read overwrites every byte).
                let mut buffer = crate::vdev::buffers::take(dva.size_allocated as usize);
                if self.read_copy(&top, child, dva, &mut buffer).is_err() {
                    // An offline or missing child holds no copy to repair (as in
                    // verify_all_copies): its failed read is no bad copy.
                    if top.children[child].is_usable() {
                        bad.push((*dva, top.clone(), child, bp.birth_physical.0));
                    }
                    crate::vdev::buffers::give(buffer);
                    continue;
                }
                buffer.truncate(bp.size_physical as usize);
                if checksum::compute(bp.checksum_type, &buffer) == bp.checksum {
                    good = Some(buffer);
                    break;
                }
                crate::vdev::buffers::give(buffer);
                if !top.children[child].dtl.contains(bp.birth_physical.0) {
                    top.record_checksum_error(child);
                }
                bad.push((*dva, top.clone(), child, bp.birth_physical.0));
            }
            if good.is_some() {
                break;
            }
        }
        let Some(physical) = good else {
            return Err(PipelineError::NoGoodCopy {
                bp: format!("{bp}"),
            });
        };
        if repair && !bad.is_empty() && self.is_writable() {
            let repaired = self.repair(&physical, &bad);
            self.note_heal(bad.len() as u64, repaired);
        }
        Ok(physical)
    }

    /// Verify every copy of a block (every DVA, every mirror child) for `check` and scrub.
    /// Returns the number of copies that failed and the number repaired.
    pub fn verify_all_copies(
        &self,
        bp: &BlockPtr,
        repair: bool,
    ) -> Result<CopyReport, PipelineError> {
        if bp.is_hole() || bp.embedded {
            return Ok(CopyReport::default());
        }
        self.verify_copies(bp, repair).map(|(report, physical)| {
            crate::vdev::buffers::give(physical);
            report
        })
    }

    /// [`BlockIo::verify_all_copies`] of an allocated block, with the verified physical bytes
    /// (a gang's joins its pieces' without reading any copy again, so that a bad copy is
    /// counted against its leaf once).
    pub(super) fn verify_copies(
        &self,
        bp: &BlockPtr,
        repair: bool,
    ) -> Result<(CopyReport, Vec<u8>), PipelineError> {
        let mut report = CopyReport::default();
        let _class = crate::vdev::queue::ReadClassScope::new(crate::vdev::IoClass::Scrub);
        if bp.is_gang() {
            return self.verify_gang(bp, repair);
        }
        let mut bad: Vec<BadCopy> = Vec::new();
        let mut good: Option<Vec<u8>> = None;
        for dva in bp.copies() {
            self.validate_dva(dva)?;
            let top = self.vdevs.top(dva.vdev).expect("validated");
            if top.raidz_geometry().is_some() {
                match self.read_raidz_physical(&top, dva, bp, true) {
                    Ok(read) => {
                        report.copies += read.columns as u64;
                        report.bad += read.repair.len() as u64;
                        bad.extend(
                            read.repair
                                .iter()
                                .map(|&child| (*dva, top.clone(), child, bp.birth_physical.0)),
                        );
                        good.get_or_insert(read.data);
                    }
                    Err(error) => {
                        log::debug!("{bp}: {error}");
                        report.copies += 1;
                        report.bad += 1;
                    }
                }
                continue;
            }
            for child in 0..top.child_count() {
                // An offline or missing child is not read: it is not a bad copy.
                if !top.children[child].is_usable() {
                    continue;
                }
                report.copies += 1;
                // Read whole or found bad (the read overwrites every byte).
                let mut buffer = crate::vdev::buffers::take(dva.size_allocated as usize);
                let ok = self.read_copy(&top, child, dva, &mut buffer).is_ok() && {
                    buffer.truncate(bp.size_physical as usize);
                    checksum::compute(bp.checksum_type, &buffer) == bp.checksum
                };
                if ok {
                    match good {
                        None => good = Some(buffer),
                        Some(_) => crate::vdev::buffers::give(buffer),
                    }
                } else {
                    crate::vdev::buffers::give(buffer);
                    // A stale copy on a child that missed the block's txg (its DTL says so)
                    // is expected until resilvered, not a checksum error.
                    if !top.children[child].dtl.contains(bp.birth_physical.0) {
                        top.record_checksum_error(child);
                    }
                    report.bad += 1;
                    bad.push((*dva, top.clone(), child, bp.birth_physical.0));
                }
            }
        }
        let Some(physical) = good else {
            return Err(PipelineError::NoGoodCopy {
                bp: format!("{bp}"),
            });
        };
        if repair && !bad.is_empty() && self.is_writable() {
            let repaired = self.repair(&physical, &bad);
            report.repaired = repaired.copies;
            report.bytes_repaired = repaired.bytes;
        }
        Ok((report, physical))
    }

    fn repair(&self, physical: &[u8], bad: &[BadCopy]) -> Repaired {
        let mut repaired = Repaired::default();
        for (dva, top, child, birth) in bad {
            match top.rewrite_child(*child, dva.offset, dva.size_allocated, *birth, physical) {
                Ok(bytes) => repaired.add(bytes),
                // The leaf's queue counted the write error; the copy stays bad.
                Err(error) => log::warn!("repair of a bad copy failed: {error}"),
            }
        }
        repaired
    }
}

/// Copies rewritten by a repair, and their bytes on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Repaired {
    pub copies: u64,
    pub bytes: u64,
}

impl Repaired {
    pub(crate) fn add(&mut self, bytes: u64) {
        self.copies += 1;
        self.bytes += bytes;
    }
}

/// What self-healing reads found and rewrote since the pool was opened
/// ([`BlockIo::heal_counts`]): copies that failed to read or verify, copies rewritten, and the
/// bytes rewritten.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealCounts {
    pub copies_bad: u64,
    pub copies_repaired: u64,
    pub bytes_repaired: u64,
}

thread_local! {
    /// How many [`VerifyOnlyScope`]s of this thread are alive.
    static VERIFY_ONLY: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether reads of this thread must repair nothing (a [`VerifyOnlyScope`] is alive).
fn verify_only() -> bool {
    VERIFY_ONLY.with(|scopes| scopes.get() > 0)
}

/// While alive, reads of this thread only verify: a bad copy is counted against its leaf and
/// the read fails over to the next copy (or fails), but no copy is rewritten. For a reader
/// whose blocks might have been freed under it (a send: see `send/generate.rs`): a freed and
/// reused block reads as a checksum mismatch that is not damage, and a "repair" from another
/// copy would write the old contents over a live block.
pub struct VerifyOnlyScope {
    /// Bound to its thread: the count it changes is the thread's.
    _thread: std::marker::PhantomData<*const ()>,
}

impl VerifyOnlyScope {
    pub fn new() -> VerifyOnlyScope {
        VERIFY_ONLY.with(|scopes| scopes.set(scopes.get() + 1));
        VerifyOnlyScope {
            _thread: std::marker::PhantomData,
        }
    }
}

impl Default for VerifyOnlyScope {
    fn default() -> Self {
        VerifyOnlyScope::new()
    }
}

impl Drop for VerifyOnlyScope {
    fn drop(&mut self) {
        VERIFY_ONLY.with(|scopes| scopes.set(scopes.get() - 1));
    }
}

/// What [`BlockIo::verify_all_copies`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyReport {
    pub copies: u64,
    pub bad: u64,
    pub repaired: u64,
    /// Bytes on disk of the copies repaired.
    pub bytes_repaired: u64,
}

/// Device write counters (`tarn stat txgs`, `tarn bench sync`; see [`crate::block::issue`]).
impl BlockIo {
    /// The pool's device write counters so far: block copies, device write I/Os, bytes.
    pub fn write_counters(&self) -> WriteCountersSnapshot {
        self.writes.counters()
    }

    /// Count device writes issued outside the write queue (uberblocks, labels).
    pub fn record_device_writes(&self, ios: u64, bytes: u64) {
        self.writes.record_device_writes(ios, bytes);
    }
}
