//! The halite master daemon: key registry, minion registry and targeting, job dispatch, the
//! event bus, software configs and deployments for orchestration engines (OpenStack Heat's
//! model, `deploy/`), the optional HTTP/JSON gateway (`gateway/`) and the store.
//!
//! It never runs modules itself; minions do. It does not poll minions: everything it learns is
//! pushed over their sessions. [`run`] is the whole daemon; the `halite-master`
//! binary parses flags, sets up logging and signals, and calls it.
//!
//! Layout of the state directory (created 0700):
//!
//! | file | what |
//! |---|---|
//! | `master.key` | the master's identity (0600) |
//! | `master.pub` | its public half, for minions and clients to pin |
//! | `root.key` | the root client principal's key (0600): whoever can read it is root |
//! | `master.addr` | the address actually bound, written at start |
//! | `master.db` | the SQLite store |
//! | `gateway.addr` | the HTTP gateway's bound address, when it is on |

pub use halite_master_core::acl;
use halite_master_core::calls;
pub mod clock;
use halite_master_core::cluster;
mod cluster_identity;
use halite_master_core::cluster_jobs;
pub use halite_master_core::config;
use halite_master_core::core;
use halite_master_core::deploy;
use halite_master_core::file_reads;
use halite_master_core::file_scope;
pub mod files;
mod files_beneath;
pub mod gateway;
mod handover;
use halite_master_core::keys;
mod local_queue;
use halite_master_core::local_sessions;
pub mod memory;
pub use halite_master_core::metrics;
mod metrics_http;
pub mod net;
use halite_master_core::outputs;
mod relay;
use halite_master_core::relay_requests;
mod server;
mod store_calls;
pub use halite_master_core::tenants;
use halite_master_core::token_sessions;
pub use halite_store as store;
/// Target expressions: the parser and matcher live in `halite-targeting`.
pub use halite_targeting as target;
#[cfg(test)]
use server::sim;

use std::future::Future;
use std::os::unix::fs::DirBuilderExt;

use halite_protocol::identity::PublicIdentity;
use halite_protocol::noise::{HandshakeError, LocalIdentity};
use halite_transport::keyfile::{self, KeyFileError};
use halite_transport::{Router, RouterConfig};

pub use cluster_identity::{certify, init_cluster_key, revoke};
pub use config::MasterConfig;
pub use server::Master;
pub use store::{SqliteStore, Store};

