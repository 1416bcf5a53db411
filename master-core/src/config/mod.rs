//! The master's TOML configuration: the file read, each section parsed and checked when it is
//! read, and what each part of the master reads of it. Sections with checks of their own are
//! beside it (`gateway.rs`, `files.rs`, `signal_hosts.rs`); no other part of the master is
//! named here.

pub mod files;
pub mod gateway;
pub mod signal_hosts;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::acl::{EventRule, PeerRule};

/// Default config file.
pub const DEFAULT_PATH: &str = "/etc/halite/master.toml";

pub use halite_transport::config_file::ConfigError;
pub use signal_hosts::BadSignalHost;

/// What is wrong in a master's config text; the message names the key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MasterConfigError {
    /// Not TOML, an unknown key, or a value of the wrong type.
    #[error("{}", .0.to_string().trim_end())]
    Toml(toml::de::Error),
    /// `id` is not a valid node name.
    #[error("id: {0}")]
    Id(halite_protocol::id::IdError),
    /// `[gateway]` is invalid.
    #[error("gateway: {0}")]
    Gateway(gateway::GatewayConfigError),
    /// `[deploy] signal_hosts` has an invalid entry.
    #[error("deploy: {0}")]
    Deploy(BadSignalHost),
    /// `metrics.listen` is not an address.
    #[error("metrics: listen: {0:?} is not an ip:port address")]
    MetricsListen(String),
    /// A nodegroup that does not parse (or names a nodegroup that does not).
    #[error("nodegroups: {name}: {error}")]
    Nodegroup {
        /// The nodegroup.
        name: String,
        /// Why.
        error: halite_targeting::TargetError,
    },
    /// A `[cluster]` readiness URL is not an http(s) URL.
    #[error("cluster: {0:?} is not an http:// or https:// URL")]
    ReadyUrl(String),
    /// `[store] url` is invalid.
    #[error("store: {0}")]
    Store(crate::store::StoreUrlError),
    /// An entry of `revoked_masters` (its index) is not a revocation.
    #[error("revoked_masters[{0}]: {1}")]
    Revocation(usize, halite_protocol::noise::HandshakeError),
    /// `log` is not a filter.
    #[error("log: {0}")]
    Log(halite_transport::logging::LogError),
    /// A handshake limit is 0.
    #[error("max_pending_handshakes, max_pending_handshakes_per_ip: must be at least 1")]
    NoHandshakes,
    /// The pending-key rate admits nothing.
    #[error("pending_keys_per_sec, pending_keys_burst: must be above 0 and at least 1")]
    NoPendingKeys,
}

/// `[metrics]`: where `GET /metrics`, `/healthz` and `/readyz` are served (plain HTTP, no
/// authentication: the figures are counts, no job data).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Address to listen on, e.g. `127.0.0.1:9506`; off when unset.
    pub listen: Option<String>,
}

/// `[cluster]`: what a master of several on one store does when it alone cannot reach it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Where the other masters ask this one's readiness (`http://HOST:PORT/readyz`), recorded
    /// in the store. Unset (the default): `[metrics] listen`'s address, its host name when it
    /// listens on every address; nothing without `[metrics] listen`.
    pub advertise_ready: Option<String>,
    /// Readiness URLs to ask besides those the other masters recorded in the store (for a
    /// master that cannot be asked where it says, behind a proxy or NAT). A master that has not
    /// reached the store for `handover_after_secs` asks them all, from the list it read last;
    /// while one answers ready, it hands its minions over (closes their sessions, a thousand a
    /// second, and a minion given several masters moves to the next). When none does (the
    /// database is down for everyone), nobody moves.
    pub peers_ready: Vec<String>,
    /// How long the store must have been unreachable before the peers are asked.
    pub handover_after_secs: u64,
}

