//! Changes another master made to the shared store, applied by this one: in simulated time,
//! with the other master's writes made directly in the store and its announcement fed in.

#![cfg(test)]

use std::time::Duration;

use halite_protocol::message::{KeyState, Message, MinionJobState, PrincipalAcl};

use super::Sim;
use crate::server::Input;
use crate::store::{ClusterChange, Heard, KeyRecord, PrincipalRecord, StateChange, Store};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

#[test]
fn a_key_rejected_on_another_master_cuts_the_minion_here_and_the_others_stay() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let web1 = sim.minion("web1").await;
        let web2 = sim.minion("web2").await;
        let key = sim.store().keys_for("web1").await.unwrap().remove(0);
        sim.store().put_key(&KeyRecord { state: KeyState::Rejected, ..key }, 1).await.unwrap();
        sim.step(Input::Cluster(Heard::new(
            "b".into(),
            ClusterChange::Keys { ids: Some(vec!["web1".into(), "web2".into()]) },
        )))
        .await;
        assert_eq!(sim.net.closed(web1.peer).as_deref(), Some("key no longer accepted"));
        assert_eq!(sim.net.closed(web2.peer), None, "web2's key did not change");
        assert!(!sim.master.core.registry().has_accepted("web1"));
    });
}

#[test]
fn a_key_replaced_by_an_enrollment_elsewhere_cuts_the_old_session_after_a_resync() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let web1 = sim.minion("web1").await;
        // Elsewhere, web1 enrolled with a token under a new key: the old one is denied.
        sim.store().create_token(&[7; 32], "web1", u64::MAX, true, "root").await.unwrap();
        let used = sim.store().enroll_with_token(&[7; 32], "web1", &[9; 32], 1).await.unwrap();
        assert_eq!(used, crate::store::TokenUse::Enrolled { replaced: true });
        // The announcement was lost with the listening connection: the resync still finds it.
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Resync))).await;
        assert_eq!(sim.net.closed(web1.peer).as_deref(), Some("key no longer accepted"));
        assert!(sim.master.core.registry().is_accepted("web1", &[9; 32]));
    });
}

#[test]
fn a_principal_removed_or_narrowed_on_another_master_loses_its_sessions_here() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let heat = sim.principal("heat", "vm-*", &["deploy.apply"]).await;
        let trove = sim.principal("trove", "db-*", &["test.ping"]).await;
        let murano = sim.principal("murano", "app-*", &["test.ping"]).await;
        sim.store().delete_principal("heat").await.unwrap();
        let mut narrowed = sim.store().principals().await.unwrap().into_iter().find(|p| p.name == "trove").unwrap();
        narrowed.acl = PrincipalAcl { admin: false, ..narrowed.acl };
        narrowed.acl.rules[0].functions = vec!["test.version".into()];
        sim.store().put_principal(&narrowed, 2).await.unwrap();
        for name in ["heat", "trove", "murano"] {
            sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Principal { name: name.into() }))).await;
        }
        assert_eq!(sim.net.closed(heat.peer).as_deref(), Some("principal changed"));
        assert_eq!(sim.net.closed(trove.peer).as_deref(), Some("principal changed"));
        assert_eq!(sim.net.closed(murano.peer), None, "murano's record did not change");
        assert!(sim.master.core.registry().principal("heat").is_none());
        let held: Option<&PrincipalRecord> = sim.master.core.registry().principal("trove");
        assert_eq!(held.map(|p| p.acl.rules[0].functions.clone()), Some(vec!["test.version".to_owned()]));
    });
}

/// A minion connected to master "b" only: its key and entry are in the shared store, and b has
/// announced it.
async fn served_by_b(sim: &mut Sim, id: &str) {
    known(sim, id).await;
    sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Here { ids: vec![id.into()] }))).await;
}

