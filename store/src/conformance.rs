//! The behaviour every [`Store`] implementation must have, as generic cases any backend runs
//! (`conformance_suite!` makes one test per case): every trait method, its edge cases, and
//! concurrent use. SQLite runs it in memory and on a file; another backend adds one line.

#![cfg(test)]

pub(crate) use crate::testing::job;

use std::collections::BTreeMap;
use std::future::Future;

use halite_protocol::message::{
    status, JobReturn, KeyState, MinionJobState, NewDeployment, Outcome, PrincipalAcl, PrincipalRule, SoftwareConfig,
    SoftwareDeployment,
};
use serde_json::json;

use super::{DeploymentRecord, KeyRecord, MinionRecord, PrincipalRecord, StateChange, Store, TokenRecord, TokenUse};

/// Runs one case on a fresh store, on a runtime with worker threads (for the concurrency case).
pub(crate) fn run<S, Open, Case, Done>(open: Open, case: Case)
where
    Open: Future<Output = S>,
    Case: FnOnce(S) -> Done,
    Done: Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async { case(open.await).await });
}

/// One `#[test]` per case, for the backend that `$open` (an expression giving a future of a
/// fresh store) opens.
macro_rules! conformance_suite {
    ($open:expr) => {
        $crate::conformance::conformance_suite!(@cases $open;
            keys_and_tokens, minions, big_jobs_and_failed_inserts, states_returns_listing_and_retention,
            later_changes_win_and_returns_stay, principals, jids_and_wall_marks_only_grow,
            configs_deployments_and_api_tokens, group_writes_are_guarded_by_their_revision, concurrent_writers);
    };
    (@cases $open:expr; $($case:ident),*) => {
        mod conformance {
            use super::*;
            $(
                #[test]
                fn $case() {
                    $crate::conformance::run($open, $crate::conformance::$case)
                }
            )*
        }
    };
}
pub(crate) use conformance_suite;

fn ret(jid: &str, minion: &str, stdout: &str) -> JobReturn {
    JobReturn {
        jid: jid.into(),
        minion: minion.into(),
        success: true,
        retcode: 0,
        outputs: json!({ "stdout": stdout }),
        truncated: false,
        duration_ms: 3,
        outcome: Outcome::Completed,
    }
}

fn change(jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>, late: bool) -> StateChange {
    StateChange { jid: jid.into(), minion: minion.into(), state, ret, at_ms: 11, late }
}

