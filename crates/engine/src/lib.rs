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
//! A program that embeds tarn needs only what the crate root exports: [`Pool`] (create,
//! import, export and destroy a pool; its datasets, snapshots, clones, holds and properties;
//! scrub, fault injection and statistics), [`FileSystem`] (POSIX operations on a mounted
//! dataset), [`send()`] and [`receive()`], the options, reports and error types they take and
//! return, [`Tunables`] and [`types`], and four modules: [`stats`] (what `iostat`, the kstats
//! and the metrics endpoint count), [`status`] (health as `pool status` and `pool import` show
//! it), [`inject`] (fault injection) and [`debug`] (pool verification and the zdb-like views).
//! tarn's own command crates (protocol, fuse, ops, daemon, cli) are written against this
//! facade alone, and CI builds them without the `internals` feature to keep them so.
//!
//! The layer modules in the table above are the engine's internals: private unless the cargo
//! feature `internals` is on, which the engine's own tests, tarn-stress and tarn-bench turn on
//! because they reach below the facade (fault plans, power cuts, raw counters). They change as
//! the engine does. `examples/embed.rs` is a complete program written against the facade.

// Without `internals` the layer modules are private, so what only the engine's tests,
// tarn-stress and tarn-bench use (test hooks, inspection helpers, re-exports for them) looks
// dead to the compiler. The `internals` build, which clippy and the test suite use, still
// reports real dead code and unused imports: nothing is hidden that it would show.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]

pub mod tunables;
pub mod types;

#[cfg(feature = "internals")]
pub mod block;
#[cfg(not(feature = "internals"))]
pub(crate) mod block;
#[cfg(feature = "internals")]
pub mod cache;
#[cfg(not(feature = "internals"))]
pub(crate) mod cache;
#[cfg(feature = "internals")]
pub mod check;
#[cfg(not(feature = "internals"))]
pub(crate) mod check;
#[cfg(feature = "internals")]
pub mod dataset;
#[cfg(not(feature = "internals"))]
pub(crate) mod dataset;
#[cfg(feature = "internals")]
pub mod fs;
#[cfg(not(feature = "internals"))]
pub(crate) mod fs;
#[cfg(test)]
mod fuzz;
#[cfg(feature = "internals")]
pub mod object;
#[cfg(not(feature = "internals"))]
pub(crate) mod object;
#[cfg(feature = "internals")]
pub mod pool;
#[cfg(not(feature = "internals"))]
pub(crate) mod pool;
#[cfg(feature = "internals")]
pub mod properties;
#[cfg(not(feature = "internals"))]
pub(crate) mod properties;
#[cfg(feature = "internals")]
pub mod send;
#[cfg(not(feature = "internals"))]
pub(crate) mod send;
#[cfg(feature = "internals")]
pub mod space;
#[cfg(not(feature = "internals"))]
pub(crate) mod space;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod testing;
#[cfg(not(feature = "internals"))]
#[allow(dead_code)]
pub(crate) mod testing;
#[cfg(feature = "internals")]
pub mod txg;
#[cfg(not(feature = "internals"))]
pub(crate) mod txg;
#[cfg(feature = "internals")]
pub mod vdev;
#[cfg(not(feature = "internals"))]
pub(crate) mod vdev;
#[cfg(feature = "internals")]
pub mod zil;
#[cfg(not(feature = "internals"))]
pub(crate) mod zil;

