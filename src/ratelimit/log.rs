//! The talk's exact sliding log, with its caveats fixed.

use super::{Decision, Limit, check_client};
use crate::error::{Error, Result};
use crate::scripts::RATELIMIT_LOG;

/// The talk's sliding-window log: per client, a ZSET of the requests in
/// the last window and a ZSET of retry slots handed out, under one hash
/// tag (`rl:{<client>}:log`, `rl:{<client>}:retry`). Both expire when the
/// client goes quiet.
#[derive(Clone, Debug)]
pub struct SlidingLog<C> {
    conn: C,
    prefix: String,
    limit: Limit,
}

impl<C> SlidingLog<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// A limiter of `limit` with keys under `prefix` (e.g. `rl`).
    pub fn new(conn: C, prefix: &str, limit: Limit) -> Self {
        Self {
            conn,
            prefix: prefix.to_owned(),
            limit,
        }
    }

    /// Decides one request of `client`, recording it when admitted.
    pub async fn check(&self, client: &str) -> Result<Decision> {
        check_client(client)?;
        let log = format!("{}:{{{client}}}:log", self.prefix);
        let retry = format!("{}:{{{client}}}:retry", self.prefix);
        let reply: (i64, i64, i64) = RATELIMIT_LOG
            .key(&log)
            .key(&retry)
            .arg(self.limit.requests())
            .arg(self.limit.window_ms())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || log.clone()))?;
        Ok(Decision::from_reply(reply))
    }
}
