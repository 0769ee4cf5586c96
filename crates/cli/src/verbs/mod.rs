//! The CLI side of every verb, one module per family: build the request, ask the daemon when
//! it holds the pool, otherwise run on the exported pool in this process (`ops`), and print.

pub mod dataset;
pub mod inspect;
pub mod pool;
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
