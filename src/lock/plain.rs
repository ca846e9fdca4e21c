//! The plain lock: no fence, what rslock, redsync and Redisson's `RLock` offer (README,
//! "Library"). A string key (the lease's `:lock` key) holding `<holder>:<token>`, taken with
//! `SET NX PX`, renewed by compare-and-set and released by compare-and-delete, natively where
//! the server has them ([`super::native`]).

use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use redis::Script;
use tokio::time::Instant;

use super::native::{refused, Cmd, Native};
use crate::conn::{Endpoint, RedisFailure};
use crate::lease::{lifted, new_token};
use crate::lease::{Acquire, Heartbeat, Holder, Lease, LeaseClient, LeaseError, LeaseSpec};
use crate::lease::{Observed, ReleaseWatch, Reservation, Roster, Term};

static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/plain_renew.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/plain_release.lua")));

/// A lease without a fence, for [`crate::Locker::plain`]: cheaper than the fenced lease
/// (two commands a lock and unlock on Valkey 9, four on Redis 7.0, against ten), but a
/// holder that stalls past its TTL cannot be told apart from the next one by the resource it
/// writes to: use it where a rare overlap costs only duplicate work. [`Term::fence`] is 0.
///
/// Nothing is published when it is released: a waiting [`crate::Locker::lock`] tries again
/// every [`crate::WatchdogConfig::retry`], or when the holder's TTL runs out if sooner. The
/// key is the fenced lease's, so a plain and a fenced locker of one name exclude each other
/// (the other mode's key is reported as [`LeaseError::WrongType`]).
pub struct PlainLease {
    spec: LeaseSpec,
    key: String,
    endpoint: Arc<Endpoint>,
    native: Native,
}

impl PlainLease {
    /// The plain lock of `client`'s lease name, on its connection.
    pub fn new(client: LeaseClient) -> Self {
        PlainLease {
            key: client.keys().lock.clone(),
            spec: client.spec().clone(),
            endpoint: client.shared_endpoint(),
            native: Native::default(),
        }
    }

    fn ttl_ms(&self) -> u64 {
        self.spec.lease_duration.as_millis() as u64
    }

    async fn query<T: redis::FromRedisValue + Send>(
        &self,
        cmd: redis::Cmd,
        until: Instant,
    ) -> Result<T, RedisFailure> {
        let budget = until.saturating_duration_since(Instant::now());
        self.endpoint
            .call(Some(budget), |mut c| async move {
                cmd.query_async(&mut c).await
            })
            .await
    }

    async fn script(
        &self,
        script: &Script,
        args: &[&str],
        until: Instant,
    ) -> Result<i64, RedisFailure> {
        let mut call = script.prepare_invoke();
        call.key(&self.key);
        for a in args {
            call.arg(*a);
        }
        let budget = until.saturating_duration_since(Instant::now());
        self.endpoint
            .call(Some(budget), |mut c| async move {
                call.invoke_async(&mut c).await
            })
            .await
    }

    /// `cmd` where the server has it, else `fallback`; `Ok(None)` when it refused `cmd`.
    async fn native<T: redis::FromRedisValue + Send>(
        &self,
        which: Cmd,
        cmd: redis::Cmd,
        until: Instant,
    ) -> Result<Option<T>, RedisFailure> {
        if !self.native.may_try(which) {
            return Ok(None);
        }
        match self.query(cmd, until).await {
            Ok(v) => {
                if !self.native.works(which) {
                    self.native.learn(which, true);
                }
                Ok(Some(v))
            }
            Err(f) if refused(&f) => {
                self.native.learn(which, false);
                Ok(None)
            }
            Err(f) => Err(f),
        }
    }

    /// Compare-and-extend: 1 when extended.
    async fn extend(&self, value: &str, until: Instant) -> Result<i64, RedisFailure> {
        let mut set = redis::cmd("SET");
        set.arg(&self.key).arg(value).arg("IFEQ").arg(value);
        set.arg("PX").arg(self.ttl_ms());
        if let Some(done) = self
            .native::<Option<String>>(Cmd::SetIfeq, set, until)
            .await?
        {
            return Ok(i64::from(done.is_some()));
        }
        let ttl = self.ttl_ms().to_string();
        self.script(&RENEW, &[value, &ttl], until).await
    }

