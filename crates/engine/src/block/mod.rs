//! block layer (being written).
pub mod blkptr;