/// Why the master could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum MasterError {
    /// The state directory could not be created.
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
    /// The Noise identity could not be set up.
    #[error("identity: {0}")]
    Identity(#[from] HandshakeError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The database is damaged, or its schema is not one this master knows.
    #[error("database {place}: {error}")]
    Database {
        /// The file, or the server's address.
        place: String,
        /// What the check found.
        error: store::StoreError,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// The HTTP gateway could not start.
    #[error(transparent)]
    Gateway(#[from] gateway::GatewayError),
    /// The cluster key, this master's certificate or the revocations.
    #[error("cluster identity: {0}")]
    Cluster(String),
    /// The store holds tenants whose namespaces overlap.
    #[error(transparent)]
    Tenants(#[from] tenants::StoredTenantsError),
    /// A tenant name given on the command line.
    #[error(transparent)]
    TenantName(#[from] halite_protocol::message::TenantNameError),
}

/// The master's keys, created on first start.
pub struct Keys {
    /// The master's identity.
    pub identity: LocalIdentity,
    /// The root principal's public key.
    pub root: PublicIdentity,
}

/// Creates the state directory and keys if missing (first start), and loads them.
pub fn init(config: &MasterConfig) -> Result<Keys, MasterError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&config.state_dir)
        .map_err(|source| MasterError::StateDir { path: config.state_dir.clone(), source })?;
    tighten_state_dir(&config.state_dir)?;
    let key = keyfile::load_or_generate(&config.key_path())?;
    if !config.public_key_path().exists() {
        keyfile::write_public(&config.public_key_path(), &key.public())?;
    }
    let root = keyfile::load_or_generate(&config.root_key_path())?.public();
    Ok(Keys { identity: LocalIdentity::new(key)?, root })
}

/// [`init`], with this master's cluster certificate when it has one (checked, with the
/// configured revocations): the identity it serves with.
pub fn init_serving(config: &MasterConfig) -> Result<Keys, MasterError> {
    let keys = init(config)?;
    Ok(Keys { identity: cluster_identity::certified(config, keys.identity)?, root: keys.root })
}

/// The state directory holds job arguments and results: a directory that group or others can
/// read (made by hand, or by an older package) is tightened to 0700, with a warning.
fn tighten_state_dir(dir: &std::path::Path) -> Result<(), MasterError> {
    use std::os::unix::fs::PermissionsExt;
    let error = |source| MasterError::StateDir { path: dir.to_owned(), source };
    let mode = std::fs::metadata(dir).map_err(error)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        tracing::warn!(dir = %dir.display(), mode = format!("{mode:o}"), "state directory was readable by others; set to 0700");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(error)?;
    }
    Ok(())
}

/// Runs the master until `shutdown` completes.
///
/// The core runs as a task of the runtime, not on the thread that awaits `run`: a message
/// then passes from its connection task to the core (and back) on one worker, most often
/// without waking another thread (a round trip's cost on a small machine is its wake-ups).
pub async fn run(config: MasterConfig, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), MasterError> {
    let ran_before = config.key_path().exists();
    let keys = init_serving(&config)?;
    match config.store.backend()? {
        store::Backend::Sqlite => {
            let database = config.database_path();
            check_database_present(&database, ran_before, config.init)?;
            let place = database.display().to_string();
            let mut shutdown = Box::pin(shutdown);
            // Another process holding the database's lock (a backup, an operator's sqlite3):
            // waited for, as PostgreSQL is; anything else is an error at once.
            let open = || SqliteStore::open_with(&database, config.accept_wal_loss);
            let Some(store) = open_retrying(&place, shutdown.as_mut(), open, store::sqlite_busy).await? else {
                return Ok(());
            };
            let closer = store.clone();
            let served = on_a_worker(serve(config, keys, store, place, shutdown)).await;
            // `serve` closes the store when it stops; on an early error it is closed here, so
            // the database is always left marked closed with its log folded in.
            closer.close().await;
            served
        }
        store::Backend::Postgres(options) => {
            let place = store::describe_postgres(&options);
            let mut shutdown = Box::pin(shutdown);
            let connect = || store::PostgresStore::connect((*options).clone());
            let unreachable = |error: &store::StoreError| matches!(error, store::StoreError::Unavailable(_));
            let Some(store) = open_retrying(&place, shutdown.as_mut(), connect, unreachable).await? else {
                return Ok(());
            };
            let closer = store.clone();
            let served = on_a_worker(serve(config, keys, store, place, shutdown)).await;
            closer.close().await;
            served
        }
    }
}

/// A master that ran before (its key exists) and finds its database missing or empty has
/// lost its store (a restore gone wrong, a full disk truncating the file): starting empty would
/// forget every key, job and deployment without a word. That takes `--init`. A zero-length file
/// is refused even on a first start: SQLite never leaves one, something else did.
fn check_database_present(database: &std::path::Path, ran_before: bool, init: bool) -> Result<(), MasterError> {
    if init {
        return Ok(());
    }
    let length = match std::fs::metadata(database) {
        Ok(meta) => Some(meta.len()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => {
            let error = store::StoreError::Unavailable(error.to_string());
            return Err(MasterError::Database { place: database.display().to_string(), error });
        }
    };
    let problem = match length {
        Some(0) => "is empty (zero bytes)",
        None if ran_before => "is missing, but this master ran before (its key exists)",
        _ => return Ok(()),
    };
    let error = store::StoreError::Corrupt(format!(
        "{problem}: restore it from a backup, or start once with `halite-master --init` to begin with an empty store"
    ));
    Err(MasterError::Database { place: database.display().to_string(), error })
}

/// Runs `task` as a task of the runtime and waits for it; its panic is this caller's. (It is
/// cancelled only when the runtime shuts down, which drops this caller first.)
async fn on_a_worker<T: Send + 'static>(task: impl Future<Output = T> + Send + 'static) -> T {
    match tokio::spawn(task).await {
        Ok(value) => value,
        Err(error) => std::panic::resume_unwind(error.into_panic()),
    }
}

/// Copies the SQLite store in `config`'s state directory into the empty PostgreSQL database
/// `target` names (`halite-master migrate-store`).
pub async fn migrate_store(config: &MasterConfig, target: &store::StoreConfig) -> Result<store::Copied, MasterError> {
    if !matches!(target.backend()?, store::Backend::Postgres(_)) {
        return Err(MasterError::Store(store::StoreError::Conflict("the target must be a postgres:// URL".into())));
    }
    let database = config.database_path();
    if !database.exists() {
        return Err(MasterError::Database {
            place: database.display().to_string(),
            error: store::StoreError::Unavailable("no such file: nothing to migrate".into()),
        });
    }
    let keys = init_serving(config)?;
    // The source is only read: a consistent copy of it is made beside it through a read-only
    // connection, and that copy is migrated and copied, then removed.
    let snapshot = migration_snapshot(&database);
    remove_snapshot(&snapshot);
    let from = async {
        SqliteStore::snapshot(&database, &snapshot, config.accept_wal_loss).await?;
        SqliteStore::open_with(&snapshot, true).await
    }
    .await
    .map_err(|error| {
        remove_snapshot(&snapshot);
        MasterError::Database { place: database.display().to_string(), error }
    })?;
    let copied = copy_snapshot(config, &keys, &from, target).await;
    from.close().await;
    remove_snapshot(&snapshot);
    copied
}

/// Where `migrate-store` keeps its copy of `database` while it runs.
fn migration_snapshot(database: &std::path::Path) -> std::path::PathBuf {
    let name = database.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    database.with_file_name(format!(".{name}.migrating"))
}

/// Removes the copy and what SQLite kept beside it.
fn remove_snapshot(snapshot: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut path = snapshot.as_os_str().to_owned();
        path.push(suffix);
        let _ = std::fs::remove_file(std::path::PathBuf::from(path));
    }
}

