//! Reading a session back: its value, and its pieces or out-of-line
//! record where it has them, in as few round trips as the form allows.

use std::sync::atomic::Ordering;

use super::value::{Value, check_of, parse_value, piece_field};
use super::{Assembled, Compact, Kept, Keys, MARKER, MAX_PIECES, ValueRead};
use crate::clock::{Verdict, query_reads};
use crate::error::{Error, Result};
use crate::scripts::Reads;
use crate::session::id::SessionId;
use crate::session::layout::Stored;

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// How many pieces a read asks for with a value: as many as the last
    /// pieced record this process read had, so that records alike take one
    /// round trip.
    pub(super) fn pieces_to_ask(&self) -> usize {
        if self.largest_piece().is_some() {
            self.piece_guess.load(Ordering::Relaxed)
        } else {
            0
        }
    }

    /// Adds the read of `id`'s value and its first `guess` pieces to
    /// `pipe`: an `HGET`, or an `HMGET` where there are pieces to ask for,
    /// under short names where the namespace has them (a record whose
    /// pieces took long ones is read again, [`Compact::assemble`]).
    /// In a growing store the bucket's marker is asked for last, so a
    /// miss tells a bucket of the current shape from one split or merged
    /// away ([`crate::session::shape`]).
    pub(super) fn ask_value(&self, pipe: &mut redis::Pipeline, k: &Keys, guess: usize) {
        if guess == 0 && k.route.is_none() {
            pipe.hget(&k.bucket, &k.field);
        } else {
            let cmd = pipe.cmd("HMGET").arg(&k.bucket).arg(&k.field);
            for i in 1..=guess {
                cmd.arg(piece_field(&k.field, i, self.short_pieces()));
            }
            if k.route.is_some() {
                cmd.arg(MARKER);
            }
        }
    }

    /// The value and pieces a read [`Compact::ask_value`] added returned.
    /// A value of one record makes later reads ask for no pieces.
    /// In a growing store, a miss in a bucket without its marker is
    /// `Err(Error::Reshaped)`: the caller reads the shape; where there are
    /// marks ([`super::MOVED_MARKS_FORMAT`]), a hit there too.
    pub(super) fn value_read(
        &self,
        id: &SessionId,
        k: &Keys,
        reply: redis::Value,
        guess: usize,
    ) -> Result<ValueRead> {
        let (bytes, pieces): (Option<Vec<u8>>, _) = if guess == 0 && k.route.is_none() {
            (redis::from_redis_value(reply)?, Vec::new())
        } else {
            let mut read: Vec<Option<Vec<u8>>> = redis::from_redis_value(reply)?;
            if read.is_empty() {
                return Err(self.corrupt(id));
            }
            if k.route.is_some() {
                // Where there are marks, a field in a bucket without its
                // marker is a create's for a moment, no session.
                let marked = read.pop().flatten().is_some();
                if !marked && (self.marks() || read.first().is_some_and(Option::is_none)) {
                    return Err(self.reshaped(id));
                }
            }
            let pieces = read.split_off(1);
            (read.pop().flatten(), pieces)
        };
        if let Some(bytes) = &bytes
            && parse_value(bytes).is_some_and(|v| !matches!(v, Value::Pieced { .. }))
        {
            self.piece_guess.store(0, Ordering::Relaxed);
        }
        Ok((bytes, pieces))
    }

    /// [`Layout::load`] from the bucket `k` names, with how the record was
    /// kept; in a growing store `Err(Error::Reshaped)` where that bucket
    /// lacks its marker.
    pub(super) async fn load_at(&self, id: &SessionId, k: &Keys) -> Result<Option<(Stored, Kept)>> {
        let guess = self.pieces_to_ask();
        let mut pipe = redis::pipe();
        self.ask_value(&mut pipe, k, guess);
        let mut replies = query_reads(&mut pipe, &self.conn, &self.clock)
            .await
            .map_err(self.error(id))?;
        let reply = replies.pop().unwrap_or(redis::Value::Nil);
        let (bytes, pieces) = self.value_read(id, k, reply, guess)?;
        self.live_with(id, k, bytes, pieces, None).await
    }

    /// The session a value read for `id` holds, if it is live at `now`
    /// (`None`: judge by the clock estimate, asking the server when close).
    pub(super) async fn live(
        &self,
        id: &SessionId,
        bytes: Option<Vec<u8>>,
        now: Option<u64>,
    ) -> Result<Option<Stored>> {
        let k = self.keys(id);
        let kept = self.live_with(id, &k, bytes, Vec::new(), now).await?;
        Ok(kept.map(|(stored, _)| stored))
    }

    /// As [`Compact::live`], with the pieces read beside the value (the
    /// first ones it may have, in order; those it has but were not read
    /// are read then), and how the record was kept.
    pub(super) async fn live_with(
        &self,
        id: &SessionId,
        k: &Keys,
        bytes: Option<Vec<u8>>,
        pieces: Vec<Option<Vec<u8>>>,
        now: Option<u64>,
    ) -> Result<Option<(Stored, Kept)>> {
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        let value = parse_value(&bytes).ok_or_else(|| self.corrupt(id))?;
        let expires_at = value.expires_at();
        let live = match now {
            Some(now) => expires_at > now,
            None => match self.clock.judge(expires_at) {
                Verdict::Live => true,
                Verdict::Expired => false,
                Verdict::Ask => expires_at > self.server_now().await?,
            },
        };
        if !live {
            return Ok(None);
        }
        let need = self.assemble(id, value, pieces, self.short_pieces())?;
        self.read_rest_kept(id, k, need).await
    }

    /// The session a parsed value and the pieces read with it (in order,
    /// under short names if `short`) hold, or what is still to be read:
    /// pieces read under the other names than the value's are not its.
    pub(super) fn assemble(
        &self,
        id: &SessionId,
        value: Value,
        mut read: Vec<Option<Vec<u8>>>,
        short: bool,
    ) -> Result<Assembled> {
        Ok(match value {
            Value::Here { expires_at, record } => {
                Assembled::Done(Some(Stored { record, expires_at }), Kept::Whole)
            }
            Value::OutOfLine { .. } => Assembled::OutOfLine,
            Value::Pieced {
                expires_at,
                pieces,
                short: named_short,
                mut head,
                check,
            } => {
                self.piece_guess.store(pieces, Ordering::Relaxed);
                if read.len() < pieces || (pieces > 0 && named_short != short) {
                    return Ok(Assembled::Pieces {
                        want: pieces,
                        short: named_short,
                    });
                }
                read.truncate(pieces);
                for piece in read {
                    // The pieces are written with their value in one step,
                    // and removed with it or, by a plain delete, after it:
                    // one missing is damage, or a plain delete's put-back
                    // in flight (plain_delete.rs), never a live session's
                    // state.
                    let piece = piece.ok_or_else(|| Error::CorruptRecord {
                        location: self.buckets().location(id),
                        reason: "a piece of the record is missing from its bucket".into(),
                    })?;
                    head.extend_from_slice(&piece);
                }
                Assembled::Done(
                    Some(Stored {
                        record: self.checked_record(id, check, head)?,
                        expires_at,
                    }),
                    Kept::Pieces {
                        count: pieces,
                        short: named_short && pieces > 0,
                    },
                )
            }
        })
    }

    /// A record joined from its pieces, if its check holds: a piece spliced
    /// from another record, left by an earlier one or cut short is
    /// [`Error::CorruptRecord`] (a record of a format without checks is
    /// taken as it is).
    pub(super) fn checked_record(
        &self,
        id: &SessionId,
        check: Option<u32>,
        record: Vec<u8>,
    ) -> Result<Vec<u8>> {
        match check {
            Some(check) if check != check_of(&record) => Err(Error::CorruptRecord {
                location: self.buckets().location(id),
                reason: "the record's pieces do not match its check: a piece is missing, cut \
                         short, stale or another record's"
                    .into(),
            }),
            _ => Ok(record),
        }
    }

    /// The rest of a session whose value was read: its out-of-line
    /// record, read with the value in one transaction, or its pieces, read
    /// with the value in one `HMGET`, so a write that moves the record in
    /// or out of line or changes its pieces is never seen half done; read
    /// again should the value read now need something else. The expiry
    /// only moves forward while an id lives, so a session judged live
    /// before is live at this reading.
    /// In a growing store the marker is read too: a bucket split or merged
    /// away since is `Err(Error::Reshaped)`.
    pub(super) async fn read_rest(
        &self,
        id: &SessionId,
        k: &Keys,
        need: Assembled,
    ) -> Result<Option<Stored>> {
        let kept = self.read_rest_kept(id, k, need).await?;
        Ok(kept.map(|(stored, _)| stored))
    }

    /// [`Compact::read_rest`], with how the record was kept.
    pub(super) async fn read_rest_kept(
        &self,
        id: &SessionId,
        k: &Keys,
        mut need: Assembled,
    ) -> Result<Option<(Stored, Kept)>> {
        let routed = k.route.is_some();
        // The names the pieces read last were asked under.
        let mut named_short = false;
        for attempt in 0..3 {
            let (bytes, pieces) = match need {
                Assembled::Done(stored, kept) => return Ok(stored.map(|s| (s, kept))),
                Assembled::OutOfLine => {
                    let reads = Reads::default()
                        .hget(&k.bucket, &k.field)
                        .get(self.out_of_line_key(k))
                        .hexists(&k.bucket, MARKER.as_bytes());
                    let (bytes, side, marked): (Option<Vec<u8>>, Option<Vec<u8>>, bool) = reads
                        .invocation()
                        .invoke_async(&mut self.conn.clone())
                        .await
                        .map_err(self.error(id))?;
                    if routed && !marked && self.marks() {
                        return Err(self.reshaped(id));
                    }
                    let Some(bytes) = bytes else {
                        return if routed && !marked {
                            Err(self.reshaped(id))
                        } else {
                            Ok(None)
                        };
                    };
                    if let Some(Value::OutOfLine { expires_at }) = parse_value(&bytes) {
                        return Ok(
                            side.map(|record| (Stored { record, expires_at }, Kept::Elsewhere))
                        );
                    }
                    (bytes, Vec::new())
                }
                Assembled::Pieces { want, short } => {
                    // Asked again, it asks for every piece a record may
                    // have: one more write racing it cannot outgrow that.
                    let want = if attempt == 0 { want } else { MAX_PIECES };
                    named_short = short;
                    let mut cmd = redis::cmd("HMGET");
                    cmd.arg(&k.bucket).arg(&k.field);
                    for i in 1..=want {
                        cmd.arg(piece_field(&k.field, i, short));
                    }
                    if routed {
                        cmd.arg(MARKER);
                    }
                    let mut replies: Vec<Option<Vec<u8>>> = cmd
                        .query_async(&mut self.conn.clone())
                        .await
                        .map_err(self.error(id))?;
                    let marked = !routed || replies.pop().flatten().is_some();
                    if !marked && self.marks() {
                        return Err(self.reshaped(id));
                    }
                    let Some(bytes) = replies.first_mut().and_then(Option::take) else {
                        return if marked {
                            Ok(None)
                        } else {
                            Err(self.reshaped(id))
                        };
                    };
                    (bytes, replies.split_off(1))
                }
            };
            let value = parse_value(&bytes).ok_or_else(|| self.corrupt(id))?;
            need = self.assemble(id, value, pieces, named_short)?;
        }
        // Its record changed form three times while it was read.
        Err(Error::Contended { attempts: 3 })
    }
}
