//! What the audit trail will hold, gathered as the master works: a client's request begun
//! when it arrives and ended by its answer (granted, refused or failed, with the answer's
//! reason), and what the master records by itself (a job's end, a key's change, a policy
//! reread). The loop appends what is gathered in batches (`server/audit.rs`): at most
//! [`APPEND_WAIT`] after a record is made, at once before a request reads the store, and
//! before the master stops.

use std::collections::{HashMap, HashSet};

use halite_protocol::audit::{AuditEntry, CHAIN_HEADS};
use halite_protocol::message::{ErrorKind, Message};
use halite_transport::PeerId;

/// Requests waiting for their answer at most; past it, the oldest is recorded unanswered.
const MAX_OPEN: usize = 65_536;

/// How often at most a master writes the heads of the other masters' chains into its own
/// (while it records anything): what a check holds each chain's end to.
pub const CROSS_LINK_EVERY_MS: u64 = 60_000;

/// How long a record waits to be appended at most: appends are batched (one transaction for
/// every record gathered meanwhile), so the trail costs a fraction of a commit per record.
pub const APPEND_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Records that make an append due at once, however young.
const APPEND_BATCH: usize = 512;

/// Entries kept while the store cannot take them; past it, the oldest are dropped (and
/// counted) rather than grow without bound.
const MAX_PENDING: usize = 1_000_000;

/// A request as it arrived, until its answer says how it was decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Begun {
    /// Who asked.
    pub principal: String,
    /// The asker's tenant, if it is confined to one.
    pub tenant: Option<String>,
    /// What was asked (`publish`, `key_accept`, …).
    pub action: String,
    /// The minions it names (a publish's are known once it is answered).
    pub minions: Vec<String>,
    /// Its session, address and arguments.
    pub detail: serde_json::Value,
}

/// The audit trail's part in the master's memory.
#[derive(Debug, Default)]
pub struct AuditLog {
    /// Each connection's address, for the records of what it asks.
    addresses: HashMap<PeerId, std::net::SocketAddr>,
    open: HashMap<(PeerId, String), (u64, Begun)>,
    pending: Vec<AuditEntry>,
    /// Sessions whose reading of the trail is recorded: the pages they read after it, by
    /// cursor, are not recorded again (a stream that follows the trail would otherwise
    /// append a record for every page it polls).
    readers: HashSet<PeerId>,
    /// The number of the last record this master's chain holds (as it appended them).
    head: u64,
    /// The last record this master appended, what the next append goes on from (`None`
    /// until the first, or after a failed one: read from the store).
    appended: Option<crate::store::AuditHead>,
    /// When the other chains' heads were last written into this one.
    linked_at_ms: Option<u64>,
    /// When what is pending must be appended.
    due_at: Option<std::time::Instant>,
    /// Appended at the next commit, however young (a request is about to read the store).
    forced: bool,
}

