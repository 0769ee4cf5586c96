//! The daemon side of the dataset verbs (`tarn create|destroy|list|get|set|inherit|mount|
//! unmount|userspace|allow|unallow`): their requests (`handle`) and what they do to an imported pool and its
//! mounts.
//! The rows they fill are in `tarn_protocol::rows`; the CLI side is `verbs::dataset` in tarn-cli.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tarn::{DatasetInfo, DatasetValue, OwnerKind, OwnerProperty, Pool, Property};
use tarn_protocol::error::Failure;
use tarn_protocol::format::{human_bytes, utc_time, Cell};
use tarn_protocol::request::dataset::{
    parse_settings, CreateArgs, DatasetRequest, DestroyArgs, InheritArgs, MountArgs, UnmountArgs,
};
use tarn_protocol::rows::{ratio_cell, DatasetRow, OwnerSpaceRow, PropertyRow};

use super::held::{lock, Answer, Daemon, Reply};
use super::mounts::{shown_mountpoint, Mounts, Placement};

fn row(pool: &Pool, mounts: &Mounts, info: &DatasetInfo) -> Result<DatasetRow, Failure> {
    // Each settable property's source goes with the row, for `list -j`.
    let mut sources = BTreeMap::new();
    let mut value = |property: Property| {
        let (value, source) = pool.property(&info.name, property)?;
        sources.insert(property.name().to_string(), source.to_string());
        Ok::<_, Failure>(value)
    };
    value(Property::Mountpoint)?;
    for limit in [
        Property::Quota,
        Property::Refquota,
        Property::Reservation,
        Property::Refreservation,
    ] {
        value(limit)?;
    }
    let mut row = DatasetRow {
        name: info.name.clone(),
        used: info.used,
        avail: info.available,
        refer: info.referenced,
        mountpoint: shown_mountpoint(pool, mounts, &info.name)?,
        creation: info.creation_time,
        compressratio: info.compress_ratio(),
        refcompressratio: info.ref_compress_ratio(),
        mounted: mounts.mountpoint_of(&info.name).is_some(),
        kind: "filesystem".into(),
        written: info.written,
        usedbydataset: info.used_by_dataset,
        usedbysnapshots: info.used_by_snapshots,
        usedbychildren: info.used_by_children,
        guid: info.guid,
        createtxg: info.creation_txg,
        origin: info.origin.clone().unwrap_or_else(|| "-".into()),
        recordsize: value(Property::Recordsize)?.parse().unwrap_or(0),
        compression: value(Property::Compression)?,
        checksum: value(Property::Checksum)?,
        copies: value(Property::Copies)?.parse().unwrap_or(1),
        atime: value(Property::Atime)?,
        readonly: value(Property::Readonly)?,
        canmount: value(Property::Canmount)?,
        snapdir: value(Property::Snapdir)?,
        xattr: value(Property::Xattr)?,
        acltype: value(Property::Acltype)?,
        quota: info.limits.quota,
        refquota: info.limits.refquota,
        reservation: info.limits.reservation,
        refreservation: info.limits.refreservation,
        usedbyrefreservation: info.used_by_refreservation,
        sources: BTreeMap::new(),
    };
    row.sources = sources;
    Ok(row)
}

