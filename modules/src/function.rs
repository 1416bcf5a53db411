//! The trait every execution function implements.

use std::future::Future;
use std::pin::Pin;

use halite_protocol::message::Value;

use crate::{Args, Context};

/// A boxed future, so functions can live in one list as trait objects.
pub type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<Output, ModuleError>> + Send + 'a>>;

/// A named, locally defined action.
pub trait Function: Send + Sync {
    /// `module.function`, matching `^[a-z]+\.[a-z_]+$`.
    fn name(&self) -> &'static str;
    /// What it does, its arguments and its return, for `sys.doc`.
    fn doc(&self) -> &'static str;
    /// Runs it. Dropping the future must stop the work (see the crate docs).
    fn call<'a>(&'a self, args: Args, cx: &'a Context) -> CallFuture<'a>;
}

/// A function's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// Return data.
    pub value: Value,
    /// 0 on success; a command's exit status otherwise.
    pub retcode: i32,
    /// Some output was cut to respect size caps.
    pub truncated: bool,
}

impl Output {
    /// A successful result.
    pub fn ok(value: Value) -> Self {
        Output { value, retcode: 0, truncated: false }
    }
}

/// Why a call failed before producing an [`Output`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModuleError {
    /// No function of that name in the registry.
    #[error("unknown function {0:?}")]
    UnknownFunction(String),
    /// The arguments do not fit the function's schema.
    #[error("bad arguments: {0}")]
    BadArguments(String),
    /// The function failed.
    #[error("{0}")]
    Failed(String),
}
