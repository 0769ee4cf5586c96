//! The daemon side of the snapshot verbs (`tarn snapshot`, `destroy FS@SNAP`, `rollback`,
//! `rename` of snapshots and file systems, `diff`, `debug dataset`) and the snapshot rows of
//! `tarn list`. The engine does the work (`tarn::pool::snapshots`, `tarn::send::diff`); here
//! are the mounts' part (a rollback resets the mounted file system in place, so the kernel's
//! cache must be told; a diff's paths are under the mountpoint) and the printing.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use tarn::{Pool, Property, SnapshotInfo};
use tarn_protocol::error::Failure;
use tarn_protocol::format::{human_bytes, utc_time};
use tarn_protocol::request::dataset::DestroyArgs;
use tarn_protocol::request::snapshot::{
    BookmarkArgs, CloneArgs, DiffArgs, HoldArgs, HoldsArgs, NameArgs, RenameArgs, RollbackArgs,
    SnapshotArgs, SnapshotRequest,
};
use tarn_protocol::rows::{DatasetRow, DiffRow, HoldRow, PathBytes};

use super::held::{lock, Answer, Daemon, Reply};

/// The file system a snapshot belongs to (`tank/a@s` -> `tank/a`).
pub fn filesystem_of(snapshot: &str) -> &str {
    snapshot.split('@').next().unwrap_or(snapshot)
}

/// The pool of the snapshots a hold verb names: one pool for all (OpenZFS's holds are one
/// sync task in one pool too).
fn pool_of_snapshots(daemon: &Daemon, names: &[String]) -> Result<Arc<Pool>, Failure> {
    let first = names
        .first()
        .ok_or_else(|| Failure("bad request: no snapshot named".into()))?;
    let pool = tarn_ops::pool_of(first);
    if let Some(other) = names.iter().find(|name| tarn_ops::pool_of(name) != pool) {
        return Err(Failure(format!(
            "cannot hold or release {first} and {other} together: name snapshots of one pool"
        )));
    }
    daemon.pool_of_dataset(first)
}

/// The settable properties a snapshot shows, which are its file system's: looked up once per
/// file system and property while one listing lasts, not once per snapshot (a listing of
/// 100,000 snapshots would otherwise resolve 800,000 properties through the MOS).
#[derive(Default)]
pub struct SnapshotProperties {
    /// (file system, property) -> (value, source).
    known: BTreeMap<(String, Property), (String, String)>,
}

impl SnapshotProperties {
    fn get(
        &mut self,
        pool: &Pool,
        snapshot: &str,
        property: Property,
    ) -> Result<(String, String), Failure> {
        let key = (filesystem_of(snapshot).to_string(), property);
        if let Some(known) = self.known.get(&key) {
            return Ok(known.clone());
        }
        let (value, source) = pool.snapshot_property(snapshot, property)?;
        let known = (value, source.to_string());
        self.known.insert(key, known.clone());
        Ok(known)
    }
}

/// A snapshot's row in `tarn list` (its file system's properties where it has none).
pub fn row(pool: &Pool, info: &SnapshotInfo) -> Result<DatasetRow, Failure> {
    row_with(pool, info, &mut SnapshotProperties::default())
}

/// [`row`], with the file systems' properties looked up once for many rows.
pub fn row_with(
    pool: &Pool,
    info: &SnapshotInfo,
    properties: &mut SnapshotProperties,
) -> Result<DatasetRow, Failure> {
    // Each settable property's source goes with the row, for `list -j`: as `tarn get` of a
    // snapshot gives it.
    let mut sources = BTreeMap::new();
    let mut value = |property: Property| {
        let (value, source) = properties.get(pool, &info.name, property)?;
        sources.insert(property.name().to_string(), source);
        Ok::<_, Failure>(value)
    };
    let compressratio = info.compress_ratio();
    let mut row = DatasetRow {
        name: info.name.clone(),
        used: info.used,
        avail: 0,
        refer: info.referenced,
        mountpoint: "-".into(),
        creation: info.creation_time,
        compressratio,
        refcompressratio: compressratio,
        mounted: false,
        recordsize: value(Property::Recordsize)?.parse().unwrap_or(0),
        compression: value(Property::Compression)?,
        checksum: value(Property::Checksum)?,
        copies: value(Property::Copies)?.parse().unwrap_or(1),
        atime: value(Property::Atime)?,
        readonly: "on".into(),
        canmount: "-".into(),
        kind: "snapshot".into(),
        written: info.written,
        usedbydataset: 0,
        usedbysnapshots: 0,
        usedbychildren: 0,
        guid: info.guid,
        createtxg: info.creation_txg,
        origin: "-".into(),
        snapdir: value(Property::Snapdir)?,
        xattr: value(Property::Xattr)?,
        acltype: value(Property::Acltype)?,
        quota: 0,
        refquota: 0,
        reservation: 0,
        refreservation: 0,
        usedbyrefreservation: 0,
        sources: BTreeMap::new(),
    };
    row.sources = sources;
    Ok(row)
}

