//! The daemon's side of the cache file (`tarn_ops::cachefile`, which documents the file and when
//! it changes): each held pool's `cachefile` setting, keeping the file in step as pools come
//! and go by request, and importing what the file lists when the daemon starts.
//!
//! Called under the `lifecycle` mutex (create, import, export, destroy, `pool set`), which
//! also serializes the file's read-change-write. A cache file that cannot be written fails
//! nothing: the pool is imported either way; the failure is logged and told to the user.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use log::{info, warn};
use tarn::{ImportOptions, Pool};
use tarn_protocol::error::Failure;

use super::held::{lock, Daemon};
use tarn_ops::cachefile::{self, CachedPool};

/// Parse a `cachefile` value: `none`, or an absolute path (empty: the default).
pub fn parse_setting(value: &str) -> Result<Option<Option<PathBuf>>, Failure> {
    match value {
        "" => Ok(None),
        "none" => Ok(Some(None)),
        path if Path::new(path).is_absolute() => Ok(Some(Some(PathBuf::from(path)))),
        other => Err(Failure(format!(
            "invalid cachefile {other:?}: an absolute path, or none"
        ))),
    }
}

fn entry(daemon: &Daemon, pool: &Pool) -> CachedPool {
    CachedPool {
        name: pool.name().to_string(),
        guid: pool.guid().0,
        vdevs: pool.vdev_paths(),
        altroot: daemon.mounts.altroot(pool.name()),
        readonly: pool.is_readonly(),
        hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|name| name.trim().to_string())
            .unwrap_or_default(),
        txg: pool.last_synced_txg().0,
    }
}

fn report(result: Result<(), String>) {
    if let Err(why) = result {
        warn!("{why}");
        err!("warning: {why}");
    }
}

/// A pool came in (create, import): record it in its cache file; `setting` is its
/// `-o cachefile=` (None: the default).
pub fn remember(daemon: &Daemon, pool: &Pool, setting: Option<Option<PathBuf>>) {
    if let Some(setting) = setting {
        lock(&daemon.caches.settings).insert(pool.name().to_string(), setting);
    }
    if let Some(path) = daemon.caches.of(pool.name()) {
        report(cachefile::remember(&path, entry(daemon, pool)));
    }
}

/// A pool left by request (export, destroy): take it out of its cache file.
pub fn forget(daemon: &Daemon, name: &str, guid: u64) {
    let path = daemon.caches.of(name);
    lock(&daemon.caches.settings).remove(name);
    lock(&daemon.caches.from_cache).remove(name);
    if let Some(path) = path {
        report(cachefile::forget(&path, guid));
    }
}

/// `pool set cachefile=VALUE`: move the pool's entry.
pub fn set(daemon: &Daemon, pool: &Pool, value: &str) -> Result<(), Failure> {
    let setting = parse_setting(value)?;
    if let Some(old) = daemon.caches.of(pool.name()) {
        report(cachefile::forget(&old, pool.guid().0));
    }
    lock(&daemon.caches.settings).remove(pool.name());
    remember(daemon, pool, setting);
    Ok(())
}

/// At start, before serving: import and mount every pool the default cache file lists.
/// A pool that cannot be imported is logged and left in the file.
pub fn import_at_start(daemon: &Arc<Daemon>) {
    let path = daemon.caches.default.clone();
    let file = match cachefile::read(&path) {
        Ok(file) => file,
        Err(why) => {
            warn!("{why}");
            return;
        }
    };
    for cached in file.pools {
        if daemon.pool(&cached.name).is_some() {
            continue;
        }
        let mut options = ImportOptions::new(cached.dirs(), daemon.tunables.clone());
        options.readonly = cached.readonly;
        let (result, captured) = tarn_protocol::output::capture(|| -> Result<(), Failure> {
            let pool = tarn_ops::import(&cached.guid.to_string(), options)?;
            if let Err(failure) = daemon.mount_pool(&pool, cached.altroot.clone()) {
                pool.export()?;
                return Err(failure);
            }
            daemon.insert(pool);
            Ok(())
        });
        super::log_captured(&captured);
        match result {
            Ok(()) => {
                info!(
                    "imported pool {} from the cache file {}",
                    cached.name,
                    path.display()
                );
                lock(&daemon.caches.from_cache).insert(cached.name.clone());
            }
            Err(Failure(why)) => warn!(
                "pool {} in the cache file {} was not imported: {why}",
                cached.name,
                path.display()
            ),
        }
    }
}