/// Signs the copy's rows that predate signatures (as this master's start would) and copies
/// it into the PostgreSQL store of `target`.
async fn copy_snapshot(
    config: &MasterConfig,
    keys: &Keys,
    from: &SqliteStore,
    target: &store::StoreConfig,
) -> Result<store::Copied, MasterError> {
    let store::Backend::Postgres(options) = target.backend()? else {
        return Err(MasterError::Store(store::StoreError::Conflict("the target must be a postgres:// URL".into())));
    };
    let database = config.database_path();
    let now_ms = clock::Clock::wall_ms(&clock::SystemClock);
    let key = halite_protocol::identity::IdentityKey::from_seed(keys.identity.key().seed());
    let trust = store::trust::Trust::new(key, keys.identity.certificate().cloned(), &config.id, Vec::new());
    from.set_trust(trust, now_ms)
        .await
        .map_err(|error| MasterError::Database { place: database.display().to_string(), error })?;
    let place = store::describe_postgres(&options);
    async {
        let to = store::PostgresStore::connect(*options).await?;
        let copied = store::sqlite_to_postgres(from, &to).await;
        to.close().await;
        copied
    }
    .await
    .map_err(|error| MasterError::Database { place, error })
}

/// Renames the tenant `from` to `to` (a name without `-`) in every principal confined to it,
/// on the store of `config` (`halite-master tenant rename`, the master stopped): how a store
/// holding overlapping tenants is repaired. Returns the principals renamed.
pub async fn rename_tenant(config: &MasterConfig, from: &str, to: &str) -> Result<Vec<String>, MasterError> {
    halite_protocol::message::validate_tenant(to)?;
    match config.store.backend()? {
        store::Backend::Sqlite => {
            let database = config.database_path();
            check_database_present(&database, config.key_path().exists(), false)?;
            let store = SqliteStore::open_with(&database, config.accept_wal_loss)
                .await
                .map_err(|error| MasterError::Database { place: database.display().to_string(), error })?;
            let renamed = rename_tenant_in(&store, config, from, to).await;
            store.close().await;
            renamed
        }
        store::Backend::Postgres(options) => {
            let place = store::describe_postgres(&options);
            let store = store::PostgresStore::connect(*options)
                .await
                .map_err(|error| MasterError::Database { place: place.clone(), error })?;
            let renamed = rename_tenant_in(&store, config, from, to).await;
            store.close().await;
            renamed
        }
    }
}

