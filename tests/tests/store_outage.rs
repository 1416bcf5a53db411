//! End-to-end: the PostgreSQL server goes away under a running master and comes back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use halite_tests::postgres::OwnServer;
use halite_tests::{wait_for, Cluster};

#[test]
fn postgres_restarted_mid_run_loses_nothing_and_refuses_new_work_clearly_meanwhile() {
    let server_dir = std::env::temp_dir().join(format!("halite-outage-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&server_dir);
    let server = OwnServer::start(&server_dir);
    let mut cluster = Cluster::start(&format!("[store]\nurl = {:?}\n", server.url));
    cluster.enroll_minion("o1", "");
    cluster.wait_connected(&["o1"]);
    let ran = cluster.dir.join("ran.log");
    let script = format!("sleep 2; echo ran >> {}", ran.display());
    let published = cluster.cli(&["run", "--async", "--job-timeout", "60s", "o1", "cmd.run", &script, "shell=true"]);
    assert_eq!(published.code, 0, "{}", published.stderr);
    let jid = published.stdout.trim().to_owned();
    std::thread::sleep(Duration::from_millis(300));
    server.stop();

    // Meanwhile: new work is refused with an error that says why, in bounded time.
    let started = Instant::now();
    let run = cluster.cli(&["run", "o1", "test.ping"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stderr.contains("store unavailable"), "{}", run.stderr);
    assert!(started.elapsed() < Duration::from_secs(15), "answered after {:?}", started.elapsed());
    // The minion keeps its session, and finishes the job; its return waits in its outbox.
    assert!(cluster.connected().contains(&"o1".to_owned()));
    wait_for("the job to run", Duration::from_secs(10), || ran.exists().then_some(()));
    std::thread::sleep(Duration::from_secs(1));

    server.resume();
    wait_for("the return to be stored once the database is back", Duration::from_secs(30), || {
        let run = cluster.cli(&["jobs", "show", &jid, "--out", "json"]);
        (run.code == 0 && run.json()["minions"]["o1"]["state"] == "returned").then_some(())
    });
    let run = cluster.cli(&["run", "--out", "json", "o1", "test.ping"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&ran).unwrap().lines().count(), 1, "run once");
    // The master never stalled waiting for the database.
    let master_log = std::fs::read_to_string(cluster.dir.join("master.log")).unwrap();
    assert!(master_log.contains("the database does not answer"), "{master_log}");
    assert!(master_log.contains("the database answers again"), "{master_log}");
    assert!(!master_log.contains("the master was not running"), "{master_log}");
    // The minion kept its session through the outage and after it: a return the master could
    // not store is asked for again inside the session, which is never closed for it.
    let minion_log = std::fs::read_to_string(cluster.minion_dir("o1").join("minion.log")).unwrap();
    let cuts: Vec<&str> = minion_log.lines().filter(|l| l.contains("disconnected from the master")).collect();
    assert!(cuts.is_empty(), "{minion_log}");
    drop(server);
    let _ = std::fs::remove_dir_all(&server_dir);
}

#[test]
fn a_master_started_before_its_database_says_so_every_two_seconds_and_serves_once_it_is_up() {
    let server_dir = std::env::temp_dir().join(format!("halite-late-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&server_dir);
    let server = OwnServer::start(&server_dir);
    let mut cluster = Cluster::start(&format!("[store]\nurl = {:?}\n", server.url));
    cluster.kill_master();
    server.stop();
    let log = cluster.dir.join("master.log");
    let logged_before = std::fs::read_to_string(&log).unwrap_or_default().len();
    // The database comes back 7 s after the master starts.
    let resumed = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(7));
        server.resume();
        server
    });
    // Returns once the master serves.
    cluster.start_master();
    let _server = resumed.join().unwrap();
    let said = std::fs::read_to_string(&log).unwrap_or_default()[logged_before..].to_owned();
    let unreachable = said.lines().filter(|l| l.contains("store unreachable")).count();
    // From the first attempt, every 2 s: at 0, 2, 4 and 6 s (a 30 s wait would say nothing).
    assert!((3..=5).contains(&unreachable), "{unreachable} times: {said}");
    assert!(said.lines().any(|l| l.contains("Connection refused") || l.contains("connection refused")), "{said}");
    assert!(said.contains("store connected"), "{said}");
    assert_eq!(cluster.cli(&["key", "list"]).code, 0);
}

/// The same for SQLite: a master started while another process holds its database's lock
/// (a backup, an operator's `sqlite3`) waits for it, saying `store unreachable` every 2 s,
/// and serves once the lock is released.
#[test]
fn a_master_started_while_its_sqlite_database_is_locked_says_so_every_two_seconds() {
    let mut cluster = Cluster::start("");
    cluster.stop_master();
    let database = cluster.dir.join("master").join("master.db");
    let log = cluster.dir.join("master.log");
    let logged_before = std::fs::read_to_string(&log).unwrap_or_default().len();
    // Holds the write lock for 7 s (python's own sqlite3, another process).
    let holder = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sqlite3, sys, time\nc = sqlite3.connect(sys.argv[1], isolation_level=None)\nc.execute('BEGIN EXCLUSIVE')\nprint('locked', flush=True)\ntime.sleep(7)\nc.execute('ROLLBACK')\n")
        .arg(&database)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut holder = holder;
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "locked");
    cluster.start_master();
    let _ = holder.wait();
    let said = std::fs::read_to_string(&log).unwrap_or_default()[logged_before..].to_owned();
    let unreachable = said.lines().filter(|l| l.contains("store unreachable")).count();
    assert!((3..=5).contains(&unreachable), "{unreachable} times: {said}");
    assert!(said.contains("database is locked"), "{said}");
    assert!(said.contains("store connected"), "{said}");
    assert_eq!(cluster.cli(&["key", "list"]).code, 0);
}
