//! A lock's own key (docs/protocol.md, "A lock's key"), for the fenced lock
//! ([`super::Lease::for_lock`] of a [`super::LeaseClient`]) and the plain one
//! ([`crate::PlainLease`]): a string `<holder>:<token>` at the lease's `:lock` key, taken with
//! `SET NX PX` (plain) or with the fence counter's next value ([`grant`], fenced); renewed by
//! compare-and-set and released by compare-and-delete, natively where the server has them
//! ([`super::native`]); each grant and renew counted only once enough replicas acknowledged
//! it when `WAIT` is asked for.

mod grant;
mod release;

use std::sync::{Arc, LazyLock, Mutex as StdMutex};
use std::time::{Duration, SystemTime};

use redis::{FromRedisValue, Script};
use tokio::time::Instant;

use super::native::{refused, Cmd, Native};
use super::reply::not_replicated;
use super::Term;
use super::{lifted, push_token, Acquire, LeaseError, LeaseKeys, LeaseSpec, Observed};
use crate::conn::{Endpoint, RedisFailure};
use crate::connector::{run_script, Conn};

static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/plain_renew.lua")));

/// The fence counter and the release channel of a fenced lock, and when its grants next
/// need the script ([`grant`]).
struct Fence {
    counter: String,
    released: String,
    /// The release message up to its fence (README, "Announcements").
    message: String,
    /// From when grants go through the script again: the counter's lead over the server
    /// clock, as the last grant saw it, nearly gone (`None`: not known yet).
    raise_at: StdMutex<Option<Instant>>,
}

/// A command, or a pipeline whose one answer counts (the others ignored).
enum Request {
    Cmd(redis::Cmd),
    Pipe(redis::Pipeline),
}

impl From<redis::Cmd> for Request {
    fn from(cmd: redis::Cmd) -> Self {
        Request::Cmd(cmd)
    }
}

impl From<redis::Pipeline> for Request {
    fn from(pipe: redis::Pipeline) -> Self {
        Request::Pipe(pipe)
    }
}

/// One lock's key on one endpoint.
pub(crate) struct LockKey {
    spec: LeaseSpec,
    key: String,
    fence: Option<Fence>,
    endpoint: Arc<Endpoint>,
    native: Native,
}

impl LockKey {
    /// The lock of `keys` on `endpoint`: fenced, or plain (no fence, nothing published).
    pub(crate) fn new(
        spec: &LeaseSpec,
        keys: &LeaseKeys,
        endpoint: Arc<Endpoint>,
        fenced: bool,
    ) -> Self {
        LockKey {
            spec: spec.clone(),
            key: keys.lock.clone(),
            fence: fenced.then(|| Fence {
                counter: keys.fence.clone(),
                released: keys.released.clone(),
                message: format!(
                    r#"{{"event":"released","holder":{},"fence":"#,
                    serde_json::Value::from(spec.holder.as_str())
                ),
                raise_at: StdMutex::new(None),
            }),
            endpoint,
            native: Native::default(),
        }
    }

    fn ttl_ms(&self) -> u64 {
        self.spec.lease_duration.as_millis() as u64
    }

    /// A new term's value of the key, `<holder>:<token>`: the term's token.
    pub(crate) fn new_value(&self) -> String {
        let mut value = String::with_capacity(self.spec.holder.len() + 33);
        value.push_str(&self.spec.holder);
        value.push(':');
        push_token(&mut value);
        value
    }

    /// `write` on the shared connection within `until`, then `WAIT` for the replicas the
    /// endpoint asks for when `counts(&reply)`: the reply, and how many acknowledged (`-1`:
    /// no answer in time).
    async fn run<T, F, Fut>(
        &self,
        (sent, until): (Instant, Instant),
        counts: fn(&T) -> bool,
        write: F,
    ) -> Result<(T, Option<i64>), RedisFailure>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<(T, Conn)>>,
    {
        let timeout = Some(until.saturating_duration_since(sent));
        let (endpoint, key) = (&*self.endpoint, &self.key);
        let wanted = endpoint.min_replicas_ack();
        endpoint
            .call(timeout, |c| async move {
                let (reply, mut c) = write(c).await?;
                if wanted == 0 || !counts(&reply) {
                    return Ok((reply, None));
                }
                let budget = endpoint.wait_budget(timeout, sent);
                let acked = c.wait_for_replicas(wanted, budget, key).await?;
                Ok((reply, Some(acked.unwrap_or(-1))))
            })
            .await
    }

