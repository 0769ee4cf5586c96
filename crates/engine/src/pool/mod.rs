//! pool layer (being written).
