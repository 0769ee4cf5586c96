//! Integration tests, one binary of a few (`cargo test -p tarn-engine --test datasets`): Datasets
//! and their history: snapshots, clones and promote, livelists, holds (a send's and users'), send and receive (batched,
//! resumed, into clones, and hostile streams).
//!
//! The engine's integration tests are grouped into a few binaries rather than one per file, so that
//! the engine is linked a few times instead of some eighty; each file stays a module of its own
//! (`cargo test -p tarn-engine --test datasets MODULE::`). Tests of one binary run in parallel
//! threads, so a test here must not depend on process-wide state (the resident size, a global
//! allocator, environment variables): such a test gets a binary of its own in Cargo.toml.

mod common;

mod datasets;
mod diff;
mod livelists;
mod owner_usage;
mod promote;
mod quotas;
mod receive_batches;
mod receive_clone;
mod receive_hostile;
mod receive_resume;
mod send_holds;
mod send_receive;
mod snapshot_model;
mod snapshots;
mod user_holds;
