//! Self-describing blocks: the oracle's unit, as ztest's `ztest_block_tag_t`.
//!
//! # Theory
//! A checksum says a block is the block its pointer was written for; it cannot say that the
//! pointer is the right one. A block that is stale (an older generation brought back after a
//! newer one was promised), misplaced (another file's or another offset's block) or
//! resurrected (a freed block read again) checksums fine. So every data block the stress tool
//! writes names its own place, and a read compares that name with where it was read from.
//!
//! # Layout
//! A tagged block is [`TAG_BLOCK_SIZE`] bytes: a 64-byte header, then a body derived from the
//! header alone, so that the body of one block pasted behind another's header fails too.
//!
//! ```text
//!  0        8        16       24       32       40       48       56       64
//!  +--------+--------+--------+--------+--------+--------+--------+--------+------ ... --+
//!  | magic  | family |  ino   | birth  | offset |  gen   | round  | header |  body        |
//!  |        |        |        |        |        |        |        | check  |  (derived)   |
//!  +--------+--------+--------+--------+--------+--------+--------+--------+------ ... --+
//! ```
//! All fields are u64 little-endian:
//! - `family`: the stamp of the file system the file was created in (a random number kept
//!   in the file `.stamp` at its root; a clone has its origin's, as ztest's objects keep their
//!   objset id across clones);
//! - `ino`, `birth`: the file's inode number and creation time (crtime, in nanoseconds),
//!   which together name one file for its whole life, even when the number is reused. Not
//!   the inode generation: that is the txg that made the object, and the intent log's replay
//!   makes a file it re-creates in its own txg (the record keeps its birth time), so a file
//!   fsynced before a crash comes back with another generation. (OpenZFS's replay keeps the
//!   logged generation; tarn's design documents that it does not.)
//! - `offset`: the byte offset in the file (or [`XATTR_OFFSET`] for an extended attribute's
//!   value);
//! - `gen`: the write generation, unique and increasing across the whole run (round in the
//!   high 32 bits, a counter in the low ones), so a newer write always has a larger one;
//! - `round`: the child process (round) that wrote it;
//! - `header check`: a hash of the seven fields before it.

/// Bytes in one tagged block: the unit of every write, truncate and punch the tool makes.
pub const TAG_BLOCK_SIZE: usize = 4096;
/// Bytes in a tag's header.
pub const TAG_HEADER_SIZE: usize = 64;
/// "tarnBLK1" as a little-endian u64.
pub const TAG_MAGIC: u64 = u64::from_le_bytes(*b"tarnBLK1");
/// The offset field of an extended attribute's value.
pub const XATTR_OFFSET: u64 = u64::MAX;

/// The header of a tagged block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub family: u64,
    pub ino: u64,
    pub birth: u64,
    pub offset: u64,
    pub generation: u64,
    pub round: u64,
}

/// Where a block was read from: what its tag must say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub family: u64,
    pub ino: u64,
    pub birth: u64,
    pub offset: u64,
}

/// What a block read back turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// All zeros: a hole, or never written.
    Hole,
    /// A valid tag for the place it was read from.
    Tagged(Tag),
}

