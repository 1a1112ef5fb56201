//! The store both web stores are built on: sessions whose data is a map of
//! JSON values (tower-sessions' `Record::data`, actix-session's state of
//! JSON texts), kept in compact listpack buckets ([`crate::Compact`],
//! 128-bit ids). [`crate::tower::TowerStore`] is this store with
//! tower-sessions' traits; [`crate::actix::ActixStore`] wraps it with
//! actix-session's. Built only with one of their features.
//!
//! [`MapStore::connect`] opens the store as most apps want it: buckets
//! that grow and shrink with the sessions, a write threshold that lets a
//! request under rolling expiry only read, and a sweeper in the background
//! that removes expired sessions (every process of the app runs one; they
//! share the work through leases) and stops when the last clone of the
//! store is dropped. [`MapStore::new`] takes a connection and a
//! [`CompactConfig`] of your own (a user index, a fixed bucket count, a
//! cluster or TLS connection); [`MapStore::without_sweeper`] leaves the
//! sweeping to a `sessionpack sweep` daemon.
//!
//! What each call sends (one round trip each, and one `TIME` a second per
//! process for the clock estimate):
//!
//! - `create`: one short script (`compact_add.lua`): `HSETNX` of the
//!   session's field, then `HSET` of the pieces of a record too long for
//!   one value, then `ZADD LT` of its bucket's index entry; a record over
//!   512 bytes goes through the insert script, with its own key. An id already taken (or expired but not yet
//!   swept, or with a piece left under it) gets a new random id, as the
//!   trait asks.
//! - `load`: one `HGET`, or for records in pieces one `HMGET` of the
//!   value and its pieces.
//! - `save`: of a session this process read, whose record keeps the form
//!   the read found (whole, or as many pieces under the same names), one
//!   `HSETEX FXX` of the value and pieces on Redis 8.0 and Valkey 9.0 and
//!   later (a script of `HEXISTS` and `HSET` before them): it writes only
//!   where the session's field is, so a session deleted, revoked or swept
//!   since the read is never brought back, and only while both expiries
//!   are beyond the clock estimate's reach of now (record format 10,
//!   [`crate::session::layout::compact::HELD_NAMES_FORMAT`]; the guide's
//!   plain writes). Any other save is one short script that reads the
//!   stored expiry (`HGET`) and writes record and expiry (`HSET`) only
//!   while the session is live by the server's clock, so it never revives
//!   a session that was deleted or expired, and a session a load returned
//!   as live can be extended to its last second. With
//!   [`MapStore::with_write_threshold`],
//!   a save whose data is unchanged since this process loaded it and whose
//!   expiry moves by less than that fraction of the session's lifetime
//!   sends nothing.
//! - `delete`: `HDEL` of the session's field where this process read its
//!   record whole; else a script of two commands that reads the value and
//!   removes the field, the pieces it names and an out-of-line record's
//!   key (`compact_unset.lua`; [`crate::Compact::delete`]).
//! - `delete_expired`: one sweeper pass ([`crate::session::sweep::Sweeper::pass`]).
//!
//! With a user index ([`crate::CompactConfig::with_user_index`]), the
//! store offers "your devices" ([`MapStore::sessions_of`]) and "log out
//! everywhere" ([`MapStore::revoke_all`], [`MapStore::revoke_others`]).
//! It reads each session's owner from its data ([`axum_login_owner`] by
//! default: the `user_id` axum-login keeps) and writes it at the head of
//! the record (MessagePack `nil` for a session of no one: one byte), so a
//! revocation can tell whose a session is; its index entry is written when
//! the session is created with an owner (axum-login's log-in cycles the
//! id, so it creates one), or saved with a new one. A label for the
//! listing comes from the data too: a string under [`DEFAULT_LABEL_KEY`]
//! (`device`) is moved to the entry (cut to [`MAX_LABEL_BYTES`]) and not
//! kept in the record, which it would only make longer.
//! New ids then end in their issue time ([`crate::users`]).
//!
//! Records are encoded with [`crate::json_map`] (keys as codes, byte arrays
//! as binary) and the expiry is kept once, in the bucket's value, to the
//! second, as the peer store's `EXAT` keeps it. An axum-login session with
//! a 32-byte digest takes 40 bytes. An expiry is kept in 32 bits: one set
//! past February 2106 ([`crate::ttl::MAX_EXPIRES_AT`]) is kept as that
//! second, so such a session ends then rather than failing its request.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::clock::unix_now;
use crate::error::{Error, Result};
use crate::identity::{Identity, MAX_NAME_BYTES, Uuid};
use crate::json_map;
use crate::metrics::{self, Op, Outcome};
use crate::session::dictionary::Dictionary;
use crate::session::id::{IdWidth, SessionId};
use crate::session::layout::compact::NO_OWNER;
use crate::session::layout::compact::user_index::head;
use crate::session::layout::{Compact, CompactConfig, Layout, Written};
use crate::session::sweep::{InApp, PassReport, SweepConfig, SweepStats, Sweeper};
use crate::ttl::Deadline;
use crate::users::MAX_LABEL_BYTES;

