//! Creating a pool: checking and opening new devices (sparse files made on demand, removed
//! again if creation fails), labelling them, and the first txg that writes the MOS, the root
//! dataset and its file system.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::block::blkptr::{Compression, ObjectType};
use crate::block::pipeline::BlockIo;
use crate::dataset::Dataset;
use crate::object::adapters::{KvObject, MosSpaceStorage};
use crate::object::bpobj::BpObj;
use crate::object::phys::ObjsetKind;
use crate::object::{kv, ObjectSet, Tx};
use crate::space::{AllocClass, SpaceManager};
use crate::txg::TxgManager;
use crate::types::{Guid, ObjectId, Txg, VdevId, TXG_INITIAL};
use crate::vdev::inject::Injector;
use crate::vdev::{BlockDevice, FileDevice, Leaf, VdevTree};

use super::new_device::{check_new_device, device_identity};
use super::sync::{MosLifecycle, PoolFreer};
use super::vdev_spec::VdevSpec;
use super::{
    datasets, deferred_list_store, kv_set_u64, mos_props, validate_pool_name, vdev_change,
    ConfigState, CreateOptions, Pool, PoolCore, PoolError, MOS_COPIES, MOS_OBJECT_DIRECTORY,
};

/// One top-level vdev's devices, as opened for a new pool.
type DeviceGroup = Vec<(PathBuf, Arc<dyn BlockDevice>)>;

/// Files a failed `create` made: removed again unless the pool was created.
struct CreatedFiles {
    paths: Vec<PathBuf>,
    keep: bool,
}

