//! Creates with plain commands, in a fixed store on one server: the index
//! entry's `ZADD LT` and the session's fields, in one round trip, where
//! `compact_add.lua` reads and writes the same in a script.
//!
//! What makes that safe: `HSETEX key FNX` writes every field it names or
//! none, so a create that names the session's field and its pieces' (short
//! names where the record asks for them) writes a whole session or
//! nothing. A taken id, a short name another session holds, a piece a
//! delete left behind: each writes nothing, and the script decides as
//! before (long names, overwriting what no value names). A record kept
//! whole needs one field, which `HSETNX` writes on any server. A fixed
//! store's bucket is where the shape says for ever, so there is no route
//! to check. The `ZADD LT` goes first: an entry lowered for an id that
//! turns out taken only brings the sweeper to the bucket early.
//!
//! A growing store's bucket may be split or merged away under a plain
//! write, which no plain command can check first. From record format 11
//! ([`super::MOVED_MARKS_FORMAT`]) each bucket key a split or merge
//! replaces stays as a mark for a minute (a HASH without the marker,
//! expiring), and a create routes by a copy of its group's shape read less
//! than [`super::PLAIN_ROUTE_AGE`] ago (read again first where older), so
//! the key it writes is a current bucket or a mark, never a key of no one.
//! The same round trip lowers the bucket's index entry first (a split or
//! merge carries it to wherever the session ends up) and reads the
//! bucket's marker and the session's field back, with its field count
//! (for a split): a write that landed in a mark, or whose field a split or
//! merge moved meanwhile, is taken back where the key still lacks its
//! marker (`compact_withdraw.lua`) and the script decides, after the
//! shape. What a mark holds for a moment is no session to anyone: loads,
//! saves and deletes take nothing from a bucket without its marker; and
//! what a writer that stopped never took back goes with the mark; an
//! index entry naming a mark the sweeper drops.
//!
//! Where it is not used: a store with a user index (the entry and its
//! grace are checked in the script), a growing store of an earlier format,
//! and a Redis Cluster: there a pipeline's commands follow a slot
//! migration one by one, and a client that sends a redirected pipeline
//! again writes the index entry on both nodes, which stops the migration.

use std::sync::atomic::Ordering;

