//! RAID-Z column map: where each sector of a block lives on the children.
//!
//! # What this computes
//!
//! A RAID-Z vdev with `children` (OpenZFS `dcols`) child devices, `parity`
//! (`nparity`, 1..=3) parity columns and sector size `1 << ashift` exposes one
//! linear address space. A block of `psize` bytes written at `offset` in that
//! space is split into *columns*, one per child at most: `parity` parity
//! columns followed by the data columns, followed (for small blocks) by
//! zero-sized *skip columns*. This module reproduces OpenZFS's
//! `vdev_raidz_map_alloc()` (the single-row, non-expanded map) and
//! `vdev_raidz_psize_to_asize()` exactly, including the RAID-Z1 parity swap
//! every 1 MiB and the placement of the padding ("skip") sectors.
//!
//! # Layout
//!
//! The linear address space is laid across the children row by row: linear
//! sector `x` lives on child `x % children` at sector `x / children` of that
//! child's data area. A block starting at linear sector `b` begins on child
//! `f = b % children`, row `o = b / children`. Column `c` of the map sits on
//! child `(f + c) % children`; if that wraps past the last child it starts one
//! row lower. Each column then runs *down* its child. Example: 5 children,
//! RAID-Z1, a 7-sector block (`q = 1` full data rows, `r = 3` remainder
//! sectors, `bc = r + parity = 4` "big" columns), starting at `f = 2`:
//!
//! ```text
//!              child 0   child 1   child 2   child 3   child 4
//!   row o      .......   .......   P0        D0[0]     D1[0]
//!   row o+1    D2[0]     D3[0]     P0        D0[1]     D1[1]
//!   row o+2    D2[1]     D3 skip   .......   .......   .......
//!
//!   columns: c=0 P0 (child 2, off o, 2 sectors)   c=1 D0 (child 3, off o, 2)
//!            c=2 D1 (child 4, off o, 2)           c=3 D2 (child 0, off o+1, 2)
//!            c=4 D3 (child 1, off o+1, 1) + one skip sector below it
//! ```
//!
//! Data fills the data columns in order (`D0` takes the first `size` bytes of
//! the block, then `D1`, ...); the first `bc - parity` data columns are one
//! sector longer than the rest, and every parity column is as long as the
//! longest data column. Parity plus data occupy `tot` sectors; `tot` is
//! rounded up to a multiple of `parity + 1` with *skip sectors* so that free
//! space is never fragmented into holes too small for the smallest block
//! (which always needs `parity + 1` sectors). The allocated size `asize` is
//! exactly the linear sector range `[b, b + asize_sectors)`, which is why two
//! blocks allocated back to back never share a sector on any child.
//!
//! When the block is narrower than the vdev (`q == 0`), only `bc` columns carry
//! data (`acols`), and up to `roundup(bc, parity + 1)` columns (`scols`, capped
//! at `children`) are listed; the extra ones have size 0 and stand for skip
//! sectors. Skip sectors that do not fit in the first row wrap onto the parity
//! columns, one row below their last sector.
//!
//! For RAID-Z1 only, if bit 20 of `offset` is set (the block starts in an odd
//! MiB of the vdev), the child and offset of column 0 (parity) and column 1
//! (first data column) are swapped. This is an on-disk format requirement of
//! OpenZFS (historically meant to spread parity I/O).
//!
//! # Invariants (checked by the tests)
//!
//! * at most one column of a map lands on a given child;
//! * sum of column sizes + `skip_sectors << ashift == asize`;
//! * sum of data column sizes `== psize`;
//! * the columns and skip sectors of a map cover exactly the linear sectors
//!   `[offset, offset + asize)`, so back-to-back allocations never overlap.
//!
//! # Cost
//!
//! `map` is O(min(children, psize sectors + parity)) and allocates two small
//! vectors; `asize` is O(1).

use std::ops::Range;

/// Shape of a RAID-Z vdev: number of children, parity level and sector shift.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RaidzGeometry {
    /// Number of child devices (OpenZFS `dcols`, the logical width).
    pub children: usize,
    /// Number of parity columns, 1..=3.
    pub parity: usize,
    /// log2 of the sector size (OpenZFS `ashift`), 9..=16.
    pub ashift: u32,
}

