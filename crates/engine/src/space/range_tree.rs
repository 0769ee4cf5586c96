//! Range trees: in-memory sets of disjoint half-open byte ranges `[start, end)`.
//!
//! A range tree is the in-core form of free (or allocated) space. Segments are kept in an
//! offset-ordered `BTreeMap` (start → end) and, for best-fit allocation, a size-ordered twin
//! (`BTreeSet` of `(size, start)`). Touching segments are always merged, so the representation of
//! a set is unique, and a 64-bucket power-of-two histogram of segment sizes is kept exact on
//! every insert, remove, merge and split.
//!
//! [`RangeTree::add`] and [`RangeTree::remove`] assert that the range is absent (add) or fully
//! present (remove): in the allocator a violation is a double allocation or a double free, a
//! programmer error. When replaying untrusted space maps use [`RangeTree::try_add`] and
//! [`RangeTree::try_remove`], which leave the tree unchanged and return an error instead.

use std::collections::{BTreeMap, BTreeSet};

/// Number of histogram buckets; bucket `i` counts segments of size in `[2^i, 2^(i+1))`.
pub const RANGE_TREE_HISTOGRAM_SIZE: usize = 64;

/// One segment `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
}

impl Segment {
    pub fn size(&self) -> u64 {
        self.end - self.start
    }
}

/// Why a `try_add` or `try_remove` was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("range [{start:#x}, {end:#x}) overlaps a segment already in the tree")]
    Overlap { start: u64, end: u64 },
    #[error("range [{start:#x}, {end:#x}) is not entirely in the tree")]
    Missing { start: u64, end: u64 },
    #[error("range at {start:#x} of size {size:#x} is empty or wraps around")]
    Invalid { start: u64, size: u64 },
}

/// A set of disjoint, merged half-open segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeTree {
    /// start → end, disjoint and never touching.
    segments: BTreeMap<u64, u64>,
    /// (size, start) of every segment, for best fit.
    by_size: BTreeSet<(u64, u64)>,
    space: u64,
    histogram: [u64; RANGE_TREE_HISTOGRAM_SIZE],
}

impl Default for RangeTree {
    fn default() -> Self {
        RangeTree::new()
    }
}

fn histogram_bucket(size: u64) -> usize {
    debug_assert!(size > 0);
    63 - size.leading_zeros() as usize
}

impl RangeTree {
    pub fn new() -> RangeTree {
        RangeTree {
            segments: BTreeMap::new(),
            by_size: BTreeSet::new(),
            space: 0,
            histogram: [0; RANGE_TREE_HISTOGRAM_SIZE],
        }
    }

    /// A tree holding the single segment `[start, start + size)` (empty when `size` is 0).
    pub fn with_range(start: u64, size: u64) -> RangeTree {
        let mut tree = RangeTree::new();
        if size > 0 {
            tree.add(start, size);
        }
        tree
    }

    /// Total bytes in all segments.
    pub fn space(&self) -> u64 {
        self.space
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Bucket `i` counts segments whose size is in `[2^i, 2^(i+1))`.
    pub fn histogram(&self) -> &[u64] {
        &self.histogram
    }

    /// Segments in offset order.
    pub fn iter(&self) -> impl Iterator<Item = Segment> + '_ {
        self.segments
            .iter()
            .map(|(&start, &end)| Segment { start, end })
    }

