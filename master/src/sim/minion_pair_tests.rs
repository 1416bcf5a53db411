//! A master core and a minion core together, in simulated time over the in-memory network:
//! what the minion's core sends reaches [`Master::step`](crate::server::Master::step) as the
//! router would deliver it, and what the master sends that connection goes back to the minion's
//! core. The minion does its real handshake, freshness, run-once, queueing and outbox; its jobs
//! are finished by the test ([`Pair::finish`]), so nothing runs and every run is deterministic.
//! The link's own behaviour (reconnecting after a drop) is the test's to say
//! ([`Pair::link_reconnects`]), as the transport's `Dealer` would.

#![cfg(test)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use halite_minion::core::{Effect, Input as MinionInput, MinionCore, Settings};
use halite_minion::outbox::Outbox;
use halite_modules::{Dispatcher, PathGuard, Policy, Registry};
use halite_protocol::identity::IdentityKey;
use halite_protocol::message::{Job, JobReturn, MinionJobState, Outcome, RequestBody};
use halite_protocol::noise::LocalIdentity;
use halite_protocol::zmtp::{PeerInfo, SocketType, ZmtpError};
use halite_transport::{CloseReason, PeerId, RouterEvent};

use super::{seed_of, Sim, SimPeer};
use crate::clock::Clock;
use crate::server::Input;
use crate::store::{KeyRecord, Store};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// One master core, one minion core.
struct Pair {
    sim: Sim,
    minion: MinionCore,
    id: String,
    dir: PathBuf,
    max_jobs: usize,
    /// The minion's connection, as the master knows it.
    peer: Option<PeerId>,
    /// Whether the minion has a link (it can reconnect).
    linked: bool,
    /// Effects the minion's core gave, not carried out yet.
    effects: VecDeque<Effect>,
    /// Jobs the minion started, until the test finishes them.
    running: Vec<Job>,
    /// Every job the minion started.
    started: Vec<String>,
    /// Jobs the minion was told to stop.
    cancelled: Vec<String>,
}

fn settings(dir: &Path, id: &str, master: &Sim, max_jobs: usize) -> Settings {
    let dispatcher = Dispatcher {
        registry: Arc::new(Registry::standard()),
        policy: Policy::default(),
        plans_dir: dir.join("plans"),
        deploy: Default::default(),
        paths: PathGuard::new(&[dir.to_path_buf()], None),
    };
    let key = IdentityKey::from_seed(&seed_of(id));
    Settings {
        id: id.into(),
        masters: 1,
        identity: LocalIdentity::new(key).expect("identity"),
        master_key: Some(master.master_public()),
        pin_path: dir.join("master.pub"),
        token: None,
        dispatcher: Arc::new(dispatcher),
        grains: Arc::default(),
        outbox: Outbox::open(dir).expect("outbox"),
        max_concurrent_jobs: max_jobs,
        verified: None,
        metrics: None,
    }
}

