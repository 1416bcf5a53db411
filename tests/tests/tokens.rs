//! Gateway and enrollment tokens have a life: they expire, are listed and revoked by id, and a
//! gateway token dies with its principal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_tests::{http, wait_for, Cluster};

#[test]
fn gateway_tokens_expire_are_revoked_and_die_with_their_principal() {
    let cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let addr = addr.trim().to_owned();
    let add = |keys: &str| {
        cluster.add_principal("ops", &cluster.dir.join(keys), &["--target", "*", "--function", "test.ping"])
    };
    add("keys");
    let status = |token: &str| http::request("GET", &addr, "/v1/minions", Some(token), None).status;

    // Expiry.
    let brief = cluster.cli(&["principal", "token", "ops", "--ttl", "2s"]).stdout.trim().to_owned();
    assert_eq!(status(&brief), 200);
    wait_for("the token to expire", Duration::from_secs(10), || (status(&brief) == 401).then_some(()));

    // Listed by id, with its expiry (the default: 90 days); revoked by id.
    let lasting = cluster.cli(&["principal", "token", "ops"]).stdout.trim().to_owned();
    let listed = cluster.cli(&["--out", "json", "principal", "tokens"]).json();
    let newest = &listed[0];
    assert_eq!(newest["principal"], "ops", "{listed}");
    let lifetime = newest["expires_at_ms"].as_u64().unwrap() - newest["created_at_ms"].as_u64().unwrap();
    assert_eq!(lifetime, 90 * 86_400_000, "{listed}");
    assert!(!listed.to_string().contains(&lasting), "the token itself is never shown again");
    let id = newest["id"].as_str().unwrap().to_owned();
    assert_eq!(status(&lasting), 200);
    let revoked = cluster.cli(&["principal", "revoke-token", &id]);
    assert_eq!(revoked.code, 0, "{}", revoked.stderr);
    assert_eq!(status(&lasting), 401);
    assert_eq!(cluster.cli(&["principal", "revoke-token", &id]).code, 1, "already gone");

    // Removing the principal removes its tokens: re-adding the name does not bring them back.
    let forever = cluster.cli(&["principal", "token", "ops", "--ttl", "0s"]).stdout.trim().to_owned();
    assert_eq!(status(&forever), 200);
    assert_eq!(cluster.cli(&["principal", "remove", "ops"]).code, 0);
    add("new-keys");
    assert_eq!(status(&forever), 401);
}

#[test]
fn enrollment_tokens_are_listed_and_a_revoked_one_enrolls_nobody() {
    let mut cluster = Cluster::start("");
    let created = cluster.cli(&["--out", "json", "key", "token", "create", "--minion", "z1", "--ttl", "10m"]);
    assert_eq!(created.code, 0, "{}", created.stderr);
    let listed = cluster.cli(&["--out", "json", "key", "token", "list"]).json();
    assert_eq!(listed[0]["minion"], "z1", "{listed}");
    assert_eq!(listed[0]["used"], false, "{listed}");
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(cluster.cli(&["key", "token", "revoke", &id]).code, 0);
    assert!(cluster.cli(&["--out", "json", "key", "token", "list"]).json().as_array().unwrap().is_empty());

    // A minion presenting the revoked token waits as pending instead of enrolling.
    let token = created.json()["token"].as_str().unwrap().to_owned();
    cluster.prepare_minion("z1", false, "");
    let enrollment = cluster.minion_dir("z1").join("enrollment.toml");
    let text = std::fs::read_to_string(&enrollment).unwrap();
    std::fs::write(&enrollment, format!("{text}token = {token:?}\n")).unwrap();
    cluster.start_minion("z1");
    wait_for("z1 pending", Duration::from_secs(10), || {
        let keys = cluster.cli(&["--out", "json", "key", "list"]).json();
        keys.as_array().unwrap().iter().any(|k| k["id"] == "z1" && k["state"] == "pending").then_some(())
    });
    assert!(!cluster.connected().contains(&"z1".to_owned()));
}
