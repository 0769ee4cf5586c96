//! `tarn inject` (zinject): faults injected into an imported pool's devices, served by the
//! daemon that holds the pool (`tarn_daemon`'s `inject`); root only.

use std::path::Path;

use tarn_protocol::client;
use tarn_protocol::error::{Failure, Status};
use tarn_protocol::request::inject::InjectArgs;
use tarn_protocol::Request;

use super::forward;

pub fn inject(socket: &Path, args: InjectArgs) -> Result<Status, Failure> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Failure(
            "tarn inject damages I/O on purpose: only root may use it".into(),
        ));
    }
    // Options that do not go together are refused before the daemon is asked.
    args.action()?;
    let pool = args.pool.clone();
    match client::ask_if_running(socket, &Request::Inject(args))? {
        Some(response) if !response.not_imported => Ok(forward(response)),
        _ => match pool {
            Some(pool) => Err(Failure(format!(
                "pool {pool:?} is not imported; injections act on an imported pool"
            ))),
            None => {
                println!("no injections");
                Ok(0)
            }
        },
    }
}
