//! The core in simulated time, against a master made of a Noise responder and a session: each
//! test names the rule it holds the minion to.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_modules::{Dispatcher, PathGuard, Policy, Registry};
use halite_protocol::identity::IdentityKey;
use halite_protocol::message::{self, Cancel, Job, JobReturn, Message, Outcome, ReturnAck, SignedJob, Welcome};
use halite_protocol::noise::{Claim, LocalIdentity, Responder, Session, SessionConfig};
use halite_transport::CloseReason;

use super::{Effect, Input, MinionCore, Settings};
use crate::outbox::Outbox;

/// The master's wall time in these tests.
const MASTER_MS: u64 = 1_795_242_922_123;

/// How the fake master answers a handshake.
#[derive(Clone, Copy)]
enum Verdict {
    Accept,
    Pending,
}

/// One minion core, the master it talks to, and the time.
struct Test {
    core: MinionCore,
    start: Instant,
    now: Instant,
    dir: PathBuf,
    master_key: IdentityKey,
    master: LocalIdentity,
    /// The master's side of the current session.
    session: Option<Session>,
}

fn settings(dir: &std::path::Path, master: &LocalIdentity, masters: usize, max_jobs: usize) -> Settings {
    let dispatcher = Dispatcher {
        registry: Arc::new(Registry::standard()),
        policy: Policy::default(),
        plans_dir: dir.join("plans"),
        deploy: Default::default(),
        paths: PathGuard::new(&[dir.to_path_buf()], None),
    };
    Settings {
        id: "web1".into(),
        masters,
        identity: LocalIdentity::new(IdentityKey::from_seed(&[3; 32])).expect("identity"),
        master_key: Some(master.public()),
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

impl Test {
    fn new(name: &str, masters: usize, max_jobs: usize) -> Test {
        let dir = std::env::temp_dir().join(format!("halite-core-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let master_key = IdentityKey::from_seed(&[1; 32]);
        let master = LocalIdentity::new(IdentityKey::from_seed(master_key.seed())).expect("identity");
        let now = Instant::now();
        let mut core = MinionCore::new(settings(&dir, &master, masters, max_jobs), now);
        assert_eq!(core.start(), [Effect::Connect]);
        Test { core, start: now, now, dir, master_key, master, session: None }
    }

    /// The same minion, restarted on its state directory.
    fn restart(self) -> Test {
        let Test { core, start, now, dir, master_key, master, .. } = self;
        drop(core);
        let mut core = MinionCore::new(settings(&dir, &master, 1, 1), now);
        assert_eq!(core.start(), [Effect::Connect]);
        Test { core, start, now, dir, master_key, master, session: None }
    }

    fn input(&mut self, input: Input) -> Vec<Effect> {
        self.core.handle(input, self.now)
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
    }

    /// Lets time pass to the core's next deadline and fires it.
    fn timer(&mut self) -> Vec<Effect> {
        self.now = self.core.next_timeout().expect("a deadline");
        self.input(Input::Timer)
    }

    /// A connection and its handshake; the effects of the verdict.
    fn handshake(&mut self, verdict: Verdict) -> Vec<Effect> {
        let msg1 = raw(self.input(Input::Connected));
        let name = Claim::new("master", None).expect("claim");
        let responder = Responder::new(&self.master, name, SessionConfig::default()).expect("responder");
        let (awaiting, msg2) = responder.read_hello(&msg1).expect("message 1");
        let msg3 = raw(self.input(Input::Message(vec![msg2])));
        let identified = awaiting.read_identity(&msg3).expect("message 3");
        let parts = match verdict {
            Verdict::Accept => {
                let (session, parts) = identified.accept(self.now).expect("accept");
                self.session = Some(session);
                parts
            }
            Verdict::Pending => identified.defer("waiting for an operator", self.now).expect("defer"),
        };
        self.input(Input::Message(parts))
    }

    /// An accepted session, welcomed: what the minion sent after its hello.
    fn up(&mut self) -> Vec<Message> {
        let effects = self.handshake(Verdict::Accept);
        assert_eq!(effects.first(), Some(&Effect::MarkAuthenticated));
        let sent = self.messages(effects);
        assert!(matches!(sent.first(), Some(Message::Hello(h)) if h.id == "web1"), "{sent:?}");
        let welcome = Welcome {
            master_id: "master".into(),
            version: "test".into(),
            now_ms: self.master_ms(),
            revoked: Vec::new(),
            revocations_only: false,
        };
        assert_eq!(self.master_sends(&Message::Welcome(welcome)), []);
        sent.into_iter().skip(1).collect()
    }

    /// The master's wall time now: it was [`MASTER_MS`] when the test started.
    fn master_ms(&self) -> u64 {
        MASTER_MS + (self.now - self.start).as_millis() as u64
    }

    fn master_sends(&mut self, msg: &Message) -> Vec<Effect> {
        let session = self.session.as_mut().expect("a session");
        let parts = session.seal(&message::encode(msg), self.now).expect("seal");
        self.input(Input::Message(parts))
    }

    /// The messages among `effects`, as the master reads them; effects other than these, a
    /// job's start and the session's authentication fail the test.
    fn messages(&mut self, effects: Vec<Effect>) -> Vec<Message> {
        let session = self.session.as_mut().expect("a session");
        let mut out = Vec::new();
        for effect in effects {
            match effect {
                Effect::Send(parts) => {
                    let bytes = session.open(&parts, self.now).expect("open");
                    out.push(message::decode(&bytes).expect("decode"));
                }
                Effect::MarkAuthenticated | Effect::Run(_) => {}
                other => panic!("not a message: {other:?}"),
            }
        }
        out
    }

    /// A job signed by the master, sent now with `timeout_ms` to start.
    fn job(&self, jid: &str, timeout_ms: u64) -> SignedJob {
        self.job_signed_by(jid, timeout_ms, &self.master_key)
    }

    /// [`Test::job`] signed by `key`.
    fn job_signed_by(&self, jid: &str, timeout_ms: u64, key: &IdentityKey) -> SignedJob {
        let job = Job {
            jid: jid.into(),
            function: "test.ping".into(),
            args: Vec::new(),
            kwargs: Default::default(),
            timeout_ms,
            issued_at_ms: self.master_ms(),
            ttl_ms: 0,
            caller: "root".into(),
            reach: None,
        };
        let mut signed = SignedJob::sign(&job, key);
        signed.start_by_ms = Some(self.master_ms() + timeout_ms);
        signed
    }
}

/// A master's answer to a hello, dated at the start of the test.
fn welcome() -> Welcome {
    Welcome {
        master_id: "m".into(),
        version: "t".into(),
        now_ms: MASTER_MS,
        revoked: Vec::new(),
        revocations_only: false,
    }
}

/// The one raw (handshake) message among `effects`.
fn raw(effects: Vec<Effect>) -> Vec<u8> {
    match <[Effect; 1]>::try_from(effects) {
        Ok([Effect::Send(mut parts)]) if parts.len() == 1 => parts.remove(0),
        other => panic!("not one handshake message: {other:?}"),
    }
}

fn ran(effects: &[Effect]) -> Vec<&str> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Run(job) => Some(job.jid.as_str()),
            _ => None,
        })
        .collect()
}

fn done(jid: &str) -> JobReturn {
    JobReturn {
        jid: jid.into(),
        minion: String::new(),
        success: true,
        retcode: 0,
        outputs: serde_json::json!({ "ok": true }),
        truncated: false,
        duration_ms: 1,
        outcome: Outcome::Completed,
    }
}

fn returns(messages: &[Message]) -> Vec<(&str, Outcome)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::JobReturn(r) => Some((r.jid.as_str(), r.outcome)),
            _ => None,
        })
        .collect()
}

