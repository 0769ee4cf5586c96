//! Long holds: in-memory claims on a dataset by a reader that needs its blocks for longer
//! than one call (OpenZFS `dsl_dataset_long_hold`).
//!
//! A send reads its snapshots for the whole stream, outside the namespace lock. If one were
//! destroyed meanwhile, its blocks would be freed in the background and reused within seconds,
//! and the send would read whatever was written there since. So a reader takes a [`LongHold`]
//! on every snapshot it will read, and a destroy that would free a held dataset is refused
//! with [`PoolError::DatasetBusy`] naming the holder, checked for every dataset it names
//! before anything is destroyed. Renames stay allowed: holds are by dataset object, not name.
//!
//! Holds live only in memory, one count per (dataset object, holder) in the pool's
//! [`LongHolds`]; they end with the guard, or with the process. User holds (`hold`/`release`,
//! kept on disk in a snapshot's user holds object, `pool/user_holds.rs`) refuse a destroy
//! through the same check, [`PoolCore::destroy_refusal`]; a deferred destroy (`destroy -d`)
//! waits for user holds but is refused by a long hold, as in OpenZFS.
//!
//! A hold is taken under the namespace lock, which every destroy holds from its check until
//! its destroy is queued: a destroy either sees the hold or ran before it, and then the hold
//! finds no snapshot.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::dataset::snapshot::Snapshot;
use crate::object::ObjectSet;
use crate::types::ObjectId;

use super::{Pool, PoolCore, PoolError};

/// Who holds a dataset, in words that follow "snapshot POOL/FS@SNAP is".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Holder {
    /// A send reads it (the snapshot sent, or an incremental stream's source).
    Send,
    /// `tarn debug object` reads it.
    Debug,
    /// `tarn diff` compares it with another snapshot or its file system.
    Diff,
}

impl Holder {
    fn describe(self) -> &'static str {
        match self {
            Holder::Send => "being sent",
            Holder::Debug => "being read by tarn debug object",
            Holder::Diff => "being read by tarn diff",
        }
    }
}

/// The pool's long holds: per dataset object, how many holds each holder has.
#[derive(Default)]
pub struct LongHolds {
    held: Mutex<HashMap<ObjectId, BTreeMap<Holder, u64>>>,
}

impl LongHolds {
    /// Why `object` is held (the first holder, in [`Holder`] order), if it is.
    fn holder(&self, object: ObjectId) -> Option<Holder> {
        self.held
            .lock()
            .get(&object)
            .and_then(|holders| holders.keys().next().copied())
    }

    fn take(&self, object: ObjectId, holder: Holder) {
        *self
            .held
            .lock()
            .entry(object)
            .or_default()
            .entry(holder)
            .or_default() += 1;
    }

    fn release(&self, object: ObjectId, holder: Holder) {
        let mut held = self.held.lock();
        let holders = held.get_mut(&object).expect("a long hold is released once");
        let count = holders
            .get_mut(&holder)
            .expect("a long hold is released once");
        *count -= 1;
        if *count == 0 {
            holders.remove(&holder);
        }
        if holders.is_empty() {
            held.remove(&object);
        }
    }
}

/// A long hold on one snapshot, released when dropped. It keeps the snapshot itself, so the
/// holder reads the snapshot it resolved even if the snapshot is renamed meanwhile.
pub struct LongHold {
    holds: Arc<LongHolds>,
    holder: Holder,
    snapshot: Arc<Snapshot>,
}

impl LongHold {
    /// The held snapshot.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }
}

impl Drop for LongHold {
    fn drop(&mut self) {
        self.holds.release(self.snapshot.object, self.holder);
    }
}

impl Pool {
    /// Take a long hold on snapshot `full` (`POOL/FS@SNAP`) for `holder`: until the guard is
    /// dropped, no destroy frees it.
    pub fn long_hold(&self, full: &str, holder: Holder) -> Result<LongHold, PoolError> {
        let core = &self.core;
        let _namespace = core.namespace.lock();
        let (_, snapshot) = core.snapshot_by_name(full)?;
        core.long_holds.take(snapshot.object, holder);
        Ok(LongHold {
            holds: core.long_holds.clone(),
            holder,
            snapshot,
        })
    }

    /// The held snapshot's object set, read-only.
    pub fn held_objset(&self, hold: &LongHold) -> Result<Arc<ObjectSet>, PoolError> {
        Ok(hold.snapshot.objset(&self.core.io)?)
    }
}

impl PoolCore {
    /// Why snapshot `snapshot` (named `full`) must not be destroyed now, if it must not: it
    /// is held, by a reader or by a user. Every destroy that would free a snapshot asks this
    /// first, with the namespace lock held.
    pub(super) fn destroy_refusal(&self, full: &str, snapshot: &Snapshot) -> Option<String> {
        self.long_hold_refusal(full, snapshot)
            .or_else(|| self.user_hold_refusal(full, snapshot))
    }

    /// Why snapshot `snapshot` (named `full`) must not be destroyed now because a reader holds
    /// it, if one does.
    pub(super) fn long_hold_refusal(&self, full: &str, snapshot: &Snapshot) -> Option<String> {
        self.long_holds
            .holder(snapshot.object)
            .map(|holder| format!("snapshot {full} is {}", holder.describe()))
    }
}