pub(crate) async fn keys_and_tokens<S: Store>(store: S) {
    let key = KeyRecord { id: "web1".into(), public_key: [1; 32], state: KeyState::Pending };
    store.put_key(&key, 1).await.unwrap();
    assert_eq!(store.pending_key_count().await.unwrap(), 1);
    store.put_key(&KeyRecord { state: KeyState::Accepted, ..key.clone() }, 2).await.unwrap();
    assert_eq!(store.pending_key_count().await.unwrap(), 0);
    store.put_key(&KeyRecord { id: "web1".into(), public_key: [2; 32], state: KeyState::Denied }, 3).await.unwrap();
    let keys = store.keys_for("web1").await.unwrap();
    assert_eq!(keys.len(), 2);
    assert!(keys.contains(&KeyRecord { state: KeyState::Accepted, ..key.clone() }));
    store.delete_key("web1", &[2; 32]).await.unwrap();
    assert_eq!(store.keys().await.unwrap().len(), 1);
    assert!(store.keys_for("nobody").await.unwrap().is_empty());

    store.create_token(&[7; 32], "web2", 100, false, "heat").await.unwrap();
    assert!(store.token_outstanding("web2", 50).await.unwrap());
    assert!(!store.token_outstanding("web2", 100).await.unwrap(), "expired");
    assert!(!store.token_outstanding("web3", 50).await.unwrap());
    store.put_key(&KeyRecord { id: "web2".into(), public_key: [5; 32], state: KeyState::Pending }, 4).await.unwrap();
    assert_eq!(
        store.enroll_with_token(&[7; 32], "web3", &[1; 32], 50).await.unwrap(),
        TokenUse::Invalid,
        "bound to another minion"
    );
    assert_eq!(store.enroll_with_token(&[7; 32], "web2", &[1; 32], 100).await.unwrap(), TokenUse::Invalid, "expired");
    assert_eq!(
        store.enroll_with_token(&[8; 32], "web2", &[1; 32], 50).await.unwrap(),
        TokenUse::Invalid,
        "unknown token"
    );
    assert_eq!(
        store.enroll_with_token(&[7; 32], "web2", &[1; 32], 99).await.unwrap(),
        TokenUse::Enrolled { replaced: false }
    );
    assert_eq!(store.enroll_with_token(&[7; 32], "web2", &[1; 32], 99).await.unwrap(), TokenUse::Invalid, "burns once");
    assert!(!store.token_outstanding("web2", 50).await.unwrap(), "used");
    let token = |minion: &str, expires_at_ms, used| TokenRecord { minion: minion.into(), expires_at_ms, used };
    assert_eq!(store.token(&[7; 32]).await.unwrap(), Some(token("web2", 100, true)));
    assert_eq!(store.token(&[8; 32]).await.unwrap(), None);
    let web2 = store.keys_for("web2").await.unwrap();
    assert!(web2.contains(&KeyRecord { id: "web2".into(), public_key: [1; 32], state: KeyState::Accepted }));
    assert!(
        web2.contains(&KeyRecord { id: "web2".into(), public_key: [5; 32], state: KeyState::Denied }),
        "the other key is denied in the same transaction: {web2:?}"
    );
    // Listed by id, soonest to expire first; revoked by id (an unused one then enrolls nobody).
    store.create_token(&[9; 32], "web4", 80, false, "trove").await.unwrap();
    let listed: Vec<(String, String, u64, bool)> =
        store.tokens(None).await.unwrap().into_iter().map(|t| (t.id, t.minion, t.expires_at_ms, t.used)).collect();
    assert_eq!(
        listed,
        [("090909090909".into(), "web4".into(), 80, false), ("070707070707".into(), "web2".into(), 100, true)]
    );
    // Each creator's own only, when asked for one; another's token is not deleted.
    let of = |tokens: Vec<halite_protocol::message::TokenSummary>| tokens.into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(of(store.tokens(Some("heat")).await.unwrap()), ["070707070707"]);
    assert_eq!(of(store.tokens(Some("trove")).await.unwrap()), ["090909090909"]);
    assert!(store.tokens(Some("nobody")).await.unwrap().is_empty());
    assert!(!store.delete_token("090909090909", Some("heat")).await.unwrap(), "trove's");
    assert!(store.delete_token("090909090909", Some("trove")).await.unwrap());
    assert!(!store.delete_token("090909090909", None).await.unwrap());
    assert_eq!(store.enroll_with_token(&[9; 32], "web4", &[3; 32], 10).await.unwrap(), TokenUse::Invalid, "revoked");

    // web2's key [1] is accepted now: a plain token is used up and its key denied, while one
    // made to replace enrolls its key and denies the accepted one.
    store.create_token(&[10; 32], "web2", 1000, false, "heat").await.unwrap();
    assert_eq!(store.enroll_with_token(&[10; 32], "web2", &[6; 32], 200).await.unwrap(), TokenUse::Refused);
    let web2 = store.keys_for("web2").await.unwrap();
    assert!(
        web2.contains(&KeyRecord { id: "web2".into(), public_key: [1; 32], state: KeyState::Accepted }),
        "{web2:?}"
    );
    assert!(web2.contains(&KeyRecord { id: "web2".into(), public_key: [6; 32], state: KeyState::Denied }), "{web2:?}");
    assert!(store.token(&[10; 32]).await.unwrap().is_some_and(|t| t.used), "a refused token is used up");
    store.create_token(&[11; 32], "web2", 1000, true, "root").await.unwrap();
    assert_eq!(
        store.enroll_with_token(&[11; 32], "web2", &[6; 32], 201).await.unwrap(),
        TokenUse::Enrolled { replaced: true }
    );
    let web2 = store.keys_for("web2").await.unwrap();
    assert!(
        web2.contains(&KeyRecord { id: "web2".into(), public_key: [6; 32], state: KeyState::Accepted }),
        "{web2:?}"
    );
    assert!(web2.contains(&KeyRecord { id: "web2".into(), public_key: [1; 32], state: KeyState::Denied }), "{web2:?}");
}

