//! The operation table: every operation the stress tool knows, with its fixed weight.
//!
//! # Theory
//! ztest finds bugs where two features meet: a scan racing a snapshot destroy, a send racing a
//! destroy, an export while the log space map is being flushed. It does so by running every
//! feature at once, at random, from several threads, with a weight per operation that says
//! how often it is chosen. This table is that list for tarn. It names every operation the
//! stress tool is meant to drive, whether or not the runner implements it yet, so that the mix
//! is decided once, in one place, and not tuned afterwards towards a bug one already knows
//! about: a weight is changed only for a reason that holds for every seed (an operation so
//! slow that it starves the others, say), and such a change says why beside the weight.
//!
//! # How the table is used
//! A worker thread draws an operation with probability `weight / total`, where the total is
//! the sum of the weights of the operations the runner implements ([`OpSpec::implemented`]).
//! Operations not implemented keep their weight here so that implementing one later changes
//! only its flag, and the relative mix of the others stays what it was.
//!
//! Weights are relative. File operations dominate, as they do in ztest (its `ztest_dmu_*`
//! and `ztest_zil_*` entries run every pass), because they create the data that the
//! pool-level operations (snapshots, scrubs, exports) then have to preserve; the pool-level
//! operations are rarer but not rare: a run of a few seconds sees each of them several times.
//!
//! # Kinds of operation
//! - file data: writes of new blocks, overwrites, truncates (down and up), hole punches,
//!   unlinks, renames (moving and replacing), extended attributes, and fsyncs (each an
//!   intent-log commit);
//! - datasets: snapshots, clones, promotes, rollbacks, destroys (snapshots, file systems,
//!   clones), user holds, new file systems, renames of file systems, property changes;
//! - replication: full, incremental and resumed sends into a second pool (half of them with
//!   the source's properties, received as received values), and damaged
//!   streams that its receives must refuse, each running
//!   beside every other operation, with no lock of the tool's between the send and a destroy,
//!   rollback, promote, rename or write of what it reads;
//! - the pool: scrubs and resilvers started, paused and stopped; devices taken offline,
//!   detached, attached and replaced; a mirror side wiped and brought back; RAID-Z children
//!   taken offline and brought back, and the vdev expanded by a child; faults injected on one side of the mirror; copies of old
//!   blocks damaged on one side or on RAID-Z children, and the scrubs that must repair them; export and import; rewind imports; phases that run the pool near
//!   full.
//!
//! Crashes (SIGKILL of the child at a moment chosen by the seed, in some rounds after a power
//! cut of the pool's devices) are not operations: the runner schedules them, outside this
//! table.

use rand::Rng;

