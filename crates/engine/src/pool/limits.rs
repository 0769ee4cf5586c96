//! Quotas and reservations (OpenZFS dsl_dir.c's tempreserve, space_available and
//! set_quota/set_reservation checks, dsl_dataset.c's refquota and refreservation).
//!
//! # What each limit means
//! See `dataset::limits`. A dataset's *charged* bytes (zfs's `used`) are its own space, the
//! unfilled part of its refreservation, and for each child the larger of the child's charged
//! bytes and its reservation; [`charged_space`] computes them for the sync driver (which
//! stores them in the directory records) and for `list`.
//!
//! # Admission ([`PoolLimits::admit`])
//! A write's charge (its worst-case growth of `used`, `object::WriteEstimate::charge`) is
//! checked at its dataset and then at each directory above it, as long as some of it is not
//! absorbed by a reservation on the way (OpenZFS parent_delta):
//! - the dataset's `refquota` against its referenced bytes, the part its refreservation
//!   absorbs taken off what goes further up;
//! - each level's `quota` against its charged bytes plus what is in flight there;
//! - at the top, when reservations are not yet filled, the pool's space outside the slop
//!   less those reservations (ENOSPC: other datasets' reserved space is not free).
//!
//! A quota is *exact*: the charged bytes of the last sync plus every admitted charge since
//! never pass it, so `used` after the txgs sync is at most the quota (the charge of a write
//! is an upper bound of what it adds). It is not early by more than one write's charge plus,
//! once per txg, the object set's own blocks ([`OBJSET_SYNC_CHARGE`]): a write refused is
//! retried once the txgs before it have synced and their estimates became real figures. An
//! intent-log replay is never refused by a limit (its writes were admitted before the crash),
//! nor is the write-back of a kernel cache (write(2) accepted it: it is counted, so that what
//! follows is refused, but a refusal would lose it). A mount's cached writes stop at the
//! quota less the space held back for write-backs (`fuse/write_space.rs`); a write-back
//! charged more than that (4 KiB pages scattered over large records) takes the dataset past
//! its quota by the difference.
//!
//! Check and charge happen under one lock, so two writers cannot both take the last bytes;
//! nothing of this runs while no dataset of the pool sets a limit.
//!
//! # Availability ([`PoolCore::dataset_available`])
//! zfs's `avail`: the pool's available space less the unfilled reservations, then down the
//! tree each level's quota room and the unfilled part of its own reservation, then the
//! dataset's refreservation and refquota. `statfs` on a mount reports the same.
//!
//! # Changing a limit
//! As zfs refuses them: a quota below what the dataset charges or below its reservation, a
//! refquota below its referenced bytes or refreservation, a reservation or refreservation
//! whose growth is more than is available or more than the quota.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::pipeline::BlockIo;
use crate::dataset::limits::{beyond_reservation, LimitSettings};
use crate::dataset::props::{limit_bytes, Property};
use crate::dataset::{Dataset, OwnSpace};
use crate::object::{Admission, ObjectError};
use crate::types::Txg;

use super::names::{common_ancestor, depth, parent_of};
use super::{PoolCore, PoolError};

/// What the sync of a txg writes of a dataset's object set beyond its objects' blocks (the
/// meta-dnode's indirect blocks and the header), charged with the first admitted write of the
/// dataset in each txg.
pub const OBJSET_SYNC_CHARGE: u64 = 128 << 10;

/// The pool's side of the limits.
#[derive(Default)]
pub struct PoolLimits {
    /// Datasets that set a limit: while none does, admission skips the limits.
    active: AtomicUsize,
    /// Held across a check and its charge.
    lock: Mutex<()>,
    /// Reserved bytes no dataset fills yet (the root's charged bytes less what the tree
    /// holds), as of the last directory totals.
    unfilled_reservations: AtomicU64,
    /// A limit changed: the next sync recomputes the directory totals.
    totals_stale: AtomicBool,
}

/// Call `visit` for `dataset` and each dataset above it, up to the pool's root.
pub fn for_each_level(dataset: &Arc<Dataset>, mut visit: impl FnMut(&Arc<Dataset>)) {
    let mut level = dataset.clone();
    loop {
        visit(&level);
        match level.limits.parent() {
            Some(parent) => level = parent,
            None => break,
        }
    }
}

