//! User holds and deferred destroy beside every other operation: `UserHold`, `UserRelease`
//! and `DeferDestroy`.
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
        if !outcome.destroyed.contains(&snapshot) {
            return Ok(());
        }
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
            return sending.check(&snapshot);
        }
        let info = pool.snapshot_info(&snapshot)?;
        if !info.defer_destroy {
            return Err(OpError::Inconsistent(format!(
                "destroy -d of {snapshot} neither destroyed it nor marked it"
            )));
        }
        Ok(())
    }
}
