//! Finding and importing pools: scanning directories for labels, choosing the uberblock (with
//! rewind to an older one when asked), opening the MOS and the datasets, and the report.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::block::pipeline::BlockIo;
use crate::dataset::phys::{DatasetDirPhys, DatasetPhys};
use crate::dataset::Dataset;
use crate::object::adapters::MosSpaceStorage;
use crate::object::ObjectSet;
use crate::space::{AllocClass, SpaceManager};
use crate::tunables::Tunables;
use crate::txg::TxgManager;
use crate::types::{Guid, ObjectId, Txg, VdevId};
use crate::vdev::inject::Injector;
use crate::vdev::label::{LabelConfig, PoolState};
use crate::vdev::{
    label, BlockDevice, FileDevice, Leaf, MissingDevice, TopVdev, VdevError, VdevHealth, VdevTree,
};

use super::sync::{MosLifecycle, PoolFreer};
use super::uberblock::Uberblock;
use super::{
    fallback_uberblocks, hostname, lookup_mos_directory, metaslab_array_key, validate_pool_name,
    vdev_change, ConfigState, FoundPool, ImportOptions, ImportReport, Pool, PoolCore, PoolError,
    RewindPlan, LOG_SPACEMAP_FEATURE, LOG_SPACEMAP_KEY, MOS_COPIES, MOS_OBJECT_DIRECTORY,
    POOL_VERSION, POOL_VERSION_MIN,
};

/// Whether an older tree that a rewind import opened read-only may be imported: `Ok(None)` if
/// it checks clean, else why not. The whole-pool check that decides it (`check::check_pool`)
/// is a consumer of this layer, so it is handed in (`check/rewind.rs`).
pub(crate) type OlderTreeVerdict = fn(&Pool) -> Result<Option<String>, PoolError>;

impl Pool {
    /// List the pools whose vdevs are in `dirs`.
    pub fn scan(dirs: &[PathBuf]) -> Vec<FoundPool> {
        let mut by_leaf: BTreeMap<(u64, u64), Vec<crate::vdev::FoundLeaf>> = BTreeMap::new();
        for found in crate::vdev::scan::scan_dirs(dirs) {
            by_leaf
                .entry((found.config.pool_guid, found.config.leaf_guid))
                .or_default()
                .push(found);
        }
        let mut pools: BTreeMap<u64, FoundPool> = BTreeMap::new();
        for ((pool_guid, leaf_guid), mut copies) in by_leaf {
            // scan_dirs sorts by path, so a group of copies is named in path order.
            let paths: Vec<PathBuf> = copies.iter().map(|copy| copy.path.clone()).collect();
            copies.sort_by(super::leaf_choice::newest_first);
            let newest = &copies[0];
            let config = &newest.config;
            let pool = pools.entry(pool_guid).or_insert_with(|| FoundPool {
                name: config.name.clone(),
                guid: Guid(pool_guid),
                state: config.state,
                txg: config.txg,
                config: config.clone(),
                leaves: BTreeMap::new(),
                copies_found: Vec::new(),
            });
            if config.txg > pool.txg {
                pool.txg = config.txg;
                pool.state = config.state;
                pool.name = config.name.clone();
                pool.config = config.clone();
            }
            pool.leaves.insert(leaf_guid, newest.path.clone());
            if paths.len() > 1 {
                pool.copies_found.push(paths);
            }
        }
        pools.into_values().collect()
    }

    /// Import the pool named (or with the guid) `target` from `dirs`, judging the older trees
    /// a rewind (`options.rewind`) may open with `older_tree`. `Pool::import` (`check/rewind.rs`)
    /// passes the whole-pool check, which sits above this layer.
    pub(crate) fn import_judging(
        target: &str,
        options: ImportOptions,
        older_tree: OlderTreeVerdict,
    ) -> Result<(Pool, ImportReport), PoolError> {
        let readonly = options.readonly;
        let (pool, mut report) = Pool::import_pool(target, options, older_tree)?;
        if !readonly {
            for name in pool.destroy_partial_receives() {
                report.damaged.push(format!(
                    "{name}: a receive stopped by a crash left it part-way; destroyed"
                ));
            }
        }
        Ok((pool, report))
    }