/// A bookmark's row in `tarn list -t bookmark`: its name, guid, txg and creation time.
pub fn bookmark_row(info: &tarn::BookmarkInfo) -> DatasetRow {
    DatasetRow {
        name: info.name.clone(),
        used: 0,
        avail: 0,
        refer: 0,
        mountpoint: "-".into(),
        creation: info.creation_time,
        compressratio: 1.0,
        refcompressratio: 1.0,
        mounted: false,
        recordsize: 0,
        compression: "-".into(),
        checksum: "-".into(),
        copies: 0,
        atime: "-".into(),
        readonly: "-".into(),
        canmount: "-".into(),
        kind: "bookmark".into(),
        written: 0,
        usedbydataset: 0,
        usedbysnapshots: 0,
        usedbychildren: 0,
        guid: info.guid,
        createtxg: info.creation_txg,
        origin: "-".into(),
        snapdir: "-".into(),
        xattr: "-".into(),
        acltype: "-".into(),
        quota: 0,
        refquota: 0,
        reservation: 0,
        refreservation: 0,
        usedbyrefreservation: 0,
        sources: BTreeMap::new(),
    }
}

/// `tarn debug dataset`: the record, the directory and the deadlist entries, as zdb -dddd.
fn debug_dataset(pool: &Pool, name: &str) -> Result<String, Failure> {
    let records = pool.dataset_records(name)?;
    let phys = &records.phys;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "Dataset {} [{}], object {}",
        records.name,
        if phys.is_snapshot() {
            "ZPL snapshot"
        } else {
            "ZPL"
        },
        records.object
    );
    let lines = [
        ("dir_obj", phys.dir_object.0.to_string()),
        ("prev_snap_obj", phys.prev_snapshot_object.0.to_string()),
        ("prev_snap_txg", phys.prev_snapshot_txg.0.to_string()),
        ("next_snap_obj", phys.next_snapshot_object.0.to_string()),
        ("snapnames_zapobj", phys.snapshot_names_object.0.to_string()),
        ("num_children (clones)", phys.clone_count.to_string()),
        ("next_clones_obj", phys.next_clones_object.0.to_string()),
        ("creation_time", utc_time(phys.creation_time)),
        ("creation_txg", phys.creation_txg.0.to_string()),
        ("deadlist_obj", phys.deadlist_object.0.to_string()),
        ("used_bytes (referenced)", phys.referenced_bytes.to_string()),
        ("compressed_bytes", phys.compressed_bytes.to_string()),
        ("uncompressed_bytes", phys.uncompressed_bytes.to_string()),
        ("unique", phys.unique_bytes.to_string()),
        ("guid", phys.guid.0.to_string()),
        ("flags", format!("{:#x}", phys.flags)),
        ("userrefs_obj", phys.user_holds_object.0.to_string()),
        ("props_obj", phys.snapshot_props_object.0.to_string()),
        ("livelist_obj", phys.livelist_object.0.to_string()),
        ("bp", phys.root.to_string()),
    ];
    for (label, value) in lines {
        let _ = writeln!(text, "\t\t{label} = {value}");
    }
    if let Some(dir) = &records.dir {
        let _ = writeln!(text, "\tDirectory:");
        let used = &dir.used_breakdown;
        for (label, value) in [
            ("head_dataset_obj", dir.head_dataset_object.0),
            ("parent_dir_obj", dir.parent_dir_object.0),
            ("origin_obj", dir.origin_snapshot_object.0),
            ("origin_txg", dir.origin_txg.0),
            ("child_dir_zapobj", dir.children_object.0),
            ("props_zapobj", dir.properties_object.0),
            ("clones", dir.clones_object.0),
            ("used_bytes", dir.used_bytes),
            ("compressed_bytes", dir.compressed_bytes),
            ("uncompressed_bytes", dir.uncompressed_bytes),
            ("used_breakdown[HEAD]", used.dataset),
            ("used_breakdown[SNAP]", used.snapshots),
            ("used_breakdown[CHILD]", used.children),
            ("used_breakdown[REFRSRV]", used.refreservation),
            ("used_breakdown[CHILD_RSRV]", used.child_reservation),
        ] {
            let _ = writeln!(text, "\t\t{label} = {value}");
        }
    }
    let total: u64 = records
        .deadlist
        .iter()
        .map(|(_, _, space)| space.used_bytes)
        .sum();
    let compressed: u64 = records
        .deadlist
        .iter()
        .map(|(_, _, space)| space.compressed_bytes)
        .sum();
    let uncompressed: u64 = records
        .deadlist
        .iter()
        .map(|(_, _, space)| space.uncompressed_bytes)
        .sum();
    let _ = writeln!(
        text,
        "\tDeadlist: {} ({}/{} comp), {} entries",
        human_bytes(total),
        human_bytes(compressed),
        human_bytes(uncompressed),
        records.deadlist.len()
    );
    for (key, list, space) in &records.deadlist {
        let _ = writeln!(
            text,
            "\t\tmintxg {key} -> obj {list}: {} ({}/{} comp)",
            human_bytes(space.used_bytes),
            human_bytes(space.compressed_bytes),
            human_bytes(space.uncompressed_bytes)
        );
    }
    if !records.snapshots.is_empty() {
        let _ = writeln!(text, "\tSnapshots:");
        for (name, object, txg) in &records.snapshots {
            let _ = writeln!(text, "\t\t{name}: object {object}, txg {txg}");
        }
    }
    if records.phys.livelist_object.0 != 0 {
        let entries: u64 = records.livelist.iter().map(|sub| sub.entries).sum();
        let frees: u64 = records.livelist.iter().map(|sub| sub.frees).sum();
        let live: u64 = records
            .livelist
            .iter()
            .map(|sub| sub.space.used_bytes)
            .sum();
        let _ = writeln!(
            text,
            "\tLivelist: obj {}, {} live, {} sub-lists, {entries} entries ({frees} FREE)",
            records.phys.livelist_object.0,
            human_bytes(live),
            records.livelist.len()
        );
        for sub in &records.livelist {
            let last = if sub.next_key.0 == u64::MAX {
                "-".to_string()
            } else {
                sub.next_key.0.to_string()
            };
            let _ = writeln!(
                text,
                "\t\ttxgs ({}, {last}] -> obj {}: {} entries ({} FREE), {} live",
                sub.key.0,
                sub.list.0,
                sub.entries,
                sub.frees,
                human_bytes(sub.space.used_bytes)
            );
        }
    }
    Ok(text)
}

