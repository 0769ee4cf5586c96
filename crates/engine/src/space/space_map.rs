//! Space maps: the on-disk, append-only log of ALLOC and FREE runs of one region.
//!
//! A space map is a MOS object (created through [`SpaceStorage`]). Its bonus buffer holds the
//! [`SpaceMapHeader`]; its data is an array of little-endian u64 words, appended only in syncing
//! context, in data blocks of `metaslab_sm_blksz` bytes.
//!
//! Header (bonus buffer), 280 bytes, all little-endian:
//!
//! ```text
//!  offset  size  field
//!       0     8  length_bytes     u64  valid bytes of entries in the object
//!       8     8  allocated_bytes  i64  net bytes allocated (ALLOC adds, FREE subtracts)
//!      16     4  shift            u32  run/offset unit is 2^shift bytes (the vdev ashift)
//!      20     4  padding          u32  zero
//!      24   256  histogram        32 × u64; bucket i counts free segments of size
//!                                 [2^(i+shift), 2^(i+shift+1)); larger ones fold into bucket 31
//!                                 with their count multiplied by 2^(excess)
//! ```
//!
//! Entries (bit 63 is the most significant bit of the word):
//!
//! ```text
//! debug     63..62 = 0b10   61..60 action (0 ALLOC, 1 FREE)   59..50 sync pass   49..0 txg
//! one-word  63 = 0          62..16 offset (units)   15 type (0 ALLOC, 1 FREE)   14..0 run − 1
//! two-word  word 1: 63..62 = 0b11   61..60 zero   59..24 run − 1 (units)   23..0 vdev id
//!           word 2: 63 type   62..0 offset (units)
//! ```
//!
//! Offsets are relative to the start of the region the map describes. Every batch of runs is
//! preceded by a debug entry naming its action, txg and sync pass; readers attach that txg and
//! pass to the runs that follow. A two-word entry is used when the run is longer than 2^15
//! units, the offset is 2^47 units or more, or a vdev id is given (the log space map); runs
//! longer than 2^36 units are split. Two-word entries never straddle a data block: when only one
//! word is left in a block, it is filled with the all-zero debug word (action ALLOC, pass 0,
//! txg 0), which readers skip without changing their current txg. Since a zero word could also
//! be an ALLOC run, only a zero-txg *debug* word (prefix 0b10) is padding.

use super::range_tree::RangeTree;
use super::storage::{SpaceStorage, BONUS_SIZE_MAX};
use super::SpaceError;
use crate::types::{ObjectId, Txg};

/// Size of the encoded header.
pub const SPACE_MAP_HEADER_SIZE: usize = 8 + 8 + 4 + 4 + 8 * SPACE_MAP_HISTOGRAM_SIZE;
/// Buckets in the on-disk free-space histogram.
pub const SPACE_MAP_HISTOGRAM_SIZE: usize = 32;
const _: () = assert!(SPACE_MAP_HEADER_SIZE == 280);
const _: () = assert!(SPACE_MAP_HEADER_SIZE <= BONUS_SIZE_MAX);

const WORD_SIZE: u64 = 8;
const DEBUG_PREFIX: u64 = 0b10;
const TWO_WORD_PREFIX: u64 = 0b11;
/// Longest run in a one-word entry, in units.
pub const ONE_WORD_RUN_MAX: u64 = 1 << 15;
/// One-word offsets must be below this, in units.
pub const ONE_WORD_OFFSET_LIMIT: u64 = 1 << 47;
/// Longest run in a two-word entry, in units.
pub const TWO_WORD_RUN_MAX: u64 = 1 << 36;
/// Unit shift of the log space maps: 512-byte units, whatever each vdev's ashift.
pub const LOG_SPACE_MAP_SHIFT: u32 = 9;
/// Largest vdev id a two-word entry can carry.
pub const VDEV_ID_MAX: u32 = (1 << 24) - 1;
const TXG_MAX: u64 = (1 << 50) - 1;
const PASS_MAX: u32 = (1 << 10) - 1;

/// What a run or batch records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpaceMapAction {
    Alloc,
    Free,
}

impl SpaceMapAction {
    fn bit(self) -> u64 {
        match self {
            SpaceMapAction::Alloc => 0,
            SpaceMapAction::Free => 1,
        }
    }
    fn from_bit(bit: u64) -> SpaceMapAction {
        if bit == 0 {
            SpaceMapAction::Alloc
        } else {
            SpaceMapAction::Free
        }
    }
}

/// The header kept in the map object's bonus buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpaceMapHeader {
    pub length_bytes: u64,
    pub allocated_bytes: i64,
    pub shift: u32,
    pub histogram: [u64; SPACE_MAP_HISTOGRAM_SIZE],
}

impl SpaceMapHeader {
    pub fn new(shift: u32) -> SpaceMapHeader {
        SpaceMapHeader {
            length_bytes: 0,
            allocated_bytes: 0,
            shift,
            histogram: [0; SPACE_MAP_HISTOGRAM_SIZE],
        }
    }

