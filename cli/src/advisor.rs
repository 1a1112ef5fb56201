//! Capacity planning: how many buckets to use, and what each layout will
//! cost, from a model of how Redis 7 (with jemalloc) accounts memory.
//!
//! The model counts what `used_memory` counts: every allocation rounded up
//! to its jemalloc size class. A top-level key is a 24-byte dict entry
//! (class 32), its name as an sds string (3-byte header, the name, a NUL),
//! a 16-byte object header and the value, plus its share of the dict's
//! table (8 bytes per slot, a power of two at least the key count); a key
//! with a TTL adds an entry in the expires dict. A listpack is a 6-byte
//! header, its entries and an end byte, in one allocation; an entry is a
//! 1-byte header (strings up to 63 bytes), the data and a 1-byte back
//! length, and an integer such as an expiry in seconds takes 5 bytes plus
//! its back length.
//!
//! Bucket loads are random: with a mean of `m` sessions per bucket the
//! count in one bucket is Poisson-distributed, so the advisor sums the cost
//! over that distribution (empty buckets cost nothing, crowded ones may
//! have converted) instead of using the mean alone.

use serde::{Deserialize, Serialize};

use crate::baselines::LayoutKind;
use sessionpack::identity::Form;
use sessionpack::limits::ListpackLimits;
use sessionpack::session::buckets::{MAX_BUCKET_BITS, MIN_BUCKET_BITS};

/// Default identity assumed: a 7-digit user id, as the benchmark harness
/// issues (a 32-bit MessagePack integer).
pub const DEFAULT_IDENTITY: u64 = 1 << 20;
/// Default tolerance: the expected number of buckets that leave listpack at
/// the planned population (0.01: about a 1% chance that any does).
pub const DEFAULT_MAX_CONVERTED: f64 = 0.01;

const DICT_ENTRY: u64 = 24;
const ROBJ: u64 = 16;
const ID_BYTES: u64 = 20;
/// Unix seconds until 2038 fit a listpack 32-bit integer.
const EXPIRY_ENTRY: u64 = 5 + 1;
/// Longest string Redis stores in one allocation with its object header.
const EMBSTR_MAX: u64 = 44;

/// The size jemalloc really hands out for a request of `n` bytes.
pub fn size_class(n: u64) -> u64 {
    match n {
        0 => 0,
        1..=8 => 8,
        9..=128 => n.div_ceil(16) * 16,
        _ => {
            // Four classes per doubling: spacing is a quarter of the
            // power of two below.
            let pow = 63 - (n - 1).leading_zeros();
            let spacing = 1u64 << (pow - 2);
            n.div_ceil(spacing) * spacing
        }
    }
}

/// An sds string of `len` bytes (header, data, NUL), allocated.
fn sds(len: u64) -> u64 {
    let header = match len {
        0..=255 => 3,
        256..=65_535 => 5,
        _ => 9,
    };
    size_class(header + len + 1)
}

/// Slots of a dict holding `n` entries, as Redis grows it.
fn table_slots(n: u64) -> u64 {
    n.max(4).next_power_of_two()
}

/// Bytes of one listpack string entry of `len` bytes.
fn lp_string(len: u64) -> u64 {
    let header = match len {
        0..=63 => 1,
        64..=4095 => 2,
        _ => 5,
    };
    let body = header + len;
    let backlen = match body {
        0..=127 => 1,
        128..=16_382 => 2,
        16_383..=2_097_150 => 3,
        _ => 4,
    };
    body + backlen
}

/// Bytes of a listpack integer entry (with its back length).
fn lp_int(v: u64) -> u64 {
    match v {
        0..=127 => 2,
        128..=4095 => 3,
        4096..=32_767 => 4,
        32_768..=8_388_607 => 5,
        8_388_608..=2_147_483_647 => 6,
        _ => 10,
    }
}

