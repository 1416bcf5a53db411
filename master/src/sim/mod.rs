//! The master's core in-process, in simulated time: an in-memory store, a fake clock and
//! in-memory connections. Minions and clients are real Noise initiators driven by the test;
//! only the sockets are missing. Each input goes through [`Master::step`], exactly as the
//! daemon's loop feeds it.

mod ask_tests;
mod cluster_tests;
mod delete_tests;
mod listener_tests;
mod minion_pair_tests;
mod net;
mod ownership_tests;
mod relay_trust_tests;
mod request_tests;
mod rollout_tests;
mod tests;
mod trust_tests;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use halite_protocol::identity::IdentityKey;
use halite_protocol::message::{
    self, Hello, JobSpec, Message, PrincipalAcl, PrincipalRule, PublishRequest, Request, RequestBody, ResponseBody,
    SignedJob, Target, TargetKind,
};
use halite_protocol::noise::{Claim, Initiator, LocalIdentity, MasterPin, Role, Session, SessionConfig};
use halite_protocol::zmtp::{PeerInfo, SocketType};
use halite_transport::{CloseReason, PeerId, RouterEvent};
use serde_json::json;

use crate::clock::{Clock, FakeClock};
use crate::config::MasterConfig;
use crate::server::{Input, Master};
use crate::store::{PrincipalRecord, SqliteStore, Store};

pub(crate) use net::MemNet;

/// A master with everything in memory.
pub(crate) struct Sim {
    pub(crate) master: Master<SqliteStore, MemNet>,
    pub(crate) clock: FakeClock,
    pub(crate) net: MemNet,
    identity: LocalIdentity,
    root: IdentityKey,
    next_peer: u64,
}

/// Wall time the simulations start at (2026-11-21).
const START_MS: u64 = 1_795_242_922_123;

impl Sim {
    /// A master with default settings.
    pub(crate) async fn new() -> Sim {
        Sim::with_config(|_| {}).await
    }

    /// A master whose config `tune` adjusts.
    pub(crate) async fn with_config(tune: impl FnOnce(&mut MasterConfig)) -> Sim {
        let store = SqliteStore::in_memory().await.expect("in-memory store");
        Sim::with_store(store, FakeClock::new(START_MS), tune).await
    }

    /// A master on an existing store and clock (a restart).
    pub(crate) async fn with_store(store: SqliteStore, clock: FakeClock, tune: impl FnOnce(&mut MasterConfig)) -> Sim {
        let mut config = MasterConfig { timeout_grace_secs: 1, ..MasterConfig::default() };
        tune(&mut config);
        let identity = LocalIdentity::new(IdentityKey::from_seed(&[1; 32])).expect("identity");
        let root = IdentityKey::from_seed(&[2; 32]);
        let net = MemNet::default();
        let shared_clock: Arc<dyn Clock> = Arc::new(clock.clone());
        let master = Master::new(config, identity.clone(), root.public(), net.clone(), store, shared_clock)
            .await
            .expect("master starts");
        Sim { master, clock, net, identity, root, next_peer: 1 }
    }

    /// The store, to look behind the core.
    /// The id of the connection made last.
    pub(crate) fn last_peer(&self) -> u64 {
        self.next_peer - 1
    }

    /// The master's public key (what minions pin and verify jobs with).
    pub(crate) fn master_public(&self) -> halite_protocol::identity::PublicIdentity {
        self.identity.public()
    }

    pub(crate) fn store(&self) -> &SqliteStore {
        &self.master.store
    }

    /// The files the master serves, for tests beside them (`files.rs`).
    pub(crate) fn files(&self) -> &crate::file_reads::FileServer {
        self.master.core.files()
    }

    /// Where the file reads the master started come back.
    pub(crate) fn file_reads(&mut self) -> &mut tokio::sync::mpsc::UnboundedReceiver<crate::file_reads::FileServed> {
        self.master.file_rx.as_mut().expect("the sim holds the finished reads")
    }

