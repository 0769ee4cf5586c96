//! Pool layer: create, import, export and destroy pools; the pool configuration; the sync driver
//! that writes each txg out and commits it with an uberblock (`sync.rs`; OpenZFS spa*.c).
//!
//! # Overview
//! A pool is a tree of vdevs, a space manager over their metaslabs, the MOS (an object set
//! stored with three copies) and the datasets the MOS describes. The pool owns the sync thread:
//! the txg layer decides *when* a txg syncs and calls [`PoolCore::sync_txg`] to do it. A
//! writable pool also owns the livelist reader ([`livelists`]), which reads livelist sub-lists
//! in open context for the sync thread to apply.
//!
//! # On-disk structures
//! Labels (four per leaf: config and uberblock ring) belong to the vdev layer; the uberblock
//! format is in [`uberblock`]. MOS object 1 is the *object directory*, a key/value object mapping
//! names to MOS objects: `root_dataset` (the root dataset directory), `deferred_frees` (the list
//! of blocks freed in late sync passes, freed for real in the next txg), `ms_array/<vdev>` (each
//! top-level vdev's metaslab array) and, with the log space map, `log_spacemap` (its directory,
//! docs/design/02-space.md §2.6a). Metaslab arrays, space maps and logs are MOS objects too.
//!
//! # Commit protocol (one txg)
//! 0. A txg with nothing to do (no dirty object set, no destroy, clean config, empty
//!    deferred-free list) is not synced at all: no block, label or uberblock is written, and an
//!    explicit sync of an idle pool costs nothing. Only while freed space waits in the
//!    metaslabs' defer trees is such a txg committed with an uberblock alone, because freed
//!    space is released by committed txgs (invariant 3 and rewind count uberblocks on disk).
//! 1. Pass 1: free the blocks deferred by the previous txg; sync every dirty dataset's object
//!    set and write its dataset record into the MOS.
//! 2. Passes 1..n: append every dirty metaslab's allocations and frees to its space map (MOS
//!    writes), then sync the MOS, then persist the frees this pass deferred. Appending before
//!    the MOS sync means the space maps the datasets touched are copied in pass 1, when frees
//!    are still immediate. From pass `sync_pass_rewrite` blocks born in this txg whose
//!    (allocation-unit rounded) physical size is unchanged are rewritten in place, and from pass
//!    `sync_pass_deferred_free` frees wait for the next txg, so a pass that allocates nothing
//!    ends the sync: usually pass 2, sometimes 3. Pass 1 also copies the last block of the
//!    space map of every metaslab the allocator keeps active (one per copy rank per vdev),
//!    since pass 1's MOS blocks land there: a map first appended in pass 2 would copy an old
//!    block (allocation, free deferred to the list, the list copied in pass 3, recorded in
//!    pass 4; with metadata copies+1 every other txg took 4 passes). The pass count is capped
//!    at `sync_pass_max` and exceeding it fails the sync.
//! 3. Flush every vdev (everything the uberblock will point to is durable).
//! 4. If the config changed: write the even labels (L0, L2) and flush.
//! 5. Write the uberblock into slot `txg % slots` of every label of every leaf; flush.
//! 6. If the config changed: write the odd labels (L1, L3); flush.
//! 7. `sync_done`: rotate deferred frees, install the new trees as the synced ones.
//!
//! Cost of a txg (docs/design/05-txg.md §4, held by `tests/sync_convergence.rs`): under the default
//! tunables a one-block change in a file writes 45 blocks (every copy counted: MOS blocks three
//! times, file-system metadata twice, file data once) in 2 passes, about 320 KiB, plus the
//! uberblock in four label slots per leaf.
//!
//! Freed space waiting in the defer trees is work without dirty data: after each sync the pool
//! tells the txg layer whether any is left (`TxgManager::set_pending_work`), and the txg timer
//! commits txgs that write an uberblock alone, naming the same tree (invariant 3 counts
//! committed txgs), until it is allocatable: at most two after the last free; then the pool is
//! idle and writes nothing. The deferred-free list (late-pass frees of MOS blocks) waits for the
//! next txg with changes, as in OpenZFS: carrying it out dirties the MOS, whose late passes
//! defer frees again, so on an otherwise idle pool it would never end.
//!
//! A crash is a power cut: writes since the last flush may be lost, torn or land in any order.
//! The flush of step 3 keeps an uberblock from landing before the blocks it names; the flush
//! after step 5 keeps a sync from returning before its uberblock is durable (the power-cut
//! test `tests/crash_power_cut.rs` fails without either). A crash before step 5 completes leaves
//! the previous uberblock the newest valid one: nothing it references was overwritten
//! (invariant 1: copy-on-write, and freed space is not reused for two txgs, invariant 3). A torn
//! uberblock fails its checksum and is skipped. A crash during step 4 or 6 leaves one pair of
//! labels valid, which the vdev layer reads.
//!
//! # Import
//! The order of the steps is in docs/design/10-pool.md §5b (the log space map is replayed before
//! anything can allocate). Scan the named directories for leaves whose labels name the pool; take
//! the newest config; refuse the pool if a top-level vdev has no usable leaf, naming why
//! (`import_state.rs`, which also gives the `pool import` listing each vdev's state); refuse,
//! unless `-f` ([`ImportOptions::any_host`]), a pool whose labels say it is active on another host
//! (the flock does not reach a disk shared between hosts; zpool's hostid check) and a destroyed one
//! (`-D`); open every leaf with an exclusive flock (a crashed holder's lock vanished with it, so no -f is
//! needed, invariant 7); collect every uberblock whose checksum and guid sum verify; try them
//! newest first, falling back to older ones within `TXG_DEFER_SIZE` txg numbers of the newest
//! ([`fallback_uberblocks`]) when the MOS of a newer one cannot be read. `-F`
//! ([`ImportOptions::rewind`]) goes further back, to the newest tree that opens and checks clean.
//! A writable import that opened an older uberblock erases the abandoned newer ones before its
//! first commit. Damage below the MOS does not fail the import: a dataset whose object set
//! cannot be opened is left unavailable and reported ([`ImportReport::damaged`]).
//!
//! # Locking
//! The sync thread is the only writer of on-disk state. Open-context callers (the livelist
//! reader among them) go through object sets (their own locks) and the txg layer's holds.

