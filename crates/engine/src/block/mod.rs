//! block layer (being written).
pub mod blkptr;
pub mod checksum;
pub mod compress;
