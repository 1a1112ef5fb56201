//! Taking over a running app's sessions during a rolling deploy
//! ([`MapStore::with_takeover`], and `ActixStore::with_takeover` for
//! actix-session's store, whose keys are the cookies' own: each call is
//! given its session's key, and a mark keeps it where a revocation needs
//! it).
//!
//! While the takeover is open, old instances (serving through the old
//! store) and new ones (this store) run side by side, and a session's old
//! key, while it exists, holds its newest state: old instances write only
//! it, and new instances write it before their own copy. So:
//!
//! - **Load**: one round trip reads the session, the old key (type, value,
//!   expiry, in one script) and the session's journal mark. An old key
//!   whose session differs (or is missing) is copied in
//!   ([`MapStore::take_over`]), so a write an old instance made at any
//!   time, even to a session moved long before, is never lost. A session
//!   that came from an old key (marked) whose old key is gone was deleted
//!   by an old instance (or expired): it is removed, never served again. A
//!   session with no mark is this store's own, and the old store is not
//!   asked about it.
//! - **Save**: `SET <old key> <record> XX EXAT` first, then the store's
//!   save; an old key that is gone while the session is marked means an
//!   old instance deleted it: the save is dropped and the session removed.
//! - **Create**: the mark, then `SET <old key> NX EXAT` (a taken id draws
//!   another), then the store's create: old instances see new sessions.
//! - **Delete**: `DEL` of the old key, then the store's delete.
//! - **Revoke** ("log out everywhere"): the owner is recorded revoked
//!   ([`revoked_key`]), the old keys of the sessions in the owner's index
//!   are deleted, then the store revokes as always. A copy of an old key
//!   that the owner's session holds, made after (by a load, or by
//!   `migrate`), deletes the key and copies nothing, unless this store
//!   created the session after the revocation ([`MARK_NEW`], set in the
//!   revocation's second or later: one created earlier and evicted before
//!   the revocation read the index stays revoked). A copy
//!   checks after it stored the session, and the revocation records the
//!   owner before it reads the index: of a copy and a revocation at the
//!   same time, either the copy sees the owner revoked or the revocation
//!   sees the copy's index entry.
//!
//! The old keys stay until `sessionpack migrate --delete-copied` closes the
//! takeover, once no old instance runs: it copies each key a last time,
//! deletes it only while it holds what was copied and marks its session
//! moved (one script, so one server), then records the takeover closed;
//! from then on a store reads only its own buckets.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{MapStore, head, session_id, tower_id};
use crate::error::{Error, Result};
use crate::session::id::{IdWidth, SessionId};
use crate::session::layout::{Compact, Layout, Stored};
pub use crate::takeover::CLOSE_SCRIPT;
use crate::takeover::{
    ACTIX_KEY_CHARS, IdForm, PACKED_KEY_BYTES, READ_SCRIPT, Skip, Source, Taken, ValueForm,
    is_actix_key, pack_actix_key, unpack_actix_key,
};

/// A session's mark while it has an old key.
pub const MARK_OLD: u8 = b'o';
/// A session's mark once the close deleted its old key.
pub const MARK_MOVED: u8 = b'c';
/// A session's mark when a store taking over created it (it has an old key
/// too, written after the mark): its owner's revocation during the
/// takeover reached it through the user index if it was created before.
pub const MARK_NEW: u8 = b'n';
/// The takeover state key's values.
pub const OPEN: &str = "open";
/// See [`OPEN`].
pub const CLOSED: &str = "closed";

/// Attempts of one load or copy against concurrent writers before
/// [`Error::Contended`].
const ATTEMPTS: u32 = 8;
/// How long a process trusts what it read of the takeover's state. A
/// process that still thinks it open after the close finds no old keys
/// and no marks, and serves its own sessions: the stale reading is safe.
const STATE_AGE: Duration = Duration::from_secs(1);

/// The key that records a namespace's takeover: `open`, then `closed`.
pub fn state_key(namespace: &str) -> String {
    format!("{namespace}:takeover")
}

/// The HASH of the owners revoked while the takeover is open: field the
/// owner's head (as records begin), value the revocation's time (4 bytes,
/// big-endian unix seconds, as ids are stamped) then the id of the session
/// a "log out everywhere else" kept, if any. A copy of an old key that
/// such an owner's session holds is refused ([`Synced::Revoked`]); the
/// close deletes the HASH.
pub fn revoked_key(namespace: &str) -> String {
    format!("{namespace}:takeover:revoked")
}

