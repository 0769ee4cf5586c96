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
//! `RaidzExpand`: the RAID-Z vdev gains a child (`pool attach POOL raidzN-M NEW`, OpenZFS 2.3's
//! expansion), at most [`EXPANSIONS_MAX`] times per pool. Holding the devices lock (no other
//! device operation or damage meanwhile; [`whole_raidz`] also refuses while a copy resumed by an
//! import runs), the operation attaches a new sparse file as the last column and waits while the
//! copy moves every sector beside the other workers' writes, frees and snapshots; the copy must
//! end with the vdev one wider and not expanding. A kill during the copy leaves it to the next
//! import, which resumes it; the oracle then verifies every file as after any kill.
//!
//! `RaidzWipeReplace`: a RAID-Z child's disk swapped for a blank one while the pool runs, as an
//! administrator's bad day has it. Holding the devices lock, the operation
//! 1. with parity two, sometimes takes another child offline first, so that the rebuild reads
//!    every column it writes through reconstruction with a child missing;
//! 2. takes the chosen child offline, flushes it and wipes its file, labels and all;
//! 3. sleeps while the other workers write; `online` of the blank child must be refused (a
//!    blank disk accepted as a column would be read as data: the first hole this tool's
//!    predecessor missed for mirrors);
//! 4. replaces the child in place (`pool replace POOL CHILD`, the same path) and waits for the
//!    resilver to rebuild every column of it and detach the old leaf;
//! 5. ends with [`heal_devices`], which brings any child back (a blank one killed part-way is
//!    replaced in place there too) and requires a scrub to find every column right.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use tarn::pool::scan::ScanFunction;
use tarn::pool::{Pool, PoolError};

use super::devices::{
    drive_scan, flush_before_wipe, heal_devices, leaves_missing_txgs, whole_raidz, wipe_device,
};
use super::{outcomes, pool_dir, raidz_child_file, refused, Child, OpError, OpResult};

/// The most children the tool adds to a seed's RAID-Z vdev.
const EXPANSIONS_MAX: usize = 2;

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

    /// The operation `RaidzWipeReplace`: see the module documentation.
    pub(super) fn raidz_wipe_replace(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let _devices = self.lock_devices(pool)?;
        let Some((top, children)) = whole_raidz(pool) else {
            return refused("the raidz vdev is not whole");
        };
        let parity = top.kind.parity();
        let mut order: Vec<usize> = (0..children.len()).collect();
        order.shuffle(rng);
        let wiped = &children[order[0]];
        let also_away = (parity >= 2 && rng.gen_bool(0.5)).then(|| &children[order[1]]);
        let away = Duration::from_millis(rng.gen_range(10..300));
        let outcome = (|| -> OpResult {
            if let Some(other) = also_away {
                pool.offline(&other.name)?;
                outcomes::note("raidz wipe and replace with another child offline");
            }
            pool.offline(&wiped.name)?;
            flush_before_wipe(pool, wiped)?;
            wipe_device(&wiped.path)?;
            std::thread::sleep(away);
            if pool.online(&wiped.name).is_ok() {
                return Err(OpError::Inconsistent(format!(
                    "{}: online accepted a wiped RAID-Z child",
                    wiped.path
                )));
            }
            let guid = pool.replace(&wiped.name, None, true)?;
            drive_scan(pool, ScanFunction::Resilver)?;
            pool.wait_replaced(guid)?;
            outcomes::note("raidz child wiped and replaced in place");
            Ok(())
        })();
        heal_devices(pool, &self.plan.dir)?;
        outcome
    }

    /// The operation `RaidzExpand`: see the module documentation.
    pub(super) fn raidz_expand(&self, pool: &Pool, _rng: &mut StdRng) -> OpResult {
        let _devices = self.lock_devices(pool)?;
        let Some((top, children)) = whole_raidz(pool) else {
            return refused("the raidz vdev is not whole, or its expansion runs");
        };
        let expanded = top
            .raidz_widths()
            .map_or(0, |widths| widths.expansions().len());
        if expanded >= EXPANSIONS_MAX {
            return refused("the raidz vdev was expanded enough");
        }
        let vdev = top
            .kind
            .group_name(top.id.0)
            .expect("a raidz vdev has a name");
        // A file of that name may be left by an attach a kill cut short (its labels cleared or
        // not): it is not a member, and the attach is forced over it.
        let path = pool_dir(&self.plan.dir).join(raidz_child_file(children.len()));
        std::fs::File::create(&path)
            .and_then(|file| file.set_len(super::RAIDZ_CHILD_SIZE))
            .map_err(|error| OpError::Inconsistent(format!("{}: {error}", path.display())))?;
        pool.attach(&vdev, &path, true)?;
        outcomes::note("raidz expansions started");
        pool.wait_raidz_expansion()?;
        let Some(top) = super::devices::raidz_top(pool) else {
            return Err(OpError::Inconsistent(
                "the pool has no RAID-Z vdev after its expansion".into(),
            ));
        };
        let status = pool.raidz_expansion();
        if top.raidz_expanding()
            || top.children.len() != children.len() + 1
            || !status.as_ref().is_some_and(|status| status.finished)
        {
            return Err(OpError::Inconsistent(format!(
                "{vdev} of {} children expanded with {}: now {} children, expanding {}, record {status:?}",
                children.len(),
                path.display(),
                top.children.len(),
                top.raidz_expanding()
            )));
        }
        outcomes::note("raidz expansions finished");
        Ok(())
    }
}
