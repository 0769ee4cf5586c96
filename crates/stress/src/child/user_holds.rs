//! User holds and deferred destroy beside every other operation: `UserHold`, `UserRelease`
//! and `DeferDestroy`; user properties, the other state replication tools keep on datasets:
//! `SetUserProperty`; and `Diff`, which replication and backup tools run between the snapshots
//! they keep.
//!
//! # Theory
//! A user hold is a durable claim on a snapshot: while it lasts no destroy may free the
//! snapshot (its own, its file system's with `-r`, a rollback past it), and it must survive
//! every crash, power cut, rewind and export the other workers cause. A snapshot marked for
//! deferred destroy must go in the txg that releases its last hold or destroys its last clone,
//! and not before. What is judged here, at once:
//! - a hold taken is listed, and a destroy of the snapshot right after is refused;
//! - a release that says it destroyed a snapshot left none of that name, and a send reading
//!   it is told, as after any destroy (a deferred destroy must also wait for a send's long
//!   hold, which the send judges when it returns);
//! - `destroy -d` either destroys (nothing held it) or leaves the snapshot marked.
//!
//! The rest is judged by `check` after every round: the feature's count of held and deferred
//! snapshots against the records, and no block freed that a held snapshot references.
//! Tags come from a small set, so that a hold meets the tag it already has (refused) and a
//! snapshot gathers several.

use rand::rngs::StdRng;
use rand::Rng;
use tarn::pool::Pool;

use super::outcomes::note;
use super::{refused, Child, OpError, OpResult};

/// The tags the tool puts on snapshots.
const TAGS: [&str; 3] = ["stress-replica", "stress-backup", "stress-keep"];

impl Child {
    /// `UserHold`: a tag on a snapshot (sometimes with `-r`); a destroy of it is then refused.
    pub(super) fn user_hold(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let snapshot = self.pick_snapshot(pool, rng)?;
        let tag = TAGS[rng.gen_range(0..TAGS.len())];
        pool.hold(tag, std::slice::from_ref(&snapshot), rng.gen_bool(0.3))?;
        if let Ok(names) = pool.destroy_snapshots(&snapshot, false) {
            return Err(OpError::Inconsistent(format!(
                "{snapshot} was destroyed while it had user hold {tag}: {names:?}"
            )));
        }
        let holds = pool.holds(std::slice::from_ref(&snapshot), false)?;
        if !holds.iter().any(|hold| hold.tag == tag) {
            return Err(OpError::Inconsistent(format!(
                "{snapshot} was held as {tag}, but lists {holds:?}"
            )));
        }
        note("user holds taken");
        Ok(())
    }

    /// `UserRelease`: a tag off a held snapshot; one marked for deferred destroy may go with it.
    pub(super) fn user_release(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let mut held = Vec::new();
        for slot in self.slots.lock().clone() {
            held.extend(
                pool.core
                    .snapshots_of(&slot.name)?
                    .into_iter()
                    .filter(|info| info.user_refs > 0)
                    .map(|info| info.name),
            );
        }
        if held.is_empty() {
            return refused("no held snapshot");
        }
        let snapshot = held.swap_remove(rng.gen_range(0..held.len()));
        let holds = pool.holds(std::slice::from_ref(&snapshot), false)?;
        if holds.is_empty() {
            return refused("its holds were released meanwhile");
        }
        let tag = holds[rng.gen_range(0..holds.len())].tag.clone();
        let sending = self.replica.sends_reading(&snapshot);
        let outcome = pool.release(&tag, std::slice::from_ref(&snapshot), false)?;
        note("user holds released");
        if !outcome.destroyed.contains(&snapshot) {
            return Ok(());
        }
        note("deferred destroys done by a release");
        if pool.snapshot_info(&snapshot).is_ok() {
            return Err(OpError::Inconsistent(format!(
                "the release of {tag} destroyed {snapshot}, which still exists"
            )));
        }
        sending.check(&snapshot)
    }

    /// `DeferDestroy`: `destroy -d` of a snapshot: destroyed, or marked.
    pub(super) fn defer_destroy(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let snapshot = self.pick_snapshot(pool, rng)?;
        let sending = self.replica.sends_reading(&snapshot);
        let outcome = pool.destroy_snapshots_deferred(&snapshot, false, false)?;
        if outcome.destroyed.contains(&snapshot) {
            note("destroy -d destroyed at once");
            return sending.check(&snapshot);
        }
        let info = pool.snapshot_info(&snapshot)?;
        if !info.defer_destroy {
            return Err(OpError::Inconsistent(format!(
                "destroy -d of {snapshot} neither destroyed it nor marked it"
            )));
        }
        note("destroy -d deferred");
        Ok(())
    }

    /// `SetUserProperty`: set (or now and then clear) a user property of worker `index`'s own
    /// on a file system, and read it back: set locally, the value set; cleared, none in effect
    /// (no ancestor has this worker's property set: the tool sets them on its file systems
    /// only, never on the pool's root).
    pub(super) fn set_user_property(&self, index: usize, rng: &mut StdRng) -> OpResult {
        let pool_guard = self.pool.read();
        let Some(pool) = pool_guard.as_ref() else {
            return Err(super::pool_missing());
        };
        let slot = self.pick_slot(rng)?;
        let name = format!("org.tarn-stress:worker-{index}");
        let value = rng
            .gen_bool(0.8)
            .then(|| format!("value {}", rng.gen::<u32>()));
        pool.set_property(&slot.name, &name, value.as_deref())?;
        let read = pool.user_property(&slot.name, &name)?;
        let expected = value
            .as_ref()
            .map(|value| (value.clone(), tarn::PropertySource::Local));
        // A file system renamed below another may inherit the property from there once it is
        // cleared here: only a set is judged exactly.
        if value.is_some() && read != expected {
            return Err(OpError::Inconsistent(format!(
                "{name} set on {} to {value:?} reads back as {read:?}",
                slot.name
            )));
        }
        note(if value.is_some() {
            "user properties set"
        } else {
            "user properties cleared"
        });
        Ok(())
    }

    /// `Diff`: `tarn diff` of a snapshot and a later one of its file system (the same answer
    /// twice: both are frozen) or, now and then, the file system itself (through a temporary
    /// snapshot).
    pub(super) fn diff(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let slot = self.pick_slot(rng)?;
        let snapshots = pool.core.snapshots_of(&slot.name)?;
        if snapshots.is_empty() {
            return refused("no snapshot");
        }
        let first = rng.gen_range(0..snapshots.len());
        let from = snapshots[first].name.clone();
        let judge = super::replication::judge_error;
        if rng.gen_bool(0.3) || first + 1 == snapshots.len() {
            // (Its temporary snapshot's removal is judged by the engine's tests: here another
            // worker may clone or hold it meanwhile, or take its own.)
            tarn::send::diff::diff(pool, &from, &slot.name).map_err(judge)?;
            note("diffs against a file system");
            return Ok(());
        }
        let to = snapshots[rng.gen_range(first + 1..snapshots.len())]
            .name
            .clone();
        let once = tarn::send::diff::diff(pool, &from, &to).map_err(judge)?;
        let again = tarn::send::diff::diff(pool, &from, &to).map_err(judge)?;
        if once.records != again.records {
            return Err(OpError::Inconsistent(format!(
                "diff of {from} and {to} changed between two runs: {} then {} records",
                once.records.len(),
                again.records.len()
            )));
        }
        note("diffs between snapshots");
        Ok(())
    }
}
