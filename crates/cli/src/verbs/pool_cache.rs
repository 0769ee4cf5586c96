//! `tarn pool import -a`: import every pool the cache file remembers (`tarn_ops::cachefile`), as
//! the shipped systemd unit does at boot, or with `-d DIR` (or `-D`) every pool found there, as
//! `zpool import -a -d DIR`. A daemon imports its cache file's pools when it starts, so this
//! starts the daemon if none runs and then asks for each pool that is still not imported (one
//! whose disks came late, or a daemon that was already running). The other options (`-f`, `-F`,
//! `-m`, `-R`, `-o`) apply to each import; `-R` and `-o` override what the cache file recorded.

use std::collections::BTreeSet;
use std::path::Path;

use tarn::status::PoolState;
use tarn::Pool;
use tarn_protocol::client;
use tarn_protocol::error::{Failure, Status};
use tarn_protocol::request::pool::ImportArgs;
use tarn_protocol::Request;

use tarn_ops::cachefile;

pub fn import_all(socket: &Path, args: ImportArgs) -> Result<Status, Failure> {
    args.import_options()?;
    let path = cachefile::default_path(socket);
    // (guid, name, directories, the cache file's options) of each pool to import.
    let mut targets: Vec<(u64, String, ImportArgs)> = Vec::new();
    if args.dirs.is_empty() && !args.destroyed {
        let file = cachefile::read(&path).map_err(Failure)?;
        if file.pools.is_empty() {
            out!("no pools in the cache file {}", path.display());
            return Ok(0);
        }
        for pool in file.pools {
            // The cache file's paths are absolute: they go as they are. Options given on the
            // command line come after the remembered ones, so that they win.
            let mut options = if pool.readonly {
                vec!["readonly=on".to_string()]
            } else {
                Vec::new()
            };
            options.extend(args.options.iter().cloned());
            let one = ImportArgs {
                dirs: pool.dirs(),
                options,
                altroot: args.altroot.clone().or(pool.altroot.clone()),
                ..args.clone()
            };
            targets.push((pool.guid, pool.name, one));
        }
    } else {
        let dirs = cachefile::search_dirs(socket, &args.dirs);
        for found in Pool::scan(&dirs) {
            if (found.state == PoolState::Destroyed) == args.destroyed {
                let one = ImportArgs {
                    dirs: dirs.clone(),
                    ..args.clone()
                };
                targets.push((found.guid.0, found.name, one));
            }
        }
        if targets.is_empty() {
            out!("no pools available to import");
            return Ok(0);
        }
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
    for (guid, name, mut one) in targets {
        if held.contains(&name) {
            out!("pool {name} is imported");
            continue;
        }
        one.all = false;
        one.pool = Some(guid.to_string());
        let answer = match super::pool::import(socket, one) {
            Ok(answer) => answer,
            Err(Failure(why)) => {
                err!("tarn: {why}");
                1
            }
        };
        if answer != 0 {
            err!("pool {name} (id {guid}) could not be imported");
            status = answer;
        }
    }
    Ok(status)
}