    pub fn encode(&self) -> [u8; SPACE_MAP_HEADER_SIZE] {
        let mut bytes = [0u8; SPACE_MAP_HEADER_SIZE];
        bytes[0..8].copy_from_slice(&self.length_bytes.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.allocated_bytes.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.shift.to_le_bytes());
        for (index, count) in self.histogram.iter().enumerate() {
            bytes[24 + index * 8..32 + index * 8].copy_from_slice(&count.to_le_bytes());
        }
        bytes
    }

    /// Decode a bonus buffer; `object` only names the map in errors.
    pub fn decode(bytes: &[u8], object: ObjectId) -> Result<SpaceMapHeader, SpaceError> {
        let corrupt =
            |what: String| SpaceError::corrupt(what, format!("space map object {object} header"));
        if bytes.len() != SPACE_MAP_HEADER_SIZE {
            return Err(corrupt(format!(
                "bonus is {} bytes, expected {SPACE_MAP_HEADER_SIZE}",
                bytes.len()
            )));
        }
        let u64_at = |offset: usize| {
            u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
        };
        let length_bytes = u64_at(0);
        let allocated_bytes = i64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        let shift = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
        let padding = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
        if padding != 0 {
            return Err(corrupt(format!("padding is {padding:#x}, expected 0")));
        }
        if !length_bytes.is_multiple_of(WORD_SIZE) {
            return Err(corrupt(format!(
                "length {length_bytes} is not a multiple of 8"
            )));
        }
        if !(crate::types::SPA_MINBLOCKSHIFT..=24).contains(&shift) {
            return Err(corrupt(format!("shift {shift} out of range")));
        }
        let mut histogram = [0u64; SPACE_MAP_HISTOGRAM_SIZE];
        for (index, count) in histogram.iter_mut().enumerate() {
            *count = u64_at(24 + index * 8);
        }
        Ok(SpaceMapHeader {
            length_bytes,
            allocated_bytes,
            shift,
            histogram,
        })
    }

    /// Add a range tree's segments (absolute power-of-two buckets) into the histogram.
    pub fn histogram_add(&mut self, tree: &RangeTree) {
        histogram_add_into(&mut self.histogram, tree.histogram(), self.shift);
    }
}

/// Fold a 64-bucket range-tree histogram into a 32-bucket histogram relative to `shift`.
pub fn histogram_add_into(
    histogram: &mut [u64; SPACE_MAP_HISTOGRAM_SIZE],
    tree_histogram: &[u64],
    shift: u32,
) {
    let shift = shift as usize;
    for (bucket, &count) in tree_histogram.iter().enumerate() {
        if count == 0 {
            continue;
        }
        debug_assert!(bucket >= shift, "segment smaller than one unit");
        let relative = bucket.saturating_sub(shift);
        if relative < SPACE_MAP_HISTOGRAM_SIZE {
            histogram[relative] = histogram[relative].saturating_add(count);
        } else {
            let excess = (relative - (SPACE_MAP_HISTOGRAM_SIZE - 1)) as u32;
            let scaled = count.checked_shl(excess).unwrap_or(u64::MAX);
            histogram[SPACE_MAP_HISTOGRAM_SIZE - 1] =
                histogram[SPACE_MAP_HISTOGRAM_SIZE - 1].saturating_add(scaled);
        }
    }
}

/// One decoded run, with the txg and pass of the debug entry that preceded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpaceMapEntry {
    pub action: SpaceMapAction,
    /// Absolute byte offset (region start added).
    pub start: u64,
    pub size: u64,
    /// Txg of the last debug entry (0 if none preceded the run).
    pub txg: Txg,
    pub sync_pass: u32,
    /// The vdev id of a two-word entry that carried one.
    pub vdev: Option<u32>,
}

/// A decoded word or word pair, before validation against region bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawEntry {
    Debug {
        action: SpaceMapAction,
        sync_pass: u32,
        txg: u64,
    },
    Padding,
    Run {
        action: SpaceMapAction,
        offset_units: u64,
        run_units: u64,
        vdev: Option<u32>,
    },
}

/// Encode a debug word.
pub fn encode_debug(action: SpaceMapAction, sync_pass: u32, txg: Txg) -> u64 {
    assert!(
        sync_pass <= PASS_MAX,
        "sync pass {sync_pass} does not fit a debug entry"
    );
    assert!(txg.0 <= TXG_MAX, "txg {txg} does not fit a debug entry");
    (DEBUG_PREFIX << 62) | (action.bit() << 60) | ((sync_pass as u64) << 50) | txg.0
}

fn encode_one_word(action: SpaceMapAction, offset_units: u64, run_units: u64) -> u64 {
    assert!(offset_units < ONE_WORD_OFFSET_LIMIT && (1..=ONE_WORD_RUN_MAX).contains(&run_units));
    (offset_units << 16) | (action.bit() << 15) | (run_units - 1)
}

