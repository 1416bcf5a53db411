//! What the handlers hand the loop: the store calls they ask for and what each goes on with
//! (`asks.rs`), and the effects the loop carries out in the order given (`effects.rs`). The
//! owners of state (`core/`) name none of it; the loop (`server/`) takes it all.

pub mod asks;
pub mod effects;
