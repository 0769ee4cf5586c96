//! Block-sized I/O buffers used again instead of allocated afresh.
//!
//! # Why
//!
//! A read that needs a buffer only for a moment (a scrub's copy, a resilver's block, a RAID-Z
//! read's parity columns) used to allocate it zeroed with `vec![0; n]` and free it after: for a
//! block of 128 KiB or more the allocator hands back memory it had returned to the kernel, so
//! each such buffer cost a page fault and a page clear per 4 KiB, and the zeroing itself, before
//! the read overwrote every byte. In a profile of a RAID-Z resilver that was a quarter of the
//! CPU time, more than checksums and parity together.
//!
//! # What
//!
//! [`take`] gives a buffer of exactly the length asked for whose bytes are whatever its last
//! user left (initialized, but not zero): only for a destination the caller overwrites whole,
//! such as a read. [`give`] returns a buffer for the next [`take`]. The free list is
//! process-wide, holds buffers from [`POOLED_FROM_BYTES`] to [`POOLED_UP_TO_BYTES`] only, and at
//! most [`HELD_BYTES_MAX`] of them: the memory it keeps is bounded whatever the load, and a
//! buffer given when it is full is simply freed. A buffer is taken only for a length between
//! half its capacity and its capacity, so a small read never pins a large buffer.
//!
//! Besides the reads that use a buffer for a moment, the block cache gives back the bytes of
//! each block it evicts when it held the last reference (`cache/arc.rs`), and decompression
//! takes its output from here: in a stream of cache misses (a cold sequential read) each read
//! then reuses the buffer an eviction freed.
//!
//! Buffers come from the global allocator as any `Vec` does (aligned for direct I/O by
//! [`super::alloc`] at these sizes), and a taken buffer is a plain `Vec<u8>` that may also
//! simply be dropped.

use parking_lot::Mutex;

/// Buffers smaller than this are allocated and freed as usual (the allocator keeps them).
pub const POOLED_FROM_BYTES: usize = 64 << 10;

/// Buffers larger than this are allocated and freed as usual (rare: blocks over 4 MiB).
pub const POOLED_UP_TO_BYTES: usize = 4 << 20;

/// The most bytes of capacity the free list holds.
pub const HELD_BYTES_MAX: usize = 32 << 20;

/// A bounded free list of buffers (module documentation); the engine uses the process-wide one
/// through [`take`] and [`give`].
pub struct BufferPool {
    free: Mutex<FreeList>,
}

struct FreeList {
    buffers: Vec<Vec<u8>>,
    held_bytes: usize,
}

static POOL: BufferPool = BufferPool::new();

fn pooled(capacity: usize) -> bool {
    (POOLED_FROM_BYTES..=POOLED_UP_TO_BYTES).contains(&capacity)
}

impl BufferPool {
    pub const fn new() -> BufferPool {
        BufferPool {
            free: Mutex::new(FreeList {
                buffers: Vec::new(),
                held_bytes: 0,
            }),
        }
    }

    /// See [`take`].
    pub fn take(&self, length: usize) -> Vec<u8> {
        if pooled(length) {
            let reused = {
                let mut free = self.free.lock();
                let found = (free.buffers.iter())
                    .position(|buffer| (length..=2 * length).contains(&buffer.capacity()));
                found.map(|index| {
                    let buffer = free.buffers.swap_remove(index);
                    free.held_bytes -= buffer.capacity();
                    buffer
                })
            };
            if let Some(mut buffer) = reused {
                // A given buffer is filled to its capacity: this only shortens it.
                buffer.resize(length, 0);
                return buffer;
            }
        }
        vec![0u8; length]
    }

    /// See [`give`].
    pub fn give(&self, mut buffer: Vec<u8>) {
        let capacity = buffer.capacity();
        if !pooled(capacity) {
            return;
        }
        // Initialized to its whole capacity (zeroing the rest, if the last user shortened it),
        // so that a later take of any length up to it zeroes nothing.
        buffer.resize(capacity, 0);
        let mut free = self.free.lock();
        if free.held_bytes + capacity <= HELD_BYTES_MAX {
            free.held_bytes += capacity;
            free.buffers.push(buffer);
        }
    }

    /// Bytes of capacity the free list holds now.
    pub fn held_bytes(&self) -> usize {
        self.free.lock().held_bytes
    }

    /// Free every buffer the free list holds (memory pressure); returns the bytes freed.
    pub fn release_held(&self) -> usize {
        let buffers = {
            let mut free = self.free.lock();
            free.held_bytes = 0;
            std::mem::take(&mut free.buffers)
        };
        buffers.iter().map(Vec::capacity).sum()
    }
}

impl Default for BufferPool {
    fn default() -> BufferPool {
        BufferPool::new()
    }
}

/// A buffer of `length` bytes, each initialized but of no particular value (module
/// documentation): for a destination the caller overwrites whole.
pub fn take(length: usize) -> Vec<u8> {
    POOL.take(length)
}

/// Return `buffer` for a later [`take`] (or free it, if the free list is full or the buffer is
/// not of a pooled size).
pub fn give(buffer: Vec<u8>) {
    POOL.give(buffer)
}

/// Free every buffer held for reuse: the cache's answer to memory pressure, so that what it
/// evicts leaves the process instead of waiting here (up to [`HELD_BYTES_MAX`]).
pub fn release_held() -> usize {
    POOL.release_held()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_held_empties_the_free_list() {
        let pool = BufferPool::new();
        pool.give(vec![1u8; 128 << 10]);
        pool.give(vec![2u8; 256 << 10]);
        assert_eq!(pool.held_bytes(), 384 << 10);
        assert_eq!(pool.release_held(), 384 << 10);
        assert_eq!(pool.held_bytes(), 0);
        // Nothing held: a take allocates afresh, of the length asked for.
        assert_eq!(pool.take(128 << 10).len(), 128 << 10);
    }

    #[test]
    fn buffers_are_reused_within_their_bounds() {
        let pool = BufferPool::new();
        // A given buffer comes back for a length it fits, with that length exactly.
        let mut first = pool.take(256 << 10);
        assert_eq!(first.len(), 256 << 10);
        first[0] = 7;
        let address = first.as_ptr();
        pool.give(first);
        let again = pool.take(200 << 10);
        assert_eq!(again.len(), 200 << 10);
        assert_eq!(again.as_ptr(), address, "the given buffer is taken again");
        // Under half its capacity: a fresh buffer, zeroed.
        pool.give(again);
        let small = pool.take(100 << 10);
        assert_ne!(small.as_ptr(), address);
        assert!(small.iter().all(|&byte| byte == 0));
        // Too small or too large to pool: neither kept nor counted.
        let before = pool.held_bytes();
        pool.give(vec![1u8; 4096]);
        pool.give(vec![1u8; POOLED_UP_TO_BYTES + 4096]);
        assert_eq!(pool.held_bytes(), before);
        // The free list never holds more than its bound.
        for _ in 0..(HELD_BYTES_MAX / (1 << 20)) + 8 {
            pool.give(vec![0u8; 1 << 20]);
        }
        assert!(pool.held_bytes() <= HELD_BYTES_MAX);
        drop(pool.take(1 << 20));
    }
}
