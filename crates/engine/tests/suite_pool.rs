//! Integration tests, one binary of a few (`cargo test -p tarn-engine --test pool`): The pool and
//! the layers under it: txgs and sync, space accounting and maps, the allocator, vdevs and mirrors,
//! scans, errors and failmode, the ARC and L2ARC.
//!
//! The engine's integration tests are grouped into a few binaries rather than one per file, so that
//! the engine is linked a few times instead of some eighty; each file stays a module of its own
//! (`cargo test -p tarn-engine --test pool MODULE::`). Tests of one binary run in parallel threads,
//! so a test here must not depend on process-wide state (the resident size, a global allocator,
//! environment variables): such a test gets a binary of its own in Cargo.toml.

mod common;

mod accounting;
mod admission_counters;
mod arc_compressed;
mod background_destroy;
mod block_device;
mod destroy_plan;
mod device_resilver;
mod dnode_cache;
mod enospc;
mod error_log;
mod failmode;
mod faults;
mod flush_failure_dtl;
mod gang_blocks;
mod gang_free_damage;
mod iostat_disk_wait;
mod l2arc;
mod large_delete;
mod log_spacemap;
mod log_vdev;
mod mirror_write_in_place_dtl;
mod pool_features;
mod pool_history;
mod pool_props;
mod primarycache;
mod raidz;
mod raidz_expand;
mod scan_namespace;
mod scan_resilver;
mod space_fragmentation;
mod sync_convergence;
mod traverse_resume;
mod txg_history;
mod txg_triggers;
mod vdev_change;