/// The HASH of marks beside `id`'s bucket (`<bucket key>:m`, in its slot).
pub fn marks_key<C>(layout: &Compact<C>, id: &SessionId) -> String
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let scheme = layout.scheme();
    format!("{}:m", scheme.bucket_key(scheme.buckets().bucket_of(id)))
}

/// What [`MapStore::take_over`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synced {
    /// The store held the session as the old key has it.
    Unchanged,
    /// The session was new to the store.
    Created,
    /// The store's copy was replaced by the old key's.
    Updated,
    /// The old key's expiry has passed.
    Expired,
    /// The store refuses the id (a revocation's mark stands beside it).
    Taken,
    /// Its owner was revoked while the takeover was open ("log out
    /// everywhere"): nothing is copied, and the caller deletes the old key
    /// (old instances log the session out too).
    Revoked,
}

/// A store's takeover of another store's keys.
#[derive(Debug)]
pub(super) struct Takeover {
    source: Source,
    state_key: String,
    read: redis::Script,
    /// The last reading of the state: when, and whether open.
    seen: Mutex<Option<(Instant, bool)>>,
}

impl Takeover {
    /// The old key of `sid`: the one its id names, or, for a source whose
    /// keys do not follow from the id (actix-session's), `given` (the
    /// session's key as its cookie holds it) after the source's prefix.
    /// None for a key of this store's own form: that session has no old
    /// key.
    pub(super) fn old_key(&self, sid: &SessionId, given: Option<&str>) -> Option<String> {
        self.source.key_of(sid).or_else(|| {
            given
                .filter(|k| is_actix_key(k.as_bytes()))
                .map(|k| format!("{}{k}", self.source.prefix))
        })
    }

    /// Whether a session's old key does not follow from its id, so that
    /// its mark keeps it where a revocation must find it (in a store with
    /// a user index, as [`MapStore::take_over`]'s copies do too).
    fn keeps_keys(&self) -> bool {
        self.source.id == IdForm::ActixSessionKey
    }

    /// The old store's value for a session, in its own form.
    fn old_value(&self, id: i128, data: &HashMap<String, Value>, at: u64) -> Result<Vec<u8>> {
        match self.source.value {
            ValueForm::TowerRecord => peer_record(id, data, at),
            #[cfg(feature = "actix-session")]
            ValueForm::ActixState => crate::actix::state_json(data),
            ValueForm::JsonMap | ValueForm::MsgpackMap => Err(Error::Config(
                "a takeover writes back only the forms it takes over".into(),
            )),
        }
    }
}

/// A session's mark as stored: the mark; then, for [`MARK_NEW`] (or where
/// a key follows), the second it was set (4 bytes, big-endian, as
/// revocations are stamped); then, where the session's old key does not
/// follow from its id, that key packed ([`pack_actix_key`]), so a
/// revocation finds it. 53 bytes at most: a marks HASH stays a listpack.
fn mark_value(mark: u8, since: u32, key: Option<&str>) -> Vec<u8> {
    let packed = key.and_then(|k| pack_actix_key(k.as_bytes()));
    if mark != MARK_NEW && packed.is_none() {
        return vec![mark];
    }
    let mut value = Vec::with_capacity(1 + 4 + PACKED_KEY_BYTES);
    value.push(mark);
    value.extend_from_slice(&since.to_be_bytes());
    if let Some(packed) = packed {
        value.extend_from_slice(&packed);
    }
    value
}

/// A mark as [`mark_value`] wrote it: the mark, the second it was set
/// (where written), and the old key (where kept).
struct Mark {
    mark: u8,
    since: Option<u32>,
    key: Option<String>,
}

impl Mark {
    fn parse(value: &[u8]) -> Option<Self> {
        let (&mark, rest) = value.split_first()?;
        let (since, key) = match rest.split_first_chunk::<4>() {
            Some((since, key)) => (
                Some(u32::from_be_bytes(*since)),
                key.try_into().ok().map(|k| unpack_actix_key(&k)),
            ),
            None => (None, None),
        };
        Some(Self { mark, since, key })
    }
}

