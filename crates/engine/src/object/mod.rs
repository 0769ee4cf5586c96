//! Object layer: object sets, dnodes, block trees, per-txg dirty records, key/value objects,
//! block-pointer lists ([`bpobj`]) and resumable post-order walks ([`traverse`]) (OpenZFS
//! dmu*.c, dnode*.c, dbuf.c, bpobj.c, dmu_traverse.c).
//!
//! # Overview
//! An *object set* is a flat array of numbered objects. Each object is described by a 512-byte
//! *dnode* (type, block size, tree height, bonus buffer, root block pointer). The dnodes live in
//! the data blocks of object 0, the *meta-dnode*, whose own dnode sits in the object-set header,
//! the root block of the set. The pool's MOS is an object set; so is every file system.
//!
//! # On-disk structures
//! See [`phys`] for the byte layout of the dnode and object-set header, and [`tree`] for the
//! shape of block trees (indirect blocks of `fanout` block pointers, levels grown on demand).
//!
//! # Dirty records and txgs
//! Changes are made in *open context* under a transaction (a [`Tx`] names the open txg it was
//! assigned to) and kept in memory as per-txg dirty records: for each object, the whole new
//! contents of each written data block (a block a compressed receive wrote: only its payload as
//! stored, decompressed if read before its sync; see `DirtyBlock`), the ranges of blocks freed,
//! a new bonus buffer, and whether the object was created or removed in that txg. Nothing on
//! disk changes until the txg
//! syncs, so writes land in txg N+1 while N syncs: the records of N are frozen once N is
//! quiesced, and writers only touch the open txg's records.
//!
//! # Reading
//! A read of a block looks at the dirty records from the newest txg to the oldest (a write wins, a
//! free or creation in that txg means zeros), then at the tree of the dnode as it is being synced,
//! then at the last synced tree. Disk reads happen without the object set's lock (a writer holds
//! only its object's writer lock across the read-modify-write). Removing an object takes no lock a
//! reader holds (a directory is read while another thread removes it), so the same look decides
//! whether the object exists: a block or the spill block (`bonus.rs`) of a removed object, the
//! removal still a dirty record or already in the tree, is [`ObjectError::NoSuchObject`], never a
//! hole or "no spill block", whatever an existence check made before the look said. Blocks freed in
//! a sync are not reallocated for two more txgs (DESIGN.md §3 invariant 3), so a reader that took a
//! tree root just before a sync installed a new one still reads valid blocks. The dnodes of the
//! tree are kept decoded in a bounded cache (`dnode_cache.rs`), forgotten when a sync installs a
//! tree that rewrote them or a rollback replaces the tree.
//!
//! # Syncing
//! [`ObjectSet::sync`] runs in syncing context for one sync pass: it takes every pending record
//! of the txg, applies frees and writes to each object's tree ([`tree::TreeSync`]) copy-on-write,
//! then writes the changed dnodes into the meta-dnode's blocks, syncs the meta-dnode the same
//! way, and writes the object-set header, returning its new block pointer. Every block that
//! enters or leaves a tree goes through the set's [`BlockLifecycle`] (the dataset layer's
//! `block_born` / `block_kill`, or the pool's for the MOS): the object layer never frees into the
//! allocator itself. [`ObjectSet::sync_done`] installs the new tree as the synced one.
//!
//! # Locking
//! One mutex per object set guards the dirty records and the tree roots; it is held only for
//! in-memory work, never across a disk read or write. Syncing happens in the single sync thread.
//!
//! # Copies
//! How many copies a block gets is decided in one place, [`write_copies`], from the object's
//! type, the block's level and the `copies` setting of the dataset (stored in each dnode, and
//! held by the object set for its own dnode blocks and header): file data gets `copies`, every
//! other block (indirect blocks of any object, dnode blocks, object-set headers, key/value
//! objects such as directories, master nodes and unlinked sets, and every MOS object) is
//! metadata and gets one more, at most [`COPIES_MAX`] (OpenZFS `dmu_write_policy`). The
//! allocator places the copies apart (`space::SpaceManager::allocate`), and a read that finds a
//! bad copy returns a good one and repairs the bad one.
//!
//! # Crash behaviour
//! Everything in memory is lost in a crash; what was synced is described by the last uberblock.
//! The header reserves room for an intent log (ZIL); object numbers are not reused within a
//! pool's lifetime yet, and each dnode records the txg it was allocated in as its generation.
//!
//! # Modules
//! `impl ObjectSet` is split by concept, one file each, every file opening with what it holds:
//! this file has the types, the errors, the copies rule, and the set's life (create, open,
//! its settings, the gate, rollback with [`ObjectSet::reset_to`], [`ObjectSet::sync_done`]);
//! `dnode.rs` dnodes as open context sees them and the allocation and free of objects;
//! `dirty.rs` the per-txg dirty records and dirty-data figures; `write.rs` writes, their
//! admission and the per-object writer lock; `read.rs` reads; `free.rs` freeing byte ranges;
//! `bonus.rs` bonus buffers and spill blocks; `sync.rs` the sync of a txg, [`tree`] the sync
//! of one object's block tree; `synced.rs` the synced tree as `check` reads it;
//! `dnode_cache.rs` the cache of decoded dnodes; `intent.rs`, [`log_header`] and `prewrite.rs`
//! the intent log's side; [`prefetch`] predictive prefetch; [`read_errors`] blocks found
//! unreadable; [`phys`] the on-disk formats. [`kv`], [`bpobj`], [`traverse`] and [`adapters`]
//! are objects and walks built on the set.

