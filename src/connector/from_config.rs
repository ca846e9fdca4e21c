//! The connector and the clients a configuration asks for, in every Redis mode, with its
//! credentials and TLS files.

use std::sync::Arc;

use redis::cluster::ClusterClient;
use redis::{Client, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};

use super::tls::certificates;
use super::{init_tls, ClusterConnector, Connector, NodeSettings, SentinelConnector};
use crate::config::{Config, RedisMode};

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
        RedisMode::Sentinel => sentinel_connector(config),
        RedisMode::Cluster => cluster_connector(config),
    }
}

/// The connector of mode sentinel: every Sentinel's client, and how to reach the master.
fn sentinel_connector(config: &Config) -> Result<Connector, String> {
    let r = &config.redis;
    let sentinels = r
        .sentinels
        .iter()
        .enumerate()
        .map(|(i, url)| sentinel_client(config, url, i))
        .collect::<Result<Vec<_>, _>>()?;
    // With redis.tls set the master is always reached over TLS, whatever the Sentinels use.
    let tls = r.tls.is_some() || r.sentinels.iter().any(|u| u.starts_with("rediss://"));
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

/// The connector of mode cluster: the cluster client and the seed nodes' clients.
fn cluster_connector(config: &Config) -> Result<Connector, String> {
    let r = &config.redis;
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

fn bad_url(key: &str) -> String {
    format!("{key}: not a valid Redis URL (redis://host:port/db, rediss://..., unix:///path)")
}