    fn import_pool(
        target: &str,
        options: ImportOptions,
        older_tree: OlderTreeVerdict,
    ) -> Result<(Pool, ImportReport), PoolError> {
        // A new name obeys the same rule as a created pool's, checked before anything is read.
        if let Some(new_name) = &options.new_name {
            validate_pool_name(new_name)?;
        }
        let dirs_text = options
            .dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        // `-D` imports destroyed pools only; without it they are never candidates.
        let candidates: Vec<FoundPool> = Pool::scan(&options.dirs)
            .into_iter()
            .filter(|pool| (pool.state == PoolState::Destroyed) == options.destroyed)
            .filter(|pool| pool.name == target || pool.guid.0.to_string() == target)
            .collect();
        if candidates.is_empty() && !options.destroyed {
            let destroyed = Pool::scan(&options.dirs).into_iter().any(|pool| {
                pool.state == PoolState::Destroyed
                    && (pool.name == target || pool.guid.0.to_string() == target)
            });
            if destroyed {
                return Err(PoolError::Destroyed(target.to_string()));
            }
        }
        let found = match candidates.len() {
            0 => return Err(PoolError::NotFound(target.to_string(), dirs_text)),
            1 => candidates.into_iter().next().expect("one"),
            _ => return Err(PoolError::Ambiguous(target.to_string())),
        };
        found.refuse_without_force(&options)?;
        Pool::open_found(found, options, older_tree)
    }

