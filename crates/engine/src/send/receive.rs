//! Applying a stream: a reader thread that verifies records, a writer (the caller's thread)
//! that applies them with batched writes (see the module documentation of [`super`]).
//!
//! # The pipeline and what a record costs
//! Three threads carry a WRITE record (OpenZFS `dmu_recv.c` has the same split):
//! - the *reader* reads the header and the payload (into one buffer, the one that becomes the
//!   dirty block), checks the chained BLAKE3 checksum of the stream (over each payload's
//!   fletcher4 digest with `FEATURE_PAYLOAD_DIGEST`, the digest then kept as the stored
//!   block's checksum), and checks that a compressed block decompresses to its logical size
//!   (`compress::check_decompresses`: an lz4 stream is walked sequence by sequence with its
//!   decoder's checks, not decoded; zstd is decoded into one reused buffer): every record is
//!   verified before anything trusts it. It hands records to the writer over a bounded queue
//!   in chunks of up to [`CHUNK_RECORDS`] records or [`CHUNK_BYTES`] of payload (a chunk ends
//!   at END), so the writer is woken once per chunk: a wake-up per record cost as much as
//!   the record's other work.
//! - the *writer* enforces the stream's order and gathers WRITE records of one object within
//!   `recv_write_batch_size` bytes into one
//!   transaction. A batch's whole blocks go to [`ObjectSet::write_blocks`] in one call: one
//!   dnode look-up, one admission for the range, one object lock, one dirty-record lock, one
//!   dirty-data report, and the received buffers become the dirty records (no copy). A
//!   record that is not one whole block goes through `ObjectSet::write`. Every sixteenth of
//!   the dirty data that starts a sync by itself, it asks for a sync ([`TxgManager::kick`]),
//!   so that the sync thread works beside it from the start and END waits for a small txg.
//! - the *sync thread* writes the blocks in the txg's sync. A `send -c` block is kept as its
//!   payload only (`DirtyBlock::Stored`: never decompressed unless read before its sync) and
//!   stored as it arrived, the payload itself handed to the write queue when it fills its
//!   sectors (`BlockIo::write_stored`): what it costs there is the allocation and the I/O,
//!   and the block pointer's checksum over the payload unless the stream's digest gave it. A plain block is compressed by the sync's
//!   compression threads and written from that payload, also without a copy. Received
//!   blocks are not kept in the cache (`DirtyBlock::Received`), as OpenZFS's lightweight
//!   receive writes bypass the ARC.
//!
//! So a `-c` record costs one allocation (its payload), one copy out of the input buffer,
//! its fletcher4 digest and BLAKE3 over 160 bytes (the stream checksum, `stream.rs` `Chain`),
//! the decompression check and the write; a plain record adds the compression (which
//! dominates). Measured on a 2-core VM beside other
//! builds (`tarn bench receive`, 8 KiB records of text, lz4): see docs/design/11-send.md §2.17.

use std::io::Read;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use crate::block::blkptr::Compression;
use crate::block::compress;
use crate::dataset::props::Property;
use crate::object::phys::check_addressable;
use crate::object::{ObjectError, ObjectInfo, ObjectProps, ObjectSet, ObjectSettings, WholeBlock};
use crate::pool::{Pool, PoolError};
use crate::txg::TxgManager;
use crate::types::ObjectId;

use crate::pool::receiving::ResumeTracker;

use super::resume::{resume_target, StreamDescription};
use super::stream::{
    Begin, ObjectRecord, Record, StreamReader, FEATURES_KNOWN, FEATURE_RESUMING, FLAGS_KNOWN,
    FLAG_RECURSIVE, STREAM_VERSION,
};
use super::SendError;

/// How a receive goes.
#[derive(Clone, Debug)]
pub struct ReceiveOptions {
    /// Roll the target back to the stream's source first, discarding changes and newer
    /// snapshots (`receive -F`).
    pub force: bool,
    /// Logical bytes of WRITE records to one object applied in one transaction; a record
    /// larger than it is a batch of its own; 0 or a size below one record: one record per
    /// transaction. None: the pool's `recv_write_batch_size` tunable (1 MiB, as OpenZFS's
    /// `zfs_recv_write_batch_size`).
    pub batch_bytes: Option<u64>,
    /// Records the reader may get ahead of the writer.
    pub queue_records: usize,
    /// Properties of the stream not to set (`receive -x`).
    pub exclude: Vec<String>,
    /// Properties to set on every received file system, over the stream's (`receive -o`).
    pub set: Vec<(String, String)>,
    /// Keep what was applied if the receive stops part-way, with its position, so that
    /// `send -t` can continue it (`receive -s`; see `send/resume.rs`).
    pub resumable: bool,
}

impl Default for ReceiveOptions {
    fn default() -> Self {
        ReceiveOptions {
            force: false,
            batch_bytes: None,
            queue_records: 256,
            exclude: Vec::new(),
            set: Vec::new(),
            resumable: false,
        }
    }
}

