//! Redlock: one lease held on a majority of independent Redis masters, so that losing one
//! of them (a crash, a failover that lost the latest write, a partition) neither ends the
//! term nor lets a second replica lead.
//!
//! Every operation goes to all nodes in parallel, each with a per-node timeout much smaller
//! than the lease (`min(command_timeout, lease_duration / 10)` by default), and counts the
//! answers:
//!
//! - **acquire**: one random token for the attempt, sent to every node with the ordinary
//!   acquire script. The attempt wins only when a majority granted it *and* the whole attempt
//!   finished before its validity `t_send + lease_duration - drift` (every node's TTL started
//!   after `t_send`). Then the fence is made to increase across majorities: the highest fence
//!   the granting nodes returned, `M`, is written back to each of them (`lua/fence_raise.lua`:
//!   counter raised to `M`, lease hash `fence = M`, only under our token), and the term is
//!   claimed only when a majority confirmed it. Any failure takes the attempt back on every
//!   node that granted or did not answer.
//! - **renew**: compare-and-extend on every node; a majority extended: the validity moves to
//!   this round's send; a majority said "not ours": [`LeaseError::Lost`]; anything else is an
//!   error to retry. A renew never turns into a release because one node failed. While the
//!   term is valid, nodes that said "not ours" (the key expired while the node was slow or
//!   away, or it restarted empty) are taken back for the term when the lease is free there
//!   (and not quarantined), so that faults one after another do not wear the majority down.
//! - **release**: compare-and-delete on every node (each publishes the release); a reserved
//!   release leaves a placeholder for the successor on each, so it alone wins a majority.
//! - **control**: a handover request is written to every node and counts on a majority; the
//!   leader listens on every node's control channel.
//! - **observe**: the holder seen on a majority.
//!
//! Why fences strictly increase: the term with fence `M1` wrote a counter `>= M1` to a majority
//! `Q1` while it held the lease there. A later term is granted by a majority `Q2`, and `Q1` and
//! `Q2` share a node. On that node the later grant came after the earlier term's raise (a grant
//! needs the key absent, and the earlier term held it until after it claimed), so the node's `INCR`
//! answered more than `M1`, and the later term's fence, the maximum over `Q2`, is larger still.
//! Assumption: no node loses acknowledged writes (see
//! docs/redis-modes.md#persistence-what-each-mode-needs-and-why); an empty restart seeds the node's
//! counter from its clock in microseconds and quarantines it, which keeps fences increasing as long
//! as the nodes' clocks roughly agree.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use leaderd::{Acquire, Lease, LeaseSpec, RedlockClient};
//!
//! let spec = LeaseSpec::new("orders-scheduler", "pod-a", Duration::from_secs(15));
//! let urls = ["redis://a:6379", "redis://b:6379", "redis://c:6379"];
//! let lease = RedlockClient::connect(&urls, spec)?;
//! let budget = lease.default_budget();
//! if let Acquire::Acquired(mut term) = lease.try_acquire(budget).await? {
//!     // Work guarded by term.fence, only while term.is_valid().
//!     lease.renew(&mut term, budget).await?;
//!     lease.release(&term, budget).await?;
//! }
//! # Ok(()) }
//! ```

mod acquire;
mod control;
mod fence;
mod observe;
mod release;
mod renew;
mod round;
mod shards;
#[cfg(test)]
mod tests;
mod undo;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use redis::{Client, Script};

use crate::connector::ConnectError;
use crate::lease::{
    Acquire, Control, ControlWatch, HandoverRequest, Heartbeat, Lease, LeaseClient, LeaseError,
    LeaseKeys, LeaseSpec, Observed, ReleaseWatch, Reservation, Roster, Term,
};

/// A lease held on a majority of independent Redis masters (see the module docs).
pub struct RedlockClient {
    nodes: Vec<Node>,
    spec: LeaseSpec,
    keys: LeaseKeys,
    node_timeout: Duration,
    fence_raise: Script,
    undo: Script,
}

struct Node {
    lease: LeaseClient,
    /// `host:port` (never the URL, which may carry a password), for error messages.
    label: String,
    /// Whether its last answer was a failure; changes are logged once each (shared by the
    /// clients of one election's shards).
    failing: Arc<AtomicBool>,
}

impl RedlockClient {
    /// What each node offers, as last read at a connect.
    #[cfg_attr(not(feature = "daemon"), allow(dead_code))] // read by check-config --probe
    pub(crate) fn server_infos(&self) -> Vec<crate::server_info::ServerInfoWatch> {
        self.nodes
            .iter()
            .flat_map(|n| n.lease.server_infos())
            .collect()
    }

