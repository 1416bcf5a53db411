//! End-to-end: the event bus, minion event ACLs, peer publishing, client principals.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use halite_tests::{bin_dir, http, wait_for, Cluster};
use serde_json::Value;

/// `halite events` running in the background; its ndjson lines arrive on a channel.
struct Subscriber {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

impl Subscriber {
    fn start(cluster: &Cluster, patterns: &[&str]) -> Subscriber {
        Subscriber::start_as(cluster, &[], patterns)
    }

    /// The same, with extra global options (`--principal`, `--key`).
    fn start_as(cluster: &Cluster, options: &[&str], patterns: &[&str]) -> Subscriber {
        let mut child = Command::new(bin_dir().join("halite"))
            .arg("--config")
            .arg(&cluster.config)
            .args(options)
            .args(["events", "--out", "ndjson"])
            .args(patterns)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        // Give the subscription time to reach the master before anything is sent.
        std::thread::sleep(Duration::from_millis(500));
        Subscriber { child, lines }
    }

    /// Everything received within `window`.
    fn collect(&self, window: Duration) -> Vec<Value> {
        let deadline = Instant::now() + window;
        let mut out = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(v) => out.push(v),
                Err(_) => break,
            }
        }
        out
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const EVENT_RULES: &str = "[[events]]\nminions = [\"web*\"]\nallow = [\"app/*\"]\nrate_per_sec = 5.0\nburst = 5.0\n";

#[test]
fn allowed_minion_events_reach_subscribers_under_the_authenticated_namespace() {
    let mut cluster = Cluster::start(EVENT_RULES);
    cluster.enroll_minion("web1", "");
    cluster.enroll_minion("db1", "");
    cluster.wait_connected(&["web1", "db1"]);
    let minions = Subscriber::start(&cluster, &["minion/*"]);
    let denied = Subscriber::start(&cluster, &["halite/acl/denied"]);

    // The payload claims another id; the namespace and the `minion` field come from the session.
    let sent = cluster.cli(&["run", "web1", "event.send", "app/ready", "{\"id\": \"db1\", \"ok\": true}"]);
    assert_eq!(sent.code, 0, "{}", sent.stdout);
    let got = minions.collect(Duration::from_secs(2));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["tag"], "minion/web1/app/ready");
    assert_eq!(got[0]["data"]["minion"], "web1");
    assert_eq!(got[0]["data"]["data"]["ok"], true);

    // Forged tags and minions without a rule are refused and reported, never published.
    for (minion, tag) in
        [("web1", "halite/job/x/publish"), ("web1", "minion/db1/app/ready"), ("web1", "other/x"), ("db1", "app/ready")]
    {
        let run = cluster.cli(&["run", minion, "event.send", tag]);
        assert_eq!(run.code, 0, "{}", run.stdout);
    }
    assert!(minions.collect(Duration::from_secs(1)).is_empty(), "a refused event was published");
    let notices = denied.collect(Duration::from_secs(1));
    assert!(notices.iter().any(|n| n["data"]["minion"] == "db1"), "{notices:?}");
    assert!(notices.iter().any(|n| n["data"]["reason"] == "reserved namespace"), "{notices:?}");
}

#[test]
fn a_flood_is_cut_at_the_rate_limit_while_job_returns_still_flow() {
    let mut cluster = Cluster::start(EVENT_RULES);
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    let minions = Subscriber::start(&cluster, &["minion/*"]);
    let steps: Vec<String> = (0..50)
        .map(|i| format!("{{\"id\": \"e{i}\", \"function\": \"event.send\", \"args\": [\"app/flood\", {i}]}}"))
        .collect();
    let plan = format!("steps=[{}]", steps.join(","));
    let run = cluster.cli(&["run", "--out", "json", "web1", "plan.run", &plan]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["minions"]["web1"]["return"]["succeeded"], 50);
    let got = minions.collect(Duration::from_secs(2));
    assert!((5..=8).contains(&got.len()), "{} events passed a 5/s limit with a burst of 5", got.len());
    let ping = cluster.cli(&["run", "web1", "test.ping"]);
    assert_eq!(ping.code, 0, "returns must still flow: {}", ping.stdout);
}

