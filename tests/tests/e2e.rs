//! End-to-end: the real master, minions and CLI on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_tests::{wait_for, Cluster};

/// `halite run ... --out json` → sorted (minion, state) pairs.
fn run_states(cluster: &Cluster, args: &[&str]) -> (i32, Vec<(String, String)>) {
    let mut full = vec!["run", "--out", "json"];
    full.extend_from_slice(args);
    let run = cluster.cli(&full);
    if run.stdout.trim().is_empty() {
        return (run.code, Vec::new());
    }
    let doc = run.json();
    let mut states: Vec<(String, String)> = doc["minions"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, v)| (id.clone(), v["state"].as_str().unwrap().to_owned()))
        .collect();
    states.sort();
    (run.code, states)
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

fn targets(cluster: &Cluster, args: &[&str]) -> Vec<String> {
    let (code, states) = run_states(cluster, args);
    assert_eq!(code, 0, "{args:?}");
    states.into_iter().map(|(id, _)| id).collect()
}

#[test]
fn enrollment_by_token_by_accept_and_by_preseeding_and_pending_minions_get_no_jobs() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("tok", "");
    cluster.wait_connected(&["tok"]);

    // No token: the key waits as pending and the minion is not a target.
    cluster.prepare_minion("pend", false, "");
    cluster.start_minion("pend");
    wait_for("a pending key", Duration::from_secs(10), || {
        let keys = cluster.cli(&["key", "list", "--out", "json"]).json();
        keys.as_array().unwrap().iter().any(|k| k["id"] == "pend" && k["state"] == "pending").then_some(())
    });
    assert_eq!(run_states(&cluster, &["*", "test.ping"]), (0, pairs(&[("tok", "returned")])));

    let accepted = cluster.cli(&["key", "accept", "pend"]);
    assert_eq!(accepted.code, 0, "{}", accepted.stderr);
    assert!(accepted.stdout.contains("accepted pend"));
    cluster.wait_connected(&["pend"]);
    assert_eq!(run_states(&cluster, &["*", "test.ping"]), (0, pairs(&[("pend", "returned"), ("tok", "returned")])));

    // Preseeded: the admin generates the key; the minion starts with it already accepted.
    let keys = cluster.dir.join("keys");
    let gen = cluster.cli(&["key", "gen", "--id", "pre", "--dir", keys.to_str().unwrap()]);
    assert_eq!(gen.code, 0, "{}", gen.stderr);
    cluster.prepare_minion("pre", false, "");
    std::fs::copy(keys.join("pre.key"), cluster.minion_dir("pre").join("state/minion.key")).unwrap();
    cluster.start_minion("pre");
    cluster.wait_connected(&["pre"]);

    // A token is bound to its minion id and burns on use.
    let token = cluster.cli(&["key", "token", "create", "--minion", "other", "--ttl", "1h"]).stdout.trim().to_owned();
    cluster.prepare_minion("thief", false, "");
    let enrollment = cluster.minion_dir("thief").join("enrollment.toml");
    let text = std::fs::read_to_string(&enrollment).unwrap();
    std::fs::write(&enrollment, format!("{text}token = {token:?}\n")).unwrap();
    cluster.start_minion("thief");
    wait_for("thief to be held pending", Duration::from_secs(10), || {
        let keys = cluster.cli(&["key", "list", "thief", "--out", "json"]).json();
        (keys[0]["state"] == "pending").then_some(())
    });
}

