//! Certificates for `rediss://` URLs, shared by every command that
//! connects.

use std::path::PathBuf;

use clap::Args;

use sessionpack::conn::{ConnectOptions, TlsConfig};
use sessionpack::error::Result;

/// What a `rediss://` connection trusts and presents. Without these it
/// trusts the platform's roots and presents no certificate.
#[derive(Debug, Clone, Default, Args)]
pub struct TlsArgs {
    /// Trust only the CA certificates in this PEM file.
    #[arg(long, value_name = "PEM")]
    pub tls_ca_cert: Option<PathBuf>,
    /// Present this client certificate (PEM) to a server that asks for one.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// `options` with these certificates, if any were named.
    pub fn apply(&self, options: ConnectOptions) -> Result<ConnectOptions> {
        if self.tls_ca_cert.is_none() && self.tls_cert.is_none() {
            return Ok(options);
        }
        let tls = TlsConfig::from_files(
            self.tls_ca_cert.as_deref(),
            self.tls_cert.as_deref(),
            self.tls_key.as_deref(),
        )?;
        Ok(options.with_tls(tls))
    }
}