    /// Feeds one input and lets the core handle it.
    pub(crate) async fn step(&mut self, input: Input) {
        self.master.step(input).await;
    }

    /// Lets time pass, waking the core whenever it planned to wake, as the daemon's loop does
    /// (`Master::wake_at`).
    pub(crate) async fn advance(&mut self, by: Duration) {
        let end = self.clock.now() + by;
        let mut wakes_at_one_time = 0;
        while let Some(at) = self.master.wake_at.filter(|at| *at <= end) {
            let now = self.clock.now();
            if at > now {
                self.clock.advance(at - now);
                wakes_at_one_time = 0;
            } else {
                wakes_at_one_time += 1;
                assert!(wakes_at_one_time < 1_000, "the core asks to be woken again and again without time passing");
            }
            self.step(Input::Tick).await;
        }
        let now = self.clock.now();
        self.clock.advance(end.saturating_duration_since(now));
    }

    /// Runs the handshake of a new connection; `Ok(session)` once accepted, else the refusal.
    async fn handshake(&mut self, key: &IdentityKey, role: Role, claim: Claim) -> (PeerId, Result<Session, String>) {
        let peer = PeerId(self.next_peer);
        self.next_peer += 1;
        let local = LocalIdentity::new(IdentityKey::from_seed(key.seed())).expect("identity");
        let pin = MasterPin::Key(self.identity.public());
        let (initiator, msg1) = Initiator::start(&local, role, claim, pin, SessionConfig::default()).expect("msg1");
        let addr: SocketAddr = "127.0.0.1:40000".parse().expect("address");
        let info =
            PeerInfo { socket_type: SocketType::Dealer, identity: Vec::new(), minor_version: 1, metadata: Vec::new() };
        self.step(Input::Net(RouterEvent::Connected { peer, addr, info })).await;
        self.step(Input::Net(RouterEvent::Message { peer, parts: vec![msg1] })).await;
        let msg2 = self.net.take(peer).pop().and_then(|mut p| p.pop()).expect("message 2");
        let (awaiting, msg3) = initiator.read_response(&msg2).expect("master identity");
        self.step(Input::Net(RouterEvent::Message { peer, parts: vec![msg3] })).await;
        let Some(verdict) = self.net.take(peer).pop() else { return (peer, Err("no verdict".into())) };
        (peer, awaiting.read_verdict(&verdict, self.clock.now()).map_err(|e| e.to_string()))
    }

    /// Connects a minion with a key from `seed` (preseeded as accepted unless it has a token).
    pub(crate) async fn minion(&mut self, id: &str) -> SimPeer {
        let key = IdentityKey::from_seed(&seed_of(id));
        let record = crate::store::KeyRecord {
            id: id.to_owned(),
            public_key: *key.public().as_bytes(),
            state: halite_protocol::message::KeyState::Accepted,
        };
        self.master.store.put_key(&record, self.clock.wall_ms()).await.expect("preseed");
        self.master.reload_accepted().await.expect("reload");
        let mut minion = self.connect_minion(id, &key, None).await.expect("accepted");
        minion.send(self, &Message::Hello(hello(id))).await;
        minion
    }

    /// Connects a minion with its own key, maybe a token; the refusal as text otherwise.
    pub(crate) async fn connect_minion(
        &mut self,
        id: &str,
        key: &IdentityKey,
        token: Option<&str>,
    ) -> Result<SimPeer, String> {
        let claim = Claim::new(id, token).expect("claim");
        let (peer, session) = self.handshake(key, Role::Minion, claim).await;
        Ok(SimPeer { peer, session: session? })
    }

    /// Connects the root client.
    pub(crate) async fn root(&mut self) -> SimPeer {
        let key = IdentityKey::from_seed(self.root.seed());
        let (peer, session) = self.handshake(&key, Role::Client, Claim::new("root", None).expect("claim")).await;
        self.greeted(SimPeer { peer, session: session.expect("root is accepted") }).await
    }

