//! Which Redis server a command works against: a named one, or a dedicated
//! throwaway started for the run.

use clap::Args;

use crate::error::{Error, Result};
use crate::server::LocalServer;

/// Where to find Redis.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Use this server instead of starting a dedicated `redis-server`.
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// Allow emptying a named server that already holds keys.
    #[arg(long)]
    pub allow_flush: bool,
}

/// A server to work against, stopped at the end if this run started it.
pub struct Connected {
    /// The server's URL.
    pub url: String,
    /// The server this run started, if it did.
    pub local: Option<LocalServer>,
    allow_flush: bool,
}

impl Target {
    /// Starts a dedicated server, or checks the named one answers.
    pub async fn connect(&self) -> Result<Connected> {
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
        })
    }
}

impl Connected {
    /// Empties the current database, refusing to touch a named server that
    /// holds data unless `--allow-flush` was given.
    pub async fn flush(&self) -> Result<()> {
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