    fn open_found(
        found: FoundPool,
        mut options: ImportOptions,
        older_tree: OlderTreeVerdict,
    ) -> Result<(Pool, ImportReport), PoolError> {
        let injector = Injector::new();
        options.wrap_device = Some(injector.wrapper_over(options.wrap_device.take()));
        options
            .tunables
            .validate()
            .map_err(PoolError::BadTunables)?;
        let tunables = options.tunables.clone();
        let config = found.config.clone();
        if config.version < POOL_VERSION_MIN {
            return Err(PoolError::FormatTooOld {
                name: config.name.clone(),
                version: config.version,
            });
        }
        if config.version > POOL_VERSION {
            return Err(PoolError::UnsupportedFeatures {
                name: config.name.clone(),
                features: format!(
                    "pool format version {} (this build reads up to {POOL_VERSION})",
                    config.version
                ),
            });
        }
        super::features::check_import(&config, options.readonly)?;
        // Map leaf guid -> path from what the scan found; copies of one leaf are told apart
        // by their labels or refused (leaf_choice.rs).
        let (paths_by_guid, copies_passed_over) = super::leaf_choice::choose_leaves(
            &config.name,
            config.pool_guid,
            crate::vdev::scan::scan_dirs(&options.dirs),
        )?;
        for warning in &copies_passed_over {
            log::warn!("{warning}");
        }
        // A device change cut short by a crash leaves labels ahead of every uberblock: take
        // the config the newest uberblock was written with (vdev_change.rs).
        let leaf_paths: Vec<PathBuf> = paths_by_guid.values().cloned().collect();
        let config = vdev_change::choose_config(&config, &leaf_paths);
        // A pool opens only with every top-level vdev: refuse before opening any device,
        // naming each unusable one and why (import_state.rs).
        let state = super::import_state::import_state(&config, &paths_by_guid);
        let unavailable = |class: AllocClass| {
            state
                .tops
                .iter()
                .filter(|top| top.class == class && top.health == VdevHealth::Unavail)
                .map(|top| {
                    let leaves = top
                        .children
                        .iter()
                        .map(|leaf| {
                            let why = leaf.problem.map_or("ONLINE", |problem| problem.as_str());
                            format!("{}: {why}", leaf.path.display())
                        })
                        .collect::<Vec<_>>()
                        .join(", ");
                    format!("top-level vdev {} ({leaves})", top.id)
                })
                .collect::<Vec<_>>()
        };
        let data_unavailable = unavailable(AllocClass::Normal);
        if !data_unavailable.is_empty() {
            return Err(PoolError::MissingVdev {
                name: config.name.clone(),
                what: data_unavailable.join("; "),
            });
        }
        let logs_unavailable = unavailable(AllocClass::Log);
        if !logs_unavailable.is_empty() {
            if !options.missing_log {
                return Err(PoolError::MissingLogVdev {
                    name: config.name.clone(),
                    what: logs_unavailable.join("; "),
                });
            }
            log::warn!(
                "pool {}: missing log {}; imported with -m, its intent-log records are lost",
                config.name,
                logs_unavailable.join("; ")
            );
        }
        let mut tops = Vec::new();
        let mut uberblock_slots: Vec<Vec<u8>> = Vec::new();
        // The vdev tree asserts unique ids (every lookup is by id): a config is checked first.
        let mut ids = std::collections::HashSet::new();
        for top_config in &config.vdev_tree {
            if !ids.insert(top_config.id) {
                return Err(VdevError::InvalidConfig {
                    top: VdevId(top_config.id),
                    what: "the config names this top-level vdev twice".into(),
                }
                .into());
            }
        }
        for top_config in &config.vdev_tree {
            // The geometry first: a missing leaf's stand-in is sized from the config's `asize`.
            crate::space::check_metaslab_geometry(
                top_config.asize,
                top_config.ms_shift,
                top_config.ashift,
            )
            .map_err(|what| VdevError::InvalidConfig {
                top: VdevId(top_config.id),
                what,
            })?;
            let mut leaves = Vec::new();
            for leaf_config in &top_config.children {
                let Some(path) = paths_by_guid.get(&leaf_config.guid) else {
                    // Keep the tree's shape: the absent child stands in as a missing device.
                    let missing: Arc<dyn BlockDevice> = Arc::new(MissingDevice::new(
                        PathBuf::from(&leaf_config.path),
                        top_config.asize,
                    ));
                    let leaf = Leaf::new(
                        Guid(leaf_config.guid),
                        PathBuf::from(&leaf_config.path),
                        missing,
                    );
                    leaf.dtl.mark_unloaded();
                    leaves.push(leaf);
                    continue;
                };
                let mut device: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(path)?);
                if let Some(wrap) = &options.wrap_device {
                    device = wrap(path, device);
                }
                uberblock_slots.extend(label::read_uberblock_slots(
                    device.as_ref(),
                    top_config.ashift,
                ));
                let leaf = Leaf::new(Guid(leaf_config.guid), path.clone(), device);
                leaf.dtl.mark_unloaded();
                leaf.set_replaces(Some(Guid(leaf_config.replaces)).filter(|guid| guid.0 != 0));
                leaves.push(leaf);
            }
            tops.push(Arc::new(TopVdev::with_config_children(
                top_config,
                leaves.into_iter().map(Arc::new).collect(),
            )?));
        }
        let vdevs = Arc::new(VdevTree::new(tops));
        // The guid sum covers every vdev of the config, found or not: compute it from the config.
        let guid_sum = vdev_change::config_guid_sum(&config.vdev_tree);
        let mut uberblocks: Vec<Uberblock> = uberblock_slots
            .iter()
            .filter_map(|slot| Uberblock::decode(slot).ok().flatten())
            .filter(|ub| ub.guid_sum == guid_sum)
            .collect();
        uberblocks.sort_by_key(|ub| std::cmp::Reverse((ub.txg, ub.timestamp)));
        uberblocks.dedup_by(|a, b| a.txg == b.txg);
        let newest = uberblocks.first().cloned();
        let seconds_before = |uberblock: &Uberblock| {
            newest.as_ref().map_or(0, |newest| {
                newest.timestamp.saturating_sub(uberblock.timestamp)
            })
        };
        // A RAID-Z expansion's copy overwrites old places that an uberblock with less progress
        // still reads: an uberblock whose reflow word differs from the newest sound one's is
        // never opened (one whose word is unsound is tried, and refused with the reason).
        let reflow_reference = uberblocks
            .iter()
            .find(|uberblock| check_reflow_word(uberblock, &vdevs).is_ok())
            .and_then(|uberblock| uberblock.reflow);
        let same_reflow = |uberblock: &Uberblock| {
            uberblock.reflow == reflow_reference || check_reflow_word(uberblock, &vdevs).is_err()
        };
        if let Some(target) = options.rewind_to {
            let uberblock = uberblocks
                .iter()
                .find(|uberblock| uberblock.txg == target)
                .cloned()
                .ok_or_else(|| {
                    PoolError::NoUsableUberblock(
                        config.name.clone(),
                        format!("no valid uberblock of txg {target}"),
                    )
                })?;
            if reflow_reference != uberblock.reflow {
                return Err(PoolError::NoUsableUberblock(
                    config.name.clone(),
                    format!("a raidz expansion progressed after txg {target}: cannot rewind across it (its copy may have overwritten what that txg reads)"),
                ));
            }
            let (pool, damaged) = Pool::open_at(
                &found,
                &config,
                vdevs,
                &uberblock,
                &options,
                &tunables,
                &uberblocks,
                &injector,
            )?;
            return Ok((
                pool,
                ImportReport {
                    txg: uberblock.txg,
                    skipped: Vec::new(),
                    damaged: [copies_passed_over.clone(), damaged].concat(),
                    seconds_discarded: seconds_before(&uberblock),
                },
            ));
        }
        let (mut safe, mut older) = fallback_uberblocks(&uberblocks);
        safe.retain(same_reflow);
        older.retain(same_reflow);
        let mut skipped = Vec::new();
        for uberblock in safe {
            match Pool::open_at(
                &found,
                &config,
                vdevs.clone(),
                &uberblock,
                &options,
                &tunables,
                &uberblocks,
                &injector,
            ) {
                Ok((pool, damaged)) => {
                    return Ok((
                        pool,
                        ImportReport {
                            txg: uberblock.txg,
                            skipped,
                            damaged: [copies_passed_over.clone(), damaged].concat(),
                            seconds_discarded: seconds_before(&uberblock),
                        },
                    ))
                }
                Err(error) => skipped.push((uberblock.txg, error.to_string())),
            }
        }
        if options.rewind && !older.is_empty() {
            // -F: older trees may have had blocks reused; open one only after its whole tree
            // reads and checks clean (read-only), each try with freshly opened devices.
            drop(vdevs);
            for uberblock in &older {
                let mut readonly = options.clone();
                readonly.readonly = true;
                readonly.rewind = false;
                readonly.rewind_to = Some(uberblock.txg);
                let verdict =
                    Pool::open_found(found.clone(), readonly, older_tree).and_then(|(pool, _)| {
                        let verdict = older_tree(&pool)?;
                        drop(pool);
                        Ok(verdict)
                    });
                match verdict {
                    Ok(None) => {
                        let mut chosen = options.clone();
                        chosen.rewind = false;
                        chosen.rewind_to = Some(uberblock.txg);
                        let (pool, mut report) =
                            Pool::open_found(found.clone(), chosen, older_tree)?;
                        skipped.append(&mut report.skipped);
                        report.skipped = skipped;
                        return Ok((pool, report));
                    }
                    Ok(Some(why)) => skipped.push((uberblock.txg, why)),
                    Err(error) => skipped.push((uberblock.txg, error.to_string())),
                }
            }
        }
        let why = if skipped.is_empty() {
            "no valid uberblock".to_string()
        } else {
            format!(
                "{} uberblocks tried, newest failed with: {}{}",
                skipped.len(),
                skipped[0].1,
                if options.rewind || older.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; {} older uberblocks remain: try a rewind (pool import -F)",
                        older.len()
                    )
                }
            )
        };
        Err(PoolError::NoUsableUberblock(config.name.clone(), why))
    }

    /// What `pool import -F -n` reports: the txg a rewind import would open and the seconds
    /// of changes it would discard, without importing or writing anything. `older_tree` judges
    /// the older trees, as in [`Pool::import_judging`] (`Pool::rewind_plan` passes the check).
    pub(crate) fn rewind_plan_judging(
        target: &str,
        options: ImportOptions,
        older_tree: OlderTreeVerdict,
    ) -> Result<RewindPlan, PoolError> {
        let mut options = options;
        options.readonly = true;
        options.rewind = true;
        let (pool, report) = Pool::import_judging(target, options, older_tree)?;
        let newest_txg = report
            .skipped
            .first()
            .map_or(report.txg, |(txg, _)| (*txg).max(report.txg));
        drop(pool);
        Ok(RewindPlan {
            txg: report.txg,
            newest_txg,
            seconds_discarded: report.seconds_discarded,
            skipped: report.skipped,
        })
    }

    // The opening's inputs, each used once: a struct of them would only be unpacked here.
    #[allow(clippy::too_many_arguments)]
    fn open_at(
        found: &FoundPool,
        config: &LabelConfig,
        vdevs: Arc<VdevTree>,
        uberblock: &Uberblock,
        options: &ImportOptions,
        tunables: &Tunables,
        found_uberblocks: &[Uberblock],
        injector: &Arc<Injector>,
    ) -> Result<(Pool, Vec<String>), PoolError> {
        check_reflow_word(uberblock, &vdevs)?;
        // Each try sets it anew: the tree is shared by the tries of one import.
        vdevs.set_reflow_progress(uberblock.reflow.as_ref());
        let space = Arc::new(SpaceManager::new(tunables.clone()));
        if config.features.contains_key(LOG_SPACEMAP_FEATURE) {
            space.enable_log();
        }
        // Nothing is written while the pool loads, not even a repair from a good copy: a load
        // that fails leaves the devices as they were (OpenZFS trusts a config only once it has
        // loaded: spa_trust_config). Writes are enabled below, once every load has succeeded.
        let io = Arc::new(BlockIo::new(
            vdevs.clone(),
            space.clone(),
            tunables.clone(),
            false,
        ));
        io.cache().clear();
        io.l2arc().set_pool_guid(found.guid);
        io.l2arc().set_synced_txg(uberblock.txg.0);
        io.l2arc().set_writable(!options.readonly);
        io.set_embedded_data(config.features.contains_key(super::EMBEDDED_DATA_FEATURE));
        let freer = Arc::new(PoolFreer {
            io: io.clone(),
            staged: Mutex::new(Vec::new()),
            deferred_from_pass: PoolFreer::deferred_from_pass(tunables, space.log_enabled()),
        });
        let mos = Arc::new(ObjectSet::open(
            io.clone(),
            &uberblock.mos_root,
            Arc::new(MosLifecycle {
                freer: freer.clone(),
            }),
            MOS_COPIES,
        )?);
        let root_dir = lookup_mos_directory(&mos, MOS_OBJECT_DIRECTORY, "root_dataset")?
            .ok_or_else(|| PoolError::Corrupt("object directory has no root_dataset".into()))?;
        let deferred = lookup_mos_directory(&mos, MOS_OBJECT_DIRECTORY, "deferred_frees")?
            .ok_or_else(|| PoolError::Corrupt("object directory has no deferred_frees".into()))?;
        let dir_phys = DatasetDirPhys::decode(&mos.bonus(ObjectId(root_dir))?)
            .map_err(|e| PoolError::Corrupt(e.to_string()))?;
        let phys = DatasetPhys::decode(&mos.bonus(dir_phys.head_dataset_object)?)
            .map_err(|e| PoolError::Corrupt(e.to_string()))?;
        {
            let storage = MosSpaceStorage { mos: &mos };
            for top in vdevs.tops().iter() {
                // The MOS of this uberblock, not the (possibly newer) label config, says which
                // metaslab array exists.
                let array =
                    lookup_mos_directory(&mos, MOS_OBJECT_DIRECTORY, &metaslab_array_key(top.id))?
                        .map_or(ObjectId(0), ObjectId);
                top.set_metaslab_array(array);
                space.add_vdev(
                    top.id,
                    top.class,
                    top.asize,
                    top.ms_shift,
                    top.alloc_unit(),
                    (array.0 != 0).then_some(array),
                    &storage,
                )?;
                if top.is_log() && top.children.iter().all(|leaf| leaf.device.is_missing()) {
                    space.set_allocatable(top.id, false);
                }
            }
            // Import order (docs/design/10-pool.md §5b): the log space map is replayed into the
            // metaslabs' unflushed trees before anything can allocate.
            let log_directory =
                lookup_mos_directory(&mos, MOS_OBJECT_DIRECTORY, LOG_SPACEMAP_KEY)?.map(ObjectId);
            space.open_log(log_directory, &storage, uberblock.txg)?;
            space.set_last_synced_txg(uberblock.txg);
        }
        let name = options
            .new_name
            .clone()
            .unwrap_or_else(|| config.name.clone());
        let root = Dataset::new(
            name.clone(),
            dir_phys.head_dataset_object,
            phys.clone(),
            dir_phys,
            freer.clone(),
        );
        // A root object set that cannot be read leaves the root dataset unavailable, not the
        // pool: its children and the MOS are still there.
        match ObjectSet::open(io.clone(), &phys.root, root.clone(), 1) {
            Ok(objset) => root.attach_objset(Arc::new(objset)),
            Err(error) => root.set_unavailable(format!("object set: {error}")),
        }
        let core = Arc::new(PoolCore {
            name,
            guid: found.guid,
            io,
            mos,
            txgs: TxgManager::new(uberblock.txg, tunables.clone()),
            root: root.clone(),
            datasets: RwLock::new(BTreeMap::from([(String::new(), root)])),
            pending_destroys: Mutex::new(Vec::new()),
            snapshot_tasks: Mutex::new(Vec::new()),
            namespace: Mutex::new(()),
            long_holds: Arc::default(),
            held_back: Arc::default(),
            limits: Arc::default(),
            injector: injector.clone(),
            last_committed_txg: AtomicU64::new(uberblock.txg.0),
            last_committed_reflow: Mutex::new(uberblock.reflow),
            readonly: options.readonly,
            freer,
            deferred_frees_object: ObjectId(deferred),
            bptree_object: AtomicU64::new(0),
            free_list_object: AtomicU64::new(0),
            livelist_queue_object: AtomicU64::new(0),
            livelists_set_aside: Mutex::new(Vec::new()),
            livelist_freeing: AtomicU64::new(0),
            livelist_reader: Default::default(),
            background_frees_pending: std::sync::atomic::AtomicBool::new(false),
            stalled_frees: Default::default(),
            scan: Default::default(),
            config: Mutex::new(ConfigState::imported(config, options.readonly)),
            tunables: tunables.clone(),
            errlog: Default::default(),
            history: Default::default(),
            failmode: Default::default(),
            vdev_changes: vdev_change::VdevChanges::with_wrapper(options.wrap_device.clone()),
            raidz_expand: Default::default(),
        });
        core.install_dirty_probe();
        // The leaves' logs and offline flags first: reads from here on know which children
        // missed which txgs, so a stale copy or column is skipped, not charged as damage.
        core.load_dtls()?;
        core.attach_open_context(&core.root);
        core.apply_copies("");
        let mut damaged = Vec::new();
        if let Err(error) = core.load_snapshots(&core.root) {
            core.root.detach_objset();
            core.root.set_unavailable(format!("snapshots: {error}"));
        }
        core.load_children(
            "",
            &core.root.dir(),
            &mut damaged,
            &mut std::collections::HashSet::from([core.root.dir_object]),
        );
        core.resolve_origins(&mut damaged);
        if let Err(error) = core.load_limits(&core.root, None) {
            damaged.push(format!("root dataset limits: {error}"));
        }
        core.relink_limits();
        for (_, dataset) in core.dataset_list() {
            if let Some(why) = dataset.unavailable() {
                damaged.push(format!("dataset {} is unavailable: {why}", dataset.name()));
            }
        }
        core.load_background_frees()?;
        core.load_scan()?;
        core.recount_features(config.features_for_write.is_some())?;
        core.load_raidz_expansion()?;
        if let Err(error) = core.load_errlog() {
            damaged.push(format!("error log: {error}"));
        }
        if let Err(error) = core.load_failmode() {
            damaged.push(format!("failmode: {error}"));
        }
        if !options.readonly {
            core.io.set_writable(true);
            // A RAID-Z expansion's scratch phase cut short: its first rows go to their real
            // places before anything else is written.
            core.io.vdevs.recover_reflow_scratch()?;
            // Before anything allocates: the log blocks written after this uberblock.
            core.claim_logs(uberblock.txg, &mut damaged);
        }
        let pool = Pool {
            core,
            sync_thread: Mutex::new(None),
            livelist_reader_thread: Mutex::new(None),
        };
        if !options.readonly {
            // A rewind abandons the newer uberblocks. Erase them before the first new txg
            // commits: its writes may reuse their blocks, and a later import must never take
            // an abandoned uberblock (newer by number) for the newest.
            pool.core
                .invalidate_uberblocks_after(uberblock.txg, found_uberblocks)?;
        }
        // Cache devices last: one that is missing or unreadable never fails the import.
        for device in super::l2cache::open_cache_devices(
            config,
            &options.dirs,
            options.wrap_device.as_ref(),
            options.readonly,
        ) {
            pool.core.io.l2arc().add_device(device);
        }
        pool.start_sync_thread();
        pool.start_livelist_reader();
        if !options.readonly {
            // Mark the labels active (and this host's) right away, so that a crash before the
            // first write does not leave labels saying the pool was exported.
            pool.sync()?;
            // A RAID-Z expansion under way resumes where its last uberblock stood.
            pool.start_reflow_thread();
        }
        Ok((pool, damaged))
    }
}