impl Drop for CreatedFiles {
    fn drop(&mut self) {
        if !self.keep {
            for path in &self.paths {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// Check every device of a new pool before anything is created or written: no device named
/// twice (under any spelling), each large enough, none belonging to another pool unless forced.
fn validate_new_devices(options: &CreateOptions) -> Result<(), PoolError> {
    if options.vdevs.is_empty() {
        return Err(PoolError::BadVdevSpec(
            "a pool needs at least one data vdev besides its log and cache devices".into(),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    let all_paths = options
        .vdevs
        .iter()
        .chain(&options.log)
        .flat_map(VdevSpec::paths)
        .chain(options.cache.iter().cloned());
    for path in all_paths {
        let identity = device_identity(&path);
        if !seen.insert(identity.clone()) {
            return Err(PoolError::BadVdevSpec(format!(
                "{} is named twice",
                identity.display()
            )));
        }
        check_new_device(&path, options.force, options.create_size)?;
    }
    if !options.force {
        super::attach::refuse_mismatched_new_vdevs(&new_pool_specs(options))?;
    }
    Ok(())
}

/// The top-level vdevs of a new pool with their classes: data vdevs first, then log vdevs.
fn new_pool_specs(options: &CreateOptions) -> Vec<(&VdevSpec, AllocClass)> {
    let data = options.vdevs.iter().map(|spec| (spec, AllocClass::Normal));
    let log = options.log.iter().map(|spec| (spec, AllocClass::Log));
    data.chain(log).collect()
}

/// Open (creating sparse files where asked) every device of a new pool, already validated.
fn open_new_devices(
    options: &CreateOptions,
    created: &mut CreatedFiles,
) -> Result<Vec<DeviceGroup>, PoolError> {
    let mut groups = Vec::new();
    for (spec, _) in new_pool_specs(options) {
        let mut group = Vec::new();
        for path in spec.paths() {
            let device: Arc<dyn BlockDevice> = match (path.exists(), options.create_size) {
                (false, Some(size)) => {
                    let device = FileDevice::create_sparse(&path, size)?;
                    created.paths.push(path.clone());
                    Arc::new(device)
                }
                _ => Arc::new(FileDevice::open(&path)?),
            };
            let path = device_identity(&path);
            let device = match &options.wrap_device {
                Some(wrap) => wrap(&path, device),
                None => device,
            };
            group.push((path, device));
        }
        groups.push(group);
    }
    Ok(groups)
}

impl Pool {
    /// Create a new pool and leave it imported in this process.
    pub fn create(mut options: CreateOptions) -> Result<Pool, PoolError> {
        validate_pool_name(&options.name)?;
        let injector = Injector::new();
        options.wrap_device = Some(injector.wrapper_over(options.wrap_device.take()));
        options
            .tunables
            .validate()
            .map_err(PoolError::BadTunables)?;
        let tunables = options.tunables.clone();
        for disabled in &options.disabled_features {
            if super::features::feature_by_short_name(disabled).is_none() {
                return Err(PoolError::BadVdevSpec(format!(
                    "unknown feature {disabled:?} (known: {})",
                    super::features::known_short_names()
                )));
            }
        }
        validate_new_devices(&options)?;
        let mut created = CreatedFiles {
            paths: Vec::new(),
            keep: false,
        };
        let groups = open_new_devices(&options, &mut created)?;
        let mut cache_devices = Vec::new();
        for path in &options.cache {
            if !path.exists() && options.create_size.is_some() {
                created.paths.push(path.clone());
            }
            cache_devices.push(super::l2cache::open_cache_path(
                path,
                options.create_size,
                options.wrap_device.as_ref(),
                false,
            )?);
        }
        let mut tops = Vec::new();
        let specs = new_pool_specs(&options);
        for (index, group) in groups.into_iter().enumerate() {
            let (spec, class) = specs[index];
            let leaves = group
                .into_iter()
                .map(|(path, device)| Leaf::new(Guid::random(), path, device))
                .collect();
            tops.push(Arc::new(
                super::attach::new_top_vdev(
                    VdevId(index as u32),
                    spec.kind(),
                    tunables.vdev_ashift,
                    leaves,
                    &tunables,
                )?
                .in_class(class),
            ));
        }
        let vdevs = Arc::new(VdevTree::new(tops));
        let space = Arc::new(SpaceManager::new(tunables.clone()));
        if !options
            .disabled_features
            .iter()
            .any(|disabled| disabled == "log_spacemap")
        {
            space.enable_log();
        }
        let io = Arc::new(BlockIo::new(
            vdevs.clone(),
            space.clone(),
            tunables.clone(),
            true,
        ));
        let freer = Arc::new(PoolFreer {
            io: io.clone(),
            staged: Mutex::new(Vec::new()),
            deferred_from_pass: PoolFreer::deferred_from_pass(&tunables, space.log_enabled()),
        });
        let txg = TXG_INITIAL;
        let mos = Arc::new(ObjectSet::create(
            io.clone(),
            ObjsetKind::Mos,
            Arc::new(MosLifecycle {
                freer: freer.clone(),
            }),
            MOS_COPIES,
            txg,
        ));
        {
            let storage = MosSpaceStorage { mos: &mos };
            for top in vdevs.tops().iter() {
                space.add_vdev(
                    top.id,
                    top.class,
                    top.asize,
                    top.ms_shift,
                    top.alloc_unit(),
                    None,
                    &storage,
                )?;
            }
        }
        let tx = Tx::syncing(txg);
        let kv_block = tunables.dnode_block_size.max(4096);
        mos.create_object_at(
            &tx,
            MOS_OBJECT_DIRECTORY,
            mos_props(ObjectType::KeyValue, kv_block, &tunables, Compression::Lz4),
            ObjectType::None,
            &[],
        )?;
        {
            let mut handle = KvObject::new(&mos, MOS_OBJECT_DIRECTORY, Some(tx))?;
            kv::create(&mut handle).map_err(|error| PoolError::Corrupt(error.to_string()))?;
        }
        let deferred = BpObj::create(&deferred_list_store(&mos, &tunables), &tx)?;
        kv_set_u64(
            &mos,
            &tx,
            MOS_OBJECT_DIRECTORY,
            "deferred_frees",
            deferred.0,
        )?;

        // The root dataset: directory, head dataset record, empty object set.
        let (dir_object, dir_phys, dataset_object, phys) =
            datasets::create_dataset_records(&mos, &tx, &tunables, ObjectId(0))?;
        kv_set_u64(
            &mos,
            &tx,
            MOS_OBJECT_DIRECTORY,
            "root_dataset",
            dir_object.0,
        )?;

        let root = Dataset::new(
            options.name.clone(),
            dataset_object,
            phys,
            dir_phys,
            freer.clone(),
        );
        let objset = Arc::new(ObjectSet::create(
            io.clone(),
            ObjsetKind::FileSystem,
            root.clone(),
            1,
            txg,
        ));
        root.attach_objset(objset);

        let mut config = ConfigState::for_new_pool(&options.disabled_features);
        let raidz_vdevs = vdevs
            .tops()
            .iter()
            .filter(|top| top.raidz_geometry().is_some())
            .count() as u64;
        if raidz_vdevs > 0 {
            let Some(refcount) = config.features.get_mut(super::RAIDZ_FEATURE) else {
                return Err(PoolError::BadVdevSpec(
                    "raidz vdevs need feature@raidz, which -o feature@raidz=disabled turns off"
                        .into(),
                ));
            };
            *refcount = raidz_vdevs;
        }
        io.set_embedded_data(config.features.contains_key(super::EMBEDDED_DATA_FEATURE));
        let pool_guid = Guid::random();
        io.l2arc().set_pool_guid(pool_guid);
        for (path, device) in cache_devices {
            let device =
                super::l2cache::prepare_cache_device(&options.name, pool_guid, txg, path, device)?;
            io.l2arc().add_device(device);
        }
        let core = Arc::new(PoolCore {
            name: options.name.clone(),
            guid: pool_guid,
            io,
            mos,
            txgs: TxgManager::new(Txg(txg.0 - 1), tunables.clone()),
            root: root.clone(),
            datasets: RwLock::new(BTreeMap::from([(String::new(), root)])),
            pending_destroys: Mutex::new(Vec::new()),
            snapshot_tasks: Mutex::new(Vec::new()),
            namespace: Mutex::new(()),
            long_holds: Arc::default(),
            held_back: Arc::default(),
            limits: Arc::default(),
            injector,
            last_committed_txg: AtomicU64::new(0),
            last_committed_reflow: Mutex::new(None),
            readonly: false,
            freer,
            deferred_frees_object: deferred,
            bptree_object: AtomicU64::new(0),
            free_list_object: AtomicU64::new(0),
            livelist_queue_object: AtomicU64::new(0),
            livelists_set_aside: Mutex::new(Vec::new()),
            livelist_freeing: AtomicU64::new(0),
            livelist_reader: Default::default(),
            background_frees_pending: std::sync::atomic::AtomicBool::new(false),
            stalled_frees: Default::default(),
            scan: Default::default(),
            config: Mutex::new(config),
            tunables,
            errlog: Default::default(),
            history: Default::default(),
            failmode: Default::default(),
            vdev_changes: vdev_change::VdevChanges::with_wrapper(options.wrap_device.clone()),
            raidz_expand: Default::default(),
        });
        core.install_dirty_probe();
        // The creating txg is synced right here, before any other transaction can exist.
        core.sync_txg(txg)?;
        core.attach_open_context(&core.root);
        let pool = Pool {
            core: core.clone(),
            sync_thread: Mutex::new(None),
            livelist_reader_thread: Mutex::new(None),
        };
        pool.core.txgs.mark_synced(txg);
        pool.start_sync_thread();
        pool.start_livelist_reader();
        // Every pool's root dataset is a file system (owned by root, mode 0755).
        crate::fs::FileSystem::format(pool.root_objset(), pool.core.txgs.clone(), 0, 0)?;
        pool.sync()?;
        created.keep = true;
        Ok(pool)
    }
}