/// A file's birth as a tag names it: its creation time in nanoseconds.
pub fn birth_of(attr: &tarn::fs::Attr) -> u64 {
    (attr.crtime.seconds as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(u64::from(attr.crtime.nanoseconds))
}

/// A 64-bit mix (splitmix64's finalizer): the body's generator and the header's check.
pub fn mix(mut value: u64) -> u64 {
    value = (value ^ (value >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    value ^ (value >> 31)
}

impl Tag {
    fn fields(&self) -> [u64; 7] {
        [
            TAG_MAGIC,
            self.family,
            self.ino,
            self.birth,
            self.offset,
            self.generation,
            self.round,
        ]
    }

    fn header_check(&self) -> u64 {
        self.fields()
            .iter()
            .fold(0x7461_726e_u64, |state, &field| mix(state ^ field))
    }

    /// The tagged block (or xattr value) of `length` bytes: header, then the derived body.
    pub fn encode(&self, length: usize) -> Vec<u8> {
        assert!(length >= TAG_HEADER_SIZE, "a tagged block holds its header");
        let mut out = Vec::with_capacity(length);
        for field in self.fields() {
            out.extend_from_slice(&field.to_le_bytes());
        }
        let check = self.header_check();
        out.extend_from_slice(&check.to_le_bytes());
        let mut state = check;
        while out.len() < length {
            state = mix(state.wrapping_add(0x9e37_79b9_7f4a_7c15));
            out.extend_from_slice(&state.to_le_bytes());
        }
        out.truncate(length);
        out
    }

    /// Decode and check `bytes` (a whole block, or the part of one a short file holds): the
    /// header must be whole and consistent, and every body byte present must be the one the
    /// header derives. Errors say what is wrong, for the failure report.
    pub fn decode(bytes: &[u8]) -> Result<BlockState, String> {
        if bytes.iter().all(|&byte| byte == 0) {
            return Ok(BlockState::Hole);
        }
        if bytes.len() < TAG_HEADER_SIZE {
            return Err(format!(
                "{} bytes, not all zero, too short for a tag header",
                bytes.len()
            ));
        }
        let field = |index: usize| {
            u64::from_le_bytes(bytes[index * 8..index * 8 + 8].try_into().expect("8 bytes"))
        };
        if field(0) != TAG_MAGIC {
            return Err(format!(
                "no tag: the block starts {:02x?}",
                &bytes[..16.min(bytes.len())]
            ));
        }
        let tag = Tag {
            family: field(1),
            ino: field(2),
            birth: field(3),
            offset: field(4),
            generation: field(5),
            round: field(6),
        };
        if field(7) != tag.header_check() {
            return Err(format!("tag header damaged: {tag:?}"));
        }
        let expected = tag.encode(bytes.len());
        if let Some(at) = (0..bytes.len()).find(|&at| bytes[at] != expected[at]) {
            return Err(format!(
                "body of {tag:?} differs from its header's at byte {at}"
            ));
        }
        Ok(BlockState::Tagged(tag))
    }

    /// Decode `bytes` read from `place` and check that the tag names that place.
    pub fn verify(bytes: &[u8], place: Place) -> Result<BlockState, String> {
        let state = Tag::decode(bytes)?;
        if let BlockState::Tagged(tag) = state {
            let named = Place {
                family: tag.family,
                ino: tag.ino,
                birth: tag.birth,
                offset: tag.offset,
            };
            if named != place {
                return Err(format!(
                    "misplaced block: read at {place:?}, its tag says {named:?} (generation {:#x}, round {})",
                    tag.generation, tag.round
                ));
            }
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag() -> Tag {
        Tag {
            family: 7,
            ino: 42,
            birth: 9,
            offset: 8192,
            generation: 0x1_0000_0005,
            round: 1,
        }
    }

    fn place() -> Place {
        Place {
            family: 7,
            ino: 42,
            birth: 9,
            offset: 8192,
        }
    }

    #[test]
    fn a_block_verifies_at_its_own_place_only() {
        let block = tag().encode(TAG_BLOCK_SIZE);
        assert_eq!(Tag::verify(&block, place()), Ok(BlockState::Tagged(tag())));
        let elsewhere = Place {
            offset: 0,
            ..place()
        };
        assert!(Tag::verify(&block, elsewhere).is_err());
        let reused_number = Place {
            birth: 10,
            ..place()
        };
        assert!(Tag::verify(&block, reused_number).is_err());
    }

    #[test]
    fn damage_anywhere_is_caught() {
        let block = tag().encode(TAG_BLOCK_SIZE);
        for at in [0, 17, 56, 63, 64, 2000, TAG_BLOCK_SIZE - 1] {
            let mut damaged = block.clone();
            damaged[at] ^= 1;
            assert!(Tag::decode(&damaged).is_err(), "a flip at byte {at}");
        }
        let mut other = Tag {
            generation: 1,
            ..tag()
        }
        .encode(TAG_BLOCK_SIZE);
        other[TAG_HEADER_SIZE..].copy_from_slice(&block[TAG_HEADER_SIZE..]);
        assert!(Tag::decode(&other).is_err(), "a body behind another header");
    }

    #[test]
    fn zeros_are_a_hole_and_a_short_tail_still_checks() {
        assert_eq!(Tag::decode(&[0u8; 100]), Ok(BlockState::Hole));
        let block = tag().encode(TAG_BLOCK_SIZE);
        assert_eq!(Tag::decode(&block[..1000]), Ok(BlockState::Tagged(tag())));
        assert!(Tag::decode(&block[..10]).is_err());
    }
}