/// What a receive did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiveReport {
    /// The snapshots received, full names, in order.
    pub snapshots: Vec<String>,
    pub records: u64,
    /// Data blocks written from WRITE records.
    pub blocks: u64,
    /// Bytes of the stream.
    pub bytes: u64,
    /// Transactions that applied WRITE records (batching makes them fewer than `blocks`).
    pub write_transactions: u64,
}

/// Receive the stream in `input` into `target` (`POOL/FS`, or `POOL/FS@SNAP` to name the
/// snapshot of a single substream).
pub fn receive(
    pool: &Pool,
    target: &str,
    input: &mut (dyn Read + Send),
    options: &ReceiveOptions,
) -> Result<ReceiveReport, SendError> {
    let (file_system, snapshot_name) = match target.split_once('@') {
        Some((file_system, name)) => (file_system, Some(name)),
        None => (target, None),
    };
    pool.core.relative_name(file_system)?;
    let chunks = options.queue_records.div_ceil(CHUNK_RECORDS).max(1);
    let (sender, queue) = sync_channel::<Vec<Item>>(chunks);
    std::thread::scope(|scope| {
        scope.spawn(move || read_records(input, &sender));
        let mut source = Source {
            queue: &queue,
            chunk: Vec::new().into_iter(),
            bytes: 0,
            records: 0,
            fletcher4: None,
        };
        let mut report = ReceiveReport::default();
        let result = receive_substreams(
            pool,
            file_system,
            snapshot_name,
            &mut source,
            options,
            &mut report,
        );
        report.bytes = source.bytes;
        report.records = source.records;
        // Dropping the queue stops the reader at its next chunk.
        drop(queue);
        match result {
            Ok(()) => Ok(report),
            Err(error) => Err(name_what_was_kept(error, &report.snapshots)),
        }
    })
}

/// What the error of a receive that kept whole substreams says, before their names: tools and
/// tests that judge such a refusal look for it.
pub const KEPT_BEFORE_THE_ERROR: &str = "received whole before it, and kept";

/// A stream that goes bad after one or more whole substreams (a second BEGIN missing, bytes
/// after the last END) keeps the snapshots those delivered, as OpenZFS keeps what a stream
/// received before it failed; the error says so, for the person who reads it.
fn name_what_was_kept(error: SendError, kept: &[String]) -> SendError {
    match error {
        SendError::BadStream { at, what } if !kept.is_empty() => SendError::BadStream {
            at,
            what: format!("{what} ({KEPT_BEFORE_THE_ERROR}: {})", kept.join(", ")),
        },
        error => error,
    }
}

/// Most records the reader hands over at once: the writer is woken once per chunk, not once
/// per record (a wake-up costs more than a small record's checks).
const CHUNK_RECORDS: usize = 64;
/// Most payload bytes in one chunk.
const CHUNK_BYTES: usize = 1 << 20;

/// A record, the stream's length up to its end and its payload's fletcher4 checksum if the
/// stream's chain computed it; or why there is none.
type Item = Result<(Record, u64, Option<[u8; 32]>), SendError>;

/// The reader thread: parse and verify records (the stream's chained checksum, and that a
/// compressed block decompresses) and hand them to the writer in chunks, a chunk ending early
/// at END so that a substream is never held back waiting for the next one. Stops after the
/// first error (handed over as the chunk's last item) or when the writer is gone.
fn read_records(input: &mut (dyn Read + Send), sender: &SyncSender<Vec<Item>>) {
    let mut reader = StreamReader::new(input);
    let mut scratch = Vec::new();
    loop {
        let mut chunk = Vec::with_capacity(CHUNK_RECORDS);
        let mut payload_bytes = 0;
        let stop = loop {
            let at = reader.bytes();
            let item = reader.next_record().and_then(|record| {
                check_decompresses(&record, at, &mut scratch)?;
                Ok((record, reader.bytes(), reader.payload_fletcher4()))
            });
            let (stop, end) = match &item {
                Err(_) => (true, true),
                Ok((record, bytes, _)) => {
                    payload_bytes += (*bytes - at) as usize;
                    (false, matches!(record, Record::End { .. }))
                }
            };
            chunk.push(item);
            if end || chunk.len() >= CHUNK_RECORDS || payload_bytes >= CHUNK_BYTES {
                break stop;
            }
        };
        if sender.send(chunk).is_err() || stop {
            return;
        }
    }
}

/// Check that a compressed WRITE record's block decompresses to its logical size
/// ([`compress::check_decompresses`]: an lz4 stream is walked, not decompressed; zstd is
/// decompressed into `scratch`, kept for the next record), so that what is stored as received
/// is known to read back; nothing for any other record. The reader checks each record before
/// it hands it over: the writer, which takes the transactions and waits for the txgs, is
/// the busier thread (when it did this walk, it spent about 60% of its time on it with `-c`).
fn check_decompresses(record: &Record, at: u64, scratch: &mut Vec<u8>) -> Result<(), SendError> {
    match record {
        Record::Write {
            object,
            logical_size,
            compression,
            data,
            ..
        } if *compression != Compression::Off => {
            // (The stream reader bounds the logical size by the largest block.)
            compress::check_decompresses(*compression, data, *logical_size as usize, scratch)
                .map_err(|error| SendError::BadStream {
                    at,
                    what: format!("WRITE of object {object}: {error}"),
                })
        }
        _ => Ok(()),
    }
}

