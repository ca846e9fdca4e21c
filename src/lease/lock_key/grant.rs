//! A fenced lock's grant (docs/protocol.md, "A lock's key"). The common path runs no
//! script: `MULTI`, `SET lock value NX PX ttl`, `INCR fence`, `TIME`, `EXEC`, granted with
//! the `INCR`'s value when the `SET` took the lock and that value is above the server clock.
//! `lua/lock_acquire.lua` grants the rest: a `MULTI` that got a value not above the clock, or
//! 1 (a missing counter: seeded, and the lock quarantined), or whose `SET` was denied (a
//! reservation for this holder is taken, else the holder is read); and every grant once the
//! counter's lead over the clock, as the last grant saw it, is nearly gone (and the client's
//! first), where the script raises the counter [`FENCE_HEADROOM_US`] past the clock.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};
use tokio::time::Instant;

use super::{evalsha, observed_of, Fence, LockKey};
use crate::connector::{run_script, Conn};
use crate::lease::{lifted, LeaseError, Observed};

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/lock_acquire.lua")));

/// How far past the server clock the script raises the fence counter, in microseconds, when
/// the counter leads the clock by less than [`RAISE_BELOW_US`]: written about once per 10 ms
/// instead of at every grant, and fences stay above a lost grant's across a failover that
/// takes longer than this plus the servers' clock difference (docs/library.md, "The lock").
const FENCE_HEADROOM_US: u64 = 12_000;

/// The counter's lead over the server clock below which the script raises it.
const RAISE_BELOW_US: u64 = 2_000;

/// How much sooner than the counter's lead says the script is used again, in microseconds:
/// a grant of the common path finds the counter still ahead of the clock (a later request
/// may take longer to reach the server), and the script then finds it below
/// [`RAISE_BELOW_US`] and raises it.
const MARGIN_US: u64 = 1_000;

/// What a fenced acquire got.
pub(super) enum Grant {
    /// The lock, with its fence.
    Fenced(u64),
    /// Not the lock: who or what holds it.
    Denied(Observed),
}

/// A grant or a denial as Redis answered it.
enum Reply {
    Granted {
        fence: u64,
        server_us: u64,
    },
    Denied {
        value: String,
        pttl: i64,
        counter: u64,
    },
}

impl LockKey {
    /// One fenced attempt with `value`, then `WAIT` when granted and asked for: the grant,
    /// and how many replicas acknowledged it.
    pub(super) async fn grant(
        &self,
        fence: &Fence,
        value: &str,
        (sent, until): (Instant, Instant),
    ) -> Result<(Grant, Option<i64>), LeaseError> {
        let raise_at = *fence.raise_at.lock().unwrap_or_else(|e| e.into_inner());
        let common = raise_at.is_some_and(|at| sent < at);
        let granted = |r: &Reply| matches!(r, Reply::Granted { .. });
        let (reply, acked) = self
            .run((sent, until), granted, |mut c| async move {
                let reply = match common {
                    true => self.multi(&mut c, fence, value).await?,
                    false => self.acquire_script(&mut c, fence, value, "").await?,
                };
                Ok((reply, c))
            })
            .await
            .map_err(|f| lifted(f, &self.key))?;
        match reply {
            Reply::Granted {
                fence: f,
                server_us,
            } => {
                // Less a margin: a later request may take longer to reach the server.
                let ahead = Duration::from_micros(f.saturating_sub(server_us + MARGIN_US));
                *fence.raise_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(sent + ahead);
                Ok((Grant::Fenced(f), acked))
            }
            Reply::Denied {
                value,
                pttl,
                counter,
            } => Ok((Grant::Denied(observed_of(Some(value), pttl, counter)), None)),
        }
    }

    /// The common path; the script when it cannot grant.
    async fn multi(&self, c: &mut Conn, fence: &Fence, value: &str) -> redis::RedisResult<Reply> {
        let (set, f, (secs, us)): (Option<String>, u64, (u64, u64)) = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(&self.key)
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(self.ttl_ms())
            .cmd("INCR")
            .arg(&fence.counter)
            .cmd("TIME")
            .query_async(c)
            .await?;
        let server_us = secs * 1_000_000 + us;
        match set {
            // Taken, but a missing counter (1) or one the clock passed: the script decides.
            Some(_) if f == 1 || f <= server_us => {
                self.acquire_script(c, fence, value, &f.to_string()).await
            }
            Some(_) => Ok(Reply::Granted {
                fence: f,
                server_us,
            }),
            // Reserved for us perhaps, or released meanwhile; else who holds it.
            None => self.acquire_script(c, fence, value, "").await,
        }
    }

    /// `lua/lock_acquire.lua`: `taken` is the fence the `MULTI` got when it took the lock
    /// with `value` ('' to take it here).
    async fn acquire_script(
        &self,
        c: &mut Conn,
        fence: &Fence,
        value: &str,
        taken: &str,
    ) -> redis::RedisResult<Reply> {
        let mut call = evalsha(&ACQUIRE, &[&self.key, &fence.counter]);
        call.arg(value)
            .arg(self.ttl_ms())
            .arg(FENCE_HEADROOM_US)
            .arg(taken)
            .arg(RAISE_BELOW_US);
        let reply: Value = run_script(c, &ACQUIRE, &call).await?;
        parse(&reply).ok_or_else(|| {
            let what = format!("{reply:?}");
            redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "lock_acquire.lua answered",
                what,
            ))
        })
    }
}

/// `{1, fence, server_us}` or `{0, value, pttl_ms, counter}`.
fn parse(reply: &Value) -> Option<Reply> {
    let Value::Array(items) = reply else {
        return None;
    };
    let int = |i: usize| match items.get(i) {
        Some(Value::Int(n)) => Some(*n),
        _ => None,
    };
    match (int(0)?, items.len()) {
        (1, 3) => Some(Reply::Granted {
            fence: u64::try_from(int(1)?).ok()?,
            server_us: u64::try_from(int(2)?).ok()?,
        }),
        (0, 4) => {
            let value = match &items[1] {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                _ => return None,
            };
            Some(Reply::Denied {
                value,
                pttl: int(2)?,
                counter: u64::try_from(int(3)?).unwrap_or(0),
            })
        }
        _ => None,
    }
}
