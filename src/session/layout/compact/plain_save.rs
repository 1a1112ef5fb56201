//! Saves of a session a framework store read, with plain commands where
//! `plain.rs` says they are safe: one `HSETEX FXX` of the value and pieces,
//! named as the read found them, or `compact_resave.lua` on a server
//! without `HSETEX`.

use std::sync::atomic::Ordering;

use super::plain::{Kept, PlainWrites};
use super::value::{Form, piece_field};
use super::{Compact, MARKER};
use crate::clock::MARGIN;
use crate::error::Result;
use crate::scripts::COMPACT_RESAVE;
use crate::session::id::{InvalidIdExt, SessionId};
use crate::session::layout::Written;
use crate::ttl::Deadline;

/// What this process read of a session, for a plain write of it (the
/// framework stores remember it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Read {
    /// Its expiry then, unix seconds.
    pub(crate) expires_at: u64,
    /// How its record was kept.
    pub(crate) kept: Kept,
}

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// [`Compact::save`] of a session this process read (`read`, if it
    /// did): with plain commands where `plain.rs` says they are safe, else the
    /// full save. Returns what was written and, for a plain write, how
    /// the record is kept now (as it was).
    pub(crate) async fn save_read(
        &self,
        id: &SessionId,
        record: &[u8],
        expires_at: u64,
        read: Option<Read>,
    ) -> Result<(Written, Option<Kept>)> {
        Deadline::At(expires_at).check()?;
        id.check_width(self.buckets().id_width())?;
        if let (Some(plain), Some(read)) = (&self.plain, read)
            && self.save_plain(plain, id, record, expires_at, read).await?
        {
            return Ok((Written::Done, Some(read.kept)));
        }
        Ok((self.save(id, record, expires_at).await?, None))
    }

    /// The plain save: whether it wrote the session (else the full save
    /// decides).
    async fn save_plain(
        &self,
        plain: &PlainWrites,
        id: &SessionId,
        record: &[u8],
        expires_at: u64,
        read: Read,
    ) -> Result<bool> {
        let (form, count, short) = match (self.form_of(record), read.kept) {
            (form @ (Form::Integer(_) | Form::Inline), Kept::Whole) => (form, 0, false),
            (Form::Pieced { size, checked, .. }, Kept::Pieces { count, short }) => {
                let form = Form::Pieced {
                    size,
                    checked,
                    short,
                };
                (form, count, short)
            }
            _ => return Ok(false),
        };
        let payload = form.payload(record);
        let pieces = form.pieces(&payload);
        if pieces.len() != count {
            return Ok(false);
        }
        let (_, latest) = self.time_bounds().await?;
        let latest = (latest + MARGIN).ceil() as u64;
        // Both expiries beyond the estimate's reach of now; and no earlier
        // than the read's, so the group index's entry stays a lower bound.
        if read.expires_at <= latest || expires_at < read.expires_at {
            return Ok(false);
        }
        let value = form.value(&payload, expires_at);
        let k = self.keys(id);
        let mut pairs: Vec<(Vec<u8>, &[u8])> = Vec::with_capacity(2 + count);
        if k.route.is_some() && self.marks() {
            // The marker too, as it is: a mark (a bucket replaced since the
            // read) may hold the field of a create for a moment, and `FXX`
            // of the marker writes nothing there.
            pairs.push((MARKER.as_bytes().to_vec(), b"1"));
        }
        pairs.push((k.field.clone(), &value));
        for (i, piece) in pieces.iter().enumerate() {
            pairs.push((piece_field(&k.field, i + 1, short), piece));
        }
        let written: i64 = if plain.hsetex.load(Ordering::Relaxed) {
            let mut cmd = redis::cmd("HSETEX");
            cmd.arg(&k.bucket).arg("FXX").arg("FIELDS").arg(pairs.len());
            for (field, value) in &pairs {
                cmd.arg(field).arg(*value);
            }
            match cmd.query_async(&mut self.conn.clone()).await {
                Ok(written) => written,
                Err(e) if e.code() == Some("NOPERM") => {
                    tracing::warn!(
                        "HSETEX is refused: saves of sessions this process read go by a \
                         script from now on; grant hsetex (sessionpack::acl, role \
                         field-writes)"
                    );
                    plain.hsetex.store(false, Ordering::Relaxed);
                    return Ok(false);
                }
                Err(e) => return Err(self.error(id)(e)),
            }
        } else {
            let mut inv = COMPACT_RESAVE.prepare_invoke();
            inv.key(&k.bucket);
            for (field, value) in &pairs {
                inv.arg(field).arg(*value);
            }
            inv.invoke_async(&mut self.conn.clone())
                .await
                .map_err(self.error(id))?
        };
        if written == 1 {
            self.wrote(record);
        }
        Ok(written == 1)
    }
}
