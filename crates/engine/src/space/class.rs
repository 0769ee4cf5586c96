//! Allocation classes (OpenZFS's metaslab classes): which top-level vdevs take which blocks.
//! Normal vdevs take every block of the trees; log vdevs (`pool add POOL log DEV`) take only
//! the intent log's blocks, which prefer them and fall back to the normal class. Each class
//! keeps its own space counters; the pool's size and free space are the normal class's
//! (docs/design/02-space.md §2.7a).

use std::sync::atomic::Ordering;
use std::time::Instant;

use parking_lot::Mutex;

use super::storage::SpaceStorage;
use super::{AllocContext, Group, Placed, SpaceError, SpaceManager};
use crate::types::{Txg, VdevId};

/// The metaslab class of a top-level vdev (OpenZFS's normal and log classes): what may be
/// allocated there. Stored in the vdev's config (`class`, §2.1), `Normal` when absent.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum AllocClass {
    /// File data and metadata; the pool's size and free space are this class's.
    #[default]
    Normal,
    /// Intent-log blocks only (a separate log device, `pool add POOL log DEV`).
    Log,
}

impl AllocClass {
    pub(super) fn index(self) -> usize {
        match self {
            AllocClass::Normal => 0,
            AllocClass::Log => 1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AllocClass::Normal => "normal",
            AllocClass::Log => "log",
        }
    }
}

impl SpaceManager {
    /// Whether `vdev` takes new allocations (`false`: a log vdev being removed or whose
    /// devices are missing). Frees and claims reach it either way.
    pub fn set_allocatable(&self, vdev: VdevId, allocatable: bool) {
        let groups = self.groups.read();
        for group in groups.iter() {
            let mut group = group.lock();
            if group.vdev == vdev {
                group.allocatable = allocatable;
            }
        }
        self.count_allocatable_log_groups(&groups);
    }

    pub(super) fn count_allocatable_log_groups(&self, groups: &[Mutex<Group>]) {
        let count = groups
            .iter()
            .filter(|group| {
                let group = group.lock();
                group.class == AllocClass::Log && group.allocatable
            })
            .count();
        self.allocatable_log_groups.store(count, Ordering::Release);
    }

    /// Whether the pool has a log vdev that takes allocations (no lock).
    pub fn has_log_vdevs(&self) -> bool {
        self.allocatable_log_groups.load(Ordering::Acquire) > 0
    }

    /// Allocate an intent-log block of `size_allocated` bytes in open txg `txg` (OpenZFS
    /// `zio_alloc_zil`): on a log vdev if the pool has one that takes allocations and has room
    /// (successive blocks rotate over the log vdevs), else in the normal class.
    pub fn allocate_log(
        &self,
        size_allocated: u64,
        txg: Txg,
        storage: &dyn SpaceStorage,
    ) -> Result<Placed, SpaceError> {
        assert!(size_allocated > 0, "zero-size allocation");
        if !self.has_log_vdevs() {
            return self.allocate(size_allocated, txg, &[], storage);
        }
        let started = Instant::now();
        let mut context = AllocContext::new(self, storage, txg);
        let placed = {
            let groups = self.groups.read();
            let count = groups.len();
            let start = self.log_rotor.fetch_add(1, Ordering::Relaxed);
            let mut placed = None;
            for step in 0..count {
                let mut group = groups[(start + step) % count].lock();
                if group.class != AllocClass::Log || !group.allocatable {
                    continue;
                }
                if !size_allocated.is_multiple_of(1u64 << group.ashift) {
                    continue;
                }
                let asize = group.unit.asize(size_allocated, txg);
                if let Some(offset) = group.allocate(asize, 0, &[], &mut context)? {
                    placed = Some(Placed {
                        vdev: group.vdev,
                        offset,
                        asize,
                    });
                    break;
                }
            }
            placed
        };
        match placed {
            Some(placed) => {
                context.record(started);
                Ok(placed)
            }
            None => self.allocate(size_allocated, txg, &[], storage),
        }
    }

    /// Bytes freed in the last two txgs and not yet allocatable, in every class (the sync
    /// driver runs txgs until they are back). From the counters: no lock.
    pub fn deferred_bytes(&self) -> u64 {
        self.counters
            .iter()
            .map(|counters| counters.totals().deferred)
            .sum()
    }
}