/// The writer's end of the reader's queue.
struct Source<'a> {
    queue: &'a Receiver<Vec<Item>>,
    /// The rest of the chunk being applied.
    chunk: std::vec::IntoIter<Item>,
    bytes: u64,
    records: u64,
    /// The fletcher4 checksum of the last record's payload, if the stream gave it.
    fletcher4: Option<[u8; 32]>,
}

impl Source<'_> {
    fn next(&mut self) -> Result<Record, SendError> {
        self.next_or_end()?
            .ok_or(SendError::Truncated { at: self.bytes })
    }

    /// The next record, or None if the input ended exactly here.
    fn next_or_end(&mut self) -> Result<Option<Record>, SendError> {
        let item = match self.chunk.next() {
            Some(item) => item,
            None => match self.queue.recv() {
                Ok(chunk) => {
                    self.chunk = chunk.into_iter();
                    match self.chunk.next() {
                        Some(item) => item,
                        None => return Ok(None),
                    }
                }
                Err(_) => return Ok(None),
            },
        };
        match item {
            Ok((record, bytes, fletcher4)) => {
                self.bytes = bytes;
                self.fletcher4 = fletcher4;
                self.records += 1;
                Ok(Some(record))
            }
            Err(SendError::Truncated { at }) if at == self.bytes => Ok(None),
            Err(error) => Err(error),
        }
    }
}

fn receive_substreams(
    pool: &Pool,
    file_system: &str,
    snapshot_name: Option<&str>,
    source: &mut Source<'_>,
    options: &ReceiveOptions,
    report: &mut ReceiveReport,
) -> Result<(), SendError> {
    let mut record = source.next()?;
    loop {
        let Record::Begin(begin) = record else {
            return Err(SendError::BadStream {
                at: source.bytes,
                what: format!("expected BEGIN, found {:?}", record.record_type()),
            });
        };
        if let (Some(name), false) = (snapshot_name, report.snapshots.is_empty()) {
            return Err(SendError::Refused(format!(
                "several snapshots cannot all be {file_system}@{name}: name the file system only"
            )));
        }
        let target = target_of(file_system, &begin, source.bytes)?;
        let snapshot = substream(
            pool,
            &target,
            snapshot_name,
            &begin,
            source,
            options,
            report,
        )?;
        report.snapshots.push(snapshot);
        match source.next_or_end()? {
            Some(next) => record = next,
            None => return Ok(()),
        }
    }
}

/// Where a substream goes: `file_system`, or for a member of a tree (`send -R`) the same place
/// below `file_system` as the member has below the tree's root.
fn target_of(file_system: &str, begin: &Begin, at: u64) -> Result<String, SendError> {
    if begin.flags & FLAG_RECURSIVE == 0 {
        return Ok(file_system.to_string());
    }
    let member = begin
        .names
        .to_name
        .split_once('@')
        .map_or(begin.names.to_name.as_str(), |(member, _)| member);
    let top = begin.names.top.as_str();
    let below = member
        .strip_prefix(top)
        .filter(|rest| !top.is_empty() && (rest.is_empty() || rest.starts_with('/')))
        .ok_or_else(|| SendError::BadStream {
            at,
            what: format!("{member} is not within the tree {top:?} the stream sends"),
        })?;
    Ok(format!("{file_system}{below}"))
}

/// Where a substream's records go and how it ends.
struct Prepared {
    /// The file system the records are applied to: the target itself for a full stream, its
    /// hidden clone (`FS/%recv`) for an incremental one.
    write_into: String,
    /// For an incremental stream, the short name of its source snapshot (the hidden clone's
    /// origin), to swap the clone in at the end.
    from: Option<String>,
    /// Where the records start: (0, 0), or a resumed receive's position.
    start: (u64, u64),
    /// The stream continues a partial receive (`send -t`).
    resumed: bool,
    /// For an incremental stream, the txg in which this pool took the source snapshot (0 for
    /// a full stream): an object whose generation is at most this came from the snapshot,
    /// any later one was made by this receive.
    from_txg: u64,
}

