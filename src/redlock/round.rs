//! One round over every node, and how its answers are counted: the holder to report, the
//! nodes that fail or recover, and the error of a round that did not reach a majority.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::join_all;

use super::{Node, RedlockClient};
use crate::conn::{FailureKind, RedisFailure};
use crate::lease::{Holder, LeaseError, Observed};

impl RedlockClient {
    /// Runs `f` on every node at once and waits for all of them (each is bounded by the
    /// per-node timeout, so one slow node delays a round by at most that).
    pub(super) async fn all<'a, T, F, Fut>(&'a self, f: F) -> Vec<T>
    where
        F: Fn(&'a Node) -> Fut,
        Fut: Future<Output = T>,
    {
        join_all(self.nodes.iter().map(f)).await
    }

    /// The answers of the nodes that answered, with their index, when a majority did; each
    /// node's failure or recovery noted.
    pub(super) fn answers_of_majority<T>(
        &self,
        what: &str,
        answers: Vec<Result<T, LeaseError>>,
    ) -> Result<Vec<(usize, T)>, LeaseError> {
        let (mut good, mut errors) = (Vec::new(), Vec::new());
        for (i, answer) in answers.into_iter().enumerate() {
            self.note(i, answer.as_ref().err());
            match answer {
                Ok(a) => good.push((i, a)),
                Err(err) => errors.push((i, err)),
            }
        }
        if good.len() < self.quorum() {
            return Err(self.unavailable(what, good.len(), &errors));
        }
        Ok(good)
    }

    /// What to report when no attempt won, from the nodes that are not free (`held`): the
    /// most common holder, if it can be leading (with the nodes that did not answer, it may
    /// hold a majority), with its highest fence; likewise a reservation; otherwise
    /// quarantined (nobody can lead now), with the quarantine's fence if any. `remaining` is
    /// the time until a majority of nodes may be free (`free` nodes are free now; a node that
    /// did not answer or has no TTL never is).
    pub(super) fn summarize(&self, held: &[Observed], free: usize) -> Observed {
        let n = self.nodes.len();
        let q = self.quorum();
        let silent = n.saturating_sub(free + held.len());
        // (is a reservation, identity) -> (count, highest fence, an address)
        let mut groups: HashMap<(bool, &str), (usize, u64, Option<&str>)> = HashMap::new();
        let mut quarantine_fence = None;
        for seen in held {
            let (key, fence, address) = match seen {
                Observed::Held(h) => ((false, h.holder.as_str()), h.fence, h.address.as_deref()),
                Observed::Reserved {
                    for_identity,
                    fence,
                    ..
                } => ((true, for_identity.as_str()), *fence, None),
                Observed::Quarantined { fence, .. } => {
                    quarantine_fence = Some(quarantine_fence.unwrap_or(0).max(*fence));
                    continue;
                }
                Observed::Vacant => continue,
            };
            let g = groups.entry(key).or_insert((0, 0, None));
            g.0 += 1;
            g.1 = g.1.max(fence);
            g.2 = g.2.or(address);
        }
        let mut free_at: Vec<Option<Duration>> = vec![Some(Duration::ZERO); free];
        free_at.extend(held.iter().map(Observed::remaining));
        free_at.resize(n, None);
        // `None` (never) sorts after every `Some` with this key.
        free_at.sort_by_key(|d| (d.is_none(), *d));
        let remaining = free_at[q - 1];
        let leading = groups
            .iter()
            .filter(|(_, (count, _, _))| count + silent >= q)
            .max_by_key(|((reserved, who), (count, _, _))| (!*reserved, *count, *who));
        match leading {
            Some(((false, who), (_, fence, address))) => Observed::Held(Holder {
                holder: (*who).to_owned(),
                fence: *fence,
                remaining,
                address: address.map(str::to_owned),
            }),
            Some(((true, who), (_, fence, _))) => Observed::Reserved {
                for_identity: (*who).to_owned(),
                fence: *fence,
                remaining,
            },
            None => Observed::Quarantined {
                fence: quarantine_fence.unwrap_or(0),
                remaining,
            },
        }
    }

    /// Logs when a node starts failing and when it answers again, once per change: an
    /// operation that still reached a majority reports no error, so this is where a dead or
    /// slow node shows.
    pub(super) fn note(&self, i: usize, failure: Option<&LeaseError>) {
        let node = &self.nodes[i];
        match failure {
            Some(err) => {
                if !node.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        event = "redlock_node_failed",
                        node = %node.label,
                        error = %err,
                        "Redlock node {} failed: {err}",
                        node.label
                    );
                }
            }
            None => {
                if node.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        event = "redlock_node_recovered",
                        node = %node.label,
                        "Redlock node {} answers again",
                        node.label
                    );
                }
            }
        }
    }

    pub(super) fn lift(&self, failure: RedisFailure) -> LeaseError {
        if failure.code.as_deref() == Some("WRONGTYPE") {
            LeaseError::WrongType {
                key: self.keys.lock.clone(),
            }
        } else {
            LeaseError::Unavailable(failure)
        }
    }

    /// The error of an operation that did not reach a majority: `WrongType` when every node
    /// failed with it, else `Unavailable` of the most common kind, naming each failed node.
    pub(super) fn unavailable(
        &self,
        what: &str,
        good: usize,
        errors: &[(usize, LeaseError)],
    ) -> LeaseError {
        let every_node_wrong = errors.len() == self.nodes.len()
            && errors
                .iter()
                .all(|(_, e)| matches!(e, LeaseError::WrongType { .. }));
        if good == 0 && every_node_wrong {
            return errors[0].1.clone();
        }
        let mut kinds: HashMap<FailureKind, usize> = HashMap::new();
        for (_, e) in errors {
            *kinds
                .entry(e.redis_kind().unwrap_or(FailureKind::Other))
                .or_default() += 1;
        }
        let kind = FailureKind::ALL
            .into_iter()
            .filter(|k| kinds.contains_key(k))
            .max_by_key(|k| kinds[k])
            .unwrap_or(FailureKind::Other);
        let details: Vec<String> = errors
            .iter()
            .map(|(i, e)| match e {
                // A failed connect names its node already.
                LeaseError::Unavailable(f) if f.cause.contains(&self.nodes[*i].label) => {
                    f.cause.clone()
                }
                LeaseError::Unavailable(f) => format!("{}: {}", self.nodes[*i].label, f.cause),
                other => format!("{}: {other}", self.nodes[*i].label),
            })
            .collect();
        let mut cause = format!(
            "redlock {what}: {good} of {} nodes, a majority of {} is needed",
            self.nodes.len(),
            self.quorum()
        );
        if !details.is_empty() {
            cause += &format!(" ({})", details.join("; "));
        }
        LeaseError::Unavailable(RedisFailure::new(kind, cause))
    }
}
