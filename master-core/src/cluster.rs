//! Several masters on one store: what one master changes in what every master keeps in memory
//! is announced through the store and applied by the others at once. Here: accepted keys and
//! principals (rejecting a key through one master cuts the minion's live session on another),
//! and the dispatch of announcements; jobs and presence are in `cluster_jobs.rs`.
//!
//! Nothing here awaits or acts on the master: the loop lends a [`ClusterDesk`] (the other
//! masters' view, the registry and what the next commit writes, theirs to change; the sessions,
//! the live jobs and the config, read-only) and carries out the [`Effect`]s it returns: store
//! calls, events, sessions ended, jobs adopted or cancelled (`Core::with_cluster_desk`). The
//! loop sends the announcements (`server/writes.rs`) and rereads the store after a gap
//! (`server/resync.rs`), handing what it read to [`ClusterDesk::views_reread`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_protocol::message::Value;
use halite_transport::PeerId;
use tracing::{info, warn};

use crate::acl::NoticeThrottle;
use crate::authz::{Access, Action, Asker};
use crate::clock::Now;
use crate::config::MasterConfig;
use crate::core::cluster_view::ClusterView;
use crate::core::jobs::JobTable;
use crate::core::registry::AcceptedKeys;
use crate::core::registry::Registry;
use crate::core::sessions::{Conn, Sessions};
use crate::core::writes::PendingWrites;
use crate::outputs::asks::Ask;
use crate::outputs::effects::{Effect, Effects};
use crate::store::{ClusterChange, PrincipalRecord, StoreError};

/// The most keys another master's change names that are reread one by one rather than all.
const KEYS_READ_ONE_BY_ONE: usize = 64;

/// What the other masters' announcements are applied with: what they change, and what they
/// read.
pub struct ClusterDesk<'a> {
    pub config: &'a MasterConfig,
    pub cluster: &'a mut ClusterView,
    pub registry: &'a mut Registry,
    pub pending: &'a mut PendingWrites,
    pub notices: &'a mut NoticeThrottle,
    pub sessions: &'a Sessions,
    pub jobs: &'a JobTable,
    /// The time, read when a decision needs it.
    pub now: Now,
    pub out: Effects,
}

/// Which keys to reread for a change naming `ids` (`None`: any): those named, one read each,
/// or all of them when the change is too wide for that.
pub fn keys_to_read(ids: Option<&[String]>) -> Option<&[String]> {
    ids.filter(|ids| ids.len() <= KEYS_READ_ONE_BY_ONE)
}

/// A read another master's change needed failed: changes may have been missed, so the store
/// is reread (`on_tick`) once it answers.
pub fn read_failed(cluster: &mut ClusterView, notices: &mut NoticeThrottle, now: Instant, error: &StoreError) {
    // Said once in a while: a read that keeps failing is tried at every reread (100 ms).
    if notices.ready("store:cluster_read", Duration::from_secs(10), now) {
        warn!(%error, "store failure while applying another master's change; rereading the store");
    }
    cluster.read_failed();
}

/// Ends the sessions of a principal that changed or went (`stale_clients`); which.
pub fn drop_clients_if_changed(registry: &Registry, sessions: &Sessions, name: &str, out: &mut Effects) -> Vec<PeerId> {
    let stale = stale_clients(registry, sessions, name);
    for &peer in &stale {
        info!(principal = name, "principal changed or removed; disconnecting its session");
        out.forget(peer, "principal changed");
    }
    stale
}

/// The sessions of a principal that was removed, or whose key or ACL changed (they reconnect
/// under the new ACL); root never changes.
fn stale_clients(registry: &Registry, sessions: &Sessions, name: &str) -> Vec<PeerId> {
    if name == "root" {
        return Vec::new();
    }
    let record = registry.principal(name);
    sessions
        .clients_of(name)
        .into_iter()
        .filter(|peer| match (sessions.get(peer), record) {
            (_, None) => true,
            (Some(Conn::Client { acl, session, .. }), Some(record)) => {
                session.peer().identity.as_bytes() != &record.public_key || acl.as_deref() != Some(&record.acl)
            }
            (Some(Conn::Local { acl, .. }), Some(record)) => acl.as_ref().map(Arc::as_ref) != Some(&record.acl),
            _ => false,
        })
        .collect()
}

