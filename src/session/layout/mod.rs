//! Ways of laying sessions out in Redis, behind one small trait.
//!
//! A [`Layout`] stores opaque record bytes (see [`crate::session::record`]) under a
//! [`SessionId`] with an expiry kept by the server's clock. Every layout
//! gives the same guarantees, which the shared test suite checks:
//!
//! - `load` never returns a session whose expiry has passed, swept or not;
//! - `touch`, `replace` and `remove` act only on a live session, so a
//!   destroyed or expired one is never brought back;
//! - each call is one atomic step on the server; `replace` and `remove`
//!   can be made conditional on the record a caller last saw.
//!
//! Bulk calls have default bodies that issue one call per item; layouts
//! override them with pipelines.

use std::future::Future;

use crate::error::Result;
use crate::session::id::{IdWidth, SessionId};
use crate::ttl::{Deadline, check_ttl};

pub mod bucketed;
pub mod compact;
pub mod indexed;
pub mod pipeline;

pub use bucketed::{Bucketed, BucketedConfig};
pub use compact::{Compact, CompactConfig, Expiry, Seen, StoredRecord};
pub use indexed::{HashZset, KeyScheme, Keys};

/// What opening a bucket store does before its first call: checks (or
/// records) the namespace's metadata, and reads the server's listpack
/// limits and eviction policy, warning when that policy may evict bucket
/// keys (`allkeys-*`): an evicted key takes its sessions with it, and the
/// sweeper removes what is left. A store with a user index is refused on
/// such a server before anything is written
/// ([`crate::limits::check_user_index_policy`]).
pub(crate) async fn open_bucket_store<C>(
    conn: &C,
    meta: &crate::session::meta::StoreMeta,
    namespace: &str,
) -> Result<(
    crate::limits::ListpackLimits,
    Option<String>,
    crate::session::meta::StoreMeta,
)>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let policy = crate::limits::eviction_policy(&mut conn.clone()).await?;
    open_bucket_store_under(conn, meta, namespace, policy).await
}

/// [`open_bucket_store`] on a server whose eviction policy the caller has
/// read already.
pub(crate) async fn open_bucket_store_under<C>(
    conn: &C,
    meta: &crate::session::meta::StoreMeta,
    namespace: &str,
    policy: Option<String>,
) -> Result<(
    crate::limits::ListpackLimits,
    Option<String>,
    crate::session::meta::StoreMeta,
)>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    use crate::limits;
    let mut c = conn.clone();
    if meta.user_bits > 0 {
        limits::check_user_index_policy(policy.as_deref())?;
    }
    let recorded = meta.claim(conn, namespace).await?;
    let found = limits::ListpackLimits::read(&mut c).await?;
    if let Some(policy) = policy
        .as_deref()
        .filter(|p| limits::evicts_persistent_keys(p))
    {
        tracing::warn!(
            policy,
            namespace,
            layout = meta.layout,
            "maxmemory-policy may evict bucket keys, which have no expiry: an evicted key \
             takes its sessions with it, and the sweeper removes what is left of its bucket; \
             use noeviction or a volatile-* policy to keep buckets whole"
        );
    }
    Ok((found, policy, recorded))
}

/// Checks a bulk insert before anything is sent: the lifetime, and that
/// every id has the layout's width, so a bad batch writes nothing.
pub(crate) fn check_batch(
    items: &[(SessionId, Vec<u8>)],
    ttl_secs: u64,
    width: IdWidth,
) -> Result<()> {
    use crate::session::id::InvalidIdExt;
    check_ttl(ttl_secs)?;
    for (id, _) in items {
        id.check_width(width)?;
    }
    Ok(())
}

/// A session as a layout returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The record bytes, as they were given to the layout.
    pub record: Vec<u8>,
    /// Unix time in seconds at which the session expires.
    pub expires_at: u64,
}

/// What [`Layout::insert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// Stored; expires at this unix time.
    Created {
        /// Unix time in seconds.
        expires_at: u64,
    },
    /// A session with this id already exists; nothing was written.
    IdTaken,
    /// The requested [`Deadline::At`] has already passed; nothing was written.
    AlreadyExpired,
    /// The id was issued too long ago (or too far ahead) by the server's
    /// clock for a store with a user index (see [`crate::users`]); nothing
    /// was written. Draw a new id.
    Late,
}

impl Inserted {
    /// Reads an insert script's reply: the expiry, 0 if taken, -1 if an
    /// absolute expiry had passed, -2 if the id's stamp was refused.
    pub fn from_code(code: i64) -> Self {
        match code {
            0 => Self::IdTaken,
            -2 => Self::Late,
            c if c < 0 => Self::AlreadyExpired,
            c => Self::Created {
                expires_at: c as u64,
            },
        }
    }
}

