//! Power cuts: the other way a child dies.
//!
//! # Theory
//! A SIGKILL of the child loses nothing the child wrote to its vdev files: the host's page
//! cache keeps every write. A power cut loses more: a disk acknowledges a write once it is in
//! its volatile cache, and only a flush makes the writes before it durable. The engine's
//! device model ([`tarn::vdev::fault`]) is that cache: under a [`FaultPlan`] with the
//! power-cut model on, every write still reaches the file at once (reads see it, as a disk
//! serves reads from its cache), and the plan remembers what each write since the device's
//! last flush replaced. At the cut, every device of the plan puts those bytes back and
//! replays its unflushed writes in a random order, each kept whole, dropped or torn at a
//! 512-byte sector; a durable write (the intent log's) is on the media when it returns.
//!
//! In a round the seed gives a power cut, the child opens the pool with every device under
//! ONE plan: the pool's devices lose power together, as in a real power loss (a plan per
//! device, cut one after the other, would let a flush on one reach the media after the
//! other had lost its cache, a state no machine reaches). Devices the pool opens later
//! (attach, replace, online, an import inside the round) come under the same plan, through
//! the import's device wrapper. The cut is seeded from the round's seed, so its choices
//! repeat.
//!
//! The cut itself ([`PowerCut::cut`]) is the planned death: it seals the journal first, so
//! no promise is journaled about an fsync that returned after the power was gone (the
//! stopped devices report success for every write they drop), then stops the plan (the cut),
//! then the child SIGKILLs itself. Between the cut and the SIGKILL the other threads run on
//! against devices that drop every write and read back what the cut left: what they see is
//! no finding, so [`power_is_cut`] makes an inconsistency or a panic in that window end the
//! child by SIGKILL as planned. The parent then treats the round like any crash: it imports
//! what survived, runs `check` and verifies every block and every promise in force (for an
//! fsynced file: at least what the fsync promised, whatever the cut dropped).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tarn::pool::DeviceWrapper;
use tarn::vdev::{BlockDevice, FaultPlan, FaultyDevice};

use crate::journal::JournalWriter;

/// Set once the power is cut: from then on the child's findings are the cut's doing.
static POWER_CUT: AtomicBool = AtomicBool::new(false);

/// Whether this child has cut its power (and is about to SIGKILL itself).
pub fn power_is_cut() -> bool {
    POWER_CUT.load(Ordering::SeqCst)
}

/// The device model of a round that ends in a power cut.
pub struct PowerCut {
    plan: Arc<FaultPlan>,
}

impl PowerCut {
    /// The model with the volatile write cache on from the first I/O (the import's own
    /// writes are unflushed like any other), its choices seeded by `seed`.
    pub fn new(seed: u64) -> PowerCut {
        let plan = FaultPlan::new();
        plan.set_power_cut(seed);
        PowerCut { plan }
    }

    /// The wrapper that puts each device the pool opens under the plan.
    pub fn wrapper(&self) -> DeviceWrapper {
        let plan = self.plan.clone();
        Arc::new(move |_path: &Path, device: Arc<dyn BlockDevice>| {
            Arc::new(FaultyDevice::new(device, plan.clone())) as Arc<dyn BlockDevice>
        })
    }

    /// Cut the power: no more promises, then every device at once. Returns what the cut
    /// did, for the log.
    pub fn cut(&self, journal: &JournalWriter) -> String {
        POWER_CUT.store(true, Ordering::SeqCst);
        journal.seal();
        let unflushed = self.plan.unflushed_writes();
        self.plan.stop_now();
        format!(
            "power cut (seed {:#x}): {unflushed} unflushed writes, {:?}",
            self.plan.power_cut_seed(),
            self.plan.power_cut_outcome()
        )
    }
}