use super::{Compact, Keys, MARKER, PLAIN_ROUTE_AGE};
use crate::error::{Error, Result};
use crate::scripts::{COMPACT_FNX, COMPACT_WITHDRAW};
use crate::session::id::SessionId;

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Which plain command creates a session, if any: `HSETEX FNX` (any
    /// record kept in its bucket), `HSETNX / compact_fnx.lua` (on a server
    /// without `HSETEX`: `HSETNX` of a record kept whole in its value, a
    /// script of two commands for one in pieces), or none (every create is
    /// the full script).
    pub fn plain_creates(&self) -> Option<&'static str> {
        let plain = self.plain.as_ref().filter(|p| p.creates)?;
        Some(if plain.hsetex.load(Ordering::Relaxed) {
            "HSETEX FNX"
        } else {
            "HSETNX / compact_fnx.lua"
        })
    }

    /// A create of `value` and its `pieces` (named short if `short`),
    /// expiring at `at`, with plain commands where this store makes them:
    /// `Some(true)` if it wrote the session, `Some(false)` if it wrote
    /// nothing (the script decides why), `None` where no plain command
    /// can.
    pub(super) async fn create_plain(
        &self,
        id: &SessionId,
        value: &[u8],
        pieces: &[&[u8]],
        short: bool,
        at: u64,
    ) -> Result<Option<bool>> {
        let Some(plain) = self.plain.as_ref().filter(|p| p.creates) else {
            return Ok(None);
        };
        let hsetex = plain.hsetex.load(Ordering::Relaxed);
        if let Some(growth) = self.growth() {
            // A copy of the shape read less than PLAIN_ROUTE_AGE ago, or
            // read now; never split, the group's root has no key until a
            // write claims it, which the script does.
            let group = growth.shape.group_of(id);
            let shape = match growth.cache.fresh(group, PLAIN_ROUTE_AGE) {
                Some(shape) => shape,
                None => self.fetch_shape(group).await?,
            };
            if shape.epoch() == 0 {
                return Ok(None);
            }
            let k = growth.keys_by(id, &shape);
            return self
                .create_routed(id, &k, value, pieces, short, at, hsetex)
                .await;
        }
        let k = self.keys(id);
        let fields = session_fields(&k, value, pieces, short);
        let mut pipe = create_commands(&k, &fields, at, hsetex);
        // Each reply on its own: the fields may be written though the
        // index refused its entry, and are then taken back.
        let mut replies: Vec<redis::Value> = pipe
            .ignore_errors()
            .query_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        let made = replies.pop().map(redis::Value::extract_error);
        let indexed = replies.pop().map(redis::Value::extract_error);
        // Not run (None): nothing written, the script decides.
        let made = self.made(id, made, hsetex).await?.unwrap_or_default();
        if let Some(Err(e)) = indexed {
            return Err(self.index_refused(id, &k, &fields, made, e).await);
        }
        Ok(Some(made))
    }

    /// A growing store's plain create at `k`, routed by a fresh copy of
    /// the shape (the module's docs).
    #[allow(clippy::too_many_arguments)]
    async fn create_routed(
        &self,
        id: &SessionId,
        k: &Keys,
        value: &[u8],
        pieces: &[&[u8]],
        short: bool,
        at: u64,
        hsetex: bool,
    ) -> Result<Option<bool>> {
        let fields = session_fields(k, value, pieces, short);
        // The index entry first: a split or merge carries it to whichever
        // bucket the session ends up in (the earlier of two), so no session
        // is ever where no entry leads the sweeper. One naming a mark the
        // sweeper drops.
        let mut pipe = create_commands(k, &fields, at, hsetex);
        pipe.cmd("HMGET").arg(&k.bucket).arg(MARKER).arg(&k.field);
        pipe.cmd("HLEN").arg(&k.bucket);
        let replies: Vec<redis::Value> = pipe
            .ignore_errors()
            .query_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        let mut replies = replies.into_iter().map(redis::Value::extract_error);
        let indexed = replies.next();
        let Some(made) = self.made(id, replies.next(), hsetex).await? else {
            return Ok(None);
        };
        let (marker, field): (Option<Vec<u8>>, Option<Vec<u8>>) = self.reply(id, replies.next())?;
        let held: u64 = self.reply(id, replies.next())?;
        if let Some(Err(e)) = indexed {
            return Err(self.index_refused(id, k, &fields, made, e).await);
        }
        if !made {
            return Ok(Some(false));
        }
        if marker.is_none() || field.as_deref() != Some(value) {
            // A mark, or a bucket a split or merge moved the field out of.
            let names: Vec<&[u8]> = fields.iter().map(|(f, _)| f.as_slice()).collect();
            let _: i64 = COMPACT_WITHDRAW
                .key(&k.bucket)
                .arg(names)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(self.error(id))?;
            return Ok(Some(false));
        }
        self.split_if_full(k, held).await;
        Ok(Some(true))
    }

    /// The error of a plain create whose index entry was refused (a key of
    /// another type under its name), after taking back the fields it
    /// wrote (`made`), so no session stands where no sweep would find it.
    async fn index_refused(
        &self,
        id: &SessionId,
        k: &Keys,
        fields: &[(Vec<u8>, &[u8])],
        made: bool,
        refused: redis::RedisError,
    ) -> Error {
        if made {
            let names: Vec<&[u8]> = fields.iter().map(|(f, _)| f.as_slice()).collect();
            let taken: redis::RedisResult<i64> = redis::cmd("HDEL")
                .arg(&k.bucket)
                .arg(names)
                .query_async(&mut self.conn.clone())
                .await;
            if let Err(e) = taken {
                return self.error(id)(e);
            }
        }
        self.error(id)(refused)
    }

    /// Whether the plain write of a create's fields wrote them, from its
    /// reply; `None` where it was not run: `HSETEX` refused to this
    /// store's user (creates go by scripts from now on), or
    /// `compact_fnx.lua` not loaded (after a restart or `SCRIPT FLUSH`; it
    /// is loaded again for the next create). Either way the script decides.
    async fn made(
        &self,
        id: &SessionId,
        reply: Option<redis::RedisResult<redis::Value>>,
        hsetex: bool,
    ) -> Result<Option<bool>> {
        match reply {
            Some(Ok(redis::Value::Int(made))) => Ok(Some(made == 1)),
            Some(Err(e)) if e.code() == Some("NOPERM") && hsetex => {
                self.hsetex_refused();
                Ok(None)
            }
            Some(Err(e)) if crate::scripts::is_noscript(&e) => {
                COMPACT_FNX
                    .load_async(&mut self.conn.clone())
                    .await
                    .map_err(self.error(id))?;
                Ok(None)
            }
            Some(Err(e)) => Err(self.error(id)(e)),
            other => Err(self.error(id)(not_a_count(&other))),
        }
    }

    /// One reply of a plain create's pipeline, as `T`.
    fn reply<T: redis::FromRedisValue>(
        &self,
        id: &SessionId,
        reply: Option<redis::RedisResult<redis::Value>>,
    ) -> Result<T> {
        let value = match reply {
            Some(Ok(value)) => value,
            Some(Err(e)) => return Err(self.error(id)(e)),
            None => return Err(self.error(id)(not_a_count(&None))),
        };
        redis::from_redis_value(value).map_err(|e| self.error(id)(e.into()))
    }

    /// After the server refused `HSETEX` to this store's user: saves and
    /// creates go by scripts from now on.
    fn hsetex_refused(&self) {
        if let Some(plain) = &self.plain {
            tracing::warn!(
                "HSETEX is refused: creates and saves go by scripts from now on; grant \
                 hsetex (sessionpack::acl, role field-writes)"
            );
            plain.hsetex.store(false, Ordering::Relaxed);
        }
    }
}

