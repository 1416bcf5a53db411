//! The fleet over the HTTP gateway: minions, keys, and enrollment tokens whose user_data a new
//! server boots with, under the same authorisation as the CLI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_tests::{http, wait_for, Cluster};
use serde_json::json;

#[test]
fn an_engine_lists_minions_manages_keys_and_enrolls_a_server_through_the_gateway() {
    let mut cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    cluster.enroll_minion("f1", "role = \"web\"\n");
    cluster.wait_connected(&["f1"]);
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let addr = addr.trim().to_owned();
    let root = cluster.cli(&["principal", "token", "root"]).stdout.trim().to_owned();
    let get = |path: &str| http::request("GET", &addr, path, Some(&root), None);
    let post = |path: &str, body: Option<&str>| http::request("POST", &addr, path, Some(&root), body);

    // Minions, with presence and grains.
    let minions = get("/v1/minions?pattern=f*").json();
    assert_eq!(minions["minions"][0]["id"], "f1", "{minions}");
    assert_eq!(minions["minions"][0]["connected"], true, "{minions}");
    let one = get("/v1/minions/f1").json();
    assert_eq!(one["minion"]["grains"]["role"], "web", "{one}");
    let ghost = get("/v1/minions/ghost");
    assert_eq!((ghost.status, ghost.json()["error"]["kind"].as_str()), (404, Some("not_found")), "{}", ghost.body);

    // An enrollment token: the master's own loopback address is refused for guests.
    let local = post("/v1/enrollment_tokens", Some(&json!({"minion": "f2"}).to_string()));
    assert_eq!(local.status, 400, "{}", local.body);
    assert!(local.json()["error"]["message"].as_str().unwrap().contains("master_addresses"), "{}", local.body);
    let request = json!({"minion": "f2", "ttl_secs": 600, "master_addresses": ["10.20.30.40:4506"]});
    let created = post("/v1/enrollment_tokens", Some(&request.to_string()));
    assert_eq!(created.status, 200, "{}", created.body);
    let token = created.json()["enrollment_token"].clone();
    let user_data = token["user_data"].as_str().unwrap();
    assert!(user_data.starts_with("#cloud-config\n"), "{user_data}");
    assert!(user_data.contains("master = \"10.20.30.40:4506\"") && user_data.contains("id = \"f2\""), "{user_data}");
    assert!(user_data.contains(&cluster.master_key()), "the key minions pin: {user_data}");
    // The enrollment file it writes enrolls the server (here pointed at the master on loopback).
    cluster.prepare_minion("f2", false, "");
    let enrollment =
        token["enrollment"].as_str().unwrap().replace("10.20.30.40:4506", &format!("127.0.0.1:{}", cluster.port));
    std::fs::write(cluster.minion_dir("f2").join("enrollment.toml"), enrollment).unwrap();
    cluster.start_minion("f2");
    cluster.wait_connected(&["f2"]);

    // Keys: listed; rejected (the session is cut), accepted again, deleted. A glob is refused.
    let keys = get("/v1/keys").json();
    let states: Vec<(String, String)> = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["id"].as_str().unwrap().to_owned(), k["state"].as_str().unwrap().to_owned()))
        .collect();
    assert!(states.contains(&("f2".into(), "accepted".into())), "{states:?}");
    assert_eq!(post("/v1/keys/f2/reject", None).json()["changed"], json!(["f2"]));
    wait_for("f2 cut off", Duration::from_secs(10), || (!cluster.connected().contains(&"f2".to_owned())).then_some(()));
    assert_eq!(post("/v1/keys/f2/accept", None).json()["changed"], json!(["f2"]));
    let glob = post("/v1/keys/f*/accept", None);
    assert_eq!(glob.status, 400, "{}", glob.body);
    let deleted = http::request("DELETE", &addr, "/v1/keys/f2", Some(&root), None);
    assert_eq!(deleted.json()["changed"], json!(["f2"]), "{}", deleted.body);

    // A principal without admin sees minions within its targets, and no keys or tokens.
    let keys_dir = cluster.dir.join("keys");
    cluster.add_principal("ops", &keys_dir, &["--target", "f1", "--function", "test.ping"]);
    let ops = cluster.cli(&["principal", "token", "ops"]).stdout.trim().to_owned();
    let seen = http::request("GET", &addr, "/v1/minions", Some(&ops), None).json();
    let ids: Vec<&str> = seen["minions"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["f1"], "{seen}");
    assert_eq!(http::request("GET", &addr, "/v1/keys", Some(&ops), None).status, 403);
    let body = json!({"minion": "f3", "master_addresses": ["10.0.0.1:4506"]}).to_string();
    assert_eq!(http::request("POST", &addr, "/v1/enrollment_tokens", Some(&ops), Some(&body)).status, 403);
}