impl PoolLimits {
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed) > 0
    }

    pub(super) fn take_totals_stale(&self) -> bool {
        self.totals_stale.swap(false, Ordering::Relaxed)
    }

    pub(super) fn unfilled_reservations(&self) -> u64 {
        self.unfilled_reservations.load(Ordering::Relaxed)
    }

    /// Admit a growth of `charge` bytes of `dataset` (module documentation); with `txg`,
    /// charge it in flight there, else only look. `NoSpace` when reserved space is what is
    /// missing, `QuotaExceeded` when a quota or refquota is.
    pub(super) fn admit(
        &self,
        io: &BlockIo,
        dataset: &Arc<Dataset>,
        txg: Option<Txg>,
        charge: u64,
        admission: Admission,
    ) -> Result<(), ObjectError> {
        if !self.active() || admission == Admission::Replay || charge == 0 {
            return Ok(());
        }
        // Held-back space is the write-backs': ordinary writes leave it alone. A write-back
        // is never refused by a limit (the kernel's write(2) said yes: refusing would lose
        // the data); it is counted in flight all the same, so what follows it is refused.
        let with_held_back = admission == Admission::Ordinary;
        let enforce = admission == Admission::Ordinary;
        let _guard = txg.map(|_| self.lock.lock());
        let mut charges: Vec<(Arc<Dataset>, u64)> = Vec::new();
        let mut level = dataset.clone();
        let mut asize = charge;
        if let Some(txg) = txg {
            if dataset.limits.in_flight_in(txg) == 0 {
                asize = asize.saturating_add(OBJSET_SYNC_CHARGE);
            }
        }
        let mut first = true;
        loop {
            let settings = level.limits.settings();
            let pending = level.limits.pending(with_held_back);
            let used = level.limits.charged().saturating_add(pending);
            let mut absorbed = 0;
            if first {
                if enforce
                    && settings.refquota != 0
                    && level
                        .referenced_bytes()
                        .saturating_add(pending)
                        .saturating_add(asize)
                        > settings.refquota
                {
                    return Err(ObjectError::QuotaExceeded);
                }
                if settings.refreservation != 0 {
                    let unique = level.unique_bytes().saturating_add(pending);
                    absorbed = asize - beyond_reservation(unique, asize, settings.refreservation);
                }
            }
            if enforce && settings.quota != 0 && used.saturating_add(asize) > settings.quota {
                return Err(ObjectError::QuotaExceeded);
            }
            charges.push((level.clone(), asize));
            let parent = level.limits.parent();
            let reserved = if parent.is_some() {
                settings.reservation
            } else {
                0
            };
            let up = beyond_reservation(used, asize - absorbed, reserved);
            if up == 0 {
                break;
            }
            match parent {
                Some(parent) => {
                    level = parent;
                    asize = up;
                    first = false;
                }
                None => {
                    // The root: what is left of the pool once reservations are kept.
                    let unfilled = self.unfilled_reservations();
                    if enforce && unfilled > 0 {
                        let totals = io.space.counters();
                        let room = totals
                            .free
                            .saturating_sub(totals.slop(io.tunables.spa_min_slop))
                            .saturating_sub(unfilled);
                        if pending.saturating_add(up) > room {
                            return Err(ObjectError::NoSpace);
                        }
                    }
                    break;
                }
            }
        }
        if let Some(txg) = txg {
            for (level, bytes) in charges {
                level.limits.add_in_flight(txg, bytes);
            }
        }
        Ok(())
    }
}

/// One directory's share of the charged space (see [`charged_space`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Charged {
    /// zfs's `used`.
    pub used: u64,
    /// The children's charged bytes (`usedbychildren` less their unfilled reservations).
    pub children: u64,
    /// The children's unfilled reservations.
    pub child_reservation: u64,
    /// The unfilled part of the refreservation (`usedbyrefreservation`).
    pub refreservation: u64,
}

/// What [`charged_space`] needs of one dataset.
#[derive(Clone, Copy, Debug)]
pub struct ChargeInput<'a> {
    pub relative: &'a str,
    pub settings: LimitSettings,
    pub own: OwnSpace,
    /// The head's unique bytes ([`Dataset::unique_bytes`]).
    pub unique: u64,
}

