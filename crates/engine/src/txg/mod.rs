//! txg layer (being written).