/// An event stream that drops resumes where it was: each event carries an `id:`, and a
/// reconnect with `Last-Event-ID` gets what came meanwhile before anything new.
#[test]
fn an_event_stream_resumes_after_the_last_event_id() {
    let mut cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    cluster.enroll_minion("s1", "");
    cluster.wait_connected(&["s1"]);
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let addr = addr.trim().to_owned();
    let root = cluster.cli(&["principal", "token", "root"]).stdout.trim().to_owned();
    let path = "/v1/events?tag=halite/job/*/new";

    let mut stream = http::EventStream::open(&addr, path, &root);
    assert_eq!(stream.status, 200);
    let first = cluster.cli(&["run", "--async", "s1", "test.ping"]).stdout.trim().to_owned();
    let (id, data) = stream.next_event();
    assert_eq!(data["tag"], format!("halite/job/{first}/new"));
    let id = id.expect("an id: line");
    drop(stream);

    // Published while the stream was down.
    let missed = cluster.cli(&["run", "--async", "s1", "test.ping"]).stdout.trim().to_owned();
    let mut resumed = http::EventStream::open_after(&addr, path, &root, Some(&id));
    let (_, data) = resumed.next_event();
    assert_eq!(data["tag"], format!("halite/job/{missed}/new"), "the missed event first");
    let later = cluster.cli(&["run", "--async", "s1", "test.ping"]).stdout.trim().to_owned();
    let (_, data) = resumed.next_event();
    assert_eq!(data["tag"], format!("halite/job/{later}/new"), "then live ones");
}