/// A minion whose key and entry another master stored (connected nowhere this master knows).
async fn known(sim: &mut Sim, id: &str) {
    let key = halite_protocol::identity::IdentityKey::from_seed(&super::seed_of(id));
    let record = KeyRecord { id: id.into(), public_key: *key.public().as_bytes(), state: KeyState::Accepted };
    sim.store().put_key(&record, 1).await.unwrap();
    let entry = crate::store::MinionRecord {
        id: id.into(),
        grains: [("role".to_owned(), serde_json::json!("db"))].into(),
        functions: vec!["test.ping".into()],
        last_seen_ms: 1,
    };
    sim.store().put_minions(&[entry]).await.unwrap();
    sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Keys { ids: Some(vec![id.into()]) }))).await;
}

/// This master's listener is lost for 20 s, then back (a reread follows at the next wake).
async fn deaf_for_20_seconds(sim: &mut Sim) {
    sim.step(Input::Cluster(Heard::new("a".into(), ClusterChange::ListenerLost))).await;
    sim.advance(Duration::from_secs(20)).await;
}

/// Its listener back: the reread, and its roll call, at the next wake.
async fn listening_again(sim: &mut Sim) {
    sim.step(Input::Cluster(Heard::new("a".into(), ClusterChange::Resync))).await;
    sim.advance(halite_master_core::machine::RETRY_EVERY).await;
}

/// After 20 s in which this master heard nothing, a minion another master served is not called
/// offline: neither while deaf, nor after, before its master answers the roll call. A minion it
/// cannot place waits for that answer, and is offline only once nobody claims it.
#[test]
fn a_minion_served_elsewhere_is_not_called_offline_after_a_gap_in_what_this_master_heard() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        served_by_b(&mut sim, "db9").await;
        known(&mut sim, "web5").await;
        let mut root = sim.root().await;
        deaf_for_20_seconds(&mut sim).await;
        let during = sim.publish(&mut root, "db9", "test.ping", 60_000, 0).await.unwrap();
        assert_eq!(sim.master.core.jobs().state(&during, "db9"), Some(MinionJobState::Sent), "b's silence was ours");
        listening_again(&mut sim).await;
        // Published at once after the reread, before b answers its roll call.
        let after = sim.publish(&mut root, "db9", "test.ping", 60_000, 0).await.unwrap();
        assert_eq!(sim.master.core.jobs().state(&after, "db9"), Some(MinionJobState::Sent));
        let unplaced = sim.publish(&mut root, "web5", "test.ping", 60_000, 0).await.unwrap();
        assert_eq!(sim.master.core.jobs().state(&unplaced, "web5"), Some(MinionJobState::Waiting), "not offline yet");
        // b answers: db9 is there, web5 nowhere.
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Here { ids: vec!["db9".into()] }))).await;
        sim.advance(Duration::from_secs(3)).await;
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Alive))).await;
        sim.advance(crate::core::cluster_view::GONE_AFTER).await;
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Alive))).await;
        assert_eq!(sim.master.core.jobs().state(&after, "db9"), Some(MinionJobState::Sent), "b still serves it");
        let detail = sim.store().job(&unplaced).await.unwrap().unwrap();
        assert_eq!(detail.minions[0].state, MinionJobState::Offline, "nobody claimed it: offline");
        let detail = sim.store().job(&during).await.unwrap().unwrap();
        assert_eq!(detail.minions[0].state, MinionJobState::Sent);
    });
}

/// A master that does not answer the roll call after a gap is gone a bounded time later: its
/// minions' slots are decided here then.
#[test]
fn a_master_that_never_answers_the_roll_call_after_a_gap_is_gone_within_seconds() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        served_by_b(&mut sim, "db9").await;
        let mut root = sim.root().await;
        deaf_for_20_seconds(&mut sim).await;
        listening_again(&mut sim).await;
        let jid = sim.publish(&mut root, "db9", "test.ping", 1_000, 0).await.unwrap();
        assert_eq!(sim.master.core.jobs().state(&jid, "db9"), Some(MinionJobState::Sent));
        sim.advance(crate::core::cluster_view::GONE_AFTER + Duration::from_secs(4)).await;
        let detail = sim.store().job(&jid).await.unwrap().unwrap();
        assert_eq!(detail.minions[0].state, MinionJobState::TimedOut, "b never answered: gone");
    });
}

