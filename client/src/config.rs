//! Where the master is and who we are.

use std::path::{Path, PathBuf};
use std::time::Duration;

use halite_protocol::identity::{IdentityKey, PublicIdentity};
use halite_transport::keyfile;
use serde::Deserialize;

use crate::ClientError;

/// What a client needs to connect.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Master addresses, `host:port`: one, or a cluster's masters (sharing one store), tried in
    /// order until one answers.
    pub masters: Vec<String>,
    /// The master's key, pinned.
    pub master_key: PublicIdentity,
    /// Our principal key.
    pub key: IdentityKey,
    /// Our principal name.
    pub principal: String,
    /// Give up connecting after this long.
    pub connect_timeout: Duration,
    /// Give up waiting for the answer to a request (or a publish) after this long; the error
    /// is `ClientError::Timeout` and the connection stays usable.
    pub request_timeout: Duration,
    /// Connect again when the connection is lost (on by default): requests in flight fail,
    /// then the masters are tried again with backoff, the subscription resumes after the last
    /// event received and followed jobs are watched again. Off: the client ends instead.
    pub reconnect: bool,
    /// With `reconnect`: give up after this long without reaching any master (followed jobs
    /// and subscriptions then end with `ClientError::Disconnected`); `None`: keep trying for as
    /// long as the client is used.
    pub reconnect_for: Option<Duration>,
}

/// The two settings of a master config file a local client needs; everything else is ignored.
#[derive(Deserialize)]
struct MasterFile {
    #[serde(default = "default_state_dir")]
    state_dir: PathBuf,
    #[serde(default = "default_listen")]
    listen: String,
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("/var/lib/halite/master")
}

fn default_listen() -> String {
    "0.0.0.0:4506".into()
}

/// A client config file (TOML): how a principal other than root connects from anywhere.
///
/// ```toml
/// masters = ["10.0.0.1:4506", "10.0.0.2:4506"]   # or: master = "10.0.0.1:4506"
/// master_key = "9f2c…"                           # 64 hex digits, or the path of master.pub
/// principal = "heat"
/// key_file = "/etc/heat/halite.key"
/// connect_timeout_secs = 10                      # optional
/// request_timeout_secs = 60                      # optional
/// reconnect = true                               # optional
/// ```
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientFile {
    #[serde(default)]
    master: Option<String>,
    #[serde(default)]
    masters: Vec<String>,
    master_key: String,
    principal: String,
    key_file: PathBuf,
    #[serde(default)]
    connect_timeout_secs: Option<u64>,
    #[serde(default)]
    request_timeout_secs: Option<u64>,
    #[serde(default)]
    reconnect: Option<bool>,
}

