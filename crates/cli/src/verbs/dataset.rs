//! `tarn create|destroy|list|get|set|inherit|mount|unmount` (zfs): the CLI side of the dataset
//! verbs. Build the request, ask the daemon (which must be running: datasets live in imported
//! pools), print the answer. The daemon side is `tarn_daemon`'s `datasets`. Owner properties
//! (`userquota@alice`) go to the daemon with numeric IDs and come back under the name asked
//! (`owner_names`).

use std::path::Path;

use tarn_protocol::absolute;
use tarn_protocol::client;
use tarn_protocol::error::Failure;
use tarn_protocol::format::{print_table, selected_fields, Cell, ListFormat};
use tarn_protocol::json::{self, Document};
use tarn_protocol::request::dataset::{
    parse_settings, CreateArgs, DatasetRequest, DestroyArgs, GetArgs, InheritArgs, ListArgs,
    MountArgs, SetArgs, UnmountArgs,
};
use tarn_protocol::request::inspect::{InspectRequest, ObjectArgs};
use tarn_protocol::request::snapshot::{
    BookmarkArgs, CloneArgs, NameArgs, RenameArgs, RollbackArgs, SnapshotArgs, SnapshotRequest,
};
use tarn_protocol::rows::{
    dataset_identity, DatasetRow, PropertyRow, GET_COLUMNS, LIST_COLUMNS, LIST_DEFAULT_COLUMNS,
};
use tarn_protocol::{Request, Response};

use tarn::OwnerProperty;
use tarn_ops::pool_of;

use super::owner_names;

/// Ask the daemon about `dataset`; without a daemon no pool is imported and there is
/// nothing to act on.
pub(super) fn ask(
    socket: &Path,
    dataset: Option<&str>,
    request: &Request,
) -> Result<Response, Failure> {
    client::ask_if_running(socket, request)?.ok_or_else(|| {
        let pool = dataset.map(pool_of);
        Failure(match pool {
            Some(pool) => format!(
                "pool {pool:?} is not imported (no pools are: no tarn daemon on {}); import it with tarn pool import {pool}",
                socket.display()
            ),
            None => format!(
                "no pools are imported (no tarn daemon on {}); import one with tarn pool import",
                socket.display()
            ),
        })
    })
}

/// Print the daemon's output; its status.
fn forward(response: &Response) -> u8 {
    tarn_protocol::output::print_raw(&response.stdout, &response.stderr);
    response.status
}

/// A dataset name as the user gave it, checked for the obvious mistakes before asking.
pub(crate) fn check_name(name: &str) -> Result<(), Failure> {
    if name.is_empty()
        || name.starts_with('/')
        || name.ends_with('/')
        || name.starts_with('@')
        || name.matches('@').count() > 1
    {
        return Err(Failure(format!(
            "invalid dataset name {name:?}: expected POOL/NAME"
        )));
    }
    Ok(())
}

/// `PROP=VALUE` settings as the daemon takes them: owner properties by number
/// (`userquota@alice=1G` as `userquota@1000=1G`), the others as given.
fn numeric_settings(settings: Vec<(String, String)>) -> Result<Vec<String>, Failure> {
    settings
        .into_iter()
        .map(|(property, value)| {
            Ok(format!(
                "{}={value}",
                owner_names::numeric_property(&property)?
            ))
        })
        .collect()
}

pub fn create(socket: &Path, mut args: CreateArgs) -> Result<u8, Failure> {
    let name = &args.name;
    check_name(name)?;
    if name.contains('@') {
        return Err(Failure(format!(
            "cannot create {name:?}: that is a snapshot name; take snapshots with tarn snapshot"
        )));
    }
    if !name.contains('/') {
        return Err(Failure(format!(
            "cannot create {name:?}: a file system is named POOL/NAME; create pools with tarn pool create"
        )));
    }
    // `-o userquota@alice=1G` as `tarn set` takes it: the engine knows owners by number.
    args.properties = numeric_settings(parse_settings(&args.properties)?)?;
    let dataset_name = name.clone();
    let request = Request::Dataset(DatasetRequest::Create(args));
    Ok(forward(&ask(socket, Some(&dataset_name), &request)?))
}

