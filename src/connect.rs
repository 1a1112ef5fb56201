//! A reconnecting connection tuned for a request path.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::Result;

/// How long one connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one reply may take.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The [`ConnectionManagerConfig`] used by [`connect`]: a couple of quick
/// reconnection attempts, then an error.
///
/// The client's default retries for several seconds with exponential
/// back-off before failing a call; a web request waiting on its session is
/// better served by a prompt [`crate::Error::Unavailable`].
pub fn request_path_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(200))
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
}

/// Opens a [`ConnectionManager`] to `url` with [`request_path_config`]. It
/// reconnects by itself after Redis restarts; calls made while Redis is
/// down fail fast with [`crate::Error::Unavailable`].
pub async fn connect(url: &str) -> Result<ConnectionManager> {
    let client = redis::Client::open(url)?;
    Ok(ConnectionManager::new_with_config(client, request_path_config()).await?)
}

/// Where a store's Redis is: one server, or some nodes of a Redis Cluster
/// (feature `cluster`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// One server's URL.
    Server(String),
    /// URLs of some of a cluster's nodes; the client finds the others.
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
}

impl Endpoint {
    /// Opens a connection: [`connect`] for a server,
    /// [`crate::cluster::connect`] for a cluster.
    pub async fn connect(&self) -> Result<AnyConnection> {
        Ok(match self {
            Self::Server(url) => AnyConnection::Server(connect(url).await?),
            #[cfg(feature = "cluster")]
            Self::Cluster(seeds) => AnyConnection::Cluster(crate::cluster::connect(seeds).await?),
        })
    }

    /// The servers that hold the data: the server itself, or the cluster's
    /// primaries (see [`crate::cluster::primaries`]).
    pub async fn primaries(&self) -> Result<Vec<String>> {
        match self {
            Self::Server(url) => Ok(vec![url.clone()]),
            #[cfg(feature = "cluster")]
            Self::Cluster(seeds) => {
                let mut last = None;
                for seed in seeds {
                    match crate::cluster::primaries(seed).await {
                        Ok(p) => return Ok(p),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| crate::Error::Config("no cluster nodes named".into())))
            }
        }
    }

    /// Whether it is a cluster.
    pub fn is_cluster(&self) -> bool {
        !matches!(self, Self::Server(_))
    }
}

/// A connection to one server or to a cluster, for code that serves
/// either (the command-line tool). Cheap to clone.
#[derive(Clone)]
pub enum AnyConnection {
    /// To one server.
    Server(ConnectionManager),
    /// To a cluster.
    #[cfg(feature = "cluster")]
    Cluster(crate::cluster::Cluster),
}

impl std::fmt::Debug for AnyConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Server(_) => f.write_str("AnyConnection::Server"),
            #[cfg(feature = "cluster")]
            Self::Cluster(_) => f.write_str("AnyConnection::Cluster"),
        }
    }
}

impl redis::aio::ConnectionLike for AnyConnection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Server(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Server(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Server(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.get_db(),
        }
    }
}