/// One operation the stress tool can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Write tagged blocks where the file has none yet (extending it or filling a hole).
    Write,
    /// Write tagged blocks over blocks the file already has.
    Overwrite,
    /// Set the file's size to a smaller whole number of blocks.
    TruncateDown,
    /// Set the file's size to a larger whole number of blocks (a hole at the end).
    TruncateUp,
    /// `fallocate(PUNCH_HOLE | KEEP_SIZE)` over whole blocks.
    PunchHole,
    /// Remove a file.
    Unlink,
    /// Rename a file to a free name in its directory.
    RenameMove,
    /// Rename a file over another one, which is replaced.
    RenameReplace,
    /// Set a tagged extended attribute.
    SetXattr,
    /// Remove an extended attribute.
    RemoveXattr,
    /// fsync a file: the intent-log commit; what it returns for is promised to survive.
    Fsync,
    /// Read a file back and verify every block against its tag (the oracle while running).
    ReadVerify,
    /// Take a snapshot of a file system.
    Snapshot,
    /// Clone a snapshot as a new file system.
    Clone,
    /// Promote a clone.
    Promote,
    /// Roll a file system back to one of its snapshots.
    Rollback,
    /// Destroy a snapshot.
    DestroySnapshot,
    /// Destroy a file system (a clone or a plain one) with its snapshots.
    DestroyFileSystem,
    /// Create a new file system.
    CreateFileSystem,
    /// Rename a file system.
    RenameFileSystem,
    /// Hold a snapshot (the long hold a send takes), try to destroy it while held, read it
    /// back, and release it.
    Hold,
    /// Put a user hold (`tarn hold`) on a snapshot, sometimes with `-r`; a destroy of it must
    /// then be refused.
    UserHold,
    /// Release a user hold (`tarn release`); a snapshot marked for deferred destroy goes with
    /// its last one.
    UserRelease,
    /// `destroy -d` of a snapshot: destroyed if nothing holds or clones it, else marked.
    DeferDestroy,
    /// Set or clear a user property (`module:name=value`) on a file system and read it back.
    SetUserProperty,
    /// `tarn diff` of two snapshots (twice: the same answer) or of a snapshot and its file
    /// system.
    Diff,
    /// Send a snapshot into the second pool and receive it there, whole.
    SendFull,
    /// Send the changes between two snapshots into the second pool.
    SendIncremental,
    /// Receive cut short, then resumed from its token.
    SendResumed,
    /// Receive a damaged stream (bytes flipped, cut short, a record's length or object
    /// number changed, records swapped, repeated or left out): it must be refused cleanly,
    /// the second pool left as it was.
    HostileReceive,
    /// Change `compression` on a file system.
    SetCompression,
    /// Change `checksum` on a file system.
    SetChecksum,
    /// Change `recordsize` on a file system.
    SetRecordsize,
    /// Change `copies` on a file system.
    SetCopies,
    /// Set or clear a quota, refquota, reservation or refreservation on a file system (a
    /// little above what it holds, so that its writes meet the limit).
    SetSpaceLimit,
    /// Set or clear a user quota or a group object quota on a file system (a little above
    /// what the owner holds, so that its writes meet it).
    SetOwnerQuota,
    /// Give a file another owner (user and group), as chown does: usage by owner follows.
    Chown,
    /// Put a file in another project (`chattr -p`; no directory gets the inherit flag, so
    /// renames never meet EXDEV).
    SetProject,
    /// Start a scrub.
    ScrubStart,
    /// Pause the running scan.
    ScrubPause,
    /// Stop (cancel) the running scan.
    ScrubStop,
    /// Request a resilver (`pool resilver`): with nothing to resilver, while a resilver runs
    /// (it restarts), and while a scrub runs (it gives way); the mirror is then made whole.
    Resilver,
    /// Take a mirror side offline, then bring it online.
    DeviceOfflineOnline,
    /// Take one to `parity` RAID-Z children offline, then bring them online (a resilver
    /// follows); with `parity` of them away, one more must be refused.
    RaidzOfflineOnline,
    /// Wipe a RAID-Z child (sometimes with another offline, at parity two), check that
    /// `online` refuses it, and replace it in place: the resilver rebuilds every column.
    RaidzWipeReplace,
    /// Add a child to the RAID-Z vdev (`pool attach POOL raidzN-M NEW`, at most twice per
    /// pool) and wait while the copy moves every sector to the wider stripe beside the other
    /// workers; a kill lands in the copy now and then, and the import resumes it.
    RaidzExpand,
    /// Detach a mirror side, then attach it again (a resilver follows).
    DeviceDetachAttach,
    /// Replace a device with a new one.
    DeviceReplace,
    /// Wipe one mirror side, labels and all, then bring it back with `online`.
    MirrorWipeOnline,
    /// Wipe one mirror side, then let it reappear at the next import.
    MirrorWipeReappear,
    /// Inject faults on one side of the mirror for a while (silent corruption of reads or of
    /// writes, read or write errors, delays), clear them, and require that nothing showed:
    /// no wrong or lost data, no suspended pool, a scrub that repairs every bad copy.
    InjectFault,
    /// Damage the copies of some blocks of every snapshot on one side of the mirror behind
    /// the engine's back (a disk returning bad data), then require a scrub to repair them all
    /// and a second scrub to find nothing left: a scrub's coverage, judged.
    DamageMirrorSide,
    /// Damage the columns (data and parity) of some blocks of every snapshot on one to
    /// `parity` RAID-Z children (and sometimes a mirror side's copies too), then require a
    /// scrub to repair them all and a second scrub to find nothing left.
    DamageRaidzChildren,
    /// Export the pool and import it again, every thread paused around it.
    ExportImport,
    /// Export, then import rewound explicitly to the txg one or two before the last.
    RewindImport,
    /// Fill the pool near full for a while (ENOSPC and write admission), then free the space.
    NearFull,
}

