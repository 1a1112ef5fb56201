//! The bucketed layout: sessions packed into `2^bits` buckets, each a
//! listpack-sized HASH (field -> record) and a parallel ZSET (field ->
//! expiry), both under one hash tag. See [`crate::session::buckets`] for the names.

use serde::{Deserialize, Serialize};

use super::indexed::{HashZset, KeyScheme, Keys};
use crate::error::Result;
use crate::limits::ListpackLimits;
use crate::session::buckets::{Buckets, DEFAULT_NAMESPACE};
use crate::session::id::IdWidth;
use crate::session::id::SessionId;
use crate::session::meta::{FORMAT_VERSION, StoreMeta};

/// Default bucket bits: 65,536 buckets, for about 5M sessions.
pub const DEFAULT_BUCKET_BITS: u8 = 16;

/// What a bucketed store is called and how many buckets it has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BucketedConfig {
    /// Prefix of every key, default `sp`.
    pub namespace: String,
    /// `log2` of the bucket count, 1..=24, default 16.
    pub bucket_bits: u8,
    /// The width of the store's ids, default 160 bits.
    pub id_width: IdWidth,
}

impl Default for BucketedConfig {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            bucket_bits: DEFAULT_BUCKET_BITS,
            id_width: IdWidth::default(),
        }
    }
}

impl BucketedConfig {
    /// `2^bucket_bits` buckets in the default namespace.
    pub fn new(bucket_bits: u8) -> Self {
        Self {
            bucket_bits,
            ..Self::default()
        }
    }

    /// Uses another key namespace.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Issues ids of `width` (128 bits saves 4 bytes a session).
    pub fn with_id_width(mut self, width: IdWidth) -> Self {
        self.id_width = width;
        self
    }
}

/// The bucket scheme and the server settings it was set up with.
#[derive(Clone, Debug)]
pub struct BucketScheme {
    buckets: Buckets,
    limits: ListpackLimits,
    eviction_policy: Option<String>,
}

impl KeyScheme for BucketScheme {
    fn keys(&self, id: &SessionId) -> Keys {
        let bucket = self.buckets.bucket_of(id);
        let field = self.buckets.field(id);
        Keys {
            hash: self.buckets.hash_key(bucket),
            zset: self.buckets.zset_key(bucket),
            field,
        }
    }

    fn out_of_line(&self, id: &SessionId) -> String {
        self.buckets
            .out_of_line_key(self.buckets.bucket_of(id), &self.buckets.field(id))
    }

    fn location(&self, id: &SessionId) -> String {
        self.buckets.location(id)
    }

    fn id_width(&self) -> IdWidth {
        self.buckets.id_width()
    }
}

/// Sessions packed into listpack-sized buckets.
pub type Bucketed<C> = HashZset<C, BucketScheme>;

impl<C> HashZset<C, BucketScheme>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Opens a bucketed store: checks the namespace's metadata (recording
    /// it if the store is new; see [`crate::session::meta`]) and reads the server's
    /// listpack limits and eviction policy. Three round trips, once.
    ///
    /// A store opened with other bucket bits than the namespace holds is an
    /// [`crate::Error::Config`]. An `allkeys-*` eviction policy is logged as a
    /// warning: under memory pressure Redis may then evict one key of a
    /// bucket and keep the other; the sweeper repairs what that leaves, but
    /// the sessions in an evicted key are gone.
    pub async fn new(conn: C, config: BucketedConfig) -> Result<Self> {
        let buckets =
            Buckets::new(config.namespace, config.bucket_bits)?.with_id_width(config.id_width);
        let (limits, policy, _) =
            super::open_bucket_store(&conn, &Self::meta(&buckets), buckets.namespace()).await?;
        let mut layout = Self::with_limits(conn, buckets, limits);
        layout.scheme.eviction_policy = policy;
        Ok(layout)
    }

    /// The metadata a bucketed store with these buckets records.
    pub fn meta(buckets: &Buckets) -> StoreMeta {
        StoreMeta {
            layout: "bucketed".to_owned(),
            bucket_bits: buckets.bits(),
            id_bits: buckets.id_width().bits(),
            format: FORMAT_VERSION,
            ..StoreMeta::default()
        }
    }

    /// A bucketed layout with limits already known: no round trip, and no
    /// metadata check (the benchmarks use it on servers they flush).
    pub fn with_limits(conn: C, buckets: Buckets, limits: ListpackLimits) -> Self {
        let field = buckets.field_len() as u64;
        if field > limits.hash_value || field > limits.zset_value {
            tracing::warn!(
                field,
                ?limits,
                "server's listpack value limit is below the field length: every bucket will convert"
            );
        }
        Self {
            conn,
            inline_max: limits.hash_value,
            scheme: BucketScheme {
                buckets,
                limits,
                eviction_policy: None,
            },
            name: "bucketed",
            clock: Default::default(),
        }
    }

    /// The bucket scheme.
    pub fn buckets(&self) -> &Buckets {
        &self.scheme.buckets
    }

    /// The listpack limits this layout works to.
    pub fn limits(&self) -> ListpackLimits {
        self.scheme.limits
    }

    /// The server's `maxmemory-policy` when the layout was opened (`None`
    /// if it could not be read, or for [`Self::with_limits`]).
    pub fn eviction_policy(&self) -> Option<&str> {
        self.scheme.eviction_policy.as_deref()
    }
}