    /// A client that sent its `client_hello` (the first message the protocol asks of it) and
    /// read the welcome.
    async fn greeted(&mut self, mut client: SimPeer) -> SimPeer {
        let hello = message::ClientHello { principal: String::new(), version: "sim".into() };
        client.send(self, &Message::ClientHello(hello)).await;
        client.recv(self);
        client
    }

    /// Registers a principal limited to `targets` × `functions` (events: job events and the
    /// minions' namespace) and connects it.
    pub(crate) async fn principal(&mut self, name: &str, targets: &str, functions: &[&str]) -> SimPeer {
        let acl = PrincipalAcl {
            rules: vec![PrincipalRule {
                targets: targets.into(),
                functions: functions.iter().map(|f| (*f).to_owned()).collect(),
                args: BTreeMap::new(),
            }],
            events: vec!["halite/job/*".into(), "minion/*".into()],
            admin: false,
            tenant: None,
        };
        self.principal_with(name, acl).await
    }

    /// Registers a principal with this ACL and connects it.
    pub(crate) async fn principal_with(&mut self, name: &str, acl: PrincipalAcl) -> SimPeer {
        let key = IdentityKey::from_seed(&seed_of(name));
        let record = PrincipalRecord { name: name.into(), public_key: *key.public().as_bytes(), acl };
        self.master.store.put_principal(&record, 0).await.expect("principal");
        self.master.reload_principals().await.expect("reload");
        let (peer, session) = self.handshake(&key, Role::Client, Claim::new(name, None).expect("claim")).await;
        self.greeted(SimPeer { peer, session: session.expect("principal is accepted") }).await
    }

    /// Publishes `function` on a glob target as `client`; the jid, or the error message.
    pub(crate) async fn publish(
        &mut self,
        client: &mut SimPeer,
        target: &str,
        function: &str,
        timeout_ms: u64,
        ttl_ms: u64,
    ) -> Result<String, String> {
        let target = Target { kind: TargetKind::Glob, expr: target.into() };
        self.publish_to(client, target, function, timeout_ms, ttl_ms).await
    }

    /// Publishes `function` on any kind of target as `client`; the jid, or the error message.
    pub(crate) async fn publish_to(
        &mut self,
        client: &mut SimPeer,
        target: Target,
        function: &str,
        timeout_ms: u64,
        ttl_ms: u64,
    ) -> Result<String, String> {
        let request = PublishRequest::new(7, JobSpec { timeout_ms, ttl_ms, ..JobSpec::new(target, function) });
        self.publish_request(client, request).await
    }

    /// Publishes `function` on a glob target as `client`, rolled out as `rollout`.
    pub(crate) async fn publish_rollout(
        &mut self,
        client: &mut SimPeer,
        target: &str,
        ttl_ms: u64,
        rollout: message::Rollout,
    ) -> Result<String, String> {
        let target = Target { kind: TargetKind::Glob, expr: target.into() };
        let spec = JobSpec { timeout_ms: 60_000, ttl_ms, rollout: Some(rollout), ..JobSpec::new(target, "test.ping") };
        let request = PublishRequest::new(7, spec);
        self.publish_request(client, request).await
    }

    /// Sends a publish request as `client`; the jid, or the error message.
    pub(crate) async fn publish_request(
        &mut self,
        client: &mut SimPeer,
        request: PublishRequest,
    ) -> Result<String, String> {
        client.send(self, &Message::Publish(request)).await;
        for msg in client.recv(self) {
            match msg {
                Message::Published(p) => return Ok(p.jid),
                Message::Error(e) => return Err(e.message),
                _ => {}
            }
        }
        Err("no answer".into())
    }

