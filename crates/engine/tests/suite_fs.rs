//! Integration tests, one binary of a few (`cargo test -p tarn-engine --test fs`): Objects and file
//! systems: the POSIX layer, directories, extended attributes and ACLs, concurrent writers, the
//! intent log, and the models that compare them with a reference.
//!
//! The engine's integration tests are grouped into a few binaries rather than one per file, so that
//! the engine is linked a few times instead of some eighty; each file stays a module of its own
//! (`cargo test -p tarn-engine --test fs MODULE::`). Tests of one binary run in parallel threads,
//! so a test here must not depend on process-wide state (the resident size, a global allocator,
//! environment variables): such a test gets a binary of its own in Cargo.toml.

mod common;

mod concurrent_writers;
mod fs_acl;
mod fs_block_growth;
mod fs_concurrent;
mod fs_large_directory;
mod fs_model;
mod fs_posix;
mod fs_prefetch;
mod fs_project;
mod fs_ranges;
mod fs_spill;
mod fs_xattr;
mod fs_xattr_model;
mod model;
mod zil;
mod zil_indirect;
mod zil_namespace;
