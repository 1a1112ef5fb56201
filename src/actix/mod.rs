//! An [actix-session] store that keeps sessions in compact listpack
//! buckets ([`crate::Compact`], 128-bit ids): a drop-in for actix-web apps,
//! actix-identity included.
//!
//! Feature `actix-session` implements `actix_session::storage::SessionStore`
//! of actix-session 0.11 (the current release).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use actix_session::SessionMiddleware;
//! use actix_web::cookie::Key;
//! use actix_web::{App, HttpServer};
//! use sessionpack::actix::ActixStore;
//!
//! let store = ActixStore::connect("redis://127.0.0.1/").await?;
//! let key = Key::generate(); // a real app reads its key from its secrets
//! HttpServer::new(move || App::new().wrap(SessionMiddleware::new(store.clone(), key.clone())))
//!     .bind("127.0.0.1:8080")?
//!     .run()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! [`ActixStore::connect`] opens the store as most apps want it: buckets
//! that grow and shrink with the sessions, a write threshold that lets an
//! `update_ttl` that moves the expiry little send nothing, and a sweeper in
//! the background that removes expired sessions (every process of the app
//! runs one; they share the work through leases) and stops when the last
//! clone of the store is dropped. [`ActixStore::new`] takes a connection
//! and a [`CompactConfig`] of your own (a user index for "log out
//! everywhere", a fixed bucket count, a cluster or TLS connection);
//! [`ActixStore::without_sweeper`] leaves the sweeping to a `sessionpack
//! sweep` daemon.
//!
//! **Keys.** The store issues each session's key itself, as the trait
//! asks: the 32 lowercase hex digits of a random 128-bit id (stamped with
//! its issue time where the store keeps a user index). A key of any other
//! form (a forged or stale cookie, or one of another store) loads no
//! session, and the middleware starts a fresh one: it is never an error.
//! A key of actix-session's own form (64 letters and digits) names the
//! session `sessionpack migrate --from actix-session` copied from it; while
//! a takeover of actix-session's store is open
//! ([`ActixStore::with_takeover`]) new sessions get keys of that form, so
//! old instances load them too.
//!
//! **State.** actix-session keeps a session as a map of keys to JSON
//! texts. Each text is parsed and kept in [`crate::json_map`]'s encoding
//! (keys as codes, numbers and strings in MessagePack, the keys
//! actix-identity writes as one byte each) when writing the parsed value
//! back gives the same text, which it does for every value
//! `Session::insert` writes with serde_json; any other text is kept as
//! it came, so a load returns every text exactly as it was saved. A map
//! with a key that begins with a NUL byte is refused
//! ([`actix_session::storage::SaveError::Serialization`]): the store marks
//! texts kept whole under such a key.
//!
//! **Calls** (one round trip each, as the tower-sessions store's, whose
//! JSON-map store this one shares, [`crate::map_store::MapStore`]):
//!
//! - `save` (a new session): `MULTI`, `HSETNX`, `ZADD LT`, `EXEC`; a key
//!   already taken draws another.
//! - `load`: one `HGET` (`HMGET` for a record in pieces).
//! - `update`: one `HSETEX FXX` where this process read the session and
//!   its record keeps the form it read (a two-command script on servers
//!   before Redis 8.0 and Valkey 9.0), else one script that writes only
//!   while the session is live by the server's clock (the guide's plain
//!   writes). A session that is gone (deleted, expired and swept, or
//!   revoked by "log out everywhere") **stays gone**: the update writes
//!   nothing and returns the same key, whose next load finds no session.
//!   actix-session's own Redis store instead saves the state under a new
//!   key, which would bring a revoked login back.
//! - `update_ttl`: one touch script, or nothing where the expiry moves by
//!   less than the write threshold ([`ActixStore::with_write_threshold`]).
//! - `delete`: `HDEL` of the session's field where this process read its
//!   record whole; else a script of two commands that reads the value and
//!   removes the field, its pieces and an out-of-line record's key.
//!
//! **Users.** With a user index ([`crate::CompactConfig::with_user_index`]),
//! the store reads each session's owner from the id actix-identity keeps
//! (`actix_identity.user_id`: a UUID in its usual form is
//! [`Identity::Uuid`], any other string of at most 64 bytes
//! [`Identity::Name`]) and offers "your devices"
//! ([`ActixStore::sessions_of`]) and "log out everywhere"
//! ([`ActixStore::revoke_all`], [`ActixStore::revoke_others`]). A log-out
//! (`Session::purge`) deletes the session; its index entry goes at the
//! sweeper's next full pass, and no listing shows it meanwhile (a listing
//! skips entries whose session is gone).
//!
//! [actix-session]: https://docs.rs/actix-session

