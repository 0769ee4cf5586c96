//! Gang blocks (OpenZFS's zio gang tree): a block written in pieces when no free segment can
//! hold it whole. The pipeline's gang methods of [`BlockIo`] are here, apart from the
//! pipelines (`pipeline.rs`), because a gang has its own on-disk header and tree.
//!
//! # Theory
//! On a full, fragmented pool a 128 KiB block may find no contiguous free segment although the
//! pool has plenty of free space in smaller pieces. Rather than fail the txg (and suspend the
//! pool), the write pipeline stores such a block as a *gang*: each of its DVAs carries the gang
//! bit and points to a small *gang header* holding the block pointers of up to
//! [`GANG_CHILDREN_MAX`] *children*, each holding a consecutive piece of the block's physical
//! bytes. A child is an ordinary block (compression off, the parent's checksum algorithm, type
//! and level) with its own copies, and may itself be a gang when even the pieces do not fit
//! (at most [`GANG_DEPTH_MAX`] levels of headers: the writer never goes deeper, and decoding
//! refuses a gang piece in a header of the deepest level, so that every walk of a gang tree is
//! bounded whatever the disk holds). Every copy of the header lists the same children; a
//! block with `copies` = n has n header copies and children with up to n copies each.
//!
//! The parent's checksum still covers the whole physical block: a read gathers the header,
//! reads every child (each verified against its own checksum, so a bad piece is repaired from
//! another copy of that piece), concatenates the pieces and verifies the result against the
//! parent. The header is self-checksummed (BLAKE3 over the header and its own location, the
//! verifier that catches a header read from the wrong place or left there by an older block),
//! since no parent checksum covers it alone.
//!
//! # Space
//! As in OpenZFS, a gang DVA's allocated size is the header's allocation plus the allocations of
//! the same copy index of every child (recursively): `BlockPtr::size_allocated` stays the exact
//! space the block holds, so accounting never reads a header. Freeing a gang, `check` claiming
//! one and scrub verifying one do read the header ([`BlockIo::allocated_extents`]).
//!
//! # Cost
//! A gang costs one header write per copy on top of the pieces, and reading it costs one extra
//! read. Ganging is a last resort: it happens only when the whole block cannot be placed, or
//! when forced for tests (`metaslab_force_ganging`, `metaslab_force_ganging_pct`).
//!
//! Header format (docs/design/03-block.md §2.3a), [`GANG_HEADER_SIZE`] = 4096 bytes, allocated as
//! `round_up(4096, sector)`:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `TARNGANG` |
//! | 8 | 2 | version (1) |
//! | 10 | 2 | child count, 1..=31 |
//! | 12 | 4 | bytes allocated for this header copy (a multiple of 512, at least 4096) |
//! | 16 | 8 | birth txg (the parent's physical birth) |
//! | 24 | 8 | reserved, 0 |
//! | 32 | 32 | BLAKE3 of the 4096 header bytes with this field zeroed, then the copy's vdev id (u32 LE) and offset (u64 LE) |
//! | 64 | 128 × n | child block pointers |
//! | 64 + 128n | rest | zero |

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::block::blkptr::{
    BlockError, BlockPtr, Compression, Dva, BLKPTR_SIZE, DVAS_MAX, DVA_ALLOCATED_UNIT,
};
use crate::block::checksum;
use crate::block::pipeline::{BadCopy, BlockIo, CopyReport, PipelineError, Repaired, SyncPoint};
use crate::space::storage::SpaceStorage;
use crate::space::SpaceError;
use crate::types::{Txg, VdevId};

/// Bytes of a gang header (its allocation is this rounded up to the sector).
pub const GANG_HEADER_SIZE: usize = 4096;
/// Bytes before the child block pointers.
const GANG_HEADER_FIXED: usize = 64;
/// Children one header holds.
pub const GANG_CHILDREN_MAX: usize = (GANG_HEADER_SIZE - GANG_HEADER_FIXED) / BLKPTR_SIZE;
/// Levels of gang headers a block may have (a child of the last may not be a gang).
pub const GANG_DEPTH_MAX: u32 = 3;
const GANG_MAGIC: [u8; 8] = *b"TARNGANG";
const GANG_VERSION: u16 = 1;
const OFFSET_CHECKSUM: usize = 32;

/// A decoded gang header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangHeader {
    /// Bytes allocated for each copy of the header.
    pub header_allocated: u64,
    /// The parent block's physical birth.
    pub birth: Txg,
    /// The pieces, in order.
    pub children: Vec<BlockPtr>,
}

fn corrupt(detail: String) -> BlockError {
    BlockError::corrupt("gang header", detail)
}

