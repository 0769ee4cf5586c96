//! `tarn check` and `tarn debug ...` (zdb): whole-pool verification and inspection, in the
//! daemon when it holds the pool, else in this process on the exported pool.

use std::path::{Path, PathBuf};

use tarn_protocol::error::{Failure, Status};
use tarn_protocol::Request;

use super::ask_holder;
use tarn_ops::open_named;

pub fn check(
    socket: &Path,
    dirs: Vec<PathBuf>,
    no_repair: bool,
    name: String,
) -> Result<Status, Failure> {
    let request = Request::Check {
        pool: name.clone(),
        repair: !no_repair,
    };
    if let Some(status) = ask_holder(socket, &request)? {
        return Ok(status);
    }
    let pool = open_named(&dirs, &name, no_repair)?;
    let clean = tarn_ops::check(&pool, &name, !no_repair)?;
    pool.export()?;
    Ok(if clean { 0 } else { 1 })
}

pub fn debug_metaslabs(
    socket: &Path,
    dirs: Vec<PathBuf>,
    json: bool,
    level: u8,
    name: String,
) -> Result<Status, Failure> {
    let request = Request::DebugMetaslabs {
        pool: name.clone(),
        json,
        level,
    };
    if let Some(status) = ask_holder(socket, &request)? {
        return Ok(status);
    }
    let pool = open_named(&dirs, &name, true)?;
    tarn_ops::debug_metaslabs(&pool, &name, json, level)?;
    pool.export()?;
    Ok(0)
}

pub fn debug_logs(
    socket: &Path,
    dirs: Vec<PathBuf>,
    json: bool,
    name: String,
) -> Result<Status, Failure> {
    let request = Request::DebugLogs {
        pool: name.clone(),
        json,
    };
    if let Some(status) = ask_holder(socket, &request)? {
        return Ok(status);
    }
    let pool = open_named(&dirs, &name, true)?;
    tarn_ops::debug_logs(&pool, &name, json)?;
    pool.export()?;
    Ok(0)
}

pub fn debug_map(
    socket: &Path,
    dirs: Vec<PathBuf>,
    output: PathBuf,
    name: String,
) -> Result<Status, Failure> {
    let output = tarn_protocol::absolute(&output);
    let request = Request::DebugMap {
        pool: name.clone(),
        output: output.clone(),
    };
    if let Some(status) = ask_holder(socket, &request)? {
        return Ok(status);
    }
    let pool = open_named(&dirs, &name, true)?;
    let result = tarn_ops::debug_map(&pool, &name, &output);
    pool.export()?;
    result.map(|()| 0)
}

pub fn debug_spacemap(
    socket: &Path,
    dirs: Vec<PathBuf>,
    name: String,
    vdev: u32,
    metaslab: u64,
) -> Result<Status, Failure> {
    let request = Request::DebugSpacemap {
        pool: name.clone(),
        vdev,
        metaslab,
    };
    if let Some(status) = ask_holder(socket, &request)? {
        return Ok(status);
    }
    let pool = open_named(&dirs, &name, true)?;
    let result = tarn_ops::debug_spacemap(&pool, &name, vdev, metaslab);
    pool.export()?;
    result.map(|()| 0)
}
