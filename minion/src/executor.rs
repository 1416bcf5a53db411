//! Runs one job: checks the policy, calls the function under the job's timeout, and turns
//! whatever happens into a [`JobReturn`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_modules::{Args, Context, Dispatcher, ModuleError};
use halite_protocol::message::{Job, JobReturn, Outcome, Value};
use serde_json::json;
use tokio::sync::{oneshot, watch};

/// Runs `job` with `base` as the context; completes early (killing the work) on timeout or when
/// `cancel` fires.
pub(crate) async fn execute(
    dispatcher: Arc<Dispatcher>,
    base: Context,
    job: Job,
    cancel: oneshot::Receiver<()>,
) -> JobReturn {
    let started = Instant::now();
    let finish = |success: bool, retcode: i32, outputs, truncated, outcome| JobReturn {
        jid: job.jid.clone(),
        minion: String::new(),
        success,
        retcode,
        outputs,
        truncated,
        duration_ms: started.elapsed().as_millis() as u64,
        outcome,
    };
    let mut kwargs = job.kwargs.clone();
    // `test=true` is a property of the call, as in Salt, not an argument of the function.
    let test = match kwargs.remove("test") {
        None => false,
        Some(Value::Bool(b)) => b,
        // As Salt's command line writes it (`test=True`).
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
        Some(other) => {
            let error = format!("test must be true or false, not {other}");
            return finish(false, 1, json!({ "error": error }), false, Outcome::Refused);
        }
    };
    let timeout = (job.timeout_ms > 0).then(|| Duration::from_millis(job.timeout_ms));
    let (cancel_tx, cancelled) = watch::channel(false);
    let cx = Context {
        test,
        deadline: timeout.map(|t| tokio::time::Instant::now() + t),
        cancelled,
        caller: job.caller.clone(),
        reach: job.reach.as_deref().map(Arc::from),
        dispatcher: Some(dispatcher.clone()),
        ..base
    };
    let call = dispatcher.call(&job.function, Args::new(job.args.clone(), kwargs), &cx);
    let expiry = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        result = call => match result {
            Ok(output) => finish(output.retcode == 0, output.retcode, output.value, output.truncated, Outcome::Completed),
            Err(error @ ModuleError::Denied(_)) => {
                tracing::warn!(function = %job.function, caller = %job.caller, "denied by policy");
                finish(false, 1, json!({ "error": error.to_string() }), false, Outcome::Denied)
            }
            Err(error @ (ModuleError::UnknownFunction(_) | ModuleError::BadArguments(_))) => {
                finish(false, 1, json!({ "error": error.to_string() }), false, Outcome::Refused)
            }
            Err(error) => finish(false, 1, json!({ "error": error.to_string() }), false, Outcome::Completed),
        },
        () = expiry => finish(
            false,
            124,
            json!({ "error": format!("timed out after {} ms; killed", job.timeout_ms) }),
            false,
            Outcome::TimedOut,
        ),
        _ = cancel => {
            let _ = cancel_tx.send(true);
            finish(false, 130, json!({ "error": "cancelled; killed" }), false, Outcome::Cancelled)
        }
    }
}
