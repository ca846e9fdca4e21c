//! The lease primitive: one named lease in Redis that only its holder can extend or release,
//! with fencing tokens, held through the three Lua scripts in `lua/`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), leaderd::lease::LeaseError> {
//! use std::time::Duration;
//! use leaderd::lease::{Acquire, LeaseClient, LeaseSpec};
//!
//! let spec = LeaseSpec::new("orders-scheduler", "pod-a", Duration::from_secs(15));
//! let lease = LeaseClient::connect("redis://127.0.0.1:6379/0", spec)?;
//! match lease.try_acquire().await? {
//!     Acquire::Acquired(mut term) => {
//!         // Work guarded by term.fence, only while term.is_valid().
//!         lease.renew(&mut term, None).await?;
//!         lease.release(&term).await?;
//!     }
//!     Acquire::Held(holder) => println!("held by {:?} for {:?}", holder.holder, holder.remaining),
//! }
//! # Ok(()) }
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::Rng;
use redis::{Client, Script};
use tokio::sync::watch;
use tokio::time::Instant;

use futures::TryFutureExt;

use crate::acl::LeaseScript;
use crate::conn::{Endpoint, FailureKind, RedisFailure};
use crate::connector::Connector;

/// What identifies one lease and how long a term lasts.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseSpec {
    /// The election name; it becomes the `{name}` hash tag of every key.
    pub name: String,
    /// Prefix of every key, `leaderd:` by default.
    pub key_prefix: String,
    /// Who is asking: written as `holder` in the lease so others can see who leads.
    pub holder: String,
    /// TTL of the lease in Redis.
    pub lease_duration: Duration,
    /// Timeout of a single command when the caller gives none.
    pub command_timeout: Duration,
    /// Timeout of connecting to Redis.
    pub connect_timeout: Duration,
}

impl LeaseSpec {
    /// A spec with the default prefix and timeouts (500ms per command, 1s to connect).
    pub fn new(name: &str, holder: &str, lease_duration: Duration) -> Self {
        LeaseSpec {
            name: name.to_owned(),
            key_prefix: "leaderd:".to_owned(),
            holder: holder.to_owned(),
            lease_duration,
            command_timeout: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(1),
        }
    }

    /// The keys of this lease; they share one hash tag so the scripts run on Redis Cluster.
    pub fn keys(&self) -> LeaseKeys {
        let base = format!("{}{{{}}}", self.key_prefix, self.name);
        LeaseKeys {
            lock: format!("{base}:lock"),
            fence: format!("{base}:fence"),
            released: format!("{base}:released"),
        }
    }

    /// The clock drift allowance: 1% of the lease plus 2ms, as redlock-rb uses.
    pub fn drift(&self) -> Duration {
        drift(self.lease_duration)
    }
}

/// `lease_duration * 0.01 + 2ms`: how much earlier than Redis a client must consider the
/// lease gone, to allow for the two clocks running at slightly different rates.
pub fn drift(lease_duration: Duration) -> Duration {
    lease_duration / 100 + Duration::from_millis(2)
}

/// The Redis keys of one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseKeys {
    /// The lease hash (`holder`, `token`, `fence`, `acquired_at_ms`) with the lease TTL.
    pub lock: String,
    /// The fencing counter, without TTL.
    pub fence: String,
    /// The channel a release is published on.
    pub released: String,
}

/// One term of leadership held by this client.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    /// Random per term; only its owner can renew or release.
    pub token: String,
    /// The fencing token: strictly larger than every earlier term's.
    pub fence: u64,
    /// When the reply that granted the lease arrived (wall clock, for publishing).
    pub acquired_at: SystemTime,
    /// When the last successful acquire or renew was sent (monotonic).
    pub last_sent: Instant,
    /// Before this instant no one else can hold the lease: `last_sent + lease - drift`.
    pub valid_until: Instant,
    /// `valid_until` on the wall clock, for publishing.
    pub valid_until_wall: SystemTime,
}

impl Term {
    /// True while the lease is certainly still ours.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }

    /// Time left until `valid_until`, zero once it has passed.
    pub fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }
}