impl PoolCore {
    /// Claim every file system's intent log (zil/claim.rs) in the import's first txg, before
    /// anything allocates, and leave its replay to the file system's open. A log that cannot
    /// be claimed is reported and left alone (its file system replays nothing).
    fn claim_logs(&self, synced: Txg, damaged: &mut Vec<String>) {
        let first_txg = self.txgs.open_txg();
        let keeps_progress = self
            .config
            .lock()
            .features
            .contains_key(super::REPLAY_SEQUENCE_FEATURE);
        for (name, dataset) in self.dataset_list() {
            let Some(objset) = dataset.try_objset() else {
                continue;
            };
            let Some(zil) = objset.log::<crate::zil::Zil>() else {
                continue;
            };
            match crate::zil::claim::claim(
                &self.io,
                &self.mos,
                &objset,
                zil.guid(),
                dataset.phys().log_floor,
                first_txg,
                synced,
            ) {
                Ok(Some((mut replay, report))) => {
                    replay.keeps_progress = keeps_progress;
                    log::info!(
                        "pool {}: dataset {name:?}: intent log of {} blocks ({} claimed), {} records to replay; chain end: {}",
                        self.name,
                        report.blocks,
                        report.claimed,
                        report.records,
                        report.end
                    );
                    zil.set_pending_replay(replay);
                }
                Ok(None) => {}
                Err(error) => damaged.push(format!("dataset {name}: intent log: {error}")),
            }
        }
    }
}

