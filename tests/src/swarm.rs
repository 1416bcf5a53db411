//! Driving `halite-swarm` minions from benchmarks: starting swarms, connecting clients, waiting
//! for the minions, publishing `test.ping` and timing it, and printing figures.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use halite_client::{Client, ClientConfig, JobEvent, PublishSpec};
use halite_protocol::message::{MinionJobState, Target, TargetKind};

use crate::bench::percentile;
use crate::Cluster;

/// A swarm process, stopped when dropped.
pub struct Swarm(Child);

impl Drop for Swarm {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGTERM);
        }
        let _ = self.0.wait();
    }
}

/// Starts `count` swarm minions numbered from `start`, enrolled through the master whose config
/// is `config`, trying `also` when it goes away.
pub fn start_swarm(cluster: &Cluster, config: &Path, start: usize, count: usize, also: &[String]) -> Swarm {
    let log = std::fs::File::create(cluster.dir.join(format!("swarm-{start}.log")))
        .unwrap_or_else(|e| panic!("swarm log: {e}"));
    let mut command = Command::new(cluster.bins().join("halite-swarm"));
    command.arg("--config").arg(config).args(["--start", &start.to_string(), "--count", &count.to_string()]);
    for addr in also {
        command.args(["--also-master", addr]);
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting halite-swarm (built with `cargo build --release --bins`): {e}"));
    Swarm(child)
}

/// Starts `count` swarm minions numbered from `start` as [`start_swarm`] does, in as many
/// processes as their descriptors need: a swarm minion holds two (its connection and its
/// journal), and a process may hold no more than its hard limit.
pub fn start_swarms(cluster: &Cluster, config: &Path, start: usize, count: usize, also: &[String]) -> Vec<Swarm> {
    let hard = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |(_, h)| h);
    let per_process = (hard.saturating_sub(512) / 2).max(1) as usize;
    (start..start + count)
        .step_by(per_process)
        .map(|from| start_swarm(cluster, config, from, per_process.min(start + count - from), also))
        .collect()
}

/// Connects as root through a master config, retrying while the master starts.
pub async fn connect(config: &Path) -> Client {
    let config = ClientConfig::from_master_config(config).unwrap_or_else(|e| panic!("client config: {e}"));
    let started = Instant::now();
    loop {
        match Client::connect(config.clone()).await {
            Ok(client) => return client,
            Err(error) if started.elapsed() > Duration::from_secs(30) => panic!("connecting: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// How many swarm minions the client's master has connected, and (with `elsewhere`) how many
/// it knows to be connected to the other masters of its cluster as well.
async fn count(client: &Client, elsewhere: bool) -> usize {
    let minions = client.minions("swarm-*").await.unwrap_or_else(|e| panic!("listing minions: {e}"));
    minions.iter().filter(|m| m.connected || (elsewhere && m.connected_elsewhere)).count()
}

/// How many swarm minions the client's master has connected.
pub async fn connected_count(client: &Client) -> usize {
    count(client, false).await
}

/// Waits until the client's master has `n` swarm minions connected; how long it took.
pub async fn wait_connected(client: &Client, n: usize) -> Duration {
    wait_counted(client, n, false).await
}

/// Waits until the client's master knows `n` swarm minions connected to it or to another master
/// of its cluster (which it learns of through the store, shortly after that master).
pub async fn wait_reachable(client: &Client, n: usize) -> Duration {
    wait_counted(client, n, true).await
}

async fn wait_counted(client: &Client, n: usize, elsewhere: bool) -> Duration {
    let started = Instant::now();
    loop {
        let count = count(client, elsewhere).await;
        if count >= n {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(300), "only {count} of {n} minions connected");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Publishes `test.ping` to `target` and waits for the last return; every minion must return.
pub async fn ping(client: &Client, target: &str, expected: usize, ttl_ms: u64) -> Duration {
    let mut spec = PublishSpec::new(Target { kind: TargetKind::Glob, expr: target.into() }, "test.ping");
    spec.ttl_ms = ttl_ms;
    spec.timeout_ms = 60_000;
    let started = Instant::now();
    let published = client.publish(spec).await.unwrap_or_else(|e| panic!("publish: {e}"));
    assert_eq!(published.minions.len(), expected, "{target}");
    let mut returned = 0;
    loop {
        match client.next_job_event(&published.jid).await.unwrap_or_else(|e| panic!("job events: {e}")) {
            JobEvent::Update(u) if u.state == MinionJobState::Returned => returned += 1,
            JobEvent::Update(u) if u.state.is_final() => panic!("{} ended {:?}", u.minion, u.state),
            JobEvent::Update(_) => {}
            JobEvent::Done => break,
        }
    }
    assert_eq!(returned, expected);
    started.elapsed()
}

/// Figures as they are measured: printed as a table row each, kept for the JSON file.
#[derive(Default)]
pub struct Figures(pub Vec<(String, f64, f64, &'static str)>);

impl Figures {
    /// Prints the header row.
    pub fn header() {
        println!("{:<72} {:>17} {:>17}", "figure", "median", "p99");
    }

    /// Adds (and prints) the median and p99 of `samples`.
    pub fn add(&mut self, name: impl Into<String>, samples: &mut [f64], unit: &'static str) {
        let (p50, p99) = (percentile(samples, 0.5), percentile(samples, 0.99));
        let name = name.into();
        println!("{name:<72} {p50:>10.1} {unit:<6} {p99:>10.1} {unit}");
        self.0.push((name, p50, p99, unit));
    }

    /// Writes them as JSON to `path`.
    pub fn write(&self, path: &str) {
        let json: Vec<serde_json::Value> = self
            .0
            .iter()
            .map(|(name, p50, p99, unit)| serde_json::json!({ "name": name, "median": p50, "p99": p99, "unit": unit }))
            .collect();
        let _ = std::fs::write(path, serde_json::to_string_pretty(&json).unwrap_or_default());
    }
}