    /// One command (or a pipeline of one answer), then `WAIT` when `counts(&reply)` (see
    /// [`LockKey::run`]).
    async fn command<T: FromRedisValue + Send>(
        &self,
        request: Request,
        times: (Instant, Instant),
        counts: fn(&T) -> bool,
    ) -> Result<(T, Option<i64>), RedisFailure> {
        self.run(times, counts, |mut c| async move {
            let reply = match request {
                Request::Cmd(cmd) => cmd.query_async(&mut c).await?,
                Request::Pipe(pipe) => pipe.query_async::<(T,)>(&mut c).await?.0,
            };
            Ok((reply, c))
        })
        .await
    }

    /// One script call ([`evalsha`]), then `WAIT` when `counts(&reply)` (see
    /// [`LockKey::run`]).
    async fn script<T: FromRedisValue + Send>(
        &self,
        script: &'static Script,
        call: redis::Cmd,
        times: (Instant, Instant),
        counts: fn(&T) -> bool,
    ) -> Result<(T, Option<i64>), RedisFailure> {
        self.run(times, counts, |mut c| async move {
            let reply = run_script(&mut c, script, &call).await?;
            Ok((reply, c))
        })
        .await
    }

    /// `cmd` where the server has it, else `Ok(None)` (it refused `cmd`: a script does it).
    async fn native<T: FromRedisValue + Send>(
        &self,
        which: Cmd,
        cmd: impl Into<Request>,
        times: (Instant, Instant),
        counts: fn(&T) -> bool,
    ) -> Result<Option<(T, Option<i64>)>, RedisFailure> {
        if !self.native.may_try(which) {
            return Ok(None);
        }
        match self.command(cmd.into(), times, counts).await {
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

    /// One attempt to take the lock with `value` ([`LockKey::new_value`]; see
    /// [`super::Lease::try_acquire`]).
    pub(crate) async fn try_acquire(
        &self,
        value: String,
        budget: Duration,
    ) -> Result<Acquire, LeaseError> {
        let (sent, sent_wall) = (Instant::now(), SystemTime::now());
        let until = sent + budget;
        let (fence, acked) = match &self.fence {
            None => {
                let mut set = redis::cmd("SET");
                set.arg(&self.key).arg(&value).arg("NX").arg("PX");
                set.arg(self.ttl_ms());
                let taken = |v: &Option<String>| v.is_some();
                match self.command(set.into(), (sent, until), taken).await {
                    Ok((Some(_), acked)) => (0, acked),
                    Ok((None, _)) => {
                        let left = until.saturating_duration_since(Instant::now());
                        return Ok(Acquire::Denied(self.observe(left).await?));
                    }
                    Err(f) => return Err(lifted(f, &self.key)),
                }
            }
            Some(fence) => match self.grant(fence, &value, (sent, until)).await? {
                (grant::Grant::Fenced(f), acked) => (f, acked),
                (grant::Grant::Denied(seen), _) => return Ok(Acquire::Denied(seen)),
            },
        };
        let validity = self.spec.validity();
        let term = Term {
            token: value,
            fence,
            acquired_at: sent_wall,
            last_sent: sent,
            valid_until: sent + validity,
            valid_until_wall: sent_wall + validity,
        };
        let wanted = self.endpoint.min_replicas_ack();
        if let Some(got) = acked.filter(|&n| n < i64::from(wanted)) {
            // Not durable: a failover now could lose it. Taken back on a new connection.
            self.endpoint.reset().await;
            let outcome = match self.release(&term, None, self.spec.command_timeout).await {
                Ok(_) => "the acquire does not count and was undone".to_string(),
                Err(e) => format!("the acquire does not count; undoing it failed ({e})"),
            };
            return Err(not_replicated(wanted, got, &outcome));
        }
        Ok(Acquire::Acquired(term))
    }

    /// Extends the term's lock if it is still ours (see [`super::Lease::renew`]).
    pub(crate) async fn renew(&self, term: &mut Term, budget: Duration) -> Result<(), LeaseError> {
        let (sent, sent_wall) = (Instant::now(), SystemTime::now());
        let acked = match self.extend(&term.token, (sent, sent + budget)).await {
            Ok((1, acked)) => acked,
            Ok(_) => return Err(LeaseError::Lost),
            Err(f) => {
                self.term_gone(f)?;
                return Err(LeaseError::Lost);
            }
        };
        let wanted = self.endpoint.min_replicas_ack();
        if let Some(got) = acked.filter(|&n| n < i64::from(wanted)) {
            self.endpoint.reset().await;
            let outcome = "the renew does not count (the validity was not extended)";
            return Err(not_replicated(wanted, got, outcome));
        }
        term.renewed(sent, sent_wall, self.spec.validity());
        Ok(())
    }

    /// Compare-and-extend: 1 when extended, with the replicas that acknowledged it.
    async fn extend(
        &self,
        value: &str,
        (sent, until): (Instant, Instant),
    ) -> Result<(i64, Option<i64>), RedisFailure> {
        let mut set = redis::cmd("SET");
        set.arg(&self.key).arg(value).arg("IFEQ").arg(value);
        set.arg("PX").arg(self.ttl_ms());
        let done = |v: &Option<String>| v.is_some();
        if let Some((v, acked)) = self.native(Cmd::SetIfeq, set, (sent, until), done).await? {
            return Ok((i64::from(v.is_some()), acked));
        }
        let mut call = evalsha(&RENEW, &[&self.key]);
        call.arg(value).arg(self.ttl_ms());
        self.script(&RENEW, call, (Instant::now(), until), |n| *n == 1)
            .await
    }

    /// A failure of a call on a term as its error; `Ok` when the key holds another type (an
    /// election's lease took the name): the term is gone.
    fn term_gone(&self, failure: RedisFailure) -> Result<(), LeaseError> {
        match failure.code.as_deref() {
            Some("WRONGTYPE") => Ok(()),
            _ => Err(lifted(failure, &self.key)),
        }
    }

    /// Who holds the lock (see [`super::Lease::observe`]); a fenced lock's fence is the
    /// counter's, the last one granted (or beyond it).
    pub(crate) async fn observe(&self, budget: Duration) -> Result<Observed, LeaseError> {
        let (key, counter) = (&self.key, self.fence.as_ref().map(|f| &f.counter));
        let (value, ttl, fence): (Option<String>, i64, Option<u64>) = self
            .endpoint
            .call(Some(budget), |mut c| async move {
                let mut pipe = redis::pipe();
                pipe.cmd("GET").arg(key).cmd("PTTL").arg(key);
                match counter {
                    Some(counter) => pipe.cmd("GET").arg(counter).query_async(&mut c).await,
                    None => {
                        let (v, t) = pipe.query_async(&mut c).await?;
                        Ok((v, t, None))
                    }
                }
            })
            .await
            .map_err(|f| lifted(f, &self.key))?;
        Ok(observed_of(value, ttl, fence.unwrap_or(0)))
    }
}

/// `EVALSHA` of `script` with `keys`; the caller adds the arguments. Each is written once,
/// into the command (a [`redis::ScriptInvocation`] copies them again).
fn evalsha(script: &Script, keys: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
    cmd
}

/// The lock as read: its value (`<holder>:<token>`; `''` for the quarantine; `>identity>`
/// reserved for that identity), its PTTL in ms (-2: no key) and the fence counter.
fn observed_of(value: Option<String>, ttl: i64, fence: u64) -> Observed {
    let Some(value) = value.filter(|_| ttl != -2) else {
        return Observed::Vacant;
    };
    let reserved = value.strip_prefix('>').and_then(|v| v.strip_suffix('>'));
    let (holder, reserved_for) = match reserved {
        Some(successor) => ("", successor),
        None => (value.rsplit_once(':').map_or("", |(h, _)| h), ""),
    };
    Observed::from_fields(
        holder.to_owned(),
        fence,
        String::new(),
        reserved_for.to_owned(),
        ttl,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_names_its_holder_a_reservation_or_the_quarantine() {
        let held = observed_of(Some("a:b:0123".into()), 900, 7);
        assert!(
            matches!(&held, Observed::Held(h) if h.holder == "a:b" && h.fence == 7),
            "{held:?}"
        );
        let reserved = observed_of(Some(">b>".into()), 900, 7);
        assert!(
            matches!(&reserved, Observed::Reserved { for_identity, .. } if for_identity == "b"),
            "{reserved:?}"
        );
        let quarantined = observed_of(Some(String::new()), 900, 7);
        assert!(
            matches!(quarantined, Observed::Quarantined { fence: 7, .. }),
            "{quarantined:?}"
        );
        assert!(matches!(observed_of(None, -2, 7), Observed::Vacant));
    }
}
