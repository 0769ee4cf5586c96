//! The intent log's header, as the object-set header holds it (OpenZFS's `zil_header_t` inside
//! `objset_phys_t`), and what a pointer to a log block may be.
//!
//! # Theory
//! The log header is part of the object-set header (`phys.rs`, bytes 528..720), so decoding an
//! object set's root decodes and checks it, and each object-set sync writes the header the
//! attached log gives it (`intent.rs`). The log itself, its blocks and records, is the zil
//! layer's (`zil/format.rs`, `zil/record.rs`), which sits above this one: it reads and writes
//! object sets. So the header's type, the rule a log block pointer must follow (the header's
//! first pointer obeys it as every block's next pointer does), and the error every log format
//! reports are defined here, below both, and the zil layer uses them from here.
//!
//! # Byte layout (little-endian)
//! Log header, 192 bytes at offset 528 of the object-set header (docs/design/08-zil.md §2.4a):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 128 | first log block pointer (a hole: no log) |
//! | 128 | 8 | claim txg: the first txg of the import that claimed the chain (0: unclaimed) |
//! | 136 | 8 | claimed-through txg: records of this txg or older are already in the tree |
//! | 144 | 8 | replayed-through sequence: records numbered this or lower are in the tree (0: none) |
//! | 152 | 40 | reserved, zero |
//!
//! The replayed-through sequence (OpenZFS `zh_replay_seq`) is written only on a pool with
//! feature `replay_sequence`, and only while a claimed chain is being replayed: each txg that
//! replay changes records the newest record it applied, so a replay cut short by a crash
//! resumes after the records whose changes synced instead of applying them a second time.
//!
//! Decoding never panics: anything malformed is a [`LogFormatError`].

use crate::block::blkptr::{BlockPtr, ObjectType, BLKPTR_SIZE};
use crate::types::Txg;

/// Size of the log header inside the object-set header.
pub const LOG_HEADER_SIZE: usize = 192;
/// Largest log block (OpenZFS ZIL_MAX_BLKSZ).
pub const BLOCK_SIZE_MAX: usize = 128 << 10;
/// Log block sizes are multiples of this.
pub const BLOCK_SIZE_UNIT: usize = 4 << 10;

/// Something in a log header, block or record that cannot be what it claims.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("intent log: {0}")]
pub struct LogFormatError(pub String);

/// The log header of an object set, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogHeader {
    /// The first block of the chain; a hole when there is no log.
    pub first: BlockPtr,
    /// First txg of the import that claimed the chain; 0 while unclaimed.
    pub claim_txg: Txg,
    /// Records of this txg or older are already in the tree (set at claim).
    pub claimed_through: Txg,
    /// Records numbered this or lower were replayed in a txg that synced (0: none).
    pub replayed_through: u64,
}

impl Default for LogHeader {
    fn default() -> LogHeader {
        LogHeader {
            first: BlockPtr::hole(Txg(0), ObjectType::IntentLog, 0),
            claim_txg: Txg(0),
            claimed_through: Txg(0),
            replayed_through: 0,
        }
    }
}

impl LogHeader {
    /// Whether there is no chain at all (all 192 bytes encode as zero).
    pub fn is_empty(&self) -> bool {
        self.first.is_hole()
            && self.claim_txg.0 == 0
            && self.claimed_through.0 == 0
            && self.replayed_through == 0
    }

    pub fn encode(&self) -> [u8; LOG_HEADER_SIZE] {
        let mut out = [0u8; LOG_HEADER_SIZE];
        if !self.is_empty() {
            self.first.encode_into(&mut out[..BLKPTR_SIZE]);
        }
        out[128..136].copy_from_slice(&self.claim_txg.0.to_le_bytes());
        out[136..144].copy_from_slice(&self.claimed_through.0.to_le_bytes());
        out[144..152].copy_from_slice(&self.replayed_through.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<LogHeader, LogFormatError> {
        if bytes.len() != LOG_HEADER_SIZE {
            return Err(LogFormatError(format!(
                "log header of {} bytes",
                bytes.len()
            )));
        }
        if bytes.iter().all(|&byte| byte == 0) {
            return Ok(LogHeader::default());
        }
        if bytes[152..].iter().any(|&byte| byte != 0) {
            return Err(LogFormatError(
                "log header: reserved bytes are not zero".to_string(),
            ));
        }
        let first = if bytes[..BLKPTR_SIZE].iter().all(|&byte| byte == 0) {
            BlockPtr::hole(Txg(0), ObjectType::IntentLog, 0)
        } else {
            let first = BlockPtr::decode(&bytes[..BLKPTR_SIZE])
                .map_err(|error| LogFormatError(format!("log header: first block: {error}")))?;
            check_log_pointer(&first)?;
            first
        };
        Ok(LogHeader {
            first,
            claim_txg: Txg(u64::from_le_bytes(
                bytes[128..136].try_into().expect("8 bytes"),
            )),
            claimed_through: Txg(u64::from_le_bytes(
                bytes[136..144].try_into().expect("8 bytes"),
            )),
            replayed_through: u64::from_le_bytes(bytes[144..152].try_into().expect("8 bytes")),
        })
    }
}

/// A log block pointer must be a plain (not gang, not embedded) uncompressed level-0 block of
/// type `IntentLog` whose size is a multiple of 4 KiB up to 128 KiB.
pub fn check_log_pointer(bp: &BlockPtr) -> Result<(), LogFormatError> {
    if bp.is_hole() {
        return Ok(());
    }
    let size = bp.size_logical as usize;
    if bp.object_type != ObjectType::IntentLog
        || bp.level != 0
        || bp.embedded
        || bp.is_gang()
        || bp.size_physical != bp.size_logical
        || size == 0
        || size > BLOCK_SIZE_MAX
        || !size.is_multiple_of(BLOCK_SIZE_UNIT)
    {
        return Err(LogFormatError(format!("not a log block pointer: {bp}")));
    }
    Ok(())
}
