//! Delegated permissions as the pool keeps them (OpenZFS dsl_deleg.c): reading a dataset's
//! grants and its ancestors', what a user may do on a dataset, and granting and revoking.
//!
//! The grants are entries of each dataset directory's properties object
//! (`dataset::delegation`, "On disk"), so they go with the dataset: renamed with it, destroyed
//! with it, and not sent (as zfs send does not carry them). Granting and revoking happen under
//! the namespace lock, in one txg, durable on return. The first grant activates feature
//! `delegation` (compatible: a build without it never asks for these keys; its `check` would
//! report them as invalid stored properties).
//!
//! Who may grant is not decided here: the daemon lets root alone.

use std::collections::BTreeSet;

use crate::dataset::delegation::{
    decode_grant, effective_permissions, encode_permissions, grant_key, validate_permission, Grant,
    GrantScope, Grantee, Identity,
};
use crate::object::adapters::{kv_entries, KvObject};
use crate::object::kv;

use super::datasets::{kv_error, parent_of};
use super::{Pool, PoolCore, PoolError, DELEGATION_FEATURE};

/// A change to the grants of one dataset: each grantee, in each scope, gains (`grant`) or
/// loses the permissions named; losing none named loses all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantChange {
    pub grantees: Vec<Grantee>,
    pub scopes: Vec<GrantScope>,
    pub permissions: Vec<String>,
    pub grant: bool,
}

impl PoolCore {
    /// The grants stored on dataset `relative`, in key order.
    fn grants_at(&self, relative: &str) -> Result<Vec<Grant>, PoolError> {
        let dataset = self.dataset_by_relative(relative)?;
        let mut grants = Vec::new();
        for entry in kv_entries(&self.mos, dataset.dir().properties_object)? {
            let key = String::from_utf8_lossy(&entry.key);
            if let Some(decoded) = decode_grant(&key, &entry.value) {
                grants.push(decoded.map_err(|why| {
                    PoolError::Corrupt(format!("dataset {}: {why}", dataset.name()))
                })?);
            }
        }
        Ok(grants)
    }
}

impl Pool {
    /// The grants on file system `full_name` and on each of its ancestors that has some, the
    /// file system first (as `zfs allow FS` lists them).
    pub fn grants(&self, full_name: &str) -> Result<Vec<(String, Vec<Grant>)>, PoolError> {
        let core = &self.core;
        let mut at = core.relative_name(full_name)?.to_string();
        let mut found = Vec::new();
        loop {
            let grants = core.grants_at(&at)?;
            if !grants.is_empty() {
                found.push((core.full_name(&at), grants));
            }
            if at.is_empty() {
                return Ok(found);
            }
            at = parent_of(&at).to_string();
        }
    }

    /// What `identity` may do on file system `full_name` by the grants on it and above it.
    pub fn delegated_permissions(
        &self,
        full_name: &str,
        identity: &Identity,
    ) -> Result<BTreeSet<String>, PoolError> {
        let levels: Vec<(bool, Vec<Grant>)> = self
            .grants(full_name)?
            .into_iter()
            .map(|(name, grants)| (name == full_name, grants))
            .collect();
        Ok(effective_permissions(
            levels
                .iter()
                .map(|(is_target, grants)| (*is_target, grants.as_slice())),
            identity,
        ))
    }

    /// Grant or revoke permissions on file system `full_name` (`zfs allow`, `zfs unallow`).
    /// Durable on return.
    pub fn change_grants(&self, full_name: &str, change: &GrantChange) -> Result<(), PoolError> {
        self.writable()?;
        for permission in &change.permissions {
            validate_permission(permission).map_err(PoolError::BadProperty)?;
        }
        if change.grant && change.permissions.is_empty() {
            return Err(PoolError::BadProperty(
                "no permission named: give PERM[,PERM]...".into(),
            ));
        }
        let core = &self.core;
        let relative = core.relative_name(full_name)?.to_string();
        {
            let _namespace = core.namespace.lock();
            let dataset = core.dataset_by_relative(&relative)?;
            if change.grant {
                core.require_feature(
                    DELEGATION_FEATURE,
                    &format!("cannot grant permissions on '{full_name}'"),
                    PoolError::BadProperty,
                )?;
            }
            let stored = core.grants_at(&relative)?;
            core.check_space(
                super::admission::SpaceCheck::Reserved,
                1,
                &format!("change the permissions on {full_name}"),
            )?;
            let hold = core.txgs.assign()?;
            let object = dataset.dir().properties_object;
            let mut handle = KvObject::new(&core.mos, object, Some(hold.tx()))?;
            for &grantee in &change.grantees {
                for &scope in &change.scopes {
                    let mut permissions: BTreeSet<String> = stored
                        .iter()
                        .find(|grant| grant.grantee == grantee && grant.scope == scope)
                        .map(|grant| grant.permissions.clone())
                        .unwrap_or_default();
                    if change.grant {
                        permissions.extend(change.permissions.iter().cloned());
                    } else if change.permissions.is_empty() {
                        permissions.clear();
                    } else {
                        for permission in &change.permissions {
                            permissions.remove(permission);
                        }
                    }
                    let key = grant_key(grantee, scope);
                    if permissions.is_empty() {
                        kv::remove(&mut handle, key.as_bytes()).map_err(kv_error(object))?;
                    } else {
                        let value = encode_permissions(&permissions);
                        if value.len() > kv::VALUE_LEN_MAX {
                            return Err(PoolError::BadProperty(format!(
                                "too many permissions for one grantee on {full_name} (at most {} bytes)",
                                kv::VALUE_LEN_MAX
                            )));
                        }
                        kv::upsert(&mut handle, key.as_bytes(), value.as_bytes())
                            .map_err(kv_error(object))?;
                    }
                }
            }
            if change.grant {
                core.feature_activate(DELEGATION_FEATURE);
            }
        }
        self.sync()?;
        Ok(())
    }
}