impl AuditLog {
    /// A request arrived: it is recorded when `key` (its request id, or the jid a cancel
    /// names) is answered.
    pub fn begin(&mut self, peer: PeerId, key: String, at_ms: u64, begun: Begun) {
        if self.open.len() >= MAX_OPEN {
            if let Some(oldest) = self.open.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| k.clone()) {
                if let Some((at, begun)) = self.open.remove(&oldest) {
                    self.push(entry(at, begun, "unanswered", None));
                }
            }
        }
        self.open.insert((peer, key), (at_ms, begun));
    }

    /// A request that is answered only when refused (a subscription, a cancel) was handled:
    /// still open, it was granted.
    pub fn settle(&mut self, peer: PeerId, key: &str, at_ms: u64) {
        if let Some((_, begun)) = self.open.remove(&(peer, key.to_owned())) {
            self.push(entry(at_ms, begun, "granted", None));
        }
    }

    /// An event the master publishes, if it records a change or an end: a key's change, a
    /// deployment's or a group's final state.
    pub fn event(&mut self, tag: &str, data: &serde_json::Value, at_ms: u64) {
        if let Some(entry) = entry_of_event(tag, data, at_ms) {
            self.push(entry);
        }
    }

    /// A message leaving for `peer`: if it answers a request begun, the request is recorded
    /// with the decision the answer gives.
    pub fn answered(&mut self, peer: PeerId, message: &Message, at_ms: u64) {
        if self.open.is_empty() {
            return;
        }
        let (key, refusal, published) = match message {
            Message::Response(response) if !response.more => (response.request_id.to_string(), None, None),
            Message::Published(published) => (published.request_id.to_string(), None, Some(published)),
            Message::Error(error) => match &error.request {
                Some(key) => (key.clone(), Some((error.kind, error.message.clone())), None),
                None => return,
            },
            _ => return,
        };
        let Some((_, mut begun)) = self.open.remove(&(peer, key)) else { return };
        if let Some(published) = published {
            begun.minions = published.minions.clone();
            if let Some(detail) = begun.detail.as_object_mut() {
                detail.insert("jid".into(), published.jid.clone().into());
            }
        }
        let (decision, reason) = decision_of(refusal);
        if decision == "granted" && begun.action == halite_protocol::message::AUDIT_READ && !self.readers.insert(peer) {
            let continues = begun.detail.pointer("/args/after").is_some_and(|after| !after.is_null());
            if continues {
                return;
            }
        }
        self.push(entry(at_ms, begun, decision, reason));
    }

    /// A connection opened from `addr`.
    pub fn connected(&mut self, peer: PeerId, addr: std::net::SocketAddr) {
        self.addresses.insert(peer, addr);
    }

    /// Where a connection came from, while it is open.
    pub fn address(&self, peer: PeerId) -> Option<std::net::SocketAddr> {
        self.addresses.get(&peer).copied()
    }

    /// A peer's session ended: what it asked and was never answered is recorded so.
    pub fn ended(&mut self, peer: PeerId) {
        self.addresses.remove(&peer);
        self.readers.remove(&peer);
        let keys: Vec<(PeerId, String)> = self.open.keys().filter(|(p, _)| *p == peer).cloned().collect();
        for key in keys {
            if let Some((at, begun)) = self.open.remove(&key) {
                self.push(entry(at, begun, "unanswered", Some("the session ended first".into())));
            }
        }
    }

    /// Something the master records by itself.
    pub fn push(&mut self, entry: AuditEntry) {
        if self.pending.len() >= MAX_PENDING {
            tracing::error!("the store has taken no audit record for too long; the oldest waiting is dropped");
            self.pending.remove(0);
        }
        self.pending.push(entry);
    }

    /// Whether what waits is to be appended now: it has waited [`APPEND_WAIT`] (counted from
    /// the first commit that found it), there is a batch of it, or a read of the store is next.
    pub fn due(&mut self, now: std::time::Instant) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let due_at = *self.due_at.get_or_insert(now + APPEND_WAIT);
        self.forced || self.pending.len() >= APPEND_BATCH || now >= due_at
    }

    /// When the loop must wake to append what waits.
    pub fn next_due(&self) -> Option<std::time::Instant> {
        self.due_at.filter(|_| !self.pending.is_empty())
    }

    /// What waits is appended at the next commit: a request reads the store next (it sees every
    /// record made before it), or the master stops.
    pub fn force(&mut self) {
        self.forced = true;
    }

    /// What waits to be appended, taken for one append.
    pub fn take(&mut self) -> Vec<AuditEntry> {
        self.due_at = None;
        self.forced = false;
        std::mem::take(&mut self.pending)
    }

    /// An append failed: its entries go back first, to be tried again at the next commit
    /// (after the chain's end is read from the store again).
    pub fn put_back(&mut self, mut entries: Vec<AuditEntry>) {
        self.appended = None;
        entries.append(&mut self.pending);
        self.pending = entries;
    }

    /// The chain's end at start, as the store holds it.
    pub fn started_at(&mut self, head: u64) {
        self.head = self.head.max(head);
    }

    /// An append stored the chain up to `head`.
    pub fn stored(&mut self, head: crate::store::AuditHead) {
        self.head = self.head.max(head.seq);
        self.appended = Some(head);
    }

    /// What the next append goes on from.
    pub fn appended(&self) -> Option<crate::store::AuditHead> {
        self.appended
    }

    /// The last record this master's chain holds, as far as it knows.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Whether it is time to cross-link the chains (nothing was written for a minute).
    pub fn link_due(&self, now_ms: u64) -> bool {
        self.linked_at_ms.is_none_or(|at| now_ms.saturating_sub(at) >= CROSS_LINK_EVERY_MS)
    }

    /// The heads of the other masters' chains, as the store held them at `at_ms`, to be
    /// appended to this one: a check then finds a chain cut short at its end by any master's
    /// record that saw it longer. Nothing when there is no other chain.
    pub fn link(&mut self, own: &str, mut heads: std::collections::BTreeMap<String, u64>, at_ms: u64) {
        self.linked_at_ms = Some(at_ms);
        heads.remove(own);
        if heads.is_empty() {
            return;
        }
        self.pending.insert(0, cross_link(heads, at_ms));
    }
}

