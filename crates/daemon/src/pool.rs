//! The daemon side of the pool verbs (`tarn pool create|import|export|destroy|sync|list|get|set|
//! status`): pools come into and leave the daemon here; the bodies shared with in-process runs
//! are in `ops`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn::{parse_vdev_layout, ImportOptions, Pool, VDEV_KEYWORDS};
use tarn_fuse::mountpoint;
use tarn_protocol::error::Failure;
use tarn_protocol::request::dataset::parse_settings;
use tarn_protocol::request::pool::{
    ClearArgs, CreateArgs, GetArgs, HistoryArgs, ImportArgs, ListArgs, PoolRequest, ReleaseArgs,
    StatusArgs, UpgradeArgs,
};
use tarn_protocol::request::PoolOption;
use tarn_protocol::rows::{PoolRow, StatusEntry};

use super::cache;
use super::held::{lock, matches_target, Answer, Daemon, Reply};

/// A pool request.
pub(super) fn handle(daemon: &Arc<Daemon>, request: PoolRequest) -> Result<Answer, Reply> {
    match request {
        PoolRequest::Create(args) => {
            let size_bytes = args.size_bytes()?;
            let pool_properties = args.pool_properties()?;
            let properties = parse_settings(&args.fs_properties)?;
            let CreateArgs {
                force,
                altroot,
                mountpoint,
                pool: name,
                vdevs,
                ..
            } = args;
            let disabled_features = pool_properties.disabled_features;
            let cachefile =
                cache::parse_setting(pool_properties.cachefile.as_deref().unwrap_or(""))?;
            let _guard = lock(&daemon.lifecycle);
            daemon.refuse_taken_name(&name)?;
            let target =
                requested_root_mountpoint(&name, altroot.as_deref(), mountpoint.as_deref())?;
            // Refuse a taken mountpoint and bad properties before anything is created.
            if let Some(target) = &target {
                mountpoint::check(target)
                    .map_err(|why| Failure(format!("cannot mount {name}: {why}")))?;
            }
            for (property, value) in &properties {
                Pool::check_setting(property, value)?;
            }
            if let Some(relative) = vdevs.iter().find(|word| {
                !VDEV_KEYWORDS.contains(&word.as_str()) && !Path::new(word).is_absolute()
            }) {
                return Err(Failure(format!(
                    "bad request: vdev path {relative:?} is not absolute"
                ))
                .into());
            }
            let layout = parse_vdev_layout(&vdevs)?;
            let mut tunables = daemon.tunables.clone();
            if let Some(ashift) = pool_properties.ashift {
                tunables
                    .set("vdev_ashift", &ashift.to_string())
                    .map_err(Failure)?;
            }
            let pool = tarn_ops::create(
                name.clone(),
                layout,
                size_bytes,
                force,
                disabled_features,
                tunables,
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
            cache::remember(daemon, &pool, cachefile);
            daemon.insert(pool);
            Answer::done()
        }
        PoolRequest::Import(args) => {
            let import_options = args.import_options()?;
            let ImportArgs {
                dirs,
                altroot,
                rewind,
                missing_log,
                force,
                destroyed,
                pool,
                new_name,
                ..
            } = args;
            let pool =
                pool.ok_or_else(|| Failure("pool import: name the pool to import".into()))?;
            let readonly = import_options.readonly;
            let cachefile =
                cache::parse_setting(import_options.cachefile.as_deref().unwrap_or(""))?;
            let _guard = lock(&daemon.lifecycle);
            if let Some(done) = imported_at_start(
                daemon,
                &pool,
                readonly,
                altroot.as_deref(),
                rewind,
                &new_name,
            )? {
                return done;
            }
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
            options.missing_log = missing_log;
            options.any_host = force;
            options.destroyed = destroyed;
            let opened = tarn_ops::import(&pool, options)?;
            if let Err(failure) = daemon.refuse_taken_name(opened.name()) {
                opened.export()?;
                return Err(failure.into());
            }
            let name = opened.name().to_string();
            if readonly {
                out!("pool {name} is imported read-only: its file systems mount read-only");
            }
            if let Err(failure) = daemon.mount_pool(&opened, altroot) {
                opened.export()?;
                return Err(failure.into());
            }
            cache::remember(daemon, &opened, cachefile);
            daemon.insert(opened);
            Answer::done()
        }
        PoolRequest::Export(ReleaseArgs { pool, force, .. }) => {
            let _guard = lock(&daemon.lifecycle);
            let released = daemon.release(&pool, force)?;
            let name = released.name().to_string();
            let guid = released.guid().0;
            released.export()?;
            cache::forget(daemon, &name, guid);
            out!("exported pool {name}");
            Answer::done()
        }
        PoolRequest::Destroy(ReleaseArgs { pool, force, .. }) => {
            let _guard = lock(&daemon.lifecycle);
            let released = daemon.release(&pool, force)?;
            let name = released.name().to_string();
            let guid = released.guid().0;
            released.destroy()?;
            cache::forget(daemon, &name, guid);
            out!("destroyed pool {name}");
            Answer::done()
        }
        PoolRequest::Sync(PoolOption { pool }) => {
            let pools = match pool {
                Some(target) => vec![daemon.held(&target)?],
                None => daemon.pools(),
            };
            for pool in pools {
                daemon.mounts.write_back(pool.name());
                let txg = pool.sync()?;
                out!("synced pool {} at txg {txg}", pool.name());
            }
            Answer::done()
        }
        PoolRequest::List(ListArgs { pool, .. }) => {
            let rows: Vec<PoolRow> = daemon
                .pools()
                .iter()
                .filter(|p| pool.as_ref().is_none_or(|t| matches_target(p, t)))
                .map(|p| tarn_ops::pool_row(p))
                .collect();
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "pools": rows }),
            })
        }
        PoolRequest::Get(args) => {
            let properties = args.properties()?;
            let GetArgs { pool, .. } = args;
            let held = daemon.held(&pool)?;
            let altroot = daemon.mounts.altroot(held.name());
            let mut rows = tarn_ops::pool_properties(&held, &properties, altroot.as_deref())?;
            let (cachefile, source) = daemon.caches.property(held.name());
            for row in rows.iter_mut().filter(|row| row.property == "cachefile") {
                row.value = tarn_protocol::rows::PoolPropertyValue::Text(cachefile.clone());
                row.source = source.into();
            }
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "properties": rows }),
            })
        }
        PoolRequest::Set(args) => {
            let (property, value) = args.setting()?;
            let pool = &args.pool;
            let _guard = lock(&daemon.lifecycle);
            let held = daemon.held(pool)?;
            if property == "cachefile" {
                cache::set(daemon, &held, value)?;
            } else {
                tarn_ops::set_pool_property(&held, property, value)?;
            }
            Answer::done()
        }
        PoolRequest::Upgrade(UpgradeArgs { all, pool }) => {
            let _guard = lock(&daemon.lifecycle);
            let pools = match (all, pool) {
                (_, Some(target)) => vec![daemon.held(&target)?],
                (true, None) => daemon.pools(),
                (false, None) => {
                    let pools = daemon.pools();
                    let pools: Vec<&Pool> = pools.iter().map(|pool| pool.as_ref()).collect();
                    for line in tarn_ops::upgrade_listing(&pools) {
                        out!("{line}");
                    }
                    return Answer::done();
                }
            };
            for pool in pools {
                for line in tarn_ops::upgrade_pool(&pool)? {
                    out!("{line}");
                }
            }
            Answer::done()
        }
        PoolRequest::Status(StatusArgs {
            pool,
            verbose,
            exact,
            ..
        }) => {
            let entries: Vec<StatusEntry> = daemon
                .pools()
                .iter()
                .filter(|p| pool.as_ref().is_none_or(|t| matches_target(p, t)))
                .map(|p| tarn_ops::status_entry(p, verbose, exact))
                .collect();
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "pools": entries }),
            })
        }
        PoolRequest::History(HistoryArgs { pool, .. }) => {
            let held = daemon.held(&pool)?;
            let rows = tarn_ops::records::history_rows(&held)?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "history": rows }),
            })
        }
        PoolRequest::Clear(ClearArgs { pool, device }) => {
            let held = daemon.held(&pool)?;
            if held.suspended_reason().is_some() && !held.is_readonly() {
                drop(held);
                return resume_suspended(daemon, &pool, device.as_deref());
            }
            held.clear_errors(device.as_deref())?;
            Answer::done()
        }
    }
}

