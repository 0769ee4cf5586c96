//! The intent log (ZIL): fsync in one durable log write, not a txg (OpenZFS zil.c).
//!
//! # Theory
//! A txg sync writes a whole tree and an uberblock; waiting for one costs tens of
//! milliseconds. The intent log records, in open context, what each change did (an *itx*: a
//! write of a range, a setattr, a create, remove, link or rename, an xattr change; record.rs),
//! and an fsync writes only the records of the file it names, plus every namespace record of
//! the set up to its newest one (a name may hang on other directory changes, and a new node's
//! project on its directory's project change, which counts as one: record.rs; OpenZFS commits
//! namespace itxs the same way), into a chain of log blocks: one sync-class write, durable
//! when it completes (O_DSYNC direct I/O on a file vdev, `BlockDevice::write_durable_at`), so
//! no flush of the whole device, which would first write back a syncing txg's buffered
//! writes. A namespace itx is filed under its object and the directories it
//! touched, so the fsync of a directory takes it too. Once the txg a
//! record belongs to has synced, the record is obsolete, and its log block is freed in the
//! sync of a txg that makes all of its records obsolete.
//!
//! A write's data reaches the log one of two ways (OpenZFS's write states). Copied
//! (WR_NEED_COPY): the bytes are read from the file at commit and go into the records. In place
//! (WR_INDIRECT): for a write of at least `zil_immediate_write_sz` (32 KiB), or any write under
//! `logbias=throughput`, whose txg is the one the commit holds open, each block it touches is
//! written now to the place it will have in the tree (block/prewrite.rs) and the record holds
//! the block pointer; the txg's sync adopts the block instead of writing it again
//! (object/prewrite.rs), so the data is written once. Writes of an older txg (quiescing or
//! syncing: its blocks can no longer be adopted) are copied, up to 8 MiB a commit; past that
//! the commit waits for their txg instead.
//!
//! The chain starts at the log header in the object-set header (format.rs). Each block holds
//! the pointer of the next one, allocated before the block is written, so a commit writes
//! blocks whose place is already named and no header needs rewriting; a walk stops at the first
//! block that does not verify. The first block of a chain is named by the header only once the
//! txg that allocated it syncs: a commit before then waits for that txg (OpenZFS zil_create).
//!
//! Allocation happens in open context under a txg hold (OpenZFS zio_alloc_zil): the
//! allocation joins the held txg, which therefore syncs this set's header and space maps even
//! if nothing else changed ([`ObjectSet::dirty_log`]). A commit keeps its hold until its blocks
//! durably written, so a txg whose space maps record a log block's allocation never
//! commits before the block is on disk, except for the *tail*: the one allocated block the
//! chain's last block names, not written yet. At import ([`claim`]) a tail whose allocation
//! synced is freed; one whose allocation did not sync was never allocated.
//!
//! # Crash behaviour
//! A power cut loses writes not durable: a torn or missing log block ends the chain there, and
//! only records of commits that returned are guaranteed. At import every log block written
//! after the last synced txg is *claimed* (its space taken from the allocator, in the first txg
//! of the import, with the header recording the claim) before anything else allocates; then
//! the file system's open replays the records whose txg is newer than the one the header says
//! was synced at claim time, in order. Records are absolute (bytes at an offset, attribute
//! values) or say what they found (a namespace record names the object its name referred to),
//! so replaying a prefix twice gives the same result (fs/intent.rs): a crash during replay is
//! safe, the chain stays claimed and is replayed again. Once the replayed changes have synced, the
//! chain is freed and the header points at a new one. Data blocks written in place for records
//! of unsynced txgs are claimed with the chain, read back (checksum verified) by replay, and
//! freed with it; one that a power cut lost fails its checksum and its record is skipped (its
//! commit never returned).
//!
//! # Cost
//! A commit writes its blocks (one for the usual fsync), and the data blocks of its in-place
//! writes, each durable when it completes (no device flush); it takes the pending namespace itxs older than
//! its newest one from their own index (no scan of the other itxs), and waits for a txg only
//! for an unlogged change of an object its records name, a chain whose header has not synced,
//! or more than 8 MiB of writes to copy.
//!
//! # Locking
//! `state` (a short mutex) guards the itx lists and the chain; `commit_lock` serialises
//! writers, and a commit takes the records of every file whose fsync is waiting for the lock
//! (`wanted`), so concurrent fsyncs share log blocks. Never taken under a txg hold
//! of the caller; the sync hook ([`Zil::sync`]) takes only `state`.

pub mod chain;
pub mod claim;
mod fields;
pub mod format;
pub mod record;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::blkptr::{BlockPtr, Dva, ObjectType};
use crate::block::pipeline::BlockIo;
use crate::object::adapters::MosSpaceStorage;
use crate::object::{AttachedLog, ObjectError, ObjectSet, Prewrite};
use crate::txg::TxgManager;
use crate::types::Txg;
use format::{LogHeader, BLOCK_HEADER_SIZE, BLOCK_SIZE_MAX, BLOCK_SIZE_UNIT};
use record::{Record, RecordBody, WRITE_RECORD_FIXED};

