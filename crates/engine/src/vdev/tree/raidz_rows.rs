//! RAID-Z I/O of a block whose sectors do not lie as its logical map's columns: a block written
//! narrower than its vdev is now (after an expansion), and every block of a vdev being
//! reflowed. The theory (rows, cells, shadows, the scratch area) is in `vdev/raidz/placement.rs`.
//!
//! The logical map still says what each sector holds, and the block's data is gathered into
//! the same [`BlockColumns`] as the per-column path (`raidz_io.rs`) uses; only the I/O differs:
//! each sector (a *cell*) has its own place, cells on one child are read and written as the
//! runs of consecutive sectors they form (one or two per child for a block), and parity is
//! worked row by row, since one child now holds cells of different columns in different rows.
//!
//! # Reconstruction
//!
//! Cells known missing (their child is unusable, missed the block's txg, or failed the read)
//! are rebuilt per row, up to `parity` in a row. When the data still does not verify, some
//! child returned wrong bytes: the guesses are sets of up to `parity` *failure domains*, each
//! the cells one disk could have damaged: a child of the vdev as it is, and, for every width
//! the vdev had before, each child of that width (the cells whose sector `x` has `x mod
//! width == i`: a disk's silent damage travels with the raw copy of the reflow). OpenZFS
//! tries the same sets (`raidz_simulate_failure`, "logical children").
//!
//! # Cost
//!
//! One read or write per run of consecutive cells on a child (two runs per child at most when
//! the block's rows straddle the reflow), one copy of every cell between the runs' buffers and
//! the columns, and per-row parity math on one-sector slices.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::super::queue::{read_each_at, Completion, IoClass};
use super::super::raidz::placement::{self, Cell, Place, ReflowView};
use super::super::raidz::{block_map, math, RaidzGeometry, RaidzMap};
use super::super::{buffers, VdevError};
use super::raidz_io::{
    combinations, parity_of, BlockColumns, ColumnState, RaidzRead, RaidzReadError,
};
use super::{offline_error, TopVdev};

/// A block's logical map and its cells.
pub struct CellBlock {
    pub map: RaidzMap,
    pub cells: Vec<Cell>,
    /// The width the block was written with.
    width: usize,
}

/// Where a cell's bytes are among a block's columns.
enum CellBytes {
    Parity(usize, std::ops::Range<usize>),
    Data(std::ops::Range<usize>),
}

impl CellBlock {
    /// The cells of the block of `psize` bytes at `offset` written `logical.children` wide, on
    /// a vdev `physical_width` wide, with `reflow` while an expansion runs.
    pub fn new(
        logical: &RaidzGeometry,
        physical_width: usize,
        offset: u64,
        psize: u64,
        reflow: Option<&ReflowView>,
    ) -> CellBlock {
        let map = block_map(logical, offset, psize);
        let cells = placement::cells(&map, offset, logical.children, physical_width, reflow);
        CellBlock {
            map,
            cells,
            width: logical.children,
        }
    }

    fn sector_size(&self) -> usize {
        self.map.sector_size as usize
    }

    fn rows(&self) -> usize {
        (self.map.parity_size() / self.map.sector_size) as usize
    }

    fn bytes_of(&self, cell: &Cell) -> CellBytes {
        let sector = self.sector_size();
        let at = cell.row as usize * sector;
        if cell.column < self.map.parity {
            CellBytes::Parity(cell.column, at..at + sector)
        } else {
            let start = self
                .map
                .data_column_range(cell.column - self.map.parity)
                .start;
            CellBytes::Data(start + at..start + at + sector)
        }
    }