const JID: &str = "20261121000000000001";
const JID2: &str = "20261121000000000002";
const JID3: &str = "20261121000000000003";

#[test]
fn a_pending_minion_waits_for_the_master_then_knocks_again_after_a_growing_backoff() {
    let mut t = Test::new("pending", 1, 1);
    assert_eq!(t.handshake(Verdict::Pending), [], "parked: the connection stays open");
    let first = t.core.next_timeout().expect("a knock is planned") - t.now;
    assert!((Duration::from_millis(500)..=Duration::from_secs(1)).contains(&first), "{first:?}");
    // The master closes without a word of acceptance: no reconnect until the backoff is over.
    assert_eq!(t.input(Input::Disconnected(CloseReason::Eof)), [Effect::DropLink]);
    assert_eq!(t.timer(), [Effect::Connect]);
    assert_eq!(t.handshake(Verdict::Pending), []);
    let second = t.core.next_timeout().expect("a knock is planned") - t.now;
    assert!((Duration::from_secs(1)..=Duration::from_secs(2)).contains(&second), "{second:?}");
    // Accepted meanwhile: the master says so as it closes, and the link reconnects at once.
    let accepted = halite_protocol::zmtp::ZmtpError::PeerError(halite_protocol::noise::KEY_ACCEPTED_REASON.into());
    assert_eq!(t.input(Input::Disconnected(CloseReason::Protocol(accepted))), []);
    assert_eq!(t.core.next_timeout(), None, "the knock is not needed any more");
    t.up();
    assert!(t.core.is_up());
}