use std::collections::HashMap;

use actix_session::storage::{LoadError, SaveError, SessionKey, SessionStore, UpdateError};
use serde_json::Value;

use crate::clock::unix_now;
use crate::error::{Error, Result};
use crate::identity::{Identity, MAX_NAME_BYTES, Uuid};
use crate::map_store::MapStore;
use crate::session::dictionary::Dictionary;
use crate::session::layout::{Compact, CompactConfig};
use crate::session::sweep::SweepConfig;
use crate::users::{Revoked, UserSession};

mod state;

pub(crate) use state::values as state_values;

pub use state::RAW_TEXTS;

/// The key actix-identity keeps the logged-in user's id under.
pub const IDENTITY_KEY: &str = "actix_identity.user_id";

/// The owner actix-identity records: the string under [`IDENTITY_KEY`], a
/// UUID in its usual form or else a name of at most 64 bytes. Anything
/// else is no one.
pub fn actix_identity_owner(data: &HashMap<String, Value>) -> Option<Identity> {
    let id = data.get(IDENTITY_KEY)?.as_str()?;
    Some(match id.parse::<Uuid>() {
        Ok(uuid) => Identity::Uuid(uuid.0),
        Err(_) if id.len() <= MAX_NAME_BYTES => Identity::Name(id.to_owned()),
        Err(_) => return None,
    })
}

/// An actix-session store over a [`Compact`] layout with 128-bit ids.
#[derive(Clone, Debug)]
pub struct ActixStore<C> {
    inner: MapStore<C>,
}

impl ActixStore<crate::Connection> {
    /// Connects to the Redis server at `url` (a reconnecting
    /// [`crate::Connection`]) and opens the store as most apps want it:
    /// [`crate::map_store::recommended_config_for`] the server, the write threshold
    /// [`crate::map_store::DEFAULT_WRITE_THRESHOLD`], and a sweeper running in
    /// the background that stops when the last clone of the store is
    /// dropped ([`ActixStore::without_sweeper`] turns it off). The knobs
    /// (a user index for "log out everywhere", a fixed bucket count) are
    /// [`ActixStore::new`]'s.
    pub async fn connect(url: &str) -> Result<Self> {
        let conn = crate::connect(url).await?;
        let config = crate::map_store::recommended_config_for(&conn).await?;
        Ok(Self::new(conn, config)
            .await?
            .with_write_threshold(crate::map_store::DEFAULT_WRITE_THRESHOLD))
    }
}

