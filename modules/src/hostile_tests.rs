//! The locked-down function set (`--no-default-features`) against a hostile caller: every
//! function it still has is called with every string argument pointed at the minion's key, a
//! script of the caller's, a path climbing into the state directory, and a FIFO. None may run
//! the script, return or change the key, or hang.

#![cfg(test)]
#![cfg(not(any(
    feature = "cmd",
    feature = "files",
    feature = "archive",
    feature = "packages",
    feature = "services",
    feature = "accounts",
    feature = "deploy"
)))]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::{Args, Context, Dispatcher, PathGuard, Policy, Registry};

/// The hostile values for a string argument.
fn hostile_strings(dir: &std::path::Path) -> Vec<String> {
    vec![
        dir.join("state/minion.key").display().to_string(),
        dir.join("evil").display().to_string(),
        dir.join("open/../state/minion.key").display().to_string(),
        dir.join("open/key-link").display().to_string(),
        dir.join("fifo").display().to_string(),
        "../../state/minion.key".into(),
    ]
}

/// The arguments' names and types from a function's schema.
fn properties(schema: &Value) -> Vec<(String, String)> {
    let Some(props) = schema["properties"].as_object() else { return Vec::new() };
    props
        .iter()
        .map(|(name, p)| {
            let kind = match &p["type"] {
                Value::String(t) => t.clone(),
                Value::Array(types) => {
                    types.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or("").into()
                }
                _ => String::new(),
            };
            (name.clone(), kind)
        })
        .collect()
}

#[test]
fn no_remaining_function_runs_a_chosen_binary_reads_a_secret_or_hangs() {
    let dir = std::env::temp_dir().join(format!("halite-hostile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("state")).unwrap();
    std::fs::create_dir_all(dir.join("open")).unwrap();
    std::fs::write(dir.join("state/minion.key"), "SECRET-KEY-BYTES").unwrap();
    std::os::unix::fs::symlink(dir.join("state/minion.key"), dir.join("open/key-link")).unwrap();
    let marker = dir.join("ran");
    std::fs::write(dir.join("evil"), format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(dir.join("evil"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    nix::unistd::mkfifo(&dir.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();

    let dispatcher = Arc::new(Dispatcher {
        registry: Arc::new(Registry::standard()),
        policy: Policy::allow_all(),
        plans_dir: dir.join("open"),
        deploy: Default::default(),
        paths: PathGuard::new(&[dir.join("state")], None),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut calls = 0;
    for function in dispatcher.registry.iter() {
        let name = function.name().to_owned();
        let props = properties(&function.schema());
        for value in hostile_strings(&dir) {
            for (target, _) in props.iter().filter(|(_, kind)| kind == "string" || kind == "array") {
                let mut kwargs = BTreeMap::new();
                for (arg, kind) in &props {
                    let hostile = match kind.as_str() {
                        "string" => json!(value),
                        "array" => json!([value]),
                        _ => continue,
                    };
                    if arg == target || !kwargs.contains_key(arg) {
                        kwargs.insert(arg.clone(), hostile);
                    }
                }
                if name == "pkg.list" || name == "pkg.version" {
                    kwargs.insert("provider".into(), json!("pip"));
                }
                let cx = Context { dispatcher: Some(dispatcher.clone()), ..Context::default() };
                let call = dispatcher.call(&name, Args::new(Vec::new(), kwargs.clone()), &cx);
                let done = runtime.block_on(async { tokio::time::timeout(Duration::from_secs(10), call).await });
                calls += 1;
                let out = done.unwrap_or_else(|_| panic!("{name} {kwargs:?} hung"));
                let text = format!("{out:?}");
                assert!(!text.contains("SECRET-KEY-BYTES"), "{name} {kwargs:?} returned the key: {text}");
                assert!(!marker.exists(), "{name} {kwargs:?} ran the caller's script");
            }
        }
    }
    assert!(calls > 20, "every remaining function was tried ({calls} calls)");
    assert_eq!(std::fs::read_to_string(dir.join("state/minion.key")).unwrap(), "SECRET-KEY-BYTES");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_locked_down_set_is_what_its_documentation_says() {
    let names: Vec<String> = Registry::standard().iter().map(|f| f.name().to_owned()).collect();
    for absent in ["cmd.run", "cmd.script", "file.managed", "pkg.install", "deploy.apply", "archive.extract"] {
        assert!(!names.iter().any(|n| n == absent), "{absent} is in the locked-down build");
    }
    for present in ["file.read", "file.stat", "pkg.list", "service.status", "plan.run"] {
        assert!(names.iter().any(|n| n == present), "{present} is missing from the locked-down build");
    }
}
