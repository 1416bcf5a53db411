//! `halite-swarm`: N minions in one process, for benchmarks and load tests.
//!
//! Each minion is real where it matters to a master: its own ed25519 identity, its own TCP
//! connection and Noise session, the real minion connection loop, executor, at-most-once
//! markers, durable outbox and dispatcher (`halite-minion`'s embedded mode). What is shared:
//! the function registry and policy (the default policy: `test.*` and the other read-only
//! functions) and the grains map, to save memory; and job signature verification, done once per
//! distinct job for the whole process (`VerifiedJobs`), because separate machines verify in
//! parallel on their own CPUs while a swarm on one machine would measure its own ed25519
//! throughput. Keep the state directory on tmpfs
//! (the default, under `/dev/shm`): every job writes a marker and a return there.
//!
//! Enrollment is by preseeded keys (fast: one admin request per minion over one session) or by
//! one-time tokens (the path a booting server takes); either needs the master's root key,
//! found through the master config as the `halite` CLI finds it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use halite_client::{Client, ClientConfig};
use halite_minion::{run_embedded, EmbeddedMinion};
use halite_modules::{Dispatcher, Policy, Registry};
use halite_protocol::identity::IdentityKey;
use halite_protocol::message::{RequestBody, ResponseBody};
use tokio::sync::watch;

/// How swarm minions get accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Enroll {
    /// Register each minion's public key as accepted before it connects.
    Preseed,
    /// Create a one-time token per minion; each enrolls itself on first connect.
    Token,
}

/// Runs N real minions in this process against a master.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// The master's config file (its address, its public key and the root key come from it).
    #[arg(short, long, default_value = "/etc/halite/master.toml")]
    config: PathBuf,
    /// How many minions.
    #[arg(short = 'n', long, default_value_t = 100)]
    count: usize,
    /// Number of the first minion (ids are `<prefix><number>`, zero-padded to 5 digits).
    #[arg(long, default_value_t = 0)]
    start: usize,
    /// Id prefix.
    #[arg(long, default_value = "swarm-")]
    prefix: String,
    /// How minions are accepted.
    #[arg(long, value_enum, default_value_t = Enroll::Preseed)]
    enroll: Enroll,
    /// Where each minion keeps its outbox and markers (`<dir>/<id>`); tmpfs by default.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// New connections started per second (0: all at once).
    #[arg(long, default_value_t = 0)]
    connect_rate: u32,
    /// Other masters of the cluster, tried when the config's master goes away (repeatable).
    #[arg(long = "also-master", value_name = "HOST:PORT")]
    also_masters: Vec<String>,
    /// Worker threads (default: one per core, at most one per minion).
    #[arg(long)]
    threads: Option<usize>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HALITE_LOG")
                .unwrap_or_else(|_| "warn,halite_transport=error".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none())
        .init();
    // Each minion holds two descriptors: its connection and its journal.
    if let Err(error) = halite_transport::raise_open_files(Some(2 * args.count as u64 + 256)) {
        eprintln!("halite-swarm: {error}");
        return ExitCode::FAILURE;
    }
    // More threads than minions only add wake-ups between threads to every job's path.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = args.threads.unwrap_or(cores.min(args.count));
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.worker_threads(threads.max(1));
    let runtime = match runtime.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("halite-swarm: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("halite-swarm: {}", halite_transport::error_text::one_line(error.chain().map(|e| e.to_string())));
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let config = ClientConfig::from_master_config(&args.config)?;
    let (master, master_key, _) = ClientConfig::locate_master(&args.config)?;
    let ids: Vec<String> = (args.start..args.start + args.count).map(|i| format!("{}{i:05}", args.prefix)).collect();
    for id in &ids {
        halite_protocol::id::validate(id).with_context(|| format!("minion id {id:?}"))?;
    }
    let started = Instant::now();
    let keys: Vec<IdentityKey> = ids.iter().map(|_| IdentityKey::generate_os()).collect();
    let admin = Client::connect(config).await.context("connecting to the master as root")?;
    let mut tokens: Vec<Option<String>> = Vec::with_capacity(ids.len());
    for (id, key) in ids.iter().zip(&keys) {
        match args.enroll {
            Enroll::Preseed => {
                let public_key = key.public().as_bytes().to_vec();
                admin.request(RequestBody::KeyPreseed { id: id.clone(), public_key }).await?;
                tokens.push(None);
            }
            Enroll::Token => {
                let answer = admin
                    .request(RequestBody::TokenCreate { minion: id.clone(), ttl_ms: 3_600_000, replace: false })
                    .await?;
                let ResponseBody::Token(token) = answer else { anyhow::bail!("unexpected answer to token_create") };
                tokens.push(Some(token.token));
            }
        }
    }
    drop(admin);
    eprintln!(
        "halite-swarm: {} minions enrolled ({:?}) in {:.2} s",
        ids.len(),
        args.enroll,
        started.elapsed().as_secs_f64()
    );

    // tmpfs when there is one: every job writes a marker and a return.
    let tmpfs = std::path::Path::new("/dev/shm");
    let parent = if tmpfs.is_dir() { tmpfs.to_path_buf() } else { std::env::temp_dir() };
    let state_root = args.state_dir.unwrap_or_else(|| parent.join(format!("halite-swarm-{}", std::process::id())));
    let dispatcher = Arc::new(Dispatcher {
        registry: Arc::new(Registry::standard()),
        policy: Policy::default(),
        plans_dir: state_root.join("plans"),
        deploy: Default::default(),
        paths: halite_modules::PathGuard::new(std::slice::from_ref(&state_root), None),
    });
    let grains = Arc::new(halite_modules::grains::collect(&BTreeMap::new()));
    let verified = Arc::new(halite_minion::VerifiedJobs::new());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::with_capacity(ids.len());
    let pace = (args.connect_rate > 0).then(|| Duration::from_secs_f64(1.0 / f64::from(args.connect_rate)));
    for ((id, key), token) in ids.into_iter().zip(keys).zip(tokens) {
        let minion = EmbeddedMinion {
            state_dir: state_root.join(&id),
            id,
            masters: std::iter::once(master.clone()).chain(args.also_masters.iter().cloned()).collect(),
            key,
            master_key,
            token,
            dispatcher: dispatcher.clone(),
            grains: grains.clone(),
            max_concurrent_jobs: 16,
            verified: Some(verified.clone()),
        };
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(error) = run_embedded(minion, shutdown).await {
                eprintln!("halite-swarm: {error}");
            }
        }));
        if let Some(pace) = pace {
            tokio::time::sleep(pace).await;
        }
    }
    eprintln!("halite-swarm: {} minions running; Ctrl-C or SIGTERM stops them", tasks.len());
    halite_transport::shutdown_signal().await;
    let _ = stop_tx.send(true);
    for task in tasks {
        let _ = task.await;
    }
    let _ = std::fs::remove_dir_all(&state_root);
    Ok(())
}
