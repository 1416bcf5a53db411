//! The store calls the loop makes to answer the handlers' asks (`outputs/asks.rs`): each ask is one
//! or a few calls of the store (`halite_store`), made in order, whose results go back to the
//! desk that asked. They touch nothing but the store; the store knows nothing of them.

pub(crate) mod keys;
pub(crate) mod reads;
pub(crate) mod requests;
