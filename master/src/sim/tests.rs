//! The core's behaviour, in simulated time. Each test names the rule it holds the core to.

#![cfg(test)]

use std::time::Duration;

use halite_protocol::message::{
    Cancel, ErrorKind, ErrorMessage, JobAck, JobReturn, Message, MinionJobState, RequestBody, ResponseBody, Subscribe,
    Target, TargetKind,
};

use super::{ret, Sim, SimPeer};
use crate::server::Input;
use crate::store::{Heard, Store};

const SECOND: Duration = Duration::from_secs(1);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

async fn state_of(sim: &Sim, jid: &str, minion: &str) -> (MinionJobState, Option<JobReturn>, bool) {
    let detail = sim.store().job(jid).await.expect("store").expect("job stored");
    let m = detail.minions.into_iter().find(|m| m.minion == minion).expect("minion in job");
    (m.state, m.ret, m.late)
}

/// A master with `web1` connected and root's `test.ping` to it published with `timeout_ms`:
/// the master, web1, root and the jid.
async fn web1_pinged(timeout_ms: u64) -> (Sim, SimPeer, SimPeer, String) {
    let mut sim = Sim::new().await;
    let web1 = sim.minion("web1").await;
    let mut root = sim.root().await;
    let jid = sim.publish(&mut root, "web1", "test.ping", timeout_ms, 0).await.expect("published");
    (sim, web1, root, jid)
}

fn acked(messages: &[Message], jid: &str) -> bool {
    messages.iter().any(|m| matches!(m, Message::ReturnAck(a) if a.jid == jid))
}

fn asked_again(messages: &[Message]) -> bool {
    messages.iter().any(|m| matches!(m, Message::ResendReturns(_)))
}

async fn show(sim: &mut Sim, client: &mut SimPeer, jid: &str) -> Result<ResponseBody, String> {
    sim.request(client, RequestBody::JobShow { jid: jid.into() }).await
}

#[test]
fn a_job_runs_returns_and_is_acknowledged_only_once_stored() {
    rt().block_on(async {
        let (mut sim, mut web1, mut root, jid) = web1_pinged(10_000).await;
        assert_eq!(web1.jobs(&sim).len(), 1);
        web1.send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert!(acked(&web1.recv(&sim), &jid));
        assert_eq!(state_of(&sim, &jid, "web1").await.0, MinionJobState::Returned);
        let seen = root.recv(&sim);
        assert!(seen.iter().any(|m| matches!(m, Message::JobDone(d) if d.jid == jid)), "{seen:?}");
    });
}

#[test]
fn a_return_whose_write_fails_is_not_acknowledged_and_is_written_once_the_store_is_back() {
    rt().block_on(async {
        let (mut sim, mut web1, _root, jid) = web1_pinged(10_000).await;
        web1.recv(&sim);
        let conn = sim.store().take_away().await.expect("open");
        web1.send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert!(!acked(&web1.recv(&sim), &jid), "acknowledged a return that was not stored");
        assert_eq!(sim.master.core.pending().states_waiting(), 1, "the change is kept to be written again");
        sim.store().give_back(conn).await;
        sim.step(Input::Tick).await;
        assert!(acked(&web1.recv(&sim), &jid));
        let (state, stored, _) = state_of(&sim, &jid, "web1").await;
        assert_eq!(state, MinionJobState::Returned);
        assert!(stored.is_some(), "the return is stored");
        assert_eq!(sim.master.core.pending().states_waiting(), 0);
    });
}

/// Returns waiting for a store that does not answer are bounded: past the bound they stay on the
/// minion (unacknowledged), which is asked for them again once the store answers.
#[test]
fn returns_past_the_bound_stay_on_the_minion_and_are_asked_for_again_once_the_store_answers() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web1 = sim.minion("web1").await;
        let mut web2 = sim.minion("web2").await;
        let mut root = sim.root().await;
        let jid = sim.publish(&mut root, "web*", "test.ping", 10_000, 0).await.expect("published");
        let conn = sim.store().take_away().await.expect("open");
        web1.send(&mut sim, &Message::JobReturn(JobReturn { minion: "web1".into(), ..ret(&jid) })).await;
        assert_eq!(sim.master.core.pending().states_waiting(), 1, "held for the store");
        // The bound is reached: web2's return stays on web2.
        sim.master.core.cap_held_returns();
        web2.send(&mut sim, &Message::JobReturn(JobReturn { minion: "web2".into(), ..ret(&jid) })).await;
        assert_eq!(sim.master.core.pending().states_waiting(), 1, "not held: past the bound");
        assert!(!acked(&web2.recv(&sim), &jid));
        assert_eq!(sim.net.closed(web2.peer), None, "the session stays while the store is away");
        sim.store().give_back(conn).await;
        sim.step(Input::Tick).await;
        assert!(acked(&web1.recv(&sim), &jid), "the held return is stored and acknowledged");
        assert!(asked_again(&web2.recv(&sim)), "web2 is asked for its returns again");
        assert_eq!(sim.net.closed(web2.peer), None, "in its session, which stays");
        assert_eq!(sim.net.closed(web1.peer), None);
        web2.send(&mut sim, &Message::JobReturn(JobReturn { minion: "web2".into(), ..ret(&jid) })).await;
        assert!(acked(&web2.recv(&sim), &jid), "sent again, stored and acknowledged");
    });
}

