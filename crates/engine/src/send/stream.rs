//! The replication stream's records: their byte layout, the chained checksum, and a reader
//! that trusts nothing it reads.
//!
//! ```text
//! Record = header (128 bytes) + payload (payload length bytes, no padding):
//!   0    2  record type (RecordType)
//!   2    2  reserved, 0
//!   4    4  payload length
//!   8   88  eleven u64 fields (LE), by type (below); unused ones 0
//!   96  32  chained checksum: BLAKE3 of the previous record's checksum (none for the
//!           first record), the previous record's payload (with FEATURE_PAYLOAD_DIGEST: its
//!           32-byte fletcher4 digest) and this header's first 96 bytes; so it covers every
//!           byte of the stream before it, and the reader checks a header before it reads
//!           the payload that header describes
//!
//! Fields:
//!   BEGIN        magic, version, features, flags, from guid, to guid, creation time,
//!                to txg, from txg; payload: CBOR map {to_name, from_name, properties}
//!   OBJECT       object, type | bonus type << 8 | checksum << 16 | compression << 24 |
//!                zstd level << 32 | copies << 40 | indirect shift << 48 | flags << 56
//!                (bit 0: a SPILL record follows), data block size, generation, max block
//!                id; payload: the bonus buffer
//!   FREEOBJECTS  first object, count
//!   WRITE        object, offset, logical size, compression (0 off, 1 lz4, 2 zstd; with the
//!                zstd level << 8); payload: the block's bytes, compressed as that says
//!                (tarn's self-delimiting format), else logical size bytes
//!   SPILL        object, length; payload: the spill block
//!   FREE         object, offset, length (u64::MAX: to the end of the object)
//!   END          to guid; its checksum is the stream's total
//! ```
//!
//! A reader checks every record's checksum against its own running hash before it hands the
//! record out, so a damaged, truncated, reordered or spliced stream fails at the first record
//! that differs, with the byte offset. Limits are checked before any allocation: a payload
//! longer than its type allows is refused, never read.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::block::blkptr::{ChecksumType, Compression, ObjectType};
use crate::block::checksum;
use crate::object::phys::{
    check_block_settings, compression_code, compression_from_code, DNODE_BONUS_SIZE_MAX,
};
use crate::types::SPA_MAXBLOCKSIZE;

use super::SendError;

/// "TARNSEND" as a little-endian u64: the first field of every BEGIN record.
pub const STREAM_MAGIC: u64 = u64::from_le_bytes(*b"TARNSEND");
/// The stream format version this build writes and reads.
pub const STREAM_VERSION: u64 = 1;
/// Feature: OBJECT records say whether a SPILL record follows, and SPILL records occur.
pub const FEATURE_SPILL: u64 = 1 << 0;
/// Feature: WRITE records may carry blocks compressed as stored (`send -c`).
pub const FEATURE_COMPRESSED: u64 = 1 << 1;
/// Feature: the stream continues an interrupted receive (`send -t`) from the position in
/// `BeginNames::resume_object`/`resume_offset`: records before it are left out.
pub const FEATURE_RESUMING: u64 = 1 << 2;
/// Feature: from this BEGIN's payload on (to the next BEGIN), the chained checksum takes
/// each payload as its 32-byte fletcher4 digest rather than its bytes (see [`Chain`]).
pub const FEATURE_PAYLOAD_DIGEST: u64 = 1 << 3;
/// Every feature this build can apply; a stream with any other is refused.
pub const FEATURES_KNOWN: u64 =
    FEATURE_SPILL | FEATURE_COMPRESSED | FEATURE_RESUMING | FEATURE_PAYLOAD_DIGEST;
/// BEGIN flag: one file system of a tree (`send -R`); `BeginNames::top` is the tree's root.
pub const FLAG_RECURSIVE: u64 = 1 << 0;
/// Every BEGIN flag this build knows; a stream with any other is refused.
pub const FLAGS_KNOWN: u64 = FLAG_RECURSIVE;

pub const HEADER_SIZE: usize = 128;
const FIELDS: usize = 11;
const CHECKSUM_AT: usize = 96;
const BEGIN_PAYLOAD_MAX: usize = 1 << 20;
const OBJECT_FLAG_SPILL: u64 = 1;