fn encode_two_word(
    action: SpaceMapAction,
    offset_units: u64,
    run_units: u64,
    vdev: u32,
) -> [u64; 2] {
    assert!(
        offset_units < (1 << 63)
            && (1..=TWO_WORD_RUN_MAX).contains(&run_units)
            && vdev <= VDEV_ID_MAX
    );
    [
        (TWO_WORD_PREFIX << 62) | ((run_units - 1) << 24) | vdev as u64,
        (action.bit() << 63) | offset_units,
    ]
}

/// The vdev field value meaning "no vdev id" in a two-word entry (2^24 does not fit 24 bits, so
/// tarn uses the all-ones value, one past [`VDEV_ID_MAX`] being unrepresentable).
const NO_VDEV_ID: u32 = VDEV_ID_MAX;

/// Decode the word at `words[0]` (and `words[1]` for a two-word entry). Returns the entry and the
/// number of words it used. `position` names the first word in errors.
pub fn decode_entry(
    words: &[u64],
    position: &dyn Fn() -> String,
) -> Result<(RawEntry, usize), SpaceError> {
    let first = words[0];
    match first >> 62 {
        DEBUG_PREFIX => {
            let action_bits = (first >> 60) & 0b11;
            let sync_pass = ((first >> 50) & PASS_MAX as u64) as u32;
            let txg = first & TXG_MAX;
            if txg == 0 {
                if first == DEBUG_PREFIX << 62 {
                    return Ok((RawEntry::Padding, 1));
                }
                return Err(SpaceError::corrupt(
                    format!("debug entry {first:#018x} with txg 0 is not padding"),
                    position(),
                ));
            }
            if action_bits > 1 {
                return Err(SpaceError::corrupt(
                    format!("debug entry {first:#018x} has action {action_bits}"),
                    position(),
                ));
            }
            Ok((
                RawEntry::Debug {
                    action: SpaceMapAction::from_bit(action_bits),
                    sync_pass,
                    txg,
                },
                1,
            ))
        }
        TWO_WORD_PREFIX => {
            let Some(&second) = words.get(1) else {
                return Err(SpaceError::corrupt(
                    "two-word entry cut off by the end of the map".into(),
                    position(),
                ));
            };
            if (first >> 60) & 0b11 != 0 {
                return Err(SpaceError::corrupt(
                    format!("two-word entry {first:#018x} has reserved bits set"),
                    position(),
                ));
            }
            let run_units = ((first >> 24) & (TWO_WORD_RUN_MAX - 1)) + 1;
            let vdev_field = (first & 0xff_ffff) as u32;
            let vdev = (vdev_field != NO_VDEV_ID).then_some(vdev_field);
            let action = SpaceMapAction::from_bit(second >> 63);
            let offset_units = second & ((1 << 63) - 1);
            Ok((
                RawEntry::Run {
                    action,
                    offset_units,
                    run_units,
                    vdev,
                },
                2,
            ))
        }
        _ => {
            let offset_units = first >> 16;
            let action = SpaceMapAction::from_bit((first >> 15) & 1);
            let run_units = (first & (ONE_WORD_RUN_MAX - 1)) + 1;
            Ok((
                RawEntry::Run {
                    action,
                    offset_units,
                    run_units,
                    vdev: None,
                },
                1,
            ))
        }
    }
}

/// A space map describing the region `[start, start + size)`.
#[derive(Clone, Debug)]
pub struct SpaceMap {
    pub object: ObjectId,
    pub start: u64,
    pub size: u64,
    pub block_size: u32,
    pub header: SpaceMapHeader,
}

impl SpaceMap {
    /// Create a new, empty space map object in syncing txg `txg` (header not yet written).
    pub fn create(
        storage: &dyn SpaceStorage,
        start: u64,
        size: u64,
        shift: u32,
        block_size: u32,
        txg: Txg,
    ) -> Result<SpaceMap, SpaceError> {
        assert!(
            (block_size as u64).is_multiple_of(WORD_SIZE) && block_size as u64 >= 2 * WORD_SIZE
        );
        let object = storage.create_object(block_size, txg)?;
        Ok(SpaceMap {
            object,
            start,
            size,
            block_size,
            header: SpaceMapHeader::new(shift),
        })
    }

    /// Open an existing map: read and validate its header.
    pub fn open(
        storage: &dyn SpaceStorage,
        object: ObjectId,
        start: u64,
        size: u64,
        shift: u32,
        block_size: u32,
    ) -> Result<SpaceMap, SpaceError> {
        let header = SpaceMapHeader::decode(&storage.read_bonus(object)?, object)?;
        let where_ = || format!("space map object {object} header");
        if header.shift != shift {
            return Err(SpaceError::corrupt(
                format!("shift {} but the vdev ashift is {shift}", header.shift),
                where_(),
            ));
        }
        if header.allocated_bytes < 0 || header.allocated_bytes as u64 > size {
            return Err(SpaceError::corrupt(
                format!("allocated {} outside [0, {size}]", header.allocated_bytes),
                where_(),
            ));
        }
        Ok(SpaceMap {
            object,
            start,
            size,
            block_size,
            header,
        })
    }

