//! The minion's TOML configuration and the enrollment file cloud-init writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use halite_modules::Policy;
use halite_protocol::message::Value;
use serde::{Deserialize, Serialize};

/// Default config file.
pub const DEFAULT_PATH: &str = "/etc/halite/minion.toml";

pub use halite_transport::config_file::ConfigError;

/// `[metrics]`: where the minion serves `GET /metrics` (plain HTTP, no authentication: counts
/// only). Off unless `listen` is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Address to listen on, e.g. `127.0.0.1:9507`.
    pub listen: Option<String>,
}

/// Minion settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MinionConfig {
    /// The minion id; defaults to the enrollment file's, then to the hostname.
    pub id: Option<String>,
    /// The master's address, `host:port`, or a list of a cluster's masters (also spelled
    /// `masters`); defaults to the enrollment file's.
    #[serde(alias = "masters")]
    pub master: Option<crate::masters::MasterList>,
    /// The master's public key as 64 hex digits; defaults to the enrollment file's.
    pub master_key: Option<String>,
    /// Where the minion keeps its key, pinned master key, outbox and job markers.
    pub state_dir: PathBuf,
    /// The enrollment file written at first boot (master, master_key, id, token).
    pub enrollment_file: PathBuf,
    /// Accept whatever master key is presented first and pin it. Off by default: a minion
    /// trusts nobody unless told whom to trust.
    pub trust_on_first_use: bool,
    /// Jobs run at once; further jobs wait.
    pub max_concurrent_jobs: usize,
    /// Static grains added to (and overriding) the collected ones.
    pub grains: BTreeMap<String, Value>,
    /// Which functions may run, for which callers (`[policy]`).
    pub policy: Policy,
    /// Directory of local custom action definitions (`*.toml`).
    pub actions_dir: PathBuf,
    /// Directory of plans (`*.toml`) that `plan.run name=...` can run.
    pub plans_dir: PathBuf,
    /// Where `deploy.apply` keeps its markers and finds hooks (`[deploy]`).
    pub deploy: halite_modules::DeploySettings,
    /// Log level or filter: `info`, Salt's `warning`, or per target as in
    /// `halite_minion=debug,info`. `RUST_LOG`, when set, wins.
    pub log: String,
    /// `text` (colour only on a terminal) or `json` (one object per line).
    pub log_format: halite_transport::logging::LogFormat,
    /// Opt-in Prometheus figures (`[metrics] listen`); off when unset.
    pub metrics: MetricsConfig,
    /// The file it was read from (SIGHUP rereads it); never read from the file.
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

impl Default for MinionConfig {
    fn default() -> Self {
        MinionConfig {
            id: None,
            master: None,
            master_key: None,
            state_dir: PathBuf::from("/var/lib/halite/minion"),
            enrollment_file: PathBuf::from("/etc/halite/enrollment.toml"),
            trust_on_first_use: false,
            max_concurrent_jobs: 64,
            grains: BTreeMap::new(),
            policy: Policy::default(),
            actions_dir: PathBuf::from("/etc/halite/actions.d"),
            plans_dir: PathBuf::from("/etc/halite/plans"),
            deploy: halite_modules::DeploySettings::default(),
            log: "info".into(),
            log_format: halite_transport::logging::LogFormat::Text,
            metrics: MetricsConfig::default(),
            path: None,
        }
    }
}

impl MinionConfig {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let mut config = halite_transport::config_file::load(path, Self::parse)?;
        config.policy.source = Some(path.display().to_string());
        config.path = Some(path.to_owned());
        Ok(config)
    }

    /// Parses config text; the error names the bad key.
    pub fn parse(text: &str) -> Result<Self, MinionConfigError> {
        let config: MinionConfig = toml::from_str(text).map_err(MinionConfigError::Toml)?;
        if let Some(id) = &config.id {
            halite_protocol::id::validate(id).map_err(MinionConfigError::Id)?;
        }
        if config.max_concurrent_jobs == 0 {
            return Err(MinionConfigError::NoJobs);
        }
        halite_transport::logging::translate(&config.log).map_err(MinionConfigError::Log)?;
        if let Some(listen) = &config.metrics.listen {
            listen.parse::<std::net::SocketAddr>().map_err(|_| MinionConfigError::MetricsListen(listen.clone()))?;
        }
        Ok(config)
    }
}

