//! The operations besides acquiring: renew and release of a held term (`lua/renew.lua`,
//! `lua/release.lua`), and observe of the holder: the [`Lease`] implementation of one Redis.

use std::time::{Duration, SystemTime};

use futures::TryFutureExt;
use tokio::time::Instant;

use super::reply::not_replicated;
use super::{new_token, Acquire, Lease, LeaseClient, LeaseError, LeaseSpec, Observed, Term};
use super::{Control, ControlWatch, HandoverRequest, Heartbeat, ReleaseWatch, Reservation, Roster};
use crate::connector::invoke;
use crate::lease::acl::LeaseScript;

impl Lease for LeaseClient {
    fn spec(&self) -> &LeaseSpec {
        &self.spec
    }

    fn default_budget(&self) -> Duration {
        self.spec.command_timeout
    }

    /// The lock's own key and commands (docs/protocol.md, "A lock's key").
    fn for_lock(mut self) -> Self {
        let fenced = super::LockKey::new(&self.spec, &self.keys, self.endpoint.clone(), true);
        self.lock = Some(Box::new(fenced));
        self
    }

    async fn try_acquire(&self, budget: Duration) -> Result<Acquire, LeaseError> {
        let (token, outcome) = match &self.lock {
            Some(lock) => {
                let value = lock.new_value();
                (value.clone(), lock.try_acquire(value, budget).await)
            }
            None => {
                let (token, announce) = (new_token(), self.endpoint.min_replicas_ack() == 0);
                let outcome = self.try_acquire_with_token(token.clone(), budget, announce);
                (token, outcome.await)
            }
        };
        // Sent, and perhaps run: no reply, or one that could not be read.
        if let Err(LeaseError::Unavailable(_) | LeaseError::Protocol(_)) = &outcome {
            self.stray(&token);
        }
        outcome
    }

    async fn renew(&self, term: &mut Term, budget: Duration) -> Result<(), LeaseError> {
        if let Some(lock) = &self.lock {
            return lock.renew(term, budget).await;
        }
        let timeout = Some(budget);
        let sent = Instant::now();
        let sent_wall = SystemTime::now();
        let mut call = self.scripts.renew.prepare_invoke();
        call.key(&self.keys.lock);
        if self.shard.is_none() {
            call.key(&self.keys.handover);
        }
        call.arg(&term.token).arg(self.ttl_ms());
        let (endpoint, lock) = (&*self.endpoint, &self.keys.lock);
        let wanted = endpoint.min_replicas_ack();
        let (extended, acked): (i64, Option<i64>) = endpoint
            .call(timeout, |mut c| async move {
                let extended: i64 = invoke(&mut c, &call).await?;
                if wanted == 0 || extended == 0 {
                    return Ok((extended, None));
                }
                let budget = endpoint.wait_budget(timeout, sent);
                let acked = c.wait_for_replicas(wanted, budget, lock).await?;
                Ok((extended, Some(acked.unwrap_or(-1))))
            })
            .or_else(|f| self.fail(f, LeaseScript::Renew))
            .await?;
        if extended == 0 {
            return Err(LeaseError::Lost);
        }
        if extended == 2 {
            self.poke_control();
        }
        if let Some(got) = acked.filter(|&n| n < i64::from(wanted)) {
            self.endpoint.reset().await;
            return Err(not_replicated(
                wanted,
                got,
                "the renew does not count (the validity was not extended)",
            ));
        }
        term.renewed(sent, sent_wall, self.spec.validity());
        Ok(())
    }