pub(crate) async fn minions<S: Store>(store: S) {
    let minion = |id: &str, seen| MinionRecord {
        id: id.into(),
        grains: BTreeMap::from([("os".into(), json!("Debian")), ("nested".into(), json!({"a": [1, 2]}))]),
        functions: vec!["test.ping".into()],
        last_seen_ms: seen,
    };
    store.put_minions(&[minion("web1", 5), minion("db1", 6)]).await.unwrap();
    store.put_minions(&[minion("web1", 9)]).await.unwrap();
    assert_eq!(store.minions().await.unwrap(), vec![minion("db1", 6), minion("web1", 9)], "sorted, replaced");
    store.put_minions(&[]).await.unwrap();
    let names = ["web1".to_owned(), "ghost".to_owned(), "db1".to_owned()];
    assert_eq!(store.minions_named(&names).await.unwrap(), vec![minion("db1", 6), minion("web1", 9)]);
    store.delete_minion("web1").await.unwrap();
    assert_eq!(store.minions_named(&names[..2]).await.unwrap(), vec![]);
    store.delete_minion("web1").await.unwrap();
    assert_eq!(store.minions().await.unwrap(), vec![minion("db1", 6)]);
}

pub(crate) async fn big_jobs_and_failed_inserts<S: Store>(store: S) {
    let states: Vec<(String, MinionJobState)> = (0..450).map(|i| (format!("m{i:03}"), MinionJobState::Sent)).collect();
    store.insert_job(&job("big", 1), &states).await.unwrap();
    let changes: Vec<StateChange> = (0..450)
        .flat_map(|i| {
            let minion = format!("m{i:03}");
            let returned = (i % 2 == 0).then(|| ret("big", &minion, "ok"));
            [
                change("big", &minion, MinionJobState::Running, None, false),
                change("big", &minion, MinionJobState::Returned, returned, false),
            ]
        })
        .collect();
    store.set_states(&changes).await.unwrap();
    store.set_states(&[]).await.unwrap();
    let detail = store.job("big").await.unwrap().unwrap();
    assert_eq!(detail.minions.len(), 450);
    assert!(detail.minions.iter().all(|m| m.state == MinionJobState::Returned));
    // More minions than one query takes: every other one has a return.
    let asked: Vec<String> = (0..1200).map(|i| format!("m{i:03}")).collect();
    let returns = store.returns_of("big", &asked).await.unwrap();
    assert_eq!(returns.len(), 225);
    assert!(returns.iter().all(|(minion, r)| r.minion == *minion && *r == ret("big", minion, "ok")));
    // A duplicate jid fails as a whole, as a conflict, and leaves nothing behind.
    let clash = store.insert_job(&job("big", 3), &states[..2]).await.unwrap_err();
    assert!(matches!(clash, super::StoreError::Conflict(_)), "{clash:?}");
    // So does one that clashes halfway, after its job row (a minion listed twice).
    let twice = [("m1".to_owned(), MinionJobState::Sent), ("m1".to_owned(), MinionJobState::Sent)];
    let clash = store.insert_job(&job("half", 3), &twice).await.unwrap_err();
    assert!(matches!(clash, super::StoreError::Conflict(_)), "{clash:?}");
    assert!(store.job("half").await.unwrap().is_none());
    store.insert_job(&job("next", 4), &states[..2]).await.unwrap();
    assert_eq!(store.job("next").await.unwrap().unwrap().minions.len(), 2);
    assert_eq!(store.job("big").await.unwrap().unwrap().minions.len(), 450);
    assert!(store.job("none").await.unwrap().is_none());
}