/// `-R`: destroy every clone of `snapshots` with the clone's own plan (its descendants and
/// their clones, see `Pool::destroy_plan`), each unmounted first; with `dry_run`, print those
/// plans ("would destroy NAME") instead, each name once.
pub fn destroy_dependents(
    pool: &Pool,
    mounts: &super::mounts::Mounts,
    snapshots: &[String],
    dry_run: bool,
) -> Result<(), Failure> {
    let mut listed: Vec<String> = Vec::new();
    for snapshot in snapshots {
        for clone in pool.snapshot_info(snapshot)?.clones {
            let plan = pool.destroy_plan(&clone, true, true)?;
            if dry_run {
                for name in plan {
                    if !listed.contains(&name) {
                        out!("would destroy {name}");
                        listed.push(name);
                    }
                }
                continue;
            }
            for file_system in plan.iter().filter(|name| !name.contains('@')) {
                mounts.unmount_within(pool, file_system, false)?;
            }
            for name in tarn_ops::destroy_reporting(pool, &clone, true, true)? {
                mounts.snapshots_changed(filesystem_of(&name));
            }
        }
    }
    Ok(())
}

/// A snapshot request.
pub(super) fn handle(daemon: &Arc<Daemon>, request: SnapshotRequest) -> Result<Answer, Reply> {
    match request {
        SnapshotRequest::Snapshot(SnapshotArgs { names, recursive }) => {
            let _guard = lock(&daemon.lifecycle);
            let first = names
                .first()
                .ok_or_else(|| Failure("snapshot what? name FS@SNAP".into()))?;
            let pool = daemon.pool_of_dataset(first)?;
            if let Some(other) = names
                .iter()
                .find(|name| tarn_ops::pool_of(name) != pool.name())
            {
                return Err(Failure(format!(
                    "cannot snapshot {other}: snapshots taken together must be in one pool"
                ))
                .into());
            }
            for name in &names {
                daemon.mounts.write_back(filesystem_of(name));
            }
            let created = pool.create_snapshots(&names, recursive)?;
            for name in &created {
                daemon.mounts.snapshots_changed(filesystem_of(name));
            }
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "created": created }),
            })
        }
        SnapshotRequest::Clone(args) => {
            let properties = args.settings()?;
            let CloneArgs { snapshot, name, .. } = args;
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&snapshot)?;
            let created = pool.create_clone(&snapshot, &name, &properties)?;
            let failures = daemon.mounts.mount_all(&pool, Some(&created));
            Ok(Answer {
                status: u8::from(!failures.is_empty()),
                data: serde_json::json!({ "created": [created] }),
            })
        }
        SnapshotRequest::Promote(NameArgs { name }) => {
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&name)?;
            let origin = pool
                .datasets()
                .into_iter()
                .find(|info| info.name == name)
                .and_then(|info| info.origin);
            let moved = pool.promote(&name)?;
            // `.zfs/snapshot` of both file systems changed.
            daemon.mounts.snapshots_changed(&name);
            if let Some(origin) = origin {
                daemon.mounts.snapshots_changed(filesystem_of(&origin));
            }
            for snapshot in &moved {
                out!("moved {snapshot}");
            }
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "moved": moved }),
            })
        }
        SnapshotRequest::DestroySnapshots(DestroyArgs {
            name: spec,
            recursive,
            defer: true,
            dry_run,
            ..
        }) => {
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&spec)?;
            let outcome = pool.destroy_snapshots_deferred(&spec, recursive, dry_run)?;
            let (destroyed_verb, deferred_verb) = if dry_run {
                ("would destroy", "would defer the destroy of")
            } else {
                ("destroyed", "deferred the destroy of")
            };
            for name in &outcome.destroyed {
                if !dry_run {
                    daemon.mounts.snapshots_changed(filesystem_of(name));
                }
                out!("{destroyed_verb} {name}");
            }
            for name in &outcome.deferred {
                out!("{deferred_verb} {name} (it goes with its last hold and clone)");
            }
            Ok(Answer {
                status: 0,
                data: serde_json::json!({
                    "destroyed": outcome.destroyed,
                    "deferred": outcome.deferred,
                }),
            })
        }
        SnapshotRequest::DestroySnapshots(DestroyArgs {
            name: spec,
            recursive,
            recursive_dependents: dependents,
            dry_run,
            ..
        }) => {
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&spec)?;
            if dependents {
                let names = pool.snapshots_to_destroy(&spec, recursive)?;
                destroy_dependents(&pool, &daemon.mounts, &names, dry_run)?;
            }
            let destroyed = if dry_run {
                let names = pool.snapshots_to_destroy(&spec, recursive)?;
                for name in &names {
                    out!("would destroy {name}");
                }
                names
            } else {
                let names = pool.destroy_snapshots(&spec, recursive)?;
                for name in &names {
                    daemon.mounts.snapshots_changed(filesystem_of(name));
                    out!("destroyed {name}");
                }
                names
            };
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "destroyed": destroyed }),
            })
        }
        SnapshotRequest::Rollback(RollbackArgs {
            name,
            recursive: destroy_later,
        }) => {
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&name)?;
            if !name.contains('@') {
                return Err(Failure(format!(
                    "cannot roll back to {name}: name a snapshot, FS@SNAP"
                ))
                .into());
            }
            daemon.mounts.write_back(filesystem_of(&name));
            let destroyed = pool.rollback(&name, destroy_later)?;
            for snapshot in &destroyed {
                daemon.mounts.snapshots_changed(filesystem_of(snapshot));
                out!("destroyed {snapshot}");
            }
            daemon.mounts.after_rollback(filesystem_of(&name));
            Answer::done()
        }
        SnapshotRequest::Rename(RenameArgs { name, new_name }) => {
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&name)?;
            if !name.contains('@') {
                if new_name.contains('@') {
                    return Err(Failure(format!(
                        "cannot rename file system {name} to snapshot name {new_name}"
                    ))
                    .into());
                }
                // Checked before anything is unmounted: a refused rename leaves every mount
                // alone. Then the tree is unmounted under the old name and mounted again where
                // the new one says, what was mounted explicitly (canmount=noauto) included.
                pool.check_rename_dataset(&name, &new_name)?;
                let (renamed, failures) = daemon.mounts.remount_tree(
                    &pool,
                    &name,
                    || Ok(pool.rename_dataset(&name, &new_name)?),
                    &new_name,
                )?;
                out!("renamed {name} to {renamed}");
                return Ok(Answer {
                    status: u8::from(!failures.is_empty()),
                    data: serde_json::Value::Null,
                });
            }
            let renamed = pool.rename_snapshot(&name, &new_name)?;
            daemon.mounts.snapshots_changed(filesystem_of(&name));
            out!("renamed {name} to {renamed}");
            Answer::done()
        }
        SnapshotRequest::Bookmark(BookmarkArgs { snapshot, bookmark }) => {
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&bookmark)?;
            pool.create_bookmark(&snapshot, &bookmark)?;
            out!("bookmarked {snapshot} as {bookmark}");
            Answer::done()
        }
        SnapshotRequest::DestroyBookmark(DestroyArgs {
            name: bookmark,
            dry_run,
            verbose,
            ..
        }) => {
            let _guard = lock(&daemon.lifecycle);
            let pool = daemon.pool_of_dataset(&bookmark)?;
            // A dry run destroys nothing: it names the bookmark if it exists.
            pool.bookmark_info(&bookmark)?;
            if dry_run {
                out!("would destroy {bookmark}");
                return Answer::done();
            }
            if verbose {
                out!("will destroy {bookmark}");
            }
            pool.destroy_bookmark(&bookmark)?;
            out!("destroyed {bookmark}");
            Answer::done()
        }
        SnapshotRequest::Hold(HoldArgs {
            recursive,
            tag,
            snapshots,
        }) => {
            let _guard = lock(&daemon.lifecycle);
            let pool = pool_of_snapshots(daemon, &snapshots)?;
            let held = pool.hold(&tag, &snapshots, recursive)?;
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "held": held }),
            })
        }
        SnapshotRequest::Release(HoldArgs {
            recursive,
            tag,
            snapshots,
        }) => {
            let _guard = lock(&daemon.lifecycle);
            let pool = pool_of_snapshots(daemon, &snapshots)?;
            let outcome = pool.release(&tag, &snapshots, recursive)?;
            for name in &outcome.destroyed {
                daemon.mounts.snapshots_changed(filesystem_of(name));
                out!("destroyed {name} (deferred destroy: its last hold is released)");
            }
            Ok(Answer {
                status: 0,
                data: serde_json::json!({
                    "released": outcome.released,
                    "destroyed": outcome.destroyed,
                }),
            })
        }
        SnapshotRequest::Holds(HoldsArgs {
            recursive,
            snapshots,
            ..
        }) => {
            let pool = pool_of_snapshots(daemon, &snapshots)?;
            let rows: Vec<HoldRow> = pool
                .holds(&snapshots, recursive)?
                .into_iter()
                .map(|hold| HoldRow {
                    name: hold.snapshot,
                    tag: hold.tag,
                    time: hold.time,
                })
                .collect();
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "holds": rows }),
            })
        }
        SnapshotRequest::DebugDataset(NameArgs { name }) => {
            let pool = daemon.pool_of_dataset(&name)?;
            out!("{}", debug_dataset(&pool, &name)?.trim_end());
            Answer::done()
        }
        SnapshotRequest::Diff(DiffArgs { snapshot, to, .. }) => diff(daemon, &snapshot, to),
    }
}

