//! A lock's release (docs/protocol.md, "A lock's key"): compare-and-delete, natively where the
//! server has it, and for a fenced lock the release message that wakes waiters.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;
use tokio::time::Instant;

use super::{evalsha, Fence, LockKey};
use crate::conn::RedisFailure;
use crate::lease::native::Cmd;
use crate::lease::{LeaseError, Reservation, Term};

static PLAIN_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/plain_release.lua")));
static FENCED_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/lock_release.lua")));

impl LockKey {
    /// Compare-and-delete (see [`crate::Lease::release_to`]): false when no longer ours. A
    /// fenced lock publishes the release, and keeps the key for `reservation`'s successor
    /// alone when given one; a plain lock has no successors.
    pub(crate) async fn release(
        &self,
        term: &Term,
        reservation: Option<Reservation<'_>>,
        budget: Duration,
    ) -> Result<bool, LeaseError> {
        let now = Instant::now();
        let times = (now, now + budget);
        let deleted = match &self.fence {
            Some(fence) => self.release_fenced(fence, term, reservation, times).await,
            None => self.delete(&term.token, times).await,
        };
        match deleted {
            Ok(n) => Ok(n == 1),
            Err(f) => self.term_gone(f).map(|()| false),
        }
    }

    /// The release message (README, "Announcements") published with a native
    /// compare-and-delete in one round trip where the server has one (published then even
    /// when the lock was no longer ours: a waiter woken for nothing tries again), else by
    /// `lua/lock_release.lua`, which also keeps the key for a reservation's successor.
    async fn release_fenced(
        &self,
        fence: &Fence,
        term: &Term,
        reservation: Option<Reservation<'_>>,
        times: (Instant, Instant),
    ) -> Result<i64, RedisFailure> {
        let successor = reservation.map(|r| serde_json::Value::from(r.successor));
        let message = format!(
            r#"{}{},"reserved_for":{}}}"#,
            fence.message,
            term.fence,
            successor.unwrap_or(serde_json::Value::Null)
        );
        if reservation.is_none() {
            let never = |_: &i64| false;
            for which in self.natives() {
                let delete = self.delete_cmd(which, &term.token);
                if self.native.works(which) {
                    let mut pipe = redis::pipe();
                    pipe.add_command(delete);
                    pipe.cmd("PUBLISH")
                        .arg(&fence.released)
                        .arg(&message)
                        .ignore();
                    match self.native(which, pipe, times, never).await? {
                        Some((n, _)) => return Ok(n),
                        None => continue, // refused since (an ACL changed)
                    }
                }
                // Not known yet: alone, and published only once it deleted.
                if let Some((n, _)) = self.native(which, delete, times, never).await? {
                    if n == 1 {
                        let mut publish = redis::cmd("PUBLISH");
                        publish.arg(&fence.released).arg(&message);
                        self.command::<i64>(publish.into(), times, never).await?;
                    }
                    return Ok(n);
                }
            }
        }
        let mut call = evalsha(&FENCED_RELEASE, &[&self.key, &fence.released]);
        call.arg(&term.token).arg(message);
        if let Some(r) = reservation {
            call.arg(r.successor)
                .arg(r.window.as_millis().max(1) as u64);
        }
        let never = |_: &i64| false;
        Ok(self.script(&FENCED_RELEASE, call, times, never).await?.0)
    }

    /// A plain lock's compare-and-delete: 1 when deleted.
    async fn delete(&self, value: &str, times: (Instant, Instant)) -> Result<i64, RedisFailure> {
        let never = |_: &i64| false;
        for which in self.natives() {
            let cmd = self.delete_cmd(which, value);
            if let Some((n, _)) = self.native(which, cmd, times, never).await? {
                return Ok(n);
            }
        }
        let mut call = evalsha(&PLAIN_RELEASE, &[&self.key]);
        call.arg(value);
        Ok(self.script(&PLAIN_RELEASE, call, times, never).await?.0)
    }

    /// The native compare-and-deletes the server may have (none once it refused both: no
    /// command is built for nothing).
    fn natives(&self) -> impl Iterator<Item = Cmd> + '_ {
        [Cmd::Delifeq, Cmd::Delex]
            .into_iter()
            .filter(|&which| self.native.may_try(which))
    }

    /// The native compare-and-delete `which`: `DELIFEQ key value` or `DELEX key IFEQ value`.
    fn delete_cmd(&self, which: Cmd, value: &str) -> redis::Cmd {
        let mut cmd = redis::cmd(if which == Cmd::Delifeq {
            "DELIFEQ"
        } else {
            "DELEX"
        });
        cmd.arg(&self.key);
        if which == Cmd::Delex {
            cmd.arg("IFEQ");
        }
        cmd.arg(value);
        cmd
    }
}
