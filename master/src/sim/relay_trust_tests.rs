//! Trust between callers in simulated time: the signal relay tells an engine no more than
//! "relayed" or "refused", a rollout's abort_on hears only what its publisher may receive, and
//! an enrollment token never takes an accepted identity over unless an administrator asked.

#![cfg(test)]

use std::collections::BTreeMap;

use halite_protocol::identity::IdentityKey;
use halite_protocol::message::{
    Amount, Event, KeyState, Message, NewSoftwareConfig, PrincipalAcl, PrincipalRule, RequestBody, ResponseBody,
    Rollout, SoftwareDeployment, Subscribe, Value,
};
use serde_json::json;

use super::{ret, seed_of, Sim, SimPeer};
use crate::acl::EventRule;
use crate::relay_requests::{Failure, RelayDone, RelayRequest};
use crate::server::Input;
use crate::store::{DeployStore, Store};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

fn rule(targets: &str, functions: &[&str]) -> PrincipalRule {
    PrincipalRule {
        targets: targets.into(),
        functions: functions.iter().map(|f| (*f).to_owned()).collect(),
        args: BTreeMap::new(),
    }
}

pub(super) fn events(client: &mut SimPeer, sim: &Sim) -> Vec<Event> {
    client
        .recv(sim)
        .into_iter()
        .filter_map(|m| match m {
            Message::Event(event) => Some(event),
            _ => None,
        })
        .collect()
}

pub(super) async fn subscribe(sim: &mut Sim, client: &mut SimPeer, pattern: &str) {
    client.send(sim, &Message::Subscribe(Subscribe { patterns: vec![pattern.into()], after: None })).await;
    client.recv(sim);
}

/// An engine principal that may deploy to `vm*` and read deployment events; and a config.
async fn engine(sim: &mut Sim) -> (SimPeer, String) {
    let acl = PrincipalAcl {
        rules: vec![rule("vm*", &["deploy.apply"])],
        events: vec!["halite/deployment/*".into()],
        admin: false,
        tenant: None,
    };
    let mut heat = sim.principal_with("heat", acl).await;
    let config = NewSoftwareConfig {
        name: "greet".into(),
        group: "script".into(),
        config: json!("#!/bin/sh\ntrue\n"),
        inputs: Vec::new(),
        outputs: Vec::new(),
        options: None,
    };
    let Ok(ResponseBody::Config(config)) = sim.request(&mut heat, RequestBody::ConfigCreate(config)).await else {
        panic!("a config");
    };
    (heat, config.id)
}

fn new_deployment(config_id: &str, signal: &str) -> RequestBody {
    let spec = serde_json::from_value(json!({"config_id": config_id, "server_id": "vm-1", "signal_id": signal}));
    RequestBody::DeploymentCreate(spec.expect("a deployment"))
}

#[test]
fn a_signal_url_the_allowlist_does_not_name_is_refused_when_the_deployment_is_made() {
    rt().block_on(async {
        // No allowlist: no relay at all.
        let mut sim = Sim::new().await;
        let (mut heat, config) = engine(&mut sim).await;
        let refused = sim.request(&mut heat, new_deployment(&config, "https://heat.example.com/signal")).await;
        let refused = refused.expect_err("no relay without signal_hosts");
        assert!(refused.contains("[deploy] signal_hosts"), "{refused}");

        // Listed: a name. The master's loopback admin API is still out of reach, in any spelling.
        let mut sim = Sim::with_config(|c| c.deploy.signal_hosts = vec!["heat.example.com:8004".into()]).await;
        let (mut heat, config) = engine(&mut sim).await;
        for url in [
            "http://127.0.0.1:8080/admin",
            "http://[::1]:8080/",
            "http://169.254.169.254/",
            "http://heat.example.com:22/",
        ] {
            let refused = sim.request(&mut heat, new_deployment(&config, url)).await.expect_err(url);
            assert!(refused.contains("not listed in [deploy] signal_hosts"), "{url}: {refused}");
        }
        assert!(sim
            .request(&mut heat, new_deployment(&config, "http://heat.example.com:8004/v1/signal"))
            .await
            .is_ok());

        // Loopback only when the operator lists it.
        let mut sim = Sim::with_config(|c| c.deploy.signal_hosts = vec!["127.0.0.1".into()]).await;
        let (mut heat, config) = engine(&mut sim).await;
        assert!(sim.request(&mut heat, new_deployment(&config, "http://127.0.0.1:8080/signal")).await.is_ok());
    });
}

