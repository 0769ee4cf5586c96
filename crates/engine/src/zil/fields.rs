//! Little-endian field access and the error constructor that the log's block format
//! (`format.rs`) and record format (`record.rs`) share. The block format contains records, so
//! it uses the record format; both use these from here.

use crate::object::log_header::LogFormatError;

pub(super) fn bad<T>(what: impl Into<String>) -> Result<T, LogFormatError> {
    Err(LogFormatError(what.into()))
}

pub(super) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

pub(super) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

pub(super) fn put_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

pub(super) fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}
