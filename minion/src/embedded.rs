//! Minions embedded in another process: the swarm runs thousands in one, each with its own
//! identity, Noise session, TCP connection and outbox, through the same connection loop,
//! executor and dispatcher as the daemon.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use halite_modules::{Context, Dispatcher};
use halite_protocol::identity::{IdentityKey, PublicIdentity};
use halite_protocol::message::Value;
use halite_protocol::noise::LocalIdentity;

use crate::{daemon, outbox, MinionError};

/// One embedded minion.
pub struct EmbeddedMinion {
    /// Minion id.
    pub id: String,
    /// Master addresses, `host:port`, in the order to try them (a cluster's masters).
    pub masters: Vec<String>,
    /// Its identity key.
    pub key: IdentityKey,
    /// The master key it trusts.
    pub master_key: PublicIdentity,
    /// A one-time enrollment token, if it enrolls by token.
    pub token: Option<String>,
    /// Its own state directory (outbox and at-most-once markers).
    pub state_dir: PathBuf,
    /// Functions and policy; one can be shared by every embedded minion.
    pub dispatcher: Arc<Dispatcher>,
    /// Grains announced; one map can be shared.
    pub grains: Arc<BTreeMap<String, Value>>,
    /// Jobs run at once.
    pub max_concurrent_jobs: usize,
    /// Verified jobs shared by the process's minions (see [`crate::VerifiedJobs`]); `None`
    /// verifies every job in every minion.
    pub verified: Option<Arc<crate::VerifiedJobs>>,
}

/// Runs one embedded minion until `shutdown` completes.
pub async fn run_embedded(minion: EmbeddedMinion, shutdown: impl Future<Output = ()>) -> Result<(), MinionError> {
    let state_dir = minion.state_dir;
    // Creates the state directory too.
    let outbox =
        outbox::Outbox::open(&state_dir).map_err(|source| MinionError::StateDir { path: state_dir.clone(), source })?;
    let (events_tx, events) = tokio::sync::mpsc::channel(16);
    let (peer_tx, peer_requests) = tokio::sync::mpsc::channel(4);
    let (files_tx, file_requests) = tokio::sync::mpsc::channel(4);
    let setup = daemon::Setup {
        id: minion.id,
        masters: minion.masters,
        identity: LocalIdentity::new(minion.key)?,
        master_key: Some(minion.master_key),
        pin_path: state_dir.join("master.pub"),
        token: minion.token,
        context: Context {
            grains: minion.grains,
            events: Some(events_tx),
            peer: Some(peer_tx),
            files: Some(files_tx),
            ..Context::default()
        },
        events,
        peer_requests,
        file_requests,
        metrics: None,
        dispatcher: minion.dispatcher,
        reloads: None,
        outbox,
        max_concurrent_jobs: minion.max_concurrent_jobs,
        _state_lock: None,
        verified: minion.verified,
    };
    daemon::serve(setup, shutdown).await;
    Ok(())
}
