//! The priority classes and directions of leaf I/O ([`IoClass`], [`IoKind`]): what the queue
//! (`queue.rs`) schedules by, its limits (`limits.rs`) are set per, and its counters
//! (`stats.rs`) are kept per. They are defined here, below all three.

use serde::{Deserialize, Serialize};

/// Number of I/O classes.
pub const IO_CLASSES: usize = 7;

/// The priority class of an I/O request (OpenZFS's `zio_priority_t`), highest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum IoClass {
    /// A read a caller waits for in open context.
    SyncRead,
    /// A write a caller waits for (the intent log).
    SyncWrite,
    /// A read nobody waits for yet (prefetch).
    AsyncRead,
    /// The writes of a syncing txg.
    AsyncWrite,
    /// Verification reads of check and scrub (and their repairs).
    Scrub,
    /// Trims (reserved: tarn does not trim yet).
    Trim,
    /// Resilver and rebuild I/O (reserved until resilver exists).
    Rebuild,
}

impl IoClass {
    /// Every class, in priority order (the order of the stats arrays).
    pub const ALL: [IoClass; IO_CLASSES] = [
        IoClass::SyncRead,
        IoClass::SyncWrite,
        IoClass::AsyncRead,
        IoClass::AsyncWrite,
        IoClass::Scrub,
        IoClass::Trim,
        IoClass::Rebuild,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    /// The class's name as the tunables and `tarn stat vdev_queue` spell it.
    pub fn name(self) -> &'static str {
        match self {
            IoClass::SyncRead => "sync_read",
            IoClass::SyncWrite => "sync_write",
            IoClass::AsyncRead => "async_read",
            IoClass::AsyncWrite => "async_write",
            IoClass::Scrub => "scrub",
            IoClass::Trim => "trim",
            IoClass::Rebuild => "rebuild",
        }
    }

    /// Whether requests of this class are issued in arrival order (and not aggregated).
    pub(super) fn is_fifo(self) -> bool {
        matches!(self, IoClass::SyncRead | IoClass::SyncWrite)
    }
}

/// The direction of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
}

impl IoKind {
    pub fn index(self) -> usize {
        match self {
            IoKind::Read => 0,
            IoKind::Write => 1,
        }
    }
}
