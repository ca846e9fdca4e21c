//! When a proxied connection is over although neither side closed it: no bytes either way for
//! `proxy.idle_timeout`, or one side closed and the other had [`HALF_CLOSE_LIMIT`] to finish
//! (docs/work.md, "Sending traffic to the leader").

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How long the other side has once one side of a connection has closed.
pub(crate) const HALF_CLOSE_LIMIT: Duration = Duration::from_secs(60);

/// No half-close yet.
const OPEN: u64 = u64::MAX;

/// What one connection's client stream saw, in milliseconds since the connection began;
/// written by the copy as bytes pass, read by [`Activity::expired`].
pub(crate) struct Activity {
    start: Instant,
    last_ms: AtomicU64,
    half_closed_ms: AtomicU64,
    half_closed: Notify,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            half_closed_ms: AtomicU64::new(OPEN),
            half_closed: Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Bytes passed.
    pub(crate) fn moved(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// One side finished sending (the client's end of file, or the upstream's passed on).
    pub(crate) fn half_closed(&self) {
        let now = self.now_ms();
        let first = self
            .half_closed_ms
            .compare_exchange(OPEN, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        if first {
            self.half_closed.notify_one();
        }
    }

    /// Resolves when the connection must close: `idle` (None: never) without bytes either
    /// way, or [`HALF_CLOSE_LIMIT`] after the first half-close, bytes passing or not.
    pub(crate) async fn expired(&self, idle: Option<Duration>) {
        let limit = HALF_CLOSE_LIMIT.as_millis() as u64;
        let idle = idle.map(|d| d.as_millis() as u64);
        loop {
            let half = self.half_closed_ms.load(Ordering::Relaxed);
            let idle_due = idle.map(|d| self.last_ms.load(Ordering::Relaxed).saturating_add(d));
            let half_due = (half != OPEN).then(|| half.saturating_add(limit));
            let due = match (idle_due, half_due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let now = self.now_ms();
            match due {
                Some(due) if now >= due => return,
                Some(due) => {
                    let at = self.start + Duration::from_millis(due);
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = self.half_closed.notified() => {}
                    }
                }
                None => self.half_closed.notified().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A half-close at 5 s with bytes every second after it: the idle timeout (10 s) never
    /// passes, the half-close limit does, at 65 s.
    #[tokio::test(start_paused = true)]
    async fn moving_bytes_postpones_the_idle_end_but_not_the_half_close_one() {
        let a = Activity::new();
        let idle = Some(Duration::from_secs(10));
        let start = Instant::now();
        let ended = async {
            a.expired(idle).await;
            start.elapsed()
        };
        let traffic = async {
            for _ in 0..120 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                a.moved();
                if start.elapsed() >= Duration::from_secs(5) {
                    a.half_closed();
                }
            }
            std::future::pending::<Duration>().await
        };
        let elapsed = tokio::select! { e = ended => e, e = traffic => e };
        assert_eq!(elapsed.as_secs(), 65, "{elapsed:?}");
    }

    /// Without bytes after the half-close, the idle timeout ends it first.
    #[tokio::test(start_paused = true)]
    async fn a_quiet_half_closed_connection_ends_at_the_idle_timeout() {
        let a = Activity::new();
        let start = Instant::now();
        a.half_closed();
        a.expired(Some(Duration::from_secs(10))).await;
        assert_eq!(start.elapsed().as_secs(), 10);
    }
}
