//! The L2ARC's on-disk structures (OpenZFS `l2arc_dev_hdr_phys_t`, `l2arc_log_blk_phys_t`,
//! `l2arc_log_ent_phys_t`): the device header and the log blocks, with their encoders and
//! decoders. Decoding untrusted bytes never panics (proptests below).
//!
//! A cache device (device size `A`, aligned down to 256 KiB as for every leaf):
//!
//! ```text
//!  [0, 512K)            labels L0, L1 (the pool's label format, marked as a cache device)
//!  [512K, 4M)           boot reserve, never written
//!  [4M, 4M + 4K)        device header (DEVICE_HEADER_ENCODED bytes, zeros to 4 KiB)
//!  [4M + 4K, A - 512K)  the ring: buffers and log blocks, written at the hand, wrapping
//!  [A - 512K, A)        labels L2, L3
//! ```
//!
//! Device header (168 bytes, little-endian):
//!
//! ```text
//!  offset  size  field
//!  0       8     magic        "tarnl2dh" as a little-endian u64
//!  8       4     version      DEVICE_HEADER_VERSION (1); another is "unsupported"
//!  12      4     reserved     0
//!  16      8     pool_guid
//!  24      8     device_guid
//!  32      8     ring_start   device byte where the ring starts
//!  40      8     ring_end     device byte where it ends
//!  48      8     hand         next write offset (device byte)
//!  56      8     lap          times the hand has wrapped
//!  64      8     feed_max     bytes a feed may write past `hand` before this header is rewritten
//!  72      8     log_blocks   log blocks written over the device's life
//!  80      56    newest       pointer to the newest log block (a LogPointer; offset 0: none)
//!  136     32    checksum     BLAKE3 of bytes [0, 136)
//! ```
//!
//! Log pointer (56 bytes): `offset` u64 (device byte), `size` u32 (bytes of the log block),
//! reserved u32, `lap` u64 (the lap it was written in), `checksum` [32] (the log block's own
//! checksum, so a pointer never follows a block that was overwritten by a newer valid one).
//!
//! Log block (`LOG_BLOCK_HEADER` bytes, then `count` entries of `LOG_ENTRY_SIZE`, zero padded to
//! the ring's sector):
//!
//! ```text
//!  offset  size  field
//!  0       8     magic        "tarnl2lb"
//!  8       4     version      LOG_BLOCK_VERSION (1)
//!  12      4     count        entries, at most LOG_ENTRIES_MAX
//!  16      8     sequence     1 for the device's first log block, then +1
//!  24      8     lap          the lap of this block and of every buffer it records
//!  32      56    previous     pointer to the previous log block (offset 0: none)
//!  88      32    checksum     BLAKE3 of bytes [0, 88) and of the entries
//!  120     40×n  entries
//! ```
//!
//! Log entry (40 bytes): `vdev` u32, `size_physical` u32, `offset` u64 (the first DVA's),
//! `birth` u64 (physical birth txg): the block's [`BlockKey`]; `l2_offset` u64 (device byte of
//! the buffer), `size_logical` u32, `compression` u8 (the block pointer's code), `kind` u8
//! (0 data, 1 metadata), `origin` u8 (bit 0: fed from the MFU, else the MRU; bit 1: read only
//! by a prefetch when fed; other bits 0, as written before the field existed), reserved u8.

use crate::cache::{BlockKey, BlockKind};
use crate::types::{Txg, VdevId};

