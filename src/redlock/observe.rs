//! The Redlock observe: who holds the lease, as a majority of nodes sees it.

use std::time::Duration;

use tokio::time::Instant;

use super::{Node, RedlockClient};
use crate::lease::{Lease, LeaseError, Observed, Roster};

impl RedlockClient {
    /// What holds the lease, as a majority sees it ([`Lease::observe`]): vacant when a
    /// majority has it free; otherwise the holder that may have a majority, or quarantined
    /// when none can (a split, or quarantined nodes). `Unavailable` when fewer than a
    /// majority of nodes answered.
    pub(super) async fn observe_round(&self, budget: Duration) -> Result<Observed, LeaseError> {
        let t = self.per_node(budget);
        let seen = self.all(|node| self.observe_node(node, t)).await;
        let seen = self.answers_of_majority("observe", seen)?;
        Ok(self.tally(seen.into_iter().map(|(_, s)| s)))
    }

    /// One lease as the nodes that answered (a majority) see it: vacant when a majority has
    /// it free, else [`Self::summarize`] of the others.
    pub(super) fn tally(&self, seen: impl IntoIterator<Item = Observed>) -> Observed {
        let mut free = 0;
        let mut held = Vec::new();
        for s in seen {
            match s {
                Observed::Vacant => free += 1,
                other => held.push(other),
            }
        }
        if free >= self.quorum() {
            return Observed::Vacant;
        }
        self.summarize(&held, free)
    }

    async fn observe_node(&self, node: &Node, t: Duration) -> Result<Observed, LeaseError> {
        node.lease.observe(t).await
    }

    /// The lease as the nodes' heartbeats read it, summarized like [`Self::observe_round`]
    /// (the caller made sure a majority answered); `None` when a node did not report it.
    pub(super) fn lease_of_rosters(&self, rosters: &[Roster]) -> Option<(Observed, Instant)> {
        let mut seen = Vec::new();
        let mut sent: Option<Instant> = None;
        for r in rosters {
            let (lease, at) = r.lease.clone()?;
            sent = Some(sent.map_or(at, |s| s.min(at)));
            seen.push(lease);
        }
        let seen = self.tally(seen);
        Some((seen, sent?))
    }
}
