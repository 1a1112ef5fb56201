//! Sessions of another, key-per-session store, read so that a sessionpack
//! store can take them over with their ids, data and expiries
//! (`sessionpack migrate`, and [`crate::map_store::MapStore::import_data`]).
//!
//! A [`Source`] says how the other store names its keys and encodes its
//! values:
//!
//! | store | key | value | [`Source`] |
//! |---|---|---|---|
//! | tower-sessions-redis-store 0.16 | the id as tower-sessions prints it (22 base64url characters), no prefix | MessagePack of its `Record` (id, data, expiry date), `EXAT` set | [`Source::tower_sessions_redis_store`] |
//! | actix-session 0.11's `RedisSessionStore` | the 64-character session key, no prefix | a JSON object of JSON texts, `EX` set | `Source::actix_session` (feature `actix-session`) |
//! | a store of JSON maps | `<prefix><id>` | a JSON object | `Source::new(prefix, IdForm::.., ValueForm::JsonMap)` |
//! | a store of MessagePack maps | `<prefix><id>` | a MessagePack map | `Source::new(prefix, IdForm::.., ValueForm::MsgpackMap)` |
//!
//! A key's id must be one a sessionpack store can hold: 16 bytes (tower
//! ids) or 20, written in base64url or hex after the prefix, or an
//! actix-session key, whose session takes [`hashed_id`] of it. Ids of
//! other widths (connect-redis' 32 base64url characters, Rails' `2::` + 64
//! hex digits) are not: such keys are skipped as [`Skip::Id`], never
//! touched. Nothing here writes; it only
//! reads keys and tells what they hold.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use crate::session::id::{IdWidth, SessionId};

/// How a key's id is written after the source's prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdForm {
    /// URL-safe base64 without padding, as tower-sessions prints its ids
    /// (22 characters for 16 bytes).
    Base64Url,
    /// Hex digits, either case (32 for 16 bytes, 40 for 20).
    Hex,
    /// actix-session's session key: 64 ASCII letters and digits, more than
    /// an id holds. The session's id is [`hashed_id`] of the key (128-bit
    /// ids only), which the actix store also reads such a key as, so the
    /// cookie stays valid; the key cannot be told from the id.
    ActixSessionKey,
}

/// Characters in an actix-session session key.
pub const ACTIX_KEY_CHARS: usize = 64;

/// Whether `key` has the form of an actix-session session key: 64 ASCII
/// letters and digits.
pub fn is_actix_key(key: &[u8]) -> bool {
    key.len() == ACTIX_KEY_CHARS && key.iter().all(u8::is_ascii_alphanumeric)
}

/// The 128-bit id a store gives a session whose key in another store
/// holds more than an id ([`IdForm::ActixSessionKey`]): the first 16 bytes
/// of the key's SHA-256. Keys of 380 random bits give ids no one can
/// choose or guess, as random ids are.
pub fn hashed_id(key: &[u8]) -> SessionId {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key);
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    SessionId::from_slice(&id).expect("16 bytes are a 128-bit id")
}

/// Bytes of an actix-session key packed ([`pack_actix_key`]): 64 digits
/// of base 62 are less than 2^382.
pub const PACKED_KEY_BYTES: usize = 48;

/// The digits of an actix-session key, in the order their values run.
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// An actix-session key as a number in 48 bytes (big-endian), where it
/// has the form ([`is_actix_key`]): a takeover's mark keeps a session's
/// old key in 53 bytes, under the 64 a listpack HASH's value may take by
/// default.
pub fn pack_actix_key(key: &[u8]) -> Option<[u8; PACKED_KEY_BYTES]> {
    if !is_actix_key(key) {
        return None;
    }
    let mut n = [0u8; PACKED_KEY_BYTES];
    for &c in key {
        let mut carry = BASE62.iter().position(|&d| d == c)? as u32;
        for byte in n.iter_mut().rev() {
            let v = u32::from(*byte) * 62 + carry;
            *byte = v as u8;
            carry = v >> 8;
        }
    }
    Some(n)
}

