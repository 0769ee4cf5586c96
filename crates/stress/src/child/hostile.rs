//! `HostileReceive`: a damaged send stream received into the second pool, beside every other
//! operation.
//!
//! # Theory
//! A stream is untrusted input: a receiver that meets damage must refuse it with an error that
//! says so, never panic, never suspend its pool, and leave what it already held intact. The
//! engine's own tests (`tests/receive_hostile.rs`) feed it hostile streams into an idle pool;
//! here they arrive while the second pool is receiving good streams into other copies and
//! the first pool is snapshotting, destroying and rolling back what the streams are made of.
//!
//! The operation makes a good stream (a full one into a new copy, or an incremental one from a
//! copy's newest snapshot, exactly as `SendFull` and `SendIncremental` do), whole in memory,
//! journals its source's digest as they do, damages it in one of the ways of [`Damage`], and
//! receives it (one time in three resumable, `receive -s`). The damage is made to the bytes,
//! the chained checksums left as the good stream had them, so every kind must be refused:
//! a byte flipped, the stream cut short, a record's payload length or object number changed,
//! records swapped, repeated or left out. Then:
//! - the error must be a stream error (bad stream, truncated) or a refusal, and the second
//!   pool must not be suspended;
//! - a full receive must leave no file system behind, unless it was resumable and kept its
//!   partial state with a resume token;
//! - an incremental receive must leave its copy as it was: the same snapshots, nothing
//!   changed since the newest, whose contents still have the digest they had before;
//! - a partial state kept with a token is resumed at once from the good source (two times in
//!   three) and the copy it makes verified, or left for a later `SendResumed` or the next
//!   child, which resume or abandon it as they do any cut receive.
//!
//! A damaged stream that the receiver accepts is judged by what it made, as every receive
//! is: each snapshot must have its source's digest (so a damage that changed nothing the
//! receiver uses, such as a record repeated after the stream's end, passes), and anything
//! else is an inconsistency. Re-chained hostile streams (records changed and their checksums
//! computed afresh, which a receiver may accept with other contents) are not made here: what
//! they make has no source to verify it against.

use rand::rngs::StdRng;
use rand::Rng;
use tarn::pool::snapshots::SnapshotInfo;
use tarn::pool::Pool;
use tarn::send::{receive, resume_token, send, ReceiveOptions, SendError, SendOptions};

use super::outcomes;
use super::replication::{
    copies, judge_error, Connection, Transfer, REPLICAS_MAX, REPLICA_POOL_NAME,
};
use super::{refused, Child, OpError, OpResult};
use crate::journal::ReceiveKind;
use crate::oracle::{tree_digest, verify_tree};

/// The most bytes a stream the operation damages may have (it is held in memory).
const STREAM_BYTES_MAX: u64 = 32 << 20;
/// The size of a record's header in a stream (docs/design/11-send.md §2.17).
const HEADER_BYTES: usize = 128;

/// How a stream is damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    /// One to three bytes, anywhere, XORed with a nonzero byte.
    Flip,
    /// The stream ends at a byte before its end.
    Truncate,
    /// A record's payload length (header bytes 4..8) changed.
    Length,
    /// A record's object number (the first field: OBJECT, WRITE, SPILL, FREE, FREEOBJECTS)
    /// changed.
    ObjectNumber,
    /// Two records swapped.
    Reorder,
    /// A record sent twice in a row.
    Duplicate,
    /// A record left out.
    Drop,
}

const DAMAGES: [Damage; 7] = [
    Damage::Flip,
    Damage::Truncate,
    Damage::Length,
    Damage::ObjectNumber,
    Damage::Reorder,
    Damage::Duplicate,
    Damage::Drop,
];

/// The byte ranges of the stream's records, header and payload, in order (docs/design/11-send.md
/// §2.17: a 128-byte header whose bytes 4..8 are the payload's length, the payload right
/// after it).
fn records(stream: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut found = Vec::new();
    let mut at = 0;
    while at + HEADER_BYTES <= stream.len() {
        let length = u32::from_le_bytes(stream[at + 4..at + 8].try_into().expect("4 bytes"));
        let end = at + HEADER_BYTES + length as usize;
        if end > stream.len() {
            break;
        }
        found.push(at..end);
        at = end;
    }
    found
}

/// A value for a field other than `old`, often at a limit.
fn other_value(old: u64, limit: u64, rng: &mut StdRng) -> u64 {
    loop {
        let value = match rng.gen_range(0..5) {
            0 => 0,
            1 => limit,
            2 => old.wrapping_add(1) & limit,
            3 => old.wrapping_sub(1) & limit,
            _ => rng.gen::<u64>() & limit,
        };
        if value != old {
            return value;
        }
    }
}

