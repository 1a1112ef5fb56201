//! Reconnecting connections to one server, and how long they wait.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::Result;

/// How long a connection waits, and how often it tries again before a call
/// fails with [`crate::Error::Unavailable`].
///
/// The defaults ([`ConnectOptions::default`]) fit every call sessionpack
/// makes, including the long ones: a sweep step over 256 buckets, the cap's
/// eviction, or revoking a user with thousands of sessions on a busy
/// server. A request path that would rather fail fast than wait may lower
/// [`ConnectOptions::response_timeout`]; a Redis that is down is reported
/// at once either way (a refused connection does not wait for a timeout).
///
/// ```
/// use std::time::Duration;
/// use sessionpack::ConnectOptions;
///
/// let options = ConnectOptions::default().with_response_timeout(Duration::from_secs(3));
/// assert_eq!(options.connect_timeout(), Duration::from_secs(2));
/// assert_eq!(options.response_timeout(), Duration::from_secs(3));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    connect_timeout: Duration,
    response_timeout: Duration,
    retries: u32,
    #[cfg(feature = "tls")]
    tls: Option<super::tls::TlsConfig>,
}

impl Default for ConnectOptions {
    /// Connect timeout 2 s ([`DEFAULT_CONNECT_TIMEOUT`]), response timeout
    /// 10 s ([`DEFAULT_RESPONSE_TIMEOUT`]), 2 reconnection attempts on one
    /// server ([`DEFAULT_RETRIES`]).
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            retries: DEFAULT_RETRIES,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

/// How long one connection attempt may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one reply may take by default.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Reconnection attempts a call on one server makes by default.
pub const DEFAULT_RETRIES: u32 = 2;

impl ConnectOptions {
    /// How long one connection attempt may take (TCP connect and hello).
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// How long one reply may take. On a cluster it bounds a whole call,
    /// redirections and reconnections included.
    pub fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Reconnection attempts a call on one server makes before it fails.
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// Sets [`ConnectOptions::connect_timeout`] (at least 1 ms).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets [`ConnectOptions::response_timeout`] (at least 1 ms).
    pub fn with_response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets [`ConnectOptions::retries`].
    pub fn with_retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Sets what `rediss://` connections trust and present (feature
    /// `tls`). Without it they trust the platform's roots and present no
    /// certificate. A `redis://` URL with this set is refused: certificates
    /// given for a plain connection are a mistake, not a preference.
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, tls: super::tls::TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// What [`ConnectOptions::with_tls`] set.
    #[cfg(feature = "tls")]
    pub fn tls(&self) -> Option<&super::tls::TlsConfig> {
        self.tls.as_ref()
    }

    /// A client for `url` with these options' certificates: a `rediss://`
    /// URL needs feature `tls`, and certificates need a `rediss://` URL.
    pub(crate) fn client(&self, url: &str) -> Result<redis::Client> {
        let tls_url = is_tls_url(url);
        #[cfg(not(feature = "tls"))]
        if tls_url {
            return Err(crate::Error::Config(
                "a rediss:// URL needs sessionpack's `tls` feature".into(),
            ));
        }
        #[cfg(feature = "tls")]
        {
            if tls_url {
                super::tls::install_provider();
            }
            match (&self.tls, tls_url) {
                (Some(tls), true) => {
                    return Ok(redis::Client::build_with_tls(url, tls.certificates())?);
                }
                (Some(_), false) => {
                    return Err(crate::Error::Config(format!(
                        "TLS certificates were given for a plain connection to {}; use rediss://",
                        redact(url)
                    )));
                }
                (None, _) => {}
            }
        }
        Ok(redis::Client::open(url)?)
    }

    /// The [`ConnectionManagerConfig`] [`connect_with`] uses: these
    /// timeouts, and quick reconnection attempts.
    ///
    /// The client's default retries for several seconds with exponential
    /// back-off before failing a call; a web request waiting on its session
    /// is better served by a prompt [`crate::Error::Unavailable`].
    pub fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_number_of_retries(self.retries as usize)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200))
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
    }
}

/// The connection [`connect`] opens: a [`ConnectionManager`] that
/// reconnects by itself. Name a store with it:
/// `TowerStore<sessionpack::Connection>`, `Compact<sessionpack::Connection>`.
pub type Connection = ConnectionManager;

/// Opens a [`Connection`] to `url` with the default
/// [`ConnectOptions`]. It reconnects by itself after Redis restarts; calls
/// made while Redis is down fail fast with [`crate::Error::Unavailable`].
pub async fn connect(url: &str) -> Result<Connection> {
    connect_with(url, &ConnectOptions::default()).await
}

/// [`connect`] with other [`ConnectOptions`].
pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Connection> {
    let client = options.client(url)?;
    Ok(ConnectionManager::new_with_config(client, options.manager_config()).await?)
}

/// Whether `url` asks for TLS (`rediss://`, or Valkey's `valkeys://`).
pub(crate) fn is_tls_url(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
}

/// `url` without its password, for an error message.
#[cfg(feature = "tls")]
pub(crate) fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, rest)), Some(at)) if at > scheme.len() => {
            let host = &url[at + 1..];
            let user = rest[..at - scheme.len() - 3]
                .split(':')
                .next()
                .unwrap_or_default();
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_owned(),
    }
}