/// What one workload looks like.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Workload {
    /// Sessions to hold.
    pub sessions: u64,
    /// A typical integer identity (its size decides the record's when
    /// identities are integers).
    pub identity: u64,
    /// The form of the identities.
    #[serde(default)]
    pub identity_form: Form,
    /// Bytes of encoded attributes per session (0 for identity-only).
    pub attrs_bytes: u64,
    /// The server's listpack limits.
    pub limits: ListpackLimits,
    /// Bytes of a session id: 20 (160 bits, the default) or 16.
    #[serde(default = "default_id_bytes")]
    pub id_bytes: u64,
}

fn default_id_bytes() -> u64 {
    ID_BYTES
}

impl Workload {
    /// `sessions` identity-only sessions under Redis 7's defaults.
    pub fn new(sessions: u64) -> Self {
        Self {
            sessions,
            identity: DEFAULT_IDENTITY,
            identity_form: Form::Int,
            attrs_bytes: 0,
            limits: ListpackLimits::REDIS7_DEFAULTS,
            id_bytes: ID_BYTES,
        }
    }

    /// Bytes of one encoded record.
    pub fn record_bytes(&self) -> u64 {
        self.identity_bytes() + self.attrs_bytes
    }

    /// Bytes of the identity at the head of a record.
    pub fn identity_bytes(&self) -> u64 {
        self.identity_form.record_bytes(self.identity) as u64
    }
}

/// P(X > k) for X ~ Poisson(mean).
pub fn poisson_tail(mean: f64, k: u64) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    let ln_pmf = |i: u64| -> f64 {
        let ln_fact: f64 = (1..=i).map(|j| (j as f64).ln()).sum();
        -mean + i as f64 * mean.ln() - ln_fact
    };
    if (k as f64) < mean {
        // Below the mean the tail is most of the mass: 1 - P(X <= k).
        let cdf: f64 = (0..=k).map(|i| ln_pmf(i).exp()).sum();
        return (1.0 - cdf).clamp(0.0, 1.0);
    }
    // Above it, sum the pmf upwards until the terms stop mattering.
    let mut term = ln_pmf(k + 1).exp();
    let mut sum = 0.0;
    let mut i = k + 1;
    while term > sum * 1e-17 && term > 0.0 {
        sum += term;
        i += 1;
        term *= mean / i as f64;
    }
    sum.min(1.0)
}

/// The Poisson pmf over 0..=cap, for summing costs over bucket loads.
fn poisson_pmf(mean: f64) -> Vec<f64> {
    let cap = (mean + 12.0 * mean.sqrt() + 30.0) as usize;
    let mut pmf = Vec::with_capacity(cap + 1);
    let mut p = (-mean).exp();
    if p == 0.0 {
        // Large means: start from the mode in log space instead.
        let mode = mean.floor() as u64;
        let ln_fact: f64 = (1..=mode).map(|i| (i as f64).ln()).sum();
        let at_mode = (-mean + mode as f64 * mean.ln() - ln_fact).exp();
        let mut v = vec![0.0; cap + 1];
        v[mode as usize] = at_mode;
        for k in (0..mode as usize).rev() {
            v[k] = v[k + 1] * (k + 1) as f64 / mean;
        }
        for k in mode as usize + 1..=cap {
            v[k] = v[k - 1] * mean / k as f64;
        }
        return v;
    }
    for k in 0..=cap {
        pmf.push(p);
        p *= mean / (k + 1) as f64;
    }
    pmf
}

/// Memory of one bucket (HASH + ZSET, keys included, table share apart)
/// holding `k` sessions.
fn bucket_bytes(k: u64, field: u64, w: &Workload, key_len: u64) -> u64 {
    if k == 0 {
        return 0;
    }
    let limits = &w.limits;
    let keys = 2 * (size_class(DICT_ENTRY) + sds(key_len) + ROBJ);
    let record = w.record_bytes();
    let hash_listpack = k <= limits.hash_entries && record <= limits.hash_value;
    let zset_listpack = k <= limits.zset_entries;
    let hash = if hash_listpack {
        size_class(7 + k * (lp_string(field) + lp_string(record)))
    } else {
        hashtable_bytes(k, sds(field) + sds(record))
    };
    let zset = if zset_listpack {
        size_class(7 + k * (lp_string(field) + EXPIRY_ENTRY))
    } else {
        skiplist_bytes(k, field)
    };
    keys + hash + zset
}

