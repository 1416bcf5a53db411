//! Event bus benchmark on real processes: events per second from 100 minion processes to one
//! subscriber, and latency from publishing an `event.send` job to the subscriber receiving the
//! event.
//!
//! `cargo build --release --bins && HALITE_BIN_DIR=target/release ./target/release/bench-events`

// A benchmark binary: any failure is a broken run, reported by the panic message.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use halite_client::{Client, ClientConfig, PublishSpec};
use halite_protocol::message::{Target, TargetKind};
use halite_tests::bench::percentile;
use halite_tests::Cluster;
use serde_json::json;

const MINIONS: usize = 100;
const EVENTS_PER_MINION: usize = 50;

fn main() {
    if std::env::var_os("HALITE_BIN_DIR").is_none() {
        std::env::set_var("HALITE_BIN_DIR", concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release"));
    }
    let mut cluster = Cluster::start(
        "[[events]]\nminions = [\"m*\"]\nallow = [\"bench/*\"]\nrate_per_sec = 1000000.0\nburst = 1000000.0\n",
    );
    let ids: Vec<String> = (0..MINIONS).map(|i| format!("m{i:03}")).collect();
    for id in &ids {
        cluster.enroll_minion(id, "");
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    cluster.wait_connected(&refs);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    runtime.block_on(async {
        let config = ClientConfig::from_master_config(&cluster.config).expect("client config");
        let client = Client::connect(config.clone()).await.expect("subscriber");
        let mut subscriber = client.subscribe(vec!["minion/*".into()]).await.expect("subscribe");
        let publisher = Client::connect(config).await.expect("publisher");

        // Throughput: every minion sends EVENTS_PER_MINION events in one plan.
        let steps: Vec<serde_json::Value> = (0..EVENTS_PER_MINION)
            .map(|i| json!({ "id": format!("e{i}"), "function": "event.send", "args": ["bench/flood", i] }))
            .collect();
        let mut rates = Vec::new();
        let mut dropped_total = 0u64;
        for _ in 0..5 {
            let mut spec = PublishSpec::new(Target { kind: TargetKind::Glob, expr: "m*".into() }, "plan.run");
            spec.kwargs.insert("steps".into(), json!(steps));
            let started = Instant::now();
            publisher.publish(spec).await.expect("publish");
            let total = (MINIONS * EVENTS_PER_MINION) as u64;
            // Every event is either delivered or counted in a halite/bus/dropped notice.
            let (mut received, mut dropped, mut last) = (0u64, 0u64, started);
            while received + dropped < total {
                match tokio::time::timeout(Duration::from_secs(5), subscriber.next_event()).await {
                    Ok(Ok(event)) if event.tag == "halite/bus/dropped" => dropped += event.data["dropped"].as_u64().unwrap_or(0),
                    Ok(Ok(_)) => {
                        received += 1;
                        last = Instant::now();
                    }
                    _ => break,
                }
            }
            dropped_total += dropped;
            rates.push(received as f64 / last.duration_since(started).as_secs_f64());
        }

        // Latency: one event.send job at a time to one minion.
        let mut latencies = Vec::new();
        for i in 0..100 {
            let mut spec = PublishSpec::new(Target { kind: TargetKind::List, expr: "m000".into() }, "event.send");
            spec.args = vec![json!("bench/ping"), json!(i)];
            let started = Instant::now();
            publisher.publish(spec).await.expect("publish");
            loop {
                let event = subscriber.next_event().await.expect("event");
                if event.data["data"] == json!(i) {
                    break;
                }
            }
            latencies.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        let (r50, r99) = (percentile(&mut rates.clone(), 0.5), percentile(&mut rates, 0.01));
        let (l50, l99) = (percentile(&mut latencies.clone(), 0.5), percentile(&mut latencies, 0.99));
        println!("events/s, {MINIONS} minion processes x {EVENTS_PER_MINION} events to one subscriber: median {r50:.0}, worst {r99:.0} (dropped for a slow subscriber over 5 runs: {dropped_total})");
        println!("publish event.send job -> subscriber receives the event: median {l50:.2} ms, p99 {l99:.2} ms");
        let out = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bench-events.json");
        let doc = json!({ "events_per_sec_median": r50, "events_per_sec_worst": r99, "dropped": dropped_total,
                          "latency_ms_median": l50, "latency_ms_p99": l99 });
        let _ = std::fs::write(out, doc.to_string());
    });
}
