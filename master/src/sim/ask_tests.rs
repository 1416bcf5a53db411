//! Handlers that need the store ask, and the loop answers (`outputs/asks.rs`): a job is stored
//! before anything of it leaves, a key's verdict may need a second store call, a gateway token
//! is granted once read, and each outcome, failures included, reaches the one who asked within
//! the step that asked.

use halite_protocol::message::{ErrorKind, JobSpec, Message, PublishRequest, RequestBody, ResponseBody};
use halite_protocol::message::{MinionJobState, Target, TargetKind};

use super::Sim;
use crate::core::sessions::Conn;
use crate::gateway::local::LocalCommand;
use crate::local_queue::local_queue;
use crate::server::Input;
use crate::store::Store;
use crate::token_sessions::TokenRefused;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// A minion's `peer.publish` whose job cannot be stored: the minion is told, and nothing of
/// the job is sent or live.
#[test]
fn a_job_a_minion_publishes_that_cannot_be_stored_is_refused_to_it_and_sent_nowhere() {
    rt().block_on(async {
        let mut sim = Sim::with_config(|c| {
            c.peers = vec![crate::acl::PeerRule {
                minions: vec!["web1".into()],
                target: "db*".into(),
                functions: vec!["test.ping".into()],
            }];
        })
        .await;
        let mut web1 = sim.minion("web1").await;
        let mut db1 = sim.minion("db1").await;
        let mut root = sim.root().await;
        // A row already holds the jid the generator hands out next (a clash).
        let first = sim.publish(&mut root, "db1", "test.ping", 1_000, 0).await.expect("published");
        assert_eq!(db1.jobs(&sim).len(), 1);
        let mut record = sim.store().unfinished_jobs().await.expect("store")[0].0.clone();
        let clash =
            halite_protocol::time::compact_utc(halite_protocol::time::parse_compact_utc(&first).expect("jid") + 1);
        record.jid = clash.clone();
        sim.store().insert_job(&record, &[("db1".into(), MinionJobState::Sent)]).await.expect("insert");
        web1.recv(&sim);

        let spec = JobSpec {
            timeout_ms: 1_000,
            ..JobSpec::new(Target { kind: TargetKind::Glob, expr: "db1".into() }, "test.ping")
        };
        web1.send(&mut sim, &Message::Publish(PublishRequest { request_id: 7, spec, on_behalf_of: None })).await;
        let answer = web1.recv(&sim);
        assert!(
            answer.iter().any(|m| matches!(m, Message::Error(e) if e.kind == ErrorKind::Internal
                && e.message.contains("could not be stored") && e.request.as_deref() == Some("7"))),
            "{answer:?}"
        );
        assert!(!answer.iter().any(|m| matches!(m, Message::Published(_))), "{answer:?}");
        assert!(db1.jobs(&sim).is_empty(), "nothing of the job was sent");
        assert!(sim.master.core.jobs().get(&clash).is_none(), "the refused publish never went live");
        assert_eq!(sim.master.core.jobs().len(), 1, "only root's first job is live");
        assert!(!sim.master.core.has_asks());
    });
}

/// A minion whose enrollment token did not enroll it waits, and is told why: the key's verdict
/// (one store call) asks for the token's problem (another) before the verdict leaves.
#[test]
fn a_minion_whose_token_is_for_another_id_waits_and_is_told_why() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut root = sim.root().await;
        let token = sim.enrollment_token(&mut root, "db9").await;
        let key = halite_protocol::identity::IdentityKey::from_seed(&super::seed_of("db8"));
        let pending = sim.connect_minion("db8", &key, Some(&token)).await.err().expect("pending");
        assert!(pending.contains("key pending acceptance"), "{pending}");
        assert!(pending.contains("bound to another minion id (db9)"), "{pending}");
        assert!(!sim.master.core.has_asks());
        assert!(!sim.master.core.registry().has_accepted("db8"));
    });
}

/// A minion knocking with a token while the store does not answer: no verdict, so the
/// connection closes and the minion knocks again; once the store answers, it waits and is told
/// what is wrong with its token.
#[test]
fn a_knock_with_a_token_while_the_store_is_away_closes_then_is_told_the_tokens_problem() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let key = halite_protocol::identity::IdentityKey::from_seed(&super::seed_of("db8"));
        let first = sim.connect_minion("db8", &key, None).await.err().expect("pending");
        assert!(first.contains("pending"), "{first}");
        let away = sim.store().take_away().await.expect("open");
        let _ = sim.connect_minion("db8", &key, Some("not-a-token")).await;
        let peer = halite_transport::PeerId(sim.last_peer());
        assert_eq!(sim.net.closed(peer).as_deref(), Some("the master's store is unavailable; try again"));
        assert!(sim.master.core.sessions().get(&peer).is_none(), "nobody holds the connection");
        sim.store().give_back(away).await;
        let again = sim.connect_minion("db8", &key, Some("not-a-token")).await.err().expect("pending");
        assert!(again.contains("not known to this master"), "{again}");
    });
}

/// A gateway token is read from the store before a session opens: a known one opens a session
/// as its principal, an unknown one is refused, and with the store away the reply is dropped
/// (the gateway answers that as unavailable) and no session opens: never left waiting.
#[test]
fn a_gateway_token_opens_a_session_only_once_the_store_granted_it() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut root = sim.root().await;
        let body = RequestBody::ApiTokenCreate { principal: "root".into(), ttl_ms: Some(60_000) };
        let Ok(ResponseBody::ApiToken(token)) = sim.request(&mut root, body).await else { panic!("a gateway token") };
        let connect = |hash: [u8; 32]| {
            let (to_client, _inbox) = local_queue();
            let (replied, answer) = tokio::sync::oneshot::channel();
            let reply = crate::local_sessions::Reply::new(move |opened| {
                let _ = replied.send(opened);
            });
            (Input::Local(LocalCommand::Connect { token_hash: hash, addr: None, to_client, reply }), answer)
        };
        let local_sessions =
            |sim: &Sim| sim.master.core.sessions().iter().filter(|(_, c)| matches!(c, Conn::Local { .. })).count();

        let (input, mut answer) = connect(crate::keys::token_hash(&token));
        sim.step(input).await;
        let opened = answer.try_recv().expect("answered within the step").expect("granted");
        assert_eq!(opened.principal, "root");
        assert_eq!(local_sessions(&sim), 1);

        let (input, mut answer) = connect([1; 32]);
        sim.step(input).await;
        assert_eq!(answer.try_recv().expect("answered within the step").err(), Some(TokenRefused::Unknown));

        let away = sim.store().take_away().await.expect("open");
        let (input, mut answer) = connect(crate::keys::token_hash(&token));
        sim.step(input).await;
        let dropped = matches!(answer.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Closed));
        assert!(dropped, "dropped, not pending");
        sim.store().give_back(away).await;
        assert_eq!(local_sessions(&sim), 1, "no session opened without a grant");
        assert!(!sim.master.core.has_asks());
    });
}
