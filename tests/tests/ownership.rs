//! Everything an engine creates is owned, on real processes: two tenants allowed `deploy.apply`
//! on their own servers each see and act on only the configs, deployments and enrollment
//! tokens they created, through the HTTP gateway and the CLI; another's is answered exactly
//! like an id never used. Root and administrators see everything.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use halite_tests::http::{self, Response};
use halite_tests::{wait_for, Cluster, Run};
use serde_json::{json, Value};

const SECRET: &str = "s3cret-of-tenanta";

/// The CLI as principal `name` (its key in `keys`).
fn cli_as(cluster: &Cluster, keys: &Path, name: &str, args: &[&str]) -> Run {
    let key = keys.join(format!("{name}.key"));
    let mut full = vec!["--principal", name, "--key", key.to_str().unwrap()];
    full.extend_from_slice(args);
    cluster.cli(&full)
}

fn ids(listing: &Value, key: &str) -> Vec<String> {
    listing[key].as_array().unwrap().iter().map(|item| item["id"].as_str().unwrap().to_owned()).collect()
}

/// A 404 saying exactly `message`: what an id never used gets.
fn assert_not_found(answer: &Response, message: &str) {
    assert_eq!(answer.status, 404, "{}", answer.body);
    assert_eq!(answer.json()["error"], json!({"kind": "not_found", "message": message}), "{}", answer.body);
}

