//! The compact layout: sessions packed into `2^bits` buckets that are each
//! one listpack HASH, the session's expiry inside its value; a load is one
//! `HGET`.
//!
//! With no expiry ZSET per bucket, a bucket is bounded by
//! `hash-max-listpack-entries` (512 by default) rather than the ZSET's 128,
//! and each session stores its field once. The sweeper finds the buckets
//! that may hold expired sessions through an index: buckets are grouped
//! 128 to a hash tag, and each group has a ZSET of its buckets scored by a
//! lower bound of their earliest expiry (an insert lowers it with `ZADD LT`
//! in the same script; a sweep sets it to the true earliest). So index and
//! buckets share one Redis Cluster slot, and no index key holds more than
//! 128 buckets.
//!
//! Keys, for namespace `sp`, 2^20 buckets (2^13 groups): bucket `0x3fa07`
//! is `sp:{07f4}:7` (group `0x7f4`, bucket 7 of the group), its group's index
//! is `sp:{07f4}:i`, and a record too long for the listpack lives under
//! `sp:{07f4}:7:o:<field hex>` with the session's expiry.
//!
//! A value is either the decimal digits of `identity * 10^10 + expiry`,
//! which Redis keeps as one 8-byte listpack integer (an identity-only
//! session whose identity is at least 2^16 and below 922,337,203: 10 bytes
//! in the listpack, one less than the binary form), or the expiry as four
//! big-endian bytes followed by the record (or by the out-of-line marker).
//!
//! A record too long for one value (over `hash-max-listpack-value` less the
//! expiry's four bytes) and at most [`MAX_PIECED_RECORD`] bytes stays in
//! the bucket in pieces: its value holds the expiry, the byte `0xc3`, the
//! number `n` of pieces and the first `limit - 6` bytes of the payload;
//! fields named the session's field followed by the byte `1..=n` hold the
//! rest, `limit` bytes each. A load reads the value and the pieces it
//! expects in one `HMGET`. From record format [`CHECKED_FORMAT`] the
//! count byte has its high bit set and the payload is a 4-byte check of
//! the record (the low half of its XXH3-64, big-endian) followed by the
//! record, so a piece spliced from another record, a stale one, or one cut
//! short reads as [`Error::CorruptRecord`] (but for one damage in 2^32),
//! where before only a missing piece did. Longer records live under a key
//! of their own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use redis::{Script, ScriptInvocation};

use super::{Inserted, Layout, Stored, Written, check_batch};
use crate::clock::{MARGIN, ServerClock};
use crate::error::{Error, Result};
use crate::limits::{FieldTtls, ListpackLimits};
use crate::scripts::{
    self, ByExpiry, COMPACT_INSERT, COMPACT_REMOVE, COMPACT_REPLACE, COMPACT_TOUCH, PIPELINE_CHUNK,
};
use crate::session::buckets::Buckets;
use crate::session::dictionary::{Dictionary, Learning, PACKED_FORMAT, Packer};
use crate::session::id::{IdWidth, InvalidIdExt, SessionId};
use crate::session::key_text;
use crate::session::meta::{FORMAT_VERSION, GROWING_FORMAT, StoreMeta};
use crate::session::record;
use crate::session::shape::Shape;
use crate::ttl::{Deadline, check_ttl};
use user_index::UserIndex;
use viewed::ViewedConfig;

mod config;
mod delete;
mod growth;
mod health;
mod read;
mod take;
pub(crate) mod user_index;
mod users;
mod value;
pub(crate) mod viewed;
mod write;

pub use config::{CompactConfig, Expiry};
pub use value::StoredRecord;
pub(crate) use value::value_expiry;
use value::{Form, Value, parse_value, piece_field, pieces_of_len};

pub(crate) use growth::AnyBucket;
use growth::{Growth, REROUTES, Route};
pub use growth::{Reshaping, SPLIT_FIELDS};
pub use health::Health;
pub use users::NO_OWNER;

/// Default bucket bits: 2^14 buckets, about 1.6M sessions at ~100 each.
pub const DEFAULT_BUCKET_BITS: u8 = 14;
/// Default bucket bits of a growing store ([`CompactConfig::growing`]):
/// 16 groups, each one bucket at first.
pub const DEFAULT_GROWING_BITS: u8 = 4;
/// `log2` of the buckets that share one hash tag and one index ZSET: 128,
/// the ZSET's listpack entry limit.
pub const GROUP_BITS: u8 = 7;
/// The byte a value holds after its expiry when the record is out of line.
const OUT_OF_LINE: u8 = 0xc1;
/// The field every bucket of a growing store's current shape holds
/// ([`crate::session::shape`]).
const MARKER: &str = "";
/// The byte a value holds after its expiry when the record is in pieces
/// (MessagePack's `true`, which begins no record this crate writes; a
/// record that does is kept in the pieced form with no pieces).
const PIECED: u8 = 0xc3;
/// Records up to this many bytes stay in their bucket, in pieces where
/// they are longer than one value; longer ones go out of line.
pub const MAX_PIECED_RECORD: usize = 512;
/// The most pieces a record is cut into: a piece's field ends in its
/// number, below the bytes a tombstone's or a forward record's ends in.
const MAX_PIECES: usize = 15;
/// The record format from which a namespace keeps records in pieces.
const PIECES_FORMAT: u32 = 2;
/// The record format from which a record in pieces begins with a check of
/// its bytes (the module's docs), which earlier versions do not strip:
/// they refuse such a namespace.
pub const CHECKED_FORMAT: u32 = 5;
/// Set in a pieced value's count byte when its payload begins with the
/// record's check.
const CHECKED: u8 = 0x80;
/// Bytes of the check a pieced payload begins with.
pub const CHECK_BYTES: usize = 4;
/// Bytes a pieced value holds before the record: the expiry, the marker
/// and the number of pieces.
const PIECED_HEAD: usize = EXPIRY_BYTES + 2;
/// The layout's name in a namespace's metadata.
const COMPACT_LAYOUT: &str = "compact";
/// Bytes of the expiry at the head of a binary value.
const EXPIRY_BYTES: usize = 4;
/// Integer-form values are `identity * SCALE + expiry`.
const SCALE: u64 = 10_000_000_000;
/// Identities kept in the integer form: below this one binary is as small
/// (MessagePack writes them in 1 to 3 bytes), from the upper one the value
/// would not fit a signed 64-bit integer.
const INTEGER_FORM: std::ops::Range<u64> = 1 << 16..922_337_203;

