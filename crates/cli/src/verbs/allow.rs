//! `tarn allow|unallow` (zfs allow, zfs unallow): delegated permissions. The engine keeps the
//! grants (`tarn::pool::delegation`) and the daemon enforces them (its `authority` module);
//! here user and group names become numeric IDs before asking, and `tarn allow FS` prints
//! the grants as `zfs allow FS` does: one block per file system (the one named, then each
//! ancestor with grants), sections "Local permissions:", "Descendent permissions:",
//! "Local+Descendent permissions:", one line per grantee.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use nix::unistd::{Gid, Group, Uid, User};
use tarn::OwnerKind;
use tarn_protocol::error::{Failure, Status};
use tarn_protocol::request::dataset::{AllowArgs, DatasetRequest};
use tarn_protocol::Request;

use super::dataset::{ask, check_name};
use super::forward;
use super::owner_names::owner_id;

/// User and group names turned into numeric IDs, in place.
fn resolve_names(args: &mut AllowArgs) -> Result<(), Failure> {
    for (names, kind) in [
        (&mut args.users, OwnerKind::User),
        (&mut args.groups, OwnerKind::Group),
    ] {
        for name in names.iter_mut() {
            *name = owner_id(kind, name)
                .map_err(|why| Failure(format!("cannot name {name:?}: {why}")))?
                .to_string();
        }
    }
    Ok(())
}

/// `tarn allow ...`, `tarn allow FS`, `tarn unallow ...`.
pub fn allow(socket: &Path, mut args: AllowArgs, grant: bool) -> Result<Status, Failure> {
    check_name(args.name())?;
    let verb = if grant { "allow" } else { "unallow" };
    if !(grant && args.lists()) {
        args.check(verb)?;
    }
    resolve_names(&mut args)?;
    let name = args.name().to_string();
    let listing = grant && args.lists();
    let request = Request::Dataset(if grant {
        DatasetRequest::Allow(args)
    } else {
        DatasetRequest::Unallow(args)
    });
    let mut response = ask(socket, Some(&name), &request)?;
    if !listing || response.status != 0 {
        return Ok(forward(response));
    }
    let listed: Vec<Listed> = serde_json::from_value(response.data["permissions"].take())
        .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?;
    for block in listed {
        out!("{}", block_text(&block).trim_end());
    }
    Ok(0)
}

/// The grants of one file system, as the daemon answers them.
#[derive(serde::Deserialize)]
struct Listed {
    dataset: String,
    grants: Vec<ListedGrant>,
}

#[derive(serde::Deserialize)]
struct ListedGrant {
    kind: String,
    id: Option<u32>,
    scope: String,
    permissions: Vec<String>,
}

/// How a grantee is shown: `user alice`, `group staff`, `everyone` (a number when the database
/// has no name for it).
fn grantee_text(kind: &str, id: Option<u32>) -> String {
    let Some(id) = id else {
        return kind.to_string();
    };
    let name = match kind {
        "user" => User::from_uid(Uid::from_raw(id))
            .ok()
            .flatten()
            .map(|user| user.name),
        "group" => Group::from_gid(Gid::from_raw(id))
            .ok()
            .flatten()
            .map(|group| group.name),
        _ => None,
    };
    format!("{kind} {}", name.unwrap_or_else(|| id.to_string()))
}

/// One file system's block, as zfs allow prints it.
fn block_text(block: &Listed) -> String {
    // Per grantee (users, then groups, then everyone; by ID), its local and descendent sets.
    let order = |kind: &str| match kind {
        "user" => 0,
        "group" => 1,
        _ => 2,
    };
    let mut by_grantee: BTreeMap<(u8, Option<u32>, String), [BTreeSet<String>; 2]> =
        BTreeMap::new();
    for grant in &block.grants {
        let sets = by_grantee
            .entry((order(&grant.kind), grant.id, grant.kind.clone()))
            .or_default();
        let at = usize::from(grant.scope == "descendent");
        sets[at].extend(grant.permissions.iter().cloned());
    }
    let header = format!("---- Permissions on {} ", block.dataset);
    let mut text = format!(
        "{header}{}\n",
        "-".repeat(70usize.saturating_sub(header.len()))
    );
    for (title, local, descendent) in [
        ("Local permissions:", true, false),
        ("Descendent permissions:", false, true),
        ("Local+Descendent permissions:", true, true),
    ] {
        let mut lines = Vec::new();
        for ((_, id, kind), [local_set, descendent_set]) in &by_grantee {
            let chosen: Vec<&str> = local_set
                .union(descendent_set)
                .filter(|permission| {
                    local_set.contains(*permission) == local
                        && descendent_set.contains(*permission) == descendent
                })
                .map(String::as_str)
                .collect();
            if !chosen.is_empty() {
                lines.push(format!(
                    "\t{} {}",
                    grantee_text(kind, *id),
                    chosen.join(",")
                ));
            }
        }
        if !lines.is_empty() {
            text.push_str(title);
            text.push('\n');
            for line in lines {
                text.push_str(&line);
                text.push('\n');
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Permissions in both scopes go under Local+Descendent, the rest under their own scope;
    /// root is uid and gid 0 everywhere.
    #[test]
    fn a_block_prints_as_zfs_allow() {
        let grant = |kind: &str, id, scope: &str, permissions: &[&str]| ListedGrant {
            kind: kind.into(),
            id,
            scope: scope.into(),
            permissions: permissions.iter().map(|p| p.to_string()).collect(),
        };
        let block = Listed {
            dataset: "tank/a".into(),
            grants: vec![
                grant("everyone", None, "descendent", &["send"]),
                grant("user", Some(0), "local", &["create", "snapshot"]),
                grant("user", Some(0), "descendent", &["snapshot"]),
                grant("group", Some(0), "local", &["mount"]),
            ],
        };
        let text = block_text(&block);
        let expected = format!(
            "---- Permissions on tank/a {}\nLocal permissions:\n\tuser root create\n\tgroup root mount\nDescendent permissions:\n\teveryone send\nLocal+Descendent permissions:\n\tuser root snapshot\n",
            "-".repeat(43)
        );
        assert_eq!(text, expected);
        assert_eq!(text.lines().next().unwrap().len(), 70);
    }
}