#[test]
fn cloud_init_user_data_carries_the_enrollment_file() {
    let cluster = Cluster::start("");
    let run = cluster.cli(&["key", "token", "create", "--minion", "web9", "--ttl", "1h", "--user-data"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("#cloud-config\n"));
    assert!(run.stdout.contains("path: /etc/halite/enrollment.toml"));
    assert!(run.stdout.contains(&format!("master_key = \"{}\"", cluster.master_key())));
    assert!(run.stdout.contains("id = \"web9\""));
    assert!(run.stdout.contains("token = \""));
    // The master listens on loopback here: the operator is told guests cannot reach it.
    assert!(run.stderr.contains("--master-address"), "{}", run.stderr);
    let run = cluster.cli(&[
        "key",
        "token",
        "create",
        "--minion",
        "web8",
        "--ttl",
        "1h",
        "--user-data",
        "--master-address",
        "10.0.0.1:4506",
    ]);
    assert!(run.stdout.contains("master = \"10.0.0.1:4506\"") && run.stderr.is_empty(), "{}", run.stderr);
}

#[test]
fn every_target_type_resolves_on_the_master() {
    let mut cluster = Cluster::start("[nodegroups]\nwebs = \"web* and not G@role:db\"\n");
    cluster.enroll_minion("web1", "role = \"web\"");
    cluster.enroll_minion("web2", "role = \"web\"\ntier = \"canary\"");
    cluster.enroll_minion("db1", "role = \"db\"");
    cluster.wait_connected(&["web1", "web2", "db1"]);

    assert_eq!(targets(&cluster, &["web*", "test.ping"]), ["web1", "web2"]);
    assert_eq!(targets(&cluster, &["-L", "db1,web2", "test.ping"]), ["db1", "web2"]);
    assert_eq!(targets(&cluster, &["-E", "(web|db)1", "test.ping"]), ["db1", "web1"]);
    assert_eq!(targets(&cluster, &["-G", "role:db", "test.ping"]), ["db1"]);
    assert_eq!(targets(&cluster, &["-G", "tier:can*", "test.ping"]), ["web2"]);
    assert_eq!(targets(&cluster, &["-C", "G@role:web and not L@web2 or E@db.*", "test.ping"]), ["db1", "web1"]);
    assert_eq!(targets(&cluster, &["-C", "( web1 or db1 ) and G@role:db", "test.ping"]), ["db1"]);
    assert_eq!(targets(&cluster, &["-N", "webs", "test.ping"]), ["web1", "web2"]);

    let none = cluster.cli(&["run", "nomatch*", "test.ping"]);
    assert_eq!(none.code, 1);
    assert!(none.stderr.contains("no minions matched"), "{}", none.stderr);
}

#[test]
fn offline_minions_are_reported_and_ttl_jobs_wait_for_them() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("m1", "");
    cluster.wait_connected(&["m1"]);
    cluster.stop_minion("m1", false);
    wait_for("m1 to go offline", Duration::from_secs(10), || {
        (!cluster.connected().contains(&"m1".to_owned())).then_some(())
    });

    assert_eq!(run_states(&cluster, &["m1", "test.ping"]), (3, pairs(&[("m1", "offline")])));

    let queued = cluster.cli(&["run", "--async", "--ttl", "60s", "m1", "test.echo", "hello"]);
    assert_eq!(queued.code, 0, "{}", queued.stderr);
    let jid = queued.stdout.trim().to_owned();
    assert_eq!(cluster.job_states(&jid), pairs(&[("m1", "waiting")]));
    cluster.start_minion("m1");
    wait_for("the queued job to be delivered", Duration::from_secs(20), || {
        (cluster.job_states(&jid) == pairs(&[("m1", "returned")])).then_some(())
    });
    let shown = cluster.cli(&["jobs", "show", &jid, "--out", "json"]).json();
    assert_eq!(shown["minions"]["m1"]["return"], "hello");

    // A TTL that runs out before the minion comes back: expired.
    cluster.stop_minion("m1", false);
    wait_for("m1 to go offline", Duration::from_secs(10), || {
        (!cluster.connected().contains(&"m1".to_owned())).then_some(())
    });
    assert_eq!(run_states(&cluster, &["--ttl", "1s", "m1", "test.ping"]), (3, pairs(&[("m1", "expired")])));
}

#[test]
fn a_job_that_outlives_its_timeout_is_reported_timed_out() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("slow", "");
    cluster.enroll_minion("fast", "");
    cluster.wait_connected(&["slow", "fast"]);
    let run = cluster.cli(&["run", "--out", "json", "--job-timeout", "1s", "*", "test.sleep", "10"]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    let doc = run.json();
    assert_eq!(doc["minions"]["slow"]["state"], "timed_out");
    assert_eq!(doc["minions"]["fast"]["state"], "timed_out");
    let ok = cluster.cli(&["run", "--job-timeout", "5s", "fast", "test.sleep", "0.2"]);
    assert_eq!(ok.code, 0, "{}", ok.stdout);
}

