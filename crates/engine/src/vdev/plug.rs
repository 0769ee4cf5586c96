//! Plugging the vdev queues (`queue.rs`), as a block layer's plug.
//!
//! A thread that submits a burst of asynchronous writes (the sync thread writing a txg) holds
//! a [`Plug`], as a block layer's plug: its asynchronous requests wait in their queues
//! without waking a worker until `vdev_plug_batch` (64) of them are held, the thread submits a
//! blocking request or waits for writes ([`kick_plugged`]), or the plug ends. A burst then
//! costs one wake-up per batch instead of one per request, and adjacent requests are pending
//! together, so they aggregate; without it, a device faster than the submitter gets one
//! 8 KiB write and one wake-up per block. Requests are only held while the queue has a
//! worker; every held request is issued by the next kick at the latest.

use std::cell::RefCell;
use std::sync::Arc;

/// A queue that holds requests of a plugged thread. The queue (`queue.rs`) implements it; the
/// plug, which the queue consults as it takes each request, names only this.
pub(super) trait PluggedQueue: Send + Sync {
    /// Wake a worker for the held requests, if one is idle and a class may issue.
    fn kick(&self);
}

/// A thread's plug: the queues holding its requests that no worker was woken for.
struct Plugged {
    depth: u32,
    queues: Vec<Arc<dyn PluggedQueue>>,
    held: usize,
}

thread_local! {
    static PLUGGED: RefCell<Option<Plugged>> = const { RefCell::new(None) };
}

/// While alive, this thread's asynchronous requests are held back from the workers (see
/// the module documentation). Nests; the outermost end kicks what is held.
pub struct Plug(());

impl Plug {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Plug {
        PLUGGED.with(|plugged| {
            let mut plugged = plugged.borrow_mut();
            match plugged.as_mut() {
                Some(plugged) => plugged.depth += 1,
                None => {
                    *plugged = Some(Plugged {
                        depth: 1,
                        queues: Vec::new(),
                        held: 0,
                    })
                }
            }
        });
        Plug(())
    }
}

impl Drop for Plug {
    fn drop(&mut self) {
        kick_plugged();
        PLUGGED.with(|plugged| {
            let mut plugged = plugged.borrow_mut();
            if let Some(state) = plugged.as_mut() {
                state.depth -= 1;
                if state.depth == 0 {
                    *plugged = None;
                }
            }
        });
    }
}

/// Wake workers for every request this thread's plug holds (before the thread waits for any
/// I/O: a held request might be what it waits for).
pub fn kick_plugged() {
    let queues = PLUGGED.with(|plugged| {
        plugged
            .borrow_mut()
            .as_mut()
            .map(|plugged| {
                plugged.held = 0;
                std::mem::take(&mut plugged.queues)
            })
            .unwrap_or_default()
    });
    for queue in queues {
        queue.kick();
    }
}

/// Note that `queue` holds a request of this thread's plug; kick at a full batch.
pub(super) fn hold_plugged<Q: PluggedQueue + 'static>(queue: &Arc<Q>, batch: u32) {
    let full = PLUGGED.with(|plugged| {
        let mut plugged = plugged.borrow_mut();
        let plugged = plugged.as_mut().expect("checked plugged before holding");
        if !plugged
            .queues
            .iter()
            .any(|held| std::ptr::addr_eq(Arc::as_ptr(held), Arc::as_ptr(queue)))
        {
            plugged.queues.push(queue.clone());
        }
        plugged.held += 1;
        plugged.held >= batch as usize
    });
    if full {
        kick_plugged();
    }
}

pub(super) fn thread_is_plugged() -> bool {
    PLUGGED.with(|plugged| plugged.borrow().is_some())
}
