//! RAID-Z block I/O: a block's columns written through the children's queues, and read back
//! with reconstruction until the caller's check accepts the data (the layout and the theory are
//! in `vdev/raidz`). A child module of the tree, since it works on a [`TopVdev`]'s children.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::super::queue::{read_each_at, write_each_at, Completion, IoClass, VdevQueue};
use super::super::raidz::{block_map, math, RaidzGeometry, RaidzMap};
use super::super::{VdevError, VDEV_LABEL_START_SIZE};
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

/// The bytes of every column of `map` (parity first), from the block's `data` (at least the
/// data columns' bytes; a shorter buffer is zero padded).
fn column_buffers(map: &RaidzMap, data: &[u8]) -> Vec<Vec<u8>> {
    let mut columns: Vec<Vec<u8>> = Vec::with_capacity(map.accessed_columns());
    for _ in 0..map.parity {
        columns.push(vec![0u8; map.parity_size() as usize]);
    }
    for range in map.data_column_ranges() {
        let mut column = vec![0u8; range.len()];
        let end = range.end.min(data.len());
        if range.start < end {
            column[..end - range.start].copy_from_slice(&data[range.start..end]);
        }
        columns.push(column);
    }
    let (parity, data_columns) = columns.split_at_mut(map.parity);
    let data_refs: Vec<&[u8]> = data_columns.iter().map(Vec::as_slice).collect();
    let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    math::generate(map.parity, &data_refs, &mut parity_refs);
    columns
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
    data: &[u8],
    txg: u64,
    done: impl FnOnce(Result<(), VdevError>) + Send + 'static,
) {
    let map = block_map(geometry, offset, data.len() as u64);
    let columns = column_buffers(&map, data);
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
    let writes: usize = (map.columns[..map.accessed_columns()].iter())
        .map(|column| top.slot_children(column.child).len())
        .sum();
    let outcome = Arc::new(ColumnsWrite {
        top: top.id,
        offset,
        length: data.len() as u64,
        parity: map.parity,
        txg,
        remaining: AtomicUsize::new(writes),
        written: (0..columns.len()).map(|_| AtomicUsize::new(0)).collect(),
        first_error: Mutex::new(None),
        done: Mutex::new(Some(Box::new(done))),
    });
    for (index, (column, bytes)) in map.columns.iter().zip(columns).enumerate() {
        let device_offset = VDEV_LABEL_START_SIZE + column.child_offset;
        let bytes = Arc::new(bytes);
        for &child in top.slot_children(column.child) {
            let leaf = top.children[child].clone();
            if leaf.is_offline() {
                outcome.leaf_done(index, &leaf, device_offset, Err(offline_error(&leaf)));
                continue;
            }
            let outcome = outcome.clone();
            let queue_leaf = leaf.clone();
            leaf.queue.write_shared(
                class,
                device_offset,
                bytes.clone(),
                Completion::new(move |result| {
                    outcome.leaf_done(index, &queue_leaf, device_offset, result)
                }),
            );
        }
    }
}

/// [`write_async`], waiting for the outcome.
pub fn write(
    top: &TopVdev,
    geometry: &RaidzGeometry,
    class: IoClass,
    offset: u64,
    data: &[u8],
    txg: u64,
) -> Result<(), VdevError> {
    let (sender, receiver) = std::sync::mpsc::channel();
    write_async(top, geometry, class, offset, data, txg, move |result| {
        let _ = sender.send(result);
    });
    receiver
        .recv()
        .expect("a RAID-Z write completes every column")
}

