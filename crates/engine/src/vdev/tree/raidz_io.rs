//! RAID-Z block I/O: a block's columns written through the children's queues, and read back
//! with reconstruction until the caller's check accepts the data (the layout and the theory are
//! in `vdev/raidz`). A child module of the tree, since it works on a [`TopVdev`]'s children.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::super::queue::{read_each_at, write_each_at, Completion, IoClass, VdevQueue};
use super::super::raidz::{block_map, math, RaidzGeometry, RaidzMap};
use super::super::{buffers, VdevError, VDEV_LABEL_START_SIZE};
use super::{offline_error, Leaf, TopVdev, WriteDone};

/// Children whose column of a block was found bad by a read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaidzRead {
    /// The block's data: `psize` bytes (rounded up to the vdev's sector).
    pub data: Vec<u8>,
    /// Children whose column should be rewritten: it failed its read, was stale (the child
    /// missed the block's txg), held wrong bytes, or (scrub) held parity that disagrees.
    pub repair: Vec<usize>,
    /// Columns read or reconstructed (a scrub's count of copies).
    pub columns: usize,
}

/// Why a RAID-Z block could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RaidzReadError {
    /// More columns are unreadable than there is parity.
    #[error("{missing} of {columns} columns unreadable with {parity} parity: {first_error}")]
    TooManyMissing {
        missing: usize,
        columns: usize,
        parity: usize,
        first_error: String,
    },
    /// No combination of up to `parity` columns assumed bad gives data that verifies.
    #[error("no reconstruction from {columns} columns with {parity} parity verifies")]
    NoReconstruction { columns: usize, parity: usize },
}

/// How many columns of one block's write reached no child of their slot, and the first error.
struct ColumnsWrite {
    top: super::super::VdevId,
    offset: u64,
    length: u64,
    parity: usize,
    txg: u64,
    /// Leaf writes not completed yet.
    remaining: AtomicUsize,
    /// Per column: the leaves of its slot that took it.
    written: Vec<AtomicUsize>,
    first_error: Mutex<Option<String>>,
    done: Mutex<Option<WriteDone>>,
}

impl ColumnsWrite {
    /// Record one leaf's outcome for column `column`; the last runs the caller's completion.
    fn leaf_done(
        &self,
        column: usize,
        leaf: &Leaf,
        device_offset: u64,
        result: std::io::Result<()>,
    ) {
        match result {
            Ok(()) => {
                leaf.dtl.note_written(self.txg);
                self.written[column].fetch_add(1, Ordering::AcqRel);
            }
            Err(source) => {
                leaf.dtl.record(self.txg);
                let error =
                    VdevError::io(&*leaf.device, "write", device_offset, self.length, source);
                self.first_error.lock().get_or_insert(error.to_string());
            }
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(done) = self.done.lock().take() {
                done(self.finish());
            }
        }
    }

    fn finish(&self) -> Result<(), VdevError> {
        let failed = (self.written.iter())
            .filter(|written| written.load(Ordering::Acquire) == 0)
            .count();
        if failed <= self.parity {
            return Ok(());
        }
        Err(VdevError::NoChildWritten {
            top: self.top,
            offset: self.offset,
            length: self.length,
            first_error: self.first_error.lock().clone().unwrap_or_default(),
        })
    }
}

