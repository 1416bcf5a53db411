//! The halite minion daemon: connects out to its master, authenticates, announces its grains and
//! functions, runs signed jobs through `halite-modules`, and keeps every result in a durable
//! outbox until the master acknowledges it.
//!
//! It does not depend on the master crate or on any database, and it trusts nobody by default:
//! without a pinned master key (config or enrollment file) it refuses to start unless trust on
//! first use is explicitly enabled.
//!
//! State directory layout (created 0700): `minion.key` (identity, 0600), `master.pub` (a master
//! key pinned on first use), `journal` (at-most-once markers and unacknowledged returns,
//! [`outbox`]).

pub mod config;
pub mod core;
mod daemon;
mod embedded;
mod executor;
mod fit;
mod freshness;
mod journal;
pub mod masters;
pub mod metrics;
mod metrics_http;
pub mod outbox;
mod outbox_legacy;
mod revocations;
mod verified;

use std::future::Future;
use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;

use halite_modules::{Args, Context, Dispatcher, OutgoingEvent, Registry};
use halite_protocol::hex;
use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{Job, JobReturn};
use halite_protocol::noise::{HandshakeError, LocalIdentity};
use halite_transport::keyfile::{self, KeyFileError};

pub use config::{ConfigError, Enrollment, MinionConfig};
pub use embedded::{run_embedded, EmbeddedMinion};
pub use verified::VerifiedJobs;

/// Why the minion could not start.
#[derive(Debug, thiserror::Error)]
pub enum MinionError {
    /// Config or enrollment file.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A needed setting is missing.
    #[error("{0}")]
    Missing(String),
    /// The state directory.
    #[error("state directory {path}: {source}")]
    StateDir {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key file.
    #[error(transparent)]
    Key(#[from] KeyFileError),
    /// The Noise identity.
    #[error("identity: {0}")]
    Identity(#[from] HandshakeError),
    /// The metrics address could not be listened on.
    #[error("metrics: listen {addr}: {source}")]
    Metrics {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
}

fn parse_master_key(hex_key: &str) -> Result<PublicIdentity, MinionError> {
    let text = hex_key.trim();
    let wrong = || {
        MinionError::Missing(format!(
            "master_key {text:?} is not 64 hex digits (the master's public key: `halite key fingerprint` \
             prints its fingerprint, master.pub holds the key)"
        ))
    };
    let bytes = hex::decode(text).filter(|b| b.len() == 32).ok_or_else(wrong)?;
    PublicIdentity::from_bytes(&bytes).map_err(|e| MinionError::Missing(format!("master_key: {e}")))
}

/// Resolves everything the daemon needs, creating the state directory and key on first start.
fn setup(config: &MinionConfig) -> Result<daemon::Setup, MinionError> {
    let enrollment = Enrollment::load(&config.enrollment_file)?;
    let id = match (&config.id, &enrollment) {
        (Some(id), _) => id.clone(),
        (None, Some(e)) => e.id.clone(),
        (None, None) => nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .ok_or_else(|| MinionError::Missing("id: not set and the hostname is unreadable".into()))?,
    };
    halite_protocol::id::validate(&id).map_err(|e| MinionError::Missing(format!("id: {e}")))?;
    let masters = config
        .master
        .clone()
        .or_else(|| enrollment.as_ref().map(|e| e.master.clone()))
        .ok_or_else(|| MinionError::Missing("master: not set in the config or an enrollment file".into()))?
        .order_for(&id);
    let state_dir = &config.state_dir;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir)
        .map_err(|source| MinionError::StateDir { path: state_dir.clone(), source })?;
    let state_lock = lock_state_dir(state_dir)?;
    let pin_path = state_dir.join("master.pub");
    let master_key = match (&config.master_key, &enrollment) {
        (Some(key), _) => Some(parse_master_key(key)?),
        (None, Some(e)) => Some(parse_master_key(&e.master_key)?),
        (None, None) if pin_path.exists() => Some(keyfile::read_public(&pin_path)?),
        (None, None) if config.trust_on_first_use => None,
        (None, None) => {
            return Err(MinionError::Missing(
                "master_key: no master key to trust; set master_key, provide an enrollment file, \
                 or enable trust_on_first_use"
                    .into(),
            ))
        }
    };
    let key = keyfile::load_or_generate(&state_dir.join("minion.key"))?;
    let outbox =
        outbox::Outbox::open(state_dir).map_err(|source| MinionError::StateDir { path: state_dir.clone(), source })?;
    let (events_tx, events) = tokio::sync::mpsc::channel(256);
    let (peer_tx, peer_requests) = tokio::sync::mpsc::channel(64);
    let (files_tx, file_requests) = tokio::sync::mpsc::channel(64);
    let dispatcher = dispatcher(config);
    Ok(daemon::Setup {
        id,
        masters,
        identity: LocalIdentity::new(key)?,
        master_key,
        pin_path,
        token: enrollment.and_then(|e| e.token),
        context: Context { peer: Some(peer_tx), files: Some(files_tx), ..context(config, Some(events_tx)) },
        events,
        peer_requests,
        file_requests,
        metrics: None,
        dispatcher,
        reloads: None,
        outbox,
        max_concurrent_jobs: config.max_concurrent_jobs,
        verified: None,
        _state_lock: Some(state_lock),
    })
}

/// Takes an exclusive lock on the state directory for the life of the process: two minions on
/// one directory (a second start by mistake, a cloned image run twice on one host) would share
/// one key, markers and outbox, and replace each other's session forever.
fn lock_state_dir(state_dir: &std::path::Path) -> Result<nix::fcntl::Flock<std::fs::File>, MinionError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = state_dir.join("lock");
    let error = |source| MinionError::StateDir { path: path.clone(), source };
    let file =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(&path).map_err(error)?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        if errno == nix::errno::Errno::EWOULDBLOCK {
            MinionError::Missing(format!(
                "another halite-minion is running with the state directory {}; one directory serves one minion",
                state_dir.display()
            ))
        } else {
            error(std::io::Error::from(errno))
        }
    })
}

