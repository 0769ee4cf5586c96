//! Generating a stream: the walk of a snapshot's object set that skips what an incremental
//! source already has (see the module documentation of [`super`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use crate::block::blkptr::{BlockPtr, Compression};
use crate::block::pipeline::{BlockIo, VerifyOnlyScope};
use crate::cache::CachePolicy;
use crate::dataset::props::PropertySource;
use crate::object::phys::{DnodePhys, ObjsetHeader, DNODE_SIZE};
use crate::object::tree::read_indirect;
use crate::object::{ObjectError, ObjectSet};
use crate::pool::holds::{Holder, LongHold};
use crate::pool::snapshots::SnapshotInfo;
use crate::pool::Pool;

use super::stream::{
    Begin, BeginNames, ObjectRecord, Record, StreamWriter, FEATURE_COMPRESSED,
    FEATURE_PAYLOAD_DIGEST, FEATURE_RESUMING, FEATURE_SPILL, FLAG_RECURSIVE, STREAM_VERSION,
};
use super::SendError;

/// What to send besides the snapshot itself.
#[derive(Clone, Debug, Default)]
pub struct SendOptions {
    /// Incremental source: `POOL/FS@SNAP` or `@SNAP`, a snapshot of the same file system, or
    /// `POOL/FS#BOOKMARK` or `#BOOKMARK`, a bookmark of it.
    pub from: Option<String>,
    /// With `from`: a substream for every snapshot between the source and the target
    /// (`send -I`), not one from the source straight to the target (`-i`).
    pub intermediates: bool,
    /// Carry the file system's local properties in BEGIN (`send -p`).
    pub properties: bool,
    /// Estimate only: walk as a send would, read no data block, write nothing.
    pub dry_run: bool,
    /// Send compressed blocks as they are stored (`send -c`): no decompression here, no
    /// compression on the receiver.
    pub compressed: bool,
    /// The file system and every descendant with the snapshot, each with its properties and
    /// every snapshot up to the one named (`send -R`); the receiver recreates the tree below
    /// its target.
    pub recursive: bool,
    /// Continue an interrupted receive (`send -t`): start at (object, offset), leaving out
    /// every record before it (see `send/resume.rs`). Not with `recursive` or `intermediates`.
    pub resume_at: Option<(u64, u64)>,
    /// Hash payloads whole into the stream's chained checksum, as streams did before
    /// `FEATURE_PAYLOAD_DIGEST` (for a receiver that predates it); by default each payload
    /// enters the chain as its fletcher4 digest (docs/design/11-send.md §2.17).
    pub whole_payload_chain: bool,
}

/// What a send did (or, dry, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendReport {
    /// The substreams, in the order sent.
    pub substreams: Vec<SentSubstream>,
    pub records: u64,
    /// Data blocks sent in WRITE records.
    pub blocks: u64,
    /// Bytes of the stream.
    pub bytes: u64,
}

/// One substream of a send (BEGIN..END).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SentSubstream {
    /// The snapshot or bookmark it starts from, as the stream names it (empty: a full one).
    pub from: String,
    /// The snapshot it brings.
    pub to: String,
    /// Its bytes in the stream (a dry run's estimate).
    pub bytes: u64,
}

