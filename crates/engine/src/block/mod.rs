//! Block layer: block pointers, checksums, compression, and the read/write pipelines
//! (OpenZFS zio*.c, blkptr).
//!
//! # Overview
//! Every block is reached through a 128-byte [`blkptr::BlockPtr`] held by its parent (an
//! indirect block, a dnode, a dataset record, or the uberblock). The pointer carries up to three
//! DVAs (copies), the logical and physical sizes, the compression and checksum algorithms, the
//! birth txgs, the fill count and the checksum of the stored bytes; tiny blocks are embedded in
//! the pointer itself, and holes keep their birth txg.
//!
//! # Invariants
//! - A block's checksum lives in its parent, never in the block (invariant 2).
//! - Bytes read from disk are returned only after their checksum verifies; a bad copy is
//!   repaired from a good one when the pool is writable.
//! - Sizes are typed: logical (before compression), physical (stored), allocated (on the vdev,
//!   rounded to sectors, per copy).
//!
//! # Operations
//! [`pipeline::BlockIo`] writes (compress, checksum, allocate, issue every copy) and reads
//! (read, verify, decompress, try another copy, self-heal). It runs in syncing context for
//! writes and in any context for reads; it holds no lock across I/O. [`prewrite`] writes a data
//! block in open context for the intent log (OpenZFS dmu_sync).

pub mod blkptr;
pub mod caching;
pub mod checksum;
pub mod compress;
pub mod gang;
pub mod issue;
pub mod pipeline;
pub mod prewrite;

pub use blkptr::BlockError;
