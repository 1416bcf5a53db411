//! CLI-level benchmarks on real processes: `halite run test.ping` wall time to 1 and 10
//! minions, minion idle RSS, and minion start → first job answered.
//!
//! `cargo build --release --bins && HALITE_BIN_DIR=target/release cargo run --release -p halite-tests --bin bench-cli`
//! Prints a table and writes `target/bench-cli.json`. Figures are medians and p99 of repeated runs.

// A benchmark binary: any failure is a broken run, reported by the panic message.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use halite_tests::bench::{minion_pids, percentile, rss_kib, stop_and_wait_offline};
use halite_tests::Cluster;

fn time_cli(cluster: &Cluster, args: &[&str], runs: usize) -> (f64, f64) {
    let mut samples: Vec<f64> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            let run = cluster.cli(args);
            assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    (percentile(&mut samples, 0.5), percentile(&mut samples, 0.99))
}

fn main() {
    if std::env::var_os("HALITE_BIN_DIR").is_none() {
        std::env::set_var("HALITE_BIN_DIR", concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release"));
    }
    let runs = 30;
    let mut cluster = Cluster::start("");
    let mut figures: Vec<(String, f64, f64, &str)> = Vec::new();

    cluster.enroll_minion("m00", "");
    cluster.wait_connected(&["m00"]);
    let (p50, p99) = time_cli(&cluster, &["run", "m00", "test.ping"], runs);
    figures.push(("halite run test.ping, 1 minion (CLI wall time)".into(), p50, p99, "ms"));

    let ids: Vec<String> = (1..10).map(|i| format!("m{i:02}")).collect();
    for id in &ids {
        cluster.enroll_minion(id, "");
    }
    let mut all: Vec<&str> = ids.iter().map(String::as_str).collect();
    all.push("m00");
    cluster.wait_connected(&all);
    let (p50, p99) = time_cli(&cluster, &["run", "m*", "test.ping"], runs);
    figures.push(("halite run test.ping, 10 minions (CLI wall time)".into(), p50, p99, "ms"));

    std::thread::sleep(Duration::from_secs(2));
    let mut rss: Vec<f64> = minion_pids(&cluster).into_iter().map(|pid| rss_kib(pid) as f64 / 1024.0).collect();
    assert_eq!(rss.len(), 10, "expected 10 minion processes");
    figures.push(("minion idle RSS".into(), percentile(&mut rss, 0.5), percentile(&mut rss, 0.99), "MiB"));

    // Start → first job answered: a job with a TTL is published the moment the process is
    // spawned; it is delivered when the minion connects, and the CLI returns when it answers.
    let mut cold: Vec<f64> = Vec::new();
    for _ in 0..15 {
        stop_and_wait_offline(&mut cluster, "m00");
        let started = Instant::now();
        cluster.start_minion("m00");
        let run = cluster.cli(&["run", "--ttl", "10s", "m00", "test.ping"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        cold.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let (p50, p99) = (percentile(&mut cold, 0.5), percentile(&mut cold, 0.99));
    figures.push(("minion start → first job answered (incl. CLI connect)".into(), p50, p99, "ms"));

    // Start → connected: the master's `connected` event, seen by a subscribed client.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let config = halite_client::ClientConfig::from_master_config(&cluster.config).unwrap();
    let watcher = runtime.block_on(halite_client::Client::connect(config)).unwrap();
    let mut connected = runtime.block_on(watcher.subscribe(vec!["halite/minion/m00/connected".into()])).unwrap();
    let mut connect: Vec<f64> = Vec::new();
    for _ in 0..15 {
        stop_and_wait_offline(&mut cluster, "m00");
        let started = Instant::now();
        cluster.start_minion("m00");
        runtime
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), connected.next_event()).await })
            .unwrap()
            .unwrap();
        connect.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let (p50, p99) = (percentile(&mut connect, 0.5), percentile(&mut connect, 0.99));
    figures.push(("minion start → connected (session up, hello sent)".into(), p50, p99, "ms"));

    // The minion binary as an image would ship it: stripped.
    let stripped = cluster.dir.join("halite-minion.stripped");
    let status = Command::new("strip").arg("-o").arg(&stripped).arg(cluster.bins().join("halite-minion")).status();
    if status.is_ok_and(|s| s.success()) {
        let mib = std::fs::metadata(&stripped).map_or(0.0, |m| m.len() as f64 / 1_048_576.0);
        figures.push(("halite-minion binary, stripped".into(), mib, mib, "MiB"));
    }

    let mut local: Vec<f64> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            let run = cluster.bin("halite-minion", &["call", "test.ping"]);
            assert_eq!(run.code, 0);
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    let (p50, p99) = (percentile(&mut local, 0.5), percentile(&mut local, 0.99));
    figures.push(("halite-minion call test.ping (local, wall time)".into(), p50, p99, "ms"));

    println!("{:<56} {:>10} {:>10}", "figure", "median", "p99");
    for (name, p50, p99, unit) in &figures {
        println!("{name:<56} {:>7.1} {unit:<3} {:>6.1} {unit}", p50, p99);
    }
    let json: Vec<String> = figures
        .iter()
        .map(|(name, p50, p99, unit)| {
            format!("  {{\"name\": {name:?}, \"median\": {p50:.2}, \"p99\": {p99:.2}, \"unit\": {unit:?}}}")
        })
        .collect();
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bench-cli.json");
    if let Err(error) = std::fs::write(out, format!("[\n{}\n]\n", json.join(",\n"))) {
        eprintln!("could not write {out}: {error}");
    }
}