fn header_checksum(bytes: &[u8], vdev: VdevId, offset: u64) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&bytes[..OFFSET_CHECKSUM]);
    hasher.update(&[0u8; 32]);
    hasher.update(&bytes[OFFSET_CHECKSUM + 32..GANG_HEADER_SIZE]);
    hasher.update(&vdev.0.to_le_bytes());
    hasher.update(&offset.to_le_bytes());
    *hasher.finalize().as_bytes()
}

impl GangHeader {
    /// The header copy to be written at `(vdev, offset)`, padded to its allocation.
    pub fn encode(&self, vdev: VdevId, offset: u64) -> Vec<u8> {
        assert!((1..=GANG_CHILDREN_MAX).contains(&self.children.len()));
        let mut bytes = vec![0u8; self.header_allocated as usize];
        bytes[..8].copy_from_slice(&GANG_MAGIC);
        bytes[8..10].copy_from_slice(&GANG_VERSION.to_le_bytes());
        bytes[10..12].copy_from_slice(&(self.children.len() as u16).to_le_bytes());
        bytes[12..16].copy_from_slice(&(self.header_allocated as u32).to_le_bytes());
        bytes[16..24].copy_from_slice(&self.birth.0.to_le_bytes());
        for (index, child) in self.children.iter().enumerate() {
            let at = GANG_HEADER_FIXED + index * BLKPTR_SIZE;
            child.encode_into(&mut bytes[at..at + BLKPTR_SIZE]);
        }
        let sum = header_checksum(&bytes, vdev, offset);
        bytes[OFFSET_CHECKSUM..OFFSET_CHECKSUM + 32].copy_from_slice(&sum);
        bytes
    }

