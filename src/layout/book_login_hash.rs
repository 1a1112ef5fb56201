//! The Redis book's login-cookie design: one global HASH of token -> record
//! (`login:`) and one global ZSET of tokens (`recent:`).
//!
//! The book scores `recent:` by last-seen time and cleans up by count; here
//! the score is the expiry (last seen + TTL, which orders the same way) so the
//! layout meets the same expiry guarantees as the others. Tokens are the
//! 40-character hex text, as the book keeps its tokens. Both keys are global,
//! so this layout is not for Redis Cluster.

use super::indexed::{HashZset, KeyScheme, Keys};
use crate::id::SessionId;

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
            // Never written: a hashtable HASH takes records of any size.
            out_of_line: format!("{}:oversize:{token}", self.namespace),
            field: token.into_bytes(),
        }
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
