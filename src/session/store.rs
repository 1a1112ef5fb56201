//! The typed session store: ids, records and retries over any [`Layout`].

use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::clock::unix_now;
use crate::error::{Error, Result};
use crate::identity::UserId;
use crate::metrics::{self, Op, Outcome};
use crate::session::id::SessionId;
use crate::session::layout::{Inserted, Layout, Stored, Written};
use crate::session::record;
use crate::session::sweep::{InApp, SweepConfig, SweepStats, Sweepable};
use crate::ttl::Deadline;

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
    /// Whether a touch moves the expiry (the idle timeout is on).
    rolling: bool,
    /// Seconds after its id's stamp a session dies, whatever the touches.
    absolute_secs: Option<u64>,
    max_record_bytes: usize,
    update_attempts: u32,
    /// The sweeper this store runs, shared by its clones.
    sweeping: InApp,
    _attrs: PhantomData<fn() -> (A, I)>,
}

impl<L: Clone, A, I> Clone for Store<L, A, I> {
    fn clone(&self) -> Self {
        Self {
            layout: self.layout.clone(),
            ttl_secs: self.ttl_secs,
            rolling: self.rolling,
            absolute_secs: self.absolute_secs,
            max_record_bytes: self.max_record_bytes,
            update_attempts: self.update_attempts,
            sweeping: self.sweeping.clone(),
            _attrs: PhantomData,
        }
    }
}

impl<L: std::fmt::Debug, A, I> std::fmt::Debug for Store<L, A, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("layout", &self.layout)
            .field("ttl_secs", &self.ttl_secs)
            .field("rolling", &self.rolling)
            .field("absolute_secs", &self.absolute_secs)
            .field("max_record_bytes", &self.max_record_bytes)
            .field("update_attempts", &self.update_attempts)
            .field("sweeping", &self.sweeping)
            .finish()
    }
}

/// A lifetime in whole seconds, rounded up (at least one). Saturates
/// rather than overflowing: a lifetime past
/// [`crate::ttl::MAX_TTL_SECS`] is refused when it is used, with
/// [`Error::InvalidTtl`].
fn whole_seconds(d: Duration) -> u64 {
    d.as_secs()
        .saturating_add(u64::from(d.subsec_nanos() > 0))
        .max(1)
}

impl<L, A> Store<L, A, u64>
where
    L: Layout + Sweepable,
    A: Serialize + DeserializeOwned + Send + Sync,
{
    /// A store of sessions owned by integer ids, with the default lifetime
    /// and limits, which removes its expired sessions itself: see
    /// [`Store::for_identities`].
    pub fn new(layout: L) -> Self {
        Self::for_identities(layout)
    }
}

impl<L, A, I> Store<L, A, I>
where
    L: Layout + Sweepable,
    A: Serialize + DeserializeOwned + Send + Sync,
    I: UserId,
{
    /// A store of sessions owned by identities of type `I`, with the
    /// default lifetime and limits:
    /// `let store: Store<_, Cart, Uuid> = Store::for_identities(layout);`.
    ///
    /// Opened inside a Tokio runtime, the store starts a sweeper of its
    /// layout's expired sessions ([`SweepConfig::default`]: a pass a
    /// minute, shared with the other processes' sweepers through leases),
    /// which stops when the last clone of the store is dropped. A layout
    /// whose keys Redis expires itself needs none and starts none.
    /// [`Store::without_sweeper`] turns it off.
    pub fn for_identities(layout: L) -> Self {
        let sweeping = InApp::start(&layout, Some(SweepConfig::default()));
        Self {
            layout,
            ttl_secs: DEFAULT_TTL.as_secs(),
            rolling: true,
            absolute_secs: None,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            update_attempts: DEFAULT_UPDATE_ATTEMPTS,
            sweeping,
            _attrs: PhantomData,
        }
    }

    /// Sweeps with `config` (interval, segments, session cap) in place of
    /// the default.
    pub fn with_sweep_config(mut self, config: SweepConfig) -> Self {
        self.sweeping = InApp::start(&self.layout, Some(config));
        self
    }

    /// Runs no sweeper: for an app whose expired sessions another process
    /// removes (`sessionpack sweep`, or a [`crate::session::sweep::Sweeper`]
    /// of its own). Without one, expired sessions are never returned but
    /// keep their memory.
    pub fn without_sweeper(mut self) -> Self {
        self.sweeping = InApp::default();
        self
    }
}