/// "tarnl2dh" read as a little-endian u64.
pub const DEVICE_HEADER_MAGIC: u64 = u64::from_le_bytes(*b"tarnl2dh");
pub const DEVICE_HEADER_VERSION: u32 = 1;
/// Encoded size of the device header.
pub const DEVICE_HEADER_ENCODED: usize = 168;
/// Bytes reserved for the device header at the start of the data area.
pub const DEVICE_HEADER_SIZE: u64 = 4096;
/// "tarnl2lb" read as a little-endian u64.
pub const LOG_BLOCK_MAGIC: u64 = u64::from_le_bytes(*b"tarnl2lb");
pub const LOG_BLOCK_VERSION: u32 = 1;
/// Size of a log block's header.
pub const LOG_BLOCK_HEADER: usize = 120;
/// Size of one log entry.
pub const LOG_ENTRY_SIZE: usize = 40;
/// Most entries in one log block (OpenZFS: 1022).
pub const LOG_ENTRIES_MAX: usize = 1022;
/// Size of an encoded log pointer.
pub const LOG_POINTER_SIZE: usize = 56;
/// The largest log block on the device: [`LOG_ENTRIES_MAX`] entries, rounded to the sector. A
/// pointer read from the device that claims more is damaged (checked before the block is read
/// into memory of that size).
pub const LOG_BLOCK_SIZE_MAX: u64 =
    sector_round((LOG_BLOCK_HEADER + LOG_ENTRIES_MAX * LOG_ENTRY_SIZE) as u64);
/// The ring's sector: buffers and log blocks start at multiples of it (so O_DIRECT works).
pub const RING_SECTOR: u64 = 4096;
/// The largest log block, padded to the sector.
pub const LOG_BLOCK_MAX: u64 = (LOG_BLOCK_HEADER + LOG_ENTRIES_MAX * LOG_ENTRY_SIZE)
    .div_ceil(RING_SECTOR as usize) as u64
    * RING_SECTOR;

const _: () = assert!(8 + 4 + 4 + 8 * 8 + LOG_POINTER_SIZE + 32 == DEVICE_HEADER_ENCODED);
const _: () = assert!(8 + 4 + 4 + 8 + 32 == LOG_POINTER_SIZE);
const _: () = assert!(8 + 4 + 4 + 8 + 8 + LOG_POINTER_SIZE + 32 == LOG_BLOCK_HEADER);
const _: () = assert!(4 + 4 + 8 + 8 + 8 + 4 + 1 + 1 + 2 == LOG_ENTRY_SIZE);
const _: () = assert!(DEVICE_HEADER_ENCODED as u64 <= DEVICE_HEADER_SIZE);
const _: () = assert!(LOG_BLOCK_MAX == 45056);

/// Round `bytes` up to the ring's sector.
pub const fn sector_round(bytes: u64) -> u64 {
    bytes.div_ceil(RING_SECTOR) * RING_SECTOR
}

/// Where a log block is: see the module diagram. `offset` 0 means "no log block".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogPointer {
    pub offset: u64,
    pub size: u32,
    pub lap: u64,
    pub checksum: [u8; 32],
}

impl LogPointer {
    pub fn is_none(&self) -> bool {
        self.offset == 0
    }

    fn encode_into(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..12].copy_from_slice(&self.size.to_le_bytes());
        out[12..16].fill(0);
        out[16..24].copy_from_slice(&self.lap.to_le_bytes());
        out[24..56].copy_from_slice(&self.checksum);
    }

    fn decode_from(bytes: &[u8]) -> LogPointer {
        LogPointer {
            offset: u64_at(bytes, 0),
            size: u32_at(bytes, 8),
            lap: u64_at(bytes, 16),
            checksum: bytes[24..56].try_into().expect("32 bytes"),
        }
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// The device header (OpenZFS `l2arc_dev_hdr_phys_t`); see the module diagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceHeader {
    pub pool_guid: u64,
    pub device_guid: u64,
    pub ring_start: u64,
    pub ring_end: u64,
    pub hand: u64,
    pub lap: u64,
    pub feed_max: u64,
    pub log_blocks: u64,
    pub newest: LogPointer,
}