    /// Open a log space map (docs/design/02-space.md §2.6a): the region is every byte of every
    /// vdev, `[0, u64::MAX)`, in units of [`LOG_SPACE_MAP_SHIFT`]; its header's net allocated bytes
    /// mix every metaslab of the pool and are not checked.
    pub fn open_log(
        storage: &dyn SpaceStorage,
        object: ObjectId,
        block_size: u32,
    ) -> Result<SpaceMap, SpaceError> {
        let header = SpaceMapHeader::decode(&storage.read_bonus(object)?, object)?;
        if header.shift != LOG_SPACE_MAP_SHIFT {
            return Err(SpaceError::corrupt(
                format!(
                    "log space map with shift {} (must be {LOG_SPACE_MAP_SHIFT})",
                    header.shift
                ),
                format!("log space map object {object} header"),
            ));
        }
        Ok(SpaceMap {
            object,
            start: 0,
            size: u64::MAX,
            block_size,
            header,
        })
    }

    /// Blocks of data the map's entries take.
    pub fn blocks(&self) -> u64 {
        self.header.length_bytes.div_ceil(self.block_size as u64)
    }

    pub fn length_bytes(&self) -> u64 {
        self.header.length_bytes
    }

    pub fn allocated_bytes(&self) -> i64 {
        self.header.allocated_bytes
    }

    /// Write the header into the object's bonus buffer.
    pub fn write_header(&self, storage: &dyn SpaceStorage, txg: Txg) -> Result<(), SpaceError> {
        storage.write_bonus(self.object, &self.header.encode(), txg)?;
        Ok(())
    }

    /// Append `tree` as one batch of `action` runs for `txg`/`sync_pass`. An empty tree writes
    /// nothing. Updates the in-memory header (length, allocated), not the bonus buffer.
    pub fn append(
        &mut self,
        storage: &dyn SpaceStorage,
        tree: &RangeTree,
        action: SpaceMapAction,
        txg: Txg,
        sync_pass: u32,
    ) -> Result<(), SpaceError> {
        self.append_with_vdev(storage, tree, action, txg, sync_pass, None)
    }

    /// As [`SpaceMap::append`] in syncing txg `txg`, but with the batch's debug entry stamped
    /// `stamp` (condensing records when each range became free, which may be an earlier txg).
    /// The bytes are always written in the syncing txg: the stamp is data, not the write's txg.
    pub fn append_stamped(
        &mut self,
        storage: &dyn SpaceStorage,
        tree: &RangeTree,
        action: SpaceMapAction,
        stamp: Txg,
        txg: Txg,
        sync_pass: u32,
    ) -> Result<(), SpaceError> {
        self.append_inner(storage, tree, action, stamp, txg, sync_pass, None)
    }

    /// As [`SpaceMap::append`], with every run in two-word form carrying `vdev` when given.
    pub fn append_with_vdev(
        &mut self,
        storage: &dyn SpaceStorage,
        tree: &RangeTree,
        action: SpaceMapAction,
        txg: Txg,
        sync_pass: u32,
        vdev: Option<u32>,
    ) -> Result<(), SpaceError> {
        self.append_inner(storage, tree, action, txg, txg, sync_pass, vdev)
    }

    #[allow(clippy::too_many_arguments)]
    fn append_inner(
        &mut self,
        storage: &dyn SpaceStorage,
        tree: &RangeTree,
        action: SpaceMapAction,
        stamp: Txg,
        txg: Txg,
        sync_pass: u32,
        vdev: Option<u32>,
    ) -> Result<(), SpaceError> {
        if tree.is_empty() {
            return Ok(());
        }
        if let Some(vdev) = vdev {
            assert!(
                vdev < NO_VDEV_ID,
                "vdev id {vdev} does not fit a space-map entry"
            );
        }
        let words_per_block = self.block_size as u64 / WORD_SIZE;
        let mut words: Vec<u64> = Vec::with_capacity(tree.segment_count() + 2);
        let first_word = self.header.length_bytes / WORD_SIZE;
        let push = |words: &mut Vec<u64>, entry: &[u64]| {
            if entry.len() == 2
                && (first_word + words.len() as u64) % words_per_block == words_per_block - 1
            {
                words.push(DEBUG_PREFIX << 62);
            }
            words.extend_from_slice(entry);
        };
        push(&mut words, &[encode_debug(action, sync_pass, stamp)]);
        let shift = self.header.shift;
        for segment in tree.iter() {
            assert!(
                segment.start >= self.start && segment.end <= self.start + self.size,
                "segment outside the space map's region"
            );
            let mut offset_units = (segment.start - self.start) >> shift;
            let mut remaining_units = segment.size() >> shift;
            assert!(
                (segment.start - self.start).is_multiple_of(1 << shift)
                    && segment.size().is_multiple_of(1 << shift),
                "segment not aligned to the space map unit"
            );
            while remaining_units > 0 {
                let needs_two_words = vdev.is_some()
                    || remaining_units > ONE_WORD_RUN_MAX
                    || offset_units >= ONE_WORD_OFFSET_LIMIT;
                let run_units = if needs_two_words {
                    remaining_units.min(TWO_WORD_RUN_MAX)
                } else {
                    remaining_units
                };
                if needs_two_words {
                    push(
                        &mut words,
                        &encode_two_word(
                            action,
                            offset_units,
                            run_units,
                            vdev.unwrap_or(NO_VDEV_ID),
                        ),
                    );
                } else {
                    push(
                        &mut words,
                        &[encode_one_word(action, offset_units, run_units)],
                    );
                }
                offset_units += run_units;
                remaining_units -= run_units;
            }
        }
        let bytes: Vec<u8> = words.iter().flat_map(|word| word.to_le_bytes()).collect();
        storage.write(self.object, self.header.length_bytes, &bytes, txg)?;
        self.header.length_bytes += bytes.len() as u64;
        let space = tree.space() as i64;
        self.header.allocated_bytes += match action {
            SpaceMapAction::Alloc => space,
            SpaceMapAction::Free => -space,
        };
        Ok(())
    }

