//! The stat family: the counters of imported pools that `tarn stat` and `tarn pool iostat`
//! print (their command lines, with intervals and table names, stay with the CLI: the daemon
//! is asked for one pool's counters at a time).

use serde::{Deserialize, Serialize};

use super::{PoolName, PoolOption};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verb", content = "args", rename_all = "snake_case")]
pub enum StatRequest {
    /// `data = {"txgs": [{txg, birth_ns, state, dirty_bytes, ...}]}`, oldest first
    /// (`tarn::txg::TxgStats`).
    Txgs(PoolName),
    /// `data = {"arc": {counters: {hits, misses, ...}, size_bytes, ...}}`
    /// (`tarn::cache::BlockCacheStats`).
    Arc(PoolName),
    /// The intent-log counters of the pool's mounted file systems: `data = {"zil": [[name,
    /// bytes, value]...]}`.
    Zil(PoolName),
    /// The vdev I/O counters of one pool, or of every one: `data = {"pools": [{"name": NAME,
    /// "iostat": {elapsed_ns, root: {...}}}]}` (`tarn::pool::PoolIostat`).
    Iostat(PoolOption),
}

impl StatRequest {
    /// The verb as the daemon's log names it.
    pub fn verb(&self) -> &'static str {
        match self {
            StatRequest::Txgs(_) => "stat txgs",
            StatRequest::Arc(_) => "stat arc",
            StatRequest::Zil(_) => "stat zil",
            StatRequest::Iostat(_) => "pool iostat",
        }
    }
}