/// Damage `stream` as `damage` says; what was done, for the log and the failure message.
fn apply(stream: &mut Vec<u8>, damage: Damage, rng: &mut StdRng) -> String {
    let ranges = records(stream);
    let pick = |rng: &mut StdRng| ranges[rng.gen_range(0..ranges.len())].clone();
    let flip = |stream: &mut Vec<u8>, rng: &mut StdRng| {
        let mut at = Vec::new();
        for _ in 0..rng.gen_range(1..=3) {
            let byte = rng.gen_range(0..stream.len());
            // Distinct bytes: two flips of one byte could undo each other.
            if !at.contains(&byte) {
                stream[byte] ^= rng.gen_range(1..=255u8);
                at.push(byte);
            }
        }
        format!("bytes {at:?} flipped")
    };
    match damage {
        _ if ranges.len() < 2 => flip(stream, rng),
        Damage::Flip => flip(stream, rng),
        Damage::Truncate => {
            let length = rng.gen_range(0..stream.len());
            stream.truncate(length);
            format!("cut at byte {length}")
        }
        Damage::Length => {
            let record = pick(rng);
            let field = record.start + 4..record.start + 8;
            let old = u32::from_le_bytes(stream[field.clone()].try_into().expect("4 bytes"));
            let new = other_value(u64::from(old), u64::from(u32::MAX), rng) as u32;
            stream[field].copy_from_slice(&new.to_le_bytes());
            format!("record at byte {}: length {old} made {new}", record.start)
        }
        Damage::ObjectNumber => {
            let numbered: Vec<_> = (ranges.iter())
                .filter(|range| matches!(stream[range.start], 2..=6))
                .cloned()
                .collect();
            if numbered.is_empty() {
                return flip(stream, rng);
            }
            let record = numbered[rng.gen_range(0..numbered.len())].clone();
            let field = record.start + 8..record.start + 16;
            let old = u64::from_le_bytes(stream[field.clone()].try_into().expect("8 bytes"));
            let new = other_value(old, u64::MAX, rng);
            stream[field].copy_from_slice(&new.to_le_bytes());
            format!("record at byte {}: object {old} made {new}", record.start)
        }
        Damage::Reorder | Damage::Duplicate | Damage::Drop => {
            let first = rng.gen_range(0..ranges.len());
            let mut order: Vec<usize> = (0..ranges.len()).collect();
            let what = match damage {
                Damage::Reorder => {
                    let mut second = rng.gen_range(0..ranges.len() - 1);
                    if second >= first {
                        second += 1;
                    }
                    order.swap(first, second);
                    format!("records {first} and {second} swapped")
                }
                Damage::Duplicate => {
                    order.insert(first, first);
                    format!("record {first} repeated")
                }
                _ => {
                    order.remove(first);
                    format!("record {first} left out")
                }
            };
            let tail = ranges.last().map_or(0, |range| range.end);
            let mut rebuilt = Vec::with_capacity(stream.len() + HEADER_BYTES);
            for index in order {
                rebuilt.extend_from_slice(&stream[ranges[index].clone()]);
            }
            rebuilt.extend_from_slice(&stream[tail..]);
            *stream = rebuilt;
            format!("{what} (of {})", ranges.len())
        }
    }
}

/// A copy's snapshots, oldest first.
fn snapshots_of(replica: &Pool, copy: &str) -> Result<Vec<SnapshotInfo>, OpError> {
    let mut held = replica.core.snapshots_of(copy)?;
    held.sort_by_key(|snapshot| snapshot.creation_txg);
    Ok(held)
}

/// What an incremental receive must leave of its copy when refused.
struct CopyBefore {
    snapshots: Vec<String>,
    newest: String,
    digest: String,
}

impl Child {
    /// The digest of a snapshot of the second pool, read back and verified block by block.
    fn replica_digest(&self, replica: &Pool, snapshot: &str) -> Result<String, OpError> {
        let fs = replica.snapshot_file_system(snapshot)?;
        let mut problems = Vec::new();
        let files = verify_tree(&fs, snapshot, self.plan.round, &mut problems);
        if !problems.is_empty() {
            return Err(OpError::Inconsistent(problems.join("; ")));
        }
        Ok(tree_digest(&files))
    }

