//! The daemon's side of `.zfs/snapshot`: where a mount learns about its file system's
//! snapshots (`tarn_fuse::snapdir::SnapshotSource`).
//!
//! A mount holds the pool only weakly ([`WeakPool`]): a mounted file system must never keep its pool
//! from being exported (export waits for every strong reference to go). Once the pool is gone
//! the snapshot directory is empty and lookups in it fail with ENOENT. The opened snapshots are
//! cached by the adapter (`tarn_fuse::snapdir::SnapshotTable`), which drops those no longer
//! listed when `Mounts::snapshots_changed` or `Mounts::after_rollback` runs.

use std::sync::Arc;

use tarn::{FileSystem, FsError, Pool, PoolError, Snapshot, SnapshotInfo, WeakPool};
use tarn_fuse::snapdir::SnapshotSource;

/// The snapshots of one dataset of a pool.
pub struct PoolSnapshots {
    pool: WeakPool,
    /// The dataset's full name.
    dataset: String,
}

impl PoolSnapshots {
    pub fn new(pool: &Pool, dataset: &str) -> PoolSnapshots {
        PoolSnapshots {
            pool: pool.downgrade(),
            dataset: dataset.to_string(),
        }
    }
}

/// A pool error as the adapter sees it: a snapshot (or dataset) that is not there, or a name
/// that cannot be one, is ENOENT; anything else is the engine's (EIO, logged).
fn fs_error(error: PoolError) -> FsError {
    match error {
        PoolError::DatasetNotFound(_) | PoolError::BadDatasetName(..) => FsError::NotFound,
        PoolError::Fs(error) => error,
        other => FsError::Engine(other.to_string()),
    }
}

impl SnapshotSource for PoolSnapshots {
    fn list(&self) -> Result<Vec<SnapshotInfo>, FsError> {
        self.pool.snapshots_of(&self.dataset).map_err(fs_error)
    }

    fn open(&self, name: &str) -> Result<(SnapshotInfo, FileSystem, Arc<Snapshot>), FsError> {
        self.pool
            .open_snapshot(&format!("{}@{name}", self.dataset))
            .map_err(fs_error)
    }
}
