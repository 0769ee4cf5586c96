//! `tarn hold|release|holds` (zfs hold, release, holds): user holds on snapshots. The engine
//! keeps them (`tarn::pool::user_holds`); here the names are checked before asking, and
//! `holds` prints the daemon's rows as zfs does (NAME TAG TIMESTAMP; `-p` seconds).

use std::path::Path;

use tarn_protocol::error::{Failure, Status};
use tarn_protocol::format::{print_table, selected_fields};
use tarn_protocol::request::snapshot::{HoldArgs, HoldsArgs, SnapshotRequest};
use tarn_protocol::rows::{HoldRow, HOLDS_COLUMNS};
use tarn_protocol::Request;

use super::dataset::{ask, check_name};
use super::forward;

/// Each name is a snapshot's, `FS@SNAP`.
fn check_snapshot_names(verb: &str, names: &[String]) -> Result<(), Failure> {
    for name in names {
        check_name(name)?;
        if !name.contains('@') || name.contains('#') {
            return Err(Failure(format!(
                "cannot {verb} {name:?}: holds are on snapshots; name one, FS@SNAP"
            )));
        }
    }
    Ok(())
}

/// `tarn hold [-r] TAG FS@SNAP...`.
pub fn hold(socket: &Path, args: HoldArgs) -> Result<Status, Failure> {
    check_snapshot_names("hold", &args.snapshots)?;
    let first = args.snapshots[0].clone();
    Ok(forward(ask(
        socket,
        Some(&first),
        &Request::Snapshot(SnapshotRequest::Hold(args)),
    )?))
}

/// `tarn release [-r] TAG FS@SNAP...`.
pub fn release(socket: &Path, args: HoldArgs) -> Result<Status, Failure> {
    check_snapshot_names("release a hold on", &args.snapshots)?;
    let first = args.snapshots[0].clone();
    Ok(forward(ask(
        socket,
        Some(&first),
        &Request::Snapshot(SnapshotRequest::Release(args)),
    )?))
}

/// `tarn holds [-r] [-H] [-p] [-j] [-o FIELD,...] FS@SNAP...`.
pub fn holds(socket: &Path, args: HoldsArgs) -> Result<Status, Failure> {
    check_snapshot_names("list the holds of", &args.snapshots)?;
    let format = args.format.format();
    selected_fields(&HOLDS_COLUMNS, &format)?;
    let first = args.snapshots[0].clone();
    let mut response = ask(
        socket,
        Some(&first),
        &Request::Snapshot(SnapshotRequest::Holds(args)),
    )?;
    if response.status != 0 {
        return Ok(forward(response));
    }
    let rows: Vec<HoldRow> = serde_json::from_value(response.data["holds"].take())
        .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?;
    let cells: Vec<_> = rows.iter().map(HoldRow::cells).collect();
    print_table(&HOLDS_COLUMNS, &cells, &format, "tarn holds", "holds")?;
    Ok(0)
}
