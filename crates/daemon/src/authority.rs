//! Who may do what (OpenZFS's zfs_ioctl.c security policies and dsl_deleg.c): every request is
//! authorised here, from the client's credentials, before it runs.
//!
//! The socket is open to every local user (mode 0666, as /dev/zfs): whoever connects is known
//! by the kernel's `SO_PEERCRED` (uid, primary gid, pid) and the supplementary groups of that
//! process (`/proc/PID/status`, "Groups:"). Root (uid 0) may do everything. Everyone else:
//!
//! - reads are open: list, get, holds, userspace, pool list/get/status/history/iostat, scan
//!   status, stat, check without repair, the mounts list, `tarn allow FS` (the grants), ping;
//! - a change to a dataset needs its permissions ([`required`]), granted with `tarn allow`
//!   (`tarn::Grant`, kept in the pool) to the user, one of their groups, or everyone, on the
//!   dataset (local) or on an ancestor (descendent): create, clone and receive need theirs on
//!   the parent of the new dataset, destroy needs `destroy` and `mount`, rename `rename` and
//!   `create` and `mount` on the new parent, set and inherit the property's own name
//!   (`userprop` for user properties, `userquota` ... for owner quotas), and so on as zfs;
//! - everything else is root's: pool changes, devices, scrubs, injection, the `debug` verbs,
//!   `stop`, and granting itself.
//!
//! [`required`] maps every request to what it needs, exhaustively: a new verb does not compile
//! until it is placed. A refusal names the permission missing and the command that grants it.
//! A client whose credentials cannot be read may only read.

use std::collections::BTreeSet;
use std::sync::Arc;

use tarn::{Identity, OwnerProperty, Pool};
use tarn_protocol::error::Failure;
use tarn_protocol::request::dataset::{
    self, AllowArgs, DatasetRequest, DestroyArgs, InheritArgs, MountArgs, UnmountArgs,
};
use tarn_protocol::request::inspect::{CheckArgs, InspectRequest};
use tarn_protocol::request::pool::{PoolRequest, UpgradeArgs};
use tarn_protocol::request::replication::{ReceiveArgs, ReplicationRequest, SendArgs};
use tarn_protocol::request::scan::ScanRequest;
use tarn_protocol::request::snapshot::{
    BookmarkArgs, CloneArgs, HoldArgs, NameArgs, RenameArgs, RollbackArgs, SnapshotArgs,
    SnapshotRequest,
};
use tarn_protocol::Request;

use super::held::Daemon;
use super::history::Peer;

/// The datasets a permission is needed on, as a request names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Target {
    /// The file system of this name (a snapshot's or bookmark's: its file system's).
    Dataset(String),
    /// The file system and every file system below it (`-r`).
    Tree(String),
    /// Where a new dataset of this name is made: its parent (for a snapshot, its file
    /// system), or with `-p` the nearest ancestor that exists.
    NewParent(String),
    /// The file system a clone of this name was cloned from.
    OriginOf(String),
    /// A mounted file system, by name or mountpoint.
    Mounted(String),
    /// The snapshot a `send -t` token names.
    SendToken(String),
}

/// What a request needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Required {
    /// Nothing: it only reads.
    Anyone,
    /// Root: it changes a pool, its devices, or reads raw data.
    Root,
    /// Each permission on each of its targets.
    Permissions(Vec<(String, Target)>),
}

/// The permission that setting or inheriting property `name` needs: its own name, `userprop`
/// for a user property, the quota's family (`userquota`, `groupobjquota`, ...) for an owner
/// quota.
pub(super) fn property_permission(name: &str) -> String {
    if tarn::is_user_property_name(name) {
        return "userprop".into();
    }
    if OwnerProperty::is_owner_property_name(name) {
        return name.split('@').next().unwrap_or(name).to_string();
    }
    name.to_string()
}

fn needs(permissions: &[&str], target: Target) -> Vec<(String, Target)> {
    permissions
        .iter()
        .map(|permission| (permission.to_string(), target.clone()))
        .collect()
}

/// `-r` makes a target a tree.
fn dataset_or_tree(name: &str, recursive: bool) -> Target {
    if recursive {
        Target::Tree(name.to_string())
    } else {
        Target::Dataset(name.to_string())
    }
}

