//! The vdev layer: leaf devices, their tree, labels and the uberblock ring (OpenZFS `vdev_*.c`).
//!
//! # Overview
//!
//! A pool stores its blocks on *top-level vdevs*. A top-level vdev is either a single leaf
//! device or a mirror of leaf devices; a leaf is a regular file or a block device. Every byte
//! the engine reads or writes goes through the [`BlockDevice`] trait ([`io`]), so that tests can
//! wrap a leaf in a [`FaultyDevice`] ([`fault`]) that fails, stops (simulated power loss) or
//! tears writes at the n-th I/O, or corrupts reads of a byte range.
//!
//! Block pointers address space on a top-level vdev by (vdev id, offset), where the offset is
//! relative to the start of the *data area* of every leaf: byte [`VDEV_LABEL_START_SIZE`]
//! (4 MiB). [`TopVdev::write`] sends a write to every child (mirror semantics; a single leaf is
//! a mirror of one) and [`TopVdev::read_child`] reads one chosen child, so that the block
//! pipeline above can verify checksums and try the next child itself (self-healing lives
//! there, not here).
//!
//! # On-disk structures
//!
//! Each leaf carries four 256 KiB labels, two at the front and two at the back, so that a
//! leaf overwritten at either end is still recognised:
//!
//! ```text
//!  0        256K      512K               4M                      A-512K    A-256K     A
//!  +---------+---------+-----------------+----------- ... --------+---------+---------+
//!  |   L0    |   L1    | reserved (boot) |  data area (DVA 0 ..)  |   L2    |   L3    |
//!  +---------+---------+-----------------+----------- ... --------+---------+---------+
//!  A = device size aligned down to 256 KiB; the data area is [`leaf_allocatable_bytes`] long.
//! ```
//!
//! One label (see [`label`] for the byte diagram of the config header):
//!
//! ```text
//!  0         16K                                       128K                          256K
//!  +----------+------------------------------------------+-----------------------------+
//!  | reserved | config area: header (48 B) + CBOR config | uberblock ring: slots of     |
//!  | (zero)   | payload, zero padded (112 KiB)           | 2^clamp(ashift,10,13) bytes  |
//!  +----------+------------------------------------------+-----------------------------+
//! ```
//!
//! The config ([`LabelConfig`]) is self-describing (CBOR via serde), versioned (a label format
//! version in the header and a config version inside) and checksummed (BLAKE3 of the payload
//! in the header). Uberblocks are opaque bytes to this layer: the pool layer encodes, checksums,
//! decodes and selects them.
//!
//! # Invariants
//!
//! - Labels and uberblock slots are the only places this layer writes in place (DESIGN §3.1).
//!   Writing a label rewrites its config area only; its uberblock ring is never touched by a
//!   config write, and an uberblock write touches only its own slot, in all four labels.
//! - All I/O to the data area is sector aligned (`1 << ashift`) and inside `asize`; a
//!   violation is a programmer error and asserts. Offsets taken from disk are checked by the
//!   caller with [`TopVdev::contains`] first.
//! - Decoding a label never panics: every malformed config area yields
//!   [`VdevError::LabelCorrupt`] saying which label and what is wrong.
//! - A leaf is held by `flock(LOCK_EX | LOCK_NB)` on its descriptor for as long as it is open
//!   for writing. flock locks belong to the open file description, so the kernel drops them
//!   when the process dies (import after a crash needs no force) and closing some *other*
//!   descriptor of the same file does not drop them, unlike POSIX `fcntl` locks (DESIGN §4).
//!
//! # I/O scheduling
//!
//! Every data-area read and write of a leaf goes through its [`VdevQueue`] ([`queue`]), the
//! OpenZFS vdev queue: priority classes ([`IoClass`]: sync read, sync write, async read, async
//! write, scrub, trim, rebuild) with minimum and maximum active counts, the async write
//! maximum scaled by the pool's dirty data, aggregation of adjacent requests up to
//! `vdev_aggregation_limit`, and a few issue threads per leaf, so that callers never do device
//! I/O themselves (but a sync write that may go at once, which its caller waits for anyway;
//! and async writes are capped beside recent sync writes: [`limits`]). Each request's queue and device time is recorded in the leaf's
//! [`LeafStats`] ([`stats`]) for `tarn pool iostat`. Labels and uberblocks are written
//! straight to the devices by the commit, after the queues have drained (they are ordered by
//! flushes, not by the scheduler).
//!
//! # Context and locking
//!
//! Devices are `Send + Sync` and use positional I/O (`pread`/`pwrite`), so any number of
//! threads may read and write a leaf at once without a lock. Each leaf's queue has one mutex,
//! held to queue a request and to choose the next I/O, never across device I/O. Statistics
//! ([`LeafStats`]) are atomic counters. The per-leaf list of missed writes has a mutex taken
//! on the error path only. A top-level vdev's metaslab array object id is an atomic settable
//! in syncing context.
//!
//! # Operations
//!
//! - [`FileDevice::open`] / [`FileDevice::create_sparse`]: open (and lock) or create a leaf.
//! - [`write_labels`], [`read_label`], [`read_newest_label`]: the config in the labels.
//! - [`write_uberblock`], [`read_uberblock_slots`]: the uberblock ring.
//! - [`TopVdev::write`], [`TopVdev::write_async`], [`TopVdev::read_child`],
//!   [`TopVdev::flush`]: data-area I/O, in a class, through the leaves' queues.
//! - [`scan_dirs`]: find leaves with valid labels in directories, for import.
//!
//! # Crash behaviour
//!
//! A write is durable only after a later [`BlockDevice::flush`] (fdatasync) returns. The pool
//! layer's commit order (OpenZFS `vdev_config_sync`) is: flush data; write the even labels
//! (L0, L2) and flush; write the uberblock and flush; write the odd labels (L1, L3) and flush.
//! Whatever the crash point, one pair of labels is intact and [`read_newest_label`] picks the
//! valid label with the highest txg; a torn config area fails its checksum and is skipped.
//! A torn uberblock slot is caught by the pool layer's uberblock checksum, and the ring still
//! holds older uberblocks to fall back to.
//!
//! A mirror write that reached at least one child succeeds; each child that missed it counts
//! a write error and logs the syncing txg in its dirty time log ([`dtl`]), the basis of
//! resilver.
//! A write that reached no child returns [`VdevError::NoChildWritten`], upon which the pool
//! suspends (fail-stop).

