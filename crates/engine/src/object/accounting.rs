//! Usage by owner (OpenZFS dmu_objset_do_userquota_updates, the userused, groupused and
//! projectused objects): how many bytes and objects of a file system each user, group and
//! project owns, kept on disk in the object set and updated in each sync.
//!
//! # Where the usage lives
//! Three key/value objects, one per [`OwnerKind`], whose dnodes sit in the object-set header
//! after its first kilobyte (`phys.rs`, flag `OBJSET_FLAG_OWNER_ACCOUNTING`), not in the
//! meta-dnode: they are addressed by the numbers [`USER_USAGE_OBJECT`], [`GROUP_USAGE_OBJECT`]
//! and [`PROJECT_USAGE_OBJECT`] (the last three of the number space, as OpenZFS's -1, -2, -3),
//! which no ordinary object can have. So a send never carries them and a receive never
//! collides with them: each side counts what its own syncs write. They are in the object
//! set's tree, so a snapshot keeps the usage as it was and a rollback or clone gets it back.
//! Each entry is keyed by the owner's ID in decimal and holds the bytes (u64) and objects
//! (u64) charged to it, little-endian; an owner with nothing is removed.
//!
//! # What is charged
//! An object is charged to the owners its bonus buffer names ([`OwnerOf`], a file system's
//! znode): `size_allocated` bytes (what its tree holds on disk, every copy, after
//! compression: what `stat` reports as `st_blocks` and `du` sums) and one object. Objects
//! that are no node (the master node, unlinked set, xattr entries) are charged to no one.
//!
//! # The sync
//! [`ObjectSet::sync`] compares each object it writes before and after (owners and allocated
//! bytes) and hands the differences to [`ObjectSet::sync_owner_usage`], which applies them to
//! the three objects in the same txg and writes those too, before the header. An object set
//! that had no usage objects when it was told to keep them (a file system made before the
//! feature) first counts every object of its synced tree, once. Nothing is charged in open
//! context: the usage on disk is always exactly what the synced tree holds.
//!
//! # In memory, for quotas
//! Quotas ask for an owner's usage on every admitted write, so the synced totals are kept in
//! memory once asked for ([`ObjectSet::owner_usage`]; loaded from the synced objects, and
//! from then on moved by each sync's differences when the sync is installed), with, per open
//! txg, what admission has charged to each owner since ([`ObjectSet::admit_owner_charge`]).
//! Both change under the set's lock in `sync_done`, so the charge of a txg leaves the pending
//! figures at the instant its usage enters the synced ones: a check never counts it twice or
//! not at all. The two sit in one entry per owner ([`OwnerLedger`]), so that a write's check
//! and charge of an owner is one lookup.
//!
//! # Trust
//! The objects are read from disk: an entry of the wrong size is corruption, and a sync that
//! would take an owner below zero (a damaged entry) clamps it at zero and logs it, rather
//! than failing the txg; `check` recounts the usage from the tree (`check/`). Usage that
//! cannot be read (no good copy of a block) is an error for whoever asks for it, logged once
//! per synced state; meanwhile quotas by owner admit every write (as zfs_id_overquota
//! counts an owner it cannot look up as within its quota: damaged accounting must not stop
//! the file system). The next sync that changes the usage counts it again from the tree into
//! new objects, which replace the damaged ones, when freeing those reads no damaged block
//! (their data blocks need no reading; an indirect block does): else the damage stays,
//! logged, rather than leak the blocks under it.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::block::blkptr::{ChecksumType, Compression, ObjectType};
use crate::block::pipeline::{BlockIo, SyncPoint};
use crate::space::storage::SpaceStorage;
use crate::txg::Tx;
use crate::types::{FastHashMap, ObjectId, Txg, TXG_SIZE};

use super::dirty::ObjectDirty;
use super::kv::{self, KvBlocks, KvError};
use super::owners::{OwnerKind, OwnerOf, Owners};
use super::phys::{DnodePhys, DNODE_SIZE};
use super::{tree, ObjectError, ObjectSet};

/// The object numbers of the usage objects (the last three; no ordinary object reaches them).
pub const USER_USAGE_OBJECT: ObjectId = ObjectId(u64::MAX);
pub const GROUP_USAGE_OBJECT: ObjectId = ObjectId(u64::MAX - 1);
pub const PROJECT_USAGE_OBJECT: ObjectId = ObjectId(u64::MAX - 2);

/// Block size of a usage object (a directory's, by default).
const USAGE_BLOCK_SIZE: u32 = 16 << 10;
/// Bytes of a usage entry's value: bytes then objects.
const USAGE_VALUE_SIZE: usize = 16;
/// Entries read per listing call when usage is loaded.
const LIST_BATCH: usize = 1024;