/// `[nodegroups]`: each a string or a list of words, made the expression Salt makes of it.
fn nodegroups<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<BTreeMap<String, String>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged, expecting = "a compound expression or a list of words")]
    enum Group {
        Expression(String),
        Words(Vec<String>),
    }
    let groups: BTreeMap<String, Group> = serde::Deserialize::deserialize(deserializer)?;
    Ok(groups
        .into_iter()
        .map(|(name, group)| {
            let expression = match group {
                Group::Expression(text) => {
                    halite_targeting::nodegroup_expression(&text.split_whitespace().collect::<Vec<_>>())
                }
                Group::Words(words) => halite_targeting::nodegroup_expression(&words),
            };
            (name, expression)
        })
        .collect())
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig { advertise_ready: None, peers_ready: Vec::new(), handover_after_secs: 30 }
    }
}

/// `[deploy]`: software deployments.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeployConfig {
    /// The hosts the master may relay deployment signals to (`signal_id` URLs): host names or
    /// `host:port`, IP addresses, CIDR ranges. Loopback, link-local, private and other special
    /// addresses are reached only when an IP entry or range lists them. Empty (the default):
    /// no signal is relayed, and a deployment with a `signal_id` is refused.
    pub signal_hosts: Vec<String>,
}

/// Master settings. Every field has a default except where noted.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MasterConfig {
    /// The master's id, sent to peers in the handshake.
    pub id: String,
    /// Address to listen on.
    pub listen: String,
    /// Where keys, the database and the client key live.
    pub state_dir: PathBuf,
    /// Jobs older than this many hours are deleted with their returns.
    pub keep_jobs_hours: u64,
    /// Seconds a peer has to complete the Noise handshake after connecting.
    pub handshake_timeout_secs: u64,
    /// Extra seconds the master waits past a job's timeout for the minion's own timeout report
    /// before marking it timed out itself.
    pub timeout_grace_secs: u64,
    /// How far this host's clock may be from a shared store's before the master warns (it
    /// uses the store's time either way).
    pub max_clock_offset_secs: u64,
    /// Named compound targets, used with `-N` and `N@`: a compound expression, or a list of
    /// words as Salt's master config writes them (`web = ["host1", "host2"]`, turned into
    /// `L@host1,host2` as Salt turns it), kept as the expression halite parses.
    #[serde(deserialize_with = "nodegroups")]
    pub nodegroups: BTreeMap<String, String>,
    /// Which events which minions may send (`[[events]]`); none by default.
    pub events: Vec<EventRule>,
    /// Which jobs which minions may publish on other minions (`[[peers]]`); none by default.
    pub peers: Vec<PeerRule>,
    /// Connections still in the handshake, at most, in total (more are closed at once and
    /// retry with backoff).
    pub max_pending_handshakes: usize,
    /// The same, from one IP address. Raise it for many minions behind one address (NAT, or a
    /// load-test swarm on loopback).
    pub max_pending_handshakes_per_ip: usize,
    /// Most minion keys pending acceptance at once; more are refused until an administrator
    /// accepts, rejects or deletes some (an unauthenticated flood cannot fill the registry).
    pub max_pending_keys: u64,
    /// New unknown keys recorded per second, on average; faster arrivals are told to retry
    /// later (a handshake flood cannot fill the registry in seconds).
    pub pending_keys_per_sec: f64,
    /// How many new keys may arrive at once before the rate applies.
    pub pending_keys_burst: f64,
    /// Largest grains a minion may announce, in bytes of JSON; larger grains are refused and
    /// the ones stored before are kept (grains of every minion stay in memory).
    pub max_grains_bytes: usize,
    /// Largest job return kept, in encoded bytes; a larger one is stored as failed with a note
    /// instead of its outputs. The default (15.5 MiB) is what still fits, wrapped, in one
    /// message to a client.
    pub max_return_bytes: usize,
    /// Bytes of received messages the master buffers before it stops reading from peers (all
    /// connections together): with the decoder's value count and the caps above, what bounds
    /// the memory peers can make the master use.
    pub max_receive_buffer_bytes: usize,
    /// Bytes queued for one peer (a slow subscriber, a minion behind a slow link) before more
    /// messages to it are dropped or, for a watcher, counted as missed.
    pub max_peer_queue_bytes: usize,
    /// How long a deployment waits for its server to connect before it fails.
    pub deployment_ttl_secs: u64,
    /// How long a deployment's DELETE waits for a server that has a key but is not connected
    /// before it fails (a server without an accepted key is skipped at once).
    pub deployment_delete_wait_secs: u64,
    /// How long a deployment waits for a server that, when the deployment is made, has no key
    /// of any state and no outstanding enrollment token (a name nobody enrolls as, such as a
    /// Nova server named unlike its enrollment's `server_name`) before it fails.
    pub deployment_unenrolled_wait_secs: u64,
    /// How long a deployment's hook may run when the deployment gives no `timeout_secs`.
    pub deployment_timeout_secs: u64,
    /// Software deployments (`[deploy]`): where signals may be relayed.
    pub deploy: DeployConfig,
    /// The HTTP/JSON gateway for engines (`[gateway]`); off unless `listen` is set.
    pub gateway: gateway::GatewayConfig,
    /// Prometheus metrics and health checks (`[metrics]`); off unless `listen` is set.
    pub metrics: MetricsConfig,
    /// Handing minions over when this master alone cannot reach the store (`[cluster]`).
    pub cluster: ClusterConfig,
    /// Files served to minions as `halite://` (`[files]`); off unless `root` is set.
    pub files: files::FilesConfig,
    /// How long the audit trail keeps its records (`[audit]`).
    pub audit: AuditConfig,
    /// Master keys the cluster key revoked (`halite-master cluster revoke` prints each), told
    /// to every minion in `welcome`; a minion refuses those masters from then on.
    pub revoked_masters: Vec<String>,
    /// Where state is kept (`[store]`): SQLite in the state directory unless `url` names a
    /// PostgreSQL database.
    pub store: crate::store::StoreConfig,
    /// Log level or filter: `info`, Salt's `warning`, or per target as in
    /// `halite_master=debug,info`. `RUST_LOG`, when set, wins.
    pub log: String,
    /// `text` (colour only on a terminal) or `json` (one object per line).
    pub log_format: halite_transport::logging::LogFormat,
    /// Start on a database whose write-ahead log is missing after an unclean stop, accepting
    /// the loss of what only the log held (`halite-master --accept-wal-loss`; never read
    /// from the file).
    #[serde(skip)]
    pub accept_wal_loss: bool,
    /// Begin with an empty store although this master ran before (its key exists) and its
    /// database is missing or empty (`halite-master --init`; never read from the file).
    #[serde(skip)]
    pub init: bool,
    /// The file it was read from (SIGHUP rereads its rules); never read from the file.
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

