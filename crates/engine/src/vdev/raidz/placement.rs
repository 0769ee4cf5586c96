//! Where each sector of a block lives on a RAID-Z vdev that has been, or is being, expanded
//! (OpenZFS `vdev_raidz_map_alloc_expanded`).
//!
//! # Two widths
//!
//! A block's *logical* map ([`super::RaidzMap`], built with the width the block was written
//! with, `raidz/widths.rs`) fixes what each sector holds: which sectors are parity, which data,
//! and which sectors of the block's range `[b, b + asize)` of the vdev's address space each
//! column takes. Column `c`'s `k`-th sector is address-space sector `x = b + k·w + c` (for a
//! RAID-Z1 block at an odd MiB, columns 0 and 1 trade places, as in the map); the sectors
//! `b + k·w .. b + k·w + cols` are the block's row `k`, whose parity covers its data.
//!
//! *Where* sector `x` lives depends on the vdev's *physical* width `W` and the reflow only: a
//! vdev `W` wide keeps `x` on child `x mod W` at sector `x div W`, so a vdev never expanded
//! (or whose last expansion finished) places the logical map's sectors there. While an
//! expansion runs, the new child is already counted in `W` but only the sectors below the
//! reflow's committed offset `S` have been copied to those places; the rest are still at their
//! old ones, `x mod (W−1)`, `x div (W−1)`.
//!
//! # Rows, not sectors
//!
//! The choice is made per row: a row all of whose sectors are below `S` (counting the last row
//! at full width, as OpenZFS does) is at its new places, any other row at its old ones. A row
//! split between old and new places could put two of its cells on one child, and one lost child
//! would then take two cells of the row, more than RAID-Z1 can rebuild.
//!
//! # Shadows
//!
//! The copy runs ahead of `S`: sectors up to the next offset `N` may already have been copied
//! (their copies are not yet counted by a durable uberblock). A write to such a sector at its
//! old place must also reach its new place, or the copy would hold stale bytes once `S` passes
//! it: that second place is the cell's *shadow* (the reflow's range lock keeps a copy and a
//! write of the same sectors apart, `raidz/expand.rs`).
//!
//! # Scratch
//!
//! The first rows' new places overlap old places not yet copied, so the reflow writes them
//! through a scratch area first ([`super::progress::ScratchState::Valid`]); while it is valid
//! the rows below `S` are read from it.
//!
//! # Invariants (property tests below)
//!
//! - A vdev not expanding, read at the width its blocks were written, gives the logical map's
//!   own places (the contiguous path of `tree/raidz_io.rs`).
//! - No two cells of a row share a child, in either layout.
//! - The cells are exactly the block's parity and data sectors, each once.
//! - Two blocks allocated apart never share a place, shadows included, once the reflow is past
//!   the scratch rows.
//!
//! # Cost
//!
//! One entry per sector of the block: O(psize / sector). Used only for blocks whose width
//! differs from the vdev's or while a reflow runs; the others keep the per-column path.

use super::RaidzMap;

/// The reflow's state as one I/O sees it (read under the reflow's range lock, `raidz/expand.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReflowView {
    /// Sectors of the address space whose copies a durable uberblock counts (`S`).
    pub synced: u64,
    /// Sectors whose copy has been issued (`N ≥ S`): an old place below it has a shadow.
    pub next: u64,
    /// The rows below `synced` are in the scratch area (the uberblock's scratch state).
    pub scratch: bool,
}

/// A place on a child: sector `sector` of its data area, or of its scratch area.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    pub child: usize,
    pub sector: u64,
    pub in_scratch: bool,
}

impl Place {
    /// Its byte offset on the child's device: in the data area (after the front labels and
    /// the boot reserve) or in the scratch area (the boot reserve).
    pub fn device_offset(&self, sector_size: u64) -> u64 {
        let base = if self.in_scratch {
            super::RAIDZ_SCRATCH_START
        } else {
            crate::vdev::label::VDEV_LABEL_START_SIZE
        };
        base + self.sector * sector_size
    }
}

/// One parity or data sector of a block, and where it lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    /// Index of its column in the logical map (parity first).
    pub column: usize,
    /// Its index within that column (the block's row).
    pub row: u64,
    /// Its address-space sector (`b + row·w + c`).
    pub sector: u64,
    /// Where it is read, and written.
    pub place: Place,
    /// Where a write also goes: its new place, when that was copied but is not yet counted.
    pub shadow: Option<Place>,
}

/// The sector `x` of an address space laid `width` wide: child `x mod width`, sector `x div
/// width`.
fn laid(x: u64, width: usize, in_scratch: bool) -> Place {
    Place {
        child: (x % width as u64) as usize,
        sector: x / width as u64,
        in_scratch,
    }
}