pub(crate) async fn states_returns_listing_and_retention<S: Store>(store: S) {
    let states = vec![("web1".to_owned(), MinionJobState::Sent), ("web2".to_owned(), MinionJobState::Offline)];
    store.insert_job(&job("1", 10), &states).await.unwrap();
    store.insert_job(&job("2", 20), &[("web1".to_owned(), MinionJobState::Waiting)]).await.unwrap();
    store.insert_job(&job("3", 30), &[("db1".to_owned(), MinionJobState::Offline)]).await.unwrap();
    let unfinished = store.unfinished_jobs().await.unwrap();
    assert_eq!(unfinished.iter().map(|(j, _)| j.jid.as_str()).collect::<Vec<_>>(), ["1", "2"]);
    assert_eq!(unfinished[0].0, job("1", 10));
    assert_eq!(unfinished[0].1.len(), 2);

    let returned = ret("1", "web1", "hi");
    store.set_states(&[change("1", "web1", MinionJobState::Returned, Some(returned.clone()), false)]).await.unwrap();
    let detail = store.job("1").await.unwrap().unwrap();
    assert_eq!((detail.args.clone(), detail.kwargs.clone()), (job("1", 10).args, job("1", 10).kwargs));
    assert_eq!(detail.minions[0].state, MinionJobState::Returned);
    assert_eq!(detail.minions[0].ret.as_ref(), Some(&returned));
    assert_eq!(detail.minions[1].state, MinionJobState::Offline);
    assert_eq!(detail.summary.states[&MinionJobState::Returned], 1);
    assert_eq!(store.unfinished_jobs().await.unwrap().len(), 1);
    // The returns of some minions: those that have one, of this job only.
    let asked = ["web1".to_owned(), "web2".to_owned(), "db9".to_owned()];
    assert_eq!(store.returns_of("1", &asked).await.unwrap(), vec![("web1".to_owned(), returned.clone())]);
    assert!(store.returns_of("2", &asked).await.unwrap().is_empty());
    assert!(store.returns_of("1", &[]).await.unwrap().is_empty());

    // Newest first, paged by a jid cursor; minions only when asked.
    let page = store.jobs(None, 2, true).await.unwrap();
    assert_eq!(page.iter().map(|l| l.summary.jid.as_str()).collect::<Vec<_>>(), ["3", "2"]);
    assert_eq!(page[0].minions, ["db1"]);
    let rest = store.jobs(Some("2"), 2, false).await.unwrap();
    assert_eq!(rest.iter().map(|l| l.summary.jid.as_str()).collect::<Vec<_>>(), ["1"]);
    assert!(rest[0].minions.is_empty());
    assert!(store.jobs(None, 0, false).await.unwrap().is_empty());

    // Retention: finished and old goes; unfinished stays whatever its age.
    assert_eq!(store.purge_jobs(25).await.unwrap(), 1);
    assert!(store.job("1").await.unwrap().is_none());
    assert!(store.job("2").await.unwrap().is_some(), "still waiting");
    assert_eq!(store.purge_jobs(1_000).await.unwrap(), 1);
    assert!(store.job("3").await.unwrap().is_none());
    assert!(store.job("2").await.unwrap().is_some());
}

pub(crate) async fn later_changes_win_and_returns_stay<S: Store>(store: S) {
    store.insert_job(&job("1", 1), &[("web1".to_owned(), MinionJobState::Sent)]).await.unwrap();
    let first = ret("1", "web1", "first");
    store
        .set_states(&[
            change("1", "web1", MinionJobState::Running, None, false),
            change("1", "web1", MinionJobState::Failed, Some(first.clone()), false),
        ])
        .await
        .unwrap();
    // A final state, once stored, is kept: the first master to decide a slot wins (several
    // masters sharing a store may each decide one), and its return stays.
    store.set_states(&[change("1", "web1", MinionJobState::TimedOut, None, false)]).await.unwrap();
    store.set_states(&[change("1", "web1", MinionJobState::Sent, None, false)]).await.unwrap();
    let m = store.job("1").await.unwrap().unwrap().minions.remove(0);
    assert_eq!((m.state, m.ret.as_ref(), m.late), (MinionJobState::Failed, Some(&first), false));
    // One job's slots and record, as a master that did not publish it loads it.
    let (record, states) = store.live_job("1").await.unwrap().unwrap();
    assert_eq!((record, states), (job("1", 1), vec![("web1".to_owned(), MinionJobState::Failed)]));
    assert!(store.live_job("none").await.unwrap().is_none());
    store.insert_job(&job("3", 3), &[("web1".to_owned(), MinionJobState::Waiting)]).await.unwrap();
    assert_eq!(store.unfinished_jids().await.unwrap(), ["3"], "job 1 is final");

    // A late return is kept beside the final state, only if none is stored yet.
    store.insert_job(&job("2", 2), &[("web1".to_owned(), MinionJobState::TimedOut)]).await.unwrap();
    let late = ret("2", "web1", "late");
    store.set_states(&[change("2", "web1", MinionJobState::Returned, Some(late.clone()), true)]).await.unwrap();
    store
        .set_states(&[change("2", "web1", MinionJobState::Returned, Some(ret("2", "web1", "again")), true)])
        .await
        .unwrap();
    let m = store.job("2").await.unwrap().unwrap().minions.remove(0);
    assert_eq!((m.state, m.ret.as_ref(), m.late), (MinionJobState::TimedOut, Some(&late), true));
    // A change for a slot that does not exist changes nothing.
    store.set_states(&[change("9", "web1", MinionJobState::Returned, None, false)]).await.unwrap();
    assert!(store.job("9").await.unwrap().is_none());
}

