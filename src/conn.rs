//! One Redis endpoint: a lazily (re)connected multiplexed connection where every call has a
//! timeout, and errors sorted into kinds a caller can act on.

use std::future::Future;
use std::time::Duration;

use std::sync::{Arc, Mutex, PoisonError};

use redis::Client;
use tokio::sync::watch;

use crate::connector::{Conn, Connector};
use crate::server_info::{ServerInfo, ServerInfoWatch};

pub use crate::failure::{FailureKind, RedisFailure};

/// What the server of a new connection is: its `maxmemory-policy` and its [`ServerInfo`],
/// read in the background (never delaying the call that connected) and published; nothing
/// when the server does not tell. The server info is logged at DEBUG when it is new.
fn read_server(mut conn: Conn, watches: ServerWatches, server: String, budget: Duration) {
    tokio::spawn(async move {
        let read = crate::eviction::read_policy(&mut conn);
        if let Ok(Some(policy)) = tokio::time::timeout(budget, read).await {
            let policy = crate::eviction::EvictionPolicy {
                server: server.clone(),
                policy,
            };
            watches.eviction.send_replace(Some(policy));
        }
        let read = crate::server_info::read(&mut conn);
        if let Ok(Some(info)) = tokio::time::timeout(budget, read).await {
            let new = watches.info.send_if_modified(|seen| {
                let new = seen.as_ref() != Some(&info);
                *seen = Some(info.clone());
                new
            });
            if new {
                tracing::debug!(server = %server, "server {info}");
            }
        }
    });
}

/// Where [`read_server`] publishes.
#[derive(Clone)]
struct ServerWatches {
    eviction: Arc<watch::Sender<Option<crate::eviction::EvictionPolicy>>>,
    info: Arc<watch::Sender<Option<ServerInfo>>>,
}

fn abandoned() -> RedisFailure {
    RedisFailure::new(FailureKind::Connection, "the connect was abandoned")
}

/// When a connection was made: the connector's epoch (a Sentinel move) and the endpoint's
/// generation (bumped when a call drops the connection). Another `Made` now: make a new one.
type Made = (u64, u64);

/// A Redis endpoint with its timeouts. Calls share one multiplexed connection; a timeout or a
/// broken link drops it, and the next call connects again.
pub(crate) struct Endpoint {
    connector: Connector,
    connect_timeout: Duration,
    command_timeout: Duration,
    min_replicas_ack: u32,
    /// The shared connection, with the [`Made`] it was made at.
    slot: Arc<Mutex<Option<(Conn, Made)>>>,
    /// The connect in progress or last finished: for which [`Made`], and its outcome.
    connecting: Mutex<Option<(Made, Connecting)>>,
    /// Bumped when a call drops the connection (a timeout, a broken link): without waiting
    /// for the slot, which a connect in progress may hold for up to the connect timeout.
    generation: std::sync::atomic::AtomicU64,
    /// The server's `maxmemory-policy` and [`ServerInfo`], read at every new connection.
    server: ServerWatches,
}

/// Where a connect's outcome appears (`None` while it runs).
type Connecting = watch::Receiver<Option<Result<Conn, RedisFailure>>>;

