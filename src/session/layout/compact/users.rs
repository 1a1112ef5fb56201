//! The compact layout's side of the per-user index: the writes in the
//! order [`crate::users`] explains, listings, revocations, labels, and the
//! sweep of entries whose sessions are gone.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use redis::Value;

use super::user_index::{self as users, Revoked, UserIndex, UserIndexAudit};
use super::write::IndexEntry;
use super::{Compact, parse_value};
use crate::error::{Error, Result};
use crate::scripts::{COMPACT_FORWARD, COMPACT_REVOKE, PIPELINE_CHUNK, USER_LABEL};
use crate::session::id::SessionId;
use crate::session::layout::{Inserted, Layout, Stored};
use crate::session::record;
use crate::ttl::Deadline;

/// The first byte of a record that belongs to no one: MessagePack `nil`.
pub const NO_OWNER: u8 = 0xc0;
/// The byte a tombstone's field ends in (`TOMBSTONE` in
/// `compact_common.lua`).
const TOMBSTONE: u8 = 0xc0;
/// Most fields one `HDEL` names.
const HDEL_CHUNK: usize = 1000;
/// Reads of a user's entries one revocation makes before it gives up: each
/// read is followed by steps that must come within the grace of it.
const REVOKE_READS: u32 = 3;

/// One index entry of the user asked about.
pub(crate) struct Entry {
    pub(crate) id: SessionId,
    pub(crate) label: Option<String>,
}

