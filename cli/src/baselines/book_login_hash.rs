//! The Redis book's login-cookie design: one global HASH of token -> record
//! (`login:`) and one global ZSET of tokens (`recent:`).
//!
//! The book scores `recent:` by last-seen time and cleans up by count; here
//! the score is the expiry (last seen + TTL, which orders the same way) so the
//! layout meets the same expiry guarantees as the others. Tokens are the
//! 40-character hex text, as the book keeps its tokens. Both keys are global,
//! so this layout is not for Redis Cluster.

use std::borrow::Cow;

use sessionpack::error::Result;
use sessionpack::session::layout::indexed::{HashZset, KeyScheme, Keys};
use sessionpack::session::layout::{Inserted, Layout, Stored, Written};
use sessionpack::ttl::Deadline;
use sessionpack::{IdWidth, SessionId};

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

/// The book's one-HASH, one-ZSET login store: the library's HASH + ZSET
/// layout over the book's two global keys.
#[derive(Clone, Debug)]
pub struct BookLoginHash<C>(HashZset<C, BookKeys>);

impl<C> BookLoginHash<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// The book's layout, keys `<namespace>:login:` and `<namespace>:recent:`.
    pub fn book(conn: C, namespace: &str) -> Self {
        let keys = BookKeys {
            login: format!("{namespace}:login:"),
            recent: format!("{namespace}:recent:"),
            namespace: namespace.to_owned(),
        };
        Self(HashZset::with_scheme(conn, keys, "book-login-hash"))
    }

    /// The name of the global HASH of token -> record.
    pub fn login_key(&self) -> &str {
        &self.0.scheme().login
    }

    /// The name of the global ZSET of token -> expiry.
    pub fn recent_key(&self) -> &str {
        &self.0.scheme().recent
    }
}

/// Tokens the book's cleanup removes per round trip.
pub const CLEAN_BATCH: u64 = 100;

impl<C> BookLoginHash<C>
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
        let mut conn = self.0.connection().clone();
        let mut removed = 0;
        loop {
            let size: u64 = redis::cmd("ZCARD")
                .arg(&self.0.scheme().recent)
                .query_async(&mut conn)
                .await?;
            if size <= limit {
                return Ok(removed);
            }
            let end_index = (size - limit).min(CLEAN_BATCH);
            let tokens: Vec<Vec<u8>> = redis::cmd("ZRANGE")
                .arg(&self.0.scheme().recent)
                .arg(0)
                .arg(end_index - 1)
                .query_async(&mut conn)
                .await?;
            if tokens.is_empty() {
                return Ok(removed);
            }
            let _: () = redis::cmd("HDEL")
                .arg(&self.0.scheme().login)
                .arg(&tokens)
                .query_async(&mut conn)
                .await?;
            let _: () = redis::cmd("ZREM")
                .arg(&self.0.scheme().recent)
                .arg(&tokens)
                .query_async(&mut conn)
                .await?;
            removed += tokens.len() as u64;
        }
    }
}

/// Every call goes to the HASH + ZSET layout underneath.
impl<C> Layout for BookLoginHash<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn location(&self, id: &SessionId) -> String {
        self.0.location(id)
    }

    fn id_width(&self) -> IdWidth {
        self.0.id_width()
    }

    async fn new_id(&self) -> Result<SessionId> {
        self.0.new_id().await
    }

    fn stamps_ids(&self) -> bool {
        self.0.stamps_ids()
    }

    async fn insert(&self, id: &SessionId, record: &[u8], expiry: Deadline) -> Result<Inserted> {
        self.0.insert(id, record, expiry).await
    }

    async fn insert_new(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> Result<Inserted> {
        self.0.insert_new(id, record, expiry).await
    }

    async fn insert_successor(
        &self,
        from: &SessionId,
        prev: Option<&SessionId>,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> Result<Inserted> {
        self.0
            .insert_successor(from, prev, id, record, expiry)
            .await
    }

    async fn load(&self, id: &SessionId) -> Result<Option<Stored>> {
        self.0.load(id).await
    }

    async fn touch(&self, id: &SessionId, ttl_secs: u64) -> Result<Option<u64>> {
        self.0.touch(id, ttl_secs).await
    }

    async fn replace(
        &self,
        id: &SessionId,
        record: &[u8],
        expected: Option<&[u8]>,
    ) -> Result<Written> {
        self.0.replace(id, record, expected).await
    }

    async fn remove(&self, id: &SessionId, expected: Option<&Stored>) -> Result<Written> {
        self.0.remove(id, expected).await
    }

    async fn insert_many(
        &self,
        items: &[(SessionId, Vec<u8>)],
        ttl_secs: u64,
    ) -> Result<Vec<Inserted>> {
        self.0.insert_many(items, ttl_secs).await
    }

    async fn carry_over(&self, from: &SessionId, to: &SessionId) -> Result<()> {
        self.0.carry_over(from, to).await
    }

    async fn load_many(&self, ids: &[SessionId]) -> Result<Vec<Option<Stored>>> {
        self.0.load_many(ids).await
    }

    async fn pack(&self, data: Vec<u8>) -> Vec<u8> {
        self.0.pack(data).await
    }

    async fn unpack<'a>(&'a self, id: &'a SessionId, data: &'a [u8]) -> Result<Cow<'a, [u8]>> {
        self.0.unpack(id, data).await
    }
}