/// A deadline that passed while nothing could be stored waits, once the store answers, for
/// the returns the minions kept meanwhile: a return made in time is never `timed_out` for the
/// store's absence.
#[test]
fn a_return_made_in_time_during_a_store_outage_wins_over_the_deadline_that_passed_meanwhile() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web1 = sim.minion("web1").await;
        let mut web2 = sim.minion("web2").await;
        let mut root = sim.root().await;
        let jid = sim.publish(&mut root, "web*", "test.ping", 1_000, 0).await.expect("published");
        let conn = sim.store().take_away().await.expect("open");
        // web2's return is held; the bound is reached, so web1's stays on web1.
        web2.send(&mut sim, &Message::JobReturn(JobReturn { minion: "web2".into(), ..ret(&jid) })).await;
        sim.master.core.cap_held_returns();
        web1.send(&mut sim, &Message::JobReturn(JobReturn { minion: "web1".into(), ..ret(&jid) })).await;
        // The deadline passes while the store is away.
        sim.advance(Duration::from_secs(20)).await;
        sim.store().give_back(conn).await;
        sim.advance(halite_master_core::machine::RETRY_EVERY).await;
        assert!(asked_again(&web1.recv(&sim)), "web1 is asked for its returns again");
        assert_eq!(sim.net.closed(web1.peer), None);
        sim.advance(Duration::from_secs(1)).await;
        assert_eq!(sim.master.core.jobs().state(&jid, "web1"), Some(MinionJobState::Sent), "not timed out meanwhile");
        // web1 sends what it kept.
        web1.send(&mut sim, &Message::JobReturn(JobReturn { minion: "web1".into(), ..ret(&jid) })).await;
        assert!(acked(&web1.recv(&sim), &jid));
        let (state, stored, _) = state_of(&sim, &jid, "web1").await;
        assert_eq!((state, stored.is_some()), (MinionJobState::Returned, true));
    });
}

/// A return after its slot ended is kept and told once, as `late`: the slot's final state was
/// told already and stays; a minion resending it does not tell it again.
#[test]
fn a_late_return_is_told_once_as_late_and_never_as_another_final_state() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web1 = sim.minion("web1").await;
        let web2 = sim.minion("web2").await;
        web2.disconnect(&mut sim).await;
        let mut root = sim.root().await;
        let mut watcher = sim.root().await;
        let subscribe = halite_protocol::message::Subscribe { patterns: vec!["halite/job/*".into()], after: None };
        watcher.send(&mut sim, &Message::Subscribe(subscribe)).await;
        // web2 is away: the job waits for it (its TTL), so it stays live after web1's slot ends.
        let jid = sim.publish(&mut root, "web*", "test.ping", 1_000, 600_000).await.expect("published");
        sim.advance(Duration::from_secs(20)).await;
        let tags = watcher.event_tags(&sim);
        assert!(tags.contains(&format!("halite/job/{jid}/ret/web1")), "{tags:?}");
        assert_eq!(sim.master.core.jobs().state(&jid, "web1"), Some(MinionJobState::TimedOut));
        for _ in 0..3 {
            web1.send(&mut sim, &Message::JobReturn(JobReturn { minion: "web1".into(), ..ret(&jid) })).await;
        }
        let tags = watcher.event_tags(&sim);
        assert_eq!(tags.iter().filter(|t| t.ends_with("/late/web1")).count(), 1, "{tags:?}");
        assert!(!tags.iter().any(|t| t.ends_with("/ret/web1")), "no second final state: {tags:?}");
    });
}

/// A function none of the targets has is refused before anything is sent, naming them and
/// the nearest name they have; a minion that did not say what it has may have it.
#[test]
fn a_function_the_targets_do_not_have_is_refused_before_sending_naming_them() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut minions = Vec::new();
        for id in ["web1", "web2", "web3"] {
            let mut minion = sim.minion(id).await;
            let installed = if id == "web3" { Vec::new() } else { vec!["test.ping".into(), "test.sleep".into()] };
            let hello = Message::Hello(halite_protocol::message::Hello { installed, ..super::hello(id) });
            minion.send(&mut sim, &hello).await;
            minion.recv(&sim);
            minions.push(minion);
        }
        let mut root = sim.root().await;
        let refused = sim.publish(&mut root, "web[12]", "test.pong", 1_000, 0).await.unwrap_err();
        assert_eq!(
            refused,
            "test.pong is not a function of 2 targeted minion(s): web1, web2; nothing was sent; did you mean test.ping?"
        );
        let salt = sim.publish(&mut root, "web[12]", "state.apply", 1_000, 0).await.unwrap_err();
        assert!(salt.contains("halite's way to do that is plan.apply"), "{salt}");
        for minion in &mut minions {
            assert!(minion.jobs(&sim).is_empty(), "nothing sent");
        }
        // web3 did not say: a job that may reach it goes, and it answers for itself.
        assert!(sim.publish(&mut root, "web3", "test.pong", 1_000, 0).await.is_ok());
        assert!(sim.publish(&mut root, "web*", "test.pong", 1_000, 0).await.is_ok());
        assert!(sim.publish(&mut root, "web*", "test.ping", 1_000, 0).await.is_ok());
    });
}

#[test]
fn a_client_gets_each_steps_messages_in_one_write_and_a_minion_its_job_at_once() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web1 = sim.minion("web1").await;
        let mut root = sim.root().await;
        let (client, minion) = (root.peer, web1.peer);
        sim.net.take_writes(client);
        sim.net.take_writes(minion);
        let jid = sim.publish(&mut root, "web1", "test.ping", 10_000, 0).await.expect("published");
        assert_eq!(sim.net.take_writes(client), 1, "the answer and the first updates, together");
        assert_eq!(web1.jobs(&sim).len(), 1);
        assert_eq!(sim.net.take_writes(minion), 1);
        web1.send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        let end = root.recv(&sim);
        assert!(end.iter().any(|m| matches!(m, Message::JobUpdate(u) if u.jid == jid)), "{end:?}");
        assert!(end.iter().any(|m| matches!(m, Message::JobDone(d) if d.jid == jid)), "{end:?}");
        assert_eq!(sim.net.take_writes(client), 1, "the return's update and the job's end, together");
    });
}

