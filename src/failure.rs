//! What went wrong talking to Redis: the kinds the metrics count and a caller acts on, and
//! one failed call with its cause. A leaf shared by `conn` and `connector`.

use std::time::Duration;

use redis::{ErrorKind, RedisError};

/// What went wrong talking to Redis, in the kinds the metrics count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// No reply within the command or connect timeout.
    Timeout,
    /// Refused, reset or dropped connection.
    Connection,
    /// Bad password, unknown user, or a command or key the ACL forbids.
    Auth,
    /// A script failed inside Redis (other than a wrong key type).
    Script,
    /// Anything else.
    Other,
}

impl FailureKind {
    /// Every kind, in the order the metrics list them.
    pub const ALL: [FailureKind; 5] = [
        FailureKind::Timeout,
        FailureKind::Connection,
        FailureKind::Auth,
        FailureKind::Script,
        FailureKind::Other,
    ];

    /// The `kind` label of `leaderd_redis_errors_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Timeout => "timeout",
            FailureKind::Connection => "connection",
            FailureKind::Auth => "auth",
            FailureKind::Script => "script",
            FailureKind::Other => "other",
        }
    }
}

/// A failed Redis call: its kind and a one-line cause (never containing credentials), with
/// the error of the `redis` crate as its source when there was one.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{cause}")]
#[non_exhaustive]
pub struct RedisFailure {
    /// The kind, for metrics and for deciding whether to reconnect.
    pub kind: FailureKind,
    /// What happened, in one line.
    pub cause: String,
    /// Redis's error code (`WRONGTYPE`, `NOPERM`, ...) when the server answered with one.
    pub code: Option<String>,
    /// The `redis` crate's error, when the failure came from one.
    #[source]
    pub source: Option<std::sync::Arc<RedisError>>,
}

/// Equal when kind, cause and code are (the source is their origin).
impl PartialEq for RedisFailure {
    fn eq(&self, other: &Self) -> bool {
        (self.kind, &self.cause, &self.code) == (other.kind, &other.cause, &other.code)
    }
}

impl Eq for RedisFailure {}

impl RedisFailure {
    /// A failure without a `redis` error behind it.
    pub fn new(kind: FailureKind, cause: impl Into<String>) -> Self {
        RedisFailure {
            kind,
            cause: cause.into(),
            code: None,
            source: None,
        }
    }

    /// This failure to connect, naming the server (`127.0.0.1:6379`, the Sentinel master).
    pub(crate) fn connecting_to(mut self, server: &str) -> Self {
        self.cause = format!("cannot connect to {server}: {}", self.cause);
        self
    }

    pub(crate) fn timeout(what: &str, after: Duration) -> Self {
        RedisFailure::new(
            FailureKind::Timeout,
            format!("{what} timed out after {}ms", after.as_millis()),
        )
    }

    pub(crate) fn from_redis(err: &RedisError) -> Self {
        // A pipeline's server error (e.g. WRONGTYPE from HMGET) has no `code()` of its own.
        let code = err.code().map(str::to_owned).or_else(|| {
            let errors = err.clone().into_server_errors()?;
            errors.first().map(|(_, e)| e.code().to_owned())
        });
        let out_of_memory =
            code.as_deref() == Some("OOM") || err.to_string().contains("OOM command not allowed");
        let kind = match (err.kind(), code.as_deref()) {
            _ if out_of_memory => FailureKind::Other,
            (_, Some("NOAUTH" | "WRONGPASS" | "NOPERM")) => FailureKind::Auth,
            (ErrorKind::AuthenticationFailed, _) => FailureKind::Auth,
            // What Redis answers an unauthenticated client's longer request (> 10 arguments,
            // e.g. the acquire script's call) instead of NOAUTH.
            _ if err.to_string().contains("Protocol error: unauthenticated") => FailureKind::Auth,
            // A replica (a demoted master after a failover): connect again, which for
            // Sentinel means asking where the master is now.
            (_, Some("READONLY" | "MASTERDOWN")) => FailureKind::Connection,
            _ if err.is_timeout() => FailureKind::Timeout,
            _ if err.is_io_error()
                || err.is_connection_dropped()
                || err.is_connection_refusal() =>
            {
                FailureKind::Connection
            }
            (_, Some("NOSCRIPT" | "BUSY" | "WRONGTYPE")) => FailureKind::Script,
            _ if err.to_string().contains("script") => FailureKind::Script,
            _ => FailureKind::Other,
        };
        let mut cause = err.to_string().replace('\n', " ");
        if out_of_memory {
            cause = format!(
                "Redis is out of memory (used memory above maxmemory, writes refused; free memory or raise maxmemory): {cause}"
            );
        }
        RedisFailure {
            kind,
            cause,
            code,
            source: Some(std::sync::Arc::new(err.clone())),
        }
    }

    /// True when the connection should be dropped and made anew before the next call.
    pub(crate) fn poisons_connection(&self) -> bool {
        matches!(self.kind, FailureKind::Timeout | FailureKind::Connection)
    }
}
