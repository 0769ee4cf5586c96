//! The daemon's state and the pools it holds, as the server and the request handlers share
//! them: `Daemon` (pools, mounts, the lifecycle mutex), looking a pool up by name, guid or
//! dataset, taking it in and out, waiting until no request uses it; the stop flag; and the
//! answer types every handler returns (`Answer`, or a `Reply` that is not one).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tarn::tunables::Tunables;
use tarn::Pool;
use tarn_protocol::error::Failure;

use super::mounts::Mounts;
use tarn_ops::cachefile;

/// Set by SIGTERM/SIGINT (and the `stop` request): export everything and exit.
pub(super) static STOP: AtomicBool = AtomicBool::new(false);

pub(super) struct State {
    pub(super) pools: BTreeMap<String, Arc<Pool>>,
    /// Requests being answered right now.
    pub(super) active: usize,
    /// A request that creates, imports, exports or destroys a pool has completed.
    pub(super) lifecycle_done: bool,
    /// Stopping: new requests are refused.
    pub(super) stopping: bool,
    pub(super) last_request: Instant,
}

pub(super) struct Daemon {
    pub(super) state: Mutex<State>,
    /// Mounted file systems, by dataset. Changed only under `lifecycle`.
    pub(super) mounts: Mounts,
    /// Serializes create/import/export/destroy.
    pub(super) lifecycle: Mutex<()>,
    pub(super) tunables: Tunables,
    pub(super) socket: PathBuf,
    /// The held pools' cache files (cache.rs).
    pub(super) caches: PoolCaches,
    /// Whether a service manager started the daemon (service.rs): it then stays when it holds
    /// no pools, and leaves the socket file to the service manager.
    pub(super) service: super::service::ServiceMode,
}

/// The held pools' cache files: the state behind the `cachefile` property (what is done with
/// it is in cache.rs).
pub struct PoolCaches {
    /// The default cache file (`cachefile::default_path` of the daemon's socket).
    pub default: PathBuf,
    /// Per held pool: its cache file, or None for `cachefile=none`. Absent means the default.
    pub(super) settings: Mutex<BTreeMap<String, Option<PathBuf>>>,
    /// Pools this daemon imported from its cache file at start and no request has imported
    /// since: an explicit `pool import` of one with the same options finds it done.
    pub(super) from_cache: Mutex<BTreeSet<String>>,
}

impl PoolCaches {
    pub fn new(socket: &Path) -> PoolCaches {
        PoolCaches {
            default: cachefile::default_path(socket),
            settings: Mutex::new(BTreeMap::new()),
            from_cache: Mutex::new(BTreeSet::new()),
        }
    }

    /// A pool's cache file (None: not recorded).
    pub fn of(&self, pool: &str) -> Option<PathBuf> {
        lock(&self.settings)
            .get(pool)
            .cloned()
            .unwrap_or_else(|| Some(self.default.clone()))
    }

    /// The `cachefile` property's value and source for `pool get`: as zpool, `-` for the
    /// default cache file.
    pub fn property(&self, pool: &str) -> (String, &'static str) {
        match lock(&self.settings).get(pool) {
            None => ("-".into(), "default"),
            Some(None) => ("none".into(), "local"),
            Some(Some(path)) => (path.display().to_string(), "local"),
        }
    }

    /// Whether `pool` was imported from the cache file at start and not asked for since.
    pub fn take_imported_at_start(&self, pool: &str) -> bool {
        lock(&self.from_cache).remove(pool)
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking request thread is caught and answered; its state stays consistent because no
    // engine call happens under this mutex.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(super) struct Answer {
    pub(super) status: u8,
    pub(super) data: serde_json::Value,
}

impl Answer {
    pub(super) fn done() -> Result<Answer, Reply> {
        Ok(Answer {
            status: 0,
            data: serde_json::Value::Null,
        })
    }
}

pub(super) enum Reply {
    /// The named pool is not held here: the CLI may run the verb in-process.
    NotImported(String),
    Failed(Failure),
}

impl From<Failure> for Reply {
    fn from(error: Failure) -> Self {
        Reply::Failed(error)
    }
}

impl From<tarn::PoolError> for Reply {
    fn from(error: tarn::PoolError) -> Self {
        Reply::Failed(error.into())
    }
}

impl Daemon {
    /// The pool called `target` (name, or guid in decimal).
    pub(super) fn pool(&self, target: &str) -> Option<Arc<Pool>> {
        let state = lock(&self.state);
        if let Some(pool) = state.pools.get(target) {
            return Some(Arc::clone(pool));
        }
        state
            .pools
            .values()
            .find(|pool| pool.guid().0.to_string() == target)
            .cloned()
    }