/// The usage object of owners of kind `kind`.
pub fn usage_object(kind: OwnerKind) -> ObjectId {
    match kind {
        OwnerKind::User => USER_USAGE_OBJECT,
        OwnerKind::Group => GROUP_USAGE_OBJECT,
        OwnerKind::Project => PROJECT_USAGE_OBJECT,
    }
}

/// Where `object`'s dnode sits among the header's usage dnodes (user, group, project), if it
/// is a usage object.
pub(super) fn usage_slot(object: ObjectId) -> Option<usize> {
    match object {
        USER_USAGE_OBJECT => Some(0),
        GROUP_USAGE_OBJECT => Some(1),
        PROJECT_USAGE_OBJECT => Some(2),
        _ => None,
    }
}

/// Whether `object` is one of the usage objects.
pub fn is_usage_object(object: ObjectId) -> bool {
    usage_slot(object).is_some()
}

/// What one owner is charged: bytes and objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnerUsage {
    pub bytes: u64,
    pub objects: u64,
}

/// An owner: its kind and ID.
pub type OwnerKey = (OwnerKind, u32);

/// Changes of usage by owner (bytes, objects), signed.
pub(super) type UsageDeltas = FastHashMap<OwnerKey, (i64, i64)>;

/// Synced usage by owner.
pub type UsageTotals = FastHashMap<OwnerKey, OwnerUsage>;

/// Usage by owner in memory (see "In memory, for quotas"): per owner, its synced usage (once
/// loaded) and what admission has charged it in each txg that can be in flight, in one entry,
/// so that a write finds an owner's usage and takes its charge with one lookup. A pending
/// slot of a txg that has synced counts for nothing, whether or not it has been cleared yet.
#[derive(Default)]
pub(super) struct OwnerLedger {
    /// Whether the `synced` figures are the synced tree's (loaded from it, and moved by each
    /// sync since); while not, they are zero.
    loaded: bool,
    by_owner: FastHashMap<OwnerKey, LedgerEntry>,
    /// The synced usage of this accounting generation could not be read (damage): why. It
    /// is not read again until a sync or rollback installs another.
    unreadable: Option<(u64, String)>,
}

#[derive(Clone, Copy, Default)]
struct LedgerEntry {
    synced: OwnerUsage,
    pending: [(Txg, OwnerUsage); TXG_SIZE],
}

impl LedgerEntry {
    /// Synced usage plus what is charged in txgs after `last_synced`.
    fn now(&self, last_synced: Txg) -> OwnerUsage {
        let mut usage = self.synced;
        for (txg, charged) in &self.pending {
            if *txg > last_synced {
                usage.bytes = usage.bytes.saturating_add(charged.bytes);
                usage.objects = usage.objects.saturating_add(charged.objects);
            }
        }
        usage
    }

    /// Charge `usage` in `txg`, or take it back (`add` false). `txg` is after the last
    /// synced one, and at most `TXG_CONCURRENT_STATES` txgs are: a slot still holding
    /// another txg holds a synced one.
    fn charge(&mut self, txg: Txg, usage: OwnerUsage, add: bool) {
        let slot = &mut self.pending[txg.slot()];
        if slot.0 != txg {
            *slot = (txg, OwnerUsage::default());
        }
        let apply = |value: &mut u64, by: u64| {
            *value = if add {
                value.saturating_add(by)
            } else {
                value.saturating_sub(by)
            }
        };
        apply(&mut slot.1.bytes, usage.bytes);
        apply(&mut slot.1.objects, usage.objects);
    }

    /// Whether the entry holds nothing once `last_synced` has synced.
    fn is_empty(&self, last_synced: Txg) -> bool {
        self.synced == OwnerUsage::default()
            && self
                .pending
                .iter()
                .all(|&(txg, charged)| txg <= last_synced || charged == OwnerUsage::default())
    }
}

impl OwnerLedger {
    pub(super) fn loaded(&self) -> bool {
        self.loaded
    }

    /// Take `totals` as the synced usage.
    fn install(&mut self, totals: UsageTotals) {
        debug_assert!(!self.loaded);
        for (key, usage) in totals {
            self.by_owner.entry(key).or_default().synced = usage;
        }
        self.loaded = true;
    }

    /// The synced usage changed other than by a sync's differences (its first count, a
    /// rollback): forget it until it is loaded again. Pending charges stay.
    pub(super) fn forget_synced(&mut self, last_synced: Txg) {
        self.loaded = false;
        for entry in self.by_owner.values_mut() {
            entry.synced = OwnerUsage::default();
        }
        self.by_owner
            .retain(|_, entry| !entry.is_empty(last_synced));
    }

