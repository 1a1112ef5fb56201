//! A layout chosen at run time (CLI, benches): an enum that delegates to
//! each layout.

use serde::{Deserialize, Serialize};

use super::{BookLoginHash, Encoding, KeyPerSession};
use sessionpack::error::Result;
use sessionpack::session::layout::{Bucketed, BucketedConfig, Inserted, Layout, Stored, Written};
use sessionpack::ttl::Deadline;
use sessionpack::{Compact, CompactConfig, IdWidth, SessionId};

/// The layouts this crate implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LayoutKind {
    /// `SETEX session:<40 hex>` with a JSON value: the usual store.
    JsonSetex,
    /// `SETEX <20 binary bytes>` with a MessagePack value.
    PackedSetex,
    /// One HASH per session plus `EXPIREAT`.
    HashPerSession,
    /// The book's global `login:` HASH and `recent:` ZSET.
    BookLoginHash,
    /// HASH + ZSET buckets that stay listpacks.
    Bucketed,
    /// HASH-only buckets, expiry in each value, an index per bucket group.
    Compact,
    /// The compact layout with its fields expired by the server
    /// ([`sessionpack::session::layout::Expiry::Server`]; Redis 7.4+): not in [`LayoutKind::ALL`],
    /// as older servers cannot run it. Opened even where the server
    /// converts its buckets, to measure that.
    CompactServerExpiry,
}

impl LayoutKind {
    /// Every layout, baselines first.
    pub const ALL: [Self; 6] = [
        Self::JsonSetex,
        Self::PackedSetex,
        Self::HashPerSession,
        Self::BookLoginHash,
        Self::Bucketed,
        Self::Compact,
    ];

    /// Every layout, those some servers cannot run too: [`LayoutKind::ALL`]
    /// and [`LayoutKind::CompactServerExpiry`].
    pub const EVERY: [Self; 7] = {
        let mut every = [Self::CompactServerExpiry; 7];
        let mut i = 0;
        while i < Self::ALL.len() {
            every[i] = Self::ALL[i];
            i += 1;
        }
        every
    };

    /// The report name, e.g. `json-setex`.
    pub fn name(self) -> &'static str {
        match self {
            Self::JsonSetex => "json-setex",
            Self::PackedSetex => "packed-setex",
            Self::HashPerSession => "hash-per-session",
            Self::BookLoginHash => "book-login-hash",
            Self::Bucketed => "bucketed",
            Self::Compact => "compact",
            Self::CompactServerExpiry => "compact-server-expiry",
        }
    }

    /// Whether the layout has a bucket count to choose.
    pub fn is_bucketed(self) -> bool {
        matches!(
            self,
            Self::Bucketed | Self::Compact | Self::CompactServerExpiry
        )
    }

    /// Opens this layout on `conn` with 160-bit ids; `bucket_bits` is used
    /// by the bucketed layouts only.
    pub async fn open<C>(self, conn: C, bucket_bits: u8) -> Result<AnyLayout<C>>
    where
        C: redis::aio::ConnectionLike + Clone + Send + Sync,
    {
        self.open_with(conn, bucket_bits, IdWidth::default()).await
    }

    /// Opens this layout on `conn` with ids of `width` (the bucketed
    /// layouts; the others take any id).
    pub async fn open_with<C>(
        self,
        conn: C,
        bucket_bits: u8,
        width: IdWidth,
    ) -> Result<AnyLayout<C>>
    where
        C: redis::aio::ConnectionLike + Clone + Send + Sync,
    {
        Ok(match self {
            Self::JsonSetex => {
                AnyLayout::KeyPerSession(KeyPerSession::new(conn, Encoding::JsonSetex))
            }
            Self::PackedSetex => {
                AnyLayout::KeyPerSession(KeyPerSession::new(conn, Encoding::PackedSetex))
            }
            Self::HashPerSession => {
                AnyLayout::KeyPerSession(KeyPerSession::new(conn, Encoding::HashPerSession))
            }
            Self::BookLoginHash => AnyLayout::Book(BookLoginHash::book(conn, "sp")),
            Self::Bucketed => AnyLayout::Bucketed(
                Bucketed::new(conn, BucketedConfig::new(bucket_bits).with_id_width(width)).await?,
            ),
            Self::Compact => AnyLayout::Compact(
                Compact::new(conn, CompactConfig::new(bucket_bits).with_id_width(width)).await?,
            ),
            Self::CompactServerExpiry => {
                let mut config = CompactConfig::new(bucket_bits)
                    .with_id_width(width)
                    .with_server_expiry();
                config.allow_converted_buckets = true;
                AnyLayout::Compact(Compact::new(conn, config).await?)
            }
        })
    }
}

