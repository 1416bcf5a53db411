//! Tenants that cannot overlap, files that belong to a tenant, and the audit trail, on real
//! processes: a tenant name with `-` is refused naming the tenant it would overlap; a tenant's
//! minion reads only its own part of the file root (and the shared ones), everything else
//! answered as a file that does not exist, through every way in; every request is recorded
//! with its decision, a tenant reads only its tenant's records, and the trail exported and
//! checked offline names the first record a database role changed, removed or moved.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use halite_tests::{Cluster, Run};
use serde_json::Value;

fn cli_as(cluster: &Cluster, keys: &Path, name: &str, args: &[&str]) -> Run {
    let key = keys.join(format!("{name}.key"));
    let mut full = vec!["--principal", name, "--key", key.to_str().unwrap()];
    full.extend_from_slice(args);
    cluster.cli(&full)
}

#[test]
fn tenant_names_that_would_share_ids_are_refused_naming_the_other() {
    let cluster = Cluster::start("");
    let keys = cluster.dir.join("keys");
    cluster.add_principal("acme", &keys, &["--tenant", "acme", "--target", "*", "--function", "*"]);
    let run = cluster.cli(&[
        "principal",
        "add",
        "acme-dev",
        "--generate",
        keys.to_str().unwrap(),
        "--tenant",
        "acme-dev",
        "--target",
        "*",
        "--function",
        "*",
    ]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(run.stderr.contains("may not contain '-'") && run.stderr.contains("\"acme\""), "{}", run.stderr);
    // acme holds every id acme-…, and no other tenant can: its tokens for them are its own.
    let token = cli_as(&cluster, &keys, "acme", &["key", "token", "create", "--minion", "acme-dev-web9"]);
    assert_eq!(token.code, 0, "{}", token.stderr);
    let other = cli_as(&cluster, &keys, "acme", &["key", "token", "create", "--minion", "acmedev-web9"]);
    assert_ne!(other.code, 0, "{}", other.stdout);
}

#[test]
fn a_tenants_minion_reads_only_its_part_of_the_file_root_through_every_way_in() {
    let root = std::env::temp_dir().join(format!("halite-tenant-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for dir in ["proja/plans", "projb/plans", "common", "plans"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::write(root.join("proja/motd"), "hello a\n").unwrap();
    std::fs::write(
        root.join("projb/plans/db.yaml"),
        "steps:\n  - id: s\n    function: test.echo\n    args: [projb-secret]\n",
    )
    .unwrap();
    std::fs::write(root.join("projb/secret.sh"), "#!/bin/sh\necho projb-secret\n").unwrap();
    std::fs::write(root.join("common/motd"), "shared\n").unwrap();
    std::fs::write(root.join("top.yaml"), "'*': [web]\n").unwrap();
    std::os::unix::fs::symlink("../projb/secret.sh", root.join("proja/link.sh")).unwrap();

    let mut cluster = Cluster::start(&format!("[files]\nroot = {root:?}\nshared = [\"common\"]\n"));
    let keys = cluster.dir.join("keys");
    for tenant in ["proja", "projb"] {
        cluster.add_principal(tenant, &keys, &["--tenant", tenant, "--target", "*", "--function", "*"]);
    }
    cluster.enroll_minion("proja-web1", "");
    cluster.enroll_minion("ops1", "");
    cluster.wait_connected(&["proja-web1", "ops1"]);
    let out = cluster.dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let run_on = |minion: &str, function: &str, args: &[String]| -> (i32, Value) {
        let mut full = vec!["run".to_owned(), "--out".into(), "json".into(), minion.into(), function.into()];
        full.extend(args.iter().cloned());
        let full: Vec<&str> = full.iter().map(String::as_str).collect();
        let run = cli_as(&cluster, &keys, "proja", &full);
        (run.code, run.json()["minions"][minion].clone())
    };
    let dest = |name: &str| format!("name={}", out.join(name).display());
    let managed = |path: &str| run_on("proja-web1", "file.managed", &[dest("f"), format!("source=halite://{path}")]);

    // Its own part and the shared one.
    assert_eq!(managed("proja/motd").0, 0);
    assert_eq!(std::fs::read_to_string(out.join("f")).unwrap(), "hello a\n");
    assert_eq!(managed("common/motd").0, 0);
    // Another tenant's, the untenanted root, and a link out of its part: exactly as missing.
    for path in ["projb/plans/db.yaml", "top.yaml", "proja/link.sh", "projb/nothing-here"] {
        let (code, minion) = managed(path);
        assert_ne!(code, 0, "{path}: {minion}");
        let text = minion.to_string();
        assert!(text.contains(&format!("halite://{path}: no such file on the master")), "{path}: {text}");
        assert!(!text.contains("projb-secret"), "{text}");
    }
    // The other ways in answer the same.
    let script = run_on("proja-web1", "cmd.script", &["source=halite://projb/secret.sh".into()]);
    assert_ne!(script.0, 0);
    assert!(script.1.to_string().contains("no such file on the master"), "{}", script.1);
    let plan = run_on("proja-web1", "plan.run", &["source=halite://projb/plans/db.yaml".into()]);
    assert!(!plan.1.to_string().contains("projb-secret"), "{}", plan.1);
    assert!(plan.1.to_string().contains("no such file on the master"), "{}", plan.1);
    let apply =
        cli_as(&cluster, &keys, "proja", &["apply", "--out", "json", "proja-web1", "halite://projb/plans/db.yaml"]);
    assert_ne!(apply.code, 0);
    assert!(!apply.stdout.contains("projb-secret"), "{}", apply.stdout);
    // A minion of no tenant reads the root, but no tenant's part.
    let root_run = |path: &str| {
        let name = dest("g");
        let source = format!("source=halite://{path}");
        cluster.cli(&["run", "--out", "json", "ops1", "file.managed", &name, &source])
    };
    assert_eq!(root_run("top.yaml").code, 0);
    let theirs = root_run("projb/plans/db.yaml");
    assert!(theirs.stdout.contains("no such file on the master"), "{}", theirs.stdout);
}

#[test]
fn every_request_is_audited_read_per_tenant_and_tampering_is_named() {
    let mut cluster = Cluster::start("");
    let keys = cluster.dir.join("keys");
    cluster.two_tenants(&keys);
    assert_eq!(cli_as(&cluster, &keys, "proja", &["run", "proja-web1", "test.ping"]).code, 0);
    // Refused: outside its tenant.
    assert_ne!(cli_as(&cluster, &keys, "proja", &["run", "projb-web1", "test.ping"]).code, 0);
    assert_eq!(cli_as(&cluster, &keys, "projb", &["run", "projb-web1", "test.ping"]).code, 0);

    let records = |principal: Option<&str>, args: &[&str]| -> Vec<Value> {
        let mut full = vec!["audit", "list", "--out", "json", "--limit", "1000"];
        full.extend_from_slice(args);
        let run = match principal {
            Some(name) => cli_as(&cluster, &keys, name, &full),
            None => cluster.cli(&full),
        };
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.json().as_array().unwrap().iter().map(|r| r["record"].clone()).collect()
    };
    let all = records(None, &[]);
    let of = |list: &[Value], principal: &str, action: &str, decision: &str| {
        list.iter().any(|r| r["principal"] == principal && r["action"] == action && r["decision"] == decision)
    };
    assert!(of(&all, "proja", "publish", "granted"), "{all:?}");
    assert!(of(&all, "proja", "publish", "refused"), "{all:?}");
    assert!(of(&all, "root", "principal_add", "granted"), "{all:?}");
    assert!(all.iter().any(|r| r["action"] == "job_end" && r["tenant"] == "proja"), "{all:?}");
    assert!(all.iter().any(|r| r["kind"] == "key"), "{all:?}");
    // A tenant reads its tenant's records only, whatever it asks for.
    let mine = records(Some("proja"), &[]);
    assert!(!mine.is_empty());
    assert!(mine.iter().all(|r| r["tenant"] == "proja"), "{mine:?}");
    assert!(records(Some("proja"), &["--tenant", "projb"]).is_empty());
    assert!(records(Some("proja"), &["--by", "projb"]).iter().all(|r| r["tenant"] == "proja"));
    // Filters.
    let refused = records(None, &["--decision", "refused"]);
    assert!(!refused.is_empty() && refused.iter().all(|r| r["decision"] == "refused"));
    let about = records(None, &["--minion", "projb-web1"]);
    assert!(!about.is_empty() && about.iter().all(|r| r["minions"].to_string().contains("projb-web1")));

    // The store's chain is whole; exported, it verifies offline with the master's key.
    let verify = cluster.cli(&["audit", "verify"]);
    assert_eq!(verify.code, 0, "{} {}", verify.stdout, verify.stderr);
    let export = cluster.dir.join("audit.jsonl");
    let run = cluster.cli(&["audit", "export", "--out", export.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let master_pub = cluster.dir.join("master/master.pub");
    let offline = |file: &Path| {
        cluster.cli(&["audit", "verify", "--file", file.to_str().unwrap(), "--signer", master_pub.to_str().unwrap()])
    };
    let ok = offline(&export);
    assert_eq!(ok.code, 0, "{} {}", ok.stdout, ok.stderr);
    // A tenant may not export or verify the whole trail.
    assert_ne!(cli_as(&cluster, &keys, "proja", &["audit", "verify"]).code, 0);

    // Edited in the file: named.
    let text = std::fs::read_to_string(&export).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let edited: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| if i == 3 { l.replace("granted", "refused") } else { (*l).to_owned() })
        .collect();
    let changed = cluster.dir.join("changed.jsonl");
    std::fs::write(&changed, edited.join("\n") + "\n").unwrap();
    let broken = offline(&changed);
    assert_eq!(broken.code, 1, "{} {}", broken.stdout, broken.stderr);
    assert!(broken.stderr.contains("record"), "{}", broken.stderr);
    let removed = cluster.dir.join("removed.jsonl");
    let without: Vec<&str> = lines.iter().enumerate().filter(|(i, _)| *i != 2).map(|(_, l)| *l).collect();
    std::fs::write(&removed, without.join("\n") + "\n").unwrap();
    let broken = offline(&removed);
    assert_eq!(broken.code, 1);
    assert!(broken.stderr.contains("missing"), "{}", broken.stderr);

    // A database role rewriting a row past the running master: the master's check names it.
    let db = rusqlite::Connection::open(cluster.dir.join("master/master.db")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    db.execute("UPDATE audit SET body = replace(body, 'refused', 'granted') WHERE decision = 'refused'", []).unwrap();
    drop(db);
    let verify = cluster.cli(&["audit", "verify"]);
    assert_eq!(verify.code, 1, "{} {}", verify.stdout, verify.stderr);
    assert!(verify.stderr.contains("changed") || verify.stderr.contains("does not follow"), "{}", verify.stderr);
}
