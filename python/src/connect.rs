//! From the keyword arguments of `halite.Client.connect` to an SDK `ClientConfig`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use halite_client::{ClientConfig, ClientError};
use serde::Deserialize;

/// What Python passes (as JSON): a client config file, a master config file (root on the
/// master's host), or everything spelled out.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConnectOptions {
    #[serde(default)]
    config_file: Option<PathBuf>,
    #[serde(default)]
    master_config: Option<PathBuf>,
    #[serde(default)]
    masters: Vec<String>,
    #[serde(default)]
    master_key: Option<String>,
    #[serde(default)]
    principal: Option<String>,
    #[serde(default)]
    key_file: Option<PathBuf>,
    #[serde(default)]
    connect_timeout: Option<f64>,
    #[serde(default)]
    request_timeout: Option<f64>,
    #[serde(default)]
    reconnect: Option<bool>,
}

impl ConnectOptions {
    /// The SDK config these options describe; every missing or contradictory option named.
    pub(crate) fn into_config(self) -> Result<ClientConfig, ClientError> {
        let spelled_out = !self.masters.is_empty() || self.principal.is_some() || self.key_file.is_some();
        let mut config = match (&self.config_file, &self.master_config) {
            (Some(_), Some(_)) => return Err(bad("give config_file or master_config, not both")),
            (Some(_), None) | (None, Some(_)) if spelled_out => {
                return Err(bad("masters, principal and key_file come from the config file: do not give them too"))
            }
            (Some(file), None) => ClientConfig::from_file(file)?,
            (None, Some(file)) => ClientConfig::from_master_config(file)?,
            (None, None) => self.spelled_out()?,
        };
        if let Some(secs) = self.connect_timeout {
            config.connect_timeout = seconds("connect_timeout", secs)?;
        }
        if let Some(secs) = self.request_timeout {
            config.request_timeout = seconds("request_timeout", secs)?;
        }
        if let Some(reconnect) = self.reconnect {
            config.reconnect = reconnect;
        }
        Ok(config)
    }

    fn spelled_out(&self) -> Result<ClientConfig, ClientError> {
        if self.masters.is_empty() {
            return Err(bad("no master: pass masters=[\"host:port\", ...] (or config_file / master_config)"));
        }
        let master_key = self.master_key.as_deref().ok_or_else(|| bad("master_key is required with masters"))?;
        let principal = self.principal.as_deref().ok_or_else(|| bad("principal is required with masters"))?;
        let key_file = self.key_file.as_deref().ok_or_else(|| bad("key_file is required with masters"))?;
        let master_key = ClientConfig::parse_master_key(master_key)?;
        let key = read_key(key_file)?;
        Ok(ClientConfig::principal(self.masters.clone(), master_key, key, principal))
    }
}

fn read_key(path: &Path) -> Result<halite_protocol::identity::IdentityKey, ClientError> {
    halite_transport::keyfile::read_secret(path).map_err(|e| bad(format!("key_file: {e}")))
}

fn seconds(what: &str, secs: f64) -> Result<Duration, ClientError> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| bad(format!("{what} must be a positive number of seconds, not {secs}")))
}

fn bad(message: impl Into<String>) -> ClientError {
    ClientError::Config(message.into())
}