/// What sweeping a range of index buckets did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IndexSwept {
    /// Entries old enough to judge, whose sessions were looked up.
    pub(crate) checked: u64,
    /// Entries removed: their sessions were gone or expired, or the field
    /// was no id of this store.
    pub(crate) dropped: u64,
    /// Expired sessions found through their entries and reclaimed with
    /// them (before the buckets' sweep would have).
    pub(crate) reclaimed: u64,
    /// Index keys of another type, skipped.
    pub(crate) bad: u64,
}

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    fn users(&self) -> Result<&UserIndex> {
        self.users.as_ref().ok_or_else(|| {
            Error::Config(format!(
                "the compact store in namespace {:?} keeps no user index \
                 (CompactConfig::with_user_index)",
                self.buckets().namespace()
            ))
        })
    }

    /// The identity a record begins with, as its bytes; `None` for a
    /// record of no one (one beginning with MessagePack `nil`, as a
    /// tower-sessions store writes an anonymous session's).
    pub(super) fn owner_head<'r>(
        &self,
        id: &SessionId,
        record: &'r [u8],
    ) -> Result<Option<&'r [u8]>> {
        if record.first() == Some(&NO_OWNER) {
            return Ok(None);
        }
        self.identity_head(id, record).map(Some)
    }

    /// The identity a record begins with, as its bytes.
    fn identity_head<'r>(&self, id: &SessionId, record: &'r [u8]) -> Result<&'r [u8]> {
        let (_, rest) = record::split(record).map_err(|reason| Error::CorruptRecord {
            location: self.buckets().location(id),
            reason,
        })?;
        Ok(&record[..record.len() - rest.len()])
    }

    /// The server's time by the clock estimate, whole seconds, never
    /// ahead of it: an id's stamp, an index entry's write time.
    pub(crate) async fn stamp_now(&self) -> Result<u32> {
        let (earliest, _) = self.time_bounds().await?;
        Ok(u32::try_from(earliest.floor() as u64).unwrap_or(u32::MAX))
    }

    /// An insert for a store with a user index: the entry first, then the
    /// session, which the server refuses if it comes later than the grace
    /// after the entry. For a rotation's copy (`successor_of`: the old id,
    /// and the id an earlier attempt recorded), the new id is recorded
    /// beside the old session between the two, while that is live (see
    /// [`crate::users`]). An entry left by an insert that did not store
    /// its session is taken back, or else swept. A plain create on a
    /// server that holds both keys writes both in one script
    /// ([`Compact::insert_together`]).
    pub(super) async fn insert_indexed(
        &self,
        users: &UserIndex,
        head: &[u8],
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
        successor_of: Option<(&SessionId, Option<&SessionId>)>,
    ) -> Result<Inserted> {
        let (bucket, check) = users.place(head);
        let key = users.key(bucket);
        let entry = users::entry_value(check, None);
        let together = match successor_of {
            None => self.insert_together(&key, &entry, id, record, expiry).await,
            Some(_) => Ok(None),
        };
        match together {
            Ok(Some(inserted)) => {
                // The script wrote the entry only where it went on to the
                // session's field.
                if inserted == Inserted::IdTaken {
                    self.take_entry_back(&key, id).await;
                }
                return Ok(inserted);
            }
            Ok(None) => {}
            Err(e) => {
                self.take_entry_back(&key, id).await;
                return Err(e);
            }
        }
        let indexed_at = u64::from(self.stamp_now().await?);
        let _: () = redis::cmd("HSET")
            .arg(&key)
            .arg(id.as_bytes())
            .arg(&entry)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || key.clone()))?;
        let inserted = match successor_of {
            Some((from, prev)) => match self.forward(users, from, prev, id).await {
                Ok(true) => {
                    self.insert_after_entry(id, record, expiry, indexed_at)
                        .await
                }
                Ok(false) => Ok(Inserted::AlreadyExpired),
                Err(e) => Err(e),
            },
            None => {
                self.insert_after_entry(id, record, expiry, indexed_at)
                    .await
            }
        };
        let inserted = match inserted {
            Ok(inserted) => inserted,
            Err(e) => {
                self.take_entry_back(&key, id).await;
                return Err(e);
            }
        };
        if !matches!(inserted, Inserted::Created { .. }) {
            self.take_entry_back(&key, id).await;
        }
        Ok(inserted)
    }

    /// A create whose entry (`entry` in the index bucket `key`) is written
    /// by the short insert script, just before the session, where the
    /// server holds both keys (see `compact_add.lua`): one command, no
    /// grace to check, no tombstone to look for. `None` where the two-step
    /// insert must do it: a record kept out of line, an expiry too close
    /// to call by the clock estimate, or a server that refuses keys of two
    /// slots in one script (a cluster; remembered, so it is asked once).
    async fn insert_together(
        &self,
        key: &str,
        entry: &[u8],
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> Result<Option<Inserted>> {
        if self.entries_apart.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let together = IndexEntry::Together { key, value: entry };
        match self.insert_short(id, record, expiry, together).await {
            Err(Error::Redis(e)) if e.code() == Some("CROSSSLOT") => {
                self.entries_apart.store(true, Ordering::Relaxed);
                Ok(None)
            }
            other => other.map(|made| made.map(|(inserted, _)| inserted)),
        }
    }

    /// Best effort: an entry whose session was not stored; the sweeper's
    /// full passes remove any this misses.
    async fn take_entry_back(&self, key: &str, id: &SessionId) {
        let _: redis::RedisResult<i64> = redis::cmd("HDEL")
            .arg(key)
            .arg(id.as_bytes())
            .query_async(&mut self.conn.clone())
            .await;
    }

    /// Records `to` beside the live session `from` as a rotation's copy
    /// (`compact_forward.lua`); `prev` is the copy an earlier attempt
    /// recorded and removed. `false` if `from` is not live.
    async fn forward(
        &self,
        users: &UserIndex,
        from: &SessionId,
        prev: Option<&SessionId>,
        to: &SessionId,
    ) -> Result<bool> {
        let build = |k: &_| {
            let mut inv = self.invocation(self.script(&COMPACT_FORWARD), k);
            inv.arg(to.as_bytes())
                .arg(prev.map_or(&[][..], |p| p.as_bytes()))
                .arg(users.config().hold_secs())
                .arg(self.id_width().bytes());
            inv
        };
        match self.call_on_session::<i64>(from, build).await? {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(Error::Contended { attempts: 3 }),
        }
    }
    /// The second step of an insert into a store with a user index, whose
    /// entry was written at `indexed_at` (unix seconds by the server's
    /// clock): the session, unless it comes more than the grace after
    /// that ([`Inserted::Late`]) or a revocation left a tombstone for the
    /// id ([`Inserted::IdTaken`]). [`Layout::insert`] writes the entry and
    /// calls this; it is public for tests of the protocol.
    pub async fn insert_after_entry(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
        indexed_at: u64,
    ) -> Result<Inserted> {
        self.users()?;
        let (inserted, _) = self
            .insert_stored(id, record, expiry, Some(indexed_at))
            .await?;
        Ok(inserted)
    }

    /// The index entries of a batch about to be inserted, in one pipeline;
    /// when they were written (`None` without an index).
    pub(super) async fn index_add_many<'a>(
        &self,
        items: impl IntoIterator<Item = &'a (SessionId, Vec<u8>)>,
    ) -> Result<Option<u64>> {
        let Some(users) = &self.users else {
            return Ok(None);
        };
        let indexed_at = u64::from(self.stamp_now().await?);
        let mut pipe = redis::pipe();
        let mut any = false;
        for (id, record) in items {
            let Some(head) = self.owner_head(id, record)? else {
                continue;
            };
            any = true;
            let (bucket, check) = users.place(head);
            pipe.hset(
                users.key(bucket),
                id.as_bytes(),
                users::entry_value(check, None),
            )
            .ignore();
        }
        if any {
            let _: () = pipe.query_async(&mut self.conn.clone()).await.map_err(
                crate::session::layout::pipeline::pipeline_error(self, &[], 1),
            )?;
        }
        Ok(Some(indexed_at))
    }

    /// Writes `id`'s entry for the identity that records begin with `head`
    /// unless it has one (a label set is kept): for a session that gains
    /// an owner when saved, the entry goes first.
    pub async fn ensure_entry(&self, head: &[u8], id: &SessionId) -> Result<()> {
        let users = self.users()?;
        let (bucket, check) = users.place(head);
        let key = users.key(bucket);
        let _: i64 = redis::cmd("HSETNX")
            .arg(&key)
            .arg(id.as_bytes())
            .arg(users::entry_value(check, None))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || key.clone()))?;
        Ok(())
    }

    /// The ids the index holds for the identity that records begin with
    /// `head`, live or not (a takeover deletes their old keys before a
    /// revocation).
    #[cfg(any(
        feature = "tower-sessions",
        feature = "tower-sessions-014",
        feature = "actix-session"
    ))]
    pub(crate) async fn indexed_ids(&self, head: &[u8]) -> Result<Vec<SessionId>> {
        Ok(self.entries(head).await?.1.iter().map(|e| e.id).collect())
    }

    /// The entries of the identity that records begin with `head` (and of
    /// any other whose check matches), from its index bucket.
    async fn entries(&self, head: &[u8]) -> Result<(String, Vec<Entry>)> {
        let users = self.users()?;
        let (bucket, check) = users.place(head);
        let key = users.key(bucket);
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || key.clone()))?;
        let width = self.id_width();
        let entries = pairs
            .into_iter()
            .filter_map(|(field, value)| {
                let id = SessionId::from_slice(&field).filter(|id| id.width() == width)?;
                let (found, label) = users::parse_entry(&value)?;
                (found == check).then_some(Entry { id, label })
            })
            .collect();
        Ok((key, entries))
    }

    /// The live sessions of the identity that records begin with `head`,
    /// with their labels, from its index entries.
    pub async fn user_sessions(
        &self,
        head: &[u8],
    ) -> Result<Vec<(SessionId, Stored, Option<String>)>> {
        let (_, entries) = self.entries(head).await?;
        let ids: Vec<SessionId> = entries.iter().map(|e| e.id).collect();
        let found = self.load_many(&ids).await?;
        Ok(entries
            .into_iter()
            .zip(found)
            .filter_map(|(entry, stored)| {
                // MessagePack values are prefix-free: a record of this
                // identity, and of no other, begins with `head`.
                let stored = stored.filter(|s| s.record.starts_with(head))?;
                Some((entry.id, stored, entry.label))
            })
            .collect())
    }

    /// Revokes every session of the identity that records begin with
    /// `head`, but `keep`: see [`crate::users`] for why a create or a
    /// rotation racing this either is revoked or lands after it, indexed.
    /// The entries are read, each session is revoked in its bucket, and
    /// the copies rotations recorded beside them are revoked in turn; a
    /// revocation slower than the grace between its read and a step reads
    /// again.
    ///
    /// The server's eviction policy is read first: a policy that may
    /// evict the index ([`crate::limits::check_user_index_policy`]) is a
    /// [`Error::Config`], and nothing is revoked.
    pub async fn revoke_user(&self, head: &[u8], keep: Option<&SessionId>) -> Result<Revoked> {
        let policy = crate::limits::eviction_policy(&mut self.conn.clone()).await?;
        crate::limits::check_user_index_policy(policy.as_deref())?;
        let ident = record::int_only(head).map_or(String::new(), |n| n.to_string());
        let mut report = Revoked::default();
        for _ in 0..REVOKE_READS {
            let read_at = u64::from(self.stamp_now().await?);
            let (key, entries) = self.entries(head).await?;
            let mut seen: HashSet<SessionId> = keep.into_iter().copied().collect();
            let mut queue: Vec<SessionId> = entries
                .iter()
                .map(|e| e.id)
                .filter(|id| seen.insert(*id))
                .collect();
            let kept = (entries.len() - queue.len()) as u64;
            let mut drop = Vec::new();
            let mut stale = false;
            while !queue.is_empty() && !stale {
                let mut next = Vec::new();
                for chunk in queue.chunks(PIPELINE_CHUNK) {
                    let settled = self.revoke_each(chunk, &ident, head, Some(read_at)).await?;
                    let removed = settled.iter().filter(|(code, _)| *code == 1).count();
                    crate::metrics::revoked(removed as u64);
                    for (id, (code, successors)) in chunk.iter().zip(settled) {
                        match code {
                            0 => report.kept += 1,
                            1 => report.removed += 1,
                            4 => stale = true,
                            _ => report.absent += 1,
                        }
                        if code != 0 && code != 4 {
                            // A copy's entry is in the same bucket: same owner.
                            drop.push(id.as_bytes().to_vec());
                        }
                        next.extend(successors.into_iter().filter(|s| seen.insert(*s)));
                    }
                }
                queue = next;
            }
            self.drop_entries(&key, &drop).await?;
            if !stale {
                report.kept += kept;
                return Ok(report);
            }
        }
        Err(Error::Contended {
            attempts: REVOKE_READS,
        })
    }

    /// Runs the revoke script on each of `ids` (see `compact_revoke.lua`):
    /// its code and the copies rotations recorded beside the session.
    /// `ident` and `head` empty, and no `read_at`, for the sweeper, which
    /// keeps any live session.
    async fn revoke_each(
        &self,
        ids: &[SessionId],
        ident: &str,
        head: &[u8],
        read_at: Option<u64>,
    ) -> Result<Vec<(i64, Vec<SessionId>)>> {
        let config = self.users()?.config();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let width = self.id_width();
        let script = self.script(&COMPACT_REVOKE);
        let replies: Vec<Vec<Value>> = self
            .call_each(ids, script, |_, k| {
                let mut inv = self.invocation(script, k);
                inv.arg(ident).arg(head).arg(config.hold_secs());
                if let Some(at) = read_at {
                    inv.arg(at).arg(config.grace_secs).arg(width.bytes());
                }
                inv
            })
            .await?;
        Ok(replies
            .into_iter()
            .map(|reply| {
                let mut parts = reply.into_iter();
                let code = parts
                    .next()
                    .and_then(|v| redis::from_redis_value::<i64>(v).ok())
                    .unwrap_or(0);
                let successors = parts
                    .filter_map(|v| redis::from_redis_value::<Vec<u8>>(v).ok())
                    .filter_map(|b| SessionId::from_slice(&b).filter(|id| id.width() == width))
                    .collect();
                (code, successors)
            })
            .collect())
    }

    async fn drop_entries(&self, key: &str, fields: &[Vec<u8>]) -> Result<u64> {
        let mut dropped = 0;
        for chunk in fields.chunks(HDEL_CHUNK) {
            let n: u64 = redis::cmd("HDEL")
                .arg(key)
                .arg(chunk)
                .query_async(&mut self.conn.clone())
                .await
                .map_err(|e| Error::from_redis(e, || key.to_owned()))?;
            dropped += n;
        }
        Ok(dropped)
    }

    /// Sets (or with `None` clears) the label of `id`'s entry, the session
    /// of the identity that records begin with `head`. Returns `false` if
    /// there is no such entry.
    pub async fn set_label(
        &self,
        head: &[u8],
        id: &SessionId,
        label: Option<&str>,
    ) -> Result<bool> {
        if let Some(label) = label {
            users::check_label(label)?;
        }
        let users = self.users()?;
        let (bucket, check) = users.place(head);
        let key = users.key(bucket);
        let mut inv = USER_LABEL.prepare_invoke();
        inv.key(&key)
            .arg(id.as_bytes())
            .arg(users::entry_value(check, label));
        let set: i64 = inv
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || key.clone()))?;
        Ok(set == 1)
    }

    /// Removes the entries of index buckets `range` whose sessions are
    /// gone or expired at `now`. Each is first settled in its session's
    /// bucket by the revoke script in the sweeper's mode: a session that
    /// came meanwhile keeps its entry; otherwise a tombstone refuses a
    /// create of it still in flight, and the entry can go.
    pub(crate) async fn sweep_user_buckets(
        &self,
        range: std::ops::Range<u32>,
        now: u64,
    ) -> Result<IndexSwept> {
        let mut out = IndexSwept::default();
        let Some(users) = &self.users else {
            return Ok(out);
        };
        let width = self.id_width();
        let buckets: Vec<u32> = range.collect();
        for chunk in buckets.chunks(64) {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for &b in chunk {
                pipe.cmd("HGETALL").arg(users.key(b));
            }
            let replies: Vec<Value> = pipe.query_async(&mut self.conn.clone()).await?;
            // Fields to drop (index key, field), and ids to look up.
            let mut dead: Vec<(String, Vec<u8>)> = Vec::new();
            let mut entries: Vec<(String, SessionId)> = Vec::new();
            for (&b, reply) in chunk.iter().zip(replies) {
                let key = users.key(b);
                let pairs: Vec<(Vec<u8>, Vec<u8>)> = match reply {
                    Value::ServerError(e) if e.code() == "WRONGTYPE" => {
                        tracing::warn!(key, error = ?e, "user index key of another type; skipped");
                        out.bad += 1;
                        continue;
                    }
                    // Refused by the ACL, or the server not ready: the
                    // pass fails, as it would at every other key.
                    Value::ServerError(e) => {
                        return Err(Error::from_redis(e.into(), || key.clone()));
                    }
                    other => redis::from_redis_value(other)?,
                };
                for (field, value) in pairs {
                    let id = SessionId::from_slice(&field).filter(|id| id.width() == width);
                    match id {
                        Some(id) if users::parse_entry(&value).is_some() => {
                            entries.push((key.clone(), id));
                        }
                        // Not an entry this store writes.
                        _ => dead.push((key.clone(), field)),
                    }
                }
            }
            out.checked += entries.len() as u64;
            for part in entries.chunks(PIPELINE_CHUNK) {
                let mut pipe = redis::pipe();
                for (_, id) in part {
                    let k = self.keys(id);
                    pipe.hget(&k.bucket, &k.field);
                }
                let values: Vec<Option<Vec<u8>>> = pipe.query_async(&mut self.conn.clone()).await?;
                // A miss only sends the id to the revoke script, which
                // finds a live session wherever a split moved it (a
                // growing store) and keeps it. A value in neither form is left, with its entry, for the
                // audit to report.
                let gone: Vec<&(String, SessionId)> = part
                    .iter()
                    .zip(values)
                    .filter(|(_, v)| {
                        v.as_ref().is_none_or(|v| {
                            parse_value(v).is_some_and(|parsed| parsed.expires_at() <= now)
                        })
                    })
                    .map(|(entry, _)| entry)
                    .collect();
                let ids: Vec<SessionId> = gone.iter().map(|(_, id)| *id).collect();
                let settled = self.revoke_each(&ids, "", &[], None).await?;
                for ((key, id), (code, _)) in gone.into_iter().zip(settled) {
                    // 3: the session had expired, and went with its entry.
                    out.reclaimed += u64::from(code == 3);
                    if code >= 2 {
                        dead.push((key.clone(), id.as_bytes().to_vec()));
                    }
                }
            }
            dead.sort();
            for group in dead.chunk_by(|a, b| a.0 == b.0) {
                let fields: Vec<Vec<u8>> = group.iter().map(|(_, f)| f.clone()).collect();
                out.dropped += self.drop_entries(&group[0].0, &fields).await?;
            }
        }
        Ok(out)
    }
}

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Every one of `keys`' fields and values, 256 keys a pipeline.
    async fn hgetall_each(
        &self,
        keys: impl Iterator<Item = String>,
    ) -> Result<Vec<Vec<(Vec<u8>, Vec<u8>)>>> {
        let keys: Vec<String> = keys.collect();
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(256) {
            let mut pipe = redis::pipe();
            for key in chunk {
                pipe.hgetall(key);
            }
            let replies: Vec<Vec<(Vec<u8>, Vec<u8>)>> =
                pipe.query_async(&mut self.conn.clone()).await?;
            out.extend(replies);
        }
        Ok(out)
    }

    /// Checks the whole user index against every session: each live
    /// session has its entry, in the bucket and with the check its
    /// identity gives, and each entry has a live session. Reads every
    /// bucket of both: for tests and for the command line, not for a
    /// request path.
    pub async fn audit_users(&self) -> Result<UserIndexAudit> {
        use std::collections::HashMap;
        let users = self.users()?;
        let (now, _): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await?;
        let mut audit = UserIndexAudit::default();
        // Every entry: id -> (index bucket, check), or None if malformed.
        let mut entries: HashMap<Vec<u8>, Option<(u32, u8)>> = HashMap::new();
        let index = self
            .hgetall_each((0..users.count()).map(|b| users.key(b)))
            .await?;
        for (b, pairs) in (0u32..).zip(index) {
            for (field, value) in pairs {
                let place = users::parse_entry(&value).map(|(check, _)| (b, check));
                entries.insert(field, place);
            }
        }
        audit.entries = entries.len() as u64;
        let mut matched = std::collections::HashSet::new();
        let every = self.every_bucket().await?;
        let buckets = self
            .hgetall_each(every.iter().map(|&b| self.key_of(b)))
            .await?;
        for (&b, pairs) in every.iter().zip(buckets) {
            let tombstone_len = self.field_len_in(b) + 1;
            for (field, value) in pairs {
                if field.len() == tombstone_len && field.last() == Some(&TOMBSTONE) {
                    audit.tombstones += 1;
                    continue;
                }
                let Some(id) = self.id_in(b, &field) else {
                    continue;
                };
                let Some(stored) = self.live(&id, Some(value), Some(now)).await? else {
                    continue;
                };
                let Some(head) = self.owner_head(&id, &stored.record)? else {
                    // No one's session: nothing to index.
                    continue;
                };
                audit.sessions += 1;
                match entries.get(id.as_bytes()) {
                    None => audit.unindexed += 1,
                    Some(place) => {
                        matched.insert(id.as_bytes().to_vec());
                        if *place != Some(users.place(head)) {
                            audit.misplaced += 1;
                        }
                    }
                }
            }
        }
        for field in entries.keys().filter(|f| !matched.contains(*f)) {
            match SessionId::from_slice(field).filter(|id| id.width() == self.id_width()) {
                Some(_) => audit.orphans += 1,
                None => audit.misplaced += 1,
            }
        }
        Ok(audit)
    }
}
