//! The positions a resumable receive has noted ([`ResumeTracker`]), shared by the receive
//! that notes them in open context (`receiving.rs`) and the namespace task that writes the
//! newest of each txg in its sync (`snapshots.rs`); the task queue carries the tracker, so
//! its type sits below both.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::dataset::Dataset;
use crate::types::Txg;

/// A resumable receive's position (see `receiving.rs`).
pub struct ResumeTracker {
    pub(super) dataset: Arc<Dataset>,
    pub(super) description: Vec<u8>,
    /// Positions noted, by the txg of the transaction that applied up to them.
    pub(super) positions: Mutex<BTreeMap<Txg, (u64, u64)>>,
}
