//! The Redlock observe: who holds the lease, as a majority of nodes sees it.

use std::time::Duration;

use super::{Node, RedlockClient};
use crate::lease::{Holder, LeaseError};

/// What one node answered to an observe.
enum Seen {
    Vacant,
    Held(Holder),
    Failed(LeaseError),
}

impl RedlockClient {
    /// Who holds the lease: the holder seen on a majority of nodes; `None` when a majority
    /// has it free. When no holder has a majority (a split, or quarantined nodes), the most
    /// common answer, which shows as quarantined when that is no holder.
    ///
    /// # Errors
    /// `Unavailable` when fewer than a majority of nodes answered.
    pub async fn observe(&self) -> Result<Option<Holder>, LeaseError> {
        self.observe_within(None).await
    }

    /// [`observe`](Self::observe) with each node's timeout capped at `timeout`.
    ///
    /// # Errors
    /// As `observe`.
    pub async fn observe_within(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<Holder>, LeaseError> {
        let t = self.per_node(timeout);
        let q = self.quorum();
        let seen = self.all(|node| self.observe_node(node, t)).await;
        let mut free = 0;
        let mut held = Vec::new();
        let mut errors = Vec::new();
        for (i, s) in seen.into_iter().enumerate() {
            let failure = match &s {
                Seen::Failed(e) => Some(e),
                _ => None,
            };
            self.note(i, failure);
            match s {
                Seen::Vacant => free += 1,
                Seen::Held(h) => held.push(h),
                Seen::Failed(err) => errors.push((i, err)),
            }
        }
        if free + held.len() < q {
            return Err(self.unavailable("observe", free + held.len(), &errors));
        }
        if free >= q {
            return Ok(None);
        }
        Ok(Some(self.summarize(&held, free)))
    }

    async fn observe_node(&self, node: &Node, t: Duration) -> Seen {
        match node.lease.observe_within(Some(t)).await {
            Err(e) => Seen::Failed(e),
            Ok(None) => Seen::Vacant,
            Ok(Some(holder)) => Seen::Held(holder),
        }
    }
}