pub mod accounting;
pub mod adapters;
mod bonus;
pub mod bpobj;
mod dirty;
mod dnode;
mod dnode_cache;
mod free;
mod intent;
pub mod kv;
pub mod log_header;
pub mod owners;
pub mod phys;
pub mod prefetch;
mod prewrite;
mod read;
pub use prewrite::{PreparedPrewrite, Prewrite};
pub use read::ReadPiece;
#[doc(hidden)]
pub use read::{test_hook_before_block_lookup, SPILL_BLKID};
pub mod read_errors;
mod sync;
mod synced;
pub mod traverse;
pub mod tree;
mod write;
pub use write::{ObjectLockGuard, WholeBlock};

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::blkptr::{BlockError, BlockPtr, ChecksumType, Compression, ObjectType};
use crate::block::pipeline::{BlockIo, PipelineError, SyncPoint};
pub use crate::txg::Tx;
use crate::txg::TxgManager;
use crate::types::{ObjectId, Txg};
use dirty::TxgDirty;
pub use intent::AttachedLog;
use log_header::LogHeader;
use phys::{DnodePhys, ObjsetHeader, ObjsetKind, DNODE_BONUS_SIZE_MAX, DNODE_SIZE};

/// Errors of the object layer.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("object {0} does not exist")]
    NoSuchObject(ObjectId),
    #[error("corrupt object metadata: {0}")]
    Corrupt(String),
    #[error("no space left in the pool")]
    NoSpace,
    /// A dataset's quota or refquota does not allow the write (EDQUOT).
    #[error("disk quota exceeded")]
    QuotaExceeded,
    #[error("object too large for its tree: {0}")]
    TooLarge(String),
    #[error("bonus buffer of {0} bytes is larger than {DNODE_BONUS_SIZE_MAX}")]
    BonusTooLarge(usize),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error("{0}")]
    Lifecycle(String),
    /// The pool stopped syncing while the operation waited for a txg.
    #[error(transparent)]
    Txg(#[from] crate::txg::TxgError),
}

impl From<BlockError> for ObjectError {
    fn from(error: BlockError) -> Self {
        ObjectError::Pipeline(PipelineError::Block(error))
    }
}

/// The most copies (DVAs) a block can have.
pub const COPIES_MAX: u8 = crate::block::blkptr::DVAS_MAX as u8;

/// Whether blocks of `object_type` at `level` are file data (the only blocks that are not
/// metadata): level-0 blocks of plain files. Everything else a pool stores says where data
/// is or what it is called, and losing it loses more than its own bytes.
pub fn is_file_data(object_type: ObjectType, level: u8) -> bool {
    object_type == ObjectType::PlainFile && level == 0
}

