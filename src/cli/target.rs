//! Which Redis server a command works against: a named one, or a dedicated
//! throwaway started for the run.

use clap::Args;

use crate::error::{Error, Result};
use crate::server::{LocalCluster, LocalServer};

/// Where to find Redis.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Use this server instead of starting a dedicated `redis-server`.
    #[arg(long, value_name = "URL", conflicts_with = "cluster")]
    pub redis_url: Option<String>,
    /// Start a local Redis Cluster of this many primaries (no replicas)
    /// instead of one server (`bench memory` only).
    #[arg(long, value_name = "PRIMARIES", value_parser = clap::value_parser!(u8).range(3..=16))]
    pub cluster: Option<u8>,
    /// Allow emptying a named server that already holds keys.
    #[arg(long)]
    pub allow_flush: bool,
}

/// A server to work against, stopped at the end if this run started it.
pub struct Connected {
    /// The server's URL (on a cluster, its first primary's).
    pub url: String,
    /// The server this run started, if it did.
    pub local: Option<LocalServer>,
    /// The cluster this run started, if it did.
    pub cluster: Option<LocalCluster>,
    allow_flush: bool,
}

impl Target {
    /// Starts a dedicated server, or checks the named one answers.
    pub async fn connect(&self) -> Result<Connected> {
        if let Some(primaries) = self.cluster {
            let cluster = LocalCluster::start(usize::from(primaries), 0)?;
            return Ok(Connected {
                url: cluster.urls()[0].clone(),
                local: None,
                cluster: Some(cluster),
                allow_flush: true,
            });
        }
        let (url, local) = match &self.redis_url {
            Some(url) => (url.clone(), None),
            None => {
                let server = LocalServer::start()?;
                (server.url(), Some(server))
            }
        };
        let mut conn = crate::connect(&url).await?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(Connected {
            url,
            allow_flush: self.allow_flush || local.is_some(),
            local,
            cluster: None,
        })
    }
}

impl Connected {
    /// The URLs of the cluster's primaries, on a cluster.
    pub fn primaries(&self) -> Option<Vec<String>> {
        self.cluster
            .as_ref()
            .map(|c| c.primaries().iter().map(|n| n.url()).collect())
    }

    /// Empties the current database, refusing to touch a named server that
    /// holds data unless `--allow-flush` was given.
    pub async fn flush(&self) -> Result<()> {
        if let Some(primaries) = self.primaries() {
            for url in primaries {
                let mut conn = crate::connect(&url).await?;
                let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await?;
            }
            return Ok(());
        }
        let mut conn = crate::connect(&self.url).await?;
        let keys: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
        if keys > 0 && !self.allow_flush {
            return Err(Error::Config(format!(
                "{} holds {keys} keys; pass --allow-flush to let this run empty it",
                self.url
            )));
        }
        let _: () = redis::cmd("FLUSHDB").query_async(&mut conn).await?;
        Ok(())
    }
}
