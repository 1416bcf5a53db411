//! Heat-style software deployments end to end: an engine (through the SDK, and through the
//! HTTP gateway) creates a config and a deployment for a server that has not booted yet; the
//! server's minion enrolls with a token, receives the deployment, applies it, and the engine
//! sees COMPLETE (or FAILED, worded as Heat words it) through the event stream, while the
//! signal is relayed to the engine's own URL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_client::{Client, ClientConfig};
use halite_protocol::message::{
    ConfigInput, ConfigOutput, DeploymentUpdate, NewDeployment, NewSoftwareConfig, SoftwareDeployment,
};
use halite_tests::http::{self, EventStream, Recorder};
use halite_tests::{wait_for, Cluster};
use serde_json::{json, Value};
use tokio::time::timeout;

const SCRIPT: &str = "#!/bin/sh\necho \"deploying $greeting to $deploy_server_id\"\n\
printf '%s' \"$greeting, $name\" > \"$heat_outputs_path.result\"\n\
[ \"$fail\" = yes ] && { printf 'disk full' > \"$heat_outputs_path.problem\"; exit 3; }\nexit 0\n";

fn greet_config() -> NewSoftwareConfig {
    let input = |name: &str, default: Option<Value>| ConfigInput {
        name: name.into(),
        kind: "String".into(),
        default,
        description: None,
        replace_on_change: false,
    };
    let output = |name: &str, error_output| ConfigOutput {
        name: name.into(),
        kind: "String".into(),
        description: None,
        error_output,
    };
    NewSoftwareConfig {
        name: "greet".into(),
        group: "script".into(),
        config: json!(SCRIPT),
        inputs: vec![input("greeting", Some(json!("hello"))), input("fail", Some(json!("no")))],
        outputs: vec![output("result", false), output("problem", true)],
        options: None,
    }
}

fn deployment(config_id: &str, server: &str, values: Value, signal: Option<&str>) -> NewDeployment {
    serde_json::from_value(json!({
        "config_id": config_id, "server_id": server, "input_values": values, "signal_id": signal,
        "stack_id": "stack/1", "resource_name": "greet_deployment",
    }))
    .unwrap()
}

/// Boots a server: its minion enrolls with a one-time token.
fn boot(cluster: &mut Cluster, id: &str) {
    let section = cluster.deploy_section(id);
    cluster.prepare_minion_with(id, true, "", &section);
    cluster.start_minion(id);
}

