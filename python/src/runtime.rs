//! The process's tokio runtime and the two ways Python waits on it.

use std::future::Future;
use std::time::Duration;

use pyo3::prelude::*;

/// How often a blocking call looks for a pending signal (Ctrl-C) while it waits.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// Two worker threads: the SDK's work is waiting on sockets, and a Heat engine or an API
/// worker process should not grow a thread per core for it. The runtime starts with the first
/// call, not at import, so a process that forks its workers after importing (as OpenStack
/// services do) starts it in each worker.
pub(crate) fn configure() {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2).thread_name("halite-sdk").enable_all();
    pyo3_async_runtimes::tokio::init(builder);
}

/// Runs `work` to its end on the runtime with the GIL released, checking for signals between
/// waits: a `KeyboardInterrupt` raised by a handler abandons the call.
pub(crate) fn block_on<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send,
    T: Send,
{
    let runtime = pyo3_async_runtimes::tokio::get_runtime();
    py.detach(|| {
        runtime.block_on(async {
            let mut work = std::pin::pin!(work);
            loop {
                tokio::select! {
                    done = &mut work => return done,
                    () = tokio::time::sleep(SIGNAL_CHECK) => Python::attach(|py| py.check_signals())?,
                }
            }
        })
    })
}

/// `work` as an asyncio awaitable of the running loop.
pub(crate) fn awaitable<'py, T, F>(py: Python<'py>, work: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    pyo3_async_runtimes::tokio::future_into_py(py, work)
}