/// What a process last read or wrote for a session: a tower-sessions
/// store remembers it to skip a save that would change too little, and to
/// delete a session it saw inline with one `HDEL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The session's expiry then, unix seconds.
    pub expires_at: u64,
    /// Its record's length then, in bytes.
    pub record_len: usize,
}

/// Whether a growing store's script found its bucket split or merged away
/// (`compact_route.lua`).
fn is_reshaped(e: &redis::RedisError) -> bool {
    e.code() == Some("RESHAPED")
}

/// Touches in a row handed from the short script to the full one after
/// which the full one goes first ([`Compact::touch_until`]).
const TOUCHES_BEFORE_FULL: u32 = 4;
/// Once the full script goes first, one touch in this many still tries
/// the short one, to notice records kept in their buckets again.
const TOUCH_PROBE_EVERY: u32 = 32;

/// Which script a touch tries first: a touch does not know the record's
/// form before it reads it. Shared by a layout's clones.
#[derive(Debug, Default)]
struct TouchRoute {
    /// Touches in a row the short script handed to the full one (records
    /// out of line), since the last it took itself.
    handed_on: std::sync::atomic::AtomicU32,
    /// Touches begun: each takes a ticket as it decides, so the probes are
    /// one in [`TOUCH_PROBE_EVERY`] however many touches are in flight
    /// (the count of those handed on moves only as their replies come).
    tickets: std::sync::atomic::AtomicU32,
}

impl TouchRoute {
    /// Whether the next touch tries the short script first.
    fn short_first(&self) -> bool {
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        self.handed_on.load(Ordering::Relaxed) < TOUCHES_BEFORE_FULL
            || ticket.is_multiple_of(TOUCH_PROBE_EVERY)
    }

    /// The short script took a touch itself.
    fn taken(&self) {
        self.handed_on.store(0, Ordering::Relaxed);
    }

    /// A touch went to the full script.
    fn handed_on(&self) {
        self.handed_on.fetch_add(1, Ordering::Relaxed);
    }
}

/// Share of written records that may go out of line before the store warns.
const OUT_OF_LINE_WARN_SHARE: f64 = 0.1;
/// Writes seen before the share is judged.
const OUT_OF_LINE_WARN_AFTER: u64 = 1000;

/// Counts how many written records go out of line, and warns once when a
/// large share does: each costs a key of its own (~100 B more than inline),
/// which a higher `hash-max-listpack-value` would save.
#[derive(Debug, Default)]
struct OutOfLineWatch {
    writes: AtomicU64,
    out_of_line: AtomicU64,
    longest: AtomicU64,
    warned: AtomicBool,
}

impl OutOfLineWatch {
    fn note(&self, value_len: u64, out_of_line: bool, limit: u64) {
        let writes = self.writes.fetch_add(1, Ordering::Relaxed) + 1;
        if !out_of_line {
            return;
        }
        let out = self.out_of_line.fetch_add(1, Ordering::Relaxed) + 1;
        self.longest.fetch_max(value_len, Ordering::Relaxed);
        if writes >= OUT_OF_LINE_WARN_AFTER
            && out as f64 > OUT_OF_LINE_WARN_SHARE * writes as f64
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                share = format!("{:.0}%", 100.0 * out as f64 / writes as f64),
                longest_value = self.longest.load(Ordering::Relaxed),
                hash_max_listpack_value = limit,
                "many session records are longer than the server's hash-max-listpack-value \
                 and go out of line, each under a key of its own; `sessionpack advise \
                 --profile` says which limit would keep them in their buckets"
            );
        }
    }
}

/// Refuses [`Expiry::Server`] on a server without hash-field expiry, or,
/// unless `allow_converted`, one that converts a hash with a field TTL
/// out of its listpack, where buckets would cost several times as much.
async fn check_field_ttls<C>(conn: &C, buckets: &Buckets, allow_converted: bool) -> Result<()>
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
/// (`scripts/analysis.sh server-expiry`; README, "No sweeper: the server
/// expires fields").
const CONVERTED_COST: &str = "on Valkey 9.1.2 at 1M sessions, 84.4 bytes a session against \
     34.7 with the same buckets swept, 2.4 times";

/// How the compact layout names its keys: buckets, grouped 128 to a hash
/// tag, each group with one index ZSET.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupedBuckets {
    buckets: Buckets,
}

impl GroupedBuckets {
    /// Groups over `buckets`.
    pub fn new(buckets: Buckets) -> Self {
        Self { buckets }
    }