    /// A client for the lease `spec` on the independent Redis masters at `urls` (an odd
    /// number, at least 3). Nothing is sent until the first operation.
    ///
    /// # Errors
    /// [`ConnectError::BadUrl`] when a URL cannot be parsed, [`ConnectError::Nodes`] when the
    /// number of nodes is not odd and at least 3.
    pub fn connect<S: AsRef<str>>(urls: &[S], spec: LeaseSpec) -> Result<Self, ConnectError> {
        let clients = urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                crate::connector::open_client(url.as_ref()).map_err(|cause| ConnectError::BadUrl {
                    key: format!("redis.urls[{i}]"),
                    cause,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::with_clients(clients, spec)
    }

    /// A client over already configured `redis::Client`s (credentials, TLS), one per node:
    /// what [`crate::Backend::connect`] makes of a [`crate::RedisSpec`] in mode redlock.
    ///
    /// # Errors
    /// [`ConnectError::Nodes`] when the number of nodes is not odd and at least 3.
    pub(crate) fn with_clients(
        clients: Vec<Client>,
        spec: LeaseSpec,
    ) -> Result<Self, ConnectError> {
        let n = clients.len();
        if n < 3 || n % 2 == 0 {
            return Err(ConnectError::Nodes {
                key: "redis.urls",
                needs: "mode redlock needs an odd number >= 3 of urls",
                got: n,
            });
        }
        let node_timeout = default_node_timeout(&spec);
        let nodes = clients
            .into_iter()
            .map(|client| {
                let label = client.get_connection_info().addr().to_string();
                let node_spec = LeaseSpec {
                    command_timeout: node_timeout,
                    ..spec.clone()
                };
                Node {
                    lease: LeaseClient::with_client(client, node_spec),
                    label,
                    failing: Arc::new(AtomicBool::new(false)),
                }
            })
            .collect();
        Ok(RedlockClient {
            keys: spec.keys(),
            spec,
            nodes,
            node_timeout,
            fence_raise: Script::new(include_str!("../lua/fence_raise.lua")),
            undo: Script::new(include_str!("../lua/redlock_undo.lua")),
        })
    }

    /// Overrides the per-node timeout (by default `min(command_timeout, lease_duration / 10)`).
    /// Keep it much smaller than the lease: an attempt may take two rounds.
    pub fn with_node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The keys of the lease (the same on every node).
    pub fn keys(&self) -> &LeaseKeys {
        &self.keys
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a Redlock has at least 3 nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// How many nodes make a majority.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// The timeout of one request to one node.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    fn per_node(&self, budget: Duration) -> Duration {
        budget.min(self.node_timeout)
    }

    fn validity(&self) -> Duration {
        self.spec.validity()
    }
}

impl Lease for RedlockClient {
    fn spec(&self) -> &LeaseSpec {
        &self.spec
    }
    fn default_budget(&self) -> Duration {
        self.node_timeout
    }
    async fn try_acquire(&self, budget: Duration) -> Result<Acquire, LeaseError> {
        self.acquire_round(budget).await
    }
    async fn renew(&self, term: &mut Term, budget: Duration) -> Result<(), LeaseError> {
        self.renew_round(term, budget).await
    }
    async fn release_to(
        &self,
        term: &Term,
        reservation: Option<Reservation<'_>>,
        budget: Duration,
    ) -> Result<bool, LeaseError> {
        self.release_token(&term.token, term.fence, reservation, self.per_node(budget))
            .await
    }
    async fn observe(&self, budget: Duration) -> Result<Observed, LeaseError> {
        self.observe_round(budget).await
    }
    fn messages_dropped(&self) -> u64 {
        self.nodes.iter().map(|n| n.lease.messages_dropped()).sum()
    }

    async fn release_strays(&self, budget: Duration) -> usize {
        let t = self.per_node(budget);
        let released = self.all(|node| node.lease.release_strays(t)).await;
        released.into_iter().sum()
    }
    async fn heartbeat(&self, beat: Heartbeat<'_>, budget: Duration) -> Result<Roster, LeaseError> {
        let t = self.per_node(budget);
        let answers = self.all(|node| node.lease.heartbeat_here(beat, t)).await;
        let mut rosters = Vec::new();
        let mut errors = Vec::new();
        for (i, a) in answers.into_iter().enumerate() {
            match a {
                Ok(r) => rosters.push(r),
                Err(e) => errors.push((i, e)),
            }
        }
        if rosters.len() < self.quorum() {
            return Err(self.unavailable("heartbeat", rosters.len(), &errors));
        }
        let lease = self.lease_of_rosters(&rosters);
        Ok(Roster::merge(rosters, lease))
    }
    fn watch_releases(&self) -> ReleaseWatch {
        self.watch_all_releases()
    }
    async fn control(
        &self,
        op: Control<'_>,
        budget: Duration,
    ) -> Result<Option<HandoverRequest>, LeaseError> {
        self.control_round(op, budget).await
    }
    fn watch_control(&self) -> ControlWatch {
        ControlWatch::merge(self.nodes.iter().map(|n| n.lease.watch_control()).collect())
    }
    fn eviction_policies(
        &self,
    ) -> Vec<tokio::sync::watch::Receiver<Option<crate::eviction::EvictionPolicy>>> {
        self.nodes
            .iter()
            .flat_map(|n| n.lease.eviction_policies())
            .collect()
    }
}

/// `min(command_timeout, lease_duration / 10)`: a node that answers slower than that is
/// left out of the round, so a slow node costs a round at most a tenth of the lease.
pub(crate) fn default_node_timeout(spec: &LeaseSpec) -> Duration {
    spec.command_timeout.min(spec.lease_duration / 10)
}
