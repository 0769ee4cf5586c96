//! `tarn create|destroy|list|get|set|inherit|mount|unmount` (zfs): the CLI side of the dataset
//! verbs. Build the request, ask the daemon (which must be running: datasets live in imported
//! pools), print the answer. The daemon side is `tarn_daemon`'s `datasets`.

use std::path::{Path, PathBuf};

use tarn_protocol::absolute;
use tarn_protocol::client;
use tarn_protocol::error::Failure;
use tarn_protocol::format::{print_table, Cell, ListFormat};
use tarn_protocol::request::inspect::{InspectRequest, ObjectArgs};
use tarn_protocol::rows::{
    DatasetRow, PropertyRow, GET_COLUMNS, LIST_COLUMNS, LIST_DEFAULT_COLUMNS,
};
use tarn_protocol::{Request, Response};

use super::property_list;
use tarn_ops::pool_of;

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

/// Split `prop=value` settings.
pub fn parse_settings(settings: &[String]) -> Result<Vec<(String, String)>, Failure> {
    settings
        .iter()
        .map(|setting| {
            setting
                .split_once('=')
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .filter(|(name, _)| !name.is_empty())
                .ok_or_else(|| {
                    Failure(format!(
                        "invalid property setting {setting:?}: expected prop=value"
                    ))
                })
        })
        .collect()
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

pub fn create(
    socket: &Path,
    parents: bool,
    settings: &[String],
    name: String,
) -> Result<u8, Failure> {
    check_name(&name)?;
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
    let properties = parse_settings(settings)?;
    let dataset_name = name.clone();
    let request = Request::Create {
        name,
        properties,
        parents,
    };
    Ok(forward(&ask(socket, Some(&dataset_name), &request)?))
}

pub fn destroy(
    socket: &Path,
    recursive: bool,
    dependents: bool,
    dry_run: bool,
    verbose: bool,
    name: String,
) -> Result<u8, Failure> {
    check_name(&name)?;
    if name.contains('#') {
        return bookmark(socket, None, name);
    }
    if name.contains('@') {
        return Ok(forward(&ask(
            socket,
            Some(&name.clone()),
            &Request::DestroySnapshots {
                spec: name,
                recursive,
                dry_run,
                dependents,
            },
        )?));
    }
    // The daemon plans both the dry run and the real run (one list, so they cannot
    // disagree); -R implies -r.
    Ok(forward(&ask(
        socket,
        Some(&name.clone()),
        &Request::Destroy {
            name,
            recursive: recursive || dependents,
            dependents,
            dry_run,
            verbose,
        },
    )?))
}

fn list_rows(
    socket: &Path,
    name: Option<String>,
    recursive: bool,
    types: &[String],
) -> Result<Vec<DatasetRow>, Failure> {
    let request = Request::List {
        name,
        recursive,
        types: types.to_vec(),
    };
    let Some(response) = client::ask_if_running(socket, &request)? else {
        return match request {
            Request::List {
                name: Some(name), ..
            } => Err(Failure(format!(
                "dataset {name:?} does not exist (no pools are imported)"
            ))),
            _ => Ok(Vec::new()),
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
    serde_json::from_value(response.data["datasets"].clone())
        .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))
}

pub fn list(
    socket: &Path,
    recursive: bool,
    types: Option<Vec<String>>,
    mut format: ListFormat,
    name: Option<String>,
) -> Result<u8, Failure> {
    for kind in types.iter().flatten() {
        if !["filesystem", "snapshot", "bookmark", "all"].contains(&kind.as_str()) {
            return Err(Failure(format!(
                "invalid type {kind:?}: expected filesystem, snapshot, bookmark or all"
            )));
        }
    }
    let rows = list_rows(
        socket,
        name,
        recursive,
        types.as_deref().unwrap_or_default(),
    )?;
    let rows: Vec<Vec<Cell>> = rows.iter().map(DatasetRow::cells).collect();
    if format.fields.is_none() {
        format.fields = Some(LIST_DEFAULT_COLUMNS.map(str::to_string).to_vec());
    }
    print_table(&LIST_COLUMNS, &rows, &format, "datasets")?;
    Ok(0)
}

pub fn get(
    socket: &Path,
    format: ListFormat,
    properties: String,
    names: Vec<String>,
) -> Result<u8, Failure> {
    let properties = property_list(&properties)?;
    for name in &names {
        check_name(name)?;
    }
    let first = names.first().cloned();
    let response = ask(
        socket,
        first.as_deref(),
        &Request::Get { names, properties },
    )?;
    if response.status != 0 {
        return Ok(forward(&response));
    }
    let rows: Vec<PropertyRow> = serde_json::from_value(response.data["properties"].clone())
        .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?;
    let cells: Vec<Vec<Cell>> = rows
        .iter()
        .map(|row| {
            if format.exact {
                row.cells()
            } else {
                row.human_json_cells()
            }
        })
        .collect();
    print_table(&GET_COLUMNS, &cells, &format, "properties")?;
    Ok(0)
}

pub fn set(socket: &Path, setting: String, name: String) -> Result<u8, Failure> {
    check_name(&name)?;
    if name.contains('@') {
        return Err(Failure(format!(
            "cannot set properties of snapshot {name}: snapshots are read-only"
        )));
    }
    let (property, value) = parse_settings(std::slice::from_ref(&setting))?
        .pop()
        .expect("one setting");
    Ok(forward(&ask(
        socket,
        Some(&name.clone()),
        &Request::Set {
            name,
            property,
            value: Some(value),
        },
    )?))
}

pub fn inherit(socket: &Path, property: String, name: String) -> Result<u8, Failure> {
    check_name(&name)?;
    if name.contains('@') {
        return Err(Failure(format!(
            "cannot change properties of snapshot {name}: snapshots are read-only"
        )));
    }
    Ok(forward(&ask(
        socket,
        Some(&name.clone()),
        &Request::Set {
            name,
            property,
            value: None,
        },
    )?))
}

pub fn mount(
    socket: &Path,
    all: bool,
    json: bool,
    name: Option<String>,
    mountpoint: Option<PathBuf>,
) -> Result<u8, Failure> {
    if all && name.is_some() {
        return Err(Failure("mount -a takes no file system name".into()));
    }
    let request = Request::Mount {
        name: name.clone(),
        mountpoint: mountpoint.as_deref().map(absolute),
        all,
    };
    if name.is_none() && !all {
        // List what is mounted (nothing when no daemon runs).
        let rows = match client::ask_if_running(socket, &request)? {
            Some(response) => response.data["mounts"].clone(),
            None => serde_json::json!([]),
        };
        let empty = Vec::new();
        let cells: Vec<Vec<Cell>> = rows
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .map(|row| {
                vec![
                    Cell::text(row["name"].as_str().unwrap_or_default()),
                    Cell::text(row["mountpoint"].as_str().unwrap_or_default()),
                ]
            })
            .collect();
        let format = ListFormat {
            no_header: !json,
            json,
            ..ListFormat::default()
        };
        print_table(&["name", "mountpoint"], &cells, &format, "mounts")?;
        return Ok(0);
    }
    if let Some(name) = &name {
        check_name(name)?;
    }
    Ok(forward(&ask(socket, name.as_deref(), &request)?))
}

pub fn unmount(
    socket: &Path,
    all: bool,
    force: bool,
    target: Option<String>,
) -> Result<u8, Failure> {
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
        &Request::Unmount { target, all, force },
    )?))
}

