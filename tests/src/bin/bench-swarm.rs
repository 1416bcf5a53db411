//! Swarm benchmarks: a real master and `halite-swarm` minions (real keys, sessions and TCP
//! connections, in one process) on loopback.
//!
//! `cargo build --release --bins && HALITE_BIN_DIR=target/release ./target/release/bench-swarm [--max 10000]`
//!
//! 1. fan-out latency, publish → last return of `test.ping`, at 1, 100, 1,000 and `--max`
//!    minions, and the master's CPU time per targeted minion over those fan-outs
//!    (`/proc/<pid>/stat`); during the largest, how long the CLI (a whole `halite` process) and
//!    the HTTP gateway take to answer a small request;
//! 2. sequential jobs/s to one minion, and concurrent jobs/s across minions;
//! 3. master RSS and RSS per connected minion at 1,000 and `--max`;
//! 4. `halite minions list` of all `--max` minions (paged), and the answers to others meanwhile;
//! 5. reconnect storm: master killed and restarted under `--max` minions, time until every one
//!    answers `test.ping` again, and handshakes admitted per second.
//!
//! Each minion is one descriptor in the master: `--max` past the hard descriptor limit (less
//! 1,024: the master keeps 512 for itself, and 512 are left for clients) is measured at that
//! limit, with a note, unless this process may raise it (root with `CAP_SYS_RESOURCE`). The
//! swarm minions run in as many processes as their own limit needs.
//!
//! Prints a table and writes `target/bench-swarm.json`; every figure is the median and p99 of
//! repeated runs. `--max 100` is the quick smoke run CI uses.

// A benchmark binary: any failure is a broken run, reported by the panic message.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use halite_tests::bench::{cpu_time, minions_per_process, rss_kib};
use halite_tests::probe::Probe;
use halite_tests::swarm::{connect, connected_count, ping, start_swarm, start_swarms, wait_connected, Figures};
use halite_tests::Cluster;