    /// The buckets (bucket of an id, its field).
    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }

    /// Buckets per group (the low bits of a bucket number).
    fn group_shift(&self) -> u8 {
        self.buckets.bits().min(GROUP_BITS)
    }

    /// The number of groups (hash tags, index keys).
    pub fn groups(&self) -> u32 {
        1 << (self.buckets.bits() - self.group_shift())
    }

    /// The group a bucket belongs to.
    pub fn group_of(&self, bucket: u32) -> u32 {
        bucket >> self.group_shift()
    }

    /// The buckets of a group.
    pub fn group_buckets(&self, group: u32) -> std::ops::Range<u32> {
        let shift = self.group_shift();
        (group << shift)..((group + 1) << shift)
    }

    /// A bucket's member in its group's index: its number within the group.
    pub fn member(&self, bucket: u32) -> u32 {
        bucket & ((1 << self.group_shift()) - 1)
    }

    /// The hash tag shared by a group's keys, braces included.
    pub fn tag(&self, group: u32) -> String {
        let mut tag = String::with_capacity(self.tag_width() + 2);
        key_text::push_tag(&mut tag, group, self.tag_width());
        tag
    }

    /// The hex digits of a tag.
    fn tag_width(&self) -> usize {
        let bits = self.buckets.bits() - self.group_shift();
        usize::from(bits.div_ceil(4)).max(1)
    }

    /// A bucket's HASH: `namespace:{tag}:member`.
    pub fn bucket_key(&self, bucket: u32) -> String {
        let mut key = self.tagged(self.group_of(bucket), 9);
        key.push(':');
        key_text::push_hex(&mut key, u64::from(self.member(bucket)), 0);
        key
    }

    /// A group's index ZSET.
    pub fn index_key(&self, group: u32) -> String {
        let mut key = self.tagged(group, 2);
        key.push_str(":i");
        key
    }

    /// The key of a record stored out of line.
    pub fn out_of_line_key(&self, bucket: u32, field: &[u8]) -> String {
        let mut key = self.bucket_key(bucket);
        key.reserve(3 + 2 * field.len());
        key.push_str(":o:");
        key_text::push_hex_bytes(&mut key, field);
        key
    }

    /// `namespace:{tag}` of `group`, with room for `more` bytes.
    fn tagged(&self, group: u32, more: usize) -> String {
        key_text::tagged(self.buckets.namespace(), group, self.tag_width(), more)
    }

    /// Chunk `chunk` of a bucket's viewed items ([`crate::viewed`]).
    pub fn viewed_key(&self, bucket: u32, chunk: usize) -> String {
        format!("{}:v{chunk}", self.bucket_key(bucket))
    }
}

/// Sessions packed into listpack HASH buckets, expiry inside each value,
/// with a per-group index of the buckets' earliest expiries.
#[derive(Clone)]
pub struct Compact<C> {
    conn: C,
    scheme: GroupedBuckets,
    limits: ListpackLimits,
    eviction_policy: Option<String>,
    clock: Arc<ServerClock>,
    watch: Arc<OutOfLineWatch>,
    users: Option<UserIndex>,
    /// The viewed items kept, and their chunks per bucket.
    viewed: Option<(ViewedConfig, usize)>,
    /// Whether the server expires fields ([`Expiry::Server`]).
    server_expiry: bool,
    /// Whether records too long for one value are kept in pieces.
    pieces: bool,
    /// The namespace's record format (this version's, where unchecked).
    format: u32,
    /// The pieces a load asks for with the value: as many as the last
    /// pieced value read had.
    piece_guess: Arc<std::sync::atomic::AtomicUsize>,
    /// Which script a touch tries first.
    touches: Arc<TouchRoute>,
    /// Packs record data with the store's dictionary, if it has one, and
    /// unpacks what the namespace's processes packed.
    packer: Arc<Packer>,
    /// The shape of a growing store; none for fixed buckets.
    growth: Option<Arc<Growth>>,
    /// The namespace's metadata as recorded when the store opened (none
    /// for a layout made without [`Compact::new`]).
    recorded: Option<Arc<StoreMeta>>,
}

impl<C> std::fmt::Debug for Compact<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compact")
            .field("buckets", self.scheme.buckets())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The names one id's operations need.
