//! Block pointers: the 128-byte on-disk reference from a parent to a child block.
//!
//! A block pointer says where a block's copies live (up to three DVAs), how big it is before
//! and after compression, how it is compressed and checksummed, what it holds (object type and
//! indirection level), when it was born (logical and physical birth txg), how many data blocks
//! lie beneath it (fill count) and the checksum of the stored bytes. Holes and embedded blocks
//! (small payloads stored in the pointer itself) share the same 128 bytes.
//!
//! # On-disk layout (tarn's own; all integers little-endian)
//!
//! ```text
//! byte  0                   4                   8                                  16
//!       +-------------------+-------------------+-----------------------------------+
//!   0   | DVA[0] vdev u32   | DVA[0] asize u32  | DVA[0] offset u64 (bytes)         |
//!  16   | DVA[1] vdev u32   | DVA[1] asize u32  | DVA[1] offset u64 (bytes)         |
//!  32   | DVA[2] vdev u32   | DVA[2] asize u32  | DVA[2] offset u64 (bytes)         |
//!       +-------------------+-------------------+----+----+----+----+----+----+-----+
//!  48   | size_logical u32  | size_physical u32 |comp|csum|type|lvl |flag|elen| rsv |
//!       +-------------------+-------------------+----+----+----+----+----+----+-----+
//!  64   | birth_logical u64                     | birth_physical u64                |
//!  80   | fill_count u64                        | reserved u64 (zero)               |
//!       +---------------------------------------+-----------------------------------+
//!  96   | checksum: 32 bytes (for fletcher4, four u64 accumulators a, b, c, d)      |
//! 128   +---------------------------------------------------------------------------+
//! ```
//!
//! - `asize`: bits 0..=30 are the allocated size in 512-byte units
//!   ([`DVA_ALLOCATED_UNIT`]); bit 31 is the gang flag. Zero units means the DVA is empty, and
//!   an empty DVA is all zero bytes.
//! - `comp` (byte 56): [`Compression`] as 0 off, 1 lz4, 2 zstd. The zstd level is not stored.
//! - `csum` (byte 57): [`ChecksumType`] as 1 fletcher4, 2 blake3, 3 sha256. Holes store 0.
//! - `type` (byte 58): [`ObjectType`]; `lvl` (byte 59): indirection level, at most
//!   [`LEVEL_MAX`].
//! - `flag` (byte 60): bit 0 = embedded; other bits reserved (zero).
//! - `elen` (byte 61): embedded payload length in bytes; zero unless embedded.
//! - `rsv` (bytes 62..64) and bytes 88..96: reserved, zero.
//!
//! # Embedded pointers
//!
//! An embedded pointer has no DVAs, no fill count and no checksum of its own (the parent's
//! checksum covers it), so those areas carry the payload: payload bytes `0..48` are stored at
//! pointer bytes `0..48` (the DVA area) and payload bytes `48..96` at pointer bytes `80..128`
//! (fill count, reserved word and checksum). `elen` equals `size_physical`; payload bytes past
//! `elen` are zero. Bytes `48..80` (sizes, types, flags, births) keep their normal meaning. An
//! embedded block has an implicit fill count of 1 and an all-zero checksum in memory.
//!
//! # Holes
//!
//! A hole is a pointer that is neither embedded nor has any DVA. It keeps its object type,
//! level, `size_logical` and both birth txgs (a punched hole's birth is what incremental send
//! needs); everything else is zero on disk, including the checksum type byte, which decodes as
//! [`ChecksumType::Fletcher4`] (the type [`BlockPtr::hole`] uses). So 128 zero bytes decode as
//! `BlockPtr::hole(Txg(0), ObjectType::None, 0)`: a freshly zeroed indirect block is all holes.
//!
//! # Validity
//!
//! [`BlockPtr::validate`] states every rule; [`BlockPtr::decode`] applies it to untrusted
//! bytes (returning [`BlockError::Corrupt`], never panicking), and [`BlockPtr::encode`] asserts
//! it, since encoding an invalid pointer is a programmer error. Every valid pointer round-trips
//! exactly, except that a zstd level reads back as 0 and a hole's checksum type reads back as
//! fletcher4.

use std::fmt;