    /// The bytes of `cell` among `columns` (whose parity is allocated).
    fn cell<'a>(&self, columns: &'a BlockColumns, cell: &Cell) -> &'a [u8] {
        match self.bytes_of(cell) {
            CellBytes::Parity(index, range) => &columns.parity[index][range],
            CellBytes::Data(range) => &columns.data[range],
        }
    }

    /// [`CellBlock::cell`], to write.
    fn cell_mut<'a>(&self, columns: &'a mut BlockColumns, cell: &Cell) -> &'a mut [u8] {
        match self.bytes_of(cell) {
            CellBytes::Parity(index, range) => &mut columns.parity[index][range],
            CellBytes::Data(range) => &mut columns.data[range],
        }
    }

    /// The cells of one row, by column (`None` where the column has no cell in the row).
    fn row_slices_mut<'a>(&self, columns: &'a mut BlockColumns, row: usize) -> Vec<&'a mut [u8]> {
        let sector = self.sector_size();
        let at = row * sector;
        let mut slices: Vec<&'a mut [u8]> = Vec::with_capacity(self.map.accessed_columns());
        slices.extend(
            columns
                .parity
                .iter_mut()
                .map(|column| &mut column[at..at + sector]),
        );
        let mut rest = columns.data.as_mut_slice();
        let mut consumed = 0;
        for range in self.map.data_column_ranges() {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(range.start - consumed);
            let (column, tail) = tail.split_at_mut(range.len());
            rest = tail;
            consumed = range.end;
            let end = (at + sector).min(column.len());
            slices.push(&mut column[at.min(end)..end]);
        }
        slices
    }

    /// Rebuild, in each row, the columns listed for it; false if a row cannot be rebuilt (more
    /// than `parity` missing), and then `columns` may be partly changed.
    fn reconstruct_rows(&self, columns: &mut BlockColumns, missing: &[Vec<usize>]) -> bool {
        for (row, missing) in missing.iter().enumerate() {
            if missing.is_empty() {
                continue;
            }
            let mut slices = self.row_slices_mut(columns, row);
            if math::reconstruct(self.map.parity, &mut slices, missing).is_err() {
                return false;
            }
        }
        true
    }

    /// The columns of each row whose cell is in `cells` (indices into `self.cells`).
    fn missing_by_row(&self, cells: impl Iterator<Item = usize>) -> Vec<Vec<usize>> {
        let mut rows = vec![Vec::new(); self.rows()];
        for index in cells {
            let cell = &self.cells[index];
            rows[cell.row as usize].push(cell.column);
        }
        for row in &mut rows {
            row.sort_unstable();
            row.dedup();
        }
        rows
    }

    /// The failure domains a silent error can have come from (see the module comment): sets
    /// of cells, one per child of the vdev as it is and one per child of each narrower width
    /// down to the block's own.
    fn failure_domains(&self, physical_width: usize) -> Vec<Vec<usize>> {
        let mut domains: Vec<Vec<usize>> = (0..physical_width)
            .map(|child| {
                (0..self.cells.len())
                    .filter(|&index| self.cells[index].place.child == child)
                    .collect()
            })
            .collect();
        for width in (self.width..physical_width).rev() {
            for child in 0..width as u64 {
                domains.push(
                    (0..self.cells.len())
                        .filter(|&index| self.cells[index].sector % width as u64 == child)
                        .collect(),
                );
            }
        }
        domains.retain(|domain| !domain.is_empty());
        domains.sort();
        domains.dedup();
        domains
    }
}

/// Runs of consecutive sectors on one child: `(child, first place, cell indices in order)`.
fn runs(places: Vec<(usize, Place, usize)>) -> Vec<(usize, Place, Vec<usize>)> {
    let mut sorted = places;
    sorted.sort_unstable_by_key(|&(child, place, _)| (child, place.in_scratch, place.sector));
    let mut runs: Vec<(usize, Place, Vec<usize>)> = Vec::new();
    for (child, place, cell) in sorted {
        if let Some((run_child, first, cells)) = runs.last_mut() {
            if *run_child == child
                && first.in_scratch == place.in_scratch
                && first.sector + cells.len() as u64 == place.sector
            {
                cells.push(cell);
                continue;
            }
        }
        runs.push((child, place, vec![cell]));
    }
    runs
}

