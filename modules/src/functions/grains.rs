//! `grains.*`: facts about the host, collected at start-up.

use schemars::JsonSchema;
use serde::Deserialize;

use super::test::NoArgs;
use crate::{Context, ModuleError, Output, Typed};

pub(crate) struct Items;

impl Typed for Items {
    const NAME: &'static str = "grains.items";
    const DOC: &'static str = "Returns every grain: os, os_family, osrelease, kernel, kernelrelease, hostname, fqdn, \
         ipv4, ipv6, num_cpus, mem_total (MiB), machine_id, cpuarch, init (systemd, openrc or sysvinit), \
         cloud_instance_id (cloud-init's instance-id, where it ran: a Nova server's UUID), plus static grains \
         from the minion config.";
    type Args = NoArgs;
    async fn run(&self, _: NoArgs, cx: &Context) -> Result<Output, ModuleError> {
        Ok(Output::ok(serde_json::to_value(cx.grains.as_ref()).unwrap_or_default()))
    }
}

pub(crate) struct Get;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetArgs {
    /// Grain name.
    key: String,
}

impl Typed for Get {
    const NAME: &'static str = "grains.get";
    const DOC: &'static str = "Returns one grain, or null if it is not set.";
    const POSITIONAL: &'static [&'static str] = &["key"];
    type Args = GetArgs;
    async fn run(&self, args: GetArgs, cx: &Context) -> Result<Output, ModuleError> {
        Ok(Output::ok(cx.grains.get(&args.key).cloned().unwrap_or_default()))
    }
}
