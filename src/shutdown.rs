//! Signals: SIGTERM and SIGINT cancel one shutdown token, SIGUSR1 asks the leader to yield.

use futures::StreamExt;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
use signal_hook_tokio::Signals;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What the signal handler drives.
pub struct SignalInputs {
    /// Cancelled at the first SIGTERM or SIGINT.
    pub shutdown: CancellationToken,
    /// One message per SIGUSR1; it never closes while the process runs (a closed channel
    /// would read as an endless stream of yields to a careless reader).
    pub yields: mpsc::Receiver<()>,
}

/// Installs the handlers and spawns the task that forwards signals.
///
/// # Errors
/// When the handlers cannot be registered.
pub fn install() -> std::io::Result<SignalInputs> {
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGUSR1])?;
    let shutdown = CancellationToken::new();
    let (yield_tx, yields) = mpsc::channel(4);
    let token = shutdown.clone();
    // Held for the life of the process, so `yields` never reads as closed.
    std::mem::forget(yield_tx.clone());
    tokio::spawn(async move {
        while let Some(signal) = signals.next().await {
            match signal {
                // Act first, log after: logging must never stand between a signal and its effect.
                SIGUSR1 => {
                    let _ = yield_tx.try_send(());
                    tracing::info!(event = "yield_requested", "SIGUSR1: yielding leadership");
                }
                _ => {
                    token.cancel();
                    tracing::info!(event = "shutdown_requested", signal, "shutting down");
                }
            }
        }
    });
    Ok(SignalInputs { shutdown, yields })
}
