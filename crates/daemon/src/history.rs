//! Which requests go into a pool's history, and with what command line and user (the daemon's
//! side of `tarn::pool::history`; OpenZFS logs each successful zpool/zfs command that changed a
//! pool from the ioctl's caller).
//!
//! The client's uid and process id come from the connection (`SO_PEERCRED`), the command line
//! from `/proc/PID/cmdline` (argv[0] shortened to its file name), read when the request
//! arrives, while the client waits for the answer. Where that fails (another PID namespace),
//! the request's verb and target stand in. Only requests that change a pool and succeed are
//! recorded, in the pool they name; reads (list, get, status, send, debug, stat) are not, nor
//! is destroy (the pool is gone when it succeeds). Export is recorded before it runs, so that
//! the export's last sync writes it as the pool's last record (as zpool's history ends with
//! its export); an export refused (busy) leaves that record behind.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use tarn_protocol::request::dataset::{self, DatasetRequest, DestroyArgs, InheritArgs};
use tarn_protocol::request::devices::{AddArgs, DevicesRequest};
use tarn_protocol::request::inspect::{CheckArgs, InspectRequest};
use tarn_protocol::request::pool::{
    ClearArgs, CreateArgs, ImportArgs, PoolRequest, ReleaseArgs, SetArgs, UpgradeArgs,
};
use tarn_protocol::request::replication::{ReceiveArgs, ReplicationRequest};
use tarn_protocol::request::scan::{DeviceStateArgs, ScanRequest, ScrubArgs};
use tarn_protocol::request::snapshot::{
    BookmarkArgs, CloneArgs, HoldArgs, NameArgs, RenameArgs, RollbackArgs, SnapshotArgs,
    SnapshotRequest,
};
use tarn_protocol::request::PoolName;
use tarn_protocol::Request;

use super::held::Daemon;

/// Who is on the other end of a connection.
#[derive(Clone, Copy, Debug)]
pub(super) struct Peer {
    /// 0 when the client is in another PID namespace.
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

/// The connected client's credentials, if the kernel gives them.
pub(super) fn peer(stream: &UnixStream) -> Option<Peer> {
    let mut credentials = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut length = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the buffer and its length describe a valid ucred the kernel fills in.
    let result = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut credentials as *mut libc::ucred).cast(),
            &mut length,
        )
    };
    (result == 0).then_some(Peer {
        pid: credentials.pid.max(0) as u32,
        uid: credentials.uid,
        gid: credentials.gid,
    })
}

/// A history record to write once its request has succeeded (or, for an export, before it
/// runs: [`PendingRecord::before`]).
pub(super) struct PendingRecord {
    pool: String,
    command: String,
    uid: u32,
    /// Written before the request runs (export).
    pub before: bool,
}

/// The pool a request changes, if it changes one (see the module documentation).
fn changed_pool(request: &Request) -> Option<String> {
    let dataset = |name: &str| {
        name.split(['/', '@', '#'])
            .next()
            .unwrap_or_default()
            .to_string()
    };
    Some(match request {
        Request::Pool(PoolRequest::Create(CreateArgs { pool, .. }))
        | Request::Pool(PoolRequest::Set(SetArgs { pool, .. }))
        | Request::Pool(PoolRequest::Clear(ClearArgs { pool, .. }))
        | Request::Pool(PoolRequest::Upgrade(UpgradeArgs {
            pool: Some(pool), ..
        })) => pool.clone(),
        Request::Pool(PoolRequest::Import(ImportArgs { pool, new_name, .. })) => {
            new_name.clone().or(pool.clone())?
        }
        Request::Scan(ScanRequest::Online(DeviceStateArgs { pool, .. }))
        | Request::Scan(ScanRequest::Offline(DeviceStateArgs { pool, .. }))
        | Request::Scan(ScanRequest::Scrub(ScrubArgs { pool, .. }))
        | Request::Scan(ScanRequest::Resilver(PoolName { pool }))
        | Request::Pool(PoolRequest::Export(ReleaseArgs { pool, .. })) => pool.clone(),
        Request::Devices(DevicesRequest::Add(AddArgs { dry_run: true, .. })) => return None,
        Request::Devices(request) => request.pool().to_string(),
        Request::Inspect(InspectRequest::Check(CheckArgs {
            pool,
            no_repair: false,
            ..
        })) => pool.clone(),
        Request::Dataset(request) => match request {
            DatasetRequest::Destroy(DestroyArgs { dry_run: true, .. })
            | DatasetRequest::List(_)
            | DatasetRequest::Get(_)
            | DatasetRequest::Mount(_)
            | DatasetRequest::Unmount(_)
            | DatasetRequest::Userspace(_) => return None,
            DatasetRequest::Allow(args) if args.lists() => return None,
            DatasetRequest::Allow(args) | DatasetRequest::Unallow(args) => dataset(args.name()),
            DatasetRequest::Destroy(DestroyArgs { name, .. })
            | DatasetRequest::Create(dataset::CreateArgs { name, .. })
            | DatasetRequest::Set(dataset::SetArgs { name, .. })
            | DatasetRequest::Inherit(InheritArgs { name, .. }) => dataset(name),
        },
        Request::Snapshot(request) => match request {
            SnapshotRequest::DestroySnapshots(DestroyArgs { dry_run: true, .. })
            | SnapshotRequest::DebugDataset(_)
            | SnapshotRequest::Holds(_)
            | SnapshotRequest::Diff(_) => return None,
            SnapshotRequest::Hold(HoldArgs { snapshots, .. })
            | SnapshotRequest::Release(HoldArgs { snapshots, .. }) => dataset(snapshots.first()?),
            SnapshotRequest::Snapshot(SnapshotArgs { names, .. }) => dataset(names.first()?),
            SnapshotRequest::Bookmark(BookmarkArgs { bookmark: name, .. })
            | SnapshotRequest::DestroySnapshots(DestroyArgs { name, .. })
            | SnapshotRequest::DestroyBookmark(DestroyArgs { name, .. })
            | SnapshotRequest::Clone(CloneArgs { name, .. })
            | SnapshotRequest::Promote(NameArgs { name })
            | SnapshotRequest::Rollback(RollbackArgs { name, .. })
            | SnapshotRequest::Rename(RenameArgs { name, .. }) => dataset(name),
        },
        Request::Replication(ReplicationRequest::Send(_)) => return None,
        Request::Replication(
            ReplicationRequest::Receive(ReceiveArgs { target, .. })
            | ReplicationRequest::ReceiveAbort(ReceiveArgs { target, .. }),
        ) => dataset(target),
        // Reads, and export and destroy (the pool is gone when they succeed). Named one by
        // one, so that a new verb is placed here or above before it compiles.
        Request::Ping
        | Request::Stop
        | Request::Pool(
            PoolRequest::Destroy(_)
            | PoolRequest::Sync(_)
            | PoolRequest::List(_)
            | PoolRequest::Get(_)
            | PoolRequest::Status(_)
            | PoolRequest::History(_)
            // `-a` changes every pool, listing none: recorded in none.
            | PoolRequest::Upgrade(UpgradeArgs { pool: None, .. }),
        )
        | Request::Scan(ScanRequest::Status(_))
        | Request::Inspect(_)
        | Request::Stat(_)
        | Request::Inject(_) => return None,
    })
}

