//! A sharded election's leases on one Redis (README, "Shards"): shard `s` is a lease of its
//! own over `<prefix>{<name>}:shard:<s>`, run by the election's scripts and fenced from its
//! one counter; a missing counter quarantines every shard at once (the placeholder is the
//! election's `:quarantine` key, which every shard's acquire and read look at). Besides: one
//! renew of every shard a replica owns (`lua/shard_renew.lua`) and one read of every shard.

use std::time::{Duration, SystemTime};

use futures::TryFutureExt;
use redis::{FromRedisValue, ParsingError, Script, Value};
use tokio::time::Instant;

use super::ops::{observed_of, LeaseFields};
use super::reply::not_replicated;
use super::{LeaseClient, LeaseError, LeaseSpec, Observed, Term};
use crate::connector::invoke;
use crate::lease::acl::LeaseScript;

static SHARD_RENEW: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(include_str!("../../lua/shard_renew.lua")));

/// Which shard a client's lease is, and the election's quarantine key.
#[derive(Debug, Clone)]
pub(crate) struct ShardOf {
    pub(crate) index: u32,
    pub(crate) quarantine: String,
}

/// A term of one shard held by this replica.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardTerm {
    /// The shard.
    pub shard: u32,
    /// Its term: token, fence (from the election's one counter), validity.
    pub term: Term,
}

/// What one renew of every owned shard ([`LeaseClient::renew_shards`]) did to one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardRenewal {
    /// Extended: the term's validity moved forward, counted from when the renew was sent.
    Renewed,
    /// The shard's lease is gone or another term's: step down for it at once.
    Lost,
    /// Neither (Redlock: not extended on a majority, nor gone on one): the shard keeps its
    /// validity and deadline; a later renew may confirm it.
    Unconfirmed,
}

impl LeaseSpec {
    /// Shard `shard`'s lease key: `<prefix>{<name>}:shard:<shard>`, the hash tag of `:lock`.
    pub fn shard_key(&self, shard: u32) -> String {
        format!("{}{{{}}}:shard:{shard}", self.key_prefix, self.name)
    }

    /// The key that quarantines every shard of the election after the fence counter was
    /// found missing (docs/protocol.md#quarantine): `<prefix>{<name>}:quarantine`.
    pub fn quarantine_key(&self) -> String {
        format!("{}{{{}}}:quarantine", self.key_prefix, self.name)
    }
}

impl LeaseClient {
    /// Shard `shard`'s lease, over this client's connection: a [`super::Lease`] with every
    /// rule of one lease (fence from the election's counter, validity, reserved release,
    /// observe), whose announcements carry `"shard"`.
    pub fn shard(&self, shard: u32) -> LeaseClient {
        let mut client = self.for_lease(self.spec.clone());
        client.keys.lock = self.spec.shard_key(shard);
        client.shard = Some(ShardOf {
            index: shard,
            quarantine: self.spec.quarantine_key(),
        });
        client
    }

    /// The shard this client's lease is, if it is one ([`Self::shard`]).
    pub fn shard_index(&self) -> Option<u32> {
        self.shard.as_ref().map(|s| s.index)
    }

    /// Renews every shard in `owned` with one script call: each still held by its term is
    /// extended by a full lease and its validity moved forward; the others are reported
    /// [`ShardRenewal::Lost`] (in the order of `owned`).
    ///
    /// # Errors
    /// `Unavailable` (then no validity moved), `WrongType`, or `Protocol` for a reply of
    /// another length.
    pub async fn renew_shards(
        &self,
        owned: &mut [ShardTerm],
        budget: Duration,
    ) -> Result<Vec<ShardRenewal>, LeaseError> {
        let Some(first) = owned.first() else {
            return Ok(Vec::new());
        };
        let first = self.spec.shard_key(first.shard);
        let (sent, sent_wall) = (Instant::now(), SystemTime::now());
        let mut call = SHARD_RENEW.prepare_invoke();
        for owned in owned.iter() {
            call.key(self.spec.shard_key(owned.shard));
        }
        call.arg(self.ttl_ms());
        for owned in owned.iter() {
            call.arg(&owned.term.token);
        }
        let (endpoint, timeout) = (&*self.endpoint, Some(budget));
        let wanted = endpoint.min_replicas_ack();
        let (extended, acked): (Vec<i64>, Option<i64>) = endpoint
            .call(timeout, |mut c| async move {
                let extended: Vec<i64> = invoke(&mut c, &call).await?;
                if wanted == 0 || !extended.contains(&1) {
                    return Ok((extended, None));
                }
                let budget = endpoint.wait_budget(timeout, sent);
                let acked = c.wait_for_replicas(wanted, budget, &first).await?;
                Ok((extended, Some(acked.unwrap_or(-1))))
            })
            .or_else(|f| async {
                let shards = owned.iter().map(|o| o.shard);
                match self.foreign_shard(&f, shards).await {
                    Some(err) => Err(err),
                    None => self.fail(f, LeaseScript::ShardRenew).await,
                }
            })
            .await?;
        if extended.len() != owned.len() {
            return Err(LeaseError::Protocol(format!(
                "a renew of {} shards answered {} results",
                owned.len(),
                extended.len()
            )));
        }
        if let Some(got) = acked.filter(|&n| n < i64::from(wanted)) {
            self.endpoint.reset().await;
            let outcome = "the renew does not count (no shard's validity was extended)";
            return Err(not_replicated(wanted, got, outcome));
        }
        let validity = self.spec.validity();
        let renewed = owned.iter_mut().zip(extended).map(|(owned, extended)| {
            if extended != 1 {
                return ShardRenewal::Lost;
            }
            owned.term.renewed(sent, sent_wall, validity);
            ShardRenewal::Renewed
        });
        Ok(renewed.collect())
    }

