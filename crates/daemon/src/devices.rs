//! The daemon's device requests that change a pool's vdev tree: `pool attach`, `detach`,
//! `replace` and `add` (the engine's `Pool::attach` and friends; the change is durable when
//! they answer).

use std::path::Path;
use std::sync::Arc;

use tarn::parse_vdev_layout;
use tarn_protocol::error::Failure;
use tarn_protocol::request::devices::{
    AddArgs, AttachArgs, DetachArgs, DevicesRequest, RemoveArgs, ReplaceArgs,
};

use super::held::{Answer, Daemon, Reply};

fn failed(what: String) -> Reply {
    Reply::Failed(Failure(what))
}

pub(super) fn handle(daemon: &Arc<Daemon>, request: DevicesRequest) -> Result<Answer, Reply> {
    match request {
        DevicesRequest::Attach(AttachArgs {
            pool,
            device,
            new_device,
            force,
            wait: _,
        }) => {
            let held = daemon.held(&pool)?;
            let txg = held
                .attach(&device, Path::new(&new_device), force)
                .map_err(|error| {
                    // The engine's refusals of an attach (to a raidz child, of a RAID-Z
                    // expansion) already say what could not be attached to what.
                    let error = error.to_string();
                    failed(if error.starts_with("cannot attach ") {
                        error
                    } else {
                        format!("cannot attach {new_device} to {device}: {error}")
                    })
                })?;
            log::info!("pool {pool}: {new_device} attached to {device} in txg {txg}");
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "txg": txg.0 }),
            })
        }
        DevicesRequest::Detach(DetachArgs { pool, device }) => {
            let held = daemon.held(&pool)?;
            let txg = held
                .detach(&device)
                .map_err(|error| failed(format!("cannot detach {device}: {error}")))?;
            log::info!("pool {pool}: {device} detached in txg {txg}");
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "txg": txg.0 }),
            })
        }
        DevicesRequest::Remove(RemoveArgs { pool, devices }) => {
            let held = daemon.held(&pool)?;
            let mut txg = 0;
            for device in &devices {
                txg = held
                    .remove(device)
                    .map_err(|error| failed(format!("cannot remove {device}: {error}")))?
                    .0;
                log::info!("pool {pool}: {device} removed in txg {txg}");
            }
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "txg": txg }),
            })
        }
        DevicesRequest::Replace(ReplaceArgs {
            pool,
            device,
            new_device,
            force,
            wait,
        }) => {
            let held = daemon.held(&pool)?;
            let new_path = new_device.as_deref().map(Path::new);
            let guid = held
                .replace(&device, new_path, force)
                .map_err(|error| failed(format!("cannot replace {device}: {error}")))?;
            log::info!(
                "pool {pool}: replacing {device} by {} (guid {guid})",
                new_device.as_deref().unwrap_or(&device)
            );
            if wait {
                held.wait_replaced(guid)
                    .map_err(|error| failed(format!("replace of {device}: {error}")))?;
            }
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "guid": guid.0 }),
            })
        }
        DevicesRequest::Add(AddArgs {
            pool,
            vdevs,
            force,
            dry_run,
        }) => {
            let held = daemon.held(&pool)?;
            let layout = parse_vdev_layout(&vdevs)
                .map_err(|error| failed(format!("cannot add to {pool}: {error}")))?;
            let added = held
                .add(&layout, force, dry_run)
                .map_err(|error| failed(format!("cannot add to {pool}: {error}")))?;
            let vdevs: Vec<serde_json::Value> = added
                .iter()
                .map(|vdev| {
                    serde_json::json!({
                        "id": vdev.id.0,
                        "type": vdev.kind,
                        "class": vdev.class.as_str(),
                        "size": vdev.asize,
                        "paths": vdev.paths.iter().map(|path| path.display().to_string()).collect::<Vec<_>>(),
                    })
                })
                .collect();
            Ok(Answer {
                status: 0,
                data: serde_json::json!({ "vdevs": vdevs, "dry_run": dry_run }),
            })
        }
    }
}