impl ClusterDesk<'_> {
    /// Applies a change the master `from` made. What needs the store is asked for; each answer
    /// carries the change on (a store that fails it means changes may be missed: everything is
    /// reread, [`read_failed`]). Whether everything is to be reread now (the loop does it:
    /// `Master::resync`).
    pub fn on_cluster_change(&mut self, from: &str, change: ClusterChange) -> bool {
        // Another master's announcement: authenticated by the store layer before it got here,
        // decided like every other request.
        let access = Access::of(self.config, self.registry, self.jobs);
        if let Err(denied) = access.decide(&Asker::ClusterPeer, &Action::Announce) {
            warn!(master = from, %denied, "announcement refused");
            return false;
        }
        if !matches!(change, ClusterChange::Resync | ClusterChange::ListenerLost) {
            self.cluster.heard_from(from, self.now.at);
        }
        let effect = match change {
            ClusterChange::Keys { ids } => Effect::Ask(Ask::ReadKeys { ids }),
            ClusterChange::Principal { name } => Effect::Ask(Ask::ReadPrincipals { name }),
            ClusterChange::Resync => {
                self.cluster.listening_again();
                return true;
            }
            ClusterChange::ListenerLost => {
                self.cluster.listener_lost(self.now.at);
                return false;
            }
            ClusterChange::Job { jid } => Effect::AdoptJob { jid },
            // A job not live here has nothing to stop here (its announcement came first).
            ClusterChange::Cancel { jid } => Effect::CancelHere { jid },
            ClusterChange::Event { tag, data } => Effect::Emit { tag, data },
            ClusterChange::StoredEvent { id, digest } => Effect::Ask(Ask::ReadSharedEvent { id, digest }),
            ClusterChange::Slots { jid, states } => Effect::RemoteSlots { jid, states },
            ClusterChange::Rollout { jid } => Effect::RolloutChangedElsewhere { jid },
            ClusterChange::Here { ids } => {
                self.cluster.answered(from);
                for id in &ids {
                    self.cluster.arrived(id, from);
                }
                Effect::Ask(Ask::ReadMinions { ids })
            }
            ClusterChange::Left { ids } => {
                for id in ids {
                    self.cluster.left(&id, from);
                }
                return false;
            }
            ClusterChange::Alive => return false,
            ClusterChange::RollCall => {
                let ids = self.sessions.online_ids().cloned().collect();
                Effect::Tell(ClusterChange::Here { ids })
            }
        };
        self.out.push(effect);
        false
    }

    fn read_failed(&mut self, error: &StoreError) {
        read_failed(self.cluster, self.notices, self.now.at, error);
    }

    /// The keys another master changed (those of `ids`, or any), as reread: taken, and a minion
    /// named (or, for any, one online) whose key is no longer accepted is forgotten and cut.
    pub fn keys_reread(&mut self, ids: Option<Vec<String>>, read: Result<AcceptedKeys, StoreError>) {
        let keys = match read {
            Ok(keys) => keys,
            Err(error) => return self.read_failed(&error),
        };
        let ids = ids.unwrap_or_else(|| self.sessions.online_ids().cloned().collect());
        self.take_accepted(keys);
        for id in ids {
            self.drop_if_unaccepted(&id);
        }
    }

    /// Accepted keys as read: the registry takes them, and minions parked while their key was
    /// pending knock again if theirs is now accepted.
    fn take_accepted(&mut self, keys: AcceptedKeys) {
        self.registry.take_accepted(keys);
        self.out.push(Effect::ReleaseParked);
    }

    /// The principals as reread after another master changed `name`: its sessions end if it
    /// changed or went, and its gateway sessions' tokens are looked up again.
    pub fn principals_reread(&mut self, name: &str, read: Result<Vec<PrincipalRecord>, StoreError>) {
        match read {
            Ok(principals) => self.registry.set_principals(principals),
            Err(error) => return self.read_failed(&error),
        }
        let ended = self.drop_clients_if_changed(name);
        self.recheck_tokens(name, &ended);
    }

    /// Looks up again the tokens of `principal`'s in-process sessions (but those `ended`):
    /// those whose token is gone (another master revoked it; its announcement names the
    /// principal) end ([`ClusterDesk::tokens_rechecked`]).
    fn recheck_tokens(&mut self, principal: &str, ended: &[PeerId]) {
        let mut tokens = self.sessions.tokens_of(principal);
        tokens.retain(|(peer, _)| !ended.contains(peer));
        if !tokens.is_empty() {
            self.out.ask(Ask::RecheckTokens { tokens });
        }
    }

    /// The gateway sessions whose token no longer grants anything, as read: they end.
    pub fn tokens_rechecked(&mut self, gone: Result<Vec<PeerId>, StoreError>) {
        match gone {
            Ok(gone) => {
                for peer in gone {
                    info!(peer = peer.0, why = "token revoked", "ending a gateway session");
                    self.out.forget(peer, "token revoked");
                }
            }
            Err(error) => self.read_failed(&error),
        }
    }

    /// An event another master stored to share, as read (`None`: gone, or not the one
    /// announced): published here.
    pub fn shared_event_read(&mut self, read: Result<Option<(String, Value)>, StoreError>) {
        match read {
            Ok(Some((tag, data))) => self.out.emit(tag, data),
            Ok(None) => {}
            Err(error) => self.read_failed(&error),
        }
    }

    /// Every key and principal, as reread after a gap in what this master heard: taken, and
    /// each session that stood on what changed meanwhile ends (a minion whose key is no longer
    /// its accepted one, a client whose principal changed or went); the gateway sessions' tokens
    /// are looked up again.
    pub fn views_reread(&mut self, keys: AcceptedKeys, principals: Vec<PrincipalRecord>) {
        self.take_accepted(keys);
        self.registry.set_principals(principals);
        let online: Vec<String> = self.sessions.online_ids().cloned().collect();
        for id in online {
            self.drop_if_unaccepted(&id);
        }
        let mut principals: Vec<String> = self
            .sessions
            .iter()
            .map(|(_, conn)| conn)
            .filter_map(|conn| match conn {
                Conn::Client { principal, .. } | Conn::Local { principal, .. } => Some(principal.clone()),
                _ => None,
            })
            .collect();
        principals.sort();
        principals.dedup();
        for name in principals {
            let ended = self.drop_clients_if_changed(&name);
            self.recheck_tokens(&name, &ended);
        }
    }

    /// Cuts a minion whose session's key is no longer its accepted one (rejected, deleted,
    /// replaced by an enrollment elsewhere), and forgets what it announced if it has none.
    fn drop_if_unaccepted(&mut self, id: &str) {
        if !self.registry.has_accepted(id) {
            self.registry.forget_minion(id);
            self.pending.drop_minion(id);
        }
        let Some(peer) = self.sessions.peer_of(id) else { return };
        let key = match self.sessions.get(&peer) {
            Some(Conn::Minion { session, .. }) => *session.peer().identity.as_bytes(),
            _ => return,
        };
        if !self.registry.is_accepted(id, &key) {
            self.out.push(Effect::CutMinion { id: id.to_owned() });
        }
    }

    fn drop_clients_if_changed(&mut self, name: &str) -> Vec<PeerId> {
        drop_clients_if_changed(self.registry, self.sessions, name, &mut self.out)
    }
}
