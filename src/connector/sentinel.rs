//! Sentinel discovery: the master the Sentinels name, confirmed with `ROLE`, and the
//! failover announcements that drop connections made before a failover (`failover.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{
    Client, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, RedisError, RedisResult,
    TlsCertificates, Value,
};

use super::failover::{self, Moves};
use super::{conn_config, io_error};

/// How to reach and authenticate with a data node (a master found through Sentinel).
#[derive(Clone)]
pub(crate) struct NodeSettings {
    /// Username, password, database and protocol sent on connect.
    pub redis: RedisConnectionInfo,
    /// Connect with TLS.
    pub tls: bool,
    /// CA and client certificate for TLS; `None`: the system's roots, no client certificate.
    pub certs: Option<TlsCertificates>,
}

impl NodeSettings {
    fn client(&self, host: String, port: u16) -> RedisResult<Client> {
        let addr = if self.tls {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        };
        let info = addr
            .into_connection_info()?
            .set_redis_settings(self.redis.clone());
        match (&self.certs, self.tls) {
            (Some(certs), true) => Client::build_with_tls(info, certs.clone()),
            _ => Client::open(info),
        }
    }
}

/// Finds the master of `master_name` through the Sentinels, the way the Sentinel client
/// specification asks: ask the Sentinels (all at once; the address a majority names wins), then
/// confirm with `ROLE` on the named node that it is a master.
pub(crate) struct SentinelConnector {
    sentinels: Vec<Client>,
    master_name: String,
    node: NodeSettings,
    current: std::sync::Mutex<Option<(String, u16)>>,
    /// The failovers of our master that a Sentinel announced.
    moves: Arc<Moves>,
    watching: AtomicBool,
}

impl SentinelConnector {
    /// A connector for the master `master_name`, asking `sentinels` (each with its own
    /// address and credentials), connecting to the master with `node`.
    pub(crate) fn new(sentinels: Vec<Client>, master_name: String, node: NodeSettings) -> Self {
        SentinelConnector {
            sentinels,
            master_name,
            node,
            current: std::sync::Mutex::new(None),
            moves: Arc::new(Moves::default()),
            watching: AtomicBool::new(false),
        }
    }

    /// The name of the master the Sentinels are asked for (`redis.master_name`).
    pub(crate) fn master_name(&self) -> &str {
        &self.master_name
    }