#[test]
fn an_administrator_registers_rekeys_and_removes_principals_through_the_gateway() {
    let cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let addr = addr.trim().to_owned();
    let keys_dir = cluster.dir.join("keys");
    cluster.add_principal("admin", &keys_dir, &["--admin"]);
    cluster.add_principal("ops", &keys_dir, &["--target", "f1", "--function", "test.ping"]);
    let admin = cluster.cli(&["principal", "token", "admin"]).stdout.trim().to_owned();
    let ops = cluster.cli(&["principal", "token", "ops"]).stdout.trim().to_owned();
    let key = |seed: u8| -> (String, String) {
        let public = halite_protocol::identity::IdentityKey::from_seed(&[seed; 32]).public();
        (public.as_bytes().iter().map(|b| format!("{b:02x}")).collect(), public.fingerprint())
    };
    let (first, first_print) = key(1);
    let spec = json!({"public_key": first, "acl": {"rules": [{"targets": "web*", "functions": ["test.*"]}]}});
    let put = http::request("PUT", &addr, "/v1/principals/deploy", Some(&admin), Some(&spec.to_string()));
    assert_eq!((put.status, put.json()["changed"].clone()), (200, json!(["deploy"])), "{}", put.body);
    let listed = http::request("GET", &addr, "/v1/principals", Some(&admin), None).json();
    let deploy = listed["principals"].as_array().unwrap().iter().find(|p| p["name"] == "deploy").cloned();
    assert_eq!(deploy.as_ref().map(|p| p["fingerprint"].clone()), Some(json!(first_print)), "{listed}");
    // Re-keyed.
    let (second, second_print) = key(2);
    let spec = json!({"public_key": second});
    assert_eq!(http::request("PUT", &addr, "/v1/principals/deploy", Some(&admin), Some(&spec.to_string())).status, 200);
    let listed = http::request("GET", &addr, "/v1/principals", Some(&admin), None).body;
    assert!(listed.contains(&second_print) && !listed.contains(&first_print), "{listed}");
    // A key that is not one, and a principal that is no administrator.
    let bad = http::request("PUT", &addr, "/v1/principals/deploy", Some(&admin), Some(r#"{"public_key": "abcd"}"#));
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("public_key: not 64 hex digits"), "{}", bad.body);
    let spec = json!({"public_key": first, "acl": {"admin": true}}).to_string();
    assert_eq!(http::request("PUT", &addr, "/v1/principals/mallory", Some(&ops), Some(&spec)).status, 403);
    assert_eq!(http::request("GET", &addr, "/v1/principals", Some(&ops), None).status, 403);
    assert_eq!(http::request("DELETE", &addr, "/v1/principals/deploy", Some(&ops), None).status, 403);
    // Removed.
    assert_eq!(http::request("DELETE", &addr, "/v1/principals/deploy", Some(&admin), None).status, 204);
    let listed = http::request("GET", &addr, "/v1/principals", Some(&admin), None).body;
    assert!(!listed.contains("\"deploy\""), "{listed}");
}

/// A fleet larger than the gateway's page is listed whole, in id order, each minion once.
#[test]
fn the_gateway_lists_a_fleet_larger_than_a_page_whole() {
    let cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let ids: Vec<String> = (0..1_234).map(|i| format!("node-{i:05}")).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let config = halite_client::ClientConfig::from_master_config(&cluster.config).unwrap();
        let client = halite_client::Client::connect(config).await.unwrap();
        for id in &ids {
            let key = halite_protocol::identity::IdentityKey::generate_os();
            client.preseed_key(id, *key.public().as_bytes()).await.unwrap();
        }
    });
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let root = cluster.cli(&["principal", "token", "root"]).stdout.trim().to_owned();
    let listed = http::request("GET", addr.trim(), "/v1/minions?pattern=node-*", Some(&root), None).json();
    let listed: Vec<&str> = listed["minions"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(listed, ids);
}

/// `POST /v1/run` (salt-api's `client=local`): the job is published and answered with every
/// minion's return once all have finished; with a shorter wait, with what is still going.
#[test]
fn a_run_through_the_gateway_answers_with_every_minions_return() {
    let mut cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr =
        wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok()).trim().to_owned();
    for id in ["sync1", "sync2"] {
        cluster.enroll_minion(id, "");
    }
    cluster.wait_connected(&["sync1", "sync2"]);
    let token = cluster.cli(&["principal", "token", "root"]).stdout.trim().to_owned();
    let body = serde_json::json!({ "target": "sync*", "function": "test.echo", "args": ["hi"] }).to_string();
    let ran = http::request("POST", &addr, "/v1/run", Some(&token), Some(&body));
    assert_eq!(ran.status, 200, "{}", ran.body);
    let doc = ran.json();
    assert_eq!((doc["done"].as_bool(), doc["still_going"].as_array().map(Vec::len)), (Some(true), Some(0)), "{doc}");
    let minions = doc["job"]["minions"].as_array().unwrap();
    assert_eq!(minions.len(), 2, "{doc}");
    assert!(minions.iter().all(|m| m["state"] == "returned"), "{doc}");
    // A wait shorter than the job: the jid and what is still running.
    let slow = serde_json::json!({
        "target": "sync1", "function": "cmd.run", "args": ["sleep 5"], "wait_secs": 1
    })
    .to_string();
    let ran = http::request("POST", &addr, "/v1/run", Some(&token), Some(&slow));
    assert_eq!(ran.status, 200, "{}", ran.body);
    let doc = ran.json();
    assert_eq!(doc["done"], false, "{doc}");
    assert_eq!(doc["still_going"], serde_json::json!(["sync1"]), "{doc}");
    assert_eq!(doc["jid"].as_str().map(str::len), Some(20), "{doc}");
    // Not a field of it: refused with the field named.
    let typo = serde_json::json!({ "target": "sync1", "function": "test.ping", "wait": 3 }).to_string();
    let refused = http::request("POST", &addr, "/v1/run", Some(&token), Some(&typo));
    assert_eq!(refused.status, 422, "{}", refused.body);
}
