//! Delegated administration (OpenZFS's `zfs allow`, dsl_deleg.c): which users other than root
//! may change a dataset, and how a grant is stored.
//!
//! # Grants
//! A grant gives permissions (the names of verbs, `create`, `snapshot`, ..., of settable
//! properties, `compression`, `quota`, ..., and `userprop`, `userquota`, ...: [`validate_permission`])
//! to a grantee (a user by uid, a group by gid, or everyone) on a dataset, for the dataset
//! itself ([`GrantScope::Local`]) or for every dataset below it ([`GrantScope::Descendent`]).
//! Whoever asks has the permissions granted to them, to any of their groups or to everyone,
//! locally on the dataset or as descendent grants on any ancestor ([`effective_permissions`]).
//!
//! # On disk
//! Each grant is one entry of the dataset directory's properties object (the object that holds
//! its local property settings), keyed as OpenZFS keys its delegation object: the grantee's
//! type (`u` user, `g` group, `e` everyone), the scope (`l` local, `d` descendent), `$`, then
//! the numeric ID (none for everyone): `ul$1000`, `gd$100`, `el$`. The value is the
//! permissions, sorted, separated by commas (`create,mount,snapshot`). No property name
//! contains `$`, so the keys cannot meet a property's ([`is_grant_key`]).

use std::collections::BTreeSet;

use super::props::Property;

/// Who a grant is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Grantee {
    User(u32),
    Group(u32),
    Everyone,
}

/// Where a grant applies: on its dataset, or on every dataset below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GrantScope {
    Local,
    Descendent,
}

/// One stored grant: a grantee's permissions on a dataset, in one scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub grantee: Grantee,
    pub scope: GrantScope,
    pub permissions: BTreeSet<String>,
}

/// Who asks: a uid and every group it is in (primary and supplementary).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gids: Vec<u32>,
}

/// The permissions that name verbs (and the quota families), as zfs allow names them. `allow`
/// itself is not among them: only root grants in this version.
pub const VERB_PERMISSIONS: [&str; 21] = [
    "bookmark",
    "clone",
    "create",
    "destroy",
    "diff",
    "groupobjquota",
    "groupquota",
    "hold",
    "mount",
    "projectobjquota",
    "projectquota",
    "promote",
    "receive",
    "release",
    "rename",
    "rollback",
    "send",
    "snapshot",
    "userobjquota",
    "userprop",
    "userquota",
];

/// A permission one can grant: a verb's ([`VERB_PERMISSIONS`]) or a settable property's name
/// (which `set` and `inherit` of that property need).
pub fn validate_permission(name: &str) -> Result<(), String> {
    if VERB_PERMISSIONS.contains(&name) || Property::from_name(name).is_some() {
        return Ok(());
    }
    if name == "allow" {
        return Err(
            "permission 'allow' cannot be delegated: only root grants permissions in this version"
                .into(),
        );
    }
    Err(format!(
        "unknown permission {name:?}: expected a verb's ({}) or a settable property's name",
        VERB_PERMISSIONS.join(", ")
    ))
}

impl Grantee {
    /// Whether `identity` is this grantee (itself, one of its groups, or anyone).
    pub fn covers(self, identity: &Identity) -> bool {
        match self {
            Grantee::User(uid) => identity.uid == uid,
            Grantee::Group(gid) => identity.gids.contains(&gid),
            Grantee::Everyone => true,
        }
    }

    /// The word zfs allow prints for the grantee's kind.
    pub fn kind_word(self) -> &'static str {
        match self {
            Grantee::User(_) => "user",
            Grantee::Group(_) => "group",
            Grantee::Everyone => "everyone",
        }
    }

    /// The grantee's numeric ID (none for everyone).
    pub fn id(self) -> Option<u32> {
        match self {
            Grantee::User(id) | Grantee::Group(id) => Some(id),
            Grantee::Everyone => None,
        }
    }
}

impl GrantScope {
    pub const BOTH: [GrantScope; 2] = [GrantScope::Local, GrantScope::Descendent];

    pub fn word(self) -> &'static str {
        match self {
            GrantScope::Local => "local",
            GrantScope::Descendent => "descendent",
        }
    }
}

/// The properties-object key of a grantee's grant in a scope (module documentation).
pub fn grant_key(grantee: Grantee, scope: GrantScope) -> String {
    let kind = match grantee {
        Grantee::User(_) => 'u',
        Grantee::Group(_) => 'g',
        Grantee::Everyone => 'e',
    };
    let scope = match scope {
        GrantScope::Local => 'l',
        GrantScope::Descendent => 'd',
    };
    let id = grantee.id().map(|id| id.to_string()).unwrap_or_default();
    format!("{kind}{scope}${id}")
}

/// Whether a properties-object key is a grant's (well formed or not: `check` reports one that
/// does not decode).
pub fn is_grant_key(key: &str) -> bool {
    key.as_bytes().get(2) == Some(&b'$')
}

/// The grantee and scope of a grant key, if it is one.
pub fn decode_grant_key(key: &str) -> Option<(Grantee, GrantScope)> {
    let bytes = key.as_bytes();
    if bytes.len() < 3 || bytes[2] != b'$' {
        return None;
    }
    let scope = match bytes[1] {
        b'l' => GrantScope::Local,
        b'd' => GrantScope::Descendent,
        _ => return None,
    };
    let id = &key[3..];
    let number = || -> Option<u32> {
        (!id.is_empty() && id.bytes().all(|byte| byte.is_ascii_digit()))
            .then(|| id.parse().ok())
            .flatten()
    };
    let grantee = match bytes[0] {
        b'u' => Grantee::User(number()?),
        b'g' => Grantee::Group(number()?),
        b'e' if id.is_empty() => Grantee::Everyone,
        _ => return None,
    };
    Some((grantee, scope))
}