/// The record of the other chains' heads.
pub fn cross_link(heads: std::collections::BTreeMap<String, u64>, at_ms: u64) -> AuditEntry {
    AuditEntry {
        at_ms,
        kind: CHAIN_HEADS.into(),
        principal: "master".into(),
        tenant: None,
        action: CHAIN_HEADS.into(),
        decision: "granted".into(),
        reason: None,
        minions: Vec::new(),
        detail: serde_json::json!({ "heads": heads }),
    }
}

/// The decision an answer gives: granted without a refusal; refused for what the asker may
/// not do or asked wrongly; failed for what went wrong on the master's side.
fn decision_of(refusal: Option<(ErrorKind, String)>) -> (&'static str, Option<String>) {
    match refusal {
        None => ("granted", None),
        Some((kind, message)) => {
            let failed = matches!(kind, ErrorKind::Internal | ErrorKind::Timeout | ErrorKind::Other);
            let name = serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            (if failed { "failed" } else { "refused" }, Some(format!("{name}: {message}")))
        }
    }
}

/// The record of a job's end: its publisher, function, minions and how each ended.
pub fn job_end(job: &crate::core::jobs::LiveJob, ended: &serde_json::Value, at_ms: u64) -> AuditEntry {
    let all_returned = ended.get("not_returned").and_then(serde_json::Value::as_object).is_some_and(|m| m.is_empty());
    AuditEntry {
        at_ms,
        kind: "job_end".into(),
        principal: job.record.caller.clone(),
        tenant: None,
        action: "job_end".into(),
        decision: if all_returned { "returned" } else { "incomplete" }.into(),
        reason: None,
        minions: job.slots().keys().cloned().collect(),
        detail: serde_json::json!({ "jid": job.record.jid, "function": job.record.function, "ended": ended }),
    }
}

/// The record an event makes: `halite/key/<id>/<change>`, and the final states of
/// `halite/deployment/<id>/<STATUS>` and `halite/deployment_group/<id>/<STATUS>`.
fn entry_of_event(tag: &str, data: &serde_json::Value, at_ms: u64) -> Option<AuditEntry> {
    let field = |name: &str| data.get(name).and_then(serde_json::Value::as_str).map(str::to_owned);
    let mut parts = tag.splitn(4, '/');
    let (kind, id, what) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("halite"), Some(kind), Some(id), Some(what)) if !what.contains('/') => (kind, id, what),
        _ => return None,
    };
    let (kind, minions, principal) = match kind {
        "key" => ("key", vec![id.to_owned()], "master".to_owned()),
        "deployment" if matches!(what, "COMPLETE" | "FAILED") => (
            "deployment_end",
            field("server_id").into_iter().collect(),
            field("owner").unwrap_or_else(|| "master".into()),
        ),
        "deployment_group" if matches!(what, "COMPLETE" | "FAILED") => {
            ("group_end", Vec::new(), field("owner").unwrap_or_else(|| "master".into()))
        }
        _ => return None,
    };
    Some(AuditEntry {
        at_ms,
        kind: kind.into(),
        principal,
        tenant: None,
        action: format!("{kind}:{what}"),
        decision: what.to_owned(),
        reason: field("status_reason"),
        minions,
        detail: serde_json::json!({ "id": id, "tag": tag }),
    })
}