impl FoundPool {
    /// The host its labels say the pool is in use on, when that is not this host: the pool
    /// was not exported (nor destroyed) there. A host name unknown on either side (empty)
    /// never counts as another host, as zpool skips its check when either hostid is 0.
    pub fn active_elsewhere(&self) -> Option<&str> {
        let here = hostname();
        let there = self.config.hostname.as_str();
        (self.state == PoolState::Active && !there.is_empty() && !here.is_empty() && there != here)
            .then_some(there)
    }

    /// Refuse what only `pool import -f` may import: a pool in use on another host
    /// ([`ImportOptions::any_host`]), a destroyed pool (`-D` needs `-f`).
    fn refuse_without_force(&self, options: &ImportOptions) -> Result<(), PoolError> {
        if options.any_host {
            return Ok(());
        }
        if self.state == PoolState::Destroyed {
            return Err(PoolError::DestroyedNeedsForce(self.name.clone()));
        }
        match self.active_elsewhere() {
            Some(host) => Err(PoolError::InUseElsewhere {
                name: self.name.clone(),
                host: host.to_string(),
            }),
            None => Ok(()),
        }
    }
}

/// An uberblock's RAID-Z reflow word names a RAID-Z vdev whose expansion is under way in the
/// config, at an offset inside it on a sector boundary; anything else is damage (or a crafted
/// uberblock), refused before the MOS is read with it.
fn check_reflow_word(uberblock: &Uberblock, vdevs: &VdevTree) -> Result<(), PoolError> {
    let Some(reflow) = &uberblock.reflow else {
        return Ok(());
    };
    let corrupt = |what: String| {
        Err(PoolError::Corrupt(format!(
            "the uberblock of txg {} records a raidz reflow of vdev {} {what}",
            uberblock.txg.0, reflow.vdev.0
        )))
    };
    match vdevs.top(reflow.vdev) {
        Some(top) if top.raidz_expanding() => {
            if reflow.offset > top.asize || reflow.offset % top.sector_size() != 0 {
                return corrupt(format!(
                    "at offset {}, outside its {} bytes or off a sector boundary",
                    reflow.offset, top.asize
                ));
            }
            Ok(())
        }
        Some(_) => corrupt("that is not expanding".into()),
        None => corrupt("that does not exist".into()),
    }
}