mod admission;
mod attach;
pub mod bookmarks;
use admission::PoolReservation;
pub use sync::PoolFreer;
pub mod background_free;
mod clones;
mod create;
mod dataset_props;
pub mod datasets;
pub mod delegation;
mod destroy;
mod devices;
pub mod dtl;
pub mod errlog;
mod export;
mod facade;
pub mod failmode;
pub mod features;
pub mod history;
pub mod holds;
mod import;
mod import_state;
mod l2cache;
mod leaf_choice;
pub mod limits;
pub mod livelists;
mod names;
mod new_device;
pub mod owner_quotas;
pub mod props;
pub mod raidz_expand;
pub mod receiving;
mod resume_tracker;
pub mod scan;
mod scan_phys;
mod scan_visits;
pub mod snapshots;
mod stats;
mod sync;
pub mod uberblock;
pub mod user_holds;
mod vdev_change;
mod vdev_spec;

pub use vdev_spec::{parse_vdev_layout, VdevLayout, VdevSpec, VDEV_KEYWORDS};

pub use attach::{is_raidz_vdev_name, AddedVdev};
pub use facade::WeakPool;
pub use features::{
    Feature, FeatureClass, FeatureState, DELEGATION_FEATURE, EMBEDDED_DATA_FEATURE, FEATURES_KNOWN,
    LIVELIST_FEATURE, LOG_SPACEMAP_FEATURE, RAIDZ_EXPANSION_FEATURE, RAIDZ_FEATURE,
    RECEIVED_PROPERTIES_FEATURE, REPLAY_SEQUENCE_FEATURE, SCAN_CATCH_UP_FEATURE,
    SPACE_LIMITS_FEATURE, STALLED_FREES_FEATURE, USER_HOLDS_FEATURE, USER_PROPERTIES_FEATURE,
};
pub use import_state::{ImportState, LeafImportState, TopImportState, VdevProblem};
pub use raidz_expand::RaidzExpansionStatus;
pub use stats::{PoolIostat, VdevIostat};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;

use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};

