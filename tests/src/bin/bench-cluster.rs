//! Cluster benchmarks: masters on PostgreSQL (a server this run starts and stops) with
//! `halite-swarm` minions, beside the same figure on SQLite, on one machine.
//!
//! `cargo build --release --bins && HALITE_BIN_DIR=target/release ./target/release/bench-cluster [--minions 1000]`
//!
//! 1. sequential `test.ping` jobs/s to one minion: SQLite, then PostgreSQL, each also as a share
//!    of the floor this machine allows (`bench-floor`, measured first in the same run);
//! 2. fan-out `test.ping`, publish → last return, N minions on one master with PostgreSQL;
//! 3. the same with the N minions spread over two masters, published on one;
//! 4. failover: kill -9 of the master serving half of them, until all N answer on the other.
//!
//! Prints a table and writes `target/bench-cluster.json` (median and p99 of repeated runs).

// A benchmark binary: any failure is a broken run, reported by the panic message.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Instant;

use halite_protocol::message::RequestBody;
use halite_tests::postgres::OwnServer;
use halite_tests::swarm::{connect, ping, start_swarm, wait_connected, wait_reachable, Figures};
use halite_tests::Cluster;

/// Sequential single-minion jobs timed on `cluster` (one swarm minion), and their rate as a
/// share of the floor's (`floor`, jobs/s).
async fn sequential(cluster: &Cluster, figures: &mut Figures, store: &str, floor: f64) {
    let _swarm = start_swarm(cluster, &cluster.config, 0, 1, &[]);
    let client = connect(&cluster.config).await;
    wait_connected(&client, 1).await;
    for _ in 0..100 {
        ping(&client, "swarm-00000", 1, 0).await;
    }
    let jobs = std::env::var("HALITE_BENCH_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let mut latencies = Vec::with_capacity(jobs);
    let started = Instant::now();
    for _ in 0..jobs {
        latencies.push(ping(&client, "swarm-00000", 1, 0).await.as_secs_f64() * 1000.0);
    }
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    figures.add(format!("{store}: sequential test.ping to one minion, round trip"), &mut latencies, "ms");
    figures.add(format!("{store}: sequential test.ping to one minion, jobs/s"), &mut [rate], "jobs/s");
    figures.add(format!("{store}: sequential, halite / floor"), &mut [100.0 * rate / floor], "%");
}

/// The floor of a sequential job on this machine, now (see `halite_tests::floor`): the median
/// of three runs.
fn floor(figures: &mut Figures) -> f64 {
    let dir = std::env::temp_dir().join(format!("halite-bench-floor-{}", std::process::id()));
    let jobs = std::env::var("HALITE_BENCH_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let mut rates: Vec<f64> =
        (0..3).map(|_| halite_tests::floor::measure(&halite_tests::bin_dir(), &dir, jobs)).collect();
    let _ = std::fs::remove_dir_all(&dir);
    let median = halite_tests::bench::percentile(&mut rates, 0.5);
    figures.add("floor: sequential job (sign, SQLite commit, verify, synced append), jobs/s", &mut rates, "jobs/s");
    median
}

async fn fan_out(client: &halite_client::Client, n: usize, name: String, figures: &mut Figures) {
    ping(client, "swarm-*", n, 0).await;
    let mut samples = Vec::new();
    for _ in 0..20 {
        samples.push(ping(client, "swarm-*", n, 0).await.as_secs_f64() * 1000.0);
    }
    figures.add(name, &mut samples, "ms");
}

fn main() {
    if std::env::var_os("HALITE_BIN_DIR").is_none() {
        std::env::set_var("HALITE_BIN_DIR", concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release"));
    }
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .iter()
        .position(|a| a == "--minions")
        .and_then(|i| args.get(i + 1))
        .map_or(1000, |v| v.parse().expect("--minions N"));
    // `--sequential`: only the sequential figures (for profiling the one-job round trip).
    let sequential_only = args.iter().any(|a| a == "--sequential");
    halite_transport::raise_open_files(Some(8192)).ok();
    let server_dir = std::env::temp_dir().join(format!("halite-bench-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&server_dir);
    let server = OwnServer::start(&server_dir);
    // The client is one engine thread: its task, the SDK's and its connection's share it, so the
    // client's side of a round trip wakes once per message, as an engine worker would.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut figures = Figures::default();
    Figures::header();
    let tuning = "max_pending_handshakes_per_ip = 4096\n";
    runtime.block_on(async {
        // Measured in the same run, on the machine as it is now.
        let floor = floor(&mut figures);
        {
            let sqlite = Cluster::start_with(tuning, "warn");
            sequential(&sqlite, &mut figures, "SQLite", floor).await;
        }
        let mut cluster = Cluster::start_with(&format!("{tuning}[store]\nurl = {:?}\n", server.url), "warn");
        sequential(&cluster, &mut figures, "PostgreSQL", floor).await;
        if sequential_only {
            return;
        }
        let client = connect(&cluster.config).await;
        client.request(RequestBody::KeyDelete { pattern: "swarm-*".into() }).await.unwrap();

        {
            let _swarm = start_swarm(&cluster, &cluster.config, 0, n, &[]);
            wait_connected(&client, n).await;
            fan_out(&client, n, format!("PostgreSQL, one master: fan-out test.ping, {n} minions"), &mut figures).await;
        }
        client.request(RequestBody::KeyDelete { pattern: "swarm-*".into() }).await.unwrap();

        // Two masters, half the minions on each; published on the first.
        let first = cluster.port;
        let second = cluster.start_peer_master();
        let second_config = cluster.config_of(second).to_owned();
        let half = n / 2;
        let _on_first = start_swarm(&cluster, &cluster.config, 0, half, &[format!("127.0.0.1:{second}")]);
        let on_second = start_swarm(&cluster, &second_config, half, n - half, &[format!("127.0.0.1:{first}")]);
        // Published on the first master once it knows where every minion is (it hears of the
        // second's through the store, a few milliseconds after the second counts them).
        wait_connected(&client, half).await;
        wait_reachable(&client, n).await;
        fan_out(&client, n, format!("PostgreSQL, two masters: fan-out test.ping, {n} minions"), &mut figures).await;

        // Failover: the second master is killed; its minions move to the first.
        let killed = Instant::now();
        cluster.kill_peer_master(second);
        wait_connected(&client, n).await;
        let connected = killed.elapsed().as_secs_f64();
        ping(&client, "swarm-*", n, 60_000).await;
        let answered = killed.elapsed().as_secs_f64();
        figures.add(
            format!("failover: kill -9 of a master → its {} minions connected to the other", n - half),
            &mut [connected],
            "s",
        );
        figures.add(
            format!("failover: kill -9 of a master → all {n} answer test.ping on the other"),
            &mut [answered],
            "s",
        );
        drop(on_second);
    });
    figures.write(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bench-cluster.json"));
    drop(server);
    let _ = std::fs::remove_dir_all(&server_dir);
}