    /// Changes whenever a Sentinel announces that the master moved (`+promoted-slave`,
    /// `+switch-master`), so that connections made before are dropped even when the old
    /// master still answers (a demoted master keeps accepting writes until the Sentinels
    /// reconfigure it). The first call, inside a tokio runtime, starts listening to every
    /// Sentinel.
    pub(crate) fn epoch(&self) -> u64 {
        if !self.watching.swap(true, Ordering::SeqCst) {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    for sentinel in &self.sentinels {
                        rt.spawn(watch_switches(
                            sentinel.clone(),
                            self.master_name.clone(),
                            Arc::downgrade(&self.moves),
                        ));
                    }
                }
                Err(_) => self.watching.store(false, Ordering::SeqCst),
            }
        }
        self.moves.epoch()
    }

    /// The current master: its client and a connection to it on which `ROLE` said `master`.
    /// When the user may not run `ROLE` (NOPERM), the node is taken on the Sentinels' word;
    /// a write to a replica then fails with `READONLY`, which makes the next call look again.
    ///
    /// # Errors
    /// No Sentinel answered, none knows the name, or the named master cannot be reached (its
    /// own error, e.g. a wrong password, is returned then).
    pub(crate) async fn master(
        &self,
        limit: Duration,
    ) -> RedisResult<(Client, MultiplexedConnection)> {
        let (mut named, unknown, sentinel_err) = self.ask_sentinels(limit).await;
        // Right after a failover, the Sentinel that made it knows better than the others.
        self.moves.prefer_latest(&mut named);
        let mut master_err = None;
        for ((host, port), _) in named {
            match self.confirm(&host, port, limit).await {
                Ok(found) => {
                    self.note_master(&host, port);
                    return Ok(found);
                }
                Err(e) => master_err = Some(e),
            }
        }
        Err(match (master_err, unknown, sentinel_err) {
            (Some(e), _, _) => e,
            (None, true, _) => RedisError::from((
                redis::ErrorKind::MasterNameNotFoundBySentinel,
                "no Sentinel knows the master",
                format!("redis.master_name {:?}", self.master_name),
            )),
            (None, false, Some(e)) if e.is_io_error() || e.is_timeout() => {
                io_error(&format!("no Sentinel of redis.sentinels answered ({e})"))
            }
            (None, false, Some(e)) => e,
            (None, false, None) => io_error("no Sentinel configured"),
        })
    }

    /// Asks every Sentinel at once for the master's address: the addresses named, most named
    /// first, with how many Sentinels named each; whether a Sentinel did not know the name;
    /// the last error of a Sentinel.
    async fn ask_sentinels(
        &self,
        limit: Duration,
    ) -> (Vec<((String, u16), usize)>, bool, Option<RedisError>) {
        let mut asks: FuturesUnordered<_> = self
            .sentinels
            .iter()
            .map(|s| ask_sentinel(s, &self.master_name, limit))
            .collect();
        // Addresses in the order first named, with how many Sentinels named each. During a
        // failover a Sentinel can lag behind the others: an address a majority names is taken
        // at once; otherwise, once every Sentinel answered or failed, the most named first.
        let majority = self.sentinels.len() / 2 + 1;
        let mut named: Vec<((String, u16), usize)> = Vec::new();
        let mut sentinel_err = None;
        let mut unknown = false;
        while let Some(answer) = asks.next().await {
            match answer {
                Ok(Some(addr)) => {
                    let count = match named.iter_mut().find(|(a, _)| *a == addr) {
                        Some((_, n)) => {
                            *n += 1;
                            *n
                        }
                        None => {
                            named.push((addr, 1));
                            1
                        }
                    };
                    if count >= majority {
                        break;
                    }
                }
                Ok(None) => unknown = true,
                Err(e) => sentinel_err = Some(e),
            }
        }
        drop(asks);
        // Stable: among equals, the first named stays first.
        named.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        (named, unknown, sentinel_err)
    }

    /// Logs the master when it is not the one found last time (the first one, a failover).
    fn note_master(&self, host: &str, port: u16) {
        let Ok(mut current) = self.current.lock() else {
            return;
        };
        let found = Some((host.to_string(), port));
        if *current != found {
            tracing::info!(
                event = "redis_master",
                master_name = %self.master_name,
                addr = %format!("{host}:{port}"),
                "the Sentinels name {host}:{port} as master {}",
                self.master_name
            );
            *current = found;
        }
    }

    async fn confirm(
        &self,
        host: &str,
        port: u16,
        limit: Duration,
    ) -> RedisResult<(Client, MultiplexedConnection)> {
        let client = self.node.client(host.to_string(), port)?;
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&conn_config(limit))
            .await?;
        let role: RedisResult<Value> = redis::cmd("ROLE").query_async(&mut conn).await;
        match role {
            Ok(Value::Array(items)) => match items.first() {
                Some(Value::BulkString(b)) if b.as_slice() == b"master" => Ok((client, conn)),
                _ => Err(RedisError::from((
                    redis::ErrorKind::MasterNameNotFoundBySentinel,
                    "the node the Sentinels name is not a master (yet)",
                    format!("{host}:{port}"),
                ))),
            },
            Err(e) if e.code() == Some("NOPERM") => Ok((client, conn)),
            Err(e) => Err(e),
            Ok(_) => Err(io_error("unexpected reply to ROLE")),
        }
    }
}

/// Follows one Sentinel's announcements of a failover and records ours in `moves`, until
/// the connector is gone.
async fn watch_switches(sentinel: Client, master_name: String, moves: Weak<Moves>) {
    let mut pause = Duration::from_millis(100);
    while moves.strong_count() > 0 {
        let subscribe = async {
            let mut pubsub = sentinel.get_async_pubsub().await?;
            pubsub.subscribe(&failover::CHANNELS[..]).await?;
            Ok::<_, RedisError>(pubsub)
        };
        let Ok(Ok(pubsub)) = tokio::time::timeout(Duration::from_secs(2), subscribe).await else {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
            continue;
        };
        pause = Duration::from_millis(100);
        let mut messages = pubsub.into_on_message();
        loop {
            match tokio::time::timeout(Duration::from_secs(1), messages.next()).await {
                Ok(Some(msg)) => {
                    let payload: String = msg.get_payload().unwrap_or_default();
                    let Some(mv) = failover::parse(msg.get_channel_name(), &payload, &master_name)
                    else {
                        continue;
                    };
                    match moves.upgrade() {
                        Some(moves) => moves.heard(mv),
                        None => return,
                    }
                }
                Ok(None) => break,
                Err(_) if moves.strong_count() == 0 => return,
                Err(_) => {}
            }
        }
    }
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME`: `None` when this Sentinel does not know the name.
async fn ask_sentinel(
    sentinel: &Client,
    master_name: &str,
    limit: Duration,
) -> RedisResult<Option<(String, u16)>> {
    let ask = async {
        let mut conn = sentinel
            .get_multiplexed_async_connection_with_config(&conn_config(limit))
            .await?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(master_name)
            .query_async(&mut conn)
            .await?;
        Ok(addr)
    };
    match tokio::time::timeout(limit, ask).await {
        Ok(answer) => answer,
        Err(_) => Err(io_error("asking a Sentinel timed out")),
    }
}
