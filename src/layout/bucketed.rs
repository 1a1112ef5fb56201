//! The bucketed layout: sessions packed into `2^bits` buckets, each a
//! listpack-sized HASH (field -> record) and a parallel ZSET (field ->
//! expiry), both under one hash tag.
//!
//! A record longer than the server's `hash-max-listpack-value` would convert
//! its whole bucket to a hashtable, so it is stored out of line under its own
//! key (same hash tag, same expiry) and the bucket keeps a one-byte marker.

use redis::{Script, ScriptInvocation};
use serde::{Deserialize, Serialize};

use super::{Expiry, Inserted, Layout, Stored, Written};
use crate::buckets::{Buckets, DEFAULT_NAMESPACE};
use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::limits::ListpackLimits;
use crate::scripts::{
    self, BUCKET_INSERT, BUCKET_LOAD, BUCKET_REMOVE, BUCKET_REPLACE, BUCKET_TOUCH,
};

/// Default bucket bits: 65,536 buckets, for about 5M sessions.
pub const DEFAULT_BUCKET_BITS: u8 = 16;

/// Most script calls sent in one pipeline by the bulk operations.
const PIPELINE_CHUNK: usize = 1024;

/// What a bucketed store is called and how many buckets it has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BucketedConfig {
    /// Prefix of every key, default `sp`.
    pub namespace: String,
    /// `log2` of the bucket count, 1..=24, default 16.
    pub bucket_bits: u8,
}

impl Default for BucketedConfig {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            bucket_bits: DEFAULT_BUCKET_BITS,
        }
    }
}

impl BucketedConfig {
    /// `2^bucket_bits` buckets in the default namespace.
    pub fn new(bucket_bits: u8) -> Self {
        Self {
            bucket_bits,
            ..Self::default()
        }
    }

    /// Uses another key namespace.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }
}

/// Sessions packed into listpack-sized buckets.
///
/// Generic over the connection, so a `MultiplexedConnection`, a
/// `ConnectionManager` (which reconnects after Redis restarts) and a
/// cluster connection all fit.
#[derive(Clone)]
pub struct Bucketed<C> {
    conn: C,
    buckets: Buckets,
    limits: ListpackLimits,
}

impl<C> std::fmt::Debug for Bucketed<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucketed")
            .field("buckets", &self.buckets)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The names an operation on one id needs.
struct Keys {
    hash: String,
    zset: String,
    out_of_line: String,
    field: Vec<u8>,
}

impl<C> Bucketed<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Connects a bucketed layout, reading the server's listpack limits.
    pub async fn new(conn: C, config: BucketedConfig) -> Result<Self> {
        let buckets = Buckets::new(config.namespace, config.bucket_bits)?;
        let limits = ListpackLimits::read(&mut conn.clone()).await?;
        Ok(Self::with_limits(conn, buckets, limits))
    }

    /// A bucketed layout with limits already known (no round trip).
    pub fn with_limits(conn: C, buckets: Buckets, limits: ListpackLimits) -> Self {
        let field = buckets.field_len() as u64;
        if field > limits.hash_value || field > limits.zset_value {
            tracing::warn!(
                field,
                ?limits,
                "server's listpack value limit is below the field length: every bucket will convert"
            );
        }
        Self {
            conn,
            buckets,
            limits,
        }
    }

    /// The bucket scheme.
    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }

    /// The listpack limits this layout works to.
    pub fn limits(&self) -> ListpackLimits {
        self.limits
    }

    /// Whether a record of this many bytes is kept in its bucket.
    pub fn fits_inline(&self, record_len: usize) -> bool {
        record_len as u64 <= self.limits.hash_value
    }

    fn keys(&self, id: &SessionId) -> Keys {
        let bucket = self.buckets.bucket_of(id);
        let field = self.buckets.field(id);
        Keys {
            hash: self.buckets.hash_key(bucket),
            zset: self.buckets.zset_key(bucket),
            out_of_line: self.buckets.out_of_line_key(bucket, &field),
            field,
        }
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
        move |e| Error::from_redis(e, || self.buckets.location(id))
    }

    /// Sends a pipeline of script calls, loading the scripts and retrying
    /// once if the server has lost them.
    async fn pipelined<T: redis::FromRedisValue>(
        &self,
        ids: &[SessionId],
        invocations: &[ScriptInvocation<'_>],
        script: &Script,
    ) -> Result<Vec<T>> {
        let mut pipe = redis::pipe();
        for inv in invocations {
            pipe.invoke_script(inv);
        }
        let mut conn = self.conn.clone();
        let result = match pipe.query_async(&mut conn).await {
            Err(e) if scripts::is_noscript(&e) => {
                scripts::load_all(&mut conn, &[script]).await?;
                pipe.query_async(&mut conn).await
            }
            other => other,
        };
        result.map_err(|e| {
            // Name the bucket of the first item that failed.
            let first = e
                .clone()
                .into_server_errors()
                .and_then(|errors| errors.first().map(|(i, _)| *i))
                .and_then(|i| ids.get(i));
            Error::from_redis(e, || match first {
                Some(id) => self.buckets.location(id),
                None => format!("{}: a pipeline", self.buckets.namespace()),
            })
        })
    }
}

fn inserted(code: i64) -> Inserted {
    match code {
        0 => Inserted::IdTaken,
        c if c < 0 => Inserted::AlreadyExpired,
        c => Inserted::Created {
            expires_at: c as u64,
        },
    }
}

fn written(code: i64) -> Written {
    match code {
        1 => Written::Done,
        0 => Written::Missing,
        _ => Written::Conflict,
    }
}

impl<C> Layout for Bucketed<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    fn name(&self) -> &'static str {
        "bucketed"
    }

    fn location(&self, id: &SessionId) -> String {
        self.buckets.location(id)
    }

    async fn insert(&self, id: &SessionId, record: &[u8], expiry: Expiry) -> Result<Inserted> {
        let code: i64 = self
            .insert_invocation(id, record, expiry)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        Ok(inserted(code))
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
        Ok(written(code))
    }

    async fn remove(&self, id: &SessionId, expected: Option<&[u8]>) -> Result<Written> {
        let code: i64 = Self::invocation(&BUCKET_REMOVE, &self.keys(id))
            .arg(if expected.is_some() { "1" } else { "0" })
            .arg(expected.unwrap_or_default())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        Ok(written(code))
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
            out.extend(codes.into_iter().map(inserted));
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
