//! Naming the permission a Redis ACL user lacks.
//!
//! A command the user may not run is refused by name (`NOPERM this user has no permissions
//! to run the 'evalsha' command`), but one run *inside* a script is refused without naming
//! it (`The user executing the script can't run this command or subcommand`; Valkey names
//! the command but not the key). When that
//! happens, [`explain`] asks Redis which of the script's commands the user may not run
//! (`redis.acl_check_cmd`, Redis 7.0 and later; it runs nothing) and names them.

use redis::Script;

use super::LeaseKeys;
use crate::conn::{Endpoint, FailureKind, RedisFailure};
use crate::connector::invoke;

/// Which of the lease scripts failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseScript {
    /// `lua/acquire.lua`.
    Acquire,
    /// `lua/renew.lua`.
    Renew,
    /// `lua/release.lua`.
    Release,
    /// `lua/announce.lua`.
    Announce,
    /// `lua/release_announce.lua`.
    ReleaseAnnounce,
    /// `lua/candidate.lua`.
    Candidate,
    /// `lua/handover.lua`.
    Handover,
    /// `lua/shard_renew.lua`.
    ShardRenew,
}

impl LeaseScript {
    fn name(self) -> &'static str {
        match self {
            LeaseScript::Acquire => "acquire",
            LeaseScript::Renew => "renew",
            LeaseScript::Release => "release",
            LeaseScript::Announce => "announce",
            LeaseScript::ReleaseAnnounce => "release announce",
            LeaseScript::Candidate => "candidate",
            LeaseScript::Handover => "handover",
            LeaseScript::ShardRenew => "shard renew",
        }
    }

    /// The commands the script runs, with arguments of the right arity (keys and channel
    /// included, so their patterns are checked too).
    fn commands(self, keys: &LeaseKeys) -> Vec<Vec<String>> {
        let (lock, fence, chan) = (&keys.lock, &keys.fence, &keys.released);
        let c = |args: &[&str]| args.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        match self {
            LeaseScript::Acquire => vec![
                c(&["PTTL", lock]),
                c(&["HMGET", lock, "holder"]),
                c(&["INCR", fence]),
                c(&["DEL", fence]),
                c(&["TIME"]),
                c(&["SET", fence, "1"]),
                c(&["HSET", lock, "holder", "x"]),
                c(&["PEXPIRE", lock, "1"]),
                c(&["PUBLISH", chan, "x"]),
            ],
            LeaseScript::ShardRenew => {
                vec![c(&["HGET", lock, "token"]), c(&["PEXPIRE", lock, "1"])]
            }
            LeaseScript::Renew => vec![
                c(&["HGET", lock, "token"]),
                c(&["PEXPIRE", lock, "1"]),
                c(&["PTTL", &keys.handover]),
            ],
            LeaseScript::Release => vec![
                c(&["HMGET", lock, "token"]),
                c(&["DEL", lock]),
                c(&["HSET", lock, "holder", "x"]),
                c(&["PEXPIRE", lock, "1"]),
                c(&["PUBLISH", chan, "x"]),
                c(&["PUBLISH", &keys.successor_channel("x"), "x"]),
            ],
            LeaseScript::Candidate => {
                let (hash, index) = (&keys.candidates, &keys.candidates_index);
                vec![
                    c(&["TIME"]),
                    c(&["HGET", &keys.candidates_state, "version"]),
                    c(&["HSET", &keys.candidates_state, "version", "1"]),
                    c(&["HSTRLEN", hash, "x"]),
                    c(&["HGET", hash, "x"]),
                    c(&["HSET", hash, "x", "x"]),
                    c(&["HDEL", hash, "x"]),
                    c(&["HSCAN", hash, "0", "COUNT", "1"]),
                    c(&["PEXPIRE", hash, "1"]),
                    c(&["ZADD", index, "1", "x"]),
                    c(&["ZREM", index, "x"]),
                    c(&["ZSCORE", index, "x"]),
                    c(&["ZCOUNT", index, "0", "1"]),
                    c(&["ZRANGEBYSCORE", index, "0", "1"]),
                    c(&["PTTL", lock]),
                    c(&["HMGET", lock, "holder"]),
                    c(&["HSTRLEN", lock, "holder"]),
                ]
            }
            LeaseScript::Handover => vec![
                c(&["HMGET", &keys.handover, "id"]),
                c(&["HSET", &keys.handover, "id", "x"]),
                c(&["PEXPIRE", &keys.handover, "1"]),
                c(&["DEL", &keys.handover]),
                c(&["PUBLISH", &keys.control, "x"]),
            ],
            LeaseScript::Announce => vec![
                c(&["HGET", lock, "token"]),
                c(&["HSET", lock, "confirmed", "1"]),
                c(&["HMGET", lock, "release_pending"]),
                c(&["HDEL", lock, "release_pending"]),
                c(&["PUBLISH", chan, "x"]),
            ],
            LeaseScript::ReleaseAnnounce => vec![
                c(&["HMGET", lock, "release_pending"]),
                c(&["PTTL", lock]),
                c(&["HDEL", lock, "release_pending"]),
                c(&["PUBLISH", chan, "x"]),
            ],
        }
    }
}

