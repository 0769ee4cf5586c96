//! tarn-stress: randomized stress of the tarn engine, in the spirit of OpenZFS's ztest and
//! zloop. The binary's documentation (`src/main.rs`) gives the command forms; this library
//! holds the parts, so that tests can read what a run left behind.
//!
//! Modules, in the order a run uses them: [`ops`] (the operation table), [`runner`] (the
//! parent and the loop), [`child`] (the worker process), [`tag`] (self-describing blocks),
//! [`journal`] (what the child promised), [`oracle`] (the verification), [`exit_status`] (how a child ends); [`mount`] runs the same kinds of
//! operations through a FUSE mount of the daemon.

pub mod child;
pub mod exit_status;
pub mod journal;
pub mod mount;
pub mod ops;
pub mod oracle;
pub mod runner;
pub mod tag;
