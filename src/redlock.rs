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
//! - **release**: compare-and-delete on every node (each publishes the release).
//! - **observe**: the holder seen on a majority.
//!
//! Why fences strictly increase: the term with fence `M1` wrote a counter `>= M1` to a
//! majority `Q1` while it held the lease there. A later term is granted by a majority `Q2`,
//! and `Q1` and `Q2` share a node. On that node the later grant came after the earlier term's
//! raise (a grant needs the key absent, and the earlier term held it until after it claimed),
//! so the node's `INCR` answered more than `M1`, and the later term's fence, the maximum over
//! `Q2`, is larger still. Assumption: no node loses acknowledged writes (see the README on
//! persistence); an empty restart seeds the node's counter from its clock in microseconds and
//! quarantines it, which keeps fences increasing as long as the nodes' clocks roughly agree.
//!
//! ```no_run
//! # async fn demo() -> Result<(), leaderd::lease::LeaseError> {
//! use std::time::Duration;
//! use leaderd::lease::{Acquire, LeaseSpec};
//! use leaderd::redlock::RedlockClient;
//!
//! let spec = LeaseSpec::new("orders-scheduler", "pod-a", Duration::from_secs(15));
//! let urls = ["redis://a:6379", "redis://b:6379", "redis://c:6379"];
//! let lease = RedlockClient::connect(&urls, spec)?;
//! if let Acquire::Acquired(mut term) = lease.try_acquire().await? {
//!     // Work guarded by term.fence, only while term.is_valid().
//!     lease.renew(&mut term, None).await?;
//!     lease.release(&term).await?;
//! }
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use redis::{Client, Script};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::conn::{FailureKind, RedisFailure};
use crate::lease::{
    new_token, Acquire, Holder, LeaseClient, LeaseError, LeaseKeys, LeaseSpec, ReleaseWatch, Term,
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
    /// Whether its last answer was a failure; changes are logged once each.
    failing: AtomicBool,
}

/// What one node answered to an acquire.
enum Vote {
    Granted(u64),
    Held(Holder),
    Failed(LeaseError),
}

/// `HMGET holder fence` of the lease hash.
type HolderFields = (Option<String>, Option<u64>);

/// What one node answered to an observe.
enum Seen {
    Vacant,
    Held(Holder),
    Failed(LeaseError),
}

