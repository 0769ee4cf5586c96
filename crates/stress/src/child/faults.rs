//! Injected faults: one side of the mirror misbehaves for a while, through the pool's
//! [`Injector`](tarn::vdev::inject::Injector) (what `tarn inject` drives), and nothing may show above the mirror.
//!
//! # Theory
//! A mirror exists so that one bad side costs nothing: reads that fail or come back damaged
//! from one side are served, and repaired, from the other; writes that fail on one side land
//! on the other and are resilvered later; a slow side is only slow. The operation
//! [`Op::InjectFault`](crate::ops::Op::InjectFault) puts that to the test while the other
//! workers go on. Holding the devices lock (so no device operation takes the other side away,
//! and the mirror is whole when it starts: see [`super::devices`]), it injects on ONE side,
//! chosen by the seed, one of [`FaultKind`], on a share of the matching I/Os, for a number of
//! them or until cleared, drives I/O into it itself (a held snapshot read back from the
//! devices and verified, or a sync: see [`Child::exercise`]), sleeps while the other workers
//! run into it, and clears it. Then:
//! - the pool must not be suspended (a write that reached one side reached a copy);
//! - after silent corruption of writes, a scrub must find nothing it cannot repair
//!   ([`run_scrub`]: no unrepaired copy, no error): the bad copies are repaired from the
//!   other side;
//! - [`heal_devices`] brings the side back (online if it was faulted, resilvered for the
//!   writes it missed) and its checking scrub must then find the mirror whole: no bad copy
//!   left anywhere.
//!
//! Meanwhile every read the workers make is verified by its tag, every fsync promise is
//! journaled as always: a wrong block or a lost one is an inconsistency like any other.
//!
//! Silent corruption of writes is the one fault the engine cannot know about: a child that
//! dies before its scrub leaves bad copies on the side that no DTL names, and the next
//! child's heal would blame them on the resilver. So the operation leaves a marker file
//! ([`CORRUPTION_MARKER`]) from the injection until its scrub has repaired them, and a child
//! that finds the marker at its start repairs them first ([`repair_leftover_corruption`]),
//! with the same judgment: nothing unrepaired.
//!
//! Silent corruption of writes is kept off the labels (the first [`VDEV_LABEL_START_SIZE`]
//! and the last [`VDEV_LABEL_END_SIZE`] bytes of the side): a label is not a block a scrub can
//! repair from the other side, and a side whose labels were all damaged is a blank disk,
//! which the device operations test on their own. Errors and delays hit the whole side.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;
use tarn::pool::Pool;
use tarn::vdev::inject::{InjectedFault, InjectedIo, Injection};
use tarn::vdev::label::{VDEV_LABEL_END_SIZE, VDEV_LABEL_START_SIZE};

use tarn::pool::holds::Holder;

use super::devices::{heal_devices, run_scrub, two_sides};
use super::{refused, Child, OpError, OpResult};
use crate::oracle::verify_tree;

/// What one injection does to the side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Reads return the side's bytes damaged (the side itself is fine).
    ReadCorrupt,
    /// Reads fail with EIO.
    ReadError,
    /// Writes (and flushes) fail with EIO.
    WriteError,
    /// Writes store damaged bytes, silently: the side holds bad copies until a scrub.
    WriteCorrupt,
    /// Every I/O waits a few milliseconds first.
    Delay,
}

const KINDS: [FaultKind; 5] = [
    FaultKind::ReadCorrupt,
    FaultKind::ReadError,
    FaultKind::WriteError,
    FaultKind::WriteCorrupt,
    FaultKind::Delay,
];

/// The file (in the run directory) that says silent corruption may lie on a side unrepaired.
pub const CORRUPTION_MARKER: &str = "injected-corruption";

/// How long an injection stays (the workers run into it meanwhile), in milliseconds.
const ACTIVE_MS: std::ops::Range<u64> = 20..400;

/// What the injections of one child did, for the parent's summary.
#[derive(Default)]
pub struct FaultCounts {
    /// Injections made.
    injected: AtomicU64,
    /// I/Os they hit.
    hits: AtomicU64,
    /// Bad copies the scrubs after them found (and repaired), and after the damage of
    /// [`super::damage`].
    pub(super) repaired: AtomicU64,
    /// Copies damaged on one side by [`super::damage`].
    pub(super) damaged: AtomicU64,
}

