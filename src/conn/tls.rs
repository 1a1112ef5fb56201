//! Certificates for `rediss://` connections (feature `tls`, over rustls).
//!
//! A `rediss://` URL needs nothing more where the server's certificate
//! chains to one of the platform's roots (managed services). A server
//! signed by a private CA needs that CA ([`TlsConfig::with_root_ca`]); a
//! server that asks clients for a certificate (`tls-auth-clients yes`)
//! needs one ([`TlsConfig::with_client_cert`]). Hostnames are always
//! verified: there is no switch to turn that off.
//!
//! rustls needs a process-wide crypto provider. If none is installed when
//! sessionpack first connects over TLS, it installs rustls's `ring`
//! provider; an app that wants another installs it before that.

use std::path::Path;

use redis::{ClientTlsConfig, TlsCertificates};

use crate::error::{Error, Result};

/// What a `rediss://` connection trusts and presents, as PEM bytes. The
/// default trusts the platform's roots and presents no certificate.
///
/// ```
/// use sessionpack::conn::TlsConfig;
///
/// let ca = b"-----BEGIN CERTIFICATE-----\n...".to_vec();
/// let tls = TlsConfig::default().with_root_ca(ca);
/// assert!(tls.root_ca().is_some());
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    root_ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A private key never reaches a log.
        f.debug_struct("TlsConfig")
            .field("root_ca", &self.root_ca.as_ref().map(|_| "<pem>"))
            .field("client_cert", &self.client.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl TlsConfig {
    /// Trusts only the certificates in `pem` (one or more), not the
    /// platform's roots.
    pub fn with_root_ca(mut self, pem: Vec<u8>) -> Self {
        self.root_ca = Some(pem);
        self
    }

    /// Presents `cert_pem` (the certificate, then any intermediates) with
    /// its private key `key_pem` when the server asks for a client
    /// certificate.
    pub fn with_client_cert(mut self, cert_pem: Vec<u8>, key_pem: Vec<u8>) -> Self {
        self.client = Some((cert_pem, key_pem));
        self
    }

    /// Reads the files a deployment names: a CA to trust and a client
    /// certificate with its key, each optional (a certificate needs its
    /// key). A file that cannot be read is [`Error::Config`] naming it.
    pub fn from_files(
        root_ca: Option<&Path>,
        client_cert: Option<&Path>,
        client_key: Option<&Path>,
    ) -> Result<Self> {
        let read = |path: &Path| {
            std::fs::read(path)
                .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))
        };
        let mut config = Self::default();
        if let Some(path) = root_ca {
            config = config.with_root_ca(read(path)?);
        }
        match (client_cert, client_key) {
            (Some(cert), Some(key)) => config = config.with_client_cert(read(cert)?, read(key)?),
            (None, None) => {}
            _ => {
                return Err(Error::Config(
                    "a client certificate needs its key, and a key its certificate".into(),
                ));
            }
        }
        Ok(config)
    }

    /// The CA certificates trusted instead of the platform's roots.
    pub fn root_ca(&self) -> Option<&[u8]> {
        self.root_ca.as_deref()
    }

    /// Whether a client certificate is presented.
    pub fn has_client_cert(&self) -> bool {
        self.client.is_some()
    }

    /// The form the redis client takes.
    pub(crate) fn certificates(&self) -> TlsCertificates {
        install_provider();
        TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(client_cert, client_key)| ClientTlsConfig {
                    client_cert: client_cert.clone(),
                    client_key: client_key.clone(),
                }),
            root_cert: self.root_ca.clone(),
        }
    }
}

/// Installs rustls's `ring` provider as the process's default if none is.
/// rustls would pick one itself only when exactly one provider is built
/// in; an app whose other crates build `aws-lc-rs` too would otherwise
/// panic at its first TLS connection.
pub(crate) fn install_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one first; theirs stands.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