/// Read and reconstruct the block `block`, born in txg `birth`, until `verify` accepts its data
/// (`raidz_io::read_block` for a block laid as columns). With `scrub` every cell is read and
/// the parity checked.
#[allow(clippy::too_many_arguments)]
pub fn read_cells(
    top: &TopVdev,
    block: &CellBlock,
    class: IoClass,
    birth: u64,
    scrub: bool,
    verify: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<RaidzRead, RaidzReadError> {
    let map = &block.map;
    let parity = map.parity;
    let mut columns = BlockColumns::new(map);
    let mut state = vec![ColumnState::NotRead; block.cells.len()];
    let mut first_error = String::new();
    // The child each slot is read from, as in `read_block`.
    let mut readers: BTreeMap<usize, Option<usize>> = BTreeMap::new();
    let reader: Vec<Option<usize>> = block
        .cells
        .iter()
        .map(|cell| {
            *readers.entry(cell.place.child).or_insert_with(|| {
                top.slot_children(cell.place.child)
                    .iter()
                    .copied()
                    .find(|&child| {
                        let leaf = &top.children[child];
                        leaf.is_usable() && !leaf.dtl.contains(birth)
                    })
            })
        })
        .collect();
    for (index, reader) in reader.iter().enumerate() {
        if reader.is_none() {
            state[index] = ColumnState::Missing;
            if first_error.is_empty() {
                let slot = block.cells[index].place.child;
                let leaf = &top.children[top.slot_children(slot)[0]];
                first_error = format!("{} is offline or missing", leaf.path.display());
            }
        }
    }
    // The parity is read first only by a scrub; any other read needs it only to rebuild.
    if scrub {
        columns.allocate_parity(map);
    }
    let wanted_first = |cell: &Cell| scrub || cell.column >= parity;
    read_runs(
        top,
        block,
        &reader,
        class,
        &wanted_first,
        &mut columns,
        &mut state,
        &mut first_error,
    );
    let data_missing = (block.cells.iter().zip(&state))
        .any(|(cell, state)| cell.column >= parity && *state == ColumnState::Missing);
    let finished = Finished {
        top,
        block,
        reader: &reader,
        scrub,
    };
    if !data_missing && verify(&columns.data) {
        return Ok(finished.read(columns, &state, &state, &[]));
    }
    columns.allocate_parity(map);
    read_runs(
        top,
        block,
        &reader,
        class,
        &|_| true,
        &mut columns,
        &mut state,
        &mut first_error,
    );
    let known: Vec<usize> = (0..block.cells.len())
        .filter(|&index| state[index] == ColumnState::Missing)
        .collect();
    let known_rows = block.missing_by_row(known.iter().copied());
    if let Some(worst) = known_rows
        .iter()
        .map(Vec::len)
        .max()
        .filter(|&n| n > parity)
    {
        return Err(RaidzReadError::TooManyMissing {
            missing: worst,
            columns: map.accessed_columns(),
            parity,
            first_error,
        });
    }
    if !known.is_empty()
        && block.reconstruct_rows(&mut columns, &known_rows)
        && verify(&columns.data)
    {
        return Ok(finished.read(columns, &state, &state, &[]));
    }
    // Guesses: sets of failure domains assumed to hold wrong bytes, on the columns as read (the
    // rows rebuilt above are rebuilt again from them with the guess).
    let domains = block.failure_domains(top.slots.len());
    let domain_indices: Vec<usize> = (0..domains.len()).collect();
    let read_only = |index: &usize| state[*index] == ColumnState::Read;
    for size in 1..=parity {
        for guess in combinations(&domain_indices, size) {
            let guessed: Vec<usize> = guess
                .iter()
                .flat_map(|&domain| domains[domain].iter().copied())
                .filter(read_only)
                .collect();
            if !guessed
                .iter()
                .any(|&index| block.cells[index].column >= parity)
            {
                continue;
            }
            let rows = block.missing_by_row(known.iter().chain(&guessed).copied());
            if rows.iter().any(|row| row.len() > parity) {
                continue;
            }
            let mut candidate = columns.clone();
            if !block.reconstruct_rows(&mut candidate, &rows) || !verify(&candidate.data) {
                continue;
            }
            // The guessed cells held wrong bytes where the rebuilt ones differ from them.
            let mut wrong: Vec<usize> = guessed
                .iter()
                .copied()
                .filter(|&index| {
                    let cell = &block.cells[index];
                    block.cell(&columns, cell) != block.cell(&candidate, cell)
                })
                .filter_map(|index| reader[index])
                .collect();
            wrong.sort_unstable();
            wrong.dedup();
            for &child in &wrong {
                top.record_checksum_error(child);
            }
            // The guessed cells are not checked as parity: they were rebuilt.
            let mut checked = state.clone();
            for &index in &guessed {
                checked[index] = ColumnState::Missing;
            }
            return Ok(finished.read(candidate, &state, &checked, &wrong));
        }
    }
    Err(RaidzReadError::NoReconstruction {
        columns: map.accessed_columns(),
        parity,
    })
}

/// What a read that verified returns, however it got there.
struct Finished<'a> {
    top: &'a TopVdev,
    block: &'a CellBlock,
    reader: &'a [Option<usize>],
    scrub: bool,
}