/// The fields a create writes: the session's, then its pieces' (short
/// names where `short`).
fn session_fields<'a>(
    k: &Keys,
    value: &'a [u8],
    pieces: &[&'a [u8]],
    short: bool,
) -> Vec<(Vec<u8>, &'a [u8])> {
    let mut fields: Vec<(Vec<u8>, &[u8])> = Vec::with_capacity(1 + pieces.len());
    fields.push((k.field.clone(), value));
    for (i, piece) in pieces.iter().enumerate() {
        fields.push((super::piece_field(&k.field, i + 1, short), piece));
    }
    fields
}

/// A create's commands: the index entry's `ZADD LT`, then the write of
/// `fields`: `HSETEX FNX` of them all, or on a server without it `HSETNX`
/// of a record kept whole, `compact_fnx.lua` of one in pieces.
fn create_commands(
    k: &Keys,
    fields: &[(Vec<u8>, &[u8])],
    at: u64,
    hsetex: bool,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("ZADD")
        .arg(&k.index)
        .arg("LT")
        .arg(at)
        .arg(k.member);
    if hsetex {
        let cmd = pipe
            .cmd("HSETEX")
            .arg(&k.bucket)
            .arg("FNX")
            .arg("FIELDS")
            .arg(fields.len());
        for (field, value) in fields {
            cmd.arg(field).arg(*value);
        }
    } else if let [(field, value)] = fields {
        pipe.cmd("HSETNX").arg(&k.bucket).arg(field).arg(*value);
    } else {
        let cmd = pipe
            .cmd("EVALSHA")
            .arg(COMPACT_FNX.get_hash())
            .arg(1)
            .arg(&k.bucket);
        for (field, value) in fields {
            cmd.arg(field).arg(*value);
        }
    }
    pipe
}

/// The error of a reply that is not what a plain create's command sends.
fn not_a_count(reply: &Option<redis::RedisResult<redis::Value>>) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "a plain create's reply is not what its command sends",
        format!("{reply:?}"),
    ))
}

/// Whether a store opened on this server may create with plain commands:
/// not on a Redis Cluster (the module's docs). `HELLO` with no version
/// tells, its `mode`, and needs no ACL grant.
pub(super) async fn on_one_server<C>(conn: &C) -> Result<bool>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let hello: std::collections::HashMap<String, redis::Value> = redis::cmd("HELLO")
        .query_async(&mut conn.clone())
        .await
        .map_err(|e| Error::from_redis(e, || "HELLO".into()))?;
    let mode = hello
        .get("mode")
        .and_then(|m| redis::from_redis_value_ref::<String>(m).ok());
    Ok(mode.as_deref() != Some("cluster"))
}