/// Send snapshot `to` (`POOL/FS@SNAP`) to `out`, full or incremental as `options` say.
/// `progress` is told the stream's length so far every few hundred records.
pub fn send(
    pool: &Pool,
    to: &str,
    options: &SendOptions,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<SendReport, SendError> {
    let (file_system, snapshot) = to.split_once('@').ok_or_else(|| {
        SendError::Refused(format!("cannot send {to:?}: name a snapshot, FS@SNAP"))
    })?;
    if options.resume_at.is_some() && (options.recursive || options.intermediates) {
        return Err(SendError::Refused(
            "a resumed send continues one snapshot's stream: not with -R or -I".into(),
        ));
    }
    let mut plan: Vec<Substream> = Vec::new();
    let members: Vec<String> = if options.recursive {
        let mut members: Vec<String> = pool
            .datasets()
            .into_iter()
            .map(|dataset| dataset.name)
            .filter(|name| name == file_system || name.starts_with(&format!("{file_system}/")))
            .collect();
        members.sort();
        members
    } else {
        vec![file_system.to_string()]
    };
    for member in &members {
        let member_to = format!("{member}@{snapshot}");
        let to_info = match pool.snapshot_info(&member_to) {
            Ok(info) => info,
            // A descendant made after the snapshot has none of its own: nothing to send.
            Err(_) if member != file_system => continue,
            Err(error) => return Err(error.into()),
        };
        let properties = if options.properties || options.recursive {
            local_properties(pool, member)?
        } else {
            Vec::new()
        };
        // A member of a tree has the same source as the top, `@A` or `#A` of its own; one
        // made since has none and is sent whole.
        let from = options.from.as_deref().and_then(|from| {
            if !options.recursive {
                return Some(from.to_string());
            }
            let short = from.find(['@', '#']).map_or(from, |at| &from[at..]);
            let own = format!("{member}{short}");
            let exists = if short.starts_with('#') {
                pool.bookmark_info(&own).is_ok()
            } else {
                pool.snapshot_info(&own).is_ok()
            };
            (exists || member == file_system).then(|| short.to_string())
        });
        let pairs = match from {
            Some(from) => incremental_pairs(pool, member, &to_info, &from, options.intermediates)?,
            // Every snapshot up to the target: a full stream of the oldest, then each next.
            None if options.recursive => {
                let chain = snapshot_chain(pool, member, 0, to_info.creation_txg)?;
                let mut pairs = vec![(None, chain[0].clone())];
                for pair in chain.windows(2) {
                    pairs.push((Some(Source::from(&pair[0])), pair[1].clone()));
                }
                pairs
            }
            None => vec![(None, to_info)],
        };
        for (from, to) in pairs {
            plan.push((from, to, properties.clone()));
        }
    }
    // Every snapshot the stream reads is held until the stream ends, so that no destroy frees
    // its blocks under the send (pool/holds.rs). The plan was made from names without the
    // namespace lock: a snapshot destroyed and made again under the same name since is
    // another snapshot, and refused.
    let mut holds: BTreeMap<String, LongHold> = BTreeMap::new();
    for (from, to, _) in &plan {
        let from = from
            .as_ref()
            .filter(|from| from.name.contains('@'))
            .map(|from| (&from.name, from.guid));
        for (name, guid) in from.into_iter().chain([(&to.name, to.guid)]) {
            if holds.contains_key(name) {
                continue;
            }
            let hold = pool.long_hold(name, Holder::Send)?;
            if hold.snapshot().phys().guid.0 != guid {
                return Err(SendError::Refused(format!(
                    "cannot send {name}: it was destroyed and made again as the send started"
                )));
            }
            holds.insert(name.clone(), hold);
        }
    }
    // The stream's reads verify and fail over, but repair nothing. The holds keep every block
    // the send reads allocated; should one still read as a bad copy, it is reported as the
    // send's error (or read from another copy), never rewritten: a block freed and reused reads
    // as garbage that is not damage, and rewriting it from another copy would put stale bytes
    // over a live block. Damage to a held snapshot is left for scrub to repair.
    let _verify_only = VerifyOnlyScope::new();
    let mut sender = Sender {
        compressed: options.compressed,
        whole_payload_chain: options.whole_payload_chain,
        top: options.recursive.then(|| file_system.to_string()),
        io: pool.core.io.clone(),
        writer: StreamWriter::new(std::io::BufWriter::with_capacity(1 << 20, out)),
        from_txg: 0,
        dry_run: options.dry_run,
        estimate: 0,
        report: SendReport::default(),
        pending_free_objects: None,
        pending_free: None,
        resume_at: options.resume_at,
        progress,
    };
    for (from, to, properties) in plan {
        let objset = pool.held_objset(&holds[&to.name])?;
        sender.substream(objset, from.as_ref(), &to, &properties)?;
    }
    sender.writer.flush()?;
    let mut report = std::mem::take(&mut sender.report);
    report.bytes = sender.stream_bytes();
    Ok(report)
}

/// The properties set on `file_system` itself, locally or by an earlier receive (as zfs send
/// -p sends both), as (name, value).
fn local_properties(pool: &Pool, file_system: &str) -> Result<Vec<(String, String)>, SendError> {
    let mut local: Vec<(String, String)> = pool
        .properties(file_system)?
        .into_iter()
        .filter(|value| {
            matches!(
                value.source,
                PropertySource::Local | PropertySource::Received
            )
        })
        .map(|value| (value.property, value.value))
        .collect();
    // User, group and project quotas travel as properties too (zfs carries them in the file
    // system's own objects; tarn keeps them with the dataset's properties).
    local.extend(pool.local_owner_quotas(file_system)?);
    // And user properties (`module:name`), set here rather than inherited.
    local.extend(
        pool.user_properties(file_system)?
            .into_iter()
            .filter(|(_, _, source)| {
                matches!(source, PropertySource::Local | PropertySource::Received)
            })
            .map(|(name, value, _)| (name, value)),
    );
    Ok(local)
}

/// The snapshots of `file_system` created in txgs `from..=to`, oldest first.
fn snapshot_chain(
    pool: &Pool,
    file_system: &str,
    from: u64,
    to: u64,
) -> Result<Vec<SnapshotInfo>, SendError> {
    let mut chain: Vec<SnapshotInfo> = pool
        .core
        .snapshots_of(file_system)?
        .into_iter()
        .filter(|snapshot| (from..=to).contains(&snapshot.creation_txg))
        .collect();
    chain.sort_by_key(|snapshot| snapshot.creation_txg);
    Ok(chain)
}

/// The substreams of an incremental send of `to` (a snapshot of `file_system`) from `from`
/// (`FS@SNAP`, `@SNAP`, `FS#BOOKMARK` or `#BOOKMARK`); with `intermediates`, one per snapshot
/// between.
fn incremental_pairs(
    pool: &Pool,
    file_system: &str,
    to: &SnapshotInfo,
    from: &str,
    intermediates: bool,
) -> Result<Vec<(Option<Source>, SnapshotInfo)>, SendError> {
    let from_full = match from.chars().next() {
        Some('@' | '#') => format!("{file_system}{from}"),
        _ => from.to_string(),
    };
    let source_fs = from_full.split(['@', '#']).next().unwrap_or_default();
    if source_fs != file_system || !from_full.contains(['@', '#']) {
        return Err(SendError::Refused(format!(
            "cannot send {} from {from_full}: the source must be a snapshot or bookmark of \
             {file_system}",
            to.name
        )));
    }
    let source = if from_full.contains('#') {
        if intermediates {
            return Err(SendError::Refused(format!(
                "cannot send every snapshot from {from_full}: a bookmark is not a snapshot \
                 (-I needs one; use -i)"
            )));
        }
        let bookmark = pool.bookmark_info(&from_full)?;
        Source {
            name: bookmark.name,
            guid: bookmark.guid,
            creation_txg: bookmark.creation_txg,
        }
    } else {
        Source::from(&pool.snapshot_info(&from_full)?)
    };
    if source.creation_txg >= to.creation_txg {
        return Err(SendError::Refused(format!(
            "cannot send {} from {from_full}: the source is not older than the target",
            to.name
        )));
    }
    if !intermediates {
        return Ok(vec![(Some(source), to.clone())]);
    }
    let chain = snapshot_chain(pool, file_system, source.creation_txg, to.creation_txg)?;
    Ok(chain
        .windows(2)
        .map(|pair| (Some(Source::from(&pair[0])), pair[1].clone()))
        .collect())
}

/// One substream to send: its source (none for a full one), its target, and the target file
/// system's properties.
type Substream = (Option<Source>, SnapshotInfo, Vec<(String, String)>);

/// The source of an incremental stream: a snapshot or a bookmark.
struct Source {
    name: String,
    guid: u64,
    creation_txg: u64,
}

impl From<&SnapshotInfo> for Source {
    fn from(snapshot: &SnapshotInfo) -> Source {
        Source {
            name: snapshot.name.clone(),
            guid: snapshot.guid,
            creation_txg: snapshot.creation_txg,
        }
    }
}

struct Sender<'a, W: Write> {
    /// Compressed blocks go as stored (`send -c`).
    compressed: bool,
    /// Payloads are hashed whole into the chain (no `FEATURE_PAYLOAD_DIGEST`).
    whole_payload_chain: bool,
    /// With `send -R`, the file system whose tree is sent: names below it map to the
    /// receiver's target.
    top: Option<String>,
    io: Arc<BlockIo>,
    writer: StreamWriter<W>,
    /// Blocks born at or before this txg are the receiver's already.
    from_txg: u64,
    dry_run: bool,
    /// Bytes a dry run would have written.
    estimate: u64,
    report: SendReport,
    /// FREEOBJECTS and FREE records not yet written, so that adjacent ones coalesce.
    pending_free_objects: Option<(u64, u64)>,
    pending_free: Option<(u64, u64, u64)>,
    /// Records before this (object, offset) are left out (`send -t`).
    resume_at: Option<(u64, u64)>,
    progress: &'a mut dyn FnMut(u64),
}

