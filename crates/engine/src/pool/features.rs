//! Pool features (OpenZFS zfeature.c, zfeature_common.c and zpool-features(7)): every change
//! of the on-disk format is behind a named feature, so that a build can tell from the config
//! alone whether it may open a pool, and whether for writing.
//!
//! # States
//! A feature is *disabled* (absent from the config: the pool never uses the format change, a
//! build without the feature sees nothing it does not know), *enabled* (present with refcount
//! 0: the pool may start using it at any time, but no on-disk structure needs it yet) or
//! *active* (refcount > 0: some on-disk structure needs it). Enabling is permanent: there is no
//! way back to disabled, as in OpenZFS. Enabling happens at create (every known feature unless
//! `-o feature@NAME=disabled`), with `pool set feature@NAME=enabled`, or with `pool upgrade`
//! (every known feature not enabled yet, except those that can only be chosen at create).
//!
//! # Classes
//! Each feature has one class, fixed for ever, which says what a build that does not know the
//! feature may do with a pool on which it is active:
//! - needed to read ([`FeatureClass::NeededToRead`], OpenZFS's features_for_read): nothing;
//!   the import is refused, naming it.
//! - read-only compatible ([`FeatureClass::ReadOnlyCompatible`], OpenZFS's features_for_write,
//!   `ZFEATURE_FLAG_READONLY_COMPAT`): the pool can be read, since the structures the feature
//!   adds are not needed to find any block, but not written, since writing without maintaining
//!   them would break them. The import is refused unless read-only (`-o readonly=on`).
//! - compatible ([`FeatureClass::Compatible`], tarn's own): a build without it may read and
//!   write the pool; the feature's structures are ignored by such a build and nothing it does
//!   breaks them (their blocks stay allocated at worst).
//!
//! An unknown feature that is only enabled never stands in the way of an import.
//!
//! # On disk
//! In the label config (`vdev/label.rs`): `features` maps each enabled feature's full name to
//! its refcount; `features_for_read` and `features_for_write` list the enabled features of the
//! first two classes (a compatible feature is in neither). A build reads the class of a feature
//! it does not know from these lists. Configs written before refcounts and the
//! `features_for_write` list existed lack the list (decoded as `None`) and hold 1 for every
//! enabled feature: they are read as every feature active, and the lists and the counts are
//! rebuilt from the registry and the pool's state at import ([`PoolCore::recount_features`]),
//! then written with the import's first txg.
//!
//! # Refcounts
//! Refcounts change in syncing context only, in the same txg as the structure that needs the
//! feature is created or removed, and the config is marked dirty: the labels written by that
//! txg's commit carry the count that matches its MOS. Each feature's rule ([`Activation`]) is
//! given at its registry entry. A count kept by the pool (livelist) is recounted from the MOS
//! at every import, which makes a rewind to an older txg (whose MOS may differ from the newest
//! labels) and an old config right; a count going below zero is corruption, not clamped.
//!
//! # Import
//! [`check_import`] runs before anything is read beyond the config: it refuses an active
//! unknown feature needed to read (every such name listed), and an active unknown read-only
//! compatible one unless the import is read-only.

use std::collections::BTreeMap;

use super::{ConfigState, Pool, PoolCore, PoolError};
use crate::vdev::label::{LabelConfig, PoolState};

/// What a build that does not know a feature may do with a pool on which it is active.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeatureClass {
    /// Nothing: the pool cannot be read without the feature.
    NeededToRead,
    /// Import read-only: its structures are not needed to read, only to write.
    ReadOnlyCompatible,
    /// Read and write: a build without it ignores its structures harmlessly.
    Compatible,
}

/// When a feature's refcount changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// Active as soon as enabled and for ever (OpenZFS `ZFEATURE_FLAG_ACTIVATE_ON_ENABLE`):
    /// the format change applies to every txg from then on, or its uses cannot be counted.
    OnEnable,
    /// Active from its first use on, for ever (the structure it adds is never removed).
    OnFirstUse,
    /// The number of on-disk structures that need it: incremented when one is created and
    /// decremented when it is removed, back to enabled at zero.
    Counted,
}

/// A pool feature this build knows.
pub struct Feature {
    /// The full name stored in the config (`com.tarn:embedded_data`).
    pub name: &'static str,
    /// The name used with `feature@NAME` (`embedded_data`).
    pub short_name: &'static str,
    pub class: FeatureClass,
    pub activation: Activation,
    /// Only `pool create` can enable it (`pool set` and `pool upgrade` refuse or skip it).
    pub create_only: bool,
}

/// Embedded block pointers (`block/pipeline.rs`): tiny blocks stored inside their pointer.
pub const EMBEDDED_DATA_FEATURE: &str = "com.tarn:embedded_data";