use crate::block::blkptr::{ChecksumType, Compression, ObjectType};
use crate::block::pipeline::{BlockIo, PipelineError};
use crate::dataset::Dataset;
use crate::object::adapters::KvObject;
use crate::object::bpobj::{BpObj, ObjectSetBpStore};
use crate::object::{kv, ObjectError, ObjectProps, ObjectSet, Tx};
use crate::space::SpaceError;
use crate::tunables::Tunables;
use crate::txg::{TxgError, TxgManager};
use crate::types::{Guid, ObjectId, Txg, VdevId};
use crate::vdev::label::{self, LabelConfig, PoolState};
use crate::vdev::{BlockDevice, VdevError};
use uberblock::Uberblock;

/// Version of the pool format (config, MOS layout and block payloads).
///
/// Version 2: compressed blocks are self-delimiting payloads (a header with the stream length
/// and the zstd level) whose physical size is rounded up to the pool's allocation unit.
/// Version 1 stored bare compressed streams, which this build cannot read; no release wrote
/// them, so there is no migration.
pub const POOL_VERSION: u64 = 2;
/// The oldest pool format this build reads.
pub const POOL_VERSION_MIN: u64 = 2;
const _: () = assert!(POOL_VERSION == label::LABEL_CONFIG_VERSION);
/// MOS object number of the object directory.
pub const MOS_OBJECT_DIRECTORY: ObjectId = ObjectId(1);
/// Copies of every MOS block (DESIGN.md §4).
pub const MOS_COPIES: u8 = 3;
/// MOS directory key naming the log space map directory (docs/design/02-space.md §2.6a).
pub const LOG_SPACEMAP_KEY: &str = "log_spacemap";

