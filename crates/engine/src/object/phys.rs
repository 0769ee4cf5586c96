//! On-disk structures of the object layer: the dnode and the object-set header.
//!
//! ```text
//! Dnode (512 bytes, little-endian):
//!   0      1   object type (ObjectType; 0 = free slot)
//!   1      1   indirect block shift (indirect blocks are 1 << shift bytes)
//!   2      1   levels (1 = the block pointer addresses data block 0 directly)
//!   3      1   number of block pointers (always 1 in this format version)
//!   4      1   bonus type (ObjectType of the bonus contents, 0 = none)
//!   5      1   checksum type for new blocks (ChecksumType)
//!   6      1   compression for new blocks (0 off, 1 lz4, 2 zstd)
//!   7      1   zstd level for new blocks
//!   8      4   data block size in bytes
//!   12     2   bonus length in bytes (<= 320; <= 192 with a spill block)
//!   14     1   the dataset copies setting (1..=3); see object::write_copies
//!   15     1   flags (bit 0: a spill block pointer ends the dnode; other bits 0)
//!   16     8   max block id (highest data block ever written, 0 when empty)
//!   24     8   bytes allocated on disk under this dnode (all copies, all levels)
//!   32     8   generation (txg in which this object number was last allocated)
//!   40    24   reserved (0)
//!   64   128   block pointer of the tree root
//!   192  320   bonus buffer, without a spill block
//!   with a spill block (flag bit 0), the bonus buffer is shorter:
//!   192  192   bonus buffer
//!   384  128   block pointer of the spill block (type Spill, level 0, never a hole): one
//!              block of 512 bytes to 128 KiB that holds what overflows the bonus buffer
//!              (OpenZFS's DNODE_FLAG_SPILL_BLKPTR; its contents are the layer above's)
//!
//! Object-set header (1024 bytes, the root block of every object set):
//!   0    512   meta-dnode (object 0: its data blocks are the arrays of dnodes)
//!   512    8   object-set type (1 = MOS, 2 = file system)
//!   520    8   flags (reserved, 0)
//!   528  192   intent-log (ZIL) header (log_header.rs; zeros: no log)
//!   720  304   reserved (0)
//! ```

use super::log_header::LogHeader;
use crate::block::blkptr::{
    BlockError, BlockPtr, ChecksumType, Compression, ObjectType, BLKPTR_SIZE,
};
use crate::types::Txg;

pub const DNODE_SIZE: usize = 512;
pub const DNODE_BONUS_SIZE_MAX: usize = 320;
pub const OBJSET_HEADER_SIZE: usize = 1024;
const DNODE_BLKPTR_OFFSET: usize = 64;
const DNODE_BONUS_OFFSET: usize = DNODE_BLKPTR_OFFSET + BLKPTR_SIZE;
const _: () = assert!(DNODE_BONUS_OFFSET + DNODE_BONUS_SIZE_MAX == DNODE_SIZE);
/// Where the spill block pointer sits when the dnode has one: the last bytes of the dnode.
const DNODE_SPILL_OFFSET: usize = DNODE_SIZE - BLKPTR_SIZE;
/// The bonus buffer's size limit while the dnode has a spill block.
pub const DNODE_BONUS_SIZE_MAX_WITH_SPILL: usize = DNODE_SPILL_OFFSET - DNODE_BONUS_OFFSET;
const _: () = assert!(DNODE_BONUS_SIZE_MAX_WITH_SPILL == 192);
/// Dnode flag: a spill block pointer ends the dnode.
const DNODE_FLAG_SPILL: u8 = 1 << 0;
/// Smallest and largest spill block (OpenZFS caps spill blocks at SPA_OLD_MAXBLOCKSIZE).
pub const SPILL_SIZE_MIN: usize = 512;
pub const SPILL_SIZE_MAX: usize = 128 * 1024;
const _: () = assert!(DNODE_SIZE + 8 + 8 + 192 + 304 == OBJSET_HEADER_SIZE);
/// Bytes of the object-set header reserved for the intent-log (ZIL) header.
pub const OBJSET_ZIL_HEADER: std::ops::Range<usize> = 528..720;
/// The object-set header's flags (bytes 520..528).
const OBJSET_FLAGS: std::ops::Range<usize> = 520..528;
/// Object-set flag: the dnodes of the owner-usage objects (user, group, project; see
/// `owners.rs`) follow the header's first kilobyte, making it
/// [`OBJSET_HEADER_SIZE_WITH_ACCOUNTING`] bytes (feature `com.tarn:user_accounting`).
pub const OBJSET_FLAG_OWNER_ACCOUNTING: u64 = 1 << 0;
/// Bytes of an object-set header that carries the three owner-usage dnodes.
pub const OBJSET_HEADER_SIZE_WITH_ACCOUNTING: usize = OBJSET_HEADER_SIZE + 3 * DNODE_SIZE;