    /// Drop every pending charge (the changes they were for are discarded).
    pub(super) fn clear_pending(&mut self) {
        for entry in self.by_owner.values_mut() {
            entry.pending = Default::default();
        }
    }

    /// `txg` has synced, with the differences `deltas`, or having rebuilt the usage (which is
    /// forgotten then): its usage enters the synced figures as its charges, and those of
    /// every txg before it, leave the pending ones (by `last_synced`, which the caller has
    /// moved). The caller holds the set's lock, so no check sees the one without the other.
    pub(super) fn synced(&mut self, txg: Txg, rebuilt: bool, deltas: &UsageDeltas) {
        // Only the owners the txg changed are looked at (not every owner, each txg): an
        // entry left with only synced charges stays until its owner's usage next changes.
        if rebuilt {
            self.forget_synced(txg);
        } else if self.loaded {
            for (key, &delta) in deltas {
                let entry = self.by_owner.entry(*key).or_default();
                entry.synced = apply_delta(entry.synced, delta).0;
                if entry.is_empty(txg) {
                    self.by_owner.remove(key);
                }
            }
        }
    }

    /// The usage of `key` now (synced, plus what admission has charged since).
    fn usage_now(&self, key: OwnerKey, last_synced: Txg) -> OwnerUsage {
        self.by_owner
            .get(&key)
            .map_or_else(OwnerUsage::default, |entry| entry.now(last_synced))
    }

    /// The synced usage of every owner of `kind` that has some, by ID.
    fn synced_of_kind(&self, kind: OwnerKind) -> BTreeMap<u32, OwnerUsage> {
        self.by_owner
            .iter()
            .filter(|((of_kind, _), entry)| {
                *of_kind == kind && entry.synced != OwnerUsage::default()
            })
            .map(|(&(_, id), entry)| (id, entry.synced))
            .collect()
    }
}

/// Add an object's charge (`sign` 1) or take it back (`sign` -1).
fn add_charge(deltas: &mut UsageDeltas, charge: Option<(Owners, u64)>, sign: i64) {
    let Some((owners, bytes)) = charge else {
        return;
    };
    let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
    for kind in OwnerKind::ALL {
        let entry = deltas.entry((kind, owners.id(kind))).or_default();
        entry.0 = entry.0.saturating_add(sign.saturating_mul(bytes));
        entry.1 += sign;
    }
}

/// What `dnode` is charged to whom (None: a free slot or an object no one owns).
pub fn charge_of(owner_of: OwnerOf, dnode: &DnodePhys) -> Option<(Owners, u64)> {
    if dnode.is_free() {
        return None;
    }
    owner_of(&dnode.bonus).map(|owners| (owners, dnode.size_allocated))
}

/// The differences a sync makes, from each object's charge before and after it.
pub(super) fn usage_deltas(
    changes: impl IntoIterator<Item = (Option<(Owners, u64)>, Option<(Owners, u64)>)>,
) -> UsageDeltas {
    let mut deltas = UsageDeltas::default();
    for (before, after) in changes {
        if before == after {
            continue;
        }
        add_charge(&mut deltas, before, -1);
        add_charge(&mut deltas, after, 1);
    }
    deltas.retain(|_, &mut (bytes, objects)| bytes != 0 || objects != 0);
    deltas
}

fn apply_delta(usage: OwnerUsage, (bytes, objects): (i64, i64)) -> (OwnerUsage, bool) {
    let new_bytes = usage.bytes as i128 + bytes as i128;
    let new_objects = usage.objects as i128 + objects as i128;
    let clamped = new_bytes < 0 || new_objects < 0;
    (
        OwnerUsage {
            bytes: new_bytes.clamp(0, u64::MAX as i128) as u64,
            objects: new_objects.clamp(0, u64::MAX as i128) as u64,
        },
        clamped,
    )
}

fn encode_usage(usage: OwnerUsage) -> [u8; USAGE_VALUE_SIZE] {
    let mut value = [0u8; USAGE_VALUE_SIZE];
    value[..8].copy_from_slice(&usage.bytes.to_le_bytes());
    value[8..].copy_from_slice(&usage.objects.to_le_bytes());
    value
}

fn decode_entry(
    kind: OwnerKind,
    key: &[u8],
    value: &[u8],
) -> Result<(u32, OwnerUsage), ObjectError> {
    let id = std::str::from_utf8(key)
        .ok()
        .and_then(|text| text.parse::<u32>().ok())
        .filter(|id| key == id.to_string().as_bytes());
    let (Some(id), Ok(value)) = (id, <[u8; USAGE_VALUE_SIZE]>::try_from(value)) else {
        return Err(ObjectError::Corrupt(format!(
            "{} usage entry with a key of {} bytes and a value of {} bytes",
            kind.word(),
            key.len(),
            value.len()
        )));
    };
    Ok((
        id,
        OwnerUsage {
            bytes: u64::from_le_bytes(value[..8].try_into().expect("8")),
            objects: u64::from_le_bytes(value[8..].try_into().expect("8")),
        },
    ))
}

