//! dataset layer (being written).