impl Endpoint {
    /// An endpoint for `client`. No connection is made until the first call.
    pub(crate) fn new(
        client: Client,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Self {
        Self::with_connector(Connector::Direct(client), connect_timeout, command_timeout)
    }

    /// An endpoint whose connections come from `connector` (a server, the Sentinel master,
    /// a cluster). No connection is made until the first call.
    pub(crate) fn with_connector(
        connector: Connector,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Self {
        Endpoint {
            connector,
            connect_timeout,
            command_timeout,
            min_replicas_ack: 0,
            slot: Arc::default(),
            connecting: Mutex::new(None),
            generation: std::sync::atomic::AtomicU64::new(0),
            server: ServerWatches {
                eviction: Arc::new(watch::Sender::new(None)),
                info: Arc::new(watch::Sender::new(None)),
            },
        }
    }

    /// Writes through this endpoint count only once `replicas` replicas acknowledged them
    /// (`WAIT`, see [`Conn::wait_for_replicas`]); 0, the default, waits for none.
    pub(crate) fn with_min_replicas_ack(mut self, replicas: u32) -> Self {
        self.min_replicas_ack = replicas;
        self
    }

    /// How many replicas must acknowledge a write (`redis.min_replicas_ack`).
    pub(crate) fn min_replicas_ack(&self) -> u32 {
        self.min_replicas_ack
    }

    /// How long a `WAIT` may take in a call begun at `started` with `timeout` (the command
    /// timeout when `None`): what is left of the budget, less a small margin so that it ends
    /// before the call itself times out.
    pub(crate) fn wait_budget(
        &self,
        timeout: Option<Duration>,
        started: tokio::time::Instant,
    ) -> Duration {
        let left = timeout
            .unwrap_or(self.command_timeout)
            .saturating_sub(started.elapsed());
        left.saturating_sub(left / 10 + Duration::from_millis(2))
    }

    /// The default timeout of one command.
    pub(crate) fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// Where connections come from, for opening dedicated ones (pub/sub).
    pub(crate) fn connector(&self) -> &Connector {
        &self.connector
    }

    /// The connect timeout.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The shared connection, made anew when there is none or it is stale. A connect runs in
    /// the background for up to its limit ([`Connector::connect_limit`]), whatever the
    /// budget of the call that
    /// began it: a call waits for it within its own budget, and one that gives up leaves it
    /// to the next (a cluster seed that hangs makes its first connect slower than a call's
    /// budget, which would otherwise never connect at all).
    async fn connection(&self, budget: Duration) -> Result<Conn, RedisFailure> {
        let now = self.made();
        let current = self
            .slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some((conn, made)) = current {
            if made == now {
                return Ok(conn);
            }
        }
        let mut outcome = self.connect_in_background(now);
        let waited = tokio::time::timeout(budget, outcome.wait_for(Option::is_some)).await;
        let done = match waited {
            Err(_) => return Err(RedisFailure::timeout("connecting to Redis", budget)),
            Ok(Ok(done)) => done.clone(),
            Ok(Err(_)) => None,
        };
        done.unwrap_or_else(|| Err(abandoned()))
    }

    /// The connect for `made`: the one in progress, or a new one.
    fn connect_in_background(&self, made: Made) -> Connecting {
        let mut connecting = self
            .connecting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((m, outcome)) = connecting.as_ref() {
            if *m == made && outcome.borrow().is_none() {
                return outcome.clone();
            }
        }
        let (tx, rx) = watch::channel(None);
        *connecting = Some((made, rx.clone()));
        let limit = self.connector.connect_limit(self.connect_timeout);
        let (connector, slot) = (self.connector.clone(), self.slot.clone());
        let (watches, budget) = (self.server.clone(), self.command_timeout);
        tokio::spawn(async move {
            let server = connector.server_label();
            let outcome = match tokio::time::timeout(limit, connector.connect(limit)).await {
                Err(_) => Err(RedisFailure::timeout(
                    &format!("connecting to {server}"),
                    limit,
                )),
                Ok(Err(e)) => Err(RedisFailure::from_redis(&e).connecting_to(&server)),
                Ok(Ok(conn)) => Ok(conn),
            };
            if let Ok(conn) = &outcome {
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some((conn.clone(), made));
                read_server(conn.clone(), watches, server, budget);
            }
            tx.send_replace(Some(outcome));
        });
        rx
    }

    fn made(&self) -> Made {
        let generation = self.generation.load(std::sync::atomic::Ordering::SeqCst);
        (self.connector.epoch(), generation)
    }

    /// The server's `maxmemory-policy` as last read (at every new connection).
    pub(crate) fn eviction_policy(
        &self,
    ) -> tokio::sync::watch::Receiver<Option<crate::eviction::EvictionPolicy>> {
        self.server.eviction.subscribe()
    }

    /// What the server offers ([`ServerInfo`]) as last read (at every new connection).
    #[cfg_attr(not(feature = "daemon"), allow(dead_code))] // read by check-config --probe
    pub(crate) fn server_info(&self) -> ServerInfoWatch {
        self.server.info.subscribe()
    }

    fn forget(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Drops the shared connection, so that the next call connects again (for Sentinel:
    /// asks where the master is). Used when a write was not acknowledged by enough
    /// replicas, which is what a master cut off by a failover looks like.
    pub(crate) async fn reset(&self) {
        self.forget();
    }

    /// Runs `call` on the shared connection, connecting first when needed, all within
    /// `timeout` (the command timeout when `None`).
    ///
    /// # Errors
    /// A [`RedisFailure`] of kind `Timeout` when the budget runs out, or the kind of the
    /// error Redis or the link gave. Timeouts and link errors drop the connection.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        timeout: Option<Duration>,
        call: F,
    ) -> Result<T, RedisFailure>
    where
        F: FnOnce(Conn) -> Fut,
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
            if failure.poisons_connection() && !self.connector.heals_itself(failure.kind) {
                self.forget();
            }
        }
        outcome
    }
}
