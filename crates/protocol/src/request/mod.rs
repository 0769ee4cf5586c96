//! The requests of each family of verbs, one module each. A verb's arguments are one struct,
//! defined once: clap parses it from the command line (derive `Args`) and the wire carries it
//! (serde), so that the CLI, the daemon and the protocol cannot disagree about a verb's
//! arguments. The CLI resolves what depends on its environment in place before it sends the
//! struct (paths made absolute); fields only the CLI reads are `#[serde(skip)]`.
//!
//! Each family is an enum of its verbs, nested in [`Request`](crate::Request) as one variant,
//! so that the daemon's handler of a family matches its enum, exhaustively: a new verb that a
//! handler does not serve does not compile.

pub mod devices;
pub mod inject;
pub mod inspect;
pub mod replication;
pub mod scan;
pub mod stat;

use clap::Args;
use serde::{Deserialize, Serialize};

/// The arguments of a verb that names one pool and nothing else.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolName {
    pub pool: String,
}

/// The arguments of a verb that names one pool or, without one, every pool.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolOption {
    pub pool: Option<String>,
}