/// Deepest tree a dnode may describe; recursion over untrusted block pointers checks it.
pub const LEVELS_MAX: u8 = 10;

/// Smallest and largest indirect block shift (indirect blocks of 1 KiB to 128 KiB).
pub const INDIRECT_BLOCK_SHIFT_MIN: u8 = 10;
pub const INDIRECT_BLOCK_SHIFT_MAX: u8 = 17;

/// Whether an object may have data blocks of `data_block_size` bytes (512 bytes to
/// `SPA_MAXBLOCKSIZE`, in multiples of 512) and indirect blocks of `1 << indirect_block_shift`
/// bytes: the one rule a dnode read from disk, a new object and a stream's OBJECT record are
/// held to. Says what is wrong otherwise.
pub fn check_block_settings(data_block_size: u32, indirect_block_shift: u8) -> Result<(), String> {
    if !(INDIRECT_BLOCK_SHIFT_MIN..=INDIRECT_BLOCK_SHIFT_MAX).contains(&indirect_block_shift) {
        return Err(format!("indirect block shift {indirect_block_shift}"));
    }
    if data_block_size < 512
        || u64::from(data_block_size) > crate::types::SPA_MAXBLOCKSIZE
        || !data_block_size.is_multiple_of(512)
    {
        return Err(format!("data block size {data_block_size}"));
    }
    Ok(())
}

/// Number of block pointers in an indirect block of `1 << indirect_block_shift` bytes.
pub fn fanout(indirect_block_shift: u8) -> u64 {
    1u64.checked_shl(u32::from(indirect_block_shift))
        .unwrap_or(0)
        / BLKPTR_SIZE as u64
}

/// Number of data blocks a tree of `levels` levels with `fanout` pointers per indirect block
/// can address (saturating at `u64::MAX`).
pub fn capacity_blocks(fanout: u64, levels: u8) -> u64 {
    let mut capacity: u64 = 1;
    for _ in 1..levels {
        capacity = capacity.saturating_mul(fanout);
    }
    capacity
}

/// How many bytes of data an object with these settings can address: the data blocks of a
/// tree of [`LEVELS_MAX`] levels (saturating at `u64::MAX`). The sync grows a tree level by
/// level up to `LEVELS_MAX` and fails past it, so every change made in open context must stay
/// below this: writes check it ([`check_addressable`]), frees clamp to it, and a receive
/// checks each record against it when the record arrives.
pub fn addressable_bytes(data_block_size: u32, indirect_block_shift: u8) -> u64 {
    capacity_blocks(fanout(indirect_block_shift), LEVELS_MAX)
        .saturating_mul(u64::from(data_block_size))
}

/// Whether `length` bytes at `offset` lie within what an object with these settings can
/// address ([`addressable_bytes`]); says what is wrong otherwise.
pub fn check_addressable(
    data_block_size: u32,
    indirect_block_shift: u8,
    offset: u64,
    length: u64,
) -> Result<(), String> {
    let limit = addressable_bytes(data_block_size, indirect_block_shift);
    match offset.checked_add(length) {
        Some(end) if end <= limit => Ok(()),
        Some(end) => Err(format!(
            "bytes {offset}..{end} are past the {limit} bytes an object of {data_block_size}-byte \
             blocks and {}-byte indirect blocks can address",
            1u64 << indirect_block_shift.min(63)
        )),
        None => Err(format!(
            "{length} bytes at offset {offset} end past the largest offset"
        )),
    }
}

