//! A head and its snapshots, checked together (the deadlist half of `zdb -b` and `zdb -d`).
//!
//! The chain is walked oldest snapshot first; a clone's chain ends at its origin (a snapshot of
//! another file system, whose chain is checked first, so its blocks are claimed already). Each dataset's tree is walked whole for its
//! referenced bytes, but only blocks born after its previous snapshot are claimed and read
//! (the older ones were, with that snapshot): shared blocks are claimed once. Then:
//! - every block on a dataset's deadlist was claimed by an older snapshot of the chain, is
//!   born at or before the dataset's previous snapshot and after its entry's key, and is on no
//!   other deadlist (a block listed twice would be freed twice);
//! - each entry's header totals are its blocks';
//! - referenced(X) = referenced(previous) - deadlist(X) + born after previous (a dead block
//!   missing from the deadlist would be leaked by a destroy: this catches it);
//! - a snapshot's unique bytes are the blocks on the next dataset's deadlist born after the
//!   snapshot's own previous one; a head's are its blocks born after its newest snapshot;
//! - a clone's livelist (`dataset/livelist.rs`): every entry born after the origin and in its
//!   sub-list's range, every FREE cancelling an earlier ALLOC, each sub-list's header its
//!   entries' net totals, no block live twice, the live bytes the head's `usedbydataset`, and
//!   the live blocks exactly the head's blocks born after the origin.

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
    /// The head's live bytes not shared with an origin (`usedbydataset`).
    pub used_by_dataset: u64,
    /// Bytes only the snapshots hold: deadlist blocks born after the origin
    /// (`usedbysnapshots`).
    pub used_by_snapshots: u64,
}

/// Longest chain followed (a loop on a damaged disk ends here).
const CHAIN_MAX: usize = 1 << 20;

/// The clone origin of a head (its directory's origin snapshot object and txg; 0 for none).
pub(super) fn origin_of(core: &PoolCore, head: &DatasetPhys) -> (ObjectId, Txg) {
    core.mos
        .bonus(head.dir_object)
        .ok()
        .and_then(|bonus| crate::dataset::phys::DatasetDirPhys::decode(&bonus).ok())
        .map_or((ObjectId(0), Txg(0)), |dir| {
            (dir.origin_snapshot_object, dir.origin_txg)
        })
}