/// The replayed-through sequence in each intent-log header (`object/log_header.rs`): replay
/// records its progress in every txg it syncs, so a replay that a crash cuts short resumes
/// after the records already in the tree (OpenZFS `zh_replay_seq`).
pub const REPLAY_SEQUENCE_FEATURE: &str = "com.tarn:replay_sequence";

/// The scan state's extension (`pool/scan.rs`): the walks owed after snapshots destroyed
/// under a scan, and the leaves unusable during it. A build without the feature reads only
/// the state before it and resumes the scan as it did before the extension existed.
pub const SCAN_CATCH_UP_FEATURE: &str = "com.tarn:scan_catch_up";

/// The stalled-free list and the `leaked` count (`pool/background_free.rs`, "Unreadable gang
/// headers"): two MOS directory keys that a build without the feature ignores (the blocks on
/// the list stay allocated and are never freed by it), so it is not needed to read.
pub const STALLED_FREES_FEATURE: &str = "com.tarn:stalled_frees";

/// The log space map feature (`space/log.rs`): metaslab changes go to one pool-wide log per
/// txg and reach each metaslab's own map when it is flushed.
pub const LOG_SPACEMAP_FEATURE: &str = "com.tarn:log_spacemap";

/// The livelist feature (`dataset/livelist.rs`): clones made while it is enabled keep one.
pub const LIVELIST_FEATURE: &str = "com.tarn:livelist";

/// The deadlist header (`dataset/deadlist.rs`): each deadlist's totals in its key/value
/// object's bonus buffer, so that import reads a snapshot's deadlist header, not its every key.
pub const DEADLIST_TOTALS_FEATURE: &str = "com.tarn:deadlist_totals";

/// Quotas and reservations (`pool/limits.rs`): the four limits as entries of the datasets'
/// properties objects, and directory records whose used bytes count reservations.
pub const SPACE_LIMITS_FEATURE: &str = "com.tarn:space_limits";

/// Usage by owner (`object/accounting.rs`) and project IDs (`fs/phys.rs`): file systems
/// keep how much each user, group and project owns in three objects whose dnodes follow the
/// object-set header's first kilobyte, and znodes carry a project ID and its inherit flag.
pub const USER_ACCOUNTING_FEATURE: &str = "com.tarn:user_accounting";

/// User holds and deferred destroy (`pool/user_holds.rs`): a snapshot's record names a
/// key/value object of hold tags, or carries the defer-destroy flag.
pub const USER_HOLDS_FEATURE: &str = "com.tarn:user_holds";

/// User properties (`pool/dataset_props.rs`): `module:name` keys in the datasets' properties
/// objects.
pub const USER_PROPERTIES_FEATURE: &str = "com.tarn:user_properties";

/// Received property values (`dataset/props.rs`, "Received values"): `NAME$recvd` and
/// `NAME$inherit` keys in the datasets' properties objects.
pub const RECEIVED_PROPERTIES_FEATURE: &str = "com.tarn:received_properties";

/// Delegated permissions (`pool/delegation.rs`): grant keys (`ul$1000`, ...) in the datasets'
/// properties objects.
pub const DELEGATION_FEATURE: &str = "com.tarn:delegation";

/// Every feature this build knows; new pools enable all of them unless told otherwise.
/// RAID-Z top-level vdevs (`vdev/raidz`): blocks in data and parity columns across children.
pub const RAIDZ_FEATURE: &str = "com.tarn:raidz";

/// RAID-Z expansion (`pool/raidz_expand.rs`): a child added to a RAID-Z vdev, whose blocks
/// then have the width of their birth txg and, while the copy runs, places given by the
/// uberblock's reflow word.
pub const RAIDZ_EXPANSION_FEATURE: &str = "com.tarn:raidz_expansion";

