//! End-to-end: masters on one PostgreSQL trust each other only through their keys. A database
//! role that may only connect forges `NOTIFY` announcements; a role that may write the key and
//! principal tables forges rows. Neither reaches a subscriber, a job, a login or a minion key.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use halite_tests::postgres::fresh_database;
use halite_tests::{wait_for, Cluster};

/// Runs `sql` on the database at `url` as `role` (the server trusts loopback logins); the output,
/// or the error text when it fails.
fn psql_as(url: &str, role: &str, sql: &str) -> Result<String, String> {
    let url = url.replacen("halite@", &format!("{role}@"), 1);
    let output =
        Command::new("psql").args([url.as_str(), "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql]).output().unwrap();
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// A login role with no grants of its own: like every role, it may connect (PUBLIC's CONNECT).
fn intruder(url: &str) -> String {
    let role = format!("intruder_{}", std::process::id());
    psql_as(
        url,
        "halite",
        &format!("DO $$ BEGIN CREATE ROLE {role} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$"),
    )
    .unwrap();
    role
}

/// A child process stopped when dropped, also when the test fails (it would otherwise outlive
/// the test, holding what the test runner gave it).
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `halite events` on the master at `port` as root: the lines it prints, as they come.
fn watch_events(cluster: &Cluster, port: u16, patterns: &[&str]) -> (Stopped, Arc<Mutex<Vec<String>>>) {
    let mut child = Command::new(cluster.bins().join("halite"))
        .arg("--config")
        .arg(cluster.config_of(port))
        .args(["events", "--out", "ndjson"])
        .args(patterns)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let (stdout, sink) = (child.stdout.take().unwrap(), lines.clone());
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    (Stopped(child), lines)
}

fn connected_at(cluster: &Cluster, port: u16, id: &str) -> bool {
    let run = cluster.cli_at(port, &["minions", "list", "--out", "json"]);
    run.code == 0
        && run.json().as_array().is_some_and(|list| list.iter().any(|m| m["id"] == id && m["connected"] == true))
}

/// Two masters on one fresh database, and a minion `id` connected to the second.
fn two_masters_and_a_minion(id: &str, rules: &str) -> (Cluster, String, u16, u16) {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("{rules}[store]\nurl = {url:?}\n"));
    let (first, second) = (cluster.port, cluster.start_peer_master());
    cluster.prepare_minion(id, true, "");
    cluster.set_minion_masters(id, &[second]);
    cluster.start_minion(id);
    wait_for("the minion on the second master", Duration::from_secs(20), || {
        connected_at(&cluster, second, id).then_some(())
    });
    (cluster, url, first, second)
}

#[test]
fn a_forged_announcement_does_not_reach_a_subscriber_as_a_minion_event() {
    let rules = "[[events]]\nminions = [\"ev*\"]\nallow = [\"app/*\"]\n";
    let (cluster, url, first, _) = two_masters_and_a_minion("ev1", rules);
    let role = intruder(&url);
    let (_watcher, lines) = watch_events(&cluster, first, &["minion/**"]);

    // The old wire form, and the same under a made-up signature: neither is from a master.
    let forged = [
        r#"{"from":"0123456789abcdef","change":"event","tag":"minion/ev1/app/deploy-ok","data":{"forged":1}}"#
            .to_owned(),
        format!(
            "halite1 {} {} {}",
            "ab".repeat(32),
            "cd".repeat(64),
            r#"{"from":"0123456789abcdef","epoch":1,"seq":1,"at":1,"change":"event","tag":"minion/ev1/app/deploy-ok","data":{"forged":2}}"#
        ),
    ];
    for payload in &forged {
        let sql = format!("SELECT pg_notify('halite_cluster', '{}')", payload.replace('\'', "''"));
        psql_as(&url, &role, &sql).expect("any role that may connect may notify");
    }
    // A real event from the minion, through the second master: it arrives, the forged ones do not.
    let run = cluster.cli_at(first, &["run", "ev1", "event.send", "app/ready", r#"{"real": true}"#]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    wait_for("the minion's real event", Duration::from_secs(10), || {
        lines.lock().unwrap().iter().any(|l| l.contains("minion/ev1/app/ready")).then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    let seen = lines.lock().unwrap().clone();
    assert!(!seen.iter().any(|l| l.contains("deploy-ok")), "a forged announcement reached root: {seen:?}");
}

#[test]
fn a_forged_cancel_does_not_cancel_a_running_job() {
    let (cluster, url, first, _) = two_masters_and_a_minion("sl1", "");
    let role = intruder(&url);
    let run = cluster.cli_at(first, &["run", "--async", "sl1", "test.sleep", "3"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let jid = run.stdout.trim().to_owned();
    // Sent (the store's word for it while the minion runs it).
    wait_for("the job on the minion", Duration::from_secs(10), || {
        cluster.job_states(&jid).iter().any(|(_, state)| state == "running" || state == "sent").then_some(())
    });
    let sql = format!(
        r#"SELECT pg_notify('halite_cluster', '{{"from":"0123456789abcdef","change":"cancel","jid":"{jid}"}}')"#
    );
    psql_as(&url, &role, &sql).expect("notify");
    let done = wait_for("the job's end", Duration::from_secs(15), || {
        let states = cluster.job_states(&jid);
        states.iter().all(|(_, state)| !matches!(state.as_str(), "running" | "sent" | "waiting")).then_some(states)
    });
    assert_eq!(done, vec![("sl1".to_owned(), "returned".to_owned())], "a forged cancel stopped the job");
}

#[test]
fn principal_and_key_rows_written_past_the_masters_are_not_honoured() {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    let second = cluster.start_peer_master();
    let keys = cluster.dir.join("keys");
    cluster.add_principal("ops", &keys, &["--target", "nobody", "--function", "test.ping"]);
    // A role that may write the key and principal tables (not the masters').
    let role = intruder(&url);
    psql_as(&url, "halite", &format!("GRANT SELECT, INSERT, UPDATE ON keys, principals TO {role}")).unwrap();

    // An admin principal under ops's key, written straight into the table.
    psql_as(
        &url,
        &role,
        "INSERT INTO principals (name, public_key, acl, updated_at) \
         SELECT 'mallory', public_key, replace(acl, '\"admin\":false', '\"admin\":true'), updated_at \
         FROM principals WHERE name = 'ops'",
    )
    .unwrap();
    // A minion whose key waits, then is marked accepted in the table.
    cluster.prepare_minion("evil1", false, "");
    cluster.set_minion_masters("evil1", &[second]);
    cluster.start_minion("evil1");
    wait_for("evil1's key pending", Duration::from_secs(20), || {
        let run = cluster.cli(&["key", "list", "evil1", "--out", "json"]);
        (run.code == 0 && run.json()[0]["state"] == "pending").then_some(())
    });
    psql_as(&url, &role, "UPDATE keys SET state = 'accepted' WHERE id = 'evil1'").unwrap();
    // Both masters read everything again, as after a restart.
    cluster.restart_peer_master(second);
    cluster.kill_master();
    cluster.start_master();

    let as_principal = |name: &str| {
        let key = keys.join("ops.key");
        let flags = ["--principal", name, "--key", key.to_str().unwrap(), "minions", "list", "--out", "json"];
        cluster.cli_at(second, &flags)
    };
    assert_eq!(as_principal("ops").code, 0, "the principal a master wrote logs in: {}", as_principal("ops").stderr);
    let forged = as_principal("mallory");
    assert_ne!(forged.code, 0, "a principal row no master signed logged in: {}", forged.stdout);
    std::thread::sleep(Duration::from_secs(6));
    assert!(!connected_at(&cluster, second, "evil1"), "a key accepted in the table alone was honoured");
    let run = cluster.cli(&["key", "list", "evil1", "--out", "json"]);
    assert_eq!(run.json()[0]["state"], "pending", "{}", run.stdout);
}

#[test]
fn token_rows_written_past_the_masters_open_no_session_and_enroll_nobody() {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("[gateway]\nlisten = \"127.0.0.1:0\"\n[store]\nurl = {url:?}\n"));
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let addr = addr.trim().to_owned();
    let keys = cluster.dir.join("keys");
    cluster.add_principal("ops", &keys, &["--target", "nobody", "--function", "test.ping"]);
    let narrow = cluster.cli(&["principal", "token", "ops"]).stdout.trim().to_owned();
    let status = |token: &str| halite_tests::http::request("GET", &addr, "/v1/keys", Some(token), None).status;
    assert_eq!(status(&narrow), 403, "a narrow token may not list keys");
    // A role that may write the token tables (not the masters').
    let role = intruder(&url);
    psql_as(&url, "halite", &format!("GRANT SELECT, INSERT, UPDATE ON tokens, api_tokens TO {role}")).unwrap();

    // A gateway token of root's, written into the table with a hash of the role's choosing.
    psql_as(
        &url,
        &role,
        "INSERT INTO api_tokens (token_hash, principal, created_at, id, owner) \
         VALUES (sha256('hal_forged'::bytea), 'root', 1, 'f0f0f0f0f0f0', 'root')",
    )
    .unwrap();
    assert_eq!(status("hal_forged"), 401, "a gateway token no master signed opened a session");
    // The narrow token made root's in the table: refused altogether, never root's.
    psql_as(&url, &role, "UPDATE api_tokens SET principal = 'root' WHERE principal = 'ops'").unwrap();
    assert_eq!(status(&narrow), 401, "a gateway token widened in the table was honoured");

    // An enrollment token for a new id, written into the table: the minion presenting it waits.
    psql_as(
        &url,
        &role,
        "INSERT INTO tokens (token_hash, minion, expires_at, id, owner) \
         VALUES (sha256('enroll-me'::bytea), 'evil2', 99999999999999, 'e0e0e0e0e0e0', 'root')",
    )
    .unwrap();
    cluster.prepare_minion("evil2", false, "");
    let enrollment = cluster.minion_dir("evil2").join("enrollment.toml");
    let text = std::fs::read_to_string(&enrollment).unwrap();
    std::fs::write(&enrollment, format!("{text}token = \"enroll-me\"\n")).unwrap();
    cluster.start_minion("evil2");
    wait_for("evil2 pending", Duration::from_secs(20), || {
        let run = cluster.cli(&["key", "list", "evil2", "--out", "json"]);
        (run.code == 0 && run.json()[0]["state"] == "pending").then_some(())
    });
    assert!(!connected_at(&cluster, cluster.port, "evil2"), "a token no master signed enrolled a minion");

    // A master's own tokens still work.
    let made = cluster.cli(&["principal", "token", "ops"]).stdout.trim().to_owned();
    assert_eq!(status(&made), 403, "a token a master made opens a session as its principal");
}

#[test]
fn a_job_from_a_master_the_cluster_does_not_certify_ends_refused_with_why_at_once() {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    let first = cluster.port;
    // Its own key, certified by nobody: its jobs are no master's the minion trusts.
    let stranger = cluster.add_peer_master(false);
    cluster.restart_peer_master(stranger);
    cluster.prepare_minion("tr1", true, "");
    cluster.set_minion_masters("tr1", &[first]);
    cluster.start_minion("tr1");
    wait_for("the minion on the first master", Duration::from_secs(20), || {
        connected_at(&cluster, first, "tr1").then_some(())
    });
    // The stranger hears where it is from the first master's announcement, which may come
    // after the minion is listed there.
    wait_for("the stranger to know the minion is on the first master", Duration::from_secs(20), || {
        let run = cluster.cli_at(stranger, &["minions", "list", "--out", "json"]);
        let list = run.json();
        (run.code == 0
            && list.as_array().is_some_and(|l| l.iter().any(|m| m["id"] == "tr1" && m["connected_elsewhere"] == true)))
        .then_some(())
    });
    // Published there with a minute to run: the first master delivers it, the minion refuses
    // it naming its jid, and the slot ends then, not when the minute is up.
    let started = std::time::Instant::now();
    let run = cluster.cli_at(stranger, &["run", "--out", "json", "--job-timeout", "60s", "tr1", "test.ping"]);
    assert!(started.elapsed() < Duration::from_secs(30), "ended after {:?}", started.elapsed());
    let minion = &run.json()["minions"]["tr1"];
    assert_ne!(minion["state"], "returned", "{}", run.stdout);
    assert_ne!(minion["state"], "timed_out", "{}", run.stdout);
    assert_eq!(minion["state"], "denied", "{}", run.stdout);
    assert!(minion["return"]["error"].as_str().unwrap().contains("signature"), "{}", run.stdout);
}