#[test]
fn a_master_that_fails_the_handshake_is_left_for_the_next_and_after_all_of_them_the_minion_backs_off() {
    let mut t = Test::new("next-master", 2, 1);
    for round in 0..2 {
        let _ = raw(t.input(Input::Connected));
        let wrong = t.input(Input::Message(vec![b"not a message 2".to_vec()]));
        assert_eq!(wrong, [Effect::MoveOn("master handshake failed".into())], "round {round}");
        let _ = raw(t.input(Input::Connected));
        assert_eq!(t.input(Input::Message(vec![b"nor this".to_vec()])), [Effect::DropLink], "every master failed");
        assert_eq!(t.timer(), [Effect::Connect]);
    }
    // Another process with this key took the session: back off rather than take it back.
    t.up();
    let replaced = halite_protocol::zmtp::ZmtpError::PeerError(halite_protocol::noise::REPLACED_REASON.into());
    assert_eq!(t.input(Input::Disconnected(CloseReason::Protocol(replaced))), [Effect::DropLink]);
    assert!(t.core.next_timeout().is_some_and(|at| at > t.now));
}

#[test]
fn a_job_runs_once_even_delivered_twice_and_after_a_restart() {
    let mut t = Test::new("run-once", 1, 1);
    t.up();
    let effects = t.master_sends(&Message::Job(t.job(JID, 10_000)));
    assert_eq!(ran(&effects), [JID]);
    assert!(matches!(t.messages(effects).as_slice(), [Message::JobAck(a)] if a.jid == JID));
    assert_eq!(t.master_sends(&Message::Job(t.job(JID, 10_000))), [], "a duplicate of a running job");
    // Finished: the return goes, and a delivery again gets the stored return, not a second run.
    let sent = t.input(Input::JobFinished(done(JID)));
    assert_eq!(returns(&t.messages(sent)), [(JID, Outcome::Completed)]);
    let again = t.master_sends(&Message::Job(t.job(JID, 10_000)));
    assert_eq!(returns(&t.messages(again)), [(JID, Outcome::Completed)]);
    // A job that started and whose return was never written (the minion stopped while it ran).
    let effects = t.master_sends(&Message::Job(t.job(JID2, 10_000)));
    assert_eq!(ran(&effects), [JID2]);
    let mut t = t.restart();
    let resent = t.up();
    assert_eq!(returns(&resent), [(JID, Outcome::Completed)], "the unacknowledged return, again");
    let effects = t.master_sends(&Message::Job(t.job(JID2, 10_000)));
    assert!(ran(&effects).is_empty(), "never run twice");
    assert_eq!(returns(&t.messages(effects)), [(JID2, Outcome::Interrupted)]);
}

#[test]
fn returns_are_sent_at_every_session_until_acknowledged_and_synced_within_milliseconds() {
    let mut t = Test::new("redelivery", 1, 1);
    t.up();
    let _ = t.master_sends(&Message::Job(t.job(JID, 10_000)));
    let sent = t.input(Input::JobFinished(done(JID)));
    assert_eq!(returns(&t.messages(sent)), [(JID, Outcome::Completed)]);
    let sync = t.core.next_timeout().expect("the return's sync") - t.now;
    assert_eq!(sync, crate::outbox::RETURN_SYNC_DELAY);
    assert_eq!(t.timer(), []);
    assert_eq!(t.core.next_timeout(), None);
    // The connection drops before the acknowledgement: the next session sends it again.
    assert_eq!(t.input(Input::Disconnected(CloseReason::Eof)), []);
    assert_eq!(returns(&t.up()), [(JID, Outcome::Completed)]);
    assert_eq!(t.master_sends(&Message::ReturnAck(ReturnAck { jid: JID.into() })), []);
    assert_eq!(t.input(Input::Disconnected(CloseReason::Eof)), []);
    assert_eq!(returns(&t.up()), [], "acknowledged: not sent again");
}