pub const FEATURES_KNOWN: &[Feature] = &[
    // Needed to read: an embedded block pointer holds the data itself, which a build without
    // the feature would take for the address of a block. Active once enabled (OpenZFS does
    // the same): any block written from then on may be embedded, and counting them would cost
    // a count per block.
    Feature {
        name: EMBEDDED_DATA_FEATURE,
        short_name: "embedded_data",
        class: FeatureClass::NeededToRead,
        activation: Activation::OnEnable,
        create_only: false,
    },
    // Read-only compatible (as in OpenZFS): a livelist only lists a clone's blocks, which are
    // found through its tree anyway; but a build that wrote to the clone without recording
    // its births and frees there would make a later destroy free the wrong blocks. Counted:
    // one per livelist on disk, a clone's (from the clone's creation until it is destroyed,
    // promoted, rolled back or received into, or until the livelist is dropped for sharing
    // too little) or a destroyed clone's still being freed in the background (until its last
    // sub-list is freed). Back to enabled when the last one goes.
    Feature {
        name: LIVELIST_FEATURE,
        short_name: "livelist",
        class: FeatureClass::ReadOnlyCompatible,
        activation: Activation::Counted,
        create_only: false,
    },
    // Read-only compatible (as in OpenZFS): reading finds blocks through block pointers, never
    // through the space maps; but a build that allocated from the metaslabs' own maps without
    // the log would take space the log says is in use. Active once enabled: the log is written
    // from the pool's first txg on and always holds the unflushed changes. Only chosen at
    // create: a pool without the log has metaslab maps of another block size and no
    // unflushed-txg arrays, and switching would rewrite every map.
    Feature {
        name: LOG_SPACEMAP_FEATURE,
        short_name: "log_spacemap",
        class: FeatureClass::ReadOnlyCompatible,
        activation: Activation::OnEnable,
        create_only: true,
    },
    // Compatible: see the constant. Active from the first stalled or leaked free on (the
    // directory keys, once created, stay).
    Feature {
        name: STALLED_FREES_FEATURE,
        short_name: "stalled_frees",
        class: FeatureClass::Compatible,
        activation: Activation::OnFirstUse,
        create_only: false,
    },
    // Compatible: see the constant. Active from the first scan state written with an
    // extension on (the object keeps it).
    Feature {
        name: SCAN_CATCH_UP_FEATURE,
        short_name: "scan_catch_up",
        class: FeatureClass::Compatible,
        activation: Activation::OnFirstUse,
        create_only: false,
    },
    // Needed to read: a build without it refuses the sequence in a log header as reserved
    // bytes that are not zero, and would replay records a second time. Active once enabled: a
    // sequence is written by the object layer's log-header sync, in any txg of a replay after
    // any crash, where neither the pool's config nor a count of headers is at hand; the header
    // carries one only during a replay, but a crash can leave it there for the next import.
    Feature {
        name: REPLAY_SEQUENCE_FEATURE,
        short_name: "replay_sequence",
        class: FeatureClass::NeededToRead,
        activation: Activation::OnEnable,
        create_only: false,
    },
    // Read-only compatible (OpenZFS's deadlist header needs no feature, having been there from
    // the start): the headers only repeat the lists' totals, so a build without the feature
    // reads the pool; but one that changed a deadlist without its header would leave totals
    // this build then trusts for the space figures. Active once enabled: every deadlist
    // written from then on carries a header (one written before has none and is read whole),
    // and counting them would cost a count per deadlist.
    Feature {
        name: DEADLIST_TOTALS_FEATURE,
        short_name: "deadlist_totals",
        class: FeatureClass::ReadOnlyCompatible,
        activation: Activation::OnEnable,
        create_only: false,
    },
    // Read-only compatible: nothing a reader needs is in the limits; but a build without the
    // feature would write past every quota and into every reservation, and its `check` would
    // take the directories' used bytes (which count reservations) for wrong. Active from the
    // first limit set on (a limit set later to none leaves it active, as OpenZFS leaves its
    // OnFirstUse features).
    Feature {
        name: SPACE_LIMITS_FEATURE,
        short_name: "space_limits",
        class: FeatureClass::ReadOnlyCompatible,
        activation: Activation::OnFirstUse,
        create_only: false,
    },
    // Needed to read (OpenZFS's userobj_accounting and project_quota are read-only
    // compatible because its readers skip the header's extra dnodes and unknown system
    // attributes; a build without this feature refuses a 2.5 KiB object-set header and a
    // znode whose project field is not zero). Active once enabled: every file system's next
    // sync writes the usage objects (counting its objects once if it had none), in the object
    // layer, where no feature count is at hand.
    Feature {
        name: USER_ACCOUNTING_FEATURE,
        short_name: "user_accounting",
        class: FeatureClass::NeededToRead,
        activation: Activation::OnEnable,
        create_only: false,
    },
    // Needed to read (OpenZFS has holds from pool version 18, before features): a build
    // without it refuses a snapshot record whose defer-destroy flag is set, as it refuses every
    // flag it does not know; and one that wrote would destroy held snapshots and leave their
    // holds objects behind. Counted: one per snapshot record with a holds object or the flag,
    // back to enabled when the last hold is released and the last deferred snapshot goes, so a
    // pool without holds stays open to such builds.
    Feature {
        name: USER_HOLDS_FEATURE,
        short_name: "user_holds",
        class: FeatureClass::NeededToRead,
        activation: Activation::Counted,
        create_only: false,
    },
    // Compatible (OpenZFS has user properties from the start): a build without it looks
    // properties up by the names it knows and never meets these keys; only its `check`, which
    // validates every stored key, would report them. Active from the first user property set
    // on (as space_limits: removing the last one leaves it active).
    Feature {
        name: USER_PROPERTIES_FEATURE,
        short_name: "user_properties",
        class: FeatureClass::Compatible,
        activation: Activation::OnFirstUse,
        create_only: false,
    },
    // Compatible (OpenZFS has delegation from pool version 8, before features): a build
    // without it looks properties up by the names it knows and never meets the grant keys;
    // only its `check` would report them, and its daemon would not enforce them (it lets
    // root alone change anything). Active from the first grant on (revoking the last one
    // leaves it active, as user_properties).
    Feature {
        name: DELEGATION_FEATURE,
        short_name: "delegation",
        class: FeatureClass::Compatible,
        activation: Activation::OnFirstUse,
        create_only: false,
    },
    // Compatible (OpenZFS has received values from pool version 22, before features): a build
    // without it looks properties up by the names it knows and never meets these keys, so it
    // shows a received value as unset (the dataset inherits it or takes the default); only its
    // `check` would report the keys. Active from the first received value on.
    Feature {
        name: RECEIVED_PROPERTIES_FEATURE,
        short_name: "received_properties",
        class: FeatureClass::Compatible,
        activation: Activation::OnFirstUse,
        create_only: false,
    },
    // Needed to read (a block on a RAID-Z vdev is found only through its column map), counted
    // (one per RAID-Z top-level vdev, added by `pool create` and `pool add`, recounted from
    // the vdev tree at import): a pool without RAID-Z vdevs stays open to builds without it.
    Feature {
        name: RAIDZ_FEATURE,
        short_name: "raidz",
        class: FeatureClass::NeededToRead,
        activation: Activation::Counted,
        create_only: false,
    },
    // Needed to read (a block of a RAID-Z vdev that was expanded is found only through the
    // widths in the vdev's config, and while the copy runs through the uberblock's reflow
    // word), counted: one per expansion begun, never given back (OpenZFS counts the same:
    // blocks of the old width stay), recounted from the vdev tree at import.
    Feature {
        name: RAIDZ_EXPANSION_FEATURE,
        short_name: "raidz_expansion",
        class: FeatureClass::NeededToRead,
        activation: Activation::Counted,
        create_only: false,
    },
];

