//! `tarn pool import -a`: import every pool the cache file remembers (`tarn_ops::cachefile`), as
//! the shipped systemd unit does at boot. A daemon imports its cache file's pools when it
//! starts, so this starts the daemon if none runs and then asks for each remembered pool that
//! is still not imported (one whose disks came late, or a daemon that was already running).

use std::collections::BTreeSet;
use std::path::Path;

use tarn_protocol::client;
use tarn_protocol::error::{Failure, Status};
use tarn_protocol::request::pool::{ImportArgs, PoolRequest};
use tarn_protocol::Request;

use super::forward;
use tarn_ops::cachefile;

pub fn import_all(socket: &Path) -> Result<Status, Failure> {
    let path = cachefile::default_path(socket);
    let file = cachefile::read(&path).map_err(Failure)?;
    if file.pools.is_empty() {
        out!("no pools in the cache file {}", path.display());
        return Ok(0);
    }
    let response = client::ask_starting(socket, &Request::Ping)?;
    let held: BTreeSet<String> = response.data["pools"]
        .as_array()
        .map(|pools| {
            pools
                .iter()
                .filter_map(|name| name.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut status = 0;
    for pool in file.pools {
        if held.contains(&pool.name) {
            out!("pool {} is imported", pool.name);
            continue;
        }
        // The cache file's paths are absolute: they go as they are.
        let request = Request::Pool(PoolRequest::Import(ImportArgs {
            dirs: pool.dirs(),
            options: if pool.readonly {
                vec!["readonly=on".into()]
            } else {
                Vec::new()
            },
            altroot: pool.altroot.clone(),
            pool: Some(pool.guid.to_string()),
            ..ImportArgs::default()
        }));
        let answer = forward(client::ask_starting(socket, &request)?);
        if answer != 0 {
            err!(
                "pool {} (in the cache file {}) could not be imported",
                pool.name,
                path.display()
            );
            status = answer;
        }
    }
    Ok(status)
}