impl Pair {
    /// `id`'s minion core started against a new master; its key is accepted beforehand when
    /// `accepted`, else it waits for an operator.
    async fn new(id: &str, accepted: bool, max_jobs: usize) -> Pair {
        let mut sim = Sim::new().await;
        if accepted {
            let key = IdentityKey::from_seed(&seed_of(id));
            let record = KeyRecord {
                id: id.into(),
                public_key: *key.public().as_bytes(),
                state: halite_protocol::message::KeyState::Accepted,
            };
            sim.master.store.put_key(&record, sim.clock.wall_ms()).await.expect("preseed");
            sim.master.reload_accepted().await.expect("reload");
        }
        let dir = std::env::temp_dir().join(format!("halite-pair-{id}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut minion = MinionCore::new(settings(&dir, id, &sim, max_jobs), sim.clock.now());
        let effects = minion.start().into();
        let mut pair = Pair {
            sim,
            minion,
            id: id.into(),
            dir,
            max_jobs,
            peer: None,
            linked: false,
            effects,
            running: Vec::new(),
            started: Vec::new(),
            cancelled: Vec::new(),
        };
        pair.pump().await;
        pair
    }

    /// The minion process restarts: its connection goes, a new core reads its state directory.
    async fn restart(&mut self) {
        self.drop_connection().await;
        self.running.clear();
        self.effects.clear();
        // The old core is dropped as the new one takes its place, and writes nothing meanwhile.
        self.minion = MinionCore::new(settings(&self.dir, &self.id, &self.sim, self.max_jobs), self.sim.clock.now());
        self.effects = self.minion.start().into();
        self.pump().await;
    }

    fn input(&mut self, input: MinionInput) {
        let effects = self.minion.handle(input, self.sim.clock.now());
        self.effects.extend(effects);
    }

    /// A new connection, both sides told.
    async fn connect(&mut self) {
        let peer = PeerId(self.sim.next_peer);
        self.sim.next_peer += 1;
        let addr: SocketAddr = "127.0.0.1:40001".parse().expect("address");
        let info =
            PeerInfo { socket_type: SocketType::Dealer, identity: Vec::new(), minor_version: 1, metadata: Vec::new() };
        self.sim.step(Input::Net(RouterEvent::Connected { peer, addr, info })).await;
        self.peer = Some(peer);
        self.input(MinionInput::Connected);
    }

    /// The minion closes its connection; the master sees it go.
    async fn drop_connection(&mut self) {
        if let Some(peer) = self.peer.take() {
            let reason = CloseReason::Eof;
            self.sim.step(Input::Net(RouterEvent::Disconnected { peer, reason })).await;
        }
    }

    async fn apply(&mut self, effect: Effect) {
        match effect {
            Effect::Connect => {
                self.drop_connection().await;
                self.linked = true;
                self.connect().await;
            }
            Effect::DropLink => {
                self.drop_connection().await;
                self.linked = false;
            }
            // There is one master: the next one of the list is it again.
            Effect::MoveOn(_) => {
                self.drop_connection().await;
                self.connect().await;
            }
            Effect::MarkAuthenticated => {}
            Effect::Send(parts) => {
                if let Some(peer) = self.peer {
                    self.sim.step(Input::Net(RouterEvent::Message { peer, parts })).await;
                }
            }
            Effect::Run(job) => {
                self.started.push(job.jid.clone());
                self.running.push(job);
            }
            Effect::Cancel(jid) => self.cancelled.push(jid),
        }
    }

    /// Carries out the minion's effects and delivers what the master sent, until both are
    /// quiet. A connection the master closed is reported to the minion with its reason.
    async fn pump(&mut self) {
        loop {
            if let Some(effect) = self.effects.pop_front() {
                self.apply(effect).await;
                continue;
            }
            let Some(peer) = self.peer else { return };
            let sent = self.sim.net.take(peer);
            let closed = self.sim.net.closed(peer);
            if sent.is_empty() && closed.is_none() {
                return;
            }
            for parts in sent {
                self.input(MinionInput::Message(parts));
            }
            if let Some(reason) = closed {
                self.peer = None;
                self.input(MinionInput::Disconnected(CloseReason::Protocol(ZmtpError::PeerError(reason))));
            }
        }
    }

    /// The connection is lost (a network fault): both sides see it go.
    async fn connection_lost(&mut self) {
        self.drop_connection().await;
        self.input(MinionInput::Disconnected(CloseReason::Eof));
        self.pump().await;
    }

    /// The link connects again, as the `Dealer` does after a drop.
    async fn link_reconnects(&mut self) {
        assert!(self.linked, "the minion dropped its link");
        self.connect().await;
        self.pump().await;
    }

    /// Lets time pass on both sides, waking each core when it planned to wake, as their loops
    /// do.
    async fn advance(&mut self, by: Duration) {
        let end = self.sim.clock.now() + by;
        let mut wakes_at_one_time = 0;
        loop {
            let now = self.sim.clock.now();
            let next = [self.sim.master.wake_at, self.minion.next_timeout()].into_iter().flatten().min();
            let Some(at) = next.filter(|at| *at <= end) else {
                self.sim.clock.advance(end.saturating_duration_since(now));
                return;
            };
            if at > now {
                self.sim.clock.advance(at - now);
                wakes_at_one_time = 0;
            } else {
                wakes_at_one_time += 1;
                assert!(wakes_at_one_time < 1_000, "a core asks to be woken again and again without time passing");
            }
            let now = self.sim.clock.now();
            if self.sim.master.wake_at.is_some_and(|at| at <= now) {
                self.sim.step(Input::Tick).await;
            }
            if self.minion.next_timeout().is_some_and(|at| at <= now) {
                self.input(MinionInput::Timer);
            }
            self.pump().await;
        }
    }

    /// The minion's running job `jid` ends as `outcome`.
    async fn finish(&mut self, jid: &str, outcome: Outcome) {
        let at = self.running.iter().position(|j| j.jid == jid).expect("running");
        self.running.remove(at);
        let ret = JobReturn {
            jid: jid.into(),
            minion: String::new(),
            success: outcome == Outcome::Completed,
            retcode: 0,
            outputs: serde_json::json!({ "ok": true }),
            truncated: false,
            duration_ms: 3,
            outcome,
        };
        self.input(MinionInput::JobFinished(ret));
        self.pump().await;
    }

    async fn publish(&mut self, root: &mut SimPeer, timeout_ms: u64) -> String {
        let id = self.id.clone();
        let jid = self.sim.publish(root, &id, "test.ping", timeout_ms, 0).await.expect("published");
        self.pump().await;
        jid
    }

    async fn state(&self, jid: &str) -> (MinionJobState, Option<JobReturn>) {
        let detail = self.sim.store().job(jid).await.expect("store").expect("job stored");
        let m = detail.minions.into_iter().find(|m| m.minion == self.id).expect("minion in job");
        (m.state, m.ret)
    }

    fn online(&self) -> bool {
        self.sim.master.core.sessions().is_online(&self.id)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_job_goes_from_the_master_to_the_minion_core_and_its_return_is_stored_and_acknowledged() {
    rt().block_on(async {
        let mut pair = Pair::new("web1", true, 4).await;
        assert!(pair.minion.is_up() && pair.online(), "handshake, hello and welcome");
        let mut root = pair.sim.root().await;
        let jid = pair.publish(&mut root, 10_000).await;
        assert_eq!(pair.started, [jid.as_str()]);
        pair.finish(&jid, Outcome::Completed).await;
        let (state, ret) = pair.state(&jid).await;
        assert_eq!(state, MinionJobState::Returned);
        assert_eq!(ret.expect("stored").minion, "web1");
        assert_eq!(pair.minion.unacknowledged(), 0, "acknowledged once stored");
    });
}

#[test]
fn a_return_made_while_the_connection_was_down_is_sent_after_the_reconnect_until_acknowledged() {
    rt().block_on(async {
        let mut pair = Pair::new("web1", true, 4).await;
        let mut root = pair.sim.root().await;
        let jid = pair.publish(&mut root, 60_000).await;
        pair.connection_lost().await;
        assert!(!pair.online());
        pair.finish(&jid, Outcome::Completed).await;
        assert_eq!(pair.minion.unacknowledged(), 1, "kept in the outbox");
        pair.advance(Duration::from_secs(2)).await;
        pair.link_reconnects().await;
        assert!(pair.online());
        assert_eq!(pair.state(&jid).await.0, MinionJobState::Returned);
        assert_eq!(pair.minion.unacknowledged(), 0);
        assert_eq!(pair.started, [jid], "the master's redelivery after the welcome did not run it again");
    });
}

#[test]
fn a_job_redelivered_after_a_reconnect_or_a_restart_runs_once() {
    rt().block_on(async {
        let mut pair = Pair::new("web1", true, 4).await;
        let mut root = pair.sim.root().await;
        let jid = pair.publish(&mut root, 60_000).await;
        // Reconnected while it runs: the master sends it again, the minion knows it.
        pair.connection_lost().await;
        pair.link_reconnects().await;
        assert_eq!(pair.started, [jid.as_str()]);
        // Restarted while it runs: its marker is on disk, its return never was.
        pair.restart().await;
        assert!(pair.online());
        assert_eq!(pair.started, [jid.as_str()], "not run twice");
        let (state, ret) = pair.state(&jid).await;
        assert_eq!(ret.map(|r| r.outcome), Some(Outcome::Interrupted), "{state:?}");
        assert_eq!(pair.minion.unacknowledged(), 0);
    });
}

#[test]
fn a_waiting_minion_backs_off_and_is_let_in_the_moment_its_key_is_accepted() {
    rt().block_on(async {
        let mut pair = Pair::new("newcomer", false, 4).await;
        assert!(!pair.minion.is_up() && !pair.online(), "pending");
        let first = pair.sim.last_peer();
        // Parked: no knock before the back-off (at least half a second), one soon after.
        pair.advance(Duration::from_millis(400)).await;
        assert_eq!(pair.sim.last_peer(), first);
        pair.advance(Duration::from_secs(2)).await;
        assert!(pair.sim.last_peer() > first, "knocked again");
        // An operator accepts: the parked connection is closed with the word, and the next
        // connection is let in.
        let mut root = pair.sim.root().await;
        pair.sim.request(&mut root, RequestBody::KeyAccept { pattern: "newcomer".into() }).await.expect("accepted");
        pair.pump().await;
        assert_eq!(pair.minion.next_timeout(), None, "no knock planned: the link connects at once");
        pair.link_reconnects().await;
        assert!(pair.minion.is_up() && pair.online());
    });
}

#[test]
fn a_busy_minion_queues_jobs_and_one_that_waited_past_its_timeout_never_runs() {
    rt().block_on(async {
        let mut pair = Pair::new("web1", true, 1).await;
        let mut root = pair.sim.root().await;
        let first = pair.publish(&mut root, 60_000).await;
        let second = pair.publish(&mut root, 60_000).await;
        let third = pair.publish(&mut root, 2_000).await;
        assert_eq!(pair.started, [first.as_str()], "one slot");
        pair.advance(Duration::from_secs(4)).await;
        pair.finish(&first, Outcome::Completed).await;
        assert_eq!(pair.started, [first.clone(), second.clone()], "the next in jid order");
        assert_eq!(pair.running[0].timeout_ms, 56_000, "with the time it has left");
        pair.finish(&second, Outcome::Completed).await;
        assert_eq!(pair.started.len(), 2, "the third waited past its timeout");
        assert_eq!(pair.state(&third).await.0, MinionJobState::TimedOut);
    });
}

#[test]
fn a_job_that_reaches_a_frozen_minion_past_its_start_time_is_reported_timed_out_and_never_run() {
    rt().block_on(async {
        let mut pair = Pair::new("web1", true, 4).await;
        let mut root = pair.sim.root().await;
        let id = pair.id.clone();
        let jid = pair.sim.publish(&mut root, &id, "test.ping", 5_000, 0).await.expect("published");
        // The minion does not read for 30 s; the master's time goes on.
        pair.sim.advance(Duration::from_secs(30)).await;
        pair.pump().await;
        assert!(pair.started.is_empty(), "never run");
        assert_eq!(pair.state(&jid).await.0, MinionJobState::TimedOut);
        assert_eq!(pair.minion.unacknowledged(), 0, "its report was stored");
    });
}

#[test]
fn a_cancel_reaches_the_running_job() {
    rt().block_on(async {
        let mut pair = Pair::new("web1", true, 4).await;
        let mut root = pair.sim.root().await;
        let jid = pair.publish(&mut root, 60_000).await;
        let cancel = halite_protocol::message::Message::Cancel(halite_protocol::message::Cancel { jid: jid.clone() });
        root.send(&mut pair.sim, &cancel).await;
        pair.pump().await;
        assert_eq!(pair.cancelled, [jid.as_str()]);
        pair.finish(&jid, Outcome::Cancelled).await;
        assert_eq!(pair.state(&jid).await.0, MinionJobState::Cancelled);
    });
}

#[test]
fn returns_made_while_the_master_was_down_reach_the_restarted_master() {
    rt().block_on(async {
        let mut pair = Pair::new("web1", true, 4).await;
        let mut root = pair.sim.root().await;
        let jid = pair.publish(&mut root, 60_000).await;
        // The master is killed: its store and clock live on, the minion sees its connection go.
        let (store, clock) = (pair.sim.store().clone(), pair.sim.clock.clone());
        pair.peer = None;
        pair.input(MinionInput::Disconnected(CloseReason::Eof));
        pair.finish(&jid, Outcome::Completed).await;
        pair.sim = Sim::with_store(store, clock, |c| c.timeout_grace_secs = 1).await;
        pair.link_reconnects().await;
        assert!(pair.online());
        assert_eq!(pair.state(&jid).await.0, MinionJobState::Returned);
        assert_eq!(pair.minion.unacknowledged(), 0);
        assert_eq!(pair.started, [jid.as_str()], "run once");
    });
}

#[test]
fn a_job_with_a_ttl_waits_for_the_offline_minion_and_runs_when_it_is_back() {
    rt().block_on(async {
        let mut pair = Pair::new("web1", true, 4).await;
        let mut root = pair.sim.root().await;
        pair.connection_lost().await;
        let id = pair.id.clone();
        let jid = pair.sim.publish(&mut root, &id, "test.ping", 10_000, 60_000).await.expect("published");
        pair.advance(Duration::from_secs(5)).await;
        assert!(pair.started.is_empty());
        pair.link_reconnects().await;
        assert_eq!(pair.started, [jid.as_str()]);
        pair.finish(&jid, Outcome::Completed).await;
        assert_eq!(pair.state(&jid).await.0, MinionJobState::Returned);
    });
}

#[test]
fn a_return_after_the_masters_deadline_is_still_taken_and_acknowledged() {
    rt().block_on(async {
        let mut pair = Pair::new("web1", true, 4).await;
        let mut root = pair.sim.root().await;
        let jid = pair.publish(&mut root, 2_000).await;
        pair.advance(Duration::from_secs(4)).await;
        assert_eq!(pair.state(&jid).await.0, MinionJobState::TimedOut, "the master's deadline");
        pair.finish(&jid, Outcome::Completed).await;
        assert_eq!(pair.minion.unacknowledged(), 0, "the minion does not keep it forever");
    });
}
