//! The native commands a lock ([`super::lock_key`]) sends where the server has them:
//! compare-and-set `SET key value IFEQ value PX ms` (Valkey 8.1, Redis 8.4) and
//! compare-and-delete `DELIFEQ key value` (Valkey 9.0) or `DELEX key IFEQ value` (Redis 8.4).
//! Each is tried once and remembered: a server that lacks it (an unknown command, or a
//! syntax error on an older `SET`) or an ACL that refuses it is answered by a script instead
//! (README, "Library").

use std::sync::atomic::{AtomicU8, Ordering};

use crate::conn::RedisFailure;

/// A native command of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmd {
    /// `SET key value IFEQ value PX ms`.
    SetIfeq,
    /// `DELIFEQ key value`.
    Delifeq,
    /// `DELEX key IFEQ value`.
    Delex,
}

// 0: not tried yet.
const WORKS: u8 = 1;
const REFUSED: u8 = 2;

/// What one server was seen to accept, per native command.
#[derive(Debug, Default)]
pub(crate) struct Native {
    states: [AtomicU8; 3],
}

impl Native {
    fn state(&self, cmd: Cmd) -> &AtomicU8 {
        &self.states[cmd as usize]
    }

    /// False once the server refused `cmd`: send the script instead.
    pub(crate) fn may_try(&self, cmd: Cmd) -> bool {
        self.state(cmd).load(Ordering::Relaxed) != REFUSED
    }

    /// True once `cmd` has worked on this server.
    pub(crate) fn works(&self, cmd: Cmd) -> bool {
        self.state(cmd).load(Ordering::Relaxed) == WORKS
    }

    /// Remembers how the server answered `cmd`.
    pub(crate) fn learn(&self, cmd: Cmd, works: bool) {
        let state = if works { WORKS } else { REFUSED };
        if self.state(cmd).swap(state, Ordering::Relaxed) != state && !works {
            tracing::debug!(command = ?cmd, "the server refuses it: a script does its work");
        }
    }
}

/// Whether `failure` says that the server does not run the command at all (unknown, a
/// syntax error, not allowed by the ACL): nothing was done, so a script may do it instead.
pub(crate) fn refused(failure: &RedisFailure) -> bool {
    let cause = failure.cause.to_ascii_lowercase();
    failure.code.as_deref() == Some("NOPERM")
        || cause.contains("unknown command")
        || cause.contains("syntax error")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::FailureKind;

    fn failure(code: Option<&str>, cause: &str) -> RedisFailure {
        RedisFailure {
            code: code.map(str::to_owned),
            ..RedisFailure::new(FailureKind::Other, cause)
        }
    }

    #[test]
    fn an_unknown_or_refused_command_is_learnt_once_and_others_are_not() {
        let unknown = failure(
            Some("ERR"),
            "ERR unknown command 'DELIFEQ', with args beginning with: 'k'",
        );
        let syntax = failure(
            Some("ERR"),
            "An error was signalled by the server - ResponseError: syntax error",
        );
        let acl = failure(
            Some("NOPERM"),
            "User u has no permissions to run the 'delex' command",
        );
        let timeout = failure(None, "Redis command timed out after 500ms");
        let wrongtype = failure(
            Some("WRONGTYPE"),
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        );
        assert!(refused(&unknown) && refused(&syntax) && refused(&acl));
        assert!(!refused(&timeout) && !refused(&wrongtype));
        let native = Native::default();
        assert!(native.may_try(Cmd::Delifeq) && !native.works(Cmd::Delifeq));
        native.learn(Cmd::Delifeq, false);
        native.learn(Cmd::SetIfeq, true);
        assert!(!native.may_try(Cmd::Delifeq));
        assert!(native.may_try(Cmd::Delex) && native.works(Cmd::SetIfeq));
    }
}