impl Finished<'_> {
    /// The data, and the children to rewrite: those of the cells `state` knows missing, the
    /// `wrong` ones, and (scrub) those whose parity cells, read and not rebuilt (`checked`),
    /// disagree with the data.
    fn read(
        &self,
        columns: BlockColumns,
        state: &[ColumnState],
        checked: &[ColumnState],
        wrong: &[usize],
    ) -> RaidzRead {
        let mut repair = missing_children(self.top, self.block, state);
        repair.extend_from_slice(wrong);
        if self.scrub {
            check_parity(
                self.top,
                self.block,
                self.reader,
                &columns,
                checked,
                &mut repair,
            );
        }
        repair.sort_unstable();
        repair.dedup();
        RaidzRead {
            data: columns.into_data(),
            repair,
            columns: self.block.map.accessed_columns(),
        }
    }
}

/// Read the cells `wanted` accepts that are not read or known missing, all at once, as runs
/// per child; a failed run marks its cells missing.
#[allow(clippy::too_many_arguments)]
fn read_runs(
    top: &TopVdev,
    block: &CellBlock,
    reader: &[Option<usize>],
    class: IoClass,
    wanted: &dyn Fn(&Cell) -> bool,
    columns: &mut BlockColumns,
    state: &mut [ColumnState],
    first_error: &mut String,
) {
    let sector = block.sector_size();
    let places: Vec<(usize, Place, usize)> = (0..block.cells.len())
        .filter(|&index| state[index] == ColumnState::NotRead && wanted(&block.cells[index]))
        .filter_map(|index| reader[index].map(|child| (child, block.cells[index].place, index)))
        .collect();
    if places.is_empty() {
        return;
    }
    let runs = runs(places);
    let mut buffers_read: Vec<Vec<u8>> = runs
        .iter()
        .map(|(_, _, cells)| buffers::take(cells.len() * sector))
        .collect();
    let mut requests: Vec<(&super::super::queue::VdevQueue, u64, &mut [u8])> = runs
        .iter()
        .zip(buffers_read.iter_mut())
        .map(|((child, first, _), buffer)| {
            (
                &top.children[*child].queue,
                first.device_offset(sector as u64),
                buffer.as_mut_slice(),
            )
        })
        .collect();
    let results = read_each_at(class, &mut requests);
    drop(requests);
    for (((child, first, cells), buffer), result) in runs.iter().zip(buffers_read).zip(results) {
        match result {
            Ok(()) => {
                for (position, &index) in cells.iter().enumerate() {
                    block
                        .cell_mut(columns, &block.cells[index])
                        .copy_from_slice(&buffer[position * sector..(position + 1) * sector]);
                    state[index] = ColumnState::Read;
                }
            }
            Err(source) => {
                if first_error.is_empty() {
                    let leaf = &top.children[*child];
                    *first_error = VdevError::io(
                        &*leaf.device,
                        "read",
                        first.device_offset(sector as u64),
                        buffer.len() as u64,
                        source,
                    )
                    .to_string();
                }
                for &index in cells {
                    state[index] = ColumnState::Missing;
                }
            }
        }
        buffers::give(buffer);
    }
}

/// The children of the known-missing cells' slots that can take a rewrite.
fn missing_children(top: &TopVdev, block: &CellBlock, state: &[ColumnState]) -> Vec<usize> {
    let mut children: Vec<usize> = (block.cells.iter().zip(state))
        .filter(|(_, state)| **state == ColumnState::Missing)
        .flat_map(|(cell, _)| top.slot_children(cell.place.child).iter().copied())
        .filter(|&child| top.children[child].is_usable())
        .collect();
    children.sort_unstable();
    children.dedup();
    children
}

/// A scrub's parity check: the parity cells read that disagree with the verified data.
fn check_parity(
    top: &TopVdev,
    block: &CellBlock,
    reader: &[Option<usize>],
    columns: &BlockColumns,
    state: &[ColumnState],
    repair: &mut Vec<usize>,
) {
    let expected = parity_of(&block.map, &columns.data);
    for (index, cell) in block.cells.iter().enumerate() {
        if cell.column >= block.map.parity || state[index] != ColumnState::Read {
            continue;
        }
        let CellBytes::Parity(column, range) = block.bytes_of(cell) else {
            continue;
        };
        if columns.parity[column][range.clone()] != expected[column][range] {
            if let Some(child) = reader[index] {
                top.record_checksum_error(child);
                repair.push(child);
            }
        }
    }
    expected.into_iter().for_each(buffers::give);
}

