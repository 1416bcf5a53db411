//! Reads that answer one ask with more than one store call: the keys another master changed,
//! a job with the returns of its ended slots, the gateway tokens that no longer grant anything,
//! the deployment a `deploy.apply` job's end is for, the jobs a client is shown.
//! The loop makes them (`Master::answer_asks`); they touch nothing but the store.

use std::collections::{BTreeMap, HashMap};

use halite_protocol::message::{status, JobFilter, JobReturn, JobSummary, KeyState};
use halite_transport::PeerId;

use crate::calls::deploy::PushInputs;
use crate::calls::group::GroupAdvancing;
use crate::cluster_jobs::StoredJob;
use crate::core::registry::AcceptedKeys;
use crate::deploy::ending::DeploymentEnding;
use crate::store::{JobListing, JobRecord, Store, StoreError};

/// The accepted keys of `ids`, one read each, or all of them (`None`).
pub(crate) async fn accepted_keys<S: Store>(store: &S, ids: Option<&[String]>) -> Result<AcceptedKeys, StoreError> {
    let Some(ids) = ids else {
        let keys = store.keys().await?;
        let accepted = keys.into_iter().filter(|k| k.state == KeyState::Accepted).map(|k| (k.id, k.public_key));
        return Ok(AcceptedKeys::All(accepted.collect()));
    };
    let mut of = Vec::with_capacity(ids.len());
    for id in ids {
        let keys = store.keys_for(id).await?;
        let accepted = keys.into_iter().rfind(|k| k.state == KeyState::Accepted);
        of.push((id.clone(), accepted.map(|k| k.public_key)));
    }
    Ok(AcceptedKeys::Of(of))
}

/// Job `jid` if it is stored, with the returns of its ended slots: none read when none ended,
/// nor for a job `refused` refuses (it is not taken up: reading more of it is work its writer
/// could make fail).
pub(crate) async fn job_with_returns<S: Store>(
    store: &S,
    jid: &str,
    refused: impl Fn(&JobRecord) -> bool,
) -> Result<Option<StoredJob>, StoreError> {
    let Some((record, states)) = store.live_job(jid).await? else { return Ok(None) };
    if refused(&record) {
        return Ok(Some(StoredJob { record, states, returns: HashMap::new() }));
    }
    let ended: Vec<String> = states.iter().filter(|(_, state)| state.is_final()).map(|(m, _)| m.clone()).collect();
    let returns = if ended.is_empty() { HashMap::new() } else { returns_of(store, jid, &ended).await? };
    Ok(Some(StoredJob { record, states, returns }))
}

/// The returns of `minions`' slots of job `jid`, by minion (no query for none).
pub(crate) async fn returns_of<S: Store>(
    store: &S,
    jid: &str,
    minions: &[String],
) -> Result<HashMap<String, JobReturn>, StoreError> {
    if minions.is_empty() {
        return Ok(HashMap::new());
    }
    Ok(store.returns_of(jid, minions).await?.into_iter().collect())
}

/// Of the sessions' tokens, those that grant nothing any more (revoked, expired) at `now_ms`.
pub(crate) async fn tokens_gone<S: Store>(
    store: &S,
    tokens: &[(PeerId, [u8; 32])],
    now_ms: u64,
) -> Result<Vec<PeerId>, StoreError> {
    let mut gone = Vec::new();
    for (peer, hash) in tokens {
        if store.api_token_grant(hash, now_ms).await?.is_none() {
            gone.push(*peer);
        }
    }
    Ok(gone)
}

/// The jobs published from `since_ms` (wall time) on that `missed` says this master missed,
/// newest first, at most `max`; and whether there were more.
pub(crate) async fn jobs_missed<S: Store>(
    store: &S,
    since_ms: u64,
    max: usize,
    missed: impl Fn(&str) -> bool,
) -> Result<(Vec<String>, bool), StoreError> {
    const PAGE: u32 = 500;
    let first = halite_protocol::time::compact_utc(since_ms.saturating_mul(1_000));
    let mut found: Vec<String> = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let page = store.jobs(before.as_deref(), PAGE, false).await?;
        for listing in &page {
            let jid = &listing.summary.jid;
            if *jid < first {
                return Ok((found, false));
            }
            if missed(jid) {
                found.push(jid.clone());
                if found.len() == max {
                    return Ok((found, true));
                }
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE as usize => before = Some(last.summary.jid.clone()),
            _ => return Ok((found, false)),
        }
    }
}

/// The newest `limit` jobs that `shown` keeps (it may lay live states over a listing first),
/// with `filter.until_ms` and `filter.since_ms` bounding the jids read. Without a filter, for a
/// principal that sees every job (`sees_all`), one page is read. Otherwise pages are read until
/// `limit` jobs are kept, the jobs grow older than `since_ms`, or a bounded number of pages is
/// read: a principal that sees few jobs gets fewer, not a stall.
pub(crate) async fn jobs_shown<S: Store>(
    store: &S,
    limit: u32,
    filter: &JobFilter,
    sees_all: bool,
    mut shown: impl FnMut(&mut JobListing) -> bool,
) -> Result<Vec<JobSummary>, StoreError> {
    const PAGE: u32 = 500;
    const MAX_PAGES: usize = 20;
    if sees_all && filter.is_empty() {
        let page = store.jobs(None, limit, false).await?;
        return Ok(page.into_iter().filter_map(|mut listing| shown(&mut listing).then_some(listing.summary)).collect());
    }
    let mut out = Vec::new();
    // Jids begin with their publication time: the newest job published before `until` is the
    // first one below that time's jid.
    let mut before: Option<String> =
        filter.until_ms.map(|until| halite_protocol::time::compact_utc(until.saturating_mul(1000)));
    for _ in 0..MAX_PAGES {
        let page = store.jobs(before.as_deref(), PAGE, !sees_all).await?;
        let full = page.len() == PAGE as usize;
        before = page.last().map(|l| l.summary.jid.clone());
        for mut listing in page {
            if filter.since_ms.is_some_and(|since| listing.summary.created_at_ms < since) {
                return Ok(out);
            }
            if shown(&mut listing) {
                out.push(listing.summary);
                if out.len() == limit as usize {
                    return Ok(out);
                }
            }
        }
        if !full {
            break;
        }
    }
    Ok(out)
}

