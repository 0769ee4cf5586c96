//! A dataset's user, group and project quotas (OpenZFS's userquota@, groupquota@,
//! projectquota@ and the object-count forms userobjquota@, groupobjquota@,
//! projectobjquota@): their property names, and their values kept at hand for write
//! admission, which must not read the MOS.
//!
//! Each quota is stored as a local entry of the dataset's properties object, named as zfs
//! names it with the owner's numeric ID (`userquota@1000` = bytes, decimal); names of users
//! and groups are turned into IDs by the command line, as libzfs does. The usage they limit
//! is the file system's usage by owner (`object/accounting.rs`); enforcement is
//! `pool/owner_quotas.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

use crate::object::accounting::OwnerKey;
use crate::object::owners::OwnerKind;
use crate::types::FastHashMap;

/// What an owner quota or usage property counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OwnerMeasure {
    Bytes,
    Objects,
}

/// Whether an owner property is a quota (settable) or a usage figure (read only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OwnerField {
    Quota,
    Used,
}

/// An owner property: `{user,group,project}[obj]{quota,used}@ID`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnerProperty {
    pub kind: OwnerKind,
    pub measure: OwnerMeasure,
    pub field: OwnerField,
    pub id: u32,
}

impl OwnerProperty {
    /// Parse a property name; None if it is no owner property. An ID must be a decimal
    /// number below 2^32 - 1 (-1 is no one).
    pub fn parse(name: &str) -> Option<OwnerProperty> {
        let (prefix, id) = name.split_once('@')?;
        let (kind, rest) = OwnerKind::ALL
            .into_iter()
            .find_map(|kind| prefix.strip_prefix(kind.word()).map(|rest| (kind, rest)))?;
        let (measure, field) = match rest {
            "quota" => (OwnerMeasure::Bytes, OwnerField::Quota),
            "objquota" => (OwnerMeasure::Objects, OwnerField::Quota),
            "used" => (OwnerMeasure::Bytes, OwnerField::Used),
            "objused" => (OwnerMeasure::Objects, OwnerField::Used),
            _ => return None,
        };
        let id = id
            .parse::<u32>()
            .ok()
            .filter(|parsed| *parsed != u32::MAX && parsed.to_string() == id)?;
        Some(OwnerProperty {
            kind,
            measure,
            field,
            id,
        })
    }

    /// The property's name.
    pub fn name(&self) -> String {
        let measure = match self.measure {
            OwnerMeasure::Bytes => "",
            OwnerMeasure::Objects => "obj",
        };
        let field = match self.field {
            OwnerField::Quota => "quota",
            OwnerField::Used => "used",
        };
        format!("{}{measure}{field}@{}", self.kind.word(), self.id)
    }

    /// Whether `name` looks like an owner property (a word of one, then `@`), so that a
    /// malformed ID gets its own message.
    /// [`OwnerProperty::parse`], refusing what is not an owner property with a message that
    /// says what is.
    pub fn parse_named(name: &str) -> Result<OwnerProperty, String> {
        OwnerProperty::parse(name).ok_or_else(|| {
            format!(
                "bad owner property {name:?}: {{user,group,project}}[obj]{{quota,used}}@ID, the \
                 ID a number below 4294967295"
            )
        })
    }

    /// An owner quota setting (`userquota@1000`, `10G`; `None`, `none` or 0: no quota),
    /// checked: the property and its limit.
    pub fn parse_quota_setting(
        name: &str,
        value: Option<&str>,
    ) -> Result<(OwnerProperty, Option<u64>), String> {
        let property = OwnerProperty::parse_named(name)?;
        if property.field != OwnerField::Quota {
            return Err(format!("{name} is a read-only property"));
        }
        let limit = match value.map(str::trim) {
            None | Some("none") => None,
            Some(text) => match crate::dataset::props::parse_size(text) {
                Some(0) => None,
                Some(limit) => Some(limit),
                None => {
                    return Err(format!(
                        "bad value {text:?} for {name}: a size such as 10G, or none"
                    ))
                }
            },
        };
        Ok((property, limit))
    }

    pub fn is_owner_property_name(name: &str) -> bool {
        let Some((prefix, _)) = name.split_once('@') else {
            return false;
        };
        OwnerKind::ALL.into_iter().any(|kind| {
            prefix
                .strip_prefix(kind.word())
                .is_some_and(|rest| ["quota", "objquota", "used", "objused"].contains(&rest))
        })
    }
}

/// The quotas of one dataset, by owner and measure (module documentation).
#[derive(Default)]
pub struct OwnerQuotas {
    /// Whether any is set: the write path's only look when none is.
    any: AtomicBool,
    limits: RwLock<FastHashMap<(OwnerKey, OwnerMeasure), u64>>,
}

impl OwnerQuotas {
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// Replace every quota (after a load from the properties object).
    pub fn set_all(&self, limits: HashMap<(OwnerKey, OwnerMeasure), u64>) {
        let mut held = self.limits.write();
        *held = limits.into_iter().collect();
        self.any.store(!held.is_empty(), Ordering::Relaxed);
    }

    /// The quota of `key` on `measure`, if set.
    pub fn limit(&self, key: OwnerKey, measure: OwnerMeasure) -> Option<u64> {
        if !self.any() {
            return None;
        }
        self.limits.read().get(&(key, measure)).copied()
    }

    /// The quotas on `measure` of the three owners, user, group and project, taken under
    /// one look (the write path's).
    pub fn limits_of(
        &self,
        owners: crate::object::owners::Owners,
        measure: OwnerMeasure,
    ) -> [Option<u64>; 3] {
        if !self.any() {
            return [None; 3];
        }
        let limits = self.limits.read();
        OwnerKind::ALL.map(|kind| limits.get(&((kind, owners.id(kind)), measure)).copied())
    }

    /// Every quota set, for listings.
    pub fn all(&self) -> HashMap<(OwnerKey, OwnerMeasure), u64> {
        self.limits
            .read()
            .iter()
            .map(|(&key, &limit)| (key, limit))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        for name in [
            "userquota@1000",
            "groupobjquota@0",
            "projectquota@42",
            "userused@7",
            "projectobjused@4294967294",
        ] {
            let parsed = OwnerProperty::parse(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(parsed.name(), name);
        }
        let parsed = OwnerProperty::parse("groupobjquota@5").unwrap();
        assert_eq!(
            (parsed.kind, parsed.measure, parsed.field, parsed.id),
            (
                OwnerKind::Group,
                OwnerMeasure::Objects,
                OwnerField::Quota,
                5
            )
        );
        for name in [
            "userquota",
            "userquota@",
            "userquota@alice",
            "userquota@-1",
            "userquota@4294967295",
            "userquota@01",
            "quota@1",
            "usrquota@1",
            "userquotas@1",
        ] {
            assert!(OwnerProperty::parse(name).is_none(), "{name}");
        }
        assert!(OwnerProperty::is_owner_property_name("userquota@alice"));
        assert!(!OwnerProperty::is_owner_property_name("quota"));
    }
}