/// The cells of `map` (a block of logical width `width` at `offset`), on a vdev `physical_width`
/// wide, with `reflow` while an expansion runs (`physical_width` then counts the new child).
pub fn cells(
    map: &RaidzMap,
    offset: u64,
    width: usize,
    physical_width: usize,
    reflow: Option<&ReflowView>,
) -> Vec<Cell> {
    let sector_size = map.sector_size;
    let first = offset / sector_size;
    let accessed = &map.columns[..map.accessed_columns()];
    let total: u64 = accessed
        .iter()
        .map(|column| column.size / sector_size)
        .sum();
    let row_width = total.min(width as u64);
    let mut cells = Vec::with_capacity(total as usize);
    for (index, column) in accessed.iter().enumerate() {
        let column_row = column.child_offset / sector_size;
        for row in 0..column.size / sector_size {
            let x = (column_row + row) * width as u64 + column.child as u64;
            let row_start = first + (x - first) / width as u64 * width as u64;
            let (place, shadow) = match reflow {
                None => (laid(x, physical_width, false), None),
                Some(view) if row_start + row_width > view.synced => (
                    laid(x, physical_width - 1, false),
                    (x < view.next).then(|| laid(x, physical_width, false)),
                ),
                Some(view) => (laid(x, physical_width, view.scratch), None),
            };
            cells.push(Cell {
                column: index,
                row,
                sector: x,
                place,
                shadow,
            });
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::super::RaidzGeometry;
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn map(width: usize, parity: usize, ashift: u32, b: u64, sectors: u64) -> RaidzMap {
        RaidzGeometry::new(width, parity, ashift).map(b << ashift, sectors << ashift)
    }

    /// The places the logical map itself names, column by column.
    fn contiguous(map: &RaidzMap) -> Vec<Place> {
        map.columns[..map.accessed_columns()]
            .iter()
            .flat_map(|column| {
                (0..column.size / map.sector_size).map(move |k| Place {
                    child: column.child,
                    sector: column.child_offset / map.sector_size + k,
                    in_scratch: false,
                })
            })
            .collect()
    }

    fn places(cells: &[Cell]) -> Vec<Place> {
        cells.iter().map(|cell| cell.place).collect()
    }

    /// The lowest committed offset at which a batch's copies cannot reach an old place that
    /// a row still reads: past the scratch rows (what the reflow guarantees before its main loop).
    fn past_scratch(width: usize) -> u64 {
        (width * width) as u64
    }

    #[test]
    fn a_worked_example_of_a_row_split_by_the_reflow() {
        // raidz1 going from 4 to 5 children, a block written 4 wide: 6 data sectors at sector
        // 40, 8 cells in two rows [40, 44) and [44, 48). Committed offset 44: row 0 is at its
        // new places (5 wide), row 1 at its old ones (4 wide); sectors below 46 were copied,
        // so row 1's first two cells have shadows.
        let m = map(4, 1, 12, 40, 6);
        let view = ReflowView {
            synced: 44,
            next: 46,
            scratch: false,
        };
        let cells = cells(&m, 40 << 12, 4, 5, Some(&view));
        let at = |x: u64| cells.iter().find(|cell| cell.sector == x).unwrap();
        assert_eq!(cells.len(), 8);
        assert_eq!(at(40).place, laid(40, 5, false)); // child 0, sector 8
        assert_eq!(at(43).place, laid(43, 5, false)); // child 3, sector 8
        assert_eq!(at(44).place, laid(44, 4, false)); // child 0, sector 11
        assert_eq!(at(44).shadow, Some(laid(44, 5, false)));
        assert_eq!(at(45).shadow, Some(laid(45, 5, false)));
        assert_eq!(at(46).shadow, None);
        assert_eq!(
            at(47).place,
            Place {
                child: 3,
                sector: 11,
                in_scratch: false
            }
        );
    }

    #[test]
    fn scratch_rows_are_read_from_the_scratch_area() {
        let m = map(3, 1, 9, 0, 4);
        let view = ReflowView {
            synced: 12,
            next: 12,
            scratch: true,
        };
        for cell in cells(&m, 0, 3, 4, Some(&view)) {
            assert!(cell.place.in_scratch && cell.shadow.is_none());
            assert_eq!(cell.place, laid(cell.sector, 4, true));
        }
    }

    fn geometry() -> impl Strategy<Value = (usize, usize, u32)> {
        (1usize..=3)
            .prop_flat_map(|parity| {
                (
                    Just(parity),
                    parity + 1..=12,
                    prop_oneof![Just(9u32), Just(12)],
                )
            })
            .prop_map(|(parity, width, ashift)| (width, parity, ashift))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn without_an_expansion_the_cells_are_the_maps_own_places(
            (width, parity, ashift) in geometry(),
            b in 0u64..100_000,
            sectors in 1u64..300,
        ) {
            let m = map(width, parity, ashift, b, sectors);
            prop_assert_eq!(places(&cells(&m, b << ashift, width, width, None)), contiguous(&m));
        }

        #[test]
        fn before_the_copy_a_block_of_the_old_width_is_where_it_was_written(
            (width, parity, ashift) in geometry(),
            b in 0u64..100_000,
            sectors in 1u64..300,
        ) {
            let m = map(width, parity, ashift, b, sectors);
            let view = ReflowView { synced: 0, next: 0, scratch: false };
            let cells = cells(&m, b << ashift, width, width + 1, Some(&view));
            prop_assert_eq!(places(&cells), contiguous(&m));
            prop_assert!(cells.iter().all(|cell| cell.shadow.is_none()));
        }

        #[test]
        fn every_row_has_its_cells_on_distinct_children(
            (width, parity, ashift) in geometry(),
            grown in 1usize..4,
            b in 0u64..20_000,
            sectors in 1u64..300,
            synced in 0u64..25_000,
            ahead in 0u64..200,
            finished: bool,
        ) {
            let m = map(width, parity, ashift, b, sectors);
            let physical = width + grown;
            let view = ReflowView { synced, next: synced + ahead, scratch: false };
            let reflow = (!finished).then_some(&view);
            let cells = cells(&m, b << ashift, width, physical, reflow);
            // Exactly the block's parity and data sectors, each once.
            let sectors_seen: HashSet<u64> = cells.iter().map(|cell| cell.sector).collect();
            prop_assert_eq!(sectors_seen.len(), cells.len());
            prop_assert_eq!(cells.len() as u64 * m.sector_size + m.skip_sectors * m.sector_size, m.asize);
            prop_assert!(cells.iter().all(|cell| (b..b + (m.asize >> ashift)).contains(&cell.sector)));
            // Per row: distinct children for the places and for the shadows.
            let rows = cells.iter().map(|cell| (cell.sector - b) / width as u64).max().unwrap_or(0);
            for row in 0..=rows {
                let in_row: Vec<&Cell> = cells.iter().filter(|cell| (cell.sector - b) / width as u64 == row).collect();
                let children: HashSet<usize> = in_row.iter().map(|cell| cell.place.child).collect();
                prop_assert_eq!(children.len(), in_row.len());
                let shadows: Vec<usize> = in_row.iter().filter_map(|cell| cell.shadow.map(|s| s.child)).collect();
                prop_assert_eq!(shadows.iter().collect::<HashSet<_>>().len(), shadows.len());
                // A row is wholly at its old places or wholly at its new ones.
                let row_end = b + row * width as u64 + (cells.len() as u64).min(width as u64);
                let layout = match reflow {
                    Some(view) if row_end > view.synced => physical - 1,
                    _ => physical,
                };
                for cell in &in_row {
                    prop_assert_eq!(cell.place, laid(cell.sector, layout, false));
                }
            }
            // Shadows only for old rows below next, at the new place.
            for cell in &cells {
                if let Some(shadow) = cell.shadow {
                    prop_assert!(cell.sector < view.next);
                    prop_assert_eq!(shadow, laid(cell.sector, physical, false));
                }
            }
        }

        #[test]
        fn blocks_allocated_apart_never_share_a_place(
            (width, parity, ashift) in geometry(),
            start in 0u64..2_000,
            lengths in proptest::collection::vec(1u64..200, 1..16),
            synced_from_start in 0u64..1_000,
            ahead in 0.0f64..=1.0,
            before_the_copy: bool,
        ) {
            // Blocks back to back, each at its own asize, all written at the old width.
            let physical = width + 1;
            let floor = past_scratch(physical);
            let synced = if before_the_copy { 0 } else { floor + start + synced_from_start };
            // The reflow's limit: a batch copies only what overwrites no old place still read.
            let limit = synced + synced / (physical as u64 - 1) - (physical as u64 - 1).min(synced);
            let next = synced + ((limit.max(synced) - synced) as f64 * ahead) as u64;
            let view = ReflowView { synced, next, scratch: false };
            let geometry = RaidzGeometry::new(width, parity, ashift);
            let mut seen = HashSet::new();
            let mut b = floor + start;
            for sectors in lengths {
                let m = geometry.map(b << ashift, sectors << ashift);
                for cell in cells(&m, b << ashift, width, physical, Some(&view)) {
                    prop_assert!(seen.insert(cell.place), "place {:?} twice", cell.place);
                    if let Some(shadow) = cell.shadow {
                        prop_assert!(seen.insert(shadow), "shadow {:?} twice", shadow);
                    }
                }
                b += m.asize >> ashift;
            }
        }
    }
}