impl Default for MasterConfig {
    fn default() -> Self {
        MasterConfig {
            id: "master".into(),
            listen: "0.0.0.0:4506".into(),
            state_dir: PathBuf::from("/var/lib/halite/master"),
            keep_jobs_hours: 24 * 7,
            handshake_timeout_secs: 10,
            timeout_grace_secs: 5,
            max_clock_offset_secs: 5,
            nodegroups: BTreeMap::new(),
            events: Vec::new(),
            peers: Vec::new(),
            max_pending_handshakes: 4096,
            max_pending_handshakes_per_ip: 256,
            max_pending_keys: 1000,
            pending_keys_per_sec: 10.0,
            pending_keys_burst: 100.0,
            max_grains_bytes: 64 * 1024,
            max_return_bytes: crate::limits::DEFAULT_MAX_RETURN,
            max_receive_buffer_bytes: 256 * 1024 * 1024,
            max_peer_queue_bytes: 32 * 1024 * 1024,
            deployment_ttl_secs: 24 * 3600,
            deployment_delete_wait_secs: 300,
            deployment_unenrolled_wait_secs: 600,
            deployment_timeout_secs: 3600,
            deploy: DeployConfig::default(),
            gateway: gateway::GatewayConfig::default(),
            metrics: MetricsConfig::default(),
            cluster: ClusterConfig::default(),
            files: files::FilesConfig::default(),
            audit: AuditConfig::default(),
            store: crate::store::StoreConfig::default(),
            revoked_masters: Vec::new(),
            log: "info".into(),
            log_format: halite_transport::logging::LogFormat::Text,
            accept_wal_loss: false,
            init: false,
            path: None,
        }
    }
}