#[test]
fn tenants_see_and_act_only_on_what_they_created_and_admins_on_everything() {
    let cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let addr = addr.trim().to_owned();
    let keys = cluster.dir.join("keys");
    cluster.add_principal("tenanta", &keys, &["--target", "a-*", "--function", "deploy.apply"]);
    cluster.add_principal("tenantb", &keys, &["--target", "b-*", "--function", "deploy.apply"]);
    cluster.add_principal("ops", &keys, &["--admin"]);
    let token = |name: &str| {
        let run = cluster.cli(&["principal", "token", name]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.stdout.trim().to_owned()
    };
    let (a, b, ops) = (token("tenanta"), token("tenantb"), token("ops"));
    let get = |path: &str, token: &str| http::request("GET", &addr, path, Some(token), None);
    let post = |path: &str, token: &str, body: &Value| {
        http::request("POST", &addr, path, Some(token), Some(&body.to_string()))
    };

    // tenanta's config carries a secret in an input's default and in its script.
    let config = json!({
        "name": "db", "group": "script", "config": format!("#!/bin/sh\necho {SECRET} $db_password\n"),
        "inputs": [{"name": "db_password", "type": "String", "default": SECRET}],
    });
    let created = post("/v1/software_configs", &a, &config);
    assert_eq!(created.status, 200, "{}", created.body);
    let id = created.json()["software_config"]["id"].as_str().unwrap().to_owned();
    let theirs = post("/v1/software_configs", &b, &json!({"name": "web", "config": "echo b"}));
    assert_eq!(theirs.status, 200, "{}", theirs.body);
    let theirs = theirs.json()["software_config"]["id"].as_str().unwrap().to_owned();

    // tenantb lists only its own, and can neither read, delete nor deploy tenanta's.
    let listed = get("/v1/software_configs", &b);
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(ids(&listed.json(), "software_configs"), std::slice::from_ref(&theirs), "listing filters");
    assert!(!listed.body.contains(SECRET));
    let path = format!("/v1/software_configs/{id}");
    let missing = format!("no software config {id}");
    assert_not_found(&get(&path, &b), &missing);
    assert_not_found(&http::request("DELETE", &addr, &path, Some(&b), None), &missing);
    let never = "00000000-0000-0000-0000-000000000000";
    let unknown = get(&format!("/v1/software_configs/{never}"), &b);
    assert_not_found(&unknown, &format!("no software config {never}"));
    let onto_own_server = post("/v1/software_deployments", &b, &json!({"config_id": id, "server_id": "b-1"}));
    assert_not_found(&onto_own_server, &missing);
    let group = post("/v1/software_deployment_groups", &b, &json!({"config_id": id, "servers": ["b-1", "b-2"]}));
    assert_not_found(&group, &missing);
    let shown = cli_as(&cluster, &keys, "tenantb", &["config", "show", &id]);
    assert_eq!(shown.code, 1, "{}", shown.stdout);
    assert!(shown.stderr.contains(&missing) && !shown.stdout.contains(SECRET), "{}", shown.stderr);
    let listed = cli_as(&cluster, &keys, "tenantb", &["config", "list", "--out", "json"]);
    assert!(!listed.stdout.contains(&id), "{}", listed.stdout);

    // Its creator still has it, secret and all; root and administrators see everything.
    let shown = get(&path, &a);
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_eq!(shown.json()["software_config"]["inputs"][0]["default"], json!(SECRET));
    let all = ids(&get("/v1/software_configs", &ops).json(), "software_configs");
    assert!(all.contains(&id) && all.contains(&theirs), "{all:?}");
    let all = cluster.cli(&["config", "list", "--out", "json"]).stdout;
    assert!(all.contains(&id) && all.contains(&theirs), "{all}");

    // tenanta's deployment is its own too.
    let deployed = post("/v1/software_deployments", &a, &json!({"config_id": id, "server_id": "a-1"}));
    assert_eq!(deployed.status, 200, "{}", deployed.body);
    let deployment = deployed.json()["software_deployment"]["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/software_deployments/{deployment}");
    assert_not_found(&get(&path, &b), &format!("no deployment {deployment}"));
    assert_not_found(&http::request("DELETE", &addr, &path, Some(&b), None), &format!("no deployment {deployment}"));
    assert!(ids(&get("/v1/software_deployments", &b).json(), "software_deployments").is_empty());
    assert_eq!(
        ids(&get("/v1/software_deployments", &a).json(), "software_deployments"),
        std::slice::from_ref(&deployment)
    );
    assert_eq!(
        ids(&get("/v1/software_deployments", &ops).json(), "software_deployments"),
        std::slice::from_ref(&deployment)
    );
    assert_eq!(get(&path, &a).status, 200);

    // Enrollment tokens: each tenant makes them for its own servers, and sees only its own.
    let made = post("/v1/enrollment_tokens", &a, &json!({"minion": "a-7", "master_addresses": ["192.0.2.1:4506"]}));
    assert_eq!(made.status, 200, "{}", made.body);
    let refused = post("/v1/enrollment_tokens", &b, &json!({"minion": "a-8", "master_addresses": ["192.0.2.1:4506"]}));
    assert_eq!(refused.status, 403, "not tenantb's server: {}", refused.body);
    let made = cli_as(
        &cluster,
        &keys,
        "tenantb",
        &["key", "token", "create", "--minion", "b-7", "--master-address", "192.0.2.1:4506"],
    );
    assert_eq!(made.code, 0, "{}", made.stderr);
    let tokens = |name: &str| -> Vec<(String, String)> {
        let run = cli_as(&cluster, &keys, name, &["key", "token", "list", "--out", "json"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let listed: Value = serde_json::from_str(&run.stdout).unwrap();
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["id"].as_str().unwrap().to_owned(), t["minion"].as_str().unwrap().to_owned()))
            .collect()
    };
    let of_a = tokens("tenanta");
    assert_eq!(of_a.iter().map(|(_, m)| m.as_str()).collect::<Vec<_>>(), ["a-7"]);
    assert_eq!(tokens("tenantb").iter().map(|(_, m)| m.as_str()).collect::<Vec<_>>(), ["b-7"]);
    assert_eq!(tokens("ops").len(), 2, "an administrator sees every token");
    let a_token = of_a[0].0.clone();
    let revoke = cli_as(&cluster, &keys, "tenantb", &["key", "token", "revoke", &a_token]);
    assert_eq!(revoke.code, 1, "{}", revoke.stdout);
    assert!(revoke.stderr.contains(&format!("no enrollment token {a_token}")), "{}", revoke.stderr);
    assert_eq!(tokens("tenanta").len(), 1, "not revoked");
    assert_eq!(cli_as(&cluster, &keys, "tenanta", &["key", "token", "revoke", &a_token]).code, 0);
    assert!(tokens("tenanta").is_empty());
    let all = cluster.cli(&["key", "token", "list", "--out", "json"]).stdout;
    assert!(all.contains("b-7") && !all.contains("a-7"), "{all}");

    // Gateway tokens stay an administrator's to make: a tenant cannot mint one for itself.
    let minted = cli_as(&cluster, &keys, "tenanta", &["principal", "token", "tenanta"]);
    assert_eq!(minted.code, 1, "{}", minted.stdout);
    let listed = cli_as(&cluster, &keys, "ops", &["principal", "tokens", "--out", "json"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert_eq!(serde_json::from_str::<Value>(&listed.stdout).unwrap().as_array().unwrap().len(), 3);

    // Deleting is the creator's (or an administrator's) alone, and then it is gone for all.
    let path = format!("/v1/software_configs/{id}");
    assert_eq!(http::request("DELETE", &addr, &path, Some(&a), None).status, 204);
    assert_not_found(&get(&path, &ops), &missing);
    let theirs_path = format!("/v1/software_configs/{theirs}");
    assert_eq!(http::request("DELETE", &addr, &theirs_path, Some(&ops), None).status, 204);
}
