//! The trust model in simulated time: what a narrow principal may see but not steer, a change
//! to a principal cutting its sessions where it was made, and hostile targets refused without
//! harm to the core.

#![cfg(test)]

use std::collections::BTreeMap;

use halite_protocol::identity::IdentityKey;
use halite_protocol::message::{
    Amount, Cancel, ErrorKind, Message, MinionJobState, PrincipalAcl, PrincipalRule, RequestBody, ResponseBody,
    Rollout, RolloutState, Target, TargetKind,
};

use super::{ret, seed_of, Sim, SimPeer};
use crate::store::Store;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// What the master answered `client`'s cancel of `jid` with: `None` when it took it.
async fn cancel(sim: &mut Sim, client: &mut SimPeer, jid: &str) -> Option<(ErrorKind, String)> {
    client.send(sim, &Message::Cancel(Cancel { jid: jid.into() })).await;
    client.recv(sim).into_iter().find_map(|m| match m {
        Message::Error(e) => Some((e.kind, e.message)),
        _ => None,
    })
}

async fn state(sim: &Sim, jid: &str, minion: &str) -> MinionJobState {
    let detail = sim.store().job(jid).await.expect("store").expect("stored");
    detail.minions.into_iter().find(|m| m.minion == minion).expect("targeted").state
}

#[test]
fn a_principal_that_only_sees_a_job_may_not_cancel_it() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web1 = sim.minion("web1").await;
        let mut root = sim.root().await;
        let mut watcher = sim.principal("watcher", "web*", &["test.ping"]).await;
        let mut outsider = sim.principal("outsider", "db*", &["cmd.run"]).await;
        let mut operator = sim.principal("operator", "web*", &["cmd.*"]).await;
        let jid = sim.publish(&mut root, "web1", "cmd.run", 60_000, 0).await.expect("published");
        web1.recv(&sim);

        // The watcher sees root's job (its rules cover web1) ...
        let shown = sim.request(&mut watcher, RequestBody::JobShow { jid: jid.clone() }).await;
        assert!(matches!(shown, Ok(ResponseBody::Job(_))), "{shown:?}");
        // ... but may not stop it; someone who cannot see it is told it does not exist.
        let (kind, why) = cancel(&mut sim, &mut watcher, &jid).await.expect("refused");
        assert_eq!(kind, ErrorKind::Forbidden, "{why}");
        assert!(why.contains("not allowed to cancel"), "{why}");
        let (kind, _) = cancel(&mut sim, &mut outsider, &jid).await.expect("refused");
        assert_eq!(kind, ErrorKind::NotFound);
        assert!(web1.recv(&sim).iter().all(|m| !matches!(m, Message::Cancel(_))), "web1 was told to cancel");
        assert_eq!(state(&sim, &jid, "web1").await, MinionJobState::Sent);

        // Rules allowing the job's function on every target do control it.
        assert_eq!(cancel(&mut sim, &mut operator, &jid).await, None);
        assert!(web1.recv(&sim).iter().any(|m| matches!(m, Message::Cancel(c) if c.jid == jid)));
    });
}

