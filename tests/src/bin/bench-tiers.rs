//! halite's half of the side-by-side comparison with Salt (`scripts/bench-vs-salt.sh`): the
//! same measurements as `../shared/bench/salt/bench.py`, on 1, 10 and 30 real minion processes.
//!
//! `cargo build --release --bins && HALITE_BIN_DIR=target/release ./target/release/bench-tiers`
//! Prints a table and writes `target/bench-tiers.json`.

// A benchmark binary: any failure is a broken run, reported by the panic message.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use halite_client::{Client, ClientConfig, JobEvent, PublishSpec};
use halite_protocol::message::{Target, TargetKind};
use halite_tests::bench::{minion_pids, percentile, rss_kib, stop_and_wait_offline};
use halite_tests::Cluster;
use serde_json::{json, Value};

const TIERS: [usize; 3] = [1, 10, 30];
const REPS: usize = 7;

fn median(samples: &mut [f64]) -> f64 {
    percentile(samples, 0.5)
}

fn rss_mib(pid: u32) -> f64 {
    rss_kib(pid) as f64 / 1024.0
}

fn wall(mut f: impl FnMut()) -> f64 {
    let started = Instant::now();
    f();
    started.elapsed().as_secs_f64()
}

/// Sequential `test.ping` jobs to one minion through the SDK: jobs per second.
async fn sequential(client: &Client, jobs: usize) -> f64 {
    let started = Instant::now();
    for _ in 0..jobs {
        let spec = PublishSpec::new(Target { kind: TargetKind::List, expr: "m01".into() }, "test.ping");
        let published = client.publish(spec).await.unwrap();
        while client.next_job_event(&published.jid).await.unwrap() != JobEvent::Done {}
    }
    jobs as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    if std::env::var_os("HALITE_BIN_DIR").is_none() {
        std::env::set_var("HALITE_BIN_DIR", concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release"));
    }
    let mut cluster = Cluster::start_with("", "warn");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let client = runtime.block_on(Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap())).unwrap();
    let mut tiers = serde_json::Map::new();
    let mut started = 0;
    println!(
        "{:<8} {:>16} {:>16} {:>16} {:>16}",
        "minions", "CLI test.ping", "CLI cmd.run", "seq. jobs/s", "minion RSS"
    );
    for n in TIERS {
        let ids: Vec<String> = (started + 1..=n).map(|i| format!("m{i:02}")).collect();
        for id in &ids {
            cluster.enroll_minion(id, "");
        }
        let all: Vec<String> = (1..=n).map(|i| format!("m{i:02}")).collect();
        cluster.wait_connected(&all.iter().map(String::as_str).collect::<Vec<_>>());
        started = n;
        let run = |args: &[&str]| {
            let out = cluster.cli(args);
            assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        };
        for _ in 0..2 {
            run(&["run", "m*", "test.ping"]);
        }
        let mut ping: Vec<f64> = (0..REPS).map(|_| wall(|| run(&["run", "m*", "test.ping"]))).collect();
        let mut cmd: Vec<f64> = (0..REPS).map(|_| wall(|| run(&["run", "m*", "cmd.run", "echo hi"]))).collect();
        let mut seq: Vec<f64> = (0..3).map(|_| runtime.block_on(sequential(&client, 500))).collect();
        std::thread::sleep(Duration::from_secs(1));
        let mut rss: Vec<f64> = minion_pids(&cluster).into_iter().map(rss_mib).collect();
        assert_eq!(rss.len(), n);
        let tier = json!({
            "cli_test_ping_s": median(&mut ping), "cli_cmd_run_s": median(&mut cmd),
            "seq_jobs_per_s": median(&mut seq), "minion_rss_mib": median(&mut rss),
        });
        println!(
            "{n:<8} {:>14.4} s {:>14.4} s {:>16.0} {:>12.1} MiB",
            tier["cli_test_ping_s"].as_f64().unwrap(),
            tier["cli_cmd_run_s"].as_f64().unwrap(),
            tier["seq_jobs_per_s"].as_f64().unwrap(),
            tier["minion_rss_mib"].as_f64().unwrap()
        );
        tiers.insert(n.to_string(), tier);
    }

    // Cold start: spawn → first job answered (a job with a TTL waits for the minion).
    let mut cold: Vec<f64> = Vec::new();
    for _ in 0..5 {
        stop_and_wait_offline(&mut cluster, "m01");
        let started = Instant::now();
        cluster.start_minion("m01");
        let out = cluster.cli(&["run", "--ttl", "10s", "m01", "test.ping"]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        cold.push(started.elapsed().as_secs_f64());
    }
    let mut local: Vec<f64> = (0..5)
        .map(|_| {
            wall(|| {
                let out = cluster.bin("halite-minion", &["call", "test.ping"]);
                assert_eq!(out.code, 0);
            })
        })
        .collect();
    let doc: Value = json!({
        "tiers": tiers,
        "cold_start_first_job_s": median(&mut cold),
        "local_call_s": median(&mut local),
    });
    println!("minion start → first job answered: {:.4} s", doc["cold_start_first_job_s"].as_f64().unwrap());
    println!("halite-minion call test.ping: {:.4} s", doc["local_call_s"].as_f64().unwrap());
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bench-tiers.json");
    std::fs::write(out, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
}
