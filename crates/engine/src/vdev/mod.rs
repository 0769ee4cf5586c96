//! vdev layer (being written).