/// Write the block `data` (its length is the block's psize, a multiple of the sector) at vdev
/// offset `offset` in syncing txg `txg`: every column, parity included, to every child of its
/// slot. `done` runs once every write has completed; it fails when more columns than the
/// parity reached no child.
pub fn write_async(
    top: &TopVdev,
    geometry: &RaidzGeometry,
    class: IoClass,
    offset: u64,
    data: Arc<Vec<u8>>,
    txg: u64,
    done: impl FnOnce(Result<(), VdevError>) + Send + 'static,
) {
    let map = block_map(geometry, offset, data.len() as u64);
    // Children that take no column still miss the txg when offline: their log says so, as a
    // mirror child's does, so that resilver visits the txg.
    for slot in 0..geometry.children {
        if map.child_span(slot).is_none() {
            for &child in top.slot_children(slot) {
                let leaf = &top.children[child];
                if leaf.is_offline() {
                    leaf.dtl.record(txg);
                }
            }
        }
    }
    let count = map.accessed_columns();
    let writes: usize = (map.columns[..count].iter())
        .map(|column| top.slot_children(column.child).len())
        .sum();
    let outcome = Arc::new(ColumnsWrite {
        top: top.id,
        offset,
        length: data.len() as u64,
        parity: map.parity,
        txg,
        remaining: AtomicUsize::new(writes),
        written: (0..count).map(|_| AtomicUsize::new(0)).collect(),
        first_error: Mutex::new(None),
        done: Mutex::new(Some(Box::new(done))),
    });
    // Each column's bytes: a parity column its own buffer, a data column its range of the
    // block's (no copy).
    let parity = parity_of(&map, &data);
    let sources = (parity.into_iter().map(|column| {
        let range = 0..column.len();
        (Arc::new(column), range)
    }))
    .chain(map.data_column_ranges().map(|range| (data.clone(), range)));
    for (index, (column, (bytes, range))) in map.columns.iter().zip(sources).enumerate() {
        let device_offset = VDEV_LABEL_START_SIZE + column.child_offset;
        for &child in top.slot_children(column.child) {
            let leaf = top.children[child].clone();
            if leaf.is_offline() {
                outcome.leaf_done(index, &leaf, device_offset, Err(offline_error(&leaf)));
                continue;
            }
            let outcome = outcome.clone();
            let queue_leaf = leaf.clone();
            leaf.queue.write_shared_range(
                class,
                device_offset,
                bytes.clone(),
                range.clone(),
                Completion::new(move |result| {
                    outcome.leaf_done(index, &queue_leaf, device_offset, result)
                }),
            );
        }
    }
}

/// [`write_async`], waiting for the outcome (the tests' writer; the vdev's is
/// `TopVdev::write_raidz`).
#[cfg(test)]
pub fn write(
    top: &TopVdev,
    geometry: &RaidzGeometry,
    class: IoClass,
    offset: u64,
    data: &[u8],
    txg: u64,
) -> Result<(), VdevError> {
    let (sender, receiver) = std::sync::mpsc::channel();
    let data = Arc::new(data.to_vec());
    write_async(top, geometry, class, offset, data, txg, move |result| {
        let _ = sender.send(result);
    });
    receiver
        .recv()
        .expect("a RAID-Z write completes every column")
}

/// The state of one column during a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ColumnState {
    NotRead,
    Read,
    /// Known bad before any reconstruction: unreadable, offline, or stale (its child missed
    /// the block's txg).
    Missing,
}

/// A block's columns as a read holds them: the parity columns apart, allocated only when they
/// are read or rebuilt, and the data columns as consecutive ranges of one buffer in block
/// order, so that the data a reader gets back is that buffer, never joined or copied. The
/// buffers come from and go back to [`buffers`] (every byte of them is read or rebuilt before
/// it is used).
#[derive(Clone)]
pub(super) struct BlockColumns {
    pub(super) parity: Vec<Vec<u8>>,
    pub(super) data: Vec<u8>,
}

impl BlockColumns {
    pub(super) fn new(map: &RaidzMap) -> BlockColumns {
        BlockColumns {
            parity: vec![Vec::new(); map.parity],
            data: buffers::take(map.data_bytes() as usize),
        }
    }

    /// Give the parity columns their bytes (zero) before they are read or rebuilt.
    pub(super) fn allocate_parity(&mut self, map: &RaidzMap) {
        for column in &mut self.parity {
            if column.is_empty() {
                *column = buffers::take(map.parity_size() as usize);
            }
        }
    }

    /// Every column, parity first, in map order (an unallocated parity column is empty).
    fn slices_mut(&mut self, map: &RaidzMap) -> Vec<&mut [u8]> {
        let mut slices: Vec<&mut [u8]> = Vec::with_capacity(map.accessed_columns());
        slices.extend(self.parity.iter_mut().map(Vec::as_mut_slice));
        let mut rest = self.data.as_mut_slice();
        for column in map.data_column_slice() {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(column.size as usize);
            slices.push(head);
            rest = tail;
        }
        slices
    }

    /// Rebuild the columns in `missing` from the others in place; false if the math refuses
    /// (then nothing changed).
    fn reconstruct(&mut self, map: &RaidzMap, missing: &[usize]) -> bool {
        let mut slices = self.slices_mut(map);
        math::reconstruct(map.parity, &mut slices, missing).is_ok()
    }