fn kv_corrupt(kind: OwnerKind) -> impl Fn(KvError) -> ObjectError {
    move |error| ObjectError::Corrupt(format!("{} usage object: {error}", kind.word()))
}

/// A usage object of a synced tree, read through its dnode (read only).
struct SyncedKv<'a> {
    io: &'a BlockIo,
    dnode: &'a DnodePhys,
}

impl KvBlocks for SyncedKv<'_> {
    fn block_size(&self) -> usize {
        self.dnode.data_block_size as usize
    }

    fn read_block(&self, blkid: u64) -> Result<Option<Arc<Vec<u8>>>, KvError> {
        if blkid > self.dnode.max_blkid {
            return Ok(None);
        }
        let storage = |error: ObjectError| KvError::Storage(error.to_string());
        let bp = tree::lookup_block(self.io, self.dnode, blkid).map_err(storage)?;
        if bp.is_hole() {
            return Ok(None);
        }
        Ok(Some(
            self.io.read(&bp).map_err(|error| storage(error.into()))?,
        ))
    }

    fn write_block(&mut self, _blkid: u64, _data: Arc<Vec<u8>>) -> Result<(), KvError> {
        Err(KvError::Storage(
            "a synced usage object is read only".into(),
        ))
    }

    fn free_block(&mut self, _blkid: u64) -> Result<(), KvError> {
        Err(KvError::Storage(
            "a synced usage object is read only".into(),
        ))
    }
}

/// Every entry of the usage object `dnode` of kind `kind`.
fn read_usage(
    io: &BlockIo,
    kind: OwnerKind,
    dnode: &DnodePhys,
    into: &mut UsageTotals,
) -> Result<(), ObjectError> {
    let blocks = SyncedKv { io, dnode };
    let mut cookie = 0;
    loop {
        let entries = kv::list(&blocks, cookie, LIST_BATCH).map_err(kv_corrupt(kind))?;
        let Some(last) = entries.last() else {
            return Ok(());
        };
        cookie = last.cookie + 1;
        for entry in &entries {
            let (id, usage) = decode_entry(kind, &entry.key, &entry.value)?;
            into.insert((kind, id), usage);
        }
    }
}

impl ObjectSet {
    /// Keep usage by owner, charging objects to the owners `owner_of` finds in their bonus
    /// buffers (None: stop keeping it; the objects already on disk stay as they are). The
    /// pool sets it on file systems while feature `user_accounting` is enabled; an object set
    /// without usage objects counts its objects in its next sync.
    pub fn set_owner_accounting(&self, owner_of: Option<OwnerOf>) {
        *self.owner_of.lock() = owner_of;
    }

    /// The hook, if usage by owner is kept.
    pub(super) fn owner_of(&self) -> Option<OwnerOf> {
        *self.owner_of.lock()
    }

    /// Whether the set keeps usage by owner (the pool's feature is enabled for it).
    pub fn keeps_owner_usage(&self) -> bool {
        self.owner_of().is_some() && self.kind == super::phys::ObjsetKind::FileSystem
    }

    /// Whether the synced tree carries usage by owner.
    pub fn has_owner_usage(&self) -> bool {
        self.state.lock().synced_accounting.is_some()
    }

    /// The owners `object` is charged to now (its current bonus buffer), if usage by owner is
    /// kept and the object is owned.
    pub fn owners_of(&self, object: ObjectId) -> Result<Option<Owners>, ObjectError> {
        let Some(owner_of) = self.owner_of() else {
            return Ok(None);
        };
        let dnode = self.current_dnode(object)?;
        Ok(charge_of(owner_of, &dnode).map(|(owners, _)| owners))
    }

    /// The synced usage of owner `key`, plus what admission has charged to it in txgs not
    /// yet synced; None if the synced tree keeps no usage by owner.
    pub fn owner_usage(&self, key: OwnerKey) -> Result<Option<OwnerUsage>, ObjectError> {
        if !self.owner_totals_loaded()? {
            return Ok(None);
        }
        let state = self.state.lock();
        Ok(Some(state.owner_ledger.usage_now(key, state.last_synced)))
    }

    /// Every owner of kind `kind` with synced usage, by ID; None if the synced tree keeps no
    /// usage by owner.
    pub fn owner_usage_all(
        &self,
        kind: OwnerKind,
    ) -> Result<Option<BTreeMap<u32, OwnerUsage>>, ObjectError> {
        if !self.owner_totals_loaded()? {
            return Ok(None);
        }
        Ok(Some(self.state.lock().owner_ledger.synced_of_kind(kind)))
    }