/// The registry (built-ins plus the custom actions that load) under the configured policy.
/// On SIGHUP, rereads the config file and sends a new dispatcher (policy, custom actions, plans,
/// deploy settings); a file that no longer reads is reported and the running one kept.
fn reload_on_hangup(path: std::path::PathBuf) -> tokio::sync::mpsc::Receiver<Arc<Dispatcher>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
            return tracing::warn!("SIGHUP cannot be caught here; the config is read at start only");
        };
        while hangups.recv().await.is_some() {
            match MinionConfig::load(&path) {
                Ok(config) => {
                    if tx.send(dispatcher(&config)).await.is_err() {
                        return;
                    }
                }
                Err(error) => tracing::error!(%error, "SIGHUP: the config does not read; keeping the running one"),
            }
        }
    });
    rx
}

fn dispatcher(config: &MinionConfig) -> Arc<Dispatcher> {
    let mut registry = Registry::standard();
    for problem in halite_modules::actions::load_into(&mut registry, &config.actions_dir) {
        tracing::warn!(%problem, "custom action skipped");
    }
    Arc::new(Dispatcher {
        registry: Arc::new(registry),
        policy: config.policy.clone(),
        plans_dir: config.plans_dir.clone(),
        deploy: config.deploy.clone(),
        paths: path_guard(config),
    })
}

/// The minion's own secrets, which no function reaches: its state directory (key, pinned
/// master key, journal, lock), its enrollment file and its config file.
fn path_guard(config: &MinionConfig) -> halite_modules::PathGuard {
    let config_file = config.path.clone().unwrap_or_else(|| config::DEFAULT_PATH.into());
    let protected = [config.state_dir.clone(), config.enrollment_file.clone(), config_file];
    halite_modules::PathGuard::new(&protected, config.policy.read_paths.as_deref())
}

fn context(config: &MinionConfig, events: Option<tokio::sync::mpsc::Sender<OutgoingEvent>>) -> Context {
    Context { grains: Arc::new(halite_modules::grains::collect(&config.grains)), events, ..Context::default() }
}

/// Runs the minion until `shutdown` completes.
pub async fn run(config: MinionConfig, shutdown: impl Future<Output = ()>) -> Result<(), MinionError> {
    let mut setup = setup(&config)?;
    if let Some(path) = config.path.clone() {
        setup.reloads = Some(reload_on_hangup(path));
    }
    if let Some(addr) = &config.metrics.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| MinionError::Metrics { addr: addr.clone(), source })?;
        let metrics = metrics::MinionMetrics::default();
        metrics.unacknowledged(setup.outbox.pending_count());
        tracing::info!(addr = %listener.local_addr().map_or(addr.clone(), |a| a.to_string()), "serving metrics");
        tokio::spawn(metrics_http::serve(listener, metrics.clone()));
        setup.metrics = Some(metrics);
    }
    tracing::info!(id = %setup.id, fingerprint = %setup.identity.public().fingerprint(), "minion starting");
    if let Err(error) = halite_transport::notify_ready() {
        tracing::warn!(%error, "could not notify systemd of readiness");
    }
    daemon::serve(setup, shutdown).await;
    Ok(())
}

/// Runs one function locally, without a master (`halite-minion call`), under the same policy
/// as jobs from the master (the caller is `local`).
pub async fn call_local(config: &MinionConfig, function: &str, words: &[String]) -> JobReturn {
    let dispatcher = dispatcher(config);
    let cx = context(config, None);
    let args = Args::from_cli(words);
    let job = Job {
        jid: "local".into(),
        function: function.to_owned(),
        args: args.positional,
        kwargs: args.keyword,
        timeout_ms: 0,
        issued_at_ms: 0,
        ttl_ms: 0,
        caller: "local".into(),
        reach: None,
    };
    let (_keep, never) = tokio::sync::oneshot::channel();
    executor::execute(dispatcher, cx, job, never).await
}

#[cfg(test)]
mod master_key_tests {
    #[test]
    fn a_master_key_of_the_wrong_length_says_64_hex_digits() {
        for bad in ["abcd", "zz", ""] {
            let error = super::parse_master_key(bad).unwrap_err().to_string();
            assert!(error.contains("is not 64 hex digits"), "{bad}: {error}");
        }
    }
}