#[test]
fn a_master_that_asks_for_returns_again_gets_the_unacknowledged_ones_in_the_same_session() {
    let mut t = Test::new("resend", 1, 1);
    t.up();
    for jid in [JID, JID2] {
        let _ = t.master_sends(&Message::Job(t.job(jid, 10_000)));
        let _ = t.input(Input::JobFinished(done(jid)));
    }
    assert_eq!(t.master_sends(&Message::ReturnAck(ReturnAck { jid: JID.into() })), []);
    // The master could not store JID2's return and asks: it comes again, the session stays.
    let resent = t.master_sends(&Message::ResendReturns(message::ResendReturns {}));
    assert_eq!(returns(&t.messages(resent)), [(JID2, Outcome::Completed)]);
    assert_eq!(t.master_sends(&Message::ReturnAck(ReturnAck { jid: JID2.into() })), []);
    let resent = t.master_sends(&Message::ResendReturns(message::ResendReturns {}));
    assert_eq!(returns(&t.messages(resent)), [], "nothing left unacknowledged");
}

#[test]
fn stale_late_and_unwelcomed_jobs_are_never_run() {
    let mut t = Test::new("freshness", 1, 1);
    // Before the welcome, a job may have waited unread for any time: left for the redelivery.
    let effects = t.handshake(Verdict::Accept);
    let _ = t.messages(effects);
    assert_eq!(t.master_sends(&Message::Job(t.job(JID, 10_000))), []);
    let welcome = Welcome { now_ms: t.master_ms(), ..welcome() };
    assert_eq!(t.master_sends(&Message::Welcome(welcome)), []);
    // Ten minutes on the master's clock: issued then, this job expired long ago.
    let old = t.job(JID, 10_000);
    t.advance(Duration::from_secs(600));
    let effects = t.master_sends(&Message::Job(old));
    assert!(ran(&effects).is_empty());
    assert_eq!(returns(&t.messages(effects)), [(JID, Outcome::TimedOut)]);
    // Fresh by its TTL, but past the time the master gave it to start.
    let mut late = t.job(JID2, 10_000);
    late.start_by_ms = Some(t.master_ms() - 100_000);
    let effects = t.master_sends(&Message::Job(late));
    assert!(ran(&effects).is_empty());
    assert_eq!(returns(&t.messages(effects)), [(JID2, Outcome::TimedOut)]);
}

#[test]
fn a_slow_welcome_is_asked_again_before_its_time_is_trusted() {
    let mut t = Test::new("slow-welcome", 1, 1);
    let effects = t.handshake(Verdict::Accept);
    let _ = t.messages(effects);
    t.advance(Duration::from_secs(3));
    let welcome = Welcome { now_ms: MASTER_MS, ..welcome() };
    let effects = t.master_sends(&Message::Welcome(welcome.clone()));
    assert!(matches!(t.messages(effects).first(), Some(Message::Hello(_))), "asked again");
    assert_eq!(t.master_sends(&Message::Job(t.job(JID, 10_000))), [], "still waiting for the answer");
    assert_eq!(t.master_sends(&Message::Welcome(welcome)), []);
    assert_eq!(ran(&t.master_sends(&Message::Job(t.job(JID, 10_000)))), [JID]);
}