    /// Charge `bytes` and `objects` to the owners of `kinds` among `owners` in `txg` if
    /// `admit` (asked for each of `kinds` in order, until it says no) allows it, given
    /// each owner's usage (synced plus pending, this charge not included); atomically, so
    /// two writers of one owner cannot both pass a check the sum of their charges fails.
    /// Returns `admit`'s answer; true, and no charge made, without usage by owner or when
    /// it cannot be read (as zfs_id_overquota, which counts an owner whose usage it cannot
    /// look up as within its quota: damage to the usage must not stop the file system).
    pub fn admit_owner_charge(
        &self,
        txg: Txg,
        owners: Owners,
        kinds: &[OwnerKind],
        charge: OwnerUsage,
        admit: &mut dyn FnMut(OwnerKey, OwnerUsage) -> bool,
    ) -> Result<bool, ObjectError> {
        let mut state = self.state.lock();
        if !state.owner_ledger.loaded() {
            drop(state);
            // Unreadable usage was logged when it was found.
            if !self.owner_totals_loaded().unwrap_or(false) {
                return Ok(true);
            }
            state = self.state.lock();
        }
        // Each owner is checked and charged with one lookup; a refusal takes back the
        // charges made for the owners before it (all under the lock: no one saw them).
        let last_synced = state.last_synced;
        let chargeable = txg > last_synced;
        let ledger = &mut state.owner_ledger.by_owner;
        for (index, &kind) in kinds.iter().enumerate() {
            let key = (kind, owners.id(kind));
            let entry = ledger.entry(key).or_default();
            if !admit(key, entry.now(last_synced)) {
                if chargeable {
                    for &earlier in &kinds[..index] {
                        if let Some(entry) = ledger.get_mut(&(earlier, owners.id(earlier))) {
                            entry.charge(txg, charge, false);
                        }
                    }
                }
                return Ok(false);
            }
            if chargeable {
                entry.charge(txg, charge, true);
            }
        }
        Ok(true)
    }

    /// The usage by owner as the synced usage objects hold it, read from disk (for `check`);
    /// None if the synced tree keeps none.
    pub fn synced_owner_usage(&self) -> Result<Option<UsageTotals>, ObjectError> {
        let Some(dnodes) = self.state.lock().synced_accounting.clone() else {
            return Ok(None);
        };
        let mut totals = UsageTotals::default();
        for (kind, dnode) in OwnerKind::ALL.into_iter().zip(dnodes.iter()) {
            read_usage(&self.io, kind, dnode, &mut totals)?;
        }
        Ok(Some(totals))
    }

    /// Load the synced totals into memory if they are not (module documentation); false if
    /// the synced tree keeps no usage by owner. Usage that cannot be read (every copy of a
    /// block damaged) is an error, logged once and not read again until a sync or rollback
    /// installs other usage objects.
    fn owner_totals_loaded(&self) -> Result<bool, ObjectError> {
        loop {
            let (generation, dnodes) = {
                let state = self.state.lock();
                if state.owner_ledger.loaded() {
                    return Ok(true);
                }
                if let Some((generation, why)) = &state.owner_ledger.unreadable {
                    if *generation == state.accounting_generation {
                        return Err(ObjectError::Corrupt(why.clone()));
                    }
                }
                match &state.synced_accounting {
                    Some(dnodes) => (state.accounting_generation, dnodes.clone()),
                    None => return Ok(false),
                }
            };
            let mut totals = UsageTotals::default();
            let read = OwnerKind::ALL
                .into_iter()
                .zip(dnodes.iter())
                .try_for_each(|(kind, dnode)| read_usage(&self.io, kind, dnode, &mut totals));
            if let Err(error) = read {
                let why = format!("usage by owner cannot be read: {error}");
                log::error!(
                    "{why}; quotas by user, group and project admit every write until a sync \
                     rewrites it, and `check` reports it"
                );
                let mut state = self.state.lock();
                if state.accounting_generation == generation {
                    state.owner_ledger.unreadable = Some((generation, why.clone()));
                }
                return Err(ObjectError::Corrupt(why));
            }
            let mut state = self.state.lock();
            // Another reader loaded it meanwhile, and syncs may have moved it since: what
            // was read here is older.
            if state.owner_ledger.loaded() {
                return Ok(true);
            }
            // A sync installed (or a rollback replaced) the usage meanwhile: read it again.
            if state.accounting_generation == generation {
                state.owner_ledger.install(totals);
                return Ok(true);
            }
        }
    }

