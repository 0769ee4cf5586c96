//! `Resilver`: the resilver request (`pool resilver`, OpenZFS `zpool resilver`) made in the
//! three states it meets, each ending with the mirror made whole and checked.
//!
//! # Theory
//! A resilver request starts a resilver, starts the one in progress again from the
//! beginning, or does nothing when no usable side misses a txg; a scrub in progress gives
//! way to it (OpenZFS cancels the scan it finds when a resilver restart is due). What can go
//! wrong is the restart: a resilver begun again part-way, with the pool writing beside it,
//! must still cover every txg every side missed, or its end clears a dirty time log that a
//! stale copy still needs. So the operation, holding the devices lock (the only lock scan
//! requests and device operations take, so no other scan request or device operation runs
//! meanwhile: see [`super`]), makes one of:
//! - **nothing to resilver**: the mirror is whole; the request must change nothing, and a
//!   scrub in progress must still be a scrub after the next sync;
//! - **a resilver running**: one side is taken offline while the others write, brought back
//!   (which starts a resilver), and the request is made one to three times at moments the
//!   seed picks, each restarting it (or starting one if it had finished);
//! - **a scrub running**: a scrub is started (and one time in two paused after its first
//!   txg, so that it is still there) and one side's writes fail (the pool's injector) while
//!   the others write, so the side misses txgs while it stays usable, and nothing resilvers
//!   it until the request, which must cancel the scrub (if it still runs) for a resilver.
//!
//! Then [`heal_mirror`] waits for the resilver and requires every dirty time log empty and a
//! scrub that finds no bad copy: a restart that lost part of what was missed fails there.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use tarn::pool::scan::{ResilverRequest, ScanFunction, ScanState};
use tarn::pool::Pool;
use tarn::vdev::inject::{InjectedFault, InjectedIo, Injection};

use super::devices::{heal_mirror, two_sides};
use super::outcomes;
use super::{refused, Child, OpError, OpResult};

/// The scan in progress (function), if any.
fn scanning(pool: &Pool) -> Option<ScanFunction> {
    let phys = pool.core.scan_status()?.phys;
    (phys.state == ScanState::Scanning).then_some(phys.function)
}

fn request(pool: &Pool) -> Result<ResilverRequest, OpError> {
    let outcome = pool
        .core
        .request_resilver()
        .map_err(|error| OpError::Refused(error.to_string()))?;
    log::info!("resilver request: {outcome:?}");
    outcomes::note(match outcome {
        ResilverRequest::NotNeeded => "resilver requests not needed",
        ResilverRequest::Started => "resilver requests starting one",
        ResilverRequest::Restarted => "resilver requests restarting one",
        ResilverRequest::ReplacesScrub => "resilver requests replacing a scrub",
    });
    Ok(outcome)
}

impl Child {
    /// The operation: see the module documentation.
    pub(super) fn resilver(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let _devices = self.devices.lock();
        let Some(sides) = two_sides(pool) else {
            return refused("the mirror is not two whole sides");
        };
        let side = &sides[rng.gen_range(0..2)];
        let away = Duration::from_millis(rng.gen_range(10..300));
        let outcome = (|| -> OpResult {
            match rng.gen_range(0..3) {
                0 => {
                    let missing = (pool.core.io.vdevs.leaves())
                        .any(|leaf| leaf.is_usable() && !leaf.dtl.is_empty());
                    let before = scanning(pool);
                    let outcome = request(pool)?;
                    if missing {
                        return Ok(());
                    }
                    if outcome != ResilverRequest::NotNeeded {
                        return Err(OpError::Inconsistent(format!(
                            "no side misses a txg, and a resilver request answered {outcome:?}"
                        )));
                    }
                    pool.sync()?;
                    if before == Some(ScanFunction::Scrub)
                        && scanning(pool) == Some(ScanFunction::Resilver)
                    {
                        return Err(OpError::Inconsistent(
                            "a resilver request with nothing to resilver replaced the scrub".into(),
                        ));
                    }
                }
                1 => {
                    pool.offline(&side.name)?;
                    std::thread::sleep(away);
                    pool.online(&side.name)?;
                    // The first at once: a small pool's resilver is over in milliseconds.
                    for _ in 0..rng.gen_range(1..=3) {
                        request(pool)?;
                        std::thread::sleep(Duration::from_millis(rng.gen_range(0..30)));
                    }
                }
                _ => {
                    if let Err(error) = pool.core.request_scrub() {
                        log::debug!("the scrub before the resilver request: {error}");
                    }
                    // A small pool's scrub may be over within the txg that starts it: one time
                    // in two it is paused once started (after that txg's round), so that the
                    // request finds it in progress if it is still there.
                    if rng.gen_ratio(1, 2) {
                        pool.sync()?;
                        if let Err(error) = pool.core.request_scan_pause() {
                            log::debug!("pausing the scrub before the resilver request: {error}");
                        }
                    }
                    let injector = &pool.core.injector;
                    let id = injector.add(Injection {
                        device: Some(side.path.clone().into()),
                        ranges: Vec::new(),
                        fault: InjectedFault::Io,
                        io: InjectedIo::Write,
                        percent: 100,
                        count: None,
                        target: format!("stress: resilver request, writes fail on {}", side.path),
                    });
                    std::thread::sleep(away);
                    let synced = pool.sync();
                    injector.clear(Some(id));
                    synced?;
                    if let Some(why) = pool.core.txgs.failure() {
                        return Err(OpError::Inconsistent(format!(
                            "writes failing on one side suspended the pool: {why}"
                        )));
                    }
                    // Errors reset, so that the side takes I/O again as a healthy one.
                    pool.core.clear_errors(Some(&side.path))?;
                    let before = scanning(pool);
                    let outcome = request(pool)?;
                    pool.sync()?;
                    if outcome == ResilverRequest::ReplacesScrub
                        && scanning(pool) == Some(ScanFunction::Scrub)
                    {
                        return Err(OpError::Inconsistent(format!(
                            "a resilver request replaced the scrub ({before:?}), and a scrub \
                             still runs"
                        )));
                    }
                }
            }
            Ok(())
        })();
        heal_mirror(pool, &self.plan.dir)?;
        outcome
    }
}