/// Receive one substream (BEGIN already read) into `file_system`; returns the snapshot.
fn substream(
    pool: &Pool,
    file_system: &str,
    snapshot_name: Option<&str>,
    begin: &Begin,
    source: &mut Source<'_>,
    options: &ReceiveOptions,
    report: &mut ReceiveReport,
) -> Result<String, SendError> {
    if begin.version != STREAM_VERSION {
        return Err(SendError::Refused(format!(
            "the stream is version {}, this build reads version {STREAM_VERSION}",
            begin.version
        )));
    }
    if begin.flags & !FLAGS_KNOWN != 0 {
        return Err(SendError::Refused(format!(
            "the stream has flags {:#x} this build does not know",
            begin.flags & !FLAGS_KNOWN
        )));
    }
    if begin.features & !FEATURES_KNOWN != 0 {
        return Err(SendError::Refused(format!(
            "the stream needs features {:#x} this build does not have",
            begin.features & !FEATURES_KNOWN
        )));
    }
    let name = match snapshot_name {
        Some(name) => name.to_string(),
        None => begin
            .names
            .to_name
            .split_once('@')
            .map(|(_, name)| name.to_string())
            .filter(|name| !name.is_empty())
            .ok_or_else(|| SendError::BadStream {
                at: source.bytes,
                what: format!("BEGIN names no snapshot: {:?}", begin.names.to_name),
            })?,
    };
    let snapshot = format!("{file_system}@{name}");
    if pool.snapshot_info(&snapshot).is_ok() {
        return Err(SendError::Refused(format!("{snapshot} exists")));
    }
    let prepared = if begin.features & FEATURE_RESUMING != 0 {
        prepare_resume(pool, file_system, begin)?
    } else {
        prepare_target(pool, file_system, begin, options)?
    };
    let tracker = if options.resumable || prepared.resumed {
        Some(pool.track_receive(&prepared.write_into, StreamDescription::of(begin).encode())?)
    } else {
        None
    };
    let result = apply_records(
        pool,
        &prepared,
        tracker.as_ref(),
        begin,
        source,
        options,
        report,
    )
    .and_then(|()| {
        pool.sync()?;
        match &prepared.from {
            None => pool.create_received_snapshot(&snapshot, begin.to_guid, begin.creation_time)?,
            Some(from) => pool.finish_receive_clone(
                file_system,
                from,
                &name,
                (begin.to_guid, begin.creation_time),
                options.force,
            )?,
        }
        let streamed: Vec<&(String, String)> = begin
            .names
            .properties
            .iter()
            .filter(|(property, _)| {
                !options.exclude.contains(property)
                    && !options.set.iter().any(|(set, _)| set == property)
            })
            .collect();
        // The stream's properties are received values (a local setting overrides them, and
        // `inherit -S` returns to them), replacing those of an earlier receive; `-o` settings
        // are local, as `set` before the receive would make them.
        if !begin.names.properties.is_empty() {
            let keeping: Vec<&str> = streamed.iter().map(|(name, _)| name.as_str()).collect();
            pool.clear_received_properties(file_system, &keeping)?;
        }
        let settings = streamed
            .into_iter()
            .map(|(property, value)| (property, value, true))
            .chain(
                options
                    .set
                    .iter()
                    .map(|(property, value)| (property, value, false)),
            );
        for (property, value, received) in settings {
            let set = if received {
                pool.set_received_property(file_system, property, value)
            } else {
                pool.set_property(file_system, property, Some(value))
            };
            match set {
                // As zfs receive: a limit the received data does not fit in (a quota below
                // what the stream brought) is not set, and the receive stands; so is an owner
                // quota this pool cannot keep (no feature@user_accounting) or a bad one, and a
                // user property this pool cannot keep (no feature@user_properties).
                Err(error @ (PoolError::BadProperty(_) | PoolError::OutOfSpace(_)))
                    if Property::from_name(property).is_some_and(Property::is_space_limit)
                        || crate::dataset::owner_quotas::OwnerProperty::is_owner_property_name(
                            property,
                        )
                        || crate::dataset::props::is_user_property_name(property) =>
                {
                    log::warn!("cannot receive {property} property on {file_system}: {error}");
                }
                other => other?,
            }
        }
        if tracker.is_some() && prepared.from.is_none() {
            // (The hidden clone of an incremental receive took its position with it.)
            pool.forget_receive(file_system)?;
        }
        Ok(())
    });
    if let Err(error) = result {
        if tracker.is_some() && pool.has_dataset(&prepared.write_into) {
            // Kept for `send -t`: what was applied reaches disk with its position.
            match pool.sync() {
                Ok(_) => log::warn!(
                    "the receive into {file_system} stopped part-way ({error}); what it \
                     applied is kept: resume it with the receive_resume_token of \
                     {file_system}, or abandon it with receive -A"
                ),
                Err(sync) => log::error!("cannot keep the partial receive: {sync}"),
            }
            return Err(error);
        }
        // A new file system, or the hidden clone, goes; the target stays as it was.
        if pool.has_dataset(&prepared.write_into) {
            if let Err(undo) = pool.destroy_dataset(&prepared.write_into, true) {
                log::error!(
                    "after a failed receive into {file_system}, could not destroy {}: {undo}",
                    prepared.write_into
                );
            }
        }
        return Err(error);
    }
    log::info!(
        "received {snapshot} ({} records, {} bytes so far)",
        source.records,
        source.bytes
    );
    Ok(snapshot)
}