#[test]
fn peer_publishing_is_allowed_exactly_where_a_rule_says() {
    let mut cluster = Cluster::start("[[peers]]\nminions = [\"ci\"]\ntarget = \"web*\"\nfunctions = [\"test.ping\"]\n");
    for id in ["ci", "web1", "db1"] {
        cluster.enroll_minion(id, "");
    }
    cluster.wait_connected(&["ci", "web1", "db1"]);
    let run = |args: &[&str]| {
        let mut full = vec!["run", "--out", "json", "ci", "peer.publish"];
        full.extend_from_slice(args);
        let r = cluster.cli(&full);
        (r.code, r.json()["minions"]["ci"]["return"].clone())
    };
    let (code, ok) = run(&["web1", "test.ping"]);
    assert_eq!(code, 0, "{ok}");
    let jid = ok["details"]["jid"].as_str().unwrap().to_owned();
    assert_eq!(ok["details"]["minions"], serde_json::json!(["web1"]));
    halite_tests::wait_for("the peer job to return", Duration::from_secs(10), || {
        (cluster.job_states(&jid) == vec![("web1".to_owned(), "returned".to_owned())]).then_some(())
    });
    let shown = cluster.cli(&["jobs", "show", &jid, "--out", "json"]).json();
    assert_eq!(shown["caller"], "minion:ci");

    for (args, why) in
        [(vec!["db1", "test.ping"], "no minions matched"), (vec!["web1", "cmd.run", "args=[\"true\"]"], "no peer rule")]
    {
        let (code, err) = run(&args);
        assert_eq!(code, 3, "{args:?}: {err}");
        assert!(err["error"].as_str().unwrap().contains(why), "{err}");
    }
    // A minion without any rule is refused too.
    let r = cluster.cli(&["run", "--out", "json", "web1", "peer.publish", "db1", "test.ping"]);
    assert_eq!(r.code, 3);
}

#[test]
fn principals_act_only_within_their_acl_and_minion_policies_can_narrow_them() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("web1", "");
    cluster.enroll_minion("db1", "");
    // This minion allows everything, except that caller `ops` may only run test.ping.
    cluster.prepare_minion_with(
        "web2",
        true,
        "",
        "[policy]\nallow = [\"*\"]\n[[policy.callers]]\ncaller = \"ops\"\nallow = [\"test.ping\"]\n",
    );
    cluster.start_minion("web2");
    cluster.wait_connected(&["web1", "db1", "web2"]);

    let keys = cluster.dir.join("principals");
    let add = cluster.cli(&[
        "principal",
        "add",
        "ops",
        "--generate",
        keys.to_str().unwrap(),
        "--target",
        "web*",
        "--function",
        "test.*",
    ]);
    assert_eq!(add.code, 0, "{}", add.stderr);
    let key = keys.join("ops.key");
    let ops = |args: &[&str]| {
        let mut full = vec!["--principal", "ops", "--key", key.to_str().unwrap()];
        full.extend_from_slice(args);
        cluster.cli(&full)
    };
    assert_eq!(ops(&["run", "web1", "test.ping"]).code, 0);
    // A target resolves among the minions it may target: `*` means its web minions.
    let all = ops(&["run", "*", "test.ping"]);
    assert_eq!(all.code, 0, "{}", all.stderr);
    assert!(!all.stdout.contains("db1"), "{}", all.stdout);
    for args in [vec!["run", "web1", "cmd.run", "true"], vec!["run", "db1", "test.ping"]] {
        let r = ops(&args);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stdout);
        // Minions outside its targets are not even matched: the answer does not reveal them.
        let why = if args[1] == "db1" { "may target" } else { "not allowed" };
        assert!(r.stderr.contains(why), "{}", r.stderr);
    }
    let admin = ops(&["key", "list"]);
    assert_eq!(admin.code, 1);
    assert!(admin.stderr.contains("may not administer"), "{}", admin.stderr);

    // The master allows test.echo for ops; web2's own policy does not.
    let r = ops(&["run", "--out", "json", "web2", "test.echo", "hi"]);
    assert_eq!(r.code, 3);
    assert_eq!(r.json()["minions"]["web2"]["state"], "denied");
    let jid = cluster.cli(&["jobs", "list", "--out", "json"]).json()[0]["jid"].as_str().unwrap().to_owned();
    assert_eq!(cluster.cli(&["jobs", "show", &jid, "--out", "json"]).json()["caller"], "ops");

    // A principal with the wrong key, or removed, cannot connect.
    let other = cluster.dir.join("other");
    cluster.cli(&["principal", "add", "mallory", "--generate", other.to_str().unwrap()]);
    let wrong = cluster.cli(&[
        "--principal",
        "ops",
        "--key",
        other.join("mallory.key").to_str().unwrap(),
        "run",
        "web1",
        "test.ping",
    ]);
    assert_eq!(wrong.code, 1);
    assert_eq!(cluster.cli(&["principal", "remove", "ops"]).code, 0);
    assert_eq!(ops(&["run", "web1", "test.ping"]).code, 1);
}