impl<W: Write> Sender<'_, W> {
    fn substream(
        &mut self,
        objset: Arc<ObjectSet>,
        from: Option<&Source>,
        to: &SnapshotInfo,
        properties: &[(String, String)],
    ) -> Result<(), SendError> {
        self.from_txg = from.map_or(0, |from| from.creation_txg);
        let start_bytes = self.stream_bytes();
        let (resume_object, resume_offset) = self.resume_at.unwrap_or((0, 0));
        let mut features = FEATURE_SPILL;
        if !self.whole_payload_chain {
            features |= FEATURE_PAYLOAD_DIGEST;
        }
        if self.compressed {
            features |= FEATURE_COMPRESSED;
        }
        if self.resume_at.is_some() {
            features |= FEATURE_RESUMING;
        }
        self.emit(&Record::Begin(Box::new(Begin {
            version: STREAM_VERSION,
            features,
            flags: if self.top.is_some() {
                FLAG_RECURSIVE
            } else {
                0
            },
            from_guid: from.map_or(0, |from| from.guid),
            to_guid: to.guid,
            creation_time: to.creation_time,
            to_txg: to.creation_txg,
            from_txg: self.from_txg,
            names: BeginNames {
                to_name: to.name.clone(),
                from_name: from.map(|from| from.name.clone()).unwrap_or_default(),
                properties: properties.to_vec(),
                top: self.top.clone().unwrap_or_default(),
                resume_object,
                resume_offset,
            },
        })))?;
        let header = ObjsetHeader::decode(&self.io.read(&objset.synced_root())?)?;
        let meta = header.meta_dnode;
        let per_block = (meta.data_block_size as u64 / DNODE_SIZE as u64).max(1);
        let io = self.io.clone();
        walk_changed::<SendError>(&io, &meta, self.from_txg, &mut |blkid, span, bp| {
            // A resumed stream leaves out the objects before its start.
            if blkid.saturating_add(span).saturating_mul(per_block) <= resume_object {
                return Ok(());
            }
            if bp.is_hole() {
                // Objects freed since the source (a full stream's receiver has none).
                if self.from_txg > 0 {
                    let first = blkid.saturating_mul(per_block).max(1).max(resume_object);
                    let end = blkid.saturating_add(span).saturating_mul(per_block);
                    self.free_objects(first, end.saturating_sub(first))?;
                }
                return Ok(());
            }
            let block = io.read(bp)?;
            for slot in 0..per_block {
                let object = blkid * per_block + slot;
                if object < resume_object {
                    continue;
                }
                let start = slot as usize * DNODE_SIZE;
                let raw = block
                    .get(start..start + DNODE_SIZE)
                    .ok_or_else(|| ObjectError::Corrupt("short dnode block".into()))?;
                if object == 0 {
                    continue;
                }
                let dnode = DnodePhys::decode(raw)?;
                if dnode.is_free() {
                    if self.from_txg > 0 {
                        self.free_objects(object, 1)?;
                    }
                    continue;
                }
                self.object(object, &dnode)?;
            }
            Ok(())
        })?;
        self.flush_frees()?;
        self.emit(&Record::End { to_guid: to.guid })?;
        self.report.substreams.push(SentSubstream {
            from: from.map(|from| from.name.clone()).unwrap_or_default(),
            to: to.name.clone(),
            bytes: self.stream_bytes() - start_bytes,
        });
        Ok(())
    }

    /// Bytes of the stream so far: written, or in a dry run estimated.
    fn stream_bytes(&self) -> u64 {
        if self.dry_run {
            self.estimate
        } else {
            self.writer.bytes()
        }
    }

    /// One object: OBJECT, SPILL, the changed blocks in offset order (holes as FREE), and
    /// a FREE of everything past its last block.
    fn object(&mut self, object: u64, dnode: &DnodePhys) -> Result<(), SendError> {
        self.emit(&Record::Object(Box::new(ObjectRecord {
            object,
            object_type: dnode.object_type,
            bonus_type: dnode.bonus_type,
            checksum: dnode.checksum,
            compression: dnode.compression,
            copies: dnode.copies,
            indirect_block_shift: dnode.indirect_block_shift,
            data_block_size: dnode.data_block_size,
            generation: dnode.generation.0,
            max_blkid: dnode.max_blkid,
            has_spill: dnode.spill.is_some(),
            bonus: dnode.bonus.clone(),
        })))?;
        if let Some(spill) = &dnode.spill {
            let data = if self.dry_run {
                vec![0; spill.size_logical as usize]
            } else {
                self.io.read(spill)?.to_vec()
            };
            self.emit(&Record::Spill { object, data })?;
        }
        let block_size = dnode.data_block_size as u64;
        let end = (dnode.max_blkid + 1).saturating_mul(block_size);
        // A resumed stream starts this object's records at the receiver's position.
        let skip_below = match self.resume_at {
            Some((resume_object, resume_offset)) if resume_object == object => resume_offset,
            _ => 0,
        };
        let io = self.io.clone();
        walk_changed::<SendError>(&io, dnode, self.from_txg, &mut |blkid, span, bp| {
            let offset = blkid.saturating_mul(block_size);
            let length = span.saturating_mul(block_size);
            if offset.saturating_add(length) <= skip_below {
                return Ok(());
            }
            if bp.is_hole() {
                // Holes past the last block are the final FREE's.
                let start = offset.max(skip_below);
                if self.from_txg > 0 && start < end {
                    let length = offset.saturating_add(length).min(end) - start;
                    self.free(object, start, length)?;
                }
                return Ok(());
            }
            if offset < skip_below {
                return Ok(());
            }
            self.data(object, offset, bp)
        })?;
        if self.from_txg > 0 {
            self.free(object, end.max(skip_below), u64::MAX)?;
        }
        Ok(())
    }

    fn data(&mut self, object: u64, offset: u64, bp: &BlockPtr) -> Result<(), SendError> {
        self.flush_frees()?;
        self.report.blocks += 1;
        self.report.records += 1;
        let logical = bp.size_logical as u64;
        let as_stored = self.compressed && bp.compression != Compression::Off && !bp.embedded;
        if self.dry_run {
            let payload = if as_stored {
                bp.size_physical as u64
            } else {
                logical
            };
            self.estimate += super::stream::HEADER_SIZE as u64 + payload;
            return Ok(());
        }
        if as_stored {
            // Read past the cache, as stored: a send must not evict the working set.
            let stored = self.io.read_physical(bp, true)?;
            self.writer
                .write_data(object, offset, logical, bp.compression, &stored)?;
        } else {
            // Past the cache too: a send must not evict the working set.
            let data = self.io.read_cached(bp, CachePolicy::Metadata)?;
            self.writer
                .write_data(object, offset, logical, Compression::Off, &data)?;
        }
        self.tick();
        Ok(())
    }

    fn free_objects(&mut self, first: u64, count: u64) -> Result<(), SendError> {
        if count == 0 {
            return Ok(());
        }
        if let Some((pending_first, pending_count)) = &mut self.pending_free_objects {
            if *pending_first + *pending_count == first {
                *pending_count += count;
                return Ok(());
            }
        }
        self.flush_frees()?;
        self.pending_free_objects = Some((first, count));
        Ok(())
    }

    fn free(&mut self, object: u64, offset: u64, length: u64) -> Result<(), SendError> {
        if let Some((pending_object, pending_offset, pending_length)) = &mut self.pending_free {
            if *pending_object == object && pending_offset.saturating_add(*pending_length) == offset
            {
                *pending_length = pending_length.saturating_add(length);
                return Ok(());
            }
        }
        self.flush_frees()?;
        self.pending_free = Some((object, offset, length));
        Ok(())
    }

    fn flush_frees(&mut self) -> Result<(), SendError> {
        if let Some((first, count)) = self.pending_free_objects.take() {
            self.emit_now(&Record::FreeObjects { first, count })?;
        }
        if let Some((object, offset, length)) = self.pending_free.take() {
            self.emit_now(&Record::Free {
                object,
                offset,
                length,
            })?;
        }
        Ok(())
    }

    /// Write a record (after any pending frees).
    fn emit(&mut self, record: &Record) -> Result<(), SendError> {
        self.flush_frees()?;
        self.emit_now(record)
    }

    fn emit_now(&mut self, record: &Record) -> Result<(), SendError> {
        self.report.records += 1;
        if self.dry_run {
            self.estimate += super::stream::HEADER_SIZE as u64
                + match record {
                    Record::Begin(_) => 256,
                    Record::Object(object) => object.bonus.len() as u64,
                    Record::Spill { data, .. } => data.len() as u64,
                    _ => 0,
                };
            return Ok(());
        }
        self.writer.write(record)?;
        self.tick();
        Ok(())
    }

    fn tick(&mut self) {
        if self.report.records.is_multiple_of(256) {
            (self.progress)(self.writer.bytes());
        }
    }
}