#[test]
fn a_return_after_the_timeout_is_stored_as_late_and_acknowledged() {
    rt().block_on(async {
        let (mut sim, mut web1, _root, jid) = web1_pinged(2_000).await;
        sim.advance(4 * SECOND).await;
        assert_eq!(state_of(&sim, &jid, "web1").await.0, MinionJobState::TimedOut);
        web1.recv(&sim);
        web1.send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert!(acked(&web1.recv(&sim), &jid));
        let (state, stored, late) = state_of(&sim, &jid, "web1").await;
        assert_eq!(state, MinionJobState::TimedOut, "a final state never changes");
        assert!(late);
        assert_eq!(stored.expect("the late return is kept").outputs["ok"], true);
        // The same return again (the minion did not get the ack): acknowledged, first one kept.
        web1.send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert!(acked(&web1.recv(&sim), &jid));
    });
}

#[test]
fn returns_already_received_are_handled_before_deadlines_fire() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut minions = Vec::new();
        for i in 0..8 {
            minions.push(sim.minion(&format!("web{i}")).await);
        }
        let mut root = sim.root().await;
        let jid = sim.publish(&mut root, "web*", "test.ping", 2_000, 0).await.expect("published");
        // The returns arrive while the core is not looking, then the deadline passes.
        for minion in &mut minions {
            minion.queue(&sim, &Message::JobReturn(ret(&jid)));
        }
        sim.clock.advance(10 * SECOND);
        sim.step(Input::Tick).await;
        for i in 0..8 {
            assert_eq!(state_of(&sim, &jid, &format!("web{i}")).await.0, MinionJobState::Returned);
        }
    });
}

#[test]
fn a_paused_master_does_not_charge_its_pause_to_the_minions() {
    rt().block_on(async {
        let (mut sim, mut web1, _root, jid) = web1_pinged(5_000).await;
        sim.advance(SECOND).await;
        // SIGSTOP for 30 s: no tick runs; the return is still in the socket when it wakes.
        sim.clock.advance(30 * SECOND);
        sim.step(Input::Tick).await;
        assert_eq!(sim.master.core.jobs().state(&jid, "web1"), Some(MinionJobState::Sent));
        web1.send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert_eq!(state_of(&sim, &jid, "web1").await.0, MinionJobState::Returned);
    });
}

#[test]
fn a_job_that_never_returns_times_out_and_an_offline_one_expires() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let _web1 = sim.minion("web1").await;
        let _db1 = sim.minion("db1").await;
        let offline = sim.connect_minion_then_leave("db2").await;
        let mut root = sim.root().await;
        let jid = sim.publish(&mut root, "*", "test.ping", 2_000, 5_000).await.expect("published");
        assert_eq!(sim.master.core.jobs().state(&jid, &offline), Some(MinionJobState::Waiting));
        sim.advance(4 * SECOND).await;
        assert_eq!(state_of(&sim, &jid, "web1").await.0, MinionJobState::TimedOut);
        sim.advance(2 * SECOND).await;
        assert_eq!(state_of(&sim, &jid, "db2").await.0, MinionJobState::Expired);
    });
}

#[test]
fn a_waiting_job_is_delivered_when_its_minion_connects() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let offline = sim.connect_minion_then_leave("web1").await;
        let mut root = sim.root().await;
        let jid = sim.publish(&mut root, "web1", "test.ping", 2_000, 60_000).await.expect("published");
        sim.advance(10 * SECOND).await;
        let mut web1 = sim.minion(&offline).await;
        assert_eq!(web1.jobs(&sim).len(), 1);
        assert_eq!(state_of(&sim, &jid, "web1").await.0, MinionJobState::Sent);
        // Redelivered after a reconnect while running, not run twice by the master's count.
        web1.send(&mut sim, &Message::JobAck(JobAck { jid: jid.clone(), accepted: true, reason: String::new() })).await;
        web1.disconnect(&mut sim).await;
        let mut again = sim.minion("web1").await;
        assert_eq!(again.jobs(&sim).len(), 1);
        assert_eq!(sim.master.core.jobs().state(&jid, "web1"), Some(MinionJobState::Running));
    });
}

#[test]
fn a_minion_refusal_ends_its_slot_at_once_with_the_reason() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web1 = sim.minion("web1").await;
        let mut web2 = sim.minion("web2").await;
        let mut root = sim.root().await;
        let jid = sim.publish(&mut root, "web*", "test.ping", 60_000, 0).await.expect("published");
        let refusal = JobAck { jid: jid.clone(), accepted: false, reason: "not allowed for this caller".into() };
        web1.send(&mut sim, &Message::JobAck(refusal)).await;
        let error = ErrorMessage {
            kind: ErrorKind::Internal,
            message: "cannot record the job: No space left on device".into(),
            request: Some(jid.clone()),
        };
        web2.send(&mut sim, &Message::Error(error)).await;
        assert!(!web2.recv(&sim).iter().any(|m| matches!(m, Message::Error(_))), "a refusal is not answered");
        let (state, stored, _) = state_of(&sim, &jid, "web1").await;
        assert_eq!(state, MinionJobState::Denied);
        assert_eq!(stored.expect("reason kept").outputs["error"], "not allowed for this caller");
        let (state, stored, _) = state_of(&sim, &jid, "web2").await;
        assert_eq!(state, MinionJobState::Failed);
        assert!(stored.expect("reason").outputs["error"].as_str().unwrap_or_default().contains("No space"));
        assert!(sim.master.core.jobs().get(&jid).is_none(), "the job is done");
    });
}

#[test]
fn a_job_that_cannot_be_stored_is_refused_to_its_publisher() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let _web1 = sim.minion("web1").await;
        let mut root = sim.root().await;
        // A row already holds the jid the generator will hand out next (a clash).
        let first = sim.publish(&mut root, "web1", "test.ping", 1_000, 0).await.expect("published");
        let mut record = sim.store().unfinished_jobs().await.expect("store")[0].0.clone();
        record.jid =
            halite_protocol::time::compact_utc(halite_protocol::time::parse_compact_utc(&first).expect("jid") + 1);
        sim.store().insert_job(&record, &[("web1".into(), MinionJobState::Sent)]).await.expect("insert");
        let answer = sim.publish(&mut root, "web1", "test.ping", 1_000, 0).await;
        let message = answer.expect_err("the publisher is told");
        assert!(message.contains("could not be stored"), "{message}");
    });
}

