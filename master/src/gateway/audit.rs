//! `GET /v1/audit`: the audit trail as `halite audit list` reads it, under the token's
//! principal (a tenant's principal sees its tenant's records alone, root and administrators
//! all). A page of records in store order after a cursor, as JSON; or, to a reader that asks
//! for `text/event-stream`, every record from the cursor on and then each new one as it is
//! appended, resumable with `Last-Event-ID`.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::Query;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use halite_protocol::audit::AuditRecord;
use halite_protocol::message::{AuditFilter, RequestBody, ResponseBody};
use serde::Deserialize;
use serde_json::json;

use super::auth::Authed;
use super::local::{CallError, LocalSession};
use super::routes::{ApiError, ApiResult, Commands};

/// Records in one page when the query names no limit.
const DEFAULT_PAGE: u32 = 100;

/// Records a stream asks for at a time.
const STREAM_PAGE: u32 = 1000;

/// How long a stream that has caught up waits before it looks for new records.
const STREAM_POLL: Duration = Duration::from_secs(1);

/// The routes.
pub(super) fn routes() -> Router<Commands> {
    Router::new().route("/v1/audit", get(audit))
}

/// `GET /v1/audit`'s query: the filter of `halite audit list`, a cursor and a page size.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    principal: Option<String>,
    tenant: Option<String>,
    minion: Option<String>,
    action: Option<String>,
    decision: Option<String>,
    since_ms: Option<u64>,
    until_ms: Option<u64>,
    /// Also the records of reads of the trail (`audit_list`).
    #[serde(default)]
    reads: bool,
    /// Only records after this id (the `next` of the page before).
    after: Option<i64>,
    limit: Option<u32>,
}

async fn audit(Authed(mut session): Authed, headers: HeaderMap, Query(q): Query<AuditQuery>) -> ApiResult {
    let AuditQuery { principal, tenant, minion, action, decision, since_ms, until_ms, reads, after, limit } = q;
    let filter = AuditFilter { principal, tenant, minion, action, decision, since_ms, until_ms, reads };
    if wants_stream(&headers) {
        // A reconnecting EventSource sends the id of the last record it saw.
        let resumed = match headers.get("last-event-id") {
            Some(id) => Some(id.to_str().ok().and_then(|id| id.trim().parse::<i64>().ok()).ok_or_else(|| {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_request", "Last-Event-ID: not an audit record id".into())
            })?),
            None => None,
        };
        return stream(session, filter, resumed.or(after)).await;
    }
    let records = page(&mut session, &filter, after, limit.unwrap_or(DEFAULT_PAGE)).await?;
    // The cursor for the next page: the last record's id, or the same cursor when none came.
    let next = records.last().map(|record| record.id).or(after);
    Ok(Json(json!({ "records": records, "next": next })).into_response())
}

/// Whether the reader asked for server-sent events.
fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|kind| kind.split(';').next().is_some_and(|kind| kind.trim().eq_ignore_ascii_case("text/event-stream")))
}

async fn page(
    session: &mut LocalSession,
    filter: &AuditFilter,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<AuditRecord>, CallError> {
    match session.request(RequestBody::AuditList { filter: filter.clone(), after, limit }).await? {
        ResponseBody::Audit(records) => Ok(records),
        _ => Err(CallError::Unavailable("unexpected answer from the master".into())),
    }
}

/// The trail from `after` on, then each record as it is appended. The first page is asked for
/// before the `200`, so a refusal is an error answer, not a stream; the stream ends, after a last `error` event, when the session's authorisation does.
async fn stream(mut session: LocalSession, filter: AuditFilter, after: Option<i64>) -> ApiResult {
    let first = page(&mut session, &filter, after, STREAM_PAGE).await.map_err(ApiError::from)?;
    struct Follow {
        session: LocalSession,
        filter: AuditFilter,
        after: Option<i64>,
        ready: std::collections::VecDeque<AuditRecord>,
        /// The last page was full: ask again at once rather than after a pause.
        more: bool,
    }
    let more = first.len() == STREAM_PAGE as usize;
    let follow = Follow { session, filter, after, ready: first.into(), more };
    let events = futures_util::stream::unfold(Some(follow), |follow| async move {
        let mut follow = follow?;
        loop {
            if let Some(record) = follow.ready.pop_front() {
                follow.after = Some(record.id);
                let data = serde_json::to_string(&record).unwrap_or_default();
                let event = SseEvent::default().id(record.id.to_string()).event("audit").data(data);
                return Some((Ok::<_, Infallible>(event), Some(follow)));
            }
            if !follow.more {
                tokio::time::sleep(STREAM_POLL).await;
            }
            match page(&mut follow.session, &follow.filter, follow.after, STREAM_PAGE).await {
                Ok(records) => {
                    follow.more = records.len() == STREAM_PAGE as usize;
                    follow.ready = records.into();
                }
                Err(ended) => {
                    let error = ApiError::from(ended);
                    let event = SseEvent::default().event("error").data(error.body().to_string());
                    // The last event: the stream ends after it.
                    return Some((Ok(event), None));
                }
            }
        }
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_what_the_accept_header_asks_for() {
        let with = |accept: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, accept.parse().unwrap());
            wants_stream(&headers)
        };
        assert!(with("text/event-stream"));
        assert!(with("application/json, Text/Event-Stream;q=0.5"));
        assert!(!with("application/json"));
        assert!(!with("text/event-streamer"));
        assert!(!wants_stream(&HeaderMap::new()));
    }

    #[test]
    fn the_query_is_the_cli_filter_and_nothing_else() {
        let q: AuditQuery = serde_json::from_value(json!({ "tenant": "acme", "after": 7, "limit": 5 })).unwrap();
        assert_eq!((q.tenant.as_deref(), q.after, q.limit), (Some("acme"), Some(7), Some(5)));
        assert!(serde_json::from_value::<AuditQuery>(json!({ "chain": "x" })).is_err());
    }
}
