//! A global allocator that gives large allocations the alignment direct I/O needs.
//!
//! # Why
//!
//! A leaf opened with O_DIRECT ([`super::io::FileDevice`]) reads and writes a caller's buffer
//! in place only when its address is aligned to [`DIRECT_IO_ALIGNMENT`]; any other buffer goes
//! through a per-thread staging buffer and costs a copy of every byte. The engine's block
//! buffers are plain `Vec<u8>` (shared as `Arc<Vec<u8>>` by the cache, the dirty records and
//! the write queue), and glibc's `malloc` aligns them to 16 bytes: a cold sequential read of
//! 128 KiB records through a mount spent about 5% of its CPU time in that copy, and every
//! large write paid it too.
//!
//! # What
//!
//! [`DirectIoAllocator`] forwards to the system allocator, raising the alignment of every
//! allocation of at least [`ALIGNED_FROM_BYTES`] to [`DIRECT_IO_ALIGNMENT`]. Whether an
//! allocation is aligned is a function of its size alone, so `dealloc` and `realloc` recompute
//! the same layout the allocation was made with. The waste is at most one alignment unit per
//! allocation of 64 KiB or more (under 7%), and small allocations are untouched.
//!
//! Binaries install it (`#[global_allocator]` in the `tarn` command); the engine never relies
//! on it: an unaligned buffer is still read and written correctly, through the staging copy.

use std::alloc::{GlobalAlloc, Layout, System};

use super::io::DIRECT_IO_ALIGNMENT;

/// Allocations at least this large are aligned for direct I/O.
pub const ALIGNED_FROM_BYTES: usize = 64 << 10;

/// The system allocator, with large allocations aligned for direct I/O (module documentation).
pub struct DirectIoAllocator;

/// The layout an allocation described by `layout` is really made with.
fn actual(layout: Layout) -> Layout {
    if layout.size() >= ALIGNED_FROM_BYTES && layout.align() < DIRECT_IO_ALIGNMENT {
        // A size of 64 KiB or more rounded up to 4 KiB cannot overflow isize here: the caller's
        // layout was valid, and valid sizes are at most isize::MAX - (align - 1).
        Layout::from_size_align(layout.size(), DIRECT_IO_ALIGNMENT).unwrap_or(layout)
    } else {
        layout
    }
}

// SAFETY: every method forwards to `System` with the layout `actual` derives from the caller's
// layout, and the same derivation is applied when the block is freed or resized, so `System`
// always sees a block freed with the layout it was allocated with.
unsafe impl GlobalAlloc for DirectIoAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `actual` keeps the size (non-zero, as the caller's) and only raises the
        // alignment to a power of two.
        unsafe { System.alloc(actual(layout)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(actual(layout)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator with `layout`, hence by `System` with
        // `actual(layout)`.
        unsafe { System.dealloc(ptr, actual(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = actual(layout);
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        let new = actual(new_layout);
        if old.align() == new.align() {
            // SAFETY: the block was allocated by `System` with `old`, and the new layout
            // keeps its alignment.
            return unsafe { System.realloc(ptr, old, new_size) };
        }
        // The alignment changes with the size: a new block, the bytes copied, the old freed.
        // SAFETY: `new` has a non-zero size (the caller's `new_size`); the copy stays within
        // both blocks; `ptr` was allocated with `old`.
        unsafe {
            let moved = System.alloc(new);
            if !moved.is_null() {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                System.dealloc(ptr, old);
            }
            moved
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_allocations_are_aligned_and_keep_their_bytes_through_realloc() {
        let allocator = DirectIoAllocator;
        for (size, grown) in [
            (100usize, 200usize),
            (4096, 100 << 10),
            (128 << 10, 300 << 10),
        ] {
            let layout = Layout::from_size_align(size, 1).unwrap();
            // SAFETY: a valid non-zero layout; the block is written within its size, resized
            // with the same layout and freed with the layout of its last size.
            unsafe {
                let block = allocator.alloc(layout);
                assert!(!block.is_null());
                if size >= ALIGNED_FROM_BYTES {
                    assert!((block as usize).is_multiple_of(DIRECT_IO_ALIGNMENT));
                }
                for index in 0..size {
                    *block.add(index) = index as u8;
                }
                let moved = allocator.realloc(block, layout, grown);
                assert!(!moved.is_null());
                if grown >= ALIGNED_FROM_BYTES {
                    assert!((moved as usize).is_multiple_of(DIRECT_IO_ALIGNMENT));
                }
                for index in 0..size {
                    assert_eq!(*moved.add(index), index as u8, "byte {index} of {size}");
                }
                let shrunk =
                    allocator.realloc(moved, Layout::from_size_align(grown, 1).unwrap(), 50);
                assert!(!shrunk.is_null());
                assert_eq!(*shrunk.add(49), 49);
                allocator.dealloc(shrunk, Layout::from_size_align(50, 1).unwrap());
            }
        }
        // Zeroed allocations are zero and aligned too.
        let layout = Layout::from_size_align(256 << 10, 8).unwrap();
        // SAFETY: a valid layout, read within its size and freed with it.
        unsafe {
            let block = allocator.alloc_zeroed(layout);
            assert!((block as usize).is_multiple_of(DIRECT_IO_ALIGNMENT));
            assert!((0..layout.size()).all(|index| *block.add(index) == 0));
            allocator.dealloc(block, layout);
        }
    }
}
