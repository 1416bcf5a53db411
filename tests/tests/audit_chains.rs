//! The audit trail's chains against a database role that removes records from their end: a
//! running master goes on from the last record it appended (the gap then shows), and masters
//! sharing a PostgreSQL store cross-link their chains, so the end cut off one master's chain
//! is named by another's record that saw it longer, by the store's check and offline alike.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use halite_tests::postgres::fresh_database;
use halite_tests::Cluster;
use serde_json::Value;

/// The entries of every record (reads of the trail included) the master on `port` lists.
fn entries(cluster: &Cluster, port: u16, args: &[&str]) -> Vec<Value> {
    let mut full = vec!["audit", "list", "--reads", "--out", "json", "--limit", "100000"];
    full.extend_from_slice(args);
    let run = cluster.cli_at(port, &full);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.json().as_array().unwrap().clone()
}

#[test]
fn records_removed_from_the_end_of_a_running_masters_chain_leave_a_gap_its_check_names() {
    let cluster = Cluster::start("");
    for _ in 0..5 {
        assert_eq!(cluster.cli(&["key", "list"]).code, 0);
    }
    let before = entries(&cluster, cluster.port, &[]);
    let last = before.last().unwrap()["seq"].as_u64().unwrap();
    // A database role removes the chain's last records while the master runs (the last two
    // listed, and the record of the listing).
    let db = rusqlite::Connection::open(cluster.dir.join("master/master.db")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    let removed = db.execute("DELETE FROM audit WHERE seq >= ?1", [last - 1]).unwrap();
    assert!(removed >= 2, "{removed}");
    drop(db);
    // The master goes on from what it wrote: the records after the cut do not hide it.
    for _ in 0..3 {
        assert_eq!(cluster.cli(&["key", "list"]).code, 0);
    }
    let verify = cluster.cli(&["audit", "verify"]);
    assert_eq!(verify.code, 1, "{} {}", verify.stdout, verify.stderr);
    let said = format!("{}{}", verify.stdout, verify.stderr);
    assert!(said.contains(&format!("{} ", last - 1)) && said.contains("missing"), "{said}");
    let log = std::fs::read_to_string(cluster.dir.join("master.log")).unwrap_or_default();
    assert!(log.contains("removed from the end of this master's audit chain"), "{log}");
}

#[test]
fn the_end_cut_off_one_masters_chain_is_named_by_another_masters_cross_link() {
    let url = fresh_database();
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    let first = cluster.port;
    // Its own key, its own id: its own chain.
    let second = cluster.add_peer_master(false);
    let config = cluster.config_of(second);
    let text = std::fs::read_to_string(config).unwrap();
    std::fs::write(config, format!("id = \"m2\"\n{text}")).unwrap();
    let keys = cluster.certify(&[first, second]);
    cluster.kill_master();
    cluster.start_master();
    for _ in 0..5 {
        assert_eq!(cluster.cli_at(first, &["key", "list"]).code, 0);
    }
    // The second master's first records link the first master's chain as it then was.
    cluster.restart_peer_master(second);
    assert_eq!(cluster.cli_at(second, &["key", "list"]).code, 0);
    let links = entries(&cluster, second, &["--action", "chain_heads"]);
    let link = links.iter().find(|r| r["chain"] == "m2").unwrap_or_else(|| panic!("no cross-link: {links:?}"));
    let seen = link["record"]["detail"]["heads"]["master"].as_u64().unwrap();
    assert!(seen >= 5, "{link}");
    let whole = cluster.cli_at(second, &["audit", "verify"]);
    assert_eq!(whole.code, 0, "{} {}", whole.stdout, whole.stderr);

    // The first master stopped, a database role removes the end of its chain.
    cluster.kill_master();
    let cut = seen - 1;
    let sql = format!("DELETE FROM audit WHERE chain = 'master' AND seq >= {cut}");
    let psql = Command::new("psql").args([url.as_str(), "-v", "ON_ERROR_STOP=1", "-qAt", "-c", &sql]).output().unwrap();
    assert!(psql.status.success(), "{}", String::from_utf8_lossy(&psql.stderr));

    // The second master's check names it, through its link.
    let verify = cluster.cli_at(second, &["audit", "verify"]);
    assert_eq!(verify.code, 1, "{} {}", verify.stdout, verify.stderr);
    let said = format!("{}{}", verify.stdout, verify.stderr);
    assert!(said.contains("chain master") && said.contains("of chain m2 saw the chain reach"), "{said}");
    // So does an export, offline, with the cluster's key.
    let export = cluster.dir.join("audit.jsonl");
    let run = cluster.cli_at(second, &["audit", "export", "--out", export.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let cluster_pub = keys.join("cluster.pub");
    let offline = cluster.cli(&[
        "audit",
        "verify",
        "--file",
        export.to_str().unwrap(),
        "--cluster-key",
        cluster_pub.to_str().unwrap(),
    ]);
    assert_eq!(offline.code, 1, "{} {}", offline.stdout, offline.stderr);
    assert!(offline.stderr.contains("saw the chain reach"), "{}", offline.stderr);
}
