//! Arbitrary text into the target parser (every kind) and the matcher: no panic, no stack
//! overflow, whatever a client, a gateway token or a minion's `peer.publish` sends.
#![no_main]

use std::collections::BTreeMap;

use halite_protocol::message::{TargetKind, Value};
use halite_targeting::Expr;
use libfuzzer_sys::fuzz_target;

const KINDS: [TargetKind; 6] =
    [TargetKind::Glob, TargetKind::List, TargetKind::Regex, TargetKind::Grain, TargetKind::Compound, TargetKind::Nodegroup];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let kind = KINDS[usize::from(selector) % KINDS.len()];
    let nodegroups = BTreeMap::from([
        ("web".to_owned(), "web* and not G@os:Alpine".to_owned()),
        ("loop".to_owned(), "N@loop or db*".to_owned()),
        ("fuzz".to_owned(), text.to_owned()),
    ]);
    // Grains of every shape Salt's walk treats apart: text, lists, nested mappings, mappings in
    // lists, numbers, booleans, null.
    let nested = serde_json::json!({"a": {"a": {"a": {"a": ["x", {"a": "y"}]}}}});
    let grains = BTreeMap::from([
        ("os".to_owned(), Value::from("Debian")),
        ("roles".to_owned(), Value::from(vec!["web"])),
        ("ip_interfaces".to_owned(), serde_json::json!({"eth0": ["10.0.0.1", "fe80::1"]})),
        ("ipv4".to_owned(), serde_json::json!(["127.0.0.1", "10.0.0.1"])),
        ("a".to_owned(), nested),
        ("num_cpus".to_owned(), serde_json::json!(4)),
        ("virtual".to_owned(), serde_json::json!(true)),
        ("none".to_owned(), Value::Null),
    ]);
    if let Ok(expr) = Expr::parse(kind, text, &nodegroups) {
        let _ = expr.matches("web1", &grains);
        let _ = expr.matches(text, &grains);
    }
});
