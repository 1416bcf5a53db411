//! Rollouts on real minion processes, through the CLI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use halite_tests::Cluster;

/// Five minions, two of which fail the command: with a window of two and one error allowed, the
/// second failure stops the rollout. web1 runs (slowly), web2 fails at once, so web3 starts and
/// fails too: web4 and web5 are never dispatched.
#[test]
fn a_rollout_stops_past_its_error_budget_and_skips_the_rest() {
    let mut cluster = Cluster::start("");
    let ids = ["web1", "web2", "web3", "web4", "web5"];
    for id in ids {
        cluster.prepare_minion(id, true, "");
        let env: &[(&str, &str)] = if matches!(id, "web2" | "web3") { &[("HALITE_TEST_FAIL", "1")] } else { &[] };
        cluster.start_minion_with_env(id, env);
    }
    cluster.wait_connected(&ids);
    let script = r#"if [ -n "$HALITE_TEST_FAIL" ]; then exit 1; fi; sleep 2"#;
    let run =
        cluster.cli(&["run", "--out", "json", "-b", "2", "--max-errors", "1", "web*", "cmd.run", script, "shell=true"]);
    assert_eq!(run.code, 3, "failures and skipped targets fail the run: {}{}", run.stdout, run.stderr);
    let doc = run.json();
    let state = |id: &str| doc["minions"][id]["state"].as_str().unwrap_or("missing").to_owned();
    let states: Vec<String> = ids.iter().map(|id| state(id)).collect();
    assert_eq!(states, ["returned", "failed", "failed", "skipped", "skipped"], "{doc}");
    let jid = doc["jid"].as_str().unwrap().to_owned();

    // `jobs show` tells why it stopped; the skipped minions never saw the job.
    let shown = cluster.cli(&["jobs", "show", &jid]);
    assert!(
        shown.stdout.contains(
            "rollout:  stopped: 2 of 5 targets failed, more than max_errors 1 allows (1) (batch 2, max errors 1)"
        ),
        "{}",
        shown.stdout
    );
    let shown = cluster.cli(&["jobs", "show", "--out", "json", &jid]);
    assert_eq!(shown.json()["rollout"]["state"], "stopped");
    let log = |id: &str| std::fs::read_to_string(cluster.minion_dir(id).join("minion.log")).unwrap();
    assert!(log("web3").contains(&jid), "a dispatched minion logs the job it runs");
    for id in ["web4", "web5"] {
        assert!(!log(id).contains(&jid), "{id} was sent the job: {}", log(id));
    }

    // Pause and resume: with a window of one, nothing starts while paused.
    let published = cluster.cli(&["run", "--async", "-b", "1", "-L", "web1,web4", "cmd.run", "sleep 2", "shell=true"]);
    let jid = published.stdout.trim().to_owned();
    let paused = cluster.cli(&["jobs", "pause", &jid]);
    assert_eq!(paused.code, 0, "{}", paused.stderr);
    assert!(paused.stdout.contains("rollout:  paused"), "{}", paused.stdout);
    std::thread::sleep(std::time::Duration::from_secs(3));
    let states = cluster.job_states(&jid);
    assert!(states.contains(&("web4".into(), "queued".into())), "{states:?}");
    let resumed = cluster.cli(&["jobs", "resume", &jid]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    halite_tests::wait_for("web4 to return", std::time::Duration::from_secs(20), || {
        cluster.job_states(&jid).contains(&("web4".into(), "returned".into())).then_some(())
    });
}

/// The same over the HTTP gateway: a rollout in the job body, pause, cancel, and a clear refusal
/// to resume what was cancelled.
#[test]
fn the_gateway_publishes_pauses_and_cancels_a_rollout() {
    use halite_tests::http;
    use serde_json::json;

    let mut cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    for id in ["app1", "app2", "app3"] {
        cluster.enroll_minion(id, "");
    }
    cluster.wait_connected(&["app1", "app2", "app3"]);
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = halite_tests::wait_for("the gateway", std::time::Duration::from_secs(10), || {
        std::fs::read_to_string(&addr_file).ok()
    });
    let addr = addr.trim().to_owned();
    let token = cluster.cli(&["principal", "token", "root"]).stdout.trim().to_owned();

    let job = json!({
        "target": "app*", "function": "cmd.run", "args": ["sleep 3"], "kwargs": {"shell": true},
        "rollout": {"batch": {"count": 1}, "max_errors": {"percent": 50}, "canary": 1},
    });
    let published = http::request("POST", &addr, "/v1/jobs", Some(&token), Some(&job.to_string()));
    assert_eq!(published.status, 200, "{}", published.body);
    let jid = published.json()["job"]["jid"].as_str().unwrap().to_owned();

    let paused = http::request("POST", &addr, &format!("/v1/jobs/{jid}/pause"), Some(&token), None);
    assert_eq!(paused.status, 200, "{}", paused.body);
    let rollout = &paused.json()["job"]["summary"]["rollout"];
    assert_eq!(rollout["state"], "paused", "{}", paused.body);
    assert_eq!(rollout["spec"]["canary"], 1, "{}", paused.body);

    let cancelled = http::request("POST", &addr, &format!("/v1/jobs/{jid}/cancel"), Some(&token), None);
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    let doc = cancelled.json();
    assert_eq!(doc["job"]["summary"]["rollout"]["state"], "stopped", "{doc}");
    let states: Vec<&str> =
        doc["job"]["minions"].as_array().unwrap().iter().map(|m| m["state"].as_str().unwrap()).collect();
    assert_eq!(&states[1..], ["cancelled", "cancelled"], "the queued targets end cancelled: {doc}");

    let resumed = http::request("POST", &addr, &format!("/v1/jobs/{jid}/resume"), Some(&token), None);
    assert_eq!(resumed.status, 400, "{}", resumed.body);
    // Stopped by the cancel, or already finished (the running target stops at once): no resume.
    let why = resumed.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(why.contains("has stopped: cancelled") || why.contains("has finished"), "{why}");
    let bad = json!({"target": "app*", "function": "test.ping", "rollout": {"batch": {"percent": 0}}});
    let refused = http::request("POST", &addr, "/v1/jobs", Some(&token), Some(&bad.to_string()));
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.json()["error"]["message"].as_str().unwrap().contains("from 1 to 100"), "{}", refused.body);

    // Engines fire the events rollouts abort on over the gateway too.
    let event = json!({"tag": "alarm/latency", "data": {"p99_ms": 900}});
    let fired = http::request("POST", &addr, "/v1/events", Some(&token), Some(&event.to_string()));
    assert_eq!(fired.status, 200, "{}", fired.body);
    assert_eq!(fired.json()["event"]["tag"], "engine/root/alarm/latency", "{}", fired.body);
    let bad = json!({"tag": "../halite/key/x"});
    let refused = http::request("POST", &addr, "/v1/events", Some(&token), Some(&bad.to_string()));
    assert_eq!(refused.status, 400, "{}", refused.body);
}

