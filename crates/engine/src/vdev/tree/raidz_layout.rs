//! Which RAID-Z I/O path a block takes: as its logical map's columns, each one run on one child
//! (`raidz_io.rs`: a block as wide as its vdev, no reflow running, which is every block of a
//! vdev never expanded), or as cells (`raidz_rows.rs`: a block written narrower than its vdev
//! is now, after an expansion). The width a block was written with follows from its physical
//! birth (`vdev/raidz/widths.rs`), so every entry point takes it.
//!
//! # Cost
//! One lookup of the block's width (a binary search over the expansions, none for a vdev never
//! expanded) per block I/O.

use std::sync::Arc;

use super::super::queue::IoClass;
use super::super::raidz::progress::{ReflowProgress, ScratchState};
use super::super::raidz::range_lock::RangeGuard;
use super::super::raidz::RaidzGeometry;
use super::super::VdevError;
use super::raidz_io::{self, RaidzRead, RaidzReadError};
use super::raidz_rows::{self, CellBlock};
use super::{Leaf, TopVdev};
use crate::vdev::raidz::widths::RaidzExpansion;

/// How one block of a RAID-Z vdev lies on its children.
pub enum RaidzLayout {
    /// As its logical map's columns: the block is as wide as the vdev.
    Columns(RaidzGeometry),
    /// As cells, each sector at its own place; while a reflow runs, with the block's range
    /// held shared until the I/O has finished (`raidz/expand.rs`).
    Cells(CellBlock, Option<RangeGuard>),
}

impl super::VdevTree {
    /// The reflow word of the expansion under way, if any (at most one runs per pool): what
    /// the uberblock of the txg being committed carries. Its offset is what the copy has made
    /// durable and counted (`RaidzReflow::commit`).
    pub fn reflow_progress(&self) -> Option<ReflowProgress> {
        self.tops().iter().find_map(|top| {
            let view = top.raidz_reflow()?.view();
            Some(ReflowProgress {
                vdev: top.id,
                scratch: if view.scratch {
                    ScratchState::Valid
                } else {
                    ScratchState::NotInUse
                },
                offset: view.synced * top.sector_size(),
            })
        })
    }

    /// Set every expansion's copy state from the uberblock chosen at import (`progress`, its
    /// reflow word): the vdev it names from it, any other expanding vdev to nothing copied.
    /// Before the MOS is read, since where its blocks are depends on it.
    pub fn set_reflow_progress(&self, progress: Option<&ReflowProgress>) {
        for top in self.tops().iter() {
            if let Some(reflow) = top.raidz_reflow() {
                let zero = ReflowProgress {
                    vdev: top.id,
                    scratch: ScratchState::NotInUse,
                    offset: 0,
                };
                reflow.set_committed(progress.filter(|word| word.vdev == top.id).unwrap_or(&zero));
            }
        }
    }
}

impl TopVdev {
    /// The next generation of this RAID-Z vdev with `leaf` as a new last column slot and an
    /// expansion under way (nothing copied yet: every sector at its old place). Its space is
    /// unchanged until the copy finishes ([`TopVdev::raidz_expanded`]).
    pub fn raidz_expanding_with(&self, leaf: Arc<Leaf>) -> Result<TopVdev, VdevError> {
        let mut history = self.raidz_history();
        if self.raidz_geometry().is_none() || history.expanding {
            return Err(VdevError::InvalidConfig {
                top: self.id,
                what: "only a raidz vdev not already expanding can be expanded".into(),
            });
        }
        history.expanding = true;
        history.reflow = None;
        let mut children = self.children.clone();
        children.push(leaf);
        self.generation(self.asize, children, history)
    }

    /// The next generation of this RAID-Z vdev once its expansion's copy has finished: blocks
    /// born from `from_txg` on have the new width, and the vdev's space is `asize` (whole
    /// metaslabs of `width` children's shares).
    pub fn raidz_expanded(&self, from_txg: u64, asize: u64) -> Result<TopVdev, VdevError> {
        let mut history = self.raidz_history();
        if !history.expanding {
            return Err(VdevError::InvalidConfig {
                top: self.id,
                what: "no raidz expansion to finish".into(),
            });
        }
        history.expanding = false;
        history.reflow = None;
        history.expansions.push(RaidzExpansion {
            txg: from_txg,
            width: self.slots.len() as u32,
        });
        self.generation(asize, self.children.clone(), history)
    }

    fn generation(
        &self,
        asize: u64,
        children: Vec<Arc<Leaf>>,
        history: super::RaidzHistory,
    ) -> Result<TopVdev, VdevError> {
        TopVdev::build(
            self.id,
            self.guid,
            self.kind,
            self.ashift,
            asize,
            self.ms_shift,
            self.ms_array.clone(),
            self.write_txg.clone(),
            children,
            history,
        )
        .map(|top| top.in_class(self.class))
    }