impl MasterConfig {
    /// How long a connection may take to finish its handshake.
    pub fn handshake_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.handshake_timeout_secs)
    }

    /// The master keys `revoked_masters` names (entries that do not read are left out: the
    /// rules were checked when read, `cluster_identity::check_revocations_of`).
    pub fn revoked_keys(&self) -> impl Iterator<Item = halite_protocol::identity::PublicIdentity> + '_ {
        self.revoked_masters
            .iter()
            .filter_map(|text| halite_protocol::noise::Revocation::from_hex(text).ok())
            .map(|revocation| revocation.master)
    }

    /// Whether `revoked_masters` names `key`: what a master revoked signs is not taken, an
    /// announcement that waited across the reread included. Read from the rules each time: a
    /// handful of entries, most often none.
    pub fn revokes(&self, key: &halite_protocol::identity::PublicIdentity) -> bool {
        self.revoked_keys().any(|revoked| revoked == *key)
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let mut config = halite_transport::config_file::load(path, Self::parse)?;
        files::check_root(&config)
            .map_err(|e| ConfigError::Invalid { path: path.to_owned(), message: e.to_string() })?;
        config.path = Some(path.to_owned());
        Ok(config)
    }

    /// Parses config text; the error names the bad key.
    pub fn parse(text: &str) -> Result<Self, MasterConfigError> {
        use MasterConfigError as E;
        let config: MasterConfig = toml::from_str(text).map_err(E::Toml)?;
        halite_protocol::id::validate(&config.id).map_err(E::Id)?;
        config.gateway.validate().map_err(E::Gateway)?;
        signal_hosts::SignalHosts::parse(&config.deploy.signal_hosts).map_err(E::Deploy)?;
        if let Some(listen) = &config.metrics.listen {
            listen.parse::<std::net::SocketAddr>().map_err(|_| E::MetricsListen(listen.clone()))?;
        }
        // Each nodegroup parses now, not when a target or an ACL rule first names it.
        for name in config.nodegroups.keys() {
            let kind = halite_protocol::message::TargetKind::Nodegroup;
            halite_targeting::Expr::parse(kind, name, &config.nodegroups)
                .map_err(|error| E::Nodegroup { name: name.clone(), error })?;
        }
        for url in config.cluster.peers_ready.iter().chain(&config.cluster.advertise_ready) {
            let parsed = url::Url::parse(url).map_err(|_| E::ReadyUrl(url.clone()))?;
            if !matches!(parsed.scheme(), "http" | "https") || !parsed.has_host() {
                return Err(E::ReadyUrl(url.clone()));
            }
        }
        config.store.validate().map_err(E::Store)?;
        for (i, text) in config.revoked_masters.iter().enumerate() {
            halite_protocol::noise::Revocation::from_hex(text).map_err(|error| E::Revocation(i, error))?;
        }
        halite_transport::logging::translate(&config.log).map_err(E::Log)?;
        if config.max_pending_handshakes == 0 || config.max_pending_handshakes_per_ip == 0 {
            return Err(E::NoHandshakes);
        }
        if !(config.pending_keys_per_sec > 0.0 && config.pending_keys_burst >= 1.0) {
            return Err(E::NoPendingKeys);
        }
        Ok(config)
    }

    /// The secret key file.
    pub fn key_path(&self) -> PathBuf {
        self.state_dir.join("master.key")
    }

    /// The public key file, for minions and clients to pin.
    pub fn public_key_path(&self) -> PathBuf {
        self.state_dir.join("master.pub")
    }

    /// The root principal's secret key, readable only by the master's user.
    pub fn root_key_path(&self) -> PathBuf {
        self.state_dir.join("root.key")
    }

    /// The address the master actually listens on, written after binding.
    pub fn address_path(&self) -> PathBuf {
        self.state_dir.join("master.addr")
    }

    /// This master's certificate from the cluster key (`halite-master cluster certify`).
    pub fn certificate_path(&self) -> PathBuf {
        self.state_dir.join("master.cert")
    }

    /// The SQLite database.
    pub fn database_path(&self) -> PathBuf {
        self.state_dir.join("master.db")
    }

    /// SIGHUP: rereads the rules in the config file that may change while the master runs
    /// (`[[events]]`, `[[peers]]`, `[nodegroups]`, `revoked_masters`, `[deploy] signal_hosts`);
    /// everything else (addresses, store, limits) needs a restart. A file that no longer reads,
    /// or whose revocations this master may not use (`may_use_revocations`, the cluster
    /// identity's check), is reported and the running rules are kept. Returns the revocations that were in force when they changed: the store
    /// must then refuse what a newly revoked master signs (`Master::trust_store`).
    pub fn reread_rules<E: std::fmt::Display>(
        &mut self,
        may_use_revocations: impl FnOnce(&[String]) -> Result<(), E>,
    ) -> Option<Vec<String>> {
        let path = self.path.clone()?;
        let new = match MasterConfig::load(&path) {
            Ok(new) => new,
            Err(error) => {
                tracing::error!(%error, "SIGHUP: the config does not read; keeping the running rules");
                return None;
            }
        };
        if let Err(error) = may_use_revocations(&new.revoked_masters) {
            tracing::error!(%error, "SIGHUP: the config's revocations cannot be used; keeping the running rules");
            return None;
        }
        let before = (new.revoked_masters != self.revoked_masters).then(|| self.revoked_masters.clone());
        self.events = new.events;
        self.peers = new.peers;
        self.nodegroups = new.nodegroups;
        self.revoked_masters = new.revoked_masters;
        self.deploy = new.deploy;
        tracing::info!(config = %path.display(), "config reread: event rules, peer rules, nodegroups, revocations and signal hosts");
        before
    }
}