/// Every cell's bytes of the block `data`: the parity regenerated, the data from the block
/// (zero past its end).
fn cell_bytes(block: &CellBlock, data: &[u8]) -> BlockColumns {
    let mut columns = BlockColumns::new(&block.map);
    let length = data.len().min(columns.data.len());
    columns.data[..length].copy_from_slice(&data[..length]);
    columns.data[length..].fill(0);
    columns.parity = parity_of(&block.map, data);
    columns
}

/// The outcome of one block's cell writes, gathered as the runs finish: a cell counts as
/// written when some child of its slot took its place, and its shadow's, if it has one.
struct CellsWrite {
    top: super::super::VdevId,
    offset: u64,
    length: u64,
    parity: usize,
    txg: u64,
    sector_size: u64,
    remaining: AtomicUsize,
    /// Per cell, per place (the place, then the shadow): children that took it.
    written: Vec<[AtomicUsize; 2]>,
    /// Per cell: its row, and whether it has a shadow.
    cells: Vec<(u64, bool)>,
    first_error: Mutex<Option<String>>,
    done: Mutex<Option<super::WriteDone>>,
}

impl CellsWrite {
    fn finish(&self) -> Result<(), VdevError> {
        let mut failed_in_row: BTreeMap<u64, usize> = BTreeMap::new();
        for (written, &(row, has_shadow)) in self.written.iter().zip(&self.cells) {
            let missed = |which: usize| written[which].load(Ordering::Acquire) == 0;
            if missed(0) || (has_shadow && missed(1)) {
                *failed_in_row.entry(row).or_default() += 1;
            }
        }
        if failed_in_row.values().all(|&failed| failed <= self.parity) {
            return Ok(());
        }
        Err(VdevError::NoChildWritten {
            top: self.top,
            offset: self.offset,
            length: self.length,
            first_error: self.first_error.lock().clone().unwrap_or_default(),
        })
    }

    /// One run finished (`entries`: cell index × 2 + which place); the last runs `done`.
    fn run_done(
        &self,
        leaf: &super::Leaf,
        entries: &[usize],
        device_offset: u64,
        result: std::io::Result<()>,
    ) {
        match result {
            Ok(()) => {
                leaf.dtl.note_written(self.txg);
                for &entry in entries {
                    self.written[entry / 2][entry % 2].fetch_add(1, Ordering::AcqRel);
                }
            }
            Err(source) => {
                leaf.dtl.record(self.txg);
                let length = entries.len() as u64 * self.sector_size;
                let error = VdevError::io(&*leaf.device, "write", device_offset, length, source);
                self.first_error.lock().get_or_insert(error.to_string());
            }
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(done) = self.done.lock().take() {
                done(self.finish());
            }
        }
    }
}