/// Where a child leaves its fault counts (overwritten; see [`FaultCounts::report`]).
pub fn fault_counts_path(dir: &std::path::Path) -> PathBuf {
    dir.join("child-faults")
}

impl FaultCounts {
    /// Leave the counts for the parent: injections, I/Os hit, copies repaired, copies
    /// damaged.
    pub fn report(&self, dir: &std::path::Path) {
        let text = format!(
            "{} {} {} {}\n",
            self.injected.load(Ordering::SeqCst),
            self.hits.load(Ordering::SeqCst),
            self.repaired.load(Ordering::SeqCst),
            self.damaged.load(Ordering::SeqCst)
        );
        let _ = std::fs::write(fault_counts_path(dir), text);
    }
}

/// The counts a child left (injections, I/Os hit, copies repaired, copies damaged); zeros
/// if none.
pub fn read_fault_counts(dir: &std::path::Path) -> [u64; 4] {
    let text = std::fs::read_to_string(fault_counts_path(dir)).unwrap_or_default();
    let numbers: Vec<u64> = text
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect();
    numbers.try_into().unwrap_or([0; 4])
}

/// At a child's start: if the last child died between injecting silent corruption and its
/// scrub, scrub now (the mirror is whole otherwise: the other side holds every block).
pub(super) fn repair_leftover_corruption(pool: &Pool, dir: &Path) -> Result<(), String> {
    let marker = dir.join(CORRUPTION_MARKER);
    if !marker.exists() {
        return Ok(());
    }
    let scrub =
        run_scrub(pool).map_err(|(OpError::Refused(why) | OpError::Inconsistent(why))| {
            format!("the scrub after a child died with corruption injected: {why}")
        })?;
    if scrub.unrepaired > 0 || scrub.errors > 0 {
        return Err(format!(
            "a child died with corruption injected on one side; the scrub after found {} bad copies, {} unrepaired, {} errors, with the other side whole",
            scrub.copies_bad, scrub.unrepaired, scrub.errors
        ));
    }
    log::info!(
        "a child died with corruption injected: the scrub repaired {} copies",
        scrub.copies_bad
    );
    std::fs::remove_file(&marker).map_err(|error| format!("{}: {error}", marker.display()))
}

impl Child {
    /// Drive I/O into the injection, so that it fires even with one worker: reads of a held
    /// snapshot from the devices (the cache emptied first), verified block by block, for the
    /// read faults; a sync (the other workers' dirty data, the uberblocks) for the others.
    /// A snapshot is read, not a head, because a head's files change under the reader.
    fn exercise(&self, pool: &Pool, kind: FaultKind, rng: &mut StdRng) -> OpResult {
        if !matches!(kind, FaultKind::ReadCorrupt | FaultKind::ReadError) {
            pool.sync()?;
            return Ok(());
        }
        let snapshot = match self.pick_snapshot(pool, rng) {
            Ok(snapshot) => snapshot,
            Err(OpError::Refused(_)) => return Ok(()),
            Err(error) => return Err(error),
        };
        let Ok(hold) = pool.long_hold(&snapshot, Holder::Send) else {
            return Ok(()); // Destroyed meanwhile.
        };
        pool.core.io.cache().clear();
        let fs = pool.snapshot_file_system(&snapshot)?;
        let mut problems = Vec::new();
        verify_tree(&fs, &snapshot, self.plan.round, &mut problems);
        drop(hold);
        if !problems.is_empty() {
            return Err(OpError::Inconsistent(format!(
                "{kind:?} injected on one side: reading {snapshot}: {}",
                problems.join("; ")
            )));
        }
        Ok(())
    }