/// Record types, as stored in the header's first two bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum RecordType {
    Begin = 1,
    Object = 2,
    FreeObjects = 3,
    Write = 4,
    Spill = 5,
    Free = 6,
    End = 7,
}

impl RecordType {
    fn from_code(code: u16) -> Option<RecordType> {
        Some(match code {
            1 => RecordType::Begin,
            2 => RecordType::Object,
            3 => RecordType::FreeObjects,
            4 => RecordType::Write,
            5 => RecordType::Spill,
            6 => RecordType::Free,
            7 => RecordType::End,
            _ => return None,
        })
    }

    /// The longest payload a record of this type may carry.
    fn payload_max(self) -> usize {
        match self {
            RecordType::Begin => BEGIN_PAYLOAD_MAX,
            RecordType::Object => DNODE_BONUS_SIZE_MAX,
            RecordType::Write => SPA_MAXBLOCKSIZE as usize,
            RecordType::Spill => crate::object::phys::SPILL_SIZE_MAX,
            RecordType::FreeObjects | RecordType::Free | RecordType::End => 0,
        }
    }
}

/// What the BEGIN record's payload holds (CBOR).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeginNames {
    /// The snapshot sent, `POOL/FS@SNAP`.
    pub to_name: String,
    /// The incremental source, `POOL/FS@SNAP` (empty for a full stream).
    #[serde(default)]
    pub from_name: String,
    /// The sent file system's local properties (name, value).
    #[serde(default)]
    pub properties: Vec<(String, String)>,
    /// With `FLAG_RECURSIVE`, the root of the tree sent (`POOL/FS`).
    #[serde(default)]
    pub top: String,
    /// With `FEATURE_RESUMING`, where the stream starts: OBJECT `resume_object` (sent again),
    /// then its records from `resume_offset`, then every later object.
    #[serde(default)]
    pub resume_object: u64,
    #[serde(default)]
    pub resume_offset: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Begin {
    pub version: u64,
    pub features: u64,
    pub flags: u64,
    /// The incremental source's guid; 0 for a full stream.
    pub from_guid: u64,
    pub to_guid: u64,
    pub creation_time: u64,
    pub to_txg: u64,
    pub from_txg: u64,
    pub names: BeginNames,
}

/// An object as the stream describes it: its dnode's settings and bonus buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRecord {
    pub object: u64,
    pub object_type: ObjectType,
    pub bonus_type: ObjectType,
    pub checksum: ChecksumType,
    pub compression: Compression,
    pub copies: u8,
    pub indirect_block_shift: u8,
    pub data_block_size: u32,
    pub generation: u64,
    pub max_blkid: u64,
    pub has_spill: bool,
    pub bonus: Vec<u8>,
}

/// One record, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Begin(Box<Begin>),
    Object(Box<ObjectRecord>),
    FreeObjects {
        first: u64,
        count: u64,
    },
    /// `data` is the block's bytes, compressed with `compression` (then `logical_size` says
    /// how long they are once decompressed), or as they are.
    Write {
        object: u64,
        offset: u64,
        logical_size: u64,
        compression: Compression,
        data: Vec<u8>,
    },
    Spill {
        object: u64,
        data: Vec<u8>,
    },
    Free {
        object: u64,
        offset: u64,
        length: u64,
    },
    End {
        to_guid: u64,
    },
}

impl Record {
    pub fn record_type(&self) -> RecordType {
        match self {
            Record::Begin(_) => RecordType::Begin,
            Record::Object(_) => RecordType::Object,
            Record::FreeObjects { .. } => RecordType::FreeObjects,
            Record::Write { .. } => RecordType::Write,
            Record::Spill { .. } => RecordType::Spill,
            Record::Free { .. } => RecordType::Free,
            Record::End { .. } => RecordType::End,
        }
    }

