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
//! Where it is not used: a growing store (a bucket may be split or merged
//! away under a plain write, which would recreate it), a store with a user
//! index (the entry and its grace are checked in the script), and a Redis
//! Cluster: there a pipeline's commands follow a slot migration one by one,
//! and a client that sends a redirected pipeline again writes the index
//! entry on both nodes, which stops the migration.

use std::sync::atomic::Ordering;

use super::Compact;
use crate::error::{Error, Result};
use crate::session::id::SessionId;

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Which plain command creates a session, if any: `HSETEX FNX` (any
    /// record kept in its bucket), `HSETNX` (a record kept whole in its
    /// value, on a server without `HSETEX`), or none (every create is a
    /// script).
    pub fn plain_creates(&self) -> Option<&'static str> {
        let plain = self.plain.as_ref().filter(|p| p.creates)?;
        Some(if plain.hsetex.load(Ordering::Relaxed) {
            "HSETEX FNX"
        } else {
            "HSETNX"
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
        if !hsetex && !pieces.is_empty() {
            return Ok(None);
        }
        let k = self.keys(id);
        let mut fields: Vec<(Vec<u8>, &[u8])> = Vec::with_capacity(1 + pieces.len());
        fields.push((k.field.clone(), value));
        for (i, piece) in pieces.iter().enumerate() {
            fields.push((super::piece_field(&k.field, i + 1, short), piece));
        }
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
            for (field, value) in &fields {
                cmd.arg(field).arg(*value);
            }
        } else {
            pipe.cmd("HSETNX").arg(&k.bucket).arg(&k.field).arg(value);
        }
        // Each reply on its own: the fields may be written though the
        // index refused its entry, and are then taken back.
        let mut replies: Vec<redis::Value> = pipe
            .ignore_errors()
            .query_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        let made = replies.pop().map(redis::Value::extract_error);
        let indexed = replies.pop().map(redis::Value::extract_error);
        let made = match made {
            Some(Ok(redis::Value::Int(made))) => made == 1,
            Some(Err(e)) if e.code() == Some("NOPERM") && hsetex => {
                tracing::warn!(
                    "HSETEX is refused: creates go by a script from now on; grant hsetex \
                     (sessionpack::acl, role field-writes)"
                );
                plain.hsetex.store(false, Ordering::Relaxed);
                false
            }
            Some(Err(e)) => return Err(self.error(id)(e)),
            other => {
                let e = redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "a plain create's reply is not a count",
                    format!("{other:?}"),
                ));
                return Err(self.error(id)(e));
            }
        };
        if let Some(Err(e)) = indexed {
            // No session stands where no sweep would find it.
            if made {
                let names: Vec<&[u8]> = fields.iter().map(|(f, _)| f.as_slice()).collect();
                redis::cmd("HDEL")
                    .arg(&k.bucket)
                    .arg(names)
                    .query_async::<i64>(&mut self.conn.clone())
                    .await
                    .map_err(self.error(id))?;
            }
            return Err(self.error(id)(e));
        }
        Ok(Some(made))
    }
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
