//! The typed session store: ids, records and retries over any [`Layout`].

use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::identity::UserId;
use crate::layout::{Expiry, Inserted, Layout, Stored, Written};
use crate::record;

/// Default session lifetime: 30 days.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Default largest encoded record accepted: 1 MiB.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1 << 20;
/// Default number of tries of an optimistic [`Store::update`].
pub const DEFAULT_UPDATE_ATTEMPTS: u32 = 32;
/// Tries at drawing an unused id before giving up (a collision of 160-bit
/// random ids means a broken random number generator).
const ID_ATTEMPTS: u32 = 4;

/// One session: who it belongs to, when it expires, and the application's
/// attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session<A, I = u64> {
    /// The session's id; its `Debug` form is redacted.
    pub id: SessionId,
    /// The user the session belongs to.
    pub identity: I,
    /// Unix time in seconds at which it expires, by the Redis server's clock.
    pub expires_at: u64,
    /// The application's own attributes.
    pub attrs: A,
}

/// A session store over a [`Layout`], with attributes of type `A` and
/// identities of type `I`.
///
/// `A` is any `Serialize + DeserializeOwned` type, encoded as compact
/// MessagePack; use `()` for identity-only sessions. `I` is `u64` (the
/// default), [`crate::identity::Uuid`], [`crate::identity::Name`] or
/// [`crate::identity::Identity`] ([`Store::for_identities`]).
pub struct Store<L, A = (), I = u64> {
    layout: L,
    ttl_secs: u64,
    max_record_bytes: usize,
    update_attempts: u32,
    _attrs: PhantomData<fn() -> (A, I)>,
}

impl<L: Clone, A, I> Clone for Store<L, A, I> {
    fn clone(&self) -> Self {
        Self {
            layout: self.layout.clone(),
            ttl_secs: self.ttl_secs,
            max_record_bytes: self.max_record_bytes,
            update_attempts: self.update_attempts,
            _attrs: PhantomData,
        }
    }
}

impl<L: std::fmt::Debug, A, I> std::fmt::Debug for Store<L, A, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("layout", &self.layout)
            .field("ttl_secs", &self.ttl_secs)
            .field("max_record_bytes", &self.max_record_bytes)
            .field("update_attempts", &self.update_attempts)
            .finish()
    }
}

/// A lifetime in whole seconds, rounded up (at least one). Saturates
/// rather than overflowing: a lifetime past
/// [`crate::layout::MAX_TTL_SECS`] is refused when it is used, with
/// [`Error::InvalidTtl`].
fn whole_seconds(d: Duration) -> u64 {
    d.as_secs()
        .saturating_add(u64::from(d.subsec_nanos() > 0))
        .max(1)
}

impl<L, A> Store<L, A, u64>
where
    L: Layout,
    A: Serialize + DeserializeOwned + Send + Sync,
{
    /// A store of sessions owned by integer ids, with the default lifetime
    /// and limits.
    pub fn new(layout: L) -> Self {
        Self::for_identities(layout)
    }
}

