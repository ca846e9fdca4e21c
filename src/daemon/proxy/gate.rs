//! The barrier between the old leader's proxy and its release: the step-down closes the
//! term's local connections and waits until they are gone, before the lease is released.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// The longest a step-down waits for local connections to close.
const DRAIN_LIMIT: Duration = Duration::from_secs(1);

/// Shared by the proxy and the step-down path. Cheap to clone.
#[derive(Clone)]
pub(crate) struct LocalGate {
    /// Terms up to this fence are over: their local connections must close.
    closed_up_to: Arc<watch::Sender<u64>>,
    /// Local connections still open.
    open: Arc<watch::Sender<usize>>,
    /// With `on_change: keep` local connections are left open.
    close: bool,
    /// Before this instant the observed leader's claim may still hold; after it, surely not.
    remote_until: Arc<watch::Sender<Option<Instant>>>,
    /// Taken off the observed expiry: two command timeouts (the observation's own age) and
    /// the clock drift allowance, so `remote_until` is never after the leader's claim end.
    margin: Duration,
}

/// Held by each local connection; its drop counts the connection as closed.
pub(crate) struct LocalGuard(Arc<watch::Sender<usize>>);

impl Drop for LocalGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl LocalGate {
    pub(crate) fn new(close: bool, margin: Duration) -> Self {
        LocalGate {
            closed_up_to: Arc::new(watch::channel(0).0),
            open: Arc::new(watch::channel(0).0),
            close,
            remote_until: Arc::new(watch::channel(None).0),
            margin,
        }
    }

    /// A follower observed the lease with `remaining` until it expires in Redis.
    pub(crate) fn leader_seen(&self, remaining: Option<Duration>) {
        let until = remaining.map(|r| {
            (Instant::now() + r)
                .checked_sub(self.margin)
                .unwrap_or_else(Instant::now)
        });
        self.remote_until.send_replace(until);
    }

    /// Follows [`leader_seen`](Self::leader_seen).
    pub(crate) fn remote_until(&self) -> watch::Receiver<Option<Instant>> {
        self.remote_until.subscribe()
    }

    /// A new local connection for term `fence`, unless that term is over.
    pub(crate) fn enter(&self, fence: u64) -> Option<LocalGuard> {
        if *self.closed_up_to.borrow() >= fence {
            return None;
        }
        self.open.send_modify(|n| *n += 1);
        Some(LocalGuard(self.open.clone()))
    }

    /// Resolves when term `fence` is over and its connections must close.
    pub(crate) async fn ended(&self, fence: u64) {
        let mut rx = self.closed_up_to.subscribe();
        if !self.close {
            return std::future::pending().await;
        }
        let _ = rx.wait_for(|c| *c >= fence).await;
    }

    /// Term `fence` is over: no new local connection for it, and (with `close`) waits, at
    /// most [`DRAIN_LIMIT`], until the open ones have closed.
    pub(crate) async fn end_term(&self, fence: u64) {
        self.closed_up_to.send_modify(|c| *c = (*c).max(fence));
        if !self.close {
            return;
        }
        let mut open = self.open.subscribe();
        let drained = tokio::time::timeout(DRAIN_LIMIT, open.wait_for(|n| *n == 0)).await;
        if drained.is_err() {
            let left = *self.open.borrow();
            tracing::warn!(
                event = "proxy_drain_slow",
                open = left,
                "{left} proxied connections still closing at the release"
            );
        }
    }
}