/// The permissions of `-o prop=value` settings, on `target`.
fn setting_permissions(settings: &[String], target: &Target) -> Vec<(String, Target)> {
    settings
        .iter()
        .map(|setting| {
            let name = setting.split('=').next().unwrap_or(setting);
            (property_permission(name), target.clone())
        })
        .collect()
}

/// What `request` needs (module documentation). Exhaustive: every verb is placed here.
pub(super) fn required(request: &Request) -> Required {
    use Required::{Anyone, Permissions, Root};
    match request {
        Request::Ping => Anyone,
        Request::Stop | Request::Inject(_) | Request::Devices(_) => Root,
        Request::Pool(request) => match request {
            PoolRequest::List(_)
            | PoolRequest::Get(_)
            | PoolRequest::Status(_)
            | PoolRequest::History(_)
            // zpool sync needs no privilege either (zfs_secpolicy_none).
            | PoolRequest::Sync(_)
            | PoolRequest::Upgrade(UpgradeArgs {
                all: false,
                pool: None,
            }) => Anyone,
            PoolRequest::Create(_)
            | PoolRequest::Import(_)
            | PoolRequest::Export(_)
            | PoolRequest::Destroy(_)
            | PoolRequest::Set(_)
            | PoolRequest::Upgrade(_)
            | PoolRequest::Clear(_) => Root,
        },
        Request::Scan(request) => match request {
            ScanRequest::Status(_) => Anyone,
            ScanRequest::Scrub(_)
            | ScanRequest::Resilver(_)
            | ScanRequest::Online(_)
            | ScanRequest::Offline(_) => Root,
        },
        Request::Inspect(request) => match request {
            InspectRequest::Check(CheckArgs {
                no_repair: true, ..
            }) => Anyone,
            InspectRequest::Check(_)
            | InspectRequest::Metaslabs(_)
            | InspectRequest::Logs(_)
            | InspectRequest::Map(_)
            | InspectRequest::Spacemap(_)
            | InspectRequest::Object(_) => Root,
        },
        Request::Stat(_) => Anyone,
        Request::Dataset(request) => match request {
            DatasetRequest::List(_)
            | DatasetRequest::Get(_)
            | DatasetRequest::Userspace(_)
            | DatasetRequest::Destroy(DestroyArgs { dry_run: true, .. })
            | DatasetRequest::Mount(MountArgs {
                name: None,
                all: false,
                ..
            }) => Anyone,
            DatasetRequest::Allow(args) if args.lists() => Anyone,
            DatasetRequest::Allow(_) | DatasetRequest::Unallow(_) => Root,
            DatasetRequest::Mount(MountArgs { name: None, .. })
            | DatasetRequest::Unmount(UnmountArgs { target: None, .. }) => Root,
            DatasetRequest::Create(dataset::CreateArgs {
                name, properties, ..
            }) => {
                let parent = Target::NewParent(name.clone());
                let mut needed = needs(&["create", "mount"], parent.clone());
                needed.extend(setting_permissions(properties, &parent));
                Permissions(needed)
            }
            DatasetRequest::Destroy(DestroyArgs {
                name,
                recursive,
                recursive_dependents,
                ..
            }) => Permissions(needs(
                &["destroy", "mount"],
                dataset_or_tree(name, *recursive || *recursive_dependents),
            )),
            DatasetRequest::Set(dataset::SetArgs { settings, name }) => Permissions(
                setting_permissions(settings, &Target::Dataset(name.clone())),
            ),
            DatasetRequest::Inherit(InheritArgs { property, name, .. }) => Permissions(vec![(
                property_permission(property),
                Target::Dataset(name.clone()),
            )]),
            DatasetRequest::Mount(MountArgs {
                name: Some(name), ..
            }) => Permissions(needs(&["mount"], Target::Dataset(name.clone()))),
            DatasetRequest::Unmount(UnmountArgs {
                target: Some(target),
                ..
            }) => Permissions(needs(&["mount"], Target::Mounted(target.clone()))),
        },
        Request::Snapshot(request) => match request {
            SnapshotRequest::Holds(_)
            | SnapshotRequest::DestroySnapshots(DestroyArgs { dry_run: true, .. }) => Anyone,
            SnapshotRequest::DebugDataset(_) => Root,
            SnapshotRequest::Snapshot(SnapshotArgs { names, recursive }) => Permissions(
                names
                    .iter()
                    .flat_map(|name| needs(&["snapshot"], dataset_or_tree(name, *recursive)))
                    .collect(),
            ),
            SnapshotRequest::Clone(CloneArgs {
                properties,
                snapshot,
                name,
            }) => {
                let parent = Target::NewParent(name.clone());
                let mut needed = needs(&["create", "mount"], parent.clone());
                needed.extend(needs(&["clone"], Target::Dataset(snapshot.clone())));
                needed.extend(setting_permissions(properties, &parent));
                Permissions(needed)
            }
            SnapshotRequest::Promote(NameArgs { name }) => {
                let mut needed = needs(&["promote", "mount"], Target::Dataset(name.clone()));
                needed.extend(needs(&["promote", "mount"], Target::OriginOf(name.clone())));
                Permissions(needed)
            }
            SnapshotRequest::DestroySnapshots(DestroyArgs {
                name,
                recursive,
                recursive_dependents,
                ..
            }) => Permissions(needs(
                &["destroy", "mount"],
                dataset_or_tree(name, *recursive || *recursive_dependents),
            )),
            SnapshotRequest::DestroyBookmark(DestroyArgs { name, .. }) => {
                Permissions(needs(&["destroy"], Target::Dataset(name.clone())))
            }
            SnapshotRequest::Rollback(RollbackArgs { name, .. }) => {
                Permissions(needs(&["rollback"], Target::Dataset(name.clone())))
            }
            SnapshotRequest::Rename(RenameArgs { name, new_name }) => {
                let mut needed = needs(&["rename"], Target::Dataset(name.clone()));
                // A snapshot's new name may be given alone (NEW for FS@NEW): its file system.
                let new_name = if name.contains('@') && !new_name.contains('@') {
                    format!("{}@{new_name}", name.split('@').next().unwrap_or(name))
                } else {
                    new_name.clone()
                };
                needed.extend(needs(&["create", "mount"], Target::NewParent(new_name)));
                Permissions(needed)
            }
            SnapshotRequest::Bookmark(BookmarkArgs { bookmark, .. }) => {
                Permissions(needs(&["bookmark"], Target::Dataset(bookmark.clone())))
            }
            SnapshotRequest::Hold(HoldArgs {
                snapshots,
                recursive,
                ..
            })
            | SnapshotRequest::Release(HoldArgs {
                snapshots,
                recursive,
                ..
            }) => {
                let permission = if matches!(request, SnapshotRequest::Hold(_)) {
                    "hold"
                } else {
                    "release"
                };
                Permissions(
                    snapshots
                        .iter()
                        .flat_map(|name| needs(&[permission], dataset_or_tree(name, *recursive)))
                        .collect(),
                )
            }
            SnapshotRequest::Diff(args) => {
                Permissions(needs(&["diff"], Target::Dataset(args.snapshot.clone())))
            }
        },
        Request::Replication(request) => match request {
            ReplicationRequest::Send(SendArgs {
                resume_token: Some(token),
                ..
            }) => Permissions(needs(&["send"], Target::SendToken(token.clone()))),
            ReplicationRequest::Send(args) => Permissions(needs(
                &["send"],
                dataset_or_tree(args.snapshot(), args.recursive),
            )),
            ReplicationRequest::Receive(ReceiveArgs { target, set, .. })
            | ReplicationRequest::ReceiveAbort(ReceiveArgs { target, set, .. }) => {
                let parent = Target::NewParent(filesystem_name(target).to_string());
                let mut needed = needs(&["receive", "create", "mount"], parent.clone());
                needed.extend(setting_permissions(set, &parent));
                Permissions(needed)
            }
        },
    }
}