/// `tarn snapshot [-r] FS@SNAP...`: every name must be a snapshot name; all are taken in one
/// txg.
pub fn snapshot(socket: &Path, recursive: bool, names: Vec<String>) -> Result<u8, Failure> {
    for name in &names {
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
    let first = names.first().cloned();
    Ok(forward(&ask(
        socket,
        first.as_deref(),
        &Request::Snapshot { names, recursive },
    )?))
}

/// `tarn rollback [-r] FS@SNAP`.
pub fn rollback(socket: &Path, destroy_later: bool, name: String) -> Result<u8, Failure> {
    check_name(&name)?;
    if !name.contains('@') {
        return Err(Failure(format!(
            "cannot roll back to {name:?}: name a snapshot, FILESYSTEM@SNAPSHOT"
        )));
    }
    Ok(forward(&ask(
        socket,
        Some(&name.clone()),
        &Request::Rollback {
            name,
            destroy_later,
        },
    )?))
}

/// `tarn rename FS@SNAP NEWNAME`.
pub fn rename(socket: &Path, name: String, new_name: String) -> Result<u8, Failure> {
    check_name(&name)?;
    check_name(&new_name)?;
    Ok(forward(&ask(
        socket,
        Some(&name.clone()),
        &Request::Rename { name, new_name },
    )?))
}

/// `tarn debug dataset DATASET`.
pub fn debug_dataset(socket: &Path, name: String) -> Result<u8, Failure> {
    check_name(&name)?;
    Ok(forward(&ask(
        socket,
        Some(&name.clone()),
        &Request::DebugDataset { name },
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

/// `tarn bookmark FS@SNAP FS#NAME`, or (`snapshot` None) `tarn destroy FS#NAME`.
pub fn bookmark(socket: &Path, snapshot: Option<String>, bookmark: String) -> Result<u8, Failure> {
    check_name(&bookmark)?;
    if !bookmark.contains('#') || bookmark.contains('@') {
        return Err(Failure(format!(
            "invalid bookmark name {bookmark:?}: expected FILESYSTEM#NAME"
        )));
    }
    if let Some(snapshot) = &snapshot {
        check_name(snapshot)?;
        if !snapshot.contains('@') {
            return Err(Failure(format!(
                "cannot bookmark {snapshot:?}: name a snapshot, FS@SNAP"
            )));
        }
    }
    Ok(forward(&ask(
        socket,
        Some(&bookmark.clone()),
        &Request::Bookmark { snapshot, bookmark },
    )?))
}

/// `tarn promote CLONE`.
pub fn promote(socket: &Path, name: String) -> Result<u8, Failure> {
    check_name(&name)?;
    if name.contains('@') {
        return Err(Failure(format!(
            "cannot promote {name:?}: a snapshot cannot be promoted; name a clone, POOL/NAME"
        )));
    }
    Ok(forward(&ask(
        socket,
        Some(&name.clone()),
        &Request::Promote { name },
    )?))
}

/// `tarn clone [-o prop=val]... FS@SNAP FS`.
pub fn clone(
    socket: &Path,
    settings: &[String],
    snapshot: String,
    name: String,
) -> Result<u8, Failure> {
    check_name(&snapshot)?;
    check_name(&name)?;
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
    let properties = parse_settings(settings)?;
    Ok(forward(&ask(
        socket,
        Some(&snapshot.clone()),
        &Request::Clone {
            snapshot,
            name,
            properties,
        },
    )?))
}