/// The number of copies a block of `object_type` at `level` is written with, for a dataset
/// whose `copies` setting is `copies`: file data gets `copies`, metadata one more, at most
/// [`COPIES_MAX`] (DESIGN.md §4 "Pool metadata"). The single rule for every block written.
pub fn write_copies(object_type: ObjectType, level: u8, copies: u8) -> u8 {
    let copies = copies.clamp(1, COPIES_MAX);
    if is_file_data(object_type, level) {
        copies
    } else {
        (copies + 1).min(COPIES_MAX)
    }
}

/// Admission of new data before it is dirtied: the pool refuses writes that could not be
/// stored (ENOSPC), or that a dataset's quota does not allow (EDQUOT), while frees and syncing
/// still can proceed (OpenZFS's dsl_dir tempreserve). Called with `tx` held; it may wait for
/// earlier txgs to sync (never for `tx`'s own). What the write may cost is a
/// [`WriteEstimate`]; an admitted write's metadata stays reserved until its txg has synced.
///
/// Space can be held back for write-backs ([`WriteReservation::hold_back`]): a FUSE mount
/// whose kernel page cache holds writes that write(2) has already accepted keeps enough space
/// for them, so that writing them back never fails for want of space. Ordinary writes leave
/// that space alone; write-backs ([`Admission::WriteBack`]) may use it.
pub trait WriteReservation: Send + Sync {
    /// `objset` is the set written (whose usage by owner the owners' quotas charge).
    fn reserve(
        &self,
        objset: &ObjectSet,
        tx: &Tx,
        estimate: &WriteEstimate,
        admission: Admission,
    ) -> Result<(), ObjectError>;

    /// Whether a write of `bytes` would be admitted now: `Err` says why not (`NoSpace` or
    /// `QuotaExceeded`). Never waits.
    fn admits(&self, bytes: u64, admission: Admission) -> Result<(), ObjectError>;

    /// Charge `charge` bytes of metadata a namespace change will make the sync write (a new
    /// node, a name, an xattr) against the dataset's quotas only: the pool never refused
    /// those for space, and still does not. May wait for earlier txgs, as `reserve` does.
    fn charge_metadata(&self, tx: &Tx, charge: u64) -> Result<(), ObjectError>;

    /// Whether `owners` may be given `objects` more objects (a create, a chown, a change of
    /// project) under the user, group and project quotas of the dataset: `QuotaExceeded`
    /// when one of them is at or over its byte quota, or would go over its object quota.
    /// Only the owners that differ from `previous` are asked (all of them for a new node,
    /// `previous` None). Never waits.
    fn owner_admits(
        &self,
        _owners: owners::Owners,
        _previous: Option<owners::Owners>,
        _objects: u64,
    ) -> Result<(), ObjectError> {
        Ok(())
    }

    /// Whether a write of `bytes` for `owners` would be admitted under their quotas now
    /// (`QuotaExceeded` if not). Never waits, never charges.
    fn owner_write_admits(&self, _owners: owners::Owners, _bytes: u64) -> Result<(), ObjectError> {
        Ok(())
    }

    /// Hold `bytes` back from ordinary writes until [`WriteReservation::release_held_back`].
    fn hold_back(&self, bytes: u64);

    fn release_held_back(&self, bytes: u64);
}

impl ObjectError {
    /// A refusal for want of space: the pool's (`NoSpace`) or a quota's (`QuotaExceeded`).
    pub fn is_out_of_space(&self) -> bool {
        matches!(self, ObjectError::NoSpace | ObjectError::QuotaExceeded)
    }
}

/// The block of directory or xattr entries a namespace change is charged for (see
/// [`ObjectSet::namespace_charge`]): a key/value leaf block.
const NAMESPACE_BLOCK_CHARGE: u64 = 16 << 10;

