//! Identities and units shared by every layer.
//!
//! Identities are newtypes so that a vdev id can never be passed where an object id is
//! expected. Sizes stay plain `u64` byte counts but are always named with their kind last
//! (`size_logical`, `size_physical`, `size_allocated`), per DESIGN.md §3 invariant 5.

use std::fmt;

/// A hash map for the engine's hot in-memory tables, those looked up on every write (owners'
/// usage and quotas, object locks, decoded dnodes): foldhash, seeded per map, several times
/// faster than std's SipHash on small keys and still seeded, so keys a user chooses (user
/// and project IDs) cannot be picked to collide. Make one with `FastHashMap::default()`.
pub type FastHashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A transaction group number. Txgs start at [`TXG_INITIAL`] and only grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Txg(pub u64);

impl Txg {
    /// The slot of this txg in a per-txg array of [`TXG_SIZE`] entries.
    pub fn slot(self) -> usize {
        (self.0 & (TXG_SIZE as u64 - 1)) as usize
    }
    pub fn next(self) -> Txg {
        Txg(self.0 + 1)
    }
}

impl fmt::Display for Txg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The id of a top-level vdev. Ids are never reused within a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct VdevId(pub u32);

impl fmt::Display for VdevId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The number of an object within an object set. Object 0 is the meta-dnode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ObjectId(pub u64);

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A 64-bit globally unique identifier (pool, vdev, dataset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Guid(pub u64);

impl Guid {
    /// A fresh random guid; never zero, since zero means "none" on disk.
    pub fn random() -> Guid {
        loop {
            let value: u64 = rand::random();
            if value != 0 {
                return Guid(value);
            }
        }
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Number of txgs that can be in flight at once: open, quiescing, syncing.
pub const TXG_CONCURRENT_STATES: usize = 3;
/// Size of per-txg arrays, indexed by [`Txg::slot`].
pub const TXG_SIZE: usize = 4;
/// The first txg of a new pool.
pub const TXG_INITIAL: Txg = Txg(4);
/// Frees are deferred for this many txgs before the space can be reallocated.
pub const TXG_DEFER_SIZE: usize = 2;

/// Smallest sector shift a vdev may have (512 bytes).
pub const SPA_MINBLOCKSHIFT: u32 = 9;
/// Largest logical block size (1 MiB, the largest recordsize).
pub const SPA_MAXBLOCKSIZE: u64 = 1 << 20;
/// Largest block shift used for metaslab sizing (16 MiB).
pub const SPA_MAXBLOCKSHIFT: u32 = 24;

/// The most metaslabs one top-level vdev may have. Each costs memory from import on (its
/// struct, trees and space-map state: kilobytes), so a count read from a label or the MOS is
/// checked against this before anything is allocated per metaslab.
/// [`metaslab_geometry`](crate::space::metaslab_geometry) never makes more:
/// `Tunables::validate` keeps the count tunables at or below it. It lives here, beside the
/// other size limits, because both the space layer and the tunables below it need it.
pub const METASLAB_COUNT_MAX: u64 = 1 << 17;

/// The smallest metaslab shift a vdev may have (64 KiB metaslabs); `Tunables::validate` keeps
/// `vdev_min_ms_shift` at or above it, so
/// [`metaslab_geometry`](crate::space::metaslab_geometry) never makes smaller ones.
pub const METASLAB_SHIFT_MIN: u32 = 16;