/// `pool clear` of a pool suspended by a failed sync: the sync is retried from scratch. The
/// pool is closed as a crash would close it (what its unsynced txgs held in memory is lost;
/// it was never promised durable) and imported again from its last committed txg, which claims
/// and replays the intent logs, so every change an fsync returned for is kept; its file
/// systems mount again where they were, its error counts are cleared. Open files on its mounts
/// go stale. If the devices still fail, the next sync suspends it again.
fn resume_suspended(
    daemon: &Arc<Daemon>,
    target: &str,
    device: Option<&str>,
) -> Result<Answer, Reply> {
    let _guard = lock(&daemon.lifecycle);
    let (name, dirs, altroot, why) = {
        let held = daemon.held(target)?;
        let mut dirs: Vec<PathBuf> = held
            .vdev_paths()
            .iter()
            .filter_map(|path| path.parent().map(Path::to_path_buf))
            .collect();
        dirs.sort();
        dirs.dedup();
        let name = held.name().to_string();
        let altroot = daemon.mounts.altroot(&name);
        let why = held.suspended_reason().unwrap_or_default();
        (name, dirs, altroot, why)
    };
    log::warn!("pool {name}: suspended ({why}); pool clear reopens it from its last committed txg");
    let released = daemon.release(target, true)?;
    // Export cannot write a suspended pool's labels: it stops the sync thread and the drop
    // releases the devices, as after a crash.
    if let Err(error) = released.export() {
        log::info!("pool {name}: closed while suspended: {error}");
    }
    let opened = tarn_ops::import(&name, ImportOptions::new(dirs, daemon.tunables.clone()))
        .map_err(|failure| {
            Failure(format!(
                "pool {name} was closed to retry its failed sync, but it could not be opened again: {}; import it with tarn pool import {name}",
                failure.0
            ))
        })?;
    opened.clear_errors(device)?;
    if let Err(failure) = daemon.mount_pool(&opened, altroot) {
        opened.export()?;
        return Err(failure.into());
    }
    let txg = opened.last_synced_txg();
    daemon.insert(opened);
    out!("pool {name} resumed: reopened from txg {txg}, intent logs replayed");
    Answer::done()
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

/// `pool import` of a pool this daemon imported from its cache file when it started (a kill
/// or reboot, then the user imports as before): with the same options it is done already;
/// with others (read-only, another altroot, a rewind, a new name) the pool is exported first
/// and the import goes ahead as asked. None: not such a pool.
fn imported_at_start(
    daemon: &Arc<Daemon>,
    target: &str,
    readonly: bool,
    altroot: Option<&Path>,
    rewind: bool,
    new_name: &Option<String>,
) -> Result<Option<Result<Answer, Reply>>, Reply> {
    let Some(held) = daemon.pool(target) else {
        return Ok(None);
    };
    let name = held.name().to_string();
    if !daemon.caches.take_imported_at_start(&name) {
        return Ok(None);
    }
    let same = held.is_readonly() == readonly
        && daemon.mounts.altroot(&name).as_deref() == altroot
        && !rewind
        && new_name.is_none();
    if same {
        out!(
            "imported pool {name} at txg {} (from the cache file {} when the daemon started)",
            held.last_synced_txg(),
            daemon.caches.default.display()
        );
        return Ok(Some(Answer::done()));
    }
    drop(held);
    daemon.release(&name, false)?.export()?;
    Ok(None)
}
