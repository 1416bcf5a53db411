//! `halite._native`: the Rust SDK ([`halite_client`]) as a Python extension module.
//!
//! What it does: connects to masters, carries every SDK call out on one tokio runtime shared
//! by the process, and hands results to Python as JSON text, errors as the exceptions of
//! `halite.errors`. Each call comes in two forms: blocking (the GIL released while it waits,
//! so any number of Python threads may call at once, and Ctrl-C still interrupts it) and
//! awaitable (an asyncio future completed from the runtime; cancelling it drops the call).
//!
//! What it does not do: speak the protocol itself (the SDK does, exactly as for Rust
//! callers), or shape results for Python users; the pure-Python package `halite` (beside this
//! crate) turns the JSON into typed objects and is what users import.

mod calls;
mod client;
mod connect;
mod errors;
mod events;
mod keys;
mod runtime;

use pyo3::prelude::*;

/// The module Python imports as `halite._native`.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    runtime::configure();
    module.add_class::<client::NativeClient>()?;
    module.add_class::<events::NativeEvents>()?;
    module.add_function(wrap_pyfunction!(keys::generate_key, module)?)?;
    module.add_function(wrap_pyfunction!(keys::public_key, module)?)?;
    module.add("SDK_VERSION", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
