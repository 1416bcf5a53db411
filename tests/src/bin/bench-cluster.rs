//! Cluster benchmarks: masters on PostgreSQL (a server this run starts and stops) with
//! `halite-swarm` minions, beside the same figure on SQLite, on one machine.
//!
//! `cargo build --release --bins && HALITE_BIN_DIR=target/release ./target/release/bench-cluster [--minions 1000]`
//!
//! 1. sequential `test.ping` jobs/s to one minion: SQLite, then PostgreSQL, each also as a share
//!    of the floor this machine allows (`bench-floor`, measured first in the same run);
//! 2. fan-out `test.ping`, publish → last return, N minions on one master with PostgreSQL;
//! 3. the same with the N minions spread over three masters, published on one;
//! 4. failover: kill -9 of one of the three, until its minions are connected to the other two
//!    and all N answer `test.ping`.
//!
//! Prints a table and writes `target/bench-cluster.json` (median and p99 of repeated runs).

// A benchmark binary: any failure is a broken run, reported by the panic message.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Instant;

use halite_protocol::message::RequestBody;
use halite_tests::postgres::OwnServer;
use halite_tests::swarm::{
    connect, connected_count, ping, start_swarm, start_swarms, wait_connected, wait_reachable, Figures,
};
use halite_tests::Cluster;