/// The key [`pack_actix_key`] packed.
pub fn unpack_actix_key(packed: &[u8; PACKED_KEY_BYTES]) -> String {
    let mut n = *packed;
    let mut digits = [0u8; ACTIX_KEY_CHARS];
    for digit in digits.iter_mut().rev() {
        let mut rem = 0u32;
        for byte in n.iter_mut() {
            let v = (rem << 8) | u32::from(*byte);
            *byte = (v / 62) as u8;
            rem = v % 62;
        }
        *digit = BASE62[rem as usize];
    }
    String::from_utf8_lossy(&digits).into_owned()
}

/// How a key's value encodes the session's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueForm {
    /// tower-sessions-redis-store's MessagePack `Record`: its `data` map
    /// is taken; its expiry date is the key's, which the store sets with
    /// `EXAT`.
    TowerRecord,
    /// A JSON object: the session's data map.
    JsonMap,
    /// A MessagePack map with string keys: the session's data map.
    MsgpackMap,
    /// actix-session's state: a JSON object of JSON texts, kept as the
    /// actix store keeps a state it writes.
    #[cfg(feature = "actix-session")]
    ActixState,
}

/// Where another store keeps its sessions and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// What every session key begins with (may be empty).
    pub prefix: String,
    /// How the id follows the prefix.
    pub id: IdForm,
    /// How the value is encoded.
    pub value: ValueForm,
}

/// Why a key of the source is not taken over. Skipped keys are counted by
/// [`Skip::reason`] and left as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The key's name holds no id of the store's width.
    Id(String),
    /// The key is not a string.
    WrongType(String),
    /// The value does not decode as the source's form.
    Value(String),
    /// The key has no expiry: a sessionpack session always has one.
    NoExpiry,
    /// The key expired or was deleted while it was being read.
    Gone,
}

impl Skip {
    /// A short name for reports: `id`, `wrong-type`, `value`,
    /// `no-expiry`, `gone`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Id(_) => "id",
            Self::WrongType(_) => "wrong-type",
            Self::Value(_) => "value",
            Self::NoExpiry => "no-expiry",
            Self::Gone => "gone",
        }
    }
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Id(why) => write!(f, "no session id in the key's name: {why}"),
            Self::WrongType(t) => write!(f, "a {t}, not a string"),
            Self::Value(why) => write!(f, "the value does not decode: {why}"),
            Self::NoExpiry => f.write_str("the key has no expiry"),
            Self::Gone => f.write_str("the key went away while it was read"),
        }
    }
}

/// One session of the source, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct Taken {
    /// The source's key it was read from.
    pub key: String,
    /// Its id, as a sessionpack id of the store's width.
    pub id: SessionId,
    /// Its data map.
    pub data: HashMap<String, Value>,
    /// When it expires, unix seconds (the key's expiry, rounded up; at
    /// most [`crate::ttl::MAX_EXPIRES_AT`]).
    pub expires_at: u64,
}

impl Source {
    /// A source of keys `<prefix><id>`.
    pub fn new(prefix: impl Into<String>, id: IdForm, value: ValueForm) -> Self {
        Self {
            prefix: prefix.into(),
            id,
            value,
        }
    }

    /// tower-sessions-redis-store 0.16: keys are ids with no prefix,
    /// values MessagePack records.
    pub fn tower_sessions_redis_store() -> Self {
        Self::new("", IdForm::Base64Url, ValueForm::TowerRecord)
    }

    /// actix-session 0.11's `RedisSessionStore` as its docs build it: keys
    /// are the 64-character session keys with no prefix, values the state
    /// as a JSON object of JSON texts, `SET NX EX`.
    #[cfg(feature = "actix-session")]
    pub fn actix_session() -> Self {
        Self::new("", IdForm::ActixSessionKey, ValueForm::ActixState)
    }

