//! The Redlock handover request key: written to every node and counted on a majority, read
//! from a majority, answered on every node.

use std::time::Duration;

use super::RedlockClient;
use crate::lease::{Control, HandoverRequest, LeaseError};

impl RedlockClient {
    /// [`crate::Lease::control`] over every node. A request counts when a majority wrote it
    /// (a pending request found on any node is returned instead); a read returns the request
    /// pending on any node that answered, when a majority answered; an answer goes to every
    /// node that answers.
    pub(super) async fn control_round(
        &self,
        op: Control<'_>,
        budget: Duration,
    ) -> Result<Option<HandoverRequest>, LeaseError> {
        let t = self.per_node(budget);
        let answers = self.all(|node| node.lease.control_here(op, t)).await;
        let mut good = 0;
        let mut found = None;
        let mut errors = Vec::new();
        for (i, a) in answers.into_iter().enumerate() {
            match a {
                Ok(r) => {
                    good += 1;
                    found = found.or(r);
                }
                Err(e) => errors.push((i, e)),
            }
        }
        let needed = match op {
            Control::Answer(..) => 1,
            _ => self.quorum(),
        };
        if good < needed {
            return Err(self.unavailable("handover", good, &errors));
        }
        Ok(found)
    }
}