/// What pushing a deployment needs read: its config, and whether anyone is enrolling as its
/// server (a DELETE's job waits the same either way: not read).
pub(crate) async fn push_inputs<S: Store>(
    store: &S,
    config_id: &str,
    server: &str,
    action: &str,
    now_ms: u64,
) -> Result<PushInputs, StoreError> {
    let config = store.config(config_id).await?;
    let server_unknown = action != "DELETE"
        && store.keys_for(server).await?.is_empty()
        && !store.token_outstanding(server, now_ms).await?;
    Ok(PushInputs { config, server_unknown })
}

/// A deployment group to advance, with the status of each member's deployment in flight
/// (none read for a group no longer in progress).
pub(crate) async fn group_advancing<S: Store>(store: &S, id: &str) -> Result<Option<GroupAdvancing>, StoreError> {
    let Some(record) = store.group(id).await? else { return Ok(None) };
    let (mut statuses, mut starts, mut jids) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    if record.group.status == status::IN_PROGRESS {
        for member in &record.group.members {
            let Some(deployment) = &member.deployment_id else { continue };
            if member.status == status::QUEUED {
                if let Some(read) = store.deployment(deployment).await? {
                    jids.insert(deployment.clone(), read.jid);
                }
                continue;
            }
            if member.status != status::IN_PROGRESS {
                continue;
            }
            let read = store.deployment(deployment).await?;
            if record.starting.contains_key(&member.server_id) {
                starts.insert(member.server_id.clone(), read.map(|d| (d.deployment.status, d.jid)));
            } else {
                statuses.insert(deployment.clone(), read.map(|d| d.deployment.status));
            }
        }
    }
    Ok(Some(GroupAdvancing { record, statuses, starts, jids }))
}

/// The deployment `id` (or, unknown here, the one in progress on job `jid`), as stored; while it
/// still waits on job `jid` (in progress on it), with what the end needs: for a job that
/// `signalled`, its config's outputs; for one that expired after `short_wait_ms`, whether it
/// waited only that long and the server still has no key. `None` when there is no such
/// deployment.
pub(crate) async fn deployment_ending<S: Store>(
    store: &S,
    jid: &str,
    id: Option<&str>,
    signalled: bool,
    short_wait_ms: Option<u64>,
) -> Result<Option<DeploymentEnding>, StoreError> {
    let found = match id {
        Some(id) => store.deployment(id).await?,
        None => store.deployment_waiting_on(jid).await?,
    };
    let Some(record) = found else { return Ok(None) };
    let waits = record.jid == jid && record.deployment.status == status::IN_PROGRESS;
    let outputs = match signalled && waits {
        true => store.config(&record.deployment.config_id).await?.map(|c| c.config.outputs).unwrap_or_default(),
        false => Vec::new(),
    };
    let never_enrolled = match short_wait_ms.filter(|_| waits) {
        Some(short) => match store.live_job(jid).await? {
            Some((job, _)) => job.ttl_ms == short && store.keys_for(&record.deployment.server_id).await?.is_empty(),
            None => false,
        },
        None => false,
    };
    Ok(Some(DeploymentEnding { record, outputs, never_enrolled }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{SqliteStore, StateChange};
    use halite_protocol::message::MinionJobState;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
    }

    /// A job is read with the returns of its ended slots, unless it is refused: then nothing
    /// more of it is read.
    #[test]
    fn a_job_is_read_with_its_returns_unless_refused() {
        rt().block_on(async {
            let store = SqliteStore::in_memory().await.expect("store");
            let job = crate::store::test_job("20261127000000000001", 1_000);
            let states = [("web1".to_owned(), MinionJobState::Sent), ("web2".to_owned(), MinionJobState::Sent)];
            store.insert_job(&job, &states).await.expect("insert");
            let ret = JobReturn { minion: "web1".into(), ..crate::sim::ret(&job.jid) };
            let change = StateChange {
                jid: job.jid.clone(),
                minion: "web1".into(),
                state: MinionJobState::Returned,
                ret: Some(ret.clone()),
                at_ms: 2_000,
                late: false,
            };
            store.set_states(&[change]).await.expect("states");

            let read = job_with_returns(&store, &job.jid, |_| false).await.expect("read").expect("stored");
            assert_eq!(read.returns.get("web1"), Some(&ret));
            let refused = job_with_returns(&store, &job.jid, |_| true).await.expect("read").expect("stored");
            assert!(refused.returns.is_empty(), "nothing more read of a refused job");
            assert_eq!(refused.states.len(), 2);
            assert!(job_with_returns(&store, "20261127000000000002", |_| false).await.expect("read").is_none());
        });
    }
}