/// `tarn list`: every dataset of every pool, or `name` (and with `depth` its descendants down
/// to that depth: children at 1, a file system's snapshots and bookmarks one below it), of the
/// `types` wanted (`filesystem`, `snapshot`, `bookmark`, `all`; none: file systems). A file
/// system's snapshots follow it, oldest first, then its bookmarks, before its children.
pub fn list(
    pools: &[Arc<Pool>],
    mounts: &Mounts,
    name: Option<&str>,
    depth: Option<usize>,
    types: &[String],
) -> Result<Vec<DatasetRow>, Failure> {
    let wants = |kind: &str| {
        types.iter().any(|wanted| wanted == kind || wanted == "all")
            || (types.is_empty() && kind == "filesystem")
    };
    if let Some(snapshot) = name.filter(|name| name.contains('@')) {
        let pool = pools
            .iter()
            .find(|pool| pool.name() == tarn_ops::pool_of(snapshot))
            .ok_or_else(|| Failure(format!("dataset {snapshot:?} does not exist")))?;
        return Ok(vec![super::snapshots::row(
            pool,
            &pool.snapshot_info(snapshot)?,
        )?]);
    }
    let mut rows = Vec::new();
    let mut found = name.is_none();
    for pool in pools {
        let snapshots = if wants("snapshot") {
            pool.snapshots()
        } else {
            Vec::new()
        };
        // Each file system's snapshots (the engine lists them grouped, oldest first).
        let mut snapshots_of: BTreeMap<&str, Vec<&tarn::SnapshotInfo>> = BTreeMap::new();
        for snapshot in &snapshots {
            snapshots_of
                .entry(super::snapshots::filesystem_of(&snapshot.name))
                .or_default()
                .push(snapshot);
        }
        let mut snapshot_properties = super::snapshots::SnapshotProperties::default();
        for info in pool.datasets() {
            // How far below the dataset named (0: itself; every one without a name).
            let level = match name {
                None => Some(0),
                Some(name) if info.name == name => Some(0),
                Some(name) => info
                    .name
                    .strip_prefix(name)
                    .filter(|rest| rest.starts_with('/'))
                    .map(|rest| rest.matches('/').count()),
            };
            let limit = if name.is_some() {
                depth.unwrap_or(0)
            } else {
                usize::MAX
            };
            if let Some(level) = level.filter(|level| *level <= limit) {
                found |= Some(info.name.as_str()) == name;
                if wants("filesystem") {
                    rows.push(row(pool, mounts, &info)?);
                }
                // A file system's snapshots and bookmarks are one level below it; a dataset
                // named alone (no -r, -d) still lists its own with -t.
                if level >= limit && depth.is_some() {
                    continue;
                }
                for snapshot in snapshots_of.get(info.name.as_str()).into_iter().flatten() {
                    rows.push(super::snapshots::row_with(
                        pool,
                        snapshot,
                        &mut snapshot_properties,
                    )?);
                }
                if wants("bookmark") {
                    for bookmark in pool.bookmarks_of(&info.name)? {
                        rows.push(super::snapshots::bookmark_row(&bookmark));
                    }
                }
            }
        }
    }
    if !found {
        return Err(Failure(format!(
            "dataset {:?} does not exist",
            name.unwrap_or_default()
        )));
    }
    Ok(rows)
}

/// The datasets `tarn get` shows for `name`: it, and with `depth` its descendants down to that
/// depth (children at 1; a file system's snapshots one below it), of the `types` wanted (none:
/// file systems and snapshots), each file system followed by its snapshots, oldest first.
fn get_targets(
    pool: &Pool,
    name: &str,
    depth: Option<usize>,
    types: &[String],
) -> Result<Vec<String>, Failure> {
    let wants = |kind: &str| {
        types.is_empty() || types.iter().any(|wanted| wanted == kind || wanted == "all")
    };
    let Some(depth) = depth else {
        return Ok(vec![name.to_string()]);
    };
    if name.contains('@') {
        pool.snapshot_info(name)?;
        return Ok(if wants("snapshot") {
            vec![name.to_string()]
        } else {
            Vec::new()
        });
    }
    if !pool.has_dataset(name) {
        return Err(Failure(format!("dataset {name:?} does not exist")));
    }
    let base = name.matches('/').count();
    let below = format!("{name}/");
    let mut snapshots_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if wants("snapshot") {
        for snapshot in pool.snapshots() {
            let file_system = super::snapshots::filesystem_of(&snapshot.name).to_string();
            snapshots_of
                .entry(file_system)
                .or_default()
                .push(snapshot.name);
        }
    }
    let mut targets = Vec::new();
    for info in pool.datasets() {
        if info.name != name && !info.name.starts_with(&below) {
            continue;
        }
        let level = info.name.matches('/').count() - base;
        if level > depth {
            continue;
        }
        if wants("filesystem") {
            targets.push(info.name.clone());
        }
        if level < depth {
            targets.extend(snapshots_of.remove(&info.name).unwrap_or_default());
        }
    }
    Ok(targets)
}