/// Write the block `data` laid as `block` in syncing txg `txg`: every cell to every child of
/// its slot, and to its shadow, as runs of consecutive sectors. `done` runs once every write
/// has completed; it fails when a row has more cells than the parity that missed a place.
#[allow(clippy::too_many_arguments)]
pub fn write_cells(
    top: &TopVdev,
    block: &CellBlock,
    class: IoClass,
    offset: u64,
    data: &[u8],
    txg: u64,
    done: impl FnOnce(Result<(), VdevError>) + Send + 'static,
) {
    let sector = block.sector_size();
    let columns = cell_bytes(block, data);
    let mut places: Vec<(usize, Place, usize)> = Vec::new();
    for (index, cell) in block.cells.iter().enumerate() {
        for (which, place) in [Some(cell.place), cell.shadow].into_iter().enumerate() {
            let Some(place) = place else { continue };
            for &child in top.slot_children(place.child) {
                places.push((child, place, index * 2 + which));
            }
        }
    }
    // Children that take no cell still miss the txg when offline (as `raidz_io::write_async`).
    for (child, leaf) in top.children.iter().enumerate() {
        if leaf.is_offline() && !places.iter().any(|&(taker, _, _)| taker == child) {
            leaf.dtl.record(txg);
        }
    }
    let runs = runs(places);
    let outcome = Arc::new(CellsWrite {
        top: top.id,
        offset,
        length: data.len() as u64,
        parity: block.map.parity,
        txg,
        sector_size: sector as u64,
        remaining: AtomicUsize::new(runs.len()),
        written: (0..block.cells.len())
            .map(|_| [AtomicUsize::new(0), AtomicUsize::new(0)])
            .collect(),
        cells: (block.cells.iter())
            .map(|cell| (cell.row, cell.shadow.is_some()))
            .collect(),
        first_error: Mutex::new(None),
        done: Mutex::new(Some(Box::new(done))),
    });
    for (child, first, entries) in runs {
        let mut buffer = Vec::with_capacity(entries.len() * sector);
        for &entry in &entries {
            buffer.extend_from_slice(block.cell(&columns, &block.cells[entry / 2]));
        }
        let leaf = top.children[child].clone();
        let device_offset = first.device_offset(sector as u64);
        if leaf.is_offline() {
            outcome.run_done(&leaf, &entries, device_offset, Err(offline_error(&leaf)));
            continue;
        }
        let length = buffer.len();
        let (outcome, queue_leaf) = (outcome.clone(), leaf.clone());
        leaf.queue.write_shared_range(
            class,
            device_offset,
            Arc::new(buffer),
            0..length,
            Completion::new(move |result| {
                outcome.run_done(&queue_leaf, &entries, device_offset, result)
            }),
        );
    }
}

/// Rewrite every cell of the block `physical` laid as `block` whose place or shadow is on
/// `child`'s slot, to `child`: data from the block, parity regenerated (a repair). Bytes
/// written, 0 if the block has no cell there.
pub fn rewrite_cells(
    top: &TopVdev,
    block: &CellBlock,
    child: usize,
    physical: &[u8],
) -> Result<u64, VdevError> {
    let (sender, receiver) = std::sync::mpsc::channel();
    rewrite_cells_async(top, block, child, physical, move |result| {
        let _ = sender.send(result);
    });
    // A plugged thread's writes wait for a kick (`vdev/plug.rs`): this one waits for them.
    crate::vdev::plug::kick_plugged();
    receiver.recv().expect("a rewrite completes every run")
}

/// [`rewrite_cells`] without waiting: `done` gets its outcome, on a queue worker (or at once,
/// on this thread, when there is nothing to write or the child is offline).
pub fn rewrite_cells_async(
    top: &TopVdev,
    block: &CellBlock,
    child: usize,
    physical: &[u8],
    done: impl FnOnce(Result<u64, VdevError>) + Send + 'static,
) {
    let Some(slot) = top.slot_of(child) else {
        return done(Ok(0));
    };
    let sector = block.sector_size();
    let columns = cell_bytes(block, physical);
    let places: Vec<(usize, Place, usize)> = (block.cells.iter().enumerate())
        .flat_map(|(index, cell)| {
            [Some(cell.place), cell.shadow]
                .into_iter()
                .flatten()
                .filter(move |place| place.child == slot)
                .map(move |place| (child, place, index))
        })
        .collect();
    let runs: Vec<(u64, Vec<u8>)> = runs(places)
        .into_iter()
        .map(|(_, first, cells)| {
            let mut buffer = Vec::with_capacity(cells.len() * sector);
            for &index in &cells {
                buffer.extend_from_slice(block.cell(&columns, &block.cells[index]));
            }
            (first.device_offset(sector as u64), buffer)
        })
        .collect();
    if runs.is_empty() {
        return done(Ok(0));
    }
    // Runs not finished, bytes written, the first error, and the caller's completion.
    type Pending = (
        usize,
        u64,
        Option<VdevError>,
        Option<Box<dyn FnOnce(Result<u64, VdevError>) + Send>>,
    );
    let pending: Arc<Mutex<Pending>> =
        Arc::new(Mutex::new((runs.len(), 0, None, Some(Box::new(done)))));
    let leaf = &top.children[child];
    for (device_offset, buffer) in runs {
        let pending = pending.clone();
        let range = 0..buffer.len();
        super::write_leaf_async(
            leaf,
            device_offset,
            Arc::new(buffer),
            range,
            move |result| {
                let mut state = pending.lock();
                match result {
                    Ok(bytes) => state.1 += bytes,
                    Err(error) => {
                        state.2.get_or_insert(error);
                    }
                }
                state.0 -= 1;
                if state.0 == 0 {
                    let outcome = match state.2.take() {
                        Some(error) => Err(error),
                        None => Ok(state.1),
                    };
                    let done = state.3.take().expect("completed once");
                    drop(state);
                    done(outcome);
                }
            },
        );
    }
}