    /// Decode the header copy read from `(vdev, offset)` for `parent`, a header at `depth`
    /// (1 for a block's own header, 2 for the header of one of its pieces, and so on). Never
    /// panics: anything inconsistent (magic, version, checksum, counts, children that are not
    /// plain pieces of the parent, pieces too short for the parent, a piece that is a gang
    /// below the deepest header level [`GANG_DEPTH_MAX`]) is a corrupt-block error.
    ///
    /// The depth bound is what keeps every walk of a gang tree finite: the accounting check
    /// (each header's allocation plus its pieces' must equal its DVA's) rules out a header that
    /// is its own piece through one copy index, but not a cycle that alternates copies (a piece
    /// whose first copy is bad and whose second names an ancestor header), nor a chain as deep
    /// as the block's allocation allows. Crafted disk contents of either kind would otherwise
    /// recurse until the stack overflows.
    pub fn decode(
        bytes: &[u8],
        vdev: VdevId,
        offset: u64,
        parent: &BlockPtr,
        depth: u32,
    ) -> Result<GangHeader, BlockError> {
        if !(1..=GANG_DEPTH_MAX).contains(&depth) {
            return Err(corrupt(format!(
                "a gang header at level {depth} (1..={GANG_DEPTH_MAX})"
            )));
        }
        if bytes.len() < GANG_HEADER_SIZE {
            return Err(corrupt(format!(
                "{} bytes, expected {GANG_HEADER_SIZE}",
                bytes.len()
            )));
        }
        if bytes[..8] != GANG_MAGIC {
            return Err(corrupt(format!("bad magic {:02x?}", &bytes[..8])));
        }
        let read_u64 = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let stored: [u8; 32] = bytes[OFFSET_CHECKSUM..OFFSET_CHECKSUM + 32]
            .try_into()
            .unwrap();
        if header_checksum(bytes, vdev, offset) != stored {
            return Err(corrupt(format!(
                "checksum mismatch for the copy at <{vdev}:{offset:#x}>"
            )));
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version != GANG_VERSION {
            return Err(corrupt(format!("unknown version {version}")));
        }
        let count = u16::from_le_bytes([bytes[10], bytes[11]]) as usize;
        if !(1..=GANG_CHILDREN_MAX).contains(&count) {
            return Err(corrupt(format!(
                "{count} children (1..={GANG_CHILDREN_MAX})"
            )));
        }
        let header_allocated = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as u64;
        if header_allocated < GANG_HEADER_SIZE as u64
            || !header_allocated.is_multiple_of(DVA_ALLOCATED_UNIT)
        {
            return Err(corrupt(format!(
                "header allocation {header_allocated} bytes"
            )));
        }
        let birth = Txg(read_u64(16));
        if birth != parent.birth_physical {
            return Err(corrupt(format!(
                "birth {birth}, the block pointer says {}",
                parent.birth_physical
            )));
        }
        if read_u64(24) != 0 {
            return Err(corrupt("reserved bytes 24..32 are not zero".into()));
        }
        let end = GANG_HEADER_FIXED + count * BLKPTR_SIZE;
        if bytes[end..GANG_HEADER_SIZE].iter().any(|&byte| byte != 0) {
            return Err(corrupt("bytes after the last child are not zero".into()));
        }
        let mut children = Vec::with_capacity(count);
        let mut physical = 0u64;
        for index in 0..count {
            let at = GANG_HEADER_FIXED + index * BLKPTR_SIZE;
            let child = BlockPtr::decode(&bytes[at..at + BLKPTR_SIZE])
                .map_err(|error| corrupt(format!("child {index}: {error}")))?;
            if child.is_hole()
                || child.embedded
                || child.compression != Compression::Off
                || child.object_type != parent.object_type
                || child.level != parent.level
                || child.checksum_type != parent.checksum_type
                || child.birth_physical != parent.birth_physical
            {
                return Err(corrupt(format!(
                    "child {index} is not a piece of its parent: {child}"
                )));
            }
            if child.is_gang() && depth == GANG_DEPTH_MAX {
                return Err(corrupt(format!(
                    "child {index} is a gang below the deepest level of gang headers \
                     ({GANG_DEPTH_MAX}): {child}"
                )));
            }
            physical += child.size_physical as u64;
            children.push(child);
        }
        if physical < parent.size_physical as u64 {
            return Err(corrupt(format!(
                "pieces hold {physical} bytes, the block has {}",
                parent.size_physical
            )));
        }
        Ok(GangHeader {
            header_allocated,
            birth,
            children,
        })
    }

    /// What copy `index` of the parent accounts for: this header, which takes `header_asize`
    /// bytes where that copy lies (its allocation, with parity on RAID-Z), and that copy of
    /// every child.
    pub fn copy_allocated(&self, index: usize, header_asize: u64) -> u64 {
        header_asize
            + self
                .children
                .iter()
                .map(|child| child.dvas[index].size_allocated)
                .sum::<u64>()
    }
}

/// What reading a gang's header copies found: the header, the copies that failed (DVA and
/// mirror child), and how many copies were read.
struct HeaderCopies {
    header: GangHeader,
    bad: Vec<BadCopy>,
    read: u64,
}

/// Where a gang's pieces go, decided before anything is written so that a gang that cannot be
/// placed whole is undone without leaving writes behind.
struct GangPlan {
    /// Each header copy: its vdev, offset and allocated bytes.
    headers: Vec<(VdevId, u64, u64)>,
    header_allocated: u64,
    /// (length of the piece, where it goes).
    children: Vec<(usize, ChildPlan)>,
}

enum ChildPlan {
    Plain(Vec<Dva>),
    Gang(GangPlan),
}

impl GangPlan {
    /// Every extent the plan allocated, for undoing it.
    fn extents(&self, out: &mut Vec<(VdevId, u64, u64)>) {
        out.extend(self.headers.iter().copied());
        for (_, child) in &self.children {
            match child {
                ChildPlan::Plain(dvas) => out.extend(
                    dvas.iter()
                        .map(|dva| (dva.vdev, dva.offset, dva.size_allocated)),
                ),
                ChildPlan::Gang(plan) => plan.extents(out),
            }
        }
    }
}

fn round_up(value: u64, alignment: u64) -> u64 {
    value.div_ceil(alignment) * alignment
}

impl BlockIo {
    /// Whether the write of a block of `size_allocated` bytes is to be ganged although it may
    /// fit (`metaslab_force_ganging`, with `metaslab_force_ganging_pct` percent of the eligible
    /// blocks chosen by a deterministic sequence).
    pub(super) fn force_gang(&self, size_allocated: u64) -> bool {
        if size_allocated < self.tunables.metaslab_force_ganging
            || size_allocated <= self.gang_header_allocated()
        {
            return false;
        }
        let pct = self.tunables.metaslab_force_ganging_pct;
        pct >= 100 || {
            let n = self.gang_sequence.fetch_add(1, Ordering::Relaxed);
            (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % 100 < pct
        }
    }

    pub(super) fn gang_header_allocated(&self) -> u64 {
        round_up(GANG_HEADER_SIZE as u64, 1 << self.ashift)
    }

    /// Allocate `copies` DVAs of `size_allocated` bytes, spread as `SpaceManager::allocate`
    /// spreads them. With `allow_fewer`, a second or third copy that finds no space is left out;
    /// otherwise that is `NoSpace` and the copies already placed are given back.
    pub(super) fn allocate_copies(
        &self,
        size_allocated: u64,
        copies: usize,
        txg: Txg,
        allow_fewer: bool,
        storage: &dyn SpaceStorage,
    ) -> Result<Vec<Dva>, PipelineError> {
        let mut dvas: Vec<Dva> = Vec::with_capacity(copies);
        let mut avoid: Vec<(VdevId, u64)> = Vec::with_capacity(copies);
        for copy in 0..copies {
            match self.space.allocate(size_allocated, txg, &avoid, storage) {
                Ok(placed) => {
                    avoid.push((placed.vdev, placed.offset));
                    dvas.push(Dva {
                        vdev: placed.vdev,
                        offset: placed.offset,
                        size_allocated: placed.asize,
                        gang: false,
                    });
                }
                Err(SpaceError::NoSpace { .. }) if copy > 0 && allow_fewer => break,
                Err(error) => {
                    for dva in &dvas {
                        self.space
                            .unalloc(dva.vdev, dva.offset, dva.size_allocated, txg)?;
                    }
                    return Err(match error {
                        SpaceError::NoSpace { .. } => PipelineError::NoSpace { size_allocated },
                        other => other.into(),
                    });
                }
            }
        }
        Ok(dvas)
    }

    /// Write `padded` (the block's physical bytes padded to its allocation) as a gang for
    /// `template` (sizes, checksum, type, level and birth already set). Returns the parent's
    /// gang DVAs. Nothing is written unless every piece found a place.
    pub(super) fn write_gang(
        &self,
        padded: &[u8],
        template: &BlockPtr,
        copies: usize,
        at: SyncPoint,
        storage: &dyn SpaceStorage,
    ) -> Result<[Dva; DVAS_MAX], PipelineError> {
        let plan = self.plan_gang(padded.len() as u64, copies, at.txg, 1, storage)?;
        self.gang_blocks.fetch_add(1, Ordering::Relaxed);
        self.space.record_gang_block();
        Ok(self.issue_gang(&plan, padded, template))
    }

    fn plan_gang(
        &self,
        length: u64,
        copies: usize,
        txg: Txg,
        depth: u32,
        storage: &dyn SpaceStorage,
    ) -> Result<GangPlan, PipelineError> {
        let header_allocated = self.gang_header_allocated();
        let headers = self.allocate_copies(header_allocated, copies, txg, true, storage)?;
        let mut plan = GangPlan {
            headers: headers
                .iter()
                .map(|dva| (dva.vdev, dva.offset, dva.size_allocated))
                .collect(),
            header_allocated,
            children: Vec::new(),
        };
        match self.plan_pieces(&mut plan, length, copies, txg, depth, storage) {
            Ok(()) => Ok(plan),
            Err(error) => {
                let mut extents = Vec::new();
                plan.extents(&mut extents);
                for (vdev, offset, size) in extents {
                    self.space.unalloc(vdev, offset, size, txg)?;
                }
                Err(error)
            }
        }
    }

    /// Place the pieces: as large as will fit, starting at half the block (the whole did not
    /// fit) and halving on every miss, down to one sector; the last slot of a header takes
    /// the remainder as a nested gang when it does not fit whole.
    fn plan_pieces(
        &self,
        plan: &mut GangPlan,
        length: u64,
        copies: usize,
        txg: Txg,
        depth: u32,
        storage: &dyn SpaceStorage,
    ) -> Result<(), PipelineError> {
        let sector = 1u64 << self.ashift;
        let mut remaining = length;
        let mut piece = round_up(length.div_ceil(2), sector);
        while remaining > 0 {
            let size = piece.min(remaining);
            let last_slot = plan.children.len() + 1 == GANG_CHILDREN_MAX;
            if last_slot && size < remaining {
                // The remainder in one piece, else as a gang of its own.
                let child = match self.allocate_copies(remaining, copies, txg, false, storage) {
                    Ok(dvas) => ChildPlan::Plain(dvas),
                    Err(PipelineError::NoSpace { .. })
                        if depth < GANG_DEPTH_MAX && remaining > self.gang_header_allocated() =>
                    {
                        ChildPlan::Gang(self.plan_gang(
                            remaining,
                            copies,
                            txg,
                            depth + 1,
                            storage,
                        )?)
                    }
                    Err(error) => return Err(error),
                };
                plan.children.push((remaining as usize, child));
                return Ok(());
            }
            match self.allocate_copies(size, copies, txg, size == sector, storage) {
                Ok(dvas) => {
                    plan.children.push((size as usize, ChildPlan::Plain(dvas)));
                    remaining -= size;
                }
                Err(PipelineError::NoSpace { .. }) if piece > sector => {
                    piece = round_up(piece / 2, sector).max(sector);
                }
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Write the pieces and the header copies of a plan; returns the gang DVAs.
    fn issue_gang(&self, plan: &GangPlan, padded: &[u8], template: &BlockPtr) -> [Dva; DVAS_MAX] {
        let mut children = Vec::with_capacity(plan.children.len());
        let mut start = 0usize;
        for (length, child_plan) in &plan.children {
            let bytes = &padded[start..start + length];
            start += length;
            let mut child = template.clone();
            child.size_logical = *length as u32;
            child.size_physical = *length as u32;
            child.compression = Compression::Off;
            child.fill_count = 1;
            child.checksum = checksum::compute(template.checksum_type, bytes);
            match child_plan {
                ChildPlan::Plain(dvas) => {
                    let shared = Arc::new(bytes.to_vec());
                    for (index, dva) in dvas.iter().enumerate() {
                        child.dvas[index] = *dva;
                        self.submit_block(dva, &shared, *length as u64);
                    }
                }
                ChildPlan::Gang(nested) => child.dvas = self.issue_gang(nested, bytes, &child),
            }
            children.push(child);
        }
        let header = GangHeader {
            header_allocated: plan.header_allocated,
            birth: template.birth_physical,
            children,
        };
        let mut dvas = [Dva::default(); DVAS_MAX];
        for (index, &(vdev, offset, asize)) in plan.headers.iter().enumerate() {
            let location = Dva {
                vdev,
                offset,
                size_allocated: asize,
                gang: false,
            };
            let encoded = Arc::new(header.encode(vdev, offset));
            self.submit_block(&location, &encoded, GANG_HEADER_SIZE as u64);
            dvas[index] = Dva {
                vdev,
                offset,
                size_allocated: header.copy_allocated(index, asize),
                gang: true,
            };
        }
        dvas
    }

    /// Rewrite a gang born in this txg in place (a later sync pass, same physical size and
    /// copies): every piece keeps its place and length and gets its slice of the new bytes,
    /// and every header copy is rewritten with the pieces' new checksums. As with a normal
    /// block, nothing is allocated or freed, so the pass changes no space map.
    pub(super) fn rewrite_gang(
        &self,
        old: &BlockPtr,
        padded: &[u8],
        template: &BlockPtr,
    ) -> Result<[Dva; DVAS_MAX], PipelineError> {
        self.rewrite_gang_at(old, padded, template, 1)
    }

    /// [`BlockIo::rewrite_gang`] of a gang whose header is at `depth`.
    fn rewrite_gang_at(
        &self,
        old: &BlockPtr,
        padded: &[u8],
        template: &BlockPtr,
        depth: u32,
    ) -> Result<[Dva; DVAS_MAX], PipelineError> {
        let header = self.read_gang_header(old, false, depth)?;
        let mut children = Vec::with_capacity(header.children.len());
        let mut start = 0usize;
        for old_child in &header.children {
            let length = old_child.size_physical as usize;
            let bytes = padded.get(start..start + length).ok_or_else(|| {
                BlockError::corrupt("gang header", "pieces longer than the block rewritten")
            })?;
            start += length;
            let mut child = old_child.clone();
            child.checksum = checksum::compute(template.checksum_type, bytes);
            if old_child.is_gang() {
                child.dvas = self.rewrite_gang_at(old_child, bytes, &child, depth + 1)?;
            } else {
                let shared = Arc::new(bytes.to_vec());
                for dva in child.copies() {
                    self.submit_block(dva, &shared, length as u64);
                }
            }
            children.push(child);
        }
        let header = GangHeader { children, ..header };
        for dva in old.copies() {
            let encoded = Arc::new(header.encode(dva.vdev, dva.offset));
            self.submit_block(dva, &encoded, GANG_HEADER_SIZE as u64);
        }
        Ok(old.dvas)
    }

    /// Read a gang's header, at `depth` of its gang tree: the first copy (DVA, then mirror
    /// child) that verifies; with `repair`, copies that did not are rewritten (re-encoded for
    /// their own location).
    fn read_gang_header(
        &self,
        bp: &BlockPtr,
        repair: bool,
        depth: u32,
    ) -> Result<GangHeader, PipelineError> {
        let copies = self.read_header_copies(bp, false, depth)?;
        if repair && !copies.bad.is_empty() && self.is_writable() {
            let repaired = self.repair_headers(&copies.header, &copies.bad);
            self.note_heal(copies.bad.len() as u64, repaired);
        }
        Ok(copies.header)
    }

    /// Read a gang's header copies in order (every DVA, every mirror child), all of them with
    /// `every`, else up to the first that verifies. Copies that fail are counted against their
    /// leaf. No good copy is the last copy's error.
    fn read_header_copies(
        &self,
        bp: &BlockPtr,
        every: bool,
        depth: u32,
    ) -> Result<HeaderCopies, PipelineError> {
        let mut bad: Vec<BadCopy> = Vec::new();
        let mut good = None;
        let mut read = 0;
        let mut last_error = None;
        'copies: for (index, dva) in bp.copies().enumerate() {
            let top = self.header_location(dva)?;
            if top.raidz_geometry().is_some() {
                read += 1;
                let mut decoded = None;
                let mut verify =
                    |data: &[u8]| match GangHeader::decode(data, dva.vdev, dva.offset, bp, depth) {
                        Ok(header) => {
                            decoded = Some(header);
                            true
                        }
                        Err(_) => false,
                    };
                let outcome = self.read_raidz_copy(
                    &top,
                    dva,
                    GANG_HEADER_SIZE as u64,
                    bp.birth_physical.0,
                    every,
                    &mut verify,
                );
                let checked = outcome.and_then(|read| {
                    let header = decoded.take().expect("verified");
                    self.check_header_accounting(&header, dva, bp.birth_physical, index)?;
                    Ok((header, read.repair))
                });
                match checked {
                    Ok((header, repair)) => {
                        bad.extend(
                            repair
                                .into_iter()
                                .map(|child| (*dva, top.clone(), child, bp.birth_physical.0)),
                        );
                        good.get_or_insert(header);
                        if !every {
                            break 'copies;
                        }
                    }
                    Err(error) => last_error = Some(error),
                }
                continue;
            }
            // As for any block: children that may hold a stale copy are tried last, and an
            // offline or missing child is not read at all (it holds no copy to verify or
            // repair, and its failed read is no checksum error).
            for child in crate::vdev::dtl::read_order(&top, bp.birth_physical.0) {
                let leaf = &top.children[child];
                if !leaf.is_usable() {
                    continue;
                }
                read += 1;
                match self.read_header_copy(&top, child, dva, bp, index, depth) {
                    Ok(header) => {
                        good.get_or_insert(header);
                        if !every {
                            break 'copies;
                        }
                    }
                    Err(error) => {
                        // A stale copy on a child that missed the block's txg is expected
                        // until resilvered, not a checksum error.
                        if !leaf.dtl.contains(bp.birth_physical.0) {
                            top.record_checksum_error(child);
                        }
                        bad.push((*dva, top.clone(), child, bp.birth_physical.0));
                        last_error = Some(error);
                    }
                }
            }
        }
        let header = good.ok_or_else(|| {
            last_error.unwrap_or(PipelineError::NoGoodCopy {
                bp: format!("{bp}"),
            })
        })?;
        Ok(HeaderCopies { header, bad, read })
    }

    fn header_location(&self, dva: &Dva) -> Result<Arc<crate::vdev::TopVdev>, PipelineError> {
        let header = Dva {
            size_allocated: GANG_HEADER_SIZE as u64,
            ..*dva
        };
        self.validate_dva(&header)?;
        Ok(self.vdevs.top(dva.vdev).expect("validated").clone())
    }

    fn read_header_copy(
        &self,
        top: &crate::vdev::TopVdev,
        child: usize,
        dva: &Dva,
        bp: &BlockPtr,
        index: usize,
        depth: u32,
    ) -> Result<GangHeader, PipelineError> {
        let mut buffer = vec![0u8; GANG_HEADER_SIZE];
        let header_dva = Dva {
            size_allocated: GANG_HEADER_SIZE as u64,
            ..*dva
        };
        self.read_copy(top, child, &header_dva, &mut buffer)
            .map_err(|error| PipelineError::NoGoodCopy {
                bp: format!("gang header <{}:{:#x}>: {error}", dva.vdev, dva.offset),
            })?;
        let header = GangHeader::decode(&buffer, dva.vdev, dva.offset, bp, depth)?;
        self.check_header_accounting(&header, dva, bp.birth_physical, index)?;
        Ok(header)
    }

    /// A header copy's accounting must match its parent's DVA: this header's allocation where
    /// it lies and that copy of every piece.
    fn check_header_accounting(
        &self,
        header: &GangHeader,
        dva: &Dva,
        birth: Txg,
        index: usize,
    ) -> Result<(), PipelineError> {
        let accounted = header.copy_allocated(
            index,
            self.asize_on_at(dva.vdev, header.header_allocated, birth),
        );
        if accounted != dva.size_allocated {
            return Err(BlockError::corrupt(
                "gang header",
                format!(
                    "copy {index} at <{}:{:#x}> accounts {accounted} bytes, the block pointer {}",
                    dva.vdev, dva.offset, dva.size_allocated
                ),
            )
            .into());
        }
        Ok(())
    }

    fn repair_headers(&self, header: &GangHeader, bad: &[BadCopy]) -> Repaired {
        let mut repaired = Repaired::default();
        for (dva, top, child, birth) in bad {
            let encoded = header.encode(dva.vdev, dva.offset);
            let physical = &encoded[..GANG_HEADER_SIZE];
            match top.rewrite_child(*child, dva.offset, encoded.len() as u64, *birth, physical) {
                Ok(bytes) => repaired.add(bytes),
                // The leaf's queue counted the write error; the copy stays bad.
                Err(error) => log::warn!("repair of a bad gang header copy failed: {error}"),
            }
        }
        repaired
    }

    /// A gang's physical bytes: its pieces, each read and verified as a block, joined and
    /// verified against the parent's checksum.
    pub(super) fn read_gang_physical(
        &self,
        bp: &BlockPtr,
        repair: bool,
    ) -> Result<Vec<u8>, PipelineError> {
        self.read_gang_physical_at(bp, repair, 1)
    }

    /// [`BlockIo::read_gang_physical`] of a gang whose header is at `depth`.
    fn read_gang_physical_at(
        &self,
        bp: &BlockPtr,
        repair: bool,
        depth: u32,
    ) -> Result<Vec<u8>, PipelineError> {
        let header = self.read_gang_header(bp, repair, depth)?;
        let mut physical = Vec::with_capacity(bp.size_physical as usize);
        for child in &header.children {
            let piece = if child.is_gang() {
                self.read_gang_physical_at(child, repair, depth + 1)?
            } else {
                self.read_physical(child, repair)?
            };
            physical.extend_from_slice(&piece);
        }
        physical.truncate(bp.size_physical as usize);
        if checksum::compute(bp.checksum_type, &physical) != bp.checksum {
            return Err(PipelineError::NoGoodCopy {
                bp: format!("{bp}"),
            });
        }
        Ok(physical)
    }

    /// `verify_all_copies` of a gang: every copy of the header (every DVA, every mirror
    /// child), every copy of every piece, then the whole (the pieces' verified bytes, not read
    /// again: a bad copy is counted once) against the parent's checksum.
    pub(super) fn verify_gang(
        &self,
        bp: &BlockPtr,
        repair: bool,
    ) -> Result<(CopyReport, Vec<u8>), PipelineError> {
        self.verify_gang_at(bp, repair, 1)
    }

    /// [`BlockIo::verify_gang`] of a gang whose header is at `depth`.
    fn verify_gang_at(
        &self,
        bp: &BlockPtr,
        repair: bool,
        depth: u32,
    ) -> Result<(CopyReport, Vec<u8>), PipelineError> {
        let copies = self.read_header_copies(bp, true, depth)?;
        let mut report = CopyReport {
            copies: copies.read,
            bad: copies.bad.len() as u64,
            ..CopyReport::default()
        };
        if repair && !copies.bad.is_empty() && self.is_writable() {
            let repaired = self.repair_headers(&copies.header, &copies.bad);
            report.repaired += repaired.copies;
            report.bytes_repaired += repaired.bytes;
        }
        let header = copies.header;
        let mut physical = Vec::with_capacity(bp.size_physical as usize);
        for child in &header.children {
            let (piece, bytes) = if child.is_gang() {
                self.verify_gang_at(child, repair, depth + 1)?
            } else {
                self.verify_copies(child, repair)?
            };
            report.copies += piece.copies;
            report.bad += piece.bad;
            report.repaired += piece.repaired;
            report.bytes_repaired += piece.bytes_repaired;
            physical.extend_from_slice(&bytes);
        }
        physical.truncate(bp.size_physical as usize);
        if checksum::compute(bp.checksum_type, &physical) != bp.checksum {
            return Err(PipelineError::NoGoodCopy {
                bp: format!("{bp}"),
            });
        }
        Ok((report, physical))
    }

    /// Every extent a block holds on disk: its DVAs, or for a gang every header copy and,
    /// recursively, every piece's extents (read from the header). Used to free a block and by
    /// `check` to claim it.
    pub fn allocated_extents(
        &self,
        bp: &BlockPtr,
    ) -> Result<Vec<(VdevId, u64, u64)>, PipelineError> {
        let mut extents = Vec::new();
        self.collect_extents(bp, &mut extents, 1)?;
        Ok(extents)
    }

    /// Extents of `bp`, a block whose gang header (if it is a gang) is at `depth`.
    fn collect_extents(
        &self,
        bp: &BlockPtr,
        out: &mut Vec<(VdevId, u64, u64)>,
        depth: u32,
    ) -> Result<(), PipelineError> {
        if !bp.is_gang() {
            out.extend(
                bp.copies()
                    .map(|dva| (dva.vdev, dva.offset, dva.size_allocated)),
            );
            return Ok(());
        }
        let header = self.read_gang_header(bp, false, depth)?;
        for dva in bp.copies() {
            out.push((
                dva.vdev,
                dva.offset,
                self.asize_on_at(dva.vdev, header.header_allocated, bp.birth_physical),
            ));
        }
        for child in &header.children {
            self.collect_extents(child, out, depth + 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::blkptr::{ChecksumType, ObjectType};
    use proptest::prelude::*;

    fn parent(size_physical: u32) -> BlockPtr {
        let mut bp = BlockPtr::hole(Txg(9), ObjectType::PlainFile, 0);
        bp.size_logical = size_physical;
        bp.size_physical = size_physical;
        bp.checksum_type = ChecksumType::Fletcher4;
        bp.birth_physical = Txg(9);
        bp.fill_count = 1;
        bp
    }

    fn header(pieces: &[u32]) -> GangHeader {
        let children = pieces
            .iter()
            .enumerate()
            .map(|(index, &length)| {
                let mut child = parent(length);
                child.dvas[0] = Dva {
                    vdev: VdevId(0),
                    offset: (index as u64 + 1) << 20,
                    size_allocated: length as u64,
                    gang: false,
                };
                child
            })
            .collect();
        GangHeader {
            header_allocated: 4096,
            birth: Txg(9),
            children,
        }
    }

    #[test]
    fn header_round_trips_and_is_bound_to_its_location() {
        let header = header(&[8192, 8192, 4096]);
        let bytes = header.encode(VdevId(0), 0x10000);
        let decoded = GangHeader::decode(&bytes, VdevId(0), 0x10000, &parent(20000), 1).unwrap();
        assert_eq!(decoded, header);
        assert_eq!(decoded.copy_allocated(0, 4096), 4096 + 8192 + 8192 + 4096);
        // The same bytes read from another place are not this header.
        assert!(GangHeader::decode(&bytes, VdevId(0), 0x20000, &parent(20000), 1).is_err());
        assert!(GangHeader::decode(&bytes, VdevId(1), 0x10000, &parent(20000), 1).is_err());
        // Pieces shorter than the block, or another birth, are refused.
        assert!(GangHeader::decode(&bytes, VdevId(0), 0x10000, &parent(30000), 1).is_err());
        let mut other_birth = parent(20000);
        other_birth.birth_physical = Txg(10);
        other_birth.birth_logical = Txg(10);
        assert!(GangHeader::decode(&bytes, VdevId(0), 0x10000, &other_birth, 1).is_err());
    }

    #[test]
    fn most_children_fit() {
        let pieces = vec![4096u32; GANG_CHILDREN_MAX];
        let header = header(&pieces);
        let bytes = header.encode(VdevId(0), 0);
        assert_eq!(
            GangHeader::decode(&bytes, VdevId(0), 0, &parent(4096 * 31), 1)
                .unwrap()
                .children
                .len(),
            GANG_CHILDREN_MAX
        );
    }

    /// A piece that is itself a gang is accepted only above the deepest header level, so that
    /// no walk of a gang tree, however crafted, goes deeper than [`GANG_DEPTH_MAX`] headers.
    #[test]
    fn a_gang_piece_is_refused_at_the_deepest_level() {
        let mut nested = header(&[8192, 8192]);
        nested.children[1].dvas[0].gang = true;
        let bytes = nested.encode(VdevId(0), 0x10000);
        for depth in 1..GANG_DEPTH_MAX {
            assert!(GangHeader::decode(&bytes, VdevId(0), 0x10000, &parent(16384), depth).is_ok());
        }
        let error = GangHeader::decode(&bytes, VdevId(0), 0x10000, &parent(16384), GANG_DEPTH_MAX)
            .unwrap_err();
        assert!(error.to_string().contains("deepest level"), "{error}");
        // Plain pieces are fine at every level; no header lies outside 1..=GANG_DEPTH_MAX.
        let plain = header(&[8192, 8192]).encode(VdevId(0), 0x10000);
        assert!(
            GangHeader::decode(&plain, VdevId(0), 0x10000, &parent(16384), GANG_DEPTH_MAX).is_ok()
        );
        for depth in [0, GANG_DEPTH_MAX + 1] {
            assert!(GangHeader::decode(&plain, VdevId(0), 0x10000, &parent(16384), depth).is_err());
        }
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn decoding_damaged_headers_never_panics(
            flips in proptest::collection::vec((0usize..GANG_HEADER_SIZE, any::<u8>()), 1..8),
        ) {
            let header = header(&[8192, 4096]);
            let mut bytes = header.encode(VdevId(0), 0x4000);
            for (at, value) in flips {
                bytes[at] ^= value | 1;
            }
            // Any change is caught (the checksum covers every byte) and nothing panics.
            prop_assert!(GangHeader::decode(&bytes, VdevId(0), 0x4000, &parent(12000), 1).is_err());
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let _ = GangHeader::decode(&bytes, VdevId(0), 0, &parent(4096), 1);
        }
    }
}