    /// Count every object of the synced tree (the state before the txg being synced), for an
    /// object set that starts keeping usage by owner.
    fn count_synced_owners(&self, owner_of: OwnerOf) -> Result<UsageTotals, ObjectError> {
        let meta = self.synced_meta_dnode();
        let per_block = (meta.data_block_size as usize / DNODE_SIZE).max(1);
        let mut deltas = UsageDeltas::default();
        if !self.synced_root().is_hole() {
            for blkid in 0..=meta.max_blkid {
                let bp = tree::lookup_block(&self.io, &meta, blkid)?;
                if bp.is_hole() {
                    continue;
                }
                let block = self.io.read(&bp)?;
                for slot in 0..per_block {
                    if blkid == 0 && slot == 0 {
                        continue;
                    }
                    let Some(bytes) = block.get(slot * DNODE_SIZE..(slot + 1) * DNODE_SIZE) else {
                        break;
                    };
                    let dnode = DnodePhys::decode(bytes)?;
                    add_charge(&mut deltas, charge_of(owner_of, &dnode), 1);
                }
            }
        }
        Ok(deltas
            .into_iter()
            .map(|(key, delta)| (key, apply_delta(OwnerUsage::default(), delta).0))
            .collect())
    }

    /// Apply a sync pass's usage differences to the usage objects and write them, in the
    /// same txg (module documentation). Creates and fills the objects when the tree has none.
    /// A usage object that cannot be read or changed (damage) is logged and left as it is,
    /// never failing the txg: `check` reports the difference; the totals in memory are read
    /// again from what was written.
    pub(super) fn sync_owner_usage(
        &self,
        owner_of: OwnerOf,
        deltas: UsageDeltas,
        at: SyncPoint,
        storage: &dyn SpaceStorage,
    ) -> Result<(), ObjectError> {
        let exists = self
            .state
            .lock()
            .syncing
            .as_ref()
            .expect("syncing")
            .accounting
            .is_some();
        if exists && deltas.is_empty() {
            return Ok(());
        }
        let tx = Tx::syncing(at.txg);
        let mut written = self.write_owner_usage(owner_of, &deltas, exists, &tx);
        let mut recounted = false;
        if let Err(error) = &written {
            // Damage: count the usage again from the tree into new objects, which replace
            // the damaged ones (their blocks freed), when freeing them reads nothing
            // damaged.
            if exists && self.usage_objects_freeable() {
                log::warn!(
                    "usage by owner cannot be updated in txg {} ({error}): counting it again \
                     from the file system's objects",
                    at.txg
                );
                written = self.write_owner_usage(owner_of, &deltas, false, &tx);
                recounted = written.is_ok();
            }
        }
        self.sync_usage_objects(at, storage)?;
        let mut state = self.state.lock();
        let syncing = state.syncing.as_mut().expect("syncing");
        match written {
            Ok(()) if exists && !recounted => {
                for (key, delta) in deltas {
                    let entry = syncing.owner_deltas.entry(key).or_default();
                    entry.0 = entry.0.saturating_add(delta.0);
                    entry.1 = entry.1.saturating_add(delta.1);
                }
            }
            Ok(()) => syncing.accounting_rebuilt = true,
            Err(error) => {
                log::error!(
                    "usage by owner not updated in txg {}: {error}; `check` reports the \
                     difference",
                    at.txg
                );
                syncing.accounting_rebuilt = true;
            }
        }
        Ok(())
    }

    /// Whether the usage objects' blocks can be freed without reading a damaged block: the
    /// data blocks need no reading, so only their indirect blocks (an object of more than one
    /// level) are read. Three levels, which no usage object reaches, are not tried.
    fn usage_objects_freeable(&self) -> bool {
        OwnerKind::ALL
            .into_iter()
            .all(|kind| match self.tree_dnode(usage_object(kind)) {
                Ok(dnode) if dnode.is_free() || dnode.levels <= 1 => true,
                Ok(dnode) if dnode.levels == 2 => {
                    dnode.blkptr.is_hole() || self.io.read(&dnode.blkptr).is_ok()
                }
                _ => false,
            })
    }