impl<C> ActixStore<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Opens the store: a [`Compact`] layout with `config` and 128-bit
    /// ids, whatever width `config` names. Inside a Tokio runtime (an
    /// actix-web app's) it starts a sweeper in the background, as
    /// [`ActixStore::connect`] does; the write threshold is 0 until
    /// [`ActixStore::with_write_threshold`] sets one.
    pub async fn new(conn: C, config: CompactConfig) -> Result<Self> {
        Self::from_layout(Compact::new(conn, config.with_id_width(crate::IdWidth::Bits128)).await?)
    }

    /// A store over a layout already open; its ids must be 128 bits wide.
    pub fn from_layout(layout: Compact<C>) -> Result<Self> {
        let inner = MapStore::from_layout(layout)?.with_owner(actix_identity_owner, None);
        Ok(Self { inner })
    }

    /// Packs each session's state with `dictionary` where that makes it
    /// shorter ([`Compact::with_dictionary`]).
    pub async fn with_dictionary(mut self, dictionary: &Dictionary) -> Result<Self> {
        self.inner = self.inner.with_dictionary(dictionary).await?;
        Ok(self)
    }

    /// Reads owners with `owner` rather than [`actix_identity_owner`], and
    /// labels for "your devices" from the string under `label_key` (moved
    /// to the index entry, not kept in the record). A store with a user
    /// index only; without one this does nothing.
    pub fn with_owner(
        mut self,
        owner: crate::map_store::OwnerOf,
        label_key: Option<&'static str>,
    ) -> Self {
        self.inner = self.inner.with_owner(owner, label_key);
        self
    }

    /// Lets an update that changes nothing but the expiry, and an
    /// `update_ttl`, skip the write when the expiry moves by less than
    /// `fraction` (0..=1) of the session's remaining lifetime: with
    /// actix-session's `TtlExtensionPolicy::OnEveryRequest`, most requests
    /// then only read. A session may then end up to that fraction of its
    /// lifetime earlier than the last request implied. Default 0: every
    /// call writes.
    pub fn with_write_threshold(mut self, fraction: f64) -> Self {
        self.inner = self.inner.with_write_threshold(fraction);
        self
    }

    /// Remembers the last `capacity` sessions this process saw, for the
    /// write threshold and deletes ([`MapStore::with_memo_capacity`]).
    pub fn with_memo_capacity(mut self, capacity: usize) -> Self {
        self.inner = self.inner.with_memo_capacity(capacity);
        self
    }

    /// Ends every session `lifetime` after it was created, whatever TTL
    /// actix-session gives it ([`MapStore::with_absolute_lifetime`]).
    pub fn with_absolute_lifetime(mut self, lifetime: std::time::Duration) -> Self {
        self.inner = self.inner.with_absolute_lifetime(lifetime);
        self
    }

    /// The idle timeout the app gives sessions, from which a listing
    /// tells when each was last used.
    pub fn with_idle_timeout(mut self, idle: std::time::Duration) -> Self {
        self.inner = self.inner.with_idle_timeout(idle);
        self
    }

    /// Sweeps with `config` (interval, leases, cap), in the background
    /// and in [`ActixStore::sweep`], in place of the default.
    pub fn with_sweep_config(mut self, config: SweepConfig) -> Self {
        self.inner = self.inner.with_sweep_config(config);
        self
    }

    /// Runs no sweeper in the background: for an app whose expired
    /// sessions a `sessionpack sweep` daemon removes
    /// ([`MapStore::without_sweeper`]).
    pub fn without_sweeper(mut self) -> Self {
        self.inner = self.inner.without_sweeper();
        self
    }

    /// The totals of the sweeper this store runs in the background, for a
    /// health check; `None` when it runs none.
    pub fn sweep_stats(&self) -> Option<crate::session::sweep::SweepStats> {
        self.inner.sweep_stats()
    }

    /// The layout underneath.
    pub fn layout(&self) -> &Compact<C> {
        self.inner.layout()
    }

    /// One sweeper pass: removes expired sessions.
    pub async fn sweep(&self) -> Result<crate::session::sweep::PassReport> {
        self.inner.sweep().await
    }

    /// The live sessions of `owner` ("your devices"); compare each `id`
    /// with the current session's through [`session_key`]. Needs a user
    /// index.
    pub async fn sessions_of(&self, owner: &Identity) -> Result<Vec<UserSession>> {
        self.inner.sessions_of(owner).await
    }

    /// Revokes every session of `owner` ("log out everywhere").
    pub async fn revoke_all(&self, owner: &Identity) -> Result<Revoked> {
        self.inner.revoke_all(owner).await
    }

    /// Revokes every session of `owner` but the one under `keep` (the
    /// current one). A key of no session of this store keeps none.
    pub async fn revoke_others(&self, owner: &Identity, keep: &str) -> Result<Revoked> {
        match id_of(keep) {
            Some(keep) => self.inner.revoke_others(owner, keep).await,
            None => self.inner.revoke_all(owner).await,
        }
    }

    /// Takes over the sessions of actix-session's `RedisSessionStore` on
    /// the same server during a rolling deploy: old instances (on
    /// actix-session's store) and new ones (on this store) serve side by
    /// side, each seeing the other's writes, until `sessionpack migrate
    /// --from actix-session --delete-copied` closes the takeover. `source`
    /// is [`crate::takeover::Source::actix_session`] (or one with the
    /// prefix the old store's `cache_keygen` adds).
    ///
    /// While it is open, a session's old key is its cookie's key (its id is
    /// that key's [`crate::takeover::hashed_id`]), and the calls are those
    /// of [`crate::map_store::MapStore::with_takeover`], the old key written
    /// in actix-session's form: a new session gets a key of actix-session's
    /// form too (`SET NX EXAT` of its state), so an old instance loads it;
    /// an update writes the old key first (`SET XX EXAT`), a delete deletes
    /// it. With a user index, each session's mark keeps its key (packed in
    /// 48 bytes), so "log out everywhere" deletes the old keys of the
    /// owner's sessions. Refused for a source of another form, or a store
    /// with an absolute lifetime.
    pub async fn with_takeover(mut self, source: crate::takeover::Source) -> Result<Self> {
        use crate::takeover::{IdForm, ValueForm};
        if source.id != IdForm::ActixSessionKey || source.value != ValueForm::ActixState {
            return Err(Error::Config(
                "an actix store takes over only actix-session's keys (Source::actix_session)"
                    .into(),
            ));
        }
        self.inner = self.inner.open_takeover_of(source).await?;
        Ok(self)
    }

    /// A new session holding `state` for `ttl_secs`; returns its key: 32
    /// hex digits, or an actix-session key while a takeover of
    /// actix-session's store is open.
    async fn create(&self, state: &HashMap<String, Value>, ttl_secs: i64) -> Result<String> {
        let expires_at = expires_at(ttl_secs);
        let old_keys = self.inner.issues_old_keys().await?;
        let fresh = move || {
            if old_keys {
                let key = actix_session_key();
                (id_of_actix_key(&key), Some(key))
            } else {
                (random_id(), None)
            }
        };
        let (id, key) = self
            .inner
            .create_data_keyed(fresh(), state, expires_at, fresh)
            .await?;
        Ok(key.unwrap_or_else(|| session_key(id)))
    }
}

