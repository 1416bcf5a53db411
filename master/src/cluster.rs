//! Several masters on one store: what one master changes in what every master keeps in memory
//! is announced through the store and applied by the others at once. Here: accepted keys and
//! principals (rejecting a key through one master cuts the minion's live session on another),
//! and the dispatch of announcements; jobs and presence are in `cluster_jobs.rs`. An
//! announcement that needs the store asks for it (`core/asks.rs`) and goes on with the answer;
//! the reread of everything after missed announcements (`resync`), the loop's announcements
//! and the store's trust still await the store here.

use std::sync::Arc;

use halite_protocol::message::Value;
use halite_transport::PeerId;
use tracing::{info, warn};

use crate::authz::{Action, Asker};
use crate::core::asks::Ask;
use crate::core::sessions::Conn;
use crate::metrics::Kind;
use crate::net::Net;
use crate::server::Master;
use crate::store::reads::AcceptedKeys;
use crate::store::trust::Trust;
use crate::store::{Announcement, ClusterChange, PrincipalRecord, Store, StoreError};

/// The most keys another master's change names that are reread one by one rather than all.
const KEYS_READ_ONE_BY_ONE: usize = 64;

impl<S: Store, N: Net> Master<S, N> {
    /// Queues a change for the other masters sharing the store (nothing without any): the loop
    /// sends what a step queued once its writes are done ([`Master::send_announcements`]).
    pub(crate) fn tell_masters(&mut self, change: ClusterChange) {
        self.cluster.tell(change);
    }

    /// Tells the other masters what the step queued, in order. One that cannot be sent is
    /// logged, not an error of the request: the change is stored, and a master that missed an
    /// announcement rereads everything when its listening connection comes back.
    pub(crate) async fn send_announcements(&mut self) {
        for change in self.cluster.take_told() {
            for part in change.split() {
                if let Err(error) = self.store.announce(&part).await {
                    warn!(%error, "could not tell the other masters of a change");
                    break;
                }
            }
        }
    }

    /// Announces an event published here; one too large to announce is stored and announced
    /// by id.
    pub(crate) async fn share_event(&mut self, tag: String, data: halite_protocol::message::Value) {
        let change = ClusterChange::Event { tag, data };
        if Announcement::fits(self.store.instance(), &change) {
            return self.tell_masters(change);
        }
        let ClusterChange::Event { tag, data } = change else { return };
        let digest = crate::store::event_digest(&tag, &serde_json::to_string(&data).unwrap_or_else(|_| "null".into()));
        match self.store.put_shared_event(&tag, &data, self.clock.wall_ms()).await {
            Ok(id) => self.tell_masters(ClusterChange::StoredEvent { id, digest }),
            Err(error) => warn!(%error, %tag, "an event could not be shared with the other masters"),
        }
    }

    /// Applies a change the master `from` made. What needs the store is asked for; each answer
    /// carries the change on (a store that fails it means changes may be missed: everything is
    /// reread, [`Master::cluster_read_failed`]). Whether everything is to be reread now (the
    /// loop does it: [`Master::resync`]).
    pub(crate) fn on_cluster_change(&mut self, from: &str, change: ClusterChange) -> bool {
        // Another master's announcement: authenticated by the store layer before it got here,
        // decided like every other request.
        if let Err(denied) = self.access().decide(&Asker::ClusterPeer, &Action::Announce) {
            warn!(master = from, %denied, "announcement refused");
            return false;
        }
        if change != ClusterChange::Resync {
            self.cluster.heard_from(from, self.clock.now());
        }
        match change {
            ClusterChange::Keys { ids } => self.asks.push(Ask::ReadKeys { ids }),
            ClusterChange::Principal { name } => self.asks.push(Ask::ReadPrincipals { name }),
            ClusterChange::Resync => return true,
            ClusterChange::Job { jid } => self.adopt_job(&jid),
            // A job not live here has nothing to stop here (its announcement came first).
            ClusterChange::Cancel { jid } => self.cancel_here(&jid),
            ClusterChange::Event { tag, data } => self.emit(tag, data),
            ClusterChange::StoredEvent { id, digest } => self.asks.push(Ask::ReadSharedEvent { id, digest }),
            ClusterChange::Slots { jid, states } => self.apply_remote_slots(&jid, states),
            ClusterChange::Rollout { jid } => self.rollout_changed_elsewhere(&jid),
            ClusterChange::Here { ids } => {
                for id in &ids {
                    self.cluster.arrived(id, from);
                }
                self.asks.push(Ask::ReadMinions { ids });
            }
            ClusterChange::Left { ids } => {
                for id in ids {
                    self.cluster.left(&id, from);
                }
            }
            ClusterChange::Alive => {}
            ClusterChange::RollCall => {
                let ids = self.sessions.online_ids().cloned().collect();
                self.tell_masters(ClusterChange::Here { ids });
            }
        }
        false
    }