/// Errors of the pool layer: what went wrong and, where it helps, what to do.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(transparent)]
    Vdev(#[from] VdevError),
    #[error(transparent)]
    Object(#[from] ObjectError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Space(#[from] SpaceError),
    #[error(transparent)]
    Txg(#[from] TxgError),
    #[error("invalid pool name {0:?}: names start with a letter, use letters, digits, '_', '-', '.', ':', and are not mirror, raidz, spare, log or cache")]
    BadName(String),
    #[error("invalid vdev specification: {0}")]
    BadVdevSpec(String),
    #[error("no pool named {0:?} found in {1}; use -d to name the directory holding its vdevs")]
    NotFound(String, String),
    #[error("pool {0:?} was destroyed; its vdevs can be reused for a new pool (until they are, pool import -D -f imports it again)")]
    Destroyed(String),
    #[error("pool {0:?} was destroyed: import it again with -D and -f together")]
    DestroyedNeedsForce(String),
    #[error("cannot import {name:?}: the pool was last in use on host {host:?} and was not exported there; if that host still uses it, importing it here too would corrupt it: export it there, or import with -f once that host no longer uses it")]
    InUseElsewhere { name: String, host: String },
    #[error("more than one pool named {0:?} was found; import it by guid instead")]
    Ambiguous(String),
    #[error("pool {name:?} cannot be imported: missing {what}; a pool opens only with every top-level vdev: attach the missing devices and try again")]
    MissingVdev { name: String, what: String },
    #[error("pool {name:?} is missing log {what}: the intent-log records on it (changes fsync returned for since the last txg) would be lost; put the device back, or import with -m to discard them")]
    MissingLogVdev { name: String, what: String },
    #[error("pool {0:?} cannot be opened: no uberblock could be read ({1})")]
    NoUsableUberblock(String, String),
    #[error("pool {name:?} needs features this build does not support: {features}")]
    UnsupportedFeatures { name: String, features: String },
    #[error("pool {name:?} uses features this build does not support: {features}; they are read-only compatible: the pool can be imported read-only (pool import -o readonly=on)")]
    UnsupportedFeaturesForWrite { name: String, features: String },
    #[error("pool {name:?} has format version {version}, older than the oldest this build reads ({POOL_VERSION_MIN}): its compressed blocks carry no length header; recreate the pool with this build")]
    FormatTooOld { name: String, version: u64 },
    #[error("corrupt pool metadata: {0}")]
    Corrupt(String),
    #[error("{0}")]
    BadTunables(String),
    #[error("file system: {0}")]
    Fs(#[from] crate::fs::FsError),
    #[error("pool is read-only")]
    ReadOnly,
    #[error("sync of txg {txg} failed: {why}")]
    SyncFailed { txg: Txg, why: String },
    #[error("invalid dataset name {0:?}: {1}")]
    BadDatasetName(String, String),
    #[error("dataset {0:?} does not exist")]
    DatasetNotFound(String),
    #[error("dataset {0:?} already exists")]
    DatasetExists(String),
    #[error("cannot destroy {0:?}: {1}")]
    DatasetBusy(String, String),
    #[error("{0}")]
    BadProperty(String),
    /// A property whose value could not be read (the state it is computed from is damaged).
    #[error("{dataset}: {property}: {why}")]
    PropertyUnreadable {
        dataset: String,
        property: String,
        why: String,
    },
    #[error("dataset {0:?} is unavailable: {1}")]
    DatasetUnavailable(String, String),
    #[error("{0}")]
    Refused(String),
    /// An administrative change refused because the pool's free space is down to the slop it
    /// keeps for syncing (OpenZFS's ENOSPC from a sync task's space check).
    #[error("cannot {0}: out of space; the pool keeps its last free space for syncing, so destroy snapshots, clones or files first")]
    OutOfSpace(String),
    /// A namespace change that would move space past a quota (a rename, a promote).
    #[error("cannot {0} (disk quota exceeded)")]
    QuotaExceeded(String),
}

/// Check a pool name against the rules of CLI.md.
pub fn validate_pool_name(name: &str) -> Result<(), PoolError> {
    let reserved = [
        "mirror", "raidz", "spare", "log", "cache", "draid", "special", "dedup",
    ];
    let ok = name.len() <= 200
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c))
        && !reserved.iter().any(|word| {
            name.starts_with(word) && name[word.len()..].chars().all(|c| c.is_ascii_digit())
        });
    if ok {
        Ok(())
    } else {
        Err(PoolError::BadName(name.to_string()))
    }
}

/// Wraps each device as it is opened: tests use it to put a fault-injecting layer under a pool.
pub type DeviceWrapper =
    Arc<dyn Fn(&Path, Arc<dyn BlockDevice>) -> Arc<dyn BlockDevice> + Send + Sync>;

/// Options for creating a pool.
#[derive(Clone)]
pub struct CreateOptions {
    pub name: String,
    /// Data vdevs: at least one.
    pub vdevs: Vec<VdevSpec>,
    /// Log vdevs (`pool create ... log DEV`): the intent log allocates there.
    pub log: Vec<VdevSpec>,
    /// Cache devices (`pool create ... cache DEV`): the L2ARC.
    pub cache: Vec<PathBuf>,
    /// Create missing device files as sparse files of this size.
    pub create_size: Option<u64>,
    /// Overwrite devices that already carry a tarn label.
    pub force: bool,
    pub tunables: Tunables,
    /// Wrap every device as it is opened (fault injection in tests); None in normal use.
    pub wrap_device: Option<DeviceWrapper>,
    /// Features to leave disabled (short names such as `embedded_data`), as `-o feature@NAME=disabled`.
    pub disabled_features: Vec<String>,
}

/// Options for importing a pool.
#[derive(Clone)]
pub struct ImportOptions {
    pub dirs: Vec<PathBuf>,
    pub readonly: bool,
    pub tunables: Tunables,
    /// Import as this name instead of the stored one.
    pub new_name: Option<String>,
    /// Wrap every device as it is opened (fault injection in tests); None in normal use.
    pub wrap_device: Option<DeviceWrapper>,
    /// `pool import -F`: when no uberblock of the automatic fallback opens, go further back,
    /// to the newest txg whose whole tree reads and checks clean (discarding newer changes).
    pub rewind: bool,
    /// Open exactly the uberblock of this txg (what `-F` does once a tree has checked clean,
    /// with freshly opened devices). None in normal use.
    pub rewind_to: Option<Txg>,
    /// `pool import -m`: import even when a log vdev is missing entirely. Its intent-log
    /// blocks cannot be read, so changes that fsync returned for since the last txg may be
    /// lost; without `-m` such an import is refused.
    pub missing_log: bool,
    /// `pool import -f`: import a pool whose labels say it was in use on another host and was
    /// not exported there. Without it such an import is refused (`PoolError::InUseElsewhere`),
    /// as zpool refuses one whose label carries another hostid: if that host still has the
    /// pool imported (on a shared disk, where the vdev flock does not reach), two hosts would
    /// write it at once. A pool left active by a crash of this host imports without it.
    pub any_host: bool,
    /// `pool import -D`: import a destroyed pool, and only a destroyed one; needs `any_host`
    /// too, as zpool's `-D` needs `-f`.
    pub destroyed: bool,
}

impl ImportOptions {
    pub fn new(dirs: Vec<PathBuf>, tunables: Tunables) -> ImportOptions {
        ImportOptions {
            dirs,
            readonly: false,
            tunables,
            new_name: None,
            wrap_device: None,
            rewind: false,
            rewind_to: None,
            missing_log: false,
            any_host: false,
            destroyed: false,
        }
    }
}

/// What `pool import -F` would do (or did): open `txg` instead of the newest valid uberblock
/// `newest_txg`, discarding the changes of the seconds between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RewindPlan {
    pub txg: Txg,
    pub newest_txg: Txg,
    pub seconds_discarded: u64,
    /// Newer uberblocks passed over, newest first, with why.
    pub skipped: Vec<(Txg, String)>,
}