/// Continue a partial receive into `file_system` (a stream with `FEATURE_RESUMING`).
fn prepare_resume(pool: &Pool, file_system: &str, begin: &Begin) -> Result<Prepared, SendError> {
    let write_into = resume_target(pool, file_system, begin)?;
    let (from, from_txg) = match begin.from_guid {
        0 => (None, 0),
        guid => pool
            .core
            .snapshots_of(file_system)?
            .into_iter()
            .find(|snapshot| snapshot.guid == guid)
            .and_then(|snapshot| {
                snapshot
                    .name
                    .split_once('@')
                    .map(|(_, name)| (Some(name.to_string()), snapshot.creation_txg))
            })
            .ok_or_else(|| {
                SendError::Refused(format!(
                    "{file_system} no longer has the stream's source {}",
                    begin.names.from_name
                ))
            })?,
    };
    Ok(Prepared {
        write_into,
        from,
        start: (begin.names.resume_object, begin.names.resume_offset),
        resumed: true,
        from_txg,
    })
}

/// Make a place for the substream: a new file system for a full stream; for an incremental
/// one, the hidden clone of the target's snapshot the stream starts from, which must be the
/// target's newest with no change since (unless `force`: the target is then rolled back when
/// the receive ends, not before, so that a failed receive leaves it as it was).
fn prepare_target(
    pool: &Pool,
    file_system: &str,
    begin: &Begin,
    options: &ReceiveOptions,
) -> Result<Prepared, SendError> {
    super::resume::refuse_if_partial(pool, file_system)?;
    if begin.from_guid == 0 {
        if pool.has_dataset(file_system) {
            return Err(SendError::Refused(format!(
                "{file_system} exists, and a full stream makes a new file system \
                 (receive into a new name, or send incrementally from a snapshot it has)"
            )));
        }
        pool.create_dataset_for_receive(file_system)?;
        return Ok(Prepared {
            write_into: file_system.to_string(),
            from: None,
            start: (0, 0),
            resumed: false,
            from_txg: 0,
        });
    }
    if !pool.has_dataset(file_system) {
        return Err(SendError::Refused(format!(
            "{file_system} does not exist, and an incremental stream applies to a snapshot of it"
        )));
    }
    let mut snapshots = pool.core.snapshots_of(file_system)?;
    snapshots.sort_by_key(|snapshot| snapshot.creation_txg);
    let Some(from) = snapshots
        .iter()
        .find(|snapshot| snapshot.guid == begin.from_guid)
    else {
        return Err(SendError::Refused(format!(
            "{file_system} has no snapshot matching the stream's source {} (guid {:#x})",
            begin.names.from_name, begin.from_guid
        )));
    };
    let newest = snapshots.last().expect("one was found");
    pool.sync()?;
    let modified = pool.modified_since_newest_snapshot(file_system)?;
    if (newest.guid != from.guid || modified) && !options.force {
        return Err(SendError::Refused(if newest.guid != from.guid {
            format!(
                "{file_system} has snapshots newer than {} (-F rolls back to it and destroys \
                 them)",
                from.name
            )
        } else {
            format!(
                "{file_system} was modified since {} (-F rolls the changes back; reading \
                 files changes their access times unless atime=off)",
                from.name
            )
        }));
    }
    let clone = pool.create_receive_clone(&from.name)?;
    let short = from
        .name
        .split_once('@')
        .map_or(from.name.as_str(), |(_, name)| name);
    Ok(Prepared {
        write_into: clone,
        from: Some(short.to_string()),
        start: (0, 0),
        resumed: false,
        from_txg: from.creation_txg,
    })
}