async fn rename_tenant_in<S: Store>(
    store: &S,
    config: &MasterConfig,
    from: &str,
    to: &str,
) -> Result<Vec<String>, MasterError> {
    // The rows are written signed by this master's key, as the master itself would.
    let keys = init_serving(config)?;
    let now_ms = clock::Clock::wall_ms(&clock::SystemClock);
    let key = halite_protocol::identity::IdentityKey::from_seed(keys.identity.key().seed());
    let trust = store::trust::Trust::new(key, keys.identity.certificate().cloned(), &config.id, Vec::new());
    store.set_trust(trust, now_ms).await?;
    let mut renamed = Vec::new();
    for mut principal in store.principals().await? {
        if principal.acl.tenant.as_deref() == Some(from) {
            principal.acl.tenant = Some(to.to_owned());
            store.put_principal(&principal, now_ms).await?;
            renamed.push(principal.name);
        }
    }
    Ok(renamed)
}

/// Opens the store, retrying every 2 s while `waits_for` says the error is one to wait out (a
/// master may start before its database, at boot or while the database fails over, or while
/// another process holds a SQLite database's lock), logging `store unreachable` from the first
/// attempt; `None` if shut down meanwhile. Any other error (a schema this master does not
/// know, a corrupt file) is an error at once.
async fn open_retrying<S, F, Fut>(
    place: &str,
    mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
    open: F,
    waits_for: impl Fn(&store::StoreError) -> bool,
) -> Result<Option<S>, MasterError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<S, store::StoreError>>,
{
    const RETRY: std::time::Duration = std::time::Duration::from_secs(2);
    loop {
        let started = clock::Clock::now(&clock::SystemClock);
        match open().await {
            Ok(store) => {
                tracing::info!(store = %place, "store connected");
                return Ok(Some(store));
            }
            Err(error) if waits_for(&error) => {
                tracing::warn!(store = %place, %error, retry_in = ?RETRY, "store unreachable");
            }
            Err(error) => return Err(MasterError::Database { place: place.to_owned(), error }),
        }
        // Tried every RETRY, however long the failed attempt took.
        tokio::select! {
            () = tokio::time::sleep(RETRY.saturating_sub(clock::Clock::now(&clock::SystemClock) - started)) => {}
            () = shutdown.as_mut() => return Ok(None),
        }
    }
}

/// Descriptors kept for the master's own use whatever the peers take: the store's files and
/// connections, the gateway's and the metrics endpoint's clients, files being served.
const DESCRIPTOR_RESERVE: u64 = 512;

/// How many peer connections the master holds at most: its open-file limit less
/// [`DESCRIPTOR_RESERVE`], so a fleet larger than the limit allows is refused at the door (its
/// minions try again, or another master) instead of taking the store's descriptors.
fn connection_budget() -> usize {
    halite_transport::open_files_limit().map_or(usize::MAX, |limit| {
        usize::try_from(limit.saturating_sub(DESCRIPTOR_RESERVE).max(64)).unwrap_or(usize::MAX)
    })
}

