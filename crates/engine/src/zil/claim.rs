//! Claiming a log at import (OpenZFS zil_claim, zil_check_log_chain).
//!
//! # Theory
//! After a crash the space maps know only allocations of synced txgs. A log block written
//! later (born after the newest synced txg) is free as far as the allocator knows, and the
//! first txg of the import could hand it out and overwrite it before replay: so before
//! anything allocates, every such block of every file system's chain is *claimed*: its range
//! leaves the free space in the import's first txg, and the header is rewritten in that txg
//! with the claim txg and the txg the tree was synced through. A second crash before replay
//! finds the header already claimed and claims nothing again (the claimed blocks are allocated
//! in the space maps by then). Blocks born in a synced txg are allocated already.
//!
//! What the chain's blocks will cost to free after replay: every valid block, and the trailing
//! pointer (the tail allocated and never written, or written and lost) when its allocation
//! synced before the claim, that is when it was born before the claim txg, and it is this set's.

use crate::block::blkptr::BlockPtr;
use crate::block::pipeline::BlockIo;
use crate::object::adapters::MosSpaceStorage;
use crate::object::ObjectSet;
use crate::types::Txg;

use super::chain::{self, WalkedChain};
use super::format::{self, LogHeader};
use super::record::{Record, RecordBody};
use super::PendingReplay;

/// What claiming found, for `tarn import`'s log and the tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimReport {
    pub blocks: usize,
    pub claimed: usize,
    pub records: usize,
    pub end: String,
}

/// Claim the chain of `objset` (a file system whose dataset guid is `guid`) in txg
/// `first_txg`, the import's first; `synced` is the txg of the uberblock imported. Returns
/// the replay to carry out, or `None` if the set has no log. The caller has not allocated
/// anything yet in `first_txg`.
pub fn claim(
    io: &BlockIo,
    mos: &ObjectSet,
    objset: &ObjectSet,
    guid: u64,
    log_floor: Txg,
    first_txg: Txg,
    synced: Txg,
) -> Result<Option<(PendingReplay, ClaimReport)>, String> {
    let mut header = objset.synced_log_header();
    if header.is_empty() {
        return Ok(None);
    }
    let mut walked = if is_stale(&header, log_floor) {
        WalkedChain {
            end: "a chain a rollback discarded".into(),
            ..WalkedChain::default()
        }
    } else {
        chain::walk(io, guid, &header.first)
    };
    let mut report = ClaimReport {
        blocks: walked.blocks.len(),
        ..ClaimReport::default()
    };
    if header.claim_txg.0 == 0 {
        let storage = MosSpaceStorage { mos };
        let mut keep = walked.blocks.len();
        'blocks: for (index, (bp, _)) in walked.blocks.iter().enumerate() {
            if bp.birth_logical <= synced {
                continue;
            }
            let claimed = claim_copies(io, &storage, bp, first_txg, "log block")?;
            if claimed < bp.copies().count() {
                // Not free: not a block this log wrote after the sync. End the chain before
                // it (the copies claimed so far stay allocated until freed with the chain
                // below).
                log::warn!("intent log: block {bp} is not free at claim; the chain ends there");
                keep = index;
                break 'blocks;
            }
            report.claimed += 1;
        }
        if keep < walked.blocks.len() {
            let cut = walked.blocks.split_off(keep);
            // A block whose copies were claimed in part: free those with the chain.
            walked.trailing = cut.first().map(|(bp, _)| bp.clone());
            walked.end = "a block that was not free at claim".into();
        }
        header = LogHeader {
            first: header.first,
            claim_txg: first_txg,
            claimed_through: objset.synced_root().birth_logical,
            replayed_through: 0,
        };
        objset.dirty_log(first_txg);
        report.blocks = walked.blocks.len();
        report.end = walked.end.clone();
        let mut replay = pending_replay(header, walked, guid, synced, false);
        claim_written_in_place(io, mos, &mut replay, first_txg, &mut report)?;
        report.records = replay.records.len();
        return Ok(Some((replay, report)));
    }
    report.blocks = walked.blocks.len();
    report.end = walked.end.clone();
    let replay = pending_replay(header, walked, guid, synced, true);
    report.records = replay.records.len();
    Ok(Some((replay, report)))
}

