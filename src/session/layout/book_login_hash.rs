//! The Redis book's login-cookie design: one global HASH of token -> record
//! (`login:`) and one global ZSET of tokens (`recent:`).
//!
//! The book scores `recent:` by last-seen time and cleans up by count; here
//! the score is the expiry (last seen + TTL, which orders the same way) so the
//! layout meets the same expiry guarantees as the others. Tokens are the
//! 40-character hex text, as the book keeps its tokens. Both keys are global,
//! so this layout is not for Redis Cluster.

use super::indexed::{HashZset, KeyScheme, Keys};
use crate::error::Result;
use crate::session::id::SessionId;

/// Key names of the book's design, under a namespace.
#[derive(Clone, Debug)]
pub struct BookKeys {
    login: String,
    recent: String,
    namespace: String,
}

impl KeyScheme for BookKeys {
    fn keys(&self, id: &SessionId) -> Keys {
        let token = id.to_hex();
        Keys {
            hash: self.login.clone(),
            zset: self.recent.clone(),
            field: token.into_bytes(),
        }
    }

    fn out_of_line(&self, id: &SessionId) -> String {
        // Never written: a hashtable HASH takes records of any size.
        format!("{}:oversize:{}", self.namespace, id.to_hex())
    }

    fn location(&self, id: &SessionId) -> String {
        format!("{} (token {})", self.login, id.redacted())
    }
}

/// The book's one-HASH, one-ZSET login store.
pub type BookLoginHash<C> = HashZset<C, BookKeys>;

impl<C> HashZset<C, BookKeys>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// The book's layout, keys `<namespace>:login:` and `<namespace>:recent:`.
    pub fn book(conn: C, namespace: &str) -> Self {
        Self {
            conn,
            scheme: BookKeys {
                login: format!("{namespace}:login:"),
                recent: format!("{namespace}:recent:"),
                namespace: namespace.to_owned(),
            },
            inline_max: u64::MAX,
            name: "book-login-hash",
            clock: Default::default(),
        }
    }

    /// The name of the global HASH of token -> record.
    pub fn login_key(&self) -> &str {
        &self.scheme.login
    }

    /// The name of the global ZSET of token -> expiry.
    pub fn recent_key(&self) -> &str {
        &self.scheme.recent
    }
}

/// Tokens the book's cleanup removes per round trip.
pub const CLEAN_BATCH: u64 = 100;

impl<C> HashZset<C, BookKeys>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// The book's `clean_sessions` (listing 2.3), one sweep of it: while
    /// `recent:` holds more than `limit` tokens, fetch the oldest (up to 100)
    /// and remove them from `login:` and `recent:`, three round trips per
    /// hundred, as the book does. Returns the number removed.
    ///
    /// Like the book's, it is not atomic: a token touched between the
    /// fetch and the removal is removed anyway.
    pub async fn clean_sessions(&self, limit: u64) -> Result<u64> {
        let mut conn = self.conn.clone();
        let mut removed = 0;
        loop {
            let size: u64 = redis::cmd("ZCARD")
                .arg(&self.scheme.recent)
                .query_async(&mut conn)
                .await?;
            if size <= limit {
                return Ok(removed);
            }
            let end_index = (size - limit).min(CLEAN_BATCH);
            let tokens: Vec<Vec<u8>> = redis::cmd("ZRANGE")
                .arg(&self.scheme.recent)
                .arg(0)
                .arg(end_index - 1)
                .query_async(&mut conn)
                .await?;
            if tokens.is_empty() {
                return Ok(removed);
            }
            let _: () = redis::cmd("HDEL")
                .arg(&self.scheme.login)
                .arg(&tokens)
                .query_async(&mut conn)
                .await?;
            let _: () = redis::cmd("ZREM")
                .arg(&self.scheme.recent)
                .arg(&tokens)
                .query_async(&mut conn)
                .await?;
            removed += tokens.len() as u64;
        }
    }
}