/// The file system of a dataset, snapshot (`FS@SNAP`) or bookmark (`FS#NAME`) name.
fn filesystem_name(name: &str) -> &str {
    name.split(['@', '#']).next().unwrap_or(name)
}

/// The file system under which dataset `name` is made: a snapshot's own, a file system's
/// parent (the pool's root file system has none).
fn parent_name(name: &str) -> Option<&str> {
    if let Some((file_system, _)) = name.split_once(['@', '#']) {
        return Some(file_system);
    }
    name.rsplit_once('/').map(|(parent, _)| parent)
}

/// Who is asking: uid, primary gid, and the supplementary groups of the process.
fn identity_of(peer: Peer) -> Identity {
    let mut gids = vec![peer.gid];
    let status = std::fs::read_to_string(format!("/proc/{}/status", peer.pid)).unwrap_or_default();
    if let Some(line) = status.lines().find(|line| line.starts_with("Groups:")) {
        gids.extend(
            line["Groups:".len()..]
                .split_whitespace()
                .filter_map(|gid| gid.parse::<u32>().ok()),
        );
    }
    gids.sort_unstable();
    gids.dedup();
    Identity {
        uid: peer.uid,
        gids,
    }
}

/// The login name of `uid`, or the number when the passwd database has none.
fn user_name(uid: u32) -> String {
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: zeroed passwd is a valid out-parameter; getpwuid_r fills it from `buffer`.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buffer`'s length is passed.
    let status = unsafe {
        libc::getpwuid_r(
            uid,
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if status == 0 && !found.is_null() && !entry.pw_name.is_null() {
        // SAFETY: getpwuid_r succeeded: pw_name is a NUL-terminated string in `buffer`.
        return unsafe { std::ffi::CStr::from_ptr(entry.pw_name) }
            .to_string_lossy()
            .into_owned();
    }
    uid.to_string()
}

/// Refuse `request` unless the client may make it (module documentation).
pub(super) fn authorise(
    daemon: &Arc<Daemon>,
    request: &Request,
    peer: Option<Peer>,
) -> Result<(), Failure> {
    if peer.is_some_and(|peer| peer.uid == 0) {
        return Ok(());
    }
    let needed = match required(request) {
        Required::Anyone => return Ok(()),
        Required::Root => None,
        Required::Permissions(needed) => Some(needed),
    };
    let Some(peer) = peer else {
        return Err(Failure(format!(
            "permission denied: cannot tell who is asking (no peer credentials on the socket); only reads are allowed, not {}",
            request.verb()
        )));
    };
    let user = user_name(peer.uid);
    let Some(needed) = needed else {
        return Err(Failure(format!(
            "permission denied: only root may run {} (user {user} is uid {})",
            request.verb(),
            peer.uid
        )));
    };
    let identity = identity_of(peer);
    for (permission, target) in needed {
        for dataset in resolve(daemon, &target)? {
            let pool = daemon.pool_of_dataset(&dataset)?;
            let permitted = permissions_on(&pool, &dataset, &identity)?;
            if !permitted.contains(&permission) {
                return Err(Failure(format!(
                    "permission denied: user {user} lacks '{permission}' on {dataset} (tarn allow -u {user} {permission} {dataset})"
                )));
            }
        }
    }
    Ok(())
}

/// What `identity` may do on file system `dataset`.
fn permissions_on(
    pool: &Pool,
    dataset: &str,
    identity: &Identity,
) -> Result<BTreeSet<String>, Failure> {
    pool.delegated_permissions(dataset, identity)
        .map_err(|error| Failure(format!("cannot check permissions on {dataset}: {error}")))
}

/// The file systems a target names.
fn resolve(daemon: &Arc<Daemon>, target: &Target) -> Result<Vec<String>, Failure> {
    Ok(match target {
        Target::Dataset(name) => vec![filesystem_name(name).to_string()],
        Target::Tree(name) => {
            let top = filesystem_name(name);
            let pool = daemon.pool_of_dataset(top)?;
            let below = format!("{top}/");
            let mut names = vec![top.to_string()];
            names.extend(
                pool.datasets()
                    .into_iter()
                    .map(|info| info.name)
                    .filter(|name| name.starts_with(&below)),
            );
            names
        }
        Target::NewParent(name) => {
            let pool = daemon.pool_of_dataset(name)?;
            let mut at = parent_name(name).ok_or_else(|| {
                Failure(format!(
                    "permission denied: {name} is a pool's root file system"
                ))
            })?;
            while !pool.has_dataset(at) {
                at = parent_name(at).ok_or_else(|| {
                    Failure(format!(
                        "cannot check permissions: no file system above {name}"
                    ))
                })?;
            }
            vec![at.to_string()]
        }
        Target::OriginOf(name) => {
            let pool = daemon.pool_of_dataset(name)?;
            pool.datasets()
                .into_iter()
                .find(|info| info.name == *name)
                .and_then(|info| info.origin)
                .map(|origin| vec![filesystem_name(&origin).to_string()])
                .unwrap_or_default()
        }
        Target::Mounted(target) => vec![daemon.mounts.resolve(target).ok_or_else(|| {
            Failure(format!(
                "{target} is not a mounted tarn file system (give a dataset name or its mountpoint)"
            ))
        })?],
        Target::SendToken(token) => {
            let token = tarn::ResumeToken::decode(token)
                .map_err(|error| Failure(format!("cannot resume the send: {error}")))?;
            vec![filesystem_name(&token.stream.to_name).to_string()]
        }
    })
}

/// `tarn allow FS` and `tarn unallow` from the daemon's side: the arguments' grantees, scopes
/// and permissions as the pool takes them. Users and groups come as numeric IDs (the CLI
/// resolved the names).
pub(super) fn grant_change(args: &AllowArgs, grant: bool) -> Result<tarn::GrantChange, Failure> {
    args.check(if grant { "allow" } else { "unallow" })?;
    let id = |kind: &str, text: &String| {
        text.parse::<u32>().map_err(|_| {
            Failure(format!(
                "bad request: {kind} {text:?} is not a numeric ID (the CLI resolves names)"
            ))
        })
    };
    let mut grantees = Vec::new();
    for user in &args.users {
        grantees.push(tarn::Grantee::User(id("user", user)?));
    }
    for group in &args.groups {
        grantees.push(tarn::Grantee::Group(id("group", group)?));
    }
    if args.everyone {
        grantees.push(tarn::Grantee::Everyone);
    }
    let (local, descendent) = args.scopes();
    let scopes = tarn::GrantScope::BOTH
        .into_iter()
        .filter(|scope| match scope {
            tarn::GrantScope::Local => local,
            tarn::GrantScope::Descendent => descendent,
        })
        .collect();
    Ok(tarn::GrantChange {
        grantees,
        scopes,
        permissions: args.permissions(),
        grant,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_protocol::request::dataset::{GetArgs, ListArgs, SetArgs};
    use tarn_protocol::request::pool::StatusArgs;

    fn permissions(request: Request) -> Vec<(String, Target)> {
        match required(&request) {
            Required::Permissions(needed) => needed,
            other => panic!("{request:?} needs {other:?}"),
        }
    }

    fn dataset(name: &str) -> Target {
        Target::Dataset(name.into())
    }

    #[test]
    fn reads_are_open_and_pool_changes_are_roots() {
        let list = Request::Dataset(DatasetRequest::List(ListArgs {
            recursive: true,
            depth: None,
            sort: Default::default(),
            types: None,
            format: Default::default(),
            name: None,
        }));
        assert_eq!(required(&list), Required::Anyone);
        let status = Request::Pool(PoolRequest::Status(StatusArgs {
            dirs: Vec::new(),
            json: false,
            exact: false,
            pool: None,
            verbose: false,
            unhealthy: false,
        }));
        assert_eq!(required(&status), Required::Anyone);
        let get = Request::Dataset(DatasetRequest::Get(GetArgs {
            format: Default::default(),
            recursive: false,
            depth: None,
            sources: None,
            types: None,
            properties: "all".into(),
            names: vec!["tank".into()],
        }));
        assert_eq!(required(&get), Required::Anyone);
        assert_eq!(required(&Request::Stop), Required::Root);
        let destroy = Request::Pool(PoolRequest::Destroy(
            tarn_protocol::request::pool::ReleaseArgs {
                pool: "tank".into(),
                force: false,
                dirs: Vec::new(),
            },
        ));
        assert_eq!(required(&destroy), Required::Root);
        let listing = AllowArgs {
            operands: vec!["tank/a".into()],
            ..AllowArgs::default()
        };
        assert_eq!(
            required(&Request::Dataset(DatasetRequest::Allow(listing.clone()))),
            Required::Anyone
        );
        let granting = AllowArgs {
            users: vec!["1000".into()],
            operands: vec!["snapshot".into(), "tank/a".into()],
            ..AllowArgs::default()
        };
        assert_eq!(
            required(&Request::Dataset(DatasetRequest::Allow(granting))),
            Required::Root
        );
        assert_eq!(
            required(&Request::Dataset(DatasetRequest::Unallow(listing))),
            Required::Root
        );
    }

    #[test]
    fn dataset_verbs_need_their_permissions_where_zfs_checks_them() {
        let snapshot = Request::Snapshot(SnapshotRequest::Snapshot(SnapshotArgs {
            recursive: false,
            names: vec!["tank/a@1".into()],
        }));
        assert_eq!(
            permissions(snapshot),
            vec![("snapshot".into(), dataset("tank/a@1"))]
        );
        let create = Request::Dataset(DatasetRequest::Create(dataset::CreateArgs {
            parents: false,
            properties: vec!["compression=lz4".into(), "com.x:y=1".into()],
            name: "tank/a/b".into(),
        }));
        let parent = Target::NewParent("tank/a/b".into());
        assert_eq!(
            permissions(create),
            vec![
                ("create".into(), parent.clone()),
                ("mount".into(), parent.clone()),
                ("compression".into(), parent.clone()),
                ("userprop".into(), parent),
            ]
        );
        let destroy = Request::Dataset(DatasetRequest::Destroy(DestroyArgs {
            recursive: true,
            recursive_dependents: false,
            dry_run: false,
            verbose: false,
            defer: false,
            name: "tank/a".into(),
        }));
        let tree = Target::Tree("tank/a".into());
        assert_eq!(
            permissions(destroy),
            vec![("destroy".into(), tree.clone()), ("mount".into(), tree)]
        );
        let set = Request::Dataset(DatasetRequest::Set(SetArgs {
            settings: vec!["quota=1G".into(), "userquota@1000=1M".into()],
            name: "tank/a".into(),
        }));
        assert_eq!(
            permissions(set),
            vec![
                ("quota".into(), dataset("tank/a")),
                ("userquota".into(), dataset("tank/a"))
            ]
        );
        let rename = Request::Snapshot(SnapshotRequest::Rename(RenameArgs {
            name: "tank/a".into(),
            new_name: "tank/b/c".into(),
        }));
        let new_parent = Target::NewParent("tank/b/c".into());
        assert_eq!(
            permissions(rename),
            vec![
                ("rename".into(), dataset("tank/a")),
                ("create".into(), new_parent.clone()),
                ("mount".into(), new_parent)
            ]
        );
        let release = Request::Snapshot(SnapshotRequest::Release(HoldArgs {
            recursive: false,
            tag: "t".into(),
            snapshots: vec!["tank/a@1".into()],
        }));
        assert_eq!(
            permissions(release),
            vec![("release".into(), dataset("tank/a@1"))]
        );
        let receive = Request::Replication(ReplicationRequest::Receive(ReceiveArgs {
            force: false,
            no_mount: false,
            verbose: false,
            set: Vec::new(),
            exclude: Vec::new(),
            resumable: false,
            abort: false,
            target: "tank/r@s".into(),
        }));
        let parent = Target::NewParent("tank/r".into());
        assert_eq!(
            permissions(receive),
            vec![
                ("receive".into(), parent.clone()),
                ("create".into(), parent.clone()),
                ("mount".into(), parent)
            ]
        );
    }

    #[test]
    fn names_resolve_to_file_systems_and_parents() {
        assert_eq!(filesystem_name("tank/a@s"), "tank/a");
        assert_eq!(filesystem_name("tank/a#b"), "tank/a");
        assert_eq!(parent_name("tank/a/b"), Some("tank/a"));
        assert_eq!(parent_name("tank/a@s"), Some("tank/a"));
        assert_eq!(parent_name("tank"), None);
        assert_eq!(property_permission("compression"), "compression");
        assert_eq!(property_permission("com.x:y"), "userprop");
        assert_eq!(property_permission("groupobjquota@5"), "groupobjquota");
    }

    #[test]
    fn a_process_knows_its_own_groups() {
        let identity = identity_of(Peer {
            pid: std::process::id(),
            // SAFETY: getuid and getgid cannot fail.
            uid: unsafe { libc::getuid() },
            gid: unsafe { libc::getgid() },
        });
        assert!(identity.gids.contains(&unsafe { libc::getgid() }));
    }
}