/// Apply records up to and including END.
fn apply_records(
    pool: &Pool,
    prepared: &Prepared,
    tracker: Option<&Arc<ResumeTracker>>,
    begin: &Begin,
    source: &mut Source<'_>,
    options: &ReceiveOptions,
    report: &mut ReceiveReport,
) -> Result<(), SendError> {
    let mut writer = Writer {
        objset: pool.dataset_objset(&prepared.write_into)?,
        resume: tracker.map(|tracker| (pool, tracker.clone())),
        position: prepared.start,
        txgs: pool.core.txgs.clone(),
        batch: Vec::new(),
        block_size: 0,
        indirect_block_shift: 0,
        batch_bytes: 0,
        batch_limit: options
            .batch_bytes
            .unwrap_or(pool.core.io.tunables.recv_write_batch_size),
        current: None,
        last_end: 0,
        dirtied: 0,
        sync_every: sync_every(&pool.core.io.tunables),
        next_object: prepared.start.0.max(1),
        source_txg: begin.from_txg,
        target_txg: prepared.from_txg,
        report,
    };
    writer.note_position()?;
    loop {
        let at = source.bytes;
        let record = source.next()?;
        let bad = |what: String| SendError::BadStream { at, what };
        match record {
            Record::End { to_guid } => {
                writer.flush()?;
                if to_guid != begin.to_guid {
                    return Err(bad(format!(
                        "END for guid {to_guid:#x} in a stream of guid {:#x}",
                        begin.to_guid
                    )));
                }
                return Ok(());
            }
            Record::Begin(_) => return Err(bad("BEGIN inside a substream".into())),
            Record::Object(object) => writer
                .object(&object)
                .map_err(|error| at_record(error, at))?,
            Record::FreeObjects { first, count } => writer.free_objects(first, count, at)?,
            Record::Write {
                object,
                offset,
                logical_size,
                compression,
                data,
            } => {
                writer.check_position(object, offset, at)?;
                writer
                    .check_addressable(offset, logical_size)
                    .map_err(|what| {
                        bad(format!(
                            "WRITE of object {object} at offset {offset}: {what}"
                        ))
                    })?;
                writer.write(
                    offset,
                    ReceivedBlock {
                        logical_size,
                        compression,
                        data,
                        fletcher4: source.fletcher4,
                    },
                )?;
            }
            Record::Spill { object, data } => {
                writer.check_position(object, writer.last_end, at)?;
                writer.flush()?;
                writer
                    .in_tx(|objset, tx| objset.set_spill(tx, ObjectId(object), Some(data)))
                    .map_err(|error| at_record(error, at))?;
            }
            Record::Free {
                object,
                offset,
                length,
            } => {
                writer.check_position(object, offset, at)?;
                writer.check_free(offset, length).map_err(|what| {
                    bad(format!(
                        "FREE of object {object} at offset {offset}, length {length}: {what}"
                    ))
                })?;
                writer.flush()?;
                writer.free(object, offset, length)?;
            }
        }
    }
}

/// An error applying the record at byte `at`, said so.
fn at_record(error: SendError, at: u64) -> SendError {
    match error {
        SendError::Object(ObjectError::Invalid(what)) => SendError::BadStream { at, what },
        other => other,
    }
}

/// A WRITE record's block: its logical bytes, or (`compression` not off) its payload as
/// stored, which the reader checked decompresses to `logical_size` bytes.
struct ReceivedBlock {
    logical_size: u64,
    compression: Compression,
    data: Vec<u8>,
    /// The fletcher4 checksum of `data`, if the stream's chain computed it: the sync derives
    /// a stored block's checksum from it rather than reading the payload again.
    fletcher4: Option<[u8; 32]>,
}

/// Applies records to the target's object set.
struct Writer<'a> {
    objset: Arc<ObjectSet>,
    /// A resumable receive's position keeper.
    resume: Option<(&'a Pool, Arc<ResumeTracker>)>,
    /// Every record before (object, offset) is applied once the current transaction is.
    position: (u64, u64),
    txgs: Arc<TxgManager>,
    /// WRITE records of `current` waiting for one transaction, by offset.
    batch: Vec<(u64, ReceivedBlock)>,
    /// The data block size of `current`.
    block_size: u64,
    /// The indirect block shift of `current`.
    indirect_block_shift: u8,
    batch_bytes: u64,
    batch_limit: u64,
    /// The object of the last OBJECT record: the one WRITE, SPILL and FREE records address.
    current: Option<u64>,
    /// Where the last WRITE or FREE of `current` ended: the next may not start before it.
    last_end: u64,
    /// Logical bytes of WRITE records applied since the writer last asked for a sync.
    dirtied: u64,
    /// Ask for a sync each time `dirtied` reaches this ([`sync_every`]).
    sync_every: u64,
    /// Objects below this have had their record (OBJECT or FREEOBJECTS).
    next_object: u64,
    /// The sender's txg of the stream's source snapshot (BEGIN's from txg; 0 for a full
    /// stream): an OBJECT record of a generation past it is an object allocated since.
    source_txg: u64,
    /// This pool's txg of the same snapshot ([`Prepared::from_txg`]).
    target_txg: u64,
    report: &'a mut ReceiveReport,
}

/// How much a receive writes between the syncs it asks for: the `recv_sync_share` tunable's
/// share (a sixteenth) of the dirty data that starts a sync by itself
/// (`dirty_data_sync_percent` of `dirty_data_max`: 12.8 MiB by default), at least 1 MiB;
/// never with a share of 0. Left to the dirty-data trigger alone, the first sync of a
/// receive started only after 205 MiB (the reader and writer ran with the sync thread idle),
/// and at END the receive waited for the sync of everything since the last one with nothing
/// running beside it: about a third of a 512 MiB `-c` receive's time, one core idle.
/// Asked for early and often, the sync runs beside the reader and writer (a sync asked for
/// while one runs starts when it ends, with what came meanwhile), and END waits for one
/// small txg. A txg's own cost (space maps, the MOS, the uberblock) is small beside the
/// ~1,600 blocks of 8 KiB each one carries.
fn sync_every(tunables: &crate::tunables::Tunables) -> u64 {
    match tunables.recv_sync_share {
        0 => u64::MAX,
        share => {
            (tunables.dirty_data_max * tunables.dirty_data_sync_percent / 100 / share).max(1 << 20)
        }
    }
}