use crate::types::{Txg, VdevId, SPA_MAXBLOCKSIZE};

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
    /// The pool's queue of block trees being destroyed in the background.
    BpTree = 11,
    /// A dnode's spill block: system attributes that overflow its bonus buffer.
    Spill = 12,
    /// An intent-log block (zil/): self-checksummed, its pointer's checksum field holds the
    /// seed (object-set guid, block sequence number), not a checksum.
    IntentLog = 13,
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
    /// This copy is a gang: `offset` holds a gang header listing the block's pieces, and
    /// `size_allocated` counts the header and that copy of every piece (block/gang.rs).
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

    /// Whether the block is stored as a gang (its DVAs point to gang headers, block/gang.rs).
    pub fn is_gang(&self) -> bool {
        !self.embedded && self.dvas.iter().any(|dva| dva.gang)
    }

    /// Total bytes allocated on disk across all copies.
    pub fn size_allocated(&self) -> u64 {
        self.copies().map(|dva| dva.size_allocated).sum()
    }

    /// Whether the block is metadata: an indirect block, or any block of an object that is not
    /// file data (OpenZFS BP_IS_METADATA).
    pub fn is_metadata(&self) -> bool {
        self.level > 0 || self.object_type != ObjectType::PlainFile
    }

    /// The "uncompressed" size space accounting counts: the logical size for file data, the
    /// physical size for metadata (OpenZFS BP_GET_UCSIZE), so that a dataset's compressratio
    /// speaks of the user's data and an empty file system reads 1.00x.
    pub fn size_uncompressed_accounted(&self) -> u64 {
        if self.is_metadata() {
            self.size_physical as u64
        } else {
            self.size_logical as u64
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors of the block layer.
// ---------------------------------------------------------------------------------------------

/// Errors of the block layer: corrupt block pointers, checksum mismatches, undecodable
/// compressed data.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BlockError {
    /// An on-disk structure failed validation. `structure` names it ("block pointer"),
    /// `byte_offset` is where in that structure the bad field starts, `what` says what is wrong.
    #[error("corrupt {structure} at byte {byte_offset}: {what}")]
    Corrupt {
        structure: &'static str,
        byte_offset: usize,
        what: String,
    },
    /// Stored bytes do not match the checksum their block pointer carries.
    #[error(
        "{checksum_type} checksum mismatch: expected {}, computed {}",
        checksum_hex(expected),
        checksum_hex(actual)
    )]
    ChecksumMismatch {
        checksum_type: ChecksumType,
        expected: [u8; 32],
        actual: [u8; 32],
    },
    /// Compressed bytes could not be decompressed to exactly the expected logical size.
    #[error("{compression} decompression failed: {what}")]
    Decompress {
        compression: Compression,
        what: String,
    },
}

impl BlockError {
    /// A corruption found while decoding `structure` (no byte offset known or relevant).
    pub fn corrupt(structure: &'static str, what: impl Into<String>) -> BlockError {
        BlockError::Corrupt {
            structure,
            byte_offset: 0,
            what: what.into(),
        }
    }
}

impl From<UnknownValue> for BlockError {
    fn from(unknown: UnknownValue) -> BlockError {
        BlockError::Corrupt {
            structure: unknown.kind,
            byte_offset: 0,
            what: format!("unknown value {}", unknown.value),
        }
    }
}

/// A checksum as four big-endian-printed u64 words, `a:b:c:d`, the way zdb prints them. The
/// words are read little-endian from the stored bytes.
pub fn checksum_hex(checksum: &[u8; 32]) -> String {
    let words: Vec<String> = checksum
        .chunks_exact(8)
        .map(|word| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(word);
            format!("{:x}", u64::from_le_bytes(bytes))
        })
        .collect();
    words.join(":")
}

// ---------------------------------------------------------------------------------------------
// Layout constants.
// ---------------------------------------------------------------------------------------------

/// Encoded size of one DVA.
pub const DVA_SIZE: usize = 16;
/// Unit of a DVA's stored allocated size (the smallest sector size).
pub const DVA_ALLOCATED_UNIT: u64 = 512;
/// Gang flag in a DVA's allocated-size word.
const DVA_GANG_BIT: u32 = 1 << 31;
/// Largest allocated size a DVA can express: 2^31 - 1 units of 512 bytes.
pub const DVA_ALLOCATED_MAX: u64 = (DVA_GANG_BIT as u64 - 1) * DVA_ALLOCATED_UNIT;
/// Deepest indirection level a block pointer may claim.
pub const LEVEL_MAX: u8 = 10;
/// Flag bit: the payload is embedded in the pointer.
const FLAG_EMBEDDED: u8 = 1 << 0;