#[test]
fn t_is_how_long_run_waits_and_the_job_goes_on_past_it() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("long", "");
    cluster.wait_connected(&["long"]);
    // As Salt's -t: the command stops waiting, says how to follow the job, and the job goes on.
    let run = cluster.cli(&["run", "--out", "json", "-t", "1s", "long", "test.sleep", "3"]);
    assert_eq!(run.code, 3, "not every minion returned (yet): {}", run.stderr);
    assert_eq!(run.json()["minions"]["long"]["state"], "running", "{}", run.stdout);
    assert!(run.stderr.contains("goes on. Follow it with: halite jobs show"), "{}", run.stderr);
    let jid = run.json()["jid"].as_str().unwrap().to_owned();
    wait_for("the job to return, not killed", Duration::from_secs(20), || {
        (cluster.job_states(&jid) == [("long".to_owned(), "returned".to_owned())]).then_some(())
    });
    // --async never implies a deadline: the job outlives any -t.
    let published = cluster.cli(&["run", "--async", "-t", "1s", "long", "test.sleep", "2"]);
    let jid = published.stdout.trim().to_owned();
    std::thread::sleep(Duration::from_secs(3));
    wait_for("the detached job to return", Duration::from_secs(20), || {
        (cluster.job_states(&jid) == [("long".to_owned(), "returned".to_owned())]).then_some(())
    });
}

#[test]
fn twenty_returns_survive_a_master_killed_mid_job() {
    let mut cluster = Cluster::start("");
    let ids: Vec<String> = (0..20).map(|i| format!("m{i:02}")).collect();
    for id in &ids {
        cluster.enroll_minion(id, "");
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    cluster.wait_connected(&refs);
    let published = cluster.cli(&["run", "--async", "--job-timeout", "30s", "m*", "test.sleep", "2"]);
    assert_eq!(published.code, 0, "{}", published.stderr);
    let jid = published.stdout.trim().to_owned();
    std::thread::sleep(Duration::from_millis(500));
    cluster.kill_master();
    std::thread::sleep(Duration::from_millis(2500));
    cluster.start_master();
    wait_for("all 20 returns to be recorded", Duration::from_secs(30), || {
        let states = cluster.job_states(&jid);
        (states.len() == 20 && states.iter().all(|(_, s)| s == "returned")).then_some(())
    });
}

#[test]
fn a_minion_restarted_mid_job_does_not_run_it_twice() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("once", "");
    cluster.wait_connected(&["once"]);
    let log = cluster.dir.join("ran.log");
    let script = format!("echo ran >> {}; sleep 3", log.display());
    let published = cluster.cli(&["run", "--async", "--job-timeout", "60s", "once", "cmd.run", &script, "shell=true"]);
    assert_eq!(published.code, 0, "{}", published.stderr);
    let jid = published.stdout.trim().to_owned();
    wait_for("the job to start", Duration::from_secs(10), || log.exists().then_some(()));
    cluster.stop_minion("once", true);
    cluster.start_minion("once");
    // The master redelivers the unfinished job on reconnect; the minion refuses to run it again.
    wait_for("the job to end", Duration::from_secs(20), || {
        (cluster.job_states(&jid) == pairs(&[("once", "failed")])).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "ran\n");
    let shown = cluster.cli(&["jobs", "show", &jid, "--out", "json"]).json();
    assert!(shown["minions"]["once"]["return"]["error"].as_str().unwrap().contains("not run twice"));
}

#[test]
fn deleting_or_rejecting_a_key_cuts_the_live_minion_off() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("gone", "");
    cluster.enroll_minion("bad", "");
    cluster.wait_connected(&["gone", "bad"]);

    assert_eq!(cluster.cli(&["key", "delete", "gone"]).code, 0);
    assert!(!cluster.connected().contains(&"gone".to_owned()));
    let run = cluster.cli(&["run", "gone", "test.ping"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("no minions matched"));
    // It knocks again, as an unknown key, and waits.
    wait_for("the deleted minion to come back as pending", Duration::from_secs(10), || {
        let keys = cluster.cli(&["key", "list", "gone", "--out", "json"]).json();
        (keys[0]["state"] == "pending").then_some(())
    });

    assert_eq!(cluster.cli(&["key", "reject", "bad"]).code, 0);
    assert!(!cluster.connected().contains(&"bad".to_owned()));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!cluster.connected().contains(&"bad".to_owned()), "a rejected minion got back in");
}

