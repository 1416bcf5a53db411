//! End-to-end: several masters on one PostgreSQL store, and minions that move between them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_tests::postgres::fresh_database;
use halite_tests::{wait_for, Cluster};

/// The ids the master on `port` lists as connected to it.
fn connected_at(cluster: &Cluster, port: u16) -> Vec<String> {
    let run = cluster.cli_at(port, &["minions", "list", "--out", "json"]);
    if run.code != 0 {
        return Vec::new();
    }
    run.json()
        .as_array()
        .map(|list| {
            list.iter().filter(|m| m["connected"] == true).filter_map(|m| m["id"].as_str().map(str::to_owned)).collect()
        })
        .unwrap_or_default()
}

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
        [first, second].into_iter().find(|&port| connected_at(&cluster, port).contains(&"fo1".to_owned()))
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
        connected_at(&cluster, other).contains(&"fo1".to_owned()).then_some(())
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
        let on = connected_at(&cluster, second);
        (on.contains(&"cut1".to_owned()) && on.contains(&"kept1".to_owned())).then_some(())
    });
    let run = cluster.cli_at(first, &["key", "reject", "cut1"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    wait_for("the second master to cut the rejected minion", Duration::from_secs(5), || {
        (!connected_at(&cluster, second).contains(&"cut1".to_owned())).then_some(())
    });
    let run = cluster.cli_at(second, &["run", "--out", "json", "*1", "test.ping"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc = run.json();
    assert_eq!(doc["minions"]["kept1"]["state"], "returned", "{doc}");
    assert!(doc["minions"].get("cut1").is_none(), "a rejected minion is no target: {doc}");
    // It knocks again and is refused: it stays off.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!connected_at(&cluster, second).contains(&"cut1".to_owned()));
}