/// The stored value of a set of permissions.
pub fn encode_permissions(permissions: &BTreeSet<String>) -> String {
    permissions.iter().cloned().collect::<Vec<_>>().join(",")
}

/// The permissions of a stored value, each validated (it comes from disk).
pub fn decode_permissions(value: &str) -> Result<BTreeSet<String>, String> {
    let permissions: BTreeSet<String> = value.split(',').map(str::to_string).collect();
    for permission in &permissions {
        validate_permission(permission)?;
    }
    Ok(permissions)
}

/// A stored grant, decoded: None for a key that is not a grant's, an error for a grant key or
/// value that is not valid.
pub fn decode_grant(key: &str, value: &[u8]) -> Option<Result<Grant, String>> {
    if !is_grant_key(key) {
        return None;
    }
    Some((|| {
        let (grantee, scope) =
            decode_grant_key(key).ok_or_else(|| format!("invalid grant key {key:?}"))?;
        let value = std::str::from_utf8(value)
            .map_err(|_| format!("grant {key:?}: permissions are not text"))?;
        let permissions =
            decode_permissions(value).map_err(|why| format!("grant {key:?}: {why}"))?;
        Ok(Grant {
            grantee,
            scope,
            permissions,
        })
    })())
}

/// What `identity` may do on a dataset, given the grants stored on it and on each ancestor:
/// `levels` yields (whether the level is the dataset itself, its grants). Local grants count
/// on the dataset itself, descendent grants on its ancestors.
pub fn effective_permissions<'a>(
    levels: impl IntoIterator<Item = (bool, &'a [Grant])>,
    identity: &Identity,
) -> BTreeSet<String> {
    let mut permitted = BTreeSet::new();
    for (is_target, grants) in levels {
        let wanted = if is_target {
            GrantScope::Local
        } else {
            GrantScope::Descendent
        };
        for grant in grants {
            if grant.scope == wanted && grant.grantee.covers(identity) {
                permitted.extend(grant.permissions.iter().cloned());
            }
        }
    }
    permitted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(grantee: Grantee, scope: GrantScope, permissions: &[&str]) -> Grant {
        Grant {
            grantee,
            scope,
            permissions: permissions.iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn keys_encode_as_openzfs_and_decode_back() {
        for (grantee, scope, key) in [
            (Grantee::User(1000), GrantScope::Local, "ul$1000"),
            (Grantee::Group(100), GrantScope::Descendent, "gd$100"),
            (Grantee::Everyone, GrantScope::Local, "el$"),
        ] {
            assert_eq!(grant_key(grantee, scope), key);
            assert!(is_grant_key(key));
            assert_eq!(decode_grant_key(key), Some((grantee, scope)));
        }
        for bad in [
            "ux$1",
            "u$1",
            "ul$",
            "el$1",
            "xl$1",
            "ul$-1",
            "ul$99999999999",
        ] {
            assert_eq!(decode_grant_key(bad), None, "{bad}");
        }
        for property in ["compression", "userquota@1000", "com.example:x", "quota"] {
            assert!(!is_grant_key(property), "{property}");
        }
    }

    #[test]
    fn permissions_are_verbs_and_settable_properties() {
        for good in [
            "create",
            "snapshot",
            "compression",
            "quota",
            "userprop",
            "userobjquota",
        ] {
            validate_permission(good).unwrap();
        }
        assert!(validate_permission("allow").unwrap_err().contains("root"));
        assert!(validate_permission("used").is_err());
        assert!(validate_permission("frobnicate")
            .unwrap_err()
            .contains("unknown permission"));
        let decoded = decode_permissions("snapshot,create,mount").unwrap();
        assert_eq!(encode_permissions(&decoded), "create,mount,snapshot");
        assert!(decode_permissions("create,nonsense").is_err());
        assert!(decode_grant("compression", b"lz4").is_none());
        assert!(decode_grant("ul$1", b"create").unwrap().is_ok());
        assert!(decode_grant("ul$1", b"create,bogus").unwrap().is_err());
    }

    /// Local grants count on the dataset only, descendent grants below it only; a user has
    /// their own, their groups' and everyone's.
    #[test]
    fn grants_match_by_who_and_scope() {
        let alice = Identity {
            uid: 1000,
            gids: vec![1000, 50],
        };
        let bob = Identity {
            uid: 1001,
            gids: vec![1001],
        };
        let on_target = [
            grant(Grantee::User(1000), GrantScope::Local, &["snapshot"]),
            grant(Grantee::User(1000), GrantScope::Descendent, &["destroy"]),
            grant(Grantee::Group(50), GrantScope::Local, &["mount"]),
        ];
        let on_parent = [
            grant(Grantee::User(1000), GrantScope::Local, &["rollback"]),
            grant(Grantee::Everyone, GrantScope::Descendent, &["send"]),
            grant(Grantee::Group(51), GrantScope::Descendent, &["clone"]),
        ];
        let levels = || [(true, &on_target[..]), (false, &on_parent[..])];
        let names = |set: BTreeSet<String>| set.into_iter().collect::<Vec<_>>();
        assert_eq!(
            names(effective_permissions(levels(), &alice)),
            ["mount", "send", "snapshot"]
        );
        assert_eq!(names(effective_permissions(levels(), &bob)), ["send"]);
        assert!(effective_permissions([], &alice).is_empty());
    }
}