    /// A read another master's change needed failed: changes may have been missed, so the
    /// store is reread (`on_tick`) once it answers.
    pub(crate) fn cluster_read_failed(&mut self, error: &StoreError) {
        // Said once in a while: a read that keeps failing is tried at every reread (100 ms).
        if self.notices.ready("store:cluster_read", std::time::Duration::from_secs(10), self.clock.now()) {
            warn!(%error, "store failure while applying another master's change; rereading the store");
        }
        self.cluster.read_failed();
    }

    /// Which keys to reread for a change naming `ids` (`None`: any): those named, one read
    /// each, or all of them when the change is too wide for that.
    pub(crate) fn keys_to_read(ids: Option<&[String]>) -> Option<&[String]> {
        ids.filter(|ids| ids.len() <= KEYS_READ_ONE_BY_ONE)
    }

    /// The keys another master changed (those of `ids`, or any), as reread: taken, and a minion
    /// named (or, for any, one online) whose key is no longer accepted is forgotten and cut.
    pub(crate) fn keys_reread(&mut self, ids: Option<Vec<String>>, read: Result<AcceptedKeys, StoreError>) {
        let keys = match read {
            Ok(keys) => keys,
            Err(error) => return self.cluster_read_failed(&error),
        };
        let ids = ids.unwrap_or_else(|| self.sessions.online_ids().cloned().collect());
        self.take_accepted(keys);
        for id in ids {
            self.drop_if_unaccepted(&id);
        }
    }

    /// The principals as reread after another master changed `name`: its sessions end if it
    /// changed or went, and its gateway sessions' tokens are looked up again.
    pub(crate) fn principals_reread(&mut self, name: &str, read: Result<Vec<PrincipalRecord>, StoreError>) {
        match read {
            Ok(principals) => self.registry.set_principals(principals),
            Err(error) => return self.cluster_read_failed(&error),
        }
        self.drop_clients_if_changed(name);
        self.recheck_tokens(name);
    }

    /// Looks up again the tokens of `principal`'s in-process sessions: those whose token is
    /// gone (another master revoked it; its announcement names the principal) end
    /// ([`Master::tokens_rechecked`]).
    fn recheck_tokens(&mut self, principal: &str) {
        let tokens = self.sessions.tokens_of(principal);
        if !tokens.is_empty() {
            self.asks.push(Ask::RecheckTokens { tokens });
        }
    }

    /// The gateway sessions whose token no longer grants anything, as read: they end.
    pub(crate) fn tokens_rechecked(&mut self, gone: Result<Vec<PeerId>, StoreError>) {
        match gone {
            Ok(gone) => self.end_gateway_sessions(gone, "token revoked"),
            Err(error) => self.cluster_read_failed(&error),
        }
    }

    /// An event another master stored to share, as read (`None`: gone, or not the one
    /// announced): published here.
    pub(crate) fn shared_event_read(&mut self, read: Result<Option<(String, Value)>, StoreError>) {
        match read {
            Ok(Some((tag, data))) => self.emit(tag, data),
            Ok(None) => {}
            Err(error) => self.cluster_read_failed(&error),
        }
    }