/// One column of a RAID-Z map: a run of consecutive sectors on one child.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Column {
    /// Index of the child device.
    pub child: usize,
    /// Byte offset of the column in the child's data area.
    pub child_offset: u64,
    /// Length in bytes; 0 for a skip column.
    pub size: u64,
}

/// The column map of one block (OpenZFS `raidz_map_t` with a single row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaidzMap {
    /// Parity columns first (`0..parity`), then the data columns, then skip
    /// columns of size 0.
    pub columns: Vec<Column>,
    /// Number of parity columns (OpenZFS `rr_firstdatacol`).
    pub parity: usize,
    /// Number of data columns (OpenZFS `rr_cols - rr_firstdatacol`).
    pub data_columns: usize,
    /// Number of "big" columns, parity included, that hold one sector more
    /// than the others (OpenZFS `rr_bigcols`); 0 when all are equal.
    pub big_columns: usize,
    /// Number of padding sectors (OpenZFS `rm_nskip`).
    pub skip_sectors: u64,
    /// Where the skip sectors lie: one entry per skip sector, each of size one
    /// sector, on distinct children. OpenZFS writes zeros there only to help
    /// I/O aggregation; their content is never read back.
    pub skip_spans: Vec<Column>,
    /// Allocated size in bytes (equal to `RaidzGeometry::asize(psize)`).
    pub asize: u64,
    /// Sector size in bytes (`1 << ashift`).
    pub sector_size: u64,
}

impl RaidzGeometry {
    /// Builds a geometry; see [`RaidzGeometry::is_valid`] for the limits.
    ///
    /// # Panics
    /// Panics if the geometry is not valid.
    pub fn new(children: usize, parity: usize, ashift: u32) -> Self {
        let g = RaidzGeometry {
            children,
            parity,
            ashift,
        };
        assert!(g.is_valid(), "invalid RAID-Z geometry {g:?}");
        g
    }

    /// True if `parity` is 1..=3, `parity < children <= 255` and `ashift` is
    /// 9..=16 (the limits OpenZFS enforces; 255 keeps the GF(2^8) parity
    /// coefficients of the data columns distinct).
    pub fn is_valid(&self) -> bool {
        (1..=3).contains(&self.parity)
            && self.children > self.parity
            && self.children <= 255
            && (9..=16).contains(&self.ashift)
    }

    /// Sector size in bytes.
    pub fn sector_size(&self) -> u64 {
        1u64 << self.ashift
    }

    /// Allocated size for a block of `psize` bytes (OpenZFS
    /// `vdev_raidz_psize_to_asize`): data sectors, plus `parity` sectors per
    /// started row of data, rounded up to a multiple of `parity + 1` sectors.
    /// Returns 0 for `psize == 0`.
    pub fn asize(&self, psize: u64) -> u64 {
        let ndata = (self.children - self.parity) as u64;
        let p = self.parity as u64;
        let mut sectors = psize.div_ceil(self.sector_size());
        sectors += p * sectors.div_ceil(ndata);
        (sectors.div_ceil(p + 1) * (p + 1)) << self.ashift
    }

    /// OpenZFS `vdev_deflate_ratio`: `(1 << 17) / (asize(1 << 17) >> 9)`,
    /// the factor that turns allocated space into "usable" space accounting.
    pub fn deflate_ratio(&self) -> u64 {
        (1u64 << 17) / (self.asize(1 << 17) >> 9)
    }

    /// Sum of the data column sizes of `map` (equals the block's psize).
    pub fn data_bytes(&self, map: &RaidzMap) -> u64 {
        map.data_bytes()
    }

