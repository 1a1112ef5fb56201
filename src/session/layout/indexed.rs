//! The shared core of layouts that keep records in a HASH and expiries in a
//! parallel ZSET: the bucketed layout (many small HASH + ZSET pairs) and the
//! book's design (one global pair). A [`KeyScheme`] says which keys and field
//! an id uses; the scripts in `src/lua/bucket_*.lua` do the rest.
//!
//! A record longer than `inline_max` is stored out of line under its own key
//! (same hash tag, same expiry) and the HASH keeps a one-byte marker, so one
//! fat session never converts a listpack.

use std::time::Instant;

use redis::{Script, ScriptInvocation};

use super::{Inserted, Layout, Stored, Written, check_batch};
use crate::clock::{ServerClock, Verdict, query_reads};
use crate::error::{Error, Result};
use crate::scripts::{
    self, BUCKET_INSERT, BUCKET_REMOVE, BUCKET_REPLACE, BUCKET_TOUCH, PIPELINE_CHUNK, Reads,
};
use crate::session::id::{IdWidth, InvalidIdExt, SessionId};
use crate::ttl::{Deadline, check_ttl};

/// How a HASH + ZSET layout names the keys and field of an id.
pub trait KeyScheme: Send + Sync {
    /// The keys and field `id` lives under.
    fn keys(&self, id: &SessionId) -> Keys;
    /// Where `id`'s record goes when it is too long for the HASH (same hash
    /// tag as its HASH and ZSET).
    fn out_of_line(&self, id: &SessionId) -> String;
    /// A log-safe description of where `id` lives.
    fn location(&self, id: &SessionId) -> String;
    /// The width of the ids the scheme holds.
    fn id_width(&self) -> IdWidth {
        IdWidth::Bits160
    }
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
    /// The server's clock, as last read.
    pub(super) clock: std::sync::Arc<ServerClock>,
}

/// The byte a HASH holds in place of a record stored out of line (0xc1 is
/// never used by MessagePack, and records start with an integer).
const OUT_OF_LINE: u8 = 0xc1;

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
    /// The id's field in both.
    pub field: Vec<u8>,
}