#[test]
fn the_relayed_event_tells_an_engine_only_relayed_or_refused() {
    rt().block_on(async {
        let url = "http://127.0.0.1:8080/admin";
        let (mut sim, mut heat, deployment) = signalling_to(url).await;
        subscribe(&mut sim, &mut heat, "halite/deployment/*").await;
        let finished = |deployment: &SoftwareDeployment, result| RelayDone {
            request: relay_of(deployment, url),
            result,
            written_in_doubt: false,
        };
        let outcomes = [
            (Err(Failure::NoAnswer("connection failed: Connection refused (os error 111)".into())), "refused"),
            (Ok(401), "refused"),
            (Ok(302), "refused"),
            (Ok(200), "relayed"),
        ];
        for (result, outcome) in outcomes {
            // Each relay ends one the deployment has pending.
            relay_pending(&sim, &deployment.id).await;
            sim.step(Input::Relay(finished(&deployment, result))).await;
            let seen = events(&mut heat, &sim);
            let [event] = seen.as_slice() else { panic!("one relayed event: {seen:?}") };
            assert_eq!(event.tag, format!("halite/deployment/{}/relayed", deployment.id));
            let expected =
                json!({ "ok": outcome == "relayed", "outcome": outcome, "server_id": "vm-1", "owner": "heat" });
            assert_eq!(event.data, expected, "no status code or error text reaches the engine");
        }
    });
}

/// A relay whose deployment another master deletes while its end is being recorded (read
/// before the delete, written after) brings nothing back and tells nothing.
#[test]
fn a_relay_recorded_after_its_deployment_was_deleted_brings_it_not_back() {
    rt().block_on(async {
        let url = "http://127.0.0.1:8080/signal";
        let (mut sim, mut heat, deployment) = relay_ending(url).await;

        // The relay's end reads the deployment; then it is deleted (as another master would).
        let request = relay_of(&deployment, url);
        let read = sim.store().deployment(&deployment.id).await;
        assert!(sim.store().delete_deployment(&deployment.id).await.expect("deleted"));
        sim.master.core.with_deploy_desk(|desk| {
            desk.relayed_read(RelayDone { request, result: Ok(200), written_in_doubt: false }, read)
        });
        sim.master.answer_asks().await;
        sim.master.flush().await;
        assert_eq!(sim.store().deployment(&deployment.id).await.expect("read"), None);
        assert!(events(&mut heat, &sim).is_empty(), "nothing told of a deployment that is gone");
    });
}

/// A relay whose end the store cannot take (it is away) is recorded once it answers: told
/// once, and no longer pending, so no later start relays the signal again.
#[test]
fn a_relay_ended_while_the_store_is_away_is_recorded_once_it_answers() {
    rt().block_on(async {
        let url = "http://127.0.0.1:8080/signal";
        let (mut sim, mut heat, deployment) = relay_ending(url).await;
        let request = relay_of(&deployment, url);

        let away = sim.store().take_away().await.expect("open");
        sim.step(Input::Relay(RelayDone { request, result: Ok(200), written_in_doubt: false })).await;
        assert!(events(&mut heat, &sim).is_empty(), "nothing told while nothing is stored");
        sim.advance(std::time::Duration::from_secs(2)).await;
        sim.store().give_back(away).await;
        sim.advance(std::time::Duration::from_secs(2)).await;

        let tags: Vec<String> = events(&mut heat, &sim).into_iter().map(|e| e.tag).collect();
        assert_eq!(tags, [format!("halite/deployment/{}/relayed", deployment.id)], "told once, once stored");
        let stored = sim.store().deployment(&deployment.id).await.expect("read").expect("stored");
        assert!(!stored.relay_pending, "no longer pending: not relayed again at the next start");
    });
}