#[test]
fn bad_input_gets_clear_errors_and_non_zero_exits() {
    let cluster = Cluster::start("");
    let usage = cluster.cli(&["run", "only-a-target"]);
    assert_eq!(usage.code, 2);
    assert!(usage.stderr.contains("FUNCTION"), "{}", usage.stderr);

    let syntax = cluster.cli(&["run", "-C", "web* and", "test.ping"]);
    assert_eq!(syntax.code, 1);
    assert!(syntax.stderr.contains("bad compound expression"), "{}", syntax.stderr);

    let regex = cluster.cli(&["run", "-E", "(unclosed", "test.ping"]);
    assert_eq!(regex.code, 1);
    assert!(regex.stderr.contains("bad regular expression"), "{}", regex.stderr);

    let duration = cluster.cli(&["run", "-t", "soon", "*", "test.ping"]);
    assert_eq!(duration.code, 2);
    assert!(duration.stderr.contains("not a duration"), "{}", duration.stderr);

    let missing = cluster.bin("halite", &["--config", "/nonexistent/master.toml", "key", "list"]);
    assert_eq!(missing.code, 1);
    assert!(missing.stderr.contains("/nonexistent/master.toml"), "{}", missing.stderr);

    let bad_master = cluster.dir.join("bad-master.toml");
    std::fs::write(&bad_master, "listen = \"127.0.0.1:0\"\nlisten_port = 4\n").unwrap();
    let run = cluster.bin("halite-master", &["--config", bad_master.to_str().unwrap()]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("listen_port") && run.stderr.contains("bad-master.toml"), "{}", run.stderr);

    let bad_minion = cluster.dir.join("bad-minion.toml");
    std::fs::write(&bad_minion, "id = \"../../etc\"\n").unwrap();
    let run = cluster.bin("halite-minion", &["--config", bad_minion.to_str().unwrap()]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("id:") && run.stderr.contains("bad-minion.toml"), "{}", run.stderr);

    let untrusting = cluster.dir.join("untrusting.toml");
    std::fs::write(
        &untrusting,
        format!(
            "master = \"127.0.0.1:1\"\nstate_dir = {:?}\nenrollment_file = \"/nonexistent\"\n",
            cluster.dir.join("u")
        ),
    )
    .unwrap();
    let run = cluster.bin("halite-minion", &["--config", untrusting.to_str().unwrap()]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("no master key to trust"), "{}", run.stderr);
}

#[test]
fn command_line_values_fit_the_functions_arguments_as_a_salt_user_writes_them() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("a", "");
    cluster.wait_connected(&["a"]);
    // `false` is the command false, not a boolean; `LANG=C date` a command, not a keyword.
    let run = cluster.cli(&["run", "--out", "json", "a", "cmd.run", "false"]);
    assert_eq!(run.json()["minions"]["a"]["retcode"], 1, "{}", run.stdout);
    let run = cluster.cli(&["run", "--out", "json", "a", "cmd.run", "LANG=C printenv LANG"]);
    assert_eq!(run.code, 3, "a variable set in front is shell syntax, said so: {}", run.stdout);
    assert!(run.stdout.contains("add shell=true"), "{}", run.stdout);
    // mode=644 and contents=123 are text; test=True is true.
    let target = cluster.dir.join("fitted.txt");
    let name = format!("name={}", target.display());
    let run =
        cluster.cli(&["run", "--out", "json", "a", "file.managed", &name, "contents=123", "mode=644", "test=True"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(!target.exists(), "test=True changes nothing");
    let run = cluster.cli(&["run", "--out", "json", "a", "file.managed", &name, "contents=123", "mode=644"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "123");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o644);
}

#[test]
fn returns_stream_and_cmd_run_reports_failures() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("a", "");
    cluster.wait_connected(&["a"]);
    let run = cluster.cli(&["run", "a", "cmd.run", "sh -c 'echo out; exit 4'"]);
    assert_eq!(run.code, 3, "{}", run.stdout);
    assert!(run.stdout.contains("failed"), "{}", run.stdout);
    assert!(run.stdout.contains("retcode: 4"), "{}", run.stdout);
    let ndjson = cluster.cli(&["run", "--out", "ndjson", "a", "test.ping"]);
    assert_eq!(ndjson.code, 0);
    let lines: Vec<serde_json::Value> = ndjson.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // One object per line in the shape `--out json` gives each minion, then a summary line.
    let last = lines.last().unwrap();
    assert_eq!(
        (last["done"].as_bool(), last["minions"].as_u64(), last["states"]["returned"].as_u64()),
        (Some(true), Some(1), Some(1))
    );
    let final_line = &lines[lines.len() - 2];
    assert_eq!((final_line["minion"].as_str(), final_line["state"].as_str()), (Some("a"), Some("returned")));
    assert_eq!(final_line["return"], true, "the same field name as --out json: {final_line}");
    let listed = cluster.cli(&["minions", "list", "--out", "ndjson"]);
    let first: serde_json::Value = serde_json::from_str(listed.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first["id"], "a", "a list is one object per line: {}", listed.stdout);
    let yaml = cluster.cli(&["run", "--out", "yaml", "a", "test.echo", "hi"]);
    assert!(yaml.stdout.contains("return: hi"), "{}", yaml.stdout);
    // A function the minion does not have is refused by the master, before anything is sent.
    let unknown = cluster.cli(&["run", "--out", "json", "a", "no.such"]);
    assert_eq!(unknown.code, 1);
    assert!(
        unknown.stderr.contains("no.such is not a function of 1 targeted minion(s): a; nothing was sent"),
        "{}",
        unknown.stderr
    );
    let typo = cluster.cli(&["run", "a", "test.pnig"]);
    assert_eq!(typo.code, 1);
    assert!(typo.stderr.contains("did you mean test.ping?"), "{}", typo.stderr);
    let salt = cluster.cli(&["run", "a", "cmd.run_all", "true"]);
    assert!(salt.stderr.contains("halite's way to do that is cmd.run"), "{}", salt.stderr);
}