fn entry(at_ms: u64, begun: Begun, decision: &str, reason: Option<String>) -> AuditEntry {
    let Begun { principal, tenant, action, minions, detail } = begun;
    AuditEntry {
        at_ms,
        kind: "request".into(),
        principal,
        tenant,
        action,
        decision: decision.into(),
        reason,
        minions,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use halite_protocol::message::{ErrorMessage, Response, ResponseBody};

    use super::*;

    fn begun(action: &str) -> Begun {
        Begun {
            principal: "ops".into(),
            tenant: None,
            action: action.into(),
            minions: Vec::new(),
            detail: serde_json::json!({}),
        }
    }

    #[test]
    fn a_request_is_recorded_with_the_decision_its_answer_gives() {
        let mut log = AuditLog::default();
        log.begin(PeerId(1), "7".into(), 10, begun("key_list"));
        log.begin(PeerId(1), "8".into(), 11, begun("key_accept"));
        log.begin(PeerId(2), "7".into(), 12, begun("principal_add"));
        let ok = Message::Response(Response { request_id: 7, body: ResponseBody::Keys(Vec::new()), more: false });
        log.answered(PeerId(1), &ok, 20);
        let refused = ErrorMessage { kind: ErrorKind::Forbidden, message: "no".into(), request: Some("8".into()) };
        log.answered(PeerId(1), &Message::Error(refused), 21);
        log.ended(PeerId(2));
        let entries = log.take();
        let got: Vec<(&str, &str)> = entries.iter().map(|e| (e.action.as_str(), e.decision.as_str())).collect();
        assert_eq!(got, [("key_list", "granted"), ("key_accept", "refused"), ("principal_add", "unanswered")]);
        assert_eq!(entries[1].reason.as_deref(), Some("forbidden: no"));
        assert!(log.take().is_empty());
    }

    #[test]
    fn a_session_reading_the_trail_page_by_page_is_recorded_once() {
        let mut log = AuditLog::default();
        let page = |after: serde_json::Value| Begun {
            detail: serde_json::json!({ "args": { "after": after } }),
            ..begun("audit_list")
        };
        let answer =
            |id| Message::Response(Response { request_id: id, body: ResponseBody::Audit(Vec::new()), more: false });
        // The first page, then two continuing pages of the same session: one record.
        for (id, after) in [(1, serde_json::Value::Null), (2, serde_json::json!(10)), (3, serde_json::json!(20))] {
            log.begin(PeerId(1), id.to_string(), id, page(after));
            log.answered(PeerId(1), &answer(id), id);
        }
        assert_eq!(log.take().len(), 1);
        // A fresh read from the start, a refused page and another session are each recorded.
        log.begin(PeerId(1), "4".into(), 4, page(serde_json::Value::Null));
        log.answered(PeerId(1), &answer(4), 4);
        log.begin(PeerId(1), "5".into(), 5, page(serde_json::json!(30)));
        let refused = ErrorMessage { kind: ErrorKind::Forbidden, message: "no".into(), request: Some("5".into()) };
        log.answered(PeerId(1), &Message::Error(refused), 5);
        log.begin(PeerId(2), "1".into(), 6, page(serde_json::json!(30)));
        log.answered(PeerId(2), &answer(1), 6);
        assert_eq!(log.take().len(), 3);
        // Once the session ends, its next session's first page is recorded again.
        log.ended(PeerId(2));
        log.begin(PeerId(2), "2".into(), 7, page(serde_json::json!(40)));
        log.answered(PeerId(2), &answer(2), 7);
        assert_eq!(log.take().len(), 1);
    }

    #[test]
    fn records_are_appended_in_batches_at_most_a_wait_late_and_at_once_before_a_read() {
        let mut log = AuditLog::default();
        let start = std::time::Instant::now();
        assert!(!log.due(start), "nothing waits");
        log.push(entry(0, begun("key_list"), "granted", None));
        assert!(!log.due(start), "young");
        assert_eq!(log.next_due(), Some(start + APPEND_WAIT));
        assert!(log.due(start + APPEND_WAIT));
        assert_eq!(log.take().len(), 1);
        assert_eq!(log.next_due(), None);
        // A read of the store next: at once.
        log.push(entry(0, begun("key_list"), "granted", None));
        log.force();
        assert!(log.due(start));
        assert_eq!(log.take().len(), 1);
        // A full batch: at once.
        for _ in 0..APPEND_BATCH {
            log.push(entry(0, begun("key_list"), "granted", None));
        }
        assert!(log.due(start));
    }
}
