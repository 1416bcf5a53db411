//! Deployment benchmark on real processes: time from `deployment create` to the engine
//! receiving COMPLETE, for a trivial script, on 1 minion and on 100 minions at once.
//!
//! `cargo build --release --bins && HALITE_BIN_DIR=target/release ./target/release/bench-deploy`

// A benchmark binary: any failure is a broken run, reported by the panic message.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashSet;
use std::time::{Duration, Instant};

use halite_client::{Client, ClientConfig};
use halite_protocol::message::{NewDeployment, NewSoftwareConfig};
use halite_tests::bench::percentile;
use halite_tests::Cluster;
use serde_json::json;

const MINIONS: usize = 100;

fn spec(config_id: &str, server: &str) -> NewDeployment {
    serde_json::from_value(json!({ "config_id": config_id, "server_id": server })).unwrap()
}

/// Creates one deployment per server and returns the time until every one is COMPLETE.
async fn deploy_all(
    client: &Client,
    events: &mut halite_client::EventStream,
    config_id: &str,
    servers: &[String],
) -> Duration {
    let started = Instant::now();
    let mut pending = HashSet::new();
    for server in servers {
        pending.insert(client.create_deployment(spec(config_id, server)).await.unwrap().id);
    }
    while !pending.is_empty() {
        let event = tokio::time::timeout(Duration::from_secs(60), events.next_event()).await.unwrap().unwrap();
        if let Some(id) = event.tag.strip_prefix("halite/deployment/").and_then(|t| t.strip_suffix("/COMPLETE")) {
            pending.remove(id);
        } else {
            assert!(!event.tag.ends_with("/FAILED"), "a deployment failed: {}", event.data);
        }
    }
    started.elapsed()
}

fn main() {
    if std::env::var_os("HALITE_BIN_DIR").is_none() {
        std::env::set_var("HALITE_BIN_DIR", concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release"));
    }
    let mut cluster = Cluster::start("");
    let ids: Vec<String> = (0..MINIONS).map(|i| format!("vm{i:03}")).collect();
    for id in &ids {
        let section = cluster.deploy_section(id);
        cluster.prepare_minion_with(id, true, "", &section);
        cluster.start_minion(id);
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    cluster.wait_connected(&refs);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    runtime.block_on(async {
        let config = ClientConfig::from_master_config(&cluster.config).expect("client config");
        let client = Client::connect(config.clone()).await.expect("client");
        let subscriber = Client::connect(config).await.expect("subscriber");
        let mut events = subscriber.subscribe(vec!["halite/deployment/*".into()]).await.expect("subscribe");
        let script: NewSoftwareConfig = serde_json::from_value(json!({
            "name": "trivial", "group": "script", "config": "#!/bin/sh\necho ok > \"$heat_outputs_path.result\"\n",
            "outputs": [{"name": "result"}],
        }))
        .unwrap();
        let config_id = client.create_config(script).await.unwrap().id;

        let one = &ids[..1];
        deploy_all(&client, &mut events, &config_id, one).await; // warm-up
        let mut single: Vec<f64> = Vec::new();
        for _ in 0..30 {
            single.push(deploy_all(&client, &mut events, &config_id, one).await.as_secs_f64() * 1000.0);
        }
        let mut fleet: Vec<f64> = Vec::new();
        for _ in 0..5 {
            fleet.push(deploy_all(&client, &mut events, &config_id, &ids).await.as_secs_f64() * 1000.0);
        }
        let (s50, s99) = (percentile(&mut single.clone(), 0.5), percentile(&mut single, 0.99));
        let (f50, fmax) = (percentile(&mut fleet.clone(), 0.5), percentile(&mut fleet, 1.0));
        println!("deployment create -> COMPLETE event, trivial script, 1 minion: median {s50:.1} ms, p99 {s99:.1} ms (30 runs)");
        println!("deployment create x{MINIONS} -> all COMPLETE, {MINIONS} minion processes: median {f50:.0} ms, worst {fmax:.0} ms (5 runs)");
        let out = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bench-deploy.json");
        let doc = json!({ "one_ms_median": s50, "one_ms_p99": s99, "fleet_ms_median": f50, "fleet_ms_worst": fmax });
        let _ = std::fs::write(out, doc.to_string());
    });
}
