//! Deleting a session: its field, its pieces and its out-of-line key.
//! On a server with `HGETDEL`, plain commands that take the value and
//! then what it names (`plain_delete.rs`). Elsewhere, plain commands
//! where the process saw the record, a script where it did not; in a
//! namespace whose pieces may have short names, which another session
//! may take once this one is gone, only the value tells whose they are:
//! a record in pieces, seen or not, goes by a script that reads it.

use super::value::{piece_field, pieces_of_len};
use super::{Compact, Kept, Keys, MARKER, MAX_PIECED_RECORD, MAX_PIECES, REROUTES};
use crate::error::Result;
use crate::scripts::{self, COMPACT_DELETE, COMPACT_DROP, COMPACT_UNSET};
use crate::session::id::{InvalidIdExt, SessionId};

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Removes a session, live or expired, with plain commands, as a
    /// tower-sessions `delete` does. `seen_len` is the length of the
    /// record the caller saw moments before, if it did: one kept in its
    /// bucket then goes with one `HDEL` of its field and its pieces. Any
    /// other goes with an `HDEL` of its field and its first piece's and a
    /// `DEL` of its out-of-line record's key, and where the first piece
    /// was there, an `HDEL` of the others: whoever deletes a session leaves
    /// none of its pieces. Pieces a
    /// seen record had beyond those seen (another process made it longer
    /// meanwhile) are left to the sweeper, which removes pieces no value
    /// names; a record key, to its own expiry, the
    /// session's. Where the store keeps viewed items, their `HDEL`s go in
    /// the same `MULTI`/`EXEC`. The index entry stays a lower bound; the
    /// sweeper rescores it. Returns whether there was a field to remove.
    /// On a server with `HGETDEL`, a delete takes the value and then what
    /// it names (`plain_delete.rs`), seen or not.
    pub async fn delete(&self, id: &SessionId, seen_len: Option<usize>) -> Result<bool> {
        self.delete_seen(id, seen_len, None).await
    }

    /// [`Compact::delete`], told also how the record was kept when the
    /// caller read it, if it knows: short piece names it saw go with the
    /// value in one `HGETDEL`.
    pub(crate) async fn delete_seen(
        &self,
        id: &SessionId,
        seen_len: Option<usize>,
        kept: Option<Kept>,
    ) -> Result<bool> {
        id.check_width(self.buckets().id_width())?;
        for _ in 0..REROUTES {
            let k = self.keys(id);
            match self.delete_at(id, &k, seen_len, kept).await? {
                Some(removed) => return Ok(removed),
                None if self.reroute(id, &k, false).await? => {}
                None => return Ok(false),
            }
        }
        Err(self.reshaped(id))
    }

    /// [`Compact::delete`] from the bucket `k` names; `None` where nothing
    /// was removed from a growing store's bucket that lacks its marker,
    /// which may have been split or merged away.
    pub(super) async fn delete_at(
        &self,
        id: &SessionId,
        k: &Keys,
        seen_len: Option<usize>,
        kept: Option<Kept>,
    ) -> Result<Option<bool>> {
        if self.plain_deletes().is_some()
            && let Ok(done) = self.delete_plain(id, k, kept).await?
        {
            return Ok(done);
        }
        if self.short_pieces() {
            return match seen_len.filter(|&len| self.fits(len) && self.pieces_of(len) == 0) {
                Some(_) => {
                    let (removed, marked) = self
                        .hdel_marked(id, k, std::slice::from_ref(&k.field), false)
                        .await?;
                    Ok((removed > 0 || marked).then_some(removed > 0))
                }
                None => self.drop_by_value(id, k).await,
            };
        }
        let Some(len) = seen_len.filter(|&len| self.fits(len)) else {
            return self.drop_unseen(id, k).await;
        };
        let mut fields = vec![k.field.clone()];
        fields.extend(self.piece_fields(&k.field, len));
        let (removed, marked) = self.hdel_marked(id, k, &fields, false).await?;
        Ok((removed > 0 || marked).then_some(removed > 0))
    }

    /// `HDEL` of `fields` from `k`'s bucket, with the `HDEL`s of the
    /// session's viewed items and, if `record_key`, the `DEL` of its
    /// out-of-line record's key. Plain commands in one round trip where
    /// the store keeps no viewed items: a fixed store's bucket is always
    /// where the shape says, and a growing store's that held the field is
    /// current (a split or merge removes the buckets it replaces whole).
    /// Otherwise, and after plain commands that removed nothing from a
    /// growing store's bucket, which may have moved, one script
    /// (`compact_drop.lua`) that reads the bucket's marker in the same
    /// step. Returns the fields removed and whether the bucket holds its
    /// marker (a fixed store's always does).
    pub(super) async fn hdel_marked(
        &self,
        id: &SessionId,
        k: &Keys,
        fields: &[Vec<u8>],
        record_key: bool,
    ) -> Result<(i64, bool)> {
        let viewed = self.chunk_keys(k);
        if viewed.is_empty() {
            let (removed, marked) = self.hdel_plain(id, k, fields, record_key).await?;
            if k.route.is_none() || (removed > 0 && marked) {
                return Ok((removed, true));
            }
        }
        let mut inv = COMPACT_DROP.prepare_invoke();
        inv.key(&k.bucket);
        if record_key {
            inv.key(self.out_of_line_key(k));
        }
        for key in &viewed {
            inv.key(key);
        }
        inv.arg(scripts::flag(record_key)).arg(&k.field);
        for field in fields {
            inv.arg(field);
        }
        let (removed, marked): (i64, bool) = inv
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        if !marked && self.marks() {
            // A mark's fields are a create's for a moment, no session's.
            return Ok((0, false));
        }
        Ok((removed, marked || k.route.is_none()))
    }

    /// `HDEL` of `fields` from `k`'s bucket and, if `record_key`, the `DEL`
    /// of the session's out-of-line record's key, as plain commands in one
    /// round trip: the fields removed, and whether the bucket holds its
    /// marker after. Only where there are marks is the marker asked for
    /// (fields a bucket without it held were a create's for a moment, and
    /// a caller that removed some goes on as if it removed none); else it
    /// says true. (Read after the `HDEL`, the marker could tell wrong only
    /// where a merge wrote the bucket anew in between, and the mark held
    /// the field of a session created twice under one id.)
    pub(super) async fn hdel_plain(
        &self,
        id: &SessionId,
        k: &Keys,
        fields: &[Vec<u8>],
        record_key: bool,
    ) -> Result<(i64, bool)> {
        let mut pipe = redis::pipe();
        pipe.hdel(&k.bucket, fields);
        let ask = k.route.is_some() && self.marks();
        if ask {
            pipe.hexists(&k.bucket, MARKER);
        }
        if record_key {
            pipe.del(self.out_of_line_key(k)).ignore();
        }
        if ask {
            pipe.query_async::<(i64, bool)>(&mut self.conn.clone())
                .await
                .map_err(self.error(id))
        } else {
            pipe.query_async::<(i64,)>(&mut self.conn.clone())
                .await
                .map(|(n,)| (n, true))
                .map_err(self.error(id))
        }
    }

    /// [`Compact::delete_at`] of a session whose record may be in pieces,
    /// in a namespace whose pieces may have short names: a script reads
    /// the value and removes the field, the pieces it names and its
    /// out-of-line record's key: `compact_unset.lua`, two commands, where
    /// the store keeps no viewed items and the field is there; else
    /// `compact_delete.lua`, which removes its viewed items too and reads
    /// the bucket's marker in the same step.
    pub(super) async fn drop_by_value(&self, id: &SessionId, k: &Keys) -> Result<Option<bool>> {
        // The common case first, where the store keeps no viewed items: a
        // field there, removed by a script of two commands.
        if self.viewed_chunks() == 0 {
            let mut inv = COMPACT_UNSET.prepare_invoke();
            inv.key(&k.bucket)
                .key(self.out_of_line_key(k))
                .arg(&k.field)
                .arg(self.route_mode(k));
            let removed: i64 = inv
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(self.error(id))?;
            if removed > 0 {
                return Ok(Some(true));
            }
        }
        let mut inv = COMPACT_DELETE.prepare_invoke();
        inv.key(&k.bucket).key(self.out_of_line_key(k));
        for key in self.chunk_keys(k) {
            inv.key(key);
        }
        inv.arg(&k.field);
        let (removed, marked): (i64, bool) = inv
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(self.error(id))?;
        if !marked && self.marks() {
            // A mark's fields are a create's for a moment, no session's.
            return Ok(None);
        }
        let marked = marked || k.route.is_none();
        Ok((removed > 0 || marked).then_some(removed > 0))
    }

    /// [`Compact::delete_at`] of a session this process has not read: an
    /// `HDEL` of its field and its first piece's, and a `DEL` of its
    /// out-of-line record's key, in one round trip ([`Compact::hdel_marked`]);
    /// where both fields were there, the record was in
    /// pieces, and an `HDEL` of every other piece field a record can have
    /// follows. So a record kept whole costs one field more than a seen
    /// one, and whoever deletes a session leaves none of its pieces.
    pub(super) async fn drop_unseen(&self, id: &SessionId, k: &Keys) -> Result<Option<bool>> {
        let most = self.largest_piece().map_or(0, |size| {
            pieces_of_len(MAX_PIECED_RECORD, size).min(MAX_PIECES)
        });
        let mut fields = vec![k.field.clone()];
        if most > 0 {
            fields.push(piece_field(&k.field, 1, false));
        }
        let (removed, marked) = self.hdel_marked(id, k, &fields, true).await?;
        if most > 1 && removed == 2 {
            let rest: Vec<Vec<u8>> = (2..=most)
                .map(|i| piece_field(&k.field, i, false))
                .collect();
            let _: i64 = redis::cmd("HDEL")
                .arg(&k.bucket)
                .arg(rest)
                .query_async(&mut self.conn.clone())
                .await
                .map_err(self.error(id))?;
        }
        Ok((removed > 0 || marked).then_some(removed > 0))
    }
}