pub mod alloc;
pub mod buffers;
pub mod dtl;
pub mod fault;
pub mod inject;
pub mod io;
pub mod io_class;
pub mod label;
pub mod limits;
pub mod plug;
pub mod queue;
pub mod raidz;
pub mod scan;
pub mod stats;
pub mod tree;

pub use alloc::DirectIoAllocator;
pub use dtl::DirtyTimeLog;
pub use fault::{FaultPlan, FaultyDevice, PowerCutOutcome, ReadFaultKind};
pub use io::{AlignedBuffer, BlockDevice, FileDevice, MissingDevice};
pub use io_class::{IoClass, IoKind, IO_CLASSES};
pub use label::{
    leaf_allocatable_bytes, read_label, read_newest_label, read_uberblock_slots,
    uberblock_slot_count, uberblock_slot_size, write_labels, write_uberblock, LabelConfig,
    LabelSet, LeafConfig, PoolState, TopVdevConfig, TopVdevKind, VDEV_LABELS, VDEV_LABEL_END_SIZE,
    VDEV_LABEL_SIZE, VDEV_LABEL_START_SIZE, VDEV_MIN_DEVICE_SIZE,
};
pub use queue::{QueueLimits, VdevQueue};
pub use raidz::RaidzGeometry;
pub use scan::{scan_dirs, FoundLeaf};
pub use stats::{
    ClassSnapshot, KindSnapshot, LeafStats, LeafStatsSnapshot, LATENCY_HISTOGRAM_BUCKETS,
    SIZE_HISTOGRAM_BUCKETS,
};
pub use tree::{Leaf, TopVdev, VdevHealth, VdevTree, RAIDZ_CHILDREN_MAX};

use std::path::PathBuf;

use crate::types::VdevId;

/// Every error of the vdev layer.
#[derive(Debug, thiserror::Error)]
pub enum VdevError {
    /// An I/O operation on a device failed.
    #[error("{operation} of {length} bytes at offset {offset} on {device} failed: {source}")]
    Io {
        /// The device (its path, from [`BlockDevice::describe`]).
        device: String,
        /// What was being done: "read", "write", "flush".
        operation: &'static str,
        offset: u64,
        length: u64,
        #[source]
        source: std::io::Error,
    },

    /// A device could not be opened or created.
    #[error("cannot {operation} {path}: {source}", path = path.display())]
    Open {
        path: PathBuf,
        /// "open", "create", "inspect", "size".
        operation: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// Another process (or another open in this process) holds the device's flock.
    #[error("{path} is in use by another process (it holds the device lock)", path = path.display())]
    InUse { path: PathBuf },

    /// `create_sparse` refuses to overwrite an existing file.
    #[error("cannot create {path}: it already exists", path = path.display())]
    AlreadyExists { path: PathBuf },

    /// The path names something that is neither a regular file nor a block device.
    #[error("{path} is neither a regular file nor a block device", path = path.display())]
    NotADevice { path: PathBuf },

    /// The device is too small to hold labels and a useful data area.
    #[error(
        "{device} is too small: {size_bytes} bytes, a vdev needs at least {minimum_bytes} bytes"
    )]
    DeviceTooSmall {
        device: String,
        size_bytes: u64,
        minimum_bytes: u64,
    },

    /// A label's config area is present but cannot be trusted.
    #[error("label {label} on {device} is corrupt: {what}")]
    LabelCorrupt {
        device: String,
        label: usize,
        what: String,
    },

    /// The encoded config does not fit in a label's config area.
    #[error("pool config encodes to {size_bytes} bytes; a label holds at most {maximum_bytes}")]
    ConfigTooLarge { size_bytes: u64, maximum_bytes: u64 },

    /// A top-level vdev's description (from a config or a caller) is not sound.
    #[error("top-level vdev {top}: invalid configuration: {what}")]
    InvalidConfig { top: VdevId, what: String },

    /// A config could not be encoded (should not happen for a well-formed config).
    #[error("cannot encode the pool config: {what}")]
    ConfigEncode { what: String },

    /// A write reached no child of a top-level vdev; the pool must suspend.
    #[error(
        "write of {length} bytes at offset {offset} reached no child of top-level vdev {top}: {first_error}"
    )]
    NoChildWritten {
        top: VdevId,
        offset: u64,
        length: u64,
        first_error: String,
    },

    /// A flush succeeded on no child of a top-level vdev.
    #[error("flush reached no child of top-level vdev {top}: {first_error}")]
    NoChildFlushed { top: VdevId, first_error: String },
}

impl VdevError {
    /// Wrap an I/O error of `device` with what was being done.
    pub fn io(
        device: &dyn BlockDevice,
        operation: &'static str,
        offset: u64,
        length: u64,
        source: std::io::Error,
    ) -> VdevError {
        VdevError::Io {
            device: device.describe(),
            operation,
            offset,
            length,
            source,
        }
    }
}
