//! How an app opens a compact store: its namespace, buckets, ids, user
//! index, viewed items and who expires its sessions.

use serde::{Deserialize, Serialize};

use super::user_index::UserIndexConfig;
use super::viewed::ViewedConfig;
use super::{COMPACT_LAYOUT, DEFAULT_BUCKET_BITS, DEFAULT_GROWING_BITS};
use crate::session::buckets::DEFAULT_NAMESPACE;
use crate::session::dictionary::Learning;
use crate::session::id::IdWidth;
use crate::session::meta::StoreMeta;

/// What a compact store is called, how many buckets it has, and its ids.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompactConfig {
    /// Prefix of every key, default `sp`.
    pub namespace: String,
    /// `log2` of the bucket count, 1..=24. `None`, the default, gives no
    /// count: a namespace recorded already opens with its recorded count,
    /// and a new one grows ([`CompactConfig::growing`] is then `None` too)
    /// from [`DEFAULT_GROWING_BITS`], or opens [`DEFAULT_BUCKET_BITS`]
    /// fixed buckets where it cannot grow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bucket_bits: Option<u8>,
    /// The width of the store's ids, default 160 bits.
    pub id_width: IdWidth,
    /// The per-user index ([`crate::users`]), off by default.
    pub user_index: Option<UserIndexConfig>,
    /// Recently viewed items per session ([`crate::viewed`]), off by
    /// default.
    pub viewed: Option<ViewedConfig>,
    /// Who removes expired sessions: a sweeper (the default), or the
    /// server itself ([`Expiry::Server`], Redis 7.4+).
    pub expiry: Expiry,
    /// Opens a store whose fields the server expires even on a server that
    /// then keeps buckets as hashtables (Valkey 9.0 and 9.1), at several
    /// times the memory; off by default, which refuses such a server. For
    /// measuring that cost.
    pub allow_converted_buckets: bool,
    /// Packs record data with a dictionary the store learns from its first
    /// writes and shares through the namespace ([`Learning`]; feature
    /// `compression`); off by default. A store given a trained dictionary
    /// instead uses [`Compact::with_dictionary`](super::Compact::with_dictionary).
    pub learn_dictionary: Option<Learning>,
    /// Splits a bucket in two when it fills and merges two back when they
    /// empty, under traffic ([`CompactConfig::growing`]); `bucket_bits`
    /// is then the fewest buckets the store has, and names its hash tags.
    /// `None`, the default, follows the namespace's record, and for a new
    /// namespace grows unless a bucket count is given
    /// ([`CompactConfig::resolve`]); `Some(false)` keeps fixed buckets
    /// ([`CompactConfig::fixed`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growing: Option<bool>,
}

/// Who removes a compact store's expired sessions from their buckets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expiry {
    /// A sweeper ([`crate::session::sweep`]) or the tool's daemon, which an
    /// index per group of 128 buckets guides: every server.
    #[default]
    Swept,
    /// The server: each field carries the session's expiry as a
    /// hash-field TTL too (`HEXPIREAT`, rewritten with every write that
    /// moves it), and so do its viewed items and the markers a user index
    /// leaves; out-of-line records already expire as keys. Redis then
    /// removes each at its second, and the bucket key with its last field,
    /// with no sweeper and no index. Needs a server that keeps such a
    /// hash a listpack (Redis 7.4 and later): [`Compact::new`](super::Compact::new) makes one to
    /// find out, and refuses a server without hash-field expiry, or one
    /// that converts the hash (Valkey 9.0 and 9.1). A store with a user
    /// index still needs a sweeper's full passes for the index's entries.
    Server,
}

impl Expiry {
    /// What a namespace's metadata records.
    pub fn from_meta(meta: &StoreMeta) -> Self {
        if meta.server_expiry {
            Self::Server
        } else {
            Self::Swept
        }
    }
}

impl Default for CompactConfig {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            bucket_bits: None,
            id_width: IdWidth::default(),
            user_index: None,
            viewed: None,
            expiry: Expiry::Swept,
            allow_converted_buckets: false,
            learn_dictionary: None,
            growing: None,
        }
    }
}

impl CompactConfig {
    /// `2^bucket_bits` buckets in the default namespace, 160-bit ids: a
    /// new namespace keeps that many, fixed, unless
    /// [`CompactConfig::with_growth`] says it grows from them.
    /// [`CompactConfig::default`] needs no count.
    pub fn new(bucket_bits: u8) -> Self {
        Self {
            bucket_bits: Some(bucket_bits),
            ..Self::default()
        }
    }