async fn serve<S: Store + Clone>(
    mut config: MasterConfig,
    keys: Keys,
    store: S,
    place: String,
    shutdown: impl Future<Output = ()>,
) -> Result<(), MasterError> {
    // A damaged database is refused, never half-used.
    store.check().await.map_err(|error| MasterError::Database { place, error })?;
    let max_connections = connection_budget();
    let router_config = RouterConfig {
        // Handshakes in flight never take more than half the connections: the rest stay for
        // peers that were admitted.
        max_pending_total: config.max_pending_handshakes.min(max_connections / 2).max(1),
        max_pending_per_ip: config.max_pending_handshakes_per_ip,
        event_queue_bytes: config.max_receive_buffer_bytes,
        send_queue_bytes: config.max_peer_queue_bytes,
        max_connections,
        ..RouterConfig::default()
    };
    let router = Router::bind(&config.listen, router_config)
        .await
        .map_err(|source| MasterError::Listen { addr: config.listen.clone(), source })?;
    let addr = router.local_addr();
    std::fs::write(config.address_path(), format!("{addr}\n"))
        .map_err(|source| MasterError::StateDir { path: config.address_path(), source })?;
    tracing::info!(%addr, fingerprint = %keys.identity.public().fingerprint(), "master listening");
    if let Err(error) = halite_transport::notify_ready() {
        tracing::warn!(%error, "could not notify systemd of readiness");
    }
    let gateway_config = config.gateway.clone();
    let metrics_config = config.metrics.clone();
    let metrics_addr_path = config.state_dir.join("metrics.addr");
    let gateway_addr_path = config.state_dir.join("gateway.addr");
    // With other masters on the store, the store's time is the time (see `ClusterClock`).
    let clock: std::sync::Arc<dyn clock::Clock> = match store.clock_offset() {
        Some(offset) => std::sync::Arc::new(clock::ClusterClock::new(offset)),
        None => std::sync::Arc::new(clock::SystemClock),
    };
    // Bound before the master registers in the store: where it answers its readiness is
    // part of its registration (`[cluster] advertise_ready`).
    let metrics_listener = match &metrics_config.listen {
        Some(listen) => {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|source| MasterError::Listen { addr: listen.clone(), source })?;
            if let Ok(addr) = listener.local_addr() {
                std::fs::write(&metrics_addr_path, format!("{addr}\n"))
                    .map_err(|source| MasterError::StateDir { path: metrics_addr_path.clone(), source })?;
                tracing::info!(url = %format!("http://{addr}/metrics"), "metrics listening");
                config.cluster.advertise_ready = config.cluster.advertise_ready.or_else(|| readiness_url(addr));
            }
            Some(listener)
        }
        None => None,
    };
    let master = Master::new(config, keys.identity, keys.root, router, store, clock).await?;
    master.check_tenants()?;
    let metrics_listener = metrics_listener
        .map(|listener| tokio::spawn(gateway::serve_plain(listener, metrics_http::router(master.metrics()))));
    let enrollment = gateway::fleet::Enrollment { master_key_hex: master.pinned_key_hex(), listen: addr.to_string() };
    let gateway =
        match gateway::Gateway::bind(&gateway_config, master.local_commands(), master.metrics(), enrollment).await? {
            Some(gateway) => {
                if let Some(addr) = gateway.local_addr() {
                    std::fs::write(&gateway_addr_path, format!("{addr}\n"))
                        .map_err(|source| MasterError::StateDir { path: gateway_addr_path.clone(), source })?;
                    let scheme = if gateway_config.tls_cert.is_some() { "https" } else { "http" };
                    tracing::info!(url = %format!("{scheme}://{addr}/v1/"), "gateway listening");
                }
                Some(tokio::spawn(gateway.serve()))
            }
            None => None,
        };
    let served = master.serve(shutdown).await;
    for server in [gateway, metrics_listener].into_iter().flatten() {
        server.abort();
    }
    served?;
    Ok(())
}

/// Where the other masters reach the readiness of a master whose metrics listen on `addr`:
/// that address, or this host's name for an address that stands for all of them.
fn readiness_url(addr: std::net::SocketAddr) -> Option<String> {
    let host = if addr.ip().is_unspecified() {
        nix::unistd::gethostname().ok()?.into_string().ok().filter(|host| !host.is_empty())?
    } else if addr.is_ipv6() {
        format!("[{}]", addr.ip())
    } else {
        addr.ip().to_string()
    };
    Some(format!("http://{host}:{}/readyz", addr.port()))
}

#[cfg(test)]
mod tests {
    use super::check_database_present;

    #[test]
    fn a_master_is_asked_its_readiness_where_its_metrics_listen() {
        let url = |addr: &str| super::readiness_url(addr.parse().unwrap()).unwrap();
        assert_eq!(url("10.0.0.2:9506"), "http://10.0.0.2:9506/readyz");
        assert_eq!(url("[fd00::2]:9506"), "http://[fd00::2]:9506/readyz");
        let every = url("0.0.0.0:9506");
        assert!(
            every.starts_with("http://") && every.ends_with(":9506/readyz") && !every.contains("0.0.0.0"),
            "{every}"
        );
    }

    #[test]
    fn a_missing_or_empty_database_of_a_master_that_ran_before_takes_init() {
        let dir = std::env::temp_dir().join(format!("halite-db-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("master.db");
        let _ = std::fs::remove_file(&db);
        // First start: no key yet, no database yet.
        assert!(check_database_present(&db, false, false).is_ok());
        let missing = check_database_present(&db, true, false).unwrap_err().to_string();
        assert!(missing.contains("is missing") && missing.contains("--init"), "{missing}");
        assert!(check_database_present(&db, true, true).is_ok());
        std::fs::write(&db, b"").unwrap();
        for ran_before in [false, true] {
            let empty = check_database_present(&db, ran_before, false).unwrap_err().to_string();
            assert!(empty.contains("is empty") && empty.contains("--init"), "{empty}");
        }
        assert!(check_database_present(&db, true, true).is_ok());
        std::fs::write(&db, b"SQLite format 3\0").unwrap();
        assert!(check_database_present(&db, true, false).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
