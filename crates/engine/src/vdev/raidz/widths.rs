//! The data widths a RAID-Z vdev has had: which stripe width a block was written with.
//!
//! An expansion (`pool attach POOL raidz1-0 NEWDEV`, OpenZFS 2.3's RAID-Z expansion) adds a
//! child to a RAID-Z vdev and moves every existing sector to its place in the wider stripe, but
//! it does not rewrite any block: a block keeps the data-to-parity ratio it was written with,
//! its columns now spread over more children. A reader must therefore know the width a block
//! was *written* with, and that depends only on when it was written: blocks born before the
//! first expansion finished have the original width, those born in or after an expansion's
//! first txg (and before the next one's) have that expansion's width (OpenZFS
//! `vdev_raidz_get_logical_width`, over the txgs it keeps in the vdev's config).
//!
//! The size a block takes cannot tell: a block of one sector takes `parity + 1` sectors at
//! every width. So the widths are kept in the vdev's label config, as explicit
//! `(first txg, width)` pairs ([`RaidzExpansion`]): they are needed before the MOS can be read.
//! Where a sector of a block lives while a reflow runs is another question, answered by the
//! reflow's progress, not by the block's birth.

pub use crate::vdev::label::RaidzExpansion;

/// The widths of a RAID-Z vdev's blocks by birth txg: the original width and each finished
/// expansion's, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaidzWidths {
    original: usize,
    expansions: Vec<RaidzExpansion>,
}

impl RaidzWidths {
    /// The widths of a vdev of `slots` column slots with `parity` parity columns, after
    /// `expansions` finished and, when `expanding`, one more under way (its slot already
    /// counted in `slots`, its width not yet in `expansions`). Checked, since the values come
    /// from a label: txgs strictly ascending, each expansion one child wider than what it
    /// expanded, the original width at least `parity + 1`.
    pub fn new(
        slots: usize,
        parity: usize,
        expansions: &[RaidzExpansion],
        expanding: bool,
    ) -> Result<RaidzWidths, String> {
        let widened = expansions.len() + usize::from(expanding);
        let Some(original) = slots.checked_sub(widened).filter(|&w| w > parity) else {
            return Err(format!(
                "raidz{parity} of {slots} children cannot have been expanded {widened} times \
                 (it had at least {} children before)",
                parity + 1
            ));
        };
        let mut previous_txg = 0;
        for (index, expansion) in expansions.iter().enumerate() {
            if expansion.txg <= previous_txg {
                return Err(format!(
                    "raidz expansion {index} starts at txg {} after one at txg {previous_txg}",
                    expansion.txg
                ));
            }
            let expected = original + index + 1;
            if expansion.width as usize != expected {
                return Err(format!(
                    "raidz expansion {index} has width {}, not {expected}",
                    expansion.width
                ));
            }
            previous_txg = expansion.txg;
        }
        Ok(RaidzWidths {
            original,
            expansions: expansions.to_vec(),
        })
    }

    /// The widths of a vdev that was never expanded.
    pub fn fixed(width: usize) -> RaidzWidths {
        RaidzWidths {
            original: width,
            expansions: Vec::new(),
        }
    }

    /// The width the vdev was created with: the one space is accounted by for ever (the
    /// deflate ratio, OpenZFS `vdev_set_deflate_ratio`), whatever the vdev grew to since.
    pub fn original(&self) -> usize {
        self.original
    }

    /// The width new blocks are written with: the last finished expansion's (an expansion
    /// under way writes new blocks with the width it started from, as OpenZFS does).
    pub fn current(&self) -> usize {
        self.expansions
            .last()
            .map_or(self.original, |expansion| expansion.width as usize)
    }

    /// The width a block born (physically) in `birth` was written with.
    pub fn width_at(&self, birth: u64) -> usize {
        let after = self
            .expansions
            .partition_point(|expansion| expansion.txg <= birth);
        match after {
            0 => self.original,
            n => self.expansions[n - 1].width as usize,
        }
    }

    /// The finished expansions, oldest first (the label config's list).
    pub fn expansions(&self) -> &[RaidzExpansion] {
        &self.expansions
    }

    /// Whether any expansion finished: a vdev whose blocks may have different widths.
    pub fn was_expanded(&self) -> bool {
        !self.expansions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expansion(txg: u64, width: u32) -> RaidzExpansion {
        RaidzExpansion { txg, width }
    }

    #[test]
    fn a_vdev_never_expanded_has_one_width_for_every_birth() {
        let widths = RaidzWidths::new(4, 1, &[], false).unwrap();
        assert_eq!(widths, RaidzWidths::fixed(4));
        for birth in [0, 1, 1000, u64::MAX] {
            assert_eq!(widths.width_at(birth), 4);
        }
        assert_eq!((widths.original(), widths.current()), (4, 4));
        assert!(!widths.was_expanded());
    }

    #[test]
    fn a_block_has_the_width_of_the_last_expansion_at_or_before_its_birth() {
        let widths =
            RaidzWidths::new(6, 1, &[expansion(100, 5), expansion(200, 6)], false).unwrap();
        assert_eq!(widths.original(), 4);
        assert_eq!(widths.current(), 6);
        let expected = |birth: u64| match birth {
            0..=99 => 4,
            100..=199 => 5,
            _ => 6,
        };
        for birth in (0..260).chain([u64::MAX]) {
            assert_eq!(widths.width_at(birth), expected(birth), "birth {birth}");
        }
    }

    #[test]
    fn an_expansion_under_way_writes_with_the_width_it_started_from() {
        // Five slots, one expansion finished (4 to 5 wide would need 5 slots): here 6 slots,
        // the sixth being added.
        let widths = RaidzWidths::new(6, 2, &[expansion(50, 5)], true).unwrap();
        assert_eq!((widths.original(), widths.current()), (4, 5));
        let under_way = RaidzWidths::new(5, 1, &[], true).unwrap();
        assert_eq!((under_way.original(), under_way.current()), (4, 4));
        assert_eq!(under_way.width_at(u64::MAX), 4);
    }

    #[test]
    fn hostile_lists_are_refused() {
        // Txgs not strictly ascending.
        assert!(RaidzWidths::new(6, 1, &[expansion(100, 5), expansion(100, 6)], false).is_err());
        assert!(RaidzWidths::new(6, 1, &[expansion(0, 5), expansion(10, 6)], false).is_err());
        // Widths that skip, repeat or disagree with the slots.
        assert!(RaidzWidths::new(6, 1, &[expansion(10, 6), expansion(20, 6)], false).is_err());
        assert!(RaidzWidths::new(6, 1, &[expansion(10, 5)], false).is_err());
        assert!(RaidzWidths::new(5, 1, &[expansion(10, 5)], true).is_err());
        // More expansions than the slots allow: the original would be below parity + 1.
        let many: Vec<_> = (0..3).map(|i| expansion(10 + i, 3 + i as u32)).collect();
        assert!(RaidzWidths::new(5, 2, &many, false).is_err());
        assert!(RaidzWidths::new(2, 1, &[], true).is_err());
        assert!(RaidzWidths::new(0, 1, &[], true).is_err());
    }
}