/// The kind of an object set, stored in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjsetKind {
    Mos = 1,
    FileSystem = 2,
}

/// A dnode as stored on disk, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnodePhys {
    pub object_type: ObjectType,
    pub indirect_block_shift: u8,
    pub levels: u8,
    pub bonus_type: ObjectType,
    pub checksum: ChecksumType,
    pub compression: Compression,
    pub data_block_size: u32,
    /// The dataset's `copies` setting at creation; blocks get `object::write_copies` of it.
    pub copies: u8,
    pub max_blkid: u64,
    pub size_allocated: u64,
    pub generation: Txg,
    pub blkptr: BlockPtr,
    pub bonus: Vec<u8>,
    /// The spill block, if the object has one (then `bonus` is at most
    /// [`DNODE_BONUS_SIZE_MAX_WITH_SPILL`] bytes).
    pub spill: Option<BlockPtr>,
}

/// The bonus buffer's size limit for a dnode with or without a spill block.
pub fn bonus_size_max(with_spill: bool) -> usize {
    if with_spill {
        DNODE_BONUS_SIZE_MAX_WITH_SPILL
    } else {
        DNODE_BONUS_SIZE_MAX
    }
}

pub fn compression_code(compression: Compression) -> (u8, u8) {
    match compression {
        Compression::Off => (0, 0),
        Compression::Lz4 => (1, 0),
        Compression::Zstd { level } => (2, level),
    }
}

pub fn compression_from_code(code: u8, level: u8) -> Result<Compression, BlockError> {
    match code {
        0 => Ok(Compression::Off),
        1 => Ok(Compression::Lz4),
        2 => Ok(Compression::Zstd { level }),
        _ => Err(BlockError::corrupt(
            "dnode",
            format!("dnode compression {code}"),
        )),
    }
}

impl DnodePhys {
    /// A free dnode slot.
    pub fn free() -> DnodePhys {
        DnodePhys {
            object_type: ObjectType::None,
            indirect_block_shift: 0,
            levels: 0,
            bonus_type: ObjectType::None,
            checksum: ChecksumType::Fletcher4,
            compression: Compression::Off,
            data_block_size: 0,
            copies: 1,
            max_blkid: 0,
            size_allocated: 0,
            generation: Txg(0),
            blkptr: BlockPtr::hole(Txg(0), ObjectType::None, 0),
            bonus: Vec::new(),
            spill: None,
        }
    }

    pub fn is_free(&self) -> bool {
        self.object_type == ObjectType::None
    }

    /// Number of block pointers in one indirect block.
    pub fn fanout(&self) -> u64 {
        fanout(self.indirect_block_shift)
    }

    /// Number of data blocks a tree of `levels` levels can address.
    pub fn capacity_blocks(&self, levels: u8) -> u64 {
        capacity_blocks(self.fanout(), levels)
    }