#[test]
fn a_job_to_a_minion_on_another_master_waits_for_that_master_and_streams_its_return() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        served_by_b(&mut sim, "db9").await;
        // Targets resolve against the grains db9 announced on b.
        let mut root = sim.root().await;
        let target = halite_protocol::message::Target {
            kind: halite_protocol::message::TargetKind::Grain,
            expr: "role:db".into(),
        };
        let jid = sim.publish_to(&mut root, target, "test.ping", 1_000, 0).await.unwrap();
        let detail = sim.store().job(&jid).await.unwrap().unwrap();
        assert_eq!(detail.minions[0].state, MinionJobState::Sent, "not offline: b serves it");
        // Past the timeout, b still alive: b decides the slot, not this master.
        for _ in 0..20 {
            sim.advance(Duration::from_secs(1)).await;
            sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Alive))).await;
        }
        assert_eq!(sim.master.core.jobs().state(&jid, "db9"), Some(MinionJobState::Sent));
        // b stores the return, then announces it: the watcher here gets it, and the job's end.
        let ret = super::ret(&jid);
        let change = StateChange {
            jid: jid.clone(),
            minion: "db9".into(),
            state: MinionJobState::Returned,
            ret: Some(halite_protocol::message::JobReturn { minion: "db9".into(), ..ret }),
            at_ms: 5,
            late: false,
        };
        sim.store().set_states(&[change]).await.unwrap();
        let states = vec![("db9".to_owned(), MinionJobState::Returned)];
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Slots { jid: jid.clone(), states }))).await;
        let messages = root.recv(&sim);
        let update = messages.iter().find_map(|m| match m {
            Message::JobUpdates(u) => u.updates.iter().find(|u| u.minion == "db9").cloned(),
            Message::JobUpdate(u) if u.minion == "db9" => Some(u.clone()),
            _ => None,
        });
        let update = update.expect("an update for db9");
        assert_eq!(update.state, MinionJobState::Returned);
        assert!(update.ret.is_some(), "the return, read from the store");
        assert!(messages.iter().any(|m| matches!(m, Message::JobDone(d) if d.jid == jid)));
    });
}

#[test]
fn a_slot_whose_master_went_silent_times_out_here() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        served_by_b(&mut sim, "db9").await;
        let mut root = sim.root().await;
        let jid = sim.publish(&mut root, "db9", "test.ping", 1_000, 0).await.unwrap();
        // b is never heard from again (killed): once it counts as gone, the deadline applies.
        sim.advance(Duration::from_secs(12)).await;
        assert_eq!(sim.master.core.jobs().state(&jid, "db9"), None, "the job ended");
        let detail = sim.store().job(&jid).await.unwrap().unwrap();
        assert_eq!(detail.minions[0].state, MinionJobState::TimedOut);
    });
}

#[test]
fn a_job_published_elsewhere_is_sent_to_the_minions_connected_here() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        let mut web1 = sim.minion("web1").await;
        // Master b published a job to web1 (stored by b), then announced it.
        let job = job_of_b(&sim, "20261122000000000042");
        sim.store().insert_job(&job, &[("web1".into(), MinionJobState::Sent)]).await.unwrap();
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Job { jid: job.jid.clone() }))).await;
        let sent = web1.jobs(&sim);
        assert_eq!(sent.len(), 1, "the job reached the minion connected here");
        // Its return is stored and acknowledged here, and announced for b's watchers.
        let ret = halite_protocol::message::JobReturn { minion: "web1".into(), ..super::ret(&job.jid) };
        web1.send(&mut sim, &Message::JobReturn(ret)).await;
        assert!(web1.recv(&sim).iter().any(|m| matches!(m, Message::ReturnAck(a) if a.jid == job.jid)));
        let detail = sim.store().job(&job.jid).await.unwrap().unwrap();
        assert_eq!(detail.minions[0].state, MinionJobState::Returned);
    });
}

