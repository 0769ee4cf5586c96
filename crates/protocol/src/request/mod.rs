//! The requests of each family of verbs, one module each. A verb's arguments are one struct,
//! defined once: clap parses it from the command line (derive `Args`) and the wire carries it
//! (serde), so that the CLI, the daemon and the protocol cannot disagree about a verb's
//! arguments. The CLI resolves what depends on its environment in place before it sends the
//! struct (paths made absolute); fields only the CLI reads are `#[serde(skip)]`.
//!
//! Each family is an enum of its verbs, nested in [`Request`](crate::Request) as one variant,
//! so that the daemon's handler of a family matches its enum, exhaustively: a new verb that a
//! handler does not serve does not compile.

pub mod dataset;
pub mod devices;
pub mod inject;
pub mod inspect;
pub mod pool;
pub mod replication;
pub mod scan;
pub mod snapshot;
pub mod stat;

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::error::Failure;
use crate::format::ListFormat;

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

/// The options of a verb that prints a table: `-H`, `-p`, `-j`, `-o FIELD,...`. They decide
/// how the CLI prints what the daemon answers, so they do not travel.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct TableFormatArgs {
    /// No header; fields separated by tabs.
    #[arg(short = 'H')]
    pub no_header: bool,
    /// Exact numbers (bytes); with -j, whole numbers as JSON integers.
    #[arg(short = 'p')]
    pub exact: bool,
    /// JSON output (OpenZFS 2.3's schema where zpool or zfs has -j; tarn's own objects under
    /// the same header elsewhere).
    #[arg(short = 'j')]
    pub json: bool,
    /// Fields to print, comma-separated.
    #[arg(short = 'o', value_delimiter = ',')]
    pub fields: Option<Vec<String>>,
}

impl TableFormatArgs {
    pub fn format(&self) -> ListFormat {
        ListFormat {
            no_header: self.no_header,
            exact: self.exact,
            json: self.json,
            fields: self.fields.clone(),
        }
    }
}

/// The `PROP[,PROP...]|all` argument of `get` verbs, split and trimmed; an empty list is an
/// error saying what to give.
pub fn property_list(argument: &str) -> Result<Vec<String>, Failure> {
    let properties: Vec<String> = argument
        .split(',')
        .map(str::trim)
        .filter(|property| !property.is_empty())
        .map(str::to_string)
        .collect();
    if properties.is_empty() {
        return Err(Failure(
            "no property named: give PROP[,PROP...] or all".into(),
        ));
    }
    Ok(properties)
}
