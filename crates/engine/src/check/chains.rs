//! A head and its snapshots, checked together (the deadlist half of `zdb -b` and `zdb -d`).
//!
//! The chain is walked oldest snapshot first. Each dataset's tree is walked whole for its
//! referenced bytes, but only blocks born after its previous snapshot are claimed and read
//! (the older ones were, with that snapshot): shared blocks are claimed once. Then:
//! - every block on a dataset's deadlist was claimed by an older snapshot of the chain, is
//!   born at or before the dataset's previous snapshot and after its entry's key, and is on no
//!   other deadlist (a block listed twice would be freed twice);
//! - each entry's header totals are its blocks';
//! - referenced(X) = referenced(previous) - deadlist(X) + born after previous (a dead block
//!   missing from the deadlist would be leaked by a destroy: this catches it);
//! - a snapshot's unique bytes are the blocks on the next dataset's deadlist born after the
//!   snapshot's own previous one; a head's are its blocks born after its newest snapshot.

use std::collections::HashSet;

use crate::dataset::deadlist::Deadlist;
use crate::dataset::phys::DatasetPhys;
use crate::object::bpobj::BpSpace;
use crate::object::ObjectSet;
use crate::pool::{PoolCore, PoolError};
use crate::types::{ObjectId, Txg};

use super::{block_key, ClaimedBlocks, NoLifecycle, Walker};

/// What the hierarchy check needs from a chain.
pub(super) struct Chain {
    /// Snapshot records of the chain.
    pub snapshots: Vec<ObjectId>,
    /// Bytes only the snapshots hold (every deadlist of the chain).
    pub snapshot_space: u64,
}

/// Longest chain followed (a loop on a damaged disk ends here).
const CHAIN_MAX: usize = 1 << 20;