fn main() {
    if std::env::var_os("HALITE_BIN_DIR").is_none() {
        std::env::set_var("HALITE_BIN_DIR", concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release"));
    }
    let args: Vec<String> = std::env::args().collect();
    let wanted: usize = args
        .iter()
        .position(|a| a == "--max")
        .and_then(|i| args.get(i + 1))
        .map_or(10_000, |v| v.parse().expect("--max N"));
    // Each minion is a descriptor in the master (and in its swarm): the master can hold no more
    // than the hard limit allows, and only a process with CAP_SYS_RESOURCE may raise it.
    let (max, hard) = minions_per_process(wanted);
    if max < wanted {
        eprintln!(
            "bench-swarm: --max {wanted} needs {} descriptors in the master, but the hard limit is {hard} and this \
             process may not raise it (CAP_SYS_RESOURCE): measuring {max}, the most one master holds here",
            wanted + 1024
        );
    }
    halite_transport::raise_open_files(Some(4096)).ok();
    // Every swarm minion connects from 127.0.0.1: let one address have as many handshakes in
    // flight as the master allows in total, as distinct hosts would. The gateway is there to be
    // asked during the largest fan-out.
    let tuning = "max_pending_handshakes_per_ip = 4096\n[gateway]\nlisten = \"127.0.0.1:0\"\n";
    let mut cluster = Cluster::start_with(tuning, "warn");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let mut figures = Figures::default();
    Figures::header();
    runtime.block_on(async {
        let client = connect(&cluster.config).await;
        let master_idle = rss_kib(cluster.master_pid().unwrap()) as f64;
        let first = max.min(1000);
        let _swarm_a = start_swarm(&cluster, &cluster.config, 0, first, &[]);
        wait_connected(&client, first).await;
        tokio::time::sleep(Duration::from_secs(1)).await;

        let tiers: Vec<(usize, &str)> = [(1, "swarm-00000"), (100, "swarm-000??"), (1000, "swarm-00???")]
            .into_iter()
            .filter(|(n, _)| *n <= first)
            .collect();
        let master_pid = cluster.master_pid().unwrap();
        for (n, target) in &tiers {
            ping(&client, target, *n, 0).await;
            let mut samples: Vec<f64> = Vec::new();
            let cpu_before = cpu_time(master_pid);
            for _ in 0..20 {
                samples.push(ping(&client, target, *n, 0).await.as_secs_f64() * 1000.0);
            }
            let cpu = cpu_time(master_pid).saturating_sub(cpu_before);
            figures.add(format!("fan-out test.ping, publish → last return, {n} minions"), &mut samples, "ms");
            figures.add(
                format!("fan-out test.ping, master CPU per targeted minion, {n} minions"),
                &mut [cpu.as_secs_f64() * 1e6 / (20 * n) as f64],
                "µs",
            );
        }

        // Sequential round trips to one minion.
        let mut latencies: Vec<f64> = Vec::new();
        let started = Instant::now();
        for _ in 0..2000 {
            latencies.push(ping(&client, "swarm-00000", 1, 0).await.as_secs_f64() * 1000.0);
        }
        let rate = 2000.0 / started.elapsed().as_secs_f64();
        figures.add("sequential test.ping to one minion: round trip", &mut latencies, "ms");
        figures.add("sequential test.ping to one minion: jobs/s", &mut [rate], "jobs/s");

        // Concurrent jobs: 16 clients, each a loop of single-minion jobs to its own minions.
        let clients = 16.min(first);
        let per_client = 300;
        let started = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..clients {
            let own = connect(&cluster.config).await;
            tasks.push(tokio::spawn(async move {
                for j in 0..per_client {
                    let id = format!("swarm-{:05}", (c + j * clients) % first);
                    ping(&own, &id, 1, 0).await;
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let rate = (clients * per_client) as f64 / started.elapsed().as_secs_f64();
        figures.add(
            format!("concurrent test.ping jobs/s ({clients} clients, one minion each job)"),
            &mut [rate],
            "jobs/s",
        );

        let per = (rss_kib(master_pid) as f64 - master_idle) / first as f64;
        figures.add(format!("master RSS per connected minion at {first}"), &mut [per], "KiB");
        figures.add(format!("master RSS with {first} minions"), &mut [rss_kib(master_pid) as f64 / 1024.0], "MiB");

        if max > 1000 {
            let _swarms = start_swarms(&cluster, &cluster.config, 1000, max - 1000, &[]);
            let joined = wait_connected(&client, max).await;
            figures.add(
                format!("{} more swarm minions enrolled and connected", max - 1000),
                &mut [joined.as_secs_f64()],
                "s",
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
            ping(&client, "swarm-*", max, 0).await;
            let mut samples: Vec<f64> = Vec::new();
            // Admins and engines are answered while the master fans out to every minion.
            let probe = Probe::start(&cluster, "swarm-00000", Duration::from_millis(100));
            let cpu_before = cpu_time(master_pid);
            for _ in 0..10 {
                samples.push(ping(&client, "swarm-*", max, 0).await.as_secs_f64() * 1000.0);
            }
            let cpu = cpu_time(master_pid).saturating_sub(cpu_before);
            let answers = probe.stop();
            figures.add(format!("fan-out test.ping, publish → last return, {max} minions"), &mut samples, "ms");
            answers.report(&mut figures, &format!("fan-outs to {max}"));
            figures.add(
                format!("fan-out test.ping, master CPU per targeted minion, {max} minions"),
                &mut [cpu.as_secs_f64() * 1e6 / (10 * max) as f64],
                "µs",
            );
            let per = (rss_kib(master_pid) as f64 - master_idle) / max as f64;
            figures.add(format!("master RSS per connected minion at {max}"), &mut [per], "KiB");
            figures.add(format!("master RSS with {max} minions"), &mut [rss_kib(master_pid) as f64 / 1024.0], "MiB");

            // Listing every minion (paged by the CLI) while the others are answered.
            let probe = Probe::start(&cluster, "swarm-00000", Duration::from_millis(20));
            let mut listings: Vec<f64> = Vec::new();
            for _ in 0..3 {
                let started = Instant::now();
                let listed = cluster.cli(&["--out", "json", "minions", "list", "swarm-*"]);
                listings.push(started.elapsed().as_secs_f64());
                let listed: Vec<serde_json::Value> = serde_json::from_str(&listed.stdout).expect("a JSON list");
                assert_eq!(listed.len(), max, "every minion listed");
            }
            let answers = probe.stop();
            figures.add(format!("`halite minions list` of all {max} (JSON, paged)"), &mut listings, "s");
            answers.report(&mut figures, &format!("listings of {max}"));

            // Reconnect storm.
            drop(client);
            let mut storms: Vec<f64> = Vec::new();
            let mut rates: Vec<f64> = Vec::new(); // seconds until all are connected
            for _ in 0..3 {
                cluster.kill_master();
                let killed = Instant::now();
                cluster.start_master();
                let mut client = connect(&cluster.config).await;
                // Time until every minion is connected again, polled every 500 ms by a second
                // client: each poll lists the whole fleet, and polled every 100 ms the listings
                // took a sixth of the master's CPU during the storm they measure.
                let watcher = connect(&cluster.config).await;
                let counter = tokio::spawn(async move {
                    loop {
                        if connected_count(&watcher).await >= max {
                            return killed.elapsed().as_secs_f64();
                        }
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                });
                ping(&client, "swarm-*", max, 120_000).await;
                storms.push(killed.elapsed().as_secs_f64());
                rates.push(counter.await.unwrap());
                client = connect(&cluster.config).await;
                wait_connected(&client, max).await;
            }
            figures.add(format!("reconnect storm: master restart → all {max} answer test.ping"), &mut storms, "s");
            let mut admitted: Vec<f64> = rates.iter().map(|t| max as f64 / t).collect();
            figures.add(format!("reconnect storm: master restart → all {max} connected again"), &mut rates, "s");
            figures.add("reconnect storm: handshakes admitted per second (incl. master start)", &mut admitted, "hs/s");
        }
    });
    figures.write(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bench-swarm.json"));
}