/// What a conditional write ([`Layout::replace`], [`Layout::remove`]) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Done.
    Done,
    /// No live session with this id; nothing was written.
    Missing,
    /// The stored record differs from the one expected; nothing was written.
    Conflict,
}

impl Written {
    /// Reads a conditional write script's reply: 1 done, 0 missing, -1
    /// conflict.
    pub fn from_code(code: i64) -> Self {
        match code {
            1 => Self::Done,
            0 => Self::Missing,
            _ => Self::Conflict,
        }
    }
}

/// One way of storing sessions in Redis.
///
/// Implementations are cheap to share (`&self`) across tasks.
pub trait Layout: Send + Sync {
    /// A short name for reports, e.g. `bucketed`.
    fn name(&self) -> &'static str;

    /// A log-safe description of where `id` lives, for error messages.
    fn location(&self, id: &SessionId) -> String {
        format!("{} session {}", self.name(), id.redacted())
    }

    /// The width of the ids this layout's store issues and accepts.
    fn id_width(&self) -> IdWidth {
        IdWidth::Bits160
    }

    /// A fresh id for a new session, of the layout's width. A layout that
    /// keeps a user index stamps it with the server's time
    /// ([`SessionId::generate_stamped`]).
    fn new_id(&self) -> impl Future<Output = Result<SessionId>> + Send {
        async move { SessionId::generate_with(self.id_width()) }
    }

    /// Whether [`Layout::new_id`] stamps ids with their issue time (a
    /// compact store with a user index).
    fn stamps_ids(&self) -> bool {
        false
    }