    /// Rewrite the last, partly filled block of the map with its own bytes, in syncing txg
    /// `txg`, so that it is copied now and a later append in this txg finds it born in `txg`
    /// (rewritten in place from pass `sync_pass_rewrite`). Returns whether anything was
    /// written: nothing when the map is empty or its last block is full (the next append starts
    /// a new block).
    pub fn rewrite_tail(&self, storage: &dyn SpaceStorage, txg: Txg) -> Result<bool, SpaceError> {
        let length = self.header.length_bytes;
        let block = self.block_size as u64;
        if length.is_multiple_of(block) {
            return Ok(false);
        }
        let start = length / block * block;
        let mut bytes = vec![0u8; (length - start) as usize];
        storage.read(self.object, start, &mut bytes)?;
        storage.write(self.object, start, &bytes, txg)?;
        Ok(true)
    }

    /// Discard every entry (condensing starts over). Header updated in memory only.
    pub fn truncate(&mut self, storage: &dyn SpaceStorage, txg: Txg) -> Result<(), SpaceError> {
        storage.truncate(self.object, 0, txg)?;
        self.header.length_bytes = 0;
        self.header.allocated_bytes = 0;
        Ok(())
    }

    /// Replay the first `length_bytes` of the map, calling `callback` for every run in order.
    /// Every run is checked against the region bounds; corruption is an error, never a panic.
    pub fn replay(
        &self,
        storage: &dyn SpaceStorage,
        length_bytes: u64,
        mut callback: impl FnMut(SpaceMapEntry) -> Result<(), SpaceError>,
    ) -> Result<(), SpaceError> {
        if !length_bytes.is_multiple_of(WORD_SIZE) || length_bytes > self.header.length_bytes {
            return Err(SpaceError::corrupt(
                format!(
                    "replay length {length_bytes} invalid for map length {}",
                    self.header.length_bytes
                ),
                format!("space map object {}", self.object),
            ));
        }
        let words_per_block = self.block_size as u64 / WORD_SIZE;
        let mut current_txg = 0u64;
        let mut current_pass = 0u32;
        let mut offset_bytes = 0u64;
        while offset_bytes < length_bytes {
            let chunk_bytes = (length_bytes - offset_bytes).min(self.block_size as u64);
            let mut buffer = vec![0u8; chunk_bytes as usize];
            storage.read(self.object, offset_bytes, &mut buffer)?;
            let words: Vec<u64> = buffer
                .chunks_exact(8)
                .map(|bytes| u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
                .collect();
            let mut index = 0usize;
            while index < words.len() {
                let word_number = offset_bytes / WORD_SIZE + index as u64;
                let position = || format!("space map object {} word {word_number}", self.object);
                let (raw, used) = decode_entry(&words[index..], &position)?;
                if used == 2 && word_number % words_per_block == words_per_block - 1 {
                    return Err(SpaceError::corrupt(
                        "two-word entry straddles a block".into(),
                        position(),
                    ));
                }
                index += used;
                match raw {
                    RawEntry::Padding => {}
                    RawEntry::Debug { sync_pass, txg, .. } => {
                        current_txg = txg;
                        current_pass = sync_pass;
                    }
                    RawEntry::Run {
                        action,
                        offset_units,
                        run_units,
                        vdev,
                    } => {
                        let shift = self.header.shift;
                        let relative_start = offset_units
                            .checked_shl(shift)
                            .filter(|value| value >> shift == offset_units);
                        let size = run_units
                            .checked_shl(shift)
                            .filter(|value| value >> shift == run_units);
                        let bounds = match (relative_start, size) {
                            (Some(relative_start), Some(size)) => relative_start
                                .checked_add(size)
                                .filter(|&end| end <= self.size)
                                .map(|_| (relative_start, size)),
                            _ => None,
                        };
                        let Some((relative_start, size)) = bounds else {
                            return Err(SpaceError::corrupt(
                                format!("run of {run_units} units at unit {offset_units} lies outside the {} byte region", self.size),
                                position(),
                            ));
                        };
                        callback(SpaceMapEntry {
                            action,
                            start: self.start + relative_start,
                            size,
                            txg: Txg(current_txg),
                            sync_pass: current_pass,
                            vdev,
                        })?;
                    }
                }
            }
            offset_bytes += chunk_bytes;
        }
        Ok(())
    }

    /// Replay the map into a free-space tree that starts as the whole region free.
    pub fn load_free_tree(
        &self,
        storage: &dyn SpaceStorage,
        length_bytes: u64,
    ) -> Result<RangeTree, SpaceError> {
        let mut free = RangeTree::for_region(self.start, self.size, self.header.shift);
        free.add(self.start, self.size);
        let object = self.object;
        self.replay(storage, length_bytes, |entry| {
            apply_entry(&mut free, &entry, object)
        })?;
        Ok(free)
    }
}

/// Apply a run to a free-space tree: FREE adds, ALLOC removes. A double free or double
/// allocation in the map is corruption.
pub fn apply_entry(
    free: &mut RangeTree,
    entry: &SpaceMapEntry,
    object: ObjectId,
) -> Result<(), SpaceError> {
    let result = match entry.action {
        SpaceMapAction::Free => free.try_add(entry.start, entry.size),
        SpaceMapAction::Alloc => free.try_remove(entry.start, entry.size),
    };
    result.map_err(|error| {
        SpaceError::corrupt(
            format!("{:?} run: {error}", entry.action),
            format!("space map object {object} txg {}", entry.txg),
        )
    })
}

/// Worst-case bytes needed to write `tree_histogram` (a range-tree histogram) as one batch per
/// action in a map with unit `shift` and data blocks of `block_size` bytes.
pub fn estimate_optimal_size(tree_histogram: &[u64], shift: u32, block_size: u32) -> u64 {
    let shift = shift as usize;
    let mut words: u64 = 0;
    for (bucket, &count) in tree_histogram.iter().enumerate() {
        if count == 0 {
            continue;
        }
        // A segment in this bucket is below 2^(bucket+1) bytes = 2^(bucket+1-shift) units.
        let words_each: u64 = if bucket < 15 + shift {
            1
        } else if bucket < 36 + shift {
            2
        } else {
            2u64.saturating_mul(
                1u64.checked_shl((bucket + 1 - 36 - shift) as u32)
                    .unwrap_or(u64::MAX),
            )
        };
        words = words.saturating_add(count.saturating_mul(words_each));
    }
    let words_per_block = (block_size as u64 / WORD_SIZE).max(1);
    // One padding word per block and the debug entry.
    words = words.saturating_add(words / words_per_block + 2);
    words.saturating_mul(WORD_SIZE)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::space::storage::StorageError;
    use parking_lot::Mutex;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// An object's data bytes and bonus buffer.
    pub(crate) type ObjectContents = (Vec<u8>, Vec<u8>);

    /// In-memory [`SpaceStorage`]: a map of objects, each with data bytes and a bonus buffer.
    #[derive(Default)]
    pub(crate) struct MemoryStorage {
        pub objects: Mutex<HashMap<u64, ObjectContents>>,
        next_object: Mutex<u64>,
    }

    impl MemoryStorage {
        pub fn object_length(&self, object: ObjectId) -> usize {
            self.objects.lock()[&object.0].0.len()
        }
        /// Overwrite raw bytes (to simulate corruption).
        pub fn poke(&self, object: ObjectId, offset: usize, bytes: &[u8]) {
            let mut objects = self.objects.lock();
            let data = &mut objects.get_mut(&object.0).unwrap().0;
            data[offset..offset + bytes.len()].copy_from_slice(bytes);
        }
    }

    impl SpaceStorage for MemoryStorage {
        fn create_object(&self, _block_size: u32, _txg: Txg) -> Result<ObjectId, StorageError> {
            let mut next = self.next_object.lock();
            *next += 1;
            self.objects.lock().insert(*next, (Vec::new(), Vec::new()));
            Ok(ObjectId(*next))
        }
        fn free_object(&self, object: ObjectId, _txg: Txg) -> Result<(), StorageError> {
            self.objects
                .lock()
                .remove(&object.0)
                .map(|_| ())
                .ok_or_else(|| StorageError(format!("no object {object}")))
        }
        fn read(&self, object: ObjectId, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
            let objects = self.objects.lock();
            let (data, _) = objects
                .get(&object.0)
                .ok_or_else(|| StorageError(format!("no object {object}")))?;
            for (index, byte) in buf.iter_mut().enumerate() {
                *byte = data.get(offset as usize + index).copied().unwrap_or(0);
            }
            Ok(())
        }
        fn write(
            &self,
            object: ObjectId,
            offset: u64,
            bytes: &[u8],
            _txg: Txg,
        ) -> Result<(), StorageError> {
            let mut objects = self.objects.lock();
            let (data, _) = objects
                .get_mut(&object.0)
                .ok_or_else(|| StorageError(format!("no object {object}")))?;
            let end = offset as usize + bytes.len();
            if data.len() < end {
                data.resize(end, 0);
            }
            data[offset as usize..end].copy_from_slice(bytes);
            Ok(())
        }
        fn truncate(&self, object: ObjectId, length: u64, _txg: Txg) -> Result<(), StorageError> {
            let mut objects = self.objects.lock();
            let (data, _) = objects
                .get_mut(&object.0)
                .ok_or_else(|| StorageError(format!("no object {object}")))?;
            data.truncate(length as usize);
            Ok(())
        }
        fn read_bonus(&self, object: ObjectId) -> Result<Vec<u8>, StorageError> {
            let objects = self.objects.lock();
            Ok(objects
                .get(&object.0)
                .ok_or_else(|| StorageError(format!("no object {object}")))?
                .1
                .clone())
        }
        fn write_bonus(
            &self,
            object: ObjectId,
            bonus: &[u8],
            _txg: Txg,
        ) -> Result<(), StorageError> {
            assert!(bonus.len() <= BONUS_SIZE_MAX);
            let mut objects = self.objects.lock();
            objects
                .get_mut(&object.0)
                .ok_or_else(|| StorageError(format!("no object {object}")))?
                .1 = bonus.to_vec();
            Ok(())
        }
    }

    fn collect(map: &SpaceMap, storage: &MemoryStorage) -> Result<Vec<SpaceMapEntry>, SpaceError> {
        let mut entries = Vec::new();
        map.replay(storage, map.length_bytes(), |entry| {
            entries.push(entry);
            Ok(())
        })?;
        Ok(entries)
    }

    #[test]
    fn header_round_trips_and_rejects_bad_padding() {
        let mut header = SpaceMapHeader::new(9);
        header.length_bytes = 4096;
        header.allocated_bytes = -5;
        header.histogram[3] = 7;
        let bytes = header.encode();
        assert_eq!(SpaceMapHeader::decode(&bytes, ObjectId(1)).unwrap(), header);
        let mut bad = bytes;
        bad[21] = 1;
        assert!(matches!(
            SpaceMapHeader::decode(&bad, ObjectId(1)),
            Err(SpaceError::Corrupt { .. })
        ));
        assert!(SpaceMapHeader::decode(&bytes[..100], ObjectId(1)).is_err());
    }

    #[test]
    fn append_writes_debug_then_runs_and_long_runs_use_two_words() {
        let storage = MemoryStorage::default();
        let region = 1u64 << 30;
        let mut map = SpaceMap::create(&storage, region, region, 9, 4096, Txg(7)).unwrap();
        map.append(
            &storage,
            &RangeTree::new(),
            SpaceMapAction::Alloc,
            Txg(7),
            1,
        )
        .unwrap();
        assert_eq!(map.length_bytes(), 0, "empty tree writes nothing");
        let mut tree = RangeTree::new();
        tree.add(region + 512, 1024);
        tree.add(region + (64 << 20), 32 << 20); // 65536 units: too long for one word
        map.append(&storage, &tree, SpaceMapAction::Alloc, Txg(7), 2)
            .unwrap();
        assert_eq!(map.length_bytes(), 4 * 8);
        assert_eq!(map.allocated_bytes(), (1024 + (32 << 20)) as i64);
        let entries = collect(&map, &storage).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[0],
            SpaceMapEntry {
                action: SpaceMapAction::Alloc,
                start: region + 512,
                size: 1024,
                txg: Txg(7),
                sync_pass: 2,
                vdev: None
            }
        );
        assert_eq!(entries[1].size, 32 << 20);
    }

