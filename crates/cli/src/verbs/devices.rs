//! Verbs that change a pool's vdev tree: `pool attach [-f] [-w] POOL DEVICE NEW_DEVICE` (also
//! `POOL raidzN-M NEW_DEVICE`: RAID-Z expansion), `pool detach POOL DEVICE`, `pool replace [-f]
//! [-w] POOL DEVICE [NEW_DEVICE]` and `pool add [-n] [-f] POOL VDEV_SPEC...`, as zpool's. The
//! pool must be imported (in the daemon); new device paths are made absolute here, since the
//! daemon does not share our working directory.

use std::path::Path;

use tarn::{is_raidz_vdev_name, parse_vdev_layout, VDEV_KEYWORDS};
use tarn_protocol::absolute;
use tarn_protocol::error::{Failure, Status};
use tarn_protocol::format::human_bytes;
use tarn_protocol::request::devices::{
    AddArgs, AttachArgs, DetachArgs, DevicesRequest, RemoveArgs, ReplaceArgs,
};
use tarn_protocol::Request;

use super::scrub::{wait_raidz_expand, wait_scan};
use super::{ask_imported, forward};

/// A device of the pool as the user named it: a path (made absolute), a file name or a guid.
fn existing_device(name: &str) -> String {
    if name.contains('/') {
        absolute(Path::new(name)).display().to_string()
    } else {
        name.to_string()
    }
}

fn new_device(path: &str) -> String {
    absolute(Path::new(path)).display().to_string()
}

/// `pool attach [-f] [-w] POOL DEVICE NEW_DEVICE`: a mirror side beside DEVICE (`-w`: until it
/// is resilvered), or, with DEVICE a RAID-Z vdev's name (`raidz1-0`), a new child of that vdev,
/// whose expansion then runs in the background (`-w`: until it has finished).
pub fn attach(socket: &Path, mut args: AttachArgs) -> Result<Status, Failure> {
    args.device = existing_device(&args.device);
    args.new_device = new_device(&args.new_device);
    let (pool, wait) = (args.pool.clone(), args.wait);
    let expansion = is_raidz_vdev_name(&args.device);
    let request = Request::Devices(DevicesRequest::Attach(args));
    let status = forward(ask_imported(socket, &pool, &request)?);
    if status != 0 || !wait {
        return Ok(status);
    }
    if expansion {
        wait_raidz_expand(socket, &pool)
    } else {
        wait_scan(socket, "resilver", &pool)
    }
}

/// `pool detach POOL DEVICE`.
pub fn detach(socket: &Path, mut args: DetachArgs) -> Result<Status, Failure> {
    args.device = existing_device(&args.device);
    let pool = args.pool.clone();
    let request = Request::Devices(DevicesRequest::Detach(args));
    Ok(forward(ask_imported(socket, &pool, &request)?))
}

/// `pool remove POOL DEVICE...`: cache devices only, for now (the engine says so for others).
pub fn remove(socket: &Path, mut args: RemoveArgs) -> Result<Status, Failure> {
    if args.devices.is_empty() {
        return Err(Failure(
            "missing device: tarn pool remove POOL DEVICE...".into(),
        ));
    }
    for device in &mut args.devices {
        *device = existing_device(device);
    }
    let pool = args.pool.clone();
    let request = Request::Devices(DevicesRequest::Remove(args));
    Ok(forward(ask_imported(socket, &pool, &request)?))
}

/// `pool replace [-f] [-w] POOL DEVICE [NEW_DEVICE]`.
pub fn replace(socket: &Path, mut args: ReplaceArgs) -> Result<Status, Failure> {
    args.device = existing_device(&args.device);
    args.new_device = args.new_device.as_deref().map(new_device);
    let pool = args.pool.clone();
    let request = Request::Devices(DevicesRequest::Replace(args));
    Ok(forward(ask_imported(socket, &pool, &request)?))
}

/// `pool add [-n] [-f] POOL VDEV_SPEC...`.
pub fn add(socket: &Path, mut args: AddArgs) -> Result<Status, Failure> {
    if args.vdevs.is_empty() {
        return Err(Failure(
            "missing vdev specification: tarn pool add [-n] [-f] POOL VDEV...".into(),
        ));
    }
    for word in &mut args.vdevs {
        if !VDEV_KEYWORDS.contains(&word.as_str()) {
            *word = new_device(word);
        }
    }
    let (pool, dry_run) = (args.pool.clone(), args.dry_run);
    // Spelling mistakes are reported before the daemon is asked.
    parse_vdev_layout(&args.vdevs)
        .map_err(|error| Failure(format!("cannot add to {pool}: {error}")))?;
    let request = Request::Devices(DevicesRequest::Add(args));
    let response = ask_imported(socket, &pool, &request)?;
    if response.status != 0 {
        return Ok(forward(response));
    }
    if dry_run {
        println!("would update '{pool}' to add the following vdevs:");
    }
    let mut logs_header_printed = false;
    for vdev in response.data["vdevs"].as_array().into_iter().flatten() {
        if dry_run && vdev["class"] == "log" && !logs_header_printed {
            println!("\tlogs");
            logs_header_printed = true;
        }
        let paths: Vec<&str> = vdev["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|path| path.as_str())
            .collect();
        if dry_run {
            let kind = vdev["type"].as_str().unwrap_or("disk");
            if kind == "cache" {
                println!("\tcache");
                println!("\t  {}", paths.join(" "));
            } else if kind == "mirror" || kind.starts_with("raidz") {
                println!("\t  {kind}-{}", vdev["id"]);
                for path in paths {
                    println!("\t    {path}");
                }
            } else {
                println!("\t  {}", paths.join(" "));
            }
            println!(
                "\t  ({} usable)",
                human_bytes(vdev["size"].as_u64().unwrap_or(0))
            );
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use tarn::is_raidz_vdev_name;

    #[test]
    fn raidz_vdev_names_are_told_from_devices() {
        for name in ["raidz1-0", "raidz2-1", "raidz3-12"] {
            assert!(is_raidz_vdev_name(name), "{name}");
        }
        for name in [
            "raidz",
            "raidz1",
            "raidz-0",
            "raidz1-",
            "raidz1-0x",
            "raidz1-0.img",
            "mirror-0",
            "/d/raidz1-0",
            "a.img",
        ] {
            assert!(!is_raidz_vdev_name(name), "{name}");
        }
    }
}
