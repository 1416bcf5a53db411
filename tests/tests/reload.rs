//! End-to-end: SIGHUP rereads the minion's policy and actions, and the master's rules.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_tests::{wait_for, Cluster};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn append(path: &std::path::Path, text: &str) {
    let old = std::fs::read_to_string(path).unwrap();
    std::fs::write(path, format!("{old}\n{text}")).unwrap();
}

#[test]
fn sighup_rereads_the_minion_policy_and_the_master_event_rules() {
    let mut cluster = Cluster::start("");
    // The default policy: cmd.run is not allowed.
    cluster.prepare_minion_with("r1", true, "", "");
    cluster.start_minion("r1");
    cluster.wait_connected(&["r1"]);
    let run = cluster.cli(&["run", "--out", "json", "r1", "cmd.run", "echo reloaded"]);
    assert_eq!(run.json()["minions"]["r1"]["state"], "denied", "{}", run.stdout);

    append(&cluster.minion_dir("r1").join("minion.toml"), "[policy]\nallow = [\"cmd.run\"]\n");
    cluster.signal_minion("r1", Signal::SIGHUP);
    wait_for("the new policy", Duration::from_secs(10), || {
        let run = cluster.cli(&["run", "--out", "json", "r1", "cmd.run", "echo reloaded"]);
        (run.json()["minions"]["r1"]["state"] == "returned").then_some(())
    });

    // No event rule: the minion's event is refused; with one added and SIGHUP, it is published.
    let seen = cluster.dir.join("events.ndjson");
    let mut watcher = std::process::Command::new(cluster.bins().join("halite"))
        .arg("--config")
        .arg(&cluster.config)
        .args(["events", "--out", "ndjson", "minion/*", "halite/acl/denied"])
        .stdout(std::fs::File::create(&seen).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let sent = cluster.cli(&["run", "r1", "event.send", "app/before"]);
    assert_eq!(sent.code, 0, "{}", sent.stdout);
    wait_for("the refusal", Duration::from_secs(10), || {
        std::fs::read_to_string(&seen).unwrap_or_default().contains("halite/acl/denied").then_some(())
    });
    append(&cluster.config, "[[events]]\nminions = [\"r*\"]\nallow = [\"app/*\"]\n");
    let pid = i32::try_from(cluster.master_pid().unwrap()).unwrap();
    kill(Pid::from_raw(pid), Signal::SIGHUP).unwrap();
    wait_for("the master's new rules", Duration::from_secs(10), || {
        let log = std::fs::read_to_string(cluster.dir.join("master.log")).unwrap_or_default();
        log.contains("config reread").then_some(())
    });
    let sent = cluster.cli(&["run", "r1", "event.send", "app/after"]);
    assert_eq!(sent.code, 0, "{}", sent.stdout);
    wait_for("the event, published", Duration::from_secs(10), || {
        std::fs::read_to_string(&seen).unwrap_or_default().contains("minion/r1/app/after").then_some(())
    });
    assert!(!std::fs::read_to_string(&seen).unwrap().contains("minion/r1/app/before"));
    let _ = watcher.kill();
    let _ = watcher.wait();
    assert_eq!(cluster.cli(&["key", "list"]).code, 0, "the master still serves");
}