#[test]
fn a_job_whose_master_died_before_announcing_it_is_found_and_carried_out() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        let mut web1 = sim.minion("web1").await;
        // Master b stored a job for web1 and an offline minion, then died before announcing it.
        let job = job_of_b(&sim, "20261122000000000077");
        let states = [("web1".to_owned(), MinionJobState::Sent), ("gone".to_owned(), MinionJobState::Sent)];
        sim.store().insert_job(&job, &states).await.unwrap();
        assert!(web1.jobs(&sim).is_empty());
        sim.advance(Duration::from_secs(6)).await;
        assert_eq!(web1.jobs(&sim).len(), 1, "found in the store and sent to the minion here");
        // The minion nobody serves times out here; the job ends.
        sim.advance(Duration::from_secs(10)).await;
        let detail = sim.store().job(&job.jid).await.unwrap().unwrap();
        let gone = detail.minions.iter().find(|m| m.minion == "gone").unwrap();
        assert_eq!(gone.state, MinionJobState::TimedOut);
    });
}

#[test]
fn a_job_that_ended_elsewhere_before_it_was_announced_here_is_still_heard_whole() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        let mut root = sim.root().await;
        let subscribe = halite_protocol::message::Subscribe { patterns: vec!["halite/job/*".into()], after: None };
        root.send(&mut sim, &Message::Subscribe(subscribe)).await;
        // Master b stored a job and its return before its announcements reached this master.
        let job = job_of_b(&sim, "20261122000000000051");
        sim.store().insert_job(&job, &[("web9".into(), MinionJobState::Sent)]).await.unwrap();
        let ret = halite_protocol::message::JobReturn { minion: "web9".into(), ..super::ret(&job.jid) };
        let change = StateChange {
            jid: job.jid.clone(),
            minion: "web9".into(),
            state: MinionJobState::Returned,
            ret: Some(ret),
            at_ms: 1,
            late: false,
        };
        sim.store().set_states(&[change]).await.unwrap();
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Job { jid: job.jid.clone() }))).await;
        let slots = vec![("web9".to_owned(), MinionJobState::Returned)];
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Slots { jid: job.jid.clone(), states: slots })))
            .await;
        let tags: Vec<String> = root
            .recv(&sim)
            .into_iter()
            .filter_map(|m| match m {
                Message::Event(e) => Some(e.tag),
                _ => None,
            })
            .collect();
        let jid = &job.jid;
        assert_eq!(
            tags,
            [format!("halite/job/{jid}/new"), format!("halite/job/{jid}/ret/web9"), format!("halite/job/{jid}/done")],
            "each once, in order"
        );
    });
}

/// A subscriber to every job event, as root.
async fn job_watcher(sim: &mut Sim) -> super::SimPeer {
    let mut root = sim.root().await;
    let subscribe = halite_protocol::message::Subscribe { patterns: vec!["halite/job/*".into()], after: None };
    root.send(sim, &Message::Subscribe(subscribe)).await;
    root
}

/// Master b stores `minion`'s return of `jid` (and announces nothing yet).
async fn b_stores_return(sim: &Sim, jid: &str, minion: &str) {
    let ret = halite_protocol::message::JobReturn { minion: minion.into(), ..super::ret(jid) };
    let change = StateChange {
        jid: jid.into(),
        minion: minion.into(),
        state: MinionJobState::Returned,
        ret: Some(ret),
        at_ms: 1,
        late: false,
    };
    sim.store().set_states(&[change]).await.unwrap();
}

#[test]
fn a_job_adopted_after_some_of_its_returns_reports_every_final_state_once() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        let mut root = job_watcher(&mut sim).await;
        let job = job_of_b(&sim, "20261122000000000061");
        let jid = job.jid.clone();
        let states = [("web8".to_owned(), MinionJobState::Sent), ("web9".to_owned(), MinionJobState::Sent)];
        sim.store().insert_job(&job, &states).await.unwrap();
        // web9's return is stored (and announced) before this master adopts the job.
        b_stores_return(&sim, &jid, "web9").await;
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Job { jid: jid.clone() }))).await;
        let web9 = vec![("web9".to_owned(), MinionJobState::Returned)];
        sim.step(Input::Cluster(Heard::new(
            "b".into(),
            ClusterChange::Slots { jid: jid.clone(), states: web9.clone() },
        )))
        .await;
        assert_eq!(root.event_tags(&sim), [format!("halite/job/{jid}/new"), format!("halite/job/{jid}/ret/web9")]);
        b_stores_return(&sim, &jid, "web8").await;
        let web8 = vec![("web8".to_owned(), MinionJobState::Returned)];
        sim.step(Input::Cluster(Heard::new(
            "b".into(),
            ClusterChange::Slots { jid: jid.clone(), states: web8.clone() },
        )))
        .await;
        // Announcements that come again (or late) tell nothing twice, and bring nothing back.
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Slots { jid: jid.clone(), states: web9 }))).await;
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Job { jid: jid.clone() }))).await;
        assert_eq!(root.event_tags(&sim), [format!("halite/job/{jid}/ret/web8"), format!("halite/job/{jid}/done")]);
        assert!(sim.master.core.jobs().get(&jid).is_none());
    });
}