/// The compact layout's bytes per session, mean load and expected
/// converted buckets: HASH buckets holding field and value (the expiry in
/// it), and per group of 128 buckets one index ZSET of bucket numbers and
/// expiries.
fn compact_bytes(n: u64, bucket_bits: u8, w: &Workload) -> (f64, f64, f64) {
    let buckets = 1u64 << bucket_bits;
    let group_shift = bucket_bits.min(sessionpack::session::layout::compact::GROUP_BITS);
    let groups = buckets >> group_shift;
    let mean = n as f64 / buckets as f64;
    let field = w.id_bytes - u64::from(bucket_bits / 8);
    let record = w.record_bytes();
    let limits = &w.limits;
    let pieces = pieces(record, field, limits);
    let out_of_line = 4 + record > limits.hash_value && pieces.is_none();
    let integer_form = w.identity_form == Form::Int
        && w.attrs_bytes == 0
        && (1 << 16..922_337_203).contains(&w.identity);
    let value = if integer_form {
        10 // one 64-bit listpack integer
    } else if let Some(p) = pieces {
        p.bytes
    } else if out_of_line {
        lp_string(4 + 1) // expiry and marker
    } else {
        lp_string(4 + record)
    };
    // Entries a session takes in its bucket: its own, and its pieces.
    let entries = 1 + pieces.map_or(0, |p| p.count);
    let tag = u64::from((bucket_bits - group_shift).div_ceil(4)).max(1);
    // "sp:{" + tag + "}:" + the bucket's number in the group, in hex.
    let key_len = 2 + 2 + tag + 2 + u64::from(group_shift.div_ceil(4)).max(1);
    let key = size_class(DICT_ENTRY) + sds(key_len) + ROBJ;
    let pmf = poisson_pmf(mean);
    let per_bucket: f64 = pmf
        .iter()
        .enumerate()
        .skip(1)
        .map(|(k, p)| {
            let k = k as u64;
            let hash = if k * entries <= limits.hash_entries {
                size_class(7 + k * (lp_string(field) + value))
            } else {
                hashtable_bytes(
                    k * entries,
                    sds(field) + sds(if out_of_line { 5 } else { 4 + record } / entries),
                )
            };
            p * (key + hash) as f64
        })
        .sum();
    let occupied = buckets as f64 * (1.0 - (-mean).exp());
    let per_group_members = occupied / groups as f64;
    // Members are bucket numbers 0..127 (one-byte integers), scored by a
    // 32-bit expiry.
    let index =
        key as f64 + size_class(7 + (per_group_members.ceil() as u64) * (2 + EXPIRY_ENTRY)) as f64;
    let keys = (occupied + groups as f64).max(1.0) as u64;
    let table = 8.0 * table_slots(keys) as f64;
    let converted = buckets as f64 * poisson_tail(mean, limits.hash_entries / entries);
    let total = per_bucket * buckets as f64 + index * groups as f64 + table;
    // A record out of line is a key of its own: "<bucket key>:o:<field
    // hex>", its value, an expiry, and its slots in both dicts.
    let side = if out_of_line {
        let value = if record <= EMBSTR_MAX {
            size_class(ROBJ + 3 + record + 1)
        } else {
            ROBJ + sds(record)
        };
        let slots = 2.0 * 8.0 * table_slots(n) as f64 / n as f64;
        (2 * size_class(DICT_ENTRY) + sds(key_len + 3 + 2 * field) + value) as f64 + slots
    } else {
        0.0
    };
    (total / n as f64 + side, mean, converted)
}

