//! Send and receive: replication streams of snapshots (OpenZFS dmu_send.c, dmu_recv.c,
//! libzfs_sendrecv.c).
//!
//! # What a stream is
//! A stream is a sequence of records ([`stream`]): BEGIN, then the objects of the snapshot's
//! object set in object order, each as an OBJECT record (its dnode's settings and bonus
//! buffer), its SPILL block, and its data as WRITE and FREE records in offset order; objects
//! that went away as FREEOBJECTS; then END. Every record carries a chained BLAKE3 checksum of the
//! stream before it, so a receiver verifies each record before applying it. Several substreams
//! (BEGIN..END) may follow each other (`send -I`). The stream describes the object layer, not
//! the file system: znodes, directories, xattr directories and spill blocks travel as the
//! bonus buffers, blocks and spill blocks that hold them, so whatever the file system stores
//! arrives as it was, object numbers included.
//!
//! # Send ([`send`])
//! A full stream walks the whole snapshot. An incremental one (from snapshot F, created in
//! txg T) walks only what was born after T: a subtree whose root block was born at or before T
//! is skipped whole (no child is newer than its parent), so the cost follows what changed, not
//! the size of the file system. A dnode block born after T has its every object sent (their
//! OBJECT records are idempotent on the receiver); a hole born after T in an object's tree is
//! a FREE, in the meta-dnode's tree a FREEOBJECTS. Blocks are read through the block layer (its
//! checksums verified, a bad copy failed over but not repaired) and sent as their logical
//! bytes. A send holds every snapshot it reads (`pool/holds.rs`), so none is destroyed under it.
//!
//! # Receive ([`receive`])
//! A reader thread parses and verifies records and hands them over a bounded queue to the
//! writer (the caller's thread), which applies them in open context through ordinary
//! transactions: OBJECT creates or updates the object at the same number, WRITE records to
//! nearby offsets of one object are batched into one transaction (the tunable
//! `recv_write_batch_size`, 1 MiB as OpenZFS's), FREE and FREEOBJECTS free, and END syncs
//! and takes the snapshot with the sender's guid and creation time, so that the next
//! incremental stream finds its source by guid. Records must not go backwards in (object,
//! offset); the first error stops the receive and is the one reported.
//!
//! A full stream creates the target file system (it must not exist); if the receive fails the
//! new file system is destroyed. An incremental stream needs the target's newest snapshot to be
//! its source and the target unchanged since then (`-F` rolls it back first); if the receive
//! fails the target is rolled back to that snapshot, as it was.
//!
//! # Crash behaviour
//! A receive is a series of ordinary transactions: a crash part-way leaves a file system
//! holding part of the stream (a full receive) or the source snapshot's contents plus part of
//! the changes (an incremental one), never a snapshot that claims more than was received; the
//! snapshot is taken only after END was verified and everything before it synced.

pub mod diff;
pub mod generate;
pub mod receive;
pub mod resume;
pub mod stream;

use crate::object::ObjectError;
use crate::pool::PoolError;

pub use diff::{diff, DiffKind, DiffRecord, DiffReport};
pub use generate::{send, SendOptions, SendReport, SentSubstream};
pub use receive::{receive, ReceiveOptions, ReceiveReport, KEPT_BEFORE_THE_ERROR};
pub use resume::{abort_receive, resume_send_options, resume_token};

/// Why a send or receive failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("invalid stream at byte {at}: {what}")]
    BadStream { at: u64, what: String },
    #[error("the stream ends early, at byte {at}: it was truncated")]
    Truncated { at: u64 },
    #[error("cannot read the stream: {0}")]
    Input(std::io::Error),
    #[error("cannot write the stream: {0}")]
    Output(std::io::Error),
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(transparent)]
    Object(#[from] ObjectError),
}

impl From<crate::block::pipeline::PipelineError> for SendError {
    fn from(error: crate::block::pipeline::PipelineError) -> Self {
        SendError::Object(ObjectError::from(error))
    }
}

impl From<crate::block::blkptr::BlockError> for SendError {
    fn from(error: crate::block::blkptr::BlockError) -> Self {
        SendError::Object(ObjectError::from(error))
    }
}

impl From<crate::txg::TxgError> for SendError {
    fn from(error: crate::txg::TxgError) -> Self {
        SendError::Object(ObjectError::from(error))
    }
}