/// `tarn get`: `properties` (names, or `all`) of one file system or snapshot, as the engine
/// evaluates them; here they are formatted, with the two only the mounts know: whether the
/// file system is mounted and where its mountpoint is shown (under the pool's altroot).
pub fn get(
    pool: &Pool,
    mounts: &Mounts,
    name: &str,
    properties: &[String],
) -> Result<Vec<PropertyRow>, Failure> {
    let mut rows = Vec::new();
    for property in pool.dataset_properties(name, properties)? {
        let statistic = |exact: String, human: String| PropertyRow {
            name: name.to_string(),
            property: property.name.clone(),
            exact,
            human,
            source: property.source.to_string(),
        };
        let row = match property.value {
            DatasetValue::Bytes(value) => statistic(value.to_string(), human_bytes(value)),
            DatasetValue::Ratio(ratio) => {
                let cell = ratio_cell(ratio);
                statistic(cell.exact, cell.human)
            }
            DatasetValue::Time(seconds) => statistic(seconds.to_string(), utc_time(seconds)),
            DatasetValue::Number(number) => statistic(number.to_string(), number.to_string()),
            // A count is shown short in the form of a size, as zfs_nicenum shows both.
            DatasetValue::Count(count) => statistic(count.to_string(), human_bytes(count)),
            DatasetValue::Limit(limit) => {
                let cell = Cell::limit(limit.unwrap_or(0));
                statistic(cell.exact, cell.human)
            }
            DatasetValue::Text(ref text) => statistic(text.clone(), text.clone()),
            DatasetValue::Mounted => {
                let mounted = if mounts.mountpoint_of(name).is_some() {
                    "yes"
                } else {
                    "no"
                };
                statistic(mounted.into(), mounted.into())
            }
            DatasetValue::Setting(Property::Mountpoint, _) => {
                let shown = shown_mountpoint(pool, mounts, name)?;
                PropertyRow::settable(name, Property::Mountpoint, shown, property.source)
            }
            DatasetValue::Setting(setting, value) => {
                PropertyRow::settable(name, setting, value, property.source)
            }
        };
        rows.push(row);
    }
    Ok(rows)
}

/// `tarn userspace|groupspace|projectspace`: every owner of the `kinds` named (`user`,
/// `group`, `project`) in file system or snapshot `name` that owns something or has a quota,
/// with numeric IDs. With no kind (`-t smbuser`) the dataset is still looked up, so that a
/// name that does not exist is an error whatever the types.
pub fn owner_space(
    pool: &Pool,
    name: &str,
    kinds: &[String],
) -> Result<Vec<OwnerSpaceRow>, Failure> {
    let mut rows = Vec::new();
    for word in kinds {
        let kind = OwnerKind::ALL
            .into_iter()
            .find(|kind| kind.word() == word)
            .ok_or_else(|| {
                Failure(format!(
                    "bad request: owner kind {word:?} is none of user, group, project"
                ))
            })?;
        rows.extend(
            pool.owner_space(name, kind)?
                .into_iter()
                .map(|space| OwnerSpaceRow {
                    kind: space.kind.word().to_string(),
                    id: space.id,
                    used: space.used,
                    quota: space.quota,
                    objused: space.objects,
                    objquota: space.object_quota,
                }),
        );
    }
    if kinds.is_empty() {
        if name.contains('@') {
            pool.snapshot_info(name)?;
        } else if !pool.has_dataset(name) {
            return Err(Failure(format!("dataset {name:?} does not exist")));
        }
    }
    Ok(rows)
}

/// `tarn set` and `tarn inherit` (value None).
pub fn set(
    pool: &Pool,
    mounts: &Mounts,
    name: &str,
    property: &str,
    value: Option<&str>,
) -> Result<(), Failure> {
    writable(pool)?;
    pool.set_property(name, property, value)?;
    apply_to_mounts(pool, mounts, name, property)
}

/// `tarn inherit -S`: the received value back in effect, and the mounts brought in line.
fn revert_to_received(
    pool: &Pool,
    mounts: &Mounts,
    name: &str,
    property: &str,
) -> Result<(), Failure> {
    writable(pool)?;
    pool.revert_to_received(name, property)?;
    apply_to_mounts(pool, mounts, name, property)
}

fn writable(pool: &Pool) -> Result<(), Failure> {
    if pool.is_readonly() {
        return Err(Failure(format!(
            "pool {} is imported read-only",
            pool.name()
        )));
    }
    Ok(())
}

/// After a property of `name` changed: the mounts it decides follow.
fn apply_to_mounts(
    pool: &Pool,
    mounts: &Mounts,
    name: &str,
    property: &str,
) -> Result<(), Failure> {
    if OwnerProperty::is_owner_property_name(property) || tarn::is_user_property_name(property) {
        // An owner quota or a user property decides nothing about the mounts.
        return Ok(());
    }
    let property = Property::from_name(property).expect("validated by set_property");
    mounts.apply_change(pool, name, property)
}

