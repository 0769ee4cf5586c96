//! Replication into the second pool (full, incremental and resumed sends and receives), and
//! renames of file systems: the operations that move a file system's contents or its name.
//!
//! # Theory
//! The second pool (`replica`, one sparse file in `replica/` of the run directory, created by
//! the runner) holds copies of the first pool's snapshots: file systems `replica/rN` made by
//! full receives and extended by incremental ones. Nothing but receives writes to them, so
//! whatever they hold came through a stream, and the oracle can say exactly what that must
//! be: before a send starts, the child reads the source snapshot back (verifying every tag,
//! under a short hold) and journals its digest under the snapshot's guid, which every copy
//! keeps ([`crate::oracle::tree_digest`]); after a receive the child reads the copy back
//! and compares, and after a crash the parent does the same for every snapshot of the second
//! pool, whatever became of its source since.
//!
//! The send itself runs without the tool's hold, on a thread of its own, into a bounded pipe
//! that the receive reads from as it goes, while the other workers write, snapshot,
//! destroy, roll back, promote and rename in the first pool: the races a send must survive
//! (a send reading blocks a destroy freed) are those, and only the engine's own
//! holds stand between them. A send reading blocks freed under it shows only if they are
//! reused before it reads them, which a roomy pool makes rare; so the tool also checks the
//! hold itself: a send takes its holds before its first write and drops them after its last,
//! so a destroy of a snapshot it reads that started after one of its writes and returned
//! before another ran wholly under its hold, and must have been refused
//! ([`Replica::sends_reading`]). Now and then the receive pauses (a slow connection), so that
//! sends wait part-way with their snapshots open.
//!
//! A receive is cut by ending its input at a byte the seed chooses (the send then fails
//! writing, as over a cut connection); a resumable receive keeps what it applied, and is
//! resumed with its token at once, later by another `SendResumed`, or after the next crash
//! and import, unless the source is gone, when it is abandoned (`receive -A`). A receive that
//! was not resumable and is cut by a crash is destroyed at the next import, as the engine
//! defines it.
//!
//! Half the streams carry the source's properties (`send -p`), received as received values
//! (space limits left out, `receive -x`): the copy's later receives then store blocks with
//! the compression, recordsize, copies and checksum the source had, and after each such
//! receive one user property it brought is masked by a local setting and restored with
//! `inherit -S` ([`check_received_properties`]).
//!
//! Now and then an incremental stream is sent from a base the copy does not have, or the
//! base is destroyed while the send starts: the engine must refuse it, which counts as a
//! refusal.
//!
//! # Who touches what
//! The second pool has its own lock (shared by every send, exclusive only to import and
//! export it with the child), and a set of the copies being received into: one receive into a
//! copy at a time (a second is refused by the tool, before the engine sees it), and a copy is
//! destroyed or trimmed of old snapshots only under the same claim.
//!
//! # Renames
//! `RenameFileSystem` renames a file system of the registry to a fresh name, as the daemon
//! does with a mounted one: its file system is closed under its lock held exclusively (no
//! file operation is then under way in it), renamed, and opened again under the new name,
//! in a new registry entry. The journal records the rename before it is made and settles it
//! after (`rename`, `renamed`); a crash between the two leaves a rename unsettled, and the
//! oracle accepts either name for the promises until the parent settles it by the name the
//! pool holds. The tool's file systems have no children (all are `POOL/NAME`), but the
//! journal moves the promises of descendants with their parent all the same.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use rand::rngs::StdRng;
use rand::Rng;
use tarn::object::ObjectError;
use tarn::pool::holds::Holder;
use tarn::pool::snapshots::SnapshotInfo;
use tarn::pool::{ImportOptions, Pool};
use tarn::send::{
    abort_receive, receive, resume_send_options, resume_token, send, ReceiveOptions, ReceiveReport,
    SendError, SendOptions, SendReport,
};

use super::outcomes::note;
use super::{pool_missing, refused, Child, FileSystemSlot, OpError, OpResult};
use crate::journal::ReceiveKind;
use crate::ops::Op;
use crate::oracle::{tree_digest, verify_tree};

/// The second pool's name.
pub const REPLICA_POOL_NAME: &str = "replica";

/// Properties a receive into a copy leaves out (see `run_stream`).
const SPACE_LIMITS: [&str; 4] = ["quota", "refquota", "reservation", "refreservation"];

