//! Throwaway Redis servers for sessionpack's tests, benchmarks and
//! command-line harness: a `redis-server` on a free loopback port
//! ([`LocalServer`]) and a local Redis Cluster of them ([`LocalCluster`]).
//!
//! The process is started with persistence off, in a temporary directory,
//! and stopped by its own process id when the handle is dropped.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

mod certs;
mod cluster;
mod error;

pub use certs::TestCerts;

pub use cluster::{LocalCluster, NODE_TIMEOUT, REDIS_CLI_ENV, Role};
pub use error::{Error, Result};

/// Environment variable naming the `redis-server` binary to run.
pub const REDIS_SERVER_ENV: &str = "SESSIONPACK_REDIS_SERVER";

/// Environment variable naming a server binary that runs no Lua script
/// (Valkey built with `BUILD_LUA=no`), for the tests of what a store does
/// there; `scripts/test.sh` sets it where it builds one.
pub const NO_LUA_SERVER_ENV: &str = "SESSIONPACK_NO_LUA_SERVER";

const START_TIMEOUT: Duration = Duration::from_secs(10);
const PORT_ATTEMPTS: usize = 5;

/// A `redis-server` child process, stopped on drop.
#[derive(Debug)]
pub struct LocalServer {
    child: Mutex<Option<Child>>,
    port: u16,
    args: Vec<String>,
    tls: Option<Tls>,
    dir: tempfile::TempDir,
    /// The binary, where not the one [`REDIS_SERVER_ENV`] names.
    binary: Option<PathBuf>,
}

/// How a TLS server is set up: its certificates, and whether it asks
/// clients for one.
#[derive(Clone, Debug)]
struct Tls {
    certs: TestCerts,
    client_certs: ClientCerts,
}

/// Whether a TLS server asks clients for a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientCerts {
    /// `tls-auth-clients yes`: a client without one signed by the CA is
    /// refused.
    Required,
    /// `tls-auth-clients no`: the server's certificate is all there is.
    NotAsked,
}

impl LocalServer {
    /// Starts a server with default settings.
    pub fn start() -> Result<Self> {
        Self::start_with(&[])
    }

    /// Starts a server with extra `--name value` arguments, e.g.
    /// `["--hash-max-listpack-value", "32"]`.
    pub fn start_with(args: &[&str]) -> Result<Self> {
        Self::start_inner(args, None, None)
    }

    /// Starts `binary` (not the one [`REDIS_SERVER_ENV`] names) with
    /// default settings.
    pub fn start_binary(binary: PathBuf) -> Result<Self> {
        Self::start_inner(&[], None, Some(binary))
    }

    /// Starts a server that speaks TLS only (`--port 0`, `--tls-port`),
    /// with `certs`' server certificate, asking clients for one or not.
    /// [`Error::Unsupported`] if the binary was built without TLS.
    pub fn start_tls(certs: &TestCerts, client_certs: ClientCerts, args: &[&str]) -> Result<Self> {
        Self::start_inner(
            args,
            Some(Tls {
                certs: certs.clone(),
                client_certs,
            }),
            None,
        )
    }

