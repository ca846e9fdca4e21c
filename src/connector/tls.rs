//! TLS for `rediss://`: the crypto provider and reading the TLS files.

use std::path::Path;

use redis::{ClientTlsConfig, TlsCertificates};

use super::{ConnectError, TlsFiles};

/// Makes sure rustls has its crypto provider (ring, the one built in) before the first TLS
/// connection.
pub(crate) fn init_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Reads the TLS files: a CA bundle (`None`: the system's roots) and a client certificate
/// with its key (both or neither). Errors name the file, never its contents.
pub(super) fn load_tls(files: &TlsFiles) -> Result<TlsCertificates, ConnectError> {
    init_tls();
    let read = |which: &'static str, path: &Path| {
        std::fs::read(path).map_err(|cause| ConnectError::TlsFile {
            which,
            path: path.to_owned(),
            cause,
        })
    };
    let root_cert = files
        .ca_file
        .as_deref()
        .map(|p| read("ca_file", p))
        .transpose()?;
    let client_tls = match (files.cert_file.as_deref(), files.key_file.as_deref()) {
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