/// Why a device header or log block was not accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// All zeros: a fresh device (or a log block never written).
    #[error("empty (never written)")]
    Empty,
    #[error("unsupported {what} version {version}")]
    Unsupported { what: &'static str, version: u32 },
    #[error("corrupt {what}: {why}")]
    Corrupt { what: &'static str, why: String },
}

fn corrupt(what: &'static str, why: impl Into<String>) -> FormatError {
    FormatError::Corrupt {
        what,
        why: why.into(),
    }
}

impl DeviceHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; DEVICE_HEADER_SIZE as usize];
        bytes[0..8].copy_from_slice(&DEVICE_HEADER_MAGIC.to_le_bytes());
        bytes[8..12].copy_from_slice(&DEVICE_HEADER_VERSION.to_le_bytes());
        let words = [
            self.pool_guid,
            self.device_guid,
            self.ring_start,
            self.ring_end,
            self.hand,
            self.lap,
            self.feed_max,
            self.log_blocks,
        ];
        for (index, word) in words.iter().enumerate() {
            bytes[16 + index * 8..24 + index * 8].copy_from_slice(&word.to_le_bytes());
        }
        self.newest.encode_into(&mut bytes[80..136]);
        let checksum = *blake3::hash(&bytes[..136]).as_bytes();
        bytes[136..168].copy_from_slice(&checksum);
        bytes
    }

    /// Decode and validate a header read from disk (at least [`DEVICE_HEADER_ENCODED`] bytes).
    /// The geometry is checked for consistency; the caller checks the guids.
    pub fn decode(bytes: &[u8]) -> Result<DeviceHeader, FormatError> {
        const WHAT: &str = "L2ARC device header";
        let Some(bytes) = bytes.get(..DEVICE_HEADER_ENCODED) else {
            return Err(corrupt(WHAT, "short read"));
        };
        if bytes.iter().all(|&byte| byte == 0) {
            return Err(FormatError::Empty);
        }
        if u64_at(bytes, 0) != DEVICE_HEADER_MAGIC {
            return Err(corrupt(WHAT, "bad magic"));
        }
        let version = u32_at(bytes, 8);
        if *blake3::hash(&bytes[..136]).as_bytes() != bytes[136..168] {
            return Err(corrupt(WHAT, "checksum mismatch"));
        }
        if version != DEVICE_HEADER_VERSION {
            return Err(FormatError::Unsupported {
                what: WHAT,
                version,
            });
        }
        let word = |index: usize| u64_at(bytes, 16 + index * 8);
        let header = DeviceHeader {
            pool_guid: word(0),
            device_guid: word(1),
            ring_start: word(2),
            ring_end: word(3),
            hand: word(4),
            lap: word(5),
            feed_max: word(6),
            log_blocks: word(7),
            newest: LogPointer::decode_from(&bytes[80..136]),
        };
        if header.ring_start >= header.ring_end
            || header.hand < header.ring_start
            || header.hand > header.ring_end
        {
            return Err(corrupt(WHAT, "hand or ring out of range"));
        }
        Ok(header)
    }
}

/// One buffer recorded in a log block (OpenZFS `l2arc_log_ent_phys_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub key: BlockKey,
    pub size_physical: u32,
    pub size_logical: u32,
    pub l2_offset: u64,
    /// The block pointer's compression code (`u8::from(Compression)`).
    pub compression: u8,
    pub kind: BlockKind,
    /// Which ARC list the buffer was fed from, and whether only a prefetch had read it.
    pub mfu: bool,
    pub prefetch: bool,
}

/// Bits of a log entry's `origin` byte.
const ORIGIN_MFU: u8 = 1;
const ORIGIN_PREFETCH: u8 = 2;

/// A log block: the buffers written since the previous one, and a pointer to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogBlock {
    pub sequence: u64,
    pub lap: u64,
    pub previous: LogPointer,
    pub entries: Vec<LogEntry>,
}

