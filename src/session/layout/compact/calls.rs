//! How a call reaches the server: script invocations, errors, routing in
//! a growing store, and the server's clock.

use super::grown::Grown;
use super::{Compact, Form, Keys, REROUTES, is_reshaped};
use crate::clock::MARGIN;
use crate::error::{Error, Result};
use crate::scripts::{self, COMPACT_INSERT};
use crate::session::id::SessionId;
use crate::session::layout::Layout;
use crate::session::record;
use crate::ttl::Deadline;
use redis::{Script, ScriptInvocation};
use std::time::Instant;

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// A script call on `id`'s bucket: bucket, index and out-of-line keys,
    /// then the viewed chunk keys (a script removing the session removes
    /// its chunk fields); field and member.
    pub(super) fn invocation<'a>(&self, script: &'a Script, k: &Keys) -> ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.key(&k.bucket)
            .key(&k.index)
            .key(self.out_of_line_key(k));
        for key in self.chunk_keys(k) {
            inv.key(key);
        }
        inv.arg(&k.field).arg(k.member);
        inv
    }

    /// A short script's call on `id`'s bucket (`compact_rewrite.lua`,
    /// `compact_add.lua`): bucket and index keys only, since it touches no
    /// other; field and member.
    pub(super) fn short_invocation<'a>(
        &self,
        script: &'a Script,
        k: &Keys,
    ) -> ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.key(&k.bucket).key(&k.index);
        inv.arg(&k.field).arg(k.member);
        inv
    }

    /// Arguments saying which record a conditional write expects: its
    /// identity in decimal when it is identity-only (it may be stored in
    /// the integer form), and its bytes.
    pub(super) fn expected_args(inv: &mut ScriptInvocation<'_>, expected: Option<&[u8]>) {
        let ident = match expected.and_then(record::int_only) {
            Some(identity) => identity.to_string(),
            None => String::new(),
        };
        inv.arg(scripts::flag(expected.is_some()))
            .arg(ident)
            .arg(expected.unwrap_or_default());
    }

    /// An insert script call; `indexed_at`, for a store with a user index,
    /// is when the session's entry was written.
    pub(super) fn insert_invocation(
        &self,
        k: &Keys,
        record: &[u8],
        expiry: Deadline,
        indexed_at: Option<u64>,
    ) -> ScriptInvocation<'static> {
        let form = self.form_of(record);
        let mut inv = self.script(&COMPACT_INSERT).prepare_invoke();
        inv.key(&k.bucket).key(&k.index);
        // The out-of-line key is named only when it will be written.
        if form == Form::OutOfLine {
            inv.key(self.out_of_line_key(k));
        }
        let (mode, secs) = match expiry {
            Deadline::In(secs) => ("in", secs),
            Deadline::At(at) => ("at", at),
        };
        inv.arg(&k.field)
            .arg(k.member)
            .arg(form.code())
            .arg(&*form.payload(record))
            .arg(mode)
            .arg(secs);
        if let (Some(users), Some(at)) = (&self.users, indexed_at) {
            inv.arg(at).arg(users.config().grace_secs);
        }
        inv
    }

    pub(super) fn error<'a>(
        &'a self,
        id: &'a SessionId,
    ) -> impl FnOnce(redis::RedisError) -> Error + 'a {
        move |e| Error::from_redis(e, || self.buckets().location(id))
    }

    pub(super) fn corrupt(&self, id: &SessionId) -> Error {
        Error::CorruptRecord {
            location: self.buckets().location(id),
            reason: "the bucket's value is in neither the integer nor the binary form".into(),
        }
    }

    /// A script call on `id`'s bucket, `build` making it for the keys the
    /// id is routed to. In a growing store the call follows a bucket split
    /// or merged under it, and a write that fills its bucket splits it
    /// before this returns ([`growth`]).
    pub(super) async fn call<T: redis::FromRedisValue>(
        &self,
        id: &SessionId,
        build: impl Fn(&Keys) -> ScriptInvocation<'static>,
    ) -> Result<T> {
        self.routed(id, build, true)
            .await?
            .ok_or_else(|| self.reshaped(id))
    }

    /// [`Compact::call`] for a script that acts on a session already
    /// there (a save, a touch, a removal): where the shape routes `id` to
    /// a current bucket that was never marked, no session can be in it, so
    /// the reply is `T::default()` (none, 0: no session) and nothing is
    /// written, not even the marker a create would claim the bucket with.
    pub(super) async fn call_on_session<T: redis::FromRedisValue + Default>(
        &self,
        id: &SessionId,
        build: impl Fn(&Keys) -> ScriptInvocation<'static>,
    ) -> Result<T> {
        Ok(self.routed(id, build, false).await?.unwrap_or_default())
    }

    /// A script call on `id`'s bucket, following it through splits and
    /// merges; `None` where `claim` is false and the bucket the shape
    /// routes to is current but unmarked.
    pub(super) async fn routed<T: redis::FromRedisValue>(
        &self,
        id: &SessionId,
        build: impl Fn(&Keys) -> ScriptInvocation<'static>,
        claim: bool,
    ) -> Result<Option<T>> {
        if self.growth.is_none() {
            return build(&self.keys(id))
                .invoke_async(&mut self.conn.clone())
                .await
                .map(Some)
                .map_err(self.error(id));
        }
        for _ in 0..REROUTES {
            let k = self.keys(id);
            match build(&k)
                .invoke_async::<Grown<T>>(&mut self.conn.clone())
                .await
            {
                Ok(Grown { reply, fields }) => {
                    self.split_if_full(&k, fields).await;
                    return Ok(Some(reply));
                }
                Err(e) if is_reshaped(&e) => {
                    if !self.reroute(id, &k, claim).await? {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(self.error(id)(e)),
            }
        }
        Err(self.reshaped(id))
    }

    pub(super) fn reshaped(&self, id: &SessionId) -> Error {
        Error::Reshaped {
            location: self.location(id),
            attempts: REROUTES,
        }
    }

    /// The server's time in whole seconds, read now.
    pub(super) async fn server_now(&self) -> Result<u64> {
        Ok(self.read_clock().await?.0)
    }

    /// A `TIME` call, recorded in the estimate: the reply's whole seconds
    /// and the interval the server's time lies in now, however wide.
    pub(super) async fn read_clock(&self) -> Result<(u64, (f64, f64))> {
        let sent = Instant::now();
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await?;
        self.clock.record(secs, micros, sent);
        Ok((secs, crate::clock::interval(secs, micros, sent)))
    }

    /// The interval the server's time lies in now, by the estimate,
    /// refreshed with a `TIME` call when stale. Where three replies in a
    /// row come too late for the estimate (a loaded server or host), the
    /// last one's wider interval is used: it still holds, and the calls
    /// built on it only ask the server more often.
    pub(super) async fn time_bounds(&self) -> Result<(f64, f64)> {
        for _ in 0..2 {
            if let Some(bounds) = self.clock.bounds() {
                return Ok(bounds);
            }
            self.read_clock().await?;
        }
        match self.clock.bounds() {
            Some(bounds) => Ok(bounds),
            None => Ok(self.read_clock().await?.1),
        }
    }

    /// The expiry an insert writes, decided by the clock estimate where it
    /// can: `Some(Ok(at))`, `Some(Err(()))` for an absolute expiry surely
    /// past, `None` when too close to now to call (the insert script then
    /// asks the server). A lifetime counts from the latest the server's
    /// time may be, so the session lives at least that long.
    pub(super) async fn decide_expiry(&self, expiry: Deadline) -> Result<Option<Result<u64, ()>>> {
        let (earliest, latest) = self.time_bounds().await?;
        Ok(match expiry {
            Deadline::In(secs) => {
                let at = latest.ceil() as u64 + secs;
                (at <= crate::ttl::MAX_EXPIRES_AT).then_some(Ok(at))
            }
            Deadline::At(at) if (at as f64) <= earliest - MARGIN => Some(Err(())),
            Deadline::At(at) if (at as f64) > latest + MARGIN => Some(Ok(at)),
            Deadline::At(_) => None,
        })
    }
}