    /// The data, leaving the parity columns to go back to the free list.
    pub(super) fn into_data(mut self) -> Vec<u8> {
        std::mem::take(&mut self.data)
    }
}

impl Drop for BlockColumns {
    fn drop(&mut self) {
        for column in self.parity.drain(..) {
            buffers::give(column);
        }
        buffers::give(std::mem::take(&mut self.data));
    }
}

/// The data columns of the block `data` (its bytes in block order, at least up to the last
/// data column's start; a column past its end is short, which the parity math reads as zero
/// padding), as slices of it.
fn data_column_slices<'a>(map: &RaidzMap, data: &'a [u8]) -> Vec<&'a [u8]> {
    map.data_column_ranges()
        .map(|range| &data[range.start.min(data.len())..range.end.min(data.len())])
        .collect()
}

/// The parity columns of the block `data` (see [`data_column_slices`]), in buffers from
/// [`buffers`] (to give back when done with).
pub(super) fn parity_of(map: &RaidzMap, data: &[u8]) -> Vec<Vec<u8>> {
    let mut parity: Vec<Vec<u8>> = (0..map.parity)
        .map(|_| buffers::take(map.parity_size() as usize))
        .collect();
    let mut outputs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    math::generate(map.parity, &data_column_slices(map, data), &mut outputs);
    parity
}

