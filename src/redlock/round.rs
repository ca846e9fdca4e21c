//! One round over every node, and how its answers are counted: the holder to report, the
//! nodes that fail or recover, and the error of a round that did not reach a majority.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::join_all;

use super::{Node, RedlockClient};
use crate::conn::{FailureKind, RedisFailure};
use crate::lease::{Holder, LeaseError};

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

    /// The holder to report when no attempt won: the most common holder among the nodes
    /// that hold the lease, if it can be leading (with the nodes that did not answer, it may
    /// hold a majority), with its highest fence; otherwise nobody (`holder: None`, shown as
    /// quarantined: nobody can lead now), with the quarantine's fence if any. `remaining` is
    /// the time until a majority of nodes may be free (`free` nodes are free now; a node that
    /// did not answer or has no TTL never is).
    pub(super) fn summarize(&self, held: &[Holder], free: usize) -> Holder {
        let n = self.nodes.len();
        let q = self.quorum();
        let silent = n.saturating_sub(free + held.len());
        let mut groups: HashMap<Option<&str>, (usize, u64)> = HashMap::new();
        for h in held {
            let g = groups.entry(h.holder.as_deref()).or_insert((0, 0));
            g.0 += 1;
            g.1 = g.1.max(h.fence);
        }
        let leading = groups
            .iter()
            .filter(|(who, (count, _))| who.is_some() && count + silent >= q)
            .max_by_key(|(who, (count, _))| (*count, **who));
        let (holder, fence) = match leading {
            Some((who, (_, fence))) => (who.map(str::to_owned), *fence),
            None => (None, groups.get(&None).map_or(0, |g| g.1)),
        };
        let mut free_at: Vec<Option<Duration>> = vec![Some(Duration::ZERO); free];
        free_at.extend(held.iter().map(|h| h.remaining));
        free_at.resize(n, None);
        // `None` (never) sorts after every `Some` with this key.
        free_at.sort_by_key(|d| (d.is_none(), *d));
        let address = held
            .iter()
            .find(|h| h.holder.is_some() && h.holder == holder && h.fence == fence)
            .and_then(|h| h.address.clone());
        Holder {
            holder,
            fence,
            remaining: free_at[q - 1],
            address,
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
        LeaseError::Unavailable(RedisFailure {
            kind,
            cause,
            code: None,
        })
    }
}