/// `[audit]`: how long this master's audit chain keeps its records. The oldest are pruned
/// behind a signed checkpoint, so what is kept still verifies. By default: a year, and at
/// most ten million records.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Records older than this many days are pruned (0: kept whatever their age).
    pub keep_days: u64,
    /// At most this many records are kept (0: no limit).
    pub keep_records: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig { keep_days: 365, keep_records: 10_000_000 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packaged_example_config_is_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/etc/master.toml");
        let config = MasterConfig::load(&path).unwrap();
        assert_eq!(
            (config.listen.as_str(), config.state_dir.as_path()),
            ("0.0.0.0:4506", Path::new("/var/lib/halite/master"))
        );
    }

    #[test]
    fn defaults_fill_what_is_missing() {
        let config = MasterConfig::parse("listen = \"127.0.0.1:9000\"\n[nodegroups]\nweb = \"web*\"\n").unwrap();
        assert_eq!(config.listen, "127.0.0.1:9000");
        assert_eq!(config.nodegroups["web"], "web*");
        assert_eq!(config.keep_jobs_hours, 168);
        assert_eq!(
            config.cluster,
            ClusterConfig { advertise_ready: None, peers_ready: Vec::new(), handover_after_secs: 30 }
        );
        let config = MasterConfig::parse("[cluster]\npeers_ready = [\"http://b:9506/readyz\"]\n").unwrap();
        assert_eq!((config.cluster.peers_ready.len(), config.cluster.handover_after_secs), (1, 30));
        assert!(MasterConfig::parse("[cluster]\npeer_ready = []\n").is_err(), "a misspelt key is refused");
        for bad in
            ["peers_ready = [\"b:9506\"]", "peers_ready = [\"file:///etc/passwd\"]", "advertise_ready = \"http://\""]
        {
            let error = MasterConfig::parse(&format!("[cluster]\n{bad}\n")).unwrap_err().to_string();
            assert!(error.contains("is not an http:// or https:// URL"), "{bad}: {error}");
        }
    }

    #[test]
    fn nodegroups_are_expressions_or_lists_of_ids_as_in_salt() {
        let config =
            MasterConfig::parse("[nodegroups]\nids = [\"host1\", \"host2\"]\njoined = \"host1,host2\"\nspaced = \"host1 host2\"\nweb = \"web* and G@os:Debian\"\nwords = [\"G@os:Debian\", \"or\", \"db*\"]\n")
                .unwrap();
        for plain in ["ids", "joined", "spaced"] {
            assert_eq!(config.nodegroups[plain], "L@host1,host2", "{plain}");
        }
        assert_eq!(config.nodegroups["web"], "web* and G@os:Debian");
        assert_eq!(config.nodegroups["words"], "G@os:Debian or db*");
        let error = MasterConfig::parse("[nodegroups]\nbad = 3\n").unwrap_err().to_string();
        assert!(error.contains("a compound expression or a list of words"), "{error}");
        // A group that does not parse is refused at once, named.
        let error = MasterConfig::parse("[nodegroups]\nmixed = [\"L@m1\", \"m2\"]\n").unwrap_err().to_string();
        assert!(error.starts_with("nodegroups: mixed: bad compound expression at word 2"), "{error}");
        let error = MasterConfig::parse("[nodegroups]\nloop = \"N@loop\"\n").unwrap_err().to_string();
        assert!(error.contains("loop") && error.contains("a cycle?"), "{error}");
    }

    #[test]
    fn event_and_peer_rules_parse() {
        let config = MasterConfig::parse(
            "[[events]]\nminions = [\"web*\"]\nallow = [\"app/*\"]\nrate_per_sec = 5.0\n\n[[peers]]\nminions = [\"ci\"]\ntarget = \"web*\"\nfunctions = [\"service.restart\"]\n",
        )
        .unwrap();
        assert_eq!(config.events[0].burst, 20.0);
        assert_eq!(config.peers[0].functions, ["service.restart"]);
        assert!(MasterConfig::parse("[[events]]\nminions = [\"x\"]\nalow = []\n")
            .unwrap_err()
            .to_string()
            .contains("alow"));
    }

    #[test]
    fn signal_hosts_parse_and_bad_entries_are_named() {
        let config =
            MasterConfig::parse("[deploy]\nsignal_hosts = [\"heat.example.com:8004\", \"10.0.0.0/8\"]\n").unwrap();
        assert_eq!(config.deploy.signal_hosts.len(), 2);
        assert!(MasterConfig::default().deploy.signal_hosts.is_empty(), "no relay unless configured");
        let err = MasterConfig::parse("[deploy]\nsignal_hosts = [\"10.0.0.0/40\"]\n").unwrap_err().to_string();
        assert!(err.starts_with("deploy: signal_hosts[0]: \"10.0.0.0/40\""), "{err}");
        let err = MasterConfig::parse("[deploy]\nsignal_host = []\n").unwrap_err().to_string();
        assert!(err.contains("signal_host"), "{err}");
    }

    #[test]
    fn unknown_and_mistyped_keys_are_named() {
        let err = MasterConfig::parse("lisen = \"x\"\n").unwrap_err().to_string();
        assert!(err.contains("lisen"), "{err}");
        let err = MasterConfig::parse("keep_jobs_hours = \"a week\"\n").unwrap_err().to_string();
        assert!(err.contains("keep_jobs_hours") || err.contains("line 1"), "{err}");
        let err = MasterConfig::parse("id = \"../etc\"\n").unwrap_err().to_string();
        assert!(err.starts_with("id:"), "{err}");
    }
}
