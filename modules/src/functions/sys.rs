//! `sys.*`: what this minion can do, generated from the registry.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::test::NoArgs;
use crate::{docs, Context, ModuleError, Output, Typed};

pub(crate) struct ListFunctions;

impl Typed for ListFunctions {
    const NAME: &'static str = "sys.list_functions";
    const DOC: &'static str = "Returns the sorted names of every function this minion has, built-in and custom.";
    type Args = NoArgs;
    async fn run(&self, _: NoArgs, cx: &Context) -> Result<Output, ModuleError> {
        let dispatcher =
            cx.dispatcher.as_ref().ok_or_else(|| ModuleError::Failed("no registry in this context".into()))?;
        let names: Vec<&str> = dispatcher.registry.iter().map(|f| f.name()).collect();
        Ok(Output::ok(json!(names)))
    }
}

pub(crate) struct Doc;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DocArgs {
    /// Only this function, or a module's functions when it ends with `.` (e.g. `pkg.`).
    #[serde(default)]
    function: Option<String>,
}

impl Typed for Doc {
    const NAME: &'static str = "sys.doc";
    const DOC: &'static str = "Returns a map of function name to its documentation, arguments included.";
    const POSITIONAL: &'static [&'static str] = &["function"];
    type Args = DocArgs;
    async fn run(&self, args: DocArgs, cx: &Context) -> Result<Output, ModuleError> {
        let dispatcher =
            cx.dispatcher.as_ref().ok_or_else(|| ModuleError::Failed("no registry in this context".into()))?;
        let docs: serde_json::Map<_, _> = dispatcher
            .registry
            .iter()
            .filter(|f| match &args.function {
                None => true,
                Some(prefix) if prefix.ends_with('.') => f.name().starts_with(prefix.as_str()),
                Some(name) => f.name() == name,
            })
            .map(|f| (f.name().to_owned(), json!(docs::render_function(f))))
            .collect();
        if docs.is_empty() {
            if let Some(f) = args.function {
                return Err(dispatcher.registry.unknown(&f));
            }
        }
        Ok(Output::ok(serde_json::Value::Object(docs)))
    }
}
