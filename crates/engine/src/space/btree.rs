//! A compact ordered set: a B-tree whose leaves are 4 KiB arrays of small `Copy` elements.
//!
//! Range trees hold millions of segments in a fragmented pool, so memory per element is what
//! matters (OpenZFS replaced its AVL range trees with exactly this, `btree.c`, for that reason:
//! about 24 bytes per free segment across the offset and size trees instead of 64+).
//!
//! # Structure
//!
//! Elements live in *leaves*: sorted `Vec<E>`s of at most [`LEAF_BYTES`] bytes (512 pairs of
//! u32, 256 pairs of u64). The interior is an ordinary `BTreeMap` from each leaf's first element
//! to the leaf's slot in a slab; with 256–512 elements per leaf it costs well under a byte per
//! element. A lone leaf starts small and doubles up to the full capacity; every other leaf is
//! allocated at full capacity once and never reallocated.
//!
//! # Fill factor (what the memory figure depends on)
//!
//! - Insert into a full leaf first spills into a neighbour that has room (half of that room),
//!   as a B*-tree does; only when both neighbours are (nearly) full is the leaf split, in the
//!   middle, or, when the element goes past its end (ascending inserts, a space-map load), by
//!   starting a new leaf so that the full one stays full.
//! - Remove merges a leaf that fell to half or less into a neighbour when the two fit in 7/8
//!   of a leaf (the remaining eighth keeps an insert right after from splitting again).
//!
//! Ascending loads therefore fill leaves completely and random churn keeps them about 80% full;
//! `tests/range_tree_memory.rs` measures the bytes per segment with a counting allocator.
//!
//! # Cost
//!
//! Insert, remove and lookups: one `BTreeMap` search (O(log n)) plus a binary search and a
//! memmove of at most one leaf (4 KiB); a spill or merge moves at most one more leaf. Iteration
//! is a slice walk per leaf.

use std::collections::btree_map::{self, BTreeMap};
use std::ops::Bound;

/// Bytes of elements per leaf (OpenZFS `BTREE_LEAF_SIZE`).
pub const LEAF_BYTES: usize = 4096;

/// Initial capacity of a lone leaf, which grows by doubling.
const FIRST_LEAF_CAPACITY: usize = 4;

/// An ordered set of `E` with large array leaves.
#[derive(Clone)]
pub struct LeafSet<E: Copy + Ord> {
    /// First element of each leaf → the leaf's slot in `leaves`.
    index: BTreeMap<E, u32>,
    leaves: Vec<Vec<E>>,
    /// Slots of `leaves` that hold no leaf.
    free_slots: Vec<u32>,
    len: usize,
}

impl<E: Copy + Ord> Default for LeafSet<E> {
    fn default() -> Self {
        LeafSet::new()
    }
}

impl<E: Copy + Ord> LeafSet<E> {
    pub fn new() -> LeafSet<E> {
        LeafSet {
            index: BTreeMap::new(),
            leaves: Vec::new(),
            free_slots: Vec::new(),
            len: 0,
        }
    }