const OFFSET_DVAS: usize = 0;
const OFFSET_SIZE_LOGICAL: usize = 48;
const OFFSET_SIZE_PHYSICAL: usize = 52;
const OFFSET_COMPRESSION: usize = 56;
const OFFSET_CHECKSUM_TYPE: usize = 57;
const OFFSET_OBJECT_TYPE: usize = 58;
const OFFSET_LEVEL: usize = 59;
const OFFSET_FLAGS: usize = 60;
const OFFSET_EMBEDDED_LENGTH: usize = 61;
const OFFSET_RESERVED_0: usize = 62;
const OFFSET_BIRTH_LOGICAL: usize = 64;
const OFFSET_BIRTH_PHYSICAL: usize = 72;
const OFFSET_FILL_COUNT: usize = 80;
const OFFSET_RESERVED_1: usize = 88;
const OFFSET_CHECKSUM: usize = 96;

/// Where the embedded payload lives: payload bytes `0..48` at pointer bytes `0..48`, payload
/// bytes `48..96` at pointer bytes `80..128`.
const EMBEDDED_AREAS: [(usize, usize); 2] = [(0, 48), (80, 128)];

const _: () = assert!(DVAS_MAX * DVA_SIZE == OFFSET_SIZE_LOGICAL);
const _: () = assert!(OFFSET_CHECKSUM + 32 == BLKPTR_SIZE);
const _: () = assert!(OFFSET_RESERVED_0 + 2 == OFFSET_BIRTH_LOGICAL);
const _: () = assert!(OFFSET_RESERVED_1 + 8 == OFFSET_CHECKSUM);
const _: () = assert!(
    (EMBEDDED_AREAS[0].1 - EMBEDDED_AREAS[0].0) + (EMBEDDED_AREAS[1].1 - EMBEDDED_AREAS[1].0)
        == EMBEDDED_PAYLOAD_MAX
);
const _: () =
    assert!(EMBEDDED_AREAS[1].0 == OFFSET_FILL_COUNT && EMBEDDED_AREAS[1].1 == BLKPTR_SIZE);
const _: () = assert!(EMBEDDED_PAYLOAD_MAX <= u8::MAX as usize);
const _: () = assert!(SPA_MAXBLOCKSIZE <= u32::MAX as u64);

// ---------------------------------------------------------------------------------------------
// Enum <-> byte conversions.
// ---------------------------------------------------------------------------------------------

/// An enum byte that names no known value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} value {value}")]
pub struct UnknownValue {
    pub kind: &'static str,
    pub value: u8,
}

impl From<ChecksumType> for u8 {
    fn from(checksum_type: ChecksumType) -> u8 {
        checksum_type as u8
    }
}

impl TryFrom<u8> for ChecksumType {
    type Error = UnknownValue;
    fn try_from(value: u8) -> Result<ChecksumType, UnknownValue> {
        match value {
            1 => Ok(ChecksumType::Fletcher4),
            2 => Ok(ChecksumType::Blake3),
            3 => Ok(ChecksumType::Sha256),
            _ => Err(UnknownValue {
                kind: "checksum type",
                value,
            }),
        }
    }
}

impl fmt::Display for ChecksumType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChecksumType::Fletcher4 => "fletcher4",
            ChecksumType::Blake3 => "blake3",
            ChecksumType::Sha256 => "sha256",
        })
    }
}

impl From<Compression> for u8 {
    /// The on-disk byte. The zstd level is dropped: it only matters when compressing.
    fn from(compression: Compression) -> u8 {
        match compression {
            Compression::Off => 0,
            Compression::Lz4 => 1,
            Compression::Zstd { .. } => 2,
        }
    }
}

impl TryFrom<u8> for Compression {
    type Error = UnknownValue;
    /// Zstd decodes with level 0 ("not recorded"); decompression does not need the level.
    fn try_from(value: u8) -> Result<Compression, UnknownValue> {
        match value {
            0 => Ok(Compression::Off),
            1 => Ok(Compression::Lz4),
            2 => Ok(Compression::Zstd { level: 0 }),
            _ => Err(UnknownValue {
                kind: "compression",
                value,
            }),
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compression::Off => f.write_str("uncompressed"),
            Compression::Lz4 => f.write_str("lz4"),
            Compression::Zstd { level: 0 } => f.write_str("zstd"),
            Compression::Zstd { level } => write!(f, "zstd-{level}"),
        }
    }
}

