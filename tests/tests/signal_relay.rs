//! The deployment signal relay against a real master: it contacts only the hosts its operator
//! listed in `[deploy] signal_hosts` (checking the addresses a name resolves to), and tells an
//! engine only whether the signal was relayed or refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_client::{Client, ClientConfig};
use halite_protocol::message::{NewDeployment, NewSoftwareConfig};
use halite_tests::http::Recorder;
use halite_tests::Cluster;
use serde_json::json;
use tokio::time::timeout;

fn config() -> NewSoftwareConfig {
    serde_json::from_value(json!({"name": "noop", "group": "script", "config": "#!/bin/sh\ntrue\n"})).unwrap()
}

fn deployment(config_id: &str, server: &str, signal: &str) -> NewDeployment {
    serde_json::from_value(json!({"config_id": config_id, "server_id": server, "signal_id": signal})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_signal_hosts_a_deployment_with_a_signal_url_is_refused() {
    let cluster = Cluster::start("");
    let admin_api = Recorder::start(vec![200]);
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    let config = client.create_config(config()).await.unwrap();
    let refused = client.create_deployment(deployment(&config.id, "vm-1", &admin_api.url)).await.unwrap_err();
    assert!(refused.to_string().contains("[deploy] signal_hosts"), "{refused}");
    assert!(admin_api.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_name_that_resolves_to_loopback_is_refused_and_the_engine_hears_only_refused() {
    // The deployment's server never connects: after a second it fails, and the failure is relayed.
    let cluster = Cluster::start("deployment_ttl_secs = 1\n[deploy]\nsignal_hosts = [\"localhost\"]\n");
    let admin_api = Recorder::start(vec![200]);
    let port = admin_api.url.rsplit(':').next().unwrap();
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    let mut events = client.subscribe(vec!["halite/deployment/*/relayed".into()]).await.unwrap();
    let config = client.create_config(config()).await.unwrap();
    let url = format!("http://localhost:{port}/admin/users");
    let created = client.create_deployment(deployment(&config.id, "vm-never", &url)).await.unwrap();
    let relayed = timeout(Duration::from_secs(30), events.next_event()).await.unwrap().unwrap();
    assert_eq!(relayed.tag, format!("halite/deployment/{}/relayed", created.id));
    assert_eq!(relayed.data, json!({"ok": false, "outcome": "refused", "server_id": "vm-never", "owner": "root"}));
    assert!(admin_api.received().is_empty(), "nothing reached the loopback server");
}