/// Whether a send of `snapshot` carries its file system's properties (half of them); if so,
/// the file system is first given a user property of its own, so that every such stream has
/// one to check ([`check_received_properties`]).
fn with_properties(pool: &Pool, snapshot: &str, rng: &mut StdRng) -> Result<bool, OpError> {
    if rng.gen() {
        return Ok(false);
    }
    let file_system = snapshot.split_once('@').map_or(snapshot, |(name, _)| name);
    let value = format!("sent {}", rng.gen::<u32>());
    pool.set_property(file_system, "org.tarn-stress:sent", Some(&value))?;
    Ok(true)
}

/// After a receive with properties (`send -p`), under the copy's claim: a user property the
/// stream brought is in effect as received; a local setting masks it, and `inherit -S`
/// brings the received value back (nothing else sets properties on a copy, so both are
/// judged exactly).
fn check_received_properties(replica: &Pool, copy: &str) -> OpResult {
    let received: Vec<(String, String)> = (replica.user_properties(copy)?.into_iter())
        .filter(|(_, _, source)| *source == tarn::PropertySource::Received)
        .map(|(name, value, _)| (name, value))
        .collect();
    let Some((name, value)) = received.first() else {
        note("received properties: none to check");
        return Ok(());
    };
    let expect = |what: &str, wanted: Option<(String, tarn::PropertySource)>| -> OpResult {
        let read = replica.user_property(copy, name)?;
        if read != wanted {
            return Err(OpError::Inconsistent(format!(
                "{name} on {copy} {what}: reads {read:?}, expected {wanted:?}"
            )));
        }
        Ok(())
    };
    let local = format!("{value} (local)");
    replica.set_property(copy, name, Some(&local))?;
    expect(
        "set locally over its received value",
        Some((local.clone(), tarn::PropertySource::Local)),
    )?;
    replica.revert_to_received(copy, name)?;
    expect(
        "after inherit -S",
        Some((value.clone(), tarn::PropertySource::Received)),
    )?;
    note("received properties: masked and restored");
    Ok(())
}
/// The file name of the second pool's only vdev (the runner creates it).
pub const REPLICA_VDEV: &str = "replica.img";
/// Copies the second pool keeps at most: a full send beyond them destroys one first.
pub(super) const REPLICAS_MAX: usize = 4;
/// Snapshots a copy keeps at most: an incremental receive into it destroys its oldest first
/// (never its newest, the base of the next incremental stream).
const REPLICA_SNAPSHOTS_MAX: usize = 4;
/// Bytes the send writes into the pipe at once, and pieces the pipe holds: small, so that a
/// receive that pauses stops the send soon (the send's own buffer holds 1 MiB more).
const PIPE_CHUNK: usize = 16 << 10;
const PIPE_CHUNKS: usize = 4;

/// Where the second pool's vdev lives in a run directory.
pub fn replica_dir(dir: &Path) -> PathBuf {
    dir.join("replica")
}

/// The second pool, as the child holds it.
#[derive(Default)]
pub(super) struct Replica {
    pool: RwLock<Option<Pool>>,
    /// The copies a worker is receiving into (or destroying, or trimming).
    busy: Mutex<BTreeSet<String>>,
    /// The sends under way, by a number of their own.
    sends: Mutex<BTreeMap<u64, Arc<SendUnderWay>>>,
    next_send: AtomicU64,
}

/// A send under way, as destroys in the first pool see it (see [`Replica::sends_reading`]).
struct SendUnderWay {
    /// The snapshots it reads (the one sent, its source, the ones between).
    snapshots: Vec<String>,
    /// Set by the send's thread while it is inside `send`, which holds every snapshot it
    /// reads from before its first write to after its last.
    inside: AtomicBool,
    /// The writes `send` has begun.
    writes: AtomicU64,
    /// Destroys of its snapshots that succeeded after its first write: the snapshot, and
    /// the writes begun when the destroy returned.
    destroyed: Mutex<Vec<(String, u64)>>,
}

impl SendUnderWay {
    /// Once the send has returned: a destroy it saw succeed must have been refused if the
    /// send wrote again after it (see [`Replica::sends_reading`]).
    fn check_holds(&self) -> OpResult {
        let writes = self.writes.load(Ordering::SeqCst);
        match (self.destroyed.lock().iter()).find(|(_, at)| writes > *at) {
            Some((snapshot, _)) => Err(OpError::Inconsistent(format!(
                "{snapshot} was destroyed while a send of {:?}, which holds it, was under way",
                self.snapshots
            ))),
            None => Ok(()),
        }
    }
}