impl<'a> ChargeInput<'a> {
    /// The inputs of `dataset` now, or with `txg` (a sync's directory totals) as the MOS of
    /// that txg holds its settings.
    pub fn of(
        relative: &'a str,
        dataset: &Dataset,
        own: OwnSpace,
        txg: Option<Txg>,
    ) -> ChargeInput<'a> {
        ChargeInput {
            relative,
            settings: txg.map_or_else(
                || dataset.limits.settings(),
                |txg| dataset.limits.settings_in(txg),
            ),
            own,
            unique: dataset.unique_bytes(),
        }
    }
}

/// The charged space of each dataset of `list`; the map is by relative name. The
/// refreservation's unfilled part is measured against the unique bytes, as zfs's: after a
/// snapshot the whole refreservation is unfilled again, so that everything the dataset
/// references can still be overwritten.
pub fn charged_space<'a>(
    list: impl IntoIterator<Item = ChargeInput<'a>>,
) -> BTreeMap<&'a str, Charged> {
    let mut by_depth: Vec<ChargeInput<'a>> = list.into_iter().collect();
    by_depth.sort_by_key(|input| std::cmp::Reverse(depth(input.relative)));
    let mut charged: BTreeMap<&str, Charged> = BTreeMap::new();
    for ChargeInput {
        relative: name,
        settings,
        own,
        unique,
    } in by_depth
    {
        let entry = charged.entry(name).or_default();
        entry.refreservation = settings.refreservation.saturating_sub(unique);
        entry.used = own
            .total()
            .used_bytes
            .saturating_add(entry.refreservation)
            .saturating_add(entry.children)
            .saturating_add(entry.child_reservation);
        let used = entry.used;
        if !name.is_empty() {
            let parent = charged.entry(parent_of(name)).or_default();
            parent.children = parent.children.saturating_add(used);
            parent.child_reservation = parent
                .child_reservation
                .saturating_add(settings.reservation.saturating_sub(used));
        }
    }
    charged
}

impl PoolCore {
    pub(super) fn limits_state(&self) -> &PoolLimits {
        &self.limits
    }

    /// Read a dataset's limits from its properties into memory (import, set, receive); `from`,
    /// in open context, is the txg that writes them (see `SpaceLimits::set_settings_from`).
    pub(super) fn load_limits(
        &self,
        dataset: &Dataset,
        from: Option<Txg>,
    ) -> Result<(), PoolError> {
        let mut settings = LimitSettings::default();
        for (property, field) in [
            (Property::Quota, &mut settings.quota),
            (Property::Refquota, &mut settings.refquota),
            (Property::Reservation, &mut settings.reservation),
            (Property::Refreservation, &mut settings.refreservation),
        ] {
            // The local setting, else the received value an explicit inherit does not mask.
            *field = self
                .level_property(dataset, property)?
                .map_or(0, |(value, _)| limit_bytes(&value));
        }
        dataset.limits.set_settings_from(settings, from);
        // Until the next directory totals: the used bytes the record holds (those of the
        // last synced txg, reservations counted).
        dataset.limits.set_charged(dataset.dir().used_bytes);
        self.load_owner_quotas(dataset)
    }

    /// Point each dataset at its parent and count those with limits (after import, create,
    /// clone, rename, destroy and set).
    pub(super) fn relink_limits(&self) {
        let table = self.datasets.read();
        let mut active = 0;
        for (relative, dataset) in table.iter() {
            let parent = (!relative.is_empty())
                .then(|| table.get(parent_of(relative)))
                .flatten();
            dataset.limits.set_parent(parent);
            active += usize::from(dataset.limits.settings().any());
        }
        self.limits.active.store(active, Ordering::Relaxed);
        self.limits.totals_stale.store(true, Ordering::Relaxed);
    }

    /// After the directory totals of a sync: keep each dataset's charged bytes for admission,
    /// and the reservations nobody fills yet.
    pub(super) fn keep_charged(&self, charged: &BTreeMap<&str, Charged>, held: u64) {
        let table = self.datasets.read();
        for (relative, figures) in charged {
            if let Some(dataset) = table.get(*relative) {
                dataset.limits.set_charged(figures.used);
            }
        }
        let root = charged.get("").map_or(0, |root| root.used);
        self.limits
            .unfilled_reservations
            .store(root.saturating_sub(held), Ordering::Relaxed);
    }