/// What a write may cost, for its admission ([`WriteReservation::reserve`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteEstimate {
    /// The data written (logical bytes).
    pub bytes: u64,
    /// Indirect blocks beyond the data (see [`ObjectSet::indirect_estimate`]).
    pub metadata: u64,
    /// The most the write can add to its dataset's used space once synced, for quotas: every
    /// data block it touches that the txg has not dirtied yet, rewritten whole at its
    /// allocated size with its copies (the old one may stay in a snapshot), its metadata, and
    /// its object's dnode block when the txg has not dirtied the object yet.
    pub charge: u64,
    /// Who the charge goes to, for user, group and project quotas: the object's owners,
    /// when its object set keeps usage by owner (`owners.rs`).
    pub owners: Option<owners::Owners>,
}

/// Which space a write may use (see [`WriteReservation`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// A write whose caller is still waiting for its answer (write(2) through direct I/O, a
    /// receive, an engine call): refused once only the held-back space is left.
    Ordinary,
    /// The write-back of pages a kernel cache accepted earlier: the caller was told its
    /// write(2) succeeded, so this write may use the space held back for it.
    WriteBack,
    /// A write the intent log replays at import: admitted before the crash and promised by
    /// an fsync, so it may also use half of the slop (as OpenZFS lets recovery changes use
    /// half of it, ZFS_SPACE_CHECK_RESERVED). Refused, it would lose what fsync promised.
    Replay,
}

/// How blocks enter and leave an object set's trees. Owned by this layer, implemented above:
/// by a dataset (`block_born` / `block_kill`, DESIGN.md §4 "Frees go through the dataset") and
/// by the pool for the MOS.
pub trait BlockLifecycle: Send + Sync {
    fn block_born(&self, bp: &BlockPtr, at: SyncPoint);
    fn block_kill(&self, bp: &BlockPtr, at: SyncPoint) -> Result<(), ObjectError>;
}

/// Properties of a new object.
#[derive(Clone, Copy, Debug)]
pub struct ObjectProps {
    pub object_type: ObjectType,
    pub data_block_size: u32,
    pub indirect_block_shift: u8,
    pub checksum: ChecksumType,
    pub compression: Compression,
    pub copies: u8,
}

/// The settings of an existing object that may change: how its blocks are written from now
/// on, and (only while it has no indirect block) the size of its indirect blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectSettings {
    pub checksum: ChecksumType,
    pub compression: Compression,
    pub copies: u8,
    pub indirect_block_shift: u8,
}

impl ObjectSettings {
    fn apply(&self, dnode: &mut DnodePhys) {
        dnode.checksum = self.checksum;
        dnode.compression = self.compression;
        dnode.copies = self.copies.clamp(1, 3);
        dnode.indirect_block_shift = self.indirect_block_shift;
    }
}

/// What a caller can learn about an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    pub object: ObjectId,
    pub object_type: ObjectType,
    pub data_block_size: u32,
    pub levels: u8,
    pub max_blkid: u64,
    pub size_allocated: u64,
    pub generation: Txg,
    pub bonus_type: ObjectType,
}

struct SyncingState {
    txg: Txg,
    /// The log header this txg's header carries (asked of the log once, in the first pass).
    log_header: LogHeader,
    meta_dnode: DnodePhys,
    dnodes: BTreeMap<ObjectId, DnodePhys>,
    root: Option<BlockPtr>,
    /// The usage objects' dnodes this txg's header carries (`accounting.rs`).
    accounting: Option<Box<[DnodePhys; 3]>>,
    /// The usage differences this txg wrote, for the totals in memory at `sync_done`.
    owner_deltas: accounting::UsageDeltas,
    /// This txg counted the usage from scratch (the tree had none): the totals in memory are
    /// read again.
    accounting_rebuilt: bool,
}