/// The client's command line, argv[0] shortened to its file name.
fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut words: Vec<String> = raw
        .split(|byte| *byte == 0)
        .filter(|word| !word.is_empty())
        .map(|word| String::from_utf8_lossy(word).into_owned())
        .collect();
    let first = words.first_mut()?;
    if let Some(name) = std::path::Path::new(first.as_str()).file_name() {
        *first = name.to_string_lossy().into_owned();
    }
    Some(words.join(" "))
}

impl PendingRecord {
    /// The record a request would make, if it changes a pool.
    pub(super) fn of(request: &Request, peer: Option<Peer>) -> Option<PendingRecord> {
        let pool = changed_pool(request)?;
        let command = peer
            .filter(|peer| peer.pid > 0)
            .and_then(|peer| command_line(peer.pid))
            .unwrap_or_else(|| format!("tarn {} {pool}", request.verb()));
        Some(PendingRecord {
            pool,
            command,
            uid: peer.map_or(0, |peer| peer.uid),
            before: matches!(request, Request::Pool(PoolRequest::Export(_))),
        })
    }

    /// The request succeeded: log it in its pool (written by the pool's next sync).
    pub(super) fn record(self, daemon: &Arc<Daemon>) {
        if let Some(pool) = daemon.pool(&self.pool) {
            pool.log_history(&self.command, self.uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_protocol::request::devices::AttachArgs;
    use tarn_protocol::request::pool::StatusArgs;

    #[test]
    fn only_changes_are_recorded_in_the_pool_they_name() {
        let create = Request::Dataset(DatasetRequest::Create(dataset::CreateArgs {
            name: "tank/a/b".into(),
            properties: Vec::new(),
            parents: false,
        }));
        assert_eq!(changed_pool(&create).as_deref(), Some("tank"));
        let snapshot = Request::Snapshot(SnapshotRequest::Snapshot(SnapshotArgs {
            names: vec!["tank/a@s1".into()],
            recursive: false,
        }));
        assert_eq!(changed_pool(&snapshot).as_deref(), Some("tank"));
        assert_eq!(
            changed_pool(&Request::Pool(PoolRequest::Status(StatusArgs {
                dirs: Vec::new(),
                json: false,
                exact: false,
                pool: None,
                verbose: true,
                unhealthy: false,
            }))),
            None
        );
        assert_eq!(
            changed_pool(&Request::Inspect(InspectRequest::Check(CheckArgs {
                dirs: Vec::new(),
                pool: "tank".into(),
                no_repair: true
            }))),
            None
        );
        let attach = Request::Devices(DevicesRequest::Attach(AttachArgs {
            pool: "tank".into(),
            device: "a.img".into(),
            new_device: "/d/b.img".into(),
            force: false,
            wait: false,
        }));
        assert_eq!(changed_pool(&attach).as_deref(), Some("tank"));
        let add = |dry_run| {
            Request::Devices(DevicesRequest::Add(AddArgs {
                pool: "tank".into(),
                vdevs: vec!["/d/c.img".into()],
                force: false,
                dry_run,
            }))
        };
        assert_eq!(changed_pool(&add(false)).as_deref(), Some("tank"));
        assert_eq!(changed_pool(&add(true)), None);
        let record = PendingRecord::of(&create, None).unwrap();
        assert_eq!(record.command, "tarn create tank");
        assert_eq!(record.uid, 0);
    }

    #[test]
    fn the_command_line_of_this_process_is_read() {
        let line = command_line(std::process::id()).unwrap();
        assert!(!line.starts_with('/'), "{line}");
        assert!(!line.is_empty());
    }
}