    /// Stores a new session unless the id is taken.
    fn insert(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> impl Future<Output = Result<Inserted>> + Send;

    /// Stores a new session under an id this process has just drawn at
    /// random, which no one else can know yet, as [`Layout::insert`] does.
    /// A layout may take a cheaper path for such an id: a record in
    /// pieces can go without a script, since no earlier session of the id
    /// can have left pieces behind, and no reader can see it half written.
    /// As [`Layout::insert`] by default.
    fn insert_new(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> impl Future<Output = Result<Inserted>> + Send {
        self.insert(id, record, expiry)
    }

    /// Stores the copy a rotation makes of the live session `from` under
    /// the new id `id`, as [`Layout::insert`] does. A layout whose
    /// sessions can be revoked by user (a compact store with a user index)
    /// first records `id` beside `from` as its successor, only while
    /// `from` is live, so a revocation that reaches `from` after the copy
    /// was made finds the copy too; `prev` is the id an earlier attempt of
    /// the same rotation recorded and has since removed. Returns
    /// [`Inserted::AlreadyExpired`] when `from` is no longer live.
    fn insert_successor(
        &self,
        from: &SessionId,
        prev: Option<&SessionId>,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> impl Future<Output = Result<Inserted>> + Send {
        let _ = (from, prev);
        self.insert(id, record, expiry)
    }

    /// Loads a live session.
    fn load(&self, id: &SessionId) -> impl Future<Output = Result<Option<Stored>>> + Send;

    /// Sets a live session's expiry to `ttl_secs` from now; returns the new
    /// expiry, or `None` if there is no live session.
    fn touch(
        &self,
        id: &SessionId,
        ttl_secs: u64,
    ) -> impl Future<Output = Result<Option<u64>>> + Send;

    /// Replaces a live session's record, keeping its expiry. With
    /// `expected`, only if the stored record still equals it.
    fn replace(
        &self,
        id: &SessionId,
        record: &[u8],
        expected: Option<&[u8]>,
    ) -> impl Future<Output = Result<Written>> + Send;

    /// Removes a session. With `expected`, only if the stored record and
    /// expiry still equal it (so a rotation that copied a session cannot
    /// drop a touch or a write made meanwhile).
    fn remove(
        &self,
        id: &SessionId,
        expected: Option<&Stored>,
    ) -> impl Future<Output = Result<Written>> + Send;

    /// Inserts many sessions, all expiring `ttl_secs` from now; one result
    /// per item, in order. Each insert is atomic; the batch is not (an error
    /// part way leaves the earlier items stored).
    fn insert_many(
        &self,
        items: &[(SessionId, Vec<u8>)],
        ttl_secs: u64,
    ) -> impl Future<Output = Result<Vec<Inserted>>> + Send {
        async move {
            let mut out = Vec::with_capacity(items.len());
            for (id, record) in items {
                out.push(self.insert(id, record, Deadline::In(ttl_secs)).await?);
            }
            Ok(out)
        }
    }

    /// Gives the live session `to` what a layout keeps beside `from`'s
    /// record (a compact store's viewed items), for a rotation, before
    /// `from` is removed. Nothing by default.
    fn carry_over(
        &self,
        from: &SessionId,
        to: &SessionId,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (from, to);
        async { Ok(()) }
    }

    /// Loads many sessions; one result per id, in order.
    fn load_many(
        &self,
        ids: &[SessionId],
    ) -> impl Future<Output = Result<Vec<Option<Stored>>>> + Send {
        async move {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                out.push(self.load(id).await?);
            }
            Ok(out)
        }
    }

    /// A record's data (what follows its identity or owner) as the store
    /// writes it: packed with the store's dictionary, where it has one and
    /// that is shorter ([`crate::session::dictionary`]; a compact store).
    /// As it is by default. A store that learns its dictionary may first
    /// keep the data as a sample, and the write that completes its samples
    /// trains one ([`crate::session::dictionary::Learning`]).
    fn pack(&self, data: Vec<u8>) -> impl Future<Output = Vec<u8>> + Send {
        async move { data }
    }

    /// Record data as [`Layout::pack`] gave it, unpacked: with a
    /// dictionary read from the namespace if this process does not hold
    /// it. Data that cannot be unpacked is an
    /// [`crate::Error::CorruptRecord`] of `id`. As it is by default.
    fn unpack<'a>(
        &'a self,
        id: &'a SessionId,
        data: &'a [u8],
    ) -> impl Future<Output = Result<std::borrow::Cow<'a, [u8]>>> + Send + 'a {
        let _ = id;
        async move { Ok(std::borrow::Cow::Borrowed(data)) }
    }
}

/// A shared layout, so several stores (say, with different attribute
/// types) can use one connection and one set of buckets.
macro_rules! delegate_layout {
    ($($ty:ty),*) => {$(
        impl<L: Layout + ?Sized> Layout for $ty {
            fn name(&self) -> &'static str {
                (**self).name()
            }
            fn location(&self, id: &SessionId) -> String {
                (**self).location(id)
            }
            fn id_width(&self) -> IdWidth {
                (**self).id_width()
            }
            fn new_id(&self) -> impl Future<Output = Result<SessionId>> + Send {
                (**self).new_id()
            }
            fn stamps_ids(&self) -> bool {
                (**self).stamps_ids()
            }
            fn insert(&self, id: &SessionId, record: &[u8], expiry: Deadline) -> impl Future<Output = Result<Inserted>> + Send {
                (**self).insert(id, record, expiry)
            }
            fn insert_new(&self, id: &SessionId, record: &[u8], expiry: Deadline) -> impl Future<Output = Result<Inserted>> + Send {
                (**self).insert_new(id, record, expiry)
            }
            fn insert_successor(&self, from: &SessionId, prev: Option<&SessionId>, id: &SessionId, record: &[u8], expiry: Deadline) -> impl Future<Output = Result<Inserted>> + Send {
                (**self).insert_successor(from, prev, id, record, expiry)
            }
            fn load(&self, id: &SessionId) -> impl Future<Output = Result<Option<Stored>>> + Send {
                (**self).load(id)
            }
            fn touch(&self, id: &SessionId, ttl_secs: u64) -> impl Future<Output = Result<Option<u64>>> + Send {
                (**self).touch(id, ttl_secs)
            }
            fn replace(&self, id: &SessionId, record: &[u8], expected: Option<&[u8]>) -> impl Future<Output = Result<Written>> + Send {
                (**self).replace(id, record, expected)
            }
            fn remove(&self, id: &SessionId, expected: Option<&Stored>) -> impl Future<Output = Result<Written>> + Send {
                (**self).remove(id, expected)
            }
            fn insert_many(&self, items: &[(SessionId, Vec<u8>)], ttl_secs: u64) -> impl Future<Output = Result<Vec<Inserted>>> + Send {
                (**self).insert_many(items, ttl_secs)
            }
            fn carry_over(&self, from: &SessionId, to: &SessionId) -> impl Future<Output = Result<()>> + Send {
                (**self).carry_over(from, to)
            }
            fn load_many(&self, ids: &[SessionId]) -> impl Future<Output = Result<Vec<Option<Stored>>>> + Send {
                (**self).load_many(ids)
            }
            fn pack(&self, data: Vec<u8>) -> impl Future<Output = Vec<u8>> + Send {
                (**self).pack(data)
            }
            fn unpack<'a>(&'a self, id: &'a SessionId, data: &'a [u8]) -> impl Future<Output = Result<std::borrow::Cow<'a, [u8]>>> + Send + 'a {
                (**self).unpack(id, data)
            }
        }
    )*};
}

delegate_layout!(&L, std::sync::Arc<L>);