    /// The header fields and the payload of this record.
    fn encode(&self) -> ([u64; FIELDS], std::borrow::Cow<'_, [u8]>) {
        let mut fields = [0u64; FIELDS];
        let payload: std::borrow::Cow<'_, [u8]> = match self {
            Record::Begin(begin) => {
                fields[..9].copy_from_slice(&[
                    STREAM_MAGIC,
                    begin.version,
                    begin.features,
                    begin.flags,
                    begin.from_guid,
                    begin.to_guid,
                    begin.creation_time,
                    begin.to_txg,
                    begin.from_txg,
                ]);
                let mut payload = Vec::new();
                ciborium::into_writer(&begin.names, &mut payload).expect("names serialise");
                payload.into()
            }
            Record::Object(object) => {
                let (compression, level) = compression_code(object.compression);
                let flags = if object.has_spill {
                    OBJECT_FLAG_SPILL
                } else {
                    0
                };
                fields[..5].copy_from_slice(&[
                    object.object,
                    u64::from(object.object_type as u8)
                        | u64::from(object.bonus_type as u8) << 8
                        | u64::from(object.checksum as u8) << 16
                        | u64::from(compression) << 24
                        | u64::from(level) << 32
                        | u64::from(object.copies) << 40
                        | u64::from(object.indirect_block_shift) << 48
                        | flags << 56,
                    u64::from(object.data_block_size),
                    object.generation,
                    object.max_blkid,
                ]);
                object.bonus.as_slice().into()
            }
            Record::FreeObjects { first, count } => {
                fields[..2].copy_from_slice(&[*first, *count]);
                (&[][..]).into()
            }
            Record::Write {
                object,
                offset,
                logical_size,
                compression,
                data,
            } => {
                let (code, level) = compression_code(*compression);
                fields[..4].copy_from_slice(&[
                    *object,
                    *offset,
                    *logical_size,
                    u64::from(code) | u64::from(level) << 8,
                ]);
                data.as_slice().into()
            }
            Record::Spill { object, data } => {
                fields[..2].copy_from_slice(&[*object, data.len() as u64]);
                data.as_slice().into()
            }
            Record::Free {
                object,
                offset,
                length,
            } => {
                fields[..3].copy_from_slice(&[*object, *offset, *length]);
                (&[][..]).into()
            }
            Record::End { to_guid } => {
                fields[0] = *to_guid;
                (&[][..]).into()
            }
        };
        (fields, payload)
    }

    /// Build a record of `kind` from its header fields and payload (both untrusted).
    fn decode(kind: RecordType, fields: [u64; FIELDS], payload: Vec<u8>) -> Result<Record, String> {
        let byte = |word: u64, shift: u32| (word >> shift) as u8;
        Ok(match kind {
            RecordType::Begin => {
                if fields[0] != STREAM_MAGIC {
                    return Err(format!("not a tarn stream (magic {:#x})", fields[0]));
                }
                let names: BeginNames = ciborium::from_reader(payload.as_slice())
                    .map_err(|error| format!("BEGIN names: {error}"))?;
                Record::Begin(Box::new(Begin {
                    version: fields[1],
                    features: fields[2],
                    flags: fields[3],
                    from_guid: fields[4],
                    to_guid: fields[5],
                    creation_time: fields[6],
                    to_txg: fields[7],
                    from_txg: fields[8],
                    names,
                }))
            }
            RecordType::Object => {
                let packed = fields[1];
                let object_type =
                    ObjectType::try_from(byte(packed, 0)).map_err(|e| e.to_string())?;
                let bonus_type =
                    ObjectType::try_from(byte(packed, 8)).map_err(|e| e.to_string())?;
                let checksum =
                    ChecksumType::try_from(byte(packed, 16)).map_err(|e| e.to_string())?;
                let compression = compression_from_code(byte(packed, 24), byte(packed, 32))
                    .map_err(|e| e.to_string())?;
                let copies = byte(packed, 40);
                let indirect_block_shift = byte(packed, 48);
                let flags = u64::from(byte(packed, 56));
                let data_block_size = u32::try_from(fields[2]).unwrap_or(0);
                if object_type == ObjectType::None
                    || !(1..=3).contains(&copies)
                    || check_block_settings(data_block_size, indirect_block_shift).is_err()
                    || flags & !OBJECT_FLAG_SPILL != 0
                    || fields[0] == 0
                {
                    return Err(format!(
                        "OBJECT {}: type {object_type}, copies {copies}, indirect shift \
                         {indirect_block_shift}, block size {}, flags {flags:#x}",
                        fields[0], fields[2]
                    ));
                }
                Record::Object(Box::new(ObjectRecord {
                    object: fields[0],
                    object_type,
                    bonus_type,
                    checksum,
                    compression,
                    copies,
                    indirect_block_shift,
                    data_block_size,
                    generation: fields[3],
                    max_blkid: fields[4],
                    has_spill: flags & OBJECT_FLAG_SPILL != 0,
                    bonus: payload,
                }))
            }
            RecordType::FreeObjects => Record::FreeObjects {
                first: fields[0],
                count: fields[1],
            },
            RecordType::Write => {
                let compression = compression_from_code(byte(fields[3], 0), byte(fields[3], 8))
                    .map_err(|e| e.to_string())?;
                let logical_size = fields[2];
                let plain = compression == Compression::Off;
                if logical_size == 0
                    || logical_size > SPA_MAXBLOCKSIZE
                    || (plain && payload.len() as u64 != logical_size)
                    || fields[3] >> 16 != 0
                    || fields[1].checked_add(logical_size).is_none()
                {
                    return Err(format!(
                        "WRITE of object {} at {}: logical size {logical_size}, {} bytes, \
                         compression word {:#x}",
                        fields[0],
                        fields[1],
                        payload.len(),
                        fields[3]
                    ));
                }
                Record::Write {
                    object: fields[0],
                    offset: fields[1],
                    logical_size,
                    compression,
                    data: payload,
                }
            }
            RecordType::Spill => {
                if fields[1] != payload.len() as u64 {
                    return Err(format!(
                        "SPILL of object {}: length {} with {} bytes",
                        fields[0],
                        fields[1],
                        payload.len()
                    ));
                }
                Record::Spill {
                    object: fields[0],
                    data: payload,
                }
            }
            RecordType::Free => {
                // A length of u64::MAX means "to the end"; any other must end within u64.
                if fields[2] == 0
                    || (fields[2] != u64::MAX && fields[1].checked_add(fields[2]).is_none())
                {
                    return Err(format!(
                        "FREE of object {} at offset {}: length {}",
                        fields[0], fields[1], fields[2]
                    ));
                }
                Record::Free {
                    object: fields[0],
                    offset: fields[1],
                    length: fields[2],
                }
            }
            RecordType::End => Record::End { to_guid: fields[0] },
        })
    }
}