#[cfg(test)]
mod tests {
    //! Blocks written narrower than their vdev, or while a reflow runs, on random geometries:
    //! with up to `parity` children lost or silently wrong, or the cells of one child of the
    //! block's own width wrong (damage a disk had before the reflow copied its sectors), every
    //! block reads back right, the repairs named are damaged children, and after them and a
    //! scrub every cell on disk holds its bytes again.

    use super::*;
    use crate::vdev::ReadFaultKind;
    use proptest::prelude::*;

    use super::super::raidz_io::tests::{raidz, Vdev};

    /// Each child's data area (`raidz_io`'s test vdevs).
    const CHILD_DATA: u64 = 16 << 20;

    fn write(vdev: &Vdev, block: &CellBlock, offset: u64, data: &[u8]) {
        let (sender, receiver) = std::sync::mpsc::channel();
        write_cells(
            &vdev.top,
            block,
            IoClass::AsyncWrite,
            offset,
            data,
            5,
            move |result| {
                let _ = sender.send(result);
            },
        );
        receiver.recv().unwrap().expect("every cell written");
    }

    fn read(vdev: &Vdev, block: &CellBlock, data: &[u8], scrub: bool) -> RaidzRead {
        let mut verify = |candidate: &[u8]| candidate == data;
        read_cells(&vdev.top, block, IoClass::SyncRead, 5, scrub, &mut verify)
            .expect("a block with at most `parity` damaged domains reads")
    }

    /// What each cell should hold.
    fn expected_cells(block: &CellBlock, data: &[u8]) -> Vec<Vec<u8>> {
        let columns = cell_bytes(block, data);
        block
            .cells
            .iter()
            .map(|cell| block.cell(&columns, cell).to_vec())
            .collect()
    }

    fn on_disk(vdev: &Vdev, block: &CellBlock, place: Place) -> Vec<u8> {
        let mut bytes = vec![0u8; block.sector_size()];
        vdev.top.children[place.child]
            .device
            .read_at(place.device_offset(block.map.sector_size), &mut bytes)
            .unwrap();
        bytes
    }