pub(crate) async fn principals<S: Store>(store: S) {
    let principal = |functions: &[&str]| PrincipalRecord {
        name: "heat".into(),
        public_key: [3; 32],
        acl: PrincipalAcl {
            rules: vec![PrincipalRule {
                targets: "web*".into(),
                functions: functions.iter().map(|f| (*f).to_owned()).collect(),
                args: BTreeMap::from([("name".into(), "nginx|apache2".into())]),
            }],
            events: vec!["halite/job/*".into()],
            admin: false,
            tenant: None,
        },
    };
    store.put_principal(&principal(&["test.*"]), 1).await.unwrap();
    store.put_principal(&principal(&["pkg.install"]), 2).await.unwrap();
    assert_eq!(store.principals().await.unwrap(), vec![principal(&["pkg.install"])]);
    assert!(store.delete_principal("heat").await.unwrap());
    assert!(!store.delete_principal("heat").await.unwrap());
    assert!(store.principals().await.unwrap().is_empty());
}

pub(crate) async fn jids_and_wall_marks_only_grow<S: Store>(store: S) {
    assert_eq!(store.last_jid().await.unwrap(), None);
    assert_eq!(store.wall_mark().await.unwrap(), None);
    store.insert_job(&job("20261122000000000002", 1), &[("a".to_owned(), MinionJobState::Offline)]).await.unwrap();
    store.insert_job(&job("20261122000000000001", 1), &[("a".to_owned(), MinionJobState::Offline)]).await.unwrap();
    assert_eq!(store.last_jid().await.unwrap().as_deref(), Some("20261122000000000002"));
    store.purge_jobs(u64::MAX / 2).await.unwrap();
    assert_eq!(store.last_jid().await.unwrap().as_deref(), Some("20261122000000000002"), "kept through purges");
    store.set_wall_mark(1_000).await.unwrap();
    store.set_wall_mark(500).await.unwrap();
    assert_eq!(store.wall_mark().await.unwrap(), Some(1_000));
    store.set_wall_mark(1_500).await.unwrap();
    assert_eq!(store.wall_mark().await.unwrap(), Some(1_500));
    store.check().await.unwrap();
}