/// The known feature of full name `name`.
pub fn feature_by_name(name: &str) -> Option<&'static Feature> {
    FEATURES_KNOWN.iter().find(|feature| feature.name == name)
}

/// The known feature of short name `short_name`.
pub fn feature_by_short_name(short_name: &str) -> Option<&'static Feature> {
    FEATURES_KNOWN
        .iter()
        .find(|feature| feature.short_name == short_name)
}

/// The short names of every known feature, for error messages.
pub fn known_short_names() -> String {
    FEATURES_KNOWN
        .iter()
        .map(|feature| feature.short_name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A feature's state on a pool (`pool get feature@NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeatureState {
    Disabled,
    Enabled,
    Active,
}

impl FeatureState {
    /// The state of a feature whose config entry is `refcount` (None: absent).
    pub fn of(refcount: Option<u64>) -> FeatureState {
        match refcount {
            None => FeatureState::Disabled,
            Some(0) => FeatureState::Enabled,
            Some(_) => FeatureState::Active,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FeatureState::Disabled => "disabled",
            FeatureState::Enabled => "enabled",
            FeatureState::Active => "active",
        }
    }
}

/// The active features of a config that this build does not know, by what they prevent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnsupportedFeatures {
    /// Needed to read: the pool cannot be imported.
    pub needed_to_read: Vec<String>,
    /// Read-only compatible: the pool can be imported read-only only.
    pub needed_to_write: Vec<String>,
}

/// The active features of `config` this build does not know (an unknown feature that is
/// only enabled, or compatible, prevents nothing).
pub fn unsupported_features(config: &LabelConfig) -> UnsupportedFeatures {
    let active_unknown = |list: &[String]| -> Vec<String> {
        list.iter()
            .filter(|name| feature_by_name(name).is_none())
            .filter(|name| {
                config
                    .features
                    .get(name.as_str())
                    .is_none_or(|&count| count > 0)
            })
            .cloned()
            .collect()
    };
    UnsupportedFeatures {
        needed_to_read: active_unknown(&config.features_for_read),
        needed_to_write: active_unknown(config.features_for_write.as_deref().unwrap_or_default()),
    }
}

