//! SIGHUP: the master rereads the rules in its config file that it can change while running
//! (`[[events]]`, `[[peers]]`, `[nodegroups]`, `revoked_masters`, `[deploy] signal_hosts`); everything else (addresses,
//! store, limits) needs a restart. A file that no longer reads is reported and the running
//! rules are kept.

use tracing::{error, info};

use crate::net::Net;
use crate::server::Master;
use crate::store::Store;
use crate::MasterConfig;

impl<S: Store, N: Net> Master<S, N> {
    /// Rereads the rules from the config file.
    pub(crate) fn reload_rules(&mut self) {
        let Some(path) = self.config.path.clone() else { return };
        match MasterConfig::load(&path) {
            Ok(new) => {
                self.config.events = new.events;
                self.config.peers = new.peers;
                self.config.nodegroups = new.nodegroups;
                self.config.revoked_masters = new.revoked_masters;
                self.config.deploy = new.deploy;
                info!(config = %path.display(), "config reread: event rules, peer rules, nodegroups, revocations and signal hosts");
            }
            Err(error) => error!(%error, "SIGHUP: the config does not read; keeping the running rules"),
        }
    }
}