    /// Sends a request as `client` and returns its answer.
    pub(crate) async fn request(&mut self, client: &mut SimPeer, body: RequestBody) -> Result<ResponseBody, String> {
        client.send(self, &Message::Request(Request { request_id: 99, body })).await;
        let mut answer: Option<ResponseBody> = None;
        for msg in client.recv(self) {
            match msg {
                // An answer in parts is joined, as the SDK does.
                Message::Response(r) if r.request_id == 99 => {
                    match &mut answer {
                        None => answer = Some(r.body),
                        Some(so_far) => so_far.append(r.body).map_err(|_| "parts of different kinds".to_owned())?,
                    }
                    if !r.more {
                        return answer.ok_or_else(|| "no answer".into());
                    }
                }
                Message::Error(e) if e.request.as_deref() == Some("99") => return Err(e.message),
                _ => {}
            }
        }
        Err("no answer, or an unfinished one".into())
    }

    /// An enrollment token `client` makes for `minion`, good for a minute.
    pub(crate) async fn enrollment_token(&mut self, client: &mut SimPeer, minion: &str) -> String {
        let body = RequestBody::TokenCreate { minion: minion.into(), ttl_ms: 60_000, replace: false };
        match self.request(client, body).await {
            Ok(ResponseBody::Token(token)) => token.token,
            other => panic!("no token for {minion}: {other:?}"),
        }
    }
}

/// A connected minion or client, seen from its side.
pub(crate) struct SimPeer {
    pub(crate) peer: PeerId,
    session: Session,
}

impl SimPeer {
    /// Seals a message and hands it to the master as arrived, without handling it yet (as when
    /// it waits in the router's queue).
    pub(crate) fn queue(&mut self, sim: &Sim, msg: &Message) {
        let parts = self.session.seal(&message::encode(msg), sim.clock.now()).expect("seal");
        sim.net.arrive(RouterEvent::Message { peer: self.peer, parts });
    }

    /// Sends a message and lets the master handle it.
    pub(crate) async fn send(&mut self, sim: &mut Sim, msg: &Message) {
        let parts = self.session.seal(&message::encode(msg), sim.clock.now()).expect("seal");
        sim.step(Input::Net(RouterEvent::Message { peer: self.peer, parts })).await;
    }

    /// Everything the master sent this peer since the last call.
    pub(crate) fn recv(&mut self, sim: &Sim) -> Vec<Message> {
        let now = sim.clock.now();
        let mut out = Vec::new();
        for parts in sim.net.take(self.peer) {
            let bytes = self.session.open(&parts, now).expect("open");
            match message::decode(&bytes).expect("decode") {
                Message::JobUpdates(batch) => out.extend(batch.updates.into_iter().map(Message::JobUpdate)),
                msg => out.push(msg),
            }
        }
        out
    }

    /// The jobs the master sent this minion since the last call.
    /// The tags of the bus events received since last asked (other messages are dropped).
    pub(crate) fn event_tags(&mut self, sim: &Sim) -> Vec<String> {
        self.recv(sim)
            .into_iter()
            .filter_map(|m| match m {
                Message::Event(e) => Some(e.tag),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn jobs(&mut self, sim: &Sim) -> Vec<SignedJob> {
        self.recv(sim)
            .into_iter()
            .filter_map(|m| match m {
                Message::Job(job) => Some(job),
                _ => None,
            })
            .collect()
    }

    /// The connection goes away.
    pub(crate) async fn disconnect(self, sim: &mut Sim) {
        sim.step(Input::Net(RouterEvent::Disconnected { peer: self.peer, reason: CloseReason::Eof })).await;
    }
}

pub(crate) use halite_master_core::core::jobs::testing::ret;

/// A deterministic key seed per name, so a name always has the same key.
pub(crate) fn seed_of(name: &str) -> [u8; 32] {
    let mut seed = [7u8; 32];
    for (i, b) in name.bytes().enumerate() {
        seed[i % 32] ^= b.wrapping_add(i as u8);
    }
    seed
}

pub(crate) fn hello(id: &str) -> Hello {
    Hello {
        id: id.into(),
        version: "test".into(),
        grains: BTreeMap::from([("role".to_owned(), json!(id.trim_end_matches(char::is_numeric)))]),
        functions: vec!["test.ping".into()],
        modules: Vec::new(),
        // Not said, as by a minion before `installed`: nothing is refused for it.
        installed: Vec::new(),
    }
}
