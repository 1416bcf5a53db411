//! `sys.*`: what this minion can do, generated from the registry.

use serde::Deserialize;
use serde_json::json;

use crate::function::{CallFuture, Function};
use crate::{Args, Context, ModuleError, Output};

pub(crate) struct ListFunctions;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

impl Function for ListFunctions {
    fn name(&self) -> &'static str {
        "sys.list_functions"
    }
    fn doc(&self) -> &'static str {
        "Returns the sorted names of every function this minion offers. Takes no arguments."
    }
    fn call<'a>(&'a self, args: Args, cx: &'a Context) -> CallFuture<'a> {
        Box::pin(async move {
            args.parse::<NoArgs>(&[])?;
            Ok(Output::ok(json!(cx.functions.keys().collect::<Vec<_>>())))
        })
    }
}

pub(crate) struct Doc;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocArgs {
    #[serde(default)]
    function: Option<String>,
}

impl Function for Doc {
    fn name(&self) -> &'static str {
        "sys.doc"
    }
    fn doc(&self) -> &'static str {
        "Returns a map of function name to documentation.\n\nArguments: function (optional, positional): \
         only that function, or those of a module when it ends with '.'."
    }
    fn call<'a>(&'a self, args: Args, cx: &'a Context) -> CallFuture<'a> {
        Box::pin(async move {
            let args: DocArgs = args.parse(&["function"])?;
            let docs: serde_json::Map<_, _> = cx
                .functions
                .iter()
                .filter(|(name, _)| match &args.function {
                    None => true,
                    Some(f) if f.ends_with('.') => name.starts_with(f.as_str()),
                    Some(f) => name.as_str() == f,
                })
                .map(|(name, doc)| (name.clone(), json!(doc)))
                .collect();
            if docs.is_empty() {
                if let Some(f) = args.function {
                    return Err(ModuleError::UnknownFunction(f));
                }
            }
            Ok(Output::ok(serde_json::Value::Object(docs)))
        })
    }
}
