//! At start, before taking the socket's lock: clear the tarn mounts a dead or dying daemon
//! left (`tarn_fuse::mountpoint::clear_stale_tarn_mounts`). A daemon killed while a thread of
//! its own waited in the kernel for its mount could not exit and kept its lock; aborting its
//! connections lets it finish dying, so that this daemon can take the lock after it.

use log::{info, warn};

/// Abort and lazily unmount every stale tarn mount, logging each.
pub(crate) fn clear_stale_mounts() {
    for cleared in tarn_fuse::mountpoint::clear_stale_tarn_mounts() {
        let what = format!(
            "stale tarn mount {} ({}, FUSE connection {})",
            cleared.mount.mount_point.display(),
            cleared.mount.source,
            cleared.mount.device_minor
        );
        match (cleared.aborted, &cleared.unmounted) {
            (true, Ok(())) => info!("{what}: no live daemon serves it; aborted and unmounted"),
            (aborted, Ok(())) => {
                warn!("{what}: no live daemon serves it; unmounted (aborted: {aborted})")
            }
            (aborted, Err(error)) => {
                warn!("{what}: no live daemon serves it (aborted: {aborted}); unmount: {error}")
            }
        }
    }
}