    /// The column slots of a RAID-Z vdev (its children but for replacements in progress).
    pub fn raidz_slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The RAID-Z geometry a block born (physically) in `birth` was written with: the vdev's
    /// parity and sector at the width of that txg. `None` for a vdev that is not RAID-Z.
    pub fn raidz_geometry_at(&self, birth: u64) -> Option<RaidzGeometry> {
        let geometry = self.raidz_geometry()?;
        let width = self.raidz_widths()?.width_at(birth);
        Some(RaidzGeometry::new(width, geometry.parity, self.ashift))
    }

    /// The RAID-Z geometry new blocks are written with (the width of the last finished
    /// expansion, or the original).
    pub fn raidz_write_geometry(&self) -> Option<RaidzGeometry> {
        let geometry = self.raidz_geometry()?;
        let width = self.raidz_widths()?.current();
        Some(RaidzGeometry::new(width, geometry.parity, self.ashift))
    }

    /// Bytes a block of `size` padded physical bytes born in `birth` took here
    /// ([`TopVdev::asize_of`] at the width of its txg): what its free gives back.
    pub fn asize_at(&self, size: u64, birth: u64) -> u64 {
        match self.raidz_geometry_at(birth) {
            Some(geometry) => geometry.asize(size),
            None => self.asize_of(size),
        }
    }

    /// How the block of `psize` bytes at `offset`, born (physically) in `birth`, lies here;
    /// `None` for a vdev that is not RAID-Z.
    pub fn raidz_layout(&self, offset: u64, psize: u64, birth: u64) -> Option<RaidzLayout> {
        let geometry = self.raidz_geometry()?;
        let logical = self.raidz_geometry_at(birth)?;
        let Some(reflow) = self.raidz_reflow() else {
            if logical == geometry {
                return Some(RaidzLayout::Columns(geometry));
            }
            let block = CellBlock::new(&logical, geometry.children, offset, psize, None);
            return Some(RaidzLayout::Cells(block, None));
        };
        // The block's range is held before the copy's state is read, and until its I/O ends.
        let asize = logical.asize(psize.next_multiple_of(logical.sector_size()));
        let guard = reflow.shared(offset..offset + asize);
        let view = reflow.view();
        let block = CellBlock::new(&logical, geometry.children, offset, psize, Some(&view));
        Some(RaidzLayout::Cells(block, Some(guard)))
    }