/// The uberblocks the automatic fallback may open, newest first: those whose txg is at least
/// the newest one's minus [`crate::types::TXG_DEFER_SIZE`], counted by txg number. Space freed
/// in txg F is reusable only from the first synced txg after `sync_done(T)` with T ≥ F + 2
/// (the defer trees, indexed by txg number), so while any txg after newest N is being written
/// only frees of txgs ≤ N − 2 can be reused, and the trees of N, N − 1 and N − 2 (an empty txg's
/// tree is its predecessor's) reference none of them. An older written uberblock may be damaged
/// and is opened only by `-F`, after a whole-tree check.
pub fn fallback_uberblocks(newest_first: &[Uberblock]) -> (Vec<Uberblock>, Vec<Uberblock>) {
    let Some(newest) = newest_first.first() else {
        return (Vec::new(), Vec::new());
    };
    let oldest_safe = newest
        .txg
        .0
        .saturating_sub(crate::types::TXG_DEFER_SIZE as u64);
    newest_first
        .iter()
        .cloned()
        .partition(|uberblock| uberblock.txg.0 >= oldest_safe)
}

/// A pool found by scanning directories (`tarn pool import` with no name).
#[derive(Clone, Debug)]
pub struct FoundPool {
    pub name: String,
    pub guid: Guid,
    pub state: PoolState,
    pub txg: u64,
    /// The config of the label with the highest txg among the pool's devices.
    pub config: LabelConfig,
    /// The device found for each leaf guid; of copies, the one import opens (newest label).
    pub leaves: BTreeMap<u64, PathBuf>,
    /// Devices found carrying the same leaf (copies of one vdev image), each group with two
    /// or more paths; import tells them apart by label txg or refuses (`leaf_choice.rs`).
    pub copies_found: Vec<Vec<PathBuf>>,
}

/// What the pool layer tells about the uberblock it opened.
#[derive(Clone, Debug)]
pub struct ImportReport {
    pub txg: Txg,
    /// Newer uberblocks that could not be used (rewind), newest first, with why.
    pub skipped: Vec<(Txg, String)>,
    /// What could not be read although the pool imported: datasets left unavailable and
    /// hierarchy entries that could not be listed, each with the dataset and the error.
    pub damaged: Vec<String>,
    /// Seconds of changes discarded by a rewind: the newest valid uberblock's time minus the
    /// opened one's (0 when the newest opened).
    pub seconds_discarded: u64,
}

fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

struct ConfigState {
    state: PoolState,
    features: BTreeMap<String, u64>,
    features_for_read: Vec<String>,
    features_for_write: Vec<String>,
    /// Labels must be rewritten at the next sync.
    dirty: bool,
}

