//! The operations besides acquiring: renew and release of a held term (`lua/renew.lua`,
//! `lua/release.lua`), and observe of the holder.

use std::time::{Duration, SystemTime};

use futures::TryFutureExt;
use tokio::time::Instant;

use super::reply::{holder_from, not_replicated};

/// `HMGET holder fence address` of the lease hash.
type HolderFields = (Option<String>, Option<u64>, Option<String>);
use super::{Holder, LeaseClient, LeaseError, Term};
use crate::acl::LeaseScript;

impl LeaseClient {
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
        self.observe_within(None).await
    }

    /// [`observe`](Self::observe) with an explicit timeout.
    ///
    /// # Errors
    /// As `observe`.
    pub async fn observe_within(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<Holder>, LeaseError> {
        let lock = self.keys.lock.clone();
        let (fields, ttl): (HolderFields, i64) = self
            .endpoint
            .call(timeout, |mut c| async move {
                redis::pipe()
                    .cmd("HMGET")
                    .arg(&lock)
                    .arg("holder")
                    .arg("fence")
                    .arg("address")
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
        let mut holder = holder_from(fields.0.unwrap_or_default(), fields.1.unwrap_or(0), ttl);
        holder.address = fields.2.filter(|a| !a.is_empty());
        Ok(Some(holder))
    }
}