struct State {
    synced_root: BlockPtr,
    /// The log header of the synced root.
    synced_log_header: LogHeader,
    synced_meta_dnode: DnodePhys,
    syncing: Option<SyncingState>,
    dirty: BTreeMap<Txg, TxgDirty>,
    next_object: u64,
    /// The last txg [`ObjectSet::sync_done`] finished: no change may join it or an older one.
    last_synced: Txg,
    /// Bumped whenever dirty records are dropped because a sync wrote them into the tree, so a
    /// reader that combined a tree read with the dirty records can tell if the two views came
    /// from different sides of that moment (and retry).
    view_generation: u64,
    /// Decoded dnodes of the tree (dnode_cache.rs).
    dnode_cache: dnode_cache::DnodeCache,
    /// The usage objects' dnodes of the synced tree, if it keeps usage by owner.
    synced_accounting: Option<Box<[DnodePhys; 3]>>,
    /// Usage by owner in memory: synced (once asked for) and charged by admission since
    /// (`accounting.rs`).
    owner_ledger: accounting::OwnerLedger,
    /// Bumped whenever the synced usage changes other than by a sync's differences (its
    /// first count, a rollback): a load that straddles it reads again.
    accounting_generation: u64,
}

/// An object set: see the module documentation.
pub struct ObjectSet {
    io: Arc<BlockIo>,
    kind: ObjsetKind,
    lifecycle: Arc<dyn BlockLifecycle>,
    /// The `copies` setting of the dataset (3 for the MOS): its dnode blocks and header are
    /// metadata and get [`write_copies`] of it. Changed by [`ObjectSet::set_copies`].
    copies: std::sync::atomic::AtomicU8,
    /// Where open-context changes report their dirty bytes (write throttle, sync trigger).
    dirty_accounting: Mutex<Option<Arc<TxgManager>>>,
    /// Admission control for new data (None: unlimited, as for the MOS).
    reservation: Mutex<Option<Arc<dyn WriteReservation>>>,
    /// Per-object writer locks serialising writers of one object, so that two partial writes
    /// into one block cannot lose each other's bytes (the read-modify-write is atomic). Entries
    /// exist only while someone holds or waits for the lock.
    object_locks: Arc<Mutex<crate::types::FastHashMap<ObjectId, Arc<Mutex<()>>>>>,
    /// Open-context users of a file system pass through this gate (shared) for each change;
    /// a rollback closes it (exclusive) so that no change is half applied across
    /// [`ObjectSet::reset_to`].
    gate: parking_lot::RwLock<()>,
    /// The file system's intent log, once attached (zil/): asked for the log header in each
    /// sync.
    log: Mutex<Option<Arc<dyn AttachedLog>>>,
    /// Which of its data blocks a read leaves in the cache (the `primarycache` property).
    primarycache: crate::cache::SharedCachePolicy,
    /// Which of its blocks may go to the L2ARC (the `secondarycache` property).
    secondarycache: crate::cache::SharedCachePolicy,
    /// Data blocks found with no good copy, for the pool's error log (`read_errors.rs`).
    read_errors: read_errors::ReadErrors,
    /// Who objects are charged to, if the set keeps usage by owner (`accounting.rs`).
    owner_of: Mutex<Option<owners::OwnerOf>>,
    state: Mutex<State>,
}

impl ObjectSet {
    /// A new, empty object set (nothing on disk until its first sync).
    pub fn create(
        io: Arc<BlockIo>,
        kind: ObjsetKind,
        lifecycle: Arc<dyn BlockLifecycle>,
        copies: u8,
        txg: Txg,
    ) -> ObjectSet {
        let tunables = &io.tunables;
        let meta_dnode = DnodePhys {
            object_type: ObjectType::Dnode,
            indirect_block_shift: tunables.meta_dnode_indirect_block_shift as u8,
            levels: 1,
            bonus_type: ObjectType::None,
            checksum: ChecksumType::Fletcher4,
            compression: Compression::Lz4,
            data_block_size: tunables.dnode_block_size,
            copies,
            max_blkid: 0,
            size_allocated: 0,
            generation: txg,
            blkptr: BlockPtr::hole(Txg(0), ObjectType::Dnode, 0),
            bonus: Vec::new(),
            spill: None,
        };
        let synced_root = BlockPtr::hole(Txg(0), ObjectType::Objset, 0);
        let header = ObjsetHeader {
            meta_dnode,
            kind,
            log: LogHeader::default(),
            accounting: None,
        };
        let os = ObjectSet::from_parts(io, lifecycle, copies, synced_root, header);
        // Make the set dirty so that its first sync writes a header even if nothing else changes.
        os.state.lock().dirty.entry(txg).or_default();
        os
    }

