//! User and group names on the command line (libzfs's userquota_propname_decode and the name
//! lookups of zfs userspace). The engine and the wire know owners by numeric ID only; names are
//! this process's to resolve, as libzfs resolves them in the zfs command rather than in the
//! kernel.
//!
//! A user is looked up in the passwd database and a group in the group database (getpwnam_r
//! and getgrnam_r, so through NSS: files, LDAP, whatever the system is configured with); a name
//! not found there that is a decimal number is taken as the ID, and anything else is an error
//! naming the database. A project ID is always a number. Printing goes the other way: an ID is
//! shown as the name the database gives it, or as the number when it has none (an owner of
//! files from another system), or always as the number with `-n`.

use std::collections::HashMap;

use nix::unistd::{Gid, Group, Uid, User};
use tarn::{OwnerKind, OwnerProperty};
use tarn_protocol::error::Failure;
use tarn_protocol::rows::OwnerSpaceRow;

/// An owner property name with its user or group name turned into the numeric ID the engine
/// takes (`userquota@alice` -> `userquota@1000`); any other property name comes back as it is.
pub fn numeric_property(property: &str) -> Result<String, Failure> {
    if !OwnerProperty::is_owner_property_name(property) {
        return Ok(property.to_string());
    }
    let (prefix, who) = property
        .split_once('@')
        .expect("an owner property has an @");
    let kind = OwnerKind::ALL
        .into_iter()
        .find(|kind| prefix.starts_with(kind.word()))
        .expect("an owner property starts with its kind");
    let id = owner_id(kind, who).map_err(|why| Failure(format!("{property}: {why}")))?;
    Ok(format!("{prefix}@{id}"))
}

/// The numeric ID `who` names as an owner of kind `kind` (module documentation).
pub fn owner_id(kind: OwnerKind, who: &str) -> Result<u32, String> {
    let number = who
        .parse::<u32>()
        .ok()
        .filter(|id| *id != u32::MAX && who.bytes().all(|byte| byte.is_ascii_digit()));
    let (found, database) = match kind {
        OwnerKind::Project => {
            return number.ok_or_else(|| {
                format!("invalid project ID '{who}': a project is a number below 4294967295")
            })
        }
        OwnerKind::User => (
            User::from_name(who).map(|user| user.map(|user| user.uid.as_raw())),
            "passwd",
        ),
        OwnerKind::Group => (
            Group::from_name(who).map(|group| group.map(|group| group.gid.as_raw())),
            "group",
        ),
    };
    let word = kind.word();
    match (found, number) {
        (Ok(Some(id)), _) => Ok(id),
        (_, Some(id)) => Ok(id),
        (Ok(None), None) => Err(format!(
            "no such {word} '{who}' (not in the {database} database): name a {word} or give a numeric ID"
        )),
        (Err(error), None) => Err(format!(
            "cannot look up {word} '{who}' in the {database} database: {error}"
        )),
    }
}

/// How owners are shown: by name where the passwd or group database has one, else (and with
/// `-n`) by number; each ID looked up once per listing.
pub struct OwnerNames {
    numeric: bool,
    known: HashMap<(String, u32), String>,
}

impl OwnerNames {
    /// Names for one listing; `numeric` (`-n`) shows every owner by number.
    pub fn new(numeric: bool) -> OwnerNames {
        OwnerNames {
            numeric,
            known: HashMap::new(),
        }
    }

    /// How the owner of `row` is shown.
    pub fn name(&mut self, row: &OwnerSpaceRow) -> String {
        if self.numeric {
            return row.id.to_string();
        }
        let key = (row.kind.clone(), row.id);
        self.known
            .entry(key)
            .or_insert_with(|| {
                let name = match row.kind.as_str() {
                    "user" => User::from_uid(Uid::from_raw(row.id))
                        .ok()
                        .flatten()
                        .map(|user| user.name),
                    "group" => Group::from_gid(Gid::from_raw(row.id))
                        .ok()
                        .flatten()
                        .map(|group| group.name),
                    _ => None,
                };
                name.unwrap_or_else(|| row.id.to_string())
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names become IDs (root is uid and gid 0 everywhere); numbers stay numbers, written
    /// canonically; other properties pass unchanged; an unknown name is an error naming it.
    #[test]
    fn owner_property_names_resolve_to_ids() {
        assert_eq!(numeric_property("userquota@root").unwrap(), "userquota@0");
        assert_eq!(numeric_property("groupused@root").unwrap(), "groupused@0");
        assert_eq!(
            numeric_property("userobjquota@01000").unwrap(),
            "userobjquota@1000"
        );
        assert_eq!(
            numeric_property("projectquota@42").unwrap(),
            "projectquota@42"
        );
        assert_eq!(numeric_property("compression").unwrap(), "compression");
        assert_eq!(numeric_property("quota").unwrap(), "quota");
        let error = numeric_property("userquota@no-such-user-here").unwrap_err();
        assert!(
            error.0.contains("no such user 'no-such-user-here'"),
            "{}",
            error.0
        );
        let error = numeric_property("groupquota@no-such-group-here").unwrap_err();
        assert!(error.0.contains("no such group"), "{}", error.0);
        assert!(numeric_property("projectquota@web").is_err());
        assert!(numeric_property("userquota@4294967295").is_err());
    }
}