    /// The operation: see the module documentation.
    pub(super) fn inject_fault(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let _devices = self.lock_devices(pool)?;
        let Some(sides) = two_sides(pool) else {
            return refused("the mirror is not two whole sides");
        };
        let side = &sides[rng.gen_range(0..2)];
        let kind = KINDS[rng.gen_range(0..KINDS.len())];
        let path = PathBuf::from(&side.path);
        let (fault, io) = match kind {
            FaultKind::ReadCorrupt => (InjectedFault::Corrupt, InjectedIo::Read),
            FaultKind::ReadError => (InjectedFault::Io, InjectedIo::Read),
            FaultKind::WriteError => (InjectedFault::Io, InjectedIo::Write),
            FaultKind::WriteCorrupt => (InjectedFault::Corrupt, InjectedIo::Write),
            FaultKind::Delay => (
                InjectedFault::Delay(Duration::from_millis(rng.gen_range(1..=10))),
                InjectedIo::Both,
            ),
        };
        let ranges = match kind {
            FaultKind::WriteCorrupt => {
                let size = (pool.core.io.vdevs.leaves())
                    .find(|leaf| leaf.path == path)
                    .map(|leaf| leaf.device.size_bytes())
                    .ok_or_else(|| OpError::Refused(format!("{}: no such leaf", side.path)))?;
                vec![(
                    path.clone(),
                    VDEV_LABEL_START_SIZE..size - VDEV_LABEL_END_SIZE,
                )]
            }
            _ => Vec::new(),
        };
        let injection = Injection {
            device: Some(path),
            ranges,
            fault,
            io,
            percent: [10, 50, 100][rng.gen_range(0..3)],
            // For a number of I/Os, or (None) until cleared.
            count: rng.gen_bool(0.5).then(|| rng.gen_range(1..200)),
            target: format!("stress: {kind:?} on {}", side.path),
        };
        let active = Duration::from_millis(rng.gen_range(ACTIVE_MS));
        log::info!(
            "injecting {kind:?} on {} ({}%, {:?} I/Os) for {active:?}",
            side.path,
            injection.percent,
            injection.count
        );
        let marker = self.plan.dir.join(CORRUPTION_MARKER);
        if kind == FaultKind::WriteCorrupt {
            std::fs::write(&marker, b"")
                .map_err(|error| OpError::Inconsistent(format!("{}: {error}", marker.display())))?;
        }
        let injector = &pool.core.injector;
        let id = injector.add(injection);
        let deadline = Instant::now() + active;
        let exercised = self.exercise(pool, kind, rng);
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        let hits = (injector.list().iter())
            .find(|status| status.id == id)
            .map_or(0, |status| status.hits);
        injector.clear(Some(id));
        self.faults.injected.fetch_add(1, Ordering::Relaxed);
        self.faults.hits.fetch_add(hits, Ordering::Relaxed);
        exercised?;
        if let Some(why) = pool.core.txgs.failure() {
            return Err(OpError::Inconsistent(format!(
                "{kind:?} injected on one side of the mirror ({hits} I/Os hit) suspended the pool: {why}"
            )));
        }
        // Corruption written to the side is the scrub's to repair, before the heal's own
        // scrub, which must find the mirror whole; the heal runs whatever the scrub found.
        // A scrub visits the blocks born up to the txg it starts in, and a block an fsync
        // wrote ahead of its txg (damaged before the clear) is born in the txg open now:
        // that txg syncs first.
        let repair = (kind == FaultKind::WriteCorrupt).then(|| {
            pool.sync()?;
            run_scrub(pool)
        });
        heal_devices(pool, &self.plan.dir)?;
        let repaired = match repair {
            Some(scrub) => {
                let scrub = scrub?;
                if scrub.unrepaired > 0 || scrub.errors > 0 {
                    return Err(OpError::Inconsistent(format!(
                        "{kind:?} injected on {} ({hits} I/Os hit), cleared: a scrub found {} bad copies, {} unrepaired, {} errors, with the other side whole",
                        side.path, scrub.copies_bad, scrub.unrepaired, scrub.errors
                    )));
                }
                std::fs::remove_file(&marker).map_err(|error| {
                    OpError::Inconsistent(format!("{}: {error}", marker.display()))
                })?;
                scrub.copies_bad
            }
            None => 0,
        };
        self.faults.repaired.fetch_add(repaired, Ordering::Relaxed);
        log::info!(
            "{kind:?} on {}: {hits} I/Os hit, {repaired} copies repaired by the scrub after",
            side.path
        );
        Ok(())
    }
}
