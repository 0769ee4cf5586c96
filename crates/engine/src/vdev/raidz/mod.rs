//! RAID-Z top-level vdevs: a block's data in columns across the children, with one to three
//! columns of parity (OpenZFS `vdev_raidz.c`).
//!
//! # Overview
//!
//! A RAID-Z vdev of `n` children with `p` parity columns has one address space of `n` times a
//! child's data area, striped sector by sector: sector `b` of the vdev is sector `b / n` of
//! child `b % n`. A block of `psize` bytes at vdev offset `o` is cut into `n - p` data columns
//! (or fewer, for a small block) beside `p` parity columns, each column on its own child
//! ([`map`]); every block has its own stripe width, so a block is always written whole and
//! there is no read-modify-write and no write hole. Allocations are rounded up to a multiple
//! of `p + 1` sectors ([`RaidzGeometry::asize`]) so that no free gap too small for any block
//! remains. Parity is OpenZFS's: P is the XOR of the data columns, Q and R Reed-Solomon
//! syndromes over GF(2^8) with generators 2 and 4 ([`math`]).
//!
//! ```text
//!   raidz1 of 4 children, a 5-sector block at vdev sector 8 (child 0, row 2):
//!              child 0   child 1   child 2   child 3
//!   row 2      P0        D0        D2        D4        (parity row 2, data columns D0..)
//!   row 3      P1        D1        D3        skip      P and big columns one sector longer
//! ```
//!
//! # Reads that heal
//!
//! `tree/raidz_io.rs` does the I/O. Its `read_block` reads the data columns only; if they all read and the caller's `verify` (the
//! block's checksum) passes, that is the whole read. Otherwise it reads the parity as well and
//! reconstructs: first with the columns known to be missing (a child that is offline, missing,
//! failed its read, or whose dirty time log holds the block's birth: it missed the write),
//! then, when that does not verify, with every combination of further columns assumed bad, up
//! to `p` in all (OpenZFS's combinatorial reconstruction). A column that had to be assumed bad
//! to verify held silently wrong bytes: its child is charged a checksum error. The caller
//! rewrites the columns found bad (`rewrite_column`, or `rewrite_column_async` for a
//! resilver). A scrub reads every column and also compares the parity with what the data gives.
//! The data columns are read into consecutive ranges of one buffer, which is the block's data
//! as returned (no join, no copy), and the known-missing columns are rebuilt in place; only a
//! guess beyond them works on a copy. The buffers come from `vdev::buffers`, used again.
//!
//! # Writes
//!
//! `write_async` writes every column with size through its child's queue (a data column
//! straight from the block's buffer, a parity column from its own); a child that fails
//! or is offline logs the txg in its dirty time log (the basis of resilver, as for a mirror
//! child), and the write fails only when more columns than `p` missed it.
//!
//! # Invariants
//!
//! - A block's map depends only on (vdev offset, psize rounded up to the vdev's sector), the
//!   vdev's geometry and the width the block was written with, which follows from its physical
//!   birth ([`widths`]), so that the reader builds the writer's map from the block pointer.
//!   Where the map's sectors lie also depends on an expansion's copy, if one runs
//!   ([`placement`]).
//! - Two blocks allocated apart never share a sector of any child ([`map`]'s property).
//!
//! # Cost
//!
//! A healthy read: one read per data column, all issued at once. A write: one copy of the data
//! into column buffers, parity generation, one write per column.

pub mod expand;
pub mod map;
pub mod math;
pub mod placement;
pub mod progress;
pub mod range_lock;
pub mod reflow;
pub mod widths;

pub use map::{Column, RaidzGeometry, RaidzMap};

/// Where a RAID-Z child's scratch area starts on its device: the boot reserve after the two
/// front labels, `[512 KiB, 4 MiB)`, which nothing else writes (`raidz/placement.rs`).
pub const RAIDZ_SCRATCH_START: u64 = 2 * super::label::VDEV_LABEL_SIZE;

/// Bytes of a RAID-Z child's scratch area.
pub const RAIDZ_SCRATCH_SIZE: u64 = super::label::VDEV_LABEL_START_SIZE - RAIDZ_SCRATCH_START;

/// The map of a block of `psize` physical bytes (rounded up to the vdev's sector) at `offset`.
pub fn block_map(geometry: &RaidzGeometry, offset: u64, psize: u64) -> RaidzMap {
    let sector = geometry.sector_size();
    geometry.map(offset, psize.div_ceil(sector) * sector)
}
