//! Prometheus metrics and health checks of a running master, checked by Prometheus' own
//! `promtool` (installed by scripts/test.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use halite_tests::{http, wait_for, Cluster};

fn promtool_check(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; scripts/test.sh installs it)");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), said)
}

/// The value of the sample line that starts with `name` (labels included), if any.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))?.rsplit(' ').next()?.parse().ok()
}

#[test]
fn the_master_exports_metrics_promtool_accepts_and_answers_health_checks() {
    let config = "[metrics]\nlisten = \"127.0.0.1:0\"\n[gateway]\nlisten = \"127.0.0.1:0\"\n";
    let mut cluster = Cluster::start(config);
    cluster.enroll_minion("m1", "");
    cluster.wait_connected(&["m1"]);
    assert_eq!(cluster.cli(&["run", "m1", "test.ping"]).code, 0);
    // A minion event outside its (empty) events ACL is refused and counted.
    assert_eq!(cluster.cli(&["run", "m1", "event.send", "app/ready", "{}"]).code, 0);
    let read = |file: &str| {
        let path = cluster.dir.join("master").join(file);
        wait_for(file, Duration::from_secs(10), || std::fs::read_to_string(&path).ok()).trim().to_owned()
    };
    let (metrics_addr, gateway_addr) = (read("metrics.addr"), read("gateway.addr"));

    // The gauge is counted every 100 ms, and the refused event may reach the master after the
    // job's return: both are waited for.
    let text = wait_for("the sessions gauge and the refused event", Duration::from_secs(5), || {
        let answer = http::request("GET", &metrics_addr, "/metrics", None, None);
        assert_eq!(answer.status, 200);
        (answer.body.contains("halite_sessions{role=\"minion\"} 1")
            && answer.body.contains("halite_denials_total{kind=\"event\"} 1"))
        .then_some(answer.body)
    });
    let (ok, said) = promtool_check(&text);
    assert!(ok, "promtool check metrics: {said}\n{text}");
    assert_eq!(sample(&text, "halite_jobs_published_total"), Some(2.0), "{text}");
    assert_eq!(sample(&text, "halite_slots_final_total{state=\"returned\"}"), Some(2.0), "{text}");
    assert_eq!(sample(&text, "halite_handshakes_total{outcome=\"accepted\"}").map(|n| n >= 3.0), Some(true), "{text}");
    assert_eq!(sample(&text, "halite_denials_total{kind=\"event\"}"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "halite_dispatch_seconds_count"), Some(2.0), "{text}");
    assert_eq!(sample(&text, "halite_round_trip_seconds_count"), Some(2.0), "{text}");
    assert!(sample(&text, "halite_store_seconds_count{operation=\"insert_job\"}").is_some(), "{text}");

    for addr in [&metrics_addr, &gateway_addr] {
        let healthz = http::request("GET", addr, "/healthz", None, None);
        assert_eq!((healthz.status, healthz.body.trim()), (200, "ok"), "{addr}");
        let readyz = http::request("GET", addr, "/readyz", None, None);
        assert_eq!((readyz.status, readyz.body.trim()), (200, "ready"), "{addr}");
    }
    // On the gateway, the figures need a token.
    assert_eq!(http::request("GET", &gateway_addr, "/metrics", None, None).status, 401);
    let token = cluster.cli(&["principal", "token", "root"]).stdout.trim().to_owned();
    let through_gateway = http::request("GET", &gateway_addr, "/metrics", Some(&token), None);
    assert_eq!(through_gateway.status, 200);
    assert!(through_gateway.body.contains("# TYPE halite_jobs_published_total counter"), "{}", through_gateway.body);
    // Fleet-wide figures are not for a narrow principal's token.
    let keys = cluster.dir.join("keys");
    cluster.add_principal("watcher", &keys, &["--target", "nobody", "--function", "test.ping"]);
    let narrow = cluster.cli(&["principal", "token", "watcher"]).stdout.trim().to_owned();
    let refused = http::request("GET", &gateway_addr, "/metrics", Some(&narrow), None);
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("administrators"), "{}", refused.body);
}

#[test]
fn a_minion_exports_its_own_figures_when_asked_to() {
    let mut cluster = Cluster::start("");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    cluster.prepare_minion_with("m2", true, "", &format!("[metrics]\nlisten = {addr:?}\n"));
    cluster.start_minion("m2");
    cluster.wait_connected(&["m2"]);
    assert_eq!(cluster.cli(&["run", "m2", "test.ping"]).code, 0);
    assert_ne!(cluster.cli(&["run", "m2", "cmd.run", "exit 3", "shell=true"]).code, 0);
    let text = wait_for("the minion's figures", Duration::from_secs(10), || {
        let answer = http::request("GET", &addr, "/metrics", None, None);
        (answer.status == 200 && answer.body.contains("halite_minion_returns_unacknowledged 0")).then_some(answer.body)
    });
    let (ok, said) = promtool_check(&text);
    assert!(ok, "promtool check metrics: {said}\n{text}");
    assert_eq!(sample(&text, "halite_minion_connected"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "halite_minion_sessions_total"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "halite_minion_jobs_running"), Some(0.0), "{text}");
    // By how each job ended: test.ping ran, cmd.run is outside the default policy.
    assert_eq!(sample(&text, "halite_minion_jobs_finished_total{outcome=\"completed\"}"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "halite_minion_jobs_finished_total{outcome=\"denied\"}"), Some(1.0), "{text}");
    assert_eq!(http::request("GET", &addr, "/healthz", None, None).status, 200);
    assert_eq!(http::request("GET", &addr, "/other", None, None).status, 404);
    assert_eq!(http::request("POST", &addr, "/metrics", None, Some("{}")).status, 405);
}
