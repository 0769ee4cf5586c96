//! check layer (being written).
