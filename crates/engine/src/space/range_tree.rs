//! Range trees: in-memory sets of disjoint half-open byte ranges `[start, end)`.
//!
//! A range tree is the in-core form of free (or allocated) space. Touching segments are always
//! merged, so the representation of a set is unique, and a 64-bucket power-of-two histogram of
//! segment sizes (bucket `i` counts segments of `[2^i, 2^(i+1))` bytes) is kept exact on every
//! insert, remove, merge and split.
//!
//! # Representation and memory
//!
//! A tree covers a *region* `[base, base + units << shift)` and stores segments in units of
//! `2^shift` bytes relative to `base` (OpenZFS `rt_start`/`rt_shift`). Segments live in a
//! [`LeafSet`] (a B-tree with 4 KiB array leaves, see [`super::btree`]) ordered by offset, as
//! pairs of u32 (8 bytes) when the region has at most `u32::MAX` units, which every metaslab
//! does (16 GiB / 512 B = 2^25), else as pairs of u64. A tree may also keep a *size index*
//! (`with_size_index`): the same segments as (size, start) pairs, for best fit and for the
//! largest segment. Only segments of at least the index's floor are in it (OpenZFS
//! `metaslab_by_size_min_shift`, 16 KiB for metaslabs), so that the many small segments of a
//! fragmented metaslab cost nothing there. When the index runs empty while the tree is not
//! (every segment is below the floor), the floor drops to zero and the index is rebuilt
//! complete (OpenZFS `metaslab_size_tree_full_load`), so "the index is empty" always means "no
//! segment at all is at or above the floor" and the largest segment is always known.
//!
//! With full leaves a segment costs 8 bytes in the offset tree and 8 in the size index;
//! `tests/range_tree_memory.rs` measures at most 24 bytes per segment with a counting
//! allocator (fill factor included). The fixed part is the histogram (512 bytes).
//!
//! # Errors
//!
//! [`RangeTree::add`] and [`RangeTree::remove`] assert that the range is absent (add) or fully
//! present (remove): in the allocator a violation is a double allocation or a double free, a
//! programmer error. When replaying untrusted space maps use [`RangeTree::try_add`] and
//! [`RangeTree::try_remove`], which leave the tree unchanged and return an error instead, also
//! for a range outside the tree's region or not aligned to its unit.
//!
//! # Cost
//!
//! Add and remove: at most two offset-tree lookups and three inserts or removes in each of the
//! two B-trees (O(log n) plus a 4 KiB memmove). Largest segment and best fit: one size-index
//! lookup. Iteration: a slice walk.

use super::btree::{self, LeafSet};

/// Number of histogram buckets; bucket `i` counts segments of size in `[2^i, 2^(i+1))`.
pub const RANGE_TREE_HISTOGRAM_SIZE: usize = 64;

/// Metaslab free trees index by size only segments of at least `2^SIZE_INDEX_MIN_SHIFT` bytes
/// (OpenZFS `metaslab_by_size_min_shift`, 16 KiB).
pub const SIZE_INDEX_MIN_SHIFT: u32 = 14;

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
    #[error("range at {start:#x} of size {size:#x} is outside the tree's region [{base:#x}, {end:#x}) or not aligned to its {unit}-byte unit")]
    OutsideRegion {
        start: u64,
        size: u64,
        base: u64,
        end: u64,
        unit: u64,
    },
}

/// A pair of unit values stored in a [`LeafSet`]: narrow (u32) or wide (u64).
trait Pair: Copy + Ord {
    /// Pack; values above the element's range saturate (only probes carry such values).
    fn pack(first: u64, second: u64) -> Self;
    fn unpack(self) -> (u64, u64);
}

impl Pair for [u32; 2] {
    fn pack(first: u64, second: u64) -> Self {
        [
            first.min(u32::MAX as u64) as u32,
            second.min(u32::MAX as u64) as u32,
        ]
    }
    fn unpack(self) -> (u64, u64) {
        (self[0] as u64, self[1] as u64)
    }
}

