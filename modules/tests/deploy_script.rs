//! Conformance of `deploy.apply` and its built-in script hook with the Heat contract
//! (`docs/engine-guide.md`, "Heat"): inputs, outputs, exit status, de-duplication, hooks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_modules::{Args, Context, DeploySettings, Dispatcher, ModuleError, Output, Policy, Registry};
use serde_json::{json, Value};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A minion's deploy directories in a fresh temporary directory.
struct Agent {
    dir: PathBuf,
    dispatcher: Arc<Dispatcher>,
}

impl Agent {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "halite-deploy-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("hooks")).unwrap();
        let deploy = DeploySettings {
            deployed_dir: dir.join("deployed"),
            hooks_dirs: vec![dir.join("missing-hooks"), dir.join("hooks")],
            script_working_dir: dir.join("working"),
            script_outputs_dir: dir.join("outputs"),
            default_timeout_secs: 0,
        };
        let dispatcher = Arc::new(Dispatcher {
            registry: Arc::new(Registry::standard()),
            policy: Policy::allow_all(),
            plans_dir: dir.join("plans"),
            deploy,
            paths: Default::default(),
        });
        Agent { dir, dispatcher }
    }

    fn call(&self, kwargs: Value) -> Result<Output, ModuleError> {
        let kwargs: BTreeMap<String, Value> = serde_json::from_value(kwargs).unwrap();
        let cx = Context { dispatcher: Some(self.dispatcher.clone()), ..Context::default() };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(self.dispatcher.call("deploy.apply", Args::new(Vec::new(), kwargs), &cx))
    }

    /// Applies an item and returns its signal and return code.
    fn apply(&self, item: Value) -> (serde_json::Map<String, Value>, i32) {
        let out = self.call(json!({ "item": item })).unwrap();
        let Value::Object(signal) = out.value else { panic!("signal is not an object: {:?}", out.value) };
        (signal, out.retcode)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn script_item(id: &str, script: &str, inputs: Value, outputs: &[&str]) -> Value {
    let outputs: Vec<Value> = outputs.iter().map(|name| json!({ "name": name })).collect();
    json!({ "id": id, "name": "conf", "group": "script", "config": script, "inputs": inputs, "outputs": outputs,
            "options": {}, "creation_time": "2026-11-21T00:00:00Z" })
}

/// A script that copies each named environment variable verbatim into the output of that name.
fn echo_env_script(names: &[&str]) -> String {
    let mut script = String::from("#!/bin/sh\n");
    for name in names {
        script.push_str(&format!("printf '%s' \"${name}\" > \"$heat_outputs_path.{name}\"\n"));
    }
    script
}

#[test]
fn inputs_of_every_type_reach_the_script_as_heat_agents_passes_them() {
    let agent = Agent::new();
    let inputs = json!([
        {"name": "s_plain", "type": "String", "value": "héllo ☃\nsecond line"},
        {"name": "s_int", "type": "String", "value": 3},
        {"name": "s_float", "type": "String", "value": 1.0},
        {"name": "s_big", "type": "String", "value": 1e100},
        {"name": "s_bool", "type": "String", "value": true},
        {"name": "s_null", "type": "String", "value": null},
        {"name": "s_map", "type": "String", "value": {"k": "it's", "n": [1, false]}},
        {"name": "n_num", "type": "Number", "value": 42},
        {"name": "b_bool", "type": "Boolean", "value": false},
        {"name": "j_map", "type": "Json", "value": {"z": "é", "a": [1, 2.5, null]}},
        {"name": "l_list", "type": "CommaDelimitedList", "value": ["a", "b"]},
        {"name": "no_value", "type": "String"},
        {"name": "undeclared", "type": "String", "value": "from input_values"},
        {"name": "deploy_server_id", "type": "String", "value": "web1"},
        {"name": "deploy_action", "type": "String", "value": "CREATE"},
        {"name": "deploy_signal_transport", "type": "String", "value": "NO_SIGNAL"},
    ]);
    let names: Vec<&str> = inputs.as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    let item = script_item("inputs-1", &echo_env_script(&names), inputs.clone(), &names);
    let (signal, code) = agent.apply(item);
    assert_eq!(code, 0, "{signal:?}");
    let expected = [
        ("s_plain", "héllo ☃\nsecond line"),
        ("s_int", "3"),
        ("s_float", "1.0"),
        ("s_big", "1e+100"),
        ("s_bool", "True"),
        ("s_null", "None"),
        ("s_map", "{'k': \"it's\", 'n': [1, False]}"),
        ("n_num", "42"),
        ("b_bool", "False"),
        ("j_map", r#"{"z": "\u00e9", "a": [1, 2.5, null]}"#),
        ("l_list", r#"["a", "b"]"#),
        ("no_value", ""),
        ("undeclared", "from input_values"),
        ("deploy_server_id", "web1"),
        ("deploy_action", "CREATE"),
        ("deploy_signal_transport", "NO_SIGNAL"),
    ];
    for (name, value) in expected {
        assert_eq!(signal.get(name), Some(&json!(value)), "input {name}");
    }
    let keys: Vec<&String> = signal.keys().collect();
    assert_eq!(keys[keys.len() - 3..], ["deploy_stdout", "deploy_stderr", "deploy_status_code"]);
}

#[test]
fn exit_statuses_are_reported_and_signals_are_negative() {
    let agent = Agent::new();
    for (i, (body, status)) in
        [("exit 0", 0), ("exit 1", 1), ("exit 3", 3), ("no-such-command-halite", 127), ("kill -TERM $$", -15)]
            .into_iter()
            .enumerate()
    {
        let (signal, code) =
            agent.apply(script_item(&format!("exit-{i}"), &format!("#!/bin/sh\n{body}\n"), json!([]), &[]));
        assert_eq!(signal["deploy_status_code"], json!(status), "{body}: {signal:?}");
        assert_eq!(code, status, "{body}");
    }
}

#[test]
fn scripts_that_cannot_execute_report_status_1_with_a_reason() {
    let agent = Agent::new();
    let (signal, _) = agent.apply(script_item("noshebang", "echo hi\n", json!([]), &[]));
    assert_eq!(signal["deploy_status_code"], json!(1));
    assert!(signal["deploy_stderr"].as_str().unwrap().contains("#!"), "{signal:?}");
    let (signal, _) = agent.apply(script_item("crlf", "#!/bin/sh\r\necho hi\r\n", json!([]), &[]));
    assert_eq!(signal["deploy_status_code"], json!(1));
    assert!(signal["deploy_stderr"].as_str().unwrap().contains("CRLF"), "{signal:?}");
    let (signal, _) = agent.apply(script_item("nointerp", "#!/no/such/interpreter\n", json!([]), &[]));
    assert_eq!(signal["deploy_status_code"], json!(1));
    assert!(signal["deploy_stderr"].as_str().unwrap().contains("/no/such/interpreter"), "{signal:?}");
}

#[test]
fn outputs_present_absent_empty_and_newlines() {
    let agent = Agent::new();
    let script =
        "#!/bin/sh\nprintf 'a\\r\\nb\\rc\\n' > \"$heat_outputs_path.present\"\n: > \"$heat_outputs_path.empty\"\n\
                  printf 'boom' > \"$heat_outputs_path.failure\"\necho out; echo err >&2\n";
    let (signal, code) =
        agent.apply(script_item("outs", script, json!([]), &["present", "absent", "empty", "failure"]));
    assert_eq!(code, 0);
    assert_eq!(signal["present"], json!("a\nb\nc\n"));
    assert!(!signal.contains_key("absent"));
    assert_eq!(signal["empty"], json!(""));
    assert_eq!(signal["failure"], json!("boom"), "error outputs are signalled like any other");
    assert_eq!(signal["deploy_stdout"], json!("out\n"));
    assert_eq!(signal["deploy_stderr"], json!("err\n"));
}

#[test]
fn invalid_utf8_is_replaced_and_reported_not_lost() {
    let agent = Agent::new();
    let script = "#!/bin/sh\nprintf '\\377ok' > \"$heat_outputs_path.bad\"\nprintf 'so\\376far'\n";
    let (signal, code) = agent.apply(script_item("utf8", script, json!([]), &["bad"]));
    assert_eq!(code, 0);
    assert_eq!(signal["bad"], json!("\u{fffd}ok"));
    assert_eq!(signal["deploy_stdout"], json!("so\u{fffd}far"));
    assert!(signal["deploy_stderr"].as_str().unwrap().contains("not valid UTF-8"), "{signal:?}");
}

#[test]
fn a_megabyte_of_output_and_a_lingering_child_are_kept_whole() {
    let agent = Agent::new();
    let script = "#!/bin/sh\nhead -c 1048576 /dev/zero | tr '\\0' x\n(sleep 0.3; echo late >&2) &\n";
    let (signal, _) = agent.apply(script_item("big", script, json!([]), &[]));
    assert_eq!(signal["deploy_stdout"].as_str().unwrap().len(), 1_048_576);
    assert_eq!(signal["deploy_stderr"], json!("late\n"));
}

#[test]
fn directories_modes_and_working_directory_match_heat_agents() {
    let agent = Agent::new();
    let (signal, _) = agent.apply(script_item("modes", "#!/bin/sh\npwd\n", json!([]), &[]));
    let working = agent.dir.join("working");
    assert_eq!(signal["deploy_stdout"], json!(format!("{}\n", working.display())));
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(working.clone()), 0o700);
    assert_eq!(mode(agent.dir.join("outputs")), 0o700);
    assert_eq!(mode(working.join("modes")), 0o700);
    assert_eq!(mode(agent.dir.join("deployed/modes.json")), 0o600);
    let marker: Value = serde_json::from_slice(&std::fs::read(agent.dir.join("deployed/modes.json")).unwrap()).unwrap();
    assert_eq!(marker["id"], json!("modes"));
}

#[test]
fn the_same_id_runs_once_and_a_new_id_runs_again() {
    let agent = Agent::new();
    let counter = agent.dir.join("count");
    let script = format!("#!/bin/sh\necho run >> {}\necho done\n", counter.display());
    let (first, _) = agent.apply(script_item("once", &script, json!([]), &[]));
    let (second, _) = agent.apply(script_item("once", &script, json!([]), &[]));
    assert_eq!(first, second, "the recorded signal is returned again");
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "run\n");
    agent.apply(script_item("once-v2", &script, json!([]), &[]));
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "run\nrun\n");
}