/// The sends that held a snapshot when a destroy started (see [`Replica::sends_reading`]).
pub(super) struct SendsReading(Vec<Arc<SendUnderWay>>);

/// A copy claimed by one worker, released when dropped.
pub(super) struct Claim<'a> {
    replica: &'a Replica,
    name: String,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.replica.busy.lock().remove(&self.name);
    }
}

impl Replica {
    /// The sends that read snapshot `destroyed` and have begun writing as a destroy of it
    /// starts: each took its holds before its first write, and keeps them until after its
    /// last. So if one writes again after the destroy has returned, the whole destroy ran
    /// under its hold and must have been refused ([`SendsReading::check`], and the send's own
    /// check when it returns): a check that a send holds its snapshots, one that does not
    /// need the freed blocks to be reused to see it broken.
    pub(super) fn sends_reading(&self, destroyed: &str) -> SendsReading {
        let sends: Vec<Arc<SendUnderWay>> = (self.sends.lock().values())
            .filter(|send| send.snapshots.iter().any(|snapshot| snapshot == destroyed))
            .filter(|send| send.writes.load(Ordering::SeqCst) > 0)
            .cloned()
            .collect();
        if !sends.is_empty() {
            log::debug!("destroying {destroyed} while a send of it is part-way");
        }
        SendsReading(sends)
    }

    pub(super) fn claim(&self, name: &str) -> Result<Claim<'_>, OpError> {
        if !self.busy.lock().insert(name.to_string()) {
            return refused("another worker is receiving into that copy");
        }
        Ok(Claim {
            replica: self,
            name: name.to_string(),
        })
    }
}

impl SendsReading {
    /// After a destroy of `destroyed` succeeded: tell each send that had begun writing, which
    /// judges when it returns.
    pub(super) fn check(self, destroyed: &str) -> OpResult {
        for send in self.0 {
            let writes = send.writes.load(Ordering::SeqCst);
            send.destroyed.lock().push((destroyed.to_string(), writes));
        }
        Ok(())
    }
}

/// One stream from the first pool into the second.
pub(super) struct Transfer {
    /// The snapshot sent (`POOL/FS@SNAP`).
    pub(super) to: String,
    pub(super) options: SendOptions,
    /// The copy received into (`replica/rN`).
    pub(super) target: String,
    pub(super) kind: ReceiveKind,
    /// End the receive's input after this many bytes.
    pub(super) cut: Option<u64>,
    /// How fast the receive reads (see [`slow_connection`]).
    pub(super) connection: Connection,
    /// The name and digest each snapshot the stream may carry must have, by guid.
    pub(super) expected: BTreeMap<u64, (String, String)>,
}

impl Transfer {
    /// The kind of receive this was, once it ended whole: a stream planned to be cut that
    /// ended before the cut (the dry run only estimates its length) was not resumed.
    fn kind_received(&self) -> ReceiveKind {
        match (self.kind, self.cut, &self.options.from) {
            (ReceiveKind::Resumed, Some(_), None) => ReceiveKind::Full,
            (ReceiveKind::Resumed, Some(_), Some(_)) => ReceiveKind::Incremental,
            (kind, _, _) => kind,
        }
    }
}

/// How a transfer ended, when the engine accepted it.
enum Transferred {
    /// Received whole: the snapshots made.
    Received(Vec<String>),
    /// Cut short as planned.
    Cut,
}

impl Child {
    /// Import the second pool (at the start of the child). A receive that a crash stopped
    /// and that cannot be resumed is destroyed by the import.
    pub(super) fn import_replica(&self) -> Result<(), String> {
        let options = ImportOptions::new(
            vec![replica_dir(&self.plan.dir)],
            self.plan.tunables.clone(),
        );
        let (pool, report) = Pool::import(REPLICA_POOL_NAME, options)
            .map_err(|error| format!("importing the second pool: {error}"))?;
        for note in report.damaged {
            log::info!("second pool at import: {note}");
        }
        self.imports.fetch_add(1, Ordering::Relaxed);
        *self.replica.pool.write() = Some(pool);
        Ok(())
    }