/// A relay's end whose write landed though the store reported it failed (a connection lost
/// on the commit's answer) is told once, when the retry reads it recorded.
#[test]
fn a_relay_end_whose_failed_write_landed_is_told_once() {
    rt().block_on(async {
        let url = "http://127.0.0.1:8080/signal";
        let (mut sim, mut heat, deployment) = relay_ending(url).await;
        let done = RelayDone { request: relay_of(&deployment, url), result: Ok(200), written_in_doubt: false };
        let mut record = sim.store().deployment(&deployment.id).await.expect("read").expect("stored");
        record.relay_pending = false;
        assert!(sim.store().record_relayed(&record, 1).await.expect("written"), "the write lands");
        let lost = Err(crate::store::StoreError::Unavailable("connection lost on commit".into()));
        sim.master.core.with_deploy_desk(|desk| desk.relay_recorded(record, done, lost));
        assert!(events(&mut heat, &sim).is_empty(), "nothing told while in doubt");
        for _ in 0..3 {
            sim.advance(std::time::Duration::from_secs(2)).await;
        }
        let tags: Vec<String> = events(&mut heat, &sim).into_iter().map(|e| e.tag).collect();
        assert_eq!(tags, [format!("halite/deployment/{}/relayed", deployment.id)], "told once");
    });
}

/// [`signalling_to`], with a relay of its signal pending and the engine listening.
async fn relay_ending(url: &str) -> (Sim, SimPeer, SoftwareDeployment) {
    let (mut sim, mut heat, deployment) = signalling_to(url).await;
    relay_pending(&sim, &deployment.id).await;
    subscribe(&mut sim, &mut heat, "halite/deployment/*").await;
    (sim, heat, deployment)
}

/// The relay of `deployment`'s signal to `url`.
fn relay_of(deployment: &SoftwareDeployment, url: &str) -> RelayRequest {
    RelayRequest {
        deployment_id: deployment.id.clone(),
        derived_config_id: deployment.derived_config_id.clone(),
        url: url.into(),
        verb: "PUT",
        body: Vec::new(),
    }
}

/// A master that may signal loopback, an engine, and its deployment to `vm-1` with `url` to
/// signal.
async fn signalling_to(url: &str) -> (Sim, SimPeer, SoftwareDeployment) {
    let mut sim = Sim::with_config(|c| c.deploy.signal_hosts = vec!["127.0.0.1".into()]).await;
    let (mut heat, config) = engine(&mut sim).await;
    let Ok(ResponseBody::Deployment(deployment)) = sim.request(&mut heat, new_deployment(&config, url)).await else {
        panic!("a deployment");
    };
    (sim, heat, deployment)
}

/// Deployment `id` has a signal to relay, as it has once its job ended.
async fn relay_pending(sim: &Sim, id: &str) {
    let mut record = sim.store().deployment(id).await.expect("read").expect("stored");
    record.relay_pending = true;
    sim.store().put_deployment(&record, 1).await.expect("stored");
}

/// `web0`, `web1` and `db1`, connected; minions may fire `alarm/*` events.
async fn alarmed_fleet() -> (Sim, Vec<SimPeer>, SimPeer) {
    let alarms = EventRule {
        minions: vec!["*".into()],
        allow: vec!["alarm/*".into()],
        rate_per_sec: 100.0,
        burst: 100.0,
        max_bytes: 1024,
    };
    let mut sim = Sim::with_config(|c| c.events = vec![alarms]).await;
    let mut web = vec![sim.minion("web0").await, sim.minion("web1").await];
    for minion in &mut web {
        minion.recv(&sim);
    }
    let mut db = sim.minion("db1").await;
    db.recv(&sim);
    (sim, web, db)
}

fn alarm() -> Message {
    Message::Event(Event { tag: "alarm/cpu".into(), data: json!({ "load": 99 }), id: None })
}