impl<L, A, I> Store<L, A, I>
where
    L: Layout,
    A: Serialize + DeserializeOwned + Send + Sync,
    I: UserId,
{
    /// The totals of the sweeper this store runs (passes, failed passes,
    /// sessions reclaimed, the last error), for a health check; `None`
    /// when it runs none.
    pub fn sweep_stats(&self) -> Option<SweepStats> {
        self.sweeping.stats()
    }

    /// A receiver of those totals, changed after each pass; `None` when
    /// the store runs no sweeper.
    pub fn subscribe_sweeps(&self) -> Option<tokio::sync::watch::Receiver<SweepStats>> {
        self.sweeping.subscribe()
    }

    /// Sets the lifetime given to new and touched sessions, rounded up to
    /// whole seconds (at least one): the idle timeout, as a session not
    /// touched for this long expires. One longer than
    /// [`crate::ttl::MAX_TTL_SECS`] makes every create and touch fail with
    /// [`Error::InvalidTtl`].
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl_secs = whole_seconds(ttl);
        self
    }

    /// Sets the lifetimes: `idle`, the idle timeout (a session not touched
    /// for this long expires: [`Store::with_ttl`]; `None`: a touch does not
    /// extend a session), and `absolute` (a session dies this long after
    /// sign-in, whatever the touches; `None`: never by age). With neither,
    /// sessions live the default TTL from creation, untouched by touches.
    ///
    /// Neither costs a byte: the idle timeout is the expiry every layout
    /// keeps, and the absolute one is counted from the second stamped in
    /// the session's id ([`SessionId::generate_stamped`]: 32 of its bits,
    /// leaving 128 random bits at the default width, 96 at 128 bits), which
    /// a rotation keeps. A create is given the deadline as a time; a touch
    /// is given the lifetime left by this process's clock, so a session may
    /// outlive its deadline by the skew between that clock and the
    /// server's, and by the time a touch takes to reach the server.
    pub fn with_lifetimes(mut self, idle: Option<Duration>, absolute: Option<Duration>) -> Self {
        self.rolling = idle.is_some();
        if let Some(idle) = idle {
            self.ttl_secs = whole_seconds(idle);
        }
        self.absolute_secs = absolute.map(whole_seconds);
        if let Some(abs) = self.absolute_secs
            && idle.is_none()
        {
            self.ttl_secs = abs;
        }
        self
    }

    /// The idle timeout, if touches extend sessions.
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.rolling.then(|| self.ttl())
    }

    /// The absolute lifetime, if the store has one.
    pub fn absolute_lifetime(&self) -> Option<Duration> {
        self.absolute_secs.map(Duration::from_secs)
    }

    /// Whether ids carry their issue time: the layout stamps them (a user
    /// index), or the absolute lifetime is counted from it.
    fn stamped(&self) -> bool {
        self.absolute_secs.is_some() || self.layout.stamps_ids()
    }

    /// A fresh id, stamped with this process's clock when the absolute
    /// lifetime needs a stamp the layout does not give.
    async fn new_id(&self) -> Result<SessionId> {
        let id = self.layout.new_id().await?;
        Ok(
            if self.absolute_secs.is_some() && !self.layout.stamps_ids() {
                id.with_stamp(u32::try_from(unix_now()).unwrap_or(u32::MAX))
            } else {
                id
            },
        )
    }

    /// Seconds `id` may still live by the absolute lifetime (`None`: no
    /// such lifetime); 0 when it is past.
    fn remaining(&self, id: &SessionId) -> Option<u64> {
        let abs = self.absolute_secs?;
        Some((u64::from(id.stamp()) + abs).saturating_sub(unix_now()))
    }

    /// When a session created now with `id` and a lifetime of `ttl`
    /// expires: `ttl` from now, or its absolute deadline if that comes
    /// first, given as a time so that however long the call takes to reach
    /// the server, the session does not outlive the deadline.
    fn deadline(&self, id: &SessionId, ttl: u64) -> Deadline {
        match self.absolute_secs {
            Some(abs) => {
                let at = u64::from(id.stamp()) + abs;
                if at < unix_now().saturating_add(ttl) {
                    Deadline::At(at)
                } else {
                    Deadline::In(ttl)
                }
            }
            None => Deadline::In(ttl),
        }
    }

    /// A lifetime from now, cut to the absolute deadline of `id`.
    fn capped(&self, id: &SessionId, ttl: u64) -> u64 {
        self.remaining(id).map_or(ttl, |left| ttl.min(left))
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

    /// A record: the identity, then the attributes, packed where the
    /// layout packs ([`Layout::pack`]). The limit is on the unpacked size.
    async fn encode(&self, identity: &I, attrs: &A) -> Result<Vec<u8>> {
        let (mut bytes, head) = record::encode_split(identity, attrs)?;
        if bytes.len() > self.max_record_bytes {
            return Err(Error::TooLarge {
                size: bytes.len(),
                limit: self.max_record_bytes,
            });
        }
        if bytes.len() > head {
            let attrs = bytes.split_off(head);
            bytes.extend_from_slice(&self.layout.pack(attrs).await);
        }
        Ok(bytes)
    }

    async fn decode(&self, id: SessionId, stored: Stored) -> Result<Session<A, I>> {
        let corrupt = |reason| Error::CorruptRecord {
            location: self.layout.location(&id),
            reason,
        };
        let mut rest = stored.record.as_slice();
        let identity = I::decode(&mut rest).map_err(corrupt)?;
        let attrs = self.layout.unpack(&id, rest).await?;
        let attrs = record::decode_attrs(&attrs).map_err(corrupt)?;
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
        let create = self.create_unobserved(identity, attrs, ttl);
        metrics::call(Op::Create, Outcome::ok, create).await
    }

    async fn create_unobserved(
        &self,
        identity: I,
        attrs: A,
        ttl: Duration,
    ) -> Result<Session<A, I>> {
        let record = self.encode(&identity, &attrs).await?;
        let ttl = whole_seconds(ttl);
        Deadline::In(ttl).check()?;
        let mut late = 0;
        for _ in 0..ID_ATTEMPTS {
            let id = self.new_id().await?;
            let expiry = self.deadline(&id, ttl);
            match self.layout.insert_new(&id, &record, expiry).await? {
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
                // The absolute deadline of the fresh id's stamp passed on
                // the way (a lifetime of a second or two, and a slow
                // call): a new id has a new stamp.
                Inserted::AlreadyExpired if matches!(expiry, Deadline::At(_)) => continue,
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
        metrics::call(
            Op::CreateMany,
            Outcome::ok,
            self.create_many_unobserved(sessions),
        )
        .await
    }

    async fn create_many_unobserved(&self, sessions: &[(I, A)]) -> Result<Vec<SessionId>> {
        let mut items = Vec::with_capacity(sessions.len());
        for (identity, attrs) in sessions {
            items.push((self.new_id().await?, self.encode(identity, attrs).await?));
        }
        let ttl = self.batch_ttl();
        let results = self.layout.insert_many(&items, ttl).await?;
        let mut taken = taken_positions(0..items.len(), results);
        // A taken id means a broken RNG or a replayed id: draw again for
        // just those items, a bounded number of times.
        for _ in 1..ID_ATTEMPTS {
            if taken.is_empty() {
                break;
            }
            for &i in &taken {
                items[i].0 = self.new_id().await?;
            }
            let retry: Vec<_> = taken.iter().map(|&i| items[i].clone()).collect();
            let results = self.layout.insert_many(&retry, ttl).await?;
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
        metrics::call(Op::Load, Outcome::of_option, self.load_unobserved(id)).await
    }

    async fn load_unobserved(&self, id: &SessionId) -> Result<Option<Session<A, I>>> {
        if self.remaining(id) == Some(0) {
            return Ok(None);
        }
        match self.layout.load(id).await? {
            Some(stored) => self.decode(*id, stored).await.map(Some),
            None => Ok(None),
        }
    }

    /// Parses a cookie value strictly (an id of the layout's width) and
    /// loads the session. A malformed value is an [`Error::InvalidId`] and
    /// never reaches Redis.
    pub async fn load_cookie(&self, cookie: &str) -> Result<Option<Session<A, I>>> {
        metrics::call(Op::Load, Outcome::of_option, async move {
            let id = SessionId::parse_with(cookie, self.layout.id_width())?;
            self.load_unobserved(&id).await
        })
        .await
    }

    /// Loads many sessions in pipelined round trips; one result per id.
    pub async fn load_many(&self, ids: &[SessionId]) -> Result<Vec<Option<Session<A, I>>>> {
        metrics::call(Op::LoadMany, Outcome::ok, self.load_many_unobserved(ids)).await
    }

    async fn load_many_unobserved(&self, ids: &[SessionId]) -> Result<Vec<Option<Session<A, I>>>> {
        let found = self.layout.load_many(ids).await?;
        let mut sessions = Vec::with_capacity(ids.len());
        for (id, stored) in ids.iter().zip(found) {
            sessions.push(match stored.filter(|_| self.remaining(id) != Some(0)) {
                Some(stored) => Some(self.decode(*id, stored).await?),
                None => None,
            });
        }
        Ok(sessions)
    }

    /// Rolls a live session's expiry forward by the store's TTL (the idle
    /// timeout), never past its absolute deadline; returns the new expiry,
    /// or `None` if the session is gone. Without an idle timeout it only
    /// says whether the session is live, and until when.
    pub async fn touch(&self, id: &SessionId) -> Result<Option<u64>> {
        metrics::call(Op::Touch, Outcome::of_option, async move {
            match self.touch_ttl(id) {
                None => Ok(self.load_unobserved(id).await?.map(|s| s.expires_at)),
                Some(0) => {
                    // Past its absolute deadline: gone, whatever its expiry.
                    self.layout.remove(id, None).await?;
                    Ok(None)
                }
                Some(ttl) => self.layout.touch(id, ttl).await,
            }
        })
        .await
    }

    /// The lifetime a touch of `id` gives, from now: `None` without an
    /// idle timeout (a touch leaves the expiry), 0 past its absolute
    /// deadline.
    pub(crate) fn touch_ttl(&self, id: &SessionId) -> Option<u64> {
        self.rolling.then(|| self.capped(id, self.ttl_secs))
    }

    /// Overwrites a live session's identity and attributes, keeping its
    /// expiry. Returns `false` (and writes nothing) if it is gone.
    ///
    /// Last writer wins; use [`Store::update`] to change attributes without
    /// losing a concurrent change.
    pub async fn save(&self, session: &Session<A, I>) -> Result<bool> {
        metrics::call(Op::Save, Outcome::of_bool, async move {
            let record = self.encode(&session.identity, &session.attrs).await?;
            let written = self.layout.replace(&session.id, &record, None).await?;
            Ok(written == Written::Done)
        })
        .await
    }

    /// Changes a live session's attributes with `change`, atomically with
    /// respect to other writers: if the record changed between the read and
    /// the write, it is read again and `change` runs again. Returns the
    /// session as written, or `None` if it is gone.
    pub async fn update<F>(&self, id: &SessionId, change: F) -> Result<Option<Session<A, I>>>
    where
        F: FnMut(&mut A) + Send,
    {
        metrics::call(
            Op::Update,
            Outcome::of_option,
            self.update_unobserved(id, change),
        )
        .await
    }

    async fn update_unobserved<F>(
        &self,
        id: &SessionId,
        mut change: F,
    ) -> Result<Option<Session<A, I>>>
    where
        F: FnMut(&mut A) + Send,
    {
        for attempt in 0..self.update_attempts {
            let Some(stored) = self.layout.load(id).await? else {
                return Ok(None);
            };
            let expected = stored.record.clone();
            let mut session = self.decode(*id, stored).await?;
            change(&mut session.attrs);
            let record = self.encode(&session.identity, &session.attrs).await?;
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
        metrics::call(Op::Destroy, Outcome::of_bool, async move {
            Ok(self.layout.remove(id, None).await? == Written::Done)
        })
        .await
    }

    /// Moves a live session to a fresh id (after log-in or a privilege
    /// change), keeping its record and expiry. When this returns the new id,
    /// the old one finds nothing. On an error the old id still holds the
    /// session, and the new one, if written, is removed or expires with it.
    ///
    /// With a user index, a rotation racing [`Store::revoke_all`] or
    /// [`Store::revoke_others`] never outlives it: the new id is recorded
    /// beside the old session before the copy is made, and a revocation
    /// that reaches the old id follows it ([`crate::users`]).
    pub async fn rotate(&self, id: &SessionId) -> Result<Option<SessionId>> {
        metrics::call(Op::Rotate, Outcome::of_option, self.rotate_unobserved(id)).await
    }

    async fn rotate_unobserved(&self, id: &SessionId) -> Result<Option<SessionId>> {
        // The id the last attempt recorded as the successor and removed.
        let mut prev: Option<SessionId> = None;
        for attempt in 0..self.update_attempts {
            let Some(stored) = self.layout.load(id).await? else {
                return Ok(None);
            };
            let mut new_id = self.new_id().await?;
            if self.stamped() {
                // The sign-in time, and the absolute deadline, stay.
                new_id = new_id.with_stamp(id.stamp());
            }
            let inserted = self
                .layout
                .insert_successor(
                    id,
                    prev.as_ref(),
                    &new_id,
                    &stored.record,
                    Deadline::At(stored.expires_at),
                )
                .await?;
            prev = Some(new_id);
            match inserted {
                Inserted::Created { .. } => {}
                Inserted::IdTaken | Inserted::Late => continue,
                Inserted::AlreadyExpired => return Ok(None),
            }
            if let Err(e) = self.layout.carry_over(id, &new_id).await {
                let _ = self.layout.remove(&new_id, None).await;
                return Err(e);
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

impl<L, A, I> Store<L, A, I> {
    /// The lifetime a batch of new sessions gets: the TTL, cut to the
    /// absolute lifetime (their stamps are this second).
    fn batch_ttl(&self) -> u64 {
        self.absolute_secs
            .map_or(self.ttl_secs, |abs| self.ttl_secs.min(abs))
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
