//! Block pointers: the 128-byte on-disk reference from a parent to a child block.
//!
//! (The helper that owns this file writes the byte diagram, `encode`, `decode`, and the
//! property tests. The in-memory type below is fixed: other layers are written against it.)

use crate::types::{Txg, VdevId};

/// Encoded size of a block pointer.
pub const BLKPTR_SIZE: usize = 128;
/// Number of DVAs (copies) a block pointer can carry.
pub const DVAS_MAX: usize = 3;
/// Largest payload an embedded block pointer can carry.
pub const EMBEDDED_PAYLOAD_MAX: usize = 96;

/// Checksum algorithms. The numeric values are on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChecksumType {
    Fletcher4 = 1,
    Blake3 = 2,
    Sha256 = 3,
}

/// Compression algorithms. The numeric values are on disk. The zstd level is a write-time
/// choice only: decompression does not need it, so it is not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    Off,
    Lz4,
    Zstd { level: u8 },
}

/// What a block holds. Stored in every block pointer (indirect blocks carry their object's type
/// with level > 0), so that `check` and `debug` can interpret any block they reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ObjectType {
    None = 0,
    /// Object-set header (the root block of every object set, the MOS included).
    Objset = 1,
    /// Blocks of the meta-dnode (object 0): arrays of dnodes.
    Dnode = 2,
    /// Key/value object (directories, MOS directory, properties, ...).
    KeyValue = 3,
    /// Space map data.
    SpaceMap = 4,
    /// Array of u64 (metaslab arrays, deferred-free lists).
    ObjectArray = 5,
    /// Plain file contents.
    PlainFile = 6,
    /// Pool configuration, as stored in the MOS.
    PoolConfig = 7,
    /// Dataset directory record.
    DatasetDir = 8,
    /// Dataset record.
    Dataset = 9,
    /// List of block pointers (deferred frees, later deadlists).
    BlockPtrList = 10,
}

/// A data virtual address: where one copy of a block lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Dva {
    /// Top-level vdev id.
    pub vdev: VdevId,
    /// Byte offset from the start of the vdev's allocatable area (after the front labels).
    pub offset: u64,
    /// Bytes allocated on the vdev for this copy (a multiple of the sector size). Zero means the
    /// DVA is empty.
    pub size_allocated: u64,
    /// Reserved: this copy is a gang block (not yet produced by the allocator).
    pub gang: bool,
}

impl Dva {
    pub fn is_empty(&self) -> bool {
        self.size_allocated == 0
    }
}

/// A block pointer in memory. Three shapes share it:
/// - a *hole*: no DVAs, not embedded; `birth_logical` says when the hole was made (0 = never written);
/// - an *embedded* block: the (possibly compressed) payload lives in the pointer itself;
/// - a *normal* block: 1–3 DVAs, sizes, checksum of the physical (stored) bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlockPtr {
    pub dvas: [Dva; DVAS_MAX],
    /// Size of the block's contents before compression.
    pub size_logical: u32,
    /// Size of the stored bytes after compression (== size_logical when compression is off).
    pub size_physical: u32,
    pub compression: Compression,
    pub checksum_type: ChecksumType,
    pub object_type: ObjectType,
    /// 0 for data blocks; n for an indirect block n levels above the data.
    pub level: u8,
    pub embedded: bool,
    /// Txg in which the contents were last logically written (holes too).
    pub birth_logical: Txg,
    /// Txg in which the bytes were physically written (differs only after receive/rewrite).
    pub birth_physical: Txg,
    /// Number of non-hole level-0 blocks beneath (1 for a data block).
    pub fill_count: u64,
    /// Checksum of the physical bytes (unused for holes and embedded blocks).
    pub checksum: [u8; 32],
    /// Physical bytes of an embedded block (`size_physical` of them); empty otherwise.
    pub embedded_payload: Vec<u8>,
}

impl BlockPtr {
    /// A hole: reads as zeros; `birth` records when it became a hole (Txg(0) for never written).
    pub fn hole(birth: Txg, object_type: ObjectType, level: u8) -> BlockPtr {
        BlockPtr {
            dvas: [Dva::default(); DVAS_MAX],
            size_logical: 0,
            size_physical: 0,
            compression: Compression::Off,
            checksum_type: ChecksumType::Fletcher4,
            object_type,
            level,
            embedded: false,
            birth_logical: birth,
            birth_physical: birth,
            fill_count: 0,
            checksum: [0; 32],
            embedded_payload: Vec::new(),
        }
    }

    pub fn is_hole(&self) -> bool {
        !self.embedded && self.dvas.iter().all(Dva::is_empty)
    }

    /// The non-empty DVAs, in order.
    pub fn copies(&self) -> impl Iterator<Item = &Dva> {
        self.dvas.iter().filter(|dva| !dva.is_empty())
    }

    /// Total bytes allocated on disk across all copies.
    pub fn size_allocated(&self) -> u64 {
        self.copies().map(|dva| dva.size_allocated).sum()
    }
}