#[test]
fn a_principal_that_only_sees_a_rollout_may_not_pause_or_resume_it() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web1 = sim.minion("web1").await;
        let mut web2 = sim.minion("web2").await;
        let mut root = sim.root().await;
        let mut watcher = sim.principal("watcher", "web*", &["test.ping"]).await;
        let rollout = Rollout { batch: Some(Amount::Count(1)), ..Rollout::default() };
        let target = Target { kind: TargetKind::Glob, expr: "web*".into() };
        let spec = halite_protocol::message::JobSpec {
            timeout_ms: 60_000,
            rollout: Some(rollout),
            ..halite_protocol::message::JobSpec::new(target, "test.sleep")
        };
        let request = halite_protocol::message::PublishRequest::new(7, spec);
        let jid = sim.publish_request(&mut root, request).await.expect("published");
        sim.request(&mut root, RequestBody::JobPause { jid: jid.clone() }).await.expect("root pauses");
        for body in [RequestBody::JobResume { jid: jid.clone() }, RequestBody::JobPause { jid: jid.clone() }] {
            let refused = sim.request(&mut watcher, body).await.expect_err("refused");
            assert!(refused.contains("not allowed to"), "{refused}");
        }
        let first: Vec<_> = [web1.jobs(&sim).len(), web2.jobs(&sim).len()].into();
        web1.send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        web2.send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert_eq!(first.iter().sum::<usize>(), 1, "one target started before the pause");
        assert!(web1.jobs(&sim).is_empty() && web2.jobs(&sim).is_empty(), "the paused rollout moved on");
        match sim.request(&mut root, RequestBody::JobShow { jid: jid.clone() }).await {
            Ok(ResponseBody::Job(detail)) => {
                assert_eq!(detail.summary.rollout.expect("rollout").state, RolloutState::Paused)
            }
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn readding_a_principal_with_a_new_key_or_acl_cuts_its_sessions_on_this_master() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let _web1 = sim.minion("web1").await;
        let mut root = sim.root().await;
        let mut ops = sim.principal("ops", "*", &["test.*"]).await;
        assert!(sim.publish(&mut ops, "web1", "test.echo", 5_000, 0).await.is_ok());
        let narrower = PrincipalAcl {
            rules: vec![PrincipalRule {
                targets: "db*".into(),
                functions: vec!["test.ping".into()],
                args: BTreeMap::new(),
            }],
            events: vec![],
            admin: false,
            tenant: None,
        };
        let new_key = IdentityKey::from_seed(&seed_of("ops-new"));
        let added = sim
            .request(
                &mut root,
                RequestBody::PrincipalAdd {
                    name: "ops".into(),
                    public_key: new_key.public().as_bytes().to_vec(),
                    acl: narrower,
                },
            )
            .await;
        assert!(added.is_ok(), "{added:?}");
        assert!(
            !sim.master.core.sessions().contains(&ops.peer),
            "the old session of a re-added principal is still open on the master that changed it"
        );
        let answer = sim.publish(&mut ops, "web1", "test.echo", 5_000, 0).await;
        assert!(answer.is_err(), "the old session still publishes: {answer:?}");
    });
}

#[test]
fn a_deeply_nested_target_from_any_principal_is_refused_and_the_master_goes_on() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web1 = sim.minion("web1").await;
        let mut narrow = sim.principal("narrow", "web*", &["test.ping"]).await;
        for expr in ["(".repeat(3000) + "web1", "not ( ".repeat(600) + "web1"] {
            let target = Target { kind: TargetKind::Compound, expr };
            let refused = sim.publish_to(&mut narrow, target, "test.ping", 5_000, 0).await.expect_err("refused");
            assert!(refused.contains("nests parentheses"), "{refused}");
        }
        let target = Target { kind: TargetKind::Compound, expr: "( web1 )".into() };
        let jid = sim.publish_to(&mut narrow, target, "test.ping", 5_000, 0).await.expect("published");
        assert_eq!(web1.jobs(&sim).len(), 1, "{jid}");
    });
}

/// A tenant's principal with rules as wide as `*` × `test.*` + `deploy.apply`, subscribed to
/// everything its events ACL allows.
async fn tenant(sim: &mut Sim, name: &str) -> SimPeer {
    let acl = PrincipalAcl {
        rules: vec![PrincipalRule {
            targets: "*".into(),
            functions: vec!["test.*".into(), "deploy.apply".into()],
            args: BTreeMap::new(),
        }],
        events: vec!["*".into()],
        admin: false,
        tenant: Some(name.into()),
    };
    let mut client = sim.principal_with(name, acl).await;
    let subscribe = halite_protocol::message::Subscribe { patterns: vec!["*".into()], after: None };
    client.send(sim, &Message::Subscribe(subscribe)).await;
    client.recv(sim);
    client
}