pub(crate) async fn configs_deployments_and_api_tokens<S: Store>(store: S) {
    let config = |id: &str| SoftwareConfig {
        id: id.into(),
        name: id.into(),
        group: "script".into(),
        config: json!("echo hi"),
        inputs: Vec::new(),
        outputs: Vec::new(),
        options: None,
        creation_time: "2026-11-22T00:00:00Z".into(),
    };
    store.put_config(&config("c1"), "heat", 1).await.unwrap();
    store.put_config(&config("c2"), "trove", 2).await.unwrap();
    store.put_config(&config("c3"), "heat", 3).await.unwrap();
    let c1 = crate::ConfigRecord { config: config("c1"), owner: "heat".into() };
    assert_eq!(store.config("c1").await.unwrap(), Some(c1));
    assert_eq!(store.configs(None, 10).await.unwrap(), vec![config("c3"), config("c2"), config("c1")], "newest first");
    assert_eq!(store.configs(None, 1).await.unwrap().len(), 1);
    // One creator's only, newest first, the limit counting only theirs.
    assert_eq!(store.configs(Some("heat"), 10).await.unwrap(), vec![config("c3"), config("c1")]);
    assert_eq!(store.configs(Some("heat"), 1).await.unwrap(), vec![config("c3")]);
    assert_eq!(store.configs(Some("trove"), 10).await.unwrap(), vec![config("c2")]);
    assert!(!store.delete_config("c2", Some("heat")).await.unwrap(), "trove's: not deleted for heat");
    assert_eq!(store.config("c2").await.unwrap().map(|c| c.owner).as_deref(), Some("trove"));
    assert!(store.delete_config("c2", Some("trove")).await.unwrap());
    assert!(!store.delete_config("c2", None).await.unwrap());
    assert_eq!(store.config("c2").await.unwrap(), None);
    assert!(store.delete_config("c3", None).await.unwrap(), "anyone's, with no owner given");

    let record = |id: &str, server: &str, status: &str, relay_pending| {
        let spec: NewDeployment =
            serde_json::from_value(json!({"config_id": "c1", "server_id": server})).expect("spec");
        DeploymentRecord {
            owner: format!("owner-of-{id}"),
            deployment: SoftwareDeployment {
                id: id.into(),
                config_id: "c1".into(),
                server_id: server.into(),
                input_values: Default::default(),
                output_values: Default::default(),
                action: "CREATE".into(),
                status: status.into(),
                status_reason: String::new(),
                derived_config_id: format!("{id}-d"),
                creation_time: "2026-11-22T00:00:00Z".into(),
                updated_time: None,
            },
            spec,
            jid: "1".into(),
            item: json!({}),
            relay_pending,
            last_signal: None,
            finish_id: String::new(),
        }
    };
    store.put_deployment(&record("d1", "web1", status::IN_PROGRESS, false), 1).await.unwrap();
    store.put_deployment(&record("d2", "web2", status::COMPLETE, true), 2).await.unwrap();
    store.put_deployment(&record("d3", "web1", status::COMPLETE, false), 3).await.unwrap();
    assert_eq!(store.deployment("d2").await.unwrap(), Some(record("d2", "web2", status::COMPLETE, true)));
    let owners: Vec<String> = store.deployments(None).await.unwrap().into_iter().map(|r| r.owner).collect();
    assert_eq!(owners, ["owner-of-d3", "owner-of-d2", "owner-of-d1"], "each read with its owner, newest first");
    assert!(store.open_deployments().await.unwrap().iter().all(|r| r.owner == format!("owner-of-{}", r.deployment.id)));
    assert_eq!(store.deployments(None).await.unwrap().len(), 3);
    let web1: Vec<String> =
        store.deployments(Some("web1")).await.unwrap().into_iter().map(|r| r.deployment.id).collect();
    assert_eq!(web1.len(), 2);
    assert!(web1.contains(&"d1".to_owned()) && web1.contains(&"d3".to_owned()));
    let mut open: Vec<String> = store.open_deployments().await.unwrap().into_iter().map(|r| r.deployment.id).collect();
    open.sort();
    assert_eq!(open, ["d1", "d2"], "in progress, or a signal still to relay");
    // A job's deployment is found by the job while it waits on it.
    assert_eq!(store.deployment_waiting_on("1").await.unwrap().map(|r| r.deployment.id), Some("d1".into()));
    assert_eq!(store.deployment_waiting_on("0").await.unwrap(), None);
    // Finishing is a transition from in progress, on the job the deployment waits on: the end of
    // a job it no longer waits on (updated meanwhile) finishes nothing...
    let superseded = DeploymentRecord { jid: "0".into(), ..record("d1", "web1", status::FAILED, true) };
    assert!(!store.finish_deployment(&superseded, 4).await.unwrap());
    assert_eq!(store.deployment("d1").await.unwrap(), Some(record("d1", "web1", status::IN_PROGRESS, false)));
    // ...and the first master to finish it wins.
    assert!(store.finish_deployment(&record("d1", "web1", status::FAILED, true), 4).await.unwrap());
    assert!(!store.finish_deployment(&record("d1", "web1", status::COMPLETE, false), 5).await.unwrap());
    assert_eq!(store.deployment("d1").await.unwrap(), Some(record("d1", "web1", status::FAILED, true)));
    // A relay is recorded once, on the job it relayed for, and never brings back a deployment.
    assert!(!store
        .record_relayed(&DeploymentRecord { jid: "0".into(), ..record("d1", "web1", status::FAILED, false) }, 5)
        .await
        .unwrap());
    assert!(store.record_relayed(&record("d1", "web1", status::FAILED, false), 5).await.unwrap());
    assert!(!store.record_relayed(&record("d1", "web1", status::FAILED, false), 6).await.unwrap(), "no longer pending");
    assert_eq!(store.deployment("d1").await.unwrap(), Some(record("d1", "web1", status::FAILED, false)));
    // An update replaces the row it was read from, on the job it then waited on: not one
    // updated since, nor one deleted.
    let updated = DeploymentRecord { jid: "2".into(), ..record("d1", "web1", status::IN_PROGRESS, false) };
    assert!(!store.update_deployment(&updated, "0", 6).await.unwrap(), "read on another job");
    assert!(store.update_deployment(&updated, "1", 6).await.unwrap());
    assert_eq!(store.deployment("d1").await.unwrap(), Some(updated.clone()));
    assert_eq!(store.deployment_waiting_on("2").await.unwrap().map(|r| r.deployment.id), Some("d1".into()));
    let again = DeploymentRecord { jid: "3".into(), ..updated.clone() };
    assert!(!store.update_deployment(&again, "1", 7).await.unwrap(), "another update came first");
    assert!(store.delete_deployment("d1").await.unwrap());
    assert!(!store.update_deployment(&again, "2", 7).await.unwrap());
    assert_eq!(store.deployment("d1").await.unwrap(), None, "an update made late brings nothing back");
    assert!(!store.delete_deployment("d1").await.unwrap());
    assert!(!store.record_relayed(&record("d1", "web1", status::FAILED, false), 7).await.unwrap());
    assert_eq!(store.deployment("d1").await.unwrap(), None, "a relay recorded late brings nothing back");

    store.create_api_token(&[4; 32], "heat", "root", 1, None).await.unwrap();
    let grant = |principal: &str, id: &str, expires_at_ms| crate::ApiTokenGrant {
        id: id.into(),
        principal: principal.into(),
        expires_at_ms,
    };
    assert_eq!(store.api_token_grant(&[4; 32], 2).await.unwrap(), Some(grant("heat", "040404040404", None)));
    assert_eq!(store.api_token_grant(&[5; 32], 2).await.unwrap(), None);
    // Expiry: valid before, not at or after.
    store.create_api_token(&[6; 32], "trove", "ops", 3, Some(100)).await.unwrap();
    assert_eq!(store.api_token_grant(&[6; 32], 99).await.unwrap(), Some(grant("trove", "060606060606", Some(100))));
    assert_eq!(store.api_token_grant(&[6; 32], 100).await.unwrap(), None);
    // Listed by id (never the token), newest first; revoked by id.
    let listed = store.api_tokens(None).await.unwrap();
    let ids: Vec<(&str, &str, Option<u64>)> =
        listed.iter().map(|t| (t.id.as_str(), t.principal.as_str(), t.expires_at_ms)).collect();
    assert_eq!(ids, [("060606060606", "trove", Some(100)), ("040404040404", "heat", None)]);
    // By creator (not by the principal a token acts as).
    let ids =
        |tokens: Vec<halite_protocol::message::ApiTokenInfo>| tokens.into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(ids(store.api_tokens(Some("ops")).await.unwrap()), ["060606060606"]);
    assert!(store.api_tokens(Some("trove")).await.unwrap().is_empty());
    assert!(!store.delete_api_token("060606060606", Some("root")).await.unwrap(), "ops's");
    assert!(store.delete_api_token("060606060606", Some("ops")).await.unwrap());
    assert!(!store.delete_api_token("060606060606", None).await.unwrap());
    assert_eq!(store.api_token_grant(&[6; 32], 50).await.unwrap(), None);
    // A principal's tokens go with it: one of the same name added later does not inherit them.
    let acl = halite_protocol::message::PrincipalAcl::default();
    store.put_principal(&crate::PrincipalRecord { name: "heat".into(), public_key: [1; 32], acl }, 4).await.unwrap();
    store.put_config(&config("c4"), "heat", 4).await.unwrap();
    store.create_api_token(&[8; 32], "trove", "heat", 4, None).await.unwrap();
    assert!(store.delete_principal("heat").await.unwrap());
    assert_eq!(store.api_token_grant(&[4; 32], 5).await.unwrap(), None);
    // What it created passes to root: a later principal named heat does not own it.
    assert_eq!(store.config("c4").await.unwrap().map(|c| c.owner).as_deref(), Some("root"));
    assert!(store.configs(Some("heat"), 10).await.unwrap().is_empty());
    assert_eq!(ids(store.api_tokens(None).await.unwrap()), ["080808080808"]);
    assert!(store.api_tokens(Some("heat")).await.unwrap().is_empty());
    assert_eq!(ids(store.api_tokens(Some("root")).await.unwrap()), ["080808080808"]);
}