/// The data blocks that the records to replay name, written in place at commit
/// (WR_INDIRECT), each once. They were born in the records' txgs, which did not sync: claim
/// takes them from the allocator, and they are freed with the chain after replay.
pub fn written_in_place(records: &[Record]) -> Vec<BlockPtr> {
    let mut seen = std::collections::HashSet::new();
    records
        .iter()
        .filter_map(|record| match &record.body {
            RecordBody::WriteIndirect { bp, .. } if seen.insert(bp.dvas) => Some(bp.clone()),
            _ => None,
        })
        .collect()
}

/// Claim the blocks [`written_in_place`] by the records of `replay` in `first_txg`. One that
/// is not free was not written by this log after the sync (a damaged record): replay stops
/// before the first record naming it.
fn claim_written_in_place(
    io: &BlockIo,
    mos: &ObjectSet,
    replay: &mut PendingReplay,
    first_txg: Txg,
    report: &mut ClaimReport,
) -> Result<(), String> {
    let storage = MosSpaceStorage { mos };
    for bp in written_in_place(&replay.records) {
        let claimed = claim_copies(io, &storage, &bp, first_txg, "data block")?;
        if claimed == bp.copies().count() {
            replay.blocks.push((bp, first_txg));
            report.claimed += 1;
            continue;
        }
        log::warn!("intent log: data block {bp} is not free at claim; replay stops before it");
        for dva in bp.copies().take(claimed) {
            io.space
                .unalloc(dva.vdev, dva.offset, dva.size_allocated, first_txg)
                .map_err(|error| format!("giving back data block {bp}: {error}"))?;
        }
        let first_naming = replay.records.iter().position(|record| {
            matches!(&record.body, RecordBody::WriteIndirect { bp: named, .. } if named.dvas == bp.dvas)
        });
        // The blocks claimed so far are first named before it, so the kept records name
        // them all; the ones not looked at yet are named by no kept record.
        replay
            .records
            .truncate(first_naming.unwrap_or(replay.records.len()));
        break;
    }
    Ok(())
}

/// Claim the copies of `bp` in `first_txg`, in order, up to the first that is not free;
/// returns how many were claimed.
fn claim_copies(
    io: &BlockIo,
    storage: &MosSpaceStorage,
    bp: &BlockPtr,
    first_txg: Txg,
    what: &str,
) -> Result<usize, String> {
    let mut claimed = 0;
    for dva in bp.copies() {
        let free = io
            .space
            .claim(dva.vdev, dva.offset, dva.size_allocated, first_txg, storage)
            .map_err(|error| format!("claiming {what} {bp}: {error}"))?;
        if !free {
            break;
        }
        claimed += 1;
    }
    Ok(claimed)
}

/// Whether the header's chain is one a rollback discarded: the rollback's txg committed the
/// snapshot's header, whose chain started at or before the dataset's log floor.
pub fn is_stale(header: &LogHeader, log_floor: Txg) -> bool {
    log_floor.0 != 0 && !header.first.is_hole() && header.first.birth_logical <= log_floor
}

/// What replaying the walked chain of a claimed `header` applies and frees (`claimed_before`:
/// the claim was made by an earlier import, with the blocks written in place).
pub(crate) fn pending_replay(
    header: LogHeader,
    walked: WalkedChain,
    guid: u64,
    synced: Txg,
    claimed_before: bool,
) -> PendingReplay {
    let claim_txg = header.claim_txg;
    let mut blocks: Vec<(BlockPtr, Txg)> = Vec::new();
    let mut records = Vec::new();
    // Records of a commit whose last block has not been read yet: a commit is replayed whole
    // or not at all.
    let mut commit = Vec::new();
    for (bp, block) in walked.blocks {
        commit.extend(
            block
                .records
                .into_iter()
                .filter(|record| record.txg > header.claimed_through),
        );
        if !block.continues {
            records.append(&mut commit);
        }
        blocks.push((bp, claim_txg));
    }
    if let Some(trailing) = walked.trailing {
        let seed_guid = format::Seed::of(&trailing).guid;
        let allocated = trailing.birth_logical < claim_txg && trailing.birth_logical <= synced;
        if seed_guid == guid && allocated && format::check_log_pointer(&trailing).is_ok() {
            blocks.push((trailing, claim_txg));
        }
    }
    // A header claimed by an earlier import: the blocks written in place were claimed with
    // it (on a first claim, `claim_written_in_place` adds them as it claims them).
    if claimed_before {
        blocks.extend(
            written_in_place(&records)
                .into_iter()
                .map(|bp| (bp, claim_txg)),
        );
    }
    PendingReplay {
        header,
        records,
        blocks,
        keeps_progress: false,
    }
}