#[test]
fn jobs_wait_for_a_free_slot_in_jid_order_and_time_out_waiting() {
    let mut t = Test::new("queue", 1, 1);
    t.up();
    assert_eq!(ran(&t.master_sends(&Message::Job(t.job(JID, 10_000)))), [JID]);
    let queued = t.master_sends(&Message::Job(t.job(JID3, 10_000)));
    assert!(ran(&queued).is_empty(), "every slot is taken");
    assert!(matches!(t.messages(queued).as_slice(), [Message::JobAck(a)] if a.jid == JID3), "accepted meanwhile");
    let _ = t.master_sends(&Message::Job(t.job(JID2, 60_000)));
    // The first ends after 4 s: the lowest jid waiting starts, with the time it has left.
    t.advance(Duration::from_secs(4));
    let effects = t.input(Input::JobFinished(done(JID)));
    let started: Vec<&Job> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Run(job) => Some(job),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 1);
    assert_eq!((started[0].jid.as_str(), started[0].timeout_ms), (JID2, 56_000));
    // The other waits past its 10 s: never started, reported timed out.
    t.advance(Duration::from_secs(7));
    let effects = t.input(Input::JobFinished(done(JID2)));
    assert!(ran(&effects).is_empty());
    assert_eq!(returns(&t.messages(effects)), [(JID2, Outcome::Completed), (JID3, Outcome::TimedOut)]);
}

#[test]
fn a_cancelled_job_is_stopped_or_never_started() {
    let mut t = Test::new("cancel", 1, 1);
    t.up();
    let _ = t.master_sends(&Message::Job(t.job(JID, 10_000)));
    let _ = t.master_sends(&Message::Job(t.job(JID2, 10_000)));
    assert_eq!(t.master_sends(&Message::Cancel(Cancel { jid: JID.into() })), [Effect::Cancel(JID.into())]);
    let effects = t.master_sends(&Message::Cancel(Cancel { jid: JID2.into() }));
    assert_eq!(returns(&t.messages(effects)), [(JID2, Outcome::Cancelled)]);
}

#[test]
fn a_cancelled_jobs_slot_is_free_once_it_has_stopped() {
    let mut t = Test::new("cancel-slot", 1, 1);
    t.up();
    for round in 0..3 {
        let (first, second) = (format!("2026112100000000{round}010"), format!("2026112100000000{round}020"));
        assert_eq!(ran(&t.master_sends(&Message::Job(t.job(&first, 10_000)))).len(), 1, "round {round}");
        assert!(ran(&t.master_sends(&Message::Job(t.job(&second, 10_000)))).is_empty(), "one slot");
        assert_eq!(t.master_sends(&Message::Cancel(Cancel { jid: first.clone() })), [Effect::Cancel(first.clone())]);
        // Cancelled again before it stops: asked again, and still one place.
        assert_eq!(t.master_sends(&Message::Cancel(Cancel { jid: first.clone() })), [Effect::Cancel(first.clone())]);
        let mut stopped = done(&first);
        stopped.outcome = Outcome::Cancelled;
        let effects = t.input(Input::JobFinished(stopped));
        assert_eq!(ran(&effects), [second.as_str()], "the stopped job's slot went to the queued one");
        let _ = t.input(Input::JobFinished(done(&second)));
    }
}

#[test]
fn what_functions_ask_of_the_master_fails_at_once_without_a_session() {
    let mut t = Test::new("requests", 1, 1);
    let (reply, mut answer) = tokio::sync::oneshot::channel();
    let request = halite_modules::FileRequest { path: "a".into(), offset: 0, reply };
    assert_eq!(t.input(Input::File(request)), []);
    assert!(matches!(answer.try_recv(), Ok(Err(_))));
    t.up();
    let (reply, mut answer) = tokio::sync::oneshot::channel();
    let request = halite_modules::FileRequest { path: "a".into(), offset: 0, reply };
    let effects = t.input(Input::File(request));
    assert!(matches!(t.messages(effects).as_slice(), [Message::FileGet(g)] if g.request_id == 1));
    // The session goes: the part will not come.
    let _ = t.input(Input::Disconnected(CloseReason::Eof));
    assert!(matches!(answer.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Closed)));
}

#[test]
fn a_reload_is_announced_events_need_a_session_and_a_lost_link_is_opened_again() {
    let mut t = Test::new("reload", 1, 1);
    let event = || halite_modules::OutgoingEvent { tag: "deploy/done".into(), data: serde_json::json!({}) };
    assert_eq!(t.input(Input::Event(event())), [], "no session: dropped");
    t.up();
    let effects = t.input(Input::Event(event()));
    assert!(matches!(t.messages(effects).as_slice(), [Message::Event(e)] if e.tag == "deploy/done"));
    let dispatcher = t.core.dispatcher().clone();
    let effects = t.input(Input::Reloaded(dispatcher));
    assert!(matches!(t.messages(effects).first(), Some(Message::Hello(_))), "the master hears the new list");
    assert_eq!(t.input(Input::LinkGone), [Effect::Connect]);
    assert!(!t.core.is_up());
    assert_eq!(t.input(Input::Shutdown), []);
}