    /// Export the second pool (at the clean end of the child).
    pub(super) fn export_replica(&self) -> Result<(), String> {
        match self.replica.pool.write().take() {
            Some(pool) => pool
                .export()
                .map_err(|error| format!("exporting the second pool: {error}")),
            None => Ok(()),
        }
    }

    pub(super) fn replicate(&self, op: Op, rng: &mut StdRng) -> OpResult {
        let pool_guard = self.pool.read();
        let Some(pool) = pool_guard.as_ref() else {
            return Err(pool_missing());
        };
        let replica_guard = self.replica.pool.read();
        let Some(replica) = replica_guard.as_ref() else {
            return Err(pool_missing());
        };
        match op {
            Op::SendFull => self.send_full(pool, replica, false, rng),
            Op::HostileReceive => self.hostile_receive(pool, replica, rng),
            Op::SendIncremental => self.send_incremental(pool, replica, false, rng),
            Op::SendResumed => {
                if rng.gen_ratio(1, 2) {
                    if let Some(result) = self.resume_left_over(pool, replica, rng) {
                        return result;
                    }
                }
                if rng.gen_ratio(1, 2) {
                    self.send_full(pool, replica, true, rng)
                } else {
                    self.send_incremental(pool, replica, true, rng)
                }
            }
            _ => unreachable!("{op:?} is not a replication operation"),
        }
    }

    /// A snapshot of the first pool sent whole into a new copy (cut short if `cut`).
    fn send_full(&self, pool: &Pool, replica: &Pool, cut: bool, rng: &mut StdRng) -> OpResult {
        let snapshot = self.pick_snapshot(pool, rng)?;
        let copies = copies(replica);
        if copies.len() >= REPLICAS_MAX {
            let victim = &copies[rng.gen_range(0..copies.len())];
            let _claim = self.replica.claim(victim)?;
            replica.destroy_datasets(victim, true, false)?;
        }
        let target = format!("{REPLICA_POOL_NAME}/{}", self.unique_name());
        let _claim = self.replica.claim(&target)?;
        let expected = self.digest_sources(pool, std::slice::from_ref(&snapshot))?;
        let options = SendOptions {
            compressed: rng.gen(),
            properties: with_properties(pool, &snapshot, rng)?,
            ..SendOptions::default()
        };
        let cut = match cut {
            true => Some(cut_point(pool, &snapshot, &options, rng)?),
            false => None,
        };
        let kind = if cut.is_some() {
            ReceiveKind::Resumed
        } else {
            ReceiveKind::Full
        };
        self.complete(
            pool,
            replica,
            Transfer {
                to: snapshot,
                options,
                target,
                kind,
                cut,
                connection: slow_connection(rng),
                expected,
            },
            rng,
        )
    }

