//! End-to-end: a master on PostgreSQL, and a SQLite master moved onto it with
//! `halite-master migrate-store`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_tests::postgres::{fresh_database, verified_tls};
use halite_tests::{wait_for, Cluster};

fn ping(cluster: &Cluster, target: &[&str]) -> serde_json::Value {
    let mut args = vec!["run", "--out", "json"];
    args.extend_from_slice(target);
    args.push("test.ping");
    let run = cluster.cli(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.json()
}

#[test]
fn a_master_on_postgres_over_tls_enrolls_runs_jobs_and_keeps_them_across_restarts() {
    let url = verified_tls(&fresh_database());
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    cluster.enroll_minion("pg1", "role = \"web\"");
    cluster.wait_connected(&["pg1"]);
    let doc = ping(&cluster, &["pg1"]);
    assert_eq!(doc["minions"]["pg1"]["state"], "returned", "{doc}");
    let jid = doc["jid"].as_str().unwrap().to_owned();
    assert!(!cluster.dir.join("master/master.db").exists(), "no SQLite file beside a PostgreSQL store");
    let log = std::fs::read_to_string(cluster.dir.join("master.log")).unwrap();
    assert!(log.contains("store connected"), "{log}");

    cluster.kill_master();
    cluster.start_master();
    // The client may have seen the return before it was stored (a kill -9 can fall between),
    // but the minion keeps it until the store has it, and sends it again on reconnecting.
    cluster.wait_connected(&["pg1"]);
    wait_for("the return to be stored", Duration::from_secs(10), || {
        (cluster.job_states(&jid) == [("pg1".to_owned(), "returned".to_owned())]).then_some(())
    });
    assert_eq!(ping(&cluster, &["-G", "role:web"])["minions"]["pg1"]["state"], "returned");
}

/// Every row of every table of the SQLite database at `path`, in order, as text (read from a
/// copy, so that reading it changes nothing).
fn dump(path: &std::path::Path) -> Vec<String> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = path.with_file_name(format!("dump-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    for suffix in ["", "-wal"] {
        let from = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
        if from.exists() {
            std::fs::copy(&from, dir.join(format!("db{suffix}"))).unwrap();
        }
    }
    let db = rusqlite::Connection::open(dir.join("db")).unwrap();
    let mut tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").unwrap();
    let names: Vec<String> = tables.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect();
    let mut out = Vec::new();
    for name in names {
        let mut rows = db.prepare(&format!("SELECT * FROM \"{name}\"")).unwrap();
        let columns = rows.column_count();
        let mut found = rows.query([]).unwrap();
        while let Some(row) = found.next().unwrap() {
            let values: Vec<String> = (0..columns).map(|i| format!("{:?}", row.get_ref(i).unwrap())).collect();
            out.push(format!("{name}: {}", values.join(" | ")));
        }
    }
    assert!(out.len() > 10, "{out:?}");
    out
}

/// The bytes of the database's main file and its write-ahead log.
fn files_of(path: &std::path::Path) -> Vec<Option<Vec<u8>>> {
    ["", "-wal"].iter().map(|suffix| std::fs::read(format!("{}{suffix}", path.display())).ok()).collect()
}

#[test]
fn migrate_store_moves_keys_principals_and_jobs_from_sqlite_to_postgres() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("mover", "");
    cluster.wait_connected(&["mover"]);
    let jid = ping(&cluster, &["mover"])["jid"].as_str().unwrap().to_owned();
    let keys = cluster.dir.join("keys");
    let principal = cluster.cli(&[
        "principal",
        "add",
        "heat",
        "--generate",
        keys.to_str().unwrap(),
        "--target",
        "vm-*",
        "--function",
        "test.*",
    ]);
    assert_eq!(principal.code, 0, "{}", principal.stderr);
    let principals_before = cluster.cli(&["principal", "list", "--out", "json"]).json();
    let token = cluster.cli(&["key", "token", "create", "--minion", "later", "--ttl", "1h"]);
    assert_eq!(token.code, 0, "{}", token.stderr);

    cluster.kill_master();
    let source = cluster.dir.join("master/master.db");
    let before = (dump(&source), files_of(&source));
    let url = fresh_database();
    let config = cluster.config.to_str().unwrap().to_owned();
    let migrated = cluster.bin("halite-master", &["--config", &config, "migrate-store", "--to", &url]);
    assert_eq!(migrated.code, 0, "{}", migrated.stderr);
    assert!(migrated.stdout.contains("jobs") && migrated.stdout.contains("set [store] url"), "{}", migrated.stdout);
    // A second copy into the same database is refused: it is no longer empty.
    let again = cluster.bin("halite-master", &["--config", &config, "migrate-store", "--to", &url]);
    assert_eq!(again.code, 1);
    assert!(again.stderr.contains("already holds data"), "{}", again.stderr);
    // Neither run wrote to the source: every row, and the files' bytes, are as they were; the
    // copy made beside it is gone.
    assert_eq!(files_of(&source), before.1, "the database's files changed");
    assert_eq!(dump(&source), before.0);
    assert!(!cluster.dir.join("master/.master.db.migrating").exists());

    let text = std::fs::read_to_string(&cluster.config).unwrap();
    std::fs::write(&cluster.config, format!("{text}[store]\nurl = {url:?}\n")).unwrap();
    std::fs::rename(cluster.dir.join("master/master.db"), cluster.dir.join("master/master.db.moved")).unwrap();
    cluster.start_master();
    assert_eq!(cluster.cli(&["principal", "list", "--out", "json"]).json(), principals_before);
    // The minion's key was carried over: it reconnects without enrolling again.
    cluster.wait_connected(&["mover"]);
    wait_for("the job's return", Duration::from_secs(10), || {
        (cluster.job_states(&jid) == [("mover".to_owned(), "returned".to_owned())]).then_some(())
    });
    assert_eq!(ping(&cluster, &["mover"])["minions"]["mover"]["state"], "returned");
    // The enrollment token made before the move still enrolls its minion, once.
    cluster.prepare_minion("later", false, "");
    let enrollment = cluster.minion_dir("later").join("enrollment.toml");
    let text = std::fs::read_to_string(&enrollment).unwrap();
    std::fs::write(&enrollment, format!("{text}token = {:?}\n", token.stdout.trim())).unwrap();
    cluster.start_minion("later");
    wait_for("the token minion", Duration::from_secs(20), || {
        cluster.connected().contains(&"later".to_owned()).then_some(())
    });
}
