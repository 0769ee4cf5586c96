//! The order of a RAID-Z expansion's copy, and why a crash at any moment of it loses nothing
//! (OpenZFS `raidz_reflow_scratch_sync`, `raidz_reflow_impl`).
//!
//! The reflow moves sector `x` of the vdev's address space from its old place (`x mod (W−1)`,
//! `x div (W−1)`) to its new one (`x mod W`, `x div W`), lowest sectors first. A new place
//! `x div W` lies at or below the old one, so a copy can overwrite the old place of a sector
//! not yet copied: the copy is ordered so that it never overwrites an old place that the last
//! durable uberblock still reads.
//!
//! 1. *The scratch phase.* The first `L = scratch sectors × W` sectors are copied through the
//!    scratch area of every child (`RAIDZ_SCRATCH_START`): read from their old places, written
//!    in their new layout to the scratch areas, flushed; an uberblock then says "the first `L`
//!    sectors are in the scratch area" ([`super::progress::ScratchState::Valid`]); the real new
//!    places are written and flushed; an uberblock says "the first `L` are at their new places".
//!    A crash between the two uberblocks is recovered at import by copying the scratch again.
//! 2. *Batches.* With `S` sectors copied and durable, the next batch may copy up to
//!    [`copy_limit`]`(S)`: the new places of those sectors overwrite only old places of
//!    sectors `≤ S − (W−1)`, which every uberblock from the one saying `S` on reads at their
//!    new places. A batch's copies are flushed before the uberblock that counts them.
//!
//! The simulation in the tests runs the whole copy on sectors in memory, with power cuts after
//! any write (writes since the last flush survive or not, each on its own), and checks that
//! every sector reads back through the placement rule of the uberblock that survived, before
//! and after import's recovery.

use std::ops::Range;

/// Sectors of the scratch area of one child.
pub fn scratch_sectors(sector_size: u64) -> u64 {
    super::RAIDZ_SCRATCH_SIZE / sector_size
}

/// Sectors of the address space the scratch phase copies on a vdev `width` wide (the new
/// width): the scratch area of every child in the new layout.
pub fn scratch_logical_sectors(width: u64, sector_size: u64) -> u64 {
    scratch_sectors(sector_size) * width
}

/// The highest sector (exclusive) a batch may copy once `synced` sectors are copied and
/// durable, on a vdev going from `width − 1` to `width` children (OpenZFS's
/// `next_overwrite_blkid`): new places of sectors below it overwrite only old places of sectors
/// `≤ synced − (width − 1)`. Never below `synced`.
pub fn copy_limit(synced: u64, width: u64) -> u64 {
    let old = width - 1;
    (synced + synced / old).saturating_sub(old).max(synced)
}

