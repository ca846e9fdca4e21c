//! The Redlock acquire: one round to every node with one token, then the fence confirmed on
//! the granting majority, or the grants taken back; and the blocking acquire over it.

use std::time::{Duration, SystemTime};

use futures::future::join_all;
use tokio::time::Instant;

use super::RedlockClient;
use crate::conn::{FailureKind, RedisFailure};
use crate::lease::{new_token, Acquire, LeaseError, Observed, Term};

/// What one node answered to an acquire.
enum Vote {
    Granted(u64),
    Held(Observed),
    Failed(LeaseError),
}

impl RedlockClient {
    /// One attempt to take the lease on a majority for a new term ([`Lease::try_acquire`]),
    /// with each node's timeout capped at `budget`. The attempt takes one round to every
    /// node, a second round to the granting nodes to confirm the fence, and on failure one
    /// more to take the grants back.
    ///
    /// Errors: `Unavailable` when fewer than a majority of nodes answered, or the attempt won
    /// a majority but could not confirm its fence on one or outlived its validity (it is then
    /// taken back everywhere); `WrongType` when every node holds someone else's data.
    pub(super) async fn acquire_round(&self, budget: Duration) -> Result<Acquire, LeaseError> {
        let t = self.per_node(budget);
        let q = self.quorum();
        let token = new_token();
        let sent = Instant::now();
        let sent_wall = SystemTime::now();
        let valid_until = sent + self.validity();
        let votes = self.vote(&token, t).await;
        let granted: Vec<(usize, u64)> = votes
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                Vote::Granted(fence) => Some((i, *fence)),
                _ => None,
            })
            .collect();

        if granted.len() >= q {
            return self
                .claim(token, &granted, t, sent, sent_wall, valid_until)
                .await;
        }
        self.no_majority(&token, votes, t).await
    }

    /// The first round of an attempt: `token` sent to every node, each failing node noted.
    async fn vote(&self, token: &str, t: Duration) -> Vec<Vote> {
        let votes = self
            .all(|node| async move {
                match node
                    .lease
                    .try_acquire_with_token(token.to_owned(), t, false)
                    .await
                {
                    Ok(Acquire::Acquired(term)) => Vote::Granted(term.fence),
                    Ok(Acquire::Denied(seen)) => Vote::Held(seen),
                    Err(err) => Vote::Failed(err),
                }
            })
            .await;
        for (i, vote) in votes.iter().enumerate() {
            let failure = match vote {
                Vote::Failed(e) => Some(e),
                _ => None,
            };
            self.note(i, failure);
        }
        votes
    }

    /// A majority granted the attempt: the term, once its fence is confirmed within the
    /// validity; otherwise the attempt is released everywhere and the error returned.
    async fn claim(
        &self,
        token: String,
        granted: &[(usize, u64)],
        t: Duration,
        sent: Instant,
        sent_wall: SystemTime,
        valid_until: Instant,
    ) -> Result<Acquire, LeaseError> {
        let failure = if Instant::now() < valid_until {
            match self.confirm_fence(&token, granted, t, valid_until).await {
                Ok(fence) => {
                    self.announce(&token, granted, fence, t).await;
                    return Ok(Acquire::Acquired(Term {
                        token,
                        fence,
                        acquired_at: SystemTime::now(),
                        last_sent: sent,
                        valid_until,
                        valid_until_wall: sent_wall + self.validity(),
                    }));
                }
                Err(failure) => failure,
            }
        } else {
            self.too_slow(sent)
        };
        // Others saw the lease held by this attempt: release it as a term would, so
        // that they contend again at once.
        let _ = self.release_token(&token, 0, None, t).await;
        Err(failure)
    }

    /// No majority granted the attempt: who holds the lease, once the attempt is taken back.
    async fn no_majority(
        &self,
        token: &str,
        votes: Vec<Vote>,
        t: Duration,
    ) -> Result<Acquire, LeaseError> {
        let q = self.quorum();
        // No majority: take back what this attempt may hold (granted, or no answer: the
        // request may have been executed), quietly.
        let maybe_ours: Vec<usize> = votes
            .iter()
            .enumerate()
            .filter(|(_, v)| !matches!(v, Vote::Held(_)))
            .map(|(i, _)| i)
            .collect();
        if !maybe_ours.is_empty() {
            self.undo(token, &maybe_ours, t).await;
        }
        let mut free = 0;
        let mut held = Vec::new();
        let mut errors = Vec::new();
        for (i, vote) in votes.into_iter().enumerate() {
            match vote {
                Vote::Granted(_) => free += 1,
                Vote::Held(holder) => held.push(holder),
                Vote::Failed(err) => errors.push((i, err)),
            }
        }
        if free + held.len() < q {
            return Err(self.unavailable("acquire", free + held.len(), &errors));
        }
        Ok(Acquire::Denied(self.summarize(&held, free)))
    }

    /// Takes the attempt back on `which`. A node that does not answer may still execute the
    /// acquire when it resumes (the request sits in its socket), so its undo is retried in
    /// the background until the node answers it (see [`super::undo`]).
    async fn undo(&self, token: &str, which: &[usize], t: Duration) {
        let answers = join_all(which.iter().map(|&i| async move {
            let endpoint = self.nodes[i].lease.endpoint();
            super::undo::undo_once(endpoint, &self.undo, &self.keys.lock, token, t).await
        }))
        .await;
        for (&i, answer) in which.iter().zip(answers) {
            if answer.is_err() {
                super::undo::retry_in_background(
                    self.nodes[i].lease.shared_endpoint(),
                    self.undo.clone(),
                    self.keys.lock.clone(),
                    token.to_owned(),
                    t,
                    self.spec.lease_duration,
                );
            }
        }
    }

    /// The term has begun (a majority, fence confirmed): announce it on the granting nodes.
    async fn announce(&self, token: &str, granted: &[(usize, u64)], fence: u64, t: Duration) {
        join_all(
            granted
                .iter()
                .map(|&(i, _)| self.nodes[i].lease.announce(token, fence, t)),
        )
        .await;
    }

    fn too_slow(&self, sent: Instant) -> LeaseError {
        LeaseError::Unavailable(RedisFailure {
            kind: FailureKind::Timeout,
            cause: format!(
                "redlock acquire: a majority answered only after {}ms, past the lease validity",
                sent.elapsed().as_millis()
            ),
            code: None,
            source: None,
        })
    }
}