impl From<ObjectType> for u8 {
    fn from(object_type: ObjectType) -> u8 {
        object_type as u8
    }
}

impl ObjectType {
    /// Every object type, in on-disk value order.
    pub const ALL: [ObjectType; 14] = [
        ObjectType::None,
        ObjectType::Objset,
        ObjectType::Dnode,
        ObjectType::KeyValue,
        ObjectType::SpaceMap,
        ObjectType::ObjectArray,
        ObjectType::PlainFile,
        ObjectType::PoolConfig,
        ObjectType::DatasetDir,
        ObjectType::Dataset,
        ObjectType::BlockPtrList,
        ObjectType::BpTree,
        ObjectType::Spill,
        ObjectType::IntentLog,
    ];
}

impl TryFrom<u8> for ObjectType {
    type Error = UnknownValue;
    fn try_from(value: u8) -> Result<ObjectType, UnknownValue> {
        ObjectType::ALL
            .get(usize::from(value))
            .copied()
            .ok_or(UnknownValue {
                kind: "object type",
                value,
            })
    }
}

impl fmt::Display for ObjectType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

// ---------------------------------------------------------------------------------------------
// Validation, encoding, decoding.
// ---------------------------------------------------------------------------------------------

fn corrupt(byte_offset: usize, what: String) -> BlockError {
    BlockError::Corrupt {
        structure: "block pointer",
        byte_offset,
        what,
    }
}

fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(word)
}

fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(word)
}

