//! object layer (being written).
