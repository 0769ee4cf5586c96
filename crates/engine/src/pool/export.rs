//! Closing an imported pool (OpenZFS spa_export_common): export and destroy, the crash a
//! test asks for (`abandon`), and the drop of a pool that was not exported.
//!
//! Export and destroy differ only in the state they leave in the labels. Both ask the last
//! txg to flush every metaslab's unflushed changes (so an import replays almost no log), stop
//! the livelist reader (without waiting for its work: what it read and the sync did not apply
//! is read again after import, `livelists.rs`), stop the sync thread after it has written
//! everything dirty, then write the new state into the
//! even labels and the odd labels with a flush before, between and after: a crash leaves one
//! pair valid, as in a sync that changes the config. Last, every vdev is released (its lock
//! dropped, further writes refused), even while stale handles to the pool's object sets live.
//!
//! `abandon` and the drop of a pool that was not exported behave like a crash: the livelist
//! reader stops, the sync thread stops without writing what is dirty and the labels are left
//! as they are.

use std::sync::atomic::Ordering;

use crate::types::Txg;
use crate::vdev::label::{LabelSet, PoolState};

use super::{Pool, PoolError};

impl Pool {
    /// Stop the livelist reader, then the sync thread after it has written everything dirty.
    fn stop(&self) -> Result<(), PoolError> {
        self.stop_reflow_thread();
        self.stop_livelist_reader();
        if let Some(handle) = self.sync_thread.lock().take() {
            if !self.core.readonly && self.core.txgs.failure().is_none() {
                self.core.txgs.wait_synced(None)?;
            }
            self.core.txgs.shutdown();
            let _ = handle.join();
        }
        if let Some(why) = self.core.txgs.failure() {
            return Err(PoolError::SyncFailed {
                txg: self.core.txgs.last_synced(),
                why,
            });
        }
        Ok(())
    }

    /// Sync everything, mark the pool exported in its labels and release its vdevs.
    pub fn export(self) -> Result<(), PoolError> {
        self.finish(PoolState::Exported)
    }

    /// Export and mark the pool destroyed: import no longer finds it.
    pub fn destroy(self) -> Result<(), PoolError> {
        self.finish(PoolState::Destroyed)
    }

    fn finish(self, state: PoolState) -> Result<(), PoolError> {
        if !self.core.readonly {
            // Export leaves (almost) no log to replay: the last txg flushes every metaslab.
            self.core.io.space.request_flush_all();
        }
        self.stop()?;
        if !self.core.readonly {
            self.core.config.lock().state = state;
            let txg = Txg(self.core.last_committed_txg.load(Ordering::SeqCst));
            self.core.flush()?;
            self.core.write_labels(txg, LabelSet::Even)?;
            self.core.flush()?;
            self.core.write_labels(txg, LabelSet::Odd)?;
            self.core.flush()?;
        }
        self.release_devices();
        Ok(())
    }

    /// Refuse further writes and release every vdev's lock, even while stale handles to this
    /// pool's object sets are still alive.
    fn release_devices(&self) {
        self.core.io.l2arc().stop();
        self.core.io.l2arc().release_devices();
        self.core.io.set_writable(false);
        for top in self.core.io.vdevs.tops().iter() {
            for leaf in &top.children {
                leaf.device.release();
            }
        }
    }

    /// Simulate a crash: stop the sync thread without syncing and without touching labels.
    /// Whatever was not yet synced is lost, exactly as if the process had died (tests only).
    pub fn abandon(self) {
        self.core.txgs.suspend("abandoned".into());
        self.stop_reflow_thread();
        self.stop_livelist_reader();
        if let Some(handle) = self.sync_thread.lock().take() {
            let _ = handle.join();
        }
    }
}

impl Drop for Pool {
    /// Dropping a pool that was not exported behaves like a crash: the sync thread stops without
    /// writing what is dirty, and the vdevs (and their locks) are released. Call
    /// [`Pool::export`] to keep unsynced changes.
    fn drop(&mut self) {
        self.stop_livelist_reader();
        if let Some(handle) = self.sync_thread.lock().take() {
            self.core.txgs.suspend("pool closed without export".into());
            let _ = handle.join();
        }
        // After the suspension: a copy thread waiting for a txg (which a suspended pool may
        // never sync) is released by it.
        self.stop_reflow_thread();
        // Datasets and their object sets refer to each other; break the cycles.
        for (_, dataset) in self.core.dataset_list() {
            dataset.detach_objset();
        }
        for (_, _, dataset) in self.core.pending_destroys.lock().drain(..) {
            dataset.detach_objset();
        }
        self.release_devices();
    }
}