#[test]
fn announcements_a_master_could_not_apply_are_caught_up_once_the_store_answers() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        let mut root = job_watcher(&mut sim).await;
        let job = job_of_b(&sim, "20261122000000000062");
        let jid = job.jid.clone();
        let states = [("web8".to_owned(), MinionJobState::Sent), ("web9".to_owned(), MinionJobState::Sent)];
        sim.store().insert_job(&job, &states).await.unwrap();
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Job { jid: jid.clone() }))).await;
        assert_eq!(root.event_tags(&sim), [format!("halite/job/{jid}/new")]);
        // Both returns are stored by b; their announcement arrives while the store does not answer.
        b_stores_return(&sim, &jid, "web8").await;
        b_stores_return(&sim, &jid, "web9").await;
        let away = sim.store().take_away().await.expect("open");
        let both = vec![("web8".to_owned(), MinionJobState::Returned), ("web9".to_owned(), MinionJobState::Returned)];
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Slots { jid: jid.clone(), states: both }))).await;
        sim.advance(Duration::from_millis(500)).await;
        assert!(root.event_tags(&sim).is_empty(), "nothing known yet");
        assert_eq!(sim.master.core.jobs().state(&jid, "web8"), Some(MinionJobState::Sent));
        // The store answers again: within a tick, this master's view is the store's.
        sim.store().give_back(away).await;
        sim.advance(halite_master_core::machine::RETRY_EVERY).await;
        assert_eq!(
            root.event_tags(&sim),
            [
                format!("halite/job/{jid}/ret/web8"),
                format!("halite/job/{jid}/ret/web9"),
                format!("halite/job/{jid}/done")
            ]
        );
        assert!(sim.master.core.jobs().get(&jid).is_none(), "ended here too");
    });
}

#[test]
fn a_job_that_ended_in_the_store_without_a_word_ends_here_at_the_next_sweep() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        let mut root = job_watcher(&mut sim).await;
        let job = job_of_b(&sim, "20261122000000000063");
        let jid = job.jid.clone();
        sim.store().insert_job(&job, &[("web9".to_owned(), MinionJobState::Sent)]).await.unwrap();
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Job { jid: jid.clone() }))).await;
        // b stores the return; its announcement is lost on the way (no error here to notice).
        b_stores_return(&sim, &jid, "web9").await;
        sim.advance(crate::core::cluster_view::SWEEP_EVERY + halite_master_core::machine::RETRY_EVERY).await;
        assert_eq!(
            root.event_tags(&sim),
            [format!("halite/job/{jid}/new"), format!("halite/job/{jid}/ret/web9"), format!("halite/job/{jid}/done")]
        );
    });
}

