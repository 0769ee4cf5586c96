//! The object set's side of the intent log (zil/): the log attached to a file system's set,
//! the log header its syncs write, and dirtying a txg for the log's allocations.
//!
//! # Theory
//! The log header lives in the object-set header, which only a sync writes; the log itself
//! changes in open context. So the set keeps the synced header, asks the attached log for the
//! header at the start of each txg's sync (`sync.rs`), and lets the log mark a txg dirty when
//! it allocates in it, so that txg syncs the header and the space maps even if no object
//! changed.
//!
//! The log (`zil::Zil`) belongs to the layer above, which reads and writes object sets; the set
//! knows it only through [`AttachedLog`], what a sync asks of it, and hands it back to the layers
//! above as the type they attached ([`ObjectSet::log`]).

use std::any::Any;
use std::sync::Arc;

use crate::types::Txg;

use super::log_header::LogHeader;
use super::{ObjectError, ObjectSet};

/// What an object set asks of the intent log attached to it. The zil layer implements it
/// (`zil::Zil`); the object layer, below it, names only this.
pub trait AttachedLog: Any + Send + Sync {
    /// Syncing context, once at the start of `txg`'s sync of the set: the log header this
    /// txg writes into the object-set header (freeing the log blocks the txg makes obsolete).
    fn sync(&self, txg: Txg) -> Result<LogHeader, ObjectError>;

    /// Syncing context of `txg` (a rollback): drop the log, whose records described the
    /// discarded changes, giving its blocks back in `txg`.
    fn discard(&self, txg: Txg) -> Result<(), ObjectError>;
}

impl ObjectSet {
    /// Attach the file system's intent log: from now on each sync asks it for the log header.
    pub fn attach_log(&self, log: Arc<dyn AttachedLog>) {
        *self.log.lock() = Some(log);
    }

    /// The attached intent log, if any, as the type that was attached (`objset.log::<Zil>()`);
    /// None if none is attached or it is of another type.
    pub fn log<L: AttachedLog>(&self) -> Option<Arc<L>> {
        let log: Arc<dyn Any + Send + Sync> = self.log.lock().clone()?;
        log.downcast::<L>().ok()
    }

    /// The log header of the synced root.
    pub fn synced_log_header(&self) -> LogHeader {
        self.state.lock().synced_log_header.clone()
    }

    /// Open context, under a hold on `txg`: the intent log allocated in `txg`, so the txg
    /// must sync this set's header (and the allocation) even if nothing else changed.
    pub fn dirty_log(&self, txg: Txg) {
        let mut state = self.state.lock();
        assert!(
            txg > state.last_synced,
            "log change joins txg {txg}, already synced"
        );
        state.dirty.entry(txg).or_default().log = true;
    }

    /// Objects created from now on without a chosen number get one of `floor` or above
    /// (replay of the intent log keeps the numbers its records name free).
    pub fn reserve_object_numbers(&self, floor: u64) {
        let mut state = self.state.lock();
        state.next_object = state.next_object.max(floor);
    }
}