    #[test]
    fn two_word_entries_never_straddle_blocks() {
        let storage = MemoryStorage::default();
        // 32-byte blocks: 4 words each.
        let mut map = SpaceMap::create(&storage, 0, 1 << 20, 9, 32, Txg(5)).unwrap();
        let mut tree = RangeTree::new();
        for index in 0..5u64 {
            tree.add(index * 4096, 512);
        }
        map.append_with_vdev(&storage, &tree, SpaceMapAction::Free, Txg(5), 1, Some(3))
            .unwrap();
        // debug, pad, [2w], [2w], [2w], [2w], [2w] → 1 + 1 + 10 + padding before words at index 3 mod 4.
        let entries = collect(&map, &storage).unwrap();
        assert_eq!(entries.len(), 5);
        assert!(entries
            .iter()
            .all(|entry| entry.vdev == Some(3) && entry.txg == Txg(5)));
        let data = storage.objects.lock()[&map.object.0].0.clone();
        let words: Vec<u64> = data
            .chunks_exact(8)
            .map(|bytes| u64::from_le_bytes(bytes.try_into().unwrap()))
            .collect();
        for (index, &word) in words.iter().enumerate() {
            if word >> 62 == TWO_WORD_PREFIX {
                assert_ne!(
                    index % 4,
                    3,
                    "two-word entry starts in the last word of a block"
                );
            }
        }
        assert!(
            words.contains(&(DEBUG_PREFIX << 62)),
            "a padding word was needed"
        );
    }

