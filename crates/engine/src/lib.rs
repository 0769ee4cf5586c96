//! tarn: pooled copy-on-write storage in the design family of OpenZFS, in user space.
//!
//! The engine is organised in layers; data flows down, and each layer depends only on layers
//! below it. The module list reads like the layer table of DESIGN.md §2:
//!
//! | module      | role                                                                       |
//! |-------------|----------------------------------------------------------------------------|
//! | [`vdev`]    | leaf devices behind a fault-injectable I/O trait, mirrors, labels, uberblock ring, flock |
//! | [`space`]   | range trees, space maps, metaslabs, the allocator, deferred frees          |
//! | [`block`]   | block pointers, checksums, compression, the read/write pipeline            |
//! | [`cache`]   | the ARC keyed by block identity, and the persistent L2ARC on cache devices |
//! | [`txg`]     | open/quiescing/syncing state machine, holds, dirty accounting, throttle    |
//! | [`object`]  | object sets, dnodes, indirect trees, dirty records, key/value objects      |
//! | [`dataset`] | dataset records and directories, `block_born` / `block_kill`, accounting   |
//! | [`zil`]     | the intent log: log blocks, records, commit for fsync, claim and replay   |
//! | [`fs`]      | POSIX file systems on object sets: znodes, directories, rename, unlinked set |
//! | [`pool`]    | create, import, export, config, uberblocks, the sync driver                |
//! | [`check`]   | whole-pool verification: block pointers against space maps                 |
//!
//! [`types`] holds the identities and units every layer shares; [`tunables`] every knob.

pub mod tunables;
pub mod types;

pub mod block;
pub mod cache;
pub mod check;
pub mod dataset;
pub mod fs;
#[cfg(test)]
mod fuzz;
pub mod object;
pub mod pool;
pub mod send;
pub mod space;
#[doc(hidden)]
pub mod testing;
pub mod txg;
pub mod vdev;
pub mod zil;