    /// A store that needs no bucket count: it starts with
    /// [`DEFAULT_GROWING_BITS`] buckets, one per group of keys, and splits
    /// each bucket in two as it fills and merges them back as they empty,
    /// online, so its buckets stay near the fill the listpack limits allow
    /// however many sessions it holds ([`crate::session::shape`]). Each
    /// group is one hash tag, so the store spreads over a Redis Cluster's
    /// slots by its `2^bucket_bits` groups: on a cluster of many primaries
    /// give it more ([`CompactConfig::with_growth`]). The store's record
    /// format is then [`GROWING_FORMAT`](crate::session::meta::GROWING_FORMAT) or later, which earlier versions
    /// refuse to open. It needs a sweeper ([`Expiry::Swept`]).
    pub fn growing() -> Self {
        Self::new(DEFAULT_GROWING_BITS).with_growth()
    }

    /// The same store growing from its `2^bucket_bits` buckets, which are
    /// also the fewest it shrinks back to ([`CompactConfig::growing`]).
    pub fn with_growth(mut self) -> Self {
        self.growing = Some(true);
        self
    }

    /// Keeps fixed buckets, `2^bucket_bits` of them
    /// ([`DEFAULT_BUCKET_BITS`] where no count is given), even in a new
    /// namespace opened with no count.
    pub fn fixed(mut self) -> Self {
        self.growing = Some(false);
        self
    }

    /// The bucket bits and whether the buckets grow, for a namespace that
    /// has recorded `recorded` (if any) on a server whose eviction policy
    /// is `policy`. What the config gives wins (and [`StoreMeta::claim`]
    /// refuses it where it differs from the record); the rest follows the
    /// record. A new namespace opened with neither grows, but for a store
    /// the server expires and under an eviction policy that may evict the
    /// shape's keys (`allkeys-*`): those keep fixed buckets, and say so
    /// in the log.
    pub fn resolve(&self, recorded: Option<&StoreMeta>, policy: Option<&str>) -> (u8, bool) {
        let recorded = recorded.filter(|m| m.layout == COMPACT_LAYOUT);
        let growing = match (self.growing, recorded) {
            (Some(growing), _) => growing,
            (None, Some(meta)) => meta.growing,
            (None, None) if self.bucket_bits.is_some() => false,
            (None, None) => {
                let evicts = policy.is_some_and(crate::limits::evicts_persistent_keys);
                let server = self.expiry == Expiry::Server;
                if evicts || server {
                    tracing::warn!(
                        namespace = self.namespace,
                        policy,
                        "a new compact store opened with no bucket count keeps fixed buckets \
                         (2^{DEFAULT_BUCKET_BITS}): {}",
                        if server {
                            "the server expires its fields, which a growing store does not keep"
                        } else {
                            "maxmemory-policy may evict the keys that record a growing store's \
                             shape"
                        }
                    );
                }
                !(evicts || server)
            }
        };
        let bits = self
            .bucket_bits
            .or(recorded.map(|m| m.bucket_bits))
            .unwrap_or(if growing {
                DEFAULT_GROWING_BITS
            } else {
                DEFAULT_BUCKET_BITS
            });
        (bits, growing)
    }

    /// Packs record data with a dictionary learned from the store's first
    /// writes ([`CompactConfig::learn_dictionary`]);
    /// `Learning::default()` trains on the first 1000 records of 24 bytes
    /// or more and stores the dictionary under id 255.
    pub fn with_learned_dictionary(mut self, learning: Learning) -> Self {
        self.learn_dictionary = Some(learning);
        self
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

    /// Keeps a per-user index ([`crate::users`]);
    /// `UserIndexConfig::new(bits)` has `2^bits` buckets: about one per 100
    /// to 400 sessions.
    pub fn with_user_index(mut self, config: UserIndexConfig) -> Self {
        self.user_index = Some(config);
        self
    }

    /// Keeps each session's recently viewed items ([`crate::viewed`]);
    /// `ViewedConfig::default()` keeps the last 25 of up to 8 bytes.
    pub fn with_viewed(mut self, config: ViewedConfig) -> Self {
        self.viewed = Some(config);
        self
    }

    /// Lets the server expire sessions itself ([`Expiry::Server`]): no
    /// sweeper needed for them.
    pub fn with_server_expiry(mut self) -> Self {
        self.expiry = Expiry::Server;
        self
    }
}