    /// The `SCAN MATCH` pattern of the source's keys: the prefix, its glob
    /// characters escaped, then `*`.
    pub fn pattern(&self) -> String {
        format!("{}*", crate::acl::escape_glob(&self.prefix))
    }

    /// A glob pattern matching exactly the keys of this source's ids of
    /// `width`: the prefix, its glob characters escaped, then one `?` per
    /// character of an id. The key pattern of an ACL rule for a migration
    /// or a takeover ([`crate::acl::rule_for`]).
    pub fn key_glob(&self, width: IdWidth) -> String {
        let bytes = width.bytes();
        let chars = match self.id {
            IdForm::Base64Url => (4 * bytes).div_ceil(3),
            IdForm::Hex => 2 * bytes,
            IdForm::ActixSessionKey => ACTIX_KEY_CHARS,
        };
        format!(
            "{}{}",
            crate::acl::escape_glob(&self.prefix),
            "?".repeat(chars)
        )
    }

    /// The key under which the source keeps `id`; none where the key
    /// cannot be told from the id ([`IdForm::ActixSessionKey`]).
    pub fn key_of(&self, id: &SessionId) -> Option<String> {
        let text = match self.id {
            IdForm::Base64Url => base64url::encode(id.as_bytes()),
            IdForm::Hex => hex::encode(id.as_bytes()),
            IdForm::ActixSessionKey => return None,
        };
        Some(format!("{}{text}", self.prefix))
    }

    /// The id a key names, as an id of `width`.
    pub fn id_of(&self, key: &[u8], width: IdWidth) -> Result<SessionId, Skip> {
        let rest = key
            .strip_prefix(self.prefix.as_bytes())
            .ok_or_else(|| Skip::Id("the key lacks the prefix".into()))?;
        let bytes = match self.id {
            IdForm::Base64Url => base64url::decode(rest),
            IdForm::Hex => hex::decode(rest).ok(),
            IdForm::ActixSessionKey if width != IdWidth::Bits128 => {
                return Err(Skip::Id(
                    "an actix-session key becomes a 128-bit id, not one of the store's width"
                        .into(),
                ));
            }
            IdForm::ActixSessionKey if is_actix_key(rest) => {
                return Ok(hashed_id(rest));
            }
            IdForm::ActixSessionKey => None,
        }
        .ok_or_else(|| Skip::Id(format!("{} characters not {:?}", rest.len(), self.id)))?;
        if bytes.len() != width.bytes() {
            return Err(Skip::Id(format!(
                "{} bytes where the store's ids have {}",
                bytes.len(),
                width.bytes()
            )));
        }
        SessionId::from_slice(&bytes).ok_or_else(|| Skip::Id("not an id".into()))
    }

    /// The data map a value holds.
    pub fn data_of(&self, value: &[u8]) -> Result<HashMap<String, Value>, Skip> {
        self.value_of(value).map(|(data, _)| data)
    }

    /// The data map a value holds, and the expiry (unix seconds) it
    /// records, for a form that records one.
    fn value_of(&self, value: &[u8]) -> Result<(HashMap<String, Value>, Option<i64>), Skip> {
        let bad = |e: &dyn std::fmt::Display| Skip::Value(e.to_string());
        let data = match self.value {
            ValueForm::TowerRecord => {
                return rmp_serde::from_slice::<TowerRecord>(value)
                    .map(|r| {
                        let at = r.expires_at();
                        (r.data, at)
                    })
                    .map_err(|e| bad(&e));
            }
            ValueForm::JsonMap => serde_json::from_slice(value).map_err(|e| bad(&e))?,
            ValueForm::MsgpackMap => rmp_serde::from_slice(value).map_err(|e| bad(&e))?,
            #[cfg(feature = "actix-session")]
            ValueForm::ActixState => {
                let state: HashMap<String, String> =
                    serde_json::from_slice(value).map_err(|e| bad(&e))?;
                crate::actix::state_values(state).map_err(|e| bad(&e))?
            }
        };
        Ok((data, None))
    }

