//! The `tarn` command's integration tests, one binary (`cargo test -p tarn-cli --test suite`;
//! one file's tests with `--test suite MODULE::`): each file of `suite/` is a module of its
//! own, as the engine groups its integration tests. One binary links the command's
//! dependencies once instead of seventeen times, and its two test threads are kept busy across
//! files: a long test (a directory of 100,000 entries through FUSE) no longer leaves the
//! other thread idle at the end of its file. Tests here run beside tests of other files, so a
//! test must not depend on process-wide state (environment variables, the working directory).

#[path = "suite/bench_mount.rs"]
mod bench_mount;
#[path = "suite/bench_raidz.rs"]
mod bench_raidz;
#[path = "suite/bench_space.rs"]
mod bench_space;
#[path = "suite/bench_steady.rs"]
mod bench_steady;
#[path = "suite/bench_sync.rs"]
mod bench_sync;
#[path = "suite/cli.rs"]
mod cli;
#[path = "suite/daemon.rs"]
mod daemon;
#[path = "suite/datasets.rs"]
mod datasets;
#[path = "suite/iostat.rs"]
mod iostat;
#[path = "suite/json_schema.rs"]
mod json_schema;
#[path = "suite/manuals.rs"]
mod manuals;
#[path = "suite/mount.rs"]
mod mount;
#[path = "suite/mount_crash.rs"]
mod mount_crash;
#[path = "suite/owners.rs"]
mod owners;
#[path = "suite/pool_props.rs"]
mod pool_props;
#[path = "suite/stat.rs"]
mod stat;
#[path = "suite/systemd.rs"]
mod systemd;
#[path = "suite/tools.rs"]
mod tools;
#[path = "suite/writeback_kill.rs"]
mod writeback_kill;