impl LogBlock {
    /// The encoded block (padded to the sector) and its checksum (for the pointer to it).
    pub fn encode(&self) -> (Vec<u8>, [u8; 32]) {
        assert!(self.entries.len() <= LOG_ENTRIES_MAX);
        let length = LOG_BLOCK_HEADER + self.entries.len() * LOG_ENTRY_SIZE;
        let mut bytes = vec![0u8; sector_round(length as u64) as usize];
        bytes[0..8].copy_from_slice(&LOG_BLOCK_MAGIC.to_le_bytes());
        bytes[8..12].copy_from_slice(&LOG_BLOCK_VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&(self.entries.len() as u32).to_le_bytes());
        bytes[16..24].copy_from_slice(&self.sequence.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.lap.to_le_bytes());
        self.previous.encode_into(&mut bytes[32..88]);
        for (index, entry) in self.entries.iter().enumerate() {
            let out = &mut bytes[LOG_BLOCK_HEADER + index * LOG_ENTRY_SIZE..][..LOG_ENTRY_SIZE];
            out[0..4].copy_from_slice(&entry.key.vdev.0.to_le_bytes());
            out[4..8].copy_from_slice(&entry.size_physical.to_le_bytes());
            out[8..16].copy_from_slice(&entry.key.offset.to_le_bytes());
            out[16..24].copy_from_slice(&entry.key.birth.0.to_le_bytes());
            out[24..32].copy_from_slice(&entry.l2_offset.to_le_bytes());
            out[32..36].copy_from_slice(&entry.size_logical.to_le_bytes());
            out[36] = entry.compression;
            out[37] = entry.kind as u8;
            out[38] = u8::from(entry.mfu) * ORIGIN_MFU + u8::from(entry.prefetch) * ORIGIN_PREFETCH;
        }
        let checksum = log_block_checksum(&bytes[..length]);
        bytes[88..120].copy_from_slice(&checksum);
        (bytes, checksum)
    }

    /// Decode and validate a log block read from disk; `expected` is the checksum its pointer
    /// carries. Never panics.
    pub fn decode(bytes: &[u8], expected: &[u8; 32]) -> Result<LogBlock, FormatError> {
        const WHAT: &str = "L2ARC log block";
        let Some(header) = bytes.get(..LOG_BLOCK_HEADER) else {
            return Err(corrupt(WHAT, "short read"));
        };
        if header.iter().all(|&byte| byte == 0) {
            return Err(FormatError::Empty);
        }
        if u64_at(header, 0) != LOG_BLOCK_MAGIC {
            return Err(corrupt(WHAT, "bad magic"));
        }
        let count = u32_at(header, 12) as usize;
        if count > LOG_ENTRIES_MAX {
            return Err(corrupt(WHAT, format!("{count} entries")));
        }
        let length = LOG_BLOCK_HEADER + count * LOG_ENTRY_SIZE;
        let Some(body) = bytes.get(..length) else {
            return Err(corrupt(WHAT, "entries run past the block"));
        };
        let checksum = log_block_checksum(body);
        if checksum != header[88..120] || &checksum != expected {
            return Err(corrupt(WHAT, "checksum mismatch"));
        }
        let version = u32_at(header, 8);
        if version != LOG_BLOCK_VERSION {
            return Err(FormatError::Unsupported {
                what: WHAT,
                version,
            });
        }
        let mut entries = Vec::with_capacity(count);
        for index in 0..count {
            let entry = &body[LOG_BLOCK_HEADER + index * LOG_ENTRY_SIZE..][..LOG_ENTRY_SIZE];
            let kind = match entry[37] {
                0 => BlockKind::Data,
                1 => BlockKind::Metadata,
                other => return Err(corrupt(WHAT, format!("entry {index}: kind {other}"))),
            };
            let origin = entry[38];
            if origin & !(ORIGIN_MFU | ORIGIN_PREFETCH) != 0 {
                return Err(corrupt(WHAT, format!("entry {index}: origin {origin:#x}")));
            }
            entries.push(LogEntry {
                key: BlockKey {
                    vdev: VdevId(u32_at(entry, 0)),
                    offset: u64_at(entry, 8),
                    birth: Txg(u64_at(entry, 16)),
                },
                size_physical: u32_at(entry, 4),
                l2_offset: u64_at(entry, 24),
                size_logical: u32_at(entry, 32),
                compression: entry[36],
                kind,
                mfu: origin & ORIGIN_MFU != 0,
                prefetch: origin & ORIGIN_PREFETCH != 0,
            });
        }
        Ok(LogBlock {
            sequence: u64_at(header, 16),
            lap: u64_at(header, 24),
            previous: LogPointer::decode_from(&header[32..88]),
            entries,
        })
    }
}