    /// Segments starting at or after the segment containing `offset` (or the first one after it).
    pub fn iter_from(&self, offset: u64) -> impl Iterator<Item = Segment> + '_ {
        let first = match self.segments.range(..=offset).next_back() {
            Some((&start, &end)) if end > offset => start,
            _ => offset,
        };
        self.segments
            .range(first..)
            .map(|(&start, &end)| Segment { start, end })
    }

    /// The largest segment (the lowest-offset one among equals is not guaranteed).
    pub fn largest_segment(&self) -> Option<Segment> {
        self.by_size
            .iter()
            .next_back()
            .map(|&(size, start)| Segment {
                start,
                end: start + size,
            })
    }

    /// The smallest segment of at least `size` bytes (best fit), lowest offset among equals.
    pub fn best_fit(&self, size: u64) -> Option<Segment> {
        self.by_size
            .range((size, 0)..)
            .next()
            .map(|&(size, start)| Segment {
                start,
                end: start + size,
            })
    }

    fn insert_segment(&mut self, start: u64, end: u64) {
        debug_assert!(start < end);
        self.segments.insert(start, end);
        self.by_size.insert((end - start, start));
        self.histogram[histogram_bucket(end - start)] += 1;
        self.space += end - start;
    }

    fn delete_segment(&mut self, start: u64) -> u64 {
        let end = self.segments.remove(&start).expect("segment present");
        let removed = self.by_size.remove(&(end - start, start));
        debug_assert!(removed);
        self.histogram[histogram_bucket(end - start)] -= 1;
        self.space -= end - start;
        end
    }

    fn check_range(start: u64, size: u64) -> Result<u64, RangeError> {
        match start.checked_add(size) {
            Some(end) if size > 0 => Ok(end),
            _ => Err(RangeError::Invalid { start, size }),
        }
    }

    /// Does any segment overlap `[start, start + size)`?
    pub fn intersects(&self, start: u64, size: u64) -> bool {
        let Ok(end) = Self::check_range(start, size) else {
            return false;
        };
        if let Some((_, &previous_end)) = self.segments.range(..=start).next_back() {
            if previous_end > start {
                return true;
            }
        }
        self.segments.range(start..end).next().is_some()
    }

    /// Is `[start, start + size)` entirely inside one segment?
    pub fn contains(&self, start: u64, size: u64) -> bool {
        let Ok(end) = Self::check_range(start, size) else {
            return false;
        };
        matches!(self.segments.range(..=start).next_back(), Some((_, &segment_end)) if segment_end >= end)
    }

    /// Add `[start, start + size)`, which must not overlap the tree.
    pub fn try_add(&mut self, start: u64, size: u64) -> Result<(), RangeError> {
        let end = Self::check_range(start, size)?;
        if self.intersects(start, size) {
            return Err(RangeError::Overlap { start, end });
        }
        let mut new_start = start;
        let mut new_end = end;
        if let Some((&previous_start, &previous_end)) = self.segments.range(..start).next_back() {
            if previous_end == start {
                self.delete_segment(previous_start);
                new_start = previous_start;
            }
        }
        if let Some(&next_end) = self.segments.get(&end) {
            self.delete_segment(end);
            new_end = next_end;
        }
        self.insert_segment(new_start, new_end);
        Ok(())
    }

    /// Remove `[start, start + size)`, which must lie entirely inside one segment.
    pub fn try_remove(&mut self, start: u64, size: u64) -> Result<(), RangeError> {
        let end = Self::check_range(start, size)?;
        if !self.contains(start, size) {
            return Err(RangeError::Missing { start, end });
        }
        let (&segment_start, _) = self.segments.range(..=start).next_back().expect("contains");
        let segment_end = self.delete_segment(segment_start);
        if segment_start < start {
            self.insert_segment(segment_start, start);
        }
        if end < segment_end {
            self.insert_segment(end, segment_end);
        }
        Ok(())
    }

    /// Add a range that must not overlap the tree (overlap is a programmer error: a double free).
    pub fn add(&mut self, start: u64, size: u64) {
        if let Err(error) = self.try_add(start, size) {
            panic!("range tree add: {error}");
        }
    }

    /// Remove a range that must be present (absence is a programmer error: a double allocation).
    pub fn remove(&mut self, start: u64, size: u64) {
        if let Err(error) = self.try_remove(start, size) {
            panic!("range tree remove: {error}");
        }
    }

    /// Remove whatever part of `[start, start + size)` is present; absent parts are ignored.
    pub fn remove_overlap(&mut self, start: u64, size: u64) {
        let Ok(end) = Self::check_range(start, size) else {
            return;
        };
        for segment in self.overlapping(start, end) {
            let cut_start = segment.start.max(start);
            let cut_end = segment.end.min(end);
            self.remove(cut_start, cut_end - cut_start);
        }
    }

    /// Add whatever part of `[start, start + size)` is absent; present parts are left alone.
    pub fn add_missing(&mut self, start: u64, size: u64) {
        let Ok(end) = Self::check_range(start, size) else {
            return;
        };
        let mut cursor = start;
        for segment in self.overlapping(start, end) {
            if segment.start > cursor {
                self.add(cursor, segment.start - cursor);
            }
            cursor = cursor.max(segment.end);
        }
        if cursor < end {
            self.add(cursor, end - cursor);
        }
    }

    /// Segments overlapping `[start, end)`, unclipped, in offset order.
    fn overlapping(&self, start: u64, end: u64) -> Vec<Segment> {
        self.iter_from(start)
            .take_while(|segment| segment.start < end)
            .collect()
    }

    /// Add every segment of this tree into `other` (which must not overlap it).
    pub fn walk(&self, other: &mut RangeTree) {
        for segment in self.iter() {
            other.add(segment.start, segment.size());
        }
    }

    /// Empty the tree, handing each segment to `callback` in offset order.
    pub fn vacate(&mut self, mut callback: impl FnMut(Segment)) {
        let segments = std::mem::take(&mut self.segments);
        self.clear();
        for (start, end) in segments {
            callback(Segment { start, end });
        }
    }

    /// Empty the tree.
    pub fn clear(&mut self) {
        self.segments.clear();
        self.by_size.clear();
        self.space = 0;
        self.histogram.iter_mut().for_each(|count| *count = 0);
    }

    /// Check the internal indexes against each other (for tests and debug assertions).
    pub fn verify(&self) {
        let mut space = 0;
        let mut histogram = [0u64; RANGE_TREE_HISTOGRAM_SIZE];
        let mut previous_end: Option<u64> = None;
        for segment in self.iter() {
            assert!(segment.start < segment.end);
            if let Some(previous_end) = previous_end {
                assert!(previous_end < segment.start, "segments touch or overlap");
            }
            assert!(self.by_size.contains(&(segment.size(), segment.start)));
            space += segment.size();
            histogram[histogram_bucket(segment.size())] += 1;
            previous_end = Some(segment.end);
        }
        assert_eq!(self.by_size.len(), self.segments.len());
        assert_eq!(space, self.space);
        assert_eq!(histogram, self.histogram);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn add_merges_neighbours_and_remove_splits() {
        let mut tree = RangeTree::new();
        tree.add(0, 10);
        tree.add(20, 10);
        assert_eq!(tree.segment_count(), 2);
        tree.add(10, 10);
        assert_eq!(tree.segment_count(), 1);
        assert_eq!(tree.space(), 30);
        tree.remove(5, 10);
        assert_eq!(
            tree.iter().collect::<Vec<_>>(),
            vec![Segment { start: 0, end: 5 }, Segment { start: 15, end: 30 }]
        );
        assert_eq!(tree.histogram()[2], 1); // 5 bytes
        assert_eq!(tree.histogram()[3], 1); // 15 bytes
        tree.verify();
    }

    #[test]
    fn try_operations_refuse_overlap_and_missing() {
        let mut tree = RangeTree::with_range(100, 100);
        assert!(matches!(
            tree.try_add(150, 100),
            Err(RangeError::Overlap { .. })
        ));
        assert!(matches!(
            tree.try_add(50, 51),
            Err(RangeError::Overlap { .. })
        ));
        assert!(matches!(
            tree.try_remove(150, 100),
            Err(RangeError::Missing { .. })
        ));
        assert!(matches!(
            tree.try_remove(u64::MAX, 2),
            Err(RangeError::Invalid { .. })
        ));
        assert!(matches!(
            tree.try_add(0, 0),
            Err(RangeError::Invalid { .. })
        ));
        assert_eq!(tree.space(), 100);
        assert!(tree.contains(100, 100));
        assert!(!tree.contains(99, 2));
        assert!(tree.intersects(199, 5));
        assert!(!tree.intersects(200, 5));
    }

    #[test]
    #[should_panic(expected = "range tree add")]
    fn add_of_overlap_panics() {
        let mut tree = RangeTree::with_range(0, 8);
        tree.add(4, 8);
    }

    #[test]
    fn best_fit_and_largest() {
        let mut tree = RangeTree::new();
        tree.add(0, 100);
        tree.add(200, 30);
        tree.add(300, 50);
        assert_eq!(
            tree.best_fit(40),
            Some(Segment {
                start: 300,
                end: 350
            })
        );
        assert_eq!(tree.best_fit(101), None);
        assert_eq!(tree.largest_segment(), Some(Segment { start: 0, end: 100 }));
    }

    #[test]
    fn add_missing_and_remove_overlap() {
        let mut tree = RangeTree::new();
        tree.add(10, 10);
        tree.add(40, 10);
        tree.add_missing(0, 60);
        assert_eq!(
            tree.iter().collect::<Vec<_>>(),
            vec![Segment { start: 0, end: 60 }]
        );
        tree.remove_overlap(50, 100);
        tree.remove_overlap(5, 5);
        assert_eq!(
            tree.iter().collect::<Vec<_>>(),
            vec![Segment { start: 0, end: 5 }, Segment { start: 10, end: 50 }]
        );
        tree.verify();
    }

    proptest! {
        /// Random adds and removes against a bitmap model.
        #[test]
        fn matches_bitmap_model(operations in proptest::collection::vec((any::<bool>(), 0u64..256, 1u64..32), 1..200)) {
            let mut tree = RangeTree::new();
            let mut model = vec![false; 300];
            for (is_add, start, size) in operations {
                let range = start as usize..(start + size) as usize;
                if is_add {
                    let overlaps = model[range.clone()].iter().any(|&bit| bit);
                    prop_assert_eq!(tree.try_add(start, size).is_ok(), !overlaps);
                    if !overlaps { model[range].iter_mut().for_each(|bit| *bit = true); }
                } else {
                    let present = model[range.clone()].iter().all(|&bit| bit);
                    prop_assert_eq!(tree.try_remove(start, size).is_ok(), present);
                    if present { model[range].iter_mut().for_each(|bit| *bit = false); }
                }
                tree.verify();
                prop_assert_eq!(tree.space(), model.iter().filter(|&&bit| bit).count() as u64);
            }
            for (offset, &bit) in model.iter().enumerate() {
                prop_assert_eq!(tree.contains(offset as u64, 1), bit);
            }
        }
    }
}