    /// What a dataset can still write (zfs's `avail`, module documentation).
    pub fn dataset_available(&self, dataset: &Arc<Dataset>) -> u64 {
        let mut available = self.dir_available(dataset);
        if !self.limits.active() {
            return available;
        }
        let settings = dataset.limits.settings();
        let unique = dataset.unique_bytes();
        available = available.saturating_add(settings.refreservation.saturating_sub(unique));
        if settings.refquota != 0 {
            available = available.min(settings.refquota.saturating_sub(dataset.referenced_bytes()));
        }
        available
    }

    /// What a dataset's directory can still take: [`PoolCore::dataset_available`] without
    /// the dataset's refreservation and refquota (OpenZFS dsl_dir_space_available).
    pub(super) fn dir_available(&self, dataset: &Arc<Dataset>) -> u64 {
        let pool = self
            .available_bytes()
            .saturating_sub(self.limits.unfilled_reservations());
        if !self.limits.active() {
            return pool;
        }
        let mut chain = Vec::new();
        for_each_level(dataset, |level| chain.push(level.clone()));
        let mut available = pool;
        for (index, level) in chain.iter().rev().enumerate() {
            let settings = level.limits.settings();
            let used = level
                .limits
                .charged()
                .saturating_add(level.limits.pending(true));
            if index > 0 {
                available = available.saturating_add(settings.reservation.saturating_sub(used));
            }
            if settings.quota != 0 {
                available = available.min(settings.quota.saturating_sub(used));
            }
        }
        available
    }

    /// Refuse to move `bytes` of charged space from below `from` to below `to` (relative
    /// names: a rename's old and new parent, a promote's origin and clone) when a quota on
    /// `to`'s side of their common ancestor has no room for them (OpenZFS
    /// dsl_dir_transfer_possible). What `what` names is refused with "out of space".
    pub(super) fn check_transfer(
        &self,
        from: &str,
        to: &str,
        bytes: u64,
        what: &str,
    ) -> Result<(), PoolError> {
        if !self.limits.active() {
            return Ok(());
        }
        let ancestor = common_ancestor(from, to);
        let mut at = to.to_string();
        while at != ancestor {
            let level = self.dataset_by_relative(&at)?;
            let settings = level.limits.settings();
            let used = level
                .limits
                .charged()
                .saturating_add(level.limits.pending(true));
            if settings.quota != 0 && used.saturating_add(bytes) > settings.quota {
                return Err(PoolError::QuotaExceeded(format!(
                    "{what}: {bytes} bytes would not fit in the quota of {}",
                    level.name()
                )));
            }
            at = parent_of(&at).to_string();
        }
        Ok(())
    }

    /// Refuse limits among the `properties` of a dataset about to be made below `parent`
    /// (relative), referencing `referenced` bytes from the start (a clone's origin's), that
    /// zfs create or clone refuses: any limit without the feature, a refquota below what it
    /// references, a reservation or refreservation more than the parent can give or above
    /// the quota or refquota set with it.
    pub(super) fn check_new_limits(
        &self,
        parent: &str,
        referenced: u64,
        properties: &[(Property, String)],
    ) -> Result<(), PoolError> {
        let bytes = |wanted: Property| {
            properties
                .iter()
                .filter(|(property, _)| *property == wanted)
                .map(|(_, value)| limit_bytes(value))
                .next_back()
                .unwrap_or(0)
        };
        let settings = LimitSettings {
            quota: bytes(Property::Quota),
            refquota: bytes(Property::Refquota),
            reservation: bytes(Property::Reservation),
            refreservation: bytes(Property::Refreservation),
        };
        if !settings.any() {
            return Ok(());
        }
        self.require_feature(
            super::SPACE_LIMITS_FEATURE,
            "cannot set quotas or reservations",
            PoolError::BadProperty,
        )?;
        // A clone starts referencing its origin's bytes.
        if settings.refquota != 0 && settings.refquota < referenced {
            return Err(PoolError::BadProperty(
                "size is less than current used or reserved space".into(),
            ));
        }
        let over_its_limit = (settings.quota != 0 && settings.reservation > settings.quota)
            || (settings.refquota != 0 && settings.refreservation > settings.refquota);
        let reserved = settings.reservation.max(settings.refreservation);
        let parent = self.dataset_by_relative(parent)?;
        if over_its_limit || reserved > self.dir_available(&parent) {
            return Err(PoolError::OutOfSpace(
                "size is greater than available space".into(),
            ));
        }
        Ok(())
    }

