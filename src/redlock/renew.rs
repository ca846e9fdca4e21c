//! The Redlock renew: compare-and-extend on every node, and taking back for a valid term the
//! nodes that lost it.

use std::time::{Duration, SystemTime};

use futures::future::join_all;
use tokio::time::Instant;

use super::RedlockClient;
use crate::lease::{Acquire, Lease, LeaseError, Term};

impl RedlockClient {
    /// Extends the term on every node ([`Lease::renew`]); when a majority extended it, moves
    /// `term.valid_until` to `t_send + lease_duration - drift` of this round, and takes the
    /// lease back on nodes where it is free again (see the module docs).
    ///
    /// Errors: `Lost` when a majority says the lease is gone or another term's (no majority
    /// can extend it any more); `Unavailable` otherwise (retry until the renew deadline). A
    /// failed renew releases nothing. On error `term` is unchanged.
    pub(super) async fn renew_round(
        &self,
        term: &mut Term,
        budget: Duration,
    ) -> Result<(), LeaseError> {
        let t = self.per_node(budget);
        let q = self.quorum();
        let sent = Instant::now();
        let sent_wall = SystemTime::now();
        let answers = self
            .all(|node| {
                let mut copy = term.clone();
                async move { node.lease.renew(&mut copy, t).await }
            })
            .await;
        let mut extended = 0;
        let mut lost = Vec::new();
        let mut errors = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(()) => extended += 1,
                Err(LeaseError::Lost) => lost.push(i),
                Err(err) => {
                    self.note(i, Some(&err));
                    errors.push((i, err));
                    continue;
                }
            }
            self.note(i, None);
        }
        if lost.len() >= q {
            return Err(LeaseError::Lost);
        }
        let valid_until = sent + self.validity();
        let renewed = extended >= q && Instant::now() < valid_until;
        if renewed {
            term.last_sent = sent;
            term.valid_until = valid_until;
            term.valid_until_wall = sent_wall + self.validity();
        }
        // While the term is valid no other term can hold a majority, so taking free nodes
        // back is safe, also after a failed round: the next one may then succeed.
        if !lost.is_empty() && term.is_valid() {
            self.rejoin(term, &lost, t).await;
        }
        if renewed {
            return Ok(());
        }
        let what = format!("renew (extended on {extended}, lost on {})", lost.len());
        Err(self.unavailable(&what, extended, &errors))
    }

    /// Takes the lease back for a valid term on nodes that no longer hold it (its key
    /// expired while the node was slow or unreachable, or the node restarted empty), so that
    /// faults one after another do not wear the term's majority down. It goes through the
    /// acquire script, so a node takes it only when the lease is free there and not
    /// quarantined, then gets the term's fence. Safe: holding more nodes only keeps others
    /// out, and counters only go up.
    pub(super) async fn rejoin(&self, term: &Term, which: &[usize], t: Duration) {
        join_all(which.iter().map(|&i| async move {
            let node = &self.nodes[i];
            let regained = node
                .lease
                .try_acquire_with_token(term.token.clone(), t, false)
                .await;
            if let Ok(Acquire::Acquired(_)) = regained {
                if let Ok(true) = self.raise_fence(node, &term.token, term.fence, t).await {
                    let _ = node.lease.announce(&term.token, term.fence, t).await;
                }
            }
        }))
        .await;
    }
}