/// Visit, in block order, every level-0 block and every hole of `dnode`'s tree born after
/// `min_birth`, with the first block id it covers and how many blocks that is; subtrees born
/// at or before `min_birth` are skipped whole (nothing under them is newer). Holes carry the
/// txg that made them (a free, or the growth of the tree past never-written blocks); a hole
/// born at txg 0 was never anything.
pub(super) fn walk_changed<E: From<ObjectError>>(
    io: &BlockIo,
    dnode: &DnodePhys,
    min_birth: u64,
    visit: &mut dyn FnMut(u64, u64, &BlockPtr) -> Result<(), E>,
) -> Result<(), E> {
    fn walk<E: From<ObjectError>>(
        io: &BlockIo,
        bp: &BlockPtr,
        first: u64,
        fanout: u64,
        min_birth: u64,
        visit: &mut dyn FnMut(u64, u64, &BlockPtr) -> Result<(), E>,
    ) -> Result<(), E> {
        if bp.birth_logical.0 <= min_birth {
            return Ok(());
        }
        let span = fanout.saturating_pow(u32::from(bp.level));
        if bp.is_hole() || bp.level == 0 {
            return visit(first, span, bp);
        }
        let child_span = fanout.saturating_pow(u32::from(bp.level - 1));
        for (index, child) in read_indirect(io, bp, fanout)?.iter().enumerate() {
            if child.birth_logical > bp.birth_logical {
                return Err(ObjectError::Corrupt(format!(
                    "child born in txg {} under a parent born in txg {}",
                    child.birth_logical, bp.birth_logical
                ))
                .into());
            }
            let child_first = (index as u64)
                .checked_mul(child_span)
                .and_then(|offset| offset.checked_add(first))
                .ok_or_else(|| ObjectError::Corrupt("block id out of range".into()))?;
            walk(io, child, child_first, fanout, min_birth, visit)?;
        }
        Ok(())
    }
    if dnode.is_free() {
        return Ok(());
    }
    if dnode.blkptr.level + 1 != dnode.levels {
        return Err(
            ObjectError::Corrupt("dnode root level does not match its level count".into()).into(),
        );
    }
    walk(io, &dnode.blkptr, 0, dnode.fanout(), min_birth, visit)
}