/// Refuse to import a pool whose config has active features this build does not know and
/// cannot use as asked (see the module documentation).
pub fn check_import(config: &LabelConfig, readonly: bool) -> Result<(), PoolError> {
    let unsupported = unsupported_features(config);
    if !unsupported.needed_to_read.is_empty() {
        return Err(PoolError::UnsupportedFeatures {
            name: config.name.clone(),
            features: unsupported.needed_to_read.join(", "),
        });
    }
    if !unsupported.needed_to_write.is_empty() && !readonly {
        return Err(PoolError::UnsupportedFeaturesForWrite {
            name: config.name.clone(),
            features: unsupported.needed_to_write.join(", "),
        });
    }
    Ok(())
}

impl ConfigState {
    /// The config of a new pool: every known feature enabled but those named (short names,
    /// known: the caller checked).
    pub(super) fn for_new_pool(disabled: &[String]) -> ConfigState {
        let mut config = ConfigState {
            state: PoolState::Active,
            features: BTreeMap::new(),
            features_for_read: Vec::new(),
            features_for_write: Vec::new(),
            dirty: true,
        };
        for feature in FEATURES_KNOWN {
            if !disabled.iter().any(|name| name == feature.short_name) {
                config.enable_feature(feature);
            }
        }
        config
    }

    /// The in-memory config of a pool being imported with label config `config`.
    pub(super) fn imported(config: &LabelConfig, readonly: bool) -> ConfigState {
        ConfigState {
            state: PoolState::Active,
            features: config.features.clone(),
            features_for_read: config.features_for_read.clone(),
            features_for_write: config.features_for_write.clone().unwrap_or_default(),
            dirty: !readonly,
        }
    }

    /// Enable `feature` (nothing if it is enabled already): present in `features`, with the
    /// refcount its activation rule starts it at, and in the list of its class. Returns
    /// whether it was newly enabled; the caller syncs.
    pub(super) fn enable_feature(&mut self, feature: &Feature) -> bool {
        if self.features.contains_key(feature.name) {
            return false;
        }
        let refcount = match feature.activation {
            Activation::OnEnable => 1,
            Activation::OnFirstUse | Activation::Counted => 0,
        };
        self.features.insert(feature.name.to_string(), refcount);
        let list = match feature.class {
            FeatureClass::NeededToRead => Some(&mut self.features_for_read),
            FeatureClass::ReadOnlyCompatible => Some(&mut self.features_for_write),
            FeatureClass::Compatible => None,
        };
        if let Some(list) = list {
            if !list.iter().any(|name| name == feature.name) {
                list.push(feature.name.to_string());
            }
        }
        self.dirty = true;
        true
    }
}

/// What `pool upgrade` did to one pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpgradeReport {
    /// Short names of the features it enabled.
    pub enabled: Vec<&'static str>,
    /// Short names of the features left disabled because only create can enable them.
    pub create_only: Vec<&'static str>,
}

/// One feature's row of `pool get` (`feature@NAME`, or `unsupported@FULLNAME` for a feature
/// this build does not know).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureRow {
    pub property: String,
    /// `disabled`, `enabled` or `active`; for an unknown feature `inactive` (refcount 0),
    /// `readonly` (active, read-only compatible: the pool is imported read-only) or `active`
    /// (active, compatible).
    pub value: &'static str,
}

impl Pool {
    /// Every known feature's state, then every unknown feature the config holds.
    pub fn feature_rows(&self) -> Vec<FeatureRow> {
        let config = self.core.config.lock();
        let mut rows: Vec<FeatureRow> = FEATURES_KNOWN
            .iter()
            .map(|feature| FeatureRow {
                property: format!("feature@{}", feature.short_name),
                value: FeatureState::of(config.features.get(feature.name).copied()).as_str(),
            })
            .collect();
        for (name, &refcount) in &config.features {
            if feature_by_name(name).is_some() {
                continue;
            }
            let value = if refcount == 0 {
                "inactive"
            } else if config.features_for_write.contains(name) {
                "readonly"
            } else {
                "active"
            };
            rows.push(FeatureRow {
                property: format!("unsupported@{name}"),
                value,
            });
        }
        rows
    }

    /// The state of the known feature of short name `short_name` (None: unknown name).
    pub fn feature_state(&self, short_name: &str) -> Option<FeatureState> {
        let feature = feature_by_short_name(short_name)?;
        Some(FeatureState::of(
            self.core.config.lock().features.get(feature.name).copied(),
        ))
    }

