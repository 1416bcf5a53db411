//! `grains.*`: facts about the host, collected at start-up.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

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
    /// Grain name; a path into it with the delimiter, as Salt's: `ip_interfaces:eth0`,
    /// `ipv4:0` (a list's first item; -1 its last), a word inside a list of mappings.
    key: String,
    /// What to return when it is not set (null by default).
    #[serde(default)]
    default: Value,
    /// What separates the path's keys (`:`).
    #[serde(default = "colon")]
    delimiter: String,
}

fn colon() -> String {
    ":".into()
}

impl Typed for Get {
    const NAME: &'static str = "grains.get";
    const DOC: &'static str = "Returns one grain, or a value inside it by a path (`ipv4:0`, `ip_interfaces:eth0`), \
         walked as Salt's grains.get walks it; default (null) if it is not set.";
    const POSITIONAL: &'static [&'static str] = &["key", "default"];
    type Args = GetArgs;
    async fn run(&self, args: GetArgs, cx: &Context) -> Result<Output, ModuleError> {
        if args.delimiter.is_empty() {
            return Err(ModuleError::BadArguments("delimiter is empty".into()));
        }
        let found = match cx.grains.get(&args.key) {
            // A grain whose name holds the delimiter is found whole first.
            Some(whole) => Some(whole),
            None => lookup(&cx.grains, &args.key, &args.delimiter),
        };
        Ok(Output::ok(found.cloned().unwrap_or(args.default)))
    }
}

/// Salt's `traverse_dict_and_list`: mapping keys, list indexes (negative from the end), and
/// for a word in a list, the first mapping of the list that has it.
fn lookup<'a>(grains: &'a std::collections::BTreeMap<String, Value>, path: &str, delimiter: &str) -> Option<&'a Value> {
    let mut keys = path.split(delimiter);
    let mut at = grains.get(keys.next()?)?;
    for key in keys {
        at = match at {
            Value::Object(map) => map.get(key)?,
            Value::Array(items) => match key.trim().parse::<i64>() {
                Ok(index) => {
                    let index = if index < 0 { index + i64::try_from(items.len()).ok()? } else { index };
                    items.get(usize::try_from(index).ok()?)?
                }
                Err(_) => items.iter().find_map(|item| item.as_object().and_then(|m| m.get(key)))?,
            },
            _ => return None,
        };
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::lookup;
    use serde_json::json;

    #[test]
    fn paths_walk_mappings_lists_and_the_mappings_in_lists() {
        let grains = [
            ("ipv4".to_owned(), json!(["127.0.0.1", "10.0.0.5"])),
            ("ip_interfaces".to_owned(), json!({"eth0": ["10.0.0.5"]})),
            ("disks".to_owned(), json!([{"sda": {"size": 10}}])),
        ]
        .into_iter()
        .collect();
        assert_eq!(lookup(&grains, "ipv4:0", ":"), Some(&json!("127.0.0.1")));
        assert_eq!(lookup(&grains, "ipv4:-1", ":"), Some(&json!("10.0.0.5")));
        assert_eq!(lookup(&grains, "ipv4:2", ":"), None);
        assert_eq!(lookup(&grains, "ip_interfaces:eth0:0", ":"), Some(&json!("10.0.0.5")));
        assert_eq!(lookup(&grains, "disks:sda:size", ":"), Some(&json!(10)));
        assert_eq!(lookup(&grains, "ip_interfaces|eth0", "|"), Some(&json!(["10.0.0.5"])));
        assert_eq!(lookup(&grains, "nosuch:x", ":"), None);
    }
}