thread_local! {
    /// Test hook, off: [`test_hook_log_blocks_do_not_fit`].
    static LOG_BLOCKS_DO_NOT_FIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Test hook, off unless a test sets it: every log block this thread allocates finds no
/// space, as in a pool too full or too fragmented for one (whose free space a test cannot
/// shape before the txg sync's own metadata fails first). Per thread, so that tests running
/// beside it are untouched.
#[doc(hidden)]
pub fn test_hook_log_blocks_do_not_fit(on: bool) {
    LOG_BLOCKS_DO_NOT_FIT.set(on);
}

/// The `sync` property (OpenZFS's): when changes reach stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// fsync and O_SYNC commit the log; other changes wait for their txg.
    #[default]
    Standard,
    /// Every change is committed before it returns.
    Always,
    /// fsync returns at once; changes reach disk with their txg.
    Disabled,
}

impl SyncMode {
    pub fn parse(value: &str) -> Option<SyncMode> {
        match value {
            "standard" => Some(SyncMode::Standard),
            "always" => Some(SyncMode::Always),
            "disabled" => Some(SyncMode::Disabled),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Standard => "standard",
            SyncMode::Always => "always",
            SyncMode::Disabled => "disabled",
        }
    }
}

/// The `logbias` property (OpenZFS's): how writes reach the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Logbias {
    /// Writes shorter than `zil_immediate_write_sz` are copied into log blocks; longer ones
    /// are written in place and their pointers logged.
    #[default]
    Latency,
    /// Every write is written in place and its pointer logged: data is written once.
    Throughput,
}

impl Logbias {
    pub fn parse(value: &str) -> Option<Logbias> {
        match value {
            "latency" => Some(Logbias::Latency),
            "throughput" => Some(Logbias::Throughput),
            _ => None,
        }
    }
}

/// Why a commit failed.
#[derive(Debug, thiserror::Error)]
pub enum ZilError {
    #[error("intent log: {0}")]
    Io(String),
    #[error(transparent)]
    Txg(#[from] crate::txg::TxgError),
}

/// A change waiting in memory to be committed (OpenZFS itx_t).
#[derive(Clone, Debug)]
struct Itx {
    txg: Txg,
    object: u64,
    generation: u64,
    /// Other objects whose fsync needs this record (the directories a namespace change
    /// touched, a rename's replaced target).
    related: Vec<u64>,
    change: Change,
}

impl Itx {
    /// Every object this itx is filed under: its own, then the related ones.
    fn objects(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(self.object).chain(self.related.iter().copied())
    }

    fn is_namespace(&self) -> bool {
        matches!(&self.change, Change::Record(body) if body.is_namespace())
    }
}

/// What an itx records. A write's bytes are read from the file when it is committed
/// (OpenZFS WR_NEED_COPY): they are its newest, which replay in order makes right. Every
/// other change is recorded whole when it is made.
#[derive(Clone, Debug)]
pub enum Change {
    Write { offset: u64, length: u64 },
    Record(RecordBody),
}

/// A block of the live chain.
#[derive(Clone, Debug)]
struct ChainBlock {
    bp: BlockPtr,
    /// Newest txg of its records: obsolete once that txg has synced.
    max_txg: Txg,
    /// Written and flushed.
    durable: bool,
}

/// A claimed chain waiting for (or in) replay.
#[derive(Clone, Debug)]
pub struct PendingReplay {
    pub header: LogHeader,
    pub records: Vec<Record>,
    /// Blocks to free once the replayed changes have synced, each from the txg given.
    pub blocks: Vec<(BlockPtr, Txg)>,
    /// Whether the header records replay's progress (the pool has feature
    /// `replay_sequence`; set at import, after the claim).
    pub keeps_progress: bool,
}

#[derive(Default)]
struct State {
    mode: SyncMode,
    logbias: Logbias,
    next_itx: u64,
    pending: BTreeMap<u64, Itx>,
    by_object: HashMap<u64, BTreeSet<u64>>,
    /// The pending namespace itxs, which every commit takes up to its newest itx.
    namespace: BTreeSet<u64>,
    wanted: HashSet<u64>,
    next_record: u64,
    blocks: VecDeque<ChainBlock>,
    /// The allocated, unwritten block the chain continues with.
    tail: Option<BlockPtr>,
    /// The header naming this chain is on disk once this txg has synced.
    head_txg: Txg,
    /// Blocks to free, each in the sync of the given txg or a later one (one whose space maps
    /// record its allocation).
    to_free: Vec<(BlockPtr, Txg)>,
    replay: Option<PendingReplay>,
    /// The record replay is applying, if any: a change logged meanwhile is that record's.
    replaying: Option<u64>,
    /// Per txg, the newest record replay applied in it (OpenZFS `zl_replayed_seq`): the
    /// header that txg's sync writes says the records up to it are in the tree.
    replayed_in: BTreeMap<Txg, u64>,
    /// Per inode, the newest txg of a change the log does not record (an fsync waits for it).
    /// Kept here, not in a `FileSystem`, so that every handle on the set sees it.
    unlogged: HashMap<u64, Txg>,
    /// Size of the last commit, which sizes the next tail.
    last_commit_bytes: usize,
}

/// Counters of one log.
#[derive(Debug, Default)]
pub struct ZilStats {
    /// fsyncs (and O_SYNC writes, `sync=always` changes) that asked for a commit.
    pub commit_requests: AtomicU64,
    /// Commits that wrote log blocks (one may serve several requests).
    pub commits: AtomicU64,
    /// Log blocks written (and their bytes) in the normal class.
    pub blocks: AtomicU64,
    pub bytes: AtomicU64,
    /// Log blocks written (and their bytes) on a log vdev.
    pub slog_blocks: AtomicU64,
    pub slog_bytes: AtomicU64,
    /// itxs committed.
    pub records: AtomicU64,
    /// Write records committed and the bytes of data they carried (read from the file at
    /// commit: OpenZFS's WR_NEED_COPY).
    pub write_records: AtomicU64,
    pub write_bytes: AtomicU64,
    /// Write records whose data was written in place and only its pointer logged
    /// (WR_INDIRECT), and the bytes of the file they cover.
    pub indirect_records: AtomicU64,
    pub indirect_bytes: AtomicU64,
    /// Namespace and xattr records committed.
    pub namespace_records: AtomicU64,
    /// fsyncs that waited for a txg instead (a change the log does not record, or an error).
    pub txg_waits: AtomicU64,
    /// Records applied by replay at open.
    pub replayed: AtomicU64,
    /// Records replay gave up: one that failed and every record after it.
    pub replay_abandoned: AtomicU64,
}

impl ZilStats {
    /// The counters as OpenZFS's zil kstat names them (`/proc/spl/kstat/zfs/zil`), then
    /// tarn's own: (name, whether it counts bytes, value). tarn has no WR_COPIED (a write's
    /// bytes are read at commit), so those counters stay zero.
    pub fn kstat(&self) -> Vec<(&'static str, bool, u64)> {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        vec![
            ("zil_commit_count", false, load(&self.commit_requests)),
            ("zil_commit_writer_count", false, load(&self.commits)),
            ("zil_itx_count", false, load(&self.records)),
            (
                "zil_itx_indirect_count",
                false,
                load(&self.indirect_records),
            ),
            ("zil_itx_indirect_bytes", true, load(&self.indirect_bytes)),
            ("zil_itx_copied_count", false, 0),
            ("zil_itx_copied_bytes", true, 0),
            ("zil_itx_needcopy_count", false, load(&self.write_records)),
            ("zil_itx_needcopy_bytes", true, load(&self.write_bytes)),
            ("zil_itx_metaslab_normal_count", false, load(&self.blocks)),
            ("zil_itx_metaslab_normal_bytes", true, load(&self.bytes)),
            (
                "zil_itx_metaslab_slog_count",
                false,
                load(&self.slog_blocks),
            ),
            ("zil_itx_metaslab_slog_bytes", true, load(&self.slog_bytes)),
            (
                "zil_itx_namespace_count",
                false,
                load(&self.namespace_records),
            ),
            ("zil_commit_txg_wait_count", false, load(&self.txg_waits)),
            ("zil_replay_count", false, load(&self.replayed)),
            (
                "zil_replay_abandoned_count",
                false,
                load(&self.replay_abandoned),
            ),
        ]
    }
}