impl ClientConfig {
    /// Reads a client config file (see the format above); relative key paths are relative to
    /// the file.
    pub fn from_file(path: &Path) -> Result<Self, ClientError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| ClientError::Config(format!("{}: {e}", path.display())))?;
        let file: ClientFile = toml::from_str(&text)
            .map_err(|e| ClientError::Config(format!("{}: {}", path.display(), e.to_string().trim_end())))?;
        let mut masters = file.masters;
        masters.extend(file.master);
        if masters.is_empty() {
            return Err(ClientError::Config(format!("{}: no master: set `masters` (or `master`)", path.display())));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let key_path = base.join(&file.key_file);
        let master_key = if file.master_key.len() == 64 {
            Self::parse_master_key(&file.master_key)?
        } else {
            Self::parse_master_key(&base.join(&file.master_key).to_string_lossy())?
        };
        let key = keyfile::read_secret(&key_path).map_err(|e| ClientError::Config(format!("key_file: {e}")))?;
        let mut config = ClientConfig::principal(masters, master_key, key, &file.principal);
        if let Some(secs) = file.connect_timeout_secs {
            config.connect_timeout = Duration::from_secs(secs);
        }
        if let Some(secs) = file.request_timeout_secs {
            config.request_timeout = Duration::from_secs(secs);
        }
        config.reconnect = file.reconnect.unwrap_or(true);
        Ok(config)
    }

    /// A principal other than root: its name and key, and the master's address and key.
    pub fn principal(masters: Vec<String>, master_key: PublicIdentity, key: IdentityKey, name: &str) -> Self {
        ClientConfig {
            masters,
            master_key,
            key,
            principal: name.to_owned(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: crate::client::REQUEST_TIMEOUT,
            reconnect: true,
            reconnect_for: None,
        }
    }

    /// The root principal on the master's own host: reads the master config for its state
    /// directory, then the master's address and public key and the root key from there.
    pub fn from_master_config(path: &Path) -> Result<Self, ClientError> {
        let (master, master_key, state_dir) = Self::locate_master(path)?;
        let key = keyfile::read_secret(&state_dir.join("root.key")).map_err(|e| ClientError::Config(e.to_string()))?;
        Ok(ClientConfig {
            masters: vec![master],
            master_key,
            key,
            principal: "root".into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: crate::client::REQUEST_TIMEOUT,
            reconnect: true,
            reconnect_for: None,
        })
    }

    /// A master's public key given as 64 hex digits, or as the path of its `master.pub`.
    pub fn parse_master_key(text: &str) -> Result<PublicIdentity, ClientError> {
        Self::parse_public_key("master key", text)
    }

    /// A public key (`what` names it in errors) given as 64 hex digits, or as the path of a
    /// public key file (halite-ed25519-public-v1).
    pub fn parse_public_key(what: &str, text: &str) -> Result<PublicIdentity, ClientError> {
        let text = text.trim();
        if let Some(bytes) = halite_protocol::hex::decode(text).filter(|bytes| bytes.len() == 32) {
            return PublicIdentity::from_bytes(&bytes).map_err(|e| ClientError::Config(format!("{what}: {e}")));
        }
        keyfile::read_public(Path::new(text))
            .map_err(|e| ClientError::Config(format!("{what} {text:?}: not 64 hex digits, and as a file: {e}")))
    }

    /// The master's address, public key and state directory, read through its config file.
    pub fn locate_master(path: &Path) -> Result<(String, PublicIdentity, PathBuf), ClientError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ClientError::Config(format!("{}: {e} (use --config to name the master config)", path.display()))
        })?;
        let file: MasterFile = toml::from_str(&text)
            .map_err(|e| ClientError::Config(format!("{}: {}", path.display(), e.to_string().trim_end())))?;
        let master = match std::fs::read_to_string(file.state_dir.join("master.addr")) {
            Ok(addr) => addr.trim().to_owned(),
            Err(_) => file.listen.replace("0.0.0.0", "127.0.0.1"),
        };
        let master = master.replace("0.0.0.0", "127.0.0.1");
        // A master of a cluster pins the cluster key its certificate names (its first 64 hex
        // digits): what the other masters also hold a certificate from, and what enrollment
        // files made through this client pin.
        let cluster_key = std::fs::read_to_string(file.state_dir.join("master.cert"))
            .ok()
            .and_then(|certificate| halite_protocol::hex::decode(certificate.trim().get(..64)?))
            .and_then(|bytes| PublicIdentity::from_bytes(&bytes).ok());
        let master_key = match cluster_key {
            Some(key) => key,
            None => keyfile::read_public(&file.state_dir.join("master.pub")).map_err(|e| {
                ClientError::Config(format!("{e} (has the master been started once with this config?)"))
            })?,
        };
        Ok((master, master_key, file.state_dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own under the system temp dir for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("halite-client-config-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        dir
    }

    #[test]
    fn a_client_file_names_masters_keys_and_timeouts_with_paths_relative_to_it() {
        let dir = scratch("good");
        let key = IdentityKey::generate_os();
        let master = IdentityKey::generate_os().public();
        keyfile::write_secret(&dir.join("engine.key"), &key).unwrap_or_else(|e| panic!("{e}"));
        keyfile::write_public(&dir.join("master.pub"), &master).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.join("client.toml");
        let text = "masters = [\"10.0.0.1:4506\", \"10.0.0.2:4506\"]\nmaster_key = \"master.pub\"\n\
                    principal = \"heat\"\nkey_file = \"engine.key\"\nrequest_timeout_secs = 5\nreconnect = false\n";
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        let config = ClientConfig::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.masters, ["10.0.0.1:4506", "10.0.0.2:4506"]);
        assert_eq!(config.master_key, master);
        assert_eq!(config.key.public(), key.public());
        assert_eq!(config.principal, "heat");
        assert_eq!(config.request_timeout, Duration::from_secs(5));
        assert_eq!(config.connect_timeout, Duration::from_secs(10));
        assert!(!config.reconnect);

        // One master as a string, the master key as hex.
        let hex = halite_protocol::hex::encode(master.as_bytes());
        let text =
            format!("master = \"m:4506\"\nmaster_key = \"{hex}\"\nprincipal = \"heat\"\nkey_file = \"engine.key\"\n");
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        let config = ClientConfig::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((config.masters, config.master_key, config.reconnect), (vec!["m:4506".to_owned()], master, true));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_bad_client_file_gets_an_error_naming_the_problem() {
        let dir = scratch("bad");
        let path = dir.join("client.toml");
        let cases = [
            ("master_key = \"x\"\nprincipal = \"p\"\nkey_file = \"k\"\n", "no master"),
            ("master = \"m:1\"\nprincipal = \"p\"\nkey_file = \"k\"\n", "master_key"),
            ("master = \"m:1\"\nmaster_key = \"x\"\nprincipal = \"p\"\nkey_file = \"k\"\ncolour = 1\n", "colour"),
            ("master = \"m:1\"\nmaster_key = \"missing.pub\"\nprincipal = \"p\"\nkey_file = \"k\"\n", "missing.pub"),
        ];
        for (text, named) in cases {
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
            let error = ClientConfig::from_file(&path).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains(named), "{text:?}: {error}");
        }
        let error = ClientConfig::from_file(&dir.join("absent.toml")).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("absent.toml"), "{error}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