pub(crate) struct Keys {
    pub(crate) bucket: String,
    pub(crate) index: String,
    pub(crate) member: u32,
    pub(crate) field: Vec<u8>,
    /// A fixed bucket's number (a growing store's bucket is its route's
    /// node), which names its viewed chunks ([`Compact::chunk_keys`]).
    pub(crate) bucket_no: u32,
    /// The session's id, which names its record's key when the record is
    /// out of line ([`Compact::out_of_line_key`]).
    pub(crate) id: SessionId,
    /// In a growing store, the bucket and the shape it was chosen by.
    pub(crate) route: Option<Route>,
}

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
            meta.split_fields = growth::SPLIT_FIELDS;
        }
        if meta.server_expiry {
            check_field_ttls(&conn, &buckets, config.allow_converted_buckets).await?;
        }
        let (limits, policy, recorded) =
            super::open_bucket_store_under(&conn, &meta, buckets.namespace(), policy).await?;
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
        layout.recorded = Some(Arc::new(recorded));
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
    async fn learning_dictionary(mut self, learning: Learning) -> Result<Self> {
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
        let packer = Packer::learning(&namespace, learning)?;
        if let Some(stored) = Dictionary::fetch(&self.conn, &namespace, id).await? {
            self.packer = Arc::new(packer.packing_with(&stored)?);
        } else {
            self.packer = Arc::new(packer);
        }
        Ok(self)
    }

    fn check_packed_format(&self) -> Result<()> {
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
    fn check_growing(config: &CompactConfig) -> Result<()> {
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
            self = self.with_growth_splitting(growth::SPLIT_FIELDS);
        }
        self
    }

    /// The same layout growing, its buckets splitting above
    /// `split_fields` fields as its namespace records
    /// ([`crate::session::meta::StoreMeta::split_fields`]).
    fn with_growth_splitting(mut self, split_fields: u64) -> Self {
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
    fn script(&self, script: &'static ByExpiry) -> &'static Script {
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
        let packer = Arc::new(Packer::new(buckets.namespace()));
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
            packer,
            growth: None,
            recorded: None,
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

    /// The connection the layout uses.
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// The bucket scheme (bucket of an id, its field).
    pub fn buckets(&self) -> &Buckets {
        self.scheme.buckets()
    }

    /// The key names: buckets, groups, index keys.
    pub fn scheme(&self) -> &GroupedBuckets {
        &self.scheme
    }

    /// The listpack limits this layout works to.
    pub fn limits(&self) -> ListpackLimits {
        self.limits
    }

    /// The server's `maxmemory-policy` when the layout was opened.
    pub fn eviction_policy(&self) -> Option<&str> {
        self.eviction_policy.as_deref()
    }

    pub(crate) fn keys(&self, id: &SessionId) -> Keys {
        if let Some(growth) = &self.growth {
            return growth.keys(id);
        }
        let bucket = self.buckets().bucket_of(id);
        let field = self.buckets().field(id);
        Keys {
            bucket: self.scheme.bucket_key(bucket),
            index: self.scheme.index_key(self.scheme.group_of(bucket)),
            member: self.scheme.member(bucket),
            id: *id,
            field,
            bucket_no: bucket,
            route: None,
        }
    }

    /// Where `k`'s record goes when it is out of line: named only by the
    /// calls that send it.
    pub(crate) fn out_of_line_key(&self, k: &Keys) -> String {
        match &self.growth {
            Some(growth) => growth.out_of_line_key(&k.id),
            None => self.scheme.out_of_line_key(k.bucket_no, &k.field),
        }
    }

    /// The viewed chunk keys of the bucket `k` names; none where the store
    /// keeps no viewed items. Named only by the calls that send them.
    pub(crate) fn chunk_keys(&self, k: &Keys) -> Vec<String> {
        self.chunk_keys_of(match k.route {
            Some(route) => AnyBucket::Grown(route.node),
            None => AnyBucket::Fixed(k.bucket_no),
        })
    }

    /// The viewed chunk keys of bucket `b`; none where the store keeps no
    /// viewed items.
    pub(crate) fn chunk_keys_of(&self, b: AnyBucket) -> Vec<String> {
        match (b, self.shape()) {
            (AnyBucket::Grown(node), Some(shape)) => (0..self.viewed_chunks())
                .map(|c| shape.viewed_key(node, c))
                .collect(),
            (AnyBucket::Fixed(n), _) => self.viewed_keys(n),
            (AnyBucket::Grown(_), None) => Vec::new(),
        }
    }

    /// A bucket's viewed chunk keys; none where the store keeps no viewed
    /// items.
    pub fn viewed_keys(&self, bucket: u32) -> Vec<String> {
        (0..self.viewed_chunks())
            .map(|c| self.scheme.viewed_key(bucket, c))
            .collect()
    }

    /// Notes a record whose write is done, for the metrics and the
    /// out-of-line warning: once per write, never for one refused or
    /// failed, however many attempts it took.
    fn wrote(&self, record: &[u8]) {
        self.note(self.form_of(record), record);
    }

    /// [`Compact::wrote`] where `inserted` says the record went in.
    fn wrote_if_created(&self, record: &[u8], inserted: Inserted) -> Inserted {
        if matches!(inserted, Inserted::Created { .. }) {
            self.wrote(record);
        }
        inserted
    }

    /// [`Compact::wrote`] where `written` says the record went in.
    fn wrote_if_done(&self, record: &[u8], written: Written) -> Written {
        if written == Written::Done {
            self.wrote(record);
        }
        written
    }

    /// Notes a record written in `form`.
    fn note(&self, form: Form, record: &[u8]) {
        let len = (record.len() + EXPIRY_BYTES) as u64;
        let out_of_line = form == Form::OutOfLine;
        self.watch.note(len, out_of_line, self.limits.hash_value);
        crate::metrics::record_written(
            "compact",
            match form {
                Form::OutOfLine => crate::metrics::Placement::OutOfLine,
                Form::Pieced { .. } => crate::metrics::Placement::Pieces,
                _ => crate::metrics::Placement::Inline,
            },
        );
    }

    /// How a record of these bytes is stored, unnoted.
    fn form_of(&self, record: &[u8]) -> Form {
        // A record that is the out-of-line marker, or begins with the
        // pieced one, would read as that form (packed record data begins
        // with the out-of-line byte and is longer).
        let marked = record == [OUT_OF_LINE] || record.first() == Some(&PIECED);
        if !marked && ((record.len() + EXPIRY_BYTES) as u64) <= self.limits.hash_value {
            return self.form_inline(record);
        }
        match self.piece_size() {
            Some(size)
                if record.len() <= MAX_PIECED_RECORD
                    && pieces_of_len(self.payload_len(record.len()), size) <= MAX_PIECES =>
            {
                Form::Pieced {
                    size,
                    checked: self.checked(),
                }
            }
            _ => Form::OutOfLine,
        }
    }

    /// Whether this store's records in pieces begin with their check: in a
    /// namespace of [`CHECKED_FORMAT`] on, which only versions that strip
    /// it open.
    fn checked(&self) -> bool {
        self.format >= CHECKED_FORMAT
    }

    /// The length of the payload a record of `len` bytes is cut into
    /// pieces as.
    fn payload_len(&self, len: usize) -> usize {
        len + if self.checked() { CHECK_BYTES } else { 0 }
    }

    /// The size of a piece, where this store keeps records in pieces: its
    /// format allows it, and the listpack value limit leaves room for a
    /// pieced value's head and a piece's field.
    fn piece_size(&self) -> Option<usize> {
        let limit = usize::try_from(self.limits.hash_value).unwrap_or(usize::MAX);
        (self.pieces && limit > PIECED_HEAD && self.buckets().field_len() < limit)
            .then_some(limit.min(MAX_PIECED_RECORD))
    }

    /// Whether a record of `len` bytes stays in its bucket, in one value
    /// or in pieces (without noting it for the out-of-line warning).
    pub fn fits(&self, len: usize) -> bool {
        ((len + EXPIRY_BYTES) as u64) <= self.limits.hash_value
            || (len <= MAX_PIECED_RECORD
                && self
                    .piece_size()
                    .is_some_and(|size| pieces_of_len(self.payload_len(len), size) <= MAX_PIECES))
    }

    /// The fields a record of `len` bytes stored under `field` takes
    /// besides the session's own: its pieces.
    fn piece_fields(&self, field: &[u8], len: usize) -> Vec<Vec<u8>> {
        match self.piece_size() {
            Some(size) if ((len + EXPIRY_BYTES) as u64) > self.limits.hash_value => (1
                ..=pieces_of_len(self.payload_len(len), size))
                .map(|i| piece_field(field, i))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The form of a record known to fit the listpack.
    fn form_inline(&self, record: &[u8]) -> Form {
        match record::int_only(record) {
            Some(identity) if INTEGER_FORM.contains(&identity) => Form::Integer(identity),
            _ => Form::Inline,
        }
    }

    /// A script call on `id`'s bucket: bucket, index and out-of-line keys,
    /// then the viewed chunk keys (a script removing the session removes
    /// its chunk fields); field and member.
    fn invocation<'a>(&self, script: &'a Script, k: &Keys) -> ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.key(&k.bucket)
            .key(&k.index)
            .key(self.out_of_line_key(k));
        for key in self.chunk_keys(k) {
            inv.key(key);
        }
        inv.arg(&k.field).arg(k.member);
        inv
    }

    /// A short script's call on `id`'s bucket (`compact_rewrite.lua`,
    /// `compact_add.lua`): bucket and index keys only, since it touches no
    /// other; field and member.
    fn short_invocation<'a>(&self, script: &'a Script, k: &Keys) -> ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.key(&k.bucket).key(&k.index);
        inv.arg(&k.field).arg(k.member);
        inv
    }

    /// Arguments saying which record a conditional write expects: its
    /// identity in decimal when it is identity-only (it may be stored in
    /// the integer form), and its bytes.
    fn expected_args(inv: &mut ScriptInvocation<'_>, expected: Option<&[u8]>) {
        let ident = match expected.and_then(record::int_only) {
            Some(identity) => identity.to_string(),
            None => String::new(),
        };
        inv.arg(scripts::flag(expected.is_some()))
            .arg(ident)
            .arg(expected.unwrap_or_default());
    }

    /// An insert script call; `indexed_at`, for a store with a user index,
    /// is when the session's entry was written.
    fn insert_invocation(
        &self,
        k: &Keys,
        record: &[u8],
        expiry: Deadline,
        indexed_at: Option<u64>,
    ) -> ScriptInvocation<'static> {
        let form = self.form_of(record);
        let mut inv = self.script(&COMPACT_INSERT).prepare_invoke();
        inv.key(&k.bucket).key(&k.index);
        // The out-of-line key is named only when it will be written.
        if form == Form::OutOfLine {
            inv.key(self.out_of_line_key(k));
        }
        let (mode, secs) = match expiry {
            Deadline::In(secs) => ("in", secs),
            Deadline::At(at) => ("at", at),
        };
        inv.arg(&k.field)
            .arg(k.member)
            .arg(form.code())
            .arg(&*form.payload(record))
            .arg(mode)
            .arg(secs);
        if let (Some(users), Some(at)) = (&self.users, indexed_at) {
            inv.arg(at).arg(users.config().grace_secs);
        }
        inv
    }

    fn error<'a>(&'a self, id: &'a SessionId) -> impl FnOnce(redis::RedisError) -> Error + 'a {
        move |e| Error::from_redis(e, || self.buckets().location(id))
    }

    fn corrupt(&self, id: &SessionId) -> Error {
        Error::CorruptRecord {
            location: self.buckets().location(id),
            reason: "the bucket's value is in neither the integer nor the binary form".into(),
        }
    }

    /// A script call on `id`'s bucket, `build` making it for the keys the
    /// id is routed to. In a growing store the call follows a bucket split
    /// or merged under it, and a write that fills its bucket splits it
    /// before this returns ([`growth`]).
    async fn call<T: redis::FromRedisValue>(
        &self,
        id: &SessionId,
        build: impl Fn(&Keys) -> ScriptInvocation<'static>,
    ) -> Result<T> {
        self.routed(id, build, true)
            .await?
            .ok_or_else(|| self.reshaped(id))
    }

    /// [`Compact::call`] for a script that acts on a session already
    /// there (a save, a touch, a removal): where the shape routes `id` to
    /// a current bucket that was never marked, no session can be in it, so
    /// the reply is `T::default()` (none, 0: no session) and nothing is
    /// written, not even the marker a create would claim the bucket with.
    async fn call_on_session<T: redis::FromRedisValue + Default>(
        &self,
        id: &SessionId,
        build: impl Fn(&Keys) -> ScriptInvocation<'static>,
    ) -> Result<T> {
        Ok(self.routed(id, build, false).await?.unwrap_or_default())
    }

    /// A script call on `id`'s bucket, following it through splits and
    /// merges; `None` where `claim` is false and the bucket the shape
    /// routes to is current but unmarked.
    async fn routed<T: redis::FromRedisValue>(
        &self,
        id: &SessionId,
        build: impl Fn(&Keys) -> ScriptInvocation<'static>,
        claim: bool,
    ) -> Result<Option<T>> {
        if self.growth.is_none() {
            return build(&self.keys(id))
                .invoke_async(&mut self.conn.clone())
                .await
                .map(Some)
                .map_err(self.error(id));
        }
        for _ in 0..REROUTES {
            let k = self.keys(id);
            match build(&k)
                .invoke_async::<(T, u64)>(&mut self.conn.clone())
                .await
            {
                Ok((reply, fields)) => {
                    self.split_if_full(&k, fields).await;
                    return Ok(Some(reply));
                }
                Err(e) if is_reshaped(&e) => {
                    if !self.reroute(id, &k, claim).await? {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(self.error(id)(e)),
            }
        }
        Err(self.reshaped(id))
    }

    fn reshaped(&self, id: &SessionId) -> Error {
        Error::Reshaped {
            location: self.location(id),
            attempts: REROUTES,
        }
    }

    /// The server's time in whole seconds, read now.
    async fn server_now(&self) -> Result<u64> {
        Ok(self.read_clock().await?.0)
    }

    /// A `TIME` call, recorded in the estimate: the reply's whole seconds
    /// and the interval the server's time lies in now, however wide.
    async fn read_clock(&self) -> Result<(u64, (f64, f64))> {
        let sent = Instant::now();
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await?;
        self.clock.record(secs, micros, sent);
        Ok((secs, crate::clock::interval(secs, micros, sent)))
    }

    /// The interval the server's time lies in now, by the estimate,
    /// refreshed with a `TIME` call when stale. Where three replies in a
    /// row come too late for the estimate (a loaded server or host), the
    /// last one's wider interval is used: it still holds, and the calls
    /// built on it only ask the server more often.
    async fn time_bounds(&self) -> Result<(f64, f64)> {
        for _ in 0..2 {
            if let Some(bounds) = self.clock.bounds() {
                return Ok(bounds);
            }
            self.read_clock().await?;
        }
        match self.clock.bounds() {
            Some(bounds) => Ok(bounds),
            None => Ok(self.read_clock().await?.1),
        }
    }

    /// The expiry an insert writes, decided by the clock estimate where it
    /// can: `Some(Ok(at))`, `Some(Err(()))` for an absolute expiry surely
    /// past, `None` when too close to now to call (the insert script then
    /// asks the server). A lifetime counts from the latest the server's
    /// time may be, so the session lives at least that long.
    async fn decide_expiry(&self, expiry: Deadline) -> Result<Option<Result<u64, ()>>> {
        let (earliest, latest) = self.time_bounds().await?;
        Ok(match expiry {
            Deadline::In(secs) => {
                let at = latest.ceil() as u64 + secs;
                (at <= crate::ttl::MAX_EXPIRES_AT).then_some(Ok(at))
            }
            Deadline::At(at) if (at as f64) <= earliest - MARGIN => Some(Err(())),
            Deadline::At(at) if (at as f64) > latest + MARGIN => Some(Ok(at)),
            Deadline::At(_) => None,
        })
    }
}

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// [`Compact::read_rest`] for a batch: where a growing store's bucket
    /// moved since the value was read, the session is loaded again alone.
    async fn read_rest_or_load(
        &self,
        id: &SessionId,
        k: &Keys,
        need: Assembled,
    ) -> Result<Option<Stored>> {
        match self.read_rest(id, k, need).await {
            Err(Error::Reshaped { .. }) => self.load(id).await,
            done => done,
        }
    }
}