    /// Elements per full leaf.
    pub const fn leaf_capacity() -> usize {
        let capacity = LEAF_BYTES / std::mem::size_of::<E>();
        if capacity < 4 {
            4
        } else {
            capacity
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        *self = LeafSet::new();
    }

    /// Bytes of heap this set holds (leaf arrays, the slab, an estimate of the interior map's
    /// nodes), for the metaslab memory cap. O(1): every leaf but a lone one has the full
    /// capacity.
    pub fn memory_bytes(&self) -> usize {
        let element = std::mem::size_of::<E>();
        let leaves = match self.index.len() {
            0 => 0,
            1 => self.leaves[*self.index.values().next().expect("one leaf") as usize].capacity(),
            count => count * Self::leaf_capacity(),
        } * element;
        // A BTreeMap node holds up to 11 entries; count one node per 8 entries.
        let interior = self.index.len().div_ceil(8) * (11 * (element + 4) + 16);
        leaves
            + self.leaves.capacity() * std::mem::size_of::<Vec<E>>()
            + self.free_slots.capacity() * 4
            + interior
    }

    /// The leaf that holds (or would hold) `element`: the last leaf whose first element is at
    /// most `element`, or the first leaf.
    fn leaf_for(&self, element: &E) -> Option<(E, u32)> {
        self.index
            .range(..=*element)
            .next_back()
            .or_else(|| self.index.iter().next())
            .map(|(&key, &slot)| (key, slot))
    }

    fn new_leaf(&mut self, leaf: Vec<E>) -> u32 {
        let key = leaf[0];
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.leaves[slot as usize] = leaf;
                slot
            }
            None => {
                self.leaves.push(leaf);
                (self.leaves.len() - 1) as u32
            }
        };
        self.index.insert(key, slot);
        slot
    }

    fn drop_leaf(&mut self, key: E, slot: u32) {
        self.index.remove(&key);
        self.leaves[slot as usize] = Vec::new();
        self.free_slots.push(slot);
    }

    /// Re-key leaf `slot` (formerly keyed `old`) after its first element changed.
    fn rekey(&mut self, old: E, slot: u32) {
        let new = self.leaves[slot as usize][0];
        if new != old {
            self.index.remove(&old);
            self.index.insert(new, slot);
        }
    }

    fn neighbour(&self, key: E, after: bool) -> Option<(E, u32)> {
        if after {
            self.index
                .range((Bound::Excluded(key), Bound::Unbounded))
                .next()
        } else {
            self.index.range(..key).next_back()
        }
        .map(|(&key, &slot)| (key, slot))
    }

    /// Insert `element`; false if it was already present.
    pub fn insert(&mut self, element: E) -> bool {
        let capacity = Self::leaf_capacity();
        let Some((key, slot)) = self.leaf_for(&element) else {
            let mut leaf = Vec::with_capacity(FIRST_LEAF_CAPACITY);
            leaf.push(element);
            self.new_leaf(leaf);
            self.len = 1;
            return true;
        };
        let leaf = &mut self.leaves[slot as usize];
        let position = match leaf.binary_search(&element) {
            Ok(_) => return false,
            Err(position) => position,
        };
        if leaf.len() < capacity {
            if leaf.len() == leaf.capacity() {
                let grown = (leaf.capacity() * 2).clamp(FIRST_LEAF_CAPACITY, capacity);
                leaf.reserve_exact(grown - leaf.len());
            }
            leaf.insert(position, element);
            self.len += 1;
            if position == 0 {
                self.rekey(key, slot);
            }
            return true;
        }
        // Full: spill into a neighbour with room, else split; then insert again (the second
        // attempt finds room).
        if let Some((_, previous_slot)) = self.neighbour(key, false) {
            let room = capacity - self.leaves[previous_slot as usize].len();
            if room >= 2 {
                let moved: Vec<E> = self.leaves[slot as usize].drain(..room / 2).collect();
                self.leaves[previous_slot as usize].extend_from_slice(&moved);
                self.rekey(key, slot);
                return self.insert(element);
            }
        }
        if let Some((next_key, next_slot)) = self.neighbour(key, true) {
            let room = capacity - self.leaves[next_slot as usize].len();
            if room >= 2 {
                let leaf = &mut self.leaves[slot as usize];
                let moved: Vec<E> = leaf.drain(leaf.len() - room / 2..).collect();
                self.leaves[next_slot as usize].splice(0..0, moved);
                self.rekey(next_key, next_slot);
                return self.insert(element);
            }
        }
        let leaf = &mut self.leaves[slot as usize];
        if leaf.capacity() < capacity {
            leaf.reserve_exact(capacity - leaf.len());
        }
        let mut upper = Vec::with_capacity(capacity);
        if position == leaf.len() {
            upper.push(element);
            self.new_leaf(upper);
            self.len += 1;
            return true;
        }
        upper.extend(leaf.drain(capacity / 2..));
        self.new_leaf(upper);
        self.insert(element)
    }

    /// Remove `element`; false if it was absent.
    pub fn remove(&mut self, element: &E) -> bool {
        let Some((key, slot)) = self.leaf_for(element) else {
            return false;
        };
        let leaf = &mut self.leaves[slot as usize];
        let Ok(position) = leaf.binary_search(element) else {
            return false;
        };
        leaf.remove(position);
        self.len -= 1;
        if leaf.is_empty() {
            self.drop_leaf(key, slot);
            return true;
        }
        if position == 0 {
            self.rekey(key, slot);
        }
        self.maybe_merge(self.leaves[slot as usize][0], slot);
        true
    }

    /// Merge leaf `slot` (keyed `key`) into a neighbour when it is at most half full and the
    /// two fit in 7/8 of a leaf.
    fn maybe_merge(&mut self, key: E, slot: u32) {
        let capacity = Self::leaf_capacity();
        let length = self.leaves[slot as usize].len();
        if length > capacity / 2 {
            return;
        }
        let limit = capacity - capacity / 8;
        if let Some((_, previous_slot)) = self.neighbour(key, false) {
            if self.leaves[previous_slot as usize].len() + length <= limit {
                let leaf = std::mem::take(&mut self.leaves[slot as usize]);
                self.leaves[previous_slot as usize].extend_from_slice(&leaf);
                self.drop_leaf(key, slot);
                return;
            }
        }
        if let Some((next_key, next_slot)) = self.neighbour(key, true) {
            if self.leaves[next_slot as usize].len() + length <= limit {
                let next = std::mem::take(&mut self.leaves[next_slot as usize]);
                let leaf = &mut self.leaves[slot as usize];
                if leaf.capacity() < capacity {
                    leaf.reserve_exact(capacity - leaf.len());
                }
                leaf.extend_from_slice(&next);
                self.drop_leaf(next_key, next_slot);
            }
        }
    }

    /// The largest element at most `probe`.
    pub fn predecessor(&self, probe: &E) -> Option<E> {
        let (_, slot) = self.leaf_for(probe)?;
        let leaf = &self.leaves[slot as usize];
        match leaf.binary_search(probe) {
            Ok(position) => Some(leaf[position]),
            Err(0) => None,
            Err(position) => Some(leaf[position - 1]),
        }
    }

    /// The smallest element at least `probe`.
    pub fn successor(&self, probe: &E) -> Option<E> {
        self.iter_from(probe).next()
    }

    /// Does the set hold `element`?
    pub fn contains(&self, element: &E) -> bool {
        self.predecessor(element) == Some(*element)
    }

    pub fn first(&self) -> Option<E> {
        self.index.keys().next().copied()
    }

    pub fn last(&self) -> Option<E> {
        self.index
            .values()
            .next_back()
            .and_then(|&slot| self.leaves[slot as usize].last().copied())
    }

    /// Elements in order.
    pub fn iter(&self) -> Iter<'_, E> {
        Iter {
            leaves: &self.leaves,
            rest: self.index.range(..),
            current: &[],
        }
    }

    /// Elements at least `probe`, in order.
    pub fn iter_from(&self, probe: &E) -> Iter<'_, E> {
        let Some((key, slot)) = self.leaf_for(probe) else {
            return self.iter();
        };
        let leaf = &self.leaves[slot as usize];
        let position = leaf
            .binary_search(probe)
            .unwrap_or_else(|position| position);
        Iter {
            leaves: &self.leaves,
            rest: self.index.range((Bound::Excluded(key), Bound::Unbounded)),
            current: &leaf[position..],
        }
    }

    /// Check the structure (tests and debug assertions).
    pub fn verify(&self) {
        let mut count = 0;
        let mut previous: Option<E> = None;
        for (&key, &slot) in &self.index {
            let leaf = &self.leaves[slot as usize];
            assert!(!leaf.is_empty(), "empty leaf in the index");
            assert!(leaf.len() <= Self::leaf_capacity(), "overfull leaf");
            assert!(key == leaf[0], "leaf keyed by other than its first element");
            for &element in leaf {
                assert!(previous.is_none_or(|previous| previous < element));
                previous = Some(element);
            }
            count += leaf.len();
        }
        assert_eq!(count, self.len);
        assert_eq!(
            self.index.len() + self.free_slots.len(),
            self.leaves.len(),
            "slab slots leaked"
        );
    }
}