/// One row of the operation table.
#[derive(Clone, Copy, Debug)]
pub struct OpSpec {
    pub op: Op,
    /// Relative frequency; see the module documentation.
    pub weight: u32,
    /// Whether the runner implements the operation in this version.
    pub implemented: bool,
}

const fn row(op: Op, weight: u32, implemented: bool) -> OpSpec {
    OpSpec {
        op,
        weight,
        implemented,
    }
}

/// The operation table. Fixed before any tuning: see the module documentation.
pub const OPERATIONS: &[OpSpec] = &[
    // File data: most of the work, as in ztest.
    row(Op::Write, 120, true),
    row(Op::Overwrite, 100, true),
    row(Op::TruncateDown, 20, true),
    row(Op::TruncateUp, 10, true),
    row(Op::PunchHole, 25, true),
    row(Op::Unlink, 12, true),
    row(Op::RenameMove, 10, true),
    row(Op::RenameReplace, 8, true),
    row(Op::SetXattr, 15, true),
    row(Op::RemoveXattr, 5, true),
    row(Op::Fsync, 40, true),
    row(Op::ReadVerify, 40, true),
    // Datasets.
    row(Op::Snapshot, 8, true),
    row(Op::Clone, 3, true),
    row(Op::Promote, 2, true),
    row(Op::Rollback, 3, true),
    row(Op::DestroySnapshot, 6, true),
    row(Op::DestroyFileSystem, 2, true),
    row(Op::CreateFileSystem, 2, true),
    row(Op::RenameFileSystem, 2, true),
    row(Op::Hold, 3, true),
    // Added after the table was fixed, with the weight of a clone (their kin: a claim that
    // keeps a snapshot from its destroy), the release as often as the hold so that holds do
    // not pile up, and the deferred destroy at half; no other row was changed for them.
    row(Op::UserHold, 2, true),
    row(Op::UserRelease, 2, true),
    row(Op::DeferDestroy, 1, true),
    // Added after the table was fixed, with the weight of a full send (a read of two
    // snapshots' changed objects); no other row was changed for it.
    row(Op::Diff, 2, true),
    // Replication into the second pool.
    row(Op::SendFull, 2, true),
    row(Op::SendIncremental, 3, true),
    row(Op::SendResumed, 2, true),
    // Added after the table was fixed, at a modest weight (half the rarest
    // send's); the other rows keep theirs. It tests the receiver's refusals beside the other
    // operations, not a race of its own that would need it often.
    row(Op::HostileReceive, 1, true),
    // Properties.
    row(Op::SetCompression, 3, true),
    row(Op::SetChecksum, 3, true),
    row(Op::SetRecordsize, 3, true),
    row(Op::SetCopies, 2, true),
    // Added after the table was fixed, with the weight of `copies`: the limits' admission
    // meets every other operation; no other row was changed for it.
    row(Op::SetSpaceLimit, 2, true),
    // Added after the table was fixed, with the weight of the limits: user and group quotas
    // and usage by owner, which `check` recounts after every round, meet every other
    // operation; no other row was changed for them.
    row(Op::SetOwnerQuota, 2, true),
    // Added after the table was fixed, with the weight of the properties it sits beside
    // (`copies`); no other row was changed for it.
    row(Op::SetUserProperty, 2, true),
    row(Op::Chown, 2, true),
    row(Op::SetProject, 1, true),
    // Scans.
    row(Op::ScrubStart, 3, true),
    row(Op::ScrubPause, 1, true),
    row(Op::ScrubStop, 1, true),
    row(Op::Resilver, 1, true),
    // Devices.
    row(Op::DeviceOfflineOnline, 2, true),
    row(Op::DeviceDetachAttach, 1, true),
    row(Op::DeviceReplace, 1, true),
    row(Op::MirrorWipeOnline, 1, true),
    row(Op::MirrorWipeReappear, 1, true),
    // Added with the RAID-Z vdev, after the table was fixed, with the weight of its mirror
    // sibling (`DeviceOfflineOnline`); no other row was changed for it.
    row(Op::RaidzOfflineOnline, 2, true),
    row(Op::RaidzWipeReplace, 1, true),
    // Added with RAID-Z expansion, with the weight of the rarest device operations; no other
    // row was changed for it.
    row(Op::RaidzExpand, 1, true),
    // As often as the commonest device operation: like each of them it takes one side away
    // (here by making it misbehave) and ends with a heal and a scrub, and it has five kinds
    // of fault to cover where a device operation has one path.
    row(Op::InjectFault, 2, true),
    // Added after the table was first committed, with the weight of the fault
    // injection it complements: that one damages blocks written while it lasts, this one the
    // old blocks of snapshots, which only a scrub visits. No other row was changed for it.
    row(Op::DamageMirrorSide, 2, true),
    // Added with the RAID-Z vdev, with the weight of its mirror sibling; no other row was
    // changed for it.
    row(Op::DamageRaidzChildren, 2, true),
    // The pool as a whole.
    row(Op::ExportImport, 1, true),
    row(Op::RewindImport, 1, true),
    row(Op::NearFull, 1, true),
];

