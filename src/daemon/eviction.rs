//! The daemon's side of the eviction report: each server's `maxmemory-policy` as the
//! `redis_eviction_risk` WARN line and the `leaderd_redis_eviction_risk` gauge.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::daemon::metrics::Metrics;
use crate::eviction::EvictionPolicy;

/// Follows every server's policy until `stop`: a WARN line at every read of a policy other
/// than `noeviction` (start and each reconnect), the gauge 1 while any server is at risk.
pub(crate) fn watch_eviction(
    policies: Vec<watch::Receiver<Option<EvictionPolicy>>>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    metrics.set_eviction_risk(false);
    let risky = Arc::new(Mutex::new(vec![false; policies.len()]));
    for (i, mut rx) in policies.into_iter().enumerate() {
        let (metrics, risky, stop) = (metrics.clone(), risky.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let seen = rx.borrow_and_update().clone();
                if let Some(policy) = seen {
                    report(&policy);
                    let mut risky = risky.lock().expect("eviction lock");
                    risky[i] = policy.at_risk();
                    metrics.set_eviction_risk(risky.iter().any(|r| *r));
                }
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { return },
                    _ = stop.cancelled() => return,
                }
            }
        });
    }
}

fn report(policy: &EvictionPolicy) {
    if policy.at_risk() {
        tracing::warn!(
            event = "redis_eviction_risk",
            server = %policy.server,
            policy = %policy.policy,
            can_lose = policy.can_lose(),
            "Redis {} has maxmemory-policy {}: it can evict {}; set maxmemory-policy noeviction",
            policy.server,
            policy.policy,
            policy.can_lose()
        );
    } else {
        tracing::debug!(server = %policy.server, "Redis {} has maxmemory-policy noeviction", policy.server);
    }
}
