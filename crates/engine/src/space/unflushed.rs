//! The changes of one metaslab that the log space map holds and its space map does not yet
//! (OpenZFS's `ms_unflushed_allocs` and `ms_unflushed_frees`), kept by each [`Metaslab`] and
//! flushed into its map by the log (`log.rs`, docs/design/02-space.md §2.6a). The metaslab owns
//! this state and the log drives it, so it sits below both.
//!
//! [`Metaslab`]: super::metaslab::Metaslab

use super::range_tree::{RangeError, RangeTree};
use super::space_map::SpaceMapAction;

/// Memory counted per unflushed segment (a start and an end).
pub const UNFLUSHED_SEGMENT_BYTES: u64 = 16;

/// Unflushed changes of one metaslab, kept disjoint (cancelling semantics).
#[derive(Debug)]
pub struct Unflushed {
    /// Allocated since the last flush and free in the map.
    pub allocs: RangeTree,
    /// Freed since the last flush and allocated in the map.
    pub frees: RangeTree,
    /// Txg of the last flush (or of the first logged change); 0 = never under the log.
    pub txg: u64,
    /// `txg` changed and the unflushed-txg array has not been written yet.
    pub txg_dirty: bool,
}

impl Unflushed {
    pub fn new(start: u64, size: u64, ashift: u32) -> Unflushed {
        Unflushed {
            allocs: RangeTree::for_region(start, size, ashift),
            frees: RangeTree::for_region(start, size, ashift),
            txg: 0,
            txg_dirty: false,
        }
    }

    /// Record a change. The part of the range pending the opposite change cancels it; the rest
    /// joins this change's tree and must not already be there (a double allocation or free).
    pub fn record(
        &mut self,
        action: SpaceMapAction,
        start: u64,
        size: u64,
    ) -> Result<(), RangeError> {
        let (same, opposite) = match action {
            SpaceMapAction::Alloc => (&mut self.allocs, &mut self.frees),
            SpaceMapAction::Free => (&mut self.frees, &mut self.allocs),
        };
        let end = start.saturating_add(size);
        let mut cursor = start;
        for segment in opposite.overlapping(start, end) {
            let cut_start = segment.start.max(start);
            let cut_end = segment.end.min(end);
            opposite.remove(cut_start, cut_end - cut_start);
            if cut_start > cursor {
                same.try_add(cursor, cut_start - cursor)?;
            }
            cursor = cut_end;
        }
        if cursor < end {
            same.try_add(cursor, end - cursor)?;
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.allocs.is_empty() && self.frees.is_empty()
    }

    /// Bytes of memory the two trees' segments take, 16 per segment (what
    /// `unflushed_max_mem_amt` limits; OpenZFS also counts segments times their size, leaving
    /// out the trees' fixed overhead, which does not grow with the log).
    pub fn memory_bytes(&self) -> u64 {
        (self.allocs.segment_count() + self.frees.segment_count()) as u64 * UNFLUSHED_SEGMENT_BYTES
    }

    pub fn clear(&mut self) {
        self.allocs.clear();
        self.frees.clear();
    }

    /// Net bytes the unflushed changes add to what the map says is allocated.
    pub fn allocated_delta(&self) -> i128 {
        self.allocs.space() as i128 - self.frees.space() as i128
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unflushed_changes_cancel() {
        let mut unflushed = Unflushed::new(0, 1 << 20, 9);
        unflushed.record(SpaceMapAction::Alloc, 0, 8192).unwrap();
        unflushed.record(SpaceMapAction::Free, 4096, 8192).unwrap();
        // [4096, 8192) cancelled; [8192, 12288) freed from the map.
        assert_eq!(unflushed.allocs.space(), 4096);
        assert_eq!(unflushed.frees.space(), 4096);
        assert!(unflushed.frees.contains(8192, 4096));
        unflushed.record(SpaceMapAction::Alloc, 8192, 4096).unwrap();
        unflushed.record(SpaceMapAction::Free, 0, 4096).unwrap();
        assert!(unflushed.is_empty());
        unflushed.record(SpaceMapAction::Free, 0, 512).unwrap();
        assert!(
            unflushed.record(SpaceMapAction::Free, 0, 512).is_err(),
            "double free"
        );
    }
}
