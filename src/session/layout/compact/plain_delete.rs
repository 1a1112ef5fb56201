//! Deleting a session with plain commands where the server has `HGETDEL`
//! (Redis 8.0, Valkey 9.0): the session's field goes and its value comes
//! back in one step, so exactly one deleter learns what the record held,
//! and removes the rest after.
//!
//! An out-of-line record's key and long piece names are the session's
//! alone: a `DEL` or `HDEL` of them after is safe. Short piece names
//! (`compact_pieces.lua`) are shared: once the session is gone, another
//! may take them. Nothing can take them while the first piece stays, and
//! only a sweep, cap, split or merge removes a piece no value names; so
//! the pieces are taken after the value with `HGETDEL` too, and joined
//! with the value's head they must give the record's check. Where they
//! do not (a sweep removed them between the two steps and a new session
//! took the names), what was taken is put back (`HSETNX`, where nothing
//! is there now): nothing is lost, though a load of that other session
//! in that moment finds a piece missing ([`crate::Error::CorruptRecord`]).
//!
//! Where this process read the session and saw short piece names, they go
//! in the first step, with the value: while the session lives they are
//! its own or no one's (a session that gives them up keeps the first as a
//! hold), so a step that found the value took only its pieces; one that
//! found none puts them back.

use std::sync::atomic::Ordering;

use super::value::{Value, check_of, parse_value, piece_field};
use super::{Compact, Kept, Keys, MARKER};
use crate::error::Result;
use crate::session::id::SessionId;

/// Fields taken with `HGETDEL`, and what each held.
type Taken = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// What the first step's round trip returns: what `HGETDEL` took, and
/// whether the bucket holds its marker (asked in a growing store only).
type FirstStep = (Vec<Option<Vec<u8>>>, Option<bool>);

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// [`Compact::delete_at`] by `HGETDEL` of the session's field (and of
    /// its short-named pieces, where `kept` says it has some), with the
    /// bucket's marker asked in the same round trip in a growing store.
    /// `Err(())` inside where the server refuses `HGETDEL` (the store goes
    /// by scripts from then on). `None` where the bucket lacks its marker
    /// and held no field, or is a mark: it may have been split or merged
    /// away (and a field a mark held was a create's for a moment, no
    /// session's).
    pub(super) async fn delete_plain(
        &self,
        id: &SessionId,
        k: &Keys,
        kept: Option<Kept>,
    ) -> Result<std::result::Result<Option<bool>, ()>> {
        let seen_short = match kept {
            Some(Kept::Pieces { count, short: true }) => count,
            _ => 0,
        };
        let mut fields = vec![k.field.clone()];
        fields.extend((1..=seen_short).map(|i| piece_field(&k.field, i, true)));
        let routed = k.route.is_some();
        let mut pipe = redis::pipe();
        pipe.cmd("HGETDEL")
            .arg(&k.bucket)
            .arg("FIELDS")
            .arg(fields.len())
            .arg(&fields);
        if routed {
            pipe.hexists(&k.bucket, MARKER);
        }
        let reply: redis::RedisResult<FirstStep> = if routed {
            pipe.query_async(&mut self.conn.clone()).await
        } else {
            pipe.query_async::<(Vec<Option<Vec<u8>>>,)>(&mut self.conn.clone())
                .await
                .map(|(values,)| (values, None))
        };
        let (values, marked) = match reply {
            Ok(reply) => reply,
            Err(e) if e.code() == Some("NOPERM") => {
                tracing::warn!(
                    "HGETDEL is refused: deletes go by a script from now on; grant hgetdel \
                     (sessionpack::acl, role field-writes)"
                );
                if let Some(plain) = &self.plain {
                    plain.hgetdel.store(false, Ordering::Relaxed);
                }
                return Ok(Err(()));
            }
            Err(e) => return Err(self.error(id)(e)),
        };
        let mut values = values.into_iter();
        let value = values.next().flatten();
        let taken: Taken = fields.into_iter().skip(1).zip(values).collect();
        let unmarked = marked == Some(false);
        let Some(value) = value.filter(|_| !(unmarked && self.marks())) else {
            // No session there (or a mark's field): the pieces taken
            // with it may be another's.
            self.put_back(id, k, taken).await?;
            return Ok(Ok((!unmarked).then_some(false)));
        };
        match parse_value(&value) {
            Some(Value::OutOfLine { .. }) => {
                let _: i64 = redis::cmd("DEL")
                    .arg(self.out_of_line_key(k))
                    .query_async(&mut self.conn.clone())
                    .await
                    .map_err(self.error(id))?;
            }
            Some(Value::Pieced {
                pieces,
                short: false,
                ..
            }) if pieces > 0 => {
                let names: Vec<Vec<u8>> = (1..=pieces)
                    .map(|i| piece_field(&k.field, i, false))
                    .collect();
                let _: i64 = redis::cmd("HDEL")
                    .arg(&k.bucket)
                    .arg(names)
                    .query_async(&mut self.conn.clone())
                    .await
                    .map_err(self.error(id))?;
            }
            Some(Value::Pieced {
                pieces,
                short: true,
                head,
                check,
                ..
            }) if pieces > seen_short => {
                self.take_short_pieces(id, k, &taken, pieces, head, check)
                    .await?;
            }
            // Whole, or short pieces taken already: what the first step
            // took under short names was this session's (its pieces, or
            // its hold and names no one has).
            Some(_) => {}
            None => self.put_back(id, k, taken).await?,
        }
        Ok(Ok(Some(true)))
    }

    /// The short-named pieces of a session whose value was taken (those
    /// after `taken`, read in the first step), taken in turn, and put back
    /// unless with the value's head they give its check.
    async fn take_short_pieces(
        &self,
        id: &SessionId,
        k: &Keys,
        taken: &Taken,
        pieces: usize,
        head: Vec<u8>,
        check: Option<u32>,
    ) -> Result<()> {
        let names: Vec<Vec<u8>> = (taken.len() + 1..=pieces)
            .map(|i| piece_field(&k.field, i, true))
            .collect();
        let values: Vec<Option<Vec<u8>>> = redis::cmd("HGETDEL")
            .arg(&k.bucket)
            .arg("FIELDS")
            .arg(names.len())
            .arg(&names)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        let mut record = head;
        let mut whole = true;
        for piece in taken
            .iter()
            .map(|(_, v)| v)
            .chain(values.iter())
            .take(pieces)
        {
            match piece {
                Some(piece) => record.extend_from_slice(piece),
                None => whole = false,
            }
        }
        if whole && check.is_some_and(|check| check == check_of(&record)) {
            return Ok(());
        }
        self.put_back(id, k, names.into_iter().zip(values).collect())
            .await
    }

    /// Puts back pieces taken that may be another session's: each where
    /// nothing is under its name now. One that was no one's is left loose,
    /// for the sweeper.
    async fn put_back(&self, id: &SessionId, k: &Keys, taken: Taken) -> Result<()> {
        let mut pipe = redis::pipe();
        for (name, value) in &taken {
            if let Some(value) = value {
                pipe.hset_nx(&k.bucket, name, value).ignore();
            }
        }
        if pipe.is_empty() {
            return Ok(());
        }
        let () = pipe
            .query_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        Ok(())
    }
}
