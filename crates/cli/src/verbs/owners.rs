//! `tarn userspace|groupspace|projectspace` (zfs userspace): space and quotas by owner.
//!
//! The daemon answers with one row per owner of the kinds asked (the verb's own kind, or the
//! kinds `-t` names), numeric IDs, usage as of the last synced txg. Here the rows get their
//! names (`owner_names`), are sorted (`-s`/`-S` in the order given; by default by type, then
//! name) and printed by the table printer every listing shares, with zfs's columns TYPE NAME
//! USED QUOTA OBJUSED OBJQUOTA.

use std::cmp::Ordering;
use std::path::Path;

use tarn::OwnerKind;
use tarn_protocol::error::{Failure, Status};
use tarn_protocol::format::{print_table, selected_fields};
use tarn_protocol::request::dataset::{DatasetRequest, SpaceArgs};
use tarn_protocol::rows::{OwnerSpaceRow, USERSPACE_COLUMNS};
use tarn_protocol::Request;

use super::dataset::{ask, check_name};
use super::forward;
use super::owner_names::OwnerNames;

/// The kinds of owner (their words, as the request carries them) that `verb` lists with the
/// types `-t` names: userspace and groupspace list POSIX users and groups (`posixuser`,
/// `posixgroup`, both with `all`; `smbuser` and `smbgroup` match no one, tarn having no SMB
/// identities), by default their own kind; projectspace lists projects and takes no `-t`.
pub fn owner_kinds(verb: OwnerKind, types: Option<&[String]>) -> Result<Vec<String>, Failure> {
    if verb == OwnerKind::Project {
        if types.is_some() {
            return Err(Failure(
                "projectspace takes no -t: it lists projects only (use userspace or groupspace -t)"
                    .into(),
            ));
        }
        return Ok(vec![OwnerKind::Project.word().to_string()]);
    }
    let default = [if verb == OwnerKind::User {
        "posixuser".to_string()
    } else {
        "posixgroup".to_string()
    }];
    let (mut user, mut group) = (false, false);
    for kind in types.unwrap_or(&default) {
        match kind.as_str() {
            "posixuser" => user = true,
            "posixgroup" => group = true,
            "all" => (user, group) = (true, true),
            "smbuser" | "smbgroup" => {}
            other => {
                return Err(Failure(format!(
                "invalid type '{other}': expected posixuser, posixgroup, smbuser, smbgroup or all"
            )))
            }
        }
    }
    Ok([(user, OwnerKind::User), (group, OwnerKind::Group)]
        .into_iter()
        .filter(|(wanted, _)| *wanted)
        .map(|(_, kind)| kind.word().to_string())
        .collect())
}

/// The sort keys: `-s` and `-S` in the order given, each field checked; by default type,
/// then name, as zfs sorts.
pub fn sort_keys(keys: &[(String, bool)]) -> Result<Vec<(String, bool)>, Failure> {
    if keys.is_empty() {
        return Ok(vec![("type".into(), false), ("name".into(), false)]);
    }
    for (field, _) in keys {
        if !USERSPACE_COLUMNS.contains(&field.as_str()) {
            return Err(Failure(format!(
                "invalid sort field '{field}'; valid fields are: {}",
                USERSPACE_COLUMNS.join(", ")
            )));
        }
    }
    Ok(keys.to_vec())
}

/// Order two shown names: numbers (owners without a name, or all of them with `-n`) by value,
/// before names, which go in byte order (strcmp's, as zfs sorts them).
fn compare_names(left: &str, right: &str) -> Ordering {
    match (left.parse::<u64>(), right.parse::<u64>()) {
        (Ok(left), Ok(right)) => left.cmp(&right),
        (Ok(_), Err(_)) => Ordering::Less,
        (Err(_), Ok(_)) => Ordering::Greater,
        (Err(_), Err(_)) => left.cmp(right),
    }
}

/// Sort named rows by `keys` (checked by [`sort_keys`]); rows equal on every key keep the
/// daemon's order (by kind, then ID). An unset quota sorts as 0, as zfs sorts it.
pub fn sort_owners(rows: &mut [(String, OwnerSpaceRow)], keys: &[(String, bool)]) {
    let compare = |left: &(String, OwnerSpaceRow), right: &(String, OwnerSpaceRow), field: &str| {
        let ((left_name, left), (right_name, right)) = (left, right);
        match field {
            "type" => left.type_name().cmp(right.type_name()),
            "name" => compare_names(left_name, right_name),
            "used" => left.used.cmp(&right.used),
            "quota" => left.quota.unwrap_or(0).cmp(&right.quota.unwrap_or(0)),
            "objused" => left.objused.cmp(&right.objused),
            "objquota" => left.objquota.unwrap_or(0).cmp(&right.objquota.unwrap_or(0)),
            other => unreachable!("sort field {other} was checked"),
        }
    };
    rows.sort_by(|left, right| {
        keys.iter()
            .map(|(field, descending)| {
                let order = compare(left, right, field);
                if *descending {
                    order.reverse()
                } else {
                    order
                }
            })
            .find(|order| order.is_ne())
            .unwrap_or(Ordering::Equal)
    });
}

