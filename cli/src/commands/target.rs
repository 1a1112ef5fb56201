//! Which Redis a command works against: a named server or cluster, or a
//! dedicated throwaway started for the run.

use clap::Args;

use sessionpack::conn::{AnyConnection, ConnectOptions, Connection, Endpoint};
use sessionpack::error::{Error, Result};
use sessionpack_testkit::{LocalCluster, LocalServer};

/// Where to find Redis.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Use this server instead of starting a dedicated `redis-server`.
    #[arg(long, value_name = "URL", conflicts_with_all = ["cluster", "cluster_url"])]
    pub redis_url: Option<String>,
    /// Use the Redis Cluster this node belongs to (repeat to name more
    /// seed nodes).
    #[arg(long, value_name = "URL", conflicts_with = "cluster")]
    pub cluster_url: Vec<String>,
    /// Start a local Redis Cluster of this many primaries instead of one
    /// server.
    #[arg(long, value_name = "PRIMARIES", value_parser = clap::value_parser!(u8).range(3..=16))]
    pub cluster: Option<u8>,
    /// Replicas per primary of the cluster `--cluster` starts.
    #[arg(long, default_value_t = 0, requires = "cluster", value_parser = clap::value_parser!(u8).range(0..=2))]
    pub replicas: u8,
    /// Allow emptying a named server or cluster that already holds keys.
    #[arg(long)]
    pub allow_flush: bool,
    /// Certificates for `rediss://` URLs.
    #[command(flatten)]
    pub tls: super::tls_args::TlsArgs,
}

/// A server or cluster to work against, stopped at the end if this run
/// started it.
pub struct Connected {
    /// Where it is.
    pub endpoint: Endpoint,
    /// The servers holding data: the server, or the cluster's primaries.
    pub primaries: Vec<String>,
    /// The server this run started, if it did.
    pub local: Option<LocalServer>,
    /// The cluster this run started, if it did.
    pub cluster: Option<LocalCluster>,
    /// How to connect to it and to each of its primaries.
    pub options: ConnectOptions,
    allow_flush: bool,
}

impl Target {
    /// Starts a dedicated server or cluster, or checks the named one
    /// answers.
    pub async fn connect(&self) -> Result<Connected> {
        let options = self.tls.apply(ConnectOptions::default())?;
        if let Some(primaries) = self.cluster {
            let cluster = LocalCluster::start(usize::from(primaries), usize::from(self.replicas))
                .map_err(super::server_error)?;
            let seeds = cluster
                .primaries()
                .iter()
                .map(|n| n.url())
                .collect::<Vec<_>>();
            return Ok(Connected {
                endpoint: Endpoint::Cluster(seeds.clone()),
                primaries: seeds,
                local: None,
                cluster: Some(cluster),
                options,
                allow_flush: true,
            });
        }
        if !self.cluster_url.is_empty() {
            let endpoint = Endpoint::Cluster(self.cluster_url.clone());
            let primaries = endpoint.primaries(&options).await?;
            let mut conn = endpoint.connect_with(&options).await?;
            let _: String = redis::cmd("PING").query_async(&mut conn).await?;
            return Ok(Connected {
                endpoint,
                primaries,
                local: None,
                cluster: None,
                options,
                allow_flush: self.allow_flush,
            });
        }
        let (url, local) = match &self.redis_url {
            Some(url) => (url.clone(), None),
            None => {
                let server = LocalServer::start().map_err(super::server_error)?;
                (server.url(), Some(server))
            }
        };
        let mut conn = sessionpack::connect_with(&url, &options).await?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(Connected {
            endpoint: Endpoint::Server(url.clone()),
            primaries: vec![url],
            options,
            allow_flush: self.allow_flush || local.is_some(),
            local,
            cluster: None,
        })
    }
}

impl Target {
    /// [`Target::connect`] for a command that measures one server only,
    /// refusing a cluster before starting anything; `what` names the
    /// command in the error. Returns the server's URL too.
    pub async fn connect_server(&self, what: &str) -> Result<(Connected, String)> {
        if self.cluster.is_some() || !self.cluster_url.is_empty() {
            return Err(Error::Config(format!(
                "{what} runs on one server, not on a cluster (bench memory and bench throughput take a cluster)"
            )));
        }
        let connected = self.connect().await?;
        let url = connected.primaries[0].clone();
        Ok((connected, url))
    }
}

impl Connected {
    /// A connection for the stores: to the server, or to the cluster.
    pub async fn conn(&self) -> Result<AnyConnection> {
        self.endpoint.connect_with(&self.options).await
    }

    /// A connection to one server of it (`url` from
    /// [`Connected::primaries`]).
    pub async fn open(&self, url: &str) -> Result<Connection> {
        sessionpack::connect_with(url, &self.options).await
    }

    /// Whether it is a cluster.
    pub fn is_cluster(&self) -> bool {
        self.endpoint.is_cluster()
    }

    /// Empties every primary, refusing to touch a named server or cluster
    /// that holds data unless `--allow-flush` was given.
    pub async fn flush(&self) -> Result<()> {
        let mut conns = Vec::with_capacity(self.primaries.len());
        for url in &self.primaries {
            let mut conn = self.open(url).await?;
            let keys: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
            if keys > 0 && !self.allow_flush {
                return Err(Error::Config(format!(
                    "{url} holds {keys} keys; pass --allow-flush to let this run empty it"
                )));
            }
            conns.push(conn);
        }
        for conn in &mut conns {
            // A cluster node refuses FLUSHDB with a database other than 0;
            // FLUSHDB empties the URL's database on a server. SYNC: where
            // a flush frees in the background (Valkey 9's default
            // lazyfree-lazy-user-flush), memory measured next would still
            // count what it frees.
            let _: () = redis::cmd("FLUSHDB").arg("SYNC").query_async(conn).await?;
        }
        Ok(())
    }

    /// Readies the server for the next layout of a bench: with `restart`,
    /// a fresh process when the server is ours (RSS and fragmentation
    /// start clean; a named server is only emptied), then empty.
    pub async fn fresh(&self, restart: bool) -> Result<()> {
        if let (true, Some(local)) = (restart, &self.local) {
            local.restart().map_err(super::server_error)?;
        }
        self.flush().await
    }
}
