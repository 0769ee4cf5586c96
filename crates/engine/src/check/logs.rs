//! `check` of intent logs: every file system's log chain holds allocated space that no tree
//! references (zil/).
//!
//! # Theory
//! A head's object-set header names its log chain. Walking it as import's claim does
//! ([`crate::zil::chain::walk`]), a block counts as allocated in the synced space maps when its
//! allocation synced: born in a synced txg, or claimed (the header's claim txg synced). The
//! trailing pointer (the tail: allocated, never written) counts when born in a synced txg and
//! before any claim. Data blocks written in place (WR_INDIRECT) for records still to replay
//! count once the header's claim has synced. Blocks of a log are not verified against a checksum in their pointer (its
//! checksum field is a seed); the walk verifies each one's own.

use super::Walker;
use crate::block::blkptr::BlockPtr;
use crate::object::phys::ObjsetHeader;
use crate::types::Txg;
use crate::zil::{chain, claim, format};

impl Walker<'_> {
    /// Count the log chain of a head dataset whose object-set root is `root`.
    pub(super) fn walk_log(
        &mut self,
        name: &str,
        guid: u64,
        log_floor: Txg,
        root: &BlockPtr,
        synced: Txg,
    ) {
        if root.is_hole() {
            return;
        }
        let header = match self
            .io
            .read(root)
            .map_err(|error| error.to_string())
            .and_then(|data| ObjsetHeader::decode(&data).map_err(|error| error.to_string()))
        {
            Ok(header) => header.log,
            // walk_objset reports an unreadable header.
            Err(_) => return,
        };
        if header.is_empty() || claim::is_stale(&header, log_floor) {
            return;
        }
        let walked = chain::walk(self.io, guid, &header.first);
        let claim_txg = header.claim_txg;
        let claimed = claim_txg.0 != 0 && claim_txg <= synced;
        for (bp, _) in &walked.blocks {
            if bp.birth_logical <= synced || claimed {
                self.count_log_block(bp, &format!("{name} intent log"));
            }
        }
        // Data blocks written in place for records still to replay were claimed with them.
        if claimed {
            let replay = claim::pending_replay(header.clone(), walked.clone(), guid, synced, true);
            for bp in claim::written_in_place(&replay.records) {
                self.count_log_block(&bp, &format!("{name} intent log data written in place"));
            }
        }
        if let Some(trailing) = walked.trailing {
            let seed_guid = format::Seed::of(&trailing).guid;
            let before_claim = claim_txg.0 == 0 || trailing.birth_logical < claim_txg;
            if seed_guid == guid
                && trailing.birth_logical <= synced
                && before_claim
                && format::check_log_pointer(&trailing).is_ok()
            {
                self.count_log_block(&trailing, &format!("{name} intent log tail"));
            }
        }
    }

    fn count_log_block(&mut self, bp: &BlockPtr, what: &str) {
        self.report.blocks += 1;
        self.report.bytes_logical += bp.size_logical as u64;
        self.report.bytes_allocated += bp.size_allocated();
        self.claim(bp, what);
    }
}
