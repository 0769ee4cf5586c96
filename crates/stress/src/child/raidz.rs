//! `RaidzOfflineOnline`: RAID-Z children taken offline while the other workers write, and
//! brought back.
//!
//! # Theory
//! A RAID-Z vdev of parity `p` reads and writes with up to `p` children gone: a write misses
//! the columns of the children away (each logs the txg in its dirty time log), a read
//! rebuilds their columns from parity, and a child brought back online is resilvered for
//! exactly the txgs it missed. The operation, holding the devices lock (so the vdevs are whole
//! when it starts and no other device operation, fault injection, damage or scan request runs
//! meanwhile: [`super::devices`]),
//! 1. takes one to `p` children, chosen by the seed, offline; with `p` of them gone, taking one
//!    more must be refused (the engine's "no valid replicas"), and is tried;
//! 2. sleeps while the other workers write, read (through reconstruction) and free;
//! 3. brings them online one by one, a short pause between two, so that with two away the
//!    first one's resilver starts while the second is still offline and reads the columns
//!    it rebuilds from parity with a child missing;
//! 4. waits for the resilver, which must leave no leaf's dirty time log holding a txg (no scan
//!    cancel or other device operation can cut it short: they need the devices lock);
//! 5. ends, whatever happened, with [`heal_devices`]: every child online, the resilver seen
//!    through until no leaf's dirty time log holds a txg, and a scrub (which checks parity)
//!    that finds no bad copy. A child killed part-way leaves children offline (the offline
//!    state persists), and the next child's heal brings them back the same way.
//!
//! A wipe of a RAID-Z child (as `MirrorWipeOnline` and `MirrorWipeReappear` do to a mirror
//! side) is not done: `online` refuses a blank child (invalid label), and `replace`, its only
//! way back, is not offered for RAID-Z children yet.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use tarn::pool::scan::ScanFunction;
use tarn::pool::{Pool, PoolError};

use super::devices::{drive_scan, heal_devices, leaves_missing_txgs, whole_raidz};
use super::{outcomes, refused, Child, OpError, OpResult};

/// The longest pause between two children brought back online, in milliseconds.
const ONLINE_GAP_MS: u64 = 100;

impl Child {
    /// The operation: see the module documentation.
    pub(super) fn raidz_offline_online(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let _devices = self.lock_devices(pool)?;
        let Some((top, children)) = whole_raidz(pool) else {
            return refused("the raidz vdev is not whole");
        };
        let parity = top.kind.parity();
        let count = rng.gen_range(1..=parity);
        let mut order: Vec<usize> = (0..children.len()).collect();
        order.shuffle(rng);
        let (away_children, staying) = order.split_at(count);
        // The other workers write while the children are away: what the resilver must copy.
        let away = Duration::from_millis(rng.gen_range(10..300));
        let outcome = (|| -> OpResult {
            for &child in away_children {
                pool.offline(&children[child].name)?;
            }
            outcomes::note(match count {
                1 => "raidz children offline: one",
                _ => "raidz children offline: two",
            });
            if count == parity {
                let extra = &children[staying[0]];
                match pool.offline(&extra.name) {
                    Ok(_) => {
                        return Err(OpError::Inconsistent(format!(
                        "{} taken offline with {parity} other children of a raidz{parity} offline",
                        extra.path
                    )))
                    }
                    Err(PoolError::BadVdevSpec(why)) => {
                        log::debug!("one child beyond the parity: {why}");
                        outcomes::note("raidz offline beyond the parity refused");
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            std::thread::sleep(away);
            for (index, &child) in away_children.iter().enumerate() {
                if index > 0 {
                    std::thread::sleep(Duration::from_millis(rng.gen_range(0..=ONLINE_GAP_MS)));
                }
                pool.online(&children[child].name)?;
            }
            // Nothing else takes a leaf away or cancels a scan meanwhile (the devices lock):
            // the resilver that `online` started must leave no child missing a txg.
            drive_scan(pool, ScanFunction::Resilver)?;
            let missing = leaves_missing_txgs(pool);
            if !missing.is_empty() {
                return Err(OpError::Inconsistent(format!(
                    "{count} raidz{parity} children were offline and came back; after the resilver, {missing:?} still miss txgs"
                )));
            }
            Ok(())
        })();
        heal_devices(pool, &self.plan.dir)?;
        outcome
    }
}
