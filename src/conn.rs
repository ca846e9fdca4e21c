//! One Redis endpoint: a lazily (re)connected multiplexed connection where every call has a
//! timeout, and errors sorted into kinds a caller can act on.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, ErrorKind, RedisError};
use tokio::sync::Mutex;

/// What went wrong talking to Redis, in the kinds the metrics count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

/// A failed Redis call: its kind and a one-line cause (never containing credentials).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{cause}")]
pub struct RedisFailure {
    /// The kind, for metrics and for deciding whether to reconnect.
    pub kind: FailureKind,
    /// What happened, in one line.
    pub cause: String,
    /// Redis's error code (`WRONGTYPE`, `NOPERM`, ...) when the server answered with one.
    pub code: Option<String>,
}

impl RedisFailure {
    fn timeout(what: &str, after: Duration) -> Self {
        RedisFailure {
            kind: FailureKind::Timeout,
            cause: format!("{what} timed out after {}ms", after.as_millis()),
            code: None,
        }
    }

    fn from_redis(err: &RedisError) -> Self {
        let code = err.code().map(str::to_owned);
        let kind = match (err.kind(), code.as_deref()) {
            (_, Some("NOAUTH" | "WRONGPASS" | "NOPERM")) => FailureKind::Auth,
            (ErrorKind::AuthenticationFailed, _) => FailureKind::Auth,
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
        let cause = err.to_string().replace('\n', " ");
        RedisFailure { kind, cause, code }
    }

    /// True when the connection should be dropped and made anew before the next call.
    fn poisons_connection(&self) -> bool {
        matches!(self.kind, FailureKind::Timeout | FailureKind::Connection)
    }
}

/// A Redis endpoint with its timeouts. Calls share one multiplexed connection; a timeout or a
/// broken link drops it, and the next call connects again.
pub struct Endpoint {
    client: Client,
    connect_timeout: Duration,
    command_timeout: Duration,
    slot: Mutex<Option<MultiplexedConnection>>,
}

impl Endpoint {
    /// An endpoint for `client`. No connection is made until the first call.
    pub fn new(client: Client, connect_timeout: Duration, command_timeout: Duration) -> Self {
        Endpoint {
            client,
            connect_timeout,
            command_timeout,
            slot: Mutex::new(None),
        }
    }

    /// The default timeout of one command.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// The client, for opening dedicated connections (pub/sub).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    async fn connection(&self, budget: Duration) -> Result<MultiplexedConnection, RedisFailure> {
        let mut slot = self.slot.lock().await;
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let limit = budget.min(self.connect_timeout);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(limit))
            .set_response_timeout(None);
        let connect = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let conn = match tokio::time::timeout(limit, connect).await {
            Err(_) => return Err(RedisFailure::timeout("connecting to Redis", limit)),
            Ok(Err(e)) => return Err(RedisFailure::from_redis(&e)),
            Ok(Ok(conn)) => conn,
        };
        *slot = Some(conn.clone());
        Ok(conn)
    }

    async fn forget(&self) {
        *self.slot.lock().await = None;
    }

    /// Runs `call` on the shared connection, connecting first when needed, all within
    /// `timeout` (the command timeout when `None`).
    ///
    /// # Errors
    /// A [`RedisFailure`] of kind `Timeout` when the budget runs out, or the kind of the
    /// error Redis or the link gave. Timeouts and link errors drop the connection.
    pub async fn call<T, F, Fut>(
        &self,
        timeout: Option<Duration>,
        call: F,
    ) -> Result<T, RedisFailure>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let budget = timeout.unwrap_or(self.command_timeout);
        let started = tokio::time::Instant::now();
        let outcome = async {
            let conn = self.connection(budget).await?;
            let left = budget.saturating_sub(started.elapsed());
            match tokio::time::timeout(left, call(conn)).await {
                Err(_) => Err(RedisFailure::timeout("Redis command", budget)),
                Ok(Err(e)) => Err(RedisFailure::from_redis(&e)),
                Ok(Ok(v)) => Ok(v),
            }
        }
        .await;
        if let Err(failure) = &outcome {
            if failure.poisons_connection() {
                self.forget().await;
            }
        }
        outcome
    }
}

/// Makes sure a connection type can run scripts; used in bounds.
pub trait ScriptConnection: ConnectionLike + Send {}
impl<T: ConnectionLike + Send> ScriptConnection for T {}