#[test]
fn abort_on_hears_only_events_the_publisher_may_receive() {
    rt().block_on(async {
        let (mut sim, mut web, mut db) = alarmed_fleet().await;
        // ops sees its web servers' events, not db1's, and no other job's.
        let acl = PrincipalAcl {
            rules: vec![rule("web*", &["test.ping"])],
            events: vec!["halite/job/*".into(), "minion/web*".into()],
            admin: false,
            tenant: None,
        };
        let mut ops = sim.principal_with("ops", acl).await;
        let abort_on = vec!["minion/*/alarm/*".into(), "halite/job/*/ret/*".into(), "halite/key/*".into()];
        let rollout = Rollout { batch: Some(Amount::Count(1)), abort_on, ..Rollout::default() };
        let jid = sim.publish_rollout(&mut ops, "web*", 0, rollout).await.expect("published");

        // db1's alarm, root's job on db1 returning and a key event: ops may receive none of
        // them, so none stops its rollout.
        db.send(&mut sim, &alarm()).await;
        let mut root = sim.root().await;
        let other = sim.publish(&mut root, "db1", "test.ping", 60_000, 0).await.expect("published");
        db.send(&mut sim, &Message::JobReturn(ret(&other))).await;
        let key = IdentityKey::from_seed(&[5; 32]);
        let preseed = RequestBody::KeyPreseed { id: "db2".into(), public_key: key.public().as_bytes().to_vec() };
        sim.request(&mut root, preseed).await.expect("preseeded");
        sim.request(&mut root, RequestBody::KeyDelete { pattern: "db2".into() }).await.expect("deleted");
        let got: Vec<usize> = (0..2).filter(|&i| !web[i].jobs(&sim).is_empty()).collect();
        let [started] = got[..] else { panic!("one target at a time: {got:?}") };
        web[started].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert_eq!(web[1 - started].jobs(&sim).len(), 1, "the rollout went on: nothing it may not see stopped it");
        let detail = sim.store().job(&jid).await.expect("store").expect("job");
        let status = detail.summary.rollout.expect("a rollout");
        assert_eq!(status.reason, None, "{status:?}");
    });
}

#[test]
fn abort_on_stops_a_rollout_for_an_event_its_publisher_sees_and_names_it() {
    rt().block_on(async {
        let (mut sim, mut web, _db) = alarmed_fleet().await;
        let acl = PrincipalAcl {
            rules: vec![rule("web*", &["test.ping"])],
            events: vec!["halite/job/*".into(), "minion/web*".into()],
            admin: false,
            tenant: None,
        };
        let mut ops = sim.principal_with("ops", acl).await;
        let rollout =
            Rollout { batch: Some(Amount::Count(1)), abort_on: vec!["minion/*/alarm/*".into()], ..Rollout::default() };
        let jid = sim.publish_rollout(&mut ops, "web*", 0, rollout).await.expect("published");
        let started = if web[0].jobs(&sim).is_empty() { 1 } else { 0 };
        web[started].send(&mut sim, &alarm()).await;
        web[started].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert!(web[1 - started].jobs(&sim).is_empty(), "stopped");
        let status = sim.store().job(&jid).await.expect("store").expect("job").summary.rollout.expect("a rollout");
        let expected = format!("an event matching abort_on minion/*/alarm/*: minion/web{started}/alarm/cpu");
        assert_eq!(status.reason.as_deref(), Some(expected.as_str()));
    });
}

fn token_create(minion: &str, replace: bool) -> RequestBody {
    RequestBody::TokenCreate { minion: minion.into(), ttl_ms: 600_000, replace }
}

async fn token(sim: &mut Sim, root: &mut SimPeer, minion: &str, replace: bool) -> String {
    match sim.request(root, token_create(minion, replace)).await {
        Ok(ResponseBody::Token(token)) => token.token,
        other => panic!("a token: {other:?}"),
    }
}