    /// Open an object set from its root block pointer.
    pub fn open(
        io: Arc<BlockIo>,
        root: &BlockPtr,
        lifecycle: Arc<dyn BlockLifecycle>,
        copies: u8,
    ) -> Result<ObjectSet, ObjectError> {
        if root.object_type != ObjectType::Objset || root.level != 0 || root.is_hole() {
            return Err(ObjectError::Corrupt(format!(
                "object-set root pointer is not an object-set header: {root}"
            )));
        }
        let header = ObjsetHeader::decode(&io.read(root)?)?;
        Ok(ObjectSet::from_parts(
            io,
            lifecycle,
            copies,
            root.clone(),
            header,
        ))
    }

    fn from_parts(
        io: Arc<BlockIo>,
        lifecycle: Arc<dyn BlockLifecycle>,
        copies: u8,
        synced_root: BlockPtr,
        header: ObjsetHeader,
    ) -> ObjectSet {
        let ObjsetHeader {
            mut meta_dnode,
            kind,
            log: log_header,
            accounting,
        } = header;
        let copies = copies.clamp(1, COPIES_MAX);
        meta_dnode.copies = copies;
        let dnodes_per_block = meta_dnode.data_block_size as u64 / DNODE_SIZE as u64;
        let next_object = ((meta_dnode.max_blkid + 1) * dnodes_per_block).max(1);
        let dnode_cache = dnode_cache::DnodeCache::new(io.tunables.dnode_cache_entries);
        ObjectSet {
            io,
            kind,
            lifecycle,
            copies: std::sync::atomic::AtomicU8::new(copies),
            dirty_accounting: Mutex::new(None),
            reservation: Mutex::new(None),
            object_locks: Arc::new(Mutex::new(Default::default())),
            gate: parking_lot::RwLock::new(()),
            log: Mutex::new(None),
            primarycache: crate::cache::SharedCachePolicy::default(),
            secondarycache: crate::cache::SharedCachePolicy::default(),
            read_errors: Default::default(),
            owner_of: Mutex::new(None),
            state: Mutex::new(State {
                synced_root,
                synced_log_header: log_header,
                synced_meta_dnode: meta_dnode,
                syncing: None,
                dirty: BTreeMap::new(),
                next_object,
                last_synced: Txg(0),
                view_generation: 0,
                dnode_cache,
                synced_accounting: accounting,
                owner_ledger: Default::default(),
                accounting_generation: 0,
            }),
        }
    }

    pub fn kind(&self) -> ObjsetKind {
        self.kind
    }

    pub fn io(&self) -> &Arc<BlockIo> {
        &self.io
    }

    /// The root pointer as of the last completed sync.
    pub fn synced_root(&self) -> BlockPtr {
        self.state.lock().synced_root.clone()
    }

    /// The root written by the current txg's sync passes, if any.
    pub fn syncing_root(&self) -> Option<BlockPtr> {
        self.state
            .lock()
            .syncing
            .as_ref()
            .and_then(|syncing| syncing.root.clone())
    }

    /// What reads of this set's data blocks leave in the cache (`primarycache`).
    pub fn primarycache(&self) -> crate::cache::CachePolicy {
        self.primarycache.get()
    }

    /// Change what reads of this set's data blocks leave in the cache (the dataset's
    /// `primarycache` property).
    pub fn set_primarycache(&self, policy: crate::cache::CachePolicy) {
        self.primarycache.set(policy);
    }

    /// Which of this set's blocks may go to the L2ARC (`secondarycache`).
    pub fn secondarycache(&self) -> crate::cache::CachePolicy {
        self.secondarycache.get()
    }

