//! `halite._native.NativeEvents`: one subscription's events.

use std::sync::Arc;
use std::time::Duration;

use halite_client::{ClientError, EventStream};
use pyo3::prelude::*;

use crate::{errors, runtime};

/// The events of one subscription, each as JSON text (`{"tag", "data", "id"}`).
#[pyclass(frozen, module = "halite._native")]
pub(crate) struct NativeEvents {
    /// `None` once closed. Locked while one reader waits: readers take turns.
    pub(crate) stream: Arc<tokio::sync::Mutex<Option<EventStream>>>,
    /// Wakes a reader waiting in `next` when the stream is closed.
    pub(crate) closed: Arc<tokio::sync::Notify>,
}

/// The next event of `stream` as JSON; `None` when `limit` passed first.
async fn next(
    stream: Arc<tokio::sync::Mutex<Option<EventStream>>>,
    closed: Arc<tokio::sync::Notify>,
    limit: Option<Duration>,
) -> PyResult<Option<String>> {
    let was_closed = || errors::to_py(ClientError::Disconnected("the subscription was closed".into()));
    let mut guard = stream.lock().await;
    let Some(events) = guard.as_mut() else { return Err(was_closed()) };
    let read = async {
        match limit {
            None => Some(events.next_event().await),
            Some(limit) => tokio::time::timeout(limit, events.next_event()).await.ok(),
        }
    };
    let event = tokio::select! {
        event = read => event,
        () = closed.notified() => {
            guard.take();
            return Err(was_closed());
        }
    };
    let Some(event) = event else { return Ok(None) };
    let event = event.map_err(errors::to_py)?;
    serde_json::to_string(&event).map(Some).map_err(|e| errors::bad_argument(e.to_string()))
}

#[pymethods]
impl NativeEvents {
    /// The next event (blocking), or `None` if `timeout` seconds pass first.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<String>> {
        let limit = timeout
            .map(|secs| Duration::try_from_secs_f64(secs).map_err(|_| errors::bad_argument("timeout must be >= 0")))
            .transpose()?;
        runtime::block_on(py, next(self.stream.clone(), self.closed.clone(), limit))
    }

    /// The next event, as an awaitable (cancelling it loses no event).
    fn next_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        runtime::awaitable(py, next(self.stream.clone(), self.closed.clone(), None))
    }

    /// Ends the subscription; a reader waiting in `next` gets `DisconnectedError`.
    fn close(&self) {
        // A waiting reader holds the lock: it is woken and drops the stream itself.
        self.closed.notify_one();
        if let Ok(mut stream) = self.stream.try_lock() {
            stream.take();
        }
    }
}
