//! Turns: one file's write-backs are stored one at a time, lowest offset first.
//!
//! # Why one at a time, in offset order
//! A lost write-back must not leave a hole (`write_space`, "A lost write-back never leaves a
//! hole"): the kernel sends one file's write-backs in offset order, and storing them in that
//! order means a later range is never stored while an earlier one fails. The engine
//! serializes a file's writes on its inode lock anyway, so serving them one at a time here
//! costs no concurrency, and it keeps the threads that would only wait for that lock off it.
//!
//! # Hand-offs
//! A write-back that arrives while another of its file is being stored parks its thread. The
//! thread that ends a turn hands it to the waiting write-back of lowest offset and wakes that
//! thread alone. Before this, waiters shared one condition variable and every end woke them
//! all, and those admitted together then spun on the inode lock: under 4 KiB random writes,
//! with a dozen write-backs of one file in flight, that cost more CPU than the writes.
//!
//! (Storing queued write-backs on the thread that holds the turn, so that the others need not
//! park, was tried: it was no faster, as the holder then answers and stores in turn where two
//! threads overlap them.)
//!
//! # Failures
//! The turn is handed on however its holder leaves, a panic (an engine bug) included, so no
//! later write-back of the file waits forever.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// The turns of one mount's files.
#[derive(Default)]
pub(crate) struct WriteTurns {
    files: Mutex<HashMap<u64, Turn>>,
}

/// One file's turn, taken while an entry exists: the write-backs waiting for it.
#[derive(Default)]
struct Turn {
    waiting: Vec<Waiter>,
}

/// A parked thread, woken when the turn is handed to it.
struct Waiter {
    offset: u64,
    thread: std::thread::Thread,
    handed: Arc<AtomicBool>,
}

impl WriteTurns {
    /// Serves a write-back of `ino` at `offset`: `store` runs once this thread has the file's
    /// turn (module documentation), and the turn is handed on when it returns.
    pub(crate) fn serve<T>(&self, ino: u64, offset: u64, store: impl FnOnce() -> T) -> T {
        let handed = {
            let mut files = self.files.lock();
            match files.entry(ino) {
                Entry::Vacant(vacant) => {
                    vacant.insert(Turn::default());
                    None
                }
                Entry::Occupied(mut taken) => {
                    let handed = Arc::new(AtomicBool::new(false));
                    taken.get_mut().waiting.push(Waiter {
                        offset,
                        thread: std::thread::current(),
                        handed: handed.clone(),
                    });
                    Some(handed)
                }
            }
        };
        if let Some(handed) = handed {
            while !handed.load(Ordering::Acquire) {
                std::thread::park();
            }
        }
        let _holding = Holding { turns: self, ino };
        store()
    }

    /// The turn of `ino` ends: handed to the waiting write-back of lowest offset, or given
    /// back when none waits.
    fn hand_on(&self, ino: u64) {
        let mut files = self.files.lock();
        let Some(turn) = files.get_mut(&ino) else {
            return;
        };
        let Some(next) = (0..turn.waiting.len()).min_by_key(|&at| turn.waiting[at].offset) else {
            files.remove(&ino);
            return;
        };
        let waiter = turn.waiting.swap_remove(next);
        waiter.handed.store(true, Ordering::Release);
        waiter.thread.unpark();
    }
}

/// A turn held by this thread, handed on when dropped (also when the thread unwinds).
struct Holding<'a> {
    turns: &'a WriteTurns,
    ino: u64,
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.turns.hand_on(self.ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Serves a write-back at `offset` on a thread of its own, which reports the offset when
    /// it stores and then holds the turn until told to end.
    fn serve_on_a_thread(
        turns: &Arc<WriteTurns>,
        offset: u64,
        stored: mpsc::Sender<u64>,
    ) -> (mpsc::Sender<()>, std::thread::JoinHandle<()>) {
        let (end, ended) = mpsc::channel::<()>();
        let turns = turns.clone();
        let thread = std::thread::spawn(move || {
            turns.serve(1, offset, || {
                stored.send(offset).unwrap();
                ended.recv().unwrap();
            });
        });
        (end, thread)
    }

    fn wait_for_waiting(turns: &WriteTurns, count: usize) {
        while turns
            .files
            .lock()
            .get(&1)
            .map_or(0, |turn| turn.waiting.len())
            < count
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn write_backs_of_a_file_are_stored_one_at_a_time_lowest_offset_first() {
        let turns = Arc::new(WriteTurns::default());
        let (stored, order) = mpsc::channel();
        let (end_first, first) = serve_on_a_thread(&turns, 100, stored.clone());
        assert_eq!(order.recv_timeout(Duration::from_secs(10)).unwrap(), 100);
        let (end_high, high) = serve_on_a_thread(&turns, 300, stored.clone());
        wait_for_waiting(&turns, 1);
        let (end_low, low) = serve_on_a_thread(&turns, 200, stored);
        wait_for_waiting(&turns, 2);
        // Another file is not held up.
        assert_eq!(turns.serve(2, 0, || 7), 7);
        // Nothing else of the file is stored while 100 is.
        assert!(order.recv_timeout(Duration::from_millis(50)).is_err());
        end_first.send(()).unwrap();
        // 200 goes first though it arrived last, and 300 waits for it.
        assert_eq!(order.recv_timeout(Duration::from_secs(10)).unwrap(), 200);
        assert!(order.recv_timeout(Duration::from_millis(50)).is_err());
        end_low.send(()).unwrap();
        assert_eq!(order.recv_timeout(Duration::from_secs(10)).unwrap(), 300);
        end_high.send(()).unwrap();
        for thread in [first, low, high] {
            thread.join().unwrap();
        }
        assert!(turns.files.lock().is_empty());
    }

    #[test]
    fn a_panic_while_holding_the_turn_hands_it_on() {
        let turns = Arc::new(WriteTurns::default());
        let (release, released) = mpsc::channel::<()>();
        let holder = {
            let turns = turns.clone();
            std::thread::spawn(move || {
                turns.serve(1, 0, || {
                    released.recv().unwrap();
                    panic!("an engine bug");
                });
            })
        };
        while turns.files.lock().is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (stored, order) = mpsc::channel();
        let waiter = serve_on_a_thread(&turns, 10, stored);
        wait_for_waiting(&turns, 1);
        release.send(()).unwrap();
        assert!(holder.join().is_err());
        assert_eq!(order.recv_timeout(Duration::from_secs(10)).unwrap(), 10);
        waiter.0.send(()).unwrap();
        waiter.1.join().unwrap();
        assert!(turns.files.lock().is_empty());
    }
}