/// `tarn destroy`: plan (see [`Pool::destroy_plan`]), then with `dry_run` print the plan;
/// otherwise unmount every file system in it and destroy them, in the plan's order.
pub fn destroy(
    pool: &Pool,
    mounts: &Mounts,
    name: &str,
    options: DestroyOptions,
) -> Result<(), Failure> {
    if name == pool.name() {
        return Err(Failure(format!(
            "cannot destroy {name}: it is the pool's root file system; destroy the pool instead (tarn pool destroy {name})"
        )));
    }
    if !pool.has_dataset(name) {
        return Err(Failure(format!("dataset {name:?} does not exist")));
    }
    // Refused requests (children or snapshots without -r, outside clones without -R) leave
    // the mounts alone.
    let plan = pool.destroy_plan(name, options.recursive, options.dependents)?;
    if options.dry_run || options.verbose {
        let verb = if options.dry_run { "would" } else { "will" };
        for doomed in &plan {
            out!("{verb} destroy {doomed}");
        }
    }
    if options.dry_run {
        return Ok(());
    }
    for doomed in plan.iter().filter(|doomed| !doomed.contains('@')) {
        mounts.unmount_within(pool, doomed, false)?;
    }
    for destroyed in tarn_ops::destroy_reporting(pool, name, options.recursive, options.dependents)?
    {
        if let Some((file_system, _)) = destroyed.split_once('@') {
            mounts.snapshots_changed(file_system);
        }
    }
    Ok(())
}

/// How `tarn destroy` of a file system goes: `-r`, `-R`, `-n`, `-v`.
#[derive(Clone, Copy, Debug, Default)]
pub struct DestroyOptions {
    pub recursive: bool,
    pub dependents: bool,
    pub dry_run: bool,
    pub verbose: bool,
}

/// `tarn mount FS [MOUNTPOINT]`.
pub fn mount(
    pool: &Pool,
    mounts: &Mounts,
    name: &str,
    mountpoint: Option<&Path>,
) -> Result<(), Failure> {
    if pool.is_readonly() {
        return Err(Failure(format!(
            "pool {} is imported read-only: its file systems are not mounted",
            pool.name()
        )));
    }
    if !pool.has_dataset(name) {
        return Err(Failure(format!("dataset {name:?} does not exist")));
    }
    let target = match (mountpoint, mounts.placement(pool, name)?) {
        (Some(path), _) if path.is_absolute() => path.to_path_buf(),
        (Some(path), _) => {
            return Err(Failure(format!(
                "bad request: mountpoint {} is not absolute",
                path.display()
            )))
        }
        (None, Placement::At { path, .. }) => path,
        (None, Placement::Never(why)) => {
            return Err(Failure(format!(
                "cannot mount {name}: {why}; set mountpoint to a path (and canmount to on), or name a mountpoint"
            )))
        }
    };
    mounts.mount(pool, name, &target)
}

