//! The daemon's request handlers: what each request does to the pools this daemon holds and
//! their mounts. Pool verbs run the shared bodies in `ops`, dataset verbs those in
//! `daemon::datasets`; every line they print is captured into the response.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn::pool::{parse_vdev_specs, ImportOptions, Pool};
use tarn_fuse::mountpoint;

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{datasets, lock, Daemon, STOP};
use crate::error::Failure;
use crate::ops;
use crate::protocol::rows::{PoolRow, StatusEntry};
use crate::protocol::Request;

pub(super) struct Answer {
    pub(super) status: u8,
    pub(super) data: serde_json::Value,
}

impl Answer {
    fn done() -> Result<Answer, Reply> {
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

impl From<tarn::pool::PoolError> for Reply {
    fn from(error: tarn::pool::PoolError) -> Self {
        Reply::Failed(error.into())
    }
}

impl Daemon {
    /// The pool called `target` (name, or guid in decimal).
    fn pool(&self, target: &str) -> Option<Arc<Pool>> {
        let state = lock(&self.state);
        if let Some(pool) = state.pools.get(target) {
            return Some(Arc::clone(pool));
        }
        state
            .pools
            .values()
            .find(|pool| pool.core.guid.0.to_string() == target)
            .cloned()
    }

    fn held(&self, target: &str) -> Result<Arc<Pool>, Reply> {
        self.pool(target)
            .ok_or_else(|| Reply::NotImported(target.to_string()))
    }

    pub(super) fn pools(&self) -> Vec<Arc<Pool>> {
        lock(&self.state).pools.values().cloned().collect()
    }

    fn insert(&self, pool: Pool) {
        let name = pool.name().to_string();
        let previous = lock(&self.state).pools.insert(name, Arc::new(pool));
        assert!(
            previous.is_none(),
            "pool names are checked under the lifecycle lock"
        );
    }

    fn refuse_taken_name(&self, name: &str) -> Result<(), Failure> {
        if lock(&self.state).pools.contains_key(name) {
            return Err(Failure(format!(
                "a pool named {name:?} is already imported; export it first or choose another name"
            )));
        }
        Ok(())
    }

    /// Take a pool out of the map (by name or guid) for export or destroy.
    fn take(&self, target: &str) -> Option<Arc<Pool>> {
        let mut state = lock(&self.state);
        let name = if state.pools.contains_key(target) {
            target.to_string()
        } else {
            state
                .pools
                .iter()
                .find(|(_, pool)| pool.core.guid.0.to_string() == target)
                .map(|(name, _)| name.clone())?
        };
        state.pools.remove(&name)
    }
}

impl Daemon {
    /// Unmount every file system of the pool called `target` (name or guid): EBUSY while in
    /// use unless `force`, which unmounts lazily.
    fn unmount_pool(&self, target: &str, force: bool) -> Result<(), Failure> {
        let Some(pool) = self.pool(target) else {
            return Ok(());
        };
        self.mounts.unmount_within(pool.name(), force)?;
        Ok(())
    }

    /// Give up the pool called `target` (name or guid) for export or destroy: unmount its
    /// file systems (EBUSY unless `force`), take it out of the map and wait until no request
    /// uses it.
    fn release(&self, target: &str, force: bool) -> Result<Pool, Reply> {
        self.unmount_pool(target, force)?;
        let taken = self
            .take(target)
            .ok_or_else(|| Reply::NotImported(target.to_string()))?;
        self.mounts.forget_pool(taken.name());
        Ok(unwrap_when_unused(taken))
    }

    /// The imported pool holding dataset `name` (snapshots are refused here: not built yet).
    fn pool_of_dataset(&self, name: &str) -> Result<Arc<Pool>, Failure> {
        if name.contains('@') {
            return Err(Failure(format!("{name}: snapshots are not supported yet")));
        }
        let pool = ops::pool_of(name);
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
    fn mount_pool(&self, pool: &Pool, altroot: Option<PathBuf>) -> Result<(), Failure> {
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
            let _ = self.mounts.unmount_within(pool.name(), true);
            self.mounts.forget_pool(pool.name());
            return Err(failure);
        }
        Ok(())
    }
}

/// The root mountpoint requested by `pool create -m`, validated, with altroot applied; None
/// when the root is not to be mounted.
fn requested_root_mountpoint(
    name: &str,
    altroot: Option<&Path>,
    mountpoint: Option<&str>,
) -> Result<Option<PathBuf>, Failure> {
    if let Some(root) = altroot.filter(|root| !root.is_absolute()) {
        return Err(Failure(format!(
            "bad request: altroot {} is not absolute",
            root.display()
        )));
    }
    let path = match mountpoint {
        Some("none") | Some("legacy") => return Ok(None),
        Some(path) if Path::new(path).is_absolute() => PathBuf::from(path),
        Some(other) => {
            return Err(Failure(format!(
                "bad request: mountpoint {other:?} is not absolute"
            )))
        }
        None => Path::new("/").join(name),
    };
    Ok(Some(match altroot {
        None => path,
        Some(root) => root.join(path.strip_prefix("/").unwrap_or(&path)),
    }))
}

/// Wait until no request uses the pool any more, then export it.
pub(super) fn export_when_unused(pool: Arc<Pool>) -> Result<(), Failure> {
    unwrap_when_unused(pool).export()?;
    Ok(())
}

fn unwrap_when_unused(mut pool: Arc<Pool>) -> Pool {
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

pub(super) fn dispatch(daemon: &Arc<Daemon>, request: Request) -> Result<Answer, Reply> {
    match request {
        Request::Ping => Ok(Answer {
            status: 0,
            data: serde_json::json!({
                "pid": std::process::id(),
                "socket": daemon.socket.display().to_string(),
                "pools": lock(&daemon.state).pools.keys().cloned().collect::<Vec<_>>(),
            }),
        }),
        Request::Stop => {
            STOP.store(true, Ordering::SeqCst);
            out!(
                "stopping tarn daemon {} on {}: exporting every pool",
                std::process::id(),
                daemon.socket.display()
            );
            Ok(Answer {
                status: 0,
                data: serde_json::json!({"pid": std::process::id()}),
            })
        }
        Request::PoolCreate {
            name,
            vdevs,
            size_bytes,
            force,
            disabled_features,
            altroot,
            mountpoint,
            properties,
        } => {
            let _guard = lock(&daemon.lifecycle);
            daemon.refuse_taken_name(&name)?;
            let target =
                requested_root_mountpoint(&name, altroot.as_deref(), mountpoint.as_deref())?;
            // Refuse a taken mountpoint and bad properties before anything is created.
            if let Some(target) = &target {
                mountpoint::check(target)
                    .map_err(|why| Failure(format!("cannot mount {name}: {why}")))?;
            }
            Pool::parse_properties(&properties)?;
            if let Some(relative) = vdevs
                .iter()
                .find(|word| word.as_str() != "mirror" && !Path::new(word).is_absolute())
            {
                return Err(Failure(format!(
                    "bad request: vdev path {relative:?} is not absolute"
                ))
                .into());
            }
            let specs = parse_vdev_specs(&vdevs)?;
            let pool = ops::create(
                name.clone(),
                specs,
                size_bytes,
                force,
                disabled_features,
                daemon.tunables.clone(),
            )?;
            let settings = mountpoint
                .map(|mountpoint| ("mountpoint".to_string(), mountpoint))
                .into_iter()
                .chain(properties);
            let configured = settings
                .map(|(property, value)| pool.set_property(&name, &property, Some(&value)))
                .collect::<Result<Vec<()>, _>>()
                .map_err(Failure::from)
                .and_then(|_| daemon.mount_pool(&pool, altroot));
            if let Err(failure) = configured {
                // Nothing is left behind: the pool goes again.
                pool.destroy()?;
                return Err(failure.into());
            }
            daemon.insert(pool);
            Answer::done()
        }
        Request::PoolImport {
            pool,
            new_name,
            dirs,
            readonly,
            altroot,
            rewind,
        } => {
            let _guard = lock(&daemon.lifecycle);
            if daemon.pool(&pool).is_some() && new_name.is_none() {
                return Err(Failure(format!("pool {pool:?} is already imported")).into());
            }
            if let Some(relative) = dirs.iter().find(|dir| !dir.is_absolute()) {
                return Err(Failure(format!(
                    "bad request: directory {} is not absolute",
                    relative.display()
                ))
                .into());
            }
            if let Some(name) = &new_name {
                daemon.refuse_taken_name(name)?;
            }
            let mut options = ImportOptions::new(dirs, daemon.tunables.clone());
            options.readonly = readonly;
            options.new_name = new_name;
            options.rewind = rewind;
            let opened = ops::import(&pool, options)?;
            if let Err(failure) = daemon.refuse_taken_name(opened.name()) {
                opened.export()?;
                return Err(failure.into());
            }
            let name = opened.name().to_string();
            if readonly {
                out!("pool {name} is imported read-only: its file systems are not mounted");
            } else if let Err(failure) = daemon.mount_pool(&opened, altroot) {
                opened.export()?;
                return Err(failure.into());
            }
            daemon.insert(opened);
            Answer::done()
        }
        Request::PoolExport { pool, force } => {
            let _guard = lock(&daemon.lifecycle);
            let released = daemon.release(&pool, force)?;
            let name = released.name().to_string();
            released.export()?;
            out!("exported pool {name}");
            Answer::done()
        }
        Request::PoolDestroy { pool, force } => {
            let _guard = lock(&daemon.lifecycle);
            let released = daemon.release(&pool, force)?;
            let name = released.name().to_string();
            released.destroy()?;
            out!("destroyed pool {name}");
            Answer::done()
        }
        Request::PoolSync { pool } => {
            let pools = match pool {
                Some(target) => vec![daemon.held(&target)?],
                None => daemon.pools(),
            };
            for pool in pools {
                let txg = pool.sync()?;
                out!("synced pool {} at txg {txg}", pool.name());
            }
            Answer::done()
        }
        Request::PoolList { pool } => {
            let rows: Vec<PoolRow> = daemon
                .pools()
                .iter()
                .filter(|p| pool.as_ref().is_none_or(|t| matches_target(p, t)))
                .map(|p| ops::pool_row(p))
                .collect();
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "pools": rows }),
            })
        }
        Request::PoolGet { pool, properties } => {
            let held = daemon.held(&pool)?;
            let altroot = daemon.mounts.altroot(held.name());
            let rows = ops::pool_properties(&held, &properties, altroot.as_deref())?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "properties": rows }),
            })
        }
        Request::PoolSet {
            pool,
            property,
            value,
        } => {
            let _guard = lock(&daemon.lifecycle);
            let held = daemon.held(&pool)?;
            ops::set_pool_property(&held, &property, &value)?;
            Answer::done()
        }
        Request::PoolStatus { pool } => {
            let entries: Vec<StatusEntry> = daemon
                .pools()
                .iter()
                .filter(|p| pool.as_ref().is_none_or(|t| matches_target(p, t)))
                .map(|p| ops::status_entry(p))
                .collect();
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "pools": entries }),
            })
        }
        Request::Check { pool, repair } => {
            let held = daemon.held(&pool)?;
            let clean = ops::check(&held, &pool, repair)?;
            Ok(Answer {
                status: if clean { 0 } else { 1 },
                data: serde_json::Value::Null,
            })
        }
        Request::DebugMetaslabs { pool, json } => {
            let held = daemon.held(&pool)?;
            ops::debug_metaslabs(&held, &pool, json);
            Answer::done()
        }
        Request::StatTxgs { pool } => {
            let held = daemon.held(&pool)?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "txgs": held.txg_history() }),
            })
        }
        Request::DebugSpacemap {
            pool,
            vdev,
            metaslab,
        } => {
            let held = daemon.held(&pool)?;
            ops::debug_spacemap(&held, &pool, vdev, metaslab)?;
            Answer::done()
        }
        Request::Create {
            name,
            properties,
            parents,
        } => {
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&name)?;
            let created = pool.create_dataset(&name, &properties, parents)?;
            let failures = match created.first() {
                Some(top) => daemon.mounts.mount_all(&pool, Some(top)),
                None => Vec::new(),
            };
            Ok(Answer {
                status: u8::from(!failures.is_empty()),
                data: serde_json::json!({ "created": created }),
            })
        }
        Request::Destroy { name, recursive } => {
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&name)?;
            datasets::destroy(&pool, &daemon.mounts, &name, recursive)?;
            Answer::done()
        }
        Request::List { name, recursive } => {
            let rows = datasets::list(&daemon.pools(), &daemon.mounts, name.as_deref(), recursive)?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "datasets": rows }),
            })
        }
        Request::Get { names, properties } => {
            let mut rows = Vec::new();
            for name in &names {
                let pool = daemon.pool_of_dataset(name)?;
                rows.extend(datasets::get(&pool, &daemon.mounts, name, &properties)?);
            }
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "properties": rows }),
            })
        }
        Request::Set {
            name,
            property,
            value,
        } => {
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&name)?;
            datasets::set(&pool, &daemon.mounts, &name, &property, value.as_deref())?;
            Answer::done()
        }
        Request::Mount {
            name,
            mountpoint,
            all,
        } => {
            let _guard = lock(&daemon.lifecycle);
            match (name, all) {
                (None, false) => {
                    let rows: Vec<serde_json::Value> = daemon
                        .mounts
                        .list()
                        .into_iter()
                        .map(|(name, path)| {
                            serde_json::json!({ "name": name, "mountpoint": path.display().to_string() })
                        })
                        .collect();
                    Ok(Answer {
                        status: 0,
                        data: serde_json::json!({ "mounts": rows }),
                    })
                }
                (None, true) => {
                    let mut failed = false;
                    for pool in daemon.pools().iter().filter(|pool| !pool.core.readonly) {
                        failed |= !daemon.mounts.mount_all(pool, None).is_empty();
                    }
                    Ok(Answer {
                        status: u8::from(failed),
                        data: serde_json::Value::Null,
                    })
                }
                (Some(name), _) => {
                    let pool = daemon.pool_of_dataset(&name)?;
                    datasets::mount(&pool, &daemon.mounts, &name, mountpoint.as_deref())?;
                    Answer::done()
                }
            }
        }
        Request::Unmount { target, all, force } => {
            let _guard = lock(&daemon.lifecycle);
            match (target, all) {
                (None, true) => {
                    for pool in daemon.pools() {
                        daemon.mounts.unmount_within(pool.name(), force)?;
                    }
                }
                (Some(target), _) => {
                    let dataset = daemon.mounts.resolve(&target).ok_or_else(|| {
                        Failure(format!(
                            "{target} is not a mounted tarn file system (give a dataset name or its mountpoint)"
                        ))
                    })?;
                    daemon.mounts.unmount_within(&dataset, force)?;
                }
                (None, false) => {
                    return Err(Failure(
                        "bad request: unmount what? name a file system or use -a".into(),
                    )
                    .into())
                }
            }
            Answer::done()
        }
    }
}

fn matches_target(pool: &Pool, target: &str) -> bool {
    pool.name() == target || pool.core.guid.0.to_string() == target
}
