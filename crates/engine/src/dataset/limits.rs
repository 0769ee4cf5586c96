//! A dataset's space limits and what is charged against them between txgs (OpenZFS
//! dsl_dir's dd_quota, dd_reserved, dd_tempreserved and dd_space_towrite, and dsl_dataset's
//! ds_quota and ds_reserved).
//!
//! # The four limits
//! - `quota`: the dataset, its snapshots and its descendants together.
//! - `refquota`: the dataset's referenced bytes alone.
//! - `reservation`: space the parent counts as used by this dataset (and its snapshots and
//!   descendants) whatever it holds, so that nobody else can take it.
//! - `refreservation`: the same for the dataset's own live bytes (`usedbydataset`).
//!
//! None inherits. They are stored as properties (`pool/dataset_props.rs`); this module keeps
//! their values at hand for write admission, which must not read the MOS.
//!
//! # Charged space
//! A directory's *charged* bytes are zfs's `used`: its own space, the part of its
//! refreservation its live bytes do not fill (`usedbyrefreservation`), and for each child the
//! larger of the child's charged bytes and its reservation. They are computed by the pool's
//! sync driver at the end of each txg's dataset accounting (`pool/datasets.rs`), and stored in
//! the directory record's used field.
//!
//! # In flight
//! Between two syncs the charged figure does not move, so each write admitted against a limit
//! adds its estimate (`pool/limits.rs`) to the in-flight bytes of its txg, at each directory
//! up the tree its growth reaches; they are dropped once that txg has synced and the charged
//! figures include what it wrote. Bytes held back for the write-backs of a kernel cache are
//! counted the same way until released.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::RwLock;

use super::Dataset;
use crate::types::Txg;

/// Txgs that can hold admitted writes at once (open, quiescing, syncing), rounded up.
const TXG_SLOTS: usize = 4;

/// The limits a dataset sets (bytes; 0 = none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitSettings {
    pub quota: u64,
    pub refquota: u64,
    pub reservation: u64,
    pub refreservation: u64,
}

impl LimitSettings {
    pub fn any(&self) -> bool {
        *self != LimitSettings::default()
    }
}

/// See the module documentation.
#[derive(Default)]
pub struct SpaceLimits {
    quota: AtomicU64,
    refquota: AtomicU64,
    reservation: AtomicU64,
    refreservation: AtomicU64,
    /// zfs's `used` as of the last synced txg (see "Charged space").
    charged: AtomicU64,
    /// Admitted estimates by txg (see "In flight").
    in_flight: [AtomicU64; TXG_SLOTS],
    held_back: AtomicU64,
    /// The parent directory's dataset (none for the pool's root).
    parent: RwLock<Weak<Dataset>>,
    /// Settings changed in open context for a txg not synced yet, as (that txg, the settings
    /// before): the directory totals of an earlier txg, whose MOS holds the old properties,
    /// count the old settings ([`SpaceLimits::settings_in`]). A set syncing meanwhile counted
    /// a new reservation in a txg that lacked it, and a rewind there failed `check`.
    earlier: parking_lot::Mutex<Vec<(Txg, LimitSettings)>>,
}

impl SpaceLimits {
    /// The settings the MOS of `txg` holds (syncing context: every later sync asks about a
    /// later txg, so changes of txgs up to `txg` are forgotten).
    pub fn settings_in(&self, txg: Txg) -> LimitSettings {
        let mut earlier = self.earlier.lock();
        earlier.retain(|(from, _)| *from > txg);
        earlier
            .first()
            .map_or_else(|| self.settings(), |(_, before)| *before)
    }

    /// Change the settings; with `from`, the txg whose MOS first holds them (open context:
    /// the totals of earlier txgs keep the old ones).
    pub fn set_settings_from(&self, settings: LimitSettings, from: Option<Txg>) {
        if let Some(from) = from {
            let before = self.settings();
            let mut earlier = self.earlier.lock();
            earlier.push((from, before));
            earlier.sort_by_key(|(txg, _)| *txg);
        }
        self.set_settings(settings);
    }

    pub fn settings(&self) -> LimitSettings {
        LimitSettings {
            quota: self.quota.load(Ordering::Relaxed),
            refquota: self.refquota.load(Ordering::Relaxed),
            reservation: self.reservation.load(Ordering::Relaxed),
            refreservation: self.refreservation.load(Ordering::Relaxed),
        }
    }

    pub fn set_settings(&self, settings: LimitSettings) {
        self.quota.store(settings.quota, Ordering::Relaxed);
        self.refquota.store(settings.refquota, Ordering::Relaxed);
        self.reservation
            .store(settings.reservation, Ordering::Relaxed);
        self.refreservation
            .store(settings.refreservation, Ordering::Relaxed);
    }