/// A session key of actix-session's own form: 64 random ASCII letters and
/// digits, as its middleware draws them.
fn actix_session_key() -> String {
    use rand::Rng;
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(crate::takeover::ACTIX_KEY_CHARS)
        .map(char::from)
        .collect()
}

fn id_of_actix_key(key: &str) -> i128 {
    crate::map_store::tower_id(&crate::takeover::hashed_id(key.as_bytes()))
}

/// actix-session's `RedisSessionStore` value for `data`: its state (keys to
/// JSON texts) as a JSON object.
pub(crate) fn state_json(data: &HashMap<String, Value>) -> Result<Vec<u8>> {
    let encode = |e: String| Error::EncodeData(crate::json_map::CodecError::new(e));
    let texts = state::texts(data.clone()).map_err(encode)?;
    serde_json::to_vec(&texts).map_err(|e| encode(e.to_string()))
}

/// The session's key where it is one of actix-session's form: the old
/// key a takeover reads and writes.
fn old_key(key: &str) -> Option<&str> {
    crate::takeover::is_actix_key(key.as_bytes()).then_some(key)
}

/// The key of the session whose id is `id`: 32 lowercase hex digits.
pub fn session_key(id: i128) -> String {
    format!("{:032x}", id as u128)
}

/// The id a key names: one this store issues, or actix-session's own
/// 64-character key of a session `sessionpack migrate --from
/// actix-session` copied in, which is read as
/// [`crate::takeover::hashed_id`] of it (so its cookie stays valid).
pub fn id_of(key: &str) -> Option<i128> {
    if crate::takeover::is_actix_key(key.as_bytes()) {
        return Some(id_of_actix_key(key));
    }
    if key.len() != 32 || !key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u128::from_str_radix(key, 16).ok().map(|id| id as i128)
}

fn random_id() -> i128 {
    rand::random::<u128>() as i128
}

/// Unix seconds `ttl_secs` from now; a TTL of zero or less is already
/// past.
fn expires_at(ttl_secs: i64) -> i64 {
    i64::try_from(unix_now())
        .unwrap_or(i64::MAX)
        .saturating_add(ttl_secs)
}

fn other(e: Error) -> anyhow::Error {
    anyhow::Error::new(e)
}

