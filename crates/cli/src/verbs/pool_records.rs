//! `tarn pool history` and `tarn pool clear`: the verbs over what a pool records about itself
//! (its history ring and error log; `tarn_ops::records` formats them).

use std::path::Path;

use tarn_protocol::client;
use tarn_protocol::error::{Failure, Status};
use tarn_protocol::request::pool::{ClearArgs, HistoryArgs, PoolRequest};
use tarn_protocol::Request;

use super::{ask_holder, forward};
use tarn_ops::cachefile::search_dirs;
use tarn_ops::open_named;
use tarn_ops::records::{self, HistoryRow};

/// `pool history [-l] POOL`: from the daemon if it holds the pool, else read from the
/// exported pool in this process (read-only).
pub fn history(socket: &Path, args: HistoryArgs) -> Result<Status, Failure> {
    let (dirs, long, pool) = (
        search_dirs(socket, &args.dirs),
        args.long,
        args.pool.clone(),
    );
    let request = Request::Pool(PoolRequest::History(args));
    let rows: Vec<HistoryRow> = match client::ask_if_running(socket, &request)? {
        Some(response) if !response.not_imported => {
            if response.status != 0 {
                return Ok(forward(response));
            }
            serde_json::from_value(response.data["history"].clone())
                .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?
        }
        _ => {
            let opened = open_named(&dirs, &pool, true)?;
            let rows = records::history_rows(&opened);
            opened.export()?;
            rows?
        }
    };
    out!("{}", records::history_text(&pool, &rows, long).trim_end());
    Ok(0)
}

/// `pool clear POOL [DEV]`: only for an imported pool (error counts live in memory).
pub fn clear(socket: &Path, args: ClearArgs) -> Result<Status, Failure> {
    let pool = args.pool.clone();
    let request = Request::Pool(PoolRequest::Clear(args));
    match ask_holder(socket, &request)? {
        Some(status) => Ok(status),
        None => Err(Failure(format!(
            "cannot clear '{pool}': no such pool imported; import it with tarn pool import {pool}"
        ))),
    }
}