/// In-order iterator over a [`LeafSet`].
pub struct Iter<'a, E> {
    leaves: &'a [Vec<E>],
    rest: btree_map::Range<'a, E, u32>,
    current: &'a [E],
}

impl<E: Copy> Iterator for Iter<'_, E> {
    type Item = E;

    fn next(&mut self) -> Option<E> {
        loop {
            if let Some((first, rest)) = self.current.split_first() {
                self.current = rest;
                return Some(*first);
            }
            let (_, &slot) = self.rest.next()?;
            self.current = &self.leaves[slot as usize];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn ascending_inserts_fill_leaves() {
        let mut set = LeafSet::<[u32; 2]>::new();
        for value in 0..10_000u32 {
            assert!(set.insert([value, 0]));
        }
        set.verify();
        let capacity = LeafSet::<[u32; 2]>::leaf_capacity();
        assert_eq!(set.index.len(), 10_000usize.div_ceil(capacity));
        assert_eq!(set.first(), Some([0, 0]));
        assert_eq!(set.last(), Some([9_999, 0]));
        assert_eq!(set.predecessor(&[500, 7]), Some([500, 0]));
        assert_eq!(set.successor(&[500, 7]), Some([501, 0]));
        assert_eq!(
            set.iter_from(&[9_998, 1]).collect::<Vec<_>>(),
            vec![[9_999, 0]]
        );
    }

    proptest! {
        /// Random inserts and removes against `BTreeSet`, with small elements so that leaves
        /// split, spill and merge.
        #[test]
        fn matches_btreeset(operations in proptest::collection::vec((any::<bool>(), 0u16..3000), 1..3000)) {
            let mut set = LeafSet::<[u64; 64]>::new(); // 512-byte elements: 8 per leaf
            let mut model = BTreeSet::new();
            let element = |value: u16| { let mut element = [0u64; 64]; element[0] = value as u64; element };
            for (insert, value) in operations {
                if insert {
                    prop_assert_eq!(set.insert(element(value)), model.insert(value));
                } else {
                    prop_assert_eq!(set.remove(&element(value)), model.remove(&value));
                }
            }
            set.verify();
            prop_assert_eq!(set.len(), model.len());
            prop_assert!(set.iter().map(|element| element[0] as u16).eq(model.iter().copied()));
            for probe in [0u16, 1, 100, 1500, 2999, 3000] {
                prop_assert_eq!(set.predecessor(&element(probe)).map(|e| e[0] as u16), model.range(..=probe).next_back().copied());
                prop_assert_eq!(set.successor(&element(probe)).map(|e| e[0] as u16), model.range(probe..).next().copied());
            }
            prop_assert_eq!(set.last().map(|e| e[0] as u16), model.iter().next_back().copied());
        }
    }
}
