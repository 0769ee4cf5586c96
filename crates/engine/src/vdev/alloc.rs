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
//! Allocations of at least [`MAPPED_FROM_BYTES`] (4 MiB) are their own anonymous mappings
//! instead (`mmap`, `mremap`, `munmap`), page-aligned by nature. A zeroed one is then zero
//! without a write: the system allocator zeroes an over-aligned block byte by byte
//! (`posix_memalign` has no zeroing form), which made every large zeroed buffer resident
//! whole. fuser gives each worker thread of a mount a zeroed 16 MiB request buffer, of which
//! a request touches at most its own size: the daemon held 264 MiB per mounted file system,
//! and the kernel killed it for want of memory at 92 mounts on this 24 GiB machine.
//!
//! Binaries install it (`#[global_allocator]` in the `tarn` command); the engine never relies
//! on it: an unaligned buffer is still read and written correctly, through the staging copy.

use std::alloc::{GlobalAlloc, Layout, System};

use super::io::DIRECT_IO_ALIGNMENT;

/// Allocations at least this large are aligned for direct I/O.
pub const ALIGNED_FROM_BYTES: usize = 64 << 10;

/// Allocations at least this large are anonymous mappings of their own (module
/// documentation).
pub const MAPPED_FROM_BYTES: usize = 4 << 20;

/// The system allocator, with large allocations aligned for direct I/O (module documentation).
pub struct DirectIoAllocator;

/// Whether an allocation described by `layout` is a mapping of its own: a function of the
/// layout alone, as [`actual`] is, so that `dealloc` and `realloc` know how it was made.
fn mapped(layout: Layout) -> bool {
    layout.size() >= MAPPED_FROM_BYTES && layout.align() <= DIRECT_IO_ALIGNMENT
}

/// A new anonymous mapping of `size` bytes (zero, page-aligned), or null.
fn map(size: usize) -> *mut u8 {
    // SAFETY: a private anonymous mapping at an address of the kernel's choosing touches no
    // existing memory.
    let address = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if address == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        address.cast()
    }
}

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
        if mapped(layout) {
            return map(layout.size());
        }
        // SAFETY: `actual` keeps the size (non-zero, as the caller's) and only raises the
        // alignment to a power of two.
        unsafe { System.alloc(actual(layout)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if mapped(layout) {
            // A new mapping reads as zero, page by page as it is touched.
            return map(layout.size());
        }
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(actual(layout)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mapped(layout) {
            // SAFETY: `ptr` is the mapping of `layout.size()` bytes `alloc` made.
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
            return;
        }
        // SAFETY: `ptr` was allocated by this allocator with `layout`, hence by `System` with
        // `actual(layout)`.
        unsafe { System.dealloc(ptr, actual(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        match (mapped(layout), mapped(new_layout)) {
            (true, true) => {
                // SAFETY: `ptr` is a mapping of `layout.size()` bytes; the kernel moves it if
                // it cannot grow in place, keeping its bytes.
                let moved = unsafe {
                    libc::mremap(ptr.cast(), layout.size(), new_size, libc::MREMAP_MAYMOVE)
                };
                return if moved == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    moved.cast()
                };
            }
            (false, false) => {}
            _ => {
                // Into or out of a mapping: a new block, the bytes copied, the old freed.
                // SAFETY: `new_layout` is valid and non-zero; the copy stays within both
                // blocks; `ptr` was allocated with `layout`.
                unsafe {
                    let moved = self.alloc(new_layout);
                    if !moved.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    return moved;
                }
            }
        }
        let old = actual(layout);
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
        // Through the mapped class and back: grown into it, grown within it (mremap), shrunk
        // out of it.
        let small = Layout::from_size_align(1 << 20, 1).unwrap();
        // SAFETY: as above; every size passed is the block's current one.
        unsafe {
            let block = allocator.alloc(small);
            for index in (0..small.size()).step_by(4093) {
                *block.add(index) = (index / 4093) as u8;
            }
            let mut size = small.size();
            let mut block = block;
            for new_size in [MAPPED_FROM_BYTES + 1, 3 * MAPPED_FROM_BYTES, 200 << 10] {
                block =
                    allocator.realloc(block, Layout::from_size_align(size, 1).unwrap(), new_size);
                assert!(!block.is_null());
                assert!((block as usize).is_multiple_of(DIRECT_IO_ALIGNMENT));
                for index in (0..small.size().min(new_size)).step_by(4093) {
                    assert_eq!(*block.add(index), (index / 4093) as u8, "byte {index}");
                }
                size = new_size;
            }
            allocator.dealloc(block, Layout::from_size_align(size, 1).unwrap());
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

    /// Resident memory of this process, in bytes (`/proc/self/statm`).
    fn resident_bytes() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    #[test]
    fn a_large_zeroed_allocation_is_resident_only_where_it_is_written() {
        // What a FUSE mount's worker threads each allocate: 16 MiB zeroed, of which a request
        // writes its own size. Eight of them, 128 MiB, must not become resident.
        let allocator = DirectIoAllocator;
        let layout = Layout::from_size_align((16 << 20) + 4096, 1).unwrap();
        let before = resident_bytes();
        // SAFETY: a valid layout; written and read within its size; freed with it.
        unsafe {
            let blocks: Vec<*mut u8> = (0..8).map(|_| allocator.alloc_zeroed(layout)).collect();
            for &block in &blocks {
                assert!(!block.is_null());
                assert!((block as usize).is_multiple_of(DIRECT_IO_ALIGNMENT));
                // A 64 KiB request at the start, read back; the rest reads as zero.
                std::ptr::write_bytes(block, 0xab, 64 << 10);
                assert_eq!(*block.add((64 << 10) - 1), 0xab);
                assert_eq!(*block.add(layout.size() - 1), 0);
            }
            let grown = resident_bytes().saturating_sub(before);
            assert!(
                grown < 16 << 20,
                "8 zeroed 16 MiB buffers made {} MiB resident",
                grown >> 20
            );
            for block in blocks {
                allocator.dealloc(block, layout);
            }
        }
    }
}