impl Pair for [u64; 2] {
    fn pack(first: u64, second: u64) -> Self {
        [first, second]
    }
    fn unpack(self) -> (u64, u64) {
        (self[0], self[1])
    }
}

/// An ordered set of (u64, u64) pairs, stored narrow when the values fit in 32 bits.
#[derive(Clone)]
enum PairSet {
    Narrow(LeafSet<[u32; 2]>),
    Wide(LeafSet<[u64; 2]>),
}

macro_rules! pairs {
    ($set:expr, $inner:ident => $body:expr) => {
        match $set {
            PairSet::Narrow($inner) => $body,
            PairSet::Wide($inner) => $body,
        }
    };
}

impl PairSet {
    fn new(narrow: bool) -> PairSet {
        if narrow {
            PairSet::Narrow(LeafSet::new())
        } else {
            PairSet::Wide(LeafSet::new())
        }
    }
    fn insert(&mut self, first: u64, second: u64) -> bool {
        pairs!(self, set => set.insert(Pair::pack(first, second)))
    }
    fn remove(&mut self, first: u64, second: u64) -> bool {
        pairs!(self, set => set.remove(&Pair::pack(first, second)))
    }
    fn predecessor(&self, first: u64, second: u64) -> Option<(u64, u64)> {
        pairs!(self, set => set.predecessor(&Pair::pack(first, second)).map(Pair::unpack))
    }
    fn successor(&self, first: u64, second: u64) -> Option<(u64, u64)> {
        pairs!(self, set => set.successor(&Pair::pack(first, second)).map(Pair::unpack))
    }
    fn contains(&self, first: u64, second: u64) -> bool {
        pairs!(self, set => set.contains(&Pair::pack(first, second)))
    }
    fn last(&self) -> Option<(u64, u64)> {
        pairs!(self, set => set.last().map(Pair::unpack))
    }
    fn len(&self) -> usize {
        pairs!(self, set => set.len())
    }
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn clear(&mut self) {
        pairs!(self, set => set.clear())
    }
    fn memory_bytes(&self) -> usize {
        pairs!(self, set => set.memory_bytes())
    }
    fn verify(&self) {
        pairs!(self, set => set.verify())
    }
    fn iter_from(&self, first: u64, second: u64) -> PairIter<'_> {
        match self {
            PairSet::Narrow(set) => PairIter::Narrow(set.iter_from(&Pair::pack(first, second))),
            PairSet::Wide(set) => PairIter::Wide(set.iter_from(&Pair::pack(first, second))),
        }
    }
    fn iter(&self) -> PairIter<'_> {
        match self {
            PairSet::Narrow(set) => PairIter::Narrow(set.iter()),
            PairSet::Wide(set) => PairIter::Wide(set.iter()),
        }
    }
}

enum PairIter<'a> {
    Narrow(btree::Iter<'a, [u32; 2]>),
    Wide(btree::Iter<'a, [u64; 2]>),
}

impl Iterator for PairIter<'_> {
    type Item = (u64, u64);
    fn next(&mut self) -> Option<(u64, u64)> {
        match self {
            PairIter::Narrow(iter) => iter.next().map(Pair::unpack),
            PairIter::Wide(iter) => iter.next().map(Pair::unpack),
        }
    }
}

/// The (size, start) index of the segments of at least `floor_units` units.
#[derive(Clone)]
struct SizeIndex {
    floor_units: u64,
    set: PairSet,
}

/// A set of disjoint, merged half-open segments.
#[derive(Clone)]
pub struct RangeTree {
    /// Region start; segments are stored relative to it.
    base: u64,
    /// Unit is `2^shift` bytes.
    shift: u32,
    /// Region length in units.
    units: u64,
    /// (start, end) of every segment in units, disjoint and never touching.
    segments: PairSet,
    size_index: Option<SizeIndex>,
    space: u64,
    histogram: [u64; RANGE_TREE_HISTOGRAM_SIZE],
}