#[cfg(test)]
mod tests {
    //! Which found pools only `pool import -f` imports (`-f` and `-D` were once
    //! parsed and ignored, so a pool left imported by another host imported without -f, and
    //! a destroyed pool could not be imported at all).

    use super::*;
    use crate::tunables::Tunables;
    use crate::vdev::label::{L2cacheConfig, LABEL_CONFIG_VERSION};

    fn found(state: PoolState, host: &str) -> FoundPool {
        FoundPool {
            name: "tank".into(),
            guid: Guid(7),
            state,
            txg: 5,
            config: LabelConfig {
                version: LABEL_CONFIG_VERSION,
                name: "tank".into(),
                pool_guid: 7,
                state,
                txg: 5,
                hostname: host.into(),
                top_guid: 1,
                leaf_guid: 2,
                vdev_tree: Vec::new(),
                features_for_read: Vec::new(),
                features_for_write: Some(Vec::new()),
                features: BTreeMap::new(),
                l2cache: L2cacheConfig::default(),
            },
            leaves: BTreeMap::new(),
            copies_found: Vec::new(),
        }
    }

    fn options(any_host: bool) -> ImportOptions {
        ImportOptions {
            any_host,
            ..ImportOptions::new(Vec::new(), Tunables::default())
        }
    }