/// A record kept in pieces in its bucket (the compact layout's form for
/// records over one value and up to
/// [`sessionpack::session::layout::compact::MAX_PIECED_RECORD`] bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pieces {
    /// How many pieces besides the session's own value.
    pub count: u64,
    /// Listpack bytes of the session's value and its pieces' entries.
    pub bytes: u64,
}

/// How a record of `record` bytes is cut into pieces in a bucket whose
/// fields are `field` bytes, at these limits, in a namespace this version
/// records (its pieces begin with the record's check, and take short
/// names, four bytes, as all but the rare session sharing one's beginning
/// do); `None` if it is not (it fits one value, or goes out of line), as
/// `sessionpack::session::layout::compact` decides.
pub fn pieces(record: u64, field: u64, limits: &ListpackLimits) -> Option<Pieces> {
    use sessionpack::session::layout::compact::{CHECK_BYTES, MAX_PIECED_RECORD, piece_size_for};
    let limit = limits.hash_value;
    if 4 + record <= limit || record > MAX_PIECED_RECORD as u64 || limit <= 6 || field + 1 >= limit
    {
        return None;
    }
    // A new namespace's pieces carry the record's check before it.
    let payload = record + CHECK_BYTES as u64;
    let largest = limit.min(MAX_PIECED_RECORD as u64) as usize;
    let size = piece_size_for(largest, payload as usize) as u64;
    let head = size - 6;
    let rest = payload - head.min(payload);
    let count = rest.div_ceil(size);
    if count > 15 {
        return None;
    }
    let last = rest - (count.saturating_sub(1)) * size;
    let piece = lp_string(4);
    let bytes = lp_string(6 + head)
        + count.saturating_sub(1) * (piece + lp_string(size))
        + if count > 0 {
            piece + lp_string(last)
        } else {
            0
        };
    Some(Pieces { count, bytes })
}

/// Listpack entries a session with a record of `record` bytes takes in
/// its bucket (its own, and its pieces').
pub fn entries_per_session(record: u64, field: u64, limits: &ListpackLimits) -> u64 {
    1 + pieces(record, field, limits).map_or(0, |p| p.count)
}

/// The values of `hash-max-listpack-value` the advisor chooses among.
pub const HASH_VALUE_STEPS: [u64; 6] = [64, 96, 128, 192, 256, 512];
/// Share of records the advisor wants kept in their buckets.
pub const INLINE_SHARE: f64 = 0.99;

/// The `hash-max-listpack-value` that keeps [`INLINE_SHARE`] of records
/// of these sizes (bytes, as encoded) in their buckets: the smallest of
/// [`HASH_VALUE_STEPS`] at least `current` that does, else the largest
/// step (records longer than that are better off out of line: the key
/// each then costs is small beside the record).
pub fn recommend_hash_value(record_sizes: &[u64], current: u64) -> u64 {
    let mut values: Vec<u64> = record_sizes.iter().map(|r| r + 4).collect();
    values.sort_unstable();
    let Some(&needed) =
        values.get(((values.len() as f64 * INLINE_SHARE).ceil() as usize).saturating_sub(1))
    else {
        return current;
    };
    HASH_VALUE_STEPS
        .into_iter()
        .filter(|&v| v >= current)
        .find(|&v| v >= needed)
        .unwrap_or(current.max(HASH_VALUE_STEPS[HASH_VALUE_STEPS.len() - 1]))
}

/// What raising `hash-max-listpack-value` to `value` does to the other
/// hashes of the same server, in a sentence.
pub fn hash_value_cost(value: u64, limits: &ListpackLimits) -> String {
    format!(
        "hash-max-listpack-value is server-wide: every HASH whose values are all at most {value} \
         bytes (and that has at most {} entries) then stays a listpack. Such a hash takes less \
         memory, but reading or writing one field scans it: up to {} KB for a full one, against \
         one lookup in a hashtable. Set it in redis.conf (or CONFIG SET and CONFIG REWRITE); \
         a hash already converted stays a hashtable until the server reloads its data",
        limits.hash_entries,
        limits.hash_entries * (value + 20) / 1024,
    )
}

