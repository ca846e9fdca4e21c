//! The lease's vocabulary: its spec and keys, a term, a holder, the outcome of an acquire,
//! the errors; and the term token and timestamps.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::Rng;
use tokio::time::Instant;

use crate::conn::{FailureKind, RedisFailure};

/// What identifies one lease and how long a term lasts: [`LeaseSpec::new`] with the
/// defaults, the `with_` methods change one.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseSpec {
    /// The election name; it becomes the `{name}` hash tag of every key.
    pub(crate) name: String,
    /// Prefix of every key, `leaderd:` by default.
    pub(crate) key_prefix: String,
    /// Who is asking: written as `holder` in the lease so others can see who leads.
    pub(crate) holder: String,
    /// TTL of the lease in Redis.
    pub(crate) lease_duration: Duration,
    /// Timeout of a single command when the caller gives none.
    pub(crate) command_timeout: Duration,
    /// Timeout of connecting to Redis.
    pub(crate) connect_timeout: Duration,
    /// The address this holder advertises to the others while it holds the lease (stored
    /// as the lease's `address` field), e.g. for a proxy to reach the leader.
    pub(crate) address: Option<String>,
    /// How often the release subscription is checked (the daemon's `retry_period`): it is
    /// PINGed this often, each PING given half of it to answer, so a silently dead
    /// subscription is noticed within one and a half of it; a follower relies on the
    /// subscription only while it answers.
    pub(crate) release_check: Duration,
}

impl LeaseSpec {
    /// A spec with the default prefix and timeouts (500ms per command, 1s to connect), the
    /// release subscription checked every `lease_duration * 2 / 15` (2 s for 15 s).
    pub fn new(name: &str, holder: &str, lease_duration: Duration) -> Self {
        LeaseSpec {
            name: name.to_owned(),
            key_prefix: "leaderd:".to_owned(),
            holder: holder.to_owned(),
            lease_duration,
            command_timeout: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(1),
            address: None,
            release_check: lease_duration * 2 / 15,
        }
    }

    /// Prefix of every key (`leaderd:` by default).
    pub fn with_key_prefix(mut self, key_prefix: &str) -> Self {
        self.key_prefix = key_prefix.to_owned();
        self
    }

    /// The timeout of a single command when the caller gives none.
    pub fn with_command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// The timeout of connecting to Redis.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The address this holder advertises to the others while it holds the lease (the
    /// lease's `address` field), e.g. for a proxy to reach the leader.
    pub fn with_address(mut self, address: &str) -> Self {
        self.address = Some(address.to_owned());
        self
    }

    /// How often the release subscription is checked: PINGed this often, each PING given
    /// half of it to answer (the daemon uses its `retry_period`).
    pub fn with_release_check(mut self, every: Duration) -> Self {
        self.release_check = every;
        self
    }

    /// The election name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Who is asking: the `holder` written in the lease.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The TTL of the lease in Redis.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// The timeout of a single command when the caller gives none.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// The address this holder advertises, if any.
    pub fn address(&self) -> Option<&str> {
        self.address.as_deref()
    }

    /// The keys of this lease; they share one hash tag so the scripts run on Redis Cluster.
    pub fn keys(&self) -> LeaseKeys {
        let base = format!("{}{{{}}}", self.key_prefix, self.name);
        LeaseKeys {
            lock: format!("{base}:lock"),
            fence: format!("{base}:fence"),
            released: format!("{base}:released"),
            candidates: format!("{base}:candidates"),
            candidates_index: format!("{base}:candidates:seen"),
            candidates_state: format!("{base}:candidates:state"),
            control: format!("{base}:control"),
            handover: format!("{base}:handover"),
        }
    }

    /// The clock drift allowance: 1% of the lease plus 2ms, as redlock-rb uses.
    pub fn drift(&self) -> Duration {
        drift(self.lease_duration)
    }

    /// How long a grant or renew counts from when it was sent: the lease less the drift.
    pub(crate) fn validity(&self) -> Duration {
        self.lease_duration.saturating_sub(self.drift())
    }
}

/// `lease_duration * 0.01 + 2ms`: how much earlier than Redis a client must consider the
/// lease gone, to allow for the two clocks running at slightly different rates.
pub(super) fn drift(lease_duration: Duration) -> Duration {
    lease_duration / 100 + Duration::from_millis(2)
}

/// The Redis keys of one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseKeys {
    /// The lease hash (`holder`, `token`, `fence`, `acquired_at_ms`) with the lease TTL.
    pub lock: String,
    /// The fencing counter, without TTL.
    pub fence: String,
    /// The channel a release is published on.
    pub released: String,
    /// The candidates' registry (a hash: identity -> JSON entry).
    pub candidates: String,
    /// The registry's index (a sorted set: identity -> `seen_at_ms`).
    pub candidates_index: String,
    /// The registry's version and cleanup cursor (a hash).
    pub candidates_state: String,
    /// The channel handover requests and refusals are published on.
    pub control: String,
    /// A pending handover request (a hash `id`, `to`, `by` with the request's TTL).
    pub handover: String,
}

impl LeaseKeys {
    /// The channel on which a reserved release is told to `successor` alone, before it is
    /// published on [`Self::released`] (so the successor acquires before the others wake).
    pub fn successor_channel(&self, successor: &str) -> String {
        format!("{}:{successor}", self.released)
    }
}

