//! End-to-end: the trust model against live processes. A narrow principal, a watcher and a
//! gateway token try what they may not; the master refuses, keeps running, and gives back the
//! memory refusing took.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_client::{Client, ClientConfig};
use halite_protocol::message::RequestBody;
use halite_tests::{bin_dir, freeze, http, wait_for, Cluster};
use serde_json::json;

fn gateway_addr(cluster: &Cluster) -> String {
    let addr_file = cluster.dir.join("master/gateway.addr");
    wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok()).trim().to_owned()
}

/// Whether `probe` holds within `limit`, probing every 200 ms.
fn wait_for_within(limit: Duration, mut probe: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if probe() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The master's resident memory, in KiB.
fn master_rss_kib(cluster: &Cluster) -> u64 {
    let pid = cluster.master_pid().expect("the master runs");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number")
}

/// About 3,000 nested parentheses overflowed the master's stack: every way in is refused with
/// an error naming the problem, and the master goes on serving.
#[test]
fn a_deeply_nested_target_is_refused_from_every_entry_and_the_master_goes_on() {
    let mut cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let addr = gateway_addr(&cluster);
    cluster.enroll_minion("vm-1", "");
    cluster.wait_connected(&["vm-1"]);
    let keys = cluster.dir.join("principals");
    cluster.add_principal("narrow", &keys, &["--target", "vm-*", "--function", "test.ping"]);
    let key = keys.join("narrow.key");
    let deep = "(".repeat(3000) + "vm-1";

    let run = cluster.cli(&["--principal", "narrow", "--key", key.to_str().unwrap(), "run", "-C", &deep, "test.ping"]);
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("nests parentheses"), "{}", run.stderr);

    let token = cluster.cli(&["principal", "token", "narrow"]).stdout.trim().to_owned();
    let job = json!({ "target": deep, "target_kind": "compound", "function": "test.ping" });
    let published = http::request("POST", &addr, "/v1/jobs", Some(&token), Some(&job.to_string()));
    assert_eq!(published.status, 400, "{}", published.body);
    assert!(published.body.contains("nests parentheses"), "{}", published.body);

    assert!(cluster.master_pid().is_some());
    let ping = cluster.cli(&["run", "--out", "json", "vm-1", "test.ping"]);
    assert_eq!(ping.code, 0, "the master no longer serves: {}", ping.stderr);
}

/// A watcher whose rules cover web1 for `test.ping` sees root's job there but cannot cancel,
/// pause or resume it; root's job runs to its end.
#[test]
fn a_watcher_sees_roots_job_but_cannot_stop_it() {
    let mut cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let addr = gateway_addr(&cluster);
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    let keys = cluster.dir.join("principals");
    cluster.add_principal("watcher", &keys, &["--target", "web*", "--function", "test.ping"]);
    let key = keys.join("watcher.key");
    let watcher = |args: &[&str]| {
        let mut full = vec!["--principal", "watcher", "--key", key.to_str().unwrap()];
        full.extend_from_slice(args);
        cluster.cli(&full)
    };
    let published = cluster.cli(&["run", "--async", "web1", "test.sleep", "2"]);
    assert_eq!(published.code, 0, "{}", published.stderr);
    let jid = published.stdout.trim().to_owned();

    assert_eq!(watcher(&["jobs", "show", &jid]).code, 0, "the watcher sees the job");
    let cancel = watcher(&["jobs", "cancel", &jid]);
    assert_ne!(cancel.code, 0, "{}", cancel.stdout);
    assert!(cancel.stderr.contains("not allowed to cancel"), "{}", cancel.stderr);
    // Through the gateway too: refused with 403, never answered as cancelled.
    let token = cluster.cli(&["principal", "token", "watcher"]).stdout.trim().to_owned();
    let refused = http::request("POST", &addr, &format!("/v1/jobs/{jid}/cancel"), Some(&token), None);
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("not allowed to cancel"), "{}", refused.body);
    wait_for("root's job to return", Duration::from_secs(20), || {
        (cluster.job_states(&jid) == [("web1".to_owned(), "returned".to_owned())]).then_some(())
    });
}

/// Sixty pipelined 4 MB requests, all refused, and a master that keeps what refusing them took:
/// the memory goes back.
#[test]
fn memory_taken_to_refuse_requests_is_given_back() {
    let cluster = Cluster::start("");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let before = master_rss_kib(&cluster);
    runtime.block_on(async {
        let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
        let pattern = "*".repeat(4_000_000);
        let requests: Vec<_> = (0..60)
            .map(|_| {
                let (client, pattern) = (client.clone(), pattern.clone());
                tokio::spawn(async move {
                    client.request(RequestBody::MinionList { pattern, after: None, limit: None }).await
                })
            })
            .collect();
        for request in requests {
            let error = request.await.unwrap().expect_err("a 4 MB pattern is refused").to_string();
            assert!(error.contains("longer than"), "{error}");
        }
    });
    // The memory goes back within a few seconds (the master trims every 5 s).
    let mut after = 0;
    let given_back = wait_for_within(Duration::from_secs(20), || {
        after = master_rss_kib(&cluster);
        after.saturating_sub(before) / 1024 < 24
    });
    let kept_mib = after.saturating_sub(before) / 1024;
    assert!(given_back, "the master kept {kept_mib} MiB after refusing the requests ({before} → {after} KiB)");
}

/// A subscriber that stops reading (SIGSTOP) while 1 MiB returns stream past costs the master
/// at most its bounded queue; once it is gone, what the returns took is given back.
#[test]
fn a_stalled_subscriber_costs_at_most_its_queue_and_the_memory_goes_back() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    let before = master_rss_kib(&cluster);
    let mut subscriber = std::process::Command::new(bin_dir().join("halite"))
        .arg("--config")
        .arg(&cluster.config)
        .args(["events", "--out", "ndjson", "halite/job/*"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    freeze(subscriber.id());
    let mut peak = 0;
    for _ in 0..120 {
        let run = cluster.cli(&[
            "run",
            "--out",
            "json",
            "web1",
            "cmd.run",
            "head -c 1048576 /dev/zero | tr '\\0' x",
            "shell=true",
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        peak = peak.max(master_rss_kib(&cluster));
    }
    // Its queue (32 MiB), the event log (8 MiB), one return in flight: never the 120 MiB that
    // went past it.
    let grown_mib = peak.saturating_sub(before) / 1024;
    assert!(grown_mib < 96, "a stalled subscriber cost the master {grown_mib} MiB ({before} → {peak} KiB)");
    let _ = subscriber.kill();
    let _ = subscriber.wait();
    let mut after = 0;
    let given_back = wait_for_within(Duration::from_secs(20), || {
        after = master_rss_kib(&cluster);
        after.saturating_sub(before) / 1024 < 40
    });
    let kept_mib = after.saturating_sub(before) / 1024;
    assert!(given_back, "the master kept {kept_mib} MiB after the subscriber left ({before} → {after} KiB)");
}
