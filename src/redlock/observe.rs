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
        let q = self.quorum();
        let seen = self.all(|node| self.observe_node(node, t)).await;
        let mut free = 0;
        let mut held = Vec::new();
        let mut errors = Vec::new();
        for (i, s) in seen.into_iter().enumerate() {
            let failure = s.as_ref().err();
            self.note(i, failure);
            match s {
                Ok(Observed::Vacant) => free += 1,
                Ok(other) => held.push(other),
                Err(err) => errors.push((i, err)),
            }
        }
        if free + held.len() < q {
            return Err(self.unavailable("observe", free + held.len(), &errors));
        }
        if free >= q {
            return Ok(Observed::Vacant);
        }
        Ok(self.summarize(&held, free))
    }

    async fn observe_node(&self, node: &Node, t: Duration) -> Result<Observed, LeaseError> {
        node.lease.observe(t).await
    }

    /// The lease as the nodes' heartbeats read it, summarized like [`Self::observe_round`]
    /// (the caller made sure a majority answered); `None` when a node did not report it.
    pub(super) fn lease_of_rosters(&self, rosters: &[Roster]) -> Option<(Observed, Instant)> {
        let mut free = 0;
        let mut held = Vec::new();
        let mut sent: Option<Instant> = None;
        for r in rosters {
            let (seen, at) = r.lease.clone()?;
            sent = Some(sent.map_or(at, |s| s.min(at)));
            match seen {
                Observed::Vacant => free += 1,
                other => held.push(other),
            }
        }
        let seen = if free >= self.quorum() {
            Observed::Vacant
        } else {
            self.summarize(&held, free)
        };
        Some((seen, sent?))
    }
}
