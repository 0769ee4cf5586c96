//! The CLI side of every verb, one module per family: build the request, ask the daemon when
//! it holds the pool, otherwise run on the exported pool in this process (`tarn-ops`), and print.

pub mod allow;
pub mod arcstat;
pub mod dataset;
pub mod devices;
pub mod diff;
pub mod holds;
pub mod inject;
pub mod inspect;
pub mod iostat;
pub mod owner_names;
pub mod owners;
pub mod pool;
pub mod pool_cache;
pub mod pool_records;
pub mod replication;
pub mod report;
pub mod scrub;
pub mod stat;

use std::path::Path;

use tarn_protocol::client;
use tarn_protocol::error::{Failure, Status};
use tarn_protocol::output;
use tarn_protocol::{Request, Response};

/// Print a daemon's answer as if the verb had run here; its exit status.
pub fn forward(response: Response) -> Status {
    output::print_raw(&response.stdout, &response.stderr);
    response.status
}

/// Ask the daemon if it runs and holds the pool the request names; `None` means run in-process.
pub fn ask_holder(socket: &Path, request: &Request) -> Result<Option<Status>, Failure> {
    match client::ask_if_running(socket, request)? {
        Some(response) if !response.not_imported => Ok(Some(forward(response))),
        _ => Ok(None),
    }
}

/// Ask the daemon about a pool it must hold (pool properties live in imported pools only, as
/// with zpool get/set/wait).
pub fn ask_imported(socket: &Path, pool: &str, request: &Request) -> Result<Response, Failure> {
    match client::ask_if_running(socket, request)? {
        None => Err(Failure(format!(
            "cannot open '{pool}': no such pool (no pools are imported: no tarn daemon on {}); import it with tarn pool import {pool}",
            socket.display()
        ))),
        Some(response) if response.not_imported => Err(Failure(format!(
            "cannot open '{pool}': no such pool (not imported); import it with tarn pool import {pool}"
        ))),
        Some(response) => Ok(response),
    }
}
