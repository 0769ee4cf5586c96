//! The CLI side of every verb, one module per family: build the request, ask the daemon when
//! it holds the pool, otherwise run on the exported pool in this process (`ops`), and print.

pub mod arcstat;
pub mod dataset;
pub mod devices;
pub mod inject;
pub mod inspect;
pub mod iostat;
pub mod pool;
pub mod pool_cache;
pub mod pool_records;
pub mod replication;
pub mod scrub;
pub mod stat;

use std::path::Path;

use crate::client;
use crate::error::{Failure, Status};
use crate::output;
use crate::protocol::{Request, Response};

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

/// The `PROP[,PROP...]|all` argument of `get` verbs, split and trimmed; an empty list is an
/// error saying what to give.
pub fn property_list(argument: &str) -> Result<Vec<String>, Failure> {
    let properties: Vec<String> = argument
        .split(',')
        .map(str::trim)
        .filter(|property| !property.is_empty())
        .map(str::to_string)
        .collect();
    if properties.is_empty() {
        return Err(Failure(
            "no property named: give PROP[,PROP...] or all".into(),
        ));
    }
    Ok(properties)
}