/// Writers in parallel tasks: every job and every change lands, none is half-applied.
/// A group is written only over the revision it was read with: a write made on an older read
/// (another master's update in between, a retry of a write that landed) is refused and changes
/// nothing; a new group is never written over an existing one.
pub(crate) async fn group_writes_are_guarded_by_their_revision<S: Store>(store: S) {
    use halite_protocol::message::{DeploymentGroup, GroupMember, NewDeploymentGroup};
    let spec: NewDeploymentGroup =
        serde_json::from_value(json!({"config_id": "c1", "servers": ["vm-1"]})).expect("a group spec");
    let group = DeploymentGroup {
        id: "g1".into(),
        config_id: "c1".into(),
        action: "CREATE".into(),
        status: status::IN_PROGRESS.into(),
        status_reason: String::new(),
        rollout: halite_protocol::message::RolloutStatus::new(Default::default()),
        members: vec![GroupMember { server_id: "vm-1".into(), deployment_id: None, status: status::QUEUED.into() }],
        creation_time: String::new(),
    };
    let new = crate::GroupRecord {
        group,
        spec,
        principal: "heat".into(),
        owner: "m1".into(),
        starting: BTreeMap::new(),
        revision: 0,
    };
    assert!(store.put_group(&new, 1).await.expect("insert"), "a new group is written");
    assert!(!store.put_group(&new, 2).await.expect("insert again"), "never over an existing one");
    let read = store.group("g1").await.expect("read").expect("stored");
    assert_eq!(read.revision, 1);
    // Two writers read revision 1; the first write wins, the second is refused.
    let mut first = read.clone();
    first.group.status_reason = "first".into();
    let mut second = read.clone();
    second.group.status_reason = "second".into();
    assert!(store.put_group(&first, 3).await.expect("first"));
    assert!(!store.put_group(&second, 4).await.expect("second"), "written since it was read");
    let read = store.group("g1").await.expect("read").expect("stored");
    assert_eq!((read.group.status_reason.as_str(), read.revision), ("first", 2));
    assert_eq!(store.open_groups().await.expect("open")[0].revision, 2, "open groups carry their revision");
}

pub(crate) async fn concurrent_writers<S: Store + Clone>(store: S) {
    let mut tasks = Vec::new();
    for writer in 0..8u64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..25u64 {
                let jid = format!("2026112200000{writer:02}{n:05}");
                let minions: Vec<(String, MinionJobState)> =
                    (0..3).map(|m| (format!("m{m}"), MinionJobState::Sent)).collect();
                store.insert_job(&job(&jid, writer * 100 + n), &minions).await.expect("insert");
                let changes: Vec<StateChange> = (0..3)
                    .map(|m| {
                        let minion = format!("m{m}");
                        change(&jid, &minion, MinionJobState::Returned, Some(ret(&jid, &minion, "ok")), false)
                    })
                    .collect();
                store.set_states(&changes).await.expect("states");
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer");
    }
    let all = store.jobs(None, 1_000, true).await.unwrap();
    assert_eq!(all.len(), 200);
    assert!(all.iter().all(|l| l.summary.states.get(&MinionJobState::Returned) == Some(&3)));
    assert!(store.unfinished_jobs().await.unwrap().is_empty());
    assert_eq!(store.last_jid().await.unwrap().as_deref(), Some("20261122000000700024"));
}