/// BLAKE3 of a log block's bytes with its checksum field taken as zeros.
fn log_block_checksum(body: &[u8]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&body[..88]);
    hasher.update(&[0u8; 32]);
    hasher.update(&body[LOG_BLOCK_HEADER..]);
    *hasher.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> DeviceHeader {
        DeviceHeader {
            pool_guid: 7,
            device_guid: 9,
            ring_start: 4 << 20,
            ring_end: 60 << 20,
            hand: 5 << 20,
            lap: 2,
            feed_max: 16 << 20,
            log_blocks: 11,
            newest: LogPointer {
                offset: (4 << 20) + 8192,
                size: 4096,
                lap: 2,
                checksum: [5; 32],
            },
        }
    }

    fn entry(index: u64) -> LogEntry {
        LogEntry {
            key: BlockKey {
                vdev: VdevId(index as u32 % 3),
                offset: index * 4096,
                birth: Txg(100 + index),
            },
            size_physical: 4096,
            size_logical: 8192,
            l2_offset: (4 << 20) + index * 4096,
            compression: 1,
            mfu: index % 3 == 1,
            prefetch: index % 5 == 2,
            kind: if index.is_multiple_of(2) {
                BlockKind::Data
            } else {
                BlockKind::Metadata
            },
        }
    }

    #[test]
    fn device_header_round_trips_and_detects_damage() {
        let bytes = header().encode();
        assert_eq!(bytes.len(), DEVICE_HEADER_SIZE as usize);
        assert_eq!(DeviceHeader::decode(&bytes), Ok(header()));
        for at in [0, 20, 50, 100, 140] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 1;
            assert!(matches!(
                DeviceHeader::decode(&damaged),
                Err(FormatError::Corrupt { .. })
            ));
        }
        assert_eq!(
            DeviceHeader::decode(&vec![0; 4096]),
            Err(FormatError::Empty)
        );
    }

    #[test]
    fn log_block_round_trips_and_checks_its_pointer() {
        let block = LogBlock {
            sequence: 3,
            lap: 1,
            previous: header().newest,
            entries: (0..LOG_ENTRIES_MAX as u64).map(entry).collect(),
        };
        let (bytes, checksum) = block.encode();
        assert_eq!(bytes.len() as u64, LOG_BLOCK_MAX);
        assert_eq!(LogBlock::decode(&bytes, &checksum), Ok(block.clone()));
        // A valid block that is not the one the pointer names is refused.
        assert!(LogBlock::decode(&bytes, &[0; 32]).is_err());
        let mut damaged = bytes.clone();
        damaged[LOG_BLOCK_HEADER + 5] ^= 0x80;
        assert!(matches!(
            LogBlock::decode(&damaged, &checksum),
            Err(FormatError::Corrupt { .. })
        ));
        let small = LogBlock {
            entries: vec![entry(1)],
            ..block
        };
        let (bytes, checksum) = small.encode();
        assert_eq!(bytes.len(), 4096);
        assert_eq!(LogBlock::decode(&bytes, &checksum), Ok(small));
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn device_header_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = DeviceHeader::decode(&bytes);
        }

        #[test]
        fn log_block_decoder_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..2000),
            count in 0u32..2000,
            magic in any::<bool>(),
        ) {
            let mut bytes = bytes;
            if magic && bytes.len() >= LOG_BLOCK_HEADER {
                bytes[0..8].copy_from_slice(&LOG_BLOCK_MAGIC.to_le_bytes());
                bytes[12..16].copy_from_slice(&count.to_le_bytes());
            }
            let _ = LogBlock::decode(&bytes, &[0; 32]);
        }

        #[test]
        fn a_flipped_byte_never_decodes_to_another_block(at in 0usize..4096, bit in 0u8..8) {
            let block = LogBlock { sequence: 1, lap: 0, previous: LogPointer::default(), entries: (0..20).map(entry).collect() };
            let (mut bytes, checksum) = block.encode();
            bytes[at] ^= 1 << bit;
            let used = LOG_BLOCK_HEADER + 20 * LOG_ENTRY_SIZE;
            let decoded = LogBlock::decode(&bytes, &checksum);
            if at < used { prop_assert!(decoded.is_err()); } else { prop_assert_eq!(decoded, Ok(block)); }
        }
    }
}