/// The intent log of one file system.
pub struct Zil {
    io: Arc<BlockIo>,
    mos: Arc<ObjectSet>,
    txgs: Arc<TxgManager>,
    guid: u64,
    state: Mutex<State>,
    commit_lock: Mutex<()>,
    pub stats: ZilStats,
}

/// How a file's current bytes are read for a write record: `None` if the object is gone or
/// is not the same file.
pub type ReadRange<'a> = &'a dyn Fn(u64, u64, u64, usize) -> Option<Vec<u8>>;

fn round_block(bytes: usize) -> usize {
    (bytes.next_multiple_of(BLOCK_SIZE_UNIT)).clamp(BLOCK_SIZE_UNIT, BLOCK_SIZE_MAX)
}

/// Write records for bytes `start..end` of `itx`'s file as they are now (WR_NEED_COPY), in
/// chunks; fewer if the file is shorter or gone.
fn copy_range(itx: &Itx, start: u64, end: u64, read: ReadRange<'_>, records: &mut Vec<Record>) {
    let mut at = start;
    while at < end {
        let chunk = ((end - at) as usize).min(WRITE_CHUNK_MAX);
        let Some(data) = read(itx.object, itx.generation, at, chunk) else {
            break;
        };
        if data.is_empty() {
            break;
        }
        let got = data.len() as u64;
        records.push(Record {
            sequence: 0,
            txg: itx.txg,
            object: itx.object,
            generation: itx.generation,
            body: RecordBody::Write { offset: at, data },
        });
        at += got;
    }
}

/// A commit whose writes to copy into log blocks (those not written in place) add up to more
/// than this waits for their txg instead: copying them all would hold them in memory and
/// write them twice.
const COMMIT_COPY_BYTES_MAX: u64 = 8 << 20;
/// Entries kept in the unlogged table before synced ones are pruned.
const UNLOGGED_PRUNE: usize = 4096;
/// Size of the first block of a chain.
const FIRST_BLOCK_SIZE: usize = 32 << 10;
/// Largest write record data (so that a record and a few others fit one block).
const WRITE_CHUNK_MAX: usize = 64 << 10;

impl Zil {
    pub fn new(io: Arc<BlockIo>, mos: Arc<ObjectSet>, txgs: Arc<TxgManager>, guid: u64) -> Zil {
        Zil {
            io,
            mos,
            txgs,
            guid,
            state: Mutex::new(State {
                next_record: 1,
                ..State::default()
            }),
            commit_lock: Mutex::new(()),
            stats: ZilStats::default(),
        }
    }