/// One term of leadership held by this client.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
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
    /// Takes in a renew sent at `sent` (`sent_wall` on the wall clock) that counted.
    pub(crate) fn renewed(&mut self, sent: Instant, sent_wall: SystemTime, validity: Duration) {
        self.last_sent = sent;
        self.valid_until = sent + validity;
        self.valid_until_wall = sent_wall + validity;
    }

    /// True while the lease is certainly still ours.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }

    /// Time left until `valid_until`, zero once it has passed.
    pub fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// A term known only by its token (and fence), already invalid: to release a grant
    /// this replica never claimed.
    pub(crate) fn unclaimed(token: &str, fence: u64) -> Term {
        Term {
            token: token.to_owned(),
            fence,
            acquired_at: SystemTime::now(),
            last_sent: Instant::now(),
            valid_until: Instant::now(),
            valid_until_wall: SystemTime::now(),
        }
    }
}

/// A reserved release: the lease is kept for `successor` alone for `window` (`handover_window`,
/// docs/protocol.md#handover-window), so that only it contends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reservation<'a> {
    /// The identity that alone may acquire the lease within the window.
    pub successor: &'a str,
    /// How long the reservation stands.
    pub window: std::time::Duration,
}

impl<'a> Reservation<'a> {
    /// The lease kept for `successor` alone for `window`.
    pub fn new(successor: &'a str, window: Duration) -> Self {
        Reservation { successor, window }
    }
}

/// The holder of a lease, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's identity.
    pub holder: String,
    /// The holder's fencing token.
    pub fence: u64,
    /// Time until the lease expires in Redis; `None` when the key has no TTL.
    pub remaining: Option<Duration>,
    /// The address the holder advertises (`LeaseSpec::address`), if any.
    pub address: Option<String>,
}

/// What a backend sees of a lease without contending for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// Nobody holds the lease: an acquire can win now.
    Vacant,
    /// A placeholder that grants nothing until it expires: after a data loss or a first start
    /// (docs/protocol.md#quarantine), or, on Redlock, a split where no holder can have a majority.
    Quarantined {
        /// The seeded counter (the highest fence seen, on Redlock).
        fence: u64,
        /// Time until it expires; `None` when the key has no TTL.
        remaining: Option<Duration>,
    },
    /// A term holds the lease.
    Held(Holder),
    /// A leader released the lease for a successor: only `for_identity` may acquire it
    /// until it expires.
    Reserved {
        /// The successor.
        for_identity: String,
        /// The fencing counter's value when it was reserved.
        fence: u64,
        /// Time until the reservation expires; `None` when the key has no TTL.
        remaining: Option<Duration>,
    },
}

impl Observed {
    /// The holder, when a term holds the lease.
    pub fn holder(&self) -> Option<&Holder> {
        match self {
            Observed::Held(h) => Some(h),
            _ => None,
        }
    }

    /// Time until the lease may be free: zero when vacant, `None` when the key has no TTL.
    pub fn remaining(&self) -> Option<Duration> {
        match self {
            Observed::Vacant => Some(Duration::ZERO),
            Observed::Quarantined { remaining, .. } | Observed::Reserved { remaining, .. } => {
                *remaining
            }
            Observed::Held(h) => h.remaining,
        }
    }

    /// The lease as one hash of `lua/acquire.lua`: `holder`, `fence`, `address`,
    /// `reserved_for`, and its PTTL in ms (negative: no TTL).
    pub(crate) fn from_fields(
        holder: String,
        fence: u64,
        address: String,
        reserved_for: String,
        ttl_ms: i64,
    ) -> Self {
        let remaining = (ttl_ms >= 0).then(|| Duration::from_millis(ttl_ms as u64));
        if !holder.is_empty() {
            Observed::Held(Holder {
                holder,
                fence,
                remaining,
                address: (!address.is_empty()).then_some(address),
            })
        } else if !reserved_for.is_empty() {
            Observed::Reserved {
                for_identity: reserved_for,
                fence,
                remaining,
            }
        } else {
            Observed::Quarantined { fence, remaining }
        }
    }
}

impl std::fmt::Display for Observed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: &Option<Duration>| d.map_or(-1, |d| d.as_millis() as i64);
        match self {
            Observed::Vacant => write!(f, "vacant"),
            Observed::Quarantined { fence, remaining } => {
                write!(f, "quarantined (fence {fence}, {}ms left)", ms(remaining))
            }
            Observed::Held(h) => write!(
                f,
                "held by {} (fence {}, {}ms left)",
                h.holder,
                h.fence,
                ms(&h.remaining)
            ),
            Observed::Reserved {
                for_identity,
                remaining,
                ..
            } => write!(f, "reserved for {for_identity} ({} ms left)", ms(remaining)),
        }
    }
}

/// The outcome of one acquire attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Acquire {
    /// The lease is ours for a new term.
    Acquired(Term),
    /// The lease is not ours: what the attempt saw instead (held, quarantined, reserved).
    Denied(Observed),
}

/// Errors of lease operations, each one a caller can act on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The lease is held by someone else (from [`crate::lock::Locker::try_lock`]).
    #[error("lease is {0}")]
    Held(Observed),
    /// The lease no longer belongs to this term: it expired or was taken over.
    #[error("lease lost: it is no longer held by this term")]
    Lost,
    /// Redis could not be reached or answered with an error.
    #[error("Redis unavailable: {0}")]
    Unavailable(RedisFailure),
    /// Waiting for the lease ran past the caller's deadline.
    #[error("timed out waiting for the lease")]
    Timeout {
        /// What the last attempt saw, if anyone answered.
        last_seen: Option<Observed>,
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

/// A new random term token: 128 bits as 32 hex digits.
pub(crate) fn new_token() -> String {
    let mut token = String::with_capacity(32);
    push_token(&mut token);
    token
}

/// Appends a new token ([`new_token`]) to `out`.
pub(crate) fn push_token(out: &mut String) {
    use std::fmt::Write;
    let bits: u128 = rand::rng().random();
    let _ = write!(out, "{bits:032x}");
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms(t: SystemTime) -> u64 {
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
}
