//! Which store a command works on: its server or cluster, its namespace,
//! and how long a reply may take.

use std::time::Duration;

use clap::Args;

use sessionpack::conn::{AnyConnection, ConnectOptions, DEFAULT_RESPONSE_TIMEOUT, Endpoint};
use sessionpack::error::{Error, Result};
use sessionpack::session::buckets::DEFAULT_NAMESPACE;
use sessionpack::session::meta::StoreMeta;

/// A store an app has opened.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("server").required(true).args(["redis_url", "cluster_url"])))]
pub struct StoreArgs {
    /// The store's server.
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// A node of the store's Redis Cluster (repeat to name more seeds).
    #[arg(long, value_name = "URL")]
    pub cluster_url: Vec<String>,
    /// The store's key namespace.
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// How long one reply from Redis may take, in seconds.
    #[arg(long, default_value_t = DEFAULT_RESPONSE_TIMEOUT.as_secs_f64())]
    pub response_timeout_secs: f64,
    /// Certificates for `rediss://` URLs.
    #[command(flatten)]
    pub tls: super::tls_args::TlsArgs,
}

impl StoreArgs {
    /// Where the store is.
    pub fn endpoint(&self) -> Endpoint {
        match &self.redis_url {
            Some(url) => Endpoint::Server(url.clone()),
            None => Endpoint::Cluster(self.cluster_url.clone()),
        }
    }

    /// How to connect: the response timeout and the certificates named.
    pub fn options(&self) -> Result<ConnectOptions> {
        let timeout = Duration::from_secs_f64(self.response_timeout_secs.clamp(0.001, 1e6));
        self.tls
            .apply(ConnectOptions::default().with_response_timeout(timeout))
    }

    /// Connects, and reads the store's metadata: a namespace no app has
    /// opened is an error (a command never records a store).
    pub async fn open(&self) -> Result<(AnyConnection, StoreMeta)> {
        let conn = self.endpoint().connect_with(&self.options()?).await?;
        let meta = StoreMeta::read(&conn, &self.namespace)
            .await?
            .ok_or_else(|| {
                Error::Config(format!(
                    "no store recorded in namespace {:?}: open it from the app first (a \
                     command never creates one)",
                    self.namespace
                ))
            })?;
        Ok((conn, meta))
    }
}