    /// An active pool whose label names another host needs -f, and so does a destroyed pool;
    /// an active pool of this host (a crash here), an exported one, or one whose label names
    /// no host import without it.
    #[test]
    fn force_is_needed_for_another_hosts_active_pool_and_a_destroyed_one() {
        let here = hostname();
        assert!(!here.is_empty(), "this test needs a host name");
        let there = format!("{here}-elsewhere");
        let elsewhere = found(PoolState::Active, &there);
        assert_eq!(elsewhere.active_elsewhere(), Some(there.as_str()));
        match elsewhere.refuse_without_force(&options(false)) {
            Err(PoolError::InUseElsewhere { name, host }) => {
                assert_eq!((name.as_str(), host.as_str()), ("tank", there.as_str()));
            }
            other => panic!("{other:?}"),
        }
        assert!(elsewhere.refuse_without_force(&options(true)).is_ok());
        for free in [
            found(PoolState::Active, &here),
            found(PoolState::Active, ""),
            found(PoolState::Exported, &there),
        ] {
            assert_eq!(free.active_elsewhere(), None, "{:?}", free.state);
            assert!(free.refuse_without_force(&options(false)).is_ok());
        }
        let destroyed = found(PoolState::Destroyed, &here);
        assert!(matches!(
            destroyed.refuse_without_force(&options(false)),
            Err(PoolError::DestroyedNeedsForce(_))
        ));
        assert!(destroyed.refuse_without_force(&options(true)).is_ok());
        assert!(PoolError::InUseElsewhere {
            name: "tank".into(),
            host: there
        }
        .to_string()
        .contains("import with -f"));
    }
}
