//! Object-set sync (OpenZFS dmu_objset_sync): every object dirty in the txg written through its
//! block tree, then the meta-dnode's dnode blocks and the object-set header, in each sync pass.
//!
//! Compression of the data blocks is the costliest step of a pass and needs nothing but the
//! block: before the trees are walked (which allocate and write in order, one thread), the
//! pass compresses its data blocks on a few threads at once (as OpenZFS's zio write issue
//! taskqs do), and each is then written as a precompressed block. A block that does not
//! compress is marked so, and stored as it is.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::block::blkptr::{BlockPtr, ChecksumType, Compression, ObjectType};
use crate::block::compress::compress_for_unit;
use crate::block::pipeline::{SyncPoint, WriteProps};
use crate::space::storage::SpaceStorage;
use crate::types::ObjectId;

use super::accounting::{charge_of, is_usage_object, usage_deltas};
use super::dirty::{DirtyBlock, ObjectDirty};
use super::phys::{DnodePhys, ObjsetHeader, ObjsetKind, DNODE_SIZE};
use super::tree::{self, TreeSync};
use super::{write_copies, ObjectError, ObjectSet, SyncingState};

/// Data blocks a pass must have before it compresses them on several threads.
const PARALLEL_COMPRESS_MIN_BLOCKS: usize = 8;
/// Most threads a pass compresses on (the sync thread and helpers).
const PARALLEL_COMPRESS_THREADS_MAX: usize = 4;

/// Payloads compressed ahead of the tree walk, by (object, block id): as
/// `ObjectDirty::stored`; `Compression::Off` with no bytes means "does not compress".
type Precompressed = HashMap<(ObjectId, u64), (Compression, Arc<Vec<u8>>)>;

/// A block to compress ahead: (object, block id), the object's compression, its bytes.
type CompressWork<'a> = ((ObjectId, u64), Compression, &'a Arc<Vec<u8>>);