    /// Decodes a key read as `TYPE`, `GET` and `PEXPIRETIME` (see
    /// [`READ_SCRIPT`]): `kind` the key's type, `value` its bytes,
    /// `expire_ms` its expiry in unix milliseconds (-1 none, -2 gone).
    pub fn decode(
        &self,
        key: &[u8],
        width: IdWidth,
        kind: &str,
        value: Option<&[u8]>,
        expire_ms: i64,
    ) -> Result<Taken, Skip> {
        let id = self.id_of(key, width)?;
        match kind {
            "string" => {}
            "none" => return Err(Skip::Gone),
            other => return Err(Skip::WrongType(other.to_owned())),
        }
        let value = value.ok_or(Skip::Gone)?;
        let (data, recorded) = self.value_of(value)?;
        let expires_at = match expire_ms {
            -2 => return Err(Skip::Gone),
            ms if ms < 0 => return Err(Skip::NoExpiry),
            // The second the value records, where the key's expiry is
            // within a second of it: a key a reshard moved (`MIGRATE`
            // restores its time to live, not its instant) is a few
            // milliseconds off, and rounded up would end a second late.
            ms if recorded.is_some_and(|at| at.saturating_mul(1000).abs_diff(ms) < 1000) => {
                recorded.unwrap_or_default() as u64
            }
            // Else rounded up. A layout keeps expiries to February 2106
            // (32 bits): one later is kept as that second, as a tower
            // store keeps it.
            ms => (ms as u64).div_ceil(1000),
        }
        .min(crate::ttl::MAX_EXPIRES_AT);
        Ok(Taken {
            key: String::from_utf8_lossy(key).into_owned(),
            id,
            data,
            expires_at,
        })
    }
}

/// Reads one key of a source as `{type}`, or `{type, value, expiry ms}`
/// for a string, in one atomic step (so value and expiry belong
/// together): `KEYS[1]` the key.
pub const READ_SCRIPT: &str = r#"
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'string' then return {kind} end
return {kind, redis.call('GET', KEYS[1]), redis.call('PEXPIRETIME', KEYS[1])}
"#;

/// Closes a session's old key: deletes it only while it holds the value and
/// expiry copied, and marks the session moved, in one step. `KEYS[1]` the
/// old key, `KEYS[2]` the marks; `ARGV[1]` the value, `ARGV[2]` its
/// expiry (unix ms), `ARGV[3]` the session's field, `ARGV[4]` the
/// session's expiry (unix s); `KEYS[3]`, if given, a counter of the keys
/// closed, raised in the same step (so a count survives a close killed
/// part way). Returns 1 if closed, 0 if the key changed.
/// Every key in one script: one server, not a cluster.
pub const CLOSE_SCRIPT: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1]
    and redis.call('PEXPIRETIME', KEYS[1]) == tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[1])
  if KEYS[3] then
    redis.call('INCR', KEYS[3])
  end
  redis.call('HSET', KEYS[2], ARGV[3], 'c')
  redis.call('EXPIREAT', KEYS[2], ARGV[4], 'NX')
  redis.call('EXPIREAT', KEYS[2], ARGV[4], 'GT')
  return 1
end
return 0
"#;

/// On a Redis Cluster the old key and the marks lie in different slots,
/// so the close takes three steps, in this order, so that no load ever
/// finds the old key gone while the session is still marked as having
/// one (which it takes for a log-out): this first marks the session moved
/// and returns its mark before; `KEYS[1]` the marks, `ARGV[1]` the
/// session's field, `ARGV[2]` the session's expiry (unix s).
pub const CLOSE_MARK_SCRIPT: &str = r#"
local before = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], 'c')
redis.call('EXPIREAT', KEYS[1], ARGV[2], 'NX')
redis.call('EXPIREAT', KEYS[1], ARGV[2], 'GT')
return before
"#;