/// The chained checksum's input since the last checksum: that checksum (none before the first
/// record) and the payload after it, to which the next header's first [`CHECKSUM_AT`] bytes
/// are added to give the next checksum. A chain, not one hash of the whole stream: each
/// checksum hashes a small input.
///
/// With [`FEATURE_PAYLOAD_DIGEST`] (set by a BEGIN's features, from that BEGIN's own payload
/// to the next BEGIN) a payload enters the input as its fletcher4 digest (32 bytes, as
/// [`checksum::compute`] gives a block's), not as its bytes: BLAKE3 then hashes 160 bytes a
/// record whatever its size, and the payload costs one fletcher4 pass (about 0.3 µs for
/// 4 KiB with AVX2, against about 3.5 µs of BLAKE3 for 8 KiB). Damage to a payload changes
/// its digest (as surely as OpenZFS's fletcher4 stream checksum catches it) and so breaks
/// the chain at the next header; headers, lengths and order stay under BLAKE3.
///
/// The input is kept in one buffer and hashed in one call rather than fed to a
/// `blake3::Hasher` piece by piece: BLAKE3 hashes its 1 KiB chunks several at a time only in
/// power-of-two groups at aligned positions of the input, and a payload that starts 32 bytes
/// in went mostly one chunk at a time (an 8 KiB payload: about 7 µs, against 3.5 µs hashed
/// whole; the copy into the buffer costs a few hundred nanoseconds). The value is the same.
#[derive(Default)]
struct Chain {
    input: Vec<u8>,
    /// Payloads enter as their digest ([`FEATURE_PAYLOAD_DIGEST`] of the last BEGIN).
    digest: bool,
    /// The digest of the last payload, if it entered so.
    last_digest: Option<[u8; 32]>,
}

impl Chain {
    /// The checksum of the header whose first [`CHECKSUM_AT`] bytes are `header`; it starts
    /// the input for the next one.
    fn checksum(&mut self, header: &[u8]) -> [u8; 32] {
        self.input.extend_from_slice(header);
        let checksum = *blake3::hash(&self.input).as_bytes();
        self.input.clear();
        self.input.extend_from_slice(&checksum);
        checksum
    }