impl<C> SessionStore for ActixStore<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn load(
        &self,
        session_key: &SessionKey,
    ) -> std::result::Result<Option<HashMap<String, String>>, LoadError> {
        let Some(id) = id_of(session_key.as_ref()) else {
            return Ok(None);
        };
        match self
            .inner
            .load_data_keyed(id, old_key(session_key.as_ref()))
            .await
        {
            Ok(Some((data, _))) => state::texts(data)
                .map(Some)
                .map_err(|e| LoadError::Deserialization(anyhow::anyhow!("session state: {e}"))),
            Ok(None) => Ok(None),
            Err(e @ Error::CorruptRecord { .. }) => Err(LoadError::Deserialization(other(e))),
            Err(e) => Err(LoadError::Other(other(e))),
        }
    }

    async fn save(
        &self,
        session_state: HashMap<String, String>,
        ttl: &time::Duration,
    ) -> std::result::Result<SessionKey, SaveError> {
        let data = state::values(session_state)
            .map_err(|e| SaveError::Serialization(other(Error::EncodeData(e))))?;
        let key = self
            .create(&data, ttl.whole_seconds())
            .await
            .map_err(|e| match e {
                e @ Error::EncodeData(_) => SaveError::Serialization(other(e)),
                e => SaveError::Other(other(e)),
            })?;
        SessionKey::try_from(key).map_err(|e| SaveError::Other(anyhow::Error::new(e)))
    }

    async fn update(
        &self,
        session_key: SessionKey,
        session_state: HashMap<String, String>,
        ttl: &time::Duration,
    ) -> std::result::Result<SessionKey, UpdateError> {
        let data = state::values(session_state)
            .map_err(|e| UpdateError::Serialization(other(Error::EncodeData(e))))?;
        let Some(id) = id_of(session_key.as_ref()) else {
            // Not a key of this store: the state goes into a new session,
            // as the middleware saves one it did not load.
            let key = self
                .create(&data, ttl.whole_seconds())
                .await
                .map_err(|e| UpdateError::Other(other(e)))?;
            return SessionKey::try_from(key)
                .map_err(|e| UpdateError::Other(anyhow::Error::new(e)));
        };
        // A session that is gone stays gone: nothing is written, and the
        // key's next load finds no session (see the module's docs).
        self.inner
            .save_data_keyed(
                id,
                old_key(session_key.as_ref()),
                &data,
                expires_at(ttl.whole_seconds()),
            )
            .await
            .map_err(|e| match e {
                e @ Error::EncodeData(_) => UpdateError::Serialization(other(e)),
                e => UpdateError::Other(other(e)),
            })?;
        Ok(session_key)
    }

    async fn update_ttl(
        &self,
        session_key: &SessionKey,
        ttl: &time::Duration,
    ) -> std::result::Result<(), anyhow::Error> {
        if let Some(id) = id_of(session_key.as_ref()) {
            self.inner
                .touch_data_keyed(
                    id,
                    old_key(session_key.as_ref()),
                    expires_at(ttl.whole_seconds()),
                )
                .await
                .map_err(other)?;
        }
        Ok(())
    }

    async fn delete(&self, session_key: &SessionKey) -> std::result::Result<(), anyhow::Error> {
        if let Some(id) = id_of(session_key.as_ref()) {
            self.inner
                .delete_data_keyed(id, old_key(session_key.as_ref()))
                .await
                .map_err(other)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_32_lowercase_hex_digits_and_nothing_else() {
        for id in [0i128, 1, -1, i128::MAX, i128::MIN, 0x0123_4567_89ab_cdef] {
            let key = session_key(id);
            assert_eq!(key.len(), 32);
            assert_eq!(id_of(&key), Some(id));
        }
        let good = session_key(42);
        for bad in [
            "",
            &good[1..],
            &format!("{good}0"),
            &good.to_uppercase(),
            "+0000000000000000000000000000001",
            "../../../../../../../../etc/pass",
            "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
        ] {
            assert_eq!(id_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_ttl_of_zero_or_less_is_past() {
        let now = unix_now() as i64;
        assert!(expires_at(0) <= now);
        assert!(expires_at(-10) < now);
        assert_eq!(expires_at(i64::MAX), i64::MAX);
    }
}