pub use block::blkptr::{ChecksumType, Compression};
pub use dataset::delegation::{
    validate_permission, Grant, GrantScope, Grantee, Identity, VERB_PERMISSIONS,
};
pub use dataset::owner_quotas::{OwnerField, OwnerMeasure, OwnerProperty};
pub use dataset::props::{is_user_property_name, Property, PropertySource};
pub use dataset::Snapshot;
pub use fs::{
    Attr, FileKind, FileSystem, FsError, HeldBack, SeekTarget, SetAttr, SpaceFigures, Timestamp,
    WriteSource,
};
pub use object::kv::COOKIE_FIRST;
pub use object::owners::OwnerKind;
pub use object::{ObjectError, ObjectProps, ReadPiece};
pub use pool::bookmarks::BookmarkInfo;
pub use pool::datasets::DatasetInfo;
pub use pool::delegation::GrantChange;
pub use pool::holds::Holder;
pub use pool::owner_quotas::OwnerSpace;
pub use pool::props::{PoolProperty, PoolSpace, PoolValue};
pub use pool::snapshots::SnapshotInfo;
pub use pool::user_holds::{DeferredDestroyOutcome, ReleaseOutcome, UserHold};
pub use pool::{
    is_raidz_vdev_name, parse_vdev_layout, validate_pool_name, CreateOptions, ImportOptions,
    ImportReport, Pool, PoolError, VdevLayout, VdevSpec, WeakPool, VDEV_KEYWORDS,
};
pub use properties::{DatasetProperty, DatasetValue};
pub use send::resume::ResumeToken;
pub use send::{
    abort_receive, diff, receive, resume_send_options, send, ReceiveOptions, ReceiveReport,
    SendError, SendOptions, SendReport,
};
pub use send::{DiffKind, DiffRecord, DiffReport};
pub use tunables::Tunables;
pub use vdev::alloc::DirectIoAllocator;
pub use zil::SyncMode;

/// What a pool counts, as `pool iostat`, the kstats and the metrics endpoint show it: per-vdev
/// and per-class I/O with latency histograms, the ARC and L2ARC, txgs, the allocator and the
/// log space map, and the intent log.
pub mod stats {
    pub use crate::cache::{BlockCacheStats, CacheCounters};
    pub use crate::pool::{PoolIostat, VdevIostat};
    pub use crate::space::log::LogSpaceStats;
    pub use crate::space::stats::SpaceTxgStats;
    pub use crate::space::{AllocClass, MetaslabStats, VdevSpaceStats};
    pub use crate::txg::{TxgHistoryRow, TxgState, TxgStats};
    pub use crate::vdev::{
        ClassSnapshot, IoClass, LeafStatsSnapshot, LATENCY_HISTOGRAM_BUCKETS,
        SIZE_HISTOGRAM_BUCKETS,
    };
    pub use crate::zil::ZilStats;
}

/// A pool's health as `pool status` and `pool import` report it: the vdev tree and each
/// leaf's state, what import found on each device, scrub and resilver progress, the error log,
/// the failure mode, the cache devices and the history of commands.
pub mod status {
    pub use crate::cache::l2arc::CacheDeviceHealth;
    pub use crate::pool::errlog::ErrorEntry;
    pub use crate::pool::failmode::{short_reason, FailMode};
    pub use crate::pool::features::{unsupported_features, UnsupportedFeatures};
    pub use crate::pool::history::HistoryRecord;
    pub use crate::pool::raidz_expand::RaidzExpansionStatus;
    pub use crate::pool::scan::{ResilverRequest, ScanFunction, ScanPhys, ScanState, ScanStatus};
    pub use crate::pool::{FoundPool, ImportState, TopImportState, VdevProblem};
    pub use crate::vdev::label::{PoolState, VDEV_LABEL_START_SIZE};
    pub use crate::vdev::{Leaf, VdevHealth};
}

/// Fault injection (`tarn inject`): errors, delays and corruption on chosen devices, ranges
/// and I/O kinds, to test that redundancy and self-healing work.
pub mod inject {
    pub use crate::vdev::inject::{
        DeviceRange, InjectedFault, InjectedIo, Injection, InjectionStatus,
    };
}

/// The sanctioned inspection surface: whole-pool verification (`tarn check`) and what the
/// zdb-like `tarn debug` verbs read through [`Pool`] (metaslabs, space maps, the log space
/// map, dnodes, dataset records, object sets and their traversal).
pub mod debug {
    pub use crate::block::blkptr::ObjectType;
    pub use crate::block::checksum::compute as compute_checksum;
    pub use crate::check::{check_pool, CheckReport};
    pub use crate::object::phys::DnodePhys;
    pub use crate::object::traverse::Bookmark;
    pub use crate::object::ObjectSet;
    pub use crate::pool::snapshots::DatasetRecords;
    pub use crate::space::log::LogSpaceStats;
    pub use crate::space::{
        MetaslabStats, RangeTree, SpaceMap, SpaceMapAction, SpaceMapEntry, VdevSpaceStats,
    };
}
