//! Whether a master still answers people while it is busy: a thread that asks it a small thing
//! through the CLI (a process started each time, as an admin would) and through the HTTP
//! gateway, over and over, and keeps how long each answer took.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::swarm::Figures;
use crate::{http, wait_for, Cluster};

/// Answer times, milliseconds, of each way in.
#[derive(Debug, Default)]
pub struct Answers {
    /// `halite minions list <one id>`, the process's whole run.
    pub cli_ms: Vec<f64>,
    /// `GET /v1/minions/<one id>` on the gateway.
    pub gateway_ms: Vec<f64>,
}

impl Answers {
    /// Adds their figures (median and p99 of each way in), named for what went on `during`.
    pub fn report(mut self, figures: &mut Figures, during: &str) {
        figures.add(format!("during {during}: the CLI's answer (a whole process)"), &mut self.cli_ms, "ms");
        figures.add(format!("during {during}: the gateway's answer"), &mut self.gateway_ms, "ms");
    }
}

/// A running probe; [`Probe::stop`] ends it and gives its answer times.
pub struct Probe {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Answers>,
}

impl Probe {
    /// Starts asking the cluster's master about minion `id` every `every`, by the CLI and the
    /// gateway in turn. The master must have been started with a `[gateway]`.
    pub fn start(cluster: &Cluster, id: &str, every: Duration) -> Probe {
        let addr_file = cluster.dir.join("master/gateway.addr");
        let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
        let addr = addr.trim().to_owned();
        let token = cluster.cli(&["principal", "token", "root"]).stdout.trim().to_owned();
        let cli: PathBuf = cluster.bins().join("halite");
        let config = cluster.config.clone();
        let id = id.to_owned();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut answers = Answers::default();
            while !stopped.load(Ordering::Relaxed) {
                let started = Instant::now();
                let status = Command::new(&cli)
                    .arg("--config")
                    .arg(&config)
                    .args(["minions", "list", &id])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                assert!(status.is_ok_and(|s| s.success()), "the CLI failed during the probe");
                answers.cli_ms.push(started.elapsed().as_secs_f64() * 1000.0);
                let started = Instant::now();
                let answer = http::request("GET", &addr, &format!("/v1/minions/{id}"), Some(&token), None);
                assert_eq!(answer.status, 200, "the gateway failed during the probe: {}", answer.body);
                answers.gateway_ms.push(started.elapsed().as_secs_f64() * 1000.0);
                std::thread::sleep(every);
            }
            answers
        });
        Probe { stop, thread }
    }

    /// Stops asking; the answer times.
    pub fn stop(self) -> Answers {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_else(|_| panic!("the probe thread panicked"))
    }
}
