//! TLS for `rediss://`: the crypto provider and the files of `redis.tls`.

use std::path::Path;

use redis::{ClientTlsConfig, TlsCertificates};

use crate::config::Config;

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

/// The TLS files of `redis.tls`, read; None when it is not set.
pub(super) fn certificates(config: &Config) -> Result<Option<TlsCertificates>, String> {
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
