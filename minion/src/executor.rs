//! Runs one job: looks the function up, calls it under the job's timeout, and turns whatever
//! happens into a [`JobReturn`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_modules::{Args, Context, ModuleError, Registry};
use halite_protocol::message::{Job, JobReturn, Outcome};
use serde_json::json;
use tokio::sync::oneshot;

/// Runs `job`; completes early (killing the work) on timeout or when `cancel` fires.
pub(crate) async fn execute(
    registry: Arc<Registry>,
    cx: Context,
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
    let Some(function) = registry.get(&job.function) else {
        let error = ModuleError::UnknownFunction(job.function.clone());
        return finish(false, 1, json!({ "error": error.to_string() }), false, Outcome::Refused);
    };
    let call = function.call(Args::new(job.args.clone(), job.kwargs.clone()), &cx);
    let timeout = async {
        match job.timeout_ms {
            0 => std::future::pending().await,
            ms => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
    };
    tokio::select! {
        result = call => match result {
            Ok(output) => finish(output.retcode == 0, output.retcode, output.value, output.truncated, Outcome::Completed),
            Err(error @ (ModuleError::UnknownFunction(_) | ModuleError::BadArguments(_))) => {
                finish(false, 1, json!({ "error": error.to_string() }), false, Outcome::Refused)
            }
            Err(error) => finish(false, 1, json!({ "error": error.to_string() }), false, Outcome::Completed),
        },
        () = timeout => finish(
            false,
            124,
            json!({ "error": format!("timed out after {} ms; killed", job.timeout_ms) }),
            false,
            Outcome::TimedOut,
        ),
        _ = cancel => finish(false, 130, json!({ "error": "cancelled; killed" }), false, Outcome::Cancelled),
    }
}
