//! `test.*`: functions for checking that a minion is alive and answering.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::{Context, ModuleError, Output, Typed};

/// No arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoArgs {}

pub(crate) struct Ping;

impl Typed for Ping {
    const NAME: &'static str = "test.ping";
    const DOC: &'static str = "Returns true. Used to check that a minion is connected and answering.";
    type Args = NoArgs;
    async fn run(&self, _: NoArgs, _: &Context) -> Result<Output, ModuleError> {
        Ok(Output::ok(json!(true)))
    }
}

pub(crate) struct Echo;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EchoArgs {
    /// Any value; returned unchanged.
    text: serde_json::Value,
}

impl Typed for Echo {
    const NAME: &'static str = "test.echo";
    const DOC: &'static str = "Returns its argument unchanged.";
    const POSITIONAL: &'static [&'static str] = &["text"];
    type Args = EchoArgs;
    async fn run(&self, args: EchoArgs, _: &Context) -> Result<Output, ModuleError> {
        Ok(Output::ok(args.text))
    }
}

pub(crate) struct Sleep;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SleepArgs {
    /// Seconds to sleep, 0 to 86400.
    length: f64,
}

impl Typed for Sleep {
    const NAME: &'static str = "test.sleep";
    const DOC: &'static str = "Sleeps, then returns true.";
    const POSITIONAL: &'static [&'static str] = &["length"];
    type Args = SleepArgs;
    async fn run(&self, args: SleepArgs, _: &Context) -> Result<Output, ModuleError> {
        if !(0.0..=86_400.0).contains(&args.length) {
            return Err(ModuleError::BadArguments("length must be between 0 and 86400 seconds".into()));
        }
        tokio::time::sleep(Duration::from_secs_f64(args.length)).await;
        Ok(Output::ok(json!(true)))
    }
}

pub(crate) struct Version;

impl Typed for Version {
    const NAME: &'static str = "test.version";
    const DOC: &'static str = "Returns the minion's halite version.";
    type Args = NoArgs;
    async fn run(&self, _: NoArgs, _: &Context) -> Result<Output, ModuleError> {
        Ok(Output::ok(json!(env!("CARGO_PKG_VERSION"))))
    }
}
