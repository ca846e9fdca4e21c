//! What the library needs from a [`Config`]: the [`RedisSpec`] of its `redis` section and the
//! [`LeaseSpec`] of its election, built in one place for validation, `run`, `status` and
//! `handover`.

use super::{Config, RedisMode};
use crate::backend::Backend;
use crate::connector::{ConnectError, RedisSpec, TlsFiles, Topology};
use crate::lease::LeaseSpec;

impl Config {
    /// The connection spec of the configuration's `redis` section.
    pub(crate) fn redis_spec(&self) -> RedisSpec {
        let r = &self.redis;
        let topology = match &r.mode {
            RedisMode::Single { url } => Topology::Single { url: url.clone() },
            RedisMode::Sentinel {
                sentinels,
                master_name,
            } => Topology::Sentinel {
                sentinels: sentinels.clone(),
                master_name: master_name.clone(),
            },
            RedisMode::Cluster { urls } => Topology::Cluster { urls: urls.clone() },
            RedisMode::Redlock { urls } => Topology::Redlock { urls: urls.clone() },
        };
        let tls = r.tls.as_ref().map_or_else(TlsFiles::default, |t| TlsFiles {
            ca_file: t.ca_file.clone(),
            cert_file: t.cert_file.clone(),
            key_file: t.key_file.clone(),
        });
        RedisSpec {
            topology,
            username: r.username.clone(),
            password: r.password.clone(),
            tls,
            min_replicas_ack: r.min_replicas_ack,
        }
    }

    /// The lease spec of the configuration.
    pub(crate) fn lease_spec(&self) -> LeaseSpec {
        LeaseSpec {
            name: self.name.clone(),
            key_prefix: self.redis.key_prefix.clone(),
            holder: self.identity.clone(),
            lease_duration: self.election.lease_duration,
            command_timeout: self.redis.command_timeout,
            connect_timeout: self.redis.connect_timeout,
            address: self.publish.advertise.clone(),
            release_check: self.election.retry_period,
        }
    }

    /// The lease of this configuration, in whichever mode it names. Nothing is sent yet.
    ///
    /// # Errors
    /// A [`ConnectError`] naming the setting that cannot make a client.
    pub(crate) fn backend(&self) -> Result<Backend, ConnectError> {
        Backend::connect(&self.redis_spec(), self.lease_spec())
    }
}