/// Draws operations from the implemented rows of [`OPERATIONS`] by weight.
pub struct OpChooser {
    /// The implemented rows with their cumulative weights.
    cumulative: Vec<(u32, Op)>,
    total: u32,
}

impl Op {
    /// The operation named as in the table (`MirrorWipeOnline`), ignoring case.
    pub fn from_name(name: &str) -> Option<Op> {
        OPERATIONS
            .iter()
            .map(|spec| spec.op)
            .find(|op| format!("{op:?}").eq_ignore_ascii_case(name))
    }
}

/// Parse a comma-separated list of operation names (`--exclude`).
pub fn parse_op_list(list: &str) -> Result<Vec<Op>, String> {
    list.split(',')
        .filter(|name| !name.is_empty())
        .map(|name| {
            Op::from_name(name.trim()).ok_or_else(|| {
                format!("unknown operation {name:?} (the names are those of the table in ops.rs)")
            })
        })
        .collect()
}

impl OpChooser {
    pub fn new() -> OpChooser {
        OpChooser::excluding(&[])
    }

    /// The chooser without the operations `excluded`: a diagnostic, to narrow a failure down
    /// to the operations it needs. The others keep their weights.
    pub fn excluding(excluded: &[Op]) -> OpChooser {
        let mut cumulative = Vec::new();
        let mut total = 0;
        for spec in
            (OPERATIONS.iter()).filter(|spec| spec.implemented && !excluded.contains(&spec.op))
        {
            total += spec.weight;
            cumulative.push((total, spec.op));
        }
        assert!(total > 0, "every implemented operation is excluded");
        OpChooser { cumulative, total }
    }

    /// One operation, with probability proportional to its weight.
    pub fn choose(&self, rng: &mut impl Rng) -> Op {
        let point = rng.gen_range(0..self.total);
        let index = self.cumulative.partition_point(|&(end, _)| end <= point);
        self.cumulative[index].1
    }
}

impl Default for OpChooser {
    fn default() -> Self {
        OpChooser::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn every_operation_is_listed_once() {
        let mut seen = std::collections::HashSet::new();
        for spec in OPERATIONS {
            assert!(seen.insert(spec.op), "{:?} is listed twice", spec.op);
            assert!(spec.weight > 0, "{:?} has no weight", spec.op);
        }
        assert_eq!(seen.len(), 56);
    }

    #[test]
    fn the_chooser_draws_only_implemented_operations_by_weight() {
        let chooser = OpChooser::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..100_000 {
            *counts.entry(chooser.choose(&mut rng)).or_insert(0u32) += 1;
        }
        for spec in OPERATIONS {
            let count = counts.get(&spec.op).copied().unwrap_or(0);
            if spec.implemented {
                let expected = 100_000.0 * f64::from(spec.weight) / f64::from(chooser.total);
                assert!(
                    (f64::from(count) - expected).abs() < expected * 0.3 + 30.0,
                    "{:?}: drawn {count} times, expected about {expected:.0}",
                    spec.op
                );
            } else {
                assert_eq!(count, 0, "{:?} is not implemented but was drawn", spec.op);
            }
        }
    }
}