    #[test]
    fn out_of_bounds_run_is_corrupt() {
        let storage = MemoryStorage::default();
        let mut map = SpaceMap::create(&storage, 0, 1 << 20, 9, 4096, Txg(5)).unwrap();
        map.append(
            &storage,
            &RangeTree::with_range(0, 512),
            SpaceMapAction::Alloc,
            Txg(5),
            1,
        )
        .unwrap();
        // Offset 4096 units = 2 MiB: past the 1 MiB region.
        storage.poke(
            map.object,
            8,
            &encode_one_word(SpaceMapAction::Alloc, 4096, 1).to_le_bytes(),
        );
        let error = collect(&map, &storage).unwrap_err();
        assert!(matches!(error, SpaceError::Corrupt { .. }), "{error}");
    }

    #[test]
    fn estimate_counts_one_word_per_small_segment() {
        let mut tree = RangeTree::new();
        for index in 0..10u64 {
            tree.add(index * 8192, 4096);
        }
        let estimate = estimate_optimal_size(tree.histogram(), 9, 4096);
        assert_eq!(estimate, (10 + 2) * 8);
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn arbitrary_words_replay_without_panic(words in proptest::collection::vec(any::<u64>(), 0..64), block_words in 2u32..8) {
            let storage = MemoryStorage::default();
            let mut map = SpaceMap::create(&storage, 1 << 20, 1 << 20, 9, block_words * 8, Txg(5)).unwrap();
            let bytes: Vec<u8> = words.iter().flat_map(|word| word.to_le_bytes()).collect();
            storage.write(map.object, 0, &bytes, Txg(5)).unwrap();
            map.header.length_bytes = bytes.len() as u64;
            let mut free = RangeTree::with_range(1 << 20, 1 << 20);
            let object = map.object;
            let _ = map.replay(&storage, map.length_bytes(), |entry| {
                assert!(entry.start >= 1 << 20 && entry.start + entry.size <= 2 << 20);
                let _ = apply_entry(&mut free, &entry, object);
                Ok(())
            });
        }

        #[test]
        fn arbitrary_header_bytes_decode_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = SpaceMapHeader::decode(&bytes, ObjectId(1));
        }