/// An old key as read: its value and expiry, and what they decode to.
struct OldKey {
    value: Vec<u8>,
    decoded: std::result::Result<Taken, Skip>,
}

impl<C> MapStore<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Takes over the sessions of another tower-sessions store on the same
    /// server or cluster during a rolling deploy: see the module docs for
    /// what each call then sends. `source` says how the old store names
    /// and encodes its keys; only [`Source::tower_sessions_redis_store`]'s
    /// record form can be written back, so it is the only one taken
    /// (actix-session's store is taken over by
    /// `ActixStore::with_takeover`).
    ///
    /// Records the takeover open for the namespace, unless it was closed
    /// (then this does nothing: the old keys are gone). While it is open,
    /// "log out everywhere" reaches old keys too, as the module docs say.
    /// A store with an absolute lifetime is refused (another store's ids
    /// carry no issue time).
    pub async fn with_takeover(self, source: Source) -> Result<Self> {
        if source.value != ValueForm::TowerRecord || source.id == IdForm::ActixSessionKey {
            return Err(Error::Config(
                "a takeover writes sessions back in the old store's form: a tower store takes \
                 over only tower-sessions-redis-store records (actix-session's keys are taken \
                 over by ActixStore::with_takeover)"
                    .into(),
            ));
        }
        self.open_takeover_of(source).await
    }

    /// [`MapStore::with_takeover`] of a source whose form the store can
    /// write back: tower-sessions-redis-store's, or actix-session's for
    /// the actix store, which gives each call its session's key.
    pub(crate) async fn open_takeover_of(mut self, source: Source) -> Result<Self> {
        if self.absolute.is_some() {
            return Err(Error::Config(
                "a store with an absolute lifetime cannot take over another store's sessions: \
                 their ids carry no issue time"
                    .into(),
            ));
        }
        let state_key = state_key(self.layout.buckets().namespace());
        let mut conn = self.layout.connection().clone();
        let _: Option<String> = redis::cmd("SET")
            .arg(&state_key)
            .arg(OPEN)
            .arg("NX")
            .query_async(&mut conn)
            .await?;
        self.takeover = Some(std::sync::Arc::new(Takeover {
            source,
            state_key,
            read: redis::Script::new(READ_SCRIPT),
            seen: Mutex::new(None),
        }));
        Ok(self)
    }

    /// The takeover, while it is open.
    pub(super) async fn open_takeover(&self) -> Result<Option<&Takeover>> {
        let Some(t) = self.takeover.as_deref() else {
            return Ok(None);
        };
        let cached = *t.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let open = match cached {
            Some((at, open)) if at.elapsed() < STATE_AGE => open,
            _ => {
                let mut conn = self.layout.connection().clone();
                let state: Option<String> = redis::cmd("GET")
                    .arg(&t.state_key)
                    .query_async(&mut conn)
                    .await?;
                let open = state.as_deref() == Some(OPEN);
                *t.seen.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some((Instant::now(), open));
                open
            }
        };
        Ok(open.then_some(t))
    }

    /// The takeover while it is open, with the old key of the session
    /// `id` (whose key, where the source's keys do not follow from ids,
    /// is `given`); none for a session with no old key.
    pub(super) async fn takeover_of(
        &self,
        id: i128,
        given: Option<&str>,
    ) -> Result<Option<(&Takeover, String)>> {
        Ok(self
            .open_takeover()
            .await?
            .and_then(|t| Some((t, t.old_key(&session_id(id), given)?))))
    }

    #[cfg(feature = "actix-session")]
    /// Whether a create while the takeover is open must issue a key of the
    /// old store's own form (actix-session's), so that old instances can
    /// load the session under it.
    pub(crate) async fn issues_old_keys(&self) -> Result<bool> {
        Ok(self
            .open_takeover()
            .await?
            .is_some_and(Takeover::keeps_keys))
    }

    async fn read_old(&self, t: &Takeover, key: &str) -> Result<Option<OldKey>> {
        let mut conn = self.layout.connection().clone();
        let reply: Vec<redis::Value> = t.read.key(key).invoke_async(&mut conn).await?;
        let mut parts = reply.into_iter();
        let kind: String = parts
            .next()
            .and_then(|v| redis::from_redis_value(v).ok())
            .unwrap_or_else(|| "none".into());
        if kind == "none" {
            return Ok(None);
        }
        let value: Option<Vec<u8>> = parts.next().and_then(|v| redis::from_redis_value(v).ok());
        let expire_ms: i64 = parts
            .next()
            .and_then(|v| redis::from_redis_value(v).ok())
            .unwrap_or(-2);
        let decoded = t.source.decode(
            key.as_bytes(),
            IdWidth::Bits128,
            &kind,
            value.as_deref(),
            expire_ms,
        );
        Ok(Some(OldKey {
            value: value.unwrap_or_default(),
            decoded,
        }))
    }

    async fn mark_of(&self, sid: &SessionId) -> Result<Option<Mark>> {
        let mut conn = self.layout.connection().clone();
        let mark: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(marks_key(&self.layout, sid))
            .arg(sid.as_bytes())
            .query_async(&mut conn)
            .await?;
        Ok(mark.and_then(|m| Mark::parse(&m)))
    }

    /// Marks `sid` with `mark` (a [`mark_value`]): `HSET`, or with `keep`
    /// `HSETNX`, which leaves a mark standing (a copy keeps [`MARK_NEW`]).
    async fn set_mark(&self, sid: &SessionId, mark: Vec<u8>, until: u64, keep: bool) -> Result<()> {
        let key = marks_key(&self.layout, sid);
        let mut pipe = redis::pipe();
        pipe.cmd(if keep { "HSETNX" } else { "HSET" })
            .arg(&key)
            .arg(sid.as_bytes())
            .arg(mark)
            .ignore();
        // NX gives a new HASH its expiry; GT moves it later only.
        for flag in ["NX", "GT"] {
            pipe.cmd("EXPIREAT").arg(&key).arg(until).arg(flag).ignore();
        }
        let _: () = pipe
            .query_async(&mut self.layout.connection().clone())
            .await?;
        Ok(())
    }

    async fn drop_mark(&self, sid: &SessionId) -> Result<()> {
        let _: () = redis::cmd("HDEL")
            .arg(marks_key(&self.layout, sid))
            .arg(sid.as_bytes())
            .query_async(&mut self.layout.connection().clone())
            .await?;
        Ok(())
    }

    /// The old key a mark keeps for `taken` where its key does not follow
    /// from its id: an actix-session key (the key's last 64 characters,
    /// which the id is the hash of), for a store with a user index, whose
    /// revocations must find it.
    fn kept_key<'t>(&self, taken: &'t Taken) -> Option<&'t str> {
        let start = taken.key.len().checked_sub(ACTIX_KEY_CHARS)?;
        let key = taken.key.get(start..)?;
        (self.owner.is_some()
            && is_actix_key(key.as_bytes())
            && crate::takeover::hashed_id(key.as_bytes()) == taken.id)
            .then_some(key)
    }

    /// Makes the store hold `taken` as its old key has it (a takeover's
    /// copy; `sessionpack migrate` calls it for each key): marks the
    /// session as having an old key, then stores it under its id, or
    /// replaces a different copy only while that copy is still the one
    /// read, so no write made meanwhile is overwritten by a stale one.
    pub async fn take_over(&self, taken: &Taken) -> Result<Synced> {
        let id = tower_id(&taken.id);
        let mark = mark_value(MARK_OLD, 0, self.kept_key(taken));
        self.set_mark(&taken.id, mark, taken.expires_at, true)
            .await?;
        let mut replaced = false;
        for _ in 0..ATTEMPTS {
            let stored = self.layout.load(&taken.id).await?;
            if let Some(stored) = &stored {
                if self.holds(stored, taken).await? {
                    return Ok(if replaced {
                        Synced::Updated
                    } else {
                        Synced::Unchanged
                    });
                }
                match self.layout.remove(&taken.id, Some(stored)).await? {
                    crate::session::layout::Written::Done => replaced = true,
                    // Written meanwhile: read again.
                    _ => continue,
                }
            }
            match self.import_data(id, &taken.data, taken.expires_at).await? {
                super::Imported::Created if self.revoked_owner(taken).await? => {
                    self.layout.delete(&taken.id, None).await?;
                    return Ok(Synced::Revoked);
                }
                super::Imported::Created if replaced => return Ok(Synced::Updated),
                super::Imported::Created => return Ok(Synced::Created),
                super::Imported::Expired => return Ok(Synced::Expired),
                super::Imported::Taken => {
                    // Another copy landed (read again), or an expired
                    // session not yet swept holds the field: a remove
                    // that expects nothing it could match reclaims only
                    // that.
                    let never = Stored {
                        record: vec![crate::session::layout::compact::NO_OWNER; 2],
                        expires_at: 0,
                    };
                    self.layout.remove(&taken.id, Some(&never)).await?;
                }
            }
        }
        if self.layout.load(&taken.id).await?.is_none() {
            return Ok(Synced::Taken);
        }
        Err(Error::Contended { attempts: ATTEMPTS })
    }

    /// Whether `taken`'s owner was revoked while the takeover was open,
    /// this session not kept and not created by this store since: read
    /// after the copy stored it (see the module docs). False for a store
    /// without a user index, where nothing is revoked.
    async fn revoked_owner(&self, taken: &Taken) -> Result<bool> {
        let Some((owner_of, _)) = self.owner else {
            return Ok(false);
        };
        let Some(owner) = owner_of(&taken.data) else {
            return Ok(false);
        };
        let (revoked, mark): (Option<Vec<u8>>, Option<Vec<u8>>) = redis::pipe()
            .cmd("HGET")
            .arg(revoked_key(self.layout.buckets().namespace()))
            .arg(head(&owner))
            .cmd("HGET")
            .arg(marks_key(&self.layout, &taken.id))
            .arg(taken.id.as_bytes())
            .query_async(&mut self.layout.connection().clone())
            .await?;
        let Some(revoked) = revoked else {
            return Ok(false);
        };
        let (at, kept) = match revoked.split_first_chunk::<4>() {
            Some((at, kept)) => (u32::from_be_bytes(*at), kept),
            None => (u32::MAX, &[][..]),
        };
        // Created here after the revocation: its mark's second (or, in a
        // mark without one, its id's stamp) says so. One created before
        // was revoked through the index, unless it was evicted first: then
        // only the second tells (one created and evicted in the
        // revocation's own second passes).
        let created_after = mark.as_deref().and_then(Mark::parse).is_some_and(|m| {
            m.mark == MARK_NEW && m.since.unwrap_or_else(|| taken.id.stamp()) >= at
        });
        Ok(kept != taken.id.as_bytes() && !created_after)
    }

    /// Before a revocation while the takeover is open: records the owner
    /// revoked (keeping `keep`), then deletes the old keys of the sessions
    /// in the owner's index, but `keep`'s, so old instances log them out.
    /// Where keys do not follow from ids, each session's mark keeps its
    /// key.
    pub(super) async fn revoke_in_takeover(
        &self,
        t: &Takeover,
        head: &[u8],
        keep: Option<&SessionId>,
    ) -> Result<()> {
        let mut conn = self.layout.connection().clone();
        let mut revoked = self.layout.stamp_now().await?.to_be_bytes().to_vec();
        revoked.extend_from_slice(keep.map_or(&[], |k| k.as_bytes()));
        let () = redis::cmd("HSET")
            .arg(revoked_key(self.layout.buckets().namespace()))
            .arg(head)
            .arg(revoked)
            .query_async(&mut conn)
            .await?;
        let ids: Vec<SessionId> = self
            .layout
            .indexed_ids(head)
            .await?
            .into_iter()
            .filter(|id| Some(id) != keep)
            .collect();
        let given: Vec<Option<String>> = if t.keeps_keys() && !ids.is_empty() {
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.cmd("HGET")
                    .arg(marks_key(&self.layout, id))
                    .arg(id.as_bytes());
            }
            let marks: Vec<Option<Vec<u8>>> = pipe.query_async(&mut conn).await?;
            marks
                .into_iter()
                .map(|m| m.as_deref().and_then(Mark::parse).and_then(|m| m.key))
                .collect()
        } else {
            vec![None; ids.len()]
        };
        let old_keys: Vec<String> = ids
            .iter()
            .zip(&given)
            .filter_map(|(id, given)| t.old_key(id, given.as_deref()))
            .collect();
        // One key at a time: in a cluster the old keys live in many slots.
        let mut pipe = redis::pipe();
        for key in &old_keys {
            pipe.cmd("DEL").arg(key).ignore();
        }
        if !old_keys.is_empty() {
            let () = pipe.query_async(&mut conn).await?;
        }
        Ok(())
    }

    /// Whether the store holds each of `taken` as its old key has it (data
    /// and expiry), read in one pipeline for them all: a migration's close
    /// copies only the others. A record that does not decode counts as
    /// not held, so its copy reports it.
    pub async fn holds_each(&self, taken: &[&Taken]) -> Result<Vec<bool>> {
        let ids: Vec<SessionId> = taken.iter().map(|t| t.id).collect();
        let stored = self.layout.load_many(&ids).await?;
        let mut held = Vec::with_capacity(taken.len());
        for (&taken, stored) in taken.iter().zip(stored) {
            held.push(match stored {
                Some(stored) => self.holds(&stored, taken).await.unwrap_or(false),
                None => false,
            });
        }
        Ok(held)
    }

    /// Whether a stored session is `taken`'s data and expiry.
    async fn holds(&self, stored: &Stored, taken: &Taken) -> Result<bool> {
        if stored.expires_at != taken.expires_at {
            return Ok(false);
        }
        Ok(self.decode_stored(&taken.id, &stored.record).await?.0 == taken.data)
    }

    /// A load while a takeover is open (see the module docs): `old` is the
    /// session's old key.
    pub(super) async fn load_in_takeover(
        &self,
        t: &Takeover,
        old: &str,
        id: i128,
    ) -> Result<Option<(HashMap<String, Value>, i64)>> {
        let sid = session_id(id);
        for _ in 0..ATTEMPTS {
            let (stored, read, mark) = tokio::try_join!(
                self.load_plain(id),
                self.read_old(t, old),
                self.mark_of(&sid)
            )?;
            let Some(read) = read else {
                if mark.is_some_and(|m| matches!(m.mark, MARK_OLD | MARK_NEW)) && stored.is_some() {
                    // An old instance deleted it (or it expired there).
                    self.layout.delete(&sid, None).await?;
                    self.memo.take(id);
                    return Ok(None);
                }
                return Ok(stored);
            };
            let taken = match read.decoded {
                Ok(taken) => taken,
                Err(Skip::Gone) => continue,
                Err(skip) => {
                    // Not a session of the old store's: left alone.
                    tracing::warn!(
                        key = %old,
                        bytes = read.value.len(),
                        "an old store's key that is no session: {skip}"
                    );
                    return Ok(stored);
                }
            };
            if let Some((data, at)) = &stored
                && *data == taken.data
                && u64::try_from(*at).ok() == Some(taken.expires_at)
            {
                return Ok(stored);
            }
            // The old key is the session's newest state: that is what the
            // load returns, once the store holds it too, or while other
            // loads copy it in at the same time (each load copies again
            // until the old key's last write is in).
            self.memo.take(id);
            return match self.take_over(&taken).await {
                Ok(Synced::Expired) => Ok(None),
                Ok(Synced::Revoked) => {
                    let _: () = redis::cmd("DEL")
                        .arg(old)
                        .query_async(&mut self.layout.connection().clone())
                        .await?;
                    Ok(None)
                }
                // Taken: other loads moving the copy in and out as this
                // one tried, like contention.
                Ok(_) | Err(Error::Contended { .. }) => {
                    Ok(Some((taken.data, taken.expires_at as i64)))
                }
                Err(e) => Err(e),
            };
        }
        Err(Error::Contended { attempts: ATTEMPTS })
    }

    /// Before a save while a takeover is open: writes the old key `old`
    /// first. Returns false when the session is gone (an old instance
    /// deleted it): the save is dropped and the session removed.
    pub(super) async fn save_in_takeover(
        &self,
        t: &Takeover,
        old: &str,
        id: i128,
        data: &HashMap<String, Value>,
        at: u64,
    ) -> Result<bool> {
        let sid = session_id(id);
        let marks = marks_key(&self.layout, &sid);
        // One round trip: the old key, the marks' expiry (they must
        // outlast the session they tell about, or an old instance's later
        // delete would look like a session of this store's own), and the
        // session's mark, read for when the old key is gone.
        let (written, _, mark): (Option<String>, i64, Option<Vec<u8>>) = redis::pipe()
            .cmd("SET")
            .arg(old)
            .arg(t.old_value(id, data, at)?)
            .arg("XX")
            .arg("EXAT")
            .arg(at.max(1))
            .cmd("EXPIREAT")
            .arg(&marks)
            .arg(at.max(1))
            .arg("GT")
            .cmd("HGET")
            .arg(&marks)
            .arg(sid.as_bytes())
            .query_async(&mut self.layout.connection().clone())
            .await?;
        if written.is_none()
            && mark
                .as_deref()
                .and_then(Mark::parse)
                .is_some_and(|m| matches!(m.mark, MARK_OLD | MARK_NEW))
        {
            self.layout.delete(&sid, None).await?;
            return Ok(false);
        }
        Ok(true)
    }

    /// Before a create while a takeover is open: the mark (with the
    /// second, and the old key where it does not follow from the id),
    /// then the old key `old`. Returns false when the id is taken there.
    pub(super) async fn create_in_takeover(
        &self,
        t: &Takeover,
        old: &str,
        id: i128,
        data: &HashMap<String, Value>,
        at: u64,
    ) -> Result<bool> {
        let sid = session_id(id);
        let since = self.layout.stamp_now().await?;
        let kept = (self.owner.is_some() && t.keeps_keys()).then(|| &old[t.source.prefix.len()..]);
        self.set_mark(&sid, mark_value(MARK_NEW, since, kept), at, false)
            .await?;
        let created: Option<String> = redis::cmd("SET")
            .arg(old)
            .arg(t.old_value(id, data, at)?)
            .arg("NX")
            .arg("EXAT")
            .arg(at.max(1))
            .query_async(&mut self.layout.connection().clone())
            .await?;
        Ok(created.is_some())
    }

    /// After a create's insert found its id taken while a takeover is
    /// open: the old key `old` written moments before is this create's,
    /// so a load that copied it in got there first.
    pub(super) async fn created_by_copy(
        &self,
        old: &str,
        id: i128,
        data: &HashMap<String, Value>,
        at: u64,
    ) -> Result<bool> {
        let taken = Taken {
            key: old.to_owned(),
            id: session_id(id),
            data: data.clone(),
            expires_at: at,
        };
        Ok(matches!(
            self.take_over(&taken).await?,
            Synced::Unchanged | Synced::Created | Synced::Updated
        ))
    }

    /// Before a delete while a takeover is open: the old key `old` goes
    /// first, so no load copies the session back.
    pub(super) async fn delete_in_takeover(&self, old: &str, id: i128) -> Result<()> {
        let sid = session_id(id);
        let _: () = redis::cmd("DEL")
            .arg(old)
            .query_async(&mut self.layout.connection().clone())
            .await?;
        self.drop_mark(&sid).await
    }
}