    pub(super) fn held(&self, target: &str) -> Result<Arc<Pool>, Reply> {
        self.pool(target)
            .ok_or_else(|| Reply::NotImported(target.to_string()))
    }

    pub(super) fn pools(&self) -> Vec<Arc<Pool>> {
        lock(&self.state).pools.values().cloned().collect()
    }

    pub(super) fn insert(&self, pool: Pool) {
        let name = pool.name().to_string();
        let previous = lock(&self.state).pools.insert(name, Arc::new(pool));
        assert!(
            previous.is_none(),
            "pool names are checked under the lifecycle lock"
        );
    }

    pub(super) fn refuse_taken_name(&self, name: &str) -> Result<(), Failure> {
        if lock(&self.state).pools.contains_key(name) {
            return Err(Failure(format!(
                "a pool named {name:?} is already imported; export it first or choose another name"
            )));
        }
        Ok(())
    }

    /// Take a pool out of the map (by name or guid) for export or destroy.
    pub(super) fn take(&self, target: &str) -> Option<Arc<Pool>> {
        let mut state = lock(&self.state);
        let name = if state.pools.contains_key(target) {
            target.to_string()
        } else {
            state
                .pools
                .iter()
                .find(|(_, pool)| pool.guid().0.to_string() == target)
                .map(|(name, _)| name.clone())?
        };
        state.pools.remove(&name)
    }
}

impl Daemon {
    /// Unmount every file system of the pool called `target` (name or guid): EBUSY while in
    /// use unless `force`, which unmounts lazily.
    pub(super) fn unmount_pool(&self, target: &str, force: bool) -> Result<(), Failure> {
        let Some(pool) = self.pool(target) else {
            return Ok(());
        };
        self.mounts.unmount_within(&pool, pool.name(), force)?;
        Ok(())
    }

    /// Give up the pool called `target` (name or guid) for export or destroy: unmount its
    /// file systems (EBUSY unless `force`), take it out of the map and wait until no request
    /// uses it.
    pub(super) fn release(&self, target: &str, force: bool) -> Result<Pool, Reply> {
        self.unmount_pool(target, force)?;
        let taken = self
            .take(target)
            .ok_or_else(|| Reply::NotImported(target.to_string()))?;
        self.mounts.forget_pool(taken.name());
        Ok(unwrap_when_unused(taken))
    }

    /// The imported pool holding dataset `name` (snapshots are refused here: not built yet).
    pub(super) fn pool_of_dataset(&self, name: &str) -> Result<Arc<Pool>, Failure> {
        let pool = tarn_ops::pool_of(name);
        self.pool(pool).ok_or_else(|| {
            Failure(format!(
                "pool {pool:?} is not imported; import it with: tarn pool import {pool}"
            ))
        })
    }

    /// Mount a new or imported pool's file systems. A pool whose root file system cannot be
    /// mounted is refused (the caller undoes it), unless the root dataset is unavailable
    /// (damaged beyond its copies: import reported it); a child that cannot mount is reported
    /// and left unmounted.
    pub(super) fn mount_pool(&self, pool: &Pool, altroot: Option<PathBuf>) -> Result<(), Failure> {
        self.mounts.set_altroot(pool.name(), altroot);
        let failures = self.mounts.mount_all(pool, None);
        let root_unavailable = pool
            .unavailable_datasets()
            .iter()
            .any(|(name, _)| name == pool.name());
        if let Some((_, failure)) = failures
            .into_iter()
            .find(|(name, _)| name == pool.name() && !root_unavailable)
        {
            let _ = self.mounts.unmount_within(pool, pool.name(), true);
            self.mounts.forget_pool(pool.name());
            return Err(failure);
        }
        Ok(())
    }
}

pub(super) fn matches_target(pool: &Pool, target: &str) -> bool {
    pool.name() == target || pool.guid().0.to_string() == target
}

/// Wait until no request uses the pool any more, then export it.
pub(super) fn export_when_unused(pool: Arc<Pool>) -> Result<(), Failure> {
    unwrap_when_unused(pool).export()?;
    Ok(())
}

pub(super) fn unwrap_when_unused(mut pool: Arc<Pool>) -> Pool {
    loop {
        match Arc::try_unwrap(pool) {
            Ok(pool) => return pool,
            Err(shared) => {
                pool = shared;
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}
