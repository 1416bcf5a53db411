//! The trait every execution function implements, and the typed form built-ins use.

use std::future::Future;
use std::pin::Pin;

use halite_protocol::message::Value;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::{Args, Context};

/// A boxed future, so functions can live in one list as trait objects.
pub type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<Output, ModuleError>> + Send + 'a>>;

/// A named, locally defined action, as the registry holds it.
pub trait Function: Send + Sync {
    /// `module.function`, matching `^[a-z]+\.[a-z_]+$`.
    fn name(&self) -> &str;
    /// What it does, for `sys.doc` and `docs/modules.md`.
    fn doc(&self) -> &str;
    /// JSON Schema of its arguments.
    fn schema(&self) -> Value;
    /// Names given to positional arguments, in order.
    fn positional(&self) -> Vec<String>;
    /// Runs it. Dropping the future must stop the work (see the crate docs).
    fn call<'a>(&'a self, args: Args, cx: &'a Context) -> CallFuture<'a>;
}

/// A built-in function with a typed argument struct. Every `Typed` is a [`Function`].
pub trait Typed: Send + Sync + 'static {
    /// `module.function`.
    const NAME: &'static str;
    /// Documentation (arguments are documented on the struct's fields).
    const DOC: &'static str;
    /// Names given to positional arguments, in order.
    const POSITIONAL: &'static [&'static str] = &[];
    /// Salt's names for arguments that halite names otherwise (`python_shell` for `shell`):
    /// taken as the halite name, so a Salt habit works instead of being an unknown argument.
    const SALT_NAMES: &'static [(&'static str, &'static str)] = &[];
    /// The arguments; use `#[serde(deny_unknown_fields)]`.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// Runs with parsed arguments.
    fn run<'a>(
        &'a self,
        args: Self::Args,
        cx: &'a Context,
    ) -> impl Future<Output = Result<Output, ModuleError>> + Send + 'a;
}

impl<T: Typed> Function for T {
    fn name(&self) -> &str {
        T::NAME
    }
    fn doc(&self) -> &str {
        T::DOC
    }
    fn schema(&self) -> Value {
        serde_json::to_value(schemars::schema_for!(T::Args)).unwrap_or_default()
    }
    fn positional(&self) -> Vec<String> {
        T::POSITIONAL.iter().map(|p| (*p).to_owned()).collect()
    }
    fn call<'a>(&'a self, mut args: Args, cx: &'a Context) -> CallFuture<'a> {
        Box::pin(async move {
            for (salt, ours) in T::SALT_NAMES {
                if let Some(value) = args.keyword.remove(*salt) {
                    if args.keyword.contains_key(*ours) {
                        return Err(ModuleError::BadArguments(format!("give {ours} or {salt}, not both")));
                    }
                    args.keyword.insert((*ours).to_owned(), value);
                }
            }
            let parsed: T::Args = match args.parse(T::POSITIONAL) {
                Ok(parsed) => parsed,
                // As written on a command line, a value may not fit yet (`mode=644`, `false`):
                // fitted to the schema, then parsed again (the schema is made only then).
                // Still not fitting, the error names the argument, what it takes and an example.
                Err(_) => {
                    let mut object = args.to_object(T::POSITIONAL)?;
                    let schema = self.schema();
                    crate::coerce::to_schema(&mut object, &schema, T::POSITIONAL);
                    crate::arg_errors::parse(object, &schema).map_err(|misfit| ModuleError::BadArguments(misfit.0))?
                }
            };
            self.run(parsed, cx).await
        })
    }
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

    /// The result of a state-changing function: whether it changed something (or, with
    /// `test=true`, would), what it did in words, and details (a diff, the commands run).
    pub fn change(changed: bool, comment: impl Into<String>, details: Value) -> Self {
        Output::ok(json!({ "changed": changed, "comment": comment.into(), "details": details }))
    }
}

/// Why a call failed before producing an [`Output`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModuleError {
    /// No function of that name in the registry (the text names it, and the nearest known
    /// name when one is close: "did you mean …?").
    #[error("unknown function {0}")]
    UnknownFunction(String),
    /// The arguments do not fit the function's schema.
    #[error("bad arguments: {0}")]
    BadArguments(String),
    /// The minion's policy does not allow this function (for this caller).
    #[error("denied: {0}")]
    Denied(String),
    /// The function failed.
    #[error("{0}")]
    Failed(String),
}