/// The old store's record for a session: tower-sessions' `Record`
/// (`id`, `data`, `expiry_date`) in MessagePack, as
/// tower-sessions-redis-store writes it. The same fields, serialized the
/// same way (a newtype id, `time`'s own serde form of the date), so a
/// build with only the actix-session adapter needs no tower-sessions
/// crate.
fn peer_record(id: i128, data: &HashMap<String, Value>, at: u64) -> Result<Vec<u8>> {
    #[derive(serde::Serialize)]
    struct Id(i128);
    #[derive(serde::Serialize)]
    struct Record<'a> {
        id: Id,
        data: &'a HashMap<String, Value>,
        expiry_date: time::OffsetDateTime,
    }
    let expiry_date = time::OffsetDateTime::from_unix_timestamp(at as i64)
        .map_err(|e| Error::Config(format!("an expiry the old store cannot hold: {e}")))?;
    let record = Record {
        id: Id(id),
        data,
        expiry_date,
    };
    Ok(rmp_serde::to_vec(&record)?)
}

#[cfg(all(test, feature = "tower-sessions"))]
mod tests {
    use super::*;

    #[test]
    fn peer_records_are_the_bytes_tower_sessions_writes() {
        let data: HashMap<String, Value> = [("user_id".to_owned(), Value::from(42))]
            .into_iter()
            .collect();
        let id = -0x0123_4567_89ab_cdef_0011_2233_4455_6677;
        let at = 1_900_000_000;
        let theirs = tower_sessions_core::session::Record {
            id: tower_sessions_core::session::Id(id),
            data: data.clone(),
            expiry_date: time::OffsetDateTime::from_unix_timestamp(at as i64).unwrap(),
        };
        assert_eq!(
            peer_record(id, &data, at).unwrap(),
            rmp_serde::to_vec(&theirs).unwrap()
        );
    }
}
