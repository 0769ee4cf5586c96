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
//! - **a resilver running**: one side is taken offline while the others write and brought
//!   back, which starts a resilver; while `online` syncs, a watcher makes the request each time
//!   it sees the resilver in progress (one to three times), each restarting it from the
//!   beginning;
//! - **a scrub running**: one side's writes fail (the pool's injector) while the others write,
//!   so the side misses txgs while it stays usable, and nothing resilvers it; a scrub is
//!   started, and the watcher makes the request while the scrub's round is under way: the
//!   scrub must give way, and the scan after the next txg must be a resilver.
//!
//! A small pool's scan is over within the txg that starts it, so a request made between two
//! syncs would find it finished: the watcher makes it during the sync, when the scan's state
//! (published before each round) says it is in progress.
//!
//! Then [`heal_devices`] waits for the resilver and requires every dirty time log empty and a
//! scrub that finds no bad copy: a restart that lost part of what was missed fails there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use tarn::pool::scan::{ResilverRequest, ScanFunction, ScanState};
use tarn::pool::Pool;
use tarn::vdev::inject::{InjectedFault, InjectedIo, Injection};

use super::devices::{heal_devices, two_sides};
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

/// Run `work` (which syncs) while a watcher makes a resilver request each time a scan of
/// `function` shows in progress, up to `requests` times: a request made while the sync thread
/// is in the middle of the scan's round (its state is published before the round). What
/// the requests answered.
fn during(
    pool: &Pool,
    function: ScanFunction,
    requests: usize,
    work: impl FnOnce() -> Result<(), tarn::pool::PoolError>,
) -> Result<Vec<ResilverRequest>, OpError> {
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let watcher = scope.spawn(|| -> Result<Vec<ResilverRequest>, OpError> {
            let mut made = Vec::new();
            while made.len() < requests && !done.load(Ordering::SeqCst) {
                if scanning(pool) == Some(function) {
                    made.push(request(pool)?);
                    // The restarted scan shows as in progress at once: let it start.
                    std::thread::sleep(Duration::from_millis(2));
                } else {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            Ok(made)
        });
        let worked = work();
        done.store(true, Ordering::SeqCst);
        let made = watcher
            .join()
            .expect("the resilver request's watcher panicked");
        worked?;
        made
    })
}

impl Child {
    /// The operation: see the module documentation.
    pub(super) fn resilver(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let _devices = self.lock_devices(pool)?;
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
                    // `online` runs the resilver in its own syncs: restart it from beside.
                    let restarts = rng.gen_range(1..=3);
                    let made = during(pool, ScanFunction::Resilver, restarts, || {
                        pool.online(&side.name).map(|_| ())
                    })?;
                    if made.is_empty() {
                        request(pool)?;
                    }
                }
                _ => {
                    // The side misses txgs while it stays usable, and nothing resilvers it.
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
                    if let Err(error) = pool.core.request_scrub() {
                        log::debug!("the scrub before the resilver request: {error}");
                    }
                    let mut made =
                        during(pool, ScanFunction::Scrub, 1, || pool.sync().map(|_| ()))?;
                    if made.is_empty() {
                        // The scrub ended first (and may have repaired the side itself).
                        made.push(request(pool)?);
                    }
                    // Unless nothing needed it, the next txg starts the resilver.
                    pool.sync()?;
                    let function = pool.core.scan_status().map(|status| status.phys.function);
                    if made != [ResilverRequest::NotNeeded]
                        && function != Some(ScanFunction::Resilver)
                    {
                        return Err(OpError::Inconsistent(format!(
                            "a side misses txgs and a resilver was requested, but the last \
                             scan is a {function:?} (the request answered {made:?})"
                        )));
                    }
                }
            }
            Ok(())
        })();
        heal_devices(pool, &self.plan.dir)?;
        outcome
    }
}