impl Default for RangeTree {
    fn default() -> Self {
        RangeTree::new()
    }
}

impl PartialEq for RangeTree {
    fn eq(&self, other: &RangeTree) -> bool {
        self.space == other.space && self.iter().eq(other.iter())
    }
}

impl Eq for RangeTree {}

impl std::fmt::Debug for RangeTree {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RangeTree")
            .field("space", &self.space)
            .field("segments", &self.iter().take(64).collect::<Vec<_>>())
            .field("segment_count", &self.segment_count())
            .finish()
    }
}

fn histogram_bucket(size: u64) -> usize {
    debug_assert!(size > 0);
    63 - size.leading_zeros() as usize
}

impl RangeTree {
    /// A tree over all of `[0, 2^64)` in bytes, without a size index.
    pub fn new() -> RangeTree {
        RangeTree::for_region(0, u64::MAX, 0)
    }

    /// A tree over `[start, start + size)` whose segments are multiples of `2^shift` bytes
    /// (relative to `start`), without a size index. Narrow (8-byte) segments when the region
    /// has at most `u32::MAX` units.
    pub fn for_region(start: u64, size: u64, shift: u32) -> RangeTree {
        assert!(shift < 64, "range tree unit 2^{shift}");
        let size = size.min(u64::MAX - start);
        let units = size >> shift;
        RangeTree {
            base: start,
            shift,
            units,
            segments: PairSet::new(units <= u32::MAX as u64),
            size_index: None,
            space: 0,
            histogram: [0; RANGE_TREE_HISTOGRAM_SIZE],
        }
    }

    /// Keep a size index of the segments of at least `floor_bytes` (0: all of them), for
    /// [`RangeTree::best_fit`] and [`RangeTree::largest_segment`].
    pub fn with_size_index(mut self, floor_bytes: u64) -> RangeTree {
        let floor_units = floor_bytes.div_ceil(1 << self.shift);
        self.rebuild_size_index(floor_units);
        self
    }

    fn rebuild_size_index(&mut self, floor_units: u64) {
        let mut set = PairSet::new(self.units <= u32::MAX as u64);
        for (start, end) in self.segments.iter() {
            if end - start >= floor_units {
                set.insert(end - start, start);
            }
        }
        self.size_index = Some(SizeIndex { floor_units, set });
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

    /// Bytes of heap and inline memory the tree holds (for the metaslab memory cap).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<RangeTree>()
            + self.segments.memory_bytes()
            + self
                .size_index
                .as_ref()
                .map_or(0, |index| index.set.memory_bytes())
    }

    fn to_bytes(&self, units: u64) -> u64 {
        self.base + (units << self.shift)
    }

    fn segment(&self, (start, end): (u64, u64)) -> Segment {
        Segment {
            start: self.to_bytes(start),
            end: self.to_bytes(end),
        }
    }

    fn region_end(&self) -> u64 {
        self.base.saturating_add(self.units << self.shift)
    }

    /// Exact units of a range to add or remove: inside the region and aligned.
    fn exact_units(&self, start: u64, size: u64) -> Result<(u64, u64), RangeError> {
        let end = match start.checked_add(size) {
            Some(end) if size > 0 => end,
            _ => return Err(RangeError::Invalid { start, size }),
        };
        let mask = (1u64 << self.shift) - 1;
        if start < self.base
            || end > self.region_end()
            || (start - self.base) & mask != 0
            || size & mask != 0
        {
            return Err(RangeError::OutsideRegion {
                start,
                size,
                base: self.base,
                end: self.region_end(),
                unit: 1 << self.shift,
            });
        }
        Ok((
            (start - self.base) >> self.shift,
            (end - self.base) >> self.shift,
        ))
    }

    /// The smallest unit range covering the part of a byte range inside the region (segments
    /// are unit-aligned, so overlap and containment are the same on it); `None` when empty.
    fn outer_units(&self, start: u64, size: u64) -> Option<(u64, u64)> {
        let end = start.checked_add(size)?;
        let start = start.max(self.base);
        let end = end.min(self.region_end());
        if start >= end {
            return None;
        }
        let unit = 1u64 << self.shift;
        Some((
            (start - self.base) >> self.shift,
            (end - self.base).div_ceil(unit),
        ))
    }