/// An id's keys and their states, in key order.
async fn key_states(sim: &Sim, id: &str) -> Vec<([u8; 32], KeyState)> {
    let mut keys: Vec<_> =
        sim.store().keys_for(id).await.expect("store").into_iter().map(|k| (k.public_key, k.state)).collect();
    keys.sort_by_key(|(key, _)| *key);
    keys
}

#[test]
fn a_token_for_an_id_whose_key_is_accepted_is_refused_unless_it_replaces() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let _web1 = sim.minion("web1").await;
        let mut root = sim.root().await;
        let refused = sim.request(&mut root, token_create("web1", false)).await.expect_err("refused");
        assert!(refused.contains("already has an accepted key") && refused.contains("--replace"), "{refused}");
        assert!(sim.store().tokens(None).await.expect("store").is_empty(), "no token was made");
        // A narrow principal cannot ask for one at all.
        let mut ops = sim.principal("ops", "web*", &["test.ping"]).await;
        let refused = sim.request(&mut ops, token_create("web1", true)).await.expect_err("admins only");
        assert!(refused.contains("only an administrator may replace"), "{refused}");
        token(&mut sim, &mut root, "web1", true).await;
    });
}

#[test]
fn a_token_made_before_the_key_was_accepted_cannot_take_the_identity_over() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut root = sim.root().await;
        subscribe(&mut sim, &mut root, "halite/key/*").await;
        let stale = token(&mut sim, &mut root, "web1", false).await;
        // The real minion's key is accepted meanwhile (preseeded), and it connects.
        let web1 = sim.minion("web1").await;
        let real = IdentityKey::from_seed(&seed_of("web1"));
        // Someone with the token and another key: denied, recorded as such, the token used up.
        let intruder = IdentityKey::from_seed(&[99; 32]);
        let refused = sim.connect_minion("web1", &intruder, Some(&stale)).await.err().expect("refused");
        assert!(refused.contains("denied"), "{refused}");
        let mut expected =
            vec![(*real.public().as_bytes(), KeyState::Accepted), (*intruder.public().as_bytes(), KeyState::Denied)];
        expected.sort_by_key(|(key, _)| *key);
        assert_eq!(key_states(&sim, "web1").await, expected, "the accepted key stays, the other is denied");
        assert!(sim.net.closed(web1.peer).is_none(), "the real minion's session goes on");
        let seen: Vec<String> = events(&mut root, &sim).into_iter().map(|e| e.tag).collect();
        assert!(seen.contains(&"halite/key/web1/denied".to_owned()), "{seen:?}");
        assert!(!seen.iter().any(|t| t.ends_with("/replaced")), "{seen:?}");
        // The real minion reconnects as before.
        web1.disconnect(&mut sim).await;
        assert!(sim.connect_minion("web1", &real, None).await.is_ok());
        assert!(sim.master.core.registry().is_accepted("web1", real.public().as_bytes()));
    });
}

#[test]
fn a_replacing_token_replaces_the_key_and_announces_it() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let old = sim.minion("web1").await;
        let mut root = sim.root().await;
        subscribe(&mut sim, &mut root, "halite/key/*").await;
        let swap = token(&mut sim, &mut root, "web1", true).await;
        let reinstalled = IdentityKey::from_seed(&[42; 32]);
        assert!(sim.connect_minion("web1", &reinstalled, Some(&swap)).await.is_ok());
        assert!(sim.master.core.registry().is_accepted("web1", reinstalled.public().as_bytes()));
        assert_eq!(sim.net.closed(old.peer).as_deref(), Some("key no longer accepted"));
        let seen: Vec<Event> = events(&mut root, &sim);
        let replaced = seen.iter().find(|e| e.tag == "halite/key/web1/replaced").expect("announced");
        assert_eq!(replaced.data["fingerprint"], Value::String(reinstalled.public().fingerprint()));
        let refused = sim.connect_minion("web1", &IdentityKey::from_seed(&seed_of("web1")), None).await;
        assert!(refused.err().is_some_and(|e| e.contains("denied")), "the old key is denied");
    });
}