    /// Compare-and-delete: 1 when deleted.
    async fn delete(&self, value: &str, until: Instant) -> Result<i64, RedisFailure> {
        let mut delifeq = redis::cmd("DELIFEQ");
        delifeq.arg(&self.key).arg(value);
        if let Some(n) = self.native(Cmd::Delifeq, delifeq, until).await? {
            return Ok(n);
        }
        let mut delex = redis::cmd("DELEX");
        delex.arg(&self.key).arg("IFEQ").arg(value);
        if let Some(n) = self.native(Cmd::Delex, delex, until).await? {
            return Ok(n);
        }
        self.script(&RELEASE, &[value], until).await
    }

    /// A failure of a call on a term as its error; `Ok` when the key holds another type (a
    /// fenced lock took it): the term is gone.
    fn term_gone(&self, failure: RedisFailure) -> Result<(), LeaseError> {
        match failure.code.as_deref() {
            Some("WRONGTYPE") => Ok(()),
            _ => Err(lifted(failure, &self.key)),
        }
    }
}

impl Lease for PlainLease {
    fn spec(&self) -> &LeaseSpec {
        &self.spec
    }

    fn default_budget(&self) -> Duration {
        self.spec.command_timeout
    }

    async fn try_acquire(&self, budget: Duration) -> Result<Acquire, LeaseError> {
        let until = Instant::now() + budget;
        let value = format!("{}:{}", self.spec.holder, new_token());
        let (sent, sent_wall) = (Instant::now(), SystemTime::now());
        let mut set = redis::cmd("SET");
        set.arg(&self.key)
            .arg(&value)
            .arg("NX")
            .arg("PX")
            .arg(self.ttl_ms());
        let taken: Option<String> = self
            .query(set, until)
            .await
            .map_err(|f| lifted(f, &self.key))?;
        if taken.is_none() {
            let left = until.saturating_duration_since(Instant::now());
            return Ok(Acquire::Denied(self.observe(left).await?));
        }
        let validity = self.spec.validity();
        Ok(Acquire::Acquired(Term {
            token: value,
            fence: 0,
            acquired_at: SystemTime::now(),
            last_sent: sent,
            valid_until: sent + validity,
            valid_until_wall: sent_wall + validity,
        }))
    }

    async fn renew(&self, term: &mut Term, budget: Duration) -> Result<(), LeaseError> {
        let (sent, sent_wall) = (Instant::now(), SystemTime::now());
        match self.extend(&term.token, sent + budget).await {
            Ok(1) => {}
            Ok(_) => return Err(LeaseError::Lost),
            Err(f) => {
                self.term_gone(f)?;
                return Err(LeaseError::Lost);
            }
        }
        term.renewed(sent, sent_wall, self.spec.validity());
        Ok(())
    }

    /// Compare-and-delete; a plain lock has no successors, so `reservation` is ignored.
    async fn release_to(
        &self,
        term: &Term,
        _reservation: Option<Reservation<'_>>,
        budget: Duration,
    ) -> Result<bool, LeaseError> {
        match self.delete(&term.token, Instant::now() + budget).await {
            Ok(n) => Ok(n == 1),
            Err(f) => self.term_gone(f).map(|()| false),
        }
    }

    async fn observe(&self, budget: Duration) -> Result<Observed, LeaseError> {
        let key = self.key.clone();
        let (value, ttl): (Option<String>, i64) = self
            .endpoint
            .call(Some(budget), |mut c| async move {
                redis::pipe()
                    .cmd("GET")
                    .arg(&key)
                    .cmd("PTTL")
                    .arg(&key)
                    .query_async(&mut c)
                    .await
            })
            .await
            .map_err(|f| lifted(f, &self.key))?;
        let Some(value) = value.filter(|_| ttl != -2) else {
            return Ok(Observed::Vacant);
        };
        let holder = value.rsplit_once(':').map_or("", |(h, _)| h);
        Ok(Observed::Held(Holder {
            holder: holder.to_owned(),
            fence: 0,
            remaining: (ttl >= 0).then(|| Duration::from_millis(ttl as u64)),
            address: None,
        }))
    }

    /// A plain lock keeps no candidates' registry: an empty roster.
    async fn heartbeat(
        &self,
        _beat: Heartbeat<'_>,
        _budget: Duration,
    ) -> Result<Roster, LeaseError> {
        Ok(Roster::default())
    }

    /// Nothing is published when a plain lock is released: a watch that never changes.
    fn watch_releases(&self) -> ReleaseWatch {
        ReleaseWatch::from_receiver(tokio::sync::watch::channel(0).1)
    }

    fn eviction_policies(
        &self,
    ) -> Vec<tokio::sync::watch::Receiver<Option<crate::eviction::EvictionPolicy>>> {
        vec![self.endpoint.eviction_policy()]
    }
}
