//! The child's exit statuses: the contract between the worker process ([`crate::child`]), which
//! ends with one of them, the journal ([`crate::journal`]), which ends the child when it cannot
//! record a promise, and the parent ([`crate::runner`]), which reads them. A status not listed
//! here (a kill, a power cut, a normal end) is interpreted by the runner from the round's plan.

/// The child found an inconsistency (also written to the journal as a `failure` record).
pub const EXIT_INCONSISTENT: i32 = 3;
/// A thread of the child panicked (the engine's or the tool's bug; the message is in the log).
pub const EXIT_PANIC: i32 = 4;
/// The child could not do its own bookkeeping (the journal or its run directory).
pub const EXIT_INTERNAL: i32 = 5;