#[test]
fn retention_never_deletes_an_unfinished_job() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let _web1 = sim.minion("web1").await;
        let offline = sim.connect_minion_then_leave("db1").await;
        let mut root = sim.root().await;
        let done = sim.publish(&mut root, "web1", "test.ping", 1_000, 0).await.expect("published");
        sim.advance(3 * SECOND).await;
        let waiting = sim.publish(&mut root, &offline, "test.ping", 1_000, 30 * 86_400_000).await.expect("published");
        sim.clock.step_wall(Duration::from_secs(8 * 86_400), true);
        sim.master.purge().await;
        assert!(sim.store().job(&done).await.expect("store").is_none(), "finished and old: purged");
        assert!(sim.store().job(&waiting).await.expect("store").is_some(), "still waiting: kept");
    });
}

#[test]
fn jids_keep_increasing_across_a_restart_with_the_clock_set_back_and_ttls_do_not_grow() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let offline = sim.connect_minion_then_leave("web1").await;
        let mut root = sim.root().await;
        let first = sim.publish(&mut root, &offline, "test.ping", 1_000, 60_000).await.expect("published");
        sim.advance(30 * SECOND).await;
        let (store, clock) = (sim.store().clone(), sim.clock.clone());
        drop(sim);
        clock.step_wall(Duration::from_secs(86_400), false);
        let mut sim = super::Sim::with_store(store, clock, |c| c.timeout_grace_secs = 1).await;
        let mut root = sim.root().await;
        let second = sim.publish(&mut root, "web1", "test.ping", 1_000, 0).await.expect("published");
        assert!(second > first, "{second} after {first}");
        // 30 s of the TTL were left; a day of clock set back must not add to them. (The master
        // was killed, not stopped: the wall time it reached is recorded every 5 s, so up to
        // 5 s may be given back; nothing more.)
        sim.advance(36 * SECOND).await;
        assert_eq!(state_of(&sim, &first, "web1").await.0, MinionJobState::Expired);
    });
}

#[test]
fn a_client_that_goes_away_leaves_no_subscription_or_watch() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let _web1 = sim.minion("web1").await;
        let mut root = sim.root().await;
        root.send(&mut sim, &Message::Subscribe(Subscribe { patterns: vec!["*".into()], after: None })).await;
        let jid = sim.publish(&mut root, "web1", "test.ping", 1_000, 0).await.expect("published");
        assert!(!sim.master.core.bus().is_empty());
        root.disconnect(&mut sim).await;
        assert!(sim.master.core.bus().is_empty());
        assert!(sim.master.core.jobs().get(&jid).expect("live").watchers.is_empty());
    });
}

#[test]
fn a_principal_neither_sees_watches_cancels_nor_hears_of_another_targets_job() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web1 = sim.minion("web1").await;
        let mut db1 = sim.minion("db1").await;
        let mut root = sim.root().await;
        let mut dba = sim.principal("dba", "db*", &["test.ping"]).await;
        dba.send(&mut sim, &Message::Subscribe(Subscribe { patterns: vec!["halite/job/*".into()], after: None })).await;
        assert!(dba.recv(&sim).is_empty(), "an allowed subscription is not refused");

        let web_job = sim.publish(&mut root, "web1", "cmd.run", 60_000, 0).await.expect("published");
        let db_job = sim.publish(&mut root, "db1", "test.ping", 60_000, 0).await.expect("published");
        let heard = dba.recv(&sim);
        assert!(heard.iter().all(|m| !matches!(m, Message::Event(e) if e.tag.contains(&web_job))), "{heard:?}");
        assert!(heard.iter().any(|m| matches!(m, Message::Event(e) if e.tag.contains(&db_job))), "{heard:?}");

        assert!(show(&mut sim, &mut dba, &web_job).await.expect_err("hidden").contains("no job"));
        assert!(show(&mut sim, &mut dba, &db_job).await.is_ok());
        let Ok(ResponseBody::Jobs(listed)) =
            sim.request(&mut dba, RequestBody::JobList { limit: 10, filter: Default::default() }).await
        else {
            panic!("a listing");
        };
        assert_eq!(listed.iter().map(|j| j.jid.as_str()).collect::<Vec<_>>(), [db_job.as_str()]);

        dba.send(&mut sim, &Message::Cancel(Cancel { jid: web_job.clone() })).await;
        let answer = dba.recv(&sim);
        assert!(answer.iter().any(|m| matches!(m, Message::Error(e) if e.kind == ErrorKind::NotFound)), "{answer:?}");
        assert!(web1.recv(&sim).iter().all(|m| !matches!(m, Message::Cancel(_))), "root's job is not cancelled");
        assert!(!sim.master.core.jobs().get(&web_job).expect("live").watchers.contains(&dba.peer));

        web1.send(&mut sim, &Message::JobReturn(ret(&web_job))).await;
        db1.send(&mut sim, &Message::JobReturn(ret(&db_job))).await;
        let heard = dba.recv(&sim);
        assert!(heard.iter().all(|m| !matches!(m, Message::Event(e) if e.tag.contains(&web_job))), "{heard:?}");

        // Its view of minions, and what a publish can reveal, stop at its targets.
        let Ok(ResponseBody::Minions(minions)) =
            sim.request(&mut dba, RequestBody::MinionList { pattern: "*".into(), after: None, limit: None }).await
        else {
            panic!("a listing");
        };
        assert_eq!(minions.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["db1"]);
        let error = sim.publish(&mut dba, "web1", "test.ping", 1_000, 0).await.expect_err("refused");
        assert!(error.starts_with("no minions matched the target among those"), "{error}");
        let error = sim.publish(&mut dba, "*", "cmd.run", 1_000, 0).await.expect_err("refused");
        assert!(!error.contains("web1"), "{error}");
    });
}

