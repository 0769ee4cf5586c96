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
//! | [`send`]    | send streams and receive (full, incremental, resumable, batched)           |
//! | [`properties`] | dataset properties as `get` and `list` show them (reads pool and send) |
//! | [`check`]   | whole-pool verification: block pointers against space maps                 |
//!
//! [`types`] holds the identities and units every layer shares; [`tunables`] every knob.
//!
//! # The facade
//! A program that embeds tarn needs only what the crate root re-exports: [`Pool`] (create,
//! import, export and destroy a pool; its datasets, snapshots, clones, holds and properties;
//! scrub, fault injection and statistics), [`FileSystem`] (POSIX operations on a mounted
//! dataset), [`send()`] and [`receive()`], the options and error types they take and return,
//! [`Tunables`], and the [`debug`] module (pool verification and the zdb-like views). The
//! layer modules above are the engine's internals: they stay public for the engine's own
//! integration tests, tarn-stress and the benchmarks, and change as the engine does.
//! `examples/embed.rs` is a complete program written against the facade alone.

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
pub mod properties;
pub mod send;
pub mod space;
#[doc(hidden)]
pub mod testing;
pub mod txg;
pub mod vdev;
pub mod zil;

pub use dataset::props::{Property, PropertySource};
pub use fs::{Attr, FileSystem, FsError};
pub use pool::props::{PoolProperty, PoolSpace, PoolValue};
pub use pool::snapshots::SnapshotInfo;
pub use pool::{
    CreateOptions, ImportOptions, ImportReport, Pool, PoolError, PoolIostat, VdevIostat, VdevSpec,
    WeakPool,
};
pub use properties::{DatasetProperty, DatasetValue};
pub use send::{receive, send, ReceiveOptions, ReceiveReport, SendError, SendOptions, SendReport};
pub use tunables::Tunables;

/// The sanctioned inspection surface: whole-pool verification (`tarn check`) and what the
/// zdb-like `tarn debug` verbs read through [`Pool`] (metaslabs, space maps, the log space
/// map, dnodes, dataset records).
pub mod debug {
    pub use crate::check::{check_pool, CheckReport};
    pub use crate::object::phys::DnodePhys;
    pub use crate::pool::snapshots::DatasetRecords;
    pub use crate::space::log::LogSpaceStats;
    pub use crate::space::{
        MetaslabStats, RangeTree, SpaceMap, SpaceMapAction, SpaceMapEntry, VdevSpaceStats,
    };
}