/// Read and reconstruct the block of `psize` bytes at vdev offset `offset`, born in txg
/// `birth`, until `verify` accepts its data (see the module comment). With `scrub`, every
/// column is read and the parity checked against the data as well.
#[allow(clippy::too_many_arguments)]
pub fn read_block(
    top: &TopVdev,
    geometry: &RaidzGeometry,
    class: IoClass,
    offset: u64,
    psize: u64,
    birth: u64,
    scrub: bool,
    verify: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<RaidzRead, RaidzReadError> {
    let map = block_map(geometry, offset, psize);
    let count = map.accessed_columns();
    let parity = map.parity;
    let mut columns = BlockColumns::new(&map);
    let mut state = vec![ColumnState::NotRead; count];
    let mut first_error = String::new();
    // The child each column is read from: the first of its slot that takes I/O and did not
    // miss the block's txg (the slot's own leaf before the one replacing it). A column with
    // none is missing from the start.
    let reader: Vec<usize> = map.columns[..count]
        .iter()
        .enumerate()
        .map(|(index, column)| {
            let slot = top.slot_children(column.child);
            let current = slot.iter().copied().find(|&child| {
                let leaf = &top.children[child];
                leaf.is_usable() && !leaf.dtl.contains(birth)
            });
            current.unwrap_or_else(|| {
                state[index] = ColumnState::Missing;
                let leaf = &top.children[slot[0]];
                if first_error.is_empty() && !leaf.is_usable() {
                    first_error = format!("{} is offline or missing", leaf.path.display());
                }
                slot[0]
            })
        })
        .collect();
    if scrub {
        columns.allocate_parity(&map);
    }
    let first = if scrub { 0 } else { parity };
    read_columns(
        top,
        &map,
        &reader,
        class,
        first..count,
        &mut columns,
        &mut state,
        &mut first_error,
    );
    let data_missing = state[parity..].contains(&ColumnState::Missing);
    if !data_missing && verify(&columns.data) {
        let mut repair = missing_children(&map, &state, top);
        if scrub {
            check_parity(&map, &reader, &columns, &state, &mut repair, top, birth);
        }
        return Ok(RaidzRead {
            data: columns.into_data(),
            repair,
            columns: if scrub { count } else { count - parity },
        });
    }
    // Reconstruction: the parity is needed.
    columns.allocate_parity(&map);
    read_columns(
        top,
        &map,
        &reader,
        class,
        0..parity,
        &mut columns,
        &mut state,
        &mut first_error,
    );
    let known: Vec<usize> = (0..count)
        .filter(|&index| state[index] == ColumnState::Missing)
        .collect();
    if known.len() > parity {
        return Err(RaidzReadError::TooManyMissing {
            missing: known.len(),
            columns: count,
            parity,
            first_error,
        });
    }
    // The columns known bad are rebuilt in place (their bytes are worth nothing); each guess
    // beyond them is tried on a copy, so that the columns as read stay for the next guess.
    if !known.is_empty() && columns.reconstruct(&map, &known) && verify(&columns.data) {
        return Ok(reconstructed_read(
            &map,
            &reader,
            columns,
            &state,
            &[],
            top,
            birth,
            scrub,
        ));
    }
    let present: Vec<usize> = (0..count)
        .filter(|&index| state[index] == ColumnState::Read)
        .collect();
    for extra in 1..=(parity - known.len()) {
        for guess in combinations(&present, extra) {
            // Assuming only parity columns bad changes no data: the data read failed already.
            if guess.iter().all(|&index| index < parity) {
                continue;
            }
            let mut missing = known.clone();
            missing.extend_from_slice(&guess);
            missing.sort_unstable();
            let mut candidate = columns.clone();
            if !candidate.reconstruct(&map, &missing) || !verify(&candidate.data) {
                continue;
            }
            // The guessed columns held wrong bytes: a checksum error on their children.
            for &index in &guess {
                top.record_checksum_error(reader[index]);
            }
            return Ok(reconstructed_read(
                &map, &reader, candidate, &state, &guess, top, birth, scrub,
            ));
        }
    }
    Err(RaidzReadError::NoReconstruction {
        columns: count,
        parity,
    })
}

/// The outcome of a read whose data verified after the columns known missing and those in
/// `guess` (which held wrong bytes) were rebuilt.
#[allow(clippy::too_many_arguments)]
fn reconstructed_read(
    map: &RaidzMap,
    reader: &[usize],
    columns: BlockColumns,
    state: &[ColumnState],
    guess: &[usize],
    top: &TopVdev,
    birth: u64,
    scrub: bool,
) -> RaidzRead {
    let mut repair = missing_children(map, state, top);
    repair.extend(guess.iter().map(|&index| reader[index]));
    if scrub {
        // Parity columns neither missing nor guessed bad are checked against the data.
        let mut checked = state.to_vec();
        for &index in guess {
            checked[index] = ColumnState::Missing;
        }
        check_parity(map, reader, &columns, &checked, &mut repair, top, birth);
    }
    repair.sort_unstable();
    repair.dedup();
    RaidzRead {
        data: columns.into_data(),
        repair,
        columns: map.accessed_columns(),
    }
}

/// Read the columns in `range` that are not read or known missing, all at once; a failed read
/// marks its column missing.
#[allow(clippy::too_many_arguments)]
fn read_columns(
    top: &TopVdev,
    map: &RaidzMap,
    reader: &[usize],
    class: IoClass,
    range: std::ops::Range<usize>,
    columns: &mut BlockColumns,
    state: &mut [ColumnState],
    first_error: &mut String,
) {
    let wanted = |index: usize| {
        range.contains(&index)
            && state[index] == ColumnState::NotRead
            && map.columns[index].size > 0
    };
    let mut requests: Vec<(&VdevQueue, u64, &mut [u8])> = Vec::with_capacity(range.len());
    let mut indices: Vec<usize> = Vec::with_capacity(range.len());
    for (index, buffer) in columns.slices_mut(map).into_iter().enumerate() {
        if wanted(index) {
            indices.push(index);
            requests.push((
                &top.children[reader[index]].queue,
                VDEV_LABEL_START_SIZE + map.columns[index].child_offset,
                buffer,
            ));
        }
    }
    if requests.is_empty() {
        return;
    }
    let results = read_each_at(class, &mut requests);
    for (index, result) in indices.into_iter().zip(results) {
        match result {
            Ok(()) => state[index] = ColumnState::Read,
            Err(source) => {
                let column = &map.columns[index];
                let leaf = &top.children[reader[index]];
                if first_error.is_empty() {
                    *first_error = VdevError::io(
                        &*leaf.device,
                        "read",
                        VDEV_LABEL_START_SIZE + column.child_offset,
                        column.size,
                        source,
                    )
                    .to_string();
                }
                state[index] = ColumnState::Missing;
            }
        }
    }
}

/// The children of the known-missing columns' slots that can take a rewrite.
fn missing_children(map: &RaidzMap, state: &[ColumnState], top: &TopVdev) -> Vec<usize> {
    state
        .iter()
        .enumerate()
        .filter(|(_, state)| **state == ColumnState::Missing)
        .flat_map(|(index, _)| top.slot_children(map.columns[index].child).iter().copied())
        .filter(|&child| top.children[child].is_usable())
        .collect()
}

/// A scrub's parity check: the parity columns that were read and disagree with the verified
/// data in `columns`.
fn check_parity(
    map: &RaidzMap,
    reader: &[usize],
    columns: &BlockColumns,
    state: &[ColumnState],
    repair: &mut Vec<usize>,
    top: &TopVdev,
    birth: u64,
) {
    let expected = parity_of(map, &columns.data);
    for index in 0..map.parity {
        if state[index] == ColumnState::Read && columns.parity[index] != expected[index] {
            let child = reader[index];
            if !top.children[child].dtl.contains(birth) {
                top.record_checksum_error(child);
            }
            repair.push(child);
        }
    }
    expected.into_iter().for_each(buffers::give);
}

/// Every subset of `items` with `size` elements, in lexicographic order.
pub(super) fn combinations(items: &[usize], size: usize) -> Vec<Vec<usize>> {
    let mut result = Vec::new();
    let mut chosen = Vec::with_capacity(size);
    fn extend(
        items: &[usize],
        size: usize,
        start: usize,
        chosen: &mut Vec<usize>,
        out: &mut Vec<Vec<usize>>,
    ) {
        if chosen.len() == size {
            out.push(chosen.clone());
            return;
        }
        for index in start..items.len() {
            chosen.push(items[index]);
            extend(items, size, index + 1, chosen, out);
            chosen.pop();
        }
    }
    extend(items, size, 0, &mut chosen, &mut result);
    result
}

/// The bytes of one column of a block to rewrite: a range of the block's own bytes, or a buffer
/// of its own (regenerated parity, or a data column the block ends inside, zero padded).
enum ColumnBytes {
    Block(std::ops::Range<usize>),
    Own(Vec<u8>),
}

/// The column of the block `physical` (its physical bytes; the map is built from their length
/// rounded up to the sector) at vdev offset `offset` that lies on `child`: where it goes on the
/// child's device, its size and its bytes. `None` if the block has no column there.
fn column_to_rewrite(
    top: &TopVdev,
    geometry: &RaidzGeometry,
    child: usize,
    offset: u64,
    physical: &[u8],
) -> Option<(u64, u64, ColumnBytes)> {
    let map = block_map(geometry, offset, physical.len() as u64);
    let slot = top.slot_of(child)?;
    let index = map.columns[..map.accessed_columns()]
        .iter()
        .position(|column| column.child == slot)?;
    let column = &map.columns[index];
    let bytes = if index < map.parity {
        let mut parity = parity_of(&map, physical);
        let column = parity.swap_remove(index);
        parity.into_iter().for_each(buffers::give);
        ColumnBytes::Own(column)
    } else {
        let range = map.data_column_range(index - map.parity);
        if range.end <= physical.len() {
            ColumnBytes::Block(range)
        } else {
            let mut column = vec![0u8; range.len()];
            let end = range.end.min(physical.len());
            if range.start < end {
                column[..end - range.start].copy_from_slice(&physical[range.start..end]);
            }
            ColumnBytes::Own(column)
        }
    };
    Some((
        VDEV_LABEL_START_SIZE + column.child_offset,
        column.size,
        bytes,
    ))
}

/// Rewrite the column of the block `physical` at vdev offset `offset` that lies on `child`
/// (see [`column_to_rewrite`]): data from the block, parity regenerated. Bytes written, 0 if
/// the block has no column there.
pub fn rewrite_column(
    top: &TopVdev,
    geometry: &RaidzGeometry,
    child: usize,
    offset: u64,
    physical: &[u8],
) -> Result<u64, VdevError> {
    let Some((device_offset, size, bytes)) =
        column_to_rewrite(top, geometry, child, offset, physical)
    else {
        return Ok(0);
    };
    let leaf = &top.children[child];
    let slice = match &bytes {
        ColumnBytes::Block(range) => &physical[range.clone()],
        ColumnBytes::Own(buffer) => buffer.as_slice(),
    };
    let result = if leaf.is_offline() {
        Err(offline_error(leaf))
    } else {
        let results = write_each_at(IoClass::AsyncWrite, &[(&leaf.queue, device_offset, slice)]);
        results.into_iter().next().expect("one result")
    };
    if let ColumnBytes::Own(buffer) = bytes {
        buffers::give(buffer);
    }
    result
        .map(|()| size)
        .map_err(|source| VdevError::io(&*leaf.device, "write", device_offset, size, source))
}

/// [`rewrite_column`] without waiting: `done` gets its outcome, on a queue worker unless the
/// block has no column on `child` or the child is offline (then at once, on this thread). A
/// data column is written from `physical` itself, not copied.
pub fn rewrite_column_async(
    top: &TopVdev,
    geometry: &RaidzGeometry,
    child: usize,
    offset: u64,
    physical: Arc<Vec<u8>>,
    done: impl FnOnce(Result<u64, VdevError>) + Send + 'static,
) {
    let Some((device_offset, size, bytes)) =
        column_to_rewrite(top, geometry, child, offset, &physical)
    else {
        return done(Ok(0));
    };
    let (buffer, range) = match bytes {
        ColumnBytes::Block(range) => (physical, range),
        ColumnBytes::Own(column) => {
            let range = 0..column.len();
            (Arc::new(column), range)
        }
    };
    debug_assert_eq!(range.len() as u64, size);
    super::write_leaf_async(&top.children[child], device_offset, buffer, range, done);
}

#[cfg(test)]
pub(super) mod tests {
    //! Every layout and every damage a RAID-Z vdev must survive: for random geometries (width
    //! from parity + 2 to 12, parity 1 to 3, ashift 9 and 12), block sizes from one sector to
    //! 1 MiB and offsets, each set of up to `parity` children either failing its reads (lost)
    //! or returning wrong bytes (silently corrupted), the block reads back right, the children
    //! to repair are exactly the damaged ones that hold a column, and after the repair every
    //! column on disk is right again.

    use super::*;
    use crate::types::{Guid, ObjectId, VdevId};
    use crate::vdev::label::TopVdevKind;
    use crate::vdev::{BlockDevice, FaultPlan, FaultyDevice, FileDevice, ReadFaultKind};
    use proptest::prelude::*;

    /// A RAID-Z vdev on sparse files, each child's faults injectable (shared with the
    /// tests of `raidz_rows.rs`).
    pub(in crate::vdev::tree) struct Vdev {
        pub _dir: tempfile::TempDir,
        pub plans: Vec<Arc<FaultPlan>>,
        pub top: TopVdev,
    }

    const CHILD_BYTES: u64 = 24 << 20;

    pub(in crate::vdev::tree) fn raidz(width: usize, parity: u8, ashift: u32) -> Vdev {
        let dir = tempfile::tempdir().unwrap();
        let mut plans = Vec::new();
        let mut leaves = Vec::new();
        for index in 0..width {
            let path = dir.path().join(format!("c{index}"));
            let file: Arc<dyn BlockDevice> =
                Arc::new(FileDevice::create_sparse(&path, CHILD_BYTES).unwrap());
            let plan = FaultPlan::new();
            let device: Arc<dyn BlockDevice> = Arc::new(FaultyDevice::new(file, plan.clone()));
            leaves.push(Leaf::new(Guid(100 + index as u64), path, device));
            plans.push(plan);
        }
        // 16 MiB of each child's data area: metaslabs of 1 MiB.
        let asize = (16u64 << 20) * width as u64;
        let top = TopVdev::new(
            VdevId(0),
            Guid(7),
            TopVdevKind::Raidz { parity },
            ashift,
            asize,
            20,
            ObjectId(0),
            leaves,
        )
        .unwrap();
        Vdev {
            _dir: dir,
            plans,
            top,
        }
    }

    /// How one damaged child fails.
    #[derive(Clone, Copy, Debug)]
    enum Damage {
        Lost,
        Corrupt,
    }

    fn read(vdev: &Vdev, geometry: &RaidzGeometry, offset: u64, data: &[u8]) -> RaidzRead {
        let mut verify = |candidate: &[u8]| candidate == data;
        read_block(
            &vdev.top,
            geometry,
            IoClass::SyncRead,
            offset,
            data.len() as u64,
            5,
            false,
            &mut verify,
        )
        .expect("a block with at most `parity` damaged children reads")
    }

    /// Every set of up to `parity` children (all of them when few, else a sample).
    fn damage_sets(width: usize, parity: usize, rng: &mut u64) -> Vec<Vec<usize>> {
        let children: Vec<usize> = (0..width).collect();
        let mut sets: Vec<Vec<usize>> = (1..=parity)
            .flat_map(|size| combinations(&children, size))
            .collect();
        while sets.len() > 20 {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            let index = (*rng % sets.len() as u64) as usize;
            sets.swap_remove(index);
        }
        sets
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        #[test]
        fn every_block_reads_back_and_is_repaired(
            parity in 1u8..=3,
            extra in 1usize..=9,
            large_sectors in any::<bool>(),
            sectors in 1u64..=256,
            position in 0u64..1000,
            seed in any::<u64>(),
        ) {
            let width = (parity as usize + 1 + extra).min(12);
            let ashift = if large_sectors { 12 } else { 9 };
            let sector = 1u64 << ashift;
            let psize = (sectors * sector).min(1 << 20);
            let vdev = raidz(width, parity, ashift);
            let geometry = vdev.top.raidz_geometry().unwrap();
            let asize = geometry.asize(psize);
            let offset = (position * (vdev.top.asize - asize) / 1000) / sector * sector;
            let mut state = seed | 1;
            let data: Vec<u8> = (0..psize)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (state >> 56) as u8
                })
                .collect();
            let map = block_map(&geometry, offset, psize);
            // Every column's bytes, parity first.
            let mut expected = parity_of(&map, &data);
            expected.extend(data_column_slices(&map, &data).into_iter().map(<[u8]>::to_vec));
            for set in damage_sets(width, parity as usize, &mut state) {
                write(&vdev.top, &geometry, IoClass::AsyncWrite, offset, &data, 5).unwrap();
                let mut kinds = Vec::new();
                for &child in &set {
                    state ^= state << 7;
                    let kind = if state & 1 == 0 { Damage::Lost } else { Damage::Corrupt };
                    kinds.push(kind);
                    let Some((child_offset, size)) = map.child_span(child) else {
                        continue;
                    };
                    let at = VDEV_LABEL_START_SIZE + child_offset;
                    match kind {
                        Damage::Lost => vdev.plans[child]
                            .add_read_fault(at..at + size, ReadFaultKind::Fail),
                        Damage::Corrupt => {
                            let garbage: Vec<u8> =
                                (0..size).map(|byte| (byte as u8) ^ 0x5a ^ child as u8).collect();
                            vdev.top.children[child].device.write_at(at, &garbage).unwrap();
                        }
                    }
                }
                let result = read(&vdev, &geometry, offset, &data);
                prop_assert!(result.data == data, "{set:?} {kinds:?}: data differs");
                // The damaged children holding a column of a data-bearing slot are repaired;
                // corrupt parity is found by a scrub only, so it may not be listed.
                for &child in &result.repair {
                    prop_assert!(set.contains(&child), "{set:?}: repair lists {child}");
                }
                for plan in &vdev.plans {
                    plan.clear_read_faults();
                }
                for &child in &result.repair {
                    rewrite_column(&vdev.top, &geometry, child, offset, &data).unwrap();
                }
                // A scrub-read finds the rest (corrupt parity) and repairs it too.
                let mut verify = |candidate: &[u8]| candidate == data.as_slice();
                let scrubbed = read_block(
                    &vdev.top, &geometry, IoClass::Scrub, offset, psize, 5, true, &mut verify,
                )
                .unwrap();
                for &child in &scrubbed.repair {
                    rewrite_column(&vdev.top, &geometry, child, offset, &data).unwrap();
                }
                for (index, column) in map.columns[..map.accessed_columns()].iter().enumerate() {
                    let mut on_disk = vec![0u8; column.size as usize];
                    vdev.top.children[column.child]
                        .device
                        .read_at(VDEV_LABEL_START_SIZE + column.child_offset, &mut on_disk)
                        .unwrap();
                    prop_assert!(
                        on_disk == expected[index],
                        "{set:?} {kinds:?}: column {index} on child {} not repaired",
                        column.child
                    );
                }
            }
        }
    }
}