#[test]
fn a_subscription_beyond_the_events_acl_is_refused() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut dba = sim.principal("dba", "db*", &["test.ping"]).await;
        dba.send(&mut sim, &Message::Subscribe(Subscribe { patterns: vec!["halite/key/*".into()], after: None })).await;
        let answer = dba.recv(&sim);
        assert!(
            answer.iter().any(|m| matches!(m, Message::Error(e) if e.kind == ErrorKind::Forbidden
                && e.message.contains("halite/key/*"))),
            "{answer:?}"
        );
        assert!(sim.master.core.bus().is_empty());
    });
}

#[test]
fn a_minion_id_bound_to_a_token_cannot_be_taken_by_connecting_first() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut root = sim.root().await;
        let token = sim.enrollment_token(&mut root, "db9").await;
        let squatter = halite_protocol::identity::IdentityKey::from_seed(&[66; 32]);
        let refused = sim.connect_minion("db9", &squatter, None).await.err().expect("refused");
        assert!(refused.contains("enrollment token"), "{refused}");
        assert!(sim.store().keys_for("db9").await.expect("store").is_empty(), "nothing recorded as pending");
        let real = halite_protocol::identity::IdentityKey::from_seed(&super::seed_of("db9"));
        assert!(sim.connect_minion("db9", &real, Some(&token)).await.is_ok());
        assert!(sim.master.core.registry().has_accepted("db9"));
    });
}

#[test]
fn cancel_stops_running_minions_and_ends_waiting_ones() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web1 = sim.minion("web1").await;
        let offline = sim.connect_minion_then_leave("web2").await;
        let mut root = sim.root().await;
        let jid = sim.publish(&mut root, "web*", "test.ping", 60_000, 60_000).await.expect("published");
        root.send(&mut sim, &Message::Cancel(Cancel { jid: jid.clone() })).await;
        assert!(web1.recv(&sim).iter().any(|m| matches!(m, Message::Cancel(c) if c.jid == jid)));
        assert_eq!(state_of(&sim, &jid, &offline).await.0, MinionJobState::Cancelled);
    });
}

impl Sim {
    /// Enrolls a minion, then disconnects it: known, accepted, offline. Returns its id.
    async fn connect_minion_then_leave(&mut self, id: &str) -> String {
        let minion = self.minion(id).await;
        minion.disconnect(self).await;
        id.to_owned()
    }
}

#[test]
fn grains_over_the_cap_are_refused_and_the_stored_ones_kept() {
    rt().block_on(async {
        let mut sim = Sim::with_config(|c| c.max_grains_bytes = 1024).await;
        let mut web1 = sim.minion("web1").await;
        web1.recv(&sim);
        let mut big = super::hello("web1");
        big.grains.insert("role".into(), serde_json::json!("x".repeat(4096)));
        web1.send(&mut sim, &Message::Hello(big)).await;
        let answers = web1.recv(&sim);
        assert!(
            answers.iter().any(|m| matches!(m, Message::Error(e) if e.message.contains("max_grains_bytes"))),
            "{answers:?}"
        );
        // Still targetable by the grains it had.
        let mut root = sim.root().await;
        let target = Target { kind: TargetKind::Grain, expr: "role:web".into() };
        let published = sim.publish_to(&mut root, target, "test.ping", 10_000, 0).await;
        assert!(published.is_ok(), "{published:?}");
    });
}

#[test]
fn a_return_over_the_cap_ends_failed_with_the_reason_and_is_acknowledged() {
    rt().block_on(async {
        let mut sim = Sim::with_config(|c| c.max_return_bytes = 1024).await;
        let mut web1 = sim.minion("web1").await;
        let mut root = sim.root().await;
        let jid = sim.publish(&mut root, "web1", "test.ping", 10_000, 0).await.expect("published");
        let mut big = ret(&jid);
        big.outputs = serde_json::json!({ "stdout": "x".repeat(4096) });
        web1.send(&mut sim, &Message::JobReturn(big)).await;
        assert!(acked(&web1.recv(&sim), &jid));
        let (state, stored, _) = state_of(&sim, &jid, "web1").await;
        assert_eq!(state, MinionJobState::Failed);
        let stored = stored.expect("a note is stored");
        assert!(stored.truncated && stored.outputs["error"].as_str().is_some_and(|e| e.contains("max_return_bytes")));
    });
}

/// Salt CVE-2013-4435's class: the signed job carries what its caller may reach, so the minion
/// can refuse nested calls; a minion publishing on behalf of a caller needs that caller's rules
/// too.
#[test]
fn a_job_carries_its_callers_reach_and_peer_publishes_need_the_callers_rules() {
    rt().block_on(async {
        let mut sim = Sim::with_config(|c| {
            c.peers = vec![crate::acl::PeerRule {
                minions: vec!["web1".into()],
                target: "db*".into(),
                functions: vec!["service.restart".into()],
            }];
        })
        .await;
        let mut web1 = sim.minion("web1").await;
        let _db1 = sim.minion("db1").await;
        let mut ops = sim.principal("ops", "web*", &["plan.run", "test.*"]).await;
        let jid = sim.publish(&mut ops, "web1", "plan.run", 10_000, 0).await.expect("published");
        let job = web1.jobs(&sim).pop().expect("job").verify(&sim.master_public()).expect("signed");
        assert_eq!(job.jid, jid);
        assert_eq!(job.reach, Some(vec!["plan.run".to_owned(), "test.*".to_owned()]));

        let request = |on_behalf_of: Option<&str>| {
            Message::Publish(halite_protocol::message::PublishRequest {
                request_id: 1,
                spec: halite_protocol::message::JobSpec {
                    timeout_ms: 1000,
                    ..halite_protocol::message::JobSpec::new(
                        Target { kind: TargetKind::Glob, expr: "db1".into() },
                        "service.restart",
                    )
                },
                on_behalf_of: on_behalf_of.map(str::to_owned),
            })
        };
        web1.recv(&sim);
        web1.send(&mut sim, &request(Some("ops"))).await;
        let refused = web1.recv(&sim);
        assert!(
            refused.iter().any(|m| matches!(m, Message::Error(e) if e.kind == ErrorKind::Forbidden
                && e.message.contains("on behalf of ops"))),
            "{refused:?}"
        );
        web1.send(&mut sim, &request(Some("nobody"))).await;
        assert!(web1.recv(&sim).iter().any(|m| matches!(m, Message::Error(e) if e.kind == ErrorKind::Forbidden)));
        web1.send(&mut sim, &request(Some("root"))).await;
        let published = web1.recv(&sim);
        assert!(published.iter().any(|m| matches!(m, Message::Published(_))), "{published:?}");
    });
}