    /// The changes from a copy's newest snapshot to a newer one of its source, sent into the
    /// copy (cut short if `cut`); now and then from another base, which the engine refuses.
    fn send_incremental(
        &self,
        pool: &Pool,
        replica: &Pool,
        cut: bool,
        rng: &mut StdRng,
    ) -> OpResult {
        let copies = copies(replica);
        if copies.is_empty() {
            return refused("no copy in the second pool");
        }
        let target = copies[rng.gen_range(0..copies.len())].clone();
        let _claim = self.replica.claim(&target)?;
        let mut held = replica.core.snapshots_of(&target)?;
        held.sort_by_key(|snapshot| snapshot.creation_txg);
        let Some(newest) = held.last().cloned() else {
            return refused("the copy has no snapshot (a partial receive)");
        };
        for old in held
            .iter()
            .take(held.len().saturating_sub(REPLICA_SNAPSHOTS_MAX))
        {
            replica.destroy_snapshots(&old.name, false)?;
        }
        let Some(base) = (pool.snapshots().into_iter()).find(|source| source.guid == newest.guid)
        else {
            return refused("the copy's newest snapshot is gone from the first pool");
        };
        let file_system = base.name.split_once('@').map_or("", |(fs, _)| fs);
        let mut family: Vec<SnapshotInfo> = pool.core.snapshots_of(file_system)?;
        family.sort_by_key(|snapshot| snapshot.creation_txg);
        let later: Vec<&SnapshotInfo> = (family.iter())
            .filter(|snapshot| snapshot.creation_txg > base.creation_txg)
            .collect();
        if later.is_empty() {
            return refused("no snapshot newer than the copy's");
        }
        let to = later[rng.gen_range(0..later.len())].clone();
        // One time in eight, another base: one the copy does not have (refused by the receive)
        // unless it is the copy's own.
        let from = match rng.gen_ratio(1, 8) {
            true => {
                let older: Vec<&SnapshotInfo> = (family.iter())
                    .filter(|snapshot| snapshot.creation_txg < to.creation_txg)
                    .collect();
                match older.is_empty() {
                    true => base.name.clone(),
                    false => older[rng.gen_range(0..older.len())].name.clone(),
                }
            }
            false => base.name.clone(),
        };
        let intermediates = rng.gen_ratio(1, 4);
        let carried: Vec<String> = if intermediates {
            let from_txg = family
                .iter()
                .find(|snapshot| snapshot.name == from)
                .map_or(0, |snapshot| snapshot.creation_txg);
            (family.iter())
                .filter(|snapshot| {
                    snapshot.creation_txg > from_txg && snapshot.creation_txg <= to.creation_txg
                })
                .map(|snapshot| snapshot.name.clone())
                .collect()
        } else {
            vec![to.name.clone()]
        };
        let expected = self.digest_sources(pool, &carried)?;
        let options = SendOptions {
            from: Some(from),
            intermediates,
            compressed: rng.gen(),
            properties: with_properties(pool, &to.name, rng)?,
            ..SendOptions::default()
        };
        // A resumed send continues one snapshot's stream: a cut stream is a plain `-i` one.
        let cut = match cut && !intermediates {
            true => Some(cut_point(pool, &to.name, &options, rng)?),
            false => None,
        };
        let kind = if cut.is_some() {
            ReceiveKind::Resumed
        } else {
            ReceiveKind::Incremental
        };
        self.complete(
            pool,
            replica,
            Transfer {
                to: to.name,
                options,
                target,
                kind,
                cut,
                connection: slow_connection(rng),
                expected,
            },
            rng,
        )
    }

    /// Resume a partial receive an earlier operation or child left in the second pool; None
    /// if there is none.
    fn resume_left_over(&self, pool: &Pool, replica: &Pool, rng: &mut StdRng) -> Option<OpResult> {
        let partial: Vec<String> = (copies(replica).into_iter())
            .filter(|copy| matches!(resume_token(replica, copy), Ok(Some(_))))
            .collect();
        if partial.is_empty() {
            return None;
        }
        let target = partial[rng.gen_range(0..partial.len())].clone();
        let claim = match self.replica.claim(&target) {
            Ok(claim) => claim,
            Err(error) => return Some(Err(error)),
        };
        let result = self.resume(pool, replica, &target, rng);
        drop(claim);
        Some(result)
    }

    /// Resume the partial receive into `target` (claimed) with its token, or abandon it if
    /// its source is gone.
    pub(super) fn resume(
        &self,
        pool: &Pool,
        replica: &Pool,
        target: &str,
        rng: &mut StdRng,
    ) -> OpResult {
        let Some(token) = resume_token(replica, target).map_err(judge_error)? else {
            return refused("the receive was cut before its first record was applied");
        };
        let (to, options) = match resume_send_options(pool, &token).map_err(judge_error) {
            Ok(found) => found,
            Err(OpError::Refused(why)) => {
                abort_receive(replica, target).map_err(judge_error)?;
                return refused(&format!("{why}: abandoned the partial receive"));
            }
            Err(error) => return Err(error),
        };
        let expected = self.digest_sources(pool, std::slice::from_ref(&to))?;
        self.complete(
            pool,
            replica,
            Transfer {
                to,
                options,
                target: target.to_string(),
                kind: ReceiveKind::Resumed,
                cut: None,
                connection: slow_connection(rng),
                expected,
            },
            rng,
        )
    }

    /// Run a transfer and judge it: a receive made whole is verified; a cut one is resumed
    /// at once (or left for later, one time in three).
    fn complete(
        &self,
        pool: &Pool,
        replica: &Pool,
        transfer: Transfer,
        rng: &mut StdRng,
    ) -> OpResult {
        match transfer_stream(pool, replica, &self.replica, &transfer)? {
            Transferred::Received(snapshots) => {
                self.verify_received(replica, &transfer, &snapshots)
            }
            Transferred::Cut => {
                if rng.gen_ratio(1, 3) {
                    return Ok(()); // For a later `SendResumed`, or the next child.
                }
                // The other workers go on meanwhile: the source may be destroyed.
                std::thread::sleep(Duration::from_millis(rng.gen_range(0..50)));
                self.resume(pool, replica, &transfer.target, rng)
            }
        }
    }