    /// The operation: see the module documentation.
    pub(super) fn hostile_receive(
        &self,
        pool: &Pool,
        replica: &Pool,
        rng: &mut StdRng,
    ) -> OpResult {
        let existing = copies(replica);
        let incremental = !existing.is_empty() && rng.gen_ratio(1, 2);
        let (target, to, options, before) = if incremental {
            let target = existing[rng.gen_range(0..existing.len())].clone();
            let held = snapshots_of(replica, &target)?;
            let Some(newest) = held.last() else {
                return refused("the copy has no snapshot (a partial receive)");
            };
            let Some(base) =
                (pool.snapshots().into_iter()).find(|source| source.guid == newest.guid)
            else {
                return refused("the copy's newest snapshot is gone from the first pool");
            };
            let file_system = base.name.split_once('@').map_or("", |(fs, _)| fs);
            let later: Vec<SnapshotInfo> = (pool.core.snapshots_of(file_system)?.into_iter())
                .filter(|snapshot| snapshot.creation_txg > base.creation_txg)
                .collect();
            if later.is_empty() {
                return refused("no snapshot newer than the copy's");
            }
            let to = later[rng.gen_range(0..later.len())].name.clone();
            let options = SendOptions {
                from: Some(base.name),
                compressed: rng.gen(),
                ..SendOptions::default()
            };
            (target, to, options, Some(newest.name.clone()))
        } else {
            if existing.len() >= REPLICAS_MAX {
                return refused("the second pool holds enough copies");
            }
            let target = format!("{REPLICA_POOL_NAME}/{}", self.unique_name());
            let options = SendOptions {
                compressed: rng.gen(),
                ..SendOptions::default()
            };
            (target, self.pick_snapshot(pool, rng)?, options, None)
        };
        let _claim = self.replica.claim(&target)?;
        let before = match before {
            Some(newest) => {
                // (Read under the claim: no other receive changes the copy now.)
                let snapshots = snapshots_of(replica, &target)?;
                if snapshots.last().map(|snapshot| &snapshot.name) != Some(&newest) {
                    return refused("the copy changed before it was claimed");
                }
                Some(CopyBefore {
                    snapshots: snapshots
                        .into_iter()
                        .map(|snapshot| snapshot.name)
                        .collect(),
                    digest: self.replica_digest(replica, &newest)?,
                    newest,
                })
            }
            None => None,
        };
        let expected = self.digest_sources(pool, std::slice::from_ref(&to))?;
        let dry = SendOptions {
            dry_run: true,
            ..options.clone()
        };
        let size = send(pool, &to, &dry, &mut std::io::sink(), &mut |_| {})
            .map_err(judge_error)?
            .bytes;
        if size > STREAM_BYTES_MAX {
            return refused("the stream is too large to hold in memory");
        }
        let mut stream = Vec::with_capacity(size as usize);
        send(pool, &to, &options, &mut stream, &mut |_| {}).map_err(judge_error)?;
        let damage = DAMAGES[rng.gen_range(0..DAMAGES.len())];
        let what = apply(&mut stream, damage, rng);
        let resumable = rng.gen_ratio(1, 3);
        log::info!(
            "hostile receive into {target}: {} stream of {to}, {damage:?}: {what}{}",
            if incremental { "incremental" } else { "full" },
            if resumable { ", resumable" } else { "" }
        );
        let transfer = Transfer {
            to,
            options,
            target,
            kind: if incremental {
                ReceiveKind::Incremental
            } else {
                ReceiveKind::Full
            },
            cut: None,
            connection: Connection::default(),
            expected,
        };
        let context = |why: String| {
            OpError::Inconsistent(format!(
                "hostile receive of {} into {} ({damage:?}: {what}): {why}",
                transfer.to, transfer.target
            ))
        };
        // A verification of what was received that failed, said after what the receive did.
        let then = |did: &'static str| {
            move |error: OpError| match error {
                OpError::Refused(why) | OpError::Inconsistent(why) => {
                    context(format!("{did}, and then: {why}"))
                }
            }
        };
        let received = receive(
            replica,
            &transfer.target,
            &mut &stream[..],
            &ReceiveOptions {
                resumable,
                ..ReceiveOptions::default()
            },
        );
        if let Some(why) = replica.core.txgs.failure() {
            return Err(context(format!("the second pool is suspended: {why}")));
        }
        let error = match received {
            Ok(report) => {
                // Accepted: it must have made exactly its source.
                log::info!("hostile receive into {} accepted", transfer.target);
                outcomes::note("hostile streams accepted whole");
                return self
                    .verify_received(replica, &transfer, &report.snapshots)
                    .map_err(then("accepted"));
            }
            Err(error) => error,
        };
        match &error {
            SendError::BadStream { .. } | SendError::Truncated { .. } => {}
            _ => match judge_error(error) {
                OpError::Refused(why) => return refused(&why),
                OpError::Inconsistent(why) => {
                    return Err(context(format!("refused, but not as a bad stream: {why}")))
                }
            },
        }
        if error
            .to_string()
            .contains(tarn::send::KEPT_BEFORE_THE_ERROR)
        {
            // The damage lies after the stream's END (an END sent twice): the snapshot was
            // received whole before it was read, and stays; it must be exactly its source.
            let held: Vec<String> = (snapshots_of(replica, &transfer.target)?.into_iter())
                .map(|snapshot| snapshot.name)
                .collect();
            let kept = match &before {
                Some(before) if held.starts_with(&before.snapshots) => {
                    held[before.snapshots.len()..].to_vec()
                }
                Some(before) => {
                    return Err(context(format!(
                        "refused after a whole substream, and the copy's snapshots went from \
                         {:?} to {held:?}",
                        before.snapshots
                    )))
                }
                None => held,
            };
            log::info!(
                "hostile receive into {} refused after {kept:?}: {error}",
                transfer.target
            );
            outcomes::note("hostile streams refused after a whole substream was kept");
            return self
                .verify_received(replica, &transfer, &kept)
                .map_err(then("refused after a whole substream"));
        }
        let token = resume_token(replica, &transfer.target).map_err(judge_error)?;
        if token.is_some() && !resumable {
            return Err(context(
                "a receive that was not resumable left a resume token".into(),
            ));
        }
        match &before {
            None if token.is_none() && replica.has_dataset(&transfer.target) => {
                return Err(context(
                    "refused, and its file system was left behind".into(),
                ));
            }
            None => {}
            Some(before) => {
                let now: Vec<String> = (snapshots_of(replica, &transfer.target)?.into_iter())
                    .map(|snapshot| snapshot.name)
                    .collect();
                if now != before.snapshots {
                    return Err(context(format!(
                        "refused, and the copy's snapshots went from {:?} to {now:?}",
                        before.snapshots
                    )));
                }
                if replica.modified_since_newest_snapshot(&transfer.target)? {
                    return Err(context("refused, and the copy changed".into()));
                }
                let digest = self.replica_digest(replica, &before.newest)?;
                if digest != before.digest {
                    return Err(context(format!(
                        "refused, and {} now has digest {digest} (it had {})",
                        before.newest, before.digest
                    )));
                }
            }
        }
        log::info!(
            "hostile receive into {} refused: {error}{}",
            transfer.target,
            if token.is_some() {
                " (partial state kept)"
            } else {
                ""
            }
        );
        outcomes::note(match token {
            Some(_) => "hostile streams refused keeping a partial state",
            None => "hostile streams refused",
        });
        if token.is_some() && rng.gen_ratio(2, 3) {
            // From the good source, as any cut receive is resumed.
            outcomes::note("hostile streams' partial states resumed at once");
            return self.resume(pool, replica, &transfer.target, rng);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Three records as a stream lays them out: headers of 128 bytes, payloads of 0, 5, 0.
    fn stream() -> Vec<u8> {
        let mut stream = Vec::new();
        for (kind, length) in [(1u16, 0u32), (4, 5), (7, 0)] {
            let mut header = vec![0u8; HEADER_BYTES];
            header[..2].copy_from_slice(&kind.to_le_bytes());
            header[4..8].copy_from_slice(&length.to_le_bytes());
            header[8..16].copy_from_slice(&9u64.to_le_bytes());
            stream.extend_from_slice(&header);
            stream.extend(std::iter::repeat_n(0xAB, length as usize));
        }
        stream
    }

    #[test]
    fn records_are_found_by_their_lengths() {
        let ranges = records(&stream());
        assert_eq!(ranges, vec![0..128, 128..261, 261..389]);
        // A cut one ends at the last whole record.
        assert_eq!(records(&stream()[..300]).len(), 2);
    }

    #[test]
    fn every_damage_changes_the_stream() {
        let good = stream();
        let mut rng = StdRng::seed_from_u64(7);
        for damage in DAMAGES {
            for _ in 0..50 {
                let mut damaged = good.clone();
                let what = apply(&mut damaged, damage, &mut rng);
                assert_ne!(damaged, good, "{damage:?}: {what}");
            }
        }
    }
}