#[test]
fn an_interrupted_config_is_not_run_again() {
    let agent = Agent::new();
    std::fs::create_dir_all(agent.dir.join("deployed")).unwrap();
    std::fs::write(agent.dir.join("deployed/cut.json"), "{}").unwrap();
    let error = agent.call(json!({"item": script_item("cut", "#!/bin/sh\n", json!([]), &[])})).unwrap_err();
    assert!(error.to_string().contains("interrupted"), "{error}");
}

#[test]
fn an_unknown_group_fails_at_once_with_the_reason() {
    let agent = Agent::new();
    let started = Instant::now();
    let mut item = script_item("unknown", "#!/bin/sh\n", json!([]), &[]);
    item["group"] = json!("puppet");
    let error = agent.call(json!({ "item": item })).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(error.to_string().contains("no hook for group \"puppet\""), "{error}");
    assert!(!agent.dir.join("deployed/unknown.json").exists(), "nothing ran, so nothing is recorded");
}

#[test]
fn installed_hooks_get_the_item_on_stdin_and_their_json_is_the_signal() {
    let agent = Agent::new();
    let hook = agent.dir.join("hooks/my-tool");
    std::fs::write(
        &hook,
        "#!/bin/sh\nitem=$(cat)\ncase \"$item\" in *'\"deploy_action\"'*) ;; *) exit 9;; esac\n\
         printf '{\"result\": \"applied\", \"deploy_stdout\": \"\", \"deploy_stderr\": \"\", \"deploy_status_code\": 0}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut item =
        script_item("hooked", "{}", json!([{"name": "deploy_action", "type": "String", "value": "CREATE"}]), &[]);
    item["group"] = json!("my-tool!");
    let (signal, code) = agent.apply(item);
    assert_eq!((signal["result"].clone(), code), (json!("applied"), 0), "{signal:?}");

    let broken = agent.dir.join("hooks/broken");
    std::fs::write(&broken, "#!/bin/sh\necho not json; echo oops >&2; exit 2\n").unwrap();
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut item = script_item("broken", "", json!([]), &[]);
    item["group"] = json!("broken");
    let (signal, code) = agent.apply(item);
    assert_eq!(
        Value::Object(signal),
        json!({"deploy_stdout": "not json\n", "deploy_stderr": "oops\n", "deploy_status_code": 2})
    );
    assert_eq!(code, 2);
}

#[test]
fn a_timeout_kills_the_script_and_fails_the_deploy() {
    let agent = Agent::new();
    let started = Instant::now();
    let out = agent
        .call(json!({"item": script_item("slow", "#!/bin/sh\nsleep 30\n", json!([]), &[]), "timeout": 0.5}))
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(out.value["deploy_status_code"], json!(-9));
    assert!(out.value["deploy_stderr"].as_str().unwrap().contains("timed out"));
}

#[test]
fn bad_items_are_refused_with_a_reason() {
    let agent = Agent::new();
    for (item, words) in [
        (json!({"group": "script"}), "id"),
        (json!({"id": "../../etc", "group": "script"}), "id"),
        (json!({"id": "x", "group": "script", "outputs": [{"name": "../../secret"}]}), "output name"),
        (json!({"id": "y", "group": "script", "config": {"not": "a string"}}), "string"),
    ] {
        let error = agent.call(json!({ "item": item })).unwrap_err();
        assert!(error.to_string().contains(words), "{error}");
    }
}

/// Runs heat-agents' real `55-heat-config` with its real `hook-script.py` as the `script` hook
/// on one item, and returns the signal it hands to `heat-config-notify`. The script runs in the
/// agent's own working and outputs directories, so paths in error messages are the same.
fn heat_agents_signal(sdist: &std::path::Path, python: &str, agent: &Agent, item: &Value) -> Value {
    let scratch = &agent.dir.join("heat");
    let _ = std::fs::remove_dir_all(scratch);
    let _ = std::fs::remove_dir_all(agent.dir.join("outputs"));
    for dir in ["hooks", "deployed"] {
        std::fs::create_dir_all(scratch.join(dir)).unwrap();
    }
    let hook = scratch.join("hooks/script");
    std::fs::copy(sdist.join("heat-config-script/install.d/hook-script.py"), &hook).unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let notify = scratch.join("notify");
    std::fs::write(&notify, format!("#!/bin/sh\ncat > {}\n", scratch.join("signal.json").display())).unwrap();
    std::fs::set_permissions(&notify, std::fs::Permissions::from_mode(0o755)).unwrap();
    let conf = scratch.join("heat-config");
    std::fs::write(&conf, serde_json::to_vec(&json!([item])).unwrap()).unwrap();
    let out = std::process::Command::new(python)
        .arg(sdist.join("heat-config/os-refresh-config/configure.d/55-heat-config"))
        .env("HEAT_SHELL_CONFIG", &conf)
        .env("HEAT_CONFIG_HOOKS", scratch.join("hooks"))
        .env("HEAT_CONFIG_DEPLOYED", scratch.join("deployed"))
        .env("HEAT_CONFIG_NOTIFY", &notify)
        .env("HEAT_SCRIPT_WORKING", agent.dir.join("working"))
        .env("HEAT_SCRIPT_OUTPUTS", agent.dir.join("outputs"))
        .output()
        .unwrap();
    let signal = std::fs::read(scratch.join("signal.json"))
        .unwrap_or_else(|_| panic!("heat-config sent no signal: {}", String::from_utf8_lossy(&out.stderr)));
    serde_json::from_slice(&signal).unwrap()
}

/// The differential test: heat-agents 13.0.0 and halite on the same items, signals compared
/// field by field (and in the same order). Runs when `$HALITE_HEAT_AGENTS` points at the
/// unpacked source distribution (scripts/test.sh fetches it from PyPI).
#[test]
fn signals_match_heat_agents_13_field_by_field() {
    let Some(sdist) = std::env::var_os("HALITE_HEAT_AGENTS").map(PathBuf::from) else {
        eprintln!("HALITE_HEAT_AGENTS is not set: heat-agents could not be fetched; differential test skipped");
        return;
    };
    let python = std::env::var("HALITE_PYTHON").unwrap_or_else(|_| "python3".into());
    let inputs = json!([
        {"name": "s_plain", "type": "String", "value": "héllo ☃\nline two"},
        {"name": "s_int", "type": "String", "value": 3},
        {"name": "s_float", "type": "String", "value": 1.0},
        {"name": "s_big", "type": "String", "value": 1e100},
        {"name": "s_bool", "type": "String", "value": true},
        {"name": "s_null", "type": "String", "value": null},
        {"name": "s_map", "type": "String", "value": {"k": "it's", "n": [1, false, null]}},
        {"name": "n_text", "type": "Number", "value": "42"},
        {"name": "j_map", "type": "Json", "value": {"z": "é😀", "a": [1, 2.5, null, "q\"t"]}},
        {"name": "l_list", "type": "CommaDelimitedList", "value": ["a", "b"]},
        {"name": "extra", "type": "String", "value": "undeclared"},
        {"name": "deploy_server_id", "type": "String", "value": "web1"},
        {"name": "deploy_action", "type": "String", "value": "CREATE"},
    ]);
    let names: Vec<&str> = inputs.as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    let mut items = vec![script_item("diff-inputs", &echo_env_script(&names), inputs.clone(), &names)];
    let cases = [
        ("diff-exit3", "#!/bin/sh\necho partial; echo bad >&2\nprintf 'x' > \"$heat_outputs_path.result\"\nexit 3\n"),
        ("diff-127", "#!/bin/sh\nno-such-command-halite\n"),
        (
            "diff-files",
            "#!/bin/sh\nprintf 'a\\r\\nb\\rc' > \"$heat_outputs_path.result\"\n: > \"$heat_outputs_path.empty\"\n",
        ),
        ("diff-big", "#!/bin/sh\nhead -c 1048576 /dev/zero | tr '\\0' y\n"),
        ("diff-late", "#!/bin/sh\n(sleep 0.3; echo late) &\necho early\n"),
        ("diff-signal", "#!/bin/sh\nkill -TERM $$\n"),
        ("diff-bash", "#!/bin/bash\necho \"$BASH_VERSION\" | cut -c1 >/dev/null; echo ok; exit 0\n"),
    ];
    for (id, script) in cases {
        items.push(script_item(id, script, json!([]), &["result", "empty", "absent"]));
    }
    let agent = Agent::new();
    for item in &items {
        let theirs = heat_agents_signal(&sdist, &python, &agent, item);
        let _ = std::fs::remove_dir_all(agent.dir.join("outputs"));
        let (ours, _) = agent.apply(item.clone());
        let their_keys: Vec<&String> = theirs.as_object().unwrap().keys().collect();
        let our_keys: Vec<&String> = ours.keys().collect();
        assert_eq!(our_keys, their_keys, "{}: fields differ", item["id"]);
        for (key, value) in theirs.as_object().unwrap() {
            assert_eq!(ours.get(key), Some(value), "{}: field {key} differs", item["id"]);
        }
    }
    // A script without a shebang: both report status 1 (heat-agents with a traceback, halite
    // with the reason).
    let item = script_item("diff-noshebang", "echo hi\n", json!([]), &[]);
    let theirs = heat_agents_signal(&sdist, &python, &agent, &item);
    let (ours, _) = agent.apply(item);
    assert_eq!((ours["deploy_status_code"].clone(), theirs["deploy_status_code"].clone()), (json!(1), json!(1)));
}

/// 250 deployments and 250 `cmd.script`s at once on one minion: each script file is written
/// while others fork; none fails to start (`Text file busy`, ETXTBSY, failed about one in a
/// hundred when scripts were executed directly).
#[test]
fn five_hundred_concurrent_scripts_all_start() {
    let agent = Agent::new();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let failures = runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..500 {
            let dispatcher = agent.dispatcher.clone();
            tasks.spawn(async move {
                let cx = Context { dispatcher: Some(dispatcher.clone()), ..Context::default() };
                let script = format!("#!/bin/sh\necho run-{n}\n");
                let (function, kwargs) = if n % 2 == 0 {
                    let item = script_item(&format!("00000000-0000-0000-0000-{n:012}"), &script, json!([]), &[]);
                    ("deploy.apply", json!({ "item": item }))
                } else {
                    ("cmd.script", json!({ "source": script }))
                };
                let kwargs: BTreeMap<String, Value> = serde_json::from_value(kwargs).unwrap();
                let out = dispatcher.call(function, Args::new(Vec::new(), kwargs), &cx).await;
                let text = format!("{out:?}");
                (!text.contains(&format!("run-{n}"))).then_some(format!("{function} {n}: {text}"))
            });
        }
        let mut failures = Vec::new();
        while let Some(done) = tasks.join_next().await {
            failures.extend(done.unwrap());
        }
        failures
    });
    assert!(
        failures.is_empty(),
        "{} of 500 scripts did not run: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
}