    /// Read each snapshot of the first pool back under a short hold, verify it, and journal
    /// its digest before any stream of it starts; the digests by guid. A snapshot gone is a
    /// refusal.
    pub(super) fn digest_sources(
        &self,
        pool: &Pool,
        snapshots: &[String],
    ) -> Result<BTreeMap<u64, (String, String)>, OpError> {
        let mut digests = BTreeMap::new();
        for snapshot in snapshots {
            let hold = pool.long_hold(snapshot, Holder::Send)?;
            let guid = pool.snapshot_info(snapshot)?.guid;
            let fs = pool.snapshot_file_system(snapshot)?;
            let mut problems = Vec::new();
            let files = verify_tree(&fs, snapshot, self.plan.round, &mut problems);
            drop(fs);
            drop(hold);
            if !problems.is_empty() {
                return Err(OpError::Inconsistent(problems.join("; ")));
            }
            let digest = tree_digest(&files);
            self.journal.sent(guid, &digest, snapshot);
            digests.insert(guid, (snapshot.clone(), digest));
        }
        Ok(digests)
    }

    /// Read back every snapshot a receive made: each must hold its source's digest.
    pub(super) fn verify_received(
        &self,
        replica: &Pool,
        transfer: &Transfer,
        snapshots: &[String],
    ) -> OpResult {
        if snapshots.is_empty() {
            return Err(OpError::Inconsistent(format!(
                "the receive of {} into {} ended without a snapshot",
                transfer.to, transfer.target
            )));
        }
        for snapshot in snapshots {
            let guid = replica.snapshot_info(snapshot)?.guid;
            let Some((_, digest)) = transfer.expected.get(&guid) else {
                return Err(OpError::Inconsistent(format!(
                    "{snapshot} (guid {guid:#x}) was received from {}, which was not to send it",
                    transfer.to
                )));
            };
            let fs = replica.snapshot_file_system(snapshot)?;
            let mut problems = Vec::new();
            let files = verify_tree(&fs, snapshot, self.plan.round, &mut problems);
            if !problems.is_empty() {
                return Err(OpError::Inconsistent(problems.join("; ")));
            }
            let found = tree_digest(&files);
            if found != *digest {
                return Err(OpError::Inconsistent(format!(
                    "{snapshot}: received with digest {found}, its source was sent with digest \
                     {digest}"
                )));
            }
            self.journal
                .received(transfer.kind_received(), guid, &transfer.target);
        }
        if transfer.options.properties {
            check_received_properties(replica, &transfer.target)?;
        }
        Ok(())
    }

    /// Rename a file system of the registry to a fresh name (see the module documentation).
    pub(super) fn rename_file_system(&self, rng: &mut StdRng) -> OpResult {
        let pool_guard = self.pool.read();
        let Some(pool) = pool_guard.as_ref() else {
            return Err(pool_missing());
        };
        let slot = self.pick_slot(rng)?;
        let new = format!("{}/ds{}", pool.name(), self.unique_name());
        let mut fs_guard = slot.fs.write();
        if fs_guard.is_none() {
            return refused("the file system is being destroyed");
        }
        pool.check_rename_dataset(&slot.name, &new)?;
        self.journal.rename(&slot.name, &new);
        drop(fs_guard.take());
        if let Err(error) = pool.rename_dataset(&slot.name, &new) {
            self.journal.rename(&new, &slot.name);
            self.journal.renamed(&slot.name);
            *fs_guard = Some(pool.open_file_system(&slot.name)?);
            return Err(error.into());
        }
        self.journal.renamed(&new);
        let opened = pool.open_file_system(&new);
        let mut slots = self.slots.lock();
        slots.retain(|other| !Arc::ptr_eq(other, &slot));
        slots.push(Arc::new(FileSystemSlot {
            name: new,
            family: slot.family,
            fs: RwLock::new(Some(opened?)),
        }));
        Ok(())
    }
}

