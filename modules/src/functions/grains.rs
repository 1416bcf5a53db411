//! `grains.*`: facts about the host, collected at start-up.

use serde::Deserialize;

use crate::function::{CallFuture, Function};
use crate::{Args, Context, Output};

pub(crate) struct Items;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

impl Function for Items {
    fn name(&self) -> &'static str {
        "grains.items"
    }
    fn doc(&self) -> &'static str {
        "Returns every grain: os, os_family, osrelease, kernel, kernelrelease, hostname, fqdn, \
         ipv4, ipv6, num_cpus, mem_total (MiB), machine_id, plus static grains from the minion config."
    }
    fn call<'a>(&'a self, args: Args, cx: &'a Context) -> CallFuture<'a> {
        Box::pin(async move {
            args.parse::<NoArgs>(&[])?;
            Ok(Output::ok(serde_json::to_value(cx.grains.as_ref()).unwrap_or_default()))
        })
    }
}

pub(crate) struct Get;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetArgs {
    key: String,
}

impl Function for Get {
    fn name(&self) -> &'static str {
        "grains.get"
    }
    fn doc(&self) -> &'static str {
        "Returns one grain, or null if it is not set.\n\nArguments: key (grain name, positional)."
    }
    fn call<'a>(&'a self, args: Args, cx: &'a Context) -> CallFuture<'a> {
        Box::pin(async move {
            let args: GetArgs = args.parse(&["key"])?;
            Ok(Output::ok(cx.grains.get(&args.key).cloned().unwrap_or_default()))
        })
    }
}
