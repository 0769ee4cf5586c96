//! What a RAID-Z expansion asks of the space layer (`vdev/raidz/reflow.rs`): a metaslab that
//! takes no allocations while its blocks are copied, the ranges to copy (everything not free
//! in it), and the vdev's metaslabs grown when the copy ends and the vdev is wider.
//!
//! A metaslab is disabled before its copy set is taken: a block allocated in it afterwards
//! could lie in a range the copy skipped as free, at its old place only, and be lost when the
//! copy passes it. Frees still reach a disabled metaslab; they only make the copy larger than
//! it needs to be (deferred and freeing ranges count as allocated, and are copied).

use std::ops::Range;
use std::sync::atomic::Ordering;

use super::{AllocUnit, Metaslab, SpaceError, SpaceManager, SpaceStorage};
use crate::types::{Txg, VdevId};

impl SpaceManager {
    /// Stop allocations in metaslab `index` of `vdev` (one per vdev at a time) and return the
    /// byte ranges in it that are not free (allocated, being freed, or deferred), in order;
    /// loads the metaslab if it is not loaded. `txg` is the txg open now.
    pub fn disable_metaslab(
        &self,
        vdev: VdevId,
        index: usize,
        txg: Txg,
        storage: &dyn SpaceStorage,
    ) -> Result<Vec<Range<u64>>, SpaceError> {
        self.with_group(vdev, |group| {
            let Some(metaslab) = group.metaslabs.get(index) else {
                return Err(SpaceError::InvalidVdev {
                    vdev,
                    reason: format!("no metaslab {index}"),
                });
            };
            let (start, end) = (metaslab.start, metaslab.start + metaslab.size);
            group.disabled = Some(index);
            for active in group.active.iter_mut() {
                if active.is_some_and(|(at, _)| at == index) {
                    *active = None;
                }
            }
            let last_synced = self.last_synced_before(txg);
            let metaslab = &mut group.metaslabs[index];
            self.track(metaslab, |metaslab| metaslab.load(storage, last_synced))?;
            Ok(not_free(metaslab, start, end))
        })
    }

    /// Let `vdev`'s disabled metaslab take allocations again.
    pub fn enable_metaslabs(&self, vdev: VdevId) {
        for group in self.groups.read().iter() {
            let mut group = group.lock();
            if group.vdev == vdev {
                group.disabled = None;
            }
        }
    }

    /// Grow `vdev` to `asize` bytes (whole metaslabs of its size; the new ones empty) with
    /// allocations sized by `unit` from now on: a RAID-Z vdev whose expansion finished.
    pub fn grow_vdev(&self, vdev: VdevId, asize: u64, unit: AllocUnit) -> Result<(), SpaceError> {
        let block_size = self.metaslab_map_block_size();
        self.with_group(vdev, |group| {
            let count = asize >> group.ms_shift;
            let mut added = 0u64;
            for id in group.metaslabs.len() as u64..count {
                let mut metaslab = Metaslab::new(
                    id,
                    id << group.ms_shift,
                    1 << group.ms_shift,
                    group.ashift,
                    block_size,
                );
                metaslab.class = group.class;
                group.metaslabs.push(metaslab);
                added += 1 << group.ms_shift;
            }
            group.unit = unit;
            self.counters[group.class.index()]
                .size
                .fetch_add(added, Ordering::Relaxed);
            Ok(())
        })
    }
}

/// The ranges of `[start, end)` a loaded metaslab does not have free.
fn not_free(metaslab: &Metaslab, start: u64, end: u64) -> Vec<Range<u64>> {
    let mut ranges = Vec::new();
    let mut at = start;
    if let Some(free) = metaslab.allocatable() {
        for segment in free.iter() {
            if segment.start > at {
                ranges.push(at..segment.start);
            }
            at = at.max(segment.end);
        }
    }
    if at < end {
        ranges.push(at..end);
    }
    ranges
}