/// The fewest bucket bits for the compact layout that keep the mean load
/// at most [`COMPACT_MAX_MEAN_FILL`] and the expected buckets over the HASH
/// entry limit at most `max_converted`.
pub fn recommend_compact_bits(sessions: u64, limits: &ListpackLimits, max_converted: f64) -> u8 {
    recommend_compact_bits_filled(sessions, limits, max_converted, COMPACT_MAX_MEAN_FILL)
}

/// [`recommend_compact_bits`] with another cap on the mean load, e.g.
/// [`TOWER_MAX_MEAN_FILL`].
pub fn recommend_compact_bits_filled(
    sessions: u64,
    limits: &ListpackLimits,
    max_converted: f64,
    max_mean_fill: f64,
) -> u8 {
    (MIN_BUCKET_BITS..=MAX_BUCKET_BITS)
        .find(|&bits| {
            let buckets = (1u64 << bits) as f64;
            let mean = sessions as f64 / buckets;
            mean <= max_mean_fill
                && buckets * poisson_tail(mean, limits.hash_entries) <= max_converted
        })
        .unwrap_or(MAX_BUCKET_BITS)
}

/// The bucket bits for a tower-sessions store of `sessions` sessions
/// whose records are `record` bytes ([`recommend_compact_bits_filled`]
/// with [`TOWER_MAX_MEAN_FILL`]), the entry limit shared among each
/// session's entries where its record is in pieces.
pub fn recommend_tower_bits(
    sessions: u64,
    limits: &ListpackLimits,
    max_converted: f64,
    record: u64,
    id_bytes: u64,
) -> u8 {
    let entries = entries_per_session(record, id_bytes.saturating_sub(2), limits);
    let shared = ListpackLimits {
        hash_entries: limits.hash_entries / entries,
        ..*limits
    };
    recommend_compact_bits_filled(sessions, &shared, max_converted, TOWER_MAX_MEAN_FILL)
}

/// `bits` where a bench was given a count, else [`recommend_tower_bits`]
/// for a store with 128-bit ids whose records are `mean_record` bytes on
/// average (the tower-sessions and actix-session stores).
pub fn tower_bits_or(
    bits: Option<u8>,
    sessions: u64,
    limits: &ListpackLimits,
    mean_record: f64,
) -> u8 {
    bits.unwrap_or_else(|| {
        recommend_tower_bits(
            sessions,
            limits,
            DEFAULT_MAX_CONVERTED,
            mean_record.round() as u64,
            16,
        )
    })
}

/// The fullest mean bucket load the advisor plans for a tower-sessions
/// store, whose records are tens of bytes and which writes on every
/// create, save and delete: each write moves or copies the listpack, so
/// smaller buckets cost the server less per write (`sessionpack bench
/// tower --sessions 200000 --profiles axum-login-digest --compact-bits 11`,
/// then `13`: ~24 per bucket against ~98 took a create from ~1.75x the
/// peer crate's server CPU to ~1.35x and a delete from ~1.8x to ~1.7x)
/// for ~4 bytes per session.
pub const TOWER_MAX_MEAN_FILL: f64 = 32.0;

/// The fullest mean bucket load the advisor plans for the compact layout.
/// A listpack lookup scans, so fuller buckets cost server CPU on every
/// load: at ~100 entries an `HGET` costs about what packed-setex's `GET` +
/// `EXPIRETIME` do; at ~435 it costs twice that for ~2 B/session less.
pub const COMPACT_MAX_MEAN_FILL: f64 = 128.0;

/// A converted HASH: dict, table and one entry plus field and value per item.
fn hashtable_bytes(k: u64, strings_per_entry: u64) -> u64 {
    size_class(56) + 8 * table_slots(k) + k * (size_class(DICT_ENTRY) + strings_per_entry)
}