/// `tarn diff FS@SNAP [FS@SNAP|FS]`: the engine's changes as rows, and the mountpoint that
/// the client puts before their paths (zfs prints paths under the mountpoint).
fn diff(daemon: &Daemon, snapshot: &str, to: Option<String>) -> Result<Answer, Reply> {
    let to = to.unwrap_or_else(|| filesystem_of(snapshot).to_string());
    // `@SNAP` for either side is relative to the other's file system.
    let named = if snapshot.starts_with('@') {
        &to
    } else {
        snapshot
    };
    let pool = daemon.pool_of_dataset(named)?;
    // The later side's file system names the paths: its mountpoint is found first, so that a
    // file system without one is refused before anything is read (or a temporary snapshot
    // taken). A name that does not exist is left for the engine to refuse.
    let file_system = if to.starts_with('@') {
        filesystem_of(snapshot)
    } else {
        filesystem_of(&to)
    };
    let mountpoint = if pool.has_dataset(file_system) {
        diff_mountpoint(daemon, &pool, file_system)
            .map_err(|why| Failure(format!("cannot diff {snapshot} and {to}: {why}")))?
    } else {
        String::new()
    };
    // Against the file system itself the engine takes and destroys a temporary snapshot:
    // not while a destroy or rename of it runs.
    let _guard = (!to.contains('@')).then(|| lock(&daemon.lifecycle));
    if !to.contains('@') {
        // What the kernel still holds of the mount's writes reaches the engine first, as
        // before a snapshot: the diff sees what the applications wrote.
        daemon.mounts.write_back(file_system);
    }
    let report = tarn::diff(&pool, snapshot, &to).map_err(|error| Failure(error.to_string()))?;
    if !to.contains('@') {
        daemon.mounts.snapshots_changed(&report.file_system);
    }
    let rows: Vec<DiffRow> = report
        .records
        .into_iter()
        .map(|record| DiffRow {
            change: record.kind.mark(),
            path: PathBytes(record.path),
            new_path: record.new_path.map(PathBytes),
            file_type: file_type_mark(record.file_kind),
            ctime_seconds: record.ctime.seconds,
            ctime_nanoseconds: record.ctime.nanoseconds,
            link_change: record.link_change,
        })
        .collect();
    Ok(Answer {
        status: 0,
        data: serde_json::json!({
            "mountpoint": mountpoint.trim_end_matches('/'),
            "changes": rows,
        }),
    })
}

/// Where `file_system`'s paths are: where it is mounted, else its `mountpoint` property under
/// the altroot (zfs diff needs it mounted; tarn names the paths where it would be).
fn diff_mountpoint(daemon: &Daemon, pool: &Pool, file_system: &str) -> Result<String, String> {
    if let Some(path) = daemon.mounts.mountpoint_of(file_system) {
        return Ok(path.display().to_string());
    }
    let shown = super::mounts::shown_mountpoint(pool, &daemon.mounts, file_system)
        .map_err(|failure| failure.0)?;
    if !shown.starts_with('/') {
        return Err(format!(
            "{file_system} is not mounted and has mountpoint={shown}: its paths are named \
             under its mountpoint"
        ));
    }
    Ok(shown)
}

/// zfs diff's `-F` type character of a file kind.
fn file_type_mark(kind: tarn::FileKind) -> char {
    match kind {
        tarn::FileKind::Regular => 'F',
        tarn::FileKind::Directory => '/',
        tarn::FileKind::Symlink => '@',
        tarn::FileKind::Socket => '=',
        tarn::FileKind::Fifo => '|',
        tarn::FileKind::BlockDevice => 'B',
        tarn::FileKind::CharDevice => 'C',
    }
}
