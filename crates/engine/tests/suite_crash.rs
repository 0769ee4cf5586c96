//! Integration tests, one binary of a few (`cargo test -p tarn-engine --test crash`): Crash and
//! hostile images: a process killed with SIGKILL or a power cut mid-write, pools imported from
//! damaged, rewound or foreign images. Each crash test re-runs this binary as its child
//! (common::spawn_child).
//!
//! The engine's integration tests are grouped into a few binaries rather than one per file, so that
//! the engine is linked a few times instead of some eighty; each file stays a module of its own
//! (`cargo test -p tarn-engine --test crash MODULE::`). Tests of one binary run in parallel
//! threads, so a test here must not depend on process-wide state (the resident size, a global
//! allocator, environment variables): such a test gets a binary of its own in Cargo.toml.

mod common;

mod crash_datasets;
mod crash_kill9;
mod crash_power_cut;
mod crash_raidz_expand;
mod crash_receive;
mod crash_snapshots;
mod crash_xattr;
mod damage_metadata;
mod format_version;
mod hostile_config;
mod hostile_images;
mod hostile_mos;
mod import_copies;
mod import_state;
mod rewind;
mod zil_kill9;