/// Verify one head's chain. `claimed` holds the blocks every snapshot walked so far claimed
/// (a clone's origin chain is walked before the clone's), `listed` every deadlist block seen.
pub(super) fn verify_chain(
    walker: &mut Walker,
    core: &PoolCore,
    head_object: ObjectId,
    head: DatasetPhys,
    claimed: &mut ClaimedBlocks,
    listed: &mut HashSet<(crate::types::VdevId, u64)>,
) -> Result<Chain, PoolError> {
    let (origin_object, origin_txg) = origin_of(core, &head);
    let io = &*core.io;
    // Unreadable blocks of the chain go into the error log under its head, or under the
    // snapshot that alone holds them (errlog.rs).
    walker.head_dataset = Some(head_object);
    walker.head_objset = core
        .dataset_list()
        .into_iter()
        .find(|(_, dataset)| dataset.object == head_object)
        .and_then(|(_, dataset)| dataset.try_objset());
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
    while at.0 != 0 && at != origin_object {
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
    let is_clone = origin_object.0 != 0;
    let origin_referenced = if is_clone {
        match core
            .mos
            .bonus(origin_object)
            .map(|bonus| DatasetPhys::decode(&bonus))
        {
            Ok(Ok(origin)) => {
                if origin.creation_txg != origin_txg || !origin.is_snapshot() {
                    walker.report.errors.push(format!(
                        "dataset {head_object}: origin {origin_object} is not the snapshot of txg {origin_txg}"
                    ));
                }
                origin.referenced_bytes
            }
            _ => {
                walker.report.errors.push(format!(
                    "dataset {head_object}: origin record {origin_object} cannot be read"
                ));
                0
            }
        }
    } else {
        0
    };
    let (mut dead_above, mut dead_below) = (0u64, 0u64);
    // The head's blocks born after the origin, for its livelist.
    let mut head_blocks = ClaimedBlocks::new();
    let has_livelist = head.livelist_object.0 != 0;
    let mut previous_referenced = origin_referenced;
    for index in 0..chain.len() {
        let (object, phys) = &chain[index];
        walker.walked_record = Some(*object);
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
            let used = io.dsize(bp);
            dead.add(BpSpace::of(bp, used));
            if bp.birth_physical > origin_txg {
                dead_above += used;
            } else {
                dead_below += used;
            }
            per_entry.entry(key).or_default().add(BpSpace::of(bp, used));
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
            // A clone's dead origin blocks are dropped, never freed, through its deadlists, and
            // the origin's own branch may list them too.
            if bp.birth_physical > origin_txg && !listed.insert(block) {
                wrong.push("on more than one deadlist (it would be freed twice)".into());
            }
            if previous_prev_txg.is_some_and(|txg| bp.birth_physical > txg) {
                unique_of_previous += used;
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
        match walked {
            Err(why) => problem(format!("deadlist: {why}")),
            // The header import trusts for the snapshots' space (feature deadlist_totals).
            Ok(()) => match deadlist.header() {
                Some(header) if header != dead => problem(format!(
                    "deadlist header says {} bytes ({} compressed, {} logical), its blocks hold {} ({}, {})",
                    header.used_bytes,
                    header.compressed_bytes,
                    header.uncompressed_bytes,
                    dead.used_bytes,
                    dead.compressed_bytes,
                    dead.uncompressed_bytes
                )),
                _ => {}
            },
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
        if index == 0 && !is_clone && !deadlist.is_empty() {
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
        let record = (index < last).then_some(&mut *claimed);
        let collect = (index == last && has_livelist).then_some((origin_txg, &mut head_blocks));
        let (allocated, born_after) = walker.walk_objset(
            &phys.root,
            &objset,
            &name,
            // 0 for the oldest of a chain that is not a clone's.
            phys.prev_snapshot_txg,
            record,
            collect,
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
    let used_by_dataset = (head.referenced_bytes + dead_below).saturating_sub(origin_referenced);
    if has_livelist {
        let mut error = |what: String| {
            walker
                .report
                .errors
                .push(format!("dataset {head_object}: livelist: {what}"))
        };
        if !is_clone {
            error("a file system that is not a clone keeps a livelist".into());
        }
        if let Err(why) = verify_livelist(
            core,
            head.livelist_object,
            origin_txg,
            used_by_dataset,
            &head_blocks,
            &mut error,
        ) {
            error(why.to_string());
        }
    }
    Ok(Chain {
        snapshots: chain[..last].iter().map(|(object, _)| *object).collect(),
        used_by_dataset,
        used_by_snapshots: dead_above,
    })
}

/// A clone's livelist against its head (see the module documentation). `exact`: the head's
/// blocks born after the origin.
fn verify_livelist(
    core: &PoolCore,
    object: ObjectId,
    origin_txg: Txg,
    used_by_dataset: u64,
    exact: &ClaimedBlocks,
    error: &mut dyn FnMut(String),
) -> Result<(), crate::object::ObjectError> {
    use crate::dataset::livelist::{cancel, Livelist};
    use crate::object::bpobj::BpObj;
    let store = core.deadlist_store();
    let io = &*core.io;
    let livelist = Livelist::load(&store, object)?;
    let mut live_bytes = 0u64;
    let mut live_blocks = 0u64;
    let mut seen = HashSet::new();
    for sub in livelist.sublists(&store)? {
        if sub.list.0 == 0 {
            continue;
        }
        let mut entries = Vec::new();
        BpObj::open(&store.lists(), sub.list)?.iterate(&mut |entry| {
            entries.push(entry.clone());
            Ok(())
        })?;
        let mut net = BpSpace::default();
        for entry in &entries {
            let birth = entry.bp.birth_physical;
            if birth <= origin_txg || birth <= sub.key || birth > sub.next_key {
                error(format!(
                    "sub-list {}: an entry born in txg {birth}, outside ({}, {}] or at or before the origin ({origin_txg})",
                    sub.key, sub.key, sub.next_key
                ));
            }
            let space = BpSpace::of(&entry.bp, io.dsize(&entry.bp));
            if entry.free {
                net.sub(space);
            } else {
                net.add(space);
            }
        }
        if net != sub.space {
            error(format!(
                "sub-list {}: header says {:?}, its entries net {:?}",
                sub.key, sub.space, net
            ));
        }
        let live = match cancel(sub.list, entries) {
            Ok(live) => live,
            Err(why) => {
                error(why.to_string());
                continue;
            }
        };
        for bp in live {
            live_bytes += io.dsize(&bp);
            live_blocks += 1;
            let block = block_key(&bp);
            if !seen.insert(block) {
                error(format!("block <{}:{:#x}> is live twice", block.0, block.1));
            }
            if exact.get(&block) != Some(&bp.birth_physical) {
                error(format!(
                    "live block <{}:{:#x}> born in txg {} is not in the clone's tree",
                    block.0, block.1, bp.birth_physical
                ));
            }
        }
    }
    if live_bytes != used_by_dataset {
        error(format!(
            "{live_bytes} live bytes, the clone's own blocks hold {used_by_dataset}"
        ));
    }
    if live_blocks != exact.len() as u64 {
        error(format!(
            "{live_blocks} live blocks, the clone's tree has {} born after the origin",
            exact.len()
        ));
    }
    Ok(())
}
