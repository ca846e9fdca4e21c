//! Where the connection to the lease's Redis comes from: one server (`mode: single`), the
//! master the Sentinels name (`mode: sentinel`), or a Redis Cluster (`mode: cluster`).
//!
//! An [`crate::conn::Endpoint`] asks its [`Connector`] for a connection whenever it has none:
//! at the first call and after a call failed in a way that poisons the connection (a timeout,
//! a broken link, `READONLY`: the node is no longer a master, or a write too few replicas
//! acknowledged). For Sentinel the master is looked up again on every reconnect, and a
//! `+switch-master` announced by any Sentinel drops the connection too (see
//! [`Connector::epoch`]), so a failover is followed at the next call. A cluster connection
//! follows `MOVED` and `ASK` by itself.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, Cmd, ConnectionAddr, IntoConnectionInfo,
    Pipeline, RedisConnectionInfo, RedisError, RedisFuture, RedisResult, TlsCertificates, Value,
};

use crate::config::{Config, RedisMode};

/// Makes connections to the Redis that holds the lease. Cheap to clone.
// One per endpoint, made once: the size of a `Client` does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum Connector {
    /// One server.
    Direct(Client),
    /// The master that the Sentinels name, looked up on every (re)connect.
    Sentinel(Arc<SentinelConnector>),
    /// A Redis Cluster; MOVED and ASK are followed by the cluster connection.
    Cluster(Arc<ClusterConnector>),
}

/// A connection made by a [`Connector`]: a multiplexed connection to one server, or a
/// cluster connection that routes each command to the shard of its keys.
#[derive(Clone)]
pub enum Conn {
    /// One server (single mode, or the current Sentinel master).
    Single(MultiplexedConnection),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// `WAIT replicas ms` on the node that holds `key`, on the connection that just wrote
    /// it, so it counts the replicas that acknowledged that write. Returns how many did, or
    /// `None` when Redis gave no answer within `budget` (a server checks a `WAIT`'s timeout
    /// only at its next tick, up to 100 ms late with the default `hz 10`). The connection is
    /// then still blocked in the `WAIT`: drop it.
    ///
    /// # Errors
    /// The error of the connection or of Redis.
    pub async fn wait_for_replicas(
        &mut self,
        replicas: u32,
        budget: Duration,
        key: &str,
    ) -> RedisResult<Option<i64>> {
        let mut wait = redis::cmd("WAIT");
        // At least 1 ms: 0 would block forever.
        wait.arg(replicas).arg((budget.as_millis() as u64).max(1));
        let ask = async {
            match self {
                Conn::Single(c) => wait.query_async(c).await,
                Conn::Cluster(c) => {
                    // WAIT has no key: route it to the primary of the key's slot, whose
                    // connection carried the script (it would otherwise go to every primary).
                    let route = Route::new(key_slot(key.as_bytes()), SlotAddr::Master);
                    let routing =
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                    let reply = c.route_command(wait, routing).await?;
                    Ok(redis::from_redis_value(reply)?)
                }
            }
        };
        match tokio::time::timeout(budget, ask).await {
            Ok(answer) => answer.map(Some),
            Err(_) => Ok(None),
        }
    }
}

impl Connector {
    /// A new connection, within `limit` (the caller also bounds the whole call).
    ///
    /// # Errors
    /// The error of the connect, of the Sentinel lookup or of the cluster's first contact.
    pub async fn connect(&self, limit: Duration) -> RedisResult<Conn> {
        match self {
            Connector::Direct(client) => client
                .get_multiplexed_async_connection_with_config(&conn_config(limit))
                .await
                .map(Conn::Single),
            Connector::Sentinel(s) => s.master(limit).await.map(|(_, c)| Conn::Single(c)),
            Connector::Cluster(c) => c.client.get_async_connection().await.map(Conn::Cluster),
        }
    }

    /// Changes when connections made before should be dropped: for Sentinel, when the
    /// master moved; always 0 otherwise.
    pub fn epoch(&self) -> u64 {
        match self {
            Connector::Sentinel(s) => s.epoch(),
            _ => 0,
        }
    }

    /// A pub/sub connection on which a release published on the lease's channel arrives: the
    /// server itself, the current Sentinel master, or any reachable node of a cluster
    /// (a plain `PUBLISH` is broadcast to every node of a cluster).
    ///
    /// # Errors
    /// The error of the connect or of the lookup.
    pub async fn pubsub(&self, limit: Duration) -> RedisResult<PubSub> {
        match self {
            Connector::Direct(client) => client.get_async_pubsub().await,
            Connector::Sentinel(s) => {
                let (client, _) = s.master(limit).await?;
                client.get_async_pubsub().await
            }
            Connector::Cluster(c) => {
                // Start at the next seed each time, so one that hangs is not always first.
                let first = c.next_seed.fetch_add(1, Ordering::Relaxed);
                let n = c.seeds.len().max(1);
                let mut last = None;
                for seed in c.seeds.iter().cycle().skip(first % n).take(c.seeds.len()) {
                    match tokio::time::timeout(limit, seed.get_async_pubsub()).await {
                        Ok(Ok(pubsub)) => return Ok(pubsub),
                        Ok(Err(e)) => last = Some(e),
                        Err(_) => last = Some(io_error("connecting to a cluster seed timed out")),
                    }
                }
                Err(last.unwrap_or_else(|| io_error("no cluster seed node configured")))
            }
        }
    }
}