mod create;
mod memo;
mod takeover;
mod users;

use memo::Memo;
pub use takeover::{
    CLOSE_SCRIPT, CLOSED, MARK_MOVED, MARK_NEW, MARK_OLD, OPEN, Synced, marks_key, revoked_key,
    state_key,
};

/// Reads a session's owner from its data.
pub type OwnerOf = fn(&HashMap<String, Value>) -> Option<Identity>;

/// The owner axum-login records: `user_id` under `axum-login.data`; an
/// unsigned integer, or a string (a UUID in its usual form, else a name of
/// at most 64 bytes). Anything else is no one.
pub fn axum_login_owner(data: &HashMap<String, Value>) -> Option<Identity> {
    match data.get("axum-login.data")?.get("user_id")? {
        Value::Number(n) => n.as_u64().map(Identity::Int),
        Value::String(s) => Some(match s.parse::<Uuid>() {
            Ok(uuid) => Identity::Uuid(uuid.0),
            Err(_) if s.len() <= MAX_NAME_BYTES => Identity::Name(s.clone()),
            Err(_) => return None,
        }),
        _ => None,
    }
}

/// The session data key whose string [`MapStore`] moves to the index
/// entry's label by default.
pub const DEFAULT_LABEL_KEY: &str = "device";

/// `text` cut to [`MAX_LABEL_BYTES`] at a character boundary.
fn label_of(text: &str) -> String {
    let mut end = text.len().min(MAX_LABEL_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Ids tried by one `create` before it reports an error: a 128-bit random
/// id that is taken twice in a row means a broken random source.
const CREATE_ATTEMPTS: usize = 8;
/// Sessions whose last load or write a store remembers by default (see
/// [`MapStore::with_memo_capacity`]).
pub const DEFAULT_MEMO_CAPACITY: usize = 100_000;

/// The write threshold [`MapStore::connect`] opens with: a rolling
/// expiry is written when it moves by a tenth of the session's lifetime
/// ([`MapStore::with_write_threshold`]).
pub const DEFAULT_WRITE_THRESHOLD: f64 = 0.1;

/// The configuration [`MapStore::connect`] and
/// [`crate::actix::ActixStore::connect`] open with: buckets that split as
/// the store grows and merge as it shrinks ([`CompactConfig::default`]),
/// and with feature `compression` records packed with a dictionary
/// learned from the app's own first sessions
/// ([`CompactConfig::with_learned_dictionary`]).
pub fn recommended_config() -> CompactConfig {
    let config = CompactConfig::default();
    #[cfg(feature = "compression")]
    let config = config.with_learned_dictionary(crate::session::dictionary::Learning::default());
    config
}

/// [`recommended_config`] for the server behind `conn`, what
/// [`MapStore::connect`] and [`crate::actix::ActixStore::connect`] open:
/// where its `maxmemory-policy` may evict any key (`allkeys-*`), records
/// are stored unpacked (losing the dictionary's key would leave every
/// record packed with it unreadable) and the buckets stay fixed
/// ([`CompactConfig::resolve`]); a warning says so.
pub async fn recommended_config_for<C>(conn: &C) -> Result<CompactConfig>
where
    C: redis::aio::ConnectionLike + Clone + Send,
{
    let mut config = recommended_config();
    let policy = crate::limits::eviction_policy(&mut conn.clone()).await?;
    if let Some(policy) = policy.filter(|p| crate::limits::evicts_persistent_keys(p))
        && config.learn_dictionary.take().is_some()
    {
        tracing::warn!(
            policy,
            "maxmemory-policy may evict the key of a learned dictionary: records are \
             stored unpacked (set noeviction or a volatile-* policy to pack them)"
        );
    }
    Ok(config)
}

/// A store of JSON-map sessions over a [`Compact`] layout with 128-bit ids:
/// the tower-sessions and actix-session stores.
pub struct MapStore<C> {
    layout: Compact<C>,
    /// The sweeper `delete_expired` passes with.
    sweeper: Arc<Sweeper<C>>,
    /// The sweeper this store runs in the background, shared by its clones.
    sweeping: InApp,
    write_threshold: f64,
    memo: Arc<Memo>,
    /// With a user index: whose a session is, and the data key of its
    /// label.
    owner: Option<(OwnerOf, Option<&'static str>)>,
    idle: Option<std::time::Duration>,
    /// Seconds after sign-in (the id's stamp) a session dies, whatever
    /// tower-sessions asks.
    absolute: Option<u64>,
    /// Another store's sessions this one takes over ([`MapStore::with_takeover`]).
    takeover: Option<Arc<takeover::Takeover>>,
}

impl<C> Clone for MapStore<C>
where
    C: Clone,
{
    fn clone(&self) -> Self {
        Self {
            layout: self.layout.clone(),
            sweeper: self.sweeper.clone(),
            sweeping: self.sweeping.clone(),
            write_threshold: self.write_threshold,
            memo: self.memo.clone(),
            owner: self.owner,
            idle: self.idle,
            absolute: self.absolute,
            takeover: self.takeover.clone(),
        }
    }
}

impl<C> std::fmt::Debug for MapStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapStore")
            .field("layout", &self.layout)
            .field("write_threshold", &self.write_threshold)
            .finish_non_exhaustive()
    }
}

impl MapStore<crate::Connection> {
    /// Connects to the Redis server at `url` (a reconnecting
    /// [`crate::Connection`]) and opens the store as most apps want it:
    /// [`recommended_config_for`] the server, the write threshold
    /// [`DEFAULT_WRITE_THRESHOLD`], and a sweeper running in the
    /// background that stops when the last clone of the store is dropped
    /// ([`MapStore::without_sweeper`] turns it off). The knobs are
    /// [`MapStore::new`]'s.
    pub async fn connect(url: &str) -> Result<Self> {
        let conn = crate::connect(url).await?;
        let config = recommended_config_for(&conn).await?;
        Ok(Self::new(conn, config)
            .await?
            .with_write_threshold(DEFAULT_WRITE_THRESHOLD))
    }
}

impl<C> MapStore<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Opens the store: a [`Compact`] layout with `config` and 128-bit ids
    /// (tower-sessions' own), whatever width `config` names. Inside a
    /// Tokio runtime it starts a sweeper in the background, as
    /// [`MapStore::connect`] does; the write threshold is 0 (every save
    /// writes) until [`MapStore::with_write_threshold`] sets one.
    pub async fn new(conn: C, config: CompactConfig) -> Result<Self> {
        let layout = Compact::new(conn, config.with_id_width(IdWidth::Bits128)).await?;
        Self::from_layout(layout)
    }

    /// A store over a layout already open; its ids must be 128 bits wide.
    pub fn from_layout(layout: Compact<C>) -> Result<Self> {
        if layout.id_width() != IdWidth::Bits128 {
            return Err(Error::Config(
                "a tower-sessions store needs a compact layout with 128-bit ids".into(),
            ));
        }
        let sweeper = Arc::new(Sweeper::new(layout.clone(), SweepConfig::default()));
        let sweeping = InApp::start(&layout, Some(SweepConfig::default()));
        let owner = layout
            .user_index()
            .map(|_| (axum_login_owner as OwnerOf, Some(DEFAULT_LABEL_KEY)));
        Ok(Self {
            layout,
            sweeper,
            sweeping,
            write_threshold: 0.0,
            memo: Arc::new(Memo::new(DEFAULT_MEMO_CAPACITY)),
            owner,
            idle: None,
            absolute: None,
            takeover: None,
        })
    }

    /// Packs each session's data with `dictionary` where that makes it
    /// shorter, as [`Compact::with_dictionary`] says; the same errors.
    pub async fn with_dictionary(mut self, dictionary: &Dictionary) -> Result<Self> {
        self.layout = self.layout.with_dictionary(dictionary).await?;
        Ok(self)
    }

    /// The id of the dictionary this store packs with, if it packs.
    pub fn dictionary_id(&self) -> Option<u8> {
        self.layout.dictionary_id()
    }

    /// Ends every session `lifetime` after it was created, whatever expiry
    /// tower-sessions gives it (`OnInactivity` rolls it forward on every
    /// request; this caps it). Counted from the second stamped in the
    /// session's id (no byte stored), which this store then issues itself;
    /// by this process's clock for a store without a user index.
    pub fn with_absolute_lifetime(mut self, lifetime: std::time::Duration) -> Self {
        self.absolute = Some(lifetime.as_secs().max(1));
        self
    }

    /// Reads owners with `owner` rather than [`axum_login_owner`], and
    /// labels from `label_key` rather than [`DEFAULT_LABEL_KEY`] (`None`:
    /// no labels). A store with a user index only; without one this does
    /// nothing.
    pub fn with_owner(mut self, owner: OwnerOf, label_key: Option<&'static str>) -> Self {
        if self.owner.is_some() {
            self.owner = Some((owner, label_key));
        }
        self
    }

    /// The idle timeout the app's `SessionManagerLayer` gives sessions
    /// (`Expiry::OnInactivity`), from which a listing tells when each was
    /// last used.
    pub fn with_idle_timeout(mut self, idle: std::time::Duration) -> Self {
        self.idle = Some(idle);
        self
    }

    /// Lets a save that changes nothing but the expiry skip the write when
    /// the expiry moves by less than `fraction` (0..=1) of the session's
    /// remaining lifetime: with rolling expiry (`Expiry::OnInactivity` and
    /// `with_always_save(true)`), most requests then only read. A session
    /// may then end up to that fraction of its lifetime earlier than the
    /// last request implied. Default 0: every save writes.
    pub fn with_write_threshold(mut self, fraction: f64) -> Self {
        self.write_threshold = fraction.clamp(0.0, 1.0);
        self
    }

    /// Remembers the last load or write of up to `capacity` recent
    /// sessions (the most recent half of them at least; default
    /// [`DEFAULT_MEMO_CAPACITY`], about 50 bytes each): what
    /// [`MapStore::with_write_threshold`] compares a save with, and
    /// whether a deleted session's record was inline (then its delete is
    /// one `HDEL`). A request saves what it loaded moments before, so the
    /// default covers any process that has fewer requests in flight. 0
    /// remembers nothing (and so makes the write threshold moot).
    pub fn with_memo_capacity(mut self, capacity: usize) -> Self {
        self.memo = Arc::new(Memo::new(capacity));
        self
    }

    /// Sweeps with `config` (interval, leases, cap, segments), in the
    /// background and in `delete_expired`, in place of the default.
    pub fn with_sweep_config(mut self, config: SweepConfig) -> Self {
        self.sweeping = InApp::start(&self.layout, Some(config.clone()));
        self.sweeper = Arc::new(Sweeper::new(self.layout.clone(), config));
        self
    }

    /// Runs no sweeper in the background: for an app whose expired
    /// sessions a `sessionpack sweep` daemon removes (or tower-sessions'
    /// `continuously_delete_expired`, which calls `delete_expired`).
    /// Without any, expired sessions are never loaded but keep their
    /// memory.
    pub fn without_sweeper(mut self) -> Self {
        self.sweeping = InApp::default();
        self
    }

    /// The totals of the sweeper this store runs in the background
    /// (passes, failed passes, sessions reclaimed, the last error), for a
    /// health check; `None` when it runs none.
    pub fn sweep_stats(&self) -> Option<SweepStats> {
        self.sweeping.stats()
    }

    /// A receiver of those totals, changed after each pass; `None` when
    /// the store runs no sweeper.
    pub fn subscribe_sweeps(&self) -> Option<tokio::sync::watch::Receiver<SweepStats>> {
        self.sweeping.subscribe()
    }

    /// The layout underneath.
    pub fn layout(&self) -> &Compact<C> {
        &self.layout
    }

    /// Writes a live session's data and expiry; a session that is gone
    /// stays gone. Returns whether anything was sent.
    pub async fn save_data(
        &self,
        id: i128,
        data: &HashMap<String, Value>,
        expires_at: i64,
    ) -> Result<bool> {
        self.save_data_keyed(id, None, data, expires_at).await
    }

    /// [`MapStore::save_data`] of a session whose old key, while a
    /// takeover of actix-session's store is open, is `key`.
    pub(crate) async fn save_data_keyed(
        &self,
        id: i128,
        key: Option<&str>,
        data: &HashMap<String, Value>,
        expires_at: i64,
    ) -> Result<bool> {
        Ok(self.save_or_gone(id, key, data, expires_at).await? != Saved::Skipped)
    }

    /// [`MapStore::save_data`], saying whether the session was gone.
    async fn save_or_gone(
        &self,
        id: i128,
        key: Option<&str>,
        data: &HashMap<String, Value>,
        expires_at: i64,
    ) -> Result<Saved> {
        let save = self.save_unobserved(id, key, data, expires_at);
        metrics::call(Op::Save, Saved::outcome, save).await
    }

    /// Moves a live session's expiry to `expires_at` (unix seconds, cut to
    /// an absolute lifetime), its data left as it is; a session that is
    /// gone stays gone. Where this process saw the session last and the
    /// expiry moves forward by less than the write threshold's fraction of
    /// its lifetime, nothing is sent ([`MapStore::with_write_threshold`]).
    /// Returns whether the session is live, or was when last seen.
    pub async fn touch_data(&self, id: i128, expires_at: i64) -> Result<bool> {
        self.touch_data_keyed(id, None, expires_at).await
    }

    /// [`MapStore::touch_data`] of a session whose old key, while a
    /// takeover of actix-session's store is open, is `key`.
    pub(crate) async fn touch_data_keyed(
        &self,
        id: i128,
        key: Option<&str>,
        expires_at: i64,
    ) -> Result<bool> {
        let touch = self.touch_unobserved(id, key, expires_at);
        metrics::call(Op::Touch, Outcome::of_bool, touch).await
    }

    async fn touch_unobserved(&self, id: i128, key: Option<&str>, expires_at: i64) -> Result<bool> {
        let at = self.capped(id, expiry_secs(expires_at)?);
        if let Some(memory) = self.memo.get(id)
            && self.write_threshold > 0.0
            && self.memo.moves_little(&memory, at, self.write_threshold)
        {
            return Ok(true);
        }
        if let Some((t, old)) = self.takeover_of(id, key).await? {
            // The old key holds the newest state while a takeover is open:
            // a save of it carries the new expiry to both.
            return match self.load_in_takeover(t, &old, id).await? {
                Some((data, _)) => {
                    Ok(self.save_or_gone(id, key, &data, expires_at).await? != Saved::Gone)
                }
                None => Ok(false),
            };
        }
        let now = unix_now();
        if at <= now {
            self.delete_data(id).await?;
            return Ok(false);
        }
        match self.layout.touch_until(&session_id(id), at).await? {
            Some(stored) => {
                self.memo.moved(id, stored);
                Ok(true)
            }
            None => {
                self.memo.take(id);
                Ok(false)
            }
        }
    }

    async fn save_unobserved(
        &self,
        id: i128,
        key: Option<&str>,
        data: &HashMap<String, Value>,
        expires_at: i64,
    ) -> Result<Saved> {
        let (bytes, head) = self.encode(data).await?;
        let at = self.capped(id, expiry_secs(expires_at)?);
        let memory = self.memo.get(id);
        // A session that gains an owner (or changes it) in a save: its
        // index entry first, as for a create.
        if let Some(owner) = self.head(&bytes, head)
            && memory.is_none_or(|m| m.head != self.memo.digest(owner))
        {
            self.layout.ensure_entry(owner, &session_id(id)).await?;
        }
        if let Some(memory) = &memory
            && self.write_threshold > 0.0
            && self
                .memo
                .unchanged(memory, &bytes, at, self.write_threshold)
        {
            return Ok(Saved::Skipped);
        }
        if let Some((t, old)) = self.takeover_of(id, key).await?
            && !self.save_in_takeover(t, &old, id, data, at).await?
        {
            self.memo.take(id);
            return Ok(Saved::Gone);
        }
        let read = memory.and_then(|m| m.read());
        match self
            .layout
            .save_read(&session_id(id), &bytes, at, read)
            .await?
        {
            (Written::Done, kept) => {
                self.memo.put(id, &bytes, head, at, kept);
                Ok(Saved::Written)
            }
            (Written::Missing | Written::Conflict, _) => {
                self.memo.take(id);
                Ok(Saved::Gone)
            }
        }
    }

    /// Loads a live session's data and its expiry (unix seconds).
    pub async fn load_data(&self, id: i128) -> Result<Option<(HashMap<String, Value>, i64)>> {
        self.load_data_keyed(id, None).await
    }

    /// [`MapStore::load_data`] of a session whose old key, while a
    /// takeover of actix-session's store is open, is `key`.
    pub(crate) async fn load_data_keyed(
        &self,
        id: i128,
        key: Option<&str>,
    ) -> Result<Option<(HashMap<String, Value>, i64)>> {
        let load = async move {
            match self.takeover_of(id, key).await? {
                Some((t, old)) => self.load_in_takeover(t, &old, id).await,
                None => self.load_plain(id).await,
            }
        };
        metrics::call(Op::Load, Outcome::of_option, load).await
    }

    /// A load from this store's buckets alone.
    async fn load_plain(&self, id: i128) -> Result<Option<(HashMap<String, Value>, i64)>> {
        let sid = session_id(id);
        if self.absolute.is_some() && self.capped(id, u64::MAX) <= unix_now() {
            return Ok(None);
        }
        let Some((stored, kept)) = self.layout.load_read(&sid).await? else {
            return Ok(None);
        };
        let (data, head) = self.decode_stored(&sid, &stored.record).await?;
        self.memo
            .put(id, &stored.record, head, stored.expires_at, Some(kept));
        Ok(Some((data, stored.expires_at as i64)))
    }

    /// The data map of a stored record, unpacked where it was packed, and
    /// the length of the record's head.
    async fn decode_stored(
        &self,
        sid: &SessionId,
        record: &[u8],
    ) -> Result<(HashMap<String, Value>, usize)> {
        let corrupt = |reason: String| Error::CorruptRecord {
            location: self.layout.location(sid),
            reason,
        };
        let head = self.head_len(record).map_err(corrupt)?;
        let data = self.layout.unpack(sid, &record[head..]).await?;
        let data = json_map::decode(&data).map_err(|e| corrupt(e.to_string()))?;
        Ok((data, head))
    }

    /// Deletes a session (nothing happens if there is none).
    pub async fn delete_data(&self, id: i128) -> Result<()> {
        self.delete_data_keyed(id, None).await
    }

    /// [`MapStore::delete_data`] of a session whose old key, while a
    /// takeover of actix-session's store is open, is `key`.
    pub(crate) async fn delete_data_keyed(&self, id: i128, key: Option<&str>) -> Result<()> {
        metrics::call(Op::Destroy, Outcome::ok, async move {
            if let Some((_, old)) = self.takeover_of(id, key).await? {
                self.delete_in_takeover(&old, id).await?;
            }
            let seen = self.memo.take(id);
            self.layout
                .delete_seen(
                    &session_id(id),
                    seen.map(|m| m.seen.record_len),
                    seen.and_then(|m| m.kept),
                )
                .await?;
            Ok(())
        })
        .await
    }

    /// What the store would otherwise only log: the server's limits and
    /// eviction policy, and how many records went out of line
    /// ([`crate::session::layout::compact::Health`]; its `warnings()` in words).
    pub fn health(&self) -> crate::session::layout::compact::Health {
        self.layout.health()
    }

    /// One sweeper pass: removes expired sessions.
    pub async fn sweep(&self) -> Result<PassReport> {
        self.sweeper.pass().await
    }

    /// An expiry cut to the absolute deadline of `id`, if there is one.
    fn capped(&self, id: i128, at: u64) -> u64 {
        match self.absolute {
            Some(life) => at.min(u64::from(session_id(id).stamp()) + life),
            None => at,
        }
    }

    /// A record: with a user index, the owner (or `nil`) first; and the
    /// length of that head.
    async fn encode(&self, data: &HashMap<String, Value>) -> Result<(Vec<u8>, usize)> {
        let Some((owner_of, label_key)) = self.owner else {
            return Ok((self.layout.pack(encode(data)?).await, 0));
        };
        let mut bytes = Vec::with_capacity(32);
        match owner_of(data) {
            Some(owner) => owner.encode(&mut bytes),
            None => bytes.push(NO_OWNER),
        }
        let head = bytes.len();
        // The label lives in the index entry, not in the record.
        match label_key.filter(|k| data.contains_key(*k)) {
            Some(key) => {
                let mut rest = data.clone();
                rest.remove(key);
                bytes.extend_from_slice(&self.layout.pack(encode(&rest)?).await);
            }
            None => bytes.extend_from_slice(&self.layout.pack(encode(data)?).await),
        }
        Ok((bytes, head))
    }

    /// The label a session's data carries.
    fn label(&self, data: &HashMap<String, Value>) -> Option<String> {
        let key = self.owner?.1?;
        data.get(key)?.as_str().map(label_of)
    }

    /// The owner's bytes at the head of a record, if it has one.
    fn head<'r>(&self, bytes: &'r [u8], head: usize) -> Option<&'r [u8]> {
        (head > 0 && bytes.first() != Some(&NO_OWNER)).then(|| &bytes[..head])
    }

    /// The length of a stored record's head (0 without a user index).
    fn head_len(&self, record: &[u8]) -> std::result::Result<usize, String> {
        if self.owner.is_none() {
            return Ok(0);
        }
        if record.first() == Some(&NO_OWNER) {
            return Ok(1);
        }
        let (_, rest) = crate::session::record::split(record)?;
        Ok(record.len() - rest.len())
    }
}