impl std::fmt::Display for LayoutKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Any of this crate's layouts.
#[derive(Clone, Debug)]
pub enum AnyLayout<C> {
    /// The bucketed layout.
    Bucketed(Bucketed<C>),
    /// The compact layout.
    Compact(Compact<C>),
    /// The book's design.
    Book(BookLoginHash<C>),
    /// A key-per-session baseline.
    KeyPerSession(KeyPerSession<C>),
}

macro_rules! each {
    ($self:ident, $l:ident => $e:expr) => {
        match $self {
            AnyLayout::Bucketed($l) => $e,
            AnyLayout::Compact($l) => $e,
            AnyLayout::Book($l) => $e,
            AnyLayout::KeyPerSession($l) => $e,
        }
    };
}

impl<C> Layout for AnyLayout<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    fn name(&self) -> &'static str {
        each!(self, l => l.name())
    }

    fn location(&self, id: &SessionId) -> String {
        each!(self, l => l.location(id))
    }

    fn id_width(&self) -> IdWidth {
        each!(self, l => l.id_width())
    }

    async fn new_id(&self) -> Result<SessionId> {
        each!(self, l => l.new_id().await)
    }

    fn stamps_ids(&self) -> bool {
        each!(self, l => l.stamps_ids())
    }

    async fn insert(&self, id: &SessionId, record: &[u8], expiry: Deadline) -> Result<Inserted> {
        each!(self, l => l.insert(id, record, expiry).await)
    }

    async fn insert_new(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> Result<Inserted> {
        each!(self, l => l.insert_new(id, record, expiry).await)
    }

    async fn load(&self, id: &SessionId) -> Result<Option<Stored>> {
        each!(self, l => l.load(id).await)
    }

    async fn pack(&self, data: Vec<u8>) -> Vec<u8> {
        each!(self, l => l.pack(data).await)
    }

    async fn unpack<'a>(
        &'a self,
        id: &'a SessionId,
        data: &'a [u8],
    ) -> Result<std::borrow::Cow<'a, [u8]>> {
        each!(self, l => l.unpack(id, data).await)
    }

    async fn touch(&self, id: &SessionId, ttl_secs: u64) -> Result<Option<u64>> {
        each!(self, l => l.touch(id, ttl_secs).await)
    }

    async fn replace(
        &self,
        id: &SessionId,
        record: &[u8],
        expected: Option<&[u8]>,
    ) -> Result<Written> {
        each!(self, l => l.replace(id, record, expected).await)
    }

    async fn remove(&self, id: &SessionId, expected: Option<&Stored>) -> Result<Written> {
        each!(self, l => l.remove(id, expected).await)
    }

    async fn insert_many(
        &self,
        items: &[(SessionId, Vec<u8>)],
        ttl_secs: u64,
    ) -> Result<Vec<Inserted>> {
        each!(self, l => l.insert_many(items, ttl_secs).await)
    }

    async fn insert_successor(
        &self,
        from: &SessionId,
        prev: Option<&SessionId>,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> Result<Inserted> {
        each!(self, l => l.insert_successor(from, prev, id, record, expiry).await)
    }

    async fn carry_over(&self, from: &SessionId, to: &SessionId) -> Result<()> {
        each!(self, l => l.carry_over(from, to).await)
    }

    async fn load_many(&self, ids: &[SessionId]) -> Result<Vec<Option<Stored>>> {
        each!(self, l => l.load_many(ids).await)
    }
}