    async fn release_to(
        &self,
        term: &Term,
        reservation: Option<Reservation<'_>>,
        budget: Duration,
    ) -> Result<bool, LeaseError> {
        if let Some(lock) = &self.lock {
            let released = lock.release(term, reservation, budget).await;
            return released.inspect_err(|_| self.stray(&term.token));
        }
        let timeout = Some(budget);
        let (successor, window) = reservation
            .map(|r| (r.successor, r.window.as_millis().max(1) as u64))
            .unwrap_or(("", 0));
        let mut call = self.scripts.release.prepare_invoke();
        call.key(&self.keys.lock).key(&self.keys.released);
        call.key(&self.keys.fence);
        if !successor.is_empty() {
            // A key (same hash tag, for Cluster) though only published to.
            call.key(self.keys.successor_channel(successor));
        }
        call.arg(&term.token)
            .arg(&self.spec.holder)
            .arg(successor)
            .arg(window);
        if let Some(shard) = self.shard_index() {
            call.arg(shard);
        }
        let released: i64 = self
            .endpoint
            .call(timeout, |mut c| async move { invoke(&mut c, &call).await })
            .or_else(|f| self.fail(f, LeaseScript::Release))
            .await
            .inspect_err(|_| self.stray(&term.token))?;
        if let (1, Some(r)) = (released, reservation) {
            // Released already: a failure here only delays the others' news of it.
            let _ = self
                .follow_reserved_release(r.successor, term.fence, r.window)
                .await;
        }
        Ok(released == 1)
    }

    fn messages_dropped(&self) -> u64 {
        self.dropped.total()
    }

    async fn release_strays(&self, budget: Duration) -> usize {
        let mut released = 0;
        for token in self.strays.current() {
            match self.release(&Term::unclaimed(&token, 0), budget).await {
                Ok(true) => {
                    self.strays.forget(&token);
                    released += 1;
                }
                Ok(false) => {} // not this one, or not run yet
                Err(_) => break,
            }
        }
        if released > 0 {
            tracing::info!(
                event = "stray_released",
                released,
                "released a grant of this replica's that it never claimed (an acquire or release Redis ran after its timeout)"
            );
        }
        released
    }

    async fn observe(&self, budget: Duration) -> Result<Observed, LeaseError> {
        if let Some(lock) = &self.lock {
            return lock.observe(budget).await;
        }
        if let Some(shard) = self.shard_index() {
            let mut seen = self.observe_shards(std::iter::once(shard), budget).await?;
            return seen
                .pop()
                .ok_or_else(|| LeaseError::Protocol("an empty shard read".into()));
        }
        let lock = self.keys.lock.clone();
        let (fields, ttl): (LeaseFields, i64) = self
            .endpoint
            .call(Some(budget), |mut c| async move {
                redis::pipe()
                    .cmd("HMGET")
                    .arg(&lock)
                    .arg("holder")
                    .arg("fence")
                    .arg("address")
                    .arg("reserved_for")
                    .arg("confirmed")
                    .cmd("PTTL")
                    .arg(&lock)
                    .query_async(&mut c)
                    .await
            })
            .await
            .map_err(|f| self.lift(f))?;
        Ok(observed_of(fields, ttl))
    }

    async fn heartbeat(&self, beat: Heartbeat<'_>, budget: Duration) -> Result<Roster, LeaseError> {
        self.heartbeat_here(beat, budget).await
    }

    fn watch_releases(&self) -> ReleaseWatch {
        self.subscribe_releases()
    }

    async fn control(
        &self,
        op: Control<'_>,
        budget: Duration,
    ) -> Result<Option<HandoverRequest>, LeaseError> {
        self.control_here(op, budget).await
    }

    fn watch_control(&self) -> ControlWatch {
        self.subscribe_control()
    }

    fn eviction_policies(
        &self,
    ) -> Vec<tokio::sync::watch::Receiver<Option<crate::eviction::EvictionPolicy>>> {
        vec![self.endpoint().eviction_policy()]
    }
}

/// A lease hash's `holder`, `fence`, `address`, `reserved_for` and `confirmed` (HMGET).
pub(super) type LeaseFields = (
    Option<String>,
    Option<u64>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The lease as read: its fields and its PTTL in ms (-2: no key).
pub(super) fn observed_of(fields: LeaseFields, ttl: i64) -> Observed {
    if ttl == -2 {
        return Observed::Vacant;
    }
    let (holder, fence, address, reserved_for, confirmed) = fields;
    // An unconfirmed term (WAIT, Redlock) may still be undone: name nobody yet.
    let holder = holder.filter(|_| confirmed.as_deref() != Some("0"));
    Observed::from_fields(
        holder.unwrap_or_default(),
        fence.unwrap_or(0),
        address.unwrap_or_default(),
        reserved_for.unwrap_or_default(),
        ttl,
    )
}
