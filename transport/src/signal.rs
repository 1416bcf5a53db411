//! Shutdown on SIGTERM or SIGINT, for the daemons' `main`.

/// Completes when the process receives SIGTERM or SIGINT (never, if the handlers cannot be
/// installed).
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