    /// After a new dataset with `properties` joined the table: its limits in memory, the
    /// feature active if it sets one, the tree linked again.
    pub(super) fn new_dataset_limits(
        &self,
        dataset: &Dataset,
        properties: &[(Property, String)],
        from: Option<Txg>,
    ) -> Result<(), PoolError> {
        if properties
            .iter()
            .any(|(property, value)| property.is_space_limit() && value != "none")
        {
            self.feature_activate(super::SPACE_LIMITS_FEATURE);
        }
        self.load_limits(dataset, from)?;
        self.relink_limits();
        Ok(())
    }

    /// Refuse snapshots of `heads` whose refreservations the space above them cannot absorb
    /// once filled again (a snapshot shares every unique byte: zfs's
    /// dsl_dataset_snapshot_reserve_space, "out of space").
    pub(super) fn check_snapshot_reservations(
        &self,
        heads: &[Arc<Dataset>],
        what: &str,
    ) -> Result<(), PoolError> {
        if !self.limits.active() {
            return Ok(());
        }
        for head in heads {
            let refreservation = head.limits.settings().refreservation;
            let needed = head.unique_bytes().min(refreservation);
            if needed > 0 && needed > self.dir_available(head) {
                return Err(PoolError::OutOfSpace(format!(
                    "{what}: {} needs {needed} bytes more for its refreservation",
                    head.name()
                )));
            }
        }
        Ok(())
    }

    /// Refuse a limit change zfs refuses (module documentation). `new` is in bytes, 0 for none.
    pub(super) fn check_limit_change(
        &self,
        dataset: &Arc<Dataset>,
        property: Property,
        new: u64,
    ) -> Result<(), PoolError> {
        let settings = dataset.limits.settings();
        let used = dataset
            .limits
            .charged()
            .saturating_add(dataset.limits.pending(false));
        let too_small =
            || PoolError::BadProperty("size is less than current used or reserved space".into());
        let too_large = || PoolError::OutOfSpace("size is greater than available space".into());
        let refusal = match property {
            Property::Quota => {
                (new != 0 && (new < used || new < settings.reservation)).then(too_small)
            }
            Property::Refquota => (new != 0
                && (new < dataset.referenced_bytes() || new < settings.refreservation))
                .then(too_small),
            Property::Reservation => {
                let grows = used.max(new).saturating_sub(used.max(settings.reservation));
                let available = match dataset.limits.parent() {
                    Some(parent) => self.dir_available(&parent),
                    None => u64::MAX,
                };
                (grows > available || (settings.quota != 0 && new > settings.quota)).then(too_large)
            }
            Property::Refreservation => {
                let unique = dataset.unique_bytes();
                let grows = unique
                    .max(new)
                    .saturating_sub(unique.max(settings.refreservation));
                (grows > self.dir_available(dataset)
                    || (settings.refquota != 0 && new > settings.refquota))
                    .then(too_large)
            }
            _ => None,
        };
        refusal.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::bpobj::BpSpace;

    fn own(dataset: u64, snapshots: u64) -> OwnSpace {
        OwnSpace {
            dataset: BpSpace {
                used_bytes: dataset,
                ..Default::default()
            },
            snapshots: BpSpace {
                used_bytes: snapshots,
                ..Default::default()
            },
        }
    }

    #[test]
    fn charged_space_counts_reservations_as_used_up_the_tree() {
        let none = LimitSettings::default();
        let reserved = LimitSettings {
            reservation: 1000,
            ..Default::default()
        };
        let refreserved = LimitSettings {
            refreservation: 300,
            ..Default::default()
        };
        let input = |relative, settings, own: OwnSpace| ChargeInput {
            relative,
            settings,
            own,
            unique: own.dataset.used_bytes,
        };
        let charged = charged_space([
            input("", none, own(10, 0)),
            input("a", reserved, own(100, 50)),
            input("a/b", refreserved, own(100, 0)),
            input("c", none, own(5, 0)),
        ]);
        // a/b: 100 live, refreservation fills to 300.
        assert_eq!(charged["a/b"].refreservation, 200);
        assert_eq!(charged["a/b"].used, 300);
        // a: 150 own + 300 child = 450; its reservation of 1000 counts at the root.
        assert_eq!(charged["a"].used, 450);
        assert_eq!(charged["a"].children, 300);
        assert_eq!(charged[""].child_reservation, 550);
        assert_eq!(charged[""].used, 10 + 1000 + 5);
    }
}