    /// The known features not enabled on this pool that `pool upgrade` would enable (those
    /// only create can enable are left out).
    pub fn features_to_upgrade(&self) -> Vec<&'static str> {
        let config = self.core.config.lock();
        FEATURES_KNOWN
            .iter()
            .filter(|feature| !feature.create_only && !config.features.contains_key(feature.name))
            .map(|feature| feature.short_name)
            .collect()
    }

    /// Enable the known feature of short name `short_name` (`pool set feature@NAME=enabled`);
    /// nothing if it is enabled already. Durable on return.
    pub fn enable_feature(&self, short_name: &str) -> Result<(), PoolError> {
        let Some(feature) = feature_by_short_name(short_name) else {
            return Err(PoolError::BadProperty(format!(
                "unknown feature {short_name:?}; features: {}",
                known_short_names()
            )));
        };
        if self.core.readonly {
            return Err(PoolError::ReadOnly);
        }
        if self.core.config.lock().features.contains_key(feature.name) {
            return Ok(());
        }
        if feature.create_only {
            return Err(PoolError::BadProperty(format!(
                "feature@{short_name} can only be chosen when the pool is created"
            )));
        }
        self.core.config.lock().enable_feature(feature);
        self.core.feature_enabled(feature);
        self.sync()?;
        Ok(())
    }

    /// `pool upgrade POOL`: enable every known feature not enabled yet, but those only create
    /// can enable. Durable on return.
    pub fn upgrade(&self) -> Result<UpgradeReport, PoolError> {
        if self.core.readonly {
            return Err(PoolError::ReadOnly);
        }
        let mut report = UpgradeReport::default();
        {
            let mut config = self.core.config.lock();
            for feature in FEATURES_KNOWN {
                if config.features.contains_key(feature.name) {
                    continue;
                }
                if feature.create_only {
                    report.create_only.push(feature.short_name);
                } else if config.enable_feature(feature) {
                    report.enabled.push(feature.short_name);
                }
            }
        }
        for short_name in &report.enabled {
            if let Some(feature) = feature_by_short_name(short_name) {
                self.core.feature_enabled(feature);
            }
        }
        if !report.enabled.is_empty() {
            self.sync()?;
        }
        Ok(report)
    }
}

impl PoolCore {
    /// What changes in memory when `feature` is enabled on an open pool.
    fn feature_enabled(&self, feature: &Feature) {
        if feature.name == EMBEDDED_DATA_FEATURE {
            self.io.set_embedded_data(true);
        }
        if feature.name == USER_ACCOUNTING_FEATURE {
            for (_, dataset) in self.dataset_list() {
                if let Some(objset) = dataset.try_objset() {
                    objset.set_owner_accounting(Some(crate::fs::phys::znode_owners));
                }
            }
        }
    }

    /// Syncing context: one more on-disk structure needs `name` (enabled: the caller only
    /// creates the structure when it is).
    pub(super) fn feature_increment(&self, name: &str) -> Result<(), PoolError> {
        let mut config = self.config.lock();
        let Some(refcount) = config.features.get_mut(name) else {
            return Err(PoolError::Corrupt(format!(
                "feature {name} used but not enabled"
            )));
        };
        *refcount += 1;
        config.dirty = true;
        Ok(())
    }

    /// Syncing context: one on-disk structure that needed `name` is gone. A count that would
    /// go below zero is corruption (the count and the structures disagree).
    pub(super) fn feature_decrement(&self, name: &str) -> Result<(), PoolError> {
        let mut config = self.config.lock();
        match config.features.get_mut(name) {
            Some(refcount) if *refcount > 0 => *refcount -= 1,
            _ => {
                return Err(PoolError::Corrupt(format!(
                    "feature {name}: refcount would go below zero"
                )))
            }
        }
        config.dirty = true;
        Ok(())
    }

    /// Syncing context: a feature whose rule is [`Activation::OnFirstUse`] is used; active from
    /// now on (nothing if it is already, or not enabled: the caller checked it is).
    pub(super) fn feature_activate(&self, name: &str) {
        let mut config = self.config.lock();
        if let Some(refcount) = config.features.get_mut(name) {
            if *refcount == 0 {
                *refcount = 1;
                config.dirty = true;
            }
        }
    }

    /// Refuse what `what` describes ("cannot set property for 'tank/a'") on a pool without
    /// feature `feature` (full name), saying how to enable it; `refusal` makes the error.
    pub(super) fn require_feature(
        &self,
        feature: &str,
        what: &str,
        refusal: impl FnOnce(String) -> PoolError,
    ) -> Result<(), PoolError> {
        if self.feature_refcount(feature).is_some() {
            return Ok(());
        }
        let short = feature_by_name(feature).map_or(feature, |known| known.short_name);
        Err(refusal(format!(
            "{what}: pool {} lacks feature@{short} (tarn pool set feature@{short}=enabled {0})",
            self.name
        )))
    }

