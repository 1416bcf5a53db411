//! Answers too large for one message, sent in parts: a listing is cut between its items so each
//! part encodes within a budget, and the parts are joined back in order by the receiver.

use serde::Serialize;

use super::admin::ResponseBody;
use super::codec::{encoded_len, MAX_VALUES};

/// Most values one part may hold: half the decoder's limit, leaving room for the envelope and
/// for what wraps a part (a job's summary, an update's fields). Every MessagePack value takes
/// at least one byte, so a part of at most this many bytes holds at most this many values:
/// parts are cut by bytes alone, counted without encoding anything.
pub const PART_VALUES: usize = MAX_VALUES / 2;

impl ResponseBody {
    /// Cuts a listing into parts that each encode to at most `budget` bytes and
    /// [`PART_VALUES`] values (a part holds at least one item, so an item larger than that
    /// travels alone). Answers that are not listings, and listings that fit, come back whole.
    pub fn into_parts(self, budget: usize) -> Vec<ResponseBody> {
        let budget = budget.min(PART_VALUES);
        if encoded_len(&self) <= budget {
            return vec![self];
        }
        match self {
            ResponseBody::Keys(items) => split_by_size(items, budget).into_iter().map(ResponseBody::Keys).collect(),
            ResponseBody::Changed(items) => {
                split_by_size(items, budget).into_iter().map(ResponseBody::Changed).collect()
            }
            ResponseBody::Minions(items) => {
                split_by_size(items, budget).into_iter().map(ResponseBody::Minions).collect()
            }
            ResponseBody::Jobs(items) => split_by_size(items, budget).into_iter().map(ResponseBody::Jobs).collect(),
            ResponseBody::Principals(items) => {
                split_by_size(items, budget).into_iter().map(ResponseBody::Principals).collect()
            }
            ResponseBody::Configs(items) => {
                split_by_size(items, budget).into_iter().map(ResponseBody::Configs).collect()
            }
            ResponseBody::Deployments(items) => {
                split_by_size(items, budget).into_iter().map(ResponseBody::Deployments).collect()
            }
            ResponseBody::Items(items) => split_by_size(items, budget).into_iter().map(ResponseBody::Items).collect(),
            ResponseBody::Audit(items) => split_by_size(items, budget).into_iter().map(ResponseBody::Audit).collect(),
            ResponseBody::ApiTokens(items) => {
                split_by_size(items, budget).into_iter().map(ResponseBody::ApiTokens).collect()
            }
            ResponseBody::Tokens(items) => split_by_size(items, budget).into_iter().map(ResponseBody::Tokens).collect(),
            ResponseBody::Job(mut detail) => {
                // The minions are cut; each part repeats the summary. The job's own fields
                // (arguments) ride with the first run of minions when both fit, else alone.
                let minions = std::mem::take(&mut detail.minions);
                let bare = |summary: &super::JobSummary| super::JobDetail {
                    summary: summary.clone(),
                    args: Vec::new(),
                    kwargs: Default::default(),
                    minions: Vec::new(),
                };
                let room = budget.saturating_sub(encoded_len(&bare(&detail.summary)));
                let head = encoded_len(&detail);
                let mut runs = split_by_size(minions, room).into_iter().peekable();
                let mut parts = Vec::new();
                let first_fits = runs.peek().is_some_and(|run| head + encoded_len(run) <= budget);
                if first_fits {
                    detail.minions = runs.next().unwrap_or_default();
                }
                let summary = detail.summary.clone();
                parts.push(ResponseBody::Job(detail));
                for run in runs {
                    parts.push(ResponseBody::Job(super::JobDetail { minions: run, ..bare(&summary) }));
                }
                parts
            }
            whole => vec![whole],
        }
    }

    /// Joins the next part of an answer sent in parts.
    pub fn append(&mut self, next: ResponseBody) -> Result<(), MismatchedPart> {
        match (self, next) {
            (ResponseBody::Keys(a), ResponseBody::Keys(b)) => a.extend(b),
            (ResponseBody::Changed(a), ResponseBody::Changed(b)) => a.extend(b),
            (ResponseBody::Minions(a), ResponseBody::Minions(b)) => a.extend(b),
            (ResponseBody::Jobs(a), ResponseBody::Jobs(b)) => a.extend(b),
            (ResponseBody::Principals(a), ResponseBody::Principals(b)) => a.extend(b),
            (ResponseBody::Configs(a), ResponseBody::Configs(b)) => a.extend(b),
            (ResponseBody::Deployments(a), ResponseBody::Deployments(b)) => a.extend(b),
            (ResponseBody::Items(a), ResponseBody::Items(b)) => a.extend(b),
            (ResponseBody::Audit(a), ResponseBody::Audit(b)) => a.extend(b),
            (ResponseBody::ApiTokens(a), ResponseBody::ApiTokens(b)) => a.extend(b),
            (ResponseBody::Tokens(a), ResponseBody::Tokens(b)) => a.extend(b),
            (ResponseBody::Job(a), ResponseBody::Job(b)) if a.summary.jid == b.summary.jid => {
                a.minions.extend(b.minions)
            }
            _ => return Err(MismatchedPart),
        }
        Ok(())
    }
}