impl RedlockClient {
    /// A client for the lease `spec` on the independent Redis masters at `urls` (an odd
    /// number, at least 3). Nothing is sent until the first operation.
    ///
    /// # Errors
    /// [`LeaseError::Unavailable`] when a URL cannot be parsed or the number of nodes is not
    /// odd and at least 3.
    pub fn connect<S: AsRef<str>>(urls: &[S], spec: LeaseSpec) -> Result<Self, LeaseError> {
        let clients = urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                Client::open(url.as_ref()).map_err(|_| {
                    config_error(format!(
                        "Redis URL #{} is invalid (expected redis://, rediss:// or unix://)",
                        i + 1
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::with_clients(clients, spec)
    }

    /// A client over already configured `redis::Client`s (credentials, TLS), one per node.
    ///
    /// # Errors
    /// [`LeaseError::Unavailable`] when the number of nodes is not odd and at least 3.
    pub fn with_clients(clients: Vec<Client>, spec: LeaseSpec) -> Result<Self, LeaseError> {
        let n = clients.len();
        if n < 3 || n % 2 == 0 {
            return Err(config_error(format!(
                "redlock needs an odd number >= 3 of Redis nodes (got {n})"
            )));
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
                    failing: AtomicBool::new(false),
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

    /// The spec this client was made with.
    pub fn spec(&self) -> &LeaseSpec {
        &self.spec
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

    fn per_node(&self, timeout: Option<Duration>) -> Duration {
        timeout.map_or(self.node_timeout, |t| t.min(self.node_timeout))
    }

    fn validity(&self) -> Duration {
        self.spec.lease_duration.saturating_sub(self.spec.drift())
    }

    /// One attempt to take the lease on a majority for a new term, answering who holds it
    /// otherwise.
    ///
    /// # Errors
    /// `Unavailable` when fewer than a majority of nodes answered, or the attempt won a
    /// majority but could not confirm its fence on one or outlived its validity (it is then
    /// taken back everywhere); `WrongType` when every node holds someone else's data.
    pub async fn try_acquire(&self) -> Result<Acquire, LeaseError> {
        self.try_acquire_within(None).await
    }

    /// [`try_acquire`](Self::try_acquire) with each node's timeout capped at `timeout`. The
    /// attempt takes one round to every node, a second round to the granting nodes to
    /// confirm the fence, and on failure one more to take the grants back.
    ///
    /// # Errors
    /// As `try_acquire`.
    pub async fn try_acquire_within(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Acquire, LeaseError> {
        let t = self.per_node(timeout);
        let q = self.quorum();
        let token = new_token();
        let sent = Instant::now();
        let sent_wall = SystemTime::now();
        let valid_until = sent + self.validity();
        let token_ref = &token;
        let votes = self
            .all(|node| async move {
                match node
                    .lease
                    .try_acquire_with_token(token_ref.clone(), Some(t))
                    .await
                {
                    Ok(Acquire::Acquired(term)) => Vote::Granted(term.fence),
                    Ok(Acquire::Held(holder)) => Vote::Held(holder),
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
        let granted: Vec<(usize, u64)> = votes
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                Vote::Granted(fence) => Some((i, *fence)),
                _ => None,
            })
            .collect();

        if granted.len() >= q {
            let failure = if Instant::now() < valid_until {
                match self.confirm_fence(&token, &granted, t, valid_until).await {
                    Ok(fence) => {
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
            let _ = self.release_token(&token, t).await;
            return Err(failure);
        }

        // No majority: take back what this attempt may hold (granted, or no answer: the
        // request may have been executed), quietly.
        let maybe_ours: Vec<usize> = votes
            .iter()
            .enumerate()
            .filter(|(_, v)| !matches!(v, Vote::Held(_)))
            .map(|(i, _)| i)
            .collect();
        if !maybe_ours.is_empty() {
            self.undo(&token, &maybe_ours, t).await;
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
        Ok(Acquire::Held(self.summarize(&held, free)))
    }

    /// Writes the highest fence of the granting nodes back to them; the fence when a
    /// majority confirmed it within the validity.
    async fn confirm_fence(
        &self,
        token: &str,
        granted: &[(usize, u64)],
        t: Duration,
        valid_until: Instant,
    ) -> Result<u64, LeaseError> {
        let fence = granted.iter().map(|&(_, f)| f).max().unwrap_or(0);
        let answers = join_all(
            granted
                .iter()
                .map(|&(i, _)| self.raise_fence(&self.nodes[i], token, fence, t)),
        )
        .await;
        let confirmed = answers.iter().filter(|a| matches!(a, Ok(true))).count();
        if Instant::now() >= valid_until {
            return Err(LeaseError::Unavailable(RedisFailure {
                kind: FailureKind::Timeout,
                cause: "redlock acquire: confirming the fence outlasted the lease validity".into(),
                code: None,
            }));
        }
        if confirmed >= self.quorum() {
            return Ok(fence);
        }
        let errors: Vec<(usize, LeaseError)> = granted
            .iter()
            .zip(answers)
            .filter_map(|(&(i, _), a)| match a {
                Err(err) => Some((i, err)),
                Ok(false) => Some((i, LeaseError::Lost)),
                Ok(true) => None,
            })
            .collect();
        Err(self.unavailable("acquire (confirming the fence)", confirmed, &errors))
    }

    async fn raise_fence(
        &self,
        node: &Node,
        token: &str,
        fence: u64,
        t: Duration,
    ) -> Result<bool, LeaseError> {
        let mut call = self.fence_raise.prepare_invoke();
        call.key(&self.keys.lock)
            .key(&self.keys.fence)
            .arg(token)
            .arg(fence);
        let raised: i64 = node
            .lease
            .endpoint()
            .call(
                Some(t),
                |mut c| async move { call.invoke_async(&mut c).await },
            )
            .await
            .map_err(|f| self.lift(f))?;
        Ok(raised == 1)
    }

    async fn undo(&self, token: &str, which: &[usize], t: Duration) {
        join_all(which.iter().map(|&i| async move {
            let mut call = self.undo.prepare_invoke();
            call.key(&self.keys.lock).arg(token);
            let _: Result<i64, _> = self.nodes[i]
                .lease
                .endpoint()
                .call(
                    Some(t),
                    |mut c| async move { call.invoke_async(&mut c).await },
                )
                .await;
        }))
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
        })
    }

    /// Extends the term on every node; when a majority extended it, moves
    /// `term.valid_until` to `t_send + lease_duration - drift` of this round, and takes the
    /// lease back on nodes where it is free again (see the module docs).
    ///
    /// # Errors
    /// `Lost` when a majority says the lease is gone or another term's (no majority can
    /// extend it any more); `Unavailable` otherwise (retry until the renew deadline). A
    /// failed renew releases nothing. On error `term` is unchanged.
    pub async fn renew(
        &self,
        term: &mut Term,
        timeout: Option<Duration>,
    ) -> Result<(), LeaseError> {
        let t = self.per_node(timeout);
        let q = self.quorum();
        let sent = Instant::now();
        let sent_wall = SystemTime::now();
        let answers = self
            .all(|node| {
                let mut copy = term.clone();
                async move { node.lease.renew(&mut copy, Some(t)).await }
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
    async fn rejoin(&self, term: &Term, which: &[usize], t: Duration) {
        join_all(which.iter().map(|&i| async move {
            let node = &self.nodes[i];
            let regained = node
                .lease
                .try_acquire_with_token(term.token.clone(), Some(t))
                .await;
            if let Ok(Acquire::Acquired(_)) = regained {
                let _ = self.raise_fence(node, &term.token, term.fence, t).await;
            }
        }))
        .await;
    }

    /// Deletes the term's lease on every node (each publishes the release). Returns false
    /// when no node held it any more.
    ///
    /// # Errors
    /// `Unavailable` when no node answered.
    pub async fn release(&self, term: &Term) -> Result<bool, LeaseError> {
        self.release_within(term, None).await
    }

    /// [`release`](Self::release) with each node's timeout capped at `timeout`.
    ///
    /// # Errors
    /// As `release`.
    pub async fn release_within(
        &self,
        term: &Term,
        timeout: Option<Duration>,
    ) -> Result<bool, LeaseError> {
        self.release_token(&term.token, self.per_node(timeout))
            .await
    }

    async fn release_token(&self, token: &str, t: Duration) -> Result<bool, LeaseError> {
        let term = Term {
            token: token.to_owned(),
            fence: 0,
            acquired_at: SystemTime::now(),
            last_sent: Instant::now(),
            valid_until: Instant::now(),
            valid_until_wall: SystemTime::now(),
        };
        let answers = self
            .all(|node| node.lease.release_within(&term, Some(t)))
            .await;
        let mut released = false;
        let mut answered = 0;
        let mut errors = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            self.note(i, answer.as_ref().err());
            match answer {
                Ok(r) => {
                    answered += 1;
                    released |= r;
                }
                Err(err) => errors.push((i, err)),
            }
        }
        if answered == 0 {
            return Err(self.unavailable("release", 0, &errors));
        }
        Ok(released)
    }

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
        let lock = self.keys.lock.clone();
        let reply: Result<(HolderFields, i64), _> = node
            .lease
            .endpoint()
            .call(Some(t), |mut c| async move {
                redis::pipe()
                    .cmd("HMGET")
                    .arg(&lock)
                    .arg("holder")
                    .arg("fence")
                    .cmd("PTTL")
                    .arg(&lock)
                    .query_async(&mut c)
                    .await
            })
            .await;
        match reply {
            Err(f) => Seen::Failed(self.lift(f)),
            Ok((_, -2)) => Seen::Vacant,
            Ok(((holder, fence), ttl)) => Seen::Held(Holder {
                holder: holder.filter(|h| !h.is_empty()),
                fence: fence.unwrap_or(0),
                remaining: (ttl >= 0).then(|| Duration::from_millis(ttl as u64)),
            }),
        }
    }

    /// One watch over the release channels of every node: it changes whenever any node
    /// publishes a release (or resubscribes). Dropping it stops the listeners.
    pub fn watch_releases(&self) -> ReleaseWatch {
        let (tx, rx) = watch::channel(0u64);
        let mut watches: Vec<ReleaseWatch> = self
            .nodes
            .iter()
            .map(|n| n.lease.watch_releases())
            .collect();
        tokio::spawn(async move {
            loop {
                let any =
                    futures::future::select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
                tokio::select! {
                    _ = any => tx.send_modify(|n| *n += 1),
                    _ = tx.closed() => return,
                }
            }
        });
        ReleaseWatch::from_receiver(rx)
    }

    /// Waits until the lease is ours or `deadline` passes, like
    /// [`LeaseClient::acquire`]: between attempts it sleeps until a majority may be free,
    /// or a jittered `retry` if sooner, and wakes at once when a release is published.
    ///
    /// # Errors
    /// `Timeout` (with the last holder seen) when the deadline passes; `WrongType` at once;
    /// other errors are retried until the deadline.
    pub async fn acquire(&self, deadline: Instant, retry: Duration) -> Result<Term, LeaseError> {
        crate::lease::wait_for_lease(self, deadline, retry).await
    }

    /// Runs `f` on every node at once and waits for all of them (each is bounded by the
    /// per-node timeout, so one slow node delays a round by at most that).
    async fn all<'a, T, F, Fut>(&'a self, f: F) -> Vec<T>
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
    fn summarize(&self, held: &[Holder], free: usize) -> Holder {
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
        Holder {
            holder,
            fence,
            remaining: free_at[q - 1],
        }
    }

    /// Logs when a node starts failing and when it answers again, once per change: an
    /// operation that still reached a majority reports no error, so this is where a dead or
    /// slow node shows.
    fn note(&self, i: usize, failure: Option<&LeaseError>) {
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

    fn lift(&self, failure: RedisFailure) -> LeaseError {
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
    fn unavailable(&self, what: &str, good: usize, errors: &[(usize, LeaseError)]) -> LeaseError {
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

impl crate::election::LeaseBackend for RedlockClient {
    async fn try_acquire(&self, timeout: Duration) -> Result<Acquire, LeaseError> {
        self.try_acquire_within(Some(timeout)).await
    }
    async fn renew(&self, term: &mut Term, timeout: Duration) -> Result<(), LeaseError> {
        RedlockClient::renew(self, term, Some(timeout)).await
    }
    async fn release(&self, term: &Term, timeout: Duration) -> Result<bool, LeaseError> {
        self.release_within(term, Some(timeout)).await
    }
    async fn observe(&self, timeout: Duration) -> Result<Option<Holder>, LeaseError> {
        self.observe_within(Some(timeout)).await
    }
    fn watch_releases(&self) -> ReleaseWatch {
        RedlockClient::watch_releases(self)
    }
    fn attempt_timeout(&self) -> Duration {
        self.node_timeout
    }
}

/// `min(command_timeout, lease_duration / 10)`: a node that answers slower than that is
/// left out of the round, so a slow node costs a round at most a tenth of the lease.
pub fn default_node_timeout(spec: &LeaseSpec) -> Duration {
    spec.command_timeout.min(spec.lease_duration / 10)
}

fn config_error(cause: String) -> LeaseError {
    LeaseError::Unavailable(RedisFailure {
        kind: FailureKind::Other,
        cause,
        code: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(n: usize) -> RedlockClient {
        let urls: Vec<String> = (0..n)
            .map(|i| format!("redis://127.0.0.1:{}/0", 1 + i))
            .collect();
        RedlockClient::connect(&urls, LeaseSpec::new("x", "me", Duration::from_secs(10)))
            .expect("client")
    }

    fn held(who: Option<&str>, fence: u64, ms: Option<u64>) -> Holder {
        Holder {
            holder: who.map(str::to_owned),
            fence,
            remaining: ms.map(Duration::from_millis),
        }
    }

    #[test]
    fn needs_an_odd_number_of_at_least_three_nodes() {
        let spec = LeaseSpec::new("x", "me", Duration::from_secs(10));
        for n in [0, 1, 2, 4, 6] {
            let urls = vec!["redis://127.0.0.1:1/0"; n];
            let err = RedlockClient::connect(&urls, spec.clone()).err().unwrap();
            assert!(err.to_string().contains("odd number >= 3"), "{err}");
        }
        let c = client(5);
        assert_eq!((c.len(), c.quorum()), (5, 3));
        assert_eq!(client(3).quorum(), 2);
    }

    #[test]
    fn node_timeout_is_a_tenth_of_the_lease_at_most() {
        let mut spec = LeaseSpec::new("x", "me", Duration::from_secs(2));
        assert_eq!(default_node_timeout(&spec), Duration::from_millis(200));
        spec.command_timeout = Duration::from_millis(150);
        assert_eq!(default_node_timeout(&spec), Duration::from_millis(150));
        let c = client(3);
        assert_eq!(c.node_timeout(), Duration::from_millis(500));
        assert_eq!(
            c.per_node(Some(Duration::from_millis(100))),
            Duration::from_millis(100)
        );
        assert_eq!(c.per_node(Some(Duration::from_secs(5))), c.node_timeout());
    }

    #[test]
    fn summary_reports_the_majority_holder_and_when_a_majority_frees() {
        let c = client(3);
        let h = c.summarize(
            &[
                held(Some("a"), 7, Some(900)),
                held(Some("a"), 9, Some(1000)),
                held(Some("a"), 9, Some(800)),
            ],
            0,
        );
        assert_eq!(h, held(Some("a"), 9, Some(900)));
        // One node down: a majority is free when both live ones are.
        let h = c.summarize(
            &[held(Some("a"), 9, Some(500)), held(Some("a"), 9, Some(700))],
            0,
        );
        assert_eq!(h.remaining, Some(Duration::from_millis(700)));
        // A split vote: nobody can be leading; a majority frees with the sooner of the others.
        let h = c.summarize(
            &[held(Some("b"), 3, Some(400)), held(None, 5, Some(300))],
            1,
        );
        assert_eq!((h.holder, h.fence), (None, 5));
        assert_eq!(h.remaining, Some(Duration::from_millis(300)));
        let h = c.summarize(
            &[held(Some("x"), 3, Some(400)), held(Some("y"), 4, None)],
            1,
        );
        assert_eq!((h.holder, h.fence), (None, 0));
        // Seen on one node, one silent: it may hold a majority; with the free node, a
        // majority frees when it does.
        let h = c.summarize(&[held(Some("a"), 3, Some(400))], 1);
        assert_eq!((h.holder.as_deref(), h.fence), (Some("a"), 3));
        assert_eq!(h.remaining, Some(Duration::from_millis(400)));
        // Quarantined on a majority.
        let h = c.summarize(&[held(None, 5, Some(300)), held(None, 6, Some(300))], 1);
        assert!(h.is_quarantined());
        assert_eq!(h.fence, 6);
    }

    #[test]
    fn errors_name_the_nodes_without_credentials() {
        let spec = LeaseSpec::new("x", "me", Duration::from_secs(10));
        let c = RedlockClient::connect(
            &[
                "redis://:secret@127.0.0.1:1/0",
                "redis://127.0.0.1:2/0",
                "redis://127.0.0.1:3/0",
            ],
            spec,
        )
        .unwrap();
        let failure = |kind| {
            LeaseError::Unavailable(RedisFailure {
                kind,
                cause: "refused".into(),
                code: None,
            })
        };
        let err = c.unavailable(
            "acquire",
            1,
            &[
                (0, failure(FailureKind::Connection)),
                (2, failure(FailureKind::Connection)),
            ],
        );
        let text = err.to_string();
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("127.0.0.1:1: "), "{text}");
        assert!(text.contains("1 of 3 nodes, a majority of 2"), "{text}");
        assert_eq!(err.redis_kind(), Some(FailureKind::Connection));
        let wrong = LeaseError::WrongType { key: "k".into() };
        let all_wrong: Vec<_> = (0..3).map(|i| (i, wrong.clone())).collect();
        assert_eq!(c.unavailable("acquire", 0, &all_wrong), wrong);
    }
}
