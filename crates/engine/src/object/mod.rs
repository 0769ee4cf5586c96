//! object layer (being written).
pub mod kv;