    /// The segment containing unit `unit`, if any.
    fn containing(&self, unit: u64) -> Option<(u64, u64)> {
        self.segments
            .predecessor(unit, u64::MAX)
            .filter(|&(_, end)| end > unit)
    }

    /// Segments in offset order.
    pub fn iter(&self) -> impl Iterator<Item = Segment> + '_ {
        self.segments.iter().map(|pair| self.segment(pair))
    }

    /// Segments starting at or after the segment containing `offset` (or the first one after it).
    pub fn iter_from(&self, offset: u64) -> impl Iterator<Item = Segment> + '_ {
        let unit = if offset < self.base {
            0
        } else if offset >= self.region_end() {
            u64::MAX
        } else {
            (offset - self.base) >> self.shift
        };
        let first = self.containing(unit).map_or(unit, |(start, _)| start);
        self.segments
            .iter_from(first, 0)
            .map(|pair| self.segment(pair))
    }

    /// The largest segment (the lowest-offset one among equals is not guaranteed). O(1) with
    /// a size index, a scan without.
    pub fn largest_segment(&self) -> Option<Segment> {
        match &self.size_index {
            Some(index) => {
                let (size, start) = index.set.last()?;
                Some(self.segment((start, start + size)))
            }
            None => self.iter().max_by_key(Segment::size),
        }
    }

    /// The smallest segment of at least `size` bytes, lowest offset among equals (best fit).
    /// With a size index whose floor is above `size`, the smallest indexed segment (a fit,
    /// perhaps not the best); without a size index, a scan.
    pub fn best_fit(&self, size: u64) -> Option<Segment> {
        let units = size.div_ceil(1 << self.shift).max(1);
        match &self.size_index {
            Some(index) => {
                let (found_size, start) = index.set.successor(units, 0)?;
                Some(self.segment((start, start + found_size)))
            }
            None => self
                .iter()
                .filter(|segment| segment.size() >= size)
                .min_by_key(|segment| (segment.size(), segment.start)),
        }
    }

    fn insert_segment(&mut self, start: u64, end: u64) {
        debug_assert!(start < end);
        let inserted = self.segments.insert(start, end);
        debug_assert!(inserted);
        if let Some(index) = &mut self.size_index {
            if end - start >= index.floor_units {
                index.set.insert(end - start, start);
            }
        }
        let bytes = (end - start) << self.shift;
        self.histogram[histogram_bucket(bytes)] += 1;
        self.space += bytes;
    }

    fn delete_segment(&mut self, start: u64, end: u64) {
        let removed = self.segments.remove(start, end);
        debug_assert!(removed, "segment present");
        if let Some(index) = &mut self.size_index {
            if end - start >= index.floor_units {
                let removed = index.set.remove(end - start, start);
                debug_assert!(removed);
            }
        }
        let bytes = (end - start) << self.shift;
        self.histogram[histogram_bucket(bytes)] -= 1;
        self.space -= bytes;
    }

    /// Keep "an empty size index means no segment is at or above the floor" true with a
    /// floor of zero, by rebuilding the index complete (see the module documentation).
    fn settle_size_index(&mut self) {
        let rebuild = self.size_index.as_ref().is_some_and(|index| {
            index.floor_units > 1 && index.set.is_empty() && !self.segments.is_empty()
        });
        if rebuild {
            self.rebuild_size_index(0);
        }
    }

    /// Does any segment overlap `[start, start + size)`?
    pub fn intersects(&self, start: u64, size: u64) -> bool {
        let Some((start, end)) = self.outer_units(start, size) else {
            return false;
        };
        if self.containing(start).is_some() {
            return true;
        }
        self.segments
            .successor(start, 0)
            .is_some_and(|(next_start, _)| next_start < end)
    }

    /// Is `[start, start + size)` entirely inside one segment?
    pub fn contains(&self, start: u64, size: u64) -> bool {
        let Some(end) = start.checked_add(size).filter(|_| size > 0) else {
            return false;
        };
        if start < self.base || end > self.region_end() {
            return false;
        }
        let Some((start_units, end_units)) = self.outer_units(start, size) else {
            return false;
        };
        self.containing(start_units)
            .is_some_and(|(_, segment_end)| segment_end >= end_units)
    }

    /// Add `[start, start + size)`, which must not overlap the tree.
    pub fn try_add(&mut self, start: u64, size: u64) -> Result<(), RangeError> {
        let (start_units, end_units) = self.exact_units(start, size)?;
        if self.intersects(start, size) {
            return Err(RangeError::Overlap {
                start,
                end: start + size,
            });
        }
        let mut new_start = start_units;
        let mut new_end = end_units;
        if let Some((previous_start, previous_end)) = self.segments.predecessor(start_units, 0) {
            if previous_end == start_units {
                self.delete_segment(previous_start, previous_end);
                new_start = previous_start;
            }
        }
        if let Some((next_start, next_end)) = self.segments.successor(end_units, 0) {
            if next_start == end_units {
                self.delete_segment(next_start, next_end);
                new_end = next_end;
            }
        }
        self.insert_segment(new_start, new_end);
        self.settle_size_index();
        Ok(())
    }

    /// Remove `[start, start + size)`, which must lie entirely inside one segment.
    pub fn try_remove(&mut self, start: u64, size: u64) -> Result<(), RangeError> {
        let (start_units, end_units) = self.exact_units(start, size)?;
        let Some((segment_start, segment_end)) = self
            .containing(start_units)
            .filter(|&(_, segment_end)| segment_end >= end_units)
        else {
            return Err(RangeError::Missing {
                start,
                end: start + size,
            });
        };
        self.delete_segment(segment_start, segment_end);
        if segment_start < start_units {
            self.insert_segment(segment_start, start_units);
        }
        if end_units < segment_end {
            self.insert_segment(end_units, segment_end);
        }
        self.settle_size_index();
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
        let Some(end) = start.checked_add(size) else {
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
        let Some(end) = start.checked_add(size).filter(|_| size > 0) else {
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
    pub(crate) fn overlapping(&self, start: u64, end: u64) -> Vec<Segment> {
        if start >= end {
            return Vec::new();
        }
        self.iter_from(start)
            .take_while(|segment| segment.start < end)
            .filter(|segment| segment.end > start)
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
        for segment in self.iter() {
            callback(segment);
        }
        self.clear();
    }

    /// Empty the tree (a size index keeps its original floor only until it is rebuilt).
    pub fn clear(&mut self) {
        self.segments.clear();
        if let Some(index) = &mut self.size_index {
            index.set.clear();
        }
        self.space = 0;
        self.histogram.iter_mut().for_each(|count| *count = 0);
    }

    /// Check the internal indexes against each other (for tests and debug assertions).
    pub fn verify(&self) {
        self.segments.verify();
        let mut space = 0;
        let mut histogram = [0u64; RANGE_TREE_HISTOGRAM_SIZE];
        let mut previous_end: Option<u64> = None;
        let mut indexed = 0;
        for (start, end) in self.segments.iter() {
            assert!(start < end && end <= self.units);
            if let Some(previous_end) = previous_end {
                assert!(previous_end < start, "segments touch or overlap");
            }
            if let Some(index) = &self.size_index {
                if end - start >= index.floor_units {
                    assert!(index.set.contains(end - start, start));
                    indexed += 1;
                }
            }
            space += (end - start) << self.shift;
            histogram[histogram_bucket((end - start) << self.shift)] += 1;
            previous_end = Some(end);
        }
        if let Some(index) = &self.size_index {
            index.set.verify();
            assert_eq!(index.set.len(), indexed, "size index holds stray segments");
            assert!(
                index.floor_units <= 1 || !index.set.is_empty() || self.segments.is_empty(),
                "empty size index over a non-empty tree"
            );
        }
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

    #[test]
    fn region_trees_refuse_ranges_outside_or_unaligned() {
        let mut tree = RangeTree::for_region(1 << 20, 1 << 20, 9);
        assert!(matches!(
            tree.try_add(0, 512),
            Err(RangeError::OutsideRegion { .. })
        ));
        assert!(matches!(
            tree.try_add((1 << 20) + 100, 512),
            Err(RangeError::OutsideRegion { .. })
        ));
        assert!(matches!(
            tree.try_add((2 << 20) - 512, 1024),
            Err(RangeError::OutsideRegion { .. })
        ));
        tree.add((2 << 20) - 1024, 1024);
        assert!(
            tree.contains((2 << 20) - 1000, 10),
            "unaligned queries round outward"
        );
        assert!(!tree.contains((2 << 20) - 1000, 2000));
        assert!(tree.intersects(0, 4 << 20));
        assert_eq!(tree.iter_from(0).count(), 1);
        assert_eq!(tree.iter_from(4 << 20).count(), 0);
        tree.verify();
    }

    #[test]
    fn size_index_floor_drops_when_only_small_segments_remain() {
        let mut tree = RangeTree::for_region(0, 1 << 24, 9).with_size_index(16 << 10);
        tree.add(0, 64 << 10);
        tree.add(128 << 10, 4 << 10);
        assert_eq!(
            tree.best_fit(1024),
            Some(Segment {
                start: 0,
                end: 64 << 10
            }),
            "small segments are not indexed"
        );
        tree.remove(0, 60 << 10);
        tree.verify();
        // Every segment is now below the floor: the index holds them all.
        assert_eq!(
            tree.largest_segment().map(|segment| segment.size()),
            Some(4 << 10)
        );
        assert_eq!(
            tree.best_fit(4 << 10),
            Some(Segment {
                start: 60 << 10,
                end: 64 << 10
            })
        );
        assert_eq!(tree.best_fit(5 << 10), None);
    }

    proptest! {
        /// A metaslab-like tree (region, 512-byte units, size index with a floor) against a
        /// sector bitmap: contents, largest segment and best fit.
        #[test]
        fn region_tree_with_size_index_matches_model(operations in proptest::collection::vec((any::<bool>(), 0u64..2000, 1u64..80), 1..300)) {
            let base = 5u64 << 30;
            let mut tree = RangeTree::for_region(base, 2048 * 512, 9).with_size_index(16 << 10);
            tree.add(base, 2048 * 512);
            let mut model = vec![true; 2048];
            for (is_add, sector, sectors) in operations {
                let sectors = sectors.min(2048 - sector);
                let range = sector as usize..(sector + sectors) as usize;
                let (start, size) = (base + sector * 512, sectors * 512);
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
                let mut runs = Vec::new();
                let mut run_start = None;
                for (index, &bit) in model.iter().chain([&false]).enumerate() {
                    match (bit, run_start) {
                        (true, None) => run_start = Some(index),
                        (false, Some(first)) => { runs.push((first as u64, (index - first) as u64)); run_start = None; }
                        _ => {}
                    }
                }
                let largest = runs.iter().map(|run| run.1).max();
                prop_assert_eq!(tree.largest_segment().map(|segment| segment.size() / 512), largest);
                let want = sectors * 512;
                let fits: Vec<_> = runs.iter().filter(|run| run.1 * 512 >= want).collect();
                match tree.best_fit(want) {
                    None => prop_assert!(fits.is_empty()),
                    Some(segment) => {
                        prop_assert!(segment.size() >= want);
                        prop_assert!(runs.contains(&((segment.start - base) / 512, segment.size() / 512)));
                        if want >= 16 << 10 {
                            let best = fits.iter().map(|run| run.1).min().unwrap();
                            prop_assert_eq!(segment.size() / 512, best);
                        }
                    }
                }
            }
        }

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
