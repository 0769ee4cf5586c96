//! Scrub, resilver and device verbs: `pool scrub [-s|-p] POOL`, `pool resilver POOL`, `pool
//! online|offline POOL DEVICE...`, and `pool wait -t scrub|resilver|raidz_expand POOL`. Each
//! needs the pool imported (in the daemon), as zpool's do; the scan itself runs in the daemon's
//! sync thread, a RAID-Z expansion's copy in a thread of its own.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use tarn_protocol::error::{Failure, Status};
use tarn_protocol::format::human_bytes;
use tarn_protocol::request::scan::{DeviceStateArgs, ScanRequest, ScrubArgs};
use tarn_protocol::request::PoolName;
use tarn_protocol::Request;

use super::{ask_imported, forward};

const WAIT_POLL: Duration = Duration::from_millis(100);

/// `pool scrub [-s|-p|-w] POOL`.
pub fn scrub(socket: &Path, args: ScrubArgs) -> Result<Status, Failure> {
    // Contradicting flags are refused before the daemon is asked.
    args.action()?;
    let (pool, wait) = (args.pool.clone(), args.wait);
    let request = Request::Scan(ScanRequest::Scrub(args));
    let status = forward(ask_imported(socket, &pool, &request)?);
    if status != 0 || !wait {
        return Ok(status);
    }
    wait_scan(socket, "scrub", &pool)
}

/// `pool resilver POOL`: start a resilver, or start the one in progress again from the
/// beginning; a scrub in progress is canceled for it. With no device missing writes there is
/// nothing to do: zpool then says nothing and succeeds; this says so, and succeeds.
pub fn resilver(socket: &Path, args: PoolName) -> Result<Status, Failure> {
    let pool = args.pool.clone();
    let request = Request::Scan(ScanRequest::Resilver(args));
    let response = ask_imported(socket, &pool, &request)?;
    if response.status == 0 && response.data["outcome"] == "not needed" {
        println!("pool {pool}: no device is missing writes: nothing to resilver");
    }
    Ok(forward(response))
}

/// `pool online|offline POOL DEVICE...`: `verb` is `ScanRequest::Online` or `Offline`.
pub fn device(
    socket: &Path,
    args: DeviceStateArgs,
    verb: fn(DeviceStateArgs) -> ScanRequest,
) -> Result<Status, Failure> {
    let pool = args.pool.clone();
    let no_device = args.devices.is_empty();
    let request = verb(args);
    if no_device {
        return Err(Failure(format!(
            "missing device name: tarn {} POOL DEVICE...",
            request.verb()
        )));
    }
    Ok(forward(ask_imported(
        socket,
        &pool,
        &Request::Scan(request),
    )?))
}

/// Poll `pool`'s scan state (the daemon's answer to a scan status request) until `progress`
/// says the awaited activity has ended (None); while it runs, show the line it gives on a
/// terminal, and `done` once it ends.
fn poll_scan_state(
    socket: &Path,
    pool: &str,
    done: &str,
    mut progress: impl FnMut(&serde_json::Value) -> Option<String>,
) -> Result<Status, Failure> {
    let terminal = std::io::stderr().is_terminal();
    let mut shown = false;
    loop {
        let request = Request::Scan(ScanRequest::Status(PoolName {
            pool: pool.to_string(),
        }));
        let response = ask_imported(socket, pool, &request)?;
        if response.status != 0 {
            return Ok(forward(response));
        }
        let Some(line) = progress(&response.data) else {
            break;
        };
        if terminal {
            let mut stderr = std::io::stderr();
            let _ = write!(stderr, "\r{pool}: {line} ");
            let _ = stderr.flush();
            shown = true;
        }
        std::thread::sleep(WAIT_POLL);
    }
    if shown {
        let _ = writeln!(std::io::stderr(), "\r{pool}: {done}{:60}", "");
    }
    Ok(0)
}

/// `pool wait -t scrub|resilver POOL`: poll the scan state until no scan of `function` runs
/// (a paused one does not), showing progress on a terminal.
pub fn wait_scan(socket: &Path, function: &str, pool: &str) -> Result<Status, Failure> {
    poll_scan_state(socket, pool, &format!("{function} done"), |data| {
        let scan = &data["scan"];
        // A paused scrub does not end by itself: waiting ends, as zpool wait's does.
        let running =
            scan["function"] == function && scan["state"] == "scanning" && scan["paused"] != true;
        if !running {
            return None;
        }
        let examined = scan["examined"].as_u64().unwrap_or(0);
        let total = scan["to_examine"]
            .as_u64()
            .unwrap_or(0)
            .max(examined)
            .max(1);
        Some(format!(
            "{function} {:>8} of {:>8} ({:.1}%)",
            human_bytes(examined),
            human_bytes(total),
            examined as f64 * 100.0 / total as f64
        ))
    })
}

/// `pool wait -t raidz_expand POOL` (and `pool attach -w POOL raidzN-M NEW_DEVICE`): poll the
/// pool's RAID-Z expansion until none runs (the pool never had one, or the newest finished).
/// A paused copy is waited for, as zpool's wait does: it goes on by itself once the vdev is
/// healthy again. Progress on stderr when it is a terminal.
pub fn wait_raidz_expand(socket: &Path, pool: &str) -> Result<Status, Failure> {
    poll_scan_state(socket, pool, "raidz expansion done", |data| {
        let expand = &data["expand"];
        if expand.is_null() || expand["finished"] == true {
            return None;
        }
        let reflowed = expand["reflowed"].as_u64().unwrap_or(0);
        let total = expand["total"].as_u64().unwrap_or(0).max(1);
        let vdev = expand["vdev"].as_str().unwrap_or("raidz");
        let paused = match expand["paused"].as_str() {
            Some(why) => format!(", paused: {why}"),
            None => String::new(),
        };
        Some(format!(
            "expanding {vdev} {:>8} copied, {:.1}% done{paused}",
            human_bytes(expand["copied"].as_u64().unwrap_or(0)),
            (reflowed.min(total) as f64 * 100.0 / total as f64)
        ))
    })
}