/// Two 9 MiB returns together exceed the 16 MiB message cap: the watcher's updates and the
/// `jobs show` answer come in several messages (each within the cap) instead of dropping it.
#[test]
fn results_larger_than_one_message_reach_the_client_in_parts() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web1 = sim.minion("web1").await;
        let mut web2 = sim.minion("web2").await;
        let mut root = sim.root().await;
        let jid = sim.publish(&mut root, "web*", "test.ping", 10_000, 0).await.expect("published");
        root.recv(&sim);
        let big = "x".repeat(9 << 20);
        for minion in [&mut web1, &mut web2] {
            let mut ret = ret(&jid);
            ret.outputs = serde_json::json!({ "stdout": big });
            minion.send(&mut sim, &Message::JobReturn(ret)).await;
        }
        let updates = root.recv(&sim);
        let returned = updates
            .iter()
            .filter(
                |m| matches!(m, Message::JobUpdate(u) if u.ret.as_ref().is_some_and(|r| r.outputs["stdout"] == big)),
            )
            .count();
        assert_eq!(returned, 2, "both returns reached the watcher");
        let Ok(ResponseBody::Job(detail)) = show(&mut sim, &mut root, &jid).await else { panic!("no job") };
        assert_eq!(detail.minions.len(), 2);
        assert!(detail.minions.iter().all(|m| m.ret.as_ref().is_some_and(|r| r.outputs["stdout"] == big)));
    });
}

/// An id pattern far longer than any id is refused at once instead of being tried on every id.
#[test]
fn id_patterns_longer_than_any_id_are_refused() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let _web1 = sim.minion("web1").await;
        let mut root = sim.root().await;
        let long = format!("{}*", "?".repeat(300));
        for body in [
            RequestBody::MinionList { pattern: long.clone(), after: None, limit: None },
            RequestBody::KeyList { pattern: long.clone() },
        ] {
            let refused = sim.request(&mut root, body).await;
            assert!(refused.as_ref().is_err_and(|e| e.contains("longer than 255")), "{refused:?}");
        }
        let listed =
            sim.request(&mut root, RequestBody::MinionList { pattern: "web*".into(), after: None, limit: None }).await;
        assert!(matches!(listed, Ok(ResponseBody::Minions(m)) if m.len() == 1));
    });
}

/// A fleet is listed a page at a time, in id order: each page starts after the id it is given,
/// holds at most what was asked, and only minions the asker can target; pages joined are the
/// whole list, and an unpaged list is the same.
#[test]
fn minions_are_listed_a_page_at_a_time() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut minions = Vec::new();
        for id in ["web1", "db1", "web3", "web2", "web5", "web4"] {
            minions.push(sim.minion(id).await);
        }
        let mut root = sim.root().await;
        let mut web = sim.principal("webops", "web*", &["test.*"]).await;
        async fn page(
            sim: &mut Sim,
            who: &mut SimPeer,
            pattern: &str,
            after: Option<&str>,
            limit: Option<u32>,
        ) -> Vec<String> {
            let body = RequestBody::MinionList { pattern: pattern.into(), after: after.map(Into::into), limit };
            match sim.request(who, body).await {
                Ok(ResponseBody::Minions(list)) => list.into_iter().map(|m| m.id).collect(),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(page(&mut sim, &mut root, "*", None, Some(2)).await, ["db1", "web1"]);
        assert_eq!(page(&mut sim, &mut root, "*", Some("web1"), Some(2)).await, ["web2", "web3"]);
        assert_eq!(page(&mut sim, &mut root, "*", Some("web3"), Some(2)).await, ["web4", "web5"]);
        assert!(page(&mut sim, &mut root, "*", Some("web5"), Some(2)).await.is_empty());
        // The pattern and the asker's view apply within a page: db1 is never counted in it.
        assert_eq!(page(&mut sim, &mut web, "*", None, Some(3)).await, ["web1", "web2", "web3"]);
        assert_eq!(page(&mut sim, &mut web, "*", Some("web3"), Some(3)).await, ["web4", "web5"]);
        assert_eq!(page(&mut sim, &mut root, "web*", Some("a"), Some(1)).await, ["web1"]);
        // `after` need not be an id that exists.
        assert_eq!(page(&mut sim, &mut root, "*", Some("web2x"), None).await, ["web3", "web4", "web5"]);
        let all = page(&mut sim, &mut root, "*", None, None).await;
        assert_eq!(all, ["db1", "web1", "web2", "web3", "web4", "web5"]);
        // A page larger than the master answers is cut to its cap (here, every minion fits).
        assert_eq!(page(&mut sim, &mut root, "*", None, Some(u32::MAX)).await, all);
    });
}

