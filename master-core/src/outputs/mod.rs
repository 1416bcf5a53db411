//! What the handlers hand the driver and take back: the store calls they ask for and what each
//! goes on with (`asks.rs`), and the effects carried out in the order given (`effects.rs`, by `machine/desks.rs`). The owners of state (`core/`) name none of it.

pub mod asks;
pub mod effects;