/// However many queued jobs end unstarted when a slot frees (here: every one waited past its
/// timeout), each ends once and in jid order, in one pass over the queue, not one nested call
/// per job.
#[test]
fn a_long_queue_that_ends_unstarted_ends_in_one_pass() {
    const QUEUED: usize = 3_000;
    let mut t = Test::new("long-queue", 1, 1);
    t.up();
    assert_eq!(ran(&t.master_sends(&Message::Job(t.job(JID, 0)))), [JID]);
    let jids: Vec<String> = (0..QUEUED).map(|i| format!("2026112200000{i:07}")).collect();
    for jid in &jids {
        let _ = t.master_sends(&Message::Job(t.job(jid, 1_000)));
    }
    t.advance(Duration::from_secs(2));
    // A thread with a small stack: a call per queued job would overflow it.
    let effects = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn_scoped(scope, || t.input(Input::JobFinished(done(JID))))
            .expect("a thread")
            .join()
            .expect("no overflow")
    });
    let messages = t.messages(effects);
    let ended: Vec<(&str, Outcome)> = returns(&messages).into_iter().filter(|(jid, _)| *jid != JID).collect();
    assert_eq!(ended.len(), QUEUED);
    assert!(ended.iter().all(|(_, outcome)| *outcome == Outcome::TimedOut), "{:?}", &ended[..3]);
    assert!(ended.iter().map(|(jid, _)| *jid).eq(jids.iter().map(String::as_str)), "in jid order");
}

/// A second master of the cluster: its key, certified by the pinned key.
struct OtherMaster {
    key: IdentityKey,
    certificate: halite_protocol::noise::MasterCertificate,
}

impl OtherMaster {
    fn certified_by(t: &Test) -> Self {
        let key = IdentityKey::from_seed(&[7; 32]);
        let certificate = halite_protocol::noise::MasterCertificate::issue(&t.master_key, &key.public(), "m2");
        OtherMaster { key, certificate }
    }

    /// The notice a master sends its connected minions when the cluster key revokes this one
    /// (answering no hello), dated `now_ms`.
    fn revoked_notice(&self, t: &Test, now_ms: u64) -> Welcome {
        let revocation = halite_protocol::noise::Revocation::issue(&t.master_key, &self.key.public()).to_hex();
        Welcome { now_ms, revoked: vec![revocation], revocations_only: true, ..welcome() }
    }

    /// Job `jid` as it signs it, to start within ten seconds.
    fn signs(&self, t: &Test, jid: &str) -> SignedJob {
        let job = t.job(jid, 10_000).verify(&t.master_key.public()).expect("a job");
        let mut signed = SignedJob::sign_certified(&job, &self.key, &self.certificate, "m2");
        signed.start_by_ms = Some(t.master_ms() + 10_000);
        signed
    }
}

/// A job a master signed, accepted and queued behind another, never starts once the cluster
/// key revokes that master: it ends denied, and the pinned master's jobs still run.
#[test]
fn a_queued_job_of_a_master_revoked_while_it_waited_never_starts() {
    let mut t = Test::new("revoked-queued", 1, 1);
    t.up();
    let other = OtherMaster::certified_by(&t);
    // One slot: the pinned master's job runs, the other master's waits, accepted.
    assert_eq!(ran(&t.master_sends(&Message::Job(t.job(JID, 10_000)))), [JID]);
    let effects = t.master_sends(&Message::Job(other.signs(&t, JID2)));
    let acked = t.messages(effects);
    assert!(matches!(acked.as_slice(), [Message::JobAck(a)] if a.jid == JID2 && a.accepted), "{acked:?}");
    let told = other.revoked_notice(&t, MASTER_MS);
    assert_eq!(t.master_sends(&Message::Welcome(told)), []);
    // The slot frees: the queued job is denied, not run.
    let effects = t.input(Input::JobFinished(done(JID)));
    assert!(ran(&effects).is_empty(), "{effects:?}");
    let sent = t.messages(effects);
    let denied = sent.iter().find_map(|m| match m {
        Message::JobReturn(r) if r.jid == JID2 => Some(r),
        _ => None,
    });
    let denied = denied.unwrap_or_else(|| panic!("no return for the queued job: {sent:?}"));
    assert_eq!(denied.outcome, Outcome::Denied);
    assert!(denied.outputs["error"].as_str().is_some_and(|e| e.contains("revoked")), "{denied:?}");
    assert_eq!(ran(&t.master_sends(&Message::Job(t.job(JID3, 10_000)))), [JID3]);
}

