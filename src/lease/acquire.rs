//! The acquire: one attempt to take the lease for a new term (`lua/acquire.lua`), counted
//! only once enough replicas acknowledged it when `WAIT` is asked for.

use std::time::{Duration, SystemTime};

use futures::TryFutureExt;
use redis::ScriptInvocation;
use tokio::time::Instant;

use super::reply::{is_granted, not_replicated, parse_acquire, AcquireReply};
use super::{unix_ms, Acquire, Lease, LeaseClient, LeaseError, Term};
use crate::connector::invoke;
use crate::lease::acl::LeaseScript;

impl LeaseClient {
    /// One acquire attempt (see [`Lease::try_acquire`]) with a token the caller chose (it
    /// must be random, 128 bits or more, and new for every term): Redlock sends one token
    /// to every node of an attempt.
    pub(crate) async fn try_acquire_with_token(
        &self,
        token: String,
        budget: Duration,
        announce: bool,
    ) -> Result<Acquire, LeaseError> {
        let timeout = Some(budget);
        let sent = Instant::now();
        let sent_wall = SystemTime::now();
        let wanted = self.endpoint.min_replicas_ack();
        let call = self.acquire_call(&token, sent_wall, announce);
        let (reply, acked) = self.acquire_once(call, timeout, sent).await?;
        let reply = parse_acquire(reply)?;
        let acquired_at = SystemTime::now();
        match reply {
            AcquireReply::Granted(fence, pending) => {
                let validity = self.spec.validity();
                let term = Term {
                    token,
                    fence,
                    acquired_at,
                    last_sent: sent,
                    valid_until: sent + validity,
                    valid_until_wall: sent_wall + validity,
                };
                if let Some(got) = acked.filter(|&n| n < i64::from(wanted)) {
                    return Err(self.undo_unreplicated(&term, wanted, got).await);
                }
                // Announced here after WAIT, or after taking a reserved release (the script
                // left both announcements to this call so that the grant's reply comes
                // before the other followers wake). Redlock announces after its majority.
                if acked.is_some() || (announce && pending) {
                    self.announce(&term.token, fence, self.spec.command_timeout)
                        .await?;
                }
                Ok(Acquire::Acquired(term))
            }
            AcquireReply::Denied(seen) => Ok(Acquire::Denied(seen)),
        }
    }

    /// The call of `lua/acquire.lua`.
    fn acquire_call(
        &self,
        token: &str,
        sent_wall: SystemTime,
        announce: bool,
    ) -> ScriptInvocation<'static> {
        let mut call = self.scripts.acquire.prepare_invoke();
        call.key(&self.keys.lock).key(&self.keys.fence);
        call.key(&self.keys.released)
            .arg(&self.spec.holder)
            .arg(token)
            .arg(self.ttl_ms())
            .arg(unix_ms(sent_wall))
            .arg(self.spec.address.as_deref().unwrap_or(""));
        call.arg(if announce { "1" } else { "0" });
        if let Some(shard) = &self.shard {
            call.key(&shard.quarantine).arg(shard.index);
        }
        call
    }

    /// Runs one acquire call, then `WAIT` for the replicas when it granted and they are
    /// asked for: the reply, and how many acknowledged.
    async fn acquire_once(
        &self,
        call: ScriptInvocation<'static>,
        timeout: Option<Duration>,
        sent: Instant,
    ) -> Result<(redis::Value, Option<i64>), LeaseError> {
        let (endpoint, lock) = (&*self.endpoint, &self.keys.lock);
        let wanted = endpoint.min_replicas_ack();
        endpoint
            .call(timeout, |mut c| async move {
                let reply: redis::Value = invoke(&mut c, &call).await?;
                if wanted == 0 || !is_granted(&reply) {
                    return Ok((reply, None));
                }
                let budget = endpoint.wait_budget(timeout, sent);
                let acked = c.wait_for_replicas(wanted, budget, lock).await?;
                Ok((reply, Some(acked.unwrap_or(-1))))
            })
            .or_else(|f| self.fail(f, LeaseScript::Acquire))
            .await
    }

    /// Announces a confirmed term (`lua/announce.lua`): marks it confirmed and publishes
    /// `{"event":"acquired",..}`, so followers name it only once it can no longer be undone.
    /// Returns false when the lease is no longer this token's.
    pub(crate) async fn announce(
        &self,
        token: &str,
        fence: u64,
        budget: Duration,
    ) -> Result<bool, LeaseError> {
        let mut call = self.scripts.announce.prepare_invoke();
        call.key(&self.keys.lock)
            .key(&self.keys.released)
            .arg(token)
            .arg(&self.spec.holder)
            .arg(fence);
        if let Some(shard) = self.shard_index() {
            call.arg(shard);
        }
        let done: i64 = self
            .endpoint
            .call(
                Some(budget),
                |mut c| async move { invoke(&mut c, &call).await },
            )
            .or_else(|f| self.fail(f, LeaseScript::Announce))
            .await?;
        Ok(done == 1)
    }

    /// The error of an acquire that only `got` of `wanted` replicas acknowledged, once the
    /// acquire is taken back.
    async fn undo_unreplicated(&self, term: &Term, wanted: u32, got: i64) -> LeaseError {
        // Not durable: a failover now could lose it. It does not count; take it
        // back so that it does not block the election for a lease duration. On a
        // new connection: this one may still be blocked in the WAIT, or talk to a
        // master that a failover left behind.
        self.endpoint.reset().await;
        let outcome = match self.release(term, self.endpoint.command_timeout()).await {
            Ok(_) => "the acquire does not count and was undone".to_string(),
            Err(e) => format!(
                "the acquire does not count; undoing it failed ({e}), so the lease expires by itself"
            ),
        };
        not_replicated(wanted, got, &outcome)
    }
}