pub fn destroy(socket: &Path, mut args: DestroyArgs) -> Result<u8, Failure> {
    let name = args.name.clone();
    check_name(&name)?;
    if name.contains('#') {
        check_bookmark_name(&name)?;
        if args.recursive || args.recursive_dependents {
            return Err(Failure(format!(
                "cannot destroy {name}: -r and -R apply to file systems and snapshots, not to a bookmark"
            )));
        }
        let request = Request::Snapshot(SnapshotRequest::DestroyBookmark(args));
        return Ok(forward(&ask(socket, Some(&name), &request)?));
    }
    if name.contains('@') {
        let request = Request::Snapshot(SnapshotRequest::DestroySnapshots(args));
        return Ok(forward(&ask(socket, Some(&name), &request)?));
    }
    // The daemon plans both the dry run and the real run (one list, so they cannot
    // disagree); -R implies -r.
    args.recursive |= args.recursive_dependents;
    let request = Request::Dataset(DatasetRequest::Destroy(args));
    Ok(forward(&ask(socket, Some(&name), &request)?))
}

fn list_rows(socket: &Path, args: ListArgs) -> Result<Vec<DatasetRow>, Failure> {
    let name = args.name.clone();
    let request = Request::Dataset(DatasetRequest::List(args));
    let Some(mut response) = client::ask_if_running(socket, &request)? else {
        return match name {
            Some(name) => Err(Failure(format!(
                "dataset {name:?} does not exist (no pools are imported)"
            ))),
            None => Ok(Vec::new()),
        };
    };
    if response.status != 0 {
        return Err(Failure(
            response
                .stderr
                .trim()
                .trim_start_matches("tarn: ")
                .to_string(),
        ));
    }
    serde_json::from_value(response.data["datasets"].take())
        .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))
}

pub fn list(socket: &Path, args: ListArgs) -> Result<u8, Failure> {
    args.types()?;
    let mut format = args.format.format();
    let keys = args.sort.keys.clone();
    for (field, _) in &keys {
        if !LIST_COLUMNS.contains(&field.as_str()) {
            return Err(Failure(format!(
                "invalid sort field '{field}'; valid fields are: {}",
                LIST_COLUMNS.join(", ")
            )));
        }
    }
    let mut rows = list_rows(socket, args)?;
    sort_list_rows(&mut rows, &keys);
    if format.fields.is_none() {
        format.fields = Some(LIST_DEFAULT_COLUMNS.map(str::to_string).to_vec());
    }
    if format.json {
        let selected = selected_fields(&LIST_COLUMNS, &format)?;
        let datasets = rows
            .iter()
            .map(|row| (row.name.clone(), row.json_object(&selected, format.exact)));
        let mut document = Document::new("tarn list");
        document.insert("datasets", json::keyed(datasets));
        document.print();
        return Ok(0);
    }
    let rows: Vec<Vec<Cell>> = rows.iter().map(DatasetRow::cells).collect();
    print_table(&LIST_COLUMNS, &rows, &format, "tarn list", "datasets")?;
    Ok(0)
}