/// Everything the sync thread and open-context callers share.
pub struct PoolCore {
    pub name: String,
    pub guid: Guid,
    pub io: Arc<BlockIo>,
    pub mos: Arc<ObjectSet>,
    pub txgs: Arc<TxgManager>,
    /// The root dataset (also in `datasets` under the name "").
    pub root: Arc<Dataset>,
    /// Every dataset by relative name (see [`datasets`]).
    datasets: RwLock<BTreeMap<String, Arc<Dataset>>>,
    /// Datasets to destroy in the sync of the given txg, with their relative names: out of
    /// `datasets` already, their records still in the MOS of every txg before that one.
    /// Taken before `datasets` when both are locked.
    pending_destroys: Mutex<Vec<(Txg, String, Arc<Dataset>)>>,
    /// Snapshot changes to carry out in the sync of the given txg (see [`snapshots`]).
    snapshot_tasks: Mutex<Vec<(Txg, snapshots::NamespaceTask)>>,
    /// Serializes changes to the dataset namespace and properties.
    namespace: Mutex<()>,
    /// Readers' claims on snapshots that a destroy must not free ([`holds`]).
    long_holds: Arc<holds::LongHolds>,
    /// Space held back from ordinary writes for the write-backs of kernel caches (mounts
    /// with files open for cached writing): `object::WriteReservation::hold_back`.
    held_back: Arc<AtomicU64>,
    /// Quotas and reservations ([`limits`]).
    limits: Arc<limits::PoolLimits>,
    /// Faults injected at run time into this pool's devices (`tarn inject`); every device the
    /// pool opens is under it.
    pub injector: Arc<crate::vdev::inject::Injector>,
    /// The txg of the newest uberblock on disk (a txg with nothing to write commits none),
    /// which the labels name at export.
    last_committed_txg: AtomicU64,
    /// The reflow word of that uberblock: a txg with nothing else to write still commits when
    /// a RAID-Z expansion's counted progress moved since (`sync_txg`).
    last_committed_reflow: Mutex<Option<crate::vdev::raidz::progress::ReflowProgress>>,
    pub readonly: bool,
    freer: Arc<PoolFreer>,
    deferred_frees_object: ObjectId,
    /// The background destroy queue's MOS object (0 until the first destroy); see
    /// [`background_free`].
    bptree_object: AtomicU64,
    /// The pool's free list (blocks of destroyed snapshots) in the MOS, 0 until first used;
    /// see [`background_free`].
    free_list_object: AtomicU64,
    /// The queue of destroyed clones' livelists in the MOS, 0 until first used; see
    /// [`livelists`].
    livelist_queue_object: AtomicU64,
    /// Queued livelists that could not be read, left alone until the next import.
    livelists_set_aside: Mutex<Vec<ObjectId>>,
    /// Net bytes the queued livelists still hold (their share of `freeing`), kept by the
    /// syncing context so that open context never reads lists the sync thread is removing.
    livelist_freeing: AtomicU64,
    /// The livelist reader's hand-over to the sync thread (see [`livelists`]).
    livelist_reader: livelists::LivelistReader,
    background_frees_pending: std::sync::atomic::AtomicBool,
    /// Frees of gang blocks whose header cannot be read (see [`background_free`]).
    stalled_frees: background_free::StalledFrees,
    /// Scrub and resilver (see [`scan`]).
    scan: scan::Scanner,
    config: Mutex<ConfigState>,
    tunables: Tunables,
    /// Blocks with no good copy ([`errlog`]).
    errlog: errlog::ErrorLog,
    /// History records waiting for the next sync ([`history`]).
    history: history::History,
    /// The `failmode` property ([`failmode`]).
    failmode: failmode::FailModeState,
    /// Device changes waiting for the next txg ([`vdev_change`]).
    vdev_changes: vdev_change::VdevChanges,
    /// RAID-Z expansion: the copy thread and the record ([`raidz_expand`]).
    raidz_expand: raidz_expand::ExpandState,
}

/// An open (imported) pool, running in this process.
pub struct Pool {
    /// The pool's state below the facade: reachable from outside the engine only with the
    /// `internals` feature (its tests, tarn-stress, tarn-bench).
    #[cfg(feature = "internals")]
    pub core: Arc<PoolCore>,
    #[cfg(not(feature = "internals"))]
    pub(crate) core: Arc<PoolCore>,
    sync_thread: Mutex<Option<JoinHandle<()>>>,
    /// The livelist reader (see [`livelists`]), stopped before the sync thread.
    livelist_reader_thread: Mutex<Option<JoinHandle<()>>>,
}