fn event_tags(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Event(e) => Some(e.tag.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_tenant_reaches_only_its_own_minions_jobs_and_events() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut a1 = sim.minion("proja-web1").await;
        let mut b1 = sim.minion("projb-db1").await;
        let _lookalike = sim.minion("projab-x").await;
        let mut root = sim.root().await;
        let mut proja = tenant(&mut sim, "proja").await;
        let mut projb = tenant(&mut sim, "projb").await;

        // Targets resolve within the tenant: another tenant's minion is never matched.
        let refused = sim.publish(&mut proja, "projb-db1", "test.ping", 5_000, 0).await.expect_err("refused");
        assert!(refused.contains("no minions matched"), "{refused}");
        assert!(b1.jobs(&sim).is_empty());
        let jid = sim.publish(&mut proja, "*", "test.ping", 5_000, 0).await.expect("published");
        assert_eq!(a1.jobs(&sim).len(), 1);
        assert!(b1.jobs(&sim).is_empty(), "a tenant's '*' reached another tenant's minion");
        let detail = match sim.request(&mut proja, RequestBody::JobShow { jid: jid.clone() }).await {
            Ok(ResponseBody::Job(detail)) => detail,
            other => panic!("{other:?}"),
        };
        let targeted: Vec<&str> = detail.minions.iter().map(|m| m.minion.as_str()).collect();
        assert_eq!(targeted, ["proja-web1"], "projab-x is not in tenant proja");

        // Minion lists, other tenants' and root's jobs stay out of sight.
        match sim.request(&mut projb, RequestBody::MinionList { pattern: "*".into(), after: None, limit: None }).await {
            Ok(ResponseBody::Minions(list)) => {
                assert_eq!(list.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["projb-db1"])
            }
            other => panic!("{other:?}"),
        }
        assert!(sim.request(&mut projb, RequestBody::JobShow { jid: jid.clone() }).await.is_err());
        let roots = sim.publish(&mut root, "*", "test.ping", 5_000, 0).await.expect("root publishes");
        assert!(sim.request(&mut proja, RequestBody::JobShow { jid: roots.clone() }).await.is_err());
        let (kind, _) = cancel(&mut sim, &mut proja, &roots).await.expect("refused");
        assert_eq!(kind, ErrorKind::NotFound);

        // Events: a tenant hears its own minions' and jobs', never another tenant's.
        proja.recv(&sim);
        projb.recv(&sim);
        a1.send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        let heard_a = event_tags(&proja.recv(&sim));
        let heard_b = event_tags(&projb.recv(&sim));
        assert!(heard_a.iter().any(|t| t == &format!("halite/job/{jid}/ret/proja-web1")), "{heard_a:?}");
        assert!(heard_b.is_empty(), "tenant projb heard {heard_b:?}");
        let kicked = crate::server::Input::Tick;
        sim.step(kicked).await;
        b1.disconnect(&mut sim).await;
        let heard_a = event_tags(&proja.recv(&sim));
        assert!(heard_a.iter().all(|t| !t.contains("projb")), "tenant proja heard {heard_a:?}");
    });
}

#[test]
fn a_tenant_principal_cannot_be_an_administrator() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut root = sim.root().await;
        let acl = PrincipalAcl { admin: true, tenant: Some("proja".into()), ..PrincipalAcl::default() };
        let key = IdentityKey::from_seed(&seed_of("proja"));
        let body =
            RequestBody::PrincipalAdd { name: "proja".into(), public_key: key.public().as_bytes().to_vec(), acl };
        let refused = sim.request(&mut root, body).await.expect_err("refused");
        assert!(refused.contains("cannot be an administrator"), "{refused}");
        let acl = PrincipalAcl { tenant: Some("bad tenant!".into()), ..PrincipalAcl::default() };
        let body =
            RequestBody::PrincipalAdd { name: "proja".into(), public_key: key.public().as_bytes().to_vec(), acl };
        assert!(sim.request(&mut root, body).await.expect_err("refused").contains("tenant"));
    });
}