/// Checks each command (`ARGV`: argument count, then the arguments, repeated) with
/// `redis.acl_check_cmd` and returns the ones the user may not run, as text.
const CHECK: &str = r"
local denied = {}
local i = 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local cmd = {}
  for j = 1, n do cmd[j] = ARGV[i + j] end
  if not redis.acl_check_cmd(unpack(cmd)) then
    table.insert(denied, table.concat(cmd, ' ', 1, math.min(n, 2)))
  end
  i = i + n + 1
end
return denied
";

/// True when `failure` is Redis refusing a command run inside a script for lack of an ACL
/// permission (Redis: `can't run this command or subcommand`; Valkey: `ACL failure in
/// script: User u has no permissions to run the 'incr' command`).
pub(crate) fn is_script_denial(failure: &RedisFailure) -> bool {
    let cause = &failure.cause;
    cause.contains("can't run this command or subcommand")
        || cause.contains("ACL failure in script")
}

/// For a script refused by the ACL, the same failure as kind `auth` with a cause that names
/// the commands (and keys) the user lacks; other failures unchanged. A top-level refusal
/// (`NOPERM`, which names the command itself) gets a pointer to the minimal ACL.
pub(crate) async fn explain(
    endpoint: &Endpoint,
    keys: &LeaseKeys,
    script: LeaseScript,
    failure: RedisFailure,
) -> RedisFailure {
    const HINT: &str = "leaderd's minimal ACL is in docs/redis-modes.md#acl";
    if failure.code.as_deref() == Some("NOPERM") {
        return RedisFailure {
            cause: format!("{}; {HINT}", failure.cause),
            ..failure
        };
    }
    if !is_script_denial(&failure) {
        return failure;
    }
    let check = Script::new(CHECK);
    let mut call = check.prepare_invoke();
    call.key(&keys.lock);
    for cmd in script.commands(keys) {
        call.arg(cmd.len());
        for arg in cmd {
            call.arg(arg);
        }
    }
    let denied: Result<Vec<String>, _> = endpoint
        .call(None, |mut c| async move { invoke(&mut c, &call).await })
        .await;
    let what = match denied {
        Ok(list) if !list.is_empty() => format!(
            "the Redis ACL user may not run {} (used by the {} script)",
            list.join(", "),
            script.name()
        ),
        _ => format!(
            "the Redis ACL user may not run a command the {} script uses",
            script.name()
        ),
    };
    RedisFailure {
        kind: FailureKind::Auth,
        cause: format!("{what}; {HINT}"),
        code: Some("NOPERM".into()),
        source: failure.source,
    }
}