fn mos_props(
    object_type: ObjectType,
    block_size: u32,
    tunables: &Tunables,
    compression: Compression,
) -> ObjectProps {
    ObjectProps {
        object_type,
        data_block_size: block_size,
        indirect_block_shift: tunables.indirect_block_shift as u8,
        checksum: ChecksumType::Fletcher4,
        compression,
        copies: MOS_COPIES,
    }
}

/// The MOS object-directory key naming a top-level vdev's metaslab array.
pub fn metaslab_array_key(vdev: VdevId) -> String {
    format!("ms_array/{vdev}")
}

/// The deferred-free list's storage: a block-pointer list in the MOS (§2.13 of
/// docs/design/06-object.md), 16 KiB blocks, uncompressed (its blocks are rewritten in place by
/// later passes, which a changing compressed size would defeat).
pub fn deferred_list_store<'a>(mos: &'a ObjectSet, tunables: &Tunables) -> ObjectSetBpStore<'a> {
    ObjectSetBpStore {
        objset: mos,
        props: mos_props(
            ObjectType::BlockPtrList,
            16 << 10,
            tunables,
            Compression::Off,
        ),
    }
}

/// The number of block pointers on the deferred-free list, validated against the list object's
/// size (the count comes from disk).
pub fn deferred_free_count(mos: &ObjectSet, object: ObjectId) -> Result<u64, PoolError> {
    let store = deferred_list_store(mos, &mos.io().tunables);
    Ok(BpObj::open(&store, object)?.header().entry_count)
}

/// Look up a u64 entry of a key/value object.
pub fn lookup_mos_directory(
    objset: &ObjectSet,
    object: ObjectId,
    key: &str,
) -> Result<Option<u64>, PoolError> {
    let handle = KvObject::new(objset, object, None)?;
    kv::lookup_u64(&handle, key)
        .map_err(|error| PoolError::Corrupt(format!("key/value object {object}: {error}")))
}

pub(super) fn kv_set_u64(
    objset: &ObjectSet,
    tx: &Tx,
    object: ObjectId,
    key: &str,
    value: u64,
) -> Result<(), PoolError> {
    let mut handle = KvObject::new(objset, object, Some(*tx))?;
    kv::upsert_u64(&mut handle, key, value)
        .map(|_| ())
        .map_err(|error| PoolError::Corrupt(format!("key/value object {object}: {error}")))
}

pub(super) fn kv_create(
    objset: &ObjectSet,
    tx: &Tx,
    tunables: &Tunables,
) -> Result<ObjectId, PoolError> {
    let block_size = tunables.dnode_block_size.max(4096);
    Ok(crate::object::adapters::create_kv_object(
        objset,
        tx,
        mos_props(ObjectType::KeyValue, block_size, tunables, Compression::Lz4),
    )?)
}

impl Pool {
    /// The root dataset's file system (its unlinked set drained, as after a crash).
    pub fn file_system(&self) -> Result<crate::fs::FileSystem, PoolError> {
        self.open_file_system(&self.core.name)
    }

    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The root dataset's object set. Panics if the root dataset is unavailable (import said
    /// so in [`ImportReport::damaged`]); [`Pool::dataset_objset`] is the fallible form.
    pub fn root_objset(&self) -> Arc<ObjectSet> {
        self.core.root.objset()
    }

    /// Join the open txg (waiting out the write throttle).
    pub fn assign(&self) -> Result<crate::txg::TxHold, PoolError> {
        if self.core.readonly {
            return Err(PoolError::ReadOnly);
        }
        Ok(self.core.txgs.assign()?)
    }

    pub fn vdev_paths(&self) -> Vec<PathBuf> {
        self.core
            .io
            .vdevs
            .tops()
            .iter()
            .flat_map(|top| top.children.iter().map(|leaf| leaf.path.clone()))
            .collect()
    }

    pub fn last_synced_txg(&self) -> Txg {
        self.core.txgs.last_synced()
    }
}

/// Directory holding a file, for defaults of `-d`.
pub fn parent_dir(path: &Path) -> PathBuf {
    path.parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}