impl<L, A, I> Store<L, A, I>
where
    L: Layout,
    A: Serialize + DeserializeOwned + Send + Sync,
    I: UserId,
{
    /// A store of sessions owned by identities of type `I`, with the
    /// default lifetime and limits:
    /// `let store: Store<_, Cart, Uuid> = Store::for_identities(layout);`.
    pub fn for_identities(layout: L) -> Self {
        Self {
            layout,
            ttl_secs: DEFAULT_TTL.as_secs(),
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            update_attempts: DEFAULT_UPDATE_ATTEMPTS,
            _attrs: PhantomData,
        }
    }

    /// Sets the lifetime given to new and touched sessions, rounded up to
    /// whole seconds (at least one). One longer than
    /// [`crate::layout::MAX_TTL_SECS`] makes every create and touch fail with
    /// [`Error::InvalidTtl`].
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl_secs = whole_seconds(ttl);
        self
    }

    /// Sets the largest encoded record accepted.
    pub fn with_max_record_bytes(mut self, bytes: usize) -> Self {
        self.max_record_bytes = bytes;
        self
    }

    /// Sets how many times [`Store::update`] tries before giving up with
    /// [`Error::Contended`].
    pub fn with_update_attempts(mut self, attempts: u32) -> Self {
        self.update_attempts = attempts.max(1);
        self
    }

    /// The layout underneath.
    pub fn layout(&self) -> &L {
        &self.layout
    }

    /// The lifetime given to new and touched sessions.
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_secs)
    }

    fn encode(&self, identity: &I, attrs: &A) -> Result<Vec<u8>> {
        let bytes = record::encode(identity, attrs)?;
        if bytes.len() > self.max_record_bytes {
            return Err(Error::TooLarge {
                size: bytes.len(),
                limit: self.max_record_bytes,
            });
        }
        Ok(bytes)
    }

    fn decode(&self, id: SessionId, stored: Stored) -> Result<Session<A, I>> {
        let (identity, attrs) =
            record::decode(&stored.record).map_err(|reason| Error::CorruptRecord {
                location: self.layout.location(&id),
                reason,
            })?;
        Ok(Session {
            id,
            identity,
            expires_at: stored.expires_at,
            attrs,
        })
    }

    /// Creates a session for `identity`, living for the store's TTL.
    pub async fn create(&self, identity: I, attrs: A) -> Result<Session<A, I>> {
        self.create_with_ttl(identity, attrs, self.ttl()).await
    }

    /// Creates a session with its own lifetime.
    pub async fn create_with_ttl(
        &self,
        identity: I,
        attrs: A,
        ttl: Duration,
    ) -> Result<Session<A, I>> {
        let record = self.encode(&identity, &attrs)?;
        let expiry = Expiry::In(whole_seconds(ttl)).check()?;
        let mut late = 0;
        for _ in 0..ID_ATTEMPTS {
            let id = self.layout.new_id().await?;
            match self.layout.insert(&id, &record, expiry).await? {
                Inserted::Created { expires_at } => {
                    return Ok(Session {
                        id,
                        identity,
                        expires_at,
                        attrs,
                    });
                }
                // Taken, or blocked by a revocation: draw another.
                Inserted::IdTaken => continue,
                // With a user index, the id's stamp was refused: the
                // create took too long, or the clock estimate is off.
                Inserted::Late => late += 1,
                Inserted::AlreadyExpired => {
                    // A lifetime from now cannot have passed: the layout
                    // misread the server's reply.
                    return Err(Error::InvalidTtl {
                        detail: format!("the server refused a lifetime of {ttl:?}"),
                    });
                }
            }
        }
        if late == ID_ATTEMPTS {
            return Err(Error::Config(format!(
                "the server refused the issue time stamped in {late} fresh ids in a row: \
                 ids must come from Layout::new_id, and the server's clock must be steady"
            )));
        }
        Err(Error::Contended {
            attempts: ID_ATTEMPTS,
        })
    }

    /// Creates many sessions in pipelined round trips; returns their ids in
    /// order.
    pub async fn create_many(&self, sessions: &[(I, A)]) -> Result<Vec<SessionId>> {
        let mut items = Vec::with_capacity(sessions.len());
        for (identity, attrs) in sessions {
            items.push((self.layout.new_id().await?, self.encode(identity, attrs)?));
        }
        let results = self.layout.insert_many(&items, self.ttl_secs).await?;
        let mut taken = taken_positions(0..items.len(), results);
        // A taken id means a broken RNG or a replayed id: draw again for
        // just those items, a bounded number of times.
        for _ in 1..ID_ATTEMPTS {
            if taken.is_empty() {
                break;
            }
            for &i in &taken {
                items[i].0 = self.layout.new_id().await?;
            }
            let retry: Vec<_> = taken.iter().map(|&i| items[i].clone()).collect();
            let results = self.layout.insert_many(&retry, self.ttl_secs).await?;
            taken = taken_positions(taken, results);
        }
        if !taken.is_empty() {
            return Err(Error::Contended {
                attempts: ID_ATTEMPTS,
            });
        }
        Ok(items.into_iter().map(|(id, _)| id).collect())
    }

    /// Loads a live session.
    pub async fn load(&self, id: &SessionId) -> Result<Option<Session<A, I>>> {
        match self.layout.load(id).await? {
            Some(stored) => self.decode(*id, stored).map(Some),
            None => Ok(None),
        }
    }

    /// Parses a cookie value strictly (an id of the layout's width) and
    /// loads the session. A malformed value is an [`Error::InvalidId`] and
    /// never reaches Redis.
    pub async fn load_cookie(&self, cookie: &str) -> Result<Option<Session<A, I>>> {
        let id = SessionId::parse_with(cookie, self.layout.id_width())?;
        self.load(&id).await
    }

    /// Loads many sessions in pipelined round trips; one result per id.
    pub async fn load_many(&self, ids: &[SessionId]) -> Result<Vec<Option<Session<A, I>>>> {
        let found = self.layout.load_many(ids).await?;
        ids.iter()
            .zip(found)
            .map(|(id, stored)| stored.map(|s| self.decode(*id, s)).transpose())
            .collect()
    }

    /// Rolls a live session's expiry forward by the store's TTL; returns the
    /// new expiry, or `None` if the session is gone.
    pub async fn touch(&self, id: &SessionId) -> Result<Option<u64>> {
        self.layout.touch(id, self.ttl_secs).await
    }

    /// Overwrites a live session's identity and attributes, keeping its
    /// expiry. Returns `false` (and writes nothing) if it is gone.
    ///
    /// Last writer wins; use [`Store::update`] to change attributes without
    /// losing a concurrent change.
    pub async fn save(&self, session: &Session<A, I>) -> Result<bool> {
        let record = self.encode(&session.identity, &session.attrs)?;
        let written = self.layout.replace(&session.id, &record, None).await?;
        Ok(written == Written::Done)
    }

    /// Changes a live session's attributes with `change`, atomically with
    /// respect to other writers: if the record changed between the read and
    /// the write, it is read again and `change` runs again. Returns the
    /// session as written, or `None` if it is gone.
    pub async fn update<F>(&self, id: &SessionId, mut change: F) -> Result<Option<Session<A, I>>>
    where
        F: FnMut(&mut A) + Send,
    {
        for attempt in 0..self.update_attempts {
            let Some(stored) = self.layout.load(id).await? else {
                return Ok(None);
            };
            let expected = stored.record.clone();
            let mut session = self.decode(*id, stored)?;
            change(&mut session.attrs);
            let record = self.encode(&session.identity, &session.attrs)?;
            match self.layout.replace(id, &record, Some(&expected)).await? {
                Written::Done => return Ok(Some(session)),
                Written::Missing => return Ok(None),
                Written::Conflict => backoff(attempt).await,
            }
        }
        Err(Error::Contended {
            attempts: self.update_attempts,
        })
    }

    /// Destroys a session (log-out). Returns whether a live one existed.
    pub async fn destroy(&self, id: &SessionId) -> Result<bool> {
        Ok(self.layout.remove(id, None).await? == Written::Done)
    }

    /// Moves a live session to a fresh id (after log-in or a privilege
    /// change), keeping its record and expiry. When this returns the new id,
    /// the old one finds nothing. On an error the old id still holds the
    /// session, and the new one, if written, is removed or expires with it.
    pub async fn rotate(&self, id: &SessionId) -> Result<Option<SessionId>> {
        for attempt in 0..self.update_attempts {
            let Some(stored) = self.layout.load(id).await? else {
                return Ok(None);
            };
            let new_id = self.layout.new_id().await?;
            match self
                .layout
                .insert(&new_id, &stored.record, Expiry::At(stored.expires_at))
                .await?
            {
                Inserted::Created { .. } => {}
                Inserted::IdTaken | Inserted::Late => continue,
                Inserted::AlreadyExpired => return Ok(None),
            }
            // The old id goes only if no one wrote to it or touched it
            // meanwhile; otherwise the copy is stale: drop it and go again.
            match self.layout.remove(id, Some(&stored)).await {
                Ok(Written::Done) => return Ok(Some(new_id)),
                Ok(Written::Missing) => {
                    self.layout.remove(&new_id, None).await?;
                    return Ok(None);
                }
                Ok(Written::Conflict) => {
                    self.layout.remove(&new_id, None).await?;
                    backoff(attempt).await;
                }
                Err(e) => {
                    // Best effort: the copy also expires with the original.
                    let _ = self.layout.remove(&new_id, None).await;
                    return Err(e);
                }
            }
        }
        Err(Error::Contended {
            attempts: self.update_attempts,
        })
    }
}

/// The positions whose insert found the id taken (or, with a user index,
/// refused it as late).
fn taken_positions(
    positions: impl IntoIterator<Item = usize>,
    results: Vec<Inserted>,
) -> Vec<usize> {
    positions
        .into_iter()
        .zip(results)
        .filter(|(_, r)| matches!(r, Inserted::IdTaken | Inserted::Late))
        .map(|(i, _)| i)
        .collect()
}

/// A short randomised pause between optimistic retries, so that writers
/// contending for one session spread out instead of colliding in lock-step.
async fn backoff(attempt: u32) {
    use rand::Rng;
    let cap_us = 50u64 << attempt.min(6);
    let pause = rand::rng().random_range(0..=cap_us);
    tokio::time::sleep(Duration::from_micros(pause)).await;
}