#[test]
fn revocations_told_outside_a_hello_stop_new_jobs_of_that_master_but_not_those_accepted() {
    let mut t = Test::new("revoked", 1, 1);
    t.up();
    // A master of the cluster (the pinned key certified it) signs a job; it runs.
    let other = OtherMaster::certified_by(&t);
    assert_eq!(ran(&t.master_sends(&Message::Job(other.signs(&t, JID)))), [JID]);
    // The master tells of its revocation in a welcome answering no hello.
    // Its time says ten hours later: taken, it would make every job look stale.
    let told = other.revoked_notice(&t, t.master_ms() + 36_000_000);
    assert_eq!(t.master_sends(&Message::Welcome(told.clone())), [], "no hello was asked: nothing answered");
    // The job it accepted before keeps its course: delivered again, it is not refused.
    assert_eq!(t.master_sends(&Message::Job(other.signs(&t, JID))), []);
    // A new one is refused; the master's own jobs still run (its time was not taken from the
    // welcome: a job issued now is fresh).
    let effects = t.master_sends(&Message::Job(other.signs(&t, JID2)));
    let refused = t.messages(effects);
    assert!(
        matches!(refused.as_slice(), [Message::Error(e)] if e.request.as_deref() == Some(JID2) && e.message.contains("revoked")),
        "{refused:?}"
    );
    let _ = t.input(Input::JobFinished(done(JID)));
    assert_eq!(ran(&t.master_sends(&Message::Job(t.job(JID3, 10_000)))), [JID3]);
    let _ = t.input(Input::JobFinished(done(JID3)));

    // A hello waiting for its answer keeps waiting: the notice is not taken for the answer.
    let _ = t.input(Input::Disconnected(CloseReason::Eof));
    let effects = t.handshake(Verdict::Accept);
    let _ = t.messages(effects);
    assert_eq!(t.master_sends(&Message::Welcome(told)), []);
    const JID4: &str = "20261121000000000004";
    assert_eq!(t.master_sends(&Message::Job(t.job(JID4, 10_000))), [], "left for the answer to its hello");
    assert_eq!(t.master_sends(&Message::Welcome(Welcome { now_ms: t.master_ms(), ..welcome() })), []);
    assert_eq!(ran(&t.master_sends(&Message::Job(t.job(JID4, 10_000)))), [JID4]);
    let _ = t.input(Input::JobFinished(done(JID4)));
    // A second answer, to no hello waiting, dates nothing either.
    let _ = t.master_sends(&Message::Welcome(Welcome { now_ms: t.master_ms() + 36_000_000, ..welcome() }));
    const JID5: &str = "20261121000000000005";
    assert_eq!(ran(&t.master_sends(&Message::Job(t.job(JID5, 10_000)))), [JID5]);
}

#[test]
fn a_job_signed_by_a_key_it_does_not_trust_is_refused_naming_its_jid() {
    let mut t = Test::new("signer", 1, 1);
    let effects = t.handshake(Verdict::Accept);
    let _ = t.messages(effects);
    let welcome = Welcome { now_ms: t.master_ms(), ..welcome() };
    assert_eq!(t.master_sends(&Message::Welcome(welcome)), []);
    // Signed by a master this minion neither pins nor finds certified.
    let forged = t.job_signed_by(JID, 10_000, &IdentityKey::generate_os());
    let effects = t.master_sends(&Message::Job(forged));
    assert!(ran(&effects).is_empty());
    let refusals: Vec<(message::ErrorKind, Option<String>)> = t
        .messages(effects)
        .into_iter()
        .filter_map(|m| match m {
            Message::Error(e) => Some((e.kind, e.request)),
            _ => None,
        })
        .collect();
    assert_eq!(refusals, [(message::ErrorKind::BadSignature, Some(JID.to_owned()))]);
}
