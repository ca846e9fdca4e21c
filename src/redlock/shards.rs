//! Redlock for a sharded election (README, "Shards"; docs/protocol.md#shards): shard `s` is a
//! Redlock of its own over every node's lease of that shard (a majority per shard, its fence
//! raised across the majority from each node's one election counter, each node's quarantine),
//! all of a replica's shards renewed with one call per node, every shard read with one
//! pipeline per node.

use std::time::{Duration, SystemTime};

use futures::future::join_all;
use tokio::time::Instant;

use super::{Node, RedlockClient};
use crate::lease::{Lease, LeaseClient, LeaseError, Observed};
use crate::lease::{ShardRenewal, ShardTerm};

/// How the nodes answered one renew for one shard.
#[derive(Debug, Clone, Default)]
struct Votes {
    extended: usize,
    /// The nodes that said the shard is gone or another term's.
    lost: Vec<usize>,
}

impl RedlockClient {
    /// The same nodes (connections and failure notes shared), each with `lease` of its own,
    /// the lease key being `lock`.
    fn over(&self, lease: impl Fn(&LeaseClient) -> LeaseClient, lock: String) -> RedlockClient {
        let node = |n: &Node| Node {
            lease: lease(&n.lease),
            label: n.label.clone(),
            failing: n.failing.clone(),
        };
        let mut keys = self.keys.clone();
        keys.lock = lock;
        RedlockClient {
            nodes: self.nodes.iter().map(node).collect(),
            spec: self.spec.clone(),
            keys,
            node_timeout: self.node_timeout,
            fence_raise: self.fence_raise.clone(),
            undo: self.undo.clone(),
        }
    }

    /// Shard `shard`'s lease on every node: acquire, release, observe as one Redlock lease.
    pub(crate) fn shard(&self, shard: u32) -> RedlockClient {
        self.over(|l| l.shard(shard), self.spec.shard_key(shard))
    }

    /// The same lease over the same connections, with listeners and registry state of its
    /// own (as [`LeaseClient::for_lease`]).
    #[cfg_attr(not(feature = "daemon"), allow(dead_code))] // the daemon's shard elector
    pub(crate) fn twin(&self) -> RedlockClient {
        self.over(|l| l.for_lease(l.spec().clone()), self.keys.lock.clone())
    }

    /// Renews every shard of `owned` with one call per node (`lua/shard_renew.lua`). A shard
    /// a majority extended within its validity is [`ShardRenewal::Renewed`] (validity from
    /// this round's send); one a majority says is gone is `Lost`; any other keeps its
    /// validity and deadline (`Unconfirmed`). Nodes that lost a still valid shard take it
    /// back for its term, as the single lease's renew does.
    ///
    /// Errors: `Unavailable` when fewer than a majority of nodes answered (no validity moved).
    pub(crate) async fn renew_shards(
        &self,
        owned: &mut [ShardTerm],
        budget: Duration,
    ) -> Result<Vec<ShardRenewal>, LeaseError> {
        if owned.is_empty() {
            return Ok(Vec::new());
        }
        let (t, q) = (self.per_node(budget), self.quorum());
        let (sent, sent_wall) = (Instant::now(), SystemTime::now());
        let copies = &*owned;
        let answers = self
            .all(|node| {
                let mut copy = copies.to_vec();
                async move { node.lease.renew_shards(&mut copy, t).await }
            })
            .await;
        let mut votes = vec![Votes::default(); owned.len()];
        for (i, results) in self.answers_of_majority("renew of shards", answers)? {
            for (v, r) in votes.iter_mut().zip(results) {
                match r {
                    ShardRenewal::Renewed => v.extended += 1,
                    _ => v.lost.push(i),
                }
            }
        }
        let validity = self.validity();
        let in_time = Instant::now() < sent + validity;
        let mut rejoin = Vec::new();
        let mut out = Vec::with_capacity(owned.len());
        for (held, v) in owned.iter_mut().zip(votes) {
            let renewal = if v.lost.len() >= q {
                ShardRenewal::Lost
            } else if v.extended >= q && in_time {
                held.term.renewed(sent, sent_wall, validity);
                ShardRenewal::Renewed
            } else {
                ShardRenewal::Unconfirmed
            };
            if renewal != ShardRenewal::Lost && !v.lost.is_empty() && held.term.is_valid() {
                rejoin.push((held.clone(), v.lost));
            }
            out.push(renewal);
        }
        let taken_back = rejoin.iter().map(|(held, lost)| async move {
            self.shard(held.shard).rejoin(&held.term, lost, t).await
        });
        join_all(taken_back).await;
        Ok(out)
    }

    /// Shards `0..count`, each as a majority sees it (vacant on a majority, else the holder
    /// or reservation that may hold one, else quarantined), from one pipeline per node.
    ///
    /// Errors: `Unavailable` when fewer than a majority of nodes answered.
    pub(crate) async fn read_shards(
        &self,
        count: u32,
        budget: Duration,
    ) -> Result<Vec<Observed>, LeaseError> {
        let t = self.per_node(budget);
        let reads = self.all(|node| node.lease.read_shards(count, t)).await;
        let mut reads: Vec<std::vec::IntoIter<Observed>> = self
            .answers_of_majority("shard read", reads)?
            .into_iter()
            .map(|(_, seen)| seen.into_iter())
            .collect();
        let shard = |_| self.tally(reads.iter_mut().filter_map(Iterator::next));
        Ok((0..count).map(shard).collect())
    }

    /// The identities whose registry entry was refreshed at or after `since_ms` on any node
    /// of a majority that answered.
    pub(crate) async fn candidates_seen_since(
        &self,
        since_ms: u64,
        budget: Duration,
    ) -> Result<Vec<String>, LeaseError> {
        let t = self.per_node(budget);
        let answers = self
            .all(|node| node.lease.candidates_seen_since(since_ms, t))
            .await;
        let mut seen: Vec<String> = self
            .answers_of_majority("registry read", answers)?
            .into_iter()
            .flat_map(|(_, ids)| ids)
            .collect();
        seen.sort();
        seen.dedup();
        Ok(seen)
    }
}
