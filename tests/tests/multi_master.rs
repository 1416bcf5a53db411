//! End-to-end: several masters on one PostgreSQL store, and minions that move between them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

use halite_tests::postgres::fresh_database;
use halite_tests::{http, wait_for, Cluster};

#[test]
fn a_minion_given_two_masters_fails_over_when_its_master_is_killed() {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    let first = cluster.port;
    let second = cluster.start_peer_master();
    cluster.prepare_minion("fo1", true, "");
    cluster.set_minion_masters("fo1", &[first, second]);
    cluster.start_minion("fo1");
    let serving = wait_for("the minion on one of the masters", Duration::from_secs(20), || {
        [first, second].into_iter().find(|&port| cluster.connected_at(port).contains(&"fo1".to_owned()))
    });
    let other = if serving == first { second } else { first };
    // Enrolled through either, its key is the cluster's: both masters know it.
    let keys = cluster.cli_at(other, &["key", "list", "fo1", "--out", "json"]).json();
    assert_eq!(keys[0]["state"], "accepted", "{keys}");

    if serving == first {
        cluster.kill_master();
    } else {
        cluster.kill_peer_master(second);
    }
    wait_for("the minion on the other master", Duration::from_secs(10), || {
        cluster.connected_at(other).contains(&"fo1".to_owned()).then_some(())
    });
    let run = cluster.cli_at(other, &["run", "--out", "json", "fo1", "test.ping"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["minions"]["fo1"]["state"], "returned");
}

#[test]
fn a_key_rejected_through_one_master_cuts_its_minion_on_another_at_once() {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    let first = cluster.port;
    let second = cluster.start_peer_master();
    for id in ["cut1", "kept1"] {
        cluster.prepare_minion(id, true, "");
        cluster.set_minion_masters(id, &[second]);
        cluster.start_minion(id);
    }
    wait_for("both minions on the second master", Duration::from_secs(20), || {
        let on = cluster.connected_at(second);
        (on.contains(&"cut1".to_owned()) && on.contains(&"kept1".to_owned())).then_some(())
    });
    let run = cluster.cli_at(first, &["key", "reject", "cut1"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    wait_for("the second master to cut the rejected minion", Duration::from_secs(5), || {
        (!cluster.connected_at(second).contains(&"cut1".to_owned())).then_some(())
    });
    let run = cluster.cli_at(second, &["run", "--out", "json", "*1", "test.ping"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc = run.json();
    assert_eq!(doc["minions"]["kept1"]["state"], "returned", "{doc}");
    assert!(doc["minions"].get("cut1").is_none(), "a rejected minion is no target: {doc}");
    // It knocks again and is refused: it stays off.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!cluster.connected_at(second).contains(&"cut1".to_owned()));
}

/// `halite events` on the master at `port`, in the background: the lines it prints, as they come.
fn watch_events(
    cluster: &Cluster,
    port: u16,
    patterns: &[&str],
) -> (std::process::Child, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let mut child = Command::new(cluster.bins().join("halite"))
        .arg("--config")
        .arg(cluster.config_of(port))
        .args(["events", "--out", "ndjson"])
        .args(patterns)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stdout = child.stdout.take().unwrap();
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    // The subscription reaches the master before anything is sent.
    std::thread::sleep(Duration::from_millis(500));
    (child, lines)
}

/// A cluster of three masters on one PostgreSQL store, with `n` minions spread over them; the
/// ports, first master first.
fn three_masters(n: usize) -> (Cluster, [u16; 3], Vec<String>) {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    let ports = [cluster.port, cluster.start_peer_master(), cluster.start_peer_master()];
    let ids: Vec<String> = (0..n).map(|i| format!("w{i:02}")).collect();
    for id in &ids {
        cluster.prepare_minion(id, true, "");
        cluster.set_minion_masters(id, &ports);
        cluster.start_minion(id);
    }
    wait_for("every minion on some master", Duration::from_secs(30), || {
        let total: usize = ports.iter().map(|&p| cluster.connected_at(p).len()).sum();
        (total == n).then_some(())
    });
    (cluster, ports, ids)
}

#[test]
fn a_job_published_on_one_master_runs_on_minions_connected_to_all_three() {
    let (cluster, ports, ids) = three_masters(30);
    for port in ports {
        assert!(!cluster.connected_at(port).is_empty(), "the minions spread over every master");
    }
    // The first master lists every minion as connected to it or to another master, none offline.
    let here = cluster.connected_at(ports[0]);
    wait_for("the first master to know where every minion is", Duration::from_secs(10), || {
        let run = cluster.cli_at(ports[0], &["minions", "list", "--out", "json"]);
        let doc = (run.code == 0).then(|| run.json())?;
        let list = doc.as_array()?;
        let placed = list.len() == ids.len()
            && list.iter().all(|m| {
                let is_here = here.iter().any(|id| m["id"] == id.as_str());
                m["connected"] == is_here && m["connected_elsewhere"] == !is_here
            });
        placed.then_some(())
    });
    let table = cluster.cli_at(ports[0], &["minions", "list"]);
    assert!(table.stdout.contains("elsewhere") && !table.stdout.contains("offline"), "{}", table.stdout);
    let run = cluster.cli_at(ports[0], &["run", "--out", "json", "w*", "test.ping"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc = run.json();
    let states: BTreeMap<String, String> = doc["minions"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, v)| (id.clone(), v["state"].as_str().unwrap_or_default().to_owned()))
        .collect();
    assert_eq!(states.keys().cloned().collect::<Vec<_>>(), ids);
    assert!(states.values().all(|s| s == "returned"), "{states:?}");
    // Grain and list targets resolve on any master too.
    let run = cluster.cli_at(ports[2], &["run", "--out", "json", "-L", "w00,w29", "test.ping"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["minions"].as_object().unwrap().len(), 2);
}

#[test]
fn a_master_killed_mid_job_loses_no_result_and_a_watcher_elsewhere_sees_every_one_once() {
    let (mut cluster, [a, b, c], ids) = three_masters(12);
    let on_b = cluster.connected_at(b);
    assert!(!on_b.is_empty(), "some minions are on the master to be killed");
    // A watcher on the third master: every job return the bus carries there.
    let (mut watcher, lines) = watch_events(&cluster, c, &["halite/job/*/ret/*"]);
    std::thread::sleep(Duration::from_millis(300));
    let ran = cluster.dir.join("ran.log");
    let script = format!("sleep 3; echo ran >> {}", ran.display());
    let published =
        cluster.cli_at(a, &["run", "--async", "--job-timeout", "30s", "w*", "cmd.run", &script, "shell=true"]);
    assert_eq!(published.code, 0, "{}", published.stderr);
    let jid = published.stdout.trim().to_owned();
    std::thread::sleep(Duration::from_millis(800));
    cluster.kill_peer_master(b);

    wait_for("every slot final", Duration::from_secs(40), || {
        let states = cluster.job_states(&jid);
        (states.len() == ids.len() && states.iter().all(|(_, s)| s == "returned")).then_some(())
    });
    for id in &on_b {
        assert!(
            cluster.connected_at(a).contains(id) || cluster.connected_at(c).contains(id),
            "{id} moved to a live master"
        );
    }
    let text = std::fs::read_to_string(&ran).unwrap();
    assert_eq!(text.lines().count(), ids.len(), "each minion ran the job exactly once");
    wait_for("the watcher to see every return", Duration::from_secs(10), || {
        let seen = lines.lock().unwrap().iter().filter(|l| l.contains(&jid)).count();
        (seen >= ids.len()).then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut seen: Vec<String> = lines
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|e| e["tag"].as_str().map(str::to_owned))
        .filter(|tag| tag.contains(&jid))
        .collect();
    seen.sort();
    let expected: Vec<String> = ids.iter().map(|id| format!("halite/job/{jid}/ret/{id}")).collect();
    assert_eq!(seen, expected, "every final state, once each");
    let _ = watcher.kill();
    let _ = watcher.wait();
}

#[test]
fn a_remote_client_given_the_masters_reaches_a_live_one() {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    let (first, second) = (cluster.port, cluster.start_peer_master());
    let keys = cluster.dir.join("keys");
    cluster.add_principal("ops", &keys, &["--target", "r*", "--function", "test.*"]);
    cluster.prepare_minion("r1", true, "");
    cluster.set_minion_masters("r1", &[second]);
    cluster.start_minion("r1");
    wait_for("r1", Duration::from_secs(20), || cluster.connected_at(second).contains(&"r1".to_owned()).then_some(()));
    cluster.kill_master();

    // From the environment, no config file: the first master is down, the second answers.
    let masters = format!("127.0.0.1:{first},127.0.0.1:{second}");
    let output = Command::new(cluster.bins().join("halite"))
        .args(["--config", "/nonexistent/master.toml", "run", "--out", "json", "r1", "test.ping"])
        .env("HALITE_MASTER", &masters)
        .env("HALITE_MASTER_KEY", cluster.dir.join("master/master.pub"))
        .env("HALITE_PRINCIPAL", "ops")
        .env("HALITE_KEY", keys.join("ops.key"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["minions"]["r1"]["state"], "returned", "{doc}");

    // The same with flags and the key as hex; every master down is one clear error.
    let hex = cluster.master_key();
    let key = keys.join("ops.key");
    let flags = ["--master", &masters, "--master-key", &hex, "--principal", "ops", "--key", key.to_str().unwrap()];
    let mut args = vec!["--config", "/nonexistent/master.toml"];
    args.extend_from_slice(&flags);
    args.extend_from_slice(&["minions", "list", "--out", "json"]);
    let run = cluster.bin("halite", &args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    cluster.kill_peer_master(second);
    let run = cluster.bin("halite", &args);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains(&format!("127.0.0.1:{first}")) && run.stderr.contains(&format!("127.0.0.1:{second}")),
        "{}",
        run.stderr
    );
}

#[test]
fn a_minion_event_on_one_master_reaches_subscribers_of_another_however_large() {
    let url = fresh_database();
    let rules = "[[events]]\nminions = [\"ev*\"]\nallow = [\"app/*\"]\n";
    let mut cluster = Cluster::start(&format!("{rules}[store]\nurl = {url:?}\n"));
    let (first, second) = (cluster.port, cluster.start_peer_master());
    cluster.prepare_minion("ev1", true, "");
    cluster.set_minion_masters("ev1", &[second]);
    cluster.start_minion("ev1");
    wait_for("ev1", Duration::from_secs(20), || cluster.connected_at(second).contains(&"ev1".to_owned()).then_some(()));
    cluster.wait_reachable_through(first, &["ev1"]);
    let (mut watcher, lines) = watch_events(&cluster, first, &["minion/*", "halite/job/*/new"]);
    // Published on the first master, run by the minion on the second, its event sent there.
    let big = "x".repeat(20_000);
    for data in [r#"{"size": "small"}"#.to_owned(), format!(r#"{{"size": "{big}"}}"#)] {
        let run = cluster.cli_at(first, &["run", "ev1", "event.send", "app/ready", &data]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let run = cluster.cli_at(second, &["run", "ev1", "test.ping"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    wait_for("both events and the job from the second master", Duration::from_secs(10), || {
        let lines = lines.lock().unwrap();
        let events = lines.iter().filter(|l| l.contains("minion/ev1/app/ready")).count();
        let new = lines.iter().filter(|l| l.contains("/new") && l.contains("test.ping")).count();
        (events == 2 && new == 1).then_some(())
    });
    assert!(lines.lock().unwrap().iter().any(|l| l.contains(&big)), "the large one whole");
    assert!(lines.lock().unwrap().iter().all(|l| l.contains("\"received_at\":\"20")), "each event says when it came");
    let _ = watcher.kill();
    let _ = watcher.wait();
}

#[test]
fn a_job_cancelled_through_one_master_stops_on_a_minion_of_another() {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    let (first, second) = (cluster.port, cluster.start_peer_master());
    cluster.prepare_minion("c1", true, "");
    cluster.set_minion_masters("c1", &[second]);
    cluster.start_minion("c1");
    wait_for("c1", Duration::from_secs(20), || cluster.connected_at(second).contains(&"c1".to_owned()).then_some(()));
    // The first master learns where c1 is from the second's announcement, a moment later: until
    // then a job for c1 published there finds it offline.
    wait_for("the first master to reach c1", Duration::from_secs(20), || {
        (cluster.cli_at(first, &["run", "c1", "test.ping"]).code == 0).then_some(())
    });
    let published = cluster.cli_at(first, &["run", "--async", "--job-timeout", "60s", "c1", "test.sleep", "30"]);
    assert_eq!(published.code, 0, "{}", published.stderr);
    let jid = published.stdout.trim().to_owned();
    std::thread::sleep(Duration::from_millis(700));
    let started = std::time::Instant::now();
    let cancel = cluster.cli_at(first, &["jobs", "cancel", &jid, "--out", "json"]);
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);
    assert_eq!(cancel.json()["minions"]["c1"], "cancelled");
    assert!(started.elapsed() < Duration::from_secs(10), "the minion was stopped, not waited out");
    let shown = cluster.cli_at(second, &["jobs", "show", &jid, "--out", "json"]).json();
    assert_eq!(shown["minions"]["c1"]["state"], "cancelled");
}

#[test]
fn a_deployment_created_on_a_master_that_died_completes_on_another() {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    let second = cluster.start_peer_master();
    let script = cluster.dir.join("greet.sh");
    std::fs::write(&script, "#!/bin/sh\nprintf '%s' \"hello, $name\" > \"$heat_outputs_path.result\"\n").unwrap();
    let run = cluster.cli(&["config", "create", "greet", "--file", script.to_str().unwrap(), "--output", "result"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let config_id = run.stdout.trim().to_owned();
    let run = cluster.cli(&["--out", "json", "deployment", "create", &config_id, "vm-x1", "--input", "name=ha"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let id = run.json()["id"].as_str().unwrap().to_owned();
    // The server's enrollment is made while the first master lives; then it dies.
    let section = cluster.deploy_section("vm-x1");
    cluster.prepare_minion_with("vm-x1", true, "", &section);
    cluster.set_minion_masters("vm-x1", &[cluster.port, second]);
    cluster.kill_master();
    cluster.start_minion("vm-x1");
    let run = cluster.cli_at(second, &["--out", "json", "deployment", "wait", &id, "--timeout", "60s"]);
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    let done = run.json();
    assert_eq!(
        (done["status"].as_str(), done["output_values"]["result"].as_str()),
        (Some("COMPLETE"), Some("hello, ha"))
    );
}

/// Puts a top-level setting at the head of a config file (before any `[table]`).
fn prepend_setting(path: &std::path::Path, line: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    std::fs::write(path, format!("{line}\n{text}")).unwrap();
}

/// Two masters on one database, each certified by the cluster key; returns the cluster, the
/// two ports and the cluster key's path.
fn certified_pair() -> (Cluster, u16, u16, std::path::PathBuf) {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    let first = cluster.port;
    let second = cluster.add_peer_master(false);
    let cluster_key = cluster.certify(&[first, second]).join("cluster.key");
    cluster.kill_master();
    cluster.start_master();
    cluster.restart_peer_master(second);
    (cluster, first, second, cluster_key)
}

/// The cluster key's public half, in hex (what minions pin).
fn cluster_key_hex(cluster: &Cluster) -> String {
    let cluster_pub = std::fs::read_to_string(cluster.dir.join("cluster/cluster.pub")).unwrap();
    let hex = cluster_pub.lines().find(|l| !l.starts_with('#')).and_then(|l| l.split_whitespace().nth(1));
    hex.unwrap().to_owned()
}

/// Prepares minion `id` (not started) pinning the cluster key, not any master's.
fn prepare_cluster_minion(cluster: &Cluster, id: &str) {
    cluster.prepare_minion(id, true, "");
    let enrollment = cluster.minion_dir(id).join("enrollment.toml");
    let text = std::fs::read_to_string(&enrollment).unwrap().replace(&cluster.master_key(), &cluster_key_hex(cluster));
    std::fs::write(&enrollment, text).unwrap();
}

/// The principals the master on `port` knows.
fn principals_at(cluster: &Cluster, port: u16) -> Vec<String> {
    let run = cluster.cli_at(port, &["principal", "list", "--out", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.json().as_array().unwrap().iter().filter_map(|p| p["name"].as_str().map(str::to_owned)).collect()
}

#[test]
fn masters_certified_by_a_cluster_key_serve_its_minions_and_a_revoked_one_is_refused() {
    // The second master has its own key: only the cluster key ties them.
    let (mut cluster, first, second, cluster_key) = certified_pair();
    let cluster_hex = cluster_key_hex(&cluster);
    assert_ne!(cluster_hex, cluster.master_key());

    // Enrollment files made by a certified master pin the cluster key, and list the masters.
    let a = format!("127.0.0.1:{first}");
    let b = format!("127.0.0.1:{second}");
    let user_data = cluster.cli(&[
        "key",
        "token",
        "create",
        "--minion",
        "vm-c",
        "--user-data",
        "--master-address",
        &a,
        "--master-address",
        &b,
    ]);
    assert_eq!(user_data.code, 0, "{}", user_data.stderr);
    assert!(user_data.stdout.contains(&format!("master_key = \"{cluster_hex}\"")), "{}", user_data.stdout);
    assert!(user_data.stdout.contains(&format!("master = [\"{a}\", \"{b}\"]")), "{}", user_data.stdout);

    // A minion pinning the cluster key, not any master's.
    prepare_cluster_minion(&cluster, "cert1");
    cluster.set_minion_masters("cert1", &[first, second]);
    cluster.start_minion("cert1");
    let serving = wait_for("cert1 on a certified master", Duration::from_secs(20), || {
        [first, second].into_iter().find(|&p| cluster.connected_at(p).contains(&"cert1".to_owned()))
    });
    // Signed by either master, delivered by the one serving it: both verify under the cluster key.
    for port in [first, second] {
        let run = cluster.cli_at(port, &["run", "--out", "json", "cert1", "test.ping"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(run.json()["minions"]["cert1"]["state"], "returned");
    }
    let _ = serving;

    // The first master is retired: revoked, and the second tells the minion so.
    let first_pub = cluster.dir.join("master/master.pub");
    let revoke = cluster.bin(
        "halite-master",
        &["cluster", "revoke", "--cluster-key", cluster_key.to_str().unwrap(), first_pub.to_str().unwrap()],
    );
    assert_eq!(revoke.code, 0, "{}", revoke.stderr);
    prepend_setting(cluster.config_of(second), &format!("revoked_masters = [{:?}]", revoke.stdout.trim()));
    cluster.kill_peer_master(second);
    cluster.restart_peer_master(second);
    cluster.kill_master();
    // What the revoked master signed is no longer taken as a master's word: the minion's key,
    // accepted through it, waits until a live master accepts it again.
    let keys = cluster.cli_at(second, &["key", "list", "cert1", "--out", "json"]).json();
    if keys[0]["state"] == "pending" {
        let run = cluster.cli_at(second, &["key", "accept", "cert1"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    wait_for("cert1 on the second master", Duration::from_secs(20), || {
        cluster.connected_at(second).contains(&"cert1".to_owned()).then_some(())
    });
    let kept = cluster.minion_dir("cert1").join("state/revoked_masters");
    wait_for("the revocation kept by the minion", Duration::from_secs(10), || kept.exists().then_some(()));

    // The retired master comes back; the second goes away: the minion will not use the first.
    cluster.start_master();
    cluster.kill_peer_master(second);
    std::thread::sleep(Duration::from_secs(3));
    assert!(!cluster.connected_at(first).contains(&"cert1".to_owned()), "a revoked master got the minion");
    let log = std::fs::read_to_string(cluster.minion_dir("cert1").join("minion.log")).unwrap();
    assert!(log.contains("revoked"), "{log}");
    // A master whose own key is revoked refuses to start.
    prepend_setting(&cluster.config, &format!("revoked_masters = [{:?}]", revoke.stdout.trim()));
    let config = cluster.config.to_str().unwrap().to_owned();
    let refused = cluster.bin("halite-master", &["--config", &config]);
    assert_eq!(refused.code, 1);
    assert!(refused.stderr.contains("is in revoked_masters"), "{}", refused.stderr);
}

/// A revocation SIGHUP adds is in force at once, as after a restart: what the revoked master
/// signed, before or after, is no longer taken as a master's word, though it still runs and
/// writes to the database.
#[test]
fn a_master_revoked_through_sighup_is_no_longer_trusted_for_what_it_writes() {
    let (mut cluster, first, second, cluster_key) = certified_pair();
    let dir = cluster.dir.join("principals");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap().to_owned();
    let add = |cluster: &Cluster, port: u16, name: &str| {
        let run = cluster.cli_at(port, &["principal", "add", name, "--generate", &dir]);
        assert_eq!(run.code, 0, "principal add {name}: {}", run.stderr);
    };
    // A minion on the first master, connected before the revocation.
    prepare_cluster_minion(&cluster, "early1");
    cluster.start_minion("early1");
    wait_for("early1 on the first master", Duration::from_secs(20), || {
        cluster.connected_at(first).contains(&"early1".to_owned()).then_some(())
    });
    let learned = cluster.minion_dir("early1").join("state/revoked_masters");
    assert!(!learned.exists());
    // Trusted: a principal the second registers is known to the first.
    add(&cluster, second, "before");
    wait_for("before, known to the first", Duration::from_secs(20), || {
        principals_at(&cluster, first).contains(&"before".to_owned()).then_some(())
    });

    // The second master's key is revoked in the first's config, which SIGHUP rereads.
    let second_pub = cluster.dir.join("master-1/master.pub");
    let revoke = cluster.bin(
        "halite-master",
        &["cluster", "revoke", "--cluster-key", cluster_key.to_str().unwrap(), second_pub.to_str().unwrap()],
    );
    assert_eq!(revoke.code, 0, "{}", revoke.stderr);
    prepend_setting(&cluster.config, &format!("revoked_masters = [{:?}]", revoke.stdout.trim()));
    let pid = i32::try_from(cluster.master_pid().unwrap()).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGHUP).unwrap();
    wait_for("the principal the revoked master signed, dropped", Duration::from_secs(20), || {
        (!principals_at(&cluster, first).contains(&"before".to_owned())).then_some(())
    });
    // The minion connected before is told the revocation at once, in its session, so it
    // refuses that master, and any new job it signed, whoever delivers it.
    wait_for("the revocation, learned by early1", Duration::from_secs(20), || learned.exists().then_some(()));
    assert!(cluster.connected_at(first).contains(&"early1".to_owned()));
    let minion_log = std::fs::read_to_string(cluster.minion_dir("early1").join("minion.log")).unwrap();
    assert!(!minion_log.contains("disconnected from the master"), "told, not cut: {minion_log}");

    // What it signs from now on is refused too: its announcements are dropped, its rows ignored.
    add(&cluster, second, "after");
    add(&cluster, first, "mine");
    assert!(principals_at(&cluster, first).contains(&"mine".to_owned()));
    let log = cluster.dir.join("master.log");
    wait_for("the revoked master's announcements, dropped", Duration::from_secs(20), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let since_reload = text.rsplit_once("config reread").map_or("", |(_, after)| after);
        since_reload.contains("dropped an announcement").then_some(())
    });
    let known = principals_at(&cluster, first);
    assert!(!known.contains(&"after".to_owned()) && !known.contains(&"before".to_owned()), "{known:?}");
    // The first master still serves, and the second's own view is its own.
    assert!(principals_at(&cluster, second).contains(&"after".to_owned()));
    cluster.kill_peer_master(second);
}

#[test]
fn a_gateway_token_revoked_through_one_master_ends_its_event_streams_on_another() {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("[gateway]\nlisten = \"127.0.0.1:0\"\n[store]\nurl = {url:?}\n"));
    let first = cluster.port;
    cluster.start_peer_master();
    let addr_file = cluster.dir.join("master-1/gateway.addr");
    let addr = wait_for("the second gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let addr = addr.trim();
    let acl = ["--target", "*", "--function", "test.ping", "--event", "engine/*"];
    cluster.add_principal("ops", &cluster.dir.join("keys"), &acl);
    let token = cluster.cli_at(first, &["principal", "token", "ops"]).stdout.trim().to_owned();
    let id =
        cluster.cli_at(first, &["--out", "json", "principal", "tokens"]).json()[0]["id"].as_str().unwrap().to_owned();

    // A live stream on the second master (once it has heard of the principal).
    let mut stream = wait_for("a stream on the second master", Duration::from_secs(10), || {
        let stream = http::EventStream::open(addr, "/v1/events?tag=engine/*", &token);
        (stream.status == 200).then_some(stream)
    });
    let fired = http::request("POST", addr, "/v1/events", Some(&token), Some(r#"{"tag":"ping"}"#));
    assert_eq!(fired.status, 200, "{}", fired.body);
    assert_eq!(stream.next_data()["tag"], "engine/ops/ping");

    let revoked = cluster.cli_at(first, &["principal", "revoke-token", &id]);
    assert_eq!(revoked.code, 0, "{}", revoked.stderr);
    let events = stream.read_to_end(Duration::from_secs(3));
    let last = events.last().expect("a last event saying why");
    assert_eq!(last.name, "error", "{events:?}");
    assert_eq!(last.data["error"]["message"], "token revoked", "{events:?}");
}
