//! The [`Layout`] calls of the compact layout.

use super::{Assembled, Compact, Keys, parse_value};
use crate::error::{Error, Result};
use crate::scripts::{
    COMPACT_INSERT, COMPACT_REMOVE, COMPACT_REPLACE, COMPACT_TOUCH, PIPELINE_CHUNK,
};
use crate::session::id::{IdWidth, InvalidIdExt, SessionId};
use crate::session::layout::{Inserted, Layout, Stored, Written, check_batch};
use crate::session::record;
use crate::ttl::{Deadline, check_ttl};
use std::time::Instant;

impl<C> Layout for Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    fn name(&self) -> &'static str {
        "compact"
    }

    fn location(&self, id: &SessionId) -> String {
        self.buckets().location(id)
    }

    async fn pack(&self, data: Vec<u8>) -> Vec<u8> {
        self.packer.pack(&self.conn, data).await
    }

    async fn unpack<'a>(
        &'a self,
        id: &'a SessionId,
        data: &'a [u8],
    ) -> Result<std::borrow::Cow<'a, [u8]>> {
        self.packer
            .unpack(&self.conn, data, || self.location(id))
            .await
    }

    fn id_width(&self) -> IdWidth {
        self.buckets().id_width()
    }

    fn stamps_ids(&self) -> bool {
        self.users.is_some()
    }

    async fn new_id(&self) -> Result<SessionId> {
        if self.users.is_none() {
            return SessionId::generate_with(self.id_width());
        }
        SessionId::generate_stamped(self.id_width(), self.stamp_now().await?)
    }

    async fn insert(&self, id: &SessionId, record: &[u8], expiry: Deadline) -> Result<Inserted> {
        let (inserted, _) = self.insert_checked(id, record, expiry).await?;
        Ok(self.wrote_if_created(record, inserted))
    }

    async fn insert_new(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> Result<Inserted> {
        let (inserted, _) = self.insert_checked(id, record, expiry).await?;
        Ok(self.wrote_if_created(record, inserted))
    }

    async fn insert_successor(
        &self,
        from: &SessionId,
        prev: Option<&SessionId>,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> Result<Inserted> {
        if let Some(users) = &self.users
            && let Some(head) = self.owner_head(id, record)?
        {
            let expiry = expiry.check()?;
            id.check_width(self.buckets().id_width())?;
            let inserted = self
                .insert_indexed(users, head, id, record, expiry, Some((from, prev)))
                .await?;
            return Ok(self.wrote_if_created(record, inserted));
        }
        self.insert(id, record, expiry).await
    }

    async fn load(&self, id: &SessionId) -> Result<Option<Stored>> {
        Ok(self.load_read(id).await?.map(|(stored, _)| stored))
    }

    async fn touch(&self, id: &SessionId, ttl_secs: u64) -> Result<Option<u64>> {
        let ttl = check_ttl(ttl_secs)?;
        self.call_on_session(id, |k| {
            let mut inv = self.invocation(self.script(&COMPACT_TOUCH), k);
            inv.arg(ttl);
            inv
        })
        .await
    }

    async fn replace(
        &self,
        id: &SessionId,
        record: &[u8],
        expected: Option<&[u8]>,
    ) -> Result<Written> {
        let form = self.form_of(record);
        let payload = form.payload(record);
        let invocation = |k: &Keys, owner: Option<&[u8]>| {
            let mut inv = self.invocation(self.script(&COMPACT_REPLACE), k);
            inv.arg(form.code()).arg(&*payload);
            Self::expected_args(&mut inv, expected);
            if let Some(head) = owner {
                let ident = record::int_only(head).map_or(String::new(), |n| n.to_string());
                inv.arg(ident).arg(head);
            }
            inv
        };
        // With a user index, a write that gives the session another owner
        // is refused until that owner's entry is written (first, as for a
        // create); a write that keeps the owner costs nothing more.
        let owner = match &self.users {
            Some(_) => self.owner_head(id, record)?,
            None => None,
        };
        if let Some(head) = owner {
            let code: i64 = self
                .call_on_session(id, |k| invocation(k, Some(head)))
                .await?;
            if code != -3 {
                return Ok(self.wrote_if_done(record, Written::from_code(code)));
            }
            self.ensure_entry(head, id).await?;
        }
        let code = self.call_on_session(id, |k| invocation(k, None)).await?;
        Ok(self.wrote_if_done(record, Written::from_code(code)))
    }

    async fn remove(&self, id: &SessionId, expected: Option<&Stored>) -> Result<Written> {
        let code = self
            .call_on_session(id, |k| {
                let mut inv = self.invocation(self.script(&COMPACT_REMOVE), k);
                Self::expected_args(&mut inv, expected.map(|e| e.record.as_slice()));
                inv.arg(expected.map_or(0, |e| e.expires_at));
                inv
            })
            .await?;
        Ok(Written::from_code(code))
    }

    async fn insert_many(
        &self,
        items: &[(SessionId, Vec<u8>)],
        ttl_secs: u64,
    ) -> Result<Vec<Inserted>> {
        check_batch(items, ttl_secs, self.buckets().id_width())?;
        if self.growth.is_some() {
            let inserted = self.insert_many_growing(items, ttl_secs).await?;
            for ((_, record), i) in items.iter().zip(&inserted) {
                self.wrote_if_created(record, *i);
            }
            return Ok(inserted);
        }
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(PIPELINE_CHUNK) {
            // Index entries first, as for one insert.
            let indexed_at = self.index_add_many(chunk).await?;
            let invocations: Vec<_> = chunk
                .iter()
                .map(|(id, record)| {
                    self.insert_invocation(
                        &self.keys(id),
                        record,
                        Deadline::In(ttl_secs),
                        indexed_at,
                    )
                })
                .collect();
            let ids: Vec<_> = chunk.iter().map(|(id, _)| *id).collect();
            let codes: Vec<i64> = crate::session::layout::pipeline::pipelined(
                &self.conn,
                self,
                &ids,
                &invocations,
                self.script(&COMPACT_INSERT),
            )
            .await?;
            for ((_, record), code) in chunk.iter().zip(codes) {
                out.push(self.wrote_if_created(record, Inserted::from_code(code)));
            }
        }
        Ok(out)
    }

    async fn carry_over(&self, from: &SessionId, to: &SessionId) -> Result<()> {
        self.copy_viewed(from, to).await
    }

    async fn load_many(&self, ids: &[SessionId]) -> Result<Vec<Option<Stored>>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(PIPELINE_CHUNK) {
            let guess = self.pieces_to_ask();
            let mut pipe = redis::pipe();
            let keys: Vec<Keys> = chunk.iter().map(|id| self.keys(id)).collect();
            for k in &keys {
                self.ask_value(&mut pipe, k, guess);
            }
            pipe.cmd("TIME");
            let sent = Instant::now();
            let mut replies: Vec<redis::Value> =
                pipe.query_async(&mut self.conn.clone()).await.map_err(
                    crate::session::layout::pipeline::pipeline_error(self, chunk, 1),
                )?;
            let time = replies.pop().unwrap_or(redis::Value::Nil);
            let (now, micros): (u64, u64) = redis::from_redis_value(time)?;
            self.clock.record(now, micros, sent);
            // Records with more pieces than guessed: read again, value and
            // all, in one more round trip for the chunk.
            let mut more: Vec<(usize, usize)> = Vec::new();
            // Misses in a growing store's buckets that lack their marker:
            // loaded again one by one, each following its bucket.
            let mut moved: Vec<usize> = Vec::new();
            for (n, ((id, k), reply)) in chunk.iter().zip(&keys).zip(replies).enumerate() {
                let (bytes, pieces) = match self.value_read(id, k, reply, guess) {
                    Err(Error::Reshaped { .. }) => {
                        moved.push(n);
                        out.push(None);
                        continue;
                    }
                    read => read?,
                };
                let Some(bytes) = bytes else {
                    out.push(None);
                    continue;
                };
                let value = parse_value(&bytes).ok_or_else(|| self.corrupt(id))?;
                // The time was read after the values: never early.
                if value.expires_at() <= now {
                    out.push(None);
                    continue;
                }
                match self.assemble(id, value, pieces, self.short_pieces())? {
                    Assembled::Done(stored, _) => out.push(stored),
                    Assembled::Pieces { want, .. } => {
                        more.push((n, want));
                        out.push(None);
                    }
                    need => out.push(self.read_rest_or_load(id, k, need).await?),
                }
            }
            let first = out.len() - chunk.len();
            for n in moved {
                out[first + n] = self.load(&chunk[n]).await?;
            }
            if more.is_empty() {
                continue;
            }
            let again: Vec<SessionId> = more.iter().map(|&(n, _)| chunk[n]).collect();
            let mut pipe = redis::pipe();
            for &(n, want) in &more {
                self.ask_value(&mut pipe, &keys[n], want);
            }
            let replies: Vec<redis::Value> =
                pipe.query_async(&mut self.conn.clone()).await.map_err(
                    crate::session::layout::pipeline::pipeline_error(self, &again, 1),
                )?;
            for (&(n, want), reply) in more.iter().zip(replies) {
                let (id, k) = (&chunk[n], &keys[n]);
                // Judged live above, and an expiry only moves forward
                // while an id lives; gone now if deleted meanwhile.
                let (bytes, pieces) = match self.value_read(id, k, reply, want) {
                    Err(Error::Reshaped { .. }) => {
                        out[first + n] = self.load(id).await?;
                        continue;
                    }
                    read => read?,
                };
                let Some(bytes) = bytes else {
                    continue;
                };
                let value = parse_value(&bytes).ok_or_else(|| self.corrupt(id))?;
                let need = self.assemble(id, value, pieces, self.short_pieces())?;
                out[first + n] = self.read_rest_or_load(id, k, need).await?;
            }
        }
        Ok(out)
    }
}