    pub fn charged(&self) -> u64 {
        self.charged.load(Ordering::Relaxed)
    }

    pub fn set_charged(&self, bytes: u64) {
        self.charged.store(bytes, Ordering::Relaxed);
    }

    /// Estimates admitted in txgs not yet synced, plus (when `with_held_back`) the bytes held
    /// back for write-backs.
    pub fn pending(&self, with_held_back: bool) -> u64 {
        let in_flight: u64 = self
            .in_flight
            .iter()
            .map(|slot| slot.load(Ordering::Relaxed))
            .sum();
        if with_held_back {
            in_flight.saturating_add(self.held_back.load(Ordering::Relaxed))
        } else {
            in_flight
        }
    }

    /// Estimates admitted in `txg`.
    pub fn in_flight_in(&self, txg: Txg) -> u64 {
        self.in_flight[txg.0 as usize % TXG_SLOTS].load(Ordering::Relaxed)
    }

    pub fn add_in_flight(&self, txg: Txg, bytes: u64) {
        self.in_flight[txg.0 as usize % TXG_SLOTS].fetch_add(bytes, Ordering::Relaxed);
    }

    /// `txg` has synced: its estimates are in the charged figures now.
    pub fn txg_synced(&self, txg: Txg) {
        self.in_flight[txg.0 as usize % TXG_SLOTS].store(0, Ordering::Relaxed);
    }

    pub fn hold_back(&self, bytes: u64) {
        self.held_back.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn release_held_back(&self, bytes: u64) {
        // Saturating: a release never takes more than was held.
        let _ = self
            .held_back
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(bytes))
            });
    }

    pub fn parent(&self) -> Option<Arc<Dataset>> {
        self.parent.read().upgrade()
    }

    pub fn set_parent(&self, parent: Option<&Arc<Dataset>>) {
        *self.parent.write() = parent.map_or_else(Weak::new, Arc::downgrade);
    }
}

/// The part of a growth of `delta` bytes, on top of `used`, that a reservation of `reserved`
/// does not absorb: what the parent must find (OpenZFS parent_delta).
pub fn beyond_reservation(used: u64, delta: u64, reserved: u64) -> u64 {
    let before = used.max(reserved);
    let after = used.saturating_add(delta).max(reserved);
    after - before
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reservation set in open context for txg 10 is not in the totals of txg 9, which may
    /// be syncing meanwhile (its MOS lacks the property), and is from txg 10 on.
    #[test]
    fn a_change_counts_from_the_txg_that_writes_it() {
        let limits = SpaceLimits::default();
        let old = LimitSettings {
            quota: 5,
            ..LimitSettings::default()
        };
        limits.set_settings_from(old, None);
        let new = LimitSettings {
            reservation: 18 << 20,
            ..old
        };
        limits.set_settings_from(new, Some(Txg(10)));
        assert_eq!(limits.settings(), new, "admission sees the change at once");
        assert_eq!(limits.settings_in(Txg(9)), old);
        assert_eq!(limits.settings_in(Txg(10)), new);
        assert_eq!(limits.settings_in(Txg(11)), new);
        // Two changes in flight: each earlier txg sees what its MOS holds.
        let newer = LimitSettings { quota: 7, ..new };
        limits.set_settings_from(newer, Some(Txg(13)));
        let newest = LimitSettings { quota: 9, ..new };
        limits.set_settings_from(newest, Some(Txg(14)));
        assert_eq!(limits.settings_in(Txg(12)), new);
        assert_eq!(limits.settings_in(Txg(13)), newer);
        assert_eq!(limits.settings_in(Txg(14)), newest);
    }

    #[test]
    fn a_reservation_absorbs_growth_until_it_is_filled() {
        assert_eq!(beyond_reservation(0, 10, 0), 10);
        assert_eq!(beyond_reservation(0, 10, 100), 0);
        assert_eq!(beyond_reservation(95, 10, 100), 5);
        assert_eq!(beyond_reservation(200, 10, 100), 10);
    }

    #[test]
    fn in_flight_bytes_leave_with_their_txg() {
        let limits = SpaceLimits::default();
        limits.add_in_flight(Txg(5), 100);
        limits.add_in_flight(Txg(6), 10);
        limits.hold_back(7);
        assert_eq!(limits.pending(false), 110);
        assert_eq!(limits.pending(true), 117);
        limits.txg_synced(Txg(5));
        assert_eq!(limits.pending(false), 10);
        limits.release_held_back(100);
        assert_eq!(limits.pending(true), 10);
    }
}