    pub fn guid(&self) -> u64 {
        self.guid
    }

    pub fn mode(&self) -> SyncMode {
        self.state.lock().mode
    }

    pub fn set_mode(&self, mode: SyncMode) {
        self.state.lock().mode = mode;
    }

    pub fn set_logbias(&self, logbias: Logbias) {
        self.state.lock().logbias = logbias;
    }

    /// Record a change of `object` in `txg` (the caller holds `txg`). Nothing is recorded
    /// while a claimed chain waits for replay, or with `sync=disabled`.
    pub fn log(&self, txg: Txg, object: u64, generation: u64, change: Change) {
        self.log_related(txg, object, generation, &[], change);
    }

    /// [`Zil::log`] for a change that the fsync of each of `related` needs as well (a
    /// namespace change: the directories it touched).
    pub fn log_related(
        &self,
        txg: Txg,
        object: u64,
        generation: u64,
        related: &[u64],
        change: Change,
    ) {
        let mut state = self.state.lock();
        if state.replay.is_some() {
            if let Some(sequence) = state.replaying {
                let newest = state.replayed_in.entry(txg).or_default();
                *newest = (*newest).max(sequence);
            }
            return;
        }
        if state.mode == SyncMode::Disabled {
            return;
        }
        let seq = state.next_itx;
        state.next_itx += 1;
        let itx = Itx {
            txg,
            object,
            generation,
            related: related.iter().copied().filter(|&o| o != object).collect(),
            change,
        };
        if itx.is_namespace() {
            state.namespace.insert(seq);
        }
        state.pending.insert(seq, itx);
        for object in std::iter::once(object).chain(related.iter().copied()) {
            state.by_object.entry(object).or_default().insert(seq);
        }
    }

    /// Note a change of `object` in `txg` that the log does not record (pruning entries of
    /// txgs up to `synced` when the table is large).
    pub fn note_unlogged(&self, txg: Txg, object: u64, synced: Txg) {
        let mut state = self.state.lock();
        if state.unlogged.len() > UNLOGGED_PRUNE {
            state.unlogged.retain(|_, newest| *newest > synced);
        }
        let newest = state.unlogged.entry(object).or_insert(txg);
        *newest = (*newest).max(txg);
    }

    /// The newest txg of a change of `object` the log does not record.
    pub fn unlogged(&self, object: u64) -> Option<Txg> {
        self.state.lock().unlogged.get(&object).copied()
    }

    /// Whether `object` has records not yet committed.
    pub fn has_pending(&self, object: u64) -> bool {
        self.state
            .lock()
            .by_object
            .get(&object)
            .is_some_and(|seqs| !seqs.is_empty())
    }

    /// A claimed chain waiting for replay, taken (the caller replays it, then calls
    /// [`Zil::finish_replay`]).
    pub fn pending_replay(&self) -> Option<PendingReplay> {
        self.state.lock().replay.clone()
    }

    /// Set at import by [`claim`].
    pub fn set_pending_replay(&self, replay: PendingReplay) {
        self.state.lock().replay = Some(replay);
    }

    /// Replay is about to apply the record numbered `sequence` (`None`: it is done with
    /// records). The changes the file system logs meanwhile are that record's, and the txg
    /// they join records it as replayed ([`PendingReplay::keeps_progress`]).
    pub fn set_replaying(&self, sequence: Option<u64>) {
        self.state.lock().replaying = sequence;
    }

    /// Whether replay is applying a record (its changes must reach [`Zil::log`] whatever the
    /// `sync` setting, to record its progress).
    pub fn is_replaying(&self) -> bool {
        self.state.lock().replaying.is_some()
    }

    /// The replayed changes have synced: free the old chain in the next sync, with a header
    /// naming the new chain (or none). `objset` is dirtied so that sync happens.
    pub fn finish_replay(&self, objset: &ObjectSet) -> Result<(), ZilError> {
        let hold = self.txgs.assign()?;
        {
            let mut state = self.state.lock();
            if let Some(replay) = state.replay.take() {
                state.to_free.extend(replay.blocks);
            }
            state.replaying = None;
            state.replayed_in.clear();
        }
        objset.dirty_log(hold.txg());
        Ok(())
    }

    /// Start a chain if there is none, so that the first fsync finds its header on disk.
    pub fn start(&self, objset: &ObjectSet) -> Result<(), ZilError> {
        let _commit = self.commit_lock.lock();
        self.ensure_chain(objset)
    }

    fn ensure_chain(&self, objset: &ObjectSet) -> Result<(), ZilError> {
        {
            let state = self.state.lock();
            if state.tail.is_some() || state.replay.is_some() {
                return Ok(());
            }
        }
        let hold = self.txgs.assign_nothrottle()?;
        let txg = hold.txg();
        let seed = format::Seed {
            guid: self.guid,
            chain: crate::types::Guid::random().0,
            sequence: 1,
        };
        let tail = self.allocate(objset, txg, FIRST_BLOCK_SIZE, seed)?;
        let mut state = self.state.lock();
        state.tail = Some(tail);
        state.head_txg = txg;
        Ok(())
    }

