//! Opening a compact store: its metadata, the server's limits and field
//! TTLs, its dictionary, and the settings a store is built with.

use super::user_index::UserIndex;
use super::{
    COMPACT_LAYOUT, Compact, CompactConfig, Expiry, GroupedBuckets, Growth, PIECES_FORMAT,
    SPLIT_FIELDS,
};
use crate::error::{Error, Result};
use crate::limits::{FieldTtls, ListpackLimits};
use crate::scripts::ByExpiry;
use crate::session::buckets::Buckets;
use crate::session::dictionary::{Dictionary, Learning, PACKED_FORMAT, Packer};
use crate::session::meta::{FORMAT_VERSION, GROWING_FORMAT, StoreMeta};
use crate::session::shape::Shape;
use redis::Script;
use std::sync::Arc;

/// Refuses [`Expiry::Server`] on a server without hash-field expiry, or,
/// unless `allow_converted`, one that converts a hash with a field TTL
/// out of its listpack, where buckets would cost several times as much.
pub(super) async fn check_field_ttls<C>(
    conn: &C,
    buckets: &Buckets,
    allow_converted: bool,
) -> Result<()>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let probe = format!("{}:probe:field-ttl", buckets.namespace());
    match crate::limits::field_ttls(&mut conn.clone(), &probe).await? {
        FieldTtls::Listpack => Ok(()),
        FieldTtls::Converted(encoding) if allow_converted => {
            tracing::warn!(
                encoding,
                "this server keeps a hash with a field TTL as {encoding}: every bucket of a \
                 store whose fields it expires costs several times its listpack size"
            );
            Ok(())
        }
        FieldTtls::Converted(encoding) => Err(Error::Config(format!(
            "this server keeps a hash with a field TTL as a {encoding}, not a listpack \
             (Valkey 9.0 and 9.1 do): each bucket of a store whose fields it expires would \
             cost several times its listpack size ({CONVERTED_COST}); keep Expiry::Swept \
             and run a sweeper"
        ))),
        FieldTtls::Unsupported(detail) => Err(Error::Config(format!(
            "this server has no hash-field expiry (HEXPIREAT, Redis 7.4 and later): \
             {detail}; keep Expiry::Swept and run a sweeper"
        ))),
    }
}