#[test]
fn a_final_state_decided_while_the_store_was_away_is_told_once_as_the_store_kept_it() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        let mut web1 = sim.minion("web1").await;
        let mut root = sim.root().await;
        let mut watcher = job_watcher(&mut sim).await;
        let jid = sim.publish(&mut root, "web1", "test.ping", 10_000, 0).await.expect("published");
        watcher.event_tags(&sim);
        // The return arrives as the store stops answering: decided here, not written.
        let away = sim.store().take_away().await.expect("open");
        web1.send(
            &mut sim,
            &Message::JobReturn(halite_protocol::message::JobReturn { minion: "web1".into(), ..super::ret(&jid) }),
        )
        .await;
        assert!(sim.master.core.pending().write_failed());
        sim.advance(Duration::from_millis(500)).await;
        assert!(watcher.event_tags(&sim).is_empty(), "nothing is told before it is stored");
        // Meanwhile master b, which took this one for gone, recorded the slot timed out.
        sim.store().give_back(away).await;
        let timed_out = StateChange {
            jid: jid.clone(),
            minion: "web1".into(),
            state: MinionJobState::TimedOut,
            ret: None,
            at_ms: 2,
            late: false,
        };
        sim.store().set_states(&[timed_out]).await.unwrap();
        sim.step(Input::Tick).await;
        let told: Vec<String> = watcher
            .recv(&sim)
            .into_iter()
            .filter_map(|m| match m {
                Message::Event(e) => Some(format!("{} {}", e.tag, e.data["state"].as_str().unwrap_or_default())),
                _ => None,
            })
            .collect();
        assert_eq!(
            told,
            [format!("halite/job/{jid}/ret/web1 timed_out"), format!("halite/job/{jid}/done ")],
            "the slot's final state is told once, as the store kept it"
        );
        let detail = sim.store().job(&jid).await.unwrap().unwrap();
        assert_eq!(detail.minions[0].state, MinionJobState::TimedOut, "the store keeps the first");
    });
}

/// A job to `test.ping` as master "b" stores it (signed with the cluster's shared key).
/// A master sharing its store, `web1` connected to it, and job `jid` that master b stored
/// for `web1` (not announced).
async fn shared_with_a_job_of_b_for_web1(jid: &str) -> (Sim, super::SimPeer, crate::store::JobRecord) {
    let mut sim = Sim::new().await;
    sim.master.core.share_store_quietly();
    let web1 = sim.minion("web1").await;
    let job = job_of_b(&sim, jid);
    sim.store().insert_job(&job, &[("web1".into(), MinionJobState::Sent)]).await.unwrap();
    (sim, web1, job)
}

fn job_of_b(sim: &Sim, jid: &str) -> crate::store::JobRecord {
    let wall = crate::clock::Clock::wall_ms(&sim.clock);
    let mut job = crate::store::test_job(jid, wall);
    job.timeout_ms = 1_000;
    let body = halite_protocol::message::Job {
        jid: job.jid.clone(),
        function: "test.ping".into(),
        args: Vec::new(),
        kwargs: Default::default(),
        timeout_ms: 1_000,
        issued_at_ms: wall,
        ttl_ms: 0,
        caller: "root".into(),
        reach: None,
    };
    job.signed = halite_protocol::message::SignedJob::sign(&body, sim.master.core.identity().key());
    job
}

#[test]
fn a_job_that_began_and_ended_while_this_master_heard_nothing_is_told_once_its_listener_is_back() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        let mut root = job_watcher(&mut sim).await;
        let wall_micros = crate::clock::Clock::wall_ms(&sim.clock) * 1_000;
        // Long before any gap: not this master's subscribers' to hear of.
        let old = job_of_b(&sim, &halite_protocol::time::compact_utc(wall_micros - 3_600_000_000));
        sim.store().insert_job(&old, &[("web7".to_owned(), MinionJobState::Sent)]).await.unwrap();
        b_stores_return(&sim, &old.jid, "web7").await;
        // While this master's listener is cut, b publishes a job and both its minions return.
        let job = job_of_b(&sim, &halite_protocol::time::compact_utc(wall_micros - 1_000_000));
        let jid = job.jid.clone();
        let states = [("web8".to_owned(), MinionJobState::Sent), ("web9".to_owned(), MinionJobState::Sent)];
        sim.store().insert_job(&job, &states).await.unwrap();
        b_stores_return(&sim, &jid, "web8").await;
        b_stores_return(&sim, &jid, "web9").await;
        assert!(root.event_tags(&sim).is_empty(), "nothing heard");
        // The listener is back: its reconnection asks for a reread.
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Resync))).await;
        sim.advance(halite_master_core::machine::RETRY_EVERY).await;
        assert_eq!(
            root.event_tags(&sim),
            [
                format!("halite/job/{jid}/new"),
                format!("halite/job/{jid}/ret/web8"),
                format!("halite/job/{jid}/ret/web9"),
                format!("halite/job/{jid}/done")
            ]
        );
        // Another gap tells nothing twice.
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Resync))).await;
        sim.advance(halite_master_core::machine::RETRY_EVERY).await;
        assert!(root.event_tags(&sim).is_empty());
    });
}