    /// The refcount of feature `name` (None: not enabled), for `check`.
    pub(crate) fn feature_refcount(&self, name: &str) -> Option<u64> {
        self.config.lock().features.get(name).copied()
    }

    /// Destroyed clones' livelists still queued for freeing (each counts for feature
    /// livelist), for `check`, and for tests waiting for the frees: the last sub-lists of
    /// one may hold no bytes, so `freeing` reaches zero before the livelist is gone.
    pub fn queued_livelist_count(&self) -> Result<u64, PoolError> {
        Ok(self.queued_livelists()?.len() as u64)
    }

    /// At import, once the datasets and the livelist queue are loaded: the counted features'
    /// refcounts from the MOS of the txg opened, and, for a config that predates refcounts
    /// (`had_write_list` false), the class lists of the known features rebuilt from the
    /// registry and the count of every known feature set by its rule. A change is written with
    /// the import's first txg (the config is dirty then unless read-only).
    pub(super) fn recount_features(&self, had_write_list: bool) -> Result<(), PoolError> {
        let datasets = self.dataset_list();
        let livelists = datasets
            .iter()
            .filter(|(_, dataset)| dataset.phys().livelist_object.0 != 0)
            .count() as u64
            + self.queued_livelist_count()?;
        let held = datasets
            .iter()
            .flat_map(|(_, dataset)| dataset.snapshots())
            .filter(|snapshot| snapshot.phys().uses_user_holds())
            .count() as u64;
        let raidz_vdevs = self
            .io
            .vdevs
            .tops()
            .iter()
            .filter(|top| top.raidz_geometry().is_some())
            .count() as u64;
        let raidz_expansions = self
            .io
            .vdevs
            .tops()
            .iter()
            .filter_map(|top| top.raidz_widths().map(|widths| (top, widths)))
            .map(|(top, widths)| {
                widths.expansions().len() as u64 + u64::from(top.raidz_expanding())
            })
            .sum::<u64>();
        let mut config = self.config.lock();
        if !had_write_list {
            // The class lists of known features as the registry says; unknown names keep the
            // list the config gave them.
            let known: Vec<&Feature> = FEATURES_KNOWN
                .iter()
                .filter(|feature| config.features.contains_key(feature.name))
                .collect();
            config
                .features_for_read
                .retain(|name| feature_by_name(name).is_none());
            for feature in known {
                let refcount = match feature.activation {
                    Activation::OnEnable => 1,
                    // The use cannot be told from the MOS cheaply; the old config's 1 (active)
                    // is kept, which only `pool get` sees (these features are compatible).
                    Activation::OnFirstUse => 1,
                    Activation::Counted => 0,
                };
                config.features.insert(feature.name.to_string(), refcount);
                match feature.class {
                    FeatureClass::NeededToRead => {
                        config.features_for_read.push(feature.name.to_string())
                    }
                    FeatureClass::ReadOnlyCompatible => {
                        config.features_for_write.push(feature.name.to_string())
                    }
                    FeatureClass::Compatible => {}
                }
            }
        }
        for (feature, what, count) in [
            (LIVELIST_FEATURE, "livelists", livelists),
            (USER_HOLDS_FEATURE, "held or deferred snapshots", held),
            (RAIDZ_FEATURE, "raidz vdevs", raidz_vdevs),
            (
                RAIDZ_EXPANSION_FEATURE,
                "raidz expansions",
                raidz_expansions,
            ),
        ] {
            let short_name = feature_by_name(feature).map_or(feature, |known| known.short_name);
            if let Some(refcount) = config.features.get_mut(feature) {
                if *refcount != count {
                    if had_write_list {
                        log::warn!(
                            "pool {}: feature {short_name}: the config counts {} {what}, the pool has {count}; the count is corrected",
                            self.name,
                            *refcount
                        );
                    }
                    *refcount = count;
                }
            } else if count > 0 {
                // Not an import failure: a failed open falls back to an older txg, and this is
                // no reason to discard newer ones. `check` reports it.
                log::error!(
                    "pool {}: {count} {what} exist but feature {short_name} is not enabled",
                    self.name
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every feature has a unique full and short name, and a create-only feature is active
    /// once enabled (a pool without it can never gain it, so its state never changes).
    #[test]
    fn registry_is_consistent() {
        for (index, feature) in FEATURES_KNOWN.iter().enumerate() {
            assert!(feature.name.starts_with("com.tarn:"));
            assert!(feature.name.ends_with(feature.short_name));
            for other in &FEATURES_KNOWN[index + 1..] {
                assert_ne!(feature.name, other.name);
                assert_ne!(feature.short_name, other.short_name);
            }
        }
    }

    fn config_with(
        features: &[(&str, u64)],
        for_read: &[&str],
        for_write: Option<&[&str]>,
    ) -> LabelConfig {
        LabelConfig {
            version: super::super::POOL_VERSION,
            name: "tank".into(),
            pool_guid: 1,
            state: PoolState::Exported,
            txg: 4,
            hostname: String::new(),
            top_guid: 2,
            leaf_guid: 3,
            vdev_tree: Vec::new(),
            features_for_read: for_read.iter().map(|s| s.to_string()).collect(),
            features_for_write: for_write.map(|list| list.iter().map(|s| s.to_string()).collect()),
            features: features
                .iter()
                .map(|(name, count)| (name.to_string(), *count))
                .collect(),
            l2cache: Default::default(),
        }
    }

    /// An unknown feature that is only enabled never stops an import, whatever its class.
    #[test]
    fn unknown_enabled_features_import() {
        let config = config_with(
            &[("org.other:a", 0), ("org.other:b", 0), ("org.other:c", 0)],
            &["org.other:a"],
            Some(&["org.other:b"]),
        );
        check_import(&config, false).unwrap();
    }

    /// Unknown active features needed to read are refused, every one named, even read-only.
    #[test]
    fn unknown_active_needed_to_read_is_refused_by_name() {
        let config = config_with(
            &[
                ("org.other:a", 1),
                ("org.other:b", 3),
                (LIVELIST_FEATURE, 2),
            ],
            &["org.other:a", "org.other:b"],
            Some(&[LIVELIST_FEATURE]),
        );
        for readonly in [false, true] {
            let error = check_import(&config, readonly).unwrap_err().to_string();
            assert!(error.contains("org.other:a, org.other:b"), "{error}");
        }
    }

    /// An unknown active read-only compatible feature: refused read-write with a message
    /// naming it and `-o readonly=on`, accepted read-only.
    #[test]
    fn unknown_active_read_only_compatible_needs_readonly() {
        let config = config_with(&[("org.other:w", 1)], &[], Some(&["org.other:w"]));
        let error = check_import(&config, false).unwrap_err().to_string();
        assert!(error.contains("org.other:w"), "{error}");
        assert!(error.contains("-o readonly=on"), "{error}");
        check_import(&config, true).unwrap();
    }

    /// An unknown active feature in neither list (compatible) imports read-write.
    #[test]
    fn unknown_active_compatible_imports() {
        let config = config_with(&[("org.other:c", 5)], &[], Some(&[]));
        check_import(&config, false).unwrap();
    }

    /// A new pool's config: each feature at its rule's starting count, in its class's list.
    #[test]
    fn new_pool_features_start_by_rule() {
        let config = ConfigState::for_new_pool(&["livelist".to_string()]);
        assert_eq!(config.features.get(EMBEDDED_DATA_FEATURE), Some(&1));
        assert_eq!(config.features.get(LOG_SPACEMAP_FEATURE), Some(&1));
        assert_eq!(config.features.get(REPLAY_SEQUENCE_FEATURE), Some(&1));
        assert_eq!(config.features.get(STALLED_FREES_FEATURE), Some(&0));
        assert_eq!(config.features.get(SCAN_CATCH_UP_FEATURE), Some(&0));
        assert_eq!(config.features.get(DEADLIST_TOTALS_FEATURE), Some(&1));
        assert_eq!(config.features.get(LIVELIST_FEATURE), None);
        assert_eq!(config.features.get(SPACE_LIMITS_FEATURE), Some(&0));
        assert_eq!(config.features.get(USER_ACCOUNTING_FEATURE), Some(&1));
        assert_eq!(config.features.get(USER_HOLDS_FEATURE), Some(&0));
        assert_eq!(config.features.get(USER_PROPERTIES_FEATURE), Some(&0));
        assert_eq!(config.features.get(DELEGATION_FEATURE), Some(&0));
        assert_eq!(config.features.get(RAIDZ_FEATURE), Some(&0));
        assert_eq!(config.features.get(RAIDZ_EXPANSION_FEATURE), Some(&0));
        assert_eq!(
            config.features_for_read,
            vec![
                EMBEDDED_DATA_FEATURE,
                REPLAY_SEQUENCE_FEATURE,
                USER_ACCOUNTING_FEATURE,
                USER_HOLDS_FEATURE,
                RAIDZ_FEATURE,
                RAIDZ_EXPANSION_FEATURE
            ]
        );
        assert_eq!(
            config.features_for_write,
            vec![
                LOG_SPACEMAP_FEATURE,
                DEADLIST_TOTALS_FEATURE,
                SPACE_LIMITS_FEATURE
            ]
        );
    }
}