/// The state of one column during a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ColumnState {
    NotRead,
    Read,
    /// Known bad before any reconstruction: unreadable, offline, or stale (its child missed
    /// the block's txg).
    Missing,
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
    let mut buffers: Vec<Vec<u8>> = map.columns[..count]
        .iter()
        .map(|column| vec![0u8; column.size as usize])
        .collect();
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
    let first = if scrub { 0 } else { parity };
    read_columns(
        top,
        &map,
        &reader,
        class,
        first..count,
        &mut buffers,
        &mut state,
        &mut first_error,
    );
    let data_missing = state[parity..].contains(&ColumnState::Missing);
    if !data_missing {
        let data = join_data(&map, &buffers);
        if verify(&data) {
            let mut read = RaidzRead {
                data,
                repair: missing_children(&map, &state, top),
                columns: if scrub { count } else { count - parity },
            };
            if scrub {
                check_parity(
                    &map,
                    &reader,
                    &buffers,
                    &state,
                    &mut read.repair,
                    top,
                    birth,
                );
            }
            return Ok(read);
        }
    }
    // Reconstruction: the parity is needed.
    read_columns(
        top,
        &map,
        &reader,
        class,
        0..parity,
        &mut buffers,
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
    let present: Vec<usize> = (0..count)
        .filter(|&index| state[index] == ColumnState::Read)
        .collect();
    for extra in 0..=(parity - known.len()) {
        for guess in combinations(&present, extra) {
            // Assuming only parity columns bad changes no data: the data read failed already.
            if extra > 0 && guess.iter().all(|&index| index < parity) {
                continue;
            }
            let mut missing = known.clone();
            missing.extend_from_slice(&guess);
            missing.sort_unstable();
            let Some(columns) = reconstructed(&map, &buffers, &missing) else {
                continue;
            };
            let data = join_data(&map, &columns);
            if !verify(&data) {
                continue;
            }
            // The guessed columns held wrong bytes: a checksum error on their children.
            for &index in &guess {
                top.record_checksum_error(reader[index]);
            }
            let mut repair = missing_children(&map, &state, top);
            repair.extend(guess.iter().map(|&index| reader[index]));
            let mut read = RaidzRead {
                data,
                repair,
                columns: count,
            };
            if scrub {
                // Parity columns not assumed bad are checked against the rebuilt data.
                let mut checked = state.clone();
                for &index in &guess {
                    checked[index] = ColumnState::Missing;
                }
                check_parity(
                    &map,
                    &reader,
                    &buffers,
                    &checked,
                    &mut read.repair,
                    top,
                    birth,
                );
            }
            read.repair.sort_unstable();
            read.repair.dedup();
            return Ok(read);
        }
    }
    Err(RaidzReadError::NoReconstruction {
        columns: count,
        parity,
    })
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
    buffers: &mut [Vec<u8>],
    state: &mut [ColumnState],
    first_error: &mut String,
) {
    let wanted: Vec<usize> = range
        .filter(|&index| state[index] == ColumnState::NotRead && map.columns[index].size > 0)
        .collect();
    if wanted.is_empty() {
        return;
    }
    let queues: Vec<&VdevQueue> = wanted
        .iter()
        .map(|&index| &top.children[reader[index]].queue)
        .collect();
    let mut requests: Vec<(&VdevQueue, u64, &mut [u8])> = Vec::with_capacity(wanted.len());
    let mut rest: &mut [Vec<u8>] = buffers;
    let mut base = 0;
    for (&index, queue) in wanted.iter().zip(&queues) {
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(index - base);
        let (buffer, tail) = tail.split_first_mut().expect("index in range");
        rest = tail;
        base = index + 1;
        requests.push((
            queue,
            VDEV_LABEL_START_SIZE + map.columns[index].child_offset,
            buffer.as_mut_slice(),
        ));
    }
    let results = read_each_at(class, &mut requests);
    for (&index, result) in wanted.iter().zip(results) {
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

/// A scrub's parity check: the parity columns that were read and disagree with the data.
fn check_parity(
    map: &RaidzMap,
    reader: &[usize],
    buffers: &[Vec<u8>],
    state: &[ColumnState],
    repair: &mut Vec<usize>,
    top: &TopVdev,
    birth: u64,
) {
    // The data columns as they are now (reconstructed where they were missing).
    let rebuilt = if state[map.parity..].iter().any(|s| *s != ColumnState::Read) {
        let missing: Vec<usize> = (0..state.len())
            .filter(|&index| state[index] != ColumnState::Read)
            .collect();
        match reconstructed(map, buffers, &missing) {
            Some(columns) => columns,
            None => return,
        }
    } else {
        buffers.to_vec()
    };
    let refs: Vec<&[u8]> = rebuilt.iter().map(Vec::as_slice).collect();
    let mut expected: Vec<Vec<u8>> = (0..map.parity)
        .map(|_| vec![0u8; map.parity_size() as usize])
        .collect();
    let mut expected_refs: Vec<&mut [u8]> = expected.iter_mut().map(Vec::as_mut_slice).collect();
    math::generate(map.parity, &refs[map.parity..], &mut expected_refs);
    for index in 0..map.parity {
        if state[index] == ColumnState::Read && buffers[index] != expected[index] {
            let child = reader[index];
            if !top.children[child].dtl.contains(birth) {
                top.record_checksum_error(child);
            }
            repair.push(child);
        }
    }
}

/// The columns with those in `missing` rebuilt from the others, or `None` if the math refuses.
fn reconstructed(map: &RaidzMap, buffers: &[Vec<u8>], missing: &[usize]) -> Option<Vec<Vec<u8>>> {
    let mut columns = buffers.to_vec();
    let mut refs: Vec<&mut [u8]> = columns.iter_mut().map(Vec::as_mut_slice).collect();
    math::reconstruct(map.parity, &mut refs, missing).ok()?;
    Some(columns)
}

/// The data columns joined in block order.
fn join_data(map: &RaidzMap, columns: &[Vec<u8>]) -> Vec<u8> {
    let mut data = Vec::with_capacity(map.data_bytes() as usize);
    for column in &columns[map.parity..] {
        data.extend_from_slice(column);
    }
    data
}

/// Every subset of `items` with `size` elements, in lexicographic order.
fn combinations(items: &[usize], size: usize) -> Vec<Vec<usize>> {
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

/// Rewrite the column of the block `physical` (its physical bytes; the map is built from their
/// length rounded up to the sector) at vdev offset `offset` that lies on `child`: data from the
/// block, parity regenerated. Bytes written, 0 if the block has no column there.
pub fn rewrite_column(
    top: &TopVdev,
    geometry: &RaidzGeometry,
    child: usize,
    offset: u64,
    physical: &[u8],
) -> Result<u64, VdevError> {
    let map = block_map(geometry, offset, physical.len() as u64);
    let Some(slot) = top.slot_of(child) else {
        return Ok(0);
    };
    let Some(index) = map.columns[..map.accessed_columns()]
        .iter()
        .position(|column| column.child == slot)
    else {
        return Ok(0);
    };
    let column = &map.columns[index];
    let bytes = if index < map.parity {
        column_buffers(&map, physical).swap_remove(index)
    } else {
        let range = map.data_column_range(index - map.parity);
        let mut bytes = vec![0u8; range.len()];
        let end = range.end.min(physical.len());
        if range.start < end {
            bytes[..end - range.start].copy_from_slice(&physical[range.start..end]);
        }
        bytes
    };
    let leaf = &top.children[child];
    let device_offset = VDEV_LABEL_START_SIZE + column.child_offset;
    let result = if leaf.is_offline() {
        Err(offline_error(leaf))
    } else {
        let results = write_each_at(
            IoClass::AsyncWrite,
            &[(&leaf.queue, device_offset, bytes.as_slice())],
        );
        results.into_iter().next().expect("one result")
    };
    result
        .map(|()| column.size)
        .map_err(|source| VdevError::io(&*leaf.device, "write", device_offset, column.size, source))
}

#[cfg(test)]
mod tests {
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

    struct Vdev {
        _dir: tempfile::TempDir,
        plans: Vec<Arc<FaultPlan>>,
        top: TopVdev,
    }

    const CHILD_BYTES: u64 = 24 << 20;

    fn raidz(width: usize, parity: u8, ashift: u32) -> Vdev {
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
            let expected = column_buffers(&map, &data);
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