/// The close's second step on a cluster ([`CLOSE_MARK_SCRIPT`]): deletes
/// the old key only while it holds the value and expiry copied, and
/// raises the counter `KEYS[2]` (in the old key's slot) in the same step.
/// `KEYS[1]` the old key; `ARGV[1]` the value, `ARGV[2]` its expiry
/// (unix ms). Returns 1 if closed, 0 if the key changed.
pub const CLOSE_KEY_SCRIPT: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1]
    and redis.call('PEXPIRETIME', KEYS[1]) == tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[1])
  redis.call('INCR', KEYS[2])
  return 1
end
return 0
"#;

/// The close's third step on a cluster, for a key the second kept (it
/// changed): gives the session back the mark it had, while it is still
/// the one the first step set. `KEYS[1]` the marks, `ARGV[1]` the field,
/// `ARGV[2]` the mark before (empty: none).
pub const CLOSE_UNMARK_SCRIPT: &str = r#"
if redis.call('HGET', KEYS[1], ARGV[1]) == 'c' then
  if ARGV[2] == '' then
    redis.call('HDEL', KEYS[1], ARGV[1])
  else
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  end
end
return 0
"#;

/// tower-sessions' `Record`: the id is the key's; the expiry date, where
/// this build reads dates, is the second the key's `EXAT` set (see
/// [`Source::decode`]).
#[derive(Deserialize)]
struct TowerRecord {
    #[serde(rename = "id")]
    _id: serde::de::IgnoredAny,
    data: HashMap<String, Value>,
    #[cfg(any(
        feature = "tower-sessions",
        feature = "tower-sessions-014",
        feature = "actix-session"
    ))]
    expiry_date: time::OffsetDateTime,
    #[cfg(not(any(
        feature = "tower-sessions",
        feature = "tower-sessions-014",
        feature = "actix-session"
    )))]
    #[serde(rename = "expiry_date")]
    _expiry: serde::de::IgnoredAny,
}

impl TowerRecord {
    /// The expiry date's unix second, where this build reads dates.
    fn expires_at(&self) -> Option<i64> {
        #[cfg(any(
            feature = "tower-sessions",
            feature = "tower-sessions-014",
            feature = "actix-session"
        ))]
        return Some(self.expiry_date.unix_timestamp());
        #[cfg(not(any(
            feature = "tower-sessions",
            feature = "tower-sessions-014",
            feature = "actix-session"
        )))]
        None
    }
}

/// URL-safe base64 without padding (RFC 4648 §5), for ids.
mod base64url {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    fn value(c: u8) -> Option<u32> {
        ALPHABET.iter().position(|&a| a == c).map(|v| v as u32)
    }

