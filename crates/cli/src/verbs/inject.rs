//! `tarn inject` (zinject): faults injected into an imported pool's devices, served by the
//! daemon that holds the pool (`tarn_daemon`'s `inject`); root only.

use std::path::Path;

use tarn_protocol::client;
use tarn_protocol::error::{Failure, Status};
use tarn_protocol::{InjectSpec, Request};

use super::forward;

/// What `tarn inject` was asked: start (fields given with a pool), clear (`-c`), or list.
pub struct InjectArgs {
    pub clear: Option<String>,
    pub device: Option<String>,
    pub error: Option<String>,
    pub io: Option<String>,
    pub percent: Option<u32>,
    pub count: Option<u64>,
    pub object: Option<String>,
    pub level: Option<u8>,
    pub delay_ms: Option<u64>,
    pub pool: Option<String>,
}

impl InjectArgs {
    /// Whether any of the options that describe an injection was given.
    fn describes_injection(&self) -> bool {
        self.device.is_some()
            || self.error.is_some()
            || self.io.is_some()
            || self.percent.is_some()
            || self.count.is_some()
            || self.object.is_some()
            || self.level.is_some()
            || self.delay_ms.is_some()
    }
}

pub fn inject(socket: &Path, args: InjectArgs) -> Result<Status, Failure> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Failure(
            "tarn inject damages I/O on purpose: only root may use it".into(),
        ));
    }
    if args.delay_ms.is_some() && args.error.as_deref() != Some("delay") {
        return Err(Failure("-D MS goes with -e delay".into()));
    }
    let start = match (&args.clear, &args.pool) {
        (None, Some(_)) => Some(InjectSpec {
            device: args.device.clone(),
            error: args.error.clone().unwrap_or_else(|| "io".into()),
            io: args.io.clone().unwrap_or_else(|| "all".into()),
            percent: args.percent.unwrap_or(100),
            count: args.count,
            delay_ms: args.delay_ms.unwrap_or(100),
            object: args.object.clone(),
            level: args.level,
        }),
        (None, None) if args.describes_injection() => {
            return Err(Failure(
                "name the pool to inject into: tarn inject [options] POOL".into(),
            ))
        }
        _ => None,
    };
    let request = Request::Inject {
        pool: args.pool,
        start,
        clear: args.clear,
    };
    match client::ask_if_running(socket, &request)? {
        Some(response) if !response.not_imported => Ok(forward(response)),
        _ => match &request {
            Request::Inject {
                pool: Some(pool), ..
            } => Err(Failure(format!(
                "pool {pool:?} is not imported; injections act on an imported pool"
            ))),
            _ => {
                println!("no injections");
                Ok(0)
            }
        },
    }
}