#[test]
fn a_cancelled_job_is_killed_and_reported_cancelled() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("c1", "");
    cluster.wait_connected(&["c1"]);
    let published = cluster.cli(&["run", "--async", "--job-timeout", "60s", "c1", "test.sleep", "30"]);
    let jid = published.stdout.trim().to_owned();
    wait_for("the job to run", Duration::from_secs(10), || {
        (cluster.job_states(&jid) == pairs(&[("c1", "running")])).then_some(())
    });
    let cancel = cluster.cli(&["jobs", "cancel", &jid, "--out", "json"]);
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);
    assert_eq!(cancel.json()["minions"]["c1"], "cancelled");
    assert_eq!(cluster.job_states(&jid), pairs(&[("c1", "cancelled")]));
    let again = cluster.cli(&["jobs", "cancel", &jid]);
    assert_eq!(again.code, 1);
    assert!(again.stderr.contains("no running job"), "{}", again.stderr);
    let fingerprints = cluster.cli(&["key", "fingerprint"]);
    assert!(fingerprints.stdout.starts_with("master: "), "{}", fingerprints.stdout);
}

#[test]
fn local_calls_honour_the_default_deny_policy() {
    let cluster = Cluster::start("");
    let config = cluster.dir.join("local-minion.toml");
    std::fs::write(&config, format!("state_dir = {:?}\n", cluster.dir.join("local"))).unwrap();
    let config = config.to_str().unwrap();
    let denied = cluster.bin("halite-minion", &["--config", config, "call", "cmd.run", "true"]);
    assert_eq!(denied.code, 1);
    assert!(denied.stdout.contains("denied: cmd.run is not allowed"), "{}", denied.stdout);
    let allowed = cluster.bin("halite-minion", &["--config", config, "call", "test.ping"]);
    assert_eq!(allowed.code, 0, "{}", allowed.stdout);
    // --out, as salt-call's: one line, or the value itself for a shell script.
    let compact = cluster.bin("halite-minion", &["--config", config, "call", "--out", "compact", "test.echo", "hi"]);
    assert_eq!(compact.stdout, "{\"local\":\"hi\"}\n");
    let txt = cluster.bin("halite-minion", &["--config", config, "call", "--out", "txt", "test.echo", "hi there"]);
    assert_eq!(txt.stdout, "hi there\n");
    let grains = cluster.bin("halite-minion", &["--config", config, "call", "--out", "txt", "grains.items"]);
    assert!(grains.stdout.lines().any(|l| l.starts_with("kernel: ")), "{}", grains.stdout);
    let bad = cluster.bin("halite-minion", &["--config", config, "call", "--out", "yml", "test.ping"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}

#[test]
fn daemons_tell_systemd_when_they_are_ready() {
    use std::os::unix::net::UnixDatagram;
    let cluster = Cluster::start("");
    let socket = cluster.dir.join("notify.sock");
    let receiver = UnixDatagram::bind(&socket).unwrap();
    receiver.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let config = cluster.dir.join("second-master.toml");
    std::fs::write(&config, format!("listen = \"127.0.0.1:0\"\nstate_dir = {:?}\n", cluster.dir.join("second")))
        .unwrap();
    let mut master = std::process::Command::new(halite_tests::bin_dir().join("halite-master"))
        .arg("--config")
        .arg(&config)
        .env("NOTIFY_SOCKET", &socket)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 64];
    let got = receiver.recv(&mut buf);
    let _ = master.kill();
    let _ = master.wait();
    assert_eq!(&buf[..got.unwrap()], b"READY=1");
    assert!(cluster.dir.join("second/master.addr").exists(), "ready before listening");
}

#[test]
fn the_cli_prints_shell_completions() {
    let cluster = Cluster::start("");
    let bash = cluster.bin("halite", &["completions", "bash"]);
    assert_eq!(bash.code, 0);
    assert!(
        bash.stdout.contains("_halite") && bash.stdout.contains("principal"),
        "{}",
        &bash.stdout[..200.min(bash.stdout.len())]
    );
    assert_eq!(cluster.bin("halite", &["completions", "tcsh"]).code, 2);
}

#[test]
fn a_minion_whose_token_did_not_enroll_it_is_told_why() {
    let mut cluster = Cluster::start("");
    cluster.prepare_minion("tok1", false, "");
    let enrollment = cluster.minion_dir("tok1").join("enrollment.toml");
    let text = std::fs::read_to_string(&enrollment).unwrap();
    std::fs::write(&enrollment, format!("{text}token = \"not-a-token-of-this-master\"\n")).unwrap();
    cluster.start_minion("tok1");
    let log = cluster.minion_dir("tok1").join("minion.log");
    wait_for("the minion to log why it waits", Duration::from_secs(10), || {
        std::fs::read_to_string(&log).unwrap_or_default().contains("not known to this master").then_some(())
    });
    let master_log = std::fs::read_to_string(cluster.dir.join("master.log")).unwrap();
    assert!(master_log.contains("not known to this master"), "{master_log}");
}

/// Two minions writing one file in a directory they share (an NFS home, a bind mount), many
/// jobs at once: every write succeeds and the file holds one writer's whole content.
#[test]
fn minions_sharing_a_directory_write_one_file_at_once_without_losing_a_write() {
    let mut cluster = Cluster::start("");
    for id in ["share1", "share2"] {
        cluster.enroll_minion(id, "");
    }
    cluster.wait_connected(&["share1", "share2"]);
    let shared = cluster.dir.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let path = shared.join("app.conf");
    let name = format!("name={}", path.display());
    let contents: Vec<String> = (0..12).map(|i| format!("contents=version {i}")).collect();
    let jids: Vec<String> = contents
        .iter()
        .map(|c| {
            let run = cluster.cli(&["run", "--async", "-L", "share1,share2", "file.managed", &name, c]);
            assert_eq!(run.code, 0, "{}", run.stderr);
            run.stdout.trim().to_owned()
        })
        .collect();
    for jid in &jids {
        let states = wait_for("the job's end", Duration::from_secs(60), || {
            let states = cluster.job_states(jid);
            states
                .iter()
                .all(|(_, s)| !matches!(s.as_str(), "waiting" | "sent" | "running" | "queued"))
                .then_some(states)
        });
        assert_eq!(
            states,
            [("share1".to_owned(), "returned".to_owned()), ("share2".to_owned(), "returned".to_owned())],
            "{jid}: {}",
            cluster.cli(&["jobs", "show", jid]).stdout
        );
    }
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(contents.iter().any(|c| c.strip_prefix("contents=") == Some(written.as_str())), "{written:?}");
    let left: Vec<_> = std::fs::read_dir(&shared).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, [std::ffi::OsString::from("app.conf")], "no temporary file is left");
}