    /// Change which of this set's blocks may go to the L2ARC (the dataset's `secondarycache`
    /// property); blocks already there stay until evicted.
    pub fn set_secondarycache(&self, policy: crate::cache::CachePolicy) {
        self.secondarycache.set(policy);
    }

    /// Reads and writes of this set's blocks on the calling thread carry its
    /// `secondarycache` while the returned scope lives.
    pub(crate) fn l2_scope(&self) -> crate::cache::l2arc::SecondaryScope {
        crate::cache::l2arc::SecondaryScope::new(self.secondarycache())
    }

    /// The `copies` setting this set's own metadata (dnode blocks, header) is written for.
    pub fn copies(&self) -> u8 {
        self.copies.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Change the `copies` setting for the set's own metadata (the dataset's property changed
    /// or was read at import): blocks written from the next sync on get [`write_copies`] of it.
    pub fn set_copies(&self, copies: u8) {
        self.copies.store(
            copies.clamp(1, COPIES_MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The synced meta-dnode (for `check` and `debug`).
    pub fn synced_meta_dnode(&self) -> DnodePhys {
        self.state.lock().synced_meta_dnode.clone()
    }

    /// What a namespace change touching `objects` may add to the dataset's used space once
    /// synced: for each object the txg has not dirtied yet (or that does not exist yet), its
    /// dnode block and a block of its directory or xattr entries, in the most copies
    /// metadata gets (see [`WriteReservation::charge_metadata`]).
    pub fn namespace_charge(&self, txg: Txg, objects: &[ObjectId]) -> u64 {
        self.dirtying_charge(txg, objects, NAMESPACE_BLOCK_CHARGE)
    }

    /// For each of `objects` the txg has not dirtied yet: its dnode block and `extra` bytes,
    /// in the most copies metadata gets (the quota charge of making them dirty).
    pub(super) fn dirtying_charge(&self, txg: Txg, objects: &[ObjectId], extra: u64) -> u64 {
        let state = self.state.lock();
        let dirty = state.dirty.get(&txg);
        let per_object = state.dnode_block_charge(extra);
        objects
            .iter()
            .filter(|object| dirty.is_none_or(|dirty| !dirty.objects.contains_key(object)))
            .count() as u64
            * per_object
    }

    /// The admission of this object set's writes, if the pool set one.
    pub fn reservation(&self) -> Option<Arc<dyn WriteReservation>> {
        self.reservation.lock().clone()
    }

    /// Admit new data through `reservation` from now on (the pool does this for datasets).
    pub fn set_reservation(&self, reservation: Arc<dyn WriteReservation>) {
        *self.reservation.lock() = Some(reservation);
    }

    /// Pass the gate for one change (see the `gate` field); held until the change is done.
    pub fn enter(&self) -> parking_lot::RwLockReadGuard<'_, ()> {
        // Recursive: a change may call another while a rollback waits for the gate.
        self.gate.read_recursive()
    }

    /// Close the gate: wait for changes in flight and hold off new ones while held.
    pub fn close_gate(&self) -> parking_lot::RwLockWriteGuard<'_, ()> {
        self.gate.write()
    }

    /// Syncing context of txg `txg` (a rollback): make `root` the tree this txg commits,
    /// discarding every change not yet synced (of this txg and of open ones), and the intent
    /// log. The caller holds the gate closed.
    pub fn reset_to(&self, root: &BlockPtr, txg: Txg) -> Result<(), ObjectError> {
        let header = ObjsetHeader::decode(&self.io.read(root)?)?;
        let mut meta_dnode = header.meta_dnode;
        let log = self.log.lock().clone();
        let mut state = self.state.lock();
        meta_dnode.copies = state.synced_meta_dnode.copies;
        let written_ahead = Self::take_written_ahead(&mut state);
        state.dirty.clear();
        let dnodes_per_block = meta_dnode.data_block_size as u64 / DNODE_SIZE as u64;
        state.next_object = ((meta_dnode.max_blkid + 1) * dnodes_per_block).max(1);
        match state.syncing.as_mut() {
            Some(syncing) => {
                syncing.root = Some(root.clone());
                syncing.meta_dnode = meta_dnode;
                syncing.dnodes.clear();
                syncing.log_header = header.log.clone();
                syncing.accounting = header.accounting;
                syncing.owner_deltas.clear();
                syncing.accounting_rebuilt = true;
            }
            None => {
                state.synced_root = root.clone();
                state.synced_meta_dnode = meta_dnode;
                state.synced_accounting = header.accounting;
            }
        }
        // The usage is the new tree's; charges of the discarded changes are dropped with them.
        let last_synced = state.last_synced;
        state.owner_ledger.clear_pending();
        state.owner_ledger.forget_synced(last_synced);
        state.accounting_generation += 1;
        let stale_header = !header.log.is_empty();
        state.synced_log_header = header.log;
        state.view_generation += 1;
        state.dnode_cache.clear();
        drop(state);
        for (bp, allocated) in written_ahead {
            self.io.give_back(&bp, allocated, Some(txg))?;
        }
        // The log described the discarded changes: drop it (its blocks are given back in this
        // txg; the dataset's log floor marks the header this txg commits as stale) and, if the
        // new root's header names a chain, write an empty header in the next txg.
        if let Some(log) = &log {
            log.discard(txg)?;
        }
        if log.is_some() && stale_header {
            self.state
                .lock()
                .dirty
                .entry(Txg(txg.0 + 1))
                .or_default()
                .log = true;
        }
        Ok(())
    }

    /// After the txg's last pass: install the tree written by this txg's passes as the synced one.
    pub fn sync_done(&self, txg: Txg) {
        let mut state = self.state.lock();
        if let Some(dirty) = state.dirty.get(&txg) {
            assert!(
                dirty.objects.is_empty(),
                "txg {txg} finished with unsynced changes"
            );
            state.dirty.remove(&txg);
        }
        state.last_synced = state.last_synced.max(txg);
        state.view_generation += 1;
        let mut rebuilt = false;
        let mut owner_deltas = accounting::UsageDeltas::default();
        if let Some(syncing) = state.syncing.take() {
            assert_eq!(syncing.txg, txg);
            state.dnode_cache.forget(syncing.dnodes.keys().copied());
            if let Some(root) = syncing.root {
                state.synced_root = root;
                state.synced_meta_dnode = syncing.meta_dnode;
                state.synced_log_header = syncing.log_header;
                state.synced_accounting = syncing.accounting;
                rebuilt = syncing.accounting_rebuilt;
                owner_deltas = syncing.owner_deltas;
            }
        }
        // A load in flight read the usage as it was before this sync: while nothing is
        // loaded the sync's differences go nowhere, so such a load must read again.
        if rebuilt || !state.owner_ledger.loaded() {
            state.accounting_generation += 1;
        }
        // The txg's charges leave the pending figures as its usage enters the synced ones
        // (`accounting.rs`).
        state.owner_ledger.synced(txg, rebuilt, &owner_deltas);
    }
}

/// The copies rule of `write_copies`: file data gets the dataset's `copies`, metadata one more.
#[cfg(test)]
mod copies_tests {
    use super::*;

    /// Directories, master nodes and unlinked sets (key/value objects) once took the file
    /// `copies` setting, so one bad block lost a directory or the whole pool.
    #[test]
    fn metadata_gets_one_more_copy_than_file_data() {
        for copies in 1..=3u8 {
            assert_eq!(write_copies(ObjectType::PlainFile, 0, copies), copies);
            let more = (copies + 1).min(COPIES_MAX);
            assert_eq!(write_copies(ObjectType::PlainFile, 1, copies), more);
            for object_type in [
                ObjectType::KeyValue,
                ObjectType::Dnode,
                ObjectType::Objset,
                ObjectType::BlockPtrList,
                ObjectType::SpaceMap,
                ObjectType::DatasetDir,
                ObjectType::Dataset,
            ] {
                assert_eq!(
                    write_copies(object_type, 0, copies),
                    more,
                    "{object_type:?}"
                );
            }
        }
        assert_eq!(write_copies(ObjectType::PlainFile, 0, 9), COPIES_MAX);
    }
}