impl<C, S> HashZset<C, S>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
    S: KeyScheme,
{
    /// A layout over `scheme`'s keys that keeps every record in its HASH,
    /// named `name` in errors and reports: how a layout of other keys (the
    /// benchmarks' book layout) is built on this one.
    pub fn with_scheme(conn: C, scheme: S, name: &'static str) -> Self {
        Self {
            conn,
            scheme,
            inline_max: u64::MAX,
            name,
            clock: Default::default(),
        }
    }

    /// The connection the layout uses.
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// The layout's key scheme.
    pub fn scheme(&self) -> &S {
        &self.scheme
    }

    /// Whether a record of this many bytes is kept in the HASH.
    pub fn fits_inline(&self, record_len: usize) -> bool {
        record_len as u64 <= self.inline_max
    }

    fn keys(&self, id: &SessionId) -> Keys {
        self.scheme.keys(id)
    }

    /// The stored record of a live session: the HASH's bytes or, for the
    /// out-of-line marker, the session read again in one transaction
    /// (entry, HASH value and out-of-line key together), so a concurrent
    /// write that moves the record in or out of line is never seen half
    /// done. Redis answers nothing for an out-of-line key that has expired
    /// with the session or been evicted.
    async fn live_record(
        &self,
        id: &SessionId,
        record: Vec<u8>,
        expires_at: u64,
    ) -> Result<Option<Stored>> {
        if record != [OUT_OF_LINE] {
            return Ok(Some(Stored { record, expires_at }));
        }
        let keys = self.keys(id);
        let (expiry, record, out_of_line): (Option<f64>, Option<Vec<u8>>, Option<Vec<u8>>) =
            Reads::default()
                .zscore(&keys.zset, &keys.field)
                .hget(&keys.hash, &keys.field)
                .get(self.scheme.out_of_line(id))
                .invocation()
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(self.error(id))?;
        // The expiry only moves forward while the id lives (a touch), so
        // the session judged live above is still live at this reading.
        let (Some(expiry), Some(record)) = (expiry, record) else {
            return Ok(None);
        };
        let expires_at = (expiry as u64).max(expires_at);
        if record != [OUT_OF_LINE] {
            return Ok(Some(Stored { record, expires_at }));
        }
        Ok(out_of_line.map(|record| Stored { record, expires_at }))
    }

    /// The server's time in whole seconds, read now.
    async fn server_now(&self) -> Result<u64> {
        let sent = Instant::now();
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await?;
        self.clock.record(secs, micros, sent);
        Ok(secs)
    }

    /// A script call on `id`'s bucket with all three keys.
    fn invocation<'a>(&self, script: &'a Script, id: &SessionId) -> ScriptInvocation<'a> {
        let keys = self.keys(id);
        let mut inv = script.prepare_invoke();
        inv.key(&keys.hash)
            .key(&keys.zset)
            .key(self.scheme.out_of_line(id))
            .arg(&keys.field);
        inv
    }

    /// Counts a record whose write is done (never one refused or failed).
    fn wrote(&self, record: &[u8]) {
        let inline = self.fits_inline(record.len());
        crate::metrics::record_written(self.name, crate::metrics::Placement::of(!inline));
    }

    fn wrote_if_created(&self, record: &[u8], inserted: Inserted) -> Inserted {
        if matches!(inserted, Inserted::Created { .. }) {
            self.wrote(record);
        }
        inserted
    }

    fn insert_invocation<'a>(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> ScriptInvocation<'a> {
        let keys = self.keys(id);
        let inline = self.fits_inline(record.len());
        let mut inv = BUCKET_INSERT.prepare_invoke();
        // Callers check the expiry first (`Deadline::check`).
        inv.key(&keys.hash).key(&keys.zset);
        // The out-of-line key is named only when it will be written.
        if !inline {
            inv.key(self.scheme.out_of_line(id));
        }
        let (mode, secs) = match expiry {
            Deadline::In(secs) => ("in", secs),
            Deadline::At(at) => ("at", at),
        };
        inv.arg(&keys.field)
            .arg(record)
            .arg(scripts::flag(inline))
            .arg(mode)
            .arg(secs);
        inv
    }

    /// Runs one script call on `id`'s bucket.
    async fn call<T: redis::FromRedisValue>(
        &self,
        id: &SessionId,
        inv: &ScriptInvocation<'_>,
    ) -> Result<T> {
        inv.invoke_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))
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
        crate::session::layout::pipeline::pipelined(&self.conn, self, ids, invocations, script)
            .await
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

    fn id_width(&self) -> IdWidth {
        self.scheme.id_width()
    }

    async fn insert(&self, id: &SessionId, record: &[u8], expiry: Deadline) -> Result<Inserted> {
        let expiry = expiry.check()?;
        id.check_width(self.scheme.id_width())?;
        let code = self
            .call(id, &self.insert_invocation(id, record, expiry))
            .await?;
        Ok(self.wrote_if_created(record, Inserted::from_code(code)))
    }

    async fn load(&self, id: &SessionId) -> Result<Option<Stored>> {
        let keys = self.keys(id);
        let mut pipe = redis::pipe();
        pipe.zscore(&keys.zset, &keys.field)
            .hget(&keys.hash, &keys.field);
        let mut replies = query_reads(&mut pipe, &self.conn, &self.clock)
            .await
            .map_err(self.error(id))?;
        let record: Option<Vec<u8>> =
            redis::from_redis_value(replies.pop().unwrap_or(redis::Value::Nil))?;
        let expiry: Option<f64> =
            redis::from_redis_value(replies.pop().unwrap_or(redis::Value::Nil))?;
        let (Some(expiry), Some(record)) = (expiry, record) else {
            return Ok(None);
        };
        let expires_at = expiry as u64;
        let live = match self.clock.judge(expires_at) {
            Verdict::Live => true,
            Verdict::Expired => false,
            Verdict::Ask => expires_at > self.server_now().await?,
        };
        if !live {
            return Ok(None);
        }
        self.live_record(id, record, expires_at).await
    }

    async fn touch(&self, id: &SessionId, ttl_secs: u64) -> Result<Option<u64>> {
        let mut inv = self.invocation(&BUCKET_TOUCH, id);
        inv.arg(check_ttl(ttl_secs)?);
        self.call(id, &inv).await
    }

    async fn replace(
        &self,
        id: &SessionId,
        record: &[u8],
        expected: Option<&[u8]>,
    ) -> Result<Written> {
        let inline = self.fits_inline(record.len());
        let mut inv = self.invocation(&BUCKET_REPLACE, id);
        inv.arg(record)
            .arg(scripts::flag(inline))
            .arg(scripts::flag(expected.is_some()))
            .arg(expected.unwrap_or_default());
        let written = Written::from_code(self.call(id, &inv).await?);
        if written == Written::Done {
            self.wrote(record);
        }
        Ok(written)
    }

    async fn remove(&self, id: &SessionId, expected: Option<&Stored>) -> Result<Written> {
        let mut inv = self.invocation(&BUCKET_REMOVE, id);
        inv.arg(scripts::flag(expected.is_some()))
            .arg(expected.map(|e| e.record.as_slice()).unwrap_or_default())
            .arg(expected.map_or(0, |e| e.expires_at));
        Ok(Written::from_code(self.call(id, &inv).await?))
    }

    async fn insert_many(
        &self,
        items: &[(SessionId, Vec<u8>)],
        ttl_secs: u64,
    ) -> Result<Vec<Inserted>> {
        check_batch(items, ttl_secs, self.scheme.id_width())?;
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(PIPELINE_CHUNK) {
            let invocations: Vec<_> = chunk
                .iter()
                .map(|(id, record)| self.insert_invocation(id, record, Deadline::In(ttl_secs)))
                .collect();
            let ids: Vec<_> = chunk.iter().map(|(id, _)| *id).collect();
            let codes: Vec<i64> = self.pipelined(&ids, &invocations, &BUCKET_INSERT).await?;
            for ((_, record), code) in chunk.iter().zip(codes) {
                out.push(self.wrote_if_created(record, Inserted::from_code(code)));
            }
        }
        Ok(out)
    }

    async fn load_many(&self, ids: &[SessionId]) -> Result<Vec<Option<Stored>>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(PIPELINE_CHUNK) {
            let keys: Vec<Keys> = chunk.iter().map(|id| self.keys(id)).collect();
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.zscore(&k.zset, &k.field).hget(&k.hash, &k.field);
            }
            pipe.cmd("TIME");
            let sent = Instant::now();
            let mut replies: Vec<redis::Value> =
                pipe.query_async(&mut self.conn.clone()).await.map_err(
                    crate::session::layout::pipeline::pipeline_error(self, chunk, 2),
                )?;
            let time = replies.pop().unwrap_or(redis::Value::Nil);
            let (now, micros): (u64, u64) = redis::from_redis_value(time)?;
            self.clock.record(now, micros, sent);
            for (id, pair) in chunk.iter().zip(replies.chunks(2)) {
                let expiry: Option<f64> = redis::from_redis_value_ref(&pair[0])?;
                let record: Option<Vec<u8>> = redis::from_redis_value_ref(&pair[1])?;
                out.push(match (expiry, record) {
                    // The time was read after the entries: never early.
                    (Some(e), Some(r)) if e as u64 > now => {
                        self.live_record(id, r, e as u64).await?
                    }
                    _ => None,
                });
            }
        }
        Ok(out)
    }
}
