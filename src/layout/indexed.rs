//! The shared core of layouts that keep records in a HASH and expiries in a
//! parallel ZSET: the bucketed layout (many small HASH + ZSET pairs) and the
//! book's design (one global pair). A [`KeyScheme`] says which keys and field
//! an id uses; the scripts in `src/lua/bucket_*.lua` do the rest.
//!
//! A record longer than `inline_max` is stored out of line under its own key
//! (same hash tag, same expiry) and the HASH keeps a one-byte marker, so one
//! fat session never converts a listpack.

use redis::{Script, ScriptInvocation};

use super::{Expiry, Inserted, Layout, Stored, Written};
use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::scripts::{
    self, BUCKET_INSERT, BUCKET_LOAD, BUCKET_REMOVE, BUCKET_REPLACE, BUCKET_TOUCH, PIPELINE_CHUNK,
};

/// How a HASH + ZSET layout names the keys and field of an id.
pub trait KeyScheme: Send + Sync {
    /// The keys and field `id` lives under.
    fn keys(&self, id: &SessionId) -> Keys;
    /// A log-safe description of where `id` lives.
    fn location(&self, id: &SessionId) -> String;
}

/// Sessions in HASH + ZSET pairs named by a [`KeyScheme`].
///
/// Generic over the connection, so a `MultiplexedConnection`, a
/// `ConnectionManager` (which reconnects after Redis restarts) and a
/// cluster connection all fit.
#[derive(Clone)]
pub struct HashZset<C, S> {
    pub(super) conn: C,
    pub(super) scheme: S,
    /// Longest record kept in the HASH; longer ones go out of line.
    pub(super) inline_max: u64,
    pub(super) name: &'static str,
}

impl<C, S: std::fmt::Debug> std::fmt::Debug for HashZset<C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.name)
            .field("scheme", &self.scheme)
            .field("inline_max", &self.inline_max)
            .finish_non_exhaustive()
    }
}

/// The names an operation on one id needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    /// The HASH of field -> record.
    pub hash: String,
    /// The ZSET of field -> expiry.
    pub zset: String,
    /// Where the record goes when it is too long for the HASH.
    pub out_of_line: String,
    /// The id's field in both.
    pub field: Vec<u8>,
}

impl<C, S> HashZset<C, S>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
    S: KeyScheme,
{
    /// The connection the layout uses.
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// Whether a record of this many bytes is kept in the HASH.
    pub fn fits_inline(&self, record_len: usize) -> bool {
        record_len as u64 <= self.inline_max
    }

    fn keys(&self, id: &SessionId) -> Keys {
        self.scheme.keys(id)
    }

    fn invocation<'a>(script: &'a Script, keys: &Keys) -> ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.key(&keys.hash)
            .key(&keys.zset)
            .key(&keys.out_of_line)
            .arg(&keys.field);
        inv
    }

    fn insert_invocation<'a>(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Expiry,
    ) -> ScriptInvocation<'a> {
        let mut inv = Self::invocation(&BUCKET_INSERT, &self.keys(id));
        let (mode, secs) = match expiry {
            Expiry::In(secs) => ("in", secs),
            Expiry::At(at) => ("at", at),
        };
        inv.arg(record)
            .arg(if self.fits_inline(record.len()) {
                "1"
            } else {
                "0"
            })
            .arg(mode)
            .arg(secs);
        inv
    }

    fn error<'a>(&'a self, id: &'a SessionId) -> impl FnOnce(redis::RedisError) -> Error + 'a {
        move |e| Error::from_redis(e, || self.scheme.location(id))
    }

    async fn pipelined<T: redis::FromRedisValue>(
        &self,
        ids: &[SessionId],
        invocations: &[ScriptInvocation<'_>],
        script: &Script,
    ) -> Result<Vec<T>> {
        scripts::pipelined(&self.conn, self, ids, invocations, script).await
    }
}

impl<C, S> Layout for HashZset<C, S>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
    S: KeyScheme,
{
    fn name(&self) -> &'static str {
        self.name
    }

    fn location(&self, id: &SessionId) -> String {
        self.scheme.location(id)
    }

    async fn insert(&self, id: &SessionId, record: &[u8], expiry: Expiry) -> Result<Inserted> {
        let code: i64 = self
            .insert_invocation(id, record, expiry)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        Ok(Inserted::from_code(code))
    }

    async fn load(&self, id: &SessionId) -> Result<Option<Stored>> {
        let found: Option<(Vec<u8>, u64)> = Self::invocation(&BUCKET_LOAD, &self.keys(id))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        Ok(found.map(|(record, expires_at)| Stored { record, expires_at }))
    }

    async fn touch(&self, id: &SessionId, ttl_secs: u64) -> Result<Option<u64>> {
        Self::invocation(&BUCKET_TOUCH, &self.keys(id))
            .arg(ttl_secs)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))
    }

    async fn replace(
        &self,
        id: &SessionId,
        record: &[u8],
        expected: Option<&[u8]>,
    ) -> Result<Written> {
        let code: i64 = Self::invocation(&BUCKET_REPLACE, &self.keys(id))
            .arg(record)
            .arg(if self.fits_inline(record.len()) {
                "1"
            } else {
                "0"
            })
            .arg(if expected.is_some() { "1" } else { "0" })
            .arg(expected.unwrap_or_default())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        Ok(Written::from_code(code))
    }

    async fn remove(&self, id: &SessionId, expected: Option<&[u8]>) -> Result<Written> {
        let code: i64 = Self::invocation(&BUCKET_REMOVE, &self.keys(id))
            .arg(if expected.is_some() { "1" } else { "0" })
            .arg(expected.unwrap_or_default())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        Ok(Written::from_code(code))
    }

    async fn insert_many(
        &self,
        items: &[(SessionId, Vec<u8>)],
        ttl_secs: u64,
    ) -> Result<Vec<Inserted>> {
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(PIPELINE_CHUNK) {
            let invocations: Vec<_> = chunk
                .iter()
                .map(|(id, record)| self.insert_invocation(id, record, Expiry::In(ttl_secs)))
                .collect();
            let ids: Vec<_> = chunk.iter().map(|(id, _)| *id).collect();
            let codes: Vec<i64> = self.pipelined(&ids, &invocations, &BUCKET_INSERT).await?;
            out.extend(codes.into_iter().map(Inserted::from_code));
        }
        Ok(out)
    }

    async fn load_many(&self, ids: &[SessionId]) -> Result<Vec<Option<Stored>>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(PIPELINE_CHUNK) {
            let invocations: Vec<_> = chunk
                .iter()
                .map(|id| Self::invocation(&BUCKET_LOAD, &self.keys(id)))
                .collect();
            let found: Vec<Option<(Vec<u8>, u64)>> =
                self.pipelined(chunk, &invocations, &BUCKET_LOAD).await?;
            out.extend(
                found
                    .into_iter()
                    .map(|f| f.map(|(record, expires_at)| Stored { record, expires_at })),
            );
        }
        Ok(out)
    }
}
