//! space layer (being written).
pub mod storage;