    pub(super) fn encode(bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    /// `None` for a character outside the alphabet, a length no byte
    /// string has, or bits left over (a non-canonical form).
    pub(super) fn decode(text: &[u8]) -> Option<Vec<u8>> {
        if text.len() % 4 == 1 {
            return None;
        }
        let mut out = Vec::with_capacity(text.len() * 3 / 4);
        for chunk in text.chunks(4) {
            let mut n = 0u32;
            for (i, &c) in chunk.iter().enumerate() {
                n |= value(c)? << (18 - 6 * i);
            }
            let bytes = chunk.len() - 1;
            for i in 0..bytes {
                out.push((n >> (16 - 8 * i)) as u8);
            }
            // The bits after the last whole byte must be zero.
            if n & ((1 << (24 - 8 * bytes)) - 1) != 0 {
                return None;
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_round_trips_and_refuses_other_text() {
        for len in 0..24 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let text = base64url::encode(&bytes);
            assert_eq!(base64url::decode(text.as_bytes()).unwrap(), bytes);
        }
        assert_eq!(base64url::encode(&[0xfb, 0xff]), "-_8");
        assert!(base64url::decode(b"ab+c").is_none(), "standard alphabet");
        assert!(base64url::decode(b"abcde").is_none(), "impossible length");
        assert!(base64url::decode(b"-_9").is_none(), "bits left over");
    }

    #[test]
    fn tower_keys_name_their_ids() {
        let source = Source::tower_sessions_redis_store();
        let id = SessionId::from_slice(&[7u8; 16]).unwrap();
        let key = source.key_of(&id).unwrap();
        assert_eq!(key.len(), 22);
        assert_eq!(source.id_of(key.as_bytes(), IdWidth::Bits128), Ok(id));
        assert_eq!(
            source
                .id_of(key.as_bytes(), IdWidth::Bits160)
                .unwrap_err()
                .reason(),
            "id"
        );
        for other in ["sp:{0a}:h", "session:abc", "", "AAAAAAAAAAAAAAAAAAAAAAA"] {
            assert!(source.id_of(other.as_bytes(), IdWidth::Bits128).is_err());
        }
    }

    /// actix-session's keys name the first 16 bytes of their SHA-256, at
    /// 128 bits only; other text of 64 characters is no key.
    #[test]
    fn actix_keys_pack_into_48_bytes_and_back() {
        let mut keys = vec![
            "0".repeat(64),
            "z".repeat(64),
            "Z".repeat(64),
            format!("{}1", "0".repeat(63)),
        ];
        for _ in 0..200 {
            keys.push(
                (0..64)
                    .map(|_| BASE62[rand::random_range(0..62)] as char)
                    .collect(),
            );
        }
        for key in &keys {
            let packed = pack_actix_key(key.as_bytes()).unwrap();
            assert_eq!(&unpack_actix_key(&packed), key);
        }
        assert_eq!(pack_actix_key(&[b'0'; 64]), Some([0; PACKED_KEY_BYTES]));
        assert_ne!(
            pack_actix_key(keys[2].as_bytes()),
            pack_actix_key(keys[1].as_bytes())
        );
        for bad in [
            "",
            &"a".repeat(63),
            &"a".repeat(65),
            &format!("{}-", "a".repeat(63)),
        ] {
            assert_eq!(pack_actix_key(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn actix_keys_name_their_hashed_ids() {
        let source = Source::new("", IdForm::ActixSessionKey, ValueForm::JsonMap);
        let key = "aZ09".repeat(16);
        let id = source.id_of(key.as_bytes(), IdWidth::Bits128).unwrap();
        assert_eq!(id, hashed_id(key.as_bytes()));
        // SHA-256("abc") begins ba7816bf 8f01cfea 414140de 5dae2223.
        assert_eq!(
            hex::encode(hashed_id(b"abc").as_bytes()),
            "ba7816bf8f01cfea414140de5dae2223"
        );
        assert_ne!(
            hashed_id(key.as_bytes()),
            hashed_id("aZ09".repeat(15).as_bytes())
        );
        for other in ["aZ0-".repeat(16), "a".repeat(63), "a".repeat(65)] {
            assert!(
                source.id_of(other.as_bytes(), IdWidth::Bits128).is_err(),
                "{other}"
            );
        }
        assert!(source.id_of(key.as_bytes(), IdWidth::Bits160).is_err());
        assert_eq!(
            source.key_of(&id),
            None,
            "the key cannot be told from the id"
        );
        assert_eq!(source.key_glob(IdWidth::Bits128), "?".repeat(64));
    }

    /// The ACL key pattern is as long as the keys' ids, for every width.
    #[test]
    fn key_globs_match_the_keys_of_ids() {
        for width in [IdWidth::Bits128, IdWidth::Bits160] {
            let id = SessionId::from_slice(&vec![0xfe; width.bytes()]).unwrap();
            for (source, prefix) in [
                (Source::tower_sessions_redis_store(), ""),
                (Source::new("s*:", IdForm::Hex, ValueForm::JsonMap), r"s\*:"),
            ] {
                let glob = source.key_glob(width);
                let key = source.key_of(&id).unwrap();
                let rest = glob.strip_prefix(prefix).unwrap();
                assert!(rest.chars().all(|c| c == '?'), "{glob}");
                assert_eq!(rest.len(), key.len() - source.prefix.len(), "{glob} {key}");
            }
        }
        assert_eq!(
            Source::tower_sessions_redis_store().key_glob(IdWidth::Bits128),
            "?".repeat(22)
        );
    }

    #[test]
    fn prefixed_hex_keys_and_patterns() {
        let source = Source::new("sess:[x]", IdForm::Hex, ValueForm::JsonMap);
        assert_eq!(source.pattern(), r"sess:\[x\]*");
        let id = SessionId::from_slice(&[0xab; 20]).unwrap();
        let key = source.key_of(&id).unwrap();
        assert_eq!(source.id_of(key.as_bytes(), IdWidth::Bits160), Ok(id));
        assert!(source.id_of(b"other:abab", IdWidth::Bits160).is_err());
    }

    #[test]
    fn values_decode_by_form_or_are_skipped() {
        let data: HashMap<String, Value> =
            HashMap::from([("user".to_owned(), serde_json::json!({"id": 5, "n": [1, 2]}))]);
        let json = serde_json::to_vec(&data).unwrap();
        let mp = rmp_serde::to_vec(&data).unwrap();
        let key = Source::tower_sessions_redis_store()
            .key_of(&SessionId::from_slice(&[1; 16]).unwrap())
            .unwrap();
        let decode = |form, value: &[u8], ms| {
            Source::new("", IdForm::Base64Url, form).decode(
                key.as_bytes(),
                IdWidth::Bits128,
                "string",
                Some(value),
                ms,
            )
        };
        let taken = decode(ValueForm::JsonMap, &json, 1_700_000_000_001).unwrap();
        assert_eq!(taken.data, data);
        assert_eq!(taken.expires_at, 1_700_000_001, "rounded up");
        assert_eq!(
            decode(ValueForm::MsgpackMap, &mp, 5_000).unwrap().data,
            data
        );
        assert_eq!(
            decode(ValueForm::JsonMap, &mp, 5_000).unwrap_err().reason(),
            "value"
        );
        assert_eq!(
            decode(ValueForm::JsonMap, &json, -1).unwrap_err(),
            Skip::NoExpiry
        );
        assert_eq!(
            decode(ValueForm::JsonMap, &json, -2).unwrap_err(),
            Skip::Gone
        );
        let wrong = Source::tower_sessions_redis_store()
            .decode(key.as_bytes(), IdWidth::Bits128, "hash", None, -1)
            .unwrap_err();
        assert_eq!(wrong, Skip::WrongType("hash".into()));
    }

    /// A tower record's expiry date is the second its key's `EXAT` set:
    /// a key a reshard moved a few milliseconds off keeps it; one whose
    /// expiry moved further keeps the key's, rounded up.
    #[cfg(feature = "tower-sessions")]
    #[test]
    fn tower_records_keep_their_seconds_through_a_reshard() {
        let at = 1_900_000_000i64;
        let record = tower_sessions_core::session::Record {
            id: tower_sessions_core::session::Id(7),
            data: HashMap::from([("n".to_owned(), serde_json::json!(1))]),
            expiry_date: time::OffsetDateTime::from_unix_timestamp(at).unwrap(),
        };
        let value = rmp_serde::to_vec(&record).unwrap();
        let source = Source::tower_sessions_redis_store();
        let key = source
            .key_of(&SessionId::from_slice(&[1; 16]).unwrap())
            .unwrap();
        let decode = |ms| {
            source
                .decode(key.as_bytes(), IdWidth::Bits128, "string", Some(&value), ms)
                .unwrap()
                .expires_at
        };
        let ms = at * 1000;
        assert_eq!(decode(ms), at as u64);
        assert_eq!(decode(ms + 4), at as u64, "a reshard's drift");
        assert_eq!(decode(ms - 3), at as u64);
        assert_eq!(decode(ms + 60_004), at as u64 + 61, "an EXPIRE of the key");
    }
}
