//! Reading and writing log blocks, and walking a chain (OpenZFS zil_parse, zil_read_log_block).
//!
//! # Theory
//! A log block is read and written whole, around the block pipeline: its pointer's checksum
//! field is a seed, not a checksum, so [`BlockIo::read`] could not verify it, and it must not
//! enter the cache. Writes go to every copy in the `sync_write` class of the vdev queues, so
//! they overtake the async writes of a syncing txg, and are durable when they complete (the
//! queue writes that class with `BlockDevice::write_durable_at`), before anyone is told the
//! records are durable. A walk follows `next` pointers from the header's
//! first block and stops at the first block that is unreadable or fails
//! [`format::decode_block`]: the chain's end, reported with the pointer that did not verify
//! (the *trailing* pointer: a block allocated but never written, or written and lost).

use crate::block::blkptr::{BlockPtr, ChecksumType, Compression, Dva, ObjectType, DVAS_MAX};
use crate::block::pipeline::BlockIo;
use crate::types::{Txg, VdevId};
use crate::vdev::IoClass;

use super::format::{self, LogBlock, Seed};

/// Longest chain a walk follows (a guard: a chain of valid blocks cannot loop, since sequence
/// numbers increase).
const CHAIN_BLOCKS_MAX: usize = 1 << 20;

/// A walked chain.
#[derive(Clone, Debug, Default)]
pub struct WalkedChain {
    /// The valid blocks, first to last, with their pointers.
    pub blocks: Vec<(BlockPtr, LogBlock)>,
    /// The pointer after the last valid block (or the header's first, if none verified); a
    /// hole if the chain ended with a hole.
    pub trailing: Option<BlockPtr>,
    /// Why the chain ended.
    pub end: String,
}

/// A log block pointer for `size` bytes at `dva`, born in `txg`, carrying `seed`.
pub fn log_pointer(dva: Dva, size: u32, txg: Txg, seed: Seed) -> BlockPtr {
    let mut bp = BlockPtr::hole(txg, ObjectType::IntentLog, 0);
    bp.dvas = [Dva::default(); DVAS_MAX];
    bp.dvas[0] = dva;
    bp.size_logical = size;
    bp.size_physical = size;
    bp.compression = Compression::Off;
    bp.checksum_type = ChecksumType::Fletcher4;
    bp.fill_count = 1;
    bp.checksum = seed.encode();
    bp
}

fn dva_in_range(io: &BlockIo, dva: &Dva, length: u64) -> bool {
    let Some(top) = io.vdevs.top(dva.vdev) else {
        return false;
    };
    let sector = 1u64 << top.ashift;
    dva.offset.is_multiple_of(sector)
        && length.is_multiple_of(sector)
        && length <= dva.size_allocated
        && top.contains(dva.offset, length)
}

fn padded_length(io: &BlockIo, vdev: VdevId, size: u64) -> u64 {
    let shift = io.vdevs.top(vdev).map_or(io.ashift, |top| top.ashift);
    size.div_ceil(1 << shift) << shift
}

/// Read the block `bp` names and decode it, trying every copy and every mirror child; `Err`
/// says why none verified.
pub fn read_block(io: &BlockIo, bp: &BlockPtr) -> Result<LogBlock, String> {
    format::check_log_pointer(bp).map_err(|error| error.to_string())?;
    if bp.is_hole() {
        return Err("no next block".into());
    }
    let seed = Seed::of(bp);
    let mut why = String::from("no copy");
    for dva in bp.copies() {
        let length = padded_length(io, dva.vdev, bp.size_logical as u64);
        if !dva_in_range(io, dva, length) {
            why = format!("copy outside vdev {}: {dva:?}", dva.vdev);
            continue;
        }
        let top = io.vdevs.top(dva.vdev).expect("checked above");
        if top.raidz_geometry().is_some() {
            // A RAID-Z copy is read whole, its columns reconstructed until the block decodes.
            let mut decoded = None;
            let mut verify = |data: &[u8]| {
                let Some(used) = data.get(..bp.size_logical as usize) else {
                    return false;
                };
                match format::decode_block(used, seed) {
                    Ok(block) => {
                        decoded = Some(block);
                        true
                    }
                    Err(error) => {
                        why = error.to_string();
                        false
                    }
                }
            };
            let read = top.read_raidz(
                IoClass::SyncRead,
                dva.offset,
                bp.size_logical as u64,
                bp.birth_physical.0,
                false,
                &mut verify,
            );
            match read {
                Some(Ok(_)) => return Ok(decoded.take().expect("verified")),
                Some(Err(error)) => why = error.to_string(),
                None => why = "not a RAID-Z vdev".to_string(),
            }
            continue;
        }
        for child in 0..top.child_count() {
            let mut buffer = vec![0u8; length as usize];
            if let Err(error) = top.read_child(IoClass::SyncRead, child, dva.offset, &mut buffer) {
                why = error.to_string();
                continue;
            }
            match format::decode_block(&buffer[..bp.size_logical as usize], seed) {
                Ok(block) => return Ok(block),
                Err(error) => why = error.to_string(),
            }
        }
    }
    Err(why)
}

/// Walk the chain starting at `first`, of the object set whose guid is `guid`.
pub fn walk(io: &BlockIo, guid: u64, first: &BlockPtr) -> WalkedChain {
    let mut chain = WalkedChain::default();
    let mut next = first.clone();
    loop {
        if next.is_hole() {
            chain.end = "hole".into();
            return chain;
        }
        if chain.blocks.len() >= CHAIN_BLOCKS_MAX {
            chain.end = format!("more than {CHAIN_BLOCKS_MAX} blocks");
            return chain;
        }
        let seed_guid = Seed::of(&next).guid;
        if seed_guid != guid {
            chain.end = format!("block of another object set (guid {seed_guid:#x})");
            chain.trailing = Some(next);
            return chain;
        }
        match read_block(io, &next) {
            Ok(block) => {
                let following = block.next.clone();
                chain.blocks.push((next, block));
                next = following;
            }
            Err(why) => {
                chain.end = why;
                chain.trailing = Some(next);
                return chain;
            }
        }
    }
}

/// Write the start of an encoded block (at least its used bytes) to every copy of `bp` in the
/// `sync_write` class, padded to the sector: durable when it returns.
pub fn write_block(io: &BlockIo, bp: &BlockPtr, block: &[u8]) -> Result<(), String> {
    for dva in bp.copies() {
        let length = padded_length(io, dva.vdev, block.len() as u64);
        if block.len() as u64 > bp.size_logical as u64 || !dva_in_range(io, dva, length) {
            return Err(format!("log block copy outside its vdev: {dva:?}"));
        }
        let top = io.vdevs.top(dva.vdev).expect("checked above");
        // A RAID-Z copy is written whole: its map is built from the block pointer's size.
        let length = if top.raidz_geometry().is_some() {
            padded_length(io, dva.vdev, bp.size_logical as u64)
        } else {
            length
        };
        let mut padded = block.to_vec();
        padded.resize(length as usize, 0);
        top.write_in_txg(IoClass::SyncWrite, dva.offset, &padded, bp.birth_logical.0)
            .map_err(|error| error.to_string())?;
    }
    Ok(())
}