/// kill -9 of the master in the middle of a rollout: once it is back, the rollout goes on
/// where it was, and every target runs the job exactly once (each appends a line to one file).
#[test]
fn a_rollout_survives_a_master_killed_in_the_middle_and_runs_each_target_once() {
    let mut cluster = Cluster::start("");
    let ids = ["r1", "r2", "r3"];
    for id in ids {
        cluster.enroll_minion(id, "");
    }
    cluster.wait_connected(&ids);
    let marks = cluster.dir.join("marks");
    let script = format!("echo ran >> {}; sleep 1", marks.display());
    let published = cluster.cli(&["run", "--async", "-b", "1", "r*", "cmd.run", &script, "shell=true"]);
    assert_eq!(published.code, 0, "{}", published.stderr);
    let jid = published.stdout.trim().to_owned();
    // The first target is running: kill the master, then bring it back.
    halite_tests::wait_for("the first target to start", std::time::Duration::from_secs(10), || {
        cluster.job_states(&jid).iter().any(|(_, s)| s == "sent" || s == "running").then_some(())
    });
    cluster.kill_master();
    cluster.start_master();
    let states = halite_tests::wait_for("every target to return", std::time::Duration::from_secs(30), || {
        let states = cluster.job_states(&jid);
        states.iter().all(|(_, s)| s == "returned").then_some(states)
    });
    assert_eq!(states.len(), 3, "{states:?}");
    // Exactly once each: three lines in all, never two for one run.
    let text = std::fs::read_to_string(&marks).unwrap_or_default();
    assert_eq!(text.lines().count(), 3, "each target ran once: {text:?}");
}

/// An engine's alarm stops a rollout (SSM's stop on an alarm): `halite fire` puts an event on
/// the bus under the principal's namespace, the rollout aborting on `engine/*/alarm/*` stops,
/// the running target finishes and the rest are skipped.
#[test]
fn an_engines_alarm_event_aborts_a_rollout() {
    let mut cluster = Cluster::start("");
    let ids = ["a1", "a2", "a3"];
    for id in ids {
        cluster.enroll_minion(id, "");
    }
    cluster.wait_connected(&ids);
    let published = cluster.cli(&[
        "run",
        "--async",
        "-b",
        "1",
        "--abort-on",
        "engine/*/alarm/*",
        "a*",
        "cmd.run",
        "sleep 2",
        "shell=true",
    ]);
    assert_eq!(published.code, 0, "{}", published.stderr);
    let jid = published.stdout.trim().to_owned();
    let fired = cluster.cli(&["fire", "alarm/latency", r#"{"p99_ms": 900}"#]);
    assert_eq!(fired.code, 0, "{}", fired.stderr);
    assert_eq!(fired.stdout.trim(), "engine/root/alarm/latency");
    let states = halite_tests::wait_for("the rollout to end", std::time::Duration::from_secs(20), || {
        let states = cluster.job_states(&jid);
        states.iter().all(|(_, s)| s != "queued" && s != "sent" && s != "running").then_some(states)
    });
    let skipped = states.iter().filter(|(_, s)| s == "skipped").count();
    assert_eq!(skipped, 2, "the targets not started are skipped: {states:?}");
    let shown = cluster.cli(&["jobs", "show", "--out", "json", &jid]);
    let rollout = &shown.json()["rollout"];
    assert_eq!(rollout["state"], "stopped", "{rollout}");
    assert!(rollout["reason"].as_str().unwrap().contains("engine/root/alarm/latency"), "{rollout}");
    // Tags are checked: nothing outside the principal's namespace, nothing malformed.
    let bad = cluster.cli(&["fire", "../halite/key/x/accepted"]);
    assert_ne!(bad.code, 0);
    assert!(bad.stderr.contains("event tag"), "{}", bad.stderr);
}
