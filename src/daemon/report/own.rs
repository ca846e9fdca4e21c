//! What the heartbeats find about this replica's own registry entry (README "Candidates"):
//! refused when the registry is full, or another live process of its identity; each finding
//! logged when it begins (an identity conflict at most once per `lease_duration`) and the
//! `leaderd_identity_conflict` gauge set.

use std::time::Duration;

use tokio::time::Instant;

use crate::daemon::metrics::Metrics;
use crate::lease::Registration;

/// What the heartbeats said about this replica's own entry, so that each finding is logged
/// when it begins (an identity conflict: at most once per `lease_duration`).
pub(crate) struct Own {
    lease_duration: Duration,
    refused: bool,
    /// When a heartbeat last found another process's entry of this identity, and when that
    /// was last logged.
    conflict_at: Option<Instant>,
    warned_at: Option<Instant>,
}

impl Own {
    pub(crate) fn new(lease_duration: Duration) -> Own {
        Own {
            lease_duration,
            refused: false,
            conflict_at: None,
            warned_at: None,
        }
    }

    pub(crate) fn found(&mut self, r: Registration, identity: &str, metrics: &Metrics) {
        if r.refused != self.refused {
            self.refused = r.refused;
            if r.refused {
                let max = crate::lease::MAX_CANDIDATES;
                tracing::warn!(
                    event = "registry_full",
                    max,
                    "the candidate registry holds {max} live candidates: {identity} runs without an entry (it may still lead; `status` and successor choices do not see it)"
                );
            } else {
                tracing::info!(
                    event = "registered",
                    "{identity} is a registered candidate again"
                );
            }
        }
        let now = Instant::now();
        if r.conflict {
            self.conflict_at = Some(now);
            metrics.set_identity_conflict(true);
            if self
                .warned_at
                .is_none_or(|t| now - t >= self.lease_duration)
            {
                self.warned_at = Some(now);
                tracing::warn!(
                    event = "identity_conflict",
                    identity,
                    "another live process registers the identity {identity}: give each replica its own identity (the lease token keeps them from both leading)"
                );
            }
        } else if self
            .conflict_at
            .is_some_and(|t| now - t >= self.lease_duration)
        {
            self.conflict_at = None;
            metrics.set_identity_conflict(false);
        }
    }
}
