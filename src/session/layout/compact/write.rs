//! Writing a session: inserts that check the id is free, saves of live
//! sessions only, rewrites into another form, and touches of the expiry.

use super::value::Form;
use super::{Compact, Kept, REROUTES, is_reshaped};
use crate::clock::MARGIN;
use crate::error::Result;
use crate::scripts::{self, COMPACT_ADD, COMPACT_REWRITE, COMPACT_SAVE, COMPACT_TOUCH};
use crate::session::id::{InvalidIdExt, SessionId};
use crate::session::layout::{Inserted, Layout, Written};
use crate::ttl::Deadline;

/// Where the user index entry of a session being inserted is.
#[derive(Clone, Copy)]
pub(super) enum IndexEntry<'a> {
    /// No index holds the session.
    None,
    /// The caller wrote it at this time (unix seconds, by its estimate of
    /// the server's clock).
    WrittenAt(u64),
    /// The insert's script writes it, before the session: the index
    /// bucket's key and the entry's value.
    Together { key: &'a str, value: &'a [u8] },
}

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// An insert of a record kept in its bucket (whole in its value, or in
    /// pieces), with the expiry decided: plain commands where
    /// `plain_create.rs` makes them, else (and where they wrote nothing) one
    /// short script
    /// (`compact_add.lua`; in a growing store after the route's check;
    /// in a store with a user index, `entry` says where the session's
    /// entry is: written at a time, and the script refuses a late session
    /// or a revoked id as `compact_insert.lua` does, or written by the
    /// script itself, on a server that holds both keys).
    /// The value goes first, so a taken id writes nothing, and a piece an
    /// earlier session of the id left behind is overwritten before anyone
    /// can read it. A script rather than a `MULTI`/`EXEC`: one command, so
    /// a store user needs no transaction commands, a cluster client never
    /// resends half a transaction to the node a slot moved to, and a store
    /// waiting for replicas waits once. A taken field is this call's own
    /// session (sent twice) or a taken id ([`Compact::again`]).
    pub(super) async fn insert_added(
        &self,
        id: &SessionId,
        form: Form,
        record: &[u8],
        at: u64,
        entry: IndexEntry<'_>,
    ) -> Result<(Inserted, Option<Kept>)> {
        let payload = form.payload(record);
        let (entry_key, (arg6, arg7)) = match (&self.users, entry) {
            (Some(users), IndexEntry::WrittenAt(at)) => (
                None,
                (
                    at.to_string().into_bytes(),
                    users.config().grace_secs.to_string().into_bytes(),
                ),
            ),
            (Some(_), IndexEntry::Together { key, value }) => {
                (Some(key), (id.as_bytes().to_vec(), value.to_vec()))
            }
            _ => (None, (Vec::new(), Vec::new())),
        };
        let value = form.value(&payload, at);
        let pieces = form.pieces(&payload);
        if matches!(entry, IndexEntry::None) {
            let short = matches!(form, Form::Pieced { short: true, .. });
            if let Some(true) = self.create_plain(id, &value, &pieces, short, at).await? {
                // Named as written: what a plain save or delete of it names.
                let kept = match form {
                    Form::Pieced { .. } => Kept::Pieces {
                        count: pieces.len(),
                        short: short && !pieces.is_empty(),
                    },
                    _ => Kept::Whole,
                };
                return Ok((Inserted::Created { expires_at: at }, Some(kept)));
            }
        }
        let code: i64 = self
            .call(id, |k| {
                let mut inv = self.short_invocation(self.script(&COMPACT_ADD), k);
                if let Some(key) = entry_key {
                    inv.key(key);
                }
                inv.arg(&value)
                    .arg(at)
                    .arg(self.route_mode(k))
                    .arg(&arg6)
                    .arg(&arg7);
                for piece in &pieces {
                    inv.arg(*piece);
                }
                inv
            })
            .await?;
        // The script may have named the pieces otherwise: not known here.
        let inserted = match code {
            0 => self.again(id, record).await?,
            -2 => Inserted::Late,
            _ => Inserted::Created { expires_at: at },
        };
        Ok((inserted, None))
    }

    /// [`Layout::insert`] and [`Layout::insert_new`].
    pub(super) async fn insert_checked(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> Result<(Inserted, Option<Kept>)> {
        let expiry = expiry.check()?;
        id.check_width(self.buckets().id_width())?;
        if let Some(users) = &self.users
            && let Some(head) = self.owner_head(id, record)?
        {
            let inserted = self
                .insert_indexed(users, head, id, record, expiry, None)
                .await?;
            return Ok((inserted, None));
        }
        self.insert_stored(id, record, expiry, None).await
    }

    /// [`Layout::insert_new`], with how the record is kept where a plain
    /// create wrote it (for a plain save or delete of it later).
    #[cfg(any(
        feature = "tower-sessions",
        feature = "tower-sessions-014",
        feature = "actix-session"
    ))]
    pub(crate) async fn insert_new_kept(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> Result<(Inserted, Option<Kept>)> {
        let (inserted, kept) = self.insert_checked(id, record, expiry).await?;
        Ok((self.wrote_if_created(record, inserted), kept))
    }

    /// An insert once the expiry is checked (and, with a user index, once
    /// the session's entry was written at `indexed_at`): the short script
    /// for a record kept in its bucket when this process can decide its
    /// expiry, else the full one.
    pub(super) async fn insert_stored(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
        indexed_at: Option<u64>,
    ) -> Result<(Inserted, Option<Kept>)> {
        let entry = indexed_at.map_or(IndexEntry::None, IndexEntry::WrittenAt);
        if let Some(inserted) = self.insert_short(id, record, expiry, entry).await? {
            return Ok(inserted);
        }
        let code = self
            .call(id, |k| {
                self.insert_invocation(k, record, expiry, indexed_at)
            })
            .await?;
        Ok((Inserted::from_code(code), None))
    }

    /// The short script's insert ([`Compact::insert_added`]) where it can
    /// decide: a record kept in its bucket, and an expiry the clock
    /// estimate can call (one surely past writes nothing). `None` where
    /// the full insert script must.
    pub(super) async fn insert_short(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
        entry: IndexEntry<'_>,
    ) -> Result<Option<(Inserted, Option<Kept>)>> {
        let form = self.form_of(record);
        if form == Form::OutOfLine {
            return Ok(None);
        }
        match self.decide_expiry(expiry).await? {
            Some(Ok(at)) => self
                .insert_added(id, form, record, at, entry)
                .await
                .map(Some),
            Some(Err(())) => Ok(Some((Inserted::AlreadyExpired, None))),
            None => Ok(None),
        }
    }

    /// After an `HSETNX` that found the field: the same live record there
    /// means this insert was sent twice (a reply lost, the call sent
    /// again), and it is done; anything else is a taken id.
    pub(super) async fn again(&self, id: &SessionId, record: &[u8]) -> Result<Inserted> {
        Ok(match self.load(id).await? {
            Some(stored) if stored.record == record => Inserted::Created {
                expires_at: stored.expires_at,
            },
            _ => Inserted::IdTaken,
        })
    }

    /// Writes a live session's record and expiry together, as a
    /// tower-sessions `save` does: one script that reads the stored value
    /// and writes the new one (`HGET`, `HSET`; `ZADD LT` only when the
    /// expiry moves earlier). A session that is gone or expired by the
    /// server's clock is left alone ([`Written::Missing`]): a save never
    /// revives one, whatever this process saw of it before. The script
    /// asks the server's clock (`TIME`) only when the stored or the new
    /// expiry is within the clock estimate's reach of now, so a session a
    /// load returned as live can be extended up to its last second. An
    /// expiry already past removes the session.
    pub async fn save(&self, id: &SessionId, record: &[u8], expires_at: u64) -> Result<Written> {
        Deadline::At(expires_at).check()?;
        id.check_width(self.buckets().id_width())?;
        let (_, latest) = self.time_bounds().await?;
        let latest = (latest + MARGIN).ceil() as u64;
        let form = self.form_of(record);
        let payload = form.payload(record);
        let value = form.value(&payload, expires_at);
        let pieces = form.pieces(&payload);
        if form != Form::OutOfLine
            && let Some(code) = self
                .rewrite(id, &value, &pieces, expires_at, latest)
                .await?
        {
            return Ok(self.wrote_if_done(record, Written::from_code(code.min(1))));
        }
        let side: &[u8] = if form == Form::OutOfLine { record } else { &[] };
        let code = self
            .call_on_session(id, |k| {
                let mut inv = self.invocation(self.script(&COMPACT_SAVE), k);
                inv.arg(&value).arg(expires_at).arg(side).arg(latest);
                for piece in &pieces {
                    inv.arg(*piece);
                }
                inv
            })
            .await?;
        Ok(self.wrote_if_done(record, Written::from_code(code)))
    }

    /// The common case of a save (`value` and its `pieces`, a record kept
    /// in its bucket) or of a touch (`value` empty), in the short script
    /// with no helpers (`compact_rewrite.lua`): the new expiry if written,
    /// 0 if there is no session, `None` where the full script must decide
    /// (and for a store whose fields the server expires).
    pub(super) async fn rewrite(
        &self,
        id: &SessionId,
        value: &[u8],
        pieces: &[&[u8]],
        expires_at: u64,
        latest: u64,
    ) -> Result<Option<i64>> {
        if self.server_expiry || self.viewed_chunks() > 0 {
            return Ok(None);
        }
        for _ in 0..REROUTES {
            let k = self.keys(id);
            let mut inv = self.short_invocation(&COMPACT_REWRITE, &k);
            inv.arg(value).arg(expires_at).arg(latest);
            inv.arg(self.route_mode(&k));
            for piece in pieces {
                inv.arg(*piece);
            }
            match inv.invoke_async::<i64>(&mut self.conn.clone()).await {
                Ok(code) => return Ok((code != scripts::SLOW).then_some(code)),
                // A current bucket never marked holds no session.
                Err(e) if is_reshaped(&e) => {
                    if !self.reroute(id, &k, false).await? {
                        return Ok(Some(0));
                    }
                }
                Err(e) => return Err(self.error(id)(e)),
            }
        }
        Err(self.reshaped(id))
    }

    /// Moves a live session's expiry to `expires_at` (unix seconds), its
    /// record left as it is; `None` if there is no live session. As
    /// [`Layout::touch`], with the expiry given, and in the short script
    /// where the record is kept in its bucket (whole or in pieces) and the
    /// expiry is not near now; after a few touches in a row that script
    /// handed on (records out of line), the full script goes first.
    pub async fn touch_until(&self, id: &SessionId, expires_at: u64) -> Result<Option<u64>> {
        Deadline::At(expires_at).check()?;
        id.check_width(self.buckets().id_width())?;
        let (_, latest) = self.time_bounds().await?;
        let latest = (latest + MARGIN).ceil() as u64;
        // After a run of records the short script handed on, the full
        // script goes first, rather than two scripts a touch.
        if self.touches.short_first() {
            match self.rewrite(id, &[], &[], expires_at, latest).await? {
                Some(0) => return Ok(None),
                Some(expiry) => {
                    self.touches.taken();
                    return Ok(Some(expiry as u64));
                }
                None => {}
            }
        }
        self.touches.handed_on();
        self.call_on_session(id, |k| {
            let mut inv = self.invocation(self.script(&COMPACT_TOUCH), k);
            inv.arg(1).arg(expires_at);
            inv
        })
        .await
    }
}
