//! Pool-wide space totals for write admission and listings: counters every metaslab operation
//! updates by its difference, read without any lock (see the layer's "Context and locking").

use std::sync::atomic::{AtomicU64, Ordering};

use super::Metaslab;

/// Space of the whole pool, summed over its vdevs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpaceTotals {
    pub size: u64,
    pub allocated: u64,
    pub free: u64,
    /// Freed in the last two txgs: not yet allocatable (deferred frees).
    pub deferred: u64,
}

impl SpaceTotals {
    /// Space held back so that syncing (metadata, frees) can always proceed when users have
    /// filled the pool: 1/32 of the size (spa_slop_shift = 5), at most 128 GiB, and at least
    /// min(`min_slop`, half the pool) (OpenZFS's spa_get_slop_space with `spa_min_slop`,
    /// the tunable of that name, 128 MiB by default).
    pub fn slop(&self, min_slop: u64) -> u64 {
        (self.size >> 5)
            .min(128 << 30)
            .max(min_slop.min(self.size / 2))
    }
}

/// Pool-wide space counters kept current by every operation that changes a metaslab's space
/// (see the module documentation, "Context and locking"). Free space is derived:
/// `size − allocated − deferred`.
#[derive(Debug, Default)]
pub(super) struct SpaceCounters {
    pub(super) size: AtomicU64,
    pub(super) allocated: AtomicU64,
    pub(super) deferred: AtomicU64,
}

impl SpaceCounters {
    /// Run `operation` on `metaslab` and add the change it made to the metaslab's allocated
    /// and deferred bytes (also when it fails: whatever it changed is counted).
    pub(super) fn track<T>(
        &self,
        metaslab: &mut Metaslab,
        operation: impl FnOnce(&mut Metaslab) -> T,
    ) -> T {
        let allocated = metaslab.allocated_bytes();
        let deferred = metaslab.deferred_bytes();
        let result = operation(metaslab);
        // Wrapping adds of the (possibly negative) differences.
        self.allocated.fetch_add(
            metaslab.allocated_bytes().wrapping_sub(allocated),
            Ordering::Relaxed,
        );
        self.deferred.fetch_add(
            metaslab.deferred_bytes().wrapping_sub(deferred),
            Ordering::Relaxed,
        );
        result
    }

    pub(super) fn totals(&self) -> SpaceTotals {
        let size = self.size.load(Ordering::Relaxed);
        let allocated = self.allocated.load(Ordering::Relaxed);
        let deferred = self.deferred.load(Ordering::Relaxed);
        SpaceTotals {
            size,
            allocated,
            free: size.saturating_sub(allocated).saturating_sub(deferred),
            deferred,
        }
    }
}