fn coalesce(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

impl ObjectSet {
    /// Sync pass `at.pass` of txg `at.txg`: write everything pending and return the new root
    /// pointer, or None if nothing was pending.
    pub fn sync(
        &self,
        at: SyncPoint,
        storage: &dyn SpaceStorage,
    ) -> Result<Option<BlockPtr>, ObjectError> {
        let _l2 = self.l2_scope();
        let (pending, starting): (BTreeMap<ObjectId, ObjectDirty>, bool) = {
            let mut state = self.state.lock();
            let Some(dirty) = state.dirty.get(&at.txg) else {
                return Ok(None);
            };
            let first_write = state.synced_root.is_hole();
            if dirty.objects.is_empty() && !dirty.log && !(first_write && state.syncing.is_none()) {
                return Ok(None);
            }
            let pending = dirty.objects.clone();
            let starting = state.syncing.is_none();
            if starting {
                let log_header = state.synced_log_header.clone();
                let accounting = state.synced_accounting.clone();
                let mut meta_dnode = state.synced_meta_dnode.clone();
                // A changed `copies` setting reaches the dnode blocks written from now on.
                meta_dnode.copies = self.copies();
                state.syncing = Some(SyncingState {
                    txg: at.txg,
                    log_header,
                    meta_dnode,
                    dnodes: BTreeMap::new(),
                    root: None,
                    accounting,
                    owner_deltas: Default::default(),
                    accounting_rebuilt: false,
                });
            }
            assert_eq!(
                state.syncing.as_ref().map(|s| s.txg),
                Some(at.txg),
                "object set synced out of txg order"
            );
            (pending, starting)
        };
        if starting {
            self.free_unadopted(at.txg)?;
        }
        // Once per txg, the log says what its header is now (freeing the blocks this txg
        // makes obsolete).
        if let Some(log) = self.log.lock().clone() {
            if starting {
                let header = log.sync(at.txg)?;
                if let Some(syncing) = self.state.lock().syncing.as_mut() {
                    syncing.log_header = header;
                }
            }
        }

        // Only the usage objects' own sync (`accounting.rs`) writes them.
        debug_assert!(!pending.keys().any(|object| is_usage_object(*object)));
        let owner_of = self
            .owner_of()
            .filter(|_| self.kind == ObjsetKind::FileSystem);
        let mut bases = Vec::with_capacity(pending.len());
        for object in pending.keys() {
            bases.push(self.tree_dnode(*object)?);
        }
        let precompressed = self.precompress(&pending, &bases, at);
        let mut changed: BTreeMap<ObjectId, DnodePhys> = BTreeMap::new();
        let mut charges = Vec::new();
        for ((object, record), base) in pending.iter().zip(bases) {
            let before = owner_of.and_then(|owner_of| charge_of(owner_of, &base));
            let dnode = self.sync_object(*object, base, record, &precompressed, at, storage)?;
            if let Some(owner_of) = owner_of {
                charges.push((before, charge_of(owner_of, &dnode)));
            }
            changed.insert(*object, dnode.clone());
            let mut state = self.state.lock();
            state
                .syncing
                .as_mut()
                .expect("syncing")
                .dnodes
                .insert(*object, dnode);
        }

        if let Some(owner_of) = owner_of {
            self.sync_owner_usage(owner_of, usage_deltas(charges), at, storage)?;
        }

        // Write the changed dnodes into the meta-dnode's blocks and sync the meta-dnode.
        let meta = self
            .state
            .lock()
            .syncing
            .as_ref()
            .expect("syncing")
            .meta_dnode
            .clone();
        let per_block = meta.data_block_size as u64 / DNODE_SIZE as u64;
        let mut meta_record = ObjectDirty::default();
        let mut by_block: BTreeMap<u64, Vec<(ObjectId, DnodePhys)>> = BTreeMap::new();
        for (object, dnode) in changed {
            by_block
                .entry(object.0 / per_block)
                .or_default()
                .push((object, dnode));
        }
        for (blkid, dnodes) in by_block {
            let mut block = if blkid <= meta.max_blkid {
                let bp = tree::lookup_block(&self.io, &meta, blkid)?;
                if bp.is_hole() {
                    vec![0; meta.data_block_size as usize]
                } else {
                    self.io.read(&bp)?.as_ref().clone()
                }
            } else {
                vec![0; meta.data_block_size as usize]
            };
            for (object, dnode) in dnodes {
                let slot = ((object.0 % per_block) as usize) * DNODE_SIZE;
                block[slot..slot + DNODE_SIZE].copy_from_slice(&dnode.encode());
            }
            meta_record
                .blocks
                .insert(blkid, DirtyBlock::Data(Arc::new(block)));
        }
        let meta = self.sync_object(
            ObjectId(0),
            meta,
            &meta_record,
            &Precompressed::new(),
            at,
            storage,
        )?;
        let (log_header, accounting) = {
            let state = self.state.lock();
            let syncing = state.syncing.as_ref().expect("syncing");
            (syncing.log_header.clone(), syncing.accounting.clone())
        };
        let header = ObjsetHeader {
            meta_dnode: meta.clone(),
            kind: self.kind,
            log: log_header,
            accounting,
        }
        .encode();
        let old_root = {
            let state = self.state.lock();
            let syncing = state.syncing.as_ref().expect("syncing");
            syncing
                .root
                .clone()
                .unwrap_or_else(|| state.synced_root.clone())
        };
        let props = WriteProps {
            checksum: ChecksumType::Fletcher4,
            compression: Compression::Lz4,
            copies: write_copies(ObjectType::Objset, 0, self.copies()),
            object_type: ObjectType::Objset,
            level: 0,
            cache: crate::cache::CachePolicy::All,
        };
        let root = self
            .io
            .write(&header, &props, 1, at, Some(&old_root), storage)?;
        if !tree::rewritten_in_place(&old_root, &root) {
            if !old_root.is_hole() {
                self.lifecycle.block_kill(&old_root, at)?;
            }
            self.lifecycle.block_born(&root, at);
        }

        let mut state = self.state.lock();
        let syncing = state.syncing.as_mut().expect("syncing");
        syncing.meta_dnode = meta;
        syncing.root = Some(root.clone());
        if let Some(dirty) = state.dirty.get_mut(&at.txg) {
            for object in pending.keys() {
                dirty.objects.remove(object);
            }
            dirty.log = false;
        }
        state.view_generation += 1;
        Ok(Some(root))
    }

    /// Compress the pass's data blocks on several threads (see the module documentation);
    /// nothing when there are few, or the pass no longer compresses.
    fn precompress(
        &self,
        pending: &BTreeMap<ObjectId, ObjectDirty>,
        bases: &[DnodePhys],
        at: SyncPoint,
    ) -> Precompressed {
        if at.pass >= self.io.tunables.sync_pass_dont_compress {
            return Precompressed::new();
        }
        let mut work: Vec<CompressWork> = Vec::new();
        for ((object, record), base) in pending.iter().zip(bases) {
            let compression = match &record.create {
                Some(created) => created.compression,
                None if record.removed => continue,
                None => base.compression,
            };
            if compression == Compression::Off {
                continue;
            }
            for (&blkid, block) in &record.blocks {
                if let DirtyBlock::Data(data) | DirtyBlock::Received(data) = block {
                    if !record.overrides.contains_key(&blkid) {
                        work.push(((*object, blkid), compression, data));
                    }
                }
            }
        }
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(PARALLEL_COMPRESS_THREADS_MAX);
        if work.len() < PARALLEL_COMPRESS_MIN_BLOCKS || threads < 2 {
            return Precompressed::new();
        }
        // A payload too long to embed is padded to the allocation unit here (as the write
        // would pad it), so that the write shares it with the write queue instead of copying.
        let unit = 1usize << self.io.alloc_unit_shift;
        let compress_share = |share: &[CompressWork]| {
            share
                .iter()
                .map(|(key, compression, data)| {
                    let stored = match compress_for_unit(*compression, data, unit) {
                        Some(mut payload) => {
                            if payload.len() > crate::block::blkptr::EMBEDDED_PAYLOAD_MAX {
                                payload.resize(payload.len().next_multiple_of(unit), 0);
                            }
                            (*compression, Arc::new(payload))
                        }
                        None => (Compression::Off, Arc::new(Vec::new())),
                    };
                    (*key, stored)
                })
                .collect::<Vec<_>>()
        };
        let share = work.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let mut chunks = work.chunks(share);
            let mine = chunks.next().expect("work is not empty");
            let helpers: Vec<_> = chunks
                .map(|chunk| scope.spawn(move || compress_share(chunk)))
                .collect();
            let mut out: Precompressed = compress_share(mine).into_iter().collect();
            for helper in helpers {
                out.extend(helper.join().expect("a compression thread panicked"));
            }
            out
        })
    }

    pub(super) fn sync_object(
        &self,
        object: ObjectId,
        base: DnodePhys,
        record: &ObjectDirty,
        precompressed: &Precompressed,
        at: SyncPoint,
        storage: &dyn SpaceStorage,
    ) -> Result<DnodePhys, ObjectError> {
        let mut base = base;
        if record.removed || record.create.is_some() {
            if !base.is_free() {
                let mut tree = TreeSync::new(base, &self.io, self.lifecycle.as_ref(), storage, at);
                tree.free_range(0, u64::MAX)?;
                tree.set_spill(None)?;
                tree.finish()?;
            }
            base = match &record.create {
                Some(created) => created.clone(),
                None => return Ok(DnodePhys::free()),
            };
        }
        if base.is_free() {
            return Err(ObjectError::Corrupt(
                "sync of a change to a free dnode".into(),
            ));
        }
        if let Some((bonus_type, bonus)) = &record.bonus {
            base.bonus_type = *bonus_type;
            base.bonus = bonus.clone();
        }
        if let Some(settings) = &record.settings {
            settings.apply(&mut base);
        }
        let mut tree = TreeSync::new(base, &self.io, self.lifecycle.as_ref(), storage, at);
        tree.cache = self.primarycache();
        if let Some(spill) = &record.spill {
            tree.set_spill(spill.as_ref())?;
        }
        for (start, end) in coalesce(record.frees.clone()) {
            tree.free_range(start, end)?;
        }
        if let Some(truncated) = record.truncated_to {
            tree.dnode.max_blkid = tree.dnode.max_blkid.min(truncated);
        }
        if let Some(size) = record.block_size {
            // Grown in this txg, whose record holds the single block at the new size.
            tree.dnode.data_block_size = size;
        }
        for (&blkid, block) in &record.blocks {
            if let Some(bp) = record.overrides.get(&blkid) {
                tree.adopt_block(blkid, bp)?;
                tree.dnode.max_blkid = tree.dnode.max_blkid.max(blkid);
                continue;
            }
            match block {
                DirtyBlock::Data(data) => {
                    tree.write_block(blkid, data, precompressed.get(&(object, blkid)), true)?
                }
                DirtyBlock::Received(data) => {
                    tree.write_block(blkid, data, precompressed.get(&(object, blkid)), false)?
                }
                DirtyBlock::Stored {
                    compression,
                    payload,
                    size_logical,
                    fletcher4,
                } => tree.write_stored(
                    blkid,
                    *compression,
                    payload,
                    *size_logical,
                    fletcher4.as_ref(),
                )?,
            }
            tree.dnode.max_blkid = tree.dnode.max_blkid.max(blkid);
        }
        tree.finish()
    }
}