    /// Column map of a block of `psize` bytes at `offset` in the vdev's
    /// linear address space (OpenZFS `vdev_raidz_map_alloc`).
    ///
    /// # Panics
    /// Panics if the geometry is invalid, if `psize` is 0, or if `offset` or
    /// `psize` is not a multiple of the sector size.
    pub fn map(&self, offset: u64, psize: u64) -> RaidzMap {
        assert!(self.is_valid(), "invalid RAID-Z geometry {self:?}");
        let sector = self.sector_size();
        assert!(psize > 0, "RAID-Z map of an empty block");
        assert!(
            offset.is_multiple_of(sector) && psize.is_multiple_of(sector),
            "offset {offset} / psize {psize} not sector-aligned (ashift {})",
            self.ashift
        );
        let dcols = self.children as u64;
        let p = self.parity as u64;
        let b = offset >> self.ashift;
        let s = psize >> self.ashift;
        let f = b % dcols;
        let o = (b / dcols) << self.ashift;
        let q = s / (dcols - p);
        let r = s - q * (dcols - p);
        let bc = if r == 0 { 0 } else { r + p };
        let tot = s + p * (q + u64::from(r != 0));
        let (acols, scols) = if q == 0 {
            (bc, dcols.min(bc.div_ceil(p + 1) * (p + 1)))
        } else {
            (dcols, dcols)
        };

        let mut columns = Vec::with_capacity(scols as usize);
        for c in 0..scols {
            let mut col = f + c;
            let mut coff = o;
            if col >= dcols {
                col -= dcols;
                coff += sector;
            }
            let size = if c >= acols {
                0
            } else if c < bc {
                (q + 1) << self.ashift
            } else {
                q << self.ashift
            };
            columns.push(Column {
                child: col as usize,
                child_offset: coff,
                size,
            });
        }
        let nskip = tot.div_ceil(p + 1) * (p + 1) - tot;

        // Skip sector k follows the last sector of (pre-swap) column
        // (bc + k) % scols: the linear sectors tot .. tot + nskip of the block.
        // Columns 0 and 1 have equal sizes, so the RAID-Z1 swap below moves no
        // skip sector physically; computing them first is exact.
        let skip_spans = (0..nskip)
            .map(|k| {
                let c = &columns[((bc + k) % scols) as usize];
                Column {
                    child: c.child,
                    child_offset: c.child_offset + c.size,
                    size: sector,
                }
            })
            .collect();

        if p == 1 && offset & (1 << 20) != 0 {
            debug_assert_eq!(columns[0].size, columns[1].size);
            let (a, bcol) = (columns[0], columns[1]);
            columns[0].child = bcol.child;
            columns[0].child_offset = bcol.child_offset;
            columns[1].child = a.child;
            columns[1].child_offset = a.child_offset;
        }

        RaidzMap {
            columns,
            parity: self.parity,
            data_columns: (acols - p) as usize,
            big_columns: bc as usize,
            skip_sectors: nskip,
            skip_spans,
            asize: (tot + nskip) << self.ashift,
            sector_size: sector,
        }
    }
}

impl RaidzMap {
    /// Number of columns that carry parity or data (OpenZFS `rr_cols`).
    pub fn accessed_columns(&self) -> usize {
        self.parity + self.data_columns
    }

    /// The parity columns (`0..parity`).
    pub fn parity_columns(&self) -> &[Column] {
        &self.columns[..self.parity]
    }

    /// The data columns, in block order.
    pub fn data_column_slice(&self) -> &[Column] {
        &self.columns[self.parity..self.accessed_columns()]
    }

    /// Size in bytes of every parity column (that of the first, largest, data
    /// column).
    pub fn parity_size(&self) -> u64 {
        self.columns[0].size
    }

    /// Sum of the data column sizes (equals the block's psize).
    pub fn data_bytes(&self) -> u64 {
        self.data_column_slice().iter().map(|c| c.size).sum()
    }

    /// Byte range of data column `index` (0-based among data columns) inside
    /// the contiguous block buffer: data column `i` takes the `size` bytes
    /// following data column `i - 1`.
    ///
    /// # Panics
    /// Panics if `index >= data_columns`.
    pub fn data_column_range(&self, index: usize) -> Range<usize> {
        assert!(
            index < self.data_columns,
            "data column {index} out of range"
        );
        let cols = self.data_column_slice();
        let start: u64 = cols[..index].iter().map(|c| c.size).sum();
        start as usize..(start + cols[index].size) as usize
    }

    /// Byte ranges of all data columns inside the block buffer, in order.
    pub fn data_column_ranges(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        let mut start = 0usize;
        self.data_column_slice().iter().map(move |c| {
            let r = start..start + c.size as usize;
            start = r.end;
            r
        })
    }