impl Writer<'_> {
    fn in_tx(
        &self,
        change: impl FnOnce(&ObjectSet, &crate::object::Tx) -> Result<(), ObjectError>,
    ) -> Result<(), SendError> {
        let hold = self.txgs.assign()?;
        change(&self.objset, &hold.tx())?;
        if let Some((pool, tracker)) = &self.resume {
            pool.note_receive_position(tracker, hold.txg(), self.position);
        }
        Ok(())
    }

    /// Note the position in the open txg (after changes that took their own transactions).
    fn note_position(&self) -> Result<(), SendError> {
        if let Some((pool, tracker)) = &self.resume {
            let hold = self.txgs.assign()?;
            pool.note_receive_position(tracker, hold.txg(), self.position);
        }
        Ok(())
    }

    /// WRITE, SPILL and FREE records address the current object, in offset order.
    fn check_position(&self, object: u64, offset: u64, at: u64) -> Result<(), SendError> {
        if self.current != Some(object) {
            return Err(SendError::BadStream {
                at,
                what: format!(
                    "a record for object {object} outside its OBJECT record (current object {:?})",
                    self.current
                ),
            });
        }
        if offset < self.last_end {
            return Err(SendError::BadStream {
                at,
                what: format!(
                    "object {object}: a record at offset {offset} behind the previous one \
                     (which ended at {})",
                    self.last_end
                ),
            });
        }
        Ok(())
    }

    /// Whether `length` bytes at `offset` of the current object lie within what its tree can
    /// address: the object layer's rule ([`check_addressable`]), checked when the record
    /// arrives so that no record can make the sync fail (a sync failure suspends the pool).
    fn check_addressable(&self, offset: u64, length: u64) -> Result<(), String> {
        check_addressable(
            self.block_size as u32,
            self.indirect_block_shift,
            offset,
            length,
        )
    }

    /// A FREE of the current object: whole blocks (the sender frees nothing else), to the end
    /// (`u64::MAX`) or within what the object can address.
    fn check_free(&self, offset: u64, length: u64) -> Result<(), String> {
        let unaligned = |value: u64| !value.is_multiple_of(self.block_size.max(1));
        if unaligned(offset) || (length != u64::MAX && unaligned(length)) {
            return Err(format!("not whole blocks of {} bytes", self.block_size));
        }
        self.check_addressable(offset, if length == u64::MAX { 0 } else { length })
    }

    fn object(&mut self, record: &ObjectRecord) -> Result<(), SendError> {
        self.flush()?;
        let refuse = |what: String| {
            Err(SendError::Object(ObjectError::Invalid(format!(
                "OBJECT {}: {what}",
                record.object
            ))))
        };
        if record.object < self.next_object {
            return refuse(format!(
                "after object {}: objects must come in increasing order",
                self.next_object - 1
            ));
        }
        let limit = self.objset.object_number_limit();
        if record.object >= limit {
            return refuse(format!("past the {limit} objects the object set can hold"));
        }
        // (The stream reader checked the block size and indirect shift.) The object's last
        // block must be one its tree can address.
        let blocks = record.max_blkid.checked_add(1);
        if let Err(what) = blocks
            .and_then(|blocks| blocks.checked_mul(u64::from(record.data_block_size)))
            .ok_or_else(|| format!("max block id {} past the largest offset", record.max_blkid))
            .and_then(|end| {
                check_addressable(record.data_block_size, record.indirect_block_shift, 0, end)
            })
        {
            return refuse(what);
        }
        self.current = Some(record.object);
        self.last_end = 0;
        self.next_object = record.object + 1;
        self.position = (record.object, 0);
        let object = ObjectId(record.object);
        let props = ObjectProps {
            object_type: record.object_type,
            data_block_size: record.data_block_size,
            indirect_block_shift: record.indirect_block_shift,
            checksum: record.checksum,
            compression: record.compression,
            copies: record.copies,
        };
        let existing = match self.objset.info(object) {
            Ok(info) => Some(info),
            Err(ObjectError::NoSuchObject(_)) => None,
            Err(error) => return Err(error.into()),
        };
        // The object the receiver has is the one the record describes unless the sender
        // allocated its number again since the source snapshot (a generation past the
        // source's txg) while the receiver's came from that snapshot (a generation at most
        // the snapshot's txg here; a later one was made by this receive, resumed). A new
        // object is freed and made again, whatever its type and block size, so that nothing
        // of the old one (contents, indirect block size, checksum, compression, copies)
        // survives; so is one whose type or block size changed.
        let reallocated = |info: &ObjectInfo| {
            record.generation > self.source_txg && info.generation.0 <= self.target_txg
        };
        self.in_tx(|objset, tx| {
            match existing {
                Some(info)
                    if info.object_type == record.object_type
                        && info.data_block_size == record.data_block_size
                        && !reallocated(&info) =>
                {
                    // The same object, changed: its settings, bonus buffer and spill block
                    // follow.
                    objset.set_settings(
                        tx,
                        object,
                        ObjectSettings {
                            checksum: record.checksum,
                            compression: record.compression,
                            copies: record.copies,
                            indirect_block_shift: record.indirect_block_shift,
                        },
                    )?;
                    if !record.has_spill && objset.has_spill(object)? {
                        objset.set_spill(tx, object, None)?;
                    }
                    objset.set_bonus(tx, object, record.bonus_type, &record.bonus)
                }
                Some(_) => {
                    objset.remove_object(tx, object)?;
                    objset.create_object_at(tx, object, props, record.bonus_type, &record.bonus)
                }
                None => {
                    objset.create_object_at(tx, object, props, record.bonus_type, &record.bonus)
                }
            }
        })
        .map_err(|error| match error {
            SendError::Object(ObjectError::Invalid(what)) => SendError::Object(
                ObjectError::Invalid(format!("OBJECT {}: {what}", record.object)),
            ),
            other => other,
        })?;
        self.block_size = u64::from(record.data_block_size);
        self.indirect_block_shift = record.indirect_block_shift;
        Ok(())
    }

    fn free_objects(&mut self, first: u64, count: u64, at: u64) -> Result<(), SendError> {
        self.flush()?;
        if first < self.next_object || first == 0 {
            return Err(SendError::BadStream {
                at,
                what: format!(
                    "FREEOBJECTS from {first} after object {}",
                    self.next_object - 1
                ),
            });
        }
        let Some(end) = first.checked_add(count) else {
            return Err(SendError::BadStream {
                at,
                what: format!("FREEOBJECTS from {first}: count {count} ends past u64"),
            });
        };
        let bound = end.min(self.objset.object_number_bound());
        for object in (first..bound).map(ObjectId) {
            if self.objset.exists(object) {
                self.in_tx(|objset, tx| objset.remove_object(tx, object))?;
            }
        }
        self.current = None;
        self.next_object = end;
        self.position = (end, 0);
        self.note_position()
    }

    fn write(&mut self, offset: u64, block: ReceivedBlock) -> Result<(), SendError> {
        let length = block.logical_size;
        if let Some((first, _)) = self.batch.first() {
            if offset >= first.saturating_add(self.batch_limit) {
                self.flush()?;
            }
        }
        self.last_end = offset + length;
        self.batch_bytes += length;
        self.batch.push((offset, block));
        self.report.blocks += 1;
        if self.batch_bytes >= self.batch_limit {
            self.flush()?;
        }
        Ok(())
    }

    /// Apply the batched WRITE records in one transaction.
    fn flush(&mut self) -> Result<(), SendError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let object = ObjectId(self.current.expect("writes follow their OBJECT"));
        let batch = std::mem::take(&mut self.batch);
        self.dirtied += self.batch_bytes;
        self.batch_bytes = 0;
        self.report.write_transactions += 1;
        let block_size = self.block_size.max(1);
        self.position = (object.0, self.last_end);
        // Whole blocks go in together, as received (the buffers become the dirty records);
        // a record that is not one whole block (a block size change, a short tail) is
        // written by offset, decompressed first if it came compressed.
        let mut whole = Vec::with_capacity(batch.len());
        let mut partial = Vec::new();
        for (offset, block) in batch {
            if offset % block_size == 0 && block.logical_size == block_size {
                let contents = match block.compression {
                    Compression::Off => WholeBlock::Data(block.data),
                    compression => WholeBlock::Stored {
                        compression,
                        payload: block.data,
                        fletcher4: block.fletcher4,
                    },
                };
                whole.push((offset / block_size, contents));
            } else {
                partial.push((offset, block));
            }
        }
        self.in_tx(|objset, tx| {
            objset.write_blocks(tx, object, whole)?;
            for (offset, block) in partial {
                match block.compression {
                    Compression::Off => objset.write(tx, object, offset, &block.data)?,
                    compression => {
                        let data = compress::decompress(
                            compression,
                            &block.data,
                            block.logical_size as usize,
                        )?;
                        objset.write(tx, object, offset, &data)?
                    }
                }
            }
            Ok(())
        })?;
        if self.dirtied >= self.sync_every {
            self.dirtied = 0;
            self.txgs.kick();
        }
        Ok(())
    }

    fn free(&mut self, object: u64, offset: u64, length: u64) -> Result<(), SendError> {
        let id = ObjectId(object);
        if length == u64::MAX {
            // To the end: in chunks of bounded txgs, as a truncation is.
            self.objset.free_long_range(&self.txgs, id, offset)?;
            self.last_end = u64::MAX;
            // Nothing of this object follows.
            self.position = (object + 1, 0);
            self.note_position()
        } else {
            self.last_end = offset.saturating_add(length);
            self.position = (object, self.last_end);
            self.in_tx(|objset, tx| objset.free_range(tx, id, offset, length))
        }
    }
}