/// What is wrong in a minion's config text; the message names the key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MinionConfigError {
    /// Not TOML, an unknown key, or a value of the wrong type.
    #[error("{}", .0.to_string().trim_end())]
    Toml(toml::de::Error),
    /// `id` is not a valid minion id.
    #[error("id: {0}")]
    Id(halite_protocol::id::IdError),
    /// `max_concurrent_jobs` is 0.
    #[error("max_concurrent_jobs: must be at least 1")]
    NoJobs,
    /// `log` is not a filter.
    #[error("log: {0}")]
    Log(halite_transport::logging::LogError),
    /// `metrics.listen` is not an address.
    #[error("metrics: listen: {0:?} is not an ip:port address")]
    MetricsListen(String),
}

/// What cloud-init (or an admin) writes so a fresh minion can find, trust and join its master.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enrollment {
    /// The master's address, `host:port`, or a list of a cluster's masters (also spelled
    /// `masters`).
    #[serde(alias = "masters")]
    pub master: crate::masters::MasterList,
    /// The master's public key, 64 hex digits.
    pub master_key: String,
    /// The minion id the token is bound to.
    pub id: String,
    /// One-time enrollment token (absent for preseeded keys).
    #[serde(default)]
    pub token: Option<String>,
}

impl Enrollment {
    /// Reads an enrollment file; `Ok(None)` if it does not exist.
    pub fn load(path: &Path) -> Result<Option<Self>, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(ConfigError::Read { path: path.to_owned(), source }),
        };
        let enrollment: Enrollment = toml::from_str(&text).map_err(|e| ConfigError::Invalid {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        halite_protocol::id::validate(&enrollment.id)
            .map_err(|e| ConfigError::Invalid { path: path.to_owned(), message: format!("id: {e}") })?;
        Ok(Some(enrollment))
    }

    /// The file's text.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packaged_example_config_enrolls_from_the_enrollment_file() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/etc/minion.toml");
        let config = MinionConfig::load(&path).unwrap();
        assert_eq!(config.enrollment_file, Path::new("/etc/halite/enrollment.toml"));
        assert!(config.master.is_none() && config.id.is_none());
    }

    #[test]
    fn config_errors_name_the_key() {
        assert!(MinionConfig::parse("mastr = \"x\"").unwrap_err().to_string().contains("mastr"));
        assert!(MinionConfig::parse("id = \"a/b\"").unwrap_err().to_string().starts_with("id:"));
        let config = MinionConfig::parse("id = \"web1\"\n[grains]\nrole = \"web\"\n").unwrap();
        assert_eq!(config.grains["role"], "web");
        let bad = MinionConfig::parse("[metrics]\nlisten = \"localhost\"\n").unwrap_err().to_string();
        assert!(bad.contains("metrics: listen"), "{bad}");
        let on = MinionConfig::parse("[metrics]\nlisten = \"127.0.0.1:9507\"\n").unwrap();
        assert_eq!(on.metrics.listen.as_deref(), Some("127.0.0.1:9507"));
        assert_eq!(MinionConfig::parse("").unwrap().metrics.listen, None, "off by default");
    }

    #[test]
    fn enrollment_round_trips() {
        let e = Enrollment {
            master: "m:4506".into(),
            master_key: "ab".repeat(32),
            id: "web1".into(),
            token: Some("t".into()),
        };
        let parsed: Enrollment = toml::from_str(&e.to_toml()).unwrap();
        assert_eq!(parsed, e);
    }
}