/// How to reach and authenticate with a data node (a master found through Sentinel).
#[derive(Clone)]
pub struct NodeSettings {
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
pub struct SentinelConnector {
    sentinels: Vec<Client>,
    master_name: String,
    node: NodeSettings,
    current: std::sync::Mutex<Option<(String, u16)>>,
    /// Bumped at every `+switch-master` of our master that a Sentinel announces.
    epoch: Arc<AtomicU64>,
    watching: AtomicBool,
}

impl SentinelConnector {
    /// A connector for the master `master_name`, asking `sentinels` (each with its own
    /// address and credentials), connecting to the master with `node`.
    pub fn new(sentinels: Vec<Client>, master_name: String, node: NodeSettings) -> Self {
        SentinelConnector {
            sentinels,
            master_name,
            node,
            current: std::sync::Mutex::new(None),
            epoch: Arc::new(AtomicU64::new(0)),
            watching: AtomicBool::new(false),
        }
    }

    /// Changes whenever a Sentinel announces that the master moved (`+switch-master`), so
    /// that connections made before are dropped even when the old master still answers (a
    /// demoted master keeps accepting writes until the Sentinels reconfigure it). The first
    /// call, inside a tokio runtime, starts listening to every Sentinel.
    pub fn epoch(&self) -> u64 {
        if !self.watching.swap(true, Ordering::SeqCst) {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    for sentinel in &self.sentinels {
                        rt.spawn(watch_switches(
                            sentinel.clone(),
                            self.master_name.clone(),
                            Arc::downgrade(&self.epoch),
                        ));
                    }
                }
                Err(_) => self.watching.store(false, Ordering::SeqCst),
            }
        }
        self.epoch.load(Ordering::SeqCst)
    }

    /// The current master: its client and a connection to it on which `ROLE` said `master`.
    /// When the user may not run `ROLE` (NOPERM), the node is taken on the Sentinels' word;
    /// a write to a replica then fails with `READONLY`, which makes the next call look again.
    ///
    /// # Errors
    /// No Sentinel answered, none knows the name, or the named master cannot be reached (its
    /// own error, e.g. a wrong password, is returned then).
    pub async fn master(&self, limit: Duration) -> RedisResult<(Client, MultiplexedConnection)> {
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

/// Follows one Sentinel's `+switch-master` announcements and bumps `epoch` for ours, until
/// the connector is gone.
async fn watch_switches(sentinel: Client, master_name: String, epoch: Weak<AtomicU64>) {
    let mut pause = Duration::from_millis(100);
    while epoch.strong_count() > 0 {
        let subscribe = async {
            let mut pubsub = sentinel.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
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
                    // "<master name> <old ip> <old port> <new ip> <new port>"
                    let payload: String = msg.get_payload().unwrap_or_default();
                    if payload.split(' ').next() == Some(master_name.as_str()) {
                        match epoch.upgrade() {
                            Some(epoch) => epoch.fetch_add(1, Ordering::SeqCst),
                            None => return,
                        };
                    }
                }
                Ok(None) => break,
                Err(_) if epoch.strong_count() == 0 => return,
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

/// A Redis Cluster reached through its seed nodes.
pub struct ClusterConnector {
    client: ClusterClient,
    seeds: Vec<Client>,
    next_seed: std::sync::atomic::AtomicUsize,
}

impl ClusterConnector {
    /// `client` for the cluster; `seeds` (the same nodes as plain clients) for pub/sub.
    pub fn new(client: ClusterClient, seeds: Vec<Client>) -> Self {
        ClusterConnector {
            client,
            seeds,
            next_seed: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

fn conn_config(limit: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(limit))
        .set_response_timeout(None)
}

fn io_error(what: &str) -> RedisError {
    RedisError::from(io::Error::other(what.to_string()))
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (or of the whole key) mod 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Makes sure rustls has its crypto provider (ring, the one built in) before the first TLS
/// connection.
pub fn init_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Reads the TLS files: a CA bundle (`None`: the system's roots) and a client certificate
/// with its key (both or neither). Errors name the file, never its contents.
///
/// # Errors
/// One line naming the key and the file that cannot be read.
pub fn load_tls(
    ca_file: Option<&Path>,
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
) -> Result<TlsCertificates, String> {
    init_tls();
    let read = |key: &str, path: &Path| {
        std::fs::read(path).map_err(|e| format!("redis.tls.{key}: cannot read {path:?}: {e}"))
    };
    let root_cert = ca_file.map(|p| read("ca_file", p)).transpose()?;
    let client_tls = match (cert_file, key_file) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read("cert_file", cert)?,
            client_key: read("key_file", key)?,
        }),
        _ => None,
    };
    Ok(TlsCertificates {
        client_tls,
        root_cert,
    })
}

/// The connector of a configuration in mode single, sentinel or cluster (redlock makes one
/// client per node with [`client_for_url`]).
///
/// # Errors
/// One line naming the key: a URL that does not parse, a TLS file that cannot be read or
/// parsed.
pub fn from_config(config: &Config) -> Result<Connector, String> {
    let r = &config.redis;
    match r.mode {
        RedisMode::Single | RedisMode::Redlock => {
            let url = r.url.as_deref().unwrap_or("redis://127.0.0.1:6379/0");
            client_for_url(config, url, "redis.url").map(Connector::Direct)
        }
        RedisMode::Sentinel => {
            let sentinels = r
                .sentinels
                .iter()
                .enumerate()
                .map(|(i, url)| sentinel_client(config, url, i))
                .collect::<Result<Vec<_>, _>>()?;
            let tls = r.sentinels.iter().any(|u| u.starts_with("rediss://"));
            let mut redis = RedisConnectionInfo::default();
            if let Some(user) = &r.username {
                redis = redis.set_username(user);
            }
            if let Some(password) = &r.password {
                redis = redis.set_password(password.expose());
            }
            let node = NodeSettings {
                redis,
                tls,
                certs: if tls { certificates(config)? } else { None },
            };
            let name = r.master_name.clone().unwrap_or_default();
            Ok(Connector::Sentinel(Arc::new(SentinelConnector::new(
                sentinels, name, node,
            ))))
        }
        RedisMode::Cluster => {
            let mut infos = Vec::new();
            let mut seeds = Vec::new();
            for (i, url) in r.urls.iter().enumerate() {
                let key = format!("redis.urls[{i}]");
                infos.push(
                    url.as_str()
                        .into_connection_info()
                        .map_err(|_| bad_url(&key))?,
                );
                seeds.push(client_for_url(config, url, &key)?);
            }
            let mut builder = ClusterClient::builder(infos)
                .connection_timeout(r.connect_timeout)
                .response_timeout(r.command_timeout);
            if let Some(user) = &r.username {
                builder = builder.username(user);
            }
            if let Some(password) = &r.password {
                builder = builder.password(password.expose());
            }
            if r.urls.iter().any(|u| u.starts_with("rediss://")) {
                init_tls();
                if let Some(certs) = certificates(config)? {
                    builder = builder.certs(certs);
                }
            }
            let client = builder
                .build()
                .map_err(|e| format!("redis.urls: cannot make a cluster client: {e}"))?;
            Ok(Connector::Cluster(Arc::new(ClusterConnector::new(
                client, seeds,
            ))))
        }
    }
}

/// A client for one data node at `url` (named `key` in errors), with the configuration's
/// username and password (when set, they replace those in the URL) and, for `rediss://`,
/// its TLS files.
///
/// # Errors
/// One line naming `key` (or the TLS file) and what is wrong.
pub fn client_for_url(config: &Config, url: &str, key: &str) -> Result<Client, String> {
    let info = url.into_connection_info().map_err(|_| bad_url(key))?;
    let mut settings = info.redis_settings().clone();
    if let Some(user) = &config.redis.username {
        settings = settings.set_username(user);
    }
    if let Some(password) = &config.redis.password {
        settings = settings.set_password(password.expose());
    }
    let info = info.set_redis_settings(settings);
    open_client(config, info, key)
}

/// A Sentinel's client: its own credentials are those of its URL (`redis://:pw@s1:26379`).
fn sentinel_client(config: &Config, url: &str, i: usize) -> Result<Client, String> {
    let key = format!("redis.sentinels[{i}]");
    let info = url.into_connection_info().map_err(|_| bad_url(&key))?;
    // A Sentinel has no databases: a /db in its URL would make the connect send SELECT.
    let settings = info.redis_settings().clone().set_db(0);
    open_client(config, info.set_redis_settings(settings), &key)
}

fn open_client(config: &Config, info: redis::ConnectionInfo, key: &str) -> Result<Client, String> {
    if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
        return Client::open(info).map_err(|_| bad_url(key));
    }
    init_tls();
    match certificates(config)? {
        Some(certs) => Client::build_with_tls(info, certs)
            .map_err(|e| format!("redis.tls: cannot use the TLS files for {key}: {e}")),
        None => Client::open(info).map_err(|_| bad_url(key)),
    }
}

/// The TLS files of `redis.tls`, read; None when it is not set.
fn certificates(config: &Config) -> Result<Option<TlsCertificates>, String> {
    let Some(tls) = &config.redis.tls else {
        return Ok(None);
    };
    load_tls(
        tls.ca_file.as_deref(),
        tls.cert_file.as_deref(),
        tls.key_file.as_deref(),
    )
    .map(Some)
}

fn bad_url(key: &str) -> String {
    format!("{key}: not a valid Redis URL (redis://host:port/db, rediss://..., unix:///path)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(
            key_slot(b"leaderd:{orders}:lock"),
            key_slot(b"leaderd:{orders}:fence")
        );
        assert_eq!(key_slot(b"x{orders}y"), key_slot(b"orders"));
        // An empty tag does not count: the whole key is hashed.
        assert_eq!(key_slot(b"a{}b"), crc16(b"a{}b") % 16384);
    }
}