/// A principal limited to `db*` and `test.ping` can neither see, cancel nor hear of a job on
/// web1: through the CLI, the events stream and the HTTP gateway. Its own job on db1 it sees.
#[test]
fn a_principal_limited_to_db_sees_nothing_of_a_job_on_web1() {
    let mut cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let addr = addr.trim().to_owned();
    cluster.enroll_minion("web1", "");
    cluster.enroll_minion("db1", "");
    cluster.wait_connected(&["web1", "db1"]);
    let keys = cluster.dir.join("principals");
    let add = cluster.cli(&[
        "principal",
        "add",
        "dbops",
        "--generate",
        keys.to_str().unwrap(),
        "--target",
        "db*",
        "--function",
        "test.ping",
        "--event",
        "halite/job/*",
    ]);
    assert_eq!(add.code, 0, "{}", add.stderr);
    let token = cluster.cli(&["principal", "token", "dbops"]).stdout.trim().to_owned();
    let key = keys.join("dbops.key");
    let as_dbops = ["--principal", "dbops", "--key", key.to_str().unwrap()];
    let dbops = |args: &[&str]| {
        let mut full = as_dbops.to_vec();
        full.extend_from_slice(args);
        cluster.cli(&full)
    };
    let events = Subscriber::start_as(&cluster, &as_dbops, &["halite/job/*"]);

    let root_job = cluster.cli(&["run", "--async", "web1", "test.sleep", "3"]);
    assert_eq!(root_job.code, 0, "{}", root_job.stderr);
    let hidden = root_job.stdout.trim().to_owned();
    let own = dbops(&["run", "--async", "db1", "test.ping"]);
    assert_eq!(own.code, 0, "{}", own.stderr);
    let own = own.stdout.trim().to_owned();

    let listed = dbops(&["jobs", "list", "--out", "json"]).stdout;
    assert!(listed.contains(&own), "its own job is listed: {listed}");
    assert!(!listed.contains(&hidden), "root's job on web1 is not: {listed}");
    let shown = dbops(&["jobs", "show", &hidden]);
    assert_eq!(shown.code, 1);
    assert!(shown.stderr.contains("no job"), "{}", shown.stderr);
    let cancel = dbops(&["jobs", "cancel", &hidden]);
    assert_eq!(cancel.code, 1, "{}", cancel.stdout);
    assert!(cancel.stderr.contains("no running job"), "{}", cancel.stderr);

    let listed = http::request("GET", &addr, "/v1/jobs", Some(&token), None);
    assert_eq!(listed.status, 200);
    assert!(listed.body.contains(&own) && !listed.body.contains(&hidden), "{}", listed.body);
    assert_eq!(http::request("GET", &addr, &format!("/v1/jobs/{hidden}"), Some(&token), None).status, 404);

    // Root's job was not cancelled, and ran to the end.
    wait_for("root's job to return", Duration::from_secs(20), || {
        (cluster.job_states(&hidden) == [("web1".to_owned(), "returned".to_owned())]).then_some(())
    });
    let heard = events.collect(Duration::from_secs(1));
    let tags: Vec<&str> = heard.iter().filter_map(|e| e["tag"].as_str()).collect();
    assert!(tags.iter().any(|t| t.contains(&own)), "its own job's events arrive: {tags:?}");
    assert!(!tags.iter().any(|t| t.contains(&hidden)), "none of root's job on web1: {tags:?}");
}

/// Salt CVE-2013-4435's class, on real processes: a principal allowed only `plan.run` (and
/// `test.*`) on web1 cannot reach a shell or grains through a plan, even on a minion whose own
/// policy allows everything.
#[test]
fn a_plan_reaches_nothing_its_caller_may_not_call() {
    let mut cluster = Cluster::start("");
    cluster.prepare_minion_with("web1", true, "", "[policy]\nallow = [\"*\"]\n");
    cluster.start_minion("web1");
    cluster.wait_connected(&["web1"]);
    let keys = cluster.dir.join("principals");
    let add = cluster.cli(&[
        "principal",
        "add",
        "planner",
        "--generate",
        keys.to_str().unwrap(),
        "--target",
        "web1",
        "--function",
        "plan.run",
        "--function",
        "test.*",
    ]);
    assert_eq!(add.code, 0, "{}", add.stderr);
    let key = keys.join("planner.key");
    let marker = cluster.dir.join("pwned");
    let planner = |steps: &str| {
        let key = key.to_str().unwrap();
        cluster.cli(&["--principal", "planner", "--key", key, "run", "--out", "json", "web1", "plan.run", steps]).json()
    };
    let doc = planner(&format!(
        r#"steps=[{{"id":"ok","function":"test.ping"}},{{"id":"shell","function":"cmd.run","args":["touch {}"]}},{{"id":"grains","function":"grains.items"}}]"#,
        marker.display()
    ));
    let steps = doc["minions"]["web1"]["return"]["steps"].as_array().unwrap_or_else(|| panic!("{doc}"));
    assert_eq!(steps[0]["result"], "succeeded", "{doc}");
    for denied in &steps[1..] {
        assert!(denied["error"].as_str().is_some_and(|e| e.contains("beyond what planner may call")), "{doc}");
    }
    // A guard is a shell command: the whole plan is refused.
    let doc = planner(&format!(r#"steps=[{{"id":"g","function":"test.ping","unless":"touch {}"}}]"#, marker.display()));
    assert_eq!(doc["minions"]["web1"]["state"], "denied", "{doc}");
    assert!(doc["minions"]["web1"]["return"]["error"].as_str().is_some_and(|e| e.contains("cmd.run")), "{doc}");
    assert!(!marker.exists(), "neither the step nor the guard ran a shell");
    // Root, on the same minion, is not limited beyond the minion's policy.
    let root =
        cluster.cli(&["run", "--out", "json", "web1", "plan.run", r#"steps=[{"id":"g","function":"grains.items"}]"#]);
    assert_eq!(root.json()["minions"]["web1"]["return"]["steps"][0]["result"], "succeeded", "{}", root.stdout);
}
