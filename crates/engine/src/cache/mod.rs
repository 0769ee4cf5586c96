//! cache layer (being written).