    /// Allocate a log block of `size` bytes in `txg` (held by the caller) for `seed`.
    fn allocate(
        &self,
        objset: &ObjectSet,
        txg: Txg,
        size: usize,
        seed: format::Seed,
    ) -> Result<BlockPtr, ZilError> {
        let allocated = (size as u64).next_multiple_of(1 << self.io.ashift);
        let storage = MosSpaceStorage { mos: &self.mos };
        // Log vdevs serve latency: under `logbias=throughput` the chain stays in the normal
        // class and leaves the log devices to the sets that want them.
        let placed = if LOG_BLOCKS_DO_NOT_FIT.get() {
            Err(crate::space::SpaceError::NoSpace {
                size_allocated: allocated,
            })
        } else if self.state.lock().logbias == Logbias::Throughput {
            self.io.space.allocate(allocated, txg, &[], &storage)
        } else {
            self.io.space.allocate_log(allocated, txg, &storage)
        };
        let placed =
            placed.map_err(|error| ZilError::Io(format!("allocating a log block: {error}")))?;
        objset.dirty_log(txg);
        let dva = Dva {
            vdev: placed.vdev,
            offset: placed.offset,
            size_allocated: placed.asize,
            gang: false,
        };
        Ok(chain::log_pointer(dva, size as u32, txg, seed))
    }