fn write_u32(bytes: &mut [u8], offset: usize, value: u32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

fn write_u64(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

impl BlockPtr {
    /// Checks every rule a block pointer must satisfy; the error names the first broken rule
    /// and the byte offset of the offending field in the encoded form.
    ///
    /// All shapes: `level <= LEVEL_MAX`; `size_logical <= SPA_MAXBLOCKSIZE`.
    ///
    /// Holes: `size_physical == 0`, compression off, fill count 0, zero checksum, empty payload,
    /// empty DVAs all zero. The two births are free (a hole may be "never written", birth 0).
    ///
    /// Embedded: no DVA (all zero); payload length `== size_physical`, between 1 and
    /// [`EMBEDDED_PAYLOAD_MAX`]; `1 <= size_logical`; sizes agree with the compression (equal
    /// when off, `size_physical <= size_logical` otherwise); fill count 1; zero checksum;
    /// `0 < birth_logical <= birth_physical`.
    ///
    /// Normal: DVA[0] is a copy, and copies are packed (no copy after an empty DVA); each copy's
    /// allocated size is a non-zero multiple of 512 of at most [`DVA_ALLOCATED_MAX`] and at
    /// least `size_physical`, its offset a multiple of 512 that does not overflow with the
    /// size; `1 <= size_logical <= SPA_MAXBLOCKSIZE`; sizes agree with the compression; empty
    /// payload; `0 < birth_logical <= birth_physical`.
    pub fn validate(&self) -> Result<(), BlockError> {
        if self.level > LEVEL_MAX {
            return Err(corrupt(
                OFFSET_LEVEL,
                format!("level {} exceeds {}", self.level, LEVEL_MAX),
            ));
        }
        if u64::from(self.size_logical) > SPA_MAXBLOCKSIZE {
            return Err(corrupt(
                OFFSET_SIZE_LOGICAL,
                format!(
                    "logical size {:#x} exceeds the largest block size {:#x}",
                    self.size_logical, SPA_MAXBLOCKSIZE
                ),
            ));
        }
        if self.embedded {
            self.validate_embedded()
        } else if self.is_hole() {
            self.validate_hole()
        } else {
            self.validate_normal()
        }
    }

    fn validate_empty_dvas(&self, from: usize) -> Result<(), BlockError> {
        for (index, dva) in self.dvas.iter().enumerate().skip(from) {
            if *dva != Dva::default() {
                return Err(corrupt(
                    OFFSET_DVAS + index * DVA_SIZE,
                    format!("DVA[{index}] must be empty and zero, found {dva:?}"),
                ));
            }
        }
        Ok(())
    }

    fn validate_sizes_against_compression(&self) -> Result<(), BlockError> {
        if self.size_logical == 0 {
            return Err(corrupt(OFFSET_SIZE_LOGICAL, "logical size is zero".into()));
        }
        if self.size_physical == 0 {
            return Err(corrupt(
                OFFSET_SIZE_PHYSICAL,
                "physical size is zero".into(),
            ));
        }
        match self.compression {
            Compression::Off if self.size_physical != self.size_logical => Err(corrupt(
                OFFSET_SIZE_PHYSICAL,
                format!(
                    "uncompressed block with physical size {:#x} != logical size {:#x}",
                    self.size_physical, self.size_logical
                ),
            )),
            _ if self.size_physical > self.size_logical => Err(corrupt(
                OFFSET_SIZE_PHYSICAL,
                format!(
                    "physical size {:#x} exceeds logical size {:#x}",
                    self.size_physical, self.size_logical
                ),
            )),
            _ => Ok(()),
        }
    }

    fn validate_births(&self) -> Result<(), BlockError> {
        if self.birth_logical.0 == 0 {
            return Err(corrupt(
                OFFSET_BIRTH_LOGICAL,
                "written block with logical birth txg 0".into(),
            ));
        }
        if self.birth_physical < self.birth_logical {
            return Err(corrupt(
                OFFSET_BIRTH_PHYSICAL,
                format!(
                    "physical birth {} before logical birth {}",
                    self.birth_physical, self.birth_logical
                ),
            ));
        }
        Ok(())
    }

    fn validate_hole(&self) -> Result<(), BlockError> {
        self.validate_empty_dvas(0)?;
        if self.size_physical != 0 {
            return Err(corrupt(
                OFFSET_SIZE_PHYSICAL,
                format!("hole with physical size {:#x}", self.size_physical),
            ));
        }
        if self.compression != Compression::Off {
            return Err(corrupt(
                OFFSET_COMPRESSION,
                format!("hole with compression {}", self.compression),
            ));
        }
        if self.fill_count != 0 {
            return Err(corrupt(
                OFFSET_FILL_COUNT,
                format!("hole with fill count {}", self.fill_count),
            ));
        }
        if self.checksum != [0; 32] {
            return Err(corrupt(OFFSET_CHECKSUM, "hole with a checksum".into()));
        }
        if !self.embedded_payload.is_empty() {
            return Err(corrupt(
                OFFSET_EMBEDDED_LENGTH,
                "hole with an embedded payload".into(),
            ));
        }
        Ok(())
    }

    fn validate_embedded(&self) -> Result<(), BlockError> {
        self.validate_empty_dvas(0)?;
        let length = self.embedded_payload.len();
        if length == 0 || length > EMBEDDED_PAYLOAD_MAX {
            return Err(corrupt(
                OFFSET_EMBEDDED_LENGTH,
                format!("embedded payload length {length} outside 1..={EMBEDDED_PAYLOAD_MAX}"),
            ));
        }
        if length != self.size_physical as usize {
            return Err(corrupt(
                OFFSET_EMBEDDED_LENGTH,
                format!(
                    "embedded payload length {length} != physical size {}",
                    self.size_physical
                ),
            ));
        }
        self.validate_sizes_against_compression()?;
        if self.fill_count != 1 {
            return Err(corrupt(
                OFFSET_FILL_COUNT,
                format!(
                    "embedded block with fill count {} (must be 1)",
                    self.fill_count
                ),
            ));
        }
        if self.checksum != [0; 32] {
            return Err(corrupt(
                OFFSET_CHECKSUM,
                "embedded block with a checksum".into(),
            ));
        }
        self.validate_births()
    }

    fn validate_normal(&self) -> Result<(), BlockError> {
        let copies = self.dvas.iter().take_while(|dva| !dva.is_empty()).count();
        if copies == 0 {
            // is_hole() is false, so some later DVA is a copy while DVA[0] is empty.
            return Err(corrupt(
                OFFSET_DVAS,
                "DVA[0] is empty but a later DVA is not".into(),
            ));
        }
        self.validate_empty_dvas(copies)?;
        self.validate_sizes_against_compression()?;
        let gang = self.dvas[0].gang;
        for (index, dva) in self.dvas.iter().enumerate().take(copies) {
            if dva.gang != gang {
                return Err(corrupt(
                    OFFSET_DVAS + index * DVA_SIZE + 4,
                    format!("DVA[{index}] gang flag differs from DVA[0]'s"),
                ));
            }
            let byte_offset = OFFSET_DVAS + index * DVA_SIZE;
            if dva.size_allocated % DVA_ALLOCATED_UNIT != 0
                || dva.size_allocated > DVA_ALLOCATED_MAX
            {
                return Err(corrupt(
                    byte_offset + 4,
                    format!(
                        "DVA[{index}] allocated size {:#x} is not a multiple of {DVA_ALLOCATED_UNIT} \
                         up to {DVA_ALLOCATED_MAX:#x}",
                        dva.size_allocated
                    ),
                ));
            }
            // A gang copy's size counts its header and pieces (a piece may have fewer copies).
            if !gang && dva.size_allocated < u64::from(self.size_physical) {
                return Err(corrupt(
                    byte_offset + 4,
                    format!(
                        "DVA[{index}] allocated size {:#x} smaller than physical size {:#x}",
                        dva.size_allocated, self.size_physical
                    ),
                ));
            }
            if dva.offset % DVA_ALLOCATED_UNIT != 0
                || dva.offset.checked_add(dva.size_allocated).is_none()
            {
                return Err(corrupt(
                    byte_offset + 8,
                    format!(
                        "DVA[{index}] offset {:#x} is unaligned or overflows with its size",
                        dva.offset
                    ),
                ));
            }
        }
        if !self.embedded_payload.is_empty() {
            return Err(corrupt(
                OFFSET_EMBEDDED_LENGTH,
                "normal block with an embedded payload".into(),
            ));
        }
        self.validate_births()
    }

    /// Encodes this pointer into its 128-byte on-disk form.
    ///
    /// Panics if the pointer is invalid ([`BlockPtr::validate`]): building one is a bug.
    pub fn encode(&self) -> [u8; BLKPTR_SIZE] {
        let mut bytes = [0u8; BLKPTR_SIZE];
        self.encode_into(&mut bytes);
        bytes
    }

    /// Encodes this pointer into `bytes`, which must be exactly [`BLKPTR_SIZE`] long.
    ///
    /// Panics if the pointer is invalid or the slice has the wrong length.
    pub fn encode_into(&self, bytes: &mut [u8]) {
        assert_eq!(bytes.len(), BLKPTR_SIZE, "block pointer buffer size");
        if let Err(error) = self.validate() {
            panic!("encoding an invalid block pointer: {error}; {self:?}");
        }
        bytes.fill(0);
        let is_hole = self.is_hole();

        write_u32(bytes, OFFSET_SIZE_LOGICAL, self.size_logical);
        write_u32(bytes, OFFSET_SIZE_PHYSICAL, self.size_physical);
        bytes[OFFSET_COMPRESSION] = u8::from(self.compression);
        bytes[OFFSET_CHECKSUM_TYPE] = if is_hole {
            0
        } else {
            u8::from(self.checksum_type)
        };
        bytes[OFFSET_OBJECT_TYPE] = u8::from(self.object_type);
        bytes[OFFSET_LEVEL] = self.level;
        write_u64(bytes, OFFSET_BIRTH_LOGICAL, self.birth_logical.0);
        write_u64(bytes, OFFSET_BIRTH_PHYSICAL, self.birth_physical.0);

        if self.embedded {
            bytes[OFFSET_FLAGS] = FLAG_EMBEDDED;
            // validate() guarantees the length fits in EMBEDDED_PAYLOAD_MAX <= u8::MAX.
            bytes[OFFSET_EMBEDDED_LENGTH] = self.embedded_payload.len() as u8;
            let mut payload = [0u8; EMBEDDED_PAYLOAD_MAX];
            payload[..self.embedded_payload.len()].copy_from_slice(&self.embedded_payload);
            let mut consumed = 0;
            for (start, end) in EMBEDDED_AREAS {
                bytes[start..end].copy_from_slice(&payload[consumed..consumed + (end - start)]);
                consumed += end - start;
            }
        } else {
            for (index, dva) in self.dvas.iter().enumerate() {
                let base = OFFSET_DVAS + index * DVA_SIZE;
                // validate() bounds size_allocated by DVA_ALLOCATED_MAX, so the units fit in 31 bits.
                let mut word = (dva.size_allocated / DVA_ALLOCATED_UNIT) as u32;
                if dva.gang {
                    word |= DVA_GANG_BIT;
                }
                write_u32(bytes, base, dva.vdev.0);
                write_u32(bytes, base + 4, word);
                write_u64(bytes, base + 8, dva.offset);
            }
            write_u64(bytes, OFFSET_FILL_COUNT, self.fill_count);
            bytes[OFFSET_CHECKSUM..].copy_from_slice(&self.checksum);
        }
    }

    /// Whether the encoded pointer `bytes` (exactly [`BLKPTR_SIZE`] long, from a block whose
    /// checksum was verified) is a hole, read without decoding it: for an indirect block's
    /// pointers that a sync leaves as they are.
    pub fn encoded_is_hole(bytes: &[u8]) -> bool {
        bytes[OFFSET_FLAGS] & FLAG_EMBEDDED == 0
            && (0..DVAS_MAX).all(|index| {
                read_u32(bytes, OFFSET_DVAS + index * DVA_SIZE + 4) & !DVA_GANG_BIT == 0
            })
    }

    /// The fill count of the encoded pointer `bytes`, read without decoding it (an embedded
    /// pointer's is 1; its fill-count word holds payload).
    pub fn encoded_fill_count(bytes: &[u8]) -> u64 {
        if bytes[OFFSET_FLAGS] & FLAG_EMBEDDED != 0 {
            1
        } else {
            read_u64(bytes, OFFSET_FILL_COUNT)
        }
    }

    /// Decodes and validates a block pointer from untrusted bytes. Never panics: any
    /// inconsistency is a [`BlockError::Corrupt`] naming the field.
    pub fn decode(bytes: &[u8]) -> Result<BlockPtr, BlockError> {
        if bytes.len() != BLKPTR_SIZE {
            return Err(corrupt(
                0,
                format!("length {} instead of {BLKPTR_SIZE}", bytes.len()),
            ));
        }
        let compression = Compression::try_from(bytes[OFFSET_COMPRESSION])
            .map_err(|error| corrupt(OFFSET_COMPRESSION, error.to_string()))?;
        let object_type = ObjectType::try_from(bytes[OFFSET_OBJECT_TYPE])
            .map_err(|error| corrupt(OFFSET_OBJECT_TYPE, error.to_string()))?;
        let flags = bytes[OFFSET_FLAGS];
        if flags & !FLAG_EMBEDDED != 0 {
            return Err(corrupt(
                OFFSET_FLAGS,
                format!("reserved flag bits set: {flags:#04x}"),
            ));
        }
        let embedded = flags & FLAG_EMBEDDED != 0;
        let embedded_length = usize::from(bytes[OFFSET_EMBEDDED_LENGTH]);
        if bytes[OFFSET_RESERVED_0..OFFSET_BIRTH_LOGICAL] != [0, 0] {
            return Err(corrupt(
                OFFSET_RESERVED_0,
                "reserved bytes are not zero".into(),
            ));
        }

        let mut pointer = BlockPtr {
            dvas: [Dva::default(); DVAS_MAX],
            size_logical: read_u32(bytes, OFFSET_SIZE_LOGICAL),
            size_physical: read_u32(bytes, OFFSET_SIZE_PHYSICAL),
            compression,
            checksum_type: ChecksumType::Fletcher4,
            object_type,
            level: bytes[OFFSET_LEVEL],
            embedded,
            birth_logical: Txg(read_u64(bytes, OFFSET_BIRTH_LOGICAL)),
            birth_physical: Txg(read_u64(bytes, OFFSET_BIRTH_PHYSICAL)),
            fill_count: 0,
            checksum: [0; 32],
            embedded_payload: Vec::new(),
        };
        let checksum_byte = bytes[OFFSET_CHECKSUM_TYPE];

        if embedded {
            if embedded_length > EMBEDDED_PAYLOAD_MAX {
                return Err(corrupt(
                    OFFSET_EMBEDDED_LENGTH,
                    format!(
                        "embedded payload length {embedded_length} exceeds {EMBEDDED_PAYLOAD_MAX}"
                    ),
                ));
            }
            let mut payload = Vec::with_capacity(EMBEDDED_PAYLOAD_MAX);
            for (start, end) in EMBEDDED_AREAS {
                payload.extend_from_slice(&bytes[start..end]);
            }
            if let Some(position) = payload[embedded_length..].iter().position(|&b| b != 0) {
                let index = embedded_length + position;
                let byte_offset = if index < 48 { index } else { index - 48 + 80 };
                return Err(corrupt(
                    byte_offset,
                    format!("embedded payload has non-zero padding at payload byte {index}"),
                ));
            }
            payload.truncate(embedded_length);
            pointer.embedded_payload = payload;
            pointer.fill_count = 1;
            pointer.checksum_type = ChecksumType::try_from(checksum_byte)
                .map_err(|error| corrupt(OFFSET_CHECKSUM_TYPE, error.to_string()))?;
        } else {
            if embedded_length != 0 {
                return Err(corrupt(
                    OFFSET_EMBEDDED_LENGTH,
                    format!("embedded payload length {embedded_length} on a non-embedded pointer"),
                ));
            }
            if read_u64(bytes, OFFSET_RESERVED_1) != 0 {
                return Err(corrupt(
                    OFFSET_RESERVED_1,
                    "reserved word is not zero".into(),
                ));
            }
            for (index, dva) in pointer.dvas.iter_mut().enumerate() {
                let base = OFFSET_DVAS + index * DVA_SIZE;
                let word = read_u32(bytes, base + 4);
                *dva = Dva {
                    vdev: VdevId(read_u32(bytes, base)),
                    offset: read_u64(bytes, base + 8),
                    size_allocated: u64::from(word & !DVA_GANG_BIT) * DVA_ALLOCATED_UNIT,
                    gang: word & DVA_GANG_BIT != 0,
                };
                if dva.size_allocated == 0 && *dva != Dva::default() {
                    return Err(corrupt(
                        base,
                        format!("DVA[{index}] has no allocated size but non-zero fields"),
                    ));
                }
            }
            pointer.fill_count = read_u64(bytes, OFFSET_FILL_COUNT);
            pointer.checksum.copy_from_slice(&bytes[OFFSET_CHECKSUM..]);
            if pointer.is_hole() {
                if checksum_byte != 0 {
                    return Err(corrupt(
                        OFFSET_CHECKSUM_TYPE,
                        format!("hole with checksum type byte {checksum_byte}"),
                    ));
                }
            } else {
                pointer.checksum_type = ChecksumType::try_from(checksum_byte)
                    .map_err(|error| corrupt(OFFSET_CHECKSUM_TYPE, error.to_string()))?;
            }
        }
        pointer.validate()?;
        Ok(pointer)
    }
}

impl fmt::Display for BlockPtr {
    /// zdb style, sizes and offsets in hex, births in decimal:
    /// `DVA[0]=<0:1a000:2000> [L0 PlainFile] fletcher4 lz4 size=20000L/2000P birth=12L/12P
    /// fill=1 cksum=a:b:c:d`. Holes print `HOLE`, embedded blocks `EMBEDDED`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.embedded {
            write!(
                f,
                "EMBEDDED [L{} {}] {} {} size={:x}L/{:x}P birth={}L/{}P",
                self.level,
                self.object_type,
                self.checksum_type,
                self.compression,
                self.size_logical,
                self.size_physical,
                self.birth_logical,
                self.birth_physical
            )
        } else if self.is_hole() {
            write!(
                f,
                "HOLE [L{} {}] size={:x}L birth={}L/{}P",
                self.level,
                self.object_type,
                self.size_logical,
                self.birth_logical,
                self.birth_physical
            )
        } else {
            for (index, dva) in self.dvas.iter().enumerate() {
                if !dva.is_empty() {
                    write!(
                        f,
                        "DVA[{index}]=<{}:{:x}:{:x}{}> ",
                        dva.vdev,
                        dva.offset,
                        dva.size_allocated,
                        if dva.gang { ":G" } else { "" }
                    )?;
                }
            }
            write!(
                f,
                "[L{} {}] {} {} size={:x}L/{:x}P birth={}L/{}P fill={} cksum={}",
                self.level,
                self.object_type,
                self.checksum_type,
                self.compression,
                self.size_logical,
                self.size_physical,
                self.birth_logical,
                self.birth_physical,
                self.fill_count,
                checksum_hex(&self.checksum)
            )
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