/// What converted buckets cost where they were measured
/// (`scripts/analysis.sh server-expiry`; the guide's sweeping chapter, "No sweeper: the server
/// expires fields").
pub(super) const CONVERTED_COST: &str = "on Valkey 9.1.2 at 1M sessions, 84.4 bytes a session against \
     34.7 with the same buckets swept, 2.4 times";

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Opens a compact store: checks the namespace's metadata (recording
    /// it if the store is new) and reads the server's listpack limits and
    /// eviction policy, as [`crate::session::layout::Bucketed::new`] does.
    pub async fn new(conn: C, config: CompactConfig) -> Result<Self> {
        let policy = crate::limits::eviction_policy(&mut conn.clone()).await?;
        let (bits, growing) = if config.bucket_bits.is_some() && config.growing.is_some() {
            config.resolve(None, policy.as_deref())
        } else {
            // Only a config that leaves something open reads the record
            // first: its bucket count, and whether it grows.
            let recorded = StoreMeta::read(&conn, &config.namespace).await?;
            config.resolve(recorded.as_ref(), policy.as_deref())
        };
        let buckets = Buckets::new(config.namespace.clone(), bits)?.with_id_width(config.id_width);
        let users = config
            .user_index
            .map(|c| UserIndex::new(buckets.namespace(), c))
            .transpose()?;
        let mut meta = Self::meta(&buckets);
        if let Some(users) = &users {
            meta.user_bits = users.bits();
            meta.user_grace_secs = users.config().grace_secs;
            meta.user_skew_secs = users.config().skew_secs;
        }
        if let Some(viewed) = &config.viewed {
            viewed.chunks()?;
            meta.viewed_keep = viewed.keep;
            meta.viewed_item_bytes = viewed.item_bytes;
        }
        meta.server_expiry = config.expiry == Expiry::Server;
        if growing {
            Self::check_growing(&config)?;
            meta.growing = true;
            // This version's format is a growing store's or later.
            meta.format = FORMAT_VERSION.max(GROWING_FORMAT);
            meta.split_fields = SPLIT_FIELDS;
        }
        if meta.server_expiry {
            check_field_ttls(&conn, &buckets, config.allow_converted_buckets).await?;
        }
        let (limits, policy, recorded) = crate::session::layout::open_bucket_store_under(
            &conn,
            &meta,
            buckets.namespace(),
            policy,
        )
        .await?;
        let mut layout = Self::with_limits(conn, buckets, limits)
            .with_users(users)
            .with_viewed(config.viewed)?
            .with_expiry(config.expiry)
            .with_pieces(recorded.format >= PIECES_FORMAT);
        if growing {
            if let Some(policy) = policy
                .as_deref()
                .filter(|p| crate::limits::evicts_persistent_keys(p))
            {
                return Err(Error::Config(format!(
                    "maxmemory-policy {policy} may evict the keys that record a growing \
                     store's shape, and its buckets would be lost with them: a growing \
                     store needs noeviction or a volatile-* policy"
                )));
            }
            layout = layout.with_growth_splitting(recorded.split_fields);
        }
        layout.eviction_policy = policy;
        layout.format = recorded.format;
        // Records of the namespace's format: an older one packs as its
        // other processes unpack.
        layout.packer = Arc::new(Packer::new(layout.buckets().namespace(), recorded.format));
        layout.recorded = Some(Arc::new(recorded));
        layout.plain = layout.plain_writes().await?;
        if let Some(learning) = config.learn_dictionary {
            layout = layout.learning_dictionary(learning).await?;
        }
        Ok(layout)
    }

    /// The same layout learning its dictionary ([`Learning`]), or packing
    /// with the namespace's learned one where that is stored already.
    /// Refused, as [`Compact::with_dictionary`] is, in a namespace of an
    /// older record format; and on a server whose eviction policy may
    /// evict the dictionary's key (`allkeys-*`): a process learning anew
    /// would store another dictionary under the id of the one its records
    /// were packed with.
    pub(super) async fn learning_dictionary(mut self, learning: Learning) -> Result<Self> {
        let namespace = self.buckets().namespace().to_owned();
        self.check_packed_format()?;
        match self.eviction_policy.as_deref() {
            Some(policy) if crate::limits::evicts_persistent_keys(policy) => {
                return Err(Error::Config(format!(
                    "maxmemory-policy {policy} may evict a learned dictionary's key, and a \
                     process learning anew would store another dictionary under its id: a \
                     store that learns its dictionary needs noeviction or a volatile-* \
                     policy (or give it a trained one: `with_dictionary`)"
                )));
            }
            Some(_) => {}
            None => tracing::warn!(
                namespace,
                "CONFIG GET is refused: cannot tell whether maxmemory-policy may evict the \
                 learned dictionary's key (it must be noeviction or volatile-*)"
            ),
        }
        let id = learning.id;
        let packer = Packer::learning(&namespace, self.format, learning)?;
        if let Some(stored) = Dictionary::fetch(&self.conn, &namespace, id).await? {
            self.packer = Arc::new(packer.packing_with(&stored)?);
        } else {
            self.packer = Arc::new(packer);
        }
        Ok(self)
    }

    pub(super) fn check_packed_format(&self) -> Result<()> {
        if self.format < PACKED_FORMAT {
            return Err(Error::Config(format!(
                "namespace {:?} was recorded with record format {}, whose processes do not \
                 unpack records; packed records need format {PACKED_FORMAT} (a new namespace)",
                self.buckets().namespace(),
                self.format
            )));
        }
        Ok(())
    }

    /// What a growing store does not keep: fields the server expires.
    pub(super) fn check_growing(config: &CompactConfig) -> Result<()> {
        if config.expiry == Expiry::Server {
            return Err(Error::Config(
                "a growing store keeps no fields the server expires: open it with fixed buckets"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The same layout with buckets that split and merge as it grows and
    /// shrinks ([`CompactConfig::growing`]), or fixed ones, with no
    /// metadata check (the benchmarks use it on servers they flush;
    /// [`Compact::new`] follows the namespace's record).
    pub fn with_growth(mut self, growing: bool) -> Self {
        self.growth = None;
        if growing {
            self = self.with_growth_splitting(SPLIT_FIELDS);
        }
        self
    }

    /// The same layout growing, its buckets splitting above
    /// `split_fields` fields as its namespace records
    /// ([`crate::session::meta::StoreMeta::split_fields`]).
    pub(super) fn with_growth_splitting(mut self, split_fields: u64) -> Self {
        let shape = Shape::new(self.buckets().clone());
        self.growth = Some(Arc::new(Growth::new(shape, self.limits, split_fields)));
        self
    }

    /// The same layout with expired sessions removed by a sweeper or by
    /// the server, with no check of the server (the benchmarks use it on
    /// servers they flush; [`Compact::new`] checks).
    pub fn with_expiry(mut self, expiry: Expiry) -> Self {
        self.server_expiry = expiry == Expiry::Server;
        self
    }

    /// The same layout keeping records that do not fit one value in
    /// pieces in their bucket (the default), or out of line as a store of
    /// record format 1 does, with no metadata check (the benchmarks use
    /// it on servers they flush; [`Compact::new`] follows the namespace's
    /// recorded format).
    pub fn with_pieces(mut self, pieces: bool) -> Self {
        self.pieces = pieces;
        self
    }

    /// The record format the namespace was recorded with
    /// ([`crate::session::meta::FORMAT_VERSION`] for a layout opened
    /// without the metadata check).
    pub fn format(&self) -> u32 {
        self.format
    }

    /// The same layout packing record data with `dictionary`, trained on
    /// the app's sessions (`sessionpack dictionary train`), where that
    /// makes it shorter ([`crate::session::dictionary`]): a 132-byte
    /// session of csrf token, locale and flash message packs to about 106
    /// bytes, and takes one piece in its bucket at the server's default
    /// limits instead of two. Costs this process microseconds a write and
    /// less a read; the server nothing. Stores the dictionary in the
    /// namespace (`SET NX`), so processes without it read what this one
    /// writes; another dictionary there under the same id is an
    /// [`Error::Config`], as is a namespace recorded before record format
    /// 3, whose processes would not unpack.
    pub async fn with_dictionary(self, dictionary: &Dictionary) -> Result<Self> {
        let namespace = self.buckets().namespace().to_owned();
        self.check_packed_format()?;
        dictionary.publish(&self.conn, &namespace).await?;
        // In the packer its clones share (a store's sweeper holds one),
        // so each knows the dictionary to record again should it go.
        self.packer.pack_with(dictionary)?;
        Ok(self)
    }

    /// The id of the dictionary this layout packs with, if it packs.
    pub fn dictionary_id(&self) -> Option<u8> {
        self.packer.dictionary_id()
    }

    /// Who removes expired sessions.
    pub fn expiry(&self) -> Expiry {
        if self.server_expiry {
            Expiry::Server
        } else {
            Expiry::Swept
        }
    }

    /// A script that writes fields, in the form for this store's expiry.
    pub(super) fn script(&self, script: &'static ByExpiry) -> &'static Script {
        if self.growth.is_some() {
            return script.growing();
        }
        script.get(self.server_expiry)
    }

    /// The same layout keeping (or not) a user index, with no metadata
    /// check (the benchmarks use it on servers they flush).
    pub fn with_users(mut self, users: Option<UserIndex>) -> Self {
        self.users = users;
        self
    }

    /// The user index, if the store keeps one.
    pub fn user_index(&self) -> Option<&UserIndex> {
        self.users.as_ref()
    }

    /// The metadata a compact store with these buckets records.
    pub fn meta(buckets: &Buckets) -> StoreMeta {
        StoreMeta {
            layout: COMPACT_LAYOUT.to_owned(),
            bucket_bits: buckets.bits(),
            id_bits: buckets.id_width().bits(),
            format: FORMAT_VERSION,
            ..StoreMeta::default()
        }
    }

    /// A compact layout with limits already known: no round trip, and no
    /// metadata check (the benchmarks use it on servers they flush).
    pub fn with_limits(conn: C, buckets: Buckets, limits: ListpackLimits) -> Self {
        if buckets.field_len() as u64 > limits.hash_value {
            tracing::warn!(
                field = buckets.field_len(),
                ?limits,
                "server's listpack value limit is below the field length: every bucket will convert"
            );
        }
        let packer = Arc::new(Packer::new(buckets.namespace(), FORMAT_VERSION));
        Self {
            conn,
            scheme: GroupedBuckets::new(buckets),
            limits,
            eviction_policy: None,
            clock: Default::default(),
            watch: Default::default(),
            users: None,
            viewed: None,
            server_expiry: false,
            pieces: true,
            format: FORMAT_VERSION,
            piece_guess: Default::default(),
            touches: Default::default(),
            entries_apart: Default::default(),
            packer,
            growth: None,
            recorded: None,
            plain: None,
        }
    }

    /// Records the namespace's metadata again, and the dictionary this
    /// process packs with, where they are gone: the server restarted
    /// empty, or was flushed, under a running app. Without them the
    /// command-line tools refuse the namespace, and a process starting
    /// next would learn another dictionary under the same id. The
    /// store's sweeper calls this each pass (one `EXISTS`). Returns
    /// whether the metadata was written.
    pub async fn record_again_if_gone(&self) -> Result<bool> {
        let Some(meta) = &self.recorded else {
            return Ok(false);
        };
        let namespace = self.buckets().namespace();
        let key = StoreMeta::key(namespace);
        let there: bool = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || key.clone()))?;
        if there {
            return Ok(false);
        }
        meta.claim(&self.conn, namespace).await?;
        if let Some(dictionary) = self.packer.current_dictionary()
            && let Err(e) = dictionary.publish(&self.conn, namespace).await
        {
            // Another process learned one under the id meanwhile: records
            // each packs are unreadable to the other until one restarts.
            tracing::error!(
                namespace,
                error = %e,
                "the dictionary this process packs with was gone, and another is stored \
                 under its id: restart this process to adopt it"
            );
        }
        tracing::warn!(
            namespace,
            "the namespace's metadata was gone (the server restarted empty or was \
             flushed): recorded again"
        );
        Ok(true)
    }
}