    pub fn encode(&self) -> [u8; DNODE_SIZE] {
        let mut out = [0u8; DNODE_SIZE];
        out[0] = self.object_type as u8;
        out[1] = self.indirect_block_shift;
        out[2] = self.levels;
        out[3] = if self.is_free() { 0 } else { 1 };
        out[4] = self.bonus_type as u8;
        out[5] = self.checksum as u8;
        let (compression, level) = compression_code(self.compression);
        out[6] = compression;
        out[7] = level;
        out[8..12].copy_from_slice(&self.data_block_size.to_le_bytes());
        assert!(
            self.bonus.len() <= bonus_size_max(self.spill.is_some()),
            "bonus too large"
        );
        out[12..14].copy_from_slice(&(self.bonus.len() as u16).to_le_bytes());
        out[14] = self.copies;
        if let Some(spill) = &self.spill {
            out[15] = DNODE_FLAG_SPILL;
            spill.encode_into(&mut out[DNODE_SPILL_OFFSET..]);
        }
        out[16..24].copy_from_slice(&self.max_blkid.to_le_bytes());
        out[24..32].copy_from_slice(&self.size_allocated.to_le_bytes());
        out[32..40].copy_from_slice(&self.generation.0.to_le_bytes());
        self.blkptr
            .encode_into(&mut out[DNODE_BLKPTR_OFFSET..DNODE_BONUS_OFFSET]);
        out[DNODE_BONUS_OFFSET..DNODE_BONUS_OFFSET + self.bonus.len()].copy_from_slice(&self.bonus);
        out
    }

    /// Decode a dnode from untrusted bytes. A slot of all zeros is a free dnode.
    pub fn decode(bytes: &[u8]) -> Result<DnodePhys, BlockError> {
        if bytes.len() < DNODE_SIZE {
            return Err(BlockError::corrupt(
                "dnode",
                format!("dnode of {} bytes", bytes.len()),
            ));
        }
        let corrupt = |what: String| BlockError::corrupt("dnode", what);
        let object_type = ObjectType::try_from(bytes[0])?;
        if object_type == ObjectType::None {
            return Ok(DnodePhys::free());
        }
        let flags = bytes[15];
        if bytes[3] != 1
            || flags & !DNODE_FLAG_SPILL != 0
            || bytes[40..64].iter().any(|&byte| byte != 0)
        {
            return Err(corrupt(
                "dnode: block-pointer count or reserved bytes are wrong".into(),
            ));
        }
        let indirect_block_shift = bytes[1];
        let levels = bytes[2];
        if levels == 0 || levels > LEVELS_MAX {
            return Err(corrupt(format!("dnode levels {levels}")));
        }
        let bonus_type = ObjectType::try_from(bytes[4])?;
        let checksum = ChecksumType::try_from(bytes[5])?;
        let compression = compression_from_code(bytes[6], bytes[7])?;
        let data_block_size = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
        check_block_settings(data_block_size, indirect_block_shift)
            .map_err(|what| corrupt(format!("dnode {what}")))?;
        let has_spill = flags & DNODE_FLAG_SPILL != 0;
        let bonus_len = u16::from_le_bytes(bytes[12..14].try_into().unwrap()) as usize;
        if bonus_len > bonus_size_max(has_spill) {
            return Err(corrupt(format!(
                "dnode bonus length {bonus_len} (spill block: {has_spill})"
            )));
        }
        let spill = if has_spill {
            let spill = BlockPtr::decode(&bytes[DNODE_SPILL_OFFSET..DNODE_SIZE])?;
            if spill.is_hole()
                || spill.object_type != ObjectType::Spill
                || spill.level != 0
                || !(SPILL_SIZE_MIN..=SPILL_SIZE_MAX).contains(&(spill.size_logical as usize))
            {
                return Err(corrupt(format!("dnode spill block pointer {spill}")));
            }
            Some(spill)
        } else {
            None
        };
        let copies = bytes[14];
        if !(1..=3).contains(&copies) {
            return Err(corrupt(format!("dnode copies {copies}")));
        }
        let blkptr = BlockPtr::decode(&bytes[DNODE_BLKPTR_OFFSET..DNODE_BONUS_OFFSET])?;
        Ok(DnodePhys {
            object_type,
            indirect_block_shift,
            levels,
            bonus_type,
            checksum,
            compression,
            data_block_size,
            copies,
            max_blkid: u64::from_le_bytes(bytes[16..24].try_into().unwrap()),
            size_allocated: u64::from_le_bytes(bytes[24..32].try_into().unwrap()),
            generation: Txg(u64::from_le_bytes(bytes[32..40].try_into().unwrap())),
            blkptr,
            bonus: bytes[DNODE_BONUS_OFFSET..DNODE_BONUS_OFFSET + bonus_len].to_vec(),
            spill,
        })
    }
}