/// `tarn userspace|groupspace|projectspace` (`verb` the kind the verb is named for).
pub fn space(socket: &Path, verb: OwnerKind, mut args: SpaceArgs) -> Result<Status, Failure> {
    let name = args.name.clone();
    check_name(&name)?;
    if name.contains('#') {
        return Err(Failure(format!(
            "cannot list the owners of bookmark {name}: name a file system or a snapshot"
        )));
    }
    args.kinds = owner_kinds(verb, args.types.as_deref())?;
    let format = args.format.format();
    selected_fields(&USERSPACE_COLUMNS, &format)?;
    let keys = sort_keys(&args.sort.keys)?;
    let mut names = OwnerNames::new(args.numeric);
    let request = Request::Dataset(DatasetRequest::Userspace(args));
    let mut response = ask(socket, Some(&name), &request)?;
    if response.status != 0 {
        return Ok(forward(response));
    }
    let rows: Vec<OwnerSpaceRow> = serde_json::from_value(response.data["owners"].take())
        .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?;
    let mut rows: Vec<(String, OwnerSpaceRow)> = rows
        .into_iter()
        .map(|row| (names.name(&row), row))
        .collect();
    sort_owners(&mut rows, &keys);
    let cells: Vec<_> = rows.iter().map(|(name, row)| row.cells(name)).collect();
    let command = format!("tarn {}space", verb.word());
    print_table(&USERSPACE_COLUMNS, &cells, &format, &command, "owners")?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, id: u32, used: u64, quota: Option<u64>) -> OwnerSpaceRow {
        OwnerSpaceRow {
            kind: kind.into(),
            id,
            used,
            quota,
            objused: 1,
            objquota: None,
        }
    }

    fn sorted(keys: &[(&str, bool)]) -> Vec<String> {
        let mut rows = vec![
            ("zoe".to_string(), row("user", 1002, 300, None)),
            ("4000000".to_string(), row("user", 4_000_000, 100, Some(5))),
            ("staff".to_string(), row("group", 50, 200, None)),
            ("adam".to_string(), row("user", 1001, 200, Some(9))),
            ("70".to_string(), row("user", 70, 100, None)),
        ];
        let keys: Vec<(String, bool)> = keys
            .iter()
            .map(|(field, descending)| (field.to_string(), *descending))
            .collect();
        sort_owners(&mut rows, &sort_keys(&keys).unwrap());
        rows.into_iter().map(|(name, _)| name).collect()
    }

    /// zfs's default order is type, then name: POSIX Group before POSIX User, and among
    /// names the owners without one (numbers, by value) before the named ones.
    #[test]
    fn owners_sort_by_type_then_name_by_default() {
        assert_eq!(sorted(&[]), ["staff", "70", "4000000", "adam", "zoe"]);
    }

    /// -s and -S keys apply in the order given, each within the ties of those before;
    /// an unset quota sorts as 0.
    #[test]
    fn sort_keys_apply_in_turn() {
        assert_eq!(
            sorted(&[("used", false)]),
            ["4000000", "70", "staff", "adam", "zoe"]
        );
        assert_eq!(
            sorted(&[("used", true), ("name", true)]),
            ["zoe", "staff", "adam", "4000000", "70"]
        );
        assert_eq!(
            sorted(&[("type", false), ("quota", true)]),
            ["staff", "adam", "4000000", "zoe", "70"]
        );
        assert!(sort_keys(&[("size".into(), false)]).is_err());
    }

    #[test]
    fn types_choose_the_kinds_listed() {
        let types = |list: &[&str]| list.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert_eq!(owner_kinds(OwnerKind::User, None).unwrap(), ["user"]);
        assert_eq!(owner_kinds(OwnerKind::Group, None).unwrap(), ["group"]);
        assert_eq!(
            owner_kinds(OwnerKind::User, Some(&types(&["all"]))).unwrap(),
            ["user", "group"]
        );
        assert_eq!(
            owner_kinds(OwnerKind::Group, Some(&types(&["posixgroup", "posixuser"]))).unwrap(),
            ["user", "group"]
        );
        assert!(
            owner_kinds(OwnerKind::User, Some(&types(&["smbuser", "smbgroup"])))
                .unwrap()
                .is_empty()
        );
        assert!(owner_kinds(OwnerKind::User, Some(&types(&["posix"]))).is_err());
        assert_eq!(owner_kinds(OwnerKind::Project, None).unwrap(), ["project"]);
        assert!(owner_kinds(OwnerKind::Project, Some(&types(&["all"]))).is_err());
    }
}