    /// The identities whose registry entry was refreshed at or after `since_ms` (Redis time),
    /// from the registry's index by `seen_at_ms` (at most twice [`super::MAX_CANDIDATES`]).
    pub(crate) async fn candidates_seen_since(
        &self,
        since_ms: u64,
        budget: Duration,
    ) -> Result<Vec<String>, LeaseError> {
        let index = self.keys.candidates_index.clone();
        let limit = 2 * super::MAX_CANDIDATES;
        self.endpoint
            .call(Some(budget), |mut c| async move {
                redis::cmd("ZRANGEBYSCORE")
                    .arg(&index)
                    .arg(since_ms)
                    .arg("+inf")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit)
                    .query_async(&mut c)
                    .await
            })
            .await
            .map_err(|f| self.lift(f))
    }

    /// Shards `0..count` as they are in Redis, read in one round trip (a vacant shard is
    /// [`Observed::Quarantined`] while the election's quarantine stands).
    ///
    /// # Errors
    /// `Unavailable`, or `Protocol` for a reply of another shape.
    pub async fn read_shards(
        &self,
        count: u32,
        budget: Duration,
    ) -> Result<Vec<Observed>, LeaseError> {
        self.observe_shards(0..count, budget).await
    }

    /// The given shards (and the election's quarantine) in one pipeline.
    pub(crate) async fn observe_shards(
        &self,
        shards: impl Iterator<Item = u32> + Clone,
        budget: Duration,
    ) -> Result<Vec<Observed>, LeaseError> {
        let asked = shards.clone();
        let mut pipe = redis::pipe();
        let quarantine = self.spec.quarantine_key();
        pipe.cmd("HMGET").arg(&quarantine).arg("fence");
        pipe.cmd("PTTL").arg(&quarantine);
        for shard in shards {
            let key = self.spec.shard_key(shard);
            pipe.cmd("HMGET").arg(&key).arg(&[
                "holder",
                "fence",
                "address",
                "reserved_for",
                "confirmed",
            ]);
            pipe.cmd("PTTL").arg(&key);
        }
        let replies: Vec<Value> = match self
            .endpoint
            .call(Some(budget), |mut c| async move {
                pipe.query_async(&mut c).await
            })
            .await
        {
            Ok(replies) => replies,
            Err(f) => return Err(self.foreign_shard(&f, asked).await.unwrap_or(self.lift(f))),
        };
        let bad = |e: ParsingError| LeaseError::Protocol(format!("a shard read: {e}"));
        let mut pairs = replies.chunks_exact(2);
        let Some([q_fence, q_ttl]) = pairs.next() else {
            return Err(LeaseError::Protocol("an empty shard read".into()));
        };
        let (q_fence,): (Option<u64>,) =
            FromRedisValue::from_redis_value_ref(q_fence).map_err(bad)?;
        let q_ttl = i64::from_redis_value_ref(q_ttl).map_err(bad)?;
        let quarantined = (q_ttl != -2).then(|| Observed::Quarantined {
            fence: q_fence.unwrap_or(0),
            remaining: (q_ttl >= 0).then(|| Duration::from_millis(q_ttl as u64)),
        });
        pairs
            .map(|pair| {
                let fields = LeaseFields::from_redis_value_ref(&pair[0]).map_err(bad)?;
                let ttl = i64::from_redis_value_ref(&pair[1]).map_err(bad)?;
                Ok(match (observed_of(fields, ttl), &quarantined) {
                    (Observed::Vacant, Some(q)) => q.clone(),
                    (seen, _) => seen,
                })
            })
            .collect()
    }

    /// After a `WRONGTYPE` from a call over `shards`: the error naming the key in the way,
    /// looked for among those shards' keys, the quarantine and the election's keys (none for
    /// another failure, or when no key can be told).
    async fn foreign_shard(
        &self,
        failure: &crate::conn::RedisFailure,
        shards: impl Iterator<Item = u32>,
    ) -> Option<LeaseError> {
        if failure.code.as_deref() != Some("WRONGTYPE") {
            return None;
        }
        let mut expected = vec![(self.spec.quarantine_key(), "hash")];
        expected.extend(shards.map(|s| (self.spec.shard_key(s), "hash")));
        expected.extend(super::foreign::election_keys(&self.keys));
        let budget = Some(self.spec.command_timeout());
        let key = super::foreign::foreign_among(&self.endpoint, expected, budget).await?;
        Some(LeaseError::WrongType { key })
    }
}