        #[test]
        fn mutated_headers_never_panic(
            length in 0u64..1 << 40,
            allocated: i64,
            shift in crate::types::SPA_MINBLOCKSHIFT..=24,
            mutations in crate::fuzz::mutations(),
        ) {
            let header = SpaceMapHeader {
                length_bytes: length * WORD_SIZE,
                allocated_bytes: allocated,
                ..SpaceMapHeader::new(shift)
            };
            let bytes = crate::fuzz::mutate(header.encode().to_vec(), &mutations);
            if let Ok(decoded) = SpaceMapHeader::decode(&bytes, ObjectId(1)) {
                prop_assert_eq!(&decoded.encode()[..], &bytes[..]);
            }
        }

        #[test]
        fn append_then_replay_round_trips(
            segments in proptest::collection::vec((0u64..4096, 1u64..40000), 1..40),
            vdev in proptest::option::of(0u32..1000),
            block_words in 2u32..16,
        ) {
            let storage = MemoryStorage::default();
            let start = 1u64 << 40;
            let size = 1u64 << 40;
            let mut map = SpaceMap::create(&storage, start, size, 9, block_words * 8, Txg(9)).unwrap();
            let mut tree = RangeTree::new();
            for (slot, units) in segments {
                let _ = tree.try_add(start + slot * (1 << 25), units * 512);
            }
            map.append_with_vdev(&storage, &tree, SpaceMapAction::Free, Txg(9), 3, vdev).unwrap();
            let mut replayed = RangeTree::new();
            map.replay(&storage, map.length_bytes(), |entry| {
                assert_eq!((entry.action, entry.txg, entry.sync_pass, entry.vdev), (SpaceMapAction::Free, Txg(9), 3, vdev));
                replayed.add(entry.start, entry.size);
                Ok(())
            }).unwrap();
            prop_assert_eq!(replayed, tree.clone());
            prop_assert_eq!(map.allocated_bytes(), -(tree.space() as i64));
            prop_assert!(map.length_bytes() <= estimate_optimal_size(tree.histogram(), 9, block_words * 8) + 8 * (block_words as u64) || vdev.is_some());
        }
    }
}