/// The next batch to copy within `range` (sectors of allocated space still to copy, from
/// `next` on), at most `max_sectors` long and below [`copy_limit`]: `None` when the limit is
/// reached (the caller waits for `synced` to move) or nothing is left.
pub fn next_batch(
    range: &Range<u64>,
    next: u64,
    synced: u64,
    width: u64,
    max_sectors: u64,
) -> Option<Range<u64>> {
    let start = next.max(range.start);
    let end = range
        .end
        .min(copy_limit(synced, width))
        .min(start.saturating_add(max_sectors));
    (start < end).then_some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A place on a child: (child, sector, in the scratch area).
    type Place = (u64, u64, bool);

    fn old_place(x: u64, width: u64) -> Place {
        (x % (width - 1), x / (width - 1), false)
    }

    fn new_place(x: u64, width: u64) -> Place {
        (x % width, x / width, false)
    }

    /// Disks of sectors: what is durable, and what was written since the last flush.
    #[derive(Default)]
    struct Disks {
        durable: BTreeMap<Place, u64>,
        pending: Vec<(Place, u64)>,
        /// The uberblock: (synced, scratch valid), durable when committed.
        committed: (u64, bool),
        writes: u64,
        cut_at: Option<u64>,
    }

    /// The power went: the writes since the last flush each survive or not.
    struct PowerCut;

    impl Disks {
        fn write(&mut self, place: Place, value: u64) -> Result<(), PowerCut> {
            self.writes += 1;
            if self.cut_at == Some(self.writes) {
                return Err(PowerCut);
            }
            self.pending.push((place, value));
            Ok(())
        }

        fn flush(&mut self) {
            for (place, value) in self.pending.drain(..) {
                self.durable.insert(place, value);
            }
        }

        fn commit(&mut self, synced: u64, scratch: bool) -> Result<(), PowerCut> {
            self.flush();
            self.writes += 1;
            if self.cut_at == Some(self.writes) {
                return Err(PowerCut);
            }
            self.committed = (synced, scratch);
            Ok(())
        }

        /// The cut: each pending write lands or not (by `survivors`' bits).
        fn cut(&mut self, survivors: u64) {
            for (index, (place, value)) in std::mem::take(&mut self.pending).into_iter().enumerate()
            {
                if survivors >> (index % 64) & 1 == 1 {
                    self.durable.insert(place, value);
                }
            }
        }

        fn read(&self, place: Place) -> Option<u64> {
            self.durable.get(&place).copied()
        }

        /// Sector `x` as the committed uberblock reads it (the placement rule per sector: the
        /// row rule of `placement.rs` only moves whole rows to the old side).
        fn read_sector(&self, x: u64, width: u64) -> Option<u64> {
            let (synced, scratch) = self.committed;
            let place = if x < synced {
                let (child, sector, _) = new_place(x, width);
                (child, sector, scratch && x < scratch_rows_end(width))
            } else {
                old_place(x, width)
            };
            self.read(place)
        }
    }

    /// Sectors the simulation's scratch phase covers: a scratch area of `width` rows per child,
    /// small so that batches matter, and enough for the first batch to make progress (the real
    /// one has 896 rows or more, and at most 255 children).
    fn scratch_rows_end(width: u64) -> u64 {
        width * width
    }

    /// The copy of a vdev of `total` sectors from `width − 1` to `width` children.
    fn reflow(disks: &mut Disks, width: u64, total: u64, batch: u64) -> Result<(), PowerCut> {
        let logical = scratch_rows_end(width).min(total);
        if disks.committed.0 == 0 {
            // Scratch phase: read the old places, write the scratch, flush, say so, copy.
            let values: Vec<u64> = (0..logical)
                .map(|x| {
                    disks
                        .read(old_place(x, width))
                        .expect("an old place holds its sector")
                })
                .collect();
            for (x, &value) in values.iter().enumerate() {
                let (child, sector, _) = new_place(x as u64, width);
                disks.write((child, sector, true), value)?;
            }
            disks.commit(logical, true)?;
            for (x, &value) in values.iter().enumerate() {
                disks.write(new_place(x as u64, width), value)?;
            }
            disks.commit(logical, false)?;
        }
        // Batches up to the limit; a txg commits what was copied.
        let (mut synced, _) = disks.committed;
        while synced < total {
            let Some(range) = next_batch(&(0..total), synced, synced, width, batch) else {
                panic!("no progress at {synced} of {total}");
            };
            let values: Vec<u64> = range
                .clone()
                .map(|x| {
                    disks
                        .read(old_place(x, width))
                        .expect("an old place holds its sector")
                })
                .collect();
            for (x, value) in range.clone().zip(values) {
                disks.write(new_place(x, width), value)?;
            }
            disks.commit(range.end, false)?;
            synced = range.end;
        }
        Ok(())
    }

    /// Import after a cut: a valid scratch is copied to the real places first.
    fn recover(disks: &mut Disks, width: u64) {
        let (synced, scratch) = disks.committed;
        if scratch {
            for x in 0..synced {
                let (child, sector, _) = new_place(x, width);
                let value = disks
                    .read((child, sector, true))
                    .expect("the scratch holds it");
                disks.durable.insert((child, sector, false), value);
            }
            disks.committed = (synced, false);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn a_power_cut_anywhere_in_the_copy_loses_no_sector(
            width in 3u64..8,
            rows in 4u64..40,
            batch in 1u64..50,
            cut_fraction in 0.0f64..1.0,
            survivors: u64,
        ) {
            let total = rows * (width - 1);
            let mut disks = Disks::default();
            for x in 0..total {
                disks.durable.insert(old_place(x, width), x);
            }
            // Count the writes of a whole copy, then cut at a point inside it.
            let mut dry = Disks { durable: disks.durable.clone(), ..Disks::default() };
            prop_assert!(reflow(&mut dry, width, total, batch).is_ok());
            let cut = 1 + (cut_fraction * dry.writes as f64) as u64;
            disks.cut_at = Some(cut);
            let result = reflow(&mut disks, width, total, batch);
            prop_assert!(result.is_err(), "the cut at write {} of {}", cut, dry.writes);
            disks.cut(survivors);
            // Read-only import: every sector through the surviving uberblock; and the old places
            // of the sectors just below it, which a row straddling it still reads (no row
            // straddles the end of the vdev: once all is copied, the old places are free).
            for x in 0..total {
                prop_assert_eq!(disks.read_sector(x, width), Some(x), "sector {} after the cut", x);
            }
            let (synced, _) = disks.committed;
            let straddled = if synced < total { synced } else { 0 };
            for x in straddled.saturating_sub(width - 2)..straddled {
                prop_assert_eq!(disks.read(old_place(x, width)), Some(x), "old place of {}", x);
            }
            // Import recovers and the copy resumes to the end.
            recover(&mut disks, width);
            disks.cut_at = None;
            prop_assert!(reflow(&mut disks, width, total, batch).is_ok());
            for x in 0..total {
                prop_assert_eq!(disks.read_sector(x, width), Some(x), "sector {} at the end", x);
                prop_assert_eq!(disks.read(new_place(x, width)), Some(x));
            }
        }
    }

    #[test]
    fn the_limit_only_lets_copies_overwrite_old_places_no_longer_read() {
        for width in 3..20u64 {
            for synced in width * (width - 1)..400 {
                let limit = copy_limit(synced, width);
                assert!(limit > synced, "no progress at {synced}, width {width}");
                for y in synced..limit {
                    // The new place of y is the old place of z (if on an old child).
                    let (child, sector, _) = new_place(y, width);
                    if child < width - 1 {
                        let z = sector * (width - 1) + child;
                        assert!(
                            z + (width - 1) <= synced,
                            "y {y} overwrites {z} at {synced}"
                        );
                    }
                }
            }
        }
        assert_eq!(next_batch(&(0..1000), 12, 12, 4, 5), Some(12..13));
        assert_eq!(next_batch(&(0..1000), 9, 9, 4, 5), None);
        assert_eq!(next_batch(&(0..1000), 100, 100, 4, 5), Some(100..105));
        assert_eq!(next_batch(&(0..100), 100, 100, 4, 5), None);
    }
}
