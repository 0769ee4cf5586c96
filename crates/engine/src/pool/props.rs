//! Pool properties (zpool get/set): figures computed from the space manager and the vdev tree,
//! identity, and feature states. The daemon adds the ones it owns (altroot, cachefile).
//!
//! Values are exact (bytes, percents); formatting is the caller's. Settable here:
//! `feature@NAME=enabled` (a feature disabled at create is enabled; features are never
//! disabled again) and `failmode` (`failmode.rs`). `readonly`, `altroot` and `guid` are fixed for an import.

use super::{Pool, PoolError};

/// A property's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolValue {
    Bytes(u64),
    /// A percentage, or none (`-`) when it has no meaning (an empty pool's fragmentation).
    Percent(Option<u64>),
    Number(u64),
    Text(String),
}

/// One property of a pool, as `pool get` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolProperty {
    pub name: String,
    pub value: PoolValue,
    /// `default`, `local` or `-` (a read-only figure).
    pub source: &'static str,
}

/// The pool's space in one snapshot (also `pool list`'s row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolSpace {
    pub size: u64,
    pub allocated: u64,
    pub free: u64,
    /// Bytes still to be freed by background destroys.
    pub freeing: u64,
    /// Free-space fragmentation, weighted by each vdev's free space (none when nothing is free).
    pub fragmentation: Option<u64>,
    /// Allocated over size, percent.
    pub capacity: u64,
}

/// Names `pool get all` lists, in order (features follow).
pub const POOL_PROPERTIES: &[&str] = &[
    "size",
    "capacity",
    "health",
    "guid",
    "allocated",
    "free",
    "freeing",
    "leaked",
    "fragmentation",
    "readonly",
];

impl Pool {
    /// Size, allocation, free space, freeing, fragmentation and capacity, from the space manager.
    pub fn space(&self) -> Result<PoolSpace, PoolError> {
        // The pool's space is its normal class's: log vdevs hold only intent-log blocks
        // (zpool leaves them out of SIZE and FREE too).
        let mut stats = self.core.io.space.stats();
        stats.retain(|vdev| vdev.class == crate::space::AllocClass::Normal);
        let size: u64 = stats.iter().map(|vdev| vdev.size).sum();
        let allocated: u64 = stats.iter().map(|vdev| vdev.allocated_bytes).sum();
        let free_weight: u128 = stats.iter().map(|vdev| vdev.free_bytes as u128).sum();
        let weighted: u128 = stats
            .iter()
            .filter_map(|vdev| {
                vdev.fragmentation_percent
                    .map(|percent| percent as u128 * vdev.free_bytes as u128)
            })
            .sum();
        Ok(PoolSpace {
            size,
            allocated,
            free: size.saturating_sub(allocated),
            freeing: self.core.freeing_bytes()?,
            fragmentation: (free_weight > 0).then(|| (weighted / free_weight) as u64),
            capacity: (allocated * 100).checked_div(size).unwrap_or(0),
        })
    }

    /// Every property `pool get all` shows, features last.
    pub fn pool_properties(&self) -> Result<Vec<PoolProperty>, PoolError> {
        let space = self.space()?;
        let fixed = |name: &str, value| PoolProperty {
            name: name.to_string(),
            value,
            source: "-",
        };
        let mut properties = vec![
            fixed("size", PoolValue::Bytes(space.size)),
            fixed("capacity", PoolValue::Percent(Some(space.capacity))),
            fixed(
                "health",
                PoolValue::Text(self.core.io.vdevs.health().as_str().to_string()),
            ),
            fixed("guid", PoolValue::Number(self.core.guid.0)),
            fixed("allocated", PoolValue::Bytes(space.allocated)),
            fixed("free", PoolValue::Bytes(space.free)),
            fixed("freeing", PoolValue::Bytes(space.freeing)),
            fixed("leaked", PoolValue::Bytes(self.core.leaked_bytes()?)),
            fixed("fragmentation", PoolValue::Percent(space.fragmentation)),
            fixed(
                "readonly",
                PoolValue::Text(if self.core.readonly { "on" } else { "off" }.into()),
            ),
            PoolProperty {
                name: "failmode".into(),
                value: PoolValue::Text(self.core.failmode().as_str().into()),
                source: if self.core.failmode_is_set() {
                    "local"
                } else {
                    "default"
                },
            },
        ];
        // Features last (features.rs): every known one, then those on the pool this build
        // does not know (`unsupported@NAME`).
        for row in self.feature_rows() {
            properties.push(PoolProperty {
                name: row.property,
                value: PoolValue::Text(row.value.into()),
                source: if row.value == "disabled" {
                    "default"
                } else {
                    "local"
                },
            });
        }
        Ok(properties)
    }

    /// The named properties, in the order asked; an unknown name is an error naming the known
    /// ones.
    pub fn pool_properties_named(&self, names: &[String]) -> Result<Vec<PoolProperty>, PoolError> {
        let all = self.pool_properties()?;
        names
            .iter()
            .map(|name| {
                all.iter()
                    .find(|property| &property.name == name)
                    .cloned()
                    .ok_or_else(|| {
                        PoolError::BadProperty(format!(
                            "no pool property {name:?}; pool properties: {}",
                            all.iter()
                                .map(|property| property.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })
            })
            .collect()
    }

    /// Set a pool property (see the module documentation for what can be set). Durable on
    /// return.
    pub fn set_pool_property(&self, name: &str, value: &str) -> Result<(), PoolError> {
        if name == "failmode" {
            self.core.set_failmode(value)?;
            self.sync()?;
            return Ok(());
        }
        if let Some(short) = name.strip_prefix("feature@") {
            if super::features::feature_by_short_name(short).is_some() && value != "enabled" {
                // `active` is a state the pool reaches by using the feature, and `disabled`
                // cannot be returned to.
                return Err(PoolError::BadProperty(format!(
                    "feature@{short} can only be set to 'enabled' (a feature becomes active when the pool uses it, and is never disabled once enabled)"
                )));
            }
            return self.enable_feature(short);
        }
        let known = POOL_PROPERTIES.contains(&name);
        Err(PoolError::BadProperty(if known {
            format!("pool property {name:?} is read-only")
        } else {
            format!(
                "no pool property {name:?}; settable: failmode=wait|continue|panic, feature@NAME=enabled (read-only: {})",
                POOL_PROPERTIES.join(", ")
            )
        }))
    }
}