/// Who holds a lease, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The holder's identity; `None` while the lease is quarantined after a data loss or a
    /// first start.
    pub holder: Option<String>,
    /// The holder's fencing token (the seeded counter during quarantine).
    pub fence: u64,
    /// Time until the lease expires in Redis; `None` when the key has no TTL.
    pub remaining: Option<Duration>,
}

impl Holder {
    /// True while the lease is a placeholder that grants nothing (see the contract).
    pub fn is_quarantined(&self) -> bool {
        self.holder.is_none()
    }
}

/// The outcome of one acquire attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Acquire {
    /// The lease is ours for a new term.
    Acquired(Term),
    /// Someone else holds it (or it is quarantined).
    Held(Holder),
}

/// Errors of lease operations, each one a caller can act on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LeaseError {
    /// The lease is held by someone else (from [`crate::lock::Locker::try_lock`]).
    #[error("lease is held by {} (fence {}, {}ms left)", .0.holder.as_deref().unwrap_or("nobody: quarantined"), .0.fence, .0.remaining.map_or(-1, |d| d.as_millis() as i64))]
    Held(Holder),
    /// The lease no longer belongs to this term: it expired or was taken over.
    #[error("lease lost: it is no longer held by this term")]
    Lost,
    /// Redis could not be reached or answered with an error.
    #[error("Redis unavailable: {0}")]
    Unavailable(RedisFailure),
    /// Waiting for the lease ran past the caller's deadline.
    #[error("timed out waiting for the lease")]
    Timeout {
        /// Who held it at the last attempt, if anyone answered.
        last_holder: Option<Holder>,
    },
    /// The lease key holds data that is not ours (another type under our name).
    #[error("key {key} holds a value of another type; leaderd will not touch it (delete or rename it, or change redis.key_prefix or name)")]
    WrongType {
        /// The key in the way.
        key: String,
    },
    /// A reply that the scripts cannot have produced.
    #[error("unexpected reply from Redis: {0}")]
    Protocol(String),
}

impl LeaseError {
    /// The `kind` label to count this error under in `leaderd_redis_errors_total`, if it
    /// is a Redis error.
    pub fn redis_kind(&self) -> Option<FailureKind> {
        match self {
            LeaseError::Unavailable(f) => Some(f.kind),
            LeaseError::WrongType { .. } => Some(FailureKind::Script),
            LeaseError::Protocol(_) => Some(FailureKind::Other),
            _ => None,
        }
    }
}

/// Client for one lease on one Redis endpoint.
pub struct LeaseClient {
    spec: LeaseSpec,
    keys: LeaseKeys,
    endpoint: std::sync::Arc<Endpoint>,
    acquire: Script,
    renew: Script,
    release: Script,
}

impl LeaseClient {
    /// A client for the lease `spec` on the Redis at `url` (`redis://`, `rediss://` or
    /// `unix://`). Nothing is sent until the first operation.
    ///
    /// # Errors
    /// [`LeaseError::Unavailable`] when the URL cannot be parsed.
    pub fn connect(url: &str, spec: LeaseSpec) -> Result<Self, LeaseError> {
        let client = Client::open(url).map_err(|_| {
            LeaseError::Unavailable(RedisFailure {
                kind: FailureKind::Other,
                cause: "invalid Redis URL (expected redis://, rediss:// or unix://)".into(),
                code: None,
            })
        })?;
        Ok(Self::with_client(client, spec))
    }

    /// A client over an already configured `redis::Client` (credentials, TLS).
    pub fn with_client(client: Client, spec: LeaseSpec) -> Self {
        let endpoint = Endpoint::new(client, spec.connect_timeout, spec.command_timeout);
        Self::with_endpoint(endpoint, spec)
    }

    /// A client whose connections come from `connector` (one server, the Sentinel master, a
    /// cluster). With `min_replicas_ack > 0` an acquire or renew counts only after that many
    /// replicas acknowledged it (`WAIT`); an unacknowledged acquire is undone and reported as
    /// [`LeaseError::Unavailable`] of kind timeout, an unacknowledged renew leaves the term's
    /// validity as it was.
    pub fn with_connector(connector: Connector, spec: LeaseSpec, min_replicas_ack: u32) -> Self {
        let endpoint =
            Endpoint::with_connector(connector, spec.connect_timeout, spec.command_timeout)
                .with_min_replicas_ack(min_replicas_ack);
        Self::with_endpoint(endpoint, spec)
    }

