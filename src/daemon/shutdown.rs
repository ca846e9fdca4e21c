//! Signals: SIGTERM, SIGINT, SIGHUP and SIGQUIT cancel one shutdown token (README "Signals"),
//! SIGUSR1 asks the leader to yield.

use futures::StreamExt;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1};
use signal_hook_tokio::Signals;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The signals that end leaderd cleanly.
pub(crate) const SHUTDOWN: [i32; 4] = [SIGTERM, SIGINT, SIGHUP, SIGQUIT];

/// What the signal handler drives.
pub(crate) struct SignalInputs {
    /// Cancelled at the first SIGTERM, SIGINT, SIGHUP or SIGQUIT (a closing terminal must not
    /// end a term without a release); later ones change nothing.
    pub shutdown: CancellationToken,
    /// One message per SIGUSR1; it never closes while the process runs (a closed channel
    /// would read as an endless stream of yields to a careless reader).
    pub yields: mpsc::Receiver<()>,
}

/// Installs the handlers and spawns the task that forwards signals.
///
/// # Errors
/// When the handlers cannot be registered.
pub(crate) fn install() -> std::io::Result<SignalInputs> {
    let mut signals = Signals::new(SHUTDOWN.into_iter().chain([SIGUSR1]))?;
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
                _ if token.is_cancelled() => {}
                _ => {
                    token.cancel();
                    tracing::info!(event = "shutdown_requested", signal, "shutting down");
                }
            }
        }
    });
    Ok(SignalInputs { shutdown, yields })
}