/// A converted ZSET: dict + skiplist; each member has a dict entry, its sds
/// and a skiplist node of random height (P(level > l) = 1/4^l).
fn skiplist_bytes(k: u64, field: u64) -> u64 {
    let mut node = 0.0;
    let mut p_level = 0.75;
    for level in 1..=8u64 {
        node += p_level * size_class(24 + 16 * level) as f64;
        p_level /= 4.0;
    }
    let header = size_class(24 + 16 * 32);
    size_class(16)
        + size_class(56)
        + 8 * table_slots(k)
        + size_class(32)
        + header
        + k * (size_class(DICT_ENTRY) + sds(field) + node.round() as u64)
}

/// The advisor's figures for one layout and bucket count.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Prediction {
    /// The layout.
    pub layout: LayoutKind,
    /// log2 of the bucket count (bucketed only).
    pub bucket_bits: Option<u8>,
    /// Mean sessions per bucket (bucketed only).
    pub mean_load: Option<f64>,
    /// Expected number of buckets that have left listpack.
    pub expected_converted: Option<f64>,
    /// Predicted `used_memory` per session.
    pub bytes_per_session: f64,
    /// Predicted `used_memory` for all sessions, in bytes.
    pub total_bytes: f64,
}

/// Bytes per session of a compact store at `2^bucket_bits` whose records
/// have the sizes of `sizes` (a sample, any order): each size costs what a
/// store of records of that size would (a record near the value limit
/// costs a piece more or less than one of the mean's size).
pub fn predict_sizes(bucket_bits: u8, sizes: &[u64], base: &Workload) -> f64 {
    let mut sorted = sizes.to_vec();
    sorted.sort_unstable();
    let mut counts: Vec<(u64, u64)> = Vec::new();
    for size in sorted {
        match counts.last_mut() {
            Some((s, n)) if *s == size => *n += 1,
            _ => counts.push((size, 1)),
        }
    }
    let bytes: f64 = counts
        .iter()
        .map(|&(size, n)| {
            let w = Workload {
                identity: 0,
                identity_form: Form::Int,
                attrs_bytes: size.saturating_sub(1),
                ..*base
            };
            n as f64 * predict(LayoutKind::Compact, bucket_bits, &w).bytes_per_session
        })
        .sum();
    bytes / sizes.len().max(1) as f64
}