    /// Index into `columns` of the column placed on `child` (skip columns
    /// included), if any. A map never places two columns on one child.
    pub fn column_on_child(&self, child: usize) -> Option<usize> {
        self.columns.iter().position(|c| c.child == child)
    }

    /// `(child_offset, size)` of the parity or data column on `child`, if
    /// that child holds one (skip columns of size 0 are not reported).
    pub fn child_span(&self, child: usize) -> Option<(u64, u64)> {
        self.columns[..self.accessed_columns()]
            .iter()
            .find(|c| c.child == child)
            .map(|c| (c.child_offset, c.size))
    }

    /// `(child_offset, size)` of the skip sector on `child`, if one of this
    /// map's skip sectors falls there (at most one does).
    pub fn skip_span(&self, child: usize) -> Option<(u64, u64)> {
        self.skip_spans
            .iter()
            .find(|c| c.child == child)
            .map(|c| (c.child_offset, c.size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeSet, HashSet};

    fn col(child: usize, child_offset: u64, size: u64) -> Column {
        Column {
            child,
            child_offset,
            size,
        }
    }

    #[test]
    fn diagram_example() {
        // 5 children, raidz1, ashift 9, 7 sectors at linear sector 12 (f = 2, o = 2).
        let g = RaidzGeometry::new(5, 1, 9);
        let m = g.map(12 * 512, 7 * 512);
        let o = 2 * 512;
        assert_eq!(
            m.columns,
            vec![
                col(2, o, 1024),
                col(3, o, 1024),
                col(4, o, 1024),
                col(0, o + 512, 1024),
                col(1, o + 512, 512),
            ]
        );
        assert_eq!(m.big_columns, 4);
        assert_eq!(m.data_columns, 4);
        assert_eq!(m.skip_sectors, 1);
        assert_eq!(m.skip_spans, vec![col(1, o + 1024, 512)]);
        assert_eq!(m.asize, 10 * 512);
        assert_eq!(g.asize(7 * 512), 10 * 512);
        assert_eq!(m.data_column_range(3), 3072..3584);
        assert_eq!(m.child_span(0), Some((o + 512, 1024)));
        assert_eq!(m.skip_span(1), Some((o + 1024, 512)));
        assert_eq!(m.skip_span(0), None);
    }

    #[test]
    fn raidz1_swap_at_odd_mib() {
        let g = RaidzGeometry::new(4, 1, 12);
        let base = 1u64 << 20; // bit 20 set
        let m = g.map(base, 3 * 4096);
        let n = g.map(0, 3 * 4096);
        // Same relative layout except columns 0 and 1 are exchanged.
        let fb = (base >> 12) % 4;
        assert_eq!(fb, 0);
        assert_eq!(m.columns[0].child, n.columns[1].child);
        assert_eq!(m.columns[1].child, n.columns[0].child);
        assert_eq!(m.columns[0].size, m.columns[1].size);
        // Just below the boundary: no swap; at 2 MiB: no swap.
        let below = g.map(base - 4096, 4096);
        assert_eq!(below.columns[0].child, ((base / 4096 - 1) % 4) as usize);
        let two = g.map(2 << 20, 4096);
        assert_eq!(two.columns[0].child, 0);
        let odd = g.map(1 << 20, 4096);
        assert_eq!(odd.columns[0].child, 1);
        assert_eq!(odd.columns[1].child, 0);
        // raidz2 never swaps.
        let g2 = RaidzGeometry::new(6, 2, 12);
        assert_eq!(g2.map(1 << 20, 4096).columns[0].child, 256 % 6);
    }

    #[test]
    fn one_sector_blocks() {
        for parity in 1..=3 {
            for children in parity + 1..=12 {
                for ashift in [9, 12, 16] {
                    let g = RaidzGeometry::new(children, parity, ashift);
                    let sector = 1u64 << ashift;
                    assert_eq!(g.asize(sector), (parity as u64 + 1) * sector);
                    assert_eq!(g.asize(1), (parity as u64 + 1) * sector);
                    let m = g.map(7 * sector, sector);
                    assert_eq!(m.data_columns, 1);
                    assert_eq!(m.skip_sectors, 0);
                    assert_eq!(m.asize, g.asize(sector));
                    assert!(m.columns.iter().all(|c| c.size == sector));
                }
            }
        }
    }

    #[test]
    fn asize_and_deflate_known_values() {
        // raidz1 of 5 children, 4K sectors, 128K block: 32 data + 8 parity.
        let g = RaidzGeometry::new(5, 1, 12);
        assert_eq!(g.asize(128 << 10), 40 * 4096);
        // raidz2 of 6, 512-byte sectors: 256 data sectors, 128 parity.
        let g = RaidzGeometry::new(6, 2, 9);
        assert_eq!(g.asize(128 << 10), 384 * 512);
        assert_eq!(g.deflate_ratio(), 512 * 256 / 384);
        // raidz1 of 3, 4K: 3 sectors -> 3 + 2 parity = 5 -> padded to 6.
        let g = RaidzGeometry::new(3, 1, 12);
        assert_eq!(g.asize(3 * 4096), 6 * 4096);
        assert_eq!(g.deflate_ratio(), (1 << 17) / ((48 * 4096) >> 9));
        // raidz3 of 4, 16 data sectors -> 16 + 48 = 64 (multiple of 4).
        let g = RaidzGeometry::new(4, 3, 12);
        assert_eq!(g.asize(16 * 4096), 64 * 4096);
        assert_eq!(g.asize(0), 0);
    }

    #[test]
    fn narrow_block_skip_columns() {
        // raidz2 of 10, 2 data sectors: bc = 4, scols = roundup(4, 3) = 6.
        let g = RaidzGeometry::new(10, 2, 9);
        let m = g.map(3 * 512, 1024);
        assert_eq!(m.columns.len(), 6);
        assert_eq!(m.data_columns, 2);
        assert_eq!(m.skip_sectors, 2);
        assert_eq!(m.columns[4].size, 0);
        assert_eq!(m.columns[5].size, 0);
        assert_eq!(m.skip_spans[0], col(m.columns[4].child, 0, 512));
        assert_eq!(m.asize, 6 * 512);
        assert_eq!(m.child_span(m.columns[4].child), None);
        assert_eq!(m.column_on_child(m.columns[5].child), Some(5));
        // raidz2 of 5, 2 data sectors at f = 3: scols = min(5, 6) = 5, the
        // sixth sector wraps onto parity column 0 one row down.
        let g = RaidzGeometry::new(5, 2, 9);
        let m = g.map(3 * 512, 1024);
        assert_eq!(m.columns.len(), 5);
        assert_eq!(m.skip_sectors, 2);
        assert_eq!(m.skip_spans[0], col(2, 512, 512));
        assert_eq!(m.skip_spans[1], col(3, 512, 512));
    }

    /// All (child, sector) cells of a map: columns and skip sectors.
    fn cells(g: &RaidzGeometry, m: &RaidzMap) -> Vec<(usize, u64)> {
        let mut v = Vec::new();
        for c in m.columns.iter().chain(m.skip_spans.iter()) {
            let first = c.child_offset >> g.ashift;
            for s in 0..c.size >> g.ashift {
                v.push((c.child, first + s));
            }
        }
        v
    }

    fn check_map(g: &RaidzGeometry, offset: u64, psize: u64) -> RaidzMap {
        let m = g.map(offset, psize);
        let sector = g.sector_size();
        assert_eq!(m.asize, g.asize(psize));
        assert_eq!(g.data_bytes(&m), psize);
        let total: u64 = m.columns.iter().map(|c| c.size).sum();
        assert_eq!(total + m.skip_sectors * sector, m.asize);
        assert_eq!(m.asize % ((g.parity as u64 + 1) * sector), 0);
        // Parity columns have the size of the first data column, data sizes
        // are non-increasing, and only skip columns are empty.
        let first = m.columns[m.parity].size;
        assert!(m.parity_columns().iter().all(|c| c.size == first));
        let d = m.data_column_slice();
        assert!(d.windows(2).all(|w| w[0].size >= w[1].size));
        assert!(d.iter().all(|c| c.size > 0));
        assert!(first - d.last().unwrap().size <= sector);
        assert!(m.columns[m.accessed_columns()..]
            .iter()
            .all(|c| c.size == 0));
        // One column per child, one skip sector per child.
        let children: HashSet<usize> = m.columns.iter().map(|c| c.child).collect();
        assert_eq!(children.len(), m.columns.len());
        let skip_children: HashSet<usize> = m.skip_spans.iter().map(|c| c.child).collect();
        assert_eq!(skip_children.len(), m.skip_spans.len());
        assert_eq!(m.skip_spans.len() as u64, m.skip_sectors);
        for (i, c) in m.columns.iter().enumerate() {
            assert_eq!(m.column_on_child(c.child), Some(i));
            if c.size > 0 {
                assert_eq!(m.child_span(c.child), Some((c.child_offset, c.size)));
            }
        }
        // Data ranges tile the block buffer.
        let ranges: Vec<_> = m.data_column_ranges().collect();
        assert_eq!(ranges.len(), m.data_columns);
        for (i, r) in ranges.iter().enumerate() {
            assert_eq!(*r, m.data_column_range(i));
            assert_eq!(r.len() as u64, d[i].size);
        }
        assert_eq!(ranges.last().unwrap().end as u64, psize);
        // Exact coverage of the linear sectors [b, b + asize).
        let b = offset >> g.ashift;
        let n = g.children as u64;
        let got: BTreeSet<(usize, u64)> = cells(g, &m).into_iter().collect();
        assert_eq!(
            got.len() as u64,
            m.asize >> g.ashift,
            "a cell is used twice"
        );
        let want: BTreeSet<(usize, u64)> = (b..b + (m.asize >> g.ashift))
            .map(|x| ((x % n) as usize, x / n))
            .collect();
        assert_eq!(got, want);
        m
    }

    #[test]
    fn exhaustive_small() {
        for parity in 1..=3 {
            for children in parity + 1..=9 {
                let g = RaidzGeometry::new(children, parity, 9);
                for s in 1..=40u64 {
                    for b in [0u64, 1, 2, 5, 2047, 2048, 2049, 4095] {
                        check_map(&g, b * 512, s * 512);
                    }
                }
            }
        }
    }

    #[test]
    fn large_blocks() {
        for (children, parity, ashift) in [(6, 2, 9), (12, 3, 12), (24, 1, 16), (255, 3, 9)] {
            let g = RaidzGeometry::new(children, parity, ashift);
            for psize in [1u64 << 20, 16 << 20, (16 << 20) - (1 << ashift)] {
                check_map(&g, ((1 << 20) - 3 * (1 << ashift)) as u64, psize);
            }
        }
    }

    fn geometry() -> impl Strategy<Value = RaidzGeometry> {
        (1usize..=3, 9u32..=16, prop::bool::weighted(0.1)).prop_flat_map(
            |(parity, ashift, wide)| {
                let hi = if wide { 255 } else { 24 };
                (parity + 2..=hi).prop_map(move |children| RaidzGeometry {
                    children,
                    parity,
                    ashift,
                })
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn back_to_back_never_overlap(
            g in geometry(),
            start in 0u64..(1 << 14),
            sizes in prop::collection::vec(1u64..=256, 1..12),
            big in prop::collection::vec(any::<bool>(), 12),
        ) {
            let sector = g.sector_size();
            // Start near the 1 MiB boundary for some cases.
            let mut offset = if start % 2 == 0 {
                start * sector
            } else {
                ((1u64 << 20) / sector).saturating_sub(start % 64) * sector
            };
            let mut used: HashSet<(usize, u64)> = HashSet::new();
            for (i, s) in sizes.iter().enumerate() {
                // Occasionally a large block (up to 16 MiB).
                let sectors = if big[i] && s % 8 == 0 { (s * 257).min((16 << 20) / sector) } else { *s };
                let psize = sectors * sector;
                let m = check_map(&g, offset, psize);
                for cell in cells(&g, &m) {
                    prop_assert!(used.insert(cell), "overlap at {:?}", cell);
                }
                offset += g.asize(psize);
            }
        }

        #[test]
        fn map_invariants(g in geometry(), b in 0u64..(1 << 24), s in 1u64..2000) {
            check_map(&g, b << g.ashift, s << g.ashift);
        }
    }
}