/// Sequential single-minion jobs timed on `cluster` (one swarm minion), and their rate as a
/// share of the floor's (`floor`, jobs/s).
async fn sequential(cluster: &Cluster, figures: &mut Figures, store: &str, floor: f64, database: Option<&OwnServer>) {
    let _swarm = start_swarm(cluster, &cluster.config, 0, 1, &[]);
    let client = connect(&cluster.config).await;
    wait_connected(&client, 1).await;
    for _ in 0..100 {
        ping(&client, "swarm-00000", 1, 0).await;
    }
    let jobs = std::env::var("HALITE_BENCH_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let mut latencies = Vec::with_capacity(jobs);
    // The master's CPU per job: unlike the rate, it hardly moves with what else the machine runs.
    let master = cluster.master_pid().expect("the master runs");
    let cpu_before = halite_tests::bench::cpu_time(master);
    // The database server's too: its backends live as long as the master's connections.
    let database_pids = database.map(OwnServer::pids).unwrap_or_default();
    let database_cpu =
        || database_pids.iter().map(|&pid| halite_tests::bench::cpu_time(pid)).sum::<std::time::Duration>();
    let database_before = database_cpu();
    let started = Instant::now();
    for _ in 0..jobs {
        latencies.push(ping(&client, "swarm-00000", 1, 0).await.as_secs_f64() * 1000.0);
    }
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    let cpu = halite_tests::bench::cpu_time(master).saturating_sub(cpu_before);
    figures.add(format!("{store}: sequential, master CPU per job"), &mut [cpu.as_secs_f64() * 1e6 / jobs as f64], "µs");
    if database.is_some() {
        let cpu = database_cpu().saturating_sub(database_before);
        figures.add(
            format!("{store}: sequential, database server CPU per job"),
            &mut [cpu.as_secs_f64() * 1e6 / jobs as f64],
            "µs",
        );
    }
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

/// Fan-outs timed; the database's work per targeted minion measured over them.
async fn fan_out(client: &halite_client::Client, n: usize, name: String, figures: &mut Figures, server: &OwnServer) {
    const RUNS: usize = 20;
    ping(client, "swarm-*", n, 0).await;
    let before = DatabaseWork::read(server).await;
    let mut samples = Vec::new();
    for _ in 0..RUNS {
        samples.push(ping(client, "swarm-*", n, 0).await.as_secs_f64() * 1000.0);
    }
    let work = DatabaseWork::read(server).await.since(&before);
    let per = (RUNS * n) as f64;
    figures.add(&name, &mut samples, "ms");
    figures.add(
        format!("{name}: PostgreSQL transactions per 1,000 targeted minions"),
        &mut [1000.0 * work.commits / per],
        "",
    );
    figures.add(
        format!("{name}: PostgreSQL rows written (inserted + updated) per targeted minion"),
        &mut [work.rows / per],
        "",
    );
    figures.add(format!("{name}: PostgreSQL WAL per targeted minion"), &mut [work.wal_bytes / per], "B");
}

/// What the database did so far: commits, rows written, WAL bytes (`pg_stat_database`, which the
/// server updates within a second, and the WAL position).
struct DatabaseWork {
    commits: f64,
    rows: f64,
    wal_bytes: f64,
}

impl DatabaseWork {
    async fn read(server: &OwnServer) -> DatabaseWork {
        // The statistics of the masters' last transactions reach the view within a second.
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        let row = server.sql(
            "SELECT xact_commit, tup_inserted + tup_updated, pg_current_wal_lsn() - '0/0'::pg_lsn \
             FROM pg_stat_database WHERE datname = current_database()",
        );
        let fields: Vec<f64> = row.split('|').map(|f| f.trim().parse().expect("a number")).collect();
        DatabaseWork { commits: fields[0], rows: fields[1], wal_bytes: fields[2] }
    }

    fn since(&self, before: &DatabaseWork) -> DatabaseWork {
        DatabaseWork {
            commits: self.commits - before.commits,
            rows: self.rows - before.rows,
            wal_bytes: self.wal_bytes - before.wal_bytes,
        }
    }
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
            sequential(&sqlite, &mut figures, "SQLite", floor, None).await;
        }
        let mut cluster = Cluster::start_with(&format!("{tuning}[store]\nurl = {:?}\n", server.url), "warn");
        sequential(&cluster, &mut figures, "PostgreSQL", floor, Some(&server)).await;
        if sequential_only {
            return;
        }
        let client = connect(&cluster.config).await;
        client.request(RequestBody::KeyDelete { pattern: "swarm-*".into() }).await.unwrap();

        {
            let _swarms = start_swarms(&cluster, &cluster.config, 0, n, &[]);
            wait_connected(&client, n).await;
            let name = format!("PostgreSQL, one master: fan-out test.ping, {n} minions");
            fan_out(&client, n, name, &mut figures, &server).await;
        }
        client.request(RequestBody::KeyDelete { pattern: "swarm-*".into() }).await.unwrap();

        // Three masters, a third of the minions on each; published on the first.
        let ports = [cluster.port, cluster.start_peer_master(), cluster.start_peer_master()];
        let mut swarms = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let (from, to) = (i * n / 3, (i + 1) * n / 3);
            let others: Vec<String> = ports.iter().filter(|p| *p != port).map(|p| format!("127.0.0.1:{p}")).collect();
            swarms.extend(start_swarms(&cluster, cluster.config_of(*port), from, to - from, &others));
        }
        // Published on the first master once it knows where every minion is (it hears of the
        // others' through the store, a few milliseconds after they count them).
        wait_connected(&client, n / 3).await;
        wait_reachable(&client, n).await;
        let name = format!("PostgreSQL, three masters: fan-out test.ping, {n} minions");
        fan_out(&client, n, name, &mut figures, &server).await;

        // Failover: the third master is killed; its minions move to the other two.
        let second = connect(cluster.config_of(ports[1])).await;
        let killed = Instant::now();
        cluster.kill_peer_master(ports[2]);
        loop {
            if connected_count(&client).await + connected_count(&second).await >= n {
                break;
            }
            assert!(killed.elapsed().as_secs() < 300, "the killed master's minions did not move");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let connected = killed.elapsed().as_secs_f64();
        ping(&client, "swarm-*", n, 60_000).await;
        let answered = killed.elapsed().as_secs_f64();
        let moved = n - 2 * n / 3;
        figures.add(
            format!("failover: kill -9 of one of three masters → its {moved} minions connected to the others"),
            &mut [connected],
            "s",
        );
        figures.add(
            format!("failover: kill -9 of one of three masters → all {n} answer test.ping"),
            &mut [answered],
            "s",
        );
        drop(swarms);
    });
    figures.write(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bench-cluster.json"));
    drop(server);
    let _ = std::fs::remove_dir_all(&server_dir);
}
