//! `test.*`: functions for checking that a minion is alive and answering.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use crate::function::{CallFuture, Function};
use crate::{Args, Context, ModuleError, Output};

pub(crate) struct Ping;

impl Function for Ping {
    fn name(&self) -> &'static str {
        "test.ping"
    }
    fn doc(&self) -> &'static str {
        "Returns true. Takes no arguments. Used to check that a minion is connected and answering."
    }
    fn call<'a>(&'a self, args: Args, _: &'a Context) -> CallFuture<'a> {
        Box::pin(async move {
            args.parse::<NoArgs>(&[])?;
            Ok(Output::ok(json!(true)))
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

pub(crate) struct Echo;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EchoArgs {
    text: serde_json::Value,
}

impl Function for Echo {
    fn name(&self) -> &'static str {
        "test.echo"
    }
    fn doc(&self) -> &'static str {
        "Returns its argument unchanged.\n\nArguments: text (any value, positional)."
    }
    fn call<'a>(&'a self, args: Args, _: &'a Context) -> CallFuture<'a> {
        Box::pin(async move {
            let args: EchoArgs = args.parse(&["text"])?;
            Ok(Output::ok(args.text))
        })
    }
}

pub(crate) struct Sleep;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SleepArgs {
    length: f64,
}

impl Function for Sleep {
    fn name(&self) -> &'static str {
        "test.sleep"
    }
    fn doc(&self) -> &'static str {
        "Sleeps, then returns true.\n\nArguments: length (seconds, positional; 0 to 86400)."
    }
    fn call<'a>(&'a self, args: Args, _: &'a Context) -> CallFuture<'a> {
        Box::pin(async move {
            let args: SleepArgs = args.parse(&["length"])?;
            if !(0.0..=86_400.0).contains(&args.length) {
                return Err(ModuleError::BadArguments("length must be between 0 and 86400 seconds".into()));
            }
            tokio::time::sleep(Duration::from_secs_f64(args.length)).await;
            Ok(Output::ok(json!(true)))
        })
    }
}

pub(crate) struct Version;

impl Function for Version {
    fn name(&self) -> &'static str {
        "test.version"
    }
    fn doc(&self) -> &'static str {
        "Returns the minion's halite version. Takes no arguments."
    }
    fn call<'a>(&'a self, args: Args, _: &'a Context) -> CallFuture<'a> {
        Box::pin(async move {
            args.parse::<NoArgs>(&[])?;
            Ok(Output::ok(json!(env!("CARGO_PKG_VERSION"))))
        })
    }
}