    /// Read and reconstruct the RAID-Z block of `psize` bytes at `offset` born in `birth` until
    /// `verify` accepts it (`raidz_io::read_block`); `None` for a vdev that is not RAID-Z.
    #[allow(clippy::too_many_arguments)]
    pub fn read_raidz(
        &self,
        class: IoClass,
        offset: u64,
        psize: u64,
        birth: u64,
        scrub: bool,
        verify: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Option<Result<RaidzRead, RaidzReadError>> {
        Some(match self.raidz_layout(offset, psize, birth)? {
            RaidzLayout::Columns(geometry) => {
                raidz_io::read_block(self, &geometry, class, offset, psize, birth, scrub, verify)
            }
            RaidzLayout::Cells(block, _held) => {
                raidz_rows::read_cells(self, &block, class, birth, scrub, verify)
            }
        })
    }

    /// Write the RAID-Z block `data` born in `txg` (`raidz_io::write_async`).
    pub(super) fn write_raidz_async(
        &self,
        layout: RaidzLayout,
        class: IoClass,
        offset: u64,
        data: Arc<Vec<u8>>,
        txg: u64,
        done: impl FnOnce(Result<(), VdevError>) + Send + 'static,
    ) {
        match layout {
            RaidzLayout::Columns(geometry) => {
                raidz_io::write_async(self, &geometry, class, offset, data, txg, done)
            }
            RaidzLayout::Cells(block, held) => {
                raidz_rows::write_cells(self, &block, class, offset, &data, txg, move |result| {
                    drop(held);
                    done(result)
                })
            }
        }
    }

    /// [`TopVdev::write_raidz_async`], waiting for the outcome.
    pub(super) fn write_raidz(
        &self,
        layout: RaidzLayout,
        class: IoClass,
        offset: u64,
        data: &[u8],
        txg: u64,
    ) -> Result<(), VdevError> {
        let (sender, receiver) = std::sync::mpsc::channel();
        self.write_raidz_async(
            layout,
            class,
            offset,
            Arc::new(data.to_vec()),
            txg,
            move |result| {
                let _ = sender.send(result);
            },
        );
        // A plugged thread's writes wait for a kick (`vdev/plug.rs`): this one waits for them.
        crate::vdev::plug::kick_plugged();
        receiver
            .recv()
            .expect("a RAID-Z write completes every column")
    }

    /// Rewrite what RAID-Z child `child` holds of the block `physical` (a repair).
    pub(super) fn rewrite_raidz_child(
        &self,
        layout: RaidzLayout,
        child: usize,
        offset: u64,
        physical: &[u8],
    ) -> Result<u64, VdevError> {
        match layout {
            RaidzLayout::Columns(geometry) => {
                raidz_io::rewrite_column(self, &geometry, child, offset, physical)
            }
            RaidzLayout::Cells(block, _held) => {
                raidz_rows::rewrite_cells(self, &block, child, physical)
            }
        }
    }

    /// [`TopVdev::rewrite_raidz_child`] without waiting (`done` runs on a queue worker, or at
    /// once when there is nothing to write or the child is offline).
    pub(super) fn rewrite_raidz_child_async(
        &self,
        layout: RaidzLayout,
        child: usize,
        offset: u64,
        physical: Arc<Vec<u8>>,
        done: impl FnOnce(Result<u64, VdevError>) + Send + 'static,
    ) {
        match layout {
            RaidzLayout::Columns(geometry) => {
                raidz_io::rewrite_column_async(self, &geometry, child, offset, physical, done)
            }
            RaidzLayout::Cells(block, held) => {
                raidz_rows::rewrite_cells_async(self, &block, child, &physical, move |result| {
                    drop(held);
                    done(result)
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::raidz_with_history;
    use super::*;
    use crate::vdev::raidz::widths::RaidzExpansion;

    /// A raidz1 of five children that was four wide until txg 10.
    fn expanded(dir: &std::path::Path) -> TopVdev {
        let expansions = vec![RaidzExpansion { txg: 10, width: 5 }];
        raidz_with_history(dir, 5, 1, 12, 5 * (16 << 20), expansions, false)
    }

    #[test]
    fn blocks_are_sized_by_the_width_at_their_birth_and_new_ones_by_the_current_width() {
        let dir = tempfile::tempdir().unwrap();
        let top = expanded(dir.path());
        // 100 sectors: 4 wide (3 data) take 134 sectors, 5 wide (4 data) 126.
        let size = 100 << 12;
        assert_eq!(top.asize_at(size, 9), 134 << 12);
        assert_eq!(top.asize_at(size, 10), 126 << 12);
        assert_eq!(top.asize_of(size), 126 << 12);
        // Allocations are sized by the width of their txg.
        assert_eq!(
            top.alloc_unit().asize(size, crate::types::Txg(9)),
            134 << 12
        );
        assert_eq!(
            top.alloc_unit().asize(size, crate::types::Txg(10)),
            126 << 12
        );
        assert_eq!(top.raidz_write_geometry(), top.raidz_geometry());
    }

    #[test]
    fn an_expansion_under_way_writes_at_the_old_width_in_the_old_places() {
        // Five children, the fifth being added: new blocks are four wide, where a four-wide
        // vdev of the first four children would put them.
        let dir = tempfile::tempdir().unwrap();
        let top = raidz_with_history(dir.path(), 5, 1, 12, 4 * (16 << 20), Vec::new(), true);
        assert_eq!(
            top.raidz_write_geometry(),
            Some(RaidzGeometry::new(4, 1, 12))
        );
        assert_eq!(top.child_asize(), 16 << 20);
        let Some(RaidzLayout::Cells(block, _)) = top.raidz_layout(3 << 20, 40 << 10, 50) else {
            panic!("cells while expanding")
        };
        let columns = RaidzGeometry::new(4, 1, 12).map(3 << 20, 40 << 10);
        let mut expected: Vec<(usize, u64)> = columns.columns[..columns.accessed_columns()]
            .iter()
            .flat_map(|column| {
                (0..column.size >> 12).map(move |k| (column.child, (column.child_offset >> 12) + k))
            })
            .collect();
        let mut placed: Vec<(usize, u64)> = block
            .cells
            .iter()
            .map(|cell| (cell.place.child, cell.place.sector))
            .collect();
        expected.sort_unstable();
        placed.sort_unstable();
        assert_eq!(placed, expected);
    }

    #[test]
    fn the_reflow_word_follows_the_copy_and_import_sets_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let top = Arc::new(raidz_with_history(
            dir.path(),
            5,
            1,
            12,
            4 * (16 << 20),
            Vec::new(),
            true,
        ));
        let tree = super::super::VdevTree::new(vec![top.clone()]);
        let word = |scratch, offset| ReflowProgress {
            vdev: top.id,
            scratch,
            offset,
        };
        assert_eq!(
            tree.reflow_progress(),
            Some(word(ScratchState::NotInUse, 0))
        );
        let reflow = top.raidz_reflow().unwrap();
        reflow.set_committed(&word(ScratchState::Valid, 100 << 12));
        assert_eq!(
            tree.reflow_progress(),
            Some(word(ScratchState::Valid, 100 << 12))
        );
        reflow.commit(100);
        assert_eq!(
            tree.reflow_progress(),
            Some(word(ScratchState::NotInUse, 100 << 12))
        );
        // Import: the chosen uberblock's word, or nothing copied when it names no reflow.
        tree.set_reflow_progress(Some(&word(ScratchState::NotInUse, 7 << 12)));
        assert_eq!(reflow.view().synced, 7);
        tree.set_reflow_progress(None);
        assert_eq!(
            tree.reflow_progress(),
            Some(word(ScratchState::NotInUse, 0))
        );
        // A vdev that is not expanding has no word.
        let other = tempfile::tempdir().unwrap();
        let done = raidz_with_history(other.path(), 5, 1, 12, 5 << 24, Vec::new(), false);
        let tree = super::super::VdevTree::new(vec![Arc::new(done)]);
        assert_eq!(tree.reflow_progress(), None);
    }

    fn read(top: &TopVdev, offset: u64, data: &[u8], birth: u64) -> Option<RaidzRead> {
        let mut verify = |candidate: &[u8]| candidate == data;
        let read = top.read_raidz(
            IoClass::SyncRead,
            offset,
            data.len() as u64,
            birth,
            false,
            &mut verify,
        );
        read.expect("a raidz vdev").ok()
    }

    #[test]
    fn blocks_are_laid_and_read_by_the_width_at_their_birth() {
        let dir = tempfile::tempdir().unwrap();
        let top = expanded(dir.path());
        assert_eq!(
            top.deflate_ratio(),
            RaidzGeometry::new(4, 1, 12).deflate_ratio()
        );
        let data: Vec<u8> = (0..40 << 10).map(|byte| (byte * 7 % 253) as u8).collect();
        let (old_block, new_block) = (1 << 20, 2 << 20);
        assert!(matches!(
            top.raidz_layout(old_block, data.len() as u64, 9),
            Some(RaidzLayout::Cells(..))
        ));
        assert!(matches!(
            top.raidz_layout(new_block, data.len() as u64, 10),
            Some(RaidzLayout::Columns(_))
        ));
        top.write_in_txg(IoClass::AsyncWrite, old_block, &data, 9)
            .unwrap();
        top.write_in_txg(IoClass::AsyncWrite, new_block, &data, 12)
            .unwrap();
        assert!(read(&top, old_block, &data, 9).is_some());
        assert!(read(&top, new_block, &data, 12).is_some());
        // Read with the other width, either block is parity and data in the wrong places.
        assert!(read(&top, old_block, &data, 12).is_none());
        assert!(read(&top, new_block, &data, 9).is_none());

        // A child of the old block damaged: the read rebuilds it, the repair by birth mends it.
        let Some(RaidzLayout::Cells(block, _)) = top.raidz_layout(old_block, data.len() as u64, 9)
        else {
            unreachable!()
        };
        let victim = block.cells[0].place.child;
        for cell in block.cells.iter().filter(|cell| cell.place.child == victim) {
            top.children[victim]
                .device
                .write_at(cell.place.device_offset(4096), &[0xee; 4096])
                .unwrap();
        }
        let repaired = read(&top, old_block, &data, 9).expect("rebuilt");
        assert_eq!(repaired.repair, vec![victim]);
        let written = top
            .rewrite_child(victim, old_block, block.map.asize, 9, &data)
            .unwrap();
        assert!(written > 0);
        assert!(read(&top, old_block, &data, 9).unwrap().repair.is_empty());
        // The resilver's path: the same repair without waiting.
        for cell in block.cells.iter().filter(|cell| cell.place.child == victim) {
            top.children[victim]
                .device
                .write_at(cell.place.device_offset(4096), &[0x11; 4096])
                .unwrap();
        }
        assert_eq!(
            read(&top, old_block, &data, 9).unwrap().repair,
            vec![victim]
        );
        let (sender, receiver) = std::sync::mpsc::channel();
        top.rewrite_child_async(
            victim,
            old_block,
            block.map.asize,
            9,
            Arc::new(data.clone()),
            {
                move |result| {
                    let _ = sender.send(result);
                }
            },
        );
        assert_eq!(receiver.recv().unwrap().unwrap(), written);
        assert!(read(&top, old_block, &data, 9).unwrap().repair.is_empty());
    }
}