    fn with_endpoint(endpoint: Endpoint, spec: LeaseSpec) -> Self {
        let endpoint = endpoint.into();
        LeaseClient {
            keys: spec.keys(),
            spec,
            endpoint,
            acquire: Script::new(include_str!("../lua/acquire.lua")),
            renew: Script::new(include_str!("../lua/renew.lua")),
            release: Script::new(include_str!("../lua/release.lua")),
        }
    }

    /// A client for another lease over this client's connection (and its timeouts): many
    /// leases, e.g. a [`crate::lock::Locker`] per resource, on one multiplexed connection.
    pub fn for_lease(&self, spec: LeaseSpec) -> LeaseClient {
        LeaseClient {
            keys: spec.keys(),
            spec,
            endpoint: self.endpoint.clone(),
            acquire: self.acquire.clone(),
            renew: self.renew.clone(),
            release: self.release.clone(),
        }
    }

    /// The spec this client was made with.
    pub fn spec(&self) -> &LeaseSpec {
        &self.spec
    }

    /// The keys of the lease.
    pub fn keys(&self) -> &LeaseKeys {
        &self.keys
    }

    /// The Redis endpoint, to run other scripts on the same connection (Redlock).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn ttl_ms(&self) -> u64 {
        self.spec.lease_duration.as_millis() as u64
    }

    /// A failed script call as the error to return, naming the ACL permission it lacked
    /// when that is why it failed.
    async fn fail<T>(&self, failure: RedisFailure, script: LeaseScript) -> Result<T, LeaseError> {
        let failure = crate::acl::explain(&self.endpoint, &self.keys, script, failure).await;
        Err(self.lift(failure))
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

    /// One attempt to take the lease for a new term, answering who holds it otherwise.
    /// Runs by SHA, loading the script on NOSCRIPT.
    ///
    /// # Errors
    /// `Unavailable` (with the cause) or `WrongType`.
    pub async fn try_acquire(&self) -> Result<Acquire, LeaseError> {
        self.try_acquire_within(None).await
    }

    /// [`try_acquire`](Self::try_acquire) with an explicit timeout.
    ///
    /// # Errors
    /// As `try_acquire`.
    pub async fn try_acquire_within(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Acquire, LeaseError> {
        self.try_acquire_with_token(new_token(), timeout).await
    }

    /// [`try_acquire_within`](Self::try_acquire_within) with a token the caller chose (it
    /// must be random, 128 bits or more, and new for every term): Redlock sends one token
    /// to every node of an attempt.
    ///
    /// # Errors
    /// As `try_acquire`.
    pub async fn try_acquire_with_token(
        &self,
        token: String,
        timeout: Option<Duration>,
    ) -> Result<Acquire, LeaseError> {
        let sent = Instant::now();
        let sent_wall = SystemTime::now();
        let mut call = self.acquire.prepare_invoke();
        call.key(&self.keys.lock)
            .key(&self.keys.fence)
            .arg(&self.spec.holder)
            .arg(&token)
            .arg(self.ttl_ms())
            .arg(unix_ms(sent_wall));
        let (endpoint, lock) = (&*self.endpoint, &self.keys.lock);
        let wanted = endpoint.min_replicas_ack();
        let (reply, acked): (redis::Value, Option<i64>) = endpoint
            .call(timeout, |mut c| async move {
                let reply: redis::Value = call.invoke_async(&mut c).await?;
                if wanted == 0 || !is_granted(&reply) {
                    return Ok((reply, None));
                }
                let budget = endpoint.wait_budget(timeout, sent);
                let acked = c.wait_for_replicas(wanted, budget, lock).await?;
                Ok((reply, Some(acked.unwrap_or(-1))))
            })
            .or_else(|f| self.fail(f, LeaseScript::Acquire))
            .await?;
        let acquired_at = SystemTime::now();
        match parse_acquire(reply)? {
            AcquireReply::Granted(fence) => {
                let validity = self.spec.lease_duration.saturating_sub(self.spec.drift());
                let term = Term {
                    token,
                    fence,
                    acquired_at,
                    last_sent: sent,
                    valid_until: sent + validity,
                    valid_until_wall: sent_wall + validity,
                };
                if let Some(got) = acked.filter(|&n| n < i64::from(wanted)) {
                    // Not durable: a failover now could lose it. It does not count; take it
                    // back so that it does not block the election for a lease duration. On a
                    // new connection: this one may still be blocked in the WAIT, or talk to a
                    // master that a failover left behind.
                    self.endpoint.reset().await;
                    let outcome = match self.release_within(&term, None).await {
                        Ok(_) => "the acquire does not count and was undone".to_string(),
                        Err(e) => format!(
                            "the acquire does not count; undoing it failed ({e}), so the lease expires by itself"
                        ),
                    };
                    return Err(not_replicated(wanted, got, &outcome));
                }
                Ok(Acquire::Acquired(term))
            }
            AcquireReply::Held(holder) => Ok(Acquire::Held(holder)),
        }
    }

    /// Extends the term's lease by a full lease duration if it is still ours, and moves
    /// `term.valid_until` forward (counted from when this renew was sent).
    ///
    /// # Errors
    /// `Lost` when the lease is gone or another term's; `Unavailable` or `WrongType`
    /// otherwise. On error `term` is unchanged.
    pub async fn renew(
        &self,
        term: &mut Term,
        timeout: Option<Duration>,
    ) -> Result<(), LeaseError> {
        let sent = Instant::now();
        let sent_wall = SystemTime::now();
        let mut call = self.renew.prepare_invoke();
        call.key(&self.keys.lock)
            .arg(&term.token)
            .arg(self.ttl_ms());
        let (endpoint, lock) = (&*self.endpoint, &self.keys.lock);
        let wanted = endpoint.min_replicas_ack();
        let (extended, acked): (i64, Option<i64>) = endpoint
            .call(timeout, |mut c| async move {
                let extended: i64 = call.invoke_async(&mut c).await?;
                if wanted == 0 || extended != 1 {
                    return Ok((extended, None));
                }
                let budget = endpoint.wait_budget(timeout, sent);
                let acked = c.wait_for_replicas(wanted, budget, lock).await?;
                Ok((extended, Some(acked.unwrap_or(-1))))
            })
            .or_else(|f| self.fail(f, LeaseScript::Renew))
            .await?;
        if extended != 1 {
            return Err(LeaseError::Lost);
        }
        if let Some(got) = acked.filter(|&n| n < i64::from(wanted)) {
            self.endpoint.reset().await;
            return Err(not_replicated(
                wanted,
                got,
                "the renew does not count (the validity was not extended)",
            ));
        }
        let validity = self.spec.lease_duration.saturating_sub(self.spec.drift());
        term.last_sent = sent;
        term.valid_until = sent + validity;
        term.valid_until_wall = sent_wall + validity;
        Ok(())
    }

    /// Deletes the lease if it is still this term's, and publishes the release so waiting
    /// candidates contend at once. Returns false when it was no longer ours.
    ///
    /// # Errors
    /// `Unavailable` or `WrongType`.
    pub async fn release(&self, term: &Term) -> Result<bool, LeaseError> {
        self.release_within(term, None).await
    }

    /// [`release`](Self::release) with an explicit timeout.
    ///
    /// # Errors
    /// As `release`.
    pub async fn release_within(
        &self,
        term: &Term,
        timeout: Option<Duration>,
    ) -> Result<bool, LeaseError> {
        let mut call = self.release.prepare_invoke();
        call.key(&self.keys.lock)
            .key(&self.keys.released)
            .arg(&term.token)
            .arg(&self.spec.holder);
        let released: i64 = self
            .endpoint
            .call(
                timeout,
                |mut c| async move { call.invoke_async(&mut c).await },
            )
            .or_else(|f| self.fail(f, LeaseScript::Release))
            .await?;
        Ok(released == 1)
    }

    /// Who holds the lease right now, without trying to take it. `None` when it is free.
    ///
    /// # Errors
    /// `Unavailable` or `WrongType`.
    pub async fn observe(&self) -> Result<Option<Holder>, LeaseError> {
        let lock = self.keys.lock.clone();
        let (fields, ttl): ((Option<String>, Option<u64>), i64) = self
            .endpoint
            .call(None, |mut c| async move {
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
            .await
            .map_err(|f| self.lift(f))?;
        if ttl == -2 {
            return Ok(None);
        }
        Ok(Some(holder_from(
            fields.0.unwrap_or_default(),
            fields.1.unwrap_or(0),
            ttl,
        )))
    }

    /// Subscribes to the release channel. The returned watch changes on every release (and on
    /// every resubscription, since a release may have been missed meanwhile).
    pub fn watch_releases(&self) -> ReleaseWatch {
        let (tx, rx) = watch::channel(0u64);
        let connector = self.endpoint.connector().clone();
        let channel = self.keys.released.clone();
        let timeout = self.endpoint.connect_timeout();
        let task = tokio::spawn(crate::release_watch::listen_with(
            connector, channel, timeout, tx,
        ));
        ReleaseWatch {
            rx,
            task: Some(task),
        }
    }

    /// Waits until the lease is ours or `deadline` passes. Between attempts it sleeps until
    /// the holder's lease runs out in Redis, or a jittered `retry` if sooner, and wakes at
    /// once when a release is published.
    ///
    /// # Errors
    /// `Timeout` (with the last holder seen) when the deadline passes; `WrongType` at once;
    /// Redis errors are retried until the deadline.
    pub async fn acquire(&self, deadline: Instant, retry: Duration) -> Result<Term, LeaseError> {
        wait_for_lease(self, deadline, retry).await
    }
}

/// The blocking acquire of any lease backend: attempts until the lease is ours or `deadline`
/// passes, sleeping until the holder's lease runs out (or a jittered `retry` if sooner) and
/// waking at once when a release is published.
///
/// # Errors
/// `Timeout` (with the last holder seen) when the deadline passes; `WrongType` at once;
/// Redis errors are retried until the deadline.
pub async fn wait_for_lease<B: crate::election::LeaseBackend>(
    lease: &B,
    deadline: Instant,
    retry: Duration,
) -> Result<Term, LeaseError> {
    let mut releases = lease.watch_releases();
    let mut last_holder = None;
    let mut failures = 0u32;
    loop {
        let wait = match lease.try_acquire(lease.attempt_timeout()).await {
            Ok(Acquire::Acquired(term)) => return Ok(term),
            Ok(Acquire::Held(holder)) => {
                failures = 0;
                let wait = wait_for_holder(&holder, jittered(retry, 0.2));
                last_holder = Some(holder);
                wait
            }
            Err(e @ LeaseError::WrongType { .. }) => return Err(e),
            Err(_) => {
                failures += 1;
                backoff(retry, failures)
            }
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(LeaseError::Timeout { last_holder });
        }
        tokio::select! {
            _ = tokio::time::sleep_until((now + wait).min(deadline)) => {}
            _ = releases.changed() => {}
        }
    }
}

/// How long a candidate waits before its next attempt when `holder` holds the lease: until
/// the lease expires in Redis (plus a millisecond) if that comes before `retry`.
pub fn wait_for_holder(holder: &Holder, retry: Duration) -> Duration {
    match holder.remaining {
        Some(left) => retry.min(left + Duration::from_millis(1)),
        None => retry,
    }
}

/// `base * (1 + U(0, jitter))`, so that candidates do not retry in lockstep.
pub fn jittered(base: Duration, jitter: f64) -> Duration {
    let factor = 1.0 + rand::rng().random_range(0.0..=jitter.max(0.0));
    base.mul_f64(factor)
}

/// Exponential backoff after `failures` failed attempts in a row: from `base / 8`, doubling,
/// never above `base`, jittered.
pub fn backoff(base: Duration, failures: u32) -> Duration {
    let step = (base / 8).saturating_mul(1 << failures.min(3).saturating_sub(1));
    jittered(step.min(base), 0.2).min(base)
}

/// Subscription to a lease's release channel, kept up in the background.
pub struct ReleaseWatch {
    rx: watch::Receiver<u64>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ReleaseWatch {
    /// A watch fed by some other source of release notifications (tests, other backends).
    pub fn from_receiver(rx: watch::Receiver<u64>) -> Self {
        ReleaseWatch { rx, task: None }
    }

    /// Resolves at the next release published (or resubscription). Never resolves if the
    /// listener has stopped.
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for ReleaseWatch {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// True when the acquire script granted the lease (`{1, fence}`).
fn is_granted(reply: &redis::Value) -> bool {
    matches!(reply, redis::Value::Array(items) if items.first() == Some(&redis::Value::Int(1)))
}

/// The error of a write that fewer than `redis.min_replicas_ack` replicas acknowledged in
/// time: counted as a Redis error of kind `timeout`.
/// `got` < 0: `WAIT` gave no answer in time.
fn not_replicated(wanted: u32, got: i64, outcome: &str) -> LeaseError {
    let answer = if got < 0 {
        "WAIT did not answer in time".to_string()
    } else {
        format!("WAIT answered {got}")
    };
    LeaseError::Unavailable(RedisFailure {
        kind: FailureKind::Timeout,
        cause: format!(
            "not acknowledged by redis.min_replicas_ack = {wanted} replicas in time ({answer}): {outcome}"
        ),
        code: None,
    })
}

enum AcquireReply {
    Granted(u64),
    Held(Holder),
}

fn parse_acquire(reply: redis::Value) -> Result<AcquireReply, LeaseError> {
    use redis::Value;
    let bad = |v: &Value| LeaseError::Protocol(format!("acquire script answered {v:?}"));
    let Value::Array(items) = &reply else {
        return Err(bad(&reply));
    };
    let int = |v: &Value| match v {
        Value::Int(i) => Some(*i),
        _ => None,
    };
    match (items.first().and_then(int), items.len()) {
        (Some(1), 2) => {
            let fence = int(&items[1]).ok_or_else(|| bad(&reply))?;
            Ok(AcquireReply::Granted(fence as u64))
        }
        (Some(0), 4) => {
            let holder = match &items[1] {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            };
            let fence = int(&items[2]).ok_or_else(|| bad(&reply))?;
            let ttl = int(&items[3]).ok_or_else(|| bad(&reply))?;
            Ok(AcquireReply::Held(holder_from(holder, fence as u64, ttl)))
        }
        _ => Err(bad(&reply)),
    }
}

fn holder_from(holder: String, fence: u64, ttl_ms: i64) -> Holder {
    Holder {
        holder: (!holder.is_empty()).then_some(holder),
        fence,
        remaining: (ttl_ms >= 0).then(|| Duration::from_millis(ttl_ms as u64)),
    }
}

/// A new random term token: 128 bits as 32 hex digits.
pub fn new_token() -> String {
    let bits: u128 = rand::rng().random();
    format!("{bits:032x}")
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = LeaseSpec::new("orders", "a", Duration::from_secs(15)).keys();
        assert_eq!(keys.lock, "leaderd:{orders}:lock");
        assert_eq!(keys.fence, "leaderd:{orders}:fence");
        assert_eq!(keys.released, "leaderd:{orders}:released");
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(15)), Duration::from_millis(152));
        assert_eq!(drift(Duration::from_secs(2)), Duration::from_millis(22));
    }

    #[test]
    fn tokens_are_128_bits_and_differ() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }

    #[test]
    fn a_waiting_candidate_wakes_at_expiry_when_sooner() {
        let holder = Holder {
            holder: Some("a".into()),
            fence: 1,
            remaining: Some(Duration::from_millis(40)),
        };
        assert_eq!(
            wait_for_holder(&holder, Duration::from_secs(2)),
            Duration::from_millis(41)
        );
        let no_ttl = Holder {
            remaining: None,
            ..holder
        };
        assert_eq!(
            wait_for_holder(&no_ttl, Duration::from_secs(2)),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn backoff_grows_and_stays_below_base() {
        let base = Duration::from_secs(2);
        assert!(backoff(base, 1) < backoff(base, 3));
        for n in 0..40 {
            assert!(backoff(base, n) <= base);
        }
    }
}