/// A refused or pended peer gets its verdict, and the connection stays open a moment before the
/// master closes it, so a peer that reads slowly (libzmq) still has the verdict.
#[test]
fn a_verdict_arrives_before_the_connection_closes() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let stranger = halite_protocol::identity::IdentityKey::from_seed(&[77; 32]);
        let pending = sim.connect_minion("newcomer", &stranger, None).await.err().expect("not accepted yet");
        assert!(pending.contains("pending"), "{pending}");
        let peer = halite_transport::PeerId(sim.last_peer());
        assert_eq!(sim.net.closed(peer), None, "not closed together with the verdict");
        // A minion waiting for acceptance is parked: its connection stays open a while longer.
        sim.advance(3 * SECOND).await;
        assert_eq!(sim.net.closed(peer), None, "parked");
        sim.advance(crate::core::sessions::PARK_FOR).await;
        assert_eq!(sim.net.closed(peer).as_deref(), Some("not accepted"));
        // Any other refusal (here: another key for a known id) closes once the verdict had time
        // to arrive.
        sim.minion("web1").await;
        let impostor = halite_protocol::identity::IdentityKey::from_seed(&[78; 32]);
        let denied = sim.connect_minion("web1", &impostor, None).await.err().expect("denied");
        assert!(denied.contains("denied"), "{denied}");
        let peer = halite_transport::PeerId(sim.last_peer());
        sim.advance(3 * SECOND).await;
        assert_eq!(sim.net.closed(peer).as_deref(), Some("not accepted"));
    });
}

/// A minion knocking while the store does not answer is told to come back: its connection is
/// closed, never left open with nobody holding it.
#[test]
fn a_minion_knocking_while_the_store_is_away_is_told_to_try_again() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let conn = sim.store().take_away().await.expect("open");
        let newcomer = halite_protocol::identity::IdentityKey::from_seed(&[81; 32]);
        let _ = sim.connect_minion("newcomer", &newcomer, None).await;
        let peer = halite_transport::PeerId(sim.last_peer());
        assert_eq!(sim.net.closed(peer).as_deref(), Some("the master's store is unavailable; try again"));
        sim.store().give_back(conn).await;
        let pending = sim.connect_minion("newcomer", &newcomer, None).await.err().expect("pending");
        assert!(pending.contains("pending"), "{pending}");
    });
}

/// A target offline at publish, and the same return sent again by a minion that moved: every
/// subscriber hears each final state once, the publishing master's included.
#[test]
fn each_final_state_is_heard_once_offline_targets_and_resent_returns_included() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let web1 = sim.minion("web1").await;
        let mut web2 = sim.minion("web2").await;
        web1.disconnect(&mut sim).await;
        let mut root = sim.root().await;
        let mut watcher = sim.root().await;
        let subscribe = Subscribe { patterns: vec!["halite/job/*/ret/*".into()], after: None };
        watcher.send(&mut sim, &Message::Subscribe(subscribe)).await;
        let jid = sim.publish(&mut root, "web*", "test.ping", 10_000, 0).await.expect("published");
        let ret2 = JobReturn { minion: "web2".into(), ..ret(&jid) };
        web2.send(&mut sim, &Message::JobReturn(ret2.clone())).await;
        web2.send(&mut sim, &Message::JobReturn(ret2)).await;
        let tags = watcher.event_tags(&sim);
        assert_eq!(tags, [format!("halite/job/{jid}/ret/web1"), format!("halite/job/{jid}/ret/web2")]);
        assert_eq!(
            web2.recv(&sim).iter().filter(|m| matches!(m, Message::ReturnAck(_))).count(),
            2,
            "both acknowledged"
        );
    });
}

/// A minion waiting for its key (pending, or rejected before) is let in as soon as the key is
/// accepted, here or on another master: its parked connection is closed with the reason that
/// tells it to connect again at once.
#[test]
fn a_waiting_minion_is_told_to_connect_again_the_moment_its_key_is_accepted() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut root = sim.root().await;
        let newcomer = halite_protocol::identity::IdentityKey::from_seed(&[79; 32]);
        sim.connect_minion("newcomer", &newcomer, None).await.err().expect("pending");
        let peer = halite_transport::PeerId(sim.last_peer());
        let accept = RequestBody::KeyAccept { pattern: "newcomer".into() };
        sim.request(&mut root, accept).await.expect("accepted");
        assert_eq!(sim.net.closed(peer).as_deref(), Some(halite_protocol::noise::KEY_ACCEPTED_REASON));
        assert!(sim.connect_minion("newcomer", &newcomer, None).await.is_ok(), "let in");

        // Rejected, knocking, then accepted through another master (announced).
        let other = halite_protocol::identity::IdentityKey::from_seed(&[80; 32]);
        sim.connect_minion("other", &other, None).await.err().expect("pending");
        sim.request(&mut root, RequestBody::KeyReject { pattern: "other".into() }).await.expect("rejected");
        let refused = sim.connect_minion("other", &other, None).await.err().expect("rejected");
        assert!(refused.contains("rejected"), "{refused}");
        let peer = halite_transport::PeerId(sim.last_peer());
        let record = crate::store::KeyRecord {
            id: "other".into(),
            public_key: *other.public().as_bytes(),
            state: halite_protocol::message::KeyState::Accepted,
        };
        sim.store().put_key(&record, 1).await.expect("store");
        let change = crate::store::ClusterChange::Keys { ids: Some(vec!["other".into()]) };
        sim.step(Input::Cluster(Heard::new("b".into(), change))).await;
        assert_eq!(sim.net.closed(peer).as_deref(), Some(halite_protocol::noise::KEY_ACCEPTED_REASON));
    });
}

/// A job whose message does not fit the minion's full send queue is not lost: it waits in the
/// minion's backlog and goes out, in jid order, once the queue drains.
#[test]
fn jobs_that_meet_a_full_queue_are_sent_when_it_drains() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web1 = sim.minion("web1").await;
        web1.recv(&sim);
        let mut root = sim.root().await;
        sim.net.set_full(web1.peer, true);
        let first = sim.publish(&mut root, "web1", "test.ping", 60_000, 0).await.expect("published");
        let second = sim.publish(&mut root, "web1", "test.ping", 60_000, 0).await.expect("published");
        assert!(web1.jobs(&sim).is_empty(), "nothing fits");
        sim.net.set_full(web1.peer, false);
        sim.advance(SECOND / 5).await;
        let delivered: Vec<String> =
            web1.jobs(&sim).iter().map(|j| j.verify(&sim.master_public()).expect("signed").jid).collect();
        assert_eq!(delivered, [first, second]);
    });
}