/// What [`MapStore::import_data`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Imported {
    /// Stored under the id.
    Created,
    /// The id is the store's already (a session, or a revocation's or
    /// rotation's mark); nothing was written.
    Taken,
    /// Its expiry had passed; nothing was stored.
    Expired,
}

/// What a save did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Saved {
    Written,
    /// The session was gone; it stays gone.
    Gone,
    /// Unchanged within the write threshold: nothing sent.
    Skipped,
}

impl Saved {
    fn outcome(&self) -> Outcome {
        match self {
            Self::Written => Outcome::Ok,
            Self::Gone => Outcome::Missing,
            Self::Skipped => Outcome::Skipped,
        }
    }
}

/// The tower-sessions id (`Id.0`) of a 128-bit session id.
pub fn tower_id(id: &SessionId) -> i128 {
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&id.as_bytes()[..16]);
    i128::from_le_bytes(bytes)
}

/// The sessionpack id for a tower-sessions id: its 16 bytes, little-endian
/// as in its cookie.
pub fn session_id(id: i128) -> SessionId {
    SessionId::from_slice(&id.to_le_bytes()).expect("16 bytes is a 128-bit id")
}

fn encode(data: &HashMap<String, Value>) -> Result<Vec<u8>> {
    Ok(json_map::encode(data)?)
}

/// A tower-sessions expiry as the unix seconds a layout stores: one before
/// 1970 is 0 (already past); one past [`crate::ttl::MAX_EXPIRES_AT`]
/// (February 2106, the last second a layout's 32-bit expiry holds) is that
/// second, so a session meant to last longer ends then.
fn expiry_secs(unix: i64) -> Result<u64> {
    let at = u64::try_from(unix)
        .unwrap_or(0)
        .min(crate::ttl::MAX_EXPIRES_AT);
    Deadline::At(at).check()?;
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_to_their_cookie_bytes() {
        let id = session_id(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10);
        assert_eq!(id.as_bytes().len(), 16);
        assert_eq!(id.as_bytes()[0], 0x10);
        assert_eq!(id.as_bytes()[15], 0x01);
    }

    #[test]
    fn expiries_before_1970_are_past_and_after_2106_end_then() {
        assert_eq!(expiry_secs(-5).unwrap(), 0);
        let last = crate::ttl::MAX_EXPIRES_AT;
        assert_eq!(expiry_secs(1 << 40).unwrap(), last);
        assert_eq!(expiry_secs(i64::MAX).unwrap(), last);
        assert_eq!(expiry_secs(last as i64 - 1).unwrap(), last - 1);
    }
}
