//! A lock over byte ranges of a vdev's address space, shared or exclusive (OpenZFS's
//! `zfs_rangelock`, as RAID-Z expansion uses it: `vre_rangelock`).
//!
//! While a RAID-Z vdev is being reflowed, every block I/O holds its range shared from before it
//! decides where the block's sectors live until its last child I/O completes, and each copy
//! batch of the reflow holds exclusively the sectors it reads and the old places its writes
//! overwrite. So an I/O never reads a place a copy is overwriting, and never writes a sector a
//! copy is moving (which would leave the copy with stale bytes).
//!
//! Guards are owned (`Send`, no borrow of the lock): an asynchronous write's guard rides in its
//! completion and is dropped on whichever thread completes it. An exclusive request that waits
//! holds back later shared requests that overlap it, so that a stream of I/O cannot starve the
//! reflow; a thread that may hold guards it has not yet let go of (a plugged write) must release
//! them before it blocks, which is what the `before_waiting` hook of [`RangeLock::shared`] is for.
//!
//! # Cost
//! One mutex acquisition and a scan of the ranges held (a few hundred at most: the I/O in
//! flight) per lock and per unlock. Vdevs that are not being reflowed take no lock at all.

use std::ops::Range;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

#[derive(Debug)]
struct Held {
    id: u64,
    range: Range<u64>,
    exclusive: bool,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    held: Vec<Held>,
    /// Exclusive requests waiting, by id: shared requests overlapping one of them wait too.
    waiting_exclusive: Vec<(u64, Range<u64>)>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    released: Condvar,
}

/// A range lock; clones share it.
#[derive(Clone, Debug, Default)]
pub struct RangeLock {
    shared: Arc<Shared>,
}

/// A held range, released when dropped.
#[derive(Debug)]
#[must_use = "the range is released when the guard is dropped"]
pub struct RangeGuard {
    shared: Arc<Shared>,
    id: u64,
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

impl RangeLock {
    pub fn new() -> RangeLock {
        RangeLock::default()
    }

    /// Hold `range` shared: wait while an overlapping range is held exclusively, or an
    /// overlapping exclusive request waits. `before_waiting` runs (once, without the lock's
    /// mutex) before the first wait.
    pub fn shared(&self, range: Range<u64>, before_waiting: impl FnOnce()) -> RangeGuard {
        let mut before_waiting = Some(before_waiting);
        let mut state = self.shared.state.lock();
        loop {
            let blocked = state
                .held
                .iter()
                .any(|held| held.exclusive && overlaps(&held.range, &range))
                || state
                    .waiting_exclusive
                    .iter()
                    .any(|(_, waiting)| overlaps(waiting, &range));
            if !blocked {
                return self.grant(&mut state, range, false);
            }
            if let Some(hook) = before_waiting.take() {
                drop(state);
                hook();
                state = self.shared.state.lock();
                continue;
            }
            self.shared.released.wait(&mut state);
        }
    }

    /// Hold `range` exclusively: wait until no overlapping range is held; overlapping shared
    /// requests made meanwhile wait behind this one.
    pub fn exclusive(&self, range: Range<u64>) -> RangeGuard {
        let mut state = self.shared.state.lock();
        let ticket = state.next_id;
        state.next_id += 1;
        state.waiting_exclusive.push((ticket, range.clone()));
        loop {
            // Earlier exclusive requests that overlap go first (no two exclusive waiters
            // overtake each other).
            let earlier_waiting = state
                .waiting_exclusive
                .iter()
                .any(|(id, waiting)| *id < ticket && overlaps(waiting, &range));
            let held = state.held.iter().any(|held| overlaps(&held.range, &range));
            if !earlier_waiting && !held {
                state.waiting_exclusive.retain(|(id, _)| *id != ticket);
                return self.grant(&mut state, range, true);
            }
            self.shared.released.wait(&mut state);
        }
    }

    fn grant(&self, state: &mut State, range: Range<u64>, exclusive: bool) -> RangeGuard {
        let id = state.next_id;
        state.next_id += 1;
        state.held.push(Held {
            id,
            range,
            exclusive,
        });
        RangeGuard {
            shared: self.shared.clone(),
            id,
        }
    }

    /// How many ranges are held (for tests and assertions).
    pub fn held(&self) -> usize {
        self.shared.state.lock().held.len()
    }
}

impl Drop for RangeGuard {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.held.retain(|held| held.id != self.id);
        drop(state);
        self.shared.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    /// Whether `acquire` finishes within a short while (it runs on its own thread).
    fn granted_soon(acquire: impl FnOnce() -> RangeGuard + Send + 'static) -> Option<RangeGuard> {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(acquire());
        });
        rx.recv_timeout(Duration::from_millis(200)).ok()
    }

    #[test]
    fn shared_ranges_coexist_and_exclusive_waits_for_overlaps_only() {
        let lock = RangeLock::new();
        let a = lock.shared(0..100, || {});
        let _b = lock.shared(50..150, || {});
        let _apart = lock.exclusive(150..200);
        assert_eq!(lock.held(), 3);
        let pending = {
            let lock = lock.clone();
            thread::spawn(move || lock.exclusive(90..120))
        };
        thread::sleep(Duration::from_millis(50));
        assert!(!pending.is_finished(), "granted over shared holders");
        drop(a);
        thread::sleep(Duration::from_millis(50));
        assert!(!pending.is_finished(), "granted while 50..150 is held");
        drop(_b);
        let guard = pending.join().unwrap();
        assert_eq!(lock.held(), 2);
        drop(guard);
        assert_eq!(lock.held(), 1);
    }

    #[test]
    fn a_waiting_exclusive_request_holds_back_later_overlapping_shared_ones() {
        let lock = RangeLock::new();
        let reader = lock.shared(0..10, || {});
        let writer = {
            let lock = lock.clone();
            thread::spawn(move || lock.exclusive(5..20))
        };
        while lock.shared.state.lock().waiting_exclusive.is_empty() {
            thread::yield_now();
        }
        // A later reader of an overlapping range waits (and runs its hook first); one apart
        // does not.
        let hooked = Arc::new(AtomicBool::new(false));
        let late = {
            let (lock, hooked) = (lock.clone(), hooked.clone());
            granted_soon(move || lock.shared(15..16, move || hooked.store(true, Ordering::SeqCst)))
        };
        assert!(late.is_none());
        assert!(hooked.load(Ordering::SeqCst));
        let apart = lock.clone();
        assert!(granted_soon(move || apart.shared(30..40, || {})).is_some());
        drop(reader);
        let exclusive = writer.join().unwrap();
        drop(exclusive);
    }

    #[test]
    fn guards_are_released_on_the_thread_that_drops_them() {
        let lock = RangeLock::new();
        let guard = lock.shared(0..4096, || {});
        thread::spawn(move || drop(guard)).join().unwrap();
        assert_eq!(lock.held(), 0);
        let exclusive = lock.exclusive(0..4096);
        drop(exclusive);
    }
}