#[test]
fn a_subscriber_resumes_after_the_last_event_it_saw_and_is_told_of_a_gap() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let _web1 = sim.minion("web1").await;
        let watch =
            |after: Option<String>| Message::Subscribe(Subscribe { patterns: vec!["halite/job/*/new".into()], after });
        let events = |messages: Vec<Message>| -> Vec<halite_protocol::message::Event> {
            messages
                .into_iter()
                .filter_map(|m| match m {
                    Message::Event(e) => Some(e),
                    _ => None,
                })
                .collect()
        };
        let mut first = sim.root().await;
        let mut other = sim.root().await;
        first.send(&mut sim, &watch(None)).await;
        let seen = sim.publish(&mut other, "web1", "test.ping", 60_000, 0).await.expect("published");
        let heard = events(first.recv(&sim));
        assert_eq!(heard.len(), 1);
        let last = heard[0].id.clone().expect("events to clients carry an id");
        first.disconnect(&mut sim).await;

        // Published while nobody listened.
        let missed = sim.publish(&mut other, "web1", "test.ping", 60_000, 0).await.expect("published");

        let mut again = sim.root().await;
        again.send(&mut sim, &watch(Some(last.clone()))).await;
        let replayed = events(again.recv(&sim));
        let tags: Vec<&str> = replayed.iter().map(|e| e.tag.as_str()).collect();
        assert_eq!(tags, [format!("halite/job/{missed}/new")], "what came after, not {seen}");
        let seq = |id: &str| id.rsplit_once('-').and_then(|(_, n)| n.parse::<u64>().ok()).expect("an id");
        assert!(replayed[0].id.as_deref().is_some_and(|id| seq(id) > seq(&last)));

        // An id from another run of the master: everything held, after a gap notice.
        let mut stale = sim.root().await;
        stale.send(&mut sim, &watch(Some("1-5".into()))).await;
        let replayed = events(stale.recv(&sim));
        assert_eq!(replayed[0].tag, "halite/bus/gap");
        assert_eq!(replayed[0].data["reason"], "the master restarted since that event");
        assert_eq!(replayed.len(), 3, "the gap, then both jobs: {replayed:?}");
    });
}

#[test]
fn work_a_step_leaves_for_the_next_wakes_the_loop_at_once() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        sim.advance(SECOND).await;
        let now = crate::clock::Clock::now(&sim.clock);
        assert!(sim.master.core.next_timeout().is_some_and(|at| at > now), "nothing is due now");
        // An event the step's last writes published, not heard by the rollouts and groups yet.
        sim.master.core.hear_event("halite/minion/web1/custom".into(), serde_json::json!({}));
        assert_eq!(sim.master.core.next_timeout(), Some(now));
        sim.step(Input::Tick).await;
        assert!(sim.master.core.nothing_to_hear(), "heard at the next step");
        assert!(sim.master.wake_at.is_some_and(|at| at > now), "and nothing left to wake for");
    });
}

/// A revocation SIGHUP adds is in force at once: the minions connected here are told it in a
/// welcome, without losing their session (one given several masters would otherwise move to
/// the next, maybe the revoked one). A store no other master shares has nothing to reread, so
/// the master goes on storing returns (it does not wait for a reread that never comes).
#[test]
fn a_revocation_reread_on_sighup_is_told_to_the_minions_and_leaves_a_lone_store_trusted() {
    use halite_protocol::identity::IdentityKey;
    use halite_protocol::noise::{MasterCertificate, Revocation};
    rt().block_on(async {
        let (mut sim, mut web1, _root, jid) = web1_pinged(10_000).await;
        web1.recv(&sim);
        let cluster = IdentityKey::from_seed(&[9; 32]);
        let identity = sim.master.core.identity().clone();
        let certificate = MasterCertificate::issue(&cluster, &identity.public(), &sim.master.core.config().id);
        sim.master.core.set_identity(identity.with_certificate(certificate));
        let retired = Revocation::issue(&cluster, &IdentityKey::from_seed(&[8; 32]).public()).to_hex();
        let path = std::env::temp_dir().join(format!("halite-sim-revoke-{}.toml", std::process::id()));
        std::fs::write(&path, format!("revoked_masters = [{retired:?}]\n")).unwrap();
        sim.master.core.config_mut().path = Some(path.clone());
        sim.step(Input::Reload).await;
        let _ = std::fs::remove_file(&path);
        assert_eq!(sim.master.core.config_mut().revoked_masters, std::slice::from_ref(&retired));
        let told = web1.recv(&sim);
        let notice =
            |m: &Message| matches!(m, Message::Welcome(w) if w.revoked == [retired.clone()] && w.revocations_only);
        assert!(told.iter().any(notice), "a notice answering no hello: {told:?}");
        assert_eq!(sim.net.closed(web1.peer), None, "told, not cut");
        assert!(!sim.master.core.store_in_doubt(), "nothing to reread: the store is this master's alone");
        let retired_key = IdentityKey::from_seed(&[8; 32]).public();
        assert!(sim.master.core.config().revokes(&retired_key), "its announcements still waiting are dropped");
        // A reread that changes no revocation tells nobody.
        std::fs::write(&path, format!("revoked_masters = [{retired:?}]\n")).unwrap();
        sim.step(Input::Reload).await;
        let _ = std::fs::remove_file(&path);
        assert!(!web1.recv(&sim).iter().any(|m| matches!(m, Message::Welcome(_))));
        // The master goes on: a return is stored and acknowledged.
        web1.send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert!(acked(&web1.recv(&sim), &jid), "a return is stored as before the reload");
    });
}
