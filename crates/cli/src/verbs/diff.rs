//! `tarn diff [-F] [-H] [-t] [-h] FS@SNAP [FS@SNAP|FS]` (zfs diff): the daemon finds the
//! changes (`tarn::send::diff`); here the names are checked before asking and the daemon's
//! rows are printed as libzfs_diff prints them: `[ctime\t]CHANGE\t[TYPE\t]PATH`, a rename as
//! `R\tOLD -> NEW` (`-H`: `R\tOLD\tNEW`), a link count change of a file as `M\tPATH\t(+1)`.
//! Paths are the mountpoint and the path in the file system, every byte that is not a printable
//! ASCII character other than the backslash (space included) written as `\0ooo` (zfs's
//! `stream_bytes`), unless `-h`.

use std::io::Write;
use std::path::Path;

use tarn_protocol::error::{Failure, Status};
use tarn_protocol::request::snapshot::{DiffArgs, SnapshotRequest};
use tarn_protocol::rows::DiffRow;
use tarn_protocol::Request;

use super::dataset::{ask, check_name};
use super::forward;

/// `tarn diff`.
pub fn diff(socket: &Path, args: DiffArgs) -> Result<Status, Failure> {
    let from = &args.snapshot;
    if from.contains('#') {
        return Err(Failure(format!(
            "cannot diff from {from:?}: a bookmark keeps no blocks to compare; name a snapshot, FS@SNAP"
        )));
    }
    if !from.contains('@') {
        return Err(Failure(format!(
            "cannot diff {from:?}: the first argument must be a snapshot, FS@SNAP"
        )));
    }
    if !from.starts_with('@') {
        check_name(from)?;
    }
    if let Some(to) = &args.to {
        if to.contains('#') {
            return Err(Failure(format!(
                "cannot diff to {to:?}: a bookmark keeps no blocks to compare; name a snapshot or a file system"
            )));
        }
        if !to.starts_with('@') {
            check_name(to)?;
        }
    }
    if from.starts_with('@') && args.to.as_deref().is_none_or(|to| to.starts_with('@')) {
        return Err(Failure(format!(
            "cannot diff {from:?}: name the file system, FS@SNAP"
        )));
    }
    let named = if from.starts_with('@') {
        args.to.clone().unwrap_or_default()
    } else {
        from.clone()
    };
    let mut response = ask(
        socket,
        Some(&named),
        &Request::Snapshot(SnapshotRequest::Diff(args.clone())),
    )?;
    if response.status != 0 {
        return Ok(forward(response));
    }
    let mountpoint = response.data["mountpoint"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let rows: Vec<DiffRow> = serde_json::from_value(response.data["changes"].take())
        .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for row in &rows {
        out.write_all(&line(&args, mountpoint.as_bytes(), row))
            .map_err(|error| Failure(format!("cannot write the diff: {error}")))?;
    }
    out.flush()
        .map_err(|error| Failure(format!("cannot write the diff: {error}")))?;
    Ok(0)
}

/// One line as zfs prints it (see the module documentation), with its newline.
pub fn line(args: &DiffArgs, mountpoint: &[u8], row: &DiffRow) -> Vec<u8> {
    let mut line = Vec::new();
    if args.timestamps {
        line.extend_from_slice(
            format!("{:>10}.{:09}\t", row.ctime_seconds, row.ctime_nanoseconds).as_bytes(),
        );
    }
    let text = |line: &mut Vec<u8>, text: &str| line.extend_from_slice(text.as_bytes());
    text(&mut line, &format!("{}\t", row.change));
    if args.classify {
        text(&mut line, &format!("{}\t", row.file_type));
    }
    let path = |line: &mut Vec<u8>, relative: &[u8]| {
        for part in [mountpoint, relative] {
            if args.no_escape {
                line.extend_from_slice(part);
            } else {
                escape_into(line, part);
            }
        }
    };
    path(&mut line, &row.path.0);
    if let Some(new_path) = &row.new_path {
        text(&mut line, if args.scripted { "\t" } else { " -> " });
        path(&mut line, &new_path.0);
    }
    if row.link_change != 0 {
        text(&mut line, &format!("\t({:+})", row.link_change));
    }
    line.push(b'\n');
    line
}

/// zfs's `stream_bytes`: printable ASCII but the backslash as is, every other byte (space,
/// control characters, DEL, non-ASCII bytes) as a backslash and four octal digits.
pub fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    for &byte in bytes {
        if byte > b' ' && byte != b'\\' && byte < 0o177 {
            out.push(byte);
        } else {
            out.extend_from_slice(format!("\\{byte:04o}").as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_protocol::rows::PathBytes;

    fn row(change: char, path: &[u8], new_path: Option<&[u8]>) -> DiffRow {
        DiffRow {
            change,
            path: PathBytes(path.to_vec()),
            new_path: new_path.map(|path| PathBytes(path.to_vec())),
            file_type: 'F',
            ctime_seconds: 1_700_000_000,
            ctime_nanoseconds: 5,
            link_change: 0,
        }
    }

    #[test]
    fn lines_are_printed_as_zfs_prints_them() {
        let plain = DiffArgs::default();
        let mountpoint = b"/tank/a";
        assert_eq!(
            line(&plain, mountpoint, &row('M', b"/", None)),
            b"M\t/tank/a/\n"
        );
        assert_eq!(
            line(&plain, mountpoint, &row('R', b"/x", Some(b"/d/y"))),
            b"R\t/tank/a/x -> /tank/a/d/y\n"
        );
        let scripted = DiffArgs {
            scripted: true,
            classify: true,
            timestamps: true,
            ..DiffArgs::default()
        };
        assert_eq!(
            line(&scripted, mountpoint, &row('R', b"/x", Some(b"/d/y"))),
            b"1700000000.000000005\tR\tF\t/tank/a/x\t/tank/a/d/y\n"
        );
        let mut linked = row('M', b"/f", None);
        linked.link_change = 1;
        assert_eq!(line(&plain, mountpoint, &linked), b"M\t/tank/a/f\t(+1)\n");
        let mut early = row('+', b"/f", None);
        early.ctime_seconds = 12;
        let timed = DiffArgs {
            timestamps: true,
            ..DiffArgs::default()
        };
        assert_eq!(
            line(&timed, mountpoint, &early),
            b"        12.000000005\t+\t/tank/a/f\n"
        );
    }

    #[test]
    fn paths_are_escaped_unless_h() {
        let name = "/a b\\é\t~".as_bytes();
        let plain = DiffArgs::default();
        assert_eq!(
            line(&plain, b"/m n", &row('+', name, None)),
            b"+\t/m\\0040n/a\\0040b\\0134\\0303\\0251\\0011~\n".to_vec()
        );
        let raw = DiffArgs {
            no_escape: true,
            ..DiffArgs::default()
        };
        let mut expected = b"+\t/m n".to_vec();
        expected.extend_from_slice(name);
        expected.push(b'\n');
        assert_eq!(line(&raw, b"/m n", &row('+', name, None)), expected);
    }
}
