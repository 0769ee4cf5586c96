//! `tarn check` and `tarn debug ...` (zdb): whole-pool verification and inspection, in the
//! daemon when it holds the pool, else in this process on the exported pool.

use std::path::Path;

use tarn_protocol::error::{Failure, Status};
use tarn_protocol::request::inspect::{
    CheckArgs, InspectRequest, LogsArgs, MapArgs, MetaslabsArgs, SpacemapArgs,
};
use tarn_protocol::Request;

use super::ask_holder;
use tarn_ops::cachefile::search_dirs;
use tarn_ops::open_named;

/// Ask the daemon if it holds the pool; `None` means run in-process.
fn ask(socket: &Path, request: InspectRequest) -> Result<Option<Status>, Failure> {
    ask_holder(socket, &Request::Inspect(request))
}

pub fn check(socket: &Path, args: CheckArgs) -> Result<Status, Failure> {
    if let Some(status) = ask(socket, InspectRequest::Check(args.clone()))? {
        return Ok(status);
    }
    let CheckArgs {
        dirs,
        no_repair,
        pool: name,
    } = args;
    let pool = open_named(&search_dirs(socket, &dirs), &name, no_repair)?;
    let clean = tarn_ops::check(&pool, &name, !no_repair)?;
    pool.export()?;
    Ok(if clean { 0 } else { 1 })
}

pub fn debug_metaslabs(socket: &Path, args: MetaslabsArgs) -> Result<Status, Failure> {
    if let Some(status) = ask(socket, InspectRequest::Metaslabs(args.clone()))? {
        return Ok(status);
    }
    let pool = open_named(&search_dirs(socket, &args.dirs), &args.pool, true)?;
    tarn_ops::debug_metaslabs(&pool, &args.pool, args.json, args.level)?;
    pool.export()?;
    Ok(0)
}

pub fn debug_logs(socket: &Path, args: LogsArgs) -> Result<Status, Failure> {
    if let Some(status) = ask(socket, InspectRequest::Logs(args.clone()))? {
        return Ok(status);
    }
    let pool = open_named(&search_dirs(socket, &args.dirs), &args.pool, true)?;
    tarn_ops::debug_logs(&pool, &args.pool, args.json)?;
    pool.export()?;
    Ok(0)
}

pub fn debug_map(socket: &Path, mut args: MapArgs) -> Result<Status, Failure> {
    let output = tarn_protocol::absolute(&args.output());
    args.output = Some(output.clone());
    if let Some(status) = ask(socket, InspectRequest::Map(args.clone()))? {
        return Ok(status);
    }
    let pool = open_named(&search_dirs(socket, &args.dirs), &args.pool, true)?;
    let result = tarn_ops::debug_map(&pool, &args.pool, &output);
    pool.export()?;
    result.map(|()| 0)
}

pub fn debug_spacemap(socket: &Path, args: SpacemapArgs) -> Result<Status, Failure> {
    if let Some(status) = ask(socket, InspectRequest::Spacemap(args.clone()))? {
        return Ok(status);
    }
    let pool = open_named(&search_dirs(socket, &args.dirs), &args.pool, true)?;
    let result = tarn_ops::debug_spacemap(&pool, &args.pool, args.vdev, args.metaslab);
    pool.export()?;
    result.map(|()| 0)
}