/// A part of an answer that does not continue what came before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the parts of an answer are of different kinds")]
pub struct MismatchedPart;

/// Splits `items` into runs whose encodings sum to at most `budget` bytes, and at most
/// [`PART_VALUES`] (so as many values), one item at least per run.
pub fn split_by_size<T: Serialize>(items: Vec<T>, budget: usize) -> Vec<Vec<T>> {
    let budget = budget.min(PART_VALUES);
    let mut runs = Vec::new();
    let mut run = Vec::new();
    let mut size = 0;
    for item in items {
        let len = encoded_len(&item);
        if !run.is_empty() && size + len > budget {
            runs.push(std::mem::take(&mut run));
            size = 0;
        }
        size += len;
        run.push(item);
    }
    if !run.is_empty() {
        runs.push(run);
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{JobDetail, JobSummary, KeyInfo, KeyState, MinionJob, MinionJobState, Target, TargetKind};

    #[test]
    fn a_listing_is_cut_within_the_budget_and_joins_back() {
        let keys: Vec<KeyInfo> = (0..100)
            .map(|i| KeyInfo { id: format!("web{i}"), state: KeyState::Accepted, fingerprint: "x".repeat(40) })
            .collect();
        let whole = ResponseBody::Keys(keys);
        let parts = whole.clone().into_parts(1000);
        assert!(parts.len() > 5);
        assert!(parts.iter().all(|p| encoded_len(p) <= 1000));
        let mut joined = parts[0].clone();
        for part in &parts[1..] {
            joined.append(part.clone()).unwrap();
        }
        assert_eq!(joined, whole);
        assert_eq!(whole.clone().into_parts(1 << 20), vec![whole]);
    }

    /// 10,000 minions with their grains are a few megabytes but more values than a decoder
    /// takes in one message: cut by values too.
    #[test]
    fn a_listing_of_many_small_items_is_cut_by_values() {
        let keys: Vec<KeyInfo> = (0..150_000)
            .map(|i| KeyInfo { id: format!("m{i}"), state: KeyState::Accepted, fingerprint: String::new() })
            .collect();
        let parts = ResponseBody::Keys(keys).into_parts(16 << 20);
        assert!(parts.len() >= 2);
        for part in &parts {
            let bytes = crate::message::encode(&crate::message::Message::Response(crate::message::Response {
                request_id: 1,
                body: part.clone(),
                more: true,
            }));
            assert!(crate::message::decode(&bytes).is_ok(), "every part decodes");
        }
    }

    #[test]
    fn a_job_is_cut_between_its_minions() {
        let minion = |i: usize| MinionJob {
            minion: format!("m{i}"),
            state: MinionJobState::Returned,
            ret: None,
            late: false,
            away: None,
        };
        let detail = JobDetail {
            summary: JobSummary {
                jid: "1".into(),
                function: "test.ping".into(),
                target: Target { kind: TargetKind::Glob, expr: "*".into() },
                caller: "root".into(),
                created_at_ms: 0,
                states: Default::default(),
                rollout: None,
            },
            args: vec![serde_json::json!("a")],
            kwargs: Default::default(),
            minions: (0..50).map(minion).collect(),
        };
        let parts = ResponseBody::Job(detail.clone()).into_parts(600);
        assert!(parts.len() > 2);
        let mut joined = parts[0].clone();
        for part in &parts[1..] {
            joined.append(part.clone()).unwrap();
        }
        assert_eq!(joined, ResponseBody::Job(detail.clone()));
        assert!(joined.clone().append(ResponseBody::Keys(Vec::new())).is_err());
        // Large arguments travel alone, then the minions.
        let mut heavy = detail.clone();
        heavy.args = vec![serde_json::json!("a".repeat(550))];
        let parts = ResponseBody::Job(heavy.clone()).into_parts(600);
        assert!(matches!(&parts[0], ResponseBody::Job(d) if d.minions.is_empty()));
        let mut joined = parts[0].clone();
        for part in &parts[1..] {
            joined.append(part.clone()).unwrap();
        }
        assert_eq!(joined, ResponseBody::Job(heavy));
    }
}
