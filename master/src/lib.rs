//! The halite master daemon.
pub mod target;
