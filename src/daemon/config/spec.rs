//! What the library needs from a [`Config`]: the [`RedisSpec`] of its `redis` section and the
//! [`LeaseSpec`] of its election, built in one place for validation, `run`, `status` and
//! `handover`.

use super::{Config, ModeName};
use crate::backend::Backend;
use crate::connector::{ConnectError, RedisSpec, TlsFiles, Topology};
use crate::lease::LeaseSpec;

impl Config {
    /// The connection spec of the configuration's `redis` section.
    pub(crate) fn redis_spec(&self) -> RedisSpec {
        let r = &self.redis;
        let topology = match r.mode {
            ModeName::Single => Topology::Single {
                url: r.url.clone().unwrap_or_default(),
            },
            ModeName::Sentinel => Topology::Sentinel {
                sentinels: r.sentinels.clone(),
                master_name: r.master_name.clone().unwrap_or_default(),
            },
            ModeName::Cluster => Topology::Cluster {
                urls: r.urls.clone(),
            },
            ModeName::Redlock => Topology::Redlock {
                urls: r.urls.clone(),
            },
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
