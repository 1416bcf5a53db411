//! Every targeted id is in every view of a job with its state (an id no minion has is
//! `unknown`, a minion not connected `offline`): the CLI, `jobs show`, the bus as the gateway
//! streams it, and `--async`. Identical results are printed once under their ids' range, the
//! summary names the minions that did not return, and `jobs list` shows when each job started,
//! who published it, and filters.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_tests::http::EventStream;
use halite_tests::{wait_for, Cluster};

fn gateway(cluster: &Cluster) -> String {
    let addr_file = cluster.dir.join("master/gateway.addr");
    wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok()).trim().to_owned()
}

#[test]
fn unknown_and_offline_targets_are_in_every_view_of_the_job() {
    let mut cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    for id in ["web1", "web2"] {
        cluster.prepare_minion(id, true, "");
        cluster.start_minion(id);
    }
    cluster.wait_connected(&["web1", "web2"]);
    // web2 keeps its accepted key, but is not running: offline.
    cluster.stop_minion("web2", false);
    wait_for("web2 to be gone", Duration::from_secs(10), || {
        (!cluster.connected().contains(&"web2".to_owned())).then_some(())
    });
    let addr = gateway(&cluster);
    let token = cluster.cli(&["principal", "token", "root"]).stdout.trim().to_owned();
    let mut stream = EventStream::open(&addr, "/v1/events?tag=halite/job/*", &token);
    assert_eq!(stream.status, 200);

    let run = cluster.cli(&["run", "-L", "web1,web2,nosuch", "test.ping"]);
    assert_eq!(run.code, 3, "a target that did not return fails the run: {}", run.stdout);
    let line = |id: &str| run.stdout.lines().find(|l| l.starts_with(id)).unwrap_or_default().to_owned();
    assert!(line("nosuch").contains("unknown"), "{}", run.stdout);
    assert!(line("web2").contains("offline"), "{}", run.stdout);
    assert!(line("web1").contains("returned"), "{}", run.stdout);
    assert!(run.stdout.contains("  offline: web2") && run.stdout.contains("  unknown: nosuch"), "{}", run.stdout);
    let jid = jid_of(&run.stdout);

    // jobs show, from the store.
    let shown = cluster.cli(&["--out", "json", "jobs", "show", &jid]).json();
    assert_eq!(shown["minions"]["nosuch"]["state"], "unknown", "{shown}");
    assert_eq!(shown["minions"]["web2"]["state"], "offline", "{shown}");
    assert_eq!(shown["minions"]["web1"]["state"], "returned", "{shown}");

    // The bus as the gateway streams it: a `ret` for each, and a `done` that says how it ended.
    let mut rets = std::collections::BTreeMap::new();
    let done = loop {
        let event = stream.next_data();
        let tag = event["tag"].as_str().unwrap_or_default().to_owned();
        if !tag.starts_with(&format!("halite/job/{jid}/")) {
            continue;
        }
        if let Some(minion) = tag.strip_prefix(&format!("halite/job/{jid}/ret/")) {
            rets.insert(minion.to_owned(), event["data"]["state"].as_str().unwrap_or_default().to_owned());
        }
        if tag.ends_with("/done") {
            break event["data"].clone();
        }
    };
    let expected = [("nosuch", "unknown"), ("web1", "returned"), ("web2", "offline")];
    assert_eq!(rets, expected.iter().map(|(m, s)| (m.to_string(), s.to_string())).collect(), "{rets:?}");
    assert_eq!(done["minions"], 3, "{done}");
    assert_eq!(done["states"]["unknown"], 1, "{done}");
    assert_eq!(done["not_returned"]["web2"], "offline", "{done}");
    assert_eq!(done["not_returned"]["nosuch"], "unknown", "{done}");

    // --async names them at once and does not exit 0.
    let run = cluster.cli(&["run", "--async", "-L", "web1,nosuch", "test.ping"]);
    assert_eq!(run.code, 3, "{} {}", run.stdout, run.stderr);
    assert!(run.stderr.contains("no such minion: nosuch"), "{}", run.stderr);
    let jid = run.stdout.trim().to_owned();
    let states = wait_for("the async job", Duration::from_secs(10), || {
        let states = cluster.job_states(&jid);
        states.iter().all(|(_, s)| s != "sent" && s != "running").then_some(states)
    });
    assert_eq!(states, [("nosuch".to_owned(), "unknown".to_owned()), ("web1".to_owned(), "returned".to_owned())]);

    // A plain id with no wildcard names one minion too; a pattern names none.
    let run = cluster.cli(&["--out", "json", "run", "nosuch", "test.ping"]);
    assert_eq!(run.code, 1, "nothing at all matched: an error, as in Salt: {}", run.stdout);
    assert!(run.stderr.contains("no minions matched"), "{}", run.stderr);
    let run = cluster.cli(&["--out", "json", "run", "-C", "web1 or nosuch", "test.ping"]);
    assert_eq!(run.code, 0, "{}", run.stdout);

    // What is not an id is refused, quoted so that it cannot speak to the terminal.
    let run = cluster.cli(&["run", "-L", "web1,\u{1b}[2Jx", "test.ping"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stderr.contains(r#"the target names "\u{1b}[2Jx", which is not a minion id"#), "{}", run.stderr);

    // A list of made-up names does not make a slot (and an event) for each.
    let mut names: Vec<String> = (0..1_001).map(|i| format!("x{i}")).collect();
    names.push("web1".into());
    let file = cluster.dir.join("made-up.txt");
    std::fs::write(&file, names.join("\n")).unwrap();
    let run = cluster.cli(&["run", "-L", &format!("@{}", file.display()), "test.ping"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stderr.contains("1001 of the ids the target names match no minion"), "{}", run.stderr);
    assert!(run.stderr.contains("at most 1000"), "{}", run.stderr);
}

#[test]
fn a_narrow_principal_learns_nothing_from_unknown_ids() {
    let mut cluster = Cluster::start("");
    for id in ["web1", "db1"] {
        cluster.prepare_minion(id, true, "");
        cluster.start_minion(id);
    }
    cluster.wait_connected(&["web1", "db1"]);
    let dir = cluster.dir.join("webops");
    cluster.add_principal("webops", &dir, &["--target", "web*", "--function", "test.ping"]);
    let key = dir.join("webops.key");
    let as_webops = |args: &[&str]| {
        let mut all = vec!["--principal", "webops", "--key", key.to_str().unwrap()];
        all.extend_from_slice(args);
        cluster.cli(&all)
    };
    // db1 exists but is outside webops' reach: shown exactly like an id no minion has.
    let run = as_webops(&["--out", "json", "run", "-L", "web1,db1,nosuch", "test.ping"]);
    assert_eq!(run.code, 3, "{} {}", run.stdout, run.stderr);
    let doc = run.json();
    assert_eq!(doc["minions"]["db1"], doc["minions"]["nosuch"], "{doc}");
    assert_eq!(doc["minions"]["db1"]["state"], "unknown", "{doc}");
    assert_eq!(doc["minions"]["web1"]["state"], "returned", "{doc}");

    // Whether a job is seen is decided by the minions it went to: a name it listed that is no
    // minion's neither hides root's job from webops nor shows it webops' own.
    let run = cluster.cli(&["--out", "json", "run", "-L", "web1,nosuch", "test.ping"]);
    let jid = run.json()["jid"].as_str().unwrap().to_owned();
    let shown = as_webops(&["--out", "json", "jobs", "show", &jid]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert_eq!(shown.json()["minions"]["nosuch"]["state"], "unknown");
    let listed = as_webops(&["--out", "json", "jobs", "list"]);
    assert!(listed.stdout.contains(&jid), "{}", listed.stdout);
}

#[test]
fn identical_results_print_once_and_the_summary_names_who_did_not_return() {
    let mut cluster = Cluster::start("");
    let ids = ["web01", "web02", "web03", "web04", "db1"];
    for id in ids {
        cluster.prepare_minion(id, true, "");
        cluster.start_minion(id);
    }
    cluster.wait_connected(&ids);
    let run = cluster.cli(&["run", "*", "test.ping"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let lines: Vec<&str> = run.stdout.lines().filter(|l| l.contains("returned")).collect();
    assert!(lines.iter().any(|l| l.starts_with("db1, web[01-04]  returned")), "{}", run.stdout);
    assert!(run.stdout.contains("5 minion(s), job"), "{}", run.stdout);

    // The same failure, one line; failures listed in the summary.
    let run_failing = cluster.cli(&["run", "web0*", "cmd.run", "exit 3", "shell=true"]);
    assert_eq!(run_failing.code, 3);
    assert!(run_failing.stdout.starts_with("web[01-04]  failed"), "{}", run_failing.stdout);
    assert!(run_failing.stdout.contains("  failed: web[01-04]"), "{}", run_failing.stdout);
    assert_eq!(run_failing.stdout.matches("retcode: 3").count(), 1, "{}", run_failing.stdout);

    // jobs show groups the same way.
    let jid = jid_of(&run_failing.stdout);
    let shown = cluster.cli(&["jobs", "show", &jid]);
    assert!(shown.stdout.contains("web[01-04]  failed"), "{}", shown.stdout);
    assert!(shown.stdout.contains("  failed: web[01-04]"), "{}", shown.stdout);
}

#[test]
fn jobs_list_shows_start_time_and_caller_and_filters() {
    let mut cluster = Cluster::start("");
    cluster.prepare_minion("web1", true, "");
    cluster.start_minion("web1");
    cluster.wait_connected(&["web1"]);
    let before = cluster.cli(&["run", "web1", "test.ping"]);
    assert_eq!(before.code, 0);
    std::thread::sleep(Duration::from_millis(1100));
    let failed = cluster.cli(&["run", "web1", "cmd.run", "false"]);
    assert_eq!(failed.code, 3);

    let table = cluster.cli(&["jobs", "list"]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    let header = table.stdout.lines().next().unwrap();
    for column in ["JID", "STARTED (UTC)", "FUNCTION", "TARGET", "CALLER", "MINIONS"] {
        assert!(header.contains(column), "{header}");
    }
    assert!(table.stdout.contains("root"), "{}", table.stdout);
    let this_year = &halite_protocol::time::iso8601_utc(now_ms())[..4];
    assert!(table.stdout.lines().nth(1).unwrap().contains(&format!("  {this_year}-")), "{}", table.stdout);

    let listed = |args: &[&str]| {
        let mut all = vec!["--out", "json", "jobs", "list"];
        all.extend_from_slice(args);
        let run = cluster.cli(&all);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        run.json().as_array().unwrap().iter().map(|j| j["function"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(listed(&[]), ["cmd.run", "test.ping"]);
    assert_eq!(listed(&["--function", "test.*"]), ["test.ping"]);
    assert_eq!(listed(&["--state", "failed"]), ["cmd.run"]);
    assert_eq!(listed(&["--target", "web*"]), ["cmd.run", "test.ping"]);
    assert_eq!(listed(&["--caller", "someone-else"]), Vec::<String>::new());
    assert_eq!(listed(&["--since", "1h", "--caller", "ro*"]), ["cmd.run", "test.ping"]);
    assert_eq!(listed(&["--until", "1970-01-02"]), Vec::<String>::new());
    // Between the two jobs.
    let created = cluster.cli(&["--out", "json", "jobs", "list", "--function", "cmd.run"]).json()[0]["created_at_ms"]
        .as_u64()
        .unwrap();
    let cut = halite_protocol::time::iso8601_utc(created);
    assert_eq!(listed(&["--until", &cut]), ["test.ping"]);
    assert_eq!(listed(&["--since", &cut]), ["cmd.run"]);

    let bad = cluster.cli(&["jobs", "list", "--state", "broken"]);
    assert_eq!(bad.code, 2, "a usage error: {}", bad.stderr);
    assert!(bad.stderr.contains("not a job state"), "{}", bad.stderr);
}

/// The jid of `run`'s summary line (`N minion(s), job JID: ...`).
fn jid_of(stdout: &str) -> String {
    let line =
        stdout.lines().find(|l| l.contains(" minion(s), job ")).unwrap_or_else(|| panic!("no summary: {stdout}"));
    line.split(" job ").nth(1).unwrap().split(':').next().unwrap().to_owned()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}