async fn until_final(client: &Client, id: &str) -> SoftwareDeployment {
    timeout(Duration::from_secs(60), client.wait_for_deployment(id, None)).await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_deploys_to_a_server_before_it_boots_and_gets_outputs_and_failures_through_the_sdk() {
    // The stand-in for Heat listens on loopback, which the relay reaches only when listed.
    let mut cluster = Cluster::start("[deploy]\nsignal_hosts = [\"127.0.0.1\"]\n");
    let heat = Recorder::start(vec![503, 200]);
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();

    let config = client.create_config(greet_config()).await.unwrap();
    assert_eq!(client.show_config(&config.id).await.unwrap(), config);
    let signal_url = format!("{}/signal/greet", heat.url);
    let created = client
        .create_deployment(deployment(&config.id, "vm-1", json!({"name": "world", "extra": 7}), Some(&signal_url)))
        .await
        .unwrap();
    assert_eq!((created.status.as_str(), created.status_reason.as_str()), ("IN_PROGRESS", "Deploy data available"));

    // The per-server metadata already lists the derived config, with Heat's inputs.
    let items = client.server_configs("vm-1").await.unwrap();
    assert_eq!(items.len(), 1);
    let names: Vec<&str> = items[0]["inputs"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "greeting",
            "fail",
            "name",
            "extra",
            "deploy_server_id",
            "deploy_action",
            "deploy_stack_id",
            "deploy_resource_name",
            "deploy_signal_transport",
            "deploy_signal_id",
            "deploy_signal_verb"
        ]
    );

    // Now the server boots and enrolls; the deployment is pushed on connect.
    boot(&mut cluster, "vm-1");
    let done = until_final(&client, &created.id).await;
    assert_eq!(done.status, "COMPLETE", "{done:?}");
    assert_eq!(done.status_reason, "Outputs received");
    assert_eq!(done.output_values["result"], json!("hello, world"));
    assert_eq!(done.output_values["deploy_stdout"], json!("deploying hello to vm-1\n"));
    assert_eq!(done.output_values["deploy_status_code"], json!(0));
    assert!(!done.output_values.contains_key("problem"));

    // The signal went to the engine's URL too: retried after a 503, as JSON, by POST.
    let received = wait_for("the relayed signal", Duration::from_secs(20), || {
        let got = heat.received();
        (got.len() >= 2).then_some(got)
    });
    let last = received.last().unwrap();
    assert_eq!(
        (last.method.as_str(), last.path.as_str(), last.content_type.as_str()),
        ("POST", "/signal/greet", "application/json")
    );
    let body: Value = serde_json::from_slice(&last.body).unwrap();
    assert_eq!(body["result"], json!("hello, world"));
    assert_eq!(body["deploy_status_code"], json!(0));

    // A failing run: FAILED with Heat's reason text, error_output and status code both named.
    let failing = client.create_deployment(deployment(&config.id, "vm-1", json!({"fail": "yes"}), None)).await.unwrap();
    let failed = until_final(&client, &failing.id).await;
    assert_eq!(failed.status, "FAILED");
    assert_eq!(
        failed.status_reason,
        "deploy_status_code : Deployment exited with non-zero status code: 3, problem : disk full"
    );

    // Updating re-derives (new id) and runs again: the script runs a second time.
    let updated = client
        .update_deployment(
            &failing.id,
            DeploymentUpdate {
                input_values: Some(serde_json::from_value(json!({"name": "again"})).unwrap()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_ne!(updated.derived_config_id, failed.derived_config_id);
    let again = until_final(&client, &failing.id).await;
    assert_eq!((again.status.as_str(), again.action.as_str()), ("COMPLETE", "UPDATE"));
    assert_eq!(again.output_values["result"], json!("hello, again"));

    // A group with no hook on the server fails at once, with the reason.
    let mut unknown = greet_config();
    unknown.group = "puppet".into();
    let unknown = client.create_config(unknown).await.unwrap();
    let started = std::time::Instant::now();
    let d = client.create_deployment(deployment(&unknown.id, "vm-1", json!({}), None)).await.unwrap();
    let failed = until_final(&client, &d.id).await;
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(failed.status, "FAILED");
    assert!(failed.status_reason.contains("no hook for group \"puppet\""), "{}", failed.status_reason);

    // Listing and deleting.
    assert_eq!(client.list_deployments(Some("vm-1")).await.unwrap().len(), 3);
    client.delete_deployment(&d.id).await.unwrap();
    assert_eq!(client.list_deployments(Some("vm-1")).await.unwrap().len(), 2);
    assert!(client.show_deployment(&d.id).await.is_err());
}

#[test]
fn an_engine_does_the_same_over_the_http_gateway_with_a_narrow_token() {
    let mut cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let addr = addr.trim().to_owned();

    // A principal for the engine: it may deploy to vm-* and watch deployment events, no more.
    let keys = cluster.dir.join("keys");
    let run = cluster.cli(&[
        "principal",
        "add",
        "heat",
        "--generate",
        keys.to_str().unwrap(),
        "--target",
        "vm-*",
        "--function",
        "deploy.apply",
        "--event",
        "halite/deployment/*",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = cluster.cli(&["principal", "token", "heat"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let token = run.stdout.trim().to_owned();

    // The OpenAPI document is public and names every route; every route answers (not 404/405).
    let doc = http::request("GET", &addr, "/v1/openapi.json", None, None).json();
    assert_eq!(doc["openapi"], json!("3.1.0"));
    let paths = doc["paths"].as_object().unwrap();
    assert_eq!(paths.len(), 28);
    for (path, methods) in paths {
        for method in methods.as_object().unwrap().keys() {
            let concrete = path
                .replace("{id}", "none")
                .replace("{jid}", "none")
                .replace("{server_id}", "vm-9")
                .replace("{name}", "none");
            if concrete == "/v1/events" {
                continue;
            }
            let body = matches!(method.as_str(), "post" | "put").then_some("{}");
            let answer = http::request(&method.to_uppercase(), &addr, &concrete, Some(&token), body);
            assert!(
                ![404, 405].contains(&answer.status) || answer.json()["error"]["kind"].is_string(),
                "{method} {concrete}: route missing ({})",
                answer.status
            );
        }
    }

    // Authentication and authorisation: the token is checked before the body is read, and every
    // error is the documented JSON body.
    let anonymous = http::request("GET", &addr, "/v1/software_configs", None, None);
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.json()["error"]["kind"], "unauthorized", "{}", anonymous.body);
    assert_eq!(anonymous.header("www-authenticate"), Some("Bearer realm=\"halite\""));
    let garbage = http::request("POST", &addr, "/v1/software_deployments", None, Some("{not json"));
    assert_eq!(garbage.status, 401, "no token: 401, whatever the body: {}", garbage.body);
    let bad = http::request("POST", &addr, "/v1/software_deployments", Some(&token), Some("{not json"));
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.json()["error"]["kind"], "bad_request", "{}", bad.body);
    let nowhere = http::request("GET", &addr, "/v1/nowhere", Some(&token), None);
    assert_eq!(
        (nowhere.status, nowhere.json()["error"]["kind"].as_str()),
        (404, Some("not_found")),
        "{}",
        nowhere.body
    );
    let wrong_method = http::request("PATCH", &addr, "/v1/jobs", Some(&token), None);
    assert_eq!(wrong_method.status, 405);
    assert_eq!(wrong_method.json()["error"]["kind"], "method_not_allowed", "{}", wrong_method.body);
    assert_eq!(http::request("GET", &addr, "/v1/software_configs", Some("wrong"), None).status, 401);
    let body = serde_json::to_string(&greet_config()).unwrap();
    let created = http::request("POST", &addr, "/v1/software_configs", Some(&token), Some(&body));
    assert_eq!(created.status, 200, "{}", created.body);
    let config_id = created.json()["software_config"]["id"].as_str().unwrap().to_owned();
    let outside = json!({"config_id": config_id, "server_id": "db-1"}).to_string();
    let refused = http::request("POST", &addr, "/v1/software_deployments", Some(&token), Some(&outside));
    assert_eq!(refused.status, 403, "{}", refused.body);
    let typo = json!({"config_id": config_id, "server_id": "vm-2", "input_valuez": {}}).to_string();
    let typo = http::request("POST", &addr, "/v1/software_deployments", Some(&token), Some(&typo));
    assert_eq!(typo.status, 422);
    assert!(typo.json()["error"]["message"].as_str().unwrap_or_default().contains("input_valuez"), "{}", typo.body);

    // Deploy to vm-2 before it exists; watch its events; boot it; see COMPLETE arrive.
    let spec = json!({"config_id": config_id, "server_id": "vm-2", "input_values": {"name": "http"}}).to_string();
    let created = http::request("POST", &addr, "/v1/software_deployments", Some(&token), Some(&spec));
    assert_eq!(created.status, 200, "{}", created.body);
    let id = created.json()["software_deployment"]["id"].as_str().unwrap().to_owned();
    let mut events = EventStream::open(&addr, &format!("/v1/events?tag=halite/deployment/{id}/*"), &token);
    assert_eq!(events.status, 200);
    boot(&mut cluster, "vm-2");
    let event = events.next_data();
    assert_eq!(event["tag"], json!(format!("halite/deployment/{id}/COMPLETE")), "{event}");
    assert_eq!(event["data"]["output_values"]["result"], json!("hello, http"));

    let shown = http::request("GET", &addr, &format!("/v1/software_deployments/{id}"), Some(&token), None).json();
    assert_eq!(shown["software_deployment"]["status"], json!("COMPLETE"));
    let listed = http::request("GET", &addr, "/v1/software_deployments?server_id=vm-2", Some(&token), None).json();
    assert_eq!(listed["software_deployments"].as_array().unwrap().len(), 1);
    let metadata = http::request("GET", &addr, "/v1/software_deployments/metadata/vm-2", Some(&token), None).json();
    assert_eq!(metadata["metadata"][0]["group"], json!("script"));
    // Jobs are within the same ACL: the deploy.apply job is visible, a test.ping to db-* is not allowed.
    let job = json!({"target": "vm-2", "function": "test.ping"}).to_string();
    assert_eq!(http::request("POST", &addr, "/v1/jobs", Some(&token), Some(&job)).status, 403);
    let deleted = http::request("DELETE", &addr, &format!("/v1/software_deployments/{id}"), Some(&token), None);
    assert_eq!(deleted.status, 204);

    // A deployment group, one server at a time: the second waits its turn (vm-5 has not booted).
    let group = json!({"config_id": config_id, "servers": ["vm-6", "vm-5"], "rollout": {"batch": {"count": 1}}});
    let created =
        http::request("POST", &addr, "/v1/software_deployment_groups", Some(&token), Some(&group.to_string()));
    assert_eq!(created.status, 200, "{}", created.body);
    let group_id = created.json()["software_deployment_group"]["id"].as_str().unwrap().to_owned();
    let shown = http::request("GET", &addr, &format!("/v1/software_deployment_groups/{group_id}"), Some(&token), None);
    let members = shown.json()["software_deployment_group"]["members"].clone();
    assert_eq!(members[0]["server_id"], "vm-5", "in id order: {members}");
    assert_eq!((members[0]["status"].as_str(), members[1]["status"].as_str()), (Some("IN_PROGRESS"), Some("QUEUED")));
    let outside = json!({"config_id": config_id, "servers": ["vm-7", "db-1"]}).to_string();
    let refused = http::request("POST", &addr, "/v1/software_deployment_groups", Some(&token), Some(&outside));
    assert_eq!(refused.status, 403, "every server must be within the principal's ACL: {}", refused.body);
    // Changed in place: the same group gains a server.
    let path = format!("/v1/software_deployment_groups/{group_id}");
    let grown = json!({"servers": ["vm-5", "vm-6", "vm-8"]}).to_string();
    let updated = http::request("PUT", &addr, &path, Some(&token), Some(&grown));
    assert_eq!(updated.status, 200, "{}", updated.body);
    let group = updated.json()["software_deployment_group"].clone();
    assert_eq!(group["id"], json!(group_id), "the same group");
    let servers: Vec<&str> =
        group["members"].as_array().unwrap().iter().map(|m| m["server_id"].as_str().unwrap()).collect();
    assert_eq!(servers, ["vm-5", "vm-6", "vm-8"]);
    let outside = json!({"servers": ["vm-5", "db-1"]}).to_string();
    assert_eq!(http::request("PUT", &addr, &path, Some(&token), Some(&outside)).status, 403);
    let typo = json!({"server": ["vm-5"]}).to_string();
    let bad = http::request("PUT", &addr, &path, Some(&token), Some(&typo));
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert!(bad.body.contains("unknown field `server`"), "the field is named: {}", bad.body);
}

#[test]
fn the_cli_creates_deploys_and_waits() {
    let mut cluster = Cluster::start("");
    boot(&mut cluster, "vm-3");
    cluster.wait_connected(&["vm-3"]);
    let script = cluster.dir.join("greet.sh");
    std::fs::write(&script, SCRIPT).unwrap();
    let run = cluster.cli(&[
        "config",
        "create",
        "greet",
        "--file",
        script.to_str().unwrap(),
        "--input",
        "greeting=hi",
        "--input",
        "fail=no",
        "--output",
        "result",
        "--error-output",
        "problem",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let config_id = run.stdout.trim().to_owned();
    let run =
        cluster.cli(&["--out", "json", "deployment", "create", &config_id, "vm-3", "--input", "name=cli", "--wait"]);
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    assert_eq!(run.json()["output_values"]["result"], json!("hi, cli"));
    let run = cluster.cli(&["--out", "json", "deployment", "create", &config_id, "vm-3", "--input", "fail=yes"]);
    let id = run.json()["id"].as_str().unwrap().to_owned();
    let run = cluster.cli(&["deployment", "wait", &id, "--timeout", "60s"]);
    assert_eq!(run.code, 3, "FAILED exits 3: {}", run.stdout);
    assert!(run.stdout.contains("FAILED") && run.stdout.contains("disk full"), "{}", run.stdout);
    let run = cluster.cli(&["deployment", "list", "--server", "vm-3"]);
    assert_eq!(run.stdout.lines().count(), 3, "{}", run.stdout);
    // A group of one server, a window of one, failing: exit 3, the group FAILED.
    let run = cluster.cli(&["deployment", "group", &config_id, "vm-3", "--input", "fail=yes", "-b", "1", "--wait"]);
    assert_eq!(run.code, 3, "{} {}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("1 of 1 deployments did not complete") && run.stdout.contains("vm-3"),
        "{}",
        run.stdout
    );
    let group_id = run.stdout.split_whitespace().next().unwrap().to_owned();
    let run = cluster.cli(&["--out", "json", "deployment", "group-show", &group_id]);
    assert_eq!(run.json()["members"][0]["status"], "FAILED", "{}", run.stdout);
    assert_eq!(run.json()["rollout"]["spec"]["batch"], json!({"count": 1}), "{}", run.stdout);
    let run = cluster.cli(&["deployment", "list", "--server", "vm-3"]);
    assert_eq!(run.stdout.lines().count(), 4, "{}", run.stdout);
    let run = cluster.cli(&["config", "list"]);
    assert!(run.stdout.contains("greet"), "{}", run.stdout);
    assert_eq!(cluster.cli(&["config", "delete", &config_id]).code, 0);
    assert_eq!(cluster.cli(&["config", "show", &config_id]).code, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_created_before_a_master_restart_still_completes() {
    let mut cluster = Cluster::start("");
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    let config = client.create_config(greet_config()).await.unwrap();
    let created =
        client.create_deployment(deployment(&config.id, "vm-4", json!({"name": "later"}), None)).await.unwrap();
    drop(client);
    cluster.kill_master();
    cluster.start_master();
    boot(&mut cluster, "vm-4");
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    let done = until_final(&client, &created.id).await;
    assert_eq!((done.status.as_str(), done.output_values["result"].clone()), ("COMPLETE", json!("hello, later")));
}

#[test]
fn the_gateway_serves_https_with_the_configured_certificate() {
    let dir = std::env::temp_dir().join(format!("halite-gateway-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let cluster = Cluster::start(&format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\ntls_cert = {:?}\ntls_key = {:?}\n",
        cert.display().to_string(),
        key.display().to_string()
    ));
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let url = format!("https://{}/v1/openapi.json", addr.trim());
    let curl = |extra: &[&str]| {
        std::process::Command::new("curl").args(["-sS", "--max-time", "10"]).args(extra).arg(&url).output().unwrap()
    };
    let ok = curl(&["--cacert", cert.to_str().unwrap()]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let doc: Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(doc["openapi"], json!("3.1.0"));
    // Without trusting the certificate, the client refuses: it really is TLS with that certificate.
    assert!(!curl(&[]).status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Heat's SoftwareDeploymentGroup: one config to four servers, one at a time, at most one
/// failure. vm-g2 fails, vm-g3 then fails too: the rollout stops, vm-g4 is never deployed, and
/// the engine waits for the group without polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_group_rolls_out_and_stops_past_its_error_budget() {
    let mut cluster = Cluster::start("");
    let servers = ["vm-g1", "vm-g2", "vm-g3", "vm-g4"];
    for id in servers {
        boot(&mut cluster, id);
    }
    cluster.wait_connected(&servers);
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    let mut failing = greet_config();
    // Fails on the servers whose name ends in 2 or 3.
    failing.config =
        json!(SCRIPT.replace("[ \"$fail\" = yes ]", "case \"$deploy_server_id\" in *2|*3) true;; *) false;; esac"));
    let config = client.create_config(failing).await.unwrap();
    let spec: halite_protocol::message::NewDeploymentGroup = serde_json::from_value(json!({
        "config_id": config.id, "servers": servers, "input_values": {"name": "group"},
        "rollout": {"batch": {"count": 1}, "max_errors": {"count": 1}},
    }))
    .unwrap();
    let created = client.create_deployment_group(spec).await.unwrap();
    let started: Vec<&str> = created.members.iter().map(|m| m.status.as_str()).collect();
    assert_eq!(started, ["IN_PROGRESS", "QUEUED", "QUEUED", "QUEUED"], "one at a time: {created:?}");

    let done =
        timeout(Duration::from_secs(90), client.wait_for_deployment_group(&created.id, None)).await.unwrap().unwrap();
    let statuses: Vec<&str> = done.members.iter().map(|m| m.status.as_str()).collect();
    assert_eq!(statuses, ["COMPLETE", "FAILED", "FAILED", "SKIPPED"], "{done:?}");
    assert_eq!(done.status, "FAILED");
    assert_eq!(
        done.status_reason,
        "3 of 4 deployments did not complete (rollout stopped: 2 of 4 targets failed, more than max_errors 1 allows (1))"
    );
    assert!(done.members[3].deployment_id.is_none(), "vm-g4 was never deployed");
    let first = client.show_deployment(done.members[0].deployment_id.as_deref().unwrap()).await.unwrap();
    assert_eq!(first.output_values["result"], json!("hello, group"));
    let second = client.show_deployment(done.members[1].deployment_id.as_deref().unwrap()).await.unwrap();
    assert_eq!(second.output_values["problem"], json!("disk full"), "{second:?}");

    // An event matching abort_on stops the rollout: the server not started yet is skipped.
    let mut slow = greet_config();
    slow.config = json!("#!/bin/sh\nsleep 2\n");
    slow.outputs.clear();
    let slow = client.create_config(slow).await.unwrap();
    let spec: halite_protocol::message::NewDeploymentGroup = serde_json::from_value(json!({
        "config_id": slow.id, "servers": ["vm-g1", "vm-g4"],
        "rollout": {"batch": {"count": 1}, "abort_on": ["halite/key/*/deleted"]},
    }))
    .unwrap();
    let aborted = client.create_deployment_group(spec).await.unwrap();
    let key = halite_protocol::identity::IdentityKey::from_seed(&[9; 32]);
    let preseed = halite_protocol::message::RequestBody::KeyPreseed {
        id: "alarm".into(),
        public_key: key.public().as_bytes().to_vec(),
    };
    client.request(preseed).await.unwrap();
    client.request(halite_protocol::message::RequestBody::KeyDelete { pattern: "alarm".into() }).await.unwrap();
    let done =
        timeout(Duration::from_secs(60), client.wait_for_deployment_group(&aborted.id, None)).await.unwrap().unwrap();
    let statuses: Vec<&str> = done.members.iter().map(|m| m.status.as_str()).collect();
    assert_eq!(statuses, ["COMPLETE", "SKIPPED"], "{done:?}");
    assert_eq!(
        done.rollout.reason.as_deref(),
        Some("an event matching abort_on halite/key/*/deleted: halite/key/alarm/deleted"),
        "{done:?}"
    );

    // Every server at once without a rollout; a server listed twice is refused.
    let spec: halite_protocol::message::NewDeploymentGroup =
        serde_json::from_value(json!({"config_id": config.id, "servers": ["vm-g1", "vm-g4"]})).unwrap();
    let all = client.create_deployment_group(spec).await.unwrap();
    assert!(all.members.iter().all(|m| m.status == "IN_PROGRESS"), "{all:?}");
    let done =
        timeout(Duration::from_secs(60), client.wait_for_deployment_group(&all.id, None)).await.unwrap().unwrap();
    assert_eq!((done.status.as_str(), done.status_reason.as_str()), ("COMPLETE", "all 2 deployments completed"));
    let twice: halite_protocol::message::NewDeploymentGroup =
        serde_json::from_value(json!({"config_id": config.id, "servers": ["vm-g1", "vm-g1"]})).unwrap();
    let refused = client.create_deployment_group(twice).await.unwrap_err().to_string();
    assert!(refused.contains("listed twice"), "{refused}");
}

/// A busy engine shares one client among many waits: more waits at once than a subscription
/// may hold patterns (64) all end, each with its own deployment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_waits_at_once_than_a_subscription_holds_patterns_all_end() {
    let mut cluster = Cluster::start("");
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    let config = client.create_config(greet_config()).await.unwrap();
    let mut ids = Vec::new();
    for n in 0..70 {
        let created =
            client.create_deployment(deployment(&config.id, "vm-busy", json!({"name": n}), None)).await.unwrap();
        ids.push(created.id);
    }
    let waits: Vec<_> = ids
        .iter()
        .map(|id| {
            let (client, id) = (client.clone(), id.clone());
            tokio::spawn(async move { until_final(&client, &id).await })
        })
        .collect();
    // The waits are in place before the server boots.
    tokio::time::sleep(Duration::from_secs(1)).await;
    boot(&mut cluster, "vm-busy");
    for (n, wait) in waits.into_iter().enumerate() {
        let done = wait.await.unwrap();
        assert_eq!(done.status, "COMPLETE", "{done:?}");
        assert_eq!(done.output_values["result"], json!(format!("hello, {n}")));
    }
}

/// A group whose write after starting its member fails (PostgreSQL refuses it, as a database
/// that dies under the commit would) is retried by the master: the member's deployment is found
/// and followed, its server runs the config once, and the group completes once the database
/// takes the write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_whose_write_after_starting_failed_runs_its_server_once() {
    let url = halite_tests::postgres::fresh_database();
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    boot(&mut cluster, "vm-r1");
    cluster.wait_connected(&["vm-r1"]);
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    let runs = cluster.dir.join("vm-r1-runs.log");
    let mut counted = greet_config();
    counted.config = json!(format!("#!/bin/sh\necho ran >> {}\n", runs.display()));
    counted.outputs.clear();
    let config = client.create_config(counted).await.unwrap();
    // Every group write that no longer records a start is refused: the one after the start.
    halite_tests::postgres::sql_on(
        &url,
        "CREATE FUNCTION refuse_after_start() RETURNS trigger AS $$ BEGIN \
           IF NEW.body NOT LIKE '%\"starting\"%' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; \
         END $$ LANGUAGE plpgsql; \
         CREATE TRIGGER refuse_after_start BEFORE UPDATE ON deployment_groups FOR EACH ROW EXECUTE FUNCTION refuse_after_start();",
    );
    let spec: halite_protocol::message::NewDeploymentGroup =
        serde_json::from_value(json!({"config_id": config.id, "servers": ["vm-r1"]})).unwrap();
    let refused = client.create_deployment_group(spec).await;
    assert!(refused.is_err(), "the write after the start failed: {refused:?}");
    // The master retries every second meanwhile; the server has run the config once.
    tokio::time::sleep(Duration::from_secs(4)).await;
    halite_tests::postgres::sql_on(&url, "DROP TRIGGER refuse_after_start ON deployment_groups");
    let groups: Value = serde_json::from_str(
        halite_tests::postgres::sql_on(&url, "SELECT body FROM deployment_groups").lines().next().unwrap(),
    )
    .unwrap();
    let id = groups["group"]["id"].as_str().unwrap().to_owned();
    let done = timeout(Duration::from_secs(60), client.wait_for_deployment_group(&id, None)).await.unwrap().unwrap();
    assert_eq!(done.status, "COMPLETE", "{done:?}");
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 1, "the server ran it once");
    let deployments = client.list_deployments(Some("vm-r1")).await.unwrap();
    assert_eq!(deployments.len(), 1, "one deployment: {deployments:?}");
}

/// Two masters on one database: master A, which drives a group, has read it and is writing its
/// next member's start when a client's update of the group lands through master B (A's write
/// is held back by the database meanwhile, as a slow disk or a lock would). A's write, made on
/// the older read, is refused: the update is not overwritten, A reads the group again and
/// leaves it to B, and every server runs the update's inputs, the member A was starting once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_update_through_another_master_is_not_overwritten_by_the_driving_master() {
    let url = halite_tests::postgres::fresh_database();
    let mut cluster = Cluster::start(&format!("[store]\nurl = {url:?}\n"));
    let b = cluster.start_peer_master();
    for id in ["vm-q1", "vm-q2"] {
        boot(&mut cluster, id);
    }
    cluster.wait_connected(&["vm-q1", "vm-q2"]);
    let at_a = ClientConfig::from_master_config(&cluster.config).unwrap();
    let at_b = ClientConfig { masters: vec![format!("127.0.0.1:{b}")], ..at_a.clone() };
    let (client_a, client_b) = (Client::connect(at_a).await.unwrap(), Client::connect(at_b).await.unwrap());
    let (runs, go) = (cluster.dir.join("group-runs"), cluster.dir.join("group-go"));
    std::fs::create_dir_all(&runs).unwrap();
    let mut counted = greet_config();
    counted.config = json!(format!(
        "#!/bin/sh\necho \"$deploy_action $greeting\" >> {runs}/$deploy_server_id\n\
         if [ \"$deploy_server_id\" = vm-q1 ]; then while [ ! -e {go} ]; do sleep 0.1; done; fi\n",
        runs = runs.display(),
        go = go.display(),
    ));
    counted.outputs.clear();
    let config = client_a.create_config(counted).await.unwrap();
    let spec: halite_protocol::message::NewDeploymentGroup = serde_json::from_value(json!({
        "config_id": config.id, "servers": ["vm-q1", "vm-q2"], "input_values": {"greeting": "old"},
        "rollout": {"batch": {"count": 1}},
    }))
    .unwrap();
    let group = client_a.create_deployment_group(spec).await.unwrap();
    let ran = |server: &str| std::fs::read_to_string(runs.join(server)).unwrap_or_default();
    wait_for("vm-q1 deploying", Duration::from_secs(30), || (ran("vm-q1") == "CREATE old\n").then_some(()));
    // The next group write (A's, recording vm-q2's start once vm-q1 is done) waits 4 s before
    // it touches a row; a sequence, outside every transaction, tells the test it is waiting.
    halite_tests::postgres::sql_on(
        &url,
        "CREATE SEQUENCE held_group_writes; \
         CREATE FUNCTION hold_group_write() RETURNS trigger AS $$ BEGIN \
           IF nextval('held_group_writes') = 1 THEN PERFORM pg_sleep(4); END IF; RETURN NULL; \
         END $$ LANGUAGE plpgsql; \
         CREATE TRIGGER hold_group_write BEFORE UPDATE ON deployment_groups \
           FOR EACH STATEMENT EXECUTE FUNCTION hold_group_write();",
    );
    std::fs::write(&go, "").unwrap();
    wait_for("A's group write held", Duration::from_secs(30), || {
        let held = halite_tests::postgres::sql_on(&url, "SELECT is_called FROM held_group_writes");
        (held.trim() == "t").then_some(())
    });
    let update: halite_protocol::message::DeploymentGroupUpdate =
        serde_json::from_value(json!({"input_values": {"greeting": "new"}})).unwrap();
    let updated = client_b.update_deployment_group(&group.id, update).await.unwrap();
    assert_eq!(updated.action, "UPDATE", "{updated:?}");
    let done =
        timeout(Duration::from_secs(90), client_b.wait_for_deployment_group(&group.id, None)).await.unwrap().unwrap();
    assert_eq!((done.status.as_str(), done.action.as_str()), ("COMPLETE", "UPDATE"), "{done:?}");
    assert_eq!(ran("vm-q1"), "CREATE old\nUPDATE new\n", "vm-q1 ran the update");
    assert_eq!(ran("vm-q2"), "CREATE new\n", "vm-q2 ran once, with the update's inputs");
    let stored = halite_tests::postgres::sql_on(&url, "SELECT body FROM deployment_groups");
    assert!(stored.contains(r#""greeting":"new""#), "the update is what is stored: {stored}");
}