    /// Commit every record of `object` (and of the files whose fsync waits meanwhile): when
    /// this returns, they survive a power cut. `read` reads a file's current bytes.
    pub fn commit(
        &self,
        objset: &ObjectSet,
        object: u64,
        read: ReadRange<'_>,
    ) -> Result<(), ZilError> {
        let target = {
            let mut state = self.state.lock();
            if state.mode == SyncMode::Disabled || state.replay.is_some() {
                return Ok(());
            }
            self.stats.commit_requests.fetch_add(1, Ordering::Relaxed);
            match state.by_object.get(&object).and_then(|seqs| seqs.last()) {
                None => return Ok(()),
                Some(&last) => {
                    state.wanted.insert(object);
                    last
                }
            }
        };
        let _commit = self.commit_lock.lock();
        let itxs: Vec<(u64, Itx)> = {
            let mut state = self.state.lock();
            let served = state
                .by_object
                .get(&object)
                .and_then(|seqs| seqs.first())
                .is_none_or(|&first| first > target);
            if served {
                return Ok(());
            }
            let mut objects: Vec<u64> = state.wanted.drain().collect();
            objects.push(object);
            objects.sort_unstable();
            objects.dedup();
            let mut seqs: BTreeSet<u64> = objects
                .iter()
                .filter_map(|object| state.by_object.get(object))
                .flat_map(|seqs| seqs.iter().copied())
                .collect();
            // Every namespace record up to the newest one taken goes too, in order: a file's
            // name may hang on directories that other records made or moved (OpenZFS commits
            // a set's namespace itxs the same way, all up to the fsync's).
            if let Some(&newest) = seqs.last() {
                seqs.extend(state.namespace.range(..newest).copied());
            }
            seqs.iter()
                .filter_map(|seq| state.pending.get(seq).map(|itx| (*seq, itx.clone())))
                .collect()
        };
        if itxs.is_empty() {
            return Ok(());
        }
        // A record may depend on a change the log does not record (a rename with a whiteout,
        // a fallocate, an ACL rewrite) of an object it names: that change's txg must be on
        // disk before the record is, or replay would apply the record without it.
        let dependency = {
            let state = self.state.lock();
            itxs.iter()
                .flat_map(|(_, itx)| itx.objects())
                .filter_map(|object| state.unlogged.get(&object).copied())
                .max()
        };
        if let Some(txg) = dependency.filter(|txg| *txg > self.txgs.last_synced()) {
            self.stats.txg_waits.fetch_add(1, Ordering::Relaxed);
            self.txgs.wait_synced(Some(txg))?;
        }
        let seqs: Vec<u64> = itxs.iter().map(|(seq, _)| *seq).collect();
        match self.write_itxs(objset, &seqs, itxs, read) {
            Ok(()) => {
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(error) => {
                // The chain may now end at a block that failed: make everything durable the
                // slow way, then start a new chain (the old one is freed once obsolete).
                log::error!("intent log commit failed, waiting for a txg instead: {error}");
                self.stats.txg_waits.fetch_add(1, Ordering::Relaxed);
                self.txgs.wait_synced(None)?;
                let mut state = self.state.lock();
                let open = self.txgs.open_txg();
                let tail = state.tail.take();
                let old: Vec<(BlockPtr, Txg)> = state
                    .blocks
                    .drain(..)
                    .map(|block| (block.bp, open))
                    .chain(tail.map(|bp| (bp, open)))
                    .collect();
                state.to_free.extend(old);
                for seq in &seqs {
                    Self::forget(&mut state, *seq);
                }
                Ok(())
            }
        }
    }

    fn forget(state: &mut State, seq: u64) {
        let Some(itx) = state.pending.remove(&seq) else {
            return;
        };
        state.namespace.remove(&seq);
        for object in itx.objects() {
            if let Some(seqs) = state.by_object.get_mut(&object) {
                seqs.remove(&seq);
                if seqs.is_empty() {
                    state.by_object.remove(&object);
                }
            }
        }
    }

    /// Whether `itx` is logged by writing its blocks in place (WR_INDIRECT) in a commit that
    /// holds txg `held` open: a write of its txg (an older txg takes no more changes, so its
    /// blocks can no longer be adopted), under `logbias=throughput`, or large enough while the
    /// pool has no log vdev (with one, the fast log device takes the copy, as OpenZFS's
    /// `zfs_log_write` decides with `spa_has_slogs`).
    fn written_in_place(&self, itx: &Itx, held: Txg, logbias: Logbias) -> bool {
        match itx.change {
            Change::Write { length, .. } => {
                itx.txg == held
                    && (logbias == Logbias::Throughput
                        || (length >= self.io.tunables.zil_immediate_write_sz
                            && !self.io.space.has_log_vdevs()))
            }
            Change::Record(_) => false,
        }
    }

    /// Records for `itxs` in a commit holding txg `held`: large writes of `held` written in
    /// place (their pointers in the records, every block of the commit written at once), other
    /// write data read now, split into chunks.
    fn records(
        &self,
        objset: &ObjectSet,
        itxs: &[(u64, Itx)],
        read: ReadRange<'_>,
        held: Txg,
    ) -> Result<Vec<Record>, ZilError> {
        /// A record, or one waiting for the pointer of a block written in place.
        enum Slot {
            Ready(Record),
            InPlace {
                /// Index of its itx in `itxs`.
                itx: usize,
                offset: u64,
                length: u64,
                block_offset: u64,
                prepared: usize,
            },
        }
        let logbias = self.state.lock().logbias;
        let storage = MosSpaceStorage { mos: &self.mos };
        let mut slots = Vec::new();
        let mut prepared = Vec::new();
        let mut preparing: HashMap<(u64, u64, u64), usize> = HashMap::new();
        let mut copied = Vec::new();
        let record = |itx: &Itx, body| Record {
            sequence: 0,
            txg: itx.txg,
            object: itx.object,
            generation: itx.generation,
            body,
        };
        for (index, (_, itx)) in itxs.iter().enumerate() {
            match &itx.change {
                Change::Write { offset, length } if self.written_in_place(itx, held, logbias) => {
                    let object = crate::types::ObjectId(itx.object);
                    let Ok(info) = objset.info(object) else {
                        continue;
                    };
                    let block_size = info.data_block_size as u64;
                    let end = offset.saturating_add(*length);
                    let mut at = *offset;
                    while at < end {
                        let blkid = at / block_size;
                        let block_start = blkid * block_size;
                        let piece_end = end.min(block_start + block_size);
                        let indirect = |bp| {
                            record(
                                itx,
                                RecordBody::WriteIndirect {
                                    offset: at,
                                    length: piece_end - at,
                                    block_offset: at - block_start,
                                    bp,
                                },
                            )
                        };
                        // A block that two writes of this commit touch is written once.
                        if let Some(&index_prepared) =
                            preparing.get(&(itx.object, itx.generation, blkid))
                        {
                            slots.push(Slot::InPlace {
                                itx: index,
                                offset: at,
                                length: piece_end - at,
                                block_offset: at - block_start,
                                prepared: index_prepared,
                            });
                            at = piece_end;
                            continue;
                        }
                        let prewrite = objset
                            .prepare_prewrite(held, object, itx.generation, blkid, &storage)
                            .map_err(|error| ZilError::Io(format!("writing in place: {error}")))?;
                        match prewrite {
                            Prewrite::Prepared(block) => {
                                slots.push(Slot::InPlace {
                                    itx: index,
                                    offset: at,
                                    length: piece_end - at,
                                    block_offset: at - block_start,
                                    prepared: prepared.len(),
                                });
                                preparing
                                    .insert((itx.object, itx.generation, blkid), prepared.len());
                                prepared.push(block);
                            }
                            Prewrite::Written(bp) => slots.push(Slot::Ready(indirect(bp))),
                            // Not dirty as a block of its own (freed since, a hole, embedded):
                            // its current bytes go into the log.
                            Prewrite::NotDirty => {
                                copy_range(itx, at, piece_end, read, &mut copied);
                                slots.extend(copied.drain(..).map(Slot::Ready));
                            }
                        }
                        at = piece_end;
                    }
                }
                Change::Write { offset, length } => {
                    copy_range(
                        itx,
                        *offset,
                        offset.saturating_add(*length),
                        read,
                        &mut copied,
                    );
                    slots.extend(copied.drain(..).map(Slot::Ready));
                }
                Change::Record(body) => slots.push(Slot::Ready(record(itx, body.clone()))),
            }
        }
        // Every block is written (or given back) before the first failure is reported.
        let written: Vec<BlockPtr> = objset
            .finish_prewrites(prepared)
            .into_iter()
            .collect::<Result<_, _>>()
            .map_err(|error| ZilError::Io(format!("writing in place: {error}")))?;
        Ok(slots
            .into_iter()
            .map(|slot| match slot {
                Slot::Ready(record) => record,
                Slot::InPlace {
                    itx,
                    offset,
                    length,
                    block_offset,
                    prepared,
                } => record(
                    &itxs[itx].1,
                    RecordBody::WriteIndirect {
                        offset,
                        length,
                        block_offset,
                        bp: written[prepared].clone(),
                    },
                ),
            })
            .collect())
    }

    /// Write `itxs` (their sequence numbers `seqs`, forgotten once they are durable).
    fn write_itxs(
        &self,
        objset: &ObjectSet,
        seqs: &[u64],
        itxs: Vec<(u64, Itx)>,
        read: ReadRange<'_>,
    ) -> Result<(), ZilError> {
        self.ensure_chain(objset)?;
        let head_txg = self.state.lock().head_txg;
        if head_txg > self.txgs.last_synced() {
            self.stats.txg_waits.fetch_add(1, Ordering::Relaxed);
            self.txgs.wait_synced(Some(head_txg))?;
        }
        // The hold keeps the txg of this commit's allocations from syncing before its blocks
        // are on disk (module documentation), and the blocks of its writes from syncing
        // before they are written in place. Writes copied into log blocks are bounded: past
        // `COMMIT_COPY_BYTES_MAX` (writes of a txg that no longer takes changes), the commit
        // waits for that txg instead, which makes them durable and obsolete.
        let mut live = itxs;
        let hold = loop {
            let hold = self.txgs.assign_nothrottle()?;
            let logbias = self.state.lock().logbias;
            let copied = live.iter().filter_map(|(_, itx)| match itx.change {
                Change::Write { length, .. }
                    if !self.written_in_place(itx, hold.txg(), logbias) =>
                {
                    Some((length, itx.txg))
                }
                _ => None,
            });
            let (bytes, newest) = copied.fold((0u64, Txg(0)), |(bytes, newest), (length, txg)| {
                (bytes + length, newest.max(txg))
            });
            if bytes <= COMMIT_COPY_BYTES_MAX {
                break hold;
            }
            drop(hold);
            self.stats.txg_waits.fetch_add(1, Ordering::Relaxed);
            self.txgs.wait_synced(Some(newest))?;
            live.retain(|(_, itx)| itx.txg > newest);
        };
        let txg = hold.txg();
        let records = self.records(objset, &live, read, txg)?;
        let mut queue: VecDeque<Record> = records.into();
        let total: usize = queue.iter().map(Record::encoded_size).sum();
        let mut written: Vec<BlockPtr> = Vec::new();
        let result = (|| -> Result<(), ZilError> {
            while !queue.is_empty() {
                let current = self.state.lock().tail.clone().expect("chain started");
                let size = current.size_logical as usize;
                let mut encoded: Vec<u8> = Vec::new();
                let mut max_txg = Txg(0);
                let mut state = self.state.lock();
                while let Some(mut record) = queue.pop_front() {
                    let room = size - BLOCK_HEADER_SIZE - encoded.len();
                    if record.encoded_size() > room {
                        let split_at = match &record.body {
                            RecordBody::Write { data, .. } if room >= WRITE_RECORD_FIXED + 512 => {
                                ((room - WRITE_RECORD_FIXED) & !7).min(data.len() - 1)
                            }
                            _ => 0,
                        };
                        if split_at == 0 {
                            // It goes in the next block, sized for it (a record that does
                            // not fit this block even empty leaves it empty).
                            assert!(
                                record.encoded_size() <= BLOCK_SIZE_MAX - BLOCK_HEADER_SIZE,
                                "a record larger than the largest log block"
                            );
                            queue.push_front(record);
                            break;
                        }
                        if let RecordBody::Write { offset, data } = &mut record.body {
                            let rest = data.split_off(split_at);
                            queue.push_front(Record {
                                body: RecordBody::Write {
                                    offset: *offset + split_at as u64,
                                    data: rest,
                                },
                                ..record.clone()
                            });
                        }
                    }
                    record.sequence = state.next_record;
                    state.next_record += 1;
                    match &record.body {
                        RecordBody::Write { data, .. } => {
                            self.stats.write_records.fetch_add(1, Ordering::Relaxed);
                            self.stats
                                .write_bytes
                                .fetch_add(data.len() as u64, Ordering::Relaxed);
                        }
                        RecordBody::WriteIndirect { length, .. } => {
                            self.stats.indirect_records.fetch_add(1, Ordering::Relaxed);
                            self.stats
                                .indirect_bytes
                                .fetch_add(*length, Ordering::Relaxed);
                        }
                        RecordBody::Setattr { .. } => {}
                        _ => {
                            self.stats.namespace_records.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    max_txg = max_txg.max(record.txg);
                    record.encode_into(&mut encoded);
                }
                drop(state);
                let remaining: usize = queue.iter().map(Record::encoded_size).sum();
                let next_size = if remaining > 0 {
                    round_block(remaining + BLOCK_HEADER_SIZE)
                } else {
                    round_block(total.max(self.state.lock().last_commit_bytes) + BLOCK_HEADER_SIZE)
                };
                let seed = format::Seed::of(&current);
                let next = self.allocate(objset, txg, next_size, seed.next())?;
                let block = format::encode_block(size, seed, &next, &encoded, !queue.is_empty());
                {
                    let mut state = self.state.lock();
                    state.blocks.push_back(ChainBlock {
                        bp: current.clone(),
                        max_txg,
                        durable: false,
                    });
                    state.tail = Some(next);
                }
                // Only the used bytes (padded to the sector) are written, as OpenZFS does: the
                // checksum covers them alone, and whatever lies after them is never read.
                let used = &block[..BLOCK_HEADER_SIZE + encoded.len()];
                chain::write_block(&self.io, &current, used).map_err(ZilError::Io)?;
                let on_log_vdev =
                    (self.io.vdevs.top(current.dvas[0].vdev)).is_some_and(|top| top.is_log());
                let (blocks, bytes) = if on_log_vdev {
                    (&self.stats.slog_blocks, &self.stats.slog_bytes)
                } else {
                    (&self.stats.blocks, &self.stats.bytes)
                };
                blocks.fetch_add(1, Ordering::Relaxed);
                bytes.fetch_add(used.len() as u64, Ordering::Relaxed);
                written.push(current);
            }
            // Sync-class writes are durable when they complete (vdev/queue.rs): the log
            // blocks and the blocks written in place need no flush of their vdevs.
            Ok(())
        })();
        drop(hold);
        result?;
        let mut state = self.state.lock();
        state.last_commit_bytes = total;
        for block in state.blocks.iter_mut() {
            if written.contains(&block.bp) {
                block.durable = true;
            }
        }
        self.stats
            .records
            .fetch_add(seqs.len() as u64, Ordering::Relaxed);
        for seq in seqs {
            Self::forget(&mut state, *seq);
        }
        Ok(())
    }

    /// Syncing context, first pass of txg `txg` for this set: drop records the txg makes
    /// obsolete, free the blocks holding only such records, and say what the header is.
    pub fn sync(&self, txg: Txg) -> Result<LogHeader, ObjectError> {
        let mut frees: Vec<BlockPtr> = Vec::new();
        let header = {
            let mut state = self.state.lock();
            // Records of this txg stay until a later sync: `txg` is not on disk until its
            // uberblock is, and an fsync meanwhile must still commit them (it would otherwise
            // find nothing to do and return before the data is durable).
            let obsolete: Vec<u64> = state
                .pending
                .iter()
                .filter(|(_, itx)| itx.txg < txg)
                .map(|(seq, _)| *seq)
                .collect();
            for seq in obsolete {
                Self::forget(&mut state, seq);
            }
            // `from` is a txg whose space maps record the block's allocation (for a claimed
            // block, the claim's). Not its birth: a block claimed at import may be born in a
            // txg the pool has not reached (empty txgs write no uberblock), and waiting for
            // that txg leaked it meanwhile, and for good at an export before it.
            let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut state.to_free)
                .into_iter()
                .partition(|(_, from)| *from <= txg);
            state.to_free = later;
            frees.extend(now.into_iter().map(|(bp, _)| bp));
            let later = state.replayed_in.split_off(&Txg(txg.0 + 1));
            let replayed = std::mem::replace(&mut state.replayed_in, later)
                .into_values()
                .max();
            if let Some(replay) = &mut state.replay {
                if let Some(replayed) = replayed.filter(|_| replay.keeps_progress) {
                    replay.header.replayed_through = replay.header.replayed_through.max(replayed);
                }
                replay.header.clone()
            } else {
                while state.blocks.front().is_some_and(|block| {
                    block.durable && block.max_txg <= txg && block.bp.birth_logical <= txg
                }) {
                    let block = state.blocks.pop_front().expect("checked");
                    frees.push(block.bp);
                }
                let first = state
                    .blocks
                    .front()
                    .map(|block| block.bp.clone())
                    .or_else(|| state.tail.clone())
                    .unwrap_or_else(|| BlockPtr::hole(Txg(0), ObjectType::IntentLog, 0));
                LogHeader {
                    first,
                    claim_txg: Txg(0),
                    claimed_through: Txg(0),
                    replayed_through: 0,
                }
            }
        };
        for bp in frees {
            self.io.free(&bp, txg)?;
        }
        Ok(header)
    }

    /// Syncing context of txg `txg` (rollback): the chain describes changes that are gone.
    /// Drop every record and give back every block now, as [`Zil::destroy`]; the dataset's
    /// log floor makes the snapshot's header (which the rollback commits) name no chain.
    pub fn discard(&self, txg: Txg) -> Result<(), ObjectError> {
        self.destroy(txg)
    }

    /// Syncing context of txg `txg`, the file system is destroyed: give back every log block
    /// (its chain, its tail, blocks waiting to be freed, a claimed chain never replayed). A
    /// block whose allocation is recorded in `txg` or earlier is freed; one allocated in a
    /// later txg, not synced yet, is unallocated.
    pub fn destroy(&self, txg: Txg) -> Result<(), ObjectError> {
        let entries: Vec<(BlockPtr, Txg)> = {
            let mut state = self.state.lock();
            state.pending.clear();
            state.by_object.clear();
            state.namespace.clear();
            let mut entries: Vec<(BlockPtr, Txg)> = state
                .blocks
                .drain(..)
                .map(|block| {
                    let birth = block.bp.birth_logical;
                    (block.bp, birth)
                })
                .collect();
            if let Some(tail) = state.tail.take() {
                let birth = tail.birth_logical;
                entries.push((tail, birth));
            }
            entries.append(&mut state.to_free);
            if let Some(replay) = state.replay.take() {
                entries.extend(replay.blocks);
            }
            entries
        };
        for (bp, allocated) in entries {
            self.io.give_back(&bp, allocated, Some(txg))?;
        }
        Ok(())
    }
}

/// The object set asks its attached log for the header at each sync and drops it at a
/// rollback; both are the methods above.
impl AttachedLog for Zil {
    fn sync(&self, txg: Txg) -> Result<LogHeader, ObjectError> {
        Zil::sync(self, txg)
    }

    fn discard(&self, txg: Txg) -> Result<(), ObjectError> {
        Zil::discard(self, txg)
    }
}