    /// Rereads everything another master may have changed without this one hearing of it
    /// (its listening connection was lost, the store did not answer, an announcement could not
    /// be applied): keys, principals, who is where, the live jobs it does not hold, and the
    /// states of every job it holds, so each view (watchers, bus, deadlines) follows the store.
    pub(crate) async fn resync(&mut self) -> Result<(), StoreError> {
        // Said once per gap: while the store does not answer, this is tried again every 100 ms.
        let (first, gap_began) = self.cluster.resync_begins(self.clock.wall_ms());
        if first {
            info!("rereading keys, principals and jobs (changes by other masters may have been missed)");
        }
        self.reload_accepted().await?;
        self.reload_principals().await?;
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
            self.drop_clients_if_changed(&name);
            self.recheck_tokens(&name);
        }
        // A read failed before this reread is covered by it; one failed during it is not.
        self.cluster.take_read_failed();
        // Slots this master decided are written first: its own view is then what the store says.
        self.flush().await;
        if self.pending.has_states() {
            return Err(StoreError::Unavailable("job states could not be written".into()));
        }
        let held = self.jobs.jids();
        self.reread_jobs(&held);
        // Who is where, and the jobs published meanwhile.
        self.tell_masters(ClusterChange::RollCall);
        for jid in self.store.unfinished_jids().await? {
            self.adopt_job(&jid);
        }
        // Taken up before the gap is looked at, so a live job is not counted among those missed.
        self.answer_asks().await;
        // And those published and ended while this master heard nothing.
        self.adopt_jobs_published_since(gap_began);
        // The jobs and returns asked for are read before the reread counts as done: one that
        // fails leaves the gap open for the next.
        self.answer_asks().await;
        if self.cluster.take_read_failed() {
            return Err(StoreError::Unavailable("jobs could not be reread".into()));
        }
        self.cluster.resynced();
        Ok(())
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
            self.cut_minion(id);
        }
    }

    /// Cuts the sessions of a principal that was removed, or whose key or ACL changed (they
    /// reconnect under the new ACL); root never changes.
    pub(crate) fn drop_clients_if_changed(&mut self, name: &str) {
        if name == "root" {
            return;
        }
        let record = self.registry.principal(name).cloned();
        let stale: Vec<_> = self
            .sessions
            .clients_of(name)
            .into_iter()
            .filter(|peer| match (self.sessions.get(peer), &record) {
                (_, None) => true,
                (Some(Conn::Client { acl, session, .. }), Some(record)) => {
                    session.peer().identity.as_bytes() != &record.public_key || acl.as_deref() != Some(&record.acl)
                }
                (Some(Conn::Local { acl, .. }), Some(record)) => acl.as_ref().map(Arc::as_ref) != Some(&record.acl),
                _ => false,
            })
            .collect();
        for peer in stale {
            info!(principal = name, "principal changed or removed; disconnecting its session");
            self.forget(peer, Some("principal changed"));
        }
    }

    /// Gives the store this master's keys: the rows it writes are signed with its key, and the
    /// rows and announcements it reads are taken only from masters it trusts (`store/trust.rs`);
    /// refusals are counted in `halite_denials_total` (`cluster_announcement`, `store_row`).
    /// The revocations were checked against the cluster key when the master started, or when
    /// SIGHUP reread them.
    pub(crate) async fn trust_store(&self) -> Result<(), StoreError> {
        let revoked = self.config.revoked_keys().collect();
        // One counter at a time: the family's guard must be gone before the next is made.
        let denials = &self.metrics.get().denials;
        let announcements = denials.get_or_create(&Kind { kind: "cluster_announcement" }).clone();
        let rows = denials.get_or_create(&Kind { kind: "store_row" }).clone();
        let key = halite_protocol::identity::IdentityKey::from_seed(self.identity.key().seed());
        let certificate = self.identity.certificate().cloned();
        let trust = Trust::new(key, certificate, &self.config.id, revoked).counting(announcements, rows);
        self.store.set_trust(trust, self.clock.wall_ms()).await?;
        Ok(())
    }
}
