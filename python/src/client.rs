//! `halite._native.NativeClient`: one SDK client, shared by every thread and task of the
//! Python process that holds it.

use std::sync::{Arc, Mutex, PoisonError};

use halite_client::{Client, ClientError};
use pyo3::prelude::*;

use crate::connect::ConnectOptions;
use crate::events::NativeEvents;
use crate::{calls, errors, runtime};

/// A connection to a master. `close()` ends it for every holder; calls after that fail with
/// `DisconnectedError`.
#[pyclass(frozen, module = "halite._native")]
pub(crate) struct NativeClient {
    client: Mutex<Option<Client>>,
}

impl NativeClient {
    fn client(&self) -> PyResult<Client> {
        let client = self.client.lock().unwrap_or_else(PoisonError::into_inner).clone();
        client.ok_or_else(|| errors::to_py(ClientError::Disconnected("the client was closed".into())))
    }
}

async fn connect(options: String) -> PyResult<NativeClient> {
    let options: ConnectOptions =
        serde_json::from_str(&options).map_err(|e| errors::bad_argument(format!("connect: {e}")))?;
    let config = options.into_config().map_err(errors::to_py)?;
    let client = Client::connect(config).await.map_err(errors::to_py)?;
    Ok(NativeClient { client: Mutex::new(Some(client)) })
}

async fn run(client: Client, call: calls::Call) -> PyResult<String> {
    calls::execute(&client, call).await.map_err(errors::to_py)
}

fn parse(call: &str) -> PyResult<calls::Call> {
    calls::parse(call).map_err(errors::bad_argument)
}

#[pymethods]
impl NativeClient {
    /// Connects (blocking) with the options of `halite.Client.connect`, as JSON.
    #[staticmethod]
    fn connect(py: Python<'_>, options: String) -> PyResult<NativeClient> {
        runtime::block_on(py, connect(options))
    }

    /// Connects, as an awaitable.
    #[staticmethod]
    fn connect_async(py: Python<'_>, options: String) -> PyResult<Bound<'_, PyAny>> {
        runtime::awaitable(py, connect(options))
    }

    /// Carries out one call (`{"op": ..., ...}` as JSON), blocking; its result as JSON.
    fn call(&self, py: Python<'_>, call: &str) -> PyResult<String> {
        let (client, call) = (self.client()?, parse(call)?);
        runtime::block_on(py, run(client, call))
    }

    /// `call`, as an awaitable.
    fn call_async<'py>(&self, py: Python<'py>, call: &str) -> PyResult<Bound<'py, PyAny>> {
        let (client, call) = (self.client()?, parse(call)?);
        runtime::awaitable(py, run(client, call))
    }

    /// Subscribes to the events whose tags match any of `patterns` (blocking), resuming after
    /// event id `after` when given.
    #[pyo3(signature = (patterns, after=None))]
    fn subscribe(&self, py: Python<'_>, patterns: Vec<String>, after: Option<String>) -> PyResult<NativeEvents> {
        let client = self.client()?;
        runtime::block_on(py, subscribe(client, patterns, after))
    }

    /// `subscribe`, as an awaitable.
    #[pyo3(signature = (patterns, after=None))]
    fn subscribe_async<'py>(
        &self,
        py: Python<'py>,
        patterns: Vec<String>,
        after: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client()?;
        runtime::awaitable(py, subscribe(client, patterns, after))
    }

    /// The address of the master the client is connected to (it changes on failover).
    fn master_addr(&self) -> PyResult<String> {
        Ok(self.client()?.master_addr())
    }

    /// Ends the connection (once every event stream of it is dropped too).
    fn close(&self) {
        self.client.lock().unwrap_or_else(PoisonError::into_inner).take();
    }
}

async fn subscribe(client: Client, patterns: Vec<String>, after: Option<String>) -> PyResult<NativeEvents> {
    let stream = match after {
        Some(after) => client.subscribe_after(patterns, &after).await,
        None => client.subscribe(patterns).await,
    }
    .map_err(errors::to_py)?;
    Ok(NativeEvents { stream: Arc::new(tokio::sync::Mutex::new(Some(stream))), closed: Arc::default() })
}