/// The copies in the second pool (its file systems but the root).
pub(super) fn copies(replica: &Pool) -> Vec<String> {
    (replica.datasets().into_iter())
        .map(|info| info.name)
        .filter(|name| name != replica.name())
        .collect()
}

/// How fast the receive reads the pipe.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Connection {
    /// A pause at this byte, this long.
    pause: Option<(u64, Duration)>,
    /// A wait before each piece taken from the pipe.
    per_piece: Duration,
}

/// One time in two a pause of the receive's reading at a byte within the first MiB, and one
/// time in two a wait of a few milliseconds at each piece: a slow connection. The send, its
/// pipe full, waits part-way with its snapshots open, and the other workers go on meanwhile;
/// without it a small file system's send is over before most other operations could reach it.
fn slow_connection(rng: &mut StdRng) -> Connection {
    Connection {
        pause: rng.gen_ratio(1, 2).then(|| {
            (
                rng.gen_range(0..1 << 20),
                Duration::from_millis(rng.gen_range(10..300)),
            )
        }),
        per_piece: match rng.gen_ratio(1, 2) {
            true => Duration::from_millis(rng.gen_range(1..8)),
            false => Duration::ZERO,
        },
    }
}

/// Where to cut a stream: a byte within the length a dry run of it gives.
fn cut_point(
    pool: &Pool,
    to: &str,
    options: &SendOptions,
    rng: &mut StdRng,
) -> Result<u64, OpError> {
    let dry = SendOptions {
        dry_run: true,
        ..options.clone()
    };
    let report = send(pool, to, &dry, &mut std::io::sink(), &mut |_| {}).map_err(judge_error)?;
    Ok(rng.gen_range(0..report.bytes.max(1)))
}

/// Send and receive at once through a bounded pipe; the engine's verdict, judged.
fn transfer_stream(
    pool: &Pool,
    replica: &Pool,
    sends: &Replica,
    transfer: &Transfer,
) -> Result<Transferred, OpError> {
    let under_way = Arc::new(SendUnderWay {
        snapshots: (transfer.expected.values())
            .map(|(name, _)| name.clone())
            .chain(transfer.options.from.iter().cloned())
            .chain([transfer.to.clone()])
            .filter(|name| name.contains('@'))
            .collect::<BTreeSet<String>>()
            .into_iter()
            .collect(),
        inside: AtomicBool::new(false),
        writes: AtomicU64::new(0),
        destroyed: Mutex::new(Vec::new()),
    });
    let number = sends.next_send.fetch_add(1, Ordering::SeqCst);
    sends.sends.lock().insert(number, under_way.clone());
    let result = run_stream(pool, replica, &under_way, transfer);
    sends.sends.lock().remove(&number);
    under_way.check_holds()?;
    result
}

fn run_stream(
    pool: &Pool,
    replica: &Pool,
    under_way: &SendUnderWay,
    transfer: &Transfer,
) -> Result<Transferred, OpError> {
    let (sender, queue) = sync_channel::<Vec<u8>>(PIPE_CHUNKS);
    let mut input = PipeInput {
        queue,
        chunk: Vec::new(),
        at: 0,
        left: transfer.cut,
        cut: false,
        connection: transfer.connection,
        read: 0,
    };
    let options = ReceiveOptions {
        resumable: transfer.kind == ReceiveKind::Resumed,
        // A space limit of the source (`SetSpaceLimit`) received on a copy would refuse later
        // receives into it for want of room, which is no fault of theirs; every other
        // property the stream carries is received (compression, recordsize, copies and
        // checksum then shape how the copy stores the next stream's blocks).
        exclude: SPACE_LIMITS.iter().map(|name| name.to_string()).collect(),
        ..ReceiveOptions::default()
    };
    std::thread::scope(|scope| {
        let sending = scope.spawn(move || -> Result<SendReport, SendError> {
            let output = PipeOutput {
                queue: sender,
                under_way,
            };
            let mut out = std::io::BufWriter::with_capacity(PIPE_CHUNK, output);
            under_way.inside.store(true, Ordering::SeqCst);
            let sent = send(pool, &transfer.to, &transfer.options, &mut out, &mut |_| {});
            under_way.inside.store(false, Ordering::SeqCst);
            let report = sent?;
            out.flush().map_err(SendError::Output)?;
            Ok(report)
        });
        let received = receive(replica, &transfer.target, &mut input, &options);
        let cut = input.cut;
        // The send may be blocked on a full pipe: closing it ends the send.
        drop(input);
        let sent = sending
            .join()
            .unwrap_or_else(|_| Err(SendError::Refused("the send thread panicked".into())));
        judge(transfer, sent, received, cut)
    })
}