    fn start_inner(args: &[&str], tls: Option<Tls>, binary: Option<PathBuf>) -> Result<Self> {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::Setup(format!("cannot make a temporary directory: {e}")))?;
        let mut server = Self {
            child: Mutex::new(None),
            port: 0,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            tls,
            dir,
            binary,
        };
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port()?;
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e @ Error::Unsupported(_)) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Setup("redis-server did not start".into())))
    }

    /// The port it listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for it: `redis://`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// Whether it speaks TLS only.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child().as_ref().map(Child::id)
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A client for it; for a TLS server one that trusts the test CA and
    /// presents the client certificate.
    pub fn client(&self) -> Result<redis::Client> {
        match &self.tls {
            None => Ok(redis::Client::open(self.url())?),
            Some(tls) => Ok(redis::Client::build_with_tls(
                self.url(),
                tls.certs.client_tls()?,
            )?),
        }
    }

    /// The `redis-cli` arguments that reach it over TLS (none for a plain
    /// server).
    pub fn cli_tls_args(&self) -> Vec<String> {
        match &self.tls {
            None => Vec::new(),
            Some(tls) => {
                let path = |p: PathBuf| p.to_string_lossy().into_owned();
                vec![
                    "--tls".into(),
                    "--cacert".into(),
                    path(tls.certs.ca()),
                    "--cert".into(),
                    path(tls.certs.client_cert()),
                    "--key".into(),
                    path(tls.certs.client_key()),
                ]
            }
        }
    }

    /// Stops the server (by its process id) and waits for it to exit.
    pub fn stop(&self) {
        if let Some(mut child) = self.child().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server and starts it again on the same port in the same
    /// directory: empty, unless it saved a snapshot there (`SAVE`), which it
    /// then loads before answering. Returns once it answers `PING`.
    pub fn restart(&self) -> Result<()> {
        self.stop();
        self.spawn()
    }

    /// Starts the server again after [`LocalServer::stop`], empty, on the
    /// same port. Does nothing if it is running.
    pub fn resume(&self) -> Result<()> {
        if self.child().is_some() {
            return Ok(());
        }
        self.spawn()
    }

    fn spawn(&self) -> Result<()> {
        let binary = self.binary.clone().unwrap_or_else(|| {
            std::env::var_os(REDIS_SERVER_ENV)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("redis-server"))
        });
        let port = self.port.to_string();
        let dir = self.dir.path().to_string_lossy().into_owned();
        let log = self
            .dir
            .path()
            .join("redis.log")
            .to_string_lossy()
            .into_owned();
        let (plain_port, tls_args) = match &self.tls {
            None => (port.as_str(), Vec::new()),
            Some(tls) => ("0", tls.server_args(&port)),
        };
        let mut child = Command::new(&binary)
            .args([
                "--port",
                plain_port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--dir", &dir, "--logfile", &log, "--daemonize", "no"])
            .args(&tls_args)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                Error::Setup(format!(
                    "cannot run {}: {e} (install it with `apt-get install redis-server`, \
                     or name a binary in {REDIS_SERVER_ENV})",
                    binary.display()
                ))
            })?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // Another process may have taken the port since it was found
            // free, and answer in our server's place: only our own
            // process id counts.
            let answers = match self.tls {
                None => ping(self.port),
                Some(_) => true,
            };
            if answers && self.process_id() == Some(child.id()) {
                *self.child() = Some(child);
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                let last = log.lines().last().unwrap_or("no log");
                if self.tls.is_some() && log.to_ascii_lowercase().contains("tls") {
                    return Err(Error::Unsupported(format!(
                        "{} cannot serve TLS (built without it?): {last}",
                        binary.display()
                    )));
                }
                return Err(Error::Setup(format!(
                    "redis-server exited with {status}: {last}"
                )));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Setup(
                    "redis-server did not answer PING in time".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| Error::Setup(format!("no free port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::Setup(format!("no free port: {e}")))
}

impl LocalServer {
    /// The process id of the server answering on its port.
    fn process_id(&self) -> Option<u32> {
        let mut conn = self
            .client()
            .ok()?
            .get_connection_with_timeout(Duration::from_millis(500))
            .ok()?;
        let info: String = redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
    }
}

impl Tls {
    /// The server's TLS arguments; a cluster node's bus and replication
    /// links use TLS too (harmless on a server that is neither).
    fn server_args(&self, port: &str) -> Vec<String> {
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        let auth = match self.client_certs {
            ClientCerts::Required => "yes",
            ClientCerts::NotAsked => "no",
        };
        vec![
            "--tls-port".into(),
            port.into(),
            "--tls-cert-file".into(),
            path(self.certs.server_cert()),
            "--tls-key-file".into(),
            path(self.certs.server_key()),
            "--tls-ca-cert-file".into(),
            path(self.certs.ca()),
            "--tls-auth-clients".into(),
            auth.into(),
            "--tls-replication".into(),
            "yes".into(),
        ]
    }
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}