    /// The changes of [`ObjectSet::sync_owner_usage`] to the usage objects (made first if
    /// the tree has none, or again, counted from the tree: `exists` false).
    fn write_owner_usage(
        &self,
        owner_of: OwnerOf,
        deltas: &UsageDeltas,
        exists: bool,
        tx: &Tx,
    ) -> Result<(), ObjectError> {
        let mut changes: BTreeMap<OwnerKey, Option<OwnerUsage>> = BTreeMap::new();
        if exists {
            for (&key, &delta) in deltas {
                let current = self.usage_entry(tx, key)?;
                let (usage, clamped) = apply_delta(current.unwrap_or_default(), delta);
                if clamped {
                    log::warn!(
                        "{} {} would be charged below zero (bytes {:+}, objects {:+} on {:?}): \
                         the usage object is damaged; `check` recounts it",
                        key.0.word(),
                        key.1,
                        delta.0,
                        delta.1,
                        current
                    );
                }
                changes.insert(key, (usage != OwnerUsage::default()).then_some(usage));
            }
        } else {
            let mut totals = self.count_synced_owners(owner_of)?;
            for (key, delta) in deltas {
                let (usage, _) = apply_delta(totals.get(key).copied().unwrap_or_default(), *delta);
                totals.insert(*key, usage);
            }
            self.create_usage_objects(tx)?;
            for (key, usage) in totals {
                if usage != OwnerUsage::default() {
                    changes.insert(key, Some(usage));
                }
            }
        }
        for kind in OwnerKind::ALL {
            let mut blocks = super::adapters::KvObject::new(self, usage_object(kind), Some(*tx))?;
            for (&(_, id), usage) in changes.range((kind, 0)..=(kind, u32::MAX)) {
                let key = id.to_string();
                match usage {
                    Some(usage) => {
                        kv::upsert(&mut blocks, key.as_bytes(), &encode_usage(*usage))
                            .map_err(kv_corrupt(kind))?;
                    }
                    None => {
                        kv::remove(&mut blocks, key.as_bytes()).map_err(kv_corrupt(kind))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The usage entry of `key` as the txg being synced has it.
    fn usage_entry(&self, tx: &Tx, key: OwnerKey) -> Result<Option<OwnerUsage>, ObjectError> {
        let blocks = super::adapters::KvObject::new(self, usage_object(key.0), Some(*tx))?;
        kv::lookup(&blocks, key.1.to_string().as_bytes())
            .map_err(kv_corrupt(key.0))?
            .map(|value| decode_entry(key.0, key.1.to_string().as_bytes(), &value).map(|(_, u)| u))
            .transpose()
    }

    /// Make the three usage objects, empty, in `tx` (syncing context).
    fn create_usage_objects(&self, tx: &Tx) -> Result<(), ObjectError> {
        for kind in OwnerKind::ALL {
            let object = usage_object(kind);
            let dnode = DnodePhys {
                object_type: ObjectType::KeyValue,
                indirect_block_shift: self.io.tunables.indirect_block_shift as u8,
                levels: 1,
                bonus_type: ObjectType::None,
                checksum: ChecksumType::Fletcher4,
                compression: Compression::Lz4,
                data_block_size: USAGE_BLOCK_SIZE,
                copies: self.copies(),
                max_blkid: 0,
                size_allocated: 0,
                generation: tx.txg,
                blkptr: crate::block::blkptr::BlockPtr::hole(tx.txg, ObjectType::KeyValue, 0),
                bonus: Vec::new(),
                spill: None,
            };
            *self.state.lock().record(tx.txg, object) = ObjectDirty {
                create: Some(dnode),
                ..ObjectDirty::default()
            };
            let mut blocks = super::adapters::KvObject::new(self, object, Some(*tx))?;
            kv::create(&mut blocks).map_err(kv_corrupt(kind))?;
        }
        Ok(())
    }

    /// Write the usage objects' changes of this txg into their trees; their dnodes go to the
    /// header, not the meta-dnode.
    fn sync_usage_objects(
        &self,
        at: SyncPoint,
        storage: &dyn SpaceStorage,
    ) -> Result<(), ObjectError> {
        for kind in OwnerKind::ALL {
            let object = usage_object(kind);
            let record = {
                let mut state = self.state.lock();
                match state.dirty.get_mut(&at.txg) {
                    Some(dirty) => dirty.objects.remove(&object),
                    None => None,
                }
            };
            let Some(record) = record else {
                continue;
            };
            let base = self.tree_dnode(object)?;
            let dnode =
                self.sync_object(object, base, &record, &Default::default(), at, storage)?;
            let mut state = self.state.lock();
            let syncing = state.syncing.as_mut().expect("syncing");
            let slot = usage_slot(object).expect("a usage object");
            let accounting = syncing.accounting.get_or_insert_with(|| {
                Box::new([DnodePhys::free(), DnodePhys::free(), DnodePhys::free()])
            });
            accounting[slot] = dnode.clone();
            syncing.dnodes.insert(object, dnode);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(user: u32, group: u32, project: u32) -> Owners {
        Owners {
            user,
            group,
            project,
        }
    }

    fn usage(bytes: u64, objects: u64) -> OwnerUsage {
        OwnerUsage { bytes, objects }
    }

    #[test]
    fn the_ledger_counts_a_charge_until_its_txg_syncs_and_its_usage_with_it() {
        let key = (OwnerKind::User, 1000);
        let mut ledger = OwnerLedger::default();
        ledger.install(UsageTotals::from_iter([(key, usage(100, 1))]));
        let entry = ledger.by_owner.get_mut(&key).unwrap();
        entry.charge(Txg(5), usage(10, 0), true);
        entry.charge(Txg(6), usage(20, 1), true);
        entry.charge(Txg(6), usage(5, 0), false);
        assert_eq!(ledger.usage_now(key, Txg(4)), usage(125, 2));
        // Txg 5 synced with its usage: its charge leaves as the usage enters.
        let deltas = UsageDeltas::from_iter([(key, (8, 0))]);
        ledger.synced(Txg(5), false, &deltas);
        assert_eq!(ledger.usage_now(key, Txg(5)), usage(123, 2));
        // A slot reused four txgs later starts from nothing.
        let entry = ledger.by_owner.get_mut(&key).unwrap();
        entry.charge(Txg(9), usage(1, 0), true);
        assert_eq!(entry.pending[Txg(9).slot()], (Txg(9), usage(1, 0)));
        assert_eq!(ledger.usage_now(key, Txg(6)), usage(109, 1));
        // An owner whose usage goes to nothing, with no charge in flight, is forgotten.
        let deltas = UsageDeltas::from_iter([(key, (-108, -1))]);
        ledger.synced(Txg(9), false, &deltas);
        assert!(ledger.by_owner.is_empty());
        assert!(ledger.synced_of_kind(OwnerKind::User).is_empty());
    }

    #[test]
    fn a_rebuilt_usage_is_forgotten_but_charges_in_flight_stay() {
        let key = (OwnerKind::Project, 7);
        let mut ledger = OwnerLedger::default();
        ledger.install(UsageTotals::from_iter([(key, usage(100, 1))]));
        ledger
            .by_owner
            .get_mut(&key)
            .unwrap()
            .charge(Txg(8), usage(4, 0), true);
        ledger.synced(Txg(7), true, &UsageDeltas::default());
        assert!(!ledger.loaded());
        assert_eq!(ledger.usage_now(key, Txg(7)), usage(4, 0));
        ledger.clear_pending();
        assert_eq!(ledger.usage_now(key, Txg(7)), usage(0, 0));
    }

    #[test]
    fn a_chown_moves_the_charge_and_an_unchanged_object_moves_nothing() {
        let before = Some((owners(1, 10, 0), 4096));
        let after = Some((owners(2, 10, 0), 4096));
        let deltas = usage_deltas([(before, after), (before, before)]);
        assert_eq!(deltas.get(&(OwnerKind::User, 1)), Some(&(-4096, -1)));
        assert_eq!(deltas.get(&(OwnerKind::User, 2)), Some(&(4096, 1)));
        assert_eq!(
            deltas.get(&(OwnerKind::Group, 10)),
            None,
            "the group nets out"
        );
        assert_eq!(deltas.len(), 2);
    }

    #[test]
    fn creation_growth_and_removal_are_charged() {
        let deltas = usage_deltas([
            (None, Some((owners(5, 5, 7), 512))),
            (Some((owners(6, 6, 7), 1024)), Some((owners(6, 6, 7), 8192))),
            (Some((owners(8, 8, 7), 2048)), None),
        ]);
        assert_eq!(deltas[&(OwnerKind::Project, 7)], (512 + 7168 - 2048, 0));
        assert_eq!(deltas[&(OwnerKind::User, 6)], (7168, 0));
        assert_eq!(deltas[&(OwnerKind::Group, 8)], (-2048, -1));
    }

    #[test]
    fn a_charge_below_zero_is_clamped_and_said() {
        let (usage, clamped) = apply_delta(
            OwnerUsage {
                bytes: 10,
                objects: 1,
            },
            (-20, -1),
        );
        assert!(clamped);
        assert_eq!(usage, OwnerUsage::default());
        let (usage, clamped) = apply_delta(
            OwnerUsage {
                bytes: 10,
                objects: 1,
            },
            (5, 1),
        );
        assert!(!clamped);
        assert_eq!(
            usage,
            OwnerUsage {
                bytes: 15,
                objects: 2
            }
        );
    }

    #[test]
    fn entries_decode_or_are_refused() {
        let value = encode_usage(OwnerUsage {
            bytes: 9,
            objects: 2,
        });
        assert_eq!(
            decode_entry(OwnerKind::User, b"1000", &value).unwrap(),
            (
                1000,
                OwnerUsage {
                    bytes: 9,
                    objects: 2
                }
            )
        );
        for key in [&b"x"[..], b"01000", b"4294967296", b""] {
            assert!(
                decode_entry(OwnerKind::User, key, &value).is_err(),
                "{key:?}"
            );
        }
        assert!(decode_entry(OwnerKind::Group, b"1", &value[..8]).is_err());
    }
}