/// `list -s FIELD -S FIELD ...`: order the rows by each key in turn (the first key first),
/// numbers by value and text in byte order, a `-` (no value) after every value; rows equal in
/// every key keep the daemon's order (as zfs, which otherwise lists by name, tree order).
fn sort_list_rows(rows: &mut [DatasetRow], keys: &[(String, bool)]) {
    if keys.is_empty() {
        return;
    }
    let indexes: Vec<(usize, bool)> = keys
        .iter()
        .map(|(field, descending)| {
            let index = LIST_COLUMNS
                .iter()
                .position(|column| column == field)
                .expect("checked");
            (index, *descending)
        })
        .collect();
    let mut keyed: Vec<(Vec<Cell>, DatasetRow)> =
        rows.iter().map(|row| (row.cells(), row.clone())).collect();
    keyed.sort_by(|(left, _), (right, _)| {
        indexes
            .iter()
            .map(|&(index, descending)| {
                let order = compare_cells(&left[index], &right[index]);
                if descending {
                    order.reverse()
                } else {
                    order
                }
            })
            .find(|order| order.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    for (slot, (_, row)) in rows.iter_mut().zip(keyed) {
        *slot = row;
    }
}

/// Two cells of one column: by number when both are numbers, else as text; `-` last.
fn compare_cells(left: &Cell, right: &Cell) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (left.exact.as_str(), right.exact.as_str()) {
        ("-", "-") => Ordering::Equal,
        ("-", _) => Ordering::Greater,
        (_, "-") => Ordering::Less,
        (left, right) => match (left.parse::<f64>(), right.parse::<f64>()) {
            (Ok(left), Ok(right)) => left.total_cmp(&right),
            _ => left.cmp(right),
        },
    }
}

/// `tarn get -j`: each dataset (with its identity, asked of the daemon as `type` and
/// `createtxg`) and its properties, keyed by name, in the order the rows came.
fn print_get_json(
    socket: &Path,
    names: &[String],
    rows: &[PropertyRow],
    exact: bool,
) -> Result<(), Failure> {
    // Every dataset the rows name (with -r or -d, more than were named).
    let mut shown: Vec<String> = Vec::new();
    for row in rows {
        if !shown.contains(&row.name) {
            shown.push(row.name.clone());
        }
    }
    if shown.is_empty() {
        shown = names.to_vec();
    }
    let identity_request = Request::Dataset(DatasetRequest::Get(GetArgs {
        format: Default::default(),
        recursive: false,
        depth: None,
        sources: None,
        types: None,
        properties: "type,createtxg".into(),
        names: shown,
    }));
    let response = ask(socket, names.first().map(String::as_str), &identity_request)?;
    let identities: Vec<PropertyRow> = if response.status == 0 {
        serde_json::from_value(response.data["properties"].clone())
            .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?
    } else {
        Vec::new()
    };
    let identity_of = |name: &str, property: &str| {
        identities
            .iter()
            .find(|row| row.name == name && row.property == property)
            .map(|row| row.exact.clone())
    };
    let mut datasets = serde_json::Map::new();
    for row in rows {
        let entry = datasets.entry(row.name.clone()).or_insert_with(|| {
            let kind = identity_of(&row.name, "type").unwrap_or_else(|| "filesystem".into());
            let createtxg = identity_of(&row.name, "createtxg")
                .and_then(|txg| txg.parse().ok())
                .unwrap_or(0);
            let mut object = dataset_identity(&row.name, &kind, createtxg, exact);
            object.insert(
                "properties".into(),
                serde_json::Value::Object(Default::default()),
            );
            serde_json::Value::Object(object)
        });
        entry["properties"]
            .as_object_mut()
            .expect("properties is an object")
            .insert(row.property.clone(), row.json_property(exact));
    }
    let mut document = Document::new("tarn get");
    document.insert("datasets", serde_json::Value::Object(datasets));
    document.print();
    Ok(())
}

pub fn get(socket: &Path, mut args: GetArgs) -> Result<u8, Failure> {
    // Owner properties are asked by ID; their rows are shown under the names asked.
    let mut owner_properties = Vec::new();
    let mut asked = Vec::new();
    for property in args.properties()? {
        let numeric = owner_names::numeric_property(&property)?;
        if OwnerProperty::is_owner_property_name(&property) {
            owner_properties.push(property);
        }
        asked.push(numeric);
    }
    args.properties = asked.join(",");
    for name in &args.names {
        check_name(name)?;
    }
    let format = args.format.format();
    selected_fields(&GET_COLUMNS, &format)?;
    args.types()?;
    let sources: Vec<String> = args.sources()?.to_vec();
    let names = args.names.clone();
    let first = args.names.first().cloned();
    let response = ask(
        socket,
        first.as_deref(),
        &Request::Dataset(DatasetRequest::Get(args)),
    )?;
    if response.status != 0 {
        return Ok(forward(&response));
    }
    let mut rows: Vec<PropertyRow> = serde_json::from_value(response.data["properties"].clone())
        .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?;
    if !sources.is_empty() {
        rows.retain(|row| {
            sources
                .iter()
                .any(|source| source == source_kind(&row.source))
        });
    }
    // Each dataset's rows hold its owner properties in the order asked (`all` lists none).
    if !owner_properties.is_empty() {
        let owner_rows = rows
            .iter_mut()
            .filter(|row| OwnerProperty::is_owner_property_name(&row.property));
        for (row, property) in owner_rows.zip(owner_properties.iter().cycle()) {
            row.property = property.clone();
        }
    }
    if format.json {
        print_get_json(socket, &names, &rows, format.exact)?;
        return Ok(0);
    }
    let cells: Vec<Vec<Cell>> = rows.iter().map(PropertyRow::cells).collect();
    print_table(&GET_COLUMNS, &cells, &format, "tarn get", "properties")?;
    Ok(0)
}

pub fn set(socket: &Path, mut args: SetArgs) -> Result<u8, Failure> {
    let name = args.name.clone();
    check_name(&name)?;
    if name.contains('@') {
        return Err(Failure(format!(
            "cannot set properties of snapshot {name}: snapshots are read-only"
        )));
    }
    args.settings = numeric_settings(args.settings()?)?;
    Ok(forward(&ask(
        socket,
        Some(&name),
        &Request::Dataset(DatasetRequest::Set(args)),
    )?))
}

/// The `get -s` word for a row's source (`inherited from tank` is `inherited`, `-` is
/// `none`).
fn source_kind(source: &str) -> &str {
    match source {
        "-" => "none",
        _ if source.starts_with("inherited") => "inherited",
        _ => source,
    }
}

/// `tarn inherit PROP DATASET`; an owner quota (`userquota@alice`) is removed, as it has
/// nothing to inherit.
pub fn inherit(socket: &Path, mut args: InheritArgs) -> Result<u8, Failure> {
    let name = args.name.clone();
    check_name(&name)?;
    if name.contains('@') {
        return Err(Failure(format!(
            "cannot change properties of snapshot {name}: snapshots are read-only"
        )));
    }
    args.property = owner_names::numeric_property(&args.property)?;
    Ok(forward(&ask(
        socket,
        Some(&name),
        &Request::Dataset(DatasetRequest::Inherit(args)),
    )?))
}

pub fn mount(socket: &Path, mut args: MountArgs) -> Result<u8, Failure> {
    if args.all && args.name.is_some() {
        return Err(Failure("mount -a takes no file system name".into()));
    }
    args.mountpoint = args.mountpoint.as_deref().map(absolute);
    let (all, json, name) = (args.all, args.json, args.name.clone());
    let request = Request::Dataset(DatasetRequest::Mount(args));
    if name.is_none() && !all {
        // List what is mounted (nothing when no daemon runs).
        let rows = match client::ask_if_running(socket, &request)? {
            Some(response) => response.data["mounts"].clone(),
            None => serde_json::json!([]),
        };
        let empty = Vec::new();
        let mounts = rows.as_array().unwrap_or(&empty).iter().map(|row| {
            let name = row["name"].as_str().unwrap_or_default();
            let mountpoint = row["mountpoint"].as_str().unwrap_or_default();
            // How the mount talks to the kernel: uring (FUSE over io_uring) or dev.
            let transport = row["transport"].as_str().unwrap_or("-");
            (name, mountpoint, transport)
        });
        if json {
            // zfs mount -j: `datasets` keyed by name, each its `filesystem` and `mountpoint`;
            // tarn adds the `transport`.
            let datasets = mounts.map(|(name, mountpoint, transport)| {
                let object = serde_json::json!({
                    "filesystem": name,
                    "mountpoint": mountpoint,
                    "transport": transport,
                });
                (name.to_string(), object)
            });
            let mut document = Document::new("tarn mount");
            document.insert("datasets", json::keyed(datasets));
            document.print();
            return Ok(0);
        }
        let cells: Vec<Vec<Cell>> = mounts
            .map(|(name, mountpoint, transport)| {
                vec![
                    Cell::text(name),
                    Cell::text(mountpoint),
                    Cell::text(transport),
                ]
            })
            .collect();
        let format = ListFormat {
            no_header: true,
            ..ListFormat::default()
        };
        print_table(
            &["name", "mountpoint", "transport"],
            &cells,
            &format,
            "tarn mount",
            "mounts",
        )?;
        return Ok(0);
    }
    if let Some(name) = &name {
        check_name(name)?;
    }
    Ok(forward(&ask(socket, name.as_deref(), &request)?))
}

pub fn unmount(socket: &Path, args: UnmountArgs) -> Result<u8, Failure> {
    let UnmountArgs { all, force, target } = args;
    let target = match (target, all) {
        (Some(_), true) => return Err(Failure("unmount -a takes no file system".into())),
        (None, false) => {
            return Err(Failure(
                "unmount what? name a file system or its mountpoint, or use -a".into(),
            ))
        }
        (Some(target), false) if target.starts_with('/') || target.starts_with('.') => {
            Some(absolute(Path::new(&target)).display().to_string())
        }
        (target, _) => target,
    };
    let dataset = target.clone().filter(|target| !target.starts_with('/'));
    Ok(forward(&ask(
        socket,
        dataset.as_deref(),
        &Request::Dataset(DatasetRequest::Unmount(UnmountArgs { all, force, target })),
    )?))
}

/// `tarn snapshot [-r] FS@SNAP...`: every name must be a snapshot name; all are taken in one
/// txg.
pub fn snapshot(socket: &Path, args: SnapshotArgs) -> Result<u8, Failure> {
    for name in &args.names {
        check_name(name)?;
        let valid = name
            .split_once('@')
            .is_some_and(|(fs, snap)| !fs.is_empty() && !snap.is_empty());
        if !valid {
            return Err(Failure(format!(
                "invalid snapshot name {name:?}: expected FILESYSTEM@SNAPSHOT"
            )));
        }
    }
    let first = args.names.first().cloned();
    Ok(forward(&ask(
        socket,
        first.as_deref(),
        &Request::Snapshot(SnapshotRequest::Snapshot(args)),
    )?))
}

/// `tarn rollback [-r] FS@SNAP`.
pub fn rollback(socket: &Path, args: RollbackArgs) -> Result<u8, Failure> {
    let name = args.name.clone();
    check_name(&name)?;
    if !name.contains('@') {
        return Err(Failure(format!(
            "cannot roll back to {name:?}: name a snapshot, FILESYSTEM@SNAPSHOT"
        )));
    }
    Ok(forward(&ask(
        socket,
        Some(&name),
        &Request::Snapshot(SnapshotRequest::Rollback(args)),
    )?))
}

/// `tarn rename FS@SNAP NEWNAME`.
pub fn rename(socket: &Path, args: RenameArgs) -> Result<u8, Failure> {
    check_name(&args.name)?;
    check_name(&args.new_name)?;
    let name = args.name.clone();
    Ok(forward(&ask(
        socket,
        Some(&name),
        &Request::Snapshot(SnapshotRequest::Rename(args)),
    )?))
}

/// `tarn debug dataset DATASET`.
pub fn debug_dataset(socket: &Path, args: NameArgs) -> Result<u8, Failure> {
    check_name(&args.name)?;
    let name = args.name.clone();
    Ok(forward(&ask(
        socket,
        Some(&name),
        &Request::Snapshot(SnapshotRequest::DebugDataset(args)),
    )?))
}

/// `tarn debug object DATASET PATH|OBJECT`.
pub fn debug_object(socket: &Path, args: ObjectArgs) -> Result<u8, Failure> {
    check_name(&args.dataset)?;
    Ok(forward(&ask(
        socket,
        Some(&args.dataset.clone()),
        &Request::Inspect(InspectRequest::Object(args)),
    )?))
}

/// A bookmark's name, `FS#NAME`.
fn check_bookmark_name(bookmark: &str) -> Result<(), Failure> {
    check_name(bookmark)?;
    if !bookmark.contains('#') || bookmark.contains('@') {
        return Err(Failure(format!(
            "invalid bookmark name {bookmark:?}: expected FILESYSTEM#NAME"
        )));
    }
    Ok(())
}

/// `tarn bookmark FS@SNAP FS#NAME`.
pub fn bookmark(socket: &Path, args: BookmarkArgs) -> Result<u8, Failure> {
    check_bookmark_name(&args.bookmark)?;
    let snapshot = &args.snapshot;
    check_name(snapshot)?;
    if !snapshot.contains('@') {
        return Err(Failure(format!(
            "cannot bookmark {snapshot:?}: name a snapshot, FS@SNAP"
        )));
    }
    let bookmark = args.bookmark.clone();
    Ok(forward(&ask(
        socket,
        Some(&bookmark),
        &Request::Snapshot(SnapshotRequest::Bookmark(args)),
    )?))
}

/// `tarn promote CLONE`.
pub fn promote(socket: &Path, args: NameArgs) -> Result<u8, Failure> {
    let name = args.name.clone();
    check_name(&name)?;
    if name.contains('@') {
        return Err(Failure(format!(
            "cannot promote {name:?}: a snapshot cannot be promoted; name a clone, POOL/NAME"
        )));
    }
    Ok(forward(&ask(
        socket,
        Some(&name),
        &Request::Snapshot(SnapshotRequest::Promote(args)),
    )?))
}

/// `tarn clone [-o prop=val]... FS@SNAP FS`.
pub fn clone(socket: &Path, args: CloneArgs) -> Result<u8, Failure> {
    let (snapshot, name) = (&args.snapshot, &args.name);
    check_name(snapshot)?;
    check_name(name)?;
    if !snapshot.contains('@') {
        return Err(Failure(format!(
            "cannot clone {snapshot:?}: name a snapshot, FILESYSTEM@SNAPSHOT"
        )));
    }
    if name.contains('@') {
        return Err(Failure(format!(
            "cannot clone to {name:?}: a clone is a file system, POOL/NAME"
        )));
    }
    args.settings()?;
    let snapshot = snapshot.clone();
    Ok(forward(&ask(
        socket,
        Some(&snapshot),
        &Request::Snapshot(SnapshotRequest::Clone(args)),
    )?))
}