/// A dataset request.
pub(super) fn handle(daemon: &Arc<Daemon>, request: DatasetRequest) -> Result<Answer, Reply> {
    let request_verb = request.verb();
    match request {
        DatasetRequest::Create(args) => {
            let properties = parse_settings(&args.properties)?;
            let CreateArgs { name, parents, .. } = args;
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
        DatasetRequest::Destroy(DestroyArgs {
            name,
            recursive,
            recursive_dependents: dependents,
            dry_run,
            verbose,
            defer,
        }) => {
            if defer {
                return Err(Failure(format!(
                    "cannot destroy {name}: -d (deferred destroy) applies to snapshots, FS@SNAP"
                ))
                .into());
            }
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&name)?;
            let options = DestroyOptions {
                recursive: recursive || dependents,
                dependents,
                dry_run,
                verbose,
            };
            destroy(&pool, &daemon.mounts, &name, options)?;
            Answer::done()
        }
        DatasetRequest::List(args) => {
            let depth = args.depth.or(args.recursive.then_some(usize::MAX));
            let rows = list(
                &daemon.pools(),
                &daemon.mounts,
                args.name.as_deref(),
                depth,
                args.types()?,
            )?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "datasets": rows }),
            })
        }
        DatasetRequest::Get(args) => {
            let properties = args.properties()?;
            let types = args.types()?;
            let depth = args.depth.or(args.recursive.then_some(usize::MAX));
            let mut rows = Vec::new();
            for name in &args.names {
                let pool = daemon.pool_of_dataset(name)?;
                for target in get_targets(&pool, name, depth, types)? {
                    rows.extend(get(&pool, &daemon.mounts, &target, &properties)?);
                }
            }
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "properties": rows }),
            })
        }
        DatasetRequest::Set(args) => {
            let settings = args.settings()?;
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&args.name)?;
            // Every setting is checked before any is made, as zfs set checks its list.
            for (at, (property, value)) in settings.iter().enumerate() {
                if settings[..at]
                    .iter()
                    .any(|(earlier, _)| earlier == property)
                {
                    return Err(Failure(format!(
                        "cannot set property for {}: {property} is given more than once",
                        args.name
                    ))
                    .into());
                }
                Pool::check_setting(property, value)?;
            }
            for (property, value) in &settings {
                set(&pool, &daemon.mounts, &args.name, property, Some(value))?;
            }
            Answer::done()
        }
        DatasetRequest::Inherit(InheritArgs {
            recursive,
            received,
            property,
            name,
        }) => {
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&name)?;
            let targets = if recursive {
                get_targets(&pool, &name, Some(usize::MAX), &["filesystem".to_string()])?
            } else {
                vec![name.clone()]
            };
            for target in targets {
                if received {
                    revert_to_received(&pool, &daemon.mounts, &target, &property)?;
                } else {
                    set(&pool, &daemon.mounts, &target, &property, None)?;
                }
            }
            Answer::done()
        }
        DatasetRequest::Userspace(args) => {
            let pool = daemon.pool_of_dataset(&args.name)?;
            let rows = owner_space(&pool, &args.name, &args.kinds)?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "owners": rows }),
            })
        }
        DatasetRequest::Allow(args) if args.lists() => {
            let name = args.name();
            let pool = daemon.pool_of_dataset(name)?;
            let listed: Vec<serde_json::Value> = pool
                .grants(name)?
                .into_iter()
                .map(|(dataset, grants)| {
                    let grants: Vec<serde_json::Value> = grants
                        .into_iter()
                        .map(|grant| {
                            serde_json::json!({
                                "kind": grant.grantee.kind_word(),
                                "id": grant.grantee.id(),
                                "scope": grant.scope.word(),
                                "permissions": grant.permissions,
                            })
                        })
                        .collect();
                    serde_json::json!({ "dataset": dataset, "grants": grants })
                })
                .collect();
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "permissions": listed }),
            })
        }
        DatasetRequest::Allow(args) | DatasetRequest::Unallow(args) => {
            let change = super::authority::grant_change(&args, request_verb == "allow")?;
            let name = args.name();
            if name.contains(['@', '#']) {
                return Err(Failure(format!(
                    "cannot {request_verb} on {name}: permissions are granted on file systems"
                ))
                .into());
            }
            let pool = daemon.pool_of_dataset(name)?;
            pool.change_grants(name, &change)?;
            Answer::done()
        }
        DatasetRequest::Mount(MountArgs {
            name,
            mountpoint,
            all,
            ..
        }) => {
            let _guard = lock(&daemon.lifecycle);
            match (name, all) {
                (None, false) => {
                    let transports = daemon.mounts.transports();
                    let rows: Vec<serde_json::Value> = daemon
                        .mounts
                        .list()
                        .into_iter()
                        .map(|(name, path)| {
                            let mut row = serde_json::json!({
                                "name": name,
                                "mountpoint": path.display().to_string(),
                            });
                            if let Some(state) = transports.get(&name) {
                                row["transport"] = state.name().into();
                                if let tarn_fuse::TransportState::Dev { reason } = state {
                                    row["transport_reason"] = reason.as_str().into();
                                }
                            }
                            row
                        })
                        .collect();
                    Ok(Answer {
                        status: 0,
                        data: serde_json::json!({ "mounts": rows }),
                    })
                }
                (None, true) => {
                    let mut failed = false;
                    for pool in daemon.pools().iter().filter(|pool| !pool.is_readonly()) {
                        failed |= !daemon.mounts.mount_all(pool, None).is_empty();
                    }
                    Ok(Answer {
                        status: u8::from(failed),
                        data: serde_json::Value::Null,
                    })
                }
                (Some(name), _) => {
                    let pool = daemon.pool_of_dataset(&name)?;
                    mount(&pool, &daemon.mounts, &name, mountpoint.as_deref())?;
                    Answer::done()
                }
            }
        }
        DatasetRequest::Unmount(UnmountArgs { target, all, force }) => {
            let _guard = lock(&daemon.lifecycle);
            match (target, all) {
                (None, true) => {
                    for pool in daemon.pools() {
                        daemon.mounts.unmount_within(&pool, pool.name(), force)?;
                    }
                }
                (Some(target), _) => {
                    let dataset = daemon.mounts.resolve(&target).ok_or_else(|| {
                        Failure(format!(
                            "{target} is not a mounted tarn file system (give a dataset name or its mountpoint)"
                        ))
                    })?;
                    let pool = daemon.pool_of_dataset(&dataset)?;
                    daemon.mounts.unmount_within(&pool, &dataset, force)?;
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