    fn garbage(length: usize, seed: u8) -> Vec<u8> {
        (0..length).map(|byte| (byte as u8) ^ 0x5a ^ seed).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn every_block_reads_back_and_is_repaired(
            parity in 1u8..=3,
            extra in 0usize..=6,
            grown in 1usize..=2,
            large_sectors: bool,
            sectors in 1u64..=160,
            position in 0u64..1000,
            reflow_at in proptest::option::of(0u64..1000),
            ahead in 0.0f64..=1.0,
            seed: u64,
        ) {
            let width = parity as usize + 1 + extra;
            let physical = width + grown;
            let ashift = if large_sectors { 12 } else { 9 };
            let sector = 1u64 << ashift;
            let vdev = raidz(physical, parity, ashift);
            let logical = RaidzGeometry::new(width, parity as usize, ashift);
            let psize = sectors * sector;
            let asize = logical.asize(psize);
            // Inside the old layout's address space (one child fewer).
            let space = CHILD_DATA * (physical as u64 - 1);
            let offset = (position * (space - asize) / 1000) / sector * sector;
            let view = reflow_at.map(|at| {
                let synced = at * (space / sector) / 1000;
                let old = physical as u64 - 1;
                let limit = (synced + synced / old).saturating_sub(old).max(synced);
                ReflowView {
                    synced,
                    next: synced + ((limit - synced) as f64 * ahead) as u64,
                    scratch: false,
                }
            });
            let block = CellBlock::new(&logical, physical, offset, psize, view.as_ref());
            let mut state = seed | 1;
            let data: Vec<u8> = (0..psize)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (state >> 56) as u8
                })
                .collect();
            let expected = expected_cells(&block, &data);
            // Damage: sets of physical children (lost or silently wrong), and one child of the
            // block's own width gone wrong before the copy.
            let children: Vec<usize> = (0..physical).collect();
            let mut sets: Vec<Vec<usize>> = (1..=parity as usize)
                .flat_map(|size| combinations(&children, size))
                .collect();
            while sets.len() > 8 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let index = (state % sets.len() as u64) as usize;
                sets.swap_remove(index);
            }
            for set in sets {
                write(&vdev, &block, offset, &data);
                state ^= state << 7;
                let lost = state & 1 == 0;
                for &child in &set {
                    for cell in block.cells.iter().filter(|cell| cell.place.child == child) {
                        let at = cell.place.device_offset(sector);
                        if lost {
                            vdev.plans[child].add_read_fault(at..at + sector, ReadFaultKind::Fail);
                        } else {
                            vdev.top.children[child]
                                .device
                                .write_at(at, &garbage(sector as usize, child as u8))
                                .unwrap();
                        }
                    }
                }
                let result = read(&vdev, &block, &data, false);
                prop_assert!(result.data == data, "{set:?} lost {lost}: data differs");
                for &child in &result.repair {
                    prop_assert!(set.contains(&child), "{set:?}: repair lists {child}");
                }
                for plan in &vdev.plans {
                    plan.clear_read_faults();
                }
                for &child in &result.repair {
                    rewrite_cells(&vdev.top, &block, child, &data).unwrap();
                }
                let scrubbed = read(&vdev, &block, &data, true);
                for &child in &scrubbed.repair {
                    rewrite_cells(&vdev.top, &block, child, &data).unwrap();
                }
                for (index, cell) in block.cells.iter().enumerate() {
                    prop_assert!(
                        on_disk(&vdev, &block, cell.place) == expected[index],
                        "{set:?} lost {lost}: cell {cell:?} not repaired"
                    );
                }
            }
            // One child of the block's width, silently wrong in every row: a failure domain of
            // its own, found by the guesses.
            write(&vdev, &block, offset, &data);
            let old_child = (seed % width as u64) as usize;
            for cell in block.cells.iter().filter(|cell| cell.sector % width as u64 == old_child as u64) {
                vdev.top.children[cell.place.child]
                    .device
                    .write_at(cell.place.device_offset(sector), &garbage(sector as usize, 0xa5))
                    .unwrap();
            }
            let result = read(&vdev, &block, &data, true);
            prop_assert!(result.data == data, "old child {old_child}: data differs");
            for &child in &result.repair {
                rewrite_cells(&vdev.top, &block, child, &data).unwrap();
            }
            for (index, cell) in block.cells.iter().enumerate() {
                prop_assert!(
                    on_disk(&vdev, &block, cell.place) == expected[index],
                    "old child {old_child}: cell {cell:?} not repaired"
                );
            }
        }
    }

    #[test]
    fn shadows_are_written_and_a_row_losing_more_than_parity_fails_the_write() {
        // raidz1 4 wide on 5 children, reflow committed to 44, issued to 46 (the worked
        // example of placement.rs): the cells of sectors 44 and 45 reach their new places too.
        let vdev = raidz(5, 1, 12);
        let logical = RaidzGeometry::new(4, 1, 12);
        let view = ReflowView {
            synced: 44,
            next: 46,
            scratch: false,
        };
        let block = CellBlock::new(&logical, 5, 40 << 12, 6 << 12, Some(&view));
        let data: Vec<u8> = (0..6 << 12).map(|byte| (byte % 251) as u8).collect();
        write(&vdev, &block, 40 << 12, &data);
        let expected = expected_cells(&block, &data);
        for (index, cell) in block.cells.iter().enumerate() {
            if let Some(shadow) = cell.shadow {
                assert_eq!(on_disk(&vdev, &block, shadow), expected[index]);
            }
        }
        assert_eq!(
            block
                .cells
                .iter()
                .filter(|cell| cell.shadow.is_some())
                .count(),
            2
        );
        // Two children offline: row 1 misses two cells, more than raidz1 can lose.
        vdev.top.children[0].dtl.set_offline(true);
        vdev.top.children[1].dtl.set_offline(true);
        let (sender, receiver) = std::sync::mpsc::channel();
        write_cells(
            &vdev.top,
            &block,
            IoClass::AsyncWrite,
            40 << 12,
            &data,
            6,
            move |result| {
                let _ = sender.send(result);
            },
        );
        assert!(matches!(
            receiver.recv().unwrap(),
            Err(VdevError::NoChildWritten { .. })
        ));
    }
}
