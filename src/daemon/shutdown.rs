//! Signals: SIGTERM, SIGINT, SIGHUP and SIGQUIT cancel one shutdown token (README "Signals"),
//! SIGUSR1 asks the leader to yield; one that arrives while `run` starts is kept for later.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1};
use signal_hook::SigId;
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

/// The signals caught from the first moment of `run` until [`install`]: without it, one that
/// arrives while the configuration is read would end leaderd by the signal's default action
/// (no release, no `stopped` file).
pub(crate) struct Early {
    stop: Arc<AtomicBool>,
    yield_asked: Arc<AtomicBool>,
    ids: Vec<SigId>,
}

/// Starts catching the stop signals and SIGUSR1, to be acted on once [`install`] runs.
///
/// # Errors
/// When a handler cannot be registered.
pub(crate) fn catch_early() -> std::io::Result<Early> {
    let stop = Arc::new(AtomicBool::new(false));
    let yield_asked = Arc::new(AtomicBool::new(false));
    let mut ids = Vec::new();
    for signal in SHUTDOWN {
        ids.push(signal_hook::flag::register(signal, stop.clone())?);
    }
    ids.push(signal_hook::flag::register(SIGUSR1, yield_asked.clone())?);
    Ok(Early {
        stop,
        yield_asked,
        ids,
    })
}

/// Installs the handlers and spawns the task that forwards signals, beginning with those
/// `early` caught.
///
/// # Errors
/// When the handlers cannot be registered.
pub(crate) fn install(early: Early) -> std::io::Result<SignalInputs> {
    let mut signals = Signals::new(SHUTDOWN.into_iter().chain([SIGUSR1]))?;
    // From here the handlers above see every signal: what came before is read once.
    for id in early.ids {
        signal_hook::low_level::unregister(id);
    }
    let shutdown = CancellationToken::new();
    if early.stop.load(Ordering::SeqCst) {
        shutdown.cancel();
        tracing::info!(
            event = "shutdown_requested",
            "a stop signal while starting: shutting down"
        );
    }
    let (yield_tx, yields) = mpsc::channel(4);
    if early.yield_asked.load(Ordering::SeqCst) {
        let _ = yield_tx.try_send(());
    }
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
