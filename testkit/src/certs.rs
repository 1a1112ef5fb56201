//! Certificates for TLS test servers, made with `openssl` for one run: a
//! CA, a certificate for `127.0.0.1` and `localhost` (server and cluster
//! bus), and a client certificate, all signed by the CA; and a second CA
//! that signed none of them, for clients that must be refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::{Error, Result};

/// A temporary directory of PEM files; clones share it, and it is removed
/// when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct TestCerts {
    dir: Arc<tempfile::TempDir>,
}

const LEAF_EXTENSIONS: &str = "subjectAltName=IP:127.0.0.1,DNS:localhost\n\
basicConstraints=critical,CA:FALSE\n\
keyUsage=critical,digitalSignature,keyEncipherment\n\
extendedKeyUsage=serverAuth,clientAuth\n";

impl TestCerts {
    /// Makes the certificates (P-256 keys, valid for two days).
    pub fn generate() -> Result<Self> {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::Setup(format!("cannot make a temporary directory: {e}")))?;
        let certs = Self { dir: Arc::new(dir) };
        std::fs::write(certs.path("leaf.ext"), LEAF_EXTENSIONS)
            .map_err(|e| Error::Setup(format!("cannot write leaf.ext: {e}")))?;
        for ca in ["ca", "other-ca"] {
            certs.openssl(&[
                "req",
                "-x509",
                "-new",
                "-nodes",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-days",
                "2",
                "-subj",
                &format!("/CN=sessionpack test {ca}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.crt"),
            ])?;
        }
        for leaf in ["server", "client"] {
            certs.openssl(&[
                "req",
                "-new",
                "-nodes",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-subj",
                &format!("/CN={leaf}"),
                "-keyout",
                &format!("{leaf}.key"),
                "-out",
                &format!("{leaf}.csr"),
            ])?;
            certs.openssl(&[
                "x509",
                "-req",
                "-in",
                &format!("{leaf}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "leaf.ext",
                "-out",
                &format!("{leaf}.crt"),
            ])?;
        }
        Ok(certs)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn openssl(&self, args: &[&str]) -> Result<()> {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                Error::Setup(format!(
                    "cannot run openssl: {e} (install it with `apt-get install openssl`)"
                ))
            })?;
        if !output.status.success() {
            return Err(Error::Setup(format!(
                "openssl {} failed: {}",
                args.first().unwrap_or(&""),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(())
    }

    /// The CA that signed the server's and the client's certificates.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.crt")
    }

    /// A CA that signed nothing here: a client trusting only it must be
    /// refused.
    pub fn other_ca(&self) -> PathBuf {
        self.path("other-ca.crt")
    }

    /// The server's certificate (for `127.0.0.1` and `localhost`).
    pub fn server_cert(&self) -> PathBuf {
        self.path("server.crt")
    }

    /// The server certificate's key.
    pub fn server_key(&self) -> PathBuf {
        self.path("server.key")
    }

    /// A client certificate the CA signed.
    pub fn client_cert(&self) -> PathBuf {
        self.path("client.crt")
    }

    /// The client certificate's key.
    pub fn client_key(&self) -> PathBuf {
        self.path("client.key")
    }

    /// The contents of one of these files.
    pub fn read(path: &Path) -> Result<Vec<u8>> {
        std::fs::read(path)
            .map_err(|e| Error::Setup(format!("cannot read {}: {e}", path.display())))
    }

    /// The certificates the test harness's own client uses: this CA, and
    /// the client certificate.
    pub(crate) fn client_tls(&self) -> Result<redis::TlsCertificates> {
        install_provider();
        Ok(redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: Self::read(&self.client_cert())?,
                client_key: Self::read(&self.client_key())?,
            }),
            root_cert: Some(Self::read(&self.ca())?),
        })
    }
}

/// rustls needs a process-wide crypto provider; `ring` unless one is set.
fn install_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
