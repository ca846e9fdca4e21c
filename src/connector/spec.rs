//! The connection spec of a lease's Redis (which servers, in which mode, with which
//! credentials and TLS files), and the clients and connector made from it.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::{Client, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, TlsCertificates};

use super::tls::load_tls;
use super::{init_tls, ClusterConnector, Connector, NodeSettings, SentinelConnector};

/// Where the lease's Redis is, and how to talk to it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RedisSpec {
    /// How Redis is deployed, with the addresses that deployment needs.
    pub topology: Topology,
    /// The ACL user; when set it replaces the one in a data node's URL.
    pub username: Option<String>,
    /// The password; when set it replaces the one in a data node's URL.
    pub password: Option<Secret>,
    /// Files for `rediss://` connections.
    pub tls: TlsFiles,
    /// When > 0, an acquire or renew counts only after that many replicas acknowledged it
    /// (`WAIT`); not with [`Topology::Redlock`], whose nodes have no replicas.
    pub min_replicas_ack: u32,
}

impl RedisSpec {
    /// One server at `url`, without credentials beyond the URL's, TLS files or `WAIT`.
    pub fn single(url: &str) -> Self {
        Self::new(Topology::Single {
            url: url.to_owned(),
        })
    }

    /// `topology` with no credentials beyond the URLs', no TLS files and no `WAIT`.
    pub fn new(topology: Topology) -> Self {
        RedisSpec {
            topology,
            username: None,
            password: None,
            tls: TlsFiles::default(),
            min_replicas_ack: 0,
        }
    }

    /// The ACL user and password, replacing those in a data node's URL.
    pub fn with_credentials(mut self, username: Option<&str>, password: Option<Secret>) -> Self {
        self.username = username.map(str::to_owned);
        self.password = password;
        self
    }

    /// The files for `rediss://` connections.
    pub fn with_tls(mut self, tls: TlsFiles) -> Self {
        self.tls = tls;
        self
    }

    /// An acquire or renew counts only after `n` replicas acknowledged it (`WAIT`).
    pub fn with_min_replicas_ack(mut self, n: u32) -> Self {
        self.min_replicas_ack = n;
        self
    }
}

/// How the lease store is deployed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// One server.
    Single {
        /// `redis://host:port/db`, `rediss://...` or `unix:///path`.
        url: String,
    },
    /// The master that Sentinels name, looked up again on every reconnect.
    Sentinel {
        /// The Sentinels' URLs (their own credentials are in the URLs).
        sentinels: Vec<String>,
        /// The name of the monitored master.
        master_name: String,
    },
    /// A Redis Cluster, reached through seed nodes.
    Cluster {
        /// The seed nodes.
        urls: Vec<String>,
    },
    /// Independent masters (an odd number >= 3); a majority holds the lease.
    Redlock {
        /// The masters.
        urls: Vec<String>,
    },
}

/// A password: kept out of `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for the one place that must send it (the Redis AUTH).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// PEM files for TLS connections; all `None`: the system's CA roots, no client certificate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TlsFiles {
    /// CA bundle to verify the servers with, instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (with `key_file`), for servers that ask for one.
    pub cert_file: Option<PathBuf>,
    /// Private key of `cert_file`.
    pub key_file: Option<PathBuf>,
}

impl TlsFiles {
    fn is_empty(&self) -> bool {
        *self == TlsFiles::default()
    }
}