    /// A BEGIN record's header (checked) declares `features`: they say how its payload and
    /// every later one up to the next BEGIN enter the chain.
    fn begin(&mut self, features: u64) {
        self.digest = features & FEATURE_PAYLOAD_DIGEST != 0;
    }

    /// The payload of the record whose checksum was the last one.
    fn payload(&mut self, payload: &[u8]) {
        if self.digest {
            let digest = checksum::compute(ChecksumType::Fletcher4, payload);
            self.input.extend_from_slice(&digest);
            self.last_digest = Some(digest);
        } else {
            self.input.extend_from_slice(payload);
            self.last_digest = None;
        }
    }
}

/// Writes records with their chained checksum.
pub struct StreamWriter<W: Write> {
    out: W,
    chain: Chain,
    bytes: u64,
}

impl<W: Write> StreamWriter<W> {
    pub fn new(out: W) -> StreamWriter<W> {
        StreamWriter {
            out,
            chain: Chain::default(),
            bytes: 0,
        }
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn write(&mut self, record: &Record) -> Result<(), SendError> {
        let (fields, payload) = record.encode();
        self.write_parts(record.record_type(), fields, &payload)
    }

    /// A WRITE record of `data` without copying it into a [`Record`]: the logical bytes of a
    /// block, or its bytes compressed as `compression` says.
    pub fn write_data(
        &mut self,
        object: u64,
        offset: u64,
        logical_size: u64,
        compression: Compression,
        data: &[u8],
    ) -> Result<(), SendError> {
        let (code, level) = compression_code(compression);
        let mut fields = [0u64; FIELDS];
        fields[..4].copy_from_slice(&[
            object,
            offset,
            logical_size,
            u64::from(code) | u64::from(level) << 8,
        ]);
        self.write_parts(RecordType::Write, fields, data)
    }

    fn write_parts(
        &mut self,
        kind: RecordType,
        fields: [u64; FIELDS],
        payload: &[u8],
    ) -> Result<(), SendError> {
        assert!(
            payload.len() <= kind.payload_max(),
            "payload of {} bytes for {kind:?}",
            payload.len()
        );
        let mut header = [0u8; HEADER_SIZE];
        header[0..2].copy_from_slice(&(kind as u16).to_le_bytes());
        header[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        for (index, field) in fields.iter().enumerate() {
            header[8 + index * 8..16 + index * 8].copy_from_slice(&field.to_le_bytes());
        }
        let checksum = self.chain.checksum(&header[..CHECKSUM_AT]);
        header[CHECKSUM_AT..].copy_from_slice(&checksum);
        if kind == RecordType::Begin {
            self.chain.begin(fields[2]);
        }
        self.chain.payload(payload);
        self.out.write_all(&header).map_err(SendError::Output)?;
        self.out.write_all(payload).map_err(SendError::Output)?;
        self.bytes += (HEADER_SIZE + payload.len()) as u64;
        Ok(())
    }

    pub fn flush(&mut self) -> Result<(), SendError> {
        self.out.flush().map_err(SendError::Output)
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Reads and verifies records.
pub struct StreamReader<R: Read> {
    input: R,
    chain: Chain,
    bytes: u64,
    records: u64,
}

impl<R: Read> StreamReader<R> {
    pub fn new(input: R) -> StreamReader<R> {
        StreamReader {
            input,
            chain: Chain::default(),
            bytes: 0,
            records: 0,
        }
    }

    /// Bytes read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The fletcher4 checksum of the last record's payload, if the stream's chain took it
    /// (`FEATURE_PAYLOAD_DIGEST`): that record's checksum does not cover it yet (the next
    /// header's does), but it is exactly the bytes handed out, so a receive may store it as
    /// the block's checksum. It is checked: a damaged payload breaks the chain at the next
    /// header, and the receive fails then.
    pub fn payload_fletcher4(&self) -> Option<[u8; 32]> {
        self.chain.last_digest
    }

    /// The next record, checked; [`SendError::Truncated`] at the end of the input.
    pub fn next_record(&mut self) -> Result<Record, SendError> {
        let at = self.bytes;
        let bad = |what: String| SendError::BadStream { at, what };
        let mut header = [0u8; HEADER_SIZE];
        read_full(&mut self.input, &mut header).map_err(|error| match error {
            ReadFailure::Eof => SendError::Truncated { at },
            ReadFailure::Io(error) => SendError::Input(error),
        })?;
        let code = u16::from_le_bytes([header[0], header[1]]);
        let kind = RecordType::from_code(code)
            .ok_or_else(|| bad(format!("record type {code} is unknown to this version")))?;
        if header[2..4] != [0, 0] {
            return Err(bad("reserved header bytes are not zero".into()));
        }
        let length = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
        if length > kind.payload_max() {
            return Err(bad(format!(
                "{kind:?} record with a payload of {length} bytes (at most {})",
                kind.payload_max()
            )));
        }
        if header[CHECKSUM_AT..] != self.chain.checksum(&header[..CHECKSUM_AT]) {
            return Err(bad(format!(
                "checksum mismatch in record {} ({kind:?}): the stream is damaged, \
                 reordered or truncated",
                self.records
            )));
        }
        let mut fields = [0u64; FIELDS];
        for (index, field) in fields.iter_mut().enumerate() {
            *field = u64::from_le_bytes(
                header[8 + index * 8..16 + index * 8]
                    .try_into()
                    .expect("8 bytes"),
            );
        }
        if kind == RecordType::Begin {
            // The header is checked: its features say how the payloads enter the chain.
            self.chain.begin(fields[2]);
        }
        // Read into the payload's spare capacity (`read_to_end` through `take` neither
        // zeroes it first nor grows it: the limit ends the read at exactly `length`).
        let mut payload = Vec::with_capacity(length);
        let read = (&mut self.input)
            .take(length as u64)
            .read_to_end(&mut payload)
            .map_err(SendError::Input)?;
        if read < length {
            return Err(SendError::Truncated {
                at: at + HEADER_SIZE as u64,
            });
        }
        self.chain.payload(&payload);
        self.bytes += (HEADER_SIZE + length) as u64;
        self.records += 1;
        Record::decode(kind, fields, payload).map_err(bad)
    }
}

enum ReadFailure {
    Eof,
    Io(std::io::Error),
}

/// Fill `buf` from `input`; an end of input part-way (or before the first byte) is `Eof`.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> Result<(), ReadFailure> {
    let mut done = 0;
    while done < buf.len() {
        match input.read(&mut buf[done..]) {
            Ok(0) => return Err(ReadFailure::Eof),
            Ok(read) => done += read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(ReadFailure::Io(error)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The chain hashes one buffer; its checksums are what feeding BLAKE3 the previous
        /// checksum, the payload (or, with the digest feature, its fletcher4 digest) and the
        /// next header piece by piece gives (the format's definition), for payloads of every
        /// size around BLAKE3's 1 KiB chunks.
        #[test]
        fn chain_checksums_equal_the_piecewise_definition(
            payloads in proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 0..9000), 1..5),
            header in proptest::collection::vec(any::<u8>(), CHECKSUM_AT),
            digest in any::<bool>(),
        ) {
            let mut chain = Chain::default();
            chain.begin(if digest { FEATURE_PAYLOAD_DIGEST } else { 0 });
            // The previous record's checksum and payload.
            let mut previous: Option<([u8; 32], &Vec<u8>)> = None;
            for payload in &payloads {
                let mut hasher = blake3::Hasher::new();
                if let Some((checksum, payload)) = previous {
                    hasher.update(&checksum);
                    if digest {
                        hasher.update(&checksum::compute(ChecksumType::Fletcher4, payload));
                    } else {
                        hasher.update(payload);
                    }
                }
                hasher.update(&header);
                let checksum = chain.checksum(&header);
                prop_assert_eq!(checksum, *hasher.finalize().as_bytes());
                chain.payload(payload);
                previous = Some((checksum, payload));
            }
        }
    }

    /// Every kind of record, in a stream whose BEGIN has `features`.
    fn sample_with(features: u64) -> Vec<Record> {
        let mut records = sample();
        if let Record::Begin(begin) = &mut records[0] {
            begin.features = features;
        }
        records
    }

    /// The sample in both ways of chaining payloads.
    fn samples() -> [Vec<Record>; 2] {
        [
            sample_with(FEATURE_SPILL),
            sample_with(FEATURE_SPILL | FEATURE_PAYLOAD_DIGEST),
        ]
    }

    fn sample() -> Vec<Record> {
        vec![
            Record::Begin(Box::new(Begin {
                version: STREAM_VERSION,
                features: FEATURE_SPILL,
                flags: 0,
                from_guid: 0,
                to_guid: 42,
                creation_time: 1_700_000_000,
                to_txg: 90,
                from_txg: 0,
                names: BeginNames {
                    to_name: "tank/fs@a".into(),
                    from_name: String::new(),
                    properties: vec![("compression".into(), "zstd".into())],
                    top: String::new(),
                    resume_object: 9,
                    resume_offset: 1 << 17,
                },
            })),
            Record::Object(Box::new(ObjectRecord {
                object: 7,
                object_type: ObjectType::PlainFile,
                bonus_type: ObjectType::None,
                checksum: ChecksumType::Blake3,
                compression: Compression::Zstd { level: 3 },
                copies: 2,
                indirect_block_shift: 17,
                data_block_size: 8192,
                generation: 5,
                max_blkid: 3,
                has_spill: true,
                bonus: vec![9; 200],
            })),
            Record::Spill {
                object: 7,
                data: vec![1; 512],
            },
            Record::Free {
                object: 7,
                offset: 32768,
                length: u64::MAX,
            },
            Record::Write {
                object: 7,
                offset: 8192,
                logical_size: 8192,
                compression: Compression::Off,
                data: vec![3; 8192],
            },
            Record::FreeObjects {
                first: 8,
                count: 100,
            },
            Record::End { to_guid: 42 },
        ]
    }

    fn encode(records: &[Record]) -> Vec<u8> {
        let mut writer = StreamWriter::new(Vec::new());
        for record in records {
            writer.write(record).unwrap();
        }
        writer.into_inner()
    }

    fn decode(bytes: &[u8]) -> Result<Vec<Record>, SendError> {
        let mut reader = StreamReader::new(bytes);
        let mut records = Vec::new();
        loop {
            let record = reader.next_record()?;
            let end = matches!(record, Record::End { .. });
            records.push(record);
            if end {
                return Ok(records);
            }
        }
    }

    #[test]
    fn records_round_trip() {
        for records in samples() {
            assert_eq!(decode(&encode(&records)).unwrap(), records);
        }
    }

    /// The digest feature changes what the chain hashes from BEGIN's payload on (and only
    /// that): the BEGIN header's checksum is the same, every later one differs. A stream
    /// may switch at each BEGIN: substreams with and without it back to back read.
    #[test]
    fn the_digest_feature_takes_effect_at_its_begin() {
        let [whole, digest] = samples().map(|records| encode(&records));
        assert_eq!(whole.len(), digest.len());
        let checksums = |bytes: &[u8]| {
            let mut at = 0;
            let mut checksums = Vec::new();
            while at < bytes.len() {
                checksums.push(bytes[at + CHECKSUM_AT..at + HEADER_SIZE].to_vec());
                let length = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
                at += HEADER_SIZE + length as usize;
            }
            checksums
        };
        let (whole_sums, digest_sums) = (checksums(&whole), checksums(&digest));
        assert_eq!(whole_sums.len(), sample().len());
        // BEGIN's header differs in its features field, so its checksum does too; from the
        // second record on, the chains differ also because the payloads entered differently.
        assert!(whole_sums
            .iter()
            .zip(&digest_sums)
            .all(|(whole, digest)| whole != digest));
        // (BEGIN declares the digest, but the payloads after its own are hashed whole: the
        // first header to cover one, record 2's, is refused.)
        let mut writer = StreamWriter::new(Vec::new());
        let records = &samples()[1];
        writer.write(&records[0]).unwrap();
        writer.chain.digest = false;
        for record in &records[1..] {
            writer.write(record).unwrap();
        }
        let error = decode(&writer.into_inner()).unwrap_err().to_string();
        assert!(error.contains("checksum mismatch in record 2"), "{error}");
        // Substreams of both kinds, back to back.
        let mut both = encode(&[samples()[1].clone(), samples()[0].clone()].concat());
        let records = decode_all(&both).unwrap();
        assert_eq!(records.len(), 2 * sample().len());
        // And damage in the second substream's payloads is still caught.
        let spill = both.len() - digest.len() / 2;
        both[spill] ^= 1;
        assert!(decode_all(&both).is_err());
    }

    /// Records up to the end of input (several substreams).
    fn decode_all(bytes: &[u8]) -> Result<Vec<Record>, SendError> {
        let mut reader = StreamReader::new(bytes);
        let mut records = Vec::new();
        while reader.bytes() < bytes.len() as u64 {
            records.push(reader.next_record()?);
        }
        Ok(records)
    }

    #[test]
    fn truncated_reordered_and_spliced_streams_are_refused() {
        for records in samples() {
            refused_when_truncated_or_reordered(&records);
        }
    }

    /// A damaged payload byte is caught at the next record's header, in both ways of chaining
    /// payloads, at that header's offset.
    #[test]
    fn a_damaged_payload_is_caught_at_the_next_header() {
        for records in samples() {
            let bytes = encode(&records);
            let at = |count: usize| encode(&records[..count]).len();
            // Every byte of the WRITE record's payload (record 4).
            for offset in (at(4) + HEADER_SIZE..at(5)).step_by(97) {
                let mut damaged = bytes.clone();
                damaged[offset] ^= 0x40;
                match decode(&damaged) {
                    Err(SendError::BadStream { at: where_, what }) => {
                        assert_eq!(where_, at(5) as u64);
                        assert!(what.contains("checksum"), "{what}");
                    }
                    other => panic!("payload byte {offset}: {other:?}"),
                }
            }
        }
    }

    fn refused_when_truncated_or_reordered(records: &[Record]) {
        let bytes = encode(records);
        for cut in [1, HEADER_SIZE, bytes.len() / 2, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // A cut inside a payload is a truncation at the payload (not a clean end of input
        // between records), however little of the payload came.
        for short in [0, 1] {
            let cut = HEADER_SIZE + short;
            match StreamReader::new(&bytes[..cut]).next_record() {
                Err(SendError::Truncated { at }) => assert_eq!(at, HEADER_SIZE as u64),
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        // Two records' bytes swapped: each still has a valid layout, but the running
        // checksum breaks.
        let at = |count: usize| encode(&records[..count]).len();
        let mut swapped = bytes[..at(3)].to_vec();
        swapped.extend_from_slice(&bytes[at(4)..at(5)]);
        swapped.extend_from_slice(&bytes[at(3)..at(4)]);
        swapped.extend_from_slice(&bytes[at(5)..]);
        assert_eq!(swapped.len(), bytes.len());
        let error = decode(&swapped).unwrap_err().to_string();
        assert!(error.contains("checksum"), "{error}");
        // A future version's record type.
        let mut future = bytes.clone();
        let second = encode(&records[..1]).len();
        future[second] = 99;
        let error = decode(&future).unwrap_err().to_string();
        assert!(error.contains("unknown"), "{error}");
    }

    #[test]
    fn an_oversized_payload_is_refused_before_it_is_read() {
        let mut bytes = encode(&sample()[..1]);
        let mut header = [0u8; HEADER_SIZE];
        header[0..2].copy_from_slice(&(RecordType::Object as u16).to_le_bytes());
        header[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        bytes.extend_from_slice(&header);
        let error = decode(&bytes).unwrap_err().to_string();
        assert!(error.contains("payload"), "{error}");
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn any_flipped_byte_is_caught(at in 0usize..10_000, bit in 0u8..8, digest in any::<bool>()) {
            let bytes = encode(&samples()[usize::from(digest)]);
            let at = at % bytes.len();
            let mut damaged = bytes.clone();
            damaged[at] ^= 1 << bit;
            // The last record's payload is empty, so every byte is under some checksum, except
            // the payload bytes after the last checksum (none here).
            prop_assert!(decode(&damaged).is_err());
        }

        #[test]
        fn header_fields_decode_without_panicking(fields in proptest::array::uniform11(any::<u64>()), code in 1u16..=7, payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let kind = RecordType::from_code(code).unwrap();
            let _ = Record::decode(kind, fields, payload);
        }
    }
}