#[test]
fn finals_written_together_are_told_before_their_jobs_end() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        let _web1 = sim.minion("web1").await;
        let _web2 = sim.minion("web2").await;
        let mut root = sim.root().await;
        let mut watcher = job_watcher(&mut sim).await;
        let jid = sim.publish(&mut root, "web*", "test.ping", 10_000, 0).await.expect("published");
        watcher.event_tags(&sim);
        root.recv(&sim);
        // Both returns arrive in one step (one batch from the network), so one commit writes
        // and tells them.
        for id in ["web1", "web2"] {
            let ret = halite_protocol::message::JobReturn { minion: id.into(), ..super::ret(&jid) };
            sim.master.core.slots().set(&jid, id, MinionJobState::Returned, Some(ret));
        }
        sim.master.flush().await;
        assert_eq!(
            watcher.event_tags(&sim),
            [
                format!("halite/job/{jid}/ret/web1"),
                format!("halite/job/{jid}/ret/web2"),
                format!("halite/job/{jid}/done")
            ]
        );
        let told = root.recv(&sim);
        let updates: usize = told
            .iter()
            .map(|m| match m {
                Message::JobUpdates(batch) => batch.updates.iter().filter(|u| u.state.is_final()).count(),
                Message::JobUpdate(u) if u.state.is_final() => 1,
                _ => 0,
            })
            .sum();
        assert_eq!(updates, 2, "the publisher hears both before the job's end: {told:?}");
        assert!(matches!(told.last(), Some(Message::JobDone(_))), "{told:?}");
    });
}

/// An announcement signed by a master the cluster key revoked while it waited to be applied
/// is dropped (and counted); one of a master still trusted, or the store's own notice, is
/// applied.
#[test]
fn an_announcement_of_a_master_revoked_while_it_waited_is_dropped() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        let revoked = halite_protocol::identity::IdentityKey::from_seed(&[41; 32]).public();
        let trusted = halite_protocol::identity::IdentityKey::from_seed(&[42; 32]).public();
        sim.master.core.config_mut().revoked_masters = vec![revocation_of(&revoked)];
        let mut root = sim.root().await;
        let subscribe = halite_protocol::message::Subscribe { patterns: vec!["engine/*".into()], after: None };
        root.send(&mut sim, &Message::Subscribe(subscribe)).await;
        let _ = root.recv(&sim);
        let event = |tag: &str| ClusterChange::Event { tag: tag.into(), data: serde_json::json!({}) };
        let signed = |signer, tag: &str| Heard { from: "b".into(), signer: Some(signer), change: event(tag) };
        sim.step(Input::Cluster(signed(revoked, "engine/heat/forged"))).await;
        sim.step(Input::Cluster(signed(trusted, "engine/heat/real"))).await;
        sim.step(Input::Cluster(Heard::new("b".into(), event("engine/heat/unsigned")))).await;
        assert_eq!(root.event_tags(&sim), ["engine/heat/real", "engine/heat/unsigned"]);
        let denied = sim.master.metrics().encode();
        assert!(denied.contains("kind=\"cluster_announcement\"} 1"), "{denied}");
    });
}

/// A job in the store signed by a master the cluster key revoked is not taken up (whatever
/// announces it, a reread included): not sent, not told; once no longer revoked, it is.
#[test]
fn a_job_signed_by_a_revoked_master_is_not_taken_up() {
    use halite_protocol::identity::IdentityKey;
    use halite_protocol::noise::MasterCertificate;
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        let mut web1 = sim.minion("web1").await;
        web1.recv(&sim);
        let retired = IdentityKey::from_seed(&[43; 32]);
        let certificate = MasterCertificate::issue(&IdentityKey::from_seed(&[44; 32]), &retired.public(), "m2");
        let mut job = job_of_b(&sim, "20261122000000000043");
        let body = job.signed.verify(&sim.master_public()).expect("a job");
        job.signed = halite_protocol::message::SignedJob::sign_certified(&body, &retired, &certificate, "m2");
        sim.store().insert_job(&job, &[("web1".into(), MinionJobState::Sent)]).await.unwrap();
        sim.master.core.config_mut().revoked_masters = vec![revocation_of(&retired.public())];
        let announce = || Input::Cluster(Heard::new("b".into(), ClusterChange::Job { jid: job.jid.clone() }));
        sim.step(announce()).await;
        assert!(web1.jobs(&sim).is_empty(), "not sent");
        assert!(sim.master.core.jobs().get(&job.jid).is_none(), "not taken up");
        sim.master.core.config_mut().revoked_masters.clear();
        sim.step(announce()).await;
        assert_eq!(web1.jobs(&sim).len(), 1, "taken up once its master is not revoked");
    });
}