pub(super) fn verify_chain(
    walker: &mut Walker,
    core: &PoolCore,
    head_object: ObjectId,
    head: DatasetPhys,
) -> Result<Chain, PoolError> {
    let mut error = |what: String| {
        walker
            .report
            .errors
            .push(format!("dataset {head_object}: {what}"))
    };
    // The chain, oldest first, ending with the head.
    let mut chain = vec![(head_object, head.clone())];
    let mut at = head.prev_snapshot_object;
    let mut next = head_object;
    while at.0 != 0 {
        if chain.len() > CHAIN_MAX {
            error("the snapshot chain does not end".into());
            break;
        }
        let snapshot = match core.mos.bonus(at).map(|bonus| DatasetPhys::decode(&bonus)) {
            Ok(Ok(snapshot)) => snapshot,
            Ok(Err(why)) => {
                error(format!("snapshot record {at}: {why}"));
                break;
            }
            Err(why) => {
                error(format!("snapshot object {at}: {why}"));
                break;
            }
        };
        if !snapshot.is_snapshot() || snapshot.next_snapshot_object != next {
            error(format!("snapshot record {at} is not linked to {next}"));
        }
        if snapshot.dir_object != head.dir_object {
            error(format!("snapshot record {at} names another directory"));
        }
        next = at;
        at = snapshot.prev_snapshot_object;
        chain.push((next, snapshot));
    }
    chain.reverse();

    let store = core.deadlist_store();
    let last = chain.len() - 1;
    let mut claimed = ClaimedBlocks::new();
    let mut listed: HashSet<(crate::types::VdevId, u64)> = HashSet::new();
    let mut snapshot_space = 0u64;
    let mut previous_referenced = 0u64;
    for index in 0..chain.len() {
        let (object, phys) = &chain[index];
        let name = if index == last {
            format!("dataset {object}")
        } else {
            format!("snapshot {object}")
        };
        let mut problem = |what: String| walker.report.errors.push(format!("{name}: {what}"));
        if index > 0 && phys.prev_snapshot_txg != chain[index - 1].1.creation_txg {
            problem(format!(
                "previous snapshot txg {} is not its previous snapshot's ({})",
                phys.prev_snapshot_txg,
                chain[index - 1].1.creation_txg
            ));
        }
        // The deadlist.
        let deadlist = match Deadlist::load(&store, phys.deadlist_object) {
            Ok(deadlist) => deadlist,
            Err(why) => {
                problem(format!("deadlist: {why}"));
                Deadlist::default()
            }
        };
        let mut dead = BpSpace::default();
        let mut unique_of_previous = 0u64;
        let previous_prev_txg = index
            .checked_sub(1)
            .map(|previous| chain[previous].1.prev_snapshot_txg);
        let mut per_entry: std::collections::BTreeMap<Txg, BpSpace> = Default::default();
        let walked = deadlist.visit(&store, &mut |key, bp| {
            dead.add(BpSpace::of(bp));
            per_entry.entry(key).or_default().add(BpSpace::of(bp));
            let block = block_key(bp);
            let mut wrong = Vec::new();
            if bp.birth_physical > phys.prev_snapshot_txg || bp.birth_physical <= key {
                wrong.push(format!(
                    "born in txg {}, outside entry {key} (previous snapshot txg {})",
                    bp.birth_physical, phys.prev_snapshot_txg
                ));
            }
            match claimed.get(&block) {
                Some(birth) if *birth == bp.birth_physical => {}
                _ => wrong.push("not held by any older snapshot".into()),
            }
            if !listed.insert(block) {
                wrong.push("on more than one deadlist (it would be freed twice)".into());
            }
            if previous_prev_txg.is_some_and(|txg| bp.birth_physical > txg) {
                unique_of_previous += bp.size_allocated();
            }
            for what in wrong {
                walker.report.errors.push(format!(
                    "{name}: deadlist block <{}:{:#x}>: {what}",
                    block.0, block.1
                ));
            }
            Ok(())
        });
        let mut problem = |what: String| walker.report.errors.push(format!("{name}: {what}"));
        if let Err(why) = walked {
            problem(format!("deadlist: {why}"));
        }
        for (key, entry) in deadlist.entries() {
            let counted = per_entry.get(&key).copied().unwrap_or_default();
            if entry.space.used_bytes != counted.used_bytes {
                problem(format!(
                    "deadlist entry {key} says {} bytes, its blocks hold {}",
                    entry.space.used_bytes, counted.used_bytes
                ));
            }
        }
        if index == 0 && !deadlist.is_empty() {
            problem("the oldest dataset of the chain has a non-empty deadlist".into());
        }
        if let Some(previous) = index.checked_sub(1) {
            let (previous_object, previous_phys) = &chain[previous];
            if previous_phys.unique_bytes != unique_of_previous {
                walker.report.errors.push(format!(
                    "snapshot {previous_object}: says {} unique bytes, the next deadlist holds {unique_of_previous}",
                    previous_phys.unique_bytes
                ));
            }
        }
        snapshot_space += dead.used_bytes;

        // The tree.
        if phys.root.is_hole() {
            previous_referenced = 0;
            continue;
        }
        let objset = match ObjectSet::open(
            core.io.clone(),
            &phys.root,
            std::sync::Arc::new(NoLifecycle),
            1,
        ) {
            Ok(objset) => objset,
            Err(why) => {
                // Its blocks cannot be walked (they will show as leaks); go on with the rest.
                walker
                    .report
                    .blocks_unreadable
                    .push(format!("{name} header: {why}"));
                continue;
            }
        };
        if objset.kind() != crate::object::phys::ObjsetKind::FileSystem {
            walker
                .report
                .errors
                .push(format!("{name}: object set is not a file system"));
        }
        let record = (index < last).then_some(&mut claimed);
        let (allocated, born_after) = walker.walk_objset(
            &phys.root,
            &objset,
            &name,
            if index == 0 {
                Txg(0)
            } else {
                phys.prev_snapshot_txg
            },
            record,
        )?;
        let mut problem = |what: String| walker.report.errors.push(format!("{name}: {what}"));
        if allocated != phys.referenced_bytes {
            problem(format!(
                "record says {} bytes referenced, its tree holds {allocated}",
                phys.referenced_bytes
            ));
        }
        if index > 0 && previous_referenced + born_after != phys.referenced_bytes + dead.used_bytes
        {
            problem(format!(
                "the previous snapshot's {previous_referenced} bytes, less {} on the deadlist, plus {born_after} born since, are not the {} referenced",
                dead.used_bytes, phys.referenced_bytes
            ));
        }
        if index == last && phys.unique_bytes != born_after {
            problem(format!(
                "says {} unique bytes, it holds {born_after} born after its newest snapshot",
                phys.unique_bytes
            ));
        }
        previous_referenced = phys.referenced_bytes;
    }
    Ok(Chain {
        snapshots: chain[..last].iter().map(|(object, _)| *object).collect(),
        snapshot_space,
    })
}