/// What the two ends' results mean. A send that failed on its own account speaks first (the
/// receive then only saw its stream end); a receive cut as planned is no failure; a stream
/// that the send made whole and the receive found bad or short is an inconsistency.
fn judge(
    transfer: &Transfer,
    sent: Result<SendReport, SendError>,
    received: Result<ReceiveReport, SendError>,
    cut: bool,
) -> Result<Transferred, OpError> {
    let context = |error: OpError, side: &str| match error {
        OpError::Refused(why) => OpError::Refused(format!("{side}: {why}")),
        OpError::Inconsistent(why) => OpError::Inconsistent(format!(
            "{side} of {} into {}: {why}",
            transfer.to, transfer.target
        )),
    };
    match (sent, received) {
        (Ok(_), Ok(report)) => Ok(Transferred::Received(report.snapshots)),
        (Err(error), Ok(_)) => Err(OpError::Inconsistent(format!(
            "the receive of {} into {} ended, but the send failed: {error}",
            transfer.to, transfer.target
        ))),
        (Err(error), Err(_)) if !matches!(error, SendError::Output(_)) => {
            Err(context(judge_error(error), "send"))
        }
        (_, Err(SendError::Truncated { .. })) if cut => Ok(Transferred::Cut),
        (_, Err(error @ (SendError::Truncated { .. } | SendError::BadStream { .. }))) => {
            Err(OpError::Inconsistent(format!(
                "receive of {} into {}: the stream the send made is bad: {error}",
                transfer.to, transfer.target
            )))
        }
        (_, Err(error)) => Err(context(judge_error(error), "receive")),
    }
}

/// An engine error of a send or receive: a refusal (a name, a snapshot gone, a busy
/// snapshot, no space), or damage.
pub(super) fn judge_error(error: SendError) -> OpError {
    match error {
        SendError::Refused(why) => OpError::Refused(why),
        SendError::Pool(error) => error.into(),
        SendError::Object(ObjectError::NoSpace) => OpError::Refused(error.to_string()),
        error => OpError::Inconsistent(error.to_string()),
    }
}

/// The send's end of the pipe: at most [`PIPE_CHUNK`] bytes a write, so that a full pipe
/// stops the send within its writes; it counts the writes begun inside `send` (see
/// [`Replica::sends_reading`]).
struct PipeOutput<'a> {
    queue: SyncSender<Vec<u8>>,
    under_way: &'a SendUnderWay,
}

impl Write for PipeOutput<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        // (Set and read on the send's own thread: a write inside `send` sees it set.)
        if self.under_way.inside.load(Ordering::SeqCst) {
            self.under_way.writes.fetch_add(1, Ordering::SeqCst);
        }
        let length = bytes.len().min(PIPE_CHUNK);
        self.queue.send(bytes[..length].to_vec()).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the receive stopped reading",
            )
        })?;
        Ok(length)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The receive's end of the pipe, which ends early (`cut`) after `left` bytes if given, and
/// reads as slowly as `connection` says.
struct PipeInput {
    queue: Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
    left: Option<u64>,
    cut: bool,
    connection: Connection,
    /// Bytes read so far.
    read: u64,
}

impl Read for PipeInput {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.left == Some(0) {
            self.cut = true;
            return Ok(0);
        }
        if let Some((at, pause)) = self.connection.pause {
            if self.read >= at {
                std::thread::sleep(pause);
                self.connection.pause = None;
            }
        }
        while self.at == self.chunk.len() {
            std::thread::sleep(self.connection.per_piece);
            match self.queue.recv() {
                Ok(chunk) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                // The send ended (whole or not): the receive judges what it got.
                Err(_) => return Ok(0),
            }
        }
        let mut length = out.len().min(self.chunk.len() - self.at);
        if let Some(left) = &mut self.left {
            length = length.min(*left as usize);
            *left -= length as u64;
        }
        out[..length].copy_from_slice(&self.chunk[self.at..self.at + length]);
        self.at += length;
        self.read += length as u64;
        Ok(length)
    }
}