/// A value as read (none if there is no field), and the pieces read with
/// it, in order.
type ValueRead = (Option<Vec<u8>>, Vec<Option<Vec<u8>>>);

/// What a value read back still needs.
enum Assembled {
    /// Nothing: the session, or none.
    Done(Option<Stored>),
    /// Its out-of-line record.
    OutOfLine,
    /// Its pieces, this many.
    Pieces(usize),
}

impl<C> Layout for Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    fn name(&self) -> &'static str {
        "compact"
    }

    fn location(&self, id: &SessionId) -> String {
        self.buckets().location(id)
    }

    async fn pack(&self, data: Vec<u8>) -> Vec<u8> {
        self.packer.pack(&self.conn, data).await
    }

    async fn unpack<'a>(
        &'a self,
        id: &'a SessionId,
        data: &'a [u8],
    ) -> Result<std::borrow::Cow<'a, [u8]>> {
        self.packer
            .unpack(&self.conn, data, || self.location(id))
            .await
    }

    fn id_width(&self) -> IdWidth {
        self.buckets().id_width()
    }

    fn stamps_ids(&self) -> bool {
        self.users.is_some()
    }

    async fn new_id(&self) -> Result<SessionId> {
        if self.users.is_none() {
            return SessionId::generate_with(self.id_width());
        }
        SessionId::generate_stamped(self.id_width(), self.stamp_now().await?)
    }

    async fn insert(&self, id: &SessionId, record: &[u8], expiry: Deadline) -> Result<Inserted> {
        let inserted = self.insert_checked(id, record, expiry).await?;
        Ok(self.wrote_if_created(record, inserted))
    }

    async fn insert_new(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> Result<Inserted> {
        let inserted = self.insert_checked(id, record, expiry).await?;
        Ok(self.wrote_if_created(record, inserted))
    }

    async fn insert_successor(
        &self,
        from: &SessionId,
        prev: Option<&SessionId>,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> Result<Inserted> {
        if let Some(users) = &self.users
            && let Some(head) = self.owner_head(id, record)?
        {
            let expiry = expiry.check()?;
            id.check_width(self.buckets().id_width())?;
            let inserted = self
                .insert_indexed(users, head, id, record, expiry, Some((from, prev)))
                .await?;
            return Ok(self.wrote_if_created(record, inserted));
        }
        self.insert(id, record, expiry).await
    }

    async fn load(&self, id: &SessionId) -> Result<Option<Stored>> {
        for _ in 0..REROUTES {
            let k = self.keys(id);
            match self.load_at(id, &k).await {
                Err(Error::Reshaped { .. }) if self.reroute(id, &k, false).await? => {}
                Err(Error::Reshaped { .. }) => return Ok(None),
                done => return done,
            }
        }
        Err(self.reshaped(id))
    }

    async fn touch(&self, id: &SessionId, ttl_secs: u64) -> Result<Option<u64>> {
        let ttl = check_ttl(ttl_secs)?;
        self.call_on_session(id, |k| {
            let mut inv = self.invocation(self.script(&COMPACT_TOUCH), k);
            inv.arg(ttl);
            inv
        })
        .await
    }

    async fn replace(
        &self,
        id: &SessionId,
        record: &[u8],
        expected: Option<&[u8]>,
    ) -> Result<Written> {
        let form = self.form_of(record);
        let payload = form.payload(record);
        let invocation = |k: &Keys, owner: Option<&[u8]>| {
            let mut inv = self.invocation(self.script(&COMPACT_REPLACE), k);
            inv.arg(form.code()).arg(&*payload);
            Self::expected_args(&mut inv, expected);
            if let Some(head) = owner {
                let ident = record::int_only(head).map_or(String::new(), |n| n.to_string());
                inv.arg(ident).arg(head);
            }
            inv
        };
        // With a user index, a write that gives the session another owner
        // is refused until that owner's entry is written (first, as for a
        // create); a write that keeps the owner costs nothing more.
        let owner = match &self.users {
            Some(_) => self.owner_head(id, record)?,
            None => None,
        };
        if let Some(head) = owner {
            let code: i64 = self
                .call_on_session(id, |k| invocation(k, Some(head)))
                .await?;
            if code != -3 {
                return Ok(self.wrote_if_done(record, Written::from_code(code)));
            }
            self.ensure_entry(head, id).await?;
        }
        let code = self.call_on_session(id, |k| invocation(k, None)).await?;
        Ok(self.wrote_if_done(record, Written::from_code(code)))
    }

    async fn remove(&self, id: &SessionId, expected: Option<&Stored>) -> Result<Written> {
        let code = self
            .call_on_session(id, |k| {
                let mut inv = self.invocation(self.script(&COMPACT_REMOVE), k);
                Self::expected_args(&mut inv, expected.map(|e| e.record.as_slice()));
                inv.arg(expected.map_or(0, |e| e.expires_at));
                inv
            })
            .await?;
        Ok(Written::from_code(code))
    }

    async fn insert_many(
        &self,
        items: &[(SessionId, Vec<u8>)],
        ttl_secs: u64,
    ) -> Result<Vec<Inserted>> {
        check_batch(items, ttl_secs, self.buckets().id_width())?;
        if self.growth.is_some() {
            let inserted = self.insert_many_growing(items, ttl_secs).await?;
            for ((_, record), i) in items.iter().zip(&inserted) {
                self.wrote_if_created(record, *i);
            }
            return Ok(inserted);
        }
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(PIPELINE_CHUNK) {
            // Index entries first, as for one insert.
            let indexed_at = self.index_add_many(chunk).await?;
            let invocations: Vec<_> = chunk
                .iter()
                .map(|(id, record)| {
                    self.insert_invocation(
                        &self.keys(id),
                        record,
                        Deadline::In(ttl_secs),
                        indexed_at,
                    )
                })
                .collect();
            let ids: Vec<_> = chunk.iter().map(|(id, _)| *id).collect();
            let codes: Vec<i64> = crate::session::layout::pipeline::pipelined(
                &self.conn,
                self,
                &ids,
                &invocations,
                self.script(&COMPACT_INSERT),
            )
            .await?;
            for ((_, record), code) in chunk.iter().zip(codes) {
                out.push(self.wrote_if_created(record, Inserted::from_code(code)));
            }
        }
        Ok(out)
    }

    async fn carry_over(&self, from: &SessionId, to: &SessionId) -> Result<()> {
        self.copy_viewed(from, to).await
    }

    async fn load_many(&self, ids: &[SessionId]) -> Result<Vec<Option<Stored>>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(PIPELINE_CHUNK) {
            let guess = self.pieces_to_ask();
            let mut pipe = redis::pipe();
            let keys: Vec<Keys> = chunk.iter().map(|id| self.keys(id)).collect();
            for k in &keys {
                self.ask_value(&mut pipe, k, guess);
            }
            pipe.cmd("TIME");
            let sent = Instant::now();
            let mut replies: Vec<redis::Value> =
                pipe.query_async(&mut self.conn.clone()).await.map_err(
                    crate::session::layout::pipeline::pipeline_error(self, chunk, 1),
                )?;
            let time = replies.pop().unwrap_or(redis::Value::Nil);
            let (now, micros): (u64, u64) = redis::from_redis_value(time)?;
            self.clock.record(now, micros, sent);
            // Records with more pieces than guessed: read again, value and
            // all, in one more round trip for the chunk.
            let mut more: Vec<(usize, usize)> = Vec::new();
            // Misses in a growing store's buckets that lack their marker:
            // loaded again one by one, each following its bucket.
            let mut moved: Vec<usize> = Vec::new();
            for (n, ((id, k), reply)) in chunk.iter().zip(&keys).zip(replies).enumerate() {
                let (bytes, pieces) = match self.value_read(id, k, reply, guess) {
                    Err(Error::Reshaped { .. }) => {
                        moved.push(n);
                        out.push(None);
                        continue;
                    }
                    read => read?,
                };
                let Some(bytes) = bytes else {
                    out.push(None);
                    continue;
                };
                let value = parse_value(&bytes).ok_or_else(|| self.corrupt(id))?;
                // The time was read after the values: never early.
                if value.expires_at() <= now {
                    out.push(None);
                    continue;
                }
                match self.assemble(id, value, pieces)? {
                    Assembled::Done(stored) => out.push(stored),
                    Assembled::Pieces(want) => {
                        more.push((n, want));
                        out.push(None);
                    }
                    need => out.push(self.read_rest_or_load(id, k, need).await?),
                }
            }
            let first = out.len() - chunk.len();
            for n in moved {
                out[first + n] = self.load(&chunk[n]).await?;
            }
            if more.is_empty() {
                continue;
            }
            let again: Vec<SessionId> = more.iter().map(|&(n, _)| chunk[n]).collect();
            let mut pipe = redis::pipe();
            for &(n, want) in &more {
                self.ask_value(&mut pipe, &keys[n], want);
            }
            let replies: Vec<redis::Value> =
                pipe.query_async(&mut self.conn.clone()).await.map_err(
                    crate::session::layout::pipeline::pipeline_error(self, &again, 1),
                )?;
            for (&(n, want), reply) in more.iter().zip(replies) {
                let (id, k) = (&chunk[n], &keys[n]);
                // Judged live above, and an expiry only moves forward
                // while an id lives; gone now if deleted meanwhile.
                let (bytes, pieces) = match self.value_read(id, k, reply, want) {
                    Err(Error::Reshaped { .. }) => {
                        out[first + n] = self.load(id).await?;
                        continue;
                    }
                    read => read?,
                };
                let Some(bytes) = bytes else {
                    continue;
                };
                let value = parse_value(&bytes).ok_or_else(|| self.corrupt(id))?;
                let need = self.assemble(id, value, pieces)?;
                out[first + n] = self.read_rest_or_load(id, k, need).await?;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use value::check_of;

    #[test]
    fn values_round_trip_in_both_forms() {
        let record = record::encode(&1_234_567u64, &()).unwrap();
        let n = 1_234_567 * SCALE + 1_800_000_000;
        assert_eq!(
            parse_value(n.to_string().as_bytes()),
            Some(Value::Here {
                expires_at: 1_800_000_000,
                record: record.clone()
            })
        );
        // Identity 0 is the expiry alone.
        assert_eq!(
            parse_value(b"1800000000"),
            Some(Value::Here {
                expires_at: 1_800_000_000,
                record: vec![0]
            })
        );
        let mut binary = 1_800_000_000u32.to_be_bytes().to_vec();
        binary.extend_from_slice(&[0x05, 0x81, 0xa1, b'a', 0x01]);
        assert_eq!(
            parse_value(&binary),
            Some(Value::Here {
                expires_at: 1_800_000_000,
                record: vec![0x05, 0x81, 0xa1, b'a', 0x01]
            })
        );
        let mut marker = 1_800_000_000u32.to_be_bytes().to_vec();
        marker.push(OUT_OF_LINE);
        assert_eq!(
            parse_value(&marker),
            Some(Value::OutOfLine {
                expires_at: 1_800_000_000
            })
        );
        for garbage in [&b""[..], b"\x6b\x00", b"12x", b"99999999999999999999999"] {
            assert_eq!(parse_value(garbage), None, "{garbage:?}");
            assert_eq!(StoredRecord::of_value(garbage), None);
        }
        assert_eq!(
            StoredRecord::of_value(n.to_string().as_bytes()),
            Some(StoredRecord::Inline(record.len()))
        );
        assert_eq!(
            StoredRecord::of_value(&binary),
            Some(StoredRecord::Inline(5))
        );
        assert_eq!(
            StoredRecord::of_value(&marker),
            Some(StoredRecord::OutOfLine)
        );
    }

    #[test]
    fn a_checked_pieced_value_parses_to_its_record_head_and_check() {
        let record: Vec<u8> = (0..200u8).collect();
        for checked in [false, true] {
            let form = Form::Pieced { size: 64, checked };
            let payload = form.payload(&record);
            let value = form.value(&payload, 1_800_000_000);
            let pieces = form.pieces(&payload);
            // The expiry, marker and count, and the head: one full value.
            assert_eq!(value.len(), 64);
            let Some(Value::Pieced {
                expires_at,
                pieces: count,
                head,
                check,
            }) = parse_value(&value)
            else {
                panic!("not pieced: {value:?}");
            };
            assert_eq!(expires_at, 1_800_000_000);
            assert_eq!(count, pieces.len());
            assert_eq!(check, checked.then(|| check_of(&record)));
            let joined = [head, pieces.concat()].concat();
            assert_eq!(joined, record);
        }
        // A checked count whose value is too short to hold its check is in
        // neither form.
        let mut short = 1_800_000_000u32.to_be_bytes().to_vec();
        short.extend_from_slice(&[PIECED, CHECKED | 1, 0xab, 0xcd]);
        assert_eq!(parse_value(&short), None);
    }

    #[test]
    fn the_integer_form_never_overflows_a_signed_64_bit_integer() {
        let largest = (INTEGER_FORM.end - 1) * SCALE + u64::from(u32::MAX);
        assert!(largest <= i64::MAX as u64);
    }

    #[test]
    fn groups_hold_128_buckets_under_one_tag() {
        let layout = GroupedBuckets::new(Buckets::new("sp", 20).unwrap());
        assert_eq!(layout.groups(), 1 << 13);
        assert_eq!(layout.bucket_key(0x3fa07), "sp:{07f4}:7");
        assert_eq!(layout.index_key(0x7f4), "sp:{07f4}:i");
        assert_eq!(layout.group_buckets(0x7f4), 0x3fa00..0x3fa80);
        let small = GroupedBuckets::new(Buckets::new("sp", 4).unwrap());
        assert_eq!(small.groups(), 1);
        assert_eq!(small.bucket_key(15), "sp:{0}:f");
        assert_eq!(
            layout.out_of_line_key(0x3fa07, &[0x00, 0xab, 0x0f]),
            "sp:{07f4}:7:o:00ab0f"
        );
        assert_eq!(Buckets::new("sp", 9).unwrap().tag(0x1f), "{01f}");
    }
}
