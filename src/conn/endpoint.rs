//! One type for a server or a cluster, for code that serves either (the
//! command-line tool): where the Redis is, and a connection to it.

use redis::aio::ConnectionManager;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::standalone::{ConnectOptions, connect_with};
use super::wait::WaitAfter;
use crate::error::Result;

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
    /// Opens a connection: [`crate::connect`] for a server,
    /// [`super::cluster::connect`] for a cluster.
    pub async fn connect(&self) -> Result<AnyConnection> {
        self.connect_with(&ConnectOptions::default()).await
    }

    /// [`Endpoint::connect`] with other [`ConnectOptions`].
    pub async fn connect_with(&self, options: &ConnectOptions) -> Result<AnyConnection> {
        Ok(match self {
            Self::Server(url) => AnyConnection::Server(connect_with(url, options).await?),
            #[cfg(feature = "cluster")]
            Self::Cluster(seeds) => {
                AnyConnection::Cluster(super::cluster::connect_with(seeds, options).await?)
            }
        })
    }

    /// The servers that hold the data: the server itself, or the cluster's
    /// primaries (see [`super::cluster::primaries`]), as URLs to open with
    /// the same `options`.
    pub async fn primaries(&self, options: &ConnectOptions) -> Result<Vec<String>> {
        #[cfg(not(feature = "cluster"))]
        let _ = options;
        match self {
            Self::Server(url) => Ok(vec![url.clone()]),
            #[cfg(feature = "cluster")]
            Self::Cluster(seeds) => {
                let mut last = None;
                for seed in seeds {
                    match super::cluster::primaries(seed, options).await {
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
    Cluster(super::cluster::Cluster),
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

impl WaitAfter for AnyConnection {
    fn wait_after<'a>(
        &'a mut self,
        wait: &'a Cmd,
        pipeline: &'a Pipeline,
    ) -> RedisFuture<'a, Value> {
        match self {
            Self::Server(c) => c.wait_after(wait, pipeline),
            #[cfg(feature = "cluster")]
            Self::Cluster(c) => c.wait_after(wait, pipeline),
        }
    }
}