/// Why no client could be made from a [`RedisSpec`]: a mistake in the spec, found before
/// anything is sent. `key` names the setting (`redis.url`, `redis.urls[1]`, ...).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// A URL that does not parse (the URL is not repeated: it may hold a password).
    #[error("{key}: not a valid Redis URL (redis://host:port/db, rediss://..., unix:///path)")]
    BadUrl {
        /// The setting.
        key: String,
        /// Why it does not parse.
        #[source]
        cause: redis::RedisError,
    },
    /// A TLS file that cannot be read.
    #[error("redis.tls.{which}: cannot read {path:?}: {cause}")]
    TlsFile {
        /// `ca_file`, `cert_file` or `key_file`.
        which: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
    /// TLS files that cannot be used (not PEM, a key that does not match).
    #[error("redis.tls: cannot use the TLS files for {key}: {cause}")]
    Tls {
        /// The setting whose connection needs them.
        key: String,
        /// Why.
        #[source]
        cause: redis::RedisError,
    },
    /// The cluster client could not be made from the seed nodes.
    #[error("redis.urls: cannot make a cluster client: {0}")]
    Cluster(#[source] redis::RedisError),
    /// A mode that needs addresses got too few, or the wrong number (Redlock: odd, >= 3).
    #[error("{key}: {needs} (got {got})")]
    Nodes {
        /// The setting.
        key: &'static str,
        /// What the mode needs.
        needs: &'static str,
        /// How many were given.
        got: usize,
    },
    /// `min_replicas_ack` with Redlock, whose nodes are independent masters.
    #[error("redis.min_replicas_ack: {0} is not supported with mode redlock (its nodes are independent masters; allowed: 0)")]
    ReplicasWithRedlock(u32),
}

impl RedisSpec {
    /// The connector of mode single, sentinel or cluster (Redlock has one client per node,
    /// see [`RedisSpec::client_for_url`]); `timeouts` are the (connect, command) timeouts.
    ///
    /// # Errors
    /// A [`ConnectError`] naming the setting.
    pub(crate) fn connector(
        &self,
        timeouts: (Duration, Duration),
    ) -> Result<Connector, ConnectError> {
        match &self.topology {
            Topology::Single { url } => {
                self.client_for_url(url, "redis.url").map(Connector::Direct)
            }
            Topology::Redlock { .. } => Err(ConnectError::Nodes {
                key: "redis.urls",
                needs: "mode redlock has no single connector",
                got: 0,
            }),
            Topology::Sentinel {
                sentinels,
                master_name,
            } => self.sentinel_connector(sentinels, master_name),
            Topology::Cluster { urls } => self.cluster_connector(urls, timeouts),
        }
    }

    fn sentinel_connector(
        &self,
        sentinels: &[String],
        master_name: &str,
    ) -> Result<Connector, ConnectError> {
        if sentinels.is_empty() {
            return Err(ConnectError::Nodes {
                key: "redis.sentinels",
                needs: "mode sentinel needs at least one sentinel URL",
                got: 0,
            });
        }
        let clients = sentinels
            .iter()
            .enumerate()
            .map(|(i, url)| self.sentinel_client(url, i))
            .collect::<Result<Vec<_>, _>>()?;
        // With TLS files given the master is always reached over TLS, whatever the Sentinels use.
        let tls = !self.tls.is_empty() || sentinels.iter().any(|u| u.starts_with("rediss://"));
        let mut redis = RedisConnectionInfo::default().set_skip_set_lib_name();
        if let Some(user) = &self.username {
            redis = redis.set_username(user);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password.expose());
        }
        let node = NodeSettings {
            redis,
            tls,
            certs: if tls { self.certificates()? } else { None },
        };
        Ok(Connector::Sentinel(Arc::new(SentinelConnector::new(
            clients,
            master_name.to_owned(),
            node,
        ))))
    }

    /// `timeouts`: (connect, response).
    fn cluster_connector(
        &self,
        urls: &[String],
        (connect, response): (Duration, Duration),
    ) -> Result<Connector, ConnectError> {
        if urls.is_empty() {
            return Err(ConnectError::Nodes {
                key: "redis.urls",
                needs: "mode cluster needs at least one seed node URL",
                got: 0,
            });
        }
        let mut infos = Vec::new();
        let mut seeds = Vec::new();
        for (i, url) in urls.iter().enumerate() {
            let key = format!("redis.urls[{i}]");
            let info =
                url.as_str()
                    .into_connection_info()
                    .map_err(|cause| ConnectError::BadUrl {
                        key: key.clone(),
                        cause,
                    })?;
            infos.push(info);
            seeds.push(self.client_for_url(url, &key)?);
        }
        // The cluster client connects to every seed and waits for all of them: half the
        // connect timeout each, so that one seed that hangs leaves time for the rest.
        let mut builder = ClusterClient::builder(infos)
            .connection_timeout(connect / 2)
            .response_timeout(response);
        if let Some(user) = &self.username {
            builder = builder.username(user);
        }
        if let Some(password) = &self.password {
            builder = builder.password(password.expose());
        }
        if urls.iter().any(|u| u.starts_with("rediss://")) {
            init_tls();
            if let Some(certs) = self.certificates()? {
                builder = builder.certs(certs);
            }
        }
        let client = builder.build().map_err(ConnectError::Cluster)?;
        Ok(Connector::Cluster(Arc::new(ClusterConnector::new(
            client, seeds,
        ))))
    }

    /// A client for one data node at `url` (named `key` in errors), with the spec's
    /// username and password (when set, they replace those in the URL) and, for
    /// `rediss://`, its TLS files.
    ///
    /// # Errors
    /// A [`ConnectError`] naming `key` (or the TLS file).
    pub(crate) fn client_for_url(&self, url: &str, key: &str) -> Result<Client, ConnectError> {
        let info = url
            .into_connection_info()
            .map_err(|cause| ConnectError::BadUrl {
                key: key.to_owned(),
                cause,
            })?;
        let mut settings = info.redis_settings().clone();
        if let Some(user) = &self.username {
            settings = settings.set_username(user);
        }
        if let Some(password) = &self.password {
            settings = settings.set_password(password.expose());
        }
        self.open_client(info.set_redis_settings(settings), key)
    }

    /// A Sentinel's client: its own credentials are those of its URL (`redis://:pw@s1:26379`).
    fn sentinel_client(&self, url: &str, i: usize) -> Result<Client, ConnectError> {
        let key = format!("redis.sentinels[{i}]");
        let info = url
            .into_connection_info()
            .map_err(|cause| ConnectError::BadUrl {
                key: key.clone(),
                cause,
            })?;
        // A Sentinel has no databases: a /db in its URL would make the connect send SELECT.
        let settings = info.redis_settings().clone().set_db(0);
        self.open_client(info.set_redis_settings(settings), &key)
    }

    fn open_client(&self, info: redis::ConnectionInfo, key: &str) -> Result<Client, ConnectError> {
        let info = super::without_setinfo(info);
        let bad_url = |cause| ConnectError::BadUrl {
            key: key.to_owned(),
            cause,
        };
        if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
            return Client::open(info).map_err(bad_url);
        }
        init_tls();
        match self.certificates()? {
            Some(certs) => Client::build_with_tls(info, certs).map_err(|cause| ConnectError::Tls {
                key: key.to_owned(),
                cause,
            }),
            None => Client::open(info).map_err(bad_url),
        }
    }

    /// The TLS files, read; `None` when none is set.
    fn certificates(&self) -> Result<Option<TlsCertificates>, ConnectError> {
        if self.tls.is_empty() {
            return Ok(None);
        }
        load_tls(&self.tls).map(Some)
    }
}