/// The object-set header, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjsetHeader {
    pub meta_dnode: DnodePhys,
    pub kind: ObjsetKind,
    /// The intent-log header (log_header.rs; empty for the MOS and a log-less file system).
    pub log: LogHeader,
    /// The dnodes of the owner-usage objects, user, group and project (OpenZFS's
    /// os_userused_dnode, os_groupused_dnode, os_projectused_dnode), if the set keeps usage
    /// by owner (`owners.rs`).
    pub accounting: Option<Box<[DnodePhys; 3]>>,
}

/// The object-set header:
///
/// ```text
///   offset  size  field
///        0   512  meta-dnode
///      512     8  kind (1 MOS, 2 file system)
///      520     8  flags (bit 0: owner-usage dnodes follow at 1024)
///      528   192  intent-log header
///      720   304  reserved, zero
///   with flag bit 0:
///     1024   512  user-usage dnode
///     1536   512  group-usage dnode
///     2048   512  project-usage dnode
/// ```
impl ObjsetHeader {
    pub fn encode(&self) -> Vec<u8> {
        let size = match self.accounting {
            Some(_) => OBJSET_HEADER_SIZE_WITH_ACCOUNTING,
            None => OBJSET_HEADER_SIZE,
        };
        let mut out = vec![0u8; size];
        out[..DNODE_SIZE].copy_from_slice(&self.meta_dnode.encode());
        out[512..520].copy_from_slice(&(self.kind as u64).to_le_bytes());
        out[OBJSET_ZIL_HEADER].copy_from_slice(&self.log.encode());
        if let Some(dnodes) = &self.accounting {
            out[OBJSET_FLAGS].copy_from_slice(&OBJSET_FLAG_OWNER_ACCOUNTING.to_le_bytes());
            for (index, dnode) in dnodes.iter().enumerate() {
                let at = OBJSET_HEADER_SIZE + index * DNODE_SIZE;
                out[at..at + DNODE_SIZE].copy_from_slice(&dnode.encode());
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<ObjsetHeader, BlockError> {
        let corrupt = |what: String| BlockError::corrupt("object-set header", what);
        let flags = match bytes.get(OBJSET_FLAGS) {
            Some(raw) => u64::from_le_bytes(raw.try_into().expect("8 bytes")),
            None => 0,
        };
        if flags & !OBJSET_FLAG_OWNER_ACCOUNTING != 0 {
            return Err(corrupt(format!("unknown object-set flags {flags:#x}")));
        }
        let with_accounting = flags & OBJSET_FLAG_OWNER_ACCOUNTING != 0;
        let expected = if with_accounting {
            OBJSET_HEADER_SIZE_WITH_ACCOUNTING
        } else {
            OBJSET_HEADER_SIZE
        };
        if bytes.len() != expected {
            return Err(corrupt(format!(
                "object-set header of {} bytes (flags {flags:#x})",
                bytes.len()
            )));
        }
        let accounting = if with_accounting {
            let dnode_at = |index: usize| {
                let at = OBJSET_HEADER_SIZE + index * DNODE_SIZE;
                let dnode = DnodePhys::decode(&bytes[at..at + DNODE_SIZE])?;
                if dnode.object_type != ObjectType::KeyValue {
                    return Err(corrupt(format!(
                        "owner-usage dnode {index} of type {:?}",
                        dnode.object_type
                    )));
                }
                Ok(dnode)
            };
            Some(Box::new([dnode_at(0)?, dnode_at(1)?, dnode_at(2)?]))
        } else {
            None
        };
        let meta_dnode = DnodePhys::decode(&bytes[..DNODE_SIZE])?;
        if meta_dnode.object_type != ObjectType::Dnode {
            return Err(BlockError::corrupt(
                "object-set header",
                "object-set header: meta-dnode has the wrong type",
            ));
        }
        let log =
            LogHeader::decode(&bytes[OBJSET_ZIL_HEADER]).map_err(|error| BlockError::Corrupt {
                structure: "object-set header",
                byte_offset: OBJSET_ZIL_HEADER.start,
                what: error.to_string(),
            })?;
        if bytes[OBJSET_ZIL_HEADER.end..OBJSET_HEADER_SIZE]
            .iter()
            .any(|&byte| byte != 0)
        {
            return Err(BlockError::corrupt(
                "object-set header",
                "reserved bytes are not zero",
            ));
        }
        let kind = match u64::from_le_bytes(bytes[512..520].try_into().unwrap()) {
            1 => ObjsetKind::Mos,
            2 => ObjsetKind::FileSystem,
            other => {
                return Err(BlockError::corrupt(
                    "object-set header",
                    format!("object-set type {other}"),
                ))
            }
        };
        Ok(ObjsetHeader {
            meta_dnode,
            kind,
            log,
            accounting,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample_dnode(levels: u8, bonus: Vec<u8>) -> DnodePhys {
        DnodePhys {
            object_type: ObjectType::PlainFile,
            indirect_block_shift: 12,
            levels,
            bonus_type: ObjectType::None,
            checksum: ChecksumType::Blake3,
            compression: Compression::Zstd { level: 3 },
            data_block_size: 4096,
            copies: 2,
            max_blkid: 77,
            size_allocated: 123 * 512,
            generation: Txg(9),
            blkptr: BlockPtr::hole(Txg(9), ObjectType::PlainFile, levels - 1),
            bonus,
            spill: None,
        }
    }

    #[test]
    fn dnode_round_trips_and_free_slots_decode_free() {
        let dnode = sample_dnode(3, vec![7; 100]);
        assert_eq!(DnodePhys::decode(&dnode.encode()).unwrap(), dnode);
        assert!(DnodePhys::decode(&[0u8; DNODE_SIZE]).unwrap().is_free());
        assert!(DnodePhys::decode(&[0u8; 10]).is_err());
        let mut bad = dnode.encode();
        bad[2] = LEVELS_MAX + 1;
        assert!(
            DnodePhys::decode(&bad).is_err(),
            "too many levels must be refused"
        );
        let mut bad = dnode.encode();
        bad[14] = 4;
        assert!(
            DnodePhys::decode(&bad).is_err(),
            "four copies must be refused"
        );
    }

    fn sample_spill() -> BlockPtr {
        use crate::block::blkptr::Dva;
        let mut spill = BlockPtr::hole(Txg(9), ObjectType::Spill, 0);
        spill.dvas[0] = Dva {
            vdev: crate::types::VdevId(0),
            offset: 0x8000,
            size_allocated: 0x1000,
            gang: false,
        };
        spill.size_logical = 0x1000;
        spill.size_physical = 0x1000;
        spill.fill_count = 1;
        spill.checksum = [7; 32];
        spill
    }

    #[test]
    fn dnode_with_spill_round_trips_with_a_shorter_bonus() {
        let mut dnode = sample_dnode(2, vec![5; DNODE_BONUS_SIZE_MAX_WITH_SPILL]);
        dnode.spill = Some(sample_spill());
        let encoded = dnode.encode();
        assert_eq!(encoded[15], DNODE_FLAG_SPILL);
        assert_eq!(DnodePhys::decode(&encoded).unwrap(), dnode);
        // A bonus that runs into the spill pointer is refused.
        let mut bad = encoded;
        bad[12..14].copy_from_slice(&(DNODE_BONUS_SIZE_MAX_WITH_SPILL as u16 + 1).to_le_bytes());
        assert!(DnodePhys::decode(&bad).is_err());
        // The flag with a hole, a wrong type or an unknown flag bit is refused.
        let mut hole = dnode.clone();
        hole.spill = Some(BlockPtr::hole(Txg(1), ObjectType::Spill, 0));
        assert!(DnodePhys::decode(&hole.encode()).is_err());
        let mut wrong_type = dnode.clone();
        wrong_type.spill.as_mut().unwrap().object_type = ObjectType::PlainFile;
        assert!(DnodePhys::decode(&wrong_type.encode()).is_err());
        let mut unknown_flag = dnode.encode();
        unknown_flag[15] |= 2;
        assert!(DnodePhys::decode(&unknown_flag).is_err());
    }

    #[test]
    #[should_panic(expected = "bonus too large")]
    fn a_full_bonus_cannot_be_encoded_beside_a_spill_pointer() {
        let mut dnode = sample_dnode(1, vec![5; DNODE_BONUS_SIZE_MAX_WITH_SPILL + 1]);
        dnode.spill = Some(sample_spill());
        dnode.encode();
    }

    #[test]
    fn objset_header_round_trips_and_rejects_wrong_kinds() {
        let mut meta = sample_dnode(1, Vec::new());
        meta.object_type = ObjectType::Dnode;
        meta.blkptr = BlockPtr::hole(Txg(0), ObjectType::Dnode, 0);
        let header = ObjsetHeader {
            meta_dnode: meta,
            kind: ObjsetKind::FileSystem,
            log: LogHeader::default(),
            accounting: None,
        };
        assert_eq!(ObjsetHeader::decode(&header.encode()).unwrap(), header);
        assert_eq!(header.encode().len(), OBJSET_HEADER_SIZE);
        let mut bad = header.encode();
        bad[512] = 9;
        assert!(ObjsetHeader::decode(&bad).is_err());
        let mut with_log = header.encode();
        with_log[OBJSET_ZIL_HEADER.start + 8] = 1;
        let error = ObjsetHeader::decode(&with_log).unwrap_err().to_string();
        assert!(error.contains("intent log"), "{error}");
        assert!(
            ObjsetHeader::decode(&[0u8; OBJSET_HEADER_SIZE]).is_err(),
            "a zero header has no meta-dnode"
        );
    }

    fn sample_accounting() -> Box<[DnodePhys; 3]> {
        let usage = |seed: u8| {
            let mut dnode = sample_dnode(1, Vec::new());
            dnode.object_type = ObjectType::KeyValue;
            dnode.blkptr = BlockPtr::hole(Txg(0), ObjectType::KeyValue, 0);
            dnode.max_blkid = u64::from(seed);
            dnode
        };
        Box::new([usage(1), usage(2), usage(3)])
    }

    /// The owner-usage dnodes make the header 2.5 KiB, announced by its flag: a header whose
    /// length and flag disagree, or whose usage dnode is not a key/value object, is refused.
    #[test]
    fn objset_header_with_owner_accounting_round_trips() {
        let mut meta = sample_dnode(1, Vec::new());
        meta.object_type = ObjectType::Dnode;
        meta.blkptr = BlockPtr::hole(Txg(0), ObjectType::Dnode, 0);
        let header = ObjsetHeader {
            meta_dnode: meta,
            kind: ObjsetKind::FileSystem,
            log: LogHeader::default(),
            accounting: Some(sample_accounting()),
        };
        let bytes = header.encode();
        assert_eq!(bytes.len(), OBJSET_HEADER_SIZE_WITH_ACCOUNTING);
        assert_eq!(ObjsetHeader::decode(&bytes).unwrap(), header);
        let error = ObjsetHeader::decode(&bytes[..OBJSET_HEADER_SIZE])
            .unwrap_err()
            .to_string();
        assert!(error.contains("1024 bytes"), "{error}");
        let mut unflagged = bytes.clone();
        unflagged[OBJSET_FLAGS].fill(0);
        assert!(ObjsetHeader::decode(&unflagged).is_err());
        let mut unknown_flag = bytes.clone();
        unknown_flag[OBJSET_FLAGS.start] |= 2;
        assert!(ObjsetHeader::decode(&unknown_flag).is_err());
        let mut wrong_type = bytes;
        wrong_type[OBJSET_HEADER_SIZE + DNODE_SIZE] = ObjectType::PlainFile as u8;
        let error = ObjsetHeader::decode(&wrong_type).unwrap_err().to_string();
        assert!(error.contains("owner-usage dnode 1"), "{error}");
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn dnode_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
            let _ = DnodePhys::decode(&bytes);
        }

        #[test]
        fn objset_header_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), OBJSET_HEADER_SIZE..=OBJSET_HEADER_SIZE)) {
            let _ = ObjsetHeader::decode(&bytes);
        }

        #[test]
        fn mutated_headers_with_owner_accounting_never_panic(mutations in crate::fuzz::mutations()) {
            let mut meta = sample_dnode(1, Vec::new());
            meta.object_type = ObjectType::Dnode;
            meta.blkptr = BlockPtr::hole(Txg(0), ObjectType::Dnode, 0);
            let header = ObjsetHeader {
                meta_dnode: meta,
                kind: ObjsetKind::FileSystem,
                log: LogHeader::default(),
                accounting: Some(sample_accounting()),
            };
            let bytes = crate::fuzz::mutate(header.encode(), &mutations);
            if let Ok(decoded) = ObjsetHeader::decode(&bytes) {
                // Compared by what it means, as above (a hole's fields encode as zeros).
                let again = ObjsetHeader::decode(&decoded.encode()).unwrap();
                prop_assert_eq!(&again.meta_dnode, &decoded.meta_dnode);
                prop_assert_eq!(&again.accounting, &decoded.accounting);
                prop_assert_eq!(again.log.is_empty(), decoded.log.is_empty());
            }
        }

        #[test]
        fn mutated_dnodes_never_panic(
            levels in 1u8..=LEVELS_MAX,
            bonus in proptest::collection::vec(any::<u8>(), 0..=DNODE_BONUS_SIZE_MAX_WITH_SPILL),
            spill: bool,
            mutations in crate::fuzz::mutations(),
        ) {
            let mut dnode = sample_dnode(levels, bonus);
            dnode.spill = spill.then(sample_spill);
            let bytes = crate::fuzz::mutate(dnode.encode().to_vec(), &mutations);
            if let Ok(decoded) = DnodePhys::decode(&bytes) {
                if !decoded.is_free() {
                    let again = DnodePhys::decode(&decoded.encode()).unwrap();
                    prop_assert_eq!(again, decoded);
                }
            }
        }

        #[test]
        fn mutated_objset_headers_never_panic(mutations in crate::fuzz::mutations()) {
            let mut meta = sample_dnode(1, Vec::new());
            meta.object_type = ObjectType::Dnode;
            meta.blkptr = BlockPtr::hole(Txg(0), ObjectType::Dnode, 0);
            let header = ObjsetHeader {
                meta_dnode: meta,
                kind: ObjsetKind::FileSystem,
                log: LogHeader::default(),
                accounting: None,
            };
            let bytes = crate::fuzz::mutate(header.encode(), &mutations);
            if let Ok(decoded) = ObjsetHeader::decode(&bytes) {
                // A hole as the log's first block encodes as zeros whatever its birth and type
                // said, so the log header is compared by what it means.
                let again = ObjsetHeader::decode(&decoded.encode()).unwrap();
                prop_assert_eq!(&again.meta_dnode, &decoded.meta_dnode);
                prop_assert_eq!(again.kind, decoded.kind);
                prop_assert_eq!(again.log.is_empty(), decoded.log.is_empty());
            }
        }

        #[test]
        fn valid_dnodes_round_trip(levels in 1u8..=LEVELS_MAX, bonus in proptest::collection::vec(any::<u8>(), 0..=DNODE_BONUS_SIZE_MAX), max_blkid: u64, size_allocated: u64) {
            let mut dnode = sample_dnode(levels, bonus);
            dnode.max_blkid = max_blkid;
            dnode.size_allocated = size_allocated;
            prop_assert_eq!(DnodePhys::decode(&dnode.encode()).unwrap(), dnode);
        }
    }
}