/// A revocation of `master` by a cluster key of the test's.
fn revocation_of(master: &halite_protocol::identity::PublicIdentity) -> String {
    let cluster = halite_protocol::identity::IdentityKey::from_seed(&[45; 32]);
    halite_protocol::noise::Revocation::issue(&cluster, master).to_hex()
}

/// A job another master announced, read while the store does not answer: not lost. The read's
/// failure makes a reread of the store due, and the reread, once the store answers, takes the
/// job up and sends it to the minion connected here.
#[test]
fn a_job_announced_while_the_store_is_away_is_taken_up_by_the_reread() {
    rt().block_on(async {
        let (mut sim, mut web1, job) = shared_with_a_job_of_b_for_web1("20261122000000000063").await;
        let away = sim.store().take_away().await.expect("open");
        sim.step(Input::Cluster(Heard::new("b".into(), ClusterChange::Job { jid: job.jid.clone() }))).await;
        assert!(web1.jobs(&sim).is_empty());
        assert!(sim.master.core.jobs().get(&job.jid).is_none());
        assert!(sim.master.core.cluster().needs_resync(), "a reread is due");
        sim.store().give_back(away).await;
        sim.advance(Duration::from_millis(200)).await;
        assert!(!sim.master.core.cluster().needs_resync(), "the reread succeeded");
        assert_eq!(web1.jobs(&sim).len(), 1, "the job reached the minion connected here");
    });
}

/// Another master deleted more keys at once than are reread one by one: every key is reread,
/// and each minion the change names, online or not, is forgotten here.
#[test]
fn a_wide_key_change_forgets_every_minion_it_names_offline_ones_included() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.master.core.share_store_quietly();
        let ids: Vec<String> = (0..70).map(|i| format!("web{i}")).collect();
        for id in &ids {
            let minion = sim.minion(id).await;
            minion.disconnect(&mut sim).await;
        }
        for id in &ids {
            for key in sim.store().keys_for(id).await.unwrap() {
                sim.store().delete_key(id, &key.public_key).await.unwrap();
            }
        }
        assert!(sim.master.core.registry().minion("web69").is_some());
        let change = ClusterChange::Keys { ids: Some(ids.clone()) };
        sim.step(Input::Cluster(Heard::new("b".into(), change))).await;
        for id in &ids {
            assert!(!sim.master.core.registry().has_accepted(id), "{id}");
            assert!(sim.master.core.registry().minion(id).is_none(), "{id} forgotten");
        }
    });
}

/// The sweep that compares the jobs held here with the store's live ones cannot read them:
/// a reread is due, and once the store answers, the job nobody announced is found and sent.
#[test]
fn a_sweep_that_cannot_read_the_store_makes_a_reread_due_that_finds_the_job() {
    rt().block_on(async {
        let (mut sim, mut web1, _job) = shared_with_a_job_of_b_for_web1("20261122000000000091").await;
        let away = sim.store().take_away().await.expect("open");
        sim.advance(Duration::from_secs(6)).await;
        assert!(web1.jobs(&sim).is_empty());
        assert!(sim.master.core.cluster().needs_resync(), "a reread is due");
        sim.store().give_back(away).await;
        sim.advance(Duration::from_millis(200)).await;
        assert!(!sim.master.core.cluster().needs_resync());
        assert_eq!(web1.jobs(&sim).len(), 1, "found in the store and sent to the minion here");
    });
}