/// Predicts one layout's cost; `bucket_bits` matters only for bucketed.
pub fn predict(layout: LayoutKind, bucket_bits: u8, w: &Workload) -> Prediction {
    let n = w.sessions.max(1);
    let entry = size_class(DICT_ENTRY);
    let record = w.record_bytes();
    // Each key-per-session layout pays: dict entry, key name, value, an
    // expires-dict entry, and a slot in each dict's table.
    let slots = 2.0 * 8.0 * table_slots(n) as f64 / n as f64;
    let (per_session, bits, mean, converted) = match layout {
        LayoutKind::JsonSetex => {
            // {"identity_id":<identity>,"expires_at":<10 digits>}
            let digits = match w.identity_form {
                Form::Int => w.identity.to_string().len() as u64,
                // {"uuid":"<36>"}
                Form::Uuid => 47,
                Form::Name(n) => u64::from(n) + 2,
            };
            let json = 15
                + digits
                + 14
                + 10
                + 1
                + if w.attrs_bytes > 0 {
                    9 + w.attrs_bytes
                } else {
                    0
                };
            let value = if json <= EMBSTR_MAX {
                size_class(ROBJ + 3 + json + 1)
            } else {
                ROBJ + sds(json)
            };
            (
                (entry + sds(8 + 40) + value + entry) as f64 + slots,
                None,
                None,
                None,
            )
        }
        LayoutKind::PackedSetex => {
            let value = if record <= EMBSTR_MAX {
                size_class(ROBJ + 3 + record + 1)
            } else {
                ROBJ + sds(record)
            };
            (
                (entry + sds(ID_BYTES) + value + entry) as f64 + slots,
                None,
                None,
                None,
            )
        }
        LayoutKind::HashPerSession => {
            // Fields "i" (identity as an integer), "e" (expiry), "a"
            // (attributes, absent for identity-only records).
            let attrs = if w.attrs_bytes > 0 {
                lp_string(1) + lp_string(w.attrs_bytes)
            } else {
                0
            };
            let identity = match w.identity_form {
                Form::Int => lp_int(w.identity),
                // Any other form: its MessagePack head, as a string.
                _ => lp_string(w.identity_bytes()),
            };
            let listpack = 7 + lp_string(1) + identity + lp_string(1) + EXPIRY_ENTRY + attrs;
            (
                (entry + sds(ID_BYTES) + ROBJ + size_class(listpack) + entry) as f64 + slots,
                None,
                None,
                None,
            )
        }
        LayoutKind::BookLoginHash => {
            let token = 2 * ID_BYTES;
            let hash = hashtable_bytes(n, sds(token) + sds(record)) as f64;
            let zset = skiplist_bytes(n, token) as f64;
            ((hash + zset) / n as f64, None, None, None)
        }
        LayoutKind::Bucketed => {
            let buckets = 1u64 << bucket_bits;
            let mean = n as f64 / buckets as f64;
            let field = w.id_bytes - u64::from(bucket_bits / 8);
            // "sp:{" + hex digits + "}:h"
            let key_len = 3 + 2 + u64::from(bucket_bits.div_ceil(4)) + 2;
            let pmf = poisson_pmf(mean);
            let per_bucket: f64 = pmf
                .iter()
                .enumerate()
                .map(|(k, p)| p * bucket_bytes(k as u64, field, w, key_len) as f64)
                .sum();
            let occupied = buckets as f64 * (1.0 - (-mean).exp());
            let keys = (2.0 * occupied).max(1.0) as u64;
            let table = 8.0 * table_slots(keys) as f64;
            let converted = expected_converted(n, bucket_bits, &w.limits);
            (
                (per_bucket * buckets as f64 + table) / n as f64,
                Some(bucket_bits),
                Some(mean),
                Some(converted),
            )
        }
        LayoutKind::Compact => {
            let (per_session, mean, converted) = compact_bytes(n, bucket_bits, w);
            (per_session, Some(bucket_bits), Some(mean), Some(converted))
        }
        LayoutKind::CompactServerExpiry => {
            // The same buckets (a listpack with TTLs keeps the same
            // limits), each field followed by its TTL in milliseconds.
            let (per_session, mean, converted) = compact_bytes(n, bucket_bits, w);
            (
                per_session + FIELD_TTL_ENTRY as f64,
                Some(bucket_bits),
                Some(mean),
                Some(converted),
            )
        }
    };
    Prediction {
        layout,
        bucket_bits: bits,
        mean_load: mean,
        expected_converted: converted,
        bytes_per_session: per_session,
        total_bytes: per_session * n as f64,
    }
}

/// A field's TTL in a listpack with TTLs (`listpackex`): unix time in
/// milliseconds, a 64-bit listpack integer (encoding byte, 8 bytes, and
/// the back length).
const FIELD_TTL_ENTRY: u64 = 10;

/// Expected number of buckets holding more sessions than a listpack may.
pub fn expected_converted(sessions: u64, bucket_bits: u8, limits: &ListpackLimits) -> f64 {
    let buckets = (1u64 << bucket_bits) as f64;
    buckets * poisson_tail(sessions as f64 / buckets, limits.bucket_entries())
}

/// The fewest bucket bits (so the fullest, cheapest buckets) whose expected
/// number of converted buckets at `sessions` is at most `max_converted`.
pub fn recommend_bits(sessions: u64, limits: &ListpackLimits, max_converted: f64) -> u8 {
    (MIN_BUCKET_BITS..=MAX_BUCKET_BITS)
        .find(|&bits| expected_converted(sessions, bits, limits) <= max_converted)
        .unwrap_or(MAX_BUCKET_BITS)
}

#[cfg(test)]
mod tests;
